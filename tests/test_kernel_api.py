"""The simulator's AscendCL kernel API at the C level (acl_rt/_sim/sim_kernel.c, README "Custom
kernels"): loading, function lookup, the argument block of each launch call, the aclrtKernelArgs*
builder with placeholders, unloading, options and launch attributes."""
from __future__ import annotations

import os
import struct
import subprocess

import numpy as np
import pytest

import acl_rt
import kernels
from acl_rt._lib import backend, ffi

from conftest import run_python

SRC = r'''
#include "canna_kernel.h"
CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
    uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
    for (uint32_t i = lo; i < n && i < lo + per; ++i) ((float*)z)[i] = ((float*)x)[i] + ((float*)y)[i];
}
/* the tiling arguments arrive through a pointer: the placeholder pattern of AscendCL's samples */
struct tiling { uint32_t n; float scale; };
CANNA_KERNEL void scale(const float *x, float *z, const struct tiling *t) {
    for (uint32_t i = GetBlockIdx(); i < t->n; i += GetBlockNum()) z[i] = x[i] * t->scale;
}
CANNA_KERNEL void crash(GM_ADDR x) { *(volatile int *)x = 1; }
CANNA_KERNEL void slow(uint64_t n, uint32_t *out) { volatile uint64_t i = 0; while (i < n) i++; out[0] = 42; }
'''

OK, INVALID_PARAM, INVALID_FILE, PARSE_FILE = 0, 100000, 100003, 100006


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    old = os.environ.get("CANNA_KERNEL_CACHE")
    os.environ["CANNA_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kcache_api"))
    acl_rt.init()
    acl_rt.Device(0).set_current()
    yield kernels.RawModule(SRC).binary_path
    if old is None:
        os.environ.pop("CANNA_KERNEL_CACHE", None)
    else:
        os.environ["CANNA_KERNEL_CACHE"] = old


@pytest.fixture
def L(binary):
    acl_rt.Device(0).set_current()
    from acl_rt import _runtime as rt
    rt.activate(0)
    return backend().lib


def msg(lib) -> str:
    p = lib.aclGetRecentErrMsg()
    return ffi.string(p).decode() if p != ffi.NULL else ""


def load(lib, path):
    h = ffi.new("aclrtBinHandle *")
    assert lib.aclrtBinaryLoadFromFile(path.encode(), ffi.NULL, h) == OK, msg(lib)
    return h[0]


def func(lib, b, name):
    f = ffi.new("aclrtFuncHandle *")
    assert lib.aclrtBinaryGetFunction(b, name.encode(), f) == OK, msg(lib)
    return f[0]


def arrays(n=100):
    x = np.arange(n, dtype=np.float32)
    return x, x * 2, np.full(n, np.nan, np.float32)


def ptr(a) -> int:
    return a.ctypes.data


def sync(lib):
    assert lib.aclrtSynchronizeStream(ffi.NULL) == OK, msg(lib)


def test_load_errors(L, binary, tmp_path):
    h = ffi.new("aclrtBinHandle *")
    assert L.aclrtBinaryLoadFromFile(b"relative/k.so", ffi.NULL, h) == INVALID_PARAM
    assert "absolute path" in msg(L)
    assert L.aclrtBinaryLoadFromFile(str(tmp_path / "missing.so").encode(), ffi.NULL, h) == INVALID_FILE
    assert "missing.so" in msg(L)
    assert L.aclrtBinaryLoadFromFile(str(tmp_path).encode(), ffi.NULL, h) == INVALID_FILE
    junk = tmp_path / "junk.o"
    junk.write_bytes(b"not an elf file at all" * 10)
    assert L.aclrtBinaryLoadFromFile(str(junk).encode(), ffi.NULL, h) == PARSE_FILE
    assert "not an ELF shared object" in msg(L)
    # an ELF for another machine: what the Ascend toolchain produces for the device
    elf = bytearray(open(binary, "rb").read(64))
    struct.pack_into("<H", elf, 18, 0x1234)   # e_machine
    assert L.aclrtBinaryLoadFromData(bytes(elf), len(elf), ffi.NULL, h) == PARSE_FILE
    assert "cannot run on the simulator" in msg(L)
    # a relocatable object (not shared) and a shared object without a kernel table
    c = tmp_path / "plain.c"
    c.write_text("int canna_plain(void) { return 1; }\n")
    subprocess.run(["cc", "-c", "-fPIC", str(c), "-o", str(tmp_path / "plain.o")], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", str(c), "-o", str(tmp_path / "plain.so")], check=True)
    assert L.aclrtBinaryLoadFromFile(str(tmp_path / "plain.o").encode(), ffi.NULL, h) == PARSE_FILE
    assert "not a shared object" in msg(L)
    assert L.aclrtBinaryLoadFromFile(str(tmp_path / "plain.so").encode(), ffi.NULL, h) == PARSE_FILE
    assert "without a 'canna_sim_module' kernel table" in msg(L)
    assert L.aclrtBinaryLoadFromData(ffi.NULL, 10, ffi.NULL, h) == INVALID_PARAM
    data = open(binary, "rb").read()
    assert L.aclrtBinaryLoadFromData(data, 0, ffi.NULL, h) == INVALID_PARAM
    # a valid load still works afterwards
    assert L.aclrtBinaryLoadFromData(data, len(data), ffi.NULL, h) == OK
    assert L.aclrtBinaryUnLoad(h[0]) == OK


def test_load_options(L, binary):
    h = ffi.new("aclrtBinHandle *")
    opts = ffi.new("aclrtBinaryLoadOptions *")
    opt = ffi.new("aclrtBinaryLoadOption[2]")
    opts.options, opts.numOpt = opt, 2
    opt[0].type, opt[0].value.isLazyLoad = 1, 1
    opt[1].type, opt[1].value.magic = 2, 0x41415246   # vector-core magic
    assert L.aclrtBinaryLoadFromFile(binary.encode(), opts, h) == OK, msg(L)
    b = h[0]
    opt[1].value.magic = 0x1234
    assert L.aclrtBinaryLoadFromFile(binary.encode(), opts, h) == INVALID_PARAM and "magic" in msg(L)
    opts.numOpt = 1
    opt[0].type, opt[0].value.cpuKernelMode = 3, 1
    assert L.aclrtBinaryLoadFromFile(binary.encode(), opts, h) == 207000 and "AI CPU" in msg(L)
    opt[0].type = 99
    assert L.aclrtBinaryLoadFromFile(binary.encode(), opts, h) == INVALID_PARAM
    # a binary loaded with the vector-core magic reports vector-core faults
    f = func(L, b, "crash")
    args = struct.pack("<Q", 16)
    assert L.aclrtLaunchKernelWithHostArgs(f, 1, ffi.NULL, ffi.NULL, args, 8, ffi.NULL, 0) == OK
    assert L.aclrtSynchronizeStream(ffi.NULL) == 507035
    assert "kernel 'crash' block 0 of 1: SIGSEGV" in msg(L)
    assert L.aclrtBinaryUnLoad(b) == OK


def test_function_lookup_and_introspection(L, binary):
    b = load(L, binary)
    fh = ffi.new("aclrtFuncHandle *")
    assert L.aclrtBinaryGetFunction(b, b"nope", fh) == 107042
    m = msg(L)
    assert "no kernel named 'nope'" in m and "add_custom, scale, crash, slow" in m
    f = func(L, b, "add_custom")
    assert func(L, b, "add_custom") == f   # the same handle for the same name
    name = ffi.new("char[32]")
    assert L.aclrtGetFunctionName(f, 32, name) == OK and ffi.string(name) == b"add_custom"
    assert L.aclrtGetFunctionName(f, 5, name) == INVALID_PARAM
    n, off, size = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *")
    assert L.aclrtFunctionGetParamCount(f, n) == OK and n[0] == 4
    got = []
    for i in range(4):
        assert L.aclrtFunctionGetParamInfo(f, i, off, size) == OK
        got.append((off[0], size[0]))
    assert got == [(0, 8), (8, 8), (16, 8), (24, 4)]
    assert L.aclrtFunctionGetParamInfo(f, 4, off, size) == INVALID_PARAM and "out of range" in msg(L)
    d = ffi.new("aclsimKernelParamDesc *")
    assert L.aclsimFunctionGetParamDesc(f, 3, d) == OK
    assert (ffi.string(d.name), ffi.string(d.type), d.isPointer, d.offset, d.size) == (b"n", b"uint32_t", 0, 24, 4)
    s = func(L, b, "scale")
    assert L.aclsimFunctionGetParamDesc(s, 0, d) == OK and d.isPointer == 1 and d.isConst == 1
    # handles of another kind are rejected
    assert L.aclrtFunctionGetParamCount(b, n) == 107017
    assert L.aclrtBinaryUnLoad(b) == OK
    assert L.aclrtFunctionGetParamCount(f, n) == 107017   # unloading invalidates its functions
    assert L.aclrtBinaryUnLoad(b) == 107017


def test_launch_with_host_args(L, binary):
    b = load(L, binary)
    f = func(L, b, "add_custom")
    x, y, z = arrays()
    args = struct.pack("<QQQI4x", ptr(x), ptr(y), ptr(z), 100)
    assert L.aclrtLaunchKernelWithHostArgs(f, 7, ffi.NULL, ffi.NULL, args, len(args), ffi.NULL, 0) == OK, msg(L)
    sync(L)
    np.testing.assert_array_equal(z, x + y)
    # too short an argument block
    assert L.aclrtLaunchKernelWithHostArgs(f, 7, ffi.NULL, ffi.NULL, args, 27, ffi.NULL, 0) == INVALID_PARAM
    assert "needs 28" in msg(L)
    assert L.aclrtLaunchKernelWithHostArgs(f, 7, ffi.NULL, ffi.NULL, ffi.NULL, 32, ffi.NULL, 0) == INVALID_PARAM
    # placeholders: the tiling struct is appended to the block; the runtime points the pointer at its copy
    sf = func(L, b, "scale")
    z[:] = np.nan
    block = bytearray(struct.pack("<QQQ", ptr(x), ptr(z), 0) + struct.pack("<If", 100, 0.5))
    ph = ffi.new("aclrtPlaceHolderInfo[1]")
    ph[0].addrOffset, ph[0].dataOffset = 16, 24
    assert L.aclrtLaunchKernelWithHostArgs(sf, 3, ffi.NULL, ffi.NULL, ffi.from_buffer(block), len(block), ph, 1) == OK
    block[24:32] = b"\0" * 8   # the host block may be reused at once
    sync(L)
    np.testing.assert_array_equal(z, x * 0.5)
    ph[0].dataOffset = 64
    assert L.aclrtLaunchKernelWithHostArgs(sf, 3, ffi.NULL, ffi.NULL, ffi.from_buffer(block), len(block), ph,
                                           1) == INVALID_PARAM
    assert "outside" in msg(L)
    assert L.aclrtBinaryUnLoad(b) == OK


def test_launch_with_device_args(L, binary):
    b = load(L, binary)
    f = func(L, b, "add_custom")
    x, y, z = arrays(64)
    block = struct.pack("<QQQI4x", ptr(x), ptr(y), ptr(z), 64)
    dev = acl_rt.alloc(len(block))
    dev.copy_from(block)
    assert L.aclrtLaunchKernel(f, 4, ffi.cast("void *", dev.ptr), len(block), ffi.NULL) == OK, msg(L)
    sync(L)
    np.testing.assert_array_equal(z, x + y)
    z[:] = 0
    assert L.aclrtLaunchKernelV2(f, 4, ffi.cast("void *", dev.ptr), len(block), ffi.NULL, ffi.NULL) == OK
    sync(L)
    np.testing.assert_array_equal(z, x + y)
    # host memory is not a device argument block
    assert L.aclrtLaunchKernel(f, 4, block, len(block), ffi.NULL) == 107000 and "not device memory" in msg(L)
    assert L.aclrtLaunchKernel(f, 4, ffi.cast("void *", dev.ptr), 16, ffi.NULL) == INVALID_PARAM
    dev.close()
    assert L.aclrtBinaryUnLoad(b) == OK


def test_args_builder(L, binary):
    b = load(L, binary)
    f = func(L, b, "add_custom")
    x, y, z = arrays(50)
    a = ffi.new("aclrtArgsHandle *")
    assert L.aclrtKernelArgsInit(f, a) == OK
    args = a[0]
    ph = [ffi.new("aclrtParamHandle *") for _ in range(5)]
    cells = [ffi.new("uint64_t *", ptr(v)) for v in (x, y, z)]
    for i in range(3):
        assert L.aclrtKernelArgsAppend(args, cells[i], 8, ph[i]) == OK, msg(L)
    # not finalized: no launch
    assert L.aclrtLaunchKernelWithConfig(f, 2, ffi.NULL, ffi.NULL, args, ffi.NULL) == INVALID_PARAM
    assert L.aclrtKernelArgsFinalize(args) == INVALID_PARAM and "but 3 were appended" in msg(L)
    n = ffi.new("uint32_t *", 50)
    assert L.aclrtKernelArgsAppend(args, n, 8, ph[3]) == INVALID_PARAM and "is 4 bytes" in msg(L)
    assert L.aclrtKernelArgsAppend(args, n, 4, ph[3]) == OK
    assert L.aclrtKernelArgsAppend(args, n, 4, ph[4]) == INVALID_PARAM and "all appended" in msg(L)
    assert L.aclrtKernelArgsFinalize(args) == OK
    assert L.aclrtLaunchKernelWithConfig(f, 2, ffi.NULL, ffi.NULL, args, ffi.new("int *")) == INVALID_PARAM
    assert L.aclrtLaunchKernelWithConfig(f, 2, ffi.NULL, ffi.NULL, args, ffi.NULL) == OK, msg(L)
    sync(L)
    np.testing.assert_array_equal(z, x + y)
    # update n, finalize again, launch again: the same handle serves several launches
    z[:] = -1
    n[0] = 10
    assert L.aclrtKernelArgsParaUpdate(args, ph[3][0], n, 4) == OK
    assert L.aclrtLaunchKernelWithConfig(f, 2, ffi.NULL, ffi.NULL, args, ffi.NULL) == INVALID_PARAM
    assert L.aclrtKernelArgsFinalize(args) == OK
    assert L.aclrtLaunchKernelWithConfig(f, 2, ffi.NULL, ffi.NULL, args, ffi.NULL) == OK
    sync(L)
    np.testing.assert_array_equal(z[:10], (x + y)[:10])
    assert (z[10:] == -1).all()
    assert L.aclrtKernelArgsParaUpdate(args, ffi.cast("void *", 12345), n, 4) == INVALID_PARAM
    # args of one function cannot launch another
    other = func(L, b, "crash")
    assert L.aclrtLaunchKernelWithConfig(other, 2, ffi.NULL, ffi.NULL, args, ffi.NULL) == INVALID_PARAM
    assert L.aclrtBinaryUnLoad(b) == OK
    assert L.aclrtKernelArgsFinalize(args) == 107017   # freed with the binary


def test_args_builder_placeholder(L, binary):
    b = load(L, binary)
    f = func(L, b, "scale")
    x, _, z = arrays(40)
    a = ffi.new("aclrtArgsHandle *")
    assert L.aclrtKernelArgsInit(f, a) == OK
    ph = ffi.new("aclrtParamHandle *")
    for v in (x, z):
        assert L.aclrtKernelArgsAppend(a[0], ffi.new("uint64_t *", ptr(v)), 8, ph) == OK
    assert L.aclrtKernelArgsAppendPlaceHolder(a[0], ph) == OK
    assert L.aclrtKernelArgsFinalize(a[0]) == INVALID_PARAM and "has no buffer" in msg(L)
    buf = ffi.new("void **")
    assert L.aclrtKernelArgsGetPlaceHolderBuffer(a[0], ph[0], 8, buf) == OK
    t = ffi.cast("uint32_t *", buf[0])
    t[0] = 40
    ffi.cast("float *", buf[0])[1] = 3.0
    assert L.aclrtKernelArgsFinalize(a[0]) == OK
    assert L.aclrtLaunchKernelWithConfig(f, 3, ffi.NULL, ffi.NULL, a[0], ffi.NULL) == OK
    t[0] = 0   # the placeholder data was copied at launch
    sync(L)
    np.testing.assert_array_equal(z, x * 3)
    # a scalar parameter cannot be a placeholder
    a2 = ffi.new("aclrtArgsHandle *")
    assert L.aclrtKernelArgsInit(func(L, b, "slow"), a2) == OK
    assert L.aclrtKernelArgsAppendPlaceHolder(a2[0], ph) == INVALID_PARAM and "not a pointer" in msg(L)
    assert L.aclrtBinaryUnLoad(b) == OK


def test_launch_config_attributes(L, binary):
    b = load(L, binary)
    f = func(L, b, "add_custom")
    x, y, z = arrays(16)
    args = struct.pack("<QQQI4x", ptr(x), ptr(y), ptr(z), 16)
    cfg = ffi.new("aclrtLaunchKernelCfg *")
    attrs = ffi.new("aclrtLaunchKernelAttr[2]")
    cfg.attrs, cfg.numAttrs = attrs, 2
    attrs[0].id, attrs[0].value.engineType = 3, 1   # AIV
    attrs[1].id, attrs[1].value.schemMode = 1, 0
    assert L.aclrtLaunchKernelWithHostArgs(f, 2, ffi.NULL, cfg, args, len(args), ffi.NULL, 0) == OK, msg(L)
    sync(L)
    np.testing.assert_array_equal(z, x + y)
    attrs[0].value.engineType = 7
    assert L.aclrtLaunchKernelWithHostArgs(f, 2, ffi.NULL, cfg, args, len(args), ffi.NULL, 0) == INVALID_PARAM
    attrs[0].id, attrs[0].value.timeout = 7, 5
    attrs[1].id, attrs[1].value.timeoutUs.timeoutLow = 8, 1000
    assert L.aclrtLaunchKernelWithHostArgs(f, 2, ffi.NULL, cfg, args, len(args), ffi.NULL, 0) == INVALID_PARAM
    assert "cannot be given together" in msg(L)
    attrs[1].id = 99
    assert L.aclrtLaunchKernelWithHostArgs(f, 2, ffi.NULL, cfg, args, len(args), ffi.NULL, 0) == INVALID_PARAM
    cfg.attrs = ffi.NULL
    assert L.aclrtLaunchKernelWithHostArgs(f, 2, ffi.NULL, cfg, args, len(args), ffi.NULL, 0) == INVALID_PARAM
    assert L.aclrtBinaryUnLoad(b) == OK


def test_unload_while_a_launch_is_queued(L, binary):
    b = load(L, binary)
    f = func(L, b, "slow")
    out = np.zeros(1, np.uint32)
    args = struct.pack("<QQ", 30_000_000, ptr(out))
    assert L.aclrtLaunchKernelWithHostArgs(f, 1, ffi.NULL, ffi.NULL, args, len(args), ffi.NULL, 0) == OK
    assert L.aclrtBinaryUnLoad(b) == OK   # the queued launch keeps the module mapped
    assert L.aclrtLaunchKernelWithHostArgs(f, 1, ffi.NULL, ffi.NULL, args, len(args), ffi.NULL, 0) == 107017
    sync(L)
    assert out[0] == 42


def test_binary_belongs_to_its_device(tmp_path):
    p = run_python(r'''
    import acl_rt, kernels
    from acl_rt._lib import backend, ffi
    from acl_rt import _runtime as rt
    k = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void e(void) {}\n', "e")
    f = k._func(0)   # loaded on device 0
    s1 = acl_rt.Device(1).create_stream()
    lib = backend().lib
    print("RC", lib.aclrtLaunchKernelWithHostArgs(f, 1, s1._handle("t"), ffi.NULL, ffi.NULL, 0, ffi.NULL, 0))
    print("MSG", ffi.string(lib.aclGetRecentErrMsg()).decode())
    k.launch(1, stream=s1); s1.synchronize()   # RawKernel loads it on the stream's device
    print("OK")
    ''', env={"CANNA_SIM_DEVICES": "2", "CANNA_KERNEL_CACHE": str(tmp_path)})
    assert "RC 107003" in p.stdout and "loaded on device 0 but the stream belongs to device 1" in p.stdout
    assert "OK" in p.stdout
