"""Ascend C's Pad / UnPad (advanced API) in the simulator (issue 16): a height x width tensor padded
in the width direction to 32 bytes, or its padding removed (Ascend C API reference on hiascend.com,
"Pad", "UnPad", "Pad Tiling"), with the shape from PadTiling / UnPadTiling; compared with NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

import acl_rt
from ascendc_common import compile_module, source_line, sync

PAD = r'''
#include "kernel_operator.h"
using namespace AscendC;

// x: h x w (the tiling's srcHeight x srcWidth) -> y: h x (left + w + right), or h x w when w is aligned
template <class T>
__aicore__ inline void PadOne(GM_ADDR x, GM_ADDR y, GM_ADDR tilingGm, uint32_t left, uint32_t right, int32_t value,
                              uint32_t tmp)
{
    PadTiling tiling;
    for (uint32_t i = 0; i < sizeof(PadTiling) / 4; i++)
        reinterpret_cast<uint32_t *>(&tiling)[i] = reinterpret_cast<__gm__ uint32_t *>(tilingGm)[i];
    uint32_t h = tiling.srcHeight, w = tiling.srcWidth;
    uint32_t w2 = (w * sizeof(T)) % 32 ? w + left + right : w;
    TPipe pipe;
    TBuf<TPosition::VECCALC> in, out, scratch;
    pipe.InitBuffer(in, (h * w * sizeof(T) + 31) / 32 * 32);
    pipe.InitBuffer(out, h * w2 * sizeof(T));
    pipe.InitBuffer(scratch, 1024);
    GlobalTensor<T> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ T *)x, h * w);
    yGm.SetGlobalBuffer((__gm__ T *)y, h * w2);
    LocalTensor<T> a = in.Get<T>(), d = out.Get<T>();
    DataCopy(a, xGm, (h * w * sizeof(T) + 31) / 32 * 32 / sizeof(T));
    PadParams p = {(uint16_t)left, (uint16_t)right, value};
    if (tmp)
        Pad(d, a, p, scratch.Get<uint8_t>(), tiling);
    else
        Pad(d, a, p, tiling);                                                  // L:pad
    DataCopy(yGm, d, h * w2);
}
extern "C" __global__ __aicore__ void pad_half(GM_ADDR x, GM_ADDR y, GM_ADDR t, uint32_t l, uint32_t r, int32_t v,
                                               uint32_t tmp)
{
    PadOne<half>(x, y, t, l, r, v, tmp);
}
extern "C" __global__ __aicore__ void pad_float(GM_ADDR x, GM_ADDR y, GM_ADDR t, uint32_t l, uint32_t r, int32_t v,
                                                uint32_t tmp)
{
    PadOne<float>(x, y, t, l, r, v, tmp);
}

// x: h x w -> y: h x (w - left - right)
extern "C" __global__ __aicore__ void unpad_float(GM_ADDR x, GM_ADDR y, uint32_t h, uint32_t w, uint32_t left,
                                                  uint32_t right)
{
    UnPadTiling tiling{};
    tiling.srcHeight = h;
    tiling.srcWidth = w;
    uint32_t w2 = w - left - right;
    TPipe pipe;
    TBuf<TPosition::VECCALC> in, out;
    pipe.InitBuffer(in, h * w * sizeof(float));
    pipe.InitBuffer(out, (h * w2 * sizeof(float) + 31) / 32 * 32 + 32);
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, h * w);
    yGm.SetGlobalBuffer((__gm__ float *)y, h * w2);
    LocalTensor<float> a = in.Get<float>(), d = out.Get<float>();
    DataCopy(a, xGm, h * w);
    UnPadParams p;
    p.leftPad = (uint16_t)left;
    p.rightPad = (uint16_t)right;
    UnPad(d, a, p, tiling);                                                    // L:unpad
    DataCopy(yGm, d, (h * w2 * sizeof(float) + 31) / 32 * 32 / sizeof(float));
}
'''


def _line(tag: str) -> int:
    return source_line(PAD, tag)


@pytest.fixture(scope="module")
def mod():
    return compile_module(PAD)


def _tiling(h, w, ori):
    t = np.zeros(26, np.uint32)   # PadTiling: srcHeight, srcWidth, srcOriWidth, then the device's own fields
    t[:3] = h, w, ori
    return t


@pytest.mark.parametrize("dtype, h, w, left, right, value, tmp", [
    (np.float16, 16, 15, 0, 1, 0, 0),      # the documented 16 x 15 -> 16 x 16
    (np.float16, 4, 12, 2, 2, 7, 1),       # both sides, with a shared temporary buffer
    (np.float32, 8, 5, 1, 2, -3, 0),
])
def test_pad_unaligned_width(mod, dtype, h, w, left, right, value, tmp):
    x = np.random.uniform(-5, 5, (h, w)).astype(dtype)
    xin = np.zeros(-(-x.nbytes // 32) * 32 // x.itemsize, dtype)
    xin[:x.size] = x.ravel()
    y = np.full((h, left + w + right), np.nan, dtype)
    name = "pad_half" if dtype == np.float16 else "pad_float"
    mod.get_function(name).launch(1, xin, y, _tiling(h, w, w), left, right, value, tmp)
    sync()
    want = np.pad(x.astype(np.float64), ((0, 0), (left, right)), constant_values=value)
    np.testing.assert_array_equal(y.astype(np.float64), want)


def test_pad_aligned_width_fills_the_redundant_columns(mod):
    h, w, ori = 16, 16, 11
    x = np.random.uniform(-5, 5, (h, w)).astype(np.float16)
    y = np.full_like(x, np.nan)
    mod.get_function("pad_half").launch(1, x, y, _tiling(h, w, ori), 0, w - ori, 4, 0)
    sync()
    want = x.astype(np.float64)
    want[:, ori:] = 4
    np.testing.assert_array_equal(y.astype(np.float64), want)


@pytest.mark.parametrize("h, w, left, right", [(16, 16, 0, 2), (8, 12, 2, 2), (4, 24, 3, 0)])
def test_unpad(mod, h, w, left, right):
    x = np.random.rand(h, w).astype(np.float32)
    w2 = w - left - right
    y = np.full(-(-h * w2 // 8) * 8, np.nan, np.float32)
    mod.get_function("unpad_float").launch(1, x, y, h, w, left, right)
    sync()
    np.testing.assert_array_equal(y[:h * w2].reshape(h, w2).astype(np.float64),
                                  x.astype(np.float64)[:, left:w - right])


@pytest.mark.parametrize("case", ["misaligned", "nothing", "left", "shape", "unpad"])
def test_pad_rules(mod, case):
    x = np.zeros(512, np.float32)
    y = np.zeros(512, np.float32)
    if case == "misaligned":      # 8 x 5 floats padded to 5 + 1 + 1 = 7 columns: 28 bytes a row
        mod.get_function("pad_float").launch(1, x, y, _tiling(8, 5, 5), 1, 1, 0, 0)
        msg = (rf"kernel.cpp:{_line('pad')}: Pad: leftPad 1 \+ width 5 \+ rightPad 1 = 7 elements of 4 bytes, not a "
               r"multiple of 32 bytes")
    elif case == "nothing":
        mod.get_function("pad_float").launch(1, x, y, _tiling(4, 8, 8), 0, 0, 0, 0)
        msg = (rf"kernel.cpp:{_line('pad')}: Pad: the width 8 is 32-byte aligned and every column is valid data: "
               r"there is nothing to pad")
    elif case == "left":
        mod.get_function("pad_float").launch(1, x, y, _tiling(4, 8, 6), 2, 0, 0, 0)
        msg = rf"kernel.cpp:{_line('pad')}: Pad: leftPad 2 on an aligned width \(8\)"
    elif case == "shape":
        mod.get_function("pad_float").launch(1, x, y, _tiling(4, 8, 9), 0, 0, 0, 0)
        msg = rf"kernel.cpp:{_line('pad')}: Pad: the tiling's shape 4 x 8 \(9 valid columns\) is not a tensor to pad"
    else:
        mod.get_function("unpad_float").launch(1, x, y, 8, 8, 4, 4)
        msg = rf"kernel.cpp:{_line('unpad')}: UnPad: leftPad 4 \+ rightPad 4 leave nothing of rows of 8 elements"
    with pytest.raises(acl_rt.KernelError, match=r"block 0 of 1: " + msg):
        sync()
