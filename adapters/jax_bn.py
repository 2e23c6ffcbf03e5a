#!/usr/bin/env python3
"""JAX's own normalization (`jax.nn.standardize`), speaking the kernel directory protocol.

Usage: python adapters/jax_bn.py DIR       (CPU only; JAX_PLATFORMS=cpu is forced)
       JAX_BN_ALGORITHM=stable python adapters/jax_bn.py DIR   (run_all.sh: row `jax_bn_stable`)

JAX has no BatchNorm layer; `jax.nn.standardize(x, axis, mean=None, variance=None,
epsilon=1e-5, *, algorithm="fast")` is its normalization primitive.  Its default variance
(`algorithm="fast"`) is the one-pass `mean(x**2) - mean(x)**2`, clipped at 0; `"stable"` is
the two-pass `mean((x - mean)**2)`.  By default this adapter calls standardize with its
defaults (what `jax.nn.standardize(x, axes, epsilon=eps)` does); JAX_BN_ALGORITHM=stable
passes `algorithm="stable"`.

What is framework code and what is glue (everything runs in JAX, in the case dtype; float64
through `jax.config.update("jax_enable_x64", True)`; each op is one `jax.jit`-ed function,
as JAX users run their steps):
- forward: `y = gamma * jax.nn.standardize(x, axes, epsilon=eps) + beta` (the affine part is
  user code: standardize has no scale/offset); `mean = jnp.mean(x, axes)`,
  `var = jnp.var(x, axes)` (jnp.var is two-pass), as JAX users obtain the statistics:
  standardize does not return the ones it used.  So `var` judges jnp.var, `y` judges
  standardize's own (by default one-pass) variance.
- backward: `jax.vjp` of that forward's `y` with respect to (x, gamma, beta), cotangent dy.
- eval: `gamma * jax.nn.standardize(x, axes, mean=mean, variance=var, epsilon=eps) + beta`.
- sync_forward: the same with `variance = m2 - mean*mean` formed with jnp (glue: JAX has no
  op taking an all-reduced second moment).
- sync_backward: unsupported.  Cross-device BN in JAX is the VJP through `lax.pmean` under
  `pmap`/`shard_map`, which needs the other shards' data; JAX has no entry point taking the
  handed-in all-reduced gradient statistics (mean_dy, mean_dy_xhat).
- running_update: unsupported (JAX keeps no running statistics; that is user or Flax code).
- sync_stats: unsupported (no count-weighted all-reduce of shard statistics in JAX; `lax.pmean`
  is an equal-weight mean over devices).
- eps reaches standardize as a Python float (weakly typed), so `variance + epsilon` is formed
  in the case dtype, i.e. with eps rounded to float32 for f32 cases."""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

ALGO = os.environ.get("JAX_BN_ALGORITHM", "")
NAME = "jax_bn" + (f"_{ALGO}" if ALGO else "")
KW = {"algorithm": ALGO} if ALGO else {}


def _b(v, nd, cax):
    shape = [1] * nd
    shape[cax] = -1
    return v.reshape(shape)


def _affine_standardize(x, gamma, beta, eps, cax, axes, mean=None, variance=None):
    nd = x.ndim
    if mean is not None:
        mean, variance = _b(mean, nd, cax), _b(variance, nd, cax)
    xs = jax.nn.standardize(x, axes, mean=mean, variance=variance, epsilon=eps, **KW)
    return _b(gamma, nd, cax) * xs + _b(beta, nd, cax)


def _forward(x, gamma, beta, eps, cax, axes):
    y = _affine_standardize(x, gamma, beta, eps, cax, axes)
    return y, jnp.mean(x, axes), jnp.var(x, axes)


def _backward(x, dy, gamma, eps, cax, axes):
    beta = jnp.zeros_like(gamma)
    f = lambda x_, g_, b_: _affine_standardize(x_, g_, b_, eps, cax, axes)  # noqa: E731
    _, vjp = jax.vjp(f, x, gamma, beta)
    return vjp(dy)


def _eval(x, gamma, beta, mean, var, eps, cax, axes):
    return _affine_standardize(x, gamma, beta, eps, cax, axes, mean=mean, variance=var)


def _sync_forward(x, gamma, beta, mean, m2, eps, cax, axes):
    return _affine_standardize(x, gamma, beta, eps, cax, axes, mean=mean, variance=m2 - mean * mean)


_static = ("cax", "axes")
FORWARD = jax.jit(_forward, static_argnames=_static)
BACKWARD = jax.jit(_backward, static_argnames=_static)
EVAL = jax.jit(_eval, static_argnames=_static)
SYNC_FORWARD = jax.jit(_sync_forward, static_argnames=_static)


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op == "sync_backward":
        raise Unsupported(f"{NAME}: JAX's sync BN is the VJP through lax.pmean over devices; no op takes handed-in all-reduced gradient statistics")
    if op == "running_update":
        raise Unsupported(f"{NAME}: JAX keeps no running statistics (user or Flax code does)")
    if op == "sync_stats":
        raise Unsupported(f"{NAME}: JAX has no count-weighted all-reduce of shard statistics (lax.pmean is an equal-weight mean)")
    if op not in ("forward", "backward", "eval", "sync_forward"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    cax, axes = AXES[layout]
    eps = float(case["eps"])
    j = {k: jnp.asarray(v) for k, v in inp.items()}
    kw = {"eps": eps, "cax": cax, "axes": axes}
    if op == "forward":
        y, mean, var = FORWARD(j["x"], j["gamma"], j["beta"], **kw)
        out = {"y": y, "mean": mean, "var": var}
    elif op == "backward":
        dx, dgamma, dbeta = BACKWARD(j["x"], j["dy"], j["gamma"], **kw)
        out = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    elif op == "eval":
        out = {"y": EVAL(j["x"], j["gamma"], j["beta"], j["mean"], j["var"], **kw)}
    else:
        out = {"y": SYNC_FORWARD(j["x"], j["gamma"], j["beta"], j["mean"], j["m2"], **kw)}
    return {k: np.asarray(v) for k, v in out.items()}


if __name__ == "__main__":
    main(run_case, NAME)
