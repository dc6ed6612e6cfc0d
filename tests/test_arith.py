"""The broadcasting arithmetic generated from its registry entries (kernels/ops/elementwise.py):
Python-number operands (``Tensor(..., scalar=True)``: aclnn's scalar forms or a 0-d array, the
torch custom-op variants ``add_scalar`` / ``rsub_scalar`` / ..., TF and JAX constants), number
attributes (``alpha``, pow's ``exponent``: schema ``Scalar``), the in-place forms (``out=x``, the
C fast path's INPLACE id, ``Tensor.add_``) and the reflected ones (``__rsub__``, ``torch.rsub``)."""
from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import _registry as R

torch = pytest.importorskip("torch")
import canna_dl.torch as ct  # noqa: E402
from canna_dl.torch import _generated as G  # noqa: E402

D = torch.float64
#: the broadcasting arithmetic with Python-number operands (the comparisons and where take numbers
#: too: tests/test_convert_logical.py)
_SCALAR_OPS = [op for op in R.registered_ops("canna") if any(t.scalar for t in op.inputs)
               and op.name in ("add", "sub", "mul", "div")]
_IDS = [op.name for op in _SCALAR_OPS]
_ALPHA = {"alpha": 2}


def _t(*shape, lo=0.5):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    return (torch.rand(*shape, generator=g, dtype=D) + lo).requires_grad_()


def _ref(op, x, y, **kw):
    a = kw.get("alpha", 1)
    return {"add": lambda: x + a * y, "sub": lambda: x - a * y, "mul": lambda: x * y, "div": lambda: x / y}[op.name]()


def _kw(op):
    return {a.name: _ALPHA[a.name] for a in op.attrs}


def test_arithmetic_entries_are_generated():
    for name in ("add", "sub", "mul", "div", "pow"):
        op = kernels.get_op(name)
        assert op.generate and op.fast and op.elementwise and isinstance(op.forward, R.Aclnn), name
        assert kernels.__dict__[name] is op.kernel and ct.__dict__[name] is op.torch_fn
    assert [t.scalar for t in kernels.get_op("add").inputs] == [True, True]
    assert G.schema(kernels.get_op("add"), (1,)) == "(Tensor x, Scalar y, Scalar alpha=1) -> Tensor"
    assert G.schema(kernels.get_op("pow")) == "(Tensor x, Scalar exponent) -> Tensor"


@pytest.mark.parametrize("op", _SCALAR_OPS, ids=_IDS)
@pytest.mark.parametrize("where", [0, 1], ids=["number-first", "number-second"])
def test_number_operand_gradcheck_and_variant_opcheck(op, where):
    from torch.library import opcheck
    t = _t(3, 4)
    v = 2.5
    args = (v, t) if where == 0 else (t, v)
    kw = _kw(op)
    torch.testing.assert_close(op.torch_fn(*args, **kw), _ref(op, *args, **kw))
    assert torch.autograd.gradcheck(lambda t_: op.torch_fn(*((v, t_) if where == 0 else (t_, v)), **kw), (t,))
    custom = G.custom_op(op, (where,))
    assert custom._name == f"{'r' if where == 0 else ''}{op.name}_scalar"
    res = opcheck(getattr(torch.ops.canna, custom._name).default, (t.detach(), v), kw)
    assert all(r == "SUCCESS" for r in res.values()), res


@pytest.mark.parametrize("op", _SCALAR_OPS, ids=_IDS)
def test_number_operands_compile_fullgraph(op):
    x = _t(2, 3).float().detach().requires_grad_()
    kw = _kw(op)
    fn = op.torch_fn

    def f(t):
        return fn(3.0, fn(t, 1.5, **kw), **kw).sum()
    torch.compiler.reset()
    y = torch.compile(f, fullgraph=True)(x)
    y.backward()
    ref = x.detach().clone().requires_grad_()
    y0 = f(ref)
    y0.backward()
    torch.testing.assert_close(y, y0)
    torch.testing.assert_close(x.grad, ref.grad)


def test_kernels_number_operands_and_scalar_forms():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(kernels.add(x, 2, alpha=3), x + 6)
    np.testing.assert_allclose(kernels.add(2, x, alpha=3), 2 + 3 * x)     # no aclnn form: a 0-d array
    np.testing.assert_allclose(kernels.sub(1, x), 1 - x)
    np.testing.assert_allclose(kernels.mul(2, x), 2 * x)                  # commutes: aclnnMuls
    np.testing.assert_allclose(kernels.div(1, x), 1 / x, rtol=1e-6)
    np.testing.assert_allclose(kernels.pow(x, 0.5), x ** 0.5, rtol=1e-6)
    i = np.array([1, 2, 3], np.int32)
    assert kernels.add(i, 2).dtype == np.int32                           # a weak scalar keeps the dtype
    assert kernels.add(i, 2.5).dtype == np.float32
    assert kernels.div(i, 2).dtype == np.float32
    with pytest.raises(TypeError, match="alpha must be a Python number"):
        kernels.add(x, x, alpha="2")
    with pytest.raises(TypeError, match="exponent must be a Python number"):
        kernels.pow(x, x)
    with pytest.raises(TypeError, match="alpha must be an integer"):
        kernels.sub(i, 1, alpha=0.5)


@pytest.mark.parametrize("op", _SCALAR_OPS, ids=_IDS)
def test_a_number_out_of_the_dtypes_range_raises_instead_of_wrapping(op):
    """NumPy 2's rule for Python integers (NEP 50): ``int32 array + 2**40`` raised nothing and
    added 0 (the scalar wrapped to int32); beyond int64 it was cffi's bare "int too big to
    convert". Now an OverflowError names the number and the dtype, on either side; in range the
    extremes still compute, and a floating result takes any int. Under offload() the call falls
    back to PyTorch (which wraps), so a model's results do not change."""
    kw = _kw(op)
    i = np.array([1, 2, 3], np.int32)
    for big in (2**31, -2**31 - 1, 2**40, 2**70):
        for args in ((i, big), (big, i)):
            if op.name == "pow" and args[0] is big:
                continue
            if op.kernel(*[i if a is i else 1 for a in args], **kw).dtype != np.int32:   # div: a float result
                np.testing.assert_allclose(op.kernel(*args, **kw), _ref(op, *[a.astype(np.float64) if a is i
                                                                            else float(a) for a in args], **kw))
                continue
            with pytest.raises(OverflowError, match=f"Python integer {big} out of bounds for int32"):
                op.kernel(*args, **kw)
    if "alpha" in kw:   # a number attribute obeys the same rule (x + 2**40 * y added x)
        with pytest.raises(OverflowError, match="Python integer 1099511627776 out of bounds for int32"):
            op.kernel(i, i, alpha=2**40)
    if op.name in ("add", "sub", "mul"):
        for edge in (2**31 - 1, -2**31 + 1):
            np.testing.assert_array_equal(op.kernel(np.zeros(2, np.int32), edge),
                                          _ref(op, np.zeros(2, np.int64), edge))
    f = np.array([1.0, 2.0], np.float64)
    got = op.kernel(f, 2**70, **kw) if op.name != "pow" else op.kernel(f, 2**5)
    want = _ref(op, f, float(2**70), **kw) if op.name != "pow" else f ** 32
    np.testing.assert_allclose(got, want, rtol=1e-12)
    x = torch.arange(3, dtype=torch.int32)
    with ct.offload() as rep:
        plain = {"add": lambda: x + 2**40, "sub": lambda: x - 2**40, "mul": lambda: x * 2**40,
                 "div": lambda: x // 1, "pow": lambda: x ** 1}[op.name]()
    if op.name in ("add", "sub", "mul"):
        torch.testing.assert_close(plain, {"add": x + 2**40, "sub": x - 2**40, "mul": x * 2**40}[op.name])
        assert "out of bounds" in str(rep)


def test_inplace_fast_path_and_out_aliasing():
    from kernels import _core
    x, y = torch.ones(4), torch.full((4,), 2.0)
    kernels.add(x, y, alpha=2, out=x)    # registers the in-place entry
    n = len(_core.fast_cache)
    v = x._version
    for _ in range(3):
        r = kernels.add(x, y, alpha=2, out=x)
        assert r is x
    assert len(_core.fast_cache) == n      # served by the fast path's INPLACE entry
    assert torch.equal(x, torch.full((4,), 17.0)) and x._version == v  # (the kernel does not bump it)
    z = torch.ones(4)
    kernels.mul(z, 3.0, out=z)
    kernels.mul(z, 3.0, out=z)
    assert torch.equal(z, torch.full((4,), 9.0))
    w = torch.ones(4)
    assert kernels.sub(y, w, out=w) is w and torch.equal(w, torch.ones(4))   # out= the second input


@pytest.mark.usefixtures("function_level")
def test_offload_inplace_and_reflected_forms():
    x = torch.rand(3, 4) + 0.5
    y = torch.rand(4) + 0.5
    with ct.offload(strict=True) as rep:
        a = 2 - x                  # Tensor.__rsub__
        b = torch.rsub(x, y, alpha=2)   # y - 2 x
        c = 1 / x                  # Tensor.__rtruediv__
        d = x ** 2                 # Tensor.__pow__
        e = x.clone()
        e += y
        e.sub_(y, alpha=0.5)
        e.pow_(2)
    torch.testing.assert_close(a, 2 - x)
    torch.testing.assert_close(b, y - 2 * x)
    torch.testing.assert_close(c, 1 / x)
    torch.testing.assert_close(d, x ** 2)
    torch.testing.assert_close(e, (x + 0.5 * y) ** 2)
    assert rep.ops["sub"].canna == 2 and rep.ops["div"].canna == 1 and rep.ops["pow"].canna == 1
    assert rep.ops["add_"].canna == 1 and rep.ops["sub_"].canna == 1 and rep.ops["pow_"].canna == 1


@pytest.mark.usefixtures("function_level")
def test_inplace_autograd_refused_where_the_gradient_needs_the_overwritten_input():
    p = torch.rand(3, requires_grad=True)
    h = p * 1.0
    with ct.offload() as rep:
        h.pow_(2)                  # its gradient needs the original h: PyTorch's op runs
        h.sum().backward()
    torch.testing.assert_close(p.grad, 2 * p.detach())
    assert rep.ops["pow_"].fallback == 1 and "original x" in next(iter(rep.ops["pow_"].reasons))
    q = torch.rand(3, requires_grad=True)
    k = q * 1.0
    with ct.offload(strict=True):
        k.mul_(3.0)                # x's gradient needs only the number
        k.sum().backward()
    torch.testing.assert_close(q.grad, torch.full((3,), 3.0))


def test_tf_and_jax_number_operands():
    tf = pytest.importorskip("tensorflow")
    import canna_dl.tf as ctf
    x = tf.constant([1.0, 2.0, 4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(ctf.div(2.0, x) + ctf.sub(1.0, x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), -2 / x.numpy() ** 2 - 1, rtol=1e-6)
    conc = tf.function(lambda t: ctf.mul(t, 3.0)).get_concrete_function(tf.TensorSpec([2, 5], tf.float32))
    assert conc.structured_outputs.shape.as_list() == [2, 5]
    with pytest.raises(TypeError, match="at least one operand"):
        ctf.add(1.0, 2.0)
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cjax
    a = jnp.array([1.0, 2.0, 4.0])
    g = jax.jit(jax.grad(lambda t: jnp.sum(cjax.div(2.0, t) + cjax.pow(t, 3))))(a)
    np.testing.assert_allclose(np.asarray(g), -2 / np.asarray(a) ** 2 + 3 * np.asarray(a) ** 2, rtol=1e-6)


def test_user_op_with_a_number_input_and_a_scalar_attribute():
    """The registry features are public: a user's entry with a number operand and a Scalar attribute."""
    import numbers
    op = kernels.register_op(
        "scaled_mul", namespace="arith_test",
        inputs=[kernels.Tensor("x", "float"), kernels.Tensor("y", "float", scalar=True)],
        attrs=[kernels.Attr("scale", numbers.Number, 1)],
        shape=lambda x, y, scale: kernels.Spec(x.shape if kernels._core.is_scalar(y) else
                                               kernels.broadcast_shapes(x.shape, y.shape), x.dtype),
        forward=lambda ops, x, y, scale: ops.mul(ops.mul(x, y), scale),
        backward=lambda ops, g, x, y, scale: (ops.mul(ops.mul(g, y), scale), ops.mul(ops.mul(g, x), scale)),
        save=("x", "y"))
    t = _t(2, 3)
    torch.testing.assert_close(op.torch_fn(t, 2.0, 3), t * 6)
    assert torch.autograd.gradcheck(lambda u: op.torch_fn(u, 2.0, 3), (t,))
    assert "Scalar y" in G.schema(op, (1,)) and "Scalar scale=1" in G.schema(op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_outputs_beyond_the_cache_are_streamed_exactly(dtype):
    """Outputs larger than the last-level cache are written with non-temporal stores (the
    simulator's elementwise engine): the same values as PyTorch, bit for bit, out of place, in
    place (the output is an input) and into an output whose address is not 16-byte aligned."""
    n = (48 << 20) // torch.empty((), dtype=dtype).element_size() + 3   # 48 MiB: past a 32 MiB L3
    g = torch.Generator().manual_seed(5)
    if dtype.is_floating_point:
        a, b = torch.randn(n, generator=g, dtype=dtype), torch.randn(n, generator=g, dtype=dtype)
        a[7], b[n - 2] = float("nan"), float("-inf")
    else:
        a, b = torch.randint(-1000, 1000, (n,), generator=g, dtype=dtype), torch.randint(-9, 9, (n,), generator=g,
                                                                                        dtype=dtype)
    def same(x, y):   # bit for bit, NaN where PyTorch has NaN
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    same(kernels.add(a, b), a + b)
    same(kernels.mul(a, b), a * b)
    buf = torch.empty(n + 1, dtype=dtype)
    out = buf[1:]                                               # 4 or 8 bytes past an aligned block
    kernels.sub(a, b, out=out)
    same(out, a - b)
    want = a + b
    kernels.add(a, b, out=a)                                    # in place
    same(a, want)
