"""The C fast paths' current stream (kernels/_native/fast.c ``fast_stream_of``): a call made with
its API name as the stream runs on the calling thread's current stream, which the C side
remembers per thread while acl_rt's current-stream epoch (``acl_rt.lowlevel.current_epoch_capsule``,
acl_rt/_native/current.c) stands still. Every change of what ``acl_rt.current_stream()`` answers
from moves the epoch, so a remembered stream is never used past it: ``with stream:`` blocks, a
stream closed while current, another thread's blocks, finalize / init.

Which stream an op ran on is seen by stream order: a stream kept busy by a simulator delay task
is still busy right after an op that ran elsewhere (the op waits for its own stream only), and
done right after an op that ran on it."""
from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import acl_rt  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
import kernels  # noqa: E402
from acl_rt import _native as rt_native  # noqa: E402
from acl_rt import lowlevel  # noqa: E402
from canna_dl.torch import _aten  # noqa: E402
from kernels import _native  # noqa: E402

F = torch.nn.functional
pytestmark = pytest.mark.usefixtures("acl")
DELAY_US = 400_000   # long beside one tiny op; the stream of an op that ran elsewhere is still busy


def busy(stream, us=DELAY_US):
    assert lowlevel.backend().lib.aclsimLaunchDelay(stream._handle("test"), us, 1, 1) == 0


def ran_on(stream, call):
    """Whether ``call()`` ran on ``stream``: it is kept busy first; an op on it waits for that."""
    busy(stream)
    call()
    done = stream.query()
    stream.synchronize()
    return done


def warm(call, n=3):
    for _ in range(n):
        call()


def relu_call(x):
    want = torch.relu(x)

    def call():
        got = kernels.relu(x)
        assert torch.equal(got, want)
    return call


def test_the_epoch_moves_with_what_current_stream_answers_from():
    s = acl_rt.Device(0).create_stream()
    try:
        e0 = rt_native.current_epoch()
        with s:
            e1 = rt_native.current_epoch()
        e2 = rt_native.current_epoch()
        assert e0 < e1 < e2
        acl_rt.Device(0).set_current()
        assert rt_native.current_epoch() > e2
        e3 = rt_native.current_epoch()
        s.close()
        assert rt_native.current_epoch() > e3
    finally:
        s.close()
    assert lowlevel.current_epoch_capsule is rt_native.current_epoch_capsule


def test_kernel_fast_path_follows_with_stream_blocks():
    x = torch.randn(64)
    call = relu_call(x)
    warm(call)
    s = acl_rt.Device(0).create_stream()
    try:
        h0 = _native.stats()["launches"]
        assert not ran_on(s, call)            # the default stream (remembered)
        with s:
            assert ran_on(s, call)            # the block's stream at once
            assert ran_on(s, call)
        assert not ran_on(s, call)            # back on the default stream
        assert _native.stats()["launches"] - h0 >= 4, "the calls did not take the C fast path"
    finally:
        s.close()


def test_a_stream_closed_while_current_is_never_used_again():
    x = torch.randn(16)
    call = relu_call(x)
    s = acl_rt.Device(0).create_stream()
    with s:
        warm(call)                            # remembered: s
        s.close()                             # never current again: the default stream is
        warm(call)
        other = acl_rt.Device(0).create_stream()
        try:
            assert not ran_on(other, call)
        finally:
            other.close()
    warm(call)


def test_another_threads_block_is_not_this_threads_stream():
    x = torch.randn(16)
    call = relu_call(x)
    warm(call)
    s = acl_rt.Device(0).create_stream()
    inside, leave, errors = threading.Event(), threading.Event(), []

    def other():
        try:
            with s:
                warm(call)                    # this thread remembers s
                inside.set()
                leave.wait(30)
        except Exception as e:                # pragma: no cover - reported below
            errors.append(e)
            inside.set()
    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(30)
        assert not ran_on(s, call)            # the main thread stays on its default stream
    finally:
        leave.set()
        t.join(30)
        s.close()
    assert not errors, errors


def test_finalize_and_init_resolve_the_stream_again(acl):
    x = torch.randn(16)
    call = relu_call(x)
    warm(call)
    acl_rt.finalize()
    acl_rt.init()
    acl_rt.Device(0).set_current()
    warm(call)                                # a stream of the new session, no stale handle
    s = acl_rt.Device(0).create_stream()
    try:
        with s:
            assert ran_on(s, call)
    finally:
        s.close()


# ------------------------------------------------------------------------------------------------
# offload(level="aten"): the C route (canna_dl/torch/_aten.cc direct_c) on the dispatcher's tensors

def c_hits():
    return _aten.stats()["direct_c"]


def aten(call, n=4):
    """``call()`` n times in one aten block: (the last result, the C route's hits)."""
    h0 = c_hits()
    with ct.offload(level="aten"):
        out = [call() for _ in range(n)]
    return out[-1], c_hits() - h0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
def test_aten_c_route_gives_pytorchs_values(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(5, 7, generator=g) * 4).to(dtype)
    y = (torch.randn(5, 7, generator=g) * 4).to(dtype)
    cases = [(lambda: torch.relu(x), torch.relu(x)),
             (lambda: torch.add(x, y), torch.add(x, y)),
             (lambda: x * y, x * y),
             (lambda: x + 2, x + 2),                       # a wrapped number: PyTorch's weak scalar
             (lambda: torch.sub(x, y, alpha=2), torch.sub(x, y, alpha=2))]
    if dtype.is_floating_point:
        cases += [(lambda: F.gelu(x), F.gelu(x.double()).to(dtype)),
                  (lambda: F.gelu(x, approximate="tanh"), F.gelu(x.double(), approximate="tanh").to(dtype)),
                  (lambda: x.t() * 1.5, x.t() * 1.5)]    # a transposed operand
    served = 0
    for call, want in cases:
        got, hits = aten(call)
        served += hits
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = {torch.float16: 2e-3, torch.float32: 2e-6}.get(dtype, 1e-12)
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=tol, atol=tol)
    assert served >= len(cases), "the repeated calls did not take the C route"


def test_aten_c_route_in_place_writes_the_argument_itself():
    x = torch.randn(32)
    want = torch.relu(x)
    ptr = x.data_ptr()
    h0 = c_hits()
    with ct.offload(level="aten"):
        for _ in range(4):
            r = x.relu_()
            assert r is x or r.data_ptr() == ptr
    assert x.data_ptr() == ptr and torch.equal(x, want)
    assert c_hits() - h0 >= 2


def test_aten_c_route_leaves_lazy_views_meta_and_grad_to_the_right_paths():
    x = torch.randn(8)
    with ct.offload(level="aten"):
        for _ in range(3):
            torch.relu(x)                                 # the signature is known now
        nv = torch._neg_view(x)                           # the same sizes, strides and dtype
        assert torch.equal(torch.relu(nv), torch.relu(-x))
        m = torch.empty(8, device="meta")                 # the same signature but for the device
        r = torch.relu(m)
        assert r.device.type == "meta" and r.shape == (8,)
        w = torch.randn(8, requires_grad=True)
        out = torch.relu(w)
        out.sum().backward()
    assert torch.equal(w.grad, (w.detach() > 0).to(w.dtype))


def test_aten_c_route_follows_with_stream_blocks():
    x = torch.randn(64)
    s = acl_rt.Device(0).create_stream()
    try:
        with ct.offload(level="aten"):
            warm(lambda: torch.relu(x))
            h0 = c_hits()
            assert not ran_on(s, lambda: torch.relu(x))
            with s:
                assert ran_on(s, lambda: torch.relu(x))
            assert not ran_on(s, lambda: torch.relu(x))
            assert c_hits() - h0 == 3
    finally:
        s.close()
