#!/usr/bin/env python3
"""StableHLO on XLA:CPU: a float64 stablehlo.batch_norm_inference computes with float32(epsilon).

Needs only jax + jaxlib (XLA:CPU through PJRT; tested: jax/jaxlib 0.10.2). No jax tracing.
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x: tensor<1x1x1x1xf64> = 1, scale 1, offset 0, mean 0, variance 1, feature_index 1, and the
epsilon the user wants is 1e-5. StableHLO's `epsilon` attribute is an f32, so the closest a
module can say is 1.0e-05 : f32 = 9.99999974737875e-06.
Exact: y = 1/sqrt(1 + 1e-5) = 0.99999500003749968...; correctly rounded to f64
0x1.ffff583aa62f5p-1 (bnconf golden findings/stablehlo-f32-epsilon/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import xla_bridge  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402

jax.config.update("jax_enable_x64", True)
EXPECTED = float.fromhex("0x1.ffff583aa62f5p-1")
T, C = "tensor<1x1x1x1xf64>", "tensor<1xf64>"
MODULE = f"""func.func @main(%x: {T}, %g: {C}, %b: {C}, %m: {C}, %v: {C}) -> {T} {{
  %y = "stablehlo.batch_norm_inference"(%x, %g, %b, %m, %v)
      {{epsilon = 1.0e-05 : f32, feature_index = 1 : i64}} : ({T}, {C}, {C}, {C}, {C}) -> {T}
  return %y : {T}
}}
"""
backend = xla_bridge.get_backend("cpu")
dev = backend.devices()[0]
exe = backend.compile_and_load(MODULE, xla_client.DeviceList((dev,)), xla_client.CompileOptions())
args = [np.ones((1, 1, 1, 1)), np.ones(1), np.zeros(1), np.zeros(1), np.ones(1)]
got = float(np.asarray(exe.execute([jax.device_put(a, dev) for a in args])[0]).ravel()[0])
eps32 = float(np.float32(1e-5))
ulp = float(np.spacing(EXPECTED))
print(f"jax/jaxlib {jax.__version__} ({backend.platform_version}), XLA:CPU, float64")
print(f"expected y = {EXPECTED!r} ({EXPECTED.hex()})")
print(f"got      y = {got!r} ({got.hex()})")
print(f"error: {abs(got - EXPECTED) / ulp:.0f} ulp; 1/sqrt(1 + float32(1e-5)) = "
      f"{float(1 / np.sqrt(1 + eps32))!r} (epsilon as the module holds it: {eps32!r})")
try:  # an f64 epsilon is not allowed by the op definition
    backend.compile_and_load(MODULE.replace("1.0e-05 : f32", "1.0e-05 : f64"),
                             xla_client.DeviceList((dev,)), xla_client.CompileOptions())
    print("epsilon = 1.0e-05 : f64: accepted")
except Exception as e:  # noqa: BLE001
    print("epsilon = 1.0e-05 : f64: refused:", str(e).splitlines()[0])
reproduced = abs(got - EXPECTED) > 4 * ulp
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
