"""The simulator's execution path (acl_rt/_sim/README.md "Execution"): the AI-core threads behind
aclsimParallelFor, tasks run inline at launch or by the thread that synchronizes, spinning and
sleeping threads, CANNA_SIM_THREADS / CANNA_SIM_SPIN_US, and fault isolation wherever a kernel
block runs.

Tasks and blocks here are Python callbacks (cffi) so the tests can see which thread ran them; the
GIL serializes their bodies, which changes nothing the tests look at. Nothing here measures speed
(tools/bench_ops_c.py and tools/bench_rawkernel.py do); the few time bounds are generous margins
around sleeps the simulator itself performs.
"""
from __future__ import annotations

import os
import textwrap
import threading
import time

import pytest

from conftest import assert_usable, run_python

VECTOR = 1
LONG_NS = 10 ** 10          # a task estimated at 10 s: never run at launch, never within a short timeout


@pytest.fixture
def rt(acl):
    from acl_rt._lib import backend, ffi
    return backend().lib, ffi


def _launch(lib, ffi, stream, fn, cost_ns, keep):
    """aclsimLaunchTask of the Python callable fn() -> int on stream (keep holds the callback)."""
    cb = ffi.callback("aclError(void *)", lambda _arg: fn())
    keep.append(cb)
    return lib.aclsimLaunchTask(stream._handle("t"), cb, ffi.NULL, ffi.NULL, VECTOR, 1, cost_ns)


def _stats(lib, ffi):
    st = ffi.new("aclsimDeviceStats *")
    assert lib.aclsimGetDeviceStats(0, st) == 0
    return st


# ------------------------------------------------------------------ aclsimParallelFor

@pytest.mark.parametrize("n", [1, 2, 3, 64, 1000])
def test_parallel_for_runs_every_block_once(rt, n):
    lib, ffi = rt
    seen, nums = [], set()

    def block(i, nb, _arg):
        seen.append(i)
        nums.add(nb)
        return 0
    cb = ffi.callback("aclsimBlockFn", block)
    assert lib.aclsimParallelFor(0, n, cb, ffi.NULL) == 0
    assert sorted(seen) == list(range(n)) and nums == {n}


def test_parallel_for_reports_the_lowest_failing_block(rt):
    lib, ffi = rt
    ran = []

    def block(i, nb, _arg):
        ran.append(i)
        return 507015 if i in (5, 9) else 0
    cb = ffi.callback("aclsimBlockFn", block)
    assert lib.aclsimParallelFor(0, 16, cb, ffi.NULL) == 507015
    assert sorted(ran) == list(range(16))       # every block still runs
    assert "block 5 of 16" in ffi.string(lib.aclGetRecentErrMsg()).decode()
    assert lib.aclsimParallelFor(0, 0, cb, ffi.NULL) == 100000
    assert lib.aclsimParallelFor(99, 2, cb, ffi.NULL) == 107001
    assert_usable()


def test_parallel_for_on_a_lent_host_team(rt):
    # aclsimSetHostTeam: the jobs of this thread run on the team it lends (a framework's intra-op
    # threads, canna_dl/torch/_team.cc), not on the simulator's pool; per thread
    lib, ffi = rt
    calls, ran, lock, main = [], [], threading.Lock(), threading.get_ident()
    helpers = []

    def team(ctx, max_threads, work, job):
        calls.append((int(ffi.cast("intptr_t", ctx)), max_threads))
        t = threading.Thread(target=work, args=(job,))
        t.start()
        helpers.append(t.ident)
        work(job)
        t.join()
    tcb = ffi.callback("aclsimHostTeamFn", team)
    idle = ffi.callback("aclsimHostTeamFn", lambda ctx, m, work, job: calls.append(("idle", m)))

    def block(i, nb, _arg):
        with lock:
            ran.append((i, threading.get_ident()))
        time.sleep(0.002)   # (releases the GIL: both team threads take blocks)
        return 507015 if i == 7 else 0
    bcb = ffi.callback("aclsimBlockFn", block)
    pt, pc = ffi.new("aclsimHostTeamFn *"), ffi.new("void **")
    assert lib.aclsimSetHostTeam(tcb, ffi.cast("void *", 42), pt, pc) == 0 and pt[0] == ffi.NULL
    try:
        assert lib.aclsimParallelFor(0, 12, bcb, ffi.NULL) == 507015
        assert "block 7 of 12" in ffi.string(lib.aclGetRecentErrMsg()).decode()
        assert calls == [(42, 12)]
        assert sorted(i for i, _ in ran) == list(range(12))
        assert {t for _, t in ran} == {main, helpers[0]}         # the team's two threads, no pool thread
        ran.clear()
        assert lib.aclsimParallelFor(0, 1, bcb, ffi.NULL) == 0 and calls == [(42, 12)]   # one block: here
        # a team that runs no call at all: the caller runs every block itself
        assert lib.aclsimSetHostTeam(idle, ffi.NULL, pt, pc) == 0 and pt[0] == tcb
        assert int(ffi.cast("intptr_t", pc[0])) == 42
        ran.clear()
        assert lib.aclsimParallelFor(0, 5, bcb, ffi.NULL) == 0
        assert calls[-1] == ("idle", 5) and sorted(ran) == [(i, main) for i in range(5)]
        # another thread keeps the pool (its own setting: none)
        other = []
        th = threading.Thread(target=lambda: other.append(lib.aclsimParallelFor(0, 6, bcb, ffi.NULL)))
        n = len(calls)
        th.start()
        th.join(60)
        assert other == [0] and len(calls) == n
    finally:
        assert lib.aclsimSetHostTeam(ffi.NULL, ffi.NULL, pt, ffi.NULL) == 0
    assert pt[0] == idle
    ran.clear()
    assert lib.aclsimParallelFor(0, 4, bcb, ffi.NULL) == 0 and len(calls) == n and len(ran) == 4
    assert_usable()


def test_nested_and_concurrent_parallel_for_complete():
    # in a subprocess: a deadlock would hang the test session instead of failing it
    out = run_python("""
        import threading, acl_rt
        from acl_rt._lib import backend, ffi
        acl_rt.init(); acl_rt.Device(0).set_current()
        lib = backend().lib
        pairs, lock = [], threading.Lock()

        def inner(j, nb, arg):
            with lock:
                pairs.append((ffi.cast("intptr_t", arg), j))
            return 0
        icb = ffi.callback("aclsimBlockFn", inner)

        def outer(i, nb, arg):   # every outer block (on an AI-core thread or the caller) nests a call
            return lib.aclsimParallelFor(0, 5, icb, ffi.cast("void *", int(ffi.cast("intptr_t", arg)) * 100 + i))
        ocb = ffi.callback("aclsimBlockFn", outer)

        def caller(k):
            for rep in range(20):
                assert lib.aclsimParallelFor(0, 7, ocb, ffi.cast("void *", k * 1000 + rep)) == 0
        threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert len(pairs) == 4 * 20 * 7 * 5 and len(set(pairs)) == len(pairs), len(pairs)
        print("OK", len(pairs))
        """, timeout=300).stdout.split()
    assert out == ["OK", str(4 * 20 * 7 * 5)]


def test_parallel_for_inside_tasks_of_several_streams(acl, rt):
    lib, ffi = rt
    streams = [acl.Device(0).create_stream() for _ in range(3)]
    done, keep = [], []
    lock = threading.Lock()

    def block(i, nb, arg):
        with lock:
            done.append((int(ffi.cast("intptr_t", arg)), i))
        return 0
    bcb = ffi.callback("aclsimBlockFn", block)
    for k, s in enumerate(streams):
        for rep in range(10):
            tag = k * 100 + rep
            assert _launch(lib, ffi, s, lambda tag=tag: lib.aclsimParallelFor(0, 6, bcb, ffi.cast("void *", tag)),
                           LONG_NS, keep) == 0
    for s in streams:
        s.synchronize()
        s.close()
    assert sorted(done) == sorted((k * 100 + r, i) for k in range(3) for r in range(10) for i in range(6))


# ------------------------------------------------------------------ where tasks run

def test_short_task_runs_at_launch_long_task_stays_asynchronous(acl, rt, stream):
    lib, ffi = rt
    if lib.aclsimGetCheckMode():
        pytest.skip("memcheck never runs work at launch")
    keep, where = [], []
    main = threading.get_ident()
    stream.synchronize()                                      # idle
    assert _launch(lib, ffi, stream, lambda: where.append(threading.get_ident()) or 0, 1000, keep) == 0
    assert where == [main]                                    # done before the launch returned
    # a long one: the launch returns while the task waits for something only this thread does after it
    go = threading.Event()
    assert _launch(lib, ffi, stream, lambda: (go.wait(60), where.append(threading.get_ident()))[0] and 0,
                   LONG_NS, keep) == 0
    assert stream.query() is False
    go.set()                                                  # a synchronous launch would never get here
    stream.synchronize()
    assert len(where) == 2 and stream.query() is True


def test_a_launch_marked_waited_runs_at_launch_whatever_its_cost(acl, rt, stream):
    # aclsimSetLaunchWaited(1): the caller waits right after (canna's per-call fast paths), so a task
    # on an idle stream runs on the calling thread at once instead of waking the stream's worker
    lib, ffi = rt
    if lib.aclsimGetCheckMode():
        pytest.skip("memcheck never runs work at launch")
    keep, where = [], []
    main = threading.get_ident()
    prev = ffi.new("int32_t *", 7)
    stream.synchronize()
    assert lib.aclsimSetLaunchWaited(1, prev) == 0 and prev[0] == 0
    try:
        assert _launch(lib, ffi, stream, lambda: where.append(("long", threading.get_ident())) or 0, LONG_NS,
                       keep) == 0
        assert where == [("long", main)] and stream.query() is True     # ran before the launch returned
        # not waited: a long task goes to the worker; a waited one behind it keeps the stream's order
        assert lib.aclsimSetLaunchWaited(0, prev) == 0 and prev[0] == 1
        go = threading.Event()
        assert _launch(lib, ffi, stream, lambda: (go.wait(60), where.append(("behind", 0)))[0] and 0, LONG_NS,
                       keep) == 0
        assert lib.aclsimSetLaunchWaited(1, ffi.NULL) == 0
        assert _launch(lib, ffi, stream, lambda: where.append(("after", 0)) or 0, 1000, keep) == 0
        assert len(where) == 1 and stream.query() is False
        go.set()
        stream.synchronize()
        assert [w[0] for w in where] == ["long", "behind", "after"]
    finally:
        assert lib.aclsimSetLaunchWaited(0, ffi.NULL) == 0
    # per thread: another thread's setting is its own
    seen = []
    other = ffi.new("int32_t *", 7)
    t = threading.Thread(target=lambda: (lib.aclsimSetLaunchWaited(0, other), seen.append(other[0])))
    lib.aclsimSetLaunchWaited(1, ffi.NULL)
    try:
        t.start()
        t.join(30)
    finally:
        lib.aclsimSetLaunchWaited(0, ffi.NULL)
    assert seen == [0]


def test_a_synchronizing_thread_runs_queued_work(acl, rt, stream):
    lib, ffi = rt
    if lib.aclsimGetCheckMode():
        pytest.skip("memcheck runs work on the stream's own thread only")
    keep, order = [], []
    before = _stats(lib, ffi).tasksAtSync
    for i in range(50):                                       # not run at launch (estimated long)
        assert _launch(lib, ffi, stream, lambda i=i: order.append(i) or 0, 2_000_000, keep) == 0
        assert _launch(lib, ffi, stream, lambda i=i: order.append(-i) or 0, 2_000_000, keep) == 0
        lib.aclrtSynchronizeStream(stream._handle("t"))
    assert order == [v for i in range(50) for v in (i, -i)]  # in order, wherever they ran
    # the worker is woken (or kicked) at launch but takes tens of microseconds to get going, while
    # this thread synchronizes at once: it runs the tasks itself
    assert _stats(lib, ffi).tasksAtSync > before


def test_a_task_longer_than_the_wait_is_left_to_the_worker(acl, rt, stream):
    lib, ffi = rt
    keep, where = [], []
    assert _launch(lib, ffi, stream, lambda: where.append(threading.get_ident()) or 0, LONG_NS, keep) == 0
    stream.synchronize(timeout=30)                            # 10 s estimated > each 200 ms wait slice
    assert where and where[0] != threading.get_ident()


def test_errors_of_tasks_run_at_synchronize_are_sticky_and_reported_once(acl, rt, stream):
    lib, ffi = rt
    keep, ran = [], []
    for rep in range(20):
        assert _launch(lib, ffi, stream, lambda: 507015, 2_000_000, keep) == 0    # fails
        assert _launch(lib, ffi, stream, lambda: ran.append(rep) or 0, 2_000_000, keep) == 0   # skipped
        with pytest.raises(acl.KernelError):
            stream.synchronize()
        stream.synchronize()                                   # reported once
    assert ran == []
    assert _launch(lib, ffi, stream, lambda: ran.append("after") or 0, 2_000_000, keep) == 0
    stream.synchronize()
    assert ran == ["after"]
    assert_usable()


def test_event_record_after_work_completes_in_order(acl, rt, stream):
    lib, ffi = rt
    keep, order = [], []
    for i in range(20):
        assert _launch(lib, ffi, stream, lambda i=i: order.append(i) or 0, 2_000_000, keep) == 0
        e = stream.record()
        e.synchronize()
        assert order[-1] == i and e.query() is True
        stream.synchronize()


# ------------------------------------------------------------------ configuration and teardown

def test_thread_and_spin_settings(py):
    out = py("""
        import numpy as np, threading, acl_rt
        from acl_rt._lib import backend, ffi
        acl_rt.init(); acl_rt.Device(0).set_current()
        lib = backend().lib
        threads = set()
        def block(i, nb, arg):
            threads.add(threading.get_ident()); return 0
        cb = ffi.callback("aclsimBlockFn", block)
        assert lib.aclsimParallelFor(0, 200, cb, ffi.NULL) == 0
        print("THREADS", len(threads), threads == {threading.get_ident()})
        """, env={"CANNA_SIM_THREADS": "1", "CANNA_SIM_SPIN_US": "0"}).stdout.split()
    assert out == ["THREADS", "1", "True"]      # one thread: every block on the caller
    for var, bad in (("CANNA_SIM_THREADS", "0"), ("CANNA_SIM_THREADS", "many"), ("CANNA_SIM_SPIN_US", "-1"),
                     ("CANNA_SIM_SPIN_US", "2000000"), ("CANNA_SIM_KERNEL_TIMEOUT", "abc"),
                     ("CANNA_SIM_KERNEL_TIMEOUT", "10s"), ("CANNA_SIM_KERNEL_TIMEOUT", "-1"),
                     ("CANNA_SIM_KERNEL_TIMEOUT", "nan")):
        out = py("""
            import acl_rt
            try:
                acl_rt.init()
            except acl_rt.AclError as e:
                print(e.code, "%s" in str(e))
            """ % var, env={var: bad}).stdout.split()
        assert out == ["100000", "True"], (var, bad, out)


def test_finalize_stops_spinning_and_sleeping_ai_core_threads(py):
    for spin in ("0", "1000000"):               # never spin / spin up to 1 s before sleeping
        out = py("""
            import os, time, acl_rt
            from acl_rt._lib import backend, ffi
            def nthreads():
                return len(os.listdir("/proc/self/task"))
            base = nthreads()
            cb = ffi.callback("aclsimBlockFn", lambda i, n, a: 0)
            t0 = time.monotonic()
            for cycle in range(5):
                acl_rt.init(); acl_rt.Device(0).set_current()
                s = acl_rt.Device(0).create_stream()
                assert backend().lib.aclsimParallelFor(0, 64, cb, ffi.NULL) == 0   # AI-core threads now idle
                s.synchronize()
                acl_rt.finalize()                # must not wait for a spin to run out
                # the AI-core threads are gone (a thread that has been joined may still be listed in
                # /proc for a moment on a loaded machine: read the count until it settles, 2 s at most)
                deadline = time.monotonic() + 2.0
                while nthreads() != base and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert nthreads() == base, (nthreads(), base)
            print("OK", time.monotonic() - t0 < 4.0)
            """, env={"CANNA_SIM_SPIN_US": spin, "CANNA_SIM_THREADS": "3"}).stdout.split()
        assert out == ["OK", "True"], spin


# ------------------------------------------------------------------ kernels on the synchronizing thread

KERNELS = r'''
#include "canna_kernel.h"
/* mode 0: write; 1: fault in the last block; 2: never end */
CANNA_KERNEL void work(uint32_t mode, GM_ADDR out) {
    if (mode == 1 && GetBlockIdx() == GetBlockNum() - 1) *(volatile int *)16 = 1;
    if (mode == 2) { volatile int i = 0; for (;;) i++; }
    ((uint32_t *)out)[GetBlockIdx()] = GetBlockIdx() + 1;
}
'''


def _sim_only():
    import acl_rt
    acl_rt.init()
    if acl_rt.backend_info().get("backend") != "sim":
        pytest.skip("kernels are compiled for the simulator backend")


def test_kernel_faults_are_contained_wherever_blocks_run():
    _sim_only()
    out = run_python("""
        import numpy as np, acl_rt, kernels
        from acl_rt._lib import backend, ffi
        k = kernels.RawKernel(%r, "work")
        s = acl_rt.Device(0).create_stream()
        o = np.zeros(4, np.uint32)
        k.launch(4, 0, o, stream=s); s.synchronize()       # its run time is known from now on
        assert list(o) == [1, 2, 3, 4]
        codes = set()
        for rep in range(30):                              # inline, by the synchronizing thread or the worker
            k.launch(4, 1, o, stream=s)
            try:
                s.synchronize()
            except acl_rt.KernelError as e:
                codes.add((e.code, "block 3 of 4" in str(e)))
            o[:] = 0
            k.launch(4, 0, o, stream=s); s.synchronize()
            assert list(o) == [1, 2, 3, 4]
        st = ffi.new("aclsimDeviceStats *"); backend().lib.aclsimGetDeviceStats(0, st)
        print("CODES", sorted(codes), "RAN", st.tasksExecuted >= 61)
        # a launch that never ends is stopped by its timeout, on whatever thread it runs
        k.launch(2, 2, o, stream=s, timeout=0.5)
        try:
            s.synchronize()
        except acl_rt.KernelError as e:
            print("TIMEOUT", e.code)
        k.launch(4, 0, o, stream=s); s.synchronize()
        print("DONE")
        """ % KERNELS, timeout=300).stdout
    assert "CODES [(507015, True)] RAN True" in out
    assert "TIMEOUT 507014" in out and "DONE" in out


# ------------------------------------------------------------------ large copies and fills (split into pieces)

@pytest.mark.parametrize("n", [(5 << 20) + 3, 1 << 21])
def test_large_copies_and_fills_are_exact(acl, rt, stream, n):
    import numpy as np
    lib, ffi = rt
    rng = np.random.default_rng(n)
    host = rng.integers(0, 256, n, dtype=np.uint8)
    a, b = acl.alloc(n + 64, stream=stream), acl.alloc(n + 64, stream=stream)
    a.copy_from(host, stream=stream)                          # H2D, queued
    b.copy_from(a, stream=stream)                             # D2D, queued
    out = np.empty(n, np.uint8)
    b.copy_to(out, stream=stream)                             # D2H
    stream.synchronize()
    assert np.array_equal(out, host)
    b.fill(0xA5, stream=stream)
    stream.synchronize()
    assert b.tobytes() == b"\xa5" * (n + 64)
    # synchronous copy and memset on the calling thread
    assert lib.aclrtMemcpy(ffi.cast("void *", b.ptr), n, ffi.cast("void *", a.ptr), n, 3) == 0
    assert lib.aclrtMemset(ffi.cast("void *", b.ptr + n), 64, 7, 64) == 0
    got = np.frombuffer(b.tobytes(), np.uint8)
    assert np.array_equal(got[:n], host) and (got[n:] == 7).all()
    # overlapping ranges of one allocation keep memmove's meaning (copied as if through a buffer)
    shift = (1 << 20) + 5
    assert lib.aclrtMemcpy(ffi.cast("void *", b.ptr + shift), n + 64 - shift, ffi.cast("void *", b.ptr),
                           n - shift, 3) == 0
    got = np.frombuffer(b.tobytes(), np.uint8)
    assert np.array_equal(got[shift:n], host[:n - shift]) and np.array_equal(got[:shift], host[:shift])
    a.close()
    b.close()


def test_the_library_stays_mapped_while_its_threads_run(py):
    # cffi dlclose()s a library whose object is collected (at interpreter exit, say) while the
    # simulator's threads (AI-core threads, stream workers, the kernel watchdog) still run in it: the
    # library pins itself so they never lose their code under them (it was a crash at exit)
    out = py("""
        import gc, os, time, acl_rt
        from acl_rt._lib import backend, ffi
        acl_rt.init(); acl_rt.Device(0).set_current()
        cb = ffi.callback("aclsimBlockFn", lambda i, n, a: 0)
        assert backend().lib.aclsimParallelFor(0, 64, cb, ffi.NULL) == 0   # AI-core threads spin now
        s = acl_rt.Device(0).create_stream(); s.synchronize()
        path = os.path.realpath(acl_rt.backend_info()["library"])
        libs = [o for o in gc.get_objects() if type(o).__module__ == "_cffi_backend" and type(o).__name__ == "Lib"]
        for o in libs:                                                    # every handle this process holds
            ffi.dlclose(o)
        time.sleep(0.3)                                                   # threads spin, wake, time out
        print("MAPPED", len(libs) > 0, any(path in line for line in open("/proc/self/maps")))
        os._exit(0)
        """, env={"CANNA_SIM_SPIN_US": "200000"}).stdout.split()
    assert out == ["MAPPED", "True", "True"]


def test_a_long_job_spreads_while_a_synchronizing_thread_spins(py):
    """A job's helpers are chosen when it starts: a thread spinning in a synchronize at that moment
    (idle, it gives its CPU up within CANNA_SIM_SPIN_US) must not make the job run all its blocks
    on one thread (seen as a matmul taking twice its time, one run in two, on a 2-CPU machine)."""
    out = py("""
        import threading, time, acl_rt
        from acl_rt._lib import backend, ffi
        acl_rt.init(); dev = acl_rt.Device(0); dev.set_current()
        lib = backend().lib
        s = dev.create_stream()
        seen = []
        def block(i, nb, arg):
            time.sleep(0.002)            # the GIL is let go: blocks on two threads overlap
            seen.append(threading.get_ident())
            return 0
        cb = ffi.callback("aclsimBlockFn", block)
        def job():
            assert lib.aclsimParallelFor(0, 16, cb, ffi.NULL) == 0
        spread = []
        for r in range(8):
            seen.clear()
            s.launch_host_func(job)
            s.synchronize()              # spins (CANNA_SIM_SPIN_US) while the job starts
            spread.append(len(set(seen)))
        print("SPREAD", min(spread), max(spread))
        """, env={"CANNA_SIM_THREADS": "2", "CANNA_SIM_SPIN_US": "20000"}).stdout.split()
    assert out[0] == "SPREAD" and int(out[1]) >= 2, out
