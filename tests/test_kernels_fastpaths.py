"""The fast paths for the shapes of a small CNN training step, checked against PyTorch
in float64 on random data, with the boundaries of each path:

- max_pool2d: the vectorized 2x2 / stride-2 window (4 windows at a time, a scalar tail; rows
  where the window leaves the input -- padding, ceil_mode, odd sizes -- take the generic loop) and
  any other float32 window in place (8 outputs at a time where every tap is inside the row, padded
  borders one by one), with NaN, ties and -inf in the windows;
- conv2d: im2col by output rows (padding / stride / dilation cut each row into a zero run, a copy
  and a zero run), column tiles of 4096 positions that start in the middle of an output row, the
  forward GEMM straight into a dense output or through a buffer into a strided one, operands used
  in place when dense or packed when strided, gradBias summed per block;
- the C fast path of in-place elementwise calls (``kernels.add(x, y, alpha=a, out=x)``, an
  optimizer's update): x returned, the overlap check kept.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402
from conftest import assert_usable  # noqa: E402

pytestmark = pytest.mark.usefixtures("acl")

FLOATS = [torch.float32, torch.float64, torch.float16]
TOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.float16: 1e-2}


@pytest.fixture
def gen():
    seed = int(os.environ.get("CANNA_TEST_SEED", 0)) or int.from_bytes(os.urandom(4), "little")
    return torch.Generator().manual_seed(seed)


def rnd(shape, dtype, gen, lo=-2.0, hi=2.0):
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def leaf(t):
    """A float64 copy of ``t`` that requires grad (never ``t`` itself)."""
    return t.detach().to(torch.float64, copy=True).requires_grad_()


def close(got, ref, dtype, gen, tol=None):
    t = tol if tol is not None else TOL[dtype]
    assert got.dtype == dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.shape)
    torch.testing.assert_close(got.double(), ref.double(), rtol=t, atol=t,
                               msg=lambda m: f"{m} (seed {gen.initial_seed()})")


# ------------------------------------------------------------------ max_pool2d

# (input H, W, kwargs): the 2x2/2 path at output widths around the vector steps (4 doubles; 8 float32
# windows straight in the tensors' memory; a last group overlapping the one before), odd sizes (the
# last input row/column unused), ceil_mode (the last window leaves the input: generic loop), row
# stride 1, padding (every window touching it takes the generic loop), and non-2x2 windows (never
# the path)
POOL_CASES = [
    (8, 8, dict(kernel_size=2)), (6, 6, dict(kernel_size=2)), (4, 2, dict(kernel_size=2)),
    (9, 17, dict(kernel_size=2)), (10, 18, dict(kernel_size=2)), (7, 9, dict(kernel_size=2, ceil_mode=True)),
    (28, 28, dict(kernel_size=2)), (6, 34, dict(kernel_size=2)), (4, 48, dict(kernel_size=2)),
    (5, 31, dict(kernel_size=2)), (9, 10, dict(kernel_size=2, stride=(1, 2))),
    (8, 10, dict(kernel_size=2, stride=2, padding=1)), (8, 10, dict(kernel_size=2, stride=(2, 2), padding=(1, 0))),
    (8, 10, dict(kernel_size=2, stride=(2, 2), padding=(0, 1))), (9, 11, dict(kernel_size=2, stride=3)),
    (9, 11, dict(kernel_size=(2, 3), stride=2)), (9, 11, dict(kernel_size=2, stride=2, dilation=2)),
    # any other window straight in float32 memory (mp_row_f32): eight outputs at a time where every tap
    # is inside the row, the last group overlapping, padded borders one by one (ResNet's 3x3/2 pad 1)
    (11, 40, dict(kernel_size=3, stride=2, padding=1)), (7, 50, dict(kernel_size=3, stride=1, padding=1)),
    (9, 45, dict(kernel_size=(2, 3), stride=2, dilation=2, ceil_mode=True)), (10, 37, dict(kernel_size=3, stride=3)),
    (12, 33, dict(kernel_size=(3, 2), stride=(1, 3), padding=(1, 1))),
]


def _special(x, gen):
    """Ties inside a window, a whole -inf window (both in the top-left 4x4 corner) and one NaN per
    plane outside that corner (so no window holds two NaNs: the simulator keeps the first NaN of a
    window, PyTorch's CPU kernel the last)."""
    x = x.clone()
    flat = x.view(-1, x.shape[-2], x.shape[-1])
    H, W = flat.shape[-2:]
    corner = H >= 4 and W >= 4
    for p in range(flat.shape[0]):
        if corner:
            flat[p, 2:4, 0:2] = -float("inf")
            flat[p, 0, 2:4] = flat[p, 1, 2]
            flat[p, 1, 3] = flat[p, 1, 2]
        while True:
            i = int(torch.randint(0, H, (), generator=gen))
            j = int(torch.randint(0, W, (), generator=gen))
            if not corner or i >= 4 or j >= 4:
                break
        flat[p, i, j] = float("nan")
    return x


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("special", [False, True], ids=["random", "nan-ties-inf"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[f"{h}x{w}-{kw}" for h, w, kw in POOL_CASES])
def test_max_pool2d_paths(case, special, dtype, gen):
    H, W, kw = case
    x = rnd((3, 5, H, W), dtype, gen)
    if special:
        x = _special(x, gen)
    y, idx = kernels.max_pool2d(x, return_indices=True, **kw)
    ry, ridx = F.max_pool2d(x.double(), return_indices=True, **kw)
    torch.testing.assert_close(y.double(), ry, rtol=0, atol=0, equal_nan=True,
                               msg=lambda m: f"{m} (seed {gen.initial_seed()})")
    assert idx.dtype == torch.int64 and torch.equal(idx, ridx), f"seed {gen.initial_seed()}"
    # backward through the indices (overlapping windows sum)
    g = rnd(tuple(ry.shape), dtype, gen)
    xr = leaf(x)
    F.max_pool2d(xr, **kw).backward(g.double())
    close(kernels.backward.max_pool2d(g, x, idx, **kw), xr.grad, dtype, gen, tol=TOL[dtype] * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_max_pool2d_strided_input_and_batchless(dtype, gen):
    base = rnd((2, 4, 12, 2 * 16 + 1), dtype, gen)
    x = base[..., 1::2]   # inner stride 2, offset 1
    y, idx = kernels.max_pool2d(x, 2, return_indices=True)
    ry, ridx = F.max_pool2d(x.double(), 2, return_indices=True)
    assert torch.equal(y.double(), ry) and torch.equal(idx, ridx), f"seed {gen.initial_seed()}"
    y3, idx3 = kernels.max_pool2d(x[0], 2, return_indices=True)
    assert torch.equal(y3.double(), ry[0]) and torch.equal(idx3, ridx[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["dense", "strided-grad", "strided-indices"])
def test_max_pool2d_backward_direct_and_general(layout, dtype, gen):
    """Backward in the tensors' memory (dense float32/float64 gradients, dense int64 indices,
    windows that do not overlap) and through row buffers otherwise (float16, strided operands,
    overlapping windows)."""
    x = rnd((3, 4, 10, 9), dtype, gen)
    for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2), dict(kernel_size=2, stride=(2, 3))):
        y, idx = kernels.max_pool2d(x, return_indices=True, **kw)
        g = rnd(tuple(y.shape), dtype, gen)
        if layout == "strided-grad":
            g = rnd(tuple(y.shape[:-1]) + (2 * y.shape[-1],), dtype, gen)[..., ::2]
        if layout == "strided-indices":
            wide = torch.zeros(tuple(y.shape[:-1]) + (2 * y.shape[-1],), dtype=torch.int64)
            wide[..., ::2] = idx
            idx = wide[..., ::2]
        xr = leaf(x)
        F.max_pool2d(xr, **kw).backward(g.double())
        close(kernels.backward.max_pool2d(g, x, idx, **kw), xr.grad, dtype, gen, TOL[dtype] * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_max_pool2d_backward_bad_index(dtype, gen):
    import acl_rt
    x = rnd((2, 3, 8, 8), dtype, gen)
    y, idx = kernels.max_pool2d(x, 2, return_indices=True)
    g = rnd(tuple(y.shape), dtype, gen)
    for v in (64, -1):
        bad = idx.clone()
        bad[1, 2, 3, 1] = v
        with pytest.raises(acl_rt.AclError, match=f"index {v} at output \\(3, 1\\) of plane 5 is outside the 8 x 8"):
            kernels.backward.max_pool2d(g, x, bad, 2)
    xr = leaf(x)   # still usable
    F.max_pool2d(xr, 2).backward(g.double())
    close(kernels.backward.max_pool2d(g, x, idx, 2), xr.grad, dtype, gen)
    assert_usable()


# ------------------------------------------------------------------ conv2d

CONV_CASES = [
    ((4, 1, 28, 28), (16, 1, 3, 3), dict(padding=1)),                 # the SimpleCNN layer
    ((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=2)),                   # zero runs at both ends of rows
    ((2, 3, 9, 11), (5, 3, 3, 3), dict(stride=(2, 3), padding=(1, 2))),
    ((2, 4, 10, 13), (6, 2, 3, 2), dict(dilation=(2, 3), padding=(2, 3), groups=2)),
    ((2, 2, 6, 5), (3, 2, 1, 1), dict(stride=2)),
    ((1, 2, 4, 4), (3, 2, 3, 3), dict(padding=4)),                    # output rows entirely in the padding
    ((1, 1, 70, 70), (2, 1, 3, 3), dict()),                           # 4624 positions: 2 tiles, the 2nd mid-row
    ((2, 1, 65, 67), (3, 1, 2, 2), dict(padding=1)),                  # 4488 positions, 2 tiles
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CONV_CASES])
def test_conv2d_paths(case, dtype, gen):
    xs, ws, kw = case
    x, w, b = rnd(xs, dtype, gen), rnd(ws, dtype, gen), rnd((ws[0],), dtype, gen)
    tol = TOL[dtype] * (4 if dtype == torch.float16 else 1)
    xd, wd, bd = leaf(x), leaf(w), leaf(b)
    ref = F.conv2d(xd, wd, bd, **kw)
    close(kernels.conv2d(x, w, b, **kw), ref, dtype, gen, tol)
    close(kernels.conv2d(x, w, **kw), F.conv2d(x.double(), w.double(), **kw), dtype, gen, tol)
    g = rnd(tuple(ref.shape), dtype, gen)
    ref.backward(g.double())
    gx, gw, gb = kernels.backward.conv2d(g, x, w, **kw)
    close(gx, xd.grad, dtype, gen, tol * 4)
    close(gw, wd.grad, dtype, gen, tol * 4)
    close(gb, bd.grad, dtype, gen, tol * 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_conv2d_strided_operands_and_output(dtype, gen):
    """Strided input / weight / gradOutput are packed; a strided output takes the buffered path."""
    x = rnd((3, 2, 9, 2 * 10 + 1), dtype, gen)[..., 1::2]
    w = rnd((4, 2, 3, 3), dtype, gen).transpose(2, 3)
    b = rnd((8,), dtype, gen)[::2]
    ref = F.conv2d(x.double(), w.double(), b.double(), padding=1)
    out = torch.full((3, 4, 9, 2 * 10), float("nan"), dtype=dtype)
    view = out[..., ::2]
    got = kernels.conv2d(x, w, b, padding=1, out=view)
    close(view, ref, dtype, gen)
    assert got.data_ptr() == view.data_ptr()
    assert out[..., 1::2].isnan().all()   # the gaps untouched
    g = rnd((3, 4, 9, 2 * 10 + 1), dtype, gen)[..., 1::2]
    xd, wd, bd = leaf(x), leaf(w), leaf(b)
    F.conv2d(xd, wd, bd, padding=1).backward(g.double())
    gx, gw, gb = kernels.backward.conv2d(g, x, w, padding=1)
    close(gx, xd.grad, dtype, gen, TOL[dtype] * 4)
    close(gw, wd.grad, dtype, gen, TOL[dtype] * 4)
    close(gb, bd.grad, dtype, gen, TOL[dtype] * 4)
    assert_usable()


# ------------------------------------------------------------------ in-place elementwise fast path

def _inplace_entries():
    from kernels import _core
    return [v for v in _core.fast_cache.values() if v[1] is None]


INPLACE = [("add", lambda x, y: x + (-0.25) * y, dict(alpha=-0.25)), ("sub", lambda x, y: x - 3 * y, dict(alpha=3)),
           ("mul", lambda x, y: x * y, {}), ("div", lambda x, y: x / y, {})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", INPLACE, ids=[o[0] for o in INPLACE])
def test_inplace_fast_path(op, dtype, gen):
    """``kernels.<op>(x, y, out=x)`` (an optimizer's ``p.add_(g, alpha=-lr)``): the first call
    registers the plan, later calls take the C fast path; every call writes x in place and returns
    x itself, with the values of PyTorch's float64 result."""
    name, ref_fn, kw = op
    fn = getattr(kernels, name)
    x = rnd((6, 40), dtype, gen, 0.5, 2.0)
    ref = x.to(torch.float64, copy=True)
    ptr = x.data_ptr()
    for i in range(4):
        y = rnd((6, 40), dtype, gen, 0.5, 2.0)
        got = fn(x, y, out=x, **kw)
        ref = ref_fn(ref, y.double())
        assert got is x and x.data_ptr() == ptr
        close(x, ref.to(dtype).double(), dtype, gen, TOL[dtype] * (1 + i))
    # registered by an early call (the first calls of a process set the fast path up), then hit
    assert _inplace_entries(), "the in-place call was not registered for the fast path"
    # y a scalar, y exactly x (an allowed alias), y a broadcast row
    x2 = x.clone()
    for _ in range(2):
        fn(x, 1.5, out=x, **kw)
        x2 = ref_fn(x2.double(), torch.tensor(1.5, dtype=torch.float64)).to(dtype)
    close(x, x2.double(), dtype, gen, TOL[dtype] * 4)
    for _ in range(2):
        x2 = ref_fn(x.double(), x.double()).to(dtype)
        fn(x, x, out=x, **kw)
        close(x, x2.double(), dtype, gen, TOL[dtype] * 4)
    row = rnd((40,), dtype, gen, 0.5, 2.0)
    for _ in range(2):
        x2 = ref_fn(x.double(), row.double()).to(dtype)
        fn(x, row, out=x, **kw)
        close(x, x2.double(), dtype, gen, TOL[dtype] * 4)


def test_inplace_fast_path_partial_overlap_still_raises(gen):
    """The fast path's key holds shapes and strides, not addresses: a call whose ``y`` partially
    overlaps ``x`` -- with the same signature as a registered, valid call -- must still take the
    general path and raise, leaving x unchanged."""
    base = rnd((40,), torch.float32, gen)
    x, other = base[:20], rnd((20,), torch.float32, gen)
    for _ in range(3):   # register, then hit
        kernels.add(x, other, alpha=0.5, out=x)
    before = base.clone()
    for _ in range(2):
        with pytest.raises(ValueError, match="overlaps"):
            kernels.add(x, base[10:30], alpha=0.5, out=x)
    assert torch.equal(base, before)
    kernels.add(x, other, alpha=0.5, out=x)   # still usable
    close(x, before[:20].double() + 0.5 * other.double(), torch.float32, gen)
    assert_usable()


def test_inplace_fast_path_refuses_grad_and_non_tensors(gen):
    """The in-place fast path never serves tensors that require grad (the general path refuses
    them) or a non-torch ``out``."""
    x = rnd((5,), torch.float32, gen).requires_grad_()
    with pytest.raises(BufferError):
        kernels.add(x, x.detach(), out=x)
    import numpy as np
    a = np.ones(5, np.float32)
    for _ in range(2):
        kernels.add(a, a, alpha=2, out=a)
    assert np.array_equal(a, np.full(5, 9, np.float32))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=3)], ids=["2x2", "3x3"])
def test_max_pool2d_first_nan_of_a_window(kw, dtype):
    """A window with several NaNs gives its first one (value NaN, index of the first NaN in row-major
    window order), in every path (the simulator's documented rule; PyTorch's CPU kernel takes the
    last)."""
    k = kw["kernel_size"]
    x = torch.arange(2 * 3 * 6 * 36, dtype=torch.float64).reshape(2, 3, 6, 36).to(dtype)
    x[..., 0, 1] = float("nan")          # window (0, 0): NaNs at (0, 1) and (1, 0)
    x[..., 1, 0] = float("nan")
    x[..., 0, k + 1] = float("nan")      # window (0, 1): NaNs at (0, k+1) and (k-1, k)
    x[..., k - 1, k] = float("nan")
    y, idx = kernels.max_pool2d(x, return_indices=True, **kw)
    assert y[..., 0, 0].isnan().all() and y[..., 0, 1].isnan().all()
    assert (idx[..., 0, 0] == 1).all(), idx[..., 0, 0]
    assert (idx[..., 0, 1] == k + 1).all(), idx[..., 0, 1]
    ry, ridx = F.max_pool2d(x.double(), return_indices=True, **kw)
    keep = torch.ones_like(ridx, dtype=torch.bool)
    keep[..., 0, :2] = False
    assert torch.equal(idx[keep], ridx[keep]) and torch.equal(y.double()[keep], ry[keep])
