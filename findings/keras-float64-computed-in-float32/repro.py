"""Keras 3: a float64 BatchNormalization (and LayerNormalization, RMSNormalization,
GroupNormalization) computes in float32 on the jax, torch and numpy backends: its inputs,
statistics and output are float64 arrays, but every value carries float32 rounding.  In eval
mode, x = 0, moving_mean = -0.5, moving_variance = 1, gamma = 1, beta = 0, epsilon = 1e-5
(case.json, shrunk by bnconf) give y = 0.4999974966049194 = float32(0.5/sqrt(1 + 1e-5)), 1.8e7
times the float64 error budget, instead of 0.49999750001874...  The tensorflow backend computes
in float64 (the control).

Needs only keras, numpy and one or more of jax, torch, tensorflow (a backend not installed is
skipped; the numpy backend always runs).  Runs itself once per backend (KERAS_BACKEND is read
when keras is imported; on jax, jax_enable_x64 is switched on first, as float64 on JAX needs).
Prints expected vs got; exits 1 while the finding reproduces on some backend.

The cause (keras 3.15.1): keras/src/backend/common/dtypes.py, `_lattice_result_type` (behind
`keras.backend.result_type`) ends with
    out_dtype = BIT64_TO_BIT32_DTYPE.get(out_dtype, out_dtype)
where `BIT64_TO_BIT32_DTYPE = {..., "float64": "float64" if config.backend() == "tensorflow"
else "float32", ...}` ("Force to be 32-bit dtype when encountering 64-bit dtype. This is to be
aligned with JAX's default behavior"), whatever jax_enable_x64 says and on torch and numpy
too.  BatchNormalization.call (keras/src/layers/normalization/batch_normalization.py) does
    compute_dtype = backend.result_type(inputs.dtype, "float32")
    inputs = ops.cast(inputs, compute_dtype)
so result_type("float64", "float32") = "float32" casts x down; the layer casts y back to its
float64 compute dtype at the end.  ops.layer_normalization, ops.rms_normalization and
GroupNormalization._apply_normalization do the same; so does keras.ops.mean on jax (its
accumulation dtype).
"""

import importlib.util
import os
import subprocess
import sys

if len(sys.argv) > 1 and sys.argv[1] == "--one":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
    import numpy as np
    import keras

    be = keras.backend.backend()
    eng = "numpy" if be == "numpy" else f"{be} {importlib.import_module(be).__version__}"
    bn = keras.layers.BatchNormalization(axis=1, epsilon=1e-5, dtype="float64")
    bn.build((1, 1))
    bn.moving_mean.assign(np.full(1, -0.5))
    bn.moving_variance.assign(np.ones(1))
    x = keras.ops.convert_to_tensor(np.zeros((1, 1)), dtype="float64")
    y = bn(x, training=False)
    got = float(keras.ops.convert_to_numpy(y).ravel()[0])
    expected = 0.5 / np.sqrt(1 + 1e-5)  # float64, within an ulp or two
    as_f32 = float(np.float32(0.5) / np.sqrt(np.float32(1) + np.float32(1e-5)))
    ulps = abs(got - expected) / np.spacing(abs(expected))
    print(f"keras {keras.__version__}, backend {be} ({eng})")
    print(f"  keras.backend.result_type('float64', 'float32') = {keras.backend.result_type('float64', 'float32')!r}")
    print(f"  BatchNormalization(dtype='float64') eval: y.dtype = {keras.backend.standardize_dtype(y.dtype)}")
    print(f"    expected y = {float(expected)!r}")
    print(f"    got      y = {got!r}  ({ulps:.0f} float64 ulp off; the float32 computation gives {as_f32!r})")
    bad = ulps > 4
    print("  REPRODUCES" if bad else "  conforms")
    sys.exit(1 if bad else 0)

rc = 0
for backend in ("jax", "torch", "numpy", "tensorflow"):
    if backend != "numpy" and importlib.util.find_spec(backend) is None:
        print(f"({backend} not installed: skipped)")
        continue
    p = subprocess.run([sys.executable, __file__, "--one"], env={**os.environ, "KERAS_BACKEND": backend},
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    print(p.stdout, end="")
    if p.returncode not in (0, 1):
        print(f"  (backend {backend} failed to run: exit {p.returncode})")
    rc |= p.returncode == 1
sys.exit(1 if rc else 0)
