"""Attention on canna: aclnnFlashAttentionScore / aclnnFlashAttentionScoreGrad in the simulator,
their registry entries (kernels/ops/attention.py) and ``scaled_dot_product_attention`` in PyTorch,
TensorFlow, JAX and under ``offload()``. References: PyTorch's own sdpa in float64."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
import canna_dl.torch as ct

torch.manual_seed(0)


def _qkv(b=2, h=4, lq=37, lk=50, d=16, hk=None, dtype=torch.float64, grad=True):
    g = torch.Generator().manual_seed(lq * 1000 + lk)
    q = torch.randn(b, h, lq, d, dtype=dtype, generator=g)
    k = torch.randn(b, hk or h, lk, d, dtype=dtype, generator=g)
    v = torch.randn(b, hk or h, lk, d, dtype=dtype, generator=g)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _bool_mask(*shape):
    m = torch.rand(*shape, generator=torch.Generator().manual_seed(7)) > 0.3
    return m


CASES = {
    "no mask": ({}, {}),
    "causal": ({}, {"is_causal": True}),
    "causal, longer keys": ({"lq": 20, "lk": 150}, {"is_causal": True}),
    "causal, longer queries": ({"lq": 150, "lk": 40}, {"is_causal": True}),
    "bool mask 2-D": ({}, {"attn_mask": _bool_mask(37, 50)}),
    "bool mask [B,1,Lq,Lk]": ({}, {"attn_mask": _bool_mask(2, 1, 37, 50)}),
    "bool mask [B,1,1,Lk] (padding)": ({}, {"attn_mask": _bool_mask(2, 1, 1, 50)}),
    "float mask [B,H,Lq,Lk]": ({}, {"attn_mask": torch.randn(2, 4, 37, 50, dtype=torch.float64)}),
    "float mask [Lq,Lk] with -inf": ({}, {"attn_mask": torch.where(_bool_mask(37, 50), 0.0, float("-inf")).double()}),
    "scale": ({}, {"scale": 0.7}),
    "long sequences (several tiles)": ({"b": 1, "h": 2, "lq": 200, "lk": 300}, {}),
    "gqa": ({"hk": 2}, {"enable_gqa": True}),
    "gqa causal": ({"h": 6, "hk": 2}, {"enable_gqa": True, "is_causal": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_values_and_gradients_match_pytorch_float64(case):
    shape, kw = CASES[case]
    q, k, v = _qkv(**shape)
    out = ct.scaled_dot_product_attention(q, k, v, **kw)
    ref = F.scaled_dot_product_attention(q, k, v, **kw)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(ref)
    g = torch.autograd.grad((out * w).sum(), (q, k, v))
    gr = torch.autograd.grad((ref * w).sum(), (q, k, v))
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_fully_masked_query_row_gives_zeros_as_pytorch():
    q, k, v = _qkv(lq=5, lk=6)
    m = torch.ones(5, 6, dtype=torch.bool)
    m[2] = False
    out = ct.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    assert (out[:, :, 2] == 0).all()
    gq, = torch.autograd.grad(out.sum(), q)
    assert (gq[:, :, 2] == 0).all()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 3e-3), (torch.bfloat16, 3e-2)])
def test_sdpa_low_precision(dtype, tol):
    q, k, v = _qkv(dtype=torch.float64, grad=False)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    qs, ks, vs = (t.to(dtype).requires_grad_() for t in (q, k, v))
    out = ct.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    out.float().sum().backward()
    qd = q.clone().requires_grad_()
    F.scaled_dot_product_attention(qd, k, v, is_causal=True).sum().backward()
    torch.testing.assert_close(qs.grad.double(), qd.grad, rtol=10 * tol, atol=10 * tol)


def test_gradcheck_float64_with_a_float_mask_that_requires_grad():
    q, k, v = (t.detach()[:1, :2, :5].contiguous().requires_grad_() for t in _qkv(lq=5, lk=5))
    m = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, m: ct.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                    (q, k, v, m))
    assert torch.autograd.gradcheck(lambda q, k, v: ct.scaled_dot_product_attention(q, k, v, is_causal=True),
                                    (q, k, v))


# ---------------------------------------------------------------------------------------------
# the aclnn-level op: layouts, sparse modes, dropout, pse

def _ref_attn(q, k, v, allowed=None, pse=None, scale=1.0, keep=None):
    """softmax(scale * (q k^T + pse)) masked to ``allowed``, times v (BNSD), with an optional keep mask."""
    s = q @ k.transpose(-1, -2)
    if pse is not None:
        s = s + pse
    s = s * scale
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, -1)
    if keep is not None:
        p = p * keep
    return p @ v


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
def test_flash_attention_score_layouts(layout):
    q, k, v = (t.detach() for t in _qkv(hk=2))
    ref = _ref_attn(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), scale=0.3)

    def to(t):
        if layout == "BNSD":
            return t
        t = t.transpose(1, 2)   # BSND
        if layout == "BSND":
            return t
        t = t.reshape(t.shape[0], t.shape[1], -1)   # BSH
        return t if layout == "BSH" else t.transpose(0, 1)   # SBH (a strided view)

    mx, sm, so, out = kernels.flash_attention_score(to(q), to(k), to(v), scale_value=0.3, head_num=4,
                                                    input_layout=layout)
    assert mx.shape == sm.shape == (2, 4, 37, 8) and mx.dtype == torch.float64 and so.numel() == 0
    torch.testing.assert_close(out, to(ref), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse,pre,nxt", [(0, 5, 3), (0, 0, 0), (1, 0, 0), (3, 0, 0), (4, 4, 2)])
def test_flash_attention_score_sparse_modes(sparse, pre, nxt):
    q, k, v = (t.detach() for t in _qkv(b=1, h=2, lq=30, lk=45))
    i = torch.arange(30)[:, None]
    j = torch.arange(45)[None, :]
    user = _bool_mask(30, 45)       # aclnn: True = masked out
    d = 45 - 30
    allowed = {0: (~user) & (j >= i - pre) & (j <= i + nxt), 1: ~user, 3: j <= i + d,
               4: (j >= i + d - pre) & (j <= i + d + nxt)}[sparse]
    mask = user if sparse in (0, 1) else None
    out = kernels.flash_attention_score(q, k, v, atten_mask=mask, scale_value=0.25, head_num=2, sparse_mode=sparse,
                                        pre_tokens=pre, next_tokens=nxt)[3]
    ref = torch.nan_to_num(_ref_attn(q, k, v, allowed, scale=0.25), nan=0.0)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_flash_attention_score_dropout_mask_and_gradients():
    q, k, v = (t.detach() for t in _qkv(b=1, h=2, lq=9, lk=11))
    n = 1 * 2 * 9 * 11
    bits = torch.rand(n, generator=torch.Generator().manual_seed(3)) < 0.6
    packed = np.packbits(bits.numpy(), bitorder="little")     # bit i of the scores, least significant first
    drop = torch.from_numpy(packed)
    keep = bits.reshape(1, 2, 9, 11).double() / 0.6
    pse = torch.randn(1, 2, 1, 11, dtype=torch.float64)
    qr, kr, vr, pr = (t.clone().requires_grad_() for t in (q, k, v, pse))
    ref = _ref_attn(qr, kr, vr, pse=pr, scale=0.5, keep=keep)
    mx, sm, _, out = kernels.flash_attention_score(q, k, v, pse, drop, None, None, scale_value=0.5, keep_prob=0.6,
                                                   head_num=2)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    dy = torch.randn_like(ref)
    grads = torch.autograd.grad((ref * dy).sum(), (qr, kr, vr, pr))
    dq, dk, dv, dpse = kernels.backward.flash_attention_score(q, k, v, dy, pse, drop, None, None, mx, sm, None, out,
                                                              scale_value=0.5, keep_prob=0.6, head_num=2)
    for a, b in zip((dq, dk, dv, dpse), grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_logical_not():
    x = torch.tensor([[0.0, 1.5, float("nan")], [-0.0, 2.0, 0.0]])
    torch.testing.assert_close(kernels.logical_not(x), torch.logical_not(x))
    m = _bool_mask(3, 4)
    torch.testing.assert_close(kernels.logical_not(m), ~m)
    torch.testing.assert_close(kernels.logical_not(m.t()), ~m.t())   # a strided view


# ---------------------------------------------------------------------------------------------
# bad input

BAD = [
    ("3-D query", lambda q, k, v: ct.scaled_dot_product_attention(q[0], k[0], v[0]), ValueError, "must be 4-D"),
    ("heads differ without enable_gqa", lambda q, k, v: ct.scaled_dot_product_attention(q, k[:, :2], v[:, :2]),
     ValueError, "enable_gqa"),
    ("heads not a multiple", lambda q, k, v: ct.scaled_dot_product_attention(q, k[:, :3], v[:, :3], enable_gqa=True),
     ValueError, "multiple of the key / value heads"),
    ("key / value lengths differ", lambda q, k, v: ct.scaled_dot_product_attention(q, k, v[:, :, :40]),
     ValueError, "value has shape"),
    ("head dims differ", lambda q, k, v: ct.scaled_dot_product_attention(q, k[..., :8], v[..., :8]), ValueError,
     "head dim"),
    ("mask does not broadcast", lambda q, k, v: ct.scaled_dot_product_attention(q, k, v, attn_mask=_bool_mask(36, 50)),
     ValueError, "does not broadcast"),
    ("mask of 5 dims", lambda q, k, v: ct.scaled_dot_product_attention(
        q, k, v, attn_mask=_bool_mask(1, 2, 1, 37, 50)), ValueError, "2 to 4 dims"),
    ("float mask of another dtype", lambda q, k, v: ct.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.zeros(37, 50)), TypeError, "attn_mask has dtype float32"),
    ("dropout", lambda q, k, v: ct.scaled_dot_product_attention(q, k, v, dropout_p=0.1), ValueError, "dropout_p"),
    ("causal and a mask", lambda q, k, v: ct.scaled_dot_product_attention(q, k, v, attn_mask=_bool_mask(37, 50),
                                                                           is_causal=True), ValueError, "together"),
    ("integer query", lambda q, k, v: ct.scaled_dot_product_attention(q.long(), k, v), TypeError, "dtype"),
    ("head_num of BNSD wrong", lambda q, k, v: kernels.flash_attention_score(q, k, v, head_num=3), ValueError,
     "head_num is 3"),
    ("head_num missing", lambda q, k, v: kernels.flash_attention_score(q, k, v), ValueError, "head_num"),
    ("BSH hidden size", lambda q, k, v: kernels.flash_attention_score(q[0], k[0], v[0], head_num=5,
                                                                      input_layout="BSH"), ValueError, "multiple"),
    ("layout", lambda q, k, v: kernels.flash_attention_score(q, k, v, head_num=4, input_layout="TND"), ValueError,
     "input_layout"),
]


@pytest.mark.parametrize("case", [c[0] for c in BAD])
def test_bad_input_raises_a_clear_error(case):
    _, f, exc, msg = next(c for c in BAD if c[0] == case)
    q, k, v = (t.detach() for t in _qkv())
    with pytest.raises(exc, match=msg):
        f(q, k, v)
    # the state stays usable
    torch.testing.assert_close(ct.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_simulator_refusals_have_messages():
    q, k, v = (t.detach() for t in _qkv())
    with pytest.raises(ValueError, match="sparseMode 9 is not supported"):
        kernels.flash_attention_score(q, k, v, head_num=4, sparse_mode=9)
    with pytest.raises(ValueError, match="keepProb is 0.5 but dropMask is NULL"):
        kernels.flash_attention_score(q, k, v, head_num=4, keep_prob=0.5)
    with pytest.raises(ValueError, match="keepProb must be in"):
        kernels.flash_attention_score(q, k, v, head_num=4, keep_prob=0.0)
    with pytest.raises(ValueError, match="paddingMask is reserved"):
        kernels.flash_attention_score(q, k, v, None, None, q, head_num=4)
    mx, sm, _, out = kernels.flash_attention_score(q, k, v, head_num=4)
    with pytest.raises(ValueError, match="needs softmaxMax"):
        kernels.backward.flash_attention_score(q, k, v, out, head_num=4)


# ---------------------------------------------------------------------------------------------
# frameworks

def test_torch_compile_fullgraph():
    q, k, v = _qkv(lq=20, lk=20)
    m = _bool_mask(20, 20)

    def f(q, k, v):
        return ct.scaled_dot_product_attention(q, k, v, attn_mask=m) + ct.scaled_dot_product_attention(
            q, k, v, is_causal=True)
    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = cf(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m) + F.scaled_dot_product_attention(q, k, v,
                                                                                              is_causal=True)
    torch.testing.assert_close(out, ref)
    g = torch.autograd.grad(out.sum(), (q, k, v))
    gr = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b)


@pytest.mark.usefixtures("function_level")
def test_offload_maps_sdpa_and_falls_back_for_dropout():
    q, k, v = _qkv()
    m = _bool_mask(37, 50)
    with ct.offload() as rep:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        gq, = torch.autograd.grad(out.sum(), q)
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    st = rep.ops["scaled_dot_product_attention"]
    assert (st.canna, st.backward, st.fallback) == (1, 1, 1)
    assert any("dropout_p" in r for r in st.reasons)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gq, torch.autograd.grad(ref.sum(), q)[0])


@pytest.mark.usefixtures("function_level")
def test_offload_transformer_encoder_layer_reaches_canna_attention():
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).double()
    layer2 = copy.deepcopy(layer)
    x = torch.randn(3, 10, 32, dtype=torch.float64)
    pad = torch.zeros(3, 10, dtype=torch.bool)
    pad[1, 7:] = True
    w = torch.randn(3, 10, 32, dtype=torch.float64)
    (layer(x, src_key_padding_mask=pad) * w).sum().backward()
    with ct.offload() as rep:
        (layer2(x, src_key_padding_mask=pad) * w).sum().backward()
    assert rep.ops["scaled_dot_product_attention"].canna == 1
    assert torch.nn.functional.multi_head_attention_forward not in rep.pytorch_calls
    for p, p2 in zip(layer.parameters(), layer2.parameters()):
        torch.testing.assert_close(p2.grad, p.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.usefixtures("function_level")
def test_huggingface_bert_sdpa_step_under_offload():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(attn_implementation="sdpa", vocab_size=100, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertModel(cfg)
    model2 = copy.deepcopy(model)
    ids = torch.randint(0, 100, (3, 16))
    am = torch.ones(3, 16, dtype=torch.long)
    am[1, 10:] = 0
    am[2, 5:] = 0
    w = torch.randn(3, 16, 64)
    out = model(input_ids=ids, attention_mask=am).last_hidden_state
    (out * w).sum().backward()
    with ct.offload() as rep:
        out2 = model2(input_ids=ids, attention_mask=am).last_hidden_state
        (out2 * w).sum().backward()
    st = rep.ops["scaled_dot_product_attention"]
    assert st.canna == 2 and st.backward == 2 and st.fallback == 0, rep
    assert torch.linalg.norm(out2 - out) <= 1e-4 * torch.linalg.norm(out)
    for (n, p), p2 in zip(model.named_parameters(), model2.parameters()):
        if p.grad is not None and "key.bias" not in n:   # key.bias: its gradient is 0 in exact arithmetic
            assert torch.linalg.norm(p2.grad - p.grad) <= 1e-4 * torch.linalg.norm(p.grad), n


def test_tensorflow_gradient_tape_and_tf_function():
    tf = pytest.importorskip("tensorflow")
    import canna_dl.tf as ctf
    q, k, v = (t.detach() for t in _qkv(lq=7, lk=9))
    m = _bool_mask(7, 9)
    tq, tk, tv = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=m)
    gr = torch.autograd.grad((ref * ref).sum(), (tq, tk, tv))
    xs = [tf.constant(t.numpy()) for t in (q, k, v)]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = ctf.scaled_dot_product_attention(*xs, tf.constant(m.numpy()))
        loss = tf.reduce_sum(y * y)
    g = tape.gradient(loss, xs)
    np.testing.assert_allclose(y.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    for a, b in zip(g, gr):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)

    @tf.function
    def step(a, b, c):
        with tf.GradientTape() as tape:
            tape.watch([a, b, c])
            y = ctf.scaled_dot_product_attention(a, b, c, is_causal=True)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, [a, b, c])
    y, g = step(*xs)
    assert y.shape == (2, 4, 7, 16)
    tq.grad = None
    ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    gr = torch.autograd.grad((ref * ref).sum(), (tq, tk, tv))
    for a, b in zip(g, gr):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_jax_grad_and_jit():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cj
    q, k, v = (t.detach() for t in _qkv(lq=7, lk=9, dtype=torch.float32))
    m = _bool_mask(7, 9)
    tq, tk, tv = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=m)
    gr = torch.autograd.grad((ref * ref).sum(), (tq, tk, tv))

    def loss(a, b, c):
        return jnp.sum(cj.scaled_dot_product_attention(a, b, c, jnp.asarray(m.numpy())) ** 2)
    args = [jnp.asarray(t.numpy()) for t in (q, k, v)]
    for f in (jax.grad(loss, argnums=(0, 1, 2)), jax.jit(jax.grad(loss, argnums=(0, 1, 2)))):
        g = f(*args)
        for a, b in zip(g, gr):
            np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama-gqa"])
@pytest.mark.parametrize("padded", [False, True], ids=["causal", "causal+padding"])
@pytest.mark.usefixtures("function_level")
def test_huggingface_causal_lm_sdpa_step_under_offload(arch, padded):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if arch == "gpt2":
        model = T.GPT2LMHeadModel(T.GPT2Config(attn_implementation="sdpa", vocab_size=100, n_embd=64, n_layer=2,
                                               n_head=4, n_positions=64, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))
    else:
        model = T.LlamaForCausalLM(T.LlamaConfig(attn_implementation="sdpa", vocab_size=100, hidden_size=64,
                                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                 intermediate_size=128, max_position_embeddings=64))
    model2 = copy.deepcopy(model)
    ids = torch.randint(0, 100, (2, 12))
    am = None
    if padded:
        am = torch.ones(2, 12, dtype=torch.long)
        am[1, 8:] = 0
    loss = model(input_ids=ids, attention_mask=am, labels=ids).loss
    loss.backward()
    with ct.offload() as rep:
        loss2 = model2(input_ids=ids, attention_mask=am, labels=ids).loss
        loss2.backward()
    st = rep.ops["scaled_dot_product_attention"]
    assert st.canna == 2 and st.fallback == 0, rep
    assert abs(float(loss2 - loss)) <= 1e-4 * abs(float(loss))
    for (n, p), p2 in zip(model.named_parameters(), model2.parameters()):
        if p.grad is not None and float(p.grad.norm()) > 1e-8:
            assert torch.linalg.norm(p2.grad - p.grad) <= 1e-4 * torch.linalg.norm(p.grad), n


@pytest.mark.parametrize("lq,lk", [(0, 5), (4, 0)], ids=["no queries", "no keys"])
def test_empty_lengths(lq, lk):
    q, k, v = _qkv(lq=lq, lk=lk)
    out = ct.scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref)
    g = torch.autograd.grad(out.sum(), (q, k, v), allow_unused=True)
    for a in g:
        assert a is None or (a == 0).all()
