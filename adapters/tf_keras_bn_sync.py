#!/usr/bin/env python3
"""Keras 3's synchronized BatchNormalization on TensorFlow
(`keras.layers.BatchNormalization(synchronized=True)`) under `tf.distribute.MirroredStrategy`
with R logical CPU devices, speaking the replicated kernel directory protocol (docs/FORMAT.md,
"Replicated suites"; plumbing in adapters/_replicated.py).

Usage: python adapters/tf_keras_bn_sync.py DIR      (tensorflow-cpu; one process per R)

The launcher starts one child process per distinct R (TF_KERAS_SYNC_R=R), which splits the
physical CPU into R logical devices (`tf.config.set_logical_device_configuration`) before
TensorFlow starts and runs the cases with R ranks under
`MirroredStrategy(["/cpu:0", ..., "/cpu:R-1"])`, replica r on /cpu:r.  (A second
MirroredStrategy in one process fails: its first collective raises "CancelledError: Function
was cancelled before it was started".)  Rank r's shard is handed to replica r by
`strategy.experimental_distribute_values_from_function` (so shards of unequal size, and an
empty one, are what each replica really sees).  The layer is
`keras.layers.BatchNormalization(axis=<channel axis>, epsilon=eps, dtype=<case dtype>,
synchronized=True)`, every other argument at its default, built and assigned under the
strategy's scope; each step is `strategy.run` of a `tf.function`.

- forward: `layer(x_r, training=True)` in every replica with momentum=0: y_r, and the moving
  statistics become exactly the all-reduced batch mean and variance Keras normalised with
  (`moving*0 + batch*1`); each replica's copy (`strategy.experimental_local_results`) is
  written as that rank's mean/var.
- backward: `tf.GradientTape` in each replica around `layer(x_r, training=True)`,
  `tape.gradient(y_r, [x_r, gamma, beta], output_gradients=dy_r)`: the gradient of the
  replica's Σ y·dy; the sync moments' all-reduces are differentiable (their gradient is the
  all-reduce of the upstream gradients), so dx_r is the whole batch's VJP restricted to the
  shard.  dgamma_local/dbeta_local are the replica's own gradients; dgamma/dbeta are
  `replica_context.all_reduce(SUM, ...)` of those, what a Keras optimizer under
  MirroredStrategy applies.
- running_update, convention "onnx": momentum=a, moving statistics = the handed-in running
  ones, one training step, each replica's moving statistics read back.  "pytorch": unsupported
  (Keras blends the biased variance; a -> 1-a fixes only the weights)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The launcher (no TF_KERAS_SYNC_R) runs one child process per distinct R with
# TF_KERAS_SYNC_R=R: that child splits the CPU into R logical devices and handles the cases
# with R ranks.  (One process with one MirroredStrategy per R fails: the first collective
# under the second strategy raises "CancelledError: Function was cancelled before it was
# started".)
ONLY_R = int(os.environ["TF_KERAS_SYNC_R"]) if os.environ.get("TF_KERAS_SYNC_R") else None
MAX_R = ONLY_R or 8
if ONLY_R:
    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * MAX_R)

import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _replicated import CHANNEL_AXIS, Unsupported, main_inprocess  # noqa: E402

NAME = "tf_keras_bn_sync"
TFDT = {np.float32: "float32", np.float64: "float64"}
_STRATEGIES = {}


def strategy_for(R):
    if R not in _STRATEGIES:
        _STRATEGIES[R] = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(R)])
    return _STRATEGIES[R]


def local(strategy, v):
    return [np.asarray(t) for t in strategy.experimental_local_results(v)]


def run_case(case, ranks):
    op, layout = case["op"], case["layout"]
    R = int(case["ranks"])
    if R > MAX_R:
        raise Unsupported(f"{NAME}: {R} ranks, {MAX_R} logical devices")
    if op == "running_update" and case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: Keras's moving statistics follow the onnx convention (biased variance), not {case['convention']}")
    cax = CHANNEL_AXIS[layout]
    eps = float(case["eps"])
    dt = ranks[0]["x"].dtype.type
    c = case["shape"][cax]
    strategy = strategy_for(R)

    def dist(name):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(ranks[ctx.replica_id_in_sync_group][name]))

    r0 = ranks[0]
    momentum = 0.0 if op == "forward" else float(case["momentum"]) if op == "running_update" else 0.99
    key = (R, op, cax, eps, momentum, TFDT[dt], tuple(case["shape"][1:]))
    if key not in _STEPS:
        _STEPS[key] = make_step(strategy, op, cax, eps, momentum, TFDT[dt], case["shape"][1:])
    layer, step = _STEPS[key]
    with strategy.scope():
        layer.gamma.assign(r0["gamma"] if "gamma" in r0 else np.ones(c, dt))
        layer.beta.assign(r0["beta"] if "beta" in r0 else np.zeros(c, dt))
        layer.moving_mean.assign(r0["running_mean"] if "running_mean" in r0 else np.zeros(c, dt))
        layer.moving_variance.assign(r0["running_var"] if "running_var" in r0 else np.ones(c, dt))

    if op in ("forward", "running_update"):
        ys = local(strategy, step(dist("x")))
        means, vars_ = local(strategy, layer.moving_mean.value), local(strategy, layer.moving_variance.value)
        if len(means) != R or len(ys) != R:
            raise RuntimeError(f"{len(means)} local copies of moving_mean, {len(ys)} of y, for {R} replicas")
        if op == "forward":
            return [{"y": ys[r], "mean": means[r], "var": vars_[r]} for r in range(R)]
        return [{"new_mean": means[r], "new_var": vars_[r]} for r in range(R)]
    res = [local(strategy, t) for t in step(dist("x"), dist("dy"))]
    names = ["dx", "dgamma", "dbeta", "dgamma_local", "dbeta_local"]
    return [{n: res[i][r] for i, n in enumerate(names)} for r in range(R)]


_STEPS = {}


def make_step(strategy, op, cax, eps, momentum, dtype, tail):
    """A layer built under the strategy and its tf.function step, kept per shape and
    attributes (the variables are assigned per case)."""
    with strategy.scope():
        layer = keras.layers.BatchNormalization(axis=cax, epsilon=eps, momentum=momentum, dtype=dtype, synchronized=True)
        layer.build([None] + list(tail))
    if op in ("forward", "running_update"):
        @tf.function
        def step(x):
            return strategy.run(lambda xr: layer(xr, training=True), args=(x,))
        return layer, step

    @tf.function
    def grad_step(x, dy):
        def fn(xr, dyr):
            with tf.GradientTape() as tape:
                tape.watch(xr)
                y = layer(xr, training=True)
            dx, dg, db = tape.gradient(y, [xr, layer.gamma, layer.beta], output_gradients=dyr)
            ctx = tf.distribute.get_replica_context()
            dg_all, db_all = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [dg, db])
            return dx, dg_all, db_all, dg, db

        return strategy.run(fn, args=(x, dy))
    return layer, grad_step


def launcher():
    import subprocess
    from _replicated import cases_by_ranks, report_error, read_case, root_arg
    root = root_arg()
    by, bad = cases_by_ranks(root)
    for d in bad:
        try:
            read_case(d)
        except Exception:
            report_error(NAME, d)
    rc = 0
    for R in sorted(by):
        env = dict(os.environ, TF_KERAS_SYNC_R=str(R))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), root], env=env).returncode
        if r:
            print(f"{NAME}: the R={R} process exited {r}; its cases may lack outputs", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    if ONLY_R is None:
        sys.exit(launcher())
    main_inprocess(run_case, NAME, ranks_only=ONLY_R)
