"""offload()'s C per-call fast path (issue 15, kernels/_native/fast.c ``offload_fast``): the calls it
serves (counted by ``kernels._native.stats()["offload_fast_hits"]``) give PyTorch's values and are
counted in the report, and every call it does not take goes the Python way with today's behaviour
(fallbacks with their reasons, autograd, ``out=``, in-place forms)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import canna_dl.torch as ct  # noqa: E402
from canna_dl.torch import _offload  # noqa: E402
from kernels import _native  # noqa: E402

#: the function level's tests (see conftest.function_level)
pytestmark = pytest.mark.usefixtures("function_level")

F = torch.nn.functional
rng = np.random.default_rng(15)


def hits():
    return _native.stats()["offload_fast_hits"]


def rand(*shape, dtype=torch.float32):
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype)


def run(call, n=4, **kw):
    """``call()`` n times in one offload() block: (results, report, fast-path hits of the block)."""
    h0 = hits()
    with ct.offload(**kw) as rep:
        out = [call() for _ in range(n)]
    return out, rep, hits() - h0


def close(got, want):
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-5, atol=1e-6)


def test_the_table_comes_from_the_registry():
    import kernels
    fast_ops = {op.name for op in kernels.registered_ops() if op.fast and op.torch}
    reports = {e[9] for e in _offload._FAST.values()}
    assert {"relu", "add", "mul", "sub", "div", "exp", "gelu"} <= reports <= fast_ops
    assert F.relu in _offload._FAST and torch.Tensor.add in _offload._FAST
    assert torch.Tensor.add_ not in _offload._FAST   # in-place forms go the Python way


@pytest.mark.parametrize("name, call, ref", [
    ("relu", lambda x, y: F.relu(x), lambda x, y: torch.relu(x)),
    ("relu", lambda x, y: torch.relu(x), lambda x, y: torch.relu(x)),
    ("relu", lambda x, y: x.relu(), lambda x, y: torch.relu(x)),
    ("relu", lambda x, y: F.relu(x, inplace=False), lambda x, y: torch.relu(x)),
    ("add", lambda x, y: torch.add(x, y), lambda x, y: x.numpy() + y.numpy()),
    ("add", lambda x, y: x + y, lambda x, y: x.numpy() + y.numpy()),
    ("add", lambda x, y: torch.add(x, other=y, alpha=2), lambda x, y: x.numpy() + 2 * y.numpy()),
    ("add", lambda x, y: x + 1.5, lambda x, y: x.numpy() + 1.5),
    ("add", lambda x, y: 2 + x, lambda x, y: 2 + x.numpy()),
    ("sub", lambda x, y: torch.sub(x, y, alpha=3), lambda x, y: x.numpy() - 3 * y.numpy()),
    ("mul", lambda x, y: x * y, lambda x, y: x.numpy() * y.numpy()),
    ("div", lambda x, y: x / y, lambda x, y: x.numpy() / y.numpy()),
    ("exp", lambda x, y: torch.exp(x), lambda x, y: np.exp(x.numpy())),
    ("gelu", lambda x, y: F.gelu(x, approximate="tanh"), lambda x, y: F.gelu(x, approximate="tanh")),
])
@pytest.mark.parametrize("shape", [(1,), (3, 5)])
def test_fast_calls_match_pytorch_and_are_counted(name, call, ref, shape):
    x, y = rand(*shape), rand(*shape).abs() + 0.5
    out, rep, h = run(lambda: call(x, y), n=5)
    want = ref(x, y)
    want = torch.as_tensor(np.asarray(want, dtype=np.float32)) if not isinstance(want, torch.Tensor) else want
    for r in out:
        assert type(r) is torch.Tensor and r.dtype == torch.float32 and r.shape == x.shape
        close(r, want)
    assert rep.ops[name].canna == 5 and rep.ops[name].fallback == 0
    assert h >= 2   # the first calls teach the fast path, the later ones take it
    assert out[-1].data_ptr() != out[-2].data_ptr()   # a fresh output each call


def test_non_contiguous_and_broadcast():
    a = rand(4, 6).t()                 # non-contiguous: its own key (strides), same values
    b, c = rand(3, 1), rand(1, 4)      # broadcast: a result of another shape
    out, rep, h = run(lambda: (torch.exp(a), torch.add(b, c), a.relu()), n=4)
    for e, s, r in out:
        close(e, torch.from_numpy(np.exp(a.numpy())))
        close(s, torch.from_numpy(b.numpy() + c.numpy()))
        close(r, torch.from_numpy(np.maximum(a.numpy(), 0)))
        assert s.shape == (3, 4)
    assert (rep.ops["exp"].canna, rep.ops["add"].canna, rep.ops["relu"].canna) == (4, 4, 4)
    assert h >= 6


def test_number_first_operand_takes_the_python_way():
    x = rand(5)
    out, rep, h = run(lambda: (2.0 - x, 3 / x), n=3)   # the op's first operand is a number: no kernel key
    assert h == 0 and rep.ops["sub"].canna == 3 and rep.ops["div"].canna == 3
    for s, d in out:
        close(s, 2.0 - x)
        close(d, 3 / x)


def test_mixed_dtypes_promote_as_pytorch():
    x, y = rand(5), rand(5, dtype=torch.float64)
    out, rep, h = run(lambda: x + y, n=4)
    for r in out:
        assert r.dtype == torch.float64
        close(r, x.double() + y)


def test_unsupported_dtype_falls_back_even_when_the_kernel_has_a_plan():
    import kernels
    i = torch.arange(6, dtype=torch.int32)
    kernels.exp(i), kernels.exp(i)     # the kernel takes ints (float32 result): a plan in its fast cache
    g = rand(4, dtype=torch.float32).to(torch.int64)
    out, rep, h = run(lambda: (torch.exp(i), F.gelu(g.float()), torch.add(i, True)), n=3)
    assert h <= 3   # only gelu's float call may go fast
    st = rep.ops["exp"]
    assert st.canna == 0 and st.fallback == 3 and st.reasons
    assert rep.ops["add"].fallback == 3 and "a bool operand" in rep.ops["add"].reasons
    for e, _, s in out:
        assert e.dtype == torch.float32
        close(e, torch.exp(i.double()))
        close(s, i + 1)


def test_autograd_takes_the_python_way():
    x = rand(3, 4).requires_grad_()
    h0 = hits()
    with ct.offload() as rep:
        for _ in range(3):
            y = F.relu(x) * 2.0
            y.sum().backward()
    assert hits() == h0
    assert rep.ops["relu"].canna == 3 and rep.ops["relu"].backward == 3
    np.testing.assert_allclose(x.grad.numpy(), 3 * 2.0 * (x.detach().numpy() > 0))


def test_out_inplace_and_subclasses_take_the_python_way():
    x, y = rand(6), rand(6)
    o = torch.empty(6)
    p = torch.nn.Parameter(rand(6), requires_grad=False)
    z = x.clone()
    h0 = hits()
    with ct.offload() as rep:
        for _ in range(3):
            torch.add(x, y, out=o)
            r = F.relu(p)
            F.relu(z, inplace=True)
    assert hits() == h0
    close(o, x + y)
    close(r, torch.relu(p.detach()))
    close(z, torch.relu(x))
    assert rep.ops["add"].fallback == 3 and any("out" in k for k in rep.ops["add"].reasons)
    assert rep.ops["relu"].canna == 6   # F.relu(inplace=True) is reported as relu, as before


def test_partial_op_sets_and_autocast_take_the_python_way():
    x = rand(8)
    _, rep, h = run(lambda: (F.relu(x), torch.exp(x)), n=3, exclude=("relu",))
    assert h == 0 and "relu" not in rep.ops and rep.ops["exp"].canna == 3
    h0 = hits()
    with ct.offload() as rep, torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            torch.exp(x)
    assert hits() == h0 and rep.ops["exp"].fallback == 3


def test_strict_mode_and_cache_clear():
    import kernels
    x = rand(4)
    want = torch.relu(x)
    with ct.offload(strict=True) as rep:
        got = [F.relu(x) for _ in range(3)]
        kernels._core.clear_plan_cache()   # the fast path's plans are gone: it learns them again
        h0 = hits()
        got += [F.relu(x) for _ in range(3)]
    assert hits() > h0
    for r in got:
        close(r, want)
    assert rep.ops["relu"].canna == 6


@pytest.mark.parametrize("call", [
    lambda x: torch.add(x, x, 1, 2),             # too many positional arguments
    lambda x: torch.add(x, x, beta=2),           # an unknown keyword
    lambda x: torch.add(x, x, input=x),          # a parameter given twice
    lambda x: torch.add(x),                      # a missing one
    lambda x: torch.add(x, "a"),                 # not a number
])
def test_bad_calls_raise_pytorchs_error(call):
    """Calls the fast path cannot bind give PyTorch's own error, as without offload()."""
    x = rand(3)
    with pytest.raises(TypeError) as plain:
        call(x)
    with ct.offload() as rep:
        for _ in range(2):
            with pytest.raises(TypeError) as got:
                call(x)
    assert str(got.value) == str(plain.value)   # (PyTorch's argument parser refuses it before the mode)
    assert "add" not in rep.ops or rep.ops["add"].canna == 0


def test_kwargs_the_fast_path_cannot_bind_take_the_python_way():
    x = rand(3)
    out, rep, h = run(lambda: F.silu(x, inplace=0), n=3)   # fixed inplace=False: by ==, the handler's to decide
    assert h == 0 and rep.ops["silu"].canna == 3
    for r in out:
        close(r, x * torch.sigmoid(x))
