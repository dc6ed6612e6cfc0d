#!/usr/bin/env python3
"""Benchmark: canna's built-in ops (``kernels.*``) against PyTorch, TensorFlow and NumPy, side by
side in one run (medians of repeated batches after a warm-up; every op allocates its output).

Rows (float32; the add sizes are those of tools/bench.py's framework add table: a vector, a
matrix and a batch of matrices):

  add 2**20, add 1024x1024, add 32x1024x1024    x + y
  matmul 1024^3                                  a @ b
  softmax 4096x4096                              softmax(x, dim=-1)
  1-element add (per call)                       x + y on 1-element tensors

Columns: ``canna`` is ``kernels.op(torch tensors)`` — torch in, torch out, the result complete when
returned; ``canna DA`` is the same op on canna DeviceArrays (stream-ordered: a batch of calls,
then one synchronize); ``torch``, ``tf``, ``numpy`` are the frameworks' own ops on their own
CPU tensors (``torch.add``, ``tf.add``, ``np.add``, ...). Ratios are speed relative to canna
(``>1x``: canna is faster). Targets (issue 5): large add >= 1.0x torch and within 20% of the best
framework; matmul >= 0.7x torch; the 1-element add <= 4x ``torch.add``.

The last section splits the 1-element add: the simulator's share (the cached plan's launch on
fixed addresses: ``aclSetOutputTensorAddr`` + ``aclnnAdd`` (run inline on the idle stream) +
``aclrtSynchronizeStreamWithTimeout``), the output allocation (``torch.empty_like``) and the rest
(reading the tensors, the cache lookup, the current stream).

The machine is shared and timings are noisy: read ratios. Run:
    .venv/bin/python tools/bench_kernels.py [--quick] [--no-tf] [--big-repeat N]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _benchutil import bench_many, fmt  # noqa: E402


def ratio(other, canna):
    if other is None or canna is None:
        return "-"
    return f"{other / canna:.2f}x"


def _stream_sync():
    import acl_rt
    return acl_rt.current_stream().synchronize


def _frameworks(tf):
    """The frameworks' modules (tf: a module, or None for no TensorFlow)."""
    import numpy as np
    import torch

    import canna_dl
    import kernels
    return np, torch, tf, canna_dl, kernels


def measure_add(shape, *, budget: float, batch: int, tf=None, da: bool = True, check: bool = True) -> dict:
    """``x + y`` on float32 inputs of ``shape``, side by side: seconds per call of ``canna``
    (kernels.add on torch tensors), ``da`` (kernels.add on DeviceArrays, stream-ordered; None
    unless ``da``), ``torch`` (torch.add), ``tf`` (tf.add; None without ``tf``) and ``numpy``
    (np.add); each allocates its output. ``budget``: seconds for all candidates together."""
    np, torch, tf, canna_dl, kernels = _frameworks(tf)
    xt, yt = torch.rand(shape), torch.rand(shape)
    if check:
        assert torch.equal(kernels.add(xt, yt), xt + yt)
    xn, yn = xt.numpy(), yt.numpy()
    cands = {"canna": lambda: kernels.add(xt, yt), "torch": lambda: torch.add(xt, yt), "numpy": lambda: np.add(xn, yn)}
    if da:
        xd, yd = canna_dl.asarray(xt), canna_dl.asarray(yt)
        cands["da"] = (lambda: kernels.add(xd, yd), _stream_sync())
    if tf is not None:
        xf, yf = tf.constant(xn), tf.constant(yn)
        cands["tf"] = lambda: tf.add(xf, yf)
    r = {"da": None, "tf": None}
    r.update(bench_many(cands, budget=budget, batch=batch))
    del cands
    gc.collect()
    return r


def measure_framework_add(shape, *, budget: float, batch: int, torch_on: bool = True, tf=None,
                          check: bool = True) -> dict:
    """The framework add table of tools/bench.py for one float32 shape: the framework's native add
    against canna's add *inside that framework* (framework tensors in, a framework tensor out).

    Returns seconds per call of: ``torch`` (torch.add), ``canna_torch`` (canna_dl.torch.add, the
    differentiable drop-in op), ``kernels_torch`` (kernels.add on torch tensors); ``tf`` (tf.add),
    ``canna_tf`` (canna_dl.tf.add), ``kernels_tf`` (kernels.add on tf tensors, a tf tensor out),
    all measured interleaved in one call (keys of an absent framework are missing)."""
    import numpy as np

    import kernels
    rng = np.random.default_rng(0)
    xn = rng.random(shape, dtype=np.float32)
    yn = rng.random(shape, dtype=np.float32)
    ref = xn + yn
    cands = {}
    if torch_on:
        import torch

        import canna_dl.torch as ctorch
        xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)
        if check:
            for f in (kernels.add, ctorch.add):
                r = f(xt, yt)
                assert isinstance(r, torch.Tensor) and np.array_equal(r.numpy(), ref), f
        cands.update(torch=lambda: torch.add(xt, yt), canna_torch=lambda: ctorch.add(xt, yt),
                     kernels_torch=lambda: kernels.add(xt, yt))
    if tf is not None:
        import canna_dl.tf as ctf
        xf, yf = tf.constant(xn), tf.constant(yn)
        if check:
            for f in (kernels.add, ctf.add):
                r = f(xf, yf)
                assert isinstance(r, tf.Tensor) and np.array_equal(r.numpy(), ref), f
        cands.update(tf=lambda: tf.add(xf, yf), canna_tf=lambda: ctf.add(xf, yf), kernels_tf=lambda: kernels.add(xf, yf))
    del ref
    out = bench_many(cands, budget=budget, batch=batch)
    del cands
    gc.collect()
    return out


def measure_add_out(shape, *, budget: float, batch: int = 1) -> dict:
    """The large add with ``out=`` on float32 torch tensors of ``shape`` against PyTorch's and a copy
    of the same bytes, interleaved: seconds per call of ``kernels`` (``kernels.add(x, y, out=o)``),
    ``torch`` (``torch.add(x, y, out=o)``) and ``copy`` (the faster of ``o.copy_(x)`` and
    ``np.copyto``, whose times are ``copy_torch`` and ``copy_numpy``: one read and one write, where
    the add reads two arrays and writes one, so an add at the copy's bandwidth takes 1.5x the copy's
    time)."""
    import numpy as np
    import torch

    import kernels
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(shape, generator=g), torch.rand(shape, generator=g)
    o1, o2, o3 = torch.empty(shape), torch.empty(shape), torch.empty(shape)
    kernels.add(x, y, out=o1)
    assert torch.equal(o1, x + y)
    out = bench_many({"kernels": lambda: kernels.add(x, y, out=o1), "torch": lambda: torch.add(x, y, out=o2),
                      "copy_torch": lambda: o3.copy_(x), "copy_numpy": lambda: np.copyto(o3.numpy(), x.numpy())},
                     budget=budget, batch=batch)
    out["copy"] = min(out["copy_torch"], out["copy_numpy"])
    del x, y, o1, o2, o3
    gc.collect()
    return out


def measure_matmul(m: int = 1024, *, budget: float, tf=None, da: bool = True, batch: int = 3) -> dict:
    """``a @ b`` on float32 ``m x m`` matrices: seconds per call of ``canna`` (kernels.matmul on torch
    tensors), ``da``, ``torch``, ``tf``, ``numpy`` (see :func:`measure_add`)."""
    np, torch, tf, canna_dl, kernels = _frameworks(tf)
    at, bt = torch.rand(m, m), torch.rand(m, m)
    assert torch.allclose(kernels.matmul(at, bt), at @ bt, rtol=1e-4, atol=1e-3)
    an, bn = at.numpy(), bt.numpy()
    cands = {"canna": lambda: kernels.matmul(at, bt), "torch": lambda: torch.matmul(at, bt),
             "numpy": lambda: np.matmul(an, bn)}
    if da:
        ad, bd = canna_dl.asarray(at), canna_dl.asarray(bt)
        cands["da"] = (lambda: kernels.matmul(ad, bd), _stream_sync())
    if tf is not None:
        af, bf = tf.constant(an), tf.constant(bn)
        cands["tf"] = lambda: tf.linalg.matmul(af, bf)
    r = {"da": None, "tf": None}
    r.update(bench_many(cands, budget=budget, batch=batch))
    return r


def measure_softmax(n: int = 4096, *, budget: float, tf=None, da: bool = True, batch: int = 3) -> dict:
    """``softmax(x, -1)`` on a float32 ``n x n`` matrix: seconds per call of ``canna``, ``da``,
    ``torch``, ``tf``, ``numpy`` (see :func:`measure_add`)."""
    np, torch, tf, canna_dl, kernels = _frameworks(tf)
    xt = torch.randn(n, n)
    assert torch.allclose(kernels.softmax(xt, -1), torch.softmax(xt, -1), rtol=1e-5, atol=1e-7)
    xn = xt.numpy()

    def np_softmax(x=xn):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    cands = {"canna": lambda: kernels.softmax(xt, -1), "torch": lambda: torch.softmax(xt, -1), "numpy": np_softmax}
    if da:
        xd = canna_dl.asarray(xt)
        cands["da"] = (lambda: kernels.softmax(xd, -1), _stream_sync())
    if tf is not None:
        xf = tf.constant(xn)
        cands["tf"] = lambda: tf.nn.softmax(xf, axis=-1)
    r = {"da": None, "tf": None}
    r.update(bench_many(cands, budget=budget, batch=batch))
    return r


def measure_one_add(*, budget: float, tf=None, da: bool = True, batch: int = 2000) -> dict:
    """The per-call cost: ``x + y`` on 1-element float32 tensors; seconds per call of ``canna``
    (kernels.add on torch tensors), ``canna_torch`` (canna_dl.torch.add), ``da``, ``torch``,
    ``tf``, ``numpy`` (see :func:`measure_add`)."""
    np, torch, tf, canna_dl, kernels = _frameworks(tf)
    import canna_dl.torch as ctorch
    xt, yt = torch.ones(1), torch.ones(1)
    xn, yn = xt.numpy(), yt.numpy()
    cands = {"canna": lambda: kernels.add(xt, yt), "canna_torch": lambda: ctorch.add(xt, yt),
             "torch": lambda: torch.add(xt, yt), "numpy": lambda: np.add(xn, yn)}
    if da:
        xd, yd = canna_dl.asarray(xt), canna_dl.asarray(yt)
        cands["da"] = (lambda: kernels.add(xd, yd), _stream_sync())
    if tf is not None:
        xf, yf = tf.constant(xn), tf.constant(yn)
        cands["tf"] = lambda: tf.add(xf, yf)
    r = {"da": None, "tf": None}
    r.update(bench_many(cands, budget=budget, batch=batch))
    return r


def measure_offload_per_call(*, budget: float, batch: int = 20, inner: int = 100) -> dict:
    """The per-call cost of a supported op inside ``canna_dl.torch.offload()`` (issue 15) on a
    1-element float32 tensor: seconds per call of ``F.relu(x)`` and ``torch.add(x, x)`` plain
    (``*_torch``), in an empty ``TorchFunctionMode`` whose ``__torch_function__`` only calls the
    function (``*_floor``: PyTorch's own mode dispatch, the least a mode can cost), in
    ``offload(level="function")`` (``*_offload``), in ``offload(level="aten")``, the default
    (``*_aten``: no mode, PyTorch's dispatcher reaches canna's kernel below autograd) and as canna's kernel called directly (``*_kernel``: ``kernels.relu`` /
    ``kernels.add``); ``fast_share`` is the share of the offload calls the C per-call fast path
    served (None when the tree has none). Each timed call is one of ``inner`` calls made inside one
    ``with`` block (entering the mode is spread over them)."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    import canna_dl.torch as ctorch
    import kernels
    from kernels import _native

    class Floor(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **kwargs) if kwargs else func(*args)

    x = torch.randn(1)
    rep = ctorch.OffloadReport()
    steps = range(inner)

    def looped(call, mode=None):
        if mode is None:
            def fn():
                for _ in steps:
                    call()
        else:
            def fn():
                with mode():
                    for _ in steps:
                        call()
        return fn

    def offload():
        return ctorch.offload(report=rep, level="function")

    def aten():
        return ctorch.offload(level="aten")
    cands = {}
    for name, call, kern in (("relu", lambda: F.relu(x), lambda: kernels.relu(x)),
                             ("add", lambda: torch.add(x, x), lambda: kernels.add(x, x))):
        cands[f"{name}_torch"] = looped(call)
        cands[f"{name}_floor"] = looped(call, Floor)
        cands[f"{name}_offload"] = looped(call, offload)
        cands[f"{name}_aten"] = looped(call, aten)
        cands[f"{name}_kernel"] = looped(kern)
    hits0 = _native.stats().get("offload_fast_hits")
    r = {k: v / inner for k, v in bench_many(cands, budget=budget, batch=batch).items()}
    hits = _native.stats().get("offload_fast_hits")
    calls = sum(st.canna + st.fallback for st in rep.ops.values())
    r["fast_share"] = (hits - hits0) / calls if hits is not None and calls else None
    return r


def measure_one_add_split(*, budget: float) -> dict:
    """Where the per-call time of the 1-element add (torch in / torch out) goes: seconds per call of
    ``total`` (kernels.add), ``sim`` (the cached plan's launch alone: address swap, aclnnAdd, sync),
    ``alloc`` (torch.empty_like) and ``tadd`` (torch.add)."""
    import acl_rt
    import torch

    import kernels
    from kernels import _core
    xt, yt = torch.ones(1), torch.ones(1)
    kernels.add(xt, yt)
    key = next(k for k in _core.fast_cache if _core.fast_cache[k][3] == (1,))
    plan = _core.fast_cache[key][0]
    h = acl_rt.current_stream().handle
    addrs = (xt.data_ptr(), yt.data_ptr())
    outs = [torch.empty_like(xt) for _ in range(2)]
    flip = [0]

    def plan_only():   # the simulator's share: one address swap, aclnnAdd, the synchronize
        flip[0] ^= 1
        plan.launch_sync(h, 0, *addrs, outs[flip[0]].data_ptr())
    return bench_many({"total": lambda: kernels.add(xt, yt), "sim": plan_only,
                       "alloc": lambda: torch.empty_like(xt), "tadd": lambda: torch.add(xt, yt)},
                      budget=budget, batch=2000)


def measure_add_split(n: int = 2 ** 20, *, budget: float) -> dict:
    """Where the time of a mid-size add (into an existing output) goes: seconds per call of ``sim``
    (the plan's launch + sync), ``np`` (np.add(out=), the arithmetic on one core) and ``torch``
    (torch.add(out=))."""
    import acl_rt
    import numpy as np
    import torch

    import kernels
    from kernels import _core
    h = acl_rt.current_stream().handle
    xt, yt, ot = torch.rand(n), torch.rand(n), torch.empty(n)
    xn, yn, on = xt.numpy(), yt.numpy(), ot.numpy()
    kernels.add(xt, yt, out=ot)
    plan = next(p for k, p in _core._plans.items() if k[0] == "Add" and k[1] is not None and k[1][1] == (n,))
    return bench_many({"sim": lambda: plan.launch_sync(h, 0, xt.data_ptr(), yt.data_ptr(), ot.data_ptr()),
                       "np": lambda: np.add(xn, yn, out=on), "torch": lambda: torch.add(xt, yt, out=ot)},
                      budget=budget, batch=50)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter measurements, skip 32x1024x1024")
    ap.add_argument("--no-tf", action="store_true", help="leave TensorFlow out (its import is slow)")
    args = ap.parse_args()
    budget = 0.4 if args.quick else 1.5   # seconds per candidate and row

    import numpy as np
    import torch

    import acl_rt

    tf = None
    if not args.no_tf:
        try:
            import tensorflow as tf
        except ImportError:
            tf = None
    ncand = 5 if tf is not None else 4

    info = acl_rt.backend_info()
    print(f"backend {info['backend']} ({info['soc_name']}), memory model {info['memory_model']}, "
          f"{os.cpu_count()} CPUs; torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}"
          + (f", tensorflow {tf.__version__}" if tf is not None else ""))
    print(f"sim BLAS: {info.get('sim_blas')}")
    print()

    print(f"{'op':28s} {'canna':>10s} {'canna DA':>10s} {'torch':>10s} {'tf':>10s} {'numpy':>10s}   "
          f"{'torch/c':>8s} {'tf/c':>8s} {'np/c':>8s} {'best/c':>8s}  throughput")
    print("-" * 140)

    def print_row(name, r, unit=None):
        others = [v for v in (r["torch"], r["tf"], r["numpy"]) if v is not None]
        best = min(others) if others else None
        tp = unit(r["canna"]) if unit else ""
        print(f"{name:28s} {fmt(r['canna']):>10s} {fmt(r['da']):>10s} {fmt(r['torch']):>10s} {fmt(r['tf']):>10s} "
              f"{fmt(r['numpy']):>10s}   {ratio(r['torch'], r['canna']):>8s} {ratio(r['tf'], r['canna']):>8s} "
              f"{ratio(r['numpy'], r['canna']):>8s} {ratio(best, r['canna']):>8s}  {tp}", flush=True)

    # ---- add
    sizes = [("add 2**20", (2 ** 20,), 200), ("add 1024x1024", (1024, 1024), 200)]
    if not args.quick:
        sizes.append(("add 32x1024x1024", (32, 1024, 1024), 4))
    for name, shape, batch in sizes:
        n = int(np.prod(shape))
        r = measure_add(shape, budget=budget * ncand, batch=batch, tf=tf)
        print_row(name, r, lambda sec, n=n: f"{3 * 4 * n / sec / 1e9:.1f} GB/s")

    # ---- matmul, softmax
    m = 1024
    print_row("matmul 1024^3", measure_matmul(m, budget=budget * ncand, tf=tf),
              lambda sec: f"{2 * m ** 3 / sec / 1e9:.1f} GFLOP/s")
    print_row("softmax 4096x4096", measure_softmax(4096, budget=budget * ncand, tf=tf),
              lambda sec: f"{2 * 4 * 4096 * 4096 / sec / 1e9:.1f} GB/s")

    # ---- the per-call cost
    print_row("1-element add (per call)", measure_one_add(budget=budget * (ncand + 1), tf=tf))
    print()
    print("ratios are speed relative to canna (>1x: canna faster); canna = kernels.op(torch tensors), torch in, "
          "torch out, complete on return;\ncanna DA = the same op on DeviceArrays, stream-ordered (batch, then one "
          "synchronize).")

    # ---- where the per-call time of the 1-element add goes
    m = measure_one_add_split(budget=budget * 4)
    total, sim, alloc, tadd = m["total"], m["sim"], m["alloc"], m["tadd"]
    print()
    print("1-element add, torch in / torch out, per call:")
    print(f"  total kernels.add                          {fmt(total):>10s}   ({total / tadd:.2f}x torch.add = {fmt(tadd)})")
    print(f"  simulator: set address + aclnnAdd + sync   {fmt(sim):>10s}   (measured alone: Plan.launch_sync)")
    print(f"  output allocation (torch.empty_like)       {fmt(alloc):>10s}")
    print(f"  canna glue (tensor reads, cache, stream)   {fmt(max(total - sim - alloc, 0)):>10s}   (the rest)")

    # ---- where the time of a mid-size add goes: the simulator's launch vs the arithmetic itself
    print()
    print("add 2**20 float32 (12 MiB moved), into an existing output, per call:")
    m = measure_add_split(2 ** 20, budget=budget * 3)
    print(f"  simulator: aclnnAdd + sync (Plan.launch_sync) {fmt(m['sim']):>10s}   (queued to the stream worker, "
          "run on the AI-core threads, waited for)")
    print(f"  the same arithmetic on one core (np.add)     {fmt(m['np']):>10s}   (what the op costs without "
          "the hand-offs)")
    print(f"  torch.add(out=), {torch.get_num_threads()} threads{'':17s} {fmt(m['torch']):>10s}")
    print(f"  -> the simulator's hand-offs (stream worker, AI-core pool wake-ups, completion) cost about "
          f"{fmt(max(m['sim'] - m['np'], 0))} per op at this size")


if __name__ == "__main__":
    sys.exit(main())
