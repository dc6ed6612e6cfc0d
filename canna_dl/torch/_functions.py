"""The eager autograd shims: one ``torch.autograd.Function`` per differentiable op, whose forward
calls canna's kernel and whose backward calls canna's backward kernel (``kernels.backward.*``), and
the routing functions (``_matmul``, ``_softmax``, ...) that pick the path of a call (see ``_common``);
the arithmetic and the unary ops are generated from their registry entries
(``canna_dl/torch/_generated.py``).

Conventions of every Function:

- operands are handed to the kernels as :func:`_common.plain` tensors (no grad, exact
  ``torch.Tensor``: the same memory and version counter), the results are fresh torch tensors;
- what the backward needs is saved with ``ctx.save_for_backward``, so modifying a saved tensor in
  place makes the backward fail with PyTorch's version-counter error, as with native ops;
- gradients of broadcast operands are reduced to the operand's shape (``kernels.sum_to_size``) and
  converted to its dtype (``kernels.astype``) on canna, not by PyTorch's engine;
- double backward: add, sub, mul, div, matmul, linear, sum, mean and relu compute their backward
  with differentiable canna ops when it runs with ``create_graph=True`` (correct second-order
  gradients); the others tie their gradients to an error node (a clear error if differentiated
  again, see :func:`_common.once_differentiable_outputs`);
- every backward runs with ``__torch_function__`` disabled (an ``offload()`` block around
  ``loss.backward()`` must not see the kernels' own output allocations).
"""
from __future__ import annotations

import torch

import kernels
from kernels import backward as kbw

from . import _common as C
from ._common import AUTOGRAD, EAGER, NoTorchFunction, Tensor, grad_enabled, plain, route

Function = torch.autograd.Function
_ops = torch.ops.canna   # the custom ops (registered by _library, imported by the package)


# ---------------------------------------------------------------------------------------------
# gradient helpers (differentiable when the backward builds a graph)

class _SumToSize(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        r = kernels.sum_to_size(plain(x), shape)
        return r

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            return g.expand(ctx.shape), None


def _sum_to_size(x, shape):
    if tuple(x.shape) == tuple(shape):
        return x
    r = route("canna_dl.torch.sum_to_size", x)
    if r == EAGER:
        return kernels.sum_to_size(plain(x), shape)
    if r == AUTOGRAD:
        return _SumToSize.apply(x, tuple(shape))
    return _ops.sum_to_size(x, list(shape))


class _Cast(Function):
    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = x.dtype
        return kernels.astype(plain(x), dtype)

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            return _cast(g, ctx.dtype), None


def _cast(x, dtype):
    """``x`` converted to ``dtype`` on canna (``kernels.astype``), differentiable."""
    if x.dtype == dtype:
        return x
    r = route("canna_dl.torch.cast", x)
    if r == EAGER:
        return kernels.astype(plain(x), dtype)
    if r == AUTOGRAD:
        return _Cast.apply(x, dtype)
    return _ops.cast(x, dtype)


def _need(ctx, i):
    return ctx.needs_input_grad[i]


_bump = torch._C._increment_version


# ---------------------------------------------------------------------------------------------
# matrix products

# matmul: generated from its registry entry (kernels/ops/nn.py; its double backward too)
def _g(name):
    from kernels import get_op
    from . import _generated
    return _generated.function(get_op(name))


_matmul = _g("matmul")


_linear = _g("linear")   # generated from its registry entry (its double backward too)


# ---------------------------------------------------------------------------------------------
# activations

# generated from their registry entries (kernels/ops/elementwise.py; canna_dl/torch/_generated.py)
_relu, _gelu, _silu, _sigmoid, _tanh, _log, _exp, _neg, _sqrt = (
    _g(n) for n in ("relu", "gelu", "silu", "sigmoid", "tanh", "log", "exp", "neg", "sqrt"))
_relu_backward = _g("relu_backward")


def _generate_all():
    """Every generated entry's routing function and custom op now (not while torch.compile traces a
    backward that calls one of them)."""
    import kernels
    for op in kernels.registered_ops():
        if op.generate:
            _g(op.qualname)


_generate_all()


class _ReluInplace(Function):
    @staticmethod
    def forward(ctx, x):
        xd = plain(x)
        kernels.relu(xd, out=xd)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            (y,) = ctx.saved_tensors
            return _relu_backward(g, y)


def _relu_(x):
    api = "canna_dl.torch.relu_"
    r = route(api, x)
    if r == EAGER:
        xd = plain(x)
        kernels.relu(xd, out=xd)
        _bump((x,))
        return x
    C.check_grad_dtype(api, "input", x)
    if r == AUTOGRAD:
        return _ReluInplace.apply(x)
    raise NotImplementedError(f"{api}: in-place relu is not available under torch.compile or for tensor subclasses; "
                              "use relu(x)")


# softmax, log_softmax: generated from their registry entries (kernels/ops/nn.py)
_softmax, _log_softmax = _g("softmax"), _g("log_softmax")


# ---------------------------------------------------------------------------------------------
# normalization

def _shape_list(api, ns):
    if isinstance(ns, int) and not isinstance(ns, bool):
        return [ns]
    try:
        return [int(n) for n in ns]
    except TypeError:
        raise TypeError(f"{api}: normalized_shape must be an int or a sequence of ints, not {ns!r}") from None


class _LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, ns, w, b, eps):
        y, mean, rstd = kernels.native_layer_norm(plain(x), ns, plain(w), plain(b), eps)
        ctx.ns, ctx.has_w, ctx.has_b = ns, w is not None, b is not None
        ctx.save_for_backward(x, w, b, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            x, w, b, mean, rstd = ctx.saved_tensors
            mask = (_need(ctx, 0), _need(ctx, 2) and ctx.has_w, _need(ctx, 3) and ctx.has_b)
            gx, gw, gb = kbw.layer_norm(plain(g), plain(x), ctx.ns, mean, rstd, plain(w), plain(b), output_mask=mask)
            gx, gw, gb = C.once_differentiable_outputs("canna::layer_norm", (gx, gw, gb), (g, x, w, b))
            return gx, None, gw, gb, None


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    api = "canna_dl.torch.nn.functional.layer_norm"
    ns = _shape_list(api, normalized_shape)
    r = route(api, x, weight, bias)
    if r == EAGER:
        return kernels.layer_norm(plain(x), ns, plain(weight), plain(bias), eps)
    for name, t in (("input", x), ("weight", weight), ("bias", bias)):
        C.check_float(api, name, t)
    if r == AUTOGRAD:
        return _LayerNorm.apply(x, ns, weight, bias, eps)
    return _ops.layer_norm(x, ns, weight, bias, float(eps))[0]


class _RmsNorm(Function):
    @staticmethod
    def forward(ctx, x, ns, w, eps):
        y, rstd = kernels.native_rms_norm(plain(x), ns, plain(w), eps)
        ctx.ns = ns
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            x, w, rstd = ctx.saved_tensors
            gx, gw = kbw.rms_norm(plain(g), plain(x), ctx.ns, rstd, plain(w))
            gx, gw = C.once_differentiable_outputs("canna::rms_norm", (gx, gw), (g, x, w))
            return (gx if _need(ctx, 0) else None), None, (gw if _need(ctx, 2) else None), None


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    api = "canna_dl.torch.nn.functional.rms_norm"
    ns = _shape_list(api, normalized_shape)
    r = route(api, x, weight)
    if r == EAGER:
        return kernels.rms_norm(plain(x), ns, plain(weight), eps)
    for name, t in (("input", x), ("weight", weight)):
        C.check_float(api, name, t)
    if r == AUTOGRAD:
        return _RmsNorm.apply(x, ns, weight, eps)
    return _ops.rms_norm(x, ns, weight, None if eps is None else float(eps))[0]


# ---------------------------------------------------------------------------------------------
# convolution and pooling

class _Conv2d(Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        ctx.geom = (stride, padding, dilation, groups)
        ctx.has_b = b is not None
        ctx.save_for_backward(x, w)
        return kernels.conv2d(plain(x), plain(w), plain(b), stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            x, w = ctx.saved_tensors
            mask = (_need(ctx, 0), _need(ctx, 1), _need(ctx, 2) and ctx.has_b)
            gx, gw, gb = kbw.conv2d(plain(g), plain(x), plain(w), *ctx.geom, output_mask=mask)
            gx, gw, gb = C.once_differentiable_outputs("canna::conv2d", (gx, gw, gb), (g, x, w))
            return gx, gw, gb, None, None, None, None


def _pair(api, name, v):
    if isinstance(v, int) and not isinstance(v, bool):
        return [v, v]
    try:
        t = [int(i) for i in v]
    except TypeError:
        raise TypeError(f"{api}: {name} must be an int or a pair of ints, not {v!r}") from None
    return t * 2 if len(t) == 1 else t


def _conv_padding(api, padding, w, stride, dilation):
    """Explicit padding for the custom op (``"same"`` / ``"valid"`` resolved; the eager paths let
    the kernel resolve them)."""
    if padding == "valid":
        return [0, 0]
    if padding == "same":
        st, dl = _pair(api, "stride", stride), _pair(api, "dilation", dilation)
        if st != [1, 1]:
            raise ValueError(f"{api}: padding='same' is not supported for strided convolutions")
        pads = []
        for k, d in zip(w.shape[2:], dl):
            total = d * (k - 1)
            if total % 2:
                raise NotImplementedError(f"{api}: padding='same' needs asymmetric padding here; pass explicit padding")
            pads.append(total // 2)
        return pads
    return _pair(api, "padding", padding)


def _conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    api = "canna_dl.torch.nn.functional.conv2d"
    r = route(api, x, w, b)
    if r == EAGER:
        return kernels.conv2d(plain(x), plain(w), plain(b), stride, padding, dilation, groups)
    for name, t in (("input", x), ("weight", w), ("bias", b)):
        C.check_float(api, name, t)
    if r == AUTOGRAD:
        return _Conv2d.apply(x, w, b, stride, padding, dilation, groups)
    return _ops.conv2d(x, w, b, _pair(api, "stride", stride), _conv_padding(api, padding, w, stride, dilation),
                       _pair(api, "dilation", dilation), int(groups))


class _MaxPool2d(Function):
    @staticmethod
    def forward(ctx, x, k, s, p, d, ceil):
        y, idx = kernels.max_pool2d_with_indices(plain(x), k, s, p, d, ceil)
        ctx.geom = (k, s, p, d, ceil)
        ctx.save_for_backward(x, idx)
        ctx.mark_non_differentiable(idx)
        # no zero-filled gradient for the indices (a [N, C, H, W] int64 fill per backward)
        ctx.set_materialize_grads(False)
        return y, idx

    @staticmethod
    def backward(ctx, g, _gidx):
        if g is None:
            return None, None, None, None, None, None
        with NoTorchFunction():
            x, idx = ctx.saved_tensors
            gx = kbw.max_pool2d(plain(g), plain(x), idx, *ctx.geom)
            gx = C.once_differentiable_outputs("canna::max_pool2d", gx, (g, x))
            return gx, None, None, None, None, None


def _pool_stride(api, kernel_size, stride):
    if stride is None or (not isinstance(stride, int) and len(stride) == 0):
        return _pair(api, "kernel_size", kernel_size)
    return _pair(api, "stride", stride)


def _max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    api = "canna_dl.torch.nn.functional.max_pool2d"
    r = route(api, x)
    if r == EAGER:
        if return_indices:
            return kernels.max_pool2d_with_indices(plain(x), kernel_size, stride, padding, dilation, ceil_mode)
        return kernels.max_pool2d(plain(x), kernel_size, stride, padding, dilation, ceil_mode)
    C.check_float(api, "input", x)
    if r == AUTOGRAD:
        y, idx = _MaxPool2d.apply(x, kernel_size, stride, padding, dilation, ceil_mode)
    else:
        y, idx = _ops.max_pool2d(x, _pair(api, "kernel_size", kernel_size), _pool_stride(api, kernel_size, stride),
                                 _pair(api, "padding", padding), _pair(api, "dilation", dilation), bool(ceil_mode))
    return (y, idx) if return_indices else y


# ---------------------------------------------------------------------------------------------
# losses

def _loss_checks(api, x, target, weight):
    C.check_float(api, "input", x)
    C.check_float(api, "weight", weight)
    if not isinstance(target, Tensor):
        raise TypeError(f"{api}: target must be a tensor of class indices, not {type(target).__name__}")
    if weight is not None and weight.requires_grad and grad_enabled():
        raise NotImplementedError(f"{api}: gradients with respect to weight are not supported (nor by PyTorch); "
                                  "pass weight.detach()")


class _CrossEntropy(Function):
    @staticmethod
    def forward(ctx, x, target, weight, ignore_index, reduction, label_smoothing):
        loss, lp = kernels.native_cross_entropy(plain(x), plain(target), plain(weight), ignore_index, reduction,
                                                label_smoothing)
        ctx.args = (ignore_index, reduction, label_smoothing)
        ctx.save_for_backward(lp, target, weight)
        return loss

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            lp, target, weight = ctx.saved_tensors
            gx = kbw.cross_entropy(plain(g), lp, target, plain(weight), *ctx.args)
            gx = C.once_differentiable_outputs("canna::cross_entropy", gx, (g, lp))
            return gx, None, None, None, None, None


def _cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    api = "canna_dl.torch.nn.functional.cross_entropy"
    r = route(api, x, target, weight)
    if r == EAGER:
        return kernels.cross_entropy(plain(x), target, plain(weight), ignore_index, reduction, label_smoothing)
    _loss_checks(api, x, target, weight)
    if r == AUTOGRAD:
        return _CrossEntropy.apply(x, target, weight, ignore_index, reduction, label_smoothing)
    return _ops.cross_entropy(x, target, weight, int(ignore_index), reduction, float(label_smoothing))[0]


class _NllLoss(Function):
    @staticmethod
    def forward(ctx, x, target, weight, ignore_index, reduction):
        loss, tw = kernels.native_nll_loss(plain(x), plain(target), plain(weight), ignore_index, reduction)
        ctx.args = (ignore_index, reduction)
        ctx.save_for_backward(x, target, weight, tw)
        return loss

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            x, target, weight, tw = ctx.saved_tensors
            gx = kbw.nll_loss(plain(g), plain(x), target, plain(weight), *ctx.args, total_weight=tw)
            gx = C.once_differentiable_outputs("canna::nll_loss", gx, (g,))
            return gx, None, None, None, None


def _nll_loss(x, target, weight=None, ignore_index=-100, reduction="mean"):
    api = "canna_dl.torch.nn.functional.nll_loss"
    r = route(api, x, target, weight)
    if r == EAGER:
        return kernels.nll_loss(plain(x), target, plain(weight), ignore_index, reduction)
    _loss_checks(api, x, target, weight)
    if r == AUTOGRAD:
        return _NllLoss.apply(x, target, weight, ignore_index, reduction)
    return _ops.nll_loss(x, target, weight, int(ignore_index), reduction)[0]


# ---------------------------------------------------------------------------------------------
# reductions

def _dims(dim):
    """dim as the kernels and the custom ops take it: None (all) or a list of ints."""
    if dim is None:
        return None
    if hasattr(dim, "__index__") and not isinstance(dim, bool):
        return [dim.__index__()]
    d = [int(i) for i in dim]
    return d if d else None


class _ReduceBackward(Function):
    """The gradient of sum / mean (``g`` broadcast back to the input's shape, divided by the count
    for mean) as a Function of ``g``, so that sum and mean are twice differentiable: its own
    gradient is the same reduction of ``gg``."""

    @staticmethod
    def forward(ctx, g, shape, dim, keepdim, is_mean):
        ctx.args = (dim, keepdim, is_mean)
        fn = kbw.mean if is_mean else kbw.sum
        return fn(plain(g), shape, dim, keepdim)

    @staticmethod
    def backward(ctx, gg):
        with NoTorchFunction():
            dim, keepdim, is_mean = ctx.args
            r = (_mean if is_mean else _sum)(gg, dim, keepdim)
            return r, None, None, None, None


def _reduce_backward(g, shape, dim, keepdim, is_mean, dtype):
    if grad_enabled() and g.requires_grad:
        gx = _ReduceBackward.apply(g, shape, dim, keepdim, is_mean)
    else:
        gx = (kbw.mean if is_mean else kbw.sum)(plain(g), shape, dim, keepdim)
    return _cast(gx, dtype) if gx.dtype != dtype else gx


class _Sum(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, dtype):
        ctx.args = (tuple(x.shape), dim, keepdim, x.dtype)
        return kernels.sum(plain(x), dim, keepdim, dtype=dtype)

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            shape, dim, keepdim, dtype = ctx.args
            return _reduce_backward(g, shape, dim, keepdim, False, dtype), None, None, None


class _Mean(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, dtype):
        ctx.args = (tuple(x.shape), dim, keepdim, x.dtype)
        return kernels.mean(plain(x), dim, keepdim, dtype=dtype)

    @staticmethod
    def backward(ctx, g):
        with NoTorchFunction():
            shape, dim, keepdim, dtype = ctx.args
            return _reduce_backward(g, shape, dim, keepdim, True, dtype), None, None, None


def _reduction(api, fn, custom, kernel, x, dim, keepdim, dtype):
    dims = _dims(dim)
    r = route(api, x)
    if r == EAGER:
        return kernel(plain(x), dims, keepdim, dtype=dtype)
    C.check_arith(api, "input", x)
    C.check_grad_dtype(api, "input", x)
    if r == AUTOGRAD:
        return fn.apply(x, dims, keepdim, dtype)
    return custom(x, dims, bool(keepdim), dtype)


def _sum(x, dim=None, keepdim=False, dtype=None):
    return _reduction("canna_dl.torch.sum", _Sum, _ops.sum, kernels.sum, x, dim, keepdim, dtype)


def _mean(x, dim=None, keepdim=False, dtype=None):
    return _reduction("canna_dl.torch.mean", _Mean, _ops.mean, kernels.mean, x, dim, keepdim, dtype)
