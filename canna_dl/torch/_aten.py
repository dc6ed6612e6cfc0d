"""``offload(level="aten")``: canna's kernels for PyTorch's aten operators, below PyTorch's autograd.

The function level (:mod:`canna_dl.torch._offload`, a ``TorchFunctionMode``) sees torch functions
and runs canna's own autograd. This level sees what PyTorch's dispatcher runs after its autograd:
the aten operator overloads of the forward *and* of PyTorch's own backward formulas
(``aten::mm``, ``aten::threshold_backward``, ...). A block includes a dispatch key no PyTorch kernel
uses (``CustomRNGKeyId``, below autograd, above the dense backends) in the thread's dispatch key set; the library ``canna_dl/torch/_aten.cc``
(compiled at first use against the installed PyTorch's headers, cached like canna's kernels)
registers, for that key, canna's kernel for every aten overload a registry entry names in its
``aten=`` items and a fallback for all others, which runs PyTorch's own kernel. No Python runs for
the operators canna does not take, and none of the torch-function machinery runs at all: a call
whose signature has run before takes its item's direct call (:func:`_direct`: the C entry of the
op's kernel-level function, from the C++ kernel), the others one call into this module's handler.

The handler of an overload (:func:`_handler`, generated from the entry's ``aten=`` item) binds
the schema's arguments to the op's (``TorchFn.bind``), applies the item's fixed values and guard,
and runs the op's kernel-level function (``kernels.<name>``: no autograd; ``out=`` the written
argument for an in-place overload). A call canna refuses (an unsupported dtype: the kernel's
TypeError / ValueError, a fixed value, a guard) runs on PyTorch, counted with its reason in the
block's report. Tensors reach the handler zero-copy: a tensor that requires grad as a detached
alias (autograd is PyTorch's here), a wrapped number (``x + 2.0``) as the Python number (PyTorch's
weak scalar).

Unavailable (a RuntimeError at ``__enter__`` says why) without a C++ compiler or PyTorch's C++
headers, or in the discrete memory model (PyTorch's CPU tensors are host memory there).
"""
from __future__ import annotations

import ctypes
import inspect
import sys
import sysconfig
import threading
from pathlib import Path

import torch

import acl_rt
from kernels import _core as KC
from kernels import _registry as R

from . import _team

__all__ = ["available", "ATEN_OPS", "AtenOffload", "stats"]

_SRC = Path(__file__).with_name("_aten.cc")
#: the C form of the kernels' elementwise fast path (kernels._native.fast_api), which _aten.cc includes
_FAST_API_H = Path(KC.__file__).with_name("_native") / "fast_api.h"
_lock = threading.Lock()
_state = {"dll": None, "tried": False, "why": None}
_tls = threading.local()   # .block: the innermost aten-level block of this thread; .blocks: all of them


class _Refused:
    """The handlers' answer "run this call on PyTorch" (the C++ kernel redispatches it)."""
    __slots__ = ()

    def __repr__(self):
        return "<canna: run on PyTorch>"


FALLBACK = _Refused()


def _flags():
    root = Path(torch.__file__).parent
    inc, lib = root / "include", root / "lib"
    if not (inc / "torch" / "library.h").is_file():
        raise OSError(f"PyTorch's C++ headers are not installed ({inc})")
    flags = ("-w", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             "-I" + sysconfig.get_paths()["include"], f"-I{inc}", f"-I{inc / 'torch' / 'csrc' / 'api' / 'include'}",
             f"-I{_FAST_API_H.parent}")
    link = (f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}")
    return flags, link


def _load():
    if not KC._cfg.unified:
        return None, "the discrete memory model: PyTorch's CPU tensors are host memory the device does not read"
    from kernels import _compiler
    try:
        flags, link = _flags()
        path = _compiler.build_host_library("canna_torch_aten", _SRC, flags=flags, link_flags=link,
                                            key_parts=(torch.__version__, sys.version, _FAST_API_H.read_text()))
        dll = ctypes.PyDLL(str(path))
    except Exception as e:   # no compiler, no headers, a failing build
        return None, f"{type(e).__name__}: {e}"
    dll.canna_aten_configure.argtypes = [ctypes.py_object]
    dll.canna_aten_register.argtypes = [ctypes.c_char_p, ctypes.c_char_p] + [ctypes.py_object] * 3
    dll.canna_aten_other.argtypes = [ctypes.c_int]
    dll.canna_aten_other.restype = ctypes.py_object
    dll.canna_aten_counts.argtypes = [ctypes.c_void_p]
    dll.canna_aten_enter.argtypes = [ctypes.py_object]
    dll.canna_aten_enter.restype = ctypes.c_int64
    dll.canna_aten_exit.argtypes = [ctypes.c_int64]
    dll.canna_aten_hits.argtypes = []
    dll.canna_aten_hits.restype = ctypes.py_object
    dll.canna_aten_direct.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.py_object] * 9 + [ctypes.c_char_p]
    dll.canna_aten_configure_direct.argtypes = [ctypes.py_object] * 7
    dll.canna_aten_pass_views.argtypes = []
    dll.canna_aten_set_key.argtypes = [ctypes.c_int]
    dll.canna_aten_set_key.restype = ctypes.c_int
    dll.canna_aten_key_included.argtypes = []
    dll.canna_aten_key_included.restype = ctypes.c_int
    from kernels import _native
    from kernels._registry import _CAP, _FS, _L, _S
    try:
        dll.canna_aten_configure_direct(_native.memo, _native.fast, _FS, _CAP, _L, _S, _native.fast_api)
    except Exception as e:
        return None, f"canna_aten_configure_direct refused the fast-path state: {e}"
    dll.canna_aten_configure(FALLBACK)
    for op in R.registered_ops():
        _register(dll, op)
    from . import _offload_optim
    for name, row, run in _offload_optim.aten_entries():
        _route(dll, name, row, run)
    try:
        dll.canna_aten_pass_views()   # (after the routes: a routed operator keeps canna's kernel)
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
    return dll, None


def _dll():
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                _state["dll"], _state["why"] = _load()
                _state["tried"] = True
    return _state["dll"]


def available() -> bool:
    """Whether ``offload(level="aten")`` can run here (compiles the library on the first call)."""
    return _dll() is not None


def why_unavailable():
    """Why :func:`available` is False (None when it is True)."""
    _dll()
    return _state["why"]


def stats() -> dict:
    """``{"canna": n, "refused": n, "direct": n, "direct_c": n}``: aten calls canna ran, refused,
    served by the C++ direct path without Python (part of ``canna``), and of those the calls its C
    route served (an elementwise fast path on the dispatcher's own tensors: no Python object made);
    this process, all threads."""
    dll = _dll()
    if dll is None:
        return {"canna": 0, "refused": 0, "direct": 0, "direct_c": 0}
    a = (ctypes.c_uint64 * 4)()
    dll.canna_aten_counts(a)
    return {"canna": a[0], "refused": a[1], "direct": a[2], "direct_c": a[3]}


# ---------------------------------------------------------------------------------------------
# the handlers, generated from the registry's aten= items

def _schema(name):
    """``(OpOverload, argument names)`` of ``"aten::add.Tensor"``."""
    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    ov = getattr(packet, overload or "default")
    return ov, [a.name for a in ov._schema.arguments]


_BACKWARD_API = "kernels.backward."


def report_name(op, spec) -> str:
    """The report row of an aten item: the function level's row of the same computation — the
    item's ``report`` if it names one; a backward kernel's (``api`` ``kernels.backward.<forward>``)
    ``<forward>``; else the op's name (``<name>_`` for an in-place overload)."""
    if spec.report is not None:
        return spec.report
    if op.api.startswith(_BACKWARD_API):
        return op.api[len(_BACKWARD_API):]
    return f"{op.name}_" if spec.inplace else op.name


def is_backward(op) -> bool:
    """Whether an aten item of ``op`` counts in its row's ``backward`` column: ``op`` is a backward
    kernel (``api`` ``kernels.backward.<forward>``)."""
    return op.api.startswith(_BACKWARD_API)


def _handler(op, spec):
    """``h(*schema arguments) -> result or FALLBACK`` for one aten item of ``op``, and its
    ``check(*schema arguments)`` (:func:`_checker`: PyTorch's rules, the item's fixed values and
    guard; once per call signature, so the handler runs only what the check let through)."""
    from ._generated import op_arguments, refuse_unbound
    from ._offload import _Fallback
    _names, _defaults, src, dflt, fixed, nonone = spec.bind(op)
    convert, guard_kw = spec.extras(op)
    kernel, inplace, output, guard, result = op.kernel, spec.inplace, spec.output, spec.guard, spec.result
    own = [t.name for t in op.inputs] + [a.name for a in op.attrs]
    try:   # a hand-written kernel keeps its own parameter order (PyTorch's): bind by name then
        ps = list(inspect.signature(kernel).parameters.values())[:len(own)]
        positional = [p.name for p in ps] == own and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in ps)
    except (TypeError, ValueError):
        positional = False

    # an in-place overload writes its first schema argument: the op argument bound to it (the op's
    # first input but for aten::masked_fill_, where's y)
    w = src.index(0) if inplace else 0

    def run(v, out=None):
        args = op_arguments(v, src, dflt, convert)
        if inplace:
            out = args[w]
        if positional:
            r = kernel(*args) if out is None else kernel(*args, out=out)
        else:
            kw = dict(zip(own, args))
            r = kernel(**kw) if out is None else kernel(**kw, out=out)
        if result is not None:
            r = result(r, *args)
        return r if output is None else r[output]

    def refusal(v):   # what the signature decides: fixed values, not-None attributes, the guard
        try:
            refuse_unbound(v, fixed, nonone)
        except _Fallback as e:
            return str(e)
        if guard is not None:
            return guard(*op_arguments(v, src, dflt, convert), **{nm: v[i] for nm, i in guard_kw}) or None
        return None
    return _counted(report_name(op, spec), spec.fn, run, is_backward(op)), refusal


def _counted(row, name, run, backward=False):
    """The handler the C++ kernel calls: ``run(arguments)`` in the thread's block, counted in its
    report under ``row`` (its ``backward`` column for a backward kernel); a refusal (canna's argument
    errors, ``_Fallback``) answers FALLBACK with the reason counted (``strict``: raises RuntimeError)."""
    from ._offload import _CAUGHT, _Fallback, refusal_reason
    refusals = (_Fallback,) + _CAUGHT

    def h(*v, **out):   # (out=: the output the C++ kernel laid out as PyTorch would: see _checker)
        blk = getattr(_tls, "block", None)
        if blk is None or row not in blk.enabled:
            return FALLBACK
        try:
            r = run(v, **out)
        except refusals as exc:
            _refuse(blk, row, name, refusal_reason(exc))
            return FALLBACK
        st = blk.report._stat(row)
        if backward:
            st.backward += 1
        else:
            st.canna += 1
        return r
    h.__qualname__ = h.__name__ = f"aten_{row}"
    return h


def _refuse(blk, row, name, reason):
    """Count a refusal of ``name`` in ``blk``'s report under ``row`` (``strict``: raise RuntimeError)."""
    blk.report._stat(row).refused(reason)
    if blk.strict:
        raise RuntimeError(f"canna_dl.torch.offload(level='aten', strict=True): {name} ({row}) would run on "
                           f"PyTorch: {reason}")


def _refuser(row, name):
    """``refuse(reason)``: the C++ kernel's refusal of a call signature its check refused."""
    def refuse(reason):
        blk = getattr(_tls, "block", None)
        if blk is not None:
            _refuse(blk, row, name, reason)
    return refuse


def _meta(v):
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, tuple):
        return tuple(_meta(e) for e in v)
    return v


def _checker(ov, refusal=None, unchecked=(), strided=False, elementwise=False, inplace=False):
    """``check(*arguments)``: what PyTorch's own rules say of a call signature, from the operator's
    meta kernel (PyTorch's shape and dtype checks and result shapes, without data; run once per
    signature by the C++ kernel, which caches the answer). Below the dispatcher none of aten's
    argument checks has run, so canna must not compute what PyTorch would reject (``False``: the
    call runs on PyTorch, which raises its own error); a result PyTorch lays out other than
    contiguously (a channels-last or transposed input's layout) is refused, canna's results being
    contiguous; otherwise the shape and dtype each result must have (``(sizes, dtype)`` or None per
    return: the C++ kernel compares canna's result with them and refuses the signature on a
    difference; not the ``unchecked`` ones, where the meta kernel's shapes are not the CPU
    kernel's). ``strided`` (an item whose one result the handler can write through ``out=``): a
    result PyTorch lays out non-contiguously is expected as ``(sizes, dtype, strides)`` instead, and
    the C++ kernel hands the handler an output laid out so (aclnn kernels write strided outputs) —
    or, for an elementwise fast-path item, runs it on its operands permuted into the result's dense
    stride order (docs/DESIGN.md, the aten level);
    with a channels-last input, the layout of an operator that is not ``elementwise`` (whose meta
    kernel may not give the CPU kernel's: ``aten::convolution``'s is contiguous) is that of
    PyTorch's own kernel run once on the signature's first call, where that changes nothing (no
    written argument, no random draw; else the signature is refused). An ``inplace`` item writes
    its argument in its own layout. None: the operator has no meta kernel (nothing to check). ``refusal(arguments)``:
    the item's own rules of the signature (fixed values, its guard), a reason or None; a
    :class:`kernels.Rejected` reason is PyTorch's rejection."""
    rets = ov._schema.returns
    args = ov._schema.arguments
    npos = next((i for i, a in enumerate(args) if a.kwarg_only), len(args))
    kw = [a.name for a in args[npos:]]
    # (running PyTorch's kernel in a check must change nothing: no written argument, no random draw)
    probe = not ov._schema.is_mutable and torch.Tag.nondeterministic_seeded not in ov.tags

    def check(*v):
        if not any(map(_has_tensor, v)):   # (only this key made the dispatcher call it: PyTorch raises)
            return False
        # a channels-last input: PyTorch's kernels keep its layout, which the meta kernel of an
        # operator that is not elementwise may not say (aten::convolution's is contiguous)
        cl = not inplace and any(isinstance(a, torch.Tensor) and a.dim() in (4, 5) and not a.is_contiguous() and
                                 a.is_contiguous(memory_format=torch.channels_last if a.dim() == 4
                                                 else torch.channels_last_3d) for a in v)
        cl_why = "a channels-last input (PyTorch's kernels keep its layout; canna's results are contiguous)"
        if cl and not (strided and (elementwise or probe)):
            return cl_why
        try:
            if cl and not elementwise:   # the layout of PyTorch's own CPU kernel (once per signature)
                m = ov(*v[:npos], **dict(zip(kw, v[npos:])))
            else:
                m = ov(*[_meta(a) for a in v[:npos]], **{k: _meta(a) for k, a in zip(kw, v[npos:])})
        except NotImplementedError:
            return None
        except Exception:   # PyTorch's own checks reject it: PyTorch raises its error
            return False
        outs = m if isinstance(m, tuple) else (m,) if rets else ()
        exp = []
        for k, (r, o) in enumerate(zip(rets, outs)):
            if r.alias_info is not None and r.alias_info.is_write or not isinstance(o, torch.Tensor | None) or \
                    k in unchecked:
                exp.append(...)   # the written argument itself, a list, an unchecked result: not compared
            elif o is None:
                exp.append(None)
            elif o.numel() > 1 and not o.is_contiguous():
                if not strided or len(rets) != 1 or _overlaps(o):
                    return (f"PyTorch's result keeps the input's layout (strides {tuple(o.stride())}); canna's "
                            f"results are contiguous")
                exp.append((tuple(o.shape), o.dtype, tuple(o.stride())))
            else:
                exp.append((tuple(o.shape), o.dtype))
        why = refusal(v) if refusal is not None else None
        if why:
            return False if isinstance(why, R.Rejected) else str(why)
        return tuple(exp)
    return check


def _overlaps(t):
    """Whether a layout maps two elements to one address (a broadcast's zero stride: no output)."""
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


def _has_tensor(v):
    return isinstance(v, torch.Tensor) or isinstance(v, tuple) and any(map(_has_tensor, v))


#: report rows of the aten level's items (registry op names, ``<name>_`` for in-place overloads);
#: ``ATEN_OPS`` (module attribute) is :func:`_aten_rows`: these and the user ops' rows, the library
#: loaded on first access
_ITEM_ROWS: tuple = ()


def _register(dll, op):
    """Route the entry's aten items (and its ``at_aten`` torch functions) to canna, at load."""
    global _ITEM_ROWS
    rows = set(_ITEM_ROWS)
    for spec in op.aten:
        ov, schema_names = _schema(spec.fn)
        names = spec.bind(op)[0]
        if spec.args is not None and [p[0] for p in spec.args] != schema_names:
            raise R.RegistrationError(f"{op.qualname}: aten item {spec.fn}: its args {[p[0] for p in spec.args]} are "
                                      f"not the schema's arguments {schema_names}")
        if len(names) != len(schema_names) and not spec.fixed:
            raise R.RegistrationError(f"{op.qualname}: aten item {spec.fn} binds {len(names)} arguments, its schema "
                                      f"has {len(schema_names)} ({', '.join(schema_names)})")
        qual, _, overload = spec.fn.partition(".")
        row = report_name(op, spec)
        handler, refusal = _handler(op, spec)
        # (the handler writes a single result through out= where the kernel-level function takes it)
        strided = not spec.inplace and spec.output is None and spec.result is None and _takes_out(op.kernel)
        check = _checker(ov, refusal, spec.unchecked, strided=strided, elementwise=op.elementwise, inplace=spec.inplace)
        eid = dll.canna_aten_register(qual.encode(), overload.encode(), handler, check, _refuser(row, spec.fn))
        if eid < 0:
            raise R.RegistrationError(f"{op.qualname}: cannot route {spec.fn}")
        _set_row(eid, row)
        d = _direct(op, spec)
        hits = f"{row}.backward" if is_backward(op) else row   # (the key of the C++ path's hits: see _fold)
        if d is not None and dll.canna_aten_direct(eid, *d, hits.encode()) != 0:
            raise R.RegistrationError(f"{op.qualname}: cannot set the direct call of {spec.fn}")
        rows.add(row)
    _ITEM_ROWS = tuple(sorted(rows))
    _route_functions(dll, op)


def _takes_out(fn):
    try:
        p = inspect.signature(fn).parameters.get("out")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind is p.KEYWORD_ONLY


#: the report row of each C++ entry id (the blocks' masks are built from it)
_ROWS: list = []


def _set_row(eid, row):
    while len(_ROWS) <= eid:
        _ROWS.append(None)
    _ROWS[eid] = row


def _direct(op, spec):
    """The C++ direct call of an aten item: ``(kind, op id, API name, src, dflt, fixed, nonone,
    codes, result, convert)`` (src -2 - i: the schema's list argument i, passed as its length and
    then its tensors) — the C function the op's kernel-level function tries first (kind 1:
    the memo path ``memo(id, stream, *args)``, 2: the elementwise fast path ``fast(id, stream, x,
    y, p)``) with each of its arguments' schema index (or -1 and a constant), the item's fixed
    values and not-None attributes, its result adapter (applied to a hit's result, as the handler
    does) and per argument the item's conversion or None (``TorchFn.convert``: aten's reduction
    code as its name) — or None where the Python handler must run every call (an output index, an
    in-place form without a fast path). (A guard is the signature's check's.)"""
    if spec.output is not None:
        return None
    _names, _d, src, dflt, fixed, nonone = spec.bind(op)
    n = len(op.inputs)
    own = [t.name for t in op.inputs] + [a.name for a in op.attrs]
    slot = dict(zip(own, zip(src, dflt)))
    codes = None
    if R.has_fast_path(op) and op.fast_id is not None:
        if spec.inplace and not op.elementwise:
            return None
        kind, fid, hidden = 2, int(op.fast_id) | (R.INPLACE if spec.inplace else 0), {}
        order = [own[0], own[1] if n == 2 else None, own[n] if op.attrs else None]
        if op.attrs and op.attrs[0].type is str:
            codes = {c: i for i, c in enumerate(op.attrs[0].choices or ())}
    elif op.memo is not None and not spec.inplace:
        (fid, order, hidden), kind = op.memo, 1
    else:
        return None
    conv = {own[j]: f for j, f in spec.extras(op)[0]}
    if conv and kind == 2:
        return None   # (the elementwise fast paths' items convert nothing)
    srcs, dflts = [], []
    for nm in order:   # (a parameter of the function no op argument names: its default, as the kernel passes it)
        lst = R.memo_list(nm) if nm is not None else None
        if lst is not None:   # a list input: -2 - its schema index
            i = slot.get(lst, (None, None))[0]
            if i is None or conv.get(lst) is not None:
                return None
            srcs.append(-2 - i)
            dflts.append(None)
            continue
        i, d = slot.get(nm, (None, hidden.get(nm))) if nm is not None else (None, None)
        srcs.append(-1 if i is None else i)
        dflts.append(d)
    return (kind, fid, op.api, tuple(srcs), tuple(dflts), tuple((i, want) for i, _n, want in fixed),
            tuple(i for i, _n in nonone), codes, spec.result, tuple(conv.get(nm) for nm in order))


def _route(dll, name, row, run):
    """Route one aten overload to a hand-written ``run(arguments)`` (the optimizers' fused steps)."""
    global _ITEM_ROWS
    qual, _, overload = name.partition(".")
    eid = dll.canna_aten_register(qual.encode(), overload.encode(), _counted(row, name, run), _checker(_schema(name)[0]),
                                  _refuser(row, name))
    if eid < 0:
        raise R.RegistrationError(f"cannot route {name}")
    _set_row(eid, row)
    _ITEM_ROWS = tuple(sorted(set(_ITEM_ROWS) | {row}))


#: the torch.library registrations of the torch functions routed as functions (kept alive)
_LIBS: list = []


def _route_functions(dll, op):
    """Route the entry's ``at_aten`` torch functions: PyTorch runs them as backend-specific aten
    operators canna has no item for (``torch.lstm`` on the CPU: ``aten::mkldnn_rnn_layer``), so the
    aten level takes the CompositeImplicitAutograd operator the function dispatches to
    (``aten::lstm.input``) at the autograd key, above its decomposition: in a block that routes the
    row, the op's function-level form runs it (canna's composition and autograd: the same handler as
    ``offload(level="function")``, with this level's key off), counted in the row; anywhere else,
    and for a call canna refuses, the operator redispatches below autograd to PyTorch's own
    composite kernel, exactly as without canna."""
    from ._generated import _offload_entry, _resolve, function
    from ._offload import _CAUGHT, _Fallback, count_backward_in, refusal_reason
    refusals = (_Fallback,) + _CAUGHT
    for spec in op.torch:
        if not spec.at_aten:
            continue
        f = _resolve(spec.fn)
        if f is None:
            continue
        _f, names, defaults, _fixed, h, row = _offload_entry(op, function(op), f, spec)
        ov, schema_names = _schema(spec.at_aten)
        if list(names) != schema_names:
            raise R.RegistrationError(f"{op.qualname}: {spec.fn}'s parameters {list(names)} are not {spec.at_aten}'s "
                                      f"arguments {schema_names}")
        below = torch._C._after_autograd_keyset
        # (torch.library passes the keyword-only arguments by name and leaves out trailing defaults:
        # the handler takes every argument in the schema's order)
        schema = tuple((a.name, a.default_value) for a in ov._schema.arguments)

        def kernel(keyset, *v, _ov=ov, _h=h, _row=row, _name=spec.at_aten, _schema=schema, **kw):
            blk = getattr(_tls, "block", None)
            if torch._C._are_functorch_transforms_active() or getattr(_tls, "functorch", 0):
                # under torch.func's transforms (grad, vmap, ...) canna's autograd.Functions cannot
                # run: PyTorch's, also for the call the transform makes again one level down
                _tls.functorch = getattr(_tls, "functorch", 0) + 1
                try:
                    return _ov.redispatch(keyset & below, *v, **kw)
                finally:
                    _tls.functorch -= 1
            if blk is not None and _row in blk.enabled and dll.canna_aten_key_included():
                prev = dll.canna_aten_set_key(0)
                try:
                    r = _h(v + tuple(kw.get(n, d) for n, d in _schema[len(v):]))
                except refusals as exc:
                    _refuse(blk, _row, _name, refusal_reason(exc))
                else:
                    st = blk.report._stat(_row)
                    st.canna += 1
                    count_backward_in(r, st)   # (canna's backward node: the row's backward column)
                    return r
                finally:
                    dll.canna_aten_set_key(prev)
            return _ov.redispatch(keyset & below, *v, **kw)
        qual = spec.at_aten.partition("::")[2]
        lib = torch.library.Library(spec.at_aten.partition("::")[0], "IMPL")
        lib.impl(qual, kernel, "AutogradCPU", with_keyset=True)
        _LIBS.append(lib)
        global _ITEM_ROWS
        _ITEM_ROWS = tuple(sorted(set(_ITEM_ROWS) | {row}))


def __getattr__(name):   # (ATEN_OPS: the rows as they are now, the library loaded on first use)
    if name == "ATEN_OPS":
        return _aten_rows()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _aten_rows():
    """The aten level's report rows: its items', its ``at_aten`` functions' and the user ops'."""
    _dll()
    return tuple(sorted(set(_ITEM_ROWS) | _user_rows()))


# ---------------------------------------------------------------------------------------------
# the block

_VIEWS: dict = {}


def _is_view(name):
    v = _VIEWS.get(name)
    if v is None:
        try:
            v = _VIEWS[name] = bool(_schema(name)[0].is_view)
        except Exception:
            v = _VIEWS[name] = False
    return v


class AtenOffload:
    """The context manager behind ``offload(level="aten")`` (one per ``with`` block)."""

    def __init__(self, *, ops=None, exclude=(), strict=False, report=None):
        from ._offload import OFFLOAD_OPS, block_options
        rows = _aten_rows()
        if _state["dll"] is None:
            raise RuntimeError(f"canna_dl.torch.offload(level='aten') is not available here: {_state['why']}")
        self.enabled, self._all, self.report = block_options("canna_dl.torch.offload(level='aten')", rows, ops,
                                                             exclude, report, known=OFFLOAD_OPS)
        self.strict = bool(strict)
        self._token = None
        user = _user_rows() & self.enabled
        # user ops map torch functions (register_op(torch=...)), not aten operators: those functions
        # reach them through a function-level mode that routes only them and counts nothing else
        self._fn = None if not user else _offload_mode(ops=sorted(user), strict=strict, report=self.report)

    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("canna_dl.torch.offload: this block is already entered (make a new one)")
        acl_rt.init()
        blocks = _blocks()
        _fold(blocks[-1] if blocks else None)   # (an enclosing block's PyTorch calls so far are its own)
        mask = bytes(1 if r in self.enabled else 0 for r in _ROWS)
        self._token = _state["dll"].canna_aten_enter(mask)
        _team.enter()
        blocks.append(self)
        _tls.block = self
        if self._fn is not None:
            self._fn.__enter__()
        return self.report

    def __exit__(self, *exc):
        # blocks may end in any order (two generators' blocks, contextlib.ExitStack): this one leaves
        # the thread's blocks wherever it is; the innermost that is left routes the thread's calls
        if self._fn is not None:
            self._fn.__exit__(*exc)
        blocks = _blocks()
        _fold(blocks[-1] if blocks else self)   # (the calls since the last fold ran in the innermost block)
        _state["dll"].canna_aten_exit(self._token)
        _team.exit()
        self._token = None
        if self in blocks:
            blocks.remove(self)
        _tls.block = blocks[-1] if blocks else None
        return False


def _user_rows():
    """The report rows of the user ops that map torch functions (``register_op(torch=...)``)."""
    return {op.name for op in R.registered_ops() if op.namespace != "canna" and op.generate and op.torch}


def _offload_mode(**kw):
    from ._offload import Offload
    return Offload(quiet=True, **kw)


def _blocks():
    b = getattr(_tls, "blocks", None)
    if b is None:
        b = _tls.blocks = []
    return b


def _fold(block):
    """Add this thread's counts since the last fold to ``block``'s report: canna's calls the C++
    direct path served and PyTorch's calls (views, which compute nothing, left out); None: discard
    them."""
    dll = _state["dll"]
    counts, hits = dll.canna_aten_other(1), dll.canna_aten_hits()
    if block is None:
        return
    for key, n in hits.items():   # the calls the C++ direct path served (no handler counted them)
        row, _, column = key.partition(".")
        st = block.report._stat(row)
        if column:
            st.backward += n
        else:
            st.canna += n
    other = block.report._other
    own = {op.namespace for op in R.registered_ops()}
    for name, n in counts.items():   # (canna's own custom ops are counted where they were routed)
        if not _is_view(name) and name.partition("::")[0] not in own:
            other[name] = other.get(name, 0) + n
