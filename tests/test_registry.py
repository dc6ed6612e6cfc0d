"""The op registry (kernels/_registry.py, docs/DESIGN.md §11): tests parametrized by its entries —
the required-array checks of every op, the gradients of every generated op in PyTorch (gradcheck
in float64), TensorFlow (finite differences) and JAX (``jax.grad`` against finite differences),
``torch.compile`` / ``tf.function`` / ``jax.jit`` of them, the C fast path's op ids, and the
README's op list."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import kernels
from kernels import _registry as R

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: stand-ins for the required attributes of the hand-written ops (to reach their input checks)
_ATTR_STANDINS = {"kernel_size": 2, "normalized_shape": (2,), "shape": (2, 2), "exponent": 2, "output_size": (1, 1),
                  "pad": (1, 1), "dim": 0, "num_weights": 2, "p": 0.5, "dtype": "float32",
                  "has_biases": True, "num_layers": 1, "dropout": 0.0, "train": False, "bidirectional": False,
                  "batch_first": True}


def _required_inputs():
    for op in R.registered_ops("canna"):
        for i, t in enumerate(op.inputs):
            if not t.optional:
                yield pytest.param(op, i, id=f"{op.name}-{t.name}")


def _call_with(op, i, bad):
    """Arguments of ``op`` with ``bad`` for input ``i`` and an array of an accepted dtype (a list of
    one for a list input) for the others, and its required attributes."""
    arr = np.ones((1, 1, 2, 2), np.float32)
    good = [np.zeros(1, np.int64) if t.dtypes == kernels._core.INTS else
            arr > 0 if t.dtypes == (kernels._core.BOOL,) else arr for t in op.inputs]
    args = [bad if j == i else [g] if t.list else g for j, (t, g) in enumerate(zip(op.inputs, good))]
    return args, {a.name: _ATTR_STANDINS[a.name] for a in op.attrs if a.required}


@pytest.mark.parametrize("op,i", list(_required_inputs()))
def test_none_for_a_required_array_is_a_type_error(op, i):
    """Issue 12 item 21: None for a required array raised AttributeError in matmul, linear, conv2d,
    layer_norm, softmax, max_pool2d; the registry's input check makes it a TypeError naming it."""
    args, kw = _call_with(op, i, None)
    if isinstance(op.forward, R.Impl):   # its own signature: arguments by name
        call = dict(zip([t.name for t in op.inputs], args))
        call.update(kw)
        with pytest.raises(TypeError, match=f"{op.inputs[i].name} must be (an array|a list of arrays)"):
            op.kernel(**call)
    else:
        what = "a list of arrays" if op.inputs[i].list else "an array"
        with pytest.raises(TypeError, match=f"{op.inputs[i].name} must be {what}"):
            op.kernel(*args, **kw)


@pytest.mark.parametrize("op,i", list(_required_inputs()))
def test_a_string_for_a_required_array_is_a_type_error(op, i):
    """A non-array (here a string) for a required array is a TypeError naming the input, in ops
    run by the op library and in ops composed of other ops alike (the composed ones, such as
    scaled_dot_product_attention, raised AttributeError: 'str' object has no attribute 'shape')."""
    args, kw = _call_with(op, i, "abc")
    name = re.escape(op.inputs[i].name)
    with pytest.raises(TypeError, match=f"{name}(\\[0\\])? must be (an array|a list or tuple of arrays)"):
        if isinstance(op.forward, R.Impl):
            op.kernel(**dict(zip([t.name for t in op.inputs], args)), **kw)
        else:
            op.kernel(*args, **kw)


def test_none_in_the_torch_functions_is_a_type_error():
    torch = pytest.importorskip("torch")
    import canna_dl.torch as ct
    from canna_dl.torch.nn import functional as CF
    x = torch.ones(1, 1, 4, 4)
    for call in (lambda: ct.matmul(None, x), lambda: CF.linear(None, torch.ones(2, 4)),
                 lambda: CF.linear(x, None), lambda: CF.conv2d(None, torch.ones(1, 1, 3, 3)),
                 lambda: CF.layer_norm(None, (4,)), lambda: ct.softmax(None, 0), lambda: CF.max_pool2d(None, 2),
                 lambda: ct.relu(None)):
        with pytest.raises(TypeError, match="must be a"):
            call()


# ---------------------------------------------------------------------------------------------
# the C fast path's op ids

def test_op_ids_are_a_checked_enum():
    ids = [m.value for m in R.OpId]
    assert len(ids) == len(set(ids)), "duplicate fast-path op ids"
    for op in R.registered_ops():
        if op.fast:
            key = op.qualname.replace("::", "__")
            assert R.OpId(op.fast_id).name == key == R.OpId[key].name
            assert R.op_id(op.qualname) == op.fast_id
    with pytest.raises(R.RegistrationError, match="taken"):
        R._add_op_id("canna__relu", 999)
    src = (ROOT / "kernels" / "_elementwise.py").read_text()
    assert not re.search(r"fop=\d", src), "a literal fast-path op id"


# ---------------------------------------------------------------------------------------------
# generated ops: gradients in every framework

#: inputs in the domain of every generated op (positive for log / sqrt, away from relu's and abs' kinks)
def _x(n=5, dtype=np.float64):
    v = np.linspace(0.3, 2.0, n)
    return (v * np.array([1, -1] * n)[:n]).astype(dtype)


def _domain(op, x):
    return np.abs(x) if op.name in ("log", "sqrt", "rsqrt") else x


#: attribute values the generated ops are tested at (a required one needs one)
_ATTR_VALUES = {"alpha": 2, "exponent": 3}

#: the generated ops of one differentiable array input (or the broadcasting arithmetic's
#: elementwise inputs), one output and no required attribute without a value above (the products,
#: norms, ... are tested against PyTorch / TF / JAX in tests/test_torch_autograd.py,
#: test_tf_autograd.py, test_jax_autograd.py, test_torch_offload.py; the others have their family's
#: tests: tests/test_concat_pad.py, test_adaptive_pool.py, test_batchnorm.py, test_dropout.py, test_loss.py, ...)
_GEN = [op for op in R.registered_ops("canna") if op.generate and not op.name.endswith("_backward")
        and (len(op.inputs) == 1 or op.elementwise) and all(t.diff and not t.list for t in op.inputs)
        and len(op.outputs) == 1 and op.backward is not None
        and not any(a.required and a.name not in _ATTR_VALUES for a in op.attrs)]
_GEN_IDS = [op.name for op in _GEN]


def _torch_form(spec):
    """(torch function name, in place) of an entry's ``torch=`` item (a ``kernels.TorchFn``)."""
    return spec.fn, spec.inplace


def _attrs(op):
    return {a.name: _ATTR_VALUES.get(a.name, a.choices[-1] if a.choices else a.default) for a in op.attrs}


def _inputs(op, dtype=np.float64):
    """One array per input, in the op's domain: ``x`` of shape (5,) for one input; for several,
    (2, 5) and the others (5,), so that a broadcast operand's gradient is summed."""
    n = len(op.inputs)
    x = _domain(op, _x(dtype=dtype))
    if n == 1:
        return [x]
    return [np.stack([x, x[::-1] * 0.5]).astype(dtype)] + [_x(dtype=dtype)[::-1].copy() for _ in range(n - 1)]


@pytest.mark.parametrize("op", _GEN, ids=_GEN_IDS)
def test_torch_gradcheck(op):
    torch = pytest.importorskip("torch")
    xs = [torch.tensor(a, requires_grad=True) for a in _inputs(op)]
    f = op.torch_fn
    kw = _attrs(op)
    assert torch.autograd.gradcheck(lambda *t: f(*t, **kw), xs)
    # the custom op (torch.compile's path) agrees, with its fake from the shape rule
    from torch.library import opcheck
    res = opcheck(op.torch_op.default if hasattr(op.torch_op, "default") else op.torch_op,
                  tuple(x.detach() for x in xs), kw)
    assert all(v == "SUCCESS" for v in res.values()), res


@pytest.mark.parametrize("op", _GEN, ids=_GEN_IDS)
def test_torch_compile_fullgraph(op):
    torch = pytest.importorskip("torch")
    xs = [torch.tensor(a, requires_grad=True) for a in _inputs(op, np.float32)]
    f = op.torch_fn
    kw = _attrs(op)
    refs = [x.detach().clone().requires_grad_() for x in xs]
    torch.compiler.reset()
    g = torch.compile(lambda *t: f(*t, **kw).sum(), fullgraph=True)
    y = g(*xs)
    y.backward()
    y0 = f(*refs, **kw).sum()
    y0.backward()
    torch.testing.assert_close(y, y0)
    for x, ref in zip(xs, refs):
        torch.testing.assert_close(x.grad, ref.grad)


@pytest.mark.parametrize("op", _GEN, ids=_GEN_IDS)
def test_tf_finite_differences(op):
    tf = pytest.importorskip("tensorflow")
    f = op.tf_fn
    kw = _attrs(op)
    xs = [tf.constant(a) for a in _inputs(op)]
    theo, num = tf.test.compute_gradient(lambda *t: f(*t, **kw), xs)
    for t_, n_ in zip(theo, num):
        np.testing.assert_allclose(t_, n_, rtol=1e-4, atol=1e-6)

    def grad(*t):
        with tf.GradientTape() as tape:
            for v in t:
                tape.watch(v)
            y = tf.reduce_sum(f(*t, **kw))
        return tape.gradient(y, list(t))
    for a, b in zip(tf.function(grad)(*xs), grad(*xs)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    # the static shape of the tf.function graph comes from the shape rule
    specs = [tf.TensorSpec([4, 3], tf.float32)] + [tf.TensorSpec([3], tf.float32)] * (len(xs) - 1)
    conc = tf.function(lambda *t: f(*t, **kw)).get_concrete_function(*specs)
    assert conc.structured_outputs.shape.as_list() == [4, 3]


@pytest.mark.parametrize("op", _GEN, ids=_GEN_IDS)
def test_jax_grad(op):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    f = op.jax_fn
    kw = _attrs(op)
    xs = [jnp.asarray(a) for a in _inputs(op, np.float32)]
    argnums = tuple(range(len(xs)))
    gs = jax.grad(lambda *t: jnp.sum(f(*t, **kw)), argnums)(*xs)
    gjs = jax.jit(jax.grad(lambda *t: jnp.sum(f(*t, **kw)), argnums))(*xs)
    # central differences in float64 on the kernel itself
    xd = _inputs(op)
    h = 1e-6
    k = kernels.get_op(op.name).kernel
    for i, (g, gj) in enumerate(zip(gs, gjs)):
        def at(d, i=i):
            return np.sum(k(*[v + d if j == i else v for j, v in enumerate(xd)], **kw))
        num = np.array([(at(h * e) - at(-h * e)) / (2 * h) for e in np.eye(xd[i].size).reshape(-1, *xd[i].shape)])
        np.testing.assert_allclose(np.asarray(g), num.reshape(xd[i].shape), rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(np.asarray(gj), np.asarray(g), rtol=1e-6)


#: the torch functions' required arguments after the input
_OFFLOAD_ARGS = {"softmax": (0,), "log_softmax": (0,)}


@pytest.mark.parametrize("op", _GEN, ids=_GEN_IDS)
@pytest.mark.usefixtures("function_level")
def test_offload_maps_the_entry_torch_functions(op):
    torch = pytest.importorskip("torch")
    import importlib
    import canna_dl.torch as ct
    for spec in op.torch:
        name, inplace = _torch_form(spec)
        mod, _, attr = name.rpartition(".")
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except ImportError:
            m2, _, cls = mod.rpartition(".")
            fn = getattr(getattr(importlib.import_module(m2), cls), attr)
        xs = [torch.tensor(a) for a in _inputs(op, np.float32)]
        kw = [_attrs(op)[a.name] for a in op.attrs if a.required]   # positional (pow's exponent)
        if inplace:
            xs[0] = xs[0].clone()
        args = xs + kw + list(_OFFLOAD_ARGS.get(op.name, ()))
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]   # (clone is an op too)
        if name == "torch.Tensor.contiguous":   # of a contiguous tensor it returns it (not an op call)
            args[0] = args[0].reshape(-1, 1).expand(-1, 2)
            copies[0] = copies[0].reshape(-1, 1).expand(-1, 2)
        with ct.offload() as rep:
            y = fn(*copies)
        torch.testing.assert_close(y, fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
        report = op.name + ("_" if inplace else "")
        assert rep.ops[report].canna == 1, (name, rep)


# ---------------------------------------------------------------------------------------------
# the README

def test_readme_op_list_is_the_registry():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- registry-ops:begin -->\n(.*?)<!-- registry-ops:end -->", text, re.S)
    assert m, "README.md has no generated op list"
    assert m.group(1) == R.op_table(), ("README.md's op list differs from the registry; regenerate it with "
                                        "python -c 'import kernels; print(kernels._registry.op_table())'")


def test_bad_attribute_on_the_fast_path_gets_canna_message():
    torch = pytest.importorskip("torch")
    x = torch.ones(3)
    kernels.gelu(x)   # the fast path is on
    with pytest.raises(TypeError, match="approximate must be a str, not list"):
        kernels.gelu(x, [1])
    with pytest.raises(ValueError, match="approximate must be one of 'none', 'tanh'"):
        kernels.gelu(x, "fast")
