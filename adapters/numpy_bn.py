#!/usr/bin/env python3
"""Textbook numpy BatchNorm, as people write it, speaking the kernel directory protocol.

Usage: python adapters/numpy_bn.py DIR   (or: bnconf check --exec 'python adapters/numpy_bn.py')

Every operation runs in the case dtype (float32 or float64): two-pass `x.mean(axis)` and
`x.var(axis)` (biased), `(x - mean) / np.sqrt(var + eps)` with eps rounded to the dtype
(what `var + 1e-5` does on a float32 array under numpy 2), the standard three-term backward
formula, and for the sync ops `var = m2 - mean**2` formed in the dtype from the handed-in
statistics.  The layout only chooses the reduction axes.

running_update (both conventions, textbook, in the case dtype with a = dtype(momentum)):
  pytorch: new_mean = (1-a)*running_mean + a*mean,
           new_var  = (1-a)*running_var + a*x.var(ddof=1)   (ddof=0 when m = 1)
  onnx:    new_mean = a*running_mean + (1-a)*mean,  new_var = a*running_var + (1-a)*x.var()
sync_stats (textbook count-weighted all-reduce): N = sum(n), mean = sum(n*shard_mean)/N,
  m2 = sum(n*shard_m2)/N, var = m2 - mean**2; shards with n = 0 are masked out with
  np.where (their values are arbitrary).
An op this adapter does not know is reported as unsupported, never as a failure."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402


def sync_stats(inp):
    n, smean, sm2 = inp["shard_count"], inp["shard_mean"], inp["shard_m2"]  # [R], [C, R], [C, R]
    dt = smean.dtype.type
    live = n > 0
    total = n.sum()
    mean = np.where(live, n * smean, dt(0)).sum(axis=1) / total
    m2 = np.where(live, n * sm2, dt(0)).sum(axis=1) / total
    var = m2 - mean * mean
    return {"mean": mean, "m2": m2, "var": var}


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op == "sync_stats":
        return sync_stats(inp)
    cax, axes = AXES[layout]
    if "x" not in inp:
        raise Unsupported(f"numpy_bn: op {op} (no input x) is not implemented")
    x = inp["x"]
    dt = x.dtype.type
    eps = dt(case["eps"])
    bshape = [1] * x.ndim
    bshape[cax] = -1

    def b(v):  # a per-channel [C] array, broadcast against x
        return v.reshape(bshape)

    def c(v):  # back to [C]
        return v.reshape(-1)

    m = dt(np.prod([x.shape[a] for a in axes]))

    if op == "forward":
        gamma, beta = inp["gamma"], inp["beta"]
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        y = b(gamma) * (x - mean) / np.sqrt(var + eps) + b(beta)
        return {"y": y, "mean": c(mean), "var": c(var)}

    if op == "backward":
        dy, gamma = inp["dy"], inp["gamma"]
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        inv_std = 1 / np.sqrt(var + eps)
        xhat = (x - mean) * inv_std
        dbeta = dy.sum(axis=axes, keepdims=True)
        dgamma = (dy * xhat).sum(axis=axes, keepdims=True)
        # dx = gamma/(m*sqrt(var+eps)) * (m*dy - sum(dy) - xhat*sum(dy*xhat))
        dx = b(gamma) * inv_std / m * (m * dy - dbeta - xhat * dgamma)
        return {"dx": dx, "dgamma": c(dgamma), "dbeta": c(dbeta)}

    if op == "eval":
        gamma, beta, mean, var = inp["gamma"], inp["beta"], inp["mean"], inp["var"]
        y = b(gamma) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(beta)
        return {"y": y}

    if op == "sync_forward":
        gamma, beta, mean, m2 = inp["gamma"], inp["beta"], inp["mean"], inp["m2"]
        var = m2 - mean * mean
        y = b(gamma) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(beta)
        return {"y": y}

    if op == "sync_backward":
        dy, gamma, mean, m2 = inp["dy"], inp["gamma"], inp["mean"], inp["m2"]
        mean_dy, mean_dy_xhat = inp["mean_dy"], inp["mean_dy_xhat"]
        var = m2 - mean * mean
        inv_std = 1 / np.sqrt(b(var) + eps)
        xhat = (x - b(mean)) * inv_std
        dx = b(gamma) * inv_std * (dy - b(mean_dy) - xhat * b(mean_dy_xhat))
        dgamma = (dy * xhat).sum(axis=axes)
        dbeta = dy.sum(axis=axes)
        return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}

    if op == "running_update":
        rm, rv = inp["running_mean"], inp["running_var"]
        a = dt(case["momentum"])
        one = dt(1)
        mean = x.mean(axis=axes)
        if case["convention"] == "pytorch":
            unbiased = x.var(axis=axes, ddof=1 if m > 1 else 0)
            return {"new_mean": (one - a) * rm + a * mean, "new_var": (one - a) * rv + a * unbiased}
        if case["convention"] == "onnx":
            var = x.var(axis=axes)
            return {"new_mean": a * rm + (one - a) * mean, "new_var": a * rv + (one - a) * var}
        raise Unsupported(f"numpy_bn: running_update convention {case['convention']!r} not implemented")

    raise Unsupported(f"numpy_bn: op {op} not implemented")


if __name__ == "__main__":
    main(run_case, "numpy_bn")
