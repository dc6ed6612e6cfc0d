"""Runtime lifecycle faults (issue 12): faults and host-function exceptions of streams destroyed
before anyone synchronized them, exit with a never-ending kernel, init/finalize cycles with live
buffers, and what a child forked after a light query can still do."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import run_python

FAULT_SRC = r"""
#include "canna_kernel.h"
CANNA_KERNEL void maybe_fault(GM_ADDR out, uint32_t bad) {
    if (bad) *(volatile int *)(uintptr_t)16 = 1;
    ((float *)out)[0] = 1.0f;
}
"""


def test_fault_on_a_stream_destroyed_unsynchronized_reaches_device_synchronize(acl):
    """The faulting launch runs inline (its previous launch was short), the stream is destroyed
    before anyone synchronized it: the next device synchronize reports the fault, once."""
    import canna_dl as cd
    import kernels
    k = kernels.RawKernel(FAULT_SRC, "maybe_fault")
    dev = acl.Device(0)
    out = cd.zeros(4)
    s = dev.create_stream()
    k.launch(1, out, np.uint32(0), stream=s)
    s.synchronize()                                   # a short run: the next launch may run inline
    k.launch(1, out, np.uint32(1), stream=s)
    s.close()
    with pytest.raises(acl.KernelError, match=r"maybe_fault.*|destroyed before") as ei:
        dev.synchronize()
    assert "maybe_fault" in str(ei.value) and "destroyed before it was synchronized" in str(ei.value)
    dev.synchronize()                                 # reported once: the device is usable again
    assert cd.asarray(np.arange(3.0)).numpy().tolist() == [0, 1, 2]


def test_faults_of_several_destroyed_streams_are_counted(acl):
    from acl_rt._lib import backend
    dev = acl.Device(0)
    lib = backend().lib
    for _ in range(3):
        s = dev.create_stream()
        acl.init()
        assert lib.aclsimLaunchFault(s._handle("test"), 507015, b"injected fault") == 0
        s.close()
    with pytest.raises(acl.AclError, match="and 2 more on destroyed streams"):
        dev.synchronize()
    dev.synchronize()


SPIN_SCRIPT = """
import kernels, canna_dl as cd
SPIN = r'''
#include "canna_kernel.h"
CANNA_KERNEL void spin_forever(GM_ADDR flag) {
    while (((volatile int *)flag)[0] == 0) { }
}
'''
kernels.RawKernel(SPIN, "spin_forever").launch(1, cd.zeros(4, dtype="int32"))   # no timeout
print("launched", flush=True)
"""


def test_exit_with_a_never_ending_kernel_waits_a_bounded_time_and_names_it():
    proc = run_python(SPIN_SCRIPT, env={"CANNA_EXIT_TIMEOUT": "1.5", "CANNA_SIM_KERNEL_TIMEOUT": None},
                      timeout=90, check=False)
    assert proc.stdout.strip() == "launched", proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exiting without finalizing the runtime" in proc.stderr, proc.stderr[-2000:]
    assert "kernel 'spin_forever' is running" in proc.stderr and "CANNA_EXIT_TIMEOUT" in proc.stderr


#: the child takes Ctrl-C as a terminal's foreground process does, whatever this process's signal
#: state it inherits (a process started with SIGINT ignored or blocked keeps it so)
_SIGINT_AS_A_TERMINAL = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                         "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n")


def test_ctrl_c_stops_the_exit_wait():
    import os
    import signal
    import subprocess
    import sys
    from conftest import ROOT
    env = dict(os.environ, CANNA_EXIT_TIMEOUT="600")
    env.pop("CANNA_SIM_KERNEL_TIMEOUT", None)
    p = subprocess.Popen([sys.executable, "-c", _SIGINT_AS_A_TERMINAL + SPIN_SCRIPT], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import threading
    guard = threading.Timer(120, p.kill)       # the wait never announced: do not hang the suite
    guard.start()
    try:
        lines = []
        for line in p.stderr:                  # the wait announces itself after a second
            lines.append(line)
            if "Ctrl-C stops waiting" in line:
                break
        assert any("spin_forever" in ln for ln in lines), "".join(lines)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)   # a hang here is the bug
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Ctrl-C stopped the wait" in err and "spin_forever" in err, err[-2000:]


def test_the_exit_wait_says_when_ctrl_c_cannot_stop_it():
    """A process whose SIGINT is ignored (inherited) is told so, not "Ctrl-C stops waiting"."""
    proc = run_python("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + SPIN_SCRIPT,
                      env={"CANNA_EXIT_TIMEOUT": "1.5", "CANNA_SIM_KERNEL_TIMEOUT": None}, timeout=120)
    assert "SIGINT is ignored or blocked" in proc.stderr and "Ctrl-C stops waiting" not in proc.stderr, proc.stderr


def test_exit_timeout_setting_is_validated(py):
    proc = py("""
        import warnings, acl_rt._runtime as rt
        import os
        os.environ["CANNA_EXIT_TIMEOUT"] = "0.25"
        assert rt.exit_timeout() == 0.25
        for bad in ("soon", "-1", "nan", "inf"):
            os.environ["CANNA_EXIT_TIMEOUT"] = bad
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                assert rt.exit_timeout() == rt.EXIT_TIMEOUT_DEFAULT
            assert "CANNA_EXIT_TIMEOUT" in str(w[0].message)
        print("ok")
    """)
    assert proc.stdout.strip() == "ok"


def _report_pending_host_errors(acl):
    """Start from nothing pending (earlier tests may have left host-function exceptions)."""
    from acl_rt import _stream
    for _ in range(100):
        try:
            acl.Device(0).synchronize()
            break
        except Exception:
            pass
    with _stream._host_errors_lock:
        _stream._host_errors.clear()
        _stream._kept = 0


def test_host_func_exceptions_of_closed_streams_are_bounded(acl):
    """Host functions raising on streams closed without their own synchronize: what is kept until
    a device synchronize is bounded (the rest is counted) and their frames are released."""
    import gc
    import threading
    import time
    import weakref
    from acl_rt import _stream
    _report_pending_host_errors(acl)
    dev = acl.Device(0)
    n = 300
    ran = []
    lock = threading.Lock()
    refs = []

    class Payload:                           # a large local of the raising frame, in real code
        pass

    def fail(i):
        payload = Payload()
        refs.append(weakref.ref(payload))
        with lock:
            ran.append(i)
        raise ValueError(f"host function {i} failed")

    for i in range(n):
        s = dev.create_stream()
        s.launch_host_func(fail, i)
        s.close()
    deadline = time.monotonic() + 120
    while len(ran) < n and time.monotonic() < deadline:   # closed streams still run their work
        time.sleep(0.01)
    assert len(ran) == n
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of {n} failing frames are still alive"
    kept = sum(len(p.errors) for p in _stream._host_errors.values())
    assert kept <= _stream.MAX_KEPT_ERRORS
    with pytest.raises(ValueError, match="host function 0 failed") as ei:
        dev.synchronize()
    notes = ei.value.__notes__
    assert len(notes) <= _stream.MAX_KEPT_ERRORS
    assert f"and {n - _stream.MAX_KEPT_ERRORS:,} more exceptions" in notes[-1]
    dev.synchronize()                         # reported once
    assert not _stream._host_errors


def test_a_live_streams_dropped_host_func_exceptions_still_fail_its_synchronize(acl):
    from acl_rt import _stream
    _report_pending_host_errors(acl)
    dev = acl.Device(0)
    filler = [dev.create_stream() for _ in range(2)]
    for s in filler:
        for _ in range(_stream.MAX_KEPT_ERRORS):
            s.launch_host_func(lambda: 1 / 0)
        s._sync_raw()
    s = dev.create_stream()
    s.launch_host_func(lambda: 1 / 0)
    with pytest.raises(RuntimeError, match="1 host function raised; their exceptions were not kept"):
        s.synchronize()
    s.synchronize()
    with pytest.raises(ZeroDivisionError) as ei:
        dev.synchronize()
    assert f"and {_stream.MAX_KEPT_ERRORS:,} more exceptions" in ei.value.__notes__[-1]
    for x in filler + [s]:
        x.close()


CYCLES_SCRIPT = """
import acl_rt, numpy as np
from acl_rt._lib import backend, ffi

def allocations():
    st = ffi.new("aclsimDeviceStats *")
    assert backend().lib.aclsimGetDeviceStats(0, st) == 0
    return int(st.numAllocs)

kept = []
for i in range(12):
    acl_rt.init()
    b = acl_rt.alloc(1 << 20)
    b.copy_from(np.full(1 << 18, i, np.float32))
    v = acl_rt.alloc(4096) if i == 0 else None   # one buffer lives on through every cycle
    if v is not None:
        v.copy_from(np.arange(1024, dtype=np.float32))
        kept.append((v, v.ptr))
    acl_rt.finalize()
    del b                                         # a buffer that outlived its session
acl_rt.init()
x = acl_rt.alloc(1 << 20)                        # the next session gives the old segments back
n = allocations()
assert n <= 3, f"{n} device allocations after 12 init/finalize cycles"
import ctypes                                     # the buffer still alive kept its memory and data
assert np.frombuffer((ctypes.c_float * 1024).from_address(kept[0][1]), np.float32).tolist() == list(range(1024))
acl_rt.finalize()
print("ok", n)
"""


@pytest.mark.parametrize("caching", ["1", "0"])
def test_init_finalize_cycles_with_live_buffers_do_not_leak_segments(caching):
    proc = run_python(CYCLES_SCRIPT, env={"CANNA_NO_MEMORY_CACHING": "1" if caching == "0" else None,
                                          "CANNA_SIM_CHECK": None})
    assert proc.stdout.startswith("ok"), proc.stdout + proc.stderr[-2000:]


def test_light_queries_do_not_initialize_and_a_child_forked_after_them_works(py):
    proc = py("""
        import os, acl_rt
        from acl_rt import monitor
        assert acl_rt.device_count() == 1
        info = acl_rt.backend_info()
        assert info["soc_name"] == "Ascend910B1" and info["run_mode"] == "device" and info["device_count"] == 1
        assert monitor.device_count() == 1 and monitor.devices()[0].error is None
        assert not acl_rt.is_initialized()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                import numpy as np, canna_dl as cd
                ok = cd.asarray(np.arange(4.0)).numpy().tolist() == [0, 1, 2, 3] and monitor.device_count() == 1
                os.write(w, b"child-ok" if ok else b"child-wrong")
            except BaseException as e:
                os.write(w, repr(e).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 4096).decode())
    """)
    assert proc.stdout.strip() == "child-ok", proc.stdout + proc.stderr[-2000:]


def test_every_error_in_a_child_forked_after_init_names_the_fork(py):
    proc = py("""
        import os, acl_rt
        from acl_rt import monitor
        acl_rt.alloc(16)                    # the parent initializes the runtime
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            out = []
            for name, f in [("monitor.device_count", monitor.device_count), ("monitor.devices", monitor.devices),
                            ("device_count", acl_rt.device_count), ("backend_info", acl_rt.backend_info),
                            ("alloc", lambda: acl_rt.alloc(16))]:
                try:
                    f()
                    out.append(f"{name}: no error")
                except acl_rt.ForkedProcessError as e:
                    out.append(f"{name}: ok" if "fork" in str(e) and "spawn" in str(e) else f"{name}: {e}")
                except Exception as e:
                    out.append(f"{name}: {type(e).__name__}: {e}")
            os.write(w, "\\n".join(out).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 8192).decode())
    """)
    lines = proc.stdout.strip().splitlines()
    assert lines and all(ln.endswith(": ok") for ln in lines), proc.stdout
