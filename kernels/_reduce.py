"""Reductions: sum, mean, amax over dims (``aclnnReduceSum``, ``aclnnMean``, ``aclnnAmax``), and
``sum_to_size`` (the reduction broadcasting's gradient needs)."""
from __future__ import annotations

import canna_dl

from . import _core as C
from ._core import ARITH, FLOATS, INT64

__all__ = ["sum", "mean", "amax", "sum_to_size"]


def _reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if d in dims else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in dims)


def _reduce(api, name, x, dim, keepdim, dtype, out, stream):
    kind = C.result_kind(x) if out is None else None
    a = C.as_array(api, "x", x)
    C.check_dtype(api, "x", a.dtype, ARITH + (C.BOOL,) if name == "ReduceSum" else ARITH)   # a bool sum counts
    if a.ndim > C.MAX_DIMS:
        raise ValueError(f"{api}: at most {C.MAX_DIMS} dimensions are supported, got {a.ndim}")
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None   # dim=() reduces every dim, as in PyTorch
    dims = C.dims_arg(api, dim, a.ndim)
    if not isinstance(keepdim, bool):
        raise TypeError(f"{api}: keepdim must be a bool, not {type(keepdim).__name__}")
    if name == "ReduceSum":
        rdt = canna_dl.dtype(dtype) if dtype is not None else (a.dtype if C.category(a.dtype) == 2 else INT64)
        C.check_dtype(api, "dtype", rdt, ARITH)
        if not C.can_cast(a.dtype, rdt):
            raise TypeError(f"{api}: cannot sum {a.dtype.name} values into {rdt.name}")
    elif name == "Mean":
        if dtype is None:
            if C.category(a.dtype) != 2:
                raise TypeError(f"{api}: the mean of a {a.dtype.name} array needs a floating dtype= (as in PyTorch: "
                                "it cannot infer a floating result dtype from an integer input)")
            rdt = a.dtype
        else:
            rdt = canna_dl.dtype(dtype)
            C.check_dtype(api, "dtype", rdt, FLOATS)
    else:
        if dtype is not None:
            raise TypeError(f"{api}: amax takes no dtype")
        rdt = a.dtype
        for d in dims:
            if a.shape[d] == 0:   # PyTorch refuses it even when the result is empty
                raise ValueError(f"{api}: cannot compute the maximum over dim {d} of size 0 (an empty reduction "
                                 "has no identity for amax)")
    oshape = _reduced_shape(a.shape, dims, keepdim)
    s = C.device_and_stream(api, (a,), stream)
    o = C.out_or_new(api, out, kind, oshape, rdt, s, (("x", a),))
    dl = list(dims)

    if name == "ReduceSum":
        def args(lib, t, keep):
            arr = C.Param.ints(lib, dl)
            keep.append(arr)
            return (t[0], arr, keepdim, rdt.acl, t[1])
    elif name == "Mean":
        def args(lib, t, keep):
            arr = C.Param.ints(lib, dl)
            keep.append(arr)
            return (t[0], arr, keepdim, rdt.acl, t[1])
    else:
        def args(lib, t, keep):
            arr = C.Param.ints(lib, dl)
            keep.append(arr)
            return (t[0], arr, keepdim, t[1])
    C.run_op(name, s, (a,), (o,), args, (tuple(dl), keepdim))
    return o.obj


def sum(x, dim=None, keepdim=False, *, dtype=None, out=None, stream=None):  # noqa: A001 (torch.sum)
    """Sum over ``dim`` (an int, a sequence of ints, or None / () = all) (``torch.sum``;
    ``aclnnReduceSum``). Accumulates in float64 / int64.

    Result dtype: ``dtype`` if given, else the input's for floats and int64 for integers (as
    PyTorch). An empty reduction sums to 0. Dtypes: floats, int32, int64.

    Raises:
        AxisError: a dim out of range. ValueError: a repeated dim, a bad ``out``.
        TypeError: an unsupported dtype.
    """
    return _reduce("kernels.sum", "ReduceSum", x, dim, keepdim, dtype, out, stream)


def mean(x, dim=None, keepdim=False, *, dtype=None, out=None, stream=None):
    """Mean over ``dim`` (``torch.mean``; ``aclnnMean``): floating inputs (or ``dtype=`` a float for
    integer ones); an empty reduction gives NaN. See :func:`sum`."""
    return _reduce("kernels.mean", "Mean", x, dim, keepdim, dtype, out, stream)


def amax(x, dim=(), keepdim=False, *, out=None, stream=None):
    """Maximum over ``dim`` (``torch.amax``: ``dim=()`` or None reduces every dim; ``aclnnAmax``).
    NaN propagates. Dtypes: floats, int32, int64.

    Raises:
        ValueError: a reduction over a dim of size 0 (no identity). See :func:`sum`.
    """
    return _reduce("kernels.amax", "Amax", x, dim, keepdim, None, out, stream)


def sum_to_size(x, shape, *, stream=None):
    """``x`` summed down to ``shape``, which ``x``'s shape must broadcast from
    (``torch.Tensor.sum_to_size``: the gradient of a broadcast). Returns ``x`` itself when the shapes
    already match.

    Raises:
        ValueError: ``shape`` does not broadcast to ``x``'s shape.
    """
    api = "kernels.sum_to_size"
    a = C.as_array(api, "x", x)
    shape = tuple(shape)
    if a.shape == shape:
        return x
    lead = a.ndim - len(shape)
    if lead < 0 or C.broadcast_shapes(api, shape, a.shape) != a.shape:
        raise ValueError(f"{api}: shape {shape} is not expandable to size {a.shape}")
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and a.shape[lead + i] != 1]
    r = sum(x, dims, keepdim=True, dtype=a.dtype if C.category(a.dtype) == 2 else None, stream=stream)
    ra = C.as_array(api, "r", r)
    view = ra.reshape(shape) if ra.shape != shape else ra
    if view is ra:
        return r
    return _same_kind(r, view)


def _same_kind(template, arr):
    """``arr`` (a DeviceArray view) as the kind of ``template``."""
    kind = C.result_kind(template)
    if kind == C.CANNA:
        return arr
    return C._CONVERT[kind](arr)
