#!/usr/bin/env python3
"""ONNX Runtime's BatchNormalization (opset 15, CPUExecutionProvider), speaking the kernel
directory protocol.

Usage: python adapters/onnxruntime_bn.py DIR

For each case the adapter builds an ONNX model holding a single `BatchNormalization` node
with the case's concrete shapes and runs it with onnxruntime.  Layouts are mapped to ONNX's
[N, C, D1, ...] convention: rows/flat [C, m] -> [1, C, m], chw [C, H, W] -> [1, C, H, W],
nchw as is, nhwc [N, H, W, C] -> transpose to [N, C, H, W] (and back for y).

- eval: training_mode=0 with the handed-in mean and var.
- forward: training_mode=1, momentum=0.  ONNX defines running_mean =
  input_mean*momentum + current_mean*(1-momentum) (same for var), so with momentum=0 the
  running statistics outputs are the batch mean and the biased batch variance, which is what
  ORT returns (checked: ORT's training-mode variance divides by m, not m-1).
- sync_forward: ORT has no such op; the adapter forms var = m2 - mean*mean in the case dtype
  (numpy) and runs eval with it.  The result thus judges that subtraction plus ORT's eval.
- backward, sync_backward: unsupported (ONNX Runtime's inference build has no
  BatchNormalization gradient).
- running_update, convention "onnx": training_mode=1 with momentum=a, running statistics in
  input_mean/input_var; the running_mean/running_var outputs are ONNX's
  input*momentum + batch*(1-momentum) with the biased batch variance, i.e. exactly the onnx
  convention.  `momentum` is a float32 attribute like `epsilon` (float32(a) also for float64
  models).  Convention "pytorch": unsupported (ONNX's running variance is biased; a -> 1-a
  would fix the weights but not the m/(m-1) factor).
- sync_stats and any op this adapter does not know: unsupported (ONNX has no all-reduce).

ONNX stores `epsilon` as a float32 attribute: the case's eps reaches the kernel as
float32(eps) (1e-5 becomes 9.99999974738e-06), for float64 tensors too.  The harness judges
against the exact eps, so any difference this makes is part of the verdict.

Diagnostic mode, ORT_BN_EPS=fold (not how users call ORT): for eval and sync_forward the
adapter passes epsilon=0 and hands in var + eps, added in the case dtype with eps rounded to
that dtype (not to float32), which shows how ORT's kernel does once eps is not truncated.
forward cannot be folded (ORT forms the batch variance itself) and stays as above."""

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, main  # noqa: E402

ONNX_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
_sessions = {}


def session(dt, shape, eps, train, momentum=0.0):
    key = (dt, tuple(shape), float(eps), train, float(momentum))
    if key in _sessions:
        return _sessions[key]
    T = ONNX_T[dt]
    c = shape[1]
    outs = ["Y", "running_mean", "running_var"] if train else ["Y"]
    node = helper.make_node(
        "BatchNormalization",
        ["X", "scale", "B", "input_mean", "input_var"],
        outs,
        epsilon=float(eps),
        momentum=float(momentum),
        training_mode=1 if train else 0,
    )
    graph = helper.make_graph(
        [node],
        "bn",
        [helper.make_tensor_value_info("X", T, list(shape))]
        + [helper.make_tensor_value_info(n, T, [c]) for n in ["scale", "B", "input_mean", "input_var"]],
        [helper.make_tensor_value_info("Y", T, list(shape))]
        + [helper.make_tensor_value_info(n, T, [c]) for n in outs[1:]],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _sessions[key] = s
    return s


def to_nc(layout, x):
    if layout in ("rows", "flat", "chw"):
        return x[np.newaxis]
    if layout in ("nchw", "nc", "ncl", "ncdhw"):
        return x
    if layout == "nhwc":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if layout == "ndhwc":
        return np.ascontiguousarray(x.transpose(0, 4, 1, 2, 3))
    raise Unsupported(f"onnxruntime_bn: layout {layout}")


def from_nc(layout, y):
    if layout in ("rows", "flat", "chw"):
        return y[0]
    if layout in ("nchw", "nc", "ncl", "ncdhw"):
        return y
    if layout == "ndhwc":
        return np.ascontiguousarray(y.transpose(0, 2, 3, 4, 1))
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


FOLD = os.environ.get("ORT_BN_EPS", "") == "fold"


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("backward", "sync_backward"):
        raise Unsupported("onnxruntime: BatchNormalization has no backward (gradient) kernel in ONNX Runtime inference")
    if op not in ("forward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"onnxruntime: no ONNX operator for op {op}")
    x = inp["x"]
    dt = x.dtype.type
    xn = to_nc(layout, x)
    feeds = {"X": xn, "scale": inp.get("gamma"), "B": inp.get("beta")}
    c = xn.shape[1]
    if op == "forward":
        feeds["input_mean"] = np.zeros(c, dt)
        feeds["input_var"] = np.ones(c, dt)
        y, mean, var = session(dt, xn.shape, case["eps"], True).run(None, feeds)
        return {"y": from_nc(layout, y), "mean": mean, "var": var}
    if op == "running_update":
        if case["convention"] != "onnx":
            raise Unsupported(
                f"onnxruntime: running statistics follow the onnx convention (biased variance), not {case['convention']}"
            )
        feeds = {"X": xn, "scale": np.ones(c, dt), "B": np.zeros(c, dt)}
        feeds["input_mean"], feeds["input_var"] = inp["running_mean"], inp["running_var"]
        _, new_mean, new_var = session(dt, xn.shape, case["eps"], True, case["momentum"]).run(None, feeds)
        return {"new_mean": new_mean, "new_var": new_var}
    if op == "eval":
        feeds["input_mean"], feeds["input_var"] = inp["mean"], inp["var"]
    elif op == "sync_forward":
        mean = inp["mean"]
        feeds["input_mean"] = mean
        feeds["input_var"] = inp["m2"] - mean * mean  # in the case dtype, by the adapter
    eps = case["eps"]
    if FOLD:
        feeds["input_var"] = feeds["input_var"] + dt(eps)
        eps = 0.0
    (y,) = session(dt, xn.shape, eps, False).run(None, feeds)
    return {"y": from_nc(layout, y)}


if __name__ == "__main__":
    main(run_case, "onnxruntime_bn")
