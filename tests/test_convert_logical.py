"""Issue 14's conversion and logical ops against PyTorch on random data (float64 where the op
computes): ``clone`` (``Tensor.contiguous`` of a non-contiguous tensor), ``cast``
(``Tensor.to(dtype)``, ``.float()``, ...), ``all`` / ``any``, the comparisons, the sum of a bool
array; their gradients under autograd; bad input raising clear errors; offload() mapping the torch
functions and leaving the calls that return their input uncounted."""
from __future__ import annotations

import numpy as np
import pytest

import kernels

torch = pytest.importorskip("torch")
import canna_dl.torch as ct  # noqa: E402


def _rand(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _ties(*shape, seed=0):
    """Values on a coarse grid (many exact ties for the comparisons), a NaN and infinities."""
    x = torch.round(_rand(*shape, seed=seed) * 2) / 2
    x.view(-1)[0], x.view(-1)[1], x.view(-1)[2] = float("nan"), float("inf"), -float("inf")
    return x


def test_clone_of_non_contiguous_views():
    x = _rand(4, 6, 5)
    for v in (x.transpose(0, 2), x[:, ::2], x[..., 1:4], x[:, :1].expand(4, 3, 5), x.permute(2, 0, 1)[1:]):
        y = kernels.clone(v)
        assert y.is_contiguous() and y.dtype == torch.float64
        torch.testing.assert_close(y, v.contiguous(), rtol=0, atol=0)
        assert y.data_ptr() != v.data_ptr()


@pytest.mark.parametrize("src, dst", [(torch.float64, torch.float32), (torch.float32, torch.float64),
                                      (torch.float64, torch.int64), (torch.float64, torch.bool),
                                      (torch.int64, torch.float64), (torch.float64, torch.float16),
                                      (torch.bool, torch.float32)])
def test_cast_matches_torch(src, dst):
    x = (_rand(7, 9) * 50)
    if src == torch.bool:
        x = x > 0
    x = x.to(src)
    torch.testing.assert_close(kernels.get_op("cast")(x, dst), x.to(dst), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["all", "any"])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_all_any_match_torch(name, dim, keepdim):
    x = _ties(3, 4, 5)
    x[x.abs() < 0.6] = 0.0   # zeros, so that both answers occur
    for a in (x, x != 0, x.to(torch.int64), x.transpose(0, 2).contiguous()):
        want = getattr(torch, name)(a) if dim is None else getattr(torch, name)(a, dim=dim, keepdim=keepdim)
        got = getattr(kernels, name)(a, dim=dim, keepdim=keepdim)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert kernels.all(torch.ones(2, 0)).item() is True and kernels.any(torch.ones(2, 0)).item() is False


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_match_torch(name):
    x, y = _ties(4, 5, seed=1), _ties(5, seed=2)
    f, t = getattr(kernels, name), getattr(torch, name)
    torch.testing.assert_close(f(x, y), t(x, y), rtol=0, atol=0)            # broadcast, NaN, inf, ties
    torch.testing.assert_close(f(x, 0.5), t(x, 0.5), rtol=0, atol=0)        # a number
    i = torch.arange(-3, 4)
    torch.testing.assert_close(f(i, 1), t(i, 1), rtol=0, atol=0)
    torch.testing.assert_close(f(i, 0.5), t(i, 0.5), rtol=0, atol=0)        # int array, float number
    torch.testing.assert_close(f(i > 0, i < 2), t(i > 0, i < 2), rtol=0, atol=0)   # bool arrays
    torch.testing.assert_close(f(x.t(), x.t()[:, :1]), t(x.t(), x.t()[:, :1]), rtol=0, atol=0)  # strided


def test_sum_of_a_bool_array_counts():
    m = _rand(6, 7) > 0
    torch.testing.assert_close(kernels.sum(m), m.sum(), rtol=0, atol=0)
    torch.testing.assert_close(kernels.sum(m, dim=1), m.sum(dim=1), rtol=0, atol=0)


@pytest.mark.usefixtures("function_level")
def test_gradients_of_clone_and_cast():
    x = _rand(3, 4).t().requires_grad_()
    assert torch.autograd.gradcheck(lambda a: kernels.get_op("clone").torch_fn(a) * a, (x,))
    w = _rand(4, 3, seed=3)
    with ct.offload() as rep:
        y = x.float().contiguous()
        loss = (y.double() * w).sum()
    loss.backward()
    torch.testing.assert_close(x.grad, w.float().double(), rtol=0, atol=0)   # through float32 and back
    assert rep.ops["cast"].canna == 2 and rep.ops["cast"].backward == 2


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="dtype"):
        kernels.eq(torch.zeros(2, dtype=torch.complex64), 0)
    with pytest.raises(ValueError):
        kernels.lt(torch.zeros(2, 3), torch.zeros(4))
    with pytest.raises(Exception, match="out of range|dim"):
        kernels.all(torch.zeros(2, 3), dim=2)
    with pytest.raises(TypeError, match="dtype"):
        kernels.get_op("cast")(torch.zeros(2), "not-a-dtype")


@pytest.mark.usefixtures("function_level")
def test_offload_maps_conversions_and_leaves_no_ops_uncounted():
    x = _rand(4, 3)
    with ct.offload() as rep:
        x.contiguous()                     # contiguous already: returns x, not an op call
        x.t().contiguous()                 # a copy: clone
        x.to(torch.float64)                # its own dtype: returns x
        x.to(torch.float32)
        x.half()
        x.to(dtype=torch.bool, device="cpu")
        torch.all(x > 0)
        (x == 0).any(dim=1)
        x.to(torch.float32, non_blocking=True)   # not taken: PyTorch's
    assert rep.ops["clone"].canna == 1
    assert rep.ops["cast"].canna == 3 and rep.ops["cast"].fallback == 1
    assert rep.ops["all"].canna == 1 and rep.ops["any"].canna == 1
    assert rep.ops["gt"].canna == 1 and rep.ops["eq"].canna == 1
    assert "torch.Tensor.contiguous" not in rep.pytorch_calls and "torch.Tensor.to" not in rep.pytorch_calls


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.usefixtures("function_level")
def test_maximum_minimum_and_their_gradients(name):
    x, y = _ties(4, 5, seed=3), _ties(5, seed=4)
    torch.testing.assert_close(getattr(kernels, name)(x, y), getattr(torch, name)(x, y), rtol=0, atol=0,
                               equal_nan=True)
    i, j = torch.arange(-3, 4), torch.tensor(1)
    torch.testing.assert_close(getattr(kernels, name)(i, j), getattr(torch, name)(i, j), rtol=0, atol=0)
    a = (torch.round(_rand(3, 4, seed=5) * 2) / 2).requires_grad_()   # ties: the gradient splits
    b = (torch.round(_rand(4, seed=6) * 2) / 2).requires_grad_()
    w = _rand(3, 4, seed=7)
    want = torch.autograd.grad((getattr(torch, name)(a, b) * w).sum(), [a, b])
    red = {"maximum": torch.max, "minimum": torch.min}[name]
    with ct.offload() as rep:
        got = torch.autograd.grad((red(a, b) * w).sum(), [a, b])
    assert rep.ops[name].canna == 1 and rep.ops[name].backward == 1
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    with ct.offload() as rep:
        red(a)                     # a reduction: PyTorch's
        red(a, 1)
    assert name not in rep.ops or rep.ops[name].canna == 0


@pytest.mark.usefixtures("function_level")
def test_where_matches_torch_and_its_gradient():
    c = _rand(4, 1, 5, seed=8) > 0
    x, y = _rand(3, 5, seed=9).requires_grad_(), _rand(5, seed=10).requires_grad_()
    torch.testing.assert_close(kernels.where(c, x.detach(), y.detach()), torch.where(c, x, y), rtol=0, atol=0)
    for a, b in ((x.detach(), 0.5), (2, y.detach()), (torch.arange(5), 7), (torch.arange(5), 0.5)):
        torch.testing.assert_close(kernels.where(c, a, b), torch.where(c, a, b), rtol=0, atol=0)
    w = _rand(4, 3, 5, seed=11)
    want = torch.autograd.grad((torch.where(c, x, y) * w).sum(), [x, y])
    with ct.offload() as rep:
        got = torch.autograd.grad((torch.where(c, x, y) * w).sum(), [x, y])
    assert rep.ops["where"].canna == 1 and rep.ops["where"].backward == 1
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="condition"):
        kernels.where(c.double(), x.detach(), y.detach())
    with pytest.raises(TypeError, match="Python numbers"):
        kernels.where(c, 1.0, 2.0)


@pytest.mark.usefixtures("function_level")
def test_cumsum_matches_torch_and_its_gradient():
    x = _rand(3, 4, 5, seed=12)
    for d in (0, 1, -1):
        torch.testing.assert_close(kernels.cumsum(x, d), torch.cumsum(x, d), rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(kernels.cumsum(x.transpose(0, 2), d), torch.cumsum(x.transpose(0, 2), d),
                                   rtol=1e-13, atol=1e-13)
    m = _rand(4, 6, seed=13) > 0
    for a in (m, m.to(torch.int32)):
        torch.testing.assert_close(kernels.cumsum(a, 1), torch.cumsum(a, 1), rtol=0, atol=0)   # int64, as torch
    torch.testing.assert_close(kernels.cumsum(x, 1, dtype=torch.float32), torch.cumsum(x, 1, dtype=torch.float32))
    v = x[0, 0]
    torch.testing.assert_close(kernels.cumsum_v2(v, 0, False, True), v.flip(0).cumsum(0).flip(0), rtol=1e-13,
                               atol=1e-13)
    torch.testing.assert_close(kernels.cumsum_v2(v, 0, True, False), torch.cat([v.new_zeros(1), v.cumsum(0)[:-1]]),
                               rtol=1e-13, atol=1e-13)
    a = x.clone().requires_grad_()
    w = _rand(3, 4, 5, seed=14)
    want = torch.autograd.grad((torch.cumsum(a, 1) * w).sum(), a)[0]
    with ct.offload() as rep:
        got = torch.autograd.grad((a.cumsum(dim=1) * w).sum(), a)[0]
    assert rep.ops["cumsum"].canna == 1 and rep.ops["cumsum"].backward == 1
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(Exception, match="dim|range"):
        kernels.cumsum(x, 3)
