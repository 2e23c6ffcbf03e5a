#!/usr/bin/env python3
"""PaddlePaddle's BatchNorm (`paddle.nn.functional.batch_norm`, what `paddle.nn.BatchNorm1D/2D`
call) on the CPU, dygraph mode, speaking the kernel directory protocol.

Usage: python adapters/paddle_bn.py DIR

Layouts map to Paddle's `data_format`: `rows`/`flat` `[C, m]` -> `[1, C, m]` with `NCL`,
`chw` -> `[1, C, H, W]` with `NCHW`, `nchw` as is (`NCHW`), `nhwc` as is (`NHWC`: Paddle's own
channels-last kernel).  Every tensor is in the case dtype; eps and momentum are Python floats.

- forward: `F.batch_norm(x, running_mean, running_var, gamma, beta, training=True,
  momentum=0, epsilon=eps)` gives y.  Paddle blends `running = momentum·running +
  (1 − momentum)·batch` with the biased batch variance, so with momentum 0 the running
  statistics it leaves are exactly its batch mean and (biased) batch variance: `mean`/`var`
  are those (y does not depend on momentum).
- backward: Paddle's autograd through the same training-mode call:
  `paddle.autograd.backward([y], [dy])`, then `x.grad`, `weight.grad`, `bias.grad`.
- eval: `training=False` with running_mean/running_var = the handed-in mean/var;
  sync_forward: the same with var = `m2 - mean*mean` formed in Paddle (glue).
- running_update, convention `onnx`: one training-mode call with `momentum=a` on the handed-in
  running statistics, read back (Paddle's convention is ONNX's: `a·old + (1 − a)·batch`, biased
  variance).  `pytorch`: unsupported.
- sync_backward, sync_stats: unsupported (Paddle's SyncBatchNorm all-reduces inside its
  collective; no entry point takes shard statistics)."""

import os
import sys

# One OpenMP thread (read when Paddle loads), so the reports do not depend on the core count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, main  # noqa: E402

NAME = "paddle_bn"


def t(a, grad=False):
    x = paddle.to_tensor(np.ascontiguousarray(a), place=paddle.CPUPlace())
    x.stop_gradient = not grad
    return x


def view(x, layout):
    """The case array as Paddle wants it, and its data_format."""
    if layout in ("rows", "flat"):
        return x.reshape(1, *x.shape), "NCL"
    if layout == "chw":
        return x.reshape(1, *x.shape), "NCHW"
    if layout == "nchw":
        return x, "NCHW"
    if layout == "nhwc":
        return x, "NHWC"
    raise Unsupported(f"{NAME}: unknown layout {layout}")


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: Paddle's SyncBatchNorm all-reduces inside its collective; no entry point takes shard statistics")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    eps = float(case["eps"])
    x = inp["x"]
    shape = x.shape
    xv, fmt = view(x, layout)
    c = x.shape[{"rows": 0, "flat": 0, "chw": 0, "nchw": 1, "nhwc": 3}[layout]]
    zeros = np.zeros(c, x.dtype)

    if op == "forward":
        rm, rv = t(zeros), t(zeros + 1)
        y = F.batch_norm(t(xv), rm, rv, t(inp["gamma"]), t(inp["beta"]), training=True, momentum=0.0,
                         epsilon=eps, data_format=fmt)
        return {"y": y.numpy().reshape(shape), "mean": rm.numpy(), "var": rv.numpy()}

    if op == "backward":
        xg, g, b = t(xv, True), t(inp["gamma"], True), t(zeros, True)
        y = F.batch_norm(xg, t(zeros), t(zeros + 1), g, b, training=True, momentum=0.0, epsilon=eps, data_format=fmt)
        paddle.autograd.backward([y], [t(view(inp["dy"], layout)[0])])
        return {"dx": xg.grad.numpy().reshape(shape), "dgamma": g.grad.numpy(), "dbeta": b.grad.numpy()}

    if op in ("eval", "sync_forward"):
        mean = t(inp["mean"])
        var = t(inp["var"]) if op == "eval" else t(inp["m2"]) - mean * mean
        y = F.batch_norm(t(xv), mean, var, t(inp["gamma"]), t(inp["beta"]), training=False, epsilon=eps, data_format=fmt)
        return {"y": y.numpy().reshape(shape)}

    # running_update
    if case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: Paddle implements only the onnx convention (a·old + (1 − a)·batch, biased), not {case['convention']}")
    a = float(case["momentum"])
    rm, rv = t(inp["running_mean"]), t(inp["running_var"])
    F.batch_norm(t(xv), rm, rv, None, None, training=True, momentum=a, epsilon=1e-5, data_format=fmt)
    return {"new_mean": rm.numpy(), "new_var": rv.numpy()}


if __name__ == "__main__":
    paddle.set_device("cpu")
    main(run_case, NAME)
