#!/usr/bin/env python3
"""Apache TVM's Relax normalization-family operators built for the CPU (`tvm.compile(mod,
target="llvm")`, the LLVM bundled in the apache-tvm wheel) and run on Relax's VirtualMachine,
speaking the kernel directory protocol for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/tvm_family.py DIR

One Relax function per case (`relax.BlockBuilder`), as tvm_bn.py builds batch_norm, every
tensor in the case's dtype (bf16 bit patterns viewed as ml_dtypes.bfloat16 going in and as
uint16 coming out: no rounding by the adapter), `TVM_NUM_THREADS=1`.  TVM's default pipeline
legalizes each op to its TOPI kernel (`topi.nn.layer_norm`, `topi.nn.group_norm`,
`topi.nn.rms_norm`, C++ in libtvm), which is what is judged:

- layer_norm: `relax.op.nn.layer_norm(x, gamma, beta, axes=<the last normalized_ndim axes>,
  epsilon=eps)`; `y` only (the op returns no statistics: `mean`/`rstd` not given).
- rms_norm, convention `standard`: `relax.op.nn.rms_norm(x, gamma, axes=<last normalized_ndim
  axes>, epsilon=eps)`; `offset` ((1 + gamma)·xhat): unsupported (no such operator).
- group_norm: `relax.op.nn.group_norm(x, gamma, beta, num_groups=groups, channel_axis=<the
  layout's channel axis>, axes=<its spatial axes>, epsilon=eps)`: every layout as it is (nc
  with no spatial axis: `axes=[]`), channels-last ones included (the op takes any channel axis).
- Without gamma (affine `none`) the adapter passes gamma = ones, without beta beta = zeros, in
  the parameters' dtype: the ops require both tensors, and their `center=False`/`scale=False`
  attributes are dropped by the legalization (relax/transform/legalize_ops/nn.py passes only
  the tensors, axes and epsilon to TOPI), so a tensor of ones / zeros is how a user gets no
  affine part: `1·v` and `v + 0` are exact.
- The backward ops: unsupported: Relax's autodiff (`relax.transform.Gradient`) has no gradient
  for these ops ("Attribute FPrimalGradient has not been registered for relax.nn.layer_norm",
  likewise rms_norm and group_norm; hand check).
- dtypes: f32, f16, f64, bf16 where TVM builds them; `topi.nn.layer_norm` and
  `topi.nn.group_norm` refuse f64 ("only support float32 and float16 for now"), layer_norm
  refuses bf16 likewise and Relax's group_norm type inference refuses it ("expects that data
  must be float, but got T.bfloat16"): those cases are unsupported with TVM's message.
  rms_norm builds in every dtype, but `topi.nn.rms_norm` casts x and weight to float32 whatever
  their dtype (include/tvm/topi/nn/rms_norm.h), so its f64 output is computed from float32 x,
  weight and Σx² (docs/FINDINGS.md, "TVM's float64 `rms_norm` is computed from float32 x and
  weight"); its f16 and bf16 are computed in float32 and rounded once.
- Mixed precision (f16+f32, bf16+f32): unsupported — Relax's type inference
  refuses a gamma whose dtype differs from x's ("requires all the input tensors to have the
  same dtype"); a cast would be the adapter's.
- eps: the case's eps as a Python float (a double attribute of the Relax op).
"""

import os
import sys

# One runtime thread, so the reports do not depend on the core count (read when TVM loads).
os.environ.setdefault("TVM_NUM_THREADS", "1")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import AXES, Unsupported, family_base, family_param_shape, main_precisions  # noqa: E402

NAME = f"tvm {tvm.__version__} (Relax, llvm CPU)"
NP_DT = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
         "bf16": np.dtype(ml_dtypes.bfloat16)}
TVM_DT = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16"}


def to_engine(a, dt):
    a = np.ascontiguousarray(a)
    return a.view(ml_dtypes.bfloat16) if dt == "bf16" else a


def from_engine(a, dt):
    return np.ascontiguousarray(a).view(np.uint16).copy() if dt == "bf16" else np.ascontiguousarray(a).copy()


def run(arrays, body):
    """Build main(*arrays) -> body(*vars), compile it for the CPU, run it on the arrays."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"a{i}", relax.TensorType(a.shape, str(a.dtype))) for i, a in enumerate(arrays)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit(body(*params))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    ex = tvm.compile(bb.get(), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    res = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return res.numpy()


def run_case(case, inputs):
    op = case["op"]
    base = family_base(case, NAME, "relax.op.nn.rms_norm")
    if base != op:
        raise Unsupported(f"{NAME}: {op}: Relax's autodiff (relax.transform.Gradient) has no gradient for "
                          f"relax.nn.{base} (FPrimalGradient not registered)")
    x = inputs["x"]
    pdt = NP_DT[case.get("param_dtype", case["dtype"])]
    pshape = family_param_shape(case, x.shape)
    g = inputs.get("gamma", np.ones(pshape, pdt))
    b = inputs.get("beta", np.zeros(pshape, pdt))
    eps = float(case["eps"])
    nn = relax.op.nn
    if base in ("layer_norm", "rms_norm"):
        k = int(case["normalized_ndim"])
        axes = list(range(x.ndim - k, x.ndim))
        if base == "layer_norm":
            return {"y": run([x, g, b], lambda x, g, b: nn.layer_norm(x, g, b, axes=axes, epsilon=eps))}
        return {"y": run([x, g], lambda x, g: nn.rms_norm(x, g, axes=axes, epsilon=eps))}
    ch, red = AXES[case["layout"]]
    spatial = [a for a in red if a != 0]
    return {"y": run([x, g, b], lambda x, g, b: nn.group_norm(x, g, b, num_groups=int(case["groups"]),
                                                              channel_axis=ch, axes=spatial, epsilon=eps))}


def run_checked(case, inputs):
    try:
        return run_case(case, inputs)
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - only TVM's refusals become unsupported; the rest is re-raised
        msg = str(e)
        for key in ("only support float32 and float16", "requires all the input tensors to have the same dtype",
                    "expects that data must be float"):
            if key in msg:
                line = next((ln.strip() for ln in msg.splitlines() if key in ln), key)
                line = line[line.index(key):] if key != "only support float32 and float16" else line
                raise Unsupported(f"{NAME}: {case['op']} with {case['dtype']} x and "
                                  f"{case.get('param_dtype', case['dtype'])} parameters: TVM refuses: {line}") from None
        raise


if __name__ == "__main__":
    main_precisions(run_checked, NAME, "TVM", NP_DT, to_engine, from_engine)
