"""``torch.nn`` modules whose forward runs on canna (:mod:`canna_dl.torch.nn.functional`).

Each is a subclass of the PyTorch module of the same name: the same constructor, parameters,
initialization and ``state_dict`` keys, so it loads a checkpoint of the PyTorch model and can
replace it in place::

    import canna_dl.torch.nn as cnn
    model = torch.nn.Sequential(cnn.Conv2d(1, 16, 3, padding=1), cnn.ReLU(), cnn.MaxPool2d(2),
                                torch.nn.Flatten(), cnn.Linear(16 * 14 * 14, 10))

To run an unchanged model on canna instead, use :func:`canna_dl.torch.offload`.
"""
from __future__ import annotations

import torch

from . import functional
from . import functional as F

__all__ = ["functional", "Linear", "Conv2d", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
           "LayerNorm", "RMSNorm", "MaxPool2d", "CrossEntropyLoss", "NLLLoss"]

_nn = torch.nn


class Linear(_nn.Linear):
    """``torch.nn.Linear`` on canna (``F.linear``)."""

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)


class Conv2d(_nn.Conv2d):
    """``torch.nn.Conv2d`` on canna (``F.conv2d``); a ``padding_mode`` other than ``"zeros"`` pads
    with PyTorch's ``F.pad`` first."""

    def forward(self, input):
        if self.padding_mode != "zeros":
            x = _nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ReLU(_nn.ReLU):
    """``torch.nn.ReLU`` on canna (``inplace`` honoured)."""

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)


class GELU(_nn.GELU):
    """``torch.nn.GELU`` on canna."""

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)


class SiLU(_nn.SiLU):
    """``torch.nn.SiLU`` on canna (``inplace=True`` is computed out of place)."""

    def forward(self, input):
        return F.silu(input)


class Sigmoid(_nn.Sigmoid):
    """``torch.nn.Sigmoid`` on canna."""

    def forward(self, input):
        return F.sigmoid(input)


class Tanh(_nn.Tanh):
    """``torch.nn.Tanh`` on canna."""

    def forward(self, input):
        return F.tanh(input)


def _dim(module, input):
    if module.dim is not None:
        return module.dim
    return 0 if input.dim() in (0, 1, 3) else 1   # PyTorch's legacy implicit dim (F._get_softmax_dim)


class Softmax(_nn.Softmax):
    """``torch.nn.Softmax`` on canna."""

    def forward(self, input):
        return F.softmax(input, _dim(self, input))


class LogSoftmax(_nn.LogSoftmax):
    """``torch.nn.LogSoftmax`` on canna."""

    def forward(self, input):
        return F.log_softmax(input, _dim(self, input))


class LayerNorm(_nn.LayerNorm):
    """``torch.nn.LayerNorm`` on canna."""

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_nn.RMSNorm):
    """``torch.nn.RMSNorm`` on canna."""

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)


class MaxPool2d(_nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` on canna."""

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class CrossEntropyLoss(_nn.CrossEntropyLoss):
    """``torch.nn.CrossEntropyLoss`` on canna (class-index targets)."""

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_nn.NLLLoss):
    """``torch.nn.NLLLoss`` on canna."""

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)
