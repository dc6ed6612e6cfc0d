"""Logical reductions and comparisons (issue 14; comparisons at the end of the file): ``all`` / ``any`` — ``torch.all``, ``Tensor.all``, ``torch.any``,
``Tensor.any`` (Hugging Face's mask checks, ``padding_mask.all()``) — one ``aclnnAll`` /
``aclnnAny`` each (``kernels/_sim/op_reduce.c``): whether every / some element along ``dim`` is
nonzero (NaN is nonzero), a bool result (uint8 for a uint8 input, as PyTorch). Not
differentiable.
"""
from __future__ import annotations

import struct

from .. import _core as C
from .convert import CAST_DTYPES
from .elementwise import CHECKED_RANGE, checked_convert_overflows
from .nn import _reduced
from .._registry import INT_LIST, Aclnn, Attr, Rejected, Spec, Tensor, TorchFn, define
from .._registry import torch_dtype_name as _dt


def _logical_shape(x, dim=None, keepdim=False):
    s = _reduced(x, dim, keepdim)
    return Spec(s.shape, C.UINT8 if x.dtype == C.UINT8 else C.BOOL)


def _dims(lib, keep, dim, keepdim):
    """aclnn's ``dim`` (an aclIntArray; empty: every dim, the simulator's rule for a reduction
    without dims) and ``keepdim``."""
    h = C.Param.ints(lib, () if dim is None else tuple(dim))
    keep.append(h)
    return (h, bool(keepdim))


def _no_empty_dim(x, dim, keepdim):
    """offload()'s guard: ``dim=()`` falls back to PyTorch (whose meaning of it changed across versions)."""
    return "dim=()" if dim is not None and not isinstance(dim, int) and len(tuple(dim)) == 0 else None


_ATTRS = (Attr("dim", INT_LIST, None), Attr("keepdim", bool, False))
for _name, _what in (("all", "every"), ("any", "some")):
    define(_name, inputs=(Tensor("x", CAST_DTYPES, diff=False),), attrs=_ATTRS, shape=_logical_shape,
           forward=Aclnn(_name.capitalize(), params=_dims),
           torch=((f"torch.{_name}", _no_empty_dim), (f"torch.Tensor.{_name}", _no_empty_dim)),
           # native_functions.yaml: all / all.dim / all.dims (any the same); Tensor.all() reaches
           # canna's key as aten::all.all_out through the composite kernel this item overrides
           aten=((f"aten::{_name}", "self:x"), (f"aten::{_name}.dim", "self:x, dim, keepdim"),
                 (f"aten::{_name}.dims", "self:x, dim=None, keepdim=False", _no_empty_dim)),
           doc=f"Whether {_what} element of ``x`` along ``dim`` is nonzero (``torch.{_name}``; "
               f"``aclnn{_name.capitalize()}``): ``dim`` an int or a list of ints (None: all dims), ``keepdim`` "
               "keeps them as size 1. NaN counts as nonzero. Any dtype of :func:`kernels.astype`; the result is "
               "bool (uint8 for a uint8 ``x``, as PyTorch).\n\nRaises:\n    AxisError: a dim out of range or "
               "repeated.")


# ---------------------------------------------------------------------------------------------
# comparisons: x OP y, y an array (broadcast) or a Python number, a bool result

def _compare_shape(x, y):
    ys = () if C.is_scalar(y) else tuple(y.shape)
    return Spec(C.broadcast_shapes("shape rule", tuple(x.shape), ys), C.BOOL)


def _holds(dt_name, v) -> bool:
    """Whether the float ``v`` is exactly a value of the floating dtype ``dt_name`` (NaN and the
    infinities are)."""
    if v != v or abs(v) == float("inf"):
        return True
    try:
        if dt_name == "float16":
            return struct.unpack("e", struct.pack("e", v))[0] == v
        f = struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:   # (beyond the format's range)
        return False
    if dt_name == "bfloat16":   # (bfloat16 is float32's upper 16 bits)
        return f == v and not struct.unpack("I", struct.pack("f", f))[0] & 0xFFFF
    return f == v if dt_name == "float32" else dt_name == "float64"


#: the non-floating dtypes each of whose values a floating dtype holds exactly
_EXACT_IN = {"float16": ("bool", "int8", "uint8"), "bfloat16": ("bool", "int8", "uint8"),
             "float32": ("bool", "int8", "uint8", "int16")}


_CAST_NAMES = frozenset(d.name for d in CAST_DTYPES)


def _spec(t):
    return Spec(tuple(t.shape), C._D[_dt(t)])


def _compare_exact(x, y):
    """offload(level="aten")'s guard of the comparisons (``aten::eq.Tensor``, ``aten::eq.Scalar``,
    ...): PyTorch converts both operands to their common dtype (``torch.result_type``: a 0-d tensor
    or a number only raises the category; an integer tensor against a float number is float32) and
    compares there (``aten/src/ATen/native/BinaryOps.cpp``, ``comparison_op``; TensorIterator's
    common dtype). canna's kernel compares in the two tensors' promoted dtype (float16 / bfloat16
    values in float32) and an integer tensor against a float number in float64: the signatures
    where the two could differ run on PyTorch — a 0-d operand of a higher dtype, an integer that
    a float16 / bfloat16 common dtype rounds, a number the tensor's dtype does not hold (rounded or
    wrapped by aten first), an int32 / int64 tensor against a float number."""
    xd = _dt(x)
    if xd not in _CAST_NAMES or not (C.is_scalar(y) or _dt(y) in _CAST_NAMES):
        return None   # (the kernel's TypeError)
    if not C.is_scalar(y):
        p, q = C.result_type(_spec(x), _spec(y)), C.promote_types(C._D[xd], C._D[_dt(y)])
        if p is not q:
            return f"a 0-d operand: aten compares in {p.name}, canna's kernel in {q.name}"
        rounds = [d for d in (xd, _dt(y)) if C.category(C._D[d]) < 2 and d not in _EXACT_IN.get(p.name, (d,))]
        return f"{rounds[0]} values compared in {p.name} (aten rounds them first)" if rounds else None
    fx = C.category(C._D[xd]) == 2
    if isinstance(y, float):
        if fx:
            return None if _holds(xd, y) or xd == "float32" else f"{y!r} is not a {xd} (aten rounds it first)"
        return None if xd in _EXACT_IN["float32"] and _holds("float32", y) else \
            f"{xd} values against the float {y!r} (aten compares in float32)"
    if isinstance(y, bool):
        return None
    if fx:
        fits = _holds(xd, float(y)) if xd in ("float16", "bfloat16") else abs(y) <= 2 ** 53
    else:   # (a bool tensor against an int compares in int64, canna's kernel in int32)
        lo, hi = CHECKED_RANGE["int32" if xd == "bool" else xd]
        fits = lo <= y <= hi
    return None if fits else f"the number {y} is not a {xd} (aten converts it first)"


_T = "torch.Tensor."
_COMPARISONS = (("eq", "Eq", "==", ("torch.eq", _T + "eq", _T + "__eq__")),
                ("ne", "Ne", "!=", ("torch.ne", "torch.not_equal", _T + "ne", _T + "not_equal", _T + "__ne__")),
                ("lt", "Lt", "<", ("torch.lt", "torch.less", _T + "lt", _T + "less", _T + "__lt__")),
                ("le", "Le", "<=", ("torch.le", "torch.less_equal", _T + "le", _T + "less_equal", _T + "__le__")),
                ("gt", "Gt", ">", ("torch.gt", "torch.greater", _T + "gt", _T + "greater", _T + "__gt__")),
                ("ge", "Ge", ">=", ("torch.ge", "torch.greater_equal", _T + "ge", _T + "greater_equal",
                                    _T + "__ge__")))
for _name, _acl, _op, _fns in _COMPARISONS:
    define(_name, inputs=(Tensor("x", CAST_DTYPES, diff=False), Tensor("y", CAST_DTYPES, diff=False, scalar=True)),
           shape=_compare_shape, forward=Aclnn(f"{_acl}Tensor", scalar=f"{_acl}Scalar"),
           torch=tuple(TorchFn(f, ("input", "other:y")) for f in _fns), elementwise=True,
           # native_functions.yaml: <name>.Tensor, <name>.Scalar (a Scalar ``other``: the number);
           # their composite kernels reach canna's key as <name>.Tensor_out / Scalar_out otherwise
           aten=tuple(TorchFn(f"aten::{_name}.{o}", "self:x, other:y", guard=_compare_exact) for o in ("Tensor", "Scalar")),
           doc=f"``x {_op} y`` elementwise (``torch.{_name}``; ``aclnn{_acl}Tensor`` / ``aclnn{_acl}Scalar``): ``y`` "
               "an array broadcast with ``x`` or a Python number; compared in the operands' promoted dtype (an "
               "integer array against a float number as float64); NaN compares unequal to everything. Any dtype "
               "of :func:`kernels.astype`; a bool result. Not differentiable.\n\nRaises:\n    TypeError: another dtype. "
               "ValueError: shapes that do not broadcast.")


# ---------------------------------------------------------------------------------------------
# maximum / minimum of two arrays (broadcast, PyTorch's promotion; NaN propagates)

def _minmax_shape(x, y):
    return Spec(C.broadcast_shapes("shape rule", tuple(x.shape), tuple(y.shape)), C.result_type(x, y))


def _minmax_backward(pick):
    """The gradient goes to the operand chosen, split in half where they are equal (PyTorch's
    ``tools/autograd/derivatives.yaml``: ``maximum``, ``minimum``)."""
    def backward(ops, g, x, y):
        share = ops.add(ops.cast(pick(ops, x, y), g.dtype), ops.mul(ops.cast(ops.eq(x, y), g.dtype), 0.5))
        gx = ops.mul(g, share)
        return gx, ops.sub(g, gx)
    return backward


def _other_is_a_tensor(x, y):
    """offload()'s guard of ``torch.max`` / ``torch.min``: the two-tensor form only (a dim or none
    is a reduction, PyTorch's)."""
    return None if type(y).__name__ in ("Tensor", "Parameter") else f"{type(y).__name__} second argument (a reduction)"


for _name, _acl, _red, _pick in (("maximum", "Maximum", "max", lambda ops, x, y: ops.gt(x, y)),
                                  ("minimum", "Minimum", "min", lambda ops, x, y: ops.lt(x, y))):
    define(_name, inputs=(Tensor("x", C.ARITH), Tensor("y", C.ARITH)), shape=_minmax_shape,
           forward=Aclnn(_acl), save=("x", "y"), backward=_minmax_backward(_pick),
           torch=(TorchFn(f"torch.{_name}", ("input", "other:y")),
                  TorchFn(f"{_T}{_name}", ("input", "other:y")),
                  (f"torch.{_red}", "input, other:y", _other_is_a_tensor),
                  (f"{_T}{_red}", "input, other:y", _other_is_a_tensor)),
           aten=((f"aten::{_name}", "self:x, other:y"),), elementwise=True,   # (native_functions.yaml)
           doc=f"The elementwise {_name} of ``x`` and ``y`` (``torch.{_name}``, ``torch.{_red}(x, y)``; "
               f"``aclnn{_acl}``), broadcast, in their promoted dtype; a NaN in either gives NaN. Its gradient "
               "goes to the operand chosen, half to each where they are equal. Floating, int32 and int64 "
               "dtypes.\n\nRaises:\n    TypeError: another dtype. ValueError: shapes that do not broadcast.")


# ---------------------------------------------------------------------------------------------
# where: condition ? x : y

def _where_shape(condition, x, y):
    if C.is_scalar(x) and C.is_scalar(y):
        raise TypeError("kernels.where: x and y cannot both be Python numbers (give one as an array)")
    shapes = [tuple(condition.shape)] + [() if C.is_scalar(t) else tuple(t.shape) for t in (x, y)]
    return Spec(C.broadcast_shapes("kernels.where", *shapes), C.result_type(x, y))


def _where_backward(ops, g, condition):
    """The gradient goes to ``x`` where ``condition`` holds, to ``y`` elsewhere (PyTorch's
    ``tools/autograd/derivatives.yaml``: ``where.self``)."""
    return ops.where(condition, g, 0.0), ops.where(condition, 0.0, g)


#: masked_fill's schema arguments as where's: the value where the mask holds, else self
_MF = "self:y, mask:condition, value:x"


def _masked_fill_aten(condition, x, y):
    """offload(level="aten")'s guard of ``aten::masked_fill(self, mask, value)`` (``y``, ``condition``,
    ``x`` here): PyTorch writes the value converted to self's dtype
    (``aten/src/ATen/native/TensorAdvancedIndexing.cpp``, ``masked_fill_impl_cpu``: ``value.to<scalar_t>()``,
    an overflow check for the dtypes of :data:`kernels.ops.elementwise.CHECKED_RANGE`), which is
    where's result where the value does not raise the category: a float value for an integer or bool
    self (which aten truncates) runs on PyTorch."""
    if not C.is_scalar(x):
        return "a tensor value"
    yd = _dt(y)
    if isinstance(x, float) and not y.is_floating_point():
        return f"a float value for {yd} self (aten truncates it)"
    if checked_convert_overflows(yd, x):
        return Rejected(f"the value {x!r} overflows {yd} (aten::masked_fill rejects it)")
    return None


define("where", inputs=(Tensor("condition", (C.BOOL,), diff=False), Tensor("x", C.ARITH, scalar=True),
                        Tensor("y", C.ARITH, scalar=True)),
       shape=_where_shape, forward=Aclnn("SWhere"), save=("condition",), backward=_where_backward, elementwise=True,
       torch=(TorchFn("torch.where", ("condition", "input:x", "other:y")),),
       # native_functions.yaml: where.self; masked_fill.Scalar / masked_fill_.Scalar are
       # where(mask, value, self) in self's dtype
       aten=(TorchFn("aten::where.self", "condition, self:x, other:y"),
             TorchFn("aten::masked_fill.Scalar", _MF, guard=_masked_fill_aten, report="masked_fill"),
             TorchFn("aten::masked_fill_.Scalar", _MF, guard=_masked_fill_aten, inplace=True, report="masked_fill_")),
       doc="``x`` where ``condition`` is True, else ``y`` (``torch.where(condition, input, other)``; "
           "``aclnnSWhere``): the three broadcast together; ``x`` or ``y`` may be a Python number (a weak scalar in "
           "PyTorch's promotion); the result has their promoted dtype. ``condition`` bool; ``x``, ``y`` floating, "
           "int32 or int64. Its gradient goes to ``x`` where ``condition`` holds, to ``y`` elsewhere.\n\n"
           "Raises:\n    TypeError: other dtypes, two Python numbers. ValueError: shapes that do not broadcast.")
