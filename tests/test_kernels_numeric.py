"""Numerics of kernels.* (the built-in array ops) against PyTorch computed in float64, on fresh random
inputs (the seed is in every failure message; CANNA_TEST_SEED fixes it): every op and dtype,
contiguous, strided (inner stride 2 with an offset, reversed dims) and broadcast (stride-0)
inputs, the backward kernels against torch.autograd.

Tolerances by dtype: float32 1e-6 relative (2e-5 for BLAS products and convolutions, which
accumulate K terms in float32), float64 1e-12 (1e-10 for products), float16 / bfloat16 1e-2 / 2e-2.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import canna_dl  # noqa: E402
import kernels  # noqa: E402
from conftest import assert_usable  # noqa: E402

pytestmark = pytest.mark.usefixtures("acl")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64]
TOL = {torch.float32: 1e-6, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 2e-2}
PROD_TOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.float16: 1e-2, torch.bfloat16: 2e-2}
LAYOUTS = ["contig", "strided", "transposed", "broadcast"]


@pytest.fixture
def gen():
    seed = int(os.environ.get("CANNA_TEST_SEED", 0)) or int.from_bytes(os.urandom(4), "little")
    return torch.Generator().manual_seed(seed)


def make(shape, dtype, layout="contig", gen=None, lo=-2.0, hi=2.0):
    """A tensor of ``shape`` with the given layout: ``strided`` = every other element of a wider
    tensor with an offset of one; ``transposed`` = dims reversed in memory; ``broadcast`` = dim 0
    expanded from size 1 (stride 0)."""
    shape = tuple(shape)

    def rnd(s):
        if dtype in INTS:
            return torch.randint(-50, 50, s, generator=gen, dtype=torch.int64).to(dtype)
        return (torch.rand(s, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if layout == "contig" or not shape:
        return rnd(shape)
    if layout == "strided":
        return rnd(shape[:-1] + (2 * shape[-1] + 1,))[..., 1::2]
    if layout == "transposed":
        return rnd(shape[::-1]).permute(*range(len(shape) - 1, -1, -1))
    if layout == "broadcast":
        return rnd((1,) + shape[1:]).expand(shape)
    raise ValueError(layout)


def check(got, ref, dtype=None, *, tol=None, gen=None, exact=False):
    """``got`` (a torch tensor from kernels) against a float64 reference ``ref``."""
    assert isinstance(got, torch.Tensor), type(got)
    if dtype is not None:
        assert got.dtype == dtype, (got.dtype, dtype)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    msg = f"seed {gen.initial_seed() if gen is not None else '?'}"
    if exact:
        assert torch.equal(got, ref.to(got.dtype)), msg
        return
    t = tol if tol is not None else TOL.get(got.dtype, 1e-6)
    torch.testing.assert_close(got.double(), ref.double(), rtol=t, atol=t, equal_nan=True, msg=lambda m: f"{m} ({msg})")


def d64(t):
    return t.double()


# ------------------------------------------------------------------ arithmetic

ARITH = [("add", lambda x, y: x + 2 * y, dict(alpha=2)), ("sub", lambda x, y: x - 3 * y, dict(alpha=3)),
         ("mul", lambda x, y: x * y, {}), ("div", lambda x, y: x / y, {})]


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name,ref,kw", ARITH, ids=[a[0] for a in ARITH])
def test_binary(name, ref, kw, dtype, layout, gen):
    x = make((3, 4, 5), dtype, layout, gen)
    y = make((4, 1), dtype, "contig", gen, 0.5, 2.0)   # broadcast shape; away from 0 for div
    if dtype in INTS and name == "div":
        y = torch.where(y == 0, torch.ones_like(y), y)
    got = getattr(kernels, name)(x, y, **kw)
    expect = getattr(torch, name)(x, y, **kw)     # the dtype PyTorch gives (int / int -> float32)
    if dtype in INTS and name != "div":
        check(got, expect, expect.dtype, exact=True, gen=gen)
    else:
        check(got, ref(d64(x), d64(y)), expect.dtype, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_scalar_operands(dtype, gen):
    x = make((5, 6), dtype, "strided", gen)
    is_int = dtype in INTS
    cases = [(kernels.add(x, 3), torch.add(x, 3)), (kernels.sub(x, 2, alpha=2), torch.sub(x, 2, alpha=2)),
             (kernels.mul(x, 3), x * 3), (kernels.mul(3, x), 3 * x), (kernels.add(3, x), 3 + x),
             (kernels.sub(7, x), 7 - x), (kernels.add(x, 2.5), x + 2.5), (kernels.mul(x, 0.5), x * 0.5),
             (kernels.div(x, 4), x / 4), (kernels.div(2.0, x), 2.0 / x)]
    for got, expect in cases:
        if is_int and expect.dtype in INTS:
            check(got, expect, expect.dtype, exact=True, gen=gen)
        else:   # the reference in float64 from the same inputs, the dtype PyTorch gives
            check(got, expect.double() if expect.dtype == torch.float64 else expect.to(torch.float64), expect.dtype,
                  tol=max(TOL.get(expect.dtype, 1e-6), 1e-6), gen=gen)


@pytest.mark.parametrize("a,b", [(torch.float16, torch.bfloat16), (torch.int32, torch.float16),
                                 (torch.int64, torch.float32), (torch.int32, torch.int64),
                                 (torch.float32, torch.float64), (torch.bfloat16, torch.float32)], ids=str)
def test_promotion_matches_torch(a, b, gen):
    x, y = make((4, 3), a, gen=gen), make((3,), b, gen=gen)
    for fn in (kernels.add, kernels.mul, kernels.sub):
        got = fn(x, y)
        expect = getattr(torch, fn.__name__)(x, y)
        assert got.dtype == expect.dtype
        check(got, getattr(torch, fn.__name__)(d64(x), d64(y)), expect.dtype, tol=TOL.get(expect.dtype, 1e-6), gen=gen)
    # 0-d tensors and Python scalars only raise the category (PyTorch's rule)
    z = torch.tensor(1.5, dtype=torch.float64)
    assert kernels.add(x, z).dtype == torch.add(x, z).dtype
    assert kernels.add(x, 1.5).dtype == torch.add(x, 1.5).dtype
    assert kernels.result_type(canna_dl.asarray(x), 1.5) == canna_dl.dtype(torch.result_type(x, 1.5))


# ------------------------------------------------------------------ unary

UNARY = [("neg", torch.neg, {}), ("exp", torch.exp, {}), ("log", torch.log, {}), ("sqrt", torch.sqrt, {}),
         ("relu", torch.relu, {}), ("sigmoid", torch.sigmoid, {}), ("tanh", torch.tanh, {}), ("silu", F.silu, {}),
         ("gelu", F.gelu, {}), ("gelu", lambda x: F.gelu(x, approximate="tanh"), dict(approximate="tanh"))]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name,ref,kw", UNARY, ids=[u[0] + ("_tanh" if u[2] else "") for u in UNARY])
def test_unary(name, ref, kw, dtype, layout, gen):
    lo = 0.05 if name in ("log", "sqrt") else -3.0
    x = make((4, 7, 3), dtype, layout, gen, lo, 3.0)
    check(getattr(kernels, name)(x, **kw), ref(d64(x)), dtype, gen=gen)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_unary_integers(dtype, gen):
    x = make((6, 5), dtype, "transposed", gen)
    check(kernels.neg(x), -x, dtype, exact=True)
    check(kernels.relu(x), torch.relu(x), dtype, exact=True)
    check(kernels.exp(x), torch.exp(d64(x)), torch.float32, tol=1e-6)   # int -> float32
    check(kernels.pow(x, 3), x ** 3, dtype, exact=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("e", [2, 3, 0.5, -1, 2.5, 0])
def test_pow(dtype, e, gen):
    x = make((5, 4), dtype, "strided", gen, 0.1, 2.0)
    check(kernels.pow(x, e), torch.pow(d64(x), e), torch.pow(x, e).dtype, gen=gen)


# ------------------------------------------------------------------ softmax, normalization

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contig", "strided", "transposed"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(dtype, layout, dim, gen):
    x = make((6, 5, 7), dtype, layout, gen, -4, 4)
    check(kernels.softmax(x, dim), torch.softmax(d64(x), dim), dtype, gen=gen)
    check(kernels.log_softmax(x, dim), torch.log_softmax(d64(x), dim), dtype, gen=gen)


def test_softmax_dtype_argument(gen):
    x = make((3, 8), torch.float16, gen=gen)
    got = kernels.softmax(x, -1, dtype=torch.float32)
    check(got, torch.softmax(d64(x), -1), torch.float32, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("layout", ["contig", "strided"])
def test_layer_norm(dtype, affine, layout, gen):
    x = make((4, 3, 8), dtype, layout, gen)
    w = make((3, 8), dtype, gen=gen) if affine else None
    b = make((3, 8), dtype, gen=gen) if affine else None
    ref = F.layer_norm(d64(x), (3, 8), None if w is None else d64(w), None if b is None else d64(b), 1e-5)
    tol = TOL[dtype] if dtype != torch.float32 else 2e-6
    check(kernels.layer_norm(x, (3, 8), w, b, 1e-5), ref, dtype, tol=tol, gen=gen)
    y, mean, rstd = kernels.native_layer_norm(x, (3, 8), w, b, 1e-5)
    _, m64, r64 = torch.native_layer_norm(d64(x), (3, 8), None, None, 1e-5)
    check(y, ref, dtype, tol=tol, gen=gen)
    check(mean, m64, dtype, tol=tol, gen=gen)
    check(rstd, r64, dtype, tol=tol, gen=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("d", [37, 300, 1000])   # (float32: vectors of 8 and 32, tails, chunks of 256)
def test_layer_norm_long_rows(dtype, d, gen):
    x = make((5, d), dtype, "contig", gen) * 3 + 1
    w, b = make((d,), dtype, gen=gen), make((d,), dtype, gen=gen)
    y, mean, rstd = kernels.native_layer_norm(x, (d,), w, b, 1e-5)
    ry, rm, rr = torch.native_layer_norm(d64(x), (d,), d64(w), d64(b), 1e-5)
    tol = 2e-6 if dtype == torch.float32 else TOL[dtype]
    for got, want in ((y, ry), (mean, rm), (rstd, rr)):
        check(got, want, dtype, tol=tol, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(dtype, affine, gen):
    x = make((5, 16), dtype, "strided", gen)
    w = make((16,), dtype, gen=gen) if affine else None
    eps = torch.finfo(dtype).eps
    ref = F.rms_norm(d64(x), (16,), None if w is None else d64(w), eps)
    tol = TOL[dtype] if dtype != torch.float32 else 2e-6
    check(kernels.rms_norm(x, 16, w), ref, dtype, tol=tol, gen=gen)
    y, rstd = kernels.native_rms_norm(x, (16,), w, 1e-6)
    check(rstd, torch.rsqrt(d64(x).pow(2).mean(-1, keepdim=True) + 1e-6),
          torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype, tol=tol, gen=gen)


# ------------------------------------------------------------------ matrix products

MATMUL_SHAPES = [((7,), (7,)), ((3, 7), (7,)), ((7,), (7, 4)), ((3, 7), (7, 4)), ((2, 3, 7), (7, 4)),
                 ((2, 1, 3, 7), (5, 7, 4)), ((5, 7), (2, 7, 3)), ((1, 7), (4, 7, 1))]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul(sa, sb, dtype, layout, gen):
    a, b = make(sa, dtype, layout, gen), make(sb, dtype, layout, gen)
    check(kernels.matmul(a, b), torch.matmul(d64(a), d64(b)), dtype, tol=PROD_TOL[dtype], gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("xshape", [(6,), (4, 6), (2, 3, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(xshape, bias, dtype, gen):
    x, w = make(xshape, dtype, gen=gen), make((5, 6), dtype, "transposed", gen)
    b = make((5,), dtype, gen=gen) if bias else None
    ref = F.linear(d64(x), d64(w), None if b is None else d64(b))
    check(kernels.linear(x, w, b), ref, dtype, tol=PROD_TOL[dtype], gen=gen)
    if len(xshape) == 3:   # leading dims that cannot be flattened without a copy: matmul + add
        xp = make((3, 2, 6), dtype, gen=gen).transpose(0, 1)
        ref = F.linear(d64(xp), d64(w), None if b is None else d64(b))
        check(kernels.linear(xp, w, b), ref, dtype, tol=PROD_TOL[dtype], gen=gen)


# ------------------------------------------------------------------ reductions, casts, copies

@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), ((0, 2), True), (-1, True), ((), False)])
@pytest.mark.parametrize("layout", ["contig", "transposed", "broadcast"])
def test_reductions(dtype, dim, keepdim, layout, gen):
    x = make((3, 4, 5), dtype, layout, gen)
    tdim = dim if dim is not None else ()
    got = kernels.sum(x, dim, keepdim)
    expect = torch.sum(x, tdim, keepdim) if dim is not None else torch.sum(x)
    exact = dtype in INTS
    check(got, expect if exact else torch.sum(d64(x), tdim, keepdim), expect.dtype, exact=exact, gen=gen)
    got = kernels.amax(x, dim if dim is not None else (), keepdim)
    check(got, torch.amax(x, tdim, keepdim), dtype, exact=True, gen=gen)
    if dtype in FLOATS:
        check(kernels.mean(x, dim, keepdim), torch.mean(d64(x), tdim, keepdim), dtype, gen=gen)
    else:
        check(kernels.mean(x, dim, keepdim, dtype=torch.float64), torch.mean(d64(x), tdim, keepdim),
              torch.float64, gen=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape,dim", [((3, 77), -1), ((5, 1000), -1), ((5, 1000), 0), ((70, 45), 0), ((7, 300), None),
                                       ((2, 33, 40), (0, 2))])
def test_long_row_reductions(dtype, shape, dim, gen):
    # rows longer than the simulator's vector blocks (32 float32 sums a step, tails) and columns of
    # many rows, against float64
    x = make(shape, dtype, "contig", gen)
    tdim = dim if dim is not None else ()
    check(kernels.sum(x, dim), torch.sum(d64(x), tdim), dtype, gen=gen)
    check(kernels.mean(x, dim), torch.mean(d64(x), tdim), dtype, gen=gen)


@pytest.mark.parametrize("src", FLOATS + INTS + [torch.int8, torch.uint8, torch.int16, torch.bool], ids=str)
@pytest.mark.parametrize("dst", FLOATS + INTS + [torch.int8, torch.uint8, torch.int16, torch.bool], ids=str)
def test_astype(src, dst, gen):
    x = (torch.rand((4, 6), generator=gen, dtype=torch.float64) * 200 - 100)
    x = x.to(src) if src != torch.bool else x > 0
    x = x.t()   # non-contiguous
    got = kernels.astype(x, dst)
    assert got.is_contiguous() and got.dtype == dst
    expect = x.to(dst)
    if src in FLOATS and dst in FLOATS:
        check(got, expect, dst, gen=gen)
    else:
        check(got, expect, dst, exact=True, gen=gen)


@pytest.mark.parametrize("layout", ["strided", "transposed", "broadcast"])
def test_contiguous_and_copy(layout, gen):
    x = make((3, 4, 5), torch.float32, layout, gen)
    c = kernels.contiguous(x)
    assert c.is_contiguous() and torch.equal(c, x)
    y = torch.ones(5, 4, 3).permute(2, 1, 0)   # a strided destination
    kernels.copy_(y, x)
    assert torch.equal(y, x)
    z = torch.zeros(3, 4, 5, dtype=torch.float64)
    kernels.copy_(z, x[0])   # broadcast and converted
    assert torch.equal(z, x[0].double().expand(3, 4, 5))
    contig = torch.rand(4, 4)
    assert kernels.contiguous(contig) is contig


# ------------------------------------------------------------------ convolution, pooling

CONV = [dict(), dict(stride=2), dict(padding=1), dict(padding=(2, 1), dilation=2), dict(groups=2),
        dict(stride=(2, 1), padding="valid"), dict(padding="same")]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kw", CONV, ids=[str(k) for k in CONV])
def test_conv2d(kw, dtype, gen):
    x = make((2, 4, 9, 8), dtype, "strided", gen)
    w = make((6, 4 // kw.get("groups", 1), 3, 3), dtype, gen=gen)
    b = make((6,), dtype, gen=gen)
    ref = F.conv2d(d64(x), d64(w), d64(b), **kw)
    check(kernels.conv2d(x, w, b, **kw), ref, dtype, tol=PROD_TOL[dtype], gen=gen)
    if not kw:   # unbatched input, no bias
        check(kernels.conv2d(x[0], w), F.conv2d(d64(x[0]), d64(w)), dtype, tol=PROD_TOL[dtype], gen=gen)


POOL = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(3, 2), stride=1),
        dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, dilation=2, padding=1)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kw", POOL, ids=[str(k) for k in POOL])
def test_max_pool2d(kw, dtype, gen):
    x = make((2, 3, 9, 10), dtype, "strided", gen)
    y, idx = kernels.max_pool2d(x, return_indices=True, **kw)
    ry, ridx = F.max_pool2d(d64(x), return_indices=True, **kw)
    check(y, ry, dtype, exact=True, gen=gen)
    assert idx.dtype == torch.int64 and torch.equal(idx, ridx)
    check(kernels.max_pool2d(x[0], **kw), F.max_pool2d(d64(x[0]), **kw), dtype, exact=True, gen=gen)


# ------------------------------------------------------------------ losses

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kw", [dict(), dict(weight=True), dict(ignore_index=2), dict(label_smoothing=0.2),
                                dict(weight=True, ignore_index=1, label_smoothing=0.1)], ids=str)
def test_cross_entropy(kw, reduction, dtype, gen):
    x = make((6, 5), dtype, "strided", gen, -3, 3)
    t = torch.randint(0, 5, (6,), generator=gen)
    kw = dict(kw)
    if kw.pop("weight", False):
        kw["weight"] = make((5,), dtype, gen=gen, lo=0.2, hi=2.0)
    ref = F.cross_entropy(d64(x), t, reduction=reduction, **{k: d64(v) if k == "weight" else v for k, v in kw.items()})
    check(kernels.cross_entropy(x, t, reduction=reduction, **kw), ref, dtype, gen=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,tshape", [((5,), ()), ((2, 4, 3, 5), (2, 3, 5)), ((2, 4, 7), (2, 7)),
                                          ((2, 3, 2, 2, 3), (2, 2, 2, 3))], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_shapes(shape, tshape, reduction, dtype, gen):
    x = make(shape, dtype, gen=gen, lo=-3, hi=3)
    t = torch.randint(0, shape[0] if len(shape) == 1 else shape[1], tshape, generator=gen)
    ref = F.cross_entropy(d64(x), t, reduction=reduction, ignore_index=1)
    check(kernels.cross_entropy(x, t, reduction=reduction, ignore_index=1), ref, dtype, gen=gen)
    ref = F.nll_loss(torch.log_softmax(d64(x), 0 if len(shape) == 1 else 1), t, reduction=reduction)
    check(kernels.nll_loss(kernels.log_softmax(x, 0 if len(shape) == 1 else 1), t, reduction=reduction), ref, dtype,
          tol=TOL[dtype] * 4, gen=gen)


# ------------------------------------------------------------------ backward kernels vs autograd

def grads(fn, *inputs):
    """torch.autograd gradients of sum(fn(*inputs) * g) in float64; returns (g, [grads])."""
    xs = [t.detach().to(torch.float64, copy=True).requires_grad_(True) if t is not None and t.is_floating_point()
          else t for t in inputs]
    y = fn(*xs)
    g = torch.rand(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)) - 0.5
    y.backward(g)
    return g, [None if t is None or not t.requires_grad else t.grad for t in xs]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_activation_backward(name, dtype, gen):
    x = make((5, 6), dtype, "transposed", gen, -3, 3)
    torch_fn = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
                "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[name]
    g, (gx,) = grads(torch_fn, x)
    gg = g.to(dtype)
    if name in ("sigmoid", "tanh"):   # from the forward's output
        y = getattr(kernels, name)(x)
        got = getattr(kernels.backward, name)(gg, y)
    elif name.startswith("gelu"):
        got = kernels.backward.gelu(gg, x, "tanh" if name == "gelu_tanh" else "none")
    else:
        got = getattr(kernels.backward, name)(gg, x)
    tol = TOL[dtype] * (4 if dtype in (torch.float16, torch.bfloat16) else 2)
    check(got, gx, dtype, tol=tol, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("d", [9, 37, 300])   # (float32: a tail only, vectors and a tail, past a 256-sum chunk)
def test_softmax_backward(log, dtype, d, gen):
    x = make((4, d), dtype, "strided", gen)
    fn = torch.log_softmax if log else torch.softmax
    g, (gx,) = grads(lambda v: fn(v, 1), x)
    y = (kernels.log_softmax if log else kernels.softmax)(x, 1)
    got = (kernels.backward.log_softmax if log else kernels.backward.softmax)(g.to(dtype), y, 1)
    check(got, gx, dtype, tol=TOL[dtype] * 4, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_layer_norm_backward(dtype, gen):
    x, w, b = make((3, 4, 6), dtype, gen=gen), make((6,), dtype, gen=gen), make((6,), dtype, gen=gen)
    g, (gx, gw, gb) = grads(lambda a, ww, bb: F.layer_norm(a, (6,), ww, bb), x, w, b)
    _, mean, rstd = kernels.native_layer_norm(x, (6,), w, b)
    got = kernels.backward.layer_norm(g.to(dtype), x, (6,), mean, rstd, w, b)
    tol = 1e-5 if dtype == torch.float32 else TOL[dtype] * 4
    for a, e in zip(got, (gx, gw, gb)):
        check(a, e, dtype, tol=tol, gen=gen)
    gi_only = kernels.backward.layer_norm(g.to(dtype), x, (6,), mean, rstd, w, b, (True, False, False))
    assert gi_only[1] is None and gi_only[2] is None
    check(gi_only[0], gx, dtype, tol=tol, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rms_norm_backward(dtype, gen):
    x, w = make((4, 8), dtype, gen=gen), make((8,), dtype, gen=gen)
    g, (gx, gw) = grads(lambda a, ww: F.rms_norm(a, (8,), ww, 1e-6), x, w)
    _, rstd = kernels.native_rms_norm(x, (8,), w, 1e-6)
    dx, dw = kernels.backward.rms_norm(g.to(dtype), x, (8,), rstd, w)
    tol = 1e-5 if dtype == torch.float32 else TOL[dtype] * 4
    check(dx, gx, dtype, tol=tol, gen=gen)
    check(dw, gw, dtype, tol=tol, gen=gen)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, groups=2, dilation=(1, 2))], ids=str)
def test_conv2d_backward(kw, dtype, gen):
    x, w, b = make((2, 4, 7, 8), dtype, gen=gen), make((6, 4 // kw.get("groups", 1), 3, 3), dtype, gen=gen), \
        make((6,), dtype, gen=gen)
    g, (gx, gw, gb) = grads(lambda a, ww, bb: F.conv2d(a, ww, bb, **kw), x, w, b)
    got = kernels.backward.conv2d(g.to(dtype), x, w, **kw)
    tol = PROD_TOL[dtype] * (1 if dtype in (torch.float32, torch.float64) else 4)
    for a, e in zip(got, (gx, gw, gb)):
        check(a, e, dtype, tol=tol, gen=gen)
    mask = kernels.backward.conv2d(g.to(dtype), x, w, output_mask=(False, True, False), **kw)
    assert mask[0] is None and mask[2] is None


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_max_pool2d_backward(dtype, gen):
    x = make((2, 3, 8, 9), dtype, gen=gen)
    g, (gx,) = grads(lambda a: F.max_pool2d(a, 3, 2, 1), x)
    y, idx = kernels.max_pool2d_with_indices(x, 3, 2, 1)
    check(kernels.backward.max_pool2d(g.to(dtype), x, idx, 3, 2, 1), gx, dtype, tol=TOL[dtype] * 2, gen=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(6, 5), (2, 4, 3, 3), (5,)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward(shape, reduction, dtype, gen):
    x = make(shape, dtype, gen=gen)
    c = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = torch.randint(0, c, tshape, generator=gen)
    w = make((c,), dtype, gen=gen, lo=0.5, hi=1.5)
    ls = 0.1 if len(shape) == 2 else 0.0
    w64 = d64(w)
    g, (gx,) = grads(lambda a: F.cross_entropy(a, t, w64, reduction=reduction, ignore_index=0, label_smoothing=ls), x)
    loss, logp = kernels.native_cross_entropy(x, t, w, 0, reduction, ls)
    got = kernels.backward.cross_entropy(g.to(dtype), logp, t, w, 0, reduction, ls)
    check(got, gx, dtype, tol=TOL[dtype] * 4, gen=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul_backward(sa, sb, dtype, gen):
    a, b = make(sa, dtype, gen=gen), make(sb, dtype, gen=gen)
    g, (ga, gb) = grads(torch.matmul, a, b)
    got_a, got_b = kernels.backward.matmul(g.to(dtype), a, b)
    check(got_a, ga, dtype, tol=PROD_TOL[dtype], gen=gen)
    check(got_b, gb, dtype, tol=PROD_TOL[dtype], gen=gen)


@pytest.mark.parametrize("xshape", [(4, 6), (2, 3, 6), (6,)])
def test_linear_backward(xshape, gen):
    x, w, b = make(xshape, torch.float32, gen=gen), make((5, 6), torch.float32, gen=gen), make((5,), torch.float32,
                                                                                                 gen=gen)
    g, (gx, gw, gb) = grads(F.linear, x, w, b)
    got = kernels.backward.linear(g.float(), x, w)
    for a, e in zip(got, (gx, gw, gb)):
        check(a, e, torch.float32, tol=PROD_TOL[torch.float32], gen=gen)


@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), ((0, 2), True)])
def test_reduction_backward(dim, keepdim, gen):
    x = make((3, 4, 5), torch.float32, gen=gen)
    tdim = dim if dim is not None else (0, 1, 2)
    for name in ("sum", "mean"):
        g, (gx,) = grads(lambda a: getattr(torch, name)(a, tdim, keepdim), x)
        got = getattr(kernels.backward, name)(g.float(), x.shape, dim, keepdim)
        check(got, gx, torch.float32, gen=gen)
    s = kernels.sum_to_size(torch.ones(2, 3, 4), (3, 1))
    assert torch.equal(s, torch.full((3, 1), 8.0))


def test_runtime_usable_after_numerics():
    assert_usable()


def _every_op(g):
    """(kernels result, float64 reference) for one call of every op, on fresh inputs from ``g``."""
    r = lambda *s, lo=-2.0, hi=2.0: (torch.rand(s, generator=g, dtype=torch.float64) * (hi - lo) + lo).float()  # noqa: E731
    x, y, w, b = r(4, 6), r(6), r(6), r(6)
    img, cw, cb = r(2, 3, 6, 6), r(4, 3, 3, 3), r(4)
    t = torch.randint(0, 6, (4,), generator=g)
    t4 = torch.randint(0, 3, (2, 6, 6), generator=g)
    go = r(4, 6)
    out = []
    add = out.append
    add((kernels.add(x, y, alpha=2), d64(x) + 2 * d64(y)))
    add((kernels.sub(x, 1.5), d64(x) - 1.5))
    add((kernels.div(x, y), d64(x) / d64(y)))
    add((kernels.exp(x), d64(x).exp()))
    add((kernels.gelu(x, "tanh"), F.gelu(d64(x), approximate="tanh")))
    add((kernels.pow(x, 3), d64(x) ** 3))
    add((kernels.softmax(x, 1), torch.softmax(d64(x), 1)))
    sm = kernels.softmax(x, 1)
    add((kernels.backward.softmax(go, sm, 1), torch._softmax_backward_data(d64(go), d64(sm), 1, torch.float64)))
    add((kernels.backward.silu(go, x), torch.ops.aten.silu_backward(d64(go), d64(x))))
    add((kernels.layer_norm(x, (6,), w, b), F.layer_norm(d64(x), (6,), d64(w), d64(b))))
    yln, mean, rstd = kernels.native_layer_norm(x, (6,), w, b)
    ref = torch.ops.aten.native_layer_norm_backward(d64(go), d64(x), [6], d64(mean), d64(rstd), d64(w), d64(b),
                                                    [True, True, True])
    for got, e in zip(kernels.backward.layer_norm(go, x, (6,), mean, rstd, w, b), ref):
        add((got, e))
    add((kernels.rms_norm(x, (6,), w), F.rms_norm(d64(x), (6,), d64(w), torch.finfo(torch.float32).eps)))
    add((kernels.matmul(x, x.T), d64(x) @ d64(x).T))
    w3 = r(3, 6)
    add((kernels.linear(x, w3, None), d64(x) @ d64(w3).T))
    add((kernels.sum(x, 1), d64(x).sum(1)))
    add((kernels.amax(x, 0), d64(x).amax(0)))
    add((kernels.astype(x, torch.float64), d64(x)))
    add((kernels.contiguous(x.T), d64(x).T))
    add((kernels.conv2d(img, cw, cb, padding=1), F.conv2d(d64(img), d64(cw), d64(cb), padding=1)))
    gco = r(2, 4, 6, 6)
    gi, gw, gb = kernels.backward.conv2d(gco, img, cw, padding=1)
    add((gb, d64(gco).sum((0, 2, 3))))
    pooled, idx = kernels.max_pool2d_with_indices(img, 2)
    add((pooled, F.max_pool2d(d64(img), 2)))
    add((kernels.backward.max_pool2d(torch.ones_like(pooled), img, idx, 2),
         torch.ops.aten.max_pool2d_with_indices_backward(torch.ones_like(d64(pooled)), d64(img), [2, 2], [2, 2],
                                                         [0, 0], [1, 1], False, idx)))
    loss, logp = kernels.native_cross_entropy(x, t)
    add((loss, F.cross_entropy(d64(x), t)))
    xg = d64(x).requires_grad_()
    add((kernels.backward.cross_entropy(torch.ones(()), logp, t), torch.autograd.grad(F.cross_entropy(xg, t), xg)[0]))
    add((kernels.cross_entropy(img[:, :3], t4), F.cross_entropy(d64(img[:, :3]), t4)))
    return out


def test_every_op_reuses_its_executor_with_new_addresses():
    """The second round of calls reuses the first round's executors (no phase 1) with every
    operand's address swapped, and still matches the references: the address-to-operand numbering
    of aclSetInputTensorAddr / aclSetOutputTensorAddr is right for every op."""
    first = _every_op(torch.Generator().manual_seed(1))
    built = kernels.cache_info()["plans_built"]
    second = _every_op(torch.Generator().manual_seed(2))
    assert kernels.cache_info()["plans_built"] == built
    for (g1, _), (g2, ref) in zip(first, second):
        if ref is not None:
            torch.testing.assert_close(g2.double(), ref.double(), rtol=2e-5, atol=2e-5)
        assert not torch.equal(g1, g2) or g1.numel() == 0
