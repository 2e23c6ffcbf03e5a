#!/usr/bin/env python3
"""Keras's `BatchNormalization` layer on the TensorFlow backend (`tf.keras`, Keras 3),
speaking the kernel directory protocol.

Usage: python adapters/tf_keras_bn.py DIR     (tensorflow-cpu; eager execution)

The layer is `tf.keras.layers.BatchNormalization(axis=<channel axis>, epsilon=eps,
dtype=<case dtype>)` with every other argument at its default (momentum 0.99, center, scale,
synchronized=False), built for the case shape; gamma, beta, moving_mean and moving_variance
are assigned from the case.  What the layer runs (Keras 3.15, TF backend): training mode
`tf.nn.moments` (two-pass: mean, then mean of squared_difference(x, stop_gradient(mean))),
then `tf.nn.batch_normalization` (`inv = rsqrt(var + eps) * gamma; y = x*inv + (beta -
mean*inv)`), both in the case dtype (Keras computes in result_type(dtype, float32)).

- forward: `layer(x, training=True)` gives y.  Keras does not return the batch statistics;
  it assigns `moving = moving*momentum + batch*(1-momentum)`.  With momentum=0 (the one
  non-default, only for this op; y does not depend on it) that is exactly the batch mean and
  the biased batch variance, read back from moving_mean/moving_variance.
- backward: `tf.GradientTape` around `layer(x, training=True)`, gradient of y with
  output_gradients=dy w.r.t. (x, gamma, beta).
- eval: `layer(x, training=False)` with moving_mean/moving_variance = the handed-in mean/var.
- sync_forward: eval with moving_variance = m2 - mean*mean formed with tf (glue; Keras's
  synchronized=True all-reduces per-replica sums inside a tf.distribute strategy, which needs
  the other replicas' data, not handed-in statistics).
- running_update, convention "onnx": Keras's own update with momentum=a, moving statistics =
  the handed-in running ones, one `layer(x, training=True)`, read back.  Keras blends the
  biased variance: the onnx convention.  "pytorch": unsupported (no unbiased running variance;
  a -> 1-a would fix only the weights).
- sync_backward, sync_stats: unsupported (Keras's synchronized BN all-reduces per-replica sums
  of x and x**2 and counts inside a tf.distribute strategy; it has no entry point taking
  per-shard statistics or all-reduced gradient statistics).
- eps is a Python float attribute, added in the case dtype."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

NAME = "tf_keras_bn"
TFDT = {np.float32: "float32", np.float64: "float64"}


def layer_for(x, cax, eps, gamma=None, beta=None, mean=None, var=None, **kw):
    dt = x.dtype.type
    c = x.shape[cax]
    layer = tf.keras.layers.BatchNormalization(axis=cax, epsilon=eps, dtype=TFDT[dt], **kw)
    layer.build(x.shape)
    layer.gamma.assign(gamma if gamma is not None else np.ones(c, dt))
    layer.beta.assign(beta if beta is not None else np.zeros(c, dt))
    layer.moving_mean.assign(mean if mean is not None else np.zeros(c, dt))
    layer.moving_variance.assign(var if var is not None else np.ones(c, dt))
    return layer


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: Keras's synchronized BN all-reduces per-replica sums inside tf.distribute; no op takes handed-in shard or gradient statistics")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    cax, _ = AXES[layout]
    eps = float(case["eps"])
    x = inp["x"]
    xt = tf.constant(x)
    if op == "forward":
        layer = layer_for(x, cax, eps, inp["gamma"], inp["beta"], momentum=0.0)
        y = layer(xt, training=True)
        return {"y": y.numpy(), "mean": layer.moving_mean.numpy(), "var": layer.moving_variance.numpy()}
    if op == "backward":
        layer = layer_for(x, cax, eps, inp["gamma"])
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt, training=True)
        dx, dgamma, dbeta = tape.gradient(y, [xt, layer.gamma, layer.beta], output_gradients=tf.constant(inp["dy"]))
        return {"dx": dx.numpy(), "dgamma": dgamma.numpy(), "dbeta": dbeta.numpy()}
    if op == "eval":
        layer = layer_for(x, cax, eps, inp["gamma"], inp["beta"], inp["mean"], inp["var"])
        return {"y": layer(xt, training=False).numpy()}
    if op == "sync_forward":
        mean = tf.constant(inp["mean"])
        var = (tf.constant(inp["m2"]) - mean * mean).numpy()
        layer = layer_for(x, cax, eps, inp["gamma"], inp["beta"], inp["mean"], var)
        return {"y": layer(xt, training=False).numpy()}
    # running_update
    if case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: Keras's moving statistics follow the onnx convention (biased variance), not {case['convention']}")
    layer = layer_for(x, cax, eps, mean=inp["running_mean"], var=inp["running_var"], momentum=float(case["momentum"]))
    layer(xt, training=True)
    return {"new_mean": layer.moving_mean.numpy(), "new_var": layer.moving_variance.numpy()}


if __name__ == "__main__":
    main(run_case, NAME)
