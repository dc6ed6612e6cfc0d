#!/usr/bin/env python
"""Per-call cost of canna's DLPack exchange, side by side with PyTorch's own in one run.

    .venv/bin/python tools/bench_dlpack.py [--repeat 25] [--number 20000] [--all]

The issue 4 targets: ``canna_dl.from_dlpack(torch tensor)`` and ``canna_dl.to_torch(DeviceArray)``
each cost at most 2x ``torch.from_dlpack(numpy array)``. Every figure is the median over
``--repeat`` timings of ``--number`` calls each, after a warm-up; ratios are against the torch
baseline measured in the same run. ``--all`` adds the other frameworks' exchanges for reference.
Times are noisy on a shared machine: compare ratios, not absolute numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def median_us(fn, number, repeat):
    for _ in range(max(1000, number // 10)):  # warm-up
        fn()
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--all", action="store_true", help="also time TensorFlow, JAX and NumPy exchanges")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    import canna_dl as cd

    n_arr = np.ones(16, dtype=np.float32)
    t = torch.ones(16)
    a = cd.asarray(t).copy()  # a canna-owned DeviceArray
    cd.to_torch(a)
    cd.from_dlpack(t)

    rows = [("torch.from_dlpack(numpy array)  [baseline]", lambda: torch.from_dlpack(n_arr), True),
            ("canna_dl.from_dlpack(torch tensor)", lambda: cd.from_dlpack(t), True),
            ("canna_dl.to_torch(DeviceArray)", lambda: cd.to_torch(a), True),
            ("canna_dl.asarray(torch tensor)", lambda: cd.asarray(t), False),
            ("torch.from_dlpack(DeviceArray)", lambda: torch.from_dlpack(a), False),
            ("canna_dl.from_dlpack(numpy array)", lambda: cd.from_dlpack(n_arr), False),
            ("numpy.from_dlpack(DeviceArray)", lambda: np.from_dlpack(a), False),
            ("DeviceArray.__dlpack__(max_version=(1, 0))", lambda: a.__dlpack__(max_version=(1, 0)), False)]
    if args.all:
        import jax
        import tensorflow as tf
        tt, jx = tf.ones(16), jax.numpy.ones(16)
        rows += [("canna_dl.to_numpy(DeviceArray)", lambda: cd.to_numpy(a), False),
                 ("canna_dl.from_dlpack(tf tensor)", lambda: cd.from_dlpack(tt), False),
                 ("canna_dl.to_tf(DeviceArray)", lambda: cd.to_tf(a), False),
                 ("tf.experimental.dlpack.from_dlpack(torch capsule)",
                  lambda: tf.experimental.dlpack.from_dlpack(t.__dlpack__()), False),
                 ("canna_dl.from_dlpack(jax array)", lambda: cd.from_dlpack(jx), False),
                 ("canna_dl.to_jax(DeviceArray)", lambda: cd.to_jax(a), False),
                 ("jax.dlpack.from_dlpack(torch tensor)", lambda: jax.dlpack.from_dlpack(t), False)]

    print(f"canna_dl DLPack exchange, median of {args.repeat} x {args.number} calls "
          f"(memory model: {cd.memory_model()}, torch {torch.__version__}, numpy {np.__version__})")
    base = None
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'operation':<{width}}{'us/call':>10}{'x baseline':>12}  target")
    for name, fn, targeted in rows:
        us = median_us(fn, args.number if targeted else max(2000, args.number // 4), args.repeat)
        if base is None:
            base = us
        ratio = us / base
        target = ("" if name.endswith("[baseline]") else ("<= 2.0x " + ("ok" if ratio <= 2.0 else "MISSED"))) \
            if targeted else ""
        print(f"{name:<{width}}{us:>10.3f}{ratio:>11.2f}x  {target}")
    copies = cd.copy_stats()
    print(f"copies made by canna during the run: {copies['count']} ({copies['by_reason'] or 'none'})")


if __name__ == "__main__":
    main()
