#!/usr/bin/env python3
"""Keras 3's normalization layers (`keras.layers.LayerNormalization`, `RMSNormalization`,
`GroupNormalization`) on one backend, speaking the kernel directory protocol for a family
export (`bnconf check --family F --exec ...`).

Usage: KERAS_BACKEND=jax|torch|tensorflow|numpy python adapters/keras_family.py DIR

adapters/_keras.py says how the backend, the precisions (the layer's dtype policy: `float32`,
`float64`, `float16`, `bfloat16`, `mixed_float16`, `mixed_bfloat16`), the arrays and the
autograd are set up.  Per case one layer is built for x's shape with the case's eps, axes,
groups and affine, its variables assigned from the case, and called as a user calls it,
`layer(x)`:

- layer_norm: `LayerNormalization(axis=[the trailing normalized_ndim axes], epsilon=eps,
  center=(affine == weight_bias), scale=(affine != none))`; gamma/beta have the normalized
  shape, as the case's.  What runs (keras 3.15 `ops.nn._layer_normalization`): x cast to
  result_type(x, float32); on the torch backend `F.layer_norm`; on the others
  `ops.moments` (jax: `jnp.var`, two-pass; tensorflow: `tf.nn.moments`-style two-pass;
  numpy: `mean(x²) − mean(x)²`, one pass), `inv = rsqrt(var + eps)·gamma`,
  `y = x·inv + (beta − mean·inv)`, cast to the compute dtype.
- rms_norm, convention `standard`: `RMSNormalization(axis=[the trailing axes], epsilon=eps)`,
  its `scale` = gamma.  The layer always has a scale: for affine `none` it keeps its
  initializer, ones (`x·rrms·1` is exact).  What runs: `ops.rms_normalization` (torch:
  `F.rms_norm`; others `x·rsqrt(mean(x²) + eps)·scale`).  `offset` ((1 + gamma)·xhat):
  unsupported (no such layer; weight = 1 + gamma would be the adapter's rounding).
- group_norm: `GroupNormalization(groups, axis=<channel axis: 1, or -1 for nhwc/ndhwc>,
  epsilon=eps, center, scale)`: Keras reshapes the channels to `[G, C/G]` (consecutive
  channels, FORMAT.md's groups) and normalizes with `ops.moments` over the group's axes.
- `y` only: Keras returns no statistics (`mean`/`rstd` not given).
- The backward ops: the backend's autograd of `layer(x)` with cotangent dy (_keras.vjp) with
  respect to x and the variables the case asks (gamma, beta; beta = 0 where the case has no
  beta input).  The NumPy backend has no autograd: backward cases unsupported.
- Mixed precision: the mixed policies keep gamma/beta float32; dgamma/dbeta come back in
  float32 and dx, y in the half type; anything else is unsupported with the dtype Keras
  returned.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _keras import VERSION, assign, keras, policy, serve, vjp  # noqa: E402
from _protocol import Unsupported, family_base  # noqa: E402

NAME = f"{VERSION} family"


def build(case, shape):
    """The Keras layer of the case, built for x's shape; (layer, gamma variable, beta variable)."""
    base = family_base(case, NAME, "keras.layers.RMSNormalization")
    eps = float(case["eps"])
    affine = case.get("affine", "weight_bias" if base != "rms_norm" else "weight")
    pol = policy(case)
    nd = len(shape)
    if base == "group_norm":
        axis = -1 if case["layout"] in ("nhwc", "ndhwc") else 1
        layer = keras.layers.GroupNormalization(groups=int(case["groups"]), axis=axis, epsilon=eps,
                                                center=affine == "weight_bias", scale=affine != "none", dtype=pol)
    else:
        axis = list(range(nd - int(case["normalized_ndim"]), nd))
        if base == "layer_norm":
            layer = keras.layers.LayerNormalization(axis=axis, epsilon=eps, center=affine == "weight_bias",
                                                    scale=affine != "none", dtype=pol)
        else:
            layer = keras.layers.RMSNormalization(axis=axis, epsilon=eps, dtype=pol)
    layer.build(tuple(shape))
    if base == "rms_norm":
        return layer, layer.scale, None
    return layer, getattr(layer, "gamma", None), getattr(layer, "beta", None)


def call(layer, x):
    return layer(x)


def run_case(case, inputs):
    op = case["op"]
    x = inputs["x"]
    layer, gv, bv = build(case, tuple(x.shape))
    if "gamma" in inputs:
        assign(gv, inputs["gamma"])
    if "beta" in inputs:
        assign(bv, inputs["beta"])
    if not op.endswith("_backward"):
        return {"y": layer(x)}
    outs = case["outputs"]
    variables = ([gv] if "dgamma" in outs else []) + ([bv] if "dbeta" in outs else [])
    dx, grads = vjp(layer, x, variables, inputs["dy"], call)
    result = {"dx": dx}
    names = (["dgamma"] if "dgamma" in outs else []) + (["dbeta"] if "dbeta" in outs else [])
    for n, g in zip(names, grads):
        if g is None:
            raise Unsupported(f"{NAME}: autograd gives no {n}")
        result[n] = g
    return result


if __name__ == "__main__":
    serve(run_case, NAME)
