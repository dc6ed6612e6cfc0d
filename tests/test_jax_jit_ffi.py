"""canna's JAX ops under jax.jit as XLA FFI custom calls (canna_dl/jax/_ffi.py): the kernels run
on XLA's own buffers (no pure_callback, no copies), values and gradients match jnp in float64,
failures are Python exceptions, vmap and threads work, and the pure_callback path stays the
fallback (CANNA_JAX_FFI=0, the discrete memory model)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import canna_dl  # noqa: E402
import canna_dl.jax as cjax  # noqa: E402
from canna_dl.jax import _ffi  # noqa: E402

from conftest import assert_usable  # noqa: E402

pytestmark = pytest.mark.skipif(canna_dl.memory_model() != "unified",
                                reason="the FFI route needs the unified memory model (discrete: pure_callback)")

RNG = np.random.default_rng(15)


def R(*shape, dtype=np.float64):
    return jnp.asarray(RNG.standard_normal(shape).astype(dtype))


@pytest.fixture
def no_callback(monkeypatch):
    """The FFI route must be taken: jax.pure_callback raises if anything uses it."""
    if not _ffi.available():
        pytest.skip(f"the FFI handler is not available here: {_ffi._state['reason']}")

    def refuse(*a, **k):
        raise AssertionError("jax.pure_callback was used")
    monkeypatch.setattr(jax, "pure_callback", refuse)
    yield


CASES = {
    "add": (cjax.add, jnp.add, lambda: [R(3, 4), R(4)]),
    "add_scalar": (lambda x: cjax.add(x, 2.5), lambda x: x + 2.5, lambda: [R(2, 3)]),
    "sub": (cjax.sub, jnp.subtract, lambda: [R(3, 1), R(1, 4)]),
    "mul": (cjax.mul, jnp.multiply, lambda: [R(2, 3, 4), R(3, 1)]),
    "div": (cjax.div, jnp.divide, lambda: [R(3, 4), R(3, 4) ** 2 + 1.0]),
    "matmul": (cjax.matmul, jnp.matmul, lambda: [R(5, 3), R(3, 4)]),
    "matmul_batched": (cjax.matmul, jnp.matmul, lambda: [R(2, 5, 3), R(2, 3, 4)]),
    "relu": (cjax.relu, jax.nn.relu, lambda: [R(3, 4)]),
    "sigmoid": (cjax.sigmoid, jax.nn.sigmoid, lambda: [R(3, 4)]),
    "tanh": (cjax.tanh, jnp.tanh, lambda: [R(3, 4)]),
    "exp": (cjax.exp, jnp.exp, lambda: [R(3, 4)]),
    "softmax": (cjax.softmax, jax.nn.softmax, lambda: [R(3, 4)]),
    "log_softmax": (cjax.log_softmax, jax.nn.log_softmax, lambda: [R(3, 4)]),
    "linear": (cjax.linear, lambda x, w, b: x @ w.T + b, lambda: [R(3, 4), R(5, 4), R(5)]),
    "linear_nobias": (cjax.linear, lambda x, w: x @ w.T, lambda: [R(3, 4), R(5, 4)]),   # a None gradient: zeros
}


def _loss(f):
    def loss(*args):
        y = f(*args)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=y.dtype).reshape(y.shape) * 0.7 + 0.3))
    return loss


@pytest.mark.parametrize("name", list(CASES))
def test_values_and_grad_under_jit_match_jnp_float64(name, no_callback):
    op, ref, make = CASES[name]
    with jax.enable_x64(True):
        args = make()
        argnums = tuple(range(len(args)))
        before = _ffi.stats()["launches"]
        y = jax.jit(op)(*args)
        grads = jax.jit(jax.grad(_loss(op), argnums))(*args)
        assert _ffi.stats()["launches"] > before   # through the handler (add's backward needs no kernel)
        y_ref = ref(*args)
        grads_ref = jax.grad(_loss(ref), argnums)(*args)
        assert y.dtype == y_ref.dtype == jnp.float64 and y.shape == y_ref.shape
        np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), rtol=1e-12, atol=1e-13)
        for g, gr in zip(grads, grads_ref):
            assert g.shape == gr.shape and g.dtype == gr.dtype
            np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-12, atol=1e-13)


def test_jaxpr_has_custom_calls_not_callbacks(no_callback):
    a, b = R(2, 3, dtype=np.float32), R(3, 4, dtype=np.float32)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: jnp.sum(cjax.relu(cjax.matmul(a, b))), (0, 1)))(a, b))
    assert "pure_callback" not in jaxpr
    assert jaxpr.count("ffi_call") >= 4   # matmul, relu and their backward
    assert "canna_jax_call" in jaxpr


def test_repeated_calls_launch_once_each_and_copy_nothing(no_callback):
    f = jax.jit(lambda x, y: cjax.tanh(cjax.add(x, y)))
    x, y = R(64, 32, dtype=np.float32), R(64, 32, dtype=np.float32)
    f(x, y).block_until_ready()   # traced: the entries are made
    canna_dl.reset_copy_stats()
    before = _ffi.stats()
    for _ in range(5):
        out = f(x, y)
    np.testing.assert_allclose(np.asarray(out), np.tanh(np.asarray(x) + np.asarray(y)), rtol=1e-6)
    after = _ffi.stats()
    assert after["launches"] - before["launches"] == 10   # two kernels a call, nothing else
    assert after["entries"] == before["entries"]          # no new trace, no new plan
    assert canna_dl.copy_stats()["count"] == 0


def test_kernel_failure_is_a_python_exception(no_callback, acl):
    from acl_rt.lowlevel import backend
    f = jax.jit(cjax.sigmoid)
    x = R(8, dtype=np.float32)
    f(x).block_until_ready()
    s = _ffi.jit_stream()
    assert backend().lib.aclsimLaunchFault(s._handle("test"), 507015, b"injected jit fault") == 0
    with pytest.raises(Exception, match="injected jit fault") as e:
        f(x + 1).block_until_ready()
    assert "canna_dl.jax" in str(e.value) and "aclrtSynchronizeStream" in str(e.value)
    np.testing.assert_allclose(np.asarray(f(x)), 1 / (1 + np.exp(-np.asarray(x))), rtol=1e-6)   # usable again
    assert_usable()


def test_unknown_entry_is_an_error_not_a_crash(no_callback):
    x = R(4, dtype=np.float32)
    call = jax.ffi.ffi_call(_ffi.TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype))
    for entry, token in ((10 ** 9, _ffi._state["token"]), (0, _ffi._state["token"] ^ 2)):
        with pytest.raises(Exception, match="unknown kernel entry"):
            jax.jit(lambda v, e=entry, t=token: call(v, entry=np.int64(e), token=np.int64(t)))(x).block_until_ready()


def test_vmap_under_jit(no_callback):
    x = R(5, 3, 4, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(cjax.sigmoid))(x)), np.asarray(jax.nn.sigmoid(x)),
                               rtol=1e-6)
    g = jax.jit(jax.vmap(jax.grad(lambda v: jnp.sum(cjax.tanh(v) * v))))(x)
    gr = jax.vmap(jax.grad(lambda v: jnp.sum(jnp.tanh(v) * v)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-5, atol=1e-6)


def test_threads_share_one_executable(no_callback):
    f = jax.jit(lambda a, b: cjax.matmul(cjax.relu(a), b))
    args = [(R(16, 8, dtype=np.float32), R(8, 4, dtype=np.float32)) for _ in range(4)]
    f(*args[0]).block_until_ready()
    errors, results = [], {}

    def work(i):
        try:
            for _ in range(20):
                results[i] = np.asarray(f(*args[i]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for i, (a, b) in enumerate(args):
        np.testing.assert_allclose(results[i], np.maximum(np.asarray(a), 0) @ np.asarray(b), rtol=1e-5, atol=1e-6)


def test_an_op_the_route_cannot_take_falls_back():
    # a number where the op has no aclnn scalar form is a 0-d temporary operand: pure_callback, still right
    x = R(3, 4, dtype=np.float32)
    f = lambda v: cjax.sub(2.0, v)  # noqa: E731
    assert "pure_callback" in str(jax.make_jaxpr(f)(x))
    np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), 2.0 - np.asarray(x), rtol=1e-6)


FALLBACK = """
import jax, jax.numpy as jnp, numpy as np
import canna_dl, canna_dl.jax as cjax
from canna_dl.jax import _ffi
a = jnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3)); b = jnp.ones((3, 4), jnp.float32)
jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: jnp.sum(cjax.matmul(a, b))))(a, b))
assert "pure_callback" in jaxpr and "ffi_call" not in jaxpr, jaxpr
g = jax.jit(jax.grad(lambda a, b: jnp.sum(cjax.matmul(a, b)), (0, 1)))(a, b)
np.testing.assert_allclose(np.asarray(g[0]), np.full((2, 3), 4.0))
np.testing.assert_allclose(np.asarray(g[1]), np.tile(np.asarray(a).sum(0)[:, None], (1, 4)))
assert _ffi.stats()["launches"] == 0
print("ok", canna_dl.memory_model())
"""


@pytest.mark.parametrize("env", [{"CANNA_JAX_FFI": "0"}, {"CANNA_SIM_MEMORY": "discrete"}], ids=["off", "discrete"])
def test_pure_callback_fallback(py, env):
    out = py(FALLBACK, env=env).stdout
    assert "ok" in out


def test_finalize_retires_entries(py):
    out = py("""
        import jax, jax.numpy as jnp, numpy as np
        import acl_rt, canna_dl.jax as cjax
        from canna_dl.jax import _ffi
        f = jax.jit(cjax.relu)
        x = jnp.asarray([-1.0, 2.0])
        print(np.asarray(f(x)), _ffi.stats()["launches"])
        acl_rt.finalize()
        try:
            f(x).block_until_ready()
        except Exception as e:
            print("raised:", "finalized" in str(e))
        acl_rt.init()
        jax.clear_caches()
        print(np.asarray(jax.jit(cjax.relu)(x)))
    """).stdout
    assert "[0. 2.] 1" in out and "raised: True" in out and out.strip().endswith("[0. 2.]")


def test_no_compiler_warns_and_falls_back(py, tmp_path):
    out = py("""
        import warnings
        import jax, jax.numpy as jnp, numpy as np
        import canna_dl.jax as cjax
        from canna_dl.jax import _ffi
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = jax.jit(cjax.relu)(jnp.asarray([-1.0, 2.0]))
        print(np.asarray(y), _ffi.stats()["available"], [str(x.message)[:80] for x in w if x.category is RuntimeWarning])
    """, env={"PATH": str(tmp_path), "CXX": None, "CANNA_KERNEL_CACHE": str(tmp_path / "cache")}).stdout
    assert "[0. 2.] False" in out and "use jax.pure_callback" in out, out


def test_an_asynchronous_kernel_takes_the_route(no_callback):
    """matmul's gradient launches its two aclnn calls without waiting (NumPy results of the
    stream): the tasks that keep a launch's operands alive are not "other work" of the op (the
    capture waits for each launch and counts its own tasks), so a dense layer's gradient under jit
    is custom calls only, with jnp's values."""
    x, w, b = R(256, 512, dtype=np.float32), R(512, 512, dtype=np.float32) * 0.05, R(512, dtype=np.float32)

    def loss(ops):
        return lambda x, w, b: jnp.sum(ops[2](ops[1](ops[0](x, w), b)) ** 2)
    before = _ffi.stats()["launches"]
    got = jax.block_until_ready(jax.jit(jax.grad(loss((cjax.matmul, cjax.add, cjax.relu)), (0, 1, 2)))(x, w, b))
    assert _ffi.stats()["launches"] - before >= 5
    ref = jax.grad(loss((jnp.matmul, jnp.add, jax.nn.relu)), (0, 1, 2))(x.astype(np.float64), w.astype(np.float64),
                                                                        b.astype(np.float64))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(r), rtol=2e-4,
                                   atol=2e-4 * float(jnp.abs(r).max()))
