"""Copies and dtype conversions models call (issue 14): ``clone`` — ``torch.clone``, and
``Tensor.contiguous`` of a non-contiguous tensor: one ``aclnnInplaceCopy`` into a C-contiguous
array — and ``cast`` — ``Tensor.to(dtype)``, ``.float()``, ``.half()``, ``.long()``, ... — one ``aclnnCast``. Their launch
code is :func:`kernels.clone` / :func:`kernels.astype` (``kernels/_elementwise.py``); the
entries state their inputs, shape rules, gradients and torch functions. ``contiguous`` of a
contiguous tensor and a ``to`` / ``.float()`` to the tensor's own dtype and device return the
tensor itself: ``offload()`` does not count them as compute (``canna_dl/torch/_offload.py``).

Gradients (PyTorch's ``tools/autograd/derivatives.yaml``): ``clone`` passes the gradient
through, ``cast`` casts it back to the input's dtype (``_to_copy``'s rule); a cast to an integer
or bool dtype has no gradient.
"""
from __future__ import annotations

from .. import _elementwise as E
from .._registry import DTYPE, Attr, Impl, Spec, Tensor, TorchFn, define, same

CAST_DTYPES = E._CAST_DTYPES


class _TorchConstant:
    """A torch value an ``offload()`` call must have, named without importing torch (kernels
    imports no framework): equal to the objects whose repr is one of ``names``
    (``torch.contiguous_format``) or whose ``type`` attribute is ``device_type`` (a host device:
    the tensors canna takes in ``offload()`` are host tensors). The torch value is compared first
    and defers to this one."""

    __slots__ = ("name", "names", "device_type")

    def __init__(self, name, *names, device_type=None):
        self.name, self.names, self.device_type = name, (name,) + names, device_type

    def __eq__(self, other):
        if other is self or repr(other) in self.names:
            return True
        if self.device_type is None:
            return False
        if isinstance(other, str):
            return other.split(":")[0] == self.device_type
        return getattr(other, "type", None) == self.device_type and type(other).__name__ == "device"

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name


_CONTIGUOUS_FORMAT = _TorchConstant("torch.contiguous_format")
_HOST = _TorchConstant("None", device_type="cpu")   # to(device=None or the host, dtype=...)


def _is_torch_dtype(x, dtype):
    """offload()'s guard of ``Tensor.to(...)``: canna takes ``to(dtype)`` only (a device, a tensor or
    a memory format fall back to PyTorch)."""
    t = type(dtype)
    if t.__module__ == "torch" and t.__name__ == "dtype":
        return None
    return f"to({type(dtype).__name__}) (canna maps to(dtype) only)"


def _clone_guard(x):
    """offload()'s guard of ``torch.clone`` (``memory_format=torch.preserve_format``): PyTorch's clone
    keeps the strides of a dense, non-overlapping input and is contiguous otherwise (``empty_like``'s
    rule, asked of PyTorch itself); a clone PyTorch would not make contiguous falls back."""
    if x.is_contiguous():
        return None
    import sys
    like = sys.modules["torch"].empty_like(x)   # (allocated, not filled)
    return None if like.is_contiguous() else "clone keeps this non-contiguous layout (preserve_format)"


_CLONE_FORMATS = _TorchConstant("torch.preserve_format", "torch.contiguous_format", "None")
define("clone", inputs=(Tensor("x", CAST_DTYPES),), shape=same, forward=Impl(E.clone),
       backward=lambda ops, g: g,
       # Tensor.contiguous reaches offload() only for a non-contiguous tensor (see the module doc)
       torch=(("torch.Tensor.contiguous", {"memory_format": _CONTIGUOUS_FORMAT}),
              ("torch.clone", "input, memory_format=None", {"memory_format": _CLONE_FORMATS}, _clone_guard),
              ("torch.Tensor.clone", "input, memory_format=None", {"memory_format": _CLONE_FORMATS}, _clone_guard)),
       doc=E.clone.__doc__)

_TO = "input, dtype, non_blocking=False, copy=False, device=None"
_SHORT = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "long": "int64",
          "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}
define("cast", inputs=(Tensor("x", CAST_DTYPES),), attrs=(Attr("dtype", DTYPE),),
       shape=lambda x, dtype: Spec(x.shape, dtype), forward=Impl(E.astype), save=("x",),
       backward=lambda ops, g, x, dtype: ops.cast(g, x.dtype),
       torch=(("torch.Tensor.to", _TO, {"non_blocking": False, "copy": False, "device": _HOST},
               _is_torch_dtype),)
       + tuple(TorchFn(f"torch.Tensor.{m}", ("input", ("memory_format", None), ("dtype", dt)),
                       fixed={"memory_format": None}) for m, dt in _SHORT.items()),
       doc=E.astype.__doc__)

