"""canna_dl's link to acl_rt: the memory model, allocation, synchronous copies, stream waits.

This is the only canna_dl module that reaches below acl_rt's public API (context activation,
``aclrtMemcpy`` with arbitrary pointers, stream handles), and it does so through acl_rt's one seam,
:mod:`acl_rt.lowlevel`, so changes there stay in one place.
Device memory comes only from :func:`acl_rt.alloc` (the caching pool when installed).
"""
from __future__ import annotations

import threading

import acl_rt
from acl_rt import lowlevel as _art
from acl_rt.lowlevel import MemcpyKind, Stream, backend, ffi

from . import _native

__all__ = ["ensure", "memory_model", "is_unified", "alloc_storage", "memcpy", "stream_wait", "current_device_id",
           "KDL_CPU", "KDL_EXTDEV", "KDL_ASCEND", "H2D", "D2H", "D2D", "H2H"]

KDL_CPU, KDL_EXTDEV, KDL_ASCEND = 1, 12, 21
H2H, H2D, D2H, D2D = (int(k) for k in (MemcpyKind.ACL_MEMCPY_HOST_TO_HOST, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE,
                                       MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE))

_state = _art.state
_tls = _art.thread_state()
_lock = threading.Lock()


class _Config:
    __slots__ = ("generation", "unified", "model", "host_device_id")

    def __init__(self):
        self.generation = -1
        self.unified = True
        self.model = "unified"
        self.host_device_id = 0


cfg = _Config()


def ensure() -> _Config:
    """Initialize the runtime if needed and (re)read the memory model once per runtime session."""
    if cfg.generation == _state.generation and _state.ready:
        return cfg
    with _lock:
        _art.ensure("canna_dl")
        if cfg.generation == _state.generation:
            return cfg
        b = backend()
        if b.is_sim:
            model = "discrete" if b.lib.aclsimGetMemoryModel() == 1 else "unified"
        else:
            # a real Ascend card is a PCIe device: its memory is not host-addressable
            model = "discrete"
        cfg.model = model
        cfg.unified = model == "unified"
        dev_id = current_device_id()
        cfg.host_device_id = dev_id
        _native.configure(acl_rt.Device(dev_id) if cfg.unified else None, KDL_CPU if cfg.unified else KDL_EXTDEV)
        cfg.generation = _state.generation
    return cfg


def memory_model() -> str:
    """``"unified"`` (device memory is host-coherent; CPU tensors are kernel operands) or
    ``"discrete"`` (device memory is separate; exchanges with CPU frameworks copy).

    The simulator's model comes from ``CANNA_SIM_MEMORY`` (read when the runtime initializes); a
    real Ascend install is treated as discrete."""
    return ensure().model


def is_unified() -> bool:
    return ensure().unified


def current_device_id() -> int:
    return getattr(_tls, "device_id", 0)


def device(device_id: int):
    return acl_rt.Device(device_id)


def alloc_storage(nbytes: int, device, stream=None) -> _native.Storage:
    """A Storage of ``nbytes`` fresh device bytes (64-byte aligned), from :func:`acl_rt.alloc`.

    The storage's pending-work stream starts as the allocation stream: memory from a
    stream-ordered pool may still be in use by earlier work queued on it, so host access waits for
    that stream first."""
    if nbytes == 0:
        st = _native.Storage(0, 0, kind=0, device=device)
        return st
    buf = acl_rt.alloc(nbytes, stream=stream, device=device)
    ptr = buf.ptr
    if ptr % _native.ALIGN:  # never seen from aclrtMalloc or the pool; keep the promise anyway
        buf.close()
        buf = acl_rt.alloc(nbytes + _native.ALIGN, stream=stream, device=device)
        ptr = (buf.ptr + _native.ALIGN - 1) // _native.ALIGN * _native.ALIGN
    st = _native.Storage(ptr, nbytes, kind=0, device=buf.device, keep=buf)
    st.stream = buf.stream
    return st


def memcpy(dst: int, src: int, nbytes: int, kind: int, device_id: int) -> None:
    """Synchronous ``aclrtMemcpy`` of ``nbytes`` between raw addresses (no stream ordering: the
    caller waits for pending work first)."""
    if nbytes == 0:
        return
    _art.activate(device_id, "canna_dl copy")
    _art.check(backend().lib.aclrtMemcpy(ffi.cast("void *", dst), nbytes, ffi.cast("void *", src), nbytes, kind),
               "aclrtMemcpy")


def stream_wait(consumer, producer) -> None:
    """Make ``consumer`` (anything :func:`acl_rt.lowlevel.accept_stream` takes, raw handles
    included) wait for the work queued so far on ``producer`` (an acl_rt.Stream), without blocking
    the host."""
    if not isinstance(consumer, acl_rt.Stream):
        consumer = _art.accept_stream(consumer, producer.device, "canna_dl stream wait", handles=True)
    consumer.wait(producer)


def accept_stream(stream, device, api: str, *, handles: bool = False):
    """acl_rt's stream acceptor (:func:`acl_rt.lowlevel.accept_stream`) for canna_dl's ``stream=``."""
    return _art.accept_stream(stream, device, api, handles=handles)
