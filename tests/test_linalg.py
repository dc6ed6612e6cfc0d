"""addmm (issue 14; kernels/ops/linalg.py, one aclnnAddmm): values against PyTorch in float64 with
beta / alpha and a broadcast ``x``, gradients in every framework (gradcheck, torch.compile,
GradientTape, jax.grad), bad inputs, and offload() running GPT-2's Conv1D (torch.addmm) on canna."""
from __future__ import annotations

import numpy as np
import pytest

import kernels

torch = pytest.importorskip("torch")

#: (x shape, beta, alpha)
CASES = [((4, 5), 1.0, 1.0), ((5,), 0.5, 2.0), ((4, 1), -1.0, 0.25), ((1, 5), 0.0, 1.0)]


def _operands(xs, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(xs, dtype=dtype, generator=g), torch.randn(4, 3, dtype=dtype, generator=g),
            torch.randn(3, 5, dtype=dtype, generator=g))


@pytest.mark.parametrize("xs,beta,alpha", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_values_match_pytorch_float64(xs, beta, alpha, dtype):
    x, a, b = _operands(xs)
    want = torch.addmm(x, a, b, beta=beta, alpha=alpha)
    tol = {torch.float32: 1e-5, torch.float64: 1e-13, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    for aa, bb in ((a, b), (a.t().contiguous().t(), b.t().contiguous().t())):   # strided operands
        got = kernels.addmm(x.to(dtype), aa.to(dtype), bb.to(dtype), beta=beta, alpha=alpha)
        assert got.dtype == dtype and got.shape == (4, 5)
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * 4)


def test_beta_zero_ignores_nan_in_x():
    _, a, b = _operands((4, 5))
    x = torch.full((4, 5), float("nan"), dtype=torch.float64)
    torch.testing.assert_close(kernels.addmm(x, a, b, beta=0.0), torch.addmm(x, a, b, beta=0))


@pytest.mark.parametrize("xs,beta,alpha", CASES)
def test_torch_gradcheck_and_double_backward(xs, beta, alpha):
    import canna_dl.torch as ct
    ops = [t.requires_grad_() for t in _operands(xs, seed=1)]
    f = lambda *t: ct.addmm(*t, beta=beta, alpha=alpha)  # noqa: E731
    assert torch.autograd.gradcheck(f, ops)
    assert torch.autograd.gradgradcheck(f, ops)


def test_torch_compile_fullgraph():
    import canna_dl.torch as ct
    ops = [t.requires_grad_() for t in _operands((5,), dtype=torch.float32, seed=2)]
    refs = [t.detach().clone().requires_grad_() for t in ops]
    torch.compiler.reset()
    f = torch.compile(lambda *t: ct.addmm(*t, beta=0.5, alpha=2.0).square().sum(), fullgraph=True)
    y = f(*ops)
    y.backward()
    y0 = torch.addmm(*refs, beta=0.5, alpha=2.0).square().sum()
    y0.backward()
    torch.testing.assert_close(y, y0)
    for t, r in zip(ops, refs):
        torch.testing.assert_close(t.grad, r.grad)


def test_tensorflow_gradient():
    tf = pytest.importorskip("tensorflow")
    import canna_dl.tf as ctf
    ts = [tf.constant(t.numpy()) for t in _operands((4, 5), seed=3)]
    theo, num = tf.test.compute_gradient(lambda *t: ctf.addmm(*t, beta=0.5, alpha=2.0), ts)
    for t, n in zip(theo, num):
        np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-6)
    y = tf.function(lambda *t: ctf.addmm(*t, beta=0.5, alpha=2.0))(*ts)
    assert y.shape.as_list() == [4, 5]


def test_jax_grad_and_jit():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import canna_dl.jax as cj
    x, a, b = (jnp.asarray(t.numpy()) for t in _operands((4, 5), dtype=torch.float32, seed=4))
    f = lambda *t: jnp.sum(cj.addmm(*t, beta=0.5, alpha=2.0) ** 2)  # noqa: E731
    ref = jax.grad(lambda x, a, b: jnp.sum((0.5 * x + 2 * a @ b) ** 2), argnums=(0, 1, 2))(x, a, b)
    for g in (jax.grad(f, argnums=(0, 1, 2))(x, a, b), jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x, a, b)):
        for u, v in zip(g, ref):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)


def test_bad_inputs_raise_and_leave_canna_usable():
    x, a, b = _operands((4, 5))
    with pytest.raises(ValueError, match="cannot be multiplied"):
        kernels.addmm(x, a, a)
    with pytest.raises(ValueError, match="2-D"):
        kernels.addmm(x, a[0], b)
    with pytest.raises(ValueError, match="broadcast"):
        kernels.addmm(torch.ones(3), a, b)
    with pytest.raises(TypeError, match="one dtype"):
        kernels.addmm(x, a.float(), b)
    with pytest.raises(TypeError, match="must be an array"):
        kernels.addmm(x, None, b)
    torch.testing.assert_close(kernels.addmm(x, a, b), torch.addmm(x, a, b))


@pytest.mark.usefixtures("function_level")
def test_offload_runs_gpt2_conv1d_on_canna():
    """Hugging Face GPT-2's Conv1D: ``torch.addmm(bias, x.view(-1, nx), weight)``."""
    import canna_dl.torch as ct

    class Conv1D(torch.nn.Module):
        def __init__(self, nf, nx):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(nx, nf, dtype=torch.float64) * 0.1)
            self.bias = torch.nn.Parameter(torch.randn(nf, dtype=torch.float64))

        def forward(self, x):
            size_out = x.size()[:-1] + (self.weight.shape[1],)
            return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)

    torch.manual_seed(0)
    m = Conv1D(12, 8)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    want = m(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with ct.offload(strict=True) as rep:
        got = m(x)
        got.sum().backward()
        y = x.view(-1, 8).addmm(x.view(-1, 8), torch.eye(8, dtype=torch.float64), beta=2, alpha=0.5)   # Tensor.addmm
    torch.testing.assert_close(got, want)
    for p, g in zip(m.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    torch.testing.assert_close(y, 2.5 * x.view(-1, 8))
    assert rep.ops["addmm"].canna == 2 and rep.ops["addmm"].backward == 1 and rep.ops["addmm"].fallback == 0
    with ct.offload() as rep:
        torch.addmm(m.bias.detach(), x.view(-1, 8), m.weight.detach(), out=torch.empty(6, 12, dtype=torch.float64))
    assert rep.ops["addmm"].fallback == 1   # out=: PyTorch's


def test_products_split_over_the_host_threads_by_columns(py):
    # a product with fewer row tiles and batch items than the simulator's host threads is split by
    # B's columns (kernels/_sim/op_matmul.c mm_col_tiles): three threads, uneven tiles, addmm's
    # broadcast self / beta / alpha, a transposed B, fp16 and a batch; values against float64
    out = py(r'''
import torch, kernels, acl_rt
from acl_rt.lowlevel import backend, ffi
torch.manual_seed(0)
worst = 0.0
for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.float16, 2e-2)):
    for M, K, N in ((128, 128, 200), (96, 256, 1000), (1, 4096, 700)):
        a = torch.randn(M, K, dtype=dtype); b = torch.randn(K, N, dtype=dtype); s = torch.randn(N, dtype=dtype)
        for bb in (b, b.t().contiguous().t()):
            for beta, alpha in ((1.0, 1.0), (0.5, -2.0), (0.0, 1.0)):
                want = torch.addmm(s.double(), a.double(), bb.double(), beta=beta, alpha=alpha)
                got = kernels.addmm(s, a, bb, beta=beta, alpha=alpha).double()
                err = ((got - want).abs().max() / want.abs().max()).item()
                assert err < tol, (dtype, M, K, N, beta, alpha, err)
                worst = max(worst, err / tol)
        ab = torch.randn(2, M, K, dtype=dtype)
        got = kernels.matmul(ab, b).double()
        want = ab.double() @ b.double()
        assert ((got - want).abs().max() / want.abs().max()).item() < tol
st = ffi.new("aclsimDeviceStats *")
assert backend().lib.aclsimGetDeviceStats(0, st) == 0
print("threads", st.hostThreads, "worst", worst)
''', env={"CANNA_SIM_THREADS": "3"})
    assert "threads 3 " in out.stdout, out.stdout
