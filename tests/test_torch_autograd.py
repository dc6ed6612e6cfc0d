"""canna_dl.torch autograd shims: every differentiable op passes torch.autograd.gradcheck in float64
(through canna's backward kernels), the add example, broadcasting, double backward, the
version counter, the custom ops (opcheck), bad input."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
import canna_dl.torch.nn as cnn  # noqa: E402
import canna_dl.torch.nn.functional as CF  # noqa: E402
from torch.autograd import gradcheck, gradgradcheck  # noqa: E402

D = torch.float64


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


def r(*shape, grad=True, dtype=D):
    return torch.randn(shape, dtype=dtype, requires_grad=grad)


def pos(*shape):
    """Values away from 0 (a divisor)."""
    return (torch.rand(shape, dtype=D) + 0.5).requires_grad_(True)


def canna_node(t):
    """The autograd node of a canna op (its class is one of canna_dl.torch's Functions)."""
    return type(t.grad_fn).__module__ == "torch.autograd.function" and type(t.grad_fn).__name__.startswith("_")


# ---------------------------------------------------------------------------------------------
# gradcheck of every op

BINARY = {
    "add": lambda x, y: ct.add(x, y, alpha=0.7),
    "sub": lambda x, y: ct.sub(x, y, alpha=-1.5),
    "mul": ct.mul,
    "div": ct.div,
}

SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ()), ((), (2, 3))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_gradcheck_binary_broadcasting(name, shapes):
    x = r(*shapes[0])
    y = pos(*shapes[1]) if name == "div" else r(*shapes[1])
    assert gradcheck(BINARY[name], (x, y))
    out = BINARY[name](x, y)
    assert canna_node(out)
    out.sum().backward()
    assert x.grad.shape == x.shape and y.grad.shape == y.shape


@pytest.mark.parametrize("name", sorted(BINARY))
def test_gradcheck_binary_scalars(name):
    x = pos(3, 4)
    f = BINARY[name]
    assert gradcheck(lambda t: f(t, 2.5), (x,))
    if name in ("add", "mul"):
        assert gradcheck(lambda t: f(3, t), (x,))
    assert gradcheck(lambda t: ct.sub(2.0, t), (x,))
    assert gradcheck(lambda t: ct.div(2.0, t), (x,))


def test_binary_mixed_dtypes_grad_in_input_dtype():
    x = r(3, 4, dtype=torch.float32)
    y = r(4, dtype=D)
    out = ct.mul(x, y)
    assert out.dtype == D
    out.sum().backward()
    assert x.grad.dtype == torch.float32 and y.grad.dtype == D
    torch.testing.assert_close(x.grad, y.detach().float().expand(3, 4))
    torch.testing.assert_close(y.grad, x.detach().double().sum(0))


UNARY = {
    "relu": ct.relu,
    "sigmoid": ct.sigmoid,
    "tanh": ct.tanh,
    "gelu": CF.gelu,
    "gelu_tanh": lambda x: CF.gelu(x, approximate="tanh"),
    "silu": CF.silu,
    "softmax": lambda x: ct.softmax(x, 1),
    "softmax_dim0": lambda x: CF.softmax(x, 0),
    "log_softmax": lambda x: ct.log_softmax(x, -1),
    "sum_all": ct.sum,
    "sum_dim": lambda x: ct.sum(x, 1, keepdim=True),
    "sum_dims": lambda x: ct.sum(x, (0, 2)),
    "mean_all": ct.mean,
    "mean_dim": lambda x: ct.mean(x, -1),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_gradcheck_unary(name):
    x = r(2, 3, 4)
    assert gradcheck(UNARY[name], (x,))
    assert canna_node(UNARY[name](x))


def test_gradcheck_matmul_shapes():
    for sa, sb in [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
                   ((3, 4), (4,))]:
        assert gradcheck(ct.matmul, (r(*sa), r(*sb))), (sa, sb)


def test_gradcheck_linear():
    assert gradcheck(CF.linear, (r(2, 3, 4), r(5, 4), r(5)))
    assert gradcheck(CF.linear, (r(6, 4), r(5, 4), None))
    assert gradcheck(CF.linear, (r(4), r(5, 4), r(5)))


def test_gradcheck_layer_norm_rms_norm():
    assert gradcheck(lambda x, w, b: CF.layer_norm(x, (3, 4), w, b), (r(2, 3, 4), r(3, 4), r(3, 4)))
    assert gradcheck(lambda x: CF.layer_norm(x, 4), (r(5, 4),))
    assert gradcheck(lambda x, w: CF.rms_norm(x, (4,), w, 1e-6), (r(3, 4), r(4)))
    assert gradcheck(lambda x: CF.rms_norm(x, [4]), (r(3, 4),))


def test_gradcheck_conv2d():
    assert gradcheck(lambda x, w, b: CF.conv2d(x, w, b, padding=1), (r(2, 3, 5, 5), r(4, 3, 3, 3), r(4)))
    assert gradcheck(lambda x, w: CF.conv2d(x, w, None, stride=2, dilation=1, groups=2), (r(1, 4, 6, 6),
                                                                                         r(2, 2, 3, 3)))
    assert gradcheck(lambda x, w: CF.conv2d(x, w, padding="same"), (r(3, 5, 5), r(2, 3, 3, 3)))


def test_gradcheck_max_pool2d():
    assert gradcheck(lambda x: CF.max_pool2d(x, 2), (r(2, 3, 4, 6),))
    assert gradcheck(lambda x: CF.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (r(1, 2, 7, 7),))
    y, idx = CF.max_pool2d(r(1, 1, 4, 4), 2, return_indices=True)
    assert idx.dtype == torch.int64 and not idx.requires_grad and y.requires_grad


def test_gradcheck_losses():
    t = torch.tensor([0, 3, 1, 4])
    assert gradcheck(lambda x: CF.cross_entropy(x, t), (r(4, 5),))
    w = torch.rand(5, dtype=D) + 0.5
    assert gradcheck(lambda x: CF.cross_entropy(x, t, weight=w, reduction="sum", label_smoothing=0.1), (r(4, 5),))
    assert gradcheck(lambda x: CF.cross_entropy(x, torch.tensor([[0, 2], [1, 1]]), reduction="none"),
                     (r(2, 3, 2),))
    assert gradcheck(lambda x: CF.nll_loss(x, t, ignore_index=1), (r(4, 5),))


# ---------------------------------------------------------------------------------------------
# the add example, values against PyTorch

def test_add_then_sum_gives_ones():
    # [1,2,3] + [4,5,6] = [5,7,9]; after loss = sum(a + b) both grads are ones
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    c = ct.add(a, b)
    assert c.tolist() == [5.0, 7.0, 9.0]
    loss = ct.sum(c)
    loss.backward()
    assert a.grad.tolist() == [1.0, 1.0, 1.0] and b.grad.tolist() == [1.0, 1.0, 1.0]
    big = torch.rand(32, 64, 128)
    assert ct.add(big, big).shape == (32, 64, 128)


def test_values_match_pytorch_float32():
    x = torch.randn(8, 3, 10, 10)
    w = torch.randn(6, 3, 3, 3)
    b = torch.randn(6)
    F = torch.nn.functional
    torch.testing.assert_close(CF.conv2d(x, w, b, padding=1), F.conv2d(x, w, b, padding=1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(CF.max_pool2d(x, 2), F.max_pool2d(x, 2))
    torch.testing.assert_close(CF.layer_norm(x, (10,)), F.layer_norm(x, (10,)), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ct.softmax(x, 1), torch.softmax(x, 1))
    t = torch.randint(0, 3, (8, 10, 10))
    torch.testing.assert_close(CF.cross_entropy(x, t), F.cross_entropy(x, t), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# integer inputs, no-grad fast path

def test_integer_inputs():
    i = torch.tensor([1, -2, 3], dtype=torch.int32)
    assert ct.add(i, i).dtype == torch.int32 and ct.add(i, i).tolist() == [2, -4, 6]
    assert ct.relu(i).tolist() == [1, 0, 3]
    assert ct.sum(i).dtype == torch.int64
    assert ct.div(i, 2).dtype == torch.float32
    # an integer operand of a differentiable op with a float operand that requires grad: grad to the float only
    f = torch.tensor([0.5, 1.5, 2.5], requires_grad=True)
    out = ct.mul(i, f)
    out.sum().backward()
    assert f.grad.tolist() == [1.0, -2.0, 3.0]
    for fn in (lambda: CF.conv2d(torch.ones(1, 1, 3, 3, dtype=torch.int64), torch.ones(1, 1, 3, 3, dtype=torch.int64)),
               lambda: CF.linear(i, torch.ones(2, 3, dtype=torch.int32)),
               lambda: CF.gelu(i), lambda: CF.layer_norm(i, (3,)), lambda: ct.matmul(i, i)):
        with pytest.raises(TypeError, match="floating"):
            fn()
    with pytest.raises(TypeError):
        ct.softmax(i, 0)


def test_no_grad_path_returns_plain_results():
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y = ct.relu(x)
    assert y.grad_fn is None and not y.requires_grad
    z = ct.relu(x.detach())
    assert z.grad_fn is None


def test_parameters_and_modules():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5), torch.nn.LayerNorm(5),
                              torch.nn.GELU(), torch.nn.LogSoftmax(1))
    mine = torch.nn.Sequential(cnn.Conv2d(2, 4, 3, padding=1), cnn.ReLU(), cnn.MaxPool2d(2), torch.nn.Flatten(),
                               cnn.Linear(4 * 3 * 3, 5), cnn.LayerNorm(5), cnn.GELU(), cnn.LogSoftmax(1))
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(3, 2, 6, 6)
    t = torch.tensor([1, 0, 4])
    loss_r = torch.nn.NLLLoss()(ref(x), t)
    loss_m = cnn.NLLLoss()(mine(x), t)
    torch.testing.assert_close(loss_m, loss_r)
    loss_r.backward()
    loss_m.backward()
    for (n, p), q in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=n)


# ---------------------------------------------------------------------------------------------
# double backward, version counter

@pytest.mark.parametrize("name", ["add", "mul", "div", "matmul", "linear", "sum", "mean", "relu"])
def test_double_backward_correct(name):
    fns = {"add": lambda x, y: ct.add(x, y, alpha=2), "mul": ct.mul, "div": lambda x, y: ct.div(x, y.abs() + 1),
           "matmul": lambda x, y: ct.matmul(x, y.T), "linear": lambda x, y: CF.linear(x, y),
           "sum": lambda x, y: ct.sum(ct.mul(x, y), 1), "mean": lambda x, y: ct.mean(ct.mul(x, y), 0, keepdim=True),
           "relu": lambda x, y: ct.relu(ct.mul(x, y))}
    assert gradgradcheck(fns[name], (r(3, 4), r(3, 4)))


@pytest.mark.parametrize("fn", [ct.sigmoid, ct.tanh, CF.silu, CF.gelu, lambda x: ct.softmax(x, 0),
                                lambda x: CF.layer_norm(x, (3,))])
def test_double_backward_clear_error(fn):
    x = r(2, 3)
    (g,) = torch.autograd.grad(fn(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward of canna::"):
        g.sum().backward()
    # the first-order gradient computed with create_graph is right, and the state stays usable
    (g0,) = torch.autograd.grad(fn(x).pow(2).sum(), x)
    torch.testing.assert_close(g.detach(), g0)


def test_inplace_modification_of_saved_tensor_raises():
    x = r(3)
    y = ct.sigmoid(x)          # saves its output
    y.add_(1)                  # PyTorch's in-place op bumps y's version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    a, b = r(3), r(3)
    c = ct.mul(a, b)           # saves a and b
    with torch.no_grad():
        ct.relu_(b)            # canna's in-place op bumps the version too
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    assert ct.add(a, 1).detach().shape == (3,)


def test_relu_inplace_autograd():
    x = r(5)
    h = ct.mul(x, 1.0)         # a non-leaf
    v = h._version
    out = CF.relu(h, inplace=True)
    assert out is h and h._version > v
    out.sum().backward()
    torch.testing.assert_close(x.grad, (x.detach() > 0).to(D))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        ct.relu_(r(3))


# ---------------------------------------------------------------------------------------------
# the custom ops (eager use, registration, meta tensors)

def test_custom_ops_opcheck():
    from torch.library import opcheck
    a = r(3, 4)
    b = r(4)
    cases = {
        "add": (a, b, 2), "sub": (a, b), "mul": (a, b), "div": (a, pos(4)), "add_scalar": (a, 2.5, 2),
        "rsub_scalar": (a, 3), "mul_scalar": (a, -2), "div_scalar": (a, 4.0), "rdiv_scalar": (pos(3, 4), 3.0),
        "matmul": (a, r(4, 2)), "linear": (a, r(5, 4), r(5)), "relu": (a,), "sigmoid": (a,), "tanh": (a,),
        "gelu": (a, "tanh"), "silu": (a,), "softmax": (a, 1), "log_softmax": (a, 0),
        "layer_norm": (a, [4], b, b, 1e-5), "rms_norm": (a, [4], b, None),
        "conv2d": (r(1, 2, 5, 5), r(3, 2, 3, 3), r(3), [1, 1], [1, 1], [1, 1], 1),
        "max_pool2d": (r(1, 2, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False),
        "cross_entropy": (a, torch.tensor([0, 1, 3]), None, -100, "mean", 0.0),
        "nll_loss": (a, torch.tensor([0, 1, 3]), None, -100, "sum"),
        "sum": (a, [1], True, None), "mean": (a, None, False, None), "cast": (a, torch.float32),
    }
    for name, args in cases.items():
        res = opcheck(getattr(torch.ops.canna, name).default, args)
        assert all(v == "SUCCESS" for v in res.values()), (name, res)


def test_custom_ops_eager_autograd():
    x, w, b = r(2, 3), r(4, 3), r(4)
    y = torch.ops.canna.linear(x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w, b))
    assert gradcheck(torch.ops.canna.linear, (x, w, b))
    assert gradcheck(lambda t: torch.ops.canna.layer_norm(t, [3], None, None, 1e-5)[0], (x,))


def test_meta_tensors_use_fake_implementations():
    x = torch.empty(2, 3, 8, 8, device="meta")
    w = torch.empty(5, 3, 3, 3, device="meta")
    y = CF.conv2d(x, w, padding=1)
    assert y.device.type == "meta" and y.shape == (2, 5, 8, 8)
    p = CF.max_pool2d(y, 3, stride=2, ceil_mode=True)
    assert p.shape == torch.nn.functional.max_pool2d(torch.empty(2, 5, 8, 8), 3, 2, ceil_mode=True).shape
    assert ct.matmul(torch.empty(4, 1, 2, 3, device="meta"), torch.empty(5, 3, 6, device="meta")).shape == (4, 5, 2, 6)


# ---------------------------------------------------------------------------------------------
# bad input

def test_complex_requiring_grad_refused():
    z = torch.randn(3, dtype=torch.complex64, requires_grad=True)
    with pytest.raises(TypeError, match="complex64"):
        ct.add(z, z)
    with pytest.raises(TypeError, match="requires grad"):
        ct.relu(z)
    with pytest.raises(TypeError):
        ct.sum(z)
    assert ct.add(torch.ones(2, requires_grad=True), 1).tolist() == [2.0, 2.0]


def test_mixed_devices_refused():
    a = torch.ones(3, requires_grad=True)
    m = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match="one device"):
        ct.add(a, m)
    with pytest.raises(ValueError, match="one device"):
        CF.linear(torch.ones(2, 3), torch.empty(4, 3, device="meta"))
    assert ct.add(a, a).tolist() == [2.0, 2.0, 2.0]


def test_bad_arguments():
    x = r(3, 4)
    with pytest.raises(ValueError):
        ct.add(x, r(5))
    with pytest.raises(TypeError):
        ct.add(x, "a")
    with pytest.raises(TypeError):
        ct.add(1, 2)
    with pytest.raises(TypeError):
        ct.add(x, x, alpha=torch.tensor(1.0))
    with pytest.raises(IndexError):
        ct.softmax(x, 5)
    with pytest.raises(TypeError, match="dim"):
        ct.softmax(x, 1.5)
    with pytest.raises(ValueError):
        CF.gelu(x, approximate="fast")
    with pytest.raises(ValueError):
        ct.matmul(x, r(3, 4))
    with pytest.raises(ValueError):
        CF.conv2d(r(1, 2, 5, 5), r(3, 4, 3, 3))
    with pytest.raises(NotImplementedError, match="weight"):
        CF.cross_entropy(x, torch.tensor([0, 1, 2]), weight=r(4))
    with pytest.raises(TypeError, match="target|expected a torch.Tensor"):
        CF.nll_loss(x, [0, 1, 2])
    with pytest.raises(NotImplementedError):
        CF.cross_entropy(x, torch.rand(3, 4, dtype=D))
    # the runtime stays usable
    y = ct.add(x, 1)
    y.sum().backward()
    assert x.grad.tolist() == [[1.0] * 4] * 3


# ---------------------------------------------------------------------------------------------
# log / exp

def test_gradcheck_log_exp():
    x = pos(2, 3, 4)                        # log: positive inputs
    assert gradcheck(ct.log, (x,))
    assert canna_node(ct.log(x))
    e = r(2, 3, 4)
    assert gradcheck(ct.exp, (e,))
    assert canna_node(ct.exp(e))
    # the gradients against PyTorch's own ops, through a chain (softmax -> log -> nll as in the demo)
    p = r(5, 4)
    out = ct.mul(ct.log(ct.softmax(p, 1)), ct.exp(ct.mul(p, 0.5)))
    out.sum().backward()
    q = p.detach().clone().requires_grad_(True)
    (torch.log(torch.softmax(q, 1)) * torch.exp(q * 0.5)).sum().backward()
    torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3), (torch.bfloat16, 8e-3)],
                         ids=str)
def test_log_exp_values_match_pytorch(dtype, tol):
    x = torch.rand(64, 33, dtype=dtype) * 4 + 0.01
    e = torch.randn(64, 33, dtype=dtype) * 3
    for mine, ref, a in ((ct.log, torch.log, x), (ct.exp, torch.exp, e)):
        y = mine(a)
        assert y.dtype == dtype and y.shape == a.shape
        torch.testing.assert_close(y, ref(a), rtol=tol, atol=tol)
        # the gradient in the input dtype
        t = a.clone().requires_grad_(True)
        mine(t).sum().backward()
        u = a.clone().requires_grad_(True)
        ref(u).sum().backward()
        assert t.grad.dtype == dtype
        torch.testing.assert_close(t.grad, u.grad, rtol=tol, atol=tol)


def test_log_exp_special_values_and_errors():
    x = torch.tensor([0.0, -1.0, 1.0, float("inf"), float("nan")])
    torch.testing.assert_close(ct.log(x), torch.log(x), equal_nan=True)
    torch.testing.assert_close(ct.exp(torch.tensor([1000.0, -1000.0, 0.0])), torch.tensor([float("inf"), 0.0, 1.0]))
    for bad in (torch.tensor([1, 2, 3]), torch.tensor([1, 2], dtype=torch.int32), torch.tensor([True])):
        for fn in (ct.log, ct.exp):
            with pytest.raises(TypeError, match="floating"):
                fn(bad)
    with pytest.raises(TypeError, match="torch.Tensor"):
        ct.log([1.0, 2.0])
    with pytest.raises(TypeError, match="torch.Tensor"):
        ct.exp(2.0)
    # double backward: log's and exp's backward are made of differentiable canna ops (div, mul), so
    # their second derivatives are right (the registry's backward, tests/test_registry.py)
    p = pos(3)
    assert torch.autograd.gradgradcheck(ct.log, (p.detach().double().requires_grad_(),))
    assert torch.autograd.gradgradcheck(ct.exp, (r(3).double().requires_grad_(),))
    # the state stays usable
    torch.testing.assert_close(ct.exp(torch.zeros(2)), torch.ones(2))


def test_log_exp_custom_ops_opcheck():
    from torch.library import opcheck
    for name, args in (("log", (pos(3, 4),)), ("exp", (r(3, 4),))):
        res = opcheck(getattr(torch.ops.canna, name).default, args)
        assert all(v == "SUCCESS" for v in res.values()), (name, res)
    assert gradcheck(torch.ops.canna.log, (pos(2, 3),))
    assert gradcheck(torch.ops.canna.exp, (r(2, 3),))
    assert ct.log(torch.empty(2, 3, device="meta")).shape == (2, 3)
