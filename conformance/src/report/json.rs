//! The JSON record of a case result (`--report FILE.json`, docs/REPORTS.md) and the float
//! forms the reports share: hex strings for exact floats, numbers with `inf`/`nan` as strings.

use crate::judge::verdict::{CaseResult, OutputResult, Verdict};
use bnconf_spec::exact::round::FloatFormat;
use serde_json::{json, Value};

impl CaseResult {
    /// JSON record for `--report`.
    pub fn to_json(&self) -> Value {
        let outs: Vec<Value> = self
            .outputs
            .iter()
            .map(|o| {
                let mut v = json!({"name": o.name, "worst_ratio": num(o.worst_ratio), "index": o.index, "expected": o.expected,
                       "expected_f64": hexf(o.expected_f64), "actual": hexf(o.actual), "cond": num(o.budget.cond),
                       "mag": num(o.budget.mag), "mag2": num(o.budget.mag2), "elements_over": o.n_over,
                       "elements": o.len,
                       "actual_over_expected": actual_over_expected(o).map(num),
                       "allowed_rel": num(o.allowed_rel)});
                if let Some(r) = o.rank {
                    v["rank"] = json!(r); // replicated cases (FORMAT.md "Replicated suites")
                }
                v
            })
            .collect();
        let reason = match &self.verdict {
            Verdict::Unsupported(w) | Verdict::Malformed(w) => Value::String(w.clone()),
            _ => Value::Null,
        };
        json!({"id": self.id, "op": self.op, "layout": self.layout, "dtype": self.dtype, "level": self.level.name(),
               "class": self.class, "verdict": self.verdict.name().to_lowercase(), "reason": reason,
               "worst_ratio": num(self.worst_ratio), "k": self.k, "allowed_rel": num(self.allowed_rel()),
               "outputs": outs})
    }
}

/// A float as a hex string (Python `float.hex` style), or `nan`/`inf`.
pub fn hexf(x: f64) -> String {
    match bnconf_spec::exact::round::f64_to_rational(x) {
        Some(r) => bnconf_spec::exact::round::round_rational(&r, FloatFormat::F64).to_hex(),
        None => format!("{x}"),
    }
}

/// A float for JSON: numbers, with `inf`/`nan` as strings.
pub fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}

/// `actual / expected` at the worst element (`None` when the expected value is 0 or either
/// is not finite).
pub fn actual_over_expected(o: &OutputResult) -> Option<f64> {
    let r = o.actual / o.expected_f64;
    (o.expected_f64 != 0.0 && r.is_finite()).then_some(r)
}
