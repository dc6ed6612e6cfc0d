"""kernels — canna's kernel library: array-level ops over aclnn, and custom kernels.

It depends on ``acl_rt`` and ``canna_dl`` only (no framework is imported until one is used).

Built-in ops (docs/DESIGN.md §6) take anything :func:`canna_dl.asarray` takes — PyTorch,
TensorFlow and JAX tensors, NumPy arrays, DeviceArrays — and read the caller's memory in place::

    import kernels, torch
    x, y = torch.rand(3, 4), torch.rand(4)
    z = kernels.add(x, y, alpha=2)           # a torch.Tensor (torch in, torch out), complete
    kernels.softmax(x, dim=-1, out=z)        # into an existing array
    a = canna_dl.asarray(x)                  # DeviceArray in, DeviceArray out (stream-ordered)
    b = kernels.matmul(a, a.T, stream=s)

Conventions of every op:

- Names and signatures follow PyTorch (``torch`` / ``torch.nn.functional``); keyword-only
  ``out=`` (checked: shape, dtype castable, writable, no unsafe aliasing; returned) and
  ``stream=`` (default: the current stream).
- Broadcasting follows NumPy; dtype promotion follows PyTorch (:func:`result_type`).
- The result is of the inputs' kind (:func:`result_kind`): torch in → torch out, NumPy in →
  NumPy out, TF/JAX in → TF/JAX out (complete when returned), DeviceArray in → DeviceArray
  out (stream-ordered: ``result.stream`` is the stream that writes it). In the unified memory
  model framework outputs are allocated by the framework (torch, NumPy) or from canna's pool
  and handed over zero-copy (TF, JAX); in the discrete model inputs are copied to the device
  and results back (counted in :func:`canna_dl.copy_stats`).
- Everything is checked in Python before launching (TypeError for dtypes, ValueError for
  shapes and ``out``, :class:`AxisError` for dims); the runtime stays usable after an error.
- Each call is one cached aclnn call (a repeatable executor per signature, see
  :func:`cache_info`); ``CANNA_KERNELS_CACHE=0`` rebuilds it every call.

Backward kernels live in :mod:`kernels.backward` (``kernels.backward.relu(grad, x)``, ...), with
the forward variants that return what they need: :func:`native_layer_norm`,
:func:`native_rms_norm`, :func:`max_pool2d_with_indices`, :func:`native_cross_entropy`,
:func:`native_nll_loss`.

Every op is an entry of the op registry (docs/DESIGN.md §11; :func:`registered_ops`,
:func:`get_op`; canna's own in ``kernels/ops/*.py``), from which its kernel function and its
PyTorch, TensorFlow and JAX forms are generated. :func:`register_op` registers your own kernels the
same way (README "Your own ops")::

    op = kernels.register_op("my_add", inputs=[kernels.Tensor("x", "float32"), kernels.Tensor("y", "float32")],
                             shape=rule, forward=kernels.Launch(raw_kernel, launch_rule),
                             backward=lambda ops, g: (g, g))
    op.torch_fn(a, b); op.tf_fn(a, b); op.jax_fn(a, b); torch.ops.user.my_add(a, b)

Custom kernels (docs/DESIGN.md §3.3): :class:`RawKernel` / :class:`RawModule` compile, load and
launch user kernels written in the dialect of ``kernels/include/canna_kernel.h``.
"""
# custom kernels
from ._raw import (MAX_BLOCKS, CompileError, KernelNotFoundError, KernelSourceError, RawKernel, RawModule,
                   kernel_cache_info)
from ._signature import KernelParam, KernelSignature

# built-in ops
from ._core import AxisError, broadcast_shapes as _broadcast_shapes, result_kind, result_type
from ._elementwise import astype, cast, contiguous, copy_
# the op registry (docs/DESIGN.md §11) and canna's own entries (kernels/ops/*.py)
from ._registry import (Aclnn, Attr, Launch, OpDef, RegistrationError, Spec, Tensor, TensorList, TorchFn, get_op,
                        op_id,
                        register_op, registered_ops)
from . import ops as _ops
from . import backward

_k = {op.name: op.kernel for op in registered_ops("canna") if not op.name.endswith("_backward")}
add, sub, mul, div, pow = _k["add"], _k["sub"], _k["mul"], _k["div"], _k["pow"]
neg, exp, log, sqrt, relu, gelu, silu, sigmoid, tanh = (_k[n] for n in ("neg", "exp", "log", "sqrt", "relu", "gelu",
                                                                          "silu", "sigmoid", "tanh"))
sum, mean, amax, sum_to_size = _k["sum"], _k["mean"], _k["amax"], _k["sum_to_size"]  # noqa: A001
(conv2d, cross_entropy, layer_norm, linear, log_softmax, matmul, max_pool2d, max_pool2d_with_indices,
 native_cross_entropy, native_layer_norm, native_nll_loss, native_rms_norm, nll_loss, rms_norm, softmax) = (
    _k[n] for n in ("conv2d", "cross_entropy", "layer_norm", "linear", "log_softmax", "matmul", "max_pool2d",
                    "max_pool2d_with_indices", "native_cross_entropy", "native_layer_norm", "native_nll_loss",
                    "native_rms_norm", "nll_loss", "rms_norm", "softmax"))


def broadcast_shapes(*shapes) -> tuple:
    """The NumPy broadcast of ``shapes`` (tuples of ints).

    Raises:
        ValueError: they do not broadcast."""
    return _broadcast_shapes("kernels.broadcast_shapes", *(tuple(s) for s in shapes))


def cache_info() -> dict:
    """Counters of the built-in ops' plan cache: ``plans_built`` (phase-1 calls made),
    ``plan_hits`` (calls that reused a cached executor), ``plans_cached``, ``launches`` and
    ``address_swaps`` (``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr`` calls)."""
    from ._core import plan_cache_info
    return plan_cache_info()


def clear_cache() -> None:
    """Destroy the cached executors and descriptors of the built-in ops."""
    from ._core import clear_plan_cache
    clear_plan_cache()


__all__ = [
    # built-in ops
    "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "pow", "relu", "gelu", "silu", "sigmoid", "tanh",
    "softmax", "log_softmax", "layer_norm", "native_layer_norm", "rms_norm", "native_rms_norm", "matmul", "linear",
    "sum", "mean", "amax", "sum_to_size", "astype", "cast", "contiguous", "copy_", "conv2d", "max_pool2d",
    "max_pool2d_with_indices", "cross_entropy", "native_cross_entropy", "nll_loss", "native_nll_loss", "backward",
    "result_type", "result_kind", "broadcast_shapes", "AxisError", "cache_info", "clear_cache",
    # custom kernels
    "RawKernel", "RawModule", "KernelParam", "KernelSignature", "KernelNotFoundError", "KernelSourceError",
    "CompileError", "kernel_cache_info", "MAX_BLOCKS",
    # the op registry
    "register_op", "get_op", "registered_ops", "OpDef", "op_id", "Tensor", "TensorList", "Attr", "Spec", "Launch",
    "Aclnn", "RegistrationError", "TorchFn",
]

# every other entry of canna's own (kernels/ops/*.py) is exported under its name too
for _n, _f in _k.items():
    if _n not in globals():
        globals()[_n] = _f
        __all__.append(_n)
del _k, _n, _f
