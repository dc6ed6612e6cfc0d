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


def test_ctrl_c_stops_the_exit_wait():
    import os
    import signal
    import subprocess
    import sys
    from conftest import ROOT
    env = dict(os.environ, CANNA_EXIT_TIMEOUT="600")
    env.pop("CANNA_SIM_KERNEL_TIMEOUT", None)
    p = subprocess.Popen([sys.executable, "-c", SPIN_SCRIPT], cwd=ROOT, env=env, text=True,
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
