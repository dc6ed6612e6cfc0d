"""The TensorFlow shim generated from the op registry (kernels/_registry.py, docs/DESIGN.md §11).

:func:`function` makes, once per entry, a differentiable TensorFlow function (``canna_dl.tf.<name>``
for canna's own ops, ``op.tf_fn`` for a user's): eager (zero-copy) and inside ``tf.function`` (a
``tf.py_function`` node whose outputs get the static shapes of the entry's shape rule, so Keras
and later ops see them), with its gradient from the entry's backward (run on canna's kernels; see
:mod:`canna_dl.tf._autograd` for the machinery and its rules: floating operands of one dtype, no
promotion, second derivatives refused).
"""
from __future__ import annotations

import threading

import tensorflow as tf

import canna_dl
from kernels import _abstract
from kernels import _registry as R

from ._autograd import apply, floating, same_dtype, tensor

__all__ = ["function"]

_fns: dict = {}
_lock = threading.Lock()


def _tf_ns_fn(op):
    """The differentiable TensorFlow form of a registered op (canna's hand-written ones by name)."""
    if op.namespace == "canna" and not op.generate:
        import canna_dl.tf as ctf
        f = getattr(ctf, op.tf, None)
        if f is None:
            raise AttributeError(f"ops.{op.name}: canna_dl.tf has no differentiable form of {op.qualname}")
        return f
    return function(op)


#: the ops a composed forward runs with in TensorFlow (differentiable)
TFOPS = _abstract.Namespace(_tf_ns_fn, "canna_dl.tf functions")


def _tf_spec(t):
    return R.Spec(tuple(t.shape.as_list()) if t.shape.rank is not None else (), canna_dl.dtype(t.dtype.name))


def _static(op, api, ts, attrs):
    """[(tf dtype, TensorShape)] of the outputs from the shape rule on the static shapes (unknown
    dims: the rule is tried with them; where it cannot use them the shape is unknown)."""
    known = all(t is None or (t.shape.rank is not None and None not in t.shape.as_list()) for t in ts)
    specs = [None if t is None else _tf_spec(t) for t in ts]
    try:
        out = op.specs(specs, attrs)
    except (TypeError, ValueError, IndexError):
        if known:
            raise
        dts = [next(t.dtype for t in ts if t is not None)] * len(op.outputs)
        return [(d, tf.TensorShape(None)) for d in dts]
    return [(tf.as_dtype(s.dtype.name), tf.TensorShape(s.shape)) for s in out]


def function(op):
    """The TensorFlow function of the entry (made once)."""
    f = _fns.get(op.qualname)
    if f is not None:
        return f
    with _lock:
        f = _fns.get(op.qualname)
        if f is not None:
            return f
        f = _make(op)
        _fns[op.qualname] = f
        return f


def _make(op):
    api = f"canna_dl.tf.{op.tf}" if op.namespace == "canna" else f"{op.namespace}.{op.name}"
    inputs = op.inputs
    out_index = {n: i for i, n in enumerate(op.outputs)}
    in_index = {t.name: i for i, t in enumerate(inputs)}
    saved_outs = [n for n in op.save if n in out_index and n not in in_index]
    nout = len(op.outputs)

    through = op.through_parts

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs)
        if through:   # differentiated through the registered ops it is made of
            return op.forward(TFOPS, *[None if a is None else tensor(api, t.name, a) for t, a in zip(inputs, arrays)],
                              **attrs)
        ts = []
        variables = []    # (input index, tf.Variable) of the mutated inputs given
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    raise TypeError(f"{api}: {t.name} must be a tensor, not None")
                ts.append(None)
                continue
            if t.mutated:
                if not isinstance(a, tf.Variable):
                    raise TypeError(f"{api}: {t.name} is updated in place, and TensorFlow tensors are immutable: pass "
                                    f"a tf.Variable (it is assigned the new value), not {type(a).__name__}")
                variables.append((i, a))
            x = tensor(api, t.name, a)
            if all(d.kind == "f" for d in t.dtypes) or t.diff:
                floating(api, t.name, x)
            elif canna_dl.dtype(x.dtype.name) not in t.dtypes:
                raise TypeError(f"{api}: {t.name} has dtype {x.dtype.name}, which this op does not support "
                                f"({', '.join(d.name for d in t.dtypes)})")
            ts.append(x)
        same_dtype(api, *[(t.name, x) for t, x in zip(inputs, ts) if x is not None and t.diff])
        present = [i for i, x in enumerate(ts) if x is not None]
        xs = [ts[i] for i in present]
        diff = tuple(inputs[i].diff and op.backward is not None for i in present)
        out_specs = _static(op, api, ts, attrs)   # raises for static shapes the op refuses
        # the new values of the mutated inputs are extra outputs of the node, assigned afterwards
        mut_specs = [(ts[i].dtype, ts[i].shape) for i, _ in variables]
        ntot = nout + len(variables)

        def full(vals):
            v = [None] * len(inputs)
            for i, x in zip(present, vals):
                v[i] = x
            return v

        def fwd(save, *vals):
            if op.mutated:
                outs = op.functional(full(vals), attrs)
            else:
                r = op.kernel(*full(vals), **attrs)
                outs = list(r) if isinstance(r, tuple) else [r]
            return outs + ([outs[out_index[n]] for n in saved_outs] if save else [])

        def specs():
            return out_specs + mut_specs + [out_specs[out_index[n]] for n in saved_outs]

        def bwd(dys, vals, saved):
            v = full(vals)
            so = dict(zip(saved_outs, saved))
            sv = [so[n] if n in so else v[in_index[n]] for n in op.save]
            gs = op.backward(_abstract.KOPS, *dys[:nout], *sv, **attrs)
            gs = gs if isinstance(gs, (tuple, list)) else (gs,)
            by = dict(zip(op.diff, gs))
            res = []
            for i in present:
                if inputs[i].diff:
                    g = by.get(inputs[i].name)
                    res.append(tf.zeros_like(v[i]) if g is None else g)
            return res
        r = apply(api, xs, diff, fwd, ntot, specs, bwd)
        if not variables:
            return r
        r = (r,) if ntot == 1 else tuple(r)
        for (_, var), new in zip(variables, r[nout:]):
            var.assign(new)
        return None if nout == 0 else r[0] if nout == 1 else r[:nout]

    fn.__name__ = op.tf
    fn.__qualname__ = op.tf
    fn.__doc__ = f"TensorFlow form of :func:`kernels.{op.name}` (GradientTape, tf.function).\n\n{op.doc}"
    fn.opdef = op
    return fn
