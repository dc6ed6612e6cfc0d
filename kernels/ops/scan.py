"""Cumulative sums (issue 14): ``cumsum`` — ``torch.cumsum`` / ``Tensor.cumsum`` (RoBERTa's position
ids) — as ``aclnnCumsum`` and ``cumsum_v2`` (``aclnnCumsumV2``: ``exclusive`` leaves the element
itself out, ``reverse`` sums from the end; ``kernels/_sim/op_reduce.c``). The gradient of a
cumulative sum is the reverse cumulative sum of the gradient (PyTorch's
``tools/autograd/derivatives.yaml``), one ``cumsum_v2`` call; floating sums accumulate in float64.
"""
from __future__ import annotations

from .. import _core as C
from .convert import CAST_DTYPES
from .._registry import DTYPE, Aclnn, Attr, Spec, Tensor, define


def _dim(x, dim):
    return C.wrap_dim("kernels.cumsum", dim, max(len(x.shape), 1))


def _cumsum_shape(x, dim, dtype=None):
    _dim(x, dim)
    if dtype is None:
        dtype = x.dtype if C.category(x.dtype) == 2 else C.INT64   # PyTorch: integers and bool sum in int64
    return Spec(x.shape, dtype)


def _v2_shape(x, dim, exclusive=False, reverse=False):
    _dim(x, dim)
    return Spec(x.shape, x.dtype)


def _cumsum_backward(ops, g, dim, dtype):
    return ops.cumsum_v2(g, dim, False, True)


define("cumsum", inputs=(Tensor("x", CAST_DTYPES),), attrs=(Attr("dim", int), Attr("dtype", DTYPE, None)),
       shape=_cumsum_shape,
       forward=Aclnn("Cumsum", params=lambda lib, keep, dim, dtype: (dim, _out_dtype(dtype))),
       backward=_cumsum_backward, torch=("torch.cumsum", "torch.Tensor.cumsum"),
       doc="The cumulative sum of ``x`` along ``dim`` (``torch.cumsum``; ``aclnnCumsum``): the result has "
           "``dtype`` if given, else ``x``'s dtype for floating ``x`` and int64 for integer or bool ``x`` (as "
           "PyTorch); floating sums accumulate in float64, integer sums wrap. Its gradient is the reverse "
           "cumulative sum of the gradient.\n\nRaises:\n    AxisError: ``dim`` out of range. TypeError: dtypes.")


def _out_dtype(dtype):
    """aclnnCumsum's dtype argument; None (the shape rule's choice, out's dtype) is ACL_DT_UNDEFINED,
    which the simulator reads as out's dtype (kernels/_sim/op_reduce.c)."""
    return -1 if dtype is None else dtype.acl


define("cumsum_v2", inputs=(Tensor("x", C.ARITH),),
       attrs=(Attr("dim", int), Attr("exclusive", bool, False), Attr("reverse", bool, False)),
       shape=_v2_shape,
       forward=Aclnn("CumsumV2", params=lambda lib, keep, dim, exclusive, reverse: (dim, exclusive, reverse)),
       backward=lambda ops, g, dim, exclusive, reverse: ops.cumsum_v2(g, dim, exclusive, not reverse),
       doc="A cumulative sum along ``dim`` (``aclnnCumsumV2``): ``exclusive`` leaves each element out of its own "
           "sum (the first is 0), ``reverse`` sums from the end; ``x``'s dtype. Its gradient is the cumulative sum "
           "of the gradient the other way.\n\nRaises:\n    AxisError: ``dim`` out of range.")
