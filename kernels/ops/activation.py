"""Activations and unary math of real models (issue 14): ``hardswish`` / ``hardsigmoid``
(MobileNetV3), ``rsqrt`` (RMS norms written out), ``sin`` / ``cos`` (rotary embeddings). One aclnn
call each (``kernels/_sim/op_activation.c``); their gradients (PyTorch's
``tools/autograd/derivatives.yaml``): hardswish and hardsigmoid from the input through their aclnn
backward kernels, rsqrt from the output (``-g y³ / 2``), sin and cos from the input
(``g cos x``, ``-g sin x``: differentiable again).
"""
from __future__ import annotations

from .. import _core as C
from .elementwise import _SEE, _grad_op, _unary
from .._registry import same

F = C.FLOATS

_unary("hardswish", "Hardswish", dtypes=F, shape=same, save=("x",),
       backward=lambda ops, g, x: ops.hardswish_backward(g, x),
       torch=(("torch.nn.functional.hardswish", {"inplace": False}),),
       doc=f"``x * min(max(x + 3, 0), 6) / 6`` (``torch.nn.functional.hardswish``; ``aclnnHardswish``). Floating "
           f"dtypes. {_SEE}")
_grad_op("hardswish_backward", "HardswishBackward", "hardswish",
         doc="Gradient of :func:`kernels.hardswish` at ``x``: ``grad_out * (0 if x <= -3, x / 3 + 1/2 if x < 3, "
             "else 1)``, PyTorch's values at the kinks (``aclnnHardswishBackward``). Floating dtypes.")
_unary("hardsigmoid", "Hardsigmoid", dtypes=F, shape=same, save=("x",),
       backward=lambda ops, g, x: ops.hardsigmoid_backward(g, x),
       torch=(("torch.nn.functional.hardsigmoid", {"inplace": False}),),
       doc=f"``min(max(x / 6 + 1/2, 0), 1)`` (``torch.nn.functional.hardsigmoid``; ``aclnnHardsigmoid``). "
           f"Floating dtypes. {_SEE}")
_grad_op("hardsigmoid_backward", "HardsigmoidBackward", "hardsigmoid",
         doc="Gradient of :func:`kernels.hardsigmoid` at ``x``: ``grad_out / 6`` where ``-3 < x < 3``, else 0 "
             "(``aclnnHardsigmoidBackward``). Floating dtypes.")
_unary("rsqrt", "Rsqrt", dtypes=F, shape=same, save=("out",),
       backward=lambda ops, g, y: ops.mul(ops.mul(g, -0.5), ops.mul(ops.mul(y, y), y)),
       torch=("torch.rsqrt", "torch.Tensor.rsqrt"),
       doc=f"``1 / sqrt(x)`` (``torch.rsqrt``; ``aclnnRsqrt``): NaN below 0, inf at 0. Floating dtypes. {_SEE}")
_unary("reciprocal", "Reciprocal", dtypes=F, shape=same, save=("out",),
       backward=lambda ops, g, y: ops.neg(ops.mul(g, ops.mul(y, y))),
       torch=("torch.reciprocal", "torch.Tensor.reciprocal"),
       doc=f"``1 / x`` (``torch.reciprocal``; ``aclnnReciprocal``): inf at 0 (signed), its gradient ``-g y²`` from "
           f"the output. Floating dtypes. {_SEE}")
_unary("sin", "Sin", dtypes=F, shape=same, save=("x",), backward=lambda ops, g, x: ops.mul(g, ops.cos(x)),
       torch=("torch.sin", "torch.Tensor.sin"),
       doc=f"Sine, radians (``torch.sin``; ``aclnnSin``). Floating dtypes. {_SEE}")
_unary("cos", "Cos", dtypes=F, shape=same, save=("x",), backward=lambda ops, g, x: ops.mul(g, ops.neg(ops.sin(x))),
       torch=("torch.cos", "torch.Tensor.cos"),
       doc=f"Cosine, radians (``torch.cos``; ``aclnnCos``). Floating dtypes. {_SEE}")
