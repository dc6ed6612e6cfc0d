"""Neural-network ops (``torch.nn.functional`` names and signatures): softmax family, layer and RMS
normalization, matrix products, convolution, max pooling, losses, and their backward kernels.

The aclnn op behind each follows torch_npu's op-plugin (see ``acl_rt/_cdef/nn_funcs.h``):
``linear`` → ``aclnnAddmm`` (``aclnnMm`` without bias) on the transposed weight, ``conv2d`` →
``aclnnConvolution``, ``max_pool2d`` → ``aclnnMaxPool2dWithIndices``, ``cross_entropy`` →
``aclnnCrossEntropyLoss`` for ``[N, C]`` inputs (``aclnnLogSoftmax`` + ``aclnnNLLLoss2d`` for
``[N, C, d1, ...]``).
"""
from __future__ import annotations

import builtins
import math
import operator

import canna_dl
from canna_dl import DeviceArray

from . import _core as C
from ._core import FLOATS, F16, BF16, F32, INT32, INT64, ACL_FORMAT_NCHW

__all__ = ["softmax", "log_softmax", "layer_norm", "native_layer_norm", "rms_norm", "native_rms_norm", "matmul",
           "linear", "conv2d", "max_pool2d", "max_pool2d_with_indices", "nll_loss", "native_nll_loss",
           "cross_entropy", "native_cross_entropy"]

_CUBE_KEEP_DTYPE = 0   # cubeMathType: compute in the operands' dtype (no HF32 / FP16 shortcuts)
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _float_arrays(api, *named):
    out = []
    for name, x in named:
        if x is None:
            out.append(None)
            continue
        a = C.as_array(api, name, x)
        C.check_dtype(api, name, a.dtype, FLOATS, "floating dtypes")
        out.append(a)
    return out


def _same_dtype(api, *named):
    first = None
    for name, a in named:
        if a is None:
            continue
        if first is None:
            first = (name, a)
        elif a.dtype is not first[1].dtype:
            raise TypeError(f"{api}: {name} has dtype {a.dtype.name} but {first[0]} has {first[1].dtype.name} "
                            "(they must match)")


def _max_dims(api, *arrays):
    for a in arrays:
        if a is not None and a.ndim > C.MAX_DIMS:
            raise ValueError(f"{api}: at most {C.MAX_DIMS} dimensions are supported, got {a.ndim}")


def _view_out(o, arr):
    """An Out the kernel writes through a view ``arr`` of ``o.arr`` (same memory); ``o`` is
    finished by the caller with :func:`_finish_views`."""
    return C.Out(arr, None, sync=o.sync)


def _finish_views(*outs):
    for o in outs:
        if o is not None and o.post is not None:
            o.obj = o.post(o.arr)
        elif o is not None and o.stage is not None:
            C.finish_out(o, None)


def _kernel_outs(outs):
    """Outs as the kernel sees them: the post-conversions / staging copies are done afterwards by
    :func:`_finish_views` (so that a view of an output can be launched)."""
    return [None if o is None else C.Out(o.arr, None, sync=o.sync) for o in outs]


def _run(name, s, inputs, outs, make_args, key_extra=(), fmt=C.ACL_FORMAT_ND, views=None):
    """run_op on ``outs`` (or on ``views`` of them, DeviceArrays of the same memory), then finish
    the outs (conversions, staging copies)."""
    ko = _kernel_outs(outs)
    if views is not None:
        ko = [None if k is None else C.Out(k.arr if v is None else v, None, sync=k.sync) for k, v in zip(ko, views)]
    C.run_op(name, s, inputs, ko, make_args, key_extra, fmt)
    _finish_views(*outs)


# ---------------------------------------------------------------------------------------------
# softmax family

def _softmax(api, name, x, dim, dtype, out, stream):
    kind = C.result_kind(x) if out is None else None
    (a,) = _float_arrays(api, ("x", x))
    _max_dims(api, a)
    if dtype is not None:
        dt = canna_dl.dtype(dtype)
        C.check_dtype(api, "dtype", dt, FLOATS)
        if dt is not a.dtype:
            from ._elementwise import astype
            a = astype(a, dt, stream=stream)
    d = C.wrap_dim(api, dim, a.ndim)
    s = C.device_and_stream(api, (a,), stream)
    o = C.out_or_new(api, out, kind, a.shape, a.dtype, s, (("x", a),))
    _run(name, s, (a,), (o,), lambda lib, t, keep: (t[0], d, t[1]), (d,))
    return o.obj


def softmax(x, dim=-1, *, dtype=None, out=None, stream=None):
    """``exp(x) / sum(exp(x))`` along ``dim`` (``torch.nn.functional.softmax``; ``aclnnSoftmax``),
    computed stably (max subtracted) with double accumulators.

    Args:
        x: a floating array (float32, float64, float16, bfloat16) of any kind (see :func:`kernels.add`).
        dim: the dim to normalize (default the last).
        dtype: cast ``x`` to this floating dtype first (as PyTorch's ``dtype=``).
        out: an array of ``x``'s shape and the result dtype.

    Raises:
        TypeError: a non-floating dtype. AxisError: ``dim`` out of range. ValueError: a bad ``out``.
    """
    return _softmax("kernels.softmax", "Softmax", x, dim, dtype, out, stream)


def log_softmax(x, dim=-1, *, dtype=None, out=None, stream=None):
    """``x - log(sum(exp(x)))`` along ``dim`` (``torch.nn.functional.log_softmax``;
    ``aclnnLogSoftmax``). See :func:`softmax`."""
    return _softmax("kernels.log_softmax", "LogSoftmax", x, dim, dtype, out, stream)


def _softmax_bw(api, name, grad_out, y, dim, out, stream):
    kind = C.result_kind(grad_out, y) if out is None else None
    g, ya = _float_arrays(api, ("grad_out", grad_out), ("y", y))
    _max_dims(api, ya)
    if g.shape != ya.shape:
        raise ValueError(f"{api}: grad_out has shape {g.shape} but y has shape {ya.shape} (they must match)")
    d = C.wrap_dim(api, dim, ya.ndim)
    dtype = C.promote_types(g.dtype, ya.dtype)
    s = C.device_and_stream(api, (g, ya), stream)
    o = C.out_or_new(api, out, kind, ya.shape, dtype, s, (("grad_out", g), ("y", ya)))
    _run(name, s, (g, ya), (o,), lambda lib, t, keep: (t[0], t[1], d, t[2]), (d,))
    return o.obj


def softmax_backward(grad_out, y, dim=-1, *, out=None, stream=None):
    """Gradient of :func:`softmax` from its **output** ``y``: ``y * (grad_out - sum(grad_out * y))``
    along ``dim`` (``aclnnSoftmaxBackward``)."""
    return _softmax_bw("kernels.backward.softmax", "SoftmaxBackward", grad_out, y, dim, out, stream)


def log_softmax_backward(grad_out, y, dim=-1, *, out=None, stream=None):
    """Gradient of :func:`log_softmax` from its **output** ``y``: ``grad_out - exp(y) *
    sum(grad_out)`` along ``dim`` (``aclnnLogSoftmaxBackward``)."""
    return _softmax_bw("kernels.backward.log_softmax", "LogSoftmaxBackward", grad_out, y, dim, out, stream)


# ---------------------------------------------------------------------------------------------
# normalization

def _normalized_shape(api, normalized_shape, a):
    if hasattr(normalized_shape, "__index__") and not isinstance(normalized_shape, builtins.bool):
        ns = (operator.index(normalized_shape),)
    else:
        try:
            ns = tuple(operator.index(n) for n in normalized_shape)
        except TypeError:
            raise TypeError(f"{api}: normalized_shape must be an int or a sequence of ints, not "
                            f"{normalized_shape!r}") from None
    k = len(ns)
    if k < 1 or k > a.ndim or tuple(a.shape[a.ndim - k:]) != ns:
        raise ValueError(f"{api}: given normalized_shape={list(ns)}, expected an input with shape [*, "
                         f"{', '.join(map(str, ns))}], but got an input of shape {list(a.shape)}")
    return ns


def _param_shape(api, name, p, ns):
    if p is not None and tuple(p.shape) != ns:
        raise ValueError(f"{api}: {name} has shape {p.shape}, expected the normalized shape {ns}")


def _stat_shape(a, k):
    return tuple(a.shape[: a.ndim - k]) + (1,) * k


def _eps(api, eps):
    if not isinstance(eps, (int, float)) or isinstance(eps, builtins.bool) or not eps >= 0 or math.isinf(eps):
        raise ValueError(f"{api}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _layer_norm(api, x, normalized_shape, weight, bias, eps, out, stream, stats):
    kind = C.result_kind(x, weight, bias) if out is None else None
    a, w, b = _float_arrays(api, ("x", x), ("weight", weight), ("bias", bias))
    _max_dims(api, a)
    ns = _normalized_shape(api, normalized_shape, a)
    _param_shape(api, "weight", w, ns)
    _param_shape(api, "bias", b, ns)
    eps = _eps(api, eps)
    k = len(ns)
    s = C.device_and_stream(api, (a, w, b), stream)
    o = C.out_or_new(api, out, kind, a.shape, a.dtype, s, (("x", a), ("weight", w), ("bias", b)))
    m = r = None
    if stats:
        m = C.new_out(kind, _stat_shape(a, k), a.dtype, s)
        r = C.new_out(kind, _stat_shape(a, k), a.dtype, s)

    def args(lib, t, keep):
        arr = C.Param.ints(lib, ns)
        keep.append(arr)
        return (t[0], arr, t[1], t[2], eps, t[3], t[4], t[5])
    _run("LayerNorm", s, (a, w, b), (o, m, r), args, (ns, eps))
    return (o.obj, m.obj, r.obj) if stats else o.obj


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, out=None, stream=None):
    """Layer normalization over the trailing ``normalized_shape`` dims
    (``torch.nn.functional.layer_norm``; ``aclnnLayerNorm``): ``(x - mean) / sqrt(var + eps) *
    weight + bias`` with the biased variance, double accumulators.

    Args:
        x: a floating array ``[*, *normalized_shape]``.
        normalized_shape: an int or a sequence of ints (the trailing dims of ``x``).
        weight, bias: optional arrays of ``normalized_shape``.
        eps: a number >= 0.

    Raises:
        ValueError: shapes that do not match ``normalized_shape``, a negative eps, a bad ``out``.
        TypeError: non-floating dtypes.
    """
    return _layer_norm("kernels.layer_norm", x, normalized_shape, weight, bias, eps, out, stream, False)


def native_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, *, stream=None):
    """:func:`layer_norm` that also returns the per-row statistics its backward needs
    (``torch.native_layer_norm``): ``(out, mean, rstd)``, ``mean`` and ``rstd`` (``1 / sqrt(var +
    eps)``) of shape ``x.shape[:-k] + (1,) * k`` in ``x``'s dtype."""
    return _layer_norm("kernels.native_layer_norm", x, normalized_shape, weight, bias, eps, None, stream, True)


def layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight=None, bias=None,
                        output_mask=(True, True, True), *, stream=None):
    """Gradients of :func:`layer_norm` (``aclnnLayerNormBackward``, hiascend.com aclnn API page of
    that name; PyTorch's ``aten::native_layer_norm_backward``): ``(grad_x, grad_weight,
    grad_bias)`` from the forward's ``mean`` and ``rstd`` (:func:`native_layer_norm`: the outer dims
    followed by a 1 per normalized dim, as PyTorch's); an entry is None where ``output_mask`` is
    False. ``grad_weight`` / ``grad_bias`` have ``normalized_shape`` and the weight's dtype (``x``'s
    without a weight)."""
    api = "kernels.backward.layer_norm"
    kind = C.result_kind(grad_out, x)
    g, a, m, r, w, b = _float_arrays(api, ("grad_out", grad_out), ("x", x), ("mean", mean), ("rstd", rstd),
                                     ("weight", weight), ("bias", bias))
    _max_dims(api, a)
    ns = _normalized_shape(api, normalized_shape, a)
    _param_shape(api, "weight", w, ns)
    _param_shape(api, "bias", b, ns)
    if g.shape != a.shape:
        raise ValueError(f"{api}: grad_out has shape {g.shape} but x has shape {a.shape}")
    k = len(ns)
    rows = math.prod(a.shape[: a.ndim - k])
    for name, t in (("mean", m), ("rstd", r)):
        if t.size != rows:
            raise ValueError(f"{api}: {name} has {t.size} elements, expected one per normalized row ({rows})")
    mask = tuple(builtins.bool(v) for v in output_mask)
    if len(mask) != 3:
        raise ValueError(f"{api}: output_mask must have 3 values (grad_x, grad_weight, grad_bias)")
    s = C.device_and_stream(api, (g, a, m, r, w, b), stream)
    pdt = w.dtype if w is not None else a.dtype
    gi = C.new_out(kind, a.shape, a.dtype, s) if mask[0] else None
    gw = C.new_out(kind, ns, pdt, s) if mask[1] else None
    gb = C.new_out(kind, ns, pdt, s) if mask[2] else None

    def args(lib, t, keep):
        arr = C.Param.ints(lib, ns)
        mk = C.Param.bools(lib, mask)
        keep += [arr, mk]
        # (gradOut, input, normalizedShape, mean, rstd, weight, bias, outputMask, gi, gw, gb)
        return (t[0], t[1], arr, t[2], t[3], t[4], C.ffi.NULL, mk, t[5], t[6], t[7])
    _run("LayerNormBackward", s, (g, a, m, r, w), (gi, gw, gb), args, (ns, mask))
    return tuple(None if o is None else o.obj for o in (gi, gw, gb))


_ONES: dict = {}


def _ones(shape, dtype, s):
    """A cached array of ones (the weight of an RMS norm called without one)."""
    key = (shape, dtype, s._device.device_id, C._state.generation)
    a = _ONES.get(key)
    if a is None:
        if len(_ONES) > 64:
            _ONES.clear()
        a = canna_dl.ones(shape, dtype, device=s._device, stream=s)
        a.synchronize()
        _ONES[key] = a
    return a


def _rms_eps(api, eps, dt):
    if eps is None:
        return {"float32": 1.1920928955078125e-07, "float64": 2.220446049250313e-16, "float16": 0.0009765625,
                "bfloat16": 0.0078125}[dt.name]   # torch.finfo(dtype).eps, F.rms_norm's default
    return _eps(api, eps)


def _rstd_dtype(dt):
    return F32 if dt in (F16, BF16) else dt


def _rms_norm(api, x, normalized_shape, weight, eps, out, stream, stats):
    kind = C.result_kind(x, weight) if out is None else None
    a, w = _float_arrays(api, ("x", x), ("weight", weight))
    _max_dims(api, a)
    ns = _normalized_shape(api, normalized_shape, a)
    _param_shape(api, "weight", w, ns)
    eps = _rms_eps(api, eps, a.dtype)
    s = C.device_and_stream(api, (a, w), stream)
    if w is None:
        w = _ones(ns, a.dtype, s)
    o = C.out_or_new(api, out, kind, a.shape, a.dtype, s, (("x", a), ("weight", w)))
    r = C.new_out(kind, _stat_shape(a, len(ns)), _rstd_dtype(a.dtype), s) if stats else None
    _run("RmsNorm", s, (a, w), (o, r), lambda lib, t, keep: (t[0], t[1], eps, t[2], t[3]), (eps,))
    return (o.obj, r.obj) if stats else o.obj


def rms_norm(x, normalized_shape, weight=None, eps=None, *, out=None, stream=None):
    """RMS normalization over the trailing ``normalized_shape`` dims
    (``torch.nn.functional.rms_norm``; ``aclnnRmsNorm``): ``x / sqrt(mean(x²) + eps) * weight``.
    ``eps=None`` is ``finfo(x.dtype).eps`` as in PyTorch. See :func:`layer_norm`."""
    return _rms_norm("kernels.rms_norm", x, normalized_shape, weight, eps, out, stream, False)


def native_rms_norm(x, normalized_shape, weight=None, eps=None, *, stream=None):
    """:func:`rms_norm` that also returns ``rstd`` (``1 / sqrt(mean(x²) + eps)``, shape
    ``x.shape[:-k] + (1,) * k``, float32 for 16-bit inputs as PyTorch's ``_fused_rms_norm``):
    ``(out, rstd)``."""
    return _rms_norm("kernels.native_rms_norm", x, normalized_shape, weight, eps, None, stream, True)


def rms_norm_backward(grad_out, x, normalized_shape, rstd, weight=None, *, stream=None):
    """Gradients of :func:`rms_norm` (``aclnnRmsNormGrad``): ``(grad_x, grad_weight)`` from the
    forward's ``rstd`` (:func:`native_rms_norm`); ``grad_weight`` (float32 accumulations, in the
    weight's dtype) is None when ``weight`` is None."""
    api = "kernels.backward.rms_norm"
    kind = C.result_kind(grad_out, x)
    g, a, r, w = _float_arrays(api, ("grad_out", grad_out), ("x", x), ("rstd", rstd), ("weight", weight))
    _max_dims(api, a)
    ns = _normalized_shape(api, normalized_shape, a)
    _param_shape(api, "weight", w, ns)
    if g.shape != a.shape:
        raise ValueError(f"{api}: grad_out has shape {g.shape} but x has shape {a.shape}")
    rows = math.prod(a.shape[: a.ndim - len(ns)])
    if r.size != rows:
        raise ValueError(f"{api}: rstd has {r.size} elements, expected one per normalized row ({rows})")
    s = C.device_and_stream(api, (g, a, r, w), stream)
    has_w = w is not None
    if w is None:
        w = _ones(ns, a.dtype, s)
    gi = C.new_out(kind, a.shape, a.dtype, s)
    gw = C.new_out(kind if has_w else C.CANNA, ns, w.dtype, s)
    _run("RmsNormGrad", s, (g, a, r, w), (gi, gw), lambda lib, t, keep: (t[0], t[1], t[2], t[3], t[4], t[5]))
    return gi.obj, (gw.obj if has_w else None)


# ---------------------------------------------------------------------------------------------
# matrix products

def matmul_shape(api, ashape, bshape) -> tuple:
    """``torch.matmul``'s result shape: 1-D operands get a dim prepended (left) / appended (right)
    and removed again; batch dims broadcast."""
    if not ashape or not bshape:
        raise ValueError(f"{api}: both operands need at least 1 dimension, got shapes {tuple(ashape)} and "
                         f"{tuple(bshape)}")
    av, bv = len(ashape) == 1, len(bshape) == 1
    m = 1 if av else ashape[-2]
    k = ashape[-1]
    kb = bshape[0] if bv else bshape[-2]
    n = 1 if bv else bshape[-1]
    if k != kb:
        raise ValueError(f"{api}: shapes {tuple(ashape)} and {tuple(bshape)} cannot be multiplied (inner dimensions "
                         f"{k} and {kb} differ)")
    batch = C.broadcast_shapes(api, tuple(ashape[:-2]) if not av else (), tuple(bshape[:-2]) if not bv else ())
    return batch + (() if av else (m,)) + (() if bv else (n,))


def matmul(a, b, *, out=None, stream=None):
    """Matrix product with NumPy / PyTorch semantics (``torch.matmul``; ``aclnnMatmul``): 1-D · 1-D
    is a dot product (0-d result), 2-D · 2-D a matrix product, a 1-D operand is a row (left) or a
    column (right) vector, and batch dims (all but the last two) broadcast. Computed through a
    BLAS in the operands' dtype (float32 / float64; float16 / bfloat16 accumulate in float32).

    Raises:
        ValueError: a 0-d operand, mismatched inner dims, batch dims that do not broadcast, a bad ``out``.
        TypeError: non-floating or different dtypes.
    """
    api = "kernels.matmul"
    kind = C.result_kind(a, b) if out is None else None
    x, y = _float_arrays(api, ("a", a), ("b", b))
    _same_dtype(api, ("a", x), ("b", y))
    shape = matmul_shape(api, x.shape, y.shape)
    _max_dims(api, x, y)
    if len(shape) > C.MAX_DIMS:
        raise ValueError(f"{api}: the result would have {len(shape)} dims (at most {C.MAX_DIMS})")
    s = C.device_and_stream(api, (x, y), stream)
    o = C.out_or_new(api, out, kind, shape, x.dtype, s, (("a", x), ("b", y)))
    _run("Matmul", s, (x, y), (o,), lambda lib, t, keep: (t[0], t[1], t[2], _CUBE_KEEP_DTYPE))
    return o.obj


def linear(x, weight, bias=None, *, out=None, stream=None):
    """``x @ weight.T + bias`` (``torch.nn.functional.linear``; ``aclnnAddmm``, or ``aclnnMm`` without
    a bias, on the transposed weight as torch_npu does; inputs with several leading dims that cannot
    be flattened without a copy use ``aclnnMatmul`` and an in-place ``aclnnAdd``).

    Args:
        x: ``[*, in_features]``. weight: ``[out_features, in_features]``. bias: ``[out_features]`` or None.

    Returns ``[*, out_features]``.

    Raises:
        ValueError: mismatched shapes. TypeError: non-floating or different dtypes.
    """
    api = "kernels.linear"
    kind = C.result_kind(x, weight, bias) if out is None else None
    a, w, b = _float_arrays(api, ("x", x), ("weight", weight), ("bias", bias))
    _same_dtype(api, ("x", a), ("weight", w), ("bias", b))
    if w.ndim != 2:
        raise ValueError(f"{api}: weight must be 2-D [out_features, in_features], got shape {w.shape}")
    if a.ndim < 1:
        raise ValueError(f"{api}: x must have at least 1 dimension")
    _max_dims(api, a)
    nout, nin = w.shape
    if a.shape[-1] != nin:
        raise ValueError(f"{api}: x of shape {a.shape} and weight of shape {w.shape} do not match (x's last dim "
                         f"{a.shape[-1]} != in_features {nin})")
    if b is not None and b.shape != (nout,):
        raise ValueError(f"{api}: bias has shape {b.shape}, expected ({nout},)")
    shape = tuple(a.shape[:-1]) + (nout,)
    s = C.device_and_stream(api, (a, w, b), stream)
    o = C.out_or_new(api, out, kind, shape, a.dtype, s, (("x", a), ("weight", w), ("bias", b)))
    rows = math.prod(a.shape[:-1])
    a2 = a.reshape(rows, nin, copy=False) if a.ndim != 2 and _viewable(a, (rows, nin)) else (a if a.ndim == 2 else None)
    wt = w.T
    if a2 is not None:
        o2 = o.arr.reshape(rows, nout, copy=False) if o.arr.ndim != 2 and _viewable(o.arr, (rows, nout)) else \
            (o.arr if o.arr.ndim == 2 else None)
        if o2 is not None:
            if b is None:
                _run("Mm", s, (a2, wt), (o,), lambda lib, t, keep: (t[0], t[1], t[2], _CUBE_KEEP_DTYPE), views=[o2])
            else:
                def args(lib, t, keep):
                    one = C.Param.scalar(lib, 1.0)
                    keep.append(one)
                    return (t[0], t[1], t[2], one, one, t[3], _CUBE_KEEP_DTYPE)
                _run("Addmm", s, (b, a2, wt), (o,), args, views=[o2])
            return o.obj
    # general: batched product, then the bias added in place
    ko = _kernel_outs((o,))
    C.run_op("Matmul", s, (a, wt), ko, lambda lib, t, keep: (t[0], t[1], t[2], _CUBE_KEEP_DTYPE))
    if b is not None:
        r = ko[0]

        def add_args(lib, t, keep):
            one = C.Param.scalar(lib, 1)
            keep.append(one)
            return (t[0], t[1], one, t[2])
        C.run_op("Add", s, (r.arr, b), [C.Out(r.arr, None, sync=r.sync)], add_args, (1,))
    _finish_views(o)
    return o.obj


def _viewable(a, shape):
    try:
        a.reshape(shape, copy=False)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------
# convolution and pooling

def _conv_padding(api, padding, weight_shape, stride, dilation):
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{api}: padding='same' is not supported for strided convolutions (PyTorch's rule)")
            pads = []
            for k, d in zip(weight_shape[2:], dilation):
                total = d * (k - 1)
                if total % 2:
                    raise NotImplementedError(f"{api}: padding='same' needs asymmetric padding for kernel size {k} "
                                              f"and dilation {d}; pass explicit padding")
                pads.append(total // 2)
            return tuple(pads)
        raise ValueError(f"{api}: padding must be an int, a pair, 'valid' or 'same', not {padding!r}")
    return C.int_tuple(api, "padding", padding, 2)


def _conv_geometry(api, a, w, stride, padding, dilation, groups):
    if a.ndim != 4:
        raise ValueError(f"{api}: input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape {a.shape}")
    if w.ndim != 4:
        raise ValueError(f"{api}: weight must be 4-D [out_channels, in_channels/groups, kH, kW], got shape {w.shape}")
    stride = C.int_tuple(api, "stride", stride, 2)
    dilation = C.int_tuple(api, "dilation", dilation, 2)
    if min(stride) < 1 or min(dilation) < 1:
        raise ValueError(f"{api}: stride and dilation must be >= 1, got {stride} and {dilation}")
    padding = _conv_padding(api, padding, w.shape, stride, dilation)
    if min(padding) < 0:
        raise ValueError(f"{api}: padding must be >= 0, got {padding}")
    if isinstance(groups, builtins.bool) or not hasattr(groups, "__index__") or operator.index(groups) < 1:
        raise ValueError(f"{api}: groups must be an int >= 1, got {groups!r}")
    groups = operator.index(groups)
    n, c, h, wd = a.shape
    o, cg, kh, kw = w.shape
    if kh < 1 or kw < 1:   # (PyTorch: "kernel size should be greater than zero")
        raise ValueError(f"{api}: the kernel size must be greater than zero, got weight of shape {w.shape}")
    if c % groups or o % groups:
        raise ValueError(f"{api}: input channels {c} and output channels {o} must both be divisible by groups {groups}")
    if cg != c // groups:
        raise ValueError(f"{api}: weight of shape {w.shape} expects {cg} input channels per group, but input of shape "
                         f"{a.shape} has {c} channels and groups={groups}")
    eh, ew = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    ph, pw = h + 2 * padding[0], wd + 2 * padding[1]
    if ph < eh or pw < ew:
        raise ValueError(f"{api}: the kernel ({kh} x {kw}, dilated {eh} x {ew}) is larger than the padded input "
                         f"({ph} x {pw})")
    oh, ow = (ph - eh) // stride[0] + 1, (pw - ew) // stride[1] + 1
    return stride, padding, dilation, groups, (n, o, oh, ow)


def _batched4(a):
    """A 3-D ``[C, H, W]`` array as a 4-D view ``[1, C, H, W]`` (and whether it was)."""
    if a.ndim == 3:
        return a[None], True
    return a, False


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None, stream=None):
    """2-D convolution (cross-correlation) (``torch.nn.functional.conv2d``; ``aclnnConvolution``).

    Args:
        x: ``[N, C, H, W]`` or unbatched ``[C, H, W]``. weight: ``[O, C / groups, kH, kW]``.
        bias: ``[O]`` or None. stride, dilation: an int or a pair (>= 1). padding: an int, a pair,
        ``"valid"`` or ``"same"`` (symmetric padding only). groups: an int dividing C and O.

    Returns ``[N, O, H_out, W_out]`` (``[O, H_out, W_out]`` for an unbatched input).

    Raises:
        ValueError: shapes, channels or groups that do not match; a kernel larger than the padded
            input. TypeError: non-floating or different dtypes.
    """
    api = "kernels.conv2d"
    kind = C.result_kind(x, weight, bias) if out is None else None
    a, w, b = _float_arrays(api, ("x", x), ("weight", weight), ("bias", bias))
    _same_dtype(api, ("x", a), ("weight", w), ("bias", b))
    a4, unbatched = _batched4(a)
    stride, padding, dilation, groups, oshape = _conv_geometry(api, a4, w, stride, padding, dilation, groups)
    if b is not None and b.shape != (w.shape[0],):
        raise ValueError(f"{api}: bias has shape {b.shape}, expected ({w.shape[0]},)")
    shape = oshape[1:] if unbatched else oshape
    s = C.device_and_stream(api, (a, w, b), stream)
    o = C.out_or_new(api, out, kind, shape, a.dtype, s, (("x", a), ("weight", w), ("bias", b)))

    def args(lib, t, keep):
        st, pd, dl, op = (C.Param.ints(lib, v) for v in (stride, padding, dilation, (0, 0)))
        keep += [st, pd, dl, op]
        return (t[0], t[1], t[2], st, pd, dl, False, op, groups, t[3], _CUBE_KEEP_DTYPE)
    views = [o.arr[None]] if unbatched else None
    _run("Convolution", s, (a4, w, b), (o,), args, (stride, padding, dilation, groups), ACL_FORMAT_NCHW, views)
    return o.obj


def conv2d_backward(grad_out, x, weight, stride=1, padding=0, dilation=1, groups=1,
                    output_mask=(True, True, True), *, stream=None):
    """Gradients of :func:`conv2d` (``aclnnConvolutionBackward``): ``(grad_x, grad_weight,
    grad_bias)``, None where ``output_mask`` is False; ``grad_bias`` has shape ``[O]``."""
    api = "kernels.backward.conv2d"
    kind = C.result_kind(grad_out, x, weight)
    g, a, w = _float_arrays(api, ("grad_out", grad_out), ("x", x), ("weight", weight))
    _same_dtype(api, ("grad_out", g), ("x", a), ("weight", w))
    a4, unbatched = _batched4(a)
    g4 = g[None] if unbatched and g.ndim == 3 else g
    stride, padding, dilation, groups, oshape = _conv_geometry(api, a4, w, stride, padding, dilation, groups)
    if g4.shape != oshape:
        raise ValueError(f"{api}: grad_out has shape {g.shape}, expected {oshape[1:] if unbatched else oshape}")
    mask = tuple(builtins.bool(v) for v in output_mask)
    if len(mask) != 3:
        raise ValueError(f"{api}: output_mask must have 3 values (grad_x, grad_weight, grad_bias)")
    s = C.device_and_stream(api, (g, a, w), stream)
    gi = C.new_out(kind, a.shape, a.dtype, s) if mask[0] else None
    gw = C.new_out(kind, w.shape, w.dtype, s) if mask[1] else None
    gb = C.new_out(kind, (w.shape[0],), a.dtype, s) if mask[2] else None
    nout = w.shape[0]

    def args(lib, t, keep):
        bs = C.Param.ints(lib, (nout,)) if mask[2] else C.ffi.NULL
        st, pd, dl, op = (C.Param.ints(lib, v) for v in (stride, padding, dilation, (0, 0)))
        mk = C.Param.bools(lib, mask)
        keep += [st, pd, dl, op, mk] + ([bs] if mask[2] else [])
        return (t[0], t[1], t[2], bs, st, pd, dl, False, op, groups, mk, _CUBE_KEEP_DTYPE, t[3], t[4], t[5])
    views = [gi.arr[None] if (gi is not None and unbatched) else (gi.arr if gi is not None else None),
             gw.arr if gw is not None else None, gb.arr if gb is not None else None]
    _run("ConvolutionBackward", s, (g4, a4, w), (gi, gw, gb), args, (stride, padding, dilation, groups, mask),
         ACL_FORMAT_NCHW, views)
    return tuple(None if o is None else o.obj for o in (gi, gw, gb))


def _pool_geometry(api, a, kernel_size, stride, padding, dilation, ceil_mode):
    if a.ndim not in (3, 4):
        raise ValueError(f"{api}: input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape {a.shape}")
    k = C.int_tuple(api, "kernel_size", kernel_size, 2)
    st = k if stride is None or (not hasattr(stride, "__index__") and len(tuple(stride)) == 0) else \
        C.int_tuple(api, "stride", stride, 2)
    p = C.int_tuple(api, "padding", padding, 2)
    d = C.int_tuple(api, "dilation", dilation, 2)
    if min(k) < 1 or min(st) < 1 or min(d) < 1:
        raise ValueError(f"{api}: kernel_size, stride and dilation must be >= 1, got {k}, {st} and {d}")
    if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{api}: padding {p} should be at least 0 and at most half of the kernel size {k}")
    if not isinstance(ceil_mode, builtins.bool):
        raise TypeError(f"{api}: ceil_mode must be a bool")
    h, w = a.shape[-2:]
    outs = []
    for n, kk, ss, pp, dd in zip((h, w), k, st, p, d):
        span = n + 2 * pp - dd * (kk - 1) - 1
        if span < 0:
            raise ValueError(f"{api}: the kernel ({kk}, dilation {dd}) is larger than the padded input ({n + 2 * pp})")
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (o - 1) * ss >= n + pp:
            o -= 1
        outs.append(o)
    return k, st, p, d, tuple(a.shape[:-2]) + tuple(outs)


def _max_pool(api, x, kernel_size, stride, padding, dilation, ceil_mode, stream, with_indices):
    kind = C.result_kind(x)
    (a,) = _float_arrays(api, ("x", x))
    k, st, p, d, oshape = _pool_geometry(api, a, kernel_size, stride, padding, dilation, ceil_mode)
    s = C.device_and_stream(api, (a,), stream)
    o = C.new_out(kind, oshape, a.dtype, s)
    ix = C.new_out(kind, oshape, INT64, s)

    def args(lib, t, keep):
        arrs = [C.Param.ints(lib, v) for v in (k, st, p, d)]
        keep += arrs
        return (t[0], arrs[0], arrs[1], arrs[2], arrs[3], ceil_mode, t[1], t[2])
    _run("MaxPool2dWithIndices", s, (a,), (o, ix), args, (k, st, p, d, ceil_mode), ACL_FORMAT_NCHW)
    return (o.obj, ix.obj) if with_indices else o.obj


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False, *,
               stream=None):
    """2-D max pooling (``torch.nn.functional.max_pool2d``; ``aclnnMaxPool2dWithIndices``) of a
    ``[N, C, H, W]`` or ``[C, H, W]`` floating array; NaN propagates. ``stride`` defaults to
    ``kernel_size``; ``padding`` (implicit -inf) is at most half the kernel; the output size follows
    PyTorch's rule (``ceil_mode`` included). With ``return_indices``: ``(out, indices)``, int64
    indices ``h * W + w`` within each plane (what :func:`kernels.backward.max_pool2d` takes).

    Raises:
        ValueError: a bad geometry (kernel larger than the padded input, too much padding).
    """
    return _max_pool("kernels.max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode, stream,
                     return_indices)


def max_pool2d_with_indices(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *, stream=None):
    """:func:`max_pool2d` returning ``(out, indices)``."""
    return _max_pool("kernels.max_pool2d_with_indices", x, kernel_size, stride, padding, dilation, ceil_mode,
                     stream, True)


def max_pool2d_backward(grad_out, x, indices, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
                        stream=None):
    """Gradient of :func:`max_pool2d` (``aclnnMaxPool2dWithIndicesBackward``): ``grad_out`` scattered
    (summed) to the argmax positions the forward's ``indices`` name."""
    api = "kernels.backward.max_pool2d"
    kind = C.result_kind(grad_out, x)
    g, a = _float_arrays(api, ("grad_out", grad_out), ("x", x))
    ix = C.as_array(api, "indices", indices)
    C.check_dtype(api, "indices", ix.dtype, (INT64, INT32))
    k, st, p, d, oshape = _pool_geometry(api, a, kernel_size, stride, padding, dilation, ceil_mode)
    for name, t in (("grad_out", g), ("indices", ix)):
        if t.shape != oshape:
            raise ValueError(f"{api}: {name} has shape {t.shape}, expected the pooled shape {oshape}")
    s = C.device_and_stream(api, (g, a, ix), stream)
    gi = C.new_out(kind, a.shape, g.dtype, s)

    def args(lib, t, keep):
        arrs = [C.Param.ints(lib, v) for v in (k, st, p, d)]
        keep += arrs
        return (t[0], t[1], t[2], arrs[0], arrs[1], arrs[2], arrs[3], ceil_mode, t[3])
    _run("MaxPool2dWithIndicesBackward", s, (g, a, ix), (gi,), args, (k, st, p, d, ceil_mode), ACL_FORMAT_NCHW)
    return gi.obj


# ---------------------------------------------------------------------------------------------
# losses

def _reduction(api, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{api}: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    return reduction


def _ignore_index(api, v):
    if isinstance(v, builtins.bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{api}: ignore_index must be an int, not {type(v).__name__}")
    return operator.index(v)


def _loss_inputs(api, input, target, weight):
    a, w = _float_arrays(api, ("input", input), ("weight", weight))
    t = C.as_array(api, "target", target)
    if C.category(t.dtype) == 2:
        raise NotImplementedError(f"{api}: class-probability targets (a floating target) are not supported; pass "
                                  "class indices (int64)")
    C.check_dtype(api, "target", t.dtype, (INT64, INT32), "class indices")
    if a.ndim == 0:
        raise ValueError(f"{api}: input must have at least 1 dimension (classes)")
    _max_dims(api, a)
    c = a.shape[0] if a.ndim == 1 else a.shape[1]
    expect = () if a.ndim == 1 else (a.shape[0],) + tuple(a.shape[2:])
    if t.shape != expect:
        raise ValueError(f"{api}: input of shape {a.shape} expects a target of shape {expect}, got {t.shape}")
    if w is not None and w.shape != (c,):
        raise ValueError(f"{api}: weight must have shape ({c},) (one weight per class), got {w.shape}")
    return a, t, w


def _as_4d(a, t):
    """[N, C, d1, ...] input / [N, d1, ...] target as [N, C, H, W] / [N, H, W] views when possible
    (H = d1 * ... * dk, W = 1; a copy otherwise), for aclnnNLLLoss2d."""
    n, c = a.shape[:2]
    rest = math.prod(a.shape[2:])
    if a.ndim == 4:
        return a, t
    a4 = a.reshape((n, c, rest, 1))
    t3 = t.reshape((n, rest, 1))
    return a4, t3


def _nll(api, a, t, w, reduction, ignore_index, kind, s, want_total):
    """NLL loss of log-probabilities ``a`` → (loss Out, total_weight Out or None)."""
    red = _REDUCTIONS[reduction]
    oshape = t.shape if reduction == "none" else ()
    o = C.new_out(kind, oshape, a.dtype, s)
    tw = C.new_out(kind, (), a.dtype, s) if want_total else None

    def args(lib, tt, keep):
        return (tt[0], tt[1], tt[2], red, ignore_index, tt[3], tt[4])
    if a.ndim <= 2:
        _run("NLLLoss", s, (a, t, w), (o, tw), args, (red, ignore_index))
    else:
        a4, t3 = _as_4d(a, t)
        ov = o.arr.reshape(t3.shape) if reduction == "none" else o.arr
        _run("NLLLoss2d", s, (a4, t3, w), (o, tw), args, (red, ignore_index), C.ACL_FORMAT_ND,
             views=[ov, None if tw is None else tw.arr])
    return o, tw


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean", *, stream=None):
    """Negative log-likelihood of log-probabilities (``torch.nn.functional.nll_loss``;
    ``aclnnNLLLoss`` / ``aclnnNLLLoss2d``). ``input``: ``[C]``, ``[N, C]`` or ``[N, C, d1, ...]``;
    ``target``: int64 / int32 class indices ``[]``, ``[N]`` or ``[N, d1, ...]``. ``reduction``
    ``"mean"`` divides by the summed weights of the non-ignored targets (NaN if all are ignored).

    Raises:
        ValueError: mismatched shapes, an unknown reduction. TypeError: dtypes.
        acl_rt.AclError (at the next synchronize for DeviceArray results): a target outside
        ``[0, C)`` that is not ``ignore_index`` (found only by reading the data).
    """
    return native_nll_loss(input, target, weight, ignore_index, reduction, stream=stream, _total=False)


def native_nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean", *, stream=None, _total=True):
    """:func:`nll_loss` also returning ``total_weight`` (0-d, the summed weights of the
    non-ignored targets; what :func:`kernels.backward.nll_loss` takes): ``(loss, total_weight)``."""
    api = "kernels.nll_loss"
    kind = C.result_kind(input, target, weight)
    a, t, w = _loss_inputs(api, input, target, weight)
    _reduction(api, reduction)
    ignore_index = _ignore_index(api, ignore_index)
    s = C.device_and_stream(api, (a, t, w), stream)
    o, tw = _nll(api, a, t, w, reduction, ignore_index, kind, s, _total)
    return (o.obj, tw.obj) if _total else o.obj


def nll_loss_backward(grad_out, input, target, weight=None, ignore_index=-100, reduction="mean",
                      total_weight=None, *, stream=None):
    """Gradient of :func:`nll_loss` with respect to ``input`` (``aclnnNLLLossBackward`` /
    ``aclnnNLLLoss2dBackward``); ``total_weight`` from :func:`native_nll_loss` (computed again when
    None)."""
    api = "kernels.backward.nll_loss"
    kind = C.result_kind(grad_out, input)
    (g,) = _float_arrays(api, ("grad_out", grad_out))
    a, t, w = _loss_inputs(api, input, target, weight)
    _reduction(api, reduction)
    ignore_index = _ignore_index(api, ignore_index)
    gshape = t.shape if reduction == "none" else ()
    if g.shape != gshape and not (reduction != "none" and g.size == 1):
        raise ValueError(f"{api}: grad_out has shape {g.shape}, expected {gshape}")
    s = C.device_and_stream(api, (g, a, t, w), stream)
    if total_weight is None:
        _, two = _nll(api, a, t, w, reduction, ignore_index, C.CANNA, s, True)
        tw = two.arr
    else:
        (tw,) = _float_arrays(api, ("total_weight", total_weight))
    gi = C.new_out(kind, a.shape, a.dtype, s)
    red = _REDUCTIONS[reduction]

    def args(lib, tt, keep):
        return (tt[0], tt[1], tt[2], tt[3], red, ignore_index, tt[4], tt[5])
    if a.ndim <= 2:
        _run("NLLLossBackward", s, (g, a, t, w, tw), (gi,), args, (red, ignore_index))
    else:
        a4, t3 = _as_4d(a, t)
        g3 = g.reshape(t3.shape) if reduction == "none" else g
        _run("NLLLoss2dBackward", s, (g3, a4, t3, w, tw), (gi,), args, (red, ignore_index),
             views=[gi.arr.reshape(a4.shape)])
    return gi.obj


def _label_smoothing(api, v):
    if isinstance(v, builtins.bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{api}: label_smoothing must be a number in [0, 1], got {v!r}")
    return float(v)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                  stream=None):
    """Cross entropy of unnormalized logits and class indices (``torch.nn.functional.cross_entropy``:
    ``nll_loss(log_softmax(input, 1), target)`` with label smoothing as PyTorch computes it).
    ``[N, C]`` inputs use the fused ``aclnnCrossEntropyLoss``; ``[C]`` and ``[N, C, d1, ...]``
    ``aclnnLogSoftmax`` + ``aclnnNLLLoss(2d)``.

    Raises:
        ValueError: shapes, reduction, label_smoothing outside [0, 1].
        NotImplementedError: floating (class-probability) targets; label smoothing with more than 2 dims.
        See :func:`nll_loss` for out-of-range targets.
    """
    return native_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing, stream=stream,
                                _log_prob=False)


def native_cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                         stream=None, _log_prob=True):
    """:func:`cross_entropy` also returning ``log_softmax(input, 1)`` (what
    :func:`kernels.backward.cross_entropy` takes): ``(loss, log_prob)``."""
    api = "kernels.cross_entropy"
    kind = C.result_kind(input, target, weight)
    a, t, w = _loss_inputs(api, input, target, weight)
    _reduction(api, reduction)
    ignore_index = _ignore_index(api, ignore_index)
    ls = _label_smoothing(api, label_smoothing)
    s = C.device_and_stream(api, (a, t, w), stream)
    if a.ndim <= 2:
        a2 = a[None] if a.ndim == 1 else a
        t1 = t[None] if a.ndim == 1 else t
        oshape = t.shape if reduction == "none" else ()
        o = C.new_out(kind, oshape, a.dtype, s)
        lp = C.new_out(kind, a.shape, a.dtype, s) if _log_prob else None
        rs = reduction.encode()

        def args(lib, tt, keep):
            red = C.ffi.new("char[]", rs)
            keep.append(red)
            return (tt[0], tt[1], tt[2], red, ignore_index, ls, 0.0, False, tt[3], tt[4], C.ffi.NULL, C.ffi.NULL)
        views = [o.arr.reshape((1,)) if (a.ndim == 1 and reduction == "none") else o.arr,
                 None if lp is None else (lp.arr[None] if a.ndim == 1 else lp.arr)]
        _run("CrossEntropyLoss", s, (a2, t1, w), (o, lp), args, (reduction, ignore_index, ls), views=views)
        return (o.obj, lp.obj) if _log_prob else o.obj
    if ls:
        raise NotImplementedError(f"{api}: label smoothing is supported for [N, C] inputs only")
    lpa = log_softmax(a, 1, stream=s)
    o, _ = _nll(api, lpa, t, w, reduction, ignore_index, kind, s, False)
    if _log_prob:
        return o.obj, (lpa if kind == C.CANNA else C._CONVERT[kind](lpa))
    return o.obj


def cross_entropy_backward(grad_out, log_prob, target, weight=None, ignore_index=-100, reduction="mean",
                           label_smoothing=0.0, *, stream=None):
    """Gradient of :func:`cross_entropy` with respect to the logits, from the forward's ``log_prob``
    (:func:`native_cross_entropy`): ``aclnnCrossEntropyLossGrad`` for ``[N, C]``, else the NLL and
    log-softmax gradients."""
    api = "kernels.backward.cross_entropy"
    kind = C.result_kind(grad_out, log_prob)
    a, t, w = _loss_inputs(api, log_prob, target, weight)
    _reduction(api, reduction)
    ignore_index = _ignore_index(api, ignore_index)
    ls = _label_smoothing(api, label_smoothing)
    (g,) = _float_arrays(api, ("grad_out", grad_out))
    gshape = t.shape if reduction == "none" else ()
    if g.shape != gshape and not (reduction != "none" and g.size == 1):
        raise ValueError(f"{api}: grad_out has shape {g.shape}, expected {gshape}")
    s = C.device_and_stream(api, (g, a, t, w), stream)
    if a.ndim <= 2:
        a2 = a[None] if a.ndim == 1 else a
        t1 = t[None] if a.ndim == 1 else t
        g1 = g.reshape((1,)) if (a.ndim == 1 and reduction == "none") else g
        gi = C.new_out(kind, a.shape, a.dtype, s)
        rs = reduction.encode()

        def args(lib, tt, keep):
            red = C.ffi.new("char[]", rs)
            keep.append(red)
            return (tt[0], tt[1], tt[2], tt[3], C.ffi.NULL, C.ffi.NULL, red, ignore_index, ls, 0.0, tt[4])
        _run("CrossEntropyLossGrad", s, (g1, a2, t1, w), (gi,), args, (reduction, ignore_index, ls),
             views=[gi.arr[None] if a.ndim == 1 else gi.arr])
        return gi.obj
    if ls:
        raise NotImplementedError(f"{api}: label smoothing is supported for [N, C] inputs only")
    glp = nll_loss_backward(g, a, t, w, ignore_index, reduction, stream=s)
    r = log_softmax_backward(glp, a, 1, stream=s)
    return r if kind == C.CANNA else C._CONVERT[kind](r)
