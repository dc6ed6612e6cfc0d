#!/usr/bin/env python3
"""Performance sanity check of the simulator's aclnn ops at the C level (through cffi), side by side
with NumPy and PyTorch (CPU) in the same run. Prints a table; asserts nothing.

    python tools/bench_ops_c.py [--repeat N] [--quick]

What is timed for canna: phase 1 + phase 2 + stream synchronize per call, on descriptors created
once (aclCreateTensor over acl_rt.alloc buffers), as a framework layer that caches descriptors
would do. "1-element add" is the per-call cost of the whole two-phase call on 1-element tensors.
The machine is shared and timings are noisy: read ratios, not absolute numbers.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import acl_rt  # noqa: E402
from acl_rt._lib import ffi  # noqa: E402
from aclnn_util import DevTensor, nn, scalar  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import per_call  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def best_of(fn, repeat, inner=1):
    """(median, median) seconds per call of fn() over ``repeat`` batches of ``inner`` calls (the
    pair keeps the shape the table code reads; the shared helper gives the median)."""
    m = per_call(fn, inner=inner, rounds=repeat)
    return m, m


class Op:
    """A prepared two-phase call: descriptors made once, each call = phase 1 + phase 2 + sync."""

    def __init__(self, name, *args, stream):
        self.lib = nn()
        self.p1 = getattr(self.lib, f"aclnn{name}GetWorkspaceSize")
        self.p2 = getattr(self.lib, f"aclnn{name}")
        self.args = args
        self.ws = ffi.new("uint64_t *")
        self.ex = ffi.new("aclOpExecutor **")
        self.stream = stream
        self.h = ffi.cast("void *", stream.handle)
        self.sync = acl_rt._lib.backend().lib.aclrtSynchronizeStream
        self.wbuf = None
        self.wptr = ffi.NULL

    def __call__(self):
        rc = self.p1(*self.args, self.ws, self.ex)
        assert rc == 0, rc
        if self.ws[0] and (self.wbuf is None or self.wbuf.size < self.ws[0]):
            self.wbuf = acl_rt.alloc(self.ws[0])
            self.wptr = ffi.cast("void *", self.wbuf.ptr)
        assert self.p2(self.wptr, self.ws[0], self.ex[0], self.h) == 0
        assert self.sync(self.h) == 0


def measure(*, repeat: int = 5, quick: bool = False, only=None) -> list:
    """Seconds per call at the C level: rows ``(label, canna, numpy, torch, flops, nbytes)`` where
    each time is a ``(median, median)`` pair (None if absent). ``only``: a collection of labels'
    prefixes to run (``"add"``, ``"matmul"``, ``"softmax"``, ``"1-element"``), None for all."""
    acl_rt.init()
    dev = acl_rt.Device(0)
    dev.set_current()
    s = dev.create_stream()
    try:
        return _measure(s, repeat, quick, only)
    finally:
        s.close()


def _measure(s, repeat, quick, only):
    def want(label):
        return only is None or any(label.startswith(p) for p in only)
    args = argparse.Namespace(repeat=repeat, quick=quick)
    rng = np.random.default_rng(0)
    rows = []

    def row(label, canna, np_t=None, torch_t=None, flops=None, nbytes=None):
        rows.append((label, canna, np_t, torch_t, flops, nbytes))

    alpha = scalar(1.0, np.float32)
    sizes = [("add 2**20", (1 << 20,)), ("add 1024x1024", (1024, 1024)), ("add 32x1024x1024", (32, 1024, 1024))]
    if args.quick:
        sizes = sizes[:2]
    for label, shape in (sz for sz in sizes if want("add")):
        a = rng.standard_normal(shape, dtype=np.float32)
        b = rng.standard_normal(shape, dtype=np.float32)
        ta, tb, to = DevTensor.from_numpy(a, s), DevTensor.from_numpy(b, s), DevTensor(shape, np.float32)
        op = Op("Add", ta.handle, tb.handle, alpha, to.handle, stream=s)
        c = best_of(op, args.repeat)
        o = np.empty_like(a)
        n = best_of(lambda: np.add(a, b, out=o), args.repeat)
        t = None
        if torch:
            xa, xb, xo = torch.from_numpy(a), torch.from_numpy(b), torch.empty(shape)
            t = best_of(lambda: torch.add(xa, xb, out=xo), args.repeat)
        row(label, c, n, t, nbytes=3 * a.nbytes)
        np.testing.assert_allclose(to.numpy(), a + b, rtol=1e-6)
        del ta, tb, to
    # matmul 1024^3
    if want("matmul"):
        m = 512 if args.quick else 1024
        a = rng.standard_normal((m, m), dtype=np.float32)
        b = rng.standard_normal((m, m), dtype=np.float32)
        ta, tb, to = DevTensor.from_numpy(a, s), DevTensor.from_numpy(b, s), DevTensor((m, m), np.float32)
        op = Op("Matmul", ta.handle, tb.handle, to.handle, 0, stream=s)
        c = best_of(op, args.repeat)
        o = np.empty_like(a)
        n = best_of(lambda: np.matmul(a, b, out=o), args.repeat)
        t = None
        if torch:
            xa, xb, xo = torch.from_numpy(a), torch.from_numpy(b), torch.empty(m, m)
            t = best_of(lambda: torch.matmul(xa, xb, out=xo), args.repeat)
        row(f"matmul {m}^3", c, n, t, flops=2 * m ** 3)
    # softmax 4096x4096
    if want("softmax"):
        m = 1024 if args.quick else 4096
        x = rng.standard_normal((m, m), dtype=np.float32)
        tx, to = DevTensor.from_numpy(x, s), DevTensor((m, m), np.float32)
        op = Op("Softmax", tx.handle, -1, to.handle, stream=s)
        c = best_of(op, args.repeat)

        def np_softmax():
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        n = best_of(np_softmax, args.repeat)
        t = None
        if torch:
            xx, xo = torch.from_numpy(x), torch.empty(m, m)
            t = best_of(lambda: torch.softmax(xx, -1, out=xo) if False else torch._softmax(xx, -1, False), args.repeat)
        row(f"softmax {m}x{m}", c, n, t, nbytes=2 * x.nbytes)
    # 1-element add: per-call cost
    if want("1-element"):
        a1, b1 = np.ones(1, np.float32), np.ones(1, np.float32)
        ta, tb, to = DevTensor.from_numpy(a1, s), DevTensor.from_numpy(b1, s), DevTensor((1,), np.float32)
        op = Op("Add", ta.handle, tb.handle, alpha, to.handle, stream=s)
        c = best_of(op, args.repeat, inner=2000)
        o1 = np.empty(1, np.float32)
        n = best_of(lambda: np.add(a1, b1, out=o1), args.repeat, inner=2000)
        t = None
        if torch:
            xa, xb = torch.ones(1), torch.ones(1)
            t = best_of(lambda: torch.add(xa, xb), args.repeat, inner=2000)
        row("1-element add (per call)", c, n, t)

    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    args = ap.parse_args(argv)
    acl_rt.init()
    info = acl_rt.backend_info()
    print(f"backend {info['backend']} ({info['soc_name']}), op library {info['op_libraries']}")
    print(f"BLAS: {info['sim_blas']}; torch {torch.__version__ if torch else 'absent'}, "
          f"{torch.get_num_threads() if torch else '-'} threads; numpy {np.__version__}; {os.cpu_count()} CPUs")
    rows = measure(repeat=args.repeat, quick=args.quick)
    print()
    hdr = f"{'op':<26}{'canna ms':>11}{'numpy ms':>11}{'torch ms':>11}{'canna/np':>10}{'canna/torch':>12}   throughput"
    print(hdr)
    print("-" * len(hdr))
    for label, c, n, t, flops, nbytes in rows:
        us = label.startswith("1-element")
        scale, unit = (1e6, "us") if us else (1e3, "ms")
        cn = f"{n[0] / c[0]:.2f}x" if n else "-"
        ct = f"{t[0] / c[0]:.2f}x" if t else "-"
        thr = ""
        if flops:
            thr = f"{flops / c[0] / 1e9:.1f} GFLOP/s"
        elif nbytes:
            thr = f"{nbytes / c[0] / 1e9:.1f} GB/s"
        fmt = (lambda v: f"{v[0] * scale:.2f}{unit if us else ''}" if v else "-")
        print(f"{label:<26}{fmt(c):>11}{fmt(n):>11}{fmt(t):>11}{cn:>10}{ct:>12}   {thr}")
    print("\n(median of", args.repeat, "runs; ratios are speed relative to canna: >1x means canna is faster)")




if __name__ == "__main__":
    main()
