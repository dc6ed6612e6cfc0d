"""acl_rt.lowlevel — the one seam between acl_rt and the canna layers built on it.

``kernels`` (the op library and RawKernel) and canna_dl's core (``canna_dl/_rt.py``) need more
than acl_rt's object API: the loaded libraries and their cffi ``ffi`` to call AscendCL / aclnn
functions with raw handles, the runtime session (is it initialized, which generation, make a
device's context current), error checking of raw return codes, stream handles, and keeping
objects alive until a stream has run past a point. This module is that surface, and the only
acl_rt module they import besides ``acl_rt`` itself (an import-linter contract in pyproject.toml
checks it: ``tests/test_layers.py``). acl_rt's private modules may change freely behind it.

It is canna's internal interface, not a user API: names are stable for the packages of this
repository, with no deprecation period. Users call ``acl_rt``'s public functions and objects.

Contents:

- libraries: :func:`backend` (``.lib``: the runtime library, ``.is_sim``), :func:`op_library`
  (the aclnn libraries), :data:`ffi` (the cffi FFI of every declaration in ``acl_rt/_cdef``);
- session: :data:`state` (``.ready``, ``.generation``: read them for a cheap "still the same
  session?" check), :func:`ensure`, :func:`is_initialized`, :func:`generation`, :func:`on_finalize`
  (a hook run at the start of every finalize),
  :func:`set_host_team` (lend the simulator this thread's framework thread team for kernel blocks),
  :func:`activate` (make a device's context current on this thread; returns its record with
  ``.default_stream``), :func:`current_device_id`, :func:`thread_state`;
- errors: :func:`check` (raise the :class:`acl_rt.AclError` subclass for a non-zero code),
  :func:`raise_error`;
- streams: :class:`Stream`, :func:`current_stream`, :func:`accept_stream` (the one acceptor of
  ``stream=`` arguments: None, an acl_rt.Stream, an object with ``__npu_stream__`` or torch_npu's
  ``npu_stream``, and raw handles where DLPack passes them); :data:`current_epoch_capsule` (a
  ``const uint64_t *`` in a capsule named ``acl_rt._native.current_epoch``: a counter that moves
  whenever anything :func:`current_stream` answers from changes -- a ``with stream:`` block, the
  current device or context, a stream destroyed, init / finalize / fork --, so a C caller may
  remember a thread's resolved current stream while it stays put; ``acl_rt/_native/current.c``);
- lifetimes: :func:`hold` (keep an object alive until the work queued so far on a stream has run:
  a kernel's operands, the host side of an asynchronous copy), :func:`pending_holds`;
- named constants, generated from the ``acl_rt/_cdef`` headers (:mod:`acl_rt._constants`):
  :class:`ErrorCode`, :class:`AclnnStatus`, :class:`MemcpyKind`, :class:`StreamFlag`,
  :class:`EventFlag`, :class:`StreamStatus`, :class:`EventRecordedStatus`, :class:`LaunchKernelAttrId`,
  :class:`DataType`, :class:`Format` (aclnn's element types and layouts).
"""
from __future__ import annotations

from ._lib import backend, ffi, op_library
from ._runtime import (_state as state, activate, check, current_device_id, ensure, generation, is_initialized,
                       on_finalize, raise_error, set_host_team, thread_state)
from ._constants import (AclnnStatus, DataType, ErrorCode, EventFlag, EventRecordedStatus, Format, LaunchKernelAttrId,
                         MemcpyKind, StreamFlag, StreamStatus)
from ._keepalive import hold, pending as pending_holds
from ._native import current_epoch_capsule
from ._stream import Stream, accept_stream, current_stream

__all__ = ["backend", "ffi", "op_library", "state", "ensure", "is_initialized", "generation", "activate",
           "on_finalize", "set_host_team", "current_device_id", "thread_state", "check", "raise_error", "Stream", "current_stream", "accept_stream",
           "current_epoch_capsule", "hold", "pending_holds",
           "ErrorCode", "AclnnStatus", "MemcpyKind", "StreamFlag", "EventFlag", "StreamStatus", "EventRecordedStatus",
           "LaunchKernelAttrId", "DataType", "Format"]
