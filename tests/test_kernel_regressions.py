"""Custom kernels (kernels.RawKernel / RawModule): regressions of issue 12 (hostile inputs).

Anything that could kill the process (a damaged binary, an out-of-bounds write into host memory)
runs in a subprocess, so a crash is a failed test and not a dead pytest.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import acl_rt
import canna_dl as cd
import kernels

from conftest import run_python

COPY = r'''
#include "canna_kernel.h"
CANNA_KERNEL void copy(const float *x, float *y, uint32_t n) { for (uint32_t i = 0; i < n; ++i) y[i] = x[i]; }
CANNA_KERNEL void poke(GM_ADDR out, uint32_t n) { for (uint32_t i = 0; i < n; ++i) out[i] = 1; }
CANNA_KERNEL void peek(const GM_ADDR in, GM_ADDR out, uint32_t n) { for (uint32_t i = 0; i < n; ++i) out[i] = in[i]; }
'''


# a private on-disk kernel cache for this module (and the subprocesses it starts): tests/conftest.py
pytestmark = pytest.mark.usefixtures("kernel_cache")


@pytest.fixture(scope="module")
def mod(kernel_cache):
    acl_rt.init()
    acl_rt.Device(0).set_current()
    return kernels.RawModule(COPY)


# -- item 7: a launch waits for the pending writes of its DeviceArray arguments on other streams

def test_launch_waits_for_a_pending_write_on_another_stream(mod):
    cp = mod.get_function("copy")
    dev = acl_rt.Device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()
    try:
        x = cd.asarray(np.arange(64, dtype=np.float32))
        gate = threading.Event()
        s1.launch_host_func(gate.wait, 60)      # s1 is held until the gate opens
        w = kernels.add(x, 9, stream=s1)         # pending on s1: fresh memory (NaN poison) until then
        out = cd.zeros(64)
        cp.launch(1, w, out, 64, stream=s2)
        # open the gate later: a launch on s2 that did not wait has read the poison by then (the
        # result does not depend on the delay once the launch waits)
        threading.Timer(0.2, gate.set).start()
        s2.synchronize()
        np.testing.assert_array_equal(out.numpy(), np.arange(64) + 9)
        # the launch is the pending write of its non-const DeviceArray arguments, as an op's output:
        # an op on s1 waits for it
        gate2 = threading.Event()
        s2.launch_host_func(gate2.wait, 60)
        out2 = cd.zeros(64)
        cp.launch(1, x, out2, 64, stream=s2)
        assert out2.stream is s2 and x.stream is not s2    # x is const: only read
        r = kernels.add(out2, 1, stream=s1)
        threading.Timer(0.2, gate2.set).start()
        s1.synchronize()
        np.testing.assert_array_equal(r.numpy(), np.arange(64) + 1)
    finally:
        s1.synchronize()
        s2.synchronize()
        s1.close()
        s2.close()


# -- item 8: immutable objects are refused for pointer parameters the kernel may write

def test_immutable_objects_refused_for_writable_pointers(mod):
    poke, peek = mod.get_function("poke"), mod.get_function("peek")
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    immutables = [("bytes", bytes(16)), ("ndarray", ro)]
    jnp = pytest.importorskip("jax.numpy")
    tf = pytest.importorskip("tensorflow")
    immutables += [("ArrayImpl", jnp.zeros(4)), ("EagerTensor", tf.zeros(4))]
    for what, obj in immutables:
        with pytest.raises(ValueError, match=rf"parameter 0 'out' \(GM_ADDR\): the {what} is read-only"):
            poke.launch(1, obj, 16)
        out = np.full(16, 7, np.uint8)
        peek.launch(1, obj, out, 16)           # a const parameter takes it
        acl_rt.current_stream().synchronize()
        assert (out == 0).all(), what
    assert bytes(16) == b"\0" * 16
    assert (np.asarray(jnp.zeros(4)) == 0).all() and (tf.zeros(4).numpy() == 0).all()
    # a writable array is written
    w = np.zeros(16, np.uint8)
    poke.launch(1, w, 16)
    acl_rt.current_stream().synchronize()
    assert (w == 1).all()


# -- item 1: a damaged binary is a parse error, a damaged cache entry is rebuilt (never SIGBUS)

K42 = r'''
#include "canna_kernel.h"
CANNA_KERNEL void k(GM_ADDR x) { ((float *)x)[0] = 42; }
'''


def test_truncated_binary_is_a_parse_error_not_a_crash(tmp_path):
    r = run_python(f"""
        import acl_rt, kernels
        acl_rt.init(); acl_rt.Device(0).set_current()
        SRC = {K42!r}
        data = open(kernels.RawModule(SRC).binary_path, "rb").read()
        lengths = sorted(set([4096, len(data) - 1, len(data) // 2, 64, 1] + list(range(65, len(data), 211))))
        for n in lengths:
            for how in ("bytes", "path"):
                try:
                    if how == "bytes":
                        m = kernels.RawModule(data[:n])
                    else:
                        p = {str(tmp_path)!r} + f"/t{{n}}.so"
                        open(p, "wb").write(data[:n])
                        m = kernels.RawModule(path=p)
                    m.get_function("k")
                except acl_rt.AclError as e:
                    assert e.code == 100006, (n, how, e)   # ACL_ERROR_PARSE_FILE
                    if n == 4096 and how == "bytes":
                        print(e)
                else:
                    raise AssertionError(f"a binary truncated to {{n}} bytes loaded ({{how}})")
        print("ok", len(lengths))
    """)
    assert "damaged ELF shared object" in r.stdout and "extends past the end" in r.stdout
    assert "ok" in r.stdout


def _run_k42(cache):
    return run_python(f"""
        import warnings, numpy as np, acl_rt, kernels
        warnings.simplefilter("always")
        acl_rt.init(); acl_rt.Device(0).set_current()
        m = kernels.RawModule({K42!r})
        x = np.zeros(1, np.float32)
        m.get_function("k").launch(1, x)
        acl_rt.current_stream().synchronize()
        print(m.cache, x[0], m.binary_path)
    """, env={"CANNA_KERNEL_CACHE": str(cache)})


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "bit flip", "directory", "no checksum"])
def test_damaged_cache_entry_is_rebuilt_with_a_warning(tmp_path, damage):
    cache = tmp_path / "cache"
    r = _run_k42(cache)
    how, value, path = r.stdout.split()
    assert (how, value) == ("compiled", "42.0") and "RuntimeWarning" not in r.stderr
    data = open(path, "rb").read()
    if damage == "truncated":
        open(path, "wb").write(data[:4096])
    elif damage == "garbage":
        open(path, "wb").write(os.urandom(len(data)))
    elif damage == "empty":
        open(path, "wb").close()
    elif damage == "bit flip":
        open(path, "wb").write(data[:3000] + bytes([data[3000] ^ 0x10]) + data[3001:])
    elif damage == "directory":
        os.unlink(path)
        os.mkdir(path)
        open(os.path.join(path, "x"), "w").close()
    else:
        os.unlink(path + ".sha256")
    r = _run_k42(cache)
    assert r.stdout.split()[:2] == ["compiled", "42.0"], r.stdout
    assert "RuntimeWarning" in r.stderr and "rebuilding it from source" in r.stderr and path in r.stderr
    r = _run_k42(cache)   # the entry is whole again: the next process hits it
    assert r.stdout.split()[:2] == ["disk", "42.0"] and "RuntimeWarning" not in r.stderr


# -- item 19: kernels are read from what the preprocessor keeps

DEAD = r'''
#include "canna_kernel.h"
#if 0
CANNA_KERNEL void dead(GM_ADDR x, not_a_type y) { this does not compile; }
#endif
/* CANNA_KERNEL void in_comment(GM_ADDR x) { nor this; } */
#ifdef CANNA_TEST_UNDEFINED_MACRO
CANNA_KERNEL void dead2(GM_ADDR x) { nor this; }
#elif defined(CANNA_TARGET_SIM) && TILE > 2
CANNA_KERNEL void live(GM_ADDR x) { ((float *)x)[0] = TILE; }
#else
CANNA_KERNEL void live(GM_ADDR x) { ((float *)x)[0] = -1; }
#endif
'''


def _run1(k):
    x = np.zeros(1, np.float32)
    k.launch(1, x)
    acl_rt.current_stream().synchronize()
    return x[0]


def test_kernel_in_an_inactive_preprocessor_branch(kernel_cache, tmp_path):
    acl_rt.init()
    acl_rt.Device(0).set_current()
    m = kernels.RawModule(DEAD, options=("-DTILE=8",))
    assert m.kernel_names == ("live",)
    assert _run1(m.get_function("live")) == 8
    for name in ("dead", "dead2"):
        with pytest.raises(kernels.KernelNotFoundError, match=rf"no kernel named '{name}'.*kernels there: live.*"
                                                              r"preprocessor branch that is not compiled"):
            m.get_function(name)
    with pytest.raises(kernels.KernelNotFoundError, match="'in_comment'"):
        m.get_function("in_comment")
    # the options decide, as in the build: the other branch
    assert _run1(kernels.RawKernel(DEAD, "live", options=("-DTILE=1",))) == -1
    # macros from headers the source includes (relative to a source file), and C++
    (tmp_path / "cfg.h").write_text("#define CANNA_TEST_FEATURE 3\n")
    (tmp_path / "k.cpp").write_text('#include "canna_kernel.h"\n#include "cfg.h"\n'
                                    "#if CANNA_TEST_FEATURE == 3\n"
                                    "CANNA_KERNEL void f(GM_ADDR x) { ((float *)x)[0] = CANNA_TEST_FEATURE; }\n"
                                    "#else\nCANNA_KERNEL void f(GM_ADDR x, int broken) { }\n#endif\n"
                                    "#ifdef __CCE_AICORE__\nCANNA_KERNEL void device_only(GM_ADDR x, __ubuf__ half *u) { }\n#endif\n")
    k = kernels.RawKernel(tmp_path / "k.cpp", "f")
    assert k.num_params == 1 and _run1(k) == 3


# -- item 3: under memcheck, writes past a host operand are reported (it is staged in guarded memory)

def test_memcheck_reports_writes_past_host_operands():
    r = run_python(r'''
        import numpy as np, acl_rt, kernels
        acl_rt.init(); acl_rt.Device(0).set_current()
        assert acl_rt._lib.backend().lib.aclsimGetCheckMode() == 1
        m = kernels.RawModule(r"""
        #include "canna_kernel.h"
        CANNA_KERNEL void fill(float *x, uint32_t n) {
            uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
            for (uint32_t i = lo; i < n && i < lo + per; ++i) x[i] = 1.0f;
        }
        CANNA_KERNEL void add(const float *x, const float *y, float *z, uint32_t n) {
            for (uint32_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
        }
        CANNA_KERNEL void bump(GM_ADDR x, uint32_t n) { for (uint32_t i = 0; i < n; ++i) x[i] += 1; }
        """)
        fill, add, bump = m.get_function("fill"), m.get_function("add"), m.get_function("bump")
        s = acl_rt.current_stream()

        def report(arr, n, blocks=8):
            fill.launch(blocks, arr, n)
            try:
                s.synchronize()
            except acl_rt.KernelError as e:
                return e.code, str(e)
            return None, "not reported"

        # 12 bytes past a 4096-byte array: the guard page after its staged copy, in the last block
        buf = np.zeros(1024 + 16, np.float32)
        off = (-buf.ctypes.data % 64) // 4
        code, msg = report(buf[off:off + 1024], 1024 + 3)   # 64-byte aligned: its copy ends at the guard
        print("GUARD", code, "kernel 'fill' block 7 of 8" in msg, "past the end" in msg)
        # 4 bytes past a 4000-byte array: in the poisoned slack, found after the kernel
        code, msg = report(np.zeros(1000, np.float32), 1001, 2)
        print("SLACK", code, "parameter 0 ('x')" in msg, "bytes 0..3 past the end" in msg)
        # in bounds: the results come back to the host operands, which stay usable
        x = np.zeros(1000, np.float32)
        fill.launch(3, x, 1000); s.synchronize()
        a = np.arange(8, dtype=np.float32)
        add.launch(1, a, a, a, 8); s.synchronize()          # one operand three times (in place)
        b = bytearray(range(16))
        bump.launch(1, memoryview(b)[4:12], 8); s.synchronize()
        print("VALUES", x.sum(), a.tolist(), list(b))
        # a launch the runtime refuses after its operands were staged: the queued copy still runs safely
        import ctypes, gc
        for _ in range(20):
            tmp = np.zeros(100000, np.float32)
            try:
                add.launch(1, tmp, ctypes.c_void_p(0x10), tmp, 4)
            except acl_rt.InvalidArgumentError:
                pass
            del tmp; gc.collect()
        s.synchronize()
        # the staging copies are given back once the launches ran
        gc.collect()
        from kernels._raw import pending_keepalives
        print("PENDING", pending_keepalives())
    ''', env={"CANNA_SIM_CHECK": "1"})
    out = r.stdout
    assert "GUARD 507043 True True" in out, out
    assert "SLACK 507043 True True" in out, out
    assert "VALUES 1000.0 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0] [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 12, 13, " \
           "14, 15]" in out, out
    assert "PENDING 0" in out
