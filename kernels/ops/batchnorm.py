"""Batch normalization: its registry entries (kernels/_registry.py).

``native_batch_norm`` is PyTorch's ``torch.native_batch_norm``: ``(out, save_mean, save_invstd)``,
the running statistics updated in place in training exactly as PyTorch does —
``running = (1 - momentum) * running + momentum * batch_stat``, with the *unbiased* batch variance
(``M / (M - 1)``, M values per channel) for ``running_var`` and the biased one for the
normalization. ``offload()`` maps ``torch.nn.functional.batch_norm`` (hence ``nn.BatchNorm1d/2d/3d``)
to it and returns ``out``; ``num_batches_tracked`` and the ``momentum=None`` cumulative average stay
with the module (``nn.BatchNorm*.forward`` updates them before it calls ``F.batch_norm``), so they
change exactly as in plain PyTorch. Unlike PyTorch's eval mode (empty statistics), ``save_mean`` /
``save_invstd`` are the running mean and ``1 / sqrt(running_var + eps)`` in eval, which is what the
backward then uses.

Gradients (PyTorch's ``batch_norm_backward``): training ``dx = w * invstd * (dy - mean(dy) - xhat *
mean(dy * xhat))``, eval ``dx = w * invstd * dy``; ``dw = sum(dy * xhat)``, ``db = sum(dy)``
(``aclnnBatchNormBackward``).
"""
from __future__ import annotations

import math

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, TorchFn, define, mixed_param_dtypes

F = C.FLOATS


def stat_dtype(dt):
    """The statistics' dtype: float64 for float64 input, float32 otherwise (PyTorch's opmath type)."""
    return C.F64 if dt is C.F64 else C.F32


def native_batch_norm_shape(input, running_mean=None, running_var=None, weight=None, bias=None, training=False,
                            momentum=0.1, eps=1e-5):
    api = "kernels.native_batch_norm"
    shape = tuple(input.shape)
    if len(shape) < 2:
        raise ValueError(f"{api}: input must have 2 to 8 dims [N, C, *], got shape {shape}")
    c = shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise ValueError(f"{api}: {name} has shape {tuple(t.shape)}, expected ({c},) (one value per channel)")
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{api}: running_mean and running_var must be given together")
    if not training and running_mean is None:
        raise ValueError(f"{api}: running_mean and running_var are required in evaluation mode (training=False)")
    if training and c and math.prod(shape) // c == 1:
        raise ValueError(f"{api}: expected more than 1 value per channel when training, got input size {shape}")
    if not eps >= 0:
        raise ValueError(f"{api}: eps must be >= 0, got {eps}")
    st = stat_dtype(input.dtype)
    return Spec(shape, input.dtype), Spec((c,), st), Spec((c,), st)


def _bn_aten(input, running_mean, running_var, weight, bias, *a):
    return mixed_param_dtypes("aten::native_batch_norm", input, running_mean, running_var, weight, bias)


def _bn_result(r, input, running_mean, running_var, weight, bias, training, *a):
    """aten::native_batch_norm's save statistics on the CPU: in the input's dtype, and empty (``[0]``)
    in eval mode, where the backward uses the running statistics."""
    out, mean, invstd = r
    if not training:
        return out, out.new_empty((0,)), out.new_empty((0,))
    return out, mean.to(input.dtype), invstd.to(input.dtype)


def _bn_params(lib, keep, training, momentum, eps):
    return (training, momentum, eps)


def _bn_backward(ops, g, gm, gi, input, weight, save_mean, save_invstd, training, momentum, eps):
    return ops.batch_norm_backward(g, input, save_mean, save_invstd, weight, training, eps)


define("native_batch_norm",
       inputs=(Tensor("input", F), Tensor("running_mean", F, optional=True, mutated=True),
               Tensor("running_var", F, optional=True, mutated=True), Tensor("weight", F, optional=True),
               Tensor("bias", F, optional=True)),
       attrs=(Attr("training", bool, False), Attr("momentum", float, 0.1), Attr("eps", float, 1e-5)),
       outputs=("out", "save_mean", "save_invstd"), diff_outputs=("out",),
       shape=native_batch_norm_shape,
       forward=Aclnn("BatchNorm", _bn_params,
                     order=("input", "weight", "bias", "running_mean", "running_var", "...")),
       backward=_bn_backward, save=("input", "weight", "save_mean", "save_invstd"),
       torch=(("torch.nn.functional.batch_norm", 0),
              ("torch.native_batch_norm", "input, weight, bias, running_mean, running_var, training, momentum, eps"),
              ("torch.batch_norm", {"cudnn_enabled": True},
               "input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled", 0)),
       aten=(TorchFn("aten::native_batch_norm", "input, weight, bias, running_mean, running_var, training, momentum, "
                     "eps", guard=_bn_aten, result=_bn_result, unchecked=(1, 2)),),
       doc="Batch normalization over dim 1 of ``input`` ``[N, C, *]`` (2 to 8 dims; ``torch.native_batch_norm``; "
           "``aclnnBatchNorm``): ``(out, save_mean, save_invstd)``. ``training=True`` normalizes with the batch "
           "statistics and updates ``running_mean`` / ``running_var`` (``[C]``, in place) as PyTorch does "
           "(momentum; unbiased variance for the running statistic); ``training=False`` normalizes with them. "
           "``weight`` / ``bias`` ``[C]`` (None: 1 / 0). ``save_*`` are float32 (float64 for float64 input). "
           "Floating dtypes.\n\n"
           "Raises:\n    ValueError: fewer than 2 dims, per-channel tensors not ``[C]``, no running statistics in "
           "eval, one value per channel in training.")


def _bn_bw_shape(grad_out, input, save_mean, save_invstd, weight=None, training=True, eps=1e-5):
    if tuple(grad_out.shape) != tuple(input.shape) or len(input.shape) < 2:
        raise ValueError(f"kernels.backward.batch_norm: grad_out of shape {tuple(grad_out.shape)} must match input "
                         f"of shape {tuple(input.shape)} (2 to 8 dims)")
    c = (input.shape[1],)
    wd = input.dtype if weight is None else weight.dtype
    return Spec(input.shape, grad_out.dtype), Spec(c, wd), Spec(c, wd)


define("batch_norm_backward",
       inputs=(Tensor("grad_out", F), Tensor("input", F, diff=False), Tensor("save_mean", F, diff=False),
               Tensor("save_invstd", F, diff=False), Tensor("weight", F, optional=True, diff=False)),
       attrs=(Attr("training", bool, True), Attr("eps", float, 1e-5)),
       outputs=("grad_input", "grad_weight", "grad_bias"), shape=_bn_bw_shape,
       forward=Aclnn("BatchNormBackward",
                     lambda lib, keep, training, eps: (training, eps, _mask(lib, keep)),
                     order=("grad_out", "input", "weight", None, None, "save_mean", "save_invstd", "...")),
       api="kernels.backward.batch_norm",
       # aten's train=False normalizes with the running statistics, the op with save_mean / save_invstd
       aten=(TorchFn("aten::native_batch_norm_backward", "grad_out, input, weight, running_mean, running_var, "
                     "save_mean, save_invstd, train:training, eps, output_mask", fixed={"train": True},
                     report="native_batch_norm"),),
       doc="Gradients of :func:`kernels.native_batch_norm` (``aclnnBatchNormBackward``; runningMean / runningVar "
           "NULL: the statistics are ``save_mean`` / ``save_invstd`` in both modes): ``(grad_input, grad_weight, "
           "grad_bias)``.")


def _mask(lib, keep):
    m = C.Param.bools(lib, (True, True, True))
    keep.append(m)
    return m


def _stats_shape(input, eps=1e-5):
    if len(input.shape) < 2:
        raise ValueError(f"kernels.batch_norm_stats: input must have 2 to 8 dims, got shape {tuple(input.shape)}")
    st = stat_dtype(input.dtype)
    return Spec((input.shape[1],), st), Spec((input.shape[1],), st)


define("batch_norm_stats", inputs=(Tensor("input", F, diff=False),), attrs=(Attr("eps", float, 1e-5),),
       outputs=("mean", "invstd"), diff_outputs=(), shape=_stats_shape,
       forward=Aclnn("BatchNormStats", lambda lib, keep, eps: (eps,)),
       doc="Per-channel batch mean and ``1 / sqrt(biased var + eps)`` of ``input`` ``[N, C, *]`` "
           "(``torch.batch_norm_stats``; ``aclnnBatchNormStats``): ``(mean, invstd)``, ``[C]`` each.")
