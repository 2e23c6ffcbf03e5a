#!/usr/bin/env python3
"""IREE 3.13.0 refuses stablehlo.batch_norm_grad (related to this finding, not a wrong number).

Needs only iree-base-compiler. Run: python repro_grad.py -> prints the compiler error."""
import iree.compiler as ic
T, C = "tensor<1x1x1x2xf32>", "tensor<1xf32>"
M = f"""func.func @main(%x: {T}, %g: {C}, %m: {C}, %v: {C}, %dy: {T}) -> ({T}, {C}, {C}) {{
  %dx, %dg, %db = "stablehlo.batch_norm_grad"(%x, %g, %m, %v, %dy)
      {{epsilon = 9.99999974e-06 : f32, feature_index = 1 : i64}} : ({T}, {C}, {C}, {C}, {T}) -> ({T}, {C}, {C})
  return %dx, %dg, %db : {T}, {C}, {C}
}}
"""
try:
    ic.compile_str(M, target_backends=["llvm-cpu"], input_type="stablehlo")
    print("compiled")
except ic.CompilerToolError as e:
    print([l for l in str(e).splitlines() if "error:" in l][0])
