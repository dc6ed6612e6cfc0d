"""Benchmark: the caching pool's alloc+free pair against raw aclrtMalloc+aclrtFree and torch.empty.

For 512 B, 1 MiB and 64 MiB, measured side by side in one run (medians of repeated batches, after a
warm-up):

  pool pair   buf = acl_rt.alloc(n, stream=s); buf.close()       (the public API, DeviceBuffer and all)
  (no stream) acl_rt.alloc(n).close()                            (the current stream, found per call)
  pool core   the C core alone (acl_rt._native Pool.malloc / free) - what the Python wrapper adds
  raw pair    aclrtMalloc(&p, n, 0); aclrtFree(p) through cffi   (the runtime: simulator or CANN)
  torch       torch.empty(n, dtype=torch.uint8) and its release  (PyTorch's CPU allocator)

Targets (issue 3): pool pair <= 3 us median and >= 20x cheaper than the raw pair at 1 MiB.
Run: .venv/bin/python tools/bench_pool.py [--quick]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time


def bench(fn, *, budget: float, batch: int) -> float:
    """Median seconds per call of fn(), over batches of `batch` calls, for about `budget` seconds."""
    for _ in range(max(3, batch // 10)):   # warm-up
        fn()
    samples = []
    t_end = time.perf_counter() + budget
    while time.perf_counter() < t_end or len(samples) < 5:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples)


def fmt(sec: float) -> str:
    if sec < 1e-3:
        return f"{sec * 1e6:8.2f} us"
    return f"{sec * 1e3:8.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    args = ap.parse_args()
    budget = 0.3 if args.quick else 1.0

    import acl_rt
    from acl_rt._lib import backend, ffi
    try:
        import torch
    except ImportError:
        torch = None

    dev = acl_rt.Device(0)
    s = dev.create_stream()
    pool = dev.memory_resource
    if not isinstance(pool, acl_rt.MemoryPool):
        raise SystemExit("the device's memory resource is not the pool (CANNA_NO_MEMORY_CACHING / CANNA_SIM_CHECK?)")
    L = backend().lib
    cell = ffi.new("void **")
    core = pool._core
    key = s._ih
    info = acl_rt.backend_info()
    print(f"backend: {info['backend']} ({info['library']}), SoC {info['soc_name']}; "
          f"torch {torch.__version__ if torch else 'not installed'}")
    gc.disable()

    def pool_pair(n):
        def f():
            acl_rt.alloc(n, stream=s).close()
        return f

    def pool_cur(n):
        def f():
            acl_rt.alloc(n).close()
        return f

    def core_pair(n):
        def f():
            core.free(core.malloc(n, key))
        return f

    def raw_pair(n):
        def f():
            if L.aclrtMalloc(cell, n, 0):
                raise RuntimeError("aclrtMalloc failed")
            L.aclrtFree(cell[0])
        return f

    def torch_pair(n):
        def f():
            t = torch.empty(n, dtype=torch.uint8)
            del t
        return f

    rows = []
    for name, n in (("512 B", 512), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20)):
        big = n >= (16 << 20)
        r = {"size": name,
             "pool": bench(pool_pair(n), budget=budget, batch=2000),
             "cur": bench(pool_cur(n), budget=budget / 2, batch=2000),
             "core": bench(core_pair(n), budget=budget / 2, batch=5000),
             "raw": bench(raw_pair(n), budget=budget, batch=2 if big else 200),
             "torch": bench(torch_pair(n), budget=budget / 2, batch=50 if big else 2000) if torch else None}
        rows.append(r)
    gc.enable()

    print()
    print(f"{'size':>7} | {'pool pair':>11} | {'(no stream)':>11} | {'pool core':>11} | {'raw aclrtMalloc+Free':>20} | "
          f"{'torch.empty':>11} | {'raw/pool':>9} | {'pool/torch':>10}")
    print("-" * 114)
    for r in rows:
        tq = fmt(r["torch"]) if r["torch"] else "n/a"
        ratio_t = f"{r['pool'] / r['torch']:9.2f}x" if r["torch"] else "n/a"
        print(f"{r['size']:>7} | {fmt(r['pool']):>11} | {fmt(r['cur']):>11} | {fmt(r['core']):>11} | {fmt(r['raw']):>20} | {tq:>11} | "
              f"{r['raw'] / r['pool']:8.1f}x | {ratio_t:>10}")
    one = rows[1]
    ok1 = one["pool"] <= 3e-6
    ok2 = one["raw"] / one["pool"] >= 20
    print()
    print(f"target at 1 MiB: pool pair <= 3 us: {'met' if ok1 else 'NOT met'} ({fmt(one['pool']).strip()}); "
          f">= 20x cheaper than raw: {'met' if ok2 else 'NOT met'} ({one['raw'] / one['pool']:.1f}x)")
    s.close()


if __name__ == "__main__":
    main()
