"""Attention: registry entries (kernels/_registry.py, docs/DESIGN.md §11).

- ``flash_attention_score``: CANN's fused attention, one ``aclnnFlashAttentionScore`` call with
  its own arguments (hiascend.com aclnn page "aclnnFlashAttentionScore"): ``query`` / ``key`` /
  ``value`` in ``input_layout`` ("BNSD", "BSND", "BSH", "SBH"), optional ``pse`` (added to
  ``Q K^T`` *before* scaling: ``softmax(scale * (Q K^T + pse))``), ``drop_mask`` (one bit per
  score, with ``keep_prob`` < 1), ``atten_mask`` (bool / uint8, **1 = masked out**, the inverse
  of PyTorch's boolean ``attn_mask``), ``sparse_mode`` (0 the mask and the ``pre_tokens`` /
  ``next_tokens`` band, 1 the mask only, 2 causal from the top left, 3 causal from the bottom
  right, 4 a band from the bottom right); outputs ``softmax_max``, ``softmax_sum`` (each query row's
  max and sum of exponentials, ``[B, N1, Sq, 8]``), ``softmax_out`` (reserved, empty) and
  ``attention_out``. Its gradient is ``flash_attention_score_backward``
  (``aclnnFlashAttentionScoreGrad``), which recomputes the probabilities from the saved statistics.
  Grouped-query attention: ``key`` / ``value`` may have fewer heads than ``query`` (a divisor).
- ``scaled_dot_product_attention``: ``torch.nn.functional.scaled_dot_product_attention``'s
  arguments and result, composed of registered ops (``logical_not`` turns a boolean keep-mask
  into aclnn's convention; a float mask becomes ``pse`` on a pre-scaled query; ``is_causal`` is
  sparse mode 2); it is differentiated through them. ``offload()`` maps the torch function to it.
- ``logical_not``: ``aclnnLogicalNot`` (bool result).
"""
from __future__ import annotations

import math

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, define

F = C.FLOATS
BOOL, UINT8 = C.BOOL, C.UINT8
MASKS = (BOOL, UINT8)
LAYOUTS = ("BNSD", "BSND", "BSH", "SBH")
_INT_MAX = 2147483647


# ---------------------------------------------------------------------------------------------
# logical_not

define("logical_not", inputs=(Tensor("x", F + C.INTS + MASKS, diff=False),),
       shape=lambda x, **k: Spec(x.shape, BOOL), forward=Aclnn("LogicalNot"),
       torch=("torch.logical_not", "torch.Tensor.logical_not"),
       aten=(("aten::logical_not", "self:x"),),   # (native_functions.yaml; its composite reaches canna's key as logical_not.out)
       doc="``not x`` elementwise, a bool array (``torch.logical_not``; ``aclnnLogicalNot``): True where ``x`` is "
           "0 (NaN is true, so gives False). Dtypes: floats, int32, int64, bool, uint8.")


# ---------------------------------------------------------------------------------------------
# flash_attention_score

def _bnsd(api, name, t, layout, heads, d=None):
    """(B, N, S, D) of a query / key / value array in ``layout``."""
    nd = 3 if layout in ("BSH", "SBH") else 4
    if len(t.shape) != nd:
        raise ValueError(f"{api}: {name} must be {nd}-D for input_layout {layout!r}, got shape {tuple(t.shape)}")
    s = tuple(t.shape)
    if layout == "BNSD":
        return s
    if layout == "BSND":
        return (s[0], s[2], s[1], s[3])
    b, sq, h = (s[0], s[1], s[2]) if layout == "BSH" else (s[1], s[0], s[2])
    if d is None:
        if heads <= 0 or h % heads:
            raise ValueError(f"{api}: query's hidden size {h} is not a multiple of head_num {heads}")
        return (b, heads, sq, h // heads)
    if d <= 0 or h % d:
        raise ValueError(f"{api}: {name}'s hidden size {h} is not a multiple of the head dim {d}")
    return (b, h // d, sq, d)


def _bcast(api, name, t, full):
    if not 2 <= len(t.shape) <= 4:
        raise ValueError(f"{api}: {name} must have 2 to 4 dims ([Sq, Skv] to [B, N1, Sq, Skv]), got shape "
                         f"{tuple(t.shape)}")
    for n, w in zip(reversed(tuple(t.shape)), reversed(full)):
        if n not in (w, 1):
            raise ValueError(f"{api}: {name} has shape {tuple(t.shape)}, which does not broadcast to [B, N1, Sq, Skv] = "
                             f"{list(full)}")


def fa_dims(api, query, key, value, pse=None, atten_mask=None, head_num=0, input_layout="BNSD", sparse_mode=0):
    """(B, N1, N2, Sq, Skv, D) of a flash-attention call, checked (ValueError naming the problem;
    the simulator's phase 1 checks the same)."""
    if input_layout not in LAYOUTS:
        raise ValueError(f"{api}: input_layout must be one of {', '.join(LAYOUTS)}, not {input_layout!r}")
    if head_num <= 0:
        raise ValueError(f"{api}: head_num (the number of query heads) must be > 0, got {head_num}")
    b, n1, sq, d = _bnsd(api, "query", query, input_layout, head_num)
    if n1 != head_num:
        raise ValueError(f"{api}: head_num is {head_num} but query has {n1} heads (shape {tuple(query.shape)}, "
                         f"input_layout {input_layout!r})")
    kb, n2, skv, kd = _bnsd(api, "key", key, input_layout, head_num, d)
    vb, vn, vs, vd = _bnsd(api, "value", value, input_layout, head_num, d)
    if not (kb == vb == b):
        raise ValueError(f"{api}: query, key and value have batch sizes {b}, {kb}, {vb} (they must match)")
    if not (kd == vd == d):
        raise ValueError(f"{api}: query, key and value have head dims {d}, {kd}, {vd} (they must match)")
    if (n2, skv) != (vn, vs):
        raise ValueError(f"{api}: key has shape {tuple(key.shape)} but value has shape {tuple(value.shape)}")
    if n2 <= 0 or n1 % n2:
        raise ValueError(f"{api}: query has {n1} heads and key / value {n2}: the query heads must be a multiple of the "
                         "key / value heads (grouped-query attention)")
    full = (b, n1, sq, skv)
    if pse is not None:
        _bcast(api, "pse", pse, full)
    if atten_mask is not None and sparse_mode in (0, 1):
        _bcast(api, "atten_mask", atten_mask, full)
    return b, n1, n2, sq, skv, d


def _stat_dtype(q):
    return q.dtype if q.dtype is C.F64 else C.F32


def _fa_shape(query, key, value, pse=None, drop_mask=None, padding_mask=None, atten_mask=None, scale_value=1.0,
              keep_prob=1.0, pre_tokens=_INT_MAX, next_tokens=_INT_MAX, head_num=0, input_layout="BNSD",
              inner_precise=0, sparse_mode=0):
    b, n1, _, sq, _, _ = fa_dims("kernels.flash_attention_score", query, key, value, pse, atten_mask, head_num,
                                 input_layout, sparse_mode)
    st = Spec((b, n1, sq, 8), _stat_dtype(query))
    return st, st, Spec((0,), query.dtype), Spec(query.shape, query.dtype)


def _params(lib, keep, scale_value, keep_prob, pre_tokens, next_tokens, head_num, input_layout, inner_precise,
            sparse_mode):
    lay = C.ffi.new("char[]", input_layout.encode())
    keep.append(lay)
    return (C.ffi.NULL, scale_value, keep_prob, pre_tokens, next_tokens, head_num, lay, inner_precise, sparse_mode)


_FA_ATTRS = (Attr("scale_value", float, 1.0), Attr("keep_prob", float, 1.0), Attr("pre_tokens", int, _INT_MAX),
             Attr("next_tokens", int, _INT_MAX), Attr("head_num", int, 0), Attr("input_layout", str, "BNSD",
                                                                                choices=LAYOUTS),
             Attr("inner_precise", int, 0), Attr("sparse_mode", int, 0))
_FA_IN = (Tensor("query", F), Tensor("key", F), Tensor("value", F), Tensor("pse", F, optional=True),
          Tensor("drop_mask", (UINT8,), optional=True, diff=False),
          Tensor("padding_mask", F, optional=True, diff=False),
          Tensor("atten_mask", MASKS, optional=True, diff=False))


def _fa_backward(ops, g_max, g_sum, g_sout, g_out, query, key, value, pse, drop_mask, padding_mask, atten_mask,
                 softmax_max, softmax_sum, attention_out, **attrs):
    dq, dk, dv, dpse = ops.flash_attention_score_backward(query, key, value, g_out, pse, drop_mask, padding_mask,
                                                          atten_mask, softmax_max, softmax_sum, None, attention_out,
                                                          **attrs)
    return dq, dk, dv, (dpse if pse is not None else None)


define("flash_attention_score", inputs=_FA_IN, attrs=_FA_ATTRS,
       outputs=("softmax_max", "softmax_sum", "softmax_out", "attention_out"), diff_outputs=("attention_out",),
       shape=_fa_shape, forward=Aclnn("FlashAttentionScore", _params), backward=_fa_backward,
       save=("query", "key", "value", "pse", "drop_mask", "padding_mask", "atten_mask", "softmax_max", "softmax_sum",
             "attention_out"),
       doc="Fused attention (``aclnnFlashAttentionScore``; hiascend.com aclnn API page of that name):\n"
           "``attention_out = dropout(softmax(mask(scale_value * (query key^T + pse))), keep_prob) value`` per "
           "head.\n\n"
           "Args:\n    query, key, value: float16 / bfloat16 / float32 / float64 arrays of one dtype in "
           "``input_layout``: ``\"BNSD\"`` ``[B, N, S, D]``, ``\"BSND\"``, ``\"BSH\"`` / ``\"SBH\"`` (H = N * D, "
           "N of query = ``head_num``). key / value may have fewer heads (grouped-query attention).\n"
           "    pse: float, broadcastable to ``[B, N1, Sq, Skv]``, added before scaling.\n"
           "    drop_mask: uint8, one bit per score (bit ``((b N1 + n) Sq + i) Skv + j``, 1 = kept), used when "
           "``keep_prob`` < 1.\n    padding_mask: reserved by CANN (None).\n"
           "    atten_mask: bool / uint8 broadcastable to ``[B, N1, Sq, Skv]``, **1 = masked out**.\n"
           "    sparse_mode: 0 mask + band ``[i - pre_tokens, i + next_tokens]`` (no mask: none), 1 mask only, 2 "
           "causal (top left), 3 causal (bottom right), 4 band from the bottom right.\n\n"
           "Returns:\n    (softmax_max, softmax_sum, softmax_out, attention_out): the statistics ``[B, N1, Sq, 8]`` "
           "float32 (float64 for float64 inputs), an empty reserved array, and the result (query's shape and dtype). "
           "A query row with no allowed key gives 0 (as PyTorch).\n\n"
           "Raises:\n    ValueError: shapes that do not fit the layout, head_num, mismatched batch / head dims, "
           "query heads not a multiple of key heads, a mask that does not broadcast.\n    TypeError: dtypes.")


def _fa_grad_shape(query, key, value, dy, pse=None, *a, **k):
    return (Spec(query.shape, query.dtype), Spec(key.shape, key.dtype), Spec(value.shape, value.dtype),
            Spec(pse.shape if pse is not None else (0,), pse.dtype if pse is not None else query.dtype))


define("flash_attention_score_backward",
       inputs=(Tensor("query", F, diff=False), Tensor("key", F, diff=False), Tensor("value", F, diff=False),
               Tensor("dy", F, diff=False), Tensor("pse", F, optional=True, diff=False),
               Tensor("drop_mask", (UINT8,), optional=True, diff=False),
               Tensor("padding_mask", F, optional=True, diff=False),
               Tensor("atten_mask", MASKS, optional=True, diff=False),
               # optional in CANN's prototype; the simulator needs them (an error names them when absent)
               Tensor("softmax_max", F, optional=True, diff=False), Tensor("softmax_sum", F, optional=True, diff=False),
               Tensor("softmax_in", F, optional=True, diff=False), Tensor("attention_in", F, optional=True, diff=False)),
       attrs=_FA_ATTRS, outputs=("dq", "dk", "dv", "dpse"), shape=_fa_grad_shape,
       forward=Aclnn("FlashAttentionScoreGrad", _params), api="kernels.backward.flash_attention_score",
       doc="Gradient of :func:`kernels.flash_attention_score` (``aclnnFlashAttentionScoreGrad``): ``(dq, dk, dv, "
           "dpse)`` from the forward's inputs, ``dy`` (the gradient of ``attention_out``), its ``softmax_max`` / "
           "``softmax_sum`` and ``attention_out`` (``attention_in``); ``dpse`` is empty without ``pse``. "
           "``softmax_in`` is reserved (None).")


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention (PyTorch's arguments)

_SDPA = "scaled_dot_product_attention"


def _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    api = f"kernels.{_SDPA}"
    for n, t in (("query", query), ("key", key), ("value", value)):
        if len(t.shape) != 4:
            raise ValueError(f"{api}: {n} must be 4-D [batch, heads, length, head dim], got shape {tuple(t.shape)}")
    if dropout_p != 0.0:
        raise ValueError(f"{api}: dropout_p={dropout_p} is not supported (canna has no dropout mask op yet; use 0)")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{api}: attn_mask and is_causal=True cannot be given together (as PyTorch)")
    hq, hk = query.shape[1], key.shape[1]
    if hq != hk and not enable_gqa:
        raise ValueError(f"{api}: query has {hq} heads and key {hk}: pass enable_gqa=True for grouped-query attention")
    if query.shape[-1] != value.shape[-1]:
        raise ValueError(f"{api}: value's head dim {value.shape[-1]} differs from query's {query.shape[-1]} "
                         "(canna's fused attention takes one head dim)")
    is_bool = attn_mask is not None and _is_bool(attn_mask)
    qdt = C.canna_dl.dtype(query.dtype)
    if attn_mask is not None and not is_bool and C.canna_dl.dtype(attn_mask.dtype) is not qdt:
        raise TypeError(f"{api}: attn_mask has dtype {C.canna_dl.dtype(attn_mask.dtype).name}; expected bool or "
                        f"query's dtype {qdt.name}")
    fa_dims(api, query, key, value, None if is_bool else attn_mask, attn_mask if is_bool else None, query.shape[1],
            "BNSD", 0)


def _sdpa_shape(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return Spec(query.shape, query.dtype)


def _sdpa(ops, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    kw = dict(head_num=query.shape[1], input_layout="BNSD", pre_tokens=_INT_MAX, next_tokens=_INT_MAX)
    pse = mask = None
    if is_causal:
        kw["sparse_mode"] = 2        # leftUpCausal: key j <= query i, PyTorch's is_causal
    elif attn_mask is not None:
        if _is_bool(attn_mask):
            mask = ops.logical_not(attn_mask)       # PyTorch: True = take part; aclnn: 1 = masked out
        else:
            # PyTorch adds the float mask after scaling, aclnn adds pse before: scale the query instead
            pse = attn_mask
            query = ops.mul(query, s)
            s = 1.0
    return ops.flash_attention_score(query, key, value, pse, None, None, mask, scale_value=s, **kw)[3]


def _is_bool(t):
    return C.canna_dl.dtype(t.dtype) is BOOL


define(_SDPA, inputs=(Tensor("query", F), Tensor("key", F), Tensor("value", F),
                      Tensor("attn_mask", F + (BOOL,), optional=True, diff=False)),
       attrs=(Attr("dropout_p", float, 0.0), Attr("is_causal", bool, False), Attr("scale", float, None),
              Attr("enable_gqa", bool, False)),
       shape=_sdpa_shape, forward=_sdpa,
       # (no at_aten="aten::scaled_dot_product_attention": the aten level leaves it to PyTorch's
       # aten::_scaled_dot_product_flash_attention_for_cpu, faster than canna's composition here --
       # BERT-tiny's training step 1.11x plain PyTorch without it, 0.99x with it)
       torch=("torch.nn.functional.scaled_dot_product_attention",),
       doc="``torch.nn.functional.scaled_dot_product_attention`` on canna: ``softmax(query key^T * scale + mask) "
           "value`` over the last two dims of 4-D ``[batch, heads, length, head dim]`` arrays, through "
           ":func:`kernels.flash_attention_score` (layout BNSD).\n\n"
           "Args:\n    attn_mask: bool (True = take part, PyTorch's convention) or float (added to the scaled "
           "scores), broadcastable to ``[batch, heads, Lq, Lkv]``.\n    dropout_p: must be 0.\n"
           "    is_causal: query i attends to keys j <= i (top-left aligned, as PyTorch).\n"
           "    scale: default ``1 / sqrt(head dim)``.\n    enable_gqa: key / value may have fewer heads (a divisor "
           "of query's).\n\nReturns:\n    query's shape and dtype.\n\n"
           "Raises:\n    ValueError: not 4-D, dropout_p != 0, is_causal with a mask, heads that differ without "
           "enable_gqa, value's head dim not query's, a mask that does not broadcast.\n    TypeError: dtypes.")
