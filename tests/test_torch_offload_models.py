"""Real models under canna_dl.torch.offload(): torch.compile of a model Dynamo does not trace whole
(an nn.LSTM), and activation checkpointing (Hugging Face's ``gradient_checkpointing_enable()`` uses
the non-reentrant form), with losses and gradients compared with plain PyTorch in float64."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

#: the function level's tests (see conftest.function_level)
pytestmark = [pytest.mark.usefixtures("function_level"),
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]

nn = torch.nn
F = torch.nn.functional
D = torch.float64


def _assert_same_grads(model, twin):
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None, n
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=n)


class LstmNet(nn.Module):
    """Embedding → LSTM → linear on the last step: Dynamo does not trace nn.LSTM and runs the
    whole forward in eager mode, with its frame hook still set."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.fc(h[:, -1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ops", [None, ()])
def test_compiled_lstm_model_trains_under_offload(ops):
    # issue 12, item 23: Dynamo compiled the mode's own __torch_function__ frames without a guard
    # on `func`, and `input.dtype` came back as the int of an earlier `input.size(0)`:
    # "zeros(): argument 'dtype' must be torch.dtype, not int" in LSTM.forward
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = LstmNet().to(D)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="aot_eager")
    x, y = torch.randint(0, 100, (4, 7)), torch.randint(0, 5, (4,))
    for step in range(2):
        if step:
            torch._dynamo.reset()   # drops Dynamo's per-code settings: the next block sets them again
        for m in (model, twin):
            m.zero_grad()
        with ct.offload(ops=ops) as rep:
            loss = F.cross_entropy(compiled(x), y)
            loss.backward()
        ref = F.cross_entropy(model(x), y)
        ref.backward()
        torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
        _assert_same_grads(model, twin)
        if ops is None:
            assert rep.ops["linear"].canna == 1 and rep.ops["linear"].backward == 1
            assert rep.ops["cross_entropy"].canna == 1
        else:
            assert not rep.ops and rep.pytorch_calls["torch.lstm"] == 1


class Mlp(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def block(self, h):
        return torch.relu(self.b(F.relu(self.a(h))))

    def forward(self, x):
        return self.c(checkpoint(self.block, x, use_reentrant=self.reentrant))


class Cnn(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def block(self, h):
        return F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(h)))), 2)

    def forward(self, x):
        return self.fc(torch.flatten(checkpoint(self.block, x, use_reentrant=self.reentrant), 1))


_INPUTS = {Mlp: lambda: torch.randn(5, 8, dtype=D), Cnn: lambda: torch.randn(3, 1, 8, 8, dtype=D)}
#: an op of the checkpointed block, and its calls in the model's forward
_CHECKPOINTED = {Mlp: ("linear", 3), Cnn: ("conv2d", 2)}


@pytest.mark.parametrize("ops", [None, ("linear", "conv2d")])
@pytest.mark.parametrize("how, reentrant", [("backward", False), ("grad", False), ("backward", True)])
@pytest.mark.parametrize("net", [Mlp, Cnn])   # (PyTorch's reentrant form refuses torch.autograd.grad)
def test_activation_checkpointing_under_offload(net, how, ops, reentrant):
    # issue 12, item 24: the recomputation in the backward pass ran on PyTorch's ops (PyTorch pops
    # the mode while Tensor.backward's __torch_function__ runs, and canna's backward unpacked its
    # saved tensors with torch function disabled), which save other tensors than canna's:
    # "CheckpointError: recomputed values have different metadata" (or a different number)
    torch.manual_seed(0)
    model = net(reentrant).to(D)
    twin = copy.deepcopy(model)
    x = _INPUTS[net]().requires_grad_()   # the reentrant form differentiates only through inputs that do
    x2 = x.detach().clone().requires_grad_()
    y = torch.randint(0, 4, (x.shape[0],))
    with ct.offload(ops=ops) as rep:
        loss = F.cross_entropy(twin(x2), y)
        if how == "backward":
            loss.backward()
        else:
            inputs = [x2, *twin.parameters()]
            for t, g in zip(inputs, torch.autograd.grad(loss, inputs)):
                t.grad = g
    ref = F.cross_entropy(model(x), y)
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-10, atol=1e-12)
    _assert_same_grads(model, twin)
    op, calls = _CHECKPOINTED[net]
    st = rep.ops[op]
    assert st.fallback == 0 and st.backward == calls, st
    assert st.canna > calls, st    # the forward's calls and the recomputation's
    # PyTorch's set-up of the backward pass (the seed gradient...) is not the program's
    assert "torch.ones_like" not in rep.pytorch_calls, rep.pytorch_calls


@pytest.mark.parametrize("net", [Mlp, Cnn])
def test_activation_checkpointing_strict_all_on_canna(net):
    torch.manual_seed(0)
    model = net(False).to(D)
    twin = copy.deepcopy(model)
    x = _INPUTS[net]()
    y = torch.randint(0, 4, (x.shape[0],))
    with ct.offload(strict=True) as rep:
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
    F.cross_entropy(model(x), y).backward()
    _assert_same_grads(model, twin)
    assert all(st.fallback == 0 for st in rep.ops.values())
    assert rep.ops["relu"].canna > 2 and rep.ops["cross_entropy"].backward == 1


@pytest.mark.timeout(900)
def test_compiled_backward_under_offload_is_counted_once():
    # the backward pass runs under the mode: the compiled backward's canna ops are counted, and
    # Inductor compiling that backward at the first backward pass (on fake tensors) is not
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.LogSoftmax(1))
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin)
    x = torch.randn(5, 6)
    with ct.offload(strict=True) as rep:
        out = compiled(x)
        out.sum().backward()
    ref = model(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert {k: (v.canna, v.fallback, v.backward) for k, v in rep.ops.items() if k != "sum"} == {
        "linear": (2, 0, 2), "relu": (1, 0, 1), "log_softmax": (1, 0, 1)}
    # the runtime's few checks (views, strides), not the compiler's hundreds of calls
    assert sum(rep.pytorch_calls.values()) < 30, rep.pytorch_calls


class Block(nn.Module):
    """A pre-norm transformer block (attention with dropout, GELU MLP)."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, -1))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        return self.o((self.drop(a) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 5)
        self.checkpointed = True

    def forward(self, x):
        for blk in self.blocks:     # what gradient_checkpointing_enable() does to each layer
            x = checkpoint(blk, x, use_reentrant=False) if self.checkpointed else blk(x)
        return self.head(x.mean(1))


def test_checkpointed_transformer_blocks_under_offload():
    # dropout in the block: the recomputation replays the forward's random state. canna's dropout
    # draws other elements than PyTorch's (README), so the comparison with plain PyTorch leaves
    # dropout on PyTorch; the test below runs it on canna
    torch.manual_seed(0)
    model = Transformer().to(D)
    twin = copy.deepcopy(model)
    x, y = torch.randn(3, 6, 16, dtype=D), torch.tensor([0, 3, 4])
    torch.manual_seed(1)
    with ct.offload(strict=True, exclude=("dropout",)) as rep:
        loss = F.cross_entropy(twin(x), y)
        loss.backward()
    torch.manual_seed(1)
    ref = F.cross_entropy(model(x), y)
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    _assert_same_grads(model, twin)
    for op in ("layer_norm", "linear", "matmul", "softmax", "gelu"):
        st = rep.ops[op]
        assert st.fallback == 0 and st.canna > st.backward > 0, (op, st)


def test_checkpoint_recomputation_replays_canna_dropout_mask():
    """canna's dropout draws its seed from torch's generator, whose state checkpointing restores for
    the recomputation: the recomputed forward drops the same elements, so the checkpointed model's
    loss and gradients equal the non-checkpointed one's, both under offload()."""
    torch.manual_seed(0)
    model = Transformer().to(D)
    plain = copy.deepcopy(model)
    plain.checkpointed = False
    x, y = torch.randn(3, 6, 16, dtype=D), torch.tensor([0, 3, 4])
    losses = []
    for m in (model, plain):
        torch.manual_seed(1)
        with ct.offload(strict=True) as rep:
            loss = F.cross_entropy(m(x), y)
            loss.backward()
        losses.append(loss)
        assert rep.ops["dropout"].canna >= 2 and rep.ops["dropout"].fallback == 0
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=1e-12)
    _assert_same_grads(model, plain)
