"""The JAX shim generated from the op registry (kernels/_registry.py, docs/DESIGN.md §11).

:func:`function` makes, once per entry, a ``jax.custom_vjp`` function (``canna_dl.jax.<name>``
for canna's own ops, ``op.jax_fn`` for a user's): eager calls run canna's kernels zero-copy; under
``jax.jit`` the kernels run as an XLA FFI custom call on XLA's buffers where the op is a sequence
of aclnn calls on its operands and results (:mod:`canna_dl.jax._ffi`), else through
``jax.pure_callback``, with the result shapes of the entry's shape rule; the gradient comes from
the entry's backward (under ``jit`` run with the ops' JAX forms, so they take the same route; see
:mod:`canna_dl.jax._ops` for the rules: floating operands of one dtype, second derivatives
refused).
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

import canna_dl
from kernels import _abstract
from kernels import _registry as R

from . import _ffi
from ._ops import _array, _call, _check_not_differentiated, _is_pyscalar, _sds, _traced

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

    def vjp_for(attrs_key, lay, consts):
        key = (attrs_key, lay, tuple((i, type(c), repr(c)) for i, c in consts))
        f = vjps.get(key)
        if f is not None:
            return f
        attrs = dict(attrs_key)
        # flat position -> (input index, index in its list or -1)
        owner = [(i, j if n >= 0 else -1) for i, n in enumerate(lay) if n is not None
                 for j in range(1 if n < 0 else n)]
        const_of = dict(consts)   # Python-number operands (scalar inputs): constants, no gradient
        in_index = {t.name: i for i, t in enumerate(inputs)}
        # what the backward saves: arrays (residuals, through the callback) or constants (numbers)
        saved_const = {k: const_of[in_index[n]] for k, n in enumerate(op.save)
                       if n in in_index and in_index[n] in const_of}
        mask = [lay[in_index[n]] is not None and in_index[n] not in const_of for n in op.diff]

        def full(vals):
            v = R.unflatten(lay, vals)
            for i, c in consts:
                v[i] = c
            return v

        # a mutated input's new value is returned after the outputs (JAX is functional)
        muts = [k for k, (i, _) in enumerate(owner) if inputs[i].mutated]
        ntot = nout + len(muts)

        def run(*xs):
            specs = op.specs(_specs(full(xs)), attrs)
            structs = [_sds(s.shape, jnp.dtype(s.dtype.name)) for s in specs]
            if not muts:
                if _jit_route(xs):   # one aclnn call on XLA's buffers (canna_dl/jax/_ffi.py), else pure_callback
                    r = _ffi.call(op, key, attrs, full, xs, structs)
                    if r is not None:
                        return r
                return _call(lambda *a: _tuple(op.kernel(*full(a), **attrs)), xs, structs)
            structs += [_sds(xs[k].shape, xs[k].dtype) for k in muts]
            return _call(lambda *a: [_jax_like(r, a) for r in op.functional(full(a), attrs)], xs, structs)

        def pack(outs):
            return outs[0] if ntot == 1 else tuple(outs)

        @jax.custom_vjp
        def f(*xs):
            return pack(run(*xs))

        def f_fwd(*xs):
            outs = run(*xs)
            saved = tuple(None if k in saved_const else v for k, v in enumerate(op.saved(full(xs), outs[:nout])))
            return pack(outs), (xs, saved)

        def f_bwd(res, g):
            xs, saved = res
            gs = ((g,) if ntot == 1 else tuple(g))[:nout]
            diff_idx = [k for k, (i, _) in enumerate(owner) if inputs[i].diff]
            res_g = [_zero_cotangent(x) for x in xs]
            if op.backward is None or not diff_idx:
                return tuple(res_g)
            if _jit_route((*gs, *[x for x in saved if x is not None and not isinstance(x, (list, tuple))])):
                r = _traced_backward(op, owner, inputs, diff_idx, xs, gs, saved, saved_const, attrs, mask)
                if r is not None:
                    for k, gr in zip(diff_idx, r):
                        res_g[k] = gr
                    return tuple(res_g)
            structs = [_sds(xs[k].shape, xs[k].dtype) for k in diff_idx]
            ng = len(gs)
            slay = [len(v) if isinstance(v, (list, tuple)) else -1 for v in saved]
            sflat = [x for v in saved for x in (v if isinstance(v, (list, tuple)) else (v,))]
            held = [k for k, x in enumerate(sflat) if x is not None]   # absent optional inputs: None

            def body(*a):
                sv = [None] * len(sflat)
                for k, x in zip(held, a[ng:]):
                    sv[k] = x
                sv = R.unflatten(slay, sv)
                for k, c in saved_const.items():
                    sv[k] = c
                by = R.call_backward(op, _abstract.KOPS, a[:ng], sv, attrs, mask)
                return _gradients(by, owner, inputs, diff_idx, xs, lambda g, shape: R.sum_to(_abstract.KOPS, g, shape))
            r = _call(body, (*gs, *[sflat[k] for k in held]), structs)
            for k, gr in zip(diff_idx, r):
                res_g[k] = gr
            return tuple(res_g)
        f.defvjp(f_fwd, f_bwd)
        vjps[key] = f
        return f

    through = op.through_parts
    grads = op.grad_inputs   # the inputs that get a gradient (floating ones)

    def fn(*args, **kwargs):
        arrays, attrs = op.bind(api, args, kwargs, op.jax_args)
        if through:   # differentiated through the registered ops it is made of
            return op.forward(JOPS, *[a if a is None or (t.scalar and _is_pyscalar(a))
                                      else _operand(api, t, t.name, a, t.name in grads)
                                      for t, a in zip(inputs, arrays)], **attrs)
        vals, consts = [], []
        for i, (t, a) in enumerate(zip(inputs, arrays)):
            if a is None:
                if not t.optional:
                    _array(api, t.name, a)   # TypeError: "... must be a JAX array, not NoneType"
                vals.append(None)
            elif t.scalar and _is_pyscalar(a):
                consts.append((i, a))
                vals.append(None)
            elif t.list:
                if not isinstance(a, (list, tuple)):
                    raise TypeError(f"{api}: {t.name} must be a list or tuple of JAX arrays, not {type(a).__name__}")
                vals.append([_operand(api, t, f"{t.name}[{j}]", b, t.name in grads) for j, b in enumerate(a)])
            else:
                vals.append(_operand(api, t, t.name, a, t.name in grads))
        xs, lay = R.flatten(op, vals)
        if not xs and consts:
            raise TypeError(f"{api}: at least one operand must be an array, got {len(consts)} Python numbers")
        dts = {x.dtype for x, (t, _) in zip(xs, _owners(op, lay)) if t.diff}
        if len(dts) > 1:
            raise TypeError(f"{api}: operands have dtypes {sorted(d.name for d in dts)}; canna does not promote dtypes "
                            "(cast with .astype)")
        # the shape rule on the abstract values: bad shapes raise here, also under jit
        for i, c in consts:
            vals[i] = c
        op.specs(_specs(vals), attrs)
        return vjp_for(tuple(attrs.items()), lay, tuple(consts))(*xs)

    fn.__name__ = fn.__qualname__ = op.jax
    fn.__doc__ = f"JAX form of :func:`kernels.{op.name}` (jax.grad, jax.jit).\n\n{op.doc}"
    fn.opdef = op
    return fn


def _jit_route(xs) -> bool:
    """Traced values (under jit, vmap) and the FFI route available (canna_dl/jax/_ffi.py)."""
    if not _traced(xs):
        return False
    _check_not_differentiated(xs)
    return _ffi.available()


def _traced_backward(op, owner, inputs, diff_idx, xs, gs, saved, saved_const, attrs, mask):
    """The backward under jit as the differentiable JAX ops of its registered ops (each one an FFI
    custom call where it is one aclnn call), a broadcast operand's gradient summed to its shape
    with jnp (XLA's own reduction). None when the backward needs an op without a JAX form (then
    the whole backward runs in one pure_callback, as before)."""
    sv = list(saved)
    for k, c in saved_const.items():
        sv[k] = c
    try:
        by = R.call_backward(op, JOPS, gs, sv, attrs, mask)
    except Exception:   # an op without a JAX form, ...: the one-callback path (which raises real errors again)
        return None
    return _gradients(by, owner, inputs, diff_idx, xs, _sum_to_jnp)


def _gradients(by, owner, inputs, diff_idx, xs, sum_to):
    """The gradients of the differentiable flat operands ``diff_idx`` from the backward's result
    ``by`` (input name -> gradient, a list for a list input): a broadcast operand's summed to its
    shape with ``sum_to(g, shape)``, zeros where the backward gives none."""
    out = []
    for k in diff_idx:
        i, j = owner[k]
        gr = by.get(inputs[i].name)
        if gr is not None and j >= 0:
            gr = gr[j]
        out.append(jnp.zeros(xs[k].shape, xs[k].dtype) if gr is None else sum_to(gr, tuple(xs[k].shape)))
    return out


def _sum_to_jnp(g, shape):
    """``g`` summed over the dims broadcasting added to ``shape`` (NumPy's rule)."""
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape) if n == 1 and g.shape[lead + d] != 1)
    return jnp.sum(g, axis=dims, keepdims=False).reshape(shape) if dims else g.reshape(shape)


def _owners(op, lay):
    return [(op.inputs[i], j) for i, n in enumerate(lay) if n is not None for j in range(1 if n < 0 else n)]


def _operand(api, t, name, a, grad):
    """One operand: a floating JAX array for an input that gets a gradient (``grad``:
    ``OpDef.grad_inputs``) or takes floats only; an input that gets none (labels, indices, every
    input of an op without a backward) may be of its own dtypes."""
    if grad or all(d.kind == "f" for d in t.dtypes):
        return _array(api, name, a)
    if a is None or isinstance(a, (str, bytes)):
        raise TypeError(f"{api}: {name} must be a JAX array, not {type(a).__name__}")
    try:
        x = jnp.asarray(a)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{api}: {name} ({type(a).__name__}) cannot be converted to a JAX array: {e}") from None
    if canna_dl.dtype(x.dtype.name) not in t.dtypes:
        raise TypeError(f"{api}: {name} has dtype {x.dtype.name}, which this op does not support "
                        f"({', '.join(d.name for d in t.dtypes)})")
    return x


def _zero_cotangent(x):
    """The cotangent of an input that gets no gradient (float0 for an integer one, as JAX requires)."""
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, dtype=jax.dtypes.float0)


def _specs(vals):
    """Specs of the values (a Python-number operand as given)."""
    return [a if a is None or _is_pyscalar(a) else [_spec1(b) for b in a] if isinstance(a, list) else _spec1(a)
            for a in vals]


def _spec1(a):
    return R.Spec(a.shape, canna_dl.dtype(a.dtype.name))


def _jax_like(r, args):
    """A kernel result of mixed-kind inputs (a DeviceArray) as the callers' kind: a JAX array, or
    under ``pure_callback`` (NumPy arguments) a NumPy array."""
    if isinstance(r, canna_dl.DeviceArray):
        return canna_dl.to_numpy(r) if any(isinstance(a, np.ndarray) for a in args) else canna_dl.to_jax(r)
    return r


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)
