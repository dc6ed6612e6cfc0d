"""One exception hierarchy for everything the runtime reports (docs/DESIGN.md §4).

Every failure of an AscendCL call becomes an :class:`AclError` carrying the ACL code, its
symbolic name (from AscendCL's ``acl_base_rt.h`` / ``rt_error_codes.h``, see
``acl_rt/_cdef/rt_errors.h``), the API that failed and the runtime's own message
(``aclGetRecentErrMsg()``). Subclasses also derive from the matching built-in exception so
ordinary ``except MemoryError`` / ``except ValueError`` code keeps working.
"""
from __future__ import annotations

import builtins

from ._constants import AclnnStatus, ErrorCode as E

__all__ = [
    "AclError",
    "OutOfMemoryError",
    "InvalidArgumentError",
    "InvalidHandleError",
    "NotInitializedError",
    "ContextError",
    "AclTimeoutError",
    "DeviceError",
    "KernelError",
    "NotSupportedError",
    "NotReadyError",
    "ResourceExhaustedError",
    "ForkedProcessError",
    "BackendNotFoundError",
    "error_name",
]


def _load_code_names() -> dict[int, str]:
    # the headers' names (acl_rt/_constants.py reads them): runtime codes first, then the aclnn
    # status codes of the op libraries; a value with two names keeps its first
    names: dict[int, str] = {}
    for enum in (E, AclnnStatus):
        for name, member in enum.__members__.items():
            if name.startswith(("ACL_ERROR_", "ACLNN_ERR_")):
                names.setdefault(int(member), name)
    return names


_CODE_NAMES = _load_code_names()
_NAME_CODES = {v: k for k, v in _CODE_NAMES.items()}


def error_name(code: int) -> str:
    """The symbolic name of an ACL error code (``207001`` -> ``"ACL_ERROR_RT_MEMORY_ALLOCATION"``)."""
    return _CODE_NAMES.get(code, f"ACL_ERROR_UNKNOWN_{code}")


def code_of(name: str) -> int:
    """The value of a symbolic ACL error name (the inverse of :func:`error_name`)."""
    return _NAME_CODES[name]


class AclError(RuntimeError):
    """An AscendCL call failed.

    Attributes:
        code: the ACL error code (int), e.g. 207001.
        name: its symbolic name, e.g. ``"ACL_ERROR_RT_MEMORY_ALLOCATION"``.
        api: the function that failed (an AscendCL name, or the canna function that checked it).
        message: the runtime's explanation (``aclGetRecentErrMsg()``) or canna's, may be empty.
    """

    def __init__(self, code: int, api: str, message: str | None = None):
        self.code = int(code)
        self.name = error_name(self.code)
        self.api = api
        self.message = message or ""
        text = f"{api} failed: {self.name} ({self.code})"
        if self.message:
            text += f": {self.message}"
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.code, self.api, self.message))


class OutOfMemoryError(AclError, MemoryError):
    """Device memory is exhausted (ACL_ERROR_RT_MEMORY_ALLOCATION 207001 and friends)."""


class InvalidArgumentError(AclError, ValueError):
    """An argument was rejected (ACL_ERROR_INVALID_PARAM 100000, ACL_ERROR_RT_PARAM_INVALID 107000,
    an invalid device id, an unaligned or foreign address, ...)."""


class InvalidHandleError(InvalidArgumentError):
    """A stream, event, context or buffer handle is unknown, destroyed, or from before
    :func:`acl_rt.finalize` (ACL_ERROR_RT_INVALID_HANDLE 107017)."""


class NotInitializedError(AclError):
    """The runtime is not initialized, or was finalized (ACL_ERROR_UNINITIALIZE 100001)."""


class ContextError(AclError):
    """No current context on this thread, or a stream used in the wrong context (107002, 107003)."""


class AclTimeoutError(AclError, builtins.TimeoutError):
    """A synchronize with a timeout expired (507046, 507047, 107019, 107020, 507012)."""


class DeviceError(AclError):
    """The device or a stream reported a fault (the 5xxxxx class), usually asynchronously: it
    surfaces at the next synchronize of the stream that ran the failing task."""


class KernelError(DeviceError):
    """A kernel faulted on an AI core / vector core (507014-507016, 507034-507036, 507042-507045)."""


class NotReadyError(AclError):
    """Work asked about has not completed yet, e.g. the elapsed time of an event that is still
    pending (ACL_ERROR_RT_EVENT_NOT_COMPLETE 507006, ACL_ERROR_RT_STREAM_NOT_COMPLETE 507004; CUDA's
    ``cudaErrorNotReady``). Not a fault: synchronize the event or stream first."""


class NotSupportedError(AclError, NotImplementedError):
    """The loaded CANN version or device does not provide this function or feature."""


class ResourceExhaustedError(AclError):
    """A runtime resource other than memory ran out: streams (1984 per device), events,
    notifies, models (ACL_ERROR_RT_NO_STREAM_RESOURCE 207008 and the other 2070xx codes)."""


class ForkedProcessError(AclError):
    """The runtime was initialized in a parent process; a ``fork()``-ed child cannot use it
    (as on the device: AscendCL forbids fork after aclInit). Use the ``spawn`` start method."""


class BackendNotFoundError(RuntimeError):
    """``CANNA_BACKEND=ascend`` was requested but no CANN runtime library was found.

    Attributes:
        searched: list of ``(place, result)`` pairs, every place that was tried.
    """

    def __init__(self, message: str, searched: list[tuple[str, str]]):
        self.searched = list(searched)
        super().__init__(message)


_OOM = {E.ACL_ERROR_BAD_ALLOC, E.ACL_ERROR_RT_MEMORY_ALLOCATION, E.ACL_ERROR_RT_DEVICE_OOM,
        245000}   # the first of the graph engine's (GE) memory codes, which rt_errors.h does not declare
_INVALID = {E.ACL_ERROR_INVALID_PARAM, E.ACL_ERROR_RT_PARAM_INVALID, E.ACL_ERROR_RT_INVALID_DEVICEID,
            E.ACL_ERROR_RT_ADDR_UNALIGNED, E.ACL_ERROR_RT_INVALID_MEMORY_TYPE, E.ACL_ERROR_RT_INVALID_MALLOC_TYPE,
            E.ACL_ERROR_INVALID_DEVICE, E.ACL_ERROR_MEMORY_ADDRESS_UNALIGNED, E.ACL_ERROR_RT_MEMORY_FREE,
            AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, AclnnStatus.ACLNN_ERR_PARAM_INVALID,
            E.ACL_ERROR_UNSUPPORTED_DATA_TYPE, E.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID}
_HANDLE = {E.ACL_ERROR_RT_INVALID_HANDLE, E.ACL_ERROR_INVALID_RESOURCE_HANDLE}
_CONTEXT = {E.ACL_ERROR_RT_CONTEXT_NULL, E.ACL_ERROR_RT_STREAM_CONTEXT}
_TIMEOUT = {E.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, E.ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, E.ACL_ERROR_RT_WAIT_TIMEOUT,
            E.ACL_ERROR_RT_TASK_TIMEOUT, E.ACL_ERROR_RT_REPORT_TIMEOUT}
_KERNEL = {E.ACL_ERROR_RT_AICORE_TIMEOUT, E.ACL_ERROR_RT_AICORE_EXCEPTION, E.ACL_ERROR_RT_AICORE_TRAP_EXCEPTION,
           E.ACL_ERROR_RT_VECTOR_CORE_TIMEOUT, E.ACL_ERROR_RT_VECTOR_CORE_EXCEPTION,
           E.ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION, E.ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW,
           E.ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW, E.ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW,
           E.ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW}
_UNSUPPORTED = {E.ACL_ERROR_API_NOT_SUPPORT, E.ACL_ERROR_FEATURE_UNSUPPORTED, E.ACL_ERROR_RT_FEATURE_NOT_SUPPORT}
_RESOURCE = {E.ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, E.ACL_ERROR_RT_NO_EVENT_RESOURCE, E.ACL_ERROR_RT_NO_STREAM_RESOURCE,
             E.ACL_ERROR_RT_NO_NOTIFY_RESOURCE, E.ACL_ERROR_RT_NO_MODEL_RESOURCE, E.ACL_ERROR_RT_NO_CDQ_RESOURCE,
             E.ACL_ERROR_RT_OVER_LIMIT}
_NOT_READY = {E.ACL_ERROR_RT_STREAM_NOT_COMPLETE, E.ACL_ERROR_RT_EVENT_NOT_COMPLETE}


def error_class(code: int) -> type[AclError]:
    """The :class:`AclError` subclass used for an ACL code."""
    if code in _OOM:
        return OutOfMemoryError
    if code in _HANDLE:
        return InvalidHandleError
    if code in _INVALID:
        return InvalidArgumentError
    if code in (E.ACL_ERROR_UNINITIALIZE, E.ACL_ERROR_REPEAT_FINALIZE):
        return NotInitializedError
    if code in _CONTEXT:
        return ContextError
    if code in _TIMEOUT:
        return AclTimeoutError
    if code in _KERNEL:
        return KernelError
    if code in _UNSUPPORTED:
        return NotSupportedError
    if code == E.ACL_ERROR_RT_NO_PERMISSION:
        return ForkedProcessError
    if code in _RESOURCE:
        return ResourceExhaustedError
    if code in _NOT_READY:
        return NotReadyError
    if code >= E.ACL_ERROR_INTERNAL_ERROR:   # 500000 starts the 5xxxxx class: internal and hardware errors
        return DeviceError
    return AclError
