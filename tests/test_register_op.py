"""kernels.register_op (docs/DESIGN.md §11, README "Your own ops"): a user's RawKernels registered
once become a PyTorch op (eager, autograd, gradcheck in float64, torch.compile(fullgraph=True),
offload() mapping), a TensorFlow op (GradientTape with finite differences, tf.function with static
shapes) and a JAX function (jax.grad, jax.jit); registrations that cannot work are refused when
they are made, and bad call-time inputs get the usual exception types."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernels
from kernels import Attr, Launch, Spec, Tensor

SQUARE = r"""
#include "canna_kernel.h"
CANNA_KERNEL void square(const GM_ADDR x, GM_ADDR z, uint64_t n) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i)
        ((double *)z)[i] = ((const double *)x)[i] * ((const double *)x)[i];
}
/* the gradient: 2 * g * x, scaled by `scale` (an attribute) */
CANNA_KERNEL void square_grad(const GM_ADDR g, const GM_ADDR x, GM_ADDR z, uint64_t n, double scale) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i)
        ((double *)z)[i] = scale * 2.0 * ((const double *)g)[i] * ((const double *)x)[i];
}
"""

NS = "regtest"


def _same_shape(*xs, **attrs):
    for x in xs[1:]:
        if tuple(x.shape) != tuple(xs[0].shape):
            raise ValueError(f"shapes {tuple(xs[0].shape)} and {tuple(x.shape)} differ")
    return Spec(xs[0].shape, xs[0].dtype)


def _blocks(*arrays, **attrs):
    n = math.prod(arrays[0].shape)
    return max(1, min(4, n)), (n,) + tuple(attrs.values())


@pytest.fixture(scope="module")
def ops():
    mod = kernels.RawModule(SQUARE)
    grad = kernels.register_op(
        "square_grad", namespace=NS, inputs=[Tensor("g", "float64"), Tensor("x", "float64", diff=False)],
        attrs=[Attr("scale", float, 1.0)], shape=_same_shape,
        forward=Launch(mod.get_function("square_grad"), _blocks))
    sq = kernels.register_op(
        "square", namespace=NS, inputs=[Tensor("x", "float64")], shape=_same_shape,
        forward=Launch(mod.get_function("square"), _blocks),
        backward=lambda ops, g, x: ops[f"{NS}::square_grad"](g, x), save=("x",))
    return sq, grad


def _x(n=6):
    return np.linspace(-1.5, 2.0, n)


def test_kernel_level(ops):
    sq, grad = ops
    x = _x()
    np.testing.assert_array_equal(sq(x), x * x)
    np.testing.assert_allclose(grad(np.ones(6), x, scale=0.5), x)
    with pytest.raises(TypeError, match="float64"):
        sq(x.astype(np.float32))
    with pytest.raises(ValueError, match="differ"):
        grad(np.ones(5), x)
    with pytest.raises(TypeError, match="x must be an array"):
        sq(None)


def test_torch(ops):
    torch = pytest.importorskip("torch")
    import canna_dl.torch as ct
    sq, _ = ops
    f = sq.torch_fn
    x = torch.tensor(_x(), requires_grad=True)
    assert torch.equal(f(x.detach()), x.detach() ** 2)
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradcheck(torch.ops.regtest.square, (x,))
    # the backward is a registered op with no backward: a second derivative is refused clearly
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward of regtest::square_grad"):
        g.sum().backward()
    torch.compiler.reset()
    c = torch.compile(lambda t: f(t).sum(), fullgraph=True)
    xc = x.detach().clone().requires_grad_()
    c(xc).backward()
    torch.testing.assert_close(xc.grad, 2 * xc.detach())
    with pytest.raises(TypeError, match="float64"):
        f(torch.ones(3))
    with pytest.raises(ValueError, match="differ"):
        torch.ops.regtest.square_grad(torch.ones(3, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    # offload() maps a torch function to it when the registration names one
    kernels.register_op(
        "square_mapped", namespace=NS, inputs=[Tensor("x", "float64")], shape=_same_shape,
        forward=Launch(kernels.RawModule(SQUARE).get_function("square"), _blocks),
        backward=lambda ops, g, x: ops[f"{NS}::square_grad"](g, x), save=("x",), torch=[torch.square])
    from canna_dl.torch import _aten
    levels = ("function", "aten") if _aten.available() else ("function",)
    for level, only in [(lv, o) for lv in levels for o in (["square_mapped"], None)]:   # (None: every row)
        xm = torch.tensor(_x(), requires_grad=True)
        with ct.offload(ops=only, level=level) as rep:
            y = torch.square(xm)
            y.sum().backward()
        torch.testing.assert_close(y, xm.detach() ** 2)
        torch.testing.assert_close(xm.grad, 2 * xm.detach())
        assert rep.ops["square_mapped"].canna == 1 and rep.ops["square_mapped"].backward == 1, (level, rep)
        # the user op's own custom-op calls are its row's, not PyTorch's
        assert not any(NS in str(k) for k in rep.pytorch_calls), (level, rep.pytorch_calls)


def test_tensorflow(ops):
    tf = pytest.importorskip("tensorflow")
    sq, _ = ops
    f = sq.tf_fn
    x = tf.constant(_x())
    np.testing.assert_array_equal(f(x).numpy(), _x() ** 2)
    theo, num = tf.test.compute_gradient(f, [x])
    np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-8)

    @tf.function
    def grad(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = tf.reduce_sum(f(t))
        return tape.gradient(y, t)
    np.testing.assert_allclose(grad(x).numpy(), 2 * _x())
    conc = tf.function(f).get_concrete_function(tf.TensorSpec([4, 5], tf.float64))
    assert conc.structured_outputs.shape.as_list() == [4, 5]   # a static shape Keras can use
    with pytest.raises(TypeError, match="float"):
        f(tf.constant([1, 2]))
    with pytest.raises(ValueError, match="differ"):
        _.tf_fn(tf.ones(3, tf.float64), tf.ones(4, tf.float64))


def test_jax(ops):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    sq, _ = ops
    f = sq.jax_fn
    with jax.enable_x64(True):
        x = jnp.asarray(_x())
        np.testing.assert_array_equal(np.asarray(f(x)), _x() ** 2)
        g = jax.grad(lambda t: jnp.sum(f(t)))(x)
        np.testing.assert_allclose(np.asarray(g), 2 * _x())
        gj = jax.jit(jax.grad(lambda t: jnp.sum(f(t))))(x)
        np.testing.assert_allclose(np.asarray(gj), 2 * _x())
        with pytest.raises(ValueError, match="differ"):
            _.jax_fn(jnp.ones(3), jnp.ones(4))


# ---------------------------------------------------------------------------------------------
# refused at registration

def _k():
    return kernels.RawModule(SQUARE).get_function("square")


def _launch():
    return Launch(_k(), _blocks)


@pytest.mark.parametrize("kw,match", [
    (dict(shape=lambda x: (Spec(x.shape, x.dtype), Spec(x.shape, x.dtype))), "declares 1 output"),
    (dict(shape=lambda x: x.shape), "declares 1 output"),
    (dict(outputs=("a", "b")), "returns 1 value"),
    (dict(shape=lambda x: 1 / 0), "shape rule fails"),
    (dict(backward=lambda ops, g: (g, g)), "returns 2 gradient"),
    (dict(backward=lambda ops, g: ops.sum(g)), "has shape"),
    (dict(backward=lambda ops, g: ops.no_such_op(g)), "backward fails"),
    (dict(backward=lambda ops, g, q: g, save=("q",)), "save names 'q'"),
    (dict(forward="square"), "forward must be"),
    (dict(attrs=[Attr("k", object, 1)]), "needs a type"),
    (dict(inputs=["x", "x"]), "used twice"),
    (dict(inputs=["out"]), r"\['out'\] name both an argument and an output"),
    (dict(shape=lambda x: Spec((-1,), x.dtype)), "shape \\(-1,\\).*a dimension is an int >= 0"),
    (dict(inputs=["not an id"]), "identifier"),
    (dict(namespace="canna"), "canna's own"),
    (dict(torch=[42]), "torch= takes torch functions"),
    (dict(torch=[("torch.square", {"a": 1}, {"b": 2})]), "cannot read"),
    (dict(torch=[kernels.TorchFn("torch.square", ("input",))], attrs=[Attr("k", int)]),
     "do not bind the op's attribute 'k'"),
    (dict(torch=[("torch.square", "input, k=1, =2")]), "parameters are names"),
])
def test_refused_at_registration(kw, match):
    args = dict(inputs=[Tensor("x", "float64")], shape=_same_shape, forward=_launch(), namespace=NS)
    args.update(kw)
    with pytest.raises(kernels.RegistrationError, match=match):
        kernels.register_op("refused", **args)
    assert "regtest::refused" not in {op.qualname for op in kernels.registered_ops()}


@pytest.mark.parametrize("bad", ["lstm.input", 3, "aten::a::b"])
def test_at_aten_names_an_aten_operator(bad):
    with pytest.raises(kernels.RegistrationError, match="at_aten must name an aten operator"):
        kernels.TorchFn("torch.square", at_aten=bad)
    assert kernels.TorchFn("torch.lstm", at_aten="aten::lstm.input").at_aten == "aten::lstm.input"


def test_name_taken_is_refused(ops):
    with pytest.raises(kernels.RegistrationError, match="already registered"):
        kernels.register_op("square", namespace=NS, inputs=[Tensor("x", "float64")], shape=_same_shape,
                            forward=_launch())


# ---------------------------------------------------------------------------------------------
# attribute types: int lists (schema int[]) and optional scalars (float? / int?)

AFFINE = r"""
#include "canna_kernel.h"
CANNA_KERNEL void affine(const GM_ADDR x, GM_ADDR z, uint64_t n, double a, double b) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i)
        ((double *)z)[i] = a * ((const double *)x)[i] + b;
}
"""


def _coef(coef):
    """The op's own expansion of its int list: one int is (c, c)."""
    c = coef * 2 if len(coef) == 1 else coef
    if len(c) != 2:
        raise ValueError(f"coef must have 2 ints, got {len(c)}")
    return c


def _affine_shape(x, coef=(2, 1), offset=None, shift=None):
    _coef(coef)
    return Spec(x.shape, x.dtype)


def _affine_rule(x, z, coef, offset, shift):
    a, b = _coef(coef)
    return 1, (math.prod(x.shape), float(a), b + (offset or 0.0) + (shift or 0))


@pytest.fixture(scope="module")
def affine():
    """``coef[0] * x + coef[1] + offset + shift``; its gradient is the op itself with coef (c0, 0)."""
    k = kernels.RawModule(AFFINE).get_function("affine")
    return kernels.register_op(
        "affine", namespace=NS, inputs=[Tensor("x", "float64")],
        attrs=[Attr("coef", list[int], (2, 1)), Attr("offset", float, None), Attr("shift", int, None)],
        shape=_affine_shape, forward=Launch(k, _affine_rule),
        backward=lambda ops, g, coef, offset, shift: ops[f"{NS}::affine"](g, (_coef(coef)[0], 0)))


def test_int_list_and_optional_attrs_kernel_level(affine):
    x = _x()
    np.testing.assert_allclose(affine(x), 2 * x + 1)
    np.testing.assert_allclose(affine(x, [3, -2], 0.5, 4), 3 * x - 2 + 0.5 + 4)
    np.testing.assert_allclose(affine(x, 3), 3 * x + 3)      # one int, expanded by the op's rule
    np.testing.assert_allclose(affine(x, coef=(1, 0), shift=None), x)
    assert [a.default for a in affine.attrs] == [(2, 1), None, None]
    with pytest.raises(TypeError, match="coef must be an int or a list/tuple of ints, not list"):
        affine(x, [1.5, 2])
    with pytest.raises(TypeError, match="offset must be a float or None, not str"):
        affine(x, offset="1")
    with pytest.raises(TypeError, match="shift must be an int or None, not float"):
        affine(x, shift=1.5)
    with pytest.raises(ValueError, match="coef must have 2 ints"):
        affine(x, (1, 2, 3))


def test_int_list_and_optional_attrs_torch(affine):
    torch = pytest.importorskip("torch")
    from canna_dl.torch._generated import schema
    assert schema(affine) == "(Tensor x, int[] coef=[2, 1], float? offset=None, int? shift=None) -> Tensor"
    f = affine.torch_fn
    x = torch.tensor(_x(), requires_grad=True)
    torch.testing.assert_close(f(x, [3, 1], 0.25), 3 * x.detach() + 1.25)
    assert torch.autograd.gradcheck(lambda t: f(t, (3, 1), 0.25, 2), (x,))
    assert torch.autograd.gradcheck(lambda t: torch.ops.regtest.affine(t, [3, 1], None, 2), (x,))
    from torch.library import opcheck
    res = opcheck(torch.ops.regtest.affine.default, (x.detach(), [3, 1], 0.5, None))
    assert all(v == "SUCCESS" for v in res.values()), res
    torch.compiler.reset()
    c = torch.compile(lambda t: f(t, [5, 2], 1.0).sum(), fullgraph=True)
    xc = x.detach().clone().requires_grad_()
    y = c(xc)
    y.backward()
    torch.testing.assert_close(y, (5 * xc.detach() + 3).sum())
    torch.testing.assert_close(xc.grad, torch.full_like(xc, 5.0))
    with pytest.raises(TypeError, match="coef must be an int or a list/tuple of ints"):
        f(x, "ab")


def test_int_list_and_optional_attrs_tf(affine):
    tf = pytest.importorskip("tensorflow")
    f = affine.tf_fn
    x = tf.constant(_x())
    np.testing.assert_allclose(f(x, [3, 1], 0.5).numpy(), 3 * _x() + 1.5)
    theo, num = tf.test.compute_gradient(lambda t: f(t, (3, -1), None, 2), [x])
    np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-8)
    g = tf.function(lambda t: f(t, coef=[4, 0], shift=1))
    np.testing.assert_allclose(g(x).numpy(), 4 * _x() + 1)


def test_int_list_and_optional_attrs_jax(affine):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    f = affine.jax_fn
    with jax.enable_x64(True):
        x = jnp.asarray(_x())
        np.testing.assert_allclose(np.asarray(f(x, [3, 1], 0.5)), 3 * _x() + 1.5)
        g = jax.jit(jax.grad(lambda t: jnp.sum(f(t, [3, 1], None, 2))))(x)
        np.testing.assert_allclose(np.asarray(g), np.full(6, 3.0))
        np.testing.assert_allclose(np.asarray(jax.jit(lambda t: f(t, (2, 2)))(x)), 2 * _x() + 2)


# ---------------------------------------------------------------------------------------------
# mutated inputs (schema Tensor(a!), mutates_args): updated in place

TRACK = r"""
#include "canna_kernel.h"
/* z = 2 x, and running <- m * running + (1 - m) * x (a running mean, as batch norm keeps) */
CANNA_KERNEL void track(const GM_ADDR x, GM_ADDR running, GM_ADDR z, uint64_t n, double m) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i) {
        double v = ((const double *)x)[i];
        ((double *)z)[i] = 2.0 * v;
        ((double *)running)[i] = m * ((double *)running)[i] + (1.0 - m) * v;
    }
}
/* p <- p - lr * g (an optimizer step: no outputs) */
CANNA_KERNEL void sgd(GM_ADDR p, const GM_ADDR g, uint64_t n, double lr) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i)
        ((double *)p)[i] -= lr * ((const double *)g)[i];
}
"""


@pytest.fixture(scope="module")
def mutating(affine):
    mod = kernels.RawModule(TRACK)
    track = kernels.register_op(
        "track", namespace=NS, inputs=[Tensor("x", "float64"), Tensor("running", "float64", mutated=True)],
        attrs=[Attr("momentum", float, 0.5)], shape=lambda x, running, momentum: _same_shape(x, running),
        forward=Launch(mod.get_function("track"), _blocks),
        backward=lambda ops, g, momentum: (ops[f"{NS}::affine"](g, (2, 0)),))
    sgd = kernels.register_op(
        "sgd_step", namespace=NS, inputs=[Tensor("p", "float64", mutated=True), Tensor("g", "float64", diff=False)],
        attrs=[Attr("lr", float, 0.1)], outputs=(), shape=lambda p, g, lr: (_same_shape(p, g),)[1:],
        forward=Launch(mod.get_function("sgd"), _blocks))
    return track, sgd


def test_mutated_kernel_level(mutating):
    track, sgd = mutating
    x, r = _x(), np.ones(6)
    z = track(x, r, 0.25)
    np.testing.assert_allclose(z, 2 * x)
    np.testing.assert_allclose(r, 0.25 + 0.75 * x)          # the caller's array, updated in place
    p = np.ones(6)
    assert sgd(p, x, lr=0.5) is None
    np.testing.assert_allclose(p, 1 - 0.5 * x)
    # a non-contiguous array is updated through a temporary and copied back
    big = np.ones(12)
    sgd(big[::2], x, lr=1.0)
    np.testing.assert_allclose(big[::2], 1 - x)
    np.testing.assert_allclose(big[1::2], 1.0)
    ro = np.ones(6)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only|writable"):
        sgd(ro, x)
    with pytest.raises(ValueError, match="overlap"):
        sgd(p, p)
    assert [t.diff for t in track.inputs] == [True, False]


def test_mutated_registration_refusals():
    k = kernels.RawModule(TRACK).get_function("sgd")
    with pytest.raises(kernels.RegistrationError, match="cannot be differentiable"):
        Tensor("p", mutated=True, diff=True)
    with pytest.raises(kernels.RegistrationError, match="needs an output or an input it updates"):
        kernels.register_op("nothing", namespace=NS, inputs=["x"], outputs=(), shape=lambda x: (),
                            forward=Launch(k, _blocks))


def test_mutated_torch(mutating):
    torch = pytest.importorskip("torch")
    from canna_dl.torch._generated import schema
    track, sgd = mutating
    assert schema(track) == "(Tensor x, Tensor(a!) running, float momentum=0.5) -> Tensor"
    assert schema(sgd) == "(Tensor(a!) p, Tensor g, float lr=0.1) -> ()"
    x = torch.tensor(_x(), requires_grad=True)
    r = torch.ones(6, dtype=torch.float64)
    v0 = r._version
    z = track.torch_fn(x, r, 0.25)
    assert r._version > v0                                   # autograd knows it changed
    torch.testing.assert_close(r, 0.25 + 0.75 * x.detach())
    z.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    assert torch.autograd.gradcheck(lambda t: track.torch_fn(t, torch.ones(6, dtype=torch.float64)), (x,))
    # the custom op declares the mutation (opcheck verifies it)
    from torch.library import opcheck
    res = opcheck(torch.ops.regtest.track.default, (x.detach(), torch.ones(6, dtype=torch.float64), 0.5))
    assert all(v == "SUCCESS" for v in res.values()), res
    p = torch.ones(6, dtype=torch.float64)
    assert sgd.torch_fn(p, x.detach(), 0.5) is None
    torch.testing.assert_close(p, 1 - 0.5 * x.detach())
    res = opcheck(torch.ops.regtest.sgd_step.default, (torch.ones(6, dtype=torch.float64), x.detach(), 0.5))
    assert all(v == "SUCCESS" for v in res.values()), res
    # torch.compile(fullgraph=True) keeps the in-place updates
    torch.compiler.reset()
    ft, fs = track.torch_fn, sgd.torch_fn

    @torch.compile(fullgraph=True)
    def step(t, running, param):
        y = ft(t, running, 0.5)
        fs(param, t.detach(), 1.0)
        return y.sum()
    rc, pc = torch.ones(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    xc = x.detach().clone().requires_grad_()
    step(xc, rc, pc).backward()
    torch.testing.assert_close(rc, 0.5 + 0.5 * xc.detach())
    torch.testing.assert_close(pc, 1 - xc.detach())
    torch.testing.assert_close(xc.grad, torch.full_like(xc, 2.0))
    # a parameter that requires grad is updated under no_grad, as PyTorch's optimizers do
    w = torch.ones(6, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="updated in place and requires grad"):
        sgd.torch_fn(w, x.detach())
    with torch.no_grad():
        sgd.torch_fn(w, x.detach(), 1.0)
    torch.testing.assert_close(w.detach(), 1 - x.detach())


def test_mutated_tf(mutating):
    tf = pytest.importorskip("tensorflow")
    track, sgd = mutating
    x = tf.constant(_x())
    r = tf.Variable(tf.ones(6, tf.float64))
    z = track.tf_fn(x, r, 0.25)
    np.testing.assert_allclose(z.numpy(), 2 * _x())
    np.testing.assert_allclose(r.numpy(), 0.25 + 0.75 * _x())
    with pytest.raises(TypeError, match="TensorFlow tensors are immutable: pass a tf.Variable"):
        track.tf_fn(x, tf.ones(6, tf.float64))
    p = tf.Variable(tf.ones(6, tf.float64))

    @tf.function
    def step(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = tf.reduce_sum(track.tf_fn(t, r, 0.5))
        sgd.tf_fn(p, t, 1.0)
        return tape.gradient(y, t)
    r.assign(tf.ones(6, tf.float64))
    np.testing.assert_allclose(step(x).numpy(), np.full(6, 2.0))
    np.testing.assert_allclose(r.numpy(), 0.5 + 0.5 * _x())
    np.testing.assert_allclose(p.numpy(), 1 - _x())
    assert sgd.tf_fn(p, x, 1.0) is None


def test_mutated_jax(mutating):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    track, sgd = mutating
    with jax.enable_x64(True):
        x, r = jnp.asarray(_x()), jnp.ones(6)
        z, r2 = track.jax_fn(x, r, 0.25)     # functional: the new value after the outputs
        np.testing.assert_allclose(np.asarray(z), 2 * _x())
        np.testing.assert_allclose(np.asarray(r2), 0.25 + 0.75 * _x())
        np.testing.assert_array_equal(np.asarray(r), np.ones(6))    # JAX arrays are not changed
        zj, rj = jax.jit(lambda t, q: track.jax_fn(t, q, 0.25))(x, r)
        np.testing.assert_allclose(np.asarray(rj), np.asarray(r2))
        g = jax.jit(jax.grad(lambda t: jnp.sum(track.jax_fn(t, r)[0])))(x)
        np.testing.assert_allclose(np.asarray(g), np.full(6, 2.0))
        p2 = sgd.jax_fn(jnp.ones(6), x, 0.5)
        np.testing.assert_allclose(np.asarray(p2), 1 - 0.5 * _x())
        np.testing.assert_allclose(np.asarray(jax.jit(sgd.jax_fn)(jnp.ones(6), x)), 1 - 0.1 * _x())


# ---------------------------------------------------------------------------------------------
# list inputs (TensorList, schema Tensor[])

WSUM = r"""
#include "canna_kernel.h"
/* z = w0 x0 + w1 x1 + w2 x2: the list's arrays arrive as consecutive arguments */
CANNA_KERNEL void wsum3(const GM_ADDR x0, const GM_ADDR x1, const GM_ADDR x2, GM_ADDR z, uint64_t n, double w0,
                        double w1, double w2) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i)
        ((double *)z)[i] = w0 * ((const double *)x0)[i] + w1 * ((const double *)x1)[i] + w2 * ((const double *)x2)[i];
}
/* a foreach step over two parameters: p_k <- p_k - lr * g_k */
CANNA_KERNEL void sgd2(GM_ADDR p0, GM_ADDR p1, const GM_ADDR g0, const GM_ADDR g1, uint64_t n, double lr) {
    uint64_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint64_t i = lo; i < n && i < lo + per; ++i) {
        ((double *)p0)[i] -= lr * ((const double *)g0)[i];
        ((double *)p1)[i] -= lr * ((const double *)g1)[i];
    }
}
"""


def _wsum_shape(xs, weights=(1, 2, 3)):
    if len(xs) != 3 or len(weights) != 3:
        raise ValueError(f"wsum3 takes 3 arrays and 3 weights, got {len(xs)} and {len(weights)}")
    return _same_shape(*xs)


@pytest.fixture(scope="module")
def listops(affine):
    mod = kernels.RawModule(WSUM)
    wsum = kernels.register_op(
        "wsum3", namespace=NS, inputs=[kernels.TensorList("xs", "float64")],
        attrs=[Attr("weights", list[int], (1, 2, 3))], shape=_wsum_shape, example_shapes=[[(2, 3)] * 3],
        forward=Launch(mod.get_function("wsum3"),
                       lambda xs, z, weights: (2, (math.prod(z.shape), *map(float, weights)))),
        backward=lambda ops, g, weights: ([ops[f"{NS}::affine"](g, (w, 0)) for w in weights],))
    sgd2 = kernels.register_op(
        "sgd2", namespace=NS, outputs=(), attrs=[Attr("lr", float, 0.1)],
        inputs=[kernels.TensorList("params", "float64", mutated=True),
                kernels.TensorList("grads", "float64", diff=False)],
        shape=lambda params, grads, lr: (_same_shape(*params, *grads),)[1:],
        forward=Launch(mod.get_function("sgd2"), lambda p, g, lr: (1, (math.prod(p[0].shape), lr))))
    return wsum, sgd2


def _three():
    return [_x() + k for k in range(3)]


def test_tensor_list_kernel_level(listops):
    wsum, sgd2 = listops
    xs = _three()
    np.testing.assert_allclose(wsum(xs), xs[0] + 2 * xs[1] + 3 * xs[2])
    np.testing.assert_allclose(wsum(tuple(xs), [0, 1, 0]), xs[1])
    with pytest.raises(ValueError, match="takes 3 arrays"):
        wsum(xs[:2])
    with pytest.raises(TypeError, match=r"xs\[1\] must be an array"):
        wsum([xs[0], None, xs[2]])
    with pytest.raises(TypeError, match="xs must be a list or tuple of arrays"):
        wsum(xs[0])
    with pytest.raises(TypeError, match=r"xs\[2\].*float64"):
        wsum([xs[0], xs[1], xs[2].astype(np.float32)])
    ps = [np.ones(6), np.zeros(6)]
    assert sgd2(ps, xs[:2], lr=0.5) is None
    np.testing.assert_allclose(ps[0], 1 - 0.5 * xs[0])
    np.testing.assert_allclose(ps[1], -0.5 * xs[1])
    with pytest.raises(kernels.RegistrationError, match="list xs must be a list of 3 gradients"):
        kernels.register_op("bad_list_grad", namespace=NS, inputs=[kernels.TensorList("xs", "float64")],
                            shape=_wsum_shape, example_shapes=[[(2, 3)] * 3], forward=wsum.forward,
                            backward=lambda ops, g: (g,))


def test_tensor_list_torch(listops):
    torch = pytest.importorskip("torch")
    from canna_dl.torch._generated import schema
    wsum, sgd2 = listops
    assert schema(wsum) == "(Tensor[] xs, int[] weights=[1, 2, 3]) -> Tensor"
    assert schema(sgd2) == "(Tensor(a!)[] params, Tensor[] grads, float lr=0.1) -> ()"
    f = wsum.torch_fn
    xs = [torch.tensor(v, requires_grad=True) for v in _three()]
    y = f(xs, [1, -1, 2])
    torch.testing.assert_close(y, xs[0].detach() - xs[1].detach() + 2 * xs[2].detach())
    y.sum().backward()
    assert [float(x.grad[0]) for x in xs] == [1.0, -1.0, 2.0]
    assert torch.autograd.gradcheck(lambda a, b, c: f([a, b, c], (2, 1, -3)), tuple(xs))
    assert torch.autograd.gradcheck(lambda a, b, c: torch.ops.regtest.wsum3([a, b, c], [2, 1, -3]), tuple(xs))
    from torch.library import opcheck
    res = opcheck(torch.ops.regtest.wsum3.default, ([x.detach() for x in xs], [1, 2, 3]))
    assert all(v == "SUCCESS" for v in res.values()), res
    torch.compiler.reset()
    c = torch.compile(lambda a, b, t: f([a, b, t], [3, 2, 1]).sum(), fullgraph=True)
    xc = [x.detach().clone().requires_grad_() for x in xs]
    c(*xc).backward()
    assert [float(x.grad[0]) for x in xc] == [3.0, 2.0, 1.0]
    ps = [torch.ones(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)]
    gs = [x.detach() for x in xs[:2]]
    sgd2.torch_fn(ps, gs, 0.5)
    torch.testing.assert_close(ps[0], 1 - 0.5 * gs[0])
    torch.testing.assert_close(ps[1], -0.5 * gs[1])
    res = opcheck(torch.ops.regtest.sgd2.default, ([torch.ones(6, dtype=torch.float64)] * 1 +
                                                    [torch.zeros(6, dtype=torch.float64)], gs, 0.5))
    assert all(v == "SUCCESS" for v in res.values()), res
    with pytest.raises(TypeError, match="xs must be a list or tuple of tensors"):
        f(xs[0])


def test_tensor_list_tf(listops):
    tf = pytest.importorskip("tensorflow")
    wsum, sgd2 = listops
    f = wsum.tf_fn
    xs = [tf.constant(v) for v in _three()]
    np.testing.assert_allclose(f(xs, [1, -1, 2]).numpy(), _three()[0] - _three()[1] + 2 * _three()[2])
    theo, num = tf.test.compute_gradient(lambda a, b, c: f([a, b, c], (2, 1, -3)), xs)
    for t, n in zip(theo, num):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-8)
    conc = tf.function(lambda a, b, c: f([a, b, c])).get_concrete_function(*[tf.TensorSpec([4], tf.float64)] * 3)
    assert conc.structured_outputs.shape.as_list() == [4]
    ps = [tf.Variable(tf.ones(6, tf.float64)), tf.Variable(tf.zeros(6, tf.float64))]
    tf.function(lambda: sgd2.tf_fn(ps, xs[:2], 0.5))()
    np.testing.assert_allclose(ps[0].numpy(), 1 - 0.5 * _three()[0])
    np.testing.assert_allclose(ps[1].numpy(), -0.5 * _three()[1])


def test_tensor_list_jax(listops):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    wsum, sgd2 = listops
    f = wsum.jax_fn
    with jax.enable_x64(True):
        xs = [jnp.asarray(v) for v in _three()]
        np.testing.assert_allclose(np.asarray(f(xs, [1, -1, 2])), _three()[0] - _three()[1] + 2 * _three()[2])
        gs = jax.jit(jax.grad(lambda v: jnp.sum(f(v, [2, 1, -3]))))(xs)
        assert [float(g[0]) for g in gs] == [2.0, 1.0, -3.0]
        p0, p1 = sgd2.jax_fn([jnp.ones(6), jnp.zeros(6)], xs[:2], 0.5)
        np.testing.assert_allclose(np.asarray(p1), -0.5 * _three()[1])
        p0j, _ = jax.jit(lambda p, g: sgd2.jax_fn(p, g, 0.5))([jnp.ones(6), jnp.zeros(6)], xs[:2])
        np.testing.assert_allclose(np.asarray(p0j), 1 - 0.5 * _three()[0])


# ---------------------------------------------------------------------------------------------
# what a user meets beyond the README's example

SINCOS = r"""
#include "canna_kernel.h"
#include <math.h>
CANNA_KERNEL void sincos_k(const GM_ADDR x, GM_ADDR s, GM_ADDR c, uint64_t n, double scale) {
    for (uint64_t i = GetBlockIdx(); i < n; i += GetBlockNum()) {
        double v = ((const double *)x)[i] * scale;
        ((double *)s)[i] = sin(v);
        ((double *)c)[i] = cos(v);
    }
}
CANNA_KERNEL void clamp_k(const GM_ADDR x, GM_ADDR y, uint64_t n, int64_t lo, int64_t hi) {
    for (uint64_t i = GetBlockIdx(); i < n; i += GetBlockNum()) {
        int32_t v = ((const int32_t *)x)[i];
        ((int32_t *)y)[i] = v < lo ? (int32_t)lo : v > hi ? (int32_t)hi : v;
    }
}
"""


def _sincos_bw(ops, gs, gc, s, c, scale):
    parts = ([ops.mul(ops.mul(gs, c), scale)] if gs is not None else []) + \
        ([ops.mul(ops.mul(gc, s), -scale)] if gc is not None else [])
    return parts[0] if len(parts) == 1 else ops.add(*parts)


def _register_sincos(name):
    k = kernels.RawModule(SINCOS).get_function("sincos_k")
    return kernels.register_op(
        name, namespace=NS, inputs=[Tensor("x", "float64")], attrs=[Attr("scale", float, 1.0)], outputs=("s", "c"),
        shape=lambda x, scale=1.0: (Spec(x.shape, x.dtype), Spec(x.shape, x.dtype)),
        forward=Launch(k, lambda x, s, c, scale=1.0: (4, (math.prod(x.shape), scale))), backward=_sincos_bw,
        save=("s", "c"))


def test_two_outputs_compiled_inside_a_function_that_reads_torch_fn():
    """A model's forward calling ``op.torch_fn(x)`` inside a region torch.compile traces: reading
    the property imported the shim there, which Dynamo refuses to trace ("import_module ... should
    not be traced"); the README's torch.compile(op.torch_fn) read it outside. Two outputs, an
    attribute, the gradient of either output."""
    torch = pytest.importorskip("torch")
    op = _register_sincos("sincos_in")
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    f = torch.compile(lambda a: op.torch_fn(a, 0.5)[1].sum() + op.torch_fn(a, scale=0.5)[0].sum(), fullgraph=True)
    f(x).backward()
    torch.testing.assert_close(x.grad, 0.5 * torch.cos(0.5 * x.detach()) - 0.5 * torch.sin(0.5 * x.detach()))
    assert torch.autograd.gradcheck(lambda a: op.torch_fn(a, 0.5), (x.detach().requires_grad_(),))


def test_first_use_inside_torch_compile_in_a_fresh_process():
    """PyTorch loaded, canna's torch shim not yet: the op's first use is inside the compiled region."""
    pytest.importorskip("torch")
    from conftest import run_python
    r = run_python(f"""
        import math, torch, kernels, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_register_op import _register_sincos
        op = _register_sincos("sincos_fresh")
        assert "canna_dl.torch._generated" in sys.modules   # made at registration, PyTorch being loaded
        x = torch.linspace(-1, 1, 5, dtype=torch.float64)
        y = torch.compile(lambda a: op.torch_fn(a, 2.0)[0], fullgraph=True)(x)
        torch.testing.assert_close(y, torch.sin(2 * x))
        print("ok")
    """)
    assert "ok" in r.stdout


def test_required_attributes_are_checked_with_example_attrs():
    """An attribute without a default was refused outright ("need defaults"); example_attrs= gives
    the values the registration checks run with. An integer op without a backward takes its
    integer dtypes in every framework (TF and JAX refused ints: "canna's differentiable ops take
    floating tensors")."""
    k = kernels.RawModule(SINCOS).get_function("clamp_k")
    kw = dict(namespace=NS, inputs=[Tensor("x", "int32")], attrs=[Attr("lo", int), Attr("hi", int)],
              shape=lambda x, lo, hi: Spec(x.shape, x.dtype),
              forward=Launch(k, lambda x, y, lo, hi: (2, (math.prod(x.shape), lo, hi))))
    with pytest.raises(kernels.RegistrationError, match=r"required attributes \['lo', 'hi'\] need example values"):
        kernels.register_op("clamp_noex", **kw)
    with pytest.raises(kernels.RegistrationError, match=r"example_attrs names \['high'\]"):
        kernels.register_op("clamp_badex", example_attrs={"lo": 0, "high": 1}, **kw)
    with pytest.raises(kernels.RegistrationError, match="example_attrs: .*lo must be an int"):
        kernels.register_op("clamp_badval", example_attrs={"lo": "0", "hi": 1}, **kw)
    op = kernels.register_op("clamp", example_attrs={"lo": 0, "hi": 1}, **kw)
    x = np.arange(-5, 6, dtype=np.int32)
    want = np.clip(x, -2, 3)
    np.testing.assert_array_equal(op(x, -2, 3), want)
    torch = pytest.importorskip("torch")
    assert torch.equal(op.torch_fn(torch.from_numpy(x), -2, 3), torch.from_numpy(want))
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(op.tf_fn(tf.constant(x), -2, 3).numpy(), want)
    np.testing.assert_array_equal(tf.function(op.tf_fn)(tf.constant(x), -2, 3).numpy(), want)
    jnp = pytest.importorskip("jax.numpy")
    np.testing.assert_array_equal(np.asarray(op.jax_fn(jnp.asarray(x), -2, 3)), want)
    with pytest.raises(TypeError, match="has dtype float32, which this op does not support"):
        op.jax_fn(jnp.ones(3, jnp.float32), 0, 1)


def test_pytorch_namespaces_are_refused():
    """``aten::add`` would be PyTorch's own operator."""
    torch = pytest.importorskip("torch")
    kw = dict(inputs=[Tensor("x", "float64")], shape=_same_shape, forward=_launch())
    for ns, name in (("aten", "add"), ("prims", "mine"), ("npu", "thing")):
        with pytest.raises(kernels.RegistrationError, match=f"would be torch.ops.{ns}.{name}"):
            kernels.register_op(name, namespace=ns, **kw)
    torch.library.define(f"{NS}_lib::already", "(Tensor x) -> Tensor")
    with pytest.raises(kernels.RegistrationError, match="an operator that exists"):
        kernels.register_op("already", namespace=f"{NS}_lib", **kw)
