#!/usr/bin/env python3
"""Throughput of an Ascend C kernel in the simulator: the tiled, double-buffered Add of the Ascend C
documentation (kernels/include/kernel_operator.h) against ``kernels.add`` and ``numpy.add(out=)``,
measured interleaved in one run (DESIGN.md §9: ratios, never timed assertions).

    python tools/bench_ascendc.py [--shape 32,1024,1024] [--blocks 32] [--tile 4096] [--repeat 5]

The element count must split evenly into blocks x 2 buffers x tiles of ``--tile`` float32 elements.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import acl_rt  # noqa: E402
import kernels  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import bench_many  # noqa: E402

ADD = r'''
#include "kernel_operator.h"
using namespace AscendC;
constexpr int32_t BUFFER_NUM = 2;

extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t blockLength,
                                                 uint32_t tileLength)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, BUFFER_NUM> qx, qy;
    TQue<QuePosition::VECOUT, BUFFER_NUM> qz;
    GlobalTensor<float> xGm, yGm, zGm;
    xGm.SetGlobalBuffer((__gm__ float *)x + (uint64_t)blockLength * GetBlockIdx(), blockLength);
    yGm.SetGlobalBuffer((__gm__ float *)y + (uint64_t)blockLength * GetBlockIdx(), blockLength);
    zGm.SetGlobalBuffer((__gm__ float *)z + (uint64_t)blockLength * GetBlockIdx(), blockLength);
    pipe.InitBuffer(qx, BUFFER_NUM, tileLength * sizeof(float));
    pipe.InitBuffer(qy, BUFFER_NUM, tileLength * sizeof(float));
    pipe.InitBuffer(qz, BUFFER_NUM, tileLength * sizeof(float));
    for (uint32_t i = 0; i < blockLength / tileLength; i++) {
        LocalTensor<float> xl = qx.AllocTensor<float>(), yl = qy.AllocTensor<float>();
        DataCopy(xl, xGm[(uint64_t)i * tileLength], tileLength);
        DataCopy(yl, yGm[(uint64_t)i * tileLength], tileLength);
        qx.EnQue(xl);
        qy.EnQue(yl);
        xl = qx.DeQue<float>();
        yl = qy.DeQue<float>();
        LocalTensor<float> zl = qz.AllocTensor<float>();
        Add(zl, xl, yl, tileLength);
        qz.EnQue(zl);
        qx.FreeTensor(xl);
        qy.FreeTensor(yl);
        zl = qz.DeQue<float>();
        DataCopy(zGm[(uint64_t)i * tileLength], zl, tileLength);
        qz.FreeTensor(zl);
    }
}
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="32,1024,1024")
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--tile", type=int, default=4096, help="float32 elements per buffer (default 4096: 16 KiB)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    args = ap.parse_args(argv)
    acl_rt.init()
    acl_rt.Device(0).set_current()
    shape = tuple(int(v) for v in args.shape.split(","))
    n = int(np.prod(shape))
    if n % args.blocks or (n // args.blocks) % args.tile:
        ap.error(f"{n} elements do not split into {args.blocks} blocks of whole {args.tile}-element tiles")
    mod = kernels.RawModule(ADD).compile()
    add = mod.get_function("add_custom")
    s = acl_rt.current_stream()
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32).reshape(shape), rng.random(n, dtype=np.float32).reshape(shape)
    z = np.empty_like(x)
    add.launch(args.blocks, x, y, z, n // args.blocks, args.tile)
    s.synchronize()
    assert np.array_equal(z, x + y)
    cands = {
        "ascendc": lambda: (add.launch(args.blocks, x, y, z, n // args.blocks, args.tile), s.synchronize()),
        "kernels.add": lambda: (kernels.add(x, y, out=z), s.synchronize()),
        "numpy": lambda: np.add(x, y, out=z),
    }
    t = bench_many(cands, budget=0.0, batch=1, rounds=args.repeat, warmup=1, min_batches=2)
    gb = 3 * n * 4 / 1e9
    print(f"{'x'.join(map(str, shape))} float32, {args.blocks} blocks, tiles of {args.tile} ({os.cpu_count()} CPUs); "
          f"binary from the {mod.cache} cache")
    for k, v in t.items():
        print(f"  {k:<12} {v * 1e3:9.2f} ms  {gb / v:6.1f} GB/s   {t['kernels.add'] / v:5.2f}x the throughput "
              f"of kernels.add")


if __name__ == "__main__":
    main()
