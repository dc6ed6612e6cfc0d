"""canna_dl.torch — PyTorch interop and autograd shims for canna (imported lazily; needs PyTorch).

Exchange: :func:`to_torch` / :func:`from_torch` move tensors between PyTorch and canna without a
copy (through DLPack's C exchange API, ``torch.Tensor.__dlpack_c_exchange_api__``, when PyTorch
has it).

Training with canna's kernels (docs/DESIGN.md §7):

- differentiable ops with PyTorch's names and signatures, whose backward runs canna's backward
  kernels (:mod:`kernels.backward`): :func:`add`, :func:`sub`, :func:`mul`, :func:`div`,
  :func:`matmul`, :func:`sum`, :func:`mean`, :func:`relu`, :func:`sigmoid`, :func:`tanh`,
  :func:`log`, :func:`exp`, :func:`softmax`, :func:`log_softmax` here, the NN ops in :mod:`canna_dl.torch.nn.functional`
  (linear, conv2d, max_pool2d, relu, gelu, silu, sigmoid, tanh, softmax, log_softmax,
  layer_norm, rms_norm, cross_entropy, nll_loss) and modules in :mod:`canna_dl.torch.nn`
  (``Linear``, ``Conv2d``, ...: subclasses of PyTorch's);
- each op is also a ``torch.library.custom_op`` (``torch.ops.canna.add``, ...) with a fake
  implementation and registered autograd, the path ``torch.compile(fullgraph=True)`` takes; in
  eager mode a plain ``torch.autograd.Function`` is used instead (the custom-op dispatch costs
  several µs per call: pytorch#139500, #176592, #177109);
- :func:`offload` runs an unchanged model's supported ``torch`` / ``Tensor`` /
  ``torch.nn.functional`` calls on canna and the rest on PyTorch, with a report.
"""
from . import _library  # noqa: F401  (registers the torch.ops.canna custom ops)
from . import nn
from ._exchange import from_torch, to_torch
from ._offload import OFFLOAD_OPS, Offload, OffloadReport, OpStats, offload
from ._public import exp, log, log_softmax, matmul, mean, relu, relu_, sigmoid, softmax, sum, tanh

#: the ``torch.ops.canna`` namespace (the custom ops; see :mod:`canna_dl.torch._library`)
import torch as _torch
ops = _torch.ops.canna
del _torch

__all__ = ["to_torch", "from_torch", "matmul", "sum", "mean", "relu", "relu_", "sigmoid",
           "tanh", "log", "exp", "softmax", "log_softmax", "nn", "offload", "Offload", "OffloadReport", "OpStats", "OFFLOAD_OPS",
           "ops"]


def _export_registered():
    from kernels import _registry
    _registry.export_generated(globals(), __all__, "torch")


_export_registered()
