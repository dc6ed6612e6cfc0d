"""Batch normalization (kernels/ops/batchnorm.py, kernels/_sim/op_batchnorm.c): aclnnBatchNorm,
aclnnBatchNormBackward and aclnnBatchNormStats against PyTorch in float64 (training and eval, the
running statistics, strided inputs, every float dtype), gradients, bad input, and nn.BatchNorm*
under offload() for ten training steps (running statistics and num_batches_tracked as plain PyTorch)."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import kernels  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
from conftest import assert_usable  # noqa: E402

F = torch.nn.functional
nn = torch.nn
D = torch.float64


def _data(shape, seed=0, dtype=D):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = torch.randn(shape, generator=g, dtype=D) * 2 + 0.5
    w, b = torch.randn(c, generator=g, dtype=D), torch.randn(c, generator=g, dtype=D)
    rm, rv = torch.randn(c, generator=g, dtype=D), torch.rand(c, generator=g, dtype=D) + 0.5
    return [t.to(dtype) for t in (x, w, b, rm, rv)]


@pytest.mark.parametrize("shape", [(4, 3), (5, 3, 7), (4, 3, 5, 6), (2, 4, 3, 2, 3)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_forward_and_running_stats_match_pytorch(shape, training, affine):
    x, w, b, rm, rv = _data(shape)
    if not affine:
        w = b = None
    rm2, rv2 = rm.clone(), rv.clone()
    out, sm, si = kernels.native_batch_norm(x, rm, rv, w, b, training, 0.3, 1e-4)
    ref, rsm, rsi = torch.native_batch_norm(x, w, b, rm2, rv2, training, 0.3, 1e-4)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rm, rm2, rtol=1e-14, atol=1e-14)    # momentum, unbiased variance
    torch.testing.assert_close(rv, rv2, rtol=1e-14, atol=1e-14)
    if training:
        torch.testing.assert_close(sm, rsm, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(si, rsi, rtol=1e-12, atol=1e-12)
    else:   # eval: the statistics it normalized with (PyTorch returns empty ones)
        torch.testing.assert_close(sm, rm)
        torch.testing.assert_close(si, 1 / torch.sqrt(rv + 1e-4))


def test_training_without_running_stats_and_strided_input():
    x, w, b, _, _ = _data((6, 4, 5, 3))
    xs = x.permute(3, 1, 2, 0)            # [3, 4, 5, 6], channel dim strided
    out = kernels.native_batch_norm(xs, None, None, w, b, True)[0]
    torch.testing.assert_close(out, F.batch_norm(xs, None, None, w, b, True), rtol=1e-12, atol=1e-12)
    o = torch.empty(6, 5, 4, 3, dtype=D).permute(3, 2, 1, 0)   # a strided out
    kernels.native_batch_norm(xs, None, None, w, b, True, out=o)
    torch.testing.assert_close(o, out)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_low_precision_dtypes(dtype, tol):
    x, w, b, rm, rv = _data((8, 3, 4, 4), dtype=dtype)
    rm2, rv2 = rm.clone(), rv.clone()
    out = kernels.native_batch_norm(x, rm, rv, w, b, True)[0]
    ref = F.batch_norm(x.double(), rm2.double(), rv2.double(), w.double(), b.double(), True)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol * 4)


def test_stats_op():
    x = _data((5, 3, 4))[0]
    mean, invstd = kernels.batch_norm_stats(x, 1e-5)
    ref_m = x.mean((0, 2))
    ref_i = 1 / torch.sqrt(x.var((0, 2), unbiased=False) + 1e-5)
    torch.testing.assert_close(mean, ref_m)
    torch.testing.assert_close(invstd, ref_i)


@pytest.mark.parametrize("training", [True, False])
def test_gradcheck(training):
    x, w, b, rm, rv = (t.requires_grad_(i < 3) for i, t in enumerate(_data((3, 2, 3, 2))))

    def f(x, w, b):
        return ct.native_batch_norm(x, None if training else rm, None if training else rv, w, b, training, 0.1,
                                    1e-3)[0]
    assert torch.autograd.gradcheck(f, (x, w, b))
    assert torch.autograd.gradcheck(lambda x: ct.native_batch_norm(x, None, None, None, None, True)[0], (x,))


def test_backward_kernel_matches_pytorch():
    x, w, b, rm, rv = _data((4, 3, 5))
    g = torch.randn_like(x)
    for training in (True, False):
        _, sm, si = kernels.native_batch_norm(x, rm.clone(), rv.clone(), w, b, training)
        gx, gw, gb = kernels.backward.batch_norm(g, x, sm, si, w, training, 1e-5)
        rsm, rsi = (sm, si) if training else (None, None)
        ref = torch.ops.aten.native_batch_norm_backward(g, x, w, rm, rv, rsm, rsi, training, 1e-5, [True] * 3)
        for a, r in zip((gx, gw, gb), ref):
            torch.testing.assert_close(a, r, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("shape", [(3, 4, 5, 7), (2, 3, 200, 200)])
def test_float32_rows_in_place_and_channels_past_the_buffer(dtype, layout, shape):
    """The kernel's paths: float32 rows of unit stride read in place, other dtypes and strides through
    double buffers, a channel converted once (up to 65536 values) or block by block (the second
    shape: 80000 values per channel) — forward (training and eval) and backward against PyTorch's
    float64 formulas."""
    x, w, b, rm, rv = _data(shape)
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=D)
    if layout == "channels_last":
        x, g = (t.to(memory_format=torch.channels_last) for t in (x, g))
    elif layout == "sliced":
        x, g = (torch.cat([t, t], dim=3)[..., ::2] for t in (x, g))   # inner stride 2
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    xc, gc, wc, bc = (t.to(dtype) for t in (x, g, w, b))
    for training in (True, False):
        rmc, rvc = rm.to(dtype).clone(), rv.to(dtype).clone()
        out, sm, si = kernels.native_batch_norm(xc, rmc, rvc, wc, bc, training)
        ref, rsm, rsi = torch.ops.aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5)
        torch.testing.assert_close(out.double(), ref, **tol)
        if training:
            torch.testing.assert_close(sm.double(), rsm, **tol)
            torch.testing.assert_close(si.double(), rsi, **tol)
        gx, gw, gb = kernels.backward.batch_norm(gc, xc, sm, si, wc, training, 1e-5)
        bsm, bsi = (rsm, rsi) if training else (None, None)
        refs = torch.ops.aten.native_batch_norm_backward(g, x, w, rm, rv, bsm, bsi, training, 1e-5, [True] * 3)
        for a, r in zip((gx, gw, gb), refs):
            torch.testing.assert_close(a.double(), r, rtol=tol["rtol"], atol=tol["atol"] * max(1.0, r.abs().max().item()))


def test_bad_input_is_refused_clearly():
    x, w, b, rm, rv = _data((4, 3, 5))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        kernels.native_batch_norm(x[:1, :, :1], None, None, None, None, True)
    with pytest.raises(ValueError, match=r"weight has shape \(4,\), expected \(3,\)"):
        kernels.native_batch_norm(x, None, None, torch.ones(4, dtype=D), None, True)
    with pytest.raises(ValueError, match="required in evaluation mode"):
        kernels.native_batch_norm(x, None, None, w, b, False)
    with pytest.raises(ValueError, match="given together"):
        kernels.native_batch_norm(x, rm, None, w, b, True)
    with pytest.raises(ValueError, match="2 to 8 dims"):
        kernels.native_batch_norm(torch.ones(3, dtype=D), None, None, None, None, True)
    with pytest.raises(TypeError, match="dtype"):
        kernels.native_batch_norm(x.long(), None, None, None, None, True)
    with pytest.raises(TypeError, match="training must be a bool"):
        kernels.native_batch_norm(x, rm, rv, w, b, "yes")
    rm0 = rm.clone()
    with pytest.raises(ValueError):
        kernels.native_batch_norm(x, rm, rv, torch.ones(4, dtype=D), b, True)
    torch.testing.assert_close(rm, rm0)   # a refused call updates nothing
    assert_usable()
    torch.testing.assert_close(kernels.native_batch_norm(x, rm, rv, w, b, False)[0],
                               F.batch_norm(x, rm0, rv, w, b, False))


class _Net(nn.Module):
    """conv → BatchNorm2d → relu → adaptive avg pool → BatchNorm1d → linear."""

    def __init__(self, momentum):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, momentum=momentum)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.bn1 = nn.BatchNorm1d(8, momentum=momentum)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.bn1(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1)))


def _train(m, x, y, offload):
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    losses, reps = [], []
    for _ in range(10):
        opt.zero_grad()
        if offload:
            with ct.offload() as rep:
                loss = F.cross_entropy(m(x), y)
                loss.backward()
            reps.append(rep)
        else:
            loss = F.cross_entropy(m(x), y)
            loss.backward()
        opt.step()
        losses.append(loss.item())
    m.eval()
    with torch.no_grad():
        if offload:
            with ct.offload() as rep:
                e = m(x)
            reps.append(rep)
        else:
            e = m(x)
    return losses, e, reps


@pytest.mark.parametrize("momentum", [0.1, None])    # None: the cumulative average over num_batches_tracked
@pytest.mark.usefixtures("function_level")
def test_ten_training_steps_under_offload_match_pytorch(momentum):
    torch.manual_seed(0)
    m0 = _Net(momentum).double()
    m1 = copy.deepcopy(m0)
    x, y = torch.randn(6, 3, 9, 9, dtype=D), torch.randint(0, 5, (6,))
    l0, e0, _ = _train(m0, x, y, False)
    l1, e1, reps = _train(m1, x, y, True)
    torch.testing.assert_close(torch.tensor(l1), torch.tensor(l0), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(e1, e0, rtol=1e-10, atol=1e-12)
    for b0, b1 in ((m0.bn, m1.bn), (m0.bn1, m1.bn1)):
        assert b1.num_batches_tracked.item() == b0.num_batches_tracked.item() == 10
        torch.testing.assert_close(b1.running_mean, b0.running_mean, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(b1.running_var, b0.running_var, rtol=1e-12, atol=1e-13)
    for rep in reps:   # every batch norm call ran on canna, training (with its backward) and eval
        st = rep.ops["native_batch_norm"]
        assert (st.canna, st.fallback) == (2, 0)
    assert reps[0].ops["native_batch_norm"].backward == 2
    assert reps[0].ops["adaptive_avg_pool2d"].canna == 1


@pytest.mark.usefixtures("function_level")
def test_offload_falls_back_for_what_canna_refuses():
    x = torch.randn(1, 3, 1, 1)
    bn = nn.BatchNorm2d(3)
    with ct.offload() as rep:
        with pytest.raises(ValueError, match="Expected more than 1 value per channel"):   # PyTorch's own error
            bn(x)
    assert rep.ops["native_batch_norm"].fallback == 1


def test_torch_batch_norm_and_native_batch_norm_are_mapped():
    x, w, b, rm, rv = _data((4, 3, 5))
    r = [rm.clone(), rv.clone(), rm.clone(), rv.clone()]
    with ct.offload() as rep:
        a = torch.batch_norm(x, w, b, r[0], r[1], True, 0.2, 1e-5, True)
        o, sm, si = torch.native_batch_norm(x, w, b, r[2], r[3], True, 0.2, 1e-5)
    ref = F.batch_norm(x, rm, rv, w, b, True, 0.2, 1e-5)
    torch.testing.assert_close(a, ref)
    torch.testing.assert_close(o, ref)
    for t in r[:2], r[2:]:
        torch.testing.assert_close(t[0], rm)
        torch.testing.assert_close(t[1], rv)
    assert rep.ops["native_batch_norm"].canna == 2


def test_tf_and_jax_forms_update_the_running_stats():
    tf = pytest.importorskip("tensorflow")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    import canna_dl.jax as cj
    import canna_dl.tf as ctf
    x, w, b, rm, rv = _data((4, 3, 5))
    rm2, rv2 = rm.clone(), rv.clone()
    ref = F.batch_norm(x, rm2, rv2, w, b, True, 0.1, 1e-5)
    vm, vv = tf.Variable(rm.numpy()), tf.Variable(rv.numpy())     # TF: updated through tf.Variables
    y = ctf.native_batch_norm(tf.constant(x.numpy()), vm, vv, tf.constant(w.numpy()), tf.constant(b.numpy()), True)
    np.testing.assert_allclose(y[0].numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vv.numpy(), rv2.numpy(), rtol=1e-14)
    with jax.enable_x64(True):   # JAX: the new running statistics come back after the outputs
        out, _, _, nm, nv = cj.native_batch_norm(*(jnp.asarray(t.numpy()) for t in (x, rm, rv, w, b)), True)
        np.testing.assert_allclose(np.asarray(out), ref.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(nm), rm2.numpy(), rtol=1e-14)
        np.testing.assert_allclose(np.asarray(nv), rv2.numpy(), rtol=1e-14)
        xt = torch.tensor(x.numpy(), requires_grad=True)
        (F.batch_norm(xt, None, None, w, b, True) ** 3).sum().backward()
        g = jax.grad(lambda t: jnp.sum(cj.native_batch_norm(t, None, None, jnp.asarray(w.numpy()),
                                                            jnp.asarray(b.numpy()), True)[0] ** 3))(jnp.asarray(x.numpy()))
        np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-10, atol=1e-10)
