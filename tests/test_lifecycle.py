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
