#!/usr/bin/env python3
"""Flax: flax.linen.BatchNorm(axis_name=...) under jax.pmap with mask= returns NaN for the
mean, the variance and y on every device when one device's mask is all False (an empty
shard): x = [1] on device 1, no rows on device 0, gives NaN everywhere instead of mean 1,
var 0, y 0.

Needs only flax (and its jax; tested: flax 0.12.8, jax/jaxlib 0.10.2, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

The batch is x of shape [1, 1, 1, 1] (NCHW, BatchNorm(axis=1): one channel, one row),
float32, split across 2 CPU devices as 0 + 1 rows. pmap needs one shape per device, so
device 0 holds one zero row with mask= all False (Flax's own argument for rows that are not
data). scale = 1, bias = 0, epsilon = 1e-5, training mode (use_running_average=False),
momentum = 0 so that batch_stats after one step hold exactly the (all-reduced) batch mean
and variance Flax normalised with.
Exact (the whole batch, one value): mean = 1, var = 0, y = 0
(bnconf golden findings/flax-sync-batchnorm-empty-device-nan/case.json).
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

SHARDS = [[], [1.0]]  # rows of device 0 (none), device 1 (one value per row)


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
print(f"x = {SHARDS[0]} on device 0 (mask all False), {SHARDS[1]} on device 1")
print("expected mean = 1.0, var = 0.0, y = [0.0]")
y, mean, var = step(SHARDS)
print(f"got      mean = {mean}, var = {var} (per device), y = {y}")
print(f"  (device 0's masked mean over no element: {float(jnp.mean(jnp.zeros(1), where=jnp.zeros(1, bool)))})")
_, mean2, var2 = step(SHARDS, use_fast_variance=False)
print(f"use_fast_variance=False: mean = {mean2}, var = {var2}")
reproduced = any(m != 1.0 for m in mean) or any(not v == 0.0 for v in var) or y != [0.0]
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
