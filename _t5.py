import time, numpy as np, tensorflow as tf
import canna_dl.tf as ctf
x = tf.constant(np.random.rand(64,128).astype("float32"))
def bench(f, n=2000):
    f(x); t=time.perf_counter()
    for _ in range(n): f(x)
    return (time.perf_counter()-t)/n*1e6
f1 = tf.function(lambda x: ctf.relu(x)); f0 = tf.function(lambda x: tf.nn.relu(x))
f10 = tf.function(lambda x: ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(ctf.relu(x)))))))))))
f00 = tf.function(lambda x: tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(tf.nn.relu(x)))))))))))
print("1 op canna %.1f tf %.1f us; 10 ops canna %.1f tf %.1f us" % (bench(f1), bench(f0), bench(f10), bench(f00)))
