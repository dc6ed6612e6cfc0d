"""canna's differentiable JAX ops (canna_dl.jax): custom_vjp functions whose forward and backward
run canna's kernels, eagerly (zero-copy) and under jax.jit (XLA FFI custom calls, or jax.pure_callback
where those cannot serve: tests/test_jax_jit_ffi.py)."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import canna_dl  # noqa: E402
import canna_dl.jax as cjax  # noqa: E402
import kernels  # noqa: E402
from canna_dl.jax import _ops as cjax_ops  # noqa: E402

from conftest import assert_usable  # noqa: E402

RNG = np.random.default_rng(11)


def R(*shape, dtype=np.float32):
    return jnp.asarray(RNG.standard_normal(shape).astype(dtype))


CASES = {
    "add": (cjax.add, jnp.add, lambda dt: [R(3, 4, dtype=dt), R(4, dtype=dt)]),
    "add_scalar": (lambda x: cjax.add(x, 2.0), lambda x: x + 2.0, lambda dt: [R(2, 3, dtype=dt)]),
    "sub": (cjax.sub, jnp.subtract, lambda dt: [R(3, 1, dtype=dt), R(1, 4, dtype=dt)]),
    "mul": (cjax.mul, jnp.multiply, lambda dt: [R(2, 3, 4, dtype=dt), R(3, 1, dtype=dt)]),
    "matmul": (cjax.matmul, jnp.matmul, lambda dt: [R(2, 3, 4, dtype=dt), R(4, 5, dtype=dt)]),
    "matmul_vec": (cjax.matmul, jnp.matmul, lambda dt: [R(4, dtype=dt), R(4, 5, dtype=dt)]),
    "relu": (cjax.relu, jax.nn.relu, lambda dt: [R(3, 4, dtype=dt)]),
    "sigmoid": (cjax.sigmoid, jax.nn.sigmoid, lambda dt: [R(3, 4, dtype=dt)]),
    "tanh": (cjax.tanh, jnp.tanh, lambda dt: [R(3, 4, dtype=dt)]),
    "softmax": (cjax.softmax, jax.nn.softmax, lambda dt: [R(3, 4, dtype=dt)]),
    "softmax_axis0": (lambda x: cjax.softmax(x, axis=0), lambda x: jax.nn.softmax(x, axis=0),
                      lambda dt: [R(3, 4, dtype=dt)]),
    "log_softmax": (cjax.log_softmax, jax.nn.log_softmax, lambda dt: [R(2, 3, 4, dtype=dt)]),
}


def _loss(f):
    def loss(*args):
        y = f(*args)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=y.dtype).reshape(y.shape) * 0.7 + 0.3))
    return loss


def _check(name, dt, jit, rtol, atol):
    op, ref, make = CASES[name]
    args = make(dt)
    argnums = tuple(range(len(args)))
    wrap = jax.jit if jit else (lambda f: f)
    y = wrap(op)(*args)
    grads = wrap(jax.grad(_loss(op), argnums))(*args)
    y_ref = ref(*args)
    grads_ref = jax.grad(_loss(ref), argnums)(*args)
    assert y.dtype == y_ref.dtype and y.shape == y_ref.shape
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), rtol=rtol, atol=atol)
    for g, gr in zip(grads, grads_ref):
        assert g.shape == gr.shape and g.dtype == gr.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=rtol, atol=atol)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(CASES))
def test_grad_matches_jnp_float32(name, jit):
    _check(name, np.float32, jit, 1e-5, 1e-6)


@pytest.mark.parametrize("name", ["add", "matmul", "relu", "softmax", "sigmoid"])
def test_grad_under_jit_matches_jnp_float64(name):
    with jax.enable_x64(True):
        _check(name, np.float64, True, 1e-12, 1e-13)


def test_add_of_two_vectors_gives_the_sums():
    a, b = jnp.array([1.0, 2.0, 3.0]), jnp.array([4.0, 5.0, 6.0])
    np.testing.assert_array_equal(np.asarray(cjax.add(a, b)), [5.0, 7.0, 9.0])

    def loss(a, b):
        return jnp.sum(cjax.add(a, b))
    for f in (jax.grad(loss, (0, 1)), jax.jit(jax.grad(loss, (0, 1)))):
        ga, gb = f(a, b)
        np.testing.assert_array_equal(np.asarray(ga), [1.0, 1.0, 1.0])
        np.testing.assert_array_equal(np.asarray(gb), [1.0, 1.0, 1.0])
    big = R(32, 64, 128)
    assert cjax.add(big, big).shape == (32, 64, 128)
    assert jax.jit(cjax.add)(big, big).shape == (32, 64, 128)


def test_jit_runs_kernels_as_custom_calls_or_callbacks():
    # the XLA FFI route where it is available (tests/test_jax_jit_ffi.py), else pure_callback
    from canna_dl.jax import _ffi
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda a, b: jnp.sum(cjax.matmul(a, b))))(R(2, 3), R(3, 4)))
    what = "ffi_call" if _ffi.available() else "pure_callback"
    assert jaxpr.count(what) >= 2   # the forward (inside custom_vjp_call) and the backward


@pytest.mark.skipif(canna_dl.memory_model() != "unified", reason="zero-copy exchange needs the unified memory model")
def test_eager_calls_are_zero_copy(monkeypatch):
    x = R(64, 32)
    seen = []
    real = kernels.relu

    def spy(t):
        r = real(t)
        seen.append((canna_dl.asarray(t).ptr, canna_dl.asarray(r).ptr))
        return r
    monkeypatch.setattr(kernels.get_op("relu"), "kernel", spy)   # the registry entry's kernel function
    canna_dl.reset_copy_stats()
    y = cjax.relu(x)
    (xin, yout), = seen
    assert xin == canna_dl.from_jax(x).ptr     # the kernel read x's buffer
    assert yout == canna_dl.from_jax(y).ptr    # and JAX got the kernel's output buffer
    ga, gb = jax.grad(lambda a, b: jnp.sum(cjax.matmul(a, b)), (0, 1))(R(5, 3), R(3, 2))
    assert ga.shape == (5, 3) and gb.shape == (3, 2)
    assert canna_dl.copy_stats()["count"] == 0


def test_vmap():
    x = R(5, 3, 4)
    np.testing.assert_allclose(np.asarray(jax.vmap(cjax.softmax)(x)), np.asarray(jax.nn.softmax(x)), rtol=1e-6)
    g = jax.vmap(jax.grad(lambda v: jnp.sum(cjax.tanh(v) * v)))(x)
    gr = jax.vmap(jax.grad(lambda v: jnp.sum(jnp.tanh(v) * v)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-5, atol=1e-6)


def test_x64_narrowing_is_jax_s():
    # without jax_enable_x64 JAX itself narrows float64 input to float32: canna computes in float32
    y = cjax.add(np.ones(3, np.float64), np.ones(3, np.float64))
    assert y.dtype == jnp.float32


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_second_derivatives_raise(jit):
    x = R(3)
    f = jax.grad(lambda v: jnp.sum(jax.grad(lambda u: jnp.sum(cjax.tanh(u)))(v)))
    with pytest.raises(NotImplementedError, match="second derivatives"):
        (jax.jit(f) if jit else f)(x)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda u: jnp.sum(cjax.tanh(u)))(x)),
                               1 - np.tanh(np.asarray(x)) ** 2, rtol=1e-6)


BAD = [
    ("integer", lambda: cjax.add(jnp.array([1, 2]), jnp.array([3, 4])), TypeError, "int32"),
    ("integer_relu", lambda: cjax.relu(jnp.arange(3)), TypeError, "int32"),
    ("bool", lambda: cjax.sigmoid(jnp.array([True])), TypeError, "bool"),
    ("mixed", lambda: cjax.add(jnp.ones(2, jnp.float32), jnp.ones(2, jnp.bfloat16)), TypeError, "does not promote"),
    ("mixed_matmul", lambda: cjax.matmul(jnp.ones((2, 2)), jnp.ones((2, 2), jnp.float16)), TypeError, "promote"),
    ("string", lambda: cjax.relu("abc"), TypeError, "str"),
    ("none", lambda: cjax.tanh(None), TypeError, "NoneType"),
    ("two_scalars", lambda: cjax.add(1.0, 2.0), TypeError, "at least one operand"),
    ("broadcast", lambda: cjax.add(jnp.ones((2, 3)), jnp.ones(4)), ValueError, "cannot be broadcast"),
    ("inner_dims", lambda: cjax.matmul(jnp.ones((2, 3)), jnp.ones((4, 2))), ValueError, "inner dimensions"),
    ("axis", lambda: cjax.softmax(jnp.ones((2, 3)), axis=2), IndexError, "out of range"),
]


@pytest.mark.parametrize("name,call,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()
    np.testing.assert_array_equal(np.asarray(cjax.add(jnp.ones(2), jnp.ones(2))), [2.0, 2.0])


@pytest.mark.parametrize("name,call,exc,match", [b for b in BAD if b[0] in ("integer", "mixed", "inner_dims")],
                         ids=["integer", "mixed", "inner_dims"])
def test_bad_input_under_jit(name, call, exc, match):
    with pytest.raises(exc, match=match):
        jax.jit(call)()
    assert_usable()
