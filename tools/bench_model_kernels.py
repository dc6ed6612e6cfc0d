#!/usr/bin/env python3
"""Benchmark: the simulator kernels the model rows' training steps spend their time in
(tools/bench_models.py), one call each at the models' shapes, against the ATen op PyTorch runs.

Rows (float32, on torch tensors): AdamW's step of one parameter (``kernels.apply_adamw`` vs
``torch.optim.AdamW``'s single-tensor update), cross entropy forward and backward at GPT-2-tiny's
LM head, batch norm (training) and layer norm forward and backward, GELU (exact and tanh) and tanh
forward and backward, and the bias gradient's column sum. Speed ratio = torch time / canna time.

``--against DIR`` also runs every row with another checkout's build (e.g. ``/work/main``: the
kernels before a change), each side in fresh interpreters taking turns over ``--rounds`` rounds,
and prints before / after per kernel (the best round of each side: on a loaded machine the least
disturbed one) with the spread of the per-round speedup: the speedup of a kernel change measured
in one run. 1 thread each (``torch.set_num_threads(1)``, ``CANNA_SIM_THREADS=1``) unless
``--threads N``.

    .venv/bin/python tools/bench_model_kernels.py [--against DIR] [--rounds 3] [--threads 1] [--quick] [--only WORD,...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))


def _rows(torch, kernels):
    """name -> (canna fn, torch fn) of every row."""
    g = torch.Generator().manual_seed(0)
    F = torch.nn.functional
    r = {}
    # AdamW on a resnet18-like layer4 conv weight (128x128x3x3)
    n = 128 * 128 * 9
    p, gr = torch.randn(n, generator=g), torch.randn(n, generator=g)
    m, v = torch.zeros(n), torch.zeros(n)
    st = torch.tensor(3.0)
    pt, mt, vt = p.clone(), m.clone(), v.clone()

    def adam_torch():   # torch/optim/adam.py _single_tensor_adam, float32, step 3
        pt.mul_(1 - 1e-3 * 1e-2)
        mt.lerp_(gr, 0.1)
        vt.mul_(0.999).addcmul_(gr, gr, value=0.001)
        den = (vt.sqrt() / (1 - 0.999 ** 3) ** 0.5).add_(1e-8)
        pt.addcdiv_(mt, den, value=-1e-3 / (1 - 0.9 ** 3))
    r["adamw 147456 (conv 128x128x3x3)"] = (lambda: kernels.apply_adamw(p, m, v, None, gr, st), adam_torch)
    # cross entropy at gpt2-tiny's LM head: 128 tokens x 1024 classes
    x, t = torch.randn(128, 1024, generator=g), torch.randint(0, 1024, (128,), generator=g)
    _, lp = kernels.native_cross_entropy(x, t)
    go = torch.tensor(1.0)
    r["cross_entropy fwd 128x1024"] = (lambda: kernels.native_cross_entropy(x, t), lambda: F.cross_entropy(x, t))
    lpt = torch.log_softmax(x, 1)
    r["cross_entropy bwd 128x1024"] = (
        lambda: kernels.backward.cross_entropy(go, lp, t),
        lambda: torch.ops.aten._log_softmax_backward_data(
            torch.ops.aten.nll_loss_backward(go, lpt, t, None, 1, -100, torch.tensor(1.0)), lpt, 1, torch.float32))
    # batch norm (training) at the resnet18-like stem: 4x16x32x32
    xb = torch.randn(4, 16, 32, 32, generator=g)
    wb, bb, rm, rv = torch.ones(16), torch.zeros(16), torch.zeros(16), torch.ones(16)
    yb, sm, si = kernels.native_batch_norm(xb, rm, rv, wb, bb, True)
    gyb = torch.randn_like(xb)
    r["batch_norm fwd 4x16x32x32"] = (lambda: kernels.native_batch_norm(xb, rm, rv, wb, bb, True),
                                      lambda: torch.native_batch_norm(xb, wb, bb, rm, rv, True, 0.1, 1e-5))
    _, tsm, tsi = torch.native_batch_norm(xb, wb, bb, rm, rv, True, 0.1, 1e-5)
    r["batch_norm bwd 4x16x32x32"] = (
        lambda: kernels.backward.batch_norm(gyb, xb, sm, si, wb),
        lambda: torch.ops.aten.native_batch_norm_backward(gyb, xb, wb, rm, rv, tsm, tsi, True, 1e-5,
                                                          [True, True, True]))
    # layer norm at bert-tiny's hidden: 128 tokens x 128
    xl = torch.randn(128, 128, generator=g)
    wl, bl = torch.ones(128), torch.zeros(128)
    _, mu, rs = kernels.native_layer_norm(xl, (128,), wl, bl)
    gyl = torch.randn_like(xl)
    r["layer_norm fwd 128x128"] = (lambda: kernels.native_layer_norm(xl, (128,), wl, bl),
                                   lambda: torch.native_layer_norm(xl, (128,), wl, bl, 1e-5))
    _, tmu, trs = torch.native_layer_norm(xl, (128,), wl, bl, 1e-5)
    r["layer_norm bwd 128x128"] = (
        lambda: kernels.backward.layer_norm(gyl, xl, (128,), mu, rs, wl, bl),
        lambda: torch.ops.aten.native_layer_norm_backward(gyl, xl, (128,), tmu, trs, wl, bl, [True, True, True]))
    # the feed-forward activation: 128 tokens x 512
    xa, ga = torch.randn(128, 512, generator=g), torch.randn(128, 512, generator=g)
    ya = torch.tanh(xa)
    for ap in ("none", "tanh"):
        r[f"gelu({ap}) fwd 128x512"] = (lambda ap=ap: kernels.gelu(xa, ap), lambda ap=ap: F.gelu(xa, approximate=ap))
        r[f"gelu({ap}) bwd 128x512"] = (lambda ap=ap: kernels.backward.gelu(ga, xa, ap),
                                        lambda ap=ap: torch.ops.aten.gelu_backward(ga, xa, approximate=ap))
    r["tanh fwd 128x512"] = (lambda: kernels.tanh(xa), lambda: torch.tanh(xa))
    r["tanh bwd 128x512"] = (lambda: kernels.backward.tanh(ga, ya), lambda: torch.ops.aten.tanh_backward(ga, ya))
    r["bias grad: sum dim 0 of 128x512"] = (lambda: kernels.sum(ga, 0), lambda: ga.sum(0))
    return r


def measure_here(*, quick: bool, only=()) -> dict:
    """Every row (``only``: the rows whose name contains one of these) in this process:
    ``name -> {"canna": s, "torch": s}`` (medians per call)."""
    sys.path.insert(0, _TOOLS)
    import torch

    import kernels
    from _benchutil import bench_many
    out = {}
    for name, (c, t) in _rows(torch, kernels).items():
        if only and not any(w in name for w in only):
            continue
        m = bench_many({"canna": c, "torch": t}, budget=0.2 if quick else 1.0, batch=20, rounds=3)
        out[name] = m
    return out


def _child(root, threads, quick, only):
    env = dict(os.environ, CANNA_SIM_THREADS=str(threads), CANNA_BACKEND=os.environ.get("CANNA_BACKEND", "sim"),
               PYTHONPATH=root)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--threads", str(threads)]
    if quick:
        cmd.append("--quick")
    if only:
        cmd += ["--only", ",".join(only)]
    p = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise RuntimeError(f"child in {root} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", metavar="DIR", help="another checkout (built in place) to compare with")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fresh interpreters per side (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch and simulator threads (default 1)")
    ap.add_argument("--quick", action="store_true", help="short measurements")
    ap.add_argument("--only", default="", help="comma-separated words: the rows whose name contains one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads < 1 or args.rounds < 1:
        ap.error("--threads and --rounds must be >= 1")
    only = tuple(w.strip() for w in args.only.split(",") if w.strip())
    if args.child:
        import torch
        torch.set_num_threads(args.threads)
        print(json.dumps(measure_here(quick=args.quick, only=only)))
        return 0
    here = os.path.dirname(_TOOLS)
    sides = {"after": here}
    if args.against:
        sides = {"before": os.path.abspath(args.against), "after": here}
    runs = {k: [] for k in sides}
    for _ in range(args.rounds):
        for k, root in sides.items():
            runs[k].append(_child(root, args.threads, args.quick, only))
    names = list(runs["after"][0])
    print(f"kernels at the model rows' shapes, float32, {args.threads} thread(s); {'best' if args.against else 'median'} of {args.rounds} rounds; "
          "speed = torch / canna")
    if args.against:
        print(f"before: {sides['before']}   after: {here}")
        print(f"{'kernel':34} {'before us':>10} {'after us':>10} {'speedup':>8} {'spread':>11} {'torch us':>9} "
              f"{'vs torch':>8}")
    else:
        print(f"{'kernel':34} {'canna us':>10} {'torch us':>10} {'speed':>8}")
    for n in names:
        a = [r[n]["canna"] for r in runs["after"]]
        tt = statistics.median(r[n]["torch"] for k in runs for r in runs[k])
        am = min(a) if args.against else statistics.median(a)
        if args.against:
            b = [r[n]["canna"] for r in runs["before"]]
            bm = min(b)
            sp = [x / y for x, y in zip(b, a)]
            print(f"{n:34} {bm * 1e6:>10.1f} {am * 1e6:>10.1f} {bm / am:>7.2f}x {min(sp):>5.2f}-{max(sp):.2f}x "
                  f"{tt * 1e6:>9.1f} {tt / am:>7.2f}x")
        else:
            print(f"{n:34} {am * 1e6:>10.1f} {tt * 1e6:>10.1f} {tt / am:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
