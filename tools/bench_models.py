#!/usr/bin/env python3
"""Benchmark: real models' training and eval steps inside ``canna_dl.torch.offload()`` against
plain PyTorch (issue 15), at a given number of threads.

The models (random weights, no download; built by ``tools/coverage.py``'s ``resolve``):

- ``resnet18``: the ResNet-18-shaped CNN of ``tools/_models.py`` (width 16, 10 classes), a batch
  of 4 3x64x64 images, cross entropy against random classes;
- ``bert-tiny``: ``BertForSequenceClassification`` at BERT-tiny's size (Turc et al. 2019,
  ``google/bert_uncased_L-2_H-128_A-2``: 2 layers, hidden 128, 2 heads, intermediate 512; a
  vocabulary of 1024 here), token ids of shape 4x32, the model's own loss;
- ``gpt2-tiny``: ``GPT2LMHeadModel`` at the same size (2 layers, ``n_embd`` 128, 2 heads,
  vocabulary 1024), token ids 4x32 with ``labels=input_ids``.

More real models are measured on request (``--only``, :data:`MORE_MODELS`): Hugging Face
architectures at ``tools/coverage.py``'s small config (``HF_SMALL``: 2 layers, hidden 32; the image
models 32x32 images) — Llama, Mistral and T5 (token ids 4x32), ViT and ConvNeXt (a batch of 2
images), DistilBERT (4x32) — and the CNNs of ``tools/_models.py`` shaped like MobileNetV3 and VGG.

Dropout is off (canna cannot reproduce PyTorch's random stream). A **training step** is
``zero_grad; loss = model(...); loss.backward(); AdamW.step()``; an **eval step** is a forward
under ``torch.no_grad()`` in eval mode. The columns run the same code on copies of the model —
plain, inside ``offload(level="aten")`` (``offload()``'s default: canna's kernels for the aten
operators below PyTorch's autograd) and inside ``offload(level="function")`` (canna's ops for the
torch functions, with canna's autograd) —, in interleaved rounds
(tools/_benchutil.py): each figure is the median over rounds, the spread the lowest and highest
per-round speed ratio; a row per level (:data:`LEVELS`).
Speed ratio = plain time / canna time (above 1x canna is faster); target 1.0x (issue 15).
The loss error is ``|loss_canna - loss_plain| / |loss_plain|`` of the first training step, both
copies starting from the same weights.

Both sides get the same threads: ``torch.set_num_threads(N)`` and the simulator's
``CANNA_SIM_THREADS=N`` (read when the runtime starts, so each thread count runs in a fresh
interpreter, ``--threads``); the load average is taken before and after.

    .venv/bin/python tools/bench_models.py [--quick] [--threads 1,2] [--only resnet18,...] [--json PATH]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TOOLS))
sys.path.insert(0, _TOOLS)

from _benchutil import WIDE_SPREAD, bench_rounds, child_rows, fmt, wide_spread  # noqa: E402

#: the Hugging Face size of BERT-tiny / GPT-2-tiny (config keys as coverage.py's --hf-config)
TINY = ("hidden_size=128", "num_hidden_layers=2", "num_attention_heads=2", "intermediate_size=512",
        "vocab_size=1024", "max_position_embeddings=128")
#: name -> (coverage.py --model spec, input shape, --hf-config overrides)
MODELS = {
    "resnet18": ("resnet18-like", "4,3,64,64", ()),
    "bert-tiny": ("BertForSequenceClassification", "4,32", TINY),
    "gpt2-tiny": ("GPT2LMHeadModel", "4,32", TINY),
}
#: measured only when named (--only): further architectures, as MODELS
MORE_MODELS = {
    "llama": ("LlamaForCausalLM", "4,32", ()),
    "mistral": ("MistralForCausalLM", "4,32", ()),
    "t5": ("T5ForConditionalGeneration", "4,32", ()),
    "vit": ("ViTForImageClassification", "", ()),
    "convnext": ("ConvNextForImageClassification", "", ()),
    "distilbert": ("DistilBertForSequenceClassification", "4,32", ()),
    "mbv3-like": ("_models:mobilenet_v3_like", "4,3,64,64", ()),
    "vgg-like": ("_models:vgg_like", "4,3,32,32", ()),
}
STEPS = ("train", "eval")
#: offload()'s levels measured (each its own row)
LEVELS = ("function", "aten")
#: target speed ratio of every row (issue 15: at least as fast as plain PyTorch)
TARGET = 1.0


def _target(name):
    import coverage
    spec, shape, over = {**MODELS, **MORE_MODELS}[name]
    return coverage.resolve(spec, shape, hf_overrides=over)


def measure_model(name, *, budget: float, rounds: int) -> list:
    """The train and eval rows of one model of :data:`MODELS`, in this process with its current
    thread settings. Returns a list of dicts: model, step, canna_s, torch_s, ratio, ratio_min,
    ratio_max, loss_rel_error (train) / out_rel_error (eval)."""
    import torch

    import canna_dl.torch as ct
    import coverage
    t = _target(name)
    torch.manual_seed(0)
    plain = t.build()
    coverage._no_dropout(torch, plain)
    gen = torch.Generator().manual_seed(0)
    args, kwargs = t.make_inputs(torch, gen)
    models = {"torch": plain, **{lv: copy.deepcopy(plain) for lv in LEVELS}}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    reps = {lv: ct.OffloadReport() for lv in LEVELS}

    def loss_of(m):
        out = m(*args, **kwargs)
        return coverage._loss(torch, out, torch.Generator().manual_seed(1), t.hf)[0]

    def train(k):
        m, opt = models[k], opts[k]
        m.train()
        opt.zero_grad()
        loss = loss_of(m)
        loss.backward()
        opt.step()
        return loss

    def evaluate(k):
        m = models[k]
        m.eval()
        with torch.no_grad():
            out = m(*args, **kwargs)
        return out.logits if hasattr(out, "logits") else out

    def under(fn, k):
        if k in LEVELS:
            def go():
                with ct.offload(report=reps[k], level=k):
                    return fn(k)
        else:
            def go():
                return fn(k)
        return go

    # correctness first, from the same weights
    lt = under(train, "torch")().item()
    eo_t = under(evaluate, "torch")()
    den = eo_t.double().norm().item()
    errs = {}
    for lv in LEVELS:
        lc = under(train, lv)().item()
        eo_c = under(evaluate, lv)()
        errs[lv] = {"train": {"loss_rel_error": abs(lc - lt) / abs(lt) if lt else abs(lc - lt)},
                    "eval": {"out_rel_error": (eo_c.double() - eo_t.double()).norm().item() / (den or 1.0)}}
    rows = []
    for step, fn in (("train", train), ("eval", evaluate)):
        per = bench_rounds({**{lv: under(fn, lv) for lv in LEVELS}, "torch": under(fn, "torch")}, budget=budget,
                           batch=1, rounds=rounds, warmup=1)
        for lv in LEVELS:
            ratios = [a / b for a, b in zip(per["torch"]["rounds"], per[lv]["rounds"])]
            rows.append({"model": name, "step": step, "level": lv, "canna_s": per[lv]["median"],
                         "torch_s": per["torch"]["median"], "ratio": per["torch"]["median"] / per[lv]["median"],
                         "ratio_min": min(ratios), "ratio_max": max(ratios), "target": TARGET,
                         "fallbacks": reps[lv].fell_back(), **errs[lv][step]})
    return rows


def measure_here(*, quick: bool, only=None) -> list:
    """Every model (``only``: names to keep) in this process."""
    names = list(MODELS) if only is None else [n for n in {**MODELS, **MORE_MODELS} if n in only]
    budget, rounds = (0.4, 3) if quick else (6.0, 5)
    out = []
    for n in names:
        out += measure_model(n, budget=budget, rounds=rounds)
    return out


def measure(threads: int, *, quick: bool, only=None, timeout: float = 1800) -> dict:
    """Every model in a fresh interpreter with ``threads`` torch threads and simulator threads
    (``_benchutil.child_rows``). Returns ``{"threads", "loadavg": [before, after], "rows": [...]}``."""
    return child_rows(__file__, threads, quick=quick, only=only, timeout=timeout,
                      env={"TF_CPP_MIN_LOG_LEVEL": "3"})


def wide(row) -> bool:
    """Whether a row's spread is wide (highest / lowest per-round ratio above ``WIDE_SPREAD``)."""
    return wide_spread(row["ratio_min"], row["ratio_max"])


def table(results) -> str:
    """The rows of one or more :func:`measure` results as a text table of at most 100 columns."""
    lines = [f"{'model':10} {'step':5} {'level':8} {'thr':>3} {'canna':>10} {'torch':>10} {'speed':>7} "
             f"{'spread':>12} {'target':>6} {'rel err':>9}"]
    for res in results:
        for r in res["rows"]:
            err = r.get("loss_rel_error", r.get("out_rel_error"))
            lines.append(f"{r['model']:10} {r['step']:5} {r.get('level', 'function'):8} {res['threads']:>3} "
                         f"{fmt(r['canna_s']):>10} "
                         f"{fmt(r['torch_s']):>10} {r['ratio']:>6.2f}x {r['ratio_min']:>5.2f}-{r['ratio_max']:.2f}x"
                         f" {r['target']:>5.1f}x {err:>9.1e}{'  WIDE' if wide(r) else ''}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short measurements")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--only", default="", help=f"comma-separated models ({', '.join(MODELS)}; default: these), "
                    f"also: {', '.join(MORE_MODELS)}")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        threads = [int(s) for s in args.threads.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--threads takes integers, got {args.threads!r}")
    if not threads or min(threads) < 1:
        ap.error(f"--threads must be >= 1, got {args.threads!r}")
    only = [s.strip() for s in args.only.split(",") if s.strip()] or None
    if only:
        bad = [s for s in only if s not in MODELS and s not in MORE_MODELS]
        if bad:
            ap.error(f"unknown model(s): {', '.join(bad)}; choose from {', '.join([*MODELS, *MORE_MODELS])}")
    if args.child:
        import torch
        torch.set_num_threads(threads[0])
        print(json.dumps(measure_here(quick=args.quick, only=only)))
        return 0
    results = [measure(n, quick=args.quick, only=only) for n in threads]
    for res in results:
        print(f"{res['threads']} thread(s): load average {res['loadavg'][0]:.2f} before, "
              f"{res['loadavg'][1]:.2f} after")
    print(f"speed = plain PyTorch time / canna time; spread = per-round min-max; WIDE: max/min > {WIDE_SPREAD}; err: of the loss (train), of the output (eval)")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["LEVELS", "MODELS", "MORE_MODELS", "TARGET", "measure", "measure_here", "measure_model", "table", "wide"]
