#!/usr/bin/env python3
"""MLX's normalization-family operators on the CPU, speaking the kernel directory protocol for a
family export (`bnconf check --family F --exec ...`).

Usage: python adapters/mlx_family.py DIR      (MLX_GN_PYTORCH_COMPATIBLE=1: see group_norm)

Per case the adapter calls what an MLX user calls, on the case's arrays in the case's dtype
(adapters/_mlx.py: f32, f64, f16, bf16 and the mixed precisions; bf16 as bit patterns):

- layer_norm: `mx.fast.layer_norm(x, weight=gamma, bias=beta, eps)` (None where the case has no
  gamma/beta); rms_norm, convention `standard`: `mx.fast.rms_norm(x, weight=gamma, eps)`.  Both
  normalize the last axis only: with `normalized_ndim` k > 1, x is reshaped to
  `[*batch, prod(normalized)]` and gamma/beta flattened (a view of the same row-major values;
  the result reshaped back).  `y` only: MLX returns no statistics (`mean`/`rstd` not given).
  rms_norm `offset` ((1 + gamma)·xhat): unsupported — MLX has no such operator, and
  `weight = 1 + gamma` would be the adapter's rounding.
- group_norm: `mlx.nn.GroupNorm(groups, C, eps, affine, pytorch_compatible)` with its weight and
  bias set to gamma and beta (beta = zeros of the parameters' dtype for affine `weight`: MLX's
  module has both or neither; `affine=False` for `none`).  MLX's GroupNorm is channels-last
  (`[N, ..., C]`): nhwc, ndhwc and nc go in as they are; nchw, ncl, ncdhw are transposed to
  channels-last (`mx.transpose`, exact) and the result back.
  `pytorch_compatible` (MLX_GN_PYTORCH_COMPATIBLE=1; default False, what `nn.GroupNorm(G, C)`
  gives): with False MLX reshapes the channels to `[..., C/G, G]` and normalizes over the
  spatial axes and the C/G channels `c ≡ g (mod G)` — group g holds channels g, g+G, g+2G, …,
  not PyTorch's (and FORMAT.md's) consecutive channels g·C/G … (g+1)·C/G − 1 — with
  `mx.mean`/`mx.var` in x's dtype.  With True it groups consecutive channels and normalizes
  each group with `mx.fast.layer_norm` (no weight), then applies `weight·x + bias`.  The two
  agree when G = 1 or G = C.  MLX_GN_PERMUTE=1 (a diagnostic of the default path's arithmetic):
  the channels are gathered (`mx.take`, exact) so that MLX's strided group g holds FORMAT.md's
  group g, and the result gathered back.
- The backward ops: `mx.vjp` of the same forward with cotangent dy, with respect to x, gamma
  and beta (the ones the case has; beta = zeros where the case wants `dbeta`).
- eps: the case's eps as a Python float (mx.fast takes it as a C++ float; GroupNorm's default
  path adds it to x's-dtype variance as a Python scalar).
- Mixed precision (f16+f32, bf16+f32): MLX promotes half x with float32 weights to a float32
  y; that case is unsupported with the dtype MLX returned (a cast back would be the adapter's).
"""

import os
import sys

import mlx.core as mx
import mlx.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mlx import MX_DT, VERSION, serve  # noqa: E402
from _protocol import Unsupported, family_base, family_param_shape  # noqa: E402

PYTORCH_COMPATIBLE = os.environ.get("MLX_GN_PYTORCH_COMPATIBLE", "0") == "1"
PERMUTE = os.environ.get("MLX_GN_PERMUTE", "0") == "1"
NAME = f"{VERSION} family" + (" (GroupNorm pytorch_compatible=True)" if PYTORCH_COMPATIBLE else "") + (
    " (GroupNorm channels permuted to MLX's strided groups)" if PERMUTE else "")
# channels-first layouts: (to channels-last, back)
TO_LAST = {"nchw": ((0, 2, 3, 1), (0, 3, 1, 2)), "ncl": ((0, 2, 1), (0, 2, 1)),
           "ncdhw": ((0, 2, 3, 4, 1), (0, 4, 1, 2, 3))}


def last_axis(fn, case, x, *params):
    """fn on x with its trailing normalized_ndim axes merged into one (MLX's fast norms take the
    last axis only), the result in x's shape."""
    k = int(case["normalized_ndim"])
    batch = x.shape[: x.ndim - k]
    flat = [None if p is None else p.reshape(-1) for p in params]
    return fn(x.reshape(*batch, -1), *flat).reshape(x.shape)


def group_norm(case, x, g, b, eps):
    layout = case["layout"]
    c = x.shape[-1 if layout in ("nhwc", "ndhwc", "nc") else 1]
    gn = nn.GroupNorm(int(case["groups"]), c, eps=eps, affine=g is not None, pytorch_compatible=PYTORCH_COMPATIBLE)
    if g is not None:
        gn.weight = g
        gn.bias = b if b is not None else mx.zeros(g.shape, dtype=g.dtype)
    run = gn
    if PERMUTE:
        # MLX position j·G + g holds FORMAT.md's channel g·C/G + j (a gather, exact), so MLX's
        # group g (channels ≡ g mod G) is FORMAT.md's group g
        groups = int(case["groups"])
        perm = mx.array([(i % groups) * (c // groups) + i // groups for i in range(c)])
        inv = mx.argsort(perm)
        if g is not None:
            gn.weight, gn.bias = mx.take(gn.weight, perm), mx.take(gn.bias, perm)

        def run(x):
            return mx.take(gn(mx.take(x, perm, axis=-1)), inv, axis=-1)
    if layout in TO_LAST:
        to, back = TO_LAST[layout]
        return mx.transpose(run(mx.transpose(x, to)), back)
    return run(x)


def forward(op, case, x, g, b, eps):
    if op == "layer_norm":
        return last_axis(lambda x, g, b: mx.fast.layer_norm(x, g, b, eps), case, x, g, b)
    if op == "rms_norm":
        return last_axis(lambda x, g: mx.fast.rms_norm(x, g, eps), case, x, g)
    return group_norm(case, x, g, b, eps)


def run_case(case, inputs):
    op = case["op"]
    base = family_base(case, NAME, "mx.fast.rms_norm")
    eps = float(case["eps"])
    x, g, b = inputs["x"], inputs.get("gamma"), inputs.get("beta")
    if base == op:
        return {"y": forward(op, case, x, g, b, eps)}

    outs = case["outputs"]
    if "dbeta" in outs:
        b = mx.zeros(family_param_shape(case, x.shape), dtype=MX_DT[case["param_dtype"]])
    names = ["dx"] + (["dgamma"] if "dgamma" in outs else []) + (["dbeta"] if "dbeta" in outs else [])
    primals = [x] + ([g] if "dgamma" in outs else []) + ([b] if "dbeta" in outs else [])

    def fn(x, *p):
        it = iter(p)
        gg = next(it) if "dgamma" in outs else g
        bb = next(it) if "dbeta" in outs else b
        return forward(base, case, x, gg, bb, eps)

    y = fn(*primals)
    if y.dtype != inputs["dy"].dtype:
        raise Unsupported(f"{NAME}: {base} returns y as {y.dtype} for {x.dtype} x with {case['param_dtype']} parameters")
    _, grads = mx.vjp(fn, primals, [inputs["dy"]])
    return dict(zip(names, grads))


if __name__ == "__main__":
    serve(run_case, NAME)
