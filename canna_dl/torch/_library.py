"""canna's ops as ``torch.library.custom_op`` operators in the ``canna`` namespace
(``torch.ops.canna.add``, ...): the path ``torch.compile`` / ``torch.export`` take
(``register_fake`` gives shapes and dtypes so Dynamo traces them without graph breaks;
``register_autograd`` gives the backward, made of canna's backward ops, which AOTAutograd traces
into the backward graph). Source of the API: ``torch/_library/custom_ops.py``
(``custom_op``, ``register_fake``, ``register_autograd``; PyTorch's "Python Custom Operators" tutorial).

Forward ops (the differentiable ones; ``canna_dl.torch`` routes to them when compiling)::

    matmul(self, other)        linear(input, weight, bias?)
    (add, sub, mul, div — with their Python-number variants add_scalar, radd_scalar, sub_scalar,
    rsub_scalar, ... —, pow, relu, silu, sigmoid, tanh, log, exp, neg, sqrt, gelu, softmax,
    log_softmax and their backward ops are generated from their registry entries:
    canna_dl/torch/_generated.py)
    layer_norm(input, int[] normalized_shape, weight?, bias?, float eps) -> (out, mean, rstd)
    rms_norm(input, int[] normalized_shape, weight?, float? eps) -> (out, rstd)
    conv2d(input, weight, bias?, int[2] stride, int[2] padding, int[2] dilation, int groups)
    max_pool2d(self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode) -> (out, indices)
    cross_entropy(input, target, weight?, int ignore_index, str reduction, float label_smoothing) -> (loss, log_prob)
    nll_loss(input, target, weight?, int ignore_index, str reduction) -> (loss, total_weight)
    sum / mean(self, int[]? dim, bool keepdim, ScalarType? dtype)
    cast(self, ScalarType dtype)

Backward ops (``*_backward``, ``sum_to_size``): each calls the kernel of the same name in
:mod:`kernels.backward`. Gradients not requested by ``output_mask`` are returned as empty
(``[0]``-shaped) tensors: a custom op cannot return None.

The forward ops that also return saved statistics (layer_norm, rms_norm, max_pool2d,
cross_entropy, nll_loss) mirror ATen's ``native_*`` ops; ``canna_dl.torch`` returns their first
output.
"""
from __future__ import annotations

import torch

import kernels
from kernels import backward as kbw
from kernels.ops import nn as _nnrules

from . import _functions  # noqa: F401  (the hand-written Functions; it makes the generated ops too)
from ._common import NoTorchFunction, plain

_NS = "canna"
OPS: dict = {}


def _op(name, schema, impl, fake, backward=None, setup=None):
    def run(*args):
        with NoTorchFunction():
            return impl(*args)
    run.__name__ = name
    op = torch.library.custom_op(f"{_NS}::{name}", run, mutates_args=(), schema=schema)
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup)
    OPS[name] = op
    return op


def _empty(like):
    return like.new_empty((0,))


def _sym_bool(m):
    return [bool(v) for v in m]


def _reduce(g, shape, dtype):
    """A gradient reduced to an operand's shape and dtype with canna ops (traceable)."""
    if tuple(g.shape) != tuple(shape):
        g = torch.ops.canna.sum_to_size(g, list(shape))
    if g.dtype != dtype:
        g = torch.ops.canna.cast(g, dtype)
    return g


# ---------------------------------------------------------------------------------------------
# fake (meta) implementations: shapes and dtypes




def _stat_shape(x, ns):
    k = len(ns)
    return (*x.shape[: x.dim() - k], *((1,) * k))


def _fake_layer_norm(x, ns, w, b, eps):
    return x.new_empty(x.shape), x.new_empty(_stat_shape(x, ns)), x.new_empty(_stat_shape(x, ns))


def _fake_rms_norm(x, ns, w, eps):
    sdt = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return x.new_empty(x.shape), x.new_empty(_stat_shape(x, ns), dtype=sdt)


_conv_out, _pool_out = _nnrules.conv_out, _nnrules.pool_out   # the registry's rules (kernels/ops/nn.py)


def _fake_conv2d(x, w, b, stride, padding, dilation, groups):
    oh = _conv_out(x.shape[-2], w.shape[2], stride[0], padding[0], dilation[0])
    ow = _conv_out(x.shape[-1], w.shape[3], stride[1], padding[1], dilation[1])
    if x.dim() == 3:
        return x.new_empty((w.shape[0], oh, ow))
    return x.new_empty((x.shape[0], w.shape[0], oh, ow))


def _fake_max_pool2d(x, k, s, p, d, ceil):
    oh = _pool_out(x.shape[-2], k[0], s[0], p[0], d[0], ceil)
    ow = _pool_out(x.shape[-1], k[1], s[1], p[1], d[1], ceil)
    shape = (*x.shape[:-2], oh, ow)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def _fake_cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing):
    loss = x.new_empty(target.shape if reduction == "none" else ())
    return loss, x.new_empty(x.shape)


def _fake_nll_loss(x, target, weight, ignore_index, reduction):
    return x.new_empty(target.shape if reduction == "none" else ()), x.new_empty(())


def _reduced_shape(x, dim, keepdim):
    nd = x.dim()
    dims = set(range(nd)) if dim is None else {d % nd if nd else 0 for d in dim}
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(x.shape))
    return tuple(n for i, n in enumerate(x.shape) if i not in dims)


def _fake_sum(x, dim, keepdim, dtype):
    rdt = dtype if dtype is not None else (x.dtype if x.dtype.is_floating_point else torch.int64)
    return x.new_empty(_reduced_shape(x, dim, keepdim), dtype=rdt)


def _fake_mean(x, dim, keepdim, dtype):
    return x.new_empty(_reduced_shape(x, dim, keepdim), dtype=dtype if dtype is not None else x.dtype)


def _fake_cast(x, dtype):
    return x.new_empty(x.shape, dtype=dtype)


def _fake_sum_to_size(x, size):
    return x.new_empty(tuple(size))


def _fake_grad_like(g, x, *args):
    return x.new_empty(x.shape, dtype=torch.promote_types(g.dtype, x.dtype))


def _fake_grad_input(g, x, *args):
    return x.new_empty(x.shape)


# ---------------------------------------------------------------------------------------------
# autograd of the forward ops (traceable: canna custom ops and canna_dl.torch's routing functions)



def _setup_layer_norm(ctx, inputs, output):
    x, ns, w, b, eps = inputs
    ctx.ns = list(ns)
    ctx.save_for_backward(x, w, b, output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])


def _bw_layer_norm(ctx, g, _gm, _gr):
    x, w, b, mean, rstd = ctx.saved_tensors
    gx, gw, gb = torch.ops.canna.layer_norm_backward(g, x, ctx.ns, mean, rstd, w, b, [True, w is not None,
                                                                                         b is not None])
    return gx, None, (gw if w is not None else None), (gb if b is not None else None), None


def _setup_rms_norm(ctx, inputs, output):
    x, ns, w, eps = inputs
    ctx.ns = list(ns)
    ctx.save_for_backward(x, w, output[1])
    ctx.mark_non_differentiable(output[1])


def _bw_rms_norm(ctx, g, _gr):
    x, w, rstd = ctx.saved_tensors
    gx, gw = torch.ops.canna.rms_norm_backward(g, x, ctx.ns, rstd, w)
    return gx, None, (gw if w is not None else None), None


def _setup_conv2d(ctx, inputs, output):
    x, w, b, stride, padding, dilation, groups = inputs
    ctx.geom = (list(stride), list(padding), list(dilation), groups)
    ctx.has_b = b is not None
    ctx.save_for_backward(x, w)


def _bw_conv2d(ctx, g):
    x, w = ctx.saved_tensors
    gx, gw, gb = torch.ops.canna.conv2d_backward(g, x, w, *ctx.geom, [True, True, ctx.has_b])
    return gx, gw, (gb if ctx.has_b else None), None, None, None, None


def _setup_max_pool2d(ctx, inputs, output):
    x = inputs[0]
    ctx.geom = tuple(inputs[1:])
    ctx.save_for_backward(x, output[1])
    ctx.mark_non_differentiable(output[1])


def _bw_max_pool2d(ctx, g, _gi):
    x, idx = ctx.saved_tensors
    k, s, p, d, ceil = ctx.geom
    return torch.ops.canna.max_pool2d_backward(g, x, idx, list(k), list(s), list(p), list(d), ceil), None, None, \
        None, None, None


def _setup_cross_entropy(ctx, inputs, output):
    x, target, weight, ignore_index, reduction, ls = inputs
    ctx.args = (ignore_index, reduction, ls)
    ctx.save_for_backward(output[1], target, weight)
    ctx.mark_non_differentiable(output[1])


def _bw_cross_entropy(ctx, g, _glp):
    lp, target, weight = ctx.saved_tensors
    gx = torch.ops.canna.cross_entropy_backward(g, lp, target, weight, *ctx.args)
    return gx, None, None, None, None, None


def _setup_nll_loss(ctx, inputs, output):
    x, target, weight, ignore_index, reduction = inputs
    ctx.args = (ignore_index, reduction)
    ctx.save_for_backward(x, target, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _bw_nll_loss(ctx, g, _gtw):
    x, target, weight, tw = ctx.saved_tensors
    gx = torch.ops.canna.nll_loss_backward(g, x, target, weight, *ctx.args, tw)
    return gx, None, None, None, None


def _setup_reduce(ctx, inputs, output):
    x, dim, keepdim, dtype = inputs
    ctx.args = (list(x.shape), dim, keepdim)
    ctx.xdtype = x.dtype


def _bw_sum(ctx, g):
    gx = torch.ops.canna.sum_backward(g, *ctx.args)
    return _reduce(gx, gx.shape, ctx.xdtype), None, None, None


def _bw_mean(ctx, g):
    gx = torch.ops.canna.mean_backward(g, *ctx.args)
    return _reduce(gx, gx.shape, ctx.xdtype), None, None, None


def _setup_cast(ctx, inputs, output):
    ctx.xdtype = inputs[0].dtype


def _bw_cast(ctx, g):
    return torch.ops.canna.cast(g, ctx.xdtype) if g.dtype != ctx.xdtype else g, None


def _setup_sum_to_size(ctx, inputs, output):
    ctx.shape = inputs[0].shape


def _bw_sum_to_size(ctx, g):
    return g.expand(ctx.shape), None


# ---------------------------------------------------------------------------------------------
# implementations (the kernels; operands as plain tensors)

def _copy_if_alias(r, x):
    """A custom op must not return its input: sum_to_size of an already-reduced gradient."""
    return kernels.astype(r, r.dtype) if r is x else r


def _masked(mask, outs, likes):
    return tuple(o if (m and o is not None) else _empty(l) for m, o, l in zip(mask, outs, likes))


def _register():
    P = plain
    T = "Tensor"
    # arithmetic: generated from the registry entries (canna_dl/torch/_generated.py)
    _op("cast", f"({T} self, ScalarType dtype) -> {T}", lambda x, dt: kernels.astype(P(x), dt), _fake_cast,
        _bw_cast, _setup_cast)
    _op("sum_to_size", f"({T} self, SymInt[] size) -> {T}",
        lambda x, size: _copy_if_alias(kernels.sum_to_size(P(x), tuple(size)), P(x)), _fake_sum_to_size,
        _bw_sum_to_size, _setup_sum_to_size)
    # products
    # normalization
    _op("layer_norm", f"({T} input, int[] normalized_shape, {T}? weight, {T}? bias, float eps) -> ({T}, {T}, {T})",
        lambda x, ns, w, b, eps: kernels.native_layer_norm(P(x), ns, P(w), P(b), eps), _fake_layer_norm,
        _bw_layer_norm, _setup_layer_norm)
    _op("rms_norm", f"({T} input, int[] normalized_shape, {T}? weight, float? eps) -> ({T}, {T})",
        lambda x, ns, w, eps: kernels.native_rms_norm(P(x), ns, P(w), eps), _fake_rms_norm, _bw_rms_norm,
        _setup_rms_norm)
    # convolution, pooling
    _op("conv2d", f"({T} input, {T} weight, {T}? bias, int[2] stride, int[2] padding, int[2] dilation, int groups) "
        f"-> {T}", lambda x, w, b, st, pd, dl, g: kernels.conv2d(P(x), P(w), P(b), st, pd, dl, g), _fake_conv2d,
        _bw_conv2d, _setup_conv2d)
    _op("max_pool2d", f"({T} self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, "
        f"bool ceil_mode) -> ({T}, {T})",
        lambda x, k, s, p, d, c: kernels.max_pool2d_with_indices(P(x), k, s, p, d, c), _fake_max_pool2d,
        _bw_max_pool2d, _setup_max_pool2d)
    # losses
    _op("cross_entropy", f"({T} input, {T} target, {T}? weight, int ignore_index, str reduction, "
        f"float label_smoothing) -> ({T}, {T})",
        lambda x, t, w, ii, red, ls: kernels.native_cross_entropy(P(x), P(t), P(w), ii, red, ls),
        _fake_cross_entropy, _bw_cross_entropy, _setup_cross_entropy)
    _op("nll_loss", f"({T} input, {T} target, {T}? weight, int ignore_index, str reduction) -> ({T}, {T})",
        lambda x, t, w, ii, red: kernels.native_nll_loss(P(x), P(t), P(w), ii, red), _fake_nll_loss,
        _bw_nll_loss, _setup_nll_loss)
    # reductions
    _op("sum", f"({T} self, int[]? dim, bool keepdim, ScalarType? dtype) -> {T}",
        lambda x, dim, keepdim, dtype: kernels.sum(P(x), dim, keepdim, dtype=dtype), _fake_sum, _bw_sum,
        _setup_reduce)
    _op("mean", f"({T} self, int[]? dim, bool keepdim, ScalarType? dtype) -> {T}",
        lambda x, dim, keepdim, dtype: kernels.mean(P(x), dim, keepdim, dtype=dtype), _fake_mean, _bw_mean,
        _setup_reduce)

    # backward ops
    def ln_bw(g, x, ns, mean, rstd, w, b, mask):
        outs = kbw.layer_norm(P(g), P(x), ns, P(mean), P(rstd), P(w), P(b), output_mask=_sym_bool(mask))
        return _masked(mask, outs, (x, w if w is not None else x, b if b is not None else x))

    def ln_bw_fake(g, x, ns, mean, rstd, w, b, mask):
        pshape = tuple(ns)
        pdt = w.dtype if w is not None else x.dtype
        return (x.new_empty(x.shape) if mask[0] else _empty(x),
                x.new_empty(pshape, dtype=pdt) if mask[1] else _empty(x),
                x.new_empty(pshape, dtype=pdt) if mask[2] else _empty(x))
    _op("layer_norm_backward", f"({T} grad, {T} input, int[] normalized_shape, {T} mean, {T} rstd, {T}? weight, "
        f"{T}? bias, bool[3] output_mask) -> ({T}, {T}, {T})", ln_bw, ln_bw_fake)

    def rms_bw(g, x, ns, rstd, w):
        gx, gw = kbw.rms_norm(P(g), P(x), ns, P(rstd), P(w))
        return gx, (gw if gw is not None else _empty(x))

    def rms_bw_fake(g, x, ns, rstd, w):
        return x.new_empty(x.shape), (w.new_empty(w.shape) if w is not None else _empty(x))
    _op("rms_norm_backward", f"({T} grad, {T} input, int[] normalized_shape, {T} rstd, {T}? weight) -> ({T}, {T})",
        rms_bw, rms_bw_fake)

    def conv_bw(g, x, w, st, pd, dl, groups, mask):
        outs = kbw.conv2d(P(g), P(x), P(w), st, pd, dl, groups, output_mask=_sym_bool(mask))
        return _masked(mask, outs, (x, x, x))

    def conv_bw_fake(g, x, w, st, pd, dl, groups, mask):
        return (x.new_empty(x.shape) if mask[0] else _empty(x), w.new_empty(w.shape) if mask[1] else _empty(x),
                x.new_empty((w.shape[0],)) if mask[2] else _empty(x))
    _op("conv2d_backward", f"({T} grad, {T} input, {T} weight, int[2] stride, int[2] padding, int[2] dilation, "
        f"int groups, bool[3] output_mask) -> ({T}, {T}, {T})", conv_bw, conv_bw_fake)
    _op("max_pool2d_backward", f"({T} grad, {T} self, {T} indices, int[2] kernel_size, int[2] stride, "
        f"int[2] padding, int[2] dilation, bool ceil_mode) -> {T}",
        lambda g, x, idx, k, s, p, d, c: kbw.max_pool2d(P(g), P(x), P(idx), k, s, p, d, c),
        lambda g, x, *a: x.new_empty(x.shape, dtype=g.dtype))
    _op("cross_entropy_backward", f"({T} grad, {T} log_prob, {T} target, {T}? weight, int ignore_index, "
        f"str reduction, float label_smoothing) -> {T}",
        lambda g, lp, t, w, ii, red, ls: kbw.cross_entropy(P(g), P(lp), P(t), P(w), ii, red, ls),
        lambda g, lp, *a: lp.new_empty(lp.shape))
    _op("nll_loss_backward", f"({T} grad, {T} input, {T} target, {T}? weight, int ignore_index, str reduction, "
        f"{T} total_weight) -> {T}",
        lambda g, x, t, w, ii, red, tw: kbw.nll_loss(P(g), P(x), P(t), P(w), ii, red, total_weight=P(tw)),
        lambda g, x, *a: x.new_empty(x.shape))

    _op("sum_backward", f"({T} grad, SymInt[] input_shape, int[]? dim, bool keepdim) -> {T}",
        lambda g, shape, dim, keepdim: kbw.sum(P(g), tuple(shape), dim, keepdim),
        lambda g, shape, dim, keepdim: g.new_empty(tuple(shape)))
    _op("mean_backward", f"({T} grad, SymInt[] input_shape, int[]? dim, bool keepdim) -> {T}",
        lambda g, shape, dim, keepdim: kbw.mean(P(g), tuple(shape), dim, keepdim),
        lambda g, shape, dim, keepdim: g.new_empty(tuple(shape)))


_register()
