"""Device memory on the simulator: round trips, poison, capacity and OOM, memory models."""
from __future__ import annotations

import os
import struct

import pytest

from conftest import assert_usable


def test_round_trip_random_bytes(acl, stream):
    data = os.urandom(3 * 1024 * 1024 + 5)
    buf = acl.alloc(len(data), stream=stream)
    buf.copy_from(data, stream=stream)
    other = acl.alloc(len(data), stream=stream)
    other.copy_from(buf, stream=stream)
    out = bytearray(len(data))
    other.copy_to(out, stream=stream)
    assert out == data


def test_round_trip_through_pinned_host_memory(acl, stream):
    data = os.urandom(100_000)
    h_in, h_out = acl.alloc_host(len(data)), acl.alloc_host(len(data))
    h_in.view()[:] = data
    buf = acl.alloc(len(data), stream=stream)
    buf.copy_from(h_in, stream=stream)
    buf.copy_to(h_out, stream=stream)
    stream.synchronize()
    assert bytes(h_out.view()) == data


def test_partial_copies(acl, stream):
    buf = acl.alloc(16, stream=stream)
    buf.fill(0xAB, stream=stream)
    buf.copy_from(b"xyz", stream=stream)
    assert buf.tobytes(stream=stream) == b"xyz" + b"\xab" * 13
    head = bytearray(4)
    buf.copy_to(head, stream=stream)
    assert head == b"xyz\xab"


def test_fresh_memory_is_poisoned_with_nan(acl):
    buf = acl.DeviceMemoryResource(0).allocate(64)   # fresh from the runtime (the pool reuses memory)
    raw = buf.tobytes()
    assert raw == b"\xff\x7f" * 32
    f32 = struct.unpack("<16f", raw)
    f64 = struct.unpack("<8d", raw)
    f16 = struct.unpack("<32e", raw)
    assert all(x != x for x in f32 + f64 + f16)          # NaN in every float width


def test_numpy_arrays_as_host_buffers(acl, stream):
    np = pytest.importorskip("numpy")
    x = np.random.default_rng(0).standard_normal((64, 33))
    buf = acl.alloc(x.nbytes, stream=stream)
    buf.copy_from(x, stream=stream)
    y = np.empty_like(x)
    buf.copy_to(y, stream=stream)
    np.testing.assert_array_equal(x, y)


def test_mem_info_tracks_allocations(acl):
    d = acl.Device(0)
    free0, total = d.mem_info()
    buf = acl.DeviceMemoryResource(d).allocate(10 << 20)   # raw: the pool would keep it cached
    free1, _ = d.mem_info()
    assert free0 - free1 >= 10 << 20                     # counted against the device
    buf.close()
    assert d.mem_info().free == free0


def test_out_of_memory_at_capacity_and_recovery(py):
    py("""
        import acl_rt
        d = acl_rt.Device(0)
        assert d.total_memory == 64 << 20
        bufs = []
        with __import__("pytest").raises(acl_rt.OutOfMemoryError) as ei:
            while True:
                bufs.append(acl_rt.alloc(8 << 20))
        e = ei.value
        assert isinstance(e, MemoryError) and e.code == 207001, e
        assert 6 <= len(bufs) <= 8, len(bufs)
        free, total = d.mem_info()
        assert free < 8 << 20
        with __import__("pytest").raises(acl_rt.OutOfMemoryError):
            acl_rt.alloc(1 << 30)                      # far past capacity
        for b in bufs[:3]:
            b.close()
        more = [acl_rt.alloc(8 << 20) for _ in range(3)]   # fits again after freeing
        more[0].copy_from(b"ok")
        assert more[0].tobytes()[:2] == b"ok"
        """, env={"CANNA_SIM_HBM_SIZE": "64M"})


def test_discrete_memory_model(py):
    py("""
        import os, acl_rt
        from acl_rt._lib import backend, ffi
        assert acl_rt.backend_info()["memory_model"] == "discrete"
        data = os.urandom(4096)
        buf = acl_rt.alloc(4096)
        buf.copy_from(data)
        assert buf.tobytes() == data
        L = backend().lib
        host = ffi.new("char[]", 4096)
        dev = ffi.cast("void *", buf.ptr)
        # an explicit kind must match the pointers in the discrete model
        assert L.aclrtMemcpy(dev, 4096, host, 4096, 2) == 107000      # D2H with a host source
        assert L.aclrtMemcpy(host, 4096, dev, 4096, 1) == 107000      # H2D with a device source
        assert L.aclrtMemcpy(host, 4096, dev, 4096, 2) == 0
        assert ffi.buffer(host, 4096)[:] == data
        assert L.aclrtMemset(host, 4096, 0, 16) == 107000                # a card cannot set host memory
        assert b"not device memory" in ffi.string(L.aclGetRecentErrMsg())
        """, env={"CANNA_SIM_MEMORY": "discrete"})


def test_unified_model_infers_direction(lib):
    L, ffi = lib
    import acl_rt
    buf = acl_rt.alloc(8)
    host = ffi.new("char[]", b"abcdefg")
    dev = ffi.cast("void *", buf.ptr)
    assert L.aclrtMemcpy(dev, 8, host, 8, 2) == 0       # kind ignored: direction from pointers
    assert buf.tobytes() == b"abcdefg\x00"


def test_memcheck_guard_page_catches_overflow_by_the_runtime(py):
    py("""
        import acl_rt
        from acl_rt._lib import backend, ffi
        L = backend().lib
        assert L.aclsimGetCheckMode() == 1
        buf = acl_rt.alloc(100)
        src = ffi.new("char[]", 200)
        assert L.aclrtMemcpy(ffi.cast("void*", buf.ptr), 200, src, 200, 1) == 107000  # past the end
        buf.copy_from(b"y" * 100)
        assert buf.tobytes() == b"y" * 100
        """, env={"CANNA_SIM_CHECK": "1"})


def test_usable_after_memory_tests(acl):
    assert_usable()


def test_async_copy_keeps_its_host_buffer_alive(py):
    """Dropping (or closing) a pinned HostBuffer right after queueing an asynchronous copy must not
    free it under the copy: the copy still delivers the data (memcheck would crash otherwise)."""
    for env in ({}, {"CANNA_SIM_CHECK": "1"}):
        py("""
            import gc, time, acl_rt
            from acl_rt._memory import pending_host_copies
            d = acl_rt.Device(0); s = d.create_stream(); N = 1 << 20
            buf = acl_rt.alloc(N, stream=s)
            h = acl_rt.alloc_host(N); h.view()[:] = b"\\x02" * N
            s.launch_host_func(time.sleep, 0.3)          # keep s busy: the copy is queued
            buf.copy_from(h, stream=s)
            h.close(); del h; gc.collect()
            assert pending_host_copies() == 1
            back = acl_rt.alloc_host(N)
            buf.copy_to(back, stream=s)
            del back                                      # the destination too
            s.synchronize()
            assert buf.tobytes(stream=s)[:4] == b"\\x02" * 4
            assert pending_host_copies() == 0             # released once the copies ran
            """, env=env)


def test_close_never_loses_an_async_error_or_the_memory(acl):
    from acl_rt._lib import backend
    d = acl.Device(0)
    s = d.create_stream()
    raw = acl.DeviceMemoryResource(d)
    free0 = d.mem_info().free
    b = raw.allocate(1 << 20, stream=s)
    backend().lib.aclsimLaunchFault(s._handle("t"), 507015, b"fault queued before the free")
    b.close()                                            # waits for s, but does not raise
    assert b.closed and d.mem_info().free == free0       # and the memory is really freed
    with pytest.raises(acl.KernelError, match="fault queued before the free"):
        s.synchronize()                                  # the error reaches the user's synchronize
    s.synchronize()


def test_buffers_refuse_copy_and_pickle_and_bad_close_stream(acl):
    import copy
    import pickle
    b = acl.alloc(64)
    h = acl.alloc_host(64)
    for obj in (b, h):
        for f in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be"):
                f(obj)
    with pytest.raises(TypeError, match="stream must be an acl_rt.Stream"):
        b.close(stream="x")
    b.copy_from(b"still usable")                        # not closed by the failed call
    assert b.tobytes()[:12] == b"still usable"
    b.close()


def test_allocation_the_host_cannot_back_fails_cleanly(acl):
    """Device memory is host RAM in the simulator: asking for more than the host has (but less
    than the 64 GiB profile) is an OutOfMemoryError naming the reason, not an OOM-killed process."""
    avail = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable")).split()[1]) * 1024
    want = min(avail + (4 << 30), (64 << 30) - (1 << 30))
    if want <= avail:
        pytest.skip("this host has more free RAM than the simulated device holds")
    with pytest.raises(acl.OutOfMemoryError, match="host RAM"):
        acl.DeviceMemoryResource(acl.Device(0)).allocate(want)
    assert_usable()
