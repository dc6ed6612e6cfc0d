"""Adaptive average pooling (kernels/ops/adaptive_pool.py, kernels/_sim/op_adaptive_pool.c) against
PyTorch in float64: any output size (PyTorch's start / end index rule, overlapping windows),
3-D and 4-D, strided inputs, every float dtype, gradients (and double backward), bad input, and
nn.AdaptiveAvgPool2d / F.adaptive_avg_pool2d under offload()."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernels  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
from conftest import assert_usable  # noqa: E402

F = torch.nn.functional
D = torch.float64


@pytest.mark.parametrize("shape", [(2, 3, 7, 5), (3, 8, 8), (1, 2, 1, 9)])
@pytest.mark.parametrize("size", [(1, 1), 1, (3, 2), (4, 7), (8, 8), (0, 3)])
def test_forward_matches_pytorch(shape, size):
    x = torch.randn(shape, dtype=D)
    torch.testing.assert_close(kernels.adaptive_avg_pool2d(x, size), F.adaptive_avg_pool2d(x, size),
                               rtol=1e-13, atol=1e-13)


def test_strided_input_and_out():
    x = torch.randn(5, 6, 3, 2, dtype=D).permute(3, 2, 1, 0)     # [2, 3, 6, 5], non-contiguous
    ref = F.adaptive_avg_pool2d(x, (4, 3))
    torch.testing.assert_close(kernels.adaptive_avg_pool2d(x, [4, 3]), ref, rtol=1e-13, atol=1e-13)
    o = torch.empty(3, 4, 3, 2, dtype=D).permute(3, 2, 1, 0)
    kernels.adaptive_avg_pool2d(x, (4, 3), out=o)
    torch.testing.assert_close(o, ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)])
def test_low_precision(dtype, tol):
    x = torch.randn(2, 3, 9, 7).to(dtype)
    y = kernels.adaptive_avg_pool2d(x, (2, 3))
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), F.adaptive_avg_pool2d(x.double(), (2, 3)), rtol=tol, atol=tol)


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (5, 4)])
def test_gradcheck_and_backward_kernel(size):
    x = torch.randn(2, 2, 5, 4, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ct.adaptive_avg_pool2d(t, size), (x,))
    assert torch.autograd.gradgradcheck(lambda t: ct.adaptive_avg_pool2d(t, size), (x,))
    g = torch.randn(2, 2, *size, dtype=D)
    ref = torch.ops.aten._adaptive_avg_pool2d_backward(g, x.detach())
    torch.testing.assert_close(kernels.backward.adaptive_avg_pool2d(g, x.detach()), ref, rtol=1e-13, atol=1e-13)


def test_bad_input_is_refused_clearly():
    x = torch.randn(2, 3, 4, 4, dtype=D)
    with pytest.raises(ValueError, match="3-D"):
        kernels.adaptive_avg_pool2d(torch.randn(4, 4), 1)
    with pytest.raises(ValueError, match="1 or 2 values"):
        kernels.adaptive_avg_pool2d(x, (1, 2, 3))
    with pytest.raises(ValueError, match=">= 0"):
        kernels.adaptive_avg_pool2d(x, (-1, 2))
    with pytest.raises(ValueError, match="empty non-batch dim"):
        kernels.adaptive_avg_pool2d(torch.randn(2, 3, 0, 4), 1)
    with pytest.raises(TypeError, match="output_size must be an int or a list/tuple of ints"):
        kernels.adaptive_avg_pool2d(x, (None, 2))
    with pytest.raises(TypeError, match="dtype"):
        kernels.adaptive_avg_pool2d(x.long(), 1)
    with pytest.raises(ValueError, match="does not match"):
        kernels.backward.adaptive_avg_pool2d(torch.randn(3, 3, 1, 1, dtype=D), x)
    assert_usable()
    torch.testing.assert_close(kernels.adaptive_avg_pool2d(x, 1), x.mean((2, 3), keepdim=True))


@pytest.mark.usefixtures("function_level")
def test_under_offload():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d((2, 3)))
    x = torch.randn(2, 3, 9, 8)
    ref = m(x)
    ref.sum().backward()
    g0 = m[0].weight.grad.clone()
    m.zero_grad()
    with ct.offload() as rep:
        y = m(x)
        y.sum().backward()
        F.adaptive_avg_pool2d(x, (None, 2))          # a None size: left to PyTorch
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(m[0].weight.grad, g0)
    st = rep.ops["adaptive_avg_pool2d"]
    assert (st.canna, st.backward, st.fallback) == (1, 1, 1)


def test_tf_and_jax_forms():
    tf = pytest.importorskip("tensorflow")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    import canna_dl.jax as cj
    import canna_dl.tf as ctf
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 4))
    theo, num = tf.test.compute_gradient(lambda t: ctf.adaptive_avg_pool2d(t, (2, 3)), [tf.constant(x)])
    np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-8)
    y = tf.function(lambda t: ctf.adaptive_avg_pool2d(t, 1))(tf.constant(x))
    np.testing.assert_allclose(y.numpy(), x.mean((2, 3), keepdims=True))
    g = jax.jit(jax.grad(lambda t: jnp.sum(cj.adaptive_avg_pool2d(t, (1, 1)))))(jnp.asarray(x.astype(np.float32)))
    np.testing.assert_allclose(np.asarray(g), np.full(x.shape, 1 / 20), rtol=1e-6)
