"""Timing helpers shared by the benchmark scripts of ``tools/`` (bench.py and bench_*.py).

Every figure is a median of per-call times over repeated batches, after a warm-up; candidates
compared with each other are measured in interleaved rounds (each round gives every candidate its
share of time in turn), so that load from other processes on a shared machine hits all of them
alike. Ratios, never absolute numbers, are what the scripts compare.
"""
from __future__ import annotations

import os
import json
import platform
import statistics
import subprocess
import sys
import time

__all__ = ["bench", "bench_many", "bench_rounds", "per_call", "fmt", "machine_info", "WIDE_SPREAD", "wide_spread"]

#: a ratio whose spread over interleaved rounds (highest / lowest per-round ratio) exceeds this is
#: flagged "wide": the box was loaded or the measurement too short to read the ratio closely
WIDE_SPREAD = 1.25


def wide_spread(lo: float, hi: float) -> bool:
    """Whether the spread ``lo``-``hi`` of a ratio over rounds is wide (``hi / lo > WIDE_SPREAD``)."""
    return hi > WIDE_SPREAD * lo


def bench_many(cands: dict, *, budget: float, batch: int, rounds: int = 5, warmup: int | None = None,
               min_batches: int = 2) -> dict:
    """Median seconds per call of each candidate, measured in interleaved rounds.

    Args:
        cands: ``name -> fn`` or ``name -> (fn, sync or None)``; ``fn()`` is one call, ``sync()``
            (if given) is called once after each batch and its time is part of the batch's.
        budget: seconds for all the measurement (shared out evenly over candidates and rounds).
        batch: calls per timed batch.
        rounds: interleaved rounds; in each, every candidate runs batches for its share of time
            (at least ``min_batches`` batches).
        warmup: warm-up calls per candidate (default ``max(2, min(batch, 10))``).

    Returns:
        ``name -> median seconds per call`` over all of that candidate's batches.
    """
    cands = {k: (v if isinstance(v, tuple) else (v, None)) for k, v in cands.items()}
    warm = max(2, min(batch, 10)) if warmup is None else warmup
    for fn, sync in cands.values():   # warm-up (caches, plans, allocators, thread pools)
        for _ in range(warm):
            fn()
        if sync:
            sync()
    share = budget / max(1, rounds * len(cands))
    samples = {k: [] for k in cands}
    for _ in range(max(1, rounds)):
        for k, (fn, sync) in cands.items():
            t_end = time.perf_counter() + share
            n = 0
            while n < min_batches or time.perf_counter() < t_end:
                t0 = time.perf_counter()
                for _ in range(batch):
                    fn()
                if sync:
                    sync()
                samples[k].append((time.perf_counter() - t0) / batch)
                n += 1
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_rounds(cands: dict, *, budget: float, batch: int, rounds: int = 5, warmup: int | None = None) -> dict:
    """:func:`bench_many` with the spread: ``name -> {"median": s, "rounds": [s, ...]}``, each
    round's median seconds per call (rounds interleaved as in :func:`bench_many`; warm-up before
    the first only) and their median. A ratio of two candidates taken per round gives its spread
    (lowest and highest)."""
    per_round = {k: [] for k in cands}
    for i in range(max(1, rounds)):
        got = bench_many(cands, budget=budget / max(1, rounds), batch=batch, rounds=1,
                         warmup=warmup if i == 0 else 0)
        for k, v in got.items():
            per_round[k].append(v)
    return {k: {"median": statistics.median(v), "rounds": v} for k, v in per_round.items()}


def bench(fn, *, budget: float, batch: int, sync=None, rounds: int = 5, warmup: int | None = None) -> float:
    """Median seconds per call of ``fn()`` over batches of ``batch`` calls, for about ``budget`` s."""
    return bench_many({"x": (fn, sync)}, budget=budget, batch=batch, rounds=rounds, warmup=warmup)["x"]


def per_call(fn, *, inner: int, rounds: int = 7, sync=None) -> float:
    """Median seconds per call of ``fn()`` over exactly ``rounds`` batches of ``inner`` calls."""
    return bench_many({"x": (fn, sync)}, budget=0.0, batch=inner, rounds=rounds, warmup=max(1, inner // 10),
                      min_batches=1)["x"]


def fmt(sec) -> str:
    """``sec`` (seconds) as a short human string: ns, us, ms or s; ``-`` for None."""
    if sec is None:
        return "-"
    if sec < 1e-6:
        return f"{sec * 1e9:.0f} ns"
    if sec < 1e-3:
        return f"{sec * 1e6:.2f} us"
    if sec < 1.0:
        return f"{sec * 1e3:.2f} ms"
    return f"{sec:.2f} s"


def machine_info() -> dict:
    """The machine, the backend and the versions of everything a benchmark compares (JSON-able).
    Frameworks are reported only when already imported (nothing is imported here but canna)."""
    import acl_rt
    info = {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count()}
    try:
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/loadavg") as f:
            info["loadavg"] = [float(v) for v in f.read().split()[:3]]
    except OSError:
        pass
    try:
        b = acl_rt.backend_info()
        info["backend"] = {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
                           for k, v in b.items()}
    except Exception as e:   # noqa: BLE001 - report, do not fail a benchmark for it
        info["backend"] = {"error": f"{type(e).__name__}: {e}"}
    versions = {}
    try:
        from importlib.metadata import version
        versions["canna"] = version("canna")
    except Exception:   # noqa: BLE001
        versions["canna"] = None
    for mod in ("numpy", "torch", "tensorflow", "keras", "jax", "matplotlib", "rich"):
        m = sys.modules.get(mod)
        if m is not None:
            versions[mod] = getattr(m, "__version__", None)
    t = sys.modules.get("torch")
    if t is not None:
        info["torch_threads"] = t.get_num_threads()
    info["versions"] = versions
    return info


def child_rows(script: str, threads: int, *, quick: bool, only=None, timeout: float = 1800, env=None) -> dict:
    """Run ``script --child --threads N [--quick] [--only ...]`` in a fresh interpreter with ``threads``
    simulator threads (the child sets torch's); its last stdout line is its rows as JSON. Returns
    ``{"threads", "loadavg": [before, after], "rows": [...]}``.

    Raises:
        RuntimeError: the child failed (its exit code and the end of its stderr).
    """
    env = dict(os.environ, CANNA_SIM_THREADS=str(threads), CANNA_BACKEND=os.environ.get("CANNA_BACKEND", "sim"),
               **(env or {}))
    cmd = [sys.executable, os.path.abspath(script), "--child", "--threads", str(threads)]
    if quick:
        cmd.append("--quick")
    if only:
        cmd += ["--only", ",".join(only)]
    before = os.getloadavg()[0]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"threads": threads, "loadavg": [before, os.getloadavg()[0]], "rows": rows}
