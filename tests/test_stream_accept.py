"""One stream acceptor (acl_rt.lowlevel.accept_stream) behind every ``stream=`` of canna: acl_rt
streams, objects with ``__npu_stream__`` (canna's protocol, the mirror of cuda.core's
``__cuda_stream__``: ``(version, handle)``), torch_npu-style ``npu_stream`` attributes, and raw
handles where DLPack passes them."""
from __future__ import annotations

import numpy as np
import pytest

import acl_rt
import canna_dl
import kernels
from acl_rt.lowlevel import accept_stream


class Proto:
    """A foreign stream object speaking canna's protocol."""

    def __init__(self, s, bare=False):
        self.s, self.bare = s, bare

    def __npu_stream__(self):
        return self.s.handle if self.bare else (0, self.s.handle)


class TorchNpuLike:
    """torch_npu's ``torch.npu.Stream`` exposes the raw handle as ``npu_stream``."""

    def __init__(self, s):
        self.s = s

    @property
    def npu_stream(self):
        return self.s.handle


@pytest.fixture
def s(acl):
    st = acl_rt.Device(0).create_stream()
    yield st
    st.close()


@pytest.mark.parametrize("wrap", [lambda s: s, Proto, lambda s: Proto(s, bare=True), TorchNpuLike])
def test_accepted_forms_give_the_same_stream(s, wrap):
    got = accept_stream(wrap(s), None, "test")
    assert isinstance(got, acl_rt.Stream) and got == s and got.handle == s.handle


def test_none_is_the_current_stream(s):
    assert accept_stream(None) == acl_rt.current_stream()
    with s:
        assert accept_stream(None) == s


def test_raw_handles_only_where_asked(s):
    assert accept_stream(s.handle, None, "t", handles=True) == s
    assert accept_stream(0, None, "t", handles=True) == acl_rt.Device(0).default_stream
    with pytest.raises(TypeError, match="stream must be an acl_rt.Stream or None, not int"):
        accept_stream(s.handle, None, "t")


@pytest.mark.parametrize("bad", [True, -1, "s", 1.5, object()])
def test_bad_streams_are_type_errors(acl, bad):
    with pytest.raises(TypeError, match="t: stream must be"):
        accept_stream(bad, None, "t", handles=True)


@pytest.mark.parametrize("ret", [(0, -5), (0, "x"), None, (0, True)])
def test_bad_protocol_results_are_type_errors(acl, ret):
    class P:
        def __npu_stream__(self):
            return ret
    with pytest.raises(TypeError, match=r"P.__npu_stream__\(\) must give an aclrtStream handle"):
        accept_stream(P(), None, "t")


def test_an_acl_rt_stream_of_another_device_is_refused_where_a_device_is_required(py):
    py("""
        import acl_rt
        from acl_rt.lowlevel import accept_stream
        s1 = acl_rt.Device(1).create_stream()
        try:
            accept_stream(s1, acl_rt.Device(0), "t")
        except acl_rt.InvalidArgumentError as e:
            assert e.code == 107003 and "on device 1" in str(e), e
        else:
            raise AssertionError("accepted a stream of device 1 for device 0")
        class P:
            def __npu_stream__(self): return (0, s1.handle)
        assert accept_stream(P(), acl_rt.Device(1), "t") == s1   # a foreign handle is on the given device
        """, env={"CANNA_SIM_DEVICES": "2"})


def test_every_stream_argument_takes_the_protocol(s):
    """acl_rt.alloc, DeviceBuffer.copy_from/close, canna_dl.empty, DeviceArray.record_stream,
    the built-in ops and RawKernel.launch all go through the acceptor."""
    p = Proto(s)
    buf = acl_rt.alloc(16, stream=p)
    assert buf.stream == s
    buf.copy_from(b"\x01" * 16, stream=p)
    buf.close(stream=p)
    a = canna_dl.empty(4, stream=TorchNpuLike(s))
    a.fill(1)
    a.record_stream(p)
    assert a.stream == s
    x = canna_dl.asarray(np.arange(4, dtype=np.float32))
    y = kernels.add(x, x, stream=p)
    assert y.stream == s
    s.synchronize()
    assert canna_dl.to_numpy(y).tolist() == [0, 2, 4, 6]
    k = kernels.RawKernel('#include "canna_kernel.h"\nCANNA_KERNEL void fill7(GM_ADDR o) { ((int*)o)[0] = 7; }',
                          "fill7")
    out = np.zeros(1, np.int32)
    k.launch(1, out, stream=TorchNpuLike(s))
    s.synchronize()
    assert out[0] == 7


def test_dlpack_consumer_stream_as_protocol_or_handle(py):
    """In the discrete model a device export orders the consumer stream after the producer's
    pending work, whatever form the consumer stream takes."""
    py("""
        import acl_rt, canna_dl
        d = acl_rt.Device(0); s = d.create_stream()
        class P:
            def __npu_stream__(self): return (0, s.handle)
        for consumer in (s, P(), s.handle, 0, None):
            a = canna_dl.zeros(8)
            cap = a.__dlpack__(stream=consumer, max_version=(1, 0))
            b = canna_dl.from_dlpack(cap)
            assert b.ptr == a.ptr
        try:
            canna_dl.zeros(8).__dlpack__(stream="x")
        except TypeError as e:
            assert "stream must be" in str(e), e
        else:
            raise AssertionError("no TypeError")
        """, env={"CANNA_SIM_MEMORY": "discrete"})
