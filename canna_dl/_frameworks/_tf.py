"""DeviceArray <-> tf.Tensor (eager, CPU).

TensorFlow 2.21 behaviour this works around (tensorflow#61769, tensorflow#51598; reproduced in tests/test_dlpack_*.py):
- ``tf.experimental.dlpack.from_dlpack`` takes only a legacy ``"dltensor"`` capsule, rejects
  any ``byte_offset`` and any layout but compact row-major, and accepts data that is not 64-byte
  aligned only to abort the process on the next Eigen op (P1): canna hands it compact, 64-byte
  aligned memory, copying otherwise (counted as ``"tf_layout"``);
- exporting a string tensor aborts the process (P2): refused here with a TypeError first;
- tensors are immutable, so imports are read-only (legacy capsules, NumPy's rule).
"""
from __future__ import annotations

import tensorflow as tf

from .. import _native
from .._array import DeviceArray
from .._interop import asarray, from_dlpack, host_prepare

__all__ = ["to_tf", "from_tf"]

_UNEXPORTABLE = {tf.string, tf.variant, tf.resource}
_is_symbolic = getattr(tf, "is_symbolic_tensor", None)


def _import_tensor(t, copy=None):
    if isinstance(t, tf.Variable):
        t = tf.convert_to_tensor(t)
    if isinstance(t, (tf.RaggedTensor, tf.SparseTensor)):
        raise TypeError(f"canna_dl: {type(t).__name__} has no DLPack form; convert it to a dense tensor first")
    if not isinstance(t, tf.Tensor):
        raise TypeError(f"canna_dl: cannot import a {type(t).__name__} from TensorFlow")
    if (_is_symbolic is not None and _is_symbolic(t)) or not hasattr(t, "numpy"):
        raise TypeError("canna_dl: symbolic TensorFlow tensors (inside tf.function) have no memory to share; "
                        "call canna from eager code or through tf.py_function")
    if t.dtype in _UNEXPORTABLE:
        raise TypeError(f"canna_dl: TensorFlow {t.dtype.name} tensors cannot be exchanged (TensorFlow 2.21 aborts "
                        "the process when exporting them through DLPack)")
    cap = tf.experimental.dlpack.to_dlpack(t)
    a = _native.import_capsule(DeviceArray, cap)
    if copy is True:
        a = a.copy()
    return a


def from_tf(t, *, device=None, copy=None) -> DeviceArray:
    """A read-only DeviceArray viewing TensorFlow eager tensor (or variable) ``t`` (see
    :func:`canna_dl.from_dlpack`).

    Raises:
        TypeError: a string/variant/resource tensor, a ragged or sparse tensor, a symbolic tensor.
        BufferError: a GPU tensor.
    """
    return from_dlpack(_checked(t), device=device, copy=copy)


def _checked(t):
    if isinstance(t, tf.Variable):
        return tf.convert_to_tensor(t)
    if not isinstance(t, (tf.Tensor, tf.RaggedTensor, tf.SparseTensor)):
        raise TypeError(f"from_tf: expected a tf.Tensor, not {type(t).__name__}")
    return t


def to_tf(a) -> tf.Tensor:
    """A CPU tf.Tensor viewing ``a`` (a DeviceArray, or anything :func:`canna_dl.asarray` takes).

    Zero-copy when ``a`` is compact row-major with a 64-byte aligned first element (every array
    canna allocates); other views are copied first (counted as ``"tf_layout"``), as is device
    memory in the discrete model (``"to_host"``). Waits for pending work on ``a``'s stream.
    """
    if not isinstance(a, DeviceArray):
        a = asarray(a)
    a = host_prepare(a, compact="c", align=True, reason="tf_layout")
    cap = _native.export_capsule(a, False, 0, 1, 0)
    return tf.experimental.dlpack.from_dlpack(cap)
