"""Your own kernel as a PyTorch, TensorFlow and JAX op with its gradient, registered once
(README "Your own ops"; docs/DESIGN.md §11).

    .venv/bin/python tools/custom_op_example.py

A custom add kernel (float32 only, equal shapes only) is registered with a launch rule (blocks and
a tiling argument computed on the host from the shapes), a shape rule (the checks) and a backward
(the gradient of x + y is (g, g)); then the article's checks run in PyTorch and TensorFlow: the
3-element test, the autograd test (gradient (1, 1, 1)) and a (32, 64, 128) input.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout

import kernels  # noqa: E402
from kernels import Launch, Spec, Tensor  # noqa: E402

SOURCE = r"""
#include "canna_kernel.h"
/* z = x + y over n floats, `tile` elements per step of a block (the host's tiling) */
CANNA_KERNEL void add_custom(const GM_ADDR x, const GM_ADDR y, GM_ADDR z, uint32_t n, uint32_t tile) {
    for (uint32_t lo = GetBlockIdx() * tile; lo < n; lo += GetBlockNum() * tile) {
        uint32_t hi = lo + tile < n ? lo + tile : n;
        for (uint32_t i = lo; i < hi; ++i) ((float *)z)[i] = ((const float *)x)[i] + ((const float *)y)[i];
    }
}
"""
TILE = 4096      # elements per tile
MAX_BLOCKS = 8   # blocks of the launch


def add_shape(x, y):
    """The shape rule: float32, equal shapes; the result has their shape."""
    if x.dtype.name != "float32" or y.dtype.name != "float32":
        raise TypeError(f"custom add takes float32 tensors, got {x.dtype.name} and {y.dtype.name}")
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"custom add takes tensors of equal shapes, got {tuple(x.shape)} and {tuple(y.shape)}")
    return Spec(x.shape, x.dtype)


def add_launch(x, y, z):
    """The launch rule: (number of blocks, scalar arguments), from the shapes."""
    n = math.prod(x.shape)
    return max(1, min(MAX_BLOCKS, -(-n // TILE))), (n, TILE)


def register(namespace="demo"):
    """Register the custom add once; returns its OpDef (``op(x, y)``, ``op.torch_fn``,
    ``op.tf_fn``, ``op.jax_fn``; ``torch.ops.<namespace>.add_custom``)."""
    try:
        return kernels.get_op(f"{namespace}::add_custom")
    except KeyError:
        pass
    return kernels.register_op(
        "add_custom", namespace=namespace,
        inputs=[Tensor("x", "float32"), Tensor("y", "float32")],
        shape=add_shape,
        forward=Launch(kernels.RawKernel(SOURCE, "add_custom"), add_launch),
        backward=lambda ops, g: (g, g))      # d(x + y)/dx = d(x + y)/dy = 1


def measure(shape, *, budget: float, batch: int, tf=None) -> dict:
    """The registered custom add against the framework's native add on float32 ``shape`` (framework
    tensors in, a framework tensor out), measured interleaved: seconds per call of ``torch``
    (torch.add), ``custom_torch`` (the op's PyTorch form), ``tf`` (tf.add), ``custom_tf``."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from _benchutil import bench_many
    op = register()
    rng = np.random.default_rng(0)
    xn, yn = rng.random(shape, dtype=np.float32), rng.random(shape, dtype=np.float32)
    xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)
    ft = op.torch_fn
    assert torch.equal(ft(xt, yt), xt + yt)
    cands = {"torch": lambda: torch.add(xt, yt), "custom_torch": lambda: ft(xt, yt)}
    if tf is not None:
        xf, yf = tf.constant(xn), tf.constant(yn)
        ff = op.tf_fn
        np.testing.assert_array_equal(ff(xf, yf).numpy(), xn + yn)
        cands.update(tf=lambda: tf.add(xf, yf), custom_tf=lambda: ff(xf, yf))
    return bench_many(cands, budget=budget, batch=batch)


def main():
    op = register()

    import torch
    add = op.torch_fn   # also torch.ops.demo.add_custom
    x, y = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0])
    assert torch.equal(add(x, y), torch.tensor([5.0, 7.0, 9.0]))                  # the 3-element test
    xg = x.clone().requires_grad_()
    add(xg, y).sum().backward()
    assert torch.equal(xg.grad, torch.ones(3))                                     # gradient (1, 1, 1)
    a, b = torch.rand(32, 64, 128), torch.rand(32, 64, 128)
    assert torch.equal(add(a, b), a + b)                                           # (32, 64, 128)
    assert torch.equal(torch.compile(add, fullgraph=True)(a, b), a + b)
    print("PyTorch: 3-element, autograd (1, 1, 1), (32, 64, 128) and torch.compile: ok")

    import tensorflow as tf
    add = op.tf_fn
    x, y = tf.constant([1.0, 2.0, 3.0]), tf.constant([4.0, 5.0, 6.0])
    np.testing.assert_array_equal(add(x, y).numpy(), [5.0, 7.0, 9.0])
    v = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        s = tf.reduce_sum(add(v, y))
    np.testing.assert_array_equal(tape.gradient(s, v).numpy(), [1.0, 1.0, 1.0])
    a, b = tf.random.uniform((32, 64, 128)), tf.random.uniform((32, 64, 128))
    np.testing.assert_array_equal(tf.function(add)(a, b).numpy(), (a + b).numpy())
    print("TensorFlow: 3-element, autograd (1, 1, 1), (32, 64, 128) and tf.function: ok")


if __name__ == "__main__":
    main()
