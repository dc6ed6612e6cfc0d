"""Fused optimizer steps: one aclnn call updates one parameter and its optimizer state in place.

``apply_adamw`` → ``aclnnApplyAdamWV2`` (hiascend.com aclnn API "aclnnApplyAdamWV2"): AdamW, or
Adam without weight decay; ``fused_sgd`` → ``aclnnFusedSgd`` (hicann ops-nn
``optim/fused_sgd/docs/aclnnFusedSgd.md``) called with one-tensor lists: SGD with weight decay,
momentum, dampening, Nesterov momentum and ``maximize``. The formulas are ``torch.optim.AdamW``'s
and ``torch.optim.SGD``'s (``torch/optim/adam.py``, ``torch/optim/sgd.py``); the state tensors are
PyTorch's (``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``, ``momentum_buffer``) and ``step`` is
the step count *after* this step's increment, as PyTorch's fused optimizers pass it.

The hyperparameters are C ``float`` s in the aclnn prototypes: they are rounded to float32 before
the step (a float64 parameter is updated in float64 arithmetic from float32 hyperparameters).
"""
from __future__ import annotations

import math

from canna_dl import _copy as dl_copy

from . import _core as C
from ._core import FLOATS, INT64, F32, ffi

__all__ = ["apply_adamw", "fused_sgd"]


def _number(api, name, v, *, nonneg=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{api}: {name} must be a number, not {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v) or (nonneg and v < 0):
        raise ValueError(f"{api}: {name} must be a finite number{' >= 0' if nonneg else ''}, got {v!r}")
    return v


def _state(api, name, x, ref, refname):
    """A tensor updated in place with ``ref``'s shape and dtype: an :class:`kernels._core.Out`
    that the kernel writes (a staging copy in the discrete memory model is loaded first: the
    kernel reads the state too)."""
    a = C.as_array(api, name, x)
    C.check_dtype(api, name, a.dtype, FLOATS, "floating dtypes")
    if ref is not None:
        if a.dtype is not ref.dtype:
            raise TypeError(f"{api}: {name} has dtype {a.dtype.name} but {refname} has dtype {ref.dtype.name} "
                            "(they must match)")
        if a.shape != ref.shape:
            raise ValueError(f"{api}: {name} has shape {a.shape} but {refname} has shape {ref.shape} (they must "
                             "match)")
    return a


def _outs(api, named, inputs):
    """The in-place operands as outputs (checked writable; that they share no memory with each
    other nor with the inputs is :func:`kernels._core.check_disjoint`'s, before)."""
    outs = []
    for name, x, a in named:
        if a is None:
            outs.append(None)
            continue
        o = C.given_out(api, x, a.shape, a.dtype, inputs, name=name, exact_dtype=True)
        if o.stage is not None:   # the kernel reads the state: load it into the staging copy
            dl_copy.copy_into(o.arr, o.stage)
        outs.append(o)
    return outs


def _as_1d(o):
    """aclnn's optimizer ops take 1-8 dims: a 0-d operand is viewed as shape (1,)."""
    if o is not None and o.arr.ndim == 0:
        o.arr = o.arr.reshape((1,))
    return o


def apply_adamw(param, exp_avg, exp_avg_sq, max_exp_avg_sq, grad, step, lr=1e-3, beta1=0.9, beta2=0.999,
                weight_decay=1e-2, eps=1e-8, amsgrad=False, maximize=False, *, stream=None):
    """One AdamW step of one parameter, in place (``aclnnApplyAdamWV2``; ``torch.optim.AdamW``'s
    update): with ``g = -grad`` if ``maximize`` else ``grad``, ``t = step``::

        param      *= 1 - lr * weight_decay
        exp_avg     = exp_avg.lerp(g, 1 - beta1)
        exp_avg_sq  = exp_avg_sq * beta2 + (1 - beta2) * g * g
        v           = max(max_exp_avg_sq, exp_avg_sq) if amsgrad (stored in max_exp_avg_sq) else exp_avg_sq
        param      -= lr / (1 - beta1**t) * exp_avg / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Adam without weight decay is the same update (``weight_decay=0``).

    Args:
        param, exp_avg, exp_avg_sq, grad: floating arrays of one shape and dtype (float32,
            float64, float16, bfloat16); ``param``, ``exp_avg``, ``exp_avg_sq`` are written.
        max_exp_avg_sq: the running maximum (written) when ``amsgrad``; ignored (may be None) otherwise.
        step: a 1-element int64 or float32 array: the step number of this step (1 for the first).
        lr, beta1, beta2, weight_decay, eps: numbers (rounded to float32: the aclnn prototype's type).
        amsgrad, maximize: bools.

    Returns:
        None (the arrays are updated; torch tensors when the call returns, canna arrays in stream order).

    Raises:
        TypeError: a non-floating or mismatched dtype, a step of another dtype, a non-number
            hyperparameter. ValueError: mismatched shapes, a step with more than one element,
            read-only state, operands sharing memory (a written one with any other, even as the
            same tensor: checked on every call), a non-finite hyperparameter.
    """
    api = "kernels.apply_adamw"
    amsgrad, maximize = bool(amsgrad), bool(maximize)
    hp = [_number(api, n, v) for n, v in (("lr", lr), ("beta1", beta1), ("beta2", beta2),
                                            ("weight_decay", weight_decay), ("eps", eps))]
    p = _state(api, "param", param, None, None)
    m = _state(api, "exp_avg", exp_avg, p, "param")
    v = _state(api, "exp_avg_sq", exp_avg_sq, p, "param")
    if amsgrad:
        if max_exp_avg_sq is None:
            raise TypeError(f"{api}: max_exp_avg_sq must be an array when amsgrad=True, not None")
        mx = _state(api, "max_exp_avg_sq", max_exp_avg_sq, p, "param")
    else:
        mx = None
    g = _state(api, "grad", grad, p, "param")
    st = C.as_array(api, "step", step)
    C.check_dtype(api, "step", st.dtype, (INT64, F32), "int64 or float32")
    if st.size != 1:
        raise ValueError(f"{api}: step must have exactly 1 element, got shape {st.shape}")
    if st.ndim == 0:
        st = st.reshape((1,))
    if g.ndim == 0:
        g = g.reshape((1,))
    s = C.device_and_stream(api, (p, m, v, mx, g, st), stream)
    C.check_disjoint(api, (("param", param, p), ("exp_avg", exp_avg, m), ("exp_avg_sq", exp_avg_sq, v),
                           ("max_exp_avg_sq", max_exp_avg_sq, mx)), (("grad", grad, g), ("step", step, st)))
    inputs = (("grad", g), ("step", st))
    outs = [_as_1d(o) for o in _outs(api, (("param", param, p), ("exp_avg", exp_avg, m),
                                           ("exp_avg_sq", exp_avg_sq, v), ("max_exp_avg_sq", max_exp_avg_sq, mx)),
                                     inputs)]

    def args(lib, t, keep):
        # t: grad, step, param, exp_avg, exp_avg_sq, max_exp_avg_sq (NULL without amsgrad)
        return (t[2], t[3], t[4], t[5], t[0], t[1], *hp, amsgrad, maximize)
    C.run_op("ApplyAdamWV2", s, [g, st], outs, args, key_extra=(*hp, amsgrad, maximize))


def fused_sgd(param, grad, momentum_buffer=None, weight_decay=0.0, momentum=0.0, lr=1e-3, dampening=0.0,
              nesterov=False, maximize=False, is_first_step=False, *, stream=None):
    """One SGD step of one parameter, in place (``aclnnFusedSgd`` with one-tensor lists;
    ``torch.optim.SGD``'s update): with ``g = -grad`` if ``maximize`` else ``grad``::

        g   = g + weight_decay * param
        buf = g if is_first_step else momentum * buf + (1 - dampening) * g     (with a momentum_buffer)
        g   = g + momentum * buf if nesterov else buf                          (with a momentum_buffer)
        param -= lr * g

    Args:
        param, grad: floating arrays of one shape and dtype; ``param`` is written.
        momentum_buffer: the momentum buffer (written; its values are not read on the first step),
            or None for SGD without momentum.
        weight_decay, momentum, lr, dampening: numbers >= 0 (rounded to float32).
        nesterov, maximize, is_first_step: bools.

    Returns:
        None.

    Raises:
        TypeError / ValueError: as :func:`apply_adamw` (a negative hyperparameter is a ValueError).
    """
    api = "kernels.fused_sgd"
    hp = [_number(api, n, x, nonneg=True) for n, x in (("weight_decay", weight_decay), ("momentum", momentum),
                                                          ("lr", lr), ("dampening", dampening))]
    flags = (bool(nesterov), bool(maximize), bool(is_first_step))
    p = _state(api, "param", param, None, None)
    g = _state(api, "grad", grad, p, "param")
    b = None if momentum_buffer is None else _state(api, "momentum_buffer", momentum_buffer, p, "param")
    if g.ndim == 0:
        g = g.reshape((1,))
    s = C.device_and_stream(api, (p, g, b), stream)
    C.check_disjoint(api, (("param", param, p), ("momentum_buffer", momentum_buffer, b)), (("grad", grad, g),))
    outs = [_as_1d(o) for o in _outs(api, (("param", param, p), ("momentum_buffer", momentum_buffer, b)),
                                     (("grad", g),))]

    def args(lib, t, keep):
        # t: grad, param, momentum_buffer (NULL without momentum); one-tensor lists own no tensor
        # of their own: the list destroys its elements, so the descriptors' own finalizers are
        # cancelled and the lists keep them
        def lst(d):
            if d == ffi.NULL:
                return ffi.NULL
            h = lib.aclCreateTensorList(ffi.new("aclTensor *[1]", [d]), 1)
            if h == ffi.NULL:
                raise ValueError(f"aclCreateTensorList: {C._nn_error('aclCreateTensorList')}")
            ffi.gc(d, None)    # the list destroys it
            h = ffi.gc(h, lib.aclDestroyTensorList)
            keep.append(h)
            return h
        return (lst(t[1]), lst(t[0]), lst(t[2]), ffi.NULL, *hp, *flags)
    C.run_op("FusedSgd", s, [g], outs, args, key_extra=(*hp, *flags))
