#!/usr/bin/env python3
"""PyTorch's BatchNorm modules (`torch.nn.BatchNorm1d/2d`, whose forward is
`torch.nn.functional.batch_norm`), judged through `bnconf.torch` — the code behind
`bnconf.torch.check_module` — and speaking the kernel directory protocol.

Usage: python adapters/torch_bn.py DIR      (CPU by default; TORCH_BN_DEVICE=cuda for a GPU,
                                             where cuDNN/CUDA kernels run instead)

Per case this script builds the module with `bnconf.torch.build_module` — `BatchNorm1d` for
`rows`/`flat` (`[C, m]` viewed as `[1, C, m]`, BatchNorm1d's `(N, C, L)`), `BatchNorm2d` for
`chw` (`[1, C, H, W]`), `nchw` and `nhwc` (a channels-last strided view `permute(0, 3, 1, 2)`,
so PyTorch's channels-last kernel runs) — with `C`, `eps` (a Python float), the case's
momentum and `affine=True`, in the case dtype, and runs `bnconf.torch.module_kernel` on it
(python/src/bnconf/torch.py says what each op runs):

- forward: the module in training mode gives y; `mean` is `torch.native_batch_norm`'s
  `save_mean` (the kernel the module's forward runs), `var` is
  `torch.var_mean(x, dims, correction=0)` — PyTorch's own biased variance, what a user would
  call: the kernel itself returns only `1/sqrt(var + eps)` and keeps the *unbiased* variance in
  `running_var`.
- backward: autograd: `y = module(x)` with weight = gamma, bias = 0, `y.backward(dy)`, then
  `x.grad`, `weight.grad`, `bias.grad`.
- eval: `module.eval()` with running_mean/running_var = the handed-in mean/var.
- sync_forward: eval with `var = m2 - mean*mean` formed in torch in the dtype (glue: PyTorch's
  SyncBatchNorm gathers per-replica mean/invstd with `batch_norm_gather_stats_with_counts`,
  which has no CPU kernel).
- running_update, convention `pytorch`: PyTorch's own update — the buffers set to the
  handed-in running statistics, `module.momentum = a`, one training step, the buffers read
  back.  `onnx`: unsupported (PyTorch has one convention).
- m = 1 (one value per channel): `F.batch_norm` refuses training mode ("Expected more than 1
  value per channel when training") for forward, backward and running_update; those cases
  are reported unsupported with PyTorch's message.  `TORCH_BN_NATIVE=1` calls
  `torch.native_batch_norm` directly for running_update (no such check; its running variance
  is then `0/0 = NaN`: a diagnostic row).
- sync_backward, sync_stats: unsupported on CPU (`batch_norm_backward_elemt`,
  `batch_norm_backward_reduce` and `batch_norm_gather_stats_with_counts` have no CPU kernel);
  with TORCH_BN_DEVICE=cuda they are not wired either (they take invstd and sums, not the
  handed-in statistics of FORMAT.md, so they would judge glue as much as PyTorch).

The functions of tensors below (`EAGER`, `run_case`, `run_case_checked`: `F.batch_norm` on the
case's tensors, the same computations) are what torch_compile_bn.py compiles with
torch.compile, and what `TORCH_BN_NATIVE=1` runs."""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "src"))  # this clone's bnconf
import bnconf  # noqa: E402
import bnconf.torch  # noqa: E402
from _protocol import Unsupported, main  # noqa: E402

NAME = "torch_bn"
DEVICE = os.environ.get("TORCH_BN_DEVICE", "cpu")
NATIVE = os.environ.get("TORCH_BN_NATIVE", "0") == "1"

# The torch.nn class for each layout's [N, C, ...] view.
CLASS_FOR_LAYOUT = {
    "rows": torch.nn.BatchNorm1d,
    "flat": torch.nn.BatchNorm1d,
    "chw": torch.nn.BatchNorm2d,
    "nchw": torch.nn.BatchNorm2d,
    "nhwc": torch.nn.BatchNorm2d,
}


def build(case):
    """The module for one case: BatchNorm1d or BatchNorm2d, as bnconf builds a class."""
    cls = CLASS_FOR_LAYOUT.get(case.layout)
    if cls is None:
        raise bnconf.Unsupported(f"{NAME}: unknown layout {case.layout}")
    return bnconf.torch.build_module(cls, case, device=DEVICE)


MODULE_KERNEL = bnconf.torch.module_kernel(build, name=NAME, device=DEVICE)


def run_module_case(case, inp):
    """One case through the module (`bnconf.torch.module_kernel`); running_update through
    `torch.native_batch_norm` under TORCH_BN_NATIVE=1."""
    if NATIVE and case["op"] == "running_update":
        return run_case_checked(case, inp)
    try:
        return MODULE_KERNEL(bnconf.Case(case, inp))
    except bnconf.Unsupported as e:
        raise Unsupported(str(e)) from None


def to_nc(x, layout):
    """The case array as a torch tensor in PyTorch's [N, C, ...] view."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(DEVICE)
    if layout in ("rows", "flat"):
        return t.reshape(1, *x.shape)
    if layout == "chw":
        return t.reshape(1, *x.shape)
    if layout == "nchw":
        return t
    if layout == "nhwc":
        return t.permute(0, 3, 1, 2)
    raise Unsupported(f"{NAME}: unknown layout {layout}")


def from_nc(t, layout, shape):
    """Back to the case layout as a contiguous numpy array."""
    if layout == "nhwc":
        t = t.permute(0, 2, 3, 1)
    return t.detach().cpu().contiguous().numpy().reshape(shape)


def vec(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEVICE)


# The ops as functions of tensors: everything PyTorch computes for a case, from the case's
# tensors (already in PyTorch's [N, C, ...] view) to the tensors written back.  torch_bn runs
# them as they are (eager); torch_compile_bn.py runs the same functions through torch.compile.
def op_forward(xt, g, b, eps, dims):
    c = xt.shape[1]
    rm = torch.zeros(c, dtype=xt.dtype, device=xt.device)
    rv = torch.ones(c, dtype=xt.dtype, device=xt.device)
    y = F.batch_norm(xt, rm, rv, g, b, training=True, momentum=1.0, eps=eps)
    _, save_mean, _ = torch.native_batch_norm(xt, g, b, None, None, True, 1.0, eps)
    var, _ = torch.var_mean(xt, dim=dims, correction=0)
    return y, save_mean, var


def op_train_y(xg, g, b, eps):
    """Training-mode y of leaf tensors; backward is autograd of this (`y.backward(dy)`)."""
    return F.batch_norm(xg, None, None, g, b, training=True, momentum=0.0, eps=eps)


def op_eval(xt, mean, var, g, b, eps):
    return F.batch_norm(xt, mean, var, g, b, training=False, eps=eps)


def op_sync_forward(xt, mean, m2, g, b, eps):
    return F.batch_norm(xt, mean, m2 - mean * mean, g, b, training=False, eps=eps)


def op_running_update(xt, rm, rv, a):
    """Updates rm, rv in place (PyTorch's running statistics)."""
    F.batch_norm(xt, rm, rv, None, None, training=True, momentum=a, eps=1e-5)


def op_running_update_native(xt, rm, rv, a):
    torch.native_batch_norm(xt, None, None, rm, rv, True, a, 1e-5)


EAGER = {
    "forward": op_forward,
    "train_y": op_train_y,
    "eval": op_eval,
    "sync_forward": op_sync_forward,
    "running_update": op_running_update,
    "running_update_native": op_running_update_native,
}


def run_case(case, inp, fns=EAGER, name=NAME):
    """One case through `fns` (EAGER, or the same functions compiled)."""
    op, layout = case["op"], case["layout"]
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(
            f"{name}: SyncBatchNorm's kernels (batch_norm_backward_elemt/_reduce, "
            "batch_norm_gather_stats_with_counts) have no CPU implementation and take "
            "invstd/sums, not FORMAT.md's handed-in statistics"
        )
    if op not in ("forward", "backward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{name}: op {op} not implemented")
    eps = float(case["eps"])
    x = inp["x"]
    shape = x.shape
    xt = to_nc(x, layout)
    dims = [d for d in range(xt.dim()) if d != 1]

    if op == "forward":
        y, save_mean, var = fns["forward"](xt, vec(inp["gamma"]), vec(inp["beta"]), eps, dims)
        return {"y": from_nc(y, layout, shape), "mean": save_mean.detach().cpu().numpy(), "var": var.detach().cpu().numpy()}

    if op == "backward":
        c = xt.shape[1]
        xg = xt.detach().clone().requires_grad_(True)
        g = vec(inp["gamma"]).clone().requires_grad_(True)
        b = torch.zeros(c, dtype=xt.dtype, device=DEVICE, requires_grad=True)
        y = fns["train_y"](xg, g, b, eps)
        y.backward(to_nc(inp["dy"], layout))
        return {
            "dx": from_nc(xg.grad, layout, shape),
            "dgamma": g.grad.cpu().numpy(),
            "dbeta": b.grad.cpu().numpy(),
        }

    if op == "eval":
        y = fns["eval"](xt, vec(inp["mean"]), vec(inp["var"]), vec(inp["gamma"]), vec(inp["beta"]), eps)
        return {"y": from_nc(y, layout, shape)}
    if op == "sync_forward":
        y = fns["sync_forward"](xt, vec(inp["mean"]), vec(inp["m2"]), vec(inp["gamma"]), vec(inp["beta"]), eps)
        return {"y": from_nc(y, layout, shape)}

    # running_update
    if case["convention"] != "pytorch":
        raise Unsupported(f"{name}: PyTorch implements only the pytorch convention, not {case['convention']}")
    a = float(case["momentum"])
    rm, rv = vec(inp["running_mean"]).clone(), vec(inp["running_var"]).clone()
    fns["running_update_native" if NATIVE else "running_update"](xt, rm, rv, a)
    return {"new_mean": rm.cpu().numpy(), "new_var": rv.cpu().numpy()}


def run_case_checked(case, inp, fns=EAGER, name=NAME):
    """`run_case`, with PyTorch's refusal of one value per channel in training mode
    (`F.batch_norm`'s ValueError, forward/backward/running_update at m = 1) reported as
    unsupported, with PyTorch's message: the framework declines the case."""
    try:
        return run_case(case, inp, fns, name)
    except ValueError as e:
        if "Expected more than 1 value per channel" in str(e):
            raise Unsupported(f"{name}: F.batch_norm refuses this case: {e}")
        raise


if __name__ == "__main__":
    # One intra-op thread: PyTorch's CPU reductions split work by thread count, and the
    # committed reports should not depend on the machine's core count.
    torch.set_num_threads(1)
    main(run_module_case, NAME)
