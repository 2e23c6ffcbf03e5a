#!/usr/bin/env python3
"""Flax: flax.linen.BatchNorm's default variance (use_fast_variance=True) is wrong for
x = [1092.5, 1091]: 0.625 instead of 0.5625, and 0 for x = [3314, 3313].

Needs only flax (and its jax; tested: flax 0.12.8, jax/jaxlib 0.10.2, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x has shape [1, 1, 1, 2] (NCHW, BatchNorm(axis=1): one channel, two cells), float32,
scale = 1, bias = 0, epsilon = 1e-5, training mode (use_running_average=False); the batch
variance is read back from batch_stats after one step with momentum = 0.
Exact: mean = 4367/4 = 1091.75, var = 9/16 = 0.5625, y = ±0.75/sqrt(0.5625 + 1e-5);
correctly rounded to float32: var 0x1.200000p-1, y ±0x1.fffed6p-1 (0.99999112)
(bnconf golden findings/flax-batchnorm-fast-variance/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402


def train_step(values, **kw):
    x = jnp.array(values, dtype=jnp.float32).reshape(1, 1, 1, 2)
    bn = nn.BatchNorm(axis=1, epsilon=1e-5, momentum=0.0, **kw)
    v = {"params": {"scale": jnp.ones(1, jnp.float32), "bias": jnp.zeros(1, jnp.float32)},
         "batch_stats": {"mean": jnp.zeros(1, jnp.float32), "var": jnp.ones(1, jnp.float32)}}
    y, upd = jax.jit(lambda v, x: bn.apply(v, x, use_running_average=False,
                                           mutable=["batch_stats"]))(v, x)
    return [float(t) for t in np.asarray(y).ravel()], float(upd["batch_stats"]["var"][0])


print(f"flax {flax.__version__}, jax {jax.__version__}, backend {jax.default_backend()}")
y, var = train_step([1092.5, 1091.0])
y2, var2 = train_step([1092.5, 1091.0], use_fast_variance=False)
print("x = [1092.5, 1091.0]:")
print(f"  expected var = 0.5625 (0x1.200000p-1), y = ±{float.fromhex('0x1.fffed6p-1')!r}")
print(f"  got      var = {var!r}, y = {y}   (nn.BatchNorm defaults: use_fast_variance=True)")
print(f"  use_fast_variance=False gives var = {var2!r}, y = {y2}")
y3, var3 = train_step([3314.0, 3313.0])
print("x = [3314.0, 3313.0] (exact var 0.25, y = ±0.99998):")
print(f"  got      var = {var3!r}, y = {y3}")
reproduced = var != 0.5625
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
