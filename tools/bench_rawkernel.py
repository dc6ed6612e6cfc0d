#!/usr/bin/env python3
"""Launch overhead and throughput of custom kernels (kernels.RawKernel), measured side by side with
PyTorch and NumPy in the same run (DESIGN.md §9: ratios, never timed assertions).

    python tools/bench_rawkernel.py [--repeat 20] [--large-shape 32,1024,1024] [--blocks 0]

1. Launch overhead (launch + stream synchronize, 1 block): an empty kernel, and the seed's add
   kernel on 1 element, against ``torch.add`` on 1 element and ``kernels.add`` on 1 element (when the
   op library provides it).
2. The add kernel on a small array (1000 float32) against ``torch.add(out=)`` and ``numpy.add(out=)``.
3. The add kernel on a 32x1024x1024 float32 array (the seed's large case) against ``torch.add(out=)``
   and ``numpy.add(out=)``, on PyTorch and NumPy inputs (zero-copy).

Times are medians over rounds, in microseconds (or milliseconds for the large case); "x torch" is the
ratio RawKernel / framework (below 1 is faster). On the simulator every kernel runs on the CPU, so
the large case measures memory bandwidth through the simulated AI-core threads.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import acl_rt  # noqa: E402
import kernels  # noqa: E402

ADD = r'''
#include "canna_kernel.h"
CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
    uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint32_t i = lo; i < n && i < lo + per; ++i) ((float*)z)[i] = ((float*)x)[i] + ((float*)y)[i];
}
CANNA_KERNEL void empty(void) {}
'''


def per_call(fn, *, inner: int, rounds: int = 7) -> float:
    """Median seconds per call of fn() over `rounds` rounds of `inner` calls (after a warm-up)."""
    for _ in range(max(1, inner // 10)):
        fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def row(label, secs, ref=None, unit=1e6, suffix="us"):
    ratio = f"{secs / ref:7.2f}x" if ref else "      -"
    print(f"  {label:<52} {secs * unit:10.2f} {suffix}   {ratio}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20, help="launches per round for the large case (default 20)")
    ap.add_argument("--large-shape", default="32,1024,1024", help="shape of the large case (default 32,1024,1024)")
    ap.add_argument("--blocks", type=int, default=0,
                    help="blocks for the large case (default: the device's vector core count)")
    args = ap.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        torch = None

    acl_rt.init()
    dev = acl_rt.Device(0)
    info = acl_rt.backend_info()
    mod = kernels.RawModule(ADD).compile()
    add, empty = mod.get_function("add_custom"), mod.get_function("empty")
    s = acl_rt.current_stream()
    print(f"backend {info['backend']} ({info['soc_name']}, memory model {info['memory_model']}), "
          f"{os.cpu_count()} CPUs, torch {torch.__version__ if torch else 'absent'}, numpy {np.__version__}; "
          f"kernel binary from the {mod.cache} cache")

    # 1. launch overhead ------------------------------------------------------------------------
    print("\n1. launch overhead, 1 element, launch + synchronize (per call)   ratio = RawKernel / torch.add")
    x1, y1, z1 = (np.ones(1, np.float32) for _ in range(3))
    t_torch = None
    if torch is not None:
        a1, b1, c1 = torch.ones(1), torch.ones(1), torch.empty(1)
        t_torch = per_call(lambda: torch.add(a1, b1, out=c1), inner=20000)
        row("torch.add(a, b, out=c), 1 element", t_torch)
    row("RawKernel empty kernel: launch(1) + synchronize",
        per_call(lambda: (empty.launch(1), s.synchronize()), inner=5000), t_torch)
    row("RawKernel add, NumPy arrays: launch(1) + synchronize",
        per_call(lambda: (add.launch(1, x1, y1, z1, 1), s.synchronize()), inner=5000), t_torch)
    if torch is not None:
        row("RawKernel add, torch tensors: launch(1) + synchronize",
            per_call(lambda: (add.launch(1, a1, b1, c1, 1), s.synchronize()), inner=5000), t_torch)
    row("RawKernel empty kernel: launch(1) only (queued, no sync)", per_call(lambda: empty.launch(1), inner=5000),
        t_torch)
    s.synchronize()
    kadd = getattr(kernels, "add", None)
    if kadd is not None:
        try:
            row("kernels.add, 1 element (+ synchronize)", per_call(lambda: (kadd(x1, y1), s.synchronize()),
                                                                    inner=5000), t_torch)
        except Exception as e:  # the op library may not take these inputs yet
            print(f"  kernels.add: not measured ({type(e).__name__}: {e})")
    else:
        print("  kernels.add: not available on this branch (the op library is built separately)")
    np.add(x1, y1, out=z1)
    row("numpy.add(x, y, out=z), 1 element", per_call(lambda: np.add(x1, y1, out=z1), inner=20000), t_torch)

    # 2. small array --------------------------------------------------------------------------------
    n = 1000
    print(f"\n2. {n} float32 elements, launch + synchronize (per call)          ratio = RawKernel / torch.add")
    xs, ys, zs = (np.random.rand(n).astype(np.float32) for _ in range(3))
    t_torch = None
    if torch is not None:
        a, b, c = torch.from_numpy(xs), torch.from_numpy(ys), torch.from_numpy(zs)
        t_torch = per_call(lambda: torch.add(a, b, out=c), inner=10000)
        row("torch.add(out=)", t_torch)
    row("numpy.add(out=)", per_call(lambda: np.add(xs, ys, out=zs), inner=10000), t_torch)
    for blocks in (1, 4):
        row(f"RawKernel add, {blocks} block{'s' if blocks > 1 else ''}",
            per_call(lambda: (add.launch(blocks, xs, ys, zs, n), s.synchronize()), inner=2000), t_torch)

    # 3. large array ------------------------------------------------------------------------------
    shape = tuple(int(v) for v in args.large_shape.split(","))
    count = int(np.prod(shape))
    blocks = args.blocks or dev.properties.vector_core_num or 8
    print(f"\n3. {'x'.join(map(str, shape))} float32 ({count * 4 / 2**20:.0f} MiB per array), "
          f"{args.repeat} launches per round (per call)   ratio = RawKernel / torch.add")
    rng = np.random.default_rng(0)
    xl = rng.random(count, dtype=np.float32).reshape(shape)
    yl = rng.random(count, dtype=np.float32).reshape(shape)
    zl = np.empty_like(xl)
    t_torch = None
    if torch is not None:
        al, bl, cl = torch.from_numpy(xl), torch.from_numpy(yl), torch.empty(shape)
        t_torch = per_call(lambda: torch.add(al, bl, out=cl), inner=args.repeat, rounds=3)
        row("torch.add(out=)", t_torch, unit=1e3, suffix="ms")
    row("numpy.add(out=)", per_call(lambda: np.add(xl, yl, out=zl), inner=args.repeat, rounds=3), t_torch,
        unit=1e3, suffix="ms")

    def launch_np():
        add.launch(blocks, xl, yl, zl, count)
        s.synchronize()
    row(f"RawKernel add, NumPy arrays, {blocks} blocks", per_call(launch_np, inner=args.repeat, rounds=3), t_torch,
        unit=1e3, suffix="ms")
    assert np.array_equal(zl, xl + yl)
    if torch is not None:
        def launch_torch():
            add.launch(blocks, al, bl, cl, count)
            s.synchronize()
        row(f"RawKernel add, torch tensors, {blocks} blocks", per_call(launch_torch, inner=args.repeat, rounds=3),
            t_torch, unit=1e3, suffix="ms")
        assert torch.equal(cl, al + bl)
        mod3 = kernels.RawModule(ADD, options=("-O3",)).compile()
        add3 = mod3.get_function("add_custom")

        def launch_o3():
            add3.launch(blocks, al, bl, cl, count)
            s.synchronize()
        row(f"RawKernel add built with -O3, torch tensors, {blocks} blocks",
            per_call(launch_o3, inner=args.repeat, rounds=3), t_torch, unit=1e3, suffix="ms")
    gb = 3 * count * 4 / 1e9
    print(f"  (each add moves {gb:.2f} GB: 2 reads + 1 write)")


if __name__ == "__main__":
    main()
