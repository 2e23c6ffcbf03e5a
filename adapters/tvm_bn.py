#!/usr/bin/env python3
"""Apache TVM's Relax `nn.batch_norm`, built for the CPU (`tvm.compile(mod, target="llvm")`,
the LLVM bundled in the apache-tvm wheel) and run on Relax's VirtualMachine, speaking the
kernel directory protocol.

Usage: python adapters/tvm_bn.py DIR

One Relax function per case (`relax.BlockBuilder`), every parameter a tensor in the case
dtype, `relax.op.nn.batch_norm(x, gamma, beta, moving_mean, moving_var, axis=<channel axis>,
epsilon=eps, momentum=..., training=...)`, legalized by TVM's default pipeline to its TOPI
kernel (`topi.nn.batch_norm`: two-pass `Σx/m`, `Σ(x − mean)²/m`, then
`(x − mean)/sqrt(var + eps)·gamma + beta`), compiled and run.  The op takes any channel axis,
so every layout runs as it is (no reshapes).

- forward: `training=True, momentum=1`: the op returns `(y, (1 − momentum)·moving_mean +
  momentum·batch_mean, (1 − momentum)·moving_var + momentum·batch_var)`, which with
  momentum 1 is exactly its batch mean and (biased) batch variance: `mean`/`var`.
- eval: `training=False` with moving_mean/moving_var = the handed-in mean/var; sync_forward:
  the same with `var = subtract(m2, multiply(mean, mean))` in the Relax function (glue).
- running_update: TVM blends `(1 − μ)·old + μ·batch` with the **biased** batch variance, which
  is the `onnx` convention `a·old + (1 − a)·batch` with μ = 1 − a (the adapter passes
  `momentum = 1 − a`, a double; TVM's `1 − μ` then gives back a exactly for the suite's
  momenta).  `pytorch` (unbiased running variance): unsupported.
- backward: unsupported: Relax's autodiff (`relax.transform.Gradient`) has no gradient for
  `nn.batch_norm` ("Attribute FPrimalGradient has not been registered for
  relax.nn.batch_norm").
- sync_backward, sync_stats: unsupported (no collective)."""

import os
import sys

# One runtime thread, so the reports do not depend on the core count (read when TVM loads).
os.environ.setdefault("TVM_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, main  # noqa: E402

NAME = "tvm_bn"
DTYPE = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def run(arrays, body):
    """Build main(*arrays) -> body(*vars), compile it for the CPU, run it on the arrays."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"a{i}", relax.TensorType(a.shape, DTYPE[a.dtype])) for i, a in enumerate(arrays)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit(body(*params))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    ex = tvm.compile(bb.get(), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays])
    return [r.numpy() for r in res]


def run_case(case, inp):
    op, layout = case["op"], case["layout"]
    if op == "backward":
        raise Unsupported(f"{NAME}: Relax's autodiff (relax.transform.Gradient) has no gradient for nn.batch_norm "
                          "(FPrimalGradient not registered for relax.nn.batch_norm)")
    if op in ("sync_backward", "sync_stats"):
        raise Unsupported(f"{NAME}: TVM has no cross-device batch norm")
    if op not in ("forward", "eval", "sync_forward", "running_update"):
        raise Unsupported(f"{NAME}: op {op} not implemented")
    eps = float(case["eps"])
    x = inp["x"]
    ax = AXES[layout][0]
    c = x.shape[ax]
    zeros = np.zeros(c, x.dtype)
    bn = relax.op.nn.batch_norm

    if op == "forward":
        y, mean, var = run([x, inp["gamma"], inp["beta"], zeros, zeros + 1],
                           lambda x, g, b, m, v: bn(x, g, b, m, v, axis=ax, epsilon=eps, momentum=1.0, training=True))
        return {"y": y, "mean": mean, "var": var}
    if op == "eval":
        y, _, _ = run([x, inp["gamma"], inp["beta"], inp["mean"], inp["var"]],
                      lambda x, g, b, m, v: bn(x, g, b, m, v, axis=ax, epsilon=eps, training=False))
        return {"y": y}
    if op == "sync_forward":
        def body(x, g, b, m, m2):
            v = relax.op.subtract(m2, relax.op.multiply(m, m))
            return bn(x, g, b, m, v, axis=ax, epsilon=eps, training=False)

        y, _, _ = run([x, inp["gamma"], inp["beta"], inp["mean"], inp["m2"]], body)
        return {"y": y}

    # running_update
    if case["convention"] != "onnx":
        raise Unsupported(f"{NAME}: TVM blends the biased batch variance (the onnx convention), not {case['convention']}")
    mu = 1.0 - float(case["momentum"])
    ones = zeros + 1
    _, new_mean, new_var = run([x, ones, zeros, inp["running_mean"], inp["running_var"]],
                               lambda x, g, b, m, v: bn(x, g, b, m, v, axis=ax, epsilon=1e-5, momentum=mu, training=True))
    return {"new_mean": new_mean, "new_var": new_var}


if __name__ == "__main__":
    main(run_case, NAME)
