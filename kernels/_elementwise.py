"""Elementwise ops: arithmetic with NumPy broadcasting, unary math and activations, their backward
kernels, casts and copies. Each is one aclnn call (torch_npu's mapping: ``add`` → ``aclnnAdd`` /
``aclnnAdds``, ``gelu`` → ``aclnnGeluV2``, relu's gradient → ``aclnnThresholdBackward``, ...).
"""
from __future__ import annotations

import builtins

import canna_dl
from canna_dl import DeviceArray

from . import _core as C
from . import _native
from ._core import ARITH, FLOATS, INT64, F32, F16, BF16, BOOL, TORCH

_fast = _native.fast
_fast_stream = C.fast_stream
_FS = C._fast_state
_L = C._lib
_S = C._state

# op ids of the C fast path (keys of kernels/_native/fast.c)
_ADD, _SUB, _MUL, _DIV = 1, 2, 3, 4
_NEG, _EXP, _LOG, _SQRT, _RELU, _SIGMOID, _TANH, _SILU, _GELU, _POW = 10, 11, 12, 13, 14, 15, 16, 17, 18, 19
_RELU_BW, _GELU_BW, _SILU_BW, _SIGMOID_BW, _TANH_BW = 30, 31, 32, 33, 34
_INPLACE = 0x10000   # flag: the output is x itself (x op= y, e.g. an optimizer's p.add_(g, alpha=-lr))

__all__ = ["add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "pow", "relu", "gelu", "silu", "sigmoid",
           "tanh", "astype", "cast", "contiguous", "copy_"]

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
# unary

def _unary(api, name, x, out, stream, *, keep_int, make_args=None, key_extra=(), param_dtypes=None, fop=0, fp=None):
    """out = f(x) for ``aclnn<name>(self, out)``. ``keep_int``: integer inputs give integer results
    (neg, relu); otherwise they give float32 (exp of an int32 array is float32, as in PyTorch).
    ``fop`` / ``fp``: the op id and parameter of the C fast path (torch in, torch out)."""
    fkey = None
    if fop and out is None and stream is None and _FS["on"] and _L.gen == _S.generation:
        fkey = _fast(fop, _fast_stream(api), x, None, fp)
        if fkey is not None and type(fkey) is not bytes:
            return fkey
    kind = C.result_kind(x) if out is None else None
    a = C.as_array(api, "x", x)
    C.check_dtype(api, "x", a.dtype, param_dtypes or ARITH)
    dtype = a.dtype if (keep_int or C.category(a.dtype) == 2) else C.DEFAULT_FLOAT
    if a.ndim > C.MAX_DIMS:
        raise ValueError(f"{api}: at most {C.MAX_DIMS} dimensions are supported, got {a.ndim}")
    s = C.device_and_stream(api, (a,), stream)
    o = C.new_out(kind, a.shape, dtype, s) if out is None else \
        C.given_out(api, out, a.shape, dtype, (("x", a),), allow_same=True)
    if o.arr.size == 0:
        return _zero_size([o])[0].obj
    a = C.prepare_input(a)
    C.order_inputs(s, (a,))
    r = o.arr
    key = (name, a.dtype, a.shape, a.strides, r.dtype, r.shape, r.strides) + tuple(key_extra)
    plan = C.get_plan(key)
    if plan is None:
        plan = C.build_plan(name, (a,), (r,), make_args or (lambda lib, t, keep: (t[0], t[1])))
        C.put_plan(key, plan)
    C.launch(plan, s, (a.ptr, r.ptr), (o,), (a, r))
    if fkey is not None and kind == TORCH:
        C.fast_register(fkey, plan, a, r, o.obj)
    return o.obj


def neg(x, *, out=None, stream=None):
    """``-x`` (``torch.neg``; ``aclnnNeg``). Dtypes: floats, int32, int64. Same conventions as :func:`add`."""
    return _unary("kernels.neg", "Neg", x, out, stream, keep_int=True, fop=_NEG)


def exp(x, *, out=None, stream=None):
    """``e ** x`` (``torch.exp``; ``aclnnExp``). Integer inputs give float32. See :func:`add`."""
    return _unary("kernels.exp", "Exp", x, out, stream, keep_int=False, fop=_EXP)


def log(x, *, out=None, stream=None):
    """Natural logarithm (``torch.log``; ``aclnnLog``): NaN below 0, -inf at 0. See :func:`exp`."""
    return _unary("kernels.log", "Log", x, out, stream, keep_int=False, fop=_LOG)


def sqrt(x, *, out=None, stream=None):
    """Square root (``torch.sqrt``; ``aclnnSqrt``): NaN below 0. See :func:`exp`."""
    return _unary("kernels.sqrt", "Sqrt", x, out, stream, keep_int=False, fop=_SQRT)


def relu(x, *, out=None, stream=None):
    """``max(x, 0)``, NaN kept (``torch.relu``; ``aclnnRelu``). Dtypes: floats, int32, int64."""
    return _unary("kernels.relu", "Relu", x, out, stream, keep_int=True, fop=_RELU)


def sigmoid(x, *, out=None, stream=None):
    """``1 / (1 + e ** -x)`` (``torch.sigmoid``; ``aclnnSigmoid``). See :func:`exp`."""
    return _unary("kernels.sigmoid", "Sigmoid", x, out, stream, keep_int=False, fop=_SIGMOID)


def tanh(x, *, out=None, stream=None):
    """Hyperbolic tangent (``torch.tanh``; ``aclnnTanh``). See :func:`exp`."""
    return _unary("kernels.tanh", "Tanh", x, out, stream, keep_int=False, fop=_TANH)


def silu(x, *, out=None, stream=None):
    """``x * sigmoid(x)`` (``torch.nn.functional.silu``; ``aclnnSilu``). See :func:`exp`."""
    return _unary("kernels.silu", "Silu", x, out, stream, keep_int=False, fop=_SILU)


_GELU = {"none": 0, "tanh": 1}


def gelu(x, approximate="none", *, out=None, stream=None):
    """GELU (``torch.nn.functional.gelu``; ``aclnnGeluV2`` as torch_npu calls it):
    ``approximate="none"`` is ``x * Φ(x)`` (the erf form), ``"tanh"`` the tanh approximation.

    Raises:
        ValueError: another ``approximate``. See :func:`exp` for the rest.
    """
    if approximate not in _GELU:
        raise ValueError(f"kernels.gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    code = _GELU[approximate]
    return _unary("kernels.gelu", "GeluV2", x, out, stream, keep_int=False, key_extra=(code,),
                  make_args=lambda lib, t, keep: (t[0], code, t[1]), fop=18, fp=code)


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


# ---------------------------------------------------------------------------------------------
# backward of the activations (binary elementwise kernels)

def _backward2(api, name, g, t, out, stream, make_args=None, key_extra=(), fop=0, fp=None):
    """grad_input = f(grad_out, t) for ``aclnn<name>(gradOutput, t, [..,] gradInput)``."""
    fkey = None
    if fop and out is None and stream is None and _FS["on"] and _L.gen == _S.generation:
        fkey = _fast(fop, _fast_stream(api), g, t, fp)
        if fkey is not None and type(fkey) is not bytes:
            return fkey
    kind = C.result_kind(g, t) if out is None else None
    ga = C.as_array(api, "grad_out", g)
    ta = C.as_array(api, "x", t)
    C.check_dtype(api, "grad_out", ga.dtype, FLOATS)
    C.check_dtype(api, "x", ta.dtype, FLOATS)
    dtype = C.promote_types(ga.dtype, ta.dtype)
    shape = C.broadcast_shapes(api, ga.shape, ta.shape)
    s = C.device_and_stream(api, (ga, ta), stream)
    o = C.new_out(kind, shape, dtype, s) if out is None else \
        C.given_out(api, out, shape, dtype, (("grad_out", ga), ("x", ta)), allow_same=True)
    if o.arr.size == 0:
        return _zero_size([o])[0].obj
    ga, ta = C.prepare_input(ga), C.prepare_input(ta)
    C.order_inputs(s, (ga, ta))
    r = o.arr
    key = (name, ga.dtype, ga.shape, ga.strides, ta.dtype, ta.shape, ta.strides, r.dtype, r.shape, r.strides) \
        + tuple(key_extra)
    plan = C.get_plan(key)
    if plan is None:
        plan = C.build_plan(name, (ga, ta), (r,), make_args or (lambda lib, tt, keep: (tt[0], tt[1], tt[2])))
        C.put_plan(key, plan)
    C.launch(plan, s, (ga.ptr, ta.ptr, r.ptr), (o,), (ga, ta, r))
    if fkey is not None and kind == TORCH and not C.is_scalar(t):
        C.fast_register(fkey, plan, ga, r, o.obj)
    return o.obj


def relu_backward(grad_out, x, *, out=None, stream=None):
    """Gradient of :func:`relu`: ``grad_out`` where ``x > 0``, else 0 (``aclnnThresholdBackward``
    with threshold 0, as torch_npu; ``x`` may also be relu's output). Floating dtypes."""
    def args(lib, t, keep):
        th = C.Param.scalar(lib, 0.0)
        keep.append(th)
        return (t[0], t[1], th, t[2])
    return _backward2("kernels.backward.relu", "ThresholdBackward", grad_out, x, out, stream, args, fop=_RELU_BW)


def gelu_backward(grad_out, x, approximate="none", *, out=None, stream=None):
    """Gradient of :func:`gelu` at ``x`` (``aclnnGeluBackwardV2``)."""
    if approximate not in _GELU:
        raise ValueError(f"kernels.backward.gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    mode = approximate.encode()

    def args(lib, t, keep):
        c = C.ffi.new("char[]", mode)
        keep.append(c)
        return (t[0], t[1], c, t[2])
    return _backward2("kernels.backward.gelu", "GeluBackwardV2", grad_out, x, out, stream, args, (approximate,),
                      fop=_GELU_BW, fp=_GELU[approximate])


def silu_backward(grad_out, x, *, out=None, stream=None):
    """Gradient of :func:`silu` at ``x`` (``aclnnSiluBackward``)."""
    return _backward2("kernels.backward.silu", "SiluBackward", grad_out, x, out, stream, fop=_SILU_BW)


def sigmoid_backward(grad_out, y, *, out=None, stream=None):
    """Gradient of :func:`sigmoid` from its **output** ``y``: ``grad_out * y * (1 - y)``
    (``aclnnSigmoidBackward``)."""
    return _backward2("kernels.backward.sigmoid", "SigmoidBackward", grad_out, y, out, stream, fop=_SIGMOID_BW)


def tanh_backward(grad_out, y, *, out=None, stream=None):
    """Gradient of :func:`tanh` from its **output** ``y``: ``grad_out * (1 - y²)``
    (``aclnnTanhBackward``)."""
    return _backward2("kernels.backward.tanh", "TanhBackward", grad_out, y, out, stream, fop=_TANH_BW)

