"""Apache TVM 0.27.0.post1: Relax `nn.rms_norm` on float64 computes from float32 x and weight.

Case (bnconf shrink, findings/tvm-rms-norm-f64-float32-inputs): x = [[1]], gamma =
[0.8474074746257697], eps 1e-5, float64. Exact y = gamma/sqrt(1 + eps), correctly rounded
0x1.b1ded65034d20p-1 (golden.json); TVM gives float64(float32(gamma))/sqrt(1 + eps).
Root cause: topi.nn.rms_norm (include/tvm/topi/nn/rms_norm.h) casts data and weight to
float32 whatever the input dtype. Needs only apache-tvm and numpy. Exit 1 while it reproduces.
"""
import sys

import numpy as np
import tvm
from tvm import relax

x, g = np.array([[1.0]]), np.array([0.8474074746257697])  # float64
bb = relax.BlockBuilder()
xv = relax.Var("x", relax.TensorType((1, 1), "float64"))
gv = relax.Var("g", relax.TensorType((1,), "float64"))
with bb.function("main", [xv, gv]):
    with bb.dataflow():
        out = bb.emit_output(bb.emit(relax.op.nn.rms_norm(xv, gv, axes=[-1], epsilon=1e-5)))
    bb.emit_func_output(out)
vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
got = float(vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(g)).numpy()[0, 0])
want = float(g[0] / np.sqrt(1 + 1e-5))
narrowed = float(np.float64(np.float32(g[0])) / np.sqrt(1 + 1e-5))
print(f"tvm {tvm.__version__}, llvm CPU, float64; x = [[1]], gamma = [0.8474074746257697], eps 1e-5")
print(f"expected y = {want!r} ({want.hex()}; golden.json, correctly rounded: 0x1.b1ded65034d20p-1)")
print(f"got      y = {got!r} ({got.hex()})")
print(f"float64(float32(gamma))/sqrt(1 + eps) = {narrowed!r} ({narrowed.hex()})")
reproduced = got != want and got == narrowed
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
