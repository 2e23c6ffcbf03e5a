#!/usr/bin/env python3
"""MLX's BatchNorm (`mlx.nn.BatchNorm`) on the CPU, speaking the kernel directory protocol.

Usage: python adapters/mlx_bn.py DIR

MLX's BatchNorm is channels-last (`NC`, `NLC`, `NHWC`: 2 to 4 axes, the channel last, the
statistics over all the others).  Each layout's channel axis is moved last (`mx.transpose`,
exact): `rows`/`flat` `[C, m]` -> `[m, C]`, `chw` -> `[H, W, C]`, `nchw` -> `[N, H, W, C]`,
`nhwc` as is; the result is transposed back.  The module is `nn.BatchNorm(C, eps, momentum)`
with its weight and bias set to the case's gamma and beta, every array in the case's dtype
(adapters/_mlx.py: f32, f64, f16, bf16; mixed precisions where MLX returns the protocol's
dtypes), eps and momentum Python floats.

- forward: the module in training mode gives y; `mean`, `var` are what the module normalizes
  with: its `_calc_stats(x)` (`mx.mean` and `mx.var(ddof=0)` over the non-channel axes).  The
  module keeps only the *unbiased* variance in `running_var`.
- backward (a mixed-precision case is unsupported: MLX returns y in float32 for half x with
  float32 weights): `mx.vjp` of the training-mode module's y (weight = gamma, bias = 0) with
  cotangent dy, with respect to x, weight, bias (`track_running_stats=False`, so no running
  update is traced; y is computed the same way).
- eval: `bn.eval()` with `running_mean`/`running_var` = the handed-in mean/var; sync_forward:
  the same with var = `m2 - mean*mean` formed in MLX in the dtype (glue: MLX has no sync
  BatchNorm).
- running_update, convention `pytorch`: MLX's own update (`(1 − a)·running + a·batch`, the
  batch variance with ddof=1, as PyTorch): running_mean/running_var set to the handed-in ones,
  `momentum = a`, one training-mode call, the buffers read back.  `onnx`: unsupported (MLX has
  one convention).
- m = 1 (one value per channel): MLX refuses training mode ("BatchNorm training requires more
  than one value per channel"); forward, backward and running_update cases are then
  unsupported with MLX's message.
- sync_backward, sync_stats: unsupported (MLX has no sync BatchNorm)."""

import os
import sys

import mlx.core as mx
import mlx.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mlx import VERSION, serve  # noqa: E402
from _protocol import AXES, Unsupported  # noqa: E402

NAME = f"{VERSION} BatchNorm"


def module(case, c, gamma=None, beta=None, **kw):
    bn = nn.BatchNorm(c, eps=float(case["eps"]) if case.get("eps") else 1e-5, **kw)
    if gamma is not None:
        bn.weight, bn.bias = gamma, beta
    return bn


def training(bn, x):
    try:
        return bn(x)
    except ValueError as e:
        if "more than one value per channel" in str(e):
            raise Unsupported(f"{NAME}: MLX raises ValueError: {e}") from None
        raise


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: MLX has no sync BatchNorm (no entry point takes shard statistics)")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    x = inp["x"]
    ch = AXES[layout][0]
    to = tuple(a for a in range(x.ndim) if a != ch) + (ch,)
    if len(to) > 4:
        raise Unsupported(f"{NAME}: layout {layout}: nn.BatchNorm takes 2 to 4 axes, x has {len(to)}")
    back = tuple(int(i) for i in mx.argsort(mx.array(to)).tolist())
    xl = mx.transpose(x, to)
    c = x.shape[ch]

    def out(y):
        return mx.transpose(y, back)

    if op == "forward":
        bn = module(case, c, inp["gamma"], inp["beta"])
        y = training(bn, xl)
        mean, var = bn._calc_stats(xl)
        return {"y": out(y), "mean": mean, "var": var}

    if op == "backward":
        g = inp["gamma"]
        bn = module(case, c, g, mx.zeros(g.shape, dtype=g.dtype), track_running_stats=False)

        def fn(xx, w, b):
            bn.weight, bn.bias = w, b
            return training(bn, xx)

        y = fn(xl, g, bn.bias)
        if y.dtype != inp["dy"].dtype:
            raise Unsupported(f"{NAME}: BatchNorm returns y as {y.dtype} for {x.dtype} x with {g.dtype} parameters")
        _, (dx, dg, db) = mx.vjp(fn, [xl, g, bn.bias], [mx.transpose(inp["dy"], to)])
        return {"dx": out(dx), "dgamma": dg, "dbeta": db}

    if op in ("eval", "sync_forward"):
        bn = module(case, c, inp["gamma"], inp["beta"])
        bn.eval()
        mean = inp["mean"]
        bn.running_mean = mean
        bn.running_var = inp["var"] if op == "eval" else inp["m2"] - mean * mean
        return {"y": out(bn(xl))}

    # running_update
    if case["convention"] != "pytorch":
        raise Unsupported(f"{NAME}: MLX implements only the pytorch convention ((1 − a)·old + a·batch, unbiased), "
                          f"not {case['convention']}")
    bn = module(case, c, momentum=float(case["momentum"]))
    bn.running_mean, bn.running_var = inp["running_mean"], inp["running_var"]
    training(bn, xl)
    return {"new_mean": bn.running_mean, "new_var": bn.running_var}


if __name__ == "__main__":
    serve(run_case, NAME)
