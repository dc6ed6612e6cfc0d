"""Turning Python arguments into a kernel's argument block.

GM pointer parameters take device memory: an ``acl_rt.DeviceBuffer``, or an array -- any object
with ``__dlpack__`` (PyTorch, TensorFlow, JAX, NumPy, CuPy-style producers: imported by
``canna_dl.from_dlpack``, canna's one DLPack importer; see :func:`_as_array`), a DLPack capsule
(read in place by canna_dl's capsule reader, not consumed), or a C-contiguous buffer-protocol
object -- always zero-copy: the kernel receives the address of the object's own memory. ``None`` is NULL and
``ctypes.c_void_p(addr)`` passes a raw address. Scalar parameters take Python and NumPy scalars
(or one-element arrays), converted to the parameter's C type with range checks (NumPy's
``OverflowError`` convention for out-of-range integers).
"""
from __future__ import annotations

import ctypes
import math
import struct
import sys

import cffi

from acl_rt import DeviceBuffer

from ._signature import SCALAR_TYPES, KernelParam
from ._structs import pack_struct

__all__ = ["make_packer", "gm_pointer", "ArgumentView"]

# ---------------------------------------------------------------------------------------------
# DLPack: canna_dl owns the protocol and the ABI. DLPack producers go through
# canna_dl.from_dlpack (see _as_array); a raw capsule is read in place, without consuming it (a
# launch may be repeated), by canna_dl's C reader of the DLPack structs (capsule_info).

from canna_dl import _native as _dl_native, all_dtypes as _all_dtypes  # noqa: E402  (kernels sits on canna_dl)
from canna_dl._rt import KDL_ASCEND as _kDLAscend, KDL_CPU as _kDLCPU, KDL_EXTDEV as _kDLExtDev  # noqa: E402

_ffi = cffi.FFI()   # from_buffer/cast for buffer-protocol objects
_kDLCUDAHost = 3
_HOST_DEVICES = {_kDLCPU, _kDLCUDAHost}
_NPU_DEVICES = {_kDLExtDev, _kDLAscend}
_DL_READ_ONLY = 1
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                 10: "rocm", 11: "rocm_host", 12: "ext_dev (npu)", 13: "cuda_managed", 14: "oneapi",
                 15: "webgpu", 16: "hexagon", 17: "maia", 21: "ascend"}
# DLDataType (code, bits) -> canonical type: canna_dl's dtype table, restricted to kernel element types
_DL_TYPES = {(d.code, d.bits): d.name for d in _all_dtypes() if d.name in SCALAR_TYPES or d.name == "bfloat16"}
import datetime as _datetime  # noqa: E402

_PyCapsule = type(_datetime.datetime_CAPI)   # types.CapsuleType on Python >= 3.13


class ArgumentView:
    """What a GM pointer argument resolved to (for tests and error messages).

    Attributes: ``ptr`` (int address), ``dtype`` (canonical element type or None), ``readonly``,
    ``host`` (host memory: valid on the simulator's unified model only), ``nbytes`` (or None),
    ``keep`` (objects that must stay alive while the kernel may run)."""
    __slots__ = ("ptr", "dtype", "readonly", "host", "nbytes", "keep")

    def __init__(self, ptr, dtype, readonly, host, nbytes, keep):
        self.ptr, self.dtype, self.readonly, self.host, self.nbytes, self.keep = ptr, dtype, readonly, host, nbytes, keep


def _contiguous(ndim, shape, strides) -> bool:
    if strides is None or ndim == 0:
        return True
    expected = 1
    for d in range(ndim - 1, -1, -1):
        n = shape[d]
        if n == 0:
            return True
        if n != 1 and strides[d] != expected:
            return False
        expected *= n
    return True


def _from_capsule(capsule, what: str, label: str) -> ArgumentView:
    try:
        t = _dl_native.capsule_info(capsule)   # canna_dl's reader of the DLPack structs; does not consume
    except ValueError as e:
        raise TypeError(f"{label}: {what} is not a DLPack tensor ({e})") from None
    if t["name"].startswith("used_"):
        raise TypeError(f"{label}: the DLPack capsule was already consumed by another library")
    readonly = bool(t.get("flags", 0) & _DL_READ_ONLY)
    dev = t["device"][0]
    if dev not in _HOST_DEVICES and dev not in _NPU_DEVICES:
        raise TypeError(f"{label}: {what} lives on device '{_DEVICE_NAMES.get(dev, dev)}', which an Ascend kernel "
                        f"cannot access")
    code, bits, lanes = t["dtype"]
    if lanes != 1:
        raise TypeError(f"{label}: {what} has a vector dtype ({lanes} lanes)")
    if not _contiguous(t["ndim"], t["shape"], t["strides"]):
        raise ValueError(f"{label}: {what} is not C-contiguous; the kernel would read it as if it were "
                         f"(pass a contiguous copy)")
    count = 1
    for n in t["shape"] or ():
        count *= n
    ptr = t["data"] + t["byte_offset"]
    return ArgumentView(ptr, _DL_TYPES.get((code, bits)), readonly, dev in _HOST_DEVICES, count * bits // 8, capsule)


_TORCH_TYPES = {"torch.float16": "float16", "torch.float32": "float32", "torch.float64": "float64",
                "torch.bfloat16": "bfloat16", "torch.int8": "int8", "torch.int16": "int16", "torch.int32": "int32",
                "torch.int64": "int64", "torch.uint8": "uint8", "torch.uint16": "uint16", "torch.uint32": "uint32",
                "torch.uint64": "uint64", "torch.bool": "bool"}
_FORMATS = {"b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32", "l": "int64",
            "L": "uint64", "q": "int64", "Q": "uint64", "e": "float16", "f": "float32", "d": "float64", "?": "bool",
            "c": "uint8"}


_UNRESOLVED = object()


def _as_array(obj, label):
    """THE SEAM between kernels and canna_dl: what a GM pointer argument is viewed as.

    DLPack producers (TF, JAX tensors) go through ``canna_dl.from_dlpack(obj,
    copy=False)``: a kernel writes through its pointers, so a copy would silently lose its writes
    — memory the kernel cannot reach (host memory in the discrete model) is an error naming the
    parameter instead. NumPy arrays, PyTorch tensors, DeviceArrays and DeviceBuffers are read
    directly; anything else is tried as a buffer-protocol object below."""
    if not hasattr(obj, "__dlpack__"):
        return obj   # capsules are viewed below without being consumed (a launch may be repeated)
    import canna_dl
    try:
        return canna_dl.from_dlpack(obj, copy=False)
    except canna_dl.CopyRequiredError as e:
        raise TypeError(f"{label}: the {type(obj).__name__} is not in memory the kernel can access ({e}); "
                        f"pass device memory (canna_dl.asarray(x) copies it there)") from None
    except BufferError as e:
        raise TypeError(f"{label}: the {type(obj).__name__} cannot be exported through DLPack: {e}") from None


_NP_CHARS = {"e": "float16", "f": "float32", "d": "float64", "b": "int8", "B": "uint8", "h": "int16", "H": "uint16",
             "i": "int32", "I": "uint32", "l": "int64", "L": "uint64", "q": "int64", "Q": "uint64", "?": "bool"}


def _numpy_view(arr, label):
    if not arr.flags.c_contiguous:
        raise ValueError(f"{label}: the numpy array is not C-contiguous; the kernel would read it as if it "
                         f"were (pass numpy.ascontiguousarray(a))")
    if arr.nbytes == 0:
        return 0, _NP_CHARS.get(arr.dtype.char), not arr.flags.writeable, True, arr
    cbuf = _ffi.from_buffer(arr)
    return int(_ffi.cast("uintptr_t", cbuf)), _NP_CHARS.get(arr.dtype.char), not arr.flags.writeable, True, arr


_torch_dtypes: dict = {}


def _torch_view(t, label):
    if not t.is_cpu:
        dt = t.device.type
        if dt not in ("npu", "privateuseone"):
            raise TypeError(f"{label}: the tensor is on device '{t.device}', which an Ascend kernel cannot access")
    if not t.is_contiguous():
        raise ValueError(f"{label}: the tensor is not contiguous; the kernel would read it as if it were "
                         f"(pass t.contiguous())")
    if t.is_conj() or t.is_neg():
        raise TypeError(f"{label}: the tensor has a lazy conjugate/negative bit; call .resolve_conj() / "
                        f".resolve_neg() first")
    dtype = _torch_dtypes.get(t.dtype)
    if dtype is None:
        dtype = _torch_dtypes[t.dtype] = _TORCH_TYPES.get(str(t.dtype), "")
    return t.data_ptr(), dtype or None, False, t.is_cpu, t


# type -> fast reader (NumPy arrays and PyTorch tensors, found by module and name so neither is imported)
_fast: dict = {}


def _device_array_view(a, label):
    if not a.is_c_contiguous:
        raise ValueError(f"{label}: the array is not C-contiguous; the kernel would read it as if it were "
                         f"(pass a.contiguous())")
    return a.ptr, a.dtype.name, a.readonly, False, a


def _fast_reader(tp):
    r = _fast.get(tp, _UNRESOLVED)
    if r is _UNRESOLVED:
        r = None
        if tp.__module__ == "numpy" and tp.__name__ == "ndarray":
            r = _numpy_view
        elif tp.__module__.startswith("torch") and tp.__name__ in ("Tensor", "Parameter") and hasattr(tp, "data_ptr"):
            r = _torch_view
        elif tp.__module__.startswith("canna_dl") and tp.__name__ == "DeviceArray":
            r = _device_array_view
        _fast[tp] = r
    return r


def _gm(obj, label):
    """(ptr, dtype, readonly, host, keep) of an object passed as a GM pointer (see gm_pointer)."""
    tp = type(obj)
    reader = _fast_reader(tp)   # NumPy arrays, PyTorch tensors and DeviceArrays are read directly
    if reader is not None:
        return reader(obj, label)
    if obj is None:
        return 0, None, False, False, None
    if tp is DeviceBuffer:
        return obj._live(label), None, False, False, obj
    if tp is ctypes.c_void_p:
        return obj.value or 0, None, False, False, None
    if tp in (bool, int, float, complex, str):
        raise TypeError(f"{label} is a GM pointer: got {tp.__name__} {obj!r}; pass an array, a "
                        f"DeviceBuffer, None (NULL), or ctypes.c_void_p(address) for a raw address")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.generic):
        raise TypeError(f"{label} is a GM pointer: got {tp.__name__} {obj!r}; pass an array, a "
                        f"DeviceBuffer, None (NULL), or ctypes.c_void_p(address) for a raw address")
    arr = _as_array(obj, label)
    reader = _fast_reader(type(arr))
    if reader is not None:
        return reader(arr, label)
    if isinstance(arr, DeviceBuffer):
        return arr._live(label), None, False, False, arr
    if type(arr) is _PyCapsule:
        v = _from_capsule(arr, "the capsule", label)
        return v.ptr, v.dtype, v.readonly, v.host, v.keep
    try:
        mv = memoryview(arr)
    except TypeError:
        raise TypeError(f"{label} is a GM pointer: got {tp.__name__}, which is neither an array (DLPack, "
                        f"buffer protocol) nor a DeviceBuffer; pass None for NULL or ctypes.c_void_p(address) for "
                        f"a raw address") from None
    if not mv.c_contiguous:
        raise ValueError(f"{label}: the buffer is not C-contiguous")
    fmt = _FORMATS.get(mv.format.lstrip("@=<>!"))
    if mv.nbytes == 0:
        return 0, fmt, mv.readonly, True, mv
    cbuf = _ffi.from_buffer(mv)
    return int(_ffi.cast("uintptr_t", cbuf)), fmt, mv.readonly, True, (mv, cbuf)


def gm_pointer(obj, label: str = "argument") -> ArgumentView:
    """The address (and what is known of the memory) of an object passed as a GM pointer.

    Raises:
        TypeError: the object cannot be a kernel operand (a scalar, a list, memory on another kind
            of device, an unknown DLPack dtype layout).
        ValueError: the array is not C-contiguous.
        InvalidHandleError: a DeviceBuffer that was freed.
    """
    ptr, dtype, readonly, host, keep = _gm(obj, label)
    if isinstance(keep, tuple):   # (memoryview, cdata) of a buffer; (capsule, producer) of a DLPack export
        nbytes = keep[0].nbytes if isinstance(keep[0], memoryview) else None
    else:
        nbytes = getattr(keep, "nbytes", None) if keep is not None else None
    return ArgumentView(ptr, dtype, readonly, host, nbytes, keep)


# ---------------------------------------------------------------------------------------------
# scalars

_INT_RANGE = {name: ((-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if kind == "i" else (0, (1 << (8 * size)) - 1))
              for name, (size, _, kind) in SCALAR_TYPES.items() if kind in "iu"}
_FLOAT_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38, "float64": math.inf}


def _numel(v):
    shape = getattr(v, "shape", None)
    if shape is None:
        return None
    try:
        n = 1
        for d in tuple(shape):
            n *= int(d)
        return n
    except TypeError:
        return None


def _unwrap(v, p: KernelParam, label: str):
    """A Python scalar from v (numpy scalars and one-element arrays are unwrapped), with its kind."""
    if isinstance(v, bool):
        return v, "b"
    if isinstance(v, int):
        return v, "i"
    if isinstance(v, float):
        return v, "f"
    if v is None or isinstance(v, (str, bytes, bytearray, list, tuple, dict, set, complex, DeviceBuffer)):
        raise TypeError(f"{label}: expected a number, got {type(v).__name__}")
    n = _numel(v)
    if n is not None:
        if n != 1:
            raise TypeError(f"{label} is passed by value: got a {type(v).__name__} with {n} elements (a multi-element "
                            f"array cannot be a scalar argument; declare a pointer parameter for an array)")
        dtype = getattr(v, "dtype", None)
        kind = getattr(dtype, "kind", None)
        if kind is None:   # torch / tf dtypes
            s = str(dtype)
            kind = "b" if "bool" in s else "f" if ("float" in s or "half" in s) else "c" if "complex" in s else "i"
        item = v.item() if hasattr(v, "item") else v.numpy().item()
        if kind == "c" or isinstance(item, complex):
            raise TypeError(f"{label}: complex values are not supported")
        return item, ("b" if kind == "b" else "f" if kind == "f" else "i")
    if hasattr(v, "__index__"):
        return v.__index__(), "i"
    if hasattr(v, "__float__"):
        return float(v), "f"
    raise TypeError(f"{label}: expected a number, got {type(v).__name__}")


def _scalar_converter(p: KernelParam, kernel: str):
    label = f"{kernel}(): {p.label}"
    canon = p.scalar
    _, _, kind = SCALAR_TYPES[canon]
    if kind in "iu":
        lo, hi = _INT_RANGE[canon]

        def conv(v):
            if type(v) is int:
                x = v
            else:
                x, k = _unwrap(v, p, label)
                if k == "f":
                    raise TypeError(f"{label}: expected an integer, got a float ({x!r}); convert it explicitly")
                x = int(x)
            if not lo <= x <= hi:
                raise OverflowError(f"{label}: {x} is out of range for {canon} ({lo}..{hi})")
            return x
        return conv
    if kind == "f":
        fmax = _FLOAT_MAX[canon]

        def conv(v):
            if type(v) is float:
                x = v
            else:
                x, _k = _unwrap(v, p, label)
                x = float(x)
            if abs(x) > fmax and not math.isinf(x):
                raise OverflowError(f"{label}: {x!r} is out of range for {canon} (max {fmax:g})")
            return x
        return conv

    def conv(v):   # bool
        x, k = _unwrap(v, p, label)
        if k == "f" or (k == "i" and x not in (0, 1)):
            raise TypeError(f"{label}: expected a bool (or 0/1), got {x!r}")
        return bool(x)
    return conv


def _pointer_converter(p: KernelParam, on_device: bool, kernel: str):
    label = f"{kernel}(): {p.label}"

    const, element = p.is_const, p.element

    def conv(v):
        ptr, dtype, readonly, host, keep = _gm(v, label)
        if readonly and not const:
            # the kernel may write through any non-const pointer (GM_ADDR included): immutable
            # objects (TF and JAX tensors, bytes, read-only NumPy arrays) are refused, as by the
            # built-in ops' out= (a `const` parameter -- `const float *`, `const GM_ADDR` -- takes them)
            raise ValueError(f"{label}: the {type(v).__name__} is read-only (immutable) but the kernel may write "
                             f"through this non-const parameter; declare it `const` (e.g. `const GM_ADDR` or "
                             f"`const float *`) if the kernel only reads it, or pass a writable copy")
        if element is not None and dtype is not None and dtype != element:
            raise TypeError(f"{label}: expected an array of {element}, got {dtype}")
        if on_device and host and ptr:
            raise TypeError(f"{label}: host memory cannot be a kernel operand on an Ascend device; copy it to the "
                            f"device first (acl_rt.alloc + copy_from, or canna_dl.asarray)")
        return ptr, keep
    return conv


def _struct_converter(p: KernelParam, kernel: str):
    label = f"{kernel}(): {p.label}"
    layout = p.layout
    return lambda v: pack_struct(layout, v, label, SCALAR_TYPES)


def make_packer(params: tuple, args_size: int, *, on_device: bool, kernel: str = "kernel"):
    """``pack(args) -> (bytes, keepalive list, arrays)`` for a kernel's parameters (raises
    TypeError, ValueError, OverflowError naming the parameter). ``arrays``: ``(DeviceArray,
    writable)`` for each DeviceArray argument (a canna_dl array, or what a DLPack producer was
    imported as), so the launch can order itself after their pending writes and record its own."""
    fmt, off = ["="], 0
    convs = []
    for p in params:
        if p.offset > off:
            fmt.append(f"{p.offset - off}x")
        fmt.append("Q" if p.kind == "pointer" else f"{p.size}s" if p.kind == "struct" else SCALAR_TYPES[p.scalar][1])
        off = p.offset + p.size
        convs.append((p.kind == "pointer", _pointer_converter(p, on_device, kernel) if p.kind == "pointer"
                      else _struct_converter(p, kernel) if p.kind == "struct" else _scalar_converter(p, kernel),
                     p.kind == "pointer" and not p.is_const))
    if args_size > off:
        fmt.append(f"{args_size - off}x")
    st = struct.Struct("".join(fmt))
    assert st.size == args_size, (st.size, args_size)

    fast = _fast
    arrays_reader = _device_array_view

    def pack(args):
        values, keep, arrays = [], [], []
        for (is_ptr, conv, writable), a in zip(convs, args):
            if is_ptr:
                ptr, k = conv(a)
                values.append(ptr)
                if k is not None:
                    keep.append(k)
                    if fast.get(type(k)) is arrays_reader:
                        arrays.append((k, writable))
            else:
                values.append(conv(a))
        return st.pack(*values), keep, arrays
    return pack
