"""Bad input: each case raises a clear exception naming the problem, and the runtime still works
afterwards (every test ends with a valid allocation and copy). Nothing here may crash the process.

The first table goes through the Python API (validated before reaching C); the second calls the
simulator's C ABI directly with what a careless C caller would pass (NULL out-pointers, foreign,
freed and destroyed handles), which must return AscendCL's error codes, never crash.
"""
from __future__ import annotations

import re

import pytest

import acl_rt
from conftest import assert_usable


def _freed_buffer():
    b = acl_rt.alloc(64)
    b.close()
    return b


def _destroyed_stream():
    s = acl_rt.Device(0).create_stream()
    s.close()
    return s


def _destroyed_event():
    e = acl_rt.Device(0).create_event()
    e.close()
    return e


def _timing_pair(timing_start=True, record=True):
    d = acl_rt.Device(0)
    a, b = d.create_event(timing=timing_start), d.create_event()
    if record:
        a.record()
    b.record()
    b.synchronize()
    return a, b


class _NotABuffer:
    pass


CASES = [
    # (id, call, exception type, message pattern)
    ("device-id-str", lambda: acl_rt.Device("0"), TypeError, r"device id must be an int, not str"),
    ("device-id-bool", lambda: acl_rt.Device(True), TypeError, r"device id must be an int, not bool"),
    ("device-id-out-of-range", lambda: acl_rt.Device(5), acl_rt.InvalidArgumentError, r"device id 5 is out of range.*1 device"),
    ("device-id-negative", lambda: acl_rt.Device(-1), acl_rt.InvalidArgumentError, r"device id -1 is out of range"),
    ("alloc-zero", lambda: acl_rt.alloc(0), acl_rt.InvalidArgumentError, r"size must be > 0 bytes, got 0"),
    ("alloc-negative", lambda: acl_rt.alloc(-5), acl_rt.InvalidArgumentError, r"size must be > 0 bytes, got -5"),
    ("alloc-float", lambda: acl_rt.alloc(1.5), TypeError, r"size must be an int number of bytes, not float"),
    ("alloc-absurd", lambda: acl_rt.alloc(2**70), acl_rt.InvalidArgumentError, r"larger than any device"),
    ("alloc-past-capacity", lambda: acl_rt.alloc(1 << 40), acl_rt.OutOfMemoryError, r"ACL_ERROR_RT_MEMORY_ALLOCATION \(207001\)"),
    ("alloc-bad-stream", lambda: acl_rt.alloc(8, stream="s"), TypeError, r"stream must be an acl_rt.Stream or None, not str"),
    ("alloc-host-zero", lambda: acl_rt.alloc_host(0), acl_rt.InvalidArgumentError, r"size must be > 0"),
    ("copy-from-too-large", lambda: acl_rt.alloc(8).copy_from(b"x" * 9), acl_rt.InvalidArgumentError,
     r"source is 9 bytes but the destination buffer has only 8"),
    ("copy-to-too-large", lambda: acl_rt.alloc(8).copy_to(bytearray(9)), acl_rt.InvalidArgumentError,
     r"destination is 9 bytes but this buffer has only 8"),
    ("copy-device-too-large", lambda: acl_rt.alloc(8).copy_from(acl_rt.alloc(16)), acl_rt.InvalidArgumentError,
     r"source is 16 bytes"),
    ("copy-from-non-contiguous", lambda: acl_rt.alloc(8).copy_from(memoryview(bytearray(16))[::2]),
     acl_rt.InvalidArgumentError, r"C-contiguous"),
    ("copy-to-read-only", lambda: acl_rt.alloc(8).copy_to(b"12345678"), acl_rt.InvalidArgumentError, r"read-only"),
    ("copy-from-not-a-buffer", lambda: acl_rt.alloc(8).copy_from(_NotABuffer()), TypeError, r"buffer protocol.*_NotABuffer"),
    ("use-freed-buffer", lambda: _freed_buffer().copy_from(b"x"), acl_rt.InvalidHandleError, r"the buffer was freed"),
    ("copy-from-freed-buffer", lambda: acl_rt.alloc(8).copy_from(_freed_buffer()), acl_rt.InvalidHandleError, r"freed"),
    ("fill-not-a-byte", lambda: acl_rt.alloc(8).fill(256), acl_rt.InvalidArgumentError, r"value must be a byte \(0..255\), got 256"),
    ("fill-str", lambda: acl_rt.alloc(8).fill("a"), TypeError, r"value must be an int byte value, not str"),
    ("destroyed-stream-sync", lambda: _destroyed_stream().synchronize(), acl_rt.InvalidHandleError, r"the stream was destroyed"),
    ("destroyed-stream-as-arg", lambda: acl_rt.alloc(8).fill(0, stream=_destroyed_stream()), acl_rt.InvalidHandleError,
     r"the stream was destroyed"),
    ("destroyed-event-record", lambda: _destroyed_event().record(), acl_rt.InvalidHandleError, r"the event was destroyed"),
    ("wait-on-destroyed-event", lambda: acl_rt.current_stream().wait(_destroyed_event()), acl_rt.InvalidHandleError,
     r"the event was destroyed"),
    ("elapsed-non-timing", lambda: (lambda a, b: a.elapsed_time(b))(*_timing_pair(timing_start=False)),
     acl_rt.InvalidArgumentError, r"start event was created with timing=False"),
    ("elapsed-never-recorded", lambda: (lambda a, b: a.elapsed_time(b))(*_timing_pair(record=False)),
     acl_rt.InvalidArgumentError, r"start event was never recorded"),
    ("elapsed-not-an-event", lambda: acl_rt.current_stream().record().elapsed_time(3), TypeError, r"expected an acl_rt.Event"),
    ("stream-priority", lambda: acl_rt.Device(0).create_stream(priority=9), acl_rt.InvalidArgumentError, r"priority must be in 0..7"),
    ("stream-flags", lambda: acl_rt.Device(0).create_stream(flags=0x1000), acl_rt.InvalidArgumentError, r"unknown stream flag bits 0x1000"),
    ("timeout-negative", lambda: acl_rt.current_stream().synchronize(timeout=-1), acl_rt.InvalidArgumentError, r"timeout must be"),
    ("timeout-str", lambda: acl_rt.current_stream().synchronize(timeout="1"), TypeError, r"timeout must be a number"),
    ("stream-direct-construct", lambda: acl_rt.Stream(), TypeError, r"created with Device.create_stream"),
    ("event-direct-construct", lambda: acl_rt.Event(), TypeError, r"created with Device.create_event"),
    ("buffer-direct-construct", lambda: acl_rt.DeviceBuffer(), TypeError, r"created with acl_rt.alloc"),
    ("wait-on-int", lambda: acl_rt.current_stream().wait(42), TypeError, r"expected an acl_rt.Event or acl_rt.Stream, not int"),
    ("record-str", lambda: acl_rt.current_stream().record("e"), TypeError, r"expected an acl_rt.Event"),
    ("host-func-not-callable", lambda: acl_rt.current_stream().launch_host_func(3), TypeError, r"fn must be callable"),
    ("peer-self", lambda: acl_rt.Device(0).enable_peer_access(0), acl_rt.InvalidArgumentError, r"cannot be its own peer"),
    ("memory-resource-type", lambda: setattr(acl_rt.Device(0), "memory_resource", object()), TypeError,
     r"must be an acl_rt.MemoryResource"),
    ("event-timing-type", lambda: acl_rt.Device(0).create_event(timing=1), TypeError, r"timing must be a bool"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_python_api(acl, call, exc, pattern):
    with pytest.raises(exc) as ei:
        call()
    assert re.search(pattern, str(ei.value)), str(ei.value)
    if isinstance(ei.value, acl_rt.AclError):
        assert ei.value.name.startswith("ACL") and ei.value.api
    assert_usable()


def test_at_least_25_distinct_bad_inputs():
    assert len({c[0] for c in CASES}) >= 25


# -- the C ABI directly ----------------------------------------------------------------------------

def _raw_cases(L, ffi):
    cell = ffi.new("void **")
    buf = acl_rt.DeviceMemoryResource(0).allocate(64)   # a raw allocation: its bounds are the runtime's
    dev = ffi.cast("void *", buf.ptr)
    host = ffi.new("char[]", 128)
    s = ffi.new("aclrtStream *")
    assert L.aclrtCreateStream(s) == 0
    dead_stream = s[0]
    assert L.aclrtDestroyStream(dead_stream) == 0
    e = ffi.new("aclrtEvent *")
    assert L.aclrtCreateEvent(e) == 0
    fresh_event = e[0]
    freed = ffi.new("void **")
    assert L.aclrtMalloc(freed, 4096, 0) == 0
    assert L.aclrtFree(freed[0]) == 0
    ms = ffi.new("float *")
    st = ffi.new("aclrtStreamStatus *")
    bogus = ffi.cast("void *", 0xDEADBEEF0)
    return [
        ("second-aclInit", lambda: L.aclInit(ffi.NULL), 100002, "init"),
        ("malloc-null-out", lambda: L.aclrtMalloc(ffi.NULL, 64, 0), 100000, "NULL"),
        ("malloc-size-0", lambda: L.aclrtMalloc(cell, 0, 0), 100000, "size"),
        ("malloc-bad-policy", lambda: L.aclrtMalloc(cell, 64, 99), 100000, "polic"),
        ("memcpy-destmax-lt-count", lambda: L.aclrtMemcpy(dev, 8, host, 16, 1), 100000, "destMax"),
        ("memcpy-past-allocation", lambda: L.aclrtMemcpy(dev, 128, host, 128, 1), 107000, "bound"),
        ("memcpy-bad-kind", lambda: L.aclrtMemcpy(dev, 64, host, 8, 42), 100000, "kind"),
        ("memcpy-into-freed", lambda: L.aclrtMemcpy(freed[0], 64, host, 64, 1), 107000, "freed"),
        ("memset-count-gt-max", lambda: L.aclrtMemset(dev, 8, 0, 16), 100000, "maxCount"),
        ("free-foreign-pointer", lambda: L.aclrtFree(bogus), 107000, "not a device allocation"),
        ("double-free", lambda: L.aclrtFree(freed[0]), 207002, "free"),
        ("free-host-with-aclrtFree", lambda: L.aclrtFree(host), 107000, "allocation"),
        ("sync-unknown-stream", lambda: L.aclrtSynchronizeStream(bogus), 107017, "stream"),
        ("sync-destroyed-stream", lambda: L.aclrtSynchronizeStream(dead_stream), 107017, "stream"),
        ("query-destroyed-stream", lambda: L.aclrtStreamQuery(dead_stream, st), 107017, "stream"),
        ("memcpy-async-destroyed-stream", lambda: L.aclrtMemcpyAsync(dev, 64, host, 8, 1, dead_stream), 107017, "stream"),
        ("record-unknown-event", lambda: L.aclrtRecordEvent(bogus, ffi.NULL), 107017, "event"),
        ("stream-handle-as-event", lambda: L.aclrtQueryEventStatus(dead_stream, ffi.new("aclrtEventRecordedStatus *")), 107017, "event"),
        ("elapsed-unrecorded", lambda: L.aclrtEventElapsedTime(ms, fresh_event, fresh_event), 107006, "record"),
        ("elapsed-null-out", lambda: L.aclrtEventElapsedTime(ffi.NULL, fresh_event, fresh_event), 100000, "NULL"),
        ("device-info-bad-device", lambda: L.aclrtGetDeviceInfo(7, 101, ffi.new("int64_t *")), 107001, "device"),
        ("set-device-bad-id", lambda: L.aclrtSetDevice(99), 107001, "device"),
        ("stream-config-priority", lambda: L.aclrtCreateStreamWithConfig(s, 8, 0), 100000, "priority"),
        ("event-bad-flags", lambda: L.aclrtCreateEventWithFlag(e, 0x80000), 100000, "flag"),
        ("set-context-unknown", lambda: L.aclrtSetCurrentContext(bogus), 107017, "context"),
        ("mem-info-null", lambda: L.aclrtGetMemInfo(1, ffi.NULL, ffi.NULL), 100000, "NULL"),
        ("callback-not-subscribed", lambda: L.aclrtLaunchCallback(ffi.cast("aclrtCallback", 1), ffi.NULL, 0, ffi.NULL), 100034, "subscri"),
        ("sync-event-destroyed-or-unknown", lambda: L.aclrtSynchronizeEvent(bogus), 107017, "event"),
        ("memset-low-address", lambda: L.aclrtMemset(ffi.cast("void *", 0x1000), 8, 0, 8), 107000, "not a valid address"),
        ("memcpy-low-address", lambda: L.aclrtMemcpy(ffi.cast("void *", 0xFFF0), 8, host, 8, 1), 107000, "not a valid address"),
    ], buf, fresh_event


def test_bad_input_c_abi(lib):
    L, ffi = lib
    cases, buf, ev = _raw_cases(L, ffi)
    failures = []
    for name, call, code, word in cases:
        rc = call()
        p = L.aclGetRecentErrMsg()
        msg = ffi.string(p).decode() if p != ffi.NULL else ""
        if rc != code or (word.lower() not in msg.lower() and name != "second-aclInit"):
            failures.append(f"{name}: got {rc} {msg!r}, expected {code} mentioning {word!r}")
        assert_usable()
    assert not failures, "\n".join(failures)
    assert L.aclrtDestroyEvent(ev) == 0
    buf.close()
    assert len(cases) >= 25
