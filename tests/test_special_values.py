"""Special values and edge shapes agree with PyTorch (CPU): NaN, ±inf, ±0 through the elementwise
ops and activations, pow's special exponents, layer norm over size-0 dims, batch norm of a
constant channel with eps 0.

Each case runs twice: through ``kernels`` on torch tensors and under ``offload(level="aten")``.
Where PyTorch's result is exact (products, quotients, special values) it must agree bit for bit —
the same NaNs, the same values, the same sign of every zero and infinity; elsewhere (PyTorch's
float32 math goes through SLEEF / MKL, within an ulp or two) the special values must agree exactly
and the rest must be close to PyTorch's float64 result."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
import kernels  # noqa: E402
import kernels.backward as KB  # noqa: E402

A = torch.ops.aten
F = torch.nn.functional
NAN, INF = float("nan"), float("inf")
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SPECIAL = [0.0, -0.0, NAN, INF, -INF, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, 1e-40, -1e-40,
           1e20, -1e20, 300.0, -300.0, 20.0, -20.0, 100.0, -100.0]


def _t(values, dt):
    return torch.tensor(values, dtype=torch.float64).to(dt)


def _special(t):
    """NaN, infinities and zeros: the values whose every bit (sign included) must agree."""
    return torch.isnan(t) | torch.isinf(t) | (t == 0)


def assert_same(want, got, where, *, exact=True, ref64=None, rtol=1e-5):
    """``got`` is PyTorch's ``want``: shape, dtype, NaN positions, the sign of every zero and
    infinity and (``exact``) every value; otherwise finite non-zero values close to ``ref64``
    (PyTorch's float64 result) or to ``want``."""
    assert isinstance(got, torch.Tensor), where
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (where, got.shape, got.dtype, want.shape, want.dtype)
    if not want.is_floating_point():
        assert torch.equal(got, want), where
        return
    w, g = want.double(), got.double()
    nan_w, nan_g = torch.isnan(w), torch.isnan(g)
    bad = nan_w != nan_g
    both = ~nan_w & ~nan_g
    sp = both & (_special(w) | _special(g))
    bad |= sp & ((w != g) | (torch.signbit(w) != torch.signbit(g)))
    rest = both & ~sp
    if exact:
        bad |= rest & (w != g)
    else:
        r = want.double() if ref64 is None else ref64.double()
        tol = rtol * r.abs() + {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(want.dtype, 0.0) * r.abs()
        bad |= rest & ~((g - r).abs() <= tol + 1e-300)
    if bad.any():
        idx = bad.flatten().nonzero().flatten()[:8].tolist()
        raise AssertionError(f"{where}: {int(bad.sum())} differ (index, PyTorch, canna): "
                             f"{[(i, want.flatten()[i].item(), got.flatten()[i].item()) for i in idx]}")


def _aten(fn, *args):
    with ct.offload(level="aten") as rep:
        r = fn(*args)
    return r, rep


def _both(fn, kfn, *args):
    """(canna direct, canna under the aten block), and checks the block ran the call on canna."""
    direct = kfn(*args)
    got, rep = _aten(fn, *args)
    assert sum(row.canna + row.backward for row in rep.ops.values()) >= 1, rep   # (a backward kernel: its column)
    return direct, got


# ------------------------------------------------------------------------------------------------
# activations and unary math at NaN, ±inf, ±0

UNARY = {
    "relu": (torch.relu, kernels.relu, True),
    "neg": (torch.neg, kernels.neg, True),
    "abs": (torch.abs, kernels.abs, True),
    "sign": (torch.sign, kernels.sign, True),
    "reciprocal": (torch.reciprocal, kernels.reciprocal, True),
    "sigmoid": (torch.sigmoid, kernels.sigmoid, False),
    "tanh": (torch.tanh, kernels.tanh, False),
    "silu": (F.silu, kernels.silu, False),
    "gelu": (F.gelu, kernels.gelu, False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: kernels.gelu(x, approximate="tanh"), False),
    "hardswish": (F.hardswish, kernels.hardswish, False),
    "hardsigmoid": (F.hardsigmoid, kernels.hardsigmoid, False),
    "exp": (torch.exp, kernels.exp, False),
    "log": (torch.log, kernels.log, False),
    "sqrt": (torch.sqrt, kernels.sqrt, False),
    "rsqrt": (torch.rsqrt, kernels.rsqrt, False),
    "sin": (torch.sin, kernels.sin, False),
    "cos": (torch.cos, kernels.cos, False),
}


#: (op, dtype) whose special values PyTorch's own CPU kernel gives by the CPU's vector ISA: its float32
#: GELU through oneDNN on AVX2 gives +0 at -0 and below about -13 and inf at inf; on AVX-512 it keeps
#: -0 and gives NaN at inf, in float32 and in the float16 / bfloat16 kernels computed in float32.
#: canna follows the definition there: PyTorch's float64 result, rounded to the dtype.
ISA_DEPENDENT = {("gelu", torch.float32), ("gelu", torch.float16), ("gelu", torch.bfloat16)}


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_values(name, dt):
    tfn, kfn, exact = UNARY[name]
    x = _t(SPECIAL, dt)
    want = tfn(x.double()).to(dt) if (name, dt) in ISA_DEPENDENT else tfn(x)
    ref64 = tfn(x.double()).to(dt).double()   # PyTorch in float64, rounded to the dtype
    for where, got in zip(("direct", "aten"), _both(tfn, kfn, x)):
        assert_same(want, got, f"{name} {dt} {where}", exact=exact, ref64=ref64,
                    rtol=5e-5 if name in ("gelu", "gelu_tanh", "sin", "cos") else 1e-5)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_relu_keeps_negative_zero(dt):
    x = _t([-0.0, 0.0, NAN, -INF, INF, -1.0], dt)
    for got in _both(torch.relu, kernels.relu, x):
        assert torch.signbit(got[0]) and not torch.signbit(got[1])   # torch.relu(-0.) is -0.
        assert torch.isnan(got[2]) and got[3] == 0 and got[4] == INF and got[5] == 0
    x = _t([-0.0, 1.0], dt)
    with ct.offload(level="aten"):
        x.relu_()
    assert torch.signbit(x[0])


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_gelu_keeps_zero_signs_and_is_inf_at_inf(dt):
    # x 0.5 (1 + erf(x / sqrt 2)): -0 at -0 and far below 0, +0 at +0, inf at inf (PyTorch's float64
    # kernel agrees; its float32 one depends on the CPU: ISA_DEPENDENT)
    x = _t([-0.0, -100.0, -1e30, 0.0, INF], dt)
    for got in _both(F.gelu, kernels.gelu, x):
        assert torch.signbit(got[:3]).all() and not torch.signbit(got[3]), (dt, got)
        assert got[4] == INF, (dt, got)


# ------------------------------------------------------------------------------------------------
# pow

POW_BASES = [0.0, -0.0, NAN, INF, -INF, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1e-40, -1e-40, 1e20, -1e20,
             300.0, -300.0, 1e-20, 7.0, -7.0]
#: exponents whose result PyTorch computes exactly (fill, copy, products, quotients, 1 / sqrt)
EXACT_EXPONENTS = [0, 0.0, -0.0, 1, 1.0, 2, 3, -1, -2, -0.5, 2.0, 3.0, -1.0, -2.0]
OTHER_EXPONENTS = [0.5, 1.5, 2.5, -1.5, 1 / 3, 4, -3, 0.25, 7, -0.75, NAN, INF, -INF]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("e", EXACT_EXPONENTS + OTHER_EXPONENTS, ids=repr)
def test_pow_special_values(e, dt):
    x = _t(POW_BASES, dt)
    want = torch.pow(x, e)
    # float32: PyTorch's vector loop (SLEEF powf) takes the exponent as a float32
    ref64 = torch.pow(x.double(), float(torch.tensor(e, dtype=torch.float32)) if dt == torch.float32 else e)
    # float16 and bfloat16: PyTorch rounds the exponent to the dtype and (bfloat16) every product
    exact = e in EXACT_EXPONENTS or dt in (torch.float16, torch.bfloat16)
    direct, got = _both(torch.pow, kernels.pow, x, e)
    for where, g in (("direct", direct), ("aten", got)):
        assert_same(want, g, f"pow {dt} ** {e!r} {where}", exact=exact, ref64=ref64, rtol=2e-7 if dt == torch.float32
                    else 1e-15)


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_pow_listed_cases(dt):
    cases = [(-INF, 0.5), (-0.0, 0.5), (-0.0, -1), (0.0, 0), (NAN, 0), (1.0, NAN), (-2.0, 0.5), (-8.0, 1 / 3),
             (-0.0, -0.5), (-INF, -0.5), (-0.0, 3), (-INF, 2), (-INF, 3), (-0.0, -2), (1e20, -2)]
    for b, e in cases:
        x = _t([b], dt)
        want = torch.pow(x, e)
        for where, g in zip(("direct", "aten"), _both(torch.pow, kernels.pow, x, e)):
            assert_same(want, g, f"pow({b!r}, {e!r}) {dt} {where}")


@pytest.mark.parametrize("e", [2, 3, -2, 0.5, -0.5, -1, 1 / 3, 1.5, 4, -3])
@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16], ids=str)
def test_pow_reduced_precision_bitwise(dt, e):
    # bfloat16: products rounded after each step, exponent rounded to bfloat16; float16: pow with
    # the exponent rounded to float16 (no sqrt / reciprocal shortcuts)
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 10).to(dt)
    want = torch.pow(x, e)
    for where, g in zip(("direct", "aten"), _both(torch.pow, kernels.pow, x, e)):
        assert_same(want, g, f"pow {dt} ** {e} {where}")


# ------------------------------------------------------------------------------------------------
# layer norm over size-0 dims

LN_SHAPES = [((4, 0), [0]), ((2, 0, 3), [0, 3]), ((2, 3, 0), [3, 0]), ((0,), [0]), ((0, 8), [8]), ((0, 0), [0])]


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape,ns", LN_SHAPES, ids=str)
def test_layer_norm_of_empty_rows(shape, ns, affine):
    x = torch.randn(shape)
    w = torch.randn(ns) if affine else None
    b = torch.randn(ns) if affine else None
    want = A.native_layer_norm(x, ns, w, b, 1e-5)   # mean 0 and rstd NaN per empty row
    direct = kernels.native_layer_norm(x, ns, w, b, eps=1e-5)
    got, _rep = _aten(A.native_layer_norm, x, ns, w, b, 1e-5)
    for where, r in (("direct", direct), ("aten", got)):
        assert len(r) == 3
        for k, (wt, gt) in enumerate(zip(want, r)):
            assert_same(wt, gt, f"native_layer_norm {shape} {ns} output {k} {where}")
    # float64 reference: the same statistics
    want64 = A.native_layer_norm(x.double(), ns, None if w is None else w.double(), None if b is None else b.double(),
                                 1e-5)
    r64 = kernels.native_layer_norm(x.double(), ns, None if w is None else w.double(),
                                    None if b is None else b.double(), eps=1e-5)
    for wt, gt in zip(want64, r64):
        assert_same(wt, gt, f"native_layer_norm float64 {shape} {ns}")


@pytest.mark.parametrize("shape,ns", LN_SHAPES, ids=str)
def test_layer_norm_backward_of_empty_rows(shape, ns):
    x, g = torch.randn(shape), torch.randn(shape)
    w, b = torch.randn(ns), torch.randn(ns)
    _o, m, r = A.native_layer_norm(x, ns, w, b, 1e-5)
    want = A.native_layer_norm_backward(g, x, ns, m, r, w, b, [True, True, True])
    got = KB.layer_norm(g, x, ns, m, r, w, b)
    for k, (wt, gt) in enumerate(zip(want, got)):
        assert_same(wt, gt, f"native_layer_norm_backward {shape} {ns} output {k}")


# ------------------------------------------------------------------------------------------------
# batch norm of a constant channel with eps = 0

def _bn_input(dt):
    x = torch.randn(4, 3, 2, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dt)
    x[:, 1] = 2.5   # variance 0
    x[:, 2] = 0.0
    return x


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_batch_norm_training_constant_channel_eps0(dt, affine):
    # PyTorch's InvStd: save_invstd is 0 (not inf) when var + eps is 0, so the output is the bias
    x = _bn_input(dt)
    w = torch.randn(3, dtype=dt) if affine else None
    b = torch.randn(3, dtype=dt) if affine else None
    rm, rv = torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt)
    rm_w, rv_w = rm.clone(), rv.clone()
    want = A.native_batch_norm(x, w, b, rm_w, rv_w, True, 0.1, 0.0)
    ref64 = A.native_batch_norm(x.double(), None if w is None else w.double(), None if b is None else b.double(),
                                rm.double().clone(), rv.double().clone(), True, 0.1, 0.0)
    rm_d, rv_d = rm.clone(), rv.clone()
    direct = kernels.native_batch_norm(x, rm_d, rv_d, w, b, True, 0.1, 0.0)
    rm_a, rv_a = rm.clone(), rv.clone()
    got, _rep = _aten(A.native_batch_norm, x, w, b, rm_a, rv_a, True, 0.1, 0.0)
    for where, r in (("direct", direct), ("aten", got)):
        for k in range(3):
            assert_same(want[k], r[k], f"batch norm {dt} output {k} {where}", exact=False, ref64=ref64[k].to(dt),
                        rtol=1e-5)
        assert torch.equal(r[2][1:], torch.zeros(2, dtype=dt)), r[2]
    for rmx, rvx in ((rm_d, rv_d), (rm_a, rv_a)):
        torch.testing.assert_close(rmx, rm_w)
        torch.testing.assert_close(rvx, rv_w)
    # the backward from those statistics: zero gradient through the constant channels
    go = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dt)
    mask = [True, affine, affine]
    wantb = A.native_batch_norm_backward(go, x, w, rm, rv, want[1], want[2], True, 0.0, mask)
    gotb, _rep = _aten(A.native_batch_norm_backward, go, x, w, rm, rv, want[1], want[2], True, 0.0, mask)
    for k, (wt, gt) in enumerate(zip(wantb, gotb)):
        if wt is None:
            assert gt is None
            continue
        assert_same(wt, gt, f"batch norm backward {dt} output {k}", exact=False, rtol=1e-5)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_batch_norm_eval_zero_running_var_eps0(dt):
    # eval: 1 / sqrt(running_var) is inf, so the output is NaN where running_var is 0 (PyTorch too)
    x = _bn_input(dt)
    w, b = torch.randn(3, dtype=dt), torch.randn(3, dtype=dt)
    rm, rv = torch.zeros(3, dtype=dt), torch.tensor([1.0, 0.0, 0.0], dtype=dt)
    want = A.native_batch_norm(x, w, b, rm, rv, False, 0.1, 0.0)
    direct = kernels.native_batch_norm(x, rm, rv, w, b, False, 0.1, 0.0)
    got, _rep = _aten(A.native_batch_norm, x, w, b, rm, rv, False, 0.1, 0.0)
    for where, r in (("direct", direct), ("aten", got)):
        assert_same(want[0], r[0], f"batch norm eval {dt} {where}", exact=False, rtol=1e-5)
    assert got[1].shape == want[1].shape == (0,)


# ------------------------------------------------------------------------------------------------
# binary ops and reductions at special values (regression guards: these agreed already)

_S = [0.0, -0.0, NAN, INF, -INF, 1.0, -1.0, 2.5, -3.0, 1e-40]
_X, _Y = (t.flatten() for t in torch.meshgrid(torch.tensor(_S), torch.tensor(_S), indexing="ij"))
BINARY = {
    "add": (torch.add, kernels.add), "sub": (torch.sub, kernels.sub), "mul": (torch.mul, kernels.mul),
    "div": (torch.div, kernels.div),
    "add alpha=2": (lambda a, b: torch.add(a, b, alpha=2), lambda a, b: kernels.add(a, b, alpha=2)),
    "threshold_backward": (lambda g, y: A.threshold_backward(g, y, 0), KB.relu),
    "sigmoid_backward": (A.sigmoid_backward, KB.sigmoid),
    "tanh_backward": (A.tanh_backward, KB.tanh),
}


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_special_values(name, dt):
    tfn, kfn = BINARY[name]
    a, b = _X.to(dt), _Y.to(dt)
    want = tfn(a, b)
    for where, got in zip(("direct", "aten"), _both(tfn, kfn, a, b)):
        assert_same(want, got, f"{name} {dt} {where}")


def test_scalar_operands_at_special_values():
    x = torch.tensor(_S)
    for s in (0.0, -0.0, INF, NAN, 2):
        for name, fn in (("x + s", lambda t: t + s), ("x * s", lambda t: t * s), ("x / s", lambda t: t / s),
                         ("s - x", lambda t: s - t)):
            want = fn(x)
            got, _rep = _aten(fn, x)
            assert_same(want, got, f"{name} with s = {s!r}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "sum", "mean"])
def test_rows_of_special_values(name):
    rows = torch.tensor([[-INF] * 4, [INF, 1, 2, 3], [NAN, 1, 2, 3], [-INF, 0, 1, 2], [-0.0] * 4, [1e30, -1e30, 0, 0]])
    tfn = {"softmax": lambda x: torch.softmax(x, 1), "log_softmax": lambda x: torch.log_softmax(x, 1),
           "sum": lambda x: x.sum(1), "mean": lambda x: x.mean(1)}[name]
    kfn = {"softmax": lambda x: kernels.softmax(x, 1), "log_softmax": lambda x: kernels.log_softmax(x, 1),
           "sum": lambda x: kernels.sum(x, 1), "mean": lambda x: kernels.mean(x, 1)}[name]
    want = tfn(rows)
    for where, got in zip(("direct", "aten"), _both(tfn, kfn, rows)):
        assert_same(want, got, f"{name} {where}", exact=False, ref64=tfn(rows.double()).float())
    assert math.isnan(want[0, 0]) if name in ("softmax", "log_softmax") else True
