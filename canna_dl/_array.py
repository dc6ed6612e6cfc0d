"""DeviceArray: a strided view of NPU memory (canna's own or imported through DLPack)."""
from __future__ import annotations

import builtins
import enum
import math
import operator

from . import _copy, _native, _rt
from ._dtypes import DType, dtype as _as_dtype

__all__ = ["DeviceArray", "DLDeviceType"]


class DLDeviceType(enum.IntEnum):
    """DLPack device types canna uses (``DLDeviceType``; ``kDLAscend`` is on DLPack main only)."""
    kDLCPU = 1
    kDLCUDAHost = 3
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLAscend = 21


_CPU = (DLDeviceType.kDLCPU, 0)
_READ_ONLY, _IS_COPIED = 1, 2
_AF_RO, _AF_C, _AF_NEG = _native.AF_READONLY, _native.AF_C_CONTIG, _native.AF_NEG
_export_fast = _native.export_fast
_export_capsule = _native.export_capsule


def _is_int(x) -> bool:
    return not isinstance(x, builtins.bool) and hasattr(x, "__index__")


def _normalize_shape(shape, api) -> tuple:
    if _is_int(shape):
        shape = (shape,)
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{api}: shape must be an int or a sequence of ints, not {shape!r}") from None
    return shape


def _axis(ax, ndim, api) -> int:
    if not _is_int(ax):
        raise TypeError(f"{api}: axis must be an int, not {type(ax).__name__}")
    ax = operator.index(ax)
    if not -ndim <= ax < ndim:
        raise IndexError(f"{api}: axis {ax} is out of range for an array with {ndim} dimensions")
    return ax % ndim


def _reshape_strides(oshape, ostrides, nshape):
    """Strides that view (oshape, ostrides) as nshape without copying (C order), or None
    (NumPy's attempt-no-copy rule)."""
    olds = [(n, s) for n, s in zip(oshape, ostrides) if n != 1]
    odims = [n for n, _ in olds]
    ostr = [s for _, s in olds]
    nd = list(nshape)
    nstr = [0] * len(nd)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(nd) and oi < len(odims):
        np_, op = nd[ni], odims[oi]
        while np_ != op:
            if np_ < op:
                if nj >= len(nd):
                    return None
                np_ *= nd[nj]
                nj += 1
            else:
                if oj >= len(odims):
                    return None
                op *= odims[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if ostr[ok] != odims[ok + 1] * ostr[ok + 1]:
                return None
        nstr[nj - 1] = ostr[oj - 1]
        for nk in range(nj - 1, ni, -1):
            nstr[nk - 1] = nstr[nk] * nd[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    last = nstr[ni - 1] if ni >= 1 else 1
    for nk in range(ni, len(nd)):  # trailing size-1 dims
        nstr[nk] = last
    return tuple(nstr)


class DeviceArray(_native.ArrayBase):
    """A strided array in NPU memory: canna's own (from :func:`canna_dl.empty` & co.) or another
    framework's, imported without a copy through DLPack (:func:`canna_dl.asarray`,
    :func:`canna_dl.from_dlpack`).

    Attributes (plain C slots, cheap to read):
        ptr: address of element ``[0, ..., 0]`` (int; 0 for an empty array).
        base_ptr, offset, storage_size: the storage the array views, the element offset of
            ``ptr`` from it, and its length in elements (``aclCreateTensor``'s storage base,
            ``offset`` and ``storageDims``).
        shape, strides: tuples; strides are in **elements**, may be negative or zero.
        dtype: a :class:`canna_dl.DType` (``dtype.acl`` is its ``aclDataType``).
        ndim, size, itemsize, nbytes (bytes of the elements).
        device: the :class:`acl_rt.Device`.
        stream: the :class:`acl_rt.Stream` whose pending work last wrote the memory, or None
            (settable: an op that writes the array on stream ``s`` sets ``a.stream = s``).
        owner: what keeps the memory alive (a :class:`acl_rt.DeviceBuffer`, or the storage
            holding an imported producer's DLPack tensor; the producer's deleter runs once, when
            the last view is gone).
        readonly: writes are refused (imported read-only data, legacy DLPack imports, broadcasts).

    Views (indexing with ints/slices/``None``/``...``, :meth:`reshape` when possible,
    :meth:`transpose`/:meth:`permute`/:attr:`T`, :meth:`squeeze`, :meth:`broadcast_to`) share
    memory; :meth:`contiguous`, :meth:`copy` and :meth:`numpy` copy, explicitly, and are counted
    in :func:`canna_dl.copy_stats`.
    """

    __slots__ = ()

    # -- DLPack (array API standard) ---------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (array API standard semantics, DLPack 1.3).

        Args:
            stream: the consumer's stream. For memory exported as ``kDLCPU`` only ``None`` (wait
                for pending work) or ``-1`` (do not wait) are valid. For NPU memory (discrete
                model): ``None`` or ``0`` = the device's default stream, ``-1`` = no ordering,
                an ``acl_rt.Stream``, an object with ``__npu_stream__``, or an ``aclrtStream``
                handle as int; the consumer stream is made to wait for the array's pending work
                (an event, the host does not block).
            max_version: the highest DLPack version the consumer reads. ``None`` or major < 1 →
                a legacy ``"dltensor"`` capsule (JAX and TensorFlow); else ``"dltensor_versioned"``
                with version (1, 3) and the ``READ_ONLY`` / ``IS_COPIED`` flags.
            dl_device: ``(device_type, device_id)`` to export to; ``(kDLCPU, 0)`` from NPU
                memory in the discrete model makes a host copy.
            copy: ``True`` always copies, ``False`` never does, ``None`` copies only when needed.

        Without ``copy=False``, canna also copies (counted, ``IS_COPIED`` set) a view with
        negative strides (PyTorch aborts on them: pytorch#188023) and, for legacy consumers, a
        view whose first element is not 64-byte aligned (TensorFlow aborts later, JAX copies:
        jax#29810; tests/test_dlpack_process.py shows the TensorFlow abort). Data is never exported with a ``byte_offset``.

        Raises:
            BufferError: the export needs a copy and ``copy=False``; an unsupported
                ``dl_device``; a stream for a CPU export.
            TypeError: malformed arguments.
        """
        if dl_device is None and copy is None and stream is None:
            cap = _export_fast(self, max_version)
            if cap is not NotImplemented:
                return cap
        return _export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple:
        """``(device_type, device_id)`` where ``__dlpack__()`` puts the data: ``(kDLCPU, 0)`` for
        host-coherent memory (the simulator's unified model), else ``(kDLExtDev, device id)``
        (12, as torch_npu uses for Ascend memory)."""
        st = self.storage
        if st.kind == 1 or _rt.cfg.unified:
            return _CPU
        return (DLDeviceType.kDLExtDev, st.device.device_id)

    # -- layout ---------------------------------------------------------------------------
    def is_contiguous(self) -> builtins.bool:
        """Compact row-major (C order); strides of size-1 dimensions are ignored."""
        return builtins.bool(self._flags & _AF_C)

    @property
    def is_c_contiguous(self) -> builtins.bool:
        return builtins.bool(self._flags & _AF_C)

    @property
    def is_f_contiguous(self) -> builtins.bool:
        return builtins.bool(self._flags & _native.AF_F_CONTIG)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    # -- views ------------------------------------------------------------------------------
    def __getitem__(self, key):
        """Basic indexing (ints, slices with any step, ``...``, ``None``): always a view.

        Raises:
            IndexError: an index out of range or too many indices.
            TypeError: advanced indexing (arrays, lists, booleans), which canna does not do here.
        """
        if not isinstance(key, tuple):
            key = (key,)
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices: array is {self.ndim}-dimensional, but {n_real} were indexed")
        if n_ell == 0:
            key = key + (Ellipsis,)
        shape, strides = [], []
        offset = self.offset
        dim = 0
        oshape, ostrides = self.shape, self.strides
        for k in key:
            if k is None:
                shape.append(1)
                strides.append(0)
            elif k is Ellipsis:
                for _ in range(self.ndim - n_real):
                    shape.append(oshape[dim])
                    strides.append(ostrides[dim])
                    dim += 1
            elif isinstance(k, slice):
                n, s = oshape[dim], ostrides[dim]
                start, stop, step = k.indices(n)
                length = len(range(start, stop, step))
                if length:
                    offset += start * s
                shape.append(length)
                strides.append(s * step)
                dim += 1
            elif _is_int(k):
                n = oshape[dim]
                i = operator.index(k)
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    raise IndexError(f"index {operator.index(k)} is out of bounds for axis {dim} with size {n}")
                offset += i * ostrides[dim]
                dim += 1
            else:
                raise TypeError(f"DeviceArray indices must be ints, slices, '...' or None, not "
                                f"{type(k).__name__} (advanced indexing is not supported)")
        return self._view(offset, tuple(shape), tuple(strides))

    def reshape(self, *shape, copy=None) -> "DeviceArray":
        """The same elements (C order) with a new shape; one dimension may be -1.

        A view when the layout allows it. Otherwise ``copy=None`` (default) makes a contiguous
        copy (counted, reason ``"contiguous"``) and ``copy=False`` raises ValueError.
        """
        if len(shape) == 1 and not _is_int(shape[0]):
            shape = shape[0]
        shape = list(_normalize_shape(shape, "reshape"))
        unknown = [i for i, d in enumerate(shape) if d == -1]
        if len(unknown) > 1 or any(d < -1 for d in shape):
            raise ValueError(f"reshape: invalid shape {tuple(shape)}")
        known = math.prod(d for d in shape if d != -1)
        if unknown:
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(shape)}")
            shape[unknown[0]] = self.size // known
        shape = tuple(shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
        if copy is True:
            return self.copy().reshape(shape)
        if self.size == 0:
            return self._view(self.offset, shape, _copy.c_strides(shape))
        strides = _reshape_strides(self.shape, self.strides, shape)
        if strides is not None:
            return self._view(self.offset, shape, strides)
        if copy is False:
            raise ValueError(f"reshape of this {self.strides}-strided view to {shape} needs a copy (copy=False)")
        return self.contiguous()._view(0, shape, _copy.c_strides(shape))

    def view(self, dtype) -> "DeviceArray":
        """The same memory read as another dtype of the same itemsize (no copy)."""
        dt = _as_dtype(dtype)
        if dt.itemsize != self.itemsize:
            raise ValueError(f"view: {dt} has itemsize {dt.itemsize}, {self.dtype} has {self.itemsize}")
        return self._view(self.offset, self.shape, self.strides, dt)

    def permute(self, *dims) -> "DeviceArray":
        """Reorder the dimensions (a view): ``a.permute(1, 0)``."""
        if len(dims) == 1 and not _is_int(dims[0]):
            dims = tuple(dims[0])
        dims = tuple(_axis(d, self.ndim, "permute") for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise ValueError(f"permute: {dims} is not a permutation of the {self.ndim} dimensions")
        return self._view(self.offset, tuple(self.shape[d] for d in dims), tuple(self.strides[d] for d in dims))

    def transpose(self, *axes) -> "DeviceArray":
        """NumPy's transpose: reverse the dimensions, or permute them by ``axes`` (a view)."""
        if not axes or (len(axes) == 1 and axes[0] is None):
            return self.permute(tuple(range(self.ndim - 1, -1, -1)))
        return self.permute(*axes)

    @property
    def T(self) -> "DeviceArray":
        """All dimensions reversed (a view)."""
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> "DeviceArray":
        """The last two dimensions swapped (a view)."""
        if self.ndim < 2:
            raise ValueError("mT needs at least 2 dimensions")
        return self.swapaxes(-1, -2)

    def swapaxes(self, a: int, b: int) -> "DeviceArray":
        a, b = _axis(a, self.ndim, "swapaxes"), _axis(b, self.ndim, "swapaxes")
        dims = list(range(self.ndim))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(dims)

    def squeeze(self, axis=None) -> "DeviceArray":
        """Drop size-1 dimensions (all, or those in ``axis``)."""
        if axis is None:
            axes = {i for i, n in enumerate(self.shape) if n == 1}
        else:
            axes = {_axis(a, self.ndim, "squeeze") for a in ((axis,) if _is_int(axis) else axis)}
            for a in axes:
                if self.shape[a] != 1:
                    raise ValueError(f"squeeze: dimension {a} has size {self.shape[a]}, not 1")
        keep = [i for i in range(self.ndim) if i not in axes]
        return self._view(self.offset, tuple(self.shape[i] for i in keep), tuple(self.strides[i] for i in keep))

    def expand_dims(self, axis: int) -> "DeviceArray":
        """A size-1 dimension inserted at ``axis`` (a view)."""
        ax = _axis(axis, self.ndim + 1, "expand_dims")
        shape = self.shape[:ax] + (1,) + self.shape[ax:]
        inner = self.strides[ax] * self.shape[ax] if ax < self.ndim else 1
        return self._view(self.offset, shape, self.strides[:ax] + (inner,) + self.strides[ax:])

    unsqueeze = expand_dims

    def broadcast_to(self, shape) -> "DeviceArray":
        """A read-only view with NumPy broadcasting to ``shape`` (zero strides)."""
        shape = _normalize_shape(shape, "broadcast_to")
        if len(shape) < self.ndim:
            raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        pad = len(shape) - self.ndim
        strides = []
        for i, n in enumerate(shape):
            if i < pad:
                strides.append(0)
                continue
            m, s = self.shape[i - pad], self.strides[i - pad]
            if m == n:
                strides.append(s)
            elif m == 1:
                strides.append(0)
            else:
                raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        return self._view(self.offset, shape, tuple(strides), None, True)

    def ravel(self) -> "DeviceArray":
        """1-D, C order (a view when possible, else a counted copy)."""
        return self.reshape(-1)

    flatten = ravel

    # -- copies -----------------------------------------------------------------------------
    def contiguous(self) -> "DeviceArray":
        """``self`` if C-contiguous, else a C-contiguous copy on the same device (counted,
        reason ``"contiguous"``)."""
        if self._flags & _AF_C:
            return self
        return _copy_of(self, "contiguous")

    def copy(self) -> "DeviceArray":
        """A C-contiguous copy on the same device (counted, reason ``"copy"``)."""
        return _copy_of(self, "copy")

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def numpy(self):
        """A NumPy array holding a copy of the data (explicit host copy, counted as ``"numpy"``).

        Waits for pending work on the array's stream. bfloat16 needs ``ml_dtypes``.

        Raises:
            ImportError: NumPy is not installed.
        """
        import numpy as np
        out = np.empty(self.shape, dtype=self.dtype.numpy)
        _copy.copy_into(_wrap_numpy_out(out, self), self)
        _copy.count("numpy", self.nbytes)
        return out

    def __array__(self, dtype=None, copy=None):
        from ._interop import to_numpy
        import numpy as np
        if copy:
            arr = self.numpy()
        else:
            arr = to_numpy(self, copy=copy)
        return arr if dtype is None else np.asarray(arr, dtype=dtype)

    def tobytes(self) -> bytes:
        """The elements in C order as bytes (a counted host copy, reason ``"numpy"``)."""
        from ._interop import _host_bytes
        return _host_bytes(self, "numpy")

    def tolist(self):
        """The elements as nested Python lists (scalars for 0-d); no NumPy needed."""
        data = self.tobytes()
        it, dt = self.itemsize, self.dtype
        flat = [dt.unpack(data[i:i + it]) for i in range(0, len(data), it)]
        if self.ndim == 0:
            return flat[0]
        if self.size == 0:
            return _empty_nested(self.shape)
        out = flat
        for n in reversed(self.shape[1:]):  # group the flat list from the innermost dimension out
            out = [out[i:i + n] for i in range(0, len(out), n)]
        return out

    def item(self):
        """The single element as a Python scalar.

        Raises:
            ValueError: the array does not have exactly one element.
        """
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element, this one has {self.size}")
        return self.dtype.unpack(self.reshape(()).tobytes())

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"the truth value of an array with {self.size} elements is ambiguous")
        return builtins.bool(self.item())

    def __int__(self):
        return int(self.item())

    def __float__(self):
        return float(self.item())

    def __complex__(self):
        return complex(self.item())

    # -- writes -----------------------------------------------------------------------------
    def fill(self, value) -> None:
        """Set every element to the Python scalar ``value`` (waits for pending work first).

        Raises:
            ValueError: the array is read-only.
            OverflowError: ``value`` does not fit the dtype.
        """
        _check_writable(self)
        if self.size == 0:
            return
        pattern = bytearray(self.dtype.pack(value))
        src = _native.import_buffer(DeviceArray, pattern)._view(0, self.shape, (0,) * self.ndim, self.dtype)
        _copy.copy_into(self, src)

    def __setitem__(self, key, value):
        """``a[key] = value``: a Python scalar, or anything :func:`canna_dl.asarray` takes that
        broadcasts to ``a[key]``'s shape with the same dtype (copied, counted as ``"setitem"``)."""
        view = self[key]
        _check_writable(view)
        if isinstance(value, (builtins.bool, int, float, complex)):
            view.fill(value)
            return
        from ._interop import asarray
        src = asarray(value)
        if src.dtype is not view.dtype:
            raise TypeError(f"cannot assign {src.dtype} values to a {view.dtype} array (cast them first)")
        src = src.broadcast_to(view.shape)
        _copy.copy_into(view, src)
        _copy.count("setitem", view.nbytes)

    # -- streams ------------------------------------------------------------------------------
    def record_stream(self, stream) -> None:
        """Note that work on ``stream`` writes this memory: consumers wait for it, and a pool
        buffer is freed in order on it."""
        import acl_rt
        if not isinstance(stream, acl_rt.Stream):
            stream = _rt.accept_stream(stream, None, "record_stream")
        self.storage.stream = stream
        owner = self.owner
        if isinstance(owner, acl_rt.DeviceBuffer):
            owner.record_stream(stream)

    def synchronize(self) -> None:
        """Wait for the pending work that writes this array."""
        _copy.sync_for_host(self)

    # -- display -------------------------------------------------------------------------------
    def __repr__(self):
        dev = self.device
        where = f"npu:{dev.device_id}" if dev is not None else "host"
        extra = f", dtype={self.dtype.name}, device={where}"
        if not self.is_contiguous():
            extra += f", strides={self.strides}"
        if self.readonly:
            extra += ", readonly"
        try:
            body = _values_repr(self)
        except Exception:
            body = None
        if body is None:
            return f"DeviceArray(shape={self.shape}{extra}, ptr={self.ptr:#x})"
        return f"DeviceArray({body}{extra})"

    __str__ = __repr__


def _empty_nested(shape):
    if len(shape) == 1 or shape[0] == 0:
        return []
    return [_empty_nested(shape[1:]) for _ in range(shape[0])]


def _values_repr(a):
    if a.size > 1_000_000:
        return None
    try:
        import numpy as np
    except ImportError:
        return repr(a.tolist()) if a.size <= 64 else None
    if a.dtype.name == "bfloat16":
        try:
            import ml_dtypes  # noqa: F401
        except ImportError:
            return None
    st = a.storage
    if st.kind == 1 or _rt.cfg.unified:
        from ._interop import _numpy_view
        _copy.sync_for_host(a)
        arr = _numpy_view(a)
    else:
        arr = np.empty(a.shape, dtype=a.dtype.numpy)
        _copy.copy_into(_wrap_numpy_out(arr, a), a)
        _copy.count("repr", a.nbytes)
    return np.array2string(arr, separator=", ", prefix="DeviceArray(")


def _check_writable(a):
    if a.readonly:
        raise ValueError("assignment destination is read-only (imported read-only, through a legacy DLPack "
                         "capsule, or a broadcast view)")


def _wrap_numpy_out(out, like):
    """A host DeviceArray viewing the fresh C-contiguous NumPy array ``out``."""
    flat = _native.import_buffer(DeviceArray, memoryview(out.reshape(-1).view("u1")) if out.size else bytearray(0))
    return flat._view(0, like.shape, _copy.c_strides(like.shape), like.dtype)


def _copy_of(a, reason):
    out = _copy.new_device_array(DeviceArray, a.shape, a.dtype, a.device if a.device is not None else None,
                                 a.stream)
    _copy.copy_into(out, a)
    _copy.count(reason, a.nbytes)
    return out


def _resolve_stream(stream, a):
    """The consumer stream of a device export, as an acl_rt.Stream (None and 0: the device's
    default stream; raw handles and ``__npu_stream__`` objects are taken, see
    :func:`acl_rt.lowlevel.accept_stream`)."""
    if stream is None:
        return a.device.default_stream
    if type(stream) is _rt.Stream:   # any device: the wait works across devices
        return stream
    return _rt.accept_stream(stream, a.device, "__dlpack__", handles=True)


def _export(a, stream, max_version, dl_device, copy):
    """The general __dlpack__ path (device choice, stream ordering, copies)."""
    if max_version is not None:
        if (not isinstance(max_version, tuple) or len(max_version) != 2
                or not all(_is_int(v) for v in max_version)):
            raise TypeError(f"__dlpack__: max_version must be None or a (major, minor) tuple of ints, "
                            f"not {max_version!r}")
    versioned = max_version is not None and max_version[0] >= 1
    if copy is not None and not isinstance(copy, builtins.bool):
        raise TypeError(f"__dlpack__: copy must be None, True or False, not {copy!r}")
    cfg = _rt.ensure()
    st = a.storage
    on_host = st.kind == 1 or cfg.unified
    src_dev = _CPU if on_host else (DLDeviceType.kDLExtDev, st.device.device_id)
    if dl_device is None:
        target = src_dev
    else:
        try:
            t, i = dl_device
            t, i = operator.index(t), operator.index(i)
        except (TypeError, ValueError):
            raise TypeError(f"__dlpack__: dl_device must be a (device_type, device_id) tuple, not {dl_device!r}") from None
        if t == 1:
            target = _CPU
        elif t in (12, 21) and st.device is not None and i == st.device.device_id:
            target = src_dev if not on_host else (DLDeviceType(t), i)
        else:
            raise BufferError(f"__dlpack__: cannot export to DLPack device ({t}, {i}); this array is on "
                              f"{src_dev} (kDLCPU = (1, 0) is always possible)")
    to_cpu = target[0] == 1
    reason = None
    if copy is True:
        reason = "dlpack_copy"
    elif to_cpu and not on_host:
        if copy is False:
            raise BufferError("__dlpack__: the array is in NPU memory (discrete memory model); a CPU consumer "
                              "needs a host copy but copy=False")
        reason = "to_host"
    elif copy is None and a._flags & _AF_NEG:
        reason = "negative_strides"
    elif copy is None and not versioned and a.size and a.ptr % _native.ALIGN:
        reason = "unaligned_legacy"
    # stream ordering
    if on_host or to_cpu:
        if stream is not None and stream != -1:
            raise BufferError(f"__dlpack__: stream={stream!r} given for a CPU export; only None (the producer "
                              "synchronizes) or -1 are valid for kDLCPU (array API standard)")
        if stream is None or reason is not None:
            _copy.sync_for_host(a)
    elif stream != -1:
        consumer = _resolve_stream(stream, a)  # validates the argument even when nothing is pending
        if st.stream is not None:
            _rt.stream_wait(consumer, st.stream)
    flags = 0
    if reason is not None:
        if to_cpu:
            out = _copy.new_host_array(DeviceArray, a.shape, a.dtype) if not on_host else \
                _copy.new_device_array(DeviceArray, a.shape, a.dtype, a.device)
        else:
            out = _copy.new_device_array(DeviceArray, a.shape, a.dtype, a.device)
        _copy.copy_into(out, a)
        _copy.sync_for_host(out)
        _copy.count(reason, a.nbytes)
        a = out
        flags |= _IS_COPIED
    elif a.readonly:
        flags |= _READ_ONLY
    dev_type, dev_id = (1, 0) if to_cpu else target
    return _export_capsule(a, versioned, flags if versioned else 0, int(dev_type), int(dev_id))
