"""MLX's nn.BatchNorm in float16 (CPU, training mode): the gradient dx of x = [0, 0] (one channel,
two cells, dy = [1, 1], gamma = 1, eps = 1e-5) is [NaN, NaN]; the exact dx is [0, 0].

Needs only numpy and mlx (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces.  The cause: BatchNorm's forward is composed ops,
`(x - mean) * mx.rsqrt(var + eps)` (mlx/nn/layers/normalization.py), and `mx.vjp`
differentiates `rsqrt` with `Sqrt::vjp` (mlx/primitives.cpp), which forms
`rsqrt(v) / v` = v^(-3/2) in v's dtype.  In float16, v = var + eps = 1e-5 gives
v^(-3/2) = 3.2e7 > 65504: inf.  The cotangent reaching rsqrt, sum(dy * (x - mean)), is 0 here,
and 0 * inf = NaN, which flows into every dx.  Any float16 channel with var + eps below
about 6.1e-4 overflows the same way (dx NaN or inf) although the exact dx is small.
"""

import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np

mx.set_default_device(mx.cpu)
eps = 1e-5


def bn_vjp(x, dy):
    """dx, dgamma, dbeta of nn.BatchNorm(1) in training mode, float16, layout [N=2, C=1]."""
    bn = nn.BatchNorm(1, eps=eps, track_running_stats=False)
    g = mx.ones((1,), dtype=mx.float16)
    b = mx.zeros((1,), dtype=mx.float16)

    def f(xx, w, bb):
        bn.weight, bn.bias = w, bb
        return bn(xx)

    xs = mx.array(np.asarray(x, np.float16).reshape(-1, 1))
    dys = mx.array(np.asarray(dy, np.float16).reshape(-1, 1))
    _, (dx, dg, db) = mx.vjp(f, [xs, g, b], [dys])
    return np.array(dx).ravel(), np.array(dg).ravel(), np.array(db).ravel()


def exact_dx(x, dy):
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    r = 1 / np.sqrt(x.var() + eps)
    xh = (x - x.mean()) * r
    return r * (dy - dy.mean() - xh * (dy * xh).mean())


print(f"mlx {mx.__version__}")
bad = False
for x, dy in (([0, 0], [1, 1]), ([0, 0], [1, 0])):
    dx, dg, db = bn_vjp(x, dy)
    print(f"x = {x}, dy = {dy} (float16): expected dx = {exact_dx(x, dy).tolist()}")
    print(f"  got dx = {dx.tolist()}, dgamma = {dg.tolist()}, dbeta = {db.tolist()}")
    bad |= not np.all(np.isfinite(dx))

# the intermediate: d rsqrt(v)/dv = -0.5 * v^(-3/2), formed in float16
for v in (1e-5, 6e-4, 6.3e-4):
    g = mx.grad(mx.rsqrt)(mx.array(v, dtype=mx.float16))
    print(f"mx.grad(mx.rsqrt) at float16 {v}: {g.item()} (float64: {-0.5 * v ** -1.5:.6g})")
print("REPRODUCES" if bad else "fixed")
sys.exit(1 if bad else 0)
