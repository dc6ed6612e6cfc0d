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
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import acl_rt  # noqa: E402
import kernels  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import bench_many, per_call  # noqa: E402

ADD = r'''
#include "canna_kernel.h"
CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
    uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint32_t i = lo; i < n && i < lo + per; ++i) ((float*)z)[i] = ((float*)x)[i] + ((float*)y)[i];
}
CANNA_KERNEL void empty(void) {}
'''


def _module():
    """The compiled module of ``ADD`` (its functions ``add_custom`` and ``empty``)."""
    return kernels.RawModule(ADD).compile()


def measure_launch(*, inner: int = 5000, rounds: int = 7, torch_on: bool = True) -> dict:
    """Launch overhead, 1 element, per call (seconds), all measured interleaved: ``torch_add``
    (torch.add(a, b, out=c); None without PyTorch), ``empty_sync`` (empty RawKernel launch(1) +
    synchronize), ``add_np_sync`` / ``add_torch_sync`` (the add kernel on NumPy arrays / torch
    tensors + synchronize), ``empty_launch`` (launch only, queued; synchronized per batch),
    ``kernels_add_sync`` (kernels.add + synchronize; None if the op library lacks it) and
    ``numpy_add`` (np.add(out=)); median over ``rounds`` batches of ``inner`` calls each."""
    torch = None
    if torch_on:
        try:
            import torch
        except ImportError:
            torch = None
    mod = _module()
    add, empty = mod.get_function("add_custom"), mod.get_function("empty")
    s = acl_rt.current_stream()
    x1, y1, z1 = (np.ones(1, np.float32) for _ in range(3))
    cands = {}
    if torch is not None:
        a1, b1, c1 = torch.ones(1), torch.ones(1), torch.empty(1)
        cands["torch_add"] = lambda: torch.add(a1, b1, out=c1)
    cands["empty_sync"] = lambda: (empty.launch(1), s.synchronize())
    cands["add_np_sync"] = lambda: (add.launch(1, x1, y1, z1, 1), s.synchronize())
    if torch is not None:
        cands["add_torch_sync"] = lambda: (add.launch(1, a1, b1, c1, 1), s.synchronize())
    cands["empty_launch"] = (lambda: empty.launch(1), s.synchronize)
    kadd = getattr(kernels, "add", None)
    if kadd is not None:
        try:
            kadd(x1, y1)
            cands["kernels_add_sync"] = lambda: (kadd(x1, y1), s.synchronize())
        except Exception:   # noqa: BLE001 - the op library may not take these inputs
            kadd = None
    cands["numpy_add"] = lambda: np.add(x1, y1, out=z1)
    r = {"torch_add": None, "add_torch_sync": None, "kernels_add_sync": None}
    r.update(bench_many(cands, budget=0.0, batch=inner, rounds=rounds, warmup=max(1, inner // 10), min_batches=1))
    return r


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
    mod = _module()
    add = mod.get_function("add_custom")
    s = acl_rt.current_stream()
    print(f"backend {info['backend']} ({info['soc_name']}, memory model {info['memory_model']}), "
          f"{os.cpu_count()} CPUs, torch {torch.__version__ if torch else 'absent'}, numpy {np.__version__}; "
          f"kernel binary from the {mod.cache} cache")

    # 1. launch overhead ------------------------------------------------------------------------
    print("\n1. launch overhead, 1 element, launch + synchronize (per call)   ratio = RawKernel / torch.add")
    m = measure_launch(torch_on=torch is not None)
    t_torch = m["torch_add"]
    if t_torch is not None:
        row("torch.add(a, b, out=c), 1 element", t_torch)
    row("RawKernel empty kernel: launch(1) + synchronize", m["empty_sync"], t_torch)
    row("RawKernel add, NumPy arrays: launch(1) + synchronize", m["add_np_sync"], t_torch)
    if m["add_torch_sync"] is not None:
        row("RawKernel add, torch tensors: launch(1) + synchronize", m["add_torch_sync"], t_torch)
    row("RawKernel empty kernel: launch(1) only (queued)", m["empty_launch"], t_torch)
    if m["kernels_add_sync"] is not None:
        row("kernels.add, 1 element (+ synchronize)", m["kernels_add_sync"], t_torch)
    else:
        print("  kernels.add: not measured (not available or does not take NumPy arrays)")
    row("numpy.add(x, y, out=z), 1 element", m["numpy_add"], t_torch)

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
