"""canna_dl.tf — TensorFlow interop for canna (imported lazily; needs TensorFlow).

Exchange: :func:`to_tf` / :func:`from_tf` (zero-copy through DLPack).

Differentiable ops (``tf.custom_gradient``, forward and backward on canna's kernels, eager and
inside ``tf.function``; see :mod:`canna_dl.tf._ops`; the arithmetic and unary ops are generated
from their registry entries): :func:`add`, :func:`sub`, :func:`mul`, :func:`div`, :func:`pow`,
:func:`matmul`, :func:`linear`, :func:`dense`, :func:`relu`, :func:`gelu`, :func:`silu`,
:func:`sigmoid`, :func:`tanh`, :func:`softmax`, :func:`log_softmax`, :func:`layer_norm`,
:func:`rms_norm`, :func:`conv2d`, :func:`max_pool2d`, :func:`cross_entropy`, :func:`sum`,
:func:`mean`::

    import tensorflow as tf, canna_dl.tf as ctf
    a, b = tf.Variable([1., 2., 3.]), tf.Variable([4., 5., 6.])
    with tf.GradientTape() as tape:
        loss = ctf.sum(ctf.add(a, b))
    tape.gradient(loss, [a, b])      # [ones, ones]

:func:`op_stats` counts their executions (forward and backward, per op; :func:`reset_op_stats`
zeroes it), the counterpart of ``canna_dl.torch.offload``'s report.

Keras layers on them: ``canna_dl.tf.keras.Dense`` and ``canna_dl.tf.keras.Conv2D`` (the
``keras`` submodule is imported on first use).
"""
from ._exchange import from_tf, to_tf
from ._stats import op_stats, reset_op_stats
from ._ops import (conv2d, cross_entropy, dense, gelu, layer_norm, linear, log_softmax, matmul, max_pool2d, mean,
                   relu, rms_norm, sigmoid, silu, softmax, sum, tanh)

__all__ = ["to_tf", "from_tf", "matmul", "linear", "dense", "relu", "gelu", "silu",
           "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "rms_norm", "conv2d", "max_pool2d",
           "cross_entropy", "sum", "mean", "op_stats", "reset_op_stats", "load_native_ops", "keras"]


def load_native_ops() -> bool:
    """Load canna's TensorFlow op library (``CannaCall``; compiled into the kernel cache at the
    first use on a machine, ~10 s) so that a graph holding canna's native nodes — a SavedModel
    exported with canna ops — can be loaded and run in this process. Returns whether native ops
    are available (False: no compiler / TensorFlow headers, the discrete memory model, or
    ``CANNA_TF_NATIVE=0``; such a SavedModel then cannot run here)."""
    from . import _native
    return _native.available()


def __getattr__(name):
    if name == "keras":
        import importlib
        mod = importlib.import_module(".keras", __name__)
        globals()["keras"] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _export_registered():
    from kernels import _registry
    _registry.export_generated(globals(), __all__, "tf")


_export_registered()
