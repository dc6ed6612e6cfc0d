"""Constant padding (kernels/ops/concat_pad.py, kernels/_sim/op_concat_pad.c): F.pad's constant mode
against PyTorch in float64 (pads on any number of dims, negative pads crop, a fill value, strided
inputs, int and low-precision dtypes), gradients, bad input, and F.pad under offload()."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernels  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
from conftest import assert_usable  # noqa: E402

F = torch.nn.functional
D = torch.float64

PADS = [(1, 2), (0, 0), (2, 1, 0, 3), (-1, 2), (1, -2, -1, 1), (1, 1, 1, 1, 1, 1), (-3, 0), (3, -4, 0, 0, 2, -1)]


@pytest.mark.parametrize("pad", PADS)
def test_forward_matches_pytorch(pad):
    x = torch.randn(2, 3, 4, 5, dtype=D)
    for value in (None, 0.0, -2.5):
        kw = {} if value is None else {"value": value}
        torch.testing.assert_close(kernels.pad(x, pad, **kw), F.pad(x, pad, **kw), rtol=0, atol=0)


def test_strided_int_and_low_precision():
    x = torch.randn(5, 4, 3, dtype=D).transpose(0, 2)
    torch.testing.assert_close(kernels.pad(x, (1, 2, -1, 1)), F.pad(x, (1, 2, -1, 1)), rtol=0, atol=0)
    i = torch.arange(24).reshape(2, 3, 4)
    torch.testing.assert_close(kernels.pad(i, (1, 1, 2, 0), value=7), F.pad(i, (1, 1, 2, 0), value=7))
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        y = torch.randn(3, 4).to(dt)
        torch.testing.assert_close(kernels.pad(y, (2, -1), value=1.0), F.pad(y, (2, -1), value=1.0), rtol=0, atol=0)
    z = torch.tensor(3.0, dtype=D)      # 0-d: no pairs
    torch.testing.assert_close(kernels.pad(z, ()), z)


@pytest.mark.parametrize("pad", PADS[:6])
def test_gradcheck(pad):
    x = torch.randn(2, 3, 4, 5, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ct.pad(t, pad, value=0.5), (x,))
    assert torch.autograd.gradgradcheck(lambda t: ct.pad(t, pad), (x,))


def test_bad_input_is_refused_clearly():
    x = torch.randn(2, 3, dtype=D)
    with pytest.raises(ValueError, match="even number"):
        kernels.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="only 2 dims"):
        kernels.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="negative size"):
        kernels.pad(x, (-2, -2))
    with pytest.raises(ValueError, match="mode must be one of 'constant'"):
        kernels.pad(x, (1, 1), "reflect")
    with pytest.raises(TypeError, match="pad must be an int or a list/tuple of ints"):
        kernels.pad(x, (1.5, 1))
    with pytest.raises(TypeError, match="value must be a float or None"):
        kernels.pad(x, (1, 1), value="0")
    assert_usable()
    torch.testing.assert_close(kernels.pad(x, (1, 1)), F.pad(x, (1, 1)))


def test_under_offload():
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    with ct.offload() as rep:
        y = F.pad(x, (1, 1, 2, 0), value=1.0)
        y.sum().backward()
        F.pad(x, (1, 1, 1, 1), mode="reflect")      # another mode: PyTorch
    torch.testing.assert_close(y, F.pad(x.detach(), (1, 1, 2, 0), value=1.0))
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    st = rep.ops["pad"]
    assert (st.canna, st.backward, st.fallback) == (1, 1, 1)
