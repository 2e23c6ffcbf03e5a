#!/usr/bin/env python3
"""Keras: BatchNormalization(synchronized=True) under tf.distribute.MirroredStrategy computes
the variance in one pass, E[x^2] - E[x]^2 over the all-reduced sums, so a large mean loses
the variance: x = [312.1875 | 315] (one value on each of 2 replicas) gives var 1.9765625
instead of 2025/1024 = 1.9775390625, and x = [3354 | 3355] gives var 0 instead of 0.25
(y = +-158 instead of +-1). The same layer with synchronized=False on one device (two-pass
moments) is right.

Needs only tensorflow (with its keras 3; tested: tensorflow-cpu 2.21.0, keras 3.15.1, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

The batch is x of shape [2, 1, 1, 1] (NHWC, BatchNormalization(axis=3): one channel, one
value per row), float32, split across 2 replicas (logical CPU devices) as 1 + 1 rows; each
replica gets its own row through experimental_distribute_values_from_function. gamma = 1,
beta = 0, epsilon = 1e-5, training=True, momentum = 0 so that the moving statistics after
one step hold exactly the (all-reduced) batch mean and variance Keras normalised with.
Exact (the whole batch): mean = 10035/32 = 313.59375, var = 2025/1024; correctly rounded to
float32: var 0x1.fa4000p+0, y = [-0x1.ffffacp-1, 0x1.ffffacp-1]
(bnconf golden findings/keras-sync-batchnorm-one-pass-variance/case.json).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras  # noqa: E402

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    sync = keras.layers.BatchNormalization(axis=3, epsilon=1e-5, momentum=0.0, synchronized=True)
    sync.build([None, 1, 1, 1])


@tf.function
def step(x):
    return strategy.run(lambda xr: sync(xr, training=True), args=(x,))


def synced(values):
    """values[r]: the one value of replica r; returns (var per replica, y per replica)."""
    x = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(np.float32(values[ctx.replica_id_in_sync_group]).reshape(1, 1, 1, 1)))
    y = [float(np.asarray(t).ravel()[0]) for t in strategy.experimental_local_results(step(x))]
    var = [float(np.asarray(v).ravel()[0]) for v in strategy.experimental_local_results(sync.moving_variance.value)]
    return var, y


def single_device(values):
    bn = keras.layers.BatchNormalization(axis=3, epsilon=1e-5, momentum=0.0)
    x = tf.constant(np.array(values, np.float32).reshape(len(values), 1, 1, 1))
    y = bn(x, training=True)
    return float(np.asarray(bn.moving_variance.value)[0]), [float(v) for v in np.asarray(y).ravel()]


print(f"tensorflow {tf.__version__}, keras {keras.__version__}, "
      f"{strategy.num_replicas_in_sync} replicas on {[d.name for d in tf.config.list_logical_devices('CPU')]}")
h = float.fromhex
X = [312.1875, 315.0]
print(f"x = [{X[0]}] on replica 0, [{X[1]}] on replica 1")
print(f"expected var = {h('0x1.fa4000p+0')!r} (2025/1024), y = {[h('-0x1.ffffacp-1'), h('0x1.ffffacp-1')]}")
var, y = synced(X)
print(f"got      var = {var} (per replica), y = {y}   (synchronized=True)")
var1, y1 = single_device(X)
print(f"synchronized=False, the whole batch on one device: var = {var1!r}, y = {y1}")
X2 = [3354.0, 3355.0]
var2, y2 = synced(X2)
print(f"x = [{X2[0]}] | [{X2[1]}] (exact var 0.25, y = +-0.99998): got var = {var2}, y = {y2}")
reproduced = any(v != h("0x1.fa4000p+0") for v in var)
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
