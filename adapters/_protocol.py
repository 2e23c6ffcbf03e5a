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


def main(run_case, name):
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    root = sys.argv[1]
    n_ok = n_unsup = n_err = 0
    for d in case_dirs(root):
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        out = os.path.join(d, "out")
        os.makedirs(out, exist_ok=True)
        try:
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
            for n in case["outputs"]:
                a = np.asarray(outs[n])
                if a.dtype != dt:
                    raise TypeError(f"{name} returned {n} as {a.dtype}, not {dt.__name__}")
                np.save(os.path.join(out, n + ".npy"), np.ascontiguousarray(a))
            n_ok += 1
        except Unsupported as e:
            with open(os.path.join(out, "unsupported"), "w") as f:
                f.write(str(e) + "\n")
            n_unsup += 1
        except Exception as e:
            print(f"{name}: case {os.path.basename(d)} raised; no outputs written:", file=sys.stderr)
            traceback.print_exc()
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "error"), "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            n_err += 1
    print(f"{name}: {n_ok} cases computed, {n_unsup} unsupported, {n_err} raised", file=sys.stderr)
