#!/usr/bin/env python3
"""PyTorch's normalization family under `torch.compile` (TorchDynamo + Inductor, C++ generated
for the CPU and built with the machine's C++ compiler), speaking the kernel directory protocol
for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/torch_compile_family.py DIR

torch_family.py's adapter (the same tensors, layouts, dtypes, unsupported cases, one intra-op
thread) with its forward — `F.layer_norm`, `F.rms_norm`, `F.group_norm` — wrapped in
`torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False)`: what is judged is the
code Inductor generates for each case's shapes, strides (channels-last group_norm: the
channels-last view) and dtypes, and for the backward ops the backward graph AOTAutograd derives
from Inductor's decompositions and compiles (`torch.autograd.grad` through the compiled
forward). The optional statistics (`mean`, `rstd`) are not given: they come from the eager
`native_*` ops, which the compiled graph does not expose.

No silent eager fallback: `fullgraph=True` raises on a graph break and the recompile limits
are lifted (every case is a new specialisation), as torch_compile_bn.py.
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_family  # noqa: E402
from torch_compile_bn import lift_recompile_limits  # noqa: E402


def _layer_norm(x, g, b, shape, eps):
    return F.layer_norm(x, shape, weight=g, bias=b, eps=eps)


def _rms_norm(x, g, shape, eps):
    return F.rms_norm(x, shape, weight=g, eps=eps)


def _group_norm(x, g, b, groups, eps):
    return F.group_norm(x, groups, weight=g, bias=b, eps=eps)


def _compile(f):
    return torch.compile(f, backend="inductor", fullgraph=True, dynamic=False)


COMPILED = {"layer_norm": _compile(_layer_norm), "rms_norm": _compile(_rms_norm), "group_norm": _compile(_group_norm)}


def forward(op, case, x, g, b, eps):
    """y of the forward op through Inductor's code, on PyTorch's view of x."""
    if op == "group_norm":
        return COMPILED[op](x, g, b, int(case["groups"]), eps)
    k = int(case["normalized_ndim"])
    shape = tuple(x.shape[x.dim() - k:])
    if op == "rms_norm":
        return COMPILED[op](x, g, shape, eps)
    return COMPILED[op](x, g, b, shape, eps)


def no_statistics(*_):
    return None


if __name__ == "__main__":
    lift_recompile_limits()
    torch_family.NAME = f"torch {torch.__version__} torch.compile (inductor, CPU)"
    torch_family.forward = forward
    torch_family.statistics = no_statistics
    torch_family.main()
