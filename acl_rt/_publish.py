"""Cross-process publication of pool statistics (what ``canna-smi`` shows in its pool section).

Each process that uses a :class:`acl_rt.MemoryPool` keeps a small JSON record of its pools'
counters in a directory shared by the processes of one user: ``$CANNA_STATS_DIR`` if set, else
``/dev/shm/canna-stats-<uid>`` (tmpfs; ``$TMPDIR`` when /dev/shm is missing). A daemon thread
rewrites the record at most every ``CANNA_STATS_INTERVAL`` seconds (default 0.5; ``0`` turns
publication off) and only when a counter changed, so the allocation path never pays for it. The
record is removed at :func:`acl_rt.finalize` and at exit; readers skip (and delete) records of
dead processes, recognizing a reused pid by its start time (``/proc/<pid>/stat``).

Works with either backend: it is canna's own bookkeeping, not the runtime's.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
import threading
import time

__all__ = ["stats_dir", "publish", "read_records", "proc_starttime", "proc_name"]

_lock = threading.Lock()
_thread: threading.Thread | None = None
_last: tuple | None = None
_owner_pid: int | None = None
_atexit = False


def stats_dir() -> str:
    d = os.environ.get("CANNA_STATS_DIR", "").strip()
    if d:
        return d
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"canna-stats-{os.getuid()}")


def _interval() -> float:
    v = os.environ.get("CANNA_STATS_INTERVAL", "").strip()
    if not v:
        return 0.5
    try:
        f = float(v)
    except ValueError:
        f = -1.0
    if not (0 <= f < 1e9):      # also nan and inf (time.sleep(inf) would kill the publisher thread)
        # publishing is a side service: a bad value must not stop the program, but must not pass silently
        import warnings
        warnings.warn(f"CANNA_STATS_INTERVAL={v!r} is not a number of seconds >= 0; using the default 0.5",
                      RuntimeWarning, stacklevel=2)
        return 0.5
    return f


def proc_starttime(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field
    22), or None when there is no such process. A pid and its start time name one process even
    when pids are reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        rest = data[data.rindex(b")") + 2:].split()
        return int(rest[19])
    except (ValueError, IndexError):
        return None


def proc_name(pid: int) -> str | None:
    """The process's command name (``/proc/<pid>/comm``), as npu-smi shows it."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _path(pid: int) -> str:
    return os.path.join(stats_dir(), f"{pid}.json")


def _record() -> tuple[tuple, dict]:
    from . import _pool
    pools = _pool.live_pools()
    devices = []
    versions = []
    for p in sorted(pools, key=lambda p: p._id):
        s = p._core.summary()
        versions.append((p._id, s[0], p._limit))
        devices.append({
            "id": p._id, "allocated_bytes": s[1], "reserved_bytes": s[2], "active_bytes": s[3],
            "requested_bytes": s[4], "inactive_split_bytes": s[5], "peak_allocated_bytes": s[6],
            "peak_reserved_bytes": s[7], "allocations": s[8], "segments": s[9], "num_ooms": s[10],
            "num_alloc_retries": s[11], "num_device_alloc": s[12], "num_device_free": s[13],
            "limit_bytes": p._limit or None,
        })
    # the HCCL communicators' counters (only when acl_rt._hccl is in use: never loads HCCL)
    hccl_mod = sys.modules.get(__package__ + "._hccl")
    collectives = hccl_mod.hccl_stats() if hccl_mod is not None else []
    versions.extend(("hccl", c["device"], c["rank"], c["ops"]) for c in collectives)
    pid = os.getpid()
    rec = {"pid": pid, "starttime": proc_starttime(pid), "name": proc_name(pid), "updated": time.time(),
           "devices": devices, "collectives": collectives}
    return tuple(versions), rec


def publish(force: bool = False) -> str | None:
    """Write this process's record now (``force``) or if a counter changed. Returns its path, or
    None when there is nothing to publish. Never raises for I/O problems (monitoring must not
    break the program); they make the record missing."""
    global _last, _owner_pid
    with _lock:
        versions, rec = _record()
        if not rec["devices"]:
            return None
        if not force and versions == _last:
            return _path(rec["pid"])
        d = stats_dir()
        path = _path(rec["pid"])
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            tmp = f"{path}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                json.dump(rec, f)
            os.replace(tmp, path)
        except OSError:
            return None
        _last = versions
        _owner_pid = rec["pid"]
        return path


def _remove() -> None:
    global _last
    pid = os.getpid()
    if _owner_pid != pid:   # a forked child never removes its parent's record
        return
    try:
        os.unlink(_path(pid))
    except OSError:
        pass
    _last = None


def _loop(interval: float) -> None:
    while True:
        time.sleep(interval)
        try:
            publish()
        except Exception:
            pass


def ensure_started() -> None:
    """Start the publisher thread (once per process; called when a pool is created)."""
    global _thread, _atexit
    interval = _interval()
    if interval <= 0:
        return
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, args=(interval,), name="canna-pool-stats", daemon=True)
            _thread.start()
        if not _atexit:
            atexit.register(_remove)
            _atexit = True


def on_finalize() -> None:
    with _lock:
        _remove()


def _after_fork_in_child() -> None:
    global _thread, _last
    _thread = None
    _last = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def read_records() -> list[dict]:
    """The records of live processes (sorted by pid); stale ones are deleted when possible."""
    d = stats_dir()
    out = []
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(d, name)
        try:
            with open(path) as f:
                rec = json.load(f)
            pid = int(rec["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        st = proc_starttime(pid)
        if st is None or (rec.get("starttime") is not None and st != rec["starttime"]):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        out.append(rec)
    return sorted(out, key=lambda r: r["pid"])
