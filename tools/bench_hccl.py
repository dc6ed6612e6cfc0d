#!/usr/bin/env python3
"""All-reduce of a float32 tensor (default 64 MiB) between 2 processes: canna's HCCL (simulated
devices, shared memory) against torch.distributed's gloo on the same tensors, and this machine's
copy bandwidth (NumPy copy of the same bytes) for scale.

    python tools/bench_hccl.py [--mib 64] [--iters 5] [--json out.json]

Reports the algorithm bandwidth, bytes / time per all-reduce (the median of --iters runs).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _rank(rank, world, mib, iters, tmp, q):
    os.environ.setdefault("CANNA_BACKEND", "sim")
    os.environ["CANNA_SIM_DEVICES"] = str(world)
    import numpy as np
    import torch
    import torch.distributed as dist

    import acl_rt

    n = mib * 2**20 // 4
    acl_rt.Device(rank).set_current()
    info = acl_rt.root_info_from_file(os.path.join(tmp, "root"), rank)
    comm = acl_rt.Communicator.init(info, world, rank, device=rank)
    x = np.ones(n, dtype=np.float32)
    buf = acl_rt.alloc(x.nbytes)
    buf.copy_from(x)
    s = comm.device.create_stream()
    times = {"canna": [], "gloo": []}
    for _ in range(iters + 1):
        comm.barrier(stream=s).synchronize()
        t0 = time.perf_counter()
        comm.all_reduce(buf, buf, n, "float32", stream=s).synchronize()
        times["canna"].append(time.perf_counter() - t0)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/gloo", rank=rank, world_size=world)
    t = torch.ones(n, dtype=torch.float32)
    for _ in range(iters + 1):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times["gloo"].append(time.perf_counter() - t0)
    dist.destroy_process_group()
    comm.destroy()
    q.put((rank, {k: v[1:] for k, v in times.items()}))   # the first run warms up


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.mib < 1 or args.iters < 1:
        ap.error("--mib and --iters must be >= 1")
    import numpy as np

    nbytes = args.mib * 2**20
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    copies = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        np.copyto(b, a)
        copies.append(time.perf_counter() - t0)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank, args=(r, 2, args.mib, args.iters, tmp, q)) for r in range(2)]
        for p in procs:
            p.start()
        results = dict(q.get(timeout=600) for _ in procs)
        for p in procs:
            p.join()
    row = {"bytes": nbytes, "copy_GBps": nbytes / statistics.median(copies) / 1e9}
    for k in ("canna", "gloo"):
        t = statistics.median(max(results[r][k][i] for r in results) for i in range(args.iters))
        row[f"{k}_allreduce_GBps"] = nbytes / t / 1e9
        row[f"{k}_allreduce_ms"] = t * 1e3
    row["canna_vs_copy"] = row["canna_allreduce_GBps"] / row["copy_GBps"]
    row["canna_vs_gloo"] = row["canna_allreduce_GBps"] / row["gloo_allreduce_GBps"]
    print(f"all-reduce {args.mib} MiB float32, 2 processes (median of {args.iters}):")
    print(f"  canna HCCL  {row['canna_allreduce_ms']:8.1f} ms  {row['canna_allreduce_GBps']:6.2f} GB/s")
    print(f"  gloo        {row['gloo_allreduce_ms']:8.1f} ms  {row['gloo_allreduce_GBps']:6.2f} GB/s")
    print(f"  copy bandwidth {row['copy_GBps']:.2f} GB/s; canna / copy = {row['canna_vs_copy']:.2f}, "
          f"canna / gloo = {row['canna_vs_gloo']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
