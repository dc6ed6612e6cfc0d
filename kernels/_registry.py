"""The op registry (docs/DESIGN.md §11): one declarative definition per op, the only place its facts
live, and what is generated from it.

An :class:`OpDef` states an op's name; its array inputs (:class:`Tensor`: name, dtypes, optional)
and attributes (:class:`Attr`: type, default); its outputs; the shape/dtype rule (a function of
:class:`Spec`-like inputs — anything with ``.shape`` and ``.dtype`` — and the attributes, returning
one :class:`Spec` per output); the forward (:class:`Aclnn`: one aclnn call; :class:`Launch`: a
RawKernel with its host-side launch rule; or a function composing registered ops); the backward
(a function of registered ops, with the inputs or outputs it saves named in ``save``); and what it
answers to in each framework (``torch``: the torch functions ``offload()`` maps to it; ``aten``:
the aten operator overloads ``offload(level="aten")`` runs it for, below PyTorch's autograd; ``tf``
/ ``jax``: the names in ``canna_dl.tf`` / ``canna_dl.jax``).

From one entry are generated:

- the kernel-level function (``kernels.relu``, ...: argument binding, the input checks —
  ``None`` or a non-array for a required array is a TypeError —, dtypes, the shape rule, ``out=``,
  the plan cache and the C fast path for torch tensors, keyed by the op's :class:`OpId`);
- the PyTorch shim (``canna_dl/torch/_generated.py``: eager ``autograd.Function``,
  ``torch.library.custom_op`` with ``register_fake`` from the shape rule and ``register_autograd``
  from the backward, the ``offload()`` mapping), the TensorFlow shim (``canna_dl/tf/_generated.py``,
  eager and ``tf.function`` with static shapes from the shape rule) and the JAX shim
  (``canna_dl/jax/_generated.py``, ``custom_vjp``, ``jit`` through ``pure_callback``);
- the tests' parametrization and the README's op list (``tests/test_registry.py`` checks it).

The backward is written once, against a namespace of registered ops (its first argument ``ops``):
each framework runs it with its own namespace (kernels on eager tensors; differentiable
``canna_dl.torch`` ops when PyTorch builds a graph of the backward, which gives double backward;
``torch.ops.<ns>.*`` under ``torch.compile``; the shape rules themselves, on :class:`Spec` s, when a
registration is checked).

Users register their own ops through the same path: :func:`register_op`.
"""
from __future__ import annotations

import builtins
import enum
import inspect
import keyword
import math
import numbers
import operator
import sys
import threading

import canna_dl

from . import _core as C
from . import _native

__all__ = ["Tensor", "TensorList", "Attr", "Spec", "Aclnn", "Launch", "Impl", "OpDef", "TorchFn", "register_op",
           "get_op", "registered_ops", "OpId", "op_id", "RegistrationError", "draw_seed"]

_REQ = object()     # a required attribute
_I64 = (-(1 << 63), (1 << 63) - 1)   # the range of an int attribute (an int64 in every schema)


class RegistrationError(ValueError):
    """A registration that cannot work (raised by :func:`register_op`, naming the problem)."""


def _dtypes(v, default):
    if v is None:
        return default
    if isinstance(v, str):
        v = {"float": C.FLOATS, "arith": C.ARITH, "int": C.INTS}.get(v, (v,))
    return tuple(canna_dl.dtype(d) for d in v)


class Tensor:
    """An array input of an op: ``name``; ``dtypes`` (canna/NumPy/torch dtypes or names, or
    ``"float"`` — the default: float32, float64, float16, bfloat16 — or ``"arith"``); ``optional``
    (None allowed); ``diff`` (gets a gradient; default True, False for a mutated input);
    ``mutated`` (the op updates this input in place, e.g. batch norm's running statistics or an
    optimizer's parameter and moments: torch schema ``Tensor(a!)``, ``mutates_args``; the caller's
    array is written — in TensorFlow a ``tf.Variable`` is assigned the new value, in JAX, which
    is functional, the new value is returned after the outputs); ``scalar`` (it may also be a
    Python number: a "weak" scalar in PyTorch's type promotion, ``x + 2``; aclnn takes it as an
    aclScalar where the op has a scalar form — see :class:`Aclnn` — else as a 0-d array; the torch
    custom op of that call is the entry's scalar variant, see ``canna_dl/torch/_generated.py``). At
    least one array input of a call must be an array."""

    __slots__ = ("name", "dtypes", "optional", "diff", "mutated", "scalar")

    list = False   # a TensorList

    def __init__(self, name, dtypes=None, *, optional=False, diff=None, mutated=False, scalar=False):
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise RegistrationError(f"input name {name!r} is not a Python identifier")
        self.name = name
        self.dtypes = _dtypes(dtypes, C.FLOATS)
        self.optional = builtins.bool(optional)
        self.mutated = builtins.bool(mutated)
        if self.mutated and diff:
            raise RegistrationError(f"input {name}: a mutated input (updated in place) cannot be differentiable "
                                    "(diff=True)")
        self.diff = (not self.mutated) if diff is None else builtins.bool(diff)
        self.scalar = builtins.bool(scalar)

    def __repr__(self):
        return (f"Tensor({self.name!r}{', optional' if self.optional else ''}{', mutated' if self.mutated else ''}"
                f"{', scalar' if self.scalar else ''})")


class TensorList(Tensor):
    """An input that is a list (or tuple) of arrays — torch schema ``Tensor[]`` — e.g. the tensors
    ``cat`` joins or the parameters of a ``foreach`` optimizer step: ``name``, ``dtypes`` (each
    array's; see :class:`Tensor`), ``diff``, ``mutated`` (every array of the list is updated in
    place). The shape rule, a :class:`Launch` rule and a composed forward get the list; a RawKernel
    gets its arrays as consecutive arguments at the list's place; an :class:`Aclnn` forward gets
    an ``aclTensorList``; the backward returns a list of gradients (one per array) or None for it."""

    __slots__ = ()

    list = True

    def __init__(self, name, dtypes=None, *, diff=None, mutated=False):
        super().__init__(name, dtypes, diff=diff, mutated=mutated)

    def __repr__(self):
        return f"TensorList({self.name!r}{', mutated' if self.mutated else ''})"


#: one input's place in a flat list of arrays: ``None`` absent, ``-1`` one array, ``n`` a list of n
def layout(op, arrays):
    """The layout of a call's arrays (one entry per input; see :func:`flatten`)."""
    return tuple(None if a is None else len(a) if t.list else -1 for t, a in zip(op.inputs, arrays))


def flatten(op, arrays):
    """``(flat, layout)``: the present arrays of a call in order, a list input's arrays in its
    place, and how to regroup them (:func:`unflatten`)."""
    flat = []
    for t, a in zip(op.inputs, arrays):
        if a is None:
            continue
        if t.list:
            flat.extend(a)
        else:
            flat.append(a)
    return flat, layout(op, arrays)


def unflatten(lay, flat):
    """The per-input arrays (a list for a list input, None for an absent one) of a flat list."""
    out, k = [], 0
    for n in lay:
        if n is None:
            out.append(None)
        elif n < 0:
            out.append(flat[k])
            k += 1
        else:
            out.append(list(flat[k:k + n]))
            k += n
    return out


#: an int-list attribute's type (``Attr(name, list[int], default)``; torch schema ``int[]``)
INT_LIST = list[int]
#: a bool-list attribute's type (``Attr("output_mask", list[bool], (True, True))``; schema ``bool[]``)
BOOL_LIST = list[bool]

#: a dtype attribute's type (``Attr("dtype", DTYPE, None)``; torch schema ``ScalarType``): any dtype
#: :func:`canna_dl.dtype` takes, given to the op as a canna dtype
DTYPE = type(canna_dl.dtype("float32"))

#: attribute types: Python type -> torch schema type (``numbers.Number``: a Python int or float,
#: PyTorch's ``Scalar``, e.g. add's ``alpha`` or pow's ``exponent``; aclnn takes it as an aclScalar)
_ATTR_TYPES = {int: "int", float: "float", builtins.bool: "bool", str: "str", INT_LIST: "int[]",
               BOOL_LIST: "bool[]", DTYPE: "ScalarType", numbers.Number: "Scalar",
               object: None}


def _ints(api, name, v):
    """An int-list attribute's value as a tuple of ints (a single int is a 1-tuple: an op that
    expands it, like a convolution's ``stride=2``, does so in its own rule)."""
    if isinstance(v, int) and not isinstance(v, builtins.bool):
        return (v,)
    if isinstance(v, (list, tuple)):   # torch.Size is a tuple
        if all(isinstance(i, int) and not isinstance(i, builtins.bool) for i in v):
            return tuple(v) if type(v) is tuple else tuple(int(i) for i in v)
        if all(hasattr(i, "__index__") and not isinstance(i, builtins.bool) for i in v):
            return tuple(operator.index(i) for i in v)
    elif hasattr(v, "__index__") and not isinstance(v, builtins.bool):
        return (operator.index(v),)
    what = f"{type(v).__name__} {v!r}" if isinstance(v, (list, tuple)) else type(v).__name__
    raise TypeError(f"{api}: {name} must be an int or a list/tuple of ints, not {what}")


class Attr:
    """A non-array argument: ``name``; ``type``: int, float, bool, str, ``numbers.Number`` (a Python
    int or float kept as given — PyTorch's ``Scalar``) or ``list[int]`` (torch
    schema ``int[]``: a list or tuple of ints, given to the op as a tuple; a single int is the
    1-tuple, which an op expands in its own rule where it says so, e.g. ``stride=2``);
    ``default`` (omit for a required one; ``None`` makes the attribute optional: schema
    ``float?`` / ``int?`` / ``int[]?``, and None is then a value the op receives); ``choices``
    (allowed values; for a str attribute also what the C fast path keys on)."""

    __slots__ = ("name", "type", "default", "choices")

    def __init__(self, name, type, default=_REQ, *, choices=None):  # noqa: A002
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise RegistrationError(f"attribute name {name!r} is not a Python identifier")
        if type not in _ATTR_TYPES:
            raise RegistrationError(f"attribute {name}: type must be int, float, bool, str, numbers.Number, "
                                    f"list[int] or a dtype (kernels._registry.DTYPE), not {type!r}")
        if type == INT_LIST:
            type = INT_LIST     # one object (list[int] makes a new alias each time)  # noqa: A001
        elif type == BOOL_LIST:
            type = BOOL_LIST    # noqa: A001
        self.name, self.type, self.default = name, type, default
        self.choices = tuple(choices) if choices is not None else None
        if type is not object and default is not _REQ and default is not None:
            try:
                self.default = self.check(f"Attr({name!r})", default)
            except (TypeError, ValueError) as e:
                raise RegistrationError(f"attribute {name}: the default {default!r} is not a valid value ({e})") \
                    from None

    @property
    def required(self):
        return self.default is _REQ

    @property
    def optional(self):
        """None is a value of this attribute (its default is None)."""
        return self.default is None

    def check(self, api, v):
        t = self.type
        if t is object:   # a hand-written op's argument (checked by its function)
            return v
        if v is None and self.default is None:
            return None
        if t is INT_LIST:
            v = _ints(api, self.name, v)
        elif t is BOOL_LIST:
            if not isinstance(v, (list, tuple)) or not all(isinstance(i, builtins.bool) for i in v):
                raise TypeError(f"{api}: {self.name} must be a list/tuple of bools, not {v!r}")
            v = tuple(v)
        elif t is numbers.Number:
            if isinstance(v, builtins.bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{api}: {self.name} must be a Python number, not {type(v).__name__}")
            return v
        elif t is DTYPE:
            try:
                v = canna_dl.dtype(v)
            except (TypeError, ValueError, KeyError):
                raise TypeError(f"{api}: {self.name} must be a dtype, not {v!r}") from None
        else:
            if t is float and isinstance(v, int) and not isinstance(v, builtins.bool):
                v = float(v)
            if t is int and hasattr(v, "__index__") and not isinstance(v, builtins.bool):
                v = operator.index(v)
            if type(v) is not t:
                raise TypeError(f"{api}: {self.name} must be a{'n' if t is int else ''} {t.__name__}"
                                f"{' or None' if self.default is None else ''}, not {type(v).__name__}")
            if t is int and not _I64[0] <= v <= _I64[1]:
                raise OverflowError(f"{api}: {self.name} = {v} is out of the int64 range")
        if self.choices is not None and v not in self.choices:
            raise ValueError(f"{api}: {self.name} must be one of {', '.join(map(repr, self.choices))}, not {v!r}")
        return v


class Spec:
    """An abstract array: ``shape`` (a tuple) and ``dtype`` (a canna dtype) — what shape rules take
    and return."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = canna_dl.dtype(dtype)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"Spec({self.shape}, {self.dtype.name})"

    def __eq__(self, other):
        return isinstance(other, Spec) and other.shape == self.shape and other.dtype is self.dtype

    __hash__ = None


# ---------------------------------------------------------------------------------------------
# common shape rules

def same(x, *rest, **attrs):
    """Elementwise, same shape and dtype as the first input."""
    return Spec(x.shape, x.dtype)


def same_float(x, *rest, **attrs):
    """Same shape; integer inputs give float32 (PyTorch's rule for exp, log, ...)."""
    return Spec(x.shape, x.dtype if C.category(x.dtype) == 2 else C.DEFAULT_FLOAT)


def grad_like(g, t, *rest, **attrs):
    """A gradient ``f(g, t)``: the broadcast shape, the promoted dtype."""
    return Spec(C.broadcast_shapes("shape rule", g.shape, t.shape), C.promote_types(g.dtype, t.dtype))


# ---------------------------------------------------------------------------------------------
# forwards

class Aclnn:
    """A forward that is one aclnn call ``aclnn<name>(inputs..., params..., outputs..., tail...)``.

    ``params(lib, keep, **attrs)`` returns the extra arguments between the inputs and outputs
    (aclScalars, ints, strings), appending objects to keep alive to ``keep``; ``tail`` (same
    signature) those after the outputs (e.g. ``aclnnAddmm``'s ``cubeMathType``); ``key(**attrs)``
    the attributes' part of the executor cache key (default: the attribute values). ``order``: the
    aclnn parameter order when it differs from the entry's (whose order is the framework
    function's): the input names, with ``"..."`` where the params go (default: after the
    inputs), e.g. ``("self", "...", "index")`` for ``aclnnGather(self, dim, index, out)`` or
    ``("weight", "input")`` for ``aclnnEmbedding(weight, indices, out)``; None passes a NULL
    (absent optional) tensor the entry does not have. ``shape_of`` names inputs the call takes as
    their shape, an ``aclIntArray`` in the input's place, instead of a tensor
    (``aclnnDropoutGenMaskV2``'s ``shape``): such an input gives the op only its shape and device
    (not combined with ``order``).

    An op whose second input may be a Python number (``Tensor(..., scalar=True)``) names the
    aclnn function taking it as an aclScalar in ``scalar`` (``aclnnAdds(self, aclScalar other,
    params..., out)``); ``commute`` — True, or a function of the attributes — says that the first
    input may be swapped with the second, so that a number first (``2 * x``) takes the scalar
    form too. A number where the op has no scalar form is a 0-d array of the result's compute
    dtype (float32 for the 16-bit floats, int64 for integers). (``scalar`` is not combined with
    ``order`` or ``shape_of``.)"""

    __slots__ = ("name", "params", "key", "order", "tail", "shape_of", "scalar", "commute")

    def __init__(self, name, params=None, key=None, order=None, *, tail=None, shape_of=(), scalar=None,
                 commute=None):
        self.name, self.params, self.key, self.tail = name, params, key, tail
        self.scalar, self.commute = scalar, commute
        if scalar is not None and (order is not None or shape_of):
            raise RegistrationError(f"Aclnn({name!r}): scalar= cannot be combined with order= or shape_of=")
        self.order = None if order is None else tuple(order)
        self.shape_of = tuple(shape_of)
        if self.order is not None and self.shape_of:
            raise RegistrationError(f"Aclnn({name!r}): order= and shape_of= cannot be combined")

    def arrange(self, op, ins):
        """(inputs in the aclnn parameter order, how many come before the params)."""
        if self.order is None:
            return ins, len(ins)
        by = dict(zip((t.name for t in op.inputs), ins))
        names = [n for n in self.order if n != "..."]
        cut = self.order.index("...") if "..." in self.order else len(names)
        return [None if n is None else by[n] for n in names], cut


class Impl:
    """A forward written by hand in the kernel library (an op whose entry states its facts while
    its launch code is not yet generated): ``fn`` is the kernel-level function. The generated
    function checks the required arrays (None is a TypeError) and calls it."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Launch:
    """A forward that launches a :class:`kernels.RawKernel`: ``rule(*inputs, *outputs, **attrs)``
    (arrays with ``.shape`` / ``.dtype``) returns ``(num_blocks, scalars)`` — the number of blocks
    and the scalar / tiling arguments computed on the host from the shapes, the way Ascend C kernels
    take a tiling struct. The kernel is called as ``kernel(num_blocks, *inputs, *outputs,
    *scalars)``; inputs are made C-contiguous first (a RawKernel takes contiguous arrays)."""

    __slots__ = ("kernel", "rule")

    def __init__(self, kernel, rule):
        from ._raw import RawKernel
        if not isinstance(kernel, RawKernel):
            raise RegistrationError(f"Launch: kernel must be a kernels.RawKernel, not {type(kernel).__name__}")
        if not callable(rule):
            raise RegistrationError("Launch: rule must be a function (inputs, outputs, attrs) -> (num_blocks, "
                                    "scalars)")
        self.kernel, self.rule = kernel, rule


class Rejected(str):
    """A guard's reason when the framework itself rejects the call (a rule its CPU kernel checks
    that its meta kernel does not): the call runs on the framework, which raises its own error, and
    is not counted as a refusal."""
    __slots__ = ()


def torch_dtype_name(t) -> str:
    """The dtype name of a torch tensor ``t`` (``"float32"``), for the aten items' guards (which see
    torch tensors) without importing torch here."""
    return str(t.dtype).rpartition(".")[2]


def mixed_param_dtypes(aten_name, x, *params):
    """aten's CPU rule for a normalization's parameters (``aten/src/ATen/native/Normalization.cpp``,
    ``layer_norm.cpp``): they share the input ``x``'s dtype, or are float32 for a float16 / bfloat16
    input (canna's kernels take one dtype: a refusal, the call runs on PyTorch); any other mix is
    PyTorch's rejection (:class:`Rejected`). None when the dtypes agree. Torch tensors, or None."""
    dts = {torch_dtype_name(t) for t in params if t is not None}
    xd = torch_dtype_name(x)
    if not dts - {xd}:
        return None
    if xd in ("float16", "bfloat16") and dts == {"float32"}:
        return "float32 parameters of a reduced-precision input"
    return Rejected(f"parameters of dtypes {sorted(dts)} for {xd} input ({aten_name} rejects it)")


class TorchFn:
    """One torch function ``offload()`` maps to an op (an item of an entry's ``torch=``).

    A plain item is sugar for one: a dotted name or a callable is ``TorchFn(fn)``; a tuple
    ``(fn, *rest)`` takes, in any order, a dict (``fixed``), a signature string (``args``), an int
    (``output``) and a function (``guard``).

    Args:
        fn: the torch function: a dotted name or the callable.
        args: the torch function's parameters in positional order: a signature string
            (``"input, dim=None, _stacklevel=3, dtype=None"``) or a sequence of names and
            ``(name, default)`` pairs. The first binds the op's first input; the others bind the
            op's inputs and attributes of the same name (``"other:y"``: torch's ``other`` is the
            op's ``y``); parameters the op does not have are accepted and ignored unless ``fixed``
            names them; an op argument missing from them takes its own default. Default: the op's
            inputs and attributes in order, the first named ``input``.
        fixed: ``{param: value}``: the call runs on canna only at that value (``inplace=False``),
            compared by identity or by the value's own ``==`` (an object matching several torch
            values may define it; a tensor never matches); other values fall back to PyTorch. A
            parameter not in ``args`` is appended to them.
        guard: ``guard(*op arguments) -> None or a reason``: the cases the torch function refuses
            that the op would take fall back (``torch.mm`` of operands that are not 2-D). Its
            keyword-only parameters receive the torch function's parameters of those names
            (``aten::_softmax_backward_data``'s ``input_dtype``, which the op has no argument for).
            An aten item's guard sees only what a call signature fixes (dtypes, shapes, strides,
            the non-tensor arguments; never a tensor's values): it runs once per signature. A
            :class:`Rejected` reason says PyTorch itself raises for the call (its own error).
        convert: ``{param: f}``: the op receives ``f(value)`` for that torch parameter (aten's
            ``reduction`` code 1 as ``"mean"``, an empty ``stride`` as None).
        identity: ``identity(**params) -> bool``: True when the torch function returns its first
            argument unchanged (dropout in eval mode or with ``p=0``): offload() returns it, no
            kernel runs, as in PyTorch.
        output: the index of the op's output the torch function returns (None: all of them).
        result: ``result(r, *op arguments)``: the torch function's result from the op's ``r`` where
            the two differ in more than values (``aten::native_batch_norm``'s save statistics:
            empty in eval mode, in the parameters' dtype).
        unchecked: indices of the aten operator's results whose shape PyTorch's meta kernel gives
            unlike its CPU kernel, so the aten level does not compare canna's with it
            (``aten::native_batch_norm``'s save statistics in eval mode: ``[C]`` on meta, ``[0]`` on
            the CPU; ``result`` gives the CPU's).
        reflected: the torch function takes the op's first two inputs swapped
            (``Tensor.__rsub__(self, other)`` is ``sub(other, self)``).
        inplace: it writes the result into its first argument (``Tensor.add_``, ``x += y``: the op
            with ``out=x``; reported as ``<name>_``). An aten item writes the op argument its
            schema's first argument binds (``aten::masked_fill_.Scalar``'s ``self``: where's ``y``).
        at_aten: for a ``torch=`` item PyTorch runs as backend-specific aten operators canna has
            no item for (``torch.lstm`` on the CPU: ``aten::mkldnn_rnn_layer`` and its backward), the
            CompositeImplicitAutograd aten operator the torch function dispatches to, whose
            arguments are the function's (``"aten::lstm.input"``): the aten level takes it at the
            autograd key and runs the op's function-level form there (its composition and
            gradient), as the function level does.
        report: an aten item's row in the offload report when it is not the op's name: the
            function level's row of the same computation (``aten::native_layer_norm`` in
            ``layer_norm``'s). A backward kernel's items (``api`` ``kernels.backward.<forward>``)
            count in the ``backward`` column of ``<forward>``'s row unless ``report`` names another.

    A None where the op's int, float or str attribute is not optional falls back to PyTorch
    (``implicit dim (dim=None)``: ``F.softmax``'s legacy default).
    """

    __slots__ = ("fn", "args", "fixed", "guard", "identity", "output", "reflected", "inplace", "convert",
                 "guard_kw", "result", "unchecked", "report", "at_aten")

    def __init__(self, fn, args=None, *, fixed=None, guard=None, identity=None, output=None, reflected=False,
                 inplace=False, convert=None, result=None, unchecked=(), report=None, at_aten=None):
        if not (isinstance(fn, str) or callable(fn)):
            raise RegistrationError(f"TorchFn: fn must be a dotted name or a callable, not {fn!r}")
        self.fn = fn
        self.args = None if args is None else _torch_params(fn, args)
        self.fixed = dict(fixed or {})
        for nm, f in (("guard", guard), ("identity", identity), ("result", result)):
            if f is not None and not callable(f):
                raise RegistrationError(f"TorchFn({fn!r}): {nm} must be a function")
        if output is not None and (isinstance(output, builtins.bool) or not isinstance(output, int)):
            raise RegistrationError(f"TorchFn({fn!r}): output must be an int index or None, not {output!r}")
        self.guard, self.identity, self.output, self.result = guard, identity, output, result
        self.reflected, self.inplace = builtins.bool(reflected), builtins.bool(inplace)
        self.convert = dict(convert or {})
        self.unchecked = tuple(unchecked)
        if report is not None and not (isinstance(report, str) and report.isidentifier()):
            raise RegistrationError(f"TorchFn({fn!r}): report must be a row name, not {report!r}")
        self.report = report
        if at_aten is not None and not (isinstance(at_aten, str) and at_aten.count("::") == 1):
            raise RegistrationError(f"TorchFn({fn!r}): at_aten must name an aten operator (\"aten::lstm.input\"), "
                                    f"not {at_aten!r}")
        self.at_aten = at_aten
        if not all(isinstance(i, int) and not isinstance(i, builtins.bool) and i >= 0 for i in self.unchecked):
            raise RegistrationError(f"TorchFn({fn!r}): unchecked must be result indices, not {unchecked!r}")
        if any(not callable(f) for f in self.convert.values()):
            raise RegistrationError(f"TorchFn({fn!r}): convert maps parameter names to functions")
        #: the guard's keyword-only parameters (torch parameters it reads by name)
        self.guard_kw = () if guard is None else tuple(
            n for n, p in inspect.signature(guard).parameters.items() if p.kind is p.KEYWORD_ONLY)

    @classmethod
    def of(cls, spec):
        """The :class:`TorchFn` of an item of ``torch=`` (see the class for the plain forms)."""
        if isinstance(spec, cls):
            return spec
        if isinstance(spec, tuple) and spec:
            kw = {}
            for r in spec[1:]:
                key = ("fixed" if isinstance(r, dict) else "args" if isinstance(r, str)
                       else "output" if isinstance(r, int) and not isinstance(r, builtins.bool)
                       else "guard" if callable(r) else None)
                if key is None or key in kw:
                    raise RegistrationError(f"torch=: cannot read {r!r} in {spec!r} (a dict of fixed values, a "
                                            "signature string, an output index and a guard function, once each)")
                kw[key] = r
            return cls(spec[0], kw.pop("args", None), **kw)
        if isinstance(spec, str) or callable(spec):
            return cls(spec)
        raise RegistrationError(f"torch= takes torch functions (dotted names, callables, tuples or kernels.TorchFn), "
                                f"not {spec!r}")

    def __repr__(self):
        flags = "".join(f", {f}" for f in ("reflected", "inplace") if getattr(self, f))
        return f"TorchFn({self.fn!r}{flags})"

    def bind(self, op):
        """How a call of the torch function binds to ``op`` (checked at registration):
        ``(names, defaults, src, dflt, fixed, nonone)`` — the torch parameters' names and defaults;
        per op argument (inputs, then attributes) the index of the parameter it comes from or None
        and then its default; ``(index, name, value)`` of the fixed parameters; ``(index, name)``
        of the op's non-optional int / float / str attributes (None there falls back).

        Raises:
            RegistrationError: an op argument without a default is bound by no parameter.
        """
        n = len(op.inputs)
        rest = [t.name for t in op.inputs[1:]] + [a.name for a in op.attrs]
        own = ["input"] + rest
        params = self.args
        if params is None:
            params = tuple((nm, nm, None if 0 < i < n and op.inputs[i].optional else
                            _REQ if i < n or op.attrs[i - n].required else op.attrs[i - n].default)
                           for i, nm in enumerate(own))
        names = [p[0] for p in params]
        defaults = {p[0]: p[2] for p in params if p[2] is not _REQ}
        # the op's first input: a parameter bound to its name, or one bound to "input" when no other
        # op argument is called that (embedding_backward's second input is "input")
        first = _FIRST
        slot = {(first if p[1] == op.inputs[0].name or (p[1] == "input" and "input" not in rest) else p[1]): i
                for i, p in enumerate(params)}
        slot.setdefault(first, 0)   # the first parameter binds the op's first input
        own[0] = first
        fixed = []
        for k, want in self.fixed.items():
            if k not in names:
                names.append(k)
                defaults[k] = want
            fixed.append((names.index(k), k, want))
        src, dflt = [], []
        for j, nm in enumerate(own):
            i = slot.get(nm)
            if i is None and (j == 0 or (j < n and not op.inputs[j].optional) or (j >= n and op.attrs[j - n].required)):
                raise RegistrationError(f"{op.qualname}: the parameters {names} of torch function {self.fn!r} do not "
                                        f"bind the op's {'input' if j < n else 'attribute'} "
                                        f"{op.inputs[0].name if j == 0 else nm!r}")
            src.append(i)
            dflt.append(None if i is not None or j < n else op.attrs[j - n].default)
        nonone = tuple((src[n + j], a.name) for j, a in enumerate(op.attrs)
                       if src[n + j] is not None and a.type in (int, float, str) and not a.optional)
        return names, defaults, src, dflt, tuple(fixed), nonone

    def extras(self, op):
        """``(convert, guard_kw)`` for a call bound by :meth:`bind`: ``((slot, f), ...)`` per op
        argument slot (inputs, then attributes) to convert, ``((name, index), ...)`` of the torch
        parameters the guard takes by keyword.

        Raises:
            RegistrationError: a converted or guard parameter the torch function does not have.
        """
        names, _d, src, _df, _f, _n = self.bind(op)
        conv = []
        for k, f in self.convert.items():
            if k not in names:
                raise RegistrationError(f"{op.qualname}: TorchFn({self.fn!r}) converts {k!r}, not one of its parameters "
                                        f"{names}")
            i = names.index(k)
            if i not in src:
                raise RegistrationError(f"{op.qualname}: TorchFn({self.fn!r}) converts {k!r}, which binds no op argument")
            conv.append((src.index(i), f))
        kw = []
        for k in self.guard_kw:
            if k not in names:
                raise RegistrationError(f"{op.qualname}: the guard of TorchFn({self.fn!r}) takes {k!r}, not one of "
                                        f"its parameters {names}")
            kw.append((k, names.index(k)))
        return tuple(conv), tuple(kw)


_FIRST = "\0first"   # TorchFn.bind's key of the op's first input


def _torch_params(fn, args):
    """``((torch name, op argument name, default or _REQ), ...)`` of a TorchFn's ``args``."""
    import ast
    if isinstance(args, str):
        items = []
        for part in args.split(","):
            part = part.strip()
            if not part:
                continue
            nm, eq, d = part.partition("=")
            if eq:
                try:
                    items.append((nm.strip(), ast.literal_eval(d.strip())))
                except (ValueError, SyntaxError):
                    raise RegistrationError(f"TorchFn({fn!r}): the default of {nm.strip()} in {args!r} is not a "
                                            "literal") from None
            else:
                items.append(nm.strip())
    else:
        items = list(args)
    out = []
    for a in items:
        nm, d = (a, _REQ) if isinstance(a, str) else tuple(a)
        if not isinstance(nm, str):
            raise RegistrationError(f"TorchFn({fn!r}): parameters are names or (name, default) pairs, not {a!r}")
        torch_name, _, own = nm.partition(":")   # "other:y": torch's other is the op's y
        if not torch_name.isidentifier() or not (own or torch_name).isidentifier():
            raise RegistrationError(f"TorchFn({fn!r}): parameters are names or (name, default) pairs, not {a!r}")
        out.append((torch_name, own or torch_name, d))
    return tuple(out)


def draw_seed(arrays) -> int:
    """A seed in ``[0, 2**63)`` for a random op called with ``seed=None``, drawn from the random
    generator of the framework its arrays come from, so that the framework's own seeding makes a
    run reproducible: PyTorch's default generator for torch tensors (``torch.manual_seed``),
    TensorFlow's global generator for TensorFlow tensors (``tf.random.set_seed``; a stateful
    ``tf.random.uniform``), NumPy's global generator otherwise (``numpy.random.seed``; JAX
    programs should pass their own seed)."""
    import sys
    first = next((a for a in arrays if a is not None), None)
    mod = type(first).__module__.split(".")[0] if first is not None else ""
    if mod == "torch" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        return int(torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64))
    if mod == "tensorflow" and "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        return int(tf.random.uniform((), 0, 2 ** 63 - 1, dtype=tf.int64))
    import numpy as np
    return int(np.random.randint(0, 2 ** 63 - 1, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# what an entry answers to in PyTorch (its ``torch=`` mapping, beyond plain function names)

# ---------------------------------------------------------------------------------------------
# the backward, as every shim runs it

def call_backward(op, ops, grads, saved, attrs, mask=None) -> dict:
    """Run ``op``'s backward with the namespace ``ops``: {input name: gradient or None}.
    ``mask`` (one bool per differentiable input, ``op.diff``): the gradients wanted, passed as
    ``grad_input_mask=`` to a backward that takes it (PyTorch's name in its derivative formulas,
    ``tools/autograd/derivatives.yaml``), so it computes only those; the others are None."""
    kw = attrs
    if op.backward_masked:
        kw = dict(attrs, grad_input_mask=tuple(bool(m) for m in mask) if mask is not None
                  else (True,) * len(op.diff))
    r = op.backward(ops, *grads, *saved, **kw)
    r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    out = dict(zip(op.diff, r))
    if mask is not None:
        for n, want in zip(op.diff, mask):
            if not want:
                out[n] = None
    return out


def sum_to(ops, g, shape):
    """The gradient ``g`` of a broadcast result, summed to an operand's ``shape``
    (``ops.sum_to_size``): how every shim brings a gradient back to its input's shape."""
    shape = tuple(shape)
    return g if g is None or tuple(g.shape) == shape else ops.sum_to_size(g, shape)


# ---------------------------------------------------------------------------------------------
# the registry

_REGISTRY: dict = {}         # qualified name "ns::name" -> OpDef
_lock = threading.Lock()
_checking = threading.local()    # .op: the op whose registration is being checked
_next_id = [1]


class OpId(enum.IntEnum):
    """The C fast path's op ids (keys of kernels/_native/fast.c), one per registered op that has a
    fast path (member ``<namespace>__<name>``); assigned at registration, never reused (a duplicate
    cannot run another op). The enum is rebuilt when an op is registered: read it as
    ``kernels._registry.OpId`` (or use :func:`op_id`)."""


def _add_op_id(name, value):
    # IntEnum members cannot be added after creation through the public API: rebuild the enum
    global OpId
    members = {m.name: m.value for m in OpId}
    if name in members or value in members.values():
        raise RegistrationError(f"fast-path op id {name}={value} is taken")
    members[name] = value
    OpId = enum.IntEnum("OpId", members, module=__name__)
    OpId.__doc__ = _OPID_DOC
    return OpId[name]


_OPID_DOC = OpId.__doc__

#: flag added to an OpId: the output is the first input itself (x op= y)
INPLACE = 0x10000


def op_id(name: str) -> int:
    """The :class:`OpId` value of a registered op with a fast path."""
    return OpId[name.replace("::", "__")].value


#: the framework shims that generate an op's framework functions, by name. kernels sits below the
#: shims (docs/DESIGN.md §1) and never imports them statically: the shim is loaded by name only when
#: a caller asks for its function (``op.torch_fn``), the way plugins are found.
_SHIMS = {"torch": "canna_dl.torch._generated", "tf": "canna_dl.tf._generated", "jax": "canna_dl.jax._generated"}


def _shim(framework: str):
    import importlib
    return importlib.import_module(_SHIMS[framework])


def export_generated(namespace: dict, names: list, framework: str) -> None:
    """Put every op generated from canna's registry entries (kernels/ops/*.py) that a framework shim
    does not define by hand into the shim's ``namespace`` under its name, and into its ``names``
    (``__all__``): ``canna_dl.<framework>.<name>``. ``framework`` is ``"torch"``, ``"tf"`` or ``"jax"``."""
    attr = {"torch": "torch_fn", "tf": "tf_fn", "jax": "jax_fn"}[framework]
    for op in registered_ops("canna"):
        if op.generate and not op.name.endswith("_backward") and op.name not in namespace:
            namespace[op.name] = getattr(op, attr)
            names.append(op.name)


def _takes_mask(fn):
    """The backward takes ``grad_input_mask`` (see :func:`call_backward`)."""
    if fn is None:
        return False
    import inspect
    try:
        return "grad_input_mask" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _fw_name(name, v):
    if v is None:
        return name, {}
    if isinstance(v, tuple):
        return v[0], {fw: arg for arg, fw in v[1].items()}    # framework name -> the entry's
    return v, {}


class OpDef:
    """One op's definition (see the module doc). Built by :func:`register_op`; read-only after."""

    def __init__(self, name, *, inputs, attrs=(), outputs=("out",), shape, forward, backward=None, save=(),
                 namespace="canna", torch=(), aten=(), tf=None, jax=None, doc=None, fast=False, elementwise=False,
                 api=None, diff_outputs=None, generate=True, inplace_out=False, check_none=True, seed=None):
        self.name = name
        #: the attribute holding the op's random seed (an optional int): None at call time draws
        #: one from the framework of the inputs (:func:`draw_seed`)
        self.seed = seed
        self.namespace = namespace
        self.qualname = f"{namespace}::{name}"
        self.inputs = tuple(inputs)
        self.attrs = tuple(attrs)
        #: the Python-number attributes (schema Scalar), checked against the result dtype per call
        self.number_attrs = tuple(a.name for a in self.attrs if a.type is numbers.Number)
        self.outputs = tuple(outputs)
        self.shape = shape
        self.forward = forward
        self.backward = backward
        self.save = tuple(save)
        self._fw = {}   # the framework functions made so far (see torch_fn)
        self.torch = tuple(TorchFn.of(t) for t in torch)
        for t in self.torch:   # refused now, not when offload() first builds its table
            t.bind(self)
            t.extras(self)
        # aten=: the aten overloads (``"aten::add.Tensor"``) this op computes, as TorchFn items whose
        # args are the overload's schema arguments in order (``"self, other:y, alpha"``; default: the
        # op's inputs and attributes in order); checked against the schema when offload(level="aten")
        # first loads (canna_dl/torch/_aten.py). An overload's result must be the op's exactly.
        self.aten = tuple(TorchFn.of(t) for t in aten)
        for t in self.aten:
            if not (isinstance(t.fn, str) and t.fn.startswith("aten::")):
                raise RegistrationError(f"{self.qualname}: aten= takes aten overload names ('aten::add.Tensor'), "
                                        f"not {t.fn!r}")
            t.bind(self)
            t.extras(self)
        # tf= / jax=: the name in canna_dl.tf / canna_dl.jax, or (name, {argument: that framework's name
        # for it}) (TensorFlow's ``logits`` / ``axis`` for softmax's ``x`` / ``dim``)
        self.tf, self.tf_args = _fw_name(name, tf)
        self.jax, self.jax_args = _fw_name(name, jax)
        self.doc = doc or f"The registered op ``{self.qualname}``."
        self.fast = fast
        self.elementwise = elementwise      # out= may be exactly an input (in place)
        self.api = api or (f"kernels.{name}" if namespace == "canna" else f"{namespace}.{name}")
        self.diff = tuple(t.name for t in self.inputs if t.diff)
        #: outputs that get a gradient (the rest — indices, statistics — are non-differentiable)
        self.diff_outputs = tuple(self.outputs if diff_outputs is None else diff_outputs)
        self.generate = generate            # framework shims generated from this entry
        self.fast_id = None
        #: ``(memo op id, argument names in the order the memo keys them, {name: default} of the
        #: function's own parameters no op argument names (an Impl's private ``_total=True``))``
        #: when the kernel-level function tries the memo fast path (set when it is generated), else None
        self.memo = None
        self.kernel = None                  # the kernel-level function (set by _make_kernel)
        self.inplace_out = inplace_out
        self.check_none = check_none
        #: indices of the inputs the op updates in place (Tensor(..., mutated=True))
        self.mutated = tuple(i for i, t in enumerate(self.inputs) if t.mutated)
        #: some input is a TensorList
        self.lists = any(t.list for t in self.inputs)
        #: the backward takes ``grad_input_mask=`` (one bool per differentiable input: whether its
        #: gradient is wanted; True for all where a framework does not say; see call_backward)
        self.backward_masked = _takes_mask(backward)

    @property
    def grad_inputs(self):
        """The names of the inputs that get a gradient: the differentiable ones (``Tensor(...,
        diff=True)``, the default) of an op with a backward or differentiated through its parts;
        none for an op without a backward (its inputs may then be of any of their dtypes in every
        framework, integers too)."""
        if self.backward is None and not self.through_parts:
            return frozenset()
        return frozenset(t.name for t in self.inputs if t.diff)

    @property
    def through_parts(self):
        """A forward composed of registered ops with no backward of its own: each framework
        differentiates it through those ops (their backward), running the composition with its
        own differentiable ops namespace."""
        return self.backward is None and not isinstance(self.forward, (Aclnn, Launch, Impl))

    @property
    def arg_names(self):
        return tuple(t.name for t in self.inputs) + tuple(a.name for a in self.attrs)

    def __repr__(self):
        return f"<OpDef {self.qualname}({', '.join(self.arg_names)}) -> {', '.join(self.outputs)}>"

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    # the framework functions (generated on first use: importing a framework is the caller's choice),
    # kept on the entry: reading one again is an attribute lookup, which torch.compile traces (a
    # model's forward calling ``op.torch_fn(x)`` inside a compiled region; Dynamo refuses to trace
    # the import that finds the shim)
    def _framework(self, key, framework, what):
        f = self._fw.get(key)
        if f is None:
            f = self._fw[key] = getattr(_shim(framework), what)(self)
        return f

    @property
    def torch_fn(self):
        """The PyTorch function (eager autograd, ``torch.compile``-able; ``canna_dl.torch``)."""
        return self._framework("torch_fn", "torch", "function")

    @property
    def torch_op(self):
        """The ``torch.ops.<namespace>.<name>`` custom op."""
        return self._framework("torch_op", "torch", "custom_op")

    @property
    def tf_fn(self):
        """The TensorFlow function (GradientTape, ``tf.function``; ``canna_dl.tf``)."""
        return self._framework("tf_fn", "tf", "function")

    @property
    def jax_fn(self):
        """The JAX function (``custom_vjp``: ``jax.grad``, ``jax.jit``; ``canna_dl.jax``)."""
        return self._framework("jax_fn", "jax", "function")

    # helpers the shims share
    def bind(self, api, args, kwargs, renames=None):
        """(arrays, attrs dict) of a call, attributes checked; ``renames``: a framework's names of
        arguments (its name -> the entry's)."""
        names = self.arg_names
        if renames and kwargs:
            kwargs = {renames.get(k, k): v for k, v in kwargs.items()}
        if len(args) > len(names):
            raise TypeError(f"{api}() takes {len(names)} arguments, got {len(args)}")
        vals = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{api}() got an unexpected keyword argument {k!r}")
            if k in vals:
                raise TypeError(f"{api}() got multiple values for argument {k!r}")
            vals[k] = v
        arrays = []
        for t in self.inputs:
            if t.name not in vals:
                if not t.optional:
                    raise TypeError(f"{api}() missing required array argument {t.name!r}")
                vals[t.name] = None
            arrays.append(vals[t.name])
        attrs = {}
        for a in self.attrs:
            if a.name in vals:
                attrs[a.name] = a.check(api, vals[a.name])
            elif a.required:
                raise TypeError(f"{api}() missing required argument {a.name!r}")
            else:
                attrs[a.name] = a.default
        return arrays, attrs

    def functional(self, arrays, attrs):
        """The op for a framework whose arrays are immutable (TensorFlow, JAX): the kernel runs on
        copies of the mutated inputs. Returns a list: the outputs, then the new values of the
        mutated inputs that are present (DeviceArrays when the inputs' kinds then differ)."""
        arrays = list(arrays)
        news = []
        for i in self.mutated:
            if arrays[i] is None:
                continue
            t = self.inputs[i]
            copies = []
            for v in (arrays[i] if t.list else [arrays[i]]):
                a = C.as_array(self.api, t.name, v)
                b = canna_dl.empty(a.shape, a.dtype, device=a.device)
                C.dl_copy.copy_into(b, a)
                copies.append(b)
            arrays[i] = copies if t.list else copies[0]
            news.extend(copies)
        r = self.kernel(*arrays, **attrs)
        outs = [] if r is None else list(r) if isinstance(r, tuple) else [r]
        return outs + news

    def specs(self, ins, attrs):
        """The output specs (a tuple) for these inputs (anything with shape / dtype)."""
        r = self.shape(*ins, **attrs)
        return tuple(r) if isinstance(r, (tuple, list)) else (r,)

    def saved(self, ins, outs):
        """The tensors ``save`` names, from the inputs and outputs."""
        d = dict(zip((t.name for t in self.inputs), ins))
        d.update(zip(self.outputs, outs))
        return [d[n] for n in self.save]


def get_op(name: str) -> OpDef:
    """The registered op ``name`` (``"relu"`` for canna's own, ``"ns::name"`` for others).

    Raises:
        KeyError: no such op."""
    q = name if "::" in name else f"canna::{name}"
    try:
        return _REGISTRY[q]
    except KeyError:
        raise KeyError(f"no registered op {name!r} (registered: {', '.join(sorted(_REGISTRY))})") from None


def registered_ops(namespace=None) -> list:
    """The registered ops (of one namespace), in registration order."""
    return [op for op in _REGISTRY.values() if namespace is None or op.namespace == namespace]


def _add(op: OpDef):
    with _lock:
        if op.qualname in _REGISTRY:
            raise RegistrationError(f"an op named {op.qualname!r} is already registered; pick another name or "
                                    "namespace")
        if op.fast:
            op.fast_id = int(_add_op_id(op.qualname.replace("::", "__"), _next_id[0]))
            _next_id[0] += 1
        _REGISTRY[op.qualname] = op
        op.kernel = _wrap_impl(op) if isinstance(op.forward, Impl) else _make_kernel(op)
    return op


# ---------------------------------------------------------------------------------------------
# the kernel-level function generated from an entry

_fast = _native.fast
_memo = _native.memo
_FS = C._fast_state
_L = C._lib
_S = C._state
_CAP = C._capture
_memo_ids = [0x40000000]   # the memo fast path's op ids (a space of their own: fast.c memo keys)


def memoizable(op: OpDef) -> bool:
    """Whether calls of ``op`` on torch tensors may take the memo fast path (kernels/_native/fast.c
    ``memo``): its forward is an aclnn call or one of canna's own kernel functions (nothing but plan
    launches, on shapes and attributes alone: checked per signature when it is first recorded, see
    kernels._core._memo_entry), without a random seed drawn per call; an aclnn op's list input
    (required, read only) is keyed as its length and then its tensors (:data:`MEMO_LIST`)."""
    f = op.forward
    if op.seed is not None:
        return False
    if isinstance(f, Aclnn):
        return not any(t.list and (t.optional or t.mutated) for t in op.inputs)
    return isinstance(f, Impl) and op.namespace == "canna" and not op.lists


#: the mark of a list input among a memo call's argument names (op.memo's; the call passes the
#: list's length, then each of its tensors: ``len(x), *x``)
MEMO_LIST = "*"


def memo_list(name):
    """The list input a memo argument name marks (:data:`MEMO_LIST`), or None for another argument."""
    return name[len(MEMO_LIST):] if name.startswith(MEMO_LIST) else None


def _memo_arg(name):
    """The source of one memo argument (a list input: its length, then its items)."""
    n = memo_list(name)
    return name if n is None else f"len({n}), *{n}"


def has_fast_path(op: OpDef) -> bool:
    """Whether ``op``'s kernel function tries the two-operand C fast path (kernels/_native/fast.c
    ``fast``: one or two tensor inputs, one output, at most one attribute) — else, where the op is
    :func:`memoizable`, the memo fast path."""
    return bool(op.fast and len(op.inputs) in (1, 2) and len(op.outputs) == 1 and len(op.attrs) <= 1
                and not any(t.optional or t.mutated or t.list for t in op.inputs))


def _memo_source(op, vals, call, guard, defaults=None):
    """The generated lines trying the memo fast path (``vals``: the arguments keyed, in order;
    ``call``: the Python path's (function, args, kwargs) source; ``guard``: when it may be tried;
    ``defaults``: the function's defaults of the ``vals`` no op argument names)."""
    _memo_ids[0] += 1
    own = {t.name for t in op.inputs} | {a.name for a in op.attrs}
    # (what offload(level="aten") calls the memo with directly)
    op.memo = (_memo_ids[0], tuple(vals), {n: d for n, d in (defaults or {}).items() if n in vals and n not in own})
    lists = [n for n in map(memo_list, vals) if n is not None]
    if lists:   # (a list input of another type is the Python path's: its error)
        guard += "".join(f" and (type({n}) is list or type({n}) is tuple)" for n in lists)
    args = ", ".join(_memo_arg(v) for v in vals)
    return (f"    if {guard} and (_FS['on'] or _memo_setup()) and _CAP.memo is None and _CAP.rec is None and _L.gen == _S.generation:\n"
            f"        k = _memo({_memo_ids[0]}, _OP.api, {args})\n"
            f"        if k is not None:\n"
            f"            if type(k) is not bytes:\n"
            f"                return None if k is ... else k\n"
            f"            return _memo_call(k, {call[0]}, ({args},), {call[1]}, {call[2]})\n")


def _scalar_key(v):
    if isinstance(v, float) and (v != v or v == 0.0):
        return ("f", repr(v))
    return (type(v), v)


def _make_kernel(op: OpDef):
    """``kernels.<name>(inputs..., attrs..., *, out=None, stream=None)`` with the op's own
    signature (so arguments bind at C speed) and the C fast path first where the op has one."""
    params = []
    for t in op.inputs:
        params.append(f"{t.name}=None" if t.optional else t.name)
    for a in op.attrs:
        params.append(f"{a.name}=_D_{a.name}" if not a.required else a.name)
    ins = ", ".join(t.name for t in op.inputs)
    attrs = ", ".join(f"{a.name!r}: {a.name}" for a in op.attrs)
    g = {"_call": _call, "_OP": op, "_fast": _fast, "_FS": _FS, "_L": _L, "_S": _S,
         "_memo": _memo, "_memo_call": C.memo_call, "_memo_setup": C.memo_setup, "_CAP": _CAP}
    for a in op.attrs:
        g[f"_D_{a.name}"] = a.default
    fast = ""
    tensors = [t.name for t in op.inputs]
    if has_fast_path(op):
        g["_ID"] = int(op.fast_id)
        if op.attrs:
            a = op.attrs[0]
            if a.type is str:
                g["_CODES"] = {c: i for i, c in enumerate(a.choices or ())}
                fp = f"(_CODES.get({a.name}, -1) if type({a.name}) is str else -1)"
            else:
                fp = a.name
        else:
            fp = "None"
        y = tensors[1] if len(tensors) == 2 else "None"
        if op.elementwise:   # out= may be x itself: the fast path's in-place form (x op= y)
            g["_IDI"] = int(op.fast_id) | INPLACE
            cond, fid = f"(out is None or out is {tensors[0]})", "(_ID if out is None else _IDI)"
        else:
            cond, fid = "out is None", "_ID"
        fast = (f"    k = None\n"
                f"    if {cond} and stream is None and _FS['on'] and _CAP.memo is None and _L.gen == _S.generation:\n"
                f"        k = _fast({fid}, {op.api!r}, {tensors[0]}, {y}, {fp})\n"
                f"        if k is not None and type(k) is not bytes:\n"
                f"            return k\n")
        tail = "k"
    else:
        tail = "None"
        if memoizable(op):
            names = [MEMO_LIST + t.name if t.list else t.name for t in op.inputs] + [a.name for a in op.attrs]
            fast = _memo_source(op, names, ("_call", f"(_OP, ({ins}{',' if len(op.inputs) == 1 else ''}), {{{attrs}}}, "
                                                     "None, None)", "{}"), "out is None and stream is None")
    src = (f"def {op.name}({', '.join(params + ['*', 'out=None', 'stream=None'])}):\n"
           f"{fast}"
           f"    return _call(_OP, ({ins}{',' if len(op.inputs) == 1 else ''}), {{{attrs}}}, out, stream, {tail})\n")
    exec(compile(src, f"<registry {op.qualname}>", "exec"), g)  # noqa: S102 (generated from the entry)
    fn = g[op.name]
    fn.__doc__ = op.doc
    fn.__qualname__ = op.name
    fn.__module__ = "kernels"
    fn.opdef = op
    return fn


def _wrap_impl(op: OpDef):
    """The hand-written function, behind the registry's input check where it has required arrays
    (with the same signature, generated, so a call binds at C speed)."""
    import inspect
    fn = op.forward.fn
    req = [t.name for t in op.inputs if not t.optional]
    sig = inspect.signature(fn)
    ps = sig.parameters
    memo = memoizable(op) and not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps.values())
    if (not op.check_none or not req) and not memo:
        fn.opdef = op
        return fn
    params, call = [], []
    g = {"_fn": fn, "_none": _none_error, "_OP": op, "_memo": _memo, "_memo_call": C.memo_call, "_memo_setup": C.memo_setup, "_CAP": _CAP,
         "_FS": _FS, "_L": _L, "_S": _S}
    star = False
    for p in ps.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        d = ""
        if p.default is not p.empty:
            g[f"_D_{p.name}"] = p.default
            d = f"=_D_{p.name}"
        if p.kind is p.VAR_POSITIONAL:
            params.append(f"*{p.name}")
            star = True
            call.append(f"*{p.name}")
            continue
        params.append(p.name + d)
        call.append(p.name if p.kind is not p.KEYWORD_ONLY else f"{p.name}={p.name}")
    src = f"def {fn.__name__}({', '.join(params)}):\n"
    if op.check_none and req:
        src += (f"    if {' or '.join(f'{n} is None' for n in req)}:\n"
                f"        _none(_OP, ({', '.join(req)},))\n")
    if memo:
        vals = [n for n in ps if n not in ("out", "stream")]
        pos = [n for n in vals if ps[n].kind is not ps[n].KEYWORD_ONLY]
        kw = [n for n in vals if ps[n].kind is ps[n].KEYWORD_ONLY]
        guard = " and ".join([f"{n} is None" for n in ("out", "stream") if n in ps] or ["True"])
        src += _memo_source(op, vals, ("_fn", f"({', '.join(pos)}{',' if len(pos) == 1 else ''})",
                                       "{" + ", ".join(f"{n!r}: {n}" for n in kw) + "}"), guard,
                            {n: p.default for n, p in ps.items() if p.default is not p.empty})
    src += f"    return _fn({', '.join(call)})\n"
    exec(compile(src, f"<registry {op.qualname}>", "exec"), g)  # noqa: S102
    w = g[fn.__name__]
    w.__doc__, w.__qualname__, w.__module__, w.__wrapped__ = fn.__doc__, fn.__qualname__, fn.__module__, fn
    w.opdef = op
    return w


def _none_error(op, values):
    for t, v in zip((t for t in op.inputs if not t.optional), values):
        if v is None:
            raise TypeError(f"{op.api}: {t.name} must be {'a list of arrays' if t.list else 'an array'} (a "
                            "DeviceArray, a torch/TensorFlow/JAX tensor, a NumPy array), not None")


def _composed_inputs(op, arrays):
    """The inputs of an op composed of other ops, as its ops take them: an array of a known kind
    (DeviceArray, torch, NumPy, TensorFlow, JAX) as given, so the result keeps its kind; anything
    else converted as every op converts it (a list of numbers becomes a DeviceArray; ``None`` for
    a required input, a string or another non-array raises the TypeError naming the input)."""
    if any(x is None and not t.optional for t, x in zip(op.inputs, arrays)):
        _none_error(op, [x for t, x in zip(op.inputs, arrays) if not t.optional])
    out = list(arrays)
    for i, (t, x) in enumerate(zip(op.inputs, arrays)):
        if x is None or (t.scalar and C.is_scalar(x)):
            continue
        if t.list:
            if not isinstance(x, (list, tuple)):
                raise TypeError(f"{op.api}: {t.name} must be a list or tuple of arrays, not {type(x).__name__}")
            out[i] = [v if C._kind_of_type(type(v)) is not None else C.as_array(op.api, f"{t.name}[{j}]", v)
                      for j, v in enumerate(x)]
        elif C._kind_of_type(type(x)) is None:
            out[i] = C.as_array(op.api, t.name, x)
    return out


def check_inputs(op, arrays):
    """The inputs as DeviceArrays (None for an absent optional one, a list for a list input, a
    Python number as given for a ``scalar`` input), checked: a required array is present and an
    array (TypeError otherwise, naming it), of an allowed dtype (TypeError), with at most 8 dims
    (ValueError); not only Python numbers (TypeError)."""
    api = op.api
    out = []
    nums = 0
    for t, x in zip(op.inputs, arrays):
        if x is None:
            if t.optional:
                out.append(None)
                continue
            raise TypeError(f"{api}: {t.name} must be {'a list of arrays' if t.list else 'an array'} (a DeviceArray, "
                            "a torch/TensorFlow/JAX tensor, a NumPy array), not None")
        if t.scalar and C.is_scalar(x):
            out.append(x)
            nums += 1
            if nums == len(arrays):
                raise TypeError(f"{api}: at least one operand must be an array, got "
                                f"{'two' if nums == 2 else nums} Python scalars")
            continue
        if t.list:
            if not isinstance(x, (list, tuple)):
                raise TypeError(f"{api}: {t.name} must be a list or tuple of arrays, not {type(x).__name__}")
            out.append([_check_one(api, f"{t.name}[{j}]", t, v) for j, v in enumerate(x)])
        else:
            out.append(_check_one(api, t.name, t, x))
    return out


def _check_one(api, name, t, x):
    a = C.as_array(api, name, x)
    C.check_dtype(api, name, a.dtype, t.dtypes)
    if a.ndim > C.MAX_DIMS:
        raise ValueError(f"{api}: at most {C.MAX_DIMS} dimensions are supported, got {a.ndim} ({name})")
    return a


def _flat(op, ins):
    """The arrays of checked inputs in order (a list input's in its place; None kept)."""
    if not op.lists:
        return ins
    out = []
    for t, a in zip(op.inputs, ins):
        if t.list and a is not None:
            out.extend(a)
        else:
            out.append(a)
    return out


def _named(op, ins):
    out = []
    for t, a in zip(op.inputs, ins):
        if t.list and a is not None:
            out.extend((f"{t.name}[{j}]", b) for j, b in enumerate(a))
        else:
            out.append((t.name, a))
    return tuple(out)


def _call(op, arrays, attrs, out, stream, fkey=None):
    api = op.api
    if op.seed is not None and attrs[op.seed] is None:
        attrs[op.seed] = draw_seed(arrays)
    if not isinstance(op.forward, (Aclnn, Launch)):   # a composition of registered ops
        if out is not None or stream is not None:
            raise TypeError(f"{api}: out= and stream= are not supported by an op composed of other ops")
        from ._abstract import KOPS
        return op.forward(KOPS, *_composed_inputs(op, arrays), **attrs)
    for a in op.attrs:
        v = attrs[a.name]
        if a.choices is not None or a.type is not type(v) or (a.type is int and not _I64[0] <= v <= _I64[1]):
            attrs[a.name] = a.check(api, v)
    ins = check_inputs(op, arrays)
    if op.lists:
        kind = C.result_kind(*flatten(op, arrays)[0]) if out is None else None
    else:
        kind = C.result_kind(*arrays) if out is None else None
    specs = op.specs(ins, attrs)
    for name in op.number_attrs:   # a Python-number attribute (alpha, exponent) obeys the scalar operands' rule
        if specs:
            attrs[name] = C.scalar_operand(api, attrs[name], specs[0].dtype)
    arrs = [None if C.is_scalar(a) else a for a in ins]
    s = C.device_and_stream(api, _flat(op, arrs), stream)
    muts = _mutated(op, api, arrays, ins, isinstance(op.forward, Launch)) if op.mutated else []
    named = _named(op, arrs) if op.lists else tuple((t.name, a) for t, a in zip(op.inputs, arrs))
    outs = []
    inplace = False
    for i, sp in enumerate(specs):
        if i == 0 and out is not None:
            outs.append(C.given_out(api, out, sp.shape, sp.dtype, named, allow_same=op.elementwise))
            # x op= y on torch tensors (an optimizer's p.add_(g, alpha=-lr)): the fast path's in-place form
            inplace = out is arrays[0] and C._kind_of_type(type(out)) == C.TORCH
            if inplace and _FS["on"] is None:   # a torch in-place call can be the first one seen
                C.fast_setup()
        else:
            if kind is None:   # out= names the first output; the others are of the inputs' kind
                kind = C.result_kind(*arrays)
            outs.append(C.new_out(kind, sp.shape, sp.dtype, s))
    fin = outs + muts if muts else outs
    if all(o.arr.size == 0 for o in fin):
        C.finish_empty(fin)
    else:
        f = op.forward
        if isinstance(f, Aclnn):
            plan = _run_aclnn(f, s, ins, outs, attrs, fin, op)
            if fkey is not None and (kind == C.TORCH or inplace) and plan is not None and arrs[0] is not None:
                C.fast_register(fkey, plan, ins[0], outs[0].arr, outs[0].obj, inplace)
        elif isinstance(f, Launch):
            _run_launch(op, f, s, ins, outs, attrs, fin)
    if len(outs) == 1:
        return outs[0].obj
    if not outs:
        return None
    return tuple(o.obj for o in outs)


def _mutated(op, api, arrays, ins, contiguous):
    """The mutated inputs as outputs the kernel writes in place (``ins`` is updated with the arrays
    the kernel gets): the caller's memory, or — in the discrete memory model, for a layout aclnn
    cannot describe, or a non-contiguous one for a RawKernel — a temporary holding the current
    value, copied back into the caller's array after the launch."""
    muts = []
    named = _named(op, ins)
    pos = 0
    for t, a in zip(op.inputs, ins):     # flat positions of each input's arrays (as in named)
        t_pos, pos = pos, pos + (len(a) if t.list and a is not None else 1)
        if not t.mutated or a is None:
            continue
        i = op.inputs.index(t)
        objs, elems = (list(arrays[i]), a) if t.list else ([arrays[i]], [a])
        for j, (obj, e) in enumerate(zip(objs, elems)):
            others = tuple(nb for k, nb in enumerate(named) if k != t_pos + j and nb[1] is not None)
            m = C.given_out(api, obj, e.shape, e.dtype, others, name=named[t_pos + j][0], exact_dtype=True)
            if m.stage is None and contiguous and not m.arr.is_contiguous():
                m = C.Out(canna_dl.empty(e.shape, e.dtype, device=e.device), m.obj, sync=True, stage=m.arr)
            if m.stage is not None:
                C.dl_copy.copy_into(m.arr, e)   # the current value, into the temporary the kernel updates
            if t.list:
                a[j] = m.arr
            else:
                ins[i] = m.arr
            muts.append(m)
    return muts


def _scalar_operands(f, ins, rs, attrs, s, op=None):
    """(aclnn name, inputs, the aclScalar operand or None) of a call with Python-number inputs
    (see :class:`Aclnn`): the op's scalar form when the number is its second input (or its first,
    where the op commutes), else the number as a 0-d array of the result's compute dtype."""
    name, scalar = f.name, None
    api = op.api if op is not None else name
    ins = [C.scalar_operand(api, a, rs[0].dtype) if C.is_scalar(a) else a for a in ins]
    if f.scalar is not None and len(ins) == 2:
        x, y = ins
        if C.is_scalar(y) and not C.is_scalar(x):
            return f.scalar, [x], y
        c = f.commute
        if C.is_scalar(x) and not C.is_scalar(y) and c is not None and (c is True or c(**attrs)):
            return f.scalar, [y], x
    from ._elementwise import _opmath, _scalar_array
    dt = _opmath(rs[0].dtype)
    return name, [_scalar_array(a, dt, s) if C.is_scalar(a) else a for a in ins], scalar


def _run_aclnn(f, s, ins, outs, attrs, fin=None, op=None):
    """One aclnn call through the plan cache; returns the plan (for the fast path). A list input
    is an ``aclTensorList`` of its arrays' descriptors (their addresses are swapped one by one, in
    order, as the executor numbers its input tensors)."""
    rs = [o.arr for o in outs]
    name, scalar, lay = f.name, None, None
    if op is not None and op.lists:   # (an Aclnn order= is for ops without list inputs)
        lay = layout(op, ins)
        ins = _flat(op, ins)
        nin = len(ins)
    elif any(C.is_scalar(a) for a in ins):   # (scalar= is for ops without order=)
        name, ins, scalar = _scalar_operands(f, ins, rs, attrs, s, op)
        nin = len(ins)
    else:
        ins, nin = f.arrange(op, ins)
    ins = [None if a is None else C.prepare_input(a) for a in ins]
    C.order_inputs(s, ins)
    shapes = ()
    if f.shape_of:   # inputs passed as their shape (an aclIntArray), not as tensors
        pos = [i for i, t in enumerate(op.inputs) if t.name in f.shape_of]
        shapes = tuple((i, tuple(ins[i].shape)) for i in pos)
        ins = [a for i, a in enumerate(ins) if i not in pos]
        nin -= len(pos)
    extra = f.key(**attrs) if f.key is not None else tuple(_scalar_key(v) for v in attrs.values())
    key = (name,) + tuple(C.sig(a) for a in ins) + tuple(C.sig(r) for r in rs) + tuple(extra) + shapes
    if lay is not None:
        key += (lay,)
    if scalar is not None:
        key += ("scalar", _scalar_key(scalar))
    plan = C.get_plan(key)
    if plan is None:
        params, tail = f.params, f.tail

        def make_args(lib, t, keep):
            mid = tuple(params(lib, keep, **attrs)) if params is not None else ()
            end = tuple(tail(lib, keep, **attrs)) if tail is not None else ()
            if scalar is not None:   # aclnn<Op>s(self, aclScalar other, params..., out)
                sv = C.Param.scalar(lib, scalar)
                keep.append(sv)
                mid = (sv,) + mid
            present = list(t)   # absent optional inputs are NULL descriptors in t already
            head = list(present[:nin] if lay is None else _tensor_lists(lib, present[:nin], lay, keep))
            for i, shape in shapes:
                h = C.Param.ints(lib, shape)
                keep.append(h)
                head.insert(i, h)
            return tuple(head) + mid + tuple(present[nin:]) + end
        plan = C.build_plan(name, ins, rs, make_args)
        C.put_plan(key, plan)
    addrs = [a.ptr for a in ins if a is not None] + [r.ptr for r in rs]
    C.launch(plan, s, addrs, outs if fin is None else fin, (ins, rs))
    return plan


def _tensor_lists(lib, descs, lay, keep):
    """The phase-1 tensor arguments with each list input's descriptors as one aclTensorList (which
    owns them: aclDestroyTensorList destroys its tensors)."""
    out, k = [], 0
    for n in lay:
        if n is None or n < 0:
            out.append(descs[k])
            k += 1
            continue
        elems = descs[k:k + n]
        k += n
        for d in elems:
            C.ffi.gc(d, None)            # the list destroys them
        h = lib.aclCreateTensorList(C.ffi.new("aclTensor *[]", elems) if n else C.ffi.NULL, n)
        if h == C.ffi.NULL:
            raise ValueError(f"aclCreateTensorList refused a list of {n} tensors: {C._nn_error('aclCreateTensorList')}")
        h = C.ffi.gc(h, lib.aclDestroyTensorList)
        keep.append(h)
        out.append(h)
    return out


def _run_launch(op, f, s, ins, outs, attrs, fin=None):
    """A RawKernel launch: the launch rule on the shapes, then the kernel on contiguous operands
    (a list input's arrays as consecutive arguments)."""
    from ._elementwise import contiguous

    def cont(a):
        return None if a is None else (a if a.is_contiguous() else contiguous(a, stream=s))
    ins = [[cont(b) for b in a] if t.list else cont(a) for t, a in zip(op.inputs, ins)]
    flat = _flat(op, ins)
    C.order_inputs(s, flat)
    rs = [o.arr for o in outs]
    r = f.rule(*ins, *rs, **attrs)
    try:
        nb, scalars = r
        scalars = tuple(scalars)
    except (TypeError, ValueError):
        raise TypeError(f"{op.api}: the launch rule must return (num_blocks, scalars), not {r!r}") from None
    f.kernel.launch(nb, *flat, *rs, *scalars, stream=s)
    fin = outs if fin is None else fin
    if any(o.sync for o in fin):
        s.synchronize()
        for o in fin:
            C.finish_out(o, s)
    else:
        for o in fin:
            o.arr.storage.stream = s


# ---------------------------------------------------------------------------------------------
# public registration

def _check_registration(op: OpDef, example, example_attrs=None):
    """Run the op's rules on abstract inputs: the shape rule gives one Spec per declared output,
    the backward (run on the shape rules of the ops it calls) one gradient per differentiable input
    of that input's shape. Raises RegistrationError naming the problem."""
    from . import _abstract
    where = f"register_op({op.qualname!r})"
    if example is None:
        example = [[(2, 3), (2, 3)] if t.list else (2, 3) for t in op.inputs]
    if len(example) != len(op.inputs):
        raise RegistrationError(f"{where}: example_shapes has {len(example)} shapes for {len(op.inputs)} inputs")
    ins = [[Spec(sh, t.dtypes[0]) for sh in shape] if t.list else Spec(shape, t.dtypes[0])
           for shape, t in zip(example, op.inputs)]
    attrs = {a.name: a.default for a in op.attrs if not a.required}
    given = dict(example_attrs or {})
    unknown = sorted(set(given) - {a.name for a in op.attrs})
    if unknown:
        raise RegistrationError(f"{where}: example_attrs names {unknown}, which are not attributes of the op")
    for a in op.attrs:
        if a.name in given:
            try:
                attrs[a.name] = a.check(where, given[a.name])
            except (TypeError, ValueError) as e:
                raise RegistrationError(f"{where}: example_attrs: {e}") from None
    missing = [a.name for a in op.attrs if a.required and a.name not in given]
    if missing:
        raise RegistrationError(f"{where}: the required attributes {missing} need example values to check the "
                                "registration: pass example_attrs={name: value} (values the shape rule accepts "
                                "with example_shapes)")
    try:
        outs = op.shape(*ins, **attrs)
    except Exception as e:
        raise RegistrationError(f"{where}: the shape rule fails on inputs "
                                f"{', '.join(map(repr, ins))} ({type(e).__name__}: {e}); pass example_shapes= "
                                "that the op accepts") from None
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(op.outputs) or not all(isinstance(o, Spec) for o in outs):
        raise RegistrationError(f"{where}: the shape rule returns {len(outs)} value(s) "
                                f"({', '.join(type(o).__name__ for o in outs)}) but the schema declares "
                                f"{len(op.outputs)} output(s) {op.outputs} (return one kernels.Spec per output)")
    for n, o in zip(op.outputs, outs):
        if not all(isinstance(d, int) and not isinstance(d, builtins.bool) and d >= 0 for d in o.shape):
            raise RegistrationError(f"{where}: the shape rule gives output {n!r} the shape {tuple(o.shape)} on inputs "
                                    f"{', '.join(map(repr, ins))}; a dimension is an int >= 0")
    for n in op.save:
        if n not in op.arg_names[:len(op.inputs)] and n not in op.outputs:
            raise RegistrationError(f"{where}: save names {n!r}, which is neither an input "
                                    f"{tuple(t.name for t in op.inputs)} nor an output {op.outputs}")
    if op.backward is None:
        return
    if not op.diff:
        raise RegistrationError(f"{where}: a backward is given but no input is differentiable")
    grads = [Spec(o.shape, o.dtype) for o in outs]
    saved = op.saved(ins, outs)
    try:
        kw = dict(attrs, grad_input_mask=(True,) * len(op.diff)) if op.backward_masked else attrs
        r = op.backward(_abstract.OPS, *grads, *saved, **kw)
    except RegistrationError:
        raise
    except Exception as e:
        raise RegistrationError(f"{where}: the backward fails on abstract inputs ({type(e).__name__}: {e}); it "
                                "must be made of registered ops (its first argument, ops.<name>)") from None
    r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    if len(r) != len(op.diff):
        raise RegistrationError(f"{where}: the backward returns {len(r)} gradient(s) but the op has "
                                f"{len(op.diff)} differentiable input(s) {op.diff}")
    by = dict(zip((t.name for t in op.inputs), ins))
    lists = {t.name for t in op.inputs if t.list}
    for n, gspec in zip(op.diff, r):
        if gspec is None:
            continue
        if n in lists:
            if not isinstance(gspec, (list, tuple)) or len(gspec) != len(by[n]):
                raise RegistrationError(f"{where}: the backward's gradient of the list {n} must be a list of "
                                        f"{len(by[n])} gradients (one per array) or None, not {gspec!r}")
            for j, (gj, xj) in enumerate(zip(gspec, by[n])):
                if gj is not None and (not isinstance(gj, Spec) or gj.shape != xj.shape):
                    raise RegistrationError(f"{where}: the backward's gradient of {n}[{j}] is {gj!r} but {n}[{j}] "
                                            f"has shape {xj.shape}")
            continue
        if not isinstance(gspec, Spec):
            raise RegistrationError(f"{where}: the backward's gradient of {n} is a {type(gspec).__name__}, not the "
                                    "result of a registered op")
        if gspec.shape != by[n].shape:
            raise RegistrationError(f"{where}: the backward's gradient of {n} has shape {gspec.shape} but {n} has "
                                    f"shape {by[n].shape}")


#: the operator namespaces of PyTorch itself (torch.ops.aten, ...): a user op there would shadow or
#: collide with PyTorch's operators
_TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "torch", "quantized", "_quantized", "inductor", "c10d",
                               "_c10d_functional", "_c10d_functional_autograd", "profiler", "higher_order", "rngprims",
                               "debugprims", "_dtensor", "mkldnn", "mkl", "xnnpack", "onednn", "cuda", "npu"})


def _torch_has_op(namespace, name):
    """``torch.ops.<namespace>.<name>`` exists already (only asked when PyTorch is loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register_op(name, *, inputs, outputs=("out",), attrs=(), shape, forward, backward=None, save=(),
                namespace="user", torch=(), example_shapes=None, example_attrs=None, doc=None, fast=False):
    """Register an op once; get a kernel-level function and PyTorch, TensorFlow and JAX ops with
    gradients (docs/DESIGN.md §11; README "Your own ops").

    Args:
        name: the op's name (an identifier), unique in ``namespace``.
        inputs: the array inputs: :class:`Tensor` s or names (float dtypes, required).
        outputs: the outputs' names.
        attrs: :class:`Attr` s (non-array arguments, after the arrays).
        shape: the shape/dtype rule ``shape(*inputs, **attrs)`` on arrays or :class:`Spec` s
            (``.shape``, ``.dtype``), returning one :class:`Spec` per output; raise TypeError /
            ValueError for inputs the op refuses (it runs before every launch, for
            ``torch.compile``'s fake tensors, TF's static shapes and JAX's abstract values).
        forward: a :class:`Launch` (a RawKernel with its launch rule), an :class:`Aclnn`, or a
            function ``forward(ops, *inputs, **attrs)`` of registered ops.
        backward: ``backward(ops, *grads, *saved, **attrs)`` -> one gradient per differentiable
            input (None for none), made of registered ops (``ops.<name>``, including your own).
        save: what the backward needs, by name: inputs and/or outputs.
        namespace: ``torch.ops.<namespace>.<name>``; the kernel-level name is
            ``<namespace>.<name>`` in messages.
        torch: the torch functions ``canna_dl.torch.offload()`` maps to this op: callables or
            dotted names whose arguments bind to the op's inputs and attrs by position, or
            :class:`TorchFn` s saying how they bind (their own parameters, fixed values, a guard,
            reflected and in-place forms).
        example_shapes: one shape per input on which the rules are checked (default all (2, 3); for
            a :class:`TensorList`, a list of shapes, default two (2, 3)).
        example_attrs: ``{attribute: value}`` for those checks: required for an attribute without
            a default, else its default is used.

    Returns:
        The :class:`OpDef`: call it like a kernel (any array kind in, the same kind out), or use
        ``.torch_fn`` / ``.torch_op``, ``.tf_fn``, ``.jax_fn``.

    Raises:
        RegistrationError (a ValueError): the name is taken or not an identifier, the shape rule
            does not give one Spec per output, the backward does not give one gradient of the right
            shape per differentiable input, ``save`` names something unknown.
        TypeError: arguments of the wrong type.
    """
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise RegistrationError(f"register_op: name must be a Python identifier, not {name!r}")
    if not isinstance(namespace, str) or not namespace.isidentifier():
        raise RegistrationError(f"register_op: namespace must be an identifier, not {namespace!r}")
    if namespace == "canna":
        raise RegistrationError("register_op: the namespace 'canna' is canna's own; pick another")
    ins = tuple(t if isinstance(t, Tensor) else Tensor(t) for t in inputs)
    if not ins:
        raise RegistrationError(f"register_op({name!r}): an op needs at least one array input")
    if not tuple(outputs) and not any(t.mutated for t in ins):
        raise RegistrationError(f"register_op({name!r}): an op needs an output or an input it updates in place "
                                "(Tensor(..., mutated=True))")
    if not tuple(outputs) and backward is not None:
        raise RegistrationError(f"register_op({name!r}): an op without outputs has nothing to differentiate; "
                                "remove the backward")
    names = [t.name for t in ins] + [a.name for a in attrs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise RegistrationError(f"register_op({name!r}): names {sorted(dup)} are used twice")
    clash = sorted(set(outputs) & set(names))
    if clash:
        raise RegistrationError(f"register_op({name!r}): {clash} name both an argument and an output "
                                f"(outputs={tuple(outputs)!r}); rename one")
    if not callable(shape):
        raise RegistrationError(f"register_op({name!r}): shape must be a function (inputs, attrs) -> Spec(s)")
    if not isinstance(forward, (Aclnn, Launch)) and not callable(forward):
        raise RegistrationError(f"register_op({name!r}): forward must be a kernels.Launch, a kernels.Aclnn or a "
                                "function of registered ops")
    if backward is not None and not callable(backward):
        raise RegistrationError(f"register_op({name!r}): backward must be a function or None")
    for a in attrs:
        if not isinstance(a, Attr):
            raise RegistrationError(f"register_op({name!r}): attrs must be kernels.Attr objects, not {a!r}")
        if a.type is object:
            raise RegistrationError(f"register_op({name!r}): attribute {a.name} needs a type (int, float, bool, str "
                                    "or list[int]) for the framework schemas")
    for f in torch:
        try:
            TorchFn.of(f)
        except RegistrationError as e:
            raise RegistrationError(f"register_op({name!r}): {e}") from None
    q = f"{namespace}::{name}"
    if q in _REGISTRY:
        raise RegistrationError(f"register_op: an op named {q!r} is already registered; pick another name or "
                                "namespace")
    if namespace in _TORCH_NAMESPACES or _torch_has_op(namespace, name):
        why = "a namespace of PyTorch's own" if namespace in _TORCH_NAMESPACES else "an operator that exists"
        raise RegistrationError(f"register_op: {q!r} would be torch.ops.{namespace}.{name}, {why}; pick another "
                                "namespace")
    op = OpDef(name, inputs=ins, attrs=tuple(attrs), outputs=tuple(outputs), shape=shape, forward=forward,
               backward=backward, save=save, namespace=namespace, torch=torch, doc=doc, fast=fast)
    _checking.op = op
    try:
        _check_registration(op, example_shapes, example_attrs)
    finally:
        _checking.op = None
    _add(op)
    _notify(op, user=True)
    return op


def _notify(op, user=False):
    """Make the framework forms now for the frameworks whose shim is loaded (a custom op must exist
    before ``torch.compile`` traces a call of it; offload() maps the entry's torch functions). A
    user's op registered with PyTorch loaded gets its PyTorch forms now, loading the shim: the
    first call of ``op.torch_fn`` may be inside a region ``torch.compile`` traces, which cannot
    import it."""
    import sys
    if user and "torch" in sys.modules and "canna_dl.torch._generated" not in sys.modules:
        _shim("torch")
    if "canna_dl.torch._generated" in sys.modules:
        g = sys.modules["canna_dl.torch._generated"]
        op.torch_fn
        if op.torch and "canna_dl.torch._offload" in sys.modules:
            g.offload_register(op)


def define(name, **kw):
    """Register one of canna's own ops (``kernels/ops/*.py``)."""
    return _add(OpDef(name, namespace="canna", **kw))


def op_table() -> str:
    """The README's op list (Markdown), generated from the registry: one row per op of canna's own,
    with its inputs and attributes, how its forward runs, what its backward saves, and where it is
    generated for the frameworks (``tests/test_registry.py`` checks the README against it)."""
    rows = ["| op | inputs | attributes | forward | backward saves | frameworks |",
            "|---|---|---|---|---|---|"]
    for op in registered_ops("canna"):
        ins = ", ".join(t.name + ("?" if t.optional else "") for t in op.inputs)
        if any(t.scalar for t in op.inputs):
            ins += f" ({' or '.join(t.name for t in op.inputs if t.scalar)} may be a number)"
        attrs = ", ".join(a.name + ("" if a.required else f"={a.default!r}") for a in op.attrs) or "—"
        f = op.forward
        fwd = f"`aclnn{f.name}`" if isinstance(f, Aclnn) else "RawKernel" if isinstance(f, Launch) else \
            "hand-written" if isinstance(f, Impl) else "composition"
        if isinstance(f, Aclnn) and f.scalar:
            fwd += f" / `aclnn{f.scalar}`"
        if op.backward is None:
            saves = "—" if isinstance(f, Impl) or op.name.endswith("_backward") else \
                "through its ops" if op.through_parts else "no backward"
        else:
            saves = ", ".join(op.save) or "nothing"
        fw = "torch, tf, jax (generated)" if op.generate else "hand-written shims"
        rows.append(f"| `{op.name}` | {ins} | {attrs} | {fwd} | {saves} | {fw} |")
    return "\n".join(rows) + "\n"
