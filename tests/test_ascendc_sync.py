"""Ascend C's barriers across the blocks of a launch in the simulator (issue 16): SyncAll (and its
workspace form) and GroupBarrier, with the documented semantics (Ascend C API reference on
hiascend.com: "SyncAll", "GroupBarrier"). Every block of a launch reaches the barrier although the
simulator runs blocks on fewer threads; a wait that can never end is a KernelError naming the
kernel and the block, never a hang.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import acl_rt

from ascendc_common import compile_module, source_line, sync
from conftest import run_python

SYNC = r'''
#include "kernel_operator.h"
using namespace AscendC;

// two phases: each block sums its chunk into a partial (workspace, 8 floats apart), SyncAll, block 0
// sums the partials; `rounds` repeats it (the barrier is reusable) with the output scaled per round
extern "C" __global__ __aicore__ void two_phase(GM_ADDR x, GM_ADDR ws, GM_ADDR out, uint32_t chunk, uint32_t rounds)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> in, work, sum;
    pipe.InitBuffer(in, chunk * sizeof(float));
    pipe.InitBuffer(work, chunk * sizeof(float));
    pipe.InitBuffer(sum, 32);
    GlobalTensor<float> xGm, wsGm, outGm;
    xGm.SetGlobalBuffer((__gm__ float *)x + GetBlockIdx() * chunk, chunk);
    wsGm.SetGlobalBuffer((__gm__ float *)ws, GetBlockNum() * 8);
    outGm.SetGlobalBuffer((__gm__ float *)out, rounds);
    LocalTensor<float> a = in.Get<float>(), w = work.Get<float>(), s = sum.Get<float>();
    DataCopy(a, xGm, chunk);
    for (uint32_t r = 0; r < rounds; r++) {
        ReduceSum(s, a, w, chunk);
        wsGm.SetValue(GetBlockIdx() * 8, s.GetValue(0) * (float)(r + 1));
        SyncAll();                                              // every partial is written
        if (GetBlockIdx() == 0) {
            float t = 0;
            for (uint32_t b = 0; b < (uint32_t)GetBlockNum(); b++)
                t += wsGm.GetValue(b * 8);
            outGm.SetValue(r, t);
        }
        SyncAll();                                              // block 0 has read them
    }
}

// block `bad` leaves early (mode 1) or faults (mode 2) or spins (mode 3) while the others wait
extern "C" __global__ __aicore__ void uneven(GM_ADDR x, uint32_t bad, uint32_t mode)
{
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, 64);
    if (GetBlockIdx() == bad) {
        if (mode == 1) return;
        if (mode == 2) { TPipe pipe; TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 1, 256); q.DeQue<float>(); }   // L:deque
        if (mode == 3) { volatile int spin = 1; while (spin) {} }
    }
    SyncAll();                                                  // L:sync
}

// GroupBarrier: blocks 0..arrive-1 each write their value and Arrive; the next `wait` blocks Wait and
// then copy the sum of those values to out[their wait index]
extern "C" __global__ __aicore__ void group(GM_ADDR bar, GM_ADDR vals, GM_ADDR out, uint32_t arrive, uint32_t wait,
                                            uint32_t skip_arrive)
{
    GroupBarrier<PipeMode::MTE3_MODE> b(bar, arrive, wait);     // L:gbar
    GlobalTensor<float> v, o;
    v.SetGlobalBuffer((__gm__ float *)vals, arrive);
    o.SetGlobalBuffer((__gm__ float *)out, wait);
    uint32_t id = GetBlockIdx();
    if (id < arrive) {
        v.SetValue(id, (float)(id + 1) * 1.5f);
        if (!skip_arrive)
            b.Arrive(id);
    } else if (id < arrive + wait) {
        b.Wait(id - arrive);                                    // L:gwait
        float t = 0;
        for (uint32_t i = 0; i < arrive; i++)
            t += v.GetValue(i);
        o.SetValue(id - arrive, t);
    }
}

extern "C" __global__ __aicore__ void group_bad_index(GM_ADDR bar)
{
    GroupBarrier<PipeMode::MTE3_MODE> b(bar, 1, 1);
    if (GetBlockIdx() == 0) b.Arrive(1);                         // L:garrive
}
'''


def _line(tag: str) -> int:
    return source_line(SYNC, tag)


@pytest.fixture(scope="module")
def mod():
    return compile_module(SYNC)


def _aligned(n_bytes: int, align: int = 512) -> np.ndarray:
    """A zeroed uint8 array whose data starts on an `align`-byte boundary."""
    raw = np.zeros(n_bytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n_bytes]


@pytest.mark.parametrize("blocks, rounds", [(8, 1), (24, 3), (48, 2)])
def test_two_phase_reduction(mod, blocks, rounds):
    chunk = 256
    x = np.random.uniform(-1, 1, blocks * chunk).astype(np.float32)
    ws = np.zeros(blocks * 8, np.float32)
    out = np.zeros(rounds, np.float32)
    mod.get_function("two_phase").launch(blocks, x, ws, out, chunk, rounds)
    sync()
    want = x.astype(np.float64).sum() * np.arange(1, rounds + 1)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-5, atol=1e-4)


def test_two_phase_reduction_on_one_thread():
    # CANNA_SIM_THREADS=1: blocks would run one after the other; the waiting ones are replaced
    p = run_python(r'''
import numpy as np, acl_rt, kernels, sys
sys.path.insert(0, "tests")
from test_ascendc_sync import SYNC
acl_rt.init(); acl_rt.Device(0).set_current()
k = kernels.RawModule(SYNC).get_function("two_phase")
x = np.random.uniform(-1, 1, 16 * 64).astype(np.float32)
out = np.zeros(2, np.float32)
k.launch(16, x, np.zeros(16 * 8, np.float32), out, 64, 2)
acl_rt.current_stream().synchronize()
want = x.astype(np.float64).sum() * np.array([1.0, 2.0])
assert np.allclose(out, want, rtol=1e-5, atol=1e-4), (out, want)
print("ok")
''', env={"CANNA_SIM_THREADS": "1"})
    assert p.stdout.strip() == "ok"


def test_more_blocks_than_cores_cannot_sync(mod):
    # Ascend910B1 (the default profile) has 48 vector cores: 49 blocks cannot all be resident
    x = np.zeros(64, np.float32)
    mod.get_function("uneven").launch(49, x, 99, 0)
    with pytest.raises(acl_rt.KernelError, match=rf"kernel 'uneven' block \d+ of 49: kernel.cpp:{_line('sync')}: "
                                                 r"SyncAll: block \d+ waits for 49 blocks, which can never arrive: 49 "
                                                 r"blocks cannot all be resident at once: the Ascend910B1 has 48 "
                                                 r"vector cores"):
        sync()


def test_a_block_that_returns_early_is_an_error_not_a_hang(mod):
    x = np.zeros(64, np.float32)
    mod.get_function("uneven").launch(4, x, 2, 1)
    with pytest.raises(acl_rt.KernelError) as ei:
        sync()
    msg = str(ei.value)
    assert re.search(rf"kernel 'uneven' block [013] of 4: kernel.cpp:{_line('sync')}: SyncAll: block [013] waits for "
                     r"4 blocks, which can never arrive: every other block of the 4 has ended \(1\) or waits too "
                     r"\(2\)", msg), msg
    mod.get_function("uneven").launch(4, x, 99, 0)   # the stream stays usable
    sync()


def test_a_fault_while_others_wait_is_the_faulting_blocks(mod):
    x = np.zeros(64, np.float32)
    mod.get_function("uneven").launch(6, x, 3, 2)
    with pytest.raises(acl_rt.KernelError, match=rf"kernel 'uneven' block 3 of 6: kernel.cpp:{_line('deque')}: "
                                                 r"DeQue: nothing is enqueued"):
        sync()


def test_a_spinning_block_while_others_wait_times_out(mod):
    x = np.zeros(64, np.float32)
    mod.get_function("uneven").launch(4, x, 1, 3, timeout=0.5)
    with pytest.raises(acl_rt.KernelError, match=r"kernel 'uneven' exceeded its timeout"):
        sync()


@pytest.mark.parametrize("arrive, wait", [(2, 6), (3, 1), (1, 5)])
def test_group_barrier(mod, arrive, wait):
    bar = _aligned(wait * 512)
    vals = np.zeros(arrive, np.float32)
    out = np.zeros(wait, np.float32)
    mod.get_function("group").launch(arrive + wait, bar, vals, out, arrive, wait, 0)
    sync()
    want = np.full(wait, sum((i + 1) * 1.5 for i in range(arrive)), np.float64)
    np.testing.assert_array_equal(out.astype(np.float64), want)


def test_group_barrier_without_its_arrivals_is_an_error(mod):
    bar = _aligned(2 * 512)
    mod.get_function("group").launch(4, bar, np.zeros(2, np.float32), np.zeros(2, np.float32), 2, 2, 1)
    with pytest.raises(acl_rt.KernelError, match=rf"kernel 'group' block [23] of 4: kernel.cpp:{_line('gwait')}: "
                                                 r"GroupBarrier::Wait: block [23] waits for 2 Arrive calls \(0 came\), "
                                                 r"which can never come: every other block"):
        sync()


@pytest.mark.parametrize("case", ["misaligned", "sizes", "index"])
def test_group_barrier_rules(mod, case):
    bar = _aligned(4 * 512)
    if case == "misaligned":
        mod.get_function("group").launch(2, bar[32:], np.zeros(1, np.float32), np.zeros(1, np.float32), 1, 1, 0)
        message = rf"kernel.cpp:{_line('gbar')}: GroupBarrier: groupWorkspace 0x[0-9a-f]+ must be a 512-byte aligned"
    elif case == "sizes":
        mod.get_function("group").launch(3, bar, np.zeros(2, np.float32), np.zeros(2, np.float32), 2, 2, 0)
        message = (rf"kernel.cpp:{_line('gbar')}: GroupBarrier: arriveSize 2 and waitSize 2 must be > 0 and together "
                   r"at most the launch's 3 blocks")
    else:
        mod.get_function("group_bad_index").launch(2, bar)
        message = (rf"kernel.cpp:{_line('garrive')}: GroupBarrier::Arrive: index 1 is out of range of the 1 blocks "
                   r"of the Arrive group")
    with pytest.raises(acl_rt.KernelError, match=r"block \d of \d: " + message):
        sync()
