"""Regressions found by a new user's review: bad input to the tools and the public API gets a clear
error before any work is done, and never a silently lost result."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(script, *args, timeout=60):
    env = dict(os.environ)
    env.setdefault("CANNA_BACKEND", "sim")
    return subprocess.run([sys.executable, str(ROOT / "tools" / script), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", ["demo.py", "bench.py"])
@pytest.mark.parametrize("opt, path, message", [
    ("--plot", "/nonexistent-canna-dir/x.png", "No such file or directory"),
    ("--json", "/nonexistent-canna-dir/x.json", "No such file or directory"),
    ("--json", "/", "Is a directory"),
])
def test_tools_refuse_unwritable_outputs_before_running(script, opt, path, message):
    # before: the whole run went by, then a FileNotFoundError traceback threw its results away
    proc = _tool(script, "--quick", opt, path)
    assert proc.returncode == 2, proc.stderr
    assert f"{opt} {path}: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr and "canna on" not in proc.stdout   # nothing ran


def test_tools_check_a_writable_output_without_leaving_a_file(tmp_path):
    from importlib import util
    spec = util.spec_from_file_location("tools_common_under_test", ROOT / "tools" / "_common.py")
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.unwritable(str(tmp_path / "new.json")) is None
    assert not (tmp_path / "new.json").exists()
    (tmp_path / "old.json").write_text("keep")
    assert mod.unwritable(str(tmp_path / "old.json")) is None
    assert (tmp_path / "old.json").read_text() == "keep"
    assert mod.unwritable(str(tmp_path / "no" / "such.json")) == "No such file or directory"


@pytest.mark.parametrize("lr", ["inf", "nan", "0", "-1"])
def test_demo_refuses_a_non_finite_or_non_positive_lr(lr):
    proc = _tool("demo.py", "--quick", f"--lr={lr}")
    assert proc.returncode == 2 and "--lr a positive finite number" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--only", ","], "--only names no section"),
    (["--only", "add,bogus"], "unknown section(s) bogus"),
    (["--torch-threads", "-1"], "--torch-threads must be >= 0"),
])
def test_bench_usage_errors(args, message):
    proc = _tool("bench.py", "--quick", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_smi_duplicate_ids_show_a_device_once():
    from acl_rt import smi
    assert smi._parse_ids("0,0, 1,0") == [0, 1]


@pytest.mark.parametrize("out", [[0.0, 0.0, 0.0, 0.0], (0.0, 0.0, 0.0, 0.0), 0.0, 3])
def test_kernels_out_must_be_written_in_place(out):
    # before: a list (or tuple) out= was converted into a new array, written, and dropped: the call
    # returned the caller's list unchanged
    np = pytest.importorskip("numpy")
    import kernels
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(TypeError, match="out must be an array written in place"):
        kernels.add(a, a, out=out)
    with pytest.raises(TypeError, match="out must be an array written in place"):
        kernels.relu(a, out=out)
    o = np.empty(4, np.float32)
    assert kernels.add(a, a, out=o) is o and np.array_equal(o, 2 * a)    # still usable


@pytest.mark.parametrize("value", ["abc", "inf", "nan", "-1"])
def test_stats_interval_bad_value_warns_and_uses_the_default(monkeypatch, value):
    # before: "abc"/"-1"/"nan" were ignored silently and "inf" killed the publisher thread
    # (time.sleep(inf) raises OverflowError)
    from acl_rt import _publish
    monkeypatch.setenv("CANNA_STATS_INTERVAL", value)
    with pytest.warns(RuntimeWarning, match="CANNA_STATS_INTERVAL"):
        assert _publish._interval() == 0.5


@pytest.mark.parametrize("value, expected", [("", 0.5), ("0", 0.0), ("2", 2.0), (" 0.25 ", 0.25)])
def test_stats_interval_good_values(monkeypatch, value, expected):
    import warnings
    from acl_rt import _publish
    monkeypatch.setenv("CANNA_STATS_INTERVAL", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _publish._interval() == expected


def test_to_torch_warns_for_read_only_memory():
    """PyTorch has no read-only tensors (it ignores DLPack's READ_ONLY): canna_dl.to_torch warns
    as torch.from_numpy does for a non-writable array, and stays zero-copy."""
    import warnings

    import numpy as np
    import torch  # noqa: F401

    import canna_dl as cd
    b = bytes(16)
    a = cd.asarray(np.frombuffer(b, np.float32))
    assert a.readonly
    with pytest.warns(UserWarning, match="read-only"):
        t = cd.to_torch(a)
    assert t.data_ptr() == a.ptr
    w = np.ones(4, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = cd.to_torch(cd.asarray(w))          # writable: no warning
    t += 1
    assert w.tolist() == [2.0] * 4


def test_canna_torch_ops_take_tensors_not_lists():
    """canna_dl.torch ops are torch ops: like torch.relu([1.0]), a list, a NumPy array or a string
    is a TypeError naming the canna_dl.torch function (Python numbers stay allowed)."""
    import numpy as np
    import torch

    import canna_dl.torch as ct
    for call in (lambda: ct.relu([1.0]), lambda: ct.softmax("x", 0),
                 lambda: ct.add(np.ones(2), torch.ones(2)), lambda: ct.matmul(torch.ones(2, 2), [[1.0]])):
        with pytest.raises(TypeError, match=r"canna_dl\.torch\.\w+: expected a torch.Tensor"):
            call()
    x = torch.rand(5, dtype=torch.float64) - 0.5
    assert torch.equal(ct.add(x, 2), x + 2) and torch.equal(ct.mul(np.float64(3), x), 3 * x)
    assert torch.equal(ct.relu(x), torch.relu(x))


def test_set_memory_limit_takes_the_environment_variables_forms():
    import acl_rt
    try:
        acl_rt.set_memory_limit("1G")
        assert acl_rt.get_memory_limit() == 1 << 30
        acl_rt.set_memory_limit("512M")
        assert acl_rt.get_memory_limit() == 512 << 20
        total = acl_rt.Device(0).mem_info().total
        acl_rt.set_memory_limit("50%")
        assert acl_rt.get_memory_limit() == total // 2
        for bad in ("abc", "-1G", "0%", "1.5"):
            with pytest.raises(acl_rt.InvalidArgumentError, match="expected bytes"):
                acl_rt.set_memory_limit(bad)
            assert acl_rt.get_memory_limit() == total // 2     # unchanged
        with pytest.raises(TypeError, match="string such as"):
            acl_rt.set_memory_limit([1])
    finally:
        acl_rt.set_memory_limit(None)
    acl_rt.alloc(1 << 20).close()


def test_asarray_of_strings_is_a_type_error():
    import canna_dl as cd
    for obj in ("abc", ["a", "b"], [b"x"]):
        with pytest.raises(TypeError, match="cannot convert .* to an array of numbers"):
            cd.asarray(obj)
    a = cd.zeros(3, cd.float32)
    with pytest.raises(TypeError, match="array of numbers"):
        a[0] = "x"
    a[1] = 2.5
    assert a.numpy().tolist() == [0.0, 2.5, 0.0]


def test_bad_dlpack_device_is_named():
    import numpy as np

    import canna_dl as cd

    class Bad:
        def __init__(self, dev):
            self.dev, self.a = dev, np.ones(3, np.float32)

        def __dlpack_device__(self):
            return self.dev

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

    for dev in (("cpu", "x"), (1,), 5, (1.5, 0)):
        with pytest.raises(TypeError, match=r"__dlpack_device__\(\) must return"):
            cd.from_dlpack(Bad(dev))
    assert cd.from_dlpack(Bad((1, 0))).numpy().tolist() == [1.0, 1.0, 1.0]
