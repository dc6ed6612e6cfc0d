"""AscendCL's named constants as Python enums, generated from the C declarations in ``acl_rt/_cdef``.

The headers are the one definition (the simulator compiles them, cffi reads them and
``tests/test_abi.py`` checks them against CANN's): this module parses their ``#define`` and
``typedef enum`` values once, at import, and builds:

- :class:`ErrorCode` — every ``ACL_ERROR_*`` code of ``rt_errors.h`` (AscendCL's
  ``acl_base_rt.h`` / ``rt_error_codes.h``), an ``IntEnum``; values with two names keep the first
  as the canonical member and the others as aliases;
- :class:`AclnnStatus` — the ``ACLNN_*`` status codes of the op libraries (``nn_errors.h``);
- :class:`MemcpyKind` — ``aclrtMemcpyKind`` (``ACL_MEMCPY_HOST_TO_DEVICE``, ...);
- :class:`StreamFlag` — the ``ACL_STREAM_*`` flags of ``aclrtCreateStreamWithConfig`` (an
  ``IntFlag``); :class:`EventFlag` — the ``ACL_EVENT_*`` flags of ``aclrtCreateEventWithFlag``;
- :class:`StreamStatus`, :class:`EventRecordedStatus` — what ``aclrtStreamQuery`` /
  ``aclrtQueryEventStatus`` report;
- :class:`LaunchKernelAttrId` — ``aclrtLaunchKernelAttrId`` (kernel launch attributes);
- :class:`DataType`, :class:`Format` — aclnn's ``aclDataType`` and ``aclFormat`` (``nn_types.h``).

Member names are CANN's, unchanged (``ErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION == 207001``).
"""
from __future__ import annotations

import enum
import re
from pathlib import Path

__all__ = ["ErrorCode", "AclnnStatus", "MemcpyKind", "StreamFlag", "EventFlag", "StreamStatus",
           "EventRecordedStatus", "LaunchKernelAttrId", "DataType", "Format", "defines", "enums"]

_CDEF = Path(__file__).resolve().parent / "_cdef"
_INT = r"(-?(?:0[xX][0-9a-fA-F]+|\d+))[uUlL]*"


def _int(text: str) -> int:
    return int(text, 0)


def defines(header: str) -> dict[str, int]:
    """The integer ``#define NAME value`` lines of ``acl_rt/_cdef/<header>``, in order."""
    text = (_CDEF / header).read_text()
    return {m[0]: _int(m[1]) for m in re.findall(rf"^#define\s+(\w+)\s+{_INT}\s*(?:/[*/].*)?$", text, re.M)}


def enums(header: str) -> dict[str, dict[str, int]]:
    """The ``typedef enum [tag] { ... } name;`` declarations of ``acl_rt/_cdef/<header>``: name ->
    {member: value} (members without ``= value`` count up from the previous one, as in C)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", (_CDEF / header).read_text(), flags=re.S)
    out: dict[str, dict[str, int]] = {}
    for body, name in re.findall(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        members, nxt = {}, 0
        for item in (x.strip() for x in body.split(",")):
            if not item:
                continue
            key, _, value = (p.strip() for p in item.partition("="))
            nxt = (members[value] if value in members else _int(re.sub(r"[uUlL]+$", "", value))) if value else nxt
            members[key] = nxt
            nxt += 1
        out[name] = members
    return out


def _prefixed(values: dict[str, int], prefix: str, exclude: tuple[str, ...] = ()) -> dict[str, int]:
    return {k: v for k, v in values.items() if k.startswith(prefix) and not k.startswith(exclude)}


_RT_DEFINES = defines("rt_types.h")
_RT_ENUMS = enums("rt_types.h")

ErrorCode = enum.IntEnum("ErrorCode", _prefixed(defines("rt_errors.h"), "ACL_ERROR_"), module=__name__)
ErrorCode.__doc__ = "AscendCL error codes (``aclError``), from ``acl_rt/_cdef/rt_errors.h``."

AclnnStatus = enum.IntEnum("AclnnStatus", _prefixed(defines("nn_errors.h"), "ACLNN_"), module=__name__)
AclnnStatus.__doc__ = "aclnn status codes (``aclnnStatus``), from ``acl_rt/_cdef/nn_errors.h``."

MemcpyKind = enum.IntEnum("MemcpyKind", _RT_ENUMS["aclrtMemcpyKind"], module=__name__)
MemcpyKind.__doc__ = "``aclrtMemcpyKind``, from ``acl_rt/_cdef/rt_types.h``."

StreamFlag = enum.IntFlag("StreamFlag", _prefixed(_RT_DEFINES, "ACL_STREAM_"), module=__name__)
StreamFlag.__doc__ = "``aclrtCreateStreamWithConfig`` flags (``ACL_STREAM_*``), from ``acl_rt/_cdef/rt_types.h``."

EventFlag = enum.IntFlag("EventFlag", _prefixed(_RT_DEFINES, "ACL_EVENT_"), module=__name__)
EventFlag.__doc__ = "``aclrtCreateEventWithFlag`` flags (``ACL_EVENT_*``), from ``acl_rt/_cdef/rt_types.h``."

StreamStatus = enum.IntEnum("StreamStatus", _RT_ENUMS["aclrtStreamStatus"], module=__name__)
StreamStatus.__doc__ = "``aclrtStreamStatus`` (``aclrtStreamQuery``), from ``acl_rt/_cdef/rt_types.h``."

EventRecordedStatus = enum.IntEnum("EventRecordedStatus", _RT_ENUMS["aclrtEventRecordedStatus"], module=__name__)
EventRecordedStatus.__doc__ = ("``aclrtEventRecordedStatus`` (``aclrtQueryEventStatus``), from "
                               "``acl_rt/_cdef/rt_types.h``.")

LaunchKernelAttrId = enum.IntEnum("LaunchKernelAttrId", _RT_ENUMS["aclrtLaunchKernelAttrId"], module=__name__)
LaunchKernelAttrId.__doc__ = "``aclrtLaunchKernelAttrId``, from ``acl_rt/_cdef/rt_types.h``."

_NN_ENUMS = enums("nn_types.h")

DataType = enum.IntEnum("DataType", _NN_ENUMS["aclDataType"], module=__name__)
DataType.__doc__ = "``aclDataType`` (tensor element types of aclnn), from ``acl_rt/_cdef/nn_types.h``."

Format = enum.IntEnum("Format", _NN_ENUMS["aclFormat"], module=__name__)
Format.__doc__ = "``aclFormat`` (tensor layouts of aclnn), from ``acl_rt/_cdef/nn_types.h``."
