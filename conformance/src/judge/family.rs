//! Judging a family kernel's outputs (FORMAT.md "the normalization family"): every element's
//! ratio `|computed − exact| / (u·(cond + mag + u·mag2))` against its budget
//! (`precision::family_budget`), each output gated at its own `k` (`k(K)` per row/group,
//! `k(max(K, n))` for `dgamma`/`dbeta` summed over `n` cells); the optional statistics
//! (`mean`, `rstd`) judged only when returned, a missing required output malformed. Results
//! are the checker's [`CaseResult`]/[`OutputResult`].

use crate::fast::dd::DD;
use crate::fast::family::{family_fast, FamilyCells};
use crate::judge::diagnosis::Diagnosis;
use crate::judge::verdict::{allowed_rel, CaseResult, OutputResult, Verdict};
use crate::par::*;
use crate::precision::budget::ElementBudget;
use crate::precision::family_budget::{
    element_ratio_roots, family_budgets, FamilyBudgets, FamilyProblem,
};
use crate::suite::family::{
    family_goldens, format_of, spec_grouping, spec_norm, FamilySuiteCase, Golden,
};
use bnconf_impl::family::{FamilyCase, FamilyKernel, Named};
use bnconf_impl::Unsupported;
use bnconf_spec::exact::roots::SumOfRoots;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::SpecError;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A family case ready to judge: its exact outputs and their budgets.
#[derive(Clone, Debug)]
pub struct FamilyPrepared {
    pub case: FamilySuiteCase,
    pub goldens: BTreeMap<&'static str, Golden>,
    pub budgets: FamilyBudgets,
    /// The sums of roots (`dgamma`) correctly rounded to f64, once per case.
    pub roots_f64: BTreeMap<&'static str, Vec<f64>>,
    /// Large cases ([`FAMILY_FAST_MIN_LEN`] cells or more): the cell output (`y`, `dx`) and
    /// `dgamma` are not in `goldens` but judged from these exact per-row constants
    /// (double-double per element, the exact value where that does not decide the verdict).
    pub fast: Option<Arc<FamilyCells>>,
    /// Large cases: the outputs in `goldens` as double-doubles with error bounds (judged
    /// from these where they decide the verdict, as the cell outputs are).
    pub approx: BTreeMap<&'static str, Vec<(DD, f64)>>,
}

/// Cells from which a family case is judged through [`FamilyCells`] instead of one exact
/// number per element (batch_norm's threshold).
pub const FAMILY_FAST_MIN_LEN: usize = crate::judge::prepare::FAST_JUDGE_MIN_LEN;

/// The ratio of a computed `dgamma` element against an exact sum of roots, the verdict
/// (`ratio ≤ k`) exact. A sum of hundreds of roots is slow to subtract exactly (its terms
/// merged anew), so the ratio is taken from `e64`, the exact value correctly rounded to f64:
/// `|e64 − computed|` is within `ulp(e64)/2` (and the f64 subtraction's rounding) of the exact
/// error. Where that margin could put the ratio on either side of `k`, the side is decided
/// exactly by comparing the exact value with `computed ± k·u·budget` (rational comparisons,
/// no merge), and the ratio returned is `k` or just above it accordingly; otherwise it is the
/// f64 estimate. [`element_ratio_roots`] is the exact ratio (tested equal in verdict).
pub fn roots_ratio_gated(
    exact: &SumOfRoots,
    e64: f64,
    computed: f64,
    b: &ElementBudget,
    u: f64,
    k: f64,
) -> f64 {
    if !computed.is_finite() {
        return f64::INFINITY;
    }
    let budget = b.cond + b.mag_at(u);
    if budget.is_nan() || budget <= 0.0 || !e64.is_finite() {
        return element_ratio_roots(b, computed, exact, u);
    }
    let d = (e64 - computed).abs();
    let slack = e64.abs() * f64::EPSILON + d * f64::EPSILON + f64::from_bits(1);
    let t = k * u * budget;
    let est = d / (u * budget);
    if d + slack < t * (1.0 - 1e-9) || d - slack > t * (1.0 + 1e-9) {
        return est;
    }
    // near the gate: decide exactly whether |exact − computed| > t
    let (Some(c), Some(tr)) = (f64_to_rational(computed), f64_to_rational(t)) else {
        return element_ratio_roots(b, computed, exact, u);
    };
    let over = exact.cmp_rational(&(&c + &tr)) == Ordering::Greater
        || exact.cmp_rational(&(&c - &tr)) == Ordering::Less;
    if over {
        est.max(k * (1.0 + 1e-12))
    } else {
        est.min(k)
    }
}

/// The goldens and budgets of a family case (the reference's error for an invalid one);
/// large cases ([`FAMILY_FAST_MIN_LEN`] cells or more) through the fast cells.
pub fn prepare_family(sc: &FamilySuiteCase) -> Result<FamilyPrepared, SpecError> {
    prepare_family_owned(sc.clone())
}

/// [`prepare_family`] of a case it keeps (no copy of its inputs).
pub fn prepare_family_owned(sc: FamilySuiteCase) -> Result<FamilyPrepared, SpecError> {
    let large = sc.case.inputs.get("x").map_or(0, Vec::len) >= FAMILY_FAST_MIN_LEN;
    prepare_family_with(sc, large)
}

/// Whether [`prepare_family`] can judge a case of this shape through the fast cells (its
/// per-row path): at least [`FAMILY_FAST_MIN_LEN`] cells. Decided from the fields alone,
/// before any input is read; whether it does also depends on the inputs
/// ([`family_fast_takes_inputs`]).
pub fn family_fast_by_shape(case: &FamilyCase) -> bool {
    case.shape.iter().product::<usize>() >= FAMILY_FAST_MIN_LEN
}

/// Whether the fast cells take a valid, well-posed case's inputs (`FamilyCells::new` is then
/// `Some`): every input 0 or within `(3.8e-121, 2.5e120)` in magnitude, about `2^±400`
/// (fast::family: exact products cannot underflow). A case [`family_fast_by_shape`] admits
/// that fails this is judged per element exactly (tested equal to `FamilyCells::new`).
pub fn family_fast_takes_inputs(case: &FamilyCase) -> bool {
    case.inputs
        .values()
        .all(|v| v.par_chunks(1 << 16).all(crate::fast::family::in_range))
}

/// [`prepare_family`] through the fast cells whatever the case's size, where the fast path
/// applies (else exactly): the same verdicts (tests compare the two).
pub fn prepare_family_fast(sc: &FamilySuiteCase) -> Result<FamilyPrepared, SpecError> {
    prepare_family_with(sc.clone(), true)
}

fn prepare_family_with(sc: FamilySuiteCase, fast: bool) -> Result<FamilyPrepared, SpecError> {
    let c = &sc.case;
    let grouping = spec_grouping(c)?;
    let norm = spec_norm(c)?;
    let input = |n: &str| c.inputs.get(n).map(|v| v.as_slice());
    let budgets = family_budgets(&FamilyProblem {
        grouping: &grouping,
        norm: &norm,
        x: c.input("x"),
        dy: input("dy"),
        gamma: input("gamma"),
        beta: input("beta"),
        eps: c.eps,
    })?;
    if fast {
        if let Some(cells) = FamilyCells::new(c) {
            let goldens = cells
                .small_outputs()
                .into_iter()
                .map(|(n, v)| (n, Golden::Q(v)))
                .collect();
            return Ok(FamilyPrepared {
                case: sc,
                goldens,
                budgets,
                roots_f64: BTreeMap::new(),
                approx: cells.small_approx(),
                fast: Some(Arc::new(cells)),
            });
        }
    }
    let goldens = family_goldens(c)?;
    let roots_f64 = goldens
        .iter()
        .filter_map(|(&name, g)| match g {
            Golden::Roots(v) => Some((
                name,
                v.iter()
                    .map(|e| e.round(FloatFormat::F64).to_f64())
                    .collect(),
            )),
            Golden::Q(_) => None,
        })
        .collect();
    Ok(FamilyPrepared {
        case: sc,
        goldens,
        budgets,
        roots_f64,
        fast: None,
        approx: BTreeMap::new(),
    })
}

/// [`prepare_family`] of every case, in order (cases in parallel).
pub fn prepare_family_all(cases: &[FamilySuiteCase]) -> Result<Vec<FamilyPrepared>, SpecError> {
    cases.par_iter().map(prepare_family).collect()
}

impl FamilyPrepared {
    /// The gate of the per-cell outputs (`y` or `dx`): the case's `k`.
    fn k(&self) -> f64 {
        let b = &self.budgets.gate;
        b.get("y").or_else(|| b.get("dx")).copied().unwrap_or(0.0)
    }

    fn result(&self, verdict: Verdict, outputs: Vec<OutputResult>) -> CaseResult {
        let c = &self.case;
        CaseResult {
            id: c.id.clone(),
            op: c.case.op.name(),
            layout: c.case.layout.name(),
            dtype: c.precision,
            level: c.level,
            class: c.class.clone(),
            verdict,
            worst_ratio: outputs.iter().map(|o| o.worst_ratio).fold(0.0, f64::max),
            k: self.k(),
            outputs,
            computed: None,
        }
    }

    /// Every exact output correctly rounded to its dtype: what a correctly rounded "kernel"
    /// returns (every output, optional ones included).
    pub fn rounded_goldens(&self) -> BTreeMap<String, Vec<f64>> {
        if self.fast.is_some() {
            if let Some(out) = family_fast(&self.case.case) {
                return out.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
            }
        }
        self.goldens
            .iter()
            .map(|(&name, g)| {
                let f = format_of(self.case.case.dtype_of(name));
                let v = match g {
                    Golden::Q(v) => v.iter().map(|e| round(e, f).to_f64()).collect(),
                    Golden::Roots(v) => v.iter().map(|e| e.round(f).to_f64()).collect(),
                };
                (name.to_string(), v)
            })
            .collect()
    }

    /// A case the kernel did not run.
    pub fn unsupported(&self, why: &str) -> CaseResult {
        self.result(Verdict::Unsupported(why.to_string()), vec![])
    }

    /// Judge a kernel's outputs: every output it returned that the case has (the optional
    /// statistics only when returned), each element against its budget at its output's gate.
    /// A missing required output, an output the case does not have, or a wrong length is
    /// [`Verdict::Malformed`] naming the output.
    pub fn judge(&self, computed: &BTreeMap<String, Vec<f64>>) -> CaseResult {
        let c = &self.case.case;
        let optional = c.op.optional_outputs();
        let expected = self.expected_outputs();
        for name in computed.keys() {
            if !expected.iter().any(|(n, _)| n == name) {
                return self.result(
                    Verdict::Malformed(format!(
                        "output `{name}` is not an output of `{}` with affine `{}`",
                        c.op, c.affine
                    )),
                    vec![],
                );
            }
        }
        let mut outs = Vec::new();
        for (name, len) in expected {
            let Some(vals) = computed.get(name) else {
                if optional.contains(&name) {
                    continue;
                }
                return self.result(
                    Verdict::Malformed(format!("output `{name}` missing")),
                    vec![],
                );
            };
            if vals.len() != len {
                let why = format!("output `{name}` has {} values, expected {len}", vals.len(),);
                return self.result(Verdict::Malformed(why), vec![]);
            }
            outs.push(match (&self.fast, self.goldens.get(name)) {
                (_, Some(golden)) => self.judge_output(name, golden, vals),
                (Some(f), None) => self.judge_fast_output(f, name, vals),
                (None, None) => unreachable!("an expected output has a golden"),
            });
        }
        let verdict = if outs.iter().all(|o| o.n_over == 0) {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        self.result(verdict, outs)
    }

    /// Every output the case has (optional ones included), in name order, with its length.
    fn expected_outputs(&self) -> Vec<(&'static str, usize)> {
        let mut v: Vec<(&'static str, usize)> =
            self.goldens.iter().map(|(&n, g)| (n, g.len())).collect();
        if let Some(f) = &self.fast {
            v.push((f.output(), f.len()));
            if !f.dgamma_approx().is_empty() {
                v.push(("dgamma", f.dgamma_approx().len()));
            }
        }
        v.sort();
        v
    }

    /// [`Self::judge_output`] of an output judged through the fast cells: the cell output or
    /// `dgamma`. Each element's ratio from the double-double value where its bound puts the
    /// ratio on one side of `k`, else exactly; the same verdict as the exact path.
    fn judge_fast_output(&self, f: &FamilyCells, name: &'static str, vals: &[f64]) -> OutputResult {
        let u = format_of(self.case.case.dtype_of(name)).unit_roundoff();
        let k = self.budgets.gate[name];
        let budgets = &self.budgets.outputs[name];
        let cell = name != "dgamma";
        let ratios: Vec<f64> = vals
            .par_iter()
            .enumerate()
            .map(|(i, &v)| {
                let approx = if cell {
                    f.approx(i)
                } else {
                    f.dgamma_approx()[i]
                };
                fast_ratio(approx, v, &budgets[i], u, k).unwrap_or_else(|| {
                    if cell {
                        budgets[i].ratio(v, &f.exact(i), u)
                    } else {
                        element_ratio_roots(&budgets[i], v, &f.dgamma_exact(i), u)
                    }
                })
            })
            .collect();
        output_result(name, &ratios, vals, budgets, k, u, |worst| {
            if cell {
                let e = f.exact(worst);
                (e.to_string(), round(&e, FloatFormat::F64).to_f64())
            } else if f.rows() <= 16 {
                let e = f.dgamma_exact(worst);
                (e.to_string(), e.round(FloatFormat::F64).to_f64())
            } else {
                // a sum over thousands of rows: its exact form is long and slow to build; the
                // report gives its correctly rounded f64 (exact form: `bnconf golden`)
                let e64 = f.dgamma_f64(worst);
                let s = format!(
                    "{e64:e} (correctly rounded; exactly a sum of up to {} square roots)",
                    f.rows()
                );
                (s, e64)
            }
        })
    }

    /// Every element's ratio of output `name` as the judge takes it (`None` for an output
    /// judged through the fast cells, or one the case does not have): what `bnconf shrink`
    /// reports per element.
    pub fn element_ratios(&self, name: &str, vals: &[f64]) -> Option<Vec<f64>> {
        let (&name, golden) = self.goldens.get_key_value(name)?;
        (golden.len() == vals.len()).then(|| self.output_ratios(name, golden, vals))
    }

    fn judge_output(&self, name: &'static str, golden: &Golden, vals: &[f64]) -> OutputResult {
        let u = format_of(self.case.case.dtype_of(name)).unit_roundoff();
        let k = self.budgets.gate[name];
        let budgets = &self.budgets.outputs[name];
        let ratios = self.output_ratios(name, golden, vals);
        output_result(name, &ratios, vals, budgets, k, u, |worst| match golden {
            Golden::Q(ex) => (
                ex[worst].to_string(),
                round(&ex[worst], FloatFormat::F64).to_f64(),
            ),
            Golden::Roots(ex) => (ex[worst].to_string(), self.roots_f64[name][worst]),
        })
    }

    /// The ratios of [`Self::judge_output`].
    fn output_ratios(&self, name: &'static str, golden: &Golden, vals: &[f64]) -> Vec<f64> {
        let u = format_of(self.case.case.dtype_of(name)).unit_roundoff();
        let k = self.budgets.gate[name];
        let budgets = &self.budgets.outputs[name];
        match golden {
            Golden::Q(ex) => match self.approx.get(name) {
                Some(ap) => ex
                    .par_iter()
                    .zip(vals)
                    .zip(budgets)
                    .zip(ap)
                    .map(|(((e, &v), b), &a)| {
                        fast_ratio(a, v, b, u, k).unwrap_or_else(|| b.ratio(v, e, u))
                    })
                    .collect(),
                None => ex
                    .iter()
                    .zip(vals)
                    .zip(budgets)
                    .map(|((e, &v), b)| b.ratio(v, e, u))
                    .collect(),
            },
            Golden::Roots(ex) => ex
                .iter()
                .zip(&self.roots_f64[name])
                .zip(vals)
                .zip(budgets)
                .map(|(((e, &e64), &v), b)| roots_ratio_gated(e, e64, v, b, u, k))
                .collect(),
        }
    }
}

/// An output's result from its elements' ratios (NaN counted as infinite): the worst element,
/// its exact value (`expected(index)`: the string and its f64), the count over the gate `k`.
pub(crate) fn output_result(
    name: &str,
    ratios: &[f64],
    vals: &[f64],
    budgets: &[ElementBudget],
    k: f64,
    u: f64,
    expected: impl FnOnce(usize) -> (String, f64),
) -> OutputResult {
    let key = |r: f64| if r.is_nan() { f64::INFINITY } else { r };
    let mut worst = 0usize;
    for (i, &r) in ratios.iter().enumerate() {
        if key(r) > key(ratios[worst]) {
            worst = i;
        }
    }
    let (expected, expected_f64) = expected(worst);
    OutputResult {
        name: name.to_string(),
        worst_ratio: key(ratios[worst]),
        index: worst,
        expected,
        expected_f64,
        actual: vals[worst],
        budget: budgets[worst],
        n_over: ratios.iter().filter(|&&r| key(r) > k).count(),
        len: vals.len(),
        rank: None,
        allowed_rel: allowed_rel(vals, budgets, k, u),
    }
}

/// The ratio of `computed` against an exact value known as `approx = (value, bound on its
/// absolute error)`, where that decides the verdict at gate `k` (as batch_norm's fast cells
/// do): `None` where the exact value is needed (near the gate, a zero or non-finite budget,
/// a computed value beyond 2^1000).
pub(crate) fn fast_ratio(
    approx: (DD, f64),
    computed: f64,
    b: &ElementBudget,
    u: f64,
    k: f64,
) -> Option<f64> {
    fast_ratio_of_total(approx, computed, b.total(u), u, k)
}

/// [`fast_ratio`] from the budget's total (`ElementBudget::total(u)`, formed once by a caller
/// that needs it too).
#[inline(always)]
pub(crate) fn fast_ratio_of_total(
    approx: (DD, f64),
    computed: f64,
    total: f64,
    u: f64,
    k: f64,
) -> Option<f64> {
    if !computed.is_finite() {
        return Some(f64::INFINITY);
    }
    if !(total.is_finite() && total > 0.0) || computed.abs() > 2f64.powi(1000) {
        return None;
    }
    let (v, err) = approx;
    let d = DD::from_f64(computed) + -v;
    let diff = (d.hi + d.lo).abs();
    // |diff| is within err (the value's bound) + 2^-50·|diff| (the subtraction) of the true
    // |computed − exact|.
    let unc = err + diff * 2f64.powi(-50);
    let scale = u * total;
    let (lo, hi) = ((diff - unc) / scale, (diff + unc) / scale);
    (hi <= k || lo > k).then_some(diff / scale)
}

/// Run a family kernel on prepared cases, in process, and judge each (cases in parallel,
/// results in order).
pub fn run_family_kernel(
    kernel: &dyn FamilyKernel,
    prepared: &[FamilyPrepared],
) -> Vec<CaseResult> {
    prepared
        .par_iter()
        .map(|p| match kernel.run(&p.case.case) {
            Ok(out) => p.judge(&out),
            Err(Unsupported(why)) => p.unsupported(&why),
        })
        .collect()
}

/// Whether a known-bad family kernel's outputs `theirs` reproduce a kernel's outputs `ours`
/// on case `p`, as `judge::diagnosis::reproduces` decides it for batch_norm: on every output
/// both have (at least one), every element within `2k` budgets of theirs, and the farthest
/// within half of the kernel's worst ratio.
pub fn reproduces_family(
    p: &FamilyPrepared,
    ours: &BTreeMap<String, Vec<f64>>,
    theirs: &BTreeMap<String, Vec<f64>>,
    worst: f64,
) -> bool {
    let (mut far, mut compared) = (0f64, 0usize);
    for (&name, budgets) in &p.budgets.outputs {
        let (Some(a), Some(b)) = (ours.get(name), theirs.get(name)) else {
            continue;
        };
        if a.len() != b.len() || a.len() != budgets.len() {
            return false;
        }
        let tol = 2.0 * p.budgets.gate[name];
        let u = format_of(p.case.case.dtype_of(name)).unit_roundoff();
        for ((&x, &y), b) in a.iter().zip(b).zip(budgets) {
            let d = if x.is_nan() && y.is_nan() || x == y {
                0.0
            } else if !x.is_finite() || !y.is_finite() {
                return false;
            } else {
                let total = b.total(u);
                if total.is_infinite() {
                    0.0
                } else if total.is_nan() || total <= 0.0 {
                    return false;
                } else {
                    (x - y).abs() / (u * total)
                }
            };
            if d.is_nan() || d > tol {
                return false;
            }
            far = far.max(d);
        }
        compared += 1;
    }
    let worst = if worst.is_nan() { f64::INFINITY } else { worst };
    compared > 0 && far <= worst / 2.0
}

/// A failing family case: its preparation, the outputs judged, its worst ratio.
pub type FailingCase = (FamilyPrepared, BTreeMap<String, Vec<f64>>, f64);

/// The diagnosis of failing family cases (each with the outputs judged and its worst ratio)
/// against every known-bad family kernel: the kernels that fail a case themselves and
/// reproduce its outputs ([`reproduces_family`]), most cases first.
pub fn diagnose_family(failing: &[FailingCase]) -> Vec<Diagnosis> {
    if failing.is_empty() {
        return vec![];
    }
    let bad: Vec<Box<dyn FamilyKernel>> = bnconf_impl::family::all_family_kernels()
        .into_iter()
        .filter(|k| k.expected() == bnconf_impl::Expected::KnownBad)
        .collect();
    let matches: Vec<Vec<bool>> = failing
        .par_iter()
        .map(|(p, ours, worst)| {
            bad.iter()
                .map(|k| match k.run(&p.case.case) {
                    // the element-wise comparison first: most kernels do not reproduce, and
                    // then their outputs need not be judged
                    Ok(theirs) => {
                        reproduces_family(p, ours, &theirs, *worst)
                            && p.judge(&theirs).verdict == Verdict::Fail
                    }
                    Err(_) => false,
                })
                .collect()
        })
        .collect();
    let mut out: Vec<Diagnosis> = bad
        .iter()
        .enumerate()
        .map(|(j, k)| {
            let cases: Vec<String> = failing
                .iter()
                .zip(&matches)
                .filter(|(_, m)| m[j])
                .map(|((p, _, _), _)| p.case.id.clone())
                .collect();
            Diagnosis {
                kernel: k.name().to_string(),
                matched: cases.len(),
                failing: failing.len(),
                description: k.description().to_string(),
                cases,
            }
        })
        .filter(|d| d.matched > 0)
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.matched));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::family::family_suite;
    use crate::suite::Precision;
    use bnconf_impl::family::Family;

    fn rounded(p: &FamilyPrepared) -> BTreeMap<String, Vec<f64>> {
        p.rounded_goldens()
    }

    fn prepared(family: Family) -> Vec<FamilyPrepared> {
        let s = family_suite(family, &[Precision::uniform(FloatFormat::F32)], 5);
        let few: Vec<FamilySuiteCase> = s
            .cases
            .into_iter()
            .filter(|c| c.case.shape.iter().product::<usize>() <= 128)
            .take(8)
            .collect();
        prepare_family_all(&few).unwrap()
    }

    #[test]
    fn correctly_rounded_outputs_pass_and_a_perturbed_one_fails() {
        for family in [Family::LayerNorm, Family::RmsNorm, Family::GroupNorm] {
            for p in prepared(family) {
                let mut out = rounded(&p);
                let r = p.judge(&out);
                assert_eq!(r.verdict, Verdict::Pass, "{}", p.case.id);
                assert!(r.worst_ratio <= 1.0, "{} {}", p.case.id, r.worst_ratio);
                // one element 1% off fails
                let first = out.keys().next().unwrap().clone();
                let v = &mut out.get_mut(&first).unwrap()[0];
                *v = if *v == 0.0 { 0.5 } else { *v * 1.01 };
                let r = p.judge(&out);
                assert_eq!(r.verdict, Verdict::Fail, "{} {first}", p.case.id);
                assert!(r.outputs.iter().any(|o| o.n_over == 1));
            }
        }
    }

    #[test]
    fn the_gated_roots_ratio_has_the_exact_verdict() {
        use bnconf_spec::exact::roots::parse_sum_of_roots;
        let v = parse_sum_of_roots("1/3*sqrt(2) - 2/7*sqrt(3) + 5/11*sqrt(5)").unwrap();
        let e64 = v.round(FloatFormat::F64).to_f64();
        let b = ElementBudget {
            cond: 1.0,
            mag: 1.0,
            mag2: 0.0,
        };
        let u = 2f64.powi(-24);
        let k = 4.0;
        // computed values around the gate |error| = k·u·2 and far from it, both sides
        let t = k * u * b.total(u);
        let mut n = 0;
        for s in [-1.0, 1.0] {
            for f in [0.0, 0.3, 0.999_999, 1.0, 1.000_001, 2.0, 1e6] {
                let c = e64 + s * f * t;
                let exact = element_ratio_roots(&b, c, &v, u);
                let gated = roots_ratio_gated(&v, e64, c, &b, u, k);
                assert_eq!(
                    exact > k,
                    gated > k,
                    "{s} {f}: exact {exact}, gated {gated}"
                );
                assert!(
                    (exact - gated).abs() <= 1e-6 * exact.max(1.0),
                    "{exact} {gated}"
                );
                n += 1;
            }
        }
        assert_eq!(n, 14);
        assert_eq!(
            roots_ratio_gated(&v, e64, f64::NAN, &b, u, k),
            f64::INFINITY
        );
    }

    #[test]
    fn optional_outputs_may_be_left_out_required_ones_may_not() {
        let p = prepared(Family::LayerNorm)
            .into_iter()
            .find(|p| !p.case.case.op.is_backward())
            .unwrap();
        let mut out = rounded(&p);
        out.remove("mean");
        out.remove("rstd");
        let r = p.judge(&out);
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(r.outputs.len(), 1, "only y judged");
        out.remove("y");
        assert_eq!(
            p.judge(&out).verdict,
            Verdict::Malformed("output `y` missing".into())
        );
        let mut out = rounded(&p);
        out.insert("dx".into(), vec![0.0]);
        assert!(matches!(p.judge(&out).verdict, Verdict::Malformed(m) if m.contains("`dx`")));
        let mut out = rounded(&p);
        out.get_mut("y").unwrap().pop();
        assert!(matches!(p.judge(&out).verdict, Verdict::Malformed(m) if m.contains("values")));
        // a wrong optional output is judged
        let mut out = rounded(&p);
        out.get_mut("rstd").unwrap()[0] *= 2.0;
        assert_eq!(p.judge(&out).verdict, Verdict::Fail);
    }
}
