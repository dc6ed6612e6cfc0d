"""canna_dl core: DLPack import/export edge cases with hand-built capsules, DeviceArray views,
copies, dtypes. No framework needed except NumPy as the reference (the DLPack Python specification)."""
from __future__ import annotations

import ctypes
import gc
import sys
import threading

import numpy as np
import pytest

import acl_rt
import canna_dl as cd
from canna_dl import _native

from conftest import assert_usable

UNIFIED = cd.memory_model() == "unified"
unified_only = pytest.mark.skipif(not UNIFIED, reason="zero-copy host views need the unified memory model")


def counters():
    return _native.counters()


def tcount():
    gc.collect()
    return counters()["test_deleter_calls"]


def assert_deleted(before, n=1):
    assert counters()["test_deleter_calls"] - before == n


def tcap(data, shape, **kw):
    return _native._test_capsule(data, shape, **kw)


def write_host(addr, values: np.ndarray):
    ctypes.memmove(addr, values.ctypes.data, values.nbytes)


def read_host(addr, n, dtype):
    buf = (ctypes.c_char * (n * np.dtype(dtype).itemsize)).from_address(addr)
    return np.frombuffer(bytes(buf), dtype=dtype)


# -- dtypes -------------------------------------------------------------------------------------

def test_dtypes_have_dlpack_and_acl_codes():
    expect = {  # name: (DLPack code, bits, aclDataType)
        "bool": (6, 8, 12), "int8": (0, 8, 2), "int16": (0, 16, 6), "int32": (0, 32, 3), "int64": (0, 64, 9),
        "uint8": (1, 8, 4), "float16": (2, 16, 1), "bfloat16": (4, 16, 27), "float32": (2, 32, 0),
        "float64": (2, 64, 11), "complex64": (5, 64, 16), "complex128": (5, 128, 17),
    }
    for name, (code, bits, acl) in expect.items():
        dt = getattr(cd, name)
        assert (dt.code, dt.bits, dt.lanes, dt.acl, dt.itemsize) == (code, bits, 1, acl, bits // 8), name
        assert cd.dtype(name) is dt and dt == name and repr(dt) == f"canna_dl.{name}"
    assert cd.dtype(float) is cd.float64 and cd.dtype(bool) is cd.bool and cd.dtype(np.int16) is cd.int16
    assert cd.dtype(np.dtype("uint8")) is cd.uint8
    with pytest.raises(TypeError, match="unsupported dtype"):
        cd.dtype("float8")
    with pytest.raises(TypeError):
        cd.DType("x", 2, 32, 0).__class__()


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int64", "bool",
                                  "complex64"])
def test_scalar_packing_roundtrip(name):
    dt = cd.dtype(name)
    vals = {"bool": [True, False], "int8": [-128, 127, 0], "uint8": [0, 255], "int64": [-2**63, 2**63 - 1],
            "complex64": [1.5 - 2j]}.get(name, [1.5, -2.25, 0.0])
    for v in vals:
        assert dt.unpack(dt.pack(v)) == v
    if name == "int8":
        with pytest.raises(OverflowError):
            dt.pack(128)


def test_importing_canna_dl_needs_no_framework(py):
    r = py("""
        import sys
        class Block:
            def find_spec(self, name, path, target=None):
                if name.split('.')[0] in ('numpy', 'torch', 'tensorflow', 'jax', 'jaxlib', 'ml_dtypes'):
                    raise ImportError('blocked ' + name)
        sys.meta_path.insert(0, Block())
        import canna_dl as cd
        a = cd.asarray([[1.0, 2.0], [3.0, 4.0]])
        b = a.T.contiguous()
        assert b.tolist() == [[1.0, 3.0], [2.0, 4.0]], b.tolist()
        c = cd.asarray(bytearray(b'\\x01\\x02\\x03\\x04'))
        assert c.dtype is cd.uint8 and c[::-1].tolist() == [4, 3, 2, 1]
        z = cd.zeros((2, 3), cd.int32); z[1] = 5
        print(z.tolist(), repr(z))
        assert not any(m.split('.')[0] in ('numpy', 'torch', 'tensorflow', 'jax') for m in sys.modules)
    """)
    assert "[[0, 0, 0], [5, 5, 5]]" in r.stdout


# -- import of hand-built capsules (bug reports as test cases) ----------------------------------

@unified_only
def test_import_legacy_capsule_zero_copy_readonly():
    data = np.arange(6, dtype=np.float32)
    before = tcount()
    cap = tcap(data, (2, 3), strides=(3, 1))
    a = cd.from_dlpack(cap)
    assert a.ptr == data.ctypes.data and a.shape == (2, 3) and a.strides == (3, 1)
    assert a.readonly  # legacy capsules cannot say whether writes are allowed (NumPy's rule)
    data[4] = 40  # a write by the producer is seen
    assert a.tolist() == [[0, 1, 2], [3, 40, 5]]
    del cap
    gc.collect()
    assert_deleted(before, 0)  # canna owns it now; the capsule's destructor did nothing
    del a
    assert_deleted(before, 1)


def test_capsule_consumed_twice_raises_and_deleter_runs_once():
    data = np.arange(4, dtype=np.float32)
    before = tcount()
    cap = tcap(data, (4,))
    a = cd.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        cd.from_dlpack(cap)
    del cap, a
    gc.collect()
    assert_deleted(before, 1)
    assert_usable()


@unified_only
def test_null_strides_are_c_order():  # cupy#2095
    data = np.arange(6, dtype=np.int32)
    a = cd.from_dlpack(tcap(data, (2, 3), dtype=(0, 32, 1)))
    assert a.strides == (3, 1) and a.is_contiguous() and a.tolist() == [[0, 1, 2], [3, 4, 5]]


@unified_only
def test_byte_offset_is_added():
    data = np.arange(8, dtype=np.float32)
    a = cd.from_dlpack(tcap(data, (4,), strides=(1,), byte_offset=16))
    assert a.ptr == data.ctypes.data + 16 and a.tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("versioned", [False, True])
def test_zero_size_null_data(versioned):  # pytorch#117273, #41182
    before = tcount()
    a = cd.from_dlpack(tcap(None, (0, 3), address=0, versioned=versioned))
    assert a.shape == (0, 3) and a.size == 0 and a.nbytes == 0
    assert a.tolist() == [] and a.contiguous() is a
    cap = a.__dlpack__(max_version=(1, 0))
    assert _native.capsule_info(cap)["data"] == 0  # zero-size exports NULL data
    del a, cap
    gc.collect()
    assert_deleted(before, 1)


@unified_only
def test_zero_d_null_shape():
    data = np.array([2.5], dtype=np.float64)
    a = cd.from_dlpack(tcap(data, (), dtype=(2, 64, 1), versioned=True))
    assert a.shape == () and a.strides == () and a.item() == 2.5
    info = _native.capsule_info(a.__dlpack__(max_version=(1, 0)))
    assert info["shape"] is None and info["strides"] is None and info["ndim"] == 0  # DLPack 1.3 convention


@unified_only
def test_size_one_dims_with_odd_strides():  # pytorch#99803
    data = np.arange(3, dtype=np.float32)
    a = cd.from_dlpack(tcap(data, (1, 3), strides=(99, 1)))
    assert a.is_contiguous() and a.tolist() == [[0, 1, 2]]
    cap = cd.zeros((1, 77), cd.int32).__dlpack__()
    assert _native.capsule_info(cap)["strides"] == (77, 1)  # canonical strides on export


@unified_only
def test_negative_strides_import():  # pytorch#188023's input, our importer
    base = np.arange(12, dtype=np.float64)
    addr = base.ctypes.data + 3 * 8
    a = cd.from_dlpack(tcap(base, (3, 4), strides=(4, -1), address=addr, dtype=(2, 64, 1)))
    assert a.tolist() == [[3, 2, 1, 0], [7, 6, 5, 4], [11, 10, 9, 8]]
    assert a.base_ptr == base.ctypes.data and a.offset == 3  # storage base = lowest address touched
    np.testing.assert_array_equal(cd.to_numpy(a), base.reshape(3, 4)[:, ::-1])


@pytest.mark.parametrize("case,match", [
    (dict(device=(2, 0)), "device type 2 \\(kDLCUDA\\)"),
    (dict(device=(99, 0)), "device type 99"),
    (dict(dtype=(2, 8, 1)), "dtype \\(code=2, bits=8"),
    (dict(dtype=(10, 8, 1)), "code=10"),           # float8_e4m3fn
    (dict(dtype=(2, 32, 2)), "lanes=2"),
    (dict(versioned=True, version=(2, 0)), "major version 2"),
    (dict(null_shape=True), "NULL shape"),
    (dict(address=0), "NULL data pointer"),
])
def test_bad_capsules_raise_buffererror_and_deleter_runs_once(case, match):
    data = np.zeros(8, dtype=np.float32)
    before = tcount()
    cap = tcap(data, (2, 2), **case)
    with pytest.raises(BufferError, match=match):
        cd.from_dlpack(cap)
    assert_deleted(before, 0)
    del cap  # unconsumed: the producer's capsule destructor runs the deleter
    gc.collect()
    assert_deleted(before, 1)
    assert cd.from_dlpack(tcap(np.ones(4, np.float32), (4,))).tolist() == [1, 1, 1, 1]  # still usable


def test_negative_shape_and_overflowing_extents_are_refused():
    data = np.zeros(4, dtype=np.float32)
    with pytest.raises(BufferError, match="negative dimension"):
        cd.from_dlpack(tcap(data, (2, -1)))
    with pytest.raises(BufferError, match="overflow"):
        cd.from_dlpack(tcap(data, (2**40, 2**40), strides=(2**40, 1)))
    with pytest.raises(BufferError, match="overflow"):
        cd.from_dlpack(tcap(data, (3,), strides=(-(2**62),)))


@unified_only
def test_minor_version_from_the_future_is_fine_and_flags_read():
    data = np.arange(4, dtype=np.float32)
    a = cd.from_dlpack(tcap(data, (4,), versioned=True, version=(1, 99), flags=1))
    assert a.readonly and a.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="read-only"):
        a.fill(0)
    b = cd.from_dlpack(tcap(data, (4,), versioned=True, flags=0))
    assert not b.readonly


@unified_only
def test_null_deleter_is_never_called():  # pytorch#43166
    data = np.arange(4, dtype=np.float32)
    gc.collect()
    c0 = counters()
    a = cd.from_dlpack(tcap(data, (4,), null_deleter=True, versioned=True))
    assert a.tolist() == [0, 1, 2, 3]
    del a
    gc.collect()
    c1 = counters()
    assert c1["import_null_deleters"] - c0["import_null_deleters"] == 1
    assert c1["test_deleter_calls"] == c0["test_deleter_calls"]


def test_not_a_dlpack_capsule():
    import datetime
    with pytest.raises(BufferError, match="not a DLPack tensor"):
        cd.from_dlpack(datetime.datetime_CAPI)
    with pytest.raises(TypeError, match="not a DLPack producer"):
        cd.from_dlpack(object())


@unified_only
def test_accepts_host_accessible_device_types():
    data = np.arange(2, dtype=np.float32)
    for dev in (3, 11, 13):  # CUDA host, ROCm host, CUDA managed memory are host-addressable
        assert cd.from_dlpack(tcap(data, (2,), device=(dev, 0))).tolist() == [0, 1]


@unified_only
def test_ownership_taken_once_views_keep_producer_alive():
    data = np.arange(10, dtype=np.float32)
    before = tcount()
    a = cd.from_dlpack(tcap(data, (10,)))
    v1, v2 = a[2:5], a[::-3]
    del a
    gc.collect()
    assert_deleted(before, 0)
    assert v1.tolist() == [2, 3, 4] and v2.tolist() == [9, 6, 3, 0]
    del v1
    assert_deleted(before, 0)
    del v2
    assert_deleted(before, 1)


# -- export -------------------------------------------------------------------------------------

def test_export_capsule_kinds_and_fields():
    a = cd.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    legacy = _native.capsule_info(a.__dlpack__())
    assert legacy["name"] == "dltensor" and legacy["version"] is None
    assert legacy["byte_offset"] == 0 and legacy["strides"] == (4, 1) and legacy["has_deleter"]
    for mv in [(0, 8), None]:
        assert _native.capsule_info(a.__dlpack__(max_version=mv))["name"] == "dltensor"
    for mv in [(1, 0), (1, 3), (2, 0)]:
        v = _native.capsule_info(a.__dlpack__(max_version=mv))
        assert v["name"] == "dltensor_versioned" and v["version"] == (1, 3) and v["flags"] == 0
    with pytest.raises(TypeError, match="max_version"):
        a.__dlpack__(max_version="1.0")
    with pytest.raises(TypeError, match="copy"):
        a.__dlpack__(copy="yes")
    with pytest.raises(TypeError, match="dl_device"):
        a.__dlpack__(dl_device=1)
    with pytest.raises(BufferError, match="cannot export to DLPack device"):
        a.__dlpack__(dl_device=(2, 0))
    assert a.__dlpack_device__() == ((1, 0) if UNIFIED else (12, 0))


def test_every_export_has_a_deleter_and_counts_balance():
    gc.collect()
    c0 = counters()
    a = cd.empty((4, 4))
    caps = [a.__dlpack__(), a.__dlpack__(max_version=(1, 0)), a[1:, ::2].__dlpack__(max_version=(1, 0)),
            a.T.__dlpack__(copy=True, max_version=(1, 0))]
    assert all(_native.capsule_info(c)["has_deleter"] for c in caps)
    del caps
    gc.collect()
    c1 = counters()
    assert c1["exports"] - c0["exports"] >= 4
    assert c1["exports"] - c0["exports"] == c1["export_deleter_calls"] - c0["export_deleter_calls"]


def test_copy_flags():
    a = cd.asarray(np.arange(4, dtype=np.float32))
    info = _native.capsule_info(a.__dlpack__(max_version=(1, 0), copy=True))
    assert info["flags"] & 2 and info["data"] != a.ptr and info["data"] % 64 == 0  # IS_COPIED, aligned
    ro = cd.asarray(np.arange(4, dtype=np.float32)).broadcast_to((2, 4))
    assert _native.capsule_info(ro.__dlpack__(max_version=(1, 0)))["flags"] & 1  # READ_ONLY


def test_stream_argument_on_cpu_export():  # array API __dlpack__ spec: on CPU any stream but None/-1 is an error
    a = cd.zeros(4)
    if UNIFIED:
        with pytest.raises(BufferError, match="only None"):
            a.__dlpack__(stream=1)
        with pytest.raises(BufferError):
            a.__dlpack__(stream=acl_rt.current_stream())
        a.__dlpack__(stream=-1)
    with pytest.raises(BufferError, match="only None"):
        a.__dlpack__(stream=5, dl_device=(1, 0))
    assert_usable()


@unified_only
def test_negative_strides_export_is_copied_unless_copy_false():
    a = cd.asarray(np.arange(6, dtype=np.float32))[::-1]
    cd.reset_copy_stats()
    info = _native.capsule_info(a.__dlpack__(max_version=(1, 0)))
    assert info["strides"] == (1,) and info["flags"] & 2
    assert cd.copy_stats()["by_reason"]["negative_strides"]["count"] == 1
    raw = _native.capsule_info(a.__dlpack__(max_version=(1, 0), copy=False))
    assert raw["strides"] == (-1,) and raw["data"] == a.ptr


@unified_only
def test_legacy_export_of_unaligned_view_is_aligned_copy():
    a = cd.zeros((4, 16))
    assert a.ptr % 64 == 0
    view = a[1:]  # 64 bytes in: still aligned
    assert _native.capsule_info(view.__dlpack__())["data"] == view.ptr
    odd = a[:, 1:]
    cd.reset_copy_stats()
    info = _native.capsule_info(odd.__dlpack__())
    assert info["data"] % 64 == 0 and info["data"] != odd.ptr and info["strides"] == (15, 1)
    assert cd.copy_stats()["by_reason"]["unaligned_legacy"]["count"] == 1
    # versioned consumers (torch, numpy) take it as it is
    assert _native.capsule_info(odd.__dlpack__(max_version=(1, 0)))["data"] == odd.ptr


@pytest.mark.parametrize("nbytes", [1, 3, 64, 100, 4095, 1 << 20, (1 << 20) + 7])
def test_every_buffer_canna_allocates_is_64_byte_aligned(nbytes):
    a = cd.empty(nbytes, cd.uint8)
    assert a.ptr % 64 == 0
    assert a[::-1].copy().ptr % 64 == 0 and a[1:].copy().ptr % 64 == 0
    assert _native.host_alloc(nbytes).ptr % 64 == 0


@unified_only
def test_stream_ordered_export_waits_for_pending_work(lib):
    lib_, ffi = lib
    s = acl_rt.Device(0).create_stream()
    a = cd.zeros(1 << 16, cd.uint8, stream=s)
    a.synchronize()
    buf = a.owner
    assert isinstance(buf, acl_rt.DeviceBuffer)
    # a slow producer: 100 ms of queued work, then the write
    assert lib_.aclsimLaunchDelay(s._handle("t"), 100_000, 1, 1) == 0
    buf.fill(7, stream=s)
    a.record_stream(s)
    assert a.stream is s and not s.query()
    x = np.from_dlpack(a)  # the export must wait for s
    assert x.min() == 7 and x.max() == 7
    assert a.stream is None  # nothing pending any more
    s.close()


@pytest.mark.skipif(UNIFIED, reason="device exports only exist in the discrete model")
def test_device_export_orders_consumer_stream(lib):
    lib_, ffi = lib
    dev = acl_rt.Device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()
    a = cd.zeros(256, cd.uint8, stream=s1)
    a.synchronize()
    assert lib_.aclsimLaunchDelay(s1._handle("t"), 200_000, 1, 1) == 0
    a.owner.fill(3, stream=s1)
    a.record_stream(s1)
    cap = a.__dlpack__(stream=s2)  # the consumer will read on s2
    assert _native.capsule_info(cap)["device"] == (12, 0)
    assert not s2.query()  # s2 now waits for s1's pending write (no host blocking)
    s2.synchronize()
    assert s1.query()
    with pytest.raises(TypeError, match="stream must be"):
        a.__dlpack__(stream="s2")
    a.__dlpack__(stream=-1)  # no ordering asked
    a.__dlpack__(stream=s2.handle)  # a raw aclrtStream handle
    b = cd.from_dlpack(cap)
    assert b.tolist() == [3] * 256
    s1.close()
    s2.close()


# -- views ---------------------------------------------------------------------------------------

def test_views_share_memory_and_match_numpy():
    n = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    a = cd.asarray(n).copy()
    cases = [
        lambda x: x[1], lambda x: x[:, 1:, ::2], lambda x: x[..., ::-1], lambda x: x[::-1, ::-2, 1],
        lambda x: x[None, :, None], lambda x: x.T, lambda x: x.transpose(1, 0, 2), lambda x: x.reshape(4, 6),
        lambda x: x.reshape(-1), lambda x: x[:, :, 0].reshape(6), lambda x: x.swapaxes(0, 2)[1:],
        lambda x: x[1:1], lambda x: x[:, 2:0:-1], lambda x: x[0, 0, 0],
    ]
    for f in cases:
        v = f(a)
        np.testing.assert_array_equal(cd.to_numpy(v) if UNIFIED else v.numpy(), f(n))
        assert v.storage is a.storage  # a view, no copy
    assert a.permute(2, 0, 1).shape == (4, 2, 3) and a.mT.shape == (2, 4, 3)
    assert a[:, :1].squeeze(1).shape == (2, 4) and a.expand_dims(1).shape == (2, 1, 3, 4)


def test_views_property_based():
    from hypothesis import given, settings, strategies as st

    base = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)
    arr = cd.asarray(base).copy()
    sl = st.builds(slice, st.none() | st.integers(-8, 8), st.none() | st.integers(-8, 8),
                   st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
    idx = st.one_of(sl, st.integers(-5, 4))

    @settings(max_examples=150, deadline=None)
    @given(st.tuples(idx, sl, sl))
    def check(key):
        v = arr[key]
        ref = base[key]
        assert v.shape == ref.shape
        assert v.strides == tuple(s // 4 for s in ref.strides) or ref.size <= 1
        np.testing.assert_array_equal(v.numpy(), ref)
    check()


def test_reshape_views_and_copies():
    a = cd.asarray(np.arange(24, dtype=np.float32)).copy().reshape(2, 3, 4)
    t = a.transpose(2, 1, 0)
    cd.reset_copy_stats()
    assert t.reshape(4, 6).storage is not a.storage  # needs a copy
    assert cd.copy_stats()["by_reason"]["contiguous"]["count"] == 1
    with pytest.raises(ValueError, match="needs a copy"):
        t.reshape(24, copy=False)
    assert a.reshape(6, 4).storage is a.storage
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(5, 5)
    with pytest.raises(ValueError):
        a.reshape(-1, -1)
    np.testing.assert_array_equal(t.reshape(4, 6).numpy(), np.arange(24).reshape(2, 3, 4).T.reshape(4, 6))


def test_bad_indices():
    a = cd.zeros((2, 3))
    with pytest.raises(IndexError, match="out of bounds"):
        a[2]
    with pytest.raises(IndexError, match="too many"):
        a[0, 0, 0]
    with pytest.raises(TypeError, match="advanced indexing"):
        a[[0, 1]]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(ValueError, match="not a permutation"):
        a.permute(0, 0)
    with pytest.raises(ValueError, match="out of bounds"):
        a._view(0, (10,), (1,))  # the C layer refuses views outside the storage
    with pytest.raises(ValueError, match="out of bounds"):
        a._view(-1, (2,), (1,))
    with pytest.raises(TypeError):
        cd.DeviceArray()
    assert a[1, 2].item() == 0 and a.shape == (2, 3)


def test_contiguous_copy_numpy_are_explicit_and_counted():
    a = cd.asarray(np.arange(12, dtype=np.int16).reshape(3, 4)).copy()
    cd.reset_copy_stats()
    assert a.contiguous() is a and cd.copy_stats()["count"] == 0
    c = a[:, ::2].contiguous()
    assert c.is_contiguous() and c.storage is not a.storage and c.ptr % 64 == 0
    n = a.numpy()
    n[0, 0] = 99  # a host copy: a does not change
    assert a[0, 0].item() == 0
    st = cd.copy_stats()["by_reason"]
    assert st["contiguous"] == {"count": 1, "bytes": 12} and st["numpy"]["count"] >= 1


def test_fill_setitem_and_readonly():
    a = cd.zeros((3, 4), cd.int32)
    a[1] = 7
    a[:, ::3] = cd.asarray(np.array([1, 2], dtype=np.int32))
    a[2, 1:3] = np.array([5, 6], dtype=np.int32)
    assert a.tolist() == [[1, 0, 0, 2], [1, 7, 7, 2], [1, 5, 6, 2]]
    with pytest.raises(TypeError, match="cannot assign float64"):
        a[0] = np.zeros(4)
    with pytest.raises(OverflowError):
        a[0] = 2**40
    b = a.broadcast_to((2, 3, 4))
    assert b.readonly and b.strides == (0, 4, 1)
    with pytest.raises(ValueError, match="read-only"):
        b[0] = 1
    ro = np.arange(3.0)
    ro.flags.writeable = False
    r = cd.asarray(ro)
    assert r.readonly
    with pytest.raises(ValueError, match="read-only"):
        r[0] = 1.0


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_fill_beyond_the_float_range_is_inf_as_a_cast_gives(name):
    """A float beyond a 16/32-bit float's range stored by fill / full / setitem: inf (with its
    sign), the value PyTorch's cast gives; the float32 fill raised "view out of bounds ... storage
    of 2 bytes" (its overflow path packed a float16), bfloat16 a bare OverflowError. Values that
    round to the largest finite float stay finite."""
    torch = pytest.importorskip("torch")
    dt = getattr(cd, name)
    for v in (1e300, -1e300, 1e39, 3.4028235e38, 3.4028236e38, 65504.0, 65520.0, -7e4, 2.0**200):
        want = torch.tensor([v], dtype=torch.float64).to(getattr(torch, name)).item()
        assert cd.full((3,), v, dtype=dt).tolist() == [want] * 3, v
        a = cd.zeros(2, dtype=dt)
        a[1] = v
        assert a.tolist() == [0.0, want], v


@pytest.mark.parametrize("name", ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                                  "float32", "float64", "complex64", "complex128"])
def test_dtype_roundtrip_through_numpy(name):
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")  # bfloat16 for NumPy
    dt = cd.dtype(name)
    rng = np.random.default_rng(0)
    ref = (rng.standard_normal(12) * 50).astype(dt.numpy).reshape(3, 4)
    a = cd.asarray(ref)
    assert a.dtype is dt
    np.testing.assert_array_equal(a.numpy(), ref)
    np.testing.assert_array_equal(cd.to_numpy(a.T), ref.T)
    if UNIFIED and name != "bfloat16":
        assert a.ptr == ref.ctypes.data


def test_readonly_numpy_flag_survives_both_ways():  # numpy#28599
    n = np.arange(4.0)
    n.flags.writeable = False
    a = cd.asarray(n)
    assert a.readonly
    cap = a.__dlpack__(max_version=(1, 0))
    assert _native.capsule_info(cap)["flags"] & 1
    back = np.from_dlpack(a) if UNIFIED else np.from_dlpack(a, device="cpu")
    if UNIFIED:
        assert not back.flags.writeable and back.ctypes.data == n.ctypes.data
    w = np.arange(4.0)
    wa = cd.asarray(w)
    assert not wa.readonly
    if UNIFIED:
        assert np.from_dlpack(wa).flags.writeable


def test_asarray_inputs():
    assert cd.asarray(3.5).shape == () and cd.asarray(3.5).dtype is cd.float64
    assert cd.asarray([[1, 2], [3, 4]], dtype=cd.int8).tolist() == [[1, 2], [3, 4]]
    assert cd.asarray([True, False]).dtype is cd.bool
    b = cd.asarray(b"\x00\x01\x02")
    assert b.readonly and b.tolist() == [0, 1, 2]
    with pytest.raises(TypeError):
        cd.asarray(object())
    with pytest.raises(TypeError):
        cd.asarray([[1, 2], [3]])
    f = cd.asarray(np.arange(3, dtype=np.float32), dtype=cd.float64)
    assert f.dtype is cd.float64 and f.tolist() == [0, 1, 2]
    assert cd.full((2,), 2.5).tolist() == [2.5, 2.5] and cd.ones(2, cd.int64).tolist() == [1, 1]
    assert cd.asarray(np.float32(2.0)).dtype is cd.float32


def test_repr_is_useful():
    a = cd.asarray(np.arange(6, dtype=np.float32).reshape(2, 3)).copy()
    r = repr(a)
    assert r.startswith("DeviceArray([[0., 1., 2.],") and "dtype=float32" in r and "device=npu:0" in r
    assert "strides=(1, 3)" in repr(a.T)
    big = cd.empty(2_000_000, cd.uint8)
    assert "shape=(2000000,)" in repr(big)


def test_device_argument():
    a = cd.asarray([1.0, 2.0], device=0)
    assert a.device is acl_rt.Device(0)
    assert cd.from_dlpack(a, device="npu:0") is a
    with pytest.raises(ValueError, match="NPU devices"):
        cd.asarray([1.0], device="cpu")
    with pytest.raises(acl_rt.InvalidArgumentError):
        cd.asarray([1.0], device=7)


def test_deleter_from_native_thread_without_gil():  # numpy#22507
    gc.collect()
    c0 = counters()
    a = cd.zeros(1024)
    cap = a.__dlpack__(max_version=(1, 0))
    del a
    _native._test_delete_in_thread(cap)
    c1 = counters()
    assert c1["export_deleter_calls"] - c0["export_deleter_calls"] == 1
    assert c1["export_refs_leaked"] == c0["export_refs_leaked"]
    # the owner was released from that thread (the pool/device buffer was freed)
    assert_usable()


def test_deleter_from_python_worker_thread():
    data = np.arange(8, dtype=np.float32)
    before = tcount()
    holder = [cd.from_dlpack(tcap(data, (8,)))]
    t = threading.Thread(target=holder.clear)
    t.start()
    t.join()
    assert_deleted(before, 1)


def test_deleter_after_interpreter_shutdown(py):
    r = py("""
        import canna_dl as cd
        from canna_dl import _native
        a = cd.zeros((256, 256))
        _native._test_delete_at_exit(a.__dlpack__())           # deleter runs after Py_Finalize
        _native._test_delete_at_exit(a[1:].__dlpack__(max_version=(1, 0)))
        KEEP = a.T.__dlpack__()                                  # an unconsumed capsule at exit
        print("ok")
    """)
    assert r.stdout.strip() == "ok" and "Fatal" not in r.stderr and r.returncode == 0


def test_capsule_destructor_preserves_pending_exception(py):
    # a capsule dropped while an exception is propagating: the destructor must not clobber it
    r = py("""
        import canna_dl as cd
        def f():
            cap = cd.zeros(4).__dlpack__()
            raise KeyError("kept")
        try:
            f()
        except KeyError as e:
            print("caught", e)
    """)
    assert "caught 'kept'" in r.stdout and "SystemError" not in r.stderr


def test_state_usable_after_errors():
    for bad in (lambda: cd.from_dlpack(3), lambda: cd.zeros((2, -1)), lambda: cd.empty(2**62),
                lambda: cd.zeros(2)[5]):
        with pytest.raises((TypeError, ValueError, IndexError, MemoryError, acl_rt.AclError)):
            bad()
    assert cd.asarray([1, 2]).tolist() == [1, 2]
    assert_usable()


# -- issue 12 item 5: overlapping assignment reads the source before overwriting it (NumPy's rule)

def test_setitem_overlapping_source_reads_before_writing():
    base = np.arange(9, dtype=np.float32).reshape(3, 3)
    cases = [
        lambda s: s.__setitem__(slice(None), s[::-1]),
        lambda s: s.__setitem__(slice(None), s.T),
        lambda s: s.__setitem__((slice(None), slice(None)), s[:, ::-1]),
        lambda s: s.__setitem__(slice(None, None, -1), s),
        lambda s: s.__setitem__(slice(1, None), s[:-1]),
        lambda s: s.__setitem__(slice(None), s),   # the same view: nothing to stage
    ]
    for f in cases:
        s, ref = cd.asarray(base).copy(), base.copy()
        f(s)
        f(ref)
        np.testing.assert_array_equal(s.numpy(), ref)


def test_setitem_overlapping_views_property_based():
    from hypothesis import given, settings, strategies as st

    base = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
    sl = st.builds(slice, st.none() | st.integers(-8, 8), st.none() | st.integers(-8, 8),
                   st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
    view = st.tuples(sl, sl, st.booleans())

    def take(x, v):
        r = x[v[0], v[1]]
        return r.T if v[2] else r

    @settings(max_examples=200, deadline=None)
    @given(view, view)
    def check(dst, src):
        ref = base.copy()
        d, s = take(ref, dst), take(ref, src)
        if d.shape != s.shape:
            return
        d[...] = s
        a = cd.asarray(base).copy()
        da = take(a, dst)
        da[...] = take(a, src)
        np.testing.assert_array_equal(a.numpy(), ref)
    check()


def test_an_array_written_on_a_destroyed_stream_stays_readable(acl):
    """A stream destroyed with a write pending: the array's host read waited on the dead stream and
    raised InvalidHandleError forever, though the write lands (the queued work still runs). It now
    waits through a device synchronize."""
    import canna_dl as cd
    import kernels
    import numpy as np
    s = acl.Device(0).create_stream()
    a = cd.asarray(np.ones((64, 64), np.float32))
    h = kernels.matmul(a, a, stream=s)
    s.destroy()
    assert h.numpy()[0, 0] == 64.0
    torch = pytest.importorskip("torch")
    h2 = kernels.add(a, 1.0, stream=(s2 := acl.Device(0).create_stream()))
    s2.destroy()
    assert torch.equal(cd.to_torch(h2), torch.full((64, 64), 2.0))
