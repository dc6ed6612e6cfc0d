"""Activations and unary math of real models (issue 14; kernels/ops/activation.py, simulator kernels in
kernels/_sim/op_activation.c): hardswish, hardsigmoid, rsqrt, sin, cos and the backward kernels of
hardswish / hardsigmoid — values against PyTorch in float64 for every dtype and strided inputs, the
backward kernels against PyTorch's autograd, bad inputs, and offload() running MobileNetV3's
activations on canna. (Gradients in every framework, torch.compile, tf.function and jax.jit of
these entries are in tests/test_registry.py, which iterates the registry.)"""
from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import _registry as R

torch = pytest.importorskip("torch")
F = torch.nn.functional

#: entry -> (PyTorch reference, input domain)
CASES = {
    "hardswish": (F.hardswish, lambda x: x * 4),
    "hardsigmoid": (F.hardsigmoid, lambda x: x * 4),
    "rsqrt": (torch.rsqrt, lambda x: x.abs() + 0.05),
    "sin": (torch.sin, lambda x: x * 4),
    "cos": (torch.cos, lambda x: x * 4),
}
#: backward entry -> PyTorch's forward (its autograd gives the reference)
GRADS = {"hardswish_backward": F.hardswish, "hardsigmoid_backward": F.hardsigmoid}
#: tolerance (relative to the largest value) per dtype: one rounding of the result
TOL = {torch.float32: 1e-6, torch.float64: 1e-14, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def test_entries_are_registered():
    for name in list(CASES) + list(GRADS):
        op = R.get_op(name)
        assert op.generate and op.forward.name.lower() == name.replace("_", "").lower()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_values_match_pytorch_float64(name, dtype):
    ref, dom = CASES[name]
    g = torch.Generator().manual_seed(1)
    x = dom(torch.randn(6, 33, dtype=torch.float64, generator=g)).to(dtype)
    for xi in (x, x.t(), x[:, ::3]):   # contiguous, transposed, strided
        y = getattr(kernels, name)(xi)
        assert y.dtype == dtype and y.shape == xi.shape
        want = ref(xi.double())
        err = (y.double() - want).abs().max() / want.abs().max()
        assert err <= TOL[dtype], (name, dtype, float(err))


@pytest.mark.parametrize("name", list(GRADS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_backward_kernels_match_pytorch_autograd(name, dtype):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(5, 40, dtype=torch.float64, generator=g) * 4).to(dtype)
    x[0, :4] = torch.tensor([-3.0, 3.0, -2.999, 3.001])   # the kinks
    gy = torch.randn(x.shape, dtype=dtype, generator=g)
    xr = x.clone().requires_grad_()
    GRADS[name](xr).backward(gy)
    got = getattr(kernels.backward, name[: -len("_backward")])(gy, x)
    torch.testing.assert_close(got, xr.grad, rtol=1e-6, atol=1e-7)   # PyTorch's 1/6 is a float32 constant


def test_in_place_out_and_numpy_inputs():
    x = torch.linspace(-5, 5, 11)
    want = F.hardswish(x)
    kernels.hardswish(x, out=x)
    torch.testing.assert_close(x, want)
    a = np.linspace(0.5, 3, 7)
    np.testing.assert_allclose(kernels.rsqrt(a), 1 / np.sqrt(a), rtol=1e-15)


def test_nan_and_special_values_as_pytorch():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, -1.0])
    for name, (ref, _dom) in CASES.items():
        torch.testing.assert_close(getattr(kernels, name)(x), ref(x), equal_nan=True)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_inputs_raise_and_leave_canna_usable(name):
    f = getattr(kernels, name)
    with pytest.raises(TypeError, match="int32"):
        f(torch.ones(3, dtype=torch.int32))
    with pytest.raises(TypeError, match="must be an array"):
        f(None)
    with pytest.raises(ValueError, match="shape"):
        f(torch.ones(3), out=torch.ones(4))
    torch.testing.assert_close(f(torch.full((2,), 0.5)), CASES[name][0](torch.full((2,), 0.5)))


def test_backward_kernel_refuses_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="broadcast"):
        kernels.backward.hardswish(torch.ones(2, 3), torch.ones(3, 2))


@pytest.mark.usefixtures("function_level")
def test_offload_runs_mobilenet_v3_activations_on_canna():
    """A MobileNetV3 block (hardswish, squeeze-excitation with hardsigmoid), its backward, and the
    rsqrt / sin / cos of a rotary embedding: every call on canna, the same values and gradients."""
    import canna_dl.torch as ct

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.act = torch.nn.Hardswish()
            self.fc1, self.fc2 = torch.nn.Linear(8, 4), torch.nn.Linear(4, 8)
            self.gate = torch.nn.Hardsigmoid()

        def forward(self, x):
            y = self.act(self.conv(x))
            s = self.gate(self.fc2(F.relu(self.fc1(y.mean((2, 3))))))
            y = y * s[:, :, None, None]
            t = y.flatten(1)
            return (t.sin() * torch.cos(t)).sum() + torch.rsqrt(t * t + 1).sum()

    torch.manual_seed(0)
    m = Block().double()
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    want = m(x)
    want.backward()
    gref = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with ct.offload(strict=True) as rep:
        got = m(x)
        got.backward()
    torch.testing.assert_close(got, want)
    for p, g in zip(m.parameters(), gref):
        torch.testing.assert_close(p.grad, g)
    for name in CASES:
        assert rep.ops[name].canna >= 1 and rep.ops[name].backward >= 1, (name, rep)
        assert rep.ops[name].fallback == 0
    assert not any(("hardswish" in n or "hardsigmoid" in n or n.endswith((".sin", ".cos", ".rsqrt")))
                   for n in rep.pytorch_calls), rep.pytorch_calls


@pytest.mark.usefixtures("function_level")
def test_in_place_forms_fall_back_to_pytorch():
    import canna_dl.torch as ct
    x = torch.linspace(-4, 4, 9)
    with ct.offload() as rep:
        y = F.hardswish(x.clone(), inplace=True)
    torch.testing.assert_close(y, F.hardswish(x))
    assert rep.ops["hardswish"].fallback == 1 and rep.ops["hardswish"].canna == 0
