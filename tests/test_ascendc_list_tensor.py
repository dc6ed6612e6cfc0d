"""Ascend C's ListTensorDesc / TensorDesc (kernel_operator_list_tensor_intf.h) in the simulator
(issue 16): a list of tensors in global memory read by index (Ascend C API reference on
hiascend.com, "ListTensorDesc", "TensorDesc"; the layout the public AddN sample's host code builds).
"""
from __future__ import annotations

import numpy as np
import pytest

import acl_rt
from ascendc_common import compile_module, source_line, sync

SRC = r'''
#include "kernel_operator.h"
#include "kernel_operator_list_tensor_intf.h"
using namespace AscendC;

// out = the sum of the list's float tensors (every one of n elements); shapes[i] = the product of
// tensor i's shape, dims[i] = its dim, idx[i] = its index
extern "C" __global__ __aicore__ void addn(GM_ADDR list, GM_ADDR out, GM_ADDR info, uint32_t n, uint32_t length)
{
    ListTensorDesc l(list, length);                                            // L:init
    GlobalTensor<float> o, inf;
    o.SetGlobalBuffer((__gm__ float *)out, n);
    inf.SetGlobalBuffer((__gm__ float *)info, 3 * 8);
    for (uint32_t i = 0; i < n; i++) o.SetValue(i, 0.0f);
    for (uint32_t t = 0; t < l.GetSize(); t++) {
        uint64_t buf[8] = {0};
        TensorDesc<float> d;
        d.SetShapeAddr(buf);
        l.GetDesc(d, t);
        float prod = 1;
        for (uint32_t k = 0; k < d.GetDim(); k++) prod *= (float)d.GetShape(k);
        inf.SetValue(3 * t, prod);
        inf.SetValue(3 * t + 1, (float)d.GetDim());
        inf.SetValue(3 * t + 2, (float)d.GetIndex());
        GlobalTensor<float> g = d.GetDataObj();
        float *p = l.GetDataPtr<float>(t);
        for (uint32_t i = 0; i < n; i++) o.SetValue(i, o.GetValue(i) + g.GetValue(i) * 0.5f + p[i] * 0.5f);
    }
}

extern "C" __global__ __aicore__ void bad_index(GM_ADDR list)
{
    ListTensorDesc l(list);
    (void)l.GetDataPtr<float>(l.GetSize());                                     // L:index
}
'''


def _line(tag):
    return source_line(SRC, tag)


@pytest.fixture(scope="module")
def mod():
    return compile_module(SRC)


def _list(arrays):
    """The list's words: ptrOffset, per tensor (dim | index << 32, shape...), then the data pointers."""
    words = [0]
    for i, a in enumerate(arrays):
        words += [a.ndim | (i << 32), *a.shape]
    words[0] = 8 * len(words)
    words += [a.ctypes.data for a in arrays]
    return np.array(words, np.uint64)


@pytest.mark.parametrize("shapes", [[(8, 16), (128,)], [(2, 4, 16), (128,), (4, 32)]])
def test_list_of_tensors(mod, shapes):
    arrays = [np.random.rand(*s).astype(np.float32) for s in shapes]
    lst = _list(arrays)
    out = np.zeros(128, np.float32)
    info = np.zeros(24, np.float32)
    mod.get_function("addn").launch(1, lst, out, info, 128, lst.nbytes)
    sync()
    np.testing.assert_allclose(out.astype(np.float64), sum(a.astype(np.float64).ravel() for a in arrays), rtol=1e-6)
    for i, a in enumerate(arrays):
        assert list(info[3 * i:3 * i + 3]) == [a.size, a.ndim, i]


def test_list_rules(mod):
    arrays = [np.zeros(16, np.float32)]
    lst = _list(arrays)
    mod.get_function("addn").launch(1, lst, np.zeros(16, np.float32), np.zeros(24, np.float32), 16, 99)
    with pytest.raises(acl_rt.KernelError, match=rf"block 0 of 1: kernel.cpp:{_line('init')}: ListTensorDesc: the "
                                                 r"list of 1 tensors is 32 bytes, not length 99"):
        sync()
    mod.get_function("bad_index").launch(1, lst)
    with pytest.raises(acl_rt.KernelError, match=rf"block 0 of 1: kernel.cpp:{_line('index')}: "
                                                 r"ListTensorDesc::GetDataPtr: index 1 is out of range of a list of 1 "
                                                 r"tensors"):
        sync()
    broken = lst.copy()
    broken[1] = 5            # 5 dimensions: runs past the pointers at byte 24
    mod.get_function("bad_index").launch(1, broken)
    with pytest.raises(acl_rt.KernelError, match=r"ListTensorDesc: the description of tensor 0 \(5 dimensions at word "
                                                 r"1\) runs past the data pointers at byte 24"):
        sync()
