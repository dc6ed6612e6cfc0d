"""The machinery of canna's differentiable TensorFlow ops (docs/DESIGN.md §7).

Each op is a ``tf.custom_gradient`` function whose forward and backward call canna's kernel
library (``kernels`` and ``kernels.backward``) on TensorFlow tensors:

- **eager**: the kernels read the tensors' memory in place and hand their results to TensorFlow
  through DLPack (zero-copy, see :mod:`canna_dl.tf._exchange`); with no ``tf.GradientTape``
  recording the op is a plain kernel call (nothing is saved for a backward);
- **inside tf.function** (and Keras's symbolic calls): an op that is aclnn calls on its operands is a
  native ``CannaCall`` node (:mod:`canna_dl.tf._native`); the others run as ``tf.py_function``
  nodes, which hand them eager tensors at run time (still zero-copy), and the op's outputs get the
  static shapes inferred from the inputs', so Keras layers and later ops see them. The forward
  node also outputs what the backward needs (``mean`` / ``rstd`` of a norm, pooling indices, ...);
- **second derivatives** are refused: the backward is itself a custom-gradient function whose
  gradient raises ``NotImplementedError`` (canna's backward kernels are not differentiable), so a
  nested tape gets a clear error instead of a silent None.

``tf.py_function`` cannot be compiled by XLA (``jit_compile=True``) nor serialized into a
SavedModel graph; inside an XLA context the ops raise a NotImplementedError saying so.
"""
from __future__ import annotations

import builtins
import numbers

import tensorflow as tf

import canna_dl
from canna_dl import DeviceArray

from ._stats import count

__all__ = []

try:   # "is any tape recording?" (private; without it every eager call records)
    from tensorflow.python.eager import record as _record
    _recording = _record.could_possibly_record
except Exception:  # pragma: no cover - older/newer TensorFlow layouts
    def _recording():
        return True

try:
    from tensorflow.python.ops import control_flow_util as _cfu

    def _in_xla() -> builtins.bool:
        return builtins.bool(_cfu.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
except Exception:  # pragma: no cover
    def _in_xla() -> builtins.bool:
        return False

FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
INTS = (tf.int32, tf.int64)
_FLOAT_NAMES = "float16, bfloat16, float32, float64"


# ---------------------------------------------------------------------------------------------
# operands

def is_pyscalar(x) -> builtins.bool:
    """A Python int or float (not bool): a "weak" scalar operand."""
    return isinstance(x, numbers.Real) and not isinstance(x, (builtins.bool, tf.Tensor, tf.Variable)) \
        and not hasattr(x, "dtype")


def tensor(api, name, x, dtype_hint=None) -> tf.Tensor:
    """``x`` as a dense tf.Tensor (variables are read, which TensorFlow differentiates).

    Raises:
        TypeError: ``x`` is None, a ragged or sparse tensor, or not convertible to a tensor.
    """
    if x is None:
        raise TypeError(f"{api}: {name} must be a tensor, not None")
    if isinstance(x, tf.RaggedTensor):
        raise TypeError(f"{api}: {name} is a tf.RaggedTensor; canna's ops take dense tensors (convert it with "
                        f"{name}.to_tensor(), padding the rows)")
    if isinstance(x, (tf.SparseTensor, tf.compat.v1.SparseTensorValue)):
        raise TypeError(f"{api}: {name} is a tf.SparseTensor; canna's ops take dense tensors (convert it with "
                        "tf.sparse.to_dense)")
    if isinstance(x, DeviceArray):
        x = canna_dl.to_tf(x)
    if isinstance(x, tf.Tensor):
        return x
    try:
        return tf.convert_to_tensor(x, dtype_hint=dtype_hint)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{api}: {name} ({type(x).__name__}) cannot be converted to a tensor: {e}") from None


def floating(api, name, t) -> tf.Tensor:
    """Check that ``t`` has a floating dtype canna differentiates."""
    if t.dtype not in FLOATS:
        if t.dtype.is_integer or t.dtype == tf.bool:
            hint = (f"canna's differentiable ops take floating tensors ({_FLOAT_NAMES}); cast with tf.cast, or "
                    "call the kernel library (kernels.*) for a non-differentiable integer op")
        else:
            hint = f"canna's differentiable ops take floating tensors ({_FLOAT_NAMES})"
        raise TypeError(f"{api}: {name} has dtype {t.dtype.name}; {hint}")
    return t


def float_tensor(api, name, x, dtype_hint=None) -> tf.Tensor:
    return floating(api, name, tensor(api, name, x, dtype_hint))


def same_dtype(api, *named):
    """TensorFlow does not promote: every tensor of an op has one dtype."""
    first = None
    for name, t in named:
        if t is None:
            continue
        if first is None:
            first = (name, t)
        elif t.dtype != first[1].dtype:
            raise TypeError(f"{api}: {name} has dtype {t.dtype.name} but {first[0]} has {first[1].dtype.name}; "
                            "canna, like TensorFlow, does not promote dtypes (cast one of them with tf.cast)")


def to_tf(x):
    """A kernel result as a TF tensor (DeviceArrays are handed over through DLPack)."""
    if isinstance(x, DeviceArray):
        return canna_dl.to_tf(x)
    return x


def arr(x) -> DeviceArray:
    """A DeviceArray viewing eager tensor ``x`` (zero-copy)."""
    return x if isinstance(x, DeviceArray) else canna_dl.asarray(x)


# ---------------------------------------------------------------------------------------------
# running kernel calls eagerly or as graph nodes

def run(api, body, args, specs):
    """``body(*eager tensors) -> list of results`` now (eager), or as a ``tf.py_function`` node
    whose outputs get the static shapes ``specs()`` gives (``[(dtype, TensorShape), ...]``)."""
    if tf.executing_eagerly():
        r = [to_tf(r) for r in body(*args)]
        count(api)
        return r
    if _in_xla():
        raise NotImplementedError(f"{api}: canna's ops run through tf.py_function, which XLA cannot compile; "
                                  "call them from a tf.function without jit_compile=True (Keras: "
                                  "model.compile(jit_compile=False))")
    sp = specs()

    def call(*a):
        r = [to_tf(r) for r in body(*a)]
        count(api)
        return r
    outs = tf.py_function(call, list(args), Tout=[d for d, _ in sp], name="canna_" + api.rsplit(".", 1)[-1])
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for o, (_, shape) in zip(outs, sp):
        o.set_shape(shape)
    return list(outs)


def apply(api, xs, diff, fwd, nout, specs, bwd):
    """Run a differentiable op.

    Args:
        xs: the op's tensor operands (tf.Tensor).
        diff: one bool per operand: whether it gets a gradient (False: labels, ...).
        fwd: ``fwd(save, *eager xs) -> list``: the ``nout`` outputs, then (when ``save``) the
            tensors the backward needs.
        specs: ``specs() -> [(dtype, TensorShape)]`` of what ``fwd(True, ...)`` returns (graph mode).
        bwd: ``bwd(dys, xs, saved) -> list`` of the gradients of the operands where ``diff`` is
            True (eager tensors in, TF tensors or DeviceArrays out, of the operands' shapes).

    Returns the output (``nout == 1``) or a tuple of outputs.
    """
    if tf.executing_eagerly() and not _recording():
        r = fwd(False, *xs)
        count(api)
        return to_tf(r[0]) if nout == 1 else tuple(to_tf(t) for t in r[:nout])

    @tf.custom_gradient
    def op(*ts):
        res = run(api, lambda *a: fwd(True, *a), ts, specs)
        outs, saved = res[:nout], res[nout:]

        def grad(*dys):
            dys = [tf.zeros_like(o) if d is None else d for d, o in zip(dys, outs)]
            return backward(api, bwd, dys, ts, saved, diff)
        return (outs[0] if nout == 1 else list(outs)), grad
    r = op(*xs)
    return r if nout == 1 else tuple(r)


def backward(api, bwd, dys, xs, saved, diff):
    """The gradients of ``xs`` (None where ``diff`` is False), computed by ``bwd``."""
    idx = [i for i, d in enumerate(diff) if d]
    nd, nx = len(dys), len(xs)
    out = [None] * nx
    if not idx:
        return out

    def body(*a):
        gs = bwd(list(a[:nd]), list(a[nd:nd + nx]), list(a[nd + nx:]))
        return [to_tf(g) for g in gs]
    args = list(dys) + list(xs) + list(saved)

    def specs():
        return [(xs[i].dtype, xs[i].shape) for i in idx]
    if tf.executing_eagerly() and not _recording():
        r = body(*args)
        count(api + "_grad")
    else:
        @tf.custom_gradient
        def grad_op(*a):
            gs = run(api + "_grad", body, a, specs)

            def second(*_):
                raise NotImplementedError(f"{api}: second derivatives are not supported (canna's backward kernels "
                                          "are not themselves differentiable); differentiate once per tape")
            return gs, second
        r = grad_op(*args)
    for i, g in zip(idx, r):
        out[i] = g
    return out


# ---------------------------------------------------------------------------------------------
# static shapes (graph mode)

def bcast(api, a: tf.TensorShape, b: tf.TensorShape) -> tf.TensorShape:
    try:
        return tf.broadcast_static_shape(a, b)
    except ValueError:
        raise ValueError(f"{api}: shapes {a} and {b} cannot be broadcast together") from None


def dims_of(shape: tf.TensorShape):
    """The dims as a list of ints/None, or None when the rank is unknown."""
    return None if shape.rank is None else shape.as_list()
