#!/usr/bin/env python3
"""ONNX Runtime: a float64 BatchNormalization computes with float32(epsilon).

Needs only numpy, onnx and onnxruntime (tested: numpy 2.4.6, onnx 1.23.2, onnxruntime 1.32.0).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

One channel, one value: x = -1, scale = 1, B = 0, input_mean = 0, input_var = 1,
epsilon = 1e-5, inference mode (training_mode = 0), every tensor float64.
Exact result: y = -1/sqrt(1 + 1e-5) = -0.99999500003749968...; correctly rounded to float64
it is -0x1.ffff583aa62f5p-1 (bnconf golden findings/onnxruntime-f32-epsilon/case.json).
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

EXPECTED = float.fromhex("-0x1.ffff583aa62f5p-1")  # exact value, correctly rounded to f64
EPS = 1e-5

node = helper.make_node(
    "BatchNormalization", ["X", "scale", "B", "input_mean", "input_var"], ["Y"],
    epsilon=EPS, training_mode=0)
vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.DOUBLE, s)  # noqa: E731
graph = helper.make_graph(
    [node], "bn", [vi("X", [1, 1]), vi("scale", [1]), vi("B", [1]), vi("input_mean", [1]),
                   vi("input_var", [1])], [vi("Y", [1, 1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
model.ir_version = 8
onnx.checker.check_model(model)
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
got = sess.run(None, {"X": np.array([[-1.0]]), "scale": one(1.0), "B": one(0.0),
                      "input_mean": one(0.0), "input_var": one(1.0)})[0].item()

attr = node.attribute[0]
eps32 = float(np.float32(EPS))
with_eps32 = float(-1.0 / np.sqrt(1.0 + eps32))
ulp = np.spacing(abs(EXPECTED))
print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
print(f"expected y = {EXPECTED!r} ({EXPECTED.hex()})")
print(f"got      y = {got!r} ({got.hex()})")
print(f"error: {abs(got - EXPECTED) / ulp:.0f} ulp (relative {abs(got - EXPECTED) / abs(EXPECTED):.2e})")
print(f"epsilon attribute type in the model: {onnx.AttributeProto.AttributeType.Name(attr.type)}, "
      f"stored value {attr.f!r} = float32(1e-5); relative change {(eps32 - EPS) / EPS:+.2e}")
print(f"-1/sqrt(1 + float32(1e-5)) in float64 = {with_eps32!r}: "
      f"{'equal to' if with_eps32 == got else 'differs from'} ORT's output")
reproduced = got != EXPECTED and abs(got - EXPECTED) > 4 * ulp
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
