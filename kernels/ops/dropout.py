"""Dropout (issue 14) as aclnn splits it — torch_npu's mapping of ``F.dropout``:
``aclnnDropoutGenMaskV2`` draws a bit mask from a seed and an offset, ``aclnnDropoutDoMask``
applies it (``x / (1 - p)`` where kept, 0 elsewhere); the gradient is DoMask again, on the
gradient with the same mask (``kernels/_sim/op_dropout.c``).

The mask comes from a counter-based generator (Philox4x32-10 in the simulator, keyed by the seed,
counted from the offset), as aclnn's is: PyTorch's random stream cannot be reproduced, so a
dropout on canna drops other elements than PyTorch's with the same seed — with the same keep
rate ``1 - p`` and scaling ``1 / (1 - p)``. ``seed=None`` draws the seed from the random
generator of the inputs' framework (``kernels._registry.draw_seed``: ``torch.manual_seed`` makes a
PyTorch run reproducible). ``p=0`` and eval mode (``training=False``) are identities in
``offload()`` (no kernel, as PyTorch returns the input itself).
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, TorchFn, define

F = C.FLOATS


def mask_bytes(numel: int) -> int:
    """Bytes of the dropout bit mask of ``numel`` elements: ``align(numel, 128) / 8`` (the aclnn
    pages of both ops)."""
    return (numel + 127) // 128 * 16


def _check_p(api, p):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{api}: dropout probability has to be between 0 and 1, but got {p}")


def _mask_shape(x, p, seed=None, offset=0, **attrs):
    _check_p("kernels.dropout_gen_mask", p)
    return Spec((mask_bytes(Spec(x.shape, x.dtype).size),), "uint8")


def _do_shape(x, mask, p, **attrs):
    _check_p("kernels.dropout_do_mask", p)
    n = Spec(x.shape, x.dtype).size
    if tuple(mask.shape) != (mask_bytes(n),):
        raise ValueError(f"kernels.dropout_do_mask: mask has shape {tuple(mask.shape)}, but the mask of {n} elements "
                         f"has shape ({mask_bytes(n)},) (align(numel, 128) / 8 bytes)")
    return Spec(x.shape, x.dtype)


def _dropout_shape(x, p, seed=None, offset=0, **attrs):
    _check_p("kernels.dropout", p)
    return Spec(x.shape, x.dtype), _mask_shape(x, p)


def _gen_params(lib, keep, p, seed, offset):
    # probDataType: the precision the probability is compared in; the simulator compares in double
    return (float(p), int(seed), int(offset), C.F32.acl)


def _dropout(ops, x, p, seed, offset):
    mask = ops.dropout_gen_mask(x, p, seed, offset)
    return ops.dropout_do_mask(x, mask, p), mask


_SEED = (Attr("seed", int, None), Attr("offset", int, 0))

define("dropout_gen_mask", inputs=(Tensor("x", F, diff=False),), attrs=(Attr("p", float),) + _SEED,
       outputs=("mask",), shape=_mask_shape, seed="seed",
       forward=Aclnn("DropoutGenMaskV2", params=_gen_params, shape_of=("x",)),
       doc="The dropout bit mask for an array shaped like ``x`` (only its shape and device are used): uint8, "
           "``align(x.size, 128) / 8`` bytes, bit ``i % 8`` of byte ``i / 8`` set when element ``i`` (row-major) "
           "is kept, with probability ``1 - p`` (``aclnnDropoutGenMaskV2``). ``seed`` (None: drawn from the "
           "inputs' framework) and ``offset`` key the counter-based generator: the same ones give the same mask.\n\n"
           "Raises:\n    ValueError: p outside [0, 1].")
define("dropout_do_mask", inputs=(Tensor("x", F), Tensor("mask", ("uint8",), diff=False)), attrs=(Attr("p", float),),
       shape=_do_shape, forward=Aclnn("DropoutDoMask", params=lambda lib, keep, p: (float(p),)), elementwise=True,
       save=("mask",), backward=lambda ops, g, mask, p: (ops.dropout_do_mask(g, mask, p),),
       doc="``x / (1 - p)`` where ``mask`` keeps the element, else 0 (all 0 for ``p=1``; "
           "``aclnnDropoutDoMask``): ``mask`` is :func:`kernels.dropout_gen_mask`'s. Its gradient is the same op on "
           "the gradient.\n\nRaises:\n    ValueError: p outside [0, 1], a mask of another size.")
define("dropout", inputs=(Tensor("x", F),), attrs=(Attr("p", float, 0.5),) + _SEED, outputs=("out", "mask"),
       diff_outputs=("out",), shape=_dropout_shape, forward=_dropout, seed="seed", save=("mask",),
       backward=lambda ops, g, _gmask, mask, p, seed, offset: ops.dropout_do_mask(g, mask, p),
       torch=(TorchFn("torch.nn.functional.dropout", ("input", ("p", 0.5), ("training", True), ("inplace", False)),
                      fixed={"inplace": False}, output=0,
                      identity=lambda input, p, training, inplace: not training or p == 0),
              TorchFn("torch.dropout", ("input", "p", "train"), output=0,
                      identity=lambda input, p, train: not train or p == 0)),
       doc="Dropout in training mode (``torch.nn.functional.dropout``): ``(out, mask)`` — ``out`` is ``x`` with "
           "each element zeroed with probability ``p`` and the others scaled by ``1 / (1 - p)``; ``mask`` the bit "
           "mask the backward reuses (:func:`kernels.dropout_gen_mask`, :func:`kernels.dropout_do_mask`). canna's "
           "generator is not PyTorch's: other elements are dropped than PyTorch would with the same seed. "
           "``seed=None`` draws the seed from the inputs' framework (``torch.manual_seed`` makes it reproducible).\n\n"
           "Raises:\n    ValueError: p outside [0, 1].")
