"""canna_dl cases that may kill a process (framework bugs canna guards against), shutdown with
frameworks still holding canna memory, and the exchange suite under the discrete memory model.
Each runs in a fresh interpreter (conftest.run_python)."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from conftest import ROOT, run_python

QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def _died(proc):
    return proc.returncode != 0 and "after-abort" not in proc.stdout


def test_discrete_memory_model_suite():
    """The core and framework suites under CANNA_SIM_MEMORY=discrete: every exchange with a CPU
    framework is a counted copy, kDLExtDev exports, stream-ordered device exports."""
    import subprocess
    env = dict(os.environ, CANNA_TEST_SIM_MEMORY="discrete", CANNA_TEST_LEAK_ROUNDS="1000", **QUIET)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_dlpack_core.py", "tests/test_dlpack_frameworks.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    assert " passed" in tail and "failed" not in tail


def test_torch_aborts_on_negative_strides_canna_never_hands_it_one():  # pytorch#188023
    proc = run_python("""
        import numpy as np, torch, canna_dl as cd
        a = cd.asarray(np.arange(12.0).reshape(3, 4)).copy()[:, ::-1]
        t = cd.to_torch(a)                     # canna copies first
        assert t[0].tolist() == [3, 2, 1, 0]
        t = torch.from_dlpack(a)               # torch's consumer: canna exports a compact copy (IS_COPIED)
        assert t[0].tolist() == [3, 2, 1, 0]
        print("safe-paths-ok", flush=True)
        raw = a.__dlpack__(max_version=(1, 0), copy=False)   # explicitly as it is: negative strides
        torch.from_dlpack(raw)
        print("after-abort", flush=True)
    """, check=False)
    assert "safe-paths-ok" in proc.stdout, proc.stderr[-2000:]
    # torch 2.13 kills the process here (SIGABRT, "Storage size calculation overflowed")
    assert _died(proc), "torch accepted negative strides: revisit canna's torch_layout copies"


def test_tf_aborts_on_unaligned_data_canna_aligns():  # TF 2.21: Check failed: IsAligned()
    proc = run_python("""
        import numpy as np, tensorflow as tf, canna_dl as cd
        a = cd.asarray(np.arange(64, dtype=np.float32).reshape(4, 16)).copy()
        v = a[:, 1:]                            # first element 4 bytes past a 64-byte boundary
        t = cd.to_tf(v)                         # canna makes an aligned compact copy
        assert float(tf.reduce_sum(t)) == float(np.arange(64.0).reshape(4, 16)[:, 1:].sum())
        t = tf.experimental.dlpack.from_dlpack(a[1:, 1:].__dlpack__())   # legacy export: aligned copy too
        assert float(tf.reduce_sum(t + 1)) > 0
        print("safe-paths-ok", flush=True)
        raw = a.reshape(-1)[1:].__dlpack__(copy=False)   # explicitly unaligned
        t = tf.experimental.dlpack.from_dlpack(raw)
        print(float(tf.reduce_sum(t + 1)))
        print("after-abort", flush=True)
    """, env=QUIET, check=False)
    assert "safe-paths-ok" in proc.stdout, proc.stderr[-2000:]
    assert _died(proc), "TensorFlow accepted unaligned data: revisit canna's tf_layout copies"


def test_tf_string_tensors_refused_before_tf_aborts():  # TF 2.21 aborts in DataTypeCanUseMemcpy
    proc = run_python("""
        import tensorflow as tf, canna_dl as cd
        s = tf.constant(["a", "b"])
        for f in (cd.asarray, cd.from_dlpack, cd.from_tf):
            try:
                f(s)
            except TypeError as e:
                assert "string" in str(e)
            else:
                raise SystemExit("no error")
        assert cd.asarray(tf.constant([1, 2])).tolist() == [1, 2]
        print("guard-ok", flush=True)
        tf.experimental.dlpack.to_dlpack(s)     # TensorFlow itself
        print("after-abort", flush=True)
    """, env=QUIET, check=False)
    assert "guard-ok" in proc.stdout, proc.stderr[-2000:]
    assert _died(proc), "TensorFlow exported a string tensor: the guard may be unnecessary now"


def test_jax_aborts_on_null_deleter_canna_never_exports_one():  # jax 0.10.2: std::bad_function_call
    proc = run_python("""
        import numpy as np, jax, canna_dl as cd
        from canna_dl import _native
        a = cd.zeros(64)
        for cap in (a.__dlpack__(), a.__dlpack__(max_version=(1, 0)), a[1:].__dlpack__(),
                    cd.zeros(0).__dlpack__(), cd.zeros(()).__dlpack__()):
            assert _native.capsule_info(cap)["has_deleter"]
        assert np.asarray(jax.dlpack.from_dlpack(a)).sum() == 0
        print("ours-ok", flush=True)
        data = np.zeros(64, np.float32)
        class P:
            def __dlpack__(self, **kw):
                return _native._test_capsule(data, (64,), null_deleter=True)
            def __dlpack_device__(self):
                return (1, 0)
        jax.dlpack.from_dlpack(P())
        print("after-abort", flush=True)
    """, check=False)
    assert "ours-ok" in proc.stdout, proc.stderr[-2000:]
    assert _died(proc), "JAX accepted a NULL deleter"


def test_shutdown_with_frameworks_holding_canna_memory():  # numpy#22507 (c)
    proc = run_python("""
        import threading, numpy as np, torch, tensorflow as tf, jax, canna_dl as cd
        from canna_dl import _native
        A = cd.asarray(np.arange(1 << 16, dtype=np.float32)).copy()
        T = cd.to_torch(A)                     # module globals released during interpreter shutdown
        F = cd.to_tf(A)
        J = cd.to_jax(A)
        N = cd.to_numpy(A)
        V = cd.asarray(T[::2])                 # canna view of a torch view of canna memory
        CAP = A.__dlpack__()                   # a capsule nobody consumed
        _native._test_delete_at_exit(A[1:].__dlpack__(max_version=(1, 0)))   # deleter after Py_Finalize
        def worker(t):
            global KEPT
            KEPT = t[1:]
        th = threading.Thread(target=worker, args=(cd.to_torch(A),)); th.start(); th.join()
        daemon = threading.Thread(target=lambda t=cd.to_torch(A): __import__("time").sleep(60), daemon=True)
        daemon.start()                          # still holding a tensor when the interpreter exits
        print("ok", flush=True)
    """, env=QUIET, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
    assert "Fatal Python error" not in proc.stderr and "GIL" not in proc.stderr


def test_framework_drops_canna_memory_in_native_threads():
    # torch, TF and JAX call the deleter without the GIL from the thread that frees the tensor;
    # dropping many of them from many threads at once must neither deadlock nor crash
    proc = run_python("""
        import gc, threading, torch, jax, tensorflow as tf, canna_dl as cd
        from canna_dl import _native
        c0 = _native.counters()
        A = cd.zeros(1 << 14)
        objs = [f(A) for _ in range(200) for f in (cd.to_torch, cd.to_tf, cd.to_jax)]
        chunks = [objs[i::8] for i in range(8)]
        del objs
        ths = [threading.Thread(target=c.clear) for c in chunks]
        [t.start() for t in ths]; [t.join() for t in ths]
        gc.collect()
        c1 = _native.counters()
        n = c1["exports"] - c0["exports"]
        assert n >= 600 and c1["export_deleter_calls"] - c0["export_deleter_calls"] == n, (n, c1)
        print("ok", flush=True)
    """, env=QUIET, timeout=300)
    assert proc.stdout.strip() == "ok"


def test_daemon_threads_dropping_torch_tensors_at_exit():
    """Daemon threads that drop torch tensors viewing canna memory while the interpreter exits:
    torch destroys a tensor with the GIL released, so canna's deleter runs on a Python thread
    without the GIL; once shutdown has begun it must neither take the GIL nor hand the thread back
    to torch (CPython < 3.14 ends such a thread with pthread_exit, which aborts the process with
    "terminate called without an active exception" from torch's C++ frames, gh-87135). Before the
    fix 20-40% of runs aborted; each run here is a fresh interpreter."""
    from concurrent.futures import ThreadPoolExecutor
    code = """
        import threading, time, torch, canna_dl
        def drop():
            while True:
                t = canna_dl.to_torch(canna_dl.empty((256, 256)))
                del t
        for _ in range(8):
            threading.Thread(target=drop, daemon=True).start()
        time.sleep(0.3)
        print("exiting", flush=True)
    """
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda _: run_python(code, check=False), range(16)))
    bad = [(p.returncode, p.stderr[-600:]) for p in procs
           if p.returncode != 0 or "terminate called" in p.stderr or "exiting" not in p.stdout]
    assert not bad, f"{len(bad)} of {len(procs)} runs failed at exit: {bad[:2]}"
