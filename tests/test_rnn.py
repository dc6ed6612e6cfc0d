"""kernels.lstm (issue 14), composed of registered ops: ``nn.LSTM`` under offload() against plain
PyTorch in float64 (outputs, final states, gradients of the input and every parameter), for
batch-first or not, one or two directions, one or two layers, with or without biases; the cases it
does not take fall back to PyTorch with the reason; bad input is a clear error."""
from __future__ import annotations

import pytest

import kernels

torch = pytest.importorskip("torch")
import canna_dl.torch as ct  # noqa: E402


@pytest.mark.parametrize("batch_first, bidirectional, layers, bias", [
    (True, False, 1, True), (False, False, 2, True), (True, True, 2, True), (False, True, 1, False)])
def test_lstm_matches_torch_float64(batch_first, bidirectional, layers, bias):
    torch.manual_seed(0)
    m = torch.nn.LSTM(5, 6, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional,
                      bias=bias).double()
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    dirs = 2 if bidirectional else 1
    h0 = torch.randn(layers * dirs, 4 if not batch_first else 3, 6, dtype=torch.float64)
    c0 = torch.randn_like(h0)
    w = torch.randn(3, 4, 6 * dirs, dtype=torch.float64)

    def run():
        y, (h, c) = m(x, (h0, c0))
        loss = (y * w).sum() + h.pow(2).sum() + c.sin().sum()
        return [y, h, c] + list(torch.autograd.grad(loss, [x] + list(m.parameters())))
    want = run()
    with ct.offload() as rep:
        got = run()
    assert rep.ops["lstm"].canna == 1 and rep.ops["lstm"].fallback == 0
    assert rep.coverage()["share"] == 1.0, rep.coverage()
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_lstm_eval_without_grad_runs_on_canna():
    torch.manual_seed(0)
    m = torch.nn.LSTM(4, 5, num_layers=2, batch_first=True).eval()   # parameters require grad
    x = torch.randn(2, 3, 4)
    want = m(x)[0]
    with ct.offload() as rep, torch.no_grad():
        got = m(x)[0]
    assert rep.ops["lstm"].canna == 1, rep
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_lstm_cases_not_taken_fall_back():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    for m in (torch.nn.LSTM(4, 5, proj_size=2, batch_first=True), torch.nn.LSTM(4, 5, 2, dropout=0.5)):
        m.train()
        with ct.offload() as rep:
            y, _ = m(x)
        assert rep.ops["lstm"].fallback == 1 and rep.ops["lstm"].canna == 0, rep
        torch.manual_seed(1)


def test_lstm_bad_input():
    w = [torch.zeros(8, 3), torch.zeros(8, 2)]
    with pytest.raises(ValueError, match="3-D"):
        kernels.lstm(torch.zeros(2, 3), [torch.zeros(1, 2, 2)] * 2, w, False, 1, 0.0, False, False, True)
    with pytest.raises(ValueError, match="h_0 has shape"):
        kernels.lstm(torch.zeros(2, 4, 3), [torch.zeros(1, 3, 2)] * 2, w, False, 1, 0.0, False, False, True)
    with pytest.raises(ValueError, match="parameter arrays"):
        kernels.lstm(torch.zeros(2, 4, 3), [torch.zeros(1, 2, 2)] * 2, w[:1], False, 1, 0.0, False, False, True)
