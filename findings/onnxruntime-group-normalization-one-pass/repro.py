"""ONNX Runtime's GroupNormalization-21 (CPU) normalizes x = [3314, 3313] (one group of two
channels, float32) to y = +-158.1 instead of +-0.99998.

Needs only numpy, onnx and onnxruntime (no bnconf). Prints expected vs got; exits 1 while the
finding reproduces. The cause: ONNX's function body for GroupNormalization-21, which ONNX
Runtime runs, forms the variance one-pass as ReduceMean(X*X) - Mean*Mean in float32
(stash_type 1): mean(x*x) = 10979282.5 and mean(x)**2 = 3313.5**2 = 10979282.25 both round
to 10979282 in float32 (spacing 1 there), so their difference, the variance 0.25, comes out
as 0 (printed below) and y = 0.5/sqrt(eps) = 158.1.
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

x = np.array([[3314.0, 3313.0]], np.float32)  # [N=1, C=2], num_groups=1: one group of 2 cells
eps = 1e-5
node = helper.make_node("GroupNormalization", ["X", "scale", "bias"], ["Y"], epsilon=eps, num_groups=1)
graph = helper.make_graph(
    [node],
    "group_norm",
    [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2]),
    ],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
model.ir_version = 10
onnx.checker.check_model(model)
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
got = sess.run(None, {"X": x, "scale": np.ones(2, np.float32), "bias": np.zeros(2, np.float32)})[0]

# exact: mean 3313.5, var 1/4, y = +-0.5/sqrt(1/4 + eps)
expected = np.array([[0.5, -0.5]]) / np.sqrt(0.25 + float(np.float32(eps)))
one_pass_var = np.mean(x * x, dtype=np.float32) - np.float32(np.mean(x, dtype=np.float32)) ** 2
print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")
print(f"expected y = {expected.ravel().tolist()}")
print(f"got      y = {got.ravel().tolist()}")
print(f"float32 one-pass variance mean(x*x) - mean(x)**2 = {float(one_pass_var)!r} (exact 0.25)")
bad = not np.allclose(got, expected, rtol=1e-5, atol=0)
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
