#!/usr/bin/env python3
"""Markdown table framework x op x level from adapters/results/*.json (bnconf-report/1).

Usage: python adapters/table.py [RESULTS_DIR]   (default adapters/results)

One row per framework, dtype and op; one column per level.  A cell reads
`pass 12/12, worst 1.3` (conforming / supported cases, worst ratio over the supported cases
of that cell; a case conforms when its worst ratio <= k), or `unsupported`, or
`FAIL 3/12 ...` when some supported case does not conform."""

import glob
import json
import math
import os
import sys
from collections import OrderedDict

OPS = ["forward", "backward", "eval", "sync_forward", "sync_backward"]


def ratio(v):
    if v is None:
        return math.nan
    if isinstance(v, str):
        return float(v)  # "inf", "NaN"
    return float(v)


def fmt(r):
    if math.isnan(r):
        return "NaN"
    if math.isinf(r):
        return "inf"
    if r == 0:
        return "0"
    if r < 1e3:
        return f"{r:.3g}"
    return f"{r:.2e}"


def cell(cases):
    sup = [c for c in cases if c["verdict"] != "unsupported"]
    if not sup:
        return "unsupported"
    npass = sum(c["verdict"] == "pass" for c in sup)
    rs = [ratio(c.get("worst_ratio")) for c in sup]
    w = math.nan if any(math.isnan(r) for r in rs) else max(rs)
    tag = "pass" if npass == len(sup) else "**FAIL**"
    s = f"{tag} {npass}/{len(sup)}, worst {fmt(w)}"
    mal = sum(c["verdict"] == "malformed" for c in sup)
    if mal:
        s += f", {mal} malformed"
    if len(sup) < len(cases):
        s += f" (+{len(cases) - len(sup)} unsup.)"
    return s


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    files = sorted(glob.glob(os.path.join(d, "*.json")))
    if not files:
        sys.exit(f"table.py: no reports in {d} (run bash adapters/run_all.sh)")
    levels = []
    rows = OrderedDict()
    for f in files:
        rep = json.load(open(f))
        assert rep.get("format") == "bnconf-report/1", f
        fw = os.path.basename(f)[: -len(".json")].rsplit("-", 1)[0]
        for c in rep["cases"]:
            if c["level"] not in levels:
                levels.append(c["level"])
            rows.setdefault((fw, c["dtype"], c["op"]), {}).setdefault(c["level"], []).append(c)
    print("| framework | dtype | op | " + " | ".join(levels) + " |")
    print("|---|---|---|" + "---|" * len(levels))
    key = lambda k: (k[0], k[1], OPS.index(k[2]) if k[2] in OPS else 99)
    for k in sorted(rows, key=key):
        cells = [cell(rows[k][lv]) if lv in rows[k] else "–" for lv in levels]
        print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
