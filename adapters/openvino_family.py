#!/usr/bin/env python3
"""OpenVINO's graph-level normalizations compiled for OpenVINO's CPU plugin, speaking the kernel
directory protocol for a family export (`bnconf check --family F --exec ...`).

Usage: python adapters/openvino_family.py DIR
       OPENVINO_FAMILY_PRECISION=P ...   compile with INFERENCE_PRECISION_HINT=P for every case
                                         (P: f32, bf16, f16; `default`: the plugin's own default)

One `ov.Model` per case built with `openvino.opset16`, every Parameter in the case's dtype,
compiled with `ov.Core().compile_model(model, "CPU", config)` (`INFERENCE_NUM_THREADS=1`) and
run on the case's arrays (bf16: the `<u2` bit patterns written into a bf16 `ov.Tensor` and the
output's bits read back; no rounding by the adapter).  Forward only: OpenVINO is an inference
runtime (no autograd): the `*_backward` ops are unsupported.

- layer_norm: `MVN(x, axes=<the last normalized_ndim axes>, normalize_variance=True, eps,
  eps_mode=inside_sqrt)`, then `Multiply(·, gamma)` and `Add(·, beta)` (numpy broadcasting of
  the normalized-shape parameters; each left out where the case has no gamma / beta): the
  pattern OpenVINO's frontends fuse a LayerNorm into.  MVN's `eps` is a float32 attribute.
  `y` only (`mean`/`rstd` not given).
- group_norm: `GroupNormalization(x, scale=gamma, bias=beta, num_groups, epsilon)` (opset12;
  scale/bias are required: ones / zeros of the case's dtype where the case has none, `1·v` and
  `v + 0` exact); layouts nc, ncl, nchw, ncdhw as they are (the op takes the channel on axis
  1); nhwc, ndhwc: unsupported (a transpose would judge the glue too).
- rms_norm: unsupported: no opset of openvino 2026.4.1 has an RMS operator (opset1..16 list
  only BatchNormInference, MVN, GroupNormalization, NormalizeL2; the CPU plugin's RMS is an
  internal op made by a fusion pass, not one a model can name), and an RMS written as
  ReduceMean/Sqrt/Divide would judge that glue, not an OpenVINO normalization.
- A graph the CPU plugin refuses to compile ("Unsupported operation of type ...": bf16
  GroupNormalization of a rank-2 `nc` x has no CPU kernel and no reference fallback) is
  unsupported with the plugin's message.
- Mixed precision (f16+f32, bf16+f32): unsupported: the ops need one element type (OpenVINO
  refuses the graph: the exception's first line is the reason); a Convert would be the
  adapter's.

Precision: the plugin's default INFERENCE_PRECISION_HINT on this CPU is bf16 (it has
avx512_bf16); the adapter sets the hint per case to the case's dtype where the plugin has it —
f32 for f32, bf16 for bf16 — and to f32 for f16 (this CPU's plugin has no f16 inference
precision: asking for f16 gives bf16, `compiled.get_property` says so) and for f64 (the CPU
plugin has no f64 kernels and runs a f64 model in f32, documented: f64 is judged on what users
get).  OPENVINO_FAMILY_PRECISION overrides the hint for every case (a diagnostic)."""

import os
import sys

import numpy as np
import openvino as ov
import openvino.opset16 as ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import NPY_PRECISIONS, Unsupported, dtype_of, family_base, family_param_shape, serve  # noqa: E402

NAME = f"openvino {ov.__version__.split('-')[0]} (CPU)"
OVERRIDE = os.environ.get("OPENVINO_FAMILY_PRECISION", "")
ETYPE = {"f32": ov.Type.f32, "f64": ov.Type.f64, "f16": ov.Type.f16, "bf16": ov.Type.bf16}
HINT = {"f32": "f32", "f64": "f32", "f16": "f32", "bf16": "bf16"}
CORE = ov.Core()
CHANNEL_FIRST = ("nc", "ncl", "nchw", "ncdhw")


def to_tensor(a, dt):
    t = ov.Tensor(ETYPE[dt], ov.Shape(list(a.shape)))
    if dt == "bf16":
        t.data.view(np.uint16)[...] = a
    else:
        t.data[...] = a
    return t


def run(dt, nodes_fn, arrays):
    """Build a model over Parameters of type `dt` shaped like `arrays`, compile it for the CPU,
    run it; the output as a numpy array (bf16: its bit patterns)."""
    params = [ops.parameter(list(a.shape), ETYPE[d]) for a, d in arrays]
    out = nodes_fn(*params)
    model = ov.Model([out], params)
    config = {"INFERENCE_NUM_THREADS": 1}
    hint = OVERRIDE or HINT[dt]
    if hint != "default":
        config["INFERENCE_PRECISION_HINT"] = hint
    compiled = CORE.compile_model(model, "CPU", config)
    req = compiled.create_infer_request()
    req.infer([to_tensor(a, d) for a, d in arrays])
    o = req.get_output_tensor(0)
    data = o.data.view(np.uint16) if dt == "bf16" else o.data
    return np.array(data, copy=True)


def run_case(case, inputs):
    op = case["op"]
    base = family_base(case, NAME, "RMS")
    if base != op:
        raise Unsupported(f"{NAME}: {op}: OpenVINO is an inference runtime (no autograd)")
    if base == "rms_norm":
        raise Unsupported(f"{NAME}: rms_norm: no opset of OpenVINO {ov.__version__.split('-')[0]} has an RMS operator "
                          "(an RMS written as ReduceMean/Sqrt/Divide would judge that glue)")
    dt, pdt = case["dtype"], case.get("param_dtype", case["dtype"])
    x = inputs["x"]
    eps = float(case["eps"])
    if base == "layer_norm":
        k = int(case["normalized_ndim"])
        axes = ops.constant(np.arange(x.ndim - k, x.ndim, dtype=np.int64))
        arrays = [(x, dt)] + [(inputs[n], pdt) for n in ("gamma", "beta") if n in inputs]
        has_g, has_b = "gamma" in inputs, "beta" in inputs

        def graph(x, *p):
            y = ops.mvn(x, axes, True, eps, "inside_sqrt")
            if has_g:
                y = ops.multiply(y, p[0])
            if has_b:
                y = ops.add(y, p[-1])
            return y

        return {"y": run(dt, graph, arrays)}
    if case["layout"] not in CHANNEL_FIRST:
        raise Unsupported(f"{NAME}: layout {case['layout']}: GroupNormalization takes the channel on axis 1")
    pshape = family_param_shape(case, x.shape)
    pnp = NPY_PRECISIONS[pdt]
    one = np.array(0x3F80, np.uint16) if pdt == "bf16" else pnp(1)
    g = inputs.get("gamma", np.full(pshape, one, pnp))
    b = inputs.get("beta", np.zeros(pshape, pnp))
    groups = int(case["groups"])
    return {"y": run(dt, lambda x, g, b: ops.group_normalization(x, g, b, groups, eps), [(x, dt), (g, pdt), (b, pdt)])}


def compute(case, d):
    inputs = {}
    for n in case["inputs"]:
        a = np.load(os.path.join(d, n + ".npy"))
        want = dtype_of(case, n)
        if a.dtype != NPY_PRECISIONS[want]:
            raise ValueError(f"{n}.npy has dtype {a.dtype}, case says {want}")
        inputs[n] = a
    try:
        outs = run_case(case, inputs)
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - a mixed case OpenVINO refuses is unsupported; the rest is re-raised
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        refusal = next((ln for ln in lines if ln.startswith("Unsupported operation of type")), None)
        if refusal:
            raise Unsupported(f"{NAME}: {case['op']} {case['layout']} {x_shape(case, inputs)} in {case['dtype']}: the CPU plugin "
                              f"refuses to compile it: {refusal} (no CPU kernel, and no reference fallback)") from None
        if case["dtype"] != case.get("param_dtype", case["dtype"]):
            line = next((ln for ln in lines if not ln.startswith("Exception from")), lines[0] if lines else type(e).__name__)
            raise Unsupported(f"{NAME}: {case['op']} with {case['dtype']} x and {case['param_dtype']} parameters: "
                              f"OpenVINO raises {type(e).__name__}: {line.strip()}") from None
        raise
    y = outs["y"]
    if y.dtype != NPY_PRECISIONS[case["dtype"]] or y.shape != x_shape(case, inputs):
        raise TypeError(f"{NAME} returned y as {y.dtype} {y.shape}")
    return outs


def x_shape(case, inputs):
    return inputs["x"].shape


if __name__ == "__main__":
    serve(NAME, compute)
