"""HCCL collectives on the simulator (acl_rt.Communicator, acl_rt/_sim_hccl): every collective across
dtypes and reductions against NumPy (float64), from threads (HcclCommInitAll) and from processes
(HcclCommInitRootInfo with the root info in a file); dead and missing peers give errors, not hangs."""
import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Every rank computes every rank's input (seeded by rank), runs each collective and checks its own
# result against NumPy in float64. `check_all(comm)` raises AssertionError on a wrong value.
CHECKS = textwrap.dedent(r'''
    import numpy as np, acl_rt
    import ml_dtypes   # noqa: F401 - NumPy's "bfloat16"

    DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "int16", "uint16",
              "uint32", "uint64"]
    OPS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}

    def isfloat(dtype):
        return dtype == "bfloat16" or np.dtype(dtype).kind == "f"

    def data(rank, dtype, n, op="sum"):
        rng = np.random.default_rng(1000 + rank)
        if isfloat(dtype):
            lo, hi = (0.5, 1.5) if op == "prod" else (-4, 4)
            return rng.uniform(lo, hi, n).astype(dtype)
        lo, hi = (1, 4) if op == "prod" else (0 if np.dtype(dtype).kind == "u" else -20, 20)
        return rng.integers(lo, hi, n).astype(dtype)

    def tol(dtype, nterms):
        return {"float16": 2e-3 * nterms, "bfloat16": 8e-3 * nterms, "float32": 1e-6 * nterms}.get(dtype, 0)

    def expect_close(got, want, dtype, nterms=2, what=""):
        want = np.asarray(want)
        if isfloat(dtype):
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol(dtype, nterms),
                                       atol=tol(dtype, nterms), err_msg=what)
        else:   # integers wrap like the device's (two's complement)
            np.testing.assert_array_equal(got, want.astype(np.int64).astype(dtype), err_msg=what)

    def dev(x):   # (bytes: bfloat16 arrays have no buffer protocol)
        b = acl_rt.alloc(max(x.nbytes, 1)); b.copy_from(x.view(np.uint8)); return b

    def host(b, dtype, n):
        y = np.empty(n, dtype); b.copy_to(y.view(np.uint8)); return y

    def check_all(comm, n=3001):
        r, size = comm.rank, comm.size
        s = comm.device.create_stream()
        for dtype in DTYPES:
            for op, fn in OPS.items():
                xs = [data(k, dtype, n, op) for k in range(size)]
                want = fn(np.stack([x.astype(np.float64) for x in xs]), axis=0)
                src, out = dev(xs[r]), acl_rt.alloc(xs[r].nbytes)
                comm.all_reduce(src, out, n, dtype, op, stream=s).synchronize()
                expect_close(host(out, dtype, n), want, dtype, size, f"all_reduce {dtype} {op}")
                # reduce to the last rank; in place (send is recv) on the others is allowed too
                root = size - 1
                ev = comm.reduce(src, out if r == root else None, n, dtype, op, root=root, stream=s)
                ev.synchronize()
                if r == root:
                    expect_close(host(out, dtype, n), want, dtype, size, f"reduce {dtype} {op}")
                # reduce-scatter: block r of the reduction
                m = n // size + 1
                ys = [data(k + 7, dtype, m * size, op) for k in range(size)]
                full = fn(np.stack([y.astype(np.float64) for y in ys]), axis=0)
                rs = acl_rt.alloc(m * ys[r].itemsize)
                comm.reduce_scatter(dev(ys[r]), rs, m, dtype, op, stream=s).synchronize()
                expect_close(host(rs, dtype, m), full[r * m:(r + 1) * m], dtype, size, f"reduce_scatter {dtype} {op}")
            x = data(r, dtype, n)
            # all-gather
            g = acl_rt.alloc(x.nbytes * size)
            comm.all_gather(dev(x), g, n, dtype, stream=s).synchronize()
            np.testing.assert_array_equal(host(g, dtype, n * size), np.concatenate([data(k, dtype, n) for k in range(size)]))
            # broadcast from rank 1 (in place)
            b = dev(x)
            comm.broadcast(b, n, dtype, root=1, stream=s).synchronize()
            np.testing.assert_array_equal(host(b, dtype, n), data(1, dtype, n))
            # all-to-all: block d of rank k's input goes to rank d
            xa = [data(k + 3, dtype, n * size) for k in range(size)]
            a = acl_rt.alloc(xa[r].nbytes)
            comm.all_to_all(dev(xa[r]), a, n, dtype, stream=s).synchronize()
            np.testing.assert_array_equal(host(a, dtype, n * size),
                                          np.concatenate([xa[k][r * n:(r + 1) * n] for k in range(size)]))
        # point to point in a ring, sends and receives of one rank grouped (no deadlock), 3 MiB
        big = 3 * 1024 * 1024 // 4 + 5
        x = data(r, "float32", big)
        rb = acl_rt.alloc(x.nbytes)
        with acl_rt.hccl_group():
            comm.send(dev(x), big, "float32", (r + 1) % size, stream=s)
            comm.recv(rb, big, "float32", (r - 1) % size, stream=s)
        s.synchronize()
        np.testing.assert_array_equal(host(rb, "float32", big), data((r - 1) % size, "float32", big))
        # a large all-reduce spans many chunks of the shared segment
        big = 5 * 1024 * 1024 + 3
        xs = [data(k, "float32", big) for k in range(size)]
        out = acl_rt.alloc(xs[r].nbytes)
        comm.all_reduce(dev(xs[r]), out, big, "float32", stream=s).synchronize()
        expect_close(host(out, "float32", big), sum(x.astype(np.float64) for x in xs), "float32", size)
        comm.barrier(stream=s).synchronize()
        assert comm.async_error() == 0
        st = comm.stats()
        assert st["ops"] > 0 and st["bytes_moved"] > 0
''')


def test_collectives_threads(py):
    """HcclCommInitAll: 2 devices of one process, each rank driven by its own thread."""
    code = CHECKS + textwrap.dedent('''
        import threading
        comms = acl_rt.Communicator.init_all([0, 1])
        assert [c.rank for c in comms] == [0, 1] and all(c.size == 2 for c in comms)
        errors = []
        def work(c):
            try:
                with c.device:
                    check_all(c)
            except BaseException as e:
                errors.append(e)
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        if errors:
            raise errors[0]
        st = acl_rt.hccl_stats()
        assert [(s["device"], s["rank"], s["size"]) for s in st] == [(0, 0, 2), (1, 1, 2)], st
        assert all(s["ops"] > 50 and s["bytes_moved"] > 2**24 and s["wait_ns"] > 0 for s in st), st
        for c in comms:
            c.destroy()
        assert acl_rt.hccl_stats() == []
        print("ok")
    ''')
    r = py(code, env={"CANNA_SIM_DEVICES": "2"}, timeout=600)
    assert r.stdout.strip().endswith("ok")


RANK_MAIN = textwrap.dedent('''
    import os, sys, acl_rt
    rank, size, path = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), os.environ["ROOT_FILE"]
    acl_rt.Device(rank).set_current()
    info = acl_rt.root_info_from_file(path, rank)
    comm = acl_rt.Communicator.init(info, size, rank, device=rank)
    assert comm.rank == rank and comm.size == size
''')


def _spawn(code, rank, size, root_file, extra_env=None, stdin=None):
    env = dict(os.environ, CANNA_BACKEND="sim", CANNA_SIM_DEVICES=str(size), RANK=str(rank),
               WORLD_SIZE=str(size), ROOT_FILE=str(root_file), PYTHONPATH=str(REPO))
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(procs, timeout=600):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"rank process hung:\n{err[-3000:]}")
        outs.append((p.returncode, out, err))
    return outs


def test_collectives_processes(tmp_path):
    """HcclCommInitRootInfo: 2 processes, one device each, the root info through a file."""
    code = CHECKS + RANK_MAIN + "check_all(comm)\ncomm.destroy()\nprint('ok')\n"
    outs = _finish([_spawn(code, r, 2, tmp_path / "root") for r in range(2)])
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        assert out.strip().endswith("ok")


def _assert_survivor_saw_the_death(outs, *words_in_error):
    """Rank 1 exited with 3 mid-collective; rank 0's synchronize raised, its communicator's async
    error is HCCL_E_REMOTE (21) and the message says the peer died (and names ``words_in_error``)."""
    assert outs[1][0] == 3, outs[1][2][-3000:]
    rc, out, err = outs[0]
    assert rc == 0, err[-3000:]
    words = out.split()
    assert words[0] == "error", out
    assert int(words[2]) == 21, out      # HCCL_E_REMOTE
    assert "died" in out and all(w in out for w in words_in_error), out


def test_peer_killed_mid_collective(tmp_path):
    """Rank 1 dies while rank 0 waits in an all-reduce: rank 0's stream reports an error (the dead
    peer is noticed well before HCCL_EXEC_TIMEOUT, which bounds the wait anyway)."""
    code = RANK_MAIN + textwrap.dedent('''
        import numpy as np, time
        b = acl_rt.alloc(4096)
        s = comm.device.create_stream()
        comm.all_reduce(b, b, 1024, "float32", stream=s).synchronize()   # both ranks alive
        if rank == 1:
            os._exit(3)                                                    # dies before the 2nd one
        comm.all_reduce(b, b, 1024, "float32", stream=s)
        try:
            s.synchronize()
        except acl_rt.AclError as e:
            print("error", e.code, comm.async_error(), str(e).replace(chr(10), " "))
        else:
            print("no error")
    ''')
    outs = _finish([_spawn(code, r, 2, tmp_path / "root", {"HCCL_EXEC_TIMEOUT": "30"}) for r in range(2)],
                   timeout=120)
    _assert_survivor_saw_the_death(outs)


def test_exec_timeout(tmp_path):
    """A rank that never calls the collective: the other times out after HCCL_EXEC_TIMEOUT with
    HCCL_E_TIMEOUT (the process stays alive and usable)."""
    code = RANK_MAIN + textwrap.dedent('''
        import time
        b = acl_rt.alloc(4096)
        s = comm.device.create_stream()
        if rank == 0:
            comm.all_reduce(b, b, 1024, "float32", stream=s)
            try:
                s.synchronize()
            except acl_rt.AclError as e:
                print("error", comm.async_error(), "timed out" in str(e))
            s.synchronize()        # the sticky error was reported once; the stream is usable again
            try:                   # the communicator stays broken
                comm.barrier(stream=s)
            except acl_rt.HcclError as e:
                print("broken", e.code)
        else:
            time.sleep(4)
    ''')
    outs = _finish([_spawn(code, r, 2, tmp_path / "root", {"HCCL_EXEC_TIMEOUT": "1"}) for r in range(2)],
                   timeout=120)
    rc, out, err = outs[0]
    assert rc == 0, err[-3000:]
    assert "error 9 True" in out, out
    assert "broken 9" in out, out


def test_connect_timeout(tmp_path, py):
    """A rank that never arrives at init: HcclCommInitRootInfo fails with HCCL_E_TIMEOUT after
    HCCL_CONNECT_TIMEOUT, and no shared segment is left behind."""
    r = py(textwrap.dedent('''
        import acl_rt, os, glob
        info = acl_rt.hccl_get_root_info()
        try:
            acl_rt.Communicator.init(info, 2, 0, device=0)
        except acl_rt.HcclTimeoutError as e:
            print("timeout", e.code, e.name)
        print("left", len(glob.glob("/dev/shm/canna_hccl_%d_*" % os.getpid())))
    '''), env={"HCCL_CONNECT_TIMEOUT": "0.5"})
    assert "timeout 9 HCCL_E_TIMEOUT" in r.stdout
    assert "left 0" in r.stdout


def test_bad_arguments(py):
    r = py(textwrap.dedent('''
        import acl_rt, numpy as np
        (c,) = acl_rt.Communicator.init_all([0])
        b = acl_rt.alloc(64)
        def err(f, *a, **k):
            try:
                f(*a, **k)
            except (acl_rt.HcclError, ValueError, TypeError) as e:
                return type(e).__name__ + ":" + getattr(e, "name", "")
            return "none"
        print(err(c.all_reduce, b, b, 1000, "float32"))          # buffer too small
        print(err(c.all_reduce, b, b, 4, "complex64"))            # not an HCCL dtype
        print(err(c.all_reduce, b, b, 4, "float32", "avg"))       # unknown op
        print(err(c.broadcast, b, 4, "float32", root=3))          # root out of range
        print(err(c.all_reduce, 12345, 12345, 4, "float32"))      # not device memory... host in unified model
        print(err(acl_rt.Communicator.init, b"x", 2, 0))
        print(err(c.send, b, 4, "float32", 0))                    # to itself
        c.barrier().synchronize()
        c.destroy()
        print(err(c.barrier))
        # a single-rank communicator works
        (c,) = acl_rt.Communicator.init_all([0])
        x = np.arange(16, dtype=np.float32); b.copy_from(x)
        c.all_reduce(b, b, 16, "float32", "max").synchronize()
        y = np.empty_like(x); b.copy_to(y); print(bool((y == x).all()))
    '''))
    lines = r.stdout.split()
    assert lines[0] == "ValueError:"
    assert lines[1] == "TypeError:"
    assert lines[2] == "ValueError:"
    assert lines[3] == "HcclError:HCCL_E_PARA"
    assert lines[5] == "ValueError:"
    assert lines[6] == "HcclError:HCCL_E_PARA"
    assert lines[7] == "HcclError:HCCL_E_PARA"
    assert lines[8] == "True"


def test_ddp_two_processes_follow_single_process(tmp_path):
    """torchrun, 2 ranks on the "canna" backend, DistributedDataParallel under offload(): the loss
    curve is the 1-process doubled-batch curve, and the parameters are identical on both ranks."""
    pytest.importorskip("torch")
    import json

    import numpy as np
    import torch

    env = dict(os.environ, CANNA_BACKEND="sim", CANNA_SIM_DEVICES="2", PYTHONPATH=str(REPO))
    env.pop("CANNA_SIM_SHARED", None)
    demo = str(REPO / "tools" / "ddp_demo.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", demo,
           "--steps", "8", "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    r = subprocess.run([sys.executable, demo, "--single", "--steps", "8", "--out", str(tmp_path)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    single = np.array(json.loads((tmp_path / "single.json").read_text()), dtype=np.float64)
    for rank in range(2):
        losses = np.array(json.loads((tmp_path / f"rank{rank}.json").read_text()), dtype=np.float64)
        np.testing.assert_allclose(losses, single, rtol=1e-4, atol=1e-5)
    p0, p1, ps = (torch.load(tmp_path / f"{t}.pt") for t in ("rank0", "rank1", "single"))
    for k in p0:
        assert torch.equal(p0[k], p1[k]), k                    # bit-identical across ranks
        np.testing.assert_allclose(p0[k].double().numpy(), ps[k].double().numpy(), rtol=1e-4, atol=1e-5)


def test_array_level_collectives_on_framework_tensors(py):
    """canna_dl.distributed: torch tensors, NumPy arrays and canna DeviceArrays through DLPack
    (zero-copy in the unified memory model), one thread per rank."""
    pytest.importorskip("torch")
    r = py(textwrap.dedent('''
        import threading, numpy as np, torch, acl_rt, canna_dl, canna_dl.distributed as cd
        comms = acl_rt.Communicator.init_all([0, 1])
        out = {}
        def work(c):
            with c.device:
                t = torch.arange(10, dtype=torch.float32) * (c.rank + 1)
                cd.all_reduce(c, t, "sum").synchronize()                 # in place on the tensor
                a = np.full(6, c.rank + 1, dtype=np.int32)
                g = np.zeros(12, dtype=np.int32)
                cd.all_gather(c, a, g).synchronize()
                d = canna_dl.asarray(np.arange(4, dtype=np.float64) + 10 * c.rank)
                cd.broadcast(c, d, root=1).synchronize()
                rs = torch.zeros(5, dtype=torch.float16)
                cd.reduce_scatter(c, torch.ones(10, dtype=torch.float16) * (c.rank + 1), rs, "max").synchronize()
                out[c.rank] = (t.numpy().copy(), g.copy(), np.asarray(d.to_numpy() if hasattr(d, "to_numpy") else d), rs.numpy().copy())
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        for rank in (0, 1):
            t, g, d, rs = out[rank]
            assert (t == np.arange(10) * 3).all(), t
            assert (g == [1] * 6 + [2] * 6).all(), g
            assert (d == np.arange(4) + 10).all(), d
            assert (rs == 2).all(), rs
        print("ok")
    '''), env={"CANNA_SIM_DEVICES": "2"})
    assert r.stdout.strip().endswith("ok")


def test_skipped_collective_breaks_the_communicator(py):
    """A rank whose stream failed earlier skips its collective (the stream's sticky error): its peer
    gets HCCL_E_INTERNAL at once instead of waiting for HCCL_EXEC_TIMEOUT (HCCL_E_TIMEOUT, 9)."""
    r = py(textwrap.dedent('''
        import threading, acl_rt
        from acl_rt._lib import backend, ffi
        comms = acl_rt.Communicator.init_all([0, 1])
        res = {}
        def work(c):
            with c.device:
                s = c.device.create_stream()
                b = acl_rt.alloc(4096)
                if c.rank == 0:
                    backend().lib.aclsimLaunchFault(ffi.cast("aclrtStream", s.handle), 507000, b"injected")
                try:
                    c.all_reduce(b, b, 1024, "float32", stream=s)
                except acl_rt.HcclError as e:      # rank 0 already broke the communicator
                    res[c.rank] = ("at enqueue", e.code)
                    return
                try:
                    s.synchronize()
                except acl_rt.AclError as e:
                    res[c.rank] = (e.code, c.async_error())
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(res[0], res[1])
    '''), env={"CANNA_SIM_DEVICES": "2", "HCCL_EXEC_TIMEOUT": "600"}, timeout=300)
    assert r.stdout.startswith("(507000, 4) "), r.stdout
    assert r.stdout.split(") (")[1].strip() in ("507057, 4)", "'at enqueue', 4)"), r.stdout


def test_bad_timeout_variable(py):
    r = py(textwrap.dedent('''
        import acl_rt
        try:
            acl_rt.Communicator.init_all([0])
        except acl_rt.HcclError as e:
            print(e.name, "HCCL_EXEC_TIMEOUT" in str(e))
    '''), env={"HCCL_EXEC_TIMEOUT": "soon"})
    assert r.stdout.strip() == "HCCL_E_PARA True"


def test_collective_stats_in_monitor_and_prometheus(py, tmp_path):
    """Each rank's operations, bytes moved and time waited reach acl_rt.monitor (through the
    published per-process record) and the Prometheus exporter."""
    pytest.importorskip("prometheus_client")
    r = py(textwrap.dedent('''
        import threading, acl_rt, acl_rt.monitor as mon, acl_rt.smi as smi
        from prometheus_client import CollectorRegistry, generate_latest
        comms = acl_rt.Communicator.init_all([0, 1])
        def work(c):
            with c.device:
                b = acl_rt.alloc(1 << 20)
                c.all_reduce(b, b, 1 << 18, "float32").synchronize()
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        mon.publish_pool_stats()
        rows = sorted((c["device_id"], c["rank"], c["ops"], c["bytes_moved"] > 0) for c in mon.collective_stats())
        print(rows)
        reg = CollectorRegistry(); reg.register(smi.make_collector())
        text = generate_latest(reg).decode()
        print(sum(1 for l in text.splitlines() if l.startswith("canna_hccl_bytes_moved_total{")))
    '''), env={"CANNA_SIM_DEVICES": "2", "CANNA_STATS_DIR": str(tmp_path)})
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "[(0, 0, 1, True), (1, 1, 1, True)]", r.stdout
    assert lines[1] == "2", r.stdout


@pytest.mark.parametrize("memory", ["unified", "discrete"])
def test_torch_distributed_collectives(tmp_path, memory):
    """The "canna" backend's collectives through torch.distributed (2 processes under torchrun), on
    CPU tensors: their own memory in the unified model, staged through device copies in the
    discrete one (where the results used to stay in the device copy: the tensors kept their old
    values)."""
    pytest.importorskip("torch")
    script = tmp_path / "coll.py"
    script.write_text(textwrap.dedent('''
        import os, torch, torch.distributed as dist
        import canna_dl.distributed  # registers "canna"
        dist.init_process_group("canna")
        r, n = dist.get_rank(), dist.get_world_size()
        t = torch.arange(6, dtype=torch.float32) + r
        dist.all_reduce(t, op=dist.ReduceOp.MAX); assert t.tolist() == [1, 2, 3, 4, 5, 6], t
        t = torch.full((3,), float(r + 1)); dist.all_reduce(t, op=dist.ReduceOp.PRODUCT); assert (t == 2).all(), t
        t = torch.tensor([r * 10, r * 10 + 1], dtype=torch.int64); dist.broadcast(t, src=1); assert t.tolist() == [10, 11]
        outs = [torch.zeros(2, dtype=torch.int32) for _ in range(n)]
        dist.all_gather(outs, torch.tensor([r, r], dtype=torch.int32)); assert [o.tolist() for o in outs] == [[0, 0], [1, 1]]
        out = torch.zeros(4); dist.all_gather_into_tensor(out, torch.full((2,), float(r))); assert out.tolist() == [0, 0, 1, 1]
        o = torch.zeros(2); dist.reduce_scatter_tensor(o, torch.arange(4, dtype=torch.float32)); assert o.tolist() == [2 * 2 * r, 2 * (2 * r + 1)], o
        o = torch.zeros(4, dtype=torch.float64); dist.all_to_all_single(o, torch.arange(4, dtype=torch.float64) + 10 * r)
        assert o.tolist() == ([0, 1, 10, 11] if r == 0 else [2, 3, 12, 13]), o
        x = torch.zeros(3)[::1]
        if r == 0:
            dist.send(torch.tensor([7., 8., 9.]), dst=1)
        else:
            dist.recv(x, src=0); assert x.tolist() == [7, 8, 9]
        nc = torch.zeros(4, 2).t()               # not contiguous: through a contiguous copy
        nc += r + 1; dist.all_reduce(nc); assert (nc == 3).all()
        dist.barrier()
        import canna_dl, canna_dl.distributed as cd
        if canna_dl.memory_model() == "discrete":   # the array-level functions refuse host memory there
            try:
                cd.all_reduce(cd.torch_communicator(), torch.ones(3))
            except canna_dl.CopyRequiredError as e:
                assert "discrete" in str(e), e
            else:
                raise AssertionError("host memory accepted in the discrete model")
        dist.destroy_process_group()
        os.write(1, f"ok {r}\\n".encode())   # one write: both ranks share stdout
    '''))
    env = dict(os.environ, CANNA_BACKEND="sim", CANNA_SIM_DEVICES="2", CANNA_SIM_MEMORY=memory,
               PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "ok 0" in r.stdout and "ok 1" in r.stdout


def test_all_reduce_chunk_boundaries_three_ranks_in_place(py):
    """All-reduce is a pipelined reduce-scatter + all-gather (each rank reduces one part of every
    chunk): 3 ranks (uneven parts), in place, counts around the chunk size (3 parts of 256 KiB),
    every dtype family; each rank's result equals NumPy's and is bit-identical across ranks."""
    code = CHECKS + textwrap.dedent('''
        import threading
        comms = acl_rt.Communicator.init_all([0, 1, 2])
        CASES = [("float32", "sum"), ("float32", "max"), ("float16", "sum"), ("float64", "prod"),
                 ("int8", "prod"), ("int64", "min"), ("uint8", "sum")]
        results, errors = {}, []
        def work(c):
            try:
                with c.device:
                    s = c.device.create_stream()
                    for dtype, op in CASES:
                        chunk = 3 * (256 << 10) // np.dtype(dtype).itemsize
                        for n in (1, 2, 5, chunk - 1, chunk, chunk + 1, 2 * chunk + 7):
                            xs = [data(k, dtype, n, op) for k in range(3)]
                            b = dev(xs[c.rank])
                            c.all_reduce(b, b, n, dtype, op, stream=s).synchronize()
                            got = host(b, dtype, n)
                            want = OPS[op](np.stack([x.astype(np.float64) for x in xs]), axis=0)
                            expect_close(got, want, dtype, 3, f"{dtype} {op} n={n}")
                            results[(c.rank, dtype, op, n)] = got.tobytes()
            except BaseException as e:
                errors.append(e)
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        if errors:
            raise errors[0]
        keys = {k[1:] for k in results}
        assert all(results[(0,) + k] == results[(1,) + k] == results[(2,) + k] for k in keys)
        for c in comms:
            c.destroy()
        print("ok", len(keys))
    ''')
    r = py(code, env={"CANNA_SIM_DEVICES": "3"}, timeout=600)
    assert r.stdout.strip() == "ok 49", r.stdout



def test_smi_shows_each_rank_process_on_its_device(tmp_path):
    """2 rank processes hold a communicator (rank 0 allocated no device memory, so it has no pool
    to publish): canna-smi, run while they live, lists each PID on its own device and each rank's
    HCCL counters, in JSON, the table and CSV."""
    code = RANK_MAIN + textwrap.dedent('''
        import acl_rt.monitor
        if rank == 1:
            b = acl_rt.alloc(1 << 20)
        comm.barrier().synchronize()
        acl_rt.monitor.publish_pool_stats()
        print(os.getpid(), flush=True)
        sys.stdin.readline()          # hold the communicator until the test has looked
        comm.destroy()
    ''')
    env = {"CANNA_STATS_DIR": str(tmp_path / "stats"), "HCCL_CONNECT_TIMEOUT": "120"}
    procs = [_spawn(code, r, 2, tmp_path / "root", env, stdin=subprocess.PIPE) for r in range(2)]
    try:
        pids = [int(p.stdout.readline() or 0) for p in procs]
        assert all(pids), [p.stderr.read()[-3000:] for p in procs if p.poll() is not None]
        smi_env = dict(os.environ, CANNA_BACKEND="sim", CANNA_SIM_DEVICES="2", PYTHONPATH=str(REPO), **env)

        def smi(*args):
            r = subprocess.run([sys.executable, "-m", "acl_rt.smi", *args], cwd=REPO, env=smi_env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            return r.stdout
        doc = json.loads(smi("--json"))
        mine = [(p["device_id"], p["pid"]) for p in doc["processes"] if p["pid"] in pids]
        assert sorted(mine) == [(0, pids[0]), (1, pids[1])], doc["processes"]
        cols = {c["pid"]: c for c in doc["collectives"]}
        assert [(cols[pid]["device_id"], cols[pid]["rank"], cols[pid]["size"]) for pid in pids] == [(0, 0, 2), (1, 1, 2)]
        assert all(cols[pid]["ops"] >= 1 for pid in pids), cols
        table = smi()
        assert "HCCL communicators" in table and max(len(ln) for ln in table.splitlines()) <= 100
        rows = [ln for ln in table.splitlines() if any(f" {pid} " in ln for pid in pids)]
        assert len(rows) >= 4, table   # each PID in the process table and in the HCCL table
        csv_rows = list(csv.DictReader(io.StringIO(smi("--csv", "--section", "collectives"))))
        assert sorted((int(r["device_id"]), int(r["pid"]), int(r["rank"])) for r in csv_rows
                      if int(r["pid"]) in pids) == [(0, pids[0], 0), (1, pids[1], 1)]
    finally:
        for p in procs:
            try:
                p.stdin.write("\n")
                p.stdin.flush()
            except OSError:
                pass
        outs = _finish(procs)
    for rc, _out, err in outs:
        assert rc == 0, err[-3000:]


# Each rank makes a different call in each case; then both make the same all-reduce, which must
# work (a disagreement fails the call on every rank, not the communicator). HCCL_EXEC_TIMEOUT is
# short so that a missing check fails by timing out (a different message) instead of hanging.
MISMATCH = textwrap.dedent(r'''
    import numpy as np, acl_rt
    CASES = {
        "count": lambda c, b, s, r: c.all_reduce(b, b, 1024 if r == 0 else 2048, "float32", stream=s),
        "op": lambda c, b, s, r: c.all_reduce(b, b, 1024, "float32", "sum" if r == 0 else "max", stream=s),
        "dtype": lambda c, b, s, r: c.all_reduce(b, b, 1024, "float32" if r == 0 else "int32", stream=s),
        "kind": lambda c, b, s, r: (c.all_reduce(b, b, 1024, "float32", stream=s) if r == 0
                                    else c.broadcast(b, 1024, "float32", root=0, stream=s)),
        "root": lambda c, b, s, r: c.broadcast(b, 1024, "float32", root=r, stream=s),
        "barrier": lambda c, b, s, r: (c.barrier(stream=s) if r == 0
                                       else c.all_gather(b, b, 512, "float32", stream=s)),
    }
    def mismatches(c, names):
        s = c.device.create_stream()
        b = acl_rt.alloc(1 << 16)
        b2 = acl_rt.alloc(4096)
        out = []
        for name in names:
            CASES[name](c, b, s, c.rank)
            try:
                s.synchronize()
                out.append((name, "no error"))
            except acl_rt.AclError as e:
                out.append((name, str(e).replace("\n", " ")))
            x = np.full(1024, c.rank + 1, np.float32)
            b2.copy_from(x)
            c.all_reduce(b2, b2, 1024, "float32", stream=s).synchronize()   # still usable
            b2.copy_to(x)
            assert (x == 3).all(), x
        assert c.async_error() == 0
        return out
''')


def _check_mismatch_messages(results):
    """results: {rank: [(case, message)]}; every rank failed every case naming both calls."""
    for rank, rows in results.items():
        for name, msg in rows:
            assert "HCCL error 1 (parameter error)" in msg, (rank, name, msg)
            assert "rank 0 called" in msg and "rank 1 called" in msg, (rank, name, msg)
            assert "timed out" not in msg, msg
        msgs = dict(rows)
        assert "count=1024" in msgs["count"] and "count=2048" in msgs["count"], msgs["count"]
        assert "sum" in msgs["op"] and "max" in msgs["op"], msgs["op"]
        assert "fp32" in msgs["dtype"] and "int32" in msgs["dtype"], msgs["dtype"]
        assert "HcclAllReduce(" in msgs["kind"] and "HcclBroadcast(" in msgs["kind"], msgs["kind"]
        assert "root=0" in msgs["root"] and "root=1" in msgs["root"], msgs["root"]
        assert "HcclBarrier()" in msgs["barrier"] and "HcclAllGather(" in msgs["barrier"], msgs["barrier"]


def test_mismatched_collectives_fail_every_thread_rank(py):
    """Ranks (threads) calling different collectives (count, op, dtype, kind, root) fail at once with
    HCCL_E_PARA on every rank, naming both calls; the communicator keeps working."""
    code = MISMATCH + textwrap.dedent('''
        import threading, json
        comms = acl_rt.Communicator.init_all([0, 1])
        res, errors = {}, []
        def work(c):
            try:
                with c.device:
                    res[c.rank] = mismatches(c, list(CASES))
            except BaseException as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        assert not errors, errors
        for c in comms:
            c.destroy()
        print(json.dumps(res))
    ''')
    r = py(code, env={"CANNA_SIM_DEVICES": "2", "HCCL_EXEC_TIMEOUT": "20"}, timeout=300)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    _check_mismatch_messages({int(k): v for k, v in res.items()})


def test_mismatched_collectives_fail_every_process_rank(tmp_path):
    """The same between 2 processes."""
    code = MISMATCH + RANK_MAIN + textwrap.dedent('''
        import json
        print(json.dumps(mismatches(comm, list(CASES))))
        comm.destroy()
    ''')
    outs = _finish([_spawn(code, r, 2, tmp_path / "root", {"HCCL_EXEC_TIMEOUT": "20"}) for r in range(2)],
                   timeout=300)
    res = {}
    for rank, (rc, out, err) in enumerate(outs):
        assert rc == 0, err[-3000:]
        res[rank] = json.loads(out.strip().splitlines()[-1])
    _check_mismatch_messages(res)


# All-reduces of at least 1 MiB of device memory read and write the peers' buffers directly (the
# `direct_ops` counter says which path ran); smaller ones and, between processes, host memory go
# through the shared segment. Both against NumPy, in place and not, counts that do not split evenly.
DIRECT = CHECKS + textwrap.dedent(r'''
    def check_direct(comm, host_direct):
        r, size = comm.rank, comm.size
        s = comm.device.create_stream()
        cases = [("float32", "sum", (1 << 20) // 4 + 1001, True), ("float16", "prod", (1 << 20) + 7, True),
                 ("int8", "max", (3 << 20) + 5, True), ("float64", "min", 200003, True),
                 ("int32", "sum", 1000, False)]     # 4000 bytes: through the segment
        for dtype, op, n, direct in cases:
            for in_place in (True, False):
                xs = [data(k, dtype, n, op) for k in range(size)]
                want = OPS[op](np.stack([x.astype(np.float64) for x in xs]), axis=0)
                before = comm.stats()["direct_ops"]
                src = dev(xs[r])
                out = src if in_place else acl_rt.alloc(xs[r].nbytes)
                comm.all_reduce(src, out, n, dtype, op, stream=s).synchronize()
                expect_close(host(out, dtype, n), want, dtype, size, f"{dtype} {op} {n} in_place={in_place}")
                assert comm.stats()["direct_ops"] - before == int(direct), (dtype, op, n, comm.stats())
        # host memory (the unified memory model): direct between threads, not between processes
        n = 1 << 19
        x = data(r, "float32", n)
        before = comm.stats()["direct_ops"]
        comm.all_reduce(x.ctypes.data, x.ctypes.data, n, "float32", stream=s).synchronize()
        expect_close(x, sum(data(k, "float32", n).astype(np.float64) for k in range(size)), "float32", size)
        assert comm.stats()["direct_ops"] - before == int(host_direct), comm.stats()
''')


def test_direct_all_reduce_threads(py):
    code = DIRECT + textwrap.dedent('''
        import threading
        comms = acl_rt.Communicator.init_all([0, 1, 2])
        errors = []
        def work(c):
            try:
                with c.device:
                    check_direct(c, True)
            except BaseException as e:
                errors.append(e)
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        if errors:
            raise errors[0]
        print("ok")
    ''')
    r = py(code, env={"CANNA_SIM_DEVICES": "3"}, timeout=600)
    assert r.stdout.strip().endswith("ok")


def test_direct_all_reduce_processes(tmp_path):
    code = DIRECT + RANK_MAIN + "check_direct(comm, False)\ncomm.destroy()\nprint('ok')\n"
    outs = _finish([_spawn(code, r, 3, tmp_path / "root") for r in range(3)])
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        assert out.strip().endswith("ok")


def test_peer_killed_during_direct_all_reduces(tmp_path):
    """Rank 1 exits while many large (direct: each rank reads and writes the other's buffers)
    all-reduces are queued: rank 0 gets HCCL_E_REMOTE naming the dead rank, never a crash or hang
    (its mappings of rank 1's memory stay valid after rank 1 is gone)."""
    code = RANK_MAIN + textwrap.dedent('''
        import time
        n = 4 << 20
        b = acl_rt.alloc(4 * n)
        s = comm.device.create_stream()
        comm.all_reduce(b, b, n, "float32", stream=s).synchronize()
        assert comm.stats()["direct_ops"] == 1
        for _ in range(400):                  # at least a second of work: rank 1 exits well before
            comm.all_reduce(b, b, n, "float32", stream=s)
        if rank == 1:
            time.sleep(0.05)
            os._exit(3)
        try:
            s.synchronize()
        except acl_rt.AclError as e:
            print("error", e.code, comm.async_error(), str(e).replace(chr(10), " "))
        else:
            print("no error")
    ''')
    outs = _finish([_spawn(code, r, 2, tmp_path / "root", {"HCCL_EXEC_TIMEOUT": "60"}) for r in range(2)],
                   timeout=300)
    _assert_survivor_saw_the_death(outs, "rank 1")


def test_buffers_freed_while_queued_stay_valid_until_the_collective_ran(py):
    """A DeviceBuffer dropped right after a collective is queued on another stream (or inside
    hccl_group(), where the send is queued only at the group's end) is not freed under it: in
    memcheck mode (freed memory unmapped) this crashed the process."""
    code = textwrap.dedent('''
        import threading, numpy as np, acl_rt
        comms = acl_rt.Communicator.init_all([0, 1])
        res = {}
        def dev(x):
            b = acl_rt.alloc(x.nbytes); b.copy_from(x); return b
        def work(c):
            with c.device:
                s = c.device.create_stream()
                n = 1 << 16
                out = acl_rt.alloc(4 * n)
                c.all_reduce(dev(np.full(n, c.rank + 1, np.float32)), out, n, "float32", stream=s)
                rb = acl_rt.alloc(4 * n)
                with acl_rt.hccl_group():
                    c.send(dev(np.full(n, c.rank + 5, np.float32)), n, "float32", 1 - c.rank, stream=s)
                    c.recv(rb, n, "float32", 1 - c.rank, stream=s)
                s.synchronize()
                x, y = np.empty(n, np.float32), np.empty(n, np.float32)
                out.copy_to(x); rb.copy_to(y)
                res[c.rank] = (float(x.min()), float(x.max()), float(y.min()), float(y.max()))
        ts = [threading.Thread(target=work, args=(c,)) for c in comms]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(res[0], res[1])
    ''')
    r = py(code, env={"CANNA_SIM_DEVICES": "2", "CANNA_SIM_CHECK": "1", "HCCL_EXEC_TIMEOUT": "60"}, timeout=300)
    assert r.stdout.strip() == "(3.0, 3.0, 6.0, 6.0) (3.0, 3.0, 5.0, 5.0)", r.stdout
