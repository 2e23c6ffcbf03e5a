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
case dtype.  The module is judged through `bnconf.jax.flax_module_kernel` — the code behind
`bnconf.jax.check_flax_module` (python/src/bnconf/jax.py) — where every op is one `jax.jit`-ed
function around `module.apply`.

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
from flax import linen as nn  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "src"))  # this clone's bnconf
import bnconf  # noqa: E402
import bnconf.jax  # noqa: E402
from _protocol import Unsupported, main  # noqa: E402

FAST = os.environ.get("FLAX_BN_FAST_VARIANCE", "1") != "0"
NAME = "flax_bn" if FAST else "flax_bn_twopass"


def build(case):
    """nn.BatchNorm(axis=<channel axis>, epsilon=eps) with its defaults, except
    use_fast_variance=False under FLAX_BN_FAST_VARIANCE=0."""
    kw = {} if FAST else {"use_fast_variance": False}
    return nn.BatchNorm(axis=case.channel_axis, epsilon=float(case.eps), **kw)


KERNEL = bnconf.jax.flax_module_kernel(build, name=NAME)


def run_case(case, inp):
    try:
        return KERNEL(bnconf.Case(case, inp))
    except bnconf.Unsupported as e:
        raise Unsupported(str(e)) from None


if __name__ == "__main__":
    main(run_case, NAME)
