"""Helpers for C-level tests of the aclnn op library through cffi (tests/test_ops_*.py).

Tensors are built the way a real caller builds them: device memory from ``acl_rt.alloc`` filled
from NumPy, an ``aclCreateTensor`` descriptor over it (view shape, strides and offset in elements,
storage shape), then the two-phase ``aclnnXxxGetWorkspaceSize`` / ``aclnnXxx`` calls on a stream.
"""
from __future__ import annotations

import numpy as np

import acl_rt
from acl_rt._lib import ffi, op_library

# aclDataType values (acl_base_rt.h)
ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_INT32, ACL_UINT8 = 0, 1, 2, 3, 4
ACL_INT16, ACL_INT64, ACL_DOUBLE, ACL_BOOL, ACL_BF16 = 6, 9, 11, 12, 27
ACL_FORMAT_ND, ACL_FORMAT_NCHW = 2, 0

try:  # bfloat16 for NumPy comes with ml_dtypes (installed with JAX / TensorFlow)
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

_NP2ACL = {np.dtype(np.float32): ACL_FLOAT, np.dtype(np.float16): ACL_FLOAT16, np.dtype(np.float64): ACL_DOUBLE,
           np.dtype(np.int32): ACL_INT32, np.dtype(np.int64): ACL_INT64, np.dtype(np.int8): ACL_INT8,
           np.dtype(np.uint8): ACL_UINT8, np.dtype(np.int16): ACL_INT16, np.dtype(np.bool_): ACL_BOOL}
if BF16 is not None:
    _NP2ACL[BF16] = ACL_BF16

ACLNN_SUCCESS, ACLNN_ERR_PARAM_NULLPTR, ACLNN_ERR_PARAM_INVALID = 0, 161001, 161002
ACLNN_ERR_RUNTIME_ERROR = 361001


def acl_dtype(dt) -> int:
    return _NP2ACL[np.dtype(dt)]


def nn():
    """The op library's cffi lib."""
    return op_library().lib


def recent_error() -> str:
    p = acl_rt._lib.backend().lib.aclGetRecentErrMsg()
    return ffi.string(p).decode() if p != ffi.NULL else ""


class DevTensor:
    """A device buffer holding `storage` elements and an aclTensor view over it.

    ``DevTensor.from_numpy(a)``: contiguous copy of ``a``. ``DevTensor.strided(a)``: ``a``'s values in
    a non-contiguous view (reversed-order dims / padding / offset) of a larger storage."""

    def __init__(self, shape, dtype, strides=None, offset=0, storage=None, stream=None, fill=None, raw=False):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.itemsize = self.dtype.itemsize
        if strides is None:
            strides, acc = [], 1
            for s in reversed(self.shape):
                strides.insert(0, acc)
                acc *= max(s, 1)
        self.strides = tuple(int(s) for s in strides)
        self.offset = int(offset)
        if storage is None:
            reach = sum((s - 1) * st for s, st in zip(self.shape, self.strides)) + 1 if all(self.shape) else 0
            storage = self.offset + reach
        self.storage = int(storage)
        # raw=True: straight from aclrtMalloc (closing really frees it), else from the caching pool
        mr = acl_rt.DeviceMemoryResource(acl_rt.Device(0)) if raw else None
        nbytes = max(self.storage * self.itemsize, 1)
        self.buf = mr.allocate(nbytes, stream=stream) if raw else acl_rt.alloc(nbytes, stream=stream)
        if fill is not None:
            self.buf.fill(fill)
        self.handle = self._create()

    def _create(self, data=None):
        lib = nn()
        dims = ffi.new("int64_t[]", list(self.shape) or [0])
        st = ffi.new("int64_t[]", list(self.strides) or [0])
        sd = ffi.new("int64_t[]", [self.storage])
        h = lib.aclCreateTensor(dims, len(self.shape), acl_dtype(self.dtype), st, self.offset, ACL_FORMAT_ND,
                                sd, 1, ffi.cast("void *", self.buf.ptr if data is None else data))
        assert h != ffi.NULL, recent_error()
        # the handle owns the descriptor and keeps the device buffer alive (so a temporary
        # DevTensor(...).handle stays valid for the whole call it is passed to)
        buf = self.buf
        return ffi.gc(h, lambda p, _buf=buf, _lib=lib: _lib.aclDestroyTensor(p))

    @classmethod
    def from_numpy(cls, a, stream=None, raw=False):
        a = np.ascontiguousarray(a)
        t = cls(a.shape, a.dtype, stream=stream, raw=raw)
        if a.size:
            t.buf.copy_from(a.reshape(-1).view(np.uint8), stream=stream)
        return t

    @classmethod
    def strided(cls, a, stream=None, pad=3, offset=5):
        """``a`` stored transposed (reversed dim order) with padding between rows and an offset."""
        a = np.asarray(a)
        nd = a.ndim
        if nd == 0:
            return cls.from_numpy(a, stream)
        # storage layout: dims in reverse order, innermost padded
        order = list(reversed(range(nd)))
        strides = [0] * nd
        acc = 1
        for k, d in enumerate(reversed(order)):   # d: innermost storage dim first
            strides[d] = acc
            acc *= a.shape[d] + (pad if k == 0 else 0)
        t = cls(a.shape, a.dtype, strides=strides, offset=offset, stream=stream)
        host = np.zeros(t.storage, dtype=a.dtype)
        view = np.lib.stride_tricks.as_strided(host[offset:], shape=a.shape,
                                               strides=[s * a.itemsize for s in strides])
        view[...] = a
        t.buf.copy_from(host.view(np.uint8), stream=stream)
        return t

    def numpy(self, stream=None):
        host = np.empty(self.storage, dtype=self.dtype)
        if self.storage:
            self.buf.copy_to(host.view(np.uint8), stream=stream)
        if not all(self.shape):
            return np.empty(self.shape, self.dtype)
        return np.lib.stride_tricks.as_strided(host[self.offset:], shape=self.shape,
                                               strides=[s * self.itemsize for s in self.strides]).copy()

    def close(self):
        """Destroy the descriptor now and free the buffer."""
        if self.handle is not None:
            ffi.release(self.handle)
            self.handle = None
        self.buf.close()


def scalar(value, dtype):
    """An aclScalar (destroyed by the caller or at garbage collection)."""
    lib = nn()
    cell = ffi.new(f"{'float' if np.dtype(dtype) == np.float32 else 'double' if np.dtype(dtype) == np.float64 else 'int64_t' if np.dtype(dtype) == np.int64 else 'int32_t'} *", value)
    h = lib.aclCreateScalar(cell, acl_dtype(dtype))
    assert h != ffi.NULL, recent_error()
    return ffi.gc(h, lib.aclDestroyScalar)


def int_array(values):
    lib = nn()
    v = ffi.new("int64_t[]", list(values) or [0])
    h = lib.aclCreateIntArray(v, len(values))
    assert h != ffi.NULL, recent_error()
    return ffi.gc(h, lib.aclDestroyIntArray)


def bool_array(values):
    lib = nn()
    v = ffi.new("bool[]", list(values) or [False])
    h = lib.aclCreateBoolArray(v, len(values))
    assert h != ffi.NULL, recent_error()
    return ffi.gc(h, lib.aclDestroyBoolArray)


class OpError(Exception):
    def __init__(self, code, api, message):
        self.code, self.api, self.message = code, api, message
        super().__init__(f"{api}: {code}: {message}")


def run(name, *args, stream=None, sync=True):
    """aclnn<name>GetWorkspaceSize(*args, &ws, &exec) then aclnn<name>(ws, size, exec, stream).

    Raises OpError(code, api, message) on a failure of either phase; returns the workspace
    buffer (or None), which must stay alive until the stream passed the op."""
    lib = nn()
    ws = ffi.new("uint64_t *")
    ex = ffi.new("aclOpExecutor **")
    rc = getattr(lib, f"aclnn{name}GetWorkspaceSize")(*args, ws, ex)
    if rc:
        raise OpError(rc, f"aclnn{name}GetWorkspaceSize", recent_error())
    wbuf = acl_rt.alloc(ws[0], stream=stream) if ws[0] else None
    s = stream or acl_rt.current_stream()
    rc = getattr(lib, f"aclnn{name}")(ffi.cast("void *", wbuf.ptr) if wbuf else ffi.NULL, ws[0], ex[0],
                                      ffi.cast("void *", s.handle))
    if rc:
        raise OpError(rc, f"aclnn{name}", recent_error())
    if sync:
        s.synchronize()
    return wbuf
