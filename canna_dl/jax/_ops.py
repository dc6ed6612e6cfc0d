"""canna's differentiable ops for JAX (``canna_dl.jax.add``, ..., docs/DESIGN.md §7).

Each op is a ``jax.custom_vjp`` function whose forward and backward call canna's kernel library
(``kernels.*`` / ``kernels.backward.*``):

- **eager** (concrete ``jax.Array`` operands, also inside ``jax.grad`` without ``jit``): the
  kernels read the arrays' memory in place and hand their results back through DLPack
  (zero-copy, see :mod:`canna_dl.jax._exchange`);
- **traced** (under ``jax.jit``, ``jax.vmap``, ...): the kernel call is an XLA FFI custom call
  running canna's executor on XLA's own buffers (no copy; :mod:`canna_dl.jax._ffi` says which ops
  and when), else a ``jax.pure_callback`` with the result's shape and dtype given as
  ``jax.ShapeDtypeStruct``; JAX hands the callback host arrays and copies its results into XLA's
  buffers (a copy ``pure_callback`` always makes). ``vmap`` runs either once per batch element
  (``vmap_method="sequential"``).

Rules: operands are JAX arrays (NumPy arrays and Python numbers next to an array are converted
with ``jnp.asarray``) of one floating dtype (float16, bfloat16, float32, float64); integer, bool
and mixed dtypes raise TypeError (canna does not promote; differentiating integers has no
meaning). Shapes broadcast as in NumPy and gradients of broadcast operands are summed back to
their shapes. JAX narrows 64-bit dtypes to 32 bits unless ``jax_enable_x64`` is on, so float64
needs ``jax.config.update("jax_enable_x64", True)``. Second derivatives are not supported:
canna's backward kernels are not themselves differentiable, so ``jax.grad`` of a ``jax.grad``
raises NotImplementedError (and ``jax.jvp`` / ``jax.hessian`` JAX's own TypeError for forward mode
of a custom_vjp function).
"""
from __future__ import annotations

import builtins
import numbers

import jax
import jax.numpy as jnp
import numpy as np

import kernels as K

__all__ = ["matmul", "relu", "sigmoid", "tanh", "softmax", "log_softmax"]

_P = "canna_dl.jax."
_FLOATS = ("float16", "bfloat16", "float32", "float64")


# ---------------------------------------------------------------------------------------------
# operands

def _is_pyscalar(x):
    return isinstance(x, numbers.Real) and not isinstance(x, builtins.bool) and not hasattr(x, "dtype")


def _array(api, name, x, dtype=None):
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{api}: {name} must be a JAX array, not {type(x).__name__}")
    if not isinstance(x, (jax.Array, np.ndarray)) and not _is_pyscalar(x):
        if hasattr(x, "__jax_array__") or isinstance(x, (list, tuple, np.generic)):
            pass
        else:
            raise TypeError(f"{api}: {name} must be a JAX array, not {type(x).__name__}")
    try:
        a = jnp.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{api}: {name} ({type(x).__name__}) cannot be converted to a JAX array: {e}") from None
    if a.dtype.name not in _FLOATS:
        raise TypeError(f"{api}: {name} has dtype {a.dtype.name}; canna's differentiable ops take floating arrays "
                        f"({', '.join(_FLOATS)}); cast with .astype, or call the kernel library (kernels.*) for a "
                        "non-differentiable integer op")
    return a


def _pair(api, x, y):
    if _is_pyscalar(x) and _is_pyscalar(y):
        raise TypeError(f"{api}: at least one operand must be an array, got two Python numbers")
    a = None if _is_pyscalar(x) else _array(api, "x", x)
    b = None if _is_pyscalar(y) else _array(api, "y", y)
    if a is None:
        a = _array(api, "x", x, b.dtype)
    if b is None:
        b = _array(api, "y", y, a.dtype)
    if a.dtype != b.dtype:
        raise TypeError(f"{api}: y has dtype {b.dtype.name} but x has {a.dtype.name}; canna does not promote dtypes "
                        "(cast one of them with .astype)")
    return a, b


def _traced(args) -> builtins.bool:
    return any(isinstance(a, jax.core.Tracer) for a in args)


def _ad_tracers():
    """JAX's forward-mode tracer types (JVP, and the linearize tracer jax.grad uses since 0.4.36)."""
    try:
        from jax._src.interpreters import ad
    except Exception:  # pragma: no cover - then JAX's own error ("Pure callbacks do not support JVP")
        return ()
    return tuple(t for t in (getattr(ad, "JVPTracer", None), getattr(ad, "LinearizeTracer", None)) if t)


_AD_TRACERS = _ad_tracers()


def _check_not_differentiated(args):
    """A JVP tracer reaching a kernel call means a derivative of canna's forward or backward
    kernels is being taken (custom_vjp hands its forward and backward plain values otherwise)."""
    if _AD_TRACERS and any(isinstance(a, _AD_TRACERS) for a in args):
        raise NotImplementedError("canna_dl.jax: second derivatives are not supported (canna's backward kernels are "
                                  "not themselves differentiable); take one jax.grad / jax.vjp of canna's ops")


def _call(fn, args, structs):
    """``fn(*arrays) -> tuple of arrays`` (kernel calls): now on concrete arrays (JAX in, JAX out,
    zero-copy), or as a ``jax.pure_callback`` of the result ``structs`` when traced."""
    if not _traced(args):
        return tuple(fn(*args))
    _check_not_differentiated(args)

    def host(*a):
        r = fn(*(np.asarray(v) for v in a))   # NumPy in, NumPy out (written in place by the kernels)
        # an output the kernel does not produce (None: the gradient of an absent optional input) is zeros
        return tuple(np.zeros(s.shape, s.dtype) if v is None else np.asarray(v) for v, s in zip(r, structs))
    return tuple(jax.pure_callback(host, tuple(structs), *args, vmap_method="sequential"))


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _sum_to(g, shape):
    return K.sum_to_size(g, tuple(shape))


# arithmetic (add, sub, mul, div, pow) and the unary ops: generated from their registry entries
# (kernels/ops/elementwise.py; canna_dl/jax/_generated.py)

# ---------------------------------------------------------------------------------------------
# matmul

def matmul(a, b):
    """Matrix product with NumPy semantics (``jnp.matmul``: 1-D vectors, broadcast batch dims;
    ``kernels.matmul`` / ``kernels.backward.matmul``). Generated from its registry entry.

    Raises:
        ValueError: 0-d operands, mismatched inner dims, batch dims that do not broadcast.
        TypeError: see :func:`add`.
    """
    return _gen("matmul")(a, b)


# ---------------------------------------------------------------------------------------------
# activations

def _gen(name):
    from ._generated import function
    return function(K.get_op(name))


def relu(x):
    """``max(x, 0)`` (``jax.nn.relu``; gradient 0 at 0, as JAX's). Generated from its registry entry."""
    return _gen("relu")(x)


def sigmoid(x):
    """``1 / (1 + exp(-x))`` (``jax.nn.sigmoid``; gradient from the output). Generated from its registry entry."""
    return _gen("sigmoid")(x)


def tanh(x):
    """``tanh(x)`` (``jnp.tanh``; gradient from the output). Generated from its registry entry."""
    return _gen("tanh")(x)


def softmax(x, axis=-1):
    """Softmax along ``axis`` (``jax.nn.softmax``; ``kernels.softmax``; gradient from the output).
    Generated from its registry entry.

    Raises:
        AxisError (a ValueError and IndexError): ``axis`` out of range. TypeError: see :func:`add`.
    """
    return _gen("softmax")(x, axis)


def log_softmax(x, axis=-1):
    """Log-softmax along ``axis`` (``jax.nn.log_softmax``; ``kernels.log_softmax``). See :func:`softmax`."""
    return _gen("log_softmax")(x, axis)
