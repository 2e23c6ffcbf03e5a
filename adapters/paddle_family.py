#!/usr/bin/env python3
"""PaddlePaddle's normalization-family operators on the CPU (dygraph mode), speaking the kernel
directory protocol for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/paddle_family.py DIR

Per case the adapter calls the `paddle.nn.functional` operator a user calls, on the case's
tensors in the case's dtype (paddle.to_tensor of the npy array; bf16 bit patterns viewed as
bfloat16 and written back as bits), one OpenMP thread (as paddle_bn.py):

- layer_norm: `F.layer_norm(x, x.shape[-normalized_ndim:], weight=gamma, bias=beta, epsilon=eps)`
  gives `y` (Paddle's functional returns no statistics: `mean`/`rstd` not given).  gamma and
  beta go in flattened to 1-D (`reshape([-1])`) when normalized_ndim > 1: Paddle's LayerNorm
  takes 1-D parameters ("The dimensions of Input(Scale) must be 1"), the shape
  paddle.nn.LayerNorm gives its own.  Paddle refuses eps > 0.001 for LayerNorm ("'epsilon' in
  Op(LayerNorm) should be between 0.0 and 0.001"): those cases are unsupported with that message.
- rms_norm: `F.rms_norm(x, normalized_shape, weight=gamma, eps)` exists in Paddle 3.3.1, but
  its kernel is not registered for the CPU ("The kernel `rms_norm` is not registered"): every
  rms_norm case is unsupported with Paddle's message.  `offset`: unsupported (no such operator).
- group_norm: `F.group_norm(x, groups, epsilon=eps, weight=gamma, bias=beta, data_format=...)`
  with data_format `NCL` for nc and ncl (nc viewed as `[N, C, 1]`), `NCHW`, `NCDHW`, and
  Paddle's own channels-last kernels `NHWC`, `NDHWC` for nhwc, ndhwc.
- The backward ops: `paddle.grad([y], [x, gamma, beta], [dy])` through the same forward (beta =
  zeros, requiring grad, where the case wants `dbeta`).
- A kernel Paddle has not registered for the dtype ("is not registered"; the CPU layer_norm has
  float32 and float64 only), or any exception Paddle raises on a mixed-precision case, makes
  the case unsupported with Paddle's message: a cast would be the adapter's.
"""

import os
import sys

# One OpenMP thread (read when Paddle loads), so the reports do not depend on the core count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, family_base, family_param_shape, main_precisions  # noqa: E402

NAME = f"paddle {paddle.__version__} (CPU)"
PADDLE_DT = {"f32": paddle.float32, "f64": paddle.float64, "f16": paddle.float16, "bf16": paddle.bfloat16}
FORMATS = {"nc": "NCL", "ncl": "NCL", "nchw": "NCHW", "ncdhw": "NCDHW", "nhwc": "NHWC", "ndhwc": "NDHWC"}


def to_paddle(a, dt):
    t = paddle.to_tensor(np.ascontiguousarray(a), place=paddle.CPUPlace())
    return t.view(paddle.bfloat16) if dt == "bf16" else t


def to_numpy(t, dt):
    if dt == "bf16":
        return t.view(paddle.uint16).numpy().copy()
    return t.numpy().copy()


def forward(op, case, x, g, b, eps):
    if op == "layer_norm":
        k = int(case["normalized_ndim"])
        # Paddle's LayerNorm weight and bias are 1-D, the normalized shape flattened (what
        # paddle.nn.LayerNorm creates); their gradients come back in the case's shape
        flat = [None if p is None else p.reshape([-1]) for p in (g, b)]
        return F.layer_norm(x, list(x.shape[x.ndim - k:]), weight=flat[0], bias=flat[1], epsilon=eps)
    if op == "rms_norm":
        k = int(case["normalized_ndim"])
        return F.rms_norm(x, list(x.shape[x.ndim - k:]), weight=g, eps=eps)[0]
    layout = case["layout"]
    xv = x.reshape([*x.shape, 1]) if layout == "nc" else x
    y = F.group_norm(xv, int(case["groups"]), epsilon=eps, weight=g, bias=b, data_format=FORMATS[layout])
    return y.reshape(x.shape) if layout == "nc" else y


def run_case(case, inputs):
    op = case["op"]
    base = family_base(case, NAME, "F.rms_norm")
    eps = float(case["eps"])
    x, g, b = inputs["x"], inputs.get("gamma"), inputs.get("beta")
    if base == op:
        return {"y": forward(op, case, x, g, b, eps)}

    outs = case["outputs"]
    x = x.detach()
    x.stop_gradient = False
    wrt, names = [x], ["dx"]
    if g is not None and "dgamma" in outs:
        g = g.detach()
        g.stop_gradient = False
        wrt.append(g)
        names.append("dgamma")
    if "dbeta" in outs:
        b = paddle.zeros(list(family_param_shape(case, x.shape)), dtype=PADDLE_DT[case["param_dtype"]])
        b.stop_gradient = False
        wrt.append(b)
        names.append("dbeta")
    y = forward(base, case, x, g, b, eps)
    if y.dtype != inputs["dy"].dtype:
        raise Unsupported(f"{NAME}: {base} returns y as {y.dtype} for {x.dtype} x with {case['param_dtype']} parameters")
    grads = paddle.grad([y], wrt, [inputs["dy"]])
    return dict(zip(names, grads))


def run(case, inputs):
    try:
        return run_case(case, inputs)
    except (RuntimeError, ValueError) as e:
        msg = str(e).splitlines()[0]
        if "is not registered" in msg or "'epsilon' in Op(LayerNorm) should be between" in msg:
            raise Unsupported(f"{NAME}: {case['op']} in {case['dtype']}: Paddle raises {msg}") from None
        raise


if __name__ == "__main__":
    paddle.set_device("cpu")
    main_precisions(run, NAME, "Paddle", PADDLE_DT, to_paddle, to_numpy)
