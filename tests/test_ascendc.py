"""Ascend C kernels in the simulator (issue 16): kernels written against Ascend C's
kernel_operator.h (the vector programming model of the public Ascend C API reference) compile with
kernels.RawModule and run; the device's rules are block faults naming kernel, block and line.

The kernels share one module per fixture (one compile each, cached on disk afterwards).
"""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import acl_rt
import kernels

from ascendc_common import compile_module, source_line, sync
from conftest import run_python

VECTOR = r'''
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t BUFFER_NUM = 2;

// ---- the Add sample: tiled and double-buffered through VECIN/VECOUT queues
template <typename T> class KernelAdd {
public:
    __aicore__ inline KernelAdd() {}
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength, uint32_t tileNum)
    {
        blockLength = totalLength / GetBlockNum();
        this->tileNum = tileNum;
        tileLength = blockLength / tileNum / BUFFER_NUM;
        xGm.SetGlobalBuffer((__gm__ T *)x + blockLength * GetBlockIdx(), blockLength);
        yGm.SetGlobalBuffer((__gm__ T *)y + blockLength * GetBlockIdx(), blockLength);
        zGm.SetGlobalBuffer((__gm__ T *)z + blockLength * GetBlockIdx(), blockLength);
        pipe.InitBuffer(inQueueX, BUFFER_NUM, tileLength * sizeof(T));
        pipe.InitBuffer(inQueueY, BUFFER_NUM, tileLength * sizeof(T));
        pipe.InitBuffer(outQueueZ, BUFFER_NUM, tileLength * sizeof(T));
    }
    __aicore__ inline void Process(bool relu)
    {
        for (int32_t i = 0; i < (int32_t)(tileNum * BUFFER_NUM); i++) {
            CopyIn(i);
            Compute(relu);
            CopyOut(i);
        }
    }

private:
    __aicore__ inline void CopyIn(int32_t progress)
    {
        LocalTensor<T> xLocal = inQueueX.template AllocTensor<T>();
        LocalTensor<T> yLocal = inQueueY.template AllocTensor<T>();
        DataCopy(xLocal, xGm[progress * tileLength], tileLength);
        DataCopy(yLocal, yGm[progress * tileLength], tileLength);
        inQueueX.EnQue(xLocal);
        inQueueY.EnQue(yLocal);
    }
    __aicore__ inline void Compute(bool relu)
    {
        LocalTensor<T> xLocal = inQueueX.template DeQue<T>();
        LocalTensor<T> yLocal = inQueueY.template DeQue<T>();
        LocalTensor<T> zLocal = outQueueZ.template AllocTensor<T>();
        Add(zLocal, xLocal, yLocal, tileLength);
        if (relu)
            Relu(zLocal, zLocal, tileLength);
        outQueueZ.EnQue(zLocal);
        inQueueX.FreeTensor(xLocal);
        inQueueY.FreeTensor(yLocal);
    }
    __aicore__ inline void CopyOut(int32_t progress)
    {
        LocalTensor<T> zLocal = outQueueZ.template DeQue<T>();
        DataCopy(zGm[progress * tileLength], zLocal, tileLength);
        outQueueZ.FreeTensor(zLocal);
    }

    TPipe pipe;
    TQue<QuePosition::VECIN, BUFFER_NUM> inQueueX, inQueueY;
    TQue<QuePosition::VECOUT, BUFFER_NUM> outQueueZ;
    GlobalTensor<T> xGm, yGm, zGm;
    uint32_t blockLength, tileNum, tileLength;
};

extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength,
                                                 uint32_t tileNum)
{
    KernelAdd<float> op;
    op.Init(x, y, z, totalLength, tileNum);
    op.Process(false);
}

extern "C" __global__ __aicore__ void add_custom_half(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength,
                                                      uint32_t tileNum)
{
    KernelAdd<half> op;
    op.Init(x, y, z, totalLength, tileNum);
    op.Process(false);
}

// a C++ (mangled) kernel: no extern "C"
__global__ __aicore__ void add_relu_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength, uint32_t tileNum)
{
    KernelAdd<float> op;
    op.Init(x, y, z, totalLength, tileNum);
    op.Process(true);
}

// ---- LeakyRelu over one tile per block
extern "C" __global__ __aicore__ void leaky_relu_custom(GM_ADDR x, GM_ADDR y, uint32_t tileLength, float alpha)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x + tileLength * GetBlockIdx(), tileLength);
    yGm.SetGlobalBuffer((__gm__ float *)y + tileLength * GetBlockIdx(), tileLength);
    pipe.InitBuffer(inQ, 1, tileLength * sizeof(float));
    pipe.InitBuffer(outQ, 1, tileLength * sizeof(float));
    LocalTensor<float> xl = inQ.AllocTensor<float>();
    DataCopy(xl, xGm, tileLength);
    inQ.EnQue(xl);
    xl = inQ.DeQue<float>();
    LocalTensor<float> yl = outQ.AllocTensor<float>();
    LeakyRelu(yl, xl, alpha, tileLength);
    outQ.EnQue(yl);
    inQ.FreeTensor(xl);
    yl = outQ.DeQue<float>();
    DataCopy(yGm, yl, tileLength);
    outQ.FreeTensor(yl);
}

// ---- softmax of each row: ReduceMax, Adds, Exp, ReduceSum, Duplicate, Div
extern "C" __global__ __aicore__ void softmax_rows(GM_ADDR x, GM_ADDR y, uint32_t rows, uint32_t cols)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> inQ;
    TQue<TPosition::VECOUT, 1> outQ;
    TBuf<TPosition::VECCALC> work, sums, scalar;
    pipe.InitBuffer(inQ, 1, cols * sizeof(float));
    pipe.InitBuffer(outQ, 1, cols * sizeof(float));
    pipe.InitBuffer(work, cols * sizeof(float));
    pipe.InitBuffer(sums, cols * sizeof(float));
    pipe.InitBuffer(scalar, 32);
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, (uint64_t)rows * cols);
    yGm.SetGlobalBuffer((__gm__ float *)y, (uint64_t)rows * cols);
    LocalTensor<float> w = work.Get<float>(), s = sums.Get<float>(), r = scalar.Get<float>();
    for (uint32_t row = GetBlockIdx(); row < rows; row += GetBlockNum()) {
        LocalTensor<float> xl = inQ.AllocTensor<float>();
        DataCopy(xl, xGm[(uint64_t)row * cols], cols);
        inQ.EnQue(xl);
        xl = inQ.DeQue<float>();
        LocalTensor<float> yl = outQ.AllocTensor<float>();
        ReduceMax(r, xl, w, cols);
        float m = r.GetValue(0);
        Adds(yl, xl, -m, cols);
        Exp(yl, yl, cols);
        ReduceSum(r, yl, w, cols);
        Duplicate(s, r.GetValue(0), cols);
        Div(yl, yl, s, cols);
        inQ.FreeTensor(xl);
        outQ.EnQue(yl);
        yl = outQ.DeQue<float>();
        DataCopy(yGm[(uint64_t)row * cols], yl, cols);
        outQ.FreeTensor(yl);
    }
}

// ---- float16 -> float32 (and back to float16 with a rounding mode)
extern "C" __global__ __aicore__ void cast_custom(GM_ADDR x, GM_ADDR y, GM_ADDR back, uint32_t n, int32_t mode)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, c;
    pipe.InitBuffer(a, n * sizeof(half));
    pipe.InitBuffer(b, n * sizeof(float));
    pipe.InitBuffer(c, n * sizeof(half));
    GlobalTensor<half> xGm, backGm;
    GlobalTensor<float> yGm;
    xGm.SetGlobalBuffer((__gm__ half *)x, n);
    yGm.SetGlobalBuffer((__gm__ float *)y, n);
    backGm.SetGlobalBuffer((__gm__ half *)back, n);
    LocalTensor<half> al = a.Get<half>(), cl = c.Get<half>();
    LocalTensor<float> bl = b.Get<float>();
    DataCopy(al, xGm, n);
    Cast(bl, al, RoundMode::CAST_NONE, n);
    DataCopy(yGm, bl, n);
    Muls(bl, bl, 1.0009765625f, n);
    Cast(cl, bl, (RoundMode)mode, n);
    DataCopy(backGm, cl, n);
}

// ---- tiling data: by value, and through a GM_ADDR
struct ScaleTiling {
    uint32_t totalLength;
    uint32_t tileLength;
    float scale;
    int16_t bias[3];
};

__aicore__ inline void ScaleAdd(GM_ADDR x, GM_ADDR y, GM_ADDR z, const ScaleTiling &t)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> bx, by;
    pipe.InitBuffer(bx, t.tileLength * sizeof(float));
    pipe.InitBuffer(by, t.tileLength * sizeof(float));
    LocalTensor<float> xl = bx.Get<float>(), yl = by.Get<float>();
    GlobalTensor<float> xGm, yGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, t.totalLength);
    yGm.SetGlobalBuffer((__gm__ float *)y, t.totalLength);
    zGm.SetGlobalBuffer((__gm__ float *)z, t.totalLength);
    for (uint32_t off = GetBlockIdx() * t.tileLength; off < t.totalLength; off += GetBlockNum() * t.tileLength) {
        DataCopy(xl, xGm[off], t.tileLength);
        DataCopy(yl, yGm[off], t.tileLength);
        Muls(xl, xl, t.scale, t.tileLength);
        Add(xl, xl, yl, t.tileLength);
        Adds(xl, xl, (float)(t.bias[0] + t.bias[1] + t.bias[2]), t.tileLength);
        DataCopy(zGm[off], xl, t.tileLength);
    }
}

extern "C" __global__ __aicore__ void scale_add(GM_ADDR x, GM_ADDR y, GM_ADDR z, ScaleTiling tiling)
{
    ScaleAdd(x, y, z, tiling);
}

extern "C" __global__ __aicore__ void scale_add_gm(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling)
{
    ScaleTiling t = *(__gm__ ScaleTiling *)tiling;
    ScaleAdd(x, y, z, t);
}

// ---- an unaligned length: whole blocks with DataCopy, the tail with DataCopyPad
extern "C" __global__ __aicore__ void double_pad(GM_ADDR x, GM_ADDR y, uint32_t n)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    uint32_t padded = (n + 7) / 8 * 8;
    pipe.InitBuffer(buf, padded * sizeof(float));
    LocalTensor<float> l = buf.Get<float>();
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, n);
    yGm.SetGlobalBuffer((__gm__ float *)y, n);
    DataCopyExtParams p{1, (uint32_t)(n * sizeof(float)), 0, 0, 0};
    DataCopyPadExtParams<float> pad{true, 0, (uint8_t)(padded - n), -1.0f};
    DataCopyPad(l, xGm, p, pad);
    Muls(l, l, 2.0f, padded);
    if (padded > n && l.GetValue(n) != -2.0f)
        ASSERT(false && "the padding is not the padding value");
    DataCopyPad(yGm, l, p);
}

// ---- strided blocks with DataCopyParams: column block j of a rows x 16 matrix of floats
extern "C" __global__ __aicore__ void take_half_rows(GM_ADDR x, GM_ADDR y, uint32_t rows)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, rows * 8 * sizeof(float));
    LocalTensor<float> l = buf.Get<float>();
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    yGm.SetGlobalBuffer((__gm__ float *)y);
    DataCopyParams p;
    p.blockCount = (uint16_t)rows;
    p.blockLen = 1;    // 8 floats
    p.srcStride = 1;   // skip the other 8 of the row
    p.dstStride = 0;
    DataCopy(l, xGm[GetBlockIdx() * 8], p);
    DataCopy(yGm[GetBlockIdx() * rows * 8], l, rows * 8);
}

// ---- the mask/repeat forms: rows of 64 floats (one 256-byte repeat each)
extern "C" __global__ __aicore__ void repeat_forms(GM_ADDR x, GM_ADDR y, GM_ADDR sums, GM_ADDR maxes, GM_ADDR totals,
                                                   uint32_t rows)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> bx, by, bs, bm, bt;
    pipe.InitBuffer(bt, 64);
    pipe.InitBuffer(bx, rows * 64 * sizeof(float));
    pipe.InitBuffer(by, rows * 64 * sizeof(float));
    pipe.InitBuffer(bs, (rows + 7) / 8 * 32);
    pipe.InitBuffer(bm, (2 * rows + 7) / 8 * 32);
    LocalTensor<float> xl = bx.Get<float>(), yl = by.Get<float>(), sl = bs.Get<float>(), ml = bm.Get<float>();
    GlobalTensor<float> xGm, yGm, sGm, mGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    yGm.SetGlobalBuffer((__gm__ float *)y);
    sGm.SetGlobalBuffer((__gm__ float *)sums);
    mGm.SetGlobalBuffer((__gm__ float *)maxes);
    DataCopy(xl, xGm, rows * 64);
    // y = x + x on the first 48 elements of each repeat, 2 * x via Muls on the others (bit mask)
    Duplicate(yl, 0.0f, rows * 64);
    Add(yl, xl, xl, 48, (uint8_t)rows, {1, 1, 1, 8, 8, 8});
    uint64_t high[2] = {~0ull << 48, 0};
    Muls(yl, xl, 3.0f, high, (uint8_t)rows, {1, 1, 8, 8});
    // counter mode: the first rows * 64 - 5 elements, whatever the repeat count says; then normal mode
    // with a mask set once: Adds on the first 16 of each repeat
    SetMaskCount();
    SetVectorMask<float, MaskMode::COUNTER>(0, rows * 64 - 5);
    Adds<float, false>(yl, yl, 100.0f, MASK_PLACEHOLDER, 1, {1, 1, 8, 8});
    SetMaskNorm();
    SetVectorMask<float>(16);
    Muls<float, false>(yl, yl, -1.0f, MASK_PLACEHOLDER, (uint8_t)rows, {1, 1, 8, 8});
    ResetMask();
    DataCopy(yGm, yl, rows * 64);
    WholeReduceSum(sl, xl, 64, rows, 1, 1, 8);
    WholeReduceMax(ml, xl, 64, rows, 1, 1, 8);
    DataCopyPad(sGm, sl, DataCopyExtParams{1, (uint32_t)(rows * sizeof(float)), 0, 0, 0});
    DataCopyPad(mGm, ml, DataCopyExtParams{1, (uint32_t)(2 * rows * sizeof(float)), 0, 0, 0});
    // the high-dimensional forms of ReduceSum / ReduceMax: one result over every repeat
    LocalTensor<float> tl = bt.Get<float>();
    ReduceSum(tl, xl, yl, 64, rows, 8);
    ReduceMax(tl[8], xl, yl, 64, rows, 8, true);
    GlobalTensor<float> tGm;
    tGm.SetGlobalBuffer((__gm__ float *)totals);
    DataCopy(tGm, tl, 16);
    // per 32-byte block: BlockReduceSum / BlockReduceMax, then Brcb broadcasts each result over a block
    BlockReduceSum(yl, xl, rows, 64, 1, 1, 8);
    BlockReduceMax(yl[rows * 8], xl, rows, 64, 1, 1, 8);
    DataCopy(xGm[rows * 64], yl, rows * 16);
    Brcb(xl, yl, (uint8_t)rows, {1, 8});
    DataCopy(xGm[rows * 80], xl, rows * 64);
}

// ---- Compare + Select: y = x > t ? x : t (tensor-tensor), and the scalar form
extern "C" __global__ __aicore__ void clamp_low(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n, float t)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> bx, bt, bm, by;
    pipe.InitBuffer(bx, n * sizeof(float));
    pipe.InitBuffer(bt, n * sizeof(float));
    pipe.InitBuffer(bm, (n / 8 + 31) / 32 * 32);
    pipe.InitBuffer(by, n * sizeof(float));
    LocalTensor<float> xl = bx.Get<float>(), tl = bt.Get<float>(), yl = by.Get<float>();
    LocalTensor<uint8_t> ml = bm.Get<uint8_t>();
    GlobalTensor<float> xGm, yGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    yGm.SetGlobalBuffer((__gm__ float *)y);
    zGm.SetGlobalBuffer((__gm__ float *)z);
    DataCopy(xl, xGm, n);
    Duplicate(tl, t, n);
    Compare(ml, xl, tl, CMPMODE::GT, n);
    Select(yl, ml, xl, tl, SELMODE::VSEL_TENSOR_TENSOR_MODE, n);
    DataCopy(yGm, yl, n);
    Select(yl, ml, xl, t, SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
    PipeBarrier<PIPE_ALL>();
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(zGm, yl, n);
}

// ---- every block adds its partial sums into the same output: InitGlobalMemory, SetAtomicAdd
extern "C" __global__ __aicore__ void column_sums(GM_ADDR x, GM_ADDR out, uint32_t rows)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> b, acc;
    pipe.InitBuffer(b, 64 * sizeof(float));
    pipe.InitBuffer(acc, 64 * sizeof(float));
    LocalTensor<float> l = b.Get<float>(), a = acc.Get<float>();
    GlobalTensor<float> xGm, oGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    oGm.SetGlobalBuffer((__gm__ float *)out, 64);
    Duplicate(a, 0.0f, 64);
    for (uint32_t r = GetBlockIdx(); r < rows; r += GetBlockNum()) {
        DataCopy(l, xGm[(uint64_t)r * 64], 64);
        Add(a, a, l, 64);
    }
    SetAtomicAdd<float>();
    DataCopy(oGm, a, 64);
    SetAtomicNone();
}

// ---- the less used forms: UB->UB strided copy, the DataCopyParams form of DataCopyPad, GetWithOffset,
// ReduceMin with its index, CompareScalar, Axpy, Cast to int32 (floor), And on int16
extern "C" __global__ __aicore__ void misc_forms(GM_ADDR x, GM_ADDR y, GM_ADDR ints, uint32_t n)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> big, m, w;
    pipe.InitBuffer(big, 4 * n * sizeof(float));
    pipe.InitBuffer(m, 256);
    pipe.InitBuffer(w, n * sizeof(float));
    LocalTensor<float> a = big.GetWithOffset<float>(n, 0), b = big.GetWithOffset<float>(n, n * 4);
    LocalTensor<float> c = big.GetWithOffset<float>(n, 2 * n * 4);
    LocalTensor<int32_t> iv = big.GetWithOffset<int32_t>(n, 3 * n * 4);
    LocalTensor<uint8_t> mask = m.Get<uint8_t>();
    LocalTensor<float> work = w.Get<float>();
    GlobalTensor<float> xGm, yGm;
    GlobalTensor<int32_t> iGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    yGm.SetGlobalBuffer((__gm__ float *)y);
    iGm.SetGlobalBuffer((__gm__ int32_t *)ints);
    DataCopyPad(a, xGm, DataCopyParams(1, (uint16_t)(n * sizeof(float)), 0, 0), DataCopyPadParams(false, 0, 0, 0));
    DataCopy(b, a, DataCopyParams((uint16_t)(n / 16), 1, 1, 1));   // every other 8-element block
    DataCopy(yGm, b, n);                                            // y[0:n]
    ReduceMin(c, a, work, n, true);
    DataCopy(yGm[n], c, 8);                                         // y[n], index bits in y[n+1]
    CompareScalar(mask, a, 0.0f, CMPMODE::LT, n);
    Select(c, mask, a, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, n);  // min(x, 0)
    Axpy(c, a, 2.0f, n);                                            // + 2x
    DataCopy(yGm[n + 8], c, n);
    Cast(iv, a, RoundMode::CAST_FLOOR, n);
    DataCopy(iGm, iv, n);
    LocalTensor<int16_t> h = iv.ReinterpretCast<int16_t>();
    And(h, h, h, 2 * n);
    Duplicate(h[2 * n - 16], (int16_t)0x0f0f, 16);
    And(h[2 * n - 16], h[2 * n - 16], h[2 * n - 32], 16);
    DataCopy(iGm[n], iv, n);
}

// ---- scalar access, unary math, printf and DumpTensor
extern "C" __global__ __aicore__ void scalar_math(GM_ADDR x, GM_ADDR y, uint32_t n)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> b0, b1;
    pipe.InitBuffer(b0, n * sizeof(float));
    pipe.InitBuffer(b1, n * sizeof(float));
    LocalTensor<float> a = b0.Get<float>(), c = b1.Get<float>();
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, n);
    yGm.SetGlobalBuffer((__gm__ float *)y, 6 * n);
    for (uint32_t i = 0; i < n; i++)
        a.SetValue(i, xGm.GetValue(i));
    Abs(c, a, n);        DataCopy(yGm[0 * n], c, n);
    Sqrt(c, c, n);       DataCopy(yGm[1 * n], c, n);
    Rsqrt(c, a, n);      DataCopy(yGm[2 * n], c, n);
    Ln(c, a, n);         DataCopy(yGm[3 * n], c, n);
    Reciprocal(c, a, n); DataCopy(yGm[4 * n], c, n);
    Maxs(c, a, 0.5f, n); Mins(c, c, 2.0f, n); Sub(c, c, a, n); Max(c, c, a, n); Min(c, c, a, n);
    Mul(c, c, a, n);     DataCopy(yGm[5 * n], c, n);
    yGm.SetValue(0, (float)GetBlockNum());
    AscendC::printf("block %d of %d: a[1] = %.1f\n", (int)GetBlockIdx(), (int)GetBlockNum(), a.GetValue(1));
    DumpTensor(a, 7, 4);
}
'''

FAULTS = r'''
#include "kernel_operator.h"
using namespace AscendC;

extern "C" __global__ __aicore__ void faulty(GM_ADDR x, uint32_t mode, uint32_t blk)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    TBuf<TPosition::VECCALC> t;
    GlobalTensor<float> xGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    if (GetBlockIdx() != blk) return;
    if (mode == 1) {
        pipe.InitBuffer(q, 2, 64 * 1024);
        pipe.InitBuffer(t, 80 * 1024);   // L:ub
    }
    pipe.InitBuffer(q, 1, 1024);
    pipe.InitBuffer(t, 1024);
    LocalTensor<float> l = q.AllocTensor<float>();
    if (mode == 2) DataCopy(l, xGm, 7);                    // L:len
    if (mode == 3) DataCopy(l[3], xGm, 8);                 // L:addr
    if (mode == 4) { LocalTensor<float> d = q.DeQue<float>(); }   // L:deque
    if (mode == 5) { LocalTensor<float> m = q.AllocTensor<float>(); }   // L:alloc
    if (mode == 6) { q.FreeTensor(l); Adds(l, l, 1.0f, 8); }   // L:uaf
    if (mode == 7) { float v = l.GetValue(256); (void)v; }   // L:index
    if (mode == 8) { q.EnQue(l); q.EnQue(l); }   // L:enque
    if (mode == 9) { Add(l, l, l, 300); }   // L:count
    if (mode == 10) { DataCopy(l, xGm[1000], 64); }   // L:gm
    if (mode == 11) { LocalTensor<float> e; Duplicate(e, 1.0f, 8); }   // L:empty
    if (mode == 12) { LocalTensor<float> u = t.Get<float>(); q.FreeTensor(u); }   // L:foreign
    if (mode == 13) { SyncAll(); }   // L:syncall
    if (mode == 14) { LocalTensor<float> sub = l[300]; (void)sub; }
    if (mode == 15) { GlobalTensor<float> none; DataCopy(l, none, 64); }   // L:nullgm
}
'''


_line = source_line


@pytest.fixture(scope="module")
def vec():
    return compile_module(VECTOR)


@pytest.fixture(scope="module")
def faults():
    acl_rt.init()
    acl_rt.Device(0).set_current()
    return kernels.RawModule(FAULTS).compile()


def _as(kind, a):
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(a)
    return a


def _back(t):
    return t.numpy() if hasattr(t, "numpy") and not isinstance(t, np.ndarray) else t


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_add_sample(vec, kind):
    n = 8 * 2048
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = np.full(n, np.nan, np.float32)
    xs, ys, zs = _as(kind, x), _as(kind, y), _as(kind, z)
    vec.get_function("add_custom").launch(8, xs, ys, zs, n, 8)
    sync()
    np.testing.assert_array_equal(_back(zs), (x.astype(np.float64) + y).astype(np.float32))


def test_add_sample_half(vec):
    n = 8 * 2048
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    z = np.empty_like(x)
    vec.get_function("add_custom_half").launch(8, x, y, z, n, 4)
    sync()
    np.testing.assert_array_equal(z, (x.astype(np.float64) + y.astype(np.float64)).astype(np.float16))


def test_cxx_kernel_found_by_its_plain_name_fused_add_relu(vec):
    assert "add_relu_custom" in vec.kernel_names
    n = 4 * 1024
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = np.empty_like(x)
    kernels.RawKernel(VECTOR, "add_relu_custom").launch(4, x, y, z, n, 2)
    sync()
    np.testing.assert_array_equal(z, np.maximum(x.astype(np.float64) + y, 0).astype(np.float32))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_leaky_relu(vec, kind):
    tile, blocks = 1024, 6
    x = np.random.default_rng(3).standard_normal(tile * blocks).astype(np.float32)
    y = np.empty_like(x)
    ys = _as(kind, y)
    vec.get_function("leaky_relu_custom").launch(blocks, _as(kind, x), ys, tile, 0.125)
    sync()
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(_back(ys), np.where(x64 >= 0, x64, x64 * 0.125).astype(np.float32))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_row_softmax(vec, kind):
    rows, cols = 37, 200
    x = (np.random.default_rng(4).standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.empty_like(x)
    ys = _as(kind, y)
    vec.get_function("softmax_rows").launch(5, _as(kind, x), ys, rows, cols)
    sync()
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_back(ys), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode,rounding", [(0, "nearest"), (2, "floor"), (3, "ceil"), (4, "round"), (5, "trunc"),
                                           (6, "odd")])
def test_cast_float16_to_float32_and_back(vec, mode, rounding):
    n = 1024
    x = (np.random.default_rng(5).standard_normal(n) * 100).astype(np.float16)
    y = np.empty(n, np.float32)
    back = np.empty(n, np.float16)
    vec.get_function("cast_custom").launch(1, x, y, back, n, mode)
    sync()
    np.testing.assert_array_equal(y, x.astype(np.float32))
    scaled = y.astype(np.float32) * np.float32(1.0009765625)
    near = scaled.astype(np.float16)
    if rounding == "nearest":
        np.testing.assert_array_equal(back, near)
        return
    exact = scaled.astype(np.float64)
    b = back.astype(np.float64)
    assert np.all(np.abs(b - exact) < np.abs(np.spacing(near.astype(np.float16))).astype(np.float64) * 1.01)
    if rounding == "round":   # nearest, ties away from zero
        d, dn = np.abs(b - exact), np.abs(near.astype(np.float64) - exact)
        assert np.all(d <= dn) and np.all((d < dn) | (np.abs(b) >= np.abs(near.astype(np.float64))))
    elif rounding == "odd":
        inexact = b != exact
        assert inexact.any() and np.all(back.view(np.uint16)[inexact] & 1 == 1)
    elif rounding == "floor":
        assert np.all(b <= exact)
    elif rounding == "ceil":
        assert np.all(b >= exact)
    else:
        assert np.all(np.abs(b) <= np.abs(exact))


SCALE_DTYPE = np.dtype([("totalLength", "<u4"), ("tileLength", "<u4"), ("scale", "<f4"), ("bias", "<i2", 3)],
                       align=True)


class ScaleTiling(ctypes.Structure):
    _fields_ = [("totalLength", ctypes.c_uint32), ("tileLength", ctypes.c_uint32), ("scale", ctypes.c_float),
                ("bias", ctypes.c_int16 * 3)]


@pytest.mark.parametrize("how", ["dict", "tuple", "ctypes", "numpy", "gm", "torch"])
def test_tiling_struct(vec, how):
    n, tile = 6 * 1024, 512
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = np.empty_like(x)
    if how == "torch":   # torch tensors for the arrays, a dict for the tiling struct
        zt = _as("torch", z)
        vec.get_function("scale_add").launch(4, _as("torch", x), _as("torch", y), zt,
                                             {"totalLength": n, "tileLength": tile, "scale": 0.5, "bias": (1, 2, -4)})
        sync()
        np.testing.assert_allclose(zt.numpy(), x.astype(np.float64) * 0.5 + y - 1, rtol=1e-6, atol=1e-6)
        return
    fields = {"totalLength": n, "tileLength": tile, "scale": 0.5, "bias": (1, 2, -4)}
    if how == "gm":
        tiling = np.zeros((), SCALE_DTYPE)
        for k, v in fields.items():
            tiling[k] = v
        tiling = np.frombuffer(tiling.tobytes(), np.uint8).copy()
        vec.get_function("scale_add_gm").launch(4, x, y, z, None, tiling)
    else:
        k = vec.get_function("scale_add")
        p = k.params[3]
        assert (p.kind, p.size, p.align, p.offset) == ("struct", 20, 4, 24)
        arg = {"dict": fields, "tuple": tuple(fields.values()),
               "ctypes": ScaleTiling(n, tile, 0.5, (ctypes.c_int16 * 3)(1, 2, -4)),
               "numpy": np.array([tuple(fields.values())], SCALE_DTYPE)[0]}[how]
        k.launch(4, x, y, z, arg)
    sync()
    np.testing.assert_allclose(z, x.astype(np.float64) * 0.5 + y - 1, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad,exc,match", [
    (b"\0" * 8, TypeError, "ScaleTiling is 20 bytes, got 8"),
    ({"tileNum": 3}, TypeError, "has no field 'tileNum'"),
    ((1, 2), TypeError, "has 4 fields"),
    ({"totalLength": -1}, OverflowError, "totalLength"),
    (3, TypeError, "struct ScaleTiling passed by value"),
])
def test_tiling_struct_bad_arguments(vec, bad, exc, match):
    x = np.zeros(8, np.float32)
    with pytest.raises(exc, match=match):
        vec.get_function("scale_add").launch(1, x, x, x, bad)


@pytest.mark.parametrize("n", [1, 7, 8, 1000, 1003])
def test_data_copy_pad_unaligned_tail(vec, n):
    x = np.arange(n, dtype=np.float32)
    y = np.full(n + 8, 99, np.float32)
    vec.get_function("double_pad").launch(1, x, y, n)
    sync()
    np.testing.assert_array_equal(y[:n], 2 * x)
    assert (y[n:] == 99).all()   # nothing written past the n elements


def test_data_copy_params_strided_blocks(vec):
    rows = 24
    x = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16)
    y = np.empty((2, rows, 8), np.float32)
    vec.get_function("take_half_rows").launch(2, x, y, rows)
    sync()
    np.testing.assert_array_equal(y[0], x[:, :8])
    np.testing.assert_array_equal(y[1], x[:, 8:])


def test_mask_repeat_forms_and_whole_reduce(vec):
    rows = 12
    big = np.zeros((rows * 2 + rows // 4, 64), np.float32)   # x, then what the kernel writes after it
    x = big[:rows]
    x[...] = np.random.default_rng(7).standard_normal((rows, 64)).astype(np.float32)
    x0 = x.copy()
    y = np.empty_like(x)
    sums = np.empty(rows, np.float32)
    maxes = np.empty((rows, 2), np.float32)
    totals = np.empty(16, np.float32)
    vec.get_function("repeat_forms").launch(1, big, y, sums, maxes, totals, rows)
    sync()
    blocks = x0.reshape(rows * 8, 8).astype(np.float64)
    flat = big.ravel()
    np.testing.assert_allclose(flat[rows * 64:rows * 72], blocks.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(flat[rows * 72:rows * 80], x0.reshape(rows * 8, 8).max(axis=1))
    np.testing.assert_array_equal(flat[rows * 80:rows * 144].reshape(rows * 8, 8),
                                  np.repeat(flat[rows * 64:rows * 72, None], 8, axis=1))
    x = x0
    np.testing.assert_allclose(totals[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert totals[8] == x.max() and totals[9:10].view(np.uint32)[0] == x.argmax()
    want = np.concatenate([2 * x[:, :48], 3 * x[:, 48:]], axis=1).ravel()
    want[:rows * 64 - 5] += np.float32(100)
    want = want.reshape(rows, 64)
    want[:, :16] *= -1
    np.testing.assert_array_equal(y, want)
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(maxes[:, 0], x.max(axis=1))
    np.testing.assert_array_equal(maxes[:, 1].view(np.uint32), x.argmax(axis=1))


def test_atomic_add_across_blocks(vec):
    rows = 333
    x = np.random.default_rng(9).standard_normal((rows, 64)).astype(np.float32)
    out = np.zeros(64, np.float32)
    vec.get_function("column_sums").launch(7, x, out, rows)
    sync()
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-4)


def test_less_used_forms(vec):
    n = 256
    x = (np.random.default_rng(11).standard_normal(n) * 10).astype(np.float32)
    y = np.full(2 * n + 8, np.nan, np.float32)
    ints = np.zeros(2 * n, np.int32)
    vec.get_function("misc_forms").launch(1, x, y, ints, n)
    sync()
    blocks = x.reshape(-1, 8)
    np.testing.assert_array_equal(y[:n].reshape(-1, 8)[::2], blocks[::2])   # every other block landed
    assert y[n] == x.min() and y[n + 1:n + 2].view(np.uint32)[0] == x.argmin()
    np.testing.assert_allclose(y[n + 8:], np.minimum(x.astype(np.float64), 0) + 2 * x.astype(np.float64),
                               rtol=1e-6, atol=1e-5)
    floors = np.floor(x).astype(np.int32)
    np.testing.assert_array_equal(ints[:n], floors)
    tail = floors.view(np.int16).copy()
    tail[-16:] = tail[-32:-16] & 0x0f0f
    np.testing.assert_array_equal(ints[n:].view(np.int16), tail)


def test_compare_select(vec):
    n = 512
    x = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    y, z = np.empty_like(x), np.empty_like(x)
    vec.get_function("clamp_low").launch(1, x, y, z, n, 0.25)
    sync()
    np.testing.assert_array_equal(y, np.where(x > 0.25, x, np.float32(0.25)))
    np.testing.assert_array_equal(z, y)


def test_scalar_access_unary_math_printf_dump(vec, capfd):
    n = 64
    x = np.linspace(0.25, 4, n).astype(np.float32)
    y = np.empty((6, n), np.float32)
    vec.get_function("scalar_math").launch(1, x, y, n)
    sync()
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y[0, 1:], x[1:])
    np.testing.assert_allclose(y[1], np.sqrt(x64), rtol=1e-6)
    np.testing.assert_allclose(y[2], 1 / np.sqrt(x64), rtol=1e-6)
    np.testing.assert_allclose(y[3], np.log(x64), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y[4], 1 / x64, rtol=1e-6)
    c = np.minimum(np.maximum(np.minimum(np.maximum(x64, 0.5), 2.0) - x64, x64), x64) * x64
    np.testing.assert_allclose(y[5], c, rtol=1e-6)
    assert y[0, 0] == 1.0   # GlobalTensor::SetValue(0, GetBlockNum())
    out = capfd.readouterr().out
    assert "[kernel 'scalar_math' block 0 of 1] block 0 of 1: a[1] = 0.3" in out
    assert re.search(r"\[kernel 'scalar_math' block 0 of 1\] DumpTensor desc=7 \(float, VECCALC, 4 of 64 "
                     r"elements\): \[0\.25, 0\.309\d*, 0\.369\d*, 0\.428\d*\]", out), out


def test_mangled_and_unmangled_kernels_have_their_signatures(vec):
    k = vec.get_function("add_relu_custom")
    assert str(k.signature) == ("void add_relu_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t totalLength, "
                                "uint32_t tileNum)")


# ---------------------------------------------------------------------------------------------
# the device's rules, each a KernelError naming kernel, block and line

FAULT_CASES = {
    1: ("ub", r"TPipe::InitBuffer: the Unified Buffer overflows: this TBuf needs 1 x 81920 bytes, 131072 of the "
              r"196608 bytes \(192 KiB on Ascend910B1\) are already in use"),
    2: ("len", r"DataCopy: 7 elements of 4 bytes are 28 bytes, not a multiple of 32 bytes .*DataCopyPad"),
    3: ("addr", r"DataCopy: destination starts at UB offset 12, which is not 32-byte aligned"),
    4: ("deque", r"DeQue: nothing is enqueued in the queue"),
    5: ("alloc", r"AllocTensor: all 1 buffers of the queue are in use"),
    6: ("uaf", r"Adds: use of a LocalTensor after FreeTensor"),
    7: ("index", r"LocalTensor::GetValue: index 256 is out of range of a float LocalTensor of 256 elements"),
    8: ("enque", r"EnQue: the LocalTensor is already in the queue"),
    9: ("count", r"Add: 300 elements exceed the float LocalTensor destination of 256 elements"),
    11: ("empty", r"Duplicate: the LocalTensor holds no buffer"),
    12: ("foreign", r"FreeTensor: the LocalTensor belongs to another queue or buffer"),
    # blocks 0 and 2 return early: block 1 would wait for ever (tests/test_ascendc_sync.py has the barrier itself)
    13: ("syncall", r"SyncAll: block 1 waits for 3 blocks, which can never arrive: every other block of the 3 has "
                    r"ended \(2\) or waits too \(0\)"),
    15: ("nullgm", r"DataCopy: the global memory address is NULL \(a GlobalTensor without SetGlobalBuffer"),
}


@pytest.mark.parametrize("mode", sorted(FAULT_CASES))
def test_device_rule_violations_are_kernel_errors(faults, mode):
    tag, message = FAULT_CASES[mode]
    x = np.zeros(4096, np.float32)
    k = faults.get_function("faulty")
    k.launch(3, x, mode, 1)
    with pytest.raises(acl_rt.KernelError) as ei:
        sync()
    where = rf"kernel 'faulty' block 1 of 3: kernel.cpp:{_line(FAULTS, tag)}: "
    assert re.search(where + message, str(ei.value)), str(ei.value)
    k.launch(3, x, 0, 1)   # the state stays usable
    sync()


def test_sub_tensor_offset_out_of_range(faults):
    x = np.zeros(4096, np.float32)
    faults.get_function("faulty").launch(2, x, 14, 0)
    with pytest.raises(acl_rt.KernelError, match=r"kernel 'faulty' block 0 of 2: LocalTensor::operator\[\]: offset 300 "
                                                 r"is out of range of a float LocalTensor of 256 elements"):
        sync()


def test_enque_beyond_depth():
    src = r'''
#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void deep(GM_ADDR x)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<half> a = q.AllocTensor<half>(), b = q.AllocTensor<half>();
    q.EnQue(a);
    q.EnQue(b);
}
'''
    kernels.RawKernel(src, "deep").launch(1, None)
    with pytest.raises(acl_rt.KernelError, match=r"kernel 'deep' block 0 of 1: kernel.cpp:11: EnQue: the queue "
                                                 r"already holds 1 tensors, its depth"):
        sync()


def test_ub_capacity_follows_the_soc_profile():
    p = run_python(r'''
import numpy as np, acl_rt, kernels
acl_rt.init(); acl_rt.Device(0).set_current()
k = kernels.RawKernel(r"""
#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void ub(GM_ADDR out, uint32_t kib)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    ((__gm__ uint32_t *)out)[0] = GetRuntimeUBSize();
    pipe.InitBuffer(b, kib * 1024);
}
""", "ub")
out = np.zeros(1, np.uint32)
k.launch(1, out, 256); acl_rt.current_stream().synchronize()
print("UB", out[0])
k.launch(1, out, 257)
try:
    acl_rt.current_stream().synchronize()
except acl_rt.KernelError as e:
    print("ERR", str(e))
''', env={"CANNA_SIM_SOC": "Ascend310P3"})
    assert "UB 262144" in p.stdout
    assert "the Unified Buffer overflows" in p.stdout and "(256 KiB on Ascend310P3)" in p.stdout


def test_global_memory_out_of_bounds_under_memcheck():
    p = run_python(r'''
import numpy as np, acl_rt, kernels
acl_rt.init(); acl_rt.Device(0).set_current()
s = acl_rt.current_stream()
k = kernels.RawKernel(r"""
#include "kernel_operator.h"
using namespace AscendC;
extern "C" __global__ __aicore__ void gm_read(GM_ADDR x, uint32_t offset)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 256);
    LocalTensor<float> l = b.Get<float>();
    GlobalTensor<float> g;
    g.SetGlobalBuffer((__gm__ float *)x);
    DataCopy(l, g[offset], 64);
}
""", "gm_read")
buf = acl_rt.alloc(4096, stream=s)
k.launch(2, buf, 960, stream=s); s.synchronize()
print("IN BOUNDS")
k.launch(2, buf, 1000, stream=s)
try:
    s.synchronize()
except acl_rt.KernelError as e:
    print("ERR", str(e))
k.launch(2, buf, 0, stream=s); s.synchronize()
print("DONE")
''', env={"CANNA_SIM_CHECK": "1"})
    out = p.stdout
    assert "IN BOUNDS" in out and "DONE" in out
    assert re.search(r"kernel 'gm_read' block 0 of 2: kernel.cpp:12: DataCopy: global memory out of bounds: "
                     r"\[0x[0-9a-f]+, \+256 bytes\) ends 160 bytes past the end of the device allocation at 0x[0-9a-f]+ \(4096 bytes\)", out), out


def test_kernel_operator_h_is_cxx_only():
    with pytest.raises(kernels.CompileError, match="kernel_operator.h"):
        kernels.RawModule('#include "kernel_operator.h"\nCANNA_KERNEL void f(GM_ADDR x) { }\n',
                          options=("-xc",)).compile()


def test_tiling_struct_from_an_included_header_and_cpu_debug_paths(tmp_path, capfd):
    (tmp_path / "copy_tiling.h").write_text("#include <cstdint>\nstruct CopyTiling { uint32_t n; uint16_t pad; };\n")
    (tmp_path / "copy.cpp").write_text(r'''
#include "copy_tiling.h"
#include "kernel_operator.h"
__global__ __aicore__ void copy_bf16(GM_ADDR x, GM_ADDR y, CopyTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    AscendC::TQueBind<AscendC::TPosition::VECIN, AscendC::TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, tiling.n * sizeof(bfloat16_t));
    AscendC::GlobalTensor<bfloat16_t> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ bfloat16_t *)x, tiling.n);
    yGm.SetGlobalBuffer((__gm__ bfloat16_t *)y, tiling.n);
    AscendC::LocalTensor<bfloat16_t> l = q.AllocTensor<bfloat16_t>();
    AscendC::DataCopy(l, xGm, tiling.n);
    q.EnQue(l);
    l = q.DeQue<bfloat16_t>();
#ifdef ASCENDC_CPU_DEBUG
    l.Print(3);
#endif
    AscendC::DataCopy(yGm, l, tiling.n);
    q.FreeTensor(l);
}
#ifndef __CCE_KT_TEST__
void copy_bf16_do(uint32_t blockDim, void *stream, uint8_t *x, uint8_t *y, CopyTiling t)
{
    copy_bf16<<<blockDim, nullptr, stream>>>(x, y, t);
}
#endif
''')
    torch = pytest.importorskip("torch")
    k = kernels.RawKernel(tmp_path / "copy.cpp", "copy_bf16")
    assert str(k.signature) == "void copy_bf16(GM_ADDR x, GM_ADDR y, CopyTiling tiling)"
    x = torch.tensor([1.5, -2.0, 3.25] + [0.5] * 61, dtype=torch.bfloat16)
    y = torch.zeros_like(x)
    k.launch(1, x, y, {"n": 64})
    sync()
    assert torch.equal(x, y)
    assert "[kernel 'copy_bf16' block 0 of 1] DumpTensor desc=0 (bfloat16_t, VECIN, 3 of 64 elements): " \
           "[1.5, -2, 3.25]" in capfd.readouterr().out


OP_KERNEL = r'''
#include "kernel_operator.h"
extern "C" __global__ __aicore__ void scale_custom(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    GET_TILING_DATA(tilingData, tiling);
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> b;
    pipe.InitBuffer(b, tilingData.tileLength * sizeof(float));
    AscendC::LocalTensor<float> l = b.Get<float>();
    AscendC::GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x);
    yGm.SetGlobalBuffer((__gm__ float *)y);
    for (uint32_t off = AscendC::GetBlockIdx() * tilingData.tileLength; off < tilingData.totalLength;
         off += AscendC::GetBlockNum() * tilingData.tileLength) {
        AscendC::DataCopy(l, xGm[off], tilingData.tileLength);
        AscendC::Muls(l, l, tilingData.factor[1], tilingData.tileLength);
        AscendC::DataCopy(yGm[off], l, tilingData.tileLength);
    }
}
'''


def test_op_project_kernel_with_get_tiling_data(tmp_path):
    host = tmp_path / "op_host" / "scale_custom_tiling.h"
    host.parent.mkdir()
    host.write_text('#include "register/tilingdata_base.h"\nnamespace optiling {\n'
                    'BEGIN_TILING_DATA_DEF(ScaleCustomTilingData)\n'
                    '  TILING_DATA_FIELD_DEF(uint32_t, totalLength);\n'
                    '  TILING_DATA_FIELD_DEF(uint32_t, tileLength);\n'
                    '  TILING_DATA_FIELD_DEF_ARR(float, 2, factor);\n'
                    'END_TILING_DATA_DEF;\n'
                    'REGISTER_TILING_DATA_CLASS(ScaleCustom, ScaleCustomTilingData)\n}\n')
    k = kernels.RawModule(OP_KERNEL, options=("-include", str(host),
                                              "-DCANNA_TILING_DATA_TYPE=optiling::ScaleCustomTilingData")
                          ).get_function("scale_custom")
    n = 4096
    tiling = np.array([(n, 256, (0.0, 1.5))], np.dtype([("totalLength", "<u4"), ("tileLength", "<u4"),
                                                        ("factor", "<f4", 2)]))
    x = np.random.default_rng(10).standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    k.launch(3, x, y, None, tiling)
    sync()
    np.testing.assert_array_equal(y, x * np.float32(1.5))
    with pytest.raises(kernels.CompileError, match="GET_TILING_DATA needs the tiling struct: compile with "
                                                   "-DCANNA_TILING_DATA_TYPE"):
        kernels.RawModule(OP_KERNEL).compile()


# ---------------------------------------------------------------------------------------------
# the API the public Ascend C samples use beyond the basics (tools/try_ascendc_samples.py tries them)

STATIC = r'''
#include "kernel_operator.h"
constexpr uint32_t TILE = 1024;

// static Tensor programming: LocalTensors at fixed UB addresses, ordered by SetFlag/WaitFlag
extern "C" __global__ __aicore__ void add_static(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t blockLength)
{
    AscendC::InitSocState();
    AscendC::GlobalTensor<float> xGm, yGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float *)x + AscendC::GetBlockIdx() * blockLength, blockLength);
    yGm.SetGlobalBuffer((__gm__ float *)y + AscendC::GetBlockIdx() * blockLength, blockLength);
    zGm.SetGlobalBuffer((__gm__ float *)z + AscendC::GetBlockIdx() * blockLength, blockLength);
    AscendC::LocalTensor<float> xLocal(AscendC::TPosition::VECCALC, 0, TILE);
    AscendC::LocalMemAllocator<AscendC::Hardware::UB> ub;
    (void)ub.Alloc<float, TILE>();                                   // the bytes of xLocal
    AscendC::LocalTensor<float> yLocal = ub.Alloc<AscendC::TPosition::VECIN, float>(TILE);
    AscendC::LocalTensor<float> zLocal = ub.Alloc<float>(TILE);
    for (uint32_t i = 0; i < AscendC::DivCeil(blockLength, TILE); i++) {
        uint32_t n = AscendC::Std::min(TILE, blockLength - i * TILE);
        AscendC::DataCopy(xLocal, xGm[i * TILE], n);
        AscendC::DataCopy(yLocal, yGm[i * TILE], n);
        AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(EVENT_ID0);
        AscendC::Add(zLocal, xLocal, yLocal, n);
        AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(AscendC::EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(AscendC::EVENT_ID1);
        AscendC::DataCopy(zGm[i * TILE], zLocal, n);
    }
}

extern "C" __global__ __aicore__ void static_over(uint32_t addr, uint32_t n, uint32_t allocs)
{
    if (allocs == 0) {
        AscendC::LocalTensor<float> t(AscendC::TPosition::VECCALC, addr, n);    // L:ctor
        (void)t;
    }
    AscendC::LocalMemAllocator<> ub;
    for (uint32_t i = 0; i < allocs; i++)
        (void)ub.Alloc<float>(n);                                              // L:alloc
}

// Fill (InitGlobalMemory's older name), Std::max, GetSystemCycle, the bit-mask Duplicate, DumpTensor
// with a ShapeInfo, DumpAccChkPoint
extern "C" __global__ __aicore__ void misc(GM_ADDR y, GM_ADDR cyc, uint32_t n)
{
    int64_t t0 = AscendC::GetSystemCycle();
    AscendC::GlobalTensor<half> yGm;
    yGm.SetGlobalBuffer((__gm__ half *)y, n);
    AscendC::Fill(yGm, n, (half)AscendC::Std::max(2.5f, 1));
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 256 * sizeof(half));
    AscendC::LocalTensor<half> t = buf.Get<half>();
    AscendC::DataCopy(t, yGm, 256);
    uint64_t mask[2] = {0xF0F0F0F0F0F0F0F0ull, 0x1ull};
    AscendC::Duplicate<half>(t, (half)-1, mask, 2, 1, 8);
    uint32_t shape[2] = {2, 4};
    AscendC::ShapeInfo si(2, shape);
    AscendC::DumpTensor(t, 5, 8, si);
    AscendC::DumpAccChkPoint(t, 6, 128, 3);
    AscendC::DataCopy(yGm, t, 256);
    AscendC::GlobalTensor<int64_t> c;
    c.SetGlobalBuffer((__gm__ int64_t *)cyc, 1);
    c.SetValue(0, AscendC::GetSystemCycle() - t0);
}

// TBufPool: two stages reuse the same bytes (pool2 shares pool1's); mode 1/2 break its rules
extern "C" __global__ __aicore__ void pool_stages(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t mode)
{
    constexpr uint32_t N = 256;
    AscendC::TPipe pipe;
    AscendC::TBufPool<AscendC::TPosition::VECCALC> all, stage1, stage2;
    AscendC::TQue<AscendC::TPosition::VECIN, 1> qx, qy, qy2;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> qz, qz2;
    pipe.InitBufPool(all, 3 * N * sizeof(float));
    all.InitBuffer(qx, 1, N * sizeof(float));
    all.InitBufPool(stage1, 2 * N * sizeof(float));
    all.InitBufPool(stage2, (mode == 2 ? 3 : 2) * N * sizeof(float), stage1);   // L:share
    stage1.InitBuffer(qy, 1, N * sizeof(float));
    stage1.InitBuffer(qz, 1, (mode == 1 ? 2 : 1) * N * sizeof(float));          // L:over
    stage2.InitBuffer(qy2, 1, N * sizeof(float));
    stage2.InitBuffer(qz2, 1, N * sizeof(float));
    AscendC::GlobalTensor<float> xGm, yGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, 2 * N);
    yGm.SetGlobalBuffer((__gm__ float *)y, 2 * N);
    zGm.SetGlobalBuffer((__gm__ float *)z, 2 * N);
    for (uint32_t s = 0; s < 2; s++) {
        auto &in = s ? qy2 : qy;
        auto &out = s ? qz2 : qz;
        AscendC::LocalTensor<float> a = qx.AllocTensor<float>(), b = in.AllocTensor<float>();
        AscendC::DataCopy(a, xGm[s * N], N);
        AscendC::DataCopy(b, yGm[s * N], N);
        AscendC::LocalTensor<float> c = out.AllocTensor<float>();
        if (s)
            AscendC::Sub(c, a, b, N);
        else
            AscendC::Mul(c, a, b, N);
        AscendC::DataCopy(zGm[s * N], c, N);
        qx.FreeTensor(a);
        in.FreeTensor(b);
        out.FreeTensor(c);
        if (!s)
            stage1.Reset();
    }
    stage2.Reset();
    all.Reset();
}

// Broadcast (BroadCast: its older name): mode 0 (m, 1) -> (m, k), 1 (1, k) -> (m, k), 2 (1,) -> (n,),
// 3 a wrong source shape
extern "C" __global__ __aicore__ void bcast(GM_ADDR x, GM_ADDR y, uint32_t m, uint32_t k, uint32_t mode)
{
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> bx, by, tmp;
    pipe.InitBuffer(bx, 1024 * sizeof(float));
    pipe.InitBuffer(by, 4096 * sizeof(float));
    pipe.InitBuffer(tmp, 1024);
    AscendC::LocalTensor<float> xl = bx.Get<float>(), yl = by.Get<float>();
    AscendC::LocalTensor<uint8_t> t = tmp.Get<uint8_t>();
    AscendC::GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, 1024);
    yGm.SetGlobalBuffer((__gm__ float *)y, m * k);
    AscendC::DataCopy(xl, xGm, 1024);
    const uint32_t dst2[] = {m, k}, col[] = {m, 1}, row[] = {1, k}, dst1[] = {m * k}, one[] = {1};
    if (mode == 0)
        AscendC::Broadcast<float, 2, 1>(yl, xl, dst2, col, t);
    else if (mode == 1)
        AscendC::BroadCast<float, 2, 0>(yl, xl, dst2, row);
    else if (mode == 2)
        AscendC::Broadcast<float, 1, 0>(yl, xl, dst1, one);
    else
        AscendC::Broadcast<float, 2, 1>(yl, xl, dst2, row);                    // L:bcast
    AscendC::DataCopy(yGm, yl, m * k);
    tmp.FreeTensor(t);
}

// GatherMask: a built-in pattern over `repeats` repeats of 64 floats (normal mode), or a user pattern
// (the words in pat) over `count` elements (counter mode); y[0] gets rsvdCnt, the gathered from y[8] on
extern "C" __global__ __aicore__ void gather_mask(GM_ADDR x, GM_ADDR pat, GM_ADDR y, uint32_t pattern, uint32_t repeats,
                                                  uint32_t count)
{
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> bx, bp, by;
    pipe.InitBuffer(bx, 512 * sizeof(float));
    pipe.InitBuffer(bp, 8 * sizeof(uint32_t));
    pipe.InitBuffer(by, 512 * sizeof(float));
    AscendC::LocalTensor<float> xl = bx.Get<float>(), yl = by.Get<float>();
    AscendC::LocalTensor<uint32_t> pl = bp.Get<uint32_t>();
    AscendC::GlobalTensor<float> xGm, yGm;
    AscendC::GlobalTensor<uint32_t> pGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, 512);
    pGm.SetGlobalBuffer((__gm__ uint32_t *)pat, 8);
    yGm.SetGlobalBuffer((__gm__ float *)y, 520);
    AscendC::DataCopy(xl, xGm, 512);
    AscendC::DataCopy(pl, pGm, 8);
    AscendC::Duplicate(yl, -7.0f, 512);
    uint64_t kept = 0;
    if (pattern)
        AscendC::GatherMask(yl, xl, (uint8_t)pattern, false, 0, {1, (uint16_t)repeats, 8, 0}, kept);   // L:gm
    else
        AscendC::GatherMask(yl, xl, pl, true, count, {1, 1, 8, 8}, kept);                              // L:gmu
    yGm.SetValue(0, (float)kept);
    AscendC::DataCopy(yGm[8], yl, 512);
}

extern "C" __global__ __aicore__ void sync_ws(GM_ADDR ws, uint32_t cores)
{
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 256);
    AscendC::GlobalTensor<int32_t> g;
    g.SetGlobalBuffer((__gm__ int32_t *)ws, 64);
    AscendC::LocalTensor<int32_t> l = buf.Get<int32_t>();
    AscendC::SyncAll(g, l, (int32_t)cores);                                     // L:sync
}
'''

TILING_KEYED = r'''
#include "kernel_operator.h"
struct ScaleTiling {
    uint32_t n;
    float factor;
};
extern "C" __global__ __aicore__ void keyed(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(ScaleTiling);
    GET_TILING_DATA(t, tiling);
    AscendC::GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, t.n);
    yGm.SetGlobalBuffer((__gm__ float *)y, t.n);
    for (uint32_t i = 0; i < t.n; i++) {
        if (TILING_KEY_IS(1))
            yGm.SetValue(i, xGm.GetValue(i) * t.factor);
        else if (TILING_KEY_IS(2))
            yGm.SetValue(i, xGm.GetValue(i) + t.factor);
    }
}
'''


@pytest.fixture(scope="module")
def static():
    acl_rt.init()
    acl_rt.Device(0).set_current()
    return kernels.RawModule(STATIC).compile()


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_static_tensor_programming_add(static, kind):
    n = 4 * 2504   # a tail tile of 456 elements (57 blocks of 32 bytes) per block
    rng = np.random.default_rng(20)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = np.full(n, np.nan, np.float32)
    xs, ys, zs = _as(kind, x), _as(kind, y), _as(kind, z)
    static.get_function("add_static").launch(4, xs, ys, zs, n // 4)
    sync()
    np.testing.assert_array_equal(_back(zs), (x.astype(np.float64) + y).astype(np.float32))


@pytest.mark.parametrize("args, tag, message", [
    ((12, 8, 0), "ctor", r"LocalTensor: UB address 12 is not 32-byte aligned"),
    ((196608 - 32, 16, 0), "ctor", r"LocalTensor: 16 float elements at UB address 196576 exceed the Unified Buffer "
                                   r"of 196608 bytes"),
    ((0, 16384, 4), "alloc", r"LocalMemAllocator::Alloc: 16384 float elements at UB address 196608 exceed the "
                             r"Unified Buffer of 196608 bytes"),
])
def test_static_tensors_beyond_the_unified_buffer(static, args, tag, message):
    static.get_function("static_over").launch(1, *args)
    with pytest.raises(acl_rt.KernelError) as ei:
        sync()
    assert re.search(rf"kernel 'static_over' block 0 of 1: kernel.cpp:{_line(STATIC, tag)}: {message}",
                     str(ei.value)), str(ei.value)
    static.get_function("static_over").launch(1, 0, 16384, 3)   # exactly the UB: fine
    sync()


def test_fill_bitmask_duplicate_and_shaped_dumps(static, capfd):
    n = 300
    y = np.zeros(n, np.float16)
    cyc = np.full(1, -1, np.int64)
    static.get_function("misc").launch(1, y, cyc, n)
    sync()
    want = np.full(n, 2.5)
    bits = np.zeros(128, bool)      # 128 half per repeat: bit k of the 128-bit mask (low word first)
    for k in range(64):
        bits[k] = (0xF0F0F0F0F0F0F0F0 >> k) & 1
    bits[64] = True
    want[:256][np.concatenate([bits, bits])] = -1.0
    np.testing.assert_array_equal(y.astype(np.float64), want)
    assert cyc[0] >= 0
    out = capfd.readouterr().out
    assert "[kernel 'misc' block 0 of 1] DumpTensor desc=5 (half, VECCALC, shape (2, 4), 8 of 256 elements): " \
           "[2.5, 2.5, 2.5, 2.5, -1, -1, -1, -1]" in out, out
    assert "[kernel 'misc' block 0 of 1] DumpTensor desc=6 (half, VECCALC, 3 of 128 elements): [2.5, 2.5, 2.5]" \
           in out, out


def test_syncall_with_a_workspace(static):
    ws = np.zeros(64, np.int32)
    static.get_function("sync_ws").launch(1, ws, 1)      # one block: nothing to wait for
    sync()
    static.get_function("sync_ws").launch(4, ws, 4)      # four blocks meet
    sync()
    static.get_function("sync_ws").launch(4, ws, 2)      # the first two of four (usedCores)
    sync()
    static.get_function("sync_ws").launch(2, ws, 3)      # three of two: a wait that could never end
    with pytest.raises(acl_rt.KernelError, match=rf"kernel 'sync_ws' block \d of 2: kernel.cpp:{_line(STATIC, 'sync')}: "
                                                 r"SyncAll: block \d waits for 3 blocks, which can never arrive: 3 "
                                                 r"blocks cannot synchronize in a launch of 2 blocks"):
        sync()


@pytest.mark.parametrize("key, op", [(1, np.multiply), (2, np.add)])
def test_register_tiling_default_and_tiling_key(key, op):
    k = kernels.RawModule(TILING_KEYED, options=(f"-DCANNA_TILING_KEY={key}",)).get_function("keyed")
    n = 100
    x = np.random.default_rng(21).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    tiling = np.array([(n, 0.75)], np.dtype([("n", "<u4"), ("factor", "<f4")]))
    k.launch(1, x, y, None, tiling)
    sync()
    np.testing.assert_array_equal(y, op(x.astype(np.float64), 0.75).astype(np.float32))


def test_tiling_key_is_needs_the_key():
    with pytest.raises(kernels.CompileError, match=r"TILING_KEY_IS needs the tiling key the host chose: compile with "
                                                   r"-DCANNA_TILING_KEY=<key>"):
        kernels.RawModule(TILING_KEYED).compile()


def test_sample_trial_tool_on_a_local_tree(tmp_path):
    """tools/try_ascendc_samples.py on a tree in the layout of the public samples (no network): an op
    project's kernel is built with its op_host tiling header, data types and tiling key; a cube kernel
    is skipped; a compile failure is listed with its first error."""
    import subprocess
    import sys
    from pathlib import Path
    proj = tmp_path / "ScaleCustom"
    (proj / "op_host").mkdir(parents=True)
    (proj / "op_kernel").mkdir()
    (proj / "op_host" / "scale_custom_tiling.h").write_text(
        '#include "register/tilingdata_base.h"\nnamespace optiling {\nBEGIN_TILING_DATA_DEF(ScaleTilingData)\n'
        'TILING_DATA_FIELD_DEF(uint32_t, n);\nEND_TILING_DATA_DEF;\n'
        'REGISTER_TILING_DATA_CLASS(ScaleCustom, ScaleTilingData)\n}\n')
    (proj / "op_host" / "scale_custom.cpp").write_text(
        'this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16});\n'
        'this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT});\ncontext->SetTilingKey(3);\n')
    (proj / "op_kernel" / "scale_custom.cpp").write_text(
        '#include "kernel_operator.h"\nextern "C" __global__ __aicore__ void scale_custom(GM_ADDR x, GM_ADDR y, '
        'GM_ADDR workspace, GM_ADDR tiling)\n{\n    GET_TILING_DATA(t, tiling);\n'
        '    static_assert(sizeof(DTYPE_X) == 2 && sizeof(DTYPE_Y) == 4, "types");\n'
        '    if (TILING_KEY_IS(3)) { AscendC::GlobalTensor<DTYPE_Y> g; g.SetGlobalBuffer((__gm__ DTYPE_Y *)y, t.n); }\n}\n')
    (tmp_path / "mm").mkdir()
    (tmp_path / "mm" / "matmul_custom.cpp").write_text(
        '#include "kernel_operator.h"\n#include "lib/matmul_intf.h"\n'
        'extern "C" __global__ __aicore__ void matmul_custom(GM_ADDR a) {}\n')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad_custom.cpp").write_text(
        '#include "kernel_operator.h"\nextern "C" __global__ __aicore__ void bad_custom(GM_ADDR a)\n'
        '{ AscendC::NoSuchApi(a); }\n')
    tool = Path(__file__).resolve().parent.parent / "tools" / "try_ascendc_samples.py"
    r = subprocess.run([sys.executable, str(tool), "--src", str(tmp_path), "--no-run"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "ok    ScaleCustom/op_kernel/scale_custom.cpp: compiles" in r.stdout, r.stdout
    assert "skip  mm/matmul_custom.cpp: cube unit" in r.stdout, r.stdout
    assert re.search(r"FAIL  bad/bad_custom.cpp: error: 'NoSuchApi' is not a member of 'AscendC'", r.stdout), r.stdout
    assert "1 compile, 1 fail to compile, 1 skipped (cube)" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, str(tool), "--clone", str(tmp_path / "no-such-repo")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "cannot clone" in r.stdout, (r.stdout, r.stderr)


def test_asc_source_file(tmp_path):
    """A kernel in a .asc file (the Ascend C source suffix) builds from its path like a .cpp."""
    src = tmp_path / "scale.asc"
    src.write_text('#include "kernel_operator.h"\n'
                   'extern "C" __global__ __aicore__ void scale(GM_ADDR x, uint32_t n)\n{\n'
                   '    AscendC::GlobalTensor<float> g;\n    g.SetGlobalBuffer((__gm__ float *)x, n);\n'
                   '    for (uint32_t i = 0; i < n; i++)\n        g.SetValue(i, g.GetValue(i) * 3.0f);\n}\n')
    x = np.random.default_rng(22).standard_normal(40).astype(np.float32)
    want = x.astype(np.float64) * 3
    kernels.RawKernel(str(src), "scale").launch(1, x, x.size)
    sync()
    np.testing.assert_array_equal(x, want.astype(np.float32))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_tbufpool_stages_share_memory(static, kind):
    rng = np.random.default_rng(23)
    x, y = rng.standard_normal(512).astype(np.float32), rng.standard_normal(512).astype(np.float32)
    z = np.full(512, np.nan, np.float32)
    xs, ys, zs = _as(kind, x), _as(kind, y), _as(kind, z)
    static.get_function("pool_stages").launch(1, xs, ys, zs, 0)
    sync()
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(_back(zs), np.concatenate([x64[:256] * y[:256], x64[256:] - y[256:]])
                                  .astype(np.float32))


@pytest.mark.parametrize("mode, tag, message", [
    (1, "over", r"TBufPool::InitBuffer: the TBufPool overflows: this queue needs 2048 bytes, 1024 of its 2048 bytes "
                r"are already in use"),
    (2, "share", r"InitBufPool: 3072 bytes exceed the 2048 bytes of the TBufPool to share"),
])
def test_tbufpool_rules(static, mode, tag, message):
    x = np.zeros(512, np.float32)
    static.get_function("pool_stages").launch(1, x, x, x, mode)
    with pytest.raises(acl_rt.KernelError) as ei:
        sync()
    assert re.search(rf"kernel 'pool_stages' block 0 of 1: kernel.cpp:{_line(STATIC, tag)}: {message}",
                     str(ei.value)), str(ei.value)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_broadcast(static, mode):
    m, k = 24, 40
    x = np.random.default_rng(24 + mode).standard_normal(1024).astype(np.float32)
    y = np.full(m * k, np.nan, np.float32)
    static.get_function("bcast").launch(1, x, y, m, k, mode)
    sync()
    x64 = x.astype(np.float64)
    want = {0: np.broadcast_to(x64[:m, None], (m, k)), 1: np.broadcast_to(x64[None, :k], (m, k)),
            2: np.broadcast_to(x64[:1], (m * k,))}[mode]
    np.testing.assert_array_equal(y, want.reshape(-1).astype(np.float32))


def test_broadcast_source_shape_rule(static):
    x = np.zeros(1024, np.float32)
    y = np.zeros(24 * 40, np.float32)
    static.get_function("bcast").launch(1, x, y, 24, 40, 3)
    with pytest.raises(acl_rt.KernelError, match=rf"kernel 'bcast' block 0 of 1: kernel.cpp:{_line(STATIC, 'bcast')}: "
                                                 r"Broadcast: source shape dimension 0 is 1, not the destination's 24 "
                                                 r"\(only the broadcast axis 1 may differ"):
        sync()


def _gather(static, pattern, repeats=0, count=0, words=(0,) * 8):
    x = np.random.default_rng(25 + pattern).standard_normal(512).astype(np.float32)
    pat = np.array(words, np.uint32)
    y = np.full(520, np.nan, np.float32)
    static.get_function("gather_mask").launch(1, x, pat, y, pattern, repeats, count)
    sync()
    return x, y


@pytest.mark.parametrize("pattern", range(1, 8))
def test_gather_mask_builtin_patterns(static, pattern):
    x, y = _gather(static, pattern, repeats=3)
    k = np.arange(3 * 64) % 64
    keep = {1: k % 2 == 0, 2: k % 2 == 1, 3: k % 4 == 0, 4: k % 4 == 1, 5: k % 4 == 2, 6: k % 4 == 3,
            7: np.ones_like(k, bool)}[pattern]
    want = x[:3 * 64][keep].astype(np.float64)
    assert y[0] == want.size
    np.testing.assert_array_equal(y[8:8 + want.size], want)
    np.testing.assert_array_equal(y[8 + want.size:], -7.0)    # nothing written past the gathered


def test_gather_mask_user_pattern_counter_mode(static):
    words = (0b1011 << 28 | 0x3, 0x0000FFFF, 0, 0, 0, 0, 0, 0)
    x, y = _gather(static, 0, count=48, words=words)
    bits = np.array([(words[i // 32] >> (i % 32)) & 1 for i in range(48)], bool)
    want = x[:48][bits].astype(np.float64)
    assert y[0] == want.size == 2 + 3 + 16
    np.testing.assert_array_equal(y[8:8 + want.size], want)


@pytest.mark.parametrize("pattern, repeats, count, tag, message", [
    (9, 1, 0, "gm", r"GatherMask: the built-in pattern is 1..7, not 9"),
    (0, 0, 100, "gmu", r"GatherMask: a user pattern over 2 repeats is not supported by the simulator yet"),
    (0, 0, 0, "gmu", r"GatherMask: mask \(the element count in counter mode\) is 0"),
])
def test_gather_mask_rules(static, pattern, repeats, count, tag, message):
    static.get_function("gather_mask").launch(1, np.zeros(512, np.float32), np.zeros(8, np.uint32),
                                              np.zeros(520, np.float32), pattern, repeats, count)
    with pytest.raises(acl_rt.KernelError) as ei:
        sync()
    assert re.search(rf"kernel 'gather_mask' block 0 of 1: kernel.cpp:{_line(STATIC, tag)}: {message}",
                     str(ei.value)), str(ei.value)
