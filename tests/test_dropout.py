"""Dropout (issue 14; kernels/ops/dropout.py, simulator kernels in kernels/_sim/op_dropout.c):
aclnnDropoutGenMaskV2 + aclnnDropoutDoMask, the backward through DoMask with the same mask.

canna's mask cannot equal PyTorch's (another generator), so the values are checked by their law:
the generator against an independent Philox4x32-10 (TensorFlow's), the keep rate and the
1 / (1 - p) scaling statistically for p > 0, the mask layout of the aclnn pages, reproducibility
from torch.manual_seed; equality with plain PyTorch in eval mode and at p=0 (identities)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernels
from kernels.ops.dropout import mask_bytes

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _bits(mask, n):
    return np.unpackbits(np.asarray(mask), bitorder="little")[:n].astype(bool)


def test_generator_is_philox4x32_10():
    """Bit i of the mask is word i % 4 of Philox4x32-10(key=seed, counter=(i / 4, offset)) compared
    with p: checked against TensorFlow's Philox (an independent implementation of the published
    algorithm; alg=1)."""
    tf = pytest.importorskip("tensorflow")
    for seed, offset, n, p in ((0x1234567890ABCDEF, 77, 1000, 0.3), (0, 0, 129, 0.5), (2**63 - 1, 2**40, 517, 0.9)):
        r = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[n], key=tf.constant([seed], tf.uint64), counter=tf.constant([0, offset], tf.uint64), alg=1,
            dtype=tf.uint32).numpy()
        want = r.astype(np.float64) * 2.0 ** -32 >= p
        m = kernels.dropout_gen_mask(np.zeros(n, np.float32), p, seed, offset)
        np.testing.assert_array_equal(_bits(m, n), want)


def test_mask_layout_of_the_aclnn_pages():
    for n in (0, 1, 127, 128, 129, 1111):
        m = kernels.dropout_gen_mask(np.zeros(n), 0.0, 1, 0)   # p = 0: every element kept
        assert m.dtype == np.uint8 and m.shape == (mask_bytes(n),) == ((n + 127) // 128 * 16,)
        bits = np.unpackbits(np.asarray(m), bitorder="little")
        assert bits[:n].all() and not bits[n:].any(), n   # bits past numel are 0
    assert mask_bytes(1111) == 1152 // 8


def test_mask_depends_on_seed_offset_and_index_only():
    big = _bits(kernels.dropout_gen_mask(np.zeros((100, 1000)), 0.5, 42, 3), 100000)
    small = _bits(kernels.dropout_gen_mask(np.zeros(333), 0.5, 42, 3), 333)
    np.testing.assert_array_equal(big[:333], small)   # not on the shape or how blocks split the work
    again = _bits(kernels.dropout_gen_mask(np.zeros((100, 1000)), 0.5, 42, 3), 100000)
    np.testing.assert_array_equal(big, again)
    for other in ((43, 3), (42, 4)):
        diff = _bits(kernels.dropout_gen_mask(np.zeros((100, 1000)), 0.5, *other), 100000)
        assert 0.45 < (diff != big).mean() < 0.55, other


#: one rounding of the result (the scale is rounded to float for the reduced-precision dtypes)
_ROUND = {torch.float32: 2.5e-7, torch.float64: 2.3e-16, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_keep_rate_and_scaling(p, dtype):
    """Statistical: over n = 200000 elements the kept fraction is 1 - p within 5 standard
    deviations, every kept element is x / (1 - p) (one rounding), every other is 0."""
    n = 200000
    x = (torch.rand(400, 500, dtype=torch.float64) + 0.5).to(dtype)
    for xi in (x, x.t()):   # contiguous and transposed
        y, mask = kernels.dropout(xi, p, seed=7)
        assert y.dtype == dtype and y.shape == xi.shape
        kept = y != 0
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(kept.double().mean().item() - (1 - p)) < 5 * sigma
        want = xi.double() * (1 / (1 - p))   # PyTorch's scaling too: x times 1 / (1 - p)
        torch.testing.assert_close(y[kept].double(), want[kept], rtol=_ROUND[dtype], atol=0)
        assert not y[~kept].any()
        # the element kept is the mask's bit of its row-major index
        np.testing.assert_array_equal(_bits(mask.numpy(), n), kept.contiguous().view(-1).numpy())


def test_p_zero_and_one():
    x = torch.randn(10, 13)
    y, _ = kernels.dropout(x, 0.0, seed=1)
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    y, _ = kernels.dropout(x, 1.0, seed=1)
    assert torch.equal(y, torch.zeros_like(x))


def test_seed_none_draws_from_torch_generator():
    import canna_dl.torch as ct
    x = torch.randn(64, 64)
    torch.manual_seed(5)
    a = ct.dropout(x, 0.5)[0]
    b = ct.dropout(x, 0.5)[0]
    torch.manual_seed(5)
    a2 = ct.dropout(x, 0.5)[0]
    b2 = ct.dropout(x, 0.5)[0]
    assert torch.equal(a, a2) and torch.equal(b, b2) and not torch.equal(a, b)


def test_gradients_through_do_mask_with_the_same_mask():
    import canna_dl.torch as ct
    x = torch.randn(6, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ct.dropout(t, 0.4, seed=11)[0], (x,))
    assert torch.autograd.gradgradcheck(lambda t: ct.dropout(t, 0.4, seed=11)[0], (x,))
    y, mask = ct.dropout(x, 0.4, seed=11)
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, kernels.dropout_do_mask(g, mask, 0.4))
    torch.testing.assert_close(x.grad, g * (y != 0) / 0.6)


def test_torch_compile_fullgraph():
    import canna_dl.torch as ct
    x = torch.randn(8, 16, requires_grad=True)
    ref = x.detach().clone().requires_grad_()
    torch.compiler.reset()
    f = torch.compile(lambda t: (ct.dropout(t, 0.3, seed=9)[0] * t).sum(), fullgraph=True)
    y = f(x)
    y.backward()
    y0 = (ct.dropout(ref, 0.3, seed=9)[0] * ref).sum()
    y0.backward()
    torch.testing.assert_close(y, y0)
    torch.testing.assert_close(x.grad, ref.grad)
    # seed=None: drawn when the compiled graph runs, from torch's generator
    g = torch.compile(lambda t: ct.dropout(t, 0.5)[0], fullgraph=True)
    torch.manual_seed(3)
    a = g(x.detach())
    torch.manual_seed(3)
    assert torch.equal(g(x.detach()), a) and not torch.equal(g(x.detach()), a)


def test_tensorflow_gradient_tape_and_tf_function():
    tf = pytest.importorskip("tensorflow")
    import canna_dl.tf as ctf
    x = tf.constant(np.random.default_rng(0).standard_normal((40, 9)))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, _ = ctf.dropout(x, 0.25, seed=3)
        s = tf.reduce_sum(y * y)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), 2 * y.numpy() / 0.75, rtol=1e-12)
    np.testing.assert_array_equal(tf.function(lambda a: ctf.dropout(a, 0.25, seed=3)[0])(x).numpy(), y.numpy())
    tf.random.set_seed(7)
    a = ctf.dropout(x, 0.5)[0]
    tf.random.set_seed(7)
    np.testing.assert_array_equal(ctf.dropout(x, 0.5)[0].numpy(), a.numpy())


def test_jax_grad_and_jit():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cj
    x = jnp.asarray(np.random.default_rng(1).standard_normal((40, 9)).astype(np.float32))
    loss = lambda a: jnp.sum(cj.dropout(a, 0.25, seed=3)[0] ** 2)  # noqa: E731
    y = cj.dropout(x, 0.25, seed=3)[0]
    np.testing.assert_allclose(jax.grad(loss)(x), 2 * y / 0.75, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), jax.grad(loss)(x), rtol=1e-6)


def test_bad_inputs_raise_and_leave_canna_usable():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        kernels.dropout(x, 1.5, seed=1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        kernels.dropout_gen_mask(x, -0.1, 1)
    with pytest.raises(TypeError, match="int32"):
        kernels.dropout(torch.ones(3, dtype=torch.int32), 0.5, seed=1)
    mask = kernels.dropout_gen_mask(x, 0.5, 1)
    with pytest.raises(ValueError, match="mask"):
        kernels.dropout_do_mask(torch.randn(200), mask, 0.5)
    with pytest.raises(TypeError, match="mask"):
        kernels.dropout_do_mask(x, mask.float(), 0.5)
    with pytest.raises(TypeError, match="seed"):
        kernels.dropout(x, 0.5, seed=1.5)
    y, _ = kernels.dropout(x, 0.5, seed=1)
    torch.testing.assert_close(y, kernels.dropout_do_mask(x, mask, 0.5))


@pytest.mark.usefixtures("function_level")
def test_offload_dropout_train_eval_and_p0():
    import canna_dl.torch as ct
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 4))
    x = torch.randn(64, 16)
    m.eval()
    want = m(x)
    with ct.offload(strict=True) as rep:
        got = m(x)                                   # eval: identity, no kernel
        z = F.dropout(x, 0.0, training=True)         # p = 0: identity
        w = torch.dropout(x, 0.5, False)
    torch.testing.assert_close(got, want)   # linear on canna: float32 rounding
    assert z is x and w is x
    assert rep.ops["dropout"].canna == 3 and rep.ops["dropout"].fallback == 0
    m.train()

    def step(seed):
        torch.manual_seed(seed)
        m.zero_grad()
        with ct.offload(strict=True) as r:
            loss = m(x).square().mean()
            loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()], r
    l1, g1, r1 = step(1)
    l2, g2, _ = step(1)
    assert torch.equal(l1, l2) and all(torch.equal(a, b) for a, b in zip(g1, g2))   # torch.manual_seed: reproducible
    assert r1.ops["dropout"].canna == 1 and r1.ops["dropout"].backward == 1
    assert not any("dropout" in n for n in r1.pytorch_calls)
    with ct.offload() as r:
        F.dropout(x.clone(), 0.5, training=True, inplace=True)   # in place: PyTorch's
    assert r.ops["dropout"].fallback == 1


def test_a_seed_beyond_int64_is_an_overflow_error_naming_it():
    """An int attribute is an int64 in every schema: seed=2**70 was cffi's bare "int too big to
    convert"; it names the attribute now (one rule in Attr.check, also on the call's fast check)."""
    x = np.ones(8, np.float32)
    with pytest.raises(OverflowError, match=r"seed = 1180591620717411303424 is out of the int64 range"):
        kernels.dropout(x, 0.5, seed=2**70)
    assert kernels.dropout(x, 0.5, seed=2**63 - 1)[0].shape == (8,)
