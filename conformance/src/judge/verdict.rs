//! Verdicts: what judging a case yields ([`Verdict`], the worst element of each output
//! [`OutputResult`], the case's [`CaseResult`]) and their summary over a run ([`Summary`]).
//! Rendering them (text, JSON, JUnit, HTML) is `report`'s.

use crate::judge::budget::ElementBudget;
use crate::par::*;
use crate::precision::budget::max_not_nan;
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

/// What the verdict on an output needs of its ratios: the worst element (the first of the
/// greatest ratio, a NaN ratio counting as +inf), its ratio, the count over `k` (a ratio of
/// exactly `k` is within it), and the largest error the gate accepts on any element
/// ([`max_allowed`]). A large case's cell output forms it without the ratios of the elements
/// that cannot be the worst (`judge::prepare`); [`RatioSummary::of`] forms it from them all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioSummary {
    /// Index of the worst element.
    pub worst: usize,
    /// Its ratio (NaN as +inf; −inf for no element).
    pub ratio: f64,
    /// Elements whose ratio is over `k`.
    pub n_over: usize,
    /// The largest allowed error, `max_i k·u·total_i(u)`.
    pub allowed: f64,
}

/// The order of ratios: NaN (never returned by the ratio functions, which return inf for a
/// non-finite value) as +inf, so that it cannot hide behind a finite ratio.
#[inline]
pub(crate) fn ratio_key(r: f64) -> f64 {
    if r.is_nan() {
        f64::INFINITY
    } else {
        r
    }
}

impl RatioSummary {
    /// No element (ratio −inf, so that any element is worse).
    pub const EMPTY: RatioSummary = RatioSummary {
        worst: 0,
        ratio: f64::NEG_INFINITY,
        n_over: 0,
        allowed: 0.0,
    };

    /// From every element's ratio.
    pub fn of(ratios: &[f64], k: f64, allowed: f64) -> RatioSummary {
        let mut s = RatioSummary {
            allowed,
            ..RatioSummary::EMPTY
        };
        for (i, &r) in ratios.iter().enumerate() {
            s.add(i, r, k);
        }
        s
    }

    /// Element `i` (after those added before) with ratio `r`.
    #[inline]
    pub fn add(&mut self, i: usize, r: f64, k: f64) {
        let r = ratio_key(r);
        if r > self.ratio {
            (self.worst, self.ratio) = (i, r);
        }
        self.n_over += usize::from(r > k);
    }

    /// This summary's elements followed by `later`'s.
    pub fn then(self, later: RatioSummary) -> RatioSummary {
        let (worst, ratio) = if later.ratio > self.ratio {
            (later.worst, later.ratio)
        } else {
            (self.worst, self.ratio)
        };
        RatioSummary {
            worst,
            ratio,
            n_over: self.n_over + later.n_over,
            allowed: self.allowed.max(later.allowed),
        }
    }
}

/// The [`OutputResult`] of an output from its ratios ([`RatioSummary::of`]); `budget_at`
/// gives an element's budget, `allowed` is [`max_allowed`] of all.
pub(crate) fn worst_of(
    name: &str,
    ratios: &[f64],
    k: f64,
    vals: &[f64],
    exact_at: impl Fn(usize) -> QSqrt,
    (budget_at, allowed): (impl Fn(usize) -> ElementBudget, f64),
) -> OutputResult {
    output_result(
        name,
        RatioSummary::of(ratios, k, allowed),
        vals,
        exact_at,
        budget_at,
    )
}

/// The [`OutputResult`] of an output of values `vals` (f64, or binary32 as a file holds them)
/// from its [`RatioSummary`] (of at least one element).
pub(crate) fn output_result<T: Copy + Into<f64> + Sync>(
    name: &str,
    s: RatioSummary,
    vals: &[T],
    exact_at: impl Fn(usize) -> QSqrt,
    budget_at: impl Fn(usize) -> ElementBudget,
) -> OutputResult {
    let worst_exact = exact_at(s.worst);
    OutputResult {
        name: name.to_string(),
        worst_ratio: s.ratio,
        index: s.worst,
        expected: worst_exact.to_string(),
        expected_f64: round(&worst_exact, FloatFormat::F64).to_f64(),
        actual: vals[s.worst].into(),
        budget: budget_at(s.worst),
        n_over: s.n_over,
        len: vals.len(),
        rank: None,
        allowed_rel: allowed_rel_of(vals, s.allowed),
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

/// [`allowed_rel`] from the largest allowed error ([`max_allowed`]), the values f64 or binary32.
pub fn allowed_rel_of<T: Copy + Into<f64> + Sync>(vals: &[T], allowed: f64) -> f64 {
    if allowed == 0.0 {
        return 0.0;
    }
    // The largest finite |v|: a maximum, the same in any order, so taken in pieces in parallel.
    let scale = vals
        .par_chunks(1 << 16)
        .map(largest_finite_abs)
        .collect::<Vec<f64>>()
        .into_iter()
        .fold(0f64, f64::max);
    allowed / scale
}

/// The largest finite `|v|` of `vals` (0 for none), in eight lanes (a maximum: the same in
/// any order). `|v| < ∞` leaves out the infinities and NaN alike.
fn largest_finite_abs<T: Copy + Into<f64>>(vals: &[T]) -> f64 {
    let mut lanes = [0f64; 8];
    let mut chunks = vals.chunks_exact(8);
    for c in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(c) {
            let a = (*v).into().abs();
            if a < f64::INFINITY {
                *m = max_not_nan(*m, a);
            }
        }
    }
    chunks
        .remainder()
        .iter()
        .map(|&v| v.into())
        .chain(lanes)
        .map(|v: f64| v.abs())
        .filter(|a| *a < f64::INFINITY)
        .fold(0f64, f64::max)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `largest_finite_abs` is the plain largest finite `|v|` at every length to 40 (lanes
    /// and remainder), with NaN, infinities, negative values and zeros of both signs anywhere.
    #[test]
    fn largest_finite_abs_is_the_plain_maximum() {
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            -1e300,
            5e-324,
        ];
        let mut state = 12345u64;
        for n in 0..=40 {
            for t in 0..50 {
                let vals: Vec<f64> = (0..n)
                    .map(|i| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        if (i + t) % 5 == 0 {
                            specials[(state >> 33) as usize % specials.len()]
                        } else {
                            ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2f64.powi(t - 25)
                        }
                    })
                    .collect();
                let want = vals
                    .iter()
                    .filter(|v| v.is_finite())
                    .fold(0f64, |a, v| a.max(v.abs()));
                assert_eq!(
                    largest_finite_abs(&vals).to_bits(),
                    want.to_bits(),
                    "{vals:?}"
                );
            }
        }
    }
}
