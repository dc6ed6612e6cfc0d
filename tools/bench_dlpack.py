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
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _benchutil import bench_many  # noqa: E402

BASELINE = "torch.from_dlpack(numpy array)  [baseline]"
#: the rows with the issue 4 target (<= 2x the baseline)
TARGETED = ("canna_dl.from_dlpack(torch tensor)", "canna_dl.to_torch(DeviceArray)")


def measure(*, number: int = 20000, repeat: int = 25, all_frameworks: bool = False) -> dict:
    """Seconds per call of each DLPack exchange (``label -> seconds``, the baseline first): the
    median over ``repeat`` rounds of ``number`` calls each (a quarter of that, at least 2000, for
    the untargeted rows), all rows interleaved round by round, after a warm-up.
    ``all_frameworks`` adds TensorFlow's, JAX's and NumPy's exchanges (imports them)."""
    import numpy as np
    import torch

    import canna_dl as cd

    n_arr = np.ones(16, dtype=np.float32)
    t = torch.ones(16)
    a = cd.asarray(t).copy()  # a canna-owned DeviceArray
    cd.to_torch(a)
    cd.from_dlpack(t)
    rows = [(BASELINE, lambda: torch.from_dlpack(n_arr)),
            ("canna_dl.from_dlpack(torch tensor)", lambda: cd.from_dlpack(t)),
            ("canna_dl.to_torch(DeviceArray)", lambda: cd.to_torch(a)),
            ("canna_dl.asarray(torch tensor)", lambda: cd.asarray(t)),
            ("torch.from_dlpack(DeviceArray)", lambda: torch.from_dlpack(a)),
            ("canna_dl.from_dlpack(numpy array)", lambda: cd.from_dlpack(n_arr)),
            ("numpy.from_dlpack(DeviceArray)", lambda: np.from_dlpack(a)),
            ("DeviceArray.__dlpack__(max_version=(1, 0))", lambda: a.__dlpack__(max_version=(1, 0)))]
    if all_frameworks:
        import jax
        import tensorflow as tf
        tt, jx = tf.ones(16), jax.numpy.ones(16)
        rows += [("canna_dl.to_numpy(DeviceArray)", lambda: cd.to_numpy(a)),
                 ("canna_dl.from_dlpack(tf tensor)", lambda: cd.from_dlpack(tt)),
                 ("canna_dl.to_tf(DeviceArray)", lambda: cd.to_tf(a)),
                 ("tf.experimental.dlpack.from_dlpack(torch capsule)",
                  lambda: tf.experimental.dlpack.from_dlpack(t.__dlpack__())),
                 ("canna_dl.from_dlpack(jax array)", lambda: cd.from_dlpack(jx)),
                 ("canna_dl.to_jax(DeviceArray)", lambda: cd.to_jax(a)),
                 ("jax.dlpack.from_dlpack(torch tensor)", lambda: jax.dlpack.from_dlpack(t))]
    head = [r for r in rows if r[0] == BASELINE or r[0] in TARGETED]
    rest = [r for r in rows if r not in head]
    warm = min(1000, max(10, number // 10))
    out = bench_many(dict(head), budget=0.0, batch=number, rounds=repeat, warmup=warm, min_batches=1)
    if rest:
        out.update(bench_many(dict(rest), budget=0.0, batch=max(2000, number // 4) if number >= 2000 else number,
                              rounds=repeat, warmup=warm, min_batches=1))
    return {name: out[name] for name, _ in rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--all", action="store_true", help="also time TensorFlow, JAX and NumPy exchanges")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    import canna_dl as cd

    res = measure(number=args.number, repeat=args.repeat, all_frameworks=args.all)
    print(f"canna_dl DLPack exchange, median of {args.repeat} x {args.number} calls "
          f"(memory model: {cd.memory_model()}, torch {torch.__version__}, numpy {np.__version__})")
    base = res[BASELINE] * 1e6
    width = max(len(k) for k in res) + 2
    print(f"{'operation':<{width}}{'us/call':>10}{'x baseline':>12}  target")
    for name, sec in res.items():
        us = sec * 1e6
        ratio = us / base
        target = ("<= 2.0x " + ("ok" if ratio <= 2.0 else "MISSED")) if name in TARGETED else ""
        print(f"{name:<{width}}{us:>10.3f}{ratio:>11.2f}x  {target}")
    copies = cd.copy_stats()
    print(f"copies made by canna during the run: {copies['count']} ({copies['by_reason'] or 'none'})")


if __name__ == "__main__":
    main()
