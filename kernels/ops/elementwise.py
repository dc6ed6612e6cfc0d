"""Elementwise ops: one registry entry each (kernels/_registry.py). The unary math and activations
and their backward kernels and the broadcasting arithmetic (add, sub, mul, div: a Python-number
operand, ``alpha``, in place; pow with a number exponent) are generated from their entry (one
aclnn call each, torch_npu's mapping: ``gelu`` → ``aclnnGeluV2``, relu's gradient →
``aclnnThresholdBackward``, ``x + 2`` → ``aclnnAdds``, ...).

Gradients (PyTorch's ``tools/autograd/derivatives.yaml``): from the input for log (``g / x``),
silu, gelu, abs (``g * sign(x)``); from the output for exp (``g * y``), sigmoid, tanh, relu
(``g * (y > 0)``), sqrt (``g / (2 y)``).
"""
from __future__ import annotations

import numbers

from .. import _core as C
from .._registry import Aclnn, Attr, Rejected, Spec, Tensor, TorchFn, define, grad_like, same, same_float
from .._registry import torch_dtype_name as _dt

ARITH, FLOATS = C.ARITH, C.FLOATS


def _binary_shape(x, y, **attrs):
    """Broadcast shape, PyTorch's promotion (a Python number is a weak scalar)."""
    xs = () if C.is_scalar(x) else x.shape
    ys = () if C.is_scalar(y) else y.shape
    return Spec(C.broadcast_shapes("shape rule", xs, ys), C.result_type(x, y))


def _alpha_shape(x, y, alpha=1):
    s = _binary_shape(x, y)
    if C.category(s.dtype) < 2 and isinstance(alpha, float):
        raise TypeError(f"for integer arrays alpha must be an integer, not {alpha!r} (PyTorch's rule)")
    return s


def _div_shape(x, y, **attrs):
    """True division: integer operands give float32 (``torch.div`` without ``rounding_mode``)."""
    s = _binary_shape(x, y)
    return s if C.category(s.dtype) == 2 else Spec(s.shape, C.DEFAULT_FLOAT)


def _pow_shape(x, exponent):
    dt = C.result_type(x, exponent)
    if C.category(dt) < 2 and exponent < 0:
        raise ValueError(f"integers to negative integer powers are not allowed (exponent {exponent})")
    return Spec(x.shape, dt)


#: the range a Python number must lie in to convert to a tensor's dtype where aten converts it
#: with an overflow check (``c10::checked_convert``, ``c10/util/TypeCast.h``: "value cannot be
#: converted to type c10::Half without overflow"; infinities and NaN pass; float32 and float64 are
#: not checked): pow's exponent, masked_fill's value
CHECKED_RANGE = {"float16": (-65504.0, 65504.0), "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38),
                 "int8": (-2 ** 7, 2 ** 7 - 1), "uint8": (0, 2 ** 8 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
                 "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


def checked_convert_overflows(dt_name, v) -> bool:
    """Whether aten's ``checked_convert`` of the Python number ``v`` to dtype ``dt_name`` raises
    (see :data:`CHECKED_RANGE`)."""
    lo_hi = CHECKED_RANGE.get(dt_name)
    return (lo_hi is not None and v == v and abs(v) != float("inf")
            and not lo_hi[0] <= v <= lo_hi[1])


def _pow_aten(x, exponent):   # below the dispatcher aten's scalar conversion has not run yet
    if _dt(x) not in CHECKED_RANGE or isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return None
    if _dt(x).startswith(("int", "uint")) and not isinstance(exponent, int):
        return None   # (a float power of an integer tensor is float32)
    if checked_convert_overflows(_dt(x), exponent):
        return Rejected(f"the exponent {exponent!r} overflows {_dt(x)} (aten::pow rejects it)")


def _scalar_param(name):
    """An attribute passed to aclnn as an aclScalar (add's alpha, pow's exponent)."""
    def params(lib, keep, **attrs):
        v = attrs[name]
        sv = C.Param.scalar(lib, int(v) if isinstance(v, bool) else v)
        keep.append(sv)
        return (sv,)
    return params


# gradients (PyTorch's tools/autograd/derivatives.yaml: add.Tensor, sub.Tensor, mul.Tensor,
# div.Tensor, pow.Tensor_Scalar); a broadcast operand's gradient is summed to its shape by the shims
def _add_bw(ops, g, alpha, grad_input_mask=(True, True)):
    return g, ((g if alpha == 1 else ops.mul(g, alpha)) if grad_input_mask[1] else None)


def _sub_bw(ops, g, alpha, grad_input_mask=(True, True)):
    return g, (ops.mul(g, -alpha) if grad_input_mask[1] else None)


def _mul_bw(ops, g, x, y, grad_input_mask=(True, True)):
    return (ops.mul(g, y) if grad_input_mask[0] else None), (ops.mul(g, x) if grad_input_mask[1] else None)


def _div_bw(ops, g, x, y, grad_input_mask=(True, True)):
    t = ops.div(g, y)   # d/dx = 1 / y, d/dy = -x / y**2
    return (t if grad_input_mask[0] else None), (ops.div(ops.mul(t, x), ops.mul(y, -1)) if grad_input_mask[1]
                                                 else None)


def _pow_bw(ops, g, x, exponent):
    if exponent == 0:
        return ops.mul(g, 0)
    return ops.mul(g, ops.mul(ops.pow(x, exponent - 1), exponent))


def _binary(name, aclnn, scalar, *, shape, backward, save=(), alpha=False, commute=None, torch, rtorch=(),
            inplace=(), extras=None, more=(), doc):
    """add / sub / mul / div: ``x`` and ``y`` arrays or (one of them) a Python number, broadcast;
    ``alpha`` for add and sub; ``out=`` may be ``x`` or ``y`` (in place). Their aten overloads are
    ``aten::<name>.Tensor`` and ``aten::<name>_.Tensor`` (a Python number there is a wrapped-number
    tensor, which the aten route hands over as the number: PyTorch's weak scalar)."""
    names = ("input", "other:y") + ((("alpha", 1),) if alpha else ())
    forms = ([TorchFn(f, names, fixed=extras) for f in torch]
             + [TorchFn(f, ("input", "other:y"), reflected=True) for f in rtorch]
             + [TorchFn(f, names, fixed=extras, inplace=True) for f in inplace] + list(more))
    schema = "self, other:y" + (", alpha" if alpha else "")
    aten = (TorchFn(f"aten::{name}.Tensor", schema), TorchFn(f"aten::{name}_.Tensor", schema, inplace=True))
    return define(name, inputs=(Tensor("x", ARITH, scalar=True), Tensor("y", ARITH, scalar=True)),
                  attrs=(Attr("alpha", numbers.Number, 1),) if alpha else (), shape=shape,
                  forward=Aclnn(aclnn, _scalar_param("alpha") if alpha else None, scalar=scalar, commute=commute),
                  backward=backward, save=save, torch=forms, aten=aten, doc=doc, fast=True, elementwise=True)


_ARGS = """

    Args:
        x, y: arrays (anything :func:`canna_dl.asarray` takes: torch/TF/JAX tensors, NumPy arrays,
            DeviceArrays; read in place) or Python numbers (one of them may be: a "weak" scalar in
            PyTorch's promotion, which keeps the array's dtype).{alpha}
        out: an array of the result's shape whose dtype the result can be cast to; may be exactly
            ``x`` or ``y`` (in place). Returned.
        stream: the :class:`acl_rt.Stream` to run on (default: the current stream).

    Dtypes: float32, float64, float16, bfloat16, int32, int64; the result dtype follows PyTorch's
    promotion (:func:`kernels.result_type`){div}.

    Returns:
        An array of the inputs' kind (see :func:`kernels.result_kind`), or ``out``.

    Raises:
        TypeError: an unsupported dtype, two Python numbers{alpha_err}, an ``out`` dtype the result
            cannot be cast to. ValueError: shapes that do not broadcast, a wrong-shaped, read-only
            or overlapping ``out``, operands on another device than the stream.
"""


def _doc(head, alpha=False, div=False):
    return head + _ARGS.format(
        alpha="\n        alpha: a Python number multiplying ``y`` (an int for integer results)." if alpha else "",
        alpha_err=", a float ``alpha`` for integer arrays" if alpha else "",
        div="; integer operands give float32" if div else "")


_T = "torch.Tensor."
_binary("add", "Add", "Adds", shape=_alpha_shape, backward=_add_bw, alpha=True, commute=lambda alpha: alpha == 1,
        torch=("torch.add", _T + "add"), rtorch=(_T + "__radd__",), inplace=(_T + "add_",),
        doc=_doc("``x + alpha * y`` with NumPy broadcasting (``torch.add``; ``aclnnAdd`` / ``aclnnAdds``).",
                 alpha=True))
_binary("sub", "Sub", "Subs", shape=_alpha_shape, backward=_sub_bw, alpha=True,
        torch=("torch.sub", "torch.subtract", _T + "sub", _T + "subtract"), rtorch=(_T + "__rsub__",),
        inplace=(_T + "sub_", _T + "subtract_"),
        more=(TorchFn("torch.rsub", ("input", "other:y", ("alpha", 1)), reflected=True),),   # other - alpha * input
        doc=_doc("``x - alpha * y`` with broadcasting (``torch.sub``; ``aclnnSub`` / ``aclnnSubs``; a number "
                 "first is a 0-d array: aclnn has no reflected form).", alpha=True))
_binary("mul", "Mul", "Muls", shape=_binary_shape, backward=_mul_bw, save=("x", "y"), commute=True,
        torch=("torch.mul", "torch.multiply", _T + "mul", _T + "multiply"), rtorch=(_T + "__rmul__",),
        inplace=(_T + "mul_", _T + "multiply_"),
        doc=_doc("``x * y`` with broadcasting (``torch.mul``; ``aclnnMul`` / ``aclnnMuls``)."))
_binary("div", "Div", "Divs", shape=_div_shape, backward=_div_bw, save=("x", "y"),
        torch=("torch.div", "torch.divide", "torch.true_divide", _T + "div", _T + "divide", _T + "true_divide"),
        rtorch=(_T + "__rdiv__", _T + "__rtruediv__"), inplace=(_T + "div_", _T + "divide_", _T + "true_divide_"),
        extras={"rounding_mode": None},
        doc=_doc("True division ``x / y`` with broadcasting (``torch.div`` without ``rounding_mode``; ``aclnnDiv`` "
                 "/ ``aclnnDivs``); division by zero gives inf / NaN as IEEE 754 says.", div=True))
define("pow", inputs=(Tensor("x", ARITH),), attrs=(Attr("exponent", numbers.Number),), shape=_pow_shape,
       forward=Aclnn("PowTensorScalar", _scalar_param("exponent")), backward=_pow_bw, save=("x",),
       torch=tuple(TorchFn(f, ("input", "exponent")) for f in ("torch.pow", _T + "pow", _T + "__pow__"))
       + (TorchFn(_T + "pow_", ("input", "exponent"), inplace=True),),
       aten=(("aten::pow.Tensor_Scalar", "self:x, exponent", _pow_aten),
             TorchFn("aten::pow_.Scalar", "self:x, exponent", inplace=True, guard=_pow_aten)),
       fast=True, elementwise=True,
       doc="``x ** exponent`` for a Python-number exponent (``torch.pow``; ``aclnnPowTensorScalar``).\n\n"
           "The result dtype is ``result_type(x, exponent)``: an integer array to an integer power stays integer "
           "(wrapping on overflow), to a float power becomes float32. The gradient is "
           "``grad * exponent * x ** (exponent - 1)``.\n\n"
           "Raises:\n    TypeError: ``exponent`` is not a Python number (array exponents are not supported).\n"
           "    ValueError: an integer array to a negative integer power (as PyTorch refuses it).")


# ---------------------------------------------------------------------------------------------
# generated: unary math and activations

def _unary(name, aclnn, *, dtypes=ARITH, shape=same_float, backward=None, save=(), attrs=(), params=None,
           torch=(), aten=None, doc, key=None):
    """A unary op; its aten overload is ``aten::<name>`` (``aten=``: others) with the op's
    attributes as the schema's."""
    return define(name, inputs=(Tensor("x", dtypes),), attrs=attrs, shape=shape,
                  forward=Aclnn(aclnn, params, key), backward=backward, save=save, torch=torch,
                  aten=(f"aten::{name}",) if aten is None else aten, doc=doc, fast=True, elementwise=True)


def _grad_op(name, aclnn, fwd, *, params=None, attrs=(), backward=None, save=(), doc, key=None, t="x", aten=None):
    """The backward kernel ``f(grad_out, t)`` of ``fwd`` (``kernels.backward.<fwd>``); ``t`` is the
    forward's input ``x`` or output ``y``; its aten overload is ``aten::<name>(grad_output, self or
    output, attributes...)`` (``aten=``: another)."""
    if aten is None:
        aten = ((f"aten::{name}", f"grad_output:grad_out, {'self:x' if t == 'x' else 'output:y'}"
                 + "".join(f", {a.name}" for a in attrs)),)
    return define(name, inputs=(Tensor("grad_out", FLOATS), Tensor(t, FLOATS, diff=False)), attrs=attrs,
                  shape=grad_like, forward=Aclnn(aclnn, params, key), backward=backward, save=save, doc=doc,
                  aten=aten, fast=True, elementwise=True, api=f"kernels.backward.{fwd}")


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
       torch=("torch.relu", "torch.Tensor.relu", ("torch.nn.functional.relu", {"inplace": False})),
       aten=("aten::relu", TorchFn("aten::relu_", inplace=True)),
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
         aten=(("aten::threshold_backward", "grad_output:grad_out, self:x, threshold", {"threshold": 0}),),
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
