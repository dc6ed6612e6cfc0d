#!/usr/bin/env python3
"""Benchmark: canna's convolution kernels at real model layer shapes against PyTorch's CPU kernels.

One row per layer shape of resnet18, mobilenet_v3_small and convnext_atto (batch 8, 64x64 images
unless the row says 224): one forward plus the backward the layer needs in training (grad_input
except for the stem, whose input needs none; grad_weight; grad_bias where the layer has a bias),
float32.

- ``canna``: ``kernels.conv2d`` then ``kernels.backward.conv2d`` on torch tensors (torch in, torch
  out; aclnnConvolution + aclnnConvolutionBackward on the simulator);
- ``torch``: ``torch.ops.aten.convolution`` then ``torch.ops.aten.convolution_backward``, the two
  calls PyTorch's autograd makes for ``F.conv2d`` (oneDNN / its own CPU kernels).

Both sides get the same number of threads: ``torch.set_num_threads(N)`` and the simulator's
``CANNA_SIM_THREADS=N`` (read when the runtime starts, so each thread count runs in a fresh
interpreter: ``--threads``). Each figure is the median over interleaved rounds; the spread is the
lowest and highest per-round speed ratio (tools/_benchutil.py). Speed ratio = torch time / canna
time (above 1x canna is faster).

    .venv/bin/python tools/bench_conv.py [--quick] [--threads N] [--only NAME,...] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TOOLS))
sys.path.insert(0, _TOOLS)

from _benchutil import bench_rounds, child_rows, fmt  # noqa: E402

#: (name, input [N, C, H, W], weight [O, C/groups, KH, KW], stride, padding, groups, bias, grad_input)
SHAPES = (
    ("resnet18 stem 7x7/2", (8, 3, 64, 64), (64, 3, 7, 7), 2, 3, 1, False, False),
    ("resnet18 layer1 3x3", (8, 64, 16, 16), (64, 64, 3, 3), 1, 1, 1, False, True),
    ("resnet18 layer2 3x3/2", (8, 64, 16, 16), (128, 64, 3, 3), 2, 1, 1, False, True),
    ("resnet18 layer2 3x3", (8, 128, 8, 8), (128, 128, 3, 3), 1, 1, 1, False, True),
    ("resnet18 down 1x1/2", (8, 64, 16, 16), (128, 64, 1, 1), 2, 0, 1, False, True),
    ("resnet18 layer3 3x3", (8, 256, 4, 4), (256, 256, 3, 3), 1, 1, 1, False, True),
    ("resnet18 layer4 3x3", (8, 512, 2, 2), (512, 512, 3, 3), 1, 1, 1, False, True),
    ("resnet18 224 stem 7x7/2", (8, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, False, False),
    ("resnet18 224 layer1 3x3", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, False, True),
    ("mobilenet stem 3x3/2", (8, 3, 64, 64), (16, 3, 3, 3), 2, 1, 1, False, False),
    ("mobilenet dw 3x3/2 16ch", (8, 16, 32, 32), (16, 1, 3, 3), 2, 1, 16, False, True),
    ("mobilenet 1x1 16->72", (8, 16, 16, 16), (72, 16, 1, 1), 1, 0, 1, False, True),
    ("mobilenet dw 5x5/2 96ch", (8, 96, 8, 8), (96, 1, 5, 5), 2, 2, 96, False, True),
    ("mobilenet dw 5x5 240ch", (8, 240, 4, 4), (240, 1, 5, 5), 1, 2, 240, False, True),
    ("grouped 1x1 g4 64ch", (8, 64, 16, 16), (64, 16, 1, 1), 1, 0, 4, False, True),
    ("convnext stem 4x4/4", (8, 3, 64, 64), (40, 3, 4, 4), 4, 0, 1, True, False),
    ("convnext dw 7x7 40ch", (8, 40, 16, 16), (40, 1, 7, 7), 1, 3, 40, True, True),
    ("convnext dw 7x7 320ch", (8, 320, 2, 2), (320, 1, 7, 7), 1, 3, 320, True, True),
    ("convnext down 2x2/2", (8, 40, 16, 16), (80, 40, 2, 2), 2, 0, 1, True, True),
)
#: the rows of a --quick run: one per kind of layer (GEMM, deep GEMM, depthwise, large depthwise)
QUICK = ("resnet18 layer1 3x3", "resnet18 layer4 3x3", "mobilenet dw 3x3/2 16ch", "convnext dw 7x7 40ch")


def _fmt_ms(sec):
    return "-" if sec is None else f"{sec * 1e3:.2f}"


def measure_shape(row, *, budget: float, rounds: int = 5, check: bool = True) -> dict:
    """One row of :data:`SHAPES` in this process: seconds per forward + backward of ``canna`` and
    ``torch`` (medians), the speed ratio torch / canna and its spread over the rounds."""
    import torch

    import kernels
    name, xs, ws, stride, pad, groups, has_bias, need_gi = row
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g)
    w = torch.randn(ws, generator=g) * 0.1
    b = torch.randn(ws[0], generator=g) if has_bias else None
    y = torch.ops.aten.convolution(x, w, b, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups)
    gy = torch.randn(y.shape, generator=g)
    mask = [need_gi, True, has_bias]

    def run_torch():
        torch.ops.aten.convolution(x, w, b, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups)
        return torch.ops.aten.convolution_backward(gy, x, w, [ws[0]] if has_bias else None, [stride] * 2, [pad] * 2,
                                                   [1, 1], False, [0, 0], groups, mask)

    def run_canna():
        yc = kernels.conv2d(x, w, b, stride=stride, padding=pad, groups=groups)
        return yc, kernels.backward.conv2d(gy, x, w, stride=stride, padding=pad, groups=groups, output_mask=mask)

    if check:   # the same results (float32 rounding) before timing anything
        yc, grads = run_canna()
        ref = run_torch()
        assert torch.allclose(yc, y, rtol=1e-3, atol=1e-3), name
        for got, want in zip(grads, ref):
            assert (got is None) == (want is None) or want is None, name
            if got is not None and want is not None:
                assert torch.allclose(got, want, rtol=1e-3, atol=1e-2 * float(want.abs().max())), name
    flops = 2 * y.numel() * ws[1] * ws[2] * ws[3] * (1 + int(need_gi) + 1)
    batch = max(1, min(20, int(2e8 / max(flops, 1))))
    per = bench_rounds({"canna": run_canna, "torch": run_torch}, budget=budget, batch=batch, rounds=rounds)
    ratios = [t / c for t, c in zip(per["torch"]["rounds"], per["canna"]["rounds"])]
    return {"name": name, "input": list(xs), "weight": list(ws), "stride": stride, "padding": pad, "groups": groups,
            "bias": has_bias, "grad_input": need_gi, "canna_s": per["canna"]["median"],
            "torch_s": per["torch"]["median"], "ratio": per["torch"]["median"] / per["canna"]["median"],
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


def measure_here(*, quick: bool, only=None) -> list:
    """Every row (``only``: names to keep) in this process, with its current thread settings."""
    rows = [r for r in SHAPES if (only is None or r[0] in only) and (r[0] in QUICK if quick else True)]
    budget = 0.2 if quick else 2.0
    return [measure_shape(r, budget=budget, rounds=3 if quick else 5) for r in rows]


def measure(threads: int, *, quick: bool, only=None, timeout: float = 1800) -> dict:
    """Every row in a fresh interpreter with ``threads`` torch threads and simulator threads
    (``_benchutil.child_rows``). Returns ``{"threads", "loadavg": [before, after], "rows": [...]}``."""
    return child_rows(__file__, threads, quick=quick, only=only, timeout=timeout)


def table(result) -> str:
    """The rows as a text table of at most 100 columns."""
    lines = [f"{'layer (batch 8, 64x64 unless 224)':34} {'canna ms':>9} {'torch ms':>9} {'speed':>7} "
             f"{'spread':>13}"]
    for r in result["rows"]:
        lines.append(f"{r['name']:34} {_fmt_ms(r['canna_s']):>9} {_fmt_ms(r['torch_s']):>9} {r['ratio']:>6.2f}x "
                     f"{r['ratio_min']:>5.2f}-{r['ratio_max']:.2f}x")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short measurements of four rows (QUICK)")
    ap.add_argument("--threads", type=int, default=1, help="torch and simulator threads (default 1)")
    ap.add_argument("--only", default="", help="comma-separated row names")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    only = [s.strip() for s in args.only.split(",") if s.strip()] or None
    if only:
        bad = [s for s in only if s not in {r[0] for r in SHAPES}]
        if bad:
            ap.error(f"unknown row(s): {', '.join(bad)}")
    if args.child:
        import torch
        torch.set_num_threads(args.threads)
        print(json.dumps(measure_here(quick=args.quick, only=only)))
        return 0
    res = measure(args.threads, quick=args.quick, only=only)
    print(f"conv2d forward + backward, float32, {args.threads} thread(s) each; load average "
          f"{res['loadavg'][0]:.2f} before, {res['loadavg'][1]:.2f} after; speed = torch / canna")
    print(table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["SHAPES", "QUICK", "measure", "measure_here", "measure_shape", "table", "fmt"]
