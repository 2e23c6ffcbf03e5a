#!/usr/bin/env python3
"""Flax's `flax.linen.BatchNorm` (linen, which Flax 0.12 still ships), speaking the kernel
directory protocol.

Usage: python adapters/flax_bn.py DIR       (CPU only; float64 through jax_enable_x64)
       FLAX_BN_FAST_VARIANCE=0 python adapters/flax_bn.py DIR   (row `flax_bn_twopass`:
       use_fast_variance=False, the two-pass variance Flax offers as a non-default)

The module is `nn.BatchNorm(axis=<channel axis>, epsilon=eps)` with every other argument at
its default: `use_fast_variance=True` (variance = mean(x**2) - mean(x)**2, clipped at 0, in
one fused pass), `momentum=0.99`, `force_float32_reductions=True` (statistics in at least
float32: float64 stays float64), `use_scale=use_bias=True`.  The variables are handed in as
`{"params": {"scale": gamma, "bias": beta}, "batch_stats": {"mean": ..., "var": ...}}` in the
case dtype.  Every op is one `jax.jit`-ed function around `module.apply`.

- forward: `apply(..., x, use_running_average=False, mutable=["batch_stats"])` gives y.  Flax
  does not return the batch statistics; it blends them into batch_stats as
  `momentum*old + (1-momentum)*batch`.  With momentum=0 (the one non-default here, used only
  for this op; y does not depend on momentum) that is `0*old + 1*batch`, exactly the batch
  mean and the (fast, biased) batch variance, so `mean`/`var` are what Flax computed.
- backward: `jax.vjp` of that training-mode forward's y w.r.t. (x, scale, bias).
- eval: `apply(..., x, use_running_average=True)` with batch_stats = the handed-in mean/var.
- sync_forward: eval with batch_stats var = m2 - mean*mean formed with jnp (glue).  Flax's own
  cross-device path (axis_name=...) pmeans [mean, mean(x**2)] over devices, which needs the
  other devices' data, not handed-in statistics.
- running_update, convention "onnx": Flax's own update with momentum=a: one training step
  with batch_stats = the handed-in running statistics, the new batch_stats read back.
  Flax blends the biased (fast) variance, i.e. the onnx convention.  Convention "pytorch":
  unsupported (a -> 1-a would fix the weights, but Flax has no unbiased running variance).
- sync_backward: unsupported (the VJP through lax.pmean needs the other shards' data).
- sync_stats: unsupported.  Flax's cross-device BatchNorm all-reduces with an equal-weight
  `lax.pmean` of per-device means, which cannot express shards of unequal size (here
  counts differ and may be 0).
- eps: `epsilon` is a Python float module attribute, added as `var + epsilon` in the
  statistics dtype (float32 for f32 cases, float64 for f64)."""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

FAST = os.environ.get("FLAX_BN_FAST_VARIANCE", "1") != "0"
NAME = "flax_bn" if FAST else "flax_bn_twopass"


def BatchNorm(**kw):
    """nn.BatchNorm with its defaults, except use_fast_variance=False under FLAX_BN_FAST_VARIANCE=0."""
    return nn.BatchNorm(**kw) if FAST else nn.BatchNorm(use_fast_variance=False, **kw)


def _vars(gamma, beta, mean, var):
    return {"params": {"scale": gamma, "bias": beta}, "batch_stats": {"mean": mean, "var": var}}


def _train(x, gamma, beta, rmean, rvar, eps, cax, momentum):
    bn = BatchNorm(axis=cax, epsilon=eps, momentum=momentum)
    y, upd = bn.apply(_vars(gamma, beta, rmean, rvar), x, use_running_average=False, mutable=["batch_stats"])
    return y, upd["batch_stats"]["mean"], upd["batch_stats"]["var"]


def _forward(x, gamma, beta, eps, cax):
    c = gamma.shape[0]
    return _train(x, gamma, beta, jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype), eps, cax, 0.0)


def _backward(x, dy, gamma, eps, cax):
    c = gamma.shape[0]
    bn = BatchNorm(axis=cax, epsilon=eps)
    stats = (jnp.zeros(c, x.dtype), jnp.ones(c, x.dtype))

    def f(x_, g_, b_):
        return bn.apply(_vars(g_, b_, *stats), x_, use_running_average=False, mutable=["batch_stats"])[0]

    _, vjp = jax.vjp(f, x, gamma, jnp.zeros_like(gamma))
    return vjp(dy)


def _eval(x, gamma, beta, mean, var, eps, cax):
    bn = BatchNorm(axis=cax, epsilon=eps)
    return bn.apply(_vars(gamma, beta, mean, var), x, use_running_average=True)


def _sync_forward(x, gamma, beta, mean, m2, eps, cax):
    return _eval(x, gamma, beta, mean, m2 - mean * mean, eps, cax)


def _running_update(x, rmean, rvar, eps, cax, momentum):
    c = rmean.shape[0]
    _, new_mean, new_var = _train(x, jnp.ones(c, x.dtype), jnp.zeros(c, x.dtype), rmean, rvar, eps, cax, momentum)
    return new_mean, new_var


FORWARD = jax.jit(_forward, static_argnames=("eps", "cax"))
BACKWARD = jax.jit(_backward, static_argnames=("eps", "cax"))
EVAL = jax.jit(_eval, static_argnames=("eps", "cax"))
SYNC_FORWARD = jax.jit(_sync_forward, static_argnames=("eps", "cax"))
RUNNING_UPDATE = jax.jit(_running_update, static_argnames=("eps", "cax", "momentum"))


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op == "sync_backward":
        raise Unsupported(f"{NAME}: Flax's sync BN differentiates through lax.pmean over devices; no op takes handed-in all-reduced gradient statistics")
    if op == "sync_stats":
        raise Unsupported(f"{NAME}: Flax all-reduces with an equal-weight lax.pmean of per-device means; shards of unequal size cannot be expressed")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    cax, _ = AXES[layout]
    eps = float(case["eps"])
    j = {k: jnp.asarray(v) for k, v in inp.items()}
    if op == "forward":
        y, mean, var = FORWARD(j["x"], j["gamma"], j["beta"], eps=eps, cax=cax)
        out = {"y": y, "mean": mean, "var": var}
    elif op == "backward":
        dx, dgamma, dbeta = BACKWARD(j["x"], j["dy"], j["gamma"], eps=eps, cax=cax)
        out = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    elif op == "eval":
        out = {"y": EVAL(j["x"], j["gamma"], j["beta"], j["mean"], j["var"], eps=eps, cax=cax)}
    elif op == "sync_forward":
        out = {"y": SYNC_FORWARD(j["x"], j["gamma"], j["beta"], j["mean"], j["m2"], eps=eps, cax=cax)}
    else:
        if case["convention"] != "onnx":
            raise Unsupported(f"{NAME}: Flax's running statistics follow the onnx convention (biased variance), not {case['convention']}")
        new_mean, new_var = RUNNING_UPDATE(j["x"], j["running_mean"], j["running_var"], eps=eps, cax=cax, momentum=float(case["momentum"]))
        out = {"new_mean": new_mean, "new_var": new_var}
    return {k: np.asarray(v) for k, v in out.items()}


if __name__ == "__main__":
    main(run_case, NAME)
