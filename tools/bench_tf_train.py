"""Benchmark: one training step through canna's TensorFlow / JAX ops against the frameworks' own
ops, measured side by side in one run (medians of repeated batches after a warm-up).

Rows (float32, batch 64; "keras fit" is per epoch):

  dense keras    Keras model 64 -> Dense(128, relu) -> Dense(10), SparseCategoricalCrossentropy,
                 SGD: ``model.train_on_batch`` with canna_dl.tf.keras.Dense vs keras.layers.Dense
                 (tf.function; canna's ops are native CannaCall nodes; CANNA_TF_NATIVE=0: tf.py_function nodes)
  keras fit      one ``model.fit`` epoch of that network over 16 batches of 64 (no shuffling, no output):
                 Keras's own training loop, its train step a tf.function
  dense eager    the same network as a GradientTape step in eager mode: canna_dl.tf.dense / relu /
                 cross_entropy vs tf.matmul / tf.nn.relu / sparse_softmax_cross_entropy_with_logits
                 (canna's zero-copy eager path), SGD update by assign_sub
  dense tf.fn    that step inside tf.function
  cnn keras      the SimpleCNN of tools/_common.py (NHWC 28x28x1 -> Conv2D(16, 3, same, relu) -> MaxPool 2 ->
                 Flatten -> Dense(10)) with canna's Conv2D/Dense + canna max_pool2d vs Keras's
  jax mlp jit    jax.jit(jax.grad) of the dense network through canna_dl.jax (pure_callback) vs jnp

The ratio is canna's time / the framework's. Run: .venv/bin/python tools/bench_tf_train.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _benchutil import bench_many  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


#: the batches of one "keras fit" epoch
FIT_BATCHES = 16
ROWS = ("dense keras", "keras fit", "dense eager", "dense tf.fn", "cnn keras", "jax mlp jit")


def _pair(canna, native, *, budget, batch):
    """(canna seconds, native seconds) per call, measured interleaved."""
    r = bench_many({"canna": canna, "native": native}, budget=2 * budget, batch=batch, warmup=max(3, batch))
    return r["canna"], r["native"]


def measure(*, budget: float = 2.0, rows=ROWS) -> dict:
    """Seconds per training step (batch 64) of each row of ``rows`` (see the module docstring):
    ``name -> (canna, native)``, each pair measured interleaved for about ``2 * budget`` seconds;
    plus ``"eager_copies"``: the copies canna made during the eager Dense steps (None if not run)."""
    import numpy as np
    import tensorflow as tf
    import keras
    import canna_dl
    import canna_dl.tf as ctf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int32)
    xt, yt = tf.constant(x), tf.constant(y)
    out = {"eager_copies": None}

    # -- Keras Dense network, model.train_on_batch ------------------------------------------
    def dense_model(L):
        return keras.Sequential([keras.Input((64,)), L.Dense(128, activation="relu"), L.Dense(10)])
    mc, mn = dense_model(ctf.keras), dense_model(keras.layers)
    mn.set_weights(mc.get_weights())
    init = [w.copy() for w in mc.get_weights()]
    if "dense keras" in rows or "keras fit" in rows:
        for m in (mc, mn):
            m.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if "dense keras" in rows:
        out["dense keras"] = _pair(lambda: mc.train_on_batch(x, y), lambda: mn.train_on_batch(x, y),
                                   budget=budget, batch=10)
    if "keras fit" in rows:
        xf = rng.standard_normal((64 * FIT_BATCHES, 64)).astype(np.float32)
        yf = rng.integers(0, 10, 64 * FIT_BATCHES).astype(np.int32)

        def fit(m):
            return lambda: m.fit(xf, yf, batch_size=64, epochs=1, verbose=0, shuffle=False)
        out["keras fit"] = _pair(fit(mc), fit(mn), budget=budget, batch=1)

    # -- the same network as an explicit GradientTape step ----------------------------------
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
    if "dense eager" in rows or "dense tf.fn" in rows:
        lc, ln = float(step_canna(xt, yt)), float(step_native(xt, yt))
        assert abs(lc - ln) < 1e-4 * max(1.0, abs(ln)), (lc, ln)
    if "dense eager" in rows:
        canna_dl.reset_copy_stats()
        out["dense eager"] = _pair(lambda: step_canna(xt, yt), lambda: step_native(xt, yt), budget=budget, batch=10)
        out["eager_copies"] = canna_dl.copy_stats()["count"]
    if "dense tf.fn" in rows:
        fc, fn_ = tf.function(step_canna), tf.function(step_native)
        out["dense tf.fn"] = _pair(lambda: fc(xt, yt), lambda: fn_(xt, yt), budget=budget, batch=10)

    # -- SimpleCNN (NHWC) ---------------------------------------------------------------------
    if "cnn keras" in rows:
        xi = rng.standard_normal((64, 28, 28, 1)).astype(np.float32)

        class CannaPool(keras.layers.Layer):
            def call(self, t):
                return ctf.max_pool2d(t, 2)

            def compute_output_shape(self, s):
                return (s[0], s[1] // 2, s[2] // 2, s[3])

        def cnn(L, pool):
            return keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(16, 3, padding="same", activation="relu"),
                                     pool, keras.layers.Flatten(), L.Dense(10)])
        cc, cn = cnn(ctf.keras, CannaPool()), cnn(keras.layers, keras.layers.MaxPooling2D(2))
        cn.set_weights(cc.get_weights())
        for m in (cc, cn):
            m.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        out["cnn keras"] = _pair(lambda: cc.train_on_batch(xi, y), lambda: cn.train_on_batch(xi, y),
                                 budget=budget, batch=3)

    # -- JAX -----------------------------------------------------------------------------------
    if "jax mlp jit" in rows:
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
        out["jax mlp jit"] = _pair(lambda: jax.block_until_ready(gc_(w, xj, yj)),
                                   lambda: jax.block_until_ready(gn(w, xj, yj)), budget=budget, batch=10)
    return out


def fmt(sec: float) -> str:
    return f"{sec * 1e6:9.1f} us" if sec < 1e-3 else f"{sec * 1e3:9.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    ap.add_argument("--no-jax", action="store_true", help="skip the JAX row")
    args = ap.parse_args()
    budget = 0.5 if args.quick else 2.0

    res = measure(budget=budget, rows=[r for r in ROWS if not (args.no_jax and r.startswith("jax"))])
    eager_copies = res.pop("eager_copies")
    rows = [(name, tc, tn) for name, (tc, tn) in res.items()]

    print(f"{'training step (batch 64)':26} {'canna':>12} {'native':>12} {'ratio':>7}   (keras fit: per epoch)")
    for name, tc, tn in rows:
        print(f"{name:26} {fmt(tc)} {fmt(tn)} {tc / tn:6.2f}x")
    print(f"copies canna made in the eager steps: {eager_copies} (canna_dl.copy_stats)")


if __name__ == "__main__":
    main()
