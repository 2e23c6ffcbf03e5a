#!/usr/bin/env python3
"""JAX: jax.nn.standardize's default variance (algorithm="fast") is 0 for x = [3314, 3313].

Needs only jax (tested: jax/jaxlib 0.10.2, CPU).
Run: python repro.py  -> prints expected vs got; exit status 1 while the finding reproduces.

x has shape [1, 1, 1, 2] (NCHW, one channel, two cells), float32, epsilon = 1e-5, statistics
over axes (0, 2, 3). Exact: mean = 3313.5, var = 1/4, y = ±0.5/sqrt(1/4 + 1e-5) =
±0.99998000...; correctly rounded to float32: ±0x1.fffd60p-1
(bnconf golden findings/jax-standardize-fast-variance/case.json).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = [float.fromhex("0x1.fffd60p-1"), float.fromhex("-0x1.fffd60p-1")]
x = jnp.array([3314.0, 3313.0], dtype=jnp.float32).reshape(1, 1, 1, 2)
axes = (0, 2, 3)
y = jax.jit(lambda x: jax.nn.standardize(x, axes, epsilon=1e-5))(x)
y_stable = jax.jit(lambda x: jax.nn.standardize(x, axes, epsilon=1e-5, algorithm="stable"))(x)
got = [float(v) for v in np.asarray(y).ravel()]
stable = [float(v) for v in np.asarray(y_stable).ravel()]
m_x2 = jnp.mean(jnp.square(x), axes)
m2_x = jnp.square(jnp.mean(x, axes))

print(f"jax {jax.__version__}, jaxlib {jax.lib.__version__ if hasattr(jax.lib, '__version__') else '?'}, "
      f"backend {jax.default_backend()}")
print(f"expected y = {EXPECTED}")
print(f"got      y = {got}   (jax.nn.standardize default, algorithm='fast')")
print(f"algorithm='stable' gives {stable}")
print(f"fast variance = mean(x**2) - mean(x)**2 = {float(m_x2[0])!r} - {float(m2_x[0])!r} "
      f"= {float((m_x2 - m2_x)[0])!r} (clipped at 0), exact 0.25")
print(f"ratio got/expected = {got[0] / EXPECTED[0]:.6g}")
reproduced = any(abs(g - e) > 1e-3 for g, e in zip(got, EXPECTED))
print("REPRODUCED" if reproduced else "not reproduced (fixed?)")
sys.exit(1 if reproduced else 0)
