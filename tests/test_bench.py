"""tools/bench.py runs end to end (--quick) and writes its JSON and plot. No timing is asserted:
only that every table row is there, every number is a positive finite time or ratio, the ratios
are what the times say, and the PNG is a real image."""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "tools", "bench.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_conv  # noqa: E402
import bench_models  # noqa: E402

ADD_SIZES = {"1M elements": [2 ** 20], "1024x1024": [1024, 1024], "32x1024x1024": [32, 1024, 1024]}
ROWS = {
    "add": ["large add 32x1024x1024 (torch tensors)", "large add 32x1024x1024 vs best framework",
            "large add 32x1024x1024 out= (torch tensors)", "large add 32x1024x1024 out= bandwidth vs copy bandwidth"],
    "overhead": ["1-element add, per call", "1-element add, per call (autograd op)",
                 "1-element F.relu in offload(level=function), per call",
                 "1-element F.relu in offload() (aten level, the default), per call",
                 "1-element F.relu, PyTorch's mode dispatch alone",
                 "1-element torch.add in offload(level=function), per call",
                 "1-element torch.add in offload() (aten level, the default), per call",
                 "1-element torch.add, PyTorch's mode dispatch alone",
                 "empty RawKernel launch + sync",
                 "add RawKernel launch + sync, 1 element", "aclnnAdd 1 element (C level, cffi)"],
    "pool": ["alloc+free 1 MiB vs raw", "alloc+free 64 MiB vs raw", "alloc+free 1 MiB vs torch.empty"],
    "dlpack": ["canna_dl.from_dlpack(torch tensor)", "canna_dl.to_torch(DeviceArray)",
               "torch.from_dlpack(DeviceArray)"],
    "matmul": ["matmul 1024^3 vs torch", "matmul 1024^3 vs numpy", "matmul 1024^3 vs tensorflow"],
    "softmax": ["softmax 4096x4096 vs torch", "softmax 4096x4096 vs numpy"],
    "conv": [f"conv {name}" for name in bench_conv.QUICK],   # the rows of a --quick run
    "train": ["SimpleCNN step, batch 64x1x28x28", "Dense 64-128-10 step, eager GradientTape"],
    "models": [f"{m} {step} step, {n} thread{'s' if n > 1 else ''}{lv}" for n in (1, 2) for m in bench_models.MODELS
               for step in bench_models.STEPS for lv in (", function level", ", aten level (default)")],
    "custom": [f"registered custom add {size} ({fw})" for size in ("1M elements", "1024x1024", "32x1024x1024")
               for fw in ("torch", "tf")],
    "hccl": ["all-reduce 64 MiB fp32, 2 processes vs gloo", "all-reduce 64 MiB fp32 bandwidth vs copy bandwidth"],
    "jax": [f"jax.jit {w}{how}" for w in ("add 2**20 float32", "dense 256x512x512 fwd+bwd")
            for how in ("", ", pure_callback")],
}


def _run(args, timeout=360):
    env = dict(os.environ, CANNA_BACKEND="sim", COLUMNS="300")   # wide: the tables still fit 100 columns
    return subprocess.run([sys.executable, BENCH, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _pos(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_quick_run_json_and_plot(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("matplotlib")
    js, png = tmp_path / "bench.json", tmp_path / "bench.png"
    p = _run(["--quick", "--json", str(js), "--plot", str(png)])
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    out = p.stdout
    # the printed tables: the framework add rows, every benchmark section, the elapsed time
    for label in ("tf.add (native)", "canna_dl.tf.add", "kernels.add on tf", "torch.add (native)",
                  "canna_dl.torch.add", "kernels.add on torch", *ADD_SIZES, "elapsed:"):
        assert label in out, label
    lines = out.splitlines()
    for section in ROWS:
        assert f"{section}:" in [ln.strip() for ln in lines], section
    assert max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    assert "SEEDS" not in out and "seed" not in out.lower()

    doc = json.loads(js.read_text())
    assert doc["schema"] == "canna-bench/2"
    assert doc["quick"] is True
    assert _pos(doc["elapsed_s"])
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["backend"]["backend"] == "sim"
    for mod in ("canna", "numpy", "torch", "tensorflow"):
        assert doc["versions"][mod], mod

    adds = {(s["framework"], s["size"]): s for s in doc["framework_add"]}
    assert set(adds) == {(fw, size) for fw in ("tensorflow", "pytorch") for size in ADD_SIZES}
    for (fw, size), s in adds.items():
        assert s["shape"] == ADD_SIZES[size] and s["elements"] == math.prod(s["shape"]) and s["dtype"] == "float32"
        for k in ("native_s", "canna_s", "kernels_s", "ratio", "kernels_ratio"):
            assert _pos(s[k]), (fw, size, k, s[k])
        assert s["ratio"] == pytest.approx(s["native_s"] / s["canna_s"])
        assert s["kernels_ratio"] == pytest.approx(s["native_s"] / s["kernels_s"])

    rows = doc["rows"]
    got = {}
    for r in rows:
        got.setdefault(r["section"], []).append(r["name"])
        for k in ("canna_s", "reference_s", "ratio"):
            assert _pos(r[k]), (r["name"], k, r[k])
        assert r["ratio"] == pytest.approx(r["reference_s"] / r["canna_s"])
        if r["target"] is None:
            assert r["met"] is None
        else:
            assert _pos(r["target"]) and r["met"] is (r["ratio"] >= r["target"])
        assert r["canna"] and r["reference"]
    assert got == ROWS
    # the targets of issues 3, 4, 5, 7 are all checked
    targeted = {r["name"] for r in rows if r["target"] is not None}
    assert {"large add 32x1024x1024 (torch tensors)", "matmul 1024^3 vs torch", "1-element add, per call",
            "1-element F.relu in offload() (aten level, the default), per call",
            "SimpleCNN step, batch 64x1x28x28", "alloc+free 1 MiB vs raw",
            "all-reduce 64 MiB fp32 bandwidth vs copy bandwidth"} <= targeted
    assert doc["details"]["offload_per_call"]["fast_share"] > 0.9   # the C per-call fast path serves them
    assert set(doc["details"]) >= {"pool", "dlpack", "launch", "matmul", "softmax", "conv", "train", "tf_train",
                                   "hccl", "jax"}
    h = doc["details"]["hccl"]
    assert h["bytes"] == 64 * 2**20 and all(len(h[k + "_rounds"]) == h["rounds"] for k in ("canna", "gloo", "copy"))
    for r in rows:   # the conv and model rows give the spread of their ratio over the interleaved rounds
        if r["section"] in ("conv", "models"):
            lo, hi = r["spread"]
            assert _pos(lo) and lo <= hi, r
        elif r["section"] not in ("hccl", "jax"):
            assert r["spread"] is None, r

    models = doc["details"]["models"]   # 1 and 2 threads, each with the load average before and after
    assert [m["threads"] for m in models] == [1, 2]
    for m in models:
        assert len(m["loadavg"]) == 2 and all(x >= 0 for x in m["loadavg"])
        for r in m["rows"]:   # the same function on both sides: float32 rounding only
            err = r.get("loss_rel_error", r.get("out_rel_error"))
            assert 0 <= err < 1e-3, r
    assert "load average (1, 5, 15 min)" in out
    a = doc["details"]["add_out"]   # the copy reference is the faster copy; the row compares bandwidths
    assert a["copy"] == min(a["copy_torch"], a["copy_numpy"])
    bw, = [r for r in rows if r["name"] == "large add 32x1024x1024 out= bandwidth vs copy bandwidth"]
    assert bw["reference_s"] == pytest.approx(1.5 * a["copy"]) and bw["canna_s"] == a["kernels"]
    assert len(doc["machine"]["loadavg"]) == 3 and len(doc["machine"]["loadavg_end"]) == 3

    w, h = _png_size(png)
    assert w >= 400 and h >= 300


def test_sections_and_bad_section(tmp_path):
    js = tmp_path / "b.json"
    p = _run(["--quick", "--no-tf", "--only", "pool,dlpack", "--json", str(js)], timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(js.read_text())
    assert doc["sections"] == ["pool", "dlpack"] and doc["framework_add"] == []
    assert {r["section"] for r in doc["rows"]} == {"pool", "dlpack"}
    p = _run(["--only", "pool,nope"], timeout=60)
    assert p.returncode == 2 and "unknown section" in p.stderr and "nope" in p.stderr


def test_jax_section(tmp_path):
    """The JAX rows: canna_dl.jax under jit through the FFI route (targeted, with its spread) and
    through pure_callback, each against jnp under jit measured in the same run."""
    pytest.importorskip("jax")
    js = tmp_path / "j.json"
    p = _run(["--quick", "--no-tf", "--only", "jax", "--json", str(js)], timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(js.read_text())
    rows = doc["rows"]
    assert [r["name"] for r in rows] == ROWS["jax"]
    for r in rows:
        assert _pos(r["canna_s"]) and _pos(r["reference_s"]) and r["ratio"] == pytest.approx(r["reference_s"] / r["canna_s"])
        if r["name"].endswith("pure_callback"):
            assert r["target"] is None and r["spread"] is None
        else:
            lo, hi = r["spread"]
            assert r["target"] == 0.8 and _pos(lo) and lo <= hi
    for w, m in doc["details"]["jax"].items():
        assert m["ffi_launches"] >= 1 if m["ffi_available"] else m["ffi_launches"] == 0, (w, m)


def test_models_table_and_wide_flag():
    """bench_models' table fits 100 columns and flags exactly the rows whose spread is wide."""
    from _benchutil import WIDE_SPREAD, wide_spread
    assert wide_spread(1.0, WIDE_SPREAD * 1.01) and not wide_spread(1.0, WIDE_SPREAD * 0.99)
    rows = [{"model": m, "step": "train", "canna_s": 0.05, "torch_s": 0.04, "ratio": 0.8, "ratio_min": 0.7,
             "ratio_max": hi, "target": 1.0, "loss_rel_error": 1e-7} for m, hi in (("resnet18", 0.8),
                                                                                  ("gpt2-tiny", 1.2))]
    text = bench_models.table([{"threads": 2, "rows": rows}])
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    assert not lines[1].endswith("WIDE") and lines[2].endswith("WIDE")


def test_models_measures_a_further_model_on_request(tmp_path):
    """--only names a model of MORE_MODELS (Llama at the small config): its rows come out with
    finite times, ratios the times give, and the loss error of canna against plain PyTorch; the
    names fit the table's column."""
    assert all(len(n) <= 10 for n in [*bench_models.MODELS, *bench_models.MORE_MODELS])
    js = tmp_path / "m.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_models.py"), "--quick", "--threads", "1",
                        "--only", "llama", "--json", str(js)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(js.read_text())[0]["rows"]
    assert {(r["model"], r["step"], r["level"]) for r in rows} == \
        {("llama", s, lv) for s in bench_models.STEPS for lv in bench_models.LEVELS}
    for r in rows:
        assert math.isfinite(r["canna_s"]) and r["canna_s"] > 0 and r["torch_s"] > 0
        assert r["ratio"] == pytest.approx(r["torch_s"] / r["canna_s"])
        assert r.get("loss_rel_error", r.get("out_rel_error")) < 1e-4, r
    assert "llama" in p.stdout
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_models.py"), "--only", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "llama" in bad.stderr
