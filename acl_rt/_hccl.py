"""HCCL communicators: collectives between devices and processes (CANN's ``libhccl.so``).

The calls are HCCL's C API (hiascend.com, "HCCL API (C)"): ``HcclGetRootInfo``,
``HcclCommInitRootInfo``, ``HcclAllReduce`` & co., declared in ``_cdef/hccl_funcs.h``. On a CANN
install the real ``libhccl.so`` is loaded (next to the runtime library, else through the system
loader); with the simulator, ``acl_rt/_sim_hccl/libhccl_sim.so`` (see its README).

This layer works on raw device memory: a :class:`DeviceBuffer` or an address (int), an element
count and a dtype name. Arrays and framework tensors are handled by ``canna_dl.distributed``.
Every collective is enqueued on a stream (keyword-only ``stream=``, default the current stream)
and returns an :class:`Event` recorded after it; a collective that fails (a peer died, a
timeout: ``HCCL_EXEC_TIMEOUT``) is reported by that stream's next synchronize (or the event's)
as an asynchronous error, and by :meth:`Communicator.async_error`.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path

from . import _runtime as rt
from ._device import Device
from ._errors import BackendNotFoundError
from ._lib import backend, ffi
from ._memory import DeviceBuffer, HostBuffer
from ._stream import Event, Stream, _resolve_stream

__all__ = ["Communicator", "HcclError", "HcclTimeoutError", "hccl_get_root_info", "HCCL_DTYPES",
           "HCCL_REDUCE_OPS", "root_info_from_store", "root_info_from_file", "hccl_library", "hccl_stats"]

#: the simulator's HCCL library, built at install
SIM_HCCL_LIBRARY = Path(__file__).resolve().parent / "_sim_hccl" / "libhccl_sim.so"

#: dtype name (NumPy's) -> HcclDataType value (hccl_types.h)
HCCL_DTYPES = {
    "int8": 0, "int16": 1, "int32": 2, "float16": 3, "float32": 4, "int64": 5, "uint64": 6,
    "uint8": 7, "uint16": 8, "uint32": 9, "float64": 10, "bfloat16": 11,
}
#: bytes per element of each dtype of :data:`HCCL_DTYPES`
_ITEMSIZE = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
             "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}
#: reduction name -> HcclReduceOp value
HCCL_REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}

_RESULT_NAMES = {
    0: "HCCL_SUCCESS", 1: "HCCL_E_PARA", 2: "HCCL_E_PTR", 3: "HCCL_E_MEMORY", 4: "HCCL_E_INTERNAL",
    5: "HCCL_E_NOT_SUPPORT", 6: "HCCL_E_NOT_FOUND", 7: "HCCL_E_UNAVAIL", 8: "HCCL_E_SYSCALL",
    9: "HCCL_E_TIMEOUT", 10: "HCCL_E_OPEN_FILE_FAILURE", 11: "HCCL_E_TCP_CONNECT", 12: "HCCL_E_ROCE_CONNECT",
    13: "HCCL_E_TCP_TRANSFER", 14: "HCCL_E_ROCE_TRANSFER", 15: "HCCL_E_RUNTIME", 16: "HCCL_E_DRV",
    17: "HCCL_E_PROFILING", 18: "HCCL_E_CCE", 19: "HCCL_E_NETWORK", 20: "HCCL_E_AGAIN", 21: "HCCL_E_REMOTE",
    22: "HCCL_E_SUSPENDING", 23: "HCCL_E_OPRETRY_FAIL", 24: "HCCL_E_OOM",
}


class HcclError(RuntimeError):
    """An HCCL call failed. Attributes: ``code`` (HcclResult), ``name`` (e.g. ``"HCCL_E_PARA"``),
    ``api`` and ``message``."""

    def __init__(self, code: int, api: str, message: str = ""):
        self.code, self.api, self.message = code, api, message
        self.name = _RESULT_NAMES.get(code, f"HcclResult {code}")
        super().__init__(f"{api} failed with {self.name} ({code})" + (f": {message}" if message else ""))


class HcclTimeoutError(HcclError, TimeoutError):
    """HCCL_E_TIMEOUT: a peer did not arrive within HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT."""


_lock = threading.Lock()
_lib = None


def hccl_library():
    """The loaded HCCL library (loaded on first use, after the runtime).

    Raises:
        BackendNotFoundError: no ``libhccl.so`` next to the CANN runtime nor on the loader path
            (or the simulator's library is missing from the install).
    """
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        b = backend()
        from ._lib import _LazyLib, _dlopen

        if b.name == "sim":
            if not SIM_HCCL_LIBRARY.exists():
                raise BackendNotFoundError(f"the simulator's HCCL library {SIM_HCCL_LIBRARY} is missing: "
                                           "reinstall canna (it builds acl_rt/_sim_hccl)",
                                           [(str(SIM_HCCL_LIBRARY), "not found")])
            _lib = _LazyLib([_dlopen(str(SIM_HCCL_LIBRARY))], str(SIM_HCCL_LIBRARY))
            return _lib
        searched = []
        candidates = []
        if b.path and os.path.isabs(b.path):
            candidates.append(os.path.join(os.path.dirname(os.path.realpath(b.path)), "libhccl.so"))
        candidates.append("libhccl.so")
        for path in candidates:
            try:
                _lib = _LazyLib([_dlopen(path)], path)
                return _lib
            except OSError as e:
                searched.append((path, f"cannot be loaded: {e}"))
        raise BackendNotFoundError("CANN's HCCL library (libhccl.so) was not found", searched)


def _last_message(lib) -> str:
    if lib.has("hcclsimGetLastErrorMessage"):
        m = lib.hcclsimGetLastErrorMessage()
        if m != ffi.NULL:
            return ffi.string(m).decode(errors="replace")
    return ""


def _check(rc: int, api: str, lib=None) -> None:
    if rc != 0:
        msg = _last_message(lib or hccl_library())
        raise (HcclTimeoutError if rc == 9 else HcclError)(rc, api, msg)


def hccl_get_root_info() -> bytes:
    """HcclGetRootInfo: the root info (``HCCL_ROOT_INFO_BYTES`` = 4108 bytes) a root rank makes
    and hands to every rank of a new communicator (through a file, a TCP store...)."""
    rt.ensure("hccl_get_root_info")
    lib = hccl_library()
    info = ffi.new("HcclRootInfo *")
    _check(lib.HcclGetRootInfo(info), "HcclGetRootInfo", lib)
    return bytes(ffi.buffer(info))


def root_info_from_store(store, rank: int, *, key: str = "canna/hccl/root_info") -> bytes:
    """Exchange the root info through a key-value store with ``set(key, bytes)`` and a blocking
    ``get(key) -> bytes`` (e.g. ``torch.distributed.TCPStore``): rank 0 makes and publishes it,
    the other ranks wait for it."""
    if rank == 0:
        info = hccl_get_root_info()
        store.set(key, info)
        return info
    return bytes(store.get(key))


def root_info_from_file(path, rank: int, *, timeout: float = 120.0) -> bytes:
    """Exchange the root info through a file: rank 0 writes it (atomically, by rename), the other
    ranks poll for it for up to ``timeout`` seconds (TimeoutError after)."""
    path = Path(path)
    if rank == 0:
        info = hccl_get_root_info()
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_bytes(info)
        os.replace(tmp, path)
        return info
    deadline = time.monotonic() + timeout
    while True:
        try:
            data = path.read_bytes()
            if len(data) == ffi.sizeof("HcclRootInfo"):
                return data
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"root_info_from_file: {path} did not appear within {timeout} s")
        time.sleep(0.01)


def _dtype_name(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    name = {"half": "float16", "float": "float32", "double": "float64"}.get(name, name)
    if name.startswith("torch."):
        name = name[6:]
    if name not in HCCL_DTYPES:
        raise TypeError(f"dtype {dtype!r} is not an HCCL data type (supported: {', '.join(HCCL_DTYPES)})")
    return name


def _address(buf, api: str, what: str) -> int:
    if isinstance(buf, (DeviceBuffer, HostBuffer)):
        return buf.ptr
    if isinstance(buf, int) and not isinstance(buf, bool):
        return buf
    raise TypeError(f"{api}: {what} must be a DeviceBuffer or an address (int), not {type(buf).__name__}")


def _check_size(buf, count: int, dtype: str, api: str, what: str):
    if isinstance(buf, (DeviceBuffer, HostBuffer)) and count * _ITEMSIZE[dtype] > buf.nbytes:
        raise ValueError(f"{api}: {what} holds {buf.nbytes} bytes, the operation needs {count * _ITEMSIZE[dtype]}")


def _count(count, api) -> int:
    if isinstance(count, bool) or not hasattr(count, "__index__") or count.__index__() < 0:
        raise ValueError(f"{api}: count must be an int >= 0, got {count!r}")
    return count.__index__()


class Communicator:
    """One rank of an HCCL communicator, bound to one device.

    Created with :meth:`init` (one rank, e.g. one per process) or :meth:`init_all` (every rank in
    this process, one device each). Operands are :class:`DeviceBuffer` s or device addresses;
    ``count`` is in elements of ``dtype`` (a NumPy-style name: ``"float32"``, ``"float16"``,
    ``"bfloat16"``, ``"int32"``...). Every method is asynchronous: it enqueues the operation on
    ``stream`` (default: the current stream of the communicator's device) and returns an
    :class:`Event` completed after it. All ranks must call the same collectives in the same order.

    Errors: argument problems raise :class:`HcclError` (``HCCL_E_PARA``...) / TypeError /
    ValueError at once; failures while running (a peer that died, ``HCCL_EXEC_TIMEOUT``) surface
    as an :class:`AclError` from the stream's (or event's) synchronize and in :meth:`async_error`.
    """

    __slots__ = ("_h", "_rank", "_size", "_device", "_lib", "__weakref__")

    def __init__(self, *a, **k):
        raise TypeError("communicators are created with Communicator.init() or Communicator.init_all()")

    @classmethod
    def _wrap(cls, handle, device: Device, lib):
        self = object.__new__(cls)
        self._h, self._device, self._lib = handle, device, lib
        out = ffi.new("uint32_t *")
        _check(lib.HcclGetRankId(handle, out), "HcclGetRankId", lib)
        self._rank = int(out[0])
        _check(lib.HcclGetRankSize(handle, out), "HcclGetRankSize", lib)
        self._size = int(out[0])
        _live.add(self)
        if lib.has("hcclsimGetCommStats"):   # canna-smi shows the rank's counters (also with no pool)
            from . import _publish
            _publish.ensure_started()
        return self

    @classmethod
    def init(cls, root_info: bytes, nranks: int, rank: int, *, device=None) -> "Communicator":
        """HcclCommInitRootInfo: join the communicator of ``root_info`` (from
        :func:`hccl_get_root_info` on the root rank) as ``rank`` of ``nranks``, on ``device``
        (default: the current device). Blocks until every rank has joined.

        Raises:
            HcclTimeoutError: not every rank joined within ``HCCL_CONNECT_TIMEOUT`` seconds
                (HCCL's default: 120).
            HcclError: bad arguments (``HCCL_E_PARA``), e.g. a rank joined twice.
        """
        api = "Communicator.init"
        if not isinstance(root_info, (bytes, bytearray)) or len(root_info) != ffi.sizeof("HcclRootInfo"):
            raise ValueError(f"{api}: root_info must be the {ffi.sizeof('HcclRootInfo')} bytes of hccl_get_root_info()")
        for name, v in (("nranks", nranks), ("rank", rank)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{api}: {name} must be an int >= 0, got {v!r}")
        dev = Device(device) if device is not None else Device(rt.current_device_id())
        rt.activate(dev._id, api)
        lib = hccl_library()
        info = ffi.new("HcclRootInfo *")
        ffi.memmove(info, bytes(root_info), len(root_info))
        cell = ffi.new("HcclComm *")
        _check(lib.HcclCommInitRootInfo(nranks, info, rank, cell), "HcclCommInitRootInfo", lib)
        return cls._wrap(cell[0], dev, lib)

    @classmethod
    def init_all(cls, devices) -> "list[Communicator]":
        """HcclCommInitAll: one communicator per device of ``devices`` (ids or Devices), rank i on
        ``devices[i]``, all in this process (drive each from its own thread, or enqueue on each
        rank's stream in turn: the calls never block on the peers)."""
        devs = [Device(d) for d in devices]
        rt.activate(devs[0]._id, "Communicator.init_all") if devs else None
        lib = hccl_library()
        ids = ffi.new("int32_t[]", [d._id for d in devs])
        comms = ffi.new("HcclComm[]", max(len(devs), 1))
        _check(lib.HcclCommInitAll(len(devs), ids, comms), "HcclCommInitAll", lib)
        return [cls._wrap(comms[i], d, lib) for i, d in enumerate(devs)]

    # -- identity --------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self._size

    @property
    def device(self) -> Device:
        return self._device

    def __repr__(self):
        state = "" if self._h is not None else " (destroyed)"
        return f"<acl_rt.Communicator rank {self._rank} of {self._size} on device {self._device._id}{state}>"

    def _handle(self, api):
        if self._h is None:
            raise HcclError(1, api, "the communicator was destroyed")
        return self._h

    def destroy(self) -> None:
        """HcclCommDestroy (idempotent). Synchronize the streams used first: a peer still waiting
        for this rank gets HCCL_E_REMOTE."""
        h, self._h = self._h, None
        if h is not None:
            _check(self._lib.HcclCommDestroy(h), "HcclCommDestroy", self._lib)

    def __del__(self):
        try:
            if getattr(self, "_h", None) is not None:
                self._lib.HcclCommDestroy(self._h)
        except Exception:  # never raise from a destructor
            pass

    def async_error(self) -> int:
        """HcclGetCommAsyncError: the HcclResult of the first failed operation (0 = none)."""
        out = ffi.new("HcclResult *")
        _check(self._lib.HcclGetCommAsyncError(self._handle("Communicator.async_error"), out),
               "HcclGetCommAsyncError", self._lib)
        return int(out[0])

    def stats(self) -> dict:
        """Simulator only, this rank's counters: ``ops`` (operations completed), ``bytes_moved``
        (bytes it read and wrote: the shared segment, the peers' buffers), ``wait_ns`` (time it
        waited for its peers), ``direct_ops`` (all-reduces that read and wrote the peers' buffers
        directly, see ``acl_rt/_sim_hccl/README.md``)."""
        s = ffi.new("hcclsimCommStats *")
        _check(self._lib.hcclsimGetCommStats(self._handle("Communicator.stats"), s), "hcclsimGetCommStats", self._lib)
        return {"ops": s.numOps, "bytes_moved": s.bytesMoved, "wait_ns": s.waitNs, "direct_ops": s.directOps}

    # -- operations ------------------------------------------------------------------------------
    def _stream(self, stream, api) -> Stream:
        s = _resolve_stream(stream, self._device, api)
        s._handle(api)
        return s

    def _done(self, s: Stream, *bufs) -> Event:
        # the operation reads/writes the buffers later, on s: a DeviceBuffer freed before then must
        # not be reused (or, in memcheck mode, unmapped) until s has passed the operation. Inside
        # hccl_group() the operation is queued only at the group's end: the buffers are kept until then.
        held = getattr(_group_state, "held", None)
        for b in bufs:
            if isinstance(b, DeviceBuffer):
                if held is not None:
                    held.append((b, s))
                else:
                    b._use_on(s, None)
        return s.record()

    def all_reduce(self, sendbuf, recvbuf, count: int, dtype, op: str = "sum", *, stream=None) -> Event:
        """HcclAllReduce: ``recvbuf[i] = op over ranks of sendbuf[i]`` for ``count`` elements on
        every rank (``sendbuf is recvbuf`` is allowed). ``op``: "sum", "prod", "max", "min"."""
        return self._reduce("HcclAllReduce", sendbuf, recvbuf, count, dtype, op, None, stream)

    def reduce(self, sendbuf, recvbuf, count: int, dtype, op: str = "sum", *, root: int = 0, stream=None) -> Event:
        """HcclReduce: like :meth:`all_reduce` but only ``root`` receives the result."""
        return self._reduce("HcclReduce", sendbuf, recvbuf, count, dtype, op, root, stream)

    def reduce_scatter(self, sendbuf, recvbuf, count: int, dtype, op: str = "sum", *, stream=None) -> Event:
        """HcclReduceScatter: ``sendbuf`` holds ``size * count`` elements; rank r receives in
        ``recvbuf`` (``count`` elements) the reduction of block r over the ranks."""
        return self._reduce("HcclReduceScatter", sendbuf, recvbuf, count, dtype, op, None, stream)

    def _reduce(self, api, sendbuf, recvbuf, count, dtype, op, root, stream):
        dt, count = _dtype_name(dtype), _count(count, api)
        if op not in HCCL_REDUCE_OPS:
            raise ValueError(f"{api}: op must be one of {', '.join(HCCL_REDUCE_OPS)}, got {op!r}")
        s = self._stream(stream, api)
        n_in = count * (self._size if api == "HcclReduceScatter" else 1)
        _check_size(sendbuf, n_in, dt, api, "sendbuf")
        send = _address(sendbuf, api, "sendbuf")
        if api == "HcclReduce" and recvbuf is None and root != self._rank:
            recv = 0
        else:
            _check_size(recvbuf, count, dt, api, "recvbuf")
            recv = _address(recvbuf, api, "recvbuf")
        h, lib = self._handle(api), self._lib
        vp = ffi.cast("void *", send), ffi.cast("void *", recv)
        if api == "HcclAllReduce":
            rc = lib.HcclAllReduce(*vp, count, HCCL_DTYPES[dt], HCCL_REDUCE_OPS[op], h, s._h)
        elif api == "HcclReduce":
            rc = lib.HcclReduce(*vp, count, HCCL_DTYPES[dt], HCCL_REDUCE_OPS[op], root, h, s._h)
        else:
            rc = lib.HcclReduceScatter(*vp, count, HCCL_DTYPES[dt], HCCL_REDUCE_OPS[op], h, s._h)
        _check(rc, api, lib)
        return self._done(s, sendbuf, recvbuf)

    def broadcast(self, buf, count: int, dtype, *, root: int = 0, stream=None) -> Event:
        """HcclBroadcast: ``root``'s ``buf`` is copied into every rank's ``buf``."""
        api = "HcclBroadcast"
        dt, count = _dtype_name(dtype), _count(count, api)
        s = self._stream(stream, api)
        _check_size(buf, count, dt, api, "buf")
        p = ffi.cast("void *", _address(buf, api, "buf"))
        _check(self._lib.HcclBroadcast(p, count, HCCL_DTYPES[dt], root, self._handle(api), s._h), api, self._lib)
        return self._done(s, buf)

    def all_gather(self, sendbuf, recvbuf, count: int, dtype, *, stream=None) -> Event:
        """HcclAllGather: ``recvbuf`` (``size * count`` elements) gets every rank's ``sendbuf``
        (``count`` elements) in rank order."""
        api = "HcclAllGather"
        dt, count = _dtype_name(dtype), _count(count, api)
        s = self._stream(stream, api)
        _check_size(sendbuf, count, dt, api, "sendbuf")
        _check_size(recvbuf, count * self._size, dt, api, "recvbuf")
        a = ffi.cast("void *", _address(sendbuf, api, "sendbuf"))
        b = ffi.cast("void *", _address(recvbuf, api, "recvbuf"))
        _check(self._lib.HcclAllGather(a, b, count, HCCL_DTYPES[dt], self._handle(api), s._h), api, self._lib)
        return self._done(s, sendbuf, recvbuf)

    def all_to_all(self, sendbuf, recvbuf, count: int, dtype, *, stream=None) -> Event:
        """HcclAlltoAll: block d (``count`` elements) of ``sendbuf`` goes to rank d; block s of
        ``recvbuf`` comes from rank s (both hold ``size * count`` elements; no overlap)."""
        api = "HcclAlltoAll"
        dt, count = _dtype_name(dtype), _count(count, api)
        s = self._stream(stream, api)
        for name, b in (("sendbuf", sendbuf), ("recvbuf", recvbuf)):
            _check_size(b, count * self._size, dt, api, name)
        a = ffi.cast("void *", _address(sendbuf, api, "sendbuf"))
        b = ffi.cast("void *", _address(recvbuf, api, "recvbuf"))
        code = HCCL_DTYPES[dt]
        _check(self._lib.HcclAlltoAll(a, count, code, b, count, code, self._handle(api), s._h), api, self._lib)
        return self._done(s, sendbuf, recvbuf)

    def send(self, buf, count: int, dtype, peer: int, *, stream=None) -> Event:
        """HcclSend: send ``count`` elements to rank ``peer`` (which calls :meth:`recv`)."""
        return self._p2p("HcclSend", buf, count, dtype, peer, stream)

    def recv(self, buf, count: int, dtype, peer: int, *, stream=None) -> Event:
        """HcclRecv: receive ``count`` elements from rank ``peer`` into ``buf``."""
        return self._p2p("HcclRecv", buf, count, dtype, peer, stream)

    def _p2p(self, api, buf, count, dtype, peer, stream):
        dt, count = _dtype_name(dtype), _count(count, api)
        s = self._stream(stream, api)
        _check_size(buf, count, dt, api, "buf")
        p = ffi.cast("void *", _address(buf, api, "buf"))
        fn = self._lib.HcclSend if api == "HcclSend" else self._lib.HcclRecv
        _check(fn(p, count, HCCL_DTYPES[dt], peer, self._handle(api), s._h), api, self._lib)
        return self._done(s, buf)

    def barrier(self, *, stream=None) -> Event:
        """HcclBarrier: completes on every rank once every rank has reached it."""
        api = "HcclBarrier"
        s = self._stream(stream, api)
        _check(self._lib.HcclBarrier(self._handle(api), s._h), api, self._lib)
        return self._done(s)


#: the live communicators of this process (for hccl_stats)
_live: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


def hccl_stats() -> list:
    """Simulator only: one dict per live communicator of this process, in (device, rank) order:
    ``{"device", "rank", "size"}`` and the counters of :meth:`Communicator.stats`. Empty on a
    real CANN install (HCCL has no such counters) or before any communicator exists."""
    out = []
    for c in sorted(list(_live), key=lambda c: (c._device._id, c._rank)):
        if c._h is None or not c._lib.has("hcclsimGetCommStats"):
            continue
        out.append({"device": c._device._id, "rank": c._rank, "size": c._size, **c.stats()})
    return out


class group:
    """``with acl_rt.hccl_group():`` — HcclGroupStart/HcclGroupEnd: the sends and receives issued
    by this thread inside the block run together (so a rank may send to and receive from a peer
    without either waiting for the other)."""

    def __enter__(self):
        lib = hccl_library()
        _check(lib.HcclGroupStart(), "HcclGroupStart", lib)
        st = _group_state
        st.depth = getattr(st, "depth", 0) + 1
        if st.depth == 1:
            st.held = []
        return self

    def __exit__(self, *exc):
        lib = hccl_library()
        st = _group_state
        st.depth -= 1
        held = st.held if st.depth == 0 else []
        if st.depth == 0:
            st.held = None
        try:
            _check(lib.HcclGroupEnd(), "HcclGroupEnd", lib)
        finally:
            for b, s in held:   # queued now (or failed): the buffers follow the streams' frees
                if not b.closed:
                    b._use_on(s, None)
        return False


# per thread: hccl_group() nesting depth and the buffers its operations use (see Communicator._done)
_group_state = threading.local()
