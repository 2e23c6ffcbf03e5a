#!/usr/bin/env python3
"""Flax: flax.linen.BatchNorm(axis_name=...) under jax.pmap with mask= merges the devices'
statistics with equal weight, so an uneven split of the batch gets the wrong mean and
variance: x = [-1, -0.5 | -1] (two rows on device 0, one on device 1) gives mean -0.875
(the mean of the two device means) instead of -5/6, and var 0.046875 instead of 1/18.

Needs only flax (and its jax; tested: flax 0.12.8, jax/jaxlib 0.10.2, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

The batch is x of shape [3, 1, 1, 1] (NCHW, BatchNorm(axis=1): one channel, three rows),
float32, split across 2 CPU devices as 2 + 1 rows. pmap needs one shape per device, so
device 1's shard is padded with a zero row and mask= (Flax's own argument for this) marks
the real rows. scale = 1, bias = 0, epsilon = 1e-5, training mode
(use_running_average=False), momentum = 0 so that batch_stats after one step hold exactly
the (all-reduced) batch mean and variance Flax normalised with.
Exact (the whole batch of 3 values): mean = -5/6, var = 1/18, y = (x + 5/6)/sqrt(1/18 + 1e-5);
correctly rounded to float32: mean -0x1.aaaaaap-1, var 0x1.c71c72p-5, y [-0x1.6a0190p-1,
0x1.6a0190p+0, -0x1.6a0190p-1] (±0.7071, 1.4141) (bnconf golden findings/flax-sync-batchnorm-equal-weight/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402

SHARDS = [[-1.0, -0.5], [-1.0]]  # rows of device 0, device 1 (one value per row)


def step(shards, **kw):
    n = max(len(s) for s in shards)
    x = np.zeros((len(shards), n, 1, 1, 1), np.float32)
    mask = np.zeros(x.shape, bool)
    for r, s in enumerate(shards):
        x[r, : len(s), 0, 0, 0] = s
        mask[r, : len(s)] = True
    bn = nn.BatchNorm(axis=1, epsilon=1e-5, momentum=0.0, axis_name="r", **kw)
    v = {"params": {"scale": jnp.ones(1, jnp.float32), "bias": jnp.zeros(1, jnp.float32)},
         "batch_stats": {"mean": jnp.zeros(1, jnp.float32), "var": jnp.ones(1, jnp.float32)}}

    def f(x, mask):
        y, upd = bn.apply(v, x, use_running_average=False, mask=mask, mutable=["batch_stats"])
        return y, upd["batch_stats"]["mean"], upd["batch_stats"]["var"]

    y, mean, var = jax.pmap(f, axis_name="r", devices=jax.devices()[: len(shards)])(x, mask)
    y = [float(y[r, i, 0, 0, 0]) for r, s in enumerate(shards) for i in range(len(s))]
    return y, [float(m[0]) for m in mean], [float(v_[0]) for v_ in var]


print(f"flax {flax.__version__}, jax {jax.__version__}, backend {jax.default_backend()}, "
      f"{jax.device_count()} devices")
print(f"x = {SHARDS[0]} on device 0, {SHARDS[1]} on device 1 (mask= marks the real rows)")
h = float.fromhex
print(f"expected mean = {h('-0x1.aaaaaap-1')!r} (-5/6), var = {h('0x1.c71c72p-5')!r} (1/18), "
      f"y = {[h('-0x1.6a0190p-1'), h('0x1.6a0190p+0'), h('-0x1.6a0190p-1')]}")
y, mean, var = step(SHARDS)
print(f"got      mean = {mean}, var = {var} (per device), y = {y}")
m0, m1 = np.mean(SHARDS[0]), np.mean(SHARDS[1])
print(f"  (mean of the two device means: ({m0} + {m1})/2 = {(m0 + m1) / 2})")
_, mean2, var2 = step(SHARDS, use_fast_variance=False)
print(f"use_fast_variance=False: mean = {mean2}, var = {var2} (same weights)")
reproduced = any(m != h("-0x1.aaaaaap-1") for m in mean)
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
