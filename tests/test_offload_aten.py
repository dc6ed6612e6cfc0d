"""offload(level="aten") (canna_dl/torch/_aten.py, _aten.cc): canna's kernels for PyTorch's aten
operators below PyTorch's autograd.

Every aten item of the registry (and the optimizers' fused steps) has a case here (a new mapping
without one fails ``test_every_aten_item_has_a_case``): called through PyTorch's dispatcher inside
a block, it must run on canna (the report's row counts it) and give PyTorch's result — computed in
float64 on the same random data — with PyTorch's dtype and shape; an in-place overload must write
its argument itself."""
from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
from canna_dl.torch import _aten  # noqa: E402
from canna_dl.torch import _offload_optim  # noqa: E402
from kernels import _registry as R  # noqa: E402

from conftest import run_python  # noqa: E402

A = torch.ops.aten
F32 = torch.float32


def test_available_here():
    # this machine has g++ and PyTorch's headers: the level must load (a skip would hide a break)
    assert _aten.available(), _aten.why_unavailable()
    assert "add" in _aten.ATEN_OPS and "conv2d" in _aten.ATEN_OPS and "conv2d_backward" not in _aten.ATEN_OPS


def _g(seed):
    return torch.Generator().manual_seed(seed)


def rn(*shape, seed=0, pos=False):
    t = torch.randn(*shape, generator=_g(seed))
    return t.abs() + 0.1 if pos else t


def _conv_args(seed=0):
    return rn(2, 3, 6, 6, seed=seed), rn(4, 3, 3, 3, seed=seed + 1), rn(4, seed=seed + 2)


def _bn_args():
    x = rn(4, 3, 5, 5)
    return x, rn(3, seed=1), rn(3, seed=2), torch.zeros(3), torch.ones(3)


def _bn_backward_args():
    x, w, b, rm, rv = _bn_args()
    _o, sm, si = torch.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    return rn(4, 3, 5, 5, seed=5), x, w, rm, rv, sm, si, True, 1e-5, [True, True, True]


def _ln_backward_args(mask=(True, True, True)):
    x, w, b = rn(2, 3, 8), rn(8, seed=1), rn(8, seed=2)
    _o, mean, rstd = torch.native_layer_norm(x, [8], w, b, 1e-5)
    return rn(2, 3, 8, seed=3), x, [8], mean, rstd, w, b, list(mask)


def _pool():
    x = rn(2, 3, 6, 6)
    return x, torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [], [0, 0], [1, 1], False)[1]


def _nll():
    return torch.log_softmax(rn(5, 7), 1), torch.tensor([0, 3, 6, 2, 1])


def _nll2d():
    return torch.log_softmax(rn(2, 7, 3, 4), 1), torch.randint(0, 7, (2, 3, 4), generator=_g(3))


def _nll_backward(inputs, forward, reduction=1, weight=None):
    x, t = inputs
    loss, total = forward(x, t, weight, reduction, -100)
    return (rn(max(loss.numel(), 1), seed=8).reshape(loss.shape), x, t, weight, reduction, -100, total), {}


def _binary(name):
    return {f"aten::{name}.Tensor": lambda: ((rn(3, 4), rn(4, seed=1, pos=name == "div")), {}),
            f"aten::{name}_.Tensor": lambda: ((rn(3, 4), rn(3, 4, seed=1, pos=name == "div")), {})}


def _ties(*shape, seed=0):   # (values that compare equal now and then)
    return torch.round(rn(*shape, seed=seed))


def _comparisons():
    out = {}
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        out[f"aten::{name}.Tensor"] = lambda: ((_ties(3, 4), _ties(4, seed=1)), {})
        out[f"aten::{name}.Scalar"] = lambda: ((_ties(3, 4), 1.0), {})
    return out


def _logical(name):
    return {f"aten::{name}": lambda: ((rn(3, 4) > 0.5,), {}),
            f"aten::{name}.dim": lambda: ((rn(3, 4) > -0.5, 1, True), {}),
            f"aten::{name}.dims": lambda: ((rn(2, 3, 4) > -1, [0, 2], False), {})}


#: aten overload -> () -> (args, kwargs) of one call (the first argument of an in-place one is written)
CASES = {
    **_comparisons(), **_logical("all"), **_logical("any"),
    "aten::minimum": lambda: ((rn(3, 4), rn(4, seed=1)), {}),
    "aten::maximum": lambda: ((rn(3, 4), rn(4, seed=1)), {}),
    "aten::where.self": lambda: ((rn(3, 4, seed=2) > 0, rn(3, 4), rn(4, seed=1)), {}),
    "aten::masked_fill.Scalar": lambda: ((rn(2, 3, 4), rn(2, 1, 4, seed=2) > 0, -1e9), {}),
    "aten::masked_fill_.Scalar": lambda: ((rn(2, 3, 4), rn(3, 4, seed=2) > 0, 0.5), {}),
    "aten::logical_not": lambda: ((_ties(3, 4),), {}),
    **_binary("add"), **_binary("sub"), **_binary("mul"), **_binary("div"),
    "aten::neg": lambda: ((rn(3, 4),), {}),
    "aten::abs": lambda: ((rn(3, 4),), {}),
    "aten::sign": lambda: ((rn(3, 4),), {}),
    "aten::exp": lambda: ((rn(3, 4),), {}),
    "aten::log": lambda: ((rn(3, 4, pos=True),), {}),
    "aten::sqrt": lambda: ((rn(3, 4, pos=True),), {}),
    "aten::relu": lambda: ((rn(3, 4),), {}),
    "aten::relu_": lambda: ((rn(3, 4),), {}),
    "aten::sigmoid": lambda: ((rn(3, 4),), {}),
    "aten::tanh": lambda: ((rn(3, 4),), {}),
    "aten::silu": lambda: ((rn(3, 4),), {}),
    "aten::gelu": lambda: ((rn(3, 4),), {"approximate": "tanh"}),
    "aten::hardswish": lambda: ((rn(3, 4) * 4,), {}),
    "aten::hardsigmoid": lambda: ((rn(3, 4) * 4,), {}),
    "aten::rsqrt": lambda: ((rn(3, 4, pos=True),), {}),
    "aten::reciprocal": lambda: ((rn(3, 4, pos=True),), {}),
    "aten::sin": lambda: ((rn(3, 4),), {}),
    "aten::cos": lambda: ((rn(3, 4),), {}),
    "aten::pow.Tensor_Scalar": lambda: ((rn(3, 4), 3), {}),
    "aten::pow_.Scalar": lambda: ((rn(3, 4, pos=True), 1.5), {}),
    "aten::threshold_backward": lambda: ((rn(3, 4, seed=1), rn(3, 4), 0), {}),
    "aten::gelu_backward": lambda: ((rn(3, 4, seed=1), rn(3, 4)), {"approximate": "none"}),
    "aten::silu_backward": lambda: ((rn(3, 4, seed=1), rn(3, 4)), {}),
    "aten::sigmoid_backward": lambda: ((rn(3, 4, seed=1), torch.sigmoid(rn(3, 4))), {}),
    "aten::tanh_backward": lambda: ((rn(3, 4, seed=1), torch.tanh(rn(3, 4))), {}),
    "aten::hardswish_backward": lambda: ((rn(3, 4, seed=1), rn(3, 4) * 4), {}),
    "aten::hardsigmoid_backward": lambda: ((rn(3, 4, seed=1), rn(3, 4) * 4), {}),
    "aten::mm": lambda: ((rn(3, 5), rn(5, 4, seed=1)), {}),
    "aten::bmm": lambda: ((rn(2, 3, 5), rn(2, 5, 4, seed=1)), {}),
    "aten::addmm": lambda: ((rn(4), rn(3, 5, seed=1), rn(5, 4, seed=2)), {"beta": 0.5, "alpha": 2.0}),
    "aten::_softmax": lambda: ((rn(3, 6), 1, False), {}),
    "aten::_log_softmax": lambda: ((rn(3, 6), 0, False), {}),
    "aten::_softmax_backward_data": lambda: ((rn(3, 6, seed=1), torch.softmax(rn(3, 6), 1), 1, F32), {}),
    "aten::_log_softmax_backward_data": lambda: ((rn(3, 6, seed=1), torch.log_softmax(rn(3, 6), 1), 1, F32), {}),
    "aten::native_layer_norm": lambda: ((rn(2, 3, 8), [8], rn(8, seed=1), rn(8, seed=2), 1e-5), {}),
    "aten::native_layer_norm_backward": lambda: (_ln_backward_args(), {}),
    "aten::convolution": lambda: ((*_conv_args(), [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
    "aten::convolution_backward": lambda: ((rn(2, 4, 6, 6, seed=9), *_conv_args()[:2], [4], [1, 1], [1, 1], [1, 1],
                                            False, [0, 0], 1, [True, True, True]), {}),
    "aten::max_pool2d_with_indices": lambda: ((rn(2, 3, 6, 6), [2, 2], [], [0, 0], [1, 1], False), {}),
    "aten::max_pool2d_with_indices_backward": lambda: ((rn(2, 3, 3, 3, seed=4), _pool()[0], [2, 2], [2, 2], [0, 0],
                                                        [1, 1], False, _pool()[1]), {}),
    "aten::mse_loss": lambda: ((rn(3, 4), rn(3, 4, seed=1), 1), {}),
    "aten::mse_loss_backward": lambda: ((rn(1, seed=2)[0], rn(3, 4), rn(3, 4, seed=1), 2), {}),
    "aten::nll_loss_forward": lambda: ((*_nll(), None, 1, -100), {}),
    "aten::nll_loss2d_forward": lambda: ((*_nll2d(), rn(7, pos=True), 2, -100), {}),
    "aten::nll_loss_backward": lambda: _nll_backward(_nll(), torch.ops.aten.nll_loss_forward, 1, rn(7, pos=True)),
    "aten::nll_loss2d_backward": lambda: _nll_backward(_nll2d(), torch.ops.aten.nll_loss2d_forward, 0),
    "aten::sum.dim_IntList": lambda: ((rn(3, 4, 5), [0, 2], True), {}),
    "aten::mean.dim": lambda: ((rn(3, 4, 5), [1], False), {}),
    "aten::embedding": lambda: ((rn(10, 4), torch.tensor([[1, 9], [0, 3]]), -1, False, False), {}),
    "aten::embedding_dense_backward": lambda: ((rn(2, 2, 4), torch.tensor([[1, 9], [1, 3]]), 10, -1, False), {}),
    "aten::native_batch_norm": lambda: ((*_bn_args(), True, 0.1, 1e-5), {}),
    "aten::native_batch_norm_backward": lambda: (_bn_backward_args(), {}),
    "aten::gather": lambda: ((rn(3, 5), 1, torch.tensor([[0, 4], [2, 2], [1, 0]])), {}),
    "aten::cat": lambda: (([rn(2, 3), rn(4, 3, seed=1)], 0), {}),
}


def _aten_items():
    out = []
    for op in R.registered_ops("canna"):
        for spec in op.aten:
            out.append((spec.fn, op, spec))
    return out


def _overload(name):
    return _aten._schema(name)[0]


def test_every_aten_item_has_a_case():
    names = {n for n, _op, _s in _aten_items()}
    missing = sorted(names - set(CASES))
    assert not missing, f"aten items without a test case: {missing}"
    assert not set(CASES) - names, sorted(set(CASES) - names)


def _f64(v):
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.detach().to(torch.float64)
    if isinstance(v, (list, tuple)):
        return type(v)(_f64(x) for x in v)
    return v


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v


def _flat(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_item_matches_pytorch(name):
    ov = _overload(name)
    rows = [_aten.report_name(op, spec) for n, op, spec in _aten_items() if n == name]
    op_of = {n: op for n, op, _spec in _aten_items()}
    args, kwargs = CASES[name]()
    ref32 = _flat(ov(*_clone(args), **kwargs))
    a64 = _f64(args)
    if name == "aten::_softmax_backward_data" or name == "aten::_log_softmax_backward_data":
        a64 = (*a64[:3], torch.float64)
    ref64 = _flat(ov(*a64, **kwargs))
    direct0, c0 = _aten.stats()["direct"], _aten.stats()["direct_c"]
    with ct.offload(level="aten") as rep:
        for _ in range(4):   # the first calls take the Python handler (it records the call), the next the direct path
            mine_args = _clone(args)
            got = _flat(ov(*mine_args, **kwargs))
            _check_against(name, got, ref32, ref64, mine_args, a64)
    column = "backward" if _aten.is_backward(op_of[name]) else "canna"
    assert getattr(rep.ops[rows[0]], column) == 4, (rep, rep.pytorch_calls)
    item = next((op, spec) for n, op, spec in _aten_items() if n == name)
    d = _aten._direct(*item)
    if d is not None and name not in NOT_DIRECT:
        assert _aten.stats()["direct"] - direct0 >= 2, "the repeated calls did not take the C++ direct path"
        if d[8] is None and name not in NOT_DIRECT_C:   # (a result adapter is Python: no C route)
            assert _aten.stats()["direct_c"] - c0 >= 2, "the repeated calls did not take the C route"


#: items with a direct call whose signature here the memo does not replay (a temporary)
NOT_DIRECT = frozenset({"aten::masked_fill.Scalar"})   # (aclnnSWhere has no scalar form: the value is a 0-d temporary)
#: items whose direct call here takes the Python objects' route, and why
NOT_DIRECT_C = {}


def _check_against(name, got, ref32, ref64, mine_args, a64):
    assert len(got) == len(ref32)
    for g, r32, r64 in zip(got, ref32, ref64):
        if r32 is None or not isinstance(r32, torch.Tensor) or (r32.numel() == 0 and name.startswith("aten::native_")):
            continue
        assert g.dtype == r32.dtype and g.shape == r32.shape, (g.dtype, g.shape, r32.dtype, r32.shape)
        if r32.is_floating_point():
            np.testing.assert_allclose(g.double().numpy(), r64.numpy(), rtol=2e-5, atol=2e-5)
        else:
            assert torch.equal(g, r32)
    if "_." in name or name.endswith("_"):   # in place: the result is the argument itself, written
        assert got[0] is mine_args[0]
        np.testing.assert_allclose(mine_args[0].double().numpy(), ref64[0].numpy(), rtol=2e-5, atol=2e-5)
    if name == "aten::native_batch_norm":   # the running statistics are updated in place, as PyTorch's
        np.testing.assert_allclose(mine_args[3].numpy(), a64[3].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine_args[4].numpy(), a64[4].numpy(), rtol=1e-5, atol=1e-6)


def test_autograd_is_pytorchs_and_gradients_match():
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(6, 8, requires_grad=True)
    b = torch.randn(6, requires_grad=True)

    def f(x, w, b):
        h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))
        return (torch.tanh(h) * torch.sigmoid(h)).log_softmax(1).sum()

    with ct.offload(level="aten") as rep:
        y = f(x, w, b)
        y.backward()
    xs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = f(*xs)
    y64.backward()
    np.testing.assert_allclose(y.item(), y64.item(), rtol=1e-5)
    for t, r in zip((x, w, b), xs):
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-5)
    for row in ("addmm", "gelu", "tanh", "matmul"):
        assert rep.ops[row].canna >= 1, (row, rep)
    for row in ("gelu", "tanh"):   # PyTorch's backward formulas on canna's backward kernels
        assert rep.ops[row].backward >= 1, (row, rep)
    assert type(y.grad_fn).__name__ == "SumBackward0"   # PyTorch's own nodes


def _cnn():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(8, 8, 3, padding=1),   # (a bias before a batch norm gets a ~0 gradient: Adam amplifies noise)
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5))


def test_cnn_training_with_adamw_matches_plain():
    x = torch.randn(6, 3, 8, 8, generator=_g(3))
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    losses = {}
    params = {}
    for level in ("plain", "aten"):
        m = _cnn()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        rep = ct.OffloadReport()
        out = []
        for _ in range(3):
            opt.zero_grad()
            if level == "aten":
                with ct.offload(level="aten", report=rep):
                    loss = torch.nn.functional.cross_entropy(m(x), y)
                    loss.backward()
                    opt.step()
            else:
                loss = torch.nn.functional.cross_entropy(m(x), y)
                loss.backward()
                opt.step()
            out.append(loss.item())
        losses[level] = out
        params[level] = [p.detach().clone() for p in m.parameters()]
        if level == "aten":
            # the function level's rows: a backward kernel's calls in its forward's backward column
            for row in ("conv2d", "native_batch_norm", "relu_", "max_pool2d", "addmm", "apply_adamw"):
                assert rep.ops[row].canna >= 1, (row, rep)
            for row in ("conv2d", "native_batch_norm", "relu", "max_pool2d"):
                assert rep.ops[row].backward >= 1, (row, rep)
    np.testing.assert_allclose(losses["aten"], losses["plain"], rtol=1e-4)
    for a, b in zip(params["aten"], params["plain"]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)


def test_batch_norm_eval_runs_on_canna():
    # PyTorch's meta kernel gives eval mode's save statistics as [C], its CPU kernel as [0]: canna
    # gives the CPU's, and the signature must not be refused for differing from the meta kernel
    m = _cnn().eval()
    x = rn(2, 3, 8, 8, seed=3)
    with torch.no_grad():
        ref = m(x)
        with ct.offload(level="aten") as rep:
            got = [m(x) for _ in range(3)]
    st = rep.ops["native_batch_norm"]
    assert st.canna == 3 and st.fallback == 0, rep
    for g in got:
        np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    x, w, b, rm, rv = _bn_args()
    want = A.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    with ct.offload(level="aten", strict=True) as rep:
        mine = A.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    assert rep.ops["native_batch_norm"].canna == 1
    assert [(t.shape, t.dtype) for t in mine] == [(t.shape, t.dtype) for t in want]
    np.testing.assert_allclose(mine[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-6)


def test_views_pass_cannas_key():
    # a view computes nothing: it has a fallthrough kernel for canna's key (_aten.cc
    # canna_aten_pass_views), so the dispatcher never boxes it into the fallback; other PyTorch
    # calls still reach it (counted for the report)
    assert _aten.available(), _aten.why_unavailable()
    dll = _aten._state["dll"]
    x = rn(4, 6)
    with ct.offload(level="aten"):
        dll.canna_aten_other(1)   # (this thread's calls so far dropped)
        v = [x.view(24), x.t(), x[1:3], x.unsqueeze(0), x.expand(2, 4, 6), x.transpose(0, 1), *x.split(2),
             x.as_strided((2, 2), (1, 1)), x.select(0, 1), x.narrow(1, 0, 2), x.permute(1, 0), x.detach()]
        y = torch.arange(3) * 2   # not views: PyTorch's kernels, through the fallback
        counts = dll.canna_aten_other(1)
    assert all(t.data_ptr() >= x.data_ptr() for t in v)
    names = set(counts)
    assert "aten::arange.start_out" in names, names
    assert not names & {"aten::view.default", "aten::t.default", "aten::slice.Tensor", "aten::unsqueeze.default",
                        "aten::expand.default", "aten::transpose.int", "aten::split.Tensor", "aten::as_strided.default",
                        "aten::select.int", "aten::narrow.default", "aten::permute.default", "aten::detach.default"}, names
    assert torch.equal(y, torch.tensor([0, 2, 4]))


def test_transformer_layer_forward_backward_matches_plain():
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, activation="gelu")
    x = torch.randn(2, 5, 16, generator=_g(4))
    ref = layer(x).pow(2).sum()
    ref.backward()
    ref_g = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    with ct.offload(level="aten") as rep:
        got = layer(x).pow(2).sum()
        got.backward()
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-5)
    for p, r in zip(layer.parameters(), ref_g):
        np.testing.assert_allclose(p.grad.numpy(), r.numpy(), rtol=1e-3, atol=1e-5)
    assert rep.ops["layer_norm"].canna >= 2 and rep.ops["addmm"].canna >= 2


def test_python_numbers_keep_pytorchs_promotion():
    i = torch.arange(3)
    f = torch.ones(3)
    with ct.offload(level="aten", strict=True) as rep:
        a = i + 2.5                                   # int tensor, Python float: float32 (weak scalar)
        b = f + torch.tensor(2.5, dtype=torch.float64)  # a 0-d tensor does not promote across one category
        c = torch.arange(3, dtype=torch.int32) + torch.tensor(2)
        d = f * 3
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (torch.float32, torch.float32, torch.int32, torch.float32)
    assert torch.equal(a, i + 2.5) and torch.equal(d, f * 3)
    assert rep.ops["add"].canna == 3 and rep.ops["mul"].canna == 1


def test_refused_calls_run_on_pytorch_with_the_reason():
    z = torch.randn(3, dtype=torch.complex64)
    with ct.offload(level="aten") as rep:
        r = z + 1
    assert torch.equal(r, z + 1)
    st = rep.ops["add"]
    assert st.canna == 0 and st.fallback == 1 and "complex64" in next(iter(st.reasons))
    assert "aten::add.Tensor" not in rep.pytorch_calls   # (counted once: in its row, as a refusal)
    with pytest.raises(RuntimeError, match="strict=True"):
        with ct.offload(level="aten", strict=True):
            z + 1


def test_pytorchs_errors_surface_and_the_block_stays_usable():
    x = torch.randn(3, 4)
    with ct.offload(level="aten") as rep:
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            x @ x
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            torch.randn(3, 1).add_(torch.randn(3, 4))
        for _ in range(2):   # (the second time from the C++ kernel's cached verdict)
            with pytest.raises(RuntimeError, match="can't be cast"):
                torch.arange(3).add_(1.5)
        y = x @ x.T
    np.testing.assert_allclose(y.numpy(), (x @ x.T).numpy(), rtol=1e-5, atol=1e-6)
    # PyTorch's rejections are neither canna's calls nor its refusals: PyTorch ran and raised
    assert rep.ops["matmul"].canna == 1 and rep.ops["matmul"].fallback == 0


def test_an_index_out_of_range_raises_pytorchs_error_every_time():
    w = torch.randn(10, 4)
    good, bad = torch.tensor([[1, 2]]), torch.tensor([[1, 12]])
    with ct.offload(level="aten") as rep:
        for _ in range(4):   # the signature is replayed from C++ from now on
            torch.nn.functional.embedding(good, w)
        for _ in range(3):
            with pytest.raises(IndexError, match="index out of range"):
                torch.nn.functional.embedding(bad, w)
        r = torch.nn.functional.embedding(good, w)
    assert torch.equal(r, w[good])
    assert rep.ops["embedding"].canna == 5 and rep.ops["embedding"].fallback == 3


def test_in_place_updates_write_the_callers_memory():
    p = torch.nn.Parameter(torch.randn(5))
    ptr, before, v0 = p.data_ptr(), p.detach().clone(), p._version
    with ct.offload(level="aten") as rep:
        with torch.no_grad():
            p.mul_(2).add_(1)
    assert p.data_ptr() == ptr and p._version == v0 + 2
    np.testing.assert_allclose(p.detach().numpy(), (before * 2 + 1).numpy(), rtol=1e-6)
    assert rep.ops["mul_"].canna == 1 and rep.ops["add_"].canna == 1
    with ct.offload(level="aten"):   # autograd's own checks still run above canna
        with pytest.raises(RuntimeError, match="leaf Variable"):
            p.add_(1)


def test_other_layouts_devices_and_views_are_pytorchs():
    s = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (3,))
    m = torch.randn(3, device="meta")
    x = torch.randn(4, 4)
    with ct.offload(level="aten") as rep:
        sd = (s * 2).to_dense()
        mm = (m + 1).shape
        v = x.t().reshape(16)[3:]
    assert torch.equal(sd, torch.tensor([2.0, 0.0, 4.0])) and mm == (3,)
    assert torch.equal(v, x.t().reshape(16)[3:])
    assert not any("view" in k or k.startswith(("aten::t.", "aten::slice")) for k in rep.pytorch_calls), rep.pytorch_calls


def test_ops_and_exclude_select_rows():
    x = torch.randn(4)
    with ct.offload(level="aten", exclude=("relu",)) as rep:
        torch.relu(x)
        torch.tanh(x)
    assert "relu" not in rep.ops and rep.ops["tanh"].canna == 1
    assert rep.pytorch_calls.get("aten::relu.default") == 1
    with ct.offload(level="aten", ops=("relu",)) as rep:
        torch.relu(x)
        torch.tanh(x)
    assert rep.ops["relu"].canna == 1 and "tanh" not in rep.ops
    with pytest.raises(ValueError, match="unknown ops"):
        ct.offload(level="aten", ops=("no_such_op",))
    with pytest.raises(ValueError, match="level"):
        ct.offload(level="dispatcher")


def test_blocks_are_per_thread_nested_and_leave_nothing_behind():
    x = torch.randn(4)
    seen = {}

    def other():
        seen["r"] = torch.tanh(x)

    with ct.offload(level="aten") as outer:
        torch.relu(x)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        with ct.offload(level="aten") as inner:
            torch.sigmoid(x)
        torch.exp(x)
    assert set(outer.ops) == {"relu", "exp"} and set(inner.ops) == {"sigmoid"}
    assert "tanh" not in outer.ops and torch.equal(seen["r"], torch.tanh(x))
    with pytest.raises(ZeroDivisionError):
        with ct.offload(level="aten") as rep:
            1 / 0
    torch.relu(x)   # after the block (left by an exception): PyTorch's, not counted
    assert rep.ops == {}
    assert _aten.stats()["canna"] >= 4


def test_a_process_runs_a_block_and_exits_cleanly():
    r = run_python("""
        import torch, canna_dl.torch as ct
        m = torch.nn.Linear(8, 4)
        opt = torch.optim.AdamW(m.parameters())
        with ct.offload(level="aten") as rep:
            m(torch.randn(3, 8)).relu().sum().backward()
            opt.step()
        assert rep.ops["addmm"].canna == 1 and rep.ops["apply_adamw"].canna == 1, rep
        print("done")
    """)
    assert r.stdout.strip().endswith("done")


def test_optimizer_entries_are_routed():
    rows = {row for _n, row, _r in _offload_optim.aten_entries()}
    assert rows <= set(_aten.ATEN_OPS)


# ---------------------------------------------------------------------------------------------
# hostile input: below the dispatcher none of aten's checks has run, so canna must not compute what
# PyTorch rejects, nor give another shape, dtype or layout than PyTorch's

A = torch.ops.aten
_X4 = torch.randn(2, 3, 5, 5)
_CL = _X4.to(memory_format=torch.channels_last)


def _conv_bw(mask):
    return A.convolution_backward(torch.randn(2, 4, 3, 3), _X4, torch.randn(4, 3, 3, 3), [4], [1, 1], [0, 0], [1, 1],
                                  False, [0, 0], 1, mask)


def _ln_half(dt):
    x = torch.randn(4, 8, dtype=dt, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (8,), torch.rand(8, dtype=dt) + 0.5, torch.randn(8, dtype=dt))
    y.sum().backward()
    return y, x.grad


#: name -> a call; plain PyTorch either raises (the block must raise the same type, every time) or
#: gives results the block must give with the same shape, dtype, strides and values
HOSTILE = {
    "sum of a bool mask (int64)": lambda: (torch.rand(3, 4, generator=_g(1)) > 0.5).sum(-1),
    "sum of int32 past 2**31 (int64 accumulation)": lambda: torch.full((3, 5), 2 ** 30, dtype=torch.int32).sum(1),
    "sum of int64 into an int32 dtype": lambda: torch.full((4,), 2 ** 40).sum(0, dtype=torch.int32),
    "mse_loss reduction code 3 (PyTorch asserts)": lambda: A.mse_loss(torch.randn(3, 2), torch.randn(3, 2), 3),
    "mse_loss of shapes that broadcast": lambda: A.mse_loss(torch.randn(3, 2), torch.randn(2), 1),
    "nll_loss reduction code -2 (sums)": lambda: A.nll_loss_forward(torch.randn(4, 3).log_softmax(1),
                                                                    torch.tensor([0, 1, 2, 1]), None, -2, -100),
    "nll_loss reduction code 5 (sums)": lambda: A.nll_loss_forward(torch.randn(4, 3).log_softmax(1),
                                                                   torch.tensor([0, 1, 2, 1]), None, 5, -100),
    "nll_loss of a 1-D input, no reduction": lambda: A.nll_loss_forward(torch.randn(3).log_softmax(0),
                                                                        torch.tensor(1), None, 0, -100),
    "cross_entropy with int32 targets": lambda: torch.nn.functional.cross_entropy(
        torch.randn(4, 3), torch.tensor([0, 1, 2, 1], dtype=torch.int32)),
    "nll_loss with a float64 weight": lambda: torch.nn.functional.nll_loss(
        torch.randn(4, 3), torch.tensor([0, 1, 2, 1]), weight=torch.ones(3, dtype=torch.float64)),
    "nll_loss of a 3-D input": lambda: A.nll_loss_forward(torch.randn(2, 3, 4), torch.zeros(2, 4, dtype=torch.long),
                                                          None, 1, -100),
    "layer_norm float16 forward and backward": lambda: _ln_half(torch.float16),
    "native_layer_norm float16 input, float32 weight": lambda: A.native_layer_norm(
        torch.randn(4, 8, dtype=torch.float16), [8], torch.ones(8), torch.zeros(8), 1e-5),
    "native_layer_norm float16 without weights": lambda: A.native_layer_norm(
        torch.randn(4, 8, dtype=torch.float16), [8], None, None, 1e-5),
    "batch norm float16 input, float32 parameters": lambda: A.native_batch_norm(
        _X4.half(), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3), True, 0.1, 1e-5),
    "batch norm float64 input, float32 parameters": lambda: A.native_batch_norm(
        _X4.double(), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3), True, 0.1, 1e-5),
    "layer_norm bfloat16 forward and backward": lambda: _ln_half(torch.bfloat16),
    "native_layer_norm with a float64 weight": lambda: A.native_layer_norm(torch.randn(4, 8), [8],
                                                                           torch.ones(8, dtype=torch.float64), None,
                                                                           1e-5),
    "a transposed input's layout": lambda: (torch.randn(3, 4).T * 2).view(-1),
    "a transposed input's strides": lambda: torch.randn(3, 4).T * 2,
    "channels-last relu": lambda: torch.relu(_CL),
    "channels-last conv2d": lambda: torch.nn.functional.conv2d(_CL, torch.randn(4, 3, 3, 3)),
    "channels-last add": lambda: _CL + _CL,
    "softmax backward of float64 gradient, float32 input": lambda: A._softmax_backward_data(
        torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4), 1, torch.float32),
    "softmax backward of float64 output": lambda: A._softmax_backward_data(
        torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64), 1, torch.float32),
    "float16 ** 1e6 (the exponent overflows)": lambda: torch.randn(3).half() ** 1e6,
    "float16.pow_(70000)": lambda: torch.randn(3).half().pow_(70000),
    "int8 ** 300": lambda: torch.ones(3, dtype=torch.int8) ** 300,
    "float16 ** inf": lambda: torch.rand(3).half() ** float("inf"),
    "int32 pool indices": lambda: A.max_pool2d_with_indices_backward(
        torch.randn(1, 1, 2, 2), torch.randn(1, 1, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False,
        torch.zeros(1, 1, 2, 2, dtype=torch.int32)),
    "conv2d without output channels": lambda: torch.nn.functional.conv2d(_X4, torch.randn(0, 3, 3, 3)),
    "conv2d without input channels": lambda: torch.nn.functional.conv2d(torch.randn(2, 0, 5, 5),
                                                                        torch.randn(4, 0, 3, 3)),
    "_fused_adamw_ of empty lists": lambda: torch._fused_adamw_(
        [], [], [], [], [], [], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0., eps=1e-8, amsgrad=False,
        maximize=False),
    "batch norm eval statistics": lambda: A.native_batch_norm(_X4, torch.ones(3), torch.zeros(3), torch.zeros(3),
                                                              torch.ones(3), False, 0.1, 1e-5),
    "float16 batch norm statistics": lambda: A.native_batch_norm(
        _X4.half(), None, None, torch.zeros(3, dtype=torch.half), torch.ones(3, dtype=torch.half), True, 0.1, 1e-5),
    "convolution_backward, bias only": lambda: _conv_bw([False, False, True])[2],
    "convolution_backward, input only": lambda: _conv_bw([True, False, False])[0],
    "layer norm over a size-0 dim": lambda: A.native_layer_norm(torch.randn(4, 0), [0], None, None, 1e-5)[0],
    "int add with a float alpha": lambda: A.add.Tensor(torch.arange(3), torch.arange(3), alpha=1.5),
    "mm of two dtypes": lambda: torch.mm(torch.randn(2, 2), torch.randn(2, 2, dtype=torch.float64)),
    "bmm of two batch sizes": lambda: torch.bmm(torch.randn(2, 3, 4), torch.randn(3, 4, 5)),
    "addmm beta=0 drops NaN": lambda: torch.addmm(torch.full((2, 2), float("nan")), torch.randn(2, 3),
                                                  torch.randn(3, 2), beta=0),
    "int / int": lambda: torch.arange(1, 4) / torch.arange(1, 4),
    "int.div_(int)": lambda: torch.arange(1, 4).div_(torch.arange(1, 4)),
    "bool - bool": lambda: torch.tensor([True]) - torch.tensor([True]),
    "add_ into an expanded tensor": lambda: torch.randn(3, 1).expand(3, 4).add_(1),
    "an expanded input": lambda: torch.randn(3, 1).expand(3, 4) + 1,
    # special values and edge shapes (tests/test_special_values.py checks them bit for bit)
    "layer norm statistics over a size-0 dim": lambda: A.native_layer_norm(torch.randn(4, 0), [0], None, None, 1e-5),
    "layer norm statistics over size-0 dims, affine": lambda: A.native_layer_norm(
        torch.randn(2, 0, 3), [0, 3], torch.ones(0, 3), torch.zeros(0, 3), 1e-5),
    "batch norm eps=0 of constant channels": lambda: A.native_batch_norm(
        torch.cat([torch.randn(4, 1, 2, 2), torch.full((4, 2, 2, 2), 2.5)], 1), torch.ones(3), torch.zeros(3),
        torch.zeros(3), torch.ones(3), True, 0.1, 0.0),
    "(-0) ** -0.5, (-inf) ** -0.5": lambda: torch.tensor([-0.0, float("-inf"), 4.0]) ** -0.5,
    "float16 (-inf) ** 0.5": lambda: torch.tensor([float("-inf"), -0.0, 4.0]).half() ** 0.5,
    "1e20 ** -2 overflows to 0": lambda: torch.tensor([1e20, -1e20, 2.0]) ** -2,
    # comparisons: aten converts both operands to their common dtype first (BinaryOps.cpp comparison_op)
    "float16 == 0.1 (aten rounds the number)": lambda: torch.tensor([0.1, 2.0]).half() == 0.1,
    "bfloat16 < 0.1": lambda: torch.tensor([0.1, 2.0]).bfloat16() < 0.1,
    "float16 == 70000 (inf in float16)": lambda: torch.tensor([float("inf"), 2.0]).half() == 70000,
    "int64 == 16777216.0 (compared in float32)": lambda: torch.tensor([16777217, 3]) == 16777216.0,
    "int8 == 1.00000001 (compared in float32)": lambda: torch.tensor([1, 3], dtype=torch.int8) == 1.00000001,
    "float32 == a float64 0-d tensor": lambda: torch.tensor([0.1, 0.2]) == torch.tensor(0.1, dtype=torch.float64),
    "int16 == float16 tensors": lambda: torch.tensor([2049, 3], dtype=torch.int16) == torch.tensor([2048., 3.]).half(),
    "bool == 2": lambda: torch.tensor([True, False]) == 2,
    "bool < 0.5": lambda: torch.tensor([True, False]) < 0.5,
    "uint8 == -1 (aten wraps it to 255)": lambda: torch.tensor([255, 1], dtype=torch.uint8) == -1,
    "int32 > 2**40": lambda: torch.tensor([3, -3], dtype=torch.int32) > 2 ** 40,
    "float32 == 2**60 + 1": lambda: torch.tensor([2.0 ** 60, 1.0]) == 2 ** 60 + 1,
    "a transposed comparison": lambda: torch.randn(3, 4).T > 0,
    "eq of a complex tensor": lambda: torch.tensor([1 + 1j, 2]) == 2,
    # masked_fill: the value converted to self's dtype (TensorAdvancedIndexing.cpp)
    "int64.masked_fill_ with a float value (truncated)": lambda: torch.arange(4).masked_fill_(
        torch.tensor([True, False, True, False]), 2.7),
    "float16 masked_fill with -1e9 (overflows)": lambda: torch.randn(4).half().masked_fill(torch.rand(4) > 0.5, -1e9),
    "int8 masked_fill with 300 (overflows)": lambda: torch.zeros(4, dtype=torch.int8).masked_fill(
        torch.rand(4) > 0.5, 300),
    "masked_fill with a uint8 mask": lambda: torch.randn(4).masked_fill((torch.rand(4) > 0.5).to(torch.uint8), 1.0),
    "masked_fill_ with a mask larger than self": lambda: torch.randn(4).masked_fill_(torch.rand(3, 4) > 0.5, 1.0),
    "masked_fill of a transposed tensor": lambda: torch.randn(3, 4).T.masked_fill(torch.rand(4, 3) > 0.5, 1.0),
    "masked_fill of a bool tensor": lambda: (torch.rand(4) > 0.5).masked_fill(torch.rand(4) > 0.5, True),
    "where of float32 and a float64 0-d tensor": lambda: torch.where(torch.rand(4) > 0.5, torch.randn(4),
                                                                       torch.tensor(2.5, dtype=torch.float64)),
    "where of a uint8 condition": lambda: torch.where((torch.rand(4) > 0.5).to(torch.uint8), torch.randn(4), 0.0),
    "minimum of int32 and float16": lambda: torch.minimum(torch.tensor([2049, -3], dtype=torch.int32),
                                                          torch.tensor([2048., 1.]).half()),
    "all over dim=()": lambda: torch.ops.aten.all.dims(torch.rand(3, 4) > 0.5, [], False),
    "any of a uint8 tensor": lambda: torch.tensor([[0, 2], [0, 0]], dtype=torch.uint8).any(1),
}


def _outcome(fn):
    torch.manual_seed(0)
    try:
        return fn(), None
    except Exception as e:   # noqa: BLE001 - PyTorch's error type is the point
        return None, type(e)


def _same_result(want, got, where):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), where
        for w, g in zip(want, got):
            _same_result(w, g, where)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want, where
        return
    assert isinstance(got, torch.Tensor), where
    assert (got.shape, got.dtype) == (want.shape, want.dtype), where
    if want.numel() > 1:
        assert got.stride() == want.stride(), where
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3, equal_nan=True, msg=where)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_calls_behave_as_in_pytorch(name):
    want, want_err = _outcome(HOSTILE[name])
    with ct.offload(level="aten"):
        got = [_outcome(HOSTILE[name]) for _ in range(3)]   # (then from the C++ kernel's cached verdict)
    for i, (g, err) in enumerate(got):
        assert err is want_err, (name, i, err, want_err)
        if want_err is None:
            _same_result(want, g, f"{name} (call {i})")


def test_a_tensor_subclass_runs_on_canna():
    class Sub(torch.Tensor):
        pass
    s = torch.randn(5).as_subclass(Sub)
    with ct.offload(level="aten", strict=True) as rep:
        a, b = s + 1, torch.relu(s)
    assert torch.equal(a, s.as_subclass(torch.Tensor) + 1) and torch.equal(b, torch.relu(s.as_subclass(torch.Tensor)))
    assert rep.ops["add"].canna == 1 and rep.ops["relu"].canna == 1


def test_a_signature_is_checked_once_and_the_reason_reported():
    cl = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    with ct.offload(level="aten") as rep:
        for _ in range(3):
            y = torch.ops.aten.max_pool2d_with_indices(cl, [2, 2], [2, 2])
    want = torch.ops.aten.max_pool2d_with_indices(cl, [2, 2], [2, 2])
    assert [t.stride() for t in y] == [t.stride() for t in want] and all(map(torch.equal, y, want))
    st = rep.ops["max_pool2d"]
    assert st.canna == 0 and st.fallback == 3 and "layout" in next(iter(st.reasons)), st
    x, w = torch.randn(4, 8, dtype=torch.float16), torch.ones(8)   # float32 weights: PyTorch's statistics are float32
    with ct.offload(level="aten") as rep:
        for _ in range(2):
            out = torch.ops.aten.native_layer_norm(x, [8], w, None, 1e-5)
    assert out[1].dtype == torch.float32 and rep.ops["layer_norm"].fallback == 2
    with pytest.raises(RuntimeError, match="strict=True.*reduced-precision"):
        with ct.offload(level="aten", strict=True):
            torch.ops.aten.native_layer_norm(x, [8], w, None, 1e-5)


def test_blocks_may_end_in_any_order():
    x = torch.randn(4)
    b1, b2 = ct.offload(level="aten"), ct.offload(level="aten", ops=["exp"])
    r1 = b1.__enter__()
    r2 = b2.__enter__()
    b1.__exit__(None, None, None)   # b2 is still open: it routes the thread's calls
    torch.exp(x)
    torch.relu(x)
    b2.__exit__(None, None, None)
    assert r2.ops["exp"].canna == 1 and "relu" not in r2.ops and "exp" not in r1.ops
    n = _aten.stats()["canna"]
    torch.exp(x)   # no block left: PyTorch's, and the key is off
    assert _aten.stats()["canna"] == n
    with ct.offload(level="aten") as r3:
        torch.exp(x)
    assert r3.ops["exp"].canna == 1


def test_coverage_classifies_aten_operators_as_it_does_functions():
    # factories reach the aten level as their composite parts (zeros_like: aten::zero_, arange:
    # aten::arange.start_out) and Tensor.item as aten::_local_scalar_dense: allocation and not
    # compute, as torch.zeros_like / Tensor.item are at the function level; i0 is compute on PyTorch
    x = torch.randn(4, 8)
    with ct.offload(level="aten") as rep:
        z = torch.zeros_like(x)
        r = torch.arange(8.0)
        y = torch.relu(x) + z + r
        v = y.sum().item()
        w = torch.special.i0(x)
    assert v == pytest.approx(float((torch.relu(x) + torch.arange(8.0)).sum()), rel=1e-5)
    cov = rep.coverage()
    alloc, views, other = cov["allocation"], cov["not_compute"], cov["no_canna_op"]
    assert any(k.startswith("aten::zero_") for k in alloc) and any(k.startswith("aten::arange") for k in alloc), cov
    assert any(k.startswith("aten::_local_scalar_dense") for k in views), cov
    assert any(k.startswith("aten::i0") for k in other) and not any("zero_" in k or "arange" in k for k in other), cov
    assert cov["total"] == cov["canna"] + sum(other.values()) + sum(v["count"] for v in cov["fallbacks"].values())
    torch.testing.assert_close(w, torch.special.i0(x))


def test_either_levels_op_names_select_rows():
    # ops= / exclude= take the function level's names too: lstm has no aten item, so ops=["lstm"]
    # routes nothing here, and an unknown name is still an error
    x = torch.randn(3, 4)
    with ct.offload(level="aten", ops=["lstm"]) as rep:
        torch.relu(x)
    assert "relu" not in rep.ops or rep.ops["relu"].canna == 0, rep
    with ct.offload(level="aten", exclude=["lstm"]) as rep:
        torch.relu(x)
    assert rep.ops["relu"].canna == 1, rep
    with pytest.raises(ValueError, match="unknown ops.*no_such_op"):
        ct.offload(level="aten", ops=["no_such_op"])


def test_the_default_level_comes_from_the_environment(monkeypatch):
    from canna_dl.torch._offload import Offload
    monkeypatch.setenv("CANNA_OFFLOAD_LEVEL", "aten")
    assert isinstance(ct.offload(), _aten.AtenOffload) and isinstance(ct.offload(level="function"), Offload)
    monkeypatch.setenv("CANNA_OFFLOAD_LEVEL", "function")
    assert isinstance(ct.offload(), Offload)
    monkeypatch.setenv("CANNA_OFFLOAD_LEVEL", "fast")
    with pytest.raises(ValueError, match="CANNA_OFFLOAD_LEVEL must be 'function' or 'aten', not 'fast'"):
        ct.offload()
    monkeypatch.delenv("CANNA_OFFLOAD_LEVEL")
    assert isinstance(ct.offload(), _aten.AtenOffload)   # (the default where it builds)


def test_without_the_aten_level_the_default_warns_and_runs_the_function_level(monkeypatch):
    from canna_dl.torch import _offload
    monkeypatch.delenv("CANNA_OFFLOAD_LEVEL", raising=False)
    monkeypatch.setattr(_offload, "_default", {})
    monkeypatch.setattr(_aten, "available", lambda: False)
    monkeypatch.setattr(_aten, "why_unavailable", lambda: "no C++ compiler (a test)")
    with pytest.warns(RuntimeWarning, match=r"level='aten' is not available here \(no C\+\+ compiler \(a test\)\)"):
        blk = ct.offload()
    assert isinstance(blk, _offload.Offload)
    with blk as rep:   # (it works: the function level's rows)
        torch.relu(torch.randn(3))
    assert rep.ops["relu"].canna == 1
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # once per process
        assert isinstance(ct.offload(), _offload.Offload)


@pytest.mark.parametrize("mask", [(True, False, True), (False, True, False), (False, False, True)])
def test_layer_norm_backward_output_mask_gives_none(mask):
    # PyTorch's rule: an output_mask entry False is an undefined result (None), the others computed
    args = _ln_backward_args(mask)
    want = A.native_layer_norm_backward(*args)
    with ct.offload(level="aten", strict=True) as rep:
        for _ in range(3):   # (the later calls from the C++ direct path)
            got = A.native_layer_norm_backward(*args)
            for g, w in zip(got, want):
                assert (g is None) == (w is None)
                if g is not None:
                    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert rep.ops["layer_norm"].backward == 3


def test_layer_norm_training_runs_both_directions_on_canna():
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm([3, 5])
    x = torch.randn(2, 4, 3, 5, requires_grad=True)
    ln(x).sin().sum().backward()
    ref = [x.grad.clone(), ln.weight.grad.clone(), ln.bias.grad.clone()]
    x.grad = None
    ln.zero_grad()
    with ct.offload(level="aten") as rep:
        ln(x).sin().sum().backward()
    for g, r in zip((x.grad, ln.weight.grad, ln.bias.grad), ref):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)
    st = rep.ops["layer_norm"]
    assert st.canna == 1 and st.backward == 1 and st.fallback == 0, rep
    assert not any("layer_norm" in n for n in rep.pytorch_calls), rep.pytorch_calls


def _cl(*shape):
    return torch.randn(*shape, dtype=torch.float64).to(memory_format=torch.channels_last)


#: calls of channels-last or permuted tensors, whose result PyTorch lays out non-contiguously (the
#: input's layout) unless the name says otherwise: (row, call)
LAYOUTS = {
    "a permuted operand's sum (rotary embeddings)": ("add", lambda: torch.randn(2, 4, 3, 5, dtype=torch.float64)
                                                     .transpose(1, 2) + torch.randn(2, 3, 4, 5, dtype=torch.float64)),
    "a channels-last product": ("mul", lambda: _cl(2, 3, 4, 4) * 2),
    "a transposed negation": ("neg", lambda: -torch.randn(6, 5, dtype=torch.float64).t()),
    "where of a channels-last operand": ("where", lambda: torch.where(_cl(2, 3, 4, 4) > 0, _cl(2, 3, 4, 4), 0.0)),
    "a channels-last convolution": ("conv2d", lambda: torch.nn.functional.conv2d(
        _cl(2, 4, 6, 6), torch.randn(3, 4, 3, 3, dtype=torch.float64), padding=1)),
    "a channels-last depthwise convolution": ("conv2d", lambda: torch.nn.functional.conv2d(
        _cl(2, 4, 9, 9), torch.randn(4, 1, 7, 7, dtype=torch.float64), padding=3, groups=4)),
    "a channels-last mean over the height (a contiguous result)": ("mean", lambda: _cl(2, 5, 3, 4).mean(2)),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_results_keep_pytorchs_layout(name):
    """A result PyTorch lays out like its input (a channels-last or permuted tensor) runs on canna
    written in that layout: the same strides and values as PyTorch's, for the first call of a
    signature and for the calls the cached verdict serves."""
    row, call = LAYOUTS[name]
    torch.manual_seed(0)
    want = call()
    assert want.is_contiguous() == ("contiguous result" in name)   # (the case is what it claims to be)
    with ct.offload(level="aten", strict=True) as rep:
        got = []
        for _ in range(3):
            torch.manual_seed(0)
            got.append(call())
    for g in got:
        assert g.stride() == want.stride() and g.dtype == want.dtype, (name, g.stride(), want.stride())
        torch.testing.assert_close(g, want, rtol=1e-12, atol=1e-12)
    assert rep.ops[row].canna == 3, rep


#: elementwise calls whose result PyTorch lays out non-contiguously (its inputs' stride order):
#: (row, call on float64 random data); operands of fewer dims, sizes of 1, a 0-dim tensor, slices
STRIDED_ELEMENTWISE = {
    "a sliced negation": ("neg", lambda q: -q[..., 3:]),
    "a transposed sum, broadcast from fewer dims": ("add", lambda q: q + torch.randn(5, dtype=torch.float64)),
    "a transposed product with a size-1 dim": ("mul", lambda q: q * torch.randn(2, 1, 3, 5, dtype=torch.float64)),
    "a transposed product with a 0-dim tensor": ("mul", lambda q: q * torch.tensor(1.5, dtype=torch.float64)),
    "two slices' difference": ("sub", lambda q: q[..., :2] - q[..., 3:]),
    "a channels-last sum with a per-channel tensor": ("add", lambda q: _cl(2, 3, 4, 4) + torch.randn(
        3, 1, 1, dtype=torch.float64)),
    "a permuted exp": ("exp", lambda q: q.permute(3, 0, 2, 1).exp()),
    # a 0-dim tensor of a wider dtype does not widen the result (PyTorch's promotion ranks it lower)
    "a float32 product with a float64 0-dim tensor": ("mul", lambda q: q.float() * torch.tensor(1.5,
                                                                                             dtype=torch.float64)),
    "a float64 0-dim tensor minus a float32 one": ("sub", lambda q: torch.tensor(2.0, dtype=torch.float64) - q.float()),
}


@pytest.mark.parametrize("name", sorted(STRIDED_ELEMENTWISE))
def test_strided_elementwise_results_take_the_c_route(name):
    """An elementwise call whose PyTorch result keeps its inputs' layout runs in C after its first
    call (on its operands permuted alike, so the result is contiguous in that order): the same
    strides and values as PyTorch's, for the call that records it and the ones the C route serves."""
    row, call = STRIDED_ELEMENTWISE[name]
    q = torch.randn(2, 3, 4, 5, dtype=torch.float64).transpose(1, 2)   # [2, 4, 3, 5], not contiguous
    torch.manual_seed(0)
    want = call(q)
    assert not want.is_contiguous()   # (the case is what it claims to be)
    c0 = _aten.stats()["direct_c"]
    with ct.offload(level="aten", strict=True) as rep:
        got = []
        for _ in range(6):   # (the first calls record the signature, on the Python route)
            torch.manual_seed(0)
            got.append(call(q))
    for g in got:
        assert g.stride() == want.stride() and g.dtype == want.dtype, (g.stride(), want.stride())
        torch.testing.assert_close(g, want, rtol=1e-15, atol=0)
        assert g.data_ptr() != q.data_ptr()
    assert rep.ops[row].canna == 6, rep
    assert _aten.stats()["direct_c"] - c0 >= 2, "the repeated calls did not take the C route"


def test_in_place_ops_write_a_channels_last_tensor_on_canna():
    x = _cl(2, 3, 4, 4)
    want = x + 1.5
    with ct.offload(level="aten", strict=True) as rep:
        x.add_(1.5)
    assert x.is_contiguous(memory_format=torch.channels_last) and torch.equal(x, want)
    assert rep.ops["add_"].canna == 1


def test_layout_probe_changes_nothing():
    """A channels-last batch norm in training writes its running statistics: its layout is not
    learnt by running PyTorch's kernel (which would update them twice), so it runs on PyTorch."""
    bn = torch.nn.BatchNorm2d(3).double()
    ref = torch.nn.BatchNorm2d(3).double()
    x = _cl(4, 3, 5, 5)
    with ct.offload(level="aten"):
        y = bn(x)
    want = ref(x)
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-12, atol=1e-12)
    assert y.stride() == want.stride()


def test_lstm_runs_its_composition_at_the_aten_level():
    """torch.lstm reaches the aten level as aten::mkldnn_rnn_layer, which canna has no item for:
    the block takes aten::lstm.input at the autograd key (the registry's at_aten), so the LSTM runs
    on canna's composition with canna's gradients, and the optimizer still takes its fused step;
    outside a block the same call is PyTorch's."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 5, num_layers=2, batch_first=True).double()
    ref = torch.nn.LSTM(6, 5, num_layers=2, batch_first=True).double()
    ref.load_state_dict(lstm.state_dict())
    x = torch.randn(3, 4, 6, dtype=torch.float64)
    opt = torch.optim.AdamW(lstm.parameters())
    with ct.offload(level="aten") as rep:
        out, (h, c) = lstm(x)
        (out.sum() + h.sum() + c.sum()).backward()
        opt.step()
    r_out, (r_h, r_c) = ref(x)   # (outside a block: PyTorch's own composite, through canna's autograd kernel)
    assert type(r_out.grad_fn).__name__ == type(torch.nn.LSTM(6, 5, 2, batch_first=True).double()(x)[0].grad_fn).__name__
    assert "canna" in type(out.grad_fn).__name__, out.grad_fn
    (r_out.sum() + r_h.sum() + r_c.sum()).backward()
    for a, b in ((out, r_out), (h, r_h), (c, r_c)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert rep.ops["lstm"].canna == 1 and rep.ops["lstm"].backward == 1 and rep.ops["apply_adamw"].canna >= 1, rep
    assert not any("rnn" in k for k in rep.pytorch_calls), rep.pytorch_calls
    torch.optim.AdamW(ref.parameters()).step()
    for p, q in zip(lstm.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-10)


SDPA = {
    "no mask": {},
    "causal": {"is_causal": True},
    "a bool mask": {"attn_mask": "bool"},
    "a float mask and a scale": {"attn_mask": "float", "scale": 0.3},
    "grouped-query heads": {"enable_gqa": True, "kv_heads": 1},
}


@pytest.mark.parametrize("name", sorted(SDPA))
def test_attention_is_pytorchs_at_the_aten_level(name):
    """The aten level leaves F.scaled_dot_product_attention to PyTorch's CPU flash attention (faster
    than canna's fused kernel on the simulator: kernels/ops/attention.py): results and gradients
    (float64) are PyTorch's, its node is PyTorch's, and the report says where it ran."""
    kw = dict(SDPA[name])
    hk = kw.pop("kv_heads", 2)
    g = _g(4)
    q = torch.randn(2, 2, 5, 4, dtype=torch.float64, generator=g, requires_grad=True)
    k, v = (torch.randn(2, hk, 7 if "mask" in name else 5, 4, dtype=torch.float64, generator=g, requires_grad=True)
            for _ in range(2))
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = torch.rand(2, 1, 5, 7, generator=g) > 0.3
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.randn(5, 7, dtype=torch.float64, generator=g)

    def run():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
        grads = torch.autograd.grad((out * torch.arange(out.numel(), dtype=out.dtype).view(out.shape)).sum(), (q, k, v))
        return out, grads
    want, want_g = run()
    with ct.offload() as rep:
        got, got_g = run()
    assert type(got.grad_fn) is type(want.grad_fn), (got.grad_fn, want.grad_fn)
    assert "scaled_dot_product_attention" not in rep.ops and rep.pytorch_calls, rep
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_forward_mode_ad_works_in_a_block():
    """torch.func.jvp and forward-mode dual tensors: PyTorch redispatches some composites with
    another operator's keys (ZeroTensor's add calls aten::to.dtype_layout's redispatch), which
    would run a per-operator fallthrough kernel (an internal assert): composites pass on instead."""
    from torch.func import jvp
    import torch.autograd.forward_ad as fwAD
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 5)).double().eval()
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    t = torch.randn_like(x)
    cases = [(lambda a: a * 2, (x,), (t,)), (lambda a: a + 1, (x,), (t,)), (lambda a: a.clone().mul_(2), (x,), (t,)),
             (m, (x,), (t,))]
    for f, p, tg in cases:
        want = jvp(f, p, tg)
        with ct.offload(level="aten"):
            got = jvp(f, p, tg)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with fwAD.dual_level():
        d = fwAD.make_dual(torch.randn(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
        want = fwAD.unpack_dual(d * 3 + d.exp()).tangent
        with ct.offload(level="aten"):
            got = fwAD.unpack_dual(d * 3 + d.exp()).tangent
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_inference_mode_runs_composites_parts_on_canna():
    """Under torch.inference_mode the autograd keys are off, so composites (aten::linear) reach the
    key themselves: they pass on to their parts (aten::addmm), which run on canna."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    want = m(x)
    with torch.inference_mode(), ct.offload(level="aten", strict=True) as rep:
        y = m(x)
    torch.testing.assert_close(y, want)
    assert rep.ops["addmm"].canna == 2 and rep.coverage()["share"] == 1.0, rep


def test_aten_ops_lists_the_rows_before_any_block():
    r = run_python("from canna_dl.torch import _aten\nprint('add' in _aten.ATEN_OPS, 'lstm' in _aten.ATEN_OPS)")
    assert r.stdout.split() == ["True", "True"], r.stdout
