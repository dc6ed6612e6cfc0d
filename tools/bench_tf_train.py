"""Benchmark: one training step through canna's TensorFlow / JAX ops against the frameworks' own
ops, measured side by side in one run (medians of repeated batches after a warm-up).

Rows (float32, batch 64):

  dense keras    Keras model 64 -> Dense(128, relu) -> Dense(10), SparseCategoricalCrossentropy,
                 SGD: ``model.train_on_batch`` with canna_dl.tf.keras.Dense vs keras.layers.Dense
                 (tf.function; canna's ops run as tf.py_function nodes)
  dense eager    the same network as a GradientTape step in eager mode: canna_dl.tf.dense / relu /
                 cross_entropy vs tf.matmul / tf.nn.relu / sparse_softmax_cross_entropy_with_logits
                 (canna's zero-copy eager path), SGD update by assign_sub
  dense tf.fn    that step inside tf.function
  cnn keras      SimpleCNN of SEEDS (NHWC 28x28x1 -> Conv2D(16, 3, same, relu) -> MaxPool 2 ->
                 Flatten -> Dense(10)) with canna's Conv2D/Dense + canna max_pool2d vs Keras's
  jax mlp jit    jax.jit(jax.grad) of the dense network through canna_dl.jax (pure_callback) vs jnp

The ratio is canna's time / the framework's. Run: .venv/bin/python tools/bench_tf_train.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def bench(fn, *, budget: float, batch: int) -> float:
    """Median seconds per call of fn(), over batches of ``batch`` calls, for about ``budget`` seconds."""
    for _ in range(max(3, batch)):   # warm-up (tracing, plan caches)
        fn()
    samples = []
    t_end = time.perf_counter() + budget
    while time.perf_counter() < t_end or len(samples) < 5:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples)


def fmt(sec: float) -> str:
    return f"{sec * 1e6:9.1f} us" if sec < 1e-3 else f"{sec * 1e3:9.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    ap.add_argument("--no-jax", action="store_true", help="skip the JAX row")
    args = ap.parse_args()
    budget = 0.5 if args.quick else 2.0

    import numpy as np
    import tensorflow as tf
    import keras
    import canna_dl
    import canna_dl.tf as ctf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int32)
    xt, yt = tf.constant(x), tf.constant(y)
    rows = []

    # -- Keras Dense network, model.train_on_batch ------------------------------------------
    def dense_model(L):
        return keras.Sequential([keras.Input((64,)), L.Dense(128, activation="relu"), L.Dense(10)])
    mc, mn = dense_model(ctf.keras), dense_model(keras.layers)
    mn.set_weights(mc.get_weights())
    for m in (mc, mn):
        m.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rows.append(("dense keras", bench(lambda: mc.train_on_batch(x, y), budget=budget, batch=10),
                 bench(lambda: mn.train_on_batch(x, y), budget=budget, batch=10)))

    # -- the same network as an explicit GradientTape step ----------------------------------
    init = [w.copy() for w in mc.get_weights()]

    def params():
        return [tf.Variable(w) for w in init]
    pc, pn = params(), params()

    def step_canna(x, y):
        w1, b1, w2, b2 = pc
        with tf.GradientTape() as tape:
            h = ctf.relu(ctf.dense(x, w1, b1))
            loss = ctf.cross_entropy(ctf.dense(h, w2, b2), y)
        for v, g in zip(pc, tape.gradient(loss, pc)):
            v.assign_sub(0.01 * g)
        return loss

    def step_native(x, y):
        w1, b1, w2, b2 = pn
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(h, w2) + b2))
        for v, g in zip(pn, tape.gradient(loss, pn)):
            v.assign_sub(0.01 * g)
        return loss
    lc, ln = float(step_canna(xt, yt)), float(step_native(xt, yt))
    assert abs(lc - ln) < 1e-4 * max(1.0, abs(ln)), (lc, ln)
    canna_dl.reset_copy_stats()
    rows.append(("dense eager", bench(lambda: step_canna(xt, yt), budget=budget, batch=10),
                 bench(lambda: step_native(xt, yt), budget=budget, batch=10)))
    eager_copies = canna_dl.copy_stats()["count"]
    fc, fn_ = tf.function(step_canna), tf.function(step_native)
    rows.append(("dense tf.fn", bench(lambda: fc(xt, yt), budget=budget, batch=10),
                 bench(lambda: fn_(xt, yt), budget=budget, batch=10)))

    # -- SimpleCNN (NHWC) ---------------------------------------------------------------------
    xi = rng.standard_normal((64, 28, 28, 1)).astype(np.float32)

    class CannaPool(keras.layers.Layer):
        def call(self, t):
            return ctf.max_pool2d(t, 2)

        def compute_output_shape(self, s):
            return (s[0], s[1] // 2, s[2] // 2, s[3])

    def cnn(L, pool):
        return keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(16, 3, padding="same", activation="relu"), pool,
                                 keras.layers.Flatten(), L.Dense(10)])
    cc, cn = cnn(ctf.keras, CannaPool()), cnn(keras.layers, keras.layers.MaxPooling2D(2))
    cn.set_weights(cc.get_weights())
    for m in (cc, cn):
        m.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rows.append(("cnn keras", bench(lambda: cc.train_on_batch(xi, y), budget=budget, batch=3),
                 bench(lambda: cn.train_on_batch(xi, y), budget=budget, batch=3)))

    # -- JAX -----------------------------------------------------------------------------------
    if not args.no_jax:
        import jax
        import jax.numpy as jnp
        import canna_dl.jax as cjax
        w = [jnp.asarray(a) for a in init]
        xj, yj = jnp.asarray(x), jnp.asarray(y)

        def loss_canna(w, x, y):
            h = cjax.relu(cjax.add(cjax.matmul(x, w[0]), w[1]))
            lp = cjax.log_softmax(cjax.add(cjax.matmul(h, w[2]), w[3]))
            return -jnp.mean(jnp.take_along_axis(lp, y[:, None], 1))

        def loss_native(w, x, y):
            h = jax.nn.relu(x @ w[0] + w[1])
            lp = jax.nn.log_softmax(h @ w[2] + w[3])
            return -jnp.mean(jnp.take_along_axis(lp, y[:, None], 1))
        gc_, gn = jax.jit(jax.grad(loss_canna)), jax.jit(jax.grad(loss_native))
        rows.append(("jax mlp jit", bench(lambda: jax.block_until_ready(gc_(w, xj, yj)), budget=budget, batch=10),
                     bench(lambda: jax.block_until_ready(gn(w, xj, yj)), budget=budget, batch=10)))

    print(f"{'training step (batch 64)':26} {'canna':>12} {'native':>12} {'ratio':>7}")
    for name, tc, tn in rows:
        print(f"{name:26} {fmt(tc)} {fmt(tn)} {tc / tn:6.2f}x")
    print(f"copies canna made in the eager steps: {eager_copies} (canna_dl.copy_stats)")


if __name__ == "__main__":
    main()
