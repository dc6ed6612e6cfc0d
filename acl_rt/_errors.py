"""One exception hierarchy for everything the runtime reports (docs/DESIGN.md §4).

Every failure of an AscendCL call becomes an :class:`AclError` carrying the ACL code, its
symbolic name (from AscendCL's ``acl_base_rt.h`` / ``rt_error_codes.h``, see
``acl_rt/_cdef/rt_errors.h``), the API that failed and the runtime's own message
(``aclGetRecentErrMsg()``). Subclasses also derive from the matching built-in exception so
ordinary ``except MemoryError`` / ``except ValueError`` code keeps working.
"""
from __future__ import annotations

import builtins
import re
from pathlib import Path

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
    cdef = Path(__file__).resolve().parent / "_cdef"
    names: dict[int, str] = {}
    for name, value in re.findall(r"^#define\s+(ACL_ERROR_\w+)\s+(\d+)", (cdef / "rt_errors.h").read_text(), re.M):
        names.setdefault(int(value), name)
    names.update({161001: "ACLNN_ERR_PARAM_NULLPTR", 161002: "ACLNN_ERR_PARAM_INVALID",
                  361001: "ACLNN_ERR_RUNTIME_ERROR", 561000: "ACLNN_ERR_INNER"})
    nn = cdef / "nn_errors.h"   # the aclnn status codes (op libraries)
    if nn.exists():
        for name, value in re.findall(r"^#define\s+(ACLNN_ERR_\w+)\s+(\d+)", nn.read_text(), re.M):
            names.setdefault(int(value), name)
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


_OOM = {200000, 207001, 207018, 245000}
_INVALID = {100000, 107000, 107001, 107008, 107016, 107018, 200002, 200003, 207002, 161001, 161002,
            100026, 107006}
_HANDLE = {107017, 200005}
_CONTEXT = {107002, 107003}
_TIMEOUT = {507046, 507047, 107019, 107020, 507012}
_KERNEL = {507014, 507015, 507016, 507034, 507035, 507036, 507042, 507043, 507044, 507045}
_UNSUPPORTED = {200001, 200006, 207000}
_RESOURCE = {207005, 207007, 207008, 207009, 207010, 207011, 207012}
_NOT_READY = {507004, 507006}


def error_class(code: int) -> type[AclError]:
    """The :class:`AclError` subclass used for an ACL code."""
    if code in _OOM:
        return OutOfMemoryError
    if code in _HANDLE:
        return InvalidHandleError
    if code in _INVALID:
        return InvalidArgumentError
    if code in (100001, 100037):
        return NotInitializedError
    if code in _CONTEXT:
        return ContextError
    if code in _TIMEOUT:
        return AclTimeoutError
    if code in _KERNEL:
        return KernelError
    if code in _UNSUPPORTED:
        return NotSupportedError
    if code == 207006:
        return ForkedProcessError
    if code in _RESOURCE:
        return ResourceExhaustedError
    if code in _NOT_READY:
        return NotReadyError
    if code >= 500000:
        return DeviceError
    return AclError
