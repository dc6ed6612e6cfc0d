"""The caching allocator: stats that add up, stream-ordered reuse, merging, the OOM ladder,
threads, limits, hooks, bad input."""
from __future__ import annotations

import gc
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acl_rt
from acl_rt import _native
from acl_rt._lib import backend, ffi
from conftest import assert_usable

MiB = 1 << 20
POOLS = ("all", "small_pool", "large_pool")
STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
         "inactive_split_bytes", "requested_bytes")


def check_consistent(pool, live: dict):
    """Every invariant between the statistics, the snapshot and the live buffers."""
    s = pool.stats()
    for stat in STATS:
        for m in ("current", "allocated", "freed"):
            assert s[f"{stat}.all.{m}"] == s[f"{stat}.small_pool.{m}"] + s[f"{stat}.large_pool.{m}"], (stat, m)
        for p in POOLS:
            assert s[f"{stat}.{p}.current"] == s[f"{stat}.{p}.allocated"] - s[f"{stat}.{p}.freed"], (stat, p)
            assert 0 <= s[f"{stat}.{p}.current"] <= s[f"{stat}.{p}.peak"], (stat, p)
    assert s["allocation.all.current"] == len(live)
    assert s["requested_bytes.all.current"] == sum(b.size for b in live.values())
    snap = pool.snapshot()
    blocks = [b for seg in snap for b in seg["blocks"]]
    # a live buffer holds its rounded size, or a whole block when the rest was too small to split
    assert s["allocated_bytes.all.current"] == sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    assert s["allocated_bytes.all.current"] >= sum(_native.round_size(b.size) for b in live.values())
    assert s["segment.all.current"] == len(snap) == s["num_device_alloc"] - s["num_device_free"]
    assert s["reserved_bytes.all.current"] == sum(seg["total_size"] for seg in snap)
    for seg in snap:   # blocks tile their segment exactly
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
    inactive = [b for b in blocks if b["state"] == "inactive"]
    assert s["active_bytes.all.current"] == sum(b["size"] for b in blocks if b["state"] != "inactive")
    assert s["reserved_bytes.all.current"] == s["active_bytes.all.current"] + sum(b["size"] for b in inactive)
    split = [b for seg in snap for b in seg["blocks"] if b["state"] == "inactive" and len(seg["blocks"]) > 1]
    assert s["inactive_split_bytes.all.current"] == sum(b["size"] for b in split)
    assert s["inactive_split.all.current"] == len(split)
    allocated = {b["address"]: b for b in blocks if b["state"] == "active_allocated"}
    assert set(allocated) == {b.ptr for b in live.values()}
    for b in live.values():
        assert allocated[b.ptr]["requested_size"] == b.size


@pytest.fixture
def streams(acl):
    ss = [acl.Device(0).create_stream() for _ in range(2)]
    yield ss
    for s in ss:
        s.synchronize()
        s.close()


def delay(stream, us, engine=0, cores=0):
    assert backend().lib.aclsimLaunchDelay(stream._handle("t"), us, engine, cores) == 0


# -- property test ----------------------------------------------------------------------------------

SIZES = st.one_of(st.integers(1, 4096), st.integers(4096, 2 * MiB), st.integers(2 * MiB, 24 * MiB))
OPS = st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "alloc", "free", "free", "record", "empty"]),
                         SIZES, st.integers(0, 1), st.integers(0, 10**6)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_stats_add_up_after_random_sequences(streams, ops):
    pool = acl_rt.MemoryPool(0)   # a private pool: its statistics start at zero
    live = {}
    for op, size, si, pick in ops:
        if op == "alloc":
            b = pool.allocate(size, stream=streams[si])
            live[b.ptr] = b
        elif op == "free" and live:
            ptr = sorted(live)[pick % len(live)]
            live.pop(ptr).close()
        elif op == "record" and live:
            live[sorted(live)[pick % len(live)]].record_stream(streams[si])
        elif op == "empty":
            pool.empty_cache()
        check_consistent(pool, live)
    ptrs = sorted((b.ptr, b.ptr + b.size) for b in live.values())
    assert all(a[1] <= b[0] for a, b in zip(ptrs, ptrs[1:]))   # live buffers never overlap
    for b in list(live.values()):
        b.close()
    live.clear()
    for s in streams:
        s.synchronize()
    pool.empty_cache()
    check_consistent(pool, live)
    s = pool.stats()
    assert s["reserved_bytes.all.current"] == 0 and s["active_bytes.all.current"] == 0
    pool._shutdown()


# -- stream order -----------------------------------------------------------------------------------

def test_same_stream_reuse_is_immediate_even_while_busy(acl, streams):
    s1 = streams[0]
    a = acl.alloc(MiB, stream=s1)
    p = a.ptr
    delay(s1, 200_000)        # s1 is busy for 200 ms
    a.close()
    b = acl.alloc(MiB, stream=s1)
    assert b.ptr == p         # later work on s1 runs after everything that used the block
    assert not s1.query()
    b.close()


def test_other_stream_reuses_only_after_the_work_finished(acl, streams):
    s1, s2 = streams
    a = acl.alloc(12 * MiB, stream=s1)     # a segment of its own, never split
    p = a.ptr
    delay(s1, 300_000)
    a.close()
    b = acl.alloc(12 * MiB, stream=s2)
    assert b.ptr != p         # s1 still runs work that may use the block
    s1.synchronize()
    c = acl.alloc(12 * MiB, stream=s2)
    assert c.ptr == p         # s1 is idle: the block is safe for s2
    b.close(), c.close()


def _race(acl, streams, record: bool):
    """Free a buffer that another stream still writes (like a kernel would, through the raw
    pointer), allocate again, write, and return (same pointer?, what the new owner reads)."""
    s1, s2 = streams
    L = backend().lib
    n = 4096
    buf = acl.alloc(n, stream=s1)
    buf.fill(0, stream=s1)
    s1.synchronize()
    p = buf.ptr
    delay(s2, 200_000)
    assert L.aclrtMemsetAsync(ffi.cast("void *", p), n, 0xAA, n, s2._handle("t")) == 0   # s2 writes later
    if record:
        buf.record_stream(s2)
    buf.close()
    new = acl.alloc(n, stream=s1)
    new.fill(0x55, stream=s1)
    s1.synchronize()
    s2.synchronize()
    data = new.tobytes(stream=s1)
    same = new.ptr == p
    new.close()
    return same, data


def test_record_stream_prevents_a_cross_stream_race(acl, streams):
    same, data = _race(acl, streams, record=False)
    assert same and data == b"\xaa" * 4096       # without the guard: s2's late write clobbers the new owner
    same, data = _race(acl, streams, record=True)
    assert not same and data == b"\x55" * 4096   # with record_stream the block waits for s2's event
    # once the event completed, the block is reusable again (polled lazily at the next allocation)
    again = [acl.alloc(4096, stream=streams[0]) for _ in range(8)]
    stats = acl.memory_stats()
    assert acl.MemoryPool  # the pool is the default resource
    assert acl.Device(0).memory_resource._core.info()["pending_events"] == 0
    for b in again:
        b.close()
    assert stats["num_sync_all_streams"] >= 0


def test_buffer_methods_record_their_stream(acl, streams):
    s1, s2 = streams
    buf = acl.alloc(4096, stream=s1)
    p = buf.ptr
    delay(s2, 200_000)
    buf.fill(7, stream=s2)                # fill on s2 marks s2 as a user
    buf.close()
    other = acl.alloc(4096, stream=s1)
    assert other.ptr != p                 # not handed out while s2's fill is pending
    s2.synchronize()
    other.close()


def test_closing_a_stream_keeps_its_cached_blocks_safe(acl):
    s = acl.Device(0).create_stream()
    b = acl.alloc(12 * MiB, stream=s)
    p = b.ptr
    delay(s, 200_000)
    b.close()
    s.close()                              # its queued work still runs
    s2 = acl.Device(0).create_stream()
    c = acl.alloc(12 * MiB, stream=s2)
    assert c.ptr != p
    acl.Device(0).synchronize()
    d = acl.alloc(12 * MiB, stream=s2)      # the event completed: any stream may take it now
    assert d.ptr == p
    c.close(), d.close()
    s2.close()


# -- merging, release --------------------------------------------------------------------------------

def test_fragmentation_is_merged_back(acl, streams):
    pool = acl.MemoryPool(0)
    s = streams[0]
    blocks = [pool.allocate(512 * 1024, stream=s) for _ in range(4)]   # one 2 MiB small segment
    base = blocks[0].ptr
    assert [b.ptr - base for b in blocks] == [i * 512 * 1024 for i in range(4)]
    blocks[1].close(), blocks[3].close()
    st = pool.stats()
    assert st["inactive_split_bytes.all.current"] == MiB and st["inactive_split.all.current"] == 2
    blocks[0].close()                      # merges with block 1
    st = pool.stats()
    assert st["inactive_split.all.current"] == 2 and st["inactive_split_bytes.all.current"] == 1536 * 1024
    blocks[2].close()                      # merges everything: the segment is whole again
    st = pool.stats()
    assert st["inactive_split.all.current"] == 0 and st["inactive_split_bytes.all.current"] == 0
    snap = pool.snapshot()
    assert len(snap) == 1 and [b["state"] for b in snap[0]["blocks"]] == ["inactive"]
    big = pool.allocate(MiB, stream=s)     # the merged space serves a request larger than any piece
    assert big.ptr == base
    big.close()
    assert pool.empty_cache() == 2 * MiB and pool.stats()["reserved_bytes.all.current"] == 0
    pool._shutdown()


def test_size_classes_follow_pytorch():
    assert [_native.round_size(n) for n in (1, 511, 512, 513, 1000)] == [512, 512, 512, 1024, 1024]
    assert _native.segment_size(1) == 2 * MiB and _native.segment_size(MiB) == 2 * MiB
    assert _native.segment_size(MiB + 1) == 20 * MiB and _native.segment_size(10 * MiB - 512) == 20 * MiB
    assert _native.segment_size(10 * MiB) == 10 * MiB and _native.segment_size(11 * MiB) == 12 * MiB


def test_large_blocks_are_not_shredded(acl, streams):
    pool = acl.MemoryPool(0)
    a = pool.allocate(19 * MiB + 512, stream=streams[0])   # 20 MiB segment, remainder < 1 MiB: no split
    snap = pool.snapshot()
    st = pool.stats()   # the whole block is allocated (PyTorch counts block sizes), the request is smaller
    assert len(snap[0]["blocks"]) == 1 and st["allocated_bytes.all.current"] == 20 * MiB
    assert st["requested_bytes.all.current"] == 19 * MiB + 512
    a.close()
    pool._shutdown()


# -- OOM ladder, limits ----------------------------------------------------------------------------

def test_oom_ladder_frees_the_cache_before_failing(py):
    py("""
        import gc, re, pytest, acl_rt
        MiB = 1 << 20
        d = acl_rt.Device(0)
        a = acl_rt.alloc(30 * MiB)
        a.close()                                   # cached: the device has 34 MiB left
        assert acl_rt.memory_reserved() == 30 * MiB
        b = acl_rt.alloc(40 * MiB)                  # fails at first, the ladder releases the cache
        st = acl_rt.memory_stats()
        assert st["num_alloc_retries"] == 1 and st["num_device_free"] == 1 and st["num_ooms"] == 0
        assert acl_rt.memory_reserved() == 40 * MiB
        # garbage: a buffer only a reference cycle holds is collected by the ladder's gc.collect()
        b.close()
        gc.disable()
        cyc = [acl_rt.alloc(50 * MiB)]
        cyc.append(cyc)
        del cyc
        c = acl_rt.alloc(50 * MiB)
        assert acl_rt.memory_stats()["num_alloc_retries"] == 4   # release+retry for the cycle, then release, gc
        gc.enable()
        with pytest.raises(acl_rt.OutOfMemoryError) as ei:
            acl_rt.alloc(40 * MiB)
        msg = str(ei.value)
        for part in ("tried to allocate 40.00 MiB (41943040 bytes)", "device 0", "allocated by this process's pool",
                     "reserved", "limit none", "free of 64.00 MiB"):
            assert part in msg, (part, msg)
        assert isinstance(ei.value, MemoryError) and ei.value.code == 207001
        assert acl_rt.memory_stats()["num_ooms"] == 1
        small = acl_rt.alloc(8 * MiB)               # everything that fits still works
        small.copy_from(b"z" * 100)
        assert small.tobytes()[:100] == b"z" * 100
        c.close(); small.close()
        with pytest.raises(acl_rt.OutOfMemoryError, match="larger than the device"):
            acl_rt.alloc(1 << 40)
        assert acl_rt.memory_stats()["num_oom_rejections"] == 1
        x = acl_rt.alloc(60 * MiB); x.close()
        """, env={"CANNA_SIM_HBM_SIZE": "64M"})


def test_memory_limit_takes_part_in_the_ladder(py):
    py("""
        import pytest, acl_rt
        MiB = 1 << 20
        acl_rt.set_memory_limit(32 * MiB)
        assert acl_rt.get_memory_limit() == 32 * MiB
        a = acl_rt.alloc(20 * MiB); a.close()        # 20 MiB cached
        b = acl_rt.alloc(24 * MiB)                   # 20 + 24 > 32: release the cache, then fits
        assert acl_rt.memory_stats()["num_alloc_retries"] == 1
        with pytest.raises(acl_rt.OutOfMemoryError, match=r"memory limit would be exceeded.*limit 32.00 MiB"):
            acl_rt.alloc(10 * MiB)
        with pytest.raises(acl_rt.InvalidArgumentError, match="below the 25165824 bytes allocated"):
            acl_rt.set_memory_limit(16 * MiB)
        assert acl_rt.get_memory_limit() == 32 * MiB  # unchanged
        acl_rt.set_memory_limit(0.5)                  # a fraction of the device's 128 MiB
        assert acl_rt.get_memory_limit() == 64 * MiB
        c = acl_rt.alloc(30 * MiB)
        acl_rt.set_memory_limit(None)
        assert acl_rt.get_memory_limit() is None
        b.close(); c.close()
        """, env={"CANNA_SIM_HBM_SIZE": "128M"})


def test_memory_limit_from_the_environment(py):
    py("""
        import pytest, acl_rt
        assert acl_rt.get_memory_limit() == 8 << 20
        with pytest.raises(acl_rt.OutOfMemoryError, match="memory limit"):
            acl_rt.alloc(10 << 20)
        """, env={"CANNA_MEMORY_LIMIT": "8M"})
    py("""
        import acl_rt
        assert acl_rt.get_memory_limit() == 32 << 20
        """, env={"CANNA_MEMORY_LIMIT": "25%", "CANNA_SIM_HBM_SIZE": "128M"})
    r = py("""
        import acl_rt
        try:
            acl_rt.alloc(10)
        except acl_rt.InvalidArgumentError as e:
            print("ERR", e)
        b = acl_rt.DeviceMemoryResource(0).allocate(10)   # the runtime itself still works
        print("OK")
        """, env={"CANNA_MEMORY_LIMIT": "lots"})
    assert "ERR" in r.stdout and "CANNA_MEMORY_LIMIT='lots'" in r.stdout and "OK" in r.stdout


# -- threads -----------------------------------------------------------------------------------------

def test_eight_threads_leave_consistent_stats(acl):
    pool = acl.MemoryPool(0)
    errors = []
    s0 = pool.stats()

    def worker(k):
        try:
            rng = random.Random(k)
            stream = acl.Device(0).create_stream() if k % 2 else None
            live = []
            for i in range(150):
                if live and rng.random() < 0.45:
                    b = live.pop(rng.randrange(len(live)))
                    assert b.tobytes(stream=stream)[:16] == bytes([k]) * 16   # nobody else wrote into it
                    b.close()
                else:
                    b = pool.allocate(rng.choice([100, 3000, 70_000, 600_000, 3 * MiB]), stream=stream)
                    b.copy_from(bytes([k]) * 16, stream=stream)
                    live.append(b)
            for b in live:
                b.close()
            if stream is not None:
                stream.synchronize()
                stream.close()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check_consistent(pool, {})
    s = pool.stats()
    assert s["allocation.all.allocated"] - s0["allocation.all.allocated"] == s["allocation.all.freed"] > 0
    pool.empty_cache()
    assert pool.stats()["reserved_bytes.all.current"] == 0
    pool._shutdown()


# -- the module functions, hooks, lifetime ---------------------------------------------------------

def test_module_functions(acl):
    acl.empty_cache()
    acl.reset_peak_memory_stats()
    base = acl.memory_allocated()
    b = acl.alloc(10_000)
    assert acl.memory_allocated() == base + 10_240
    assert acl.max_memory_allocated() >= base + 10_240
    assert acl.memory_reserved() >= acl.memory_allocated()
    b.close()
    assert acl.memory_allocated() == base
    acl.reset_peak_memory_stats()
    assert acl.max_memory_allocated() == base
    nested = acl.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == base
    stats = acl.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak", "active_bytes.large_pool.freed",
                "inactive_split_bytes.small_pool.allocated", "requested_bytes.all.current", "allocation.all.current",
                "segment.large_pool.peak", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                "num_sync_all_streams", "max_split_size", "oversize_allocations.current"):
        assert key in stats
    assert list(stats) == sorted(stats)
    text = acl.memory_summary()
    assert "Allocated memory" in text and "from small pool" in text and "Reserved segments" in text
    assert "from small pool" not in acl.memory_summary(abbreviated=True)
    acl.reset_accumulated_memory_stats()
    assert acl.memory_stats()["allocation.all.allocated"] == 0
    assert acl.empty_cache() >= 0
    assert isinstance(acl.memory_snapshot(), list)


def test_hooks(acl):
    events = []

    class Recorder(acl.MemoryHook):
        def malloc_preprocess(self, **kw): events.append(("malloc_pre", kw))
        def malloc_postprocess(self, **kw): events.append(("malloc_post", kw))
        def free_preprocess(self, **kw): events.append(("free_pre", kw))
        def free_postprocess(self, **kw): events.append(("free_post", kw))
        def alloc_postprocess(self, **kw): events.append(("alloc", kw))
        def dealloc_postprocess(self, **kw): events.append(("dealloc", kw))

    acl.empty_cache()
    with Recorder():
        b = acl.alloc(123 * MiB)
        ptr = b.ptr
        b.close()
        acl.empty_cache()
    names = [e[0] for e in events]
    assert names == ["malloc_pre", "alloc", "malloc_post", "free_pre", "free_post", "dealloc"]
    assert events[0][1] == {"device_id": 0, "size": 123 * MiB, "mem_size": 123 * MiB}
    assert events[1][1]["mem_size"] == 124 * MiB and events[2][1]["mem_ptr"] == ptr
    events.clear()
    acl.alloc(100).close()
    assert events == []                      # uninstalled: nothing is called


def test_debug_print_hook(acl):
    import io
    import json
    out = io.StringIO()
    with acl.DebugPrintHook(file=out):
        acl.alloc(1000).close()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["hook"] for x in lines][-2:] == ["malloc", "free"] and lines[-1]["mem_size"] == 1024


def test_finalize_releases_the_pool_and_keeps_live_buffers(py):
    py("""
        import acl_rt
        from acl_rt._lib import backend, ffi
        L = backend().lib
        st = ffi.new("aclsimDeviceStats *")
        keep = acl_rt.alloc(1 << 20)
        acl_rt.alloc(30 << 20).close()
        L.aclsimGetDeviceStats(0, st)
        assert st.memUsed >= 32 << 20
        ptr = keep.ptr
        acl_rt.finalize()
        L.aclsimGetDeviceStats(0, st)
        assert (2 << 20) <= st.memUsed < (3 << 20)   # the cached 30 MiB went back; the live segment stays
        del keep                                     # a no-op after finalize, never a crash
        acl_rt.init()
        b = acl_rt.alloc(1 << 20)
        b.copy_from(b"ok")
        assert b.tobytes()[:2] == b"ok"
        """)


def test_raw_resource_on_request_and_in_memcheck(py):
    py("""
        import acl_rt
        assert type(acl_rt.Device(0).memory_resource) is acl_rt.DeviceMemoryResource
        """, env={"CANNA_NO_MEMORY_CACHING": "1"})
    py("""
        import acl_rt
        assert type(acl_rt.Device(0).memory_resource) is acl_rt.DeviceMemoryResource
        """, env={"CANNA_SIM_CHECK": "1"})


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("size,exc,pattern", [
    (0, acl_rt.InvalidArgumentError, "size must be > 0"),
    (-5, acl_rt.InvalidArgumentError, "size must be > 0"),
    (1 << 63, acl_rt.InvalidArgumentError, "larger than any device"),
    (2.5, TypeError, "must be an int"),
    ("10", TypeError, "must be an int"),
    (True, TypeError, "must be an int"),
])
def test_bad_sizes(acl, size, exc, pattern):
    pool = acl.Device(0).memory_resource
    with pytest.raises(exc, match=pattern):
        acl.alloc(size)
    check_consistent(acl.MemoryPool(0), {})
    assert isinstance(pool, acl.MemoryPool)
    assert_usable()


def test_bad_frees_and_streams(acl, streams):
    pool = acl.MemoryPool(0)
    b = pool.allocate(1000, stream=streams[0])
    ptr = b.ptr
    b.close()
    b.close()                                        # idempotent on the buffer
    with pytest.raises(acl.InvalidArgumentError, match="not an allocated block of this pool"):
        pool.deallocate(ptr, 1000)                   # freed twice through the raw API
    with pytest.raises(acl.InvalidArgumentError, match="not an allocated block"):
        c = pool.allocate(4096, stream=streams[0])
        pool.deallocate(c.ptr + 512, 512)            # an interior pointer
    with pytest.raises(acl.InvalidArgumentError, match="was not allocated by this pool"):
        pool.deallocate(0xDEAD0000, 16)              # foreign
    c.close()
    with pytest.raises(TypeError, match="stream must be"):
        pool.allocate(10, stream=3)
    s = acl.Device(0).create_stream()
    s.close()
    with pytest.raises(acl.InvalidHandleError, match="destroyed"):
        pool.allocate(10, stream=s)
    with pytest.raises(TypeError, match="record_stream"):
        acl.alloc(10).record_stream("s")
    check_consistent(pool, {})
    pool._shutdown()
    with pytest.raises(acl.InvalidHandleError, match="finalized"):
        pool.allocate(10, stream=streams[0])
    assert_usable()


@pytest.mark.parametrize("limit,exc,pattern", [
    (-1, acl_rt.InvalidArgumentError, "must be > 0"),
    (0, acl_rt.InvalidArgumentError, "must be > 0"),
    (1.5, acl_rt.InvalidArgumentError, r"fraction must be in \(0, 1\]"),
    (0.0, acl_rt.InvalidArgumentError, "fraction"),
    (float("nan"), acl_rt.InvalidArgumentError, "fraction"),
    ("1 gigabyte", acl_rt.InvalidArgumentError, "expected bytes"),   # strings: CANNA_MEMORY_LIMIT's forms
    ([1 << 30], TypeError, "limit must be"),
    (True, TypeError, "limit must be"),
])
def test_bad_limits(acl, limit, exc, pattern):
    with pytest.raises(exc, match=pattern):
        acl.set_memory_limit(limit)
    assert acl.get_memory_limit() is None
    assert_usable()


def test_limit_below_current_use(acl):
    b = acl.alloc(4 * MiB)
    with pytest.raises(acl.InvalidArgumentError, match="below the .* bytes allocated"):
        acl.set_memory_limit(MiB)
    assert acl.get_memory_limit() is None
    b.close()
    assert_usable()


def test_unknown_device(acl):
    for fn in (acl.memory_stats, acl.memory_allocated, acl.empty_cache, acl.memory_summary,
               lambda d: acl.set_memory_limit(1 << 30, device=d)):
        with pytest.raises(acl.InvalidArgumentError, match="out of range"):
            fn(7)
    assert_usable()
