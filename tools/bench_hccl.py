#!/usr/bin/env python3
"""All-reduce of a float32 tensor (default 64 MiB) between 2 processes: canna's HCCL (simulated
devices, shared memory) against torch.distributed's gloo on the same tensors, and this machine's
copy bandwidth (a NumPy copy of the same bytes) for scale.

    .venv/bin/python tools/bench_hccl.py [--mib 64] [--rounds 5] [--batch 2] [--json out.json]

The three candidates are measured in interleaved rounds inside the 2 rank processes (each round:
``--batch`` canna all-reduces, ``--batch`` gloo all-reduces, ``--batch`` copies by rank 0 while
rank 1 waits), so load from other processes hits them alike. An all-reduce's time is the slowest
rank's. Reports the median seconds per call over all rounds, the min-max over rounds, and the
algorithm bandwidth (bytes / time). ``measure()`` is what tools/bench.py calls.
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

CANDIDATES = ("canna", "gloo", "copy")


def _rank(rank, world, nbytes, rounds, batch, tmp, q):
    os.environ.setdefault("CANNA_BACKEND", "sim")
    os.environ["CANNA_SIM_DEVICES"] = str(world)
    try:
        import numpy as np
        import torch
        import torch.distributed as dist

        import acl_rt

        n = nbytes // 4
        acl_rt.Device(rank).set_current()
        info = acl_rt.root_info_from_file(os.path.join(tmp, "root"), rank)
        comm = acl_rt.Communicator.init(info, world, rank, device=rank)
        x = np.ones(n, dtype=np.float32)
        buf = acl_rt.alloc(x.nbytes)
        buf.copy_from(x)
        s = comm.device.create_stream()
        dist.init_process_group("gloo", init_method=f"file://{tmp}/gloo", rank=rank, world_size=world)
        t = torch.ones(n, dtype=torch.float32)
        a, b = np.ones(n, dtype=np.float32), np.zeros(n, dtype=np.float32)

        def canna():
            comm.all_reduce(buf, buf, n, "float32", stream=s).synchronize()

        def gloo():
            dist.all_reduce(t)

        def copy():
            if rank == 0:
                np.copyto(b, a)

        fns = {"canna": canna, "gloo": gloo, "copy": copy}
        for fn in fns.values():   # warm-up: pages, connections, thread pools
            fn()
        times = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                comm.barrier(stream=s).synchronize()
                t0 = time.perf_counter()
                for _ in range(batch):
                    fn()
                times[k].append((time.perf_counter() - t0) / batch)
        comm.barrier(stream=s).synchronize()
        dist.destroy_process_group()
        comm.destroy()
        q.put((rank, times, None))
    except BaseException as e:   # noqa: BLE001 - reported by the parent
        q.put((rank, None, f"{type(e).__name__}: {e}"))


def measure(*, mib: int = 64, rounds: int = 5, batch: int = 2, world: int = 2, timeout: float = 600.0) -> dict:
    """Time a ``mib`` MiB float32 all-reduce (sum) between ``world`` processes, canna's HCCL and
    gloo, and a NumPy copy of the same bytes, in ``rounds`` interleaved rounds of ``batch`` calls.

    Returns ``{"bytes", "rounds", "batch", "canna_s", "gloo_s", "copy_s"}`` (median seconds per
    call over the rounds; an all-reduce round counts its slowest rank) and ``"<name>_rounds"``
    (seconds per call of each round). Raises RuntimeError if a rank fails.
    """
    if mib < 1 or rounds < 1 or batch < 1 or world < 2:
        raise ValueError("mib, rounds and batch must be >= 1 and world >= 2")
    nbytes = mib * 2**20
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank, args=(r, world, nbytes, rounds, batch, tmp, q)) for r in range(world)]
        for p in procs:
            p.start()
        try:
            got = [q.get(timeout=timeout) for _ in procs]
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
    errors = [f"rank {r}: {err}" for r, _, err in got if err]
    if errors:
        raise RuntimeError("; ".join(errors))
    res = {r: t for r, t, _ in got}
    out = {"bytes": nbytes, "rounds": rounds, "batch": batch}
    for k in CANDIDATES:
        per_round = res[0][k] if k == "copy" else [max(res[r][k][i] for r in res) for i in range(rounds)]
        out[f"{k}_rounds"] = per_round
        out[f"{k}_s"] = statistics.median(per_round)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.mib < 1 or args.rounds < 1 or args.batch < 1:
        ap.error("--mib, --rounds and --batch must be >= 1")
    load0 = os.getloadavg()
    m = measure(mib=args.mib, rounds=args.rounds, batch=args.batch)
    nb = m["bytes"]
    row = dict(m, loadavg=[round(v, 2) for v in load0], loadavg_end=[round(v, 2) for v in os.getloadavg()])
    for k in CANDIDATES:
        row[f"{k}_GBps"] = nb / m[f"{k}_s"] / 1e9
    row["canna_vs_copy"] = m["copy_s"] / m["canna_s"]
    row["canna_vs_gloo"] = m["gloo_s"] / m["canna_s"]
    print(f"all-reduce {args.mib} MiB float32, 2 processes ({args.rounds} rounds of {args.batch}; "
          f"load {row['loadavg'][0]:.2f} -> {row['loadavg_end'][0]:.2f}):")
    for k, label in (("canna", "canna HCCL"), ("gloo", "gloo"), ("copy", "np.copyto")):
        lo, hi = min(m[f"{k}_rounds"]), max(m[f"{k}_rounds"])
        print(f"  {label:10s} {m[f'{k}_s'] * 1e3:7.1f} ms  {row[f'{k}_GBps']:6.2f} GB/s  "
              f"(rounds {lo * 1e3:.1f}-{hi * 1e3:.1f} ms)")
    print(f"  canna / copy bandwidth = {row['canna_vs_copy']:.2f}, canna / gloo = {row['canna_vs_gloo']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
