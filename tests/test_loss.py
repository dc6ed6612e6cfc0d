"""The MSE loss (issue 14; kernels/ops/loss.py, simulator kernels in kernels/_sim/op_loss.c):
aclnnMseLoss / aclnnMseLossBackward for the three reductions — values against PyTorch in float64
for every dtype, strided and broadcast operands, gradients in every framework (gradcheck,
torch.compile, GradientTape, jax.grad), bad inputs, and offload() running F.mse_loss / nn.MSELoss."""
from __future__ import annotations

import numpy as np
import pytest

import kernels

torch = pytest.importorskip("torch")
F = torch.nn.functional
REDUCTIONS = ("none", "mean", "sum")
TOL = {torch.float32: 2e-6, torch.float64: 1e-14, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _pair(shape=(6, 33), tshape=None, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, dtype=dtype, generator=g),
            torch.randn(tshape or shape, dtype=dtype, generator=g))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_values_match_pytorch_float64(reduction, dtype):
    a, b = _pair()
    for x, y in ((a, b), (a.t(), b.t()), (a[:, ::2], b[:, ::2]), (a, b[:1]), (a, b[0])):   # strided, broadcast
        got = kernels.mse_loss(x.to(dtype), y.to(dtype), reduction)
        want = ((x.to(dtype).double() - y.to(dtype).double()) ** 2)
        want = want if reduction == "none" else getattr(want, reduction)()
        assert got.dtype == dtype and got.shape == want.shape
        err = (got.double() - want).abs().max() / want.abs().max()
        assert err <= TOL[dtype], (reduction, dtype, float(err))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_backward_kernel_matches_pytorch_autograd(reduction):
    a, b = _pair(seed=1)
    ar = a.clone().requires_grad_()
    loss = F.mse_loss(ar, b, reduction=reduction)
    g = torch.randn_like(loss)
    loss.backward(g)
    torch.testing.assert_close(kernels.backward.mse_loss(g, a, b, reduction), ar.grad, rtol=1e-14, atol=1e-15)


def test_empty_input_mean_is_nan_sum_is_zero():
    e = torch.empty(0, 3, dtype=torch.float64)
    assert torch.isnan(kernels.mse_loss(e, e, "mean")) and kernels.mse_loss(e, e, "sum") == 0
    assert torch.isnan(F.mse_loss(e, e))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_torch_gradcheck(reduction):
    import canna_dl.torch as ct
    a, b = (t[:3, :4].clone().requires_grad_() for t in _pair(seed=2))
    assert torch.autograd.gradcheck(lambda x, y: ct.mse_loss(x, y, reduction), (a, b))
    bb = b.detach()[:1].clone().requires_grad_()   # a broadcast target: its gradient is summed
    assert torch.autograd.gradcheck(lambda x, y: ct.mse_loss(x, y, reduction), (a, bb))


def test_torch_compile_fullgraph():
    import canna_dl.torch as ct
    a, b = (t.float().requires_grad_() for t in _pair(seed=3))
    ra, rb = (t.detach().clone().requires_grad_() for t in (a, b))
    torch.compiler.reset()
    f = torch.compile(lambda x, y: ct.mse_loss(x, y, "sum") + ct.mse_loss(x, y), fullgraph=True)
    y = f(a, b)
    y.backward()
    y0 = F.mse_loss(ra, rb, reduction="sum") + F.mse_loss(ra, rb)
    y0.backward()
    torch.testing.assert_close(y, y0)
    torch.testing.assert_close(a.grad, ra.grad)
    torch.testing.assert_close(b.grad, rb.grad)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_tensorflow_gradient(reduction):
    tf = pytest.importorskip("tensorflow")
    import canna_dl.tf as ctf
    a, b = (tf.constant(t[:3, :4].numpy()) for t in _pair(seed=4))
    theo, num = tf.test.compute_gradient(lambda x, y: ctf.mse_loss(x, y, reduction), [a, b])
    for t, n in zip(theo, num):
        np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-6)
    y = tf.function(lambda x, y: ctf.mse_loss(x, y, reduction))(a, b)
    assert y.shape.as_list() == ([3, 4] if reduction == "none" else [])


def test_jax_grad_and_jit():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cj
    a, b = (jnp.asarray(t.float().numpy()) for t in _pair(seed=5))
    f = lambda x, y: cj.mse_loss(x, y, "mean")  # noqa: E731
    ref = jax.grad(lambda x, y: jnp.mean((x - y) ** 2), argnums=(0, 1))(a, b)
    for g in (jax.grad(f, argnums=(0, 1))(a, b), jax.jit(jax.grad(f, argnums=(0, 1)))(a, b)):
        for u, v in zip(g, ref):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-7)


def test_bad_inputs_raise_and_leave_canna_usable():
    a, b = _pair()
    with pytest.raises(ValueError, match="reduction"):
        kernels.mse_loss(a, b, "max")
    with pytest.raises(ValueError, match="broadcast"):
        kernels.mse_loss(a, b[:, :5])
    with pytest.raises(TypeError, match="one dtype"):
        kernels.mse_loss(a, b.float())
    with pytest.raises(TypeError, match="int64"):
        kernels.mse_loss(a.long(), b.long())
    with pytest.raises(TypeError, match="must be an array"):
        kernels.mse_loss(a, None)
    torch.testing.assert_close(kernels.mse_loss(a, b), F.mse_loss(a, b))


@pytest.mark.usefixtures("function_level")
def test_offload_runs_mse_loss_on_canna():
    import canna_dl.torch as ct
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 3).double()
    x, y = torch.randn(16, 8, dtype=torch.float64), torch.randn(16, 3, dtype=torch.float64)
    want = F.mse_loss(m(x), y) + torch.nn.MSELoss(reduction="sum")(m(x), y)
    want.backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with ct.offload(strict=True) as rep:
        got = F.mse_loss(m(x), y) + torch.nn.MSELoss(reduction="sum")(m(x), y)
        got.backward()
    torch.testing.assert_close(got, want)
    for p, g in zip(m.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    assert rep.ops["mse_loss"].canna == 2 and rep.ops["mse_loss"].backward == 2
    assert not any("mse_loss" in n for n in rep.pytorch_calls)
    with ct.offload() as rep:
        F.mse_loss(x[:, :3], y, weight=torch.ones(16, 3, dtype=torch.float64))   # weight=: PyTorch's
    assert rep.ops["mse_loss"].fallback == 1
