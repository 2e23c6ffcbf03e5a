//! Verdicts: what judging a case yields ([`Verdict`], the worst element of each output
//! [`OutputResult`], the case's [`CaseResult`]) and their summary over a run ([`Summary`]).
//! Rendering them (text, JSON, JUnit, HTML) is `report`'s.

use crate::judge::budget::ElementBudget;
use crate::suite::Level;
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::QSqrt;
use std::collections::BTreeMap;

/// The verdict on one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every output element within budget.
    Pass,
    /// Some element over budget (or NaN/inf).
    Fail,
    /// The kernel does not implement the case (reason).
    Unsupported(String),
    /// An output is missing or malformed (names the file).
    Malformed(String),
}

impl Verdict {
    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Unsupported(_) => "unsupported",
            Verdict::Malformed(_) => "MALFORMED",
        }
    }
}

/// The worst element of one output.
#[derive(Clone, Debug)]
pub struct OutputResult {
    /// Output name.
    pub name: String,
    /// Worst ratio `|err| / (u*(cond+mag))`.
    pub worst_ratio: f64,
    /// Index (in the output's layout order) of the worst element.
    pub index: usize,
    /// Exact value there.
    pub expected: String,
    /// Exact value correctly rounded to f64.
    pub expected_f64: f64,
    /// Computed value there.
    pub actual: f64,
    /// Budget there.
    pub budget: ElementBudget,
    /// Elements over the allowance.
    pub n_over: usize,
    /// Elements of the output (`n_over` of `len` are over).
    pub len: usize,
    /// Replicated cases: the rank whose copy this is (per-channel outputs), or the rank holding
    /// the worst element (per-element outputs, judged over the concatenated shards).
    pub rank: Option<usize>,
    /// How sharp the verdict is: the largest error the gate accepts on any element,
    /// `max_i k·u·(cond_i + mag_i + u·mag2_i)`, relative to the output's scale (the largest
    /// finite `|value|` the kernel returned; `inf` when that is 0 and some allowance is not).
    pub allowed_rel: f64,
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// Case id.
    pub id: String,
    /// Op name.
    pub op: &'static str,
    /// Layout name.
    pub layout: &'static str,
    /// dtype name.
    pub dtype: &'static str,
    /// Level.
    pub level: Level,
    /// Data class.
    pub class: String,
    /// Verdict.
    pub verdict: Verdict,
    /// Worst ratio over all outputs (0 when not judged).
    pub worst_ratio: f64,
    /// Allowance k used.
    pub k: f64,
    /// Per output.
    pub outputs: Vec<OutputResult>,
    /// The kernel's outputs, kept for a non-conforming case (diagnosis, HTML plots).
    pub computed: Option<std::sync::Arc<BTreeMap<String, Vec<f64>>>>,
}

/// The [`OutputResult`] of an output from its ratios: the worst element (the first of the
/// greatest ratio, a NaN ratio counting as +inf), the count over `k` (a ratio of exactly `k`
/// is within it); `budget_at` gives an element's budget, `allowed` is [`max_allowed`] of all.
pub(crate) fn worst_of(
    name: &str,
    ratios: &[f64],
    k: f64,
    vals: &[f64],
    exact_at: impl Fn(usize) -> QSqrt,
    (budget_at, allowed): (impl Fn(usize) -> ElementBudget, f64),
) -> OutputResult {
    // (The ratio functions return inf, never NaN, for a non-finite value; this keeps a NaN
    // from hiding behind a finite ratio should one ever come.)
    let key = |r: f64| if r.is_nan() { f64::INFINITY } else { r };
    let mut worst = 0usize;
    for (i, &r) in ratios.iter().enumerate() {
        if key(r) > key(ratios[worst]) {
            worst = i;
        }
    }
    let n_over = ratios.iter().filter(|&&r| key(r) > k).count();
    let worst_exact = exact_at(worst);
    OutputResult {
        name: name.to_string(),
        worst_ratio: key(ratios[worst]),
        index: worst,
        expected: worst_exact.to_string(),
        expected_f64: round(&worst_exact, FloatFormat::F64).to_f64(),
        actual: vals[worst],
        budget: budget_at(worst),
        n_over,
        len: vals.len(),
        rank: None,
        allowed_rel: allowed_rel_of(vals, allowed),
    }
}

/// [`OutputResult::allowed_rel`]: `max_i k·u·total_i(u)` over the largest finite `|vals_i|`.
pub fn allowed_rel(vals: &[f64], budgets: &[ElementBudget], k: f64, u: f64) -> f64 {
    allowed_rel_of(vals, max_allowed(budgets, k, u))
}

/// `max_i k·u·total_i(u)`: the largest error the gate accepts on any element (0 for none).
pub fn max_allowed(budgets: &[ElementBudget], k: f64, u: f64) -> f64 {
    budgets
        .iter()
        .map(|b| k * u * b.total(u))
        .fold(0f64, f64::max)
}

/// [`allowed_rel`] from the largest allowed error ([`max_allowed`]).
pub fn allowed_rel_of(vals: &[f64], allowed: f64) -> f64 {
    let scale = vals
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f64, |a, v| a.max(v.abs()));
    if allowed == 0.0 {
        0.0
    } else {
        allowed / scale
    }
}

impl CaseResult {
    /// Whether the case conforms.
    pub fn conforms(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// How sharp the verdict is: the largest [`OutputResult::allowed_rel`] of its outputs (0
    /// when none was judged).
    pub fn allowed_rel(&self) -> f64 {
        self.outputs
            .iter()
            .map(|o| o.allowed_rel)
            .fold(0f64, |a, v| if v.is_nan() { a } else { a.max(v) })
    }
}

/// Summary of a set of results.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Cases judged and conforming.
    pub passed: usize,
    /// Cases judged and not conforming (incl. malformed).
    pub failed: usize,
    /// Unsupported cases.
    pub unsupported: usize,
    /// Worst ratio among judged cases.
    pub worst: f64,
}

/// Summarise results.
pub fn summarize<'a>(rs: impl IntoIterator<Item = &'a CaseResult>) -> Summary {
    let mut s = Summary::default();
    for r in rs {
        match r.verdict {
            Verdict::Pass => s.passed += 1,
            Verdict::Fail | Verdict::Malformed(_) => s.failed += 1,
            Verdict::Unsupported(_) => s.unsupported += 1,
        }
        if !matches!(r.verdict, Verdict::Unsupported(_)) {
            s.worst = if r.worst_ratio.is_nan() {
                f64::INFINITY
            } else {
                s.worst.max(r.worst_ratio)
            };
        }
    }
    s
}
/// Exact value of a QSqrt rounded to f64 (for display).
pub fn approx(v: &QSqrt) -> f64 {
    round(v, FloatFormat::F64).to_f64()
}
