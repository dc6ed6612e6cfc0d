"""``offload()``: run an unchanged PyTorch program's supported ops on canna (an operator mapping
table with fallback to PyTorch), as a ``torch.overrides.TorchFunctionMode``.

Every ``torch.*``, ``Tensor.*`` (methods and operators) and ``torch.nn.functional.*`` call made in
the block reaches :meth:`Offload.__torch_function__`. A call whose function is in the mapping
table (:data:`OFFLOAD_OPS`) and whose arguments canna supports runs on canna through the eager
autograd shims (``canna_dl.torch._functions``; the ``torch.ops.canna`` custom ops while
``torch.compile`` traces); every other call runs on PyTorch unchanged. Arguments canna does not
take (an ``out=`` or deprecated keyword, an unsupported dtype or layout, a tensor subclass, a
``meta`` tensor, a reduction or rounding mode canna lacks, class-probability targets, ...) fall
back to PyTorch with the reason recorded: canna's argument checks raise before anything runs, and
their message is the reason. Errors of the user's program (shapes that do not match, ...) therefore
surface as PyTorch's own errors, from the fallback call.

In-place ops (``add_``, ``sub_``, ``mul_``, ``div_``, ``relu_``, ``x += y``, ``F.relu(inplace=True)``)
write the tensor's memory and bump its version counter as PyTorch's do; under autograd they go
through a Function that marks the tensor dirty (``ctx.mark_dirty``), so the graph stays correct
and a later backward that needs the old value raises PyTorch's version-counter error. An
optimizer's update under ``no_grad`` (``p.add_(g, alpha=-lr)`` in SGD) runs on canna this way.

Modes are per thread (PyTorch's torch-function mode stack is thread-local): ops of other threads
are not routed. A backward pass started in the block (``Tensor.backward``, ``torch.autograd.grad``)
runs with the mode active (PyTorch would pop it): the ops of hooks and of activation
checkpointing's recomputation are routed as in the forward, so the recomputation saves the same
tensors as the forward did (what non-reentrant checkpointing checks).
"""
from __future__ import annotations

import torch
from torch._guards import CompileContext as _CompileContext, TracingContext as _TracingContext
from torch.overrides import TorchFunctionMode, resolve_name
from torch.overrides import _pop_mode, _push_mode

try:
    from torch.overrides import redispatch_function as _redispatch
except ImportError:    # PyTorch < 2.13: backward passes run on PyTorch
    _redispatch = None

import acl_rt
from kernels import _core as _kcore
from kernels import _native as _knative

from . import _functions as F
from . import _team
from ._common import NoTorchFunction, Parameter, Tensor, functorch_active, is_compiling

__all__ = ["offload", "Offload", "OffloadReport", "OpStats", "OFFLOAD_OPS", "NOT_COMPUTE", "ALLOCATION"]

_nnf = torch.nn.functional
_T = torch.Tensor
_autocast_on = torch._C._is_any_autocast_enabled
_STRIDED = torch.strided
_graph_task_id = torch._C._current_graph_task_id    # -1 outside autograd's backward pass


def _compile_underway() -> bool:
    """PyTorch's compiler stack is working on this thread (Dynamo, AOTAutograd, Inductor)."""
    return _TracingContext.try_get() is not None or _CompileContext.try_get() is not None


class _Fallback(Exception):
    """Raised by a handler: this call runs on PyTorch (``reason`` says why)."""

    def __init__(self, reason):
        self.reason = reason


_REQ = object()    # a required parameter
_UNSET = object()


class _Sig:
    """How one torch function's arguments bind to names (``names`` in positional order, the first
    ``npos`` positional; ``defaults`` for the optional ones)."""

    __slots__ = ("names", "npos", "defaults", "index", "nall")

    def __init__(self, names, npos=None, **defaults):
        self.names = tuple(names)
        self.nall = len(self.names)
        self.npos = self.nall if npos is None else npos
        self.defaults = tuple(defaults.get(n, _REQ) for n in self.names)
        self.index = {n: i for i, n in enumerate(self.names)}

    def bind(self, args, kwargs):
        n = len(args)
        if n > self.npos:
            raise _Fallback(f"{n} positional arguments")
        if not kwargs and n == self.nall:
            return args
        vals = list(args) + [_UNSET] * (self.nall - n)
        if kwargs:
            idx = self.index
            for k, v in kwargs.items():
                i = idx.get(k)
                if i is None:
                    raise _Fallback(f"argument {k}= is not supported")
                if vals[i] is not _UNSET:
                    raise _Fallback(f"argument {k} given twice")
                vals[i] = v
        for i in range(n, self.nall):
            if vals[i] is _UNSET:
                d = self.defaults[i]
                if d is _REQ:
                    raise _Fallback(f"missing argument {self.names[i]}")
                vals[i] = d
        return vals


def _chk(*xs):
    """Arguments canna can take: plain tensors (a subclass is PyTorch's to handle, unless Dynamo is
    tracing), not meta; operands that are not tensors must be Python ints or floats."""
    for x in xs:
        if isinstance(x, Tensor):
            tt = type(x)
            if tt is not Tensor and tt is not Parameter and not is_compiling():
                raise _Fallback(f"a {tt.__name__} (tensor subclass)")
            if x.is_meta:
                raise _Fallback("a meta tensor")
            if x.layout is not _STRIDED:
                raise _Fallback(f"layout {x.layout}")
        elif x is not None and (type(x) is bool or not isinstance(x, (int, float))):
            raise _Fallback(f"a {type(x).__name__} operand")


def _none(v, what):
    if v is not None:
        raise _Fallback(what)


# ---------------------------------------------------------------------------------------------
# handlers: vals (bound arguments) -> result, or raise _Fallback / a canna argument error

def _inplace_target(x):
    if type(x) is not Tensor and type(x) is not Parameter:
        raise _Fallback(f"in-place on a {type(x).__name__}")
    if is_compiling():
        raise _Fallback("in-place op under torch.compile")
    if x.is_inference() and not torch.is_inference_mode_enabled():
        raise _Fallback("in-place update of an inference tensor (PyTorch refuses it)")





def _h_relu(v):
    _chk(v[0])
    return F._relu(v[0])


def _h_relu_f(v):          # F.relu(input, inplace=False)
    if v[1]:
        _inplace_target(v[0])
        return F._relu_(v[0])
    _chk(v[0])
    return F._relu(v[0])


def _h_relu_(v):
    _inplace_target(v[0])
    return F._relu_(v[0])


def _h_unary_inplace(v):   # log_ / exp_: canna has no in-place form of them
    raise _Fallback("in-place form (canna runs the out-of-place op only)")


def _h_layer_norm(v):
    _chk(v[0], v[2], v[3])
    return F._layer_norm(v[0], v[1], v[2], v[3], v[4])


def _h_rms_norm(v):
    _chk(v[0], v[2])
    return F._rms_norm(v[0], v[1], v[2], v[3])


def _h_conv2d(v):
    _chk(v[0], v[1], v[2])
    return F._conv2d(v[0], v[1], v[2], v[3], v[4], v[5], v[6])


def _h_max_pool2d(v):      # F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    _chk(v[0])
    return F._max_pool2d(v[0], v[1], v[2], v[3], v[4], v[5], bool(v[6]))


def _h_max_pool2d_with_indices(v):
    _chk(v[0])
    return F._max_pool2d(v[0], v[1], v[2], v[3], v[4], v[5], True)


def _h_max_pool2d_torch(v):  # torch.max_pool2d(input, kernel_size, stride=(), padding, dilation, ceil_mode)
    _chk(v[0])
    s = v[2]
    if not isinstance(s, int) and len(s) == 0:
        s = None
    return F._max_pool2d(v[0], v[1], s, v[3], v[4], v[5], False)


def _h_cross_entropy(v):   # input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing
    _none(v[3], "size_average= (deprecated)")
    _none(v[5], "reduce= (deprecated)")
    _chk(v[0], v[1], v[2])
    return F._cross_entropy(v[0], v[1], v[2], v[4], v[6], v[7])


def _h_nll_loss(v):        # input, target, weight, size_average, ignore_index, reduce, reduction
    _none(v[3], "size_average= (deprecated)")
    _none(v[5], "reduce= (deprecated)")
    _chk(v[0], v[1], v[2])
    return F._nll_loss(v[0], v[1], v[2], v[4], v[6])


def _reduce_args(v):
    _none(v[4], "out= argument")
    dim, keepdim = v[1], v[2]
    if not isinstance(keepdim, bool):
        raise _Fallback(f"keepdim={keepdim!r}")
    if isinstance(dim, str) or (isinstance(dim, (list, tuple)) and any(isinstance(d, str) for d in dim)):
        raise _Fallback("named dims")
    _chk(v[0])


def _h_sum(v):             # input, dim, keepdim, dtype, out
    _reduce_args(v)
    return F._sum(v[0], v[1], v[2], v[3])


def _h_mean(v):
    _reduce_args(v)
    return F._mean(v[0], v[1], v[2], v[3])


# ---------------------------------------------------------------------------------------------
# the mapping table: torch function -> (op name, signature, handler)

def _build_table():
    S = _Sig
    t = {}

    def m(funcs, name, sig, handler):
        for f in funcs:
            if f is not None:
                t[f] = (name, sig, handler)

    g = getattr
    m((torch.relu_, _T.relu_), "relu_", S(("input",)), _h_relu_)
    m((g(torch, "log_", None), _T.log_), "log", S(("input",)), _h_unary_inplace)
    m((g(torch, "exp_", None), _T.exp_), "exp", S(("input",)), _h_unary_inplace)
    m((_nnf.layer_norm,), "layer_norm", S(("input", "normalized_shape", "weight", "bias", "eps"), weight=None,
                                            bias=None, eps=1e-5), _h_layer_norm)
    m((torch.layer_norm,), "layer_norm", S(("input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"),
                                            weight=None, bias=None, eps=1e-5, cudnn_enable=True), _h_layer_norm)
    rms = S(("input", "normalized_shape", "weight", "eps"), weight=None, eps=None)
    m((_nnf.rms_norm, g(torch, "rms_norm", None)), "rms_norm", rms, _h_rms_norm)
    m((torch.conv2d,), "conv2d", S(("input", "weight", "bias", "stride", "padding", "dilation", "groups"), bias=None,
                                   stride=1, padding=0, dilation=1, groups=1), _h_conv2d)
    pool = S(("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"), stride=None,
             padding=0, dilation=1, ceil_mode=False, return_indices=False)
    m((_nnf.max_pool2d,), "max_pool2d", pool, _h_max_pool2d)
    m((_nnf.max_pool2d_with_indices,), "max_pool2d", pool, _h_max_pool2d_with_indices)
    m((torch.max_pool2d,), "max_pool2d", S(("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                                           stride=(), padding=0, dilation=1, ceil_mode=False), _h_max_pool2d_torch)
    m((_nnf.cross_entropy,), "cross_entropy",
      S(("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
        weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean", label_smoothing=0.0),
      _h_cross_entropy)
    m((_nnf.nll_loss,), "nll_loss",
      S(("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction"), weight=None,
        size_average=None, ignore_index=-100, reduce=None, reduction="mean"), _h_nll_loss)
    red = S(("input", "dim", "keepdim", "dtype", "out"), 3, dim=None, keepdim=False, dtype=None, out=None)
    m((torch.sum, _T.sum), "sum", red, _h_sum)
    m((torch.mean, _T.mean), "mean", red, _h_mean)
    # the ops generated from the registry map the torch functions their entry names (out=: falls back)
    from . import _generated
    for op in _registered():
        for f, names, defaults, _extras, handler, report in _generated.offload_entries(op):
            m((f,), report, S(names, None, **defaults), handler)
    # F.relu(inplace=True) is relu_ on canna (the registry's TorchFn takes inplace=False only)
    m((_nnf.relu,), "relu", S(("input", "inplace"), inplace=False), _h_relu_f)
    # torch.optim's fused steps (and the steps' increment) on canna's optimizer kernels
    from . import _offload_optim
    _offload_optim.table_entries(m, S)
    return t


def _registered():
    import kernels
    return [op for op in kernels.registered_ops() if op.generate and op.torch]


_TABLE = _build_table()

# the C per-call fast path (kernels/_native/fast.c offload_fast): torch function -> its entry, built
# from the registry's TorchFns (canna_dl.torch._generated.offload_fast_entry); a call it takes is
# bound, checked, looked up, launched and counted in C; any other call goes the Python way below
_FAST: dict = {}
_NO_FAST: dict = {}
_OCACHE = _kcore.offload_cache
_offload_fast = _knative.offload_fast
_knative.offload_configure(_autocast_on, functorch_active, _kcore._lib, _kcore._state)
#: signatures the fast path learned from the Python handler (kernels._native.stats()["offload_fast_hits"] counts its calls)
FAST_STATS = {"registered": 0}


_fast_tags = [0]   # the next torch function's tag (never reused)


def _add_fast(op):
    from . import _generated
    entries = _generated.offload_fast_entries(op, _fast_tags[0])
    _fast_tags[0] += len(entries)
    for f, e in entries:
        if _TABLE.get(f, (None,))[0] == e[9]:   # (a hand entry that maps it elsewhere wins)
            _FAST[f] = e


for _op in _registered():
    _add_fast(_op)


def _fast_register(okey):
    """The Python handler ran a call the fast path missed on canna: its kernel's cache entry (the
    key without the tag) serves that signature from now on."""
    e = _kcore.fast_cache.get(okey[:-4])
    if e is not None:
        if len(_OCACHE) >= _kcore._PLAN_CACHE_MAX:
            _OCACHE.clear()
        _OCACHE[okey] = e
        FAST_STATS["registered"] += 1

from . import _offload_optim  # noqa: E402 (needs the definitions above)
_offload_optim.install_hooks()   # default torch.optim groups take the fused path in a block

#: the ops ``offload()`` routes to canna (names of the report's rows; ``add_`` & co. are the
#: in-place forms)
OFFLOAD_OPS = tuple(sorted({v[0] for v in _TABLE.values()}))

#: the argument errors of canna's ops that make a call fall back to PyTorch (an OverflowError is a
#: Python integer out of the tensor dtype's range, which PyTorch wraps: see kernels' scalar rule)
_CAUGHT = (TypeError, ValueError, NotImplementedError, BufferError, IndexError, OverflowError)


#: calls canna refused for a type reason (a dtype, an argument's type), by function and signature:
#: the same signature falls back at once next time instead of being checked again
_REFUSED: dict = {}
_REFUSED_MAX = 512


def _sig_key(args, kwargs):
    k = [(a.dtype, a.dim()) if isinstance(a, Tensor) else type(a) for a in args]
    if kwargs:
        for n, v in kwargs.items():
            k.append((n, (v.dtype, v.dim()) if isinstance(v, Tensor) else type(v)))
    return tuple(k)


def refusal_reason(exc):
    """The fallback reason of an exception an offload handler raised (``_Fallback`` or one of
    :data:`_CAUGHT`, canna's argument errors); an ``acl_rt.AclError`` that is not an argument error
    (a device failure) is raised again."""
    if isinstance(exc, _Fallback):
        return exc.reason
    if isinstance(exc, acl_rt.AclError) and not isinstance(exc, ValueError):
        raise exc
    return _reason_of(exc)


def _reason_of(e):
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _our_nodes():
    nodes = set()
    from . import _generated
    for v in list(vars(F).values()) + _generated.FUNCTIONS:
        if isinstance(v, type) and issubclass(v, torch.autograd.Function) and v is not torch.autograd.Function:
            nodes.add(v._backward_cls)
    return nodes


_NODES = frozenset(_our_nodes())


def _canna_custom_ops():
    """The ``torch.ops.canna`` custom ops (packets and overloads) -> (report op, is a backward op):
    a compiled graph's calls of them reach the mode as such while it runs."""
    from . import _library
    from . import _generated
    alias = _generated.VARIANTS   # add_scalar -> add, ...
    m = {}
    ops = dict(_library.OPS)
    ops.update((q.split("::", 1)[1], c) for q, c in _generated._customs.items() if q.startswith("canna::"))
    for name, op in ops.items():
        bw = name.endswith("_backward")
        base = name[: -len("_backward")] if bw else name
        base = alias.get(base, base)
        if base not in OFFLOAD_OPS:
            continue
        packet = getattr(torch.ops.canna, name)
        m[packet] = m[packet.default] = (base, bw)
    return m


_CANNA_OPS = _canna_custom_ops()


# ---------------------------------------------------------------------------------------------
# the report

#: functions that run autograd's backward pass (run with the mode active: :meth:`Offload._backward`)
_RUNS_BACKWARD = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})

#: PyTorch functions written in Python whose body is made of routable ops: their body runs with
#: the mode active (:meth:`Offload._compose`), so its ops (``linear``, ``scaled_dot_product_attention``
#: in ``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer``) are mapped one by one; the
#: function itself is not a compute call (PyTorch pops the mode while a handler runs, so without
#: this the whole body ran on PyTorch)
_COMPOSITES = frozenset({_nnf.multi_head_attention_forward})

_BOOKKEEPING = frozenset({"torch._C._set_grad_enabled", "torch.Tensor.backward", "torch.autograd.grad",
                          "torch.autograd.backward", "torch.Tensor.__repr__", "torch.Tensor.__format__",
                          "torch.Tensor.__str__", "torch.device"})


#: torch functions that compute nothing — views, metadata, shape and type queries, autograd flags —
#: left out of the compute-call count of :meth:`OffloadReport.coverage` (their names as
#: :attr:`OffloadReport.pytorch_calls` gives them). ``Tensor.contiguous`` of a contiguous tensor and
#: ``Tensor.__getitem__`` with basic indices (ints, slices, None, Ellipsis: a view), and
#: ``Tensor.to`` / ``.float()`` / ... to the tensor's own dtype and device (which return it) are not
#: recorded at all.
NOT_COMPUTE = frozenset(
    [f"torch.Tensor.{n}" for n in (
        "view", "view_as", "reshape", "reshape_as", "transpose", "t", "permute", "size", "dim", "ndimension",
        "numel", "nelement", "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "expand_as", "narrow", "select",
        "split", "chunk", "unbind", "detach", "detach_", "requires_grad_", "stride", "storage_offset", "is_contiguous",
        "is_floating_point", "is_complex", "data_ptr", "element_size", "get_device", "movedim", "swapaxes",
        "transpose_", "as_strided", "unfold", "__len__", "__iter__", "__hash__", "item", "tolist", "retain_grad",
        "register_hook", "is_nonzero", "type", "untyped_storage", "_is_view", "__bool__", "dtype.__get__",
        "mT", "mH", "H", "T", "__format__", "__repr__", "numpy", "__array__", "__reduce_ex__", "__deepcopy__",
        "share_memory_", "is_shared", "pin_memory", "is_pinned", "__contains__", "new_empty", "__index__", "__int__",
        "__float__", "storage", "has_names", "align_to", "refine_names", "rename", "is_inference",
        "_nested_tensor_size", "is_sparse", "dim_order")]
    + [f"torch.{n}" for n in (
        "is_tensor", "is_floating_point", "is_complex", "numel", "flatten", "reshape", "transpose", "permute",
        "squeeze", "unsqueeze", "t", "split", "chunk", "unbind", "narrow", "select", "movedim", "swapaxes",
        "view_as_real", "view_as_complex", "is_grad_enabled", "get_default_dtype", "is_inference_mode_enabled",
        "result_type", "can_cast", "promote_types", "broadcast_shapes", "is_autocast_enabled", "detach",
        "_assert_async", "_assert", "unflatten", "atleast_1d", "atleast_2d", "atleast_3d", "is_nonzero",
        "_C._get_tracing_state", "_C._get_cudnn_enabled", "_shape_as_tensor",
        "_C._nn._parse_to", "squeeze_copy", "sym_int", "sym_float", "sym_max", "sym_min", "sym_not")]
    + ["torch.functional.split", "torch.nn.functional.has_torch_function"]
    # the aten level's names (an overload counts under its operator: ``aten::_local_scalar_dense``
    # is ``Tensor.item``'s; the views never reach its report)
    + [f"aten::{n}" for n in (
        "_local_scalar_dense", "item", "is_nonzero", "is_same_size", "_assert_async", "_assert_scalar",
        "_functional_assert_async", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
        "_has_compatible_shallow_copy_type")])

#: torch tensor factories (allocate and fill: no op of a model's computation); counted apart from
#: the compute calls by :meth:`OffloadReport.coverage`
ALLOCATION = frozenset(
    [f"torch.{n}" for n in ("zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "tensor", "as_tensor",
                            "arange", "scalar_tensor", "eye", "linspace", "empty", "empty_like", "empty_strided",
                            "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm")]
    + [f"torch.Tensor.{n}" for n in ("new_zeros", "new_ones", "new_full", "new_tensor", "zero_", "fill_")]
    # the aten level's names (the factories' composite kernels reach it as their parts: ``torch.zeros_like``
    # as ``aten::zero_``, ``torch.arange`` as ``aten::arange.start_out``)
    + [f"aten::{n}" for n in ("zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "scalar_tensor",
                              "arange", "eye", "linspace", "empty", "empty_like", "empty_strided", "new_zeros",
                              "new_ones", "new_full", "new_empty", "new_empty_strided", "zero_", "fill_",
                              "lift_fresh_copy", "randperm",
                              # (the random factories' fills: torch.randint is aten::random_, rand uniform_,
                              # randn normal_)
                              "random_", "uniform_", "normal_")])

#: autograd nodes of PyTorch's backward pass that compute nothing (views and the leaves'
#: accumulation): left out of the compute-call count; matched by prefix of the node's class name
_NOT_COMPUTE_NODES = ("ViewBackward", "ReshapeAliasBackward", "UnsafeViewBackward", "TransposeBackward",
                      "PermuteBackward", "TBackward", "SqueezeBackward", "UnsqueezeBackward", "AliasBackward",
                      "AccumulateGrad", "CloneBackward", "DetachBackward", "ExpandBackward", "SelectBackward",
                      "SliceBackward", "AsStridedBackward", "SplitBackward", "UnbindBackward", "NarrowBackward",
                      "MovedimBackward", "UnflattenBackward")


_SAME_DTYPE = {_T.float: torch.float32, _T.double: torch.float64, _T.half: torch.float16,
               _T.bfloat16: torch.bfloat16, _T.long: torch.int64, _T.int: torch.int32, _T.bool: torch.bool}


def _to_is_noop(x, args, kwargs) -> bool:
    """``x.to(...)`` that returns ``x`` itself: its dtype, its device, ``non_blocking`` / ``copy`` False."""
    for v in list(args) + list((kwargs or {}).values()):
        if isinstance(v, torch.dtype):
            if v != x.dtype:
                return False
        elif isinstance(v, (torch.device, str)):
            try:
                if torch.device(v) != x.device:
                    return False
            except (RuntimeError, TypeError):
                return False
        elif v is not False and v is not None and v is not torch.preserve_format:
            return False
    return True


#: torch functions mapped to a canna op (a copy, a cast) that return their input for some
#: arguments (:func:`_is_view_call`): those calls run on PyTorch, uncounted
_MAYBE_VIEW = frozenset({_T.contiguous, _T.to, *_SAME_DTYPE})


def _is_view_call(func, args, kwargs=None) -> bool:
    """A call that returns a view or the tensor itself (not recorded)."""
    if func is _T.contiguous:
        return len(args) == 1 and isinstance(args[0], Tensor) and args[0].is_contiguous()
    if func is _T.to:
        return bool(args) and isinstance(args[0], Tensor) and _to_is_noop(args[0], args[1:], kwargs)
    dt = _SAME_DTYPE.get(func)
    if dt is not None:
        return len(args) == 1 and not kwargs and isinstance(args[0], Tensor) and args[0].dtype == dt
    if func is _T.__getitem__ and len(args) == 2:
        idx = args[1] if isinstance(args[1], tuple) else (args[1],)
        return all(i is None or i is Ellipsis or type(i) in (int, slice) for i in idx)
    return False


def _func_name(f) -> str:
    try:
        n = resolve_name(f)
    except Exception:
        n = None
    if n:
        return n
    qn = getattr(f, "__qualname__", None) or getattr(f, "__name__", None)
    if not qn:
        return repr(f)
    mod = getattr(f, "__module__", None)
    return f"{mod}.{qn}" if mod else qn


class OpStats:
    """Counters of one op in an :class:`OffloadReport`: ``canna`` (calls that ran on canna),
    ``fallback`` (calls that ran on PyTorch), ``backward`` (backward calls of canna's kernels
    for the op's forward calls in the block) and ``reasons`` (fallback reason → count)."""

    __slots__ = ("canna", "fallback", "backward", "reasons", "functions")

    def __init__(self):
        self.canna = 0
        self.fallback = 0
        self.backward = 0
        self.reasons: dict = {}
        self.functions: dict = {}   # torch function name -> calls (filled lazily)

    def refused(self, reason) -> None:
        """Count one call that ran on PyTorch, for ``reason``."""
        self.fallback += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def as_dict(self) -> dict:
        return {"canna": self.canna, "fallback": self.fallback, "backward": self.backward,
                "reasons": dict(self.reasons)}

    def __repr__(self):
        return (f"OpStats(canna={self.canna}, fallback={self.fallback}, backward={self.backward}, "
                f"reasons={self.reasons})")


class OffloadReport:
    """What :func:`offload` routed: per op of :data:`OFFLOAD_OPS`, the calls that ran on canna,
    the calls that fell back to PyTorch and why, and the backward calls of canna's kernels; and
    the other torch functions called in the block (they ran on PyTorch: no canna op; attribute
    reads such as ``.shape`` and ``.grad`` are not counted).

    Readable during and after the block: ``print(rep)`` (a plain table), ``rich.print(rep)`` (a
    rich table), :meth:`as_dict` (JSON-ready). Counters are plain ints updated under the GIL.
    """

    def __init__(self):
        self.ops: dict = {}
        self._other: dict = {}
        self._bw_other: dict = {}

    def _stat(self, name) -> OpStats:
        st = self.ops.get(name)
        if st is None:
            st = self.ops[name] = OpStats()
        return st

    @property
    def pytorch_calls(self) -> dict:
        """Torch functions without a canna op called in the block: name → calls (bookkeeping
        that computes nothing is left out: grad-mode switches, profiler ranges,
        ``Tensor.backward`` / ``torch.autograd.grad`` themselves and PyTorch's set-up of the
        backward pass before it runs, printing, ``torch.device`` objects)."""
        out: dict = {}
        for f, n in self._other.items():
            name = f if isinstance(f, str) else _func_name(f)   # (the aten level's are aten names)
            if name in _BOOKKEEPING or name.startswith("profiler."):
                continue
            out[name] = out.get(name, 0) + n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def pytorch_backward(self) -> dict:
        """PyTorch's own autograd nodes in the backward passes started in the block (the backward
        of the calls that ran on PyTorch): node class name → count, most first. canna's own
        backward calls are each op's ``backward`` counter."""
        return dict(sorted(self._bw_other.items(), key=lambda kv: (-kv[1], kv[0])))

    def coverage(self) -> dict:
        """The share of compute calls that ran on canna, forward, backward and optimizer together.

        Compute calls: the calls of canna's ops (``canna``, ``backward``), their fallbacks, the
        other torch functions (:attr:`pytorch_calls`) except :data:`NOT_COMPUTE` (views,
        metadata) and :data:`ALLOCATION` (tensor factories), and PyTorch's compute nodes of the
        backward passes (:attr:`pytorch_backward` without views and gradient accumulation).

        Returns:
            ``{"canna": int, "total": int, "share": float (1.0 when nothing was computed),
            "fallbacks": {op: {"count", "reasons"}}, "no_canna_op": {function: count},
            "pytorch_backward": {node: count}, "not_compute": {function: count},
            "allocation": {function: count}}``.
        """
        canna = sum(st.canna + st.backward for st in self.ops.values())
        fallbacks = {k: {"count": st.fallback, "reasons": dict(st.reasons)} for k, st in sorted(self.ops.items())
                     if st.fallback}
        no_op, views, alloc = {}, {}, {}
        for name, n in self.pytorch_calls.items():
            op = name.partition(".")[0] if name.startswith("aten::") else name   # (an aten overload: its operator)
            (views if op in NOT_COMPUTE else alloc if op in ALLOCATION else no_op)[name] = n
        bw = {k: n for k, n in self.pytorch_backward.items() if not k.startswith(_NOT_COMPUTE_NODES)}
        total = canna + sum(v["count"] for v in fallbacks.values()) + sum(no_op.values()) + sum(bw.values())
        return {"canna": canna, "total": total, "share": canna / total if total else 1.0, "fallbacks": fallbacks,
                "no_canna_op": no_op, "pytorch_backward": bw, "not_compute": views, "allocation": alloc}

    def fell_back(self) -> dict:
        """Ops with at least one fallback: name → {reason: count}."""
        return {k: dict(v.reasons) for k, v in sorted(self.ops.items()) if v.fallback}

    def as_dict(self) -> dict:
        """``{"ops": {op: {"canna", "fallback", "backward", "reasons"}}, "pytorch": {function: calls}}``."""
        return {"ops": {k: v.as_dict() for k, v in sorted(self.ops.items())}, "pytorch": self.pytorch_calls,
                "pytorch_backward": self.pytorch_backward}

    def reset(self) -> None:
        self.ops.clear()
        self._other.clear()
        self._bw_other.clear()

    def _rows(self):
        rows = []
        for name, st in sorted(self.ops.items()):
            reasons = "; ".join(f"{r} (x{n})" for r, n in sorted(st.reasons.items(), key=lambda kv: -kv[1]))
            rows.append((name, str(st.canna), str(st.fallback), str(st.backward), reasons))
        return rows

    def __str__(self):
        head = ("op", "canna", "fallback", "backward", "fallback reasons")
        rows = self._rows()
        widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(4)]
        lines = ["canna offload report"]
        fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths)) + "  {}"
        lines.append(fmt.format(*head).rstrip())
        for r in rows:
            lines.append(fmt.format(*r).rstrip())
        if not rows:
            lines.append("(no supported op was called)")
        other = self.pytorch_calls
        if other:
            lines.append("ran on PyTorch (no canna op): " + ", ".join(f"{k} x{n}" for k, n in other.items()))
        return "\n".join(lines)

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text
        t = Table(title="canna offload report", title_justify="left")
        t.add_column("op")
        for c in ("canna", "fallback", "backward"):
            t.add_column(c, justify="right")
        t.add_column("fallback reasons", overflow="fold")
        for r in self._rows():
            t.add_row(*r, style="yellow" if r[2] != "0" else None)
        other = self.pytorch_calls
        if not other:
            return t
        return Group(t, Text("ran on PyTorch (no canna op): " + ", ".join(f"{k} x{n}" for k, n in other.items()),
                             style="dim"))

    def __repr__(self):
        return (f"OffloadReport(canna={sum(s.canna for s in self.ops.values())}, "
                f"fallback={sum(s.fallback for s in self.ops.values())}, ops={sorted(self.ops)})")


# ---------------------------------------------------------------------------------------------
# the mode

_SAVED_TENSORS = torch._C._FunctionBase.saved_tensors   # the getset descriptor of ctx.saved_tensors


def _saved_tensors(ctx):
    """``ctx.saved_tensors`` of canna's Functions: the tuple their backward wrapper unpacked."""
    s = ctx.__dict__.pop("_canna_saved", None)
    return _SAVED_TENSORS.__get__(ctx) if s is None else s


def count_backward_in(r, st):
    """Count the backward of a routed call's result ``r`` (a tensor or a tuple, first its first
    tensor) in the report row ``st``: its node, when it is one of canna's, counts there when it runs."""
    t = r if type(r) is Tensor else (r[0] if type(r) is tuple else None)
    if t is not None:
        gf = t.grad_fn
        if gf is not None and type(gf) in _NODES:
            gf._canna_stat = st


def _count_backward(cls):
    """Wrap the backward of canna's autograd Function ``cls``: count the call in the report of
    the ``offload()`` block that made the node, and unpack the saved tensors before the backward
    body disables torch-function handling (``NoTorchFunction``) for its kernel calls: unpacking
    runs the saved-tensor hooks, and non-reentrant activation checkpointing recomputes the
    forward there, which must run under the same torch-function modes as the forward did (this
    one routing it to canna: the same Functions saving the same tensors; PyTorch's ``torch.device``
    mode; a tensor subclass's handler). The body's ``ctx.saved_tensors`` gets that tuple
    (a second unpack would raise ``CheckpointError``)."""
    bw = cls.backward

    def backward(ctx, *grads):
        st = getattr(ctx, "_canna_stat", None)
        if st is not None:
            st.backward += 1
        ctx._canna_saved = _SAVED_TENSORS.__get__(ctx)
        try:
            return bw(ctx, *grads)
        finally:
            ctx.__dict__.pop("_canna_saved", None)
    backward.__doc__ = bw.__doc__
    cls.backward = staticmethod(backward)
    cls._backward_cls.saved_tensors = property(_saved_tensors)


for _cls in [c._forward_cls for c in _NODES]:
    _count_backward(_cls)


try:
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy
    from torch._C._dynamo.eval_frame import set_code_exec_strategy as _set_code_exec_strategy
    _SKIP_RECURSIVELY = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
except ImportError:     # a PyTorch without per-code frame strategies
    _set_code_exec_strategy = None


def _not_a_dynamo_frame(code):
    """Tell Dynamo never to compile the frames of ``code``, nor the frames they call, as frames of
    their own: they run as plain Python.

    Code that a compiled function runs in eager mode (a frame Dynamo skipped or split at a graph
    break: with an ``nn.LSTM``, which Dynamo does not trace, the whole ``forward`` is skipped)
    still has Dynamo's frame hook set, and the mode's ``__torch_function__`` is a Python frame
    outside ``torch/``: Dynamo compiled it, once per call signature, guarding the arguments but
    not ``func`` when it is a builtin (``Tensor.size``, ``TensorBase.dtype.__get__``), so the
    entry made for ``input.size(0)`` answered ``input.dtype`` with an int.
    The dispatch is runtime machinery, like PyTorch's own modes in ``torch/``, which Dynamo does
    not compile as frames either. Dynamo still inlines ``__torch_function__`` while it traces a
    function called under the mode (a frame strategy applies to frames run, not to traced code).
    Set at every ``__enter__``: ``torch._dynamo.reset()`` clears the strategies of the code
    objects it has seen."""
    if _set_code_exec_strategy is not None:
        _set_code_exec_strategy(code, _SKIP_RECURSIVELY)


def block_options(api, rows, ops, exclude, report, known=()):
    """``(enabled rows, all of them?, report)`` of an offload block's ``ops`` / ``exclude`` /
    ``report`` arguments, ``rows`` the level's report rows, ``known`` other names accepted (the
    other level's rows: a name this level does not route selects nothing).

    Raises:
        ValueError: an unknown op name. TypeError: ``report`` is not an OffloadReport.
    """
    names = set(rows) if ops is None else set(ops)
    unknown = (names | set(exclude)) - set(rows) - set(known)
    if unknown:
        raise ValueError(f"{api}: unknown ops {sorted(unknown)} (supported: {', '.join(rows)})")
    if report is not None and not isinstance(report, OffloadReport):
        raise TypeError(f"canna_dl.torch.offload: report must be an OffloadReport, not {type(report).__name__}")
    enabled = frozenset(names - set(exclude))
    return enabled, enabled >= frozenset(rows), report if report is not None else OffloadReport()


class Offload(TorchFunctionMode):
    """The torch-function mode behind :func:`offload` (one per ``with`` block)."""

    def __init__(self, *, ops=None, exclude=(), strict=False, report=None, quiet=False):
        super().__init__()
        self.enabled, self._all, self.report = block_options("canna_dl.torch.offload", OFFLOAD_OPS, ops, exclude,
                                                             report)
        self.strict = bool(strict)
        #: route only: the torch functions without a canna op and PyTorch's backward nodes are not
        #: counted (an aten-level block routes its user ops' torch functions through this mode and
        #: counts the aten operators they run itself)
        self._quiet = bool(quiet)
        self._in_backward = 0   # > 0: in _backward (its calls outside a graph task are PyTorch's set-up)
        self._fast = _FAST if self._all else _NO_FAST   # the C per-call fast path serves all-ops blocks

    def __enter__(self):
        acl_rt.init()
        _not_a_dynamo_frame(Offload.__torch_function__.__code__)
        super().__enter__()
        _team.enter()
        return self.report

    def __exit__(self, exc_type, exc_value, tb):
        _team.exit()
        return super().__exit__(exc_type, exc_value, tb)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if is_compiling():
            return self._traced(func, args, kwargs)
        if self._in_backward and _compile_underway():
            # AOTAutograd compiling a compiled graph's backward at its first backward pass: the
            # compiler's own calls (on fake tensors) are neither routed nor counted
            return func(*args, **kwargs) if kwargs else func(*args)
        okey = None
        fe = self._fast.get(func)
        if fe is not None:   # (C checks: no autocast, no functorch transform, the plans' runtime generation)
            r = _offload_fast(fe, args, kwargs, self.report.ops, _OCACHE)
            if r is not None:
                if type(r) is not bytes:
                    return r
                okey = r
        e = _TABLE.get(func)
        if e is not None and func in _MAYBE_VIEW and _is_view_call(func, args, kwargs):
            return func(*args, **kwargs) if kwargs else func(*args)   # returns its input: not compute
        if e is None or (not self._all and e[0] not in self.enabled):
            c = _CANNA_OPS.get(func)
            if c is not None:   # a compiled graph calling canna's custom ops
                st = self.report._stat(c[0])
                if c[1]:
                    st.backward += 1
                else:
                    st.canna += 1
            elif func in _COMPOSITES and _redispatch is not None:
                return self._compose(func, types, args, kwargs)
            elif getattr(func, "__name__", None) not in ("__get__", "__set__") and not _is_view_call(func, args, kwargs):
                if not self._quiet and (not self._in_backward or _graph_task_id() >= 0):   # (not a backward's set-up)
                    other = self.report._other
                    other[func] = other.get(func, 0) + 1
                if func in _RUNS_BACKWARD and _redispatch is not None:
                    return self._backward(func, types, args, kwargs)
            return func(*args, **kwargs) if kwargs else func(*args)
        name, sig, handler = e
        st = self.report.ops.get(name)
        if st is None:
            st = self.report._stat(name)
        refused = _REFUSED.get(func)
        key = None
        try:
            if refused is not None:
                key = _sig_key(args, kwargs)
                reason = refused.get(key)
                if reason is not None:
                    raise _Fallback(reason)
            if _autocast_on():
                raise _Fallback("autocast is enabled (canna computes in the operands' dtype)")
            if functorch_active():
                raise _Fallback("a torch.func transform is active")
            vals = sig.bind(args, kwargs)
            with NoTorchFunction():
                r = handler(vals)
        except (_Fallback,) + _CAUGHT as exc:
            reason = refusal_reason(exc)
            if type(exc) is TypeError:   # decided by types and dtypes: remember the signature
                if refused is None:
                    refused = _REFUSED.setdefault(func, {})
                if len(refused) < _REFUSED_MAX:
                    refused[key if key is not None else _sig_key(args, kwargs)] = reason
        else:
            st.canna += 1
            if okey is not None:
                _fast_register(okey)
            count_backward_in(r, st)
            return r
        st.refused(reason)
        if self.strict:
            raise RuntimeError(f"canna_dl.torch.offload(strict=True): {_func_name(func)} ({name}) would "
                               f"fall back to PyTorch: {reason}")
        return func(*args, **kwargs) if kwargs else func(*args)

    def _backward(self, func, types, args, kwargs):
        """``Tensor.backward`` / ``torch.autograd.backward`` / ``torch.autograd.grad`` with this
        mode active in the backward pass: PyTorch pops a mode while its ``__torch_function__``
        runs, so the Python-level ops of the backward pass would run on PyTorch. They are routed
        as in the forward instead, which non-reentrant activation checkpointing
        (``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, Hugging Face's
        ``gradient_checkpointing_enable()``) requires: it recomputes the forward inside the
        backward and raises ``CheckpointError`` unless the recomputation saves as many tensors,
        of the same metadata, as the forward did (canna's ops save other tensors than PyTorch's;
        PyTorch itself re-enters only its ``torch.device`` mode for the recomputation,
        pytorch/pytorch#124788). Hooks run in the backward pass are routed too.
        ``redispatch_function`` skips the one dispatch of ``func`` itself to the mode; the
        autograd engine runs the pass with the thread-local state of this call (the mode stack
        included), on this thread for a CPU graph."""
        self._count_graph(args, kwargs)
        _push_mode(self)
        self._in_backward += 1
        try:
            return _redispatch(func, types, args, kwargs or {})
        finally:
            self._in_backward -= 1
            _pop_mode()

    def _count_graph(self, args, kwargs):
        """Count PyTorch's own autograd nodes of the graph a backward pass is about to run (the
        report's :attr:`~OffloadReport.pytorch_backward`; canna's nodes count themselves). Once per
        pass: ``Tensor.backward`` calls ``torch.autograd.backward``, which reaches the mode again."""
        if self._in_backward or self._quiet:
            return
        roots = args[0] if args else (kwargs or {}).get("tensors", (kwargs or {}).get("outputs"))
        roots = (roots,) if isinstance(roots, Tensor) else tuple(roots or ())
        seen, stack = set(), [t.grad_fn for t in roots if isinstance(t, Tensor) and t.grad_fn is not None]
        counts = self.report._bw_other
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if type(node) not in _NODES:
                name = type(node).__name__
                counts[name] = counts.get(name, 0) + 1
            stack.extend(n for n, _ in node.next_functions if n is not None and n not in seen)
    def _compose(self, func, types, args, kwargs):
        """A function of :data:`_COMPOSITES`: its body with this mode active (``redispatch_function``
        skips the one dispatch of ``func`` itself to the mode, as in :meth:`_backward`)."""
        _push_mode(self)
        try:
            return _redispatch(func, types, args, kwargs or {})
        finally:
            _pop_mode()

    def _traced(self, func, args, kwargs):
        """The same routing while Dynamo traces (``torch.compile``): the handlers reach the
        ``torch.ops.canna`` custom ops; nothing is counted (the report counts eager calls)."""
        e = _TABLE.get(func)
        if e is not None and (self._all or e[0] in self.enabled):
            try:
                return e[2](e[1].bind(args, kwargs or {}))
            except (_Fallback,) + _CAUGHT:
                pass
        return func(*args, **kwargs) if kwargs else func(*args)


_default = {}


def default_level() -> str:
    """The level of :func:`offload` without ``level=`` and ``CANNA_OFFLOAD_LEVEL``: ``"aten"``
    where it is available (:func:`canna_dl.torch._aten.available`: a C++ compiler and PyTorch's
    C++ headers, the unified memory model; compiles its library on the first call), else
    ``"function"``, with a :class:`RuntimeWarning` saying why (once per process)."""
    lv = _default.get("level")
    if lv is None:
        from . import _aten
        lv = _default["level"] = "aten" if _aten.available() else "function"
        if lv == "function":
            import warnings
            warnings.warn(f"canna_dl.torch.offload(): level='aten' is not available here ({_aten.why_unavailable()}); "
                          "the function level runs instead (set CANNA_OFFLOAD_LEVEL=function to choose it)",
                          RuntimeWarning, stacklevel=3)
    return lv


def resolve_level(level=None):
    """``(level, where it came from)``: the ``level`` :func:`offload` runs at for its ``level=``
    argument (None: ``CANNA_OFFLOAD_LEVEL``, else :func:`default_level`)."""
    if level is not None:
        return level, "level"
    import os
    env = os.environ.get("CANNA_OFFLOAD_LEVEL")
    return (env, "CANNA_OFFLOAD_LEVEL") if env else (default_level(), "level")


def offload(*, ops=None, exclude=(), strict=False, report=None, level=None):
    """Run the supported PyTorch ops of a block on canna, the others on PyTorch::

        with canna_dl.torch.offload() as rep:
            loss = F.cross_entropy(model(x), y)     # conv2d, relu, max_pool2d, linear, ... on canna
            loss.backward()                         # their backward on canna's backward kernels
            opt.step()                              # p.add_(g, alpha=-lr) on canna
        print(rep)                                  # per op: calls on canna, fallbacks and why

    Args:
        ops: names of the ops to route (default: all of :data:`OFFLOAD_OPS`).
        exclude: names of ops to leave on PyTorch.
        strict: raise RuntimeError instead of falling back when a routed op's arguments are not
            supported (for tests and debugging; other torch functions still run on PyTorch).
        report: an :class:`OffloadReport` to add to (e.g. one per training run, across blocks);
            default: a new one.
        level: ``"aten"`` (aten operators below PyTorch's autograd; see below) or
            ``"function"`` (torch functions, canna's own autograd); default: the
            ``CANNA_OFFLOAD_LEVEL`` environment variable, else :func:`default_level` (``"aten"``
            where it is available).

    Returns:
        An :class:`Offload` (a ``torch.overrides.TorchFunctionMode``; ``level="aten"``: an
        ``AtenOffload``); ``with`` gives its :class:`OffloadReport`.

    A block applies to the thread that enters it, and to the backward passes started in it.

    ``level="function"`` routes torch functions (``F.relu``, ``torch.add``, ``Tensor.add_``) to
    canna's ops with canna's own autograd (keep ``loss.backward()`` inside the block when the model
    uses activation checkpointing: the recomputation must run canna's ops again). Inside
    ``torch.compile`` the routed ops are the ``torch.ops.canna`` custom ops (in-place ops fall
    back there).

    ``level="aten"`` (the default where available) routes below PyTorch's autograd: the aten operators PyTorch's
    dispatcher runs for the forward *and* for PyTorch's own backward formulas (``aten::mm``,
    ``aten::threshold_backward``, ...) run on canna's kernels where a registry entry names them
    (:data:`canna_dl.torch._aten.ATEN_OPS` rows), everything else on PyTorch's kernels, with no
    Python on the way for those; gradients are PyTorch's formulas, so the graph is exactly
    PyTorch's (activation checkpointing, ``torch.func`` and autocast work as without canna). The
    report has the function level's rows (a backward formula's operators in the ``backward``
    column of their forward's row) and counts, as PyTorch's calls, the aten operators that ran on
    PyTorch (views left out); user ops registered with ``torch=`` run for their torch functions
    there too. It needs a C++ compiler and PyTorch's C++ headers (a library compiled
    on first use, cached); see :mod:`canna_dl.torch._aten`.

    Raises:
        ValueError: an unknown op name or level. TypeError: ``report`` is not an OffloadReport.
        RuntimeError: ``level="aten"`` is not available here (the message says why).
    """
    level, source = resolve_level(level)
    if level == "aten":
        from ._aten import AtenOffload
        return AtenOffload(ops=ops, exclude=exclude, strict=strict, report=report)
    if level != "function":
        raise ValueError(f"canna_dl.torch.offload: {source} must be 'function' or 'aten', not {level!r}")
    return Offload(ops=ops, exclude=exclude, strict=strict, report=report)
