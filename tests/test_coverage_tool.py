"""tools/coverage.py in a subprocess: a tiny Hugging Face BERT config, a tiny CNN defined here,
--json, and clear errors for models it cannot build."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "coverage.py"

CNN = '''
import torch
from torch import nn


def tiny_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 5))
'''


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT), env=env)


def _json(*args):
    r = _run(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_tiny_cnn_json(tmp_path):
    f = tmp_path / "cnn.py"
    f.write_text(CNN)
    res = _json("--model", f"{f}:tiny_cnn", "--input-shape", "2,3,8,8", "--level", "function")
    # conv2d, relu, max_pool2d, linear, cross_entropy and their backward, AdamW: all on canna
    assert res["coverage"] == 1.0, res
    assert res["canna_calls"] == res["compute_calls"] > 0
    assert not res["fallbacks"] and not res["no_canna_op"] and not res["pytorch_backward"]
    assert res["report"]["ops"]["apply_adamw"]["canna"] == 1
    assert res["report"]["ops"]["conv2d"]["backward"] == 1
    for k, v in res["max_rel_error"].items():
        assert v < 1e-4, (k, v)
    assert "torch.Tensor.view" not in res["no_canna_op"] and "torch.zeros_like" in res["allocation"]


def test_tiny_cnn_at_the_aten_level(tmp_path):
    f = tmp_path / "cnn.py"
    f.write_text(CNN)
    res = _json("--model", f"{f}:tiny_cnn", "--input-shape", "2,3,8,8", "--level", "aten", "--steps", "3")
    assert res["level"] == "aten"
    ops = res["report"]["ops"]
    for row in ("conv2d", "relu", "max_pool2d", "addmm", "apply_adamw"):
        assert ops[row]["canna"] >= 1, (row, ops)
    for row in ("conv2d", "relu", "max_pool2d"):   # PyTorch's backward formulas on canna
        assert ops[row]["backward"] >= 1, (row, ops)
    for k, v in res["max_rel_error"].items():
        assert v < 1e-4, (k, v)
    assert res["steps"]["max_rel_diff"] < 1e-4
    assert not any(k.startswith("aten::view") for k in res["no_canna_op"]), res["no_canna_op"]


def test_tiny_bert_text_and_json():
    pytest.importorskip("transformers")
    args = ("--model", "bert", "--input-shape", "2,8", "--hf-config", "num_hidden_layers=1")
    res = _json(*args)
    assert res["model"].startswith("bert")
    assert 0 < res["coverage"] <= 1 and res["compute_calls"] >= res["canna_calls"]
    # the ops that ran on canna are in the report, the ones without a canna op listed with counts
    assert res["report"]["ops"]["embedding"]["canna"] == 6     # 3 embeddings, train + eval
    assert all(isinstance(n, int) and n > 0 for n in res["no_canna_op"].values())
    assert all(isinstance(n, int) and n > 0 for n in res["pytorch_backward"].values())
    assert res["report"]["ops"]["apply_adamw"]["canna"] == 1
    err = res["max_rel_error"]
    assert err["loss"] < 1e-5 and err["output"] < 1e-5 and err["grads"] < 1e-5 and err["grads_per_tensor"] < 1e-4
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    assert "compute calls on canna" in r.stdout
    assert "plain PyTorch" in r.stderr     # progress


@pytest.mark.parametrize("args,msg", [
    (("--model", "no_such_model_type"), "not a Hugging Face model type or class"),
    (("--model", "torchvision:resnet18"), None),
    (("--model", "no.such.module:build", "--input-shape", "2,3"), "cannot import module 'no.such.module'"),
    (("--model", "resnet18-like", "--input-shape", "2,a"), "--input-shape must be integers"),
    (("--model", "resnet18-like", "--input-shape", "2"), "the model fails on this input in plain PyTorch"),
    (("--model", "tools/_models.py:nothing", "--input-shape", "2,3"), "has no function 'nothing'"),
])
def test_usage_errors_are_clear(args, msg):
    r = _run(*args, timeout=120)
    if msg is None:     # torchvision: a clear message where it does not import (the CUDA wheel), or it runs
        try:
            import torchvision  # noqa: F401
            pytest.skip("torchvision imports here")
        except Exception:   # noqa: BLE001
            msg = "torchvision is not importable here"
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert msg in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.usefixtures("function_level")
def test_report_coverage_counts_backward_nodes_and_skips_views():
    import torch
    import canna_dl.torch as ct
    w = torch.randn(5, 4, requires_grad=True)
    with ct.offload() as rep:
        e = torch.cumprod(w, 0)                         # no canna op: forward and backward on PyTorch
        y = torch.relu(e.view(5, 4).contiguous()[1:])   # a view, a no-op contiguous, basic indexing
        y.sum().backward()
    cov = rep.coverage()
    assert cov["no_canna_op"] == {"torch.cumprod": 1}
    assert cov["pytorch_backward"] == {"CumprodBackward0": 1}    # once, though backward re-enters the mode
    assert "torch.Tensor.view" in cov["not_compute"]
    assert "torch.Tensor.contiguous" not in rep.pytorch_calls and "torch.Tensor.__getitem__" not in rep.pytorch_calls
    # relu and sum with their backward on canna; cumprod and its backward on PyTorch
    assert cov["canna"] == 4 and cov["total"] == 6 and cov["share"] == 4 / 6


@pytest.mark.usefixtures("function_level")
def test_conversions_to_the_same_dtype_are_not_compute():
    import torch
    import canna_dl.torch as ct
    x = torch.ones(3)
    with ct.offload() as rep:
        x.to(torch.float32)
        x.float()
        x.to("cpu", torch.float32, non_blocking=False)
        x.to(torch.float64)           # real conversions: canna's cast (aclnnCast)
        x.double()
        x.to(device="cpu", dtype=torch.float16)
        x.to(torch.float16, copy=True)   # copy=True: PyTorch's
    assert rep.pytorch_calls == {}
    assert rep.ops["cast"].canna == 3 and rep.ops["cast"].fallback == 1, rep
