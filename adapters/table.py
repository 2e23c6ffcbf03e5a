#!/usr/bin/env python3
"""Markdown tables from adapters/results/*.json (bnconf-report/1): framework x dtype x op x
level for the default-suite reports, and framework x dtype x op x split for the replicated ones.

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
framework and dtype whose every case is unsupported gets one row, op `(all)`.

Replicated suite: reports named `<framework>-replicated-<dtype>.json` (bnconf check --suite
replicated) are left out of that table and make a second one, between
`<!-- adapters-replicated-table:begin -->` and `<!-- adapters-replicated-table:end -->`:
one column per kind of split (equal shards, unequal shards, one empty rank; the case id's
last part, e.g. `r3-empty`), every level together.  --check and --write handle both blocks
of FILE; a file with replicated reports to show must have the second block.
`python adapters/table.py --replicated` prints that table.  `exported_*.json` (the StableHLO
export harness's own summaries, adapters/stablehlo/run_exported.py) are not bnconf reports and
are skipped.

Normalization family: reports whose cases are the family's ops (layer_norm, rms_norm,
group_norm and their backwards: `bnconf check --family ...`, e.g. onnxruntime_family-f32.json)
are left out of the BatchNorm table and make a third one, between
`<!-- adapters-family-table:begin -->` and `<!-- adapters-family-table:end -->`: framework x
dtype x op, one column per level (core, conditioning, range; `–` where the suite has no case
of that level and dtype).  `python adapters/table.py --family` prints it."""

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
RBEGIN = "<!-- adapters-replicated-table:begin -->"
REND = "<!-- adapters-replicated-table:end -->"
SPLITS = ["equal", "unequal", "empty"]
SPLIT_HEAD = {"equal": "equal shards", "unequal": "unequal shards", "empty": "one empty rank"}
REPL = "-replicated-"
FBEGIN = "<!-- adapters-family-table:begin -->"
FEND = "<!-- adapters-family-table:end -->"
FAMILY_OPS = ["batch_norm", "batch_norm_backward", "layer_norm", "layer_norm_backward", "rms_norm",
              "rms_norm_backward", "group_norm", "group_norm_backward"]
# adapters/stablehlo/run_exported.py's summaries (exported_*.json) are not bnconf reports
EXPORTED = "exported_"


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


def load(f):
    with open(f) as fh:
        rep = json.load(fh)
    if rep.get("format") != "bnconf-report/1":
        sys.exit(f"table.py: {f} is not a bnconf-report/1")
    return rep


def split_kind(c):
    """equal / unequal / empty from the case's shard sizes if the report has them, else
    from the id's last part (`r3-empty`)."""
    sizes = c.get("shard_sizes")
    if sizes:
        return "empty" if 0 in sizes else "equal" if len(set(sizes)) == 1 else "unequal"
    last = c["id"].rsplit(".", 1)[-1]
    kind = last.rsplit("-", 1)[-1]
    if kind not in SPLITS:
        sys.exit(f"table.py: case {c['id']}: no split kind (equal/unequal/empty) in its id")
    return kind


def render_replicated(d):
    """The replicated-suite table, or None when there is no replicated report."""
    files = sorted(glob.glob(os.path.join(d, "*" + REPL + "*.json")))
    if not files:
        return None
    rows = OrderedDict()
    for f in files:
        rep = load(f)
        fw = os.path.basename(f)[: -len(".json")].rsplit(REPL, 1)[0]
        for c in rep["cases"]:
            rows.setdefault((fw, c["dtype"]), OrderedDict()).setdefault(c["op"], {}).setdefault(split_kind(c), []).append(c)
    out = ["| framework | dtype | op | " + " | ".join(SPLIT_HEAD[k] for k in SPLITS) + " |",
           "|---|---|---|" + "---|" * len(SPLITS)]
    opkey = lambda op: (OPS.index(op) if op in OPS else len(OPS), op)  # noqa: E731
    for fw, dt in sorted(rows):
        ops = rows[(fw, dt)]
        every = [c for op in ops.values() for cs in op.values() for c in cs]
        if all(c["verdict"] == "unsupported" for c in every):
            out.append(f"| {fw} | {dt} | (all) | " + " | ".join("unsupported" for _ in SPLITS) + " |")
            continue
        for op in sorted(ops, key=opkey):
            cells = [cell(ops[op][k]) if k in ops[op] else "–" for k in SPLITS]
            out.append(f"| {fw} | {dt} | {op} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def is_family(rep):
    """A report of `bnconf check --family`: its cases are the family's ops."""
    return bool(rep["cases"]) and all(c["op"] in FAMILY_OPS for c in rep["cases"])


def level_reports(d, family):
    """(path, report) of the per-level reports: the BatchNorm ones, or the family's."""
    files = sorted(f for f in glob.glob(os.path.join(d, "*.json"))
                   if REPL not in os.path.basename(f) and not os.path.basename(f).startswith(EXPORTED))
    reps = [(f, load(f)) for f in files]
    return [(f, r) for f, r in reps if is_family(r) == family]


def render(d, family=False):
    """The per-level table of the BatchNorm reports (family=False) or of the family's; None
    when there is no family report."""
    reps = level_reports(d, family)
    if not reps:
        if family:
            return None
        sys.exit(f"table.py: no reports in {d} (run bash adapters/run_all.sh)")
    order = FAMILY_OPS if family else OPS
    levels = set()
    rows = OrderedDict()
    for f, rep in reps:
        fw = os.path.basename(f)[: -len(".json")].rsplit("-", 1)[0]
        for c in rep["cases"]:
            levels.add(c["level"])
            rows.setdefault((fw, c["dtype"]), OrderedDict()).setdefault(c["op"], {}).setdefault(c["level"], []).append(c)
    levels = [lv for lv in LEVELS if lv in levels] + sorted(levels - set(LEVELS))
    out = ["| framework | dtype | op | " + " | ".join(levels) + " |", "|---|---|---|" + "---|" * len(levels)]
    opkey = lambda op: (order.index(op) if op in order else len(order), op)  # noqa: E731
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


def split(text, path, begin=BEGIN, end=END):
    lines = text.splitlines(keepends=True)
    try:
        b = next(i for i, l in enumerate(lines) if l.strip() == begin)
        e = next(i for i, l in enumerate(lines) if i > b and l.strip() == end)
    except StopIteration:
        sys.exit(f"table.py: {path} has no block between {begin} and {end}")
    return "".join(lines[: b + 1]), "".join(lines[b + 1 : e]), "".join(lines[e:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="FILE", help="exit 1 with a diff if FILE's marker blocks differ")
    g.add_argument("--write", metavar="FILE", help="rewrite FILE's marker blocks")
    g.add_argument("--replicated", action="store_true", help="print the replicated-suite table")
    g.add_argument("--family", action="store_true", help="print the normalization family's table")
    a = ap.parse_args()
    table = render(a.results)
    rtable = render_replicated(a.results)
    ftable = render(a.results, family=True)
    if a.family:
        if ftable is None:
            sys.exit(f"table.py: no family reports (bnconf check --family) in {a.results}")
        sys.stdout.write(ftable)
        return 0
    if a.replicated:
        if rtable is None:
            sys.exit(f"table.py: no replicated reports (*{REPL}*.json) in {a.results}")
        sys.stdout.write(rtable)
        return 0
    if not a.check and not a.write:
        sys.stdout.write(table)
        return 0
    path = a.check or a.write
    with open(path) as f:
        text = f.read()
    blocks = [(BEGIN, END, table, "adapters table")]
    if rtable is not None or RBEGIN in text:
        blocks.append((RBEGIN, REND, rtable or "", "replicated-suite table"))
    if ftable is not None or FBEGIN in text:
        blocks.append((FBEGIN, FEND, ftable or "", "family table"))
    new = text
    stale = False
    for begin, end, want, what in blocks:
        head, old, tail = split(new, path, begin, end)
        if old != want:
            stale = True
            if a.check:
                sys.stdout.writelines(
                    difflib.unified_diff(old.splitlines(keepends=True), want.splitlines(keepends=True),
                                         f"{path} ({what})", "adapters/table.py")
                )
                print(f"table.py: the {what} in {path} is stale; run python3 adapters/table.py --write {path}", file=sys.stderr)
        new = head + want + tail
    if a.check:
        return 1 if stale else 0
    if new != text:
        with open(path, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
