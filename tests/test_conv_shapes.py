"""Convolution forward and every gradient (aclnnConvolution / aclnnConvolutionBackward through
``kernels.conv2d`` / ``kernels.backward.conv2d``) against PyTorch in float64, at the layer shapes
of resnet18, mobilenet_v3_small and convnext_atto (tools/bench_conv.py's rows, batch 2), over
stride / padding / dilation / groups combinations, and at the shapes that take the simulator's
other code paths: depthwise planes too large for the padded kernel, padding past the kernel's
extent, several column panels per image, panels of whole images with a partial last one,
tiles of positions for few im2col rows (input layers),
non-contiguous and lower-precision operands, empty and degenerate shapes."""
from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
import kernels  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import bench_conv  # noqa: E402

A = torch.ops.aten


def _pair(v):
    return [v, v] if isinstance(v, int) else list(v)


def _reference(x, w, b, gy, stride, padding, dilation, groups, mask):
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    y = A.convolution(x, w, b, s, p, d, False, [0, 0], groups)
    grads = A.convolution_backward(gy, x, w, [w.shape[0]] if mask[2] else None, s, p, d, False, [0, 0], groups,
                                   list(mask)) if gy is not None else None
    return y, grads


def _check(xs, ws, *, stride=1, padding=0, dilation=1, groups=1, bias=True, mask=(True, True, True),
           dtype=torch.float64, x_fn=None, rtol=1e-10, atol=1e-10):
    g = torch.Generator().manual_seed(sum(xs) + 7 * sum(ws))
    x = torch.randn(xs, generator=g, dtype=torch.float64)
    w = torch.randn(ws, generator=g, dtype=torch.float64)
    b = torch.randn(ws[0], generator=g, dtype=torch.float64) if bias else None
    y_ref, _ = _reference(x, w, b, None, stride, padding, dilation, groups, mask)
    gy = torch.randn(y_ref.shape, generator=g, dtype=torch.float64)
    y_ref, grads_ref = _reference(x, w, b, gy, stride, padding, dilation, groups, mask)
    xc, wc, bc, gyc = (None if t is None else t.to(dtype) for t in (x, w, b, gy))
    if x_fn is not None:
        xc, wc, gyc = x_fn(xc), x_fn(wc), x_fn(gyc)
    y = kernels.conv2d(xc, wc, bc, stride=stride, padding=padding, dilation=dilation, groups=groups)
    scale = max(1.0, float(y_ref.abs().max()) if y_ref.numel() else 1.0)
    assert y.shape == y_ref.shape and y.dtype == dtype
    torch.testing.assert_close(y.double(), y_ref, rtol=rtol, atol=atol * scale)
    grads = kernels.backward.conv2d(gyc, xc, wc, stride=stride, padding=padding, dilation=dilation, groups=groups,
                                    output_mask=mask)
    for name, got, want in zip(("grad_input", "grad_weight", "grad_bias"), grads, grads_ref):
        if want is None:
            assert got is None, name
            continue
        assert got.shape == want.shape and got.dtype == dtype, name
        s = max(1.0, float(want.abs().max()) if want.numel() else 1.0)
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol * s, msg=name)


@pytest.mark.parametrize("row", [r for r in bench_conv.SHAPES if "224" not in r[0]], ids=lambda r: r[0])
def test_model_layer_shapes(row):
    name, xs, ws, stride, pad, groups, has_bias, need_gi = row
    _check((2,) + tuple(xs[1:]), ws, stride=stride, padding=pad, groups=groups, bias=has_bias,
           mask=(need_gi, True, has_bias))


def test_resnet18_stem_at_224():
    _check((1, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3, bias=False, mask=(False, True, False))


@pytest.mark.parametrize("stride", [1, 2, (1, 3)])
@pytest.mark.parametrize("padding", [0, (2, 1)])
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("groups,cin,cout", [(1, 4, 6), (4, 4, 4), (4, 4, 8), (3, 6, 3)])
@pytest.mark.parametrize("k", [(3, 3), (1, 1), (2, 5)])
def test_stride_padding_dilation_groups(stride, padding, dilation, groups, cin, cout, k):
    _check((2, cin, 9, 11), (cout, cin // groups, *k), stride=stride, padding=padding, dilation=dilation,
           groups=groups)


@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False), (False, False, True),
                                  (True, True, False), (False, False, False)])
@pytest.mark.parametrize("groups", [1, 8])
def test_output_masks(mask, groups):
    _check((2, 8, 7, 7), (8, 8 // groups, 3, 3), padding=1, groups=groups, mask=mask)


def test_depthwise_plane_larger_than_the_padded_kernel_takes():
    # 140 x 140 planes padded do not fit the stack buffer of the vectorized depthwise loops
    _check((1, 2, 140, 140), (2, 1, 3, 3), padding=1, groups=2)
    _check((1, 2, 140, 140), (4, 1, 3, 3), stride=2, padding=1, groups=2)


def test_depthwise_padding_past_the_kernel_extent():
    # padding 3 > (KH - 1) * dilation = 2: the stride-1 gradInput cannot be a full correlation
    _check((2, 3, 6, 6), (3, 1, 3, 3), padding=3, groups=3)
    _check((2, 3, 6, 6), (3, 1, 1, 1), padding=1, groups=3)


def test_several_column_panels_per_image():
    # 64 channels x 3x3 in float64: 4.5 KiB per im2col column, so a 48x48 image needs two panels
    _check((2, 64, 48, 48), (8, 64, 3, 3), padding=1)


def test_few_im2col_rows_run_per_tile_of_positions():
    # Kg = Cg*KH*KW <= 64 (an input layer): im2col + GEMM per tile of 4096 positions in a block's
    # scratch; 70x70 images have two tiles (a partial last one), 9 images spread the gradWeight
    # partial sums over several blocks; with groups, strides and dilation; float32 too
    _check((9, 3, 70, 70), (16, 3, 3, 3), padding=1)
    _check((9, 1, 70, 70), (16, 1, 3, 3), padding=1)                   # one input channel: a GEMM
    _check((3, 6, 140, 131), (8, 3, 3, 3), stride=(2, 1), padding=(2, 0), dilation=2, groups=2)
    _check((2, 7, 90, 90), (5, 7, 3, 3), padding=1, mask=(True, False, True))
    _check((2, 7, 90, 90), (5, 7, 3, 3), padding=1, mask=(False, True, False))
    _check((4, 3, 80, 80), (16, 3, 4, 4), padding=1, dtype=torch.float32, rtol=1e-4, atol=1e-4)


def test_panels_of_whole_images_with_a_partial_last_one():
    # 10x10 positions per image, about 18 images per panel: 20 images give a full and a partial panel
    _check((20, 64, 10, 10), (8, 64, 3, 3), padding=1)
    _check((20, 64, 10, 10), (8, 64, 1, 1))          # 1x1: the input is its own im2col


def test_pointwise_convolution_in_place_panels():
    # 1x1 / stride 1 / no padding on large images: panels inside one image read the input in place
    _check((1, 64, 128, 130), (4, 64, 1, 1))
    _check((1, 64, 128, 130), (4, 16, 1, 1), groups=4, bias=False)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 1e-1)])
@pytest.mark.parametrize("groups", [1, 6])
def test_lower_precision_dtypes(dtype, tol, groups):
    _check((2, 6, 9, 9), (6, 6 // groups, 3, 3), padding=1, groups=groups, dtype=dtype, rtol=tol, atol=tol)


@pytest.mark.parametrize("groups", [1, 4])
def test_non_contiguous_operands(groups):
    def channels_last(t):
        return t.contiguous(memory_format=torch.channels_last)
    _check((2, 4, 8, 9), (8, 4 // groups, 3, 3), padding=1, groups=groups, x_fn=channels_last)

    def transposed(t):   # the same values through a view with swapped H / W strides
        return t.transpose(2, 3).contiguous().transpose(2, 3)
    _check((2, 4, 8, 9), (8, 4 // groups, 3, 3), stride=2, padding=1, groups=groups, x_fn=transposed)


def test_kernel_as_large_as_the_padded_input_and_one_pixel_images():
    _check((2, 3, 5, 5), (4, 3, 7, 7), padding=1)
    _check((3, 8, 1, 1), (16, 8, 1, 1))
    _check((3, 8, 1, 1), (8, 1, 3, 3), padding=1, groups=8)


def test_empty_batch():
    _check((0, 4, 5, 5), (6, 4, 3, 3), padding=1)
    _check((0, 4, 5, 5), (4, 1, 3, 3), padding=1, groups=4)


def test_no_input_channels_gives_the_bias():
    # PyTorch's CPU kernel returns an empty [N, 0, ...] tensor here; the convolution of nothing is
    # 0 for every output channel, so the result is the bias (and gradBias the sum of gradOutput)
    x = torch.randn(2, 0, 5, 5, dtype=torch.float64)
    w = torch.randn(6, 0, 3, 3, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    y = kernels.conv2d(x, w, b)
    assert y.shape == (2, 6, 3, 3)
    torch.testing.assert_close(y, b[None, :, None, None].expand(2, 6, 3, 3))
    gy = torch.randn(2, 6, 3, 3, dtype=torch.float64)
    gi, gw, gb = kernels.backward.conv2d(gy, x, w)
    assert gi.shape == x.shape and gw.shape == w.shape
    torch.testing.assert_close(gb, gy.sum((0, 2, 3)))


def test_no_output_channels():
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    for w, groups in ((torch.randn(0, 4, 3, 3, dtype=torch.float64), 1), (torch.randn(0, 1, 3, 3, dtype=torch.float64), 4)):
        y = kernels.conv2d(x, w, groups=groups)
        assert y.shape == (2, 0, 3, 3)
        gi, gw, gb = kernels.backward.conv2d(torch.empty(2, 0, 3, 3, dtype=torch.float64), x, w, groups=groups)
        assert torch.equal(gi, torch.zeros_like(x)) and gw.shape == w.shape and gb.shape == (0,)


def test_repeated_calls_reuse_nothing_stale():
    # the same executor shapes with new values: results never depend on a previous call's workspace
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(4, 16, 6, 6, generator=g, dtype=torch.float64)
        w = torch.randn(16, 16, 3, 3, generator=g, dtype=torch.float64)
        torch.testing.assert_close(kernels.conv2d(x, w, padding=1), A.convolution(x, w, None, [1, 1], [1, 1], [1, 1],
                                                                                    False, [0, 0], 1))


def test_a_kernel_of_size_zero_is_refused():
    """A weight with a zero kernel dimension: PyTorch refuses it ("kernel size should be greater
    than zero"); canna returned zeros (the bias) of a made-up output shape. Refused by kernels'
    shape check and by the simulator's aclnnConvolution itself (a C caller)."""
    import numpy as np
    from acl_rt._lib import ffi
    from aclnn_util import ACLNN_ERR_PARAM_INVALID, DevTensor, OpError, int_array, run
    x = np.ones((1, 2, 4, 4), np.float32)
    for kshape in ((0, 0), (0, 3), (3, 0)):
        w = np.ones((3, 2) + kshape, np.float32)
        with pytest.raises(ValueError, match="kernel size must be greater than zero"):
            kernels.conv2d(x, w)
        with pytest.raises(ValueError, match="kernel size must be greater than zero"):
            kernels.backward.conv2d(np.ones((1, 3, 4, 4), np.float32), x, w)
        y = DevTensor((1, 3, 4, 4), np.float32)
        with pytest.raises(OpError, match="kernel size must be greater than zero") as e:
            run("Convolution", DevTensor.from_numpy(x).handle, DevTensor.from_numpy(w).handle, ffi.NULL,
                int_array([1, 1]), int_array([0, 0]), int_array([1, 1]), False, int_array([0, 0]), 1,
                y.handle, 0)
        assert e.value.code == ACLNN_ERR_PARAM_INVALID
