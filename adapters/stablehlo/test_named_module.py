#!/usr/bin/env python3
"""A named module and an unnamed one give the same verdicts, on XLA and on IREE.

Usage (in the StableHLO venv, from the repository root; run by hand, CI does not install it):
    adapters/.venv-stablehlo/bin/python adapters/stablehlo/test_named_module.py \\
        [--bnconf PATH] [--dtypes f32,f64] [--engines xla,iree] [--layouts nchw,nhwc] [--keep DIR]

IREE names the VM module it compiles after the MLIR module's symbol (`module @bn_twopass {...}`
-> "bn_twopass"; "module" when the MLIR module is unnamed), so a lookup under the default name
fails every case of a named module while XLA runs it. This script exports the default suite's
forward cases (`bnconf export --ops forward`, the layouts and dtypes asked for), runs
examples/two_pass_forward.mlir (unnamed) and examples/two_pass_forward_named.mlir (the same
function inside `module @bn_twopass`) through shlo_bn.py --module on each engine, judges each run
with `bnconf check --report`, and compares the per-case verdicts of the two modules, engine by
engine. It also checks that the named file is the unnamed one's function, indented, and reports
whether the two modules' outputs are bit-identical (they should be: same function, same engine).

Exit 0 when, for every engine and dtype, both modules have a verdict for every case, no case
raised in the adapter, and the verdicts agree case by case; 1 on a mismatch; 2 on a usage or
setup error (bnconf or an engine missing)."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ADAPTER = os.path.join(HERE, "shlo_bn.py")
MODULES = {
    "unnamed": os.path.join(HERE, "examples", "two_pass_forward.mlir"),
    "named": os.path.join(HERE, "examples", "two_pass_forward_named.mlir"),
}


def code_lines(path):
    """The file's lines without // comment lines and trailing blanks."""
    with open(path) as f:
        return [ln.rstrip() for ln in f if not ln.lstrip().startswith("//") and ln.strip()]


def check_same_function():
    """The named example must be the unnamed one's code inside `module @name { ... }`."""
    plain, named = code_lines(MODULES["unnamed"]), code_lines(MODULES["named"])
    if not named or not re.fullmatch(r"module @[A-Za-z_][A-Za-z0-9_$.]* \{", named[0]) or named[-1] != "}":
        return "the named example does not open with `module @name {` and close with `}`"
    inner = [ln[2:] if ln.startswith("  ") else ln for ln in named[1:-1]]
    if inner != plain:
        return "the named example's function differs from examples/two_pass_forward.mlir"
    return None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def raised_count(stderr):
    m = re.search(r"(\d+) cases computed, (\d+) unsupported, (\d+) raised", stderr)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bnconf", default=os.environ.get("BNCONF", os.path.join(ROOT, "target", "release", "bnconf")))
    ap.add_argument("--dtypes", default="f32,f64")
    ap.add_argument("--engines", default="xla,iree")
    ap.add_argument("--layouts", default="nchw,nhwc")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (new or empty) and keep it, instead of a temporary directory")
    a = ap.parse_args()
    if not os.access(a.bnconf, os.X_OK):
        print(f"test_named_module: no bnconf at {a.bnconf} (cargo build --release, or --bnconf / BNCONF)", file=sys.stderr)
        return 2
    why = check_same_function()
    if why:
        print(f"test_named_module: {why}", file=sys.stderr)
        return 1
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        if os.listdir(a.keep):
            print(f"test_named_module: --keep {a.keep} is not empty", file=sys.stderr)
            return 2
        work = a.keep
    else:
        work = tempfile.mkdtemp(prefix="shlo_named_")
    t_all = time.time()
    failures = []
    lines = []
    try:
        for dtype in a.dtypes.split(","):
            base = os.path.join(work, f"suite-{dtype}")
            p = run([a.bnconf, "export", "--suite", "default", "--dtype", dtype, "--ops", "forward",
                     "--layouts", a.layouts, "--out", base])
            if p.returncode != 0:
                print(f"test_named_module: bnconf export failed:\n{p.stderr}", file=sys.stderr)
                return 2
            with open(os.path.join(base, "manifest.json")) as f:
                ids = json.load(f)["cases"]
            for engine in a.engines.split(","):
                verdicts, outdirs = {}, {}
                for mod, path in MODULES.items():
                    d = os.path.join(work, f"{engine}-{mod}-{dtype}")
                    shutil.copytree(base, d)
                    t0 = time.time()
                    p = run([sys.executable, ADAPTER, "--engine", engine, "--module", path, d])
                    counts = raised_count(p.stderr)
                    if p.returncode != 0 or counts is None:
                        print(f"test_named_module: shlo_bn.py --engine {engine} exited {p.returncode}:\n"
                              f"{p.stderr[-3000:]}", file=sys.stderr)
                        return 2
                    rep = os.path.join(work, f"{engine}-{mod}-{dtype}.json")
                    c = run([a.bnconf, "check", d, "--report", rep, "--no-diagnosis"])
                    if c.returncode not in (0, 1) or not os.path.exists(rep):
                        print(f"test_named_module: bnconf check exited {c.returncode}:\n{c.stderr[-3000:]}", file=sys.stderr)
                        return 2
                    with open(rep) as f:
                        verdicts[mod] = {r["id"]: r["verdict"] for r in json.load(f)["cases"]}
                    outdirs[mod] = d
                    v = list(verdicts[mod].values())
                    lines.append(f"{engine:4} {dtype} {mod:7}: {len(v)} cases, {v.count('pass')} pass, "
                                 f"{len(v) - v.count('pass') - v.count('unsupported')} not conforming, "
                                 f"{v.count('unsupported')} unsupported; adapter: {counts[0]} computed, "
                                 f"{counts[2]} raised; {time.time() - t0:.1f} s")
                    if counts[2]:
                        failures.append(f"{engine} {dtype} {mod}: {counts[2]} cases raised in the adapter")
                    missing = [i for i in ids if i not in verdicts[mod]]
                    if missing:
                        failures.append(f"{engine} {dtype} {mod}: no verdict for {len(missing)} cases ({missing[0]}, ...)")
                diff = [i for i in ids if verdicts["named"].get(i) != verdicts["unnamed"].get(i)]
                for i in diff:
                    failures.append(f"{engine} {dtype} {i}: unnamed {verdicts['unnamed'].get(i)}, named {verdicts['named'].get(i)}")
                same_bits = 0
                for i in ids:
                    ou, on = (os.path.join(outdirs[m], i, "out") for m in ("unnamed", "named"))
                    names = sorted(n for n in os.listdir(ou) if n.endswith(".npy")) if os.path.isdir(ou) else []
                    if names and all(os.path.exists(os.path.join(on, n)) and
                                     np.load(os.path.join(ou, n)).tobytes() == np.load(os.path.join(on, n)).tobytes()
                                     for n in names):
                        same_bits += 1
                lines.append(f"{engine:4} {dtype} named vs unnamed: {len(ids) - len(diff)}/{len(ids)} verdicts equal, "
                             f"outputs bit-identical in {same_bits}/{len(ids)} cases")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    for ln in lines:
        print(ln)
    print(f"test_named_module: {'FAIL' if failures else 'ok'} in {time.time() - t_all:.0f} s")
    for f in failures[:40]:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
