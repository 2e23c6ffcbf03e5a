//! `--expectations FILE` / `--write-expectations FILE` (`bnconf-expectations/1`): gate CI on
//! "no new failures" for a kernel with known, accepted failures.
//!
//! ```json
//! {"format": "bnconf-expectations/1",
//!  "expected_failures": [{"case": "forward.*.f32.eps-large", "reason": "eps outside sqrt, #123"}]}
//! ```
//!
//! `case` is a case id or a glob over case ids (`*` any run of characters, `?` one). A failing
//! case (verdict `fail` or `malformed`; also `unsupported` under `--require-all`) that some
//! entry matches is an *expected failure* and does not fail the run; a failing case no entry
//! matches is a *new failure* (exit 1); an entry that matches cases of this run none of which
//! fails any more, and at least one of which conforms, is *stale* (exit 1, named) — delete it.
//! An entry that matches no case of this run (another shard, other filters) is only noted.

use crate::error::{ConfError, Result};
use crate::judge::verdict::{CaseResult, Verdict};
use serde_json::Value;
use std::path::Path;

/// The format tag.
pub const FORMAT: &str = "bnconf-expectations/1";

/// One entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// Case id or glob.
    pub case: String,
    /// Why the failure is accepted.
    pub reason: String,
}

/// An expectations file.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    /// Where it was read from (for messages).
    pub path: String,
    /// Its entries, in file order.
    pub entries: Vec<Expectation>,
}

/// `*` and `?` globs over case ids (no other metacharacters; everything else is literal).
pub fn glob_match(pattern: &str, id: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = id.chars().collect();
    let (mut i, mut j) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while j < s.len() {
        if i < p.len() && (p[i] == '?' || p[i] == s[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// Parse an expectations document (`path` names it in errors).
pub fn parse(text: &str, path: &str) -> Result<Expectations> {
    let v: Value = serde_json::from_str(text).map_err(|e| ConfError::Json {
        path: path.to_string(),
        msg: e.to_string(),
    })?;
    if v.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(ConfError::field(
            format!("{path}: format"),
            format!("expected \"{FORMAT}\""),
        ));
    }
    let list = v
        .get("expected_failures")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ConfError::field(
                format!("{path}: expected_failures"),
                "missing or not an array of {\"case\", \"reason\"}",
            )
        })?;
    let mut entries = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let case = e
            .get("case")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                ConfError::field(
                    format!("{path}: expected_failures[{i}].case"),
                    "missing, empty or not a string (a case id or a glob with * and ?)",
                )
            })?;
        let reason = match e.get("reason") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(ConfError::field(
                    format!("{path}: expected_failures[{i}].reason"),
                    "not a string",
                ))
            }
        };
        entries.push(Expectation {
            case: case.trim().to_string(),
            reason,
        });
    }
    Ok(Expectations {
        path: path.to_string(),
        entries,
    })
}

/// Read an expectations file.
pub fn read(path: &Path) -> Result<Expectations> {
    // Regular files only (a FIFO would block): docs/HOSTILE.md.
    let text = crate::formats::fsafe::read_regular_string(
        path,
        crate::formats::fsafe::MAX_META_BYTES,
        "",
    )?;
    parse(&text, &path.display().to_string())
}

/// Whether a result counts as a failure for the gate.
pub fn is_failure(r: &CaseResult, require_all: bool) -> bool {
    match r.verdict {
        Verdict::Fail | Verdict::Malformed(_) => true,
        Verdict::Unsupported(_) => require_all,
        Verdict::Pass => false,
    }
}

/// What the gate decided.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    /// The expectations file.
    pub path: String,
    /// Failing cases an entry lists: (case id, the first matching entry's reason).
    pub expected: Vec<(String, String)>,
    /// Failing cases no entry lists.
    pub new_failures: Vec<String>,
    /// Entries none of whose cases fails any more (with the cases of this run that conform).
    pub stale: Vec<(Expectation, Vec<String>)>,
    /// Entries that match no case of this run.
    pub unmatched: Vec<Expectation>,
}

impl Gate {
    /// The run passes the gate: no new failure and no stale entry.
    pub fn ok(&self) -> bool {
        self.new_failures.is_empty() && self.stale.is_empty()
    }
}

/// Gate `results` on `exp`.
pub fn gate(exp: &Expectations, results: &[CaseResult], require_all: bool) -> Gate {
    let mut g = Gate {
        path: exp.path.clone(),
        ..Gate::default()
    };
    for r in results {
        if !is_failure(r, require_all) {
            continue;
        }
        match exp.entries.iter().find(|e| glob_match(&e.case, &r.id)) {
            Some(e) => g.expected.push((r.id.clone(), e.reason.clone())),
            None => g.new_failures.push(r.id.clone()),
        }
    }
    for e in &exp.entries {
        let hits: Vec<&CaseResult> = results
            .iter()
            .filter(|r| glob_match(&e.case, &r.id))
            .collect();
        if hits.is_empty() {
            g.unmatched.push(e.clone());
            continue;
        }
        if hits.iter().any(|r| is_failure(r, require_all)) {
            continue;
        }
        let pass: Vec<String> = hits
            .iter()
            .filter(|r| r.verdict == Verdict::Pass)
            .map(|r| r.id.clone())
            .collect();
        if !pass.is_empty() {
            g.stale.push((e.clone(), pass));
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(
            "forward.*.f32.eps-large",
            "forward.nchw.f32.eps-large"
        ));
        assert!(glob_match("*", "x"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*.c65", "eval.rows.f64.c65"));
        assert!(!glob_match("*.c6", "eval.rows.f64.c65"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("exact.id", "exact.id"));
        assert!(!glob_match("exact.id", "exact.idx"));
    }

    #[test]
    fn parse_errors_name_the_field() {
        assert!(parse("{}", "e.json")
            .unwrap_err()
            .to_string()
            .contains("e.json: format"));
        let e = parse(
            r#"{"format": "bnconf-expectations/1", "expected_failures": [{"reason": "x"}]}"#,
            "e.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("expected_failures[0].case"), "{e}");
    }
}
