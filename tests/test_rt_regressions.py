"""acl_rt regressions found by hostile-input testing (issue 12, items 9, 10, 13, 15, 17, 20, 22):
current-stream state after out-of-order exits, memory resources of another device, raising memory
hooks, the simulator's out-of-memory reason, timeout messages, incomplete events, huge sizes."""
from __future__ import annotations

import pytest

from conftest import assert_usable

MiB = 1 << 20


def delay(stream, ms):
    from acl_rt._lib import backend
    assert backend().lib.aclsimLaunchDelay(stream._handle("test"), int(ms * 1000), 1, 1) == 0


# -- item 9: `with stream:` blocks exited out of order ----------------------------------------------

def test_interleaved_stream_exits_restore_the_default_stream(acl):
    d = acl.Device(0)
    default = acl.current_stream()
    s1, s2 = d.create_stream(), d.create_stream()
    s1.__enter__()
    s2.__enter__()
    assert acl.current_stream() is s2
    s1.__exit__(None, None, None)            # not LIFO: s1's block ends while s2's is still open
    assert acl.current_stream() is s2        # the block still open stays current
    s2.__exit__(None, None, None)
    assert acl.current_stream() is default   # both ended: back to where we started
    s1.close()
    s2.close()
    b = acl.alloc(64)                        # was InvalidHandleError: the closed s1 stayed current
    assert b.stream is default
    b.close()
    assert_usable()


def test_interleaved_exits_of_streams_of_two_devices_restore_the_device(py):
    py("""
        import acl_rt
        d0, d1 = acl_rt.Device(0), acl_rt.Device(1)
        s0, s1 = d0.create_stream(), d1.create_stream()
        s0.__enter__(); s1.__enter__()
        assert acl_rt.current_device() is d1
        s0.__exit__(None, None, None)
        assert acl_rt.current_device() is d1 and acl_rt.current_stream() is s1
        s1.__exit__(None, None, None)
        assert acl_rt.current_device() is d0, acl_rt.current_device()
        assert acl_rt.current_stream(d0).is_default
        assert acl_rt.current_stream(d1).is_default
        s0.close(); s1.close()
        acl_rt.alloc(64).close(); acl_rt.alloc(64, device=1).close()
        """, env={"CANNA_SIM_DEVICES": "2"})


def test_interleaved_device_block_exits_restore_the_first_device(py):
    py("""
        import acl_rt
        d0, d1, d2 = acl_rt.Device(0), acl_rt.Device(1), acl_rt.Device(2)
        s2 = d2.create_stream()
        d1.__enter__(); s2.__enter__()
        d1.__exit__(None, None, None)                 # the outer block ends first
        assert acl_rt.current_device() is d2 and acl_rt.current_stream() is s2
        s2.__exit__(None, None, None)
        assert acl_rt.current_device() is d0, acl_rt.current_device()
        d1.__enter__(); d2.__enter__()
        d1.__exit__(None, None, None); d2.__exit__(None, None, None)
        assert acl_rt.current_device() is d0, acl_rt.current_device()
        d2.__exit__(None, None, None)                 # an exit without a block: harmless
        assert acl_rt.current_device() is d0
        acl_rt.alloc(64).close()
        """, env={"CANNA_SIM_DEVICES": "3"})


def test_a_closed_stream_never_stays_current(acl):
    d = acl.Device(0)
    outer, inner = d.create_stream(), d.create_stream()
    with outer:
        with inner:
            inner.close()
            assert acl.current_stream() is outer     # the enclosing block's stream
            b = acl.alloc(64)
            assert b.stream is outer
            b.close()
        outer.close()
        assert acl.current_stream().is_default
        acl.alloc(64).close()
    assert acl.current_stream().is_default
    assert_usable()


def test_nested_entries_of_one_stream_exit_in_any_order(acl):
    d = acl.Device(0)
    s1, s2 = d.create_stream(), d.create_stream()
    try:
        s1.__enter__(); s2.__enter__(); s1.__enter__()
        s2.__exit__(None, None, None)
        assert acl.current_stream() is s1
        s1.__exit__(None, None, None)
        assert acl.current_stream() is s1
        s1.__exit__(None, None, None)
        assert acl.current_stream().is_default
        s1.__exit__(None, None, None)            # one exit too many: harmless
        assert acl.current_stream().is_default
    finally:
        s1.close()
        s2.close()
    assert_usable()


# -- item 10: a memory resource of another device ----------------------------------------------------

def test_memory_resource_of_another_device_is_refused(py):
    out = py("""
        import acl_rt
        d0 = acl_rt.Device(0)
        before = d0.memory_resource
        for mr in (acl_rt.DeviceMemoryResource(1), acl_rt.MemoryPool(1)):
            try:
                d0.memory_resource = mr
            except ValueError as e:
                assert isinstance(e, acl_rt.InvalidArgumentError), type(e)
                print(type(mr).__name__, e)
            else:
                raise AssertionError("accepted a resource of device 1 for device 0")
        assert d0.memory_resource is before
        b = acl_rt.alloc(64, device=0)
        assert b.device is d0
        d0.memory_resource = acl_rt.DeviceMemoryResource(0)     # its own device: fine
        assert acl_rt.alloc(64, device=0).device is d0
        """, env={"CANNA_SIM_DEVICES": "2"}).stdout.splitlines()
    assert len(out) == 2
    for line in out:
        assert "device 0" in line and "device 1" in line, line


# -- item 13: a raising free_preprocess hook ---------------------------------------------------------

def test_raising_free_preprocess_hook_still_frees_the_block(acl):
    class Boom(acl.MemoryHook):
        def free_preprocess(self, **kw):
            raise RuntimeError("hook failed")

    base = acl.memory_allocated()
    b = acl.alloc(3 * MiB)
    assert acl.memory_allocated() > base
    with Boom():
        with pytest.raises(RuntimeError, match="hook failed"):
            b.close()
    assert b.closed
    assert acl.memory_allocated() == base          # the block went back to the pool
    s = acl.memory_stats()
    assert s["allocation.all.current"] == s["allocation.all.allocated"] - s["allocation.all.freed"]
    acl.empty_cache()
    assert_usable()


@pytest.mark.parametrize("method", ["alloc_postprocess", "malloc_postprocess"])
def test_raising_allocation_hook_loses_no_block(acl, method):
    """A hook raising after the pool handed out the block: the caller never gets the buffer, so
    the pool takes the block back (CuPy's buffers are freed by reference counting then)."""
    class Boom(acl.MemoryHook):
        pass
    setattr(Boom, method, lambda self, **kw: (_ for _ in ()).throw(RuntimeError("hook failed")))

    acl.empty_cache()
    base = acl.memory_allocated()
    with Boom():
        with pytest.raises(RuntimeError, match="hook failed"):
            acl.alloc(5 * MiB)
        assert acl.memory_allocated() == base
    assert acl.memory_allocated() == base
    assert_usable()


# -- item 15: the simulator's reason for an out-of-memory ---------------------------------------------

def test_out_of_memory_keeps_the_simulators_reason(py):
    """A request the host's RAM cannot back (the simulator refuses it before touching memory) names
    that reason and CANNA_SIM_HBM_SIZE, not just "out of memory" with the device all free."""
    out = py("""
        import acl_rt
        avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:"))
        n = avail + (4 << 30)
        try:
            acl_rt.alloc(n)
        except acl_rt.OutOfMemoryError as e:
            print(e)
        else:
            raise AssertionError("allocated more than the host has")
        acl_rt.alloc(64).close()
        """, env={"CANNA_SIM_HBM_SIZE": str(64 << 40)}).stdout
    assert "host RAM" in out and "CANNA_SIM_HBM_SIZE" in out, out
    assert "tried to allocate" in out, out           # still the pool's own summary


# -- item 17: the timeout a synchronize reports -------------------------------------------------------

def test_stream_synchronize_timeout_reports_the_requested_timeout(acl, stream):
    delay(stream, 1500)
    with pytest.raises(acl.AclTimeoutError) as ei:
        stream.synchronize(timeout=0.5)
    assert "500 ms" in str(ei.value) and "100 ms" not in str(ei.value), str(ei.value)
    e = stream.record()
    with pytest.raises(acl.AclTimeoutError) as ei:
        e.synchronize(timeout=0.25)
    assert "250 ms" in str(ei.value) and "50 ms" not in str(ei.value).replace("250 ms", ""), str(ei.value)
    stream.synchronize()


# -- item 20: elapsed time of an event that has not completed -----------------------------------------

def test_elapsed_time_before_the_end_event_completed_says_to_synchronize(acl, stream):
    start = stream.record()
    delay(stream, 500)
    end = stream.record()
    with pytest.raises(acl.NotReadyError) as ei:
        end - start
    err = ei.value
    assert isinstance(err, acl.AclError) and not isinstance(err, acl.DeviceError)
    assert err.code == 507006 and "synchronize()" in str(err) and "end event" in str(err), str(err)
    end.synchronize()
    assert end - start >= 0


# -- item 22: sizes beyond any limit ---------------------------------------------------------------

@pytest.mark.parametrize("limit", [10**30, 2**64, 2**63])
def test_huge_memory_limit_is_a_clear_value_error(acl, limit):
    with pytest.raises(acl.InvalidArgumentError) as ei:
        acl.set_memory_limit(limit)
    assert isinstance(ei.value, ValueError) and str(limit) in str(ei.value) and "at most" in str(ei.value)
    assert acl.get_memory_limit() is None
    assert_usable()


def test_huge_memory_limit_from_the_environment_is_a_clear_error(py):
    out = py("""
        import acl_rt
        try:
            acl_rt.alloc(64)
        except ValueError as e:
            print(type(e).__name__, e)
        """, env={"CANNA_MEMORY_LIMIT": "9000000000T"}).stdout
    assert "InvalidArgumentError" in out and "CANNA_MEMORY_LIMIT" in out and "at most" in out, out


@pytest.mark.parametrize("value", ["9000000T", "99999999999999999999999", "16777216T"])
def test_huge_simulated_memory_size_is_a_clear_error(py, value):
    out = py("""
        import acl_rt
        try:
            acl_rt.init()
            acl_rt.alloc(64)
        except acl_rt.AclError as e:
            print(type(e).__name__, e)
        """, env={"CANNA_SIM_HBM_SIZE": value}).stdout
    assert "InvalidArgumentError" in out and "CANNA_SIM_HBM_SIZE" in out and value in out, out
    assert "at most" in out, out
