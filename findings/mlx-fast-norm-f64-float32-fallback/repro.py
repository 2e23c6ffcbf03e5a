"""MLX's mx.fast.layer_norm and mx.fast.rms_norm on a float64 array (CPU) return a float64 array
computed in float32: layer_norm of x = [1, 0] gives y = +-0.9999799728393555 (float32's value,
widened) where the float64 result is +-0.9999800005999799, 2.5e8 float64 ulp away.

Needs only numpy and mlx (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces. The cause (MLX 0.32, mlx/fast.cpp): on the CPU `LayerNorm::use_fallback` /
`RMSNorm::use_fallback` are true (mlx/backend/no_gpu/primitives.cpp; the CPU has no fast
kernel), so `layer_norm` / `rms_norm` return their `fallback` lambda, which begins
`auto x = astype(inputs[0], float32, s);`, adds `array(eps, float32)` and casts the result back
to the output type (`astype(x, out_type, s)`) before applying weight and bias.  The gradient
(mx.vjp of the same composed ops) goes through the same float32 cast.
"""

import sys

import mlx.core as mx
import numpy as np

mx.set_default_device(mx.cpu)
eps = 1e-5


def f64(a):
    return mx.array(np.asarray(a, np.float64), dtype=mx.float64)


# the shrunk case: layer_norm over the last axis of x = [[1, 0]], gamma = 1, beta = 0, eps = 1e-5
x = np.array([[1.0, 0.0]])
gamma, beta = np.ones(2), np.zeros(2)
got = mx.fast.layer_norm(f64(x), f64(gamma), f64(beta), eps)
mean = x.mean(-1, keepdims=True)
var = ((x - mean) ** 2).mean(-1, keepdims=True)
expected = (x - mean) / np.sqrt(var + eps)  # float64 two-pass (the exact value is +-0.99998000059998)
print(f"mlx {mx.__version__}")
print(f"layer_norm: input float64, output {got.dtype}")
print(f"  expected y = {expected.ravel().tolist()}")
print(f"  got      y = {np.array(got).ravel().tolist()}")
xf = x.astype(np.float32)
mf = xf.mean(-1, keepdims=True)
y32 = (xf - mf) / np.sqrt(((xf - mf) ** 2).mean(-1, keepdims=True) + np.float32(eps))
print(f"  the same computed in float32 = {y32.astype(np.float64).ravel().tolist()}")
bad_ln = not np.allclose(np.array(got), expected, rtol=1e-12, atol=0)

# rms_norm of x = [1] (one cell): exact 1/sqrt(1 + eps)
xr = np.array([[1.0]])
got_r = mx.fast.rms_norm(f64(xr), f64(np.ones(1)), eps)
exp_r = xr / np.sqrt((xr**2).mean(-1, keepdims=True) + eps)
print(f"rms_norm: input float64, output {got_r.dtype}")
print(f"  expected y = {exp_r.ravel().tolist()}")
print(f"  got      y = {np.array(got_r).ravel().tolist()}")
bad_rms = not np.allclose(np.array(got_r), exp_r, rtol=1e-12, atol=0)

# the gradient of layer_norm (mx.vjp) is float32 arithmetic too
xb, dy = np.array([[0.1, 0.2, 0.35]]), np.array([[1.0, -0.5, 0.25]])
_, (dx,) = mx.vjp(lambda a: mx.fast.layer_norm(a, None, None, eps), [f64(xb)], [f64(dy)])
mb = xb.mean(-1, keepdims=True)
r = 1 / np.sqrt(((xb - mb) ** 2).mean(-1, keepdims=True) + eps)
xh = (xb - mb) * r
exp_dx = r * (dy - dy.mean(-1, keepdims=True) - xh * (dy * xh).mean(-1, keepdims=True))
print(f"layer_norm vjp: x = {xb.ravel().tolist()}, dy = {dy.ravel().tolist()}, dx {dx.dtype}")
print(f"  expected dx = {exp_dx.ravel().tolist()}")
print(f"  got      dx = {np.array(dx).ravel().tolist()}")

bad = bad_ln or bad_rms
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
