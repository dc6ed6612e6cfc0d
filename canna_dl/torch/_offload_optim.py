"""``offload()`` and ``torch.optim``: an optimizer step on canna, one canna call per parameter group.

PyTorch's optimizers have three implementations (``torch/optim/adam.py``, ``sgd.py``): the
single-tensor loop (the default on CPU: ``foreach`` needs a CUDA-like device), ``foreach`` (the
``torch._foreach_*`` ops) and ``fused`` (``torch._fused_adamw_`` / ``_fused_adam_`` /
``_fused_sgd_``: one call per group of the whole update). canna has the fused form as single
kernels per parameter — ``kernels.apply_adamw`` (``aclnnApplyAdamWV2``) and ``kernels.fused_sgd``
(``aclnnFusedSgd``) —, so ``offload()``:

- maps ``torch._fused_adamw_``, ``torch._fused_adam_`` and ``torch._fused_sgd_`` to them (one
  kernel per parameter; Adam's L2 weight decay is ``grad + weight_decay * param`` first, a canna
  ``add``), and ``torch._foreach_add_`` (the fused path's step-count increment) to canna's in-place add;
- makes a ``torch.optim.Adam`` / ``AdamW`` / ``SGD`` step taken in the block whose parameter group
  is on PyTorch's default implementation (``foreach=None`` and ``fused=None``, the constructor
  defaults) take the fused path for that step — except an SGD group without momentum and weight
  decay, whose default step already is one op per parameter (``param.add_(grad, alpha=-lr)``,
  canna's in-place add through its C fast path, cheaper than the fused call's bookkeeping): a global optimizer step pre-hook
  (``torch.optim.optimizer.register_optimizer_step_pre_hook``) sets the group's ``fused`` to True
  and the post-hook puts None back (a step that raised is restored by the next step's pre-hook).
  The fused path computes the same update as the default one (PyTorch tests them against each
  other); a group with an option canna does not take (``differentiable``, ``capturable``, a tensor
  ``lr`` or betas, complex or non-CPU parameters, sparse gradients, AMP gradient scaling) keeps
  its implementation, and the report counts a fallback of the optimizer op with the reason.

An explicit ``foreach=True`` / ``fused=False`` is respected: those steps' ops are PyTorch's (and
counted as such), except the in-place ops canna maps anyway (``add_``, ``mul_``, ...).
"""
from __future__ import annotations

import sys
import threading

import torch

import kernels
from kernels import _core as _kcore

from . import _generated
from ._common import NoTorchFunction, Parameter, Tensor
from ._offload import _Fallback, _inplace_target

__all__ = ["table_entries", "install_hooks"]

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_STEPS = (torch.float32, torch.int64, torch.float64)
_bump = torch._C._increment_version


def _plain_list(name, xs, like=None, *, dtypes=_FLOATS, state=True):
    """Check a list argument: plain dense CPU tensors (of ``like``'s shapes and dtype)."""
    if not isinstance(xs, (list, tuple)):
        raise _Fallback(f"{name} is a {type(xs).__name__}, not a list of tensors")
    if like is not None and len(xs) != len(like):
        raise _Fallback(f"{name} has {len(xs)} tensors for {len(like)} parameters")
    for i, x in enumerate(xs):
        if type(x) is not Tensor and type(x) is not Parameter:
            raise _Fallback(f"{name}[{i}] is a {type(x).__name__}")
        if x.layout is not torch.strided:
            raise _Fallback(f"{name}[{i}] has layout {x.layout}")
        if x.device.type != "cpu":
            raise _Fallback(f"{name}[{i}] is on {x.device}")
        if x.dtype not in dtypes:
            raise _Fallback(f"{name}[{i}] has dtype {x.dtype}")
        if like is not None and dtypes is _FLOATS:
            ref = like[i]
            if x.dtype != ref.dtype or x.shape != ref.shape:
                raise _Fallback(f"{name}[{i}] does not have its parameter's shape and dtype")
        if state:
            _inplace_target(x)


def _span(t):
    """The bytes ``(lo, hi)`` a plain CPU tensor's elements touch (torch strides are >= 0), or None."""
    if not t.numel():
        return None
    lo = t.data_ptr()
    return lo, lo + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def _disjoint(written, read=()):
    """The kernels' rule for operands updated in place (:func:`kernels._core.overlapping`) over the
    whole lists of the call: a tensor written shares no memory with any other tensor of the call
    (the same tensor in two lists, twice in one list, views of one buffer). Else PyTorch runs the
    call — canna's kernels would refuse it, or (across parameters) update one after the other
    where PyTorch's semantics of such aliasing are its own."""
    pair = _kcore.overlapping([((n, i), _span(x)) for n, xs in written for i, x in enumerate(xs)],
                              [((n, i), _span(x)) for n, xs in read for i, x in enumerate(xs)])
    if pair is not None:
        (n1, i1), (n2, i2) = pair
        raise _Fallback(f"{n1}[{i1}] and {n2}[{i2}] share memory")


def _common(v, nparams, *, lr_at):
    grad_scale, found_inf = v[-2], v[-1]
    if grad_scale is not None or found_inf is not None:
        raise _Fallback("grad_scale / found_inf (AMP gradient scaling)")
    if isinstance(v[lr_at], Tensor):
        raise _Fallback("a tensor lr")
    if torch.is_grad_enabled() and any(p.requires_grad for p in v[0]):
        raise _Fallback("grad mode is enabled (an in-place update of a leaf that requires grad)")


def _run_all(n, step, touched):
    """Run ``step(i)`` for every parameter: the first one may still refuse (the call then falls
    back to PyTorch with nothing changed); a failure after that is an error (a partial update)."""
    try:
        for i in range(n):
            with NoTorchFunction():
                step(i)
    except (TypeError, ValueError, NotImplementedError, BufferError, IndexError) as e:
        if i == 0:
            raise
        raise RuntimeError(f"canna_dl.torch.offload: the optimizer step failed on parameter {i} of {n}, after "
                           f"updating the ones before it: {type(e).__name__}: {e}") from e
    finally:
        if touched:
            _bump(tuple(touched))


def _h_fused_adam(decoupled):
    """``torch._fused_adamw_`` / ``torch._fused_adam_`` → ``kernels.apply_adamw`` per parameter."""

    def h(v):
        (params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, beta1, beta2, wd, eps, amsgrad, maximize) = v[:13]
        _common(v, len(params), lr_at=6)
        _plain_list("params", params)
        _plain_list("grads", grads, params, state=False)
        _plain_list("exp_avgs", exp_avgs, params)
        _plain_list("exp_avg_sqs", exp_avg_sqs, params)
        if amsgrad:
            _plain_list("max_exp_avg_sqs", max_sqs, params)
        _plain_list("state_steps", steps, params, dtypes=_STEPS, state=False)
        if any(s.numel() != 1 for s in steps):
            raise _Fallback("a state step with more than one element")
        _disjoint((("params", params), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs))
                  + ((("max_exp_avg_sqs", max_sqs),) if amsgrad else ()), (("grads", grads), ("state_steps", steps)))
        l2 = (not decoupled) and wd != 0
        touched = list(params) + list(exp_avgs) + list(exp_avg_sqs) + (list(max_sqs) if amsgrad else [])

        def step(i):
            p = params[i].detach()
            g = grads[i].detach()
            st = steps[i].detach()
            if st.dtype == torch.float64:
                st = kernels.astype(st, "float32")
            mx = max_sqs[i].detach() if amsgrad else None
            mz = maximize
            if l2:   # Adam's L2 penalty: the gradient of (grad + weight_decay * param), maximize first
                g = kernels.add(kernels.neg(g) if maximize else g, p, alpha=wd)
                mz = False
            kernels.apply_adamw(p, exp_avgs[i].detach(), exp_avg_sqs[i].detach(), mx, g, st, lr, beta1, beta2,
                                0.0 if l2 else wd, eps, amsgrad, mz)
        _run_all(len(params), step, touched)

    h.__name__ = h.__qualname__ = "_h_fused_adamw_" if decoupled else "_h_fused_adam_"
    return h


def _h_fused_sgd(v):
    """``torch._fused_sgd_`` → ``kernels.fused_sgd`` per parameter."""
    params, grads, bufs, wd, momentum, lr, dampening, nesterov, maximize, first = v[:10]
    _common(v, len(params), lr_at=5)
    _plain_list("params", params)
    _plain_list("grads", grads, params, state=False)
    if momentum != 0:
        _plain_list("momentum_buffer_list", bufs, params)
    elif len(bufs):
        raise _Fallback("momentum buffers with momentum=0")
    if min(wd, momentum, lr, dampening) < 0:
        raise _Fallback("a negative hyperparameter")
    _disjoint((("params", params),) + ((("momentum_buffer_list", bufs),) if momentum != 0 else ()), (("grads", grads),))
    touched = list(params) + (list(bufs) if momentum != 0 else [])

    def step(i):
        b = bufs[i].detach() if momentum != 0 else None
        kernels.fused_sgd(params[i].detach(), grads[i].detach(), b, wd, momentum, lr, dampening, nesterov, maximize,
                          first)
    _run_all(len(params), step, touched)


def _add_(x, y, alpha):
    """``x.add_(y, alpha=alpha)``: the add entry's in-place form (canna_dl/torch/_generated.py)."""
    return _generated.inplace_function(kernels.get_op("add"))(x, y, alpha)


def _h_foreach_add_(v):
    """``torch._foreach_add_(tensors, scalar | tensors, alpha=1)`` → canna's in-place add per tensor."""
    xs, other, alpha = v
    _plain_list("self", xs, dtypes=_FLOATS + (torch.int64, torch.int32))
    if isinstance(other, (list, tuple)):
        _plain_list("other", other, xs, state=False, dtypes=_FLOATS + (torch.int64, torch.int32))
        ys = other
    elif type(other) in (int, float):
        ys = [other] * len(xs)
    else:
        raise _Fallback(f"a {type(other).__name__} operand")
    _disjoint((("self", xs),), (("other", other),) if isinstance(other, (list, tuple)) else ())

    def step(i):
        _add_(xs[i], ys[i], alpha)
    # the in-place add bumps the version counters itself
    _run_all(len(xs), step, ())
    return None


def aten_entries():
    """``[(aten overload, report row, run(arguments))]``: the fused steps for ``offload(level="aten")``
    (the same handlers: the aten schemas take the torch functions' arguments in their order)."""
    return [("aten::_fused_adamw_", "apply_adamw", _h_fused_adam(True)),
            ("aten::_fused_adam_", "apply_adamw", _h_fused_adam(False)),
            ("aten::_fused_sgd_", "fused_sgd", _h_fused_sgd)]


def table_entries(m, S):
    """Add the optimizer functions to ``offload()``'s mapping table (``m(funcs, op, sig, handler)``)."""
    adam = S(("self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps", "lr", "beta1", "beta2",
              "weight_decay", "eps", "amsgrad", "maximize", "grad_scale", "found_inf"), 6, grad_scale=None,
             found_inf=None)
    m((getattr(torch, "_fused_adamw_", None),), "apply_adamw", adam, _h_fused_adam(True))
    m((getattr(torch, "_fused_adam_", None),), "apply_adamw", adam, _h_fused_adam(False))
    sgd = S(("self", "grads", "momentum_buffer_list", "weight_decay", "momentum", "lr", "dampening", "nesterov",
             "maximize", "is_first_step", "grad_scale", "found_inf"), 3, grad_scale=None, found_inf=None)
    m((getattr(torch, "_fused_sgd_", None),), "fused_sgd", sgd, _h_fused_sgd)
    m((getattr(torch, "_foreach_add_", None),), "add_", S(("self", "other", "alpha"), 2, alpha=1), _h_foreach_add_)


# ---------------------------------------------------------------------------------------------
# the default optimizers take the fused path inside offload()

_local = threading.local()     # .steered: parameter groups whose "fused" this thread set to True


def _active_offload():
    """The innermost offload block of this thread: a function-level mode, else an aten-level block
    (a quiet function-level mode is part of an aten-level block: it routes only a few torch functions)."""
    from ._offload import Offload
    for i in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(i)
        if isinstance(mode, Offload) and not mode._quiet:
            return mode
    aten = sys.modules.get("canna_dl.torch._aten")
    return getattr(aten._tls, "block", None) if aten is not None else None


def _why_not(opt, group, op):
    """Why this group cannot take canna's fused step (None: it can)."""
    g = group
    if g.get("differentiable"):
        return "differentiable=True (the step is recorded by autograd)"
    if g.get("capturable"):
        return "capturable=True"
    if isinstance(g.get("lr"), Tensor):
        return "a tensor lr"
    if op == "apply_adamw" and any(isinstance(b, Tensor) for b in g.get("betas", ())):
        return "tensor betas"
    if getattr(opt, "grad_scale", None) is not None or getattr(opt, "found_inf", None) is not None:
        return "AMP gradient scaling (grad_scale / found_inf)"
    bufs = []
    for p in g["params"]:
        if p.grad is None:
            continue
        if type(p) is not Parameter and type(p) is not Tensor:
            return f"a {type(p).__name__} parameter"
        if p.device.type != "cpu":
            return f"parameters on {p.device}"
        if p.dtype not in _FLOATS:
            return f"{p.dtype} parameters"
        if p.grad.layout is not torch.strided:
            return "sparse gradients"
        if op == "fused_sgd" and g.get("momentum", 0) != 0:
            bufs.append(opt.state.get(p, {}).get("momentum_buffer") is None)
    if bufs and any(bufs) and not all(bufs):
        return "some parameters have a momentum buffer and others not"
    return None


def _restore():
    for group in getattr(_local, "steered", ()):
        if group.get("fused") is True:
            group["fused"] = None
    _local.steered = []


def _pre_hook(opt, args, kwargs):
    _restore()
    mode = _active_offload()
    if mode is None:
        return None
    op = _OPTIMIZERS.get(type(opt))
    if op is None or (not mode._all and op not in mode.enabled):
        return None
    for group in opt.param_groups:
        if group.get("fused") is not None or group.get("foreach") is not None:
            continue    # the user chose an implementation
        if op == "fused_sgd" and not group.get("momentum") and not group.get("weight_decay"):
            continue    # nothing to fuse: PyTorch's own step is one param.add_(grad, alpha=-lr), on canna
        reason = _why_not(opt, group, op)
        if reason is not None:
            st = mode.report._stat(op)
            st.refused(reason)
            continue
        group["fused"] = True
        _local.steered.append(group)
    return None


def _post_hook(opt, args, kwargs):
    _restore()


_OPTIMIZERS = {torch.optim.Adam: "apply_adamw", torch.optim.AdamW: "apply_adamw", torch.optim.SGD: "fused_sgd"}
_hooks = []


def install_hooks():
    """Register the global optimizer step hooks (once per process)."""
    if not _hooks:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        _hooks.append(register_optimizer_step_pre_hook(_pre_hook))
        _hooks.append(register_optimizer_step_post_hook(_post_hook))
