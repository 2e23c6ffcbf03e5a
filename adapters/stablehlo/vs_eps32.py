#!/usr/bin/env python3
"""Diagnostic wrapper: judge an f64 kernel against float32(eps) instead of eps.

Usage: python adapters/stablehlo/vs_eps32.py CMD [ARGS...] DIR
       bnconf check --dtype f64 ... --exec 'python adapters/stablehlo/vs_eps32.py python adapters/stablehlo/shlo_bn.py --engine xla'
       (run_all.sh --stablehlo: rows `shlo_xla_vs_eps32`, `shlo_iree_vs_eps32`)

StableHLO's `epsilon` attribute is an f32, so an f64 `batch_norm_*` module computes with
eps32 = float32(eps). bnconf has no eps override and always judges against the exact eps. This
wrapper runs the kernel (`CMD ARGS DIR`), then moves every output the kernel wrote by
delta = exact(eps32) - exact(eps), the difference of two exact references computed by
`bnconf golden` (one on the case with its own eps_exact, one with eps written as the exact
decimal of float32(eps)), evaluated to 50 digits with mpmath and subtracted from the output
with one final rounding to float64. Then |(out - delta) - exact(eps)| = |out - exact(eps32)|
(up to that rounding, <= u/2 |out - delta|), so `bnconf check` judges the kernel against the
f32-rounded eps with its own per-element budget. Not a kernel anyone runs; only f64 cases are
moved (in f32 eps32 is the eps the case dtype holds anyway). BNCONF= names the bnconf binary
(default: target/release/bnconf)."""

import json
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import mpmath
import numpy as np

mpmath.mp.dps = 50
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BNCONF = os.environ.get("BNCONF") or os.path.join(ROOT, "target", "release", "bnconf")


def rational(s):
    f = Fraction(s.strip())
    return mpmath.mpf(f.numerator) / f.denominator


def exact_value(s):
    """An exact golden value: `A`, or `A + B*sqrt(D)` with A, B, D integers or p/q."""
    if "*sqrt(" not in s:
        return rational(s)
    a, rest = s.split(" + ", 1)
    b, d = rest.split("*sqrt(", 1)
    return rational(a) + rational(b) * mpmath.sqrt(rational(d.rstrip(")")))


def golden(case_dir, case, eps):
    c = {"format": "bnconf-case/1", "op": case["op"], "layout": case["layout"], "shape": case["shape"],
         "dtype": case["dtype"], "eps": eps, "inputs": {n: {"npy": n + ".npy"} for n in case["inputs"]}}
    for k in ("momentum", "convention"):
        if k in case:
            c[k] = case.get(k + "_exact", case[k])
    path = os.path.join(case_dir, "vs_eps32.case.json")
    with open(path, "w") as f:
        json.dump(c, f)
    try:
        out = subprocess.run([BNCONF, "golden", path, "--formats", "f64"], capture_output=True, text=True, check=True).stdout
    finally:
        os.remove(path)
    return {n: [exact_value(v) for v in o["exact"]] for n, o in json.loads(out)["outputs"].items()}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.splitlines()[2])
    cmd, root = sys.argv[1:-1], sys.argv[-1]
    rc = subprocess.run(cmd + [root]).returncode
    with open(os.path.join(root, "manifest.json")) as f:
        ids = json.load(f)["cases"]
    moved = 0
    worst = 0.0
    for cid in ids:
        d = os.path.join(root, cid)
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        out = os.path.join(d, "out")
        if case["dtype"] != "f64" or not case.get("eps") or os.path.exists(os.path.join(out, "unsupported")):
            continue
        if not all(os.path.exists(os.path.join(out, n + ".npy")) for n in case["outputs"]):
            continue  # the kernel failed this case; bnconf reports the missing file
        eps32 = format(Decimal(float(np.float32(float(case["eps"])))), "f")
        g = golden(d, case, case["eps_exact"])
        g32 = golden(d, case, eps32)
        for n in case["outputs"]:
            p = os.path.join(out, n + ".npy")
            a = np.load(p)
            flat = a.reshape(-1)
            res = np.empty_like(flat)
            for i, v in enumerate(flat):
                if not np.isfinite(v):
                    res[i] = v
                    continue
                delta = g32[n][i] - g[n][i]
                if g[n][i] != 0:
                    worst = max(worst, float(abs(delta / g[n][i])))
                res[i] = float(mpmath.mpf(float(v)) - delta)
            np.save(p, res.reshape(a.shape))
        moved += 1
    print(f"vs_eps32: moved the outputs of {moved} f64 cases by exact(float32(eps)) - exact(eps) "
          f"(largest relative move {worst:.3g})", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    main()
