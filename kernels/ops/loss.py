"""The mean squared error loss (issue 14): ``mse_loss`` — ``torch.nn.functional.mse_loss`` — as
``aclnnMseLoss`` and its gradient ``aclnnMseLossBackward`` (``kernels/_sim/op_loss.c``): the
squared differences of ``input`` and ``target`` over their broadcast shape, reduced by
``reduction`` (``"none"``, ``"mean"``, ``"sum"``; aclnn's 0, 1, 2); the gradient of ``input`` is
``2 g (input - target)`` (``/ numel`` for the mean), the target's its negation (PyTorch's
``tools/autograd/derivatives.yaml``).
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, TorchFn, define
from .nn import aten_reduction

_reduction = aten_reduction(None)   # (another code: PyTorch's mse_loss kernel asserts; canna refuses it)

F = C.FLOATS
REDUCTIONS = ("none", "mean", "sum")   # aclnn's reduction codes are the indices


def _dtype(api, *ts):
    if len({t.dtype for t in ts}) > 1:
        raise TypeError(f"{api}: operands must have one dtype, got {', '.join(t.dtype.name for t in ts)}")
    return ts[0].dtype


def _mse_shape(input, target, reduction="mean", **attrs):
    api = "kernels.mse_loss"
    shape = C.broadcast_shapes(api, tuple(input.shape), tuple(target.shape))
    return Spec(shape if reduction == "none" else (), _dtype(api, input, target))


def _mse_bw_shape(grad_out, input, target, reduction="mean", **attrs):
    api = "kernels.backward.mse_loss"
    shape = C.broadcast_shapes(api, tuple(grad_out.shape), tuple(input.shape), tuple(target.shape))
    return Spec(shape, _dtype(api, grad_out, input, target))


def _code(lib, keep, reduction):
    return (REDUCTIONS.index(reduction),)


def _mse_backward(ops, g, input, target, reduction):
    gi = ops.mse_loss_backward(g, input, target, reduction)
    return gi, ops.neg(gi)


_RED = (Attr("reduction", str, "mean", choices=REDUCTIONS),)
define("mse_loss", inputs=(Tensor("input", F), Tensor("target", F)), attrs=_RED, shape=_mse_shape,
       forward=Aclnn("MseLoss", params=_code), save=("input", "target"), backward=_mse_backward,
       torch=(TorchFn("torch.nn.functional.mse_loss",
                      ("input", "target", ("size_average", None), ("reduce", None), ("reduction", "mean"),
                       ("weight", None)),
                      fixed={"size_average": None, "reduce": None, "weight": None}),),
       aten=(TorchFn("aten::mse_loss", "self:input, target, reduction", convert={"reduction": _reduction}),),
       doc="Mean squared error (``torch.nn.functional.mse_loss``; ``aclnnMseLoss``): ``(input - target)²`` over "
           "their broadcast shape with ``reduction=\"none\"``, its mean (``\"mean\"``: NaN for no elements) or sum "
           "as a 0-dim array. Floating dtypes, one dtype for both; the mean and sum accumulate in float64.\n\n"
           "Raises:\n    ValueError: shapes that do not broadcast, another reduction. TypeError: mixed dtypes.")
define("mse_loss_backward", inputs=(Tensor("grad_out", F), Tensor("input", F, diff=False),
                                    Tensor("target", F, diff=False)),
       attrs=_RED, shape=_mse_bw_shape, forward=Aclnn("MseLossBackward", params=_code),
       api="kernels.backward.mse_loss",
       aten=(TorchFn("aten::mse_loss_backward", "grad_output:grad_out, self:input, target, reduction",
                     convert={"reduction": _reduction}),),
       doc="Gradient of :func:`kernels.mse_loss` with respect to ``input``: ``2 grad_out (input - target)``, divided "
           "by the number of elements for ``reduction=\"mean\"``; ``grad_out`` is 0-dim for mean and sum "
           "(``aclnnMseLossBackward``).")
