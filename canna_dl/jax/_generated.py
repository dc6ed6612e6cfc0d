"""The JAX shim generated from the op registry (kernels/_registry.py, docs/DESIGN.md §11).

:func:`function` makes, once per entry, a ``jax.custom_vjp`` function (``canna_dl.jax.<name>``
for canna's own ops, ``op.jax_fn`` for a user's): eager calls run canna's kernels zero-copy; under
``jax.jit`` the kernels run through ``jax.pure_callback`` with the result shapes of the entry's
shape rule; the gradient comes from the entry's backward (see :mod:`canna_dl.jax._ops` for the
rules: floating operands of one dtype, second derivatives refused).
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp

import canna_dl
from kernels import _abstract
from kernels import _registry as R

from ._ops import _array, _call, _is_pyscalar, _sds

__all__ = ["function"]

_fns: dict = {}
_lock = threading.Lock()


def function(op):
    """The JAX function of the entry (made once)."""
    f = _fns.get(op.qualname)
    if f is not None:
        return f
    with _lock:
        f = _fns.get(op.qualname)
        if f is None:
            f = _fns[op.qualname] = _make(op)
        return f


def _make(op):
    api = f"canna_dl.jax.{op.jax}" if op.namespace == "canna" else f"{op.namespace}.{op.name}"
    inputs = op.inputs
    nout = len(op.outputs)
    vjps: dict = {}

    def vjp_for(attrs_key, present, consts):
        key = (attrs_key, present, tuple((i, type(c), repr(c)) for i, c in consts))
        f = vjps.get(key)
        if f is not None:
            return f
        attrs = dict(attrs_key)

        def full(vals):
            v = [None] * len(inputs)
            for i, x in zip(present, vals):
                v[i] = x
            for i, c in consts:   # Python-number operands (scalar inputs): constants, no gradient
                v[i] = c
            return v

        def run(*xs):
            v = full(xs)
            specs = op.specs([R.Spec(a.shape, canna_dl.dtype(a.dtype.name)) if hasattr(a, "dtype") else a for a in v],
                             attrs)
            structs = [_sds(s.shape, jnp.dtype(s.dtype.name)) for s in specs]
            return _call(lambda *a: _tuple(op.kernel(*full(a), **attrs)), xs, structs)

        @jax.custom_vjp
        def f(*xs):
            outs = run(*xs)
            return outs[0] if nout == 1 else tuple(outs)

        # what the backward saves: arrays (residuals, through the callback) or constants (numbers)
        const_of = dict(consts)
        in_index = {t.name: i for i, t in enumerate(inputs)}
        saved_const = {k: const_of[in_index[n]] for k, n in enumerate(op.save)
                       if n in in_index and in_index[n] in const_of}

        def f_fwd(*xs):
            outs = run(*xs)
            saved = tuple(v for k, v in enumerate(op.saved(full(xs), outs)) if k not in saved_const)
            return (outs[0] if nout == 1 else tuple(outs)), (xs, saved)

        def f_bwd(res, g):
            xs, saved = res
            gs = (g,) if nout == 1 else tuple(g)
            diff_idx = [j for j, i in enumerate(present) if inputs[i].diff]
            if op.backward is None or not diff_idx:
                return tuple(jnp.zeros_like(x) for x in xs)
            structs = [_sds(xs[j].shape, xs[j].dtype) for j in diff_idx]
            ng = len(gs)
            mask = [any(inputs[present[j]].name == d for j in diff_idx) for d in op.diff]

            def body(*a):
                arrs = iter(a[ng:])
                sv = [saved_const[k] if k in saved_const else next(arrs) for k in range(len(op.save))]
                by = R.call_backward(op, _abstract.KOPS, a[:ng], sv, attrs, mask)
                out = []
                for j in diff_idx:
                    gr = R.sum_to(_abstract.KOPS, by.get(inputs[present[j]].name), xs[j].shape)   # a broadcast operand's
                    out.append(jnp.zeros(xs[j].shape, xs[j].dtype) if gr is None else gr)
                return out
            r = _call(body, (*gs, *saved), structs)
            res_g = [jnp.zeros_like(x) for x in xs]
            for j, gr in zip(diff_idx, r):
                res_g[j] = gr
            return tuple(res_g)
        f.defvjp(f_fwd, f_bwd)
        vjps[key] = f
        return f

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs)
        xs, present, consts = [], [], []
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    _array(api, t.name, a)   # TypeError: "... must be a JAX array, not NoneType"
                continue
            if t.scalar and _is_pyscalar(a):
                consts.append((i, a))
                continue
            x = _array(api, t.name, a)
            xs.append(x)
            present.append(i)
        if not xs:
            raise TypeError(f"{api}: at least one operand must be an array, got {len(consts)} Python numbers")
        dts = {x.dtype for x in xs}
        if len(dts) > 1:
            raise TypeError(f"{api}: operands have dtypes {sorted(d.name for d in dts)}; canna does not promote dtypes "
                            "(cast with .astype)")
        # the shape rule on the abstract values: bad shapes raise here, also under jit
        filled = _fill(xs, present, len(inputs))
        for i, c in consts:
            filled[i] = c
        op.specs([R.Spec(a.shape, canna_dl.dtype(a.dtype.name)) if hasattr(a, "dtype") else a for a in filled], attrs)
        return vjp_for(tuple(attrs.items()), tuple(present), tuple(consts))(*xs)

    fn.__name__ = fn.__qualname__ = op.jax
    fn.__doc__ = f"JAX form of :func:`kernels.{op.name}` (jax.grad, jax.jit).\n\n{op.doc}"
    fn.opdef = op
    return fn


def _fill(xs, present, n):
    v = [None] * n
    for i, x in zip(present, xs):
        v[i] = x
    return v


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)
