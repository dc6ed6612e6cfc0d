"""The tensor-level ops of ``canna_dl.torch`` (names and signatures of ``torch.*``), differentiable.

Every function takes and returns ``torch.Tensor`` objects and runs canna's kernel; gradients flow
through canna's backward kernels. In eager mode a call costs a plain ``torch.autograd.Function``
(or, when no gradient is needed, the kernel call alone); under ``torch.compile`` it is the
``torch.ops.canna.*`` custom op (see :mod:`canna_dl.torch._library`). The arithmetic (add, sub,
mul, div, pow) and the unary ops are generated from their registry entries
(``canna_dl/torch/_generated.py``, exported by the package).
"""
from __future__ import annotations

from . import _functions as _F
from ._common import NoTorchFunction as _NoTF

__all__ = ["matmul", "sum", "mean", "relu", "relu_", "sigmoid", "tanh", "log",
           "exp", "softmax", "log_softmax"]


def matmul(input, other):
    """Matrix product with ``torch.matmul``'s semantics (1-D operands, broadcast batch dims).

    Args:
        input, other: floating tensors of one dtype, at least 1-D.

    Raises:
        TypeError: integer or mixed dtypes. ValueError: shapes that cannot be multiplied.
    """
    with _NoTF():
        return _F._matmul(input, other)


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001 (torch.sum)
    """Sum over ``dim`` (an int, a sequence of ints, or None for all) (``torch.sum``).

    Result dtype: ``dtype`` if given, the input's for floats, int64 for integers. The gradient
    is the output gradient broadcast back to the input's shape (``kernels.backward.sum``).

    Raises:
        TypeError: an unsupported dtype. IndexError (``kernels.AxisError``): a dim out of range.
    """
    with _NoTF():
        return _F._sum(input, dim, keepdim, dtype)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim`` (``torch.mean``): floating inputs (or a floating ``dtype=``). See :func:`sum`."""
    with _NoTF():
        return _F._mean(input, dim, keepdim, dtype)


def relu(input):
    """``max(input, 0)`` (``torch.relu``); integer tensors stay integer (no gradient). Twice
    differentiable."""
    with _NoTF():
        return _F._relu(input)


def relu_(input):
    """In-place :func:`relu` (``torch.relu_``); returns ``input``. The input's version counter is
    bumped, as PyTorch's in-place ops do.

    Raises:
        RuntimeError (PyTorch's): ``input`` is a leaf that requires grad.
    """
    with _NoTF():
        return _F._relu_(input)


def sigmoid(input):
    """``1 / (1 + exp(-input))`` (``torch.sigmoid``); integer inputs give float32."""
    with _NoTF():
        return _F._sigmoid(input)


def tanh(input):
    """Hyperbolic tangent (``torch.tanh``); integer inputs give float32."""
    with _NoTF():
        return _F._tanh(input)


def log(input):
    """Natural logarithm, elementwise (``torch.log``; ``kernels.log``, ``aclnnLog``).

    Args:
        input: a floating tensor (float16, bfloat16, float32, float64) of any shape.

    Returns:
        A new tensor of ``input``'s shape and dtype: NaN where ``input < 0``, ``-inf`` where it is
        0 (IEEE 754, as ``torch.log``). The gradient is ``grad / input`` (PyTorch's
        ``derivatives.yaml``), computed on canna (``kernels.div``); it is differentiable once.

    Raises:
        TypeError: ``input`` is not a tensor, or has an integer / bool / complex dtype
            (``torch.log`` gives float32 for integers: convert with ``.float()`` first).
        RuntimeError (PyTorch's): a second differentiation of the gradient.
    """
    with _NoTF():
        return _F._log(input)


def exp(input):
    """``e ** input``, elementwise (``torch.exp``; ``kernels.exp``, ``aclnnExp``).

    Args:
        input: a floating tensor (float16, bfloat16, float32, float64) of any shape.

    Returns:
        A new tensor of ``input``'s shape and dtype (``inf`` on overflow). The gradient is
        ``grad * exp(input)`` from the saved output (PyTorch's ``derivatives.yaml``), computed on
        canna (``kernels.mul``); it is differentiable once.

    Raises:
        TypeError: ``input`` is not a tensor, or has an integer / bool / complex dtype.
        RuntimeError (PyTorch's): a second differentiation of the gradient.
    """
    with _NoTF():
        return _F._exp(input)


def softmax(input, dim, dtype=None):
    """Softmax along ``dim`` (``torch.softmax``) of a floating tensor, after casting to ``dtype``
    when given (the gradient is cast back to the input's dtype).

    Raises:
        TypeError: a non-floating input, a non-int dim. IndexError: dim out of range.
    """
    with _NoTF():
        return _F._softmax(input, dim, dtype)


def log_softmax(input, dim, dtype=None):
    """Log-softmax along ``dim`` (``torch.log_softmax``). See :func:`softmax`."""
    with _NoTF():
        return _F._log_softmax(input, dim, dtype)
