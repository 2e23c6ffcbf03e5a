"""Kernel directory protocol (docs/FORMAT.md): visit DIR/*/case.json, call a kernel,
write DIR/<case>/out/<output>.npy or DIR/<case>/out/unsupported.

Only the plumbing lives here; each adapter supplies `run_case(case, inputs) -> dict`
and may raise `Unsupported(reason)`.  An exception other than Unsupported is reported
on stderr and written to DIR/<case>/out/error (FORMAT.md, "kernel errors"), so the
harness counts the case as not conforming and its reports say "kernel error: <message>"
instead of hiding it."""

import json
import os
import sys
import traceback

import numpy as np

DTYPES = {"f32": np.float32, "f64": np.float64}

# Per layout: (axis of the channel, axes reduced over).  FORMAT.md "Ops and layouts".
AXES = {
    "rows": (0, (1,)),
    "flat": (0, (1,)),
    "chw": (0, (1, 2)),
    "nchw": (1, (0, 2, 3)),
    "nhwc": (3, (0, 1, 2)),
    "nc": (1, (0,)),
    "ncl": (1, (0, 2)),
    "ncdhw": (1, (0, 2, 3, 4)),
    "ndhwc": (4, (0, 1, 2, 3)),
}


class Unsupported(Exception):
    pass


def case_dirs(root):
    man = os.path.join(root, "manifest.json")
    if os.path.exists(man):
        with open(man) as f:
            ids = json.load(f)["cases"]
    else:
        ids = sorted(d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "case.json")))
    return [os.path.join(root, i) for i in ids]


def serve(name, compute, summary="computed"):
    """Visit DIR/*/case.json (DIR = argv[1]); `compute(case, d)` returns {output: numpy array} to
    write as DIR/<case>/out/<output>.npy, or raises Unsupported (out/unsupported) or anything
    else (out/error, the traceback on stderr)."""
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    n_ok = n_unsup = n_err = 0
    for d in case_dirs(sys.argv[1]):
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        out = os.path.join(d, "out")
        os.makedirs(out, exist_ok=True)
        try:
            for n, a in compute(case, d).items():
                np.save(os.path.join(out, n + ".npy"), np.ascontiguousarray(a))
            n_ok += 1
        except Unsupported as e:
            with open(os.path.join(out, "unsupported"), "w") as f:
                f.write(str(e) + "\n")
            n_unsup += 1
        except Exception as e:  # noqa: BLE001 - the case did not run: out/error says why
            print(f"{name}: case {os.path.basename(d)} raised; no outputs written:", file=sys.stderr)
            traceback.print_exc()
            with open(os.path.join(out, "error"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            n_err += 1
    print(f"{name}: {n_ok} {summary}, {n_unsup} unsupported, {n_err} raised", file=sys.stderr)


def main(run_case, name):
    def compute(case, d):
        if case["dtype"] not in DTYPES:
            raise Unsupported(f"{name}: dtype {case['dtype']} not wired in this adapter (f32, f64 only)")
        if case["layout"] not in AXES:
            raise Unsupported(f"{name}: unknown layout {case['layout']}")
        dt = DTYPES[case["dtype"]]
        inputs = {}
        for n in case["inputs"]:
            a = np.load(os.path.join(d, n + ".npy"))
            if a.dtype != dt:
                raise ValueError(f"{n}.npy has dtype {a.dtype}, case says {case['dtype']}")
            inputs[n] = a
        with np.errstate(all="ignore"):
            outs = run_case(case, inputs)
        arrays = {}
        for n in case["outputs"]:
            a = np.asarray(outs[n])
            if a.dtype != dt:
                raise TypeError(f"{name} returned {n} as {a.dtype}, not {dt.__name__}")
            arrays[n] = a
        return arrays

    serve(name, compute, "cases computed")


# The precisions of the protocol (FORMAT.md): bf16 arrays are npy `<u2` bit patterns.
NPY_PRECISIONS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16}
ACTIVATIONS = ("x", "dy", "y", "dx")


def dtype_of(case, name):
    """The protocol dtype of an input or output (FORMAT.md: x, dy, y, dx in `dtype`, the rest in
    `param_dtype`)."""
    return case["dtype"] if name in ACTIVATIONS else case.get("param_dtype", case["dtype"])


def main_precisions(run_case, name, engine, engine_dtypes, to_engine, from_engine):
    """`main` for an adapter that takes every precision its engine has (torch_family.py,
    _mlx.py): `engine_dtypes` maps the protocol's dtypes to the engine's, `to_engine(a, dt)` and
    `from_engine(t, dt)` convert one array (no rounding: bf16 as bit patterns).  An exception of
    the engine on a mixed-precision case, or an output in another dtype than the protocol's,
    makes the case unsupported with that reason (a cast would be the adapter's); an optional
    output in another dtype is not given."""
    def compute(case, d):
        for key in ("dtype", "param_dtype"):
            if case.get(key, case["dtype"]) not in engine_dtypes:
                raise Unsupported(f"{name}: {key} {case[key]} not wired in this adapter")
        inputs = {}
        for n in case["inputs"]:
            a = np.load(os.path.join(d, n + ".npy"))
            want = dtype_of(case, n)
            if a.dtype != NPY_PRECISIONS[want]:
                raise ValueError(f"{n}.npy has dtype {a.dtype}, case says {want}")
            inputs[n] = to_engine(a, want)
        try:
            outs = run_case(case, inputs)
        except (RuntimeError, TypeError, ValueError) as e:
            if case["dtype"] != case.get("param_dtype", case["dtype"]):
                raise Unsupported(f"{name}: {case['op']} with {case['dtype']} x and {case['param_dtype']} parameters: "
                                  f"{engine} raises {type(e).__name__}: {str(e).splitlines()[0]}") from None
            raise
        optional = set(case.get("optional_outputs", []))
        arrays = {}
        for n in case["outputs"]:
            if n not in outs:
                if n in optional:
                    continue
                raise KeyError(f"{name} computed no {n}")
            t, want = outs[n], dtype_of(case, n)
            if t.dtype != engine_dtypes[want]:
                if n in optional:
                    continue  # the engine keeps this statistic in another dtype: not given
                raise Unsupported(f"{name}: {case['op']} returns {n} as {t.dtype}, the case's {n} is {want}")
            arrays[n] = from_engine(t, want)
        return arrays

    serve(name, compute)


def family_base(case, name, rms_call):
    """The forward op of a family case (`layer_norm`, `rms_norm`, `group_norm`: the op without
    `_backward`); rms_norm's `offset` convention is unsupported: `rms_call` computes weight·x·rstd
    and weight = 1 + gamma would be the adapter's rounding in the parameters' dtype."""
    op = case["op"]
    base = op[: -len("_backward")] if op.endswith("_backward") else op
    if base not in ("layer_norm", "rms_norm", "group_norm"):
        raise Unsupported(f"{name}: op {op} not wired in this adapter")
    if base == "rms_norm" and case.get("convention", "standard") == "offset":
        raise Unsupported(f"{name}: convention offset: {rms_call} computes weight*x*rstd; weight = 1 + gamma would be "
                          "rounded by the adapter in the parameters' dtype, not by the engine")
    return base


def family_param_shape(case, shape):
    """The shape of gamma/beta (and dgamma/dbeta) of a family case whose x has `shape` (the
    case's layout): `[C]` for group_norm, the normalized shape for layer_norm/rms_norm."""
    if case["op"].startswith("group_norm"):
        return (shape[-1 if case["layout"] in ("nhwc", "ndhwc") else 1],)
    return tuple(shape[len(shape) - int(case["normalized_ndim"]):])
