"""Backward kernels of canna's built-in ops, named after the forward op they differentiate.

Each takes the gradient of the forward's output first, then what the forward saved (the input
``x``, or the output ``y`` where the gradient is cheapest from it, as in PyTorch's derivatives),
and returns the gradient(s) of the inputs, of the caller's kind (see :func:`kernels.result_kind`)::

    y = kernels.sigmoid(x);            gx = kernels.backward.sigmoid(gy, y)
    y, mean, rstd = kernels.native_layer_norm(x, (d,), w, b)
    gx, gw, gb = kernels.backward.layer_norm(gy, x, (d,), mean, rstd, w, b)
    y, idx = kernels.max_pool2d_with_indices(x, 2);   gx = kernels.backward.max_pool2d(gy, x, idx, 2)
    loss, logp = kernels.native_cross_entropy(logits, target)
    glogits = kernels.backward.cross_entropy(gloss, logp, target)

Elementwise activations: ``relu(g, x)``, ``gelu(g, x, approximate)``, ``silu(g, x)``,
``sigmoid(g, y)``, ``tanh(g, y)``; ``softmax(g, y, dim)``, ``log_softmax(g, y, dim)``;
normalization: ``layer_norm``, ``rms_norm``; ``conv2d`` (input / weight / bias gradients),
``max_pool2d``, ``nll_loss``, ``cross_entropy``; products and reductions, made of forward ops:
``matmul``, ``linear``, ``sum``, ``mean``.
"""
from __future__ import annotations

from ._nn import cross_entropy_backward as cross_entropy
from ._nn import layer_norm_backward as layer_norm
from ._nn import nll_loss_backward as nll_loss
from ._nn import rms_norm_backward as rms_norm
from . import ops as _ops  # noqa: F401 (registers the entries below)
from ._registry import get_op as _get

# registry entries (kernels/ops/*.py)
relu, gelu, silu, sigmoid, tanh, softmax, log_softmax, matmul, linear, max_pool2d, conv2d = (
    _get(f"{n}_backward").kernel for n in ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax",
                                           "matmul", "linear", "max_pool2d", "conv2d"))
from ._composite import mean_backward as mean
from ._composite import sum_backward as sum  # noqa: A004

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "rms_norm", "conv2d",
           "max_pool2d", "nll_loss", "cross_entropy", "matmul", "linear", "sum", "mean"]

# every other registry entry whose api is kernels.backward.<name> (kernels/ops/*.py)
for _op in __import__("kernels._registry", fromlist=["registered_ops"]).registered_ops("canna"):
    _n = _op.api.rpartition(".")[2]
    if _op.api.startswith("kernels.backward.") and _n not in globals():
        globals()[_n] = _op.kernel
        __all__.append(_n)
