"""kernels.RawKernel / RawModule: compile, load and launch user kernels on the simulator (issue 6).

Everything a crash could take down (a segfaulting kernel, memcheck, never-ending kernels, fault
handler chaining) runs in a subprocess; each bad input is followed by a valid launch that succeeds.
"""
from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import acl_rt
import kernels
from kernels._args import gm_pointer
from kernels._raw import pending_keepalives

from conftest import run_python

ADD = r'''
#include "canna_kernel.h"
CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
    uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint32_t i = lo; i < n && i < lo + per; ++i) ((float*)z)[i] = ((float*)x)[i] + ((float*)y)[i];
}
'''

# the same kernel with const inputs: immutable arrays (TF, JAX tensors) are accepted for them
ADD_CONST = ADD.replace("add_custom(GM_ADDR x, GM_ADDR y,", "add_const(const GM_ADDR x, const GM_ADDR y,")

LIB = r'''
#include "canna_kernel.h"
/* z = alpha * x + y over [0, n), blocks taking interleaved chunks of 64 */
CANNA_KERNEL void axpy(float alpha, const float *x, const float *y, float *z, uint64_t n) {
    for (uint64_t c = GetBlockIdx() * 64; c < n; c += GetBlockNum() * 64)
        for (uint64_t i = c; i < n && i < c + 64; ++i) z[i] = alpha * x[i] + y[i];
}
CANNA_KERNEL void block_ids(int64_t *idx, int64_t *num) {
    idx[GetBlockIdx()] = GetBlockIdx();
    num[GetBlockIdx()] = GetBlockNum();
}
struct scalars { int8_t a; uint8_t b; int16_t c; uint16_t d; int32_t e; uint32_t f; int64_t g; uint64_t h;
                 float i; double j; bool k; };
CANNA_KERNEL void echo(int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e, uint32_t f, int64_t g, uint64_t h,
                       float i, double j, bool k, GM_ADDR out) {
    struct scalars s = {a, b, c, d, e, f, g, h, i, j, k};
    *(struct scalars *)out = s;
}
CANNA_KERNEL void spin_us(uint64_t us, GM_ADDR out) {
    volatile uint64_t i = 0; for (uint64_t k = 0; k < us * 300; k++) i++;
    if (out) ((uint32_t *)out)[0] = 7;
}
CANNA_KERNEL void empty(void) {}
'''

SCALARS_DTYPE = np.dtype([("a", "i1"), ("b", "u1"), ("c", "i2"), ("d", "u2"), ("e", "i4"), ("f", "u4"), ("g", "i8"),
                          ("h", "u8"), ("i", "f4"), ("j", "f8"), ("k", "?")], align=True)


# a private on-disk kernel cache for this module (and the subprocesses it starts): tests/conftest.py
pytestmark = pytest.mark.usefixtures("kernel_cache")


@pytest.fixture(scope="module")
def add(kernel_cache):
    acl_rt.init()
    return kernels.RawKernel(ADD, "add_custom")


@pytest.fixture(scope="module")
def add_const(kernel_cache):
    acl_rt.init()
    return kernels.RawKernel(ADD_CONST, "add_const")


@pytest.fixture(scope="module")
def lib(kernel_cache):
    acl_rt.init()
    return kernels.RawModule(LIB)


def sync():
    acl_rt.current_stream().synchronize()


def assert_valid_launch(add):
    """A valid launch right after a failure succeeds (the state stays usable)."""
    x = np.arange(100, dtype=np.float32)
    z = np.full(100, np.nan, np.float32)
    add.launch(3, x, x, z, 100)
    sync()
    np.testing.assert_array_equal(z, 2 * x)


# ----------------------------------------------------------------------- the add kernel's example

def test_add_kernel_example(add):
    x = np.array([1, 2, 3], np.float32)
    y = np.array([4, 5, 6], np.float32)
    z = np.empty(3, np.float32)
    add.launch(2, x, y, z, 3)
    sync()
    assert z.tolist() == [5, 7, 9]


def test_shape_is_kept_for_a_32x64x128_torch_tensor(add):
    torch = pytest.importorskip("torch")
    a, b = torch.rand(32, 64, 128), torch.rand(32, 64, 128)
    c = torch.empty_like(a)
    ptr = c.data_ptr()
    add.launch(24, a, b, c, a.numel())
    sync()
    assert c.shape == (32, 64, 128) and c.data_ptr() == ptr
    assert torch.equal(c, a + b)


def test_random_float32_against_numpy_float64(lib):
    rng = np.random.default_rng(0)
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    z = np.empty(n, np.float32)
    alpha = 1.7
    lib.get_function("axpy").launch(13, alpha, x, y, z, n)
    sync()
    ref = np.float64(np.float32(alpha)) * x.astype(np.float64) + y.astype(np.float64)
    np.testing.assert_allclose(z, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [1, 7, 64, 65, 1000, 65_537])
@pytest.mark.parametrize("blocks", [1, 3, 24, 1000])
def test_many_blocks_and_odd_sizes(add, n, blocks):
    rng = np.random.default_rng(n + blocks)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    z = np.full(n + 1, np.nan, np.float32)   # one guard element after the end
    add.launch(blocks, x, y, z, n)
    sync()
    np.testing.assert_array_equal(z[:n], x + y)
    assert np.isnan(z[n])


@pytest.mark.parametrize("blocks", [1, 2, 48, 1001, kernels.MAX_BLOCKS])
def test_every_block_runs_once_with_its_index(lib, blocks):
    idx = np.full(blocks, -1, np.int64)
    num = np.zeros(blocks, np.int64)
    lib.get_function("block_ids").launch(blocks, idx, num)
    sync()
    np.testing.assert_array_equal(idx, np.arange(blocks))
    assert (num == blocks).all()


# --------------------------------------------------------------------------- frameworks, zero-copy

N = 1_000_000


def _check_zero_copy(obj, expected_ptr):
    assert gm_pointer(obj).ptr == expected_ptr


class _NoCopies:
    """Asserts canna_dl counted no copy inside the block, once canna_dl provides copy_stats()
    (DESIGN.md §5); until then zero-copy is shown by pointer equality and in-place writes."""

    def __enter__(self):
        import canna_dl
        self._stats = getattr(canna_dl, "copy_stats", None)
        self._before = self._stats() if self._stats else None
        return self

    def __exit__(self, *exc):
        if self._stats and exc[0] is None:
            assert self._stats() == self._before, "canna_dl counted a copy"
        return False


def test_numpy_1e6_zero_copy(add):
    rng = np.random.default_rng(1)
    a, b = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    c = np.empty(N, np.float32)
    for arr in (a, b, c):
        _check_zero_copy(arr, arr.ctypes.data)
    with _NoCopies():
        add.launch(24, a, b, c, N)
        sync()
    np.testing.assert_array_equal(c, a + b)   # exactly: the same float32 additions


def test_torch_1e6_zero_copy(add):
    torch = pytest.importorskip("torch")
    a, b = torch.rand(N), torch.rand(N)
    c = torch.empty(N)
    for t in (a, b, c):
        _check_zero_copy(t, t.data_ptr())
    with _NoCopies():
        add.launch(24, a, b, c, N)
        sync()
    assert torch.equal(c, a + b)
    # the kernel reads the tensors' own memory: a change on the torch side is seen by the next launch
    a[0] = 100.0
    add.launch(24, a, b, c, N)
    sync()
    assert c[0].item() == np.float32(100.0) + np.float32(b[0].item())


def test_tensorflow_1e6_zero_copy(add_const):
    add = add_const
    tf = pytest.importorskip("tensorflow")
    a = tf.random.uniform([N], seed=1)
    b = tf.random.uniform([N], seed=2)
    # TF tensors are immutable: the output is a NumPy array; inputs (const parameters) are read in
    # place through DLPack
    c = np.empty(N, np.float32)
    pa, pb = gm_pointer(a).ptr, gm_pointer(b).ptr
    # the kernel gets TF's own buffer: the address any DLPack consumer sees (NumPy's zero-copy view)
    assert pa == np.from_dlpack(a).ctypes.data and pb == np.from_dlpack(b).ctypes.data
    with _NoCopies():
        add.launch(24, a, b, c, N)
        sync()
    np.testing.assert_array_equal(c, (a + b).numpy())
    # a DLPack capsule made by TF is accepted too, and points at the same memory
    cap = tf.experimental.dlpack.to_dlpack(a)
    assert gm_pointer(cap).ptr == pa
    add.launch(24, cap, b, c, N)
    sync()
    np.testing.assert_array_equal(c, (a + b).numpy())


def test_jax_inputs(add_const):
    add = add_const
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    a = jnp.arange(1000, dtype=jnp.float32)
    c = np.empty(1000, np.float32)
    add.launch(4, a, a, c, 1000)
    sync()
    np.testing.assert_array_equal(c, np.asarray(a + a))


def test_device_buffers(add):
    n = 4096
    x = np.arange(n, dtype=np.float32)
    bx, bz = acl_rt.alloc(x.nbytes), acl_rt.alloc(x.nbytes)
    bx.copy_from(x)
    add.launch(8, bx, bx, bz, n)
    out = np.empty(n, np.float32)
    bz.copy_to(out)   # waits for the stream
    np.testing.assert_array_equal(out, 2 * x)
    bx.close()
    bz.close()


def test_streams_and_threads(add):
    dev = acl_rt.Device(0)
    errors = []

    def work(seed):
        try:
            s = dev.create_stream()
            rng = np.random.default_rng(seed)
            for _ in range(20):
                n = int(rng.integers(1, 5000))
                x = rng.random(n, dtype=np.float32)
                z = np.empty(n, np.float32)
                add.launch(int(rng.integers(1, 40)), x, x, z, n, stream=s)
                s.synchronize()
                np.testing.assert_array_equal(z, x + x)
            s.close()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ------------------------------------------------------------------------------------- scalars

def test_scalar_types_round_trip(lib):
    echo = lib.get_function("echo")
    out = np.zeros(1, SCALARS_DTYPE)
    vals = (-128, 255, -32768, 65535, -2**31, 2**32 - 1, -2**63, 2**64 - 1, 1.5, -2.25, True)
    echo.launch(1, *vals, out)
    sync()
    assert out[0].tolist() == vals
    # NumPy scalars, one-element arrays and 0-d tensors are scalars too
    vals2 = (np.int8(5), np.array([6], np.uint8), np.int16(-7), 8, np.int32(9), np.array(10), np.int64(11),
             np.uint64(12), np.float32(0.25), np.float64(3.0), np.bool_(False))
    echo.launch(1, *vals2, out)
    sync()
    assert out[0].tolist() == (5, 6, -7, 8, 9, 10, 11, 12, 0.25, 3.0, False)


@pytest.mark.parametrize("pos,value", [(0, 128), (0, -129), (1, -1), (1, 256), (2, 2**15), (3, -1), (4, 2**31),
                                       (5, 2**32), (6, 2**63), (7, -1), (7, 2**64), (8, 1e39)])
def test_scalar_out_of_range_is_overflow_error(lib, add, pos, value):
    echo = lib.get_function("echo")
    args = [0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, False, np.zeros(1, SCALARS_DTYPE)]
    args[pos] = value
    name = echo.params[pos].name
    with pytest.raises(OverflowError, match=f"parameter {pos} '{name}'"):
        echo.launch(1, *args)
    assert_valid_launch(add)


@pytest.mark.parametrize("value,match", [
    (1.5, "expected an integer, got a float"),
    (np.float32(2.0), "expected an integer"),
    ("3", "expected a number, got str"),
    ([1], "expected a number, got list"),
    (None, "expected a number, got NoneType"),
    (np.arange(3, dtype=np.uint32), "with 3 elements"),
    (1 + 2j, "expected a number"),
])
def test_unconvertible_scalar_is_type_error_naming_the_parameter(add, value, match):
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=f"parameter 3 'n' \\(uint32_t\\).*{match}"):
        add.launch(1, x, x, x, value)
    assert_valid_launch(add)


def test_multi_element_torch_tensor_for_a_scalar(add):
    torch = pytest.importorskip("torch")
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="parameter 3 'n'.*2 elements"):
        add.launch(1, x, x, x, torch.tensor([1, 2]))
    add.launch(1, x, x, x, torch.tensor(4))   # a one-element tensor is fine
    sync()
    assert_valid_launch(add)


def test_bool_parameter(lib):
    echo = lib.get_function("echo")
    out = np.zeros(1, SCALARS_DTYPE)
    base = [0] * 8 + [0.0, 0.0]
    echo.launch(1, *base, 1, out)
    sync()
    assert out[0]["k"]
    with pytest.raises(TypeError, match="parameter 10 'k' \\(bool\\).*expected a bool"):
        echo.launch(1, *base, 2, out)
    with pytest.raises(TypeError, match="parameter 10 'k'"):
        echo.launch(1, *base, 0.5, out)


# ---------------------------------------------------------------------------------- bad input

def test_wrong_argument_count(add):
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"takes 4 arguments, got 3"):
        add.launch(1, x, x, x)
    with pytest.raises(TypeError, match=r"takes 4 arguments, got 5"):
        add.launch(1, x, x, x, 4, 5)
    assert_valid_launch(add)


@pytest.mark.parametrize("value,exc,match", [
    (5, TypeError, "GM pointer: got int 5"),
    (2.5, TypeError, "GM pointer: got float"),
    ([1.0, 2.0], TypeError, "got list"),
    ({"a": 1}, TypeError, "got dict"),
    ("x", TypeError, "got str"),
    (np.float32(1), TypeError, "GM pointer: got float32"),
    (np.zeros((4, 4), np.float32)[:, 1], ValueError, "not C-contiguous"),
])
def test_bad_pointer_argument_names_the_parameter(add, value, exc, match):
    x = np.zeros(4, np.float32)
    with pytest.raises(exc, match=f"parameter 2 'z' \\(GM_ADDR\\).*{match}"):
        add.launch(1, x, x, value, 4)
    assert_valid_launch(add)


def test_typed_pointer_dtype_and_read_only_checks(lib, add, add_const):
    axpy = lib.get_function("axpy")
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"parameter 1 'x' \(const float \*\): expected an array of float32, got "
                                        r"float64"):
        axpy.launch(1, 1.0, np.ones(8), x, x, 8)
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    axpy.launch(1, 2.0, ro, ro, x, 8)   # const parameters accept read-only arrays
    sync()
    assert (x == 3).all()
    with pytest.raises(ValueError, match=r"parameter 3 'z' \(float \*\): the ndarray is read-only"):
        axpy.launch(1, 2.0, x, x, ro, 8)
    # an untyped GM_ADDR may be written too: read-only arrays only for `const GM_ADDR` (issue 12)
    out = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"parameter 0 'x' \(GM_ADDR\): the ndarray is read-only"):
        add.launch(1, ro, ro, out, 8)
    add_const.launch(1, ro, ro, out, 8)
    sync()
    assert (out == 2).all()
    assert_valid_launch(add)


@pytest.mark.parametrize("blocks,exc", [(0, ValueError), (-1, ValueError), (kernels.MAX_BLOCKS + 1, ValueError),
                                        (10**12, ValueError), (2.0, TypeError), ("4", TypeError), (True, TypeError)])
def test_bad_block_counts(add, blocks, exc):
    x = np.zeros(4, np.float32)
    with pytest.raises(exc, match="num_blocks"):
        add.launch(blocks, x, x, x, 4)
    assert_valid_launch(add)


def test_block_count_checked_by_the_runtime_too(add):
    from acl_rt._lib import backend, ffi
    f = add._func(0)
    lib = backend().lib
    for n in (0, 65536):
        rc = lib.aclrtLaunchKernelWithHostArgs(f, n, ffi.NULL, ffi.NULL, ffi.new("char[32]"), 32, ffi.NULL, 0)
        assert rc == 100000
        assert "numBlocks must be in 1..65535" in ffi.string(lib.aclGetRecentErrMsg()).decode()
    assert_valid_launch(add)


def test_freed_buffer_argument(add):
    buf = acl_rt.DeviceMemoryResource(acl_rt.Device(0)).allocate(64)   # raw: close() really frees
    ptr = buf.ptr
    buf.close()
    x = np.zeros(16, np.float32)
    with pytest.raises(acl_rt.InvalidHandleError, match="parameter 2 'z'.*freed"):
        add.launch(1, x, x, buf, 16)
    # a raw address into the freed allocation is caught by the runtime, naming the parameter
    with pytest.raises(acl_rt.InvalidArgumentError,
                       match=r"kernel 'add_custom' parameter 1 \('y'\): pointer 0x[0-9a-f]+ lies in freed memory"):
        add.launch(1, x, ctypes.c_void_p(ptr), x, 16)
    assert_valid_launch(add)


def test_source_that_does_not_compile(add):
    bad = '#include "canna_kernel.h"\nCANNA_KERNEL void broken(GM_ADDR x) {\n  undeclared_thing = 1;\n}\n'
    k = kernels.RawKernel(bad, "broken")   # parsing succeeds: compiling is lazy
    with pytest.raises(kernels.CompileError) as ei:
        k.launch(1, None)
    msg = str(ei.value)
    assert "kernel.c:3" in msg and "undeclared_thing" in msg and "did not compile" in msg
    assert "undeclared_thing" in ei.value.log and ei.value.command
    with pytest.raises(kernels.CompileError):   # not cached: a second attempt fails the same way
        k.compile()
    assert_valid_launch(add)


def test_kernel_name_not_in_source(add):
    with pytest.raises(kernels.KernelNotFoundError, match=r"no kernel named 'add' .*kernels there: add_custom"):
        kernels.RawKernel(ADD, "add")
    with pytest.raises(LookupError):
        kernels.RawModule(LIB).get_function("nope")
    assert_valid_launch(add)


def test_kernel_name_not_in_binary(add):
    data = open(add.module.binary_path, "rb").read()
    mod = kernels.RawModule(data)
    with pytest.raises(kernels.KernelNotFoundError, match="no kernel named 'mul'"):
        mod.get_function("mul")
    k = mod.get_function("add_custom")   # the binary describes its own signature
    assert str(k.signature) == str(add.signature)
    assert_valid_launch(k)


@pytest.mark.parametrize("src,match", [
    ("CANNA_KERNEL int f(GM_ADDR x) { return 0; }", "must return void"),
    ("struct S { int *p; };\nCANNA_KERNEL void f(struct S s) {}", "by-value struct"),
    ("CANNA_KERNEL void f(my_t x) {}", "unsupported type 'my_t'"),
    ("CANNA_KERNEL void f(GM_ADDR x, ...) {}", "variadic"),
    ("CANNA_KERNEL void f(GM_ADDR x);", "declared .* but not defined"),
    ("CANNA_KERNEL void f(GM_ADDR x) {}\nCANNA_KERNEL void f(GM_ADDR y) {}", "defined twice"),
])
def test_unusable_kernel_declarations(src, match):
    with pytest.raises(kernels.KernelSourceError, match=match):
        kernels.RawModule(src)


def test_bad_constructor_arguments():
    with pytest.raises(TypeError):
        kernels.RawModule()
    with pytest.raises(TypeError):
        kernels.RawModule(ADD, path="x.c")
    with pytest.raises(TypeError, match="options"):
        kernels.RawModule(ADD, options=[1])
    with pytest.raises(ValueError, match="backend"):
        kernels.RawModule(ADD, backend="nvcc")
    with pytest.raises(FileNotFoundError):
        kernels.RawKernel("/no/such/kernel.c", "k")
    with pytest.raises(TypeError):
        kernels.RawModule(12)


def test_bisheng_backend_without_the_ascend_toolchain(add, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    k = kernels.RawKernel(ADD, "add_custom", backend="bisheng", options=("-DX=1",))
    with pytest.raises(kernels.CompileError, match="bisheng"):
        k.compile()
    monkeypatch.undo()
    assert_valid_launch(add)


# ------------------------------------------------------------------------------ introspection

def test_signature_introspection(add, lib):
    assert add.name == "add_custom" and add.num_params == 4 and add.args_size == 32
    assert str(add.signature) == "void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n)"
    assert [(p.name, p.ctype, p.kind, p.offset, p.size) for p in add.params] == [
        ("x", "GM_ADDR", "pointer", 0, 8), ("y", "GM_ADDR", "pointer", 8, 8), ("z", "GM_ADDR", "pointer", 16, 8),
        ("n", "uint32_t", "scalar", 24, 4)]
    axpy = lib.get_function("axpy")
    assert [(p.name, p.kind, p.scalar, p.element, p.is_const, p.offset) for p in axpy.params] == [
        ("alpha", "scalar", "float32", None, False, 0), ("x", "pointer", None, "float32", True, 8),
        ("y", "pointer", None, "float32", True, 16), ("z", "pointer", None, "float32", False, 24),
        ("n", "scalar", "uint64", None, False, 32)]
    assert axpy.args_size == 40
    assert set(lib.kernel_names) >= {"axpy", "block_ids", "echo", "spin_us", "empty"}
    assert lib.get_function("empty").args_size == 0
    assert "add_custom" in repr(add) and "RawModule" in repr(lib)


def test_runtime_agrees_on_the_argument_block(lib):
    from acl_rt._lib import backend, ffi
    blib = backend().lib
    echo = lib.get_function("echo")
    f = echo._func(0)
    count, off, size = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *")
    assert blib.aclrtFunctionGetParamCount(f, count) == 0 and count[0] == echo.num_params
    for p in echo.params:
        assert blib.aclrtFunctionGetParamInfo(f, p.index, off, size) == 0
        assert (off[0], size[0]) == (p.offset, p.size)


def test_ascend_style_source_compiles_as_cxx(add):
    src = r'''
#include "canna_kernel.h"
namespace detail { template <typename T> CANNA_DEVICE T twice(T v) { return v + v; } }
extern "C" __global__ __aicore__ void dbl(__gm__ float *x, uint32_t n) {
    int64_t i = AscendC::GetBlockIdx();
    if (i < n) x[i] = detail::twice(x[i]);
}
'''
    k = kernels.RawKernel(src, "dbl")
    x = np.arange(5, dtype=np.float32)
    k.launch(5, x, 5)
    sync()
    assert x.tolist() == [0, 2, 4, 6, 8]
    assert_valid_launch(add)


def test_cxx_exception_is_a_kernel_trap(add):
    src = r'''
#include "canna_kernel.h"
#include <stdexcept>
extern "C" __global__ __aicore__ void thrower(GM_ADDR x) { if (GetBlockIdx() == 2) throw std::runtime_error("boom"); }
'''
    k = kernels.RawKernel(src, "thrower")
    k.launch(4, None)
    with pytest.raises(acl_rt.KernelError, match=r"kernel 'thrower' block 2 of 4: uncaught C\+\+ exception: boom") as ei:
        sync()
    assert ei.value.code == 507016
    assert_valid_launch(add)


def test_source_file_with_relative_include(tmp_path, add):
    (tmp_path / "helpers.h").write_text("static inline float twice(float v) { return 2 * v; }\n")
    (tmp_path / "k.c").write_text('#include "canna_kernel.h"\n#include "helpers.h"\n'
                                  "CANNA_KERNEL void tw(float *x) { x[GetBlockIdx()] = twice(x[GetBlockIdx()]); }\n")
    k = kernels.RawKernel(tmp_path / "k.c", "tw")
    x = np.ones(3, np.float32)
    k.launch(3, x)
    sync()
    assert x.tolist() == [2, 2, 2]
    # a compile error names the file
    (tmp_path / "bad.c").write_text('#include "canna_kernel.h"\nCANNA_KERNEL void b(float *x) { x = ; }\n')
    with pytest.raises(kernels.CompileError, match="bad.c:2"):
        kernels.RawKernel(str(tmp_path / "bad.c"), "b").compile()


# ------------------------------------------------------------------------------------- caches

def _fresh_source(tag: str) -> str:
    return ADD.replace("add_custom", f"add_{tag}")


def test_cache_hits_in_process(add):
    src = _fresh_source(f"inproc_{os.getpid()}")
    k1 = kernels.RawKernel(src, f"add_inproc_{os.getpid()}").compile()
    assert k1.module.cache == "compiled"
    before = kernels.kernel_cache_info()
    k2 = kernels.RawKernel(src, f"add_inproc_{os.getpid()}").compile()
    assert k2.module.cache == "memory"
    assert kernels.kernel_cache_info()["memory_hits"] == before["memory_hits"] + 1
    assert k2.module.binary_path == k1.module.binary_path
    # a changed source or changed options compile again
    k3 = kernels.RawKernel(src + "\n/* changed */\n", f"add_inproc_{os.getpid()}").compile()
    assert k3.module.cache == "compiled" and k3.module.binary_path != k1.module.binary_path
    k4 = kernels.RawKernel(src, f"add_inproc_{os.getpid()}", options=("-O1",)).compile()
    assert k4.module.cache == "compiled" and k4.module.binary_path not in (k1.module.binary_path,
                                                                         k3.module.binary_path)
    x = np.arange(10, dtype=np.float32)
    z = np.empty(10, np.float32)
    k4.launch(2, x, x, z, 10)
    sync()
    assert (z == 2 * x).all()


_CACHE_CHILD = r'''
import json, sys, numpy as np, acl_rt, kernels
src, name = sys.argv[1], sys.argv[2]
k = kernels.RawKernel(src, name)
x = np.arange(1000, dtype=np.float32); z = np.empty_like(x)
k.launch(7, x, x, z, 1000); acl_rt.current_stream().synchronize()
assert (z == 2 * x).all()
print(json.dumps({"cache": k.module.cache, "path": k.module.binary_path, "info": kernels.kernel_cache_info()}))
'''


def _child(src, name, env=None):
    e = dict(os.environ, CANNA_BACKEND="sim")
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-c", _CACHE_CHILD, src, name], env=e, cwd=os.path.dirname(__file__),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p):
    import json
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_cache_hits_across_processes(kernel_cache):
    name = f"add_xproc_{os.getpid()}"
    src = _fresh_source(f"xproc_{os.getpid()}")
    first = _result(_child(src, name))
    second = _result(_child(src, name))
    assert first["cache"] == "compiled" and first["info"]["compiles"] == 1
    assert second["cache"] == "disk" and second["info"]["compiles"] == 0 and second["info"]["disk_hits"] == 1
    assert first["path"] == second["path"] and first["path"].startswith(str(kernel_cache))
    changed = _result(_child(src.replace("x)[i]", "x)[i] * 1.0f"), name))
    assert changed["cache"] == "compiled" and changed["path"] != first["path"]


def test_concurrent_compiles_from_several_processes(kernel_cache):
    name = f"add_conc_{os.getpid()}"
    src = _fresh_source(f"conc_{os.getpid()}")
    procs = [_child(src, name) for _ in range(4)]
    results = [_result(p) for p in procs]
    assert sorted(r["cache"] for r in results) == ["compiled", "disk", "disk", "disk"]
    assert len({r["path"] for r in results}) == 1
    leftovers = [p for p in os.listdir(kernel_cache) if p.startswith(".build-")]
    assert not leftovers


def test_binary_from_bytes_and_from_path(add):
    path = add.module.binary_path
    k = kernels.RawKernel(path, "add_custom")   # a str with a binary suffix is a path
    assert k.module.cache == "binary"
    assert_valid_launch(k)
    assert_valid_launch(kernels.RawModule(open(path, "rb").read()).get_function("add_custom"))


# ----------------------------------------------------------------------- asynchrony, lifetime

def test_arguments_are_kept_alive_until_the_kernel_ran(lib, add):
    spin = lib.get_function("spin_us")
    s = acl_rt.Device(0).create_stream()
    out = np.zeros(4, np.uint32)
    ref = weakref.ref(out)
    spin.launch(1, 1_000_000, out, stream=s)   # the first launch is never inline: queued on the worker
    assert pending_keepalives() >= 1
    del out
    gc.collect()
    assert ref() is not None, "the output array was freed while the kernel may still write it"
    s.synchronize()
    assert ref()[0] == 7
    add.launch(1, np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32), 1, stream=s)
    s.synchronize()
    assert pending_keepalives() == 0
    gc.collect()
    assert ref() is None
    s.close()


def test_empty_kernel_and_inline_launches(lib):
    empty = lib.get_function("empty")
    for _ in range(50):
        empty.launch(1)
    sync()
    from acl_rt._lib import backend, ffi
    st = ffi.new("aclsimDeviceStats *")
    assert backend().lib.aclsimGetDeviceStats(0, st) == 0
    assert st.tasksInline > 0   # short kernels run on the calling thread when the stream is idle


def test_timeout_argument_validation(add):
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="timeout"):
        add.launch(1, x, x, x, 4, timeout="1")
    with pytest.raises(ValueError, match="timeout"):
        add.launch(1, x, x, x, 4, timeout=-1)
    add.launch(1, x, x, x, 4, timeout=10.0)
    sync()
    assert_valid_launch(add)


def test_works_across_finalize(add):
    acl_rt.finalize()
    acl_rt.init()
    assert_valid_launch(add)


# ------------------------------------------------------- faults, memcheck, timeouts (subprocess)

PRELUDE = r'''
import ctypes, numpy as np, acl_rt, kernels
ADD = %r
add = kernels.RawKernel(ADD, "add_custom")
s = acl_rt.Device(0).create_stream()
def valid():
    x = np.arange(64, dtype=np.float32); z = np.empty(64, np.float32)
    add.launch(3, x, x, z, 64, stream=s); s.synchronize(); assert (z == 2 * x).all()
''' % ADD


def _run(code, env=None, timeout=120):
    return run_python(PRELUDE + textwrap.dedent(code), env=env, timeout=timeout)


def test_segfaulting_kernel_is_reported_not_fatal():
    p = _run(r'''
    import faulthandler; faulthandler.enable()
    k = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void crash(GM_ADDR p, uint32_t b) {\n'
                          '  if (GetBlockIdx() == b) *(volatile float *)p = 1.0f;\n}\n', "crash")
    k.launch(8, ctypes.c_void_p(0x10), 5, stream=s)
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("CODE", e.code); print("MSG", e)
    valid()
    # the stream and the kernel are still usable; a NULL dereference too
    k.launch(8, None, 0, stream=s)
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("NULL", e.code, "NULL pointer dereference" in str(e))
    valid()
    print("DONE")
    ''')
    out = p.stdout
    assert "CODE 507015" in out and "DONE" in out
    assert "kernel 'crash' block 5 of 8: SIGSEGV, invalid write at 0x10" in out
    assert "(pc crash+" in out
    assert "NULL 507015 True" in out
    assert "Fatal Python error" not in p.stderr


def test_other_faults_are_kernel_errors():
    p = _run(r'''
    src = r"""
    #include "canna_kernel.h"
    #include <assert.h>
    CANNA_KERNEL void divz(int32_t a, int32_t b, int32_t *o) { o[0] = a / b; }
    CANNA_KERNEL void trap(GM_ADDR x) { __builtin_trap(); }
    CANNA_KERNEL void failed_assert(uint32_t n) { assert(n == 0); }
    CANNA_KERNEL void deep(GM_ADDR x) { volatile char b[8192]; b[0] = 1; if (x) deep(x); b[1] = 2; }
    """
    m = kernels.RawModule(src)
    o = np.zeros(1, np.int32)
    for name, args in (("divz", (1, 0, o)), ("trap", (None,)), ("failed_assert", (3,)), ("deep", (o,))):
        m.get_function(name).launch(2, *args, stream=s)
        try:
            s.synchronize()
            print(name, "NO ERROR")
        except acl_rt.KernelError as e:
            print(name, e.code, str(e).split("): ", 2)[-1][:200])
        valid()
    print("DONE")
    ''')
    out = p.stdout
    assert "divz 507015" in out and "integer division by zero" in out
    assert "trap 507016" in out and "SIGILL" in out
    assert "failed_assert 507016" in out and "SIGABRT" in out
    assert "deep 507015" in out and "stack overflow" in out
    assert "DONE" in out


def test_faults_outside_kernels_still_reach_faulthandler():
    for when in ("before", "after"):
        p = run_python(PRELUDE + textwrap.dedent(f'''
        import faulthandler
        if "{when}" == "before": faulthandler.enable()
        valid()
        if "{when}" == "after": faulthandler.enable()
        valid()
        ctypes.string_at(0)   # a crash outside any kernel: the process must die as usual
        print("SURVIVED")
        '''), check=False)
        assert p.returncode == -11, (when, p.returncode, p.stderr[-2000:])
        assert "Fatal Python error: Segmentation fault" in p.stderr, when
        assert "SURVIVED" not in p.stdout


def test_never_ending_kernel():
    p = _run(r'''
    import time
    spin = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void forever(GM_ADDR x) '
                             '{ volatile int i = 0; for (;;) i++; }\n', "forever")
    # 2 spinning blocks (one on an AI-core thread, one on the stream's) and a wide margin between the
    # synchronize timeout and the kernel's: the machine may be loaded
    spin.launch(2, None, stream=s, timeout=3.0)
    t0 = time.monotonic()
    try:
        s.synchronize(timeout=0.2)
    except acl_rt.AclTimeoutError as e:
        print("SYNC TIMEOUT", e.code)
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("KERNEL", e.code, round(time.monotonic() - t0, 1), "exceeded its timeout of 3.000 s" in str(e))
    valid()
    print("DONE")
    ''')
    assert "SYNC TIMEOUT 507046" in p.stdout
    assert "KERNEL 507014" in p.stdout and "True" in p.stdout
    assert "DONE" in p.stdout


def test_default_kernel_timeout_from_the_environment():
    p = _run(r'''
    spin = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void forever(GM_ADDR x) '
                             '{ volatile int i = 0; for (;;) i++; }\n', "forever")
    spin.launch(1, None, stream=s)
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("KERNEL", e.code)
    valid()
    print("DONE")
    ''', env={"CANNA_SIM_KERNEL_TIMEOUT": "0.3"})
    assert "KERNEL 507014" in p.stdout and "DONE" in p.stdout


def test_memcheck_out_of_bounds_writes():
    p = _run(r'''
    fill = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void fill(float *x, uint32_t n) {\n'
                             '  uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;\n'
                             '  for (uint32_t i = lo; i < n && i < lo + per; ++i) x[i] = 1.0f;\n}\n', "fill")
    assert acl_rt._lib.backend().lib.aclsimGetCheckMode() == 1
    buf = acl_rt.alloc(4096, stream=s)          # ends exactly at a guard page
    fill.launch(8, buf, 1024 + 3, stream=s)     # 12 bytes too many, in the last block
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("GUARD", e.code, str(e).split("stream ")[1][20:])
    valid()
    buf2 = acl_rt.alloc(4000, stream=s)         # 32 bytes of alignment slack before the guard page
    fill.launch(2, buf2, 1001, stream=s)
    try:
        s.synchronize()
    except acl_rt.KernelError as e:
        print("SLACK", e.code, str(e).split("stream ")[1][20:])
    valid()
    fill.launch(2, buf, 1024, stream=s); s.synchronize()   # in bounds: fine
    for bad in (ctypes.c_void_p(0x10000), ctypes.c_void_p(buf.ptr + 4096 + 8)):
        try:
            fill.launch(2, bad, 4, stream=s)
        except acl_rt.InvalidArgumentError as e:
            print("ARG", e.code, str(e).split("): ", 2)[-1])
    valid()
    print("DONE")
    ''', env={"CANNA_SIM_CHECK": "1"})
    out = p.stdout
    assert "GUARD 507043" in out
    assert "kernel 'fill' block 7 of 8: SIGSEGV, invalid write at" in out
    assert "0 bytes past the end of the device allocation" in out and "(4096 bytes)" in out
    assert "SLACK 507043" in out and "parameter 0 ('x')" in out and "bytes 0..3 past the end" in out
    assert "ARG 107000" in out and "not accessible memory (a foreign pointer" in out
    assert "8 bytes past the end of the device allocation" in out
    assert "DONE" in out


def test_memcheck_use_after_free_while_queued():
    p = _run(r'''
    slow = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void slow(uint64_t us) '
                             '{ volatile uint64_t i = 0; for (uint64_t k = 0; k < us * 300; k++) i++; }\n'
                             'CANNA_KERNEL void touch(float *x) { x[0] = 1.0f; }\n', "slow")
    touch = slow.module.get_function("touch")
    buf = acl_rt.alloc(256, stream=s)
    other = acl_rt.Device(0).create_stream()
    slow.launch(1, 3000000, stream=s)
    touch.launch(1, buf, stream=s)               # queued behind the slow kernel
    acl_rt._lib.backend().lib.aclrtFree(acl_rt._lib.ffi.cast("void *", buf.ptr))   # freed behind its back
    buf._ptr = None
    try:
        s.synchronize()
    except acl_rt.InvalidArgumentError as e:
        print("UAF", e.code, "freed" in str(e))
    valid()
    print("DONE")
    ''', env={"CANNA_SIM_CHECK": "1"})
    assert "UAF 107000 True" in p.stdout and "DONE" in p.stdout


def test_discrete_model_rejects_host_memory():
    p = _run(r'''
    x = np.ones(16, np.float32)
    try:
        add.launch(1, x, x, x, 16, stream=s)
    except acl_rt.InvalidArgumentError as e:
        print("HOST", e.code, "not device memory" in str(e))
    b = acl_rt.alloc(64, stream=s); b.copy_from(x, stream=s)
    add.launch(2, b, b, b, 16, stream=s)
    out = np.empty(16, np.float32); b.copy_to(out, stream=s)
    print("DEV", out.tolist() == [2.0] * 16)
    print("DONE")
    ''', env={"CANNA_SIM_MEMORY": "discrete"})
    assert "HOST 107000 True" in p.stdout and "DEV True" in p.stdout and "DONE" in p.stdout


def test_ascend_toolchain_path_with_a_fake_bisheng(tmp_path, monkeypatch, add):
    """The Ascend path is untested against a real toolchain; this checks detection, the command
    line and the cache with a stand-in `bisheng` that records its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv.txt"
    fake = bindir / "bisheng"
    fake.write_text("#!/bin/sh\n"
                    'if [ "$1" = "--version" ]; then echo "fake bisheng 1.0"; exit 0; fi\n'
                    f'printf "%s\\n" "$@" > {log}\n'
                    'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then printf "\\177ELF device" > "$2"; fi; shift; done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    mod = kernels.RawModule(ADD, backend="bisheng", options=("-DTILE=8",))
    path = mod.binary_path
    assert path.endswith(".o") and mod.cache == "compiled"
    argv = log.read_text().split("\n")
    assert "-xcce" in argv and "--cce-aicore-only" in argv and "-c" in argv and "-DTILE=8" in argv
    assert "--cce-aicore-arch=dav-c220-vec" in argv   # the simulated SoC is an Ascend910B1
    assert any(a.endswith("kernels/include") for a in argv if a.startswith("-I"))
    assert kernels.RawModule(ADD, backend="bisheng", options=("-DTILE=8",)).binary_path == path   # cached
    # the simulator cannot run a device binary: a clear error, and the state stays usable
    with pytest.raises(acl_rt.AclError, match="not a canna simulator kernel binary|not an ELF shared object"):
        mod.get_function("add_custom").launch(1, None, None, None, 0)
    assert_valid_launch(add)
