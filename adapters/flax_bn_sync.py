#!/usr/bin/env python3
"""Flax's cross-device BatchNorm (`flax.linen.BatchNorm(axis_name="r")`) under `jax.pmap`
over R CPU devices, speaking the replicated kernel directory protocol (docs/FORMAT.md,
"Replicated suites"; plumbing in adapters/_replicated.py).

Usage: python adapters/flax_bn_sync.py DIR
       FLAX_BN_FAST_VARIANCE=0 python adapters/flax_bn_sync.py DIR   (row flax_bn_sync_twopass:
                                                 use_fast_variance=False)

One process; `XLA_FLAGS=--xla_force_host_platform_device_count=8` gives 8 CPU devices and a
case with R ranks is `jax.pmap(..., axis_name="r", devices=jax.devices()[:R])`, device r
holding rank r's shard.  The module is `nn.BatchNorm(axis=<channel axis>, epsilon=eps,
axis_name="r")`, every other argument at its default (use_fast_variance=True unless
FLAX_BN_FAST_VARIANCE=0, force_float32_reductions=True).  Float64 through jax_enable_x64.

Shards: pmap needs one shape on every device.  Equal splits are passed as they are, with no
mask.  Unequal splits (and an empty rank) are padded with zero rows to the largest shard and
passed with Flax's own `mask=` argument (True on the rank's real rows), which is how a user
runs uneven shards through Flax.  Flax then takes, on each device, the masked mean over that
device's valid cells and `lax.pmean`s those per-device means with equal weight
(flax/linen/normalization.py `_compute_stats`), so the result is what Flax computes for
unequal shards: judged, not declared unsupported.

- forward: `apply(..., x, use_running_average=False, mask=..., mutable=["batch_stats"])` with
  momentum=0: y, and batch_stats = exactly the (all-reduced) batch mean and variance Flax
  normalised with (0*old + 1*batch), read back as mean/var on every rank.
- backward: `jax.vjp` on each device of that forward's y w.r.t. (x_r, scale, bias) with
  cotangent dy_r, i.e. the gradient of the rank's Σ y·dy through the pmean (whose transpose
  sums the cotangents of every device, so dx_r is the whole batch's VJP restricted to the
  shard).  The parameter gradients are per device (dgamma_local, dbeta_local: the rank's part);
  dgamma/dbeta are `lax.psum(..., "r")` of those, the gradient all-reduce of data-parallel
  training with a summed loss.  Padded rows get dy = 0.
- running_update, convention "onnx": one training step with batch_stats = the handed-in
  running statistics and momentum=a (Flax: `momentum*old + (1-momentum)*batch`, biased
  variance), read back on every rank.  "pytorch": unsupported (Flax has no unbiased running
  variance; a -> 1-a fixes only the weights)."""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _replicated import CHANNEL_AXIS, Unsupported, main_inprocess  # noqa: E402

FAST = os.environ.get("FLAX_BN_FAST_VARIANCE", "1") != "0"
NAME = "flax_bn_sync" if FAST else "flax_bn_sync_twopass"
AXIS = "r"


def BatchNorm(**kw):
    return nn.BatchNorm(axis_name=AXIS, **kw) if FAST else nn.BatchNorm(axis_name=AXIS, use_fast_variance=False, **kw)


def _vars(gamma, beta, mean, var):
    return {"params": {"scale": gamma, "bias": beta}, "batch_stats": {"mean": mean, "var": var}}


def _train(x, mask, gamma, beta, rmean, rvar, eps, cax, momentum):
    bn = BatchNorm(axis=cax, epsilon=eps, momentum=momentum)
    y, upd = bn.apply(_vars(gamma, beta, rmean, rvar), x, use_running_average=False, mask=mask, mutable=["batch_stats"])
    return y, upd["batch_stats"]["mean"], upd["batch_stats"]["var"]


def _forward(x, mask, gamma, beta, *, eps, cax):
    c = gamma.shape[0]
    return _train(x, mask, gamma, beta, jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype), eps, cax, 0.0)


def _backward(x, dy, mask, gamma, *, eps, cax):
    c = gamma.shape[0]

    def f(x_, g_, b_):
        return _train(x_, mask, g_, b_, jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype), eps, cax, 0.99)[0]

    _, vjp = jax.vjp(f, x, gamma, jnp.zeros_like(gamma))
    dx, dg_local, db_local = vjp(dy)
    return dx, jax.lax.psum(dg_local, AXIS), jax.lax.psum(db_local, AXIS), dg_local, db_local


def _running_update(x, mask, rmean, rvar, *, eps, cax, momentum):
    c = rmean.shape[0]
    _, m, v = _train(x, mask, jnp.ones(c, x.dtype), jnp.zeros(c, x.dtype), rmean, rvar, eps, cax, momentum)
    return m, v


_CACHE = {}


def pmapped(fn, R, nmask, **static):
    """fn under pmap over the first R devices; nmask: leading args that are per-device
    (x, dy, mask); the rest are replicated (broadcast, in_axes=None)."""
    key = (fn, R, nmask, tuple(sorted(static.items())))
    if key not in _CACHE:
        def g(*args):
            return fn(*args, **static)
        nargs = {_forward: 4, _backward: 4, _running_update: 4}[fn]
        in_axes = tuple([0] * nmask + [None] * (nargs - nmask))
        _CACHE[key] = jax.pmap(g, axis_name=AXIS, in_axes=in_axes, devices=jax.devices()[:R])
    return _CACHE[key]


def run_case(case, ranks):
    op, layout = case["op"], case["layout"]
    R = int(case["ranks"])
    if R > jax.device_count():
        raise Unsupported(f"{NAME}: {R} ranks, {jax.device_count()} devices")
    if op == "running_update" and case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: Flax's running statistics follow the onnx convention (biased variance), not {case['convention']}")
    cax = CHANNEL_AXIS[layout]
    eps = float(case["eps"])
    sizes = [int(n) for n in case["shard_sizes"]]
    nmax = max(sizes)
    equal = len(set(sizes)) == 1

    def stack(name):
        rows = []
        for r in range(R):
            a = ranks[r][name]
            pad = np.zeros([nmax - sizes[r]] + list(a.shape[1:]), a.dtype)
            rows.append(np.concatenate([a, pad]) if nmax > sizes[r] else a)
        return jnp.asarray(np.stack(rows))

    x = stack("x")
    if equal:
        mask = None
    else:
        m = np.zeros((R,) + tuple(x.shape[1:]), bool)
        for r in range(R):
            m[r, : sizes[r]] = True
        mask = jnp.asarray(m)

    def rep(name):
        return jnp.asarray(ranks[0][name])

    for r in range(1, R):  # replicated inputs are copies; a rank that differs is a harness bug
        for n in ranks[r]:
            if n not in ("x", "dy") and not np.array_equal(ranks[r][n], ranks[0][n], equal_nan=True):
                raise ValueError(f"rank{r}/{n}.npy differs from rank0's copy")

    if op == "forward":
        y, mean, var = pmapped(_forward, R, 2, eps=eps, cax=cax)(x, mask, rep("gamma"), rep("beta"))
        per = {"y": y, "mean": mean, "var": var}
    elif op == "backward":
        dx, dg, db, dgl, dbl = pmapped(_backward, R, 3, eps=eps, cax=cax)(x, stack("dy"), mask, rep("gamma"))
        per = {"dx": dx, "dgamma": dg, "dbeta": db, "dgamma_local": dgl, "dbeta_local": dbl}
    else:
        nm, nv = pmapped(_running_update, R, 2, eps=eps, cax=cax, momentum=float(case["momentum"]))(
            x, mask, rep("running_mean"), rep("running_var"))
        per = {"new_mean": nm, "new_var": nv}
    per = {k: np.asarray(v) for k, v in per.items()}
    out = []
    for r in range(R):
        o = {}
        for k, v in per.items():
            o[k] = v[r, : sizes[r]] if k in ("y", "dx") else v[r]
        out.append(o)
    return out


if __name__ == "__main__":
    main_inprocess(run_case, NAME)
