"""Flax's `flax.linen.LayerNorm` (and `GroupNorm`), with its default use_fast_variance=True,
normalizes the float32 row x = [3314, 3313] to y = +-158.1 instead of +-0.99998, and the row
x = [13439, 13443] to y = -+0.5 under jax.jit (-+632.5 eagerly) instead of -+0.99999875.

Needs only numpy, jax and flax (no bnconf). Prints expected vs got; exits 1 while the finding
reproduces. With --write it saves kernel/y.npy (the jitted LayerNorm's y on the first row, the
output bnconf judged).

The cause: flax/linen/normalization.py, `_compute_stats`: with use_fast_variance=True,
`mu, mu2 = maybe_distributed_mean(x, _abs_sq(x))` and `var = jnp.maximum(0.0, mu2 -
_abs_sq(mu))`: var = E[x*x] - E[x]**2 in float32.
- [3314, 3313]: E[x*x] = 10979282.5 and E[x]**2 = 10979282.25 both round to 10979282 (spacing
  1 there): var 0 (exact 1/4), y = 0.5/sqrt(eps) = 158.1; jit and eager agree.
- [13439, 13443]: E[x*x] = 180660485 and E[x]**2 = 13441**2 = 180660481 are 4 apart, below the
  float32 spacing there (16). Under jax.jit the fused square-and-sum gives sum(x*x) =
  361320992 (the rounding of fl(13443**2) + 13439**2 exact: a fused multiply-add), so var = 16
  (exact 4) and y = 2/sqrt(16) = 0.5; eagerly each square is rounded first, the sum is
  361320960 and var 0.
use_fast_variance=False (the two-pass mean((x - mean)**2)) gives the right y on both.
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
from flax import linen as nn  # noqa: E402

eps = 1e-5
params = {"params": {"scale": jnp.ones(2, jnp.float32), "bias": jnp.zeros(2, jnp.float32)}}


def jitted(m):
    return jax.jit(lambda p, x: m.apply(p, x))


print(f"flax {flax.__version__}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, numpy {np.__version__}")
bad = False
first = None
for row, mean, var in (([3314.0, 3313.0], 3313.5, 0.25), ([13439.0, 13443.0], 13441.0, 4.0)):
    x = jnp.asarray(np.array([row], np.float32))  # one row of 2, normalized over the last axis
    ln = nn.LayerNorm(epsilon=eps)  # Flax's defaults: use_fast_variance=True
    got = np.asarray(jitted(ln)(params, x))
    got_eager = np.asarray(ln.apply(params, x))
    two_pass = np.asarray(jitted(nn.LayerNorm(epsilon=eps, use_fast_variance=False))(params, x))
    # GroupNorm: x as [N=1, C=2], one group of the two channels
    got_gn = np.asarray(jitted(nn.GroupNorm(num_groups=1, epsilon=eps))(params, x))
    expected = (np.array(row) - mean) / np.sqrt(var + eps)
    s = jax.jit(lambda x: (x.mean(-1), jnp.square(x).mean(-1)))(x)
    mu, mu2 = (np.float32(np.asarray(a)[0]) for a in s)
    print(f"\nx = {row} (float32), eps = {eps}: exact mean {mean}, var {var}")
    print(f"expected y = {expected.tolist()}")
    print(f"got      y = {got.ravel().tolist()}   (nn.LayerNorm, jax.jit)")
    print(f"got      y = {got_eager.ravel().tolist()}   (nn.LayerNorm, eager)")
    print(f"got      y = {got_gn.ravel().tolist()}   (nn.GroupNorm(num_groups=1), jax.jit)")
    print(f"use_fast_variance=False: y = {two_pass.ravel().tolist()}   (nn.LayerNorm, jax.jit)")
    print(f"float32 one-pass under jit: E[x] = {float(mu)!r}, E[x*x] = {float(mu2)!r}, "
          f"E[x*x] - E[x]**2 = {float(mu2 - mu * mu)!r}")  # fmt: skip
    bad |= not np.allclose(got.ravel(), expected, rtol=1e-5, atol=0)
    first = got if first is None else first
if "--write" in sys.argv:
    os.makedirs("kernel", exist_ok=True)
    np.save(os.path.join("kernel", "y.npy"), first)
print("\nREPRODUCES" if bad else "\nfixed")
sys.exit(1 if bad else 0)
