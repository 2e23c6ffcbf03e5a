"""Keras 3: under a mixed dtype policy (`mixed_bfloat16`, `mixed_float16`),
`keras.layers.RMSNormalization` reads its float32 `scale` variable autocast to the half
compute dtype, so the float32 gradient of the scale (dgamma) comes back rounded to bfloat16
(float16): x = [[1, 3]] (bfloat16), dy = [[1, 1]], scale = [1, 1] (float32), eps = 1e-5 give
dgamma = [0.447265625, 1.34375] instead of x/sqrt(5 + 1e-5) = [0.44721314, 1.3416394]
(float32).  LayerNormalization, GroupNormalization and BatchNormalization opt out of
autocasting their parameters; RMSNormalization does not.

Needs only keras, numpy and one or more of jax, torch, tensorflow (a backend not installed is
skipped; the numpy backend has no autograd).  Runs itself once per backend; prints expected vs
got; exits 1 while the finding reproduces on some backend.

The cause (keras 3.15.1): keras/src/layers/normalization/rms_normalization.py,
`RMSNormalization.build`:
    self.scale = self.add_weight(name="scale", shape=shape, initializer="ones")
(no `autocast=False`, and __init__ sets no `self.autocast = False`), whereas
layer_normalization.py sets `self.autocast = False` and passes `autocast=False` to its
add_weight calls (group_normalization.py and batch_normalization.py pass `autocast=False`
too).  Under a mixed policy Layer.__call__ enters `AutocastScope(compute_dtype)`, reading
`self.scale` casts it to bfloat16; ops.rms_normalization then upcasts x and the (already
rounded) scale to float32, and autograd sends dgamma back through the cast: float32 sum,
rounded to bfloat16, widened to float32.  y is in bfloat16 anyway, so the forward hides it.
"""

import importlib.util
import os
import subprocess
import sys

if len(sys.argv) > 1 and sys.argv[1] == "--one":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import keras

    be = keras.backend.backend()
    layer = keras.layers.RMSNormalization(epsilon=1e-5, dtype="mixed_bfloat16")
    layer.build((1, 2))
    x = keras.ops.convert_to_tensor(np.array([[1.0, 3.0]]), dtype="bfloat16")
    dy = keras.ops.convert_to_tensor(np.array([[1.0, 1.0]]), dtype="bfloat16")
    if be == "jax":
        import jax

        def f(s):
            with keras.StatelessScope(state_mapping=[(layer.scale, s)]):
                return layer(x)

        y, pull = jax.vjp(f, layer.scale.value)
        (dgamma,) = pull(dy)
    elif be == "torch":
        import torch

        y = layer(x)
        (dgamma,) = torch.autograd.grad(y, [layer.scale.value], grad_outputs=dy)
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            y = layer(x)
        (dgamma,) = tape.gradient(y, [layer.scale], output_gradients=dy)
    got = keras.ops.convert_to_numpy(dgamma).astype(np.float64).ravel()
    expected = np.float32(np.array([1.0, 3.0]) / np.sqrt(5 + 1e-5)).astype(np.float64)
    print(f"keras {keras.__version__}, backend {be} ({be} {importlib.import_module(be).__version__}), mixed_bfloat16")
    print(f"  scale.dtype = {layer.scale.dtype}, dgamma.dtype = {keras.backend.standardize_dtype(dgamma.dtype)}")
    print(f"    expected dgamma = {expected.tolist()}  (float32 of x/sqrt(mean(x^2) + eps))")
    print(f"    got      dgamma = {got.tolist()}")
    bad = not np.allclose(got, expected, rtol=1e-6, atol=0)
    print("  REPRODUCES" if bad else "  fixed")
    sys.exit(1 if bad else 0)

rc = 0
for backend in ("jax", "torch", "tensorflow"):
    if importlib.util.find_spec(backend) is None:
        print(f"({backend} not installed: skipped)")
        continue
    p = subprocess.run([sys.executable, __file__, "--one"], env={**os.environ, "KERAS_BACKEND": backend},
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    print(p.stdout, end="")
    if p.returncode not in (0, 1):
        print(f"  (backend {backend} failed to run: exit {p.returncode})")
    rc |= p.returncode == 1
sys.exit(1 if rc else 0)
