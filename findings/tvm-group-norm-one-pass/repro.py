"""Apache TVM's Relax group_norm, built for the CPU (target llvm), normalizes x = [3314, 3313]
(one group of two channels, float32) to y = +-158.1 instead of +-0.99998.

Needs only numpy and apache-tvm (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces. The cause: relax.nn.group_norm is legalized to topi.nn.group_norm
(include/tvm/topi/nn/group_norm.h), which sums x and x*x in one tuple reduction
(MakeTupleSumReducer) and forms var = temp_x2/n - mean*mean in float32 (float16 input is cast
to float32; float32 stays float32): E[x*x] = 10979282.5 and E[x]**2 = 3313.5**2 = 10979282.25
both round to 10979282 in float32 (spacing 1 there), so the variance, 0.25, comes out as 0
(printed below) and y = 0.5/sqrt(eps) = 158.1.
"""

import os
import sys

os.environ.setdefault("TVM_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

x = np.array([[3314.0, 3313.0]], np.float32)  # [N=1, C=2], num_groups=1: one group of 2 cells
gamma, beta = np.ones(2, np.float32), np.zeros(2, np.float32)
eps = 1e-5

bb = relax.BlockBuilder()
xv, gv, bv = (relax.Var(n, relax.TensorType(a.shape, "float32")) for n, a in (("x", x), ("g", gamma), ("b", beta)))
with bb.function("main", [xv, gv, bv]):
    with bb.dataflow():
        y = bb.emit(relax.op.nn.group_norm(xv, gv, bv, num_groups=1, channel_axis=1, axes=[], epsilon=eps))
        out = bb.emit_output(y)
    bb.emit_func_output(out)
vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
got = vm["main"](*[tvm.runtime.tensor(a) for a in (x, gamma, beta)]).numpy()

# exact: mean 3313.5, var 1/4, y = +-0.5/sqrt(1/4 + eps)
expected = np.array([0.5, -0.5]) / np.sqrt(0.25 + eps)
one_pass_var = np.float32(np.sum(x * x, dtype=np.float32) / 2) - np.float32(np.sum(x, dtype=np.float32) / 2) ** 2
print(f"apache-tvm {tvm.__version__}")
print(f"expected y = {expected.tolist()}")
print(f"got      y = {got.ravel().tolist()}")
print(f"float32 one-pass variance E[x*x] - E[x]**2 = {float(one_pass_var)!r} (exact 0.25)")
bad = not np.allclose(got.ravel(), expected, rtol=1e-5, atol=0)
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
