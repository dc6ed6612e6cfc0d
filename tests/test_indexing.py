"""Indexing ops (kernels/ops/indexing.py, kernels/_sim/op_index.c): embedding (padding_idx,
scale_grad_by_freq) and its dense gradient, gather and scatter_add against PyTorch in float64
(strided inputs, int32 / int64 indices, other dtypes), gradients, index checks (an index out of range
is a clear error, never a crash, and the runtime stays usable), and the torch functions under
offload()."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import acl_rt  # noqa: E402
import canna_dl  # noqa: E402
import kernels  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
from conftest import assert_usable  # noqa: E402

F = torch.nn.functional
D = torch.float64


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# embedding

@pytest.mark.parametrize("ishape", [(7,), (3, 5), (2, 3, 4), ()])
@pytest.mark.parametrize("idt", [torch.int64, torch.int32])
def test_embedding_forward(ishape, idt):
    g = _gen()
    w = torch.randn(10, 4, dtype=D, generator=g)
    i = torch.randint(0, 10, ishape, generator=g).to(idt)
    torch.testing.assert_close(kernels.embedding(i, w), F.embedding(i, w), rtol=0, atol=0)
    ws = torch.randn(4, 10, dtype=D, generator=g).t()          # strided weight
    torch.testing.assert_close(kernels.embedding(i, ws), F.embedding(i, ws), rtol=0, atol=0)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        torch.testing.assert_close(kernels.embedding(i, w.to(dt)), F.embedding(i, w.to(dt)), rtol=0, atol=0)


@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_gradient(padding_idx, scale):
    g = _gen(1)
    i = torch.randint(0, 6, (4, 5), generator=g)
    i[0, 0] = 3
    w = torch.randn(6, 3, dtype=D, generator=g, requires_grad=True)
    w0 = w.detach().clone().requires_grad_()
    ct.embedding(i, w, padding_idx, None, 2.0, scale).pow(2).sum().backward()
    F.embedding(i, w0, padding_idx, scale_grad_by_freq=scale).pow(2).sum().backward()
    torch.testing.assert_close(w.grad, w0.grad, rtol=1e-13, atol=1e-13)
    if padding_idx is None and not scale:   # (padding and frequency scaling are not derivatives)
        assert torch.autograd.gradcheck(lambda t: ct.embedding(i, t), (w,))


def test_embedding_backward_kernel():
    g = _gen(2)
    i = torch.randint(0, 9, (3, 4), generator=g)
    gr = torch.randn(3, 4, 5, dtype=D, generator=g)
    for pad, scale in ((-1, False), (2, False), (4, True)):
        ref = torch.ops.aten.embedding_dense_backward(gr, i, 9, pad, scale)
        torch.testing.assert_close(kernels.backward.embedding(gr, i, 9, pad, scale), ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("pad", [-1, 2])
def test_embedding_backward_kernel_float32(pad):
    # the float32 rows path (memset, then each gradient row added in index order): the double
    # path's bits, so the float64 sum of the same rows rounded step by step in float32
    g = _gen(3)
    i = torch.randint(0, 7, (6, 9), generator=g)
    i[0, :3] = 2
    gr = torch.randn(6, 9, 33, dtype=torch.float32, generator=g)
    got = kernels.backward.embedding(gr, i, 7, pad, False)
    want = torch.zeros(7, 33, dtype=torch.float32)
    for k, r in enumerate(i.reshape(-1).tolist()):
        if r != pad:
            want[r] = (want[r].double() + gr.reshape(-1, 33)[k].double()).float()
    assert got.dtype == torch.float32 and torch.equal(got, want)
    torch.testing.assert_close(got, torch.ops.aten.embedding_dense_backward(gr, i, 7, pad, False))


def test_embedding_bad_input():
    w = torch.randn(5, 3, dtype=D)
    with pytest.raises(acl_rt.AclError, match="index 7 at position 1 of indices is out of range"):
        kernels.embedding(torch.tensor([1, 7, 2]), w)
    with pytest.raises(acl_rt.AclError, match="index -1 .* out of range"):
        kernels.embedding(torch.tensor([-1]), w)
    assert_usable()
    with pytest.raises(TypeError, match="input has dtype float"):
        kernels.embedding(torch.tensor([1.0]), w)
    with pytest.raises(ValueError, match="2-D"):
        kernels.embedding(torch.tensor([1]), torch.randn(5, dtype=D))
    with pytest.raises(ValueError, match="padding_idx 5 is out of range"):
        kernels.embedding(torch.tensor([1]), w, 5)
    with pytest.raises(NotImplementedError, match="max_norm"):
        kernels.embedding(torch.tensor([1]), w, None, 1.0)
    with pytest.raises(NotImplementedError, match="sparse"):
        kernels.embedding(torch.tensor([1]), w, sparse=True)
    with pytest.raises(ValueError, match="grad_out of shape"):
        kernels.backward.embedding(torch.randn(2, 3, dtype=D), torch.tensor([1, 2, 3]), 5)
    assert_usable()
    torch.testing.assert_close(kernels.embedding(torch.tensor([4, 0]), w), w[[4, 0]])


@pytest.mark.usefixtures("function_level")
def test_embedding_under_offload():
    emb = torch.nn.Embedding(11, 6, padding_idx=0)
    i = torch.randint(0, 11, (4, 7))
    w0 = emb.weight.detach().clone()
    with ct.offload() as rep:
        y = emb(i)
        y.sum().backward()
        F.embedding(i, emb.weight, max_norm=1.0)        # renormalizes in place: PyTorch's
        with pytest.raises(IndexError):                  # PyTorch's own error, from the fallback
            emb(torch.tensor([11]))
    torch.testing.assert_close(y, F.embedding(i, w0), rtol=0, atol=0)
    gref = torch.zeros(11, 6).index_add_(0, i.flatten(), torch.ones(28, 6))
    gref[0] = 0
    torch.testing.assert_close(emb.weight.grad, gref)
    st = rep.ops["embedding"]
    assert (st.canna, st.backward, st.fallback) == (1, 1, 2)
    assert_usable()


# ---------------------------------------------------------------------------------------------
# gather / scatter_add

CASES = [((4, 5), 0, (3, 5)), ((4, 5), 1, (4, 7)), ((3, 4, 5), -1, (2, 3, 2)), ((3, 4, 5), 1, (3, 6, 5)), ((6,), 0, (9,))]


@pytest.mark.parametrize("shape,dim,ishape", CASES)
def test_gather_forward_and_gradient(shape, dim, ishape):
    g = _gen(3)
    x = torch.randn(shape, dtype=D, generator=g)
    idx = torch.randint(0, shape[dim], ishape, generator=g)
    torch.testing.assert_close(kernels.gather(x, idx, dim), torch.gather(x, dim, idx), rtol=0, atol=0)
    torch.testing.assert_close(kernels.gather(x, idx.int(), dim), torch.gather(x, dim, idx), rtol=0, atol=0)
    xt = x.t() if x.ndim == 2 else x.transpose(0, -1)
    it = torch.randint(0, xt.shape[dim], tuple(min(a, b) for a, b in zip(xt.shape, ishape)), generator=g)
    torch.testing.assert_close(kernels.gather(xt, it, dim), torch.gather(xt, dim, it), rtol=0, atol=0)
    xi = x.long()
    torch.testing.assert_close(kernels.gather(xi, idx, dim), torch.gather(xi, dim, idx))
    xg = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ct.gather(t, idx, dim), (xg,))
    assert torch.autograd.gradgradcheck(lambda t: ct.gather(t, idx, dim), (xg,))


@pytest.mark.parametrize("shape,dim,ishape", [c for c in CASES if all(
    i <= s for k, (i, s) in enumerate(zip(c[2], c[0])) if k != c[1] % len(c[0]))])
def test_scatter_add_forward_and_gradient(shape, dim, ishape):
    g = _gen(4)
    x = torch.randn(shape, dtype=D, generator=g)
    src = torch.randn(ishape, dtype=D, generator=g)
    idx = torch.randint(0, shape[dim], ishape, generator=g)
    torch.testing.assert_close(kernels.scatter_add(x, idx, src, dim), torch.scatter_add(x, dim, idx, src),
                               rtol=1e-14, atol=1e-14)
    xi, si = x.long(), src.long()
    torch.testing.assert_close(kernels.scatter_add(xi, idx, si, dim), torch.scatter_add(xi, dim, idx, si))
    a, b = x.clone().requires_grad_(), src.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda p, q: ct.scatter_add(p, idx, q, dim), (a, b))
    o = torch.empty_like(x.t()).t() if x.ndim == 2 else torch.empty_like(x)   # a strided out
    kernels.scatter_add(x, idx, src, dim, out=o)
    torch.testing.assert_close(o, torch.scatter_add(x, dim, idx, src), rtol=1e-14, atol=1e-14)


def test_gather_scatter_bad_input():
    x = torch.randn(3, 4, dtype=D)
    with pytest.raises(acl_rt.AclError, match="index 4 at position 2 of index is out of range"):
        kernels.gather(x, torch.tensor([[0, 1, 4]]), 1)
    with pytest.raises(acl_rt.AclError, match="out of range"):
        kernels.scatter_add(x, torch.tensor([[3]]), torch.ones(1, 1, dtype=D), 0)
    assert_usable()
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        kernels.gather(x, torch.zeros(1, 1, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match="as many dims"):
        kernels.gather(x, torch.zeros(2, dtype=torch.int64), 0)
    with pytest.raises(ValueError, match="larger than input"):
        kernels.gather(x, torch.zeros(4, 1, dtype=torch.int64), 1)
    with pytest.raises(TypeError, match="index has dtype"):
        kernels.gather(x, torch.zeros(1, 1), 0)
    with pytest.raises(ValueError, match="larger than src"):
        kernels.scatter_add(x, torch.zeros(2, 2, dtype=torch.int64), torch.ones(1, 2, dtype=D), 0)
    with pytest.raises(TypeError, match="src has dtype float32"):
        kernels.scatter_add(x, torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1), 0)
    if canna_dl.memory_model() == "unified":   # (discrete: out= is a staged device copy, no alias)
        with pytest.raises(ValueError, match="overlaps"):
            kernels.scatter_add(x, torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1, dtype=D), 0, out=x)
    assert_usable()
    torch.testing.assert_close(kernels.gather(x, torch.tensor([[3, 0]]), 1), x[:1, [3, 0]])


@pytest.mark.usefixtures("function_level")
def test_gather_scatter_under_offload():
    x = torch.randn(3, 5, requires_grad=True)
    idx = torch.randint(0, 5, (3, 2))
    with ct.offload() as rep:
        a = torch.gather(x, 1, idx)
        b = x.gather(1, index=idx)
        c = torch.scatter_add(x, 1, idx, a)
        (a.sum() + b.sum() + c.sum()).backward()
        torch.gather(x, 1, idx, sparse_grad=True)      # refused: PyTorch's
    x0 = x.detach().clone().requires_grad_()
    (torch.gather(x0, 1, idx).sum() + x0.gather(1, idx).sum()
     + torch.scatter_add(x0, 1, idx, torch.gather(x0, 1, idx)).sum()).backward()
    torch.testing.assert_close(x.grad, x0.grad)
    assert (rep.ops["gather"].canna, rep.ops["gather"].fallback) == (2, 1)
    assert rep.ops["scatter_add"].canna == 1


def test_tf_and_jax_forms():
    tf = pytest.importorskip("tensorflow")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    import canna_dl.jax as cj
    import canna_dl.tf as ctf
    rng = np.random.default_rng(0)
    x, idx = rng.standard_normal((3, 5)), rng.integers(0, 5, (3, 2))
    theo, num = tf.test.compute_gradient(lambda t: ctf.gather(t, tf.constant(idx), 1), [tf.constant(x)])
    np.testing.assert_allclose(theo[0], num[0], rtol=1e-6, atol=1e-8)
    w, i = rng.standard_normal((6, 3)).astype(np.float32), np.array([[1, 5], [1, 0]])
    g = jax.jit(jax.grad(lambda t: jnp.sum(cj.embedding(jnp.asarray(i), t, 0))))(jnp.asarray(w))
    want = np.zeros((6, 3), np.float32)
    want[1], want[5] = 2, 1                        # row 0 is padding_idx: no gradient
    np.testing.assert_allclose(np.asarray(g), want)
    gx = jax.grad(lambda t: jnp.sum(cj.gather(t, jnp.asarray(idx), 1) ** 2))(jnp.asarray(x.astype(np.float32)))
    np.testing.assert_allclose(np.asarray(gx), np.asarray(jax.grad(
        lambda t: jnp.sum(jnp.take_along_axis(t, jnp.asarray(idx), 1) ** 2))(jnp.asarray(x.astype(np.float32)))),
        rtol=1e-6)


def test_device_array_index_error_is_reported_by_the_stream():
    import numpy as np
    x = canna_dl.from_numpy(np.arange(12.0).reshape(3, 4))
    kernels.gather(x, canna_dl.from_numpy(np.array([[0, 9]])), 1)       # asynchronous: the stream reports it
    with pytest.raises(acl_rt.AclError, match="aclnnGather: index 9 at position 1 of index is out of range"):
        acl_rt.current_stream().synchronize()
    y = kernels.gather(x, canna_dl.from_numpy(np.array([[3, 0]])), 1)
    np.testing.assert_array_equal(canna_dl.to_numpy(y), [[3.0, 0.0]])
    assert_usable()
