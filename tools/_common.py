"""Pieces the scripts of ``tools/`` share (the demo and the benchmarks): the SimpleCNN model and the
output-path check of their command lines."""
from __future__ import annotations

import contextlib
import os

__all__ = ["simple_cnn", "unwritable"]


def simple_cnn(torch, classes: int = 10, size: int = 28):
    """SimpleCNN, the smallest convolutional classifier with each op class of a training step (a
    convolution, an activation, a pooling, a matrix product, a softmax), on ``1 x size x size``
    images (``size`` even): Conv2d 1->16 3x3 padding 1 -> ReLU -> MaxPool2d 2 -> Linear
    16*(size/2)**2 -> ``classes`` -> softmax over dim 1 (the output is probabilities: train it with
    ``nll_loss(log(p))``). Returns an initialized ``nn.Module`` (PyTorch's default init, so seed
    ``torch.manual_seed`` first for reproducible weights)."""
    nn, F = torch.nn, torch.nn.functional

    class SimpleCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 16, 3, padding=1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(16 * (size // 2) ** 2, classes)

        def forward(self, x):
            x = self.pool(self.relu(self.conv(x)))
            x = torch.flatten(x, 1)
            return F.softmax(self.fc(x), dim=1)

    return SimpleCNN()


def unwritable(path: str) -> str | None:
    """Why a file cannot be written at ``path`` (None when it can): tried by opening it for appending
    (a file that did not exist is removed again), so that a bad ``--json``/``--plot`` path is a usage
    error before any work rather than a traceback after it."""
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    if not existed:
        with contextlib.suppress(OSError):
            os.remove(path)
    return None
