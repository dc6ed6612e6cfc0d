"""Adaptive average pooling: its registry entries (kernels/_registry.py).

Output cell ``(i, j)`` of an ``(oh, ow)`` output averages input rows
``[floor(i * H / oh), ceil((i + 1) * H / oh))`` and the columns likewise (PyTorch's rule,
``aten/src/ATen/native/AdaptiveAveragePooling.cpp``); the gradient spreads each cell's gradient
evenly over its window (``aclnnAdaptiveAvgPool2dBackward``).
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, define

F = C.FLOATS


def output_size2(api, output_size):
    """``output_size`` as (oh, ow): one int is used for both (``torch.nn.functional.adaptive_avg_pool2d``)."""
    o = tuple(output_size) * 2 if len(output_size) == 1 else tuple(output_size)
    if len(o) != 2:
        raise ValueError(f"{api}: output_size must have 1 or 2 values, got {len(o)}")
    if min(o) < 0:
        raise ValueError(f"{api}: output_size must be >= 0, got {o}")
    return o


def adaptive_avg_pool2d_shape(input, output_size):
    api = "kernels.adaptive_avg_pool2d"
    if len(input.shape) not in (3, 4):
        raise ValueError(f"{api}: input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape {tuple(input.shape)}")
    if 0 in input.shape[-3:]:
        raise ValueError(f"{api}: input of shape {tuple(input.shape)} has an empty non-batch dim")
    return Spec(tuple(input.shape[:-2]) + output_size2(api, output_size), input.dtype)


def _params(lib, keep, output_size):
    a = C.Param.ints(lib, output_size2("kernels.adaptive_avg_pool2d", output_size))
    keep.append(a)
    return (a,)


define("adaptive_avg_pool2d", inputs=(Tensor("input", F),), attrs=(Attr("output_size", list[int]),),
       shape=adaptive_avg_pool2d_shape, forward=Aclnn("AdaptiveAvgPool2d", _params),
       backward=lambda ops, g, x, output_size: ops.adaptive_avg_pool2d_backward(g, x), save=("input",),
       torch=("torch.nn.functional.adaptive_avg_pool2d",),
       doc="Adaptive average pooling over the last two dims (``torch.nn.functional.adaptive_avg_pool2d``, "
           "``nn.AdaptiveAvgPool2d``; ``aclnnAdaptiveAvgPool2d``): ``input`` ``[N, C, H, W]`` or ``[C, H, W]`` to "
           "``(..., oh, ow)``; ``output_size``: ``(oh, ow)`` or one int for both (a ``None`` entry is left to "
           "PyTorch). Floating dtypes.\n\n"
           "Raises:\n    ValueError: another number of dims, an empty spatial dim, a negative size.")


def _bw_shape(grad_out, input):
    api = "kernels.backward.adaptive_avg_pool2d"
    if len(input.shape) not in (3, 4) or len(grad_out.shape) != len(input.shape) \
            or tuple(grad_out.shape[:-2]) != tuple(input.shape[:-2]):
        raise ValueError(f"{api}: grad_out of shape {tuple(grad_out.shape)} does not match input of shape "
                         f"{tuple(input.shape)}")
    return Spec(input.shape, grad_out.dtype)


define("adaptive_avg_pool2d_backward", inputs=(Tensor("grad_out", F), Tensor("input", F, diff=False)),
       shape=_bw_shape, forward=Aclnn("AdaptiveAvgPool2dBackward"),
       backward=lambda ops, gg, g: ops.adaptive_avg_pool2d(gg, tuple(g.shape[-2:])), save=("grad_out",),
       api="kernels.backward.adaptive_avg_pool2d",
       doc="Gradient of :func:`kernels.adaptive_avg_pool2d` with respect to ``input`` "
           "(``aclnnAdaptiveAvgPool2dBackward``): each cell of ``grad_out`` spread evenly over its window; linear "
           "in ``grad_out``, so differentiable again.")
