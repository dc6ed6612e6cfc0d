"""``addmm`` (issue 14): ``beta * x + alpha * (mat1 @ mat2)`` — ``torch.addmm``, what Hugging Face's
GPT-2 ``Conv1D`` calls — as one ``aclnnAddmm`` (``cubeMathType`` 0, KEEP_DTYPE: no reduced-precision
shortcut). Its gradient (PyTorch's ``tools/autograd/derivatives.yaml``) through registered ops:
``beta * g`` summed to ``x``'s shape, ``alpha * g @ mat2ᵀ``, ``alpha * mat1ᵀ @ g``.
"""
from __future__ import annotations

import sys

from .. import _core as C
from .. import _nn as N
from .._registry import Aclnn, Attr, Spec, Tensor, define

F = C.FLOATS


def _addmm_shape(x, mat1, mat2, beta=1.0, alpha=1.0, **attrs):
    api = "kernels.addmm"
    if len(mat1.shape) != 2 or len(mat2.shape) != 2:
        raise ValueError(f"{api}: mat1 and mat2 must be 2-D, got shapes {tuple(mat1.shape)} and {tuple(mat2.shape)}")
    if mat1.shape[1] != mat2.shape[0]:
        raise ValueError(f"{api}: mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                         f"{mat2.shape[0]}x{mat2.shape[1]})")
    out = (mat1.shape[0], mat2.shape[1])
    if C.broadcast_shapes(api, tuple(x.shape), out) != out:
        raise ValueError(f"{api}: x of shape {tuple(x.shape)} does not broadcast to the product's shape {out}")
    if not (x.dtype == mat1.dtype == mat2.dtype):
        raise TypeError(f"{api}: x, mat1 and mat2 must have one dtype, got {x.dtype.name}, {mat1.dtype.name} and "
                        f"{mat2.dtype.name}")
    return Spec(out, mat1.dtype)


def _scalars(lib, keep, beta, alpha):
    b, a = C.Param.scalar(lib, float(beta)), C.Param.scalar(lib, float(alpha))
    keep += [b, a]
    return (b, a)


def _mT(a):
    """The transpose of a 2-D array of any framework the backward runs on."""
    if type(a).__module__.startswith("tensorflow"):
        return sys.modules["tensorflow"].transpose(a)
    return a.mT if hasattr(a, "mT") else a.T


def _addmm_backward(ops, g, x, mat1, mat2, beta, alpha):
    gx = ops.sum_to_size(ops.mul(g, beta), tuple(x.shape)) if tuple(x.shape) != tuple(g.shape) else ops.mul(g, beta)
    g1 = ops.mul(ops.matmul(g, _mT(mat2)), alpha)
    g2 = ops.mul(ops.matmul(_mT(mat1), g), alpha)
    return gx, g1, g2


define("addmm", inputs=(Tensor("x", F), Tensor("mat1", F), Tensor("mat2", F)),
       attrs=(Attr("beta", float, 1.0), Attr("alpha", float, 1.0)), shape=_addmm_shape,
       forward=Aclnn("Addmm", params=_scalars, tail=lambda lib, keep, beta, alpha: (N._CUBE_KEEP_DTYPE,)),
       save=("x", "mat1", "mat2"), backward=_addmm_backward,
       torch=("torch.addmm", "torch.Tensor.addmm"),
       aten=(("aten::addmm", "self:x, mat1, mat2, beta, alpha"),),
       doc="``beta * x + alpha * (mat1 @ mat2)`` (``torch.addmm``; ``aclnnAddmm``): ``mat1`` ``(m, k)``, ``mat2`` "
           "``(k, n)``, ``x`` broadcast to ``(m, n)``; with ``beta=0`` ``x`` is ignored (NaN too), as PyTorch. "
           "Floating dtypes, one dtype for the three.\n\nRaises:\n    ValueError: shapes that do not multiply or "
           "broadcast. TypeError: mixed dtypes.")
