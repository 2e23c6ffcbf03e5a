"""The kernel directory protocol (docs/FORMAT.md) for the MLX adapters (mlx_family.py, mlx_bn.py):
every precision MLX has on the CPU (f32, f64, f16, bf16 and the mixed f16+f32 / bf16+f32).

Arrays go to MLX with their own dtype (`mx.array(a, dtype=...)`: without it MLX would make a
float64 numpy array float32); bf16 arrays, stored as `<u2` bit patterns by the protocol, are
viewed as bfloat16 (`mx.array(bits).view(mx.bfloat16)`) and the outputs' bits written back:
no rounding by the adapter.  An output MLX returns in another dtype than the protocol's makes
the case unsupported with that reason (a cast would be the adapter's); so does any exception
MLX raises on a mixed-precision case."""

import os
import sys

import mlx.core as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import main_precisions  # noqa: E402

MX_DT = {"f32": mx.float32, "f64": mx.float64, "f16": mx.float16, "bf16": mx.bfloat16}
VERSION = f"mlx {mx.__version__} (CPU)"


def to_mx(a, dt):
    a = np.ascontiguousarray(a)
    if dt == "bf16":
        return mx.array(a).view(mx.bfloat16)
    return mx.array(a, dtype=MX_DT[dt])


def to_numpy(t, dt):
    if dt == "bf16":
        return np.array(t.view(mx.uint16)).copy()
    return np.array(t).copy()


def serve(run_case, name):
    """Visit DIR/*/case.json (DIR = argv[1]), call `run_case(case, inputs) -> {output: mx.array}`
    with the inputs as MLX arrays on the CPU, write DIR/<case>/out/ (_protocol.main_precisions)."""
    mx.set_default_device(mx.cpu)

    def run(case, inputs):
        outs = run_case(case, inputs)
        mx.eval(outs)
        return outs

    main_precisions(run, name, "MLX", MX_DT, to_mx, to_numpy)
