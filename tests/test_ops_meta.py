"""The aclnn meta API of the simulator's op library (aclCreateTensor & co., executors, phase 2
checks), through cffi: the same calls a real CANN install answers (hicann/opbase include/nnopbase/aclnn/acl_meta.h)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import acl_rt
from acl_rt._lib import ffi

from aclnn_util import (ACL_DOUBLE, ACL_FLOAT, ACL_FORMAT_ND, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR,
                        ACLNN_ERR_RUNTIME_ERROR, DevTensor, OpError, int_array, nn, recent_error, run, scalar)
from conftest import assert_usable

pytestmark = pytest.mark.usefixtures("acl")


def create(dims, dtype=ACL_FLOAT, strides=None, offset=0, storage=None, data=0x1000_0000, fmt=ACL_FORMAT_ND,
           ndims=None, nstorage=None):
    lib = nn()
    d = ffi.new("int64_t[]", list(dims) or [0]) if dims is not None else ffi.NULL
    s = ffi.new("int64_t[]", list(strides)) if strides is not None else ffi.NULL
    st = storage if storage is not None else [int(np.prod(dims))] if dims is not None else [0]
    sd = ffi.new("int64_t[]", list(st) or [0]) if st is not None else ffi.NULL
    return lib.aclCreateTensor(d, len(dims) if ndims is None and dims is not None else (ndims or 0), dtype, s,
                               offset, fmt, sd, len(st) if nstorage is None and st is not None else (nstorage or 0),
                               ffi.cast("void *", data))


def test_create_and_query():
    lib = nn()
    t = create([2, 3], strides=[1, 2], offset=1, storage=[7])
    assert t != ffi.NULL
    dims, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
    assert lib.aclGetViewShape(t, dims, n) == 0
    assert [dims[0][i] for i in range(n[0])] == [2, 3]
    assert lib.aclGetViewStrides(t, dims, n) == 0
    assert [dims[0][i] for i in range(n[0])] == [1, 2]
    off = ffi.new("int64_t *")
    assert lib.aclGetViewOffset(t, off) == 0 and off[0] == 1
    dt, fmt = ffi.new("aclDataType *"), ffi.new("aclFormat *")
    assert lib.aclGetDataType(t, dt) == 0 and dt[0] == ACL_FLOAT
    assert lib.aclGetFormat(t, fmt) == 0 and fmt[0] == ACL_FORMAT_ND
    addr = ffi.new("void **")
    assert lib.aclGetRawTensorAddr(t, addr) == 0 and int(ffi.cast("uintptr_t", addr[0])) == 0x1000_0000
    assert lib.aclSetRawTensorAddr(t, ffi.cast("void *", 0x2000_0000)) == 0
    assert lib.aclGetRawTensorAddr(t, addr) == 0 and int(ffi.cast("uintptr_t", addr[0])) == 0x2000_0000
    assert lib.aclDestroyTensor(t) == 0
    # a destroyed handle is reported, not dereferenced
    assert lib.aclDestroyTensor(t) == ACLNN_ERR_PARAM_INVALID
    assert "not a live aclTensor" in recent_error()
    assert lib.aclGetViewOffset(t, off) == ACLNN_ERR_PARAM_INVALID


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dims=[2, -1]), "viewDims[1] = -1 is negative"),
    (dict(dims=[1] * 9, storage=[1]), "larger than 8"),
    (dict(dims=[2, 2], dtype=99), "unknown dataType 99"),
    (dict(dims=[2, 2], fmt=1234), "unknown format 1234"),
    (dict(dims=[2, 2], offset=-1), "offset -1 is negative"),
    (dict(dims=[2, 2], strides=[2, -1]), "stride[1] = -1 is negative"),
    (dict(dims=[2, 3], strides=[3, 1], offset=1, storage=[6]), "outside the storage shape [6]"),
    (dict(dims=[2, 3], strides=[4, 1], storage=[6]), "reaches element 6"),
    (dict(dims=[2, 2], storage=[4, -1]), "storageDims[1] = -1 is negative"),
    (dict(dims=None, ndims=2), "viewDims is NULL but viewDimsNum is 2"),
    (dict(dims=[4], storage=None, nstorage=1), "storageDims is NULL"),
])
def test_create_rejects(kwargs, needle):
    if kwargs.get("storage", 0) is None:
        kwargs = dict(kwargs)
        lib = nn()
        d = ffi.new("int64_t[]", kwargs["dims"])
        t = lib.aclCreateTensor(d, 1, ACL_FLOAT, ffi.NULL, 0, ACL_FORMAT_ND, ffi.NULL, 1, ffi.NULL)
    else:
        t = create(**kwargs)
    assert t == ffi.NULL
    msg = recent_error()
    assert needle in msg, msg
    assert_usable()


def test_empty_and_descriptor_tensors():
    lib = nn()
    t = create([0, 5], storage=[0], data=0)     # empty: no data needed
    assert t != ffi.NULL
    s = create([], storage=[1])                 # 0-d
    assert s != ffi.NULL
    c = create([3, 4], strides=None, storage=[12], data=0)   # NULL strides = contiguous, NULL data = descriptor
    st, n = ffi.new("int64_t **"), ffi.new("uint64_t *")
    assert lib.aclGetViewStrides(c, st, n) == 0 and [st[0][0], st[0][1]] == [4, 1]
    for h in (t, s, c):
        assert lib.aclDestroyTensor(h) == 0


def test_scalars_and_arrays():
    lib = nn()
    assert lib.aclCreateScalar(ffi.NULL, ACL_FLOAT) == ffi.NULL
    assert "value must not be NULL" in recent_error()
    v = ffi.new("double *", 2.5)
    s = lib.aclCreateScalar(v, ACL_DOUBLE)
    assert s != ffi.NULL and lib.aclDestroyScalar(s) == 0
    assert lib.aclDestroyScalar(s) == ACLNN_ERR_PARAM_INVALID
    a = lib.aclCreateIntArray(ffi.new("int64_t[]", [1, 2, 3]), 3)
    size = ffi.new("uint64_t *")
    assert lib.aclGetIntArraySize(a, size) == 0 and size[0] == 3
    # a handle of the wrong kind is named as such
    assert lib.aclDestroyTensor(ffi.cast("aclTensor *", a)) == ACLNN_ERR_PARAM_INVALID
    assert "is an aclIntArray, not an aclTensor" in recent_error()
    assert lib.aclDestroyIntArray(a) == 0
    assert lib.aclCreateIntArray(ffi.NULL, 2) == ffi.NULL
    b = lib.aclCreateBoolArray(ffi.new("bool[]", [True, False]), 2)
    f = lib.aclCreateFloatArray(ffi.new("float[]", [1.0]), 1)
    assert lib.aclGetBoolArraySize(b, size) == 0 and size[0] == 2
    assert lib.aclDestroyBoolArray(b) == 0 and lib.aclDestroyFloatArray(f) == 0
    t1, t2 = create([2], storage=[2]), create([3], storage=[3])
    lst = lib.aclCreateTensorList(ffi.new("aclTensor *[]", [t1, t2]), 2)
    assert lib.aclGetTensorListSize(lst, size) == 0 and size[0] == 2
    assert lib.aclDestroyTensorList(lst) == 0          # destroys the tensors too
    assert lib.aclDestroyTensor(t1) == ACLNN_ERR_PARAM_INVALID
    assert lib.aclnnInit(ffi.NULL) == 0


def _add_exec(a, b, out, alpha=1.0):
    lib = nn()
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    al = scalar(alpha, np.float32)
    assert lib.aclnnAddGetWorkspaceSize(a.handle, b.handle, al, out.handle, ws, ex) == 0, recent_error()
    return ex[0], ws[0]


def test_executor_single_use(stream):
    lib = nn()
    a, b, o = (DevTensor.from_numpy(np.ones(4, np.float32), stream) for _ in range(3))
    ex, ws = _add_exec(a, b, o)
    h = ffi.cast("void *", stream.handle)
    assert lib.aclnnAdd(ffi.NULL, 0, ex, h) == 0
    assert lib.aclnnAdd(ffi.NULL, 0, ex, h) == ACLNN_ERR_PARAM_INVALID      # consumed
    assert "already used" in recent_error()
    stream.synchronize()
    np.testing.assert_array_equal(o.numpy(), 2)
    # an executor of another op is refused
    ex2, _ = _add_exec(a, b, o)
    assert lib.aclnnMul(ffi.NULL, 0, ex2, h) == ACLNN_ERR_PARAM_INVALID
    assert "created by aclnnAddGetWorkspaceSize" in recent_error()
    assert lib.aclnnAdd(ffi.NULL, 0, ex2, h) == 0
    stream.synchronize()
    assert lib.aclnnAdd(ffi.NULL, 0, ffi.NULL, h) == ACLNN_ERR_PARAM_NULLPTR


def test_executor_repeatable_and_address_update(stream):
    lib = nn()
    x = np.arange(6, dtype=np.float32)
    a, b, o = DevTensor.from_numpy(x, stream), DevTensor.from_numpy(x * 10, stream), DevTensor((6,), np.float32)
    a2 = DevTensor.from_numpy(x + 100, stream)
    ex, _ = _add_exec(a, b, o)
    assert lib.aclSetAclOpExecutorRepeatable(ex) == 0
    h = ffi.cast("void *", stream.handle)
    for _ in range(3):
        assert lib.aclnnAdd(ffi.NULL, 0, ex, h) == 0
    stream.synchronize()
    np.testing.assert_array_equal(o.numpy(), x * 11)
    # inputs are numbered in order: self 0, other 1; the executor reads the new address
    assert lib.aclSetInputTensorAddr(ex, 0, a.handle, ffi.cast("void *", a2.buf.ptr)) == 0
    assert lib.aclSetInputTensorAddr(ex, 5, a.handle, ffi.cast("void *", a2.buf.ptr)) == ACLNN_ERR_PARAM_INVALID
    assert "out of range" in recent_error()
    assert lib.aclnnAdd(ffi.NULL, 0, ex, h) == 0
    stream.synchronize()
    np.testing.assert_array_equal(o.numpy(), x + 100 + x * 10)
    assert lib.aclDestroyAclOpExecutor(ex) == 0
    assert lib.aclnnAdd(ffi.NULL, 0, ex, h) == ACLNN_ERR_PARAM_INVALID


def test_phase1_null_outputs_and_handles():
    lib = nn()
    a = DevTensor.from_numpy(np.ones(3, np.float32))
    ex = ffi.new("aclOpExecutor **")
    assert lib.aclnnExpGetWorkspaceSize(a.handle, a.handle, ffi.NULL, ex) == ACLNN_ERR_PARAM_NULLPTR
    assert "workspaceSize must not be NULL" in recent_error()
    ws = ffi.new("uint64_t *")
    assert lib.aclnnExpGetWorkspaceSize(ffi.NULL, a.handle, ws, ex) == ACLNN_ERR_PARAM_NULLPTR
    assert "self must not be NULL" in recent_error()
    bogus = ffi.cast("aclTensor *", 0x12345)
    assert lib.aclnnExpGetWorkspaceSize(bogus, a.handle, ws, ex) == ACLNN_ERR_PARAM_INVALID
    assert "not a live aclTensor" in recent_error()


def test_workspace_checked(stream):
    a = DevTensor.from_numpy(np.ones((8, 8), np.float16), stream)
    o = DevTensor((8, 8), np.float16)
    lib = nn()
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    assert lib.aclnnMatmulGetWorkspaceSize(a.handle, a.handle, o.handle, 0, ws, ex) == 0
    assert ws[0] > 0          # float16 operands are packed to float32 in the workspace
    h = ffi.cast("void *", stream.handle)
    assert lib.aclnnMatmul(ffi.NULL, ws[0] - 1, ex[0], h) == ACLNN_ERR_PARAM_INVALID
    assert "smaller than" in recent_error()
    assert lib.aclnnMatmul(ffi.NULL, ws[0], ex[0], h) == ACLNN_ERR_PARAM_NULLPTR
    host = np.zeros(ws[0], np.uint8)
    buf = acl_rt.alloc(ws[0])
    assert lib.aclnnMatmul(ffi.cast("void *", buf.ptr), ws[0], ex[0], h) == 0
    stream.synchronize()
    np.testing.assert_array_equal(o.numpy(), 8)
    del host


def test_operand_must_be_accessible(stream):
    """Freed device memory and out-of-bounds views are refused at launch, not crashed on."""
    a = DevTensor.from_numpy(np.ones(16, np.float32), stream, raw=True)   # raw: close() really frees
    o = DevTensor((16,), np.float32)
    lib = nn()
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    assert lib.aclnnExpGetWorkspaceSize(a.handle, o.handle, ws, ex) == 0
    a.buf.close()
    rc = lib.aclnnExp(ffi.NULL, 0, ex[0], ffi.cast("void *", stream.handle))
    assert rc == ACLNN_ERR_PARAM_INVALID
    assert "freed" in recent_error()
    assert_usable()


def test_freed_before_the_task_runs_is_an_async_error(stream):
    """An operand freed while the op is still queued: the task reports it at the next synchronize
    (like a device fault) instead of touching unmapped memory, and the stream stays usable."""
    rt = acl_rt._lib.backend().lib
    n = 1 << 12
    cell = ffi.new("void **")
    assert rt.aclrtMalloc(cell, n * 4, 0) == 0
    lib = nn()
    dims, sd = ffi.new("int64_t[]", [n]), ffi.new("int64_t[]", [n])
    t = lib.aclCreateTensor(dims, 1, ACL_FLOAT, ffi.NULL, 0, ACL_FORMAT_ND, sd, 1, cell[0])
    o = DevTensor((n,), np.float32)
    h = ffi.cast("void *", stream.handle)
    assert rt.aclsimLaunchDelay(h, 50000, 0, 1) == 0       # keep the stream busy for 50 ms
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    assert lib.aclnnExpGetWorkspaceSize(t, o.handle, ws, ex) == 0
    assert lib.aclnnExp(ffi.NULL, 0, ex[0], h) == 0
    assert rt.aclrtFree(cell[0]) == 0
    with pytest.raises(acl_rt.AclError) as err:
        stream.synchronize()
    assert err.value.code == ACLNN_ERR_RUNTIME_ERROR and "freed" in str(err.value)
    lib.aclDestroyTensor(t)
    stream.synchronize()
    assert_usable()


def test_bad_stream():
    a = DevTensor.from_numpy(np.ones(4, np.float32))
    lib = nn()
    ws, ex = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    assert lib.aclnnExpGetWorkspaceSize(a.handle, a.handle, ws, ex) == 0
    rc = lib.aclnnExp(ffi.NULL, 0, ex[0], ffi.cast("void *", 0x5a00000000000999))
    assert rc == ACLNN_ERR_RUNTIME_ERROR
    assert "stream" in recent_error()


def test_error_names():
    assert acl_rt.error_name(161002) == "ACLNN_ERR_PARAM_INVALID"
    assert acl_rt.error_name(561103) == "ACLNN_ERR_INNER_NULLPTR"


def test_backend_info_reports_op_libraries():
    info = acl_rt.backend_info()
    assert info["op_libraries"] and info["op_libraries"][0].endswith("libopapi_sim.so")
    assert info["op_library_error"] is None
    assert info["sim_blas"] and ("OpenBLAS" in info["sim_blas"] or "MKL" in info["sim_blas"]), info["sim_blas"]


_BLAS_PRODUCTS = """
    import numpy as np, kernels, acl_rt
    rng = np.random.default_rng(0)
    for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
        a, b = rng.standard_normal((37, 53)).astype(dt), rng.standard_normal((53, 29)).astype(dt)
        c = rng.standard_normal((5, 37, 53)).astype(dt)
        ref = a.astype(np.float64) @ b
        for x, y, want in ((a, b, ref), (np.ascontiguousarray(a.T).T, b, ref),
                           (a, np.ascontiguousarray(b.T).T, ref), (a.T, a, a.T.astype(np.float64) @ a),
                           (c, b, c.astype(np.float64) @ b)):
            got = np.asarray(kernels.matmul(x, y))
            assert np.abs(got - want).max() <= tol * np.abs(want).max() * 10, (dt, x.shape, y.shape)
    print(acl_rt.backend_info()["sim_blas"])
"""


@pytest.mark.parametrize("case", ["openblas", "mkl of a loaded pytorch", "CANNA_SIM_BLAS over pytorch's mkl"])
def test_the_simulators_blas(py, case):
    # the op library's matrix products take the BLAS found at the first one ($CANNA_SIM_BLAS, an MKL
    # already loaded, the scipy-openblas64 wheel acl_rt loads); every one gives float64-checked products
    import scipy_openblas64 as ob
    env, first = {}, ""
    if case != "openblas":
        pytest.importorskip("torch")
        first = "import torch\n"
    if case.startswith("CANNA_SIM_BLAS"):
        env["CANNA_SIM_BLAS"] = str(Path(ob.get_lib_dir()) / f"lib{ob.get_library()}.so")
    out = py(first + textwrap.dedent(_BLAS_PRODUCTS), env=env).stdout.strip().splitlines()[-1]
    if case == "mkl of a loaded pytorch":
        assert out.startswith("MKL (loaded in the process: libtorch_cpu.so)"), out
    else:
        assert "OpenBLAS" in out and "MKL" not in out, out


def test_acl_rt_imports_without_op_library(py):
    py("""
        import acl_rt, acl_rt._lib as L
        L.OPS_SIM_LIBRARY = L.Path('/nonexistent/libopapi_sim.so')
        acl_rt.init()
        info = acl_rt.backend_info()
        assert info['op_libraries'] is None and 'missing' in info['op_library_error'], info
        import acl_rt as a; b = a.alloc(64); b.close()
    """)


def test_concurrent_launches_of_one_executor(stream):
    """Threads racing to launch one single-use executor: exactly one wins, the others get 161002;
    a repeatable executor launched from several threads runs every launch."""
    import threading
    lib = nn()
    x = np.ones(256, np.float32)
    a, b, o = DevTensor.from_numpy(x, stream), DevTensor.from_numpy(x, stream), DevTensor((256,), np.float32)
    h = ffi.cast("void *", stream.handle)
    for _ in range(20):
        ex, _ = _add_exec(a, b, o)
        results = []
        barrier = threading.Barrier(4)

        def go():
            barrier.wait()
            results.append(lib.aclnnAdd(ffi.NULL, 0, ex, h))
        threads = [threading.Thread(target=go) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [0] + [ACLNN_ERR_PARAM_INVALID] * 3
    ex, _ = _add_exec(a, b, o)
    assert lib.aclSetAclOpExecutorRepeatable(ex) == 0
    results = []

    def many():
        for _ in range(50):
            results.append(lib.aclnnAdd(ffi.NULL, 0, ex, h))
    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 200
    assert lib.aclDestroyAclOpExecutor(ex) == 0
    stream.synchronize()
    np.testing.assert_array_equal(o.numpy(), 2)
