"""Backward kernels made of forward ops: matmul, linear, sum, mean (PyTorch's derivative formulas,
``tools/autograd/derivatives.yaml``: ``grad @ b.mT`` / ``a.mT @ grad`` reduced to the operands'
shapes, the bias gradient a sum, a reduction's gradient the broadcast gradient)."""
from __future__ import annotations

import math

from . import _core as C
from ._elementwise import astype, contiguous
from ._nn import matmul
from ._reduce import sum as _sum
from ._reduce import sum_to_size

__all__ = ["matmul_backward", "linear_backward", "sum_backward", "mean_backward"]


def _convert(kind, arr):
    if arr is None or kind == C.CANNA:
        return arr
    return C._CONVERT[kind](arr)


def matmul_backward(grad_out, a, b, output_mask=(True, True), *, stream=None):
    """Gradients of :func:`kernels.matmul`: ``(grad_a, grad_b)`` of ``a``'s and ``b``'s shapes
    (broadcast batch dims summed, 1-D operands handled as torch.matmul does); an entry is None
    where ``output_mask`` is False."""
    api = "kernels.backward.matmul"
    kind = C.result_kind(grad_out, a, b)
    g = C.as_array(api, "grad_out", grad_out)
    x = C.as_array(api, "a", a)
    y = C.as_array(api, "b", b)
    shape = _check(api, g, x, y)
    av, bv = x.ndim == 1, y.ndim == 1
    A = x[None, :] if av else x
    B = y[:, None] if bv else y
    G = g
    if av and bv:
        G = g.reshape((1, 1))
    elif av:
        G = g.expand_dims(g.ndim - 1)
    elif bv:
        G = g.expand_dims(g.ndim)
    ga = gb = None
    if output_mask[0]:
        r = matmul(G, B.mT, stream=stream)
        r = C.as_array(api, "r", sum_to_size(r, A.shape, stream=stream))
        ga = r.reshape(x.shape)
    if output_mask[1]:
        r = matmul(A.mT, G, stream=stream)
        r = C.as_array(api, "r", sum_to_size(r, B.shape, stream=stream))
        gb = r.reshape(y.shape)
    del shape
    return _convert(kind, ga), _convert(kind, gb)


def _check(api, g, x, y):
    from ._nn import matmul_shape
    shape = matmul_shape(api, x.shape, y.shape)
    if g.shape != shape:
        raise ValueError(f"{api}: grad_out has shape {g.shape}, expected the product's shape {shape}")
    return shape


def linear_backward(grad_out, x, weight, output_mask=(True, True, True), *, stream=None):
    """Gradients of :func:`kernels.linear`: ``(grad_x, grad_weight, grad_bias)`` —
    ``grad_out @ weight``, ``grad_out.T @ x`` over the flattened leading dims, and ``grad_out``
    summed over them; None where ``output_mask`` is False."""
    api = "kernels.backward.linear"
    kind = C.result_kind(grad_out, x, weight)
    g = C.as_array(api, "grad_out", grad_out)
    a = C.as_array(api, "x", x)
    w = C.as_array(api, "weight", weight)
    if w.ndim != 2 or a.ndim < 1 or a.shape[-1] != w.shape[1] or g.shape != tuple(a.shape[:-1]) + (w.shape[0],):
        raise ValueError(f"{api}: grad_out {g.shape}, x {a.shape} and weight {w.shape} do not match a linear layer")
    nout, nin = w.shape
    rows = math.prod(a.shape[:-1])
    gx = gw = gb = None
    if output_mask[0]:
        gx = matmul(g, w, stream=stream)
    if output_mask[1]:
        g2 = g.reshape((rows, nout))
        a2 = a.reshape((rows, nin))
        gw = matmul(g2.mT, a2, stream=stream)
    if output_mask[2]:
        gb = _sum(g, tuple(range(g.ndim - 1)), stream=stream) if g.ndim > 1 else astype(g, g.dtype, stream=stream)
    return _convert(kind, gx), _convert(kind, gw), _convert(kind, gb)


def _expand(api, g, input_shape, dim, keepdim):
    input_shape = tuple(input_shape)
    dims = C.dims_arg(api, dim if not (dim is not None and not hasattr(dim, "__index__") and len(tuple(dim)) == 0)
                      else None, len(input_shape))
    keep_shape = tuple(1 if d in dims else n for d, n in enumerate(input_shape))
    expect = keep_shape if keepdim else tuple(n for d, n in enumerate(input_shape) if d not in dims)
    if g.shape != expect:
        raise ValueError(f"{api}: grad_out has shape {g.shape}, expected {expect} for a reduction of {input_shape} over "
                         f"dims {dims} (keepdim={keepdim})")
    return g.reshape(keep_shape), dims, input_shape


def _broadcast_new(g, shape, fresh, stream):
    """``g`` broadcast to ``shape`` as a new writable C-contiguous array. When no copy was needed
    (nothing broadcast, or zero-size) the result would view ``g`` (read-only, being a broadcast):
    ``g`` itself, reshaped, if it is ``fresh`` (made for this call), else a copy."""
    r = contiguous(g.broadcast_to(shape), stream=stream)
    if r is g or r.readonly:
        r = g.reshape(shape) if fresh and g.size == math.prod(shape) else astype(r, r.dtype, stream=stream)
    return r


def sum_backward(grad_out, input_shape, dim=None, keepdim=False, *, stream=None):
    """Gradient of :func:`kernels.sum`: ``grad_out`` broadcast back to ``input_shape`` (a new
    C-contiguous array)."""
    api = "kernels.backward.sum"
    kind = C.result_kind(grad_out)
    g = C.as_array(api, "grad_out", grad_out)
    gk, _, shape = _expand(api, g, input_shape, dim, keepdim)
    return _convert(kind, _broadcast_new(gk, shape, False, stream))


def mean_backward(grad_out, input_shape, dim=None, keepdim=False, *, stream=None):
    """Gradient of :func:`kernels.mean`: ``grad_out / n`` broadcast back to ``input_shape``."""
    api = "kernels.backward.mean"
    kind = C.result_kind(grad_out)
    g = C.as_array(api, "grad_out", grad_out)
    gk, dims, shape = _expand(api, g, input_shape, dim, keepdim)
    n = math.prod(shape[d] for d in dims)
    from ._registry import get_op   # kernels.mul (generated from its registry entry)
    scaled = get_op("mul").kernel(gk, 1.0 / n if n else float("nan"), stream=stream)
    return _convert(kind, _broadcast_new(C.as_array(api, "g", scaled), shape, True, stream))
