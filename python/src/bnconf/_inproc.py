"""In-process judging through the extension module ``bnconf._native`` (the harness library,
bound with pyo3): suites generated in memory, a kernel's outputs judged from memory — no
process and no temporary directory per case. The same verdicts, ratios and report as
``bnconf check DIR`` on the same outputs (python/tests/test_inproc.py compares them)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ._bf16 import bf16_bits_to_float32
from ._report import CaseResult, Report

try:
    from . import _native
except ImportError:  # a source tree without the built module: bnconf.check uses the binary
    _native = None

#: Whether the extension module is present (``bnconf.check`` judges in process when it is).
NATIVE = _native is not None


def require_native() -> Any:
    if _native is None:
        raise RuntimeError(
            "bnconf's extension module (bnconf._native) is not built: install the package "
            "with `pip install ./python` (it builds the module and the binary with maturin)"
        )
    return _native


def _array(descr: str, shape, data: bytes) -> np.ndarray:
    a = np.frombuffer(data, dtype=np.dtype(descr)).reshape(tuple(shape)).copy()
    return a


def case_from_native(nc) -> "Case":  # noqa: F821 (Case: from _check, imported late)
    """The :class:`bnconf.Case` of a native case (batch_norm's or the family's): its case.json and its inputs as numpy arrays
    (bfloat16 bit patterns as float32, as ``load_case`` reads them)."""
    from ._check import Case, _bf16_storage_ok

    j = json.loads(nc.json())
    inputs = {}
    for name, descr, shape, data in nc.inputs():
        a = _array(descr, shape, data)
        if a.dtype.kind == "u" and a.dtype.itemsize == 2:
            _bf16_storage_ok(j)
            a = bf16_bits_to_float32(a)
        inputs[name] = a
    case = Case(j, inputs)
    case._native = nc
    return case


def _given(case, result) -> Tuple[str, str, List[Tuple[str, str, Tuple[int, ...], bytes]]]:
    """A kernel's result as the native judge takes it: ("outputs", "", arrays) with each
    output encoded as ``write_outputs`` writes its npy file, or ("unsupported", reason, [])."""
    from ._check import encode_output

    if result is None:
        return "unsupported", "kernel returned None", []
    if not hasattr(result, "items"):
        raise TypeError(
            f"case {case.id}: the kernel returned {type(result).__name__}; expected a dict "
            f"of numpy arrays ({', '.join(case.outputs)}) or None (unsupported)"
        )
    arrays = []
    for name, value in result.items():
        if name not in case.outputs:
            continue  # extra outputs are not judged; a missing one is malformed
        a = encode_output(case, name, value)
        arrays.append((name, a.dtype.str, tuple(int(n) for n in a.shape), a.tobytes()))
    return "outputs", "", arrays


def run_kernel(kernel, case) -> Tuple[str, str, list]:
    """Run ``kernel`` on ``case`` as ``bnconf.check`` does: its outputs, ``Unsupported``'s
    reason, or any other exception as the case's kernel error."""
    from ._check import Unsupported

    try:
        with np.errstate(all="ignore"):
            result = kernel(case)
    except Unsupported as e:
        return "unsupported", str(e) or "kernel raised Unsupported", []
    except Exception as e:  # the kernel failed on this case (FORMAT.md: out/error)
        return "error", f"{type(e).__name__}: {e}", []
    return _given(case, result)


class CaseReport(CaseResult):
    """The verdict on one case (``bnconf.judge``): ``ok``, ``verdict`` ("pass", "fail",
    "unsupported", "malformed"), ``worst_ratio``, ``k``, ``outputs`` (per output its worst
    element), ``reason``; ``str()`` names the worst element (expected and actual)."""

    def __str__(self):
        return self.describe()


def judge(case, outputs) -> CaseReport:
    """Judge ``outputs`` (a dict output name → array, as a kernel returns them; None for
    unsupported) on ``case`` — a case as ``bnconf.check`` hands it to a kernel, or one drawn by
    ``bnconf.hypothesis.cases()`` — in process: the verdict and ratios ``bnconf check`` gives
    for the same outputs written to npy files."""
    require_native()
    nc = getattr(case, "_native", None)
    if nc is None:
        raise TypeError(
            "bnconf.judge: case must be a case handed out by bnconf.check or drawn by "
            f"bnconf.hypothesis.cases(), not {case!r}"
        )
    kind, message, arrays = _given(case, outputs)
    return CaseReport(json.loads(nc.judge(kind, message, arrays)))


def check(
    kernel,
    suite: str,
    dtype: str,
    ops: Optional[Iterable[str]],
    layouts: Optional[Iterable[str]],
    seed: Optional[int],
    require_all: bool,
    family: str = "batch_norm",
) -> Report:
    """``bnconf.check`` in process (same arguments, already normalized). The normalization
    family (``family`` other than "batch_norm") is judged as ``bnconf check DIR`` judges a
    family export: the same report document (with ``family`` and each case's ``not_given``)
    and printed report (the family table first)."""
    nat = require_native()
    if family == "batch_norm":
        s = nat.open_suite(suite, dtype, seed, list(ops or []), list(layouts or []))
    else:
        s = nat.open_family_suite(family, suite, dtype, seed, list(ops or []), list(layouts or []))
    for i in range(len(s)):
        case = case_from_native(s.case(i))
        kind, message, arrays = run_kernel(kernel, case)
        s.judge(i, kind, message, arrays)
    doc, text, ok = s.report(require_all)
    return Report(json.loads(doc), ok=ok, text=text, returncode=0 if ok else 1)
