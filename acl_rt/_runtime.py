"""Process and thread state of the runtime: init/finalize, fork guard, per-thread contexts.

AscendCL rules this module follows (AscendCL's runtime API reference, acl_rt.h, CANN 9.1):

- ``aclInit`` once per process (a second call returns ACL_ERROR_REPEAT_INITIALIZE, ignored here),
  ``aclFinalize`` before exit. canna calls both implicitly: on first use and at exit (``atexit``).
- ``aclrtSetDevice`` creates a device's default context; a context is current **per thread**, and
  a thread with no current context cannot allocate, copy or create streams. canna makes the right
  context current on the calling thread before every call that needs one (:func:`activate`).
- AscendCL does not support ``fork()`` after ``aclInit``: a forked child gets
  :class:`ForkedProcessError` from canna instead of undefined behaviour.
"""
from __future__ import annotations

import atexit
import math
import os
import re
import signal
import sys
import threading
import time
import warnings

from ._constants import ErrorCode as E
from ._native import current_changed
from ._errors import ForkedProcessError, InvalidArgumentError, NotInitializedError, error_class
from ._lib import backend, ffi

__all__ = ["init", "finalize", "is_initialized", "device_count", "backend_info", "check", "raise_error",
           "ensure", "activate", "generation", "on_finalize"]


class _State:
    __slots__ = ("ready", "finalized", "forked", "generation", "pid", "devices", "atexit", "hooks", "count")

    def __init__(self):
        self.ready = False        # aclInit done in this process and not finalized
        self.finalized = False    # acl_rt.finalize() was called (use is an error until init())
        self.forked = False       # this process is a fork of one that had initialized
        self.generation = 0       # bumped at every init; handles from older generations are dead
        self.pid = None
        self.devices = {}         # device id -> _DeviceContext (this generation)
        self.atexit = False
        self.hooks = []           # callables run first thing in finalize (e.g. the memory pool)
        self.count = None


class _DeviceContext:
    __slots__ = ("ctx", "default_stream")

    def __init__(self, ctx, default_stream):
        self.ctx = ctx
        self.default_stream = default_stream


_state = _State()
_lock = threading.RLock()
class _ThreadState(threading.local):
    # class-level defaults: reading a per-thread value that was never set costs no AttributeError
    device_id = 0
    ctx_key = None
    streams = None


_tls = _ThreadState()


def _after_fork_in_child():
    if _state.ready or _state.pid is not None:
        _state.forked = True
        _state.ready = False
    current_changed()


os.register_at_fork(after_in_child=_after_fork_in_child)


def raise_error(rc: int, api: str, message: str | None = None):
    """Raise the :class:`AclError` subclass for ``rc``, with the runtime's recent error message."""
    if message is None:
        try:
            p = backend().lib.aclGetRecentErrMsg()
            if p != ffi.NULL:
                message = ffi.string(p).decode("utf-8", "replace")
                if message.startswith(api + ": "):  # the simulator names the API itself
                    message = message[len(api) + 2:]
        except Exception:  # the message is a courtesy; never mask the real error
            message = None
    raise error_class(rc)(rc, api, message)


def check(rc: int, api: str) -> None:
    """Raise for a non-zero ACL return code."""
    if rc:
        raise_error(rc, api)


def _forked_error(api):
    return ForkedProcessError(
        E.ACL_ERROR_RT_NO_PERMISSION, api, f"the runtime was initialized in process {_state.pid}; this forked "
        f"child (pid {os.getpid()}) cannot use it. AscendCL does not support fork() after aclInit: start "
        "workers with multiprocessing's 'spawn' or 'forkserver' method")


def init() -> None:
    """Initialize the runtime (``aclInit``). Idempotent; called implicitly on first use.

    After :func:`finalize`, ``init()`` starts a new session: objects created before the finalize
    (streams, events, buffers) stay invalid and raise :class:`InvalidHandleError` when used.

    Raises:
        ForkedProcessError: in a child forked after the parent initialized the runtime.
        BackendNotFoundError: ``CANNA_BACKEND=ascend`` and no CANN install was found.
        AclError: ``aclInit`` failed (e.g. an invalid simulator setting in the environment).
    """
    if _state.ready:
        return
    with _lock:
        if _state.ready:
            return
        if _state.forked:
            raise _forked_error("acl_rt.init")
        lib = backend().lib
        rc = lib.aclInit(ffi.NULL)
        if rc not in (0, E.ACL_ERROR_REPEAT_INITIALIZE):  # documented as ignorable
            raise_error(rc, "aclInit")
        _state.generation += 1
        _state.pid = os.getpid()
        _state.devices = {}
        _state.finalized = False
        _state.ready = True
        current_changed()
        if not _state.atexit:
            atexit.register(_finalize_at_exit)
            _state.atexit = True


def ensure(api: str = "acl_rt") -> None:
    """Make sure the runtime is usable from this process (the cheap check before every call)."""
    if _state.ready:
        return
    if _state.forked:
        raise _forked_error(api)
    if _state.finalized:
        raise NotInitializedError(E.ACL_ERROR_UNINITIALIZE, "acl_rt", "the runtime was finalized (acl_rt.finalize()); "
                                  "call acl_rt.init() to start it again")
    init()


def is_initialized() -> bool:
    """Whether the runtime is initialized in this process (and not finalized)."""
    return _state.ready


def generation() -> int:
    """The current init generation (objects remember theirs; a mismatch means finalized since)."""
    return _state.generation


def on_finalize(hook) -> None:
    """Register ``hook()`` to run at the start of every :func:`finalize` (e.g. to free a pool)."""
    _state.hooks.append(hook)


def _light(query, api: str):
    """``query()`` (an AscendCL call's return code) without initializing the runtime when the
    backend answers it before ``aclInit`` (the simulator does, for its configuration queries;
    torch_npu's ``device_count()`` calls ``aclrtGetDeviceCount`` before its lazy ``aclInit``), so a
    process that only asked it may still fork; else after :func:`ensure`. Returns the code."""
    if _state.forked:
        raise _forked_error(api)
    if not _state.ready:
        rc = query()
        if rc != E.ACL_ERROR_UNINITIALIZE:  # this backend needs aclInit first
            return rc
        backend().lib.aclGetRecentErrMsg()
        ensure(api)
    return query()


def device_count() -> int:
    """Number of devices visible to this process (``aclrtGetDeviceCount``). Does not initialize
    the runtime where the backend can answer without it (the simulator), so a child forked
    afterwards can still use canna.

    Raises:
        ForkedProcessError: in a child forked after the parent initialized the runtime."""
    n = _state.count
    if n is None:
        out = ffi.new("uint32_t *")
        check(_light(lambda: backend().lib.aclrtGetDeviceCount(out), "acl_rt.device_count"), "aclrtGetDeviceCount")
        n = _state.count = int(out[0])
    elif _state.forked:
        raise _forked_error("acl_rt.device_count")
    return n


def validate_device_id(device_id, api: str) -> int:
    """An int device id in range, or a clear TypeError / InvalidArgumentError."""
    return check_device_index(device_id, api, device_count, "this process has")


def check_device_index(device_id, api: str, count, owner: str) -> int:
    """``device_id`` as an int in ``0..count()-1`` (``count`` is called only for an int id), or a
    TypeError / InvalidArgumentError saying what ``owner`` ("this process has", "the machine
    has") has."""
    if isinstance(device_id, bool) or not hasattr(device_id, "__index__"):
        raise TypeError(f"{api}: device id must be an int, not {type(device_id).__name__}")
    idx = device_id.__index__()
    n = count()
    if not 0 <= idx < n:
        raise InvalidArgumentError(E.ACL_ERROR_RT_INVALID_DEVICEID, api,
                                   f"device id {idx} is out of range: {owner} {n} "
                                   f"device{'s' if n != 1 else ''} (0..{n - 1})")
    return idx


def _device_context(device_id: int) -> _DeviceContext:
    st = _state.devices.get(device_id)
    if st is not None:
        return st
    with _lock:
        st = _state.devices.get(device_id)
        if st is not None:
            return st
        lib = backend().lib
        check(lib.aclrtSetDevice(device_id), "aclrtSetDevice")
        cell = ffi.new("void **")
        check(lib.aclrtGetCurrentContext(cell), "aclrtGetCurrentContext")
        ctx = cell[0]
        stream = ffi.NULL
        if lib.has("aclrtCtxGetCurrentDefaultStream"):
            check(lib.aclrtCtxGetCurrentDefaultStream(cell), "aclrtCtxGetCurrentDefaultStream")
            stream = cell[0]
        st = _DeviceContext(ctx, stream)
        _state.devices[device_id] = st
        _tls.ctx = st
        current_changed()
        return st


def activate(device_id: int, api: str = "acl_rt") -> _DeviceContext:
    """Make ``device_id``'s context current on the calling thread (no C call when it already is)."""
    if not _state.ready:
        ensure(api)
    st = _state.devices.get(device_id)
    if st is None:
        st = _device_context(device_id)
    if _tls.__dict__.get("ctx") is not st:   # contexts are per init generation: identity suffices
        check(backend().lib.aclrtSetCurrentContext(st.ctx), "aclrtSetCurrentContext")
        _tls.ctx = st
        current_changed()
    return st


def finalize() -> None:
    """Shut the runtime down: run cleanup hooks (the memory pool frees its cache), reset every
    device (which waits for its queued work), ``aclFinalize``. Idempotent; runs at exit.

    Safe whatever is still alive: streams, events and buffers created before become invalid
    (their destructors do nothing; using them raises :class:`InvalidHandleError`), and memory that
    DLPack consumers still view stays mapped while they view it (on the simulator, memory whose
    last buffer goes away after the finalize is freed at the next session's first allocation).

    Raises:
        AclError: ``aclFinalize`` refused (e.g. called from a host function running on a stream,
            which would deadlock); the runtime stays initialized.
    """
    with _lock:
        if not _state.ready:
            _state.finalized = _state.finalized or _state.pid is not None
            return
        if getattr(_tls, "finalizing", False):
            return
        devices = list(_state.devices.items())
        _tls.finalizing = True
        current_changed()   # (the contexts change below; every stream dies)
    # no lock held from here: queued host functions may still call into the runtime while the
    # devices drain (holding the lock here deadlocked them)
    try:
        lib = backend().lib
        for hook in list(_state.hooks):
            try:
                hook()
            except Exception as e:  # finalize must finish
                warnings.warn(f"acl_rt.finalize: cleanup hook {hook!r} failed: {e}", RuntimeWarning, stacklevel=2)
        for device_id, st in devices:
            if lib.aclrtSetCurrentContext(st.ctx) == 0:
                lib.aclrtResetDevice(device_id)
        rc = lib.aclFinalize()
        with _lock:
            _state.devices = {}
            _tls.__dict__.pop("ctx", None)
            if rc in (0, E.ACL_ERROR_REPEAT_FINALIZE):  # already done
                _state.ready = False
                _state.finalized = True
            current_changed()
        if rc not in (0, E.ACL_ERROR_REPEAT_FINALIZE):
            raise_error(rc, "aclFinalize")
    finally:
        _tls.finalizing = False


#: seconds the exit waits for queued work when ``CANNA_EXIT_TIMEOUT`` is not set
EXIT_TIMEOUT_DEFAULT = 30.0


def exit_timeout() -> float:
    """Seconds the interpreter's exit waits for work still queued on the devices before it gives
    up (``CANNA_EXIT_TIMEOUT``, a number >= 0; default :data:`EXIT_TIMEOUT_DEFAULT`). An invalid
    value is a warning and gives the default."""
    raw = os.environ.get("CANNA_EXIT_TIMEOUT", "").strip()
    if not raw:
        return EXIT_TIMEOUT_DEFAULT
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not (t >= 0 and math.isfinite(t)):
        warnings.warn(f"acl_rt: CANNA_EXIT_TIMEOUT={raw!r} is not a number of seconds >= 0; using "
                      f"{EXIT_TIMEOUT_DEFAULT:g}", RuntimeWarning, stacklevel=2)
        return EXIT_TIMEOUT_DEFAULT
    return t


def _ctrl_c_hint() -> str:
    """What Ctrl-C does to the exit wait in this process: it stops it, unless SIGINT is ignored or
    blocked here (inherited from the parent process: a child started with SIGINT ignored keeps it
    ignored, POSIX ``execve``)."""
    try:
        handler = signal.getsignal(signal.SIGINT)
        blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    except (ValueError, OSError, AttributeError):
        return "Ctrl-C stops waiting"
    if handler in (signal.SIG_IGN, None) or blocked:
        return "SIGINT is ignored or blocked in this process, so Ctrl-C cannot stop the wait"
    return "Ctrl-C stops waiting"


def _drain_at_exit(timeout: float) -> str | None:
    """Wait at most ``timeout`` s for the queued work of every device (in short slices, so Ctrl-C
    is delivered). None when everything finished, else what is still running (the runtime's
    timeout message, which names the kernel on the simulator). Asynchronous errors met here are
    dropped, as finalize drops them."""
    lib = backend().lib
    start = time.monotonic()
    deadline = start + timeout
    told = False
    what = "work still queued"
    # the thread's context changes below, behind activate()'s per-thread record: forget it
    _tls.__dict__.pop("ctx", None)
    current_changed()
    try:
        for device_id, st in list(_state.devices.items()):
            if lib.aclrtSetCurrentContext(st.ctx) != 0:
                continue
            while True:
                left = deadline - time.monotonic()
                rc = lib.aclrtSynchronizeDeviceWithTimeout(max(1, int(min(left, 0.2) * 1000)))
                if rc != E.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT:
                    break
                p = lib.aclGetRecentErrMsg()
                msg = ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else ""
                m = re.search(r"\((stream [^()]*)\)\s*$", msg)   # the simulator names the stream and kernel
                what = f"device {device_id}, " + (m.group(1) if m else msg or "still busy")
                if time.monotonic() >= deadline:
                    return f"{what}, still running after {timeout:g} s (CANNA_EXIT_TIMEOUT)"
                if not told and time.monotonic() - start >= 1.0:
                    told = True
                    print(f"acl_rt: at exit, waiting up to {timeout:g} s (CANNA_EXIT_TIMEOUT) for queued work "
                          f"({what}); {_ctrl_c_hint()}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        return f"{what}; Ctrl-C stopped the wait"
    return None


def _finalize_at_exit():
    if _state.forked or not _state.ready:
        return
    timeout = exit_timeout()
    try:
        busy = _drain_at_exit(timeout)
    except Exception:
        busy = None
    if busy is not None:
        # finalizing would wait for that work forever: leave the runtime as it is, the process
        # exit ends its threads
        # (warn_explicit: no source line under the message)
        warnings.warn_explicit(f"exiting without finalizing the runtime: {busy}", RuntimeWarning, "acl_rt", 0)
        return
    try:
        finalize()
    except Exception:
        pass


def backend_info() -> dict:
    """Which runtime is loaded and how it was found.

    Returns a dict with keys ``backend`` (``"sim"`` or ``"ascend"``), ``simulator`` (bool: the
    loaded library is canna's simulator), ``library`` (path), ``found_via`` (how it was found),
    ``searched`` (list of ``(place, result)`` tried before), ``cann_version`` (the runtime package
    version from ``aclsysGetVersionStr``, or None), ``acl_version`` (AscendCL interface version,
    ``aclrtGetVersion``), ``simulator_version``, ``memory_model`` (``"unified"``/``"discrete"``
    for the simulator, else None), ``run_mode`` (``"device"``/``"host"``), ``soc_name``,
    ``device_count``, ``op_libraries`` (paths of the aclnn op libraries: ``libnnopbase.so`` +
    ``libopapi*.so``, or the simulator's ``libopapi_sim.so``; None when unavailable, with the reason
    in ``op_library_error``), ``sim_blas`` (the simulator only: the BLAS its op library's matrix products use and where it
    was found, e.g. ``"MKL (loaded in the process: libtorch_cpu.so): ..."`` once PyTorch is
    imported, else the scipy-openblas64 wheel's OpenBLAS; ``aclnnsimGetBlasName``).
    """
    b = backend()
    lib = b.lib
    if _state.forked:
        raise _forked_error("acl_rt.backend_info")
    info = {"backend": b.name, "simulator": b.is_sim, "library": b.path, "found_via": b.found_via,
            "searched": list(b.searched), "cann_version": None, "acl_version": None,
            "simulator_version": None, "memory_model": None, "run_mode": None, "soc_name": None,
            "device_count": device_count()}
    if lib.has("aclsysGetVersionStr"):
        buf = ffi.new("char[]", 128)
        if lib.aclsysGetVersionStr(ffi.new("char[]", b"runtime"), buf) == 0:
            info["cann_version"] = ffi.string(buf).decode()
    v = ffi.new("int32_t[3]")
    if lib.aclrtGetVersion(v, v + 1, v + 2) == 0:
        info["acl_version"] = f"{v[0]}.{v[1]}.{v[2]}"
    if b.is_sim:
        info["simulator_version"] = ffi.string(lib.aclsimGetVersion()).decode()
        info["memory_model"] = "discrete" if lib.aclsimGetMemoryModel() == 1 else "unified"
    mode = ffi.new("aclrtRunMode *")
    if _light(lambda: lib.aclrtGetRunMode(mode), "acl_rt.backend_info") == 0:   # no aclInit where the backend allows it
        info["run_mode"] = "device" if mode[0] == 0 else "host"
    p = lib.aclrtGetSocName()
    if p == ffi.NULL and not _state.ready:   # a backend that answers only after aclInit
        lib.aclGetRecentErrMsg()
        ensure("acl_rt.backend_info")
        p = lib.aclrtGetSocName()
    if p != ffi.NULL:
        info["soc_name"] = ffi.string(p).decode()
    lib.aclGetRecentErrMsg()
    # the aclnn op libraries (loaded here if not yet): paths, or why they are unavailable
    from ._lib import op_library
    info["op_libraries"], info["op_library_error"], info["sim_blas"] = None, None, None
    try:
        ops = op_library()
        info["op_libraries"] = list(ops.paths)
        if b.is_sim and ops.lib.has("aclnnsimGetBlasName"):
            info["sim_blas"] = ffi.string(ops.lib.aclnnsimGetBlasName()).decode(errors="replace")
    except Exception as e:  # the runtime works without them
        info["op_library_error"] = str(e)
    return info


def current_device_id() -> int:
    """The calling thread's current device id (0 until :meth:`Device.set_current` is called)."""
    return getattr(_tls, "device_id", 0)


def set_current_device_id(device_id: int) -> None:
    _tls.device_id = device_id
    current_changed()


def thread_state():
    """The thread-local namespace (current device, current-stream stacks)."""
    return _tls


def set_host_team(team: int, ctx: int = 0) -> tuple[int, int]:
    """Lend the simulator this thread's host thread team (``aclsimSetHostTeam``, acl_rt/_cdef/sim_funcs.h).

    ``team`` is the address of an ``aclsimHostTeamFn`` (0: the simulator's own AI-core thread pool
    again), ``ctx`` its first argument. From now on the blocks of a kernel this thread runs -- inline,
    while synchronizing, as a waited launch -- are spread over that team (a framework's intra-op
    threads) instead of the pool, so the two do not contend for the CPUs. Per thread. Returns the
    setting it replaces as ``(team, ctx)`` addresses, to restore it. On a real CANN install the
    kernels run on the device: nothing to lend, returns ``(0, 0)``.
    """
    b = backend()
    if not b.is_sim:
        return (0, 0)
    prev_team, prev_ctx = ffi.new("aclsimHostTeamFn *"), ffi.new("void **")
    check(b.lib.aclsimSetHostTeam(ffi.cast("aclsimHostTeamFn", team), ffi.cast("void *", ctx), prev_team, prev_ctx),
          "aclsimSetHostTeam")
    return int(ffi.cast("uintptr_t", prev_team[0])), int(ffi.cast("uintptr_t", prev_ctx[0]))
