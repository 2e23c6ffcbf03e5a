"""`bnconf.check`: run a Python kernel on every case of a suite and judge it — in process
through the extension module (`_inproc`), or by the binary: `bnconf export`, the kernel on
every case, `bnconf check` (the kernel directory protocol of docs/FORMAT.md, driven from
Python)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

import numpy as np

from . import _inproc
from ._bf16 import bf16_bits_to_float32, float_to_bf16_bits
from ._dtypes import NUMPY_NAME, STORAGE, normalize_dtype, split_case_dtype
from ._find_bin import ENV_VAR, find_bnconf_bin
from ._report import MAX_LISTED, Report

# Per layout: (axis of the channel, axes reduced over). FORMAT.md "Ops and layouts".
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

# The normalization family's channel layouts (group_norm): (axis of the channel, spatial axes).
FAMILY_CHANNEL_AXES = {
    "nc": (1, ()),
    "ncl": (1, (2,)),
    "nchw": (1, (2, 3)),
    "ncdhw": (1, (2, 3, 4)),
    "nhwc": (3, (1, 2)),
    "ndhwc": (4, (1, 2, 3)),
}

#: The op families (``family=``): batch_norm (the default) and the normalization family.
FAMILIES = ("batch_norm", "layer_norm", "rms_norm", "group_norm")

# Outputs in the param dtype with a mixed dtype (batch_norm's per-channel outputs; the
# family's statistics and parameter gradients).
PER_CHANNEL_OUTPUTS = frozenset(
    {"mean", "var", "m2", "dgamma", "dbeta", "new_mean", "new_var", "rstd"}
)


class Unsupported(Exception):
    """Raise from a kernel (instead of returning None) to mark a case unsupported with a reason."""


class Case:
    """One case of a suite, as handed to ``kernel(case)``.

    ``op``, ``layout``, ``shape`` (tuple), ``dtype`` (numpy name: "float32", "float64",
    "float16", "bfloat16"), ``param_dtype`` (the per-channel arrays' dtype; = ``dtype`` unless
    the suite is mixed, e.g. float16+float32), ``eps`` (float; exact value in
    ``eps_exact``), ``inputs`` (dict name → numpy array: the layout's shape, ``[C]`` for
    per-channel inputs; bfloat16 arrays are given as float32), ``outputs`` (the names the
    kernel must return), ``momentum`` (float or None), ``convention`` ("pytorch" / "onnx" or
    None), ``id``, ``level``, ``class_`` (alias ``klass``), ``target``, ``json`` (raw case.json),
    and for convenience ``channel_axis`` and ``reduce_axes`` of the layout.

    The normalization family (``family`` "layer_norm", "rms_norm", "group_norm"; "batch_norm"
    otherwise) adds ``normalized_ndim`` (layout "last": the trailing axes normalized),
    ``groups`` (group_norm), ``affine`` ("weight_bias", "weight", "none"), ``convention``
    (rms_norm: "standard" or "offset", ``y = (1 + gamma)·xhat``) and ``optional_outputs`` (the
    outputs a kernel may leave out: ``mean``, ``rstd``). Its ``reduce_axes`` are the axes a
    statistic reduces over: the last ``normalized_ndim`` axes (layout "last"), or the channel
    and spatial axes of a group_norm layout (each statistic over the ``C/groups`` channels of
    its group); ``channel_axis`` is group_norm's channel axis (None for "last").
    """

    def __init__(self, j: Dict[str, Any], inputs: Dict[str, np.ndarray]):
        self.json = j
        self.id: str = j.get("id")
        self.op: str = j["op"]
        self.layout: str = j["layout"]
        self.shape: Tuple[int, ...] = tuple(int(n) for n in j["shape"])
        data, param = split_case_dtype(j)
        self.bnconf_dtype: str = data
        self.bnconf_param_dtype: str = param
        self.dtype: str = NUMPY_NAME[data]
        self.param_dtype: str = NUMPY_NAME[param]
        self.eps: float = float(j.get("eps", 0) or 0)
        self.eps_exact: Optional[str] = j.get("eps_exact")
        self.inputs: Dict[str, np.ndarray] = inputs
        self.outputs = list(j.get("outputs") or [])
        m = j.get("momentum")
        self.momentum: Optional[float] = None if m is None else float(m)
        self.momentum_exact: Optional[str] = j.get("momentum_exact")
        self.convention: Optional[str] = j.get("convention")
        self.level: Optional[str] = j.get("level")
        self.class_: Optional[str] = j.get("class")
        self.klass = self.class_
        self.target: Optional[str] = j.get("target")
        self.family: str = j.get("family") or "batch_norm"
        self.normalized_ndim: Optional[int] = j.get("normalized_ndim")
        self.groups: Optional[int] = j.get("groups")
        self.affine: Optional[str] = j.get("affine")
        self.optional_outputs = list(j.get("optional_outputs") or [])
        if self.family == "batch_norm":
            self.channel_axis, self.reduce_axes = AXES.get(self.layout, (None, None))
        elif self.layout == "last":
            k = int(self.normalized_ndim or 0)
            nd = len(self.shape)
            self.channel_axis, self.reduce_axes = None, tuple(range(nd - k, nd))
        else:
            c, spatial = FAMILY_CHANNEL_AXES.get(self.layout, (None, ()))
            self.channel_axis = c
            self.reduce_axes = None if c is None else tuple(sorted((c, *spatial)))

    def output_dtype(self, name: str) -> str:
        """bnconf dtype the output ``name`` is written in."""
        explicit = self.json.get("output_dtypes") or {}
        if name in explicit:
            return normalize_dtype(explicit[name])
        return self.bnconf_param_dtype if name in PER_CHANNEL_OUTPUTS else self.bnconf_dtype

    def __repr__(self):
        return f"Case({self.id}: {self.op} {self.layout} {list(self.shape)} {self.dtype})"


def _bf16_storage_ok(j: Dict[str, Any]) -> None:
    st = j.get("bf16_storage", "u16-bits")
    if st != "u16-bits":
        raise RuntimeError(
            f"case {j.get('id')}: bf16_storage {st!r} is not understood by this bnconf "
            'Python package (it reads "u16-bits")'
        )


def load_case(case_dir: str) -> Case:
    """Read ``case_dir/case.json`` and its input npy files (bf16 bit patterns → float32)."""
    with open(os.path.join(case_dir, "case.json")) as f:
        j = json.load(f)
    inputs = {}
    for name in j.get("inputs") or []:
        a = np.load(os.path.join(case_dir, name + ".npy"), allow_pickle=False)
        if a.dtype.kind == "u" and a.dtype.itemsize == 2:
            _bf16_storage_ok(j)
            a = bf16_bits_to_float32(a)
        inputs[name] = a
    return Case(j, inputs)


def encode_output(case: Case, name: str, value) -> np.ndarray:
    """The array written to ``out/<name>.npy``: the kernel's value in the output's dtype
    (little-endian, C order); bfloat16 as bit patterns rounded to nearest even."""
    d = case.output_dtype(name)
    if d == "bf16":
        _bf16_storage_ok(case.json)
        return np.ascontiguousarray(float_to_bf16_bits(value).astype("<u2"))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(np.asarray(value, dtype=np.dtype(STORAGE[d])))


def write_outputs(case_dir: str, case: Case, result) -> None:
    """Write a kernel's result for one case: a dict of arrays, or None (unsupported)."""
    out = os.path.join(case_dir, "out")
    os.makedirs(out, exist_ok=True)
    if result is None:
        with open(os.path.join(out, "unsupported"), "w") as f:
            f.write("kernel returned None\n")
        return
    if not hasattr(result, "items"):
        raise TypeError(
            f"case {case.id}: the kernel returned {type(result).__name__}; expected a dict "
            f"of numpy arrays ({', '.join(case.outputs)}) or None (unsupported)"
        )
    for name, value in result.items():
        if name not in case.outputs:
            continue  # extra outputs are not judged; a missing one is reported by bnconf
        np.save(os.path.join(out, name + ".npy"), encode_output(case, name, value))


def _write_note(case_dir: str, name: str, text: str) -> None:
    out = os.path.join(case_dir, "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "w") as f:
        f.write(text + "\n")


def run_suite_dir(kernel: Kernel, suite_dir: str, *, on_error=None) -> Dict[str, int]:
    """The kernel directory protocol (docs/FORMAT.md) from Python: ``kernel`` on every case of
    an exported suite directory (``bnconf export``'s manifest order, or every ``*/case.json``),
    each case's result written to ``<case>/out/``: its outputs (:func:`write_outputs`),
    ``unsupported`` (None, or :class:`Unsupported` raised, with the reason) or ``error`` (any
    other exception: ``<type>: <message>``; ``on_error(case, exc)`` is called first). What
    ``bnconf.check(..., in_process=False)`` runs before ``bnconf check DIR``, and what an
    adapter script given to ``bnconf check --exec`` can call. Returns the counts
    ``{"computed", "unsupported", "raised"}``."""
    manifest = os.path.join(suite_dir, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            ids = json.load(f)["cases"]
    else:
        ids = sorted(
            d for d in os.listdir(suite_dir) if os.path.exists(os.path.join(suite_dir, d, "case.json"))
        )
    counts = {"computed": 0, "unsupported": 0, "raised": 0}
    for cid in ids:
        cdir = os.path.join(suite_dir, cid)
        case = load_case(cdir)
        try:
            with np.errstate(all="ignore"):
                result = kernel(case)
        except Unsupported as e:
            _write_note(cdir, "unsupported", str(e) or "kernel raised Unsupported")
            counts["unsupported"] += 1
            continue
        except Exception as e:  # the kernel failed on this case: out/error (FORMAT.md)
            if on_error is not None:
                on_error(case, e)
            _write_note(cdir, "error", f"{type(e).__name__}: {e}")
            counts["raised"] += 1
            continue
        write_outputs(cdir, case, result)
        counts["unsupported" if result is None else "computed"] += 1
    return counts


def _list_arg(flag: str, v) -> list:
    if v is None:
        return []
    items = [s.strip() for s in v.split(",")] if isinstance(v, str) else [str(s) for s in v]
    items = [s for s in items if s]
    if not items:
        raise ValueError(f"{flag}: give at least one name, or None for all")
    return [flag, ",".join(items)]


def _names(flag: str, v) -> list:
    a = _list_arg(flag, v)
    return a[1].split(",") if a else []


def _run(argv) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, errors="replace")


def _refusal(p: subprocess.CompletedProcess) -> str:
    return (p.stderr or p.stdout or "").strip()


Kernel = Callable[[Case], Optional[Dict[str, Any]]]


def check(
    kernel: Kernel,
    suite: str = "default",
    dtype: Union[str, Any] = "float32",
    ops: Optional[Union[str, Iterable[str]]] = None,
    layouts: Optional[Union[str, Iterable[str]]] = None,
    *,
    family: str = "batch_norm",
    seed: Optional[int] = None,
    require_all: bool = False,
    in_process: Optional[bool] = None,
) -> Report:
    """Judge ``kernel`` on a bnconf suite and return a :class:`Report`.

    ``kernel(case)`` gets a :class:`Case` and returns a dict output name → array (cast to the
    case dtype when written) or None when it does not support the case (it may also raise
    :class:`Unsupported`). Any other exception the kernel raises is written to the case's
    ``out/error``: the case does not conform and the report says "kernel error: <type>:
    <message>" (the other cases still run). ``dtype``: numpy or bnconf names
    ("float32"/"f32", "float64", "float16", "bfloat16", "float16+float32", ...).
    ``ops`` / ``layouts``: names (list or comma-separated string) restricting the suite.
    ``require_all``: unsupported cases make the report not ok. ``seed``: the suite's seed
    (bnconf's default when None). ``in_process``: judge in this process through the extension
    module (True), or through the binary and a temporary suite directory (False); None (the
    default) judges in process where the module is built, except the replicated suite (judged
    per rank by the binary) and when ``BNCONF_BIN`` names a binary (that binary judges). Both
    give the same report.

    ``family``: "batch_norm" (the default), "layer_norm", "rms_norm", "group_norm" or "all" —
    the normalization family's suites (the cases of ``bnconf run --family``; their
    :class:`Case` has the family's fields). A family kernel returns the outputs it computes;
    ``mean`` and ``rstd`` are optional (judged when returned). The family is judged in process
    too (the report of ``bnconf check DIR`` on a family export).

    Raises ValueError when bnconf refuses the family, suite, dtype, ops or layouts (its
    message), RuntimeError when the harness itself fails (exit 2, with bnconf's stderr).
    """
    if not callable(kernel):
        raise TypeError(f"kernel must be callable (case -> dict of arrays or None), not {kernel!r}")
    family = str(family)
    if family not in FAMILIES + ("all",):
        raise ValueError(
            f"family {family!r}: the families are {', '.join(FAMILIES)} (or 'all')"
        )
    dt = normalize_dtype(dtype)
    if in_process is None:
        # BNCONF_BIN names a binary to judge with: it is used (the protocol, not the module).
        in_process = _inproc.NATIVE and str(suite) != "replicated" and not os.environ.get(ENV_VAR)
    if in_process:
        if seed is not None and not 0 <= int(seed) < 2**64:
            raise ValueError(f"--seed: {seed} is not an integer in 0..2^64")
        o, lay = _names("--ops", ops), _names("--layouts", layouts)
        s = None if seed is None else int(seed)
        return _inproc.check(kernel, str(suite), dt, o, lay, s, require_all, family)
    exe = find_bnconf_bin()
    sel = ["--suite", str(suite), "--dtype", dt]
    if family != "batch_norm":
        sel += ["--family", family]
    if seed is not None:
        sel += ["--seed", str(int(seed))]
    sel += _list_arg("--ops", ops) + _list_arg("--layouts", layouts)

    with tempfile.TemporaryDirectory(prefix="bnconf-py-") as tmp:
        suite_dir = os.path.join(tmp, "suite")
        p = _run([exe, "export", *sel, "--out", suite_dir])
        if p.returncode != 0:
            msg = _refusal(p)
            if any(
                f in msg for f in ("--dtype", "--suite", "--ops", "--layouts", "--seed", "--family")
            ):
                raise ValueError(msg)
            raise RuntimeError(f"bnconf export failed (exit {p.returncode}): {msg}")

        run_suite_dir(kernel, suite_dir)

        report_path = os.path.join(tmp, "report.json")
        argv = [exe, "check", suite_dir, "--report", report_path]
        if require_all:
            argv.append("--require-all")
        p = _run(argv)
        if p.returncode not in (0, 1) or not os.path.exists(report_path):
            raise RuntimeError(f"bnconf check failed (exit {p.returncode}): {_refusal(p)}")
        with open(report_path) as f:
            doc = json.load(f)
    return Report(doc, ok=p.returncode == 0, text=p.stdout, returncode=p.returncode)


def assert_conforms(kernel: Kernel, *args, **kwargs) -> Report:
    """:func:`check`, then raise AssertionError unless the kernel conforms; the message names
    the worst non-conforming cases (id, worst ratio, output, expected and actual). Returns the
    report when it conforms."""
    report = check(kernel, *args, **kwargs)
    if not report.ok:
        raise AssertionError(report.describe(limit=MAX_LISTED))
    return report
