"""Products, normalization, convolution, pooling, losses and reductions: their registry entries.

Their launch code is still written by hand (``kernels/_nn.py``, ``kernels/_reduce.py``,
``kernels/_composite.py``: workspace-sized executors, ``native_*`` variants, ``output_mask``); the
entry states their inputs (a required array given None is a TypeError, checked here for all of
them) and their shape rules. The framework shims of softmax, log_softmax, matmul and linear and of
their backward ops are generated from their entries (their backward written once here, double
backward included); those of the others are still hand-written (``generate=False``).
"""
from __future__ import annotations

from .. import _core as C
from .. import _composite as CO
from .. import _nn as N
from .. import _reduce as RD
from .._registry import DTYPE, Attr, Impl, Rejected, Spec, Tensor, TorchFn, define, mixed_param_dtypes
from .._registry import torch_dtype_name as _dt

F, ARITH = C.FLOATS, C.ARITH


def matmul_shape(a, b, **attrs):
    """``torch.matmul``'s result (``kernels._nn.matmul_shape``)."""
    return Spec(N.matmul_shape("kernels.matmul", tuple(a.shape), tuple(b.shape)), a.dtype)


def linear_shape(x, weight, bias=None, **attrs):
    """``[*, out_features]`` (``kernels.linear``'s checks: a 2-D weight, x's last dim = in_features,
    a bias of ``(out_features,)``)."""
    api = "kernels.linear"
    if len(weight.shape) != 2:
        raise ValueError(f"{api}: weight must be 2-D [out_features, in_features], got shape {tuple(weight.shape)}")
    if len(x.shape) == 0:
        raise ValueError(f"{api}: x must have at least 1 dimension")
    nout, nin = weight.shape
    if x.shape[-1] != nin:
        raise ValueError(f"{api}: x of shape {tuple(x.shape)} and weight of shape {tuple(weight.shape)} do not match "
                         f"(x's last dim {x.shape[-1]} != in_features {nin})")
    if bias is not None and tuple(bias.shape) != (nout,):
        raise ValueError(f"{api}: bias has shape {tuple(bias.shape)}, expected ({nout},)")
    return Spec(tuple(x.shape[:-1]) + (nout,), x.dtype)


def conv_out(n, k, s, p, d):
    """Output length of a convolution along one dim (PyTorch's ``conv2d`` formula)."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def pool_out(n, k, s, p, d, ceil):
    """Output length of a pooling window along one dim, PyTorch's rule (``ceil_mode``: the last
    window must start inside the input or its left padding)."""
    span = n + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + p:
        o = o - 1
    return o


def _pair(v):
    if hasattr(v, "__index__"):
        return (int(v), int(v))
    t = tuple(int(i) for i in v)
    return t * 2 if len(t) == 1 else t


def conv2d_shape(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, **attrs):
    st, pd, dl = _pair(stride), _pair(padding), _pair(dilation)
    oh = conv_out(x.shape[-2], weight.shape[2], st[0], pd[0], dl[0])
    ow = conv_out(x.shape[-1], weight.shape[3], st[1], pd[1], dl[1])
    lead = () if len(x.shape) == 3 else (x.shape[0],)
    return Spec(lead + (weight.shape[0], oh, ow), x.dtype)


def max_pool2d_shape(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, **attrs):
    k = _pair(kernel_size)
    s = k if stride is None or (not hasattr(stride, "__index__") and len(stride) == 0) else _pair(stride)
    p, d = _pair(padding), _pair(dilation)
    oh = pool_out(x.shape[-2], k[0], s[0], p[0], d[0], ceil_mode)
    ow = pool_out(x.shape[-1], k[1], s[1], p[1], d[1], ceil_mode)
    return Spec(tuple(x.shape[:-2]) + (oh, ow), x.dtype)


def _same(x, *a, **k):
    return Spec(x.shape, x.dtype)


def _stat(x, k):
    return tuple(x.shape[: len(x.shape) - k]) + (1,) * k


def _ln_shape(x, normalized_shape, weight=None, bias=None, eps=1e-5, **attrs):
    return Spec(x.shape, x.dtype)


def _reduced(x, dim=None, keepdim=False, **attrs):
    nd = len(x.shape)
    dims = C.dims_arg("shape rule", dim, nd)
    if keepdim:
        shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
    else:
        shape = tuple(n for i, n in enumerate(x.shape) if i not in dims)
    return Spec(shape, x.dtype)


def _loss_shape(input, target, weight=None, ignore_index=-100, reduction="mean", *a, **k):
    return Spec(target.shape if reduction == "none" else (), input.dtype)


_o = object
def _two_d(a, b):
    if not (a.dim() == 2 and b.dim() == 2):
        return "mm of operands that are not 2-D"


def _three_d(a, b):
    if not (a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]):
        return "bmm of operands that are not 3-D with one batch size"


def _mm_aten(a, b):   # below the dispatcher no aten check runs first: aten::mm's own rules
    return _two_d(a, b) or (None if a.dtype == b.dtype else "mm of two dtypes (aten::mm refuses it)")


def _bmm_aten(a, b):
    return _three_d(a, b) or (None if a.dtype == b.dtype else "bmm of two dtypes (aten::bmm refuses it)")


def _conv_aten(x, weight, *a):
    if x.dim() != 4 or weight.dim() != 4:
        return "a convolution that is not 2-D"
    if weight.shape[0] == 0:   # (aten's ConvUtils check_shape_forward)
        return Rejected("a weight without output channels (aten::convolution rejects it)")
    if x.shape[1] == 0:
        return "an input without channels"


def _nll_aten(input, target, weight, *a):   # aten/src/ATen/native/LossNLL.cpp's checks (not the meta kernel's)
    if _dt(target) not in ("int64", "uint8"):
        return Rejected(f"{target.dtype} targets (aten::nll_loss_forward takes Long or Byte)")
    if weight is not None and weight.dtype != input.dtype:
        return Rejected(f"a {weight.dtype} weight for {input.dtype} input (aten::nll_loss_forward rejects it)")


def _one_dtype(x, *named):
    """The first of ``(name, tensor or None)`` whose dtype is not ``x``'s, as a reason (canna's backward
    kernels take one dtype for the gradient, the input and the statistics), or None."""
    for name, t in named:
        if t is not None and t.dtype != x.dtype:
            return f"a {t.dtype} {name} for {x.dtype} input (canna's kernel takes one dtype)"
    return None


def _nll_bw_aten(grad_out, input, target, weight, total_weight, *a):   # (LossNLL.cpp's checks, and canna's one dtype)
    return _nll_aten(input, target, weight) or _one_dtype(input, ("grad_output", grad_out),
                                                           ("total_weight", total_weight))


def _ln_aten(x, weight, bias, *a):
    return mixed_param_dtypes("aten::native_layer_norm", x, weight, bias)


def _ln_bw_aten(g, x, mean, rstd, weight, bias, *a):
    """aten::native_layer_norm_backward's operands: canna's kernel takes one dtype for the gradient, the
    input and the statistics (PyTorch's ``layer_norm_backward_cpu``, ``aten/src/ATen/native/layer_norm.cpp``,
    takes float32 statistics of a reduced-precision input too); the parameters by aten's rule."""
    why = _one_dtype(x, ("grad_out", g), ("mean", mean), ("rstd", rstd))
    if why:
        return why
    if x.numel() == 0:
        return "an empty input (PyTorch zero-fills grad_weight / grad_bias)"
    return mixed_param_dtypes("aten::native_layer_norm_backward", x, weight, bias)


def _ln_bw_shape(grad_out, x, mean, rstd, weight=None, bias=None, normalized_shape=(), output_mask=(True,) * 3):
    """``(grad_x, grad_weight, grad_bias)``: ``x``'s shape, then ``normalized_shape`` in the weight's dtype
    (``x``'s without a weight); ``(0,)`` where ``output_mask`` is False (the kernel's None)."""
    ns = tuple(x.shape[len(x.shape) - len(tuple(normalized_shape)):])
    pdt = x.dtype if weight is None else weight.dtype
    return tuple(Spec(s if m else (0,), d) for s, d, m in zip((x.shape, ns, ns), (x.dtype, pdt, pdt), output_mask))


def _pool_bw_aten(g, x, indices, *a):
    if _dt(indices) != "int64":
        return Rejected(f"{indices.dtype} indices (aten::max_pool2d_with_indices_backward takes Long)")


def _bw_dtype(g, y, dim, *, input_dtype):   # aten::_softmax_backward_data's result dtype is input_dtype
    return None if input_dtype == g.dtype else f"input_dtype {input_dtype} (the gradient is {g.dtype})"


def _pool_stride(stride):   # aten's empty stride: the kernel size (the op's None)
    return stride if stride else None


def _all_dims(dim):   # aten's empty (or absent) dim list: every dim (the op's None)
    return dim if dim else None


def aten_reduction(other):
    """``f(code)``: aten's reduction code (``at::Reduction``: 0 None, 1 Mean, 2 Sum) as an op's
    ``reduction``, ``other`` for any other code, as the aten kernel treats it: the NLL kernels test
    for None and Mean only, so they sum (``aten/src/ATen/native/LossNLL.cpp``); ``mse_loss``
    asserts Mean or Sum (``aten/src/ATen/native/Loss.cpp``), so None there: the call falls back
    and PyTorch raises."""
    codes = {0: "none", 1: "mean", 2: "sum"}
    return lambda code: codes.get(code, other)


_reduction = aten_reduction("sum")


_MM = "input, other:b, out=None"
define("matmul", inputs=(Tensor("a", F), Tensor("b", F)), shape=matmul_shape, forward=Impl(N.matmul),
       backward=lambda ops, g, a, b, grad_input_mask: ops.matmul_backward(g, a, b, grad_input_mask), save=("a", "b"),
       torch=(("torch.matmul", _MM, {"out": None}), ("torch.Tensor.matmul", _MM, {"out": None}),
              ("torch.mm", "input, mat2:b, out=None", {"out": None}, _two_d),
              ("torch.Tensor.mm", "input, mat2:b", _two_d),
              ("torch.bmm", "input, mat2:b, out=None", {"out": None}, _three_d),
              ("torch.Tensor.bmm", "input, mat2:b", _three_d)),
       aten=(("aten::mm", "self:a, mat2:b", _mm_aten), ("aten::bmm", "self:a, mat2:b", _bmm_aten)),
       doc=N.matmul.__doc__)
define("linear", inputs=(Tensor("x", F), Tensor("weight", F), Tensor("bias", F, optional=True)), shape=linear_shape,
       forward=Impl(N.linear),
       backward=lambda ops, g, x, w, grad_input_mask: ops.linear_backward(g, x, w, grad_input_mask),
       save=("x", "weight"), torch=("torch.nn.functional.linear",), doc=N.linear.__doc__)


def _softmax_shape(x, dim=-1, dtype=None):
    """Same shape; ``dtype`` (PyTorch's ``dtype=``: the input is cast first) or the input's."""
    C.wrap_dim("shape rule", dim, len(x.shape))
    return Spec(x.shape, x.dtype if dtype is None else dtype)


def _softmax_bw_shape(g, y, dim=-1):
    if tuple(g.shape) != tuple(y.shape):
        raise ValueError(f"shape rule: grad_out has shape {tuple(g.shape)} but y has shape {tuple(y.shape)}")
    C.wrap_dim("shape rule", dim, len(y.shape))
    return Spec(y.shape, C.promote_types(g.dtype, y.dtype))


_SM_TORCH = "input, dim=None, _stacklevel=3, dtype=None"   # torch.nn.functional's (dim=None: falls back)
_softmax_attrs = (Attr("dim", int, -1), Attr("dtype", DTYPE, None))
# the gradient from the output (PyTorch's derivatives.yaml: _softmax_backward_data(grad, result, dim));
# the torch shim casts it back to the input's dtype when dtype= converted it
define("softmax", inputs=(Tensor("x", F),), attrs=_softmax_attrs, shape=_softmax_shape, forward=Impl(N.softmax),
       backward=lambda ops, g, y, dim, dtype: ops.softmax_backward(g, y, dim), save=("out",),
       torch=("torch.softmax", "torch.Tensor.softmax", ("torch.nn.functional.softmax", _SM_TORCH)),
       aten=(("aten::_softmax", "self:x, dim, half_to_float", {"half_to_float": False}),),
       tf=("softmax", {"x": "logits", "dim": "axis"}), jax=("softmax", {"dim": "axis"}),
       doc=N.softmax.__doc__)
define("log_softmax", inputs=(Tensor("x", F),), attrs=_softmax_attrs, shape=_softmax_shape,
       forward=Impl(N.log_softmax), backward=lambda ops, g, y, dim, dtype: ops.log_softmax_backward(g, y, dim),
       save=("out",), torch=("torch.log_softmax", "torch.Tensor.log_softmax",
                             ("torch.nn.functional.log_softmax", _SM_TORCH)),
       aten=(("aten::_log_softmax", "self:x, dim, half_to_float", {"half_to_float": False}),),
       tf=("log_softmax", {"x": "logits", "dim": "axis"}), jax=("log_softmax", {"dim": "axis"}),
       doc=N.log_softmax.__doc__)
define("layer_norm", inputs=(Tensor("x", F), Tensor("weight", F, optional=True), Tensor("bias", F, optional=True)),
       attrs=(Attr("normalized_shape", _o), Attr("eps", _o, 1e-5)), shape=_ln_shape, forward=Impl(N.layer_norm),
       generate=False)
define("native_layer_norm", inputs=(Tensor("x", F), Tensor("weight", F, optional=True),
                                    Tensor("bias", F, optional=True)),
       attrs=(Attr("normalized_shape", _o), Attr("eps", _o, 1e-5)), outputs=("out", "mean", "rstd"),
       shape=lambda x, normalized_shape, *a, **k: (Spec(x.shape, x.dtype),
                                                   Spec(_stat(x, len(tuple(normalized_shape))), x.dtype),
                                                   Spec(_stat(x, len(tuple(normalized_shape))), x.dtype)),
       forward=Impl(N.native_layer_norm), generate=False,
       aten=(TorchFn("aten::native_layer_norm", "input:x, normalized_shape, weight, bias, eps", guard=_ln_aten,
                     report="layer_norm"),))
define("rms_norm", inputs=(Tensor("x", F), Tensor("weight", F, optional=True)),
       attrs=(Attr("normalized_shape", _o), Attr("eps", _o, None)), shape=_ln_shape, forward=Impl(N.rms_norm),
       generate=False)
define("native_rms_norm", inputs=(Tensor("x", F), Tensor("weight", F, optional=True)),
       attrs=(Attr("normalized_shape", _o), Attr("eps", _o, None)), outputs=("out", "rstd"),
       shape=lambda x, normalized_shape, *a, **k: (Spec(x.shape, x.dtype),
                                                   Spec(_stat(x, len(tuple(normalized_shape))), x.dtype)),
       forward=Impl(N.native_rms_norm), generate=False)
define("conv2d", inputs=(Tensor("x", F), Tensor("weight", F), Tensor("bias", F, optional=True)),
       attrs=(Attr("stride", _o, 1), Attr("padding", _o, 0), Attr("dilation", _o, 1), Attr("groups", _o, 1)),
       shape=conv2d_shape, forward=Impl(N.conv2d), generate=False,
       aten=(TorchFn("aten::convolution", "input:x, weight, bias, stride, padding, dilation, transposed, output_padding, "
                     "groups", fixed={"transposed": False}, guard=_conv_aten),))
_pool_attrs = (Attr("kernel_size", _o), Attr("stride", _o, None), Attr("padding", _o, 0), Attr("dilation", _o, 1),
               Attr("ceil_mode", _o, False))
define("max_pool2d", inputs=(Tensor("x", F),), attrs=_pool_attrs + (Attr("return_indices", _o, False),),
       shape=max_pool2d_shape, forward=Impl(N.max_pool2d), generate=False)
define("max_pool2d_with_indices", inputs=(Tensor("x", F),), attrs=_pool_attrs, outputs=("out", "indices"),
       shape=lambda x, *a, **k: (max_pool2d_shape(x, *a, **k), Spec(max_pool2d_shape(x, *a, **k).shape, C.INT64)),
       forward=Impl(N.max_pool2d_with_indices), generate=False,
       aten=(TorchFn("aten::max_pool2d_with_indices", "self:x, kernel_size, stride, padding, dilation, ceil_mode",
                     convert={"stride": _pool_stride}, report="max_pool2d"),))
_loss_attrs = (Attr("ignore_index", _o, -100), Attr("reduction", _o, "mean"))
define("cross_entropy", inputs=(Tensor("input", F), Tensor("target", C.INTS, diff=False),
                                Tensor("weight", F, optional=True, diff=False)),
       attrs=_loss_attrs + (Attr("label_smoothing", _o, 0.0),), shape=_loss_shape, forward=Impl(N.cross_entropy),
       generate=False)
define("native_cross_entropy", inputs=(Tensor("input", F), Tensor("target", C.INTS, diff=False),
                                       Tensor("weight", F, optional=True, diff=False)),
       attrs=_loss_attrs + (Attr("label_smoothing", _o, 0.0),), outputs=("loss", "log_prob"),
       shape=lambda input, *a, **k: (_loss_shape(input, *a, **k), Spec(input.shape, input.dtype)),
       forward=Impl(N.native_cross_entropy), generate=False)
define("nll_loss", inputs=(Tensor("input", F), Tensor("target", C.INTS, diff=False),
                           Tensor("weight", F, optional=True, diff=False)),
       attrs=_loss_attrs, shape=_loss_shape, forward=Impl(N.nll_loss), generate=False)
define("native_nll_loss", inputs=(Tensor("input", F), Tensor("target", C.INTS, diff=False),
                                  Tensor("weight", F, optional=True, diff=False)),
       attrs=_loss_attrs, outputs=("loss", "total_weight"),
       shape=lambda input, *a, **k: (_loss_shape(input, *a, **k), Spec((), input.dtype)),
       forward=Impl(N.native_nll_loss), generate=False,
       aten=tuple(TorchFn(f"aten::{fn}", "self:input, target, weight, reduction, ignore_index",
                          convert={"reduction": _reduction}, guard=_nll_aten, report="nll_loss")
                  for fn in ("nll_loss_forward", "nll_loss2d_forward")))
define("sum", inputs=(Tensor("x", ARITH + (C.BOOL,)),), attrs=(Attr("dim", _o, None), Attr("keepdim", _o, False)),
       shape=_reduced, forward=Impl(RD.sum), generate=False,
       aten=(TorchFn("aten::sum.dim_IntList", "self:x, dim, keepdim, dtype", fixed={"dtype": None},
                     convert={"dim": _all_dims}),))   # (integers and bools: int64, as aten accumulates them)
define("mean", inputs=(Tensor("x", F),), attrs=(Attr("dim", _o, None), Attr("keepdim", _o, False)),
       shape=_reduced, forward=Impl(RD.mean), generate=False,
       aten=(TorchFn("aten::mean.dim", "self:x, dim, keepdim, dtype", fixed={"dtype": None},
                     convert={"dim": _all_dims}),))
define("amax", inputs=(Tensor("x", ARITH),), attrs=(Attr("dim", _o, ()), Attr("keepdim", _o, False)),
       shape=lambda x, dim=(), keepdim=False: _reduced(x, dim if dim != () else None, keepdim), forward=Impl(RD.amax),
       generate=False)
define("sum_to_size", inputs=(Tensor("x", ARITH),), attrs=(Attr("shape", _o),),
       shape=lambda x, shape: Spec(tuple(shape), x.dtype), forward=Impl(RD.sum_to_size), generate=False)

# backward kernels written by hand (kernels.backward.*)
define("softmax_backward", inputs=(Tensor("grad_out", F), Tensor("y", F, diff=False)), attrs=(Attr("dim", int, -1),),
       shape=_softmax_bw_shape, forward=Impl(N.softmax_backward), api="kernels.backward.softmax",
       aten=(TorchFn("aten::_softmax_backward_data", "grad_output:grad_out, output:y, dim, input_dtype",
                     guard=_bw_dtype),),
       doc=N.softmax_backward.__doc__)
define("log_softmax_backward", inputs=(Tensor("grad_out", F), Tensor("y", F, diff=False)),
       attrs=(Attr("dim", int, -1),), shape=_softmax_bw_shape, forward=Impl(N.log_softmax_backward),
       aten=(TorchFn("aten::_log_softmax_backward_data", "grad_output:grad_out, output:y, dim, input_dtype",
                     guard=_bw_dtype),),
       api="kernels.backward.log_softmax", doc=N.log_softmax_backward.__doc__)
def _matmul_bw_shape(g, a, b, output_mask=(True, True)):
    shape = N.matmul_shape("kernels.backward.matmul", tuple(a.shape), tuple(b.shape))
    if tuple(g.shape) != shape:
        raise ValueError(f"kernels.backward.matmul: grad_out has shape {tuple(g.shape)}, expected the product's "
                         f"shape {shape}")
    return (Spec(a.shape if output_mask[0] else (0,), a.dtype), Spec(b.shape if output_mask[1] else (0,), b.dtype))


def _matmul_bw_bw(ops, gga, ggb, g, a, b, output_mask, grad_input_mask):
    """matmul's double backward, from ``grad_a = g @ b^T`` and ``grad_b = a^T @ g`` (each bilinear):
    d/dg = gga @ b + a @ ggb, d/da = g @ ggb^T, d/db = gga^T @ g (matmul_backward itself, with its
    operands swapped, sums broadcast batch dims and handles 1-D operands)."""
    m0, m1 = output_mask
    dg = da = db = None
    if grad_input_mask[0]:
        parts = ([ops.matmul(gga, b)] if m0 else []) + ([ops.matmul(a, ggb)] if m1 else [])
        dg = parts[0] if len(parts) == 1 else ops.add(parts[0], parts[1]) if parts else None
    if grad_input_mask[1] and m1:
        da = ops.matmul_backward(g, a, ggb, (True, False))[0]
    if grad_input_mask[2] and m0:
        db = ops.matmul_backward(g, gga, b, (False, True))[1]
    return dg, da, db


define("matmul_backward", inputs=(Tensor("grad_out", F), Tensor("a", F), Tensor("b", F)),
       attrs=(Attr("output_mask", list[bool], (True, True)),), outputs=("grad_a", "grad_b"),
       shape=_matmul_bw_shape, forward=Impl(CO.matmul_backward), backward=_matmul_bw_bw,
       save=("grad_out", "a", "b"), api="kernels.backward.matmul", doc=CO.matmul_backward.__doc__)
def _linear_bw_shape(g, x, w, output_mask=(True, True, True)):
    out = linear_shape(x, w)
    if tuple(g.shape) != out.shape:
        raise ValueError(f"kernels.backward.linear: grad_out {tuple(g.shape)}, x {tuple(x.shape)} and weight "
                         f"{tuple(w.shape)} do not match a linear layer")
    shapes = (x.shape, w.shape, (w.shape[0],))
    return tuple(Spec(s if m else (0,), x.dtype) for s, m in zip(shapes, output_mask))


def _linear_bw_bw(ops, ggx, ggw, ggb, g, x, w, output_mask, grad_input_mask):
    """linear's double backward, from ``grad_x = g @ w``, ``grad_w = g^T x``, ``grad_b = sum(g)``:
    d/dg = linear(ggx, w, ggb) + linear(x, ggw), d/dx = g @ ggw, d/dw = g^T ggx (linear_backward
    itself with its operands swapped)."""
    mx, mw, mb = output_mask
    dg = dx = dw = None
    if grad_input_mask[0]:
        parts = []
        if mx:
            parts.append(ops.linear(ggx, w, ggb if mb else None))
        elif mb:
            parts.append(ops.add(ops.mul(g, 0.0), ggb))     # ggb broadcast to g's shape
        if mw:
            parts.append(ops.linear(x, ggw))
        dg = parts[0] if len(parts) == 1 else ops.add(parts[0], parts[1]) if parts else None
    if grad_input_mask[1] and mw:
        dx = ops.linear_backward(g, x, ggw, (True, False, False))[0]
    if grad_input_mask[2] and mx:
        dw = ops.linear_backward(g, ggx, w, (False, True, False))[1]
    return dg, dx, dw


define("linear_backward", inputs=(Tensor("grad_out", F), Tensor("x", F), Tensor("weight", F)),
       attrs=(Attr("output_mask", list[bool], (True, True, True)),), outputs=("grad_x", "grad_weight", "grad_bias"),
       shape=_linear_bw_shape, forward=Impl(CO.linear_backward), backward=_linear_bw_bw,
       save=("grad_out", "x", "weight"), api="kernels.backward.linear", doc=CO.linear_backward.__doc__)
define("layer_norm_backward", inputs=(Tensor("grad_out", F), Tensor("x", F), Tensor("mean", F, diff=False),
                                      Tensor("rstd", F, diff=False), Tensor("weight", F, optional=True),
                                      Tensor("bias", F, optional=True)),
       attrs=(Attr("normalized_shape", _o), Attr("output_mask", _o, (True, True, True))),
       outputs=("grad_x", "grad_weight", "grad_bias"), shape=_ln_bw_shape, forward=Impl(N.layer_norm_backward),
       generate=False, api="kernels.backward.layer_norm",
       # mean / rstd: aten::native_layer_norm's (canna's native_layer_norm gives the same: outer dims, then 1s)
       aten=(TorchFn("aten::native_layer_norm_backward", "grad_out, input:x, normalized_shape, mean, rstd, weight, "
                     "bias, output_mask", guard=_ln_bw_aten),),
       doc=N.layer_norm_backward.__doc__)
define("nll_loss_backward", inputs=(Tensor("grad_out", F), Tensor("input", F, diff=False),
                                    Tensor("target", C.INTS, diff=False), Tensor("weight", F, optional=True, diff=False),
                                    Tensor("total_weight", F, optional=True, diff=False)),
       attrs=_loss_attrs, shape=lambda g, input, *a, **k: Spec(input.shape, input.dtype),
       forward=Impl(N.nll_loss_backward), generate=False, api="kernels.backward.nll_loss",
       aten=tuple(TorchFn(f"aten::{fn}", "grad_output:grad_out, self:input, target, weight, reduction, ignore_index, "
                          "total_weight", convert={"reduction": _reduction}, guard=_nll_bw_aten)
                  for fn in ("nll_loss_backward", "nll_loss2d_backward")),
       doc=N.nll_loss_backward.__doc__)
define("max_pool2d_backward", inputs=(Tensor("grad_out", F), Tensor("x", F), Tensor("indices", C.INTS)),
       attrs=_pool_attrs, shape=lambda g, x, *a, **k: Spec(x.shape, g.dtype), forward=Impl(N.max_pool2d_backward),
       generate=False, api="kernels.backward.max_pool2d",
       aten=(TorchFn("aten::max_pool2d_with_indices_backward", "grad_output:grad_out, self:x, kernel_size, stride, "
                     "padding, dilation, ceil_mode, indices", convert={"stride": _pool_stride}, guard=_pool_bw_aten),))
define("conv2d_backward", inputs=(Tensor("grad_out", F), Tensor("x", F), Tensor("weight", F)),
       attrs=(Attr("stride", _o, 1), Attr("padding", _o, 0), Attr("dilation", _o, 1), Attr("groups", _o, 1),
              Attr("output_mask", _o, (True, True, True))),
       outputs=("grad_x", "grad_weight", "grad_bias"),
       shape=lambda g, x, w, *a, **k: (Spec(x.shape, x.dtype), Spec(w.shape, w.dtype), Spec((w.shape[0],), w.dtype)),
       forward=Impl(N.conv2d_backward), generate=False, api="kernels.backward.conv2d",
       aten=(TorchFn("aten::convolution_backward", "grad_output:grad_out, input:x, weight, bias_sizes, stride, padding, "
                     "dilation, transposed, output_padding, groups, output_mask", fixed={"transposed": False},
                     guard=_conv_aten),))
