#!/usr/bin/env python3
"""TensorFlow's fused batch norm (`tf.compat.v1.nn.fused_batch_norm`, op FusedBatchNormV3,
CPU kernel), speaking the kernel directory protocol.

Usage: python adapters/tf_fused_bn.py DIR     (tensorflow-cpu; eager execution)
       TF_FUSED_VAR=reserve python adapters/tf_fused_bn.py DIR   (diagnostic, see below)

fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon, data_format,
is_training, exponential_avg_factor) takes a 4-D (or 5-D) x in NHWC or NCHW.  Its CPU kernel
registers x only as float32, half or bfloat16 (scale/offset/statistics float32), so every
f64 case is unsupported (the op refuses T=double).  `epsilon` and `exponential_avg_factor`
are float32 attributes.  This TensorFlow (2.21) no longer raises epsilon to 1.001e-5 in the
Python wrapper (older versions did); eps reaches the kernel as float32(eps).

Layouts: nhwc as NHWC, nchw as NCHW; rows/flat [C, m] reshaped (no copy) to NCHW [1, C, m, 1]
and chw [C, H, W] to NCHW [1, C, H, W] (glue: the op has no batch-free layout).

- forward: `is_training=True` (mean/variance None, exponential_avg_factor 1).  The op returns
  (y, batch_mean, batch_variance); TensorFlow documents the third output as the variance "to
  be used to compute the running variance", and the CPU kernel returns it Bessel-corrected
  (times m/(m-1), m > 1).  The adapter reports it as `var`, as users get it, so `var` is
  judged against the biased variance of FORMAT.md and fails by design; `y` and `mean` are
  judged on their own (per-output ratios in the report).
  TF_FUSED_VAR=reserve (diagnostic, not how users call the op): `var` is read from
  tf.raw_ops.FusedBatchNormV3's reserve_space_2, which on CPU holds the biased batch
  variance the kernel normalized with.
- backward: `tf.GradientTape` around the training-mode op (FusedBatchNormGradV3), gradient
  of y with output_gradients=dy w.r.t. (x, scale, offset).
- eval: `is_training=False` with the handed-in mean and variance.
- sync_forward: eval with variance = m2 - mean*mean formed with tf (glue).
- running_update, convention "pytorch": `is_training=True, exponential_avg_factor=a`, mean and
  variance = the running statistics; the op returns (1-a)*old + a*batch with the batch
  variance times m/max(m-1, 1): exactly the pytorch convention.  "onnx": unsupported (the
  blended variance is always Bessel-corrected; a -> 1-a would fix only the weights).
- sync_backward, sync_stats: unsupported (no such op in TensorFlow)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

RESERVE = os.environ.get("TF_FUSED_VAR", "") == "reserve"
NAME = "tf_fused_bn" + ("_reserve" if RESERVE else "")
fused = tf.compat.v1.nn.fused_batch_norm


def to4(layout, x):
    """(4-D view, data_format)."""
    if layout in ("rows", "flat"):
        return x.reshape(1, x.shape[0], x.shape[1], 1), "NCHW"
    if layout == "chw":
        return x.reshape((1,) + x.shape), "NCHW"
    if layout == "nchw":
        return x, "NCHW"
    if layout == "nhwc":
        return x, "NHWC"
    raise Unsupported(f"{NAME}: layout {layout}")


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: TensorFlow has no fused op for {op}")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    x = inp["x"]
    if x.dtype != np.float32:
        raise Unsupported(f"{NAME}: FusedBatchNormV3 takes x as float32, half or bfloat16 only (not {x.dtype})")
    if op == "running_update" and case["convention"] != "pytorch":
        raise Unsupported(f"{NAME}: the fused running variance is Bessel-corrected (pytorch convention), not {case['convention']}")
    x4, fmt = to4(layout, x)
    eps = float(case["eps"])
    c = x.shape[AXES[layout][0]]
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    if op == "forward":
        if RESERVE:
            r = tf.raw_ops.FusedBatchNormV3(
                x=x4, scale=inp["gamma"], offset=inp["beta"], mean=tf.constant([], tf.float32),
                variance=tf.constant([], tf.float32), epsilon=eps, data_format=fmt, is_training=True)
            y, mean, var = r.y, r.batch_mean, r.reserve_space_2
        else:
            y, mean, var = fused(x4, inp["gamma"], inp["beta"], epsilon=eps, data_format=fmt, is_training=True)
        return {"y": y.numpy().reshape(x.shape), "mean": mean.numpy(), "var": var.numpy()}
    if op == "backward":
        xt, g, b = tf.constant(x4), tf.constant(inp["gamma"]), tf.constant(zeros)
        with tf.GradientTape() as tape:
            tape.watch([xt, g, b])
            y, _, _ = fused(xt, g, b, epsilon=eps, data_format=fmt, is_training=True)
        dy4, _ = to4(layout, inp["dy"])
        dx, dg, db = tape.gradient(y, [xt, g, b], output_gradients=tf.constant(dy4))
        return {"dx": dx.numpy().reshape(x.shape), "dgamma": dg.numpy(), "dbeta": db.numpy()}
    if op in ("eval", "sync_forward"):
        mean = inp["mean"]
        if op == "eval":
            var = inp["var"]
        else:
            m = tf.constant(mean)
            var = (tf.constant(inp["m2"]) - m * m).numpy()
        y, _, _ = fused(x4, inp["gamma"], inp["beta"], mean=mean, variance=var, epsilon=eps, data_format=fmt, is_training=False)
        return {"y": y.numpy().reshape(x.shape)}
    # running_update, pytorch convention
    _, new_mean, new_var = fused(
        x4, ones, zeros, mean=inp["running_mean"], variance=inp["running_var"], epsilon=eps,
        data_format=fmt, is_training=True, exponential_avg_factor=float(case["momentum"]))
    return {"new_mean": new_mean.numpy(), "new_var": new_var.numpy()}


if __name__ == "__main__":
    main(run_case, NAME)
