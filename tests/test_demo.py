"""tools/demo.py, the main job, in its reduced mode (``--quick``: one epoch per run) in a
subprocess: the table's numbers (through ``--json``), the plot, the exit status; and the accuracy
rule that makes it fail."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tools" / "demo.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUNS = ("torch", "torch+canna", "tf", "tf+canna")


def _env():
    env = dict(os.environ)
    env.setdefault("CANNA_BACKEND", "sim")
    env["COLUMNS"] = "300"      # a wide terminal: the demo still keeps its lines within 100 columns
    return env


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, str(DEMO), "--quick", "--json", str(d / "demo.json"), "--plot",
                           str(d / "loss.png")], cwd=d, env=_env(), capture_output=True, text=True, timeout=240)
    data = json.loads((d / "demo.json").read_text()) if (d / "demo.json").exists() else None
    return proc, data, d


def test_exit_status_and_output(quick):
    proc, data, d = quick
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    assert "canna on " in out.splitlines()[0]                      # the runtime line
    for name in RUNS:
        assert name in out
    assert "canna demo" in out and "demo OK" in out
    assert str(d / "loss.png") in out
    assert data["ok"] is True and data["failures"] == []
    assert data["config"]["epochs"] == 1 and data["config"]["train"] + data["config"]["test"] == 1797


def test_output_fits_100_columns_and_is_labelled(quick):
    proc, _, _ = quick
    lines = proc.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    bars = [ln for ln in lines if "━" in ln]
    assert len(bars) == len(RUNS) and all("last batch loss" in b for b in bars), bars     # the bar: last batch
    header = "\n".join(lines)
    assert "epoch" in header and "loss" in header                                           # the table: epoch mean
    caption = " ".join(proc.stdout.split())
    for words in ("epoch loss: mean training loss of the last epoch", "fell back:", "copied:", "peak pool:",
                  "util:", "test acc:", "wall:", "on canna:"):
        assert words in caption, words
    assert "0/0%" not in proc.stdout


def test_table_contents(quick):
    _, data, _ = quick
    runs = data["runs"]
    assert set(runs) == set(RUNS)
    for name, r in runs.items():
        acc = r["test_accuracy"]
        assert isinstance(acc, float) and 0.0 <= acc <= 1.0, (name, acc)
        assert acc > 0.3, (name, acc)               # chance is 0.1; one epoch reaches ~0.7
        assert r["final_loss"] > 0 and r["wall_s"] > 0
        assert len(r["epoch_losses"]) == 1 and len(r["step_losses"]) == 1347 // 64
        assert r["step_losses"][-1] < r["step_losses"][0]        # it trained
        assert r["canna"] is name.endswith("+canna")
        if not r["canna"]:
            assert "ops" not in r and "bytes_copied" not in r
    for plain in ("torch", "tf"):                   # twins: same start, same batches, same losses
        a, b = runs[plain], runs[plain + "+canna"]
        assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.02
        assert max(abs(u - v) for u, v in zip(a["step_losses"], b["step_losses"])) < 1e-4


def test_canna_columns(quick):
    _, data, _ = quick
    tc, tf = data["runs"]["torch+canna"], data["runs"]["tf+canna"]
    steps = 1347 // 64
    # the SimpleCNN's ops ran on canna, forward (every step + the test pass) and backward
    aten = tc["offload_level"] == "aten"
    # (the aten level: Linear is aten::addmm, its gradients aten::mm in matmul's row; log's is a div)
    ops = ("conv2d", "relu", "max_pool2d", "softmax", "nll_loss") + (() if aten else ("linear", "log"))
    for op in ops:
        assert op in tc["ops_on_canna"], op
        assert tc["ops"][op]["canna"] >= steps and tc["ops"][op]["backward"] == steps, (op, tc["ops"][op])
        assert tc["ops"][op]["fallback"] == 0
    if aten:
        assert tc["ops"]["addmm"]["canna"] >= steps and tc["ops"]["matmul"]["canna"] == 2 * steps, tc["ops"]
        assert tc["ops"]["div"]["canna"] == steps, tc["ops"]
    assert tc["ops"]["fused_sgd"]["canna"] > 0                 # the optimizer step (one fused call per group)
    assert tc["fallback_calls"] == 0 and tc["fell_back"] == []
    assert tc["ops"]["log"]["canna"] == steps                  # nll_loss(torch.log(p)): log on canna too
    assert not {"torch.log", "aten::log.out", "aten::log"} & set(tc["framework_only"]), tc["framework_only"]
    # the Keras Dense network's ops
    assert tf["ops"]["dense"] == {"canna": 2 * steps + 2, "fallback": 0, "backward": 2 * steps}
    assert tf["ops"]["relu"]["canna"] == steps + 1 and tf["ops"]["softmax"]["backward"] == steps
    for r in (tc, tf):
        assert r["canna_calls"] > 0 and r["backward_calls"] > 0
        assert r["bytes_copied"] == 0 and r["copies"] == 0        # unified memory: zero-copy throughout
        assert r["peak_pool_bytes"] > 0
        u = r["utilization"]
        assert u["samples"] >= 1 and 0 <= u["mean"] <= u["peak"] <= 100
        # the exact busy share of the run, from the simulator's counters: small, never a rounded 0
        assert 0 < u["busy_percent"] < 100, u


def test_plot_is_a_png(quick):
    _, data, d = quick
    p = d / "loss.png"
    assert data["plot"] == str(p)
    raw = p.read_bytes()
    assert raw[:8] == PNG_MAGIC and raw[12:16] == b"IHDR"
    w, h = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    assert w >= 400 and h >= 200
    import matplotlib.image
    img = matplotlib.image.imread(str(p))
    assert img.shape[:2] == (h, w) and img.std() > 0             # decodes, and is not blank


def _load_demo():
    spec = importlib.util.spec_from_file_location("canna_demo_tool", DEMO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_accuracy_rule():
    demo = _load_demo()

    def run(acc, losses=(1.0, 0.5)):
        return {"test_accuracy": acc, "step_losses": list(losses)}
    ok = {"torch": run(0.95), "torch+canna": run(0.931), "tf": run(0.9), "tf+canna": run(0.95)}
    twins, failures = demo.check_twins(ok)
    assert failures == [] and [t["canna"] for t in twins] == ["torch+canna", "tf+canna"]
    assert twins[0]["accuracy_drop_points"] == pytest.approx(1.9)
    bad = dict(ok, **{"tf+canna": run(0.87, (1.0, 0.75))})
    twins, failures = demo.check_twins(bad)
    assert len(failures) == 1 and "tf+canna" in failures[0] and "3.00 points" in failures[0]
    assert twins[1]["max_loss_diff"] == pytest.approx(0.25)
    assert demo.check_twins({"torch": run(0.9)}) == ([], [])      # --no-tf / a missing twin: nothing to compare


def test_missing_dependency_message(tmp_path):
    """Without scikit-learn the demo says how to install it, literally: rich must not eat the
    `[demo]` of the pip command as markup."""
    fake = tmp_path / "sklearn"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('blocked by the test', name='sklearn')\n")
    env = dict(_env(), PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, str(DEMO), "--quick"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "missing dependency: sklearn" in proc.stdout
    assert "pip install -e '.[demo]'" in proc.stdout, proc.stdout


def test_bad_arguments_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(DEMO), "--epochs", "0"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--epochs" in proc.stderr
