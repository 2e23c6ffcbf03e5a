//! The checker: computed outputs against exact goldens, element by element, with the budget
//! of docs/DESIGN.md §3 (`budget`). Expected values always come from the exact reference.

use crate::judge::budget::{self, ElementBudget};
use crate::par::*;
use crate::suite::{Level, SuiteCase};
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::op::Outputs;
use bnconf_spec::QSqrt;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A suite case with its exact outputs and budgets, ready to judge any number of kernels.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The case.
    pub case: SuiteCase,
    /// Exact outputs.
    pub golden: Outputs,
    /// Budgets per output element.
    pub budgets: BTreeMap<&'static str, Vec<ElementBudget>>,
    /// Allowance k(m).
    pub k: f64,
    /// Double-double approximations of the exact outputs (for fast judging).
    pub approx: BTreeMap<&'static str, Vec<Approx>>,
    /// Large cases ([`FAST_JUDGE_MIN_LEN`] cells or more, ops of the fast path): the cell
    /// output is not stored exactly per element (`golden` and `approx` hold only the
    /// per-channel outputs); its exact values come from these per-channel constants
    /// ([`Prepared::exact_at`]).
    pub fast: Option<std::sync::Arc<crate::fast::cells::FastCells>>,
    /// Replicated backward cases: per rank, the exact part of `dgamma`/`dbeta` its shard
    /// contributes (`dgamma_local`/`dbeta_local`, judged when a rank writes them).
    pub locals: Option<std::sync::Arc<Vec<crate::judge::replicated::RankLocal>>>,
}

/// Cells from which a case is judged through [`crate::fast::cells`] (exact per-channel
/// constants, double-double per element with an exact fallback) instead of one exact number
/// per element.
pub const FAST_JUDGE_MIN_LEN: usize = 1 << 14;

/// Whether a case is judged through the fast cells.
pub fn judged_fast(c: &SuiteCase) -> bool {
    // The replicated suite's cases too, whatever their size: every kernel judged on them runs
    // per rank, and their budgets come from the closed-form bounds anyway (m > 16).
    crate::fast::covers(c.op)
        && (c.inputs.get("x").map_or(0, Vec::len) >= FAST_JUDGE_MIN_LEN
            || !c.shard_sizes.is_empty())
}

/// The fast preparation of a large case; `None` where it does not apply (then the exact path
/// runs and reports any error in the case, as for small cases).
fn prepare_fast(c: &SuiteCase) -> Option<Prepared> {
    let geom = bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX).expect("valid");
    let eps = bnconf_spec::exact::parse::parse_rational(&c.eps).expect("generated eps");
    let fp = c.fast_problem().ok()?;
    let fc = crate::fast::cells::FastCells::new(&fp).ok()?;
    let budgets = budget::budgets_bound_f64(c.op, &geom, &eps, &c.inputs).ok()?;
    let mut golden = Outputs::new();
    let mut approx = BTreeMap::new();
    for (&name, vals) in c.op.outputs()[1..].iter().zip(fc.channel_outputs()) {
        approx.insert(name, vals.iter().map(Approx::new).collect());
        golden.insert(name, vals);
    }
    let locals = crate::judge::replicated::locals(c, &golden)
        .ok()?
        .map(std::sync::Arc::new);
    Some(Prepared {
        k: budget::k_allowance(geom.m),
        case: c.clone(),
        golden,
        budgets,
        approx,
        fast: Some(std::sync::Arc::new(fc)),
        locals,
    })
}

impl Prepared {
    /// Number of elements of output `name`.
    pub fn output_len(&self, name: &str) -> usize {
        match (&self.fast, self.golden.get(name)) {
            (_, Some(v)) => v.len(),
            (Some(f), None) => f.len(),
            (None, None) => 0,
        }
    }

    /// The exact value of element `i` of output `name`.
    pub fn exact_at(&self, name: &str, i: usize) -> QSqrt {
        match (&self.fast, self.golden.get(name)) {
            (_, Some(v)) => v[i].clone(),
            (Some(f), None) => f.exact(i),
            (None, None) => panic!("no output {name}"),
        }
    }

    /// The ratio `|computed − exact| / (u·budget)` of every element of output `name`
    /// (lengths already checked).
    pub fn ratios(&self, name: &str, vals: &[f64], u: f64) -> Vec<f64> {
        let b = &self.budgets[name];
        if let (Some(f), None) = (&self.fast, self.golden.get(name)) {
            return vals
                .par_iter()
                .enumerate()
                .map(|(i, &v)| fast_ratio(f, i, v, &b[i], u, self.k))
                .collect();
        }
        let exact = &self.golden[name];
        let ap = &self.approx[name];
        (0..vals.len())
            .map(|i| ap[i].ratio(vals[i], &exact[i], &b[i], u))
            .collect()
    }
}

/// The ratio of element `i` of a fast case: from the double-double value and its error bound,
/// exact where the bound cannot decide the verdict `ratio <= k` (or does not apply).
fn fast_ratio(
    f: &crate::fast::cells::FastCells,
    i: usize,
    computed: f64,
    b: &ElementBudget,
    u: f64,
    k: f64,
) -> f64 {
    if !computed.is_finite() {
        return f64::INFINITY;
    }
    let total = b.total(u);
    if let (Some((v, err)), true) = (f.approx(i), computed.abs() <= 2f64.powi(1000)) {
        if total.is_finite() && total > 0.0 {
            let d = crate::fast::dd::DD::from_f64(computed) + -v;
            let diff = (d.hi + d.lo).abs();
            // |diff| is within err (the value's bound) + 2^-50·|diff| (the subtraction) of
            // the true |computed − exact|.
            let unc = err + diff * 2f64.powi(-50);
            let scale = u * total;
            let (lo, hi) = ((diff - unc) / scale, (diff + unc) / scale);
            if hi <= k || lo > k {
                return diff / scale;
            }
        } else if total.is_infinite() {
            return 0.0;
        }
    }
    count_exact_fallback();
    b.ratio(computed, &f.exact(i), u)
}

/// Counts one fall-back to the exact ratio (in tests; nothing otherwise).
#[inline]
fn count_exact_fallback() {
    #[cfg(test)]
    EXACT_FALLBACKS.with(|n| n.set(n.get() + 1));
}

#[cfg(test)]
thread_local! {
    /// How often [`fast_ratio`] or [`Approx::ratio`] fell back to the exact ratio on this
    /// thread (tests only: the double-double path must serve all but the undecidable values).
    static EXACT_FALLBACKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// An exact value as an unevaluated sum `hi + lo` of two f64: `hi` is the exact value
/// correctly rounded, `lo` the exact residual correctly rounded. Relative error ≤ 2^-105,
/// so the error of a computed float is known to about 2^-50 relative (see [`Approx::ratio`]).
/// `None` where the value is outside the range in which that holds (then the exact path is used).
#[derive(Clone, Copy, Debug)]
pub struct Approx(Option<(f64, f64)>);

impl Approx {
    /// From an exact value.
    pub fn new(v: &QSqrt) -> Approx {
        let hi = round(v, FloatFormat::F64).to_f64();
        if !hi.is_finite()
            || (hi != 0.0 && hi.abs() < 2f64.powi(-900))
            || hi.abs() > 2f64.powi(1000)
        {
            return Approx(None);
        }
        let res =
            v - &QSqrt::rational(bnconf_spec::exact::round::f64_to_rational(hi).expect("finite"));
        let lo = round(&res, FloatFormat::F64).to_f64();
        Approx(Some((hi, lo)))
    }

    /// `|computed - exact| / (u*budget)` to about 2^-50 relative (exact when the two are
    /// equal), falling back to the exact [`budget::ratio`] outside the safe range.
    pub fn ratio(&self, computed: f64, exact: &QSqrt, b: &ElementBudget, u: f64) -> f64 {
        let Some((hi, lo)) = self.0 else {
            count_exact_fallback();
            return b.ratio(computed, exact, u);
        };
        if !computed.is_finite() {
            return f64::INFINITY;
        }
        if computed.abs() > 2f64.powi(1000) {
            count_exact_fallback();
            return b.ratio(computed, exact, u);
        }
        // two-sum: computed - hi = s + t exactly
        let s = computed - hi;
        let bb = s - computed;
        let t = (computed - (s - bb)) + (-hi - bb);
        let diff = (s + (t - lo)).abs();
        if diff == 0.0 && lo == 0.0 {
            return 0.0;
        }
        let total = b.total(u);
        if total.is_nan() || total <= 0.0 {
            // (An exact match returned 0 above.)
            return f64::INFINITY;
        }
        diff / total / u
    }
}

/// Evaluate goldens and budgets for every case (in parallel; order kept). Large cases are
/// prepared through the fast cells ([`judged_fast`]); verdicts and ratios are those of the
/// exact path (tested).
pub fn prepare(cases: &[SuiteCase]) -> Result<Vec<Prepared>, bnconf_spec::SpecError> {
    prepare_with(cases, true)
}

/// [`prepare`], with the fast cells allowed or not (`false`: one exact number per element,
/// whatever the size; for tests of the fast path).
pub fn prepare_with(
    cases: &[SuiteCase],
    allow_fast: bool,
) -> Result<Vec<Prepared>, bnconf_spec::SpecError> {
    cases
        .par_iter()
        .map(|c| {
            if let Some(p) = (allow_fast && judged_fast(c))
                .then(|| prepare_fast(c))
                .flatten()
            {
                return Ok(p);
            }
            let p = c.problem();
            let golden = match exact_by_forms(c) {
                Some(g) => g,
                None => p.evaluate()?,
            };
            let budgets = budget::budgets_auto(&p)?;
            let approx = golden
                .iter()
                .map(|(&n, v)| (n, v.iter().map(Approx::new).collect()))
                .collect();
            let locals = crate::judge::replicated::locals(c, &golden)?.map(std::sync::Arc::new);
            Ok(Prepared {
                k: budget::k_allowance(p.geom.m),
                case: c.clone(),
                golden,
                budgets,
                approx,
                fast: None,
                locals,
            })
        })
        .collect()
}

/// The exact outputs of a case the fast path covers from its channel constants (the same
/// values as `Problem::evaluate`, with fewer rational operations per element: tests in
/// `fast`); `None` where it does not apply or refuses the case (then `evaluate` reports).
fn exact_by_forms(c: &SuiteCase) -> Option<Outputs> {
    if !crate::fast::covers(c.op) {
        return None;
    }
    let fp = c.fast_problem().ok()?;
    let fc = crate::fast::cells::FastCells::new(&fp).ok()?;
    let names = c.op.outputs();
    let mut out = Outputs::new();
    out.insert(names[0], (0..fc.len()).map(|j| fc.exact(j)).collect());
    for (&name, vals) in names[1..].iter().zip(fc.channel_outputs()) {
        out.insert(name, vals);
    }
    Some(out)
}

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

impl Prepared {
    fn result(&self, verdict: Verdict, outputs: Vec<OutputResult>) -> CaseResult {
        let worst = outputs.iter().map(|o| o.worst_ratio).fold(0.0, f64::max);
        let c = &self.case;
        CaseResult {
            id: c.id.clone(),
            op: c.op.name(),
            layout: c.layout.name(),
            dtype: c.precision().static_name(),
            level: c.level,
            class: c.class.clone(),
            verdict,
            worst_ratio: worst,
            k: self.k,
            outputs,
            computed: None,
        }
    }

    /// A case the kernel did not run.
    pub fn unsupported(&self, why: &str) -> CaseResult {
        self.result(Verdict::Unsupported(why.to_string()), vec![])
    }
    /// A case with a missing or malformed output.
    pub fn malformed(&self, why: &str) -> CaseResult {
        self.result(Verdict::Malformed(why.to_string()), vec![])
    }

    /// Judge computed outputs (values of the case dtype, as f64) against the goldens.
    pub fn judge(&self, computed: &BTreeMap<String, Vec<f64>>) -> CaseResult {
        let mut outs = Vec::new();
        for &name in self.case.op.outputs() {
            let Some(vals) = computed.get(name) else {
                return self.malformed(&format!("output `{name}` missing"));
            };
            match self.judge_output(name, vals) {
                Ok(o) => outs.push(o),
                Err(why) => return self.malformed(&why),
            }
        }
        self.verdict_of(outs, computed)
    }

    /// The result from judged outputs: pass when no element of any is over the allowance.
    pub(crate) fn verdict_of(
        &self,
        outs: Vec<OutputResult>,
        computed: &BTreeMap<String, Vec<f64>>,
    ) -> CaseResult {
        let verdict = if outs.iter().all(|o| o.n_over == 0) {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        let mut r = self.result(verdict, outs);
        if r.verdict == Verdict::Fail {
            r.computed = Some(std::sync::Arc::new(computed.clone()));
        }
        r
    }

    /// Judge one output (values of its dtype, as f64): its worst element and how many are
    /// over the allowance; `Err` names a length mismatch.
    pub fn judge_output(&self, name: &str, vals: &[f64]) -> Result<OutputResult, String> {
        // Each output is judged in its own dtype (activations' or parameters').
        let u = self.case.dtype_of(name).unit_roundoff();
        let n_exact = self.output_len(name);
        if vals.len() != n_exact {
            return Err(format!(
                "output `{name}` has {} values, expected {}",
                vals.len(),
                n_exact
            ));
        }
        let ratios = self.ratios(name, vals, u);
        Ok(worst_of(
            name,
            &ratios,
            self.k,
            vals,
            |i| self.exact_at(name, i),
            &self.budgets[name],
        ))
    }
}

/// The [`OutputResult`] of an output from its ratios: the worst element (the first of the
/// greatest ratio, a NaN ratio counting as +inf), the count over `k` (a ratio of exactly `k`
/// is within it).
pub(crate) fn worst_of(
    name: &str,
    ratios: &[f64],
    k: f64,
    vals: &[f64],
    exact_at: impl Fn(usize) -> QSqrt,
    budgets: &[ElementBudget],
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
        budget: budgets[worst],
        n_over,
        len: vals.len(),
        rank: None,
    }
}

impl CaseResult {
    /// Whether the case conforms.
    pub fn conforms(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// Multi-line failure detail, worst output first: where the worst element lies (n, c, h, w;
    /// channel and cell), `k of n elements over`, the inputs there, expected, actual, their
    /// ratio, the budget (`report::detail::render`).
    pub fn detail(&self, case: &SuiteCase) -> String {
        crate::report::detail::render(self, case)
    }

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
                       "actual_over_expected": crate::report::detail::actual_over_expected(o).map(num)});
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
               "worst_ratio": num(self.worst_ratio), "k": self.k, "outputs": outs})
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

/// Run a kernel of crate `kernels` on prepared cases, in process.
pub fn run_kernel(kernel: &dyn bnconf_impl::Kernel, prepared: &[Prepared]) -> Vec<CaseResult> {
    prepared
        .par_iter()
        .map(|p| match kernel.run(&p.case.to_kernel_case()) {
            Ok(out) => p.judge(&out),
            Err(bnconf_impl::Unsupported(why)) => p.unsupported(&why),
        })
        .collect()
}

/// Exact value of a QSqrt rounded to f64 (for display).
pub fn approx(v: &QSqrt) -> f64 {
    round(v, FloatFormat::F64).to_f64()
}

#[cfg(test)]
mod forms_tests {
    use super::*;
    use bnconf_spec::exact::round::FloatFormat;
    use bnconf_spec::Op;

    /// The judge's exact outputs from the channel constants equal `Problem::evaluate`'s on
    /// every default-suite case the fast path covers (f32 and f64).
    #[test]
    fn exact_by_forms_equals_evaluate() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let mut n = 0;
        for c in &s.cases {
            if let Some(g) = exact_by_forms(c) {
                assert_eq!(g, c.problem().evaluate().unwrap(), "{}", c.id);
                n += 1;
            }
        }
        assert!(n > 700, "{n}");
    }

    /// Which cases go through the fast cells: those of an op the fast path covers with at
    /// least `FAST_JUDGE_MIN_LEN` cells, and every replicated case of such an op (whatever its
    /// size); the others are prepared one exact number per element. The verdicts are the same
    /// either way (tested above and in `tests/large_channels.rs`), so only the preparation
    /// shows which path a case took.
    #[test]
    fn large_and_replicated_cases_are_judged_fast() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32]);
        let small = s
            .cases
            .iter()
            .find(|c| c.op == Op::Backward && c.layout == bnconf_spec::Layout::Nchw)
            .expect("a backward NCHW case")
            .clone();
        // Tiled along N (the outermost axis of NCHW) to at least FAST_JUDGE_MIN_LEN cells.
        let len = small.inputs["x"].len();
        let k = FAST_JUDGE_MIN_LEN.div_ceil(len);
        let mut large = small.clone();
        large.shape[0] *= k;
        for name in ["x", "dy"] {
            large
                .inputs
                .insert(name.into(), small.inputs[name].repeat(k));
        }
        let r = crate::suite::test_suite("replicated", &[FloatFormat::F32]);
        let replicated = r
            .cases
            .iter()
            .filter(|c| crate::fast::covers(c.op))
            .min_by_key(|c| c.inputs["x"].len())
            .expect("a replicated case")
            .clone();
        assert!(len < FAST_JUDGE_MIN_LEN && replicated.inputs["x"].len() < FAST_JUDGE_MIN_LEN);
        let stats = r
            .cases
            .iter()
            .find(|c| !crate::fast::covers(c.op))
            .expect("a replicated case the fast path does not cover")
            .clone();
        let p = prepare(&[
            small.clone(),
            large.clone(),
            replicated.clone(),
            stats.clone(),
        ])
        .unwrap();
        let fast: Vec<bool> = p.iter().map(|p| p.fast.is_some()).collect();
        assert_eq!(
            fast,
            [false, true, true, false],
            "small, large, replicated, {}",
            stats.id
        );
        for c in [&small, &large, &replicated, &stats] {
            assert_eq!(
                judged_fast(c),
                prepare(std::slice::from_ref(c)).unwrap()[0].fast.is_some(),
                "{}",
                c.id
            );
        }
        // The threshold itself, on the cell count alone.
        let mut edge = small;
        for (n, fast) in [(FAST_JUDGE_MIN_LEN - 1, false), (FAST_JUDGE_MIN_LEN, true)] {
            edge.inputs.insert("x".into(), vec![1.0; n]);
            assert_eq!(judged_fast(&edge), fast, "{n} cells");
        }
        // Large and the same as the exact preparation: the fast one agrees with it.
        let exact = prepare_with(std::slice::from_ref(&large), false).unwrap();
        assert!(exact[0].fast.is_none());
        let name = large.op.outputs()[0];
        assert_eq!(p[1].output_len(name), exact[0].output_len(name));
        assert_eq!(p[1].output_len(name), large.inputs["x"].len());
        for i in [0, 1, len, large.inputs["x"].len() - 1] {
            assert_eq!(
                p[1].exact_at(name, i),
                exact[0].exact_at(name, i),
                "{name}[{i}]"
            );
        }
    }

    /// `worst_of` names the first element of the greatest ratio (NaN as +inf) and counts the
    /// ratios over `k` (not those at it); `verdict_of` passes exactly when none is over, and
    /// `conforms` is that verdict.
    #[test]
    fn the_worst_element_and_the_verdict() {
        let b = ElementBudget {
            cond: 1.0,
            mag: 0.0,
            mag2: 0.0,
        };
        let worst = |ratios: &[f64], k: f64| {
            let n = ratios.len();
            let vals: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
            let exact = |i: usize| QSqrt::int(i as i64);
            let o = worst_of("y", ratios, k, &vals, exact, &vec![b; n]);
            assert_eq!(o.len, n);
            assert_eq!(o.actual, vals[o.index]);
            assert_eq!(o.expected, o.index.to_string());
            (o.index, o.worst_ratio, o.n_over)
        };
        assert_eq!(worst(&[0.0], 4.0), (0, 0.0, 0));
        assert_eq!(worst(&[1.0, 3.0, 2.0], 4.0), (1, 3.0, 0));
        assert_eq!(worst(&[2.0, 5.0, 5.0, 1.0], 4.0), (1, 5.0, 2));
        assert_eq!(worst(&[4.0, 4.0, 3.9], 4.0), (0, 4.0, 0));
        assert_eq!(worst(&[1.0, f64::NAN, 7.0], 4.0), (1, f64::INFINITY, 2));
        assert_eq!(worst(&[f64::NAN, 1.0, 2.0], 4.0), (0, f64::INFINITY, 1));
        assert_eq!(
            worst(&[3.0, f64::INFINITY, f64::NAN], 4.0),
            (1, f64::INFINITY, 2)
        );

        let s = crate::suite::test_suite("default", &[FloatFormat::F64]);
        let c = s
            .cases
            .iter()
            .find(|c| c.op == Op::Eval)
            .expect("an eval case");
        let p = &prepare(std::slice::from_ref(c)).unwrap()[0];
        let name = c.op.outputs()[0];
        let golden: Vec<f64> = (0..p.output_len(name))
            .map(|i| approx(&p.exact_at(name, i)))
            .collect();
        let mut computed = BTreeMap::from([(name.to_string(), golden.clone())]);
        let pass = p.judge(&computed);
        assert_eq!(pass.verdict, Verdict::Pass);
        assert!(pass.conforms() && pass.computed.is_none());
        computed.get_mut(name).unwrap()[0] = golden[0] * 1.5 + 1.0;
        let fail = p.judge(&computed);
        assert_eq!(fail.verdict, Verdict::Fail);
        assert!(!fail.conforms() && fail.computed.is_some());
        assert_eq!(fail.outputs[0].index, 0);
        assert_eq!(fail.outputs[0].n_over, 1);
        assert!(!p.malformed("x").conforms() && !p.unsupported("x").conforms());
        computed.get_mut(name).unwrap().pop();
        assert!(matches!(p.judge(&computed).verdict, Verdict::Malformed(_)));
    }

    /// `run_kernel` judges every prepared case in order; `summarize` counts the verdicts
    /// (malformed as failed) and keeps the worst ratio of the judged ones; `to_json` carries
    /// the reason of an unsupported or malformed case, and `null` otherwise.
    #[test]
    fn runs_summaries_and_records() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F64]);
        let cases: Vec<SuiteCase> = s
            .cases
            .iter()
            .filter(|c| c.op == Op::Eval)
            .take(3)
            .cloned()
            .collect();
        let prepared = prepare(&cases).unwrap();
        let good = bnconf_impl::kernel_by_name("twopass-native").expect("twopass-native");
        let rs = run_kernel(good.as_ref(), &prepared);
        let ids: Vec<&str> = rs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, cases.iter().map(|c| c.id.as_str()).collect::<Vec<_>>());
        assert!(rs.iter().all(|r| r.verdict == Verdict::Pass), "{rs:?}");

        let p = &prepared[0];
        let name = cases[0].op.outputs()[0];
        let mut bad = BTreeMap::from([(name.to_string(), vec![1e300; p.output_len(name)])]);
        let fail = p.judge(&bad);
        bad.get_mut(name).unwrap().clear();
        let all = [
            rs[0].clone(),
            rs[1].clone(),
            fail.clone(),
            p.judge(&bad),
            p.unsupported("not here"),
            p.unsupported("nor here"),
        ];
        let sum = summarize(&all);
        assert_eq!((sum.passed, sum.failed, sum.unsupported), (2, 2, 2));
        assert_eq!(sum.worst, fail.worst_ratio);
        assert!(sum.worst > rs[0].worst_ratio.max(rs[1].worst_ratio));
        let only_passes = summarize(&rs[..2]);
        assert_eq!(only_passes.worst, rs[0].worst_ratio.max(rs[1].worst_ratio));
        assert_eq!(summarize(&[]).worst, 0.0);

        assert_eq!(all[4].to_json()["reason"], "not here");
        assert_eq!(all[4].to_json()["verdict"], "unsupported");
        let malformed = all[3].to_json();
        assert_eq!(malformed["verdict"], "malformed");
        assert!(
            malformed["reason"]
                .as_str()
                .unwrap()
                .contains("has 0 values"),
            "{malformed}"
        );
        assert_eq!(all[0].to_json()["reason"], Value::Null);
        assert_eq!(all[0].to_json()["verdict"], "pass");
    }

    /// `fast_ratio` (double-double value and its error bound, exact where they cannot decide
    /// `ratio <= k`) against the exact ratio `ElementBudget::ratio`, on the element output of
    /// every default-suite case the fast cells cover (f32 and f64; the first 8 elements of
    /// each): the same value within the double-double's error bound and **the same verdict at
    /// the gate `k`**, also for computed values whose ratio is within an ulp of `k` (the f64
    /// neighbours of `exact + k·u·budget`, and budgets swept over the f64 neighbours of the
    /// one that puts the ratio at `k`), where the double-double alone cannot decide. Away from
    /// the gate the double-double decides: no value falls back to the exact ratio.
    #[test]
    fn fast_ratio_is_the_exact_ratio_with_the_exact_verdict() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let (mut n, mut at_gate, mut decided) = (0usize, 0usize, 0usize);
        for c in s.cases.iter().filter(|c| crate::fast::covers(c.op)) {
            let p = prepare_fast(c).expect("a fast preparation");
            let f = p.fast.as_deref().expect("fast cells");
            let b = &p.budgets[c.op.outputs()[0]];
            let (u, k) = (c.dtype.unit_roundoff(), p.k);
            for (i, bi) in b.iter().enumerate().take(f.len().min(8)) {
                let exact = f.exact(i);
                let value = f.approx(i);
                let e = approx(&exact);
                let scale = u * bi.total(u);
                let mut computed = vec![e, e + scale * 0.5, e - scale * 3.0, e + scale * 1e3];
                let g = e + k * scale;
                computed.extend([g, g.next_up(), g.next_down(), g.next_up().next_up()]);
                // Away from the gate: decided by the double-double wherever it applies (a
                // finite positive budget, and a value bound far below it; not where the
                // budget is subnormal, as for a `gamma = 0` channel).
                let applies = scale.is_finite()
                    && scale > 0.0
                    && value.is_some_and(|(_, err)| err < scale * 2f64.powi(-20));
                let before = EXACT_FALLBACKS.with(|n| n.get());
                for &x in &computed[..4] {
                    fast_ratio(f, i, x, bi, u, k);
                }
                let fell_back = EXACT_FALLBACKS.with(|n| n.get()) - before;
                assert!(
                    fell_back == 0 || !applies,
                    "{} element {i}: {fell_back} of 4 values away from the gate fell back \
                     (value {value:?}, budget {bi:?}, {computed:?})",
                    c.id
                );
                decided += 4 * usize::from(applies);
                // Budgets that put the ratio of `g` within a few ulps of `k`.
                let r = bi.ratio(g, &exact, u);
                let mut t = bi.total(u) * (r / k);
                let mut near_k = vec![];
                for _ in 0..4 {
                    t = t.next_down();
                }
                for _ in 0..9 {
                    near_k.push(ElementBudget {
                        cond: t,
                        mag: 0.0,
                        mag2: 0.0,
                    });
                    t = t.next_up();
                }
                let swept = near_k.iter().map(|bb| (g, bb));
                for (x, bb) in computed.iter().map(|&x| (x, bi)).chain(swept) {
                    let fast = fast_ratio(f, i, x, bb, u, k);
                    let want = bb.ratio(x, &exact, u);
                    // Within the double-double's own error bound (`err`, relative to the
                    // budget) of the exact ratio, or equal to it where it falls back.
                    let close = match value {
                        Some((_, err)) => {
                            (fast - want).abs() <= err / (u * bb.total(u)) + want * 2f64.powi(-48)
                        }
                        None => fast.to_bits() == want.to_bits(),
                    };
                    assert!(
                        close && (fast <= k) == (want <= k),
                        "{} element {i}: computed {x:e}, exact {}, budget {:?}, k {k}: \
                         fast ratio {fast:e}, exact ratio {want:e}",
                        c.id,
                        e,
                        bb
                    );
                    at_gate += usize::from((want - k).abs() <= 2f64.powi(-40) * k);
                    n += 1;
                }
            }
        }
        assert!(
            n > 10_000 && at_gate > 100 && decided > 1000,
            "{n} values, {at_gate} at the gate, {decided} decided away from it"
        );
        // Not finite: infinite. Beyond 2^1000 (a finite ratio, about 2/u): the exact ratio
        // itself, by the exact fallback. A budget of 0 (only the underflow term is left): the
        // exact ratio, bit for bit.
        let c = s.cases.iter().find(|c| crate::fast::covers(c.op)).unwrap();
        let p = prepare_fast(c).unwrap();
        let f = p.fast.as_deref().unwrap();
        let b = ElementBudget {
            cond: 1.0,
            mag: 1.0,
            mag2: 0.0,
        };
        let u = c.dtype.unit_roundoff();
        for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(fast_ratio(f, 0, x, &b, u, 8.0), f64::INFINITY);
        }
        let huge = ElementBudget {
            cond: 2f64.powi(1000),
            mag: 0.0,
            mag2: 0.0,
        };
        let zero = ElementBudget::default();
        let exact0 = f.exact(0);
        for (x, bb) in [(2f64.powi(1001), huge), (approx(&exact0) + 1.0, zero)] {
            let want = bb.ratio(x, &exact0, u);
            assert!(want.is_finite() || bb.cond == 0.0, "{x:e}, {bb:?}: {want}");
            let before = EXACT_FALLBACKS.with(|n| n.get());
            let got = fast_ratio(f, 0, x, &bb, u, 8.0);
            assert_eq!(got.to_bits(), want.to_bits(), "{x:e}, {bb:?}");
            let fell_back = EXACT_FALLBACKS.with(|n| n.get()) - before;
            assert_eq!(fell_back, usize::from(bb == huge), "{x:e}, {bb:?}");
        }
        // An infinite budget accepts anything finite: 0.
        let inf = ElementBudget {
            cond: f64::INFINITY,
            mag: 0.0,
            mag2: 0.0,
        };
        assert_eq!(fast_ratio(f, 0, 1e30, &inf, u, 8.0), 0.0);
    }

    /// `Approx::ratio` (the double-double ratio of small cases): in its range it never falls
    /// back to the exact ratio and agrees with it to 2^-45, also where the exact value is a
    /// float (`lo = 0`); a computed value beyond 2^1000 (here `f64::MAX` against `-2^999`,
    /// where the two-sum would overflow) falls back; a NaN or negative budget gives 0 for an
    /// exact match and inf otherwise, as the exact ratio does.
    #[test]
    fn approx_ratio_stays_in_double_double_and_falls_back_at_its_edges() {
        let fallbacks = || EXACT_FALLBACKS.with(|n| n.get());
        let q = crate::fast::exact_f64;
        let third = QSqrt::rational(bnconf_spec::exact::Rational::new(1.into(), 3.into()));
        let r = |n: i64| bnconf_spec::exact::Rational::from_integer(n.into());
        let root = QSqrt::new(r(1), r(1), r(2)); // 1 + sqrt(2)
        let big = third.clone() * q(2f64.powi(999));
        let b = ElementBudget {
            cond: 3.0,
            mag: 0.5,
            mag2: 0.0,
        };
        let u = FloatFormat::F32.unit_roundoff();
        for v in [third.clone(), root, q(1.0), q(0.25), big, q(-1e-250)] {
            let a = Approx::new(&v);
            let e = approx(&v);
            for k in [-1e6, -3.0, -1.0, 0.0, 1.0, 2.5, 1e3] {
                let x = e + k * e.abs() * 2f64.powi(-30);
                let before = fallbacks();
                let got = a.ratio(x, &v, &b, u);
                assert_eq!(fallbacks(), before, "{x:e} against {e:e} fell back");
                let want = b.ratio(x, &v, u);
                assert!(
                    (got - want).abs() <= want * 2f64.powi(-45),
                    "{x:e} against {e:e}: {got:e}, exact {want:e}"
                );
                assert_eq!(got == 0.0, want == 0.0, "{x:e} against {e:e}");
            }
        }
        // Beyond 2^1000: the exact ratio (inf here: the difference overflows), counted.
        let v = q(-(2f64.powi(999)));
        let before = fallbacks();
        let got = Approx::new(&v).ratio(f64::MAX, &v, &b, u);
        assert_eq!(fallbacks(), before + 1);
        assert_eq!(got.to_bits(), b.ratio(f64::MAX, &v, u).to_bits(), "{got}");
        // NaN or negative budgets: 0 for an exact match, inf otherwise.
        for bad in [f64::NAN, -1e300] {
            let bb = ElementBudget {
                cond: bad,
                mag: 0.0,
                mag2: 0.0,
            };
            for v in [q(0.25), third.clone()] {
                let a = Approx::new(&v);
                assert_eq!(a.ratio(0.3, &v, &bb, u), f64::INFINITY, "{bad} {v:?}");
                assert_eq!(bb.ratio(0.3, &v, u), f64::INFINITY);
            }
            assert_eq!(Approx::new(&q(0.25)).ratio(0.25, &q(0.25), &bb, u), 0.0);
        }
    }
}
