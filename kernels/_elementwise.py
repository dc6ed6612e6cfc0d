"""Elementwise ops written by hand: arithmetic with NumPy broadcasting and Python-number operands
(``add`` → ``aclnnAdd`` / ``aclnnAdds``, ...), ``pow`` with a scalar exponent, casts and copies.
The unary math and activations are generated from their registry entries
(``kernels/ops/elementwise.py``).
"""
from __future__ import annotations

import builtins

import canna_dl
from canna_dl import DeviceArray

from . import _core as C
from . import _native
from . import _registry as R
from ._core import ARITH, INT64, F32, F16, BF16, BOOL, TORCH

_fast = _native.fast
_fast_stream = C.fast_stream
_FS = C._fast_state
_L = C._lib
_S = C._state

# op ids of the C fast path (keys of kernels/_native/fast.c): the registry's OpId enum
_ADD, _SUB, _MUL, _DIV, _POW = (int(R.reserve_op_id(n)) for n in ("canna__add", "canna__sub", "canna__mul",
                                                                  "canna__div", "canna__pow"))
_INPLACE = R.INPLACE   # flag: the output is x itself (x op= y, e.g. an optimizer's p.add_(g, alpha=-lr))

__all__ = ["add", "sub", "mul", "div", "pow", "astype", "cast", "contiguous", "copy_"]

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
# binary arithmetic

def _binary(api, op, x, y, alpha, out, stream, fkey=None):
    """add / sub / mul / div. ``op``: "Add", "Sub", "Mul", "Div". ``fkey``: the fast path's key of
    this call (a miss), to register the plan under."""
    xs, ys = C.is_scalar(x), C.is_scalar(y)
    if xs and ys:
        raise TypeError(f"{api}: at least one operand must be an array, got two Python scalars")
    kind = C.result_kind(x, y) if out is None else None
    a = None if xs else C.as_array(api, "x" if op != "Div" else "x", x)
    b = None if ys else C.as_array(api, "y", y)
    for name, arr in (("x", a), ("y", b)):
        if arr is not None:
            C.check_dtype(api, name, arr.dtype, ARITH)
    dtype = C.result_type(a if a is not None else x, b if b is not None else y)
    if op == "Div" and C.category(dtype) < 2:
        dtype = C.DEFAULT_FLOAT   # true division (torch.div without rounding_mode)
    if alpha is not None and op in ("Add", "Sub"):
        if not C.is_scalar(alpha):
            raise TypeError(f"{api}: alpha must be a Python number, not {type(alpha).__name__}")
        if C.category(dtype) < 2 and isinstance(alpha, float):
            raise TypeError(f"{api}: for integer arrays alpha must be an integer, not {alpha!r} (PyTorch's rule)")
    shape = C.broadcast_shapes(api, a.shape if a is not None else (), b.shape if b is not None else ())
    if len(shape) > C.MAX_DIMS:
        raise ValueError(f"{api}: at most {C.MAX_DIMS} dimensions are supported, got {len(shape)}")
    s = C.device_and_stream(api, (a, b), stream)
    if out is None:
        o = C.new_out(kind, shape, dtype, s)
    else:
        o = C.given_out(api, out, shape, dtype, (("x", a), ("y", b)), allow_same=True)
    if o.arr.size == 0:
        return _zero_size([o])[0].obj
    if a is not None:
        a = C.prepare_input(a)
    if b is not None:
        b = C.prepare_input(b)
    C.order_inputs(s, (a, b))
    # a scalar operand: the op's scalar form (aclnnAdds, ...) when it is the second operand, or
    # the first of a commutative op; else a 0-d array
    scalar = None
    if ys:
        scalar = y
    elif xs and (op == "Mul" or (op == "Add" and (alpha is None or alpha == 1))):
        scalar, a = x, b
        b = None
    elif xs:
        a = _scalar_array(x, _opmath(dtype), s)
    inplace = out is not None and out is x and C._kind_of_type(type(out)) == TORCH
    if inplace and _FS["on"] is None:   # a torch in-place call can be the first one seen
        C.fast_setup()
    if (kind != TORCH and not inplace) or xs:
        fkey = None
    if scalar is not None:
        return _run_scalar(api, op, a, scalar, alpha, o, s, fkey, inplace)
    return _run_tensor(api, op, a, b, alpha, o, s, fkey, inplace)


def _alpha_param(lib, alpha, dtype):
    if alpha is None:
        alpha = 1
    return C.Param.scalar(lib, alpha)


def _run_tensor(api, op, a, b, alpha, o, s, fkey=None, inplace=False):
    r = o.arr
    key = (op, a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, r.dtype, r.shape, r.strides,
           None if alpha is None else _scalar_key(alpha))
    plan = C.get_plan(key)
    if plan is None:
        if op in ("Add", "Sub"):
            def args(lib, t, keep):
                al = _alpha_param(lib, alpha, r.dtype)
                keep.append(al)
                return (t[0], t[1], al, t[2])
        else:
            def args(lib, t, keep):
                return (t[0], t[1], t[2])
        plan = C.build_plan(op, (a, b), (r,), args)
        C.put_plan(key, plan)
    C.launch(plan, s, (a.ptr, b.ptr, r.ptr), (o,), (a, b, r))
    if fkey is not None:
        C.fast_register(fkey, plan, a, r, o.obj, inplace)
    return o.obj


def _run_scalar(api, op, a, v, alpha, o, s, fkey=None, inplace=False):
    r = o.arr
    name = op + "s"
    key = (name, a.dtype, a.shape, a.strides, _scalar_key(v), r.dtype, r.shape, r.strides,
           None if alpha is None else _scalar_key(alpha))
    plan = C.get_plan(key)
    if plan is None:
        def args(lib, t, keep):
            sv = C.Param.scalar(lib, v)
            keep.append(sv)
            if op in ("Add", "Sub"):
                al = _alpha_param(lib, alpha, r.dtype)
                keep.append(al)
                return (t[0], sv, al, t[1])
            return (t[0], sv, t[1])
        plan = C.build_plan(name, (a,), (r,), args)
        C.put_plan(key, plan)
    C.launch(plan, s, (a.ptr, r.ptr), (o,), (a, r))
    if fkey is not None:
        C.fast_register(fkey, plan, a, r, o.obj, inplace)
    return o.obj


def add(x, y, *, alpha=1, out=None, stream=None):
    """``x + alpha * y`` with NumPy broadcasting (``torch.add``; ``aclnnAdd`` / ``aclnnAdds``).

    Args:
        x, y: arrays (anything :func:`canna_dl.asarray` takes: torch/TF/JAX tensors, NumPy arrays,
            DeviceArrays; read in place) or Python numbers (one of them may be).
        alpha: a Python number (an int for integer results).
        out: an array of the result's shape whose dtype the result can be cast to; may be exactly
            ``x`` or ``y`` (in place). Returned.
        stream: the :class:`acl_rt.Stream` to run on (default: the current stream).

    Dtypes: float32, float64, float16, bfloat16, int32, int64; the result dtype follows PyTorch's
    promotion (:func:`kernels.result_type`).

    Returns:
        An array of the inputs' kind (see :func:`kernels.result_kind`), or ``out``.

    Raises:
        TypeError: an unsupported dtype, a float ``alpha`` for integer arrays, an ``out`` dtype the
            result cannot be cast to. ValueError: shapes that do not broadcast, a wrong-shaped,
            read-only or overlapping ``out``, operands on another device than the stream.
    """
    k = None
    if stream is None and _FS["on"] and _L.gen == _S.generation and (out is None or out is x):
        k = _fast(_ADD if out is None else _ADD | _INPLACE, _fast_stream("kernels.add"), x, y, alpha)
        if k is not None and type(k) is not bytes:
            return k
    return _binary("kernels.add", "Add", x, y, alpha, out, stream, k)


def sub(x, y, *, alpha=1, out=None, stream=None):
    """``x - alpha * y`` with broadcasting (``torch.sub``; ``aclnnSub`` / ``aclnnSubs``). See :func:`add`."""
    k = None
    if stream is None and _FS["on"] and _L.gen == _S.generation and (out is None or out is x):
        k = _fast(_SUB if out is None else _SUB | _INPLACE, _fast_stream("kernels.sub"), x, y, alpha)
        if k is not None and type(k) is not bytes:
            return k
    return _binary("kernels.sub", "Sub", x, y, alpha, out, stream, k)


def mul(x, y, *, out=None, stream=None):
    """``x * y`` with broadcasting (``torch.mul``; ``aclnnMul`` / ``aclnnMuls``). See :func:`add`."""
    k = None
    if stream is None and _FS["on"] and _L.gen == _S.generation and (out is None or out is x):
        k = _fast(_MUL if out is None else _MUL | _INPLACE, _fast_stream("kernels.mul"), x, y, None)
        if k is not None and type(k) is not bytes:
            return k
    return _binary("kernels.mul", "Mul", x, y, None, out, stream, k)


def div(x, y, *, out=None, stream=None):
    """True division ``x / y`` with broadcasting (``torch.div``; ``aclnnDiv`` / ``aclnnDivs``):
    integer inputs give a float32 result; division by zero gives inf / NaN as IEEE 754 says.
    See :func:`add`."""
    k = None
    if stream is None and _FS["on"] and _L.gen == _S.generation and (out is None or out is x):
        k = _fast(_DIV if out is None else _DIV | _INPLACE, _fast_stream("kernels.div"), x, y, None)
        if k is not None and type(k) is not bytes:
            return k
    return _binary("kernels.div", "Div", x, y, None, out, stream, k)


# ---------------------------------------------------------------------------------------------
# unary math and activations, and their backward kernels: generated from their registry entries
# (kernels/ops/elementwise.py)

def pow(x, exponent, *, out=None, stream=None):  # noqa: A001 (torch.pow)
    """``x ** exponent`` for a Python-number exponent (``torch.pow``; ``aclnnPowTensorScalar``).

    The result dtype is ``result_type(x, exponent)``: an integer array to an integer power stays
    integer (wrapping on overflow), to a float power becomes float32.

    Raises:
        TypeError: ``exponent`` is not a Python number (array exponents are not supported).
        ValueError: an integer array to a negative integer power (as PyTorch refuses it).
    """
    api = "kernels.pow"
    fkey = None
    if out is None and stream is None and _FS["on"] and _L.gen == _S.generation:
        fkey = _fast(_POW, _fast_stream(api), x, exponent, None)
        if fkey is not None and type(fkey) is not bytes:
            return fkey
    if not C.is_scalar(exponent):
        raise TypeError(f"{api}: exponent must be a Python number (tensor ** scalar), not {type(exponent).__name__}")
    kind = C.result_kind(x) if out is None else None
    a = C.as_array(api, "x", x)
    C.check_dtype(api, "x", a.dtype, ARITH)
    dtype = C.result_type(a, exponent)
    if C.category(dtype) < 2 and exponent < 0:
        raise ValueError(f"{api}: integers to negative integer powers are not allowed (exponent {exponent})")
    s = C.device_and_stream(api, (a,), stream)
    o = C.new_out(kind, a.shape, dtype, s) if out is None else \
        C.given_out(api, out, a.shape, dtype, (("x", a),), allow_same=True)
    if o.arr.size == 0:
        return _zero_size([o])[0].obj
    a = C.prepare_input(a)
    C.order_inputs(s, (a,))
    r = o.arr
    e = exponent
    if isinstance(e, builtins.bool):
        e = int(e)
    key = ("PowTensorScalar", a.dtype, a.shape, a.strides, _scalar_key(e), r.dtype, r.shape, r.strides)
    plan = C.get_plan(key)
    if plan is None:
        def args(lib, t, keep):
            sv = C.Param.scalar(lib, e)
            keep.append(sv)
            return (t[0], sv, t[1])
        plan = C.build_plan("PowTensorScalar", (a,), (r,), args)
        C.put_plan(key, plan)
    C.launch(plan, s, (a.ptr, r.ptr), (o,), (a, r))
    if fkey is not None and kind == TORCH and e is exponent:
        C.fast_register(fkey, plan, a, r, o.obj)
    return o.obj


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
