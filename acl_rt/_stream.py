"""Streams and events (AscendCL ``aclrtStream`` / ``aclrtEvent``).

A stream runs its work in order and asynchronously with respect to the host; work on different
streams may overlap. Events mark points in a stream: another stream can wait for them, the host can
wait for them, and two timing events give the elapsed time in milliseconds. Handles are created
only through factories (:meth:`Device.create_stream`, :meth:`Device.create_event`,
:meth:`Stream.record`). Each object owns its handle and destroys it when closed or collected;
destructors never raise (a failure becomes a ``ResourceWarning`` naming the leaked handle).
"""
from __future__ import annotations

import math
import sys
import threading
import traceback
import warnings
import weakref

from . import _runtime as rt
from ._constants import ErrorCode as E, EventFlag, EventRecordedStatus, StreamFlag, StreamStatus
from ._device import Device, enter_block, exit_block
from ._errors import AclError, InvalidArgumentError, InvalidHandleError, NotReadyError, NotSupportedError
from ._lib import backend, ffi

__all__ = ["Stream", "Event", "current_stream", "synchronize", "accept_stream"]

_EVENT_SYNC, _EVENT_TIME_LINE = int(EventFlag.ACL_EVENT_SYNC), int(EventFlag.ACL_EVENT_TIME_LINE)
_STREAM_FLAGS = sum(int(f) for f in StreamFlag)   # every ACL_STREAM_* bit
_STREAM_COMPLETE = int(StreamStatus.ACL_STREAM_STATUS_COMPLETE)
_EVENT_COMPLETE = int(EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_COMPLETE)


def _timeout_ms(timeout, api) -> int:
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{api}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not timeout >= 0 or math.isinf(timeout):
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                   f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    ms = math.ceil(timeout * 1000)
    if ms > 2**31 - 1:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                   f"timeout {timeout!r} s is too long (max {(2**31 - 1) / 1000:.0f} s)")
    return ms


class Stream:
    """An in-order queue of work on one device.

    ``with stream:`` makes it the calling thread's current stream **and** its device the current
    device (like ``torch.cuda.stream``), so every operation with ``stream=None`` inside the block
    uses it; both are restored afterwards.

    Streams own a runtime handle: they cannot be copied or pickled.
    """

    __slots__ = ("_h", "_id", "_device", "_gen", "_owned", "_priority", "__weakref__")

    def __init__(self, *a, **k):
        raise TypeError("streams are created with Device.create_stream() or Device.default_stream")

    @classmethod
    def _wrap(cls, device, handle, owned, priority):
        self = object.__new__(cls)
        self._h = handle
        self._id = int(ffi.cast("uintptr_t", handle))
        self._device = device
        self._gen = rt.generation()
        self._owned = owned
        self._priority = priority
        return self

    @classmethod
    def _create(cls, device: Device, *, priority: int = 0, flags: int = 0) -> "Stream":
        api = "Device.create_stream"
        for name, v in (("priority", priority), ("flags", flags)):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise TypeError(f"{api}: {name} must be an int, not {type(v).__name__}")
        priority, flags = priority.__index__(), flags.__index__()
        if not 0 <= priority <= 7:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"priority must be in 0..7 (0 is highest), got {priority}")
        if flags & ~_STREAM_FLAGS or flags < 0:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"unknown stream flag bits {flags:#x} (valid: ACL_STREAM_* = "
                                       f"{_STREAM_FLAGS:#x})")
        rt.activate(device._id, api)
        cell = ffi.new("aclrtStream *")
        rt.check(backend().lib.aclrtCreateStreamWithConfig(cell, priority, flags), "aclrtCreateStreamWithConfig")
        return cls._wrap(device, cell[0], True, priority)

    @classmethod
    def _default(cls, device: Device) -> "Stream":
        st = rt.activate(device._id, "Device.default_stream")
        return cls._wrap(device, st.default_stream, False, 0)

    # -- identity --------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The ``aclrtStream`` handle as an int (stays readable after :meth:`close`)."""
        return self._id

    @property
    def device(self) -> Device:
        return self._device

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def is_default(self) -> bool:
        """Whether this is the default stream of its device's context (not destroyable)."""
        return not self._owned

    def __npu_stream__(self):
        """Stream-exchange protocol (mirror of ``__cuda_stream__``): ``(version, handle)``."""
        return (0, self.handle)

    def __eq__(self, other):
        return isinstance(other, Stream) and self._id == other._id and self._gen == other._gen

    def __hash__(self):
        return hash((self._id, self._gen))

    def __copy__(self, *memo):
        raise TypeError("acl_rt.Stream owns a runtime handle and cannot be copied")

    __deepcopy__ = __copy__

    def __reduce__(self):
        raise TypeError("acl_rt.Stream owns a runtime handle and cannot be pickled")

    def __repr__(self):
        state = "" if self._alive_quiet() else " (destroyed)"
        kind = "default stream" if not self._owned else "stream"
        return f"<acl_rt.Stream {kind} {self.handle:#x} on device {self._device._id}{state}>"

    def _alive_quiet(self) -> bool:
        return self._h is not None and self._gen == rt._state.generation and rt._state.ready

    def _handle(self, api):
        """The live handle, with the device's context current; raises when destroyed/stale."""
        if self._h is None:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api, "the stream was destroyed")
        if self._gen != rt._state.generation:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api,
                                     "the stream was created before acl_rt.finalize() and is no longer valid")
        rt.activate(self._device._id, api)
        return self._h

    # -- work ------------------------------------------------------------------------------------
    def synchronize(self, *, timeout: float | None = None) -> None:
        """Wait until all work queued on this stream has finished.

        Args:
            timeout: seconds to wait at most (``None`` waits forever).

        Raises:
            AclTimeoutError: the work did not finish in time (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT).
            DeviceError: a task of this stream failed asynchronously (reported once; the stream
                is usable again afterwards).
            Exception: an exception raised by a :meth:`launch_host_func` callback.
        """
        api = "Stream.synchronize"
        ms = _timeout_ms(timeout, api)
        self._sync_raw(api, ms)
        if _host_errors:
            _raise_host_errors(lambda key: key == (self._gen, self._id))

    def _sync_raw(self, api: str = "Stream.synchronize", ms: int = -1) -> None:
        """Wait for the stream, raising only the runtime's errors (canna's internal waits use
        this, so a host function's exception is kept for the user's own synchronize). The wait
        is done in slices so Ctrl-C (KeyboardInterrupt) is delivered while waiting."""
        h = self._handle(api)
        _wait_sliced(backend().lib.aclrtSynchronizeStreamWithTimeout, "aclrtSynchronizeStreamWithTimeout",
                     h, ms, E.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, f"stream {self._id:#x}")

    sync = synchronize

    def settle(self) -> None:
        """Wait until the work queued on this stream has run, also after the stream was
        destroyed: its queued work still runs, and a device synchronize waits for it (and reports
        the faults of destroyed streams). After the runtime was finalized there is nothing to
        wait for. (What an array whose last writer was this stream waits on before a host read.)

        Raises:
            DeviceError: as :meth:`synchronize` / :meth:`acl_rt.Device.synchronize`.
        """
        if self._h is not None:
            self.synchronize()
        elif self._gen == rt._state.generation and rt._state.ready:
            self._device.synchronize()

    def query(self) -> bool:
        """``True`` when all queued work has finished (``aclrtStreamQuery``); never waits."""
        out = ffi.new("aclrtStreamStatus *")
        rt.check(backend().lib.aclrtStreamQuery(self._handle("Stream.query"), out), "aclrtStreamQuery")
        return out[0] == _STREAM_COMPLETE

    @property
    def is_done(self) -> bool:
        return self.query()

    def record(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new timing event when None) at the current end of this stream."""
        if event is None:
            event = Event._create(self._device, timing=True)
        elif not isinstance(event, Event):
            raise TypeError(f"Stream.record: expected an acl_rt.Event, not {type(event).__name__}")
        event.record(self)
        return event

    def wait(self, event_or_stream: "Event | Stream") -> None:
        """Make later work on this stream wait for ``event`` (or for everything queued so far on
        another stream, also of another device) without blocking the host
        (``aclrtStreamWaitEvent``)."""
        api = "Stream.wait"
        self._handle(api)
        if isinstance(event_or_stream, Stream):
            if event_or_stream == self:
                return
            event = event_or_stream.record(Event._create(event_or_stream._device, timing=False))
        elif isinstance(event_or_stream, Event):
            event = event_or_stream
        else:
            raise TypeError(f"{api}: expected an acl_rt.Event or acl_rt.Stream, not {type(event_or_stream).__name__}")
        eh = event._handle(api)
        rt.check(backend().lib.aclrtStreamWaitEvent(self._handle(api), eh), "aclrtStreamWaitEvent")

    def launch_host_func(self, fn, *args) -> None:
        """Run ``fn(*args)`` on a runtime thread when the stream reaches this point
        (``aclrtLaunchHostFunc``). An exception it raises is re-raised by the next
        :meth:`synchronize` of this stream or :meth:`Device.synchronize` of its device (the first
        one, with the others attached as notes; after the stream was closed, only the device's).
        At most :data:`MAX_KEPT_ERRORS` exceptions wait to be reported, their tracebacks' frames
        cleared (file and line stay, the locals go); later ones are only counted ("and N more").
        ``fn`` must not wait on this stream (the simulator refuses that with an error instead of
        deadlocking, as the device would hang)."""
        api = "Stream.launch_host_func"
        if not callable(fn):
            raise TypeError(f"{api}: fn must be callable, not {type(fn).__name__}")
        h = self._handle(api)
        holder = []
        key = (self._gen, self._id)
        device_id = self._device._id
        stream_ref = weakref.ref(self)   # default-stream wrappers are fresh objects: never "closed"
        owned = self._owned

        def trampoline(_arg):
            try:
                fn(*args)
            except BaseException as e:  # surfaced at synchronize()
                s = stream_ref()
                _keep_error(key, device_id, e, closed=owned and (s is None or s._h is None))
            finally:
                _pending_callbacks.discard(holder[0])

        cb = ffi.callback("aclrtHostFunc", trampoline)
        holder.append(cb)
        _pending_callbacks.add(cb)
        rc = backend().lib.aclrtLaunchHostFunc(h, cb, ffi.NULL)
        if rc:
            _pending_callbacks.discard(cb)
            rt.raise_error(rc, "aclrtLaunchHostFunc")

    # -- current stream ---------------------------------------------------------------------------
    def __enter__(self):
        self._handle("Stream.__enter__")
        prev = rt.current_device_id()
        self._device.set_current()
        enter_block(self, prev)
        _stack(self._device._id).append(self)
        rt.current_changed()
        return self

    def __exit__(self, *exc):
        """End this stream's innermost open block, in any order (blocks entered by hand with
        ``__enter__``/``__exit__`` may end out of order): its entry leaves the current-stream stack
        wherever it is, so the streams of the blocks still open stay current and, once every block
        ended, the thread is back to the stream and device it started with."""
        stack = _stack(self._device._id)
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break
        rt.current_changed()
        prev = exit_block(self)
        if prev is not None:
            rt.set_current_device_id(prev)
        return False

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the stream (``aclrtDestroyStream``). Work already queued still completes.
        Idempotent. The default stream cannot be closed (this is a no-op for it)."""
        h, self._h = self._h, None
        if h is None or not self._owned:
            self._h = h
            return
        if self._gen != rt._state.generation or not rt._state.ready:
            return
        rt.activate(self._device._id, "Stream.close")
        rt.current_changed()   # (it may be some thread's current stream)
        _run_close_hooks(self)
        _fold_closed((self._gen, self._id))
        rt.check(backend().lib.aclrtDestroyStream(h), "aclrtDestroyStream")

    destroy = close

    def __del__(self):
        try:
            if self._h is not None and self._owned and self._gen == rt.generation() and rt.is_initialized():
                rt.current_changed()
                _run_close_hooks(self)
                _fold_closed((self._gen, self._id))
                h, self._h = self._h, None
                rc = backend().lib.aclrtDestroyStream(h)
                if rc:
                    warnings.warn(f"acl_rt: could not destroy stream {int(ffi.cast('uintptr_t', h)):#x} "
                                  f"(ACL error {rc}); the handle is leaked", ResourceWarning)
        except Exception:
            pass


_pending_callbacks: set = set()

class _Pending:
    """Unreported exceptions of one stream (or of a device's closed streams): the first ones,
    and how many more were dropped."""
    __slots__ = ("device", "errors", "more")

    def __init__(self, device):
        self.device, self.errors, self.more = device, [], 0


#: exceptions raised by host functions (and asynchronous errors met by canna's own waits), not yet
#: reported: (generation, stream id) -> _Pending; a closed stream's go to (generation, ("closed",
#: device)), which only Device.synchronize reports
_host_errors: dict = {}
_host_errors_lock = threading.Lock()
#: at most this many exceptions are kept in all (with their tracebacks' frames cleared); later ones
#: are only counted, so a program that never synchronizes holds bounded memory
MAX_KEPT_ERRORS = 20
_kept = 0


def _keep_error(key, device_id: int, e: BaseException, closed: bool = False) -> None:
    """Keep ``e`` for the next synchronize of ``key``'s stream (``closed``: of its device)."""
    global _kept
    tb = e.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        tb = tb.tb_next   # the catching frame itself (it holds the callback's arguments)
    e.__traceback__ = tb
    traceback.clear_frames(tb)   # the frames' locals could be large; file and line stay
    with _host_errors_lock:
        if closed:
            key = (key[0], ("closed", device_id))
        if _kept >= MAX_KEPT_ERRORS:   # errors of sessions before a finalize are never reported
            gen = rt._state.generation
            for k in [k for k in _host_errors if k[0] != gen]:
                _kept -= len(_host_errors.pop(k).errors)
        p = _host_errors.get(key)
        if p is None:
            p = _host_errors[key] = _Pending(device_id)
        if _kept < MAX_KEPT_ERRORS:
            p.errors.append(e)
            _kept += 1
        else:
            p.more += 1


def _fold_closed(key) -> None:
    """A stream is being closed: its unreported exceptions now wait for its device's synchronize."""
    if not _host_errors:
        return
    with _host_errors_lock:
        p = _host_errors.pop(key, None)
        if p is None:
            return
        into = _host_errors.setdefault((key[0], ("closed", p.device)), _Pending(p.device))
        into.errors.extend(p.errors)
        into.more += p.more


def _raise_host_errors(match) -> None:
    global _kept
    with _host_errors_lock:
        keys = [k for k in _host_errors if match(k)]
        pending = [_host_errors.pop(k) for k in keys]
        errors = [e for p in pending for e in p.errors]
        more = sum(p.more for p in pending)
        _kept -= len(errors)
    if not errors and not more:
        return
    if not errors:
        raise RuntimeError(f"{more:,} host function{'s' if more != 1 else ''} raised; their exceptions were "
                           f"not kept (at most {MAX_KEPT_ERRORS} are kept until a synchronize reports them)")
    first = errors[0]
    for other in errors[1:]:
        first.add_note(f"another host function also raised: {other!r}")
    if more:
        first.add_note(f"and {more:,} more exception{'s' if more != 1 else ''} (not kept: at most "
                       f"{MAX_KEPT_ERRORS} are kept until a synchronize reports them)")
    raise first


def drain(stream: "Stream") -> None:
    """Wait for ``stream``'s queued work without raising: canna's own cleanup waits (freeing a
    buffer) use it. An asynchronous error it meets is not lost but kept for the user's next
    :meth:`Stream.synchronize` / :meth:`Device.synchronize`, like a host-function exception."""
    try:
        stream._sync_raw("acl_rt (freeing memory)")
    except AclError as e:
        if e.code == E.ACL_ERROR_RT_PARAM_INVALID and "inside" in e.message:   # waited from one of its own tasks: skip
            return
        _keep_error((stream._gen, stream._id), stream._device._id, e, closed=stream._h is None)


def raise_device_host_errors(device_id: int) -> None:
    """Raise the pending host-function exceptions of every stream of ``device_id``."""
    if _host_errors:
        gen = rt._state.generation
        with _host_errors_lock:
            keys = {k for k, p in _host_errors.items() if p.device == device_id and k[0] == gen}
        _raise_host_errors(lambda k: k in keys)


_SLICE_MS = 200


def _wait_sliced(fn, name: str, handle, ms: int, timeout_code: int, what: str = "the work") -> None:
    """``fn(handle, slice)`` until done: waits in slices so the interpreter can deliver signals
    (KeyboardInterrupt) between them; ``ms`` < 0 waits forever. A timeout reports ``ms``, the
    whole wait (the runtime's message names only the last slice)."""
    remaining = ms
    while True:
        step = _SLICE_MS if remaining < 0 else min(remaining, _SLICE_MS)
        rc = fn(handle, step)
        if rc != timeout_code or remaining == step:
            break
        if remaining >= 0:
            remaining -= step
    if rc == timeout_code:
        backend().lib.aclGetRecentErrMsg()   # consume the slice's message
        rt.raise_error(rc, name, f"{what} did not complete within the timeout of {ms} ms")
    rt.check(rc, name)


#: callables ``hook(stream)`` run just before an owned stream is destroyed (the memory pool uses
#: it: blocks cached for the stream must wait for its queued work before another stream takes them)
_close_hooks: list = []


def _run_close_hooks(stream) -> None:
    for hook in _close_hooks:
        try:
            hook(stream)
        except Exception as e:  # closing must not fail because of a hook
            warnings.warn(f"acl_rt: stream close hook {hook!r} failed: {e}", RuntimeWarning)


class Event:
    """A marker in a stream. ``e.synchronize()`` waits for it, ``e.query()`` polls it, and for two
    timing events ``end - start`` (or ``start.elapsed_time(end)``) is the time between them in
    milliseconds."""

    __slots__ = ("_h", "_device", "_gen", "_timing", "_recorded", "__weakref__")

    def __copy__(self, *memo):
        raise TypeError("acl_rt.Event owns a runtime handle and cannot be copied")

    __deepcopy__ = __copy__

    def __reduce__(self):
        raise TypeError("acl_rt.Event owns a runtime handle and cannot be pickled")

    def __init__(self, *a, **k):
        raise TypeError("events are created with Device.create_event() or Stream.record()")

    @classmethod
    def _create(cls, device: Device, *, timing: bool = True) -> "Event":
        api = "Device.create_event"
        if not isinstance(timing, bool):
            raise TypeError(f"{api}: timing must be a bool, not {type(timing).__name__}")
        rt.activate(device._id, api)
        cell = ffi.new("aclrtEvent *")
        flags = _EVENT_SYNC | (_EVENT_TIME_LINE if timing else 0)
        rt.check(backend().lib.aclrtCreateEventWithFlag(cell, flags), "aclrtCreateEventWithFlag")
        self = object.__new__(cls)
        self._h = cell[0]
        self._device = device
        self._gen = rt.generation()
        self._timing = timing
        self._recorded = False
        return self

    @property
    def handle(self) -> int:
        return int(ffi.cast("uintptr_t", self._h)) if self._h is not None else 0

    @property
    def device(self) -> Device:
        return self._device

    @property
    def timing(self) -> bool:
        """Whether the event records timestamps."""
        return self._timing

    def __repr__(self):
        return f"<acl_rt.Event {self.handle:#x} on device {self._device._id}{'' if self._h is not None else ' (destroyed)'}>"

    def _handle(self, api):
        if self._h is None:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api, "the event was destroyed")
        if self._gen != rt._state.generation:
            raise InvalidHandleError(E.ACL_ERROR_RT_INVALID_HANDLE, api,
                                     "the event was created before acl_rt.finalize() and is no longer valid")
        rt.activate(self._device._id, api)
        return self._h

    def record(self, stream: Stream | None = None) -> "Event":
        """Record the event at the current end of ``stream`` (default: the current stream of the
        event's device).

        Raises:
            InvalidArgumentError: ``stream`` is on another device than the event.
        """
        api = "Event.record"
        stream = current_stream(self._device) if stream is None else _resolve_stream(stream, None, api)
        if stream._device is not self._device:
            raise InvalidArgumentError(E.ACL_ERROR_RT_STREAM_CONTEXT, api,
                                       f"the event is on device {self._device._id} but the "
                                       f"stream is on device {stream._device._id}")
        sh = stream._handle(api)
        rt.check(backend().lib.aclrtRecordEvent(self._handle(api), sh), "aclrtRecordEvent")
        self._recorded = True
        return self

    def synchronize(self, *, timeout: float | None = None) -> None:
        """Wait until the work before the latest record has finished.

        Raises:
            AclTimeoutError: not complete within ``timeout`` seconds.
        """
        api = "Event.synchronize"
        ms = _timeout_ms(timeout, api)
        h = self._handle(api)
        lib = backend().lib
        if lib.has("aclrtSynchronizeEventWithTimeout"):
            _wait_sliced(lib.aclrtSynchronizeEventWithTimeout, "aclrtSynchronizeEventWithTimeout", h, ms,
                         E.ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, f"event {self.handle:#x}")
        elif ms < 0:  # an older CANN: not interruptible
            rt.check(lib.aclrtSynchronizeEvent(h), "aclrtSynchronizeEvent")
        else:
            raise NotSupportedError(E.ACL_ERROR_API_NOT_SUPPORT, api,
                                    "this CANN version has no aclrtSynchronizeEventWithTimeout")

    sync = synchronize

    def query(self) -> bool:
        """``True`` when the latest record has completed (or the event was never recorded)."""
        out = ffi.new("aclrtEventRecordedStatus *")
        rt.check(backend().lib.aclrtQueryEventStatus(self._handle("Event.query"), out), "aclrtQueryEventStatus")
        return out[0] == _EVENT_COMPLETE

    @property
    def is_done(self) -> bool:
        return self.query()

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (``aclrtEventElapsedTime``); both must be timing
        events, recorded and complete.

        Raises:
            InvalidArgumentError: an event is not a timing event or was never recorded.
            NotReadyError: an event has not completed yet (ACL_ERROR_RT_EVENT_NOT_COMPLETE):
                call its :meth:`synchronize` first.
        """
        api = "Event.elapsed_time"
        if not isinstance(end, Event):
            raise TypeError(f"{api}: expected an acl_rt.Event, not {type(end).__name__}")
        self._handle(api), end._handle(api)
        if end._device is not self._device:
            raise InvalidArgumentError(E.ACL_ERROR_RT_STREAM_CONTEXT, api, f"the events are on different devices "
                                       f"({self._device._id} and {end._device._id})")
        for e, which in ((self, "start"), (end, "end")):
            if not e._timing:
                raise InvalidArgumentError(E.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, api,
                                           f"the {which} event was created with timing=False")
            if not e._recorded:
                raise InvalidArgumentError(E.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, api,
                                           f"the {which} event was never recorded")
        out = ffi.new("float *")
        rc = backend().lib.aclrtEventElapsedTime(out, self._handle(api), end._handle(api))
        if rc == E.ACL_ERROR_RT_EVENT_NOT_COMPLETE:   # say which, and what to do
            backend().lib.aclGetRecentErrMsg()
            which = [name for e, name in ((end, "end"), (self, "start")) if not e.query()] or ["end"]
            raise NotReadyError(rc, api, f"the {' and the '.join(which)} event{'s have' if len(which) > 1 else ' has'} "
                                f"not completed yet: call {' and '.join(w + '.synchronize()' for w in which)} "
                                "first (`end - start` and start.elapsed_time(end) need both events complete)")
        rt.check(rc, "aclrtEventElapsedTime")
        return float(out[0])

    def __sub__(self, other: "Event") -> float:
        """``end - start``: milliseconds between two recorded timing events."""
        if not isinstance(other, Event):
            return NotImplemented
        return other.elapsed_time(self)

    def close(self) -> None:
        """Destroy the event (``aclrtDestroyEvent``). Idempotent."""
        h, self._h = self._h, None
        if h is None or self._gen != rt._state.generation or not rt._state.ready:
            return
        rt.check(backend().lib.aclrtDestroyEvent(h), "aclrtDestroyEvent")

    destroy = close

    def __del__(self):
        try:
            if self._h is not None and self._gen == rt.generation() and rt.is_initialized():
                h, self._h = self._h, None
                rc = backend().lib.aclrtDestroyEvent(h)
                if rc:
                    warnings.warn(f"acl_rt: could not destroy event {int(ffi.cast('uintptr_t', h)):#x} "
                                  f"(ACL error {rc}); the handle is leaked", ResourceWarning)
        except Exception:
            pass


def _stack(device_id: int) -> list:
    tls = rt.thread_state()
    stacks = getattr(tls, "streams", None)
    if stacks is None:
        stacks = tls.streams = {}
    s = stacks.get(device_id)
    if s is None:
        s = stacks[device_id] = []
    return s


def current_stream(device=None) -> Stream:
    """The calling thread's current stream on ``device`` (default: the current device): the
    innermost open ``with stream:`` block's, else the device's default stream. A stream closed
    inside its block is never current: the enclosing block's stream (or the default) is."""
    tls = rt.thread_state().__dict__          # this thread's namespace (a plain dict: fast)
    dev_id = tls.get("device_id", 0) if device is None else Device(device)._id
    stacks = tls.get("streams")
    if stacks:
        s = stacks.get(dev_id)
        while s:
            top = s[-1]
            if top._h is not None and top._gen == rt._state.generation:
                return top
            s.pop()   # closed (or from before a finalize): never current; the enclosing block's is
    d = _defaults.get(dev_id)
    if d is not None and d._gen == rt._state.generation and rt._state.ready:
        return d
    d = _defaults[dev_id] = Stream._default(Device(dev_id))
    return d


#: device id -> that device's default Stream object (of the current init generation)
_defaults: dict = {}


def _resolve_stream(stream, device: Device | None, api: str) -> Stream:
    """``stream`` if given (type-checked, and on ``device`` when one is given), else the current
    stream of ``device`` (see :func:`accept_stream`)."""
    return accept_stream(stream, device, api)


def accept_stream(stream, device: Device | None = None, api: str = "acl_rt", *, handles: bool = False) -> Stream:
    """The one stream acceptor: what every ``stream=`` argument of canna may be, as a :class:`Stream`.

    Args:
        stream: ``None`` (the calling thread's current stream of ``device``); an
            :class:`acl_rt.Stream`; an object with ``__npu_stream__()`` (canna's stream protocol,
            the mirror of cuda.core's ``__cuda_stream__``: it returns ``(version, handle)``; a bare
            int handle is taken too); an object with an ``npu_stream`` attribute (a torch_npu
            ``torch.npu.Stream``: the ``aclrtStream`` as int, read at every call because torch_npu
            drains its task queue there); with ``handles=True`` also an ``aclrtStream`` handle as
            an int (``0``: the device's default stream), as DLPack's ``__dlpack__(stream=...)`` takes.
        device: the device the stream must be on (an :class:`acl_rt.Device` or None: any; a
            foreign handle is taken to be on ``device``, default the current device).
        api: the name used in error messages.

    A foreign handle is wrapped in a Stream that does not own it (closing it does nothing).

    Raises:
        TypeError: anything else (bools and negative ints included).
        InvalidArgumentError: an acl_rt.Stream of another device than ``device`` (107003,
            ACL_ERROR_RT_STREAM_CONTEXT).
    """
    if stream is None:
        return current_stream(device)
    if isinstance(stream, Stream):
        if device is not None and stream._device is not device:
            raise InvalidArgumentError(E.ACL_ERROR_RT_STREAM_CONTEXT, api,
                                       f"the stream is on device {stream._device._id} but the "
                                       f"memory is on device {Device(device)._id}")
        return stream
    handle = None
    proto = getattr(type(stream), "__npu_stream__", None)
    if proto is not None:
        got = proto(stream)
        handle = got[1] if isinstance(got, tuple) and len(got) == 2 else got
        what = f"{type(stream).__name__}.__npu_stream__()"
    elif hasattr(stream, "npu_stream") and not isinstance(stream, (int, str, bytes)):
        handle = stream.npu_stream
        what = f"{type(stream).__name__}.npu_stream"
    elif handles and isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise TypeError(f"{api}: stream must be an aclrtStream handle >= 0 (or None, an acl_rt.Stream, an "
                            f"object with __npu_stream__), got {stream}")
        handle, what = stream, "the stream handle"
    else:
        if handles:
            raise TypeError(f"{api}: stream must be None, an int stream handle, an acl_rt.Stream or an object "
                            f"with __npu_stream__, not {type(stream).__name__}")
        raise TypeError(f"{api}: stream must be an acl_rt.Stream or None, not {type(stream).__name__} (streams of "
                        "other libraries are taken through their __npu_stream__ protocol)")
    if isinstance(handle, bool) or not hasattr(handle, "__index__") or handle.__index__() < 0:
        raise TypeError(f"{api}: {what} must give an aclrtStream handle (an int >= 0), got {handle!r}")
    handle = handle.__index__()
    dev = Device(rt.current_device_id()) if device is None else Device(device)
    d = dev.default_stream
    if handle == 0 or handle == d._id:
        return d
    return Stream._wrap(dev, ffi.cast("aclrtStream", handle), False, 0)


def synchronize(device=None) -> None:
    """Wait for all work on ``device`` (default: the current device). See :meth:`Device.synchronize`."""
    Device(device).synchronize()
