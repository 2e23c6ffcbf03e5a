#!/usr/bin/env python3
"""Flax's normalization-family modules on the CPU (`flax.linen.LayerNorm`, `flax.linen.RMSNorm`,
`flax.linen.GroupNorm`; linen, which Flax 0.12 still ships), judged through `bnconf.jax` — the
code behind `bnconf.jax.check_flax_module` — and speaking the kernel directory protocol for a
family export (`bnconf check --family F --exec ...`).

Usage: python adapters/flax_family.py DIR        (row `flax_family`: Flax's defaults)
       FLAX_FAMILY_FAST_VARIANCE=0 python adapters/flax_family.py DIR
                                                 (row `flax_family_twopass`:
                                                 use_fast_variance=False, the two-pass variance
                                                 Flax offers as a non-default)

This script keeps only the protocol loop (`bnconf.run_suite_dir`: case.json and the input npy
files in, `out/<output>.npy`, `out/unsupported` or `out/error` written); per case
`bnconf.jax.flax_module_kernel` builds the module from the case (`bnconf.jax.flax_family_module`)
and runs it, exactly as `bnconf.jax.check_flax_module(flax.linen.LayerNorm, ...)` does in
process (python/src/bnconf/jax.py says what each op runs). Every op is one `jax.jit`-ed
function around `module.apply`, on JAX's CPU device; float64 through `jax_enable_x64`.

- layer_norm: `LayerNorm(epsilon=eps, use_scale=affine != none, use_bias=affine ==
  weight_bias, reduction_axes=feature_axes=<the last normalized_ndim axes>, param_dtype=<the
  case's parameter dtype>, dtype=<x's dtype>)`; every other field Flax's default:
  `use_fast_variance=True` (mean and E[x²] in one fusion, var = max(0, E[x²] − E[x]²)),
  `force_float32_reductions=True` (the statistics in at least float32: x cast to float32 for
  f16/bf16, float64 stays float64). The params `{"scale": gamma, "bias": beta}` are the case's,
  handed to `module.apply`. `y = module.apply(params, x)`; Flax returns no statistics (`mean`,
  `rstd` not given).
- rms_norm, convention `standard`: `RMSNorm(epsilon, use_scale, reduction_axes=feature_axes,
  param_dtype, dtype)` (`scale·x·rsqrt(mean(x²) + eps)`; the fast-variance flag does not
  apply: RMSNorm has no mean). `offset` ((1 + gamma)·xhat): unsupported — Flax has no such
  module, and `scale = 1 + gamma` would be a rounding by the adapter.
- group_norm: `GroupNorm(num_groups=groups, epsilon, use_scale, use_bias, param_dtype,
  dtype)`, which takes the channels last and reduces over every axis but the first (batch):
  channels-first x (nc, ncl, nchw, ncdhw) is moved to the last axis with `jnp.moveaxis` inside
  the jitted function and y/dx moved back (a transpose, exact); nhwc/ndhwc go in as they are.
- The backward ops: `jax.vjp` of the same `module.apply` w.r.t. (x, scale, bias) (bias = 0 for
  a backward case, whose inputs are x, dy, gamma), cotangent dy: `dx, dgamma, dbeta`.
- eps: the case's eps as a Python float `epsilon` field (added as `var + epsilon` in the
  statistics dtype: float32 for f32/f16/bf16 x, float64 for f64).
- dtypes f32, f64, f16, bf16: x and the params in that dtype (bf16 via `jnp.bfloat16`; the
  protocol's float32 values are exact there, and the bf16 outputs are written back exactly).
- Mixed precision (f16+f32, bf16+f32): half x with float32 params, built as Flax's
  mixed-precision idiom `dtype=<half>, param_dtype=float32` (`dtype` is Flax's documented
  "dtype of the result"; with `dtype=None` Flax promotes y to float32, which the protocol's
  half y is not). The statistics are float32 (`force_float32_reductions`), `scale`/`bias`
  applied in float32, y rounded once to the half type. An output Flax returns in another dtype
  than the protocol's would be unsupported with the reason (never cast by the adapter).

FLAX_FAMILY_FAST_VARIANCE=0 sets `use_fast_variance=False` on LayerNorm and GroupNorm (the
two-pass var = mean((x − mean)²)); RMSNorm is the same module either way.
"""

import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax  # noqa: E402
import jax  # noqa: E402
from flax import linen as nn  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "src"))  # this clone's bnconf
import bnconf  # noqa: E402
import bnconf.jax  # noqa: E402

FAST = os.environ.get("FLAX_FAMILY_FAST_VARIANCE", "1") != "0"
NAME = f"flax {flax.__version__} (jax {jax.__version__}, CPU)" + ("" if FAST else ", use_fast_variance=False")

#: The flax.linen class judged for each family.
CLASSES = {"layer_norm": nn.LayerNorm, "rms_norm": nn.RMSNorm, "group_norm": nn.GroupNorm}


def builder(cls):
    """``case -> module``: the module bnconf.jax builds for ``cls`` (Flax's defaults), with
    use_fast_variance=False under FLAX_FAMILY_FAST_VARIANCE=0 (LayerNorm, GroupNorm)."""
    fields = {} if FAST or cls is nn.RMSNorm else {"use_fast_variance": False}

    def build(case):
        return bnconf.jax.flax_family_module(cls, case, **fields)

    build.__name__ = cls.__name__
    return build


def kernel(name=NAME):
    """The kernel ``case -> outputs`` of a family export: ``bnconf.jax.flax_module_kernel`` for
    the case's family."""
    kernels = {
        f: bnconf.jax.flax_module_kernel(builder(cls), family=f, name=f"{name} {cls.__name__}")
        for f, cls in CLASSES.items()
    }

    def run(case):
        k = kernels.get(case.family)
        if k is None:
            raise bnconf.Unsupported(f"{name}: family {case.family} not wired in this adapter")
        return k(case)

    return run


def main(name=NAME):
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")

    def on_error(case, e):
        print(f"{name}: case {case.id} raised; no outputs written:", file=sys.stderr)
        traceback.print_exception(e)

    n = bnconf.run_suite_dir(kernel(name), sys.argv[1], on_error=on_error)
    print(f"{name} (family): {n['computed']} computed, {n['unsupported']} unsupported, "
          f"{n['raised']} raised", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
