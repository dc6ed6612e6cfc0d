"""System-wide device monitoring, usable without initializing AscendCL (what ``canna-smi`` shows).

Like ``npu-smi`` this reads the driver's management interface, DCMI (``libdcmi.so``), which sees
every process using a device and needs no runtime context (a monitor must not create contexts on
the NPUs it watches). On the simulator backend the same DCMI functions come from the simulator
library, which reads the "machine" shared by the processes using simulated devices (processes
with the same ``CANNA_SIM_*`` configuration; see ``acl_rt/_sim/README.md``).

Where DCMI is found on a real install (first hit wins): ``$CANNA_DCMI_LIBRARY``, the system loader
(``libdcmi.so`` on ``LD_LIBRARY_PATH``), ``/usr/local/Ascend/driver/lib64/driver/``,
``/usr/local/Ascend/driver/lib64/common/``, ``/usr/local/Ascend/driver/lib64/`` and
``/usr/local/dcmi/``.

Pool statistics come from canna itself: each canna process publishes its pools' counters (see
``acl_rt._publish``); :func:`pool_stats` reads those of live processes.

Example::

    from acl_rt import monitor
    for d in monitor.devices():
        print(d.id, d.name, d.health, d.aicore_percent, d.hbm_used_bytes, d.error)
    for p in monitor.processes():
        print(p.device_id, p.pid, p.name, p.memory_bytes)
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from dataclasses import dataclass

from . import _publish
from ._errors import BackendNotFoundError, InvalidArgumentError
from ._lib import backend, ffi
from ._runtime import check_device_index

__all__ = ["DeviceStatus", "ProcessInfo", "PoolStats", "DcmiError", "device_count", "device_status", "devices",
           "processes", "pool_stats", "publish_pool_stats", "collective_stats", "snapshot", "source"]

_MB = 1 << 20
_NOT_SUPPORT = -8255
_DCMI_NAMES = {-8001: "DCMI_ERR_CODE_INVALID_PARAMETER", -8002: "DCMI_ERR_CODE_OPER_NOT_PERMITTED",
               -8005: "DCMI_ERR_CODE_INNER_ERR", -8007: "DCMI_ERR_CODE_INVALID_DEVICE_ID",
               -8008: "DCMI_ERR_CODE_DEVICE_NOT_EXIST", -8012: "DCMI_ERR_CODE_NOT_READY",
               -8255: "DCMI_ERR_CODE_NOT_SUPPORT"}
_HEALTH = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}
_DCMI_PATHS = ("/usr/local/Ascend/driver/lib64/driver/libdcmi.so", "/usr/local/Ascend/driver/lib64/common/libdcmi.so",
               "/usr/local/Ascend/driver/lib64/libdcmi.so", "/usr/local/dcmi/libdcmi.so")


class DcmiError(RuntimeError):
    """A DCMI call failed. Attributes: ``code`` (negative DCMI code), ``name``, ``api``."""

    def __init__(self, code: int, api: str):
        self.code = int(code)
        self.name = _DCMI_NAMES.get(self.code, f"DCMI_ERROR_{self.code}")
        self.api = api
        super().__init__(f"{api} failed: {self.name} ({self.code})")


@dataclass(frozen=True)
class DeviceStatus:
    """One device as ``npu-smi info`` shows it. ``None`` = not supported by the backend (NA).

    Memory in bytes (DCMI reports MB: the values are multiples of 1 MiB). ``memory_*`` is the
    chip's DDR ("Memory-Usage"), ``hbm_*`` its HBM ("HBM-Usage"); a chip has one or both.
    ``error`` is set (and the rest may be None) when the device could not be queried."""
    id: int
    name: str | None = None
    health: str | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    aicore_percent: int | None = None
    cube_percent: int | None = None
    vector_percent: int | None = None
    aicpu_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    hbm_used_bytes: int | None = None
    hbm_total_bytes: int | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProcessInfo:
    """A process using a device. ``memory_bytes``: device memory it holds (counted by the
    driver). ``utilization_percent`` and ``busy_ns`` (core-nanoseconds of work): simulator only."""
    device_id: int
    pid: int
    name: str | None
    memory_bytes: int
    utilization_percent: int | None = None
    busy_ns: int | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PoolStats:
    """The pool counters a canna process published for one device (bytes; see
    :func:`acl_rt.memory_stats` for the meaning). ``updated``: Unix time of the record."""
    device_id: int
    pid: int
    name: str | None
    allocated_bytes: int
    reserved_bytes: int
    active_bytes: int
    requested_bytes: int
    inactive_split_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    allocations: int
    segments: int
    num_ooms: int
    num_alloc_retries: int
    limit_bytes: int | None
    updated: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------------------
# loading DCMI

_lock = threading.Lock()
_dcmi = None
_source = None


def _load():
    global _dcmi, _source
    with _lock:
        if _dcmi is not None:
            return _dcmi
        b = backend()
        if b.is_sim:
            lib, src = b.lib, f"{b.path} (the simulator's DCMI)"
        else:
            lib = src = None
            tried = []
            env = os.environ.get("CANNA_DCMI_LIBRARY", "").strip()
            candidates = ([env] if env else []) + ["libdcmi.so"] + list(_DCMI_PATHS)
            for path in candidates:
                if os.sep in path and not os.path.exists(path):
                    tried.append((path, "not found"))
                    continue
                try:
                    lib, src = ffi.dlopen(path), path
                    break
                except OSError as e:
                    tried.append((path, f"cannot be loaded: {e}"))
            if lib is None:
                places = "\n".join(f"  - {p}: {r}" for p, r in tried)
                raise BackendNotFoundError(
                    "the Ascend driver's DCMI library (libdcmi.so) was not found; device monitoring needs the NPU "
                    f"driver package. Searched:\n{places}\nSet CANNA_DCMI_LIBRARY to its path.", tried)
        rc = lib.dcmi_init()
        if rc != 0:
            raise _dcmi_error(rc, "dcmi_init")
        _dcmi, _source = lib, src
        return lib


def source() -> str:
    """Where the DCMI functions come from (a library path)."""
    _load()
    return _source


def _call(api: str, *args, allow_unsupported: bool = True):
    rc = getattr(_load(), api)(*args)
    if rc == 0:
        return True
    if rc == _NOT_SUPPORT and allow_unsupported:
        return False
    raise _dcmi_error(rc, api)


def _dcmi_error(rc: int, api: str) -> Exception:
    """The error for a failed DCMI call; "not permitted" (-8002) in a child forked after the parent
    initialized the runtime (the simulator's DCMI refuses it there) names the fork."""
    from . import _runtime
    if rc == -8002 and _runtime._state.forked:
        return _runtime._forked_error(api)
    return DcmiError(rc, api)


# ------------------------------------------------------------------------------------------------
# queries


def device_count() -> int:
    """Number of NPUs (``dcmi_get_card_num_list``; one chip per card)."""
    n = ffi.new("int *")
    cards = ffi.new("int[]", 64)
    _call("dcmi_get_card_num_list", n, cards, 64, allow_unsupported=False)
    return int(n[0])


def _check_id(device_id, api: str) -> int:
    return check_device_index(device_id, api, device_count, "the machine has")


def device_status(device_id: int) -> DeviceStatus:
    """Name, health, power, temperature, AI-core utilization and memory of one device.

    Raises:
        TypeError / InvalidArgumentError: not an int / no such device.
        DcmiError: a DCMI call failed (other than "not supported", which gives None).
        BackendNotFoundError: no DCMI library on a real install.
    """
    card = _check_id(device_id, "acl_rt.monitor.device_status")
    chip = ffi.new("struct dcmi_chip_info *")
    name = None
    if _call("dcmi_get_device_chip_info", card, 0, chip):
        name = ffi.string(chip.chip_name).decode("utf-8", "replace") or None
    u = ffi.new("unsigned int *")
    health = None
    if _call("dcmi_get_device_health", card, 0, u):
        health = _HEALTH.get(int(u[0]), f"Unknown({int(u[0])})")
    i = ffi.new("int *")
    power = float(i[0]) * 0.1 if _call("dcmi_get_device_power_info", card, 0, i) else None   # 0.1 W units
    temp = int(i[0]) if _call("dcmi_get_device_temperature", card, 0, i) else None

    def util(kind):
        return int(u[0]) if _call("dcmi_get_device_utilization_rate", card, 0, kind, u) else None
    aicore, cube, vector, aicpu = util(2), util(14), util(12), util(3)
    mem = ffi.new("struct dcmi_get_memory_info_stru *")
    mem_used = mem_total = None
    if _call("dcmi_get_device_memory_info_v3", card, 0, mem):
        mem_total = int(mem.memory_size) * _MB
        mem_used = max(0, int(mem.memory_size) - int(mem.memory_available)) * _MB
    hbm = ffi.new("struct dcmi_hbm_info *")
    hbm_used = hbm_total = None
    if _call("dcmi_get_device_hbm_info", card, 0, hbm):
        hbm_total, hbm_used = int(hbm.memory_size) * _MB, int(hbm.memory_usage) * _MB
    return DeviceStatus(card, name, health, power, temp, aicore, cube, vector, aicpu, mem_used, mem_total,
                        hbm_used, hbm_total)


def devices(ids=None) -> list[DeviceStatus]:
    """:func:`device_status` of every device (or of ``ids``). A device that fails to query gives a
    row with ``error`` set instead of failing the whole list; an id that does not exist raises
    InvalidArgumentError."""
    n = device_count()
    if ids is None:
        ids = range(n)
    else:
        ids = [_check_id(i, "acl_rt.monitor.devices") for i in ids]
    out = []
    for i in ids:
        try:
            out.append(device_status(i))
        except Exception as e:  # one bad device must not hide the others
            out.append(DeviceStatus(i, error=f"{type(e).__name__}: {e}"))
    return out


def processes(device_id: int | None = None) -> list[ProcessInfo]:
    """The processes using ``device_id`` (default: every device), with the device memory each
    holds (``dcmi_get_device_resource_info``); the simulator adds per-process utilization.

    Raises:
        TypeError / InvalidArgumentError: bad device id.
    """
    ids = range(device_count()) if device_id is None else [_check_id(device_id, "acl_rt.monitor.processes")]
    b = backend()
    out = []
    for card in ids:
        if b.is_sim:
            cap = 64
            while True:
                infos = ffi.new("aclsimProcessInfo[]", cap)
                cnt = ffi.new("uint32_t *")
                rc = b.lib.aclsimGetProcessInfo(card, infos, cap, cnt)
                if rc:
                    from . import _runtime
                    _runtime.raise_error(rc, "aclsimGetProcessInfo")
                if cnt[0] <= cap:
                    break
                cap = int(cnt[0])
            for k in range(int(cnt[0])):
                p = infos[k]
                out.append(ProcessInfo(card, int(p.pid), ffi.string(p.name).decode("utf-8", "replace") or None,
                                       int(p.memUsed), int(p.utilization), int(p.busyNs[1] + p.busyNs[2])))
        else:
            cap = 256
            arr = ffi.new("struct dcmi_proc_mem_info[]", cap)
            num = ffi.new("int *", cap)
            if not _call("dcmi_get_device_resource_info", card, 0, arr, num):
                continue
            for k in range(min(int(num[0]), cap)):
                pid = int(arr[k].proc_id)
                out.append(ProcessInfo(card, pid, _publish.proc_name(pid), int(arr[k].proc_mem_usage)))
    return out


_POOL_COUNTS = ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "inactive_split_bytes",
                "peak_allocated_bytes", "peak_reserved_bytes", "allocations", "segments", "num_ooms",
                "num_alloc_retries")


def _pool_entry(rec: dict, d) -> PoolStats:
    """One published device entry as PoolStats; ValueError saying what is wrong with it."""
    def count(v, what):
        if not _publish._is_count(v):
            raise ValueError(f"{what} must be an integer >= 0, got {v!r:.40}")
        return v
    if not isinstance(d, dict):
        raise ValueError(f"a device entry must be an object, got {d!r:.40}")
    name, updated, limit = rec.get("name"), rec.get("updated", 0), d.get("limit_bytes")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"'name' must be a string or null, got {name!r:.40}")
    if isinstance(updated, bool) or not isinstance(updated, (int, float)) or not math.isfinite(updated):
        raise ValueError(f"'updated' must be a number, got {updated!r:.40}")
    if limit is not None:
        count(limit, "'limit_bytes'")
    return PoolStats(count(d.get("id"), "the device 'id'"), rec["pid"], name,
                     *(count(d.get(k), repr(k)) for k in _POOL_COUNTS), limit, float(updated))


def pool_stats(device_id: int | None = None) -> list[PoolStats]:
    """The pool statistics published by live canna processes of this user whose devices are this
    process's devices (the same simulated machine on the simulator; see ``acl_rt._publish``), one
    entry per process and device. Works on both backends. A malformed record is skipped with a
    ``RuntimeWarning`` naming its file.

    Raises:
        TypeError / InvalidArgumentError: bad device id."""
    if device_id is not None:
        device_id = _check_id(device_id, "acl_rt.monitor.pool_stats")
    out = []
    for path, rec in _publish.read_records(_publish.machine_id()):
        devs = rec.get("devices", [])
        if not isinstance(devs, list):
            _publish.warn_skipped(path, f"'devices' must be a list, got {devs!r:.40}")
            continue
        try:
            entries = [_pool_entry(rec, d) for d in devs]
        except ValueError as e:
            _publish.warn_skipped(path, str(e))
            continue
        out.extend(e for e in entries if device_id is None or e.device_id == device_id)
    return out


def collective_stats(device_id: int | None = None) -> list[dict]:
    """The HCCL communicators of live canna processes (simulator; published with the pool
    statistics), one dict per rank: ``device_id``, ``pid``, ``name``, ``rank``, ``size``, ``ops``
    (operations completed), ``bytes_moved`` (bytes the rank read and wrote: the shared segment,
    the peers' buffers), ``wait_ns`` (nanoseconds it waited for its peers), ``updated`` (Unix
    time of the record).

    Raises:
        TypeError / InvalidArgumentError: bad device id."""
    if device_id is not None:
        device_id = _check_id(device_id, "acl_rt.monitor.collective_stats")
    out = []
    for _path, rec in _publish.read_records(_publish.machine_id()):
        for c in (rec.get("collectives") if isinstance(rec.get("collectives"), list) else ()):
            try:
                row = {"device_id": int(c["device"]), "pid": int(rec["pid"]), "name": rec.get("name"),
                       "rank": int(c["rank"]), "size": int(c["size"]), "ops": int(c["ops"]),
                       "bytes_moved": int(c["bytes_moved"]), "wait_ns": int(c["wait_ns"]),
                       "updated": float(rec.get("updated", 0))}
            except (KeyError, TypeError, ValueError):
                continue
            if device_id is None or row["device_id"] == device_id:
                out.append(row)
    return out


def publish_pool_stats() -> str | None:
    """Publish this process's pool statistics now (normally a background thread does it at most
    every ``CANNA_STATS_INTERVAL`` seconds, 0.5 by default). Returns the record's path."""
    return _publish.publish(force=True)


def snapshot(ids=None) -> dict:
    """Everything ``canna-smi --json`` prints: ``time`` (Unix), ``backend``, ``source``,
    ``devices`` (:class:`DeviceStatus` dicts), ``processes``, ``pools`` and ``collectives``
    (:func:`collective_stats`) (dicts)."""
    b = backend()
    devs = devices(ids)
    wanted = {d.id for d in devs}
    procs, pools = [], []
    try:
        procs = [p.as_dict() for p in processes() if p.device_id in wanted]
    except Exception as e:  # the device rows still matter
        procs = [{"error": f"{type(e).__name__}: {e}"}]
    pools = [p.as_dict() for p in pool_stats() if p.device_id in wanted]
    collectives = [c for c in collective_stats() if c["device_id"] in wanted]
    return {"time": time.time(), "backend": b.name, "source": _source, "devices": [d.as_dict() for d in devs],
            "processes": procs, "pools": pools, "collectives": collectives}
