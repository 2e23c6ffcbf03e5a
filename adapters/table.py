#!/usr/bin/env python3
"""Markdown table framework x dtype x op x level from adapters/results/*.json (bnconf-report/1).

Usage: python adapters/table.py [RESULTS_DIR]              print the table (default adapters/results)
       python adapters/table.py [RESULTS_DIR] --check README.md
              exit 1 (with a unified diff) if the block between the lines
              `<!-- adapters-table:begin -->` and `<!-- adapters-table:end -->` differs
       python adapters/table.py [RESULTS_DIR] --write README.md
              rewrite only that block

One row per framework (the report's file name before `-<dtype>.json`), dtype and op; one
column per level.  A cell reads `pass 12/12, worst 1.3` (conforming / supported cases, worst
ratio over the supported cases of that cell; a case conforms when its worst ratio <= k), or
`unsupported`, or `**FAIL** 3/12, worst ...` when some supported case does not conform.  A
framework and dtype whose every case is unsupported gets one row, op `(all)`."""

import argparse
import difflib
import glob
import json
import math
import os
import sys
from collections import OrderedDict

OPS = ["forward", "backward", "eval", "sync_forward", "sync_backward", "running_update", "sync_stats"]
LEVELS = ["core", "conditioning", "range"]
BEGIN = "<!-- adapters-table:begin -->"
END = "<!-- adapters-table:end -->"


def ratio(v):
    if v is None:
        return math.nan
    return float(v)  # numbers, or "inf" / "NaN" strings


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


def render(d):
    files = sorted(glob.glob(os.path.join(d, "*.json")))
    if not files:
        sys.exit(f"table.py: no reports in {d} (run bash adapters/run_all.sh)")
    levels = set()
    rows = OrderedDict()
    for f in files:
        with open(f) as fh:
            rep = json.load(fh)
        if rep.get("format") != "bnconf-report/1":
            sys.exit(f"table.py: {f} is not a bnconf-report/1")
        fw = os.path.basename(f)[: -len(".json")].rsplit("-", 1)[0]
        for c in rep["cases"]:
            levels.add(c["level"])
            rows.setdefault((fw, c["dtype"]), OrderedDict()).setdefault(c["op"], {}).setdefault(c["level"], []).append(c)
    levels = [lv for lv in LEVELS if lv in levels] + sorted(levels - set(LEVELS))
    out = ["| framework | dtype | op | " + " | ".join(levels) + " |", "|---|---|---|" + "---|" * len(levels)]
    opkey = lambda op: (OPS.index(op) if op in OPS else len(OPS), op)  # noqa: E731
    for fw, dt in sorted(rows):
        ops = rows[(fw, dt)]
        every = [c for op in ops.values() for cs in op.values() for c in cs]
        if all(c["verdict"] == "unsupported" for c in every):
            out.append(f"| {fw} | {dt} | (all) | " + " | ".join("unsupported" for _ in levels) + " |")
            continue
        for op in sorted(ops, key=opkey):
            cells = [cell(ops[op][lv]) if lv in ops[op] else "–" for lv in levels]
            out.append(f"| {fw} | {dt} | {op} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def split(path):
    with open(path) as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    try:
        b = next(i for i, l in enumerate(lines) if l.strip() == BEGIN)
        e = next(i for i, l in enumerate(lines) if i > b and l.strip() == END)
    except StopIteration:
        sys.exit(f"table.py: {path} has no block between {BEGIN} and {END}")
    return lines[: b + 1], "".join(lines[b + 1 : e]), lines[e:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="FILE", help="exit 1 with a diff if FILE's marker block differs")
    g.add_argument("--write", metavar="FILE", help="rewrite FILE's marker block")
    a = ap.parse_args()
    table = render(a.results)
    if not a.check and not a.write:
        sys.stdout.write(table)
        return 0
    path = a.check or a.write
    head, old, tail = split(path)
    if a.check:
        if old == table:
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(old.splitlines(keepends=True), table.splitlines(keepends=True),
                                 f"{path} (adapters table)", "adapters/table.py")
        )
        print(f"table.py: the adapters table in {path} is stale; run python3 adapters/table.py --write {path}", file=sys.stderr)
        return 1
    if old != table:
        with open(path, "w") as f:
            f.write("".join(head) + table + "".join(tail))
    return 0


if __name__ == "__main__":
    sys.exit(main())
