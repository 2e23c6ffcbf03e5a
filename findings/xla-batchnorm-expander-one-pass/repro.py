#!/usr/bin/env python3
"""XLA:CPU: stablehlo.batch_norm_training's batch variance of x = [1092.5, 1091] is 0.625
instead of 0.5625 (XLA expands the op into the one-pass E[x^2] - E[x]^2, without a clamp).

Needs only jax + jaxlib (XLA:CPU through PJRT; tested: jax/jaxlib 0.10.2). No jax tracing:
the StableHLO module below is compiled as it is.
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x: tensor<1x1x1x2xf32> (NCHW, feature_index = 1: one channel, two cells), scale = 1,
offset = 0, epsilon = 1e-5. Exact: mean = 1091.75, var = 9/16 = 0.5625,
y = ±0.75/sqrt(0.5625 + 1e-5); correctly rounded to f32: var 0x1.200000p-1,
y ±0x1.fffed6p-1 (bnconf golden findings/xla-batchnorm-expander-one-pass/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import xla_bridge  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402

MODULE = """func.func @main(%x: tensor<1x1x1x2xf32>, %g: tensor<1xf32>, %b: tensor<1xf32>)
    -> (tensor<1x1x1x2xf32>, tensor<1xf32>, tensor<1xf32>) {
  %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %g, %b)
      {epsilon = 9.99999974e-06 : f32, feature_index = 1 : i64}
      : (tensor<1x1x1x2xf32>, tensor<1xf32>, tensor<1xf32>)
      -> (tensor<1x1x1x2xf32>, tensor<1xf32>, tensor<1xf32>)
  return %y, %mean, %var : tensor<1x1x1x2xf32>, tensor<1xf32>, tensor<1xf32>
}
"""
backend = xla_bridge.get_backend("cpu")
dev = backend.devices()[0]
exe = backend.compile_and_load(MODULE, xla_client.DeviceList((dev,)), xla_client.CompileOptions())


def run(values):
    x = np.array(values, np.float32).reshape(1, 1, 1, 2)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    y, mean, var = (np.asarray(o) for o in exe.execute([jax.device_put(a, dev) for a in (x, one, zero)]))
    return [float(v) for v in y.ravel()], float(mean[0]), float(var[0])


print(f"jax/jaxlib {jax.__version__} ({backend.platform_version}), XLA:CPU")
y, mean, var = run([1092.5, 1091.0])
print("x = [1092.5, 1091.0]:")
print(f"  expected mean 1091.75, var 0.5625 (0x1.200000p-1), y = ±{float.fromhex('0x1.fffed6p-1')!r}")
print(f"  got      mean {mean!r}, var {var!r}, y = {y}")
y2, mean2, var2 = run([25045.0, 25046.0])
print("x = [25045.0, 25046.0] (exact var 0.25, y = ±0.99998):")
print(f"  got      mean {mean2!r}, var {var2!r}, y = {y2}")
reproduced = var != 0.5625
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
