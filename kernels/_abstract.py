"""Namespaces of registered ops that backward (and composed forward) functions are written against
(their first argument, ``ops``): ``ops.mul(g, y)``, ``ops.sign(x)``, ``ops["ns::name"](...)``.

- :data:`KOPS`: the kernel-level functions (any array kind in, the same kind out);
- :data:`OPS`: abstract evaluation — each op's shape rule on :class:`kernels.Spec` s (what a
  registration is checked with, and what ``torch.compile`` / TF / JAX shape inference use).

The frameworks' shims add their own (differentiable ``canna_dl.torch`` ops, ``torch.ops.*``).
"""
from __future__ import annotations

from . import _registry as R

__all__ = ["Namespace", "KOPS", "OPS"]


def _resolve(name):
    p = getattr(R._checking, "op", None)   # an op being registered: its backward may call itself
    if p is not None and name in (p.qualname, p.name):
        return p
    if "::" in name:
        return R.get_op(name)
    op = R._REGISTRY.get(f"canna::{name}")
    if op is not None:
        return op
    found = [o for o in R._REGISTRY.values() if o.name == name]
    if len(found) == 1:
        return found[0]
    if not found:
        raise AttributeError(f"ops.{name}: no registered op of that name")
    raise AttributeError(f"ops.{name}: several namespaces register it ({', '.join(o.qualname for o in found)}); use "
                         f"ops[{found[0].qualname!r}]")


class Namespace:
    """``ops.<name>`` -> ``make(opdef)`` (cached per op)."""

    def __init__(self, make, what):
        self._make = make
        self._what = what
        self._cache = {}

    def __getitem__(self, name):
        op = _resolve(name)
        f = self._cache.get(op.qualname)
        if f is None or f[0] is not op:
            f = self._cache[op.qualname] = (op, self._make(op))
        return f[1]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __repr__(self):
        return f"<registered ops: {self._what}>"


KOPS = Namespace(lambda op: op.kernel, "kernel-level functions")


def _abstract_fn(op):
    if isinstance(op.forward, R.Impl):   # a hand-written function: its own signature
        import inspect
        sig = inspect.signature(op.forward.fn)

        def g(*args, **kwargs):
            ba = sig.bind(*args, **kwargs)
            for t in op.inputs:
                if not t.optional and ba.arguments.get(t.name) is None:
                    raise TypeError(f"{op.api}: {t.name} must be an array, not None")
            ba.arguments.pop("out", None)
            ba.arguments.pop("stream", None)
            return op.shape(*ba.args, **ba.kwargs)
        g.__name__ = op.name
        return g

    def f(*args, **kwargs):
        arrays, attrs = op.bind(op.api, args, kwargs)
        for t, a in zip(op.inputs, arrays):
            if a is None and not t.optional:
                raise TypeError(f"{op.api}: {t.name} must be an array, not None")
        specs = op.specs(arrays, attrs)
        return specs[0] if len(specs) == 1 else specs
    f.__name__ = op.name
    return f


OPS = Namespace(_abstract_fn, "shape rules on kernels.Spec")
