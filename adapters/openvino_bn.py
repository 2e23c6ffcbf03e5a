#!/usr/bin/env python3
"""OpenVINO's BatchNormInference (eval) and MVN (a training-mode forward written as the graph
OpenVINO's frontends make of it), compiled for OpenVINO's CPU plugin, speaking the kernel
directory protocol.

Usage: python adapters/openvino_bn.py DIR
       OPENVINO_BN_PRECISION=f32 ...   compile with INFERENCE_PRECISION_HINT=f32 (default: the
                                       plugin's own default, which is bf16 on CPUs with bf16
                                       instructions, e.g. this machine's avx512_bf16)

One `ov.Model` per case built with `openvino.opset16`, every Parameter in the case dtype,
compiled with `ov.Core().compile_model(model, "CPU", config)` and run on the case's arrays.
Layouts: BatchNormInference takes the channel on axis 1, so `rows`/`flat` `[C, m]` ->
`[1, C, m]`, `chw` -> `[1, C, H, W]`, `nchw` as is, `nhwc` transposed to NCHW with numpy and
back (exact moves); MVN takes any axes, so forward runs on the case's own layout.

- eval: `BatchNormInference(x, gamma, beta, mean, var, epsilon=eps)` (epsilon is a double
  attribute).
- sync_forward: the same with `var = Subtract(m2, Multiply(mean, mean))` inside the graph
  (glue, in OpenVINO's arithmetic).
- forward: `y = MVN(x, axes=<reduced axes>, normalize_variance=True, eps, eps_mode=inside_sqrt)
  * gamma + beta` (gamma/beta reshaped to broadcast along the channel axis), the pattern
  OpenVINO's frontends fuse a training-mode batch/instance norm into; MVN returns only the
  normalized tensor, so `mean = ReduceMean(x, axes)` and `var = ReduceMean(Squared-
  Difference(x, mean))` (two-pass) are built in the same graph: the `var` output judges
  OpenVINO's reductions, y judges MVN.  MVN's `eps` is a float32 attribute.
- backward, running_update, sync_backward, sync_stats: unsupported (OpenVINO is an inference
  runtime: no autograd, no training-mode batch norm, no running statistics, no collectives).

f64: the CPU plugin has no f64 kernels; a f64 model compiles and returns f64 arrays, but the
plugin converts it to f32 inside (documented), so f64 cases are judged on what users get."""

import os
import sys

import numpy as np
import openvino as ov
import openvino.opset16 as ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

NAME = "openvino_bn"
PRECISION = os.environ.get("OPENVINO_BN_PRECISION", "")
ETYPE = {np.dtype(np.float32): ov.Type.f32, np.dtype(np.float64): ov.Type.f64}
CORE = ov.Core()
CONFIG = {"INFERENCE_PRECISION_HINT": PRECISION} if PRECISION else {}


def to_nc(x, layout):
    if layout in ("rows", "flat", "chw"):
        return x.reshape(1, *x.shape)
    if layout == "nchw":
        return x
    if layout == "nhwc":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    raise Unsupported(f"{NAME}: unknown layout {layout}")


def from_nc(y, layout, shape):
    if layout == "nhwc":
        y = y.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(y).reshape(shape)


def run(nodes_fn, arrays):
    """Build a model over Parameters shaped like `arrays`, compile it for the CPU, run it."""
    params = [ops.parameter(list(a.shape), ETYPE[a.dtype]) for a in arrays]
    outs = nodes_fn(*params)
    model = ov.Model(outs, params)
    compiled = CORE.compile_model(model, "CPU", CONFIG)
    res = compiled(list(arrays))
    return [res[i] for i in range(len(outs))]


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("backward", "running_update", "sync_backward", "sync_stats"):
        raise Unsupported(
            f"{NAME}: OpenVINO is an inference runtime: no autograd, no training-mode batch norm "
            "with running statistics, no collectives"
        )
    if op not in ("forward", "eval", "sync_forward"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    eps = float(case["eps"])
    x = inp["x"]
    shape = x.shape

    if op in ("eval", "sync_forward"):
        xn = to_nc(x, layout)
        if op == "eval":
            args = [xn, inp["gamma"], inp["beta"], inp["mean"], inp["var"]]

            def graph(x, g, b, m, v):
                return [ops.batch_norm_inference(x, g, b, m, v, eps)]
        else:
            args = [xn, inp["gamma"], inp["beta"], inp["mean"], inp["m2"]]

            def graph(x, g, b, m, m2):
                v = ops.subtract(m2, ops.multiply(m, m))
                return [ops.batch_norm_inference(x, g, b, m, v, eps)]
        (y,) = run(graph, args)
        return {"y": from_nc(y, layout, shape)}

    # forward: MVN over the reduced axes of the case's own layout, then the affine part
    ch, red = AXES[layout]
    bshape = [1] * x.ndim
    bshape[ch] = x.shape[ch]
    axes = ops.constant(np.array(red, dtype=np.int64))
    bs = ops.constant(np.array(bshape, dtype=np.int64))

    def graph(x, g, b):
        n = ops.mvn(x, axes, True, eps, "inside_sqrt")
        y = ops.add(ops.multiply(n, ops.reshape(g, bs, False)), ops.reshape(b, bs, False))
        mean_k = ops.reduce_mean(x, axes, True)
        mean = ops.reduce_mean(x, axes, False)
        var = ops.reduce_mean(ops.squared_difference(x, mean_k), axes, False)
        return [y, mean, var]

    y, mean, var = run(graph, [x, inp["gamma"], inp["beta"]])
    return {"y": y.reshape(shape), "mean": mean, "var": var}


if __name__ == "__main__":
    # One inference thread, so the reports do not depend on the machine's core count.
    CONFIG["INFERENCE_NUM_THREADS"] = 1
    main(run_case, NAME)
