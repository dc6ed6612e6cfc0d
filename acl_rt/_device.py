"""Devices: per-id singletons with properties, memory and utilization queries, and factories
for streams, events and memory (object model after NVIDIA's ``cuda.core``)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple

from . import _runtime as rt
from ._constants import ErrorCode as E
from ._lib import backend, ffi

__all__ = ["Device", "DeviceProperties", "MemInfo", "Utilization", "current_device", "device_count"]

device_count = rt.device_count

# aclrtDevAttr values (acl_rt.h)
_ATTR_AICPU, _ATTR_AICORE, _ATTR_CUBE, _ATTR_VECTOR, _ATTR_MEM, _ATTR_L2 = 1, 101, 102, 201, 301, 302


class MemInfo(NamedTuple):
    """Device memory from ``aclrtGetMemInfo``: ``free`` and ``total`` in bytes."""
    free: int
    total: int


class Utilization(NamedTuple):
    """``aclrtGetDeviceUtilizationRate`` in percent (0..100); ``None`` where the device reports
    the value as unsupported (-1; ``memory`` is always unsupported per the AscendCL docs)."""
    cube: int | None
    vector: int | None
    aicpu: int | None
    memory: int | None

    @property
    def aicore(self) -> int | None:
        """The AI-core figure npu-smi shows: the busier of cube and vector."""
        vals = [v for v in (self.cube, self.vector) if v is not None]
        return max(vals) if vals else None


@dataclass(frozen=True)
class DeviceProperties:
    """Static properties of a device (``aclrtGetDeviceInfo``, ``aclrtGetSocName``).

    Memory sizes are in bytes. A value the runtime does not report is ``None``."""
    device_id: int
    soc_name: str | None
    ai_core_num: int | None
    cube_core_num: int | None
    vector_core_num: int | None
    aicpu_core_num: int | None
    total_memory: int | None
    l2_cache_size: int | None


class Device:
    """An NPU (``Device(i)`` always returns the same object for ``i``).

    ``Device()`` is the calling thread's current device. ``with dev:`` makes ``dev`` current for
    the block and restores the previous one. Thread-local, like AscendCL contexts.

    Raises:
        TypeError: the id is not an int.
        InvalidArgumentError: the id is out of range (the message gives the device count).
    """

    __slots__ = ("_id", "_props", "_mr", "__weakref__")
    _instances: dict[int, "Device"] = {}
    _lock = threading.Lock()

    def __new__(cls, device_id: int | None = None):
        if device_id is None:
            device_id = rt.current_device_id()
        elif isinstance(device_id, Device):
            return device_id
        else:
            device_id = rt.validate_device_id(device_id, "acl_rt.Device")
        dev = cls._instances.get(device_id)
        if dev is None:
            with cls._lock:
                dev = cls._instances.get(device_id)
                if dev is None:
                    dev = object.__new__(cls)
                    dev._id = device_id
                    dev._props = None
                    dev._mr = None
                    cls._instances[device_id] = dev
        return dev

    def __reduce__(self):
        return (Device, (self._id,))

    @property
    def device_id(self) -> int:
        """The device's index (as in ``aclrtSetDevice``)."""
        return self._id

    id = device_id

    def __index__(self) -> int:
        return self._id

    def __repr__(self):
        return f"<acl_rt.Device {self._id}>"

    def set_current(self) -> None:
        """Make this the calling thread's current device (``aclrtSetDevice`` semantics)."""
        rt.activate(self._id, "Device.set_current")
        rt.set_current_device_id(self._id)

    def __enter__(self):
        prev = rt.current_device_id()
        self.set_current()
        enter_block(self, prev)
        return self

    def __exit__(self, *exc):
        prev = exit_block(self)
        if prev is not None:
            Device(prev).set_current()
        return False

    # -- properties --------------------------------------------------------------------------
    def _attr(self, attr: int) -> int | None:
        out = ffi.new("int64_t *")
        if backend().lib.aclrtGetDeviceInfo(self._id, attr, out) != 0:
            backend().lib.aclGetRecentErrMsg()  # consume the message of an unsupported attribute
            return None
        return int(out[0])

    @property
    def properties(self) -> DeviceProperties:
        """Static properties (cached after the first query)."""
        p = self._props
        if p is None:
            rt.activate(self._id, "Device.properties")
            name = backend().lib.aclrtGetSocName()
            p = self._props = DeviceProperties(
                device_id=self._id, soc_name=ffi.string(name).decode() if name != ffi.NULL else None,
                ai_core_num=self._attr(_ATTR_AICORE), cube_core_num=self._attr(_ATTR_CUBE),
                vector_core_num=self._attr(_ATTR_VECTOR), aicpu_core_num=self._attr(_ATTR_AICPU),
                total_memory=self._attr(_ATTR_MEM), l2_cache_size=self._attr(_ATTR_L2))
        return p

    @property
    def soc_name(self) -> str | None:
        """The SoC name, e.g. ``"Ascend910B1"`` (``aclrtGetSocName``)."""
        return self.properties.soc_name

    @property
    def name(self) -> str:
        """Display name as npu-smi shows it, e.g. ``"910B1"``."""
        soc = self.soc_name or "unknown"
        return soc[len("Ascend"):] if soc.startswith("Ascend") else soc

    @property
    def total_memory(self) -> int | None:
        """Total device memory in bytes (``ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE``)."""
        return self.properties.total_memory

    def mem_info(self) -> MemInfo:
        """Free and total device memory in bytes, right now (``aclrtGetMemInfo(ACL_HBM_MEM)``)."""
        rt.activate(self._id, "Device.mem_info")
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        rt.check(backend().lib.aclrtGetMemInfo(1, free, total), "aclrtGetMemInfo")
        return MemInfo(int(free[0]), int(total[0]))

    def utilization(self) -> Utilization:
        """Current utilization in percent (``aclrtGetDeviceUtilizationRate``)."""
        rt.ensure("Device.utilization")
        info = ffi.new("aclrtUtilizationInfo *")
        rt.check(backend().lib.aclrtGetDeviceUtilizationRate(self._id, info), "aclrtGetDeviceUtilizationRate")

        def pct(v):
            return None if v < 0 else int(v)
        return Utilization(pct(info.cubeUtilization), pct(info.vectorUtilization),
                           pct(info.aicpuUtilization), pct(info.memoryUtilization))

    # -- work ----------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for all work on every stream of this device (``aclrtSynchronizeDevice``).

        Raises:
            DeviceError: an asynchronous fault of a stream of this device (reported once).
            Exception: an exception raised by a host function of a stream of this device.
        """
        from ._stream import _wait_sliced, raise_device_host_errors
        rt.activate(self._id, "Device.synchronize")
        lib = backend().lib
        _wait_sliced(lambda _h, ms: lib.aclrtSynchronizeDeviceWithTimeout(ms), "aclrtSynchronizeDeviceWithTimeout",
                     None, -1, E.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)
        raise_device_host_errors(self._id)

    sync = synchronize

    def create_stream(self, *, priority: int = 0, flags: int = 0):
        """A new stream on this device (``aclrtCreateStreamWithConfig``).

        Args:
            priority: 0 (highest, the default) .. 7.
            flags: OR of ``ACL_STREAM_*`` flags (0 for an ordinary stream).
        """
        from ._stream import Stream
        return Stream._create(self, priority=priority, flags=flags)

    def create_event(self, *, timing: bool = True):
        """A new event on this device (``aclrtCreateEventWithFlag``).

        Args:
            timing: record timestamps so :meth:`Event.elapsed_time` works (``ACL_EVENT_TIME_LINE``).
        """
        from ._stream import Event
        return Event._create(self, timing=timing)

    @property
    def default_stream(self):
        """The default stream of this device's context."""
        from ._stream import Stream
        return Stream._default(self)

    @property
    def memory_resource(self):
        """Where :func:`acl_rt.alloc` takes this device's memory from (settable): the device's
        caching pool (:class:`acl_rt.MemoryPool`) unless ``CANNA_NO_MEMORY_CACHING=1``, then the
        raw :class:`acl_rt.DeviceMemoryResource`."""
        mr = self._mr
        if mr is None:
            from ._pool import default_resource
            mr = self._mr = default_resource(self)
        return mr

    @memory_resource.setter
    def memory_resource(self, mr) -> None:
        """Raises TypeError for an object that is not an :class:`acl_rt.MemoryResource`, and
        InvalidArgumentError (a ValueError) for a resource of another device (its buffers would be
        that device's memory)."""
        from ._errors import InvalidArgumentError
        from ._memory import MemoryResource
        if not isinstance(mr, MemoryResource):
            raise TypeError(f"memory_resource must be an acl_rt.MemoryResource, not {type(mr).__name__}")
        owner = Device(mr.device)
        if owner is not self:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "Device.memory_resource",
                                       f"{type(mr).__name__} allocates on device {owner._id}, not on device "
                                       f"{self._id}; use a resource of device {self._id} (e.g. "
                                       f"acl_rt.DeviceMemoryResource({self._id}))")
        self._mr = mr

    def allocate(self, nbytes: int, *, stream=None):
        """``nbytes`` of device memory from :attr:`memory_resource` (see :func:`acl_rt.alloc`)."""
        return self.memory_resource.allocate(nbytes, stream=stream)

    def can_access_peer(self, peer) -> bool:
        """Whether this device can access ``peer``'s memory (``aclrtDeviceCanAccessPeer``).
        ``False`` for the device itself (it needs no peer access), as CUDA answers."""
        peer = Device(peer)
        if peer is self:
            return False
        rt.ensure("Device.can_access_peer")
        out = ffi.new("int32_t *")
        rt.check(backend().lib.aclrtDeviceCanAccessPeer(out, self._id, peer._id), "aclrtDeviceCanAccessPeer")
        return bool(out[0])

    def enable_peer_access(self, peer) -> None:
        """Let this device access ``peer``'s memory (``aclrtDeviceEnablePeerAccess``).

        Raises:
            InvalidArgumentError: ``peer`` is this device or cannot be accessed.
        """
        peer = Device(peer)
        if peer is self:
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "Device.enable_peer_access",
                                       f"device {self._id} cannot be its own peer")
        rt.activate(self._id, "Device.enable_peer_access")
        rt.check(backend().lib.aclrtDeviceEnablePeerAccess(peer._id, 0), "aclrtDeviceEnablePeerAccess")


def enter_block(owner, prev_device_id: int) -> None:
    """Record that a ``with owner:`` block (a Device or a Stream) began on the calling thread when
    ``prev_device_id`` was the current device."""
    frames = rt.thread_state().__dict__.setdefault("device_frames", [])
    frames.append([owner, prev_device_id])


def exit_block(owner) -> int | None:
    """End ``owner``'s innermost open block, whatever the order the blocks end in (blocks entered
    by hand with ``__enter__``/``__exit__`` may end out of order, as with ``contextlib.ExitStack``
    misuse): the device to make current now, or None to leave it. The innermost block gives back
    the device it found; an outer one hands its saved device to the block after it, so once every
    block has ended the thread is on the device it started on."""
    frames = rt.thread_state().__dict__.get("device_frames")
    for i in range(len(frames or ()) - 1, -1, -1):
        if frames[i][0] is owner:
            prev = frames.pop(i)[1]
            if i == len(frames):
                return prev
            frames[i][1] = prev
            return None
    return None


def current_device() -> Device:
    """The calling thread's current device (device 0 until another is made current)."""
    return Device(rt.current_device_id())
