#!/usr/bin/env python3
"""TensorFlow: tf.compat.v1.nn.fused_batch_norm (FusedBatchNormV3, CPU) returns the variance
of x = [2, -2] as 8: the batch variance times m/(m-1), not the variance it normalised with.

Needs only tensorflow (tested: tensorflow-cpu 2.21.0).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x has shape [1, 2, 1, 1] (NHWC: one channel, two cells), float32, scale = 1, offset = 0,
epsilon = 1e-5, is_training = True (exponential_avg_factor = 1, the default).
Exact: mean = 0, variance = ((2-0)^2 + (-2-0)^2)/2 = 4, y = ±2/sqrt(4 + 1e-5) =
±0.99999875...; correctly rounded to float32: var 0x1.000000p+2, y ±0x1.ffffd6p-1
(bnconf golden findings/tensorflow-fused-batch-norm-bessel-variance/case.json).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

x = tf.constant(np.array([2.0, -2.0], np.float32).reshape(1, 2, 1, 1))
scale, offset = tf.ones([1], tf.float32), tf.zeros([1], tf.float32)
y, mean, var = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=1e-5, is_training=True)
raw = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=tf.zeros([0]),
                                  variance=tf.zeros([0]), epsilon=1e-5, is_training=True)
got_var = float(var.numpy()[0])
print(f"tensorflow {tf.__version__}")
print(f"expected: mean 0.0, variance 4.0 (0x1.000000p+2), y = ±{float.fromhex('0x1.ffffd6p-1')!r}")
print(f"got:      mean {float(mean.numpy()[0])!r}, variance {got_var!r}, "
      f"y = {[float(v) for v in y.numpy().ravel()]}")
print(f"variance / expected = {got_var / 4.0!r} = m/(m-1) with m = 2")
print(f"FusedBatchNormV3 outputs: batch_variance {float(raw.batch_variance.numpy()[0])!r}, "
      f"reserve_space_2 {float(raw.reserve_space_2.numpy()[0])!r} (the variance y was normalised with)")
reproduced = got_var != 4.0
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
