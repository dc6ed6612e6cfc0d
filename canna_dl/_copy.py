"""Every copy canna_dl makes goes through here and is counted with its reason.

Copies between host-addressable views (any memory in the unified model, host memory in the
discrete one) are strided C copies after the pending writes of both sides completed. Copies that
involve device memory in the discrete model stage through aligned host memory with synchronous
``aclrtMemcpy`` (whole spans, so the bytes between a strided view's elements are preserved); the
kernel library can later plug in a device-side strided copy without changing callers.
"""
from __future__ import annotations

import threading

from . import _native, _rt

__all__ = ["copy_stats", "reset_copy_stats", "count", "copy_into", "new_device_array", "new_host_array",
           "sync_for_host", "c_strides", "span"]

_stats_lock = threading.Lock()
_stats: dict[str, list] = {}

#: what each reason means (documented in canna_dl.copy_stats)
REASONS = {
    "contiguous": "DeviceArray.contiguous() / a reshape that could not be a view",
    "copy": "DeviceArray.copy() or asarray/from_dlpack(copy=True)",
    "numpy": "DeviceArray.numpy() / tolist() / item() (explicit host copy)",
    "setitem": "a[...] = array",
    "to_host": "discrete memory model: device memory handed to a CPU consumer",
    "to_device": "discrete memory model: host memory imported into device memory",
    "to_device_id": "an array moved to another device (device= argument)",
    "dlpack_copy": "__dlpack__(copy=True)",
    "negative_strides": "__dlpack__ of a view with negative strides (PyTorch aborts on them, pytorch#188023)",
    "unaligned_legacy": "legacy __dlpack__ of a view not 64-byte aligned (TensorFlow aborts later, JAX copies)",
    "torch_layout": "to_torch of a view with negative strides (pytorch#188023)",
    "torch_resolve": "a PyTorch negated/conjugated view resolved before import (torch exports it un-negated)",
    "tf_layout": "to_tf of a view TensorFlow cannot take (not compact row-major, or not 64-byte aligned)",
    "jax_layout": "to_jax of a view JAX cannot take zero-copy (gaps, negative or zero strides, not 64-byte aligned)",
    "tf_nhwc": "canna_dl.tf conv2d / max_pool2d with NHWC data: an NCHW result of aclnn transposed to NHWC",
    "tf_hwio": "canna_dl.tf conv2d backward: the OIHW filter gradient of aclnn transposed to TensorFlow's HWIO",
    "tf_pad": "canna_dl.tf conv2d with asymmetric (SAME or explicit) padding: the input copied into a zero-padded buffer",
    "dtype": "asarray with a different dtype",
    "repr": "repr() of an array in device memory (discrete model)",
}


class _ThreadCopies(threading.local):
    n = 0


_thread = _ThreadCopies()


def thread_copy_count() -> int:
    """The copies :func:`count` saw on the calling thread since it started (internal: a check that
    a call made none, unaffected by other threads' copies)."""
    return _thread.n


def count(reason: str, nbytes: int) -> None:
    _thread.n += 1
    with _stats_lock:
        s = _stats.get(reason)
        if s is None:
            s = _stats[reason] = [0, 0]
        s[0] += 1
        s[1] += int(nbytes)


def copy_stats() -> dict:
    """Copies canna_dl made since start (or the last :func:`reset_copy_stats`).

    Returns ``{"count": n, "bytes": b, "by_reason": {reason: {"count": n, "bytes": b}}}``; bytes
    are the bytes of the data copied. Reasons (``canna_dl._copy.REASONS`` explains each):
    ``contiguous``, ``copy``, ``numpy``, ``setitem``, ``to_host``, ``to_device``,
    ``to_device_id``, ``dlpack_copy``, ``negative_strides``, ``unaligned_legacy``,
    ``torch_layout``, ``torch_resolve``, ``tf_layout``, ``jax_layout``, ``dtype``, ``repr``;
    ``tf_nhwc``, ``tf_hwio``, ``tf_pad`` (layout copies of canna_dl.tf's convolution and pooling).
    A zero-copy exchange adds nothing.
    """
    with _stats_lock:
        by = {k: {"count": v[0], "bytes": v[1]} for k, v in sorted(_stats.items())}
    return {"count": sum(v["count"] for v in by.values()), "bytes": sum(v["bytes"] for v in by.values()),
            "by_reason": by}


def reset_copy_stats() -> None:
    """Zero the counters of :func:`copy_stats`."""
    with _stats_lock:
        _stats.clear()


# -- layouts -----------------------------------------------------------------------------------

def c_strides(shape) -> tuple:
    s, out = 1, []
    for n in reversed(shape):
        out.append(s)
        s *= n if n else 1
    return tuple(reversed(out))


def span(a) -> tuple[int, int]:
    """(first element offset from the storage base, number of elements) covering every element."""
    if a.size == 0:
        return a.offset, 0
    lo = hi = 0
    for n, s in zip(a.shape, a.strides):
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    return a.offset + lo, hi - lo + 1


def _host_ok(st) -> bool:
    return st.kind == 1 or _rt.cfg.unified


def sync_for_host(a) -> None:
    """Wait until pending device work on ``a``'s memory is done (then nothing is pending)."""
    st = a.storage
    s = st.stream
    if s is not None:
        s.settle()   # (a destroyed stream's queued writes still land)
        st.stream = None


def new_device_array(cls, shape, dtype, device, stream=None):
    """A fresh C-contiguous array in device memory (contents undefined)."""
    n = 1
    for d in shape:
        n *= d
    st = _rt.alloc_storage(n * dtype.itemsize, device, stream)
    return _native.make_array(cls, st, dtype, tuple(shape), c_strides(shape), 0, False)


def new_host_array(cls, shape, dtype):
    """A fresh C-contiguous array in 64-byte aligned host memory (kind host, no device)."""
    n = 1
    for d in shape:
        n *= d
    st = _native.host_alloc(n * dtype.itemsize)
    return _native.make_array(cls, st, dtype, tuple(shape), c_strides(shape), 0, False)


def _bstrides(a):
    it = a.itemsize
    return tuple(s * it for s in a.strides)


def _stage(a):
    """A host-addressable array with ``a``'s layout holding a copy of ``a``'s whole span, and the
    (device address, nbytes) of that span."""
    lo, n = span(a)
    it = a.itemsize
    host = _native.host_alloc(n * it)
    dev_addr = a.base_ptr + lo * it
    _rt.memcpy(host.ptr, dev_addr, n * it, _rt.D2H, _devid(a))
    view = _native.make_array(type(a), host, a.dtype, a.shape, a.strides, a.offset - lo, True)
    return view, dev_addr, n * it


def _devid(a) -> int:
    d = a.device
    return d.device_id if d is not None else _rt.current_device_id()


def _overlap(dst, src) -> bool:
    """Whether writing ``dst`` may change ``src`` before it is read: their byte extents intersect
    (conservative: interleaved views that share no element count too), unless they are the very
    same view (each element is then read before it is written)."""
    it = dst.itemsize
    d_lo, d_n = span(dst)
    s_lo, s_n = span(src)
    d0 = dst.base_ptr + d_lo * it
    s0 = src.base_ptr + s_lo * src.itemsize
    if not (d0 < s0 + s_n * src.itemsize and s0 < d0 + d_n * it):
        return False
    return not (dst.ptr == src.ptr and dst.itemsize == src.itemsize
                and all(n <= 1 or a == b for n, a, b in zip(dst.shape, dst.strides, src.strides)))


def copy_into(dst, src) -> None:
    """Copy the elements of ``src`` into ``dst`` (same shape and dtype; ``src`` may broadcast with
    zero strides). Waits for pending work on both; not counted (callers count)."""
    if dst.shape != src.shape or dst.dtype is not src.dtype:
        raise ValueError(f"copy between {src.shape} {src.dtype} and {dst.shape} {dst.dtype}")
    if dst.size == 0:
        return
    sync_for_host(src)
    sync_for_host(dst)
    it = dst.itemsize
    dh, sh = _host_ok(dst.storage), _host_ok(src.storage)
    if dh == sh and _overlap(dst, src):
        # NumPy's rule for overlapping assignment (``a[:] = a[::-1]``): the source is read before
        # it is overwritten, so it is copied to a temporary first
        if sh:
            tmp = new_host_array(type(src), src.shape, src.dtype)
            _native.strided_copy(tmp.ptr, _bstrides(tmp), src.ptr, _bstrides(src), src.shape, it)
            src = tmp
        else:
            src, _, _ = _stage(src)
            sh = True
    if dh and sh:
        _native.strided_copy(dst.ptr, _bstrides(dst), src.ptr, _bstrides(src), dst.shape, it)
        return
    # discrete model, at least one side in device memory
    if dst._flags & _native.AF_C_CONTIG and src._flags & _native.AF_C_CONTIG:
        kind = (_rt.D2D if not sh else _rt.H2D) if not dh else _rt.D2H
        _rt.memcpy(dst.ptr, src.ptr, dst.nbytes, kind, _devid(dst if not dh else src))
        return
    if not sh:
        src, _, _ = _stage(src)
    if dh:
        _native.strided_copy(dst.ptr, _bstrides(dst), src.ptr, _bstrides(src), dst.shape, it)
        return
    if dst._flags & _native.AF_C_CONTIG and src._flags & _native.AF_C_CONTIG:
        _rt.memcpy(dst.ptr, src.ptr, dst.nbytes, _rt.H2D, _devid(dst))
        return
    # strided device destination: read its span, write the elements, write the span back
    view, dev_addr, nbytes = _stage(dst)
    _native.strided_copy(view.ptr, _bstrides(view), src.ptr, _bstrides(src), dst.shape, it)
    _rt.memcpy(dev_addr, view.base_ptr, nbytes, _rt.H2D, _devid(dst))
