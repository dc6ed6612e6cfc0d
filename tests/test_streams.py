"""Streams and events on the simulator: asynchrony, ordering, overlap, waits, timing, async errors.

Timings here are generous bounds on sleeps the simulator performs (never performance assertions):
a 300 ms delay task must not finish in 10 ms, and two overlapping ones must not take 600 ms.
"""
from __future__ import annotations

import threading
import time

import pytest

from conftest import assert_usable

VECTOR, CUBE = 1, 2


def delay(stream, ms, engine=VECTOR, cores=1):
    from acl_rt._lib import backend
    rc = backend().lib.aclsimLaunchDelay(stream._handle("test"), int(ms * 1000), engine, cores)
    assert rc == 0


def test_launch_returns_before_the_work_ends(stream):
    t0 = time.perf_counter()
    delay(stream, 300)
    launched = time.perf_counter() - t0
    assert launched < 0.1                       # queued, not run
    assert stream.query() is False              # NOT_READY while it runs
    stream.synchronize()
    assert time.perf_counter() - t0 >= 0.29     # synchronize waited for it
    assert stream.query() is True


def test_event_query_and_synchronize(acl, stream):
    delay(stream, 200)
    e = stream.record()
    assert e.query() is False
    e.synchronize()
    assert e.query() is True
    never = acl.Device(0).create_event()
    assert never.query() is True                # a never-recorded event is complete


def test_in_order_execution_per_stream(stream):
    order = []
    for i in range(20):
        if i % 5 == 0:
            delay(stream, 10)
        stream.launch_host_func(order.append, i)
    stream.synchronize()
    assert order == list(range(20))


def test_copies_are_ordered_after_earlier_work(acl, stream):
    buf = acl.alloc(1 << 16, stream=stream)
    host = acl.alloc_host(1 << 16)
    host.view()[:] = b"\x07" * (1 << 16)
    delay(stream, 100)
    buf.copy_from(host, stream=stream)          # queued behind the delay
    out = acl.alloc_host(1 << 16)
    buf.copy_to(out, stream=stream)
    assert stream.query() is False
    stream.synchronize()
    assert bytes(out.view()) == b"\x07" * (1 << 16)


def test_two_streams_overlap(acl):
    d = acl.Device(0)
    s1, s2 = d.create_stream(), d.create_stream()
    t0 = time.perf_counter()
    delay(s1, 300)
    delay(s2, 300)
    s1.synchronize()
    s2.synchronize()
    elapsed = time.perf_counter() - t0
    assert 0.29 <= elapsed < 0.55, elapsed      # concurrent, not 600 ms


def test_cross_stream_wait(acl):
    d = acl.Device(0)
    producer, consumer = d.create_stream(), d.create_stream()
    order = []
    delay(producer, 200)
    producer.launch_host_func(order.append, "produced")
    ready = producer.record()
    consumer.wait(ready)                        # does not block the host
    consumer.launch_host_func(order.append, "consumed")
    assert order == []
    consumer.synchronize()
    assert order == ["produced", "consumed"]
    # waiting on a stream directly
    delay(producer, 100)
    producer.launch_host_func(order.append, "p2")
    consumer.wait(producer)
    consumer.launch_host_func(order.append, "c2")
    consumer.synchronize()
    assert order[2:] == ["p2", "c2"]


def test_a_completed_event_means_its_stream_is_idle(acl):
    """An event recorded last on a stream has completed => the stream reports no pending work,
    whichever thread (the stream's worker, a waiting stream, a synchronizing caller) saw it first."""
    d = acl.Device(0)
    s1, s2 = d.create_stream(), d.create_stream()
    for i in range(300):
        delay(s1, 20 if i % 3 == 0 else 0)
        e = s1.record()
        if i % 2:
            e.synchronize()
        else:
            s2.wait(e)
            s2.synchronize()
        assert s1.query(), f"round {i}: the event completed but its stream reports pending work"


def test_event_timing_matches_a_known_delay(stream):
    start = stream.record()
    delay(stream, 150)
    end = stream.record()
    end.synchronize()
    ms = end - start
    assert ms == start.elapsed_time(end)
    assert 145 <= ms < 400, ms


def test_synchronize_with_timeout(acl, stream):
    delay(stream, 500)
    with pytest.raises(acl.AclTimeoutError) as ei:
        stream.synchronize(timeout=0.05)
    assert ei.value.code == 507046 and isinstance(ei.value, TimeoutError)
    e = stream.record()
    with pytest.raises(acl.AclTimeoutError):
        e.synchronize(timeout=0.01)
    stream.synchronize(timeout=5)


def test_async_error_is_reported_at_synchronize_once(acl, stream):
    from acl_rt._lib import backend
    L = backend().lib
    ran = []
    buf = acl.DeviceMemoryResource(0).allocate(256, stream=stream)   # fresh, poisoned memory
    assert L.aclsimLaunchFault(stream._handle("t"), 507015, b"injected aicore exception") == 0
    buf.fill(0, stream=stream)                          # work after the fault is skipped
    stream.launch_host_func(ran.append, "host func")    # host functions still run (bookkeeping)
    e = stream.record()                                 # and so do event records
    with pytest.raises(acl.KernelError) as ei:
        stream.synchronize()
    assert ei.value.code == 507015 and "injected" in str(ei.value)
    assert isinstance(ei.value, acl.DeviceError)
    assert e.query() is True
    stream.synchronize()                                # reported once: usable again
    assert buf.tobytes(stream=stream) == b"\xff\x7f" * 128   # still poison: the fill was skipped
    stream.launch_host_func(ran.append, "after")
    buf.fill(0, stream=stream)
    stream.synchronize()
    assert ran == ["host func", "after"] and buf.tobytes() == bytes(256)
    assert_usable()


def test_async_error_surfaces_at_device_synchronize(acl, stream):
    from acl_rt._lib import backend
    backend().lib.aclsimLaunchFault(stream._handle("t"), 507035, b"vector core exception")
    with pytest.raises(acl.KernelError):
        acl.Device(0).synchronize()
    acl.Device(0).synchronize()


def test_async_error_surfaces_at_event_synchronize(acl, stream):
    from acl_rt._lib import backend
    backend().lib.aclsimLaunchFault(stream._handle("t"), 507015, b"fault before the event")
    e = stream.record()
    with pytest.raises(acl.KernelError, match="fault before the event"):
        e.synchronize()
    stream.synchronize()                                # already reported


def test_host_func_exception_is_raised_at_synchronize(stream):
    def boom():
        raise ZeroDivisionError("in a host func")
    stream.launch_host_func(boom)
    with pytest.raises(ZeroDivisionError):
        stream.synchronize()
    stream.synchronize()


def test_current_stream_context_manager(acl):
    d = acl.Device(0)
    s = d.create_stream()
    assert acl.current_stream() == d.default_stream
    with s:
        assert acl.current_stream() is s
        buf = acl.alloc(64)
        assert buf.stream is s
        seen = []
        t = threading.Thread(target=lambda: seen.append(acl.current_stream()))
        t.start()
        t.join()
        assert seen[0] != s                     # thread-local
    assert acl.current_stream() == d.default_stream


def test_streams_used_from_many_threads(acl):
    d = acl.Device(0)
    s = d.create_stream()
    out = []
    lock = threading.Lock()

    def worker(i):
        for j in range(50):
            def add(i=i, j=j):
                with lock:
                    out.append((i, j))
            s.launch_host_func(add)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s.synchronize()
    assert len(out) == 200
    for i in range(4):                           # per thread, in order
        assert [j for (k, j) in out if k == i] == list(range(50))


def test_utilization_reflects_busy_cores(acl):
    d = acl.Device(0)
    s = d.create_stream()
    delay(s, 600, engine=CUBE, cores=24)        # all 24 cube cores busy
    time.sleep(0.4)
    u = d.utilization()
    s.synchronize()
    assert u.cube >= 30, u
    assert u.aicore >= 30


def test_stream_priority_and_repr(acl):
    s = acl.Device(0).create_stream(priority=3)
    assert s.priority == 3 and "stream" in repr(s) and s.handle != 0
    assert s.__npu_stream__() == (0, s.handle)
    s.close()
    assert "destroyed" in repr(s)
    s.close()                                    # idempotent


def test_host_func_errors_reach_every_synchronize(acl):
    d = acl.Device(0)

    def boom(msg):
        raise RuntimeError(msg)
    d.default_stream.launch_host_func(boom, "one")        # a fresh wrapper each access
    d.default_stream.launch_host_func(boom, "two")
    with pytest.raises(RuntimeError, match="one") as ei:
        d.default_stream.synchronize()
    assert any("two" in n for n in ei.value.__notes__)   # the second is attached, not lost
    s = d.create_stream()
    s.launch_host_func(boom, "via device")
    with pytest.raises(RuntimeError, match="via device"):
        d.synchronize()
    d.synchronize()


def test_internal_waits_do_not_steal_host_func_errors(acl, stream):
    buf = acl.alloc(16, stream=stream)
    buf.fill(1, stream=stream)
    stream.launch_host_func(lambda: 1 / 0)
    out = bytearray(16)
    buf.copy_to(out, stream=stream)                      # waits internally, copies
    assert out == b"\x01" * 16
    with pytest.raises(ZeroDivisionError):
        stream.synchronize()                             # the user's own synchronize reports it


def test_streams_and_events_cannot_be_copied_or_pickled(acl, stream):
    import copy
    import pickle
    e = stream.record()
    for obj in (stream, e):
        for f in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be"):
                f(obj)


def test_hash_and_equality_survive_close(acl):
    s = acl.Device(0).create_stream()
    h = hash(s)
    t = acl.Device(0).create_stream()
    s.close()
    t.close()
    assert hash(s) == h and s != t


def test_synchronize_is_interruptible(py):
    out = py("""
        import signal, time, acl_rt
        from acl_rt._lib import backend
        s = acl_rt.Device(0).create_stream()
        backend().lib.aclsimLaunchDelay(s._handle("t"), 5_000_000, 1, 1)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
        t0 = time.perf_counter()
        try:
            s.synchronize()
        except KeyboardInterrupt:
            print("interrupted", time.perf_counter() - t0 < 3)
        """).stdout.split()
    assert out == ["interrupted", "True"]


def test_finalize_does_not_deadlock_on_host_funcs_using_the_runtime(py):
    out = py("""
        import time, acl_rt
        s = acl_rt.Device(0).create_stream()
        made = []
        s.launch_host_func(lambda: (time.sleep(0.2), made.append(acl_rt.Device(1).create_stream())))
        acl_rt.finalize()
        print("finalized", len(made))
        """, env={"CANNA_SIM_DEVICES": "2"}, timeout=60).stdout.split()
    assert out[0] == "finalized"


def test_cross_device_misuse_is_rejected(py):
    py("""
        import pytest, acl_rt
        d0, d1 = acl_rt.Device(0), acl_rt.Device(1)
        s0, s1 = d0.create_stream(), d1.create_stream()
        e0 = d0.create_event()
        with pytest.raises(acl_rt.InvalidArgumentError, match="event is on device 0 but the stream is on device 1"):
            e0.record(s1)
        with pytest.raises(acl_rt.InvalidArgumentError, match="stream is on device 1"):
            acl_rt.alloc(64, stream=s1, device=0)
        b0 = acl_rt.alloc(64, device=0)
        with pytest.raises(acl_rt.InvalidArgumentError, match="stream is on device 1"):
            b0.fill(3, stream=s1)
        e1 = s1.record()
        e0.record(s0)
        e0.synchronize(); e1.synchronize()
        with pytest.raises(acl_rt.InvalidArgumentError, match="different devices"):
            e0.elapsed_time(e1)
        s0.wait(e1)                                    # cross-device waits are fine
        with s1:                                       # a stream switches the current device too
            assert acl_rt.current_device() is d1 and acl_rt.current_stream() is s1
            assert acl_rt.alloc(8).device is d1
        assert acl_rt.current_device() is d0
        """, env={"CANNA_SIM_DEVICES": "2"})


def test_waiting_for_own_streams_later_event_from_a_host_func_is_refused(acl, stream):
    """A host function waiting for an event recorded later on its own stream would hang forever
    (the event cannot complete before the host function returns): the simulator refuses it."""
    box = {}
    e = acl.Device(0).create_event()

    def wait_for_e():
        try:
            e.synchronize()
            box["ok"] = True
        except acl.AclError as err:
            box["err"] = err
    stream.launch_host_func(wait_for_e)
    e.record(stream)
    stream.synchronize()
    assert "err" in box and "would deadlock" in str(box["err"])

