"""Cross-process publication of pool statistics (what ``canna-smi`` shows in its pool section).

Each process that uses a :class:`acl_rt.MemoryPool` keeps a small JSON record of its pools'
counters in a directory shared by the processes of one user: ``$CANNA_STATS_DIR`` if set, else
``/dev/shm/canna-stats-<uid>`` (tmpfs; ``$TMPDIR`` when /dev/shm is missing). A daemon thread
rewrites the record at most every ``CANNA_STATS_INTERVAL`` seconds (default 0.5; ``0`` turns
publication off) and only when a counter changed, so the allocation path never pays for it. The
record is removed at :func:`acl_rt.finalize` and at exit; readers skip (and delete) records of
dead processes, recognizing a reused pid by its start time (``/proc/<pid>/stat``).

Each record names the machine its devices belong to (:func:`machine_id`): on the simulator the
simulated machine (processes with other ``CANNA_SIM_*`` settings, e.g. another
``CANNA_SIM_MACHINE``, use other devices), so a reader lists only the pools of its own machine's
devices. A record that cannot be read as one (not JSON, wrong types) is skipped with a
``RuntimeWarning`` naming the file, never an exception: one damaged file must not hide the others.

Works with either backend: it is canna's own bookkeeping, not the runtime's.
"""
from __future__ import annotations

import atexit
import json
import os
import stat
import sys
import tempfile
import threading
import time
import warnings

__all__ = ["stats_dir", "publish", "read_records", "machine_id", "warn_skipped", "proc_starttime", "proc_name"]

_lock = threading.Lock()
_thread: threading.Thread | None = None
_last: tuple | None = None
_owner_pid: int | None = None
_atexit = False
_machine: tuple[int, str] | None = None    # (pid, id): recomputed in a forked child


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


def machine_id() -> str:
    """The machine whose devices this process uses, as recorded in its pool statistics: on the
    simulator ``"sim:"`` + the shared segment of the simulated machine (``aclsimGetMachineName``;
    ``"sim:process-<pid>"`` when the process is a machine of its own, ``CANNA_SIM_SHARED=0``),
    ``"ascend"`` on a real install (every process of the host sees the same NPUs)."""
    global _machine
    pid = os.getpid()
    if _machine is not None and _machine[0] == pid:
        return _machine[1]
    from ._lib import backend, ffi
    b = backend()
    if b.is_sim:
        buf = ffi.new("char[]", 512)
        name = ffi.string(buf).decode("utf-8", "replace") if b.lib.aclsimGetMachineName(buf, 512) == 0 else ""
        mid = f"sim:{name}" if name else f"sim:process-{pid}"
    else:
        mid = "ascend"
    _machine = (pid, mid)
    return mid


def warn_skipped(path: str, why: str) -> None:
    """The one warning for a pool-statistics record that is skipped because it is malformed."""
    warnings.warn(f"skipping the malformed pool-statistics record {path}: {why}", RuntimeWarning,
                  stacklevel=3)


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
    rec = {"pid": pid, "starttime": proc_starttime(pid), "name": proc_name(pid), "machine": machine_id(),
           "updated": time.time(), "devices": devices, "collectives": collectives}
    return tuple(versions), rec


def publish(force: bool = False) -> str | None:
    """Write this process's record now (``force``) or if a counter changed. Returns its path, or
    None when there is nothing to publish. Never raises for I/O problems (monitoring must not
    break the program); they make the record missing."""
    global _last, _owner_pid
    with _lock:
        versions, rec = _record()
        if not rec["devices"] and not rec["collectives"]:
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


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_records(machine: str | None = None) -> list[tuple[str, dict]]:
    """``(path, record)`` of every live process's record (sorted by pid), only those of
    ``machine`` (a :func:`machine_id`) when given. Stale records are deleted when possible; a
    malformed one (not a JSON object, no positive integer ``pid``) is skipped with a
    RuntimeWarning (:func:`warn_skipped`). The ``devices`` entries are not checked here."""
    d = stats_dir()
    out = []
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(d, name)
        try:        # non-blocking: a FIFO in the folder must not hang the reader
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:       # gone since listdir: its process exited
            continue
        except OSError as e:
            warn_skipped(path, f"cannot be opened ({e.strerror or e})")
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                warn_skipped(path, "not a regular file")
                continue
            data = os.read(fd, 1 << 20)
        except OSError as e:
            warn_skipped(path, f"cannot be read ({e.strerror or e})")
            continue
        finally:
            os.close(fd)
        try:
            rec = json.loads(data)
        except (ValueError, RecursionError) as e:      # UnicodeDecodeError is a ValueError
            warn_skipped(path, f"not JSON ({type(e).__name__}: {str(e)[:80]})")
            continue
        if not isinstance(rec, dict):
            warn_skipped(path, f"a JSON {type(rec).__name__}, not an object")
            continue
        pid, st0 = rec.get("pid"), rec.get("starttime")
        if not (_is_count(pid) and pid > 0):
            warn_skipped(path, f"'pid' must be a positive integer, got {pid!r:.40}")
            continue
        if st0 is not None and not _is_count(st0):
            warn_skipped(path, f"'starttime' must be an integer or null, got {st0!r:.40}")
            continue
        st = proc_starttime(pid)
        if st is None or (st0 is not None and st != st0):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        if machine is not None and rec.get("machine") != machine:
            continue
        out.append((path, rec))
    return sorted(out, key=lambda r: r[1]["pid"])
