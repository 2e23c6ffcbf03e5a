"""The kernel directory protocol (docs/FORMAT.md) for the Keras 3 adapters (keras_family.py,
keras_bn.py): one Keras backend per process, every precision Keras expresses.

Backend: the environment variable KERAS_BACKEND (`jax`, `torch`, `tensorflow`, `numpy`; no
default here: the adapter refuses to start without it), set before `import keras`, as Keras
reads it.  Every backend runs on the CPU (CUDA_VISIBLE_DEVICES="" before the import).  JAX:
`jax_enable_x64` is switched on (without it JAX silently makes float64 arrays float32; a
float64 Keras layer on JAX needs it).  torch: one intra-op thread (`torch.set_num_threads(1)`,
as torch_family.py; KERAS_TORCH_THREADS=n sets n).

Precisions (the layer's `dtype=` argument, a Keras dtype policy):

- f32, f64, f16, bf16: the policy `"float32"`, `"float64"`, `"float16"`, `"bfloat16"`:
  variables and computation nominally in that dtype (Keras's normalization layers upcast half
  x to float32 internally and cast y back: that is Keras's arithmetic, judged as it is).
- f16+f32, bf16+f32: the mixed policies `"mixed_float16"`, `"mixed_bfloat16"` (variables in
  float32, compute dtype half): half x, float32 gamma/beta, what Keras's mixed-precision
  training runs.  An output Keras returns in another dtype than the protocol's makes the case
  unsupported with that reason (_protocol.main_precisions; a cast would be the adapter's).

Arrays go in with `keras.ops.convert_to_tensor(a, dtype)`; bf16 inputs (the protocol's `<u2`
bit patterns) are first viewed as `ml_dtypes.bfloat16` (exact), bf16 outputs written back as
their bits.

Autograd (the backward ops), per backend, of `layer(x)` (the layer's `__call__`, so Keras's
autocast and input casting run as in training):

- jax: `jax.vjp` of `x, *params -> layer(x)` run inside `keras.StatelessScope` mapping the
  layer's trainable variables to the traced params (what Keras's JAX trainer does through
  `stateless_call`), cotangent dy;
- torch: `torch.autograd.grad(y, [x, *variable.value], dy)` (the variables' torch Parameters);
- tensorflow: `tf.GradientTape` watching x, `tape.gradient(y, [x, *variables],
  output_gradients=dy)`;
- numpy: none (Keras's NumPy backend has no autograd and cannot train): every backward case is
  unsupported with that reason."""

import os
import sys

BACKEND = os.environ.get("KERAS_BACKEND")
if BACKEND not in ("jax", "torch", "tensorflow", "numpy"):
    sys.exit("_keras.py: set KERAS_BACKEND to jax, torch, tensorflow or numpy")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

if BACKEND == "jax":
    import jax

    jax.config.update("jax_enable_x64", True)
elif BACKEND == "torch":
    import torch

    torch.set_num_threads(int(os.environ.get("KERAS_TORCH_THREADS", "1")))

import keras  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, main_precisions  # noqa: E402

assert keras.backend.backend() == BACKEND, (keras.backend.backend(), BACKEND)

_ENGINE_VERSION = {
    "jax": lambda: f"jax {jax.__version__}",
    "torch": lambda: f"torch {torch.__version__}",
    "tensorflow": lambda: f"tensorflow {__import__('tensorflow').__version__}",
    "numpy": lambda: f"numpy {np.__version__}",
}
VERSION = f"keras {keras.__version__} ({BACKEND} backend, {_ENGINE_VERSION[BACKEND]()}, CPU)"

KERAS_DT = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16"}
# (dtype, param_dtype) -> the layer's dtype policy
POLICY = {
    ("f32", "f32"): "float32",
    ("f64", "f64"): "float64",
    ("f16", "f16"): "float16",
    ("bf16", "bf16"): "bfloat16",
    ("f16", "f32"): "mixed_float16",
    ("bf16", "f32"): "mixed_bfloat16",
}


def policy(case):
    key = (case["dtype"], case.get("param_dtype", case["dtype"]))
    if key not in POLICY:
        raise Unsupported(f"{VERSION}: no Keras dtype policy for {key[0]} x with {key[1]} parameters")
    return POLICY[key]


def dtype_of(t):
    return keras.backend.standardize_dtype(t.dtype)


def to_keras(a, dt):
    a = np.ascontiguousarray(a)
    if dt == "bf16":
        a = a.view(ml_dtypes.bfloat16)
    return keras.ops.convert_to_tensor(a, dtype=KERAS_DT[dt])


class _Out:
    """A backend tensor with its Keras dtype name (main_precisions compares `.dtype`)."""

    def __init__(self, t):
        self.t, self.dtype = t, dtype_of(t)


def to_numpy(o, dt):
    a = np.asarray(keras.ops.convert_to_numpy(o.t))
    if dt == "bf16":
        # the tensor is bfloat16 (checked); a backend may hand it out widened to float32: exact
        return np.ascontiguousarray(a.astype(ml_dtypes.bfloat16)).view(np.uint16).copy()
    return a.copy()


def assign(var, value):
    """Set a Keras variable to a tensor of its own dtype (no rounding: refuse anything else)."""
    if dtype_of(value) != var.dtype:
        raise TypeError(f"{var.path}: {dtype_of(value)} value for a {var.dtype} variable")
    var.assign(value)


def vjp(layer, x, variables, dy, call):
    """(dx, [d variable]) of `call(layer, x)` with cotangent dy, by the backend's autograd."""
    if BACKEND == "numpy":
        raise Unsupported(f"{VERSION}: Keras's NumPy backend has no autograd (no backward)")
    if BACKEND == "jax":
        def f(xx, *vals):
            with keras.StatelessScope(state_mapping=list(zip(variables, vals))):
                return call(layer, xx)

        y, pull = jax.vjp(f, x, *[v.value for v in variables])
        if dtype_of(y) != dtype_of(dy):
            raise Unsupported(f"{VERSION}: {layer.__class__.__name__} returns y as {dtype_of(y)}, dy is {dtype_of(dy)}")
        grads = pull(dy)
        return grads[0], list(grads[1:])
    if BACKEND == "torch":
        xx = x.detach().clone().requires_grad_(True)
        y = call(layer, xx)
        if dtype_of(y) != dtype_of(dy):
            raise Unsupported(f"{VERSION}: {layer.__class__.__name__} returns y as {dtype_of(y)}, dy is {dtype_of(dy)}")
        params = [v.value for v in variables]
        grads = torch.autograd.grad(y, [xx, *params], grad_outputs=dy, allow_unused=True)
        return grads[0], list(grads[1:])
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(x)
        y = call(layer, x)
    if dtype_of(y) != dtype_of(dy):
        raise Unsupported(f"{VERSION}: {layer.__class__.__name__} returns y as {dtype_of(y)}, dy is {dtype_of(dy)}")
    grads = tape.gradient(y, [x, *variables], output_gradients=dy)
    return grads[0], list(grads[1:])


def serve(run_case, name):
    """Visit DIR/*/case.json (DIR = argv[1]), call `run_case(case, inputs) -> {output: tensor}`
    with the inputs as backend tensors, write DIR/<case>/out/ (_protocol.main_precisions)."""
    def run(case, inputs):
        return {k: _Out(v) for k, v in run_case(case, inputs).items()}

    main_precisions(run, name, f"Keras ({BACKEND})", KERAS_DT, to_keras, to_numpy)
