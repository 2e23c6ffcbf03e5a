#!/usr/bin/env python3
"""Check `bnconf export --format onnx DIR` with ONNX's own tools: every model.onnx passes
`onnx.checker.check_model(full_check=True)`, and ONNX Runtime (CPUExecutionProvider) runs it
on test_data_set_0's inputs; each output is compared with the golden (output_<i>.pb) within
the export's budget (budget/<output>.npy: |output - golden| <= budget, element by element).

Usage: python adapters/onnx_export_check.py DIR [DIR ...]
       python adapters/onnx_export_check.py DIR --compare REPORT.json

With --compare: the verdict of each model ONNX Runtime ran (every output within budget or
not) is compared with the verdict of the same case in REPORT.json (`bnconf check --report` of
an adapter running the same operators, e.g. adapters/onnxruntime_family.py); a case
unsupported in the report or absent from the export is not compared. Exit 1 when a verdict
differs.

Prints one line per export directory: models checked, models ONNX Runtime ran (and the
errors of those it did not), outputs within budget, and the worst |output - golden| / budget.
Exit 0 when every model passes the checker and runs, 1 otherwise (an output over its budget
is reported, not an exit status: this script checks the export, not ONNX Runtime).
Needs adapters/.venv (bash adapters/setup.sh: numpy, onnx, onnxruntime).
"""

import json
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def check_dir(root):
    with open(os.path.join(root, "manifest.json")) as f:
        m = json.load(f)
    assert m["format"] == "bnconf-onnx/1", m["format"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    checked = ran = outputs = within = 0
    worst = 0.0
    errors = {}
    bad_models = []
    verdicts = {}
    for case in m["cases"]:
        model_path = os.path.join(root, case["model"])
        try:
            onnx.checker.check_model(onnx.load(model_path), full_check=True)
            checked += 1
        except Exception as e:  # noqa: BLE001 - report every checker failure
            bad_models.append((case["id"], str(e).splitlines()[0]))
            continue
        feeds = {}
        for i in case["inputs"]:
            name, arr = load_pb(os.path.join(root, i["file"]))
            feeds[name] = arr
        try:
            sess = ort.InferenceSession(
                model_path, sess_options=opts, providers=["CPUExecutionProvider"]
            )
            got = sess.run([o["name"] for o in case["outputs"]], feeds)
        except Exception as e:  # noqa: BLE001 - counted by message
            key = str(e).splitlines()[0][:160]
            errors.setdefault(key, []).append(case["id"])
            continue
        ran += 1
        verdicts[case["id"]] = True
        for o, g in zip(case["outputs"], got):
            _, gold = load_pb(os.path.join(root, o["file"]))
            budget = np.load(os.path.join(root, o["budget"]))
            err = np.abs(g.astype(np.float64) - gold.astype(np.float64))
            err = np.where(np.isnan(err), np.inf, err)  # NaN: infinitely wrong, as the judge counts it
            outputs += 1
            ok = bool(np.all(err <= budget))
            within += ok
            verdicts[case["id"]] &= ok
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(err == 0, 0.0, err / budget)
            worst = max(worst, float(np.nanmax(r)) if r.size else 0.0)
            if not ok:
                print(f"  over budget: {case['id']} {o['name']} worst {float(np.nanmax(r)):.3g}x")
    print(
        f"{root}: {m['suite']} {m['dtype']}: {len(m['cases'])} models, {checked} pass "
        f"onnx.checker, {ran} run by onnxruntime {ort.__version__}, {within}/{outputs} outputs "
        f"within budget (worst |out - golden|/budget {worst:.3g}); {len(m['unsupported'])} "
        f"unsupported, {len(m['excluded'])} excluded"
    )
    for case_id, msg in bad_models:
        print(f"  checker: {case_id}: {msg}")
    for msg, ids in errors.items():
        print(f"  onnxruntime failed on {len(ids)} ({ids[0]}, ...): {msg}")
    return (not bad_models and not errors), verdicts


def compare(verdicts, report_path):
    """Cases both judged: the export's verdict (ONNX Runtime on the export) against the
    report's; True when every one is the same."""
    with open(report_path) as f:
        report = json.load(f)
    both = same = 0
    for c in report["cases"]:
        if c["id"] not in verdicts or c["verdict"] not in ("pass", "fail"):
            continue
        both += 1
        if verdicts[c["id"]] == (c["verdict"] == "pass"):
            same += 1
        else:
            export = "within budget" if verdicts[c["id"]] else "over budget"
            print(f"  differs: {c['id']}: export {export}, report {c['verdict']}")
    fails = sum(1 for c in report["cases"] if c["id"] in verdicts and c["verdict"] == "fail")
    print(
        f"compared with {report_path}: {same}/{both} cases with the same verdict "
        f"({fails} not conforming in both)" if same == both else
        f"compared with {report_path}: {both - same} of {both} cases differ"
    )
    return same == both


def main():
    args = sys.argv[1:]
    report = None
    if "--compare" in args:
        i = args.index("--compare")
        if i + 1 >= len(args):
            print("--compare needs REPORT.json", file=sys.stderr)
            sys.exit(2)
        report = args[i + 1]
        del args[i : i + 2]
    if not args or (report is not None and len(args) != 1):
        print(__doc__.strip().splitlines()[7], file=sys.stderr)
        sys.exit(2)
    results = [check_dir(d) for d in args]
    ok = all(r[0] for r in results)
    if report is not None:
        ok = compare(results[0][1], report) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
