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
from ._common import AUTOGRAD, EAGER, NoTorchFunction, Tensor, grad_enabled, plain, route

__all__ = ["function", "custom_op", "offload_entries", "FUNCTIONS"]

_lock = threading.RLock()
_fns: dict = {}        # qualname -> routing function
_customs: dict = {}    # qualname -> custom op
_classes: dict = {}    # qualname -> autograd.Function
#: the autograd.Function classes made here (offload() counts their backward nodes)
FUNCTIONS: list = []


def _hand(name):
    """The hand-written routing functions of the ops whose shims are not generated yet."""
    from . import _functions as F
    return {"matmul": F._matmul, "sum": F._sum,
            "mean": F._mean, "linear": F._linear, "softmax": F._softmax, "log_softmax": F._log_softmax,
            "sum_to_size": F._sum_to_size}.get(name)


def _torch_ns_fn(op):
    if op.generate:
        return function(op)
    f = _hand(op.name)
    if f is None:
        raise AttributeError(f"ops.{op.name}: canna_dl.torch has no differentiable form of {op.qualname} yet")
    return f


#: backward ops when a graph is recorded (differentiable; custom ops under torch.compile)
TOPS = _abstract.Namespace(_torch_ns_fn, "canna_dl.torch routing functions")


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
    want = dict(zip((t.name for t in op.inputs), needs))
    by = R.call_backward(op, ops, grads, saved, attrs, [bool(want[n]) for n in op.diff])
    out = []
    for i, t in enumerate(op.inputs):
        g = by.get(t.name) if needs[i] else None
        out.append(_reduce_to(ops, g, metas[i]))
    return out


def _meta(a):
    return (a.shape, a.dtype) if isinstance(a, Tensor) else None


def _save(ctx, values):
    """``ctx.save_for_backward`` of the tensors among ``values``; Python numbers (a scalar
    operand, ``x * 2``) are kept on ctx."""
    ctx.consts = [None if isinstance(v, Tensor) else v for v in values]
    ctx.save_for_backward(*[v if isinstance(v, Tensor) else None for v in values])


def _saved(ctx):
    return [c if t is None else t for t, c in zip(ctx.saved_tensors, ctx.consts)]


def _function_class(op):
    n = len(op.inputs)
    names = [a.name for a in op.attrs]
    nd_names = [o for o in op.outputs if o not in op.diff_outputs]

    def forward(ctx, *args):
        arrays, attrs = args[:n], dict(zip(names, args[n:]))
        outs = op.kernel(*[plain(a) for a in arrays], **attrs)
        ot = _as_tuple(outs)
        ctx.attrs = attrs
        ctx.metas = [_meta(a) for a in arrays]
        _save(ctx, op.saved(arrays, ot))
        if nd_names:
            ctx.mark_non_differentiable(*[o for o, nm in zip(ot, op.outputs) if nm in nd_names])
        return outs

    if op.backward is None:
        backward = _no_backward(op)
    else:
        def backward(ctx, *grads):
            with NoTorchFunction():
                ops = TOPS if grad_enabled() else PKOPS
                gx = _run_backward(op, ops, grads, _saved(ctx), ctx.attrs, ctx.metas, ctx.needs_input_grad[:n])
                return (*gx, *([None] * len(names)))

    cls = type(f"_{op.namespace}_{op.name}", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    FUNCTIONS.append(cls)
    return cls


_SCHEMA_TYPES = {int: "int", float: "float", bool: "bool", str: "str", numbers.Number: "Scalar"}


def _default(v):
    if isinstance(v, str):
        return repr(v)
    if v is None:
        return "None"
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
    for i in _order(op, numbers_at):
        t = op.inputs[i]
        if i in numbers_at:
            parts.append(f"Scalar {t.name}")
        else:
            parts.append(f"Tensor{'?' if t.optional else ''} {t.name}{'=None' if t.optional else ''}")
    for a in op.attrs:
        ty = _SCHEMA_TYPES.get(a.type)
        if ty is None:
            raise R.RegistrationError(f"{op.qualname}: attribute {a.name} has no torch schema type")
        parts.append(f"{ty} {a.name}" + ("" if a.required else f"={_default(a.default)}"))
    outs = ", ".join("Tensor" for _ in op.outputs)
    return f"({', '.join(parts)}) -> " + (outs if len(op.outputs) == 1 else f"({outs})")


def _spec(t):
    return None if t is None else R.Spec(tuple(t.shape), canna_dl.dtype(t.dtype))


def _tdtype(dt):
    return getattr(torch, dt.name)


def custom_op(op, numbers_at=()):
    """``torch.ops.<namespace>.<name>`` for the entry (made once), or its variant with Python
    numbers at the inputs ``numbers_at`` (see :func:`variants`)."""
    qn = f"{op.namespace}::{variant_name(op, numbers_at)}"
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

        def unpack(args):
            vals = [None] * n
            for pos, i in enumerate(order):
                vals[i] = args[pos]
            return vals, dict(zip(names, args[n:]))

        def impl(*args):
            with NoTorchFunction():
                arrays, attrs = unpack(args)
                r = op.kernel(*[plain(a) for a in arrays], **attrs)
                # a custom op must not return one of its inputs
                return tuple(_fresh(o, args[:n]) for o in r) if isinstance(r, tuple) else _fresh(r, args[:n])
        impl.__name__ = variant_name(op, numbers_at)
        c = torch.library.custom_op(qn, impl, mutates_args=(), schema=schema(op, numbers_at))

        def fake(*args):
            arrays, attrs = unpack(args)
            like = next(a for a in arrays if isinstance(a, Tensor))
            specs = op.specs([_spec(a) if isinstance(a, Tensor) else a for a in arrays], attrs)
            outs = tuple(like.new_empty(s.shape, dtype=_tdtype(s.dtype)) for s in specs)
            return outs[0] if len(outs) == 1 else outs
        c.register_fake(fake)
        if op.backward is not None:
            def setup(ctx, inputs, output):
                arrays, attrs = unpack(inputs)
                ot = _as_tuple(output)
                ctx.attrs = attrs
                ctx.metas = [_meta(a) for a in arrays]
                _save(ctx, op.saved(arrays, ot))
                nd = [o for o, nm in zip(ot, op.outputs) if nm not in op.diff_outputs]
                if nd:
                    ctx.mark_non_differentiable(*nd)

            def bw(ctx, *grads):
                gx = _run_backward(op, TOPS, grads, _saved(ctx), ctx.attrs, ctx.metas,
                                   [m is not None for m in ctx.metas])
                return (*[gx[i] for i in order], *([None] * len(names)))
            c.register_autograd(bw, setup_context=setup)
        _customs[qn] = c
        VARIANTS[variant_name(op, numbers_at)] = op.name
        return c


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
        if not isinstance(a, Tensor):
            raise TypeError(f"{api}: {t.name}: expected a torch.Tensor, got {type(a).__name__}; convert with "
                            "torch.as_tensor() or canna_dl.to_torch()")
        if True:
            C.check_grad_dtype(api, t.name, a)
            if op.shape is R.same_float and not a.dtype.is_floating_point:
                # int in, float out: canna differentiates floating tensors only (cast first; offload falls back)
                C.check_float(api, t.name, a)
            dt = _known(a.dtype)
            if dt is not None and dt not in t.dtypes and all(C.category_is_float(d) for d in t.dtypes):
                C.check_float(api, t.name, a)
            if dt is None or dt not in t.dtypes:
                raise TypeError(f"{api}: {t.name} has dtype {a.dtype}, which this op does not support "
                                f"({', '.join(d.name for d in t.dtypes)})")


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
        tensors = [t.name for t in op.inputs]
        params = [f"{t.name}=None" if t.optional else t.name for t in op.inputs]
        g = {"_route": route, "_k": op.kernel, "_p": plain, "_slow": None, "_api": api}
        for a in op.attrs:
            params.append(a.name if a.required else f"{a.name}=_D_{a.name}")
            g[f"_D_{a.name}"] = a.default
        attrs = ", ".join(f"{a.name}={a.name}" for a in op.attrs)
        call = ", ".join([f"_p({t})" for t in tensors] + ([attrs] if attrs else []))
        if len(tensors) <= 4:
            cond = ""
            if op.shape is R.same_float:   # ints are refused (see _check)
                cond = f" and getattr({tensors[0]}, 'dtype', None) in _FL"
                g["_FL"] = C.FLOATS
            head = f"    if _route(_api, {', '.join(tensors)}) == 0{cond}:\n        return _k({call})\n"
        else:
            head = ""
        attr_dict = ", ".join(f"{a.name!r}: {a.name}" for a in op.attrs)
        src = (f"def {op.name}({', '.join(params)}):\n{head}"
               f"    return _slow(({', '.join(tensors)},), {{{attr_dict}}})\n")

        def slow(arrays, attrs):
            for a in op.attrs:
                attrs[a.name] = a.check(api, attrs[a.name])
            r = route(api, *arrays[:4])
            _check(op, api, arrays)
            if r == EAGER:
                return op.kernel(*[plain(a) for a in arrays], **attrs)
            if r == AUTOGRAD:
                return cls.apply(*arrays, *attrs.values())
            if scalars:   # the variant of the inputs that are numbers
                at = tuple(i for i in scalars if arrays[i] is not None and not isinstance(arrays[i], Tensor))
                if at:
                    return custom_op(op, at)(*[arrays[i] for i in _order(op, at)], **attrs)
            return custom_op(op)(*arrays, **attrs)
        scalars = [i for i, t in enumerate(op.inputs) if t.scalar]
        g["_slow"] = slow
        exec(compile(src, f"<torch shim {op.qualname}>", "exec"), g)  # noqa: S102 (generated from the entry)
        f = g[op.name]
        f.__doc__ = f"PyTorch form of :func:`kernels.{op.name}` (autograd, torch.compile).\n\n{op.doc}"
        f.__module__ = "canna_dl.torch"
        f.opdef = op
        for v in variants(op):   # torch.ops.<ns>.<name> exists as soon as the function does
            custom_op(op, v)
        _fns[op.qualname] = f
        return f


_bump = torch._C._increment_version
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
        specs = [_spec(a) if isinstance(a, Tensor) else a for a in arrays]
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
        ctx.metas = [_meta(a) for a in arrays]
        _save(ctx, [None if nm == first else v for nm, v in zip(op.save, op.saved(arrays, (x,)))])
        return x

    def backward(ctx, *grads):
        with NoTorchFunction():
            ops = TOPS if grad_enabled() else PKOPS
            gx = _run_backward(op, ops, grads, _saved(ctx), ctx.attrs, ctx.metas, ctx.needs_input_grad[:n])
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
            _bump((x,))
            return x
        f.__name__ = f.__qualname__ = f"{op.name}_"
        f.opdef = op
        _inplace_fns[op.qualname] = f
        return f


def offload_entries(op):
    """``[(torch function, names, defaults, required extras, handler, report name)]`` for
    ``offload()``: the torch functions the entry names (dotted names, callables,
    ``(function, {arg: value})`` pairs accepting extra torch arguments only at those values, e.g.
    ``inplace=False``, or :class:`kernels._registry.TorchForm` s: reflected and in-place forms)."""
    import importlib
    out = []
    n = len(op.inputs)
    for spec in op.torch:
        form = R.torch_form(spec)
        spec, extras = form.fn, form.extras
        if isinstance(spec, str):
            mod, _, attr = spec.rpartition(".")
            try:
                obj = importlib.import_module(mod)
            except ImportError:
                m2, _, cls = mod.rpartition(".")
                obj = getattr(importlib.import_module(m2), cls, None)
            f = getattr(obj, attr, None) if obj is not None else None
        else:
            f = spec
        if f is None:
            continue
        own = ["input"] + [t.name for t in op.inputs[1:]] + [a.name for a in op.attrs]
        base = list(form.names) if form.names is not None else own
        names = base + list(extras)
        nattrs = len(base) - n
        defaults = {base[i]: None for i, t in enumerate(op.inputs) if i < len(base) and i > 0 and t.optional}
        defaults.update({base[n + j]: a.default for j, a in enumerate(op.attrs[:nattrs]) if not a.required})
        defaults.update(extras)
        if form.inplace:
            fn, report = inplace_function(op), f"{op.name}_"
        else:
            fn, report = function(op), op.name
        out.append((f, names, defaults, extras, _handler(fn, n, nattrs, extras, form), report))
    return out


def _handler(fn, n, nattrs, extras, form=None):
    from ._offload import _Fallback, _chk, _inplace_target
    keys = list(extras.items())
    k = n + nattrs
    reflected = form is not None and form.reflected
    inplace = form is not None and form.inplace

    def extras_ok(v):
        for i, (name, want) in enumerate(keys):
            if v[k + i] != want:
                raise _Fallback(f"{name}={v[k + i]!r}")

    if inplace:
        def h(v):
            if keys:
                extras_ok(v)
            _inplace_target(v[0])
            _chk(*v[1:n])
            return fn(*v[:k])
    elif reflected:   # torch's (self, other) is the op's (other, self)
        def h(v):
            if keys:
                extras_ok(v)
            _chk(*v[:n])
            return fn(v[1], v[0], *v[2:k])
    else:
        def h(v):
            if keys:
                extras_ok(v)
            _chk(*v[:n])
            return fn(*v[:k])
    return h


def offload_register(op):
    """Add the entry's torch functions to ``offload()``'s table (an op registered after
    ``canna_dl.torch`` was imported)."""
    from . import _offload
    reports = set()
    for f, names, defaults, _extras, handler, report in offload_entries(op):
        _offload._TABLE[f] = (report, _offload._Sig(names, None, **defaults), handler)
        reports.add(report)
    _offload.OFFLOAD_OPS = tuple(sorted(set(_offload.OFFLOAD_OPS) | reports))   # offload(ops=[...]) knows it
    for key in (op.qualname, op.qualname + "_"):
        cls = _classes.get(key)
        if cls is not None and cls._backward_cls not in _offload._NODES:   # the report counts its backward calls
            _offload._NODES = _offload._NODES | {cls._backward_cls}
            _offload._count_backward(cls)
