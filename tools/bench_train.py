"""Benchmark: one training step of the SimpleCNN (``tools/_common.py``) inside
``canna_dl.torch.offload()`` against plain PyTorch, side by side in one run.

The model: Conv2d 1→16 3x3 padding 1 → ReLU → MaxPool2d 2 →
flatten → Linear 3136→10 → softmax; a batch of 64 1x28x28 inputs; the loss is
``F.nll_loss(torch.log(p))`` of the model's probabilities ``p`` (``F.cross_entropy`` takes logits
and would apply a second softmax); SGD (lr 0.01) updates the 4 parameters. A step is
``zero_grad; loss = nll_loss(log(model(x)), y); loss.backward(); opt.step()``, the same code in both
columns (the canna column runs it inside ``offload()``; both models start from the same weights).

Each step is timed in three phases (forward+loss, backward, optimizer step); the two columns are
measured interleaved (``--block`` PyTorch steps, as many canna steps, ...) after a warm-up, so that
the machine's load drifts through both alike; medians are reported, with the ratio canna / PyTorch.
Both runtimes keep worker threads (PyTorch's OpenMP pool, the simulator's AI-core pool) that spin
for a while after work: on a small machine each slows the other right after a switch, which
``--block`` amortizes; ``--threads 1`` takes PyTorch's pool out of the picture.

Target (issue 7): canna's step at most 2x PyTorch's.
``--breakdown`` also times each kernel of the step alone (canna's ``kernels.*`` against the ATen op
PyTorch's autograd calls), which shows where the time goes.

Run: .venv/bin/python tools/bench_train.py [--steps N] [--batch B] [--threads T] [--profile] [--breakdown]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import simple_cnn  # noqa: E402


def measure(*, steps: int = 30, warmup: int = 5, block: int = 5, batch: int = 64, profile=None) -> dict:
    """One SimpleCNN training step, plain PyTorch (``pytorch``) against the same code inside
    ``canna_dl.torch.offload()`` (``canna``), interleaved in blocks of ``block`` steps after
    ``warmup`` steps each. Returns ``{"median": {col: {phase: s}}, "best": {...}, "losses":
    {col: float}, "report": OffloadReport}`` with phases forward, backward, step, total (seconds).
    ``profile``: a ``cProfile.Profile`` enabled around the canna steps (or None)."""
    import torch
    import torch.nn.functional as F

    import canna_dl.torch as ct

    torch.manual_seed(0)
    ref = simple_cnn(torch, size=28)
    models = {"pytorch": ref, "canna": copy.deepcopy(ref)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    rep = ct.OffloadReport()

    def step(name, times):
        m, opt = models[name], opts[name]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.nll_loss(torch.log(m(x)), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if times is not None:
            times["forward"].append(t1 - t0)
            times["backward"].append(t2 - t1)
            times["step"].append(t3 - t2)
            times["total"].append(t3 - t0)
        return loss

    def run(name, times):
        if name == "canna":
            with ct.offload(report=rep):
                return step(name, times)
        return step(name, times)

    for _ in range(warmup):
        for name in models:
            run(name, None)
    times = {k: {p: [] for p in ("forward", "backward", "step", "total")} for k in models}
    losses = {}
    block = max(1, block)
    for i in range(0, steps, block):
        n = min(block, steps - i)
        for _ in range(n):
            losses["pytorch"] = run("pytorch", times["pytorch"]).item()
        if profile is not None:
            profile.enable()
        for _ in range(n):
            losses["canna"] = run("canna", times["canna"]).item()
        if profile is not None:
            profile.disable()
    return {"median": {k: {p: statistics.median(v) for p, v in t.items()} for k, t in times.items()},
            "best": {k: {p: min(v) for p, v in t.items()} for k, t in times.items()},
            "losses": losses, "report": rep}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="measured steps per column (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per column (default 5)")
    ap.add_argument("--block", type=int, default=5, help="steps per column in a row before switching (default 5)")
    ap.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: PyTorch's choice)")
    ap.add_argument("--profile", action="store_true", help="cProfile the canna steps (top functions by own time)")
    ap.add_argument("--breakdown", action="store_true", help="also time each kernel of the step alone, canna vs ATen")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
    block = max(1, args.block)
    r = measure(steps=args.steps, warmup=args.warmup, block=block, batch=args.batch, profile=prof)
    med, best, losses, rep = r["median"], r["best"], r["losses"], r["report"]
    print(f"SimpleCNN training step, batch {args.batch}x1x28x28, {args.steps} steps per column after "
          f"{args.warmup} warm-up (blocks of {block}), torch {torch.__version__} with {torch.get_num_threads()} "
          f"threads, {os.cpu_count()} CPUs")
    print(f"{'':<10}{'median':>37}   |{'best':>28}")
    print(f"{'phase':<10}{'PyTorch':>12}{'canna offload':>16}{'ratio':>9}   |{'PyTorch':>10}{'canna':>10}{'ratio':>8}")
    for p in ("forward", "backward", "step", "total"):
        a, b = med["pytorch"][p], med["canna"][p]
        c, d = best["pytorch"][p], best["canna"][p]
        print(f"{p:<10}{a * 1e3:>9.3f} ms{b * 1e3:>13.3f} ms{b / a:>8.2f}x   |{c * 1e3:>7.3f} ms{d * 1e3:>7.3f} ms"
              f"{d / c:>7.2f}x")
    ratio = med["canna"]["total"] / med["pytorch"]["total"]
    print(f"target: canna step <= 2x PyTorch's (medians) -> {'met' if ratio <= 2 else 'NOT met'} ({ratio:.2f}x)")
    print(f"last losses: PyTorch {losses['pytorch']:.6f}, canna {losses['canna']:.6f}")
    fell = rep.fell_back()
    on = {k: v.canna for k, v in rep.ops.items()}
    print(f"ops on canna (all steps): {on}; fallbacks: {fell or 'none'}")
    if prof is not None:
        import pstats
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if args.breakdown:
        breakdown(torch, args.batch, args.steps)


def breakdown(torch, n, reps):
    """Each kernel of the step alone, at the step's shapes: canna's kernel (kernels.*, torch in /
    torch out) against the ATen op PyTorch's autograd calls, medians, interleaved."""
    import kernels
    from kernels import backward as kbw
    A = torch.ops.aten
    x = torch.randn(n, 1, 28, 28)
    w, b = torch.randn(16, 1, 3, 3), torch.randn(16)
    h = torch.randn(n, 16, 28, 28)
    r = torch.relu(h)
    p, idx = A.max_pool2d_with_indices(r, [2, 2], [2, 2])
    f = p.reshape(n, -1)
    W, B = torch.randn(10, 16 * 14 * 14), torch.randn(10)
    logits = torch.randn(n, 10)
    sm = torch.softmax(logits, 1)
    lp = torch.log(sm)
    y = torch.randint(0, 10, (n,))
    g = torch.randn(n, 10)
    one = torch.tensor(1.0)
    rows = [
        ("conv2d", lambda: kernels.conv2d(x, w, b, 1, 1),
         lambda: A.convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)),
        ("relu", lambda: kernels.relu(h), lambda: A.relu(h)),
        ("max_pool2d", lambda: kernels.max_pool2d_with_indices(r, 2),
         lambda: A.max_pool2d_with_indices(r, [2, 2], [2, 2])),
        ("linear", lambda: kernels.linear(f, W, B), lambda: A.addmm(B, f, W.t())),
        ("softmax", lambda: kernels.softmax(logits, 1), lambda: A._softmax(logits, 1, False)),
        ("log", lambda: kernels.log(sm), lambda: A.log(sm)),
        ("nll_loss", lambda: kernels.native_nll_loss(lp, y), lambda: A.nll_loss_forward(lp, y, None, 1, -100)),
        ("nll_loss bw", lambda: kbw.nll_loss(one, lp, y, total_weight=one),
         lambda: A.nll_loss_backward(one, lp, y, None, 1, -100, one)),
        ("log bw", lambda: kernels.div(g, sm), lambda: A.div(g, sm)),
        ("softmax bw", lambda: kbw.softmax(g, sm, 1), lambda: A._softmax_backward_data(g, sm, 1, torch.float32)),
        ("linear bw", lambda: kbw.linear(g, f, W), lambda: (A.mm(g, W), A.mm(g.t(), f), A.sum(g, [0]))),
        ("max_pool2d bw", lambda: kbw.max_pool2d(p, r, idx, 2),
         lambda: A.max_pool2d_with_indices_backward(p, r, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)),
        ("relu bw", lambda: kbw.relu(h, r), lambda: A.threshold_backward(h, r, 0)),
        ("conv2d bw", lambda: kbw.conv2d(h, x, w, 1, 1, output_mask=(False, True, True)),
         lambda: A.convolution_backward(h, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                        [False, True, True])),
        ("sgd update (fc.weight)", lambda: kernels.add(W, W, alpha=-0.0, out=W), lambda: W.add_(W, alpha=-0.0)),
    ]
    print(f"\nkernels alone at the step's shapes (median of {reps}, microseconds)")
    print(f"{'kernel':<24}{'PyTorch':>10}{'canna':>10}{'ratio':>8}")
    tc = tt = 0.0
    for name, c, t in rows:
        c(), t()
        sc, st = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            t()
            t1 = time.perf_counter()
            c()
            t2 = time.perf_counter()
            st.append(t1 - t0)
            sc.append(t2 - t1)
        a, b_ = statistics.median(st) * 1e6, statistics.median(sc) * 1e6
        tc += b_
        tt += a
        print(f"{name:<24}{a:>10.1f}{b_:>10.1f}{b_ / a:>7.2f}x")
    print(f"{'sum':<24}{tt:>10.1f}{tc:>10.1f}{tc / tt:>7.2f}x")


if __name__ == "__main__":
    main()
