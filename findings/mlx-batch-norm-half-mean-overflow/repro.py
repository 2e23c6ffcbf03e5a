"""MLX's nn.BatchNorm (CPU, training mode) on float16 sets running_mean and running_var to inf for
one channel of 22 values between 3000 and 3008; the exact new running mean is 6609/22 = 300.4.

Needs only numpy and mlx (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces.  The cause is mx.mean (mlx/ops.cpp, `mean`): it returns
`multiply(sum(a, axes), normalizer)` with the sum in a's dtype, so a float16 sum above 65504
is inf although the mean, ~3004, is a float16 number; mx.var subtracts that mean.
BatchNorm.__call__ (mlx/nn/layers/normalization.py) takes both from `_calc_stats` in x's dtype
and blends them, `(1 - mu) * running + mu * batch`, with `mu * batch` formed in x's dtype
(a Python float times a float16 array is float16).  The same sum in bfloat16 does not overflow
but is rounded to bfloat16 before the division: the mean of a constant bfloat16 array is
not the constant and its variance is not 0 (second part below).
"""

import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np

mx.set_default_device(mx.cpu)

# the shrunk case: one channel, 22 cells (layout [m, C] for MLX), momentum 0.1, running 0 and 1
x = np.array([3004, 3006, 3008, 3000, 3002] * 4 + [3004, 3006], np.float16).reshape(-1, 1)
bn = nn.BatchNorm(1, eps=1e-5, momentum=0.1)
bn.running_mean = mx.zeros((1,), dtype=mx.float16)
bn.running_var = mx.ones((1,), dtype=mx.float16)
bn(mx.array(x))
x64 = x.astype(np.float64).ravel()
exp_mean = float(0.9 * 0 + 0.1 * x64.mean())
exp_var = float(0.9 * 1 + 0.1 * x64.var(ddof=1))
print(f"mlx {mx.__version__}")
print(f"float16 x: {x.size} values in [{x64.min():g}, {x64.max():g}], sum {x64.sum():g} (float16 max 65504)")
print(f"expected running_mean = {exp_mean!r}, running_var = {exp_var!r}")
print(f"got      running_mean = {np.array(bn.running_mean).item()!r}, running_var = {np.array(bn.running_var).item()!r}")
xm = mx.array(x.ravel())
print(f"mx.mean(x) = {mx.mean(xm).item()} (exact {float(x64.mean())!r}), mx.sum(x) = {mx.sum(xm).item()}")
bad = not np.isfinite(np.array(bn.running_mean)).all()

# bfloat16: the mean of 24 copies of 1.703125 (a bfloat16 number)
c = mx.array(np.full(24, 1.703125, np.float32)).astype(mx.bfloat16)
m, v = mx.mean(c).item(), mx.var(c, ddof=1).item()
print(f"bfloat16 x = [1.703125] * 24: mx.mean = {m!r} (exact 1.703125), mx.var(ddof=1) = {v!r} (exact 0)")
bad |= m != 1.703125
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
