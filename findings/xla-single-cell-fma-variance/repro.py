#!/usr/bin/env python3
"""XLA:CPU: stablehlo.batch_norm_training's variance of a single value is not 0
(-1.3e-8 and 1.5e-9 for x = [0.6118, -0.7057], one value per channel): the one-pass
E[x^2] - E[x]^2 of XLA's expansion, compiled with an FMA, returns the rounding error of x^2.

Needs only jax + jaxlib (XLA:CPU through PJRT; tested: jax/jaxlib 0.10.2 on x86-64 with FMA).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x: tensor<1x2x1x1xf32> (NCHW, feature_index = 1: two channels of one cell each), scale and
offset as below, epsilon 1e-5. Exact: mean = x, var = [0, 0], y = offset
(bnconf golden findings/xla-single-cell-fma-variance/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import xla_bridge  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402

h = lambda vs: np.array([float.fromhex(v) for v in vs], np.float32)  # noqa: E731
X = h(["0x1.393c16p-1", "-0x1.694db6p-1"]).reshape(1, 2, 1, 1)
SCALE = h(["0x1.d1ba48p+0", "0x1.e132cap+0"])
OFFSET = h(["0x1.5137ecp-1", "-0x1.9113dcp-1"])
T, C = "tensor<1x2x1x1xf32>", "tensor<2xf32>"
MODULE = f"""func.func @main(%x: {T}, %g: {C}, %b: {C}) -> ({T}, {C}, {C}) {{
  %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %g, %b)
      {{epsilon = 9.99999974e-06 : f32, feature_index = 1 : i64}} : ({T}, {C}, {C}) -> ({T}, {C}, {C})
  return %y, %mean, %var : {T}, {C}, {C}
}}
"""
backend = xla_bridge.get_backend("cpu")
dev = backend.devices()[0]
exe = backend.compile_and_load(MODULE, xla_client.DeviceList((dev,)), xla_client.CompileOptions())
y, mean, var = (np.asarray(o) for o in exe.execute([jax.device_put(a, dev) for a in (X, SCALE, OFFSET)]))
x2 = X.ravel() * X.ravel()  # float32 products
err = x2.astype(np.float64) - X.ravel().astype(np.float64) ** 2
print(f"jax/jaxlib {jax.__version__} ({backend.platform_version}), XLA:CPU")
print(f"x = {[float(v) for v in X.ravel()]} (one value per channel)")
print("expected var = [0.0, 0.0], mean = x, y = offset")
print(f"got      var = {[float(v) for v in var]}, mean {'= x' if (mean == X.ravel()).all() else mean}, "
      f"y {'= offset' if (y.ravel() == OFFSET).all() else y.ravel()}")
print(f"float32(x*x) - x*x (exact) = {[float(v) for v in err]}: the variance XLA returns")
reproduced = bool((var != 0).any())
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
