//! Reports: the human report, `--report FILE.json`, `--junit FILE.xml`, `--html FILE.html`,
//! one failing case in words (`detail`), and the expectations gate's lines and file
//! (`expectations`). What they render is decided in `judge` (verdicts, the diagnosis against
//! the known-bad kernels, the expectations gate).
//! Deterministic: the same results give the same bytes (no timestamps, no thread-dependent
//! order). docs/REPORTS.md describes what each says.

pub mod detail;
pub mod expectations;
pub mod family;
pub mod html;
pub mod json;

use crate::error::Result;
use crate::formats::atomic::write_bytes;
use crate::judge::diagnosis::Diagnosis;
use crate::judge::gate::Gate;
use crate::judge::verdict::{summarize, CaseResult, Verdict};
use crate::suite::shard::Shard;
use crate::suite::SuiteCase;
use json::num;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// A worst-ratio cell: `0.42`, `3.1e6`, `inf`.
pub fn fmt_ratio(r: f64) -> String {
    if r.is_infinite() || r.is_nan() {
        "inf".into()
    } else if r == 0.0 {
        "0".into()
    } else if (0.01..1000.0).contains(&r) {
        format!("{r:.2}")
    } else {
        format!("{r:.1e}")
    }
}

/// The worst ratio of a group of cases as a table cell: over the judged cases (pass or fail),
/// `malformed` where every failing case's output was missing or malformed and none was
/// judged, `-` where nothing was (all unsupported).
pub fn worst_cell<'r>(rs: impl IntoIterator<Item = &'r CaseResult>) -> String {
    let (mut judged, mut malformed, mut worst) = (0usize, 0usize, 0f64);
    for r in rs {
        match r.verdict {
            Verdict::Pass | Verdict::Fail => {
                judged += 1;
                worst = if r.worst_ratio.is_nan() {
                    f64::INFINITY
                } else {
                    worst.max(r.worst_ratio)
                };
            }
            Verdict::Malformed(_) => malformed += 1,
            Verdict::Unsupported(_) => {}
        }
    }
    match (judged, malformed) {
        (0, 0) => "-".into(),
        (0, _) => "malformed".into(),
        _ => fmt_ratio(worst),
    }
}

/// Everything a report says about one run.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// Suite name.
    pub suite: &'a str,
    /// dtype name.
    pub dtype: &'a str,
    /// The results, in suite order.
    pub results: &'a [CaseResult],
    /// The suite's cases (for where an element lies and the inputs there).
    pub cases: &'a [SuiteCase],
    /// Known-bad kernels that reproduce the failures, best first (`None`: not diagnosed).
    pub diagnosis: Option<&'a [Diagnosis]>,
    /// The expectations gate, when `--expectations` was given.
    pub gate: Option<&'a Gate>,
    /// The shard judged, if any.
    pub shard: Option<Shard>,
    /// Why the run fails whatever the verdicts (e.g. the kernel timed out).
    pub harness_failure: Option<String>,
    /// The generated suite's name and seed, where [`Context::cases`] may hold a case without
    /// its inputs (a suite judged without keeping its failing cases' inputs): the human
    /// report's details make them again ([`crate::suite::generate::fill_inputs`]), one case
    /// at a time, as they print it.
    pub refill: Option<(&'a str, u64)>,
}

impl<'a> Context<'a> {
    /// A plain context: no diagnosis, gate, shard or harness failure.
    pub fn new(
        suite: &'a str,
        dtype: &'a str,
        results: &'a [CaseResult],
        cases: &'a [SuiteCase],
    ) -> Context<'a> {
        Context {
            suite,
            dtype,
            results,
            cases,
            diagnosis: None,
            gate: None,
            shard: None,
            harness_failure: None,
            refill: None,
        }
    }

    /// The diagnosis (empty when not diagnosed or nothing matched).
    pub fn diag(&self) -> &'a [Diagnosis] {
        self.diagnosis.unwrap_or(&[])
    }

    pub fn case(&self, id: &str) -> Option<&'a SuiteCase> {
        self.cases.iter().find(|c| c.id == id)
    }

    /// The multi-line detail of result `r` of case `c` ([`CaseResult::detail`]), its inputs
    /// made again first where `c` is held without them ([`Context::refill`]).
    pub fn detail(&self, r: &CaseResult, c: &SuiteCase) -> String {
        match self.refill {
            Some((name, seed)) if c.inputs.is_empty() => {
                let mut made = c.clone();
                crate::suite::generate::fill_inputs(name, seed, &mut made);
                r.detail(&made)
            }
            _ => r.detail(c),
        }
    }

    pub fn expected_reason(&self, id: &str) -> Option<&'a str> {
        self.gate.and_then(|g| {
            g.expected
                .iter()
                .find(|(c, _)| c == id)
                .map(|(_, r)| r.as_str())
        })
    }

    /// The non-conforming cases, worst first (severity = ratio/k, malformed first); with a
    /// gate, the new failures before the expected ones.
    pub fn failures(&self) -> Vec<&'a CaseResult> {
        let mut bad: Vec<&CaseResult> = self
            .results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Fail | Verdict::Malformed(_)))
            .collect();
        bad.sort_by(|a, b| {
            let ea = self.expected_reason(&a.id).is_some();
            let eb = self.expected_reason(&b.id).is_some();
            ea.cmp(&eb)
                .then(detail::severity(b).total_cmp(&detail::severity(a)))
        });
        bad
    }
}

fn op_index(op: &str) -> usize {
    use bnconf_impl::family::Named;
    // batch_norm's ops, then the normalization family's
    bnconf_spec::Op::ALL
        .iter()
        .position(|o| o.name() == op)
        .or_else(|| {
            bnconf_impl::family::FamilyOp::ALL
                .iter()
                .position(|o| o.name() == op)
                .map(|i| bnconf_spec::Op::ALL.len() + i)
        })
        .unwrap_or(usize::MAX)
}

/// The table order of a layout: batch_norm's, then the normalization family's others.
fn layout_index(layout: &str) -> usize {
    use bnconf_impl::family::Named;
    bnconf_spec::Layout::ALL
        .iter()
        .position(|l| l.name() == layout)
        .or_else(|| {
            bnconf_impl::family::FamilyLayout::ALL
                .iter()
                .position(|l| l.name() == layout)
                .map(|i| bnconf_spec::Layout::ALL.len() + i)
        })
        .unwrap_or(0)
}

/// The cases of one (op, class): `((op, class), cases)`.
pub type OpClassGroup<'r> = ((&'r str, &'r str), Vec<&'r CaseResult>);

/// Per (op, class): the cases of each, in op order and the classes' order of first appearance.
pub fn by_op_class(results: &[CaseResult]) -> Vec<OpClassGroup<'_>> {
    let mut class_order: Vec<&str> = Vec::new();
    for r in results {
        if !class_order.contains(&r.class.as_str()) {
            class_order.push(&r.class);
        }
    }
    let mut groups: BTreeMap<(usize, usize), OpClassGroup> = BTreeMap::new();
    for r in results {
        let ci = class_order.iter().position(|c| *c == r.class).unwrap_or(0);
        groups
            .entry((op_index(r.op), ci))
            .or_insert(((r.op, r.class.as_str()), vec![]))
            .1
            .push(r);
    }
    groups.into_values().collect()
}

/// The per-op × class summary: one row per data class, one column per op; a cell is
/// `conforming/judged worst-ratio`, `*` marking a cell with a failing case, `unsup.` where
/// nothing was supported, `·` where the op has no case of that class.
pub fn class_table(results: &[CaseResult]) -> String {
    let mut ops: Vec<&str> = Vec::new();
    let mut classes: Vec<&str> = Vec::new();
    for r in results {
        if !ops.contains(&r.op) {
            ops.push(r.op);
        }
        if !classes.contains(&r.class.as_str()) {
            classes.push(&r.class);
        }
    }
    ops.sort_by_key(|o| op_index(o));
    let cell = |op: &str, class: &str| -> String {
        let rs: Vec<&CaseResult> = results
            .iter()
            .filter(|r| r.op == op && r.class == class)
            .collect();
        if rs.is_empty() {
            return "·".into();
        }
        let sm = summarize(rs.iter().copied());
        if sm.passed + sm.failed == 0 {
            return "unsup.".into();
        }
        format!(
            "{}/{} {}{}",
            sm.passed,
            sm.passed + sm.failed,
            worst_cell(rs.iter().copied()),
            if sm.failed > 0 { "*" } else { "" }
        )
    };
    let cells: Vec<Vec<String>> = classes
        .iter()
        .map(|c| ops.iter().map(|o| cell(o, c)).collect())
        .collect();
    let cw = classes.iter().map(|c| c.len()).max().unwrap_or(5).max(5);
    let widths: Vec<usize> = ops
        .iter()
        .enumerate()
        .map(|(j, o)| {
            cells
                .iter()
                .map(|row| row[j].chars().count())
                .chain([o.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    let _ = write!(s, "{:<cw$}", "class");
    for (o, w) in ops.iter().zip(&widths) {
        let _ = write!(s, "  {o:>w$}");
    }
    s.push('\n');
    for (c, row) in classes.iter().zip(&cells) {
        let _ = write!(s, "{c:<cw$}");
        for (v, w) in row.iter().zip(&widths) {
            let pad = w.saturating_sub(v.chars().count());
            let _ = write!(s, "  {}{v}", " ".repeat(pad));
        }
        s.push('\n');
    }
    s
}

/// The diagnosis in the human report: `diagnosis: behaves like … on 65 of 65 failing cases
/// (…)`, then the other matches, or that none matched.
pub fn diagnosis_lines(diag: &[Diagnosis], failing: usize) -> String {
    let mut s = String::new();
    match diag.split_first() {
        Some((d, rest)) => {
            let _ = writeln!(s, "diagnosis: {}", d.sentence());
            for d in rest {
                let _ = writeln!(s, "           also {}", d.sentence());
            }
        }
        None if failing > 0 => {
            let _ = writeln!(
                s,
                "diagnosis: no known-bad kernel of `bnconf kernel --list` reproduces the failing cases (a defect without a fingerprint, or precision)"
            );
        }
        None => {}
    }
    s
}

/// Table per (op, layout, level) and the failing cases in detail (no diagnosis or gate).
pub fn human(results: &[CaseResult], cases: &[SuiteCase], max_details: usize) -> String {
    human_report(&Context::new("", "", results, cases), max_details)
}

/// The human report: a table per (op, layout, level), the per-op × class summary, the
/// failing cases worst first (the first `max_details` in detail), the expectations gate, the
/// diagnosis, and the summary line (always the last line).
pub fn human_report(ctx: &Context, max_details: usize) -> String {
    let results = ctx.results;
    let mut groups: BTreeMap<(usize, usize, usize), Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        let li = layout_index(r.layout);
        groups
            .entry((op_index(r.op), li, r.level as usize))
            .or_default()
            .push(r);
    }
    let mut s = String::new();
    if let Some(sh) = ctx.shard {
        let _ = writeln!(
            s,
            "shard {sh} of suite {}: {} cases\n",
            ctx.suite,
            results.len()
        );
    }
    // batch_norm's ops fit 14 columns; the family's longer names widen the column
    let ow = results
        .iter()
        .map(|r| r.op.len())
        .max()
        .unwrap_or(0)
        .max(14);
    let _ = writeln!(
        s,
        "{:<ow$} {:<7} {:<13} {:>6} {:>6} {:>6} {:>6} {:>10}  verdict",
        "op", "layout", "level", "cases", "pass", "fail", "unsup", "worst"
    );
    for rs in groups.values() {
        let r0 = rs[0];
        let sm = summarize(rs.iter().copied());
        let verdict = if sm.failed > 0 {
            "FAIL"
        } else if sm.passed == 0 {
            "unsupported"
        } else {
            "conforms"
        };
        let _ = writeln!(
            s,
            "{:<ow$} {:<7} {:<13} {:>6} {:>6} {:>6} {:>6} {:>10}  {verdict}",
            r0.op,
            r0.layout,
            r0.level.name(),
            rs.len(),
            sm.passed,
            sm.failed,
            sm.unsupported,
            worst_cell(rs.iter().copied())
        );
    }
    let bad = ctx.failures();
    if !results.is_empty() {
        let _ = writeln!(
            s,
            "\nby class (cell: conforming/judged and worst ratio; * = a case fails):"
        );
        s += &class_table(results);
    }
    if !bad.is_empty() {
        let _ = writeln!(
            s,
            "\nnon-conforming cases ({}, worst first; ratio = |error| / (u·(cond+mag)), conforming when ≤ k):",
            bad.len()
        );
        for r in bad.iter().take(max_details) {
            let mark = ctx
                .expected_reason(&r.id)
                .map(|w| format!("  [expected failure: {w}]"))
                .unwrap_or_default();
            match ctx.case(&r.id) {
                Some(c) => {
                    let text = ctx.detail(r, c);
                    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
                    let _ = writeln!(s, "  {first}{mark}");
                    if !rest.is_empty() {
                        let _ = writeln!(s, "{rest}");
                    }
                }
                None => {
                    // no case to locate elements in (the family's reports): the verdict, and
                    // why for a malformed one
                    let why = match &r.verdict {
                        Verdict::Malformed(w) => format!(" — {w}"),
                        _ => String::new(),
                    };
                    let _ = writeln!(s, "  {} {}{why}{mark}", r.id, r.verdict.name());
                }
            }
        }
        if bad.len() > max_details {
            let rest = &bad[max_details..];
            const LISTED: usize = 30;
            let _ = writeln!(s, "  … and {} more, worst first:", rest.len());
            for r in rest.iter().take(LISTED) {
                let what = match &r.verdict {
                    Verdict::Malformed(w) => format!("MALFORMED — {w}"),
                    _ => format!(
                        "worst ratio {} = {}·k ({})",
                        fmt_ratio(r.worst_ratio),
                        fmt_ratio(detail::severity(r)),
                        detail::over_worst_first(r)
                            .iter()
                            .map(|o| match o.rank {
                                Some(r) => format!("{}@rank{r}: {} of {}", o.name, o.n_over, o.len),
                                None => format!("{}: {} of {}", o.name, o.n_over, o.len),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let mark = if ctx.expected_reason(&r.id).is_some() {
                    " [expected]"
                } else {
                    ""
                };
                let _ = writeln!(s, "    {} {what}{mark}", r.id);
            }
            if rest.len() > LISTED {
                let _ = writeln!(s, "    … and {} more (see --report)", rest.len() - LISTED);
            }
        }
    }
    if let Some(g) = ctx.gate {
        s.push('\n');
        s += &g.human();
    }
    let failing = results
        .iter()
        .filter(|r| r.verdict == Verdict::Fail)
        .count();
    if let Some(diag) = ctx.diagnosis {
        let d = diagnosis_lines(diag, failing);
        if !d.is_empty() {
            s.push('\n');
            s += &d;
        }
    }
    if let Some(h) = &ctx.harness_failure {
        let _ = writeln!(s, "\nFAILED: {h}");
    }
    let sm = summarize(results);
    let malformed = results
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Malformed(_)))
        .count();
    let _ = writeln!(
        s,
        "\nsummary: {} conforming, {} not conforming{}, {} unsupported; worst ratio {}",
        sm.passed,
        sm.failed,
        if malformed > 0 {
            format!(" ({malformed} malformed)")
        } else {
            String::new()
        },
        sm.unsupported,
        worst_cell(results)
    );
    s
}

/// The JSON record of one case: [`CaseResult::to_json`] plus where each output's worst element
/// lies (`channel`, `position`), the case's `severity` (worst ratio / k) and `behaves_like`
/// (the known-bad kernels that reproduce it).
pub fn case_json(ctx: &Context, r: &CaseResult) -> Value {
    let mut v = r.to_json();
    if let Some(c) = ctx.case(&r.id) {
        if let Some(outs) = v.get_mut("outputs").and_then(Value::as_array_mut) {
            for (o, ov) in r.outputs.iter().zip(outs.iter_mut()) {
                let loc = detail::locate(c, &o.name, o.index);
                let pos: serde_json::Map<String, Value> = loc
                    .coords
                    .iter()
                    .map(|(a, i)| (a.to_string(), json!(i)))
                    .collect();
                ov["channel"] = json!(loc.channel);
                ov["position"] = Value::Object(pos);
            }
        }
        v["m"] = json!(detail::cells_per_channel(c));
    }
    if matches!(r.verdict, Verdict::Fail | Verdict::Malformed(_)) {
        v["severity"] = num(detail::severity(r));
    }
    let like: Vec<&str> = ctx
        .diag()
        .iter()
        .filter(|d| d.cases.contains(&r.id))
        .map(|d| d.kernel.as_str())
        .collect();
    if !like.is_empty() {
        v["behaves_like"] = json!(like);
    }
    if let Some(w) = ctx.expected_reason(&r.id) {
        v["expected_failure"] = json!(w);
    }
    v
}

/// The `--report` document (`bnconf-report/1`).
pub fn json_report(ctx: &Context) -> Value {
    let sm = summarize(ctx.results);
    let by_class: Vec<Value> = by_op_class(ctx.results)
        .into_iter()
        .map(|((op, class), rs)| {
            let sm = summarize(rs.iter().copied());
            json!({"op": op, "class": class, "dtype": ctx.dtype, "cases": rs.len(), "conforming": sm.passed,
                   "not_conforming": sm.failed, "unsupported": sm.unsupported,
                   "worst_ratio": if sm.passed + sm.failed == 0 { Value::Null } else { num(sm.worst) }})
        })
        .collect();
    let mut doc = json!({
        "format": "bnconf-report/1",
        "suite": ctx.suite,
        "dtype": ctx.dtype,
        "model": "ratio = |computed - exact| / (u * (cond + mag)); an element conforms when ratio <= k(m) = 4 + 2*log2(m)",
        "summary": {"conforming": sm.passed, "not_conforming": sm.failed, "unsupported": sm.unsupported, "worst_ratio": num(sm.worst)},
        "diagnosis": ctx.diag().iter().map(|d| json!({"kernel": d.kernel, "matched": d.matched, "failing": d.failing,
            "description": d.description, "cases": d.cases})).collect::<Vec<_>>(),
        "by_class": by_class,
        "cases": ctx.results.iter().map(|r| case_json(ctx, r)).collect::<Vec<_>>(),
    });
    if let Some(sh) = ctx.shard {
        doc["shard"] = json!(sh.to_string());
    }
    if let Some(g) = ctx.gate {
        doc["expectations"] = g.to_json();
    }
    if let Some(h) = &ctx.harness_failure {
        doc["harness_failure"] = json!(h);
    }
    doc
}

/// `--report FILE.json` (no diagnosis or gate).
pub fn write_json(path: &Path, suite: &str, dtype: &str, results: &[CaseResult]) -> Result<()> {
    write_json_report(path, &Context::new(suite, dtype, results, &[]))
}

/// `--report FILE.json`.
pub fn write_json_report(path: &Path, ctx: &Context) -> Result<()> {
    let text = serde_json::to_string_pretty(&json_report(ctx)).expect("json") + "\n";
    write_bytes(path, text.as_bytes())
}

/// `--junit FILE.xml` (no gate).
pub fn write_junit(path: &Path, suite: &str, results: &[CaseResult]) -> Result<()> {
    write_junit_report(path, &Context::new(suite, "", results, &[]))
}

/// The JUnit XML: one test suite per op, one test case per case (`classname` = `op.layout`).
/// A failure's message names the worst output, its index and place, expected, actual, their
/// ratio, the ratio to the budget and k; its text is the full detail. Unsupported cases and,
/// under `--expectations`, expected failures are `<skipped>`; stale expectations and a harness
/// failure (timeout) are failing test cases of the suites `expectations` and `harness`.
pub fn junit_report(ctx: &Context) -> std::result::Result<String, quick_junit::SerializeError> {
    let mut report = Report::new(format!("bnconf {}", ctx.suite));
    let mut by_op: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in ctx.results {
        by_op.entry(r.op).or_default().push(r);
    }
    for (op, rs) in by_op {
        let mut ts = TestSuite::new(op);
        for r in rs {
            let case = ctx.case(&r.id);
            let status = match &r.verdict {
                Verdict::Pass => TestCaseStatus::success(),
                Verdict::Unsupported(w) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(w.clone());
                    s
                }
                Verdict::Fail | Verdict::Malformed(_) => {
                    let msg = detail::junit_message(r, case);
                    if let Some(w) = ctx.expected_reason(&r.id) {
                        let mut s = TestCaseStatus::skipped();
                        s.set_message(format!("expected failure ({w}): {msg}"));
                        s
                    } else {
                        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        s.set_message(msg);
                        if let (Some(c), Verdict::Fail) = (case, &r.verdict) {
                            s.set_description(ctx.detail(r, c));
                        }
                        s
                    }
                }
            };
            let mut tc = TestCase::new(r.id.clone(), status);
            tc.set_classname(format!("{}.{}", r.op, r.layout));
            ts.add_test_case(tc);
        }
        report.add_test_suite(ts);
    }
    if let Some(g) = ctx.gate {
        if !g.stale.is_empty() {
            let mut ts = TestSuite::new("expectations");
            for (e, pass) in &g.stale {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!(
                    "stale expectation {:?}: no case it matches fails any more ({} now conform): remove it from {}",
                    e.case,
                    pass.join(", "),
                    g.path
                ));
                let mut tc = TestCase::new(e.case.clone(), s);
                tc.set_classname("expectations.stale");
                ts.add_test_case(tc);
            }
            report.add_test_suite(ts);
        }
    }
    if let Some(h) = &ctx.harness_failure {
        let mut ts = TestSuite::new("harness");
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
        s.set_message(h.clone());
        let mut tc = TestCase::new("kernel", s);
        tc.set_classname("harness");
        ts.add_test_case(tc);
        report.add_test_suite(ts);
    }
    report.to_string()
}

/// `--junit FILE.xml`.
pub fn write_junit_report(path: &Path, ctx: &Context) -> Result<()> {
    let xml = junit_report(ctx).map_err(|e| crate::error::ConfError::io(path, e))?;
    write_bytes(path, xml.as_bytes())
}
