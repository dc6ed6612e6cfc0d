"""canna_dl with PyTorch, TensorFlow, NumPy and JAX: the producer x consumer matrix, each
framework's known bugs (issue numbers at each test), dtypes, leaks and deleter threads.

Frameworks are imported once for the module. In the unified memory model (default) exchanges
are zero-copy where the consumer can take the layout: the tests compare data pointers and show a
write on one side on the other. Under CANNA_SIM_MEMORY=discrete (test_dlpack_process runs this
module that way) they check values and that every copy is counted.
"""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import canna_dl as cd  # noqa: E402
from canna_dl import _native  # noqa: E402

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from conftest import assert_usable  # noqa: E402

UNIFIED = cd.memory_model() == "unified"
FRAMEWORKS = ["canna", "torch", "tf", "numpy", "jax"]
DTYPES = ["float32", "int32"]
LAYOUTS = ["1d", "2d", "strided"]


# -- producers ------------------------------------------------------------------------------------

def ref_array(dtype, layout):
    base = np.arange(1, 4 * 6 + 1).astype(dtype)
    if layout == "1d":
        return base
    base = base.reshape(4, 6)
    return base if layout == "2d" else base[:, ::2]


def produce(kind, dtype, layout):
    """(object, its data pointer, is the memory strided inside its buffer)"""
    ref = ref_array(dtype, layout)
    full = ref_array(dtype, "2d") if layout == "strided" else ref
    strided = layout == "strided" and kind in ("canna", "torch", "numpy")
    if kind == "canna":
        a = cd.asarray(np.ascontiguousarray(full)).copy()  # canna-owned device memory
        obj = a[:, ::2] if layout == "strided" else a
    elif kind == "torch":
        t = torch.from_numpy(np.ascontiguousarray(full)).clone()
        obj = t[:, ::2] if layout == "strided" else t
    elif kind == "numpy":
        n = np.ascontiguousarray(full).copy()
        obj = n[:, ::2] if layout == "strided" else n
    elif kind == "tf":
        obj = tf.constant(ref)  # TF has no strided views: slicing materializes
    else:
        obj = jnp.asarray(ref)
    return obj, ptr_of(kind, obj), strided


def ptr_of(kind, obj):
    if kind == "canna":
        return obj.ptr
    if kind == "torch":
        return obj.data_ptr()
    if kind == "numpy":
        return obj.ctypes.data
    if kind == "tf":
        return _native.capsule_info(tf.experimental.dlpack.to_dlpack(obj))["data"]
    return obj.unsafe_buffer_pointer()


def consume(kind, obj):
    if kind == "canna":
        return cd.asarray(obj)
    if kind == "torch":
        # read-only producers (TF, JAX: legacy capsules) make to_torch warn: PyTorch cannot say
        # read-only (test_torch_readonly_flag_is_ignored_by_torch checks the warning)
        src = cd.asarray(obj)
        ro = src.readonly and src.size > 0 and cd.memory_model() == "unified" and min(src.strides, default=0) >= 0
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t = cd.to_torch(obj)
        assert [str(x.message) for x in w if "read-only" in str(x.message)] == (
            [str(w[0].message)] if ro else []), [str(x.message) for x in w]
        return t
    return {"tf": cd.to_tf, "numpy": cd.to_numpy, "jax": cd.to_jax}[kind](obj)


def values(kind, obj):
    if kind == "canna":
        return cd.to_numpy(obj, copy=True)
    if kind == "torch":
        return obj.numpy()
    if kind == "tf":
        return obj.numpy()
    return np.asarray(obj)


def first(kind, obj):
    return values(kind, obj).reshape(-1)[0].item()


def write_first(kind, obj, value):
    """Write element [0, ..., 0] through the framework; False when it cannot write."""
    idx = (0,) * len(obj.shape)
    if kind == "canna" and not obj.readonly:
        obj[idx] = value
    elif kind == "torch":
        obj[idx] = value
    elif kind == "numpy" and obj.flags.writeable:
        obj[idx] = value
    else:
        return False
    return True


def raw_write_first(ptr, dtype, value):
    v = np.array([value], dtype=dtype)
    ctypes.memmove(ptr, v.ctypes.data, v.nbytes)


def zero_copy_possible(consumer, ptr, strided):
    if not UNIFIED:
        return False
    if consumer in ("canna", "numpy", "torch"):
        return True
    return not strided and ptr % 64 == 0  # TF and JAX: compact, 64-byte aligned


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("consumer", FRAMEWORKS)
@pytest.mark.parametrize("producer", FRAMEWORKS)
def test_matrix(producer, consumer, dtype, layout):
    obj, pptr, strided = produce(producer, dtype, layout)
    ref = ref_array(dtype, layout)
    cd.reset_copy_stats()
    out = consume(consumer, obj)
    stats = cd.copy_stats()
    cptr = ptr_of(consumer, out)
    np.testing.assert_array_equal(values(consumer, out), ref)
    assert str(values(consumer, out).dtype) == dtype
    if producer == "canna" and consumer == "canna":
        assert cptr == pptr and stats["count"] == 0
    elif zero_copy_possible(consumer, pptr, strided):
        assert cptr == pptr, f"{producer}->{consumer} copied: {stats}"
        assert stats["count"] == 0, stats
        # a write on one side is seen on the other
        if write_first(producer, obj, 77):
            assert first(consumer, out) == 77
        elif write_first(consumer, out, 78):
            assert first(producer, obj) == 78
        else:  # both immutable (TF, JAX): write the shared memory directly
            raw_write_first(cptr, dtype, 79)
            assert first(consumer, out) == 79 and first(producer, obj) == 79
    else:
        assert cptr != pptr
        assert stats["count"] >= 1, stats
        reasons = set(stats["by_reason"])
        if UNIFIED:
            assert reasons <= {"tf_layout", "jax_layout"}, reasons
        else:
            assert reasons <= {"to_device", "to_host", "tf_layout", "jax_layout"}, reasons
        # a copy: writes do not travel
        if write_first(producer, obj, 55):
            assert first(consumer, out) != 55


def test_matrix_canna_to_canna_device_memory_is_shared():
    a = cd.zeros((3, 4), cd.int32)
    b = cd.from_dlpack(a.__dlpack__(max_version=(1, 0)))
    assert b.ptr == a.ptr and b.device is a.device
    a[0, 0] = 5
    assert b[0, 0].item() == 5


# -- PyTorch ----------------------------------------------------------------------------------------

def test_torch_fast_path_uses_exchange_api():
    from canna_dl.torch import _exchange
    assert _exchange._API is not None  # torch 2.13 has __dlpack_c_exchange_api__
    t = torch.arange(6.0)
    c0 = _native.counters()
    a = cd.from_torch(t)
    assert _native.counters()["imports"] - c0["imports"] == 1
    back = cd.to_torch(a)
    if UNIFIED:
        assert back.data_ptr() == t.data_ptr() and a.ptr == t.data_ptr() and not a.readonly


def test_torch_neg_and_conj_views_are_resolved():  # torch 2.13 exports neg views unresolved
    neg = torch._neg_view(torch.ones(3))
    cd.reset_copy_stats()
    a = cd.asarray(neg)
    assert a.tolist() == [-1.0, -1.0, -1.0]
    assert cd.copy_stats()["by_reason"]["torch_resolve"]["count"] == 1
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj()
    assert cd.asarray(z).tolist() == [1 - 2j, 3 + 1j]


def test_torch_requires_grad_refused():
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="detach"):
        cd.asarray(t)
    assert cd.asarray(t.detach()).tolist() == [1, 1, 1]


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_torch_tensors_without_a_dlpack_form():
    gc.collect()
    c0 = _native.counters()
    for t, match in [(torch.eye(3).to_sparse(), "sparse"), (torch.zeros(3, dtype=torch.float8_e4m3fn), "code=10"),
                     (torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), "QInt")]:
        with pytest.raises(BufferError, match=match):
            cd.asarray(t)
    gc.collect()
    c1 = _native.counters()
    # the float8 tensor was exported by torch, refused by canna: torch's deleter ran once
    assert c1["import_deleter_calls"] - c0["import_deleter_calls"] == 1
    e = cd.asarray(torch.ones(1, 3).expand(4, 3))  # broadcast strides import as they are
    assert e.tolist() == [[1.0] * 3] * 4
    assert e.strides == ((0, 1) if UNIFIED else (3, 1))


def test_torch_negative_strides_never_reach_torch():  # pytorch#188023 (the abort is in test_dlpack_process)
    a = cd.asarray(np.arange(12, dtype=np.float64).reshape(3, 4)).copy()[:, ::-1]
    cd.reset_copy_stats()
    t = cd.to_torch(a)
    np.testing.assert_array_equal(t.numpy(), np.arange(12.0).reshape(3, 4)[:, ::-1])
    by = cd.copy_stats()["by_reason"]
    assert by.get("torch_layout", by.get("to_host"))["count"] == 1
    if UNIFIED:
        t2 = torch.from_dlpack(a)  # torch's own consumer gets a safe copy too (IS_COPIED)
        np.testing.assert_array_equal(t2.numpy(), t.numpy())


def test_torch_consumer_of_device_array():
    a = cd.asarray(np.arange(6, dtype=np.float32).reshape(2, 3)).copy()
    if UNIFIED:
        t = torch.from_dlpack(a)
        np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
        assert t.data_ptr() == a.ptr
        t[1, 1] = -1
        assert a[1, 1].item() == -1
    else:  # discrete: a CPU build of torch cannot take kDLExtDev memory (it raises); a host copy works
        gc.collect()
        c0 = _native.counters()
        with pytest.raises(Exception):
            torch.from_dlpack(a)
        gc.collect()
        c1 = _native.counters()
        assert c1["exports"] - c0["exports"] == c1["export_deleter_calls"] - c0["export_deleter_calls"]
        t2 = torch.from_dlpack(a.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
        np.testing.assert_array_equal(t2.numpy(), np.arange(6).reshape(2, 3))


def test_torch_readonly_flag_is_ignored_by_torch():  # torch 2.13, a documented third-party behaviour
    n = np.arange(3.0)
    n.flags.writeable = False
    a = cd.asarray(n)
    assert a.readonly
    if UNIFIED:
        with pytest.warns(UserWarning, match="read-only"):   # as torch.from_numpy warns
            t = cd.to_torch(a)
        assert t.data_ptr() == n.ctypes.data  # torch takes it, and would let you write (do not)


# -- TensorFlow -------------------------------------------------------------------------------------

def test_tf_takes_legacy_capsules_only():  # tensorflow#61769
    a = cd.asarray(np.arange(4, dtype=np.float32)).copy()
    with pytest.raises(TypeError):
        tf.experimental.dlpack.from_dlpack(a)
    t = tf.experimental.dlpack.from_dlpack(a.__dlpack__() if UNIFIED else a.__dlpack__(dl_device=(1, 0)))
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
    b = cd.asarray(t)
    assert b.readonly  # legacy import
    if UNIFIED:
        assert ptr_of("tf", t) == a.ptr == b.ptr


def test_tf_unaligned_and_gapped_views_are_copied_aligned():  # P1 (the abort is in test_dlpack_process)
    a = cd.asarray(np.arange(64, dtype=np.float32).reshape(4, 16)).copy()
    cd.reset_copy_stats()
    for view in (a[:, 1:], a[:, ::2], a.T, a[::-1]):
        t = cd.to_tf(view)
        assert ptr_of("tf", t) % 64 == 0
        np.testing.assert_allclose(float(tf.reduce_sum(t + 1)), float(cd.to_numpy(view, copy=True).sum() + view.size))
    by = cd.copy_stats()["by_reason"]
    assert by.get("tf_layout", {}).get("count", 0) + by.get("to_host", {}).get("count", 0) == 4


def test_tf_bad_inputs():
    with pytest.raises(TypeError, match="string"):
        cd.asarray(tf.constant(["a", "b"]))  # before TF could abort (P2); also run in a subprocess
    with pytest.raises(TypeError, match="Ragged"):
        cd.from_tf(tf.ragged.constant([[1], [2, 3]]))
    v = tf.Variable([1.0, 2.0])
    assert cd.from_tf(v).tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="expected a tf.Tensor"):
        cd.from_tf(np.zeros(2))

    @tf.function
    def f(x):
        cd.asarray(x)
        return x
    with pytest.raises(TypeError, match="symbolic"):
        f(tf.constant([1.0]))
    assert_usable()


# -- JAX ----------------------------------------------------------------------------------------------

def test_jax_layouts():  # P11, jax#29810
    a = cd.asarray(np.arange(24, dtype=np.float32).reshape(4, 6)).copy()
    cd.reset_copy_stats()
    x = cd.to_jax(a.T)  # a permutation of a compact layout: zero-copy
    np.testing.assert_array_equal(np.asarray(x), np.arange(24.0).reshape(4, 6).T)
    if UNIFIED:
        assert x.unsafe_buffer_pointer() == a.ptr and cd.copy_stats()["count"] == 0
    for view in (a[:, ::2], a[::-1], a[:, 1:]):  # gaps, negative strides, unaligned: copied by canna
        np.testing.assert_array_equal(np.asarray(cd.to_jax(view)), cd.to_numpy(view, copy=True))
    by = cd.copy_stats()["by_reason"]
    assert by.get("jax_layout", {}).get("count", 0) + by.get("to_host", {}).get("count", 0) >= 3
    if UNIFIED:
        y = jax.dlpack.from_dlpack(cd.zeros(8))  # JAX's own consumer, legacy capsule
        assert np.asarray(y).tolist() == [0.0] * 8


def test_jax_64bit_and_tracers():
    a = cd.asarray(np.arange(4, dtype=np.float64))
    x = cd.to_jax(a)  # narrowed to float32 by JAX unless jax_enable_x64 (a copy JAX makes)
    np.testing.assert_array_equal(np.asarray(x, dtype=np.float64), [0, 1, 2, 3])

    @jax.jit
    def f(v):
        cd.asarray(v)
        return v
    with pytest.raises(TypeError, match="tracers"):
        f(jnp.ones(2))


# -- every dtype, every framework, zero-size and 0-d ----------------------------------------------

SUPPORTED = {
    "torch": ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
              "complex64", "complex128"],
    "tf": ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
           "complex64", "complex128"],
    "numpy": ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
              "complex64", "complex128"],
    "jax": ["bool", "int8", "int16", "int32", "uint8", "float16", "bfloat16", "float32", "complex64"],
}


@pytest.mark.parametrize("fw", ["torch", "tf", "numpy", "jax"])
def test_all_dtypes_roundtrip(fw):
    import ml_dtypes  # noqa: F401
    rng = np.random.default_rng(1)
    for name in SUPPORTED[fw]:
        dt = cd.dtype(name)
        ref = (rng.standard_normal((3, 5)) * 40).astype(dt.numpy)
        a = cd.asarray(ref).copy()
        out = consume(fw, a)
        host = np.asarray(out.float() if (fw == "torch" and name == "bfloat16") else out)
        np.testing.assert_array_equal(host.astype(ref.dtype) if name == "bfloat16" else host, ref, err_msg=name)
        back = cd.asarray(out)
        assert back.dtype is dt, (fw, name, back.dtype)
        np.testing.assert_array_equal(back.numpy(), ref, err_msg=name)
        if UNIFIED:
            assert back.ptr == a.ptr, (fw, name)


def test_bool_is_kdlbool_everywhere():  # pytorch#114673, jax#19352
    ref = np.array([[1, 0, 1], [1, 0, 1]], dtype=bool)
    a = cd.asarray(ref).copy()
    assert _native.capsule_info(a.__dlpack__())["dtype"] == (6, 8, 1)
    for fw in ("torch", "tf", "numpy", "jax"):
        out = consume(fw, a)
        np.testing.assert_array_equal(np.asarray(out), ref)
        assert cd.asarray(out).dtype is cd.bool
    for producer in (torch.tensor(ref), tf.constant(ref), jnp.asarray(ref), ref):
        assert cd.asarray(producer).dtype is cd.bool


@pytest.mark.parametrize("fw", ["torch", "tf", "numpy", "jax"])
def test_zero_size_and_zero_d(fw):  # pytorch#117273, DLPack 1.3's 0-d convention
    gc.collect()
    c0 = _native.counters()
    for shape in [(0,), (0, 3), (2, 0)]:
        a = cd.empty(shape, cd.float32)
        out = consume(fw, a)
        assert tuple(out.shape) == shape
        assert cd.asarray(out).shape == shape
    z = cd.full((), 3.5, cd.float32)
    out = consume(fw, z)
    assert tuple(out.shape) == () and float(np.asarray(out)) == 3.5
    assert cd.asarray(out).item() == 3.5
    del out, z
    gc.collect()
    c1 = _native.counters()
    assert c1["exports"] - c0["exports"] == c1["export_deleter_calls"] - c0["export_deleter_calls"]


# -- leaks ---------------------------------------------------------------------------------------------

def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("fw", ["torch", "tf", "numpy", "jax"])
def test_leak_10000_round_trips(fw):  # pytorch#9261
    n = int(os.environ.get("CANNA_TEST_LEAK_ROUNDS", "10000"))
    to = {"torch": cd.to_torch, "tf": cd.to_tf, "numpy": cd.to_numpy, "jax": cd.to_jax}[fw]
    for _ in range(200):  # warm up allocator caches
        cd.asarray(to(cd.empty(1 << 18, cd.float32)))
    gc.collect()
    c0, rss0 = _native.counters(), _rss()
    src = None
    for i in range(n):
        if i % 10 == 0:  # a fresh 1 MiB buffer every 10 rounds: 1 GiB of RSS if owners leaked
            src = cd.empty(1 << 18, cd.float32)
        back = cd.asarray(to(src))
        if UNIFIED:
            assert back.ptr == src.ptr
        del back
    del src
    gc.collect()
    c1, rss1 = _native.counters(), _rss()
    exports = c1["exports"] - c0["exports"]
    imports = c1["imports"] - c0["imports"]
    # unified: one export and one import per round trip; discrete: host copies, NumPy's is a plain array
    assert exports >= n or (not UNIFIED and fw == "numpy")
    assert imports >= n
    assert c1["export_deleter_calls"] - c0["export_deleter_calls"] == exports
    assert c1["import_deleter_calls"] - c0["import_deleter_calls"] == imports
    from acl_rt._lib import backend
    if not (backend().is_sim and backend().lib.aclsimGetCheckMode()):  # memcheck quarantines freed memory
        assert rss1 - rss0 < 20 << 20, f"RSS grew by {(rss1 - rss0) >> 20} MiB"


# -- deleters from other threads --------------------------------------------------------------------

@pytest.mark.parametrize("fw", ["torch", "tf", "jax", "numpy"])
def test_framework_drops_our_memory_in_worker_thread(fw):  # numpy#22507
    gc.collect()
    c0 = _native.counters()
    to = {"torch": cd.to_torch, "tf": cd.to_tf, "numpy": cd.to_numpy, "jax": cd.to_jax}[fw]
    holder = [to(cd.zeros(4096))]
    t = threading.Thread(target=holder.clear)
    t.start()
    t.join()
    gc.collect()
    c1 = _native.counters()
    exports = c1["exports"] - c0["exports"]
    assert c1["export_deleter_calls"] - c0["export_deleter_calls"] == exports
    assert exports >= 1 or (not UNIFIED and fw == "numpy")  # discrete to_numpy: a plain NumPy copy
    assert c1["export_refs_leaked"] == c0["export_refs_leaked"]
    assert_usable()
