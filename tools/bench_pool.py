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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _benchutil import bench_many  # noqa: E402
from _benchutil import fmt as _fmt  # noqa: E402

SIZES = (("512 B", 512), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20))


def fmt(sec: float) -> str:
    return f"{_fmt(sec):>11}"


def measure(sizes=SIZES, *, budget: float = 1.0, torch_on: bool = True) -> list:
    """Seconds per alloc+free pair, for each ``(label, nbytes)`` of ``sizes``, of ``pool``
    (acl_rt.alloc(n, stream=s).close()), ``cur`` (the same on the current stream), ``core`` (the
    pool's C core alone), ``raw`` (aclrtMalloc + aclrtFree through cffi) and ``torch``
    (torch.empty(n, dtype=uint8) and its release; None without ``torch_on`` or PyTorch),
    measured interleaved per size. Returns one dict per size (``size``, ``bytes`` and those keys).
    ``budget``: about the seconds per size and candidate.

    Raises:
        RuntimeError: the device's memory resource is not the caching pool
            (CANNA_NO_MEMORY_CACHING / CANNA_SIM_CHECK), or aclrtMalloc fails."""
    import acl_rt
    from acl_rt._lib import backend, ffi
    torch = None
    if torch_on:
        try:
            import torch
        except ImportError:
            torch = None

    dev = acl_rt.Device(0)
    s = dev.create_stream()
    try:
        pool = dev.memory_resource
        if not isinstance(pool, acl_rt.MemoryPool):
            raise RuntimeError("the device's memory resource is not the pool "
                               "(CANNA_NO_MEMORY_CACHING / CANNA_SIM_CHECK?)")
        L = backend().lib
        cell = ffi.new("void **")
        core = pool._core
        key = s._id

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
                core.free(core.malloc(n, key), False)
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
        gc.disable()
        try:
            for name, n in sizes:
                big = n >= (16 << 20)
                # the fast candidates in batches of many calls; the raw pair (a real allocation:
                # page faults at 64 MiB) in small batches
                fast = {"pool": pool_pair(n), "cur": pool_cur(n), "core": core_pair(n)}
                if torch is not None:
                    fast["torch"] = torch_pair(n)
                r = {"size": name, "bytes": n, "torch": None}
                r.update(bench_many(fast, budget=budget * len(fast), batch=2000))
                r["raw"] = bench_many({"raw": raw_pair(n)}, budget=budget, batch=2 if big else 200)["raw"]
                rows.append(r)
        finally:
            gc.enable()
        return rows
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    args = ap.parse_args()
    budget = 0.3 if args.quick else 1.0

    import acl_rt
    try:
        import torch
    except ImportError:
        torch = None
    info = acl_rt.backend_info()
    print(f"backend: {info['backend']} ({info['library']}), SoC {info['soc_name']}; "
          f"torch {torch.__version__ if torch else 'not installed'}")
    try:
        rows = measure(budget=budget)
    except RuntimeError as e:
        raise SystemExit(str(e))

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


if __name__ == "__main__":
    main()
