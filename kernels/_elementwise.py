"""Elementwise ops written by hand: casts and copies, and the helpers of the generated ones (a
Python-number operand as a 0-d array). The arithmetic (add, sub, mul, div, pow) and the unary
math and activations are generated from their registry entries (``kernels/ops/elementwise.py``).
"""
from __future__ import annotations

import canna_dl
from canna_dl import DeviceArray

from . import _core as C
from ._core import ARITH, INT64, F32, F16, BF16, BOOL

__all__ = ["astype", "cast", "clone", "contiguous", "copy_"]

_CAST_DTYPES = ARITH + (C.INT8, C.UINT8, C.INT16, BOOL)


def _scalar_key(v):
    """A cache key for a scalar parameter: NaN and -0.0 are kept apart from other values."""
    if isinstance(v, float) and (v != v or v == 0.0):
        return ("f", repr(v))
    return (type(v), v)


def _zero_size(outs):
    for o in outs:
        if o.post is not None:
            o.obj = o.post(o.arr)
    return outs


def _scalar_array(v, dtype, s):
    """A 0-d array holding scalar ``v`` for an op that has no scalar form (``2 - x``, ``2 / x``)."""
    a = canna_dl.empty((), dtype, device=s._device, stream=s)
    a.fill(v)
    return a


def _opmath(dt):
    """The dtype a scalar operand is held in: float32 for the 16-bit floats (they compute in float32
    anyway), int64 for integers, else the dtype itself."""
    if dt in (F16, BF16):
        return F32
    if C.category(dt) == 1:
        return INT64
    return dt


# ---------------------------------------------------------------------------------------------
# casts and copies

def astype(x, dtype, *, copy=True, out=None, stream=None):
    """``x`` converted to ``dtype`` (array API ``astype``; ``aclnnCast``): a new C-contiguous array
    of the input's kind. float → int truncates toward zero (NaN and out-of-range values give the
    minimum integer, as PyTorch on x86), → bool is ``x != 0``.

    Args:
        dtype: a canna, NumPy, PyTorch or TensorFlow dtype, or its name.
        copy: False returns ``x`` itself when it already has ``dtype``.

    Dtypes: float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool.

    Raises:
        TypeError: an unsupported dtype.
    """
    api = "kernels.astype"
    dt = canna_dl.dtype(dtype)
    C.check_dtype(api, "dtype", dt, _CAST_DTYPES)
    kind = C.result_kind(x) if out is None else None
    a = C.as_array(api, "x", x)
    C.check_dtype(api, "x", a.dtype, _CAST_DTYPES)
    if not copy and out is None and a.dtype is dt:
        return x
    return _copy_to(api, "Cast", a, kind, dt, out, stream)


cast = astype


def contiguous(x, *, stream=None):
    """``x`` if it is C-contiguous, else a C-contiguous copy of the input's kind
    (``torch.Tensor.contiguous``; ``aclnnInplaceCopy``). Broadcast (stride-0) views are
    materialized. Any dtype ``aclnnInplaceCopy`` takes (see :func:`astype`)."""
    api = "kernels.contiguous"
    kind = C.result_kind(x)
    if kind != C.CANNA and not C._cfg.unified:   # look at the caller's layout, not at a device copy
        hv = C._host_view(x)
        if hv is not None and hv.is_contiguous() and not hv._flags & C._AF_NEG:
            return x
    a = C.as_array(api, "x", x)
    if a.is_contiguous() and not a._flags & C._AF_NEG:
        if kind == C.CANNA or C._cfg.unified:
            return x
        return C._CONVERT[kind](a)   # discrete model: the (counted) device copy is contiguous
    return _clone(api, a, kind, stream)


def clone(x, *, stream=None):
    """A C-contiguous copy of ``x`` of the input's kind (``torch.clone`` with
    ``memory_format=torch.contiguous_format``; ``aclnnInplaceCopy`` into a new array). Any dtype
    of :func:`astype`.

    Raises:
        TypeError: an unsupported dtype."""
    api = "kernels.clone"
    return _clone(api, C.as_array(api, "x", x), C.result_kind(x), stream)


def _clone(api, a, kind, stream):
    C.check_dtype(api, "x", a.dtype, _CAST_DTYPES)
    return _copy_to(api, "InplaceCopy", a, kind, a.dtype, None, stream)


def copy_(dst, src, *, stream=None):
    """Copy ``src`` into ``dst`` (``torch.Tensor.copy_``; ``aclnnInplaceCopy``): ``src`` broadcasts
    to ``dst``'s shape and is converted to its dtype. Returns ``dst``.

    Raises:
        ValueError: ``src`` does not broadcast to ``dst``, ``dst`` is read-only or overlaps ``src``.
    """
    api = "kernels.copy_"
    if C.is_scalar(src):
        raise TypeError(f"{api}: src must be an array (use canna_dl's fill for a scalar)")
    a = C.as_array(api, "src", src)
    C.check_dtype(api, "src", a.dtype, _CAST_DTYPES)
    d = None
    if not isinstance(dst, DeviceArray) and not C._cfg.unified:
        d = C._host_view(dst)   # the caller's memory (not a device copy of it)
    if d is None:
        d = C.as_array(api, "dst", dst)
    C.check_dtype(api, "dst", d.dtype, _CAST_DTYPES)
    shape = C.broadcast_shapes(api, a.shape, d.shape)
    if shape != d.shape:
        raise ValueError(f"{api}: src of shape {a.shape} cannot be broadcast to dst's shape {d.shape}")
    s = C.device_and_stream(api, (a, d), stream)
    o = C.given_out(api, dst, d.shape, d.dtype, (("src", a),), allow_same=True, name="dst", exact_dtype=True)
    if o.arr.size == 0:
        return dst
    _launch_copy("InplaceCopy", C.prepare_input(a), o, s)
    return dst


def _copy_to(api, name, a, kind, dt, out, stream):
    s = C.device_and_stream(api, (a,), stream)
    if out is None:
        o = C.new_out(kind, a.shape, dt, s)
    else:
        o = C.given_out(api, out, a.shape, dt, (("x", a),), allow_same=False, exact_dtype=True)
    if o.arr.size == 0:
        return _zero_size([o])[0].obj
    _launch_copy(name, C.prepare_input(a), o, s)
    return o.obj


def _launch_copy(name, a, o, s):
    C.order_inputs(s, (a,))
    r = o.arr
    key = (name, a.dtype, a.shape, a.strides, r.dtype, r.shape, r.strides)
    plan = C.get_plan(key)
    if plan is None:
        if name == "Cast":
            args = lambda lib, t, keep: (t[0], r.dtype.acl, t[1])  # noqa: E731
        else:   # InplaceCopy(selfRef, src): the destination comes first
            args = lambda lib, t, keep: (t[1], t[0])  # noqa: E731
        plan = C.build_plan(name, (a,), (r,), args)
        C.put_plan(key, plan)
    C.launch(plan, s, (a.ptr, r.ptr), (o,), (a, r))
