"""The report of `bnconf check --report FILE.json` (format `bnconf-report/1`, docs/FORMAT.md)
as Python objects."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

#: Most failing cases named in ``str(report)`` and in ``assert_conforms``'s message.
MAX_LISTED = 10


def _float(v) -> float:
    """A report number: JSON numbers, or the strings "inf", "-inf", "NaN"."""
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _sort_key(r: float) -> float:
    return math.inf if math.isnan(r) else r


def fmt_ratio(r: float) -> str:
    """A ratio as bnconf prints it: ``0.42``, ``3.1e+06``, ``inf``."""
    if math.isinf(r) or math.isnan(r):
        return "inf"
    if r == 0:
        return "0"
    if 0.01 <= r < 1000:
        return f"{r:.2f}"
    return f"{r:.1e}"


class _Record:
    """Attribute access plus dict-style access to the raw JSON fields (``r["id"]``)."""

    json: Dict[str, Any]

    def __getitem__(self, key):
        return self.json[key]

    def get(self, key, default=None):
        return self.json.get(key, default)

    def keys(self):
        return self.json.keys()


class OutputResult(_Record):
    """One output of a case: its worst element (``index``, ``expected`` exact, ``actual``
    hex float, the budget's ``cond``/``mag``/``mag2``) and how many elements are over budget."""

    def __init__(self, j: Dict[str, Any]):
        self.json = j
        self.name: str = j.get("name")
        self.worst_ratio: float = _float(j.get("worst_ratio"))
        self.index: Optional[int] = j.get("index")
        self.expected: Optional[str] = j.get("expected")
        self.expected_f64: Optional[str] = j.get("expected_f64")
        self.actual: Optional[str] = j.get("actual")
        self.cond: float = _float(j.get("cond"))
        self.mag: float = _float(j.get("mag"))
        self.mag2: float = _float(j.get("mag2"))
        self.elements_over: Optional[int] = j.get("elements_over")

    def __repr__(self):
        return (
            f"OutputResult({self.name}[{self.index}]: ratio {fmt_ratio(self.worst_ratio)}, "
            f"expected {self.expected_f64} (exact {self.expected}), actual {self.actual}, "
            f"{self.elements_over} element(s) over budget)"
        )


class CaseResult(_Record):
    """One case's verdict: ``"pass"``, ``"fail"``, ``"unsupported"`` or ``"malformed"``
    (a missing or unreadable output file; ``reason`` names it)."""

    def __init__(self, j: Dict[str, Any]):
        self.json = j
        self.id: str = j.get("id")
        self.op: str = j.get("op")
        self.layout: str = j.get("layout")
        self.dtype: str = j.get("dtype")
        self.level: str = j.get("level")
        self.class_: str = j.get("class")
        self.klass = self.class_
        self.verdict: str = j.get("verdict")
        self.reason: Optional[str] = j.get("reason")
        self.worst_ratio: float = _float(j.get("worst_ratio"))
        self.k: float = _float(j.get("k"))
        self.outputs: List[OutputResult] = [OutputResult(o) for o in j.get("outputs") or []]

    @property
    def ok(self) -> bool:
        """The case conforms."""
        return self.verdict == "pass"

    @property
    def failed(self) -> bool:
        """The case does not conform (over budget, or malformed output)."""
        return self.verdict in ("fail", "malformed")

    @property
    def worst_output(self) -> Optional[OutputResult]:
        """The output with the largest ratio (None when no output was judged)."""
        if not self.outputs:
            return None
        return max(self.outputs, key=lambda o: _sort_key(o.worst_ratio))

    def describe(self) -> str:
        """One line: id, verdict, worst ratio against k, and where."""
        if self.verdict == "malformed":
            return f"{self.id}: malformed: {self.reason}"
        if self.verdict == "unsupported":
            return f"{self.id}: unsupported: {self.reason}"
        s = f"{self.id}: worst ratio {fmt_ratio(self.worst_ratio)} (k = {self.k:.1f})"
        o = self.worst_output
        if o is not None and o.index is not None:
            s += (
                f" in {o.name}[{o.index}]: expected {o.expected_f64}, got {o.actual}"
                f" ({o.elements_over} element(s) of {o.name} over budget)"
            )
        return s

    def __repr__(self):
        return f"CaseResult({self.verdict}: {self.describe()})"


class Report:
    """What ``bnconf.check`` returns.

    ``ok``: bnconf's verdict (exit status 0: every supported case conforms and at least one
    was supported). ``summary``: dict with ``conforming``, ``not_conforming``, ``unsupported``,
    ``worst_ratio`` (float; ``inf`` for NaN/inf outputs), plus ``total`` and ``malformed``.
    ``cases``: list of :class:`CaseResult` (in bnconf's order). ``failures``: the
    non-conforming cases, worst first. ``text``: bnconf's own table. ``json``: the raw report.
    """

    def __init__(self, doc: Dict[str, Any], ok: bool, text: str = "", returncode: int = 0):
        self.json = doc
        self.ok: bool = bool(ok)
        self.returncode = returncode
        self.text: str = text
        self.suite: Optional[str] = doc.get("suite")
        self.dtype: Optional[str] = doc.get("dtype")
        self.cases: List[CaseResult] = [CaseResult(c) for c in doc.get("cases") or []]
        s = dict(doc.get("summary") or {})
        s["worst_ratio"] = _float(s.get("worst_ratio", 0.0))
        s.setdefault("conforming", sum(c.ok for c in self.cases))
        s.setdefault("not_conforming", sum(c.failed for c in self.cases))
        s.setdefault("unsupported", sum(c.verdict == "unsupported" for c in self.cases))
        s["total"] = len(self.cases)
        s["malformed"] = sum(c.verdict == "malformed" for c in self.cases)
        self.summary: Dict[str, Any] = s

    @property
    def failures(self) -> List[CaseResult]:
        """Non-conforming cases (fail and malformed), worst first."""
        bad = [c for c in self.cases if c.failed]
        return sorted(
            bad,
            key=lambda c: (c.verdict != "malformed", -_sort_key(c.worst_ratio), c.id),
        )

    @property
    def unsupported(self) -> List[CaseResult]:
        return [c for c in self.cases if c.verdict == "unsupported"]

    @property
    def conforming(self) -> List[CaseResult]:
        return [c for c in self.cases if c.ok]

    def case(self, case_id: str) -> CaseResult:
        """The result of the case with this id (KeyError if none)."""
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)

    def headline(self) -> str:
        s = self.summary
        verdict = "conforms" if self.ok else "DOES NOT CONFORM"
        return (
            f"bnconf {self.suite} ({self.dtype}): {verdict}: {s['conforming']} conforming, "
            f"{s['not_conforming']} not conforming, {s['unsupported']} unsupported; "
            f"worst ratio {fmt_ratio(s['worst_ratio'])}"
        )

    def describe(self, limit: int = MAX_LISTED) -> str:
        """The headline, then the failing cases worst first (at most ``limit``)."""
        lines = [self.headline()]
        bad = self.failures
        if bad:
            lines.append(f"non-conforming cases, worst first ({len(bad)}):")
            lines += [f"  {c.describe()}" for c in bad[:limit]]
            if len(bad) > limit:
                lines.append(f"  ... and {len(bad) - limit} more (report.failures)")
        elif not self.ok:
            if self.summary["conforming"] == 0:
                lines.append(
                    f"no case was supported by the kernel ({self.summary['unsupported']} unsupported)"
                )
            elif self.unsupported:
                lines.append(f"unsupported cases ({len(self.unsupported)}):")
                lines += [f"  {c.describe()}" for c in self.unsupported[:limit]]
        return "\n".join(lines)

    def __str__(self):
        return self.describe()

    __repr__ = __str__
