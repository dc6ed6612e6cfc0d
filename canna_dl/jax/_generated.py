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
import numpy as np

import canna_dl
from kernels import _abstract
from kernels import _registry as R

from ._ops import _array, _call, _sds

__all__ = ["function"]

_fns: dict = {}
_lock = threading.Lock()


def _jax_ns_fn(op):
    """The differentiable JAX form of a registered op (canna's hand-written ones by name)."""
    if op.namespace == "canna" and not op.generate:
        import canna_dl.jax as cj
        f = getattr(cj, op.jax, None)
        if f is None:
            raise AttributeError(f"ops.{op.name}: canna_dl.jax has no differentiable form of {op.qualname}")
        return f
    return function(op)


#: the ops a composed forward runs with in JAX (differentiable)
JOPS = _abstract.Namespace(_jax_ns_fn, "canna_dl.jax functions")


def _input(api, t, a):
    """A JAX array for input ``t``: differentiable (or floating-only) inputs through the shims'
    floating check; the others (masks, indices) of one of ``t``'s dtypes."""
    if t.diff or all(d.kind == "f" for d in t.dtypes):
        return _array(api, t.name, a)
    try:
        x = jnp.asarray(a)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{api}: {t.name} ({type(a).__name__}) cannot be converted to a JAX array: {e}") from None
    if canna_dl.dtype(x.dtype.name) not in t.dtypes:
        raise TypeError(f"{api}: {t.name} has dtype {x.dtype.name}, which this op does not support "
                        f"({', '.join(d.name for d in t.dtypes)})")
    return x


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

    def vjp_for(attrs_key, present):
        key = (attrs_key, present)
        f = vjps.get(key)
        if f is not None:
            return f
        attrs = dict(attrs_key)

        def full(vals):
            v = [None] * len(inputs)
            for i, x in zip(present, vals):
                v[i] = x
            return v

        # a mutated input's new value is returned after the outputs (JAX is functional)
        muts = [i for i in op.mutated if i in present]
        ntot = nout + len(muts)

        def run(*xs):
            v = full(xs)
            specs = op.specs([None if a is None else R.Spec(a.shape, canna_dl.dtype(a.dtype.name)) for a in v],
                             attrs)
            structs = [_sds(s.shape, jnp.dtype(s.dtype.name)) for s in specs]
            if not muts:
                return _call(lambda *a: _tuple(op.kernel(*full(a), **attrs)), xs, structs)
            structs += [_sds(v[i].shape, v[i].dtype) for i in muts]
            return _call(lambda *a: [_jax_like(r, a) for r in op.functional(full(a), attrs)], xs, structs)

        def pack(outs):
            return outs[0] if ntot == 1 else tuple(outs)

        @jax.custom_vjp
        def f(*xs):
            return pack(run(*xs))

        def f_fwd(*xs):
            outs = run(*xs)
            saved = tuple(op.saved(full(xs), outs[:nout]))
            return pack(outs), (xs, saved)

        def f_bwd(res, g):
            xs, saved = res
            gs = ((g,) if ntot == 1 else tuple(g))[:nout]
            diff_idx = [j for j, i in enumerate(present) if inputs[i].diff]
            if op.backward is None or not diff_idx:
                return tuple(_zero_ct(x) for x in xs)
            structs = [_sds(xs[j].shape, xs[j].dtype) for j in diff_idx]
            ng = len(gs)
            held = [k for k, t in enumerate(saved) if t is not None]   # absent optional inputs: None

            def body(*a):
                sv = [None] * len(saved)
                for k, t in zip(held, a[ng:]):
                    sv[k] = t
                r = op.backward(_abstract.KOPS, *a[:ng], *sv, **attrs)
                r = r if isinstance(r, (tuple, list)) else (r,)
                by = dict(zip(op.diff, r))
                out = []
                for j in diff_idx:
                    gr = by.get(inputs[present[j]].name)
                    out.append(jnp.zeros(xs[j].shape, xs[j].dtype) if gr is None else gr)
                return out
            r = _call(body, (*gs, *[saved[k] for k in held]), structs)
            res_g = [_zero_ct(x) for x in xs]
            for j, gr in zip(diff_idx, r):
                res_g[j] = gr
            return tuple(res_g)
        f.defvjp(f_fwd, f_bwd)
        vjps[key] = f
        return f

    through = op.through_parts

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs)
        if through:   # differentiated through the registered ops it is made of
            return op.forward(JOPS, *[None if a is None else _input(api, t, a) for t, a in zip(inputs, arrays)],
                              **attrs)
        xs, present = [], []
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    _array(api, t.name, a)   # TypeError: "... must be a JAX array, not NoneType"
                continue
            x = _input(api, t, a)
            xs.append(x)
            present.append(i)
        dts = {x.dtype for x, i in zip(xs, present) if inputs[i].diff}
        if len(dts) > 1:
            raise TypeError(f"{api}: operands have dtypes {sorted(d.name for d in dts)}; canna does not promote dtypes "
                            "(cast with .astype)")
        # the shape rule on the abstract values: bad shapes raise here, also under jit
        op.specs([None if a is None else R.Spec(a.shape, canna_dl.dtype(a.dtype.name))
                  for a in _fill(xs, present, len(inputs))], attrs)
        return vjp_for(tuple(attrs.items()), tuple(present))(*xs)

    fn.__name__ = fn.__qualname__ = op.jax
    fn.__doc__ = f"JAX form of :func:`kernels.{op.name}` (jax.grad, jax.jit).\n\n{op.doc}"
    fn.opdef = op
    return fn


def _zero_ct(x):
    """A zero cotangent for ``x`` (``float0`` for a bool / integer primal, as custom_vjp requires)."""
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    import numpy as np
    return np.zeros(x.shape, dtype=jax.dtypes.float0)


def _fill(xs, present, n):
    v = [None] * n
    for i, x in zip(present, xs):
        v[i] = x
    return v


def _jax_like(r, args):
    """A kernel result of mixed-kind inputs (a DeviceArray) as the callers' kind: a JAX array, or
    under ``pure_callback`` (NumPy arguments) a NumPy array."""
    if isinstance(r, canna_dl.DeviceArray):
        return canna_dl.to_numpy(r) if any(isinstance(a, np.ndarray) for a in args) else canna_dl.to_jax(r)
    return r


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)
