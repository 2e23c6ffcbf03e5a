#!/usr/bin/env python3
"""IREE: stablehlo.batch_norm_training's batch variance of a single value x = 1091.25 is 0.0625
instead of 0 (IREE expands the op into the one-pass E[x^2] - E[x]^2, and with FMA on the host
CPU the difference is the rounding error of x^2).

Needs only iree-base-compiler and iree-base-runtime (tested: 3.13.0, llvm-cpu, local-sync).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x: tensor<1x1x1x1xf32> = 1091.25 (one channel, one cell), scale 1, offset 0,
feature_index 1, epsilon 1e-5. Exact: mean 1091.25, var 0, y = 0
(bnconf golden findings/iree-batch-norm-training-one-pass/case.json).
"""
import sys
from importlib.metadata import version

import iree.compiler as ic
import iree.runtime as rt
import numpy as np

T, C = "tensor<1x1x1x1xf32>", "tensor<1xf32>"
MODULE = f"""func.func @main(%x: {T}, %g: {C}, %b: {C}) -> ({T}, {C}, {C}) {{
  %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %g, %b)
      {{epsilon = 9.99999974e-06 : f32, feature_index = 1 : i64}} : ({T}, {C}, {C}) -> ({T}, {C}, {C})
  return %y, %mean, %var : {T}, {C}, {C}
}}
"""


def run(cpu):
    vmfb = ic.compile_str(MODULE, target_backends=["llvm-cpu"], input_type="stablehlo",
                          extra_args=["--iree-llvmcpu-target-cpu=" + cpu])
    ctx = rt.SystemContext(config=rt.Config("local-sync"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    outs = ctx.modules.module["main"](np.full((1, 1, 1, 1), 1091.25, np.float32),
                                      np.ones(1, np.float32), np.zeros(1, np.float32))
    return [float(np.asarray(o.to_host()).ravel()[0]) for o in outs]


print(f"iree-base-compiler {version('iree-base-compiler')}, iree-base-runtime {version('iree-base-runtime')}")
y, mean, var = run("host")
print("x = [1091.25] (one cell), --iree-llvmcpu-target-cpu=host:")
print("  expected mean 1091.25, var 0.0, y 0.0")
print(f"  got      mean {mean!r}, var {var!r}, y {y!r}")
x2 = float(np.float32(1091.25) * np.float32(1091.25))
print(f"  float32(x*x) = {x2!r}, exact x*x = {1091.25 * 1091.25!r}: "
      f"rounding error {x2 - 1091.25 * 1091.25!r}")
g = run("generic")
print(f"  --iree-llvmcpu-target-cpu=generic (no FMA): mean {g[1]!r}, var {g[2]!r}, y {g[0]!r}")
reproduced = var != 0.0
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
