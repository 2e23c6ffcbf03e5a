#!/usr/bin/env python3
"""Run the modules of `bnconf export --format stablehlo` with XLA:CPU and/or IREE and judge them
against golden +- budget, without bnconf (what a compiler's own test harness would do).

Usage: python adapters/stablehlo/run_exported.py [--engine xla|iree|both] [--fold]
           [--limit N] [--only SUBSTRING] [--json FILE] DIR

For each case of DIR/manifest.json (format bnconf-stablehlo/1): compile DIR/<case>/module.mlir
(entry @main, no arguments), run it, and compare every result with DIR/<case>/golden/<out>.npy:
an element conforms when |result - golden| <= budget (DIR/<case>/budget/<out>.npy, f64).
A case whose module the compiler refuses is counted as "refused" with the compiler's message.

--fold drops the module's stablehlo.optimization_barrier (the constants then feed the op
directly), so a compiler may evaluate the op at compile time: this judges its constant folder
instead of its generated code.

Engines (the venv of `bash adapters/setup.sh --stablehlo`): xla = jaxlib's PJRT CPU client
(compile_and_load of the MLIR text), iree = iree.compiler.compile_str(target llvm-cpu,
input_type stablehlo, --iree-input-demote-f64-to-f32=false) run by iree.runtime (local-sync).
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def without_barrier(text):
    out = []
    for line in text.splitlines(keepends=True):
        if "stablehlo.optimization_barrier" in line:
            continue
        out.append(line.replace("_c = stablehlo.constant", " = stablehlo.constant"))
    return "".join(out)


class XLA:
    name = "xla"

    def __init__(self):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        from jax._src import xla_bridge
        from jax._src.lib import xla_client

        jax.config.update("jax_enable_x64", True)
        self.xc = xla_client
        self.backend = xla_bridge.get_backend("cpu")
        self.device = self.backend.devices()[0]
        self.version = "jax/jaxlib %s (%s)" % (jax.__version__, self.backend.platform_version)

    def run(self, text):
        ex = self.backend.compile_and_load(text, self.xc.DeviceList((self.device,)), self.xc.CompileOptions())
        return [np.asarray(o) for o in ex.execute([])]


class IREE:
    name = "iree"

    def __init__(self):
        import iree.compiler as ic
        import iree.runtime as rt
        from importlib.metadata import version

        self.ic, self.rt = ic, rt
        self.config = rt.Config("local-sync")
        self.flags = ["--iree-input-demote-f64-to-f32=false",
                      "--iree-llvmcpu-target-cpu=" + os.environ.get("SHLO_IREE_CPU", "host")]
        self.version = "iree-base-compiler %s, iree-base-runtime %s" % (
            version("iree-base-compiler"), version("iree-base-runtime"))

    def run(self, text):
        vmfb = self.ic.compile_str(text, target_backends=["llvm-cpu"], input_type="stablehlo",
                                   extra_args=self.flags)
        ctx = self.rt.SystemContext(config=self.config)
        vm = self.rt.VmModule.copy_buffer(ctx.instance, vmfb)
        ctx.add_vm_module(vm)
        outs = ctx.modules[vm.name]["main"]()  # the VM module takes the MLIR module's name, if any
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        return [np.asarray(o.to_host()) if hasattr(o, "to_host") else np.asarray(o) for o in outs]


def first_error_line(msg):
    for line in str(msg).splitlines():
        if "error" in line:
            return line.strip()[:300]
    return str(msg).strip().splitlines()[0][:300] if str(msg).strip() else type(msg).__name__


def judge(root, case, results):
    """(worst |result - golden| / budget over every element, where, elements over)."""
    outs = case["outputs"]
    if len(results) != len(outs):
        return float("inf"), f"{len(results)} results, expected {len(outs)}", -1
    worst, where, over = 0.0, "", 0
    for o, r in zip(outs, results):
        g = np.load(os.path.join(root, o["golden"]))
        b = np.load(os.path.join(root, o["budget"]))
        r = np.asarray(r)
        if r.shape != g.shape or r.dtype != g.dtype:
            return float("inf"), f"{o['name']}: {r.dtype}{list(r.shape)}, expected {g.dtype}{list(g.shape)}", -1
        diff = np.abs(r.astype(np.float64) - g.astype(np.float64))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / b)
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        over += int(np.sum(ratio > 1))
        i = int(np.argmax(ratio)) if ratio.size else 0
        if ratio.size and ratio.flat[i] > worst:
            worst = float(ratio.flat[i])
            where = f"{o['name']}[{i}]: result {r.flat[i]!r}, golden {g.flat[i]!r}, budget {b.flat[i]:.3g}"
    return worst, where, over


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="both", choices=("xla", "iree", "both"))
    ap.add_argument("--fold", action="store_true", help="drop the optimization_barrier (judge constant folding)")
    ap.add_argument("--limit", type=int, default=0, help="at most N cases (0: all)")
    ap.add_argument("--only", default="", help="only cases whose id contains this")
    ap.add_argument("--json", metavar="FILE", help="write the per-case results here")
    ap.add_argument("dir")
    a = ap.parse_args()
    with open(os.path.join(a.dir, "manifest.json")) as f:
        man = json.load(f)
    if man.get("format") != "bnconf-stablehlo/1":
        sys.exit(f"{a.dir}/manifest.json: format {man.get('format')!r}, expected 'bnconf-stablehlo/1'")
    cases = [c for c in man["cases"] if a.only in c["id"]]
    if a.limit:
        cases = cases[: a.limit]
    engines = [XLA(), IREE()] if a.engine == "both" else [XLA() if a.engine == "xla" else IREE()]
    report = {"suite": man["suite"], "dtype": man["dtype"], "fold": a.fold, "engines": {}}
    ok = True
    for eng in engines:
        t0 = time.time()
        rows, counts = [], {"conforming": 0, "not_conforming": 0, "refused": 0}
        worst_all, worst_id = 0.0, ""
        for c in cases:
            with open(os.path.join(a.dir, c["module"])) as f:
                text = f.read()
            if a.fold:
                text = without_barrier(text)
            try:
                res = eng.run(text)
            except Exception as e:  # noqa: BLE001  (compile errors of either compiler)
                counts["refused"] += 1
                rows.append({"id": c["id"], "verdict": "refused", "reason": first_error_line(e)})
                continue
            worst, where, over = judge(a.dir, c, res)
            verdict = "pass" if worst <= 1.0 else "fail"
            counts["conforming" if verdict == "pass" else "not_conforming"] += 1
            if worst > worst_all or not worst_id:
                worst_all, worst_id = worst, c["id"]
            rows.append({"id": c["id"], "verdict": verdict, "worst": worst, "k": c["k"],
                         "worst_bnconf_ratio": worst * c["k"], "where": where, "elements_over": over})
        ok &= counts["not_conforming"] == 0
        dt = time.time() - t0
        summary = dict(counts, cases=len(cases), worst=worst_all, worst_case=worst_id, seconds=round(dt, 1))
        report["engines"][eng.name] = {"version": eng.version, "summary": summary, "cases": rows}
        print(f"{eng.name} ({eng.version}): {len(cases)} modules of {man['suite']} {man['dtype']}"
              f"{' (--fold)' if a.fold else ''}: {counts['conforming']} conform, {counts['not_conforming']} do not, "
              f"{counts['refused']} refused; worst |result-golden|/budget {worst_all:.3g} ({worst_id}); {dt:.0f} s")
        for r in rows:
            if r["verdict"] != "pass":
                print(f"  {r['verdict']:8} {r['id']}: " + (r.get("reason") or f"{r['worst']:.3g} x budget, {r['where']}"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
            f.write("\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
