"""The TensorFlow shim generated from the op registry (kernels/_registry.py, docs/DESIGN.md §11).

:func:`function` makes, once per entry, a differentiable TensorFlow function (``canna_dl.tf.<name>``
for canna's own ops, ``op.tf_fn`` for a user's): eager (zero-copy) and inside ``tf.function`` (a
native ``CannaCall`` node (:mod:`canna_dl.tf._native`), else a ``tf.py_function`` node, whose
outputs get the static shapes of the entry's shape rule, so Keras
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

from . import _native
from ._autograd import _in_xla, apply, floating, is_pyscalar, same_dtype, tensor

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
def _static(op, api, ts, attrs):
    """[(tf dtype, TensorShape)] of the outputs from the shape rule on the static shapes. Unknown
    dims (None): the rule runs with them replaced by two different large primes — an output dim
    that differs between the two is unknown; when the rule refuses both, by each known dim and 1
    (a None that must equal a known dim); when it refuses every value, the shapes cannot work and
    its error (on the shapes with None) is raised, at trace time."""
    flat = [t for t in R.flatten(op, ts)[0] if not is_pyscalar(t)]   # Python numbers: no shape
    if all(t.shape.rank is not None and None not in t.shape.as_list() for t in flat):
        return _tf_out(op.specs(_tf_specs(ts, None), attrs))   # all dims known: the rule's errors raise
    if any(t.shape.rank is None for t in flat):
        return [(flat[0].dtype, tf.TensorShape(None))] * len(op.outputs)
    known = sorted({d for t in flat for d in t.shape.as_list() if d is not None} | {1})
    results, first = [], None
    for fill in [7919, 7927] + known:
        try:
            results.append((fill, op.specs(_tf_specs(ts, fill), attrs)))
        except (TypeError, ValueError, IndexError) as e:
            first = first or e
        if len(results) == 2 or (results and fill not in (7919, 7927)):
            break
    if not results:
        try:
            op.specs(_tf_specs(ts, None), attrs)   # its message names the unknown dims as None
        except ValueError as e:
            raise e from None
        except (TypeError, IndexError):
            pass
        raise first
    out = []
    for k, s in enumerate(results[0][1]):
        if len(results) == 2:
            other = results[1][1][k].shape
            dims = [d if len(other) == len(s.shape) and d == o else None for d, o in zip(s.shape, other)]
        else:
            dims = [None if d == results[0][0] else d for d in s.shape]
        out.append((tf.as_dtype(s.dtype.name), tf.TensorShape(dims)))
    return out


def _tf_specs(ts, fill):
    """Specs of the static shapes, an unknown dim given as ``fill`` (None: kept unknown)."""
    def one(t):
        dims = tuple(fill if d is None else d for d in t.shape.as_list())
        return R.Spec(dims, canna_dl.dtype(t.dtype.name))
    return [t if t is None or is_pyscalar(t) else [one(b) for b in t] if isinstance(t, list) else one(t)
            for t in ts]


def _tf_out(specs):
    return [(tf.as_dtype(s.dtype.name), tf.TensorShape(s.shape)) for s in specs]


def _input(api, t, name, a, variables, grad):
    """One tensor operand, checked (a mutated one must be a tf.Variable, recorded in ``variables``):
    floating where it gets a gradient (``grad``: ``OpDef.grad_inputs``) or takes floats only."""
    if t.mutated:
        if not isinstance(a, tf.Variable):
            raise TypeError(f"{api}: {name} is updated in place, and TensorFlow tensors are immutable: pass a "
                            f"tf.Variable (it is assigned the new value), not {type(a).__name__}")
        variables.append(a)
    x = tensor(api, name, a)
    if grad or all(d.kind == "f" for d in t.dtypes):
        floating(api, name, x)
    elif canna_dl.dtype(x.dtype.name) not in t.dtypes:
        raise TypeError(f"{api}: {name} has dtype {x.dtype.name}, which this op does not support "
                        f"({', '.join(d.name for d in t.dtypes)})")
    return x


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
    grads = op.grad_inputs   # the inputs that get a gradient (floating ones)

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs, op.tf_args)
        if through:   # differentiated through the registered ops it is made of
            return op.forward(TFOPS, *[a if a is None or (t.scalar and is_pyscalar(a)) else tensor(api, t.name, a)
                                       for t, a in zip(inputs, arrays)], **attrs)
        ts = []
        variables = []    # the tf.Variables of the mutated inputs, in flat order
        consts = {}       # Python-number operands (a scalar input): constants of the graph, no gradient
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    raise TypeError(f"{api}: {t.name} must be a tensor, not None")
                ts.append(None)
                continue
            if t.scalar and is_pyscalar(a):
                consts[i] = a
                ts.append(None)
                continue
            if t.list:
                if not isinstance(a, (list, tuple)):
                    raise TypeError(f"{api}: {t.name} must be a list or tuple of tensors, not {type(a).__name__}")
                ts.append([_input(api, t, f"{t.name}[{j}]", b, variables, t.name in grads) for j, b in enumerate(a)])
            else:
                ts.append(_input(api, t, t.name, a, variables, t.name in grads))
        same_dtype(api, *[(t.name, x) for t, x in zip(inputs, ts) if x is not None and t.diff and not t.list])
        if consts and all(x is None for x in ts):
            raise TypeError(f"{api}: at least one operand must be a tensor, got {len(consts)} Python numbers")
        xs, lay = R.flatten(op, ts)

        mask = [ts[in_index[n]] is not None for n in op.diff]   # no gradient for a number or an absent input

        def full(v):   # the per-input values with the Python-number operands back in their places
            for i, c in consts.items():
                v[i] = c
            return v
        diff = tuple(inputs[i].diff and op.backward is not None
                     for i, n in enumerate(lay) if n is not None for _ in range(1 if n < 0 else n))
        out_specs = _static(op, api, full(list(ts)), attrs)   # raises for static shapes the op refuses
        # the new values of the mutated inputs are extra outputs of the node, assigned afterwards
        mut_specs = [(v.dtype, v.shape) for v in variables]
        ntot = nout + len(variables)

        def fwd(save, *vals):
            if op.mutated:
                outs = op.functional(full(R.unflatten(lay, vals)), attrs)
            else:
                r = op.kernel(*full(R.unflatten(lay, vals)), **attrs)
                outs = list(r) if isinstance(r, tuple) else [r]
                if not tf.executing_eagerly() or any(o is None for o in outs):
                    # an output not computed (a backward's masked gradient): a node output needs a tensor
                    outs = [tf.zeros([d or 0 for d in sp[1].as_list()] if sp[1].rank is not None else [0], sp[0])
                            if o is None else o for o, sp in zip(outs, out_specs)]
            return outs + ([outs[out_index[n]] for n in saved_outs] if save else [])

        def specs():
            return out_specs + mut_specs + [out_specs[out_index[n]] for n in saved_outs]

        def bwd(dys, vals, saved):
            v = full(R.unflatten(lay, vals))
            so = dict(zip(saved_outs, saved))
            sv = [so[n] if n in so else v[in_index[n]] for n in op.save]
            by = R.call_backward(op, _abstract.KOPS, dys[:nout], sv, attrs, mask)
            res = []
            for i, n in enumerate(lay):
                if n is None or not inputs[i].diff:
                    continue
                g = by.get(inputs[i].name)
                if n < 0:
                    g = R.sum_to(_abstract.KOPS, g, v[i].shape)   # a broadcast operand's, summed to its shape
                    res.append(tf.zeros_like(v[i]) if g is None else g)
                else:
                    res.extend(tf.zeros_like(b) if g is None or g[j] is None else g[j] for j, b in enumerate(v[i]))
            return res
        if not tf.executing_eagerly() and not variables and not _in_xla():
            # a native CannaCall node (no Python when it runs), if the op is one aclnn call
            r = _native.call(op, xs, consts, [x is not None or i in consts for i, x in enumerate(ts)], attrs,
                             out_specs)
            if r is not None:
                return r[0] if nout == 1 else tuple(r)
        r = apply(api, xs, diff, fwd, ntot, specs, bwd)
        if not variables:
            return r
        r = (r,) if ntot == 1 else tuple(r)
        for var, new in zip(variables, r[nout:]):
            var.assign(new)
        return None if nout == 0 else r[0] if nout == 1 else r[:nout]

    fn.__name__ = op.tf
    fn.__qualname__ = op.tf
    fn.__doc__ = f"TensorFlow form of :func:`kernels.{op.name}` (GradientTape, tf.function).\n\n{op.doc}"
    fn.opdef = op
    return fn
