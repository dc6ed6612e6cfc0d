"""torch.compile(fullgraph=True) of models built from canna's ops: Dynamo traces the
``torch.ops.canna`` custom ops without graph breaks (their fake implementations give shapes),
AOTAutograd traces their registered backward, and the compiled model matches eager.

Compiling is slow (tens of seconds with Inductor on a busy 2-core machine): one test uses Inductor,
the others a recording backend on top of ``aot_eager``."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
import canna_dl.torch.nn as cnn  # noqa: E402
import canna_dl.torch.nn.functional as CF  # noqa: E402

#: the function level's tests (see conftest.function_level)
pytestmark = [pytest.mark.usefixtures("function_level"),
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]


class Net(torch.nn.Module):
    """A small model of canna ops: conv, relu, pool, linear, layer norm, activations, losses."""

    def __init__(self):
        super().__init__()
        self.conv = cnn.Conv2d(1, 4, 3, padding=1)
        self.pool = cnn.MaxPool2d(2)
        self.fc = cnn.Linear(4 * 4 * 4, 5)
        self.ln = cnn.LayerNorm(5)

    def forward(self, x, y):
        h = self.pool(ct.relu(self.conv(x)))
        h = self.ln(self.fc(h.flatten(1)))
        h = ct.add(CF.gelu(h), ct.mul(ct.sigmoid(h), 2.0))
        h = ct.sub(ct.div(h, 1.5), CF.silu(h), alpha=0.5)
        loss = ct.add(CF.cross_entropy(h, y), ct.mean(ct.softmax(h, 1)), alpha=0.1)
        return ct.add(loss, ct.mul(ct.sum(ct.tanh(h)), 0.01))


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3, 1, 8, 8), torch.tensor([0, 3, 4])


def _check_matches(model, compiled, x, y):
    loss_e = model(x, y)
    loss_e.backward()
    loss_c = compiled(x, y)
    loss_c.backward()
    torch.testing.assert_close(loss_c, loss_e)
    for (n, p), q in zip(model.named_parameters(), compiled.parameters() if hasattr(compiled, "parameters")
                         else []):
        torch.testing.assert_close(q.grad, p.grad, msg=n)


def _recorder():
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func
    graphs = {"dynamo": [], "forward": [], "backward": []}

    def fw(gm, _):
        graphs["forward"].append(gm)
        return make_boxed_func(gm.forward)

    def bw(gm, _):
        graphs["backward"].append(gm)
        return make_boxed_func(gm.forward)

    aot = aot_autograd(fw_compiler=fw, bw_compiler=bw)

    def backend(gm, example_inputs):
        graphs["dynamo"].append(gm)
        return aot(gm, example_inputs)
    return backend, graphs


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.timeout(900)
def test_compile_fullgraph_inductor_matches_eager():
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, fullgraph=True)
    x, y = _inputs()
    loss_e = model(x, y)
    loss_e.backward()
    loss_c = compiled(x, y)
    loss_c.backward()
    torch.testing.assert_close(loss_c, loss_e)
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=n)
    # a second call reuses the compiled code (no recompilation) and still matches
    x2 = torch.randn(3, 1, 8, 8)
    torch.testing.assert_close(compiled(x2, y), model(x2, y))


@pytest.mark.timeout(600)
def test_compiled_graphs_are_made_of_canna_ops():
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    backend, graphs = _recorder()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    x, y = _inputs()
    loss_c = compiled(x, y)
    loss_c.backward()
    loss_e = model(x, y)
    loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e)
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=n)
    assert len(graphs["dynamo"]) == 1
    fw = " ".join(_targets(graphs["forward"][0]))
    bw = " ".join(_targets(graphs["backward"][0]))
    for op in ("conv2d", "relu", "max_pool2d", "linear", "layer_norm", "gelu", "sigmoid", "silu", "softmax",
               "cross_entropy", "mean", "sum", "tanh", "add", "mul_scalar", "div_scalar", "sub"):
        assert f"canna.{op}.default" in fw, op
    for op in ("conv2d_backward", "relu_backward", "max_pool2d_backward", "linear_backward", "layer_norm_backward",
               "gelu_backward", "sigmoid_backward", "silu_backward", "softmax_backward", "cross_entropy_backward",
               "mean_backward", "sum_backward", "tanh_backward"):
        assert f"canna.{op}.default" in bw, op
    # no compute of PyTorch's own in either graph (views and the graph's glue only), but the
    # summation of the gradients of a tensor used several times (PyTorch's autograd accumulates
    # them, in eager mode too)
    glue = ("view", "reshape", "expand", "t.default", "detach", "alias", "_unsafe_view")
    fw_aten = [t for t in _targets(graphs["forward"][0]) if t.startswith("aten.") and not any(v in t for v in glue)]
    bw_aten = [t for t in _targets(graphs["backward"][0]) if t.startswith("aten.") and not any(v in t for v in glue)]
    assert not fw_aten, fw_aten
    assert set(bw_aten) <= {"aten.add.Tensor"}, bw_aten


@pytest.mark.timeout(600)
def test_offload_under_compile_routes_to_custom_ops():
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.LogSoftmax(1))
    twin = copy.deepcopy(model)
    backend, graphs = _recorder()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    x = torch.randn(5, 6)
    with ct.offload() as rep:
        out = compiled(x)
        out.sum().backward()
    ref = model(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    fw = _targets(graphs["forward"][0])
    assert fw.count("canna.linear.default") == 2 and "canna.relu.default" in fw and "canna.log_softmax.default" in fw
    # the compiled graph's calls of canna's custom ops are in the report
    assert rep.ops["linear"].canna == 2 and rep.ops["relu"].canna == 1


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strict", [False, True])
def test_torch_export(strict):
    torch.manual_seed(0)
    model = torch.nn.Sequential(cnn.Linear(4, 8), cnn.GELU(), cnn.Linear(8, 3), cnn.LogSoftmax(1))
    x = torch.randn(5, 4)
    ep = torch.export.export(model, (x,), strict=strict)
    targets = _targets(ep.graph_module)
    assert targets == ["canna.linear.default", "canna.gelu.default", "canna.linear.default",
                       "canna.log_softmax.default"], targets
    torch.testing.assert_close(ep.module()(x), model(x))


class LogExpNet(torch.nn.Module):
    """Softmax written with exp, and nll of its log (the demo's loss): log and exp in both graphs."""

    def __init__(self):
        super().__init__()
        self.fc = cnn.Linear(6, 4)

    def forward(self, x, y):
        e = ct.exp(self.fc(x))
        p = ct.div(e, ct.sum(e, 1, keepdim=True))
        return CF.nll_loss(ct.log(p), y)


@pytest.mark.timeout(600)
def test_compile_fullgraph_log_exp_matches_eager():
    torch.manual_seed(0)
    model = LogExpNet()
    twin = copy.deepcopy(model)
    backend, graphs = _recorder()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    x, y = torch.randn(5, 6), torch.tensor([0, 3, 1, 2, 3])
    loss_c = compiled(x, y)
    loss_c.backward()
    loss_e = model(x, y)
    loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e)
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=n)
    # and PyTorch's own ops agree
    ref = torch.nn.functional.nll_loss(torch.log_softmax(torch.nn.functional.linear(x, model.fc.weight,
                                                                                    model.fc.bias), 1), y)
    torch.testing.assert_close(loss_e, ref)
    assert len(graphs["dynamo"]) == 1
    fw = _targets(graphs["forward"][0])
    bw = _targets(graphs["backward"][0])
    assert "canna.exp.default" in fw and "canna.log.default" in fw, fw
    assert "canna.div.default" in bw and "canna.mul.default" in bw, bw   # log's and exp's gradients
    glue = ("view", "reshape", "expand", "t.default", "detach", "alias", "_unsafe_view")
    aten = [t for t in fw + bw if t.startswith("aten.") and not any(v in t for v in glue)]
    assert set(aten) <= {"aten.add.Tensor"}, aten


@pytest.mark.timeout(600)
def test_offload_under_compile_routes_log_exp():
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(6, 3), nn.Softmax(1))
    twin = copy.deepcopy(model)
    backend, graphs = _recorder()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    x, y = torch.randn(5, 6), torch.tensor([0, 2, 1, 1, 0])

    def loss_of(m):
        return nn.functional.nll_loss(torch.log(m(x)), y) + torch.exp(m(x)).mean()

    with ct.offload() as rep:
        loss = torch.compile(lambda: loss_of(compiled), fullgraph=True, backend=backend)()
        loss.backward()
    ref = loss_of(model)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    fw = " ".join(" ".join(_targets(g)) for g in graphs["forward"])
    assert "canna.log.default" in fw and "canna.exp.default" in fw, fw
    assert rep.ops["log"].canna >= 1 and rep.ops["exp"].canna >= 1
