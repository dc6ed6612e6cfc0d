"""canna's ops as a native TensorFlow op inside ``tf.function`` (docs/DESIGN.md §11).

Inside a ``tf.function`` a registered op whose kernel is one aclnn call becomes a ``CannaCall``
node (``canna_dl/tf/_native_op.cc``) instead of a ``tf.py_function`` (``EagerPyFunc``) node: its
kernel runs canna's cached executor from C++ — no Python, no GIL — after the first call with a
given set of input shapes, which asks :func:`_factory` (once) to build it. Its gradient is
registered for the op type (:func:`_grad`): the registry entry's backward written in
``canna_dl.tf`` ops, so the backward is native too.

The library is compiled at first use with the system C++ compiler (``$CXX``, else ``c++`` /
``g++``) against the installed TensorFlow (``tf.sysconfig.get_compile_flags()`` /
``get_link_flags()``) and kept in canna's kernel cache (``$CANNA_KERNEL_CACHE``, see
:mod:`kernels._compiler`), keyed by the TensorFlow version, the Python version, the flags and the
source's hash: one compile per machine. Without a compiler or TensorFlow's headers, in the
discrete memory model (TensorFlow's CPU tensors are host memory the device cannot read), or with
``CANNA_TF_NATIVE=0``, canna's ops stay ``tf.py_function`` nodes (a ``RuntimeWarning`` says why,
once, except for ``CANNA_TF_NATIVE=0``).

A SavedModel holding ``CannaCall`` nodes loads only in a process that has imported
``canna_dl.tf`` (which registers the op and its kernel).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import sysconfig
import threading
import warnings
from pathlib import Path

import tensorflow as tf

import canna_dl
from canna_dl import _copy as dl_copy
from kernels import _core as C
from kernels import _registry as R

__all__ = ["library", "available", "call", "stats"]

_SRC = Path(__file__).with_name("_native_op.cc")
_lock = threading.Lock()
_state = {"lib": None, "dll": None, "tried": False, "why": None}


def _path():
    """The op library in the kernel cache (compiled on the first call on this machine)."""
    from kernels import _compiler
    inc = tf.sysconfig.get_include()
    if not os.path.exists(os.path.join(inc, "tensorflow", "core", "framework", "op_kernel.h")):
        raise OSError(f"TensorFlow's headers are not installed ({inc})")
    return _compiler.build_host_library(
        "canna_tf", _SRC, flags=("-w", "-I" + sysconfig.get_paths()["include"], *tf.sysconfig.get_compile_flags()),
        link_flags=tuple(tf.sysconfig.get_link_flags()), key_parts=(tf.__version__, sys.version))


def _load():
    if os.environ.get("CANNA_TF_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None, None
    if not C._cfg.unified:
        return None, ("the discrete memory model: TensorFlow's CPU tensors are host memory the device does not "
                      "read, so canna's ops stay tf.py_function nodes (with their copies)")
    try:
        path = _path()
        lib = tf.load_op_library(str(path))
        dll = ctypes.PyDLL(str(path))
    except Exception as e:   # no compiler, no headers, a failing build: the py_function path
        return None, f"{type(e).__name__}: {e}"
    try:   # the C functions and the factory
        op = C.op_library().lib
        be = C.backend().lib
        ffi = C.ffi
        addr = lambda f: ctypes.c_void_p(int(ffi.cast("uintptr_t", f)))  # noqa: E731
        C.nn()
        dll.canna_tf_configure.argtypes = [ctypes.c_void_p] * 5 + [ctypes.py_object]
        dll.canna_tf_configure(addr(op.aclSetInputTensorAddr), addr(op.aclSetOutputTensorAddr),
                               addr(be.aclrtSynchronizeStreamWithTimeout), addr(be.aclrtSetCurrentContext),
                               addr(be.aclGetRecentErrMsg), _factory)
        # acl_rt.finalize() invalidates every executor: the kernels rebuild their plans in the next session
        from acl_rt import lowlevel
        lowlevel.on_finalize(dll.canna_tf_invalidate)
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
    return (lib, dll), None


def library():
    """The loaded op library (``tf.load_op_library``'s module), or None (the py_function path)."""
    if _state["tried"]:
        return _state["lib"]
    with _lock:
        if not _state["tried"]:
            r, why = _load()
            if r is not None:
                _state["lib"], _state["dll"] = r
            _state["why"] = why
            _state["tried"] = True
            if why:
                warnings.warn(f"canna_dl.tf: canna's ops run as tf.py_function nodes inside tf.function (the "
                              f"native CannaCall op is not available: {why})", RuntimeWarning, stacklevel=4)
    return _state["lib"]


def available() -> bool:
    """Whether canna's ops become native ``CannaCall`` nodes inside ``tf.function``."""
    return library() is not None


def stats() -> dict:
    """``{"launches": n, "builds": n}``: CannaCall kernel runs and plans built (this process)."""
    if _state["dll"] is None:
        return {"launches": 0, "builds": 0}
    a = (ctypes.c_uint64 * 2)()
    _state["dll"].canna_tf_stats(a)
    return {"launches": a[0], "builds": a[1]}


# ---------------------------------------------------------------------------------------------
# the plan factory (called by the C++ kernel on a cache miss, with the GIL)

def _args(op, params, arrays):
    p = json.loads(params)
    consts = {int(k): v for k, v in p["c"].items()}
    it = iter(arrays)
    vals = [consts[i] if i in consts else next(it) if present else None
            for i, present in enumerate(p["p"])]
    return vals, p["a"]


def _plan(op, params, shapes, dtypes):
    """Run ``op`` once on scratch arrays of these shapes with private plans; the raw pointers the
    C++ kernel replays its aclnn calls with: ``(keep, stream, context, steps, output shapes)``, a
    step ``(executor, phase 2, workspace bytes, nin, slots, tensor handles, addresses)``, a slot
    naming the TF input (>= 0) or output (``-1 - k``) each operand address is. Raises
    NotImplementedError when a call reads or writes anything but the op's operands (a temporary),
    the kernel copies data outside an aclnn call, or the outputs are not the calls' own (then the
    op stays a py_function node)."""
    ins = [canna_dl.zeros(tuple(s), canna_dl.dtype(d)) for s, d in zip(shapes, dtypes)]
    vals, attrs = _args(op, params, ins)
    copies = dl_copy.thread_copy_count()   # (this thread's: TF runs other ops' kernels meanwhile)
    with C.capture_plans() as rec:
        r = op.kernel(*vals, **attrs)
    outs = list(r) if isinstance(r, tuple) else [r]
    if any(not isinstance(o, canna_dl.DeviceArray) for o in outs):
        raise NotImplementedError(f"{op.qualname}: its kernel does not return arrays")
    if dl_copy.thread_copy_count() != copies:
        raise NotImplementedError(f"{op.qualname}: its kernel copies data outside its aclnn calls")
    if any(o.strides != C.contiguous_strides(o.shape) for o in outs):
        raise NotImplementedError(f"{op.qualname}: its outputs are views, not the calls' own arrays")
    by_in = {a.ptr: i for i, a in enumerate(ins) if a.size}
    by_out = {o.ptr: k for k, o in enumerate(outs) if o.size}
    if len(by_out) != sum(1 for o in outs if o.size):
        raise NotImplementedError(f"{op.qualname}: two outputs share memory")
    steps, written = [], set()
    stream = None
    for plan, s, addrs, _tasks in rec:
        if stream is not None and s is not stream:
            raise NotImplementedError(f"{op.qualname}: its calls run on two streams")
        stream = s
        executor, run, nin, nout, tensors = plan.raw()
        slots = []
        for j, a in enumerate(addrs):
            if j < nin and a in by_in:
                slots.append(by_in[a])
            elif a in by_out:
                slots.append(-1 - by_out[a])
                if j >= nin:
                    written.add(by_out[a])
            else:
                raise NotImplementedError(f"{op.qualname}: an aclnn call of its kernel uses a temporary (a cast, a "
                                          "copy, an intermediate result), not only its operands")
        steps.append((executor, run, plan.ws_size, nin, tuple(slots), tensors, tuple(addrs)))
    if written != set(by_out.values()):
        raise NotImplementedError(f"{op.qualname}: an output is not written by an aclnn call")
    shapes_out = tuple(tuple(o.shape) for o in outs)
    if not steps:
        return (None, 0, 0, (), shapes_out)
    stream.synchronize()
    ctx = C.rt.activate(stream._device._id).ctx
    return ((rec, ins, outs), stream._id, int(C.ffi.cast("uintptr_t", ctx)), tuple(steps), shapes_out)


def _factory(qualname, params, shapes, dtypes):
    op = R.get_op(qualname)
    return _plan(op, params, shapes, [tf.as_dtype(d).name for d in dtypes])


# ---------------------------------------------------------------------------------------------
# graph construction

_probe_ok: dict = {}


def _eligible(op):
    return not (op.mutated or op.lists or op.seed is not None or op.through_parts)


def call(op, xs, consts, present, attrs, out_specs):
    """A ``CannaCall`` node for ``op`` on the flat tensors ``xs`` (graph mode), or None when the op
    cannot run natively (the caller builds the py_function node)."""
    if not _eligible(op) or library() is None:
        return None
    try:
        params = json.dumps({"a": attrs, "c": {str(i): c for i, c in consts.items()}, "p": present},
                            sort_keys=True)
    except (TypeError, ValueError):
        return None
    # probe once per (op, params, dtypes): is the kernel one aclnn call over its operands?
    pk = (op.qualname, params, tuple(x.dtype.name for x in xs), tuple(x.shape.rank for x in xs))
    ok = _probe_ok.get(pk)
    if ok is None:
        shapes = [tuple(3 if d is None else d for d in x.shape.as_list()) for x in xs]
        try:
            _plan(op, params, shapes, [x.dtype.name for x in xs])
            ok = True
        except NotImplementedError:
            ok = False
        except Exception:
            ok = True   # the probe's made-up dims may be refused; real shapes decide at run time
        _probe_ok[pk] = ok
    if not ok:
        return None
    outs = library().canna_call(xs, Tout=[d for d, _ in out_specs], op=op.qualname, params=params,
                                out_shapes=[s for _, s in out_specs], stat=_stat_name(f"canna_dl.tf.{op.tf}"),
                                name=op.name)
    return list(outs)


# ---------------------------------------------------------------------------------------------
# op_stats of native nodes: each node counts its executions under its attr stat (in C++)

_tl = threading.local()   # .pending: None (no counted_as block), the name for the next node, or ""


def _stat_name(own):
    """The name the next node counts as: its own api, or inside :func:`counted_as` the block's
    name for the block's first node and nothing ("") for the rest."""
    pending = getattr(_tl, "pending", None)
    if pending is None:
        return own
    _tl.pending = ""
    return pending


@contextlib.contextmanager
def counted_as(name):
    """The nodes made in the block count as one execution of ``name`` (a composed op: canna_dl.tf's
    ``dense`` of native matmul + add; a node's backward); ``""``: they count nothing."""
    saved = getattr(_tl, "pending", None)
    _tl.pending = name
    try:
        yield
    finally:
        _tl.pending = saved


def native_counts() -> dict:
    """Executions per op_stats name of the native nodes run so far (empty without the library)."""
    dll = _state["dll"]
    if dll is None:
        return {}
    dll.canna_tf_stat_dump.restype = ctypes.c_size_t
    dll.canna_tf_stat_dump.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    n = dll.canna_tf_stat_dump(None, 0)
    while True:
        buf = ctypes.create_string_buffer(n + 256)
        m = dll.canna_tf_stat_dump(buf, len(buf))
        if m <= len(buf):
            break
        n = m
    out = {}
    for line in buf.value.decode().splitlines():
        name, _, c = line.rpartition("\t")
        out[name] = int(c)
    return out


def reset_native_counts() -> None:
    if _state["dll"] is not None:
        _state["dll"].canna_tf_stat_reset()


def _grad_fn(op):
    """An op of a backward in TensorFlow: canna_dl.tf's form, or the generated one of an entry
    canna_dl.tf does not export (``sum_to_size``: a native node too)."""
    from ._generated import _tf_ns_fn, function
    try:
        return _tf_ns_fn(op)
    except AttributeError:
        return function(op)


_GOPS = None


@tf.RegisterGradient("CannaCall")
def _grad(node, *dys):
    """The gradient of a CannaCall node: the registry entry's backward in canna_dl.tf ops."""
    global _GOPS
    if _GOPS is None:
        from kernels._abstract import Namespace
        _GOPS = Namespace(_grad_fn, "canna_dl.tf functions (native backward)")
    TFOPS = _GOPS
    op = R.get_op(node.get_attr("op").decode())
    p = json.loads(node.get_attr("params").decode())
    attrs = p["a"]
    consts = {int(k): v for k, v in p["c"].items()}
    xs = list(node.inputs)
    v, _ = _args(op, node.get_attr("params").decode(), xs)
    in_index = {t.name: i for i, t in enumerate(op.inputs)}
    out_index = {n: i for i, n in enumerate(op.outputs)}
    if op.backward is None:
        raise NotImplementedError(f"canna_dl.tf: {op.qualname} has no backward (second derivatives are not supported "
                                  "where a backward kernel has none); differentiate once per tape")
    dys = [tf.zeros_like(o) if d is None else d for d, o in zip(dys, node.outputs)]
    nout = len(op.outputs)
    mask = [v[in_index[n]] is not None and in_index[n] not in consts for n in op.diff]
    present = [i for i, t in enumerate(op.inputs) if p["p"][i] and i not in consts]

    def grads(ns, d, vals, outs):
        """The gradients of the node's inputs (None for a non-differentiable one), in ``ns``."""
        vv, _ = _args(op, node.get_attr("params").decode(), list(vals))
        sv = [outs[out_index[n]] if n in out_index and n not in in_index else vv[in_index[n]] for n in op.save]
        by = R.call_backward(op, ns, list(d[:nout]), sv, attrs, mask)
        res = []
        for i in present:
            t = op.inputs[i]
            g = by.get(t.name) if t.diff else None
            if t.diff and g is None:
                g = tf.zeros_like(vv[i])
            elif g is not None:
                g = R.sum_to(ns, g, vv[i].shape)
            res.append(g)
        return res
    try:   # (a node of a graph saved before the attr existed has none)
        stat = node.get_attr("stat").decode()
    except (ValueError, KeyError):
        stat = ""
    try:   # native: the backward in canna_dl.tf ops (CannaCall nodes where they can be), counted once
        with counted_as(stat + "_grad" if stat else ""):
            return grads(TFOPS, dys, xs, list(node.outputs))
    except Exception:   # a backward the TF forms refuse (a bool mask, ...): one py_function node on the kernels
        pass
    from kernels._abstract import KOPS
    from ._autograd import backward, to_tf
    diff = [op.inputs[i].diff for i in present]

    def bwd(d, vals, outs):
        return [to_tf(g) for g, df in zip(grads(KOPS, d, vals, outs), diff) if df]
    return backward(stat or f"canna_dl.tf.{op.tf}", bwd, dys, xs, list(node.outputs), diff)
