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


@pytest.mark.usefixtures("function_level")
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


# ---------------------------------------------------------------------------------------------
# aclnnCat at the C level (an aclTensorList; the registry entry comes with TensorList support)

np = pytest.importorskip("numpy")
from aclnn_util import ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, DevTensor, OpError, run  # noqa: E402
from acl_rt._lib import ffi  # noqa: E402


def _cat(arrays, dim, out_dtype, strided=False):
    ts = [DevTensor.strided(a) if strided else DevTensor.from_numpy(a) for a in arrays]
    want = np.concatenate([a for a in arrays if not (a.ndim == 1 and a.size == 0 and arrays[0].ndim != 1)],
                          axis=dim).astype(out_dtype)
    out = DevTensor(want.shape, out_dtype)
    lib = __import__("aclnn_util").nn()
    hs = ffi.new("aclTensor *[]", [t.handle for t in ts])
    tl = lib.aclCreateTensorList(hs, len(ts))   # kept for the test's lifetime (destroying it destroys its tensors)
    run("Cat", tl, dim, out.handle)
    return out.numpy(), want, (ts, tl)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("strided", [False, True])
def test_cat_kernel(dim, strided):
    rng = np.random.default_rng(0)
    shapes = [(2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s if k != dim % 3 else s + i for k, s in enumerate(sh)) for i, sh in enumerate(shapes)]
    arrays = [rng.standard_normal(s) for s in shapes] + [rng.standard_normal(shapes[0]).astype(np.float32)]
    got, want, _ = _cat(arrays, dim, np.float64, strided)     # float64 + float32 -> float64 (promotion)
    np.testing.assert_array_equal(got, want)


def test_cat_kernel_many_ints_and_legacy_empty():
    rng = np.random.default_rng(1)
    arrays = [rng.integers(-9, 9, (i % 3 + 1, 2)).astype(np.int32 if i % 2 else np.int64) for i in range(40)]
    got, want, _ = _cat(arrays, 0, np.int64)
    np.testing.assert_array_equal(got, want)
    got, want, _ = _cat([np.ones((2, 2)), np.zeros(0), np.full((1, 2), 3.0)], 0, np.float64)  # [0] is skipped
    np.testing.assert_array_equal(got, want)


def test_cat_kernel_refusals():
    lib = __import__("aclnn_util").nn()
    a, b = DevTensor.from_numpy(np.ones((2, 3))), DevTensor.from_numpy(np.ones((2, 4)))
    out = DevTensor((4, 3), np.float64)

    def tl(*ts):
        return lib.aclCreateTensorList(ffi.new("aclTensor *[]", [t.handle for t in ts]), len(ts))
    with pytest.raises(OpError, match="sizes of tensors must match except in dimension 0") as e:
        run("Cat", tl(a, b), 0, out.handle)
    assert e.value.code == ACLNN_ERR_PARAM_INVALID
    with pytest.raises(OpError, match="dim 2 is out of range"):
        run("Cat", tl(a, a), 2, out.handle)
    with pytest.raises(OpError, match=r"out has shape \[4, 3\], expected \[2, 6\]"):
        run("Cat", tl(a, a), 1, out.handle)
    with pytest.raises(OpError, match="cannot be cast to out's dtype int64"):
        run("Cat", tl(a, a), 0, DevTensor((4, 3), np.int64).handle)
    with pytest.raises(OpError, match="empty list"):
        run("Cat", lib.aclCreateTensorList(ffi.new("aclTensor *[1]"), 0), 0, out.handle)
    with pytest.raises(OpError) as e:
        run("Cat", ffi.NULL, 0, out.handle)
    assert e.value.code == ACLNN_ERR_PARAM_NULLPTR
    with pytest.raises(OpError, match="not a live aclTensorList"):
        run("Cat", ffi.cast("aclTensorList *", a.handle), 0, out.handle)
    assert_usable()


# ---------------------------------------------------------------------------------------------
# kernels.cat / torch.cat (the registry entry)

@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_forward(dim):
    g = torch.Generator().manual_seed(0)
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[dim] += i
    ts = [torch.randn(s, dtype=D, generator=g) for s in shapes]
    ts[1] = ts[1].transpose(0, 1).contiguous().transpose(0, 1)       # strided
    torch.testing.assert_close(kernels.cat(ts, dim), torch.cat(ts, dim), rtol=0, atol=0)
    torch.testing.assert_close(kernels.cat(tuple(ts), dim=dim), torch.cat(ts, dim), rtol=0, atol=0)
    for _ in range(2):   # the cached plan with new addresses (aclSetInputTensorAddr on the list's tensors)
        ts = [t + 1 for t in ts]
        torch.testing.assert_close(kernels.cat(ts, dim), torch.cat(ts, dim), rtol=0, atol=0)


def test_cat_promotion_many_and_legacy_empty():
    a, b = torch.randn(2, 3), torch.randn(1, 3, dtype=D)
    r = kernels.cat([a, b])
    assert r.dtype == D
    torch.testing.assert_close(r, torch.cat([a, b]), rtol=0, atol=0)
    ints = [torch.arange(i, i + 3).reshape(1, 3).to(torch.int32 if i % 2 else torch.int64) for i in range(30)]
    torch.testing.assert_close(kernels.cat(ints), torch.cat(ints))
    e = torch.zeros(0, dtype=D)
    torch.testing.assert_close(kernels.cat([b, e, b]), torch.cat([b, e, b]))


def test_cat_gradcheck():
    a = torch.randn(2, 3, dtype=D, requires_grad=True)
    b = torch.randn(2, 2, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, q: ct.cat([p, q, p], 1), (a, b))
    assert torch.autograd.gradgradcheck(lambda p, q: ct.cat([p, q], -1), (a, b))
    f = torch.randn(2, 3, requires_grad=True)            # float32 + float64: each gradient in its input's dtype
    ct.cat([f, a.detach()], 0).sum().backward()
    assert f.grad.dtype == torch.float32
    torch.testing.assert_close(f.grad, torch.ones(2, 3))


def test_cat_bad_input():
    a = torch.randn(2, 3, dtype=D)
    with pytest.raises(ValueError, match="non-empty list"):
        kernels.cat([])
    with pytest.raises(ValueError, match="sizes of tensors must match except in dimension 0"):
        kernels.cat([a, torch.randn(2, 4, dtype=D)])
    with pytest.raises(ValueError, match="same number of dims"):
        kernels.cat([a, torch.randn(2, 3, 1, dtype=D)])
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        kernels.cat([a, a], 2)
    with pytest.raises(ValueError, match="zero-dimensional"):
        kernels.cat([torch.tensor(1.0), torch.tensor(2.0)])
    with pytest.raises(TypeError):
        kernels.cat([a, "b"])
    assert_usable()
    torch.testing.assert_close(kernels.cat([a, a], 1), torch.cat([a, a], 1))


@pytest.mark.usefixtures("function_level")
def test_cat_under_offload():
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(2, 3, requires_grad=True)
    with ct.offload() as rep:
        y = torch.cat([a, b], dim=1)
        z = torch.concat((a, b))
        w = torch.cat([a.detach(), b.detach()], 1, out=torch.empty(2, 6))    # out=: PyTorch's
        (y.sum() + (z * 2).sum()).backward()
    torch.testing.assert_close(y, torch.cat([a, b], 1).detach())
    torch.testing.assert_close(w, y.detach())
    torch.testing.assert_close(a.grad, torch.full((2, 3), 3.0))
    st = rep.ops["cat"]
    assert (st.canna, st.backward, st.fallback) == (2, 2, 1)


def test_pad_and_cat_in_tf_and_jax():
    tf = pytest.importorskip("tensorflow")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cj
    import canna_dl.tf as ctf
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    theo, num = tf.test.compute_gradient(lambda t: ctf.pad(t, (1, -1, 2, 0), value=0.5), [tf.constant(x)])
    np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-8)
    a, b = tf.constant(x), tf.constant(x[:, :1])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        z = tf.reduce_sum(ctf.cat([a, b * 2], 1) ** 2)
    ga, gb = tape.gradient(z, [a, b])
    np.testing.assert_allclose(ga.numpy(), 2 * x)
    np.testing.assert_allclose(gb.numpy(), 8 * x[:, :1])
    xj = jnp.asarray(x.astype(np.float32))
    g = jax.jit(jax.grad(lambda t: jnp.sum(cj.cat([t, cj.pad(t, (0, 1))], -1))))(xj)
    np.testing.assert_allclose(np.asarray(g), np.full(x.shape, 2.0))
