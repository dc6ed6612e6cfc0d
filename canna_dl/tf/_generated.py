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

from ._autograd import apply, floating, is_pyscalar, same_dtype, tensor

__all__ = ["function"]

_fns: dict = {}
_lock = threading.Lock()


def _tf_spec(t):
    return R.Spec(tuple(t.shape.as_list()) if t.shape.rank is not None else (), canna_dl.dtype(t.dtype.name))


def _static(op, api, ts, attrs):
    """[(tf dtype, TensorShape)] of the outputs from the shape rule on the static shapes (unknown
    dims: the rule is tried with them; where it cannot use them the shape is unknown)."""
    tensors = [t for t in ts if isinstance(t, (tf.Tensor, tf.Variable))]
    known = all(t.shape.rank is not None and None not in t.shape.as_list() for t in tensors)
    specs = [_tf_spec(t) if isinstance(t, (tf.Tensor, tf.Variable)) else t for t in ts]
    try:
        out = op.specs(specs, attrs)
    except (TypeError, ValueError, IndexError):
        if known:
            raise
        dts = [tensors[0].dtype] * len(op.outputs)
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

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs)
        ts = []
        consts = {}   # Python-number operands (a scalar input): constants of the graph, no gradient
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    raise TypeError(f"{api}: {t.name} must be a tensor, not None")
                ts.append(None)
                continue
            if t.scalar and is_pyscalar(a):
                consts[i] = a
                ts.append(a)
                continue
            x = tensor(api, t.name, a)
            if all(d.kind == "f" for d in t.dtypes) or t.diff:
                floating(api, t.name, x)
            elif canna_dl.dtype(x.dtype.name) not in t.dtypes:
                raise TypeError(f"{api}: {t.name} has dtype {x.dtype.name}, which this op does not support "
                                f"({', '.join(d.name for d in t.dtypes)})")
            ts.append(x)
        same_dtype(api, *[(t.name, x) for i, (t, x) in enumerate(zip(inputs, ts))
                          if x is not None and t.diff and i not in consts])
        present = [i for i, x in enumerate(ts) if x is not None and i not in consts]
        if not present:
            raise TypeError(f"{api}: at least one operand must be a tensor, got {len(consts)} Python numbers")
        xs = [ts[i] for i in present]
        diff = tuple(inputs[i].diff and op.backward is not None for i in present)
        out_specs = _static(op, api, ts, attrs)   # raises for static shapes the op refuses

        def full(vals):
            v = [None] * len(inputs)
            for i, x in zip(present, vals):
                v[i] = x
            for i, c in consts.items():
                v[i] = c
            return v

        def fwd(save, *vals):
            r = op.kernel(*full(vals), **attrs)
            outs = list(r) if isinstance(r, tuple) else [r]
            return outs + ([outs[out_index[n]] for n in saved_outs] if save else [])

        def specs():
            return out_specs + [out_specs[out_index[n]] for n in saved_outs]

        def bwd(dys, vals, saved):
            v = full(vals)
            so = dict(zip(saved_outs, saved))
            sv = [so[n] if n in so else v[in_index[n]] for n in op.save]
            by = R.call_backward(op, _abstract.KOPS, dys, sv, attrs, [in_index[n] in present for n in op.diff])
            res = []
            for i in present:
                if inputs[i].diff:
                    g = R.sum_to(_abstract.KOPS, by.get(inputs[i].name), v[i].shape)   # a broadcast operand's
                    res.append(tf.zeros_like(v[i]) if g is None else g)
            return res
        return apply(api, xs, diff, fwd, nout, specs, bwd)

    fn.__name__ = op.tf
    fn.__qualname__ = op.tf
    fn.__doc__ = f"TensorFlow form of :func:`kernels.{op.name}` (GradientTape, tf.function).\n\n{op.doc}"
    fn.opdef = op
    return fn
