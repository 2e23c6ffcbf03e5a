#!/usr/bin/env python3
"""PyTorch's normalization family under `torch.compile` (TorchDynamo + Inductor, C++ generated
for the CPU and built with the machine's C++ compiler), speaking the kernel directory protocol
for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/torch_compile_family.py DIR

torch_family.py's adapter (the same loop, `bnconf.torch.module_kernel` per case: the same
modules, tensors, layouts, dtypes, unsupported cases, one intra-op thread) with each module's
forward — `F.layer_norm`, `F.rms_norm`, `F.group_norm` on its weight and bias — wrapped in
`torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False)`: what is judged is the
code Inductor generates for each case's shapes, strides (channels-last group_norm: the
channels-last view) and dtypes, and for the backward ops the backward graph AOTAutograd derives
from Inductor's decompositions and compiles (`y.backward(dy)` through the compiled forward).
The optional statistics (`mean`, `rstd`) are not given: they come from the eager `native_*`
ops, which the compiled graph does not expose (the wrapper is a module with its own forward,
so `bnconf.torch` does not read them). rms_norm's `offset` convention is unsupported, as in
torch_family.py.

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
from torch_family import bnconf  # noqa: E402  (this clone's bnconf, as torch_family imports it)

NAME = f"torch {torch.__version__} torch.compile (inductor, CPU)"


def _layer_norm(x, g, b, shape, eps):
    return F.layer_norm(x, shape, weight=g, bias=b, eps=eps)


def _rms_norm(x, g, shape, eps):
    return F.rms_norm(x, shape, weight=g, eps=eps)


def _group_norm(x, g, b, groups, eps):
    return F.group_norm(x, groups, weight=g, bias=b, eps=eps)


def _compile(f):
    return torch.compile(f, backend="inductor", fullgraph=True, dynamic=False)


COMPILED = {"layer_norm": _compile(_layer_norm), "rms_norm": _compile(_rms_norm), "group_norm": _compile(_group_norm)}


class Compiled(torch.nn.Module):
    """The module bnconf builds for the case (``inner``), its forward through Inductor's code:
    ``COMPILED[family](x, inner.weight, inner.bias, ...)``. ``weight``/``bias`` are the inner
    module's (bnconf sets them and reads their gradients)."""

    def __init__(self, family, inner):
        super().__init__()
        self.family, self.inner = family, inner

    @property
    def weight(self):
        return self.inner.weight

    @property
    def bias(self):
        return getattr(self.inner, "bias", None)

    def forward(self, x):
        m, eps = self.inner, float(self.inner.eps)
        if self.family == "group_norm":
            return COMPILED["group_norm"](x, m.weight, m.bias, int(m.num_groups), eps)
        shape = tuple(m.normalized_shape)
        if self.family == "rms_norm":
            return COMPILED["rms_norm"](x, m.weight, shape, eps)
        return COMPILED["layer_norm"](x, m.weight, m.bias, shape, eps)


def build(family):
    """case -> the compiled wrapper of the torch.nn module bnconf builds for the case."""
    cls = torch_family.CLASSES[family]

    def make(case):
        if family == "rms_norm" and case.convention == "offset":
            raise bnconf.Unsupported(
                f"{NAME}: convention offset: F.rms_norm computes weight*x*rstd; weight = 1 + gamma "
                "would be rounded by the adapter in the parameters' dtype, not by PyTorch"
            )
        return Compiled(family, bnconf.torch.build_module(cls, case))

    return make


if __name__ == "__main__":
    lift_recompile_limits()
    torch_family.main(build, NAME)
