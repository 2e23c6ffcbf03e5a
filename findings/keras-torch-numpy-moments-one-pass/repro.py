"""Keras 3's GroupNormalization on the torch and numpy backends normalizes x = [3314, 3313]
(one group of two channels, float32; case.json) to y = +-158.125 instead of +-0.99998, and
x = [2369.25, 2369.75, 2370.25] to y = NaN instead of [-1.2247, 0, 1.2247]:
`keras.ops.moments` on those backends forms the variance in one pass, E[x*x] - E[x]**2, in
float32: for the first x both terms round to 10979282 (variance 0, exact 1/4, so
y = 0.5/sqrt(eps)), for the second the difference is negative (-0.5, exact 1/6) and, with no
clamp at 0, rsqrt(var + eps) is NaN.  The jax and tensorflow backends' moments are two-pass.

Needs only keras, numpy and torch (the numpy backend needs nothing more).  Runs itself once
per backend (KERAS_BACKEND must be set before keras is imported); prints expected vs got;
exits 1 while the finding reproduces.

The cause (keras 3.15.1): keras/src/backend/torch/nn.py, `moments`:
    variance = torch.mean(torch.square(x), dim=axes, keepdim=True) - torch.square(mean)
and keras/src/backend/numpy/nn.py, `moments`:
    variance = np.mean(np.square(x), axis=axes, keepdims=True) - np.square(mean)
GroupNormalization._apply_normalization calls ops.moments (keras/src/layers/normalization/
group_normalization.py); so do BatchNormalization (training) on both backends and
LayerNormalization on the numpy backend (the torch backend's LayerNormalization calls
F.layer_norm instead).
"""

import os
import subprocess
import sys

if os.environ.get("KERAS_BACKEND") in ("torch", "numpy") and len(sys.argv) > 1 and sys.argv[1] == "--one":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import numpy as np
    import keras

    eng = "numpy" if keras.backend.backend() == "numpy" else "torch " + __import__("torch").__version__
    print(f"keras {keras.__version__}, backend {keras.backend.backend()} ({eng}, numpy {np.__version__})")
    bad = False
    # [N=1, C], groups=1: one group of C channels (case.json is the first)
    for vals in ([3314.0, 3313.0], [2369.25, 2369.75, 2370.25]):
        x = np.array([vals], np.float32)
        gn = keras.layers.GroupNormalization(groups=1, axis=1, epsilon=1e-5)
        y = keras.ops.convert_to_numpy(gn(x)).ravel()
        _, var = keras.ops.moments(keras.ops.convert_to_tensor(x), axes=[1])
        exact_var = np.var(np.array(vals, np.float64))  # 1/4, 1/6: exact enough here
        expected = (np.array(vals) - np.mean(vals)) / np.sqrt(exact_var + 1e-5)
        print(f"  x = {vals}")
        print(f"    expected y = {expected.tolist()}")
        print(f"    got      y = {y.tolist()}")
        print(f"    keras.ops.moments variance = {keras.ops.convert_to_numpy(var).ravel().tolist()} (exact {exact_var})")
        bad |= not np.allclose(y, expected, rtol=1e-4, atol=1e-4)
    print("  REPRODUCES" if bad else "  fixed")
    sys.exit(1 if bad else 0)

rc = 0
for backend in ("torch", "numpy"):
    p = subprocess.run([sys.executable, __file__, "--one"], env={**os.environ, "KERAS_BACKEND": backend},
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    print(p.stdout, end="")
    rc |= p.returncode
sys.exit(1 if rc else 0)
