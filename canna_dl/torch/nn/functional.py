"""``torch.nn.functional``-style ops on canna's kernels, differentiable through canna's backward
kernels (see :mod:`canna_dl.torch`). Names, argument names and defaults are PyTorch's; the
arguments PyTorch deprecated (``size_average``, ``reduce``, ``_stacklevel``) are not taken.

All of them take floating tensors (float16, bfloat16, float32, float64) of one dtype on one device
(class-index targets: int64 / int32), and raise TypeError for other dtypes (integer inputs
included), ValueError for shapes that do not fit (the messages name the argument), and ValueError
for tensors on different devices.
"""
from __future__ import annotations

from .. import _functions as _F
from .._common import NoTorchFunction as _NoTF
from .._public import relu_, sigmoid, tanh  # noqa: F401 (the same functions as in torch.nn.functional)

__all__ = ["linear", "conv2d", "max_pool2d", "max_pool2d_with_indices", "relu", "relu_", "gelu", "silu", "sigmoid",
           "tanh", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "nll_loss"]


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``F.linear``). input ``[*, in]``, weight ``[out, in]``, bias
    ``[out]`` or None → ``[*, out]``."""
    with _NoTF():
        return _F._linear(input, weight, bias)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (``F.conv2d``). input ``[N, C, H, W]`` or ``[C, H, W]``, weight
    ``[O, C / groups, kH, kW]``, bias ``[O]`` or None; ``padding`` an int, a pair, ``"valid"`` or
    ``"same"`` (symmetric only)."""
    with _NoTF():
        return _F._conv2d(input, weight, bias, stride, padding, dilation, groups)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling (``F.max_pool2d``) of ``[N, C, H, W]`` or ``[C, H, W]``; ``stride`` defaults
    to ``kernel_size``, ``padding`` is at most half the kernel. With ``return_indices``:
    ``(out, indices)`` (int64, flat within each plane, not differentiable)."""
    with _NoTF():
        return _F._max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """:func:`max_pool2d` returning ``(out, indices)`` (``F.max_pool2d_with_indices``)."""
    with _NoTF():
        return _F._max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def relu(input, inplace=False):
    """``max(input, 0)`` (``F.relu``); ``inplace=True`` writes ``input`` (see :func:`relu_`)."""
    with _NoTF():
        return _F._relu_(input) if inplace else _F._relu(input)


def gelu(input, approximate="none"):
    """GELU (``F.gelu``): ``approximate="none"`` (erf) or ``"tanh"``."""
    with _NoTF():
        return _F._gelu(input, approximate)


def silu(input):
    """``input * sigmoid(input)`` (``F.silu``)."""
    with _NoTF():
        return _F._silu(input)


def softmax(input, dim, dtype=None):
    """Softmax along ``dim`` (``F.softmax``; ``dim`` is required here: PyTorch's implicit choice is
    deprecated)."""
    with _NoTF():
        return _F._softmax(input, dim, dtype)


def log_softmax(input, dim, dtype=None):
    """Log-softmax along ``dim`` (``F.log_softmax``)."""
    with _NoTF():
        return _F._log_softmax(input, dim, dtype)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalization over the trailing ``normalized_shape`` dims (``F.layer_norm``)."""
    with _NoTF():
        return _F._layer_norm(input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """RMS normalization over the trailing ``normalized_shape`` dims (``F.rms_norm``; ``eps=None`` is
    ``torch.finfo(input.dtype).eps``)."""
    with _NoTF():
        return _F._rms_norm(input, normalized_shape, weight, eps)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross entropy of logits ``[N, C]`` (or ``[C]``, ``[N, C, d1, ...]``) and class indices
    (``F.cross_entropy``). Class-probability (floating) targets are not supported
    (NotImplementedError); gradients flow to ``input`` only (``weight`` must not require grad)."""
    with _NoTF():
        return _F._cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of log-probabilities and class indices (``F.nll_loss``)."""
    with _NoTF():
        return _F._nll_loss(input, target, weight, ignore_index, reduction)
