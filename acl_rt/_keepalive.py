"""Keeping objects alive until a stream has run past a point (the one implementation).

Work queued on a stream may still read (or write) memory after the Python call that queued it
returns: the host side of an asynchronous copy, a kernel's operands. Whoever queues it passes
what must stay alive to :func:`hold`, which records an event on the stream and keeps the object
until the event has completed (PyTorch's pinned-memory allocator does the same with events).
Completed entries are dropped at later holds and by :func:`pending`, never by waiting. Events are
reused, per device context; a runtime session that was finalized drops everything it held.

Used by acl_rt's copies (``_memory.py``), kernels' ops and RawKernel launches (through
:mod:`acl_rt.lowlevel`).
"""
from __future__ import annotations

import collections
import threading

from . import _runtime as rt
from ._constants import EventRecordedStatus, StreamStatus
from ._lib import backend, ffi

__all__ = ["hold", "pending"]

_pending: collections.deque = collections.deque()   # (generation, context, event handle, keepalive)
_event_pool: dict = {}                               # context record -> [(generation, event handle)]
_pending_lock = threading.Lock()

_STREAM_COMPLETE = int(StreamStatus.ACL_STREAM_STATUS_COMPLETE)
_EVENT_COMPLETE = int(EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_COMPLETE)
_stream_status = ffi.new("aclrtStreamStatus *")    # used under _pending_lock
_event_status = ffi.new("aclrtEventRecordedStatus *")


def hold(stream_handle, keep, lib=None) -> None:
    """Keep ``keep`` alive until the work queued so far on the stream has run.

    Args:
        stream_handle: the ``aclrtStream`` (cdata), of the context current on this thread (the
            caller has just queued work on it, so it is).
        keep: any object; referenced until the stream passes this point.
        lib: the runtime library (default: the loaded backend's).

    Never raises for the runtime: when no event can be created or recorded it waits for the
    stream instead of risking a dangling read."""
    if lib is None:
        lib = backend().lib
    gen = rt.generation()
    ctx = rt._tls.__dict__.get("ctx")
    with _pending_lock:
        if _pending:
            _reap(lib, gen)
        st = _stream_status
        if lib.aclrtStreamQuery(stream_handle, st) == 0 and st[0] == _STREAM_COMPLETE:
            return   # already done (it ran inline): nothing to hold
        ev = None
        free = _event_pool.get(ctx)
        while free:
            g, e = free.pop()
            if g == gen:
                ev = e
                break
        if ev is None:
            cell = ffi.new("aclrtEvent *")
            if lib.aclrtCreateEvent(cell) != 0:
                lib.aclGetRecentErrMsg()
                lib.aclrtSynchronizeStream(stream_handle)   # no event: wait instead of risking a dangling read
                lib.aclGetRecentErrMsg()
                return
            ev = cell[0]
        if lib.aclrtRecordEvent(ev, stream_handle) != 0:
            lib.aclGetRecentErrMsg()
            lib.aclrtSynchronizeStream(stream_handle)
            lib.aclGetRecentErrMsg()
            _event_pool.setdefault(ctx, []).append((gen, ev))
            return
        _pending.append((gen, ctx, ev, keep))


def _reap(lib, gen) -> None:
    st = _event_status
    while _pending:
        g, ctx, ev, _keep = _pending[0]
        if g != gen:
            _pending.popleft()
            continue
        if lib.aclrtQueryEventStatus(ev, st) != 0:
            lib.aclGetRecentErrMsg()
        elif st[0] != _EVENT_COMPLETE:
            return
        _pending.popleft()
        _event_pool.setdefault(ctx, []).append((g, ev))


def pending() -> int:
    """How many objects are still held because their stream may not have passed (after dropping
    the completed ones; for tests)."""
    with _pending_lock:
        if _pending and rt.is_initialized():
            _reap(backend().lib, rt.generation())
        elif _pending:
            _pending.clear()
        return len(_pending)
