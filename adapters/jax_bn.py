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

The function below (`normalize`, standardize plus the affine part) is judged through
`bnconf.jax.function_kernel` — the code behind `bnconf.jax.check_function`
(python/src/bnconf/jax.py) — which jits each op and takes the VJP.  What is framework code and
what is glue (everything runs in JAX, in the case dtype; float64 through
`jax.config.update("jax_enable_x64", True)`; each op is one `jax.jit`-ed function, as JAX
users run their steps):
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

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "src"))  # this clone's bnconf
import bnconf  # noqa: E402
import bnconf.jax  # noqa: E402
from _protocol import Unsupported, main  # noqa: E402

ALGO = os.environ.get("JAX_BN_ALGORITHM", "")
NAME = "jax_bn" + (f"_{ALGO}" if ALGO else "")
KW = {"algorithm": ALGO} if ALGO else {}


def _b(v, nd, cax):
    shape = [1] * nd
    shape[cax] = -1
    return v.reshape(shape)


def normalize(x, gamma, beta, *, axes, channel_axis, eps, mean=None, var=None):
    """`gamma * jax.nn.standardize(x, axes, epsilon=eps) + beta`; with the handed-in mean/var
    (eval) standardize uses them, else it returns (y, jnp.mean, jnp.var) of the batch."""
    nd, cax = x.ndim, channel_axis
    m = None if mean is None else _b(mean, nd, cax)
    v = None if var is None else _b(var, nd, cax)
    xs = jax.nn.standardize(x, axes, mean=m, variance=v, epsilon=eps, **KW)
    y = _b(gamma, nd, cax) * xs + _b(beta, nd, cax)
    if mean is not None:
        return y
    return y, jnp.mean(x, axes), jnp.var(x, axes)


KERNEL = bnconf.jax.function_kernel(normalize, name=NAME)


def run_case(case, inp):
    try:
        return KERNEL(bnconf.Case(case, inp))
    except bnconf.Unsupported as e:
        raise Unsupported(str(e)) from None


if __name__ == "__main__":
    main(run_case, NAME)
