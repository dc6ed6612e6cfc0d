"""kernels.* as an API: result kinds (torch in → torch out, ...), zero-copy reads of every framework's
memory, ``out=`` and ``stream=``, the plan cache and the PyTorch fast path, threads, and the bad-input
list of issue 5 (each a clear exception or the reference's result, the runtime usable afterwards).

Frameworks are imported once for the module. Runs in both memory models: test_kernels_discrete
reruns this module and the numeric one under the discrete memory model, where every exchange with a
CPU framework is a counted copy instead.
"""
from __future__ import annotations

import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import acl_rt  # noqa: E402
import canna_dl  # noqa: E402
import kernels  # noqa: E402
from acl_rt._lib import backend  # noqa: E402
from conftest import ROOT, assert_usable, run_python  # noqa: E402

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
jax = pytest.importorskip("jax")
jnp = jax.numpy

pytestmark = pytest.mark.usefixtures("acl")
UNIFIED = canna_dl.memory_model() == "unified"


def delay(stream, us):
    """Keep ``stream`` busy for ``us`` microseconds (a simulator task)."""
    assert backend().lib.aclsimLaunchDelay(stream._handle("test"), us, 1, 1) == 0


def as_np(x):
    if isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, canna_dl.DeviceArray):
        return x.numpy()
    return np.asarray(x)


KINDS = ["torch", "numpy", "tf", "jax", "canna"]
TYPES = {"torch": torch.Tensor, "numpy": np.ndarray, "tf": tf.Tensor, "jax": jax.Array,
         "canna": canna_dl.DeviceArray}


def make(kind, arr):
    arr = np.ascontiguousarray(arr)
    if kind == "torch":
        return torch.from_numpy(arr.copy())
    if kind == "numpy":
        return arr.copy()
    if kind == "tf":
        return tf.constant(arr)
    if kind == "jax":
        return jnp.asarray(arr)
    return canna_dl.asarray(arr).copy()


# ------------------------------------------------------------------ kinds and zero-copy

@pytest.mark.parametrize("kind", KINDS)
def test_result_kind_and_no_copy(kind):
    x = make(kind, np.arange(12, dtype=np.float32).reshape(3, 4))
    y = make(kind, np.full(4, 0.5, dtype=np.float32))
    canna_dl.reset_copy_stats()
    results = [(kernels.add(x, y, alpha=2), np.arange(12).reshape(3, 4) + 1.0),
               (kernels.matmul(x, kernels.mul(y, 2)), np.arange(12).reshape(3, 4).sum(1).astype(np.float32)),
               (kernels.softmax(x, -1), None), (kernels.sum(x, 1), np.arange(12).reshape(3, 4).sum(1))]
    stats = canna_dl.copy_stats()
    for z, ref in results:
        assert isinstance(z, TYPES[kind]), type(z)
        if ref is not None:
            np.testing.assert_allclose(as_np(z), ref, rtol=1e-6)
    if UNIFIED or kind == "canna":
        # the kernels read (and the framework results view) the callers' memory in place
        assert stats["count"] == 0, stats
    else:   # discrete: host inputs copied to the device, results back, all counted
        assert stats["by_reason"]["to_device"]["count"] >= 2 and stats["by_reason"]["to_host"]["count"] >= 1


@pytest.mark.parametrize("kind", ["torch", "numpy", "canna"])
def test_writes_go_to_the_callers_memory(kind):
    """In place (out= an input): the caller's own buffer changes, at the same address."""
    x = make(kind, np.arange(6, dtype=np.float32))
    ptr = {"torch": lambda t: t.data_ptr(), "numpy": lambda a: a.ctypes.data, "canna": lambda a: a.ptr}[kind]
    before = ptr(x)
    canna_dl.reset_copy_stats()
    r = kernels.mul(x, 3.0, out=x)
    copies = canna_dl.copy_stats()["count"]
    assert r is x and ptr(x) == before
    np.testing.assert_array_equal(as_np(x), np.arange(6) * 3.0)
    if UNIFIED or kind == "canna":
        assert copies == 0


def test_mixed_kinds_give_a_device_array():
    x = torch.ones(3)
    y = np.full(3, 2.0, dtype=np.float32)
    z = kernels.add(x, y)
    assert isinstance(z, canna_dl.DeviceArray)
    np.testing.assert_array_equal(z.numpy(), [3, 3, 3])
    assert kernels.result_kind(x, 2.0) == "torch" and kernels.result_kind(x, y) == "canna"


def test_device_array_results_are_stream_ordered(stream):
    a = canna_dl.asarray(np.arange(1000, dtype=np.float32)).copy()
    delay(stream, 50_000)
    r = kernels.exp(kernels.neg(a, stream=stream), stream=stream)
    assert r.stream is stream          # pending work writes it
    np.testing.assert_allclose(r.numpy(), np.exp(-np.arange(1000, dtype=np.float32)), rtol=1e-6)


def test_framework_results_are_complete_when_returned(stream):
    x = torch.arange(1000, dtype=torch.float32)
    for _ in range(2):   # the general path, then the cached one
        delay(stream, 30_000)
        r = kernels.add(x, x, stream=stream)
        assert torch.equal(r, x * 2)   # read at once: no synchronize
    r = kernels.softmax(x.reshape(10, 100), stream=stream)
    assert torch.allclose(r.sum(1), torch.ones(10))


def test_inputs_written_on_another_stream_are_waited_for(stream):
    s2 = acl_rt.Device(0).create_stream()
    try:
        a = canna_dl.zeros(4096, "float32", stream=stream)
        delay(stream, 50_000)
        kernels.add(a, 1.0, out=a, stream=stream)   # queued behind the delay
        r = kernels.mul(a, 2.0, stream=s2)         # must wait for stream's pending write
        np.testing.assert_array_equal(r.numpy(), np.full(4096, 2.0))
    finally:
        s2.synchronize()
        s2.close()


def test_operands_kept_alive_until_the_stream_ran_them(stream):
    a = canna_dl.asarray(np.arange(4096, dtype=np.float32)).copy()
    t = torch.arange(4096, dtype=torch.float32)
    delay(stream, 50_000)
    r = kernels.add(a, t, stream=stream)
    del a, t   # the call holds them until the op has run
    import gc
    gc.collect()
    np.testing.assert_array_equal(r.numpy(), 2 * np.arange(4096, dtype=np.float32))


# ------------------------------------------------------------------ out=

def test_out_semantics():
    x = torch.rand(3, 4)
    out = torch.empty(3, 4, dtype=torch.float64)
    assert kernels.add(x, 1, out=out) is out          # cast to a wider out
    assert torch.allclose(out, (x + 1).double())
    with pytest.raises(TypeError, match="cannot be cast"):
        kernels.add(x, 1, out=torch.empty(3, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="shape"):
        kernels.add(x, 1, out=torch.empty(4, 3))
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.add(x.numpy(), 1, out=ro)
    with pytest.raises(ValueError, match="read-only"):
        kernels.add(x.numpy(), 1, out=tf.zeros((3, 4)))
    with pytest.raises(ValueError, match="stride 0|read-only"):
        kernels.add(x, 1, out=torch.zeros(1, 4).expand(3, 4))
    assert_usable()


def test_out_aliasing():
    if not UNIFIED:
        pytest.skip("the unified model shares torch memory with the kernels")
    x = torch.arange(10.0)
    kernels.add(x, x, out=x)                      # exactly in place: fine for elementwise ops
    assert torch.equal(x, torch.arange(10.0) * 2)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.add(x[:-1], 1, out=x[1:])          # partial overlap
    m = torch.rand(4, 4)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.matmul(m, m, out=m)                # a product cannot write over its input
    with pytest.raises(ValueError, match="overlaps"):
        kernels.softmax(m, 0, out=m)
    y = torch.rand(4, 4)
    kernels.softmax(y, 0, out=m)                   # disjoint: fine
    assert torch.allclose(m, torch.softmax(y, 0))
    assert_usable()


# ------------------------------------------------------------------ bad input

def test_bad_shapes_dims_dtypes():
    a, b = torch.rand(3, 4), torch.rand(5)
    with pytest.raises(ValueError, match=r"cannot be broadcast"):
        kernels.add(a, b)
    with pytest.raises(ValueError, match="inner dimensions 4 and 5"):
        kernels.matmul(a, torch.rand(5, 2))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        kernels.matmul(torch.tensor(2.0), a)
    for call in (lambda: kernels.softmax(a, 2), lambda: kernels.sum(a, 5), lambda: kernels.amax(a, -3),
                 lambda: kernels.log_softmax(a, dim=-3)):
        with pytest.raises(kernels.AxisError, match="out of range") as e:
            call()
        assert isinstance(e.value, IndexError) and isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="more than once"):
        kernels.sum(a, (0, 0))
    for bad in (0.5, [0.5], "a"):   # a float dim raised "'float' object is not iterable"
        with pytest.raises(TypeError, match="dim must be an int"):
            kernels.sum(a, bad)
    bad_dtypes = [lambda: kernels.add(torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool)),
                  lambda: kernels.exp(torch.ones(2, dtype=torch.int8)),
                  lambda: kernels.matmul(torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32)),
                  lambda: kernels.matmul(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64)),
                  lambda: kernels.softmax(torch.ones(2, dtype=torch.int64)),
                  lambda: kernels.add(torch.ones(2, dtype=torch.complex64), 1),
                  lambda: kernels.add(torch.ones(2, dtype=torch.int32), 1, alpha=0.5),
                  lambda: kernels.mean(torch.ones(2, dtype=torch.int32)),
                  lambda: kernels.pow(torch.ones(2), torch.ones(2)),
                  lambda: kernels.astype(torch.ones(2), "complex64")]
    for call in bad_dtypes:
        with pytest.raises(TypeError):
            call()
    with pytest.raises(ValueError, match="negative integer powers"):
        kernels.pow(torch.ones(2, dtype=torch.int32), -1)
    with pytest.raises(TypeError, match="two Python scalars"):
        kernels.add(1, 2)
    with pytest.raises(TypeError, match="must be an array"):
        kernels.exp(None)
    with pytest.raises(TypeError, match="stream"):
        kernels.add(a, 1, stream="default")
    assert_usable()
    assert torch.equal(kernels.add(a, 1), a + 1)   # and the library too


def test_bad_nn_arguments():
    x, w = torch.rand(1, 3, 5, 5), torch.rand(4, 3, 7, 7)
    with pytest.raises(ValueError, match="larger than the padded input"):
        kernels.conv2d(x, w)
    assert kernels.conv2d(x, w, padding=1).shape == (1, 4, 1, 1)
    with pytest.raises(ValueError, match="channels"):
        kernels.conv2d(x, torch.rand(4, 2, 3, 3))
    with pytest.raises(ValueError, match="divisible by groups"):
        kernels.conv2d(x, torch.rand(4, 1, 3, 3), groups=2)
    with pytest.raises(ValueError, match="larger than the padded input"):
        kernels.max_pool2d(x, 7)
    with pytest.raises(ValueError, match="half of the kernel"):
        kernels.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="normalized_shape"):
        kernels.layer_norm(torch.rand(2, 3), (4,))
    with pytest.raises(ValueError, match="eps"):
        kernels.layer_norm(torch.rand(2, 3), 3, eps=-1)
    with pytest.raises(ValueError, match="weight"):
        kernels.linear(torch.rand(2, 3), torch.rand(3))
    with pytest.raises(ValueError, match="do not match"):
        kernels.linear(torch.rand(2, 3), torch.rand(4, 5))
    with pytest.raises(ValueError, match="target of shape"):
        kernels.cross_entropy(torch.rand(4, 3), torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="reduction"):
        kernels.cross_entropy(torch.rand(4, 3), torch.zeros(4, dtype=torch.int64), reduction="avg")
    with pytest.raises(NotImplementedError, match="class-probability"):
        kernels.cross_entropy(torch.rand(4, 3), torch.rand(4, 3))
    with pytest.raises(ValueError, match="approximate"):
        kernels.gelu(x, approximate="fast")
    assert_usable()


def test_out_of_range_target_fails_clearly_and_runtime_survives():
    x, t = torch.rand(4, 3), torch.tensor([0, 1, 7, 2])
    with pytest.raises(acl_rt.AclError, match="out of bounds"):
        kernels.cross_entropy(x, t)   # found only by reading the data: the stream reports it
    assert_usable()
    assert torch.allclose(kernels.cross_entropy(x, t.clamp(max=2)),
                          torch.nn.functional.cross_entropy(x, t.clamp(max=2)))


def test_requires_grad_and_neg_bit_tensors():
    w = torch.rand(3, requires_grad=True)
    for _ in range(3):   # also once the fast path has this signature cached
        with pytest.raises(BufferError, match="requires grad"):
            kernels.add(w, w)
        kernels.add(w.detach(), w.detach())
    c = torch.randn(4, dtype=torch.complex64)
    neg = c.conj().imag             # a real tensor with PyTorch's negative bit set
    assert neg.is_neg()
    assert torch.equal(kernels.add(neg, 0.0), neg.resolve_neg())


def test_zero_size_inputs():
    e = torch.rand(0, 3)
    assert kernels.add(e, torch.rand(3)).shape == (0, 3)
    assert kernels.exp(e).shape == (0, 3)
    assert torch.equal(kernels.sum(e, 0), torch.zeros(3))
    assert torch.isnan(kernels.mean(e, 0)).all()
    with pytest.raises(ValueError, match="size 0"):
        kernels.amax(e, 0)
    assert kernels.matmul(e, torch.rand(3, 4)).shape == (0, 4)
    assert torch.equal(kernels.matmul(torch.rand(2, 0), torch.rand(0, 3)), torch.zeros(2, 3))
    assert kernels.softmax(e, 1).shape == (0, 3)
    assert kernels.layer_norm(e, (3,)).shape == (0, 3)
    assert kernels.astype(e, "int32").shape == (0, 3)
    assert torch.isnan(kernels.cross_entropy(torch.rand(0, 3), torch.zeros(0, dtype=torch.int64)))
    assert kernels.conv2d(torch.rand(0, 3, 5, 5), torch.rand(2, 3, 3, 3)).shape == (0, 2, 3, 3)
    a = canna_dl.empty((0, 4))
    assert kernels.relu(a).shape == (0, 4)
    assert_usable()


def test_nan_and_inf_propagate_as_in_torch():
    v = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 2.0]])
    F = torch.nn.functional
    cases = [(kernels.add(v, 1), v + 1), (kernels.mul(v, v), v * v), (kernels.div(v, 0.0), v / 0.0),
             (kernels.exp(v), v.exp()), (kernels.log(v), v.log()), (kernels.sqrt(v), v.sqrt()),
             (kernels.relu(v), v.relu()), (kernels.sigmoid(v), v.sigmoid()), (kernels.tanh(v), v.tanh()),
             (kernels.silu(v), F.silu(v)),
             # PyTorch's vectorized gelu gives NaN at +inf, its scalar path (and the math) inf: canna gives inf
             (kernels.gelu(v), torch.stack([F.gelu(e) for e in v[0]])[None]), (kernels.softmax(v, 1), v.softmax(1)),
             (kernels.amax(v, 1), v.amax(1)), (kernels.sum(v, 1), v.sum(1)), (kernels.pow(v, 2), v ** 2),
             (kernels.matmul(v, v.T), v @ v.T), (kernels.layer_norm(v, (6,)), F.layer_norm(v, (6,))),
             (kernels.max_pool2d(v[None], (1, 2)), F.max_pool2d(v[None], (1, 2)))]
    for got, ref in cases:
        torch.testing.assert_close(got, ref, equal_nan=True)
    i = torch.tensor([float("nan"), 1e10, -1e10, 2.7])
    assert torch.equal(kernels.astype(i, torch.int32), i.to(torch.int32))   # x86: NaN/out of range -> INT_MIN


def test_device_mismatch_is_refused():
    proc = run_python("""
        import numpy as np, acl_rt, canna_dl, kernels
        a = canna_dl.asarray(np.ones(16, np.float32), device=1).copy()
        s0 = acl_rt.Device(0).default_stream
        try:
            kernels.add(a, 1.0, stream=s0)
        except ValueError as e:
            assert "NPU 1" in str(e), e
            print("refused")
        r = kernels.add(a, 1.0)          # on the operand's device: fine
        assert r.device.device_id == 1 and (r.numpy() == 2).all()
        print("ok")
    """, env={"CANNA_SIM_DEVICES": "2", "CANNA_SIM_MEMORY": "discrete"})
    assert "refused" in proc.stdout and "ok" in proc.stdout


# ------------------------------------------------------------------ plans, fast path, threads

def test_plans_are_cached_and_reused():
    x, y = torch.rand(7, 9), torch.rand(9)
    kernels.add(x, y)
    before = kernels.cache_info()
    for _ in range(5):
        x2, y2 = torch.rand(7, 9), torch.rand(9)   # new addresses, same signature
        assert torch.equal(kernels.add(x2, y2), x2 + y2)
    after = kernels.cache_info()
    assert after["plans_built"] == before["plans_built"]
    assert after["launches"] - before["launches"] == 5
    if UNIFIED:   # the torch tensors are operands in place: new addresses each time
        assert after["address_swaps"] > before["address_swaps"]


def test_cache_off_and_fast_path_off_still_work():
    run_python("""
        import torch, kernels
        for i in range(3):
            x = torch.rand(5, 3)
            assert torch.allclose(kernels.softmax(kernels.add(x, i), 0), torch.softmax(x + i, 0))
        info = kernels.cache_info()
        assert info["plans_cached"] == 0 and info["plans_built"] == 6, info
    """, env={"CANNA_KERNELS_CACHE": "0", "CANNA_KERNELS_FAST": "0"})


def test_large_framework_outputs_come_from_the_pool():
    if not UNIFIED:
        pytest.skip("unified model only")
    x = torch.rand(1 << 19)   # 2 MiB
    before = acl_rt.memory_stats()["allocated_bytes.all.current"]
    for _ in range(3):
        r = kernels.add(x, x)
        assert torch.equal(r, x * 2)
        assert acl_rt.memory_stats()["allocated_bytes.all.current"] >= before + r.nbytes
        del r
    assert acl_rt.memory_stats()["allocated_bytes.all.current"] == before   # released when torch drops it


def test_threads_share_plans_safely():
    errors = []

    def work(k):
        try:
            for i in range(200):
                x = torch.full((33,), float(k))
                y = torch.full((33,), float(i))
                r = kernels.add(x, y)
                if not torch.equal(r, x + y):
                    errors.append((k, i))
        except Exception as e:   # pragma: no cover
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_kernels_imports_no_framework():
    proc = run_python("""
        import sys, kernels, canna_dl
        assert not any(m in sys.modules for m in ("torch", "tensorflow", "jax", "numpy")), \
            [m for m in ("torch", "tensorflow", "jax", "numpy") if m in sys.modules]
        a = canna_dl.zeros((4,), "float32")
        print(kernels.add(a, 1.5).tolist())
    """)
    assert proc.stdout.strip() == "[1.5, 1.5, 1.5, 1.5]"


def test_discrete_memory_model():
    """This module and the numeric one under CANNA_SIM_MEMORY=discrete."""
    if not UNIFIED:
        pytest.skip("already discrete")
    import subprocess
    import sys
    env = dict(os.environ, CANNA_TEST_SIM_MEMORY="discrete", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           "tests/test_kernels_numeric.py", "tests/test_kernels_api.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    assert " passed" in tail and "failed" not in tail
