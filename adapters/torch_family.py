#!/usr/bin/env python3
"""PyTorch's normalization-family modules on the CPU (`torch.nn.LayerNorm`, `torch.nn.RMSNorm`,
`torch.nn.GroupNorm`), judged through `bnconf.torch` — the code behind
`bnconf.torch.check_module` — and speaking the kernel directory protocol for a family export
(`bnconf check --family F --exec ...`).

Usage: python adapters/torch_family.py DIR

This script keeps only the protocol loop (`bnconf.run_suite_dir`: case.json and the input npy
files in, `out/<output>.npy`, `out/unsupported` or `out/error` written); per case
`bnconf.torch.module_kernel` builds the module from the case and runs it, exactly as
`bnconf.torch.check_module(torch.nn.LayerNorm, family="layer_norm", ...)` does in process
(python/src/bnconf/torch.py says what each op runs):

- layer_norm: `LayerNorm(x.shape[-normalized_ndim:], eps, elementwise_affine, bias)` in the
  parameter dtype, `weight <- gamma`, `bias <- beta`; `y = module(x)` (its forward is
  `F.layer_norm`); the optional `mean`, `rstd` are `torch.native_layer_norm`'s second and third
  results (the kernel F.layer_norm runs on the CPU), given when PyTorch keeps them in the
  case's `param_dtype` (the parameters' type: x's type, or float32 for half x with float32
  parameters).
- rms_norm, convention `standard`: `RMSNorm(x.shape[-normalized_ndim:], eps,
  elementwise_affine)`; `y` only (no statistics).  `offset` ((1 + gamma)·xhat): unsupported —
  PyTorch has no such module, and `weight = 1 + gamma` would add a rounding of 1 + gamma in
  the parameters' dtype that is the adapter's, not PyTorch's.
- group_norm: `GroupNorm(groups, C, eps, affine, bias)`; on nhwc/ndhwc x is viewed as
  `[N, C, ...]` with channels-last strides (`channels_last`, `channels_last_3d`), so PyTorch's
  channels-last GroupNorm kernel runs, and the result permuted back.  The optional `mean`,
  `rstd` (`[N, G]`) are `torch.native_group_norm`'s (the kernel the module's forward runs).
- The backward ops: autograd of the same module (`y.backward(dy)`): `dx = x.grad`, `dgamma =
  weight.grad`, `dbeta = bias.grad` (bias = 0 for a backward case, whose inputs are x, dy,
  gamma).
- eps: the case's eps as a Python float (PyTorch's CPU kernels use it in their accumulation
  type: float32 for f32/f16/bf16 x, float64 for f64).
- dtypes f32, f64, f16 and bf16 (torch.bfloat16: the protocol's bit patterns become
  float32 and then bfloat16, both exact, and the outputs are written back as bfloat16 bits:
  exact, no rounding by the adapter).
- Mixed precision (f16+f32, bf16+f32): half x, float32 module; an error PyTorch raises for the
  dtype pair, or an output PyTorch returns in another dtype than the protocol's, makes the
  case unsupported with that reason: a cast by the adapter would be glue.  (torch 2.15 raises
  nothing and keeps y in x's type: every mixed case runs.  The statistics of an `affine: none`
  case come back in x's type, not float32: not given.  layer_norm_backward's float32
  dgamma/dbeta are summed over the rows in a buffer of x's half type, so they carry half-type
  rounding: those cases do not conform.)
- Threads: one intra-op thread (`torch.set_num_threads(1)`, as torch_bn.py;
  TORCH_FAMILY_THREADS=n sets n).  The rows' dgamma/dbeta partial sums are split per thread,
  so layer_norm_backward's ratios (not its verdicts, in these suites) depend on the thread
  count.

torch_compile_family.py runs the same loop with the modules' forward compiled (`kernel`,
`main` below take the module builder).
"""

import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "src"))  # this clone's bnconf
import bnconf  # noqa: E402
import bnconf.torch  # noqa: E402

NAME = f"torch {torch.__version__} (CPU)"

#: The torch.nn class judged for each family.
CLASSES = {"layer_norm": torch.nn.LayerNorm, "rms_norm": torch.nn.RMSNorm, "group_norm": torch.nn.GroupNorm}


def kernel(build=None, name=NAME):
    """The kernel ``case -> outputs`` of a family export: ``bnconf.torch.module_kernel`` for
    the case's family, on the module ``build(family)`` gives (a torch.nn class, or a callable
    ``case -> nn.Module``; default: CLASSES[family])."""
    kernels = {
        f: bnconf.torch.module_kernel(cls if build is None else build(f), family=f, name=name)
        for f, cls in CLASSES.items()
    }

    def run(case):
        k = kernels.get(case.family)
        if k is None:
            raise bnconf.Unsupported(f"{name}: family {case.family} not wired in this adapter")
        return k(case)

    return run


def main(build=None, name=NAME):
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    # One intra-op thread by default, as torch_bn.py: the rows' dgamma/dbeta partial sums are
    # split per thread, so the reports' ratios would depend on the machine's core count.
    torch.set_num_threads(int(os.environ.get("TORCH_FAMILY_THREADS", "1")))

    def on_error(case, e):
        print(f"{name}: case {case.id} raised; no outputs written:", file=sys.stderr)
        traceback.print_exception(e)

    n = bnconf.run_suite_dir(kernel(build, name), sys.argv[1], on_error=on_error)
    print(f"{name} (family): {n['computed']} computed, {n['unsupported']} unsupported, "
          f"{n['raised']} raised", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
