"""Concatenation and constant padding: one registry entry each (kernels/_registry.py).

- ``pad``: ``torch.nn.functional.pad`` in constant mode (``aclnnConstantPadNd``): ``pad`` holds
  (left, right) pairs from the last dim backwards; a negative value crops. Its gradient is the
  gradient cropped back: ``pad`` again with the negated pads (PyTorch's derivatives.yaml does the
  same, ``constant_pad_nd_backward``).
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, define

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
