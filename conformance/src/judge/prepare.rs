//! Preparing cases for judging: each suite case with its exact outputs (from the channel
//! constants where the fast path covers the op, otherwise `Problem::evaluate`), its budgets and
//! double-double approximations; large and replicated cases through the fast cells
//! ([`crate::fast::cells`]). Expected values always come from the exact reference.

use crate::judge::budget::{self, CellBound, ElementBudget};
use crate::judge::verdict::RatioSummary;
use crate::par::*;
use crate::suite::SuiteCase;
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::op::Outputs;
use bnconf_spec::QSqrt;
use std::collections::BTreeMap;

/// A suite case with its exact outputs and budgets, ready to judge any number of kernels.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The case.
    pub case: SuiteCase,
    /// Exact outputs.
    pub golden: Outputs,
    /// Budgets per output element (of a large case, the per-channel outputs' only: its cell
    /// output's come from `cell_bounds`, [`Prepared::budget_at`]).
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
    /// Large cases: per channel, the cell output's budget as a function of the cell
    /// ([`CellBound`]), computed where each element is judged and never stored.
    pub cell_bounds: Option<std::sync::Arc<Vec<CellBound>>>,
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
#[cfg(test)]
fn prepare_fast(c: &SuiteCase) -> Option<Prepared> {
    let mut c = c.clone();
    fast_parts(&mut c, false).map(|parts| from_fast_parts(c, parts))
}

/// The preparation of case `c` from its fast parts ([`fast_parts`]).
fn from_fast_parts(c: SuiteCase, parts: FastParts) -> Prepared {
    let (k, golden, bounds, approx, fast, locals) = parts;
    Prepared {
        k,
        case: c,
        golden,
        budgets: bounds.channel,
        cell_bounds: Some(std::sync::Arc::new(bounds.cells)),
        approx,
        fast: Some(fast),
        locals,
    }
}

/// What the fast preparation computes of a case: `k`, the goldens of its per-channel
/// outputs, its bounds (per channel), the approximations of its per-channel outputs, its
/// fast cells and its ranks' parts.
type FastParts = (
    f64,
    Outputs,
    budget::CaseBounds,
    BTreeMap<&'static str, Vec<Approx>>,
    std::sync::Arc<crate::fast::cells::FastCells>,
    Option<std::sync::Arc<Vec<crate::judge::replicated::RankLocal>>>,
);

fn fast_parts(c: &mut SuiteCase, drop_inputs: bool) -> Option<FastParts> {
    let fp = c.fast_problem().ok()?;
    if drop_inputs {
        // The fast problem holds them (binary32 values as f32): the case's f64 copy goes.
        c.inputs = BTreeMap::new();
    }
    fast_parts_of(c, fp)
}

/// [`fast_parts`] of the case's fast problem `fp` (its inputs, whether `c` holds them or not).
fn fast_parts_of(c: &SuiteCase, fp: crate::fast::FastProblem) -> Option<FastParts> {
    let geom = bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX).expect("valid");
    let eps = bnconf_spec::exact::parse::parse_rational(&c.eps).expect("generated eps");
    let x = budget::CellData::of(&fp.x)?;
    let dy = match &fp.dy {
        Some(d) => Some(budget::CellData::of(d)?),
        None => None,
    };
    let bounds = budget::case_bounds_of(c.op, &geom, &eps, &|name| match name {
        "x" => x,
        "dy" => dy.expect("an op with dy"),
        _ => budget::CellData::F64(&fp.chan[name]),
    })
    .ok()?;
    let fc = crate::fast::cells::FastCells::of_problem(fp).ok()?;
    let mut golden = Outputs::new();
    let mut approx = BTreeMap::new();
    for (&name, vals) in c.op.outputs()[1..].iter().zip(fc.channel_outputs()) {
        approx.insert(name, vals.par_iter().map(Approx::new).collect());
        golden.insert(name, vals);
    }
    let locals = crate::judge::replicated::locals(c, &golden)
        .ok()?
        .map(std::sync::Arc::new);
    Some((
        budget::k_allowance(geom.m),
        golden,
        bounds,
        approx,
        std::sync::Arc::new(fc),
        locals,
    ))
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

    /// The budget of element `i` of output `name` (of a large case's cell output, computed
    /// from its cell: [`CellBound::at`]).
    pub fn budget_at(&self, name: &str, i: usize) -> ElementBudget {
        match (self.budgets.get(name), &self.fast, &self.cell_bounds) {
            (Some(b), _, _) => b[i],
            (None, Some(f), Some(cb)) => {
                let (x, d) = f.cell_inputs(i);
                cb[f.channel_of(i)].at(x, d)
            }
            _ => panic!("no budgets of output {name}"),
        }
    }

    /// The budgets of every element of output `name` ([`Prepared::budget_at`] of each).
    pub fn budgets_of(&self, name: &str) -> Vec<ElementBudget> {
        match self.budgets.get(name) {
            Some(b) => b.clone(),
            None => (0..self.output_len(name))
                .map(|i| self.budget_at(name, i))
                .collect(),
        }
    }

    /// The ratio `|computed − exact| / (u·budget)` of every element of output `name`
    /// (lengths already checked).
    pub fn ratios(&self, name: &str, vals: &[f64], u: f64) -> Vec<f64> {
        self.ratios_and_allowed(name, vals, u).0
    }

    /// What the verdict on output `name` needs of its ratios ([`RatioSummary`]: the worst
    /// element, its ratio, the count over `k`, the largest allowed error), the same as
    /// [`RatioSummary::of`] the ratios of [`Prepared::ratios_and_allowed`]. A large case's
    /// low-precision cell output ([`fast_cell_summary`]) forms it without the ratio of the
    /// elements that a plain-f64 bracket of the exact value shows cannot be the worst and are on
    /// one side of the gate.
    pub fn ratio_summary(&self, name: &str, vals: &[f64], u: f64) -> RatioSummary {
        if let Some(s) = self.cell_summary(name, vals, u) {
            return s;
        }
        let (ratios, allowed) = self.ratios_and_allowed(name, vals, u);
        RatioSummary::of(&ratios, self.k, allowed)
    }

    /// A large case's cell output summarised in one pass over its cells
    /// ([`fast_cell_summary`]), its values in their own width (f64 or binary32); `None` where
    /// that pass does not apply (`ratio_summary` then forms every ratio).
    pub(crate) fn cell_summary<T: Copy + Into<f64> + Sync>(
        &self,
        name: &str,
        vals: &[T],
        u: f64,
    ) -> Option<RatioSummary> {
        match (self.budgets.get(name), &self.fast, &self.cell_bounds) {
            (None, Some(f), Some(cb)) if u >= SUMMARY_MIN_U => {
                Some(fast_cell_summary(f, cb, vals, u, self.k).0)
            }
            _ => None,
        }
    }

    /// [`Prepared::ratios`], and the largest error the gate accepts on any element,
    /// `max_i k·u·total_i(u)` ([`verdict::max_allowed`](crate::judge::verdict::max_allowed)).
    /// A large case's cell output in one pass over its cells: each element's budget is
    /// computed from its cell where its ratio is, channel by channel, never stored.
    pub fn ratios_and_allowed(&self, name: &str, vals: &[f64], u: f64) -> (Vec<f64>, f64) {
        let Some(b) = self.budgets.get(name) else {
            let (f, cb) = match (&self.fast, &self.cell_bounds) {
                (Some(f), Some(cb)) => (f, cb),
                _ => panic!("no budgets of output {name}"),
            };
            return fast_cell_ratios(f, cb, vals, u, self.k);
        };
        let allowed = crate::judge::verdict::max_allowed(b, self.k, u);
        if let (Some(f), None) = (&self.fast, self.golden.get(name)) {
            let r = vals
                .par_iter()
                .enumerate()
                .map(|(i, &v)| fast_ratio(f, i, v, &b[i], u, self.k))
                .collect();
            return (r, allowed);
        }
        let exact = &self.golden[name];
        let ap = &self.approx[name];
        let r = (0..vals.len())
            .map(|i| ap[i].ratio(vals[i], &exact[i], &b[i], u))
            .collect();
        (r, allowed)
    }
}

/// Cells per task of [`fast_cell_ratios`] and [`fast_cell_summary`].
const RATIO_CHUNK: usize = 1 << 14;

/// The ratios of a large case's cell output and the largest allowed error of its elements:
/// per chunk of cells, per run of one channel ([`crate::fast::channel_runs`]), each cell's
/// budget ([`CellBound::at`]), double-double value and ratio ([`fast_ratio_by`]). The same
/// numbers, for any thread count, as the budgets stored and judged element by element.
fn fast_cell_ratios(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[f64],
    u: f64,
    k: f64,
) -> (Vec<f64>, f64) {
    let mut ratios = vec![0.0; vals.len()];
    let allowed = ratios
        .par_chunks_mut(RATIO_CHUNK)
        .enumerate()
        .map(|(ci, out)| {
            let at = (ci * RATIO_CHUNK, u, k);
            #[cfg(target_arch = "x86_64")]
            if crate::fast::eval::use_fma() {
                // SAFETY: the CPU supports AVX2 and FMA (use_fma checked it at run time).
                return unsafe { ratio_chunk_fma(f, cb, vals, at, out) };
            }
            ratio_chunk::<crate::fast::dd::Portable>(f, cb, vals, at, out)
        })
        .collect::<Vec<f64>>()
        .into_iter()
        .fold(0f64, f64::max);
    (ratios, allowed)
}

/// One chunk of [`fast_cell_ratios`], cells `lo..lo + out.len()` (`(lo, u, k)`): their ratios
/// into `out`, and the largest allowed error among them. Products formed by `P`.
#[inline(always)]
fn ratio_chunk<P: crate::fast::dd::Prod>(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[f64],
    (lo, u, k): (usize, f64, f64),
    out: &mut [f64],
) -> f64 {
    let mut allowed = 0f64;
    crate::fast::channel_runs(f.geom(), lo, lo + out.len(), |run, c| {
        let bc = &cb[c];
        for j in run {
            let (x, d) = f.cell_inputs(j);
            let b = bc.at(x, d);
            allowed = allowed.max(k * u * b.total(u));
            let approx = f.approx_in_by::<P>(c, j);
            out[j - lo] = fast_ratio_by(approx, vals[j], &b, u, k, || f.exact(j));
        }
    });
    allowed
}

/// [`ratio_chunk`] compiled for CPUs with FMA (the double-double products in one `vfmadd`;
/// bit-identical results: [`crate::fast::dd::Prod`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn ratio_chunk_fma(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[f64],
    at: (usize, f64, f64),
    out: &mut [f64],
) -> f64 {
    ratio_chunk::<crate::fast::dd::Fused>(f, cb, vals, at, out)
}

/// The least unit roundoff for which [`fast_cell_summary`] brackets values in plain f64 first:
/// the bracket (about `2^-45` of the terms' magnitude) decides an element's side of the gate
/// only where its error is far larger, which is an f64 kernel's rarely (then the double-double
/// value is formed for every element anyway, as [`fast_cell_ratios`] does).
const SUMMARY_MIN_U: f64 = 1.0 / (1u64 << 40) as f64;

/// [`RatioSummary`] of a large case's cell output: per chunk of cells (in parallel, merged in
/// order), per run of one channel, each cell's budget ([`CellBound::at`]) and a plain-f64
/// bracket of its exact value ([`FastCells::value_f64_in`](crate::fast::cells::FastCells));
/// the cell's ratio ([`fast_ratio_by`]: double-double, exact near the gate) is formed only
/// where the bracket leaves open its side of the gate or whether it could be the worst so
/// far. The same summary, bit for bit and for any thread count, as the ratios of
/// [`fast_cell_ratios`] give ([`RatioSummary::of`]); and how many ratios it formed.
fn fast_cell_summary<T: Copy + Into<f64> + Sync>(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[T],
    u: f64,
    k: f64,
) -> (RatioSummary, usize) {
    let n = vals.len().div_ceil(RATIO_CHUNK);
    (0..n)
        .into_par_iter()
        .map(|ci| {
            let (lo, hi) = (ci * RATIO_CHUNK, ((ci + 1) * RATIO_CHUNK).min(vals.len()));
            #[cfg(target_arch = "x86_64")]
            if crate::fast::eval::use_fma() {
                // SAFETY: the CPU supports AVX2 and FMA (use_fma checked it at run time).
                return unsafe { summary_chunk_fma(f, cb, vals, (lo, hi, u, k)) };
            }
            summary_chunk::<crate::fast::dd::Portable, T>(f, cb, vals, (lo, hi, u, k))
        })
        .collect::<Vec<(RatioSummary, usize)>>()
        .into_iter()
        .fold((RatioSummary::EMPTY, 0), |(a, n), (b, m)| {
            (a.then(b), n + m)
        })
}

/// `1 ∓ 2^-40`: [`summary_chunk`]'s margins, far wider than the bracket's relative slack
/// (`2^-45`) and the roundings of the tests (`2^-53` each).
const DOWN: f64 = 1.0 - 1.0 / (1u64 << 40) as f64;
const UP: f64 = 1.0 + 1.0 / (1u64 << 40) as f64;

/// One chunk of [`fast_cell_summary`], cells `lo..hi` (`(lo, hi, u, k)`).
#[inline(always)]
fn summary_chunk<P: crate::fast::dd::Prod, T: Copy + Into<f64>>(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[T],
    (lo, hi, u, k): (usize, usize, f64, f64),
) -> (RatioSummary, usize) {
    let (mut s, mut formed) = (RatioSummary::EMPTY, 0);
    // Budgets formed `L` cells at a time where the bound allows it (`CellBound::totals`: the
    // same bits as `at(..).total(u)` one by one), the decisions then one by one.
    const L: usize = 4;
    crate::fast::channel_runs(f.geom(), lo, hi, |run, c| {
        let bc = &cb[c];
        // (`at`: the first cell of the lanes in hand, whose budgets `totals` holds.)
        let (mut totals, mut at) = ([0f64; L], None);
        for j in run.clone() {
            let (x, d) = f.cell_inputs(j);
            let l = at.map_or(L, |a| j - a);
            let total = if l < L {
                totals[l]
            } else if j + L <= run.end {
                let (mut xs, mut ds) = ([0f64; L], [0f64; L]);
                for (t, (xl, dl)) in xs.iter_mut().zip(&mut ds).enumerate() {
                    (*xl, *dl) = f.cell_inputs(j + t);
                }
                match bc.totals(&xs, &ds, u) {
                    Some(t) => {
                        (totals, at) = (t, Some(j));
                        totals[0]
                    }
                    None => bc.at(x, d).total(u),
                }
            } else {
                bc.at(x, d).total(u)
            };
            s.allowed = crate::precision::budget::max_not_nan(s.allowed, k * u * total);
            let v: f64 = vals[j].into();
            if let Some((y, e)) = f.value_f64_in(c, j) {
                let scale = u * total;
                if v.abs() <= 2f64.powi(1000) && total.is_finite() && scale >= 2f64.powi(-900) {
                    // The returned ratio times `scale` (double-double within 2^-95 of the
                    // terms' magnitude and 2^-50 of itself, or exact) is within `2e` and a
                    // relative 2^-45 of `|v − y|` (the f64 difference, rounded once).
                    let dv = (v - y).abs();
                    let up = (dv + 2.0 * e) * (1.0 + 2f64.powi(-45));
                    let dn = (dv - 2.0 * e) * (1.0 - 2f64.powi(-45));
                    let gate = k * scale;
                    let within = up <= gate * DOWN;
                    let over = dn > gate * UP;
                    if (within || over) && up <= s.ratio * scale * DOWN {
                        s.n_over += usize::from(over);
                        continue;
                    }
                }
            }
            let b = bc.at(x, d);
            let approx = f.approx_in_by::<P>(c, j);
            let r = fast_ratio_by(approx, v, &b, u, k, || f.exact(j));
            s.add(j, r, k);
            formed += 1;
        }
    });
    (s, formed)
}

/// [`summary_chunk`] compiled for CPUs with FMA (see [`ratio_chunk_fma`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn summary_chunk_fma<T: Copy + Into<f64>>(
    f: &crate::fast::cells::FastCells,
    cb: &[CellBound],
    vals: &[T],
    at: (usize, usize, f64, f64),
) -> (RatioSummary, usize) {
    summary_chunk::<crate::fast::dd::Fused, T>(f, cb, vals, at)
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
    fast_ratio_by(f.approx(i), computed, b, u, k, || f.exact(i))
}

/// [`fast_ratio`] from the element's double-double value and error bound (`None` where the
/// bound does not apply) and its exact value on demand.
#[inline]
fn fast_ratio_by(
    approx: Option<(crate::fast::dd::DD, f64)>,
    computed: f64,
    b: &ElementBudget,
    u: f64,
    k: f64,
    exact: impl FnOnce() -> QSqrt,
) -> f64 {
    if !computed.is_finite() {
        return f64::INFINITY;
    }
    let total = b.total(u);
    if let (Some((v, err)), true) = (approx, computed.abs() <= 2f64.powi(1000)) {
        if total.is_finite() && total > 0.0 {
            let d = crate::fast::dd::DD::from_f64(computed) + -v;
            let diff = (d.hi + d.lo).abs();
            // |diff| is within err (the value's bound) + 2^-50·|diff| (the subtraction) of
            // the true |computed − exact|.
            let unc = err + diff * 2f64.powi(-50);
            let scale = u * total;
            // The common case first, without dividing: `diff + unc <= k·scale·(1 − 2^-50)`
            // (both products rounded up by at most 2^-53) makes `hi <= k` below certain.
            if diff + unc <= k * scale * (1.0 - 2f64.powi(-50)) {
                return diff / scale;
            }
            let (lo, hi) = ((diff - unc) / scale, (diff + unc) / scale);
            if hi <= k || lo > k {
                return diff / scale;
            }
        } else if total.is_infinite() {
            return 0.0;
        }
    }
    count_exact_fallback();
    b.ratio(computed, &exact(), u)
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
        let in_range = |hi: f64| {
            hi.is_finite()
                && (hi == 0.0 || hi.abs() >= 2f64.powi(-900))
                && hi.abs() <= 2f64.powi(1000)
        };
        // Both roundings from one scaled floor where it decides them, else one after the other.
        if let Some((hi, lo)) = bnconf_spec::exact::round::round_f64_pair(v) {
            return Approx(in_range(hi).then_some((hi, lo)));
        }
        let hi = round(v, FloatFormat::F64).to_f64();
        if !in_range(hi) {
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

/// Input values (all inputs of the cases together) that the streaming judge (`check DIR`,
/// `check --exec`, `run`) prepares and judges at once, at most ([`chunks`]); a larger case is
/// judged alone. Its working set is then about [`JUDGE_BYTES_PER_CELL`] bytes per cell of the
/// larger of the largest case and this many values.
pub const JUDGE_CHUNK_CELLS: usize = 1 << 20;

/// The streaming judge's working set per cell of the cases in hand (docs/PERF.md, "Judging
/// the scale suite"), for a backward case of binary32 values (inputs `x`, `dy`, output `dx` per
/// cell), at most: 16 bytes of inputs (f64, as the suite holds them), 8 of the fast cells' f32
/// copy and 12 of the kernel's output (read as f32, kept as f64), with room to spare (the
/// bounds read a channel's cells in place). Budgets are computed where each ratio is, never
/// stored ([`CellBound`]); few ratios are formed. A lean suite's large case (the scale
/// suite's: [`prepare_owned_lean`]) is made as its fast problem, never as f64
/// (`suite::generate::remake_fast`): 8 bytes a cell of inputs, and its f32 cell output is
/// judged as the file holds it (`protocol::judge_in_width`: 4 bytes a cell, 8 where the case
/// does not pass and is judged again as f64), about 12 at its peak.
pub const JUDGE_BYTES_PER_CELL: usize = 48;

/// Consecutive runs of `cases`, in order, each of at most `max_values` input values (all
/// inputs together) or a single case: the chunks the streaming judge prepares at once.
pub fn chunks(cases: &[SuiteCase], max_values: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    let (mut start, mut values) = (0, 0usize);
    for (i, c) in cases.iter().enumerate() {
        let n = input_values(c);
        if i > start && values.saturating_add(n) > max_values {
            out.push(start..i);
            (start, values) = (i, 0);
        }
        values = values.saturating_add(n);
    }
    if start < cases.len() {
        out.push(start..cases.len());
    }
    out
}

/// The number of input values of a case (all inputs together), also of a lean case whose
/// inputs are left out (`suite::generate::generate_listed_lean`): from its op and shape.
pub(crate) fn input_values(c: &SuiteCase) -> usize {
    if !c.inputs.is_empty() {
        return c.inputs.values().map(Vec::len).sum();
    }
    let Ok(g) = bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX) else {
        return 0;
    };
    c.op.inputs()
        .iter()
        .map(|&name| match bnconf_spec::op::Op::extent(name) {
            bnconf_spec::op::Extent::Cells => g.len(),
            bnconf_spec::op::Extent::Channel => g.c,
            bnconf_spec::op::Extent::Shards => c.shard_sizes.len(),
        })
        .sum()
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
        .map(|c| prepare_case(c.clone(), allow_fast, None))
        .collect()
}

/// [`prepare`] of cases given by value: each moved into its preparation rather than copied
/// (the streaming judge's way: a case's inputs are held once). The same preparations.
pub fn prepare_owned(cases: Vec<SuiteCase>) -> Result<Vec<Prepared>, bnconf_spec::SpecError> {
    cases
        .into_par_iter()
        .map(|c| prepare_case(c, true, None))
        .collect()
}

/// [`prepare_owned`] of cases whose inputs `refill` makes again (a lean suite's: the streaming
/// judge's): a large case's f64 inputs are dropped as soon as its fast problem holds them
/// (as f32 where they are binary32), so that its inputs are held once, in their own width;
/// its preparation then has no inputs (`refill` them to read them). A case the fast
/// preparation refuses is refilled and prepared as [`prepare_owned`] prepares it. The same
/// goldens, bounds and verdicts.
///
/// A case given with its fast problem (`Some`: a case whose inputs are left out, made again
/// as the fast path holds them: `suite::generate::remake_fast`) is prepared from it, never
/// holding f64 inputs; if small, or refused, it is refilled and prepared as above.
pub fn prepare_owned_lean(
    cases: Vec<(SuiteCase, Option<crate::fast::FastProblem>)>,
    refill: &(dyn Fn(&mut SuiteCase) + Sync),
) -> Result<Vec<Prepared>, bnconf_spec::SpecError> {
    cases
        .into_par_iter()
        .map(|(c, made)| match made {
            Some(fp) => prepare_made(c, fp, refill),
            None => prepare_case(c, true, Some(refill)),
        })
        .collect()
}

/// [`prepare_owned_lean`] of a case without inputs, made as its fast problem `fp`.
fn prepare_made(
    mut c: SuiteCase,
    fp: crate::fast::FastProblem,
    refill: &(dyn Fn(&mut SuiteCase) + Sync),
) -> Result<Prepared, bnconf_spec::SpecError> {
    // `judged_fast` of the case its inputs make (a lean case is never replicated).
    if crate::fast::covers(c.op) && fp.x.len() >= FAST_JUDGE_MIN_LEN && c.shard_sizes.is_empty() {
        if let Some(parts) = fast_parts_of(&c, fp) {
            return Ok(from_fast_parts(c, parts));
        }
    } else {
        drop(fp);
    }
    refill(&mut c);
    prepare_case(c, false, None)
}

/// The preparation of one case (through the fast cells where `allow_fast` and it is large;
/// its inputs dropped there where `refill` can make them again).
fn prepare_case(
    mut c: SuiteCase,
    allow_fast: bool,
    refill: Option<&(dyn Fn(&mut SuiteCase) + Sync)>,
) -> Result<Prepared, bnconf_spec::SpecError> {
    if allow_fast && judged_fast(&c) {
        let lean = refill.filter(|_| c.shard_sizes.is_empty());
        if let Some(parts) = fast_parts(&mut c, lean.is_some()) {
            return Ok(from_fast_parts(c, parts));
        }
        if let Some(refill) = lean {
            refill(&mut c);
        }
    }
    let p = c.problem();
    let golden = match exact_by_forms(&c) {
        Some(g) => g,
        None => p.evaluate()?,
    };
    let budgets = budget::budgets_auto(&p)?;
    let approx = golden
        .iter()
        .map(|(&n, v)| (n, v.iter().map(Approx::new).collect()))
        .collect();
    let locals = crate::judge::replicated::locals(&c, &golden)?.map(std::sync::Arc::new);
    Ok(Prepared {
        k: budget::k_allowance(p.geom.m),
        case: c,
        golden,
        budgets,
        cell_bounds: None,
        approx,
        fast: None,
        locals,
    })
}

/// The exact outputs of a case the fast path covers from its channel constants (the same
/// values as `Problem::evaluate`, with fewer rational operations per element: tests in
/// `fast`); `None` where it does not apply or refuses the case (then `evaluate` reports).
fn exact_by_forms(c: &SuiteCase) -> Option<Outputs> {
    if !crate::fast::covers(c.op) {
        return None;
    }
    let fp = c.fast_problem().ok()?;
    let fc = crate::fast::cells::FastCells::of_problem(fp).ok()?;
    let names = c.op.outputs();
    let mut out = Outputs::new();
    out.insert(names[0], (0..fc.len()).map(|j| fc.exact(j)).collect());
    for (&name, vals) in names[1..].iter().zip(fc.channel_outputs()) {
        out.insert(name, vals);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::verdict::approx;
    use bnconf_spec::exact::round::FloatFormat;
    use bnconf_spec::Op;

    /// `chunks` partitions the cases in order into runs of at most the bound of input values,
    /// a case over the bound alone, and no run that could take the next case stopped early.
    #[test]
    fn chunks_partition_the_cases_in_order_within_the_bound() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32]);
        let values = |c: &SuiteCase| c.inputs.values().map(Vec::len).sum::<usize>();
        let largest = s.cases.iter().map(values).max().unwrap();
        for max in [0, 1, 100, largest, 5000, usize::MAX] {
            let ch = chunks(&s.cases, max);
            let mut next = 0;
            for (j, r) in ch.iter().enumerate() {
                assert_eq!(r.start, next, "max {max}");
                assert!(r.end > r.start, "max {max}: empty chunk");
                let n: usize = s.cases[r.clone()].iter().map(values).sum();
                assert!(n <= max || r.len() == 1, "max {max}: {r:?} holds {n}");
                if let Some(c) = s.cases.get(r.end) {
                    assert!(n + values(c) > max, "max {max}: chunk {j} stopped early");
                }
                next = r.end;
            }
            assert_eq!(next, s.cases.len(), "max {max}");
        }
        assert_eq!(chunks(&s.cases, 0).len(), s.cases.len());
        assert_eq!(chunks(&s.cases, usize::MAX), vec![0..s.cases.len()]);
        assert!(chunks(&[], 10).is_empty());
    }

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

    /// A computed value for element `i` whose exact value is about `e` and whose allowed error
    /// is `k·scale`: exact, within, at and just over the gate, far over it, over it but not
    /// the worst, one ulp off.
    fn perturb(i: usize, e: f64, scale: f64, k: f64, u: f64) -> f64 {
        match i % 8 {
            0 => e,
            1 => e + scale * 0.5,
            2 => e - scale * k,
            3 => (e + scale * k).next_up(),
            4 => e + scale * 1e3,
            5 => e - scale * (i % 5) as f64 * 0.25,
            6 => e - scale * k * (2.0 + (i % 11) as f64),
            _ => e * (1.0 + u),
        }
    }

    /// Cases of several chunks of cells (tiled along N, the outermost axis of both layouts): a
    /// backward NHWC case and an eval NCHW one (an elementwise gate) of `s`.
    fn tiled_cases(s: &crate::suite::Suite) -> Vec<SuiteCase> {
        let mut tiled = vec![];
        for (op, layout) in [
            (Op::Backward, bnconf_spec::Layout::Nhwc),
            (Op::Eval, bnconf_spec::Layout::Nchw),
        ] {
            let c = s
                .cases
                .iter()
                .find(|c| c.op == op && c.layout == layout)
                .expect("a case to tile");
            let len = c.inputs["x"].len();
            let t = (3 * RATIO_CHUNK).div_ceil(len);
            let mut big = c.clone();
            big.shape[0] *= t;
            for name in ["x", "dy"] {
                if let Some(v) = c.inputs.get(name) {
                    big.inputs.insert(name.into(), v.repeat(t));
                }
            }
            big.id = format!("{}.tiled", c.id);
            tiled.push(big);
        }
        tiled
    }

    /// A large case's cell output summarised without most of its ratios
    /// (`fast_cell_summary`: the plain-f64 bracket) gives the summary of all its ratios
    /// (`RatioSummary::of` the one-pass ratios), bit for bit, with one thread or two, in
    /// f32's, f16's and bf16's unit roundoff: on every default-suite case the fast cells cover
    /// and on tiled cases of several chunks (whose ratios repeat: ties, the first kept), on
    /// values at, near and far from the exact ones and the gate, and on values correctly
    /// rounded, where it forms the ratios of few elements (at most 1 in 16 on the tiled cases).
    #[test]
    fn the_summary_of_a_cell_output_is_that_of_all_its_ratios() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let tiled = tiled_cases(s);
        let fast_cases = s.cases.iter().filter(|c| crate::fast::covers(c.op));
        let mut n = 0;
        for c in fast_cases.chain(&tiled) {
            let p = prepare_fast(c).expect("a fast preparation");
            let f = p.fast.as_deref().expect("fast cells");
            let cb = p.cell_bounds.as_deref().expect("cell bounds");
            let name = c.op.outputs()[0];
            for fmt in [FloatFormat::F32, FloatFormat::F16, FloatFormat::BF16] {
                let (u, k) = (fmt.unit_roundoff(), p.k);
                let b = p.budgets_of(name);
                for perturbed in [true, false] {
                    let vals: Vec<f64> = (0..f.len())
                        .map(|i| {
                            let exact = f.exact(i);
                            if !perturbed {
                                return round(&exact, fmt).to_f64();
                            }
                            perturb(i, approx(&exact), u * b[i].total(u), k, u)
                        })
                        .collect();
                    let (r, allowed) = p.ratios_and_allowed(name, &vals, u);
                    let want = RatioSummary::of(&r, k, allowed);
                    for threads in [1, 2] {
                        let (got, formed) = crate::par::with_threads(Some(threads), || {
                            fast_cell_summary(f, cb, &vals, u, k)
                        })
                        .unwrap();
                        let bits = |s: &RatioSummary| {
                            (s.worst, s.ratio.to_bits(), s.n_over, s.allowed.to_bits())
                        };
                        assert_eq!(bits(&got), bits(&want), "{} u={u} ({threads})", c.id);
                        assert_eq!(p.ratio_summary(name, &vals, u), want, "{}", c.id);
                        if !perturbed && c.id.ends_with(".tiled") {
                            assert!(16 * formed <= f.len(), "{}: {formed}/{}", c.id, f.len());
                        }
                    }
                }
            }
            n += 1;
        }
        assert!(n >= 10, "{n} cases");
    }

    /// A lean preparation (`prepare_owned_lean`: the streaming judge's, for a suite whose
    /// inputs are made again) is the full one without the inputs of a case prepared fast:
    /// the same goldens, budgets, cell bounds and verdicts (outputs near, at and over the
    /// gate), in f32 and f64, on the default suite's large cases and on tiled ones; a small
    /// case keeps its inputs; a large case the fast preparation refuses is refilled and gets
    /// the full preparation's error. So is one of cases given as their fast problems without
    /// inputs (as `suite::generate::remake_fast` makes them), a small one refilled.
    #[test]
    fn a_lean_preparation_is_the_full_one_without_its_inputs() {
        use crate::judge::check::Written;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let tiled = tiled_cases(s);
        let mut cases: Vec<SuiteCase> = s
            .cases
            .iter()
            .filter(|c| judged_fast(c) && c.shard_sizes.is_empty())
            .cloned()
            .collect();
        let fast = cases.len() + tiled.len();
        cases.extend(tiled);
        cases.extend(s.cases.iter().filter(|c| !judged_fast(c)).take(20).cloned());
        let kept: BTreeMap<String, BTreeMap<String, Vec<f64>>> = cases
            .iter()
            .map(|c| (c.id.clone(), c.inputs.clone()))
            .collect();
        let refills = AtomicUsize::new(0);
        let refill = |c: &mut SuiteCase| {
            refills.fetch_add(1, Ordering::Relaxed);
            c.inputs = kept[&c.id].clone();
        };
        let full = prepare_owned(cases.clone()).unwrap();
        // Cases made as their fast problems, without inputs (`suite::generate::remake_fast`):
        // a small one refilled.
        let made: Vec<(SuiteCase, Option<crate::fast::FastProblem>)> = cases
            .iter()
            .map(|c| {
                let mut shell = c.clone();
                shell.inputs.clear();
                (shell, Some(c.fast_problem().unwrap()))
            })
            .collect();
        let small = cases.iter().filter(|c| !judged_fast(c)).count();
        assert!(small > 0);
        let made = prepare_owned_lean(made, &refill).unwrap();
        assert_eq!(refills.swap(0, Ordering::Relaxed), small);
        let unmade = cases.into_iter().map(|c| (c, None)).collect();
        let lean = prepare_owned_lean(unmade, &refill).unwrap();
        assert_eq!(refills.load(Ordering::Relaxed), 0);
        let mut dropped = 0;
        for (f, l) in full.iter().zip(&lean).chain(full.iter().zip(&made)) {
            let id = &f.case.id;
            if f.fast.is_some() {
                assert!(l.case.inputs.is_empty(), "{id}: inputs kept");
                dropped += 1;
            } else {
                assert_eq!(l.case.inputs, f.case.inputs, "{id}");
            }
            assert_eq!(l.golden, f.golden, "{id}");
            assert_eq!(
                format!("{:?}", l.budgets),
                format!("{:?}", f.budgets),
                "{id}"
            );
            assert_eq!(
                format!("{:?}", l.cell_bounds),
                format!("{:?}", f.cell_bounds),
                "{id}"
            );
            let (u, k) = (f.case.dtype.unit_roundoff(), f.k);
            let outputs: BTreeMap<String, Vec<f64>> = f
                .case
                .op
                .outputs()
                .iter()
                .map(|&name| {
                    let b = f.budgets_of(name);
                    let vals = (0..f.output_len(name))
                        .map(|i| perturb(i, approx(&f.exact_at(name, i)), u * b[i].total(u), k, u))
                        .collect();
                    (name.to_string(), vals)
                })
                .collect();
            let w = Written::Outputs(outputs);
            let (a, b) = (f.judge_written(&w), l.judge_written(&w));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{id}");
        }
        assert_eq!(dropped, 2 * fast, "every large case prepared fast");
        // A large eval case whose var + eps is not positive: the fast preparation refuses it,
        // the case is refilled, and the exact path reports as for the full preparation.
        let mut bad = tiled_cases(s)
            .into_iter()
            .find(|c| c.op == Op::Eval && judged_fast(c))
            .expect("a large eval case");
        bad.inputs.get_mut("var").unwrap()[0] = -1.0;
        let want = prepare_owned(vec![bad.clone()]).unwrap_err();
        let inputs = bad.inputs.clone();
        let refilled = AtomicUsize::new(0);
        let fp = bad.fast_problem().unwrap();
        let mut shell = bad.clone();
        shell.inputs.clear();
        for case in [(bad, None), (shell, Some(fp))] {
            let got = prepare_owned_lean(vec![case], &|c: &mut SuiteCase| {
                refilled.fetch_add(1, Ordering::Relaxed);
                c.inputs = inputs.clone();
            })
            .unwrap_err();
            assert_eq!(got.to_string(), want.to_string());
        }
        assert_eq!(refilled.load(Ordering::Relaxed), 2);
    }

    /// A large case's cell output judged in one pass (budgets computed per cell where the
    /// ratio is, never stored: `ratios_and_allowed`) gives the ratios and largest allowed
    /// error of the stored budgets judged element by element (`budgets_bound_f64`,
    /// `fast_ratio`, `max_allowed`), bit for bit, with one thread or two: on every default-suite
    /// case the fast cells cover (f32, f64, every layout), on computed values at, near and far
    /// from the exact ones and the gate; `budget_at` and `budgets_of` are those budgets too.
    #[test]
    fn one_pass_ratios_are_the_stored_budgets_ratios() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let mut n = 0;
        let mut layouts = std::collections::BTreeSet::new();
        let tiled = tiled_cases(s);
        let fast_cases = s.cases.iter().filter(|c| crate::fast::covers(c.op));
        for c in fast_cases.chain(&tiled) {
            let p = prepare_fast(c).expect("a fast preparation");
            let f = p.fast.as_deref().expect("fast cells");
            let name = c.op.outputs()[0];
            let geom = bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX).unwrap();
            let eps = bnconf_spec::exact::parse::parse_rational(&c.eps).unwrap();
            let stored = budget::budgets_bound_f64(c.op, &geom, &eps, &c.inputs).unwrap();
            let b = &stored[name];
            assert_eq!(&p.budgets_of(name), b, "{}", c.id);
            let (u, k) = (c.dtype.unit_roundoff(), p.k);
            let vals: Vec<f64> = (0..f.len())
                .map(|i| perturb(i, approx(&f.exact(i)), u * b[i].total(u), k, u))
                .collect();
            let want: Vec<u64> = (0..f.len())
                .map(|i| fast_ratio(f, i, vals[i], &b[i], u, k).to_bits())
                .collect();
            let allowed = crate::judge::verdict::max_allowed(b, k, u);
            for threads in [1, 2] {
                let (r, a) = crate::par::with_threads(Some(threads), || {
                    p.ratios_and_allowed(name, &vals, u)
                })
                .unwrap();
                let got: Vec<u64> = r.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{} ({threads} threads)", c.id);
                assert_eq!(a.to_bits(), allowed.to_bits(), "{}", c.id);
            }
            for i in [0, f.len() / 2, f.len() - 1] {
                assert_eq!(p.budget_at(name, i), b[i], "{}[{i}]", c.id);
            }
            layouts.insert(c.layout.name());
            n += 1;
        }
        assert!(
            n > 100 && layouts.len() >= 4,
            "{n} cases, layouts {layouts:?}"
        );
        assert!(tiled.iter().all(|c| c.inputs["x"].len() > 2 * RATIO_CHUNK));
    }

    /// The shortcut's threshold at its edge: the largest `diff + unc` it accepts,
    /// `k·scale·(1 − 2^-50)`, divided by `scale` is still at most `k` (over budgets and
    /// allowances of many magnitudes), and a threshold of `k·scale·(1 + 2^-50)` would not be.
    #[test]
    fn the_ratio_shortcut_holds_at_its_threshold() {
        let mut wider_fails = 0;
        for i in 0..20_000u32 {
            let k = 4.0 + (i % 97) as f64 * 0.37 + (i % 13) as f64 * 1e-3;
            let sc = (1.0 + (i % 1013) as f64 / 1013.0) * 2f64.powi((i % 1200) as i32 - 600);
            let edge = k * sc * (1.0 - 2f64.powi(-50));
            assert!(edge / sc <= k, "k {k}, scale {sc:e}");
            let wider = k * sc * (1.0 + 2f64.powi(-50));
            wider_fails += usize::from(wider / sc > k);
        }
        assert!(wider_fails > 1000, "{wider_fails}");
        // In `fast_ratio_by`: a value whose interval straddles the gate (`diff + unc` just
        // above `k·scale`, `lo <= k < hi`) is not taken by the shortcut but decided exactly.
        let (u, k) = (2f64.powi(-24), 12.0);
        let b = ElementBudget {
            cond: 3.0,
            mag: 0.0,
            mag2: 0.0,
        };
        let computed = k * (u * b.total(u));
        let v = Some((crate::fast::dd::DD::from_f64(0.0), 0.0));
        let before = EXACT_FALLBACKS.with(|n| n.get());
        let r = fast_ratio_by(v, computed, &b, u, k, || QSqrt::int(0));
        assert_eq!(EXACT_FALLBACKS.with(|n| n.get()), before + 1, "ratio {r}");
        assert_eq!(r, b.ratio(computed, &QSqrt::int(0), u));
    }

    proptest::proptest! {
        /// The shortcut of `fast_ratio_by` (no division): wherever `diff + unc <= k·scale·(1 −
        /// 2^-50)`, the test it skips, `(diff + unc)/scale <= k`, holds in floating point.
        #[test]
        fn the_ratio_shortcut_implies_the_division_test(
            d in 0f64..1e6, un in 0f64..1e3, sc in 1e-300f64..1e300, k in 4f64..60.0,
            e in -600i32..600
        ) {
            let (diff, unc) = (d * 2f64.powi(e), un * 2f64.powi(e));
            if diff + unc <= k * sc * (1.0 - 2f64.powi(-50)) {
                proptest::prop_assert!((diff + unc) / sc <= k);
            }
        }
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
            let b = &p.budgets_of(c.op.outputs()[0]);
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
