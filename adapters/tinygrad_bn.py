#!/usr/bin/env python3
"""tinygrad's BatchNorm (`tinygrad.nn.BatchNorm`, also exported as BatchNorm2d/3d) on tinygrad's
CPU device (kernels rendered as C and built with clang), speaking the kernel directory protocol.

Usage: python adapters/tinygrad_bn.py DIR

Layouts map to tinygrad's `[N, C, ...]` (the layer reduces over every axis but 1):
`rows`/`flat` `[C, m]` -> `[1, C, m]`, `chw` -> `[1, C, H, W]`, `nchw` as is, `nhwc`
`[N, H, W, C]` -> `permute(0, 3, 1, 2)` (a tinygrad view; results are permuted back).  Every
tensor is in the case dtype: the layer's weight, bias, running_mean and running_var are
replaced by the case's tensors; eps and momentum are Python floats.

- forward: `nn.BatchNorm(C, eps=eps)` (default: affine, track_running_stats, momentum 0.1)
  called inside `Context(TRAINING=1)` gives y; `mean`/`var` are `bn.calc_stats(x)`, the
  method `__call__` normalizes with (two-pass: `((x - mean)**2).mean()`, biased).
- backward: tinygrad's autograd through the same training-mode call: `y.backward(dy)`, then
  `x.grad`, `weight.grad`, `bias.grad`.
- eval: the call outside TRAINING with running_mean/running_var = the handed-in mean/var;
  sync_forward: the same with `running_var = m2 - mean*mean` formed in tinygrad (glue).
- running_update, convention `pytorch`: one training-mode call with `momentum=a` on the
  handed-in running statistics, read back; tinygrad blends `(1 - a)·old + a·batch` with the
  batch variance × numel/(numel − C), i.e. m/(m − 1), PyTorch's convention.  `onnx`:
  unsupported.
- m = 1: the running-variance factor `x.numel()/(x.numel()-x.shape[1])` divides by zero in
  Python (ZeroDivisionError) inside every training-mode call of a layer that tracks running
  statistics (the default), so forward, backward and running_update raise there: the case is
  left without outputs and judged not conforming (it is not a refusal the layer states).
- sync_backward, sync_stats: unsupported (tinygrad has no cross-device BatchNorm)."""

import os
import sys

os.environ.setdefault("DEV", "CPU")
import numpy as np  # noqa: E402
from tinygrad import Device, Tensor, nn  # noqa: E402
from tinygrad.helpers import Context  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, main  # noqa: E402

NAME = "tinygrad_bn"
DEVICE = "CPU"


def tensor(a):
    # tinygrad 0.14 has no requires_grad: backward fills .grad of every float tensor in the graph
    return Tensor(np.ascontiguousarray(a), device=DEVICE)


def to_nc(t, layout):
    if layout in ("rows", "flat", "chw"):
        return t.reshape(1, *t.shape)
    if layout == "nchw":
        return t
    if layout == "nhwc":
        return t.permute(0, 3, 1, 2)
    raise Unsupported(f"{NAME}: unknown layout {layout}")


def from_nc(t, layout, shape):
    if layout == "nhwc":
        t = t.permute(0, 2, 3, 1)
    return np.ascontiguousarray(t.numpy()).reshape(shape)


def layer(c, eps, momentum=0.1, gamma=None, beta=None, rm=None, rv=None):
    bn = nn.BatchNorm(c, eps=eps, momentum=momentum)
    if gamma is not None:
        bn.weight = tensor(gamma)
    if beta is not None:
        bn.bias = tensor(beta)
    if rm is not None:
        bn.running_mean = tensor(rm)
    if rv is not None:
        bn.running_var = rv if isinstance(rv, Tensor) else tensor(rv)
    return bn


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: tinygrad has no cross-device (sync) BatchNorm")
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    eps = float(case["eps"])
    x = inp["x"]
    shape = x.shape
    c = x.shape[{"rows": 0, "flat": 0, "chw": 0, "nchw": 1, "nhwc": 3}[layout]]

    if op == "forward":
        xt = to_nc(tensor(x), layout)
        zeros = np.zeros(c, x.dtype)
        bn = layer(c, eps, gamma=inp["gamma"], beta=inp["beta"], rm=zeros, rv=zeros + 1)
        with Context(TRAINING=1):
            y = bn(xt)
            mean, var = bn.calc_stats(xt)
            y, mean, var = y.realize(), mean.realize(), var.realize()
        return {"y": from_nc(y, layout, shape), "mean": mean.numpy(), "var": var.numpy()}

    if op == "backward":
        xg = tensor(x)
        zeros = np.zeros(c, x.dtype)
        bn = layer(c, eps, gamma=inp["gamma"], beta=zeros, rm=zeros, rv=zeros + 1)
        with Context(TRAINING=1):
            y = bn(to_nc(xg, layout))
            y.backward(to_nc(tensor(inp["dy"]), layout))
        return {
            "dx": np.ascontiguousarray(xg.grad.numpy()).reshape(shape),
            "dgamma": bn.weight.grad.numpy(),
            "dbeta": bn.bias.grad.numpy(),
        }

    if op in ("eval", "sync_forward"):
        xt = to_nc(tensor(x), layout)
        if op == "eval":
            rv = tensor(inp["var"])
        else:
            mean = tensor(inp["mean"])
            rv = tensor(inp["m2"]) - mean * mean
        bn = layer(c, eps, gamma=inp["gamma"], beta=inp["beta"], rm=inp["mean"], rv=rv)
        with Context(TRAINING=0):
            y = bn(xt)
        return {"y": from_nc(y, layout, shape)}

    # running_update
    if case["convention"] != "pytorch":
        raise Unsupported(f"{NAME}: tinygrad implements only the pytorch convention, not {case['convention']}")
    a = float(case["momentum"])
    xt = to_nc(tensor(x), layout)
    bn = layer(c, 1e-5, momentum=a, rm=inp["running_mean"], rv=inp["running_var"])
    with Context(TRAINING=1):
        bn(xt).realize()
        bn.running_mean.realize()
        bn.running_var.realize()
    return {"new_mean": bn.running_mean.numpy(), "new_var": bn.running_var.numpy()}


if __name__ == "__main__":
    if Device.DEFAULT != DEVICE:
        sys.exit(f"{NAME}: tinygrad's default device is {Device.DEFAULT}, not {DEVICE}")
    main(run_case, NAME)
