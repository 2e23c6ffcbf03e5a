#!/usr/bin/env python3
"""ONNX Runtime's normalization-family operators (CPUExecutionProvider), speaking the kernel
directory protocol for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/onnxruntime_family.py DIR

Per case the adapter builds a model of one ai.onnx node with the case's concrete shapes and
runs it with onnxruntime — the same mapping as `bnconf export --family F --format onnx`
(docs/FORMAT.md, "the family's ONNX export"), so the two give the same verdicts:

- layer_norm: LayerNormalization-17, `axis = rank - normalized_ndim`, `Scale` (ones without
  gamma), `B` (left out without beta); `Mean` and `InvStdDev` are returned as the optional
  `mean`, `rstd` when the parameters are float32 (their ONNX type is float or bfloat16; an f64
  case returns `y` only).
- rms_norm, convention `standard`: RMSNormalization-23 (`scale`: ones without gamma); `y` only.
  `offset` ((1 + gamma)·xhat): unsupported.
- group_norm on nc, ncl, nchw, ncdhw: GroupNormalization-21 (`scale`, `bias` per channel:
  ones, zeros where the case has none), `num_groups`; `y` only. nhwc, ndhwc: unsupported
  (the operator takes the channel on axis 1; a transpose would judge the glue too).
- `stash_type` float32 (ONNX's default), double for f64 cases; `epsilon` is a float32
  attribute, so the case's eps reaches the kernel as float32(eps).
- The backward ops: unsupported (ONNX Runtime's inference build has no gradient operators).
- Mixed precision (f16+f32, bf16+f32): unsupported (the operators type the parameters as X).
- dtypes f32, f64, f16 (numpy has no bfloat16: bf16 cases are unsupported).
"""

import json
import os
import sys
import traceback

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import Unsupported, case_dirs  # noqa: E402

NAME = f"onnxruntime {ort.__version__}"
DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16}
ONNX_T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
# op -> (operator, opset, IR version)
OPERATORS = {
    "layer_norm": ("LayerNormalization", 17, 8),
    "rms_norm": ("RMSNormalization", 23, 11),
    "group_norm": ("GroupNormalization", 21, 10),
}
CHANNELS_LAST = ("nhwc", "ndhwc")


def run_case(case, inputs):
    op = case["op"]
    if op not in OPERATORS:
        raise Unsupported(f"{NAME}: {op}: no ai.onnx operator computes it (inference build, forward operators only)")
    if case["layout"] in CHANNELS_LAST:
        raise Unsupported(f"{NAME}: layout {case['layout']}: {OPERATORS[op][0]} takes the channel on axis 1")
    if case["dtype"] != case["param_dtype"]:
        raise Unsupported(
            f"{NAME}: {OPERATORS[op][0]} types the parameters as X: {case['dtype']} X with {case['param_dtype']} parameters has no ONNX form"
        )
    if case["dtype"] not in DTYPES:
        raise Unsupported(f"{NAME}: dtype {case['dtype']} (numpy has no {case['dtype']} arrays for onnxruntime's Python API)")
    if op == "rms_norm" and case.get("convention") == "offset":
        raise Unsupported(f"{NAME}: convention offset: RMSNormalization computes scale*x*rstd, not (1 + gamma)*x*rstd")
    dt = DTYPES[case["dtype"]]
    x = inputs["x"]
    rank = x.ndim
    operator, opset, ir = OPERATORS[op]
    stash = TensorProto.DOUBLE if dt is np.float64 else TensorProto.FLOAT
    attrs = {"epsilon": float(np.float32(case["eps"])), "stash_type": stash}
    if op == "group_norm":
        c = x.shape[1]
        pshape = [c]
        attrs["num_groups"] = int(case["groups"])
    else:
        k = int(case["normalized_ndim"])
        pshape = list(x.shape[rank - k:])
        attrs["axis"] = rank - k
    gamma = inputs.get("gamma", np.ones(pshape, dt))
    feeds = {"X": x}
    names = ["X"]
    if op == "layer_norm":
        names.append("Scale")
        feeds["Scale"] = gamma
        if "beta" in inputs:
            names.append("B")
            feeds["B"] = inputs["beta"]
    else:
        names.append("scale")
        feeds["scale"] = gamma
        if op == "group_norm":
            names.append("bias")
            feeds["bias"] = inputs.get("beta", np.zeros(pshape, dt))
    outs = [("Y", "y", list(x.shape))]
    if op == "layer_norm" and dt is np.float32:
        batch = list(x.shape[: attrs["axis"]])
        sshape = batch + [1] * int(case["normalized_ndim"])
        outs += [("Mean", "mean", sshape), ("InvStdDev", "rstd", sshape)]
    T = ONNX_T[dt]
    node = helper.make_node(operator, names, [o[0] for o in outs], **attrs)
    graph = helper.make_graph(
        [node],
        "bnconf_family",
        [helper.make_tensor_value_info(n, T, list(feeds[n].shape)) for n in names],
        [helper.make_tensor_value_info(o[0], T, o[2]) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    got = sess.run([o[0] for o in outs], feeds)
    result = {}
    for (_, name, _), a in zip(outs, got):
        if name != "y":
            a = a.reshape(batch)
        result[name] = a
    return result


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    n_ok = n_unsup = n_err = 0
    for d in case_dirs(sys.argv[1]):
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        out = os.path.join(d, "out")
        os.makedirs(out, exist_ok=True)
        try:
            dt = DTYPES.get(case["dtype"])
            inputs = {}
            if dt is not None:
                for n in case["inputs"]:
                    a = np.load(os.path.join(d, n + ".npy"))
                    want = case["dtype"] if n in ("x", "dy") else case["param_dtype"]
                    if want in DTYPES and a.dtype != DTYPES[want]:
                        raise ValueError(f"{n}.npy has dtype {a.dtype}, case says {want}")
                    inputs[n] = a
            outs = run_case(case, inputs)
            for n, a in outs.items():
                np.save(os.path.join(out, n + ".npy"), np.ascontiguousarray(a))
            n_ok += 1
        except Unsupported as e:
            with open(os.path.join(out, "unsupported"), "w") as f:
                f.write(str(e) + "\n")
            n_unsup += 1
        except Exception as e:  # noqa: BLE001 - the case did not run: out/error says why
            traceback.print_exc()
            with open(os.path.join(out, "error"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            n_err += 1
    print(f"{NAME} (family): {n_ok} computed, {n_unsup} unsupported, {n_err} raised", file=sys.stderr)


if __name__ == "__main__":
    main()
