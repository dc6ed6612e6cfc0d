"""The caching allocator: a stream-ordered memory pool per device (DESIGN.md §4.1).

Every :func:`acl_rt.alloc` goes through the current device's :class:`MemoryPool` (unless
``CANNA_NO_MEMORY_CACHING=1``). The bookkeeping is in C (``acl_rt/_native/pool.c``): sizes are
rounded up to 512 B; requests up to 1 MiB come from 2 MiB segments, requests below 10 MiB from
20 MiB segments, larger ones from segments rounded up to 2 MiB (PyTorch's CUDA caching allocator
rules); free blocks are found by best fit, split, and merged with free neighbours when freed
(CuPy's and PyTorch's pools). Reuse is stream-ordered:

- a block freed on the stream it was allocated on is reused at once by later work on that stream;
- another stream reuses it only once the first stream has no queued work left;
- a block that other streams also used (:meth:`DeviceBuffer.record_stream`) waits for events
  recorded on those streams at free time; they are polled lazily, never with a device-wide
  synchronize (PyTorch's ``record_stream`` semantics).

When an allocation does not fit (the device is full or the pool's limit would be exceeded), the
pool climbs PyTorch's / CuPy's ladder: it waits for the streams holding cached blocks and returns
every whole free segment to the device, retries, runs ``gc.collect()`` (buffers only garbage
holds), releases again, retries, and only then raises :class:`OutOfMemoryError` with the sizes
and the runtime's own reason for the last refusal.

Statistics use PyTorch's exact key schema (``torch.cuda.memory_stats``): see :func:`memory_stats`.
"""
from __future__ import annotations

import gc
import math
import os
import sys
import threading
import time
import weakref

from . import _native
from . import _runtime as rt
from ._constants import ErrorCode as E, EventRecordedStatus, StreamStatus
from ._device import Device
from ._errors import _OOM, InvalidArgumentError, InvalidHandleError, OutOfMemoryError, error_class
from ._lib import backend, ffi
from ._memory import DeviceBuffer, DeviceMemoryResource, MemoryResource, _check_nbytes, free_stale
from ._stream import Stream, _close_hooks, accept_stream, current_stream

_tls = rt.thread_state()
_state = rt._state

__all__ = ["MemoryPool", "MemoryHook", "DebugPrintHook", "memory_stats", "memory_stats_as_nested_dict",
           "memory_summary", "memory_snapshot", "memory_allocated", "max_memory_allocated",
           "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
           "reset_accumulated_memory_stats", "empty_cache", "set_memory_limit", "get_memory_limit"]

_FN_NAMES = ("aclrtMalloc", "aclrtFree", "aclrtGetCurrentContext", "aclrtSetCurrentContext",
             "aclrtCreateEventWithFlag", "aclrtRecordEvent", "aclrtQueryEventStatus", "aclrtDestroyEvent",
             "aclrtStreamQuery", "aclGetRecentErrMsg")
_OOM_CODES = _OOM   # the codes OutOfMemoryError stands for
_MAX_ALLOC = 1 << 62
_new = object.__new__

# pools of the current runtime session, by device id
_pools: dict[int, "MemoryPool"] = {}
_pools_lock = threading.RLock()
_all_pools: "weakref.WeakSet[MemoryPool]" = weakref.WeakSet()   # every pool (stream-close notices)


def _parse_limit(text: str, total: int, source: str) -> int:
    """Bytes from ``"1073741824"``, ``"512M"``, ``"2G"``, ``"50%"`` or a fraction ``"0.5"``."""
    s = text.strip()
    err = InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "acl_rt.set_memory_limit",
                               f"{source}={text!r}: expected bytes (e.g. 1073741824, 512M, 2G), a percentage "
                               "of the device memory (50%) or a fraction in (0, 1] (0.5)")
    try:
        if s.endswith("%"):
            pct = float(s[:-1])
            if not 0 < pct <= 100:
                raise err
            return int(total * pct / 100)
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        u = s.upper().rstrip("B").rstrip("I")
        if u and u[-1] in mult:
            v = int(u[:-1]) * mult[u[-1]]
        elif "." in s or "e" in s.lower():
            f = float(s)
            if not 0 < f <= 1:
                raise err
            return int(total * f)
        else:
            v = int(s)
    except ValueError:
        raise err from None
    if v <= 0:
        raise err
    return _check_limit(v, f"{source}={text!r}")


def _check_limit(nbytes: int, what: str) -> int:
    """``nbytes`` if it is a limit the pool can hold (at most ``_MAX_ALLOC`` bytes, more than any
    device has), else an InvalidArgumentError naming ``what`` and the maximum."""
    if nbytes > _MAX_ALLOC:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "acl_rt.set_memory_limit",
                                   f"{what}: a limit of {nbytes} bytes is too large (at most {_MAX_ALLOC} bytes, "
                                   "2**62; use None for no limit)")
    return nbytes


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------------------------------
# memory hooks (CuPy's cupy.cuda.MemoryHook model)

_hook_tls = threading.local()
_hooks_active = 0   # number of hooks entered in any thread (fast check on the hot path)
_hooks_lock = threading.Lock()


def _thread_hooks() -> list:
    h = getattr(_hook_tls, "hooks", None)
    if h is None:
        h = _hook_tls.hooks = []
    return h


class MemoryHook:
    """Base class of allocation hooks (after CuPy's ``cupy.cuda.MemoryHook``).

    ``with hook:`` installs it for the calling thread; subclasses override any of the methods below
    (each gets keyword arguments; sizes in bytes, pointers as ints):

    - ``malloc_preprocess(device_id, size, mem_size)`` / ``malloc_postprocess(device_id, size,
      mem_size, mem_ptr)``: a pool allocation of ``size`` bytes (``mem_size``: the rounded block);
    - ``free_preprocess(device_id, mem_size, mem_ptr)`` / ``free_postprocess(...)``: a buffer
      given back to the pool;
    - ``alloc_postprocess(device_id, mem_size, mem_ptr)``: the pool took a new segment from the
      device (``aclrtMalloc``); ``dealloc_postprocess(device_id, mem_size, mem_ptr)``: it returned
      one (``aclrtFree``).

    An exception a hook raises propagates to the caller of ``alloc`` / ``close`` (as in CuPy);
    a buffer whose ``free_preprocess`` raised is still given back to the pool.

    Hooks cost nothing when none is installed.
    """

    name = "MemoryHook"

    def __enter__(self):
        global _hooks_active
        _thread_hooks().append(self)
        with _hooks_lock:
            _hooks_active += 1
            for pool in list(_pools.values()):
                pool._core.set_trace(True)
        return self

    def __exit__(self, *exc):
        global _hooks_active
        hooks = _thread_hooks()
        if self in hooks:
            hooks.remove(self)
        with _hooks_lock:
            _hooks_active -= 1
            if _hooks_active == 0:
                for pool in list(_pools.values()):
                    pool._core.set_trace(False)
        return False

    def malloc_preprocess(self, **kw): pass
    def malloc_postprocess(self, **kw): pass
    def free_preprocess(self, **kw): pass
    def free_postprocess(self, **kw): pass
    def alloc_postprocess(self, **kw): pass
    def dealloc_postprocess(self, **kw): pass


class DebugPrintHook(MemoryHook):
    """Prints one JSON line per pool event to ``file`` (default ``sys.stdout``), like CuPy's."""

    name = "DebugPrintHook"

    def __init__(self, file=None, flush=True):
        self.file = file
        self.flush = flush

    def _print(self, hook, **kw):
        import json
        f = self.file if self.file is not None else sys.stdout
        f.write(json.dumps({"hook": hook, **kw}) + "\n")
        if self.flush:
            f.flush()

    def malloc_postprocess(self, **kw): self._print("malloc", **kw)
    def free_postprocess(self, **kw): self._print("free", **kw)
    def alloc_postprocess(self, **kw): self._print("alloc", **kw)
    def dealloc_postprocess(self, **kw): self._print("dealloc", **kw)


def _call_hooks(method: str, **kw):
    for h in list(_thread_hooks()):
        getattr(h, method)(**kw)


# ------------------------------------------------------------------------------------------------
# the pool


class MemoryPool(MemoryResource):
    """A device's caching, stream-ordered memory pool (the default :attr:`Device.memory_resource`).

    Use :func:`acl_rt.alloc` (or ``Device(i).memory_resource``) rather than constructing one:
    each device has one pool per runtime session.

    Raises (from :meth:`allocate`):
        TypeError / InvalidArgumentError: a size that is not a positive int, or absurdly large.
        OutOfMemoryError: the request does not fit even after the cache was released.
    """

    def __init__(self, device=None):
        dev = Device(device)
        api = "acl_rt.MemoryPool"
        st = rt.activate(dev._id, api)
        b = backend()
        raw = b.lib._lib
        fns = {}
        for name in _FN_NAMES:
            getattr(b.lib, name)   # NotSupportedError naming the function when the library lacks it
            fns[name] = int(ffi.cast("uintptr_t", ffi.addressof(raw, name)))
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        rt.check(b.lib.aclrtGetMemInfo(1, free, total), "aclrtGetMemInfo")
        self._total = int(total[0])
        self._device = dev
        self._id = dev._id
        self._gen = rt.generation()
        self._core = _native.Pool(fns, int(ffi.cast("uintptr_t", st.ctx)), dev._id, self._total)
        self._limit = 0
        self._default = None
        self._orphans = None   # after finalize: segment base -> addresses of its live blocks
        with _pools_lock:
            _all_pools.add(self)
        free_stale()   # memory the previous session left to its live buffers, since freed
        env = os.environ.get("CANNA_MEMORY_LIMIT", "").strip()
        if env:
            self._set_limit_bytes(_parse_limit(env, self._total, "CANNA_MEMORY_LIMIT"))
        if _hooks_active:
            self._core.set_trace(True)

    # -- MemoryResource ------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._device

    def allocate(self, nbytes: int, *, stream: Stream | None = None) -> DeviceBuffer:
        """A buffer of ``nbytes`` bytes usable in order on ``stream`` (default: the current stream).

        Raises:
            TypeError: ``nbytes`` is not an int, ``stream`` not a Stream.
            InvalidArgumentError: ``nbytes`` <= 0 or absurd; ``stream`` on another device.
            InvalidHandleError: ``stream`` was destroyed, or the pool belongs to a finalized session.
            OutOfMemoryError: see the class docstring.
        """
        if not _state.ready:   # finalized, or a forked child: a clear error, never the cache
            rt.ensure("acl_rt.alloc")
        if type(nbytes) is not int or not 0 < nbytes <= _MAX_ALLOC:
            nbytes = _check_nbytes(nbytes, "acl_rt.alloc")
        if stream is None:   # the current stream: the innermost `with stream:` of this thread, or the default
            stacks = getattr(_tls, "streams", None)
            top = stacks.get(self._id) if stacks else None
            if top:
                stream = top[-1]
                if stream._h is None or stream._gen != self._gen:   # closed: current_stream() drops it
                    stream = current_stream(self._device)
            else:
                stream = self._default
                if stream is None or stream._gen != self._gen:
                    stream = self._default = current_stream(self._device)
        elif type(stream) is not Stream:
            if not isinstance(stream, Stream):
                stream = accept_stream(stream, None, "acl_rt.alloc")
        gen = self._gen
        if stream._gen != gen or stream._h is None or stream._device is not self._device:
            self._check_stream(stream)
        if _hooks_active:
            return self._allocate_hooked(nbytes, stream)
        try:
            ptr = self._core.malloc(nbytes, stream._id)
        except _native.Error as e:
            ptr = self._malloc_slow(nbytes, stream, e)
        buf = _new(DeviceBuffer)
        buf._ptr = ptr
        buf._size = nbytes
        buf._mr = self
        buf._stream = stream
        buf._gen = gen
        buf._uses = None
        return buf

    def deallocate(self, ptr: int, nbytes: int, *, stream: Stream | None = None) -> None:
        """Give back a block from :meth:`allocate` (``DeviceBuffer.close`` calls this). Its memory
        is reused in stream order (see the module docstring).

        Raises:
            InvalidArgumentError: ``ptr`` is not a live block of this pool (freed twice, an
                interior pointer, or memory from elsewhere); the pool is unchanged.
        """
        if _hooks_active:
            size = self._core.owns(ptr) or nbytes
            try:
                _call_hooks("free_preprocess", device_id=self._id, mem_size=size, mem_ptr=ptr)
            except BaseException:   # the hook's exception propagates (as in CuPy), but the block is
                self._free_block(ptr, stream)   # freed all the same: the buffer is closed already
                self._deliver_trace()
                raise
            self._free_block(ptr, stream)
            _call_hooks("free_postprocess", device_id=self._id, mem_size=size, mem_ptr=ptr)
            self._deliver_trace()
            return
        self._free_block(ptr, stream)

    def _free_block(self, ptr: int, stream: Stream | None) -> None:
        try:
            self._core.free(ptr, stream is not None and stream._h is None)
        except _native.Error as e:
            kind, code, msg = e.args
            if self._core.info()["closed"]:
                return
            raise InvalidArgumentError(E.ACL_ERROR_RT_PARAM_INVALID, "MemoryPool.deallocate", msg) from None

    def _record_stream(self, buf: DeviceBuffer, stream: Stream) -> None:
        try:
            self._core.record_stream(buf._ptr, stream._id)
        except _native.Error as e:
            raise InvalidArgumentError(E.ACL_ERROR_RT_PARAM_INVALID, "DeviceBuffer.record_stream", e.args[2]) from None

    # -- slow paths ----------------------------------------------------------------------------
    def _check_stream(self, stream: Stream):
        api = "acl_rt.alloc"
        if self._gen != rt.generation() or self._core.info()["closed"]:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api,
                                     "this memory pool belongs to a runtime session that was "
                                     "finalized; use acl_rt.alloc() or Device(i).memory_resource")
        stream._handle(api)   # raises for a destroyed or stale stream
        if stream._device is not self._device:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"the stream is on device {stream._device._id} but the pool "
                                       f"allocates on device {self._id}")

    def _allocate_hooked(self, nbytes: int, stream: Stream) -> DeviceBuffer:
        size = _native.round_size(nbytes)
        _call_hooks("malloc_preprocess", device_id=self._id, size=nbytes, mem_size=size)
        try:
            ptr = self._core.malloc(nbytes, stream._id)
        except _native.Error as e:
            ptr = self._malloc_slow(nbytes, stream, e)
        buf = DeviceBuffer._wrap(ptr, nbytes, self, stream)
        try:
            self._deliver_trace()
            _call_hooks("malloc_postprocess", device_id=self._id, size=nbytes, mem_size=size, mem_ptr=ptr)
        except BaseException:   # the caller never gets the buffer: give the block back, then raise
            try:
                buf.close()
            except Exception:   # a raising free hook: the block is freed anyway (deallocate)
                pass
            raise
        return buf

    def _deliver_trace(self):
        for kind, size, ptr in self._core.take_trace():
            _call_hooks("alloc_postprocess" if kind == "alloc" else "dealloc_postprocess",
                        device_id=self._id, mem_size=size, mem_ptr=ptr)

    def _raise_runtime(self, e):
        """The error kind of a failed malloc; raises a runtime failure that is not out-of-memory
        (with the runtime's message, which the native pool read)."""
        kind, code, msg = e.args
        if kind == _native.E_RUNTIME and code not in _OOM_CODES:
            rt.raise_error(code, "aclrtMalloc", msg)
        return kind

    def _malloc_slow(self, nbytes: int, stream: Stream, err) -> int:
        """The out-of-memory ladder (PyTorch's and CuPy's): release the cache, retry, collect
        garbage, release again, retry, raise. The error keeps the runtime's reason for the last
        refusal (e.g. the simulator's: the host's RAM cannot back the request)."""
        if self._core.info()["closed"]:
            self._check_stream(stream)
        kind = self._raise_runtime(err)
        reason = err.args[2] if kind == _native.E_RUNTIME else None
        if kind != _native.E_NOMEM:   # a request larger than the device skips the ladder
            for step in ("release", "gc"):
                if step == "gc":
                    gc.collect()
                self._release(wait=True)
                self._core.count("retry")
                try:
                    return self._core.malloc(nbytes, stream._id)
                except _native.Error as e:
                    kind = self._raise_runtime(e)
                    reason = e.args[2] if kind == _native.E_RUNTIME else None
        self._core.count("oom")
        raise OutOfMemoryError(E.ACL_ERROR_RT_MEMORY_ALLOCATION, "acl_rt.alloc", self._oom_message(nbytes, kind, reason))

    def _oom_message(self, nbytes: int, kind: int, reason: str | None = None) -> str:
        s = self._core.summary()
        allocated, reserved = s[1], s[2]
        try:
            free, total = self._device.mem_info()
            dev = f"the device has {_fmt_bytes(free)} free of {_fmt_bytes(total)} ({free} of {total} bytes)"
        except Exception as e:  # the message must not fail
            dev = f"device free/total unknown ({e})"
        limit = f"{_fmt_bytes(self._limit)} ({self._limit} bytes)" if self._limit else "none"
        why = {_native.E_LIMIT: "the pool's memory limit would be exceeded",
               _native.E_NOMEM: "the request is larger than the device's memory"}.get(kind, "the device is out of memory")
        if reason:
            why += f" (the runtime reports: {reason})"
        return (f"out of memory on device {self._id}: tried to allocate {_fmt_bytes(nbytes)} ({nbytes} bytes) and "
                f"{why}; allocated by this process's pool {_fmt_bytes(allocated)} ({allocated} bytes), reserved "
                f"{_fmt_bytes(reserved)} ({reserved} bytes), limit {limit}; {dev}. Free unused buffers, call "
                "acl_rt.empty_cache(), or raise the limit (acl_rt.set_memory_limit / CANNA_MEMORY_LIMIT)")

    def _release(self, *, wait: bool) -> int:
        """Return every whole free segment to the device. ``wait``: first wait (by polling, so an
        asynchronous error stays for its stream's owner to see) for the streams and events that
        hold cached blocks back. Returns the bytes released."""
        released, busy, events, deferred = self._core.release_cached(False)
        if wait and (busy or events or deferred):
            self._core.count("sync_all")
            self._wait_for(busy, events, deferred)
            more, _, _, _ = self._core.release_cached(bool(deferred))
            released += more
        if _hooks_active:
            self._deliver_trace()
        return released

    def _wait_for(self, streams, events, deferred):
        lib = backend().lib
        rt.activate(self._id, "acl_rt.empty_cache")
        status = ffi.new("int32_t *")
        for key in streams:
            h = ffi.cast("aclrtStream", key)
            _poll(lambda: lib.aclrtStreamQuery(h, ffi.cast("aclrtStreamStatus *", status)) != 0
                  or status[0] == StreamStatus.ACL_STREAM_STATUS_COMPLETE)
        for key in events:
            h = ffi.cast("aclrtEvent", key)
            _poll(lambda: lib.aclrtQueryEventStatus(h, ffi.cast("aclrtEventRecordedStatus *", status)) != 0
                  or status[0] == EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_COMPLETE)
        if deferred:  # blocks freed after their stream was destroyed: wait for the whole device
            lib.aclrtSynchronizeDevice()
        lib.aclGetRecentErrMsg()

    # -- configuration and statistics -----------------------------------------------------------
    def _set_limit_bytes(self, limit: int) -> None:
        self._core.set_limit(limit)
        self._limit = limit

    @property
    def limit(self) -> int | None:
        """The pool's limit on reserved bytes (``None``: only the device's capacity)."""
        return self._limit or None

    def set_limit(self, limit: int | float | None) -> None:
        """See :func:`acl_rt.set_memory_limit`."""
        api = "acl_rt.set_memory_limit"
        if limit is None:
            self._set_limit_bytes(0)
            return
        if isinstance(limit, str):   # the forms of CANNA_MEMORY_LIMIT: "512M", "2G", "50%", "0.5"
            limit = _parse_limit(limit, self._total, "limit")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise TypeError(f"{api}: limit must be a number of bytes (int), a fraction of the device memory "
                            f"(float in (0, 1]), a string such as '512M', '2G' or '50%', or None, not "
                            f"{type(limit).__name__}")
        if isinstance(limit, float):
            if not (math.isfinite(limit) and 0 < limit <= 1):
                raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                           f"a fraction must be in (0, 1], got {limit!r}")
            nbytes = int(limit * self._total)
        else:
            if limit <= 0:
                raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                           f"limit must be > 0 bytes (or None for no limit), got {limit}")
            nbytes = _check_limit(limit, "limit")
        allocated = self._core.summary()[1]
        if nbytes < allocated:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"limit {nbytes} bytes is below the {allocated} bytes allocated "
                                       f"on device {self._id} now; free buffers first (the limit is unchanged)")
        self._set_limit_bytes(nbytes)
        if self._core.summary()[2] > nbytes:
            self._release(wait=True)

    def stats(self) -> dict:
        """:func:`acl_rt.memory_stats` for this pool."""
        return dict(sorted(self._core.stats().items()))

    def empty_cache(self) -> int:
        """Return every cached segment that holds no live buffer to the device (waiting for the
        streams that used them); returns the bytes released."""
        return self._release(wait=True)

    def snapshot(self) -> list[dict]:
        """Segments and their blocks (PyTorch's ``memory_snapshot`` layout: ``address``,
        ``total_size``, ``stream``, ``segment_type``, ``allocated_size``, ``active_size``,
        ``requested_size``, ``blocks`` with ``address``, ``size``, ``requested_size``, ``state``)."""
        return self._core.snapshot()

    def __repr__(self):
        s = self._core.summary()
        return f"<acl_rt.MemoryPool device={self._id} allocated={s[1]} reserved={s[2]}>"

    # -- lifetime ------------------------------------------------------------------------------
    def _stream_closed(self, stream: Stream) -> None:
        self._core.stream_closed(stream._id)

    def _shutdown(self) -> None:
        self._core.shutdown()
        # segments that still hold live buffers stay mapped (DLPack consumers may view them);
        # remember them, to free each once its last buffer is gone (_release_stale)
        orphans = {}
        for seg in self._core.snapshot():
            live = {b["address"] for b in seg["blocks"] if b["state"] == "active_allocated"}
            if live:
                orphans[seg["address"]] = live
        self._orphans = orphans

    def _release_stale(self, ptr: int) -> None:
        """A buffer of this (finalized) pool was closed: free its segment once it holds no other
        live buffer (at once when the runtime is initialized again, else at the next init)."""
        orphans = self._orphans
        if not orphans:
            return
        with _pools_lock:
            for base, live in orphans.items():
                if ptr in live:
                    live.discard(ptr)
                    if not live:
                        del orphans[base]
                        break
                    return
            else:
                return
        free_stale(self._id, base)

    def __del__(self):
        # a pool nobody references has no live buffer left (each holds its pool): give its cached
        # segments back. Never raises; nothing to do after finalize or in a forked child.
        try:
            core = getattr(self, "_core", None)
            if core is not None and _state.ready and self._gen == _state.generation:
                core.shutdown()
        except Exception:
            pass


def _poll(done, timeout: float | None = None):
    """Wait until ``done()`` (spinning briefly, then sleeping 100 µs per poll)."""
    t0 = time.monotonic()
    i = 0
    while not done():
        i += 1
        if i < 50:
            time.sleep(0)
        else:
            time.sleep(1e-4)
        if timeout is not None and time.monotonic() - t0 > timeout:
            return False
    return True


def default_resource(dev: Device) -> MemoryResource:
    """The memory resource a device starts with (see :attr:`Device.memory_resource`): the pool,
    or the raw resource with ``CANNA_NO_MEMORY_CACHING=1`` and in the simulator's memcheck mode
    (``CANNA_SIM_CHECK=1``: each buffer needs its own guarded mapping, as CUDA's sanitizers need
    PyTorch's ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``)."""
    if os.environ.get("CANNA_NO_MEMORY_CACHING", "").strip().lower() in ("1", "true", "yes"):
        return DeviceMemoryResource(dev)
    b = backend()
    if b.is_sim and b.lib.aclsimGetCheckMode() == 1:
        return DeviceMemoryResource(dev)
    with _pools_lock:
        pool = _pools.get(dev._id)
        if pool is None or pool._gen != rt.generation():
            pool = MemoryPool(dev)
            _pools[dev._id] = pool
            from . import _publish
            _publish.ensure_started()
        return pool


def _pool(device, api: str) -> MemoryPool | None:
    """The pool of ``device`` (default: current) if it is the device's resource, else None."""
    mr = Device(device).memory_resource
    return mr if isinstance(mr, MemoryPool) else None


def live_pools() -> list[MemoryPool]:
    """The pools of the current session (for monitoring)."""
    with _pools_lock:
        return [p for p in _pools.values() if p._gen == rt.generation()]


def _on_stream_close(stream: Stream) -> None:
    with _pools_lock:
        pools = [p for p in _all_pools if p._id == stream._device._id and p._gen == stream._gen]
    for pool in pools:
        pool._stream_closed(stream)


def _on_finalize() -> None:
    with _pools_lock:
        pools = list(_all_pools)
        _pools.clear()
    for pool in pools:
        try:
            lib = backend().lib
            rt.activate(pool._id, "acl_rt.finalize")
            lib.aclrtSynchronizeDevice()
            lib.aclGetRecentErrMsg()
        except Exception:
            pass
        pool._shutdown()
        if pool._device._mr is pool:
            pool._device._mr = None
    from . import _publish
    _publish.on_finalize()


_close_hooks.append(_on_stream_close)
rt.on_finalize(_on_finalize)


# ------------------------------------------------------------------------------------------------
# the torch.cuda-style module functions

_EMPTY_STATS: dict | None = None


def _empty_stats() -> dict:
    global _EMPTY_STATS
    if _EMPTY_STATS is None:
        keys = []
        for stat in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                     "active_bytes", "inactive_split_bytes", "requested_bytes"):
            for pool in ("all", "small_pool", "large_pool"):
                keys += [f"{stat}.{pool}.{m}" for m in ("current", "peak", "allocated", "freed")]
        for stat in ("oversize_allocations", "oversize_segments"):
            keys += [f"{stat}.{m}" for m in ("current", "peak", "allocated", "freed")]
        keys += ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
                 "num_oom_rejections"]
        d = dict.fromkeys(keys, 0)
        d["max_split_size"] = -1
        _EMPTY_STATS = dict(sorted(d.items()))
    return dict(_EMPTY_STATS)


def memory_stats(device=None) -> dict:
    """Statistics of ``device``'s pool (default: the current device), with the exact keys of
    ``torch.cuda.memory_stats``: ``"{stat}.{pool}.{metric}"`` for stat in ``allocation``,
    ``segment``, ``active``, ``inactive_split`` (counts) and ``allocated_bytes``,
    ``reserved_bytes``, ``active_bytes``, ``inactive_split_bytes``, ``requested_bytes`` (bytes),
    pool in ``all``, ``small_pool`` (requests <= 1 MiB), ``large_pool``, metric in ``current``,
    ``peak``, ``allocated`` (total increase), ``freed`` (total decrease); plus the counters
    ``num_alloc_retries``, ``num_ooms``, ``num_sync_all_streams``, ``num_device_alloc``,
    ``num_device_free``, ``num_oom_rejections``, ``oversize_allocations.*``,
    ``oversize_segments.*`` and ``max_split_size`` (-1: blocks of any size are split).

    ``allocated_bytes`` counts live buffers (rounded block sizes), ``requested_bytes`` the sizes
    asked for, ``reserved_bytes`` the segments taken from the device, ``active_bytes`` live
    buffers plus freed ones still waiting for other streams. All zeros when the device's memory
    resource is not a pool.

    Raises:
        InvalidArgumentError: unknown device id.
    """
    pool = _pool(device, "acl_rt.memory_stats")
    return pool.stats() if pool is not None else _empty_stats()


def memory_stats_as_nested_dict(device=None) -> dict:
    """:func:`memory_stats` as nested dicts (``d["allocated_bytes"]["all"]["current"]``)."""
    out: dict = {}
    for key, v in memory_stats(device).items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return out


def memory_allocated(device=None) -> int:
    """Bytes held by live buffers on ``device`` (``allocated_bytes.all.current``)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    """Peak of :func:`memory_allocated` since the start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes the pool holds from the device (``reserved_bytes.all.current``)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    """Peak of :func:`memory_reserved`."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Set every ``*.peak`` statistic of ``device``'s pool to its current value."""
    pool = _pool(device, "acl_rt.reset_peak_memory_stats")
    if pool is not None:
        pool._core.reset_peaks()


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the ``*.allocated`` / ``*.freed`` totals and the ``num_*`` counters."""
    pool = _pool(device, "acl_rt.reset_accumulated_memory_stats")
    if pool is not None:
        pool._core.reset_accumulated()


def empty_cache(device=None) -> int:
    """Return cached memory that no buffer uses to the device (every device's pool by default, like
    ``torch.cuda.empty_cache``). Waits (by polling, no device synchronize) for the streams that
    used the cached blocks. Live buffers are untouched; a segment partly used by a live buffer is
    kept. Returns the bytes released."""
    if device is None:
        return sum(p.empty_cache() for p in live_pools())
    pool = _pool(device, "acl_rt.empty_cache")
    return pool.empty_cache() if pool is not None else 0


def set_memory_limit(limit: int | float | str | None, device=None) -> None:
    """Limit the memory ``device``'s pool may reserve (default: the current device).

    Args:
        limit: bytes (int > 0), a fraction of the device's memory (float in (0, 1], like
            ``torch.cuda.set_per_process_memory_fraction``), a string of the environment
            variable's forms (``"512M"``, ``"2G"``, ``"50%"``), or ``None`` for no limit. The
            ``CANNA_MEMORY_LIMIT`` environment variable sets the initial limit of every pool
            (bytes, ``512M``, ``2G``, ``50%`` or ``0.5``). An allocation that would take the pool's
            reserved bytes past the limit goes through the out-of-memory ladder (cached memory is
            released first) and then raises :class:`OutOfMemoryError`.

    Raises:
        TypeError: not a number, a string or None.
        InvalidArgumentError: a string of none of those forms, a limit <= 0 or above 2**62 bytes, a
            fraction outside (0, 1], or a limit below the bytes allocated now (the old limit stays).
    """
    pool = _pool(device, "acl_rt.set_memory_limit")
    if pool is None:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "acl_rt.set_memory_limit",
                                   "the device's memory resource is not a MemoryPool (CANNA_NO_MEMORY_CACHING?)")
    pool.set_limit(limit)


def get_memory_limit(device=None) -> int | None:
    """The pool's limit in bytes, or ``None``."""
    pool = _pool(device, "acl_rt.get_memory_limit")
    return pool.limit if pool is not None else None


def memory_snapshot(device=None) -> list[dict]:
    """The segments of ``device``'s pool and their blocks (see :meth:`MemoryPool.snapshot`)."""
    pool = _pool(device, "acl_rt.memory_snapshot")
    return pool.snapshot() if pool is not None else []


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A readable table of :func:`memory_stats` (after ``torch.cuda.memory_summary``): current,
    peak, total allocated and total freed of every statistic, per pool unless ``abbreviated``."""
    dev = Device(device)
    st = memory_stats(dev)
    pool = _pool(dev, "acl_rt.memory_summary")
    limit = pool.limit if pool is not None else None
    w = 79
    lines = ["|" + "=" * (w - 2) + "|",
             "|" + f"acl_rt memory summary, device {dev._id}".center(w - 2) + "|",
             "|" + "-" * (w - 2) + "|",
             "|" + f"  NPU OOMs: {st['num_ooms']:<10} alloc retries: {st['num_alloc_retries']:<10} "
             f"limit: {(_fmt_bytes(limit) if limit else 'none'):<14}".ljust(w - 2) + "|",
             "|" + "=" * (w - 2) + "|",
             "|" + f"{'Metric':<25}|{'Cur Usage':>12} |{'Peak Usage':>12} |{'Tot Alloc':>12} |{'Tot Freed':>11}".ljust(w - 2) + "|"]
    rows = (("allocated_bytes", "Allocated memory", True), ("active_bytes", "Active memory", True),
            ("requested_bytes", "Requested memory", True), ("reserved_bytes", "Reserved memory", True),
            ("inactive_split_bytes", "Non-releasable memory", True), ("allocation", "Allocations", False),
            ("active", "Active allocs", False), ("segment", "Reserved segments", False),
            ("inactive_split", "Non-releasable allocs", False))
    for key, label, is_bytes in rows:
        lines.append("|" + "-" * (w - 2) + "|")
        fmt = _fmt_bytes if is_bytes else str
        for sub, name in (("all", label), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")):
            if abbreviated and sub != "all":
                continue
            vals = [st[f"{key}.{sub}.{m}"] for m in ("current", "peak", "allocated", "freed")]
            lines.append("|" + f"{name:<25}|{fmt(vals[0]):>12} |{fmt(vals[1]):>12} |{fmt(vals[2]):>12} |{fmt(vals[3]):>11}".ljust(w - 2) + "|")
    lines.append("|" + "=" * (w - 2) + "|")
    lines.append("|" + f"  device allocations: {st['num_device_alloc']:<8} device frees: {st['num_device_free']:<8} "
                 f"waits for streams: {st['num_sync_all_streams']}".ljust(w - 2) + "|")
    lines.append("|" + "=" * (w - 2) + "|")
    return "\n".join(lines) + "\n"
