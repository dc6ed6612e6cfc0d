"""Numerics of the simulator's aclnn ops against PyTorch computed in float64 on random data:
every op and dtype, strided / offset inputs, broadcasting, NaN / inf propagation, zero-size
inputs, and the bad-input statuses with their messages. C level, through cffi."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import acl_rt  # noqa: E402

from aclnn_util import (ACL_DOUBLE, ACL_FLOAT, ACL_FLOAT16, ACL_INT32, ACL_INT64, ACLNN_ERR_PARAM_INVALID,  # noqa: E402
                        BF16, DevTensor, OpError, acl_dtype, bool_array, int_array, nn, run, scalar)
from conftest import assert_usable  # noqa: E402

pytestmark = pytest.mark.usefixtures("acl")

FLOATS = [np.float32, np.float64, np.float16] + ([BF16] if BF16 is not None else [])
TOL = {np.dtype(np.float32): (2e-6, 1e-6), np.dtype(np.float64): (1e-12, 1e-12),
       np.dtype(np.float16): (1e-2, 1e-2)}
if BF16 is not None:
    TOL[np.dtype(BF16)] = (2e-2, 2e-2)


def rnd(shape, dtype, rng, lo=-2.0, hi=2.0):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def t64(a):
    """float64 torch tensor of a NumPy array (any dtype, bfloat16 included)."""
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def check(got, ref, dtype):
    got = np.asarray(got).astype(np.float64)
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref, np.float64)
    rtol, atol = TOL.get(np.dtype(dtype), (0, 0))
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)


def tensor(a, strided):
    return DevTensor.strided(a) if strided else DevTensor.from_numpy(a)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ------------------------------------------------------------------ binary arithmetic

@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
@pytest.mark.parametrize("strided", [False, True])
def test_add_sub_mul_broadcast(dtype, strided, rng):
    a, b = rnd((3, 4, 5), dtype, rng), rnd((4, 1), dtype, rng)
    ta, tb = tensor(a, strided), tensor(b, strided)
    is_int = np.dtype(dtype).kind == "i"
    for name, ref in (("Add", lambda x, y: x + 3 * y), ("Sub", lambda x, y: x - 3 * y), ("Mul", lambda x, y: x * y)):
        out = DevTensor(a.shape, dtype)
        args = [ta.handle, tb.handle]
        if name != "Mul":
            args.append(scalar(3, np.int64) if is_int else scalar(3.0, np.float64))
        run(name, *args, out.handle)
        if is_int:
            np.testing.assert_array_equal(out.numpy(), ref(a.astype(np.int64), b.astype(np.int64)).astype(dtype))
        else:
            check(out.numpy(), ref(t64(a), t64(b)), dtype)


@pytest.mark.parametrize("seed", range(24))
def test_binary_broadcast_patterns_of_short_rows(seed):
    """Random broadcasts of short innermost rows (a row repeated, a value per row, size-1 and
    missing dims), with strided operands and outputs, in several dtypes: the engine's several-rows
    chunks give NumPy's float64 results."""
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(2, 5))
    shape = [int(rng.choice([2, 3, 5, 17])) for _ in range(nd - 1)] + [int(rng.choice([1, 3, 8, 32, 100]))]
    dtype = [np.float32, np.float64, np.float16, np.int32][seed % 4]

    def operand():
        sh = [1 if rng.random() < 0.4 else n for n in shape][int(rng.integers(0, 2)):]
        return rnd(tuple(sh), dtype, rng)
    a, b = operand(), operand()
    shape = list(np.broadcast_shapes(a.shape, b.shape))
    ta, tb = tensor(a, rng.random() < 0.5), tensor(b, rng.random() < 0.5)
    out_strided = rng.random() < 0.5
    out = DevTensor.strided(np.zeros(shape, dtype)) if out_strided else DevTensor(tuple(shape), dtype)
    is_int = np.dtype(dtype).kind == "i"
    for name, ref in (("Mul", lambda x, y: x * y), ("Add", lambda x, y: x + 3 * y)):
        args = [ta.handle, tb.handle] + ([] if name == "Mul" else
                                         [scalar(3, np.int64) if is_int else scalar(3.0, np.float64)])
        run(name, *args, out.handle)
        if is_int:
            np.testing.assert_array_equal(out.numpy(), ref(a.astype(np.int64), b.astype(np.int64)).astype(dtype))
        else:
            check(out.numpy(), ref(t64(a), t64(b)), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_div_and_scalar_variants(dtype, rng):
    a, b = rnd((7, 9), dtype, rng), rnd((9,), dtype, rng, 0.5, 2)
    ta, tb, out = DevTensor.strided(a), DevTensor.from_numpy(b), DevTensor(a.shape, dtype)
    run("Div", ta.handle, tb.handle, out.handle)
    check(out.numpy(), t64(a) / t64(b), dtype)
    run("Adds", ta.handle, scalar(1.5, np.float64), scalar(2.0, np.float32), out.handle)
    check(out.numpy(), t64(a) + 3.0, dtype)
    run("Muls", ta.handle, scalar(-0.5, np.float64), out.handle)
    check(out.numpy(), t64(a) * -0.5, dtype)
    run("Divs", ta.handle, scalar(4.0, np.float64), out.handle)
    check(out.numpy(), t64(a) / 4, dtype)
    run("Subs", ta.handle, scalar(1.0, np.float64), scalar(1.0, np.float64), out.handle)
    check(out.numpy(), t64(a) - 1, dtype)


def test_type_promotion_and_int_division(rng):
    a, b = rnd((5,), np.int32, rng), rnd((5,), np.float16, rng)
    out = DevTensor((5,), np.float32)
    run("Add", DevTensor.from_numpy(a).handle, DevTensor.from_numpy(b).handle, scalar(1.0, np.float32), out.handle)
    check(out.numpy(), t64(a) + t64(b), np.float16)
    x, y = np.array([7, -7, 1, 0], np.int64), np.array([2, 2, 0, 0], np.int64)
    out = DevTensor((4,), np.float32)
    run("Div", DevTensor.from_numpy(x).handle, DevTensor.from_numpy(y).handle, out.handle)
    np.testing.assert_array_equal(out.numpy(), torch.tensor(x) / torch.tensor(y))
    # int + float scalar -> float result
    run("Adds", DevTensor.from_numpy(x).handle, scalar(0.5, np.float64), scalar(1, np.int64), out.handle)
    np.testing.assert_array_equal(out.numpy(), x + 0.5)


def test_int_overflow_wraps():
    big = np.array([2**31 - 1, -2**31], np.int32)
    out = DevTensor((2,), np.int32)
    run("Add", DevTensor.from_numpy(big).handle, DevTensor.from_numpy(np.array([1, -1], np.int32)).handle,
        scalar(1, np.int64), out.handle)
    np.testing.assert_array_equal(out.numpy(), (torch.tensor(big) + torch.tensor([1, -1], dtype=torch.int32)).numpy())


# ------------------------------------------------------------------ unary and activations

UNARY = {
    "Neg": lambda x: -x, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Relu": torch.relu,
    "Gelu": lambda x: F.gelu(x, approximate="tanh"), "Silu": F.silu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype, rng):
    lo = 0.05 if name in ("Log", "Sqrt") else -4
    a = rnd((6, 33), dtype, rng, lo, 4)
    out = DevTensor(a.shape, dtype)
    run(name, DevTensor.strided(a).handle, out.handle)
    check(out.numpy(), UNARY[name](t64(a)), dtype)


@pytest.mark.parametrize("approximate", [0, 1])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_v2(approximate, dtype, rng):
    a = rnd((257,), dtype, rng, -5, 5)
    out = DevTensor(a.shape, dtype)
    run("GeluV2", DevTensor.from_numpy(a).handle, approximate, out.handle)
    check(out.numpy(), F.gelu(t64(a), approximate="tanh" if approximate else "none"), dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_nan_inf_propagation(name):
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    out = DevTensor(vals.shape, np.float32)
    run(name, DevTensor.from_numpy(vals).handle, out.handle)
    ref = UNARY[name](torch.from_numpy(vals)).numpy()
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(out.numpy()[ok], ref[ok], rtol=1e-6)


def test_int_unary(rng):
    a = rnd((10,), np.int64, rng)
    out = DevTensor(a.shape, np.int64)
    run("Neg", DevTensor.from_numpy(a).handle, out.handle)
    np.testing.assert_array_equal(out.numpy(), -a)
    run("Relu", DevTensor.from_numpy(a).handle, out.handle)
    np.testing.assert_array_equal(out.numpy(), np.maximum(a, 0))
    fo = DevTensor(a.shape, np.float32)
    run("Exp", DevTensor.from_numpy(np.clip(a, -5, 5)).handle, fo.handle)   # int -> float result
    check(fo.numpy(), torch.exp(t64(np.clip(a, -5, 5))), np.float32)


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0, -1.0, 1.7, 0.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pow_scalar(exponent, dtype, rng):
    a = rnd((40,), dtype, rng, 0.1, 3)
    out = DevTensor(a.shape, dtype)
    run("PowTensorScalar", DevTensor.strided(a).handle, scalar(exponent, np.float64), out.handle)
    check(out.numpy(), t64(a) ** exponent, dtype)


def test_pow_int(rng):
    a = rnd((20,), np.int32, rng)
    out = DevTensor(a.shape, np.int32)
    run("PowTensorScalar", DevTensor.from_numpy(a).handle, scalar(3, np.int64), out.handle)
    np.testing.assert_array_equal(out.numpy(), (torch.from_numpy(a) ** 3).numpy())
    with pytest.raises(OpError) as e:
        run("PowTensorScalar", DevTensor.from_numpy(a).handle, scalar(-1, np.int64), out.handle)
    assert "negative integer powers" in e.value.message


# ------------------------------------------------------------------ backward elementwise

@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_backward(dtype, rng):
    x = rnd((5, 17), dtype, rng, -3, 3)
    g = rnd((5, 17), dtype, rng)
    xt = t64(x).requires_grad_()
    tx, tg, out = DevTensor.strided(x), DevTensor.from_numpy(g), DevTensor(x.shape, dtype)
    cases = [
        ("ThresholdBackward", (tg.handle, tx.handle, scalar(0.0, np.float64)), torch.relu),
        ("GeluBackward", (tg.handle, tx.handle), lambda v: F.gelu(v, approximate="tanh")),
        ("SiluBackward", (tg.handle, tx.handle), F.silu),
    ]
    for name, args, fn in cases:
        xt.grad = None
        fn(xt).backward(t64(g))
        run(name, *args, out.handle)
        check(out.numpy(), xt.grad, dtype)
    for approx in ("none", "tanh"):
        xt.grad = None
        F.gelu(xt, approximate=approx).backward(t64(g))
        run("GeluBackwardV2", tg.handle, tx.handle, acl_rt._lib.ffi.new("char[]", approx.encode()), out.handle)
        check(out.numpy(), xt.grad, dtype)
    # sigmoid / tanh backward take the forward output
    for name, fn in (("SigmoidBackward", torch.sigmoid), ("TanhBackward", torch.tanh)):
        xt.grad = None
        y = fn(xt)
        y.backward(t64(g))
        yq = y.detach().numpy().astype(dtype)
        run(name, tg.handle, DevTensor.from_numpy(yq).handle, out.handle)
        ref = t64(g) * (t64(yq) * (1 - t64(yq)) if name == "SigmoidBackward" else 1 - t64(yq) ** 2)
        check(out.numpy(), ref, dtype)


# ------------------------------------------------------------------ cast and copy

@pytest.mark.parametrize("src", FLOATS + [np.int32, np.int64])
@pytest.mark.parametrize("dst", FLOATS + [np.int32, np.int64, np.int8, np.uint8, np.bool_])
def test_cast(src, dst, rng):
    a = rnd((4, 6), src, rng, -100, 100)
    out = DevTensor(a.shape, dst)
    run("Cast", DevTensor.strided(a).handle, acl_dtype(dst), out.handle)
    ref = torch.from_numpy(a.astype(np.float32) if np.dtype(src) == np.dtype(BF16) else a)
    if np.dtype(src) == np.dtype(BF16):
        ref = ref.to(torch.bfloat16)
    tdst = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
            np.dtype(np.float16): torch.float16, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
            np.dtype(np.int8): torch.int8, np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}
    if BF16 is not None:
        tdst[np.dtype(BF16)] = torch.bfloat16
    expect = ref.to(tdst[np.dtype(dst)]).to(torch.float64).numpy()
    np.testing.assert_array_equal(out.numpy().astype(np.float64), expect)


def test_inplace_copy_broadcast_and_strided(rng):
    src = rnd((1, 5), np.float32, rng)
    dst = DevTensor.strided(np.zeros((3, 5), np.float64))
    run("InplaceCopy", dst.handle, DevTensor.from_numpy(src).handle)
    np.testing.assert_array_equal(dst.numpy(), np.broadcast_to(src.astype(np.float64), (3, 5)))


# ------------------------------------------------------------------ reductions

@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
@pytest.mark.parametrize("dims, keep", [([1], True), ([0, 2], False), ([], False), ([-1], False), ([0], True)])
def test_reductions(dtype, dims, keep, rng):
    a = rnd((6, 7, 8), dtype, rng)
    ta = DevTensor.strided(a)
    ref_in = torch.from_numpy(a.astype(np.float64))
    rdims = dims or [0, 1, 2]
    is_int = np.dtype(dtype).kind == "i"
    # sum
    sdt = np.int64 if is_int else dtype
    ref = ref_in.sum(dim=rdims, keepdim=keep)
    out = DevTensor(tuple(ref.shape), sdt)
    run("ReduceSum", ta.handle, int_array(dims), keep, acl_dtype(sdt), out.handle)
    if is_int:
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
    else:
        check(out.numpy(), ref, dtype)
    # mean (float out)
    mdt = np.float32 if is_int else dtype
    out = DevTensor(tuple(ref.shape), mdt)
    run("Mean", ta.handle, int_array(dims), keep, acl_dtype(mdt), out.handle)
    check(out.numpy(), ref_in.mean(dim=rdims, keepdim=keep), mdt)
    # amax
    out = DevTensor(tuple(ref.shape), dtype)
    run("Amax", ta.handle, int_array(dims), keep, out.handle)
    check(out.numpy(), ref_in.amax(dim=rdims, keepdim=keep), dtype)


def test_reduction_large_and_nan(rng):
    a = rnd((1 << 20) + 3, np.float32, rng)
    out = DevTensor((), np.float32)
    run("ReduceSum", DevTensor.from_numpy(a).handle, int_array([0]), False, ACL_FLOAT, out.handle)
    check(out.numpy(), t64(a).sum(), np.float32)
    b = rnd((4, 1000), np.float32, rng)
    b[2, 500] = np.nan
    o2 = DevTensor((4,), np.float32)
    run("Amax", DevTensor.from_numpy(b).handle, int_array([1]), False, o2.handle)
    check(o2.numpy(), torch.from_numpy(b).amax(1), np.float32)
    run("ReduceSum", DevTensor.from_numpy(b).handle, int_array([1]), False, ACL_FLOAT, o2.handle)
    check(o2.numpy(), t64(b).sum(1), np.float32)


def test_reduction_empty():
    a = np.zeros((0, 4), np.float32)
    ta = DevTensor.from_numpy(a)
    out = DevTensor((4,), np.float32)
    run("ReduceSum", ta.handle, int_array([0]), False, ACL_FLOAT, out.handle)
    np.testing.assert_array_equal(out.numpy(), 0)
    run("Mean", ta.handle, int_array([0]), False, ACL_FLOAT, out.handle)
    assert np.isnan(out.numpy()).all()
    with pytest.raises(OpError) as e:
        run("Amax", ta.handle, int_array([0]), False, out.handle)
    assert e.value.code == ACLNN_ERR_PARAM_INVALID and "empty" in e.value.message


# ------------------------------------------------------------------ softmax family

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_family(dtype, dim, rng):
    x = rnd((5, 9, 11), dtype, rng, -6, 6)
    g = rnd((5, 9, 11), dtype, rng)
    tx, tg, out = DevTensor.strided(x), DevTensor.from_numpy(g), DevTensor(x.shape, dtype)
    xt = t64(x).requires_grad_()
    for name, fn, bw in (("Softmax", torch.softmax, "SoftmaxBackward"),
                         ("LogSoftmax", torch.log_softmax, "LogSoftmaxBackward")):
        run(name, tx.handle, dim, out.handle)
        y = fn(xt, dim)
        check(out.numpy(), y, dtype)
        yq = out.numpy()
        xt.grad = None
        y.backward(t64(g))
        gin = DevTensor(x.shape, dtype)
        run(bw, tg.handle, DevTensor.from_numpy(yq).handle, dim, gin.handle)
        rtol = TOL[np.dtype(dtype)][0]
        np.testing.assert_allclose(gin.numpy().astype(np.float64), xt.grad.numpy(), rtol=max(rtol, 1e-5) * 10,
                                   atol=max(rtol, 1e-5) * 10)


def test_softmax_inf_rows():
    x = np.array([[0, -np.inf, 1], [-np.inf, -np.inf, -np.inf], [np.inf, 0, 1], [np.nan, 0, 1]], np.float32)
    out = DevTensor(x.shape, np.float32)
    run("Softmax", DevTensor.from_numpy(x).handle, -1, out.handle)
    np.testing.assert_allclose(out.numpy(), torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-6, equal_nan=True)
    run("LogSoftmax", DevTensor.from_numpy(x).handle, -1, out.handle)
    np.testing.assert_allclose(out.numpy(), torch.log_softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-6,
                               equal_nan=True)


@pytest.mark.parametrize("n", [31, 32, 33, 100, 257, 1000, 1024])
def test_softmax_long_rows_float32(n, rng):
    # the vectorized row loops (two max accumulators of 8 or 16 floats, exp sums in chunks of 256,
    # partial last vectors): float32 rows of many lengths against float64, a NaN far into a row,
    # a row of -inf but one entry, a row with +inf
    import kernels
    x = rnd((6, n), np.float32, rng, -30, 30)
    x[1, n - 2] = np.nan
    x[2, :] = -np.inf
    x[2, n // 2] = 3.0
    x[3, n - 1] = np.inf
    x[4, :] = 88.0   # every exp at the top of the range
    x[5, :] = rnd((n,), np.float32, rng, -30, -10)
    x[5, [12, 20]] = 80.0   # the maximum in either accumulator's lanes (a wrong one overflows exp)
    t = torch.from_numpy(x)
    for fn, kfn in ((torch.softmax, kernels.softmax), (torch.log_softmax, kernels.log_softmax)):
        want = fn(t.double(), -1).numpy()
        got = kfn(t, -1).numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)


# ------------------------------------------------------------------ normalizations

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_and_backward(dtype, affine, rng):
    x = rnd((4, 6, 10), dtype, rng)
    w, b = rnd((6, 10), dtype, rng), rnd((6, 10), dtype, rng)
    g = rnd((4, 6, 10), dtype, rng)
    tx, tw, tb = DevTensor.strided(x), DevTensor.from_numpy(w), DevTensor.from_numpy(b)
    out, mean, rstd = DevTensor(x.shape, dtype), DevTensor((4, 1, 1), np.float32), DevTensor((4, 1, 1), np.float32)
    ns = int_array([6, 10])
    run("LayerNorm", tx.handle, ns, tw.handle if affine else acl_rt._lib.ffi.NULL,
        tb.handle if affine else acl_rt._lib.ffi.NULL, 1e-5, out.handle, mean.handle, rstd.handle)
    xt, wt, bt = t64(x).requires_grad_(), t64(w).requires_grad_(), t64(b).requires_grad_()
    y = F.layer_norm(xt, (6, 10), wt if affine else None, bt if affine else None, 1e-5)
    check(out.numpy(), y, dtype)
    xd = t64(x)
    np.testing.assert_allclose(mean.numpy().ravel(), xd.mean((1, 2)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.numpy().ravel(), (1 / torch.sqrt(xd.var((1, 2), unbiased=False) + 1e-5)).numpy(),
                               rtol=1e-5)
    y.backward(t64(g))
    gi, gw, gb = DevTensor(x.shape, dtype), DevTensor(w.shape, dtype), DevTensor(b.shape, dtype)
    run("LayerNormBackward", DevTensor.from_numpy(g).handle, tx.handle, ns, mean.handle, rstd.handle,
        tw.handle if affine else acl_rt._lib.ffi.NULL, tb.handle if affine else acl_rt._lib.ffi.NULL,
        bool_array([True, affine, affine]), gi.handle, gw.handle if affine else acl_rt._lib.ffi.NULL,
        gb.handle if affine else acl_rt._lib.ffi.NULL)
    tol = max(TOL[np.dtype(dtype)][0], 1e-5) * 20
    np.testing.assert_allclose(gi.numpy().astype(np.float64), xt.grad.numpy(), rtol=tol, atol=tol)
    if affine:
        np.testing.assert_allclose(gw.numpy().astype(np.float64), wt.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(gb.numpy().astype(np.float64), bt.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_and_grad(dtype, rng):
    x, gamma, dy = rnd((3, 5, 16), dtype, rng), rnd((16,), dtype, rng), rnd((3, 5, 16), dtype, rng)
    tx, tgm = DevTensor.strided(x), DevTensor.from_numpy(gamma)
    y, rstd = DevTensor(x.shape, dtype), DevTensor((3, 5, 1), np.float32)
    run("RmsNorm", tx.handle, tgm.handle, 1e-6, y.handle, rstd.handle)
    xt, gt = t64(x).requires_grad_(), t64(gamma).requires_grad_()
    ref = xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-6) * gt
    check(y.numpy(), ref, dtype)
    ref.backward(t64(dy))
    dx, dg = DevTensor(x.shape, dtype), DevTensor(gamma.shape, dtype)
    run("RmsNormGrad", DevTensor.from_numpy(dy).handle, tx.handle, rstd.handle, tgm.handle, dx.handle, dg.handle)
    tol = max(TOL[np.dtype(dtype)][0], 1e-5) * 20
    np.testing.assert_allclose(dx.numpy().astype(np.float64), xt.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dg.numpy().astype(np.float64), gt.grad.numpy(), rtol=tol, atol=tol)


# ------------------------------------------------------------------ matrix products

MM_SHAPES = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)), ((2, 3, 5), (5, 4)),
             ((5,), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 6)), ((7, 3, 5), (7, 5, 2)), ((0, 5), (5, 3)), ((3, 0), (0, 4))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sa, sb", MM_SHAPES)
def test_matmul(sa, sb, dtype, rng):
    a, b = rnd(sa, dtype, rng), rnd(sb, dtype, rng)
    ref = torch.matmul(t64(a), t64(b))
    for strided in (False, True):
        out = DevTensor(tuple(ref.shape), dtype)
        run("Matmul", tensor(a, strided).handle, tensor(b, strided).handle, out.handle, 0)
        rtol = {np.dtype(np.float32): 1e-5}.get(np.dtype(dtype), TOL[np.dtype(dtype)][0])
        np.testing.assert_allclose(out.numpy().astype(np.float64), ref.numpy(), rtol=rtol, atol=rtol * 5)


def test_mm_bmm_addmm_linear(rng):
    a, b = rnd((6, 8), np.float32, rng), rnd((8, 5), np.float32, rng)
    out = DevTensor((6, 5), np.float32)
    run("Mm", DevTensor.from_numpy(a).handle, DevTensor.from_numpy(b).handle, out.handle, 0)
    check(out.numpy(), t64(a) @ t64(b), np.float32)
    x, y = rnd((3, 4, 6), np.float64, rng), rnd((3, 6, 2), np.float64, rng)
    o3 = DevTensor((3, 4, 2), np.float64)
    run("BatchMatMul", DevTensor.from_numpy(x).handle, DevTensor.from_numpy(y).handle, o3.handle, 0)
    check(o3.numpy(), t64(x) @ t64(y), np.float64)
    # linear as torch_npu does it: addmm(bias, input, weight.t())
    inp, w, bias = rnd((6, 8), np.float32, rng), rnd((5, 8), np.float32, rng), rnd((5,), np.float32, rng)
    tw = DevTensor.from_numpy(w)
    wt = DevTensor.__new__(DevTensor)
    wt.__dict__.update(tw.__dict__)
    wt.shape, wt.strides = (8, 5), (1, 8)
    wt.handle = wt._create()      # weight.t(): a transposed view of the same buffer
    run("Addmm", DevTensor.from_numpy(bias).handle, DevTensor.from_numpy(inp).handle, wt.handle,
        scalar(1.0, np.float32), scalar(1.0, np.float32), out.handle, 0)
    check(out.numpy(), F.linear(t64(inp), t64(w), t64(bias)), np.float32)
    run("Addmm", DevTensor.from_numpy(a @ b).handle, DevTensor.from_numpy(a).handle, DevTensor.from_numpy(b).handle,
        scalar(0.5, np.float32), scalar(-2.0, np.float32), out.handle, 0)
    check(out.numpy(), 0.5 * t64(a @ b) - 2 * (t64(a) @ t64(b)), np.float32)


def test_matmul_errors(rng):
    a, b = DevTensor.from_numpy(rnd((3, 4), np.float32, rng)), DevTensor.from_numpy(rnd((5, 2), np.float32, rng))
    out = DevTensor((3, 2), np.float32)
    with pytest.raises(OpError) as e:
        run("Matmul", a.handle, b.handle, out.handle, 0)
    assert e.value.code == ACLNN_ERR_PARAM_INVALID and "inner dimensions 4 and 5 differ" in e.value.message
    c = DevTensor.from_numpy(rnd((4, 2), np.float64, rng))
    with pytest.raises(OpError) as e:
        run("Matmul", a.handle, c.handle, out.handle, 0)
    assert "one floating dtype" in e.value.message
    c = DevTensor.from_numpy(rnd((4, 2), np.float32, rng))
    bad = DevTensor((3, 3), np.float32)
    with pytest.raises(OpError) as e:
        run("Matmul", a.handle, c.handle, bad.handle, 0)
    assert "out has shape [3, 3] but the product has shape [3, 2]" in e.value.message
    with pytest.raises(OpError) as e:
        run("Matmul", a.handle, c.handle, out.handle, 9)
    assert "cubeMathType" in e.value.message
    assert_usable()


# ------------------------------------------------------------------ convolution and pooling

CONV_CASES = [
    dict(x=(2, 4, 9, 8), w=(6, 4, 3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1),
    dict(x=(1, 4, 10, 7), w=(4, 2, 3, 2), stride=(2, 1), padding=(0, 1), dilation=(1, 2), groups=2),
    dict(x=(3, 3, 5, 5), w=(3, 1, 5, 5), stride=(1, 1), padding=(2, 2), dilation=(1, 1), groups=3),
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_conv2d_and_backward(case, dtype, rng):
    x, w, bias = rnd(case["x"], dtype, rng), rnd(case["w"], dtype, rng), rnd((case["w"][0],), dtype, rng)
    xt, wt, bt = t64(x).requires_grad_(), t64(w).requires_grad_(), t64(bias).requires_grad_()
    y = F.conv2d(xt, wt, bt, case["stride"], case["padding"], case["dilation"], case["groups"])
    out = DevTensor(tuple(y.shape), dtype)
    tx, tw = DevTensor.strided(x), DevTensor.from_numpy(w)
    args = (int_array(case["stride"]), int_array(case["padding"]), int_array(case["dilation"]))
    run("Convolution", tx.handle, tw.handle, DevTensor.from_numpy(bias).handle, *args, False, int_array([0, 0]),
        case["groups"], out.handle, 0)
    tol = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 1e-2}[np.dtype(dtype)]
    np.testing.assert_allclose(out.numpy().astype(np.float64), y.detach().numpy(), rtol=tol, atol=tol * 10)
    g = rnd(tuple(y.shape), dtype, rng)
    y.backward(t64(g))
    gi, gw, gb = DevTensor(x.shape, dtype), DevTensor(w.shape, dtype), DevTensor(bias.shape, dtype)
    run("ConvolutionBackward", DevTensor.from_numpy(g).handle, tx.handle, tw.handle, int_array([w.shape[0]]), *args,
        False, int_array([0, 0]), case["groups"], bool_array([True, True, True]), 0, gi.handle, gw.handle, gb.handle)
    for got, ref in ((gi, xt.grad), (gw, wt.grad), (gb, bt.grad)):
        np.testing.assert_allclose(got.numpy().astype(np.float64), ref.numpy(), rtol=tol * 5, atol=tol * 50)


def test_conv_errors(rng):
    x, w = DevTensor.from_numpy(rnd((1, 2, 3, 3), np.float32, rng)), DevTensor.from_numpy(rnd((2, 2, 5, 5), np.float32, rng))
    out = DevTensor((1, 2, 1, 1), np.float32)
    with pytest.raises(OpError) as e:
        run("Convolution", x.handle, w.handle, acl_rt._lib.ffi.NULL, int_array([1]), int_array([0]), int_array([1]),
            False, int_array([0]), 1, out.handle, 0)
    assert "larger than the padded input" in e.value.message
    w3 = DevTensor.from_numpy(rnd((2, 3, 1, 1), np.float32, rng))
    with pytest.raises(OpError) as e:
        run("Convolution", x.handle, w3.handle, acl_rt._lib.ffi.NULL, int_array([1]), int_array([0]), int_array([1]),
            False, int_array([0]), 1, out.handle, 0)
    assert "input channels" in e.value.message
    assert_usable()


@pytest.mark.parametrize("kw", [dict(k=(2, 2), s=(2, 2), p=(0, 0), d=(1, 1), ceil=False),
                                dict(k=(3, 3), s=(2, 1), p=(1, 1), d=(1, 1), ceil=True),
                                dict(k=(2, 3), s=(1, 2), p=(1, 0), d=(2, 1), ceil=False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_max_pool2d_and_backward(kw, dtype, rng):
    x = rnd((2, 3, 9, 10), dtype, rng)
    xt = t64(x).requires_grad_()
    y, idx = F.max_pool2d(xt, kw["k"], kw["s"], kw["p"], kw["d"], kw["ceil"], return_indices=True)
    out, ind = DevTensor(tuple(y.shape), dtype), DevTensor(tuple(y.shape), np.int64)
    tx = DevTensor.strided(x)
    args = (int_array(kw["k"]), int_array(kw["s"]), int_array(kw["p"]), int_array(kw["d"]), kw["ceil"])
    run("MaxPool2dWithIndices", tx.handle, *args, out.handle, ind.handle)
    np.testing.assert_array_equal(out.numpy().astype(np.float64), y.detach().numpy())
    np.testing.assert_array_equal(ind.numpy(), idx.numpy())
    g = rnd(tuple(y.shape), dtype, rng)
    y.backward(t64(g))
    gi = DevTensor(x.shape, dtype)
    run("MaxPool2dWithIndicesBackward", DevTensor.from_numpy(g).handle, tx.handle, ind.handle, *args, gi.handle)
    check(gi.numpy(), xt.grad, dtype)


# ------------------------------------------------------------------ losses

@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_and_backward(reduction, weighted, rng):
    x = np.log(rng.dirichlet(np.ones(7), size=6)).astype(np.float32)
    t = rng.integers(0, 7, size=6).astype(np.int64)
    t[2] = -100
    w = rng.uniform(0.5, 2, 7).astype(np.float32)
    red = ["none", "mean", "sum"][reduction]
    xt = t64(x).requires_grad_()
    ref = F.nll_loss(xt, torch.from_numpy(t), t64(w) if weighted else None, reduction=red, ignore_index=-100)
    out = DevTensor((6,) if reduction == 0 else (), np.float32)
    tw = DevTensor((), np.float32)
    tx, tt, twt = DevTensor.strided(x), DevTensor.from_numpy(t), DevTensor.from_numpy(w)
    wh = twt.handle if weighted else acl_rt._lib.ffi.NULL
    run("NLLLoss", tx.handle, tt.handle, wh, reduction, -100, out.handle, tw.handle)
    check(out.numpy(), ref, np.float32)
    g = rnd((6,) if reduction == 0 else (), np.float32, rng)
    ref.backward(t64(g))
    gi = DevTensor(x.shape, np.float32)
    run("NLLLossBackward", DevTensor.from_numpy(g).handle, tx.handle, tt.handle, wh, reduction, -100, tw.handle,
        gi.handle)
    check(gi.numpy(), xt.grad, np.float32)


def test_nll_loss_2d(rng):
    x = rnd((2, 4, 3, 5), np.float32, rng)
    t = rng.integers(0, 4, size=(2, 3, 5)).astype(np.int64)
    xt = t64(x).requires_grad_()
    ref = F.nll_loss(xt, torch.from_numpy(t), reduction="mean")
    out, tw = DevTensor((), np.float32), DevTensor((), np.float32)
    tx, tt = DevTensor.from_numpy(x), DevTensor.from_numpy(t)
    run("NLLLoss2d", tx.handle, tt.handle, acl_rt._lib.ffi.NULL, 1, -100, out.handle, tw.handle)
    check(out.numpy(), ref, np.float32)
    ref.backward()
    gi = DevTensor(x.shape, np.float32)
    run("NLLLoss2dBackward", DevTensor.from_numpy(np.float32(1.0)).handle, tx.handle, tt.handle, acl_rt._lib.ffi.NULL,
        1, -100, tw.handle, gi.handle)
    check(gi.numpy(), xt.grad, np.float32)


def test_nll_target_out_of_range_is_async_error(stream, rng):
    x = DevTensor.from_numpy(rnd((3, 4), np.float32, rng))
    t = DevTensor.from_numpy(np.array([0, 9, 1], np.int64))
    out, tw = DevTensor((), np.float32), DevTensor((), np.float32)
    run("NLLLoss", x.handle, t.handle, acl_rt._lib.ffi.NULL, 1, -100, out.handle, tw.handle, stream=stream,
        sync=False)
    with pytest.raises(acl_rt.AclError) as e:
        stream.synchronize()
    assert e.value.code == ACLNN_ERR_PARAM_INVALID and "target 9" in str(e.value)
    stream.synchronize()
    assert_usable()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_and_grad(reduction, smoothing, weighted, rng):
    x = rnd((5, 6), np.float32, rng, -3, 3)
    t = rng.integers(0, 6, size=5).astype(np.int64)
    t[1] = -100
    w = rng.uniform(0.5, 2, 6).astype(np.float32)
    xt = t64(x).requires_grad_()
    ref = F.cross_entropy(xt, torch.from_numpy(t), t64(w) if weighted else None, reduction=reduction,
                          label_smoothing=smoothing)
    ffi = acl_rt._lib.ffi
    loss = DevTensor((5,) if reduction == "none" else (), np.float32)
    logp = DevTensor(x.shape, np.float32)
    tx, tt, twt = DevTensor.strided(x), DevTensor.from_numpy(t), DevTensor.from_numpy(w)
    wh = twt.handle if weighted else ffi.NULL
    red = ffi.new("char[]", reduction.encode())
    run("CrossEntropyLoss", tx.handle, tt.handle, wh, red, -100, smoothing, 0.0, False, loss.handle, logp.handle,
        ffi.NULL, ffi.NULL)
    check(loss.numpy(), ref, np.float32)
    check(logp.numpy(), torch.log_softmax(t64(x), -1), np.float32)
    g = rnd((5,) if reduction == "none" else (), np.float32, rng)
    ref.backward(t64(g))
    gi = DevTensor(x.shape, np.float32)
    run("CrossEntropyLossGrad", DevTensor.from_numpy(g).handle, logp.handle, tt.handle, wh, ffi.NULL, ffi.NULL, red,
        -100, smoothing, 0.0, gi.handle)
    np.testing.assert_allclose(gi.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ bad input, zero-size

def test_shapes_that_do_not_broadcast(rng):
    a, b = DevTensor.from_numpy(rnd((3, 4), np.float32, rng)), DevTensor.from_numpy(rnd((5,), np.float32, rng))
    out = DevTensor((3, 4), np.float32)
    with pytest.raises(OpError) as e:
        run("Add", a.handle, b.handle, scalar(1.0, np.float32), out.handle)
    assert e.value.code == ACLNN_ERR_PARAM_INVALID
    assert "the shapes of self [3, 4] and other [5] cannot be broadcast together" in e.value.message
    with pytest.raises(OpError) as e:
        run("Add", a.handle, a.handle, scalar(1.0, np.float32), DevTensor((4, 3), np.float32).handle)
    assert "out has shape [4, 3] but the result has shape [3, 4]" in e.value.message
    assert_usable()


def test_unsupported_dtypes_and_dims(rng):
    a8 = DevTensor.from_numpy(np.ones(4, np.int8))
    out = DevTensor((4,), np.int8)
    with pytest.raises(OpError) as e:
        run("Neg", a8.handle, out.handle)
    assert "dtype int8, which is not supported" in e.value.message
    ai = DevTensor.from_numpy(np.ones(4, np.int32))
    with pytest.raises(OpError) as e:
        run("Exp", ai.handle, DevTensor((4,), np.int32).handle)
    assert "floating point" in e.value.message
    af = DevTensor.from_numpy(rnd((4,), np.float32, rng))
    with pytest.raises(OpError) as e:
        run("Add", af.handle, af.handle, scalar(1.0, np.float32), DevTensor((4,), np.int32).handle)
    assert "cannot be cast" in e.value.message
    with pytest.raises(OpError) as e:
        run("Add", ai.handle, ai.handle, scalar(1.5, np.float32), DevTensor((4,), np.int32).handle)
    assert "alpha must not be a floating point" in e.value.message
    x = DevTensor.from_numpy(rnd((2, 3), np.float32, rng))
    for dim in (2, -3):
        with pytest.raises(OpError) as e:
            run("Softmax", x.handle, dim, DevTensor((2, 3), np.float32).handle)
        assert "out of range" in e.value.message
    with pytest.raises(OpError) as e:
        run("ReduceSum", x.handle, int_array([1, -1]), False, ACL_FLOAT, DevTensor((2,), np.float32).handle)
    assert "appears multiple times" in e.value.message
    with pytest.raises(OpError) as e:
        run("GeluV2", x.handle, 7, DevTensor((2, 3), np.float32).handle)
    assert "approximate" in e.value.message
    assert_usable()


def test_output_overlap_rules(rng):
    a = rnd((4, 4), np.float32, rng)
    t = DevTensor.from_numpy(a)
    run("Exp", t.handle, t.handle)   # exact in-place alias is fine
    check(t.numpy(), torch.exp(t64(a)), np.float32)
    ffi = acl_rt._lib.ffi
    tr = nn().aclCreateTensor(ffi.new("int64_t[]", [4, 4]), 2, ACL_FLOAT, ffi.new("int64_t[]", [1, 4]), 0, 2,
                              ffi.new("int64_t[]", [16]), 1, ffi.cast("void *", t.buf.ptr))
    with pytest.raises(OpError) as e:
        run("Exp", t.handle, tr)    # the transpose of the input as output: partial overlap
    assert "overlaps" in e.value.message
    bc = nn().aclCreateTensor(ffi.new("int64_t[]", [4, 4]), 2, ACL_FLOAT, ffi.new("int64_t[]", [0, 1]), 0, 2,
                              ffi.new("int64_t[]", [16]), 1, ffi.cast("void *", t.buf.ptr))
    with pytest.raises(OpError) as e:
        run("Neg", DevTensor.from_numpy(a).handle, bc)
    assert "stride 0" in e.value.message
    with pytest.raises(OpError) as e:
        run("Matmul", t.handle, t.handle, t.handle, 0)
    assert "overlaps" in e.value.message
    nn().aclDestroyTensor(tr)
    nn().aclDestroyTensor(bc)


def test_zero_size():
    a = DevTensor.from_numpy(np.zeros((0, 3), np.float32))
    b = DevTensor.from_numpy(np.zeros((3,), np.float32))
    out = DevTensor((0, 3), np.float32)
    run("Add", a.handle, b.handle, scalar(1.0, np.float32), out.handle)
    run("Softmax", a.handle, 1, out.handle)
    run("Exp", a.handle, out.handle)
    o2 = DevTensor((0, 3), np.float32)
    run("Matmul", a.handle, DevTensor.from_numpy(np.zeros((3, 3), np.float32)).handle, o2.handle, 0)
    assert out.numpy().shape == (0, 3)


def test_runs_asynchronously_on_the_stream(stream, rng):
    """The op runs when the stream reaches it: after a 50 ms delay task, the output is still
    unwritten (NaN poison) until the stream is synchronized."""
    rt = acl_rt._lib.backend().lib
    a = rnd((64,), np.float32, rng)
    ta = DevTensor.from_numpy(a)
    out = DevTensor((64,), np.float32, raw=True)   # fresh from aclrtMalloc: poisoned, not pooled
    assert rt.aclsimLaunchDelay(acl_rt._lib.ffi.cast("void *", stream.handle), 50000, 0, 1) == 0
    run("Exp", ta.handle, out.handle, stream=stream, sync=False)
    assert not stream.query()
    host = np.empty(64, np.float32)
    out.buf.copy_to(host.view(np.uint8))   # synchronous copy that does not wait for the stream
    assert np.isnan(host).all()
    stream.synchronize()
    check(out.numpy(), torch.exp(t64(a)), np.float32)


def test_utilization_engines(stream, rng):
    rt = acl_rt._lib.backend().lib
    ffi = acl_rt._lib.ffi
    st = ffi.new("aclsimDeviceStats *")
    assert rt.aclsimGetDeviceStats(0, st) == 0
    cube0, vec0 = st.busyNs[2], st.busyNs[1]
    a = DevTensor.from_numpy(rnd((256, 256), np.float32, rng))
    out = DevTensor((256, 256), np.float32)
    run("Matmul", a.handle, a.handle, out.handle, 0, stream=stream)
    assert rt.aclsimGetDeviceStats(0, st) == 0
    assert st.busyNs[2] > cube0 and st.busyNs[1] == vec0
    run("Exp", a.handle, out.handle, stream=stream)
    assert rt.aclsimGetDeviceStats(0, st) == 0
    assert st.busyNs[1] > vec0


def test_discrete_memory_rejects_host_pointers(py):
    py("""
        import sys; sys.path.insert(0, 'tests')
        import numpy as np, acl_rt
        from acl_rt._lib import ffi
        from aclnn_util import nn, recent_error, DevTensor, ACL_FLOAT
        acl_rt.init(); acl_rt.Device(0).set_current()
        host = np.ones(8, np.float32)
        lib = nn()
        d = ffi.new('int64_t[]', [8])
        t = lib.aclCreateTensor(d, 1, ACL_FLOAT, ffi.NULL, 0, 2, d, 1, ffi.cast('void *', host.ctypes.data))
        out = DevTensor((8,), np.float32)
        ws, ex = ffi.new('uint64_t *'), ffi.new('aclOpExecutor **')
        assert lib.aclnnExpGetWorkspaceSize(t, out.handle, ws, ex) == 0
        rc = lib.aclnnExp(ffi.NULL, 0, ex[0], ffi.NULL)
        assert rc == 161002, rc
        assert 'host memory' in recent_error()
        dev = DevTensor.from_numpy(host)
        ws, ex = ffi.new('uint64_t *'), ffi.new('aclOpExecutor **')
        assert lib.aclnnExpGetWorkspaceSize(dev.handle, out.handle, ws, ex) == 0
        assert lib.aclnnExp(ffi.NULL, 0, ex[0], ffi.NULL) == 0
        acl_rt.synchronize()
        assert np.allclose(out.numpy(), np.e)
    """, env={"CANNA_SIM_MEMORY": "discrete"})


def test_unified_memory_accepts_host_pointers():
    host = np.arange(8, dtype=np.float32)
    res = np.zeros(8, np.float32)
    ffi = acl_rt._lib.ffi
    lib = nn()
    d = ffi.new("int64_t[]", [8])
    t = lib.aclCreateTensor(d, 1, ACL_FLOAT, ffi.NULL, 0, 2, d, 1, ffi.cast("void *", host.ctypes.data))
    o = lib.aclCreateTensor(d, 1, ACL_FLOAT, ffi.NULL, 0, 2, d, 1, ffi.cast("void *", res.ctypes.data))
    run("Neg", t, o)
    np.testing.assert_array_equal(res, -host)    # zero copy: the kernel wrote the NumPy array
    lib.aclDestroyTensor(t)
    lib.aclDestroyTensor(o)


def test_int64_and_double_dtypes_exist():
    assert ACL_INT32 == 3 and ACL_INT64 == 9 and ACL_DOUBLE == 11 and ACL_FLOAT16 == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_strided_outputs(dtype, rng):
    """Outputs that are non-contiguous views with an offset (reversed dim order, padded rows)."""
    a, b = rnd((4, 6), dtype, rng), rnd((6,), dtype, rng)
    out = DevTensor.strided(np.zeros((4, 6), dtype))
    run("Add", DevTensor.from_numpy(a).handle, DevTensor.from_numpy(b).handle, scalar(1.0, np.float32), out.handle)
    check(out.numpy(), t64(a) + t64(b), dtype)
    run("Softmax", DevTensor.from_numpy(a).handle, 1, out.handle)
    check(out.numpy(), torch.softmax(t64(a), 1), dtype)
    m = DevTensor.strided(np.zeros((4, 4), dtype))
    run("Matmul", DevTensor.from_numpy(a).handle, DevTensor.strided(a.T.copy()).handle, m.handle, 0)
    np.testing.assert_allclose(m.numpy().astype(np.float64), (t64(a) @ t64(a).T).numpy(),
                               rtol=1e-2 if dtype == np.float16 else 1e-5, atol=1e-2 if dtype == np.float16 else 1e-5)
    s = DevTensor.strided(np.zeros((6,), dtype))
    run("ReduceSum", DevTensor.from_numpy(a).handle, int_array([0]), False, acl_dtype(dtype), s.handle)
    check(s.numpy(), t64(a).sum(0), dtype)
    x = rnd((1, 2, 5, 5), dtype, rng)
    w = rnd((3, 2, 3, 3), dtype, rng)
    y = DevTensor.strided(np.zeros((1, 3, 3, 3), dtype))
    run("Convolution", DevTensor.from_numpy(x).handle, DevTensor.from_numpy(w).handle, acl_rt._lib.ffi.NULL,
        int_array([1]), int_array([0]), int_array([1]), False, int_array([0]), 1, y.handle, 0)
    np.testing.assert_allclose(y.numpy().astype(np.float64), F.conv2d(t64(x), t64(w)).numpy(),
                               rtol=1e-2 if dtype == np.float16 else 1e-5, atol=1e-2 if dtype == np.float16 else 1e-5)
