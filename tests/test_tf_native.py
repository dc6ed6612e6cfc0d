"""canna's ops as a native TensorFlow op inside tf.function (canna_dl/tf/_native.py, CannaCall).

The graph of a tf.function on canna's single-aclnn-call ops holds CannaCall nodes and no
EagerPyFunc (forward and GradientTape backward); values and gradients match TensorFlow in
float64, also for a dynamic batch dimension (one plan per input shapes); Keras fit with
canna_dl.tf.keras layers trains like its native twin; a run-time error is a TensorFlow exception
and leaves everything usable; a SavedModel reloads in a process with canna; without a C++
compiler the ops stay py_function nodes with a warning (a subprocess). The library compiles once
per run (the kernel cache).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import canna_dl  # noqa: E402
import canna_dl.tf as ctf  # noqa: E402
from canna_dl.tf import _native  # noqa: E402

RNG = np.random.default_rng(11)
pytestmark = pytest.mark.skipif(canna_dl.memory_model() != "unified",
                                reason="the native op needs the unified memory model")


def R(*shape):
    return tf.constant(RNG.standard_normal(shape))


def types(f, *args):
    return [o.type for o in f.get_concrete_function(*args).graph.get_operations()]


@pytest.fixture(scope="module", autouse=True)
def native():
    if not _native.available():
        pytest.skip(f"the native op is not available here ({_native._state['why']})")


def test_graph_holds_native_ops_forward_and_backward_and_matches_tensorflow():
    a, b = tf.Variable(R(5, 4)), tf.Variable(R(4, 3))
    c = tf.Variable(R(3))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            h = ctf.tanh(ctf.add(ctf.matmul(ctf.mul(x, a), b), c))
            y = ctf.relu(ctf.sub(h, 0.1))
        return y, tape.gradient(y, [a, b, c])
    x = R(5, 4)
    ops = types(step, x)
    assert "CannaCall" in ops and "EagerPyFunc" not in ops
    y, grads = step(x)
    with tf.GradientTape() as tape:
        ref = tf.nn.relu(tf.tanh((x * a) @ b + c) - 0.1)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
    for g, r in zip(grads, tape.gradient(ref, [a, b, c])):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-10, atol=1e-12)


def test_dynamic_batch_one_plan_per_shape():
    w = tf.constant(R(6, 2))

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float64)])
    def f(x):
        return ctf.sigmoid(ctf.matmul(x, w))
    assert f.get_concrete_function().structured_outputs.shape.as_list() == [None, 2]
    before = _native.stats()
    for n in (3, 7, 3, 0):
        x = R(n, 6)
        np.testing.assert_allclose(f(x).numpy(), tf.sigmoid(x @ w).numpy(), rtol=1e-12)
    after = _native.stats()
    assert after["builds"] - before["builds"] == 6      # 3, 7 and 0 rows, two ops each (a hit for the second 3)
    assert after["launches"] - before["launches"] == 6  # nothing to launch for 0 rows


def test_keras_fit_trains_like_native_twin():
    x = RNG.standard_normal((128, 16)).astype("float32")
    y = RNG.integers(0, 4, 128)

    def model(L):
        keras.utils.set_random_seed(3)
        m = keras.Sequential([keras.Input((16,)), L.Dense(32, activation="relu"), L.Dense(4)])
        m.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m
    mc, mn = model(ctf.keras), model(keras.layers)
    mc.set_weights(mn.get_weights())
    before = _native.stats()["launches"]
    hc = mc.fit(x, y, epochs=2, batch_size=32, verbose=0, shuffle=False).history["loss"]
    hn = mn.fit(x, y, epochs=2, batch_size=32, verbose=0, shuffle=False).history["loss"]
    assert _native.stats()["launches"] - before >= 8 * 8   # 8 steps, forward and backward on canna
    np.testing.assert_allclose(hc, hn, rtol=1e-4)


def test_run_time_error_is_a_tensorflow_exception_and_state_stays_usable():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float64), tf.TensorSpec([None], tf.float64)])
    def f(x, y):
        return ctf.add(x, y)
    assert "CannaCall" in types(f)
    with pytest.raises(tf.errors.InvalidArgumentError, match="canna::add.*broadcast"):
        f(tf.ones(2, tf.float64), tf.ones(3, tf.float64))
    np.testing.assert_array_equal(f(tf.ones(3, tf.float64), tf.ones(3, tf.float64)).numpy(), [2.0, 2.0, 2.0])


def test_saved_model_reloads_with_canna(tmp_path):
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64)])
        def __call__(self, x):
            return ctf.mul(ctf.relu(x), 2.0)
    tf.saved_model.save(M(), str(tmp_path))
    m = tf.saved_model.load(str(tmp_path))
    x = R(4, 3)
    np.testing.assert_allclose(m(x).numpy(), np.maximum(x.numpy(), 0) * 2)


def _child(code, **env):
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_saved_model_loads_in_a_fresh_process_after_load_native_ops(tmp_path):
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return ctf.relu(x)
    tf.saved_model.save(M(), str(tmp_path / "m"))
    r = _child(f"""
        import numpy as np, tensorflow as tf, canna_dl.tf as ctf
        assert ctf.load_native_ops()
        m = tf.saved_model.load({str(tmp_path / "m")!r})
        np.testing.assert_array_equal(m(tf.constant([[-1., 0., 2.]])).numpy(), [[0., 0., 2.]])
        print("ok")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


def test_op_stats_count_native_nodes_and_a_composed_op_once():
    x, k, b = R(4, 5), tf.Variable(R(5, 3)), tf.Variable(R(3))

    @tf.function
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(ctf.relu(ctf.dense(x, k, b)))
        return t.gradient(loss, [k, b])
    step()
    ctf.reset_op_stats()
    for _ in range(3):
        step()
    assert "EagerPyFunc" not in types(step) and "CannaCall" in types(step)
    st = ctf.op_stats()
    assert st["dense"] == {"canna": 3, "backward": 3} and st["relu"] == {"canna": 3, "backward": 3}, st
    assert "matmul" not in st and "add" not in st, st   # dense's parts count as dense


def test_without_a_compiler_the_ops_stay_py_function_nodes_with_a_warning(tmp_path):
    r = _child("""
        import warnings, numpy as np, tensorflow as tf, canna_dl.tf as ctf
        f = tf.function(lambda x: ctf.relu(x))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ops = [o.type for o in f.get_concrete_function(tf.TensorSpec([3])).graph.get_operations()]
        assert "EagerPyFunc" in ops and "CannaCall" not in ops, ops
        assert any("no C++ compiler" in str(m.message) for m in w), [str(m.message) for m in w]
        np.testing.assert_array_equal(f(tf.constant([-1., 0., 2.])).numpy(), [0., 0., 2.])
        print("ok")
    """, PATH=str(tmp_path), CXX="", CANNA_KERNEL_CACHE=str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


def test_library_is_built_once_into_the_kernel_cache():
    from kernels import _compiler
    assert _native.library() is not None
    before = _compiler._stats["compiles"]
    path = _native._path()
    assert path == _native._path() and path.is_file() and path.parent == _compiler.cache_dir()
    assert path.name.startswith("canna_tf-") and _compiler._stats["compiles"] == before   # no second compile


def test_plans_are_rebuilt_after_the_runtime_is_finalized():
    r = _child("""
        import numpy as np, tensorflow as tf, acl_rt, canna_dl.tf as ctf
        from canna_dl.tf import _native
        f = tf.function(lambda x: ctf.mul(ctf.relu(x), 3.0))
        x = tf.constant([-1.0, 2.0])
        assert f(x).numpy().tolist() == [0.0, 6.0]
        acl_rt.finalize()
        try:
            f(x)
            raise AssertionError("ran on a finalized runtime")
        except tf.errors.InternalError as e:
            assert "acl_rt.init()" in str(e), e
        acl_rt.init()
        assert f(x).numpy().tolist() == [0.0, 6.0]
        assert _native.stats()["builds"] == 4, _native.stats()
        print("ok")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")
