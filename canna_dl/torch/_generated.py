"""The PyTorch shim generated from the op registry (kernels/_registry.py, docs/DESIGN.md §11).

For an entry ``op`` this makes, once:

- :func:`function`: the routing function (``canna_dl.torch.<name>``; see ``_common.route``):
  eager kernel call, a ``torch.autograd.Function`` when an input requires grad, or the custom op
  under ``torch.compile`` / ``torch.func`` / for tensor subclasses;
- :func:`custom_op`: ``torch.ops.<namespace>.<name>``, a ``torch.library.custom_op`` whose schema
  comes from the entry's inputs and attributes, with ``register_fake`` from its shape rule and
  ``register_autograd`` from its backward;
- :func:`offload_entries`: the ``offload()`` mapping of the torch functions the entry names.

The backward runs against a namespace of registered ops: the routing functions when PyTorch
records a graph of the backward (``create_graph=True``, ``torch.compile``), which makes it
differentiable again where its ops are; plain kernel calls otherwise. An op with no backward
raises a clear error when differentiated.
"""
from __future__ import annotations

import numbers
import threading

import torch

import canna_dl
from kernels import _abstract
from kernels import _registry as R

from . import _common as C
from ._common import CUSTOM, EAGER, NoTorchFunction, Tensor, grad_enabled, plain, route

__all__ = ["function", "custom_op", "inplace_function", "offload_entries", "FUNCTIONS"]

_lock = threading.RLock()
_fns: dict = {}        # qualname -> routing function
_customs: dict = {}    # qualname -> custom op
_classes: dict = {}    # qualname -> autograd.Function
#: the autograd.Function classes made here (offload() counts their backward nodes)
FUNCTIONS: list = []


def _hand(name):
    """The hand-written routing functions of the ops whose shims are not generated yet."""
    from . import _functions as F
    return {"sum": F._sum, "mean": F._mean, "sum_to_size": F._sum_to_size}.get(name)


def _torch_ns_fn(op):
    if op.generate:
        return function(op)
    f = _hand(op.name)
    if f is None:
        raise AttributeError(f"ops.{op.name}: canna_dl.torch has no differentiable form of {op.qualname} yet")
    return f


#: backward ops when a graph is recorded (differentiable; custom ops under torch.compile)
TOPS = _abstract.Namespace(_torch_ns_fn, "canna_dl.torch routing functions")


class _Lookup(_abstract.Namespace):
    """TOPS without its cache: what a backward traced by Dynamo inside an autograd.Function uses
    (a higher-order op may not mutate state from outside it; every registered op's function exists
    once ``canna_dl.torch`` is imported or the op is registered)."""

    def __getitem__(self, name):
        return self._make(_abstract._resolve(name))


TOPS_TRACED = _Lookup(_torch_ns_fn, "canna_dl.torch routing functions (uncached)")


def _plain_fn(op):
    k = op.kernel

    def f(*args, **kwargs):
        return k(*[plain(a) for a in args], **kwargs)
    return f


#: backward ops without a graph: the kernels on plain tensors
PKOPS = _abstract.Namespace(_plain_fn, "kernels on plain tensors")


def _as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def _reduce_to(ops, g, t):
    """A gradient brought to its input's ``(shape, dtype)`` ``t``: a broadcast operand's is summed
    (``kernels._registry.sum_to``, with the backward's own ``ops``), a promoted one cast back."""
    if g is None or t is None:
        return g
    if g.shape != t[0]:
        g = R.sum_to(ops, g, t[0])
    if g.dtype != t[1]:
        from . import _functions as F
        g = F._cast(g, t[1])
    return g


def _no_backward(op):
    def backward(ctx, *grads):
        raise RuntimeError(f"canna_dl.torch: double backward of {op.qualname} is not supported (canna's backward "
                           "kernel for it has no derivative); use PyTorch's own op for higher-order gradients")
    return backward


def _run_backward(op, ops, grads, saved, attrs, metas, needs):
    """One gradient per input (a list of them for a list input, None where not needed); the
    backward gets the wanted ones as ``grad_input_mask`` (``kernels._registry.call_backward``)."""
    want = dict(zip((t.name for t in op.inputs), needs))
    by = R.call_backward(op, ops, grads, saved, attrs, [bool(want[n]) for n in op.diff])
    out = []
    for i, t in enumerate(op.inputs):
        g = by.get(t.name) if needs[i] else None
        if t.list:
            m = metas[i] or ()
            out.append(None if g is None else [_reduce_to(ops, gj, mj) for gj, mj in zip(g, m)])
        else:
            out.append(_reduce_to(ops, g, metas[i]))
    return out


def _metas(op, arrays):
    """(shape, dtype) of each input (a list of them for a list input; None for an absent one or a
    Python number)."""
    return [[(b.shape, b.dtype) for b in a] if t.list and a is not None else
            (a.shape, a.dtype) if isinstance(a, Tensor) else None
            for t, a in zip(op.inputs, arrays)]


def _save(ctx, items):
    """save_for_backward of tensors and lists of tensors (a list input named in ``save``); Python
    numbers (a scalar operand, ``x * 2``) are kept on ctx."""
    if any(isinstance(v, (list, tuple)) for v in items):
        ctx.saved_lay = [len(v) if isinstance(v, (list, tuple)) else -1 for v in items]
        items = [x for v in items for x in (v if isinstance(v, (list, tuple)) else (v,))]
    if any(v is not None and not isinstance(v, Tensor) for v in items):
        ctx.consts = [None if isinstance(v, Tensor) else v for v in items]
        items = [v if isinstance(v, Tensor) else None for v in items]
    ctx.save_for_backward(*items)


def _load(ctx):
    saved = ctx.saved_tensors
    consts = getattr(ctx, "consts", None)
    if consts is not None:
        saved = [c if t is None else t for t, c in zip(saved, consts)]
    lay = getattr(ctx, "saved_lay", None)
    return saved if lay is None else R.unflatten(lay, saved)


def _forward(ctx, op, arrays, attrs, traced, nd_names):
    """The forward of an entry's autograd.Function (list inputs as lists): the kernel (or, traced,
    the custom op), what the backward needs saved, the non-differentiable outputs marked."""
    if traced:
        outs = custom_op(op)(*arrays, **_torch_attrs(op, attrs))
    else:
        outs = op.kernel(*_plain_args(arrays), **attrs)
    ot = _as_tuple(outs)
    ctx.attrs = attrs
    ctx.metas = _metas(op, arrays)
    _save(ctx, op.saved(arrays, ot))
    if nd_names:
        ctx.mark_non_differentiable(*[o for o, nm in zip(ot, op.outputs) if nm in nd_names])
    return outs


def _list_function_class(op, traced=False):
    """The autograd.Function of an op with a list input: applied to the flat tensors (autograd
    tracks the tensors of ``apply``'s arguments, not those inside a list) after their layout."""
    names = [a.name for a in op.attrs]
    nd_names = [o for o in op.outputs if o not in op.diff_outputs]

    def forward(ctx, lay, *args):
        nflat = sum(1 if n == -1 else n for n in lay if n is not None)
        arrays = R.unflatten(lay, args[:nflat])
        ctx.lay, ctx.nflat = lay, nflat
        return _forward(ctx, op, arrays, dict(zip(names, args[nflat:])), traced, nd_names)

    if op.backward is None:
        backward = _no_backward(op)
    else:
        def backward(ctx, *grads):
            with NoTorchFunction():
                ops = TOPS_TRACED if traced else TOPS if grad_enabled() else PKOPS
                need_flat = ctx.needs_input_grad[1:1 + ctx.nflat]
                needs = [False if n is None else any(v) if isinstance(v, list) else v
                         for n, v in zip(ctx.lay, R.unflatten(ctx.lay, need_flat))]
                gx = _run_backward(op, ops, grads, _load(ctx), ctx.attrs, ctx.metas, needs)
                flat = []
                for n, g in zip(ctx.lay, gx):
                    if n is None:
                        continue
                    if n < 0:
                        flat.append(g)
                    else:
                        flat.extend(g if g is not None else [None] * n)
                return (None, *flat, *([None] * len(names)))

    cls = type(f"_{op.namespace}_{op.name}{'_traced' if traced else ''}", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    if not traced:
        FUNCTIONS.append(cls)
    return cls


def _function_class(op, traced=False):
    """The eager ``autograd.Function``; ``traced``: the one whose forward calls the custom op (a
    mutating op's gradient under ``torch.compile``: PyTorch's ``register_autograd`` refuses ops that
    mutate their inputs, and Dynamo traces an autograd.Function around the op instead)."""
    if op.lists:
        return _list_function_class(op, traced)
    n = len(op.inputs)
    names = [a.name for a in op.attrs]
    nd_names = [o for o in op.outputs if o not in op.diff_outputs]

    def forward(ctx, *args):
        return _forward(ctx, op, args[:n], dict(zip(names, args[n:])), traced, nd_names)

    if op.backward is None:
        backward = _no_backward(op)
    else:
        def backward(ctx, *grads):
            with NoTorchFunction():
                ops = TOPS_TRACED if traced else TOPS if grad_enabled() else PKOPS
                gx = _run_backward(op, ops, grads, _load(ctx), ctx.attrs, ctx.metas, ctx.needs_input_grad[:n])
                return (*gx, *([None] * len(names)))

    cls = type(f"_{op.namespace}_{op.name}{'_traced' if traced else ''}", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    if not traced:
        FUNCTIONS.append(cls)
    return cls


_SCHEMA_TYPES = {int: "int", float: "float", bool: "bool", str: "str", R.INT_LIST: "int[]", R.BOOL_LIST: "bool[]",
                 R.DTYPE: "ScalarType", numbers.Number: "Scalar"}


def _default(v):
    if v is None:
        return "None"
    if isinstance(v, tuple):
        return "[" + ", ".join(map(repr, v)) + "]"
    return repr(v)


def variants(op) -> list:
    """The custom ops of an entry, as tuples of the inputs that are Python numbers in them: ``()``
    (every input a tensor) and, for ``scalar`` inputs, each set of them with a tensor left."""
    import itertools
    sc = [i for i, t in enumerate(op.inputs) if t.scalar]
    out = [()]
    for k in range(1, len(sc) + 1):
        out += [c for c in itertools.combinations(sc, k) if len(c) < len(op.inputs)]
    return out


def variant_name(op, numbers_at) -> str:
    """``<name>`` for all tensors; with a number as the second of two inputs ``<name>_scalar``,
    as the first ``r<name>_scalar`` (the reflected op: ``rsub_scalar(t, 2)`` is ``2 - t``), else
    ``<name>_<inputs>_scalar``."""
    if not numbers_at:
        return op.name
    if len(op.inputs) == 2 and len(numbers_at) == 1:
        return f"{op.name}_scalar" if numbers_at == (1,) else f"r{op.name}_scalar"
    return f"{op.name}_{'_'.join(op.inputs[i].name for i in numbers_at)}_scalar"


#: variant custom op name (``add_scalar``) -> the entry's name (``add``), for offload()'s report
VARIANTS: dict = {}


def _order(op, numbers_at):
    """Schema position -> input index: the tensors first (``self``), then the numbers."""
    return [i for i in range(len(op.inputs)) if i not in numbers_at] + list(numbers_at)


def schema(op, numbers_at=()) -> str:
    """The custom op's schema, from the entry's inputs, attributes and outputs (``numbers_at``:
    the inputs that are ``Scalar`` s in this variant, after the tensors)."""
    parts = []
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    for i in _order(op, numbers_at):
        t = op.inputs[i]
        if i in numbers_at:
            parts.append(f"Scalar {t.name}")
            continue
        ty = f"Tensor({next(alias)}!)" if t.mutated else "Tensor"   # aten's Tensor(a!)[] for a mutated list
        if t.list:
            ty += "[]"
        parts.append(f"{ty}{'?' if t.optional else ''} {t.name}{'=None' if t.optional else ''}")
    for a in op.attrs:
        ty = _SCHEMA_TYPES.get(a.type)
        if ty is None:
            raise R.RegistrationError(f"{op.qualname}: attribute {a.name} has no torch schema type")
        if a.optional:
            ty += "?"
        parts.append(f"{ty} {a.name}" + ("" if a.required else f"={_default(a.default)}"))
    outs = ", ".join("Tensor" for _ in op.outputs)
    return f"({', '.join(parts)}) -> " + (outs if len(op.outputs) == 1 else f"({outs})")


def _bump(op, arrays):
    """Tell autograd that the mutated inputs changed (their version counter: a saved tensor updated
    since it was saved then fails clearly, as after PyTorch's own in-place ops)."""
    for i in op.mutated:
        a = arrays[i]
        for t in (a if isinstance(a, list) else () if a is None else (a,)):
            torch.autograd.graph.increment_version(t)


def _spec(t):
    """The Spec of a tensor (None, or a Python number, as given)."""
    return R.Spec(tuple(t.shape), canna_dl.dtype(t.dtype)) if isinstance(t, Tensor) else t


def _tdtype(dt):
    return getattr(torch, dt.name)


def custom_op(op, numbers_at=()):
    """``torch.ops.<namespace>.<name>`` for the entry (made once), or its variant with Python
    numbers at the inputs ``numbers_at`` (see :func:`variants`)."""
    vname = variant_name(op, numbers_at)
    qn = f"{op.namespace}::{vname}"
    c = _customs.get(qn)
    if c is not None:
        return c
    with _lock:
        c = _customs.get(qn)
        if c is not None:
            return c
        n = len(op.inputs)
        names = [a.name for a in op.attrs]
        order = _order(op, numbers_at)

        def impl(*args, **kwargs):
            with NoTorchFunction():
                arrays, attrs = _args(op, args, kwargs, order)
                r = op.kernel(*[[plain(b) for b in a] if isinstance(a, list) else plain(a) for a in arrays], **attrs)
                if r is None:   # no outputs: the mutated inputs were updated
                    return None
                if isinstance(r, tuple):
                    if any(o is None for o in r):   # outputs not computed (an output_mask): empty, per the rule
                        like = next(b for a in arrays if a is not None for b in (a if isinstance(a, list) else (a,))
                                    if isinstance(b, Tensor))
                        specs = op.specs([_spec(a) if not isinstance(a, list) else [_spec(b) for b in a]
                                          for a in arrays], attrs)
                        r = tuple(like.new_empty(s.shape, dtype=_tdtype(s.dtype)) if o is None else o
                                  for o, s in zip(r, specs))
                    # a custom op must not return one of its inputs
                    return tuple(_fresh(o, args[:n]) for o in r)
                return _fresh(r, args[:n])
        impl.__name__ = vname
        mutates = tuple(op.inputs[i].name for i in op.mutated)
        c = torch.library.custom_op(qn, impl, mutates_args=mutates, schema=schema(op, numbers_at))

        def fake(*args, **kwargs):
            arrays, attrs = _args(op, args, kwargs, order)
            like = next(b for a in arrays if a is not None for b in (a if isinstance(a, list) else (a,))
                        if isinstance(b, Tensor))
            specs = op.specs([[_spec(b) for b in a] if isinstance(a, list) else _spec(a) for a in arrays], attrs)
            outs = tuple(like.new_empty(s.shape, dtype=_tdtype(s.dtype)) for s in specs)
            return outs[0] if len(outs) == 1 else (outs or None)
        c.register_fake(fake)
        if op.backward is not None and not op.mutated:
            def setup(ctx, inputs, output):
                arrays, attrs = _args(op, inputs, {}, order)
                ot = _as_tuple(output)
                ctx.attrs = attrs
                ctx.metas = _metas(op, arrays)
                _save(ctx, op.saved(arrays, ot))
                nd = [o for o, nm in zip(ot, op.outputs) if nm not in op.diff_outputs]
                if nd:
                    ctx.mark_non_differentiable(*nd)

            def bw(ctx, *grads):
                gx = _run_backward(op, TOPS, grads, _load(ctx), ctx.attrs, ctx.metas,
                                   [m is not None for m in ctx.metas])
                return (*[gx[i] for i in order], *([None] * len(names)))
            c.register_autograd(bw, setup_context=setup)
        _customs[qn] = c
        VARIANTS[vname] = op.name
        return c


def _args(op, args, kwargs, order=None):
    """(arrays, attrs) of a call of the custom op as the entry's values: torch may leave out
    arguments at their defaults or pass them by name, and passes an ``int[]`` as a list (the rules
    get the tuple the kernel-level function gets). ``order``: the schema's input positions (a
    scalar variant's, :func:`_order`)."""
    n = len(op.inputs)
    arrays = [None] * n
    for pos, i in enumerate(order if order is not None else range(n)):
        arrays[i] = args[pos] if pos < min(len(args), n) else kwargs.get(op.inputs[i].name)
    attrs = {}
    for a, v in zip(op.attrs, args[n:]):
        attrs[a.name] = v
    for a in op.attrs:
        if a.name not in attrs:
            attrs[a.name] = kwargs.get(a.name, a.default)
        if a.type is R.INT_LIST or a.type is R.DTYPE or a.type is R.BOOL_LIST:
            attrs[a.name] = a.check(op.api, attrs[a.name])
    return arrays, attrs


def _torch_attrs(op, attrs):
    """The attributes as the custom op takes them (a dtype attribute as a torch.dtype)."""
    if not any(a.type is R.DTYPE for a in op.attrs):
        return attrs
    return {k: (_tdtype(v) if isinstance(v, R.DTYPE) else v) for k, v in attrs.items()}


def _fresh(r, inputs):
    for a in inputs:
        if r is a:
            return r.clone()
    return r


def _check(op, api, arrays):
    for t, a in zip(op.inputs, arrays):
        if a is None:
            if not t.optional:
                raise TypeError(f"{api}: {t.name} must be a tensor, not None")
            continue
        if t.scalar and not isinstance(a, Tensor):
            if isinstance(a, bool) or not isinstance(a, (int, float)):
                raise TypeError(f"{api}: {t.name} must be a tensor or a Python number, not {type(a).__name__}")
            continue
        if t.list:
            for j, b in enumerate(a):
                _check_one(op, api, t, f"{t.name}[{j}]", b)
        else:
            _check_one(op, api, t, t.name, a)


_OK: dict = {}   # id(Tensor input) -> the torch dtypes it takes with no further check


def _ok_dtypes(op, t):
    ok = _OK.get(id(t))
    if ok is None:
        # the input's dtypes (an integer one only where the op keeps ints: not int in, float out)
        ok = frozenset(getattr(torch, d.name) for d in t.dtypes
                       if hasattr(torch, d.name) and (d.kind == "f" or op.shape is not R.same_float))
        ok = _OK[id(t)] = (t, ok)
    return ok[1]


def _check_one(op, api, t, name, a):
    if not isinstance(a, Tensor):
        raise TypeError(f"{api}: {name}: expected a torch.Tensor, got {type(a).__name__}; convert with "
                        "torch.as_tensor() or canna_dl.to_torch()")
    if t.mutated and a.requires_grad and grad_enabled():
        raise RuntimeError(f"{api}: {name} is updated in place and requires grad; update it under "
                           "torch.no_grad() (as PyTorch's optimizers do), or detach it")
    C.check_grad_dtype(api, name, a)
    if op.shape is R.same_float and not a.dtype.is_floating_point:
        # int in, float out: canna differentiates floating tensors only (cast first; offload falls back)
        C.check_float(api, name, a)
    dt = _known(a.dtype)
    if dt is not None and dt not in t.dtypes and all(C.category_is_float(d) for d in t.dtypes):
        C.check_float(api, name, a)
    if dt is None or dt not in t.dtypes:
        raise TypeError(f"{api}: {name} has dtype {a.dtype}, which this op does not support "
                        f"({', '.join(d.name for d in t.dtypes)})")


def _route_all(api, flat):
    """route() over any number of tensors: CUSTOM if any needs it, else AUTOGRAD if any requires grad."""
    r = EAGER
    for k in range(0, len(flat), 4):
        r = max(r, route(api, *flat[k:k + 4]))
    return r


def _plain_args(arrays):
    return [[plain(b) for b in a] if isinstance(a, list) else plain(a) for a in arrays]


def _known(dt):
    try:
        return canna_dl.dtype(dt)
    except (TypeError, ValueError, KeyError):
        return None


def function(op):
    """The routing function of the entry (``canna_dl.torch.<name>`` for canna's own)."""
    f = _fns.get(op.qualname)
    if f is not None:
        return f
    with _lock:
        f = _fns.get(op.qualname)
        if f is not None:
            return f
        api = f"canna_dl.torch.{op.name}" if op.namespace == "canna" else f"{op.namespace}.{op.name}"
        cls = _function_class(op)
        _classes[op.qualname] = cls
        traced = _function_class(op, traced=True) if op.mutated and op.backward is not None else None
        tensors = [t.name for t in op.inputs]
        params = [f"{t.name}=None" if t.optional else t.name for t in op.inputs]
        g = {"_route": route, "_k": op.kernel, "_p": plain, "_slow": None, "_api": api}
        for a in op.attrs:
            params.append(a.name if a.required else f"{a.name}=_D_{a.name}")
            g[f"_D_{a.name}"] = a.default
        attrs = ", ".join(f"{a.name}={a.name}" for a in op.attrs)
        call = ", ".join([f"_p({t})" for t in tensors] + ([attrs] if attrs else []))
        if len(tensors) <= 4 and not op.mutated and not op.lists:
            cond = ""
            if op.shape is R.same_float:   # ints are refused (see _check)
                cond = f" and getattr({tensors[0]}, 'dtype', None) in _FL"
                g["_FL"] = C.FLOATS
            head = (f"    r = _route(_api, {', '.join(tensors)})\n"
                    f"    if r == 0{cond}:\n        return _k({call})\n")
            known = "r"
        else:
            head, known = "", "None"
        attr_dict = ", ".join(f"{a.name!r}: {a.name}" for a in op.attrs)
        src = (f"def {op.name}({', '.join(params)}):\n{head}"
               f"    return _slow(({', '.join(tensors)},), {{{attr_dict}}}, {known})\n")
        oks = [_ok_dtypes(op, t) for t in op.inputs]

        through = op.through_parts

        def slow(arrays, attrs, r):
            for a in op.attrs:
                attrs[a.name] = a.check(api, attrs[a.name])
            if op.lists:
                arrays = list(arrays)
                for i, t in enumerate(op.inputs):
                    if t.list:
                        if not isinstance(arrays[i], (list, tuple)):
                            raise TypeError(f"{api}: {t.name} must be a list or tuple of tensors, not "
                                            f"{type(arrays[i]).__name__}")
                        arrays[i] = list(arrays[i])
                flat, lay = R.flatten(op, arrays)
                r = _route_all(api, flat)
                pre = (lay, *flat)
            else:
                flat = pre = arrays
                if r is None:
                    r = route(api, *arrays[:4]) if len(arrays) <= 4 else _route_all(api, arrays)
            for t, a, ok in zip(op.inputs, arrays, oks):
                # the common case in one test; anything else gets the detailed checks and messages
                if a is None and t.optional:
                    continue
                if type(a) is not Tensor or a.dtype not in ok or t.mutated or (
                        a.requires_grad and not a.dtype.is_floating_point):
                    _check(op, api, arrays)
                    break
            if through:   # differentiated through the registered ops it is made of (their Functions / custom ops)
                if r == EAGER:   # (a list input's tensors one by one)
                    return op.kernel(*[[plain(b) for b in a] if isinstance(a, list) else plain(a) for a in arrays],
                                     **attrs)
                with NoTorchFunction():
                    return op.forward(TOPS, *arrays, **attrs)
            if r == CUSTOM:
                if traced is not None and grad_enabled() and any(
                        isinstance(a, Tensor) and a.requires_grad for a in flat):
                    return traced.apply(*pre, *attrs.values())
                if scalars:   # the variant of the inputs that are numbers
                    at = tuple(i for i in scalars if arrays[i] is not None and not isinstance(arrays[i], Tensor))
                    if at:
                        return custom_op(op, at)(*[arrays[i] for i in _order(op, at)], **_torch_attrs(op, attrs))
                return custom_op(op)(*arrays, **_torch_attrs(op, attrs))
            if r == EAGER or not op.outputs:
                res = op.kernel(*_plain_args(arrays), **attrs)
            else:
                res = cls.apply(*pre, *attrs.values())
            if op.mutated:
                _bump(op, arrays)
            return res
        scalars = [i for i, t in enumerate(op.inputs) if t.scalar]
        g["_slow"] = slow
        exec(compile(src, f"<torch shim {op.qualname}>", "exec"), g)  # noqa: S102 (generated from the entry)
        f = g[op.name]
        f.__doc__ = f"PyTorch form of :func:`kernels.{op.name}` (autograd, torch.compile).\n\n{op.doc}"
        f.__module__ = "canna_dl.torch"
        f.opdef = op
        if not through:
            for v in variants(op):   # torch.ops.<ns>.<name> exists as soon as the function does
                custom_op(op, v)
        _fns[op.qualname] = f
        return f


_increment_version = torch._C._increment_version
_inplace_fns: dict = {}
_needs_x: dict = {}


def _refuse_if_x_needed(op, api, arrays, attrs, mask):
    """An in-place op overwrites its first input: refuse (NotImplementedError; offload() falls back)
    when a wanted gradient needs its original value, found by running the backward on the shape
    rules with that input absent (once per op and mask)."""
    first = op.inputs[0].name
    if first not in op.save:
        return
    key = (op.qualname, tuple(mask))
    ok = _needs_x.get(key)
    if ok is None:
        specs = [_spec(a) for a in arrays]
        g = [R.Spec(specs[0].shape, specs[0].dtype)]
        sv = [None if n == first else v for n, v in zip(op.save, op.saved(specs, g))]
        try:
            R.call_backward(op, _abstract.OPS, g, sv, attrs, mask)
            ok = True
        except (TypeError, ValueError, AttributeError):
            ok = False
        _needs_x[key] = ok
    if not ok:
        raise NotImplementedError(f"{api}: in place where a gradient needs the original {first} (it would have to "
                                  f"be kept); use {first} = {op.name}(...) instead")


def _inplace_class(op):
    n = len(op.inputs)
    names = [a.name for a in op.attrs]
    first = op.inputs[0].name

    def forward(ctx, *args):
        arrays, attrs = args[:n], dict(zip(names, args[n:]))
        x = arrays[0]
        xd = plain(x)
        op.kernel(xd, *[plain(a) for a in arrays[1:]], **attrs, out=xd)
        ctx.mark_dirty(x)
        ctx.attrs = attrs
        ctx.metas = _metas(op, arrays)
        _save(ctx, [None if nm == first else v for nm, v in zip(op.save, op.saved(arrays, (x,)))])
        return x

    def backward(ctx, *grads):
        with NoTorchFunction():
            ops = TOPS if grad_enabled() else PKOPS
            gx = _run_backward(op, ops, grads, _load(ctx), ctx.attrs, ctx.metas, ctx.needs_input_grad[:n])
            return (*gx, *([None] * len(names)))

    cls = type(f"_{op.namespace}_{op.name}_", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    FUNCTIONS.append(cls)
    return cls


def inplace_function(op):
    """``x op= y``: the entry's op with ``out=x`` (an elementwise op), the form ``offload()`` maps
    ``Tensor.add_`` & co. to. Without a gradient to track the kernel writes x's memory and x's
    version counter is bumped (as PyTorch's in-place ops do, so autograd sees the change);
    otherwise through an ``autograd.Function`` that marks x dirty."""
    f = _inplace_fns.get(op.qualname)
    if f is not None:
        return f
    with _lock:
        f = _inplace_fns.get(op.qualname)
        if f is not None:
            return f
        api = f"canna_dl.torch.{op.name}_" if op.namespace == "canna" else f"{op.namespace}.{op.name}_"
        cls = _inplace_class(op)
        _classes[op.qualname + "_"] = cls
        n = len(op.inputs)
        k = op.kernel
        attrs_of = op.attrs

        def tracked(args):
            arrays = args[:n]
            attrs = {a.name: a.check(api, v) for a, v in zip(attrs_of, args[n:])}
            _check(op, api, arrays)
            mask = [isinstance(arrays[i], Tensor) and arrays[i].requires_grad
                    for i, t in enumerate(op.inputs) if t.diff]
            _refuse_if_x_needed(op, api, arrays, attrs, mask)
            return cls.apply(*args)

        def f(*args):
            x = args[0]
            if grad_enabled():
                for a in args[:n]:
                    if isinstance(a, Tensor) and a.requires_grad:
                        return tracked(args)
            xd = plain(x)
            k(xd, *[plain(a) for a in args[1:n]], *args[n:], out=xd)
            _increment_version((x,))
            return x
        f.__name__ = f.__qualname__ = f"{op.name}_"
        f.opdef = op
        _inplace_fns[op.qualname] = f
        return f


def _resolve(spec):
    """A torch function named by a dotted name (a module or class attribute), or None."""
    import importlib
    if not isinstance(spec, str):
        return spec
    mod, _, attr = spec.rpartition(".")
    try:
        obj = importlib.import_module(mod)
    except ImportError:
        m2, _, cls = mod.rpartition(".")
        obj = getattr(importlib.import_module(m2), cls, None)
    return getattr(obj, attr, None) if obj is not None else None


def offload_entries(op):
    """``[(torch function, names, defaults, fixed values, handler, report name)]`` for
    ``offload()``: one per torch function the entry names (its ``torch=`` items, each a
    :class:`kernels.TorchFn`; see it for how the torch function's arguments bind to the op's), built
    by :func:`_offload_entry`."""
    fn = function(op)
    out = []
    for spec in op.torch:
        f = _resolve(spec.fn)
        if f is not None:
            out.append(_offload_entry(op, fn, f, spec))
    return out


def _offload_entry(op, fn, f, spec):
    """The offload() table entry of one :class:`kernels.TorchFn` of ``op``: the torch function's
    parameter names and defaults (for binding a call) and the handler ``h(bound values)``: the
    fixed values, the non-optional attributes given as None, the identity case, the operands
    (``_chk``) and the guard decide whether the call runs on canna (raising ``_Fallback`` with the
    reason otherwise), then the op's routing function runs on the op's arguments in order."""
    from ._offload import _Fallback, _chk, _inplace_target
    n, k = len(op.inputs), len(op.inputs) + len(op.attrs)
    names, defaults, src, dflt, fixed, nonone = spec.bind(op)
    if spec.inplace:
        run, report = inplace_function(op), f"{op.name}_"
    else:
        run, report = fn, op.name
    guard, identity, output, reflected, inplace = spec.guard, spec.identity, spec.output, spec.reflected, spec.inplace
    lists = op.lists
    convert, guard_kw = spec.extras(op)
    if (src == list(range(k)) and not (fixed or nonone or guard or identity or reflected or inplace or lists
                                       or convert) and output is None):
        def h(v):   # the op's own order: the common case in two steps
            _chk(*v[:n])
            return run(*v[:k])
        return (f, names, defaults, dict(spec.fixed), h, report)

    def h(v):
        refuse_unbound(v, fixed, nonone)
        if identity is not None and identity(**dict(zip(names, v))):
            _chk(v[0])
            return v[0]
        args = op_arguments(v, src, dflt, convert)
        if reflected:   # torch's (self, other) is the op's (other, self)
            args[0], args[1] = args[1], args[0]
        ins = _flat_chk(args[:n]) if lists else args[:n]
        if inplace:
            _inplace_target(ins[0])
            _chk(*ins[1:])
        else:
            _chk(*ins)
        if guard is not None:
            why = guard(*args, **{nm: v[i] for nm, i in guard_kw})
            if why:
                raise _Fallback(why)
        r = run(*args)
        return r if output is None else r[output]
    return (f, names, defaults, dict(spec.fixed), h, report)


def refuse_unbound(v, fixed, nonone):
    """Raise ``_Fallback`` for a call bound by ``TorchFn.bind`` (values ``v``) whose fixed
    parameters have other values, or whose non-optional op attributes are given as None."""
    from ._offload import _Fallback
    for i, name, want in fixed:   # by identity or by want's == (a matcher may define it), never a tensor's ==
        got = v[i]
        if got is not want and (isinstance(got, Tensor) or not want == got):
            raise _Fallback(f"{name}={'a tensor' if isinstance(got, Tensor) else repr(got)}")
    for i, name in nonone:
        if v[i] is None:
            raise _Fallback(f"implicit {name} ({name}=None)")


def op_arguments(v, src, dflt, convert):
    """The op's arguments (inputs, then attributes) of a bound call: each from its parameter or its
    default, converted where the TorchFn says (``TorchFn.extras``)."""
    args = [v[i] if i is not None else d for i, d in zip(src, dflt)]
    for j, f in convert:
        args[j] = f(args[j])
    return args


def offload_fast_entry(op, spec, tag, report):
    """The C per-call fast path's entry (``kernels._native.offload_fast``, kernels/_native/fast.c)
    of one :class:`kernels.TorchFn` of ``op``, or None when the call cannot take it: the op has no
    kernel fast path (1 or 2 tensor inputs, at most one attribute, one output), or the TorchFn has a
    guard, an identity case, an output index, an in-place form or list inputs. Built from the same
    binding as :func:`_offload_entry` (``spec.bind``), so the C side binds the call as the Python
    handler does; ``tag`` tells the torch functions apart in the fast path's key."""
    from ._offload import _REQ
    ins = op.inputs
    if (not op.fast or spec.inplace or spec.guard or spec.identity or spec.convert or spec.output is not None or op.lists
            or len(ins) not in (1, 2) or len(op.outputs) != 1 or len(op.attrs) > 1
            or any(t.optional or t.mutated or t.list for t in ins)):
        return None
    names, defaults, src, dflt, fixed, _nonone = spec.bind(op)
    if src[0] is None or len(names) > 16:
        return None
    n = len(ins)
    iy, ydf = (src[1], dflt[1]) if n == 2 else (None, None)
    codes = None
    if op.attrs:
        a = op.attrs[0]
        ip, pdf = src[n], dflt[n]
        if a.type is str:
            codes = {c: i for i, c in enumerate(a.choices or ())}
    else:
        ip, pdf = None, None
    return (int(op.fast_id), tuple(names), tuple(defaults.get(nm, _REQ) for nm in names),
            (src[0], -1 if iy is None else iy, -1 if ip is None else ip), ydf, pdf,
            tuple((i, v) for i, _name, v in fixed), bool(spec.reflected), codes, report, tag, op.api,
            _REQ)


def offload_fast_entries(op, first_tag):
    """``[(torch function, fast entry)]`` of the entry's TorchFns that take the C per-call fast
    path (:func:`offload_fast_entry`), tagged from ``first_tag`` on."""
    out = []
    for spec in op.torch:
        f = _resolve(spec.fn)
        if f is None:
            continue
        e = offload_fast_entry(op, spec, first_tag + len(out), f"{op.name}_" if spec.inplace else op.name)
        if e is not None:
            out.append((f, e))
    return out


def _flat_chk(xs):
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(x)
        else:
            out.append(x)
    return out


def offload_register(op):
    """Add the entry's torch functions to ``offload()``'s table (an op registered after
    ``canna_dl.torch`` was imported)."""
    from . import _offload
    reports = set()
    for f, names, defaults, _extras, handler, report in offload_entries(op):
        _offload._TABLE[f] = (report, _offload._Sig(names, None, **defaults), handler)
        reports.add(report)
    _offload.OFFLOAD_OPS = tuple(sorted(set(_offload.OFFLOAD_OPS) | reports))   # offload(ops=[...]) knows it
    _offload._add_fast(op)
    for key in (op.qualname, op.qualname + "_"):
        cls = _classes.get(key)
        if cls is not None and cls._backward_cls not in _offload._NODES:   # the report counts its backward calls
            _offload._NODES = _offload._NODES | {cls._backward_cls}
            _offload._count_backward(cls)
