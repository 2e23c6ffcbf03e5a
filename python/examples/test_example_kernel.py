"""Copy this file next to your kernel and run `pytest`: bnconf judges the kernel's outputs
against the exact reference on every case of its suite (layouts rows, flat, chw, nchw, nhwc;
core and ill-conditioned data), and a failure names the worst cases.

    pip install ./python pytest      # from a clone of the bnconf repository
    pytest test_example_kernel.py
"""

import numpy as np
import pytest

import bnconf


def my_batchnorm(case):
    """Replace with a call into your kernel. Return a dict of arrays, or None for a case
    your kernel does not implement (it is listed as unsupported)."""
    x = case.inputs["x"]
    dt = x.dtype.type
    axes = case.reduce_axes  # the axes the statistics reduce over for case.layout
    shape = [-1 if i == case.channel_axis else 1 for i in range(x.ndim)]

    def per_channel(v):  # a [C] array broadcast against x
        return v.reshape(shape)

    if case.op == "forward":
        gamma, beta = case.inputs["gamma"], case.inputs["beta"]
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)  # biased: divided by m
        y = per_channel(gamma) * (x - mean) / np.sqrt(var + dt(case.eps)) + per_channel(beta)
        return {"y": y, "mean": mean.reshape(-1), "var": var.reshape(-1)}
    if case.op == "eval":
        g, b, mean, var = (case.inputs[k] for k in ("gamma", "beta", "mean", "var"))
        y = per_channel(g) * (x - per_channel(mean)) / np.sqrt(per_channel(var) + dt(case.eps))
        return {"y": y + per_channel(b)}
    return None  # backward, sync_*, running_update, sync_stats: not implemented here


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_my_batchnorm_conforms(dtype):
    bnconf.assert_conforms(my_batchnorm, suite="default", dtype=dtype, ops=["forward", "eval"])


def test_report_by_hand():
    report = bnconf.check(my_batchnorm, dtype="float32", ops="forward", layouts="nhwc")
    assert report.ok, report  # str(report) lists the failing cases, worst first
    assert report.summary["worst_ratio"] <= 20
