import time, numpy as np, tensorflow as tf, keras
import canna_dl.tf as ctf
from canna_dl.tf import _native
x = np.random.rand(64, 64).astype("float32"); y = np.random.randint(0, 10, 64)
def mk(L):
    m = keras.Sequential([keras.Input((64,)), L.Dense(128, activation="relu"), L.Dense(10)])
    m.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True)); return m
mc, mn = mk(ctf.keras), mk(keras.layers)
for m in (mc, mn): m.train_on_batch(x, y)
ctf.reset_op_stats(); s0 = _native.stats()
mc.train_on_batch(x, y)
print(ctf.op_stats(), _native.stats(), s0)
for m in (mc, mn):
    t = time.perf_counter()
    for _ in range(200): m.train_on_batch(x, y)
    print((time.perf_counter()-t)/200*1e3, "ms")
