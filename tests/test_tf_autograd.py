"""canna's differentiable TensorFlow ops (canna_dl.tf) and Keras layers (canna_dl.tf.keras).

Every op's values and gradients are compared in float64 with TensorFlow's own ops (through
tf.GradientTape) eagerly and inside tf.function, and with finite differences
(tf.test.compute_gradient); the add example's values and gradients; Keras models train like their native twins;
bad input raises clear errors and leaves everything usable.
"""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import canna_dl  # noqa: E402
import canna_dl.tf as ctf  # noqa: E402
import kernels  # noqa: E402
from canna_dl.tf import _native as native_tf  # noqa: E402
from canna_dl.tf import _ops as ctf_ops  # noqa: E402

from conftest import assert_usable  # noqa: E402

RNG = np.random.default_rng(7)
UNIFIED = canna_dl.memory_model() == "unified"
#: zero-copy holds in the unified memory model (the suite may be rerun in the discrete one)
unified_only = pytest.mark.skipif(not UNIFIED, reason="zero-copy exchange needs the unified memory model")


def R(*shape, dtype=np.float64):
    return tf.constant(RNG.standard_normal(shape).astype(dtype))


def distinct(*shape):
    """Well separated values (no ties for max pooling, no kinks within finite-difference steps)."""
    n = int(np.prod(shape))
    return tf.constant((RNG.permutation(n) - n / 2).reshape(shape) * 0.1 + 0.013)


def _ln(x, w, b, eps=1e-5):
    m = tf.reduce_mean(x, -1, keepdims=True)
    v = tf.reduce_mean((x - m) ** 2, -1, keepdims=True)
    return (x - m) / tf.sqrt(v + eps) * w + b


def _ce(lg, lb, weight=None, reduction="mean"):
    per = tf.nn.sparse_softmax_cross_entropy_with_logits(lb, lg)
    if weight is not None:
        per = per * tf.gather(weight, lb)
        return per if reduction == "none" else tf.reduce_sum(per) / tf.reduce_sum(tf.gather(weight, lb))
    return per if reduction == "none" else tf.reduce_mean(per) if reduction == "mean" else tf.reduce_sum(per)


def _gelu(x, approximate):
    """GELU by its definition (tf.nn.gelu in float64 is only accurate to ~1e-7: it is not the
    reference here)."""
    if approximate:
        return 0.5 * x * (1 + tf.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + tf.math.erf(x / np.sqrt(2.0)))


def _nchw(f):
    """A TF NHWC conv/pool reference for NCHW operands (TensorFlow's CPU kernels lack NCHW)."""
    def g(x, *rest):
        y = f(tf.transpose(x, (0, 2, 3, 1)), *rest)
        return tf.transpose(y, (0, 3, 1, 2))
    return g


LABELS = tf.constant([0, 2, 1, 2], tf.int64)

# id: (canna op, TensorFlow reference or None (finite differences only), inputs)
CASES = {
    "add": (ctf.add, tf.add, lambda: [R(3, 4), R(4)]),
    "add_scalar": (lambda x: ctf.add(2.5, x), lambda x: 2.5 + x, lambda: [R(3, 4)]),
    "sub": (ctf.sub, tf.subtract, lambda: [R(3, 1), R(1, 4)]),
    "sub_scalar": (lambda x: ctf.sub(1.5, x), lambda x: 1.5 - x, lambda: [R(2, 3)]),
    "mul": (ctf.mul, tf.multiply, lambda: [R(2, 3, 4), R(3, 1)]),
    "mul_scalar": (lambda x: ctf.mul(x, -3.0), lambda x: x * -3.0, lambda: [R(2, 3)]),
    "div": (ctf.div, tf.divide, lambda: [R(3, 4), R(4) + 4.0]),
    "div_scalar": (lambda x: ctf.div(2.0, x), lambda x: 2.0 / x, lambda: [R(2, 3) + 4.0]),
    "matmul": (ctf.matmul, tf.linalg.matmul, lambda: [R(2, 3, 4), R(4, 5)]),
    "matmul_vec": (ctf.matmul, lambda a, b: tf.linalg.matvec(a, b), lambda: [R(3, 4), R(4)]),
    "linear": (ctf.linear, lambda x, w, b: tf.matmul(x, w, transpose_b=True) + b, lambda: [R(3, 4), R(5, 4), R(5)]),
    "linear_nobias": (ctf.linear, lambda x, w: tf.matmul(x, w, transpose_b=True), lambda: [R(2, 3, 4), R(5, 4)]),
    "dense": (ctf.dense, lambda x, k, b: tf.tensordot(x, k, 1) + b, lambda: [R(2, 3, 4), R(4, 5), R(5)]),
    "relu": (ctf.relu, tf.nn.relu, lambda: [distinct(3, 4)]),
    "gelu": (ctf.gelu, lambda x: _gelu(x, False), lambda: [R(3, 4)]),
    "gelu_tanh": (lambda x: ctf.gelu(x, True), lambda x: _gelu(x, True), lambda: [R(3, 4)]),
    "silu": (ctf.silu, tf.nn.silu, lambda: [R(3, 4)]),
    "sigmoid": (ctf.sigmoid, tf.sigmoid, lambda: [R(3, 4)]),
    "tanh": (ctf.tanh, tf.tanh, lambda: [R(3, 4)]),
    "softmax": (lambda x: ctf.softmax(x, 0), lambda x: tf.nn.softmax(x, 0), lambda: [R(3, 4)]),
    "log_softmax": (ctf.log_softmax, tf.nn.log_softmax, lambda: [R(2, 3, 4)]),
    "layer_norm": (lambda x, w, b: ctf.layer_norm(x, 5, w, b), _ln, lambda: [R(2, 3, 5), R(5), R(5)]),
    "layer_norm_plain": (lambda x: ctf.layer_norm(x, (3, 4)),
                         lambda x: tf.reshape(_ln(tf.reshape(x, (2, 12)), 1.0, 0.0), (2, 3, 4)), lambda: [R(2, 3, 4)]),
    "rms_norm": (lambda x, w: ctf.rms_norm(x, 4, w, 1e-6),
                 lambda x, w: x / tf.sqrt(tf.reduce_mean(x * x, -1, keepdims=True) + 1e-6) * w,
                 lambda: [R(3, 4), R(4)]),
    "conv2d_valid": (lambda x, w: ctf.conv2d(x, w, 1, "VALID"), lambda x, w: tf.nn.conv2d(x, w, 1, "VALID"),
                     lambda: [R(2, 6, 5, 3), R(3, 3, 3, 4)]),
    "conv2d_same_stride2_bias": (lambda x, w, b: ctf.conv2d(x, w, 2, "SAME", bias=b),
                                 lambda x, w, b: tf.nn.conv2d(x, w, 2, "SAME") + b,
                                 lambda: [R(2, 7, 6, 3), R(3, 3, 3, 4), R(4)]),
    "conv2d_same_even_kernel": (lambda x, w: ctf.conv2d(x, w, 1, "SAME"), lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"),
                                lambda: [R(1, 5, 5, 2), R(2, 2, 2, 3)]),
    "conv2d_explicit": (lambda x, w: ctf.conv2d(x, w, [1, 2, 1, 1], [[0, 0], [1, 2], [0, 1], [0, 0]]),
                        lambda x, w: tf.nn.conv2d(x, w, [1, 2, 1, 1], [[0, 0], [1, 2], [0, 1], [0, 0]]),
                        lambda: [R(1, 6, 5, 2), R(3, 2, 2, 3)]),
    "conv2d_nchw": (lambda x, w: ctf.conv2d(x, w, 1, "SAME", data_format="NCHW"),
                    _nchw(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME")), lambda: [R(2, 3, 5, 4), R(3, 3, 3, 2)]),
    # TensorFlow's CPU kernels have no gradient for dilated / grouped convolutions: finite differences
    "conv2d_dilated": (lambda x, w: ctf.conv2d(x, w, 1, "SAME", dilations=2), None,
                       lambda: [R(1, 6, 6, 2), R(3, 3, 2, 2)]),
    "conv2d_grouped": (lambda x, w: ctf.conv2d(x, w, 1, "VALID"), None, lambda: [R(1, 4, 4, 4), R(2, 2, 2, 4)]),
    "max_pool2d": (lambda x: ctf.max_pool2d(x, 2), lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"),
                   lambda: [distinct(2, 4, 6, 3)]),
    "max_pool2d_same": (lambda x: ctf.max_pool2d(x, 2, 2, "SAME"), lambda x: tf.nn.max_pool2d(x, 2, 2, "SAME"),
                        lambda: [distinct(2, 5, 3, 2)]),
    "max_pool2d_same3": (lambda x: ctf.max_pool2d(x, 3, 2, "SAME"), lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"),
                         lambda: [distinct(1, 7, 6, 2)]),
    "max_pool2d_same_stride1": (lambda x: ctf.max_pool2d(x, 2, 1, "SAME"), lambda x: tf.nn.max_pool2d(x, 2, 1, "SAME"),
                                lambda: [distinct(1, 5, 4, 2)]),
    "max_pool2d_window_past_input": (lambda x: ctf.max_pool2d(x, 4, 3, "SAME"),
                                     lambda x: tf.nn.max_pool2d(x, 4, 3, "SAME"), lambda: [distinct(1, 3, 5, 2)]),
    "max_pool2d_explicit": (lambda x: ctf.max_pool2d(x, 3, 1, [[0, 0], [2, 1], [1, 2], [0, 0]]),
                            lambda x: tf.nn.max_pool2d(x, 3, 1, [[0, 0], [2, 1], [1, 2], [0, 0]]),
                            lambda: [distinct(2, 5, 4, 2)]),
    "max_pool2d_nchw": (lambda x: ctf.max_pool2d(x, 2, 1, data_format="NCHW"),
                        _nchw(lambda x: tf.nn.max_pool2d(x, 2, 1, "VALID")), lambda: [distinct(1, 2, 4, 3)]),
    "cross_entropy": (lambda x: ctf.cross_entropy(x, LABELS), lambda x: _ce(x, LABELS), lambda: [R(4, 3)]),
    "cross_entropy_none": (lambda x: ctf.cross_entropy(x, LABELS, reduction="none"),
                           lambda x: _ce(x, LABELS, reduction="none"), lambda: [R(4, 3)]),
    "cross_entropy_weight": (lambda x: ctf.cross_entropy(x, LABELS, tf.constant([1.0, 2.0, 0.5], tf.float64)),
                             lambda x: _ce(x, LABELS, tf.constant([1.0, 2.0, 0.5], tf.float64)), lambda: [R(4, 3)]),
    "sum_all": (ctf.sum, tf.reduce_sum, lambda: [R(2, 3, 4)]),
    "sum_axes": (lambda x: ctf.sum(x, [0, -1]), lambda x: tf.reduce_sum(x, [0, -1]), lambda: [R(2, 3, 4)]),
    "mean_keepdims": (lambda x: ctf.mean(x, 1, keepdims=True), lambda x: tf.reduce_mean(x, 1, keepdims=True),
                      lambda: [R(2, 3, 4)]),
}

EVERY_OP = {"add", "sub", "mul", "div", "matmul", "linear", "relu", "gelu", "silu", "sigmoid", "tanh", "softmax",
            "log_softmax", "layer_norm", "rms_norm", "conv2d", "max_pool2d", "cross_entropy", "sum", "mean"}


def test_every_op_is_covered():
    covered = {k.split("_")[0] if not k.startswith(("log_", "layer_", "rms_", "max_", "cross_"))
               else "_".join(k.split("_")[:2]) for k in CASES}
    assert EVERY_OP <= covered, EVERY_OP - covered
    assert EVERY_OP <= set(ctf.__all__)


def _weights(y):
    """Fixed, non-uniform output weights so every output element matters to the loss."""
    n = int(np.prod(y.shape))
    return tf.reshape(tf.cos(tf.range(n, dtype=y.dtype) * 0.7 + 0.3), tf.shape(y))


def _value_and_grads(f, args):
    args = list(args)
    with tf.GradientTape() as tape:
        tape.watch(args)
        y = f(*args)
        loss = tf.reduce_sum(y * _weights(y))
    return y, tape.gradient(loss, args)


@tf.autograph.experimental.do_not_convert
def _in_function(f, args):
    """``_value_and_grads`` traced and run as a tf.function (the op's graph path)."""
    return tf.function(lambda *a: _value_and_grads(f, a), autograph=False)(*args)


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("name", [k for k, v in CASES.items() if v[1] is not None])
def test_matches_tensorflow_float64(name, mode):
    op, ref, make = CASES[name]
    args = make()
    y, grads = _value_and_grads(op, args) if mode == "eager" else _in_function(op, args)
    y_ref, grads_ref = _value_and_grads(ref, args)
    assert y.dtype == tf.float64 and y.shape == y_ref.shape
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-10, atol=1e-12)
    for g, gr in zip(grads, grads_ref):
        assert g is not None and g.shape == gr.shape
        np.testing.assert_allclose(g.numpy(), gr.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_finite_differences(name):
    op, _, make = CASES[name]
    args = make()
    theoretical, numerical = tf.test.compute_gradient(lambda *a: op(*a), args, delta=1e-6)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["conv2d_dilated", "conv2d_grouped"])
def test_function_matches_eager_where_tensorflow_has_no_gradient(name):
    op, _, make = CASES[name]
    args = make()
    y, g = _value_and_grads(op, args)
    y2, g2 = _in_function(op, args)
    np.testing.assert_array_equal(y.numpy(), y2.numpy())
    for a, b in zip(g, g2):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_float32_and_float16():
    x32 = R(4, 6, dtype=np.float32)
    w32 = R(6, 3, dtype=np.float32)
    y, (gx, gw) = _value_and_grads(ctf.dense, [x32, w32])
    yr, (gxr, gwr) = _value_and_grads(lambda x, k: x @ k, [x32, w32])
    assert y.dtype == gx.dtype == tf.float32
    np.testing.assert_allclose(y.numpy(), yr.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw.numpy(), gwr.numpy(), rtol=1e-5, atol=1e-5)
    h = tf.constant([[-1.0, 0.5, 2.0]], tf.float16)
    y, (g,) = _value_and_grads(ctf.sigmoid, [h])
    yr, (gr,) = _value_and_grads(tf.sigmoid, [h])
    assert y.dtype == g.dtype == tf.float16
    np.testing.assert_allclose(g.numpy().astype(np.float32), gr.numpy().astype(np.float32), rtol=2e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# the add example: c = a + b, loss = reduce_sum(c) -> both gradients all ones

@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_add_then_sum_gives_the_sums_and_ones(mode):
    def step(a, b):
        with tf.GradientTape() as tape:
            c = ctf.add(a, b)
            loss = ctf.sum(c)
        return c, loss, tape.gradient(loss, [a, b])
    if mode == "tf.function":
        step = tf.function(step)
    a, b = tf.Variable([1.0, 2.0, 3.0]), tf.Variable([4.0, 5.0, 6.0])
    c, loss, (ga, gb) = step(a, b)
    np.testing.assert_array_equal(c.numpy(), [5.0, 7.0, 9.0])
    assert float(loss) == 21.0
    np.testing.assert_array_equal(ga.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gb.numpy(), [1.0, 1.0, 1.0])
    # with TensorFlow's own reduction as the loss, too
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ctf.add(a, b))
    for g in tape.gradient(loss, [a, b]):
        np.testing.assert_array_equal(g.numpy(), [1.0, 1.0, 1.0])
    big = tf.constant(RNG.random((32, 64, 128), dtype=np.float32))
    out = ctf.add(big, big) if mode == "eager" else tf.function(ctf.add)(big, big)
    assert out.shape == (32, 64, 128)
    np.testing.assert_allclose(out.numpy(), 2 * big.numpy(), rtol=1e-6)


def test_zero_size():
    e = tf.zeros((0, 3))
    y, (g,) = _value_and_grads(ctf.relu, [e])
    assert y.shape == (0, 3) and g.shape == (0, 3)


# ---------------------------------------------------------------------------------------------
# zero-copy

def _spy(monkeypatch, name, seen):
    real = getattr(kernels, name)

    def spy(t, *a, **k):
        r = real(t, *a, **k)
        seen.append((canna_dl.asarray(t).ptr, canna_dl.asarray(r).ptr))
        return r
    monkeypatch.setattr(ctf_ops.K, name, spy)
    op = kernels.get_op(name)
    if op.generate:   # a shim generated from the registry calls the entry's kernel function
        monkeypatch.setattr(op, "kernel", spy)


@unified_only
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_kernels_read_tensorflow_memory_in_place(monkeypatch, mode):
    x = tf.constant(RNG.standard_normal((64, 32)).astype(np.float32))
    seen = []
    _spy(monkeypatch, "relu", seen)
    canna_dl.reset_copy_stats()
    y = ctf.relu(x) if mode == "eager" else tf.function(ctf.relu)(x)
    if mode == "tf.function" and native_tf.available():
        # a native CannaCall node: its kernel launches canna's executor on TensorFlow's own buffers
        # (the spy saw only the plan factory's scratch arrays; tests/test_tf_native.py)
        np.testing.assert_array_equal(y.numpy(), np.maximum(x.numpy(), 0))
        assert canna_dl.copy_stats()["count"] == 0
        return
    (xin, yout), = seen
    assert xin == canna_dl.from_tf(x).ptr      # the kernel read x's own buffer
    assert yout == canna_dl.from_tf(y).ptr     # and TensorFlow got the kernel's output buffer
    assert canna_dl.copy_stats()["count"] == 0


@unified_only
def test_eager_training_step_makes_no_copies():
    x, w, b = R(8, 5, dtype=np.float32), tf.Variable(R(5, 4, dtype=np.float32)), tf.Variable(R(4, dtype=np.float32))
    labels = tf.constant([0, 1, 2, 3, 0, 1, 2, 3])
    canna_dl.reset_copy_stats()
    with tf.GradientTape() as tape:
        h = ctf.relu(ctf.dense(x, w, b))
        loss = ctf.cross_entropy(ctf.log_softmax(ctf.mul(h, 2.0)), labels)
    gw, gb = tape.gradient(loss, [w, b])
    assert gw.shape == w.shape and gb.shape == b.shape
    assert canna_dl.copy_stats()["count"] == 0


def test_nhwc_convolution_copies_are_counted():
    x, w = R(1, 5, 5, 2, dtype=np.float32), R(3, 3, 2, 4, dtype=np.float32)
    def layout_copies():
        return {k: v["bytes"] for k, v in canna_dl.copy_stats()["by_reason"].items() if k.startswith("tf_")}
    canna_dl.reset_copy_stats()
    y = ctf.conv2d(x, w, 1, "SAME")   # forward: permuted views in and out, no copy
    assert layout_copies() == {}
    _value_and_grads(lambda x, w: ctf.conv2d(x, w, 1, "SAME"), [x, w])
    assert layout_copies() == {"tf_nhwc": x.numpy().nbytes, "tf_hwio": w.numpy().nbytes}
    x6 = R(1, 6, 6, 2, dtype=np.float32)
    canna_dl.reset_copy_stats()
    ctf.conv2d(x6, w, 2, "SAME")   # asymmetric padding (0 before, 1 after): a padded copy of the input
    assert layout_copies() == {"tf_pad": x6.numpy().nbytes}
    assert y.shape == (1, 5, 5, 4)


def test_discrete_memory_model(py):
    """Like a PCIe card: TensorFlow's host tensors are copied to the device and results back
    (counted), values and gradients unchanged."""
    r = py("""
        import numpy as np, tensorflow as tf, canna_dl, canna_dl.tf as ctf
        assert canna_dl.memory_model() == "discrete"
        a, b = tf.Variable([1.0, 2.0, 3.0]), tf.Variable([4.0, 5.0, 6.0])
        with tf.GradientTape() as t:
            loss = ctf.sum(ctf.add(a, b))
        assert [g.numpy().tolist() for g in t.gradient(loss, [a, b])] == [[1, 1, 1], [1, 1, 1]]
        x = tf.constant(np.random.default_rng(0).standard_normal((2, 5, 5, 3)))
        w = tf.constant(np.random.default_rng(1).standard_normal((3, 3, 3, 2)))
        def f(op):
            with tf.GradientTape() as t:
                t.watch([x, w])
                y = op(x, w, 2, "SAME")
                l = tf.reduce_sum(y * y)
            return [y] + t.gradient(l, [x, w])
        for u, v in zip(f(ctf.conv2d), f(tf.nn.conv2d)):
            np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-10, atol=1e-12)
        by = canna_dl.copy_stats()["by_reason"]
        assert by["to_device"]["count"] > 0 and by["to_host"]["count"] > 0, by
        print("ok")
    """, env={"CANNA_SIM_MEMORY": "discrete", "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert r.stdout.strip().endswith("ok")


# ---------------------------------------------------------------------------------------------
# tf.function: static shapes, second derivatives, XLA

def test_static_shapes_inside_tf_function():
    w = R(3, 3, 3, 5, dtype=np.float32)
    k = R(7, 4, dtype=np.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3]), tf.TensorSpec([None, None, 7]),
                                  tf.TensorSpec([None], tf.int32)])
    def f(img, seq, labels):
        c = ctf.conv2d(img, w, 2, "SAME")
        p = ctf.max_pool2d(ctf.relu(c), 2)
        d = ctf.dense(seq, k)
        m = ctf.matmul(seq, tf.transpose(seq, (0, 2, 1)))
        s = ctf.sum(d, axis=1)
        loss = ctf.cross_entropy(tf.reshape(p, (-1, 20)), labels)
        assert c.shape.as_list() == [None, 4, 4, 5]
        assert p.shape.as_list() == [None, 2, 2, 5]
        assert d.shape.as_list() == [None, None, 4]
        assert m.shape.as_list() == [None, None, None]
        assert s.shape.as_list() == [None, 4]
        assert loss.shape.as_list() == []
        assert ctf.add(seq, tf.zeros([7])).shape.as_list() == [None, None, 7]
        return c, d
    c, d = f(tf.ones((2, 8, 8, 3)), tf.ones((2, 3, 7)), tf.constant([0, 1]))
    assert c.shape == (2, 4, 4, 5) and d.shape == (2, 3, 4)


def test_shape_errors_at_trace_time():
    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def f(x):
        return ctf.matmul(x, tf.ones((4, 2)))
    with pytest.raises(ValueError, match="inner dimensions 3 and 4"):
        f.get_concrete_function()
    with pytest.raises(ValueError, match="cannot be broadcast"):
        tf.function(lambda: ctf.add(tf.ones((2, 3)), tf.ones((4,))))()
    np.testing.assert_array_equal(ctf.add(tf.ones(2), tf.ones(2)).numpy(), [2.0, 2.0])


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_second_derivatives_raise(mode):
    x = tf.Variable([0.5, -1.0, 2.0], dtype=tf.float64)

    def second():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = ctf.sum(ctf.tanh(x))
            g = inner.gradient(y, x)
        return outer.gradient(g, x)
    with pytest.raises(NotImplementedError, match="second derivatives"):
        second() if mode == "eager" else tf.function(second)()
    # first derivatives still fine afterwards
    with tf.GradientTape() as tape:
        y = ctf.sum(ctf.tanh(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 1 - np.tanh(x.numpy()) ** 2)


def test_xla_is_refused_clearly():
    f = tf.function(lambda x: ctf.relu(x), jit_compile=True)
    with pytest.raises(NotImplementedError, match="XLA"):
        f(tf.ones(3))
    np.testing.assert_array_equal(ctf.relu(tf.constant([-1.0, 1.0])).numpy(), [0.0, 1.0])


# ---------------------------------------------------------------------------------------------
# bad input

BAD = [
    ("ragged", lambda: ctf.add(tf.ragged.constant([[1.0], [2.0, 3.0]]), 1.0), TypeError, "RaggedTensor"),
    ("sparse", lambda: ctf.relu(tf.sparse.from_dense(tf.constant([[0.0, 1.0]]))), TypeError, "SparseTensor"),
    ("sparse_kernel", lambda: ctf.matmul(tf.ones((2, 2)), tf.sparse.eye(2)), TypeError, "SparseTensor"),
    ("string", lambda: ctf.relu(tf.constant(["a", "b"])), TypeError, "string"),
    ("integer", lambda: ctf.add(tf.constant([1, 2]), tf.constant([3, 4])), TypeError, "int32"),
    ("integer_matmul", lambda: ctf.matmul(tf.ones((2, 2), tf.int64), tf.ones((2, 2), tf.int64)), TypeError, "int64"),
    ("bool", lambda: ctf.sigmoid(tf.constant([True])), TypeError, "bool"),
    ("mixed", lambda: ctf.add(tf.ones(2, tf.float32), tf.ones(2, tf.float64)), TypeError, "does not promote"),
    ("mixed_conv", lambda: ctf.conv2d(tf.ones((1, 3, 3, 1)), tf.ones((1, 1, 1, 1), tf.float64)), TypeError,
     "does not promote"),
    ("two_scalars", lambda: ctf.mul(2.0, 3.0), TypeError, "at least one operand"),
    ("none", lambda: ctf.relu(None), TypeError, "not None"),
    ("float_labels", lambda: ctf.cross_entropy(tf.ones((2, 3)), tf.constant([0.0, 1.0])), TypeError, "int32 or int64"),
    ("label_shape", lambda: ctf.cross_entropy(tf.ones((2, 3)), tf.constant([0, 1, 2])), ValueError, "expect labels"),
    ("broadcast", lambda: ctf.add(tf.ones((2, 3)), tf.ones((4,))), ValueError, "cannot be broadcast"),
    ("axis", lambda: ctf.softmax(tf.ones((2, 3)), 2), IndexError, "out of range"),
    ("norm_shape", lambda: ctf.layer_norm(tf.ones((2, 3)), 4), ValueError, "normalized_shape"),
    ("conv_channels", lambda: ctf.conv2d(tf.ones((1, 4, 4, 3)), tf.ones((2, 2, 2, 4))), ValueError, "multiple"),
    ("conv_format", lambda: ctf.conv2d(tf.ones((1, 4, 4, 3)), tf.ones((2, 2, 3, 4)), data_format="NWHC"), ValueError,
     "data_format"),
    ("conv_padding", lambda: ctf.conv2d(tf.ones((1, 4, 4, 3)), tf.ones((2, 2, 3, 4)), padding="FULL"), ValueError,
     "padding"),
    ("pool_window", lambda: ctf.max_pool2d(tf.ones((1, 2, 2, 1)), 3), ValueError, "larger"),
    ("pool_padding", lambda: ctf.max_pool2d(tf.ones((1, 4, 4, 1)), 2, 1, [[0, 0], [0, 2], [0, 0], [0, 0]]), ValueError,
     "smaller than the window"),
    ("reduce_axis", lambda: ctf.sum(tf.ones((2, 3)), [0, -2]), ValueError, "more than once"),
]


@pytest.mark.parametrize("name,call,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()
    np.testing.assert_array_equal(ctf.add(tf.ones(2), tf.ones(2)).numpy(), [2.0, 2.0])


@pytest.mark.parametrize("name,call,exc,match", [b for b in BAD if b[0] in ("integer", "mixed", "broadcast")],
                         ids=["integer", "mixed", "broadcast"])
def test_bad_input_inside_tf_function(name, call, exc, match):
    with pytest.raises(exc, match=match):
        tf.function(call)()


def test_bad_label_value_is_a_runtime_error_and_state_stays_usable():
    logits = tf.ones((3, 4))
    with pytest.raises(ValueError, match="out of bounds"):     # acl_rt's InvalidArgumentError (a ValueError)
        ctf.cross_entropy(logits, tf.constant([0, 7, 1]))
    f = tf.function(ctf.cross_entropy)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of bounds"):
        f(logits, tf.constant([0, 7, 1]))
    assert abs(float(f(logits, tf.constant([0, 3, 1]))) - np.log(4)) < 1e-6
    assert_usable()


# ---------------------------------------------------------------------------------------------
# Keras

def _twins(build):
    canna, native = build(ctf.keras), build(keras.layers)
    native.set_weights(canna.get_weights())
    for m in (canna, native):
        m.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return canna, native


def _fit_both(canna, native, x, y, batch):
    h1 = canna.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = native.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, rtol=1e-4)   # float32: the kernels sum in other orders than TF's
    assert h1[1] < h1[0]   # it trains
    for a, b in zip(canna.get_weights(), native.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(canna.predict(x[:8], verbose=0), native.predict(x[:8], verbose=0), rtol=1e-4, atol=1e-5)


def test_keras_dense_model_trains_like_native_twin():
    x = RNG.standard_normal((64, 20)).astype(np.float32)
    y = RNG.integers(0, 5, 64)
    canna, native = _twins(lambda L: keras.Sequential([keras.Input((20,)), L.Dense(16, activation="relu"),
                                                       L.Dense(5)]))
    assert isinstance(canna.layers[0], ctf.keras.Dense)
    canna_dl.reset_copy_stats()
    _fit_both(canna, native, x, y, 16)
    assert canna_dl.copy_stats()["count"] == 0 or not UNIFIED   # model.fit's tf.function path is zero-copy too


def test_keras_conv_model_trains_like_native_twin():
    x = RNG.standard_normal((16, 8, 8, 3)).astype(np.float32)
    y = RNG.integers(0, 3, 16)
    canna, native = _twins(lambda L: keras.Sequential([
        keras.Input((8, 8, 3)), L.Conv2D(4, 3, padding="same", activation="relu"),
        L.Conv2D(4, (2, 3), strides=2, padding="same", activation="tanh"), keras.layers.Flatten(), L.Dense(3)]))
    _fit_both(canna, native, x, y, 8)


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")  # keras's own
def test_keras_layers_serialize_and_reload(tmp_path):
    d = ctf.keras.Dense(7, activation="gelu", use_bias=False, kernel_initializer="he_normal", name="d")
    again = ctf.keras.Dense.from_config(d.get_config())
    assert again.get_config() == d.get_config()
    c = ctf.keras.Conv2D(4, 3, strides=2, padding="same", dilation_rate=1, activation="elu",
                         kernel_regularizer=keras.regularizers.L2(1e-3))
    assert ctf.keras.Conv2D.from_config(c.get_config()).get_config() == c.get_config()
    model = keras.Sequential([keras.Input((6, 6, 2)), c, keras.layers.Flatten(), d])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [type(layer) for layer in loaded.layers] == [ctf.keras.Conv2D, keras.layers.Flatten, ctf.keras.Dense]
    x = RNG.standard_normal((2, 6, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)


def test_keras_functional_shapes_and_channels_first():
    inp = keras.Input((None, 7))
    out = ctf.keras.Dense(4)(inp)
    assert tuple(out.shape) == (None, None, 4)
    img = keras.Input((3, 9, 9))
    conv = ctf.keras.Conv2D(2, 3, strides=2, data_format="channels_first")
    assert tuple(conv(img).shape) == (None, 2, 4, 4)
    x = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)
    ref = tf.nn.conv2d(tf.transpose(x, (0, 2, 3, 1)), conv.kernel, 2, "VALID") + conv.bias
    np.testing.assert_allclose(conv(x).numpy(), tf.transpose(ref, (0, 3, 1, 2)).numpy(), rtol=1e-5, atol=1e-5)


def test_keras_layer_bad_arguments():
    with pytest.raises(ValueError, match="units"):
        ctf.keras.Dense(0)
    with pytest.raises(ValueError, match="padding"):
        ctf.keras.Conv2D(2, 3, padding="causal")
    with pytest.raises(ValueError, match="groups"):
        ctf.keras.Conv2D(3, 3, groups=2)
    layer = ctf.keras.Dense(3)
    layer(tf.ones((1, 4)))
    with pytest.raises(ValueError):
        layer(tf.ones((1, 5)))


def test_op_stats_count_executions_eager_graph_and_backward():
    x = R(4, 3, dtype=np.float32)
    w = tf.Variable(RNG.standard_normal((3, 2)).astype(np.float32))
    ctf.reset_op_stats()
    ctf.relu(x)                                   # eager, no tape: a plain kernel call
    with tf.GradientTape() as tape:               # eager with a tape: forward, then backward
        loss = ctf.sum(ctf.dense(x, w))
    tape.gradient(loss, w)
    st = ctf.op_stats()
    assert st == {"dense": {"canna": 1, "backward": 1}, "relu": {"canna": 1, "backward": 0},
                  "sum": {"canna": 1, "backward": 1}}

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = ctf.sum(ctf.relu(ctf.dense(x, w)))
        return tape.gradient(loss, w)
    ctf.reset_op_stats()
    step.get_concrete_function(x)                 # tracing runs no kernel
    assert ctf.op_stats() == {}
    before = native_tf.stats()["launches"]
    for _ in range(3):
        step(x)
    # native CannaCall nodes (dense's matmul + add, relu) count as the op that made them, like the
    # py_function nodes (sum)
    assert ctf.op_stats() == {op: {"canna": 3, "backward": 3} for op in ("dense", "relu", "sum")}
    if native_tf.available():
        assert native_tf.stats()["launches"] > before
    ctf.reset_op_stats()
    ctf.dense(x, w)
    with pytest.raises(ValueError):               # a refused call counts nothing
        ctf.dense(x, tf.zeros((5, 2)))
    assert ctf.op_stats()["dense"] == {"canna": 1, "backward": 0}
    ctf.reset_op_stats()
    assert ctf.op_stats() == {}
