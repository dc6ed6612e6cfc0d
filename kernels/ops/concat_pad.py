"""Concatenation and constant padding: one registry entry each (kernels/_registry.py).

- ``cat``: ``torch.cat`` (``aclnnCat``): the arrays have the same number of dims and equal sizes
  except along ``dim`` (a 1-D array of shape ``(0,)`` is skipped, PyTorch's legacy rule); the
  result has their promoted dtype. Its gradient is the gradient sliced back into the pieces,
  each slice a crop by ``pad`` with negative pads.

- ``pad``: ``torch.nn.functional.pad`` in constant mode (``aclnnConstantPadNd``): ``pad`` holds
  (left, right) pairs from the last dim backwards; a negative value crops. Its gradient is the
  gradient cropped back: ``pad`` again with the negated pads (PyTorch's derivatives.yaml does the
  same, ``constant_pad_nd_backward``).
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, TensorList, define

ARITH = C.ARITH


def pad_shape(input, pad, mode="constant", value=None):
    """The padded shape (``torch.nn.functional.pad``'s rule).

    Raises:
        ValueError: an odd number of pad values, more pairs than dims, a dim of negative size."""
    shape = list(input.shape)
    if len(pad) % 2:
        raise ValueError(f"kernels.pad: pad must have an even number of values ((left, right) pairs), got {len(pad)}")
    if len(pad) // 2 > len(shape):
        raise ValueError(f"kernels.pad: pad has {len(pad) // 2} (left, right) pairs but the input has only "
                         f"{len(shape)} dims")
    for k in range(len(pad) // 2):
        d = len(shape) - 1 - k
        n = shape[d] + pad[2 * k] + pad[2 * k + 1]
        if n < 0:
            raise ValueError(f"kernels.pad: dim {d} of size {shape[d]} with padding ({pad[2 * k]}, {pad[2 * k + 1]}) "
                             f"would have negative size {n}")
        shape[d] = n
    return Spec(shape, input.dtype)


def _pad_params(lib, keep, pad, mode, value):
    p = C.Param.ints(lib, pad)
    v = C.Param.scalar(lib, 0 if value is None else value)
    keep += [p, v]
    return (p, v)


def zeros_like(ops, x):
    """Zeros of ``x``'s shape and dtype from registered ops (for backward functions): ``x`` cropped
    to nothing along its last dim, then padded back with 0 — one ConstantPadNd fill, no read of
    ``x``'s values (so NaNs in ``x`` do not leak). ``x`` has at least one dim."""
    n = x.shape[-1]
    return ops.pad(ops.pad(x, (-n, 0)), (n, 0))


define("pad", inputs=(Tensor("input", ARITH),),
       attrs=(Attr("pad", list[int]), Attr("mode", str, "constant", choices=("constant",)),
              Attr("value", float, None)),
       shape=pad_shape, forward=Aclnn("ConstantPadNd", _pad_params),
       backward=lambda ops, g, pad, mode, value: ops.pad(g, tuple(-p for p in pad)),
       torch=("torch.nn.functional.pad",),
       doc="Constant padding (``torch.nn.functional.pad(input, pad, mode=\"constant\", value)``; "
           "``aclnnConstantPadNd``): ``pad`` = (left, right) pairs from the last dim backwards, negative values "
           "crop; ``value`` (default 0) fills the new elements. Other modes are not supported (``offload()`` leaves "
           "them to PyTorch). Dtypes: floats, int32, int64.\n\n"
           "Raises:\n    ValueError: an odd number of pad values, more pairs than dims, a negative size, another "
           "mode.")


def _legacy_empty(t, nd):
    return len(t.shape) == 1 and t.shape[0] == 0 and nd != 1


def cat_shape(tensors, dim=0):
    """``torch.cat``'s result.

    Raises:
        ValueError: an empty list, a 0-d array, mismatched ranks or sizes.
        IndexError: ``dim`` out of range."""
    ts = list(tensors)
    if not ts:
        raise ValueError("kernels.cat: expected a non-empty list of arrays")
    ref = next((t for t in ts if not (len(t.shape) == 1 and t.shape[0] == 0)), ts[0])
    nd = len(ref.shape)
    if nd == 0:
        raise ValueError("kernels.cat: zero-dimensional arrays cannot be concatenated")
    if not -nd <= dim < nd:
        raise IndexError(f"kernels.cat: dim {dim} is out of range for {nd}-D arrays (expected [{-nd}, {nd - 1}])")
    d = dim % nd
    shape = list(ref.shape)
    shape[d] = 0
    dt = ts[0].dtype
    for i, t in enumerate(ts):
        dt = C.promote_types(dt, t.dtype)
        if _legacy_empty(t, nd):
            continue
        if len(t.shape) != nd:
            raise ValueError(f"kernels.cat: tensors must have the same number of dims: tensors[{i}] has "
                             f"{len(t.shape)}, expected {nd}")
        for k in range(nd):
            if k != d and t.shape[k] != ref.shape[k]:
                raise ValueError(f"kernels.cat: sizes of tensors must match except in dimension {d}: tensors[{i}] "
                                 f"has shape {tuple(t.shape)}, expected {ref.shape[k]} in dim {k}")
        shape[d] += t.shape[d]
    return Spec(shape, dt)


def _cat_backward(ops, g, tensors, dim):
    """Each array's slice of the gradient, cropped out of it with ``pad`` (None for a skipped
    legacy empty array)."""
    nd = len(g.shape)
    d = dim % nd
    total, start, grads = g.shape[d], 0, []
    for t in tensors:
        if _legacy_empty(t, nd):
            grads.append(None)
            continue
        n = t.shape[d]
        grads.append(ops.pad(g, (0, 0) * (nd - 1 - d) + (-start, -(total - start - n))))
        start += n
    return (grads,)   # one gradient — a list — for the one (list) input


define("cat", inputs=(TensorList("tensors", ARITH),), attrs=(Attr("dim", int, 0),),
       shape=cat_shape, forward=Aclnn("Cat", lambda lib, keep, dim: (dim,)),
       backward=_cat_backward, save=("tensors",),
       torch=(("torch.cat", "tensors:input, dim=0"), ("torch.concat", "tensors:input, dim=0"),
              ("torch.concatenate", "tensors:input, axis:dim=0")),
       aten=(("aten::cat", "tensors, dim"),),
       doc="Concatenation along ``dim`` (``torch.cat`` / ``torch.concat``; ``aclnnCat``): ``tensors``, a list or "
           "tuple of arrays with the same number of dims and equal sizes except along ``dim`` (a 1-D array of "
           "shape ``(0,)`` is skipped, as in PyTorch); the result has their promoted dtype. Dtypes: floats, int32, "
           "int64.\n\n"
           "Raises:\n    ValueError: an empty list, 0-d arrays, mismatched ranks or sizes.\n    IndexError: ``dim`` out "
           "of range.")
