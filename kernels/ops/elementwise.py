"""Elementwise ops: one registry entry each (kernels/_registry.py). The unary math and activations
and their backward kernels are generated from their entry (one aclnn call each, torch_npu's
mapping: ``gelu`` → ``aclnnGeluV2``, relu's gradient → ``aclnnThresholdBackward``, ...); the
broadcasting arithmetic (add, sub, mul, div, pow: scalar operands, ``alpha``, in place) is written
in ``kernels/_elementwise.py`` and described here.

Gradients (PyTorch's ``tools/autograd/derivatives.yaml``): from the input for log (``g / x``),
silu, gelu, abs (``g * sign(x)``); from the output for exp (``g * y``), sigmoid, tanh, relu
(``g * (y > 0)``), sqrt (``g / (2 y)``).
"""
from __future__ import annotations

from .. import _core as C
from .. import _elementwise as E
from .._registry import Aclnn, Attr, Impl, Spec, Tensor, define, grad_like, same, same_float

ARITH, FLOATS = C.ARITH, C.FLOATS


def _binary_shape(x, y, **attrs):
    """Broadcast shape, PyTorch's promotion (a Python number is a weak scalar)."""
    xs = () if C.is_scalar(x) else x.shape
    ys = () if C.is_scalar(y) else y.shape
    return Spec(C.broadcast_shapes("shape rule", xs, ys), C.result_type(x, y))


def _div_shape(x, y, **attrs):
    s = _binary_shape(x, y)
    return s if C.category(s.dtype) == 2 else Spec(s.shape, C.DEFAULT_FLOAT)


def _pow_shape(x, exponent, **attrs):
    return Spec(x.shape, C.result_type(x, exponent))


# hand-written (scalars, alpha, in place); their framework shims are in canna_dl.*._ops
define("add", inputs=(Tensor("x", ARITH), Tensor("y", ARITH)), attrs=(Attr("alpha", object, 1),),
       shape=_binary_shape, forward=Impl(E.add), generate=False,
       check_none=False)
define("sub", inputs=(Tensor("x", ARITH), Tensor("y", ARITH)), attrs=(Attr("alpha", object, 1),),
       shape=_binary_shape, forward=Impl(E.sub), generate=False,
       check_none=False)
define("mul", inputs=(Tensor("x", ARITH), Tensor("y", ARITH)), shape=_binary_shape, forward=Impl(E.mul),
       generate=False, check_none=False)
define("div", inputs=(Tensor("x", ARITH), Tensor("y", ARITH)), shape=_div_shape, forward=Impl(E.div),
       generate=False, check_none=False)
define("pow", inputs=(Tensor("x", ARITH),), attrs=(Attr("exponent", object),), shape=_pow_shape,
       forward=Impl(E.pow), generate=False, check_none=False)


# ---------------------------------------------------------------------------------------------
# generated: unary math and activations

def _unary(name, aclnn, *, dtypes=ARITH, shape=same_float, backward=None, save=(), attrs=(), params=None,
           torch=(), doc, key=None):
    return define(name, inputs=(Tensor("x", dtypes),), attrs=attrs, shape=shape,
                  forward=Aclnn(aclnn, params, key), backward=backward, save=save, torch=torch, doc=doc,
                  fast=True, elementwise=True)


def _grad_op(name, aclnn, fwd, *, params=None, attrs=(), backward=None, save=(), doc, key=None, t="x"):
    """The backward kernel ``f(grad_out, t)`` of ``fwd`` (``kernels.backward.<fwd>``); ``t`` is the
    forward's input ``x`` or output ``y``."""
    return define(name, inputs=(Tensor("grad_out", FLOATS), Tensor(t, FLOATS, diff=False)), attrs=attrs,
                  shape=grad_like, forward=Aclnn(aclnn, params, key), backward=backward, save=save, doc=doc,
                  fast=True, elementwise=True, api=f"kernels.backward.{fwd}")


_SEE = "Same conventions as :func:`kernels.add` (``out=``, ``stream=``, result kinds)."

_unary("neg", "Neg", shape=same, backward=lambda ops, g: ops.neg(g), torch=("torch.neg", "torch.Tensor.neg"),
       doc=f"``-x`` (``torch.neg``; ``aclnnNeg``). Dtypes: floats, int32, int64. {_SEE}")
_unary("abs", "Abs", shape=same, backward=lambda ops, g, x: ops.mul(g, ops.sign(x)), save=("x",),
       torch=("torch.abs", "torch.Tensor.abs"),
       doc=f"``|x|`` (``torch.abs``; ``aclnnAbs``); its gradient is ``grad * sign(x)`` (0 at 0, as PyTorch's). "
           f"Dtypes: floats, int32, int64. {_SEE}")
_unary("sign", "Sign", shape=same, backward=lambda ops, g: None, torch=("torch.sign", "torch.Tensor.sign"),
       doc=f"-1, 0 or 1 by the sign of ``x`` (0 for NaN and ±0; ``torch.sign``; ``aclnnSign``); its gradient is 0. "
           f"Dtypes: floats, int32, int64. {_SEE}")
_unary("exp", "Exp", backward=lambda ops, g, y: ops.mul(g, y), save=("out",), torch=("torch.exp", "torch.Tensor.exp"),
       doc=f"``e ** x`` (``torch.exp``; ``aclnnExp``). Integer inputs give float32. {_SEE}")
_unary("log", "Log", backward=lambda ops, g, x: ops.div(g, x), save=("x",), torch=("torch.log", "torch.Tensor.log"),
       doc=f"Natural logarithm (``torch.log``; ``aclnnLog``): NaN below 0, -inf at 0. Integer inputs give float32. "
           f"{_SEE}")
_unary("sqrt", "Sqrt", backward=lambda ops, g, y: ops.div(ops.mul(g, 0.5), y), save=("out",),
       torch=("torch.sqrt", "torch.Tensor.sqrt"),
       doc=f"Square root (``torch.sqrt``; ``aclnnSqrt``): NaN below 0. Integer inputs give float32. {_SEE}")
_unary("relu", "Relu", shape=same, backward=lambda ops, g, y: ops.relu_backward(g, y), save=("out",),
       doc=f"``max(x, 0)``, NaN kept (``torch.relu``; ``aclnnRelu``). Dtypes: floats, int32, int64. {_SEE}")
_unary("sigmoid", "Sigmoid", backward=lambda ops, g, y: ops.sigmoid_backward(g, y), save=("out",),
       torch=("torch.sigmoid", "torch.Tensor.sigmoid"),
       doc=f"``1 / (1 + e ** -x)`` (``torch.sigmoid``; ``aclnnSigmoid``). {_SEE}")
_unary("tanh", "Tanh", backward=lambda ops, g, y: ops.tanh_backward(g, y), save=("out",),
       torch=("torch.tanh", "torch.Tensor.tanh"),
       doc=f"Hyperbolic tangent (``torch.tanh``; ``aclnnTanh``). {_SEE}")
_unary("silu", "Silu", dtypes=FLOATS, backward=lambda ops, g, x: ops.silu_backward(g, x), save=("x",),
       torch=(("torch.nn.functional.silu", {"inplace": False}),),
       doc=f"``x * sigmoid(x)`` (``torch.nn.functional.silu``; ``aclnnSilu``). {_SEE}")

_GELU = ("none", "tanh")
_unary("gelu", "GeluV2", dtypes=FLOATS, attrs=(Attr("approximate", str, "none", choices=_GELU),),
       params=lambda lib, keep, approximate: (_GELU.index(approximate),),
       backward=lambda ops, g, x, approximate: ops.gelu_backward(g, x, approximate), save=("x",),
       torch=("torch.nn.functional.gelu",),
       doc="GELU (``torch.nn.functional.gelu``; ``aclnnGeluV2`` as torch_npu calls it): ``approximate=\"none\"`` "
           "is ``x * Φ(x)`` (the erf form), ``\"tanh\"`` the tanh approximation.\n\n"
           f"Raises:\n    ValueError: another ``approximate``. {_SEE}")


def _threshold0(lib, keep):
    th = C.Param.scalar(lib, 0.0)
    keep.append(th)
    return (th,)


def _gelu_mode(lib, keep, approximate):
    c = C.ffi.new("char[]", approximate.encode())
    keep.append(c)
    return (c,)


# relu's gradient is linear in grad_out: differentiable again in it (relu twice differentiable)
_grad_op("relu_backward", "ThresholdBackward", "relu", params=_threshold0,
         backward=lambda ops, gg, x: ops.relu_backward(gg, x), save=("x",), t="x",
         doc="Gradient of :func:`kernels.relu`: ``grad_out`` where ``x > 0``, else 0 (``aclnnThresholdBackward`` "
             "with threshold 0, as torch_npu; ``x`` may also be relu's output). Floating dtypes.")
_grad_op("gelu_backward", "GeluBackwardV2", "gelu", attrs=(Attr("approximate", str, "none", choices=_GELU),),
         params=_gelu_mode, doc="Gradient of :func:`kernels.gelu` at ``x`` (``aclnnGeluBackwardV2``).")
_grad_op("silu_backward", "SiluBackward", "silu",
         doc="Gradient of :func:`kernels.silu` at ``x`` (``aclnnSiluBackward``).")
_grad_op("sigmoid_backward", "SigmoidBackward", "sigmoid",
         t="y", doc="Gradient of :func:`kernels.sigmoid` from its **output** ``y``: ``grad_out * y * (1 - y)`` "
             "(``aclnnSigmoidBackward``).")
_grad_op("tanh_backward", "TanhBackward", "tanh",
         t="y", doc="Gradient of :func:`kernels.tanh` from its **output** ``y``: ``grad_out * (1 - y²)`` "
             "(``aclnnTanhBackward``).")
