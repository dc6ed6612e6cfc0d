"""How much of a model's training step runs on canna: one training step (forward, backward, AdamW
step) and one eval step of a model, plain PyTorch and inside ``canna_dl.torch.offload()`` from
the same weights, and what fell back.

Prints the share of compute calls that ran on canna (forward, backward and optimizer calls;
views, metadata and tensor factories do not count: ``OffloadReport.coverage()``), every op that
fell back (with counts and reasons), every torch function and backward node with no canna op
(with counts), and the normwise relative error ``||canna - plain|| / ||plain||`` of the loss, the
outputs (train and eval), every gradient (the largest) and the parameters after the step.

Gradients and parameters: ``grads`` is the error of all of them as one vector, ``grads_per_tensor``
the worst single one among those whose norm is at least ``NEGLIGIBLE`` (1e-4) of the largest (a
gradient that is zero in exact arithmetic, like attention's key bias, is rounding noise in both
runs); the same for the parameters after the AdamW step.

The model (``--model``):

- a Hugging Face ``transformers`` model type or config class (``bert``, ``gpt2``, ``llama``,
  ``t5``, ``vit``, ``BertConfig``, ...) or model class (``BertForSequenceClassification``): built
  from a small config (2 layers, hidden size 32, vocabulary 128; ``--hf-config key=value``
  overrides), random weights, no download; causal LMs and encoder-decoder models (T5, BART: their
  seq2seq LM) get ``labels=input_ids``, image models (ViT, ConvNeXt: 32x32 images, default
  ``--input-shape 2,3,32,32``) an image-classification head with random labels, the others a
  sequence classification head with random labels; input ``--input-shape B,S`` (token ids);
- ``torchvision:<name>`` / ``timm:<name>``, if those packages import (PyPI's torchvision wheel
  is the CUDA build and does not import next to the CPU torch: use ``resnet18-like``);
- ``resnet18-like``: the built-in ResNet-18-shaped CNN (``tools/_models.py:resnet18``; the same
  file has ``mobilenet_v3_like``, ``vgg_like``, ``transformer_encoder`` and ``embedding_lstm``);
- ``module:function`` or ``path/to/file.py:function``: a function returning an ``nn.Module``
  (called with no arguments).

Images / other float inputs are ``randn(--input-shape)``; ``--int-input N`` makes them token ids
in ``[0, N)``. The loss is the model's own (Hugging Face, with labels), else cross entropy
against random classes for a ``[N, C]`` output, else the mean square of the output. Dropout
probabilities are set to 0 (canna's dropout cannot reproduce PyTorch's random stream: the two
runs would compute different functions); ``--keep-dropout`` leaves them.

``--steps N`` also runs N AdamW training steps on one batch, plain and under ``offload()`` from the
same weights, and prints both runs' losses and their largest relative difference (JSON: ``steps``).

Run: .venv/bin/python tools/coverage.py --model bert --input-shape 2,16 [--json] [--seed 0] [--steps 10]
Exit status: 0 on success, 2 for a usage error (an unknown model, a bad shape) with a message.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import os
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TOOLS))   # the checkout's packages
sys.path.insert(0, _TOOLS)                    # _models (resnet18-like)

#: a small config for Hugging Face models (names as PretrainedConfig's; attribute_map aliases them)
HF_SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "vocab_size": 128, "max_position_embeddings": 64, "num_key_value_heads": 2, "num_labels": 3,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
#: more of a small config for encoder-decoder models (T5's and BART's own names) and image models
#: (32x32 images; ConvNeXt: two stages of one block)
HF_SEQ2SEQ_SMALL = {"d_ff": 64, "d_kv": 16, "num_layers": 2, "num_decoder_layers": 2, "encoder_layers": 2,
                    "decoder_layers": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "encoder_attention_heads": 2,
                    "decoder_attention_heads": 2, "decoder_start_token_id": 0}
HF_IMAGE_SMALL = {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_sizes": [16, 32], "num_stages": 2,
                  "depths": [1, 1]}
#: encoder model types: a sequence-classification head (their causal-LM classes are for decoding)
ENCODERS = ("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
            "camembert", "mpnet", "ernie", "megatron-bert", "modernbert")
#: the dropout probabilities of Hugging Face configs (set to 0 unless --keep-dropout)
HF_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop",
              "attention_dropout", "hidden_dropout", "dropout", "classifier_dropout", "summary_first_dropout",
              "dropout_rate", "activation_dropout", "hidden_dropout_rate", "drop_path_rate")


class UsageError(Exception):
    """A bad command line (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# building the model

class Target:
    """A model to run: ``build()`` -> nn.Module, ``inputs(torch, gen)`` -> (args, kwargs), and
    ``loss(out, kwargs)`` -> the loss tensor."""

    def __init__(self, name, build, make_inputs, hf=False):
        self.name, self.build, self.make_inputs, self.hf = name, build, make_inputs, hf


def _shape(text):
    try:
        shape = tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--input-shape must be integers separated by commas (e.g. 2,16 or 2,3,32,32), not "
                         f"{text!r}") from None
    if not shape or any(n <= 0 for n in shape):
        raise UsageError(f"--input-shape must be positive integers, got {text!r}")
    return shape


def _hf_target(spec, shape, overrides, keep_dropout):
    try:
        import transformers
    except ImportError as e:
        raise UsageError(f"--model {spec}: transformers is not importable ({e})") from None
    from transformers import AutoConfig
    from transformers.models.auto import configuration_auto as ca, modeling_auto as ma
    model_cls = None
    if hasattr(transformers, spec) and spec.endswith("Config"):
        config_cls = getattr(transformers, spec)
        model_type = config_cls.model_type
    elif hasattr(transformers, spec) and isinstance(getattr(transformers, spec), type) and \
            hasattr(getattr(transformers, spec), "config_class"):
        model_cls = getattr(transformers, spec)
        model_type = model_cls.config_class.model_type
    elif spec.lower() in ca.CONFIG_MAPPING_NAMES:
        model_type = spec.lower()
    else:
        return None
    image = model_type in ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES and \
        model_type not in ma.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
    seq2seq = not image and model_type in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES and \
        model_type not in ENCODERS
    kw = dict(HF_SMALL, **(HF_IMAGE_SMALL if image else HF_SEQ2SEQ_SMALL if seq2seq else {}))
    if not keep_dropout:
        kw.update({k: 0.0 for k in HF_DROPOUT})
    kw.update(overrides)
    config = AutoConfig.for_model(model_type, **kw)
    if not keep_dropout:
        for k in HF_DROPOUT:
            if hasattr(config, k) and isinstance(getattr(config, k), float):
                setattr(config, k, 0.0)
    if model_cls is not None:
        causal = "CausalLM" in model_cls.__name__ or "LMHead" in model_cls.__name__
        seq2seq = "Seq2Seq" in model_cls.__name__ or "ConditionalGeneration" in model_cls.__name__
        image = "ImageClassification" in model_cls.__name__
    else:   # decoders: a causal LM; encoders (which also have a causal-LM head class): classification
        causal = model_type in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in ENCODERS
    if image:
        return _hf_image_target(transformers, model_type, model_cls, config, shape)
    if seq2seq:
        causal = True   # labels = the input ids (the decoder's inputs are the labels shifted right)
    if model_cls is None:
        auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM if causal \
            else transformers.AutoModelForSequenceClassification
        def build():
            return auto.from_config(config)
    else:
        def build():
            return model_cls(config)
    if len(shape) != 2:
        raise UsageError(f"--model {spec}: --input-shape must be (batch, sequence length) for a language model, "
                         f"got {shape}")
    if shape[1] > config.max_position_embeddings if hasattr(config, "max_position_embeddings") else False:
        raise UsageError(f"--model {spec}: the sequence length {shape[1]} exceeds the small config's "
                         f"max_position_embeddings {config.max_position_embeddings}")
    vocab = config.vocab_size
    labels = getattr(config, "num_labels", 2)

    def make_inputs(torch, gen):
        ids = torch.randint(0, vocab, shape, generator=gen)
        kwargs = {"input_ids": ids, "attention_mask": torch.ones(shape, dtype=torch.long)}
        if causal:
            kwargs["labels"] = ids.clone()
        else:
            kwargs["labels"] = torch.randint(0, labels, (shape[0],), generator=gen)
        return (), kwargs
    sizes = ", ".join(f"{k}={getattr(config, k)}" for k in ("hidden_size", "num_hidden_layers") if hasattr(config, k))
    task = "seq2seq LM" if seq2seq else "causal LM" if causal else "sequence classification"
    name = f"{model_type} ({task}; {type(config).__name__} {sizes})"
    return Target(name, build, make_inputs, hf=True)


def _hf_image_target(transformers, model_type, model_cls, config, shape):
    """An image-classification model (ViT, ConvNeXt, ...): ``pixel_values`` of ``--input-shape``
    (default ``2,3,32,32``), random labels."""
    if shape == (2, 16):   # the language models' default
        shape = (2, config.num_channels, config.image_size, config.image_size) if hasattr(config, "image_size") \
            else (2, 3, 32, 32)
    if len(shape) != 4:
        raise UsageError(f"--model {model_type}: --input-shape must be (batch, channels, height, width) for an image "
                         f"model, got {shape}")
    cls = model_cls or transformers.AutoModelForImageClassification
    build = (lambda: cls(config)) if model_cls is not None else (lambda: cls.from_config(config))
    labels = getattr(config, "num_labels", 2)

    def make_inputs(torch, gen):
        return (), {"pixel_values": torch.randn(shape, generator=gen),
                    "labels": torch.randint(0, labels, (shape[0],), generator=gen)}
    return Target(f"{model_type} (image classification; {type(config).__name__}, images {shape})", build, make_inputs,
                  hf=True)


def _load_function(spec):
    mod, _, fn = spec.rpartition(":")
    if mod.endswith(".py") or os.sep in mod:
        if not os.path.isfile(mod):
            raise UsageError(f"--model {spec}: no file {mod}")
        sp = importlib.util.spec_from_file_location(f"_coverage_target_{abs(hash(mod))}", mod)
        m = importlib.util.module_from_spec(sp)
        sys.path.insert(0, os.path.dirname(os.path.abspath(mod)))
        sp.loader.exec_module(m)
    else:
        try:
            m = importlib.import_module(mod)
        except ImportError as e:
            raise UsageError(f"--model {spec}: cannot import module {mod!r} ({e})") from None
    f = getattr(m, fn, None)
    if not callable(f):
        raise UsageError(f"--model {spec}: {mod} has no function {fn!r}")
    return f


def _float_inputs(shape, int_input):
    def make_inputs(torch, gen):
        if int_input:
            return (torch.randint(0, int_input, shape, generator=gen),), {}
        return (torch.randn(shape, generator=gen),), {}
    return make_inputs


def resolve(spec, shape_text, *, hf_overrides=(), keep_dropout=False, int_input=None):
    """The :class:`Target` for ``--model spec``. Raises UsageError with a message."""
    shape = _shape(shape_text) if shape_text else None
    overrides = {}
    for item in hf_overrides:
        k, eq, v = item.partition("=")
        if not eq:
            raise UsageError(f"--hf-config takes key=value, not {item!r}")
        try:
            overrides[k] = json.loads(v)
        except ValueError:
            overrides[k] = v
    if spec in ("resnet18-like", "resnet18_like"):
        spec = "_models:resnet18"
        shape = shape or (4, 3, 64, 64)   # layer4 sees 2x2: batch norm over 16 values per channel
    for lib in ("torchvision", "timm"):
        if spec.startswith(lib + ":"):
            name = spec.split(":", 1)[1]
            try:
                m = importlib.import_module(lib if lib == "timm" else "torchvision.models")
            except Exception as e:   # noqa: BLE001 (the CUDA torchvision wheel fails with RuntimeError / OSError)
                raise UsageError(f"--model {spec}: {lib} is not importable here ({type(e).__name__}: {e}); PyPI's "
                                 "torchvision wheel is the CUDA build, which does not import next to the CPU torch. "
                                 "Use --model resnet18-like (a ResNet-18-shaped CNN) or module:function") from None
            build = (lambda: m.create_model(name, pretrained=False)) if lib == "timm" else \
                (lambda: m.get_model(name, weights=None))
            return Target(spec, build, _float_inputs(shape or (2, 3, 224, 224), int_input))
    if ":" in spec:
        f = _load_function(spec)
        if shape is None:
            raise UsageError(f"--model {spec}: give the input shape with --input-shape")
        return Target(spec, f, _float_inputs(shape, int_input))
    t = _hf_target(spec, shape or (2, 16), overrides, keep_dropout)   # (an image model's default shape: its own)
    if t is None:
        raise UsageError(f"--model {spec!r}: not a Hugging Face model type or class, nor torchvision:<name>, "
                         "timm:<name>, resnet18-like or module:function (e.g. bert, gpt2, llama, "
                         "BertForSequenceClassification, tools/_models.py:resnet18)")
    return t


# ---------------------------------------------------------------------------------------------
# the runs

def _no_dropout(torch, model):
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd):
            mod.p = 0.0
        elif isinstance(mod, torch.nn.MultiheadAttention):   # its attention dropout is a float attribute
            mod.dropout = 0.0


def _loss(torch, out, target_gen, hf):
    if hf or hasattr(out, "loss"):
        return out.loss, out.logits
    y = out[0] if isinstance(out, (tuple, list)) else out
    if y.ndim == 2 and y.is_floating_point():
        with torch._C.DisableTorchFunction():   # the tool's own data: not the model's compute
            t = torch.randint(0, y.shape[1], (y.shape[0],), generator=target_gen)
        return torch.nn.functional.cross_entropy(y, t), y
    return y.float().pow(2).mean(), y


def run_once(torch, target, model, seed, ctx):
    """One training step (AdamW) and one eval step under ``ctx`` (a context manager)."""
    gen = torch.Generator().manual_seed(seed)
    args, kwargs = target.make_inputs(torch, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    torch.manual_seed(seed)
    with ctx():
        out = model(*args, **kwargs)
        loss, y = _loss(torch, out, torch.Generator().manual_seed(seed + 1), target.hf)
        loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    with ctx():
        opt.step()
        opt.zero_grad()
    model.eval()
    with ctx(), torch.no_grad():
        eo = model(*args, **kwargs)
        ey = eo.logits if hasattr(eo, "logits") else (eo[0] if isinstance(eo, (tuple, list)) else eo)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"loss": loss.detach(), "output": y.detach(), "eval_output": ey.detach(), "grads": grads,
            "params": params}


def _rel(torch, a, b):
    a, b = a.double(), b.double()
    d = (a - b).norm().item()
    n = b.norm().item()
    return d / n if n else d


#: gradients and parameters are compared one by one where their norm is at least this share of the
#: largest one's: a gradient that is zero in exact arithmetic (the key bias of attention, whose
#: softmax ignores it) is rounding noise in both runs, and AdamW turns noise into a full lr step
NEGLIGIBLE = 1e-4


def _errors(torch, canna, plain):
    """(normwise error of all tensors as one vector, worst per-tensor error among the
    non-negligible ones, its name)."""
    names = [n for n in plain if n in canna]
    if not names:
        return 0.0, 0.0, None
    num = sum(((canna[n].double() - plain[n].double()) ** 2).sum().item() for n in names) ** 0.5
    den = sum((plain[n].double() ** 2).sum().item() for n in names) ** 0.5
    big = max(plain[n].double().norm().item() for n in names)
    worst, wname = 0.0, None
    for n in names:
        if plain[n].double().norm().item() >= NEGLIGIBLE * big:
            e = _rel(torch, canna[n], plain[n])
            if e >= worst:
                worst, wname = e, n
    return (num / den if den else num), worst, wname


def measure(target, *, seed=0, keep_dropout=False, progress=None, level=None):
    """Both runs and the report (``level``: offload()'s; None: its default). Returns a JSON-ready dict (see the
    module doc)."""
    import torch
    import canna_dl.torch as ct
    from canna_dl.torch._offload import resolve_level
    level = resolve_level(level)[0]
    step = progress or (lambda msg: None)
    step("building the model")
    torch.manual_seed(seed)
    model = target.build()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--model {target.name}: the function returned a {type(model).__name__}, not an nn.Module")
    if not keep_dropout:
        _no_dropout(torch, model)
    twin = copy.deepcopy(model)
    step("plain PyTorch: one training step and one eval step")
    try:
        plain = run_once(torch, target, model, seed, contextlib.nullcontext)
    except Exception as e:   # noqa: BLE001 (the user's model or shape: a usage error, not a canna failure)
        raise UsageError(f"--model {target.name}: the model fails on this input in plain PyTorch "
                         f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}); check "
                         "--input-shape") from None
    report = ct.OffloadReport()
    step("canna (offload()): one training step and one eval step")
    canna = run_once(torch, target, twin, seed, lambda: ct.offload(report=report, level=level))
    cov = report.coverage()
    err = {"loss": _rel(torch, canna["loss"], plain["loss"]),
           "output": _rel(torch, canna["output"], plain["output"]),
           "eval_output": _rel(torch, canna["eval_output"], plain["eval_output"]),
           }
    err["grads"], err["grads_per_tensor"], worst = _errors(torch, canna["grads"], plain["grads"])
    err["params_after_step"], err["params_per_tensor"], worst_p = _errors(torch, canna["params"], plain["params"])
    return {"model": target.name, "level": level, "parameters": sum(p.numel() for p in model.parameters()),
            "coverage": cov["share"], "canna_calls": cov["canna"], "compute_calls": cov["total"],
            "fallbacks": cov["fallbacks"], "no_canna_op": cov["no_canna_op"],
            "pytorch_backward": cov["pytorch_backward"], "allocation": cov["allocation"],
            "not_compute": cov["not_compute"], "max_rel_error": err, "worst_gradient": worst,
            "worst_parameter": worst_p,
            "loss": {"pytorch": plain["loss"].item(), "canna": canna["loss"].item()},
            "report": report.as_dict()}


def _train_losses(torch, target, model, seed, steps, ctx):
    """The losses of ``steps`` AdamW steps on one batch under ``ctx``."""
    gen = torch.Generator().manual_seed(seed)
    args, kwargs = target.make_inputs(torch, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    torch.manual_seed(seed)
    losses = []
    for _ in range(steps):
        with ctx():
            out = model(*args, **kwargs)
            loss, _y = _loss(torch, out, torch.Generator().manual_seed(seed + 1), target.hf)
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses


def track(target, *, steps=10, seed=0, keep_dropout=False, progress=None, level=None):
    """``steps`` AdamW training steps plain and under ``offload()`` from the same weights:
    ``{"pytorch": [losses], "canna": [losses], "max_rel_diff": max |canna - plain| / |plain|}``."""
    import torch
    import canna_dl.torch as ct
    step = progress or (lambda msg: None)
    torch.manual_seed(seed)
    model = target.build()
    if not keep_dropout:
        _no_dropout(torch, model)
    twin = copy.deepcopy(model)
    step(f"plain PyTorch: {steps} training steps")
    plain = _train_losses(torch, target, model, seed, steps, contextlib.nullcontext)
    step(f"canna (offload()): {steps} training steps")
    canna = _train_losses(torch, target, twin, seed, steps, lambda: ct.offload(level=level))
    diff = max(abs(c - p) / (abs(p) or 1.0) for c, p in zip(canna, plain))
    return {"pytorch": plain, "canna": canna, "max_rel_diff": diff}


# ---------------------------------------------------------------------------------------------
# output

def _print(res, console):
    def line(s=""):
        if console is not None:
            console.print(s, highlight=False)
        else:
            print(s)
    line(f"model: {res['model']}  ({res['parameters']} parameters)")
    if "steps" in res:
        t = res["steps"]
        line(f"{len(t['pytorch'])} AdamW steps, losses (PyTorch / canna): "
             + ", ".join(f"{p:.6g}/{c:.6g}" for p, c in zip(t["pytorch"], t["canna"]))
             + f"; max relative difference {t['max_rel_diff']:.2e}")
    line(f"compute calls on canna: {res['canna_calls']} of {res['compute_calls']} = {100 * res['coverage']:.1f}% "
         "(forward, backward, optimizer; views, metadata and tensor factories not counted)")
    e = res["max_rel_error"]
    line("max relative error (normwise) vs plain PyTorch: " + ", ".join(f"{k} {v:.2e}" for k, v in e.items())
         + (f"  (worst gradient: {res['worst_gradient']}, worst parameter: {res['worst_parameter']})"
            if res["worst_gradient"] else ""))
    rows = [("fell back", op, v["count"], "; ".join(f"{r} (x{n})" for r, n in v["reasons"].items()))
            for op, v in res["fallbacks"].items()]
    rows += [("no canna op", f, n, "") for f, n in res["no_canna_op"].items()]
    rows += [("backward on PyTorch", f, n, "") for f, n in res["pytorch_backward"].items()]
    rows.sort(key=lambda r: -r[2])
    if console is not None and rows:
        from rich.table import Table
        t = Table(title="calls that ran on PyTorch", title_justify="left")
        for c, j in (("kind", "left"), ("op / function / node", "left"), ("calls", "right"), ("reasons", "left")):
            t.add_column(c, justify=j, overflow="fold")
        for r in rows:
            t.add_row(r[0], r[1], str(r[2]), r[3])
        console.print(t)
    elif rows:
        line("calls that ran on PyTorch:")
        for r in rows:
            line(f"  {r[0]:<20} {r[1]:<48} {r[2]:>5}  {r[3]}")
    else:
        line("every compute call ran on canna")
    if res["allocation"]:
        line("tensor factories (not counted): " + ", ".join(f"{k} x{n}" for k, n in res["allocation"].items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="bert | gpt2 | llama | <HF type or class> | torchvision:<name> | "
                                                   "timm:<name> | resnet18-like | module:function | file.py:function")
    ap.add_argument("--input-shape", help="the input's shape, e.g. 2,16 (tokens) or 2,3,32,32 (images)")
    ap.add_argument("--int-input", type=int, metavar="N", help="integer inputs in [0, N) (token ids) for "
                                                               "module:function models")
    ap.add_argument("--hf-config", action="append", default=[], metavar="KEY=VALUE",
                    help="override a Hugging Face config value (repeatable), e.g. attn_implementation=eager")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", choices=("function", "aten"), default=None,
                    help="offload()'s level (aten: canna's kernels for the aten operators below PyTorch's autograd; "
                         "function: canna's ops for torch functions, with canna's autograd); default: offload()'s")
    ap.add_argument("--keep-dropout", action="store_true", help="leave dropout probabilities as the model has them")
    ap.add_argument("--steps", type=int, default=0, metavar="N",
                    help="also run N AdamW training steps plain and under offload() and compare their losses")
    ap.add_argument("--json", action="store_true", help="print the result as JSON (no progress output)")
    a = ap.parse_args(argv)
    console = None
    if not a.json:
        try:
            from rich.console import Console
            console = Console(width=None if sys.stdout.isatty() else 120)
        except ImportError:
            console = None
    try:
        target = resolve(a.model, a.input_shape, hf_overrides=a.hf_config, keep_dropout=a.keep_dropout,
                         int_input=a.int_input)

        def progress(msg):
            if not a.json:
                print(f"... {msg}", file=sys.stderr, flush=True)
        if a.steps < 0:
            raise UsageError(f"--steps must be >= 0, got {a.steps}")
        res = measure(target, seed=a.seed, keep_dropout=a.keep_dropout, progress=progress, level=a.level)
        if a.steps:
            res["steps"] = track(target, steps=a.steps, seed=a.seed, keep_dropout=a.keep_dropout, progress=progress,
                                 level=a.level)
    except UsageError as e:
        print(f"coverage.py: error: {e}", file=sys.stderr)
        return 2
    if a.json:
        res = dict(res)
        json.dump(res, sys.stdout, indent=1, default=str)
        print()
    else:
        _print(res, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
