//! Reports: the human table, `--report FILE.json`, `--junit FILE.xml`. Deterministic: the
//! same results give the same bytes (no timestamps, no thread-dependent order).

use crate::error::Result;
use crate::formats::atomic::write_bytes;
use crate::judge::check::{summarize, CaseResult, Verdict};
use crate::suite::SuiteCase;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::json;
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

/// Table per (op, layout, level) and the failing cases in detail.
pub fn human(results: &[CaseResult], cases: &[SuiteCase], max_details: usize) -> String {
    let mut groups: BTreeMap<(usize, usize, usize), Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        let oi = bnconf_spec::Op::ALL
            .iter()
            .position(|o| o.name() == r.op)
            .unwrap_or(0);
        let li = bnconf_spec::Layout::ALL
            .iter()
            .position(|l| l.name() == r.layout)
            .unwrap_or(0);
        groups
            .entry((oi, li, r.level as usize))
            .or_default()
            .push(r);
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<7} {:<13} {:>6} {:>6} {:>6} {:>6} {:>10}  verdict",
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
            "{:<14} {:<7} {:<13} {:>6} {:>6} {:>6} {:>6} {:>10}  {verdict}",
            r0.op,
            r0.layout,
            r0.level.name(),
            rs.len(),
            sm.passed,
            sm.failed,
            sm.unsupported,
            fmt_ratio(sm.worst)
        );
    }
    let by_id: BTreeMap<&str, &SuiteCase> = cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let bad: Vec<&CaseResult> = results
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Fail | Verdict::Malformed(_)))
        .collect();
    if !bad.is_empty() {
        let _ = writeln!(
            s,
            "\nnon-conforming cases ({}; ratio = |error| / (u·(cond+mag)), conforming when ≤ k):",
            bad.len()
        );
        for r in bad.iter().take(max_details) {
            if let Some(c) = by_id.get(r.id.as_str()) {
                let _ = writeln!(s, "  {}", r.detail(c));
            }
        }
        if bad.len() > max_details {
            let _ = writeln!(s, "  … and {} more (see --report)", bad.len() - max_details);
        }
    }
    let sm = summarize(results);
    let _ = writeln!(
        s,
        "\nsummary: {} conforming, {} not conforming, {} unsupported; worst ratio {}",
        sm.passed,
        sm.failed,
        sm.unsupported,
        fmt_ratio(sm.worst)
    );
    s
}

/// `--report FILE.json`.
pub fn write_json(path: &Path, suite: &str, dtype: &str, results: &[CaseResult]) -> Result<()> {
    let sm = summarize(results);
    let doc = json!({
        "format": "bnconf-report/1",
        "suite": suite,
        "dtype": dtype,
        "model": "ratio = |computed - exact| / (u * (cond + mag)); an element conforms when ratio <= k(m) = 4 + 2*log2(m)",
        "summary": {"conforming": sm.passed, "not_conforming": sm.failed, "unsupported": sm.unsupported, "worst_ratio": crate::judge::check::num(sm.worst)},
        "cases": results.iter().map(CaseResult::to_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&doc).expect("json") + "\n";
    write_bytes(path, text.as_bytes())
}

/// `--junit FILE.xml`: one test suite per op, one test case per case.
pub fn write_junit(path: &Path, suite: &str, results: &[CaseResult]) -> Result<()> {
    let mut report = Report::new(format!("bnconf {suite}"));
    let mut by_op: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        by_op.entry(r.op).or_default().push(r);
    }
    for (op, rs) in by_op {
        let mut ts = TestSuite::new(op);
        for r in rs {
            let status = match &r.verdict {
                Verdict::Pass => TestCaseStatus::success(),
                Verdict::Unsupported(w) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(w.clone());
                    s
                }
                Verdict::Fail | Verdict::Malformed(_) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    let msg = match &r.verdict {
                        Verdict::Malformed(w) => w.clone(),
                        _ => format!("worst ratio {} > k = {:.1}", fmt_ratio(r.worst_ratio), r.k),
                    };
                    s.set_message(msg);
                    s
                }
            };
            let mut tc = TestCase::new(r.id.clone(), status);
            tc.set_classname(format!("{}.{}", r.op, r.layout));
            ts.add_test_case(tc);
        }
        report.add_test_suite(ts);
    }
    let xml = report
        .to_string()
        .map_err(|e| crate::error::ConfError::io(path, e))?;
    write_bytes(path, xml.as_bytes())
}
