"""canna's kernels under ``jax.jit`` as XLA FFI custom calls (no copies; docs/DESIGN.md §11,
"JAX under jit").

Under ``jit`` a registry op whose kernel is a sequence of aclnn calls reading its operands and
writing its results runs as the custom call ``canna_jax_call`` (``jax.ffi.ffi_call``): XLA's CPU
runtime calls a small C++ handler (``_ffi_handler.cc``) with its own operand and result buffers,
and the handler swaps those addresses into cached repeatable aclnn executors, runs phase 2 on a
stream of canna's and waits for it. Nothing is copied: under the unified memory model host memory
is a kernel operand (docs/DESIGN.md §3.2), and XLA's CPU buffers are host memory.

How an entry is made (once per op, attributes, operand shapes and dtypes: at trace time): the
op's kernel runs on host arrays of ones of the traced shapes inside
:func:`kernels._core.capture_plans`, which records the plans it launches (each built afresh and
left out of the plan cache, so the entry owns its executors). The route is taken only when every
address of every plan is one of the arrays given or one of the op's results (contiguous), every
result is written by a plan or is None (zeroed by the handler), and (on the simulator) the
device ran only the tasks of the plans' own launches, so no other work (a copy, a fill) is part of the op.
Anything else -- a temporary operand, a RawKernel, an op with a mutated input, a random op, the
discrete memory model, a JAX backend other than CPU -- keeps the ``jax.pure_callback`` path.

Lifetime: entries (their plans, workspaces) live for the process, at most :data:`MAX_ENTRIES`
(then new signatures take the ``pure_callback`` path); ``acl_rt.finalize`` retires them (an
executable traced before fails with a clear error: trace again, e.g. after
``jax.clear_caches()``).

The handler is compiled at first use with the system C++ compiler against jaxlib's FFI headers
(``jax.ffi.include_dir()``) and cached next to canna's kernel binaries (``$CANNA_KERNEL_CACHE``,
see :mod:`kernels._compiler`): jax is an optional extra, absent from pip's isolated build, so
setup.py cannot build it. Without a compiler or the headers, a ``RuntimeWarning`` is given once
and the ``pure_callback`` path serves. ``CANNA_JAX_FFI=0`` turns the route off.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from pathlib import Path

import jax
import numpy as np

import canna_dl
from acl_rt import lowlevel as rt
from kernels import _compiler
from kernels import _core as C

__all__ = ["available", "call", "stats", "jit_stream", "MAX_ENTRIES"]

TARGET = "canna_jax_call"
MAX_ENTRIES = 1 << 16   # the handler's table (kMaxEntries in _ffi_handler.cc)
MAX_CHAIN = 8           # aclnn calls one op may make and still take the route
_SOURCE = Path(__file__).with_name("_ffi_handler.cc")

_lock = threading.RLock()
_state = {"ok": None, "lib": None, "token": 0, "fns": None, "reason": ""}
_entries: dict = {}      # signature -> entry index (int) or None (this signature takes pure_callback)
_keep: list = []         # what the entries' executors need alive: plans, workspaces
_streams: dict = {}      # device id -> the stream jit launches run on
_fallbacks = {"count": 0}


def _build() -> Path:
    """The handler's shared object, compiled once into the kernel cache."""
    return _compiler.build_host_library("jaxffi", _SOURCE, flags=("-std=c++17", f"-I{jax.ffi.include_dir()}"),
                                        key_parts=(jax.__version__,))


def _load():
    path = _build()
    lib = ctypes.CDLL(str(path))
    lib.canna_jax_token.restype = ctypes.c_int64
    lib.canna_jax_launches.restype = ctypes.c_uint64
    lib.canna_jax_add.restype = ctypes.c_int64
    lib.canna_jax_add.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int32),
                                  ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int64, ctypes.c_uint64]
    lib.canna_jax_retire_all.restype = None
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.canna_jax_call), platform="cpu")
    return lib


def available() -> bool:
    """Whether the FFI route can be used now: the unified memory model, JAX's CPU backend, the
    handler built and registered (a RuntimeWarning once when it cannot be), ``CANNA_JAX_FFI`` not 0."""
    ok = _state["ok"]
    if ok is None:
        with _lock:
            ok = _state["ok"]
            if ok is None:
                ok = _state["ok"] = _setup()
    return ok and canna_dl.memory_model() == "unified"


def _setup() -> bool:
    if os.environ.get("CANNA_JAX_FFI", "1").strip().lower() in ("0", "false", "no", "off"):
        _state["reason"] = "CANNA_JAX_FFI=0"
        return False
    if jax.default_backend() != "cpu":
        _state["reason"] = f"JAX's default backend is {jax.default_backend()}, not cpu"
        return False
    try:
        lib = _load()
    except Exception as e:   # no compiler, no headers, a jaxlib without the FFI
        _state["reason"] = str(e)
        warnings.warn(f"canna_dl.jax: canna's ops under jax.jit use jax.pure_callback (which copies every operand "
                      f"and result): the XLA FFI handler is not available ({e})", RuntimeWarning, stacklevel=4)
        return False
    _state["lib"] = lib
    _state["token"] = int(lib.canna_jax_token())
    rt.on_finalize(_retire)
    return True


def _retire():
    """acl_rt.finalize: the executors and streams die, so do the entries (traced executables fail
    with a clear error from then on; a new trace makes new entries)."""
    lib = _state["lib"]
    with _lock:
        if lib is not None:
            lib.canna_jax_retire_all()
        _entries.clear()
        _streams.clear()
        _keep.clear()


def stats() -> dict:
    """``launches`` (kernel launches through the FFI handler since the process started),
    ``entries`` (signatures that run through it), ``fallbacks`` (traced signatures that use
    ``pure_callback``), ``available``."""
    lib = _state["lib"]
    return {"launches": int(lib.canna_jax_launches()) if lib is not None else 0,
            "entries": sum(1 for v in _entries.values() if v is not None),
            "fallbacks": _fallbacks["count"], "available": bool(_state["ok"])}


def jit_stream(device_id=None):
    """The stream canna's kernels run on under ``jit`` for a device (created on first use, kept
    for the runtime's life)."""
    dev = rt.current_device_id() if device_id is None else device_id
    with _lock:
        s = _streams.get(dev)
        if s is None:
            import acl_rt
            s = _streams[dev] = acl_rt.Device(dev).create_stream()
        return s


def _fns():
    f = _state["fns"]
    if f is None:
        cast = lambda fn: int(rt.ffi.cast("uintptr_t", fn))  # noqa: E731
        C.nn()
        ol, bl = rt.op_library().lib, rt.backend().lib
        f = _state["fns"] = (cast(ol.aclSetInputTensorAddr), cast(ol.aclSetOutputTensorAddr),
                             cast(bl.aclrtSynchronizeStreamWithTimeout), cast(bl.aclrtSetCurrentContext),
                             cast(bl.aclGetRecentErrMsg))
    return f


def _ones(shape, dtype):
    return np.ones(shape, dtype=np.dtype(dtype))


def _make_entry(op, attrs, full, avals, nres):
    """Capture the op's plans on arrays of ones of the traced shapes; the index of the handler's
    entry (the first of a chain, one per plan), or None when the op is not a sequence of aclnn
    calls reading its operands and writing its results only."""
    dev = rt.current_device_id()
    s = jit_stream(dev)
    s.synchronize()
    dummies = [_ones(shape, dt) for shape, dt in avals]
    t0 = C.device_tasks(dev)
    with C.capture_plans() as rec:
        res = op.kernel(*full(dummies), **attrs, stream=s)
    s.synchronize()
    t1 = C.device_tasks(dev)
    res = res if isinstance(res, tuple) else (res,)
    if not rec or len(rec) > MAX_CHAIN or len(res) != nres:
        return None
    if t0 is not None and t1 - t0 != sum(r[3] or 0 for r in rec):   # other work (a copy, a fill) belongs to the op
        return None
    base = {}
    for k, a in enumerate(dummies):
        if a.size:
            base.setdefault(a.ctypes.data, (0, k))
    outs, zero = [], 0
    for j, r in enumerate(res):
        if r is None:   # a result the op does not produce (an absent optional input's gradient): zeros
            if j >= 64:
                return None
            zero |= 1 << j
            outs.append(None)
            continue
        v = canna_dl.asarray(r)
        if not v.size or not v.is_contiguous():
            return None
        outs.append(v)
    for j, v in enumerate(outs):
        if v is None:
            continue
        if v.ptr in base:
            return None
        base[v.ptr] = (1, j)
    written = set()
    specs = []
    for plan, _s, addrs, _t in rec:
        if not plan.repeatable or plan.closed:
            return None
        executor, run, nin, nout, tensors = plan.raw()
        if nin + nout != len(addrs) or not executor:
            return None
        kinds, index = [], []
        for i, p in enumerate(addrs):
            src = base.get(p)
            if src is None or (i >= nin and src[0] != 1) or (i < nin and src[0] == 1 and src[1] not in written):
                return None   # a temporary, an output that is not a result, a result read before it is written
            kinds.append(src[0])
            index.append(src[1])
        written.update(index[nin:])
        specs.append((plan, executor, run, nin, nout, tensors, kinds, index))
    if written | {j for j in range(nres) if zero >> j & 1} != set(range(nres)):   # every result is written
        return None
    fns = _fns()
    ctx = int(rt.ffi.cast("uintptr_t", rt.activate(dev).ctx))
    arr = lambda t, v: (t * len(v))(*v)  # noqa: E731
    nxt = -1
    for plan, executor, run, nin, nout, tensors, kinds, index in reversed(specs):   # the last plan first
        ws = None
        if plan.ws_size:
            import acl_rt
            ws = acl_rt.alloc(plan.ws_size, stream=s)
        nxt = _state["lib"].canna_jax_add(
            arr(ctypes.c_void_p, [run, *fns]), executor, ctx, s._id, ws.ptr if ws is not None else 0, plan.ws_size,
            nin, nout, arr(ctypes.c_void_p, tensors), arr(ctypes.c_int32, kinds), arr(ctypes.c_int64, index),
            len(avals), nres, plan.name.encode(), nxt, zero if plan is specs[0][0] else 0)
        if nxt < 0:
            return None
        _keep.append((plan, ws, s))
    return int(nxt)


def call(op, sig, attrs, full, xs, structs):
    """The op's results as ``canna_jax_call`` custom calls on the traced ``xs`` (``full(xs)``:
    the kernel's arguments), or None when this signature takes the ``pure_callback`` path."""
    if op.seed is not None:   # a random op draws a new seed at every call: its plan cannot be reused
        return None
    avals = [(tuple(x.shape), np.dtype(x.dtype)) for x in xs]
    key = (op.qualname, sig, tuple((sh, str(dt)) for sh, dt in avals))
    idx = _entries.get(key, False)
    if idx is False:
        with _lock:
            idx = _entries.get(key, False)
            if idx is False:
                try:
                    idx = _make_entry(op, attrs, full, avals, len(structs)) if len(_entries) < MAX_ENTRIES else None
                except (ValueError, TypeError, IndexError, NotImplementedError, ArithmeticError):
                    idx = None   # the op refused arrays of ones (indices out of range, ...): pure_callback
                except Exception as e:   # a fault of the route itself: say so, then take pure_callback
                    warnings.warn(f"canna_dl.jax: {op.qualname} runs through jax.pure_callback (with copies) under "
                                  f"jit: its XLA FFI entry could not be made ({type(e).__name__}: {e})",
                                  RuntimeWarning, stacklevel=3)
                    idx = None
                _entries[key] = idx
                if idx is None:
                    _fallbacks["count"] += 1
    if idx is None:
        return None
    f = jax.ffi.ffi_call(TARGET, tuple(structs), vmap_method="sequential")
    return tuple(f(*xs, entry=np.int64(idx), token=np.int64(_state["token"])))
