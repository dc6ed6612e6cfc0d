"""The machinery every built-in op shares: operands, result kinds, type promotion, broadcasting,
cached aclnn calls (plans), outputs, streams.

How one call runs (docs/DESIGN.md §6):

1. Every array argument becomes a :class:`canna_dl.DeviceArray` viewing the caller's memory
   (``canna_dl.asarray``: zero-copy for PyTorch, TensorFlow, NumPy, JAX and DeviceArrays in the
   unified memory model; in the discrete model host memory is copied to the device, counted by
   canna_dl as ``"to_device"``). Python scalars stay scalars (they are "weak": they do not raise
   a tensor's dtype within its category, as in PyTorch and NumPy 2).
2. The result dtype (PyTorch's promotion rules), the broadcast shape, dims, the device, ``out``
   and aliasing are checked in Python before anything is launched, with the standard exceptions
   (TypeError for dtypes, ValueError for shapes/out, :class:`AxisError` for dims).
3. The aclnn call is a *plan*: a repeatable executor made once per signature (op, dtypes, shapes,
   strides, parameters) by phase 1, reused with ``aclSetInputTensorAddr`` /
   ``aclSetOutputTensorAddr`` for new addresses (``kernels._native.Plan``).
4. The result is of the caller's kind (see :func:`result_kind`): torch in → torch out, NumPy in →
   NumPy out, and so on; a framework result is complete when returned, a DeviceArray result is
   stream-ordered (its ``stream`` is the stream that writes it).
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import operator
import os
import sys
import threading

import acl_rt
import canna_dl
from acl_rt import lowlevel as rt
from acl_rt.lowlevel import Stream, backend, current_stream, ffi, op_library
from canna_dl import DeviceArray
from canna_dl import _copy as dl_copy
from canna_dl import _rt as dl_rt

from . import _native
from ._raw import _hold

__all__ = ["AxisError", "result_kind", "result_type", "broadcast_shapes"]

_state = rt.state
_cfg = dl_rt.cfg

ACL_FORMAT_ND, ACL_FORMAT_NCHW = int(rt.Format.ACL_FORMAT_ND), int(rt.Format.ACL_FORMAT_NCHW)
MAX_DIMS = 8   # aclnn tensors have at most 8 dimensions

#: result kinds
CANNA, TORCH, NUMPY, TF, JAX = "canna", "torch", "numpy", "tf", "jax"


class AxisError(ValueError, IndexError):
    """A dim (axis) argument is out of range for the array (like ``numpy.exceptions.AxisError``:
    both a ValueError and an IndexError, the latter being what PyTorch raises)."""


# ---------------------------------------------------------------------------------------------
# dtypes

_D = {d.name: d for d in canna_dl.all_dtypes()}
BOOL, INT8, UINT8, INT16, INT32, INT64 = _D["bool"], _D["int8"], _D["uint8"], _D["int16"], _D["int32"], _D["int64"]
F16, BF16, F32, F64 = _D["float16"], _D["bfloat16"], _D["float32"], _D["float64"]
UINT16, UINT32, UINT64 = _D["uint16"], _D["uint32"], _D["uint64"]
FLOATS = (F32, F64, F16, BF16)
INTS = (INT32, INT64)
ARITH = FLOATS + INTS
DEFAULT_FLOAT = F32   # PyTorch's default dtype: an int tensor with a float scalar gives float32


def category(dt) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex."""
    k = dt.kind
    return 0 if k == "b" else 1 if k in "iu" else 2 if k == "f" else 3


def promote_types(a, b):
    """PyTorch's ``promote_types`` for canna dtypes (float16 + bfloat16 → float32, int + float →
    the float, uint8 + int8 → int16, bool + x → x)."""
    if a is b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        hi, lo = (a, b) if ca > cb else (b, a)
        if category(hi) == 3 and category(lo) == 2 and lo.bits > hi.bits // 2:
            return _D["complex128"]
        return hi
    if ca == 2:
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return F32
        return a if a.bits > b.bits else b
    if ca == 1:
        if a.kind == b.kind:
            return a if a.bits >= b.bits else b
        s, u = (a, b) if a.kind == "i" else (b, a)
        if s.bits > u.bits:
            return s
        wider = {8: INT16, 16: INT32, 32: INT64}.get(u.bits)
        if wider is None:
            raise TypeError(f"promotion of {a} and {b} is not defined (no signed type holds both)")
        return wider
    return a if a.bits >= b.bits else b


def _combine(higher, lower):
    """PyTorch's ``combine_categories``: a higher state wins unless a lower one is of a higher
    category (then they promote)."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = category(higher), category(lower)
    if ch >= 2:
        if ch == 2 and cl == 3:
            return promote_types(higher, lower)
        return higher
    if ch == 0 or cl >= 2:
        return promote_types(higher, lower)
    return higher


def _scalar_dtype(v):
    if isinstance(v, builtins.bool):
        return BOOL
    if isinstance(v, int):
        return INT64
    if isinstance(v, float):
        return DEFAULT_FLOAT
    if isinstance(v, complex):
        return _D["complex64"]
    raise TypeError(f"unsupported scalar {v!r}")


def result_type(*args):
    """The dtype of an op's result for these operands, by PyTorch's rules (``torch.result_type``):
    arrays with dimensions decide within a category, 0-d arrays and then Python scalars only
    raise the category (an int32 array + 2.5 → float32; a float16 array + a float32 0-d array →
    float16; an int32 array + an int64 0-d array → int32).

    NumPy 2 agrees on Python scalars (NEP 50) but differs on int + float16 (NumPy: float64 for
    int32 + float16 arrays, here float16) and on 0-d arrays (NumPy: 0-d arrays promote like
    arrays). Source: PyTorch's ``c10/core/ScalarType.h`` ``promoteTypes`` and
    ``aten/src/ATen/native/TypeProperties.cpp`` (``update_result_type_state``).
    """
    dim = zero = wrapped = None
    for a in args:
        if a is None:
            continue
        if isinstance(a, DeviceArray) or (not is_scalar(a) and hasattr(a, "ndim")):   # arrays, kernels.Spec s
            if a.ndim:
                dim = a.dtype if dim is None else promote_types(dim, a.dtype)
            else:
                zero = a.dtype if zero is None else promote_types(zero, a.dtype)
        else:
            d = _scalar_dtype(a)
            wrapped = d if wrapped is None else promote_types(wrapped, d)
    return _combine(dim, _combine(zero, wrapped))


def can_cast(src, dst) -> bool:
    """PyTorch's ``can_cast`` (the rule for writing a result into ``out``): no floating → integral,
    no non-bool → bool, no complex → real."""
    cs, cd = category(src), category(dst)
    return cs <= cd or (cs == cd)


def check_dtype(api, name, dt, allowed, what=None):
    if dt not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"{api}: {name} has dtype {dt.name}, which this op does not support "
                        f"({what or 'supported'}: {names})")


# ---------------------------------------------------------------------------------------------
# shapes

def broadcast_shapes(api, *shapes) -> tuple:
    """NumPy's broadcasting of the shapes (right-aligned; a dim of 1 stretches).

    Raises:
        ValueError: the shapes do not broadcast (the message names them).
    """
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, n in enumerate(s):
            o = out[off + i]
            if o == n or n == 1:
                continue
            if o == 1:
                out[off + i] = n
            else:
                raise ValueError(f"{api}: shapes {' and '.join(str(tuple(x)) for x in shapes)} cannot be broadcast "
                                 f"together (dim {off + i - nd}: {o} vs {n})")
    return tuple(out)


def wrap_dim(api, d, ndim) -> int:
    """``d`` normalized to ``[0, ndim)`` (a 0-d array accepts -1 and 0, as PyTorch does).

    Raises:
        TypeError: ``d`` is not an int. AxisError: out of range.
    """
    if isinstance(d, builtins.bool) or not hasattr(d, "__index__"):
        raise TypeError(f"{api}: dim must be an int, not {type(d).__name__}")
    d = operator.index(d)
    n = ndim if ndim else 1
    if not -n <= d < n:
        raise AxisError(f"{api}: dim {d} is out of range for a {ndim}-D array (expected [{-n}, {n - 1}])")
    return d + n if d < 0 else d


def dims_arg(api, dim, ndim) -> tuple:
    """A dim, a sequence of dims or None (all) → sorted unique normalized dims."""
    if dim is None:
        return tuple(range(ndim))
    if hasattr(dim, "__index__") and not isinstance(dim, builtins.bool):
        dims = (dim,)
    else:
        try:
            dims = tuple(dim)
        except TypeError:
            raise TypeError(f"{api}: dim must be an int, a sequence of ints or None, not {type(dim).__name__}") from None
    out = []
    for d in dims:
        w = wrap_dim(api, d, ndim)
        if w in out:
            raise ValueError(f"{api}: dim {w} appears more than once in {dims}")
        out.append(w)
    return tuple(sorted(out)) if ndim else ()


def int_tuple(api, name, v, n) -> tuple:
    """An int or a sequence of ``n`` ints (``stride=2`` → ``(2, 2)``)."""
    if hasattr(v, "__index__") and not isinstance(v, builtins.bool):
        return (operator.index(v),) * n
    try:
        t = tuple(operator.index(x) for x in v)
    except TypeError:
        raise TypeError(f"{api}: {name} must be an int or a sequence of {n} ints, not {v!r}") from None
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise ValueError(f"{api}: {name} must have {n} values, got {len(t)}")
    return t


def contiguous_strides(shape) -> tuple:
    return dl_copy.c_strides(shape)


def span(shape, strides) -> tuple:
    """(lowest element offset, element count) covering every element of a view."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return 0, 0
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    return lo, hi - lo + 1


# ---------------------------------------------------------------------------------------------
# result kinds

_KINDS: dict = {DeviceArray: CANNA}


def _kind_of_type(t):
    k = _KINDS.get(t, 0)
    if k != 0:
        return k
    mod = (getattr(t, "__module__", "") or "").split(".")[0]
    k = None
    if isinstance(t, type) and issubclass(t, DeviceArray):
        k = CANNA
    elif mod == "torch" and "torch" in sys.modules and issubclass(t, sys.modules["torch"].Tensor):
        k = TORCH
    elif mod == "numpy" and "numpy" in sys.modules and issubclass(t, sys.modules["numpy"].ndarray):
        k = NUMPY
    elif mod == "tensorflow":
        k = TF
    elif mod in ("jax", "jaxlib"):
        k = JAX
    _KINDS[t] = k
    return k


def is_scalar(x) -> bool:
    """A Python bool, int or float (what ops take as a "weak" scalar)."""
    return isinstance(x, (builtins.bool, int, float)) and not hasattr(x, "__dlpack__")


def scalar_operand(api, v, dt):
    """Python number ``v`` as an operand of an op computing in dtype ``dt``, by NumPy 2's rule for
    Python scalars (NEP 50, "Python integer out of bounds"): an int that does not fit an integer
    ``dt`` raises rather than wrapping (PyTorch wraps it silently: ``int32 + 2**40`` adds 0); for a
    floating ``dt`` an int beyond int64 is passed as the float it rounds to.

    Raises:
        OverflowError: ``v`` is an int out of ``dt``'s range (integer ``dt``) or beyond float64's.
    """
    if type(v) is not int:
        return v
    if dt.kind in "iu":
        bits = dt.bits
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dt.kind == "i" else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise OverflowError(f"{api}: Python integer {v} out of bounds for {dt.name} (range [{lo}, {hi}])")
    elif not -(1 << 63) <= v < (1 << 63):
        try:
            return float(v)
        except OverflowError:
            raise OverflowError(f"{api}: Python integer {v} is too large for {dt.name}") from None
    return v


def result_kind(*objs):
    """The kind of result an op returns for these arguments: the arguments' kind when every array
    among them is of one kind (``"torch"``, ``"numpy"``, ``"tf"``, ``"jax"``, ``"canna"`` for
    DeviceArrays), else ``"canna"`` (a DeviceArray). Python scalars, lists and other array-likes
    do not vote."""
    kind = None
    for x in objs:
        if x is None or is_scalar(x):
            continue
        k = _kind_of_type(type(x))
        if k is None:
            continue
        if kind is None:
            kind = k
        elif k != kind:
            return CANNA
    return kind or CANNA


def as_array(api, name, x) -> DeviceArray:
    """An array argument as a DeviceArray viewing the caller's memory.

    Raises:
        TypeError: ``x`` is not an array (e.g. ``None``, a string). BufferError (from
            canna_dl): a tensor that requires grad, an unsupported dtype or layout.
    """
    if type(x) is DeviceArray:
        return x
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{api}: {name} must be an array (a DeviceArray, a torch/TensorFlow/JAX tensor, a NumPy "
                        f"array), not {type(x).__name__}")
    try:
        return canna_dl.asarray(x)
    except TypeError as e:
        raise TypeError(f"{api}: {name}: {e}") from None


# ---------------------------------------------------------------------------------------------
# the op library and plans

class _Lib:
    nn = None          # the op library's cffi lib
    gen = -1           # runtime generation the plan cache belongs to
    repeatable = True  # CANNA_KERNELS_CACHE=0 turns plan reuse off


_lib = _Lib()
_plans: dict = {}
_plans_lock = threading.Lock()
_PLAN_CACHE_MAX = 4096
_stats = {"plans_built": 0, "plan_hits": 0}


class _Capture(threading.local):
    """While ``rec`` is a list (on this thread, inside :func:`capture_plans`): plans are built
    afresh, never taken from or put into the cache, and each launch is recorded. While ``memo`` is
    a list (inside :func:`memo_call`): each launch is recorded too (plans cached as usual), and
    the C fast paths are not taken (their launches would not be seen)."""
    rec = None
    memo = None


_capture = _Capture()


def _raise_error(code, api):
    rt.raise_error(code, api)


def nn():
    """The op library (loads and configures on first use)."""
    lib = _lib.nn
    if lib is not None:
        return lib
    ol = op_library().lib
    cast = lambda f: int(ffi.cast("uintptr_t", f))  # noqa: E731
    _native.configure(cast(ol.aclSetInputTensorAddr), cast(ol.aclSetOutputTensorAddr),
                      cast(ol.aclDestroyAclOpExecutor), cast(backend().lib.aclrtSynchronizeStreamWithTimeout),
                      cast(backend().lib.aclrtStreamQuery),
                      cast(backend().lib.aclsimSetLaunchWaited) if backend().is_sim else 0, _raise_error)
    _lib.repeatable = os.environ.get("CANNA_KERNELS_CACHE", "1").strip() not in ("0", "false", "no", "off")
    _lib.nn = ol
    return ol


def plan_cache_info() -> dict:
    """Counters of the plan cache (see :func:`kernels.cache_info`)."""
    d = dict(_stats)
    d["plans_cached"] = len(_plans)
    d.update(_native.stats())
    return d


def clear_plan_cache() -> None:
    """Drop every cached plan: its executor and descriptors are destroyed as soon as no call in
    flight (another thread) still uses it."""
    with _plans_lock:
        _plans.clear()
        fast_cache.clear()
        offload_cache.clear()
        memo_cache.clear()


@contextlib.contextmanager
def capture_plans():
    """Record the plans the calling thread launches in the block: a list of ``(plan, stream,
    addresses, tasks)`` (the plan's operand addresses, inputs then outputs; the device tasks its
    launch ran, on the simulator — an aclnn call may run several — else None: each captured launch
    waits for its stream). Each plan is built afresh and
    left out of the cache, so it belongs to the caller alone: how a framework's native op gets the
    plans it launches without Python (canna_dl.jax's XLA FFI route, canna_dl.tf's ``CannaCall``).
    Other threads run as usual; captures do not nest."""
    if _capture.rec is not None:
        raise RuntimeError("kernels: capture_plans() blocks do not nest")
    rec = _capture.rec = []
    try:
        yield rec
    finally:
        _capture.rec = None


def device_tasks(device_id):
    """The stream tasks the simulated device ``device_id`` has run so far
    (``aclsimGetDeviceStats``' ``tasksExecuted``), or None off the simulator."""
    b = backend()
    if not getattr(b, "is_sim", False):
        return None
    st = ffi.new("aclsimDeviceStats *")
    if b.lib.aclsimGetDeviceStats(device_id, st):
        return None
    return int(st.tasksExecuted)


def get_plan(key):
    if _lib.gen != _state.generation:
        _new_generation()
    if _capture.rec is not None:   # a private plan (capture_plans)
        return None
    p = _plans.get(key)
    if p is not None:
        _stats["plan_hits"] += 1
    return p


def _new_generation():
    clear_plan_cache()
    if _fast_state["on"]:   # the memory model may have changed: decide again
        _native.fast_configure(None, None, None, None, None)
    _fast_state["on"] = None
    _lib.gen = _state.generation


def put_plan(key, plan):
    if not plan.repeatable or _capture.rec is not None:
        return
    with _plans_lock:
        if len(_plans) >= _PLAN_CACHE_MAX:   # drop the older half (dicts keep insertion order)
            for k in list(_plans)[: _PLAN_CACHE_MAX // 2]:
                del _plans[k]   # destroyed when the last call using it is done
        _plans[key] = plan


def _nn_error(api):
    """The op library's recent error message (for a descriptor it refused)."""
    msg = ""
    p = backend().lib.aclGetRecentErrMsg()
    if p != ffi.NULL:
        msg = ffi.string(p).decode("utf-8", "replace")
    return msg


def _descriptor(lib, a, fmt):
    """An aclTensor over a DeviceArray-like ``a`` (dtype, shape, strides in elements, ptr): offset 0
    at ``a.ptr``, storage = the elements the view spans."""
    shape, strides = a.shape, a.strides
    n = len(shape)
    _, count = span(shape, strides)
    dims = ffi.new("int64_t[]", shape) if n else ffi.NULL
    st = ffi.new("int64_t[]", strides) if n else ffi.NULL
    sd = ffi.new("int64_t[1]", (count,))
    h = lib.aclCreateTensor(dims, n, a.dtype.acl, st, 0, fmt, sd, 1, ffi.cast("void *", a.ptr or 0))
    if h == ffi.NULL:
        raise ValueError(f"aclCreateTensor refused a {a.dtype.name} view of shape {shape}, strides {strides}: "
                         f"{_nn_error('aclCreateTensor')}")
    return ffi.gc(h, lib.aclDestroyTensor)


class Param:
    """Phase-1 argument makers for non-tensor parameters (kept alive by the plan)."""

    @staticmethod
    def scalar(lib, v, dt=None):
        if dt is None:
            dt = BOOL if isinstance(v, builtins.bool) else INT64 if isinstance(v, int) else F64
        ctype = {"bool": "bool", "int64": "int64_t", "int32": "int32_t", "float64": "double",
                 "float32": "float"}[dt.name]
        cell = ffi.new(ctype + " *", v)
        h = lib.aclCreateScalar(cell, dt.acl)
        if h == ffi.NULL:
            raise ValueError(f"aclCreateScalar: {_nn_error('aclCreateScalar')}")
        return ffi.gc(h, lib.aclDestroyScalar)

    @staticmethod
    def ints(lib, values):
        values = list(values)
        v = ffi.new("int64_t[]", values) if values else ffi.new("int64_t[1]")
        h = lib.aclCreateIntArray(v, len(values))
        if h == ffi.NULL:
            raise ValueError(f"aclCreateIntArray: {_nn_error('aclCreateIntArray')}")
        return ffi.gc(h, lib.aclDestroyIntArray)

    @staticmethod
    def bools(lib, values):
        values = list(values)
        v = ffi.new("bool[]", values)
        h = lib.aclCreateBoolArray(v, len(values))
        if h == ffi.NULL:
            raise ValueError(f"aclCreateBoolArray: {_nn_error('aclCreateBoolArray')}")
        return ffi.gc(h, lib.aclDestroyBoolArray)


def build_plan(name, inputs, outputs, make_args, fmt=ACL_FORMAT_ND):
    """Phase 1 of ``aclnn<name>``: descriptors for ``inputs`` / ``outputs`` (DeviceArrays or None
    for absent optional tensors), ``make_args(lib, tensors)`` gives the phase-1 argument list
    (``tensors``: descriptors in order, ffi.NULL for None); returns a Plan whose launch takes the
    present tensors' addresses in order (inputs, then outputs)."""
    lib = nn()
    keep = []
    present_in = [a for a in inputs if a is not None]
    present_out = [a for a in outputs if a is not None]
    descs = []
    for a in list(inputs) + list(outputs):
        if a is None:
            descs.append(ffi.NULL)
            continue
        f = fmt if (fmt != ACL_FORMAT_ND and a.ndim == 4) else ACL_FORMAT_ND
        d = _descriptor(lib, a, f)
        keep.append(d)
        descs.append(d)
    args = make_args(lib, descs, keep)
    ws = ffi.new("uint64_t *")
    ex = ffi.new("aclOpExecutor **")
    api = f"aclnn{name}GetWorkspaceSize"
    rc = getattr(lib, api)(*args, ws, ex)
    if rc:
        rt.raise_error(rc, api)
    executor = ex[0]
    repeatable = _lib.repeatable
    if repeatable:
        rc = lib.aclSetAclOpExecutorRepeatable(executor)
        if rc:   # an op that cannot be repeated: single use
            backend().lib.aclGetRecentErrMsg()
            repeatable = False
    handles = [int(ffi.cast("uintptr_t", d)) for d in descs if d != ffi.NULL]
    addrs = [a.ptr for a in present_in + present_out]
    plan = _native.Plan(int(ffi.cast("uintptr_t", executor)), int(ffi.cast("uintptr_t", getattr(lib, f"aclnn{name}"))),
                        len(present_in), len(present_out), handles, addrs, ws[0], f"aclnn{name}", tuple(keep),
                        repeatable)
    _stats["plans_built"] += 1
    return plan


# ---------------------------------------------------------------------------------------------
# streams, devices, outputs

def device_and_stream(api, arrays, stream):
    """The stream to run on and check that every array can be used there.

    Device memory of another device than the stream's is refused (host-coherent memory, as in the
    unified memory model, is an operand of every device)."""
    if stream is not None:
        s = stream if type(stream) is Stream else rt.accept_stream(stream, None, api)
    else:
        dev = None
        for a in arrays:
            if a is not None and a.storage.kind == 0 and a.size:
                dev = a.device
                break
        s = current_stream(dev)
    dev = s._device
    for a in arrays:
        if a is None or not a.size:
            continue
        st = a.storage
        if st.kind == 0 and st.device is not None and st.device is not dev:
            raise ValueError(f"{api}: an operand is in the memory of NPU {st.device.device_id} but the op runs on "
                             f"NPU {dev.device_id} (stream {s.handle:#x}); move it with canna_dl.from_dlpack(x, "
                             "device=...) or pass a stream of that device")
    return s


def order_inputs(s, arrays):
    """Make stream ``s`` wait for pending writes of the arrays on other streams (no host wait)."""
    for a in arrays:
        if a is None:
            continue
        ps = a.storage.stream
        if ps is not None and ps is not s and ps != s:
            if ps._alive_quiet():
                s.wait(ps)


def writable_check(api, name, a):
    if a.readonly:
        raise ValueError(f"{api}: {name} is read-only (a TensorFlow or JAX tensor, a read-only NumPy array, a "
                         "broadcast view or a legacy DLPack import) and cannot be written")
    for n, st in zip(a.shape, a.strides):
        if n > 1 and st == 0:
            raise ValueError(f"{api}: {name} has a dimension of stride 0 (a broadcast/expanded view): several of its "
                             "elements share one memory location")


def _byte_range(a):
    lo, n = span(a.shape, a.strides)
    it = a.itemsize
    start = a.ptr + lo * it
    return start, start + n * it


def same_view(a, b) -> bool:
    return (a.ptr == b.ptr and a.shape == b.shape and a.itemsize == b.itemsize
            and all(n <= 1 or s == t for n, s, t in zip(a.shape, a.strides, b.strides)))


def alias_check(api, out, outname, inputs, allow_same):
    """``out`` must not overlap an input, except (``allow_same``, elementwise ops) being exactly the
    same view of the same dtype size (an in-place update)."""
    if not out.size:
        return
    o0, o1 = _byte_range(out)
    for name, a in inputs:
        if a is None or not a.size:
            continue
        a0, a1 = _byte_range(a)
        if a0 < o1 and o0 < a1:
            if allow_same and same_view(out, a):
                continue
            raise ValueError(f"{api}: {outname} overlaps input {name} in memory (only an exact in-place alias is "
                             "supported, and only by elementwise ops); use a separate output array")


def overlapping(written, read=()):
    """The rule of the operands a kernel updates in place (an optimizer's parameter and state): no
    byte of one of them may belong to any other operand, written or read — not even as the same
    tensor (``alias_check`` without ``allow_same``, for every pair at once). ``written``,
    ``read``: ``(name, span)`` pairs, ``span`` the bytes ``(lo, hi)`` of the caller's memory an
    operand's elements touch or None (no elements). Returns the names of the first overlapping pair
    found, or None.

    Per call, never per plan: the simulator's aclnn checks the same at plan build
    (``nn_check_output_overlap``), but a cached plan is launched on other addresses without it —
    and the memo fast path (kernels/_native/fast.c ``memo``) replays a call only when no argument
    it writes touches another tensor argument at all, else this path decides. The offload
    handlers of ``torch._fused_*_`` apply it to the whole lists (canna_dl/torch/_offload_optim.py)."""
    spans = [(sp[0], sp[1], True, name) for name, sp in written if sp is not None]
    if not spans:
        return None
    spans += [(sp[0], sp[1], False, name) for name, sp in read if sp is not None]
    spans.sort(key=operator.itemgetter(0))
    # sweep by start: an operand overlaps an earlier one iff it starts before that one's end; keep
    # the furthest end of all earlier operands and of the earlier written ones
    end_any = end_w = None
    for lo, hi, w, name in spans:
        if w and end_any is not None and lo < end_any[0]:
            return end_any[1], name
        if not w and end_w is not None and lo < end_w[0]:
            return end_w[1], name
        if end_any is None or hi > end_any[0]:
            end_any = (hi, name)
        if w and (end_w is None or hi > end_w[0]):
            end_w = (hi, name)
    return None


def caller_span(x, a):
    """The bytes ``(lo, hi)`` of the caller's memory that array argument ``x`` (``a``: its
    :func:`as_array`) covers, or None when it has no elements. In the discrete memory model a
    host tensor's DeviceArray is a device copy: its span is the host memory's."""
    if not _cfg.unified and type(x) is not DeviceArray:
        h = _host_view(x)
        if h is not None:
            a = h
    return _byte_range(a) if a.size else None


def check_disjoint(api, written, read=()):
    """:func:`overlapping` as the kernel functions' check: ``written`` / ``read`` are ``(name,
    caller's object, its DeviceArray or None)`` triples. Raises ValueError naming the pair."""
    sp = lambda ops: [(n, caller_span(x, a)) for n, x, a in ops if a is not None]  # noqa: E731
    pair = overlapping(sp(written), sp(read))
    if pair is not None:
        raise ValueError(f"{api}: {pair[0]} and {pair[1]} share memory (an operand updated in place must not "
                         "overlap another operand, nor be the same tensor as one); use separate arrays")


class Out:
    """An output being produced: ``arr`` is the DeviceArray the kernel writes, ``obj`` what the
    call returns (the caller's ``out`` object, a framework tensor viewing ``arr``, or ``arr``), and
    ``post`` a conversion to run after the kernel completed (discrete model / TF / JAX)."""

    __slots__ = ("arr", "obj", "post", "sync", "stage")

    def __init__(self, arr, obj, post=None, sync=False, stage=None):
        self.arr = arr
        self.obj = obj
        self.post = post
        self.sync = sync
        self.stage = stage


def _torch():
    import torch
    return torch


#: outputs of at least this many bytes come from canna's pool even for torch / NumPy results:
#: the pool hands out memory that is already mapped, while a fresh large allocation of the
#: framework's allocator page-faults on first touch (glibc maps blocks over 32 MiB anew each time)
POOL_MIN_BYTES = 1 << 20


def new_out(kind, shape, dtype, s):
    """A fresh output of the caller's kind (see the module doc)."""
    if _cfg.unified and kind in (TORCH, NUMPY):
        n = dtype.itemsize
        for d in shape:
            n *= d
        if n < POOL_MIN_BYTES:
            if kind == TORCH:
                if _fast_state["on"] is None:
                    fast_setup()
                torch = _torch()
                t = torch.empty(shape, dtype=getattr(torch, dtype.name))
                return Out(canna_dl.asarray(t), t, sync=True)
            import numpy as np
            arr = np.empty(shape, dtype=dtype.numpy)
            return Out(canna_dl.asarray(arr), arr, sync=True)
        if kind == TORCH and _fast_state["on"] is None:
            fast_setup()
    a = canna_dl.empty(shape, dtype, device=s._device, stream=s)
    if kind == CANNA:
        return Out(a, a)
    return Out(a, None, post=_CONVERT[kind], sync=True)


def _to_numpy(a):
    return canna_dl.to_numpy(a)


_CONVERT = {TORCH: lambda a: canna_dl.to_torch(a), NUMPY: _to_numpy, TF: lambda a: canna_dl.to_tf(a),
            JAX: lambda a: canna_dl.to_jax(a)}


def given_out(api, out, shape, dtype, inputs, *, allow_same=False, name="out", exact_dtype=False):
    """Check a caller's ``out``: an array of exactly ``shape`` whose dtype ``dtype`` can be cast to
    (or equals, with ``exact_dtype``), writable, without internal overlap, not overlapping the
    inputs unsafely. Returns an :class:`Out` whose ``obj`` is ``out`` itself."""
    if isinstance(out, (list, tuple)) or is_scalar(out):
        # canna_dl.asarray would convert it into a new array: the result would never reach the caller
        raise TypeError(f"{api}: {name} must be an array written in place (a DeviceArray, a torch tensor, a NumPy "
                        f"array), not {type(out).__name__}")
    kind = _kind_of_type(type(out))
    a = _host_view(out) if (not _cfg.unified and not isinstance(out, DeviceArray)) else None
    if a is None:
        a = as_array(api, name, out)
    if a.shape != tuple(shape):
        raise ValueError(f"{api}: {name} has shape {a.shape} but the result has shape {tuple(shape)}")
    if exact_dtype:
        if a.dtype is not dtype:
            raise TypeError(f"{api}: {name} has dtype {a.dtype.name} but the result is {dtype.name} (this op writes "
                            "its own dtype)")
    elif not can_cast(dtype, a.dtype):
        raise TypeError(f"{api}: the result type {dtype.name} cannot be cast to {name}'s dtype {a.dtype.name} "
                        "(PyTorch's casting rule: no floating → integer)")
    if a.dtype not in ARITH and a.dtype is not dtype:
        raise TypeError(f"{api}: {name} has dtype {a.dtype.name}, which this op cannot write")
    writable_check(api, name, a)
    alias_check(api, a, name, inputs, allow_same)
    sync = kind not in (CANNA, None)
    if kind == TORCH and _fast_state["on"] is None and _cfg.unified:   # (an op writing only given outputs)
        fast_setup()
    st = a.storage
    if (not _cfg.unified and st.kind == 1) or a._flags & _AF_NEG:
        # host memory in the discrete model (or a layout aclnn cannot describe): compute into a
        # temporary, copy into out afterwards (counted)
        tmp = canna_dl.empty(a.shape, a.dtype, device=a.device)
        return Out(tmp, out, sync=True, stage=a)
    return Out(a, out, sync=sync)


def _host_view(obj):
    """A DeviceArray viewing a framework's host memory in place (discrete memory model: the kernel
    writes a device temporary, copied into it afterwards), or None when ``obj`` has no such view."""
    from canna_dl import _interop
    imp = _interop._importer_for(type(obj))
    try:
        a = imp(obj, None) if imp is not None else (_interop._generic_import(obj, None)
                                                    if hasattr(obj, "__dlpack__") else None)
    except (BufferError, TypeError, ValueError):
        return None
    if a is None or a.storage.kind != 1:
        return None
    return a


def prepare_input(a):
    """``a`` as an aclnn operand: aclnn strides are >= 0, so a view with negative strides (NumPy,
    DeviceArray slicing) is copied to a contiguous array first (counted as ``"contiguous"``)."""
    if a._flags & _AF_NEG:
        out = canna_dl.empty(a.shape, a.dtype, device=a.device)
        dl_copy.copy_into(out, a)
        dl_copy.count("contiguous", a.nbytes)
        return out
    return a


_AF_NEG = canna_dl._native.AF_NEG


def launch(plan, s, addrs, outs, keep):
    """Run a plan on stream ``s`` and finish the outputs: wait when a framework result is returned
    (it must be complete), else mark the outputs as written on ``s`` and keep the operands alive
    until the stream has run the op."""
    sync = False
    for o in outs:
        if o.sync:
            sync = True
            break
    h = s._handle(plan.name)   # validates the stream and makes its context current
    tasks0 = None
    if _capture.rec is not None:   # (the launch waited for, so the tasks it ran are counted)
        s.synchronize()
        tasks0 = device_tasks(s.device.device_id)
        sync = True
    sh = s._id
    if _capture.memo is not None:   # (with the memory the call writes: its outputs, the inputs updated in place)
        _capture.memo.append((plan, sh, tuple(addrs), tuple(o.arr.ptr for o in outs)))
    size = plan.ws_size
    wbuf = None
    try:
        if size:
            wbuf = acl_rt.alloc(size, stream=s)
        ws = wbuf.ptr if wbuf is not None else 0
        if sync:
            plan.launch_sync(sh, ws, *addrs)
        else:
            plan.launch(sh, ws, *addrs)
    finally:
        if wbuf is not None:
            wbuf.close()   # stream-ordered: reused only after the op
    if _capture.rec is not None:
        tasks1 = device_tasks(s.device.device_id) if tasks0 is not None else None
        _capture.rec.append((plan, s, list(addrs), None if tasks1 is None else tasks1 - tasks0))
    if sync:
        for o in outs:
            finish_out(o, s)
    else:
        for o in outs:
            o.arr.storage.stream = s
        _hold(h, keep, backend().lib)


def finish_out(o, s):
    if o.stage is not None:
        dl_copy.copy_into(o.stage, o.arr)
        dl_copy.count("to_host" if not _cfg.unified else "contiguous", o.arr.nbytes)
        return
    if o.post is not None:
        o.obj = o.post(o.arr)


def sig(a):
    """The part of a plan key an operand contributes."""
    return None if a is None else (a.dtype, a.shape, a.strides)


def finish_empty(outs):
    """Outputs with no elements: nothing to launch, only the conversions."""
    for o in outs:
        if o is not None and o.post is not None:
            o.obj = o.post(o.arr)


def run_op(name, s, inputs, outs, make_args, key_extra=(), fmt=ACL_FORMAT_ND):
    """Prepare the operands, get (or build) the plan of ``aclnn<name>`` for this signature and
    launch it. ``inputs``: DeviceArrays or None (absent optional inputs); ``outs``: :class:`Out`
    objects or None (outputs not requested). Skips the launch when every output is empty."""
    present = [o for o in outs if o is not None]
    if all(o.arr.size == 0 for o in present):
        finish_empty(present)
        return
    ins = [None if a is None else prepare_input(a) for a in inputs]
    order_inputs(s, ins)
    rs = [None if o is None else o.arr for o in outs]
    key = (name, fmt) + tuple(sig(a) for a in ins) + tuple(sig(r) for r in rs) + tuple(key_extra)
    plan = get_plan(key)
    if plan is None:
        plan = build_plan(name, ins, rs, make_args, fmt)
        put_plan(key, plan)
    addrs = [a.ptr for a in ins if a is not None] + [r.ptr for r in rs if r is not None]
    launch(plan, s, addrs, present, (ins, rs))


def out_or_new(api, out, kind, shape, dtype, s, inputs, *, name="out", allow_same=False, exact_dtype=True):
    if out is None:
        return new_out(kind, shape, dtype, s)
    return given_out(api, out, shape, dtype, inputs, allow_same=allow_same, name=name, exact_dtype=exact_dtype)


# ---------------------------------------------------------------------------------------------
# the PyTorch fast path of elementwise ops (kernels/_native/fast.c)

#: signature key (bytes, made by the C side) -> (plan, use_empty, torch dtype, shape)
fast_cache: dict = {}
#: offload()'s per-call fast path (canna_dl/torch/_offload.py): its key (the kernel's key and the
#: torch function's tag) -> the fast_cache entry, for the signatures offload()'s handler ran on canna
offload_cache: dict = {}
_fast_state = {"on": None}   # None: not yet configured, True / False


def fast_setup() -> bool:
    """Turn on the C fast path for torch tensors (unified memory model, a PyTorch with the DLPack C
    exchange API); called the first time the general path sees torch in, torch out."""
    on = _fast_state["on"]
    if on is not None:
        return on
    on = False
    torch = sys.modules.get("torch")
    if torch is not None and _cfg.unified and os.environ.get("CANNA_KERNELS_FAST", "1") != "0":
        cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        if cap is not None:
            try:
                _native.fast_configure(torch.Tensor, cap, torch.empty_like, torch.empty, fast_cache)
                _native.memo_configure(memo_cache, torch.dtype, _memo_workspace)
                on = True
            except Exception:   # an exchange API we cannot use: the general path serves
                on = False
    _fast_state["on"] = on
    return on


def fast_register(key, plan, x, out_arr, torch_out, inplace=False):
    """Remember a general-path call (torch in, torch out, a fresh output -- or, ``inplace``, the
    output being x itself) for the fast path."""
    if type(key) is not bytes or not plan.repeatable or plan.ws_size or not _fast_state["on"]:
        return
    shape = tuple(out_arr.shape)
    if inplace:
        mode = None
    elif out_arr.nbytes >= POOL_MIN_BYTES:   # from the pool, handed to torch zero-copy (see new_out)
        mode = functools.partial(_pool_torch, shape, out_arr.dtype)
    else:   # torch.empty_like(x) (cheapest) when it gives the right array, else torch.empty
        mode = not (x.shape == shape and x.dtype is out_arr.dtype and x.strides == contiguous_strides(shape))
    if len(fast_cache) >= _PLAN_CACHE_MAX:
        fast_cache.clear()
    fast_cache[key] = (plan, mode, torch_out.dtype, shape)


def _pool_torch(shape, dtype):
    return canna_dl.to_torch(canna_dl.empty(shape, dtype))


def fast_stream(api):
    """The current stream's handle (int), its context made current. The C fast paths call it
    with the API name as their stream argument and remember the answer per thread while
    ``acl_rt.lowlevel.current_epoch_capsule``'s counter stands still (kernels/_native/fast.c
    ``fast_stream_of``)."""
    s = current_stream()
    s._handle(api)
    return s._id


_native.stream_configure(fast_stream, rt.current_epoch_capsule)


# ---------------------------------------------------------------------------------------------
# the memo fast path: a registry op's whole call on torch tensors, replayed from C
# (kernels/_native/fast.c memo; the generated kernel functions of kernels/_registry.py call it)

#: signature key (bytes, made by the C side) -> (launches, outputs, written, result, single) (see
#: fast.c), or None: a signature whose call is not replayable (it is left to the Python path)
memo_cache: dict = {}
#: at most this many launches per replayed call
MEMO_MAX_LAUNCHES = 16
_MEMO_MAX_ARGS = 24   # fast.c MEMO_MAXARGS
_MEMO_MAX_OUTS = 16   # fast.c MEMO_MAXOUT


def memo_setup() -> bool:
    """Whether the memo path is on: :func:`fast_setup` once the runtime is up (its memory model
    known), False before (an op whose first call writes only given outputs does not set it up)."""
    on = _fast_state["on"]
    if on is None and _cfg.generation == _state.generation and _state.ready:
        return fast_setup()
    return bool(on)


def memo_call(key, fn, vals, args, kwargs):
    """``fn(*args, **kwargs)`` on the Python path, its plan launches recorded; the call is then
    remembered under ``key`` (the C side's signature of ``vals``, the call's arguments in the
    order it keys them) for the memo fast path when it was nothing but plan launches on the
    memory of the tensor arguments and of fresh outputs (see :func:`_memo_entry`). An exception
    propagates and remembers nothing."""
    rec = _capture.memo = []
    try:
        r = fn(*args, **kwargs)
    finally:
        _capture.memo = None
    if _fast_state["on"] and _lib.gen == _state.generation:
        e = _memo_entry(vals, r, rec)
        if e is not _ALIASED:
            if len(memo_cache) >= _PLAN_CACHE_MAX:
                memo_cache.clear()
            memo_cache[key] = e
    return r


_ALIASED = object()   # tensor arguments sharing memory: this call says nothing about its signature


def _memo_entry(vals, r, rec):
    """The memo entry of a call (arguments ``vals``, result ``r``, launches ``rec``), or None when
    replaying the launches on new arguments of the same signature might not compute what the
    Python path computes: a launch on other memory (a temporary, a view at an offset, canna's
    pool), a single-use plan, launches on two streams, a
    result that is not a fresh dense tensor of its own storage or an
    argument, a fresh result no launch writes (it would be filled some other way). ``_ALIASED``
    when tensor arguments share memory (an address would name either: calls of the signature on
    distinct tensors may still be recorded)."""
    torch = sys.modules["torch"]
    T = torch.Tensor
    if not rec or len(rec) > MEMO_MAX_LAUNCHES or len(vals) > _MEMO_MAX_ARGS:
        return None
    ptrs = {}
    for i, a in enumerate(vals):
        if type(a) is T:
            p = a.data_ptr()   # (an empty one's address names it too: the launch skips its elements)
            if p in ptrs:
                return _ALIASED
            ptrs[p] = i
    if r is None:
        results, single = (), None
    elif type(r) is T:
        results, single = (r,), True
    elif type(r) is tuple and any(type(x) is T for x in r) and all(type(x) is T or x is None for x in r):
        results, single = r, False   # (None: an output not asked for, linear_backward's output_mask)
    else:
        return None
    outs, objs, optr, slots = [], [], {}, []
    for x in results:
        if x is None:
            slots.append(255)
            continue
        i = next((i for i, a in enumerate(vals) if a is x), None)
        if i is not None:
            slots.append(128 + i)
            continue
        p = x.data_ptr()
        if p in optr:
            if objs[optr[p]] is not x:
                return None
            slots.append(optr[p])
            continue
        n = x.numel() * x.element_size()
        if (p in ptrs or n == 0 or x.requires_grad or x.layout is not torch.strided or x.device.type != "cpu"
                or not x.is_contiguous() or x.storage_offset() != 0 or x.untyped_storage().nbytes() != n
                or len(outs) >= _MEMO_MAX_OUTS or x.ndim > MAX_DIMS):
            return None
        try:   # canna's dtype of it: its DLPack (code, bits) for torch's allocator through the exchange API
            dt = canna_dl.dtype(str(x.dtype).rpartition(".")[2])
        except (TypeError, ValueError):
            return None
        shape = tuple(x.shape)
        if n >= POOL_MIN_BYTES:   # canna's pool, handed to torch zero-copy (see new_out)
            spec = (shape, x.dtype, functools.partial(_pool_torch, shape, dt))
        else:
            spec = (shape, x.dtype, None, (dt.code, dt.bits))
        optr[p] = len(outs)
        outs.append(spec)
        objs.append(x)
        slots.append(optr[p])
    sid = rec[0][1]
    launches, written, filled = [], set(), set()
    for plan, sh, addrs, wptrs in rec:
        if sh != sid or not plan.repeatable or plan.closed:
            return None
        # the arguments the call writes: the plan's output operands, and the Python path's outputs
        # (Out objects: an input a kernel updates in place is an operand before the outputs, e.g.
        # BatchNorm's running_mean / running_var) — each is checked per replay against the others
        for ad in wptrs:
            i = ptrs.get(ad)
            if i is not None:
                written.add(i)
        nin = plan.nin
        m = bytearray()
        for q, ad in enumerate(addrs):
            j = optr.get(ad)
            if j is not None:
                m.append(128 + j)
                if q >= nin:
                    filled.add(j)
                continue
            i = ptrs.get(ad)
            if i is None:
                return None
            m.append(i)
            if q >= nin:
                written.add(i)
        launches.append((plan, bytes(m)))
    if len(filled) != len(outs):
        return None
    ws = max(p.ws_size for p, _ in launches)
    return (tuple(launches), tuple(outs), bytes(sorted(written)), bytes(slots), single, ws)


def _memo_workspace(size):
    """A workspace of ``size`` bytes for one replay on the current stream (closed after it)."""
    return acl_rt.alloc(size, stream=current_stream())
