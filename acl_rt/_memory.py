"""Device and host memory: buffers, memory resources, copies and fills.

A :class:`DeviceBuffer` is a range of device memory owned by a :class:`MemoryResource` (by
default each device's caching pool, :class:`acl_rt.MemoryPool`; :class:`DeviceMemoryResource` is the
raw ``aclrtMalloc`` one). It remembers the stream it was allocated on and the other streams that
used it (:meth:`DeviceBuffer.record_stream`), so it is freed in stream order; it copies to and from host objects (anything with the buffer protocol: bytes,
bytearray, memoryview, NumPy arrays, :class:`HostBuffer`) and other device buffers, and fills.

Host memory in copies: AscendCL copies from pageable host memory are not truly asynchronous, and
the host object may change or die as soon as the call returns, so copies with a pageable host side
wait for their stream before returning. Copies with a :class:`HostBuffer` (page-locked,
``aclrtMallocHost``) side are asynchronous; synchronize the stream before reading the result.
"""
from __future__ import annotations

import abc
import threading
import warnings

from . import _keepalive
from . import _runtime as rt
from ._constants import ErrorCode as E, MemcpyKind
from ._device import Device
from ._errors import InvalidArgumentError, InvalidHandleError
from ._lib import backend, ffi
from ._stream import Event, Stream, _resolve_stream, accept_stream, drain

__all__ = ["MemoryResource", "DeviceMemoryResource", "DeviceBuffer", "HostBuffer", "alloc", "alloc_host"]

# aclrtMemcpyKind
_H2H, _H2D, _D2H, _D2D = (int(k) for k in (MemcpyKind.ACL_MEMCPY_HOST_TO_HOST, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE,
                                           MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE))
_MAX_ALLOC = 1 << 62


def _check_nbytes(nbytes, api, *, allow_zero=False) -> int:
    if isinstance(nbytes, bool) or not hasattr(nbytes, "__index__"):
        raise TypeError(f"{api}: size must be an int number of bytes, not {type(nbytes).__name__}")
    n = nbytes.__index__()
    if n < 0 or (n == 0 and not allow_zero):
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                   f"size must be {'>= 0' if allow_zero else '> 0'} bytes, got {n}")
    if n > _MAX_ALLOC:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api, f"size {n} bytes is larger than any device")
    return n


class MemoryResource(abc.ABC):
    """Where device memory comes from (after ``cuda.core``'s ``MemoryResource``)."""

    @property
    @abc.abstractmethod
    def device(self) -> Device:
        """The device whose memory this resource hands out."""

    @abc.abstractmethod
    def allocate(self, nbytes: int, *, stream: Stream | None = None) -> "DeviceBuffer":
        """A new buffer of ``nbytes`` bytes, usable in order on ``stream``."""

    @abc.abstractmethod
    def deallocate(self, ptr: int, nbytes: int, *, stream: Stream | None = None) -> None:
        """Give back memory obtained from :meth:`allocate`; ``stream`` is the stream it was used on
        (the memory may be reused only after that stream's queued work)."""

    def _record_stream(self, buf: "DeviceBuffer", stream: Stream) -> None:
        """``buf`` is also used on ``stream`` (see :meth:`DeviceBuffer.record_stream`). The default
        remembers the stream on the buffer; :meth:`DeviceBuffer.close` waits for it before
        :meth:`deallocate`. Stream-ordered resources (the pool) override this."""
        uses = buf._uses
        if uses is None:
            buf._uses = [stream]
        elif not any(s == stream for s in uses):
            uses.append(stream)


class DeviceMemoryResource(MemoryResource):
    """Raw device memory straight from ``aclrtMalloc`` / ``aclrtFree`` (no caching).

    Each allocation is a runtime call (tens of microseconds on a device); the caching pool is the
    fast path. Freeing first waits for the buffer's last stream, so queued work never touches
    freed memory."""

    def __init__(self, device=None):
        self._device = Device(device)

    @property
    def device(self) -> Device:
        return self._device

    def allocate(self, nbytes: int, *, stream: Stream | None = None) -> "DeviceBuffer":
        api = "acl_rt.alloc"
        n = _check_nbytes(nbytes, api)
        stream = _resolve_stream(stream, self._device, api)
        if _stale:
            free_stale()
        rt.activate(self._device._id, api)
        cell = ffi.new("void **")
        rt.check(backend().lib.aclrtMalloc(cell, n, 0), "aclrtMalloc")  # ACL_MEM_MALLOC_HUGE_FIRST
        return DeviceBuffer._wrap(int(ffi.cast("uintptr_t", cell[0])), n, self, stream)

    def deallocate(self, ptr: int, nbytes: int, *, stream: Stream | None = None) -> None:
        if stream is not None and stream._alive_quiet():
            drain(stream)
        rt.activate(self._device._id, "aclrtFree")
        rt.check(backend().lib.aclrtFree(ffi.cast("void *", ptr)), "aclrtFree")

    def _release_stale(self, ptr: int) -> None:
        free_stale(self._device._id, ptr)

    def __repr__(self):
        return f"<acl_rt.DeviceMemoryResource device={self._device._id}>"


#: (device id, pointer) of device allocations of a finalized session that nothing uses any more,
#: freed at the next init. Only the simulator keeps allocations across ``aclFinalize`` (its
#: README, "Memory"); a real device releases them when it is reset.
_stale: list = []
_stale_lock = threading.Lock()


def free_stale(device_id: int | None = None, ptr: int | None = None) -> None:
    """Queue ``ptr`` (if given) and ``aclrtFree`` every queued stale allocation when the runtime
    is initialized (else they wait for the next init). Never raises."""
    try:
        b = backend()
        if not b.is_sim:
            return
        with _stale_lock:
            if ptr is not None:
                _stale.append((device_id, ptr))
            if not rt._state.ready or not _stale:
                return
            todo = _stale[:]
            _stale.clear()
        for dev, p in todo:
            rt.activate(dev, "acl_rt (freeing memory of a finalized session)")
            b.lib.aclrtFree(ffi.cast("void *", p))
        b.lib.aclGetRecentErrMsg()
    except Exception:
        pass


def _host_view(obj, api, *, writable):
    """(cdata pointer, nbytes, keepalive) of a C-contiguous buffer-protocol object."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{api}: expected a DeviceBuffer, a HostBuffer or an object supporting the "
                        f"buffer protocol (bytes, bytearray, NumPy array, ...), not {type(obj).__name__}") from None
    if not mv.c_contiguous:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api, "host buffer must be C-contiguous")
    if writable and mv.readonly:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api, "host destination is read-only")
    if mv.nbytes == 0:
        return ffi.NULL, 0, mv
    return ffi.from_buffer(mv, require_writable=writable), mv.nbytes, mv


def _other_side(obj, api, *, writable):
    """(pointer, nbytes, keepalive, sync) of the host or device side of a copy: a DeviceBuffer or
    HostBuffer (asynchronous), or a C-contiguous buffer-protocol object (``sync``: the copy must be
    complete before returning, the object may change as soon as we return)."""
    if isinstance(obj, (DeviceBuffer, HostBuffer)):
        return obj._cptr(api), obj._size, obj, False
    p, n, keep = _host_view(obj, api, writable=writable)
    return p, n, keep, True


class DeviceBuffer:
    """A range of device memory (no public constructor: use :func:`acl_rt.alloc`).

    Attributes:
        ptr: the device address (int).
        size / nbytes: its length in bytes (as requested).
        device: the :class:`Device` it lives on.
        stream: the stream it was allocated on (it is freed in order on that stream).
    """

    __slots__ = ("_ptr", "_size", "_mr", "_stream", "_gen", "_uses", "__weakref__")

    def __init__(self, *a, **k):
        raise TypeError("device buffers are created with acl_rt.alloc() or a MemoryResource")

    @classmethod
    def _wrap(cls, ptr: int, size: int, mr: MemoryResource, stream: Stream) -> "DeviceBuffer":
        self = object.__new__(cls)
        self._ptr = ptr
        self._size = size
        self._mr = mr
        self._stream = stream
        self._gen = rt.generation()
        self._uses = None
        return self

    # -- identity --------------------------------------------------------------------------------
    @property
    def ptr(self) -> int:
        """Device address of the first byte (int)."""
        self._live("DeviceBuffer.ptr")
        return self._ptr

    handle = ptr

    @property
    def size(self) -> int:
        return self._size

    nbytes = size

    def __len__(self):
        return self._size

    @property
    def device(self) -> Device:
        return self._mr.device

    @property
    def memory_resource(self) -> MemoryResource:
        return self._mr

    @property
    def stream(self) -> Stream:
        return self._stream

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def __repr__(self):
        if self._ptr is None:
            return f"<acl_rt.DeviceBuffer (freed) size={self._size}>"
        return f"<acl_rt.DeviceBuffer ptr={self._ptr:#x} size={self._size} device={self.device.device_id}>"

    def _live(self, api) -> int:
        if self._ptr is None:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api, "the buffer was freed")
        if self._gen != rt.generation():
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api,
                                     "the buffer was allocated before acl_rt.finalize() and is no longer valid")
        return self._ptr

    def _cptr(self, api):
        return ffi.cast("void *", self._live(api))

    def record_stream(self, stream: Stream) -> None:
        """Mark the buffer as used by work queued on ``stream`` (PyTorch's
        ``Tensor.record_stream``): when the buffer is freed, its memory is not reused before the
        work queued on ``stream`` up to the free has completed. The pool records an event on each
        such stream at free time and polls it lazily (no synchronize); the raw resource waits for
        the streams. :meth:`copy_from`, :meth:`copy_to` and :meth:`fill` call it for the stream
        they use; call it yourself when other code (a kernel, another library) uses :attr:`ptr` on
        another stream.

        Raises:
            TypeError: ``stream`` is not a stream (an :class:`acl_rt.Stream`, or an object with
                ``__npu_stream__``: see :func:`acl_rt.lowlevel.accept_stream`).
            InvalidHandleError: the buffer was freed.
        """
        if not isinstance(stream, Stream):
            stream = accept_stream(stream, None, "DeviceBuffer.record_stream")
        self._live("DeviceBuffer.record_stream")
        if stream._h is self._stream._h or stream == self._stream:
            return
        self._mr._record_stream(self, stream)

    # -- copies ----------------------------------------------------------------------------------
    def copy_from(self, src, *, stream: Stream | None = None) -> None:
        """Copy ``src`` into the start of this buffer: a :class:`DeviceBuffer`, a
        :class:`HostBuffer`, or any C-contiguous buffer-protocol object. ``len(src)`` bytes are
        copied; it may be shorter than this buffer but not longer.

        Raises:
            InvalidArgumentError: ``src`` is larger than this buffer, or not C-contiguous.
            InvalidHandleError: either buffer was freed.
        """
        api = "DeviceBuffer.copy_from"
        dst = self._cptr(api)
        s = _resolve_stream(stream, self.device, api)
        sp, n, keep, sync = _other_side(src, api, writable=False)
        if n > self._size:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"source is {n} bytes but the destination buffer has only {self._size}")
        self._use_on(s, keep)
        _memcpy(dst, self._size, sp, n, _D2D if isinstance(keep, DeviceBuffer) else _H2D, s, api, sync, keep)

    def copy_to(self, dst, *, stream: Stream | None = None) -> None:
        """Copy the start of this buffer into ``dst`` (a :class:`DeviceBuffer`, :class:`HostBuffer`
        or writable C-contiguous buffer-protocol object); ``len(dst)`` bytes are copied, which may
        be fewer than this buffer holds but not more.

        Raises:
            InvalidArgumentError: ``dst`` is larger than this buffer, read-only or not contiguous.
        """
        api = "DeviceBuffer.copy_to"
        src = self._cptr(api)
        s = _resolve_stream(stream, self.device, api)
        dp, n, keep, sync = _other_side(dst, api, writable=True)
        if n > self._size:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"destination is {n} bytes but this buffer has only {self._size}")
        self._use_on(s, keep)
        _memcpy(dp, n, src, n, _D2D if isinstance(keep, DeviceBuffer) else _D2H, s, api, sync, keep)

    def _use_on(self, s: Stream, other) -> None:
        """Record ``s`` on this buffer (and on ``other`` when it is a device buffer) for stream-ordered frees."""
        if s._h is not self._stream._h:
            self.record_stream(s)
        if isinstance(other, DeviceBuffer) and other._stream._h is not s._h:
            other.record_stream(s)

    def tobytes(self, *, stream: Stream | None = None) -> bytes:
        """The buffer's contents as ``bytes`` (waits for ``stream``)."""
        out = bytearray(self._size)
        self.copy_to(out, stream=stream)
        return bytes(out)

    def fill(self, value: int, *, stream: Stream | None = None) -> None:
        """Set every byte to ``value`` (0..255), in order on ``stream`` (``aclrtMemsetAsync``)."""
        api = "DeviceBuffer.fill"
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{api}: value must be an int byte value, not {type(value).__name__}")
        v = value.__index__()
        if not 0 <= v <= 255:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api, f"value must be a byte (0..255), got {v}")
        p = self._cptr(api)
        s = _resolve_stream(stream, self.device, api)
        if s._h is not self._stream._h:
            self.record_stream(s)
        rt.check(backend().lib.aclrtMemsetAsync(p, self._size, v, self._size, s._handle(api)), "aclrtMemsetAsync")

    # -- lifetime --------------------------------------------------------------------------------
    def close(self, *, stream: Stream | None = None) -> None:
        """Give the memory back to its resource, in stream order: after the work queued so far on
        the stream it was allocated on, on every stream passed to :meth:`record_stream`, and on
        ``stream`` if given. Idempotent; using the buffer afterwards raises InvalidHandleError."""
        if stream is not None and not isinstance(stream, Stream):
            stream = accept_stream(stream, None, "DeviceBuffer.close")
        ptr = self._ptr
        if ptr is None:
            return
        if stream is not None and stream is not self._stream:
            self.record_stream(stream)
        self._ptr = None
        st = rt._state
        if self._gen != st.generation or not st.ready:
            # memory of a finalized session, kept while this buffer lived: give it back at the
            # next init (the simulator keeps allocations across aclFinalize)
            stale = getattr(self._mr, "_release_stale", None)
            if stale is not None:
                stale(ptr)
            return
        uses = self._uses
        if uses is not None:   # a resource that is not stream-ordered: wait for the other streams
            self._uses = None
            for s in uses:
                if s._alive_quiet():
                    drain(s)
        self._mr.deallocate(ptr, self._size, stream=self._stream)

    free = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __copy__(self, *memo):
        raise TypeError("acl_rt.DeviceBuffer owns device memory and cannot be copied "
                        "(allocate another one and use copy_from)")

    __deepcopy__ = __copy__

    def __reduce__(self):
        raise TypeError("acl_rt.DeviceBuffer owns device memory and cannot be pickled")

    def __del__(self):
        try:
            if self._ptr is not None:
                self.close()
        except Exception as e:
            try:
                warnings.warn(f"acl_rt: could not free device buffer ({e}); the memory is leaked", ResourceWarning)
            except Exception:
                pass


def _memcpy(dst, dst_max, src, n, kind, stream: Stream, api, sync, keep):
    """Copy in order on ``stream``. ``sync`` (a pageable host side): wait for the stream's queued
    work, then copy on this thread (``aclrtMemcpy``), so the host object is done with on return."""
    if n == 0:
        return
    h = stream._handle(api)
    if sync:
        stream._sync_raw()
        rt.check(backend().lib.aclrtMemcpy(dst, dst_max, src, n, kind), "aclrtMemcpy")
    else:
        rt.check(backend().lib.aclrtMemcpyAsync(dst, dst_max, src, n, kind, h), "aclrtMemcpyAsync")
        if isinstance(keep, HostBuffer):
            _keepalive.hold(h, keep._cdata)   # the memory itself, even if keep.close() is called


# Host memory in an asynchronous copy must outlive the copy even when the user drops the last
# reference right after queueing it: acl_rt's one keep-alive holds it until the stream has run
# the copy (acl_rt/_keepalive.py).

def pending_host_copies() -> int:
    """How many objects are still held until their stream passes (the host side of asynchronous
    copies, and kernel operands; after dropping the completed ones)."""
    return _keepalive.pending()


class HostBuffer:
    """Page-locked host memory (``aclrtMallocHost``), the partner of asynchronous copies.

    ``memoryview(buf.view())`` / ``numpy.frombuffer(buf.view(), dtype)`` read and write it without
    a copy. The memory is returned to the runtime when the buffer and every view of it are gone.
    """

    __slots__ = ("_cdata", "_size", "__weakref__")

    def __init__(self, *a, **k):
        raise TypeError("host buffers are created with acl_rt.alloc_host()")

    @classmethod
    def _create(cls, nbytes: int) -> "HostBuffer":
        api = "acl_rt.alloc_host"
        n = _check_nbytes(nbytes, api)
        rt.activate(rt.current_device_id(), api)
        cell = ffi.new("void **")
        lib = backend().lib
        rt.check(lib.aclrtMallocHost(cell, n), "aclrtMallocHost")
        gen = rt.generation()

        def release(p, _lib=lib, _gen=gen):
            if _gen == rt.generation() and rt.is_initialized():
                _lib.aclrtFreeHost(p)

        self = object.__new__(cls)
        self._cdata = ffi.gc(ffi.cast("char *", cell[0]), release, size=n)
        self._size = n
        return self

    @property
    def ptr(self) -> int:
        return int(ffi.cast("uintptr_t", self._cptr("HostBuffer.ptr")))

    @property
    def size(self) -> int:
        return self._size

    nbytes = size

    def __len__(self):
        return self._size

    def _cptr(self, api):
        if self._cdata is None:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api, "the host buffer was closed")
        return self._cdata

    def view(self) -> memoryview:
        """A writable ``memoryview`` of the whole buffer (keeps the memory alive)."""
        return memoryview(ffi.buffer(self._cptr("HostBuffer.view"), self._size))

    def close(self) -> None:
        """Drop this object's reference; the memory is freed once no view and no queued
        asynchronous copy uses it either."""
        self._cdata = None

    def __copy__(self, *memo):
        raise TypeError("acl_rt.HostBuffer owns page-locked memory and cannot be copied")

    __deepcopy__ = __copy__

    def __reduce__(self):
        raise TypeError("acl_rt.HostBuffer owns page-locked memory and cannot be pickled")

    def __repr__(self):
        state = f"ptr={self.ptr:#x} " if self._cdata is not None else "(closed) "
        return f"<acl_rt.HostBuffer {state}size={self._size}>"


def alloc(nbytes: int, *, stream: Stream | None = None, device=None) -> DeviceBuffer:
    """``nbytes`` bytes of device memory from the device's memory resource (by default its caching
    pool, :class:`acl_rt.MemoryPool`), usable in order on ``stream``.

    Args:
        nbytes: size in bytes (int > 0).
        stream: the stream that will use it (default: the current stream of the device).
        device: the device (default: ``stream``'s device when a stream is given, else the current
            device).

    Fresh memory is not zeroed (the simulator fills new device memory with a NaN pattern, ``0x7FFF``
    per 16 bits; memory the pool reuses holds whatever was written before).

    Raises:
        TypeError: ``nbytes`` is not an int.
        InvalidArgumentError: ``nbytes`` <= 0, or ``stream`` is on another device than ``device``.
        OutOfMemoryError: the device (or the pool's memory limit) cannot hold it, even after the
            pool released its cache.
    """
    if device is None:
        if type(stream) is Stream:
            dev = stream._device
        else:   # the calling thread's current device, without Device()'s validation (already valid)
            dev = Device._instances.get(getattr(rt._tls, "device_id", 0)) or Device(None)
        mr = dev._mr
        if mr is None:
            mr = dev.memory_resource
        return mr.allocate(nbytes, stream=stream)
    return Device(device).memory_resource.allocate(nbytes, stream=stream)


def alloc_host(nbytes: int) -> HostBuffer:
    """``nbytes`` of page-locked host memory for asynchronous copies (``aclrtMallocHost``)."""
    return HostBuffer._create(nbytes)
