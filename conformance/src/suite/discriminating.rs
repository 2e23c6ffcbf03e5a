//! Whether the budget judges a case sharply in its dtype (docs/DESIGN.md §3, "Sharp
//! verdicts"): the generator's second rule after ill-posedness.
//!
//! A case is worth gating on only if a fair budget can tell a correct kernel from a plainly
//! wrong one on it. The controls are two built-in known-bad kernels whose defect any sharp
//! budget must reject: a doubled variance ([`CONTROLS`]: `bad-var-doubled`, the ops that
//! compute a variance) and a normalisation 25 % off (`bad-rstd-off25`, the ops that
//! normalise). For each case the generator runs both (and the f64 reference kernel
//! `twopass-f64`), takes the budget of every output element from the precision table (the
//! closed-form bounds, [`Method::Bound`], which are ≥ the exact `cond` the judge may use), and
//! keeps the case unless a control's defect **shows** (it moves some output element by more
//! than rounding to the dtype and f64's own error could) and yet stays within
//! [`MARGIN`] × the allowance `k·u·(cond + mag + u·mag2)` on every element. Such a case is
//! excluded as *non-discriminating* in that dtype and listed with the reason, like an
//! ill-posed one: its verdicts would say nothing about these defects.
//!
//! This is a float computation (f64 kernels, f64 budgets), deterministic like every other
//! generator step; the margin keeps its decision away from the judge's gate, so a kept case
//! rejects both controls in the judge too (`conformance/tests/sharp.rs` checks it on every
//! suite and dtype).

use super::case::SuiteCase;
use crate::precision::budget::{self, ElementBudget, Method};
use bnconf_spec::exact::parse::parse_rational;
use bnconf_spec::{Geometry, Op};
use std::collections::BTreeMap;

/// A control: the known-bad kernel's name, its defect in words, the ops it applies to.
pub type Control = (&'static str, &'static str, &'static [Op]);

/// The control kernels (built-in known-bad kernels of `bnconf-impl`) and the ops where their
/// defect applies: every case of those ops in a gating suite must reject them where it shows.
pub const CONTROLS: &[Control] = &[
    (
        "bad-var-doubled",
        "a doubled variance",
        &[Op::Forward, Op::Backward, Op::RunningUpdate],
    ),
    (
        "bad-rstd-off25",
        "rstd 25 % off",
        &[
            Op::Forward,
            Op::Backward,
            Op::Eval,
            Op::SyncForward,
            Op::SyncBackward,
        ],
    ),
];

/// A control's defect shows in a case when it moves some element of an output by more than
/// this fraction of the output's scale (`max |value|` over its elements) — and by more than
/// the rounding and f64 noise ([`judge_control`]). It is 0: any real move counts. (It was
/// 1/8, which kept cases where the defect is small but real — a doubled batch variance
/// blended into a running variance with momentum 0.01 moves it by 1 %, which bf16 cannot
/// tell from rounding — and on those a doubled variance passed: 14 f16 and 26 bf16
/// running_update cases. Such cases are now excluded as non-discriminating, so a doubled
/// variance is rejected on every kept case where it changes the answer.)
pub const SHOWS: f64 = 0.0;

/// A control counts as rejected only if some element's error exceeds the allowance by this
/// factor, on top of the rounding of the control's and the reference's outputs (both computed
/// in f64 and rounded once to the dtype, so their difference is the defect's own effect). 1 is
/// enough: the judge's `cond` (exact on small cases, these bounds otherwise) is never larger
/// than the bounds used here, so its ratio is at least as large and it rejects the control.
pub const MARGIN: f64 = 1.0;

/// f64's unit roundoff.
const U64: f64 = f64::EPSILON / 2.0;

/// The reference kernel the controls are compared with (f64 throughout, rounded once).
const REFERENCE: &str = "twopass-f64";

/// `Some(reason)` when a control's defect shows in `case` but stays within the budget (see
/// the module docs); `None` when the case discriminates (or no control applies to its op).
pub fn non_discriminating(case: &SuiteCase) -> Option<String> {
    if !case.shard_sizes.is_empty() {
        return None;
    }
    let names: Vec<&str> = CONTROLS
        .iter()
        .filter(|(_, _, ops)| ops.contains(&case.op))
        .map(|(n, _, _)| *n)
        .collect();
    for ((name, what, _), (shows, worst)) in evaluate(case, &names)? {
        if shows && worst <= MARGIN {
            return Some(format!(
                "non-discriminating in {}: {what} (the control {name}) stays within {:.2} × the \
                 budget k·u·(cond + mag) on every element (a case is kept when it exceeds {MARGIN}×)",
                case.precision().name(),
                worst,
            ));
        }
    }
    None
}

/// Whether the defect of the control kernel `name` (one of [`CONTROLS`]) shows in `case`
/// (module docs); `None` where it does not apply or the case cannot be evaluated.
pub fn shows(case: &SuiteCase, name: &str) -> Option<bool> {
    let (_, _, ops) = CONTROLS.iter().find(|(n, _, _)| *n == name)?;
    if !ops.contains(&case.op) {
        return None;
    }
    Some(evaluate(case, &[name])?.first()?.1 .0)
}

/// Runs the controls `names` (in [`CONTROLS`] order) and the reference on `case` under the
/// closed-form budgets: per control, `(shows, worst)` ([`judge_control`]). `None` when the
/// case cannot be evaluated (an undefined case is the reference's to report, not this
/// rule's); an empty list when no control is named.
fn evaluate(case: &SuiteCase, names: &[&str]) -> Option<Vec<(&'static Control, (bool, f64))>> {
    let controls: Vec<_> = CONTROLS.iter().filter(|c| names.contains(&c.0)).collect();
    if controls.is_empty() {
        return Some(Vec::new());
    }
    let geom = Geometry::new(case.layout, &case.shape, usize::MAX).ok()?;
    let budgets = budgets_of(case, &geom)?;
    let kc = case.to_kernel_case();
    let reference = bnconf_impl::kernel_by_name(REFERENCE)?.run(&kc).ok()?;
    let k = budget::k_allowance(geom.m);
    controls
        .into_iter()
        .map(|c| {
            let out = bnconf_impl::kernel_in_f64(c.0)?.run(&kc).ok()?;
            Some((c, judge_control(case, &budgets, &reference, &out, k)))
        })
        .collect()
}

/// `(shows, worst)`: whether the control's defect shows (module docs) and its worst error
/// in units of the allowance `k·u·(cond + mag + u·mag2)` (after the rounding slack).
fn judge_control(
    case: &SuiteCase,
    budgets: &BTreeMap<&'static str, Vec<ElementBudget>>,
    reference: &BTreeMap<String, Vec<f64>>,
    out: &BTreeMap<String, Vec<f64>>,
    k: f64,
) -> (bool, f64) {
    let (mut shows, mut worst) = (false, 0f64);
    for (&name, bs) in budgets {
        let (Some(r), Some(o)) = (reference.get(name), out.get(name)) else {
            continue;
        };
        let u = budget::unit_roundoff(case.dtype_of(name));
        let scale = r.iter().fold(0f64, |a, v| a.max(v.abs()));
        for ((b, &rv), &ov) in bs.iter().zip(r).zip(o) {
            let dev = (ov - rv).abs();
            if !dev.is_finite() {
                // A control that overflows where the reference does not is rejected anyway.
                shows |= rv.is_finite();
                worst = f64::INFINITY;
                continue;
            }
            let allowance = k * u * b.total(u);
            let slack = 2.0 * u * (ov.abs() + rv.abs());
            // Beyond [`SHOWS`] of the output's scale, the rounding of both outputs to the
            // dtype, and what f64 arithmetic itself may err (the budget at f64's u: a doubled
            // variance of a constant channel is f64's `δ²`, not a defect that shows).
            let f64_noise = k * U64 * b.total(U64);
            if dev > (SHOWS * scale).max(slack).max(f64_noise) {
                shows = true;
            }
            let units = if allowance > 0.0 {
                (dev - slack).max(0.0) / allowance
            } else if dev > slack {
                f64::INFINITY
            } else {
                0.0
            };
            worst = worst.max(units);
        }
    }
    (shows, worst)
}

/// The closed-form budgets of every output element, from the fast path's f64 inputs where the
/// op has one (so a scale case never builds its exact problem). They are ≥ the judge's (which
/// takes the exact `cond` on small cases), and cost O(m) where the exact ones cost O(m²).
fn budgets_of(
    case: &SuiteCase,
    geom: &Geometry,
) -> Option<BTreeMap<&'static str, Vec<ElementBudget>>> {
    if crate::fast::covers(case.op) {
        let eps = parse_rational(&case.eps).ok()?;
        budget::budgets_bound_f64(case.op, geom, &eps, &case.inputs).ok()
    } else {
        budget::budgets(&case.problem(), Method::Bound).ok()
    }
}
