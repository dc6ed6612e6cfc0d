"""What every PyTorch shim shares: how a call is routed (eager fast path, eager autograd, or the
``canna::`` custom ops), argument checks with clear errors, and the error node that makes a
second differentiation of a once-differentiable backward fail with a message instead of a silently
wrong value.

Routing of one call (docs/DESIGN.md §7; the reasons for two paths: pytorch#139500, #176592,
#177109 measure ``torch.library.custom_op`` dispatch at several µs per call in eager mode):

- ``EAGER`` (0): plain CPU tensors, no gradient needed (no input requires grad, or grad mode
  is off): the kernel is called directly (``kernels.*``, torch in → torch out);
- ``AUTOGRAD`` (1): plain CPU tensors and an input that requires grad with grad mode on: a plain
  ``torch.autograd.Function`` whose backward calls canna's backward kernels;
- ``CUSTOM`` (2): under ``torch.compile`` (Dynamo tracing) or a ``torch.func`` transform, or for
  tensors that are not plain
  (FakeTensor, FunctionalTensor, other subclasses, the ``meta`` device): the ``torch.ops.canna.*``
  custom op, which has a fake (meta) implementation and ``register_autograd``.
"""
from __future__ import annotations

from numbers import Number as _Number

import torch

from torch._C import _functions as _torch_functions

Tensor = torch.Tensor
Parameter = torch.nn.Parameter
NoTorchFunction = torch._C.DisableTorchFunction
grad_enabled = torch.is_grad_enabled
is_compiling = torch.compiler.is_compiling
functorch_active = torch._C._are_functorch_transforms_active

EAGER, AUTOGRAD, CUSTOM = 0, 1, 2

#: dtypes canna computes and differentiates (kernels' FLOATS)
FLOATS = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))
#: integer dtypes the arithmetic kernels take (no gradient: PyTorch refuses requires_grad on them)
INTS = frozenset((torch.int32, torch.int64))
ARITH = FLOATS | INTS
_FLOAT_NAMES = "float16, bfloat16, float32, float64"


def route(api, a=None, b=None, c=None, d=None) -> int:
    """The path of a call with tensor arguments ``a``..``d`` (None or Python numbers are skipped).

    Raises:
        TypeError: an argument that is neither a tensor, a number nor None (as ``torch.*`` does:
            lists, NumPy arrays and canna arrays are not converted).
        ValueError: tensors on different devices.
    """
    if is_compiling() or functorch_active():
        return CUSTOM
    grad = False
    for t in (a, b, c, d):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            if isinstance(t, _Number):
                continue
            raise TypeError(f"{api}: expected a torch.Tensor (or a Python number), got {type(t).__name__}; "
                            "convert with torch.as_tensor() or canna_dl.to_torch()")
        tt = type(t)
        if tt is not Tensor and tt is not Parameter:
            return CUSTOM
        if not t.is_cpu:
            return _device_route(api, (a, b, c, d))
        if t.requires_grad:
            grad = True
    if grad and grad_enabled():
        return AUTOGRAD
    return EAGER


def _device_route(api, ts):
    devs = []
    for t in ts:
        if isinstance(t, Tensor) and t.device not in devs:
            devs.append(t.device)
    if len(devs) > 1:
        raise ValueError(f"{api}: expected all tensors on one device, got tensors on "
                         f"{' and '.join(str(d) for d in devs)} (move them with .to(device) first)")
    if devs[0].type == "meta":
        return CUSTOM   # shapes only: the custom op's fake implementation serves meta tensors
    grad = any(isinstance(t, Tensor) and t.requires_grad for t in ts)
    return AUTOGRAD if grad and grad_enabled() else EAGER


def check_float(api, name, t):
    """A tensor argument of an op defined on floating tensors only."""
    if t is not None and t.dtype not in FLOATS:
        raise TypeError(f"{api}: {name} has dtype {t.dtype}, but this op takes floating tensors only "
                        f"({_FLOAT_NAMES}); convert it with .float() first")


def category_is_float(canna_dtype) -> bool:
    """A canna dtype of the floating category."""
    return canna_dtype.kind == "f"


def check_arith(api, name, t):
    """A tensor argument of an arithmetic op (floats, int32, int64); one that requires grad must be
    of a floating dtype canna differentiates."""
    if t is None or not isinstance(t, Tensor):
        return
    if t.dtype not in ARITH:
        raise TypeError(f"{api}: {name} has dtype {t.dtype}, which canna's kernels do not support "
                        f"({_FLOAT_NAMES}, int32, int64)")


def check_grad_dtype(api, name, t):
    """A tensor that requires grad must have a dtype canna differentiates (complex does not)."""
    if t is not None and isinstance(t, Tensor) and t.requires_grad and t.dtype not in FLOATS:
        raise TypeError(f"{api}: {name} requires grad and has dtype {t.dtype}; canna differentiates "
                        f"{_FLOAT_NAMES} only")


def check_number(api, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{api}: {name} must be a Python number, not {type(v).__name__}")


def plain(t):
    """``t`` as a kernel operand: a tensor that does not require grad, of the exact torch.Tensor type
    (what the kernels' C fast path takes); the same memory and version counter."""
    if t is None or not isinstance(t, Tensor):
        return t
    if type(t) is Tensor and not t.requires_grad:
        return t
    return t.detach()


def meta(x):
    """(shape, dtype) of a tensor argument, None for a Python number."""
    if isinstance(x, Tensor):
        return (x.shape, x.dtype)
    return None


def once_differentiable_outputs(name, outputs, inputs):
    """The outputs of a backward computed by kernels (no graph): when grad mode is on (the backward
    runs with ``create_graph=True``) and an input of it requires grad, they are tied to a node that
    raises a clear error if they are differentiated again (PyTorch's ``once_differentiable``
    mechanism, with canna's message), instead of silently missing the second-order terms."""
    if not grad_enabled():
        return outputs
    req = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not req:
        return outputs
    single = not isinstance(outputs, tuple)
    outs = (outputs,) if single else outputs
    msg = (f"canna_dl.torch: double backward of {name} is not supported (canna's backward kernel for it "
           "has no derivative); use PyTorch's own op for higher-order gradients").encode()
    # one error node whose inputs are the outputs' values and the tensors the backward read that
    # require grad: every path from an output to the graph's inputs goes through it, so a second
    # differentiation reaches it and raises (PyTorch's once_differentiable ties the outputs to
    # fresh leaves instead, which the engine prunes: a silent zero second derivative)
    err = _torch_functions.DelayedError(msg, len(outs) + len(req))
    r = err(*[None if v is None else v.detach() for v in outs], *req)
    if not isinstance(r, tuple):
        r = (r,)
    r = r[: len(outs)]
    return r[0] if single else tuple(r)
