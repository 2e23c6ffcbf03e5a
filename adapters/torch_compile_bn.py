#!/usr/bin/env python3
"""PyTorch's BatchNorm under `torch.compile` (TorchDynamo + Inductor, C++ code generated for the
CPU and built with the machine's C++ compiler), speaking the kernel directory protocol.

Usage: python adapters/torch_compile_bn.py DIR
       TORCH_COMPILE_DYNAMIC=1 ...   dynamic=None (Dynamo's default: a shape that changes is
                                     recompiled with symbolic sizes) instead of dynamic=False

The same op functions as torch_bn.py (`torch_bn.EAGER`: `F.batch_norm` training forward with
`native_batch_norm`'s save_mean and `torch.var_mean(correction=0)`, training y whose autograd
gives backward, eval, eval with `m2 − mean²`, the running statistics `F.batch_norm(training=True,
momentum=a)` leaves), each wrapped in `torch.compile(fn, backend="inductor", fullgraph=True,
dynamic=False)`, so what is judged is the code Inductor generates for each case's shapes and
strides (`nhwc`: the channels-last view, as in torch_bn), and for backward the backward graph
AOTAutograd derives and Inductor compiles.  Layout glue, the protocol and the unsupported ops
are torch_bn.py's.

No silent eager fallback: `fullgraph=True` raises on a graph break, the recompile limits are
lifted (each case's shapes and eps are a new specialisation; past Dynamo's default limit of 8
it would quietly run eager), and the adapter counts on stderr the graphs Dynamo compiled.
One intra-op thread (`torch.set_num_threads(1)` before compiling: Inductor's C++ is then
serial), as torch_bn."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bn  # noqa: E402
from _protocol import Unsupported, main  # noqa: E402

NAME = "torch_compile_bn"
DYNAMIC = None if os.environ.get("TORCH_COMPILE_DYNAMIC", "0") == "1" else False


def lift_recompile_limits():
    cfg = torch._dynamo.config
    for k in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, k):
            setattr(cfg, k, 1 << 30)
    # A hit limit raises instead of falling back to eager (where the option exists).
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True


COMPILED = {k: torch.compile(f, backend="inductor", fullgraph=True, dynamic=DYNAMIC) for k, f in torch_bn.EAGER.items()}


def run_case(case, inp):
    """torch_bn's run_case through the compiled functions.  F.batch_norm's refusal of one value
    per channel in training mode is raised while Dynamo traces (with fake tensors) and arrives
    wrapped in a TorchRuntimeError; it is the same refusal as eager's, reported unsupported."""
    try:
        return torch_bn.run_case_checked(case, inp, COMPILED, NAME)
    except torch._dynamo.exc.TorchRuntimeError as e:
        if "Expected more than 1 value per channel" in str(e):
            raise Unsupported(f"{NAME}: F.batch_norm refuses this case (raised while Dynamo traces it): "
                              "Expected more than 1 value per channel when training")
        raise


if __name__ == "__main__":
    torch.set_num_threads(1)
    lift_recompile_limits()
    main(run_case, NAME)
    from torch._dynamo.utils import counters

    stats = dict(counters["stats"])
    print(f"{NAME}: dynamo stats {stats}, graph breaks {sum(counters['graph_break'].values())}", file=sys.stderr)
