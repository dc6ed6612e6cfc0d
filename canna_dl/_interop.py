"""Import (from_dlpack, asarray), creation (empty, zeros, ...) and the NumPy exchange.

Framework-specific exchange code lives in the lazily imported ``canna_dl._frameworks._torch``,
``._tf`` and ``._jax`` modules (part of the core: they load the framework, never ``kernels`` or the
``canna_dl.torch/.tf/.jax`` shims); this module only dispatches to them by the object's type, so
importing canna_dl needs no framework, NumPy included.
"""
from __future__ import annotations

import builtins
import operator
import sys

from . import _copy, _native, _rt
from ._array import DeviceArray, _is_int, _normalize_shape
from ._dtypes import dtype as _as_dtype, _get as _dt

__all__ = ["from_dlpack", "asarray", "empty", "zeros", "ones", "full", "empty_like", "zeros_like",
           "to_numpy", "from_numpy", "CopyRequiredError"]


class CopyRequiredError(BufferError, ValueError):
    """The operation needs a copy but ``copy=False`` was given (a BufferError, and a ValueError as
    the array API's ``from_dlpack`` asks for the cross-device case)."""


_import_capsule = _native.import_capsule
_state = _rt._state
_cfg = _rt.cfg
_tls = _rt._tls


def _capsule_type():
    import types
    if hasattr(types, "CapsuleType"):  # Python 3.13+
        return types.CapsuleType
    import datetime
    return type(datetime.datetime_CAPI)


_CapsuleType = _capsule_type()


def _finish(a, device=None):
    """Attach the right device to a fresh import; in the discrete model copy host memory to the
    device (counted as ``"to_device"``)."""
    st = a.storage
    if st.device is None:
        if st.kind == 1:  # host memory, discrete model
            import acl_rt
            dev = _parse_device(device) if device is not None else acl_rt.Device(_rt.current_device_id())
            out = _copy.new_device_array(DeviceArray, a.shape, a.dtype, dev)
            _copy.copy_into(out, a)
            _copy.count("to_device", a.nbytes)
            if a.readonly:  # the flag survives the copy, as it does a zero-copy import
                out = out._view(0, out.shape, out.strides, None, True)
            return out
        import acl_rt
        dev_type, dev_id = st.dl_device
        n = acl_rt.device_count()
        if not 0 <= dev_id < n:
            raise BufferError(f"DLPack tensor is on NPU {dev_id} but this process sees {n} device(s)")
        st.device = acl_rt.Device(dev_id)
    elif st.kind == 1 and getattr(_tls, "device_id", 0) != _cfg.host_device_id:
        import acl_rt
        st.device = acl_rt.Device(getattr(_tls, "device_id", 0))
    return a


def _ensure():
    if _cfg.generation != _state.generation or not _state.ready:
        _rt.ensure()


# -- dispatch by producer type ------------------------------------------------------------------

_IMPORTERS: dict = {}
#: type -> fast importer for the common case (no device/copy arguments); adapters register here
_FAST: dict = {}


def _importer_for(t):
    """The framework importer for objects of type ``t`` (None: the generic DLPack protocol)."""
    try:
        return _IMPORTERS[t]
    except KeyError:
        pass
    mod = (getattr(t, "__module__", "") or "").split(".")[0]
    fn = None
    if mod == "torch" and "torch" in sys.modules and issubclass(t, sys.modules["torch"].Tensor):
        from ._frameworks._torch import _import_tensor as fn
    elif mod == "tensorflow" and "tensorflow" in sys.modules:
        from ._frameworks._tf import _import_tensor as fn
    elif mod in ("jax", "jaxlib") and "jax" in sys.modules:
        from ._frameworks._jax import _import_array as fn
    elif mod == "numpy" and "numpy" in sys.modules and issubclass(t, sys.modules["numpy"].ndarray):
        fn = _import_numpy
    _IMPORTERS[t] = fn
    return fn


def _generic_import(x, copy):
    """Call ``x.__dlpack__`` the way the array API asks (max_version negotiation with a TypeError
    fallback; a stream only for NPU producers) and import the capsule."""
    try:
        dev = x.__dlpack_device__()
    except AttributeError:
        dev = None
    if dev is None:
        dev_type = 1
    else:
        try:
            dev_type, _ = dev
            dev_type = operator.index(dev_type)
            operator.index(_)
        except (TypeError, ValueError):
            raise TypeError(f"from_dlpack: {type(x).__name__}.__dlpack_device__() must return (device_type, "
                            f"device_id), two ints (the array API standard), got {dev!r}") from None
    kw = {"max_version": (_native.DLPACK_MAJOR, _native.DLPACK_MINOR)}
    if copy is not None:
        kw["copy"] = copy
    if dev_type in (_rt.KDL_EXTDEV, _rt.KDL_ASCEND):
        import acl_rt
        kw["stream"] = acl_rt.current_stream().handle
    copied = copy is True
    try:
        cap = x.__dlpack__(**kw)
    except TypeError:
        # an older producer: drop the new keywords (PyTorch's fallback order), copy ourselves
        kw.pop("max_version")
        try:
            cap = x.__dlpack__(**kw)
        except TypeError:
            kw.pop("copy", None)
            copied = False
            cap = x.__dlpack__(**kw)
    a = _import_capsule(DeviceArray, cap)
    if copy is True and not copied:
        a = a.copy()
    return a


_MAXV = (_native.DLPACK_MAJOR, _native.DLPACK_MINOR)


def _import_numpy(x, copy=None):
    try:
        try:  # NumPy arrays are always on the CPU: no __dlpack_device__ / stream negotiation needed
            cap = x.__dlpack__(max_version=_MAXV) if copy is None else x.__dlpack__(max_version=_MAXV, copy=copy)
        except TypeError:  # NumPy < 2.1: legacy only
            return _generic_import(x, copy)
        return _import_capsule(DeviceArray, cap)
    except (BufferError, RuntimeError, TypeError):
        # dtypes NumPy cannot export through DLPack (ml_dtypes' bfloat16): reinterpret the bits
        name = x.dtype.name
        if name not in ("bfloat16",):
            raise
        a = _generic_import(x.view("u2"), copy)
        return a.view(_dt(name))


# -- public import functions ----------------------------------------------------------------------

def from_dlpack(x, /, *, device=None, copy=None) -> DeviceArray:
    """A :class:`DeviceArray` viewing ``x``'s memory, through DLPack (array API standard).

    Args:
        x: an object with ``__dlpack__`` (a PyTorch tensor, a NumPy array, a TensorFlow eager
            tensor, a JAX array, a DeviceArray, ...) or a raw DLPack capsule (``"dltensor"`` or
            ``"dltensor_versioned"``), which is consumed.
        device: the NPU for the result (an ``acl_rt.Device``, an int, ``"npu:N"``); default: the
            producer's device (host memory: the calling thread's current device).
        copy: ``None`` copies only if needed, ``True`` always, ``False`` never.

    CPU memory is a valid kernel operand in the unified memory model (the simulator's default):
    the result views it, zero-copy. In the discrete model it is copied to device memory
    (counted as ``"to_device"``). The producer's deleter runs exactly once, when the last view
    of the memory is gone. PyTorch negated/conjugated views are resolved first (torch exports
    them un-negated); TensorFlow string tensors are refused before TensorFlow can abort.

    Raises:
        BufferError: the producer's dtype (lanes != 1, float8, ...), device type or DLPack version
            is not supported, or the capsule was already consumed; a tensor that requires grad.
        CopyRequiredError: a copy is needed and ``copy=False`` (also a ValueError).
        TypeError: ``x`` is not a DLPack producer.
    """
    if _cfg.generation != _state.generation or not _state.ready:
        _rt.ensure()
    t = type(x)
    if device is None and copy is None:
        fast = _FAST.get(t)
        if fast is not None:
            a = fast(x)  # None: the general path decides (and raises the right error)
            if a is not None:
                st = a.storage
                if st.device is None or (st.kind == 1 and getattr(_tls, "device_id", 0) != _cfg.host_device_id):
                    a = _finish(a)
                return a
    if isinstance(x, DeviceArray):
        a = x
        if copy is True:
            a = a.copy()
    else:
        imp = _IMPORTERS.get(t, False)
        if imp is False:
            imp = _importer_for(t)
        if t is _CapsuleType:
            a = _import_capsule(DeviceArray, x)
            if copy is True:
                a = a.copy()
        elif imp is not None:
            if copy is False and not _cfg.unified:
                _require_no_host_copy(x)
            a = imp(x, copy)
        elif hasattr(x, "__dlpack__"):
            if copy is False and not _cfg.unified:
                _require_no_host_copy(x)
            a = _generic_import(x, copy)
        else:
            raise TypeError(f"from_dlpack: {t.__name__} object is not a DLPack producer (it has no "
                            "__dlpack__ method and is not a DLPack capsule); use canna_dl.asarray for array-likes")
    st = a.storage
    if st.device is None or (st.kind == 1 and getattr(_tls, "device_id", 0) != _cfg.host_device_id):
        if copy is False and st.kind == 1 and st.device is None:
            raise CopyRequiredError("from_dlpack: host memory must be copied to the NPU in the discrete memory "
                                    "model, but copy=False")
        a = _finish(a, device)
    if device is not None:
        a = _to_device(a, device, copy)
    return a


def _require_no_host_copy(x):
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None and operator.index(dev()[0]) not in (_rt.KDL_EXTDEV, _rt.KDL_ASCEND):
        raise CopyRequiredError("from_dlpack: host memory must be copied to the NPU in the discrete memory "
                                "model, but copy=False")


def _parse_device(device):
    import acl_rt
    if isinstance(device, acl_rt.Device):
        return device
    if _is_int(device):
        return acl_rt.Device(operator.index(device))
    if isinstance(device, str):
        s = device.strip().lower()
        for prefix in ("npu", "ascend"):
            if s == prefix:
                return acl_rt.current_device()
            if s.startswith(prefix + ":") and s[len(prefix) + 1:].isdigit():
                return acl_rt.Device(int(s[len(prefix) + 1:]))
        if s == "cpu":
            raise ValueError("canna arrays live on NPU devices; use canna_dl.to_numpy()/to_torch() for host arrays")
    if isinstance(device, tuple) and len(device) == 2:
        t, i = device
        if operator.index(t) in (_rt.KDL_EXTDEV, _rt.KDL_ASCEND):
            return acl_rt.Device(operator.index(i))
    raise TypeError(f"device must be an acl_rt.Device, an int, 'npu:N' or (12, N), not {device!r}")


def _to_device(a, device, copy):
    dev = _parse_device(device)
    if a.device is dev:
        return a
    st = a.storage
    if st.kind == 1 and _cfg.unified:  # host-coherent memory is an operand of every device
        st2 = _native.Storage(st.ptr, st.nbytes, kind=1, device=dev, keep=st, readonly=st.readonly)
        return _native.make_array(DeviceArray, st2, a.dtype, a.shape, a.strides, a.offset, a.readonly)
    if copy is False:
        raise CopyRequiredError(f"from_dlpack: the array is on NPU {a.device.device_id}, device {dev.device_id} was "
                                "requested and copy=False")
    out = _copy.new_device_array(DeviceArray, a.shape, a.dtype, dev)
    _copy.copy_into(out, a)
    _copy.count("to_device_id", a.nbytes)
    return out


def asarray(obj, dtype=None, *, device=None, copy=None) -> DeviceArray:
    """Anything array-like as a :class:`DeviceArray`, without a copy whenever possible.

    Args:
        obj: a DeviceArray; a DLPack producer or capsule (see :func:`from_dlpack`); a
            buffer-protocol object (``bytes``, ``bytearray``, ``memoryview``, ``array.array``;
            viewed zero-copy, read-only when the object is); a Python scalar or (nested)
            list/tuple of them (through NumPy when installed, else packed by canna: bool → bool,
            int → int64, float → float64, complex → complex128); any object NumPy can convert.
        dtype: the result's dtype. A different dtype than the source's means a converted copy
            (through NumPy, counted as ``"dtype"``).
        device, copy: as in :func:`from_dlpack`.

    Raises:
        TypeError: ``obj`` cannot be converted, or ``dtype`` is unknown.
    """
    dt = None if dtype is None else _as_dtype(dtype)
    t = type(obj)
    if (isinstance(obj, DeviceArray) or t is _CapsuleType or hasattr(obj, "__dlpack__")
            or _IMPORTERS.get(t, False) or _importer_for(t) is not None):
        a = from_dlpack(obj, device=device, copy=copy)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        a = _from_buffer(obj, device, copy)
    else:
        a = _from_python(obj, dt, device, copy)
        if dt is not None and a.dtype is not dt:
            a = _convert(a, dt)
        return a
    if dt is not None and a.dtype is not dt:
        if copy is False:
            raise CopyRequiredError(f"asarray: converting {a.dtype} to {dt} needs a copy but copy=False")
        a = _convert(a, dt)
    return a


def _from_python(obj, dt, device, copy):
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        try:
            arr = np.asarray(obj, dtype=None if dt is None or dt.name == "bfloat16" else dt.numpy)
        except (TypeError, ValueError) as e:
            raise TypeError(f"asarray: cannot convert {type(obj).__name__} to an array: {e}") from None
        if arr.dtype == object or arr.dtype.kind in "USV":   # objects, strings, raw records
            raise TypeError(f"asarray: cannot convert {type(obj).__name__} to an array of numbers"
                            + (f" (NumPy makes it {arr.dtype})" if arr.dtype != object else ""))
        arr = np.ascontiguousarray(arr) if arr.ndim else arr.reshape(())
        if arr.dtype.byteorder not in ("=", "|"):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        return from_dlpack(arr, device=device, copy=copy)
    try:
        memoryview(obj)
    except TypeError:
        return _from_python_pure(obj, dt, device)
    return _from_buffer(obj, device, copy)


def _from_buffer(obj, device, copy):
    _ensure()
    a = _native.import_buffer(DeviceArray, obj)
    a = _finish(a, device) if a.storage.device is None else a
    if device is not None:
        a = _to_device(a, device, copy)
    if copy is True:
        a = a.copy()
    return a


def _from_python_pure(obj, dt, device):
    """Nested lists of Python numbers without NumPy."""
    shape = []
    probe = obj
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat = []

    def walk(x, level):
        if level == len(shape):
            if isinstance(x, (list, tuple)):
                raise TypeError("asarray: ragged nested sequence")
            flat.append(x)
            return
        if not isinstance(x, (list, tuple)) or len(x) != shape[level]:
            raise TypeError("asarray: ragged nested sequence")
        for y in x:
            walk(y, level + 1)
    walk(obj, 0)
    for v in flat:
        if not isinstance(v, (builtins.bool, int, float, complex)):
            raise TypeError(f"asarray: cannot convert {type(v).__name__} to an array element (install NumPy "
                            "for more input types)")
    if dt is None:
        if any(isinstance(v, complex) for v in flat):
            dt = _dt("complex128")
        elif any(isinstance(v, float) for v in flat):
            dt = _dt("float64")
        elif flat and all(isinstance(v, builtins.bool) for v in flat):
            dt = _dt("bool")
        elif not flat:
            dt = _dt("float64")
        else:
            dt = _dt("int64")
    data = bytearray(b"".join(dt.pack(v) for v in flat))
    _ensure()
    a = _native.import_buffer(DeviceArray, data) if data else None
    shape = tuple(shape)
    if a is None:
        st = _native.host_alloc(0)
        st.device = _rt.device(_rt.current_device_id()) if _cfg.unified else None
        return _finish(_native.make_array(DeviceArray, st, dt, shape, _copy.c_strides(shape), 0, False), device)
    a = a._view(0, shape, _copy.c_strides(shape), dt)
    return _finish(a, device) if a.storage.device is None else a


def _convert(a, dt):
    try:
        import numpy as np  # noqa: F401
    except ImportError:
        raise TypeError(f"converting {a.dtype} to {dt} needs NumPy (or canna's kernels: kernels.cast)") from None
    host = a.numpy().astype(dt.numpy)
    out = from_numpy(host, device=a.device)
    if out.storage.is_foreign:
        out = out.copy()  # do not keep the temporary NumPy array as the owner of a result
    _copy.count("dtype", out.nbytes)
    return out


# -- creation ------------------------------------------------------------------------------------

def empty(shape, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """A new C-contiguous array in device memory from :func:`acl_rt.alloc` (the caching pool),
    64-byte aligned, contents undefined (the simulator poisons fresh memory with NaN).

    Args:
        shape: int or tuple of ints. dtype: default float32.
        device: default the current device. stream: the stream it is used in order on.

    Raises:
        OutOfMemoryError: the device is full.
    """
    _ensure()
    shape = _normalize_shape(shape, "empty")
    if any(d < 0 for d in shape):
        raise ValueError(f"empty: negative dimension in {shape}")
    dt = _dt("float32") if dtype is None else _as_dtype(dtype)
    import acl_rt
    dev = acl_rt.current_device() if device is None else _parse_device(device)
    return _copy.new_device_array(DeviceArray, shape, dt, dev, stream)


def zeros(shape, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """Like :func:`empty`, filled with zeros."""
    a = empty(shape, dtype, device=device, stream=stream)
    a.fill(0)
    return a


def ones(shape, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """Like :func:`empty`, filled with ones."""
    a = empty(shape, dtype, device=device, stream=stream)
    a.fill(1)
    return a


def full(shape, fill_value, dtype=None, *, device=None, stream=None) -> DeviceArray:
    """Like :func:`empty`, filled with ``fill_value`` (dtype inferred from it when not given:
    bool, int64, float32 or complex64)."""
    if dtype is None:
        dtype = {builtins.bool: "bool", int: "int64", float: "float32", complex: "complex64"}.get(type(fill_value), "float32")
    a = empty(shape, dtype, device=device, stream=stream)
    a.fill(fill_value)
    return a


def empty_like(a, dtype=None, *, device=None) -> DeviceArray:
    a = asarray(a)
    return empty(a.shape, dtype or a.dtype, device=device or a.device)


def zeros_like(a, dtype=None, *, device=None) -> DeviceArray:
    a = asarray(a)
    return zeros(a.shape, dtype or a.dtype, device=device or a.device)


# -- NumPy ---------------------------------------------------------------------------------------

def from_numpy(arr, *, device=None, copy=None) -> DeviceArray:
    """A DeviceArray viewing a NumPy array (zero-copy in the unified model; read-only arrays stay
    read-only). Same as :func:`from_dlpack`, plus bfloat16 (ml_dtypes) arrays."""
    return from_dlpack(arr, device=device, copy=copy)


class _Exporter:
    """Hands a prepared capsule to a consumer that wants an object (np.from_dlpack)."""
    __slots__ = ("cap",)

    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kw):
        cap, self.cap = self.cap, None
        return cap

    def __dlpack_device__(self):
        return (1, 0)


def _numpy_view(a):
    """A NumPy array viewing a host-addressable array (no sync, no copy; any layout)."""
    import numpy as np
    if a.size and a.dtype.name != "bfloat16" and a.dtype.name not in ():
        cap = _native.export_capsule(a, True, 1 if a.readonly else 0, 1, 0)
        return np.from_dlpack(_Exporter(cap))
    # NumPy cannot import bfloat16 through DLPack: view the storage bytes with strides
    from numpy.lib.stride_tricks import as_strided
    if a.size == 0:
        return np.empty(a.shape, dtype=a.dtype.numpy)
    raw = np.frombuffer(a.storage, dtype=np.uint8)
    it = a.itemsize
    lo, _n = _copy.span(a)
    base = raw[lo * it:].view(a.dtype.numpy)
    out = as_strided(base[a.offset - lo:], shape=a.shape, strides=tuple(s * it for s in a.strides),
                     writeable=not a.readonly)
    return out


def to_numpy(a, *, copy=None):
    """A NumPy array for ``a`` (a DeviceArray or anything :func:`asarray` takes).

    Zero-copy in the unified memory model, any layout (negative strides included), read-only
    when ``a`` is; waits for pending work on ``a``'s stream. In the discrete model a host copy
    (counted as ``"to_host"``). ``copy=True`` always copies (``"numpy"``).

    Raises:
        CopyRequiredError: ``copy=False`` in the discrete model.
        ImportError: NumPy is not installed (bfloat16 also needs ml_dtypes).
    """
    if not isinstance(a, DeviceArray):
        a = asarray(a)
    _ensure()
    if copy is True:
        return a.numpy()
    st = a.storage
    if st.kind == 1 or _cfg.unified:
        _copy.sync_for_host(a)
        return _numpy_view(a)
    if copy is False:
        raise CopyRequiredError("to_numpy: the array is in NPU memory (discrete memory model) and copy=False")
    import numpy as np
    from ._array import _wrap_numpy_out
    out = np.empty(a.shape, dtype=a.dtype.numpy)
    _copy.copy_into(_wrap_numpy_out(out, a), a)
    _copy.count("to_host", a.nbytes)
    return out


def _host_bytes(a, reason) -> bytes:
    """The elements of ``a`` in C order as bytes (a counted copy)."""
    out = _copy.new_host_array(DeviceArray, a.shape, a.dtype)
    _copy.copy_into(out, a)
    _copy.count(reason, a.nbytes)
    return bytes(out.storage)


def host_prepare(a, *, compact: str, align: bool, reason: str) -> DeviceArray:
    """``a`` ready for a CPU framework: host-addressable memory, nothing pending, a layout the
    consumer takes (``compact``: ``"c"`` compact row-major, ``"perm"`` a permutation of a
    compact layout, ``"noneg"`` any non-negative strides) and, with ``align``, a 64-byte aligned
    first element. Copies when needed: ``reason`` (layout/alignment) or ``"to_host"``."""
    _ensure()
    st = a.storage
    if not (st.kind == 1 or _cfg.unified):
        out = _copy.new_host_array(DeviceArray, a.shape, a.dtype)
        _copy.copy_into(out, a)
        _copy.count("to_host", a.nbytes)
        return out
    ok = True
    if a.size:
        f = a._flags
        if compact == "c":
            ok = builtins.bool(f & _native.AF_C_CONTIG)
        elif compact == "perm":
            ok = _is_compact_permutation(a)
        else:
            ok = not f & _native.AF_NEG
        if ok and align and a.ptr % _native.ALIGN:
            ok = False
    if ok:
        _copy.sync_for_host(a)
        return a
    out = _copy.new_device_array(DeviceArray, a.shape, a.dtype, a.device)
    _copy.copy_into(out, a)
    _copy.sync_for_host(out)
    _copy.count(reason, a.nbytes)
    return out


def _is_compact_permutation(a) -> builtins.bool:
    dims = sorted((s, n) for n, s in zip(a.shape, a.strides) if n != 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return True
