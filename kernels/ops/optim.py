"""Optimizer steps: their registry entries (kernels/_registry.py; docs/DESIGN.md §11).

One fused kernel updates one parameter and its optimizer state in place — ``apply_adamw``
(``aclnnApplyAdamWV2``: AdamW, and Adam without weight decay) and ``fused_sgd`` (``aclnnFusedSgd``:
SGD with momentum, dampening, Nesterov, weight decay) —, written in ``kernels/_optim.py``. They have
no outputs: the parameter and its state are updated in place (``mutated=True``), and no gradient (an optimizer step
is not differentiated). ``offload()`` maps PyTorch's optimizer paths to them: the fused functions
``torch._fused_adamw_`` / ``torch._fused_adam_`` / ``torch._fused_sgd_`` (one canna call per
parameter of the group), which ``offload()`` also makes the default optimizers take
(``canna_dl/torch/_offload.py``).
"""
from __future__ import annotations

from .. import _core as C
from .. import _optim as O
from .._registry import Attr, Impl, Tensor, define

F = C.FLOATS


def _none(*a, **k):
    return ()


define("apply_adamw",
       inputs=(Tensor("param", F, mutated=True), Tensor("exp_avg", F, mutated=True),
               Tensor("exp_avg_sq", F, mutated=True), Tensor("max_exp_avg_sq", F, optional=True, mutated=True),
               Tensor("grad", F, diff=False),
               Tensor("step", (C.INT64, C.F32), diff=False)),
       attrs=(Attr("lr", float, 1e-3), Attr("beta1", float, 0.9), Attr("beta2", float, 0.999),
              Attr("weight_decay", float, 1e-2), Attr("eps", float, 1e-8), Attr("amsgrad", bool, False),
              Attr("maximize", bool, False)),
       outputs=(), shape=_none, forward=Impl(O.apply_adamw), generate=False,
       doc=O.apply_adamw.__doc__)
define("fused_sgd",
       inputs=(Tensor("param", F, mutated=True), Tensor("grad", F, diff=False),
               Tensor("momentum_buffer", F, optional=True, mutated=True)),
       attrs=(Attr("weight_decay", float, 0.0), Attr("momentum", float, 0.0), Attr("lr", float, 1e-3),
              Attr("dampening", float, 0.0), Attr("nesterov", bool, False), Attr("maximize", bool, False),
              Attr("is_first_step", bool, False)),
       outputs=(), shape=_none, forward=Impl(O.fused_sgd), generate=False,
       doc=O.fused_sgd.__doc__)
