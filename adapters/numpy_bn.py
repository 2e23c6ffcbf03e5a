#!/usr/bin/env python3
"""Textbook numpy BatchNorm, as people write it, speaking the kernel directory protocol.

Usage: python adapters/numpy_bn.py DIR   (or: bnconf check --exec 'python adapters/numpy_bn.py')

Every operation runs in the case dtype (float32 or float64): two-pass `x.mean(axis)` and
`x.var(axis)` (biased), `(x - mean) / np.sqrt(var + eps)` with eps rounded to the dtype
(what `var + 1e-5` does on a float32 array under numpy 2), the standard three-term backward
formula, and for the sync ops `var = m2 - mean**2` formed in the dtype from the handed-in
statistics.  The layout only chooses the reduction axes."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, main  # noqa: E402


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    cax, axes = AXES[layout]
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

    raise ValueError(f"unknown op {op}")


if __name__ == "__main__":
    main(run_case, "numpy_bn")
