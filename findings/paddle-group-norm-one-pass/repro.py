"""PaddlePaddle's group_norm (CPU) normalizes x = [3314, 3313] (one group of two channels,
float32) to y = +-158.1 instead of +-0.99998.

Needs only numpy and paddlepaddle (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces. The cause: Paddle's CPU GroupNorm kernel (paddle/phi/kernels/cpu/group_norm_kernel.cc)
sums x and x*x in one pass and forms the variance as E[x*x] - E[x]**2 in the input's type:
E[x*x] = 10979282.5 and E[x]**2 = 3313.5**2 = 10979282.25 both round to 10979282 in float32
(spacing 1 there), so the variance, 0.25, comes out as 0 (printed below) and
y = 0.5/sqrt(eps) = 158.1.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

paddle.set_device("cpu")
x = np.array([[3314.0], [3313.0]], np.float32)[None]  # [N=1, C=2, L=1], NCL, num_groups=1: one group of 2 cells
eps = 1e-5
got = F.group_norm(paddle.to_tensor(x), 1, epsilon=eps, weight=paddle.ones([2]), bias=paddle.zeros([2]),
                   data_format="NCL").numpy()

# exact: mean 3313.5, var 1/4, y = +-0.5/sqrt(1/4 + eps)
expected = np.array([0.5, -0.5]) / np.sqrt(0.25 + eps)
one_pass_var = np.float32(np.sum(x * x, dtype=np.float32) / 2) - np.float32(np.sum(x, dtype=np.float32) / 2) ** 2
print(f"paddlepaddle {paddle.__version__}")
print(f"expected y = {expected.tolist()}")
print(f"got      y = {got.ravel().tolist()}")
print(f"float32 one-pass variance E[x*x] - E[x]**2 = {float(one_pass_var)!r} (exact 0.25)")
bad = not np.allclose(got.ravel(), expected, rtol=1e-5, atol=0)
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
