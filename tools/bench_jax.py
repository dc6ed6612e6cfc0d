#!/usr/bin/env python3
"""canna's JAX ops under ``jax.jit`` against jnp under ``jax.jit`` (issue 15).

    .venv/bin/python tools/bench_jax.py [--quick]

Three candidates per workload, measured in interleaved rounds in one process: jnp's own function
jitted (the reference), canna_dl.jax's jitted through the XLA FFI custom call (the kernels run on
XLA's buffers: canna_dl/jax/_ffi.py), and the same canna function jitted with the FFI route off,
so through ``jax.pure_callback`` (every operand and result copied: the path before issue 15).
Workloads: an add of 2**20 float32 elements, and a dense layer's forward and backward
(``sum(relu(x @ w + b) ** 2)``, x 256x512, w 512x512, gradients of x, w and b).

Target (issue 15): the FFI route >= 0.8x jnp under jit (speed ratio = jnp time / canna time).
"""
from __future__ import annotations

import argparse
import os
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TOOLS))
sys.path.insert(0, _TOOLS)

from _benchutil import bench_rounds, fmt  # noqa: E402

TARGET = 0.8


def _workloads():
    import jax
    import jax.numpy as jnp
    import numpy as np

    import canna_dl.jax as cjax
    rng = np.random.default_rng(0)
    f32 = lambda *s: jnp.asarray(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    a, b = f32(2 ** 20), f32(2 ** 20)
    x, w, bias = f32(256, 512), f32(512, 512) * 0.05, f32(512)

    def dense(ops):
        def loss(x, w, bias):
            return jnp.sum(ops["relu"](ops["add"](ops["matmul"](x, w), bias)) ** 2)
        return jax.grad(loss, (0, 1, 2))
    jops = {"relu": jax.nn.relu, "add": jnp.add, "matmul": jnp.matmul}
    cops = {"relu": cjax.relu, "add": cjax.add, "matmul": cjax.matmul}
    return {
        "add 2**20 float32": ((a, b), jnp.add, cjax.add),
        "dense 256x512x512 fwd+bwd": ((x, w, bias), dense(jops), dense(cops)),
    }


def measure(budget: float = 2.0, batch: int = 20, rounds: int = 5) -> dict:
    """``workload -> {"jnp", "ffi", "pure_callback": seconds per call, "ffi_ratio", "callback_ratio",
    "ffi_spread": (lo, hi), "ffi_launches": kernel launches through the handler per call}``."""
    import jax

    from canna_dl.jax import _ffi
    out = {}
    for name, (args, ref, fn) in _workloads().items():
        jref, jffi, jcb = jax.jit(ref), jax.jit(fn), jax.jit(lambda *a, _f=fn: _f(*a))
        jax.block_until_ready(jref(*args))
        jax.block_until_ready(jffi(*args))
        real = _ffi.available
        _ffi.available = lambda: False     # traced now: this executable calls pure_callback
        try:
            jax.block_until_ready(jcb(*args))
        finally:
            _ffi.available = real
        n0 = _ffi.stats()["launches"]
        jax.block_until_ready(jffi(*args))
        per_call = _ffi.stats()["launches"] - n0
        cands = {k: (lambda f=f: jax.block_until_ready(f(*args)), None) for k, f in
                 (("jnp", jref), ("ffi", jffi), ("pure_callback", jcb))}
        r = bench_rounds(cands, budget=budget * 3, batch=batch, rounds=rounds)
        ratios = [j / c for j, c in zip(r["jnp"]["rounds"], r["ffi"]["rounds"])]
        out[name] = {"jnp": r["jnp"]["median"], "ffi": r["ffi"]["median"],
                     "pure_callback": r["pure_callback"]["median"],
                     "ffi_ratio": r["jnp"]["median"] / r["ffi"]["median"],
                     "callback_ratio": r["jnp"]["median"] / r["pure_callback"]["median"],
                     "ffi_spread": (min(ratios), max(ratios)), "ffi_launches": per_call,
                     "ffi_available": _ffi.available()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short measurements")
    args = ap.parse_args(argv)
    m = measure(budget=0.2 if args.quick else 2.0, batch=5 if args.quick else 20, rounds=3 if args.quick else 5)
    print(f"{'workload':28} {'jnp jit':>10} {'canna FFI':>10} {'ratio':>7} {'callback':>10} {'ratio':>7}")
    for name, r in m.items():
        print(f"{name:28} {fmt(r['jnp']):>10} {fmt(r['ffi']):>10} {r['ffi_ratio']:6.2f}x {fmt(r['pure_callback']):>10}"
              f" {r['callback_ratio']:6.2f}x   ({r['ffi_launches']} launches through the handler a call)")
    print(f"target: canna FFI >= {TARGET}x jnp under jit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
