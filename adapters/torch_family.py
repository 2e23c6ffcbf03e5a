#!/usr/bin/env python3
"""PyTorch's normalization-family operators on the CPU, speaking the kernel directory protocol
for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/torch_family.py DIR

Per case the adapter calls the torch.nn.functional operator a user would call, on the case's
tensors (torch.from_numpy, no copy through another dtype), in the case's dtype:

- layer_norm: `F.layer_norm(x, x.shape[-normalized_ndim:], weight=gamma, bias=beta, eps)`
  gives `y` (weight/bias None where the case has none); the optional `mean`, `rstd` are
  `torch.native_layer_norm`'s second and third results (the kernel F.layer_norm runs on the
  CPU; shape `[*batch, 1, ...]`, reshaped to the batch shape), written when their dtype is the
  case's `param_dtype` (PyTorch keeps them in the parameters' type: x's type, or float32 for
  half x with float32 parameters).
- rms_norm, convention `standard`: `F.rms_norm(x, x.shape[-normalized_ndim:], weight=gamma,
  eps)`; `y` only (F.rms_norm returns no statistics).  `offset` ((1 + gamma)·xhat):
  unsupported — PyTorch has no such operator, and handing it `weight = 1 + gamma` would add a
  rounding of 1 + gamma in the parameters' dtype that is the adapter's, not PyTorch's.
- group_norm on nc, ncl, nchw, ncdhw: `F.group_norm(x, groups, weight=gamma, bias=beta, eps)`;
  nhwc, ndhwc: x viewed as `[N, C, ...]` (`permute`) with channels-last strides
  (`.contiguous(memory_format=torch.channels_last)`, `channels_last_3d` for 5-D), so PyTorch's
  channels-last GroupNorm kernel runs, and the result permuted back.  The optional `mean`,
  `rstd` (`[N, G]`) are `torch.native_group_norm`'s second and third results (the kernel
  F.group_norm runs), written when their dtype is the case's `param_dtype`.
- The backward ops: autograd of the same forward (`torch.autograd.grad(y, ..., grad_outputs=dy)`)
  with respect to x, gamma and beta — the ones the case has (beta = zeros, requiring grad,
  where the case wants `dbeta`: a backward case's inputs are x, dy, gamma).  rms_norm's
  backward is autograd through whatever F.rms_norm runs on the CPU.
- eps: the case's eps as a Python float (PyTorch's CPU kernels use it in their accumulation
  type: float32 for f32/f16/bf16 x, float64 for f64).
- dtypes f32, f64, f16 and bf16 (torch.bfloat16: the protocol's `<u2` bit patterns are viewed
  as bfloat16 and the outputs' bits written back, no rounding by the adapter).
- Mixed precision (f16+f32, bf16+f32): PyTorch's CPU layer_norm and group_norm kernels take
  half x with float32 parameters; whatever PyTorch raises, or an output PyTorch returns in
  another dtype than the protocol's, makes the case unsupported with that reason: a cast by the
  adapter would be glue.  (torch 2.15 raises nothing and keeps y in x's type: every mixed case
  runs.  The statistics of an `affine: none` case come back in x's type, not float32: not
  given.  layer_norm_backward's float32 dgamma/dbeta are summed over the rows in a buffer of
  x's half type, so they carry half-type rounding: those cases do not conform.)
- Threads: one intra-op thread (`torch.set_num_threads(1)`, as torch_bn.py;
  TORCH_FAMILY_THREADS=n sets n).  The rows' dgamma/dbeta partial sums are split per thread,
  so layer_norm_backward's ratios (not its verdicts, in these suites) depend on the thread
  count.
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, family_base, main_precisions  # noqa: E402

NAME = f"torch {torch.__version__} (CPU)"
TORCH_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
CHANNELS_LAST = {"nhwc": (torch.channels_last, (0, 3, 1, 2), (0, 2, 3, 1)),
                 "ndhwc": (torch.channels_last_3d, (0, 4, 1, 2, 3), (0, 2, 3, 4, 1))}
def to_torch(a, dt):
    if dt == "bf16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(t, dt):
    t = t.detach().contiguous()
    if dt == "bf16":
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def to_kernel_view(t, layout):
    """The case array as PyTorch's [N, C, ...] tensor (channels-last strides for nhwc/ndhwc)."""
    if layout in CHANNELS_LAST:
        fmt, to_nc, _ = CHANNELS_LAST[layout]
        return t.permute(*to_nc).contiguous(memory_format=fmt)
    return t


def from_kernel_view(t, layout):
    if layout in CHANNELS_LAST:
        t = t.permute(*CHANNELS_LAST[layout][2])
    return t.contiguous()


def forward(op, case, x, g, b, eps):
    """y of the forward op, on PyTorch's view of x."""
    if op == "layer_norm":
        k = int(case["normalized_ndim"])
        return F.layer_norm(x, tuple(x.shape[x.dim() - k:]), weight=g, bias=b, eps=eps)
    if op == "rms_norm":
        k = int(case["normalized_ndim"])
        return F.rms_norm(x, tuple(x.shape[x.dim() - k:]), weight=g, eps=eps)
    return F.group_norm(x, int(case["groups"]), weight=g, bias=b, eps=eps)


def statistics(op, case, x, g, b, eps):
    """(mean, rstd) of the native kernel the functional runs, in the case's statistic shapes."""
    if op == "layer_norm":
        k = int(case["normalized_ndim"])
        _, mean, rstd = torch.native_layer_norm(x, list(x.shape[x.dim() - k:]), g, b, eps)
        batch = tuple(x.shape[: x.dim() - k])
        return mean.reshape(batch), rstd.reshape(batch)
    n, c = x.shape[0], x.shape[1]
    hw = 1
    for s in x.shape[2:]:
        hw *= s
    # F.group_norm calls native_group_norm on input.contiguous(input.suggest_memory_format()):
    # x is already dense in its format (to_kernel_view)
    _, mean, rstd = torch.native_group_norm(x, g, b, n, c, hw, int(case["groups"]), eps)
    return mean, rstd


def run_case(case, inputs):
    op = case["op"]
    base = family_base(case, NAME, "F.rms_norm")
    layout = case["layout"]
    eps = float(case["eps"])
    x = to_kernel_view(inputs["x"], layout)
    g = inputs.get("gamma")
    b = inputs.get("beta")

    if base == op:
        y = forward(op, case, x, g, b, eps)
        result = {"y": from_kernel_view(y, layout)}
        if op != "rms_norm" and any(s in case["outputs"] for s in ("mean", "rstd")):
            stats = statistics(op, case, x, g, b, eps)
            if stats is not None:  # (torch_compile_family.py gives none)
                result["mean"], result["rstd"] = stats
        return result

    # backward: autograd of the forward, cotangent dy
    dy = to_kernel_view(inputs["dy"], layout)
    outs = case["outputs"]
    xg = x.detach().clone().requires_grad_(True)  # clone keeps channels-last strides
    wrt, names = [xg], ["dx"]
    if g is not None:
        g = g.detach().clone().requires_grad_("dgamma" in outs)
        if "dgamma" in outs:
            wrt.append(g)
            names.append("dgamma")
    if "dbeta" in outs:
        pshape = g.shape if g is not None else (
            x.shape[1:2] if base == "group_norm" else x.shape[x.dim() - int(case["normalized_ndim"]):])
        pdt = TORCH_DT[case["param_dtype"]]
        b = torch.zeros(pshape, dtype=pdt, requires_grad=True)
        wrt.append(b)
        names.append("dbeta")
    y = forward(base, case, xg, g, b, eps)
    if y.dtype != dy.dtype:
        raise Unsupported(f"{NAME}: {base} returns y as {y.dtype} for {x.dtype} x with {case['param_dtype']} parameters")
    grads = torch.autograd.grad(y, wrt, grad_outputs=dy)
    result = {}
    for n, t in zip(names, grads):
        result[n] = from_kernel_view(t, layout) if n == "dx" else t
    return result


def main():
    # One intra-op thread by default, as torch_bn.py: the rows' dgamma/dbeta partial sums are
    # split per thread, so the reports' ratios would depend on the machine's core count.
    torch.set_num_threads(int(os.environ.get("TORCH_FAMILY_THREADS", "1")))

    def run(case, inputs):
        with torch.no_grad() if not case["op"].endswith("_backward") else torch.enable_grad():
            return run_case(case, inputs)

    main_precisions(run, f"{NAME} (family)", "PyTorch", TORCH_DT, to_torch, to_numpy)


if __name__ == "__main__":
    main()
