#!/usr/bin/env python3
"""Keras 3's `keras.layers.BatchNormalization` on one backend, speaking the kernel directory
protocol.

Usage: KERAS_BACKEND=jax|torch|tensorflow|numpy python adapters/keras_bn.py DIR

adapters/_keras.py says how the backend, the precisions (the layer's dtype policy), the arrays
and the autograd are set up.  The layer is `BatchNormalization(axis=<the layout's channel
axis>, epsilon=eps, dtype=<policy>)`, every other argument at its default (momentum 0.99,
center, scale, synchronized=False, renorm=False), built for x's shape; gamma, beta,
moving_mean, moving_variance are assigned from the case.  What it runs (keras 3.15,
`BatchNormalization.call`): x cast to result_type(x, float32); training mode
`ops.moments(x, reduction axes)` — jax: `jnp.mean`, `jnp.var` (two-pass); tensorflow:
`tf.reduce_mean` and the mean of `squared_difference(x, stop_gradient(mean))` (two-pass);
torch and numpy: `mean(x²) − mean(x)²` (one pass) — then `ops.batch_normalization`
(`inv = rsqrt(var + eps)·gamma; y = x·inv + (beta − mean·inv)`), cast to the compute dtype.

- forward: `layer(x, training=True)` gives y.  Keras does not return the batch statistics; it
  assigns `moving = moving·momentum + batch·(1 − momentum)`.  With momentum = 0 (the one
  non-default, only for this op; y does not depend on it) that is exactly the batch mean and
  the biased batch variance it normalized with, read back from moving_mean/moving_variance.
- backward: the backend's autograd (_keras.vjp) of `layer(x, training=True)` with cotangent
  dy, with respect to x, gamma, beta (beta = 0).  NumPy backend: unsupported (no autograd).
- eval: `layer(x, training=False)` with moving_mean/moving_variance = the handed-in mean/var.
- sync_forward: eval with moving_variance = m2 − mean·mean formed by NumPy on the host in the
  statistics' dtype (glue, as tf_keras_bn.py: Keras's synchronized=True all-reduces
  per-replica sums inside a tf.distribute strategy, only on the TensorFlow backend; not
  keras.ops, whose numpy backend would promote float64 to float32; bf16 through ml_dtypes:
  the product rounded to bf16, the difference formed in float32 and rounded to bf16).
- running_update, convention `onnx`: Keras's own update with momentum = a, the moving
  statistics = the handed-in running ones, one `layer(x, training=True)`, read back.  Keras
  blends the biased variance with the old value's weight a: the onnx convention.  `pytorch`:
  unsupported (Keras has no unbiased running variance; a → 1 − a would fix only the weights).
- sync_backward, sync_stats: unsupported (no entry point takes per-shard statistics).
- Mixed precision (f16+f32, bf16+f32: `mixed_float16`/`mixed_bfloat16`): the variables and
  the statistics are float32, x, y, dx the half type."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from _keras import VERSION, _Out, assign, keras, policy, serve, to_keras, to_numpy, vjp  # noqa: E402
from _protocol import AXES, Unsupported  # noqa: E402

NAME = f"{VERSION} BatchNormalization"


def layer_for(case, x, gamma=None, beta=None, mean=None, var=None, **kw):
    cax = AXES[case["layout"]][0]
    layer = keras.layers.BatchNormalization(axis=cax, epsilon=float(case["eps"]), dtype=policy(case), **kw)
    layer.build(tuple(x.shape))
    for v, a in ((layer.gamma, gamma), (layer.beta, beta), (layer.moving_mean, mean), (layer.moving_variance, var)):
        if a is not None:
            assign(v, a)
    return layer


def host_var(case, m2, mean):
    """m2 − mean·mean in the statistics' dtype, formed by NumPy on the host (glue: keras.ops would
    promote float64 to float32 on the numpy backend, keras.backend.result_type's rule); bf16
    through ml_dtypes (each product of two bf16 is exact in float32, then one rounding)."""
    want = case.get("param_dtype", case["dtype"])
    m2, mean = to_numpy(_Out(m2), want), to_numpy(_Out(mean), want)
    if want == "bf16":
        m2, mean = m2.view(ml_dtypes.bfloat16), mean.view(ml_dtypes.bfloat16)
        return (m2.astype(np.float32) - (mean.astype(np.float32) * mean.astype(np.float32)).astype(ml_dtypes.bfloat16)
                .astype(np.float32)).astype(ml_dtypes.bfloat16).view(np.uint16)
    return m2 - mean * mean


def training(layer, x):
    return layer(x, training=True)


def run_case(case, inp):
    op = case["op"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: Keras's synchronized BN all-reduces per-replica sums inside tf.distribute; "
                          "no op takes handed-in shard or gradient statistics")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    x = inp["x"]
    if op == "forward":
        layer = layer_for(case, x, inp["gamma"], inp["beta"], momentum=0.0)
        y = training(layer, x)
        return {"y": y, "mean": layer.moving_mean.value, "var": layer.moving_variance.value}
    if op == "backward":
        layer = layer_for(case, x, inp["gamma"])
        dx, (dg, db) = vjp(layer, x, [layer.gamma, layer.beta], inp["dy"], training)
        return {"dx": dx, "dgamma": dg, "dbeta": db}
    if op == "eval":
        layer = layer_for(case, x, inp["gamma"], inp["beta"], inp["mean"], inp["var"])
        return {"y": layer(x, training=False)}
    if op == "sync_forward":
        mean = inp["mean"]
        var = to_keras(host_var(case, inp["m2"], mean), case.get("param_dtype", case["dtype"]))
        layer = layer_for(case, x, inp["gamma"], inp["beta"], mean, var)
        return {"y": layer(x, training=False)}
    # running_update
    if case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: Keras's moving statistics follow the onnx convention "
                          f"(a·old + (1 − a)·batch, biased variance), not {case['convention']}")
    layer = layer_for(case, x, mean=inp["running_mean"], var=inp["running_var"], momentum=float(case["momentum"]))
    training(layer, x)
    return {"new_mean": layer.moving_mean.value, "new_var": layer.moving_variance.value}


if __name__ == "__main__":
    serve(run_case, NAME)
