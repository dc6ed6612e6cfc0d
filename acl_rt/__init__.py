"""acl_rt — canna's runtime: a Pythonic binding of AscendCL (Huawei Ascend's runtime API).

Devices, streams, events and memory, on a real CANN install or on canna's simulator (chosen by
``CANNA_BACKEND``; see :func:`backend_info`)::

    import acl_rt
    dev = acl_rt.Device(0)
    s = dev.create_stream()
    buf = acl_rt.alloc(1024, stream=s)
    buf.copy_from(b"\\x01" * 1024, stream=s)
    start = s.record(); ...; end = s.record(); end.synchronize(); print(end - start, "ms")

The runtime initializes itself on first use and finalizes at exit. Every failure raises an
:class:`AclError` subclass carrying the ACL code, its name and the runtime's message.
"""
from ._constants import AclnnStatus, ErrorCode, EventFlag, MemcpyKind, StreamFlag
from ._errors import (AclError, AclTimeoutError, BackendNotFoundError, ContextError, DeviceError,
                      ForkedProcessError, InvalidArgumentError, InvalidHandleError, KernelError,
                      NotInitializedError, NotReadyError, NotSupportedError, OutOfMemoryError,
                      ResourceExhaustedError, error_name)
from ._runtime import backend_info, device_count, finalize, init, is_initialized
from ._device import Device, DeviceProperties, MemInfo, Utilization, current_device
from ._stream import Event, Stream, current_stream, synchronize
from ._memory import DeviceBuffer, DeviceMemoryResource, HostBuffer, MemoryResource, alloc, alloc_host
from ._pool import (DebugPrintHook, MemoryHook, MemoryPool, empty_cache, get_memory_limit, max_memory_allocated,
                    max_memory_reserved, memory_allocated, memory_reserved, memory_snapshot, memory_stats,
                    memory_stats_as_nested_dict, memory_summary, reset_accumulated_memory_stats,
                    reset_peak_memory_stats, set_memory_limit)

from ._hccl import (Communicator, HcclError, HcclTimeoutError, hccl_get_root_info, hccl_stats,
                    root_info_from_file, root_info_from_store)
from ._hccl import group as hccl_group

from . import monitor

__version__ = "0.1.0"

__all__ = [
    "Communicator", "HcclError", "HcclTimeoutError", "hccl_get_root_info", "hccl_group", "hccl_stats",
    "root_info_from_file", "root_info_from_store",
    "AclError", "AclTimeoutError", "BackendNotFoundError", "ContextError", "DeviceError",
    "ForkedProcessError", "InvalidArgumentError", "InvalidHandleError", "KernelError",
    "NotInitializedError", "NotReadyError", "NotSupportedError", "OutOfMemoryError", "ResourceExhaustedError",
    "error_name",
    "backend_info", "device_count", "finalize", "init", "is_initialized",
    "Device", "DeviceProperties", "MemInfo", "Utilization", "current_device",
    "Event", "Stream", "current_stream", "synchronize",
    "DeviceBuffer", "DeviceMemoryResource", "HostBuffer", "MemoryResource", "alloc", "alloc_host",
    "MemoryPool", "MemoryHook", "DebugPrintHook", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
    "memory_snapshot", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "set_memory_limit",
    "get_memory_limit", "monitor", "ErrorCode", "AclnnStatus", "MemcpyKind", "StreamFlag", "EventFlag",
]
