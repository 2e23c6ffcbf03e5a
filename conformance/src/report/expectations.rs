//! The expectations gate in words and files: its lines in the human report, its record in
//! `--report` (`"expectations"`), and the document `--write-expectations FILE` writes
//! (`bnconf-expectations/1`). The gate itself (reading the file, deciding expected, new and
//! stale failures) is `judge::gate`'s.

use crate::error::Result;
use crate::formats::atomic::write_bytes;
use crate::judge::diagnosis::Diagnosis;
use crate::judge::verdict::{CaseResult, Verdict};
use serde_json::{json, Value};
use std::path::Path;

// The gate, kept at its paths (`bnconf::report::expectations::parse`, `gate`, ...).
pub use crate::judge::gate::*;

impl Gate {
    /// The JSON record in `--report` (`"expectations"`).
    pub fn to_json(&self) -> Value {
        json!({
            "file": self.path,
            "ok": self.ok(),
            "expected_failures": self.expected.iter().map(|(c, r)| json!({"case": c, "reason": r})).collect::<Vec<_>>(),
            "new_failures": self.new_failures,
            "stale": self.stale.iter().map(|(e, pass)| json!({"case": e.case, "reason": e.reason, "now_conforming": pass})).collect::<Vec<_>>(),
            "unmatched": self.unmatched.iter().map(|e| json!({"case": e.case, "reason": e.reason})).collect::<Vec<_>>(),
        })
    }

    /// The lines of the human report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "expectations {}: {} expected failures, {} new failures, {} stale entries{}\n",
            self.path,
            self.expected.len(),
            self.new_failures.len(),
            self.stale.len(),
            if self.ok() { "" } else { " — FAIL" }
        );
        for id in &self.new_failures {
            s += &format!("  NEW FAILURE {id} (not in the expectations file)\n");
        }
        for (e, pass) in &self.stale {
            let shown: Vec<&str> = pass.iter().take(3).map(String::as_str).collect();
            let more = if pass.len() > 3 {
                format!(" and {} more", pass.len() - 3)
            } else {
                String::new()
            };
            s += &format!(
                "  STALE expectation {:?}{}: no case it matches fails any more ({}{more} now conform{}): remove it\n",
                e.case,
                if e.reason.is_empty() { String::new() } else { format!(" ({})", e.reason) },
                shown.join(", "),
                if pass.len() == 1 { "s" } else { "" }
            );
        }
        if !self.unmatched.is_empty() {
            let shown: Vec<String> = self
                .unmatched
                .iter()
                .take(5)
                .map(|e| format!("{:?}", e.case))
                .collect();
            s +=
                &format!(
                "  note: {} entries match no case of this run (other shards or filters): {}{}\n",
                self.unmatched.len(),
                shown.join(", "),
                if self.unmatched.len() > 5 { ", …" } else { "" }
            );
        }
        s
    }
}

/// The expectations document listing every current failure (exact case ids, suite order),
/// with a reason saying how it fails (and what it behaves like, when diagnosed).
pub fn document(results: &[CaseResult], require_all: bool, diagnosis: &[Diagnosis]) -> Value {
    let list: Vec<Value> = results
        .iter()
        .filter(|r| is_failure(r, require_all))
        .map(|r| {
            let mut reason = match &r.verdict {
                Verdict::Malformed(w) => format!("malformed: {w}"),
                Verdict::Unsupported(w) => format!("unsupported: {w}"),
                _ => {
                    let worst = super::detail::over_worst_first(r)
                        .first()
                        .map(|o| format!(" ({}[{}])", o.name, o.index))
                        .unwrap_or_default();
                    format!(
                        "fails: worst ratio {} > k = {:.1}{worst}",
                        super::fmt_ratio(r.worst_ratio),
                        r.k
                    )
                }
            };
            if let Some(d) = diagnosis.iter().find(|d| d.cases.contains(&r.id)) {
                reason += &format!("; behaves like {}", d.kernel);
            }
            json!({"case": r.id, "reason": reason})
        })
        .collect();
    json!({"format": FORMAT, "expected_failures": list})
}

/// `--write-expectations FILE`.
pub fn write(
    path: &Path,
    results: &[CaseResult],
    require_all: bool,
    diagnosis: &[Diagnosis],
) -> Result<usize> {
    let doc = document(results, require_all, diagnosis);
    let n = doc["expected_failures"].as_array().map_or(0, Vec::len);
    let text = serde_json::to_string_pretty(&doc).expect("json") + "\n";
    write_bytes(path, text.as_bytes())?;
    Ok(n)
}
