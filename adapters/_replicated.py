"""Replicated kernel directory protocol (docs/FORMAT.md, "Replicated suites"): visit
DIR/<case>/case.json of a `--suite replicated` export, hand each rank's shard to an engine,
write DIR/<case>/rank<r>/out/<output>.npy, or DIR/<case>/out/unsupported.

A case has `"ranks": R` and `"shard_sizes": [n_0, ..., n_{R-1}]`; rank r's inputs are in
DIR/<case>/rank<r>/ (x.npy, dy.npy of the shard's shape, zero-length when n_r = 0, and copies
of the replicated gamma/beta/running_mean/running_var).  Rank r writes per-element outputs
(y, dx) of its shard's shape and per-channel outputs (mean, var, dgamma, dbeta, new_mean,
new_var) as the global values it holds after its all-reduce; optionally dgamma_local /
dbeta_local.

Two ways in:
- `main_inprocess(run_case, name)`: one process drives every replica (JAX devices,
  tf.distribute replicas).  `run_case(case, ranks) -> list of dicts`, `ranks[r]` the dict of
  rank r's inputs; may raise `Unsupported(reason)`.
- `rank_cases(root, ...)`, `load_rank`, `write_rank`, `write_unsupported`: for adapters that
  launch one process per rank (torch.distributed, jax.distributed); every process visits the
  same cases in the same order.

An exception other than Unsupported is reported on stderr and the case (or that rank) is
left without outputs, so the harness counts it as not conforming instead of hiding it."""

import json
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _protocol import DTYPES, Unsupported, case_dirs  # noqa: E402,F401

# Per layout: axis of the channel in a shard [n, C, H, W] / [n, H, W, C].
CHANNEL_AXIS = {"nchw": 1, "nhwc": 3}
PER_ELEMENT = ("y", "dx")
OPTIONAL = ("dgamma_local", "dbeta_local")


def read_case(d):
    with open(os.path.join(d, "case.json")) as f:
        case = json.load(f)
    R = int(case["ranks"])
    sizes = [int(n) for n in case["shard_sizes"]]
    if len(sizes) != R:
        raise ValueError(f"{case['id']}: ranks {R} but {len(sizes)} shard_sizes")
    if sum(sizes) != case["shape"][0]:
        raise ValueError(f"{case['id']}: shard_sizes sum {sum(sizes)} != N = {case['shape'][0]}")
    return case


def check_case(case, name):
    """Raises Unsupported for what no replicated adapter here handles."""
    if case["dtype"] not in DTYPES:
        raise Unsupported(f"{name}: dtype {case['dtype']} not wired in this adapter (f32, f64 only)")
    if case["layout"] not in CHANNEL_AXIS:
        raise Unsupported(f"{name}: layout {case['layout']} not wired (nchw, nhwc only)")
    if case["op"] not in ("forward", "backward", "running_update"):
        raise Unsupported(f"{name}: op {case['op']} not implemented")


def shard_shape(case, r):
    n = int(case["shard_sizes"][r])
    return [n] + list(case["shape"][1:])


def load_rank(d, case, r):
    """Rank r's inputs as a dict of numpy arrays (checked against the case dtype and shapes)."""
    dt = DTYPES[case["dtype"]]
    rd = os.path.join(d, f"rank{r}")
    c = case["shape"][CHANNEL_AXIS[case["layout"]]]
    inputs = {}
    for n in case["inputs"]:
        a = np.load(os.path.join(rd, n + ".npy"))
        if a.dtype != dt:
            raise ValueError(f"rank{r}/{n}.npy has dtype {a.dtype}, case says {case['dtype']}")
        want = shard_shape(case, r) if n in ("x", "dy") else [c]
        if list(a.shape) != want:
            raise ValueError(f"rank{r}/{n}.npy has shape {list(a.shape)}, expected {want}")
        inputs[n] = a
    return inputs


def write_rank(d, case, r, outs, name):
    """Writes rank r's outputs after checking dtype and shape; every output the case names
    must be there, dgamma_local/dbeta_local are written when given."""
    dt = DTYPES[case["dtype"]]
    out = os.path.join(d, f"rank{r}", "out")
    os.makedirs(out, exist_ok=True)
    c = case["shape"][CHANNEL_AXIS[case["layout"]]]
    for n in list(case["outputs"]) + [k for k in OPTIONAL if k in outs]:
        a = np.asarray(outs[n])
        if a.dtype != dt:
            raise TypeError(f"{name} returned rank{r} {n} as {a.dtype}, not {dt.__name__}")
        want = shard_shape(case, r) if n in PER_ELEMENT else [c]
        if list(a.shape) != want:
            raise ValueError(f"{name} returned rank{r} {n} of shape {list(a.shape)}, expected {want}")
        np.save(os.path.join(out, n + ".npy"), np.ascontiguousarray(a))


def write_unsupported(d, reason, r=None):
    out = os.path.join(d, "out") if r is None else os.path.join(d, f"rank{r}", "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "unsupported"), "w") as f:
        f.write(reason.rstrip("\n") + "\n")


def report_error(name, d, r=None):
    """Report the exception being handled on stderr and in `out/error` (of the case, or of
    rank r): the harness counts the case as not conforming, "kernel error: <message>"."""
    who = os.path.basename(d) + ("" if r is None else f" rank{r}")
    print(f"{name}: case {who} raised; no outputs written:", file=sys.stderr)
    traceback.print_exc()
    e = sys.exc_info()[1]
    if e is None:
        return
    # r: a rank number, or a description (e.g. "s of process 3"): then the case's out/
    out = os.path.join(d, f"rank{r}", "out") if isinstance(r, int) else os.path.join(d, "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "error"), "w") as f:
        f.write(f"{type(e).__name__}: {e}\n")


def root_arg():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    return sys.argv[1]


def main_inprocess(run_case, name, root=None, ranks_only=None):
    """One process runs every replica of every case: run_case(case, ranks) -> [outs_r].
    ranks_only=R: only the cases with R ranks (the others are left alone)."""
    root = root or root_arg()
    n_ok = n_unsup = n_err = 0
    for d in case_dirs(root):
        try:
            case = read_case(d)
            if ranks_only is not None and int(case["ranks"]) != ranks_only:
                continue
            check_case(case, name)
            ranks = [load_rank(d, case, r) for r in range(case["ranks"])]
            with np.errstate(all="ignore"):
                outs = run_case(case, ranks)
            if len(outs) != case["ranks"]:
                raise ValueError(f"{name} returned {len(outs)} ranks' outputs, case has {case['ranks']}")
            for r, o in enumerate(outs):
                write_rank(d, case, r, o, name)
            n_ok += 1
        except Unsupported as e:
            write_unsupported(d, str(e))
            n_unsup += 1
        except Exception:
            report_error(name, d)
            n_err += 1
    only = "" if ranks_only is None else f" (R={ranks_only})"
    print(f"{name}{only}: {n_ok} cases computed, {n_unsup} unsupported, {n_err} raised", file=sys.stderr)
    return n_err


def cases_by_ranks(root):
    """{R: [case dirs]} in manifest order, and the list of cases that could not be read."""
    by, bad = {}, []
    for d in case_dirs(root):
        try:
            case = read_case(d)
        except Exception:
            bad.append(d)
            continue
        by.setdefault(int(case["ranks"]), []).append(d)
    return by, bad
