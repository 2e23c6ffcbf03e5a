//! The fast exact reference for the normalization family (docs/DESIGN.md §5 and §9): every
//! output of a layer_norm, rms_norm or group_norm case (forward or backward) correctly rounded
//! to its dtype at float speed, bit for bit what the exact path (`suite::family::
//! family_goldens`, then correct rounding) gives. Method, per row (or (sample, group)) of K
//! cells:
//!
//! 1. **Exact sums** in superaccumulators: `S1 = Σx`, `S2 = Σx²`; backward also `A = Σ w·dy`
//!    and `G = Σ w·dy·x` (`w` the cell's weight: `gamma`, `1 + gamma` in rms_norm's offset
//!    convention, or 1), every product formed exactly.
//! 2. **Exact per-row rationals**: `mean = S1/K` (0 for rms_norm), `q = (K·S2 − S1²)/K² + eps`
//!    (rms_norm `S2/K + eps`), `B = G − mean·A`, `C = B/(K·q)`. Then every cell output is
//!    `y = b + w·(x − mean)/sqrt(q)` and `dx = (w·dy − A/K − (x − mean)·C)/sqrt(q)`: one
//!    rational times `1/sqrt(q)` plus a rational.
//! 3. **Per element**, that expression in double-double with a rigorous bound on its
//!    absolute error, `2^-94·(magnitudes of its terms) + 2^-1000` (the operations' own bounds
//!    sum to below 2^-100 times the same magnitudes; see [`super::dd`]); if the whole interval
//!    rounds to one float that float is the answer, else the element's exact `a + b·sqrt(q)` is
//!    rounded by `spec`.
//! 4. `mean`, `rstd`, `dbeta` are exact per row or parameter and rounded by `spec`. `dgamma`
//!    sums `dy·(x − mean_r)/sqrt(q_r)` over rows of different radicands: in double-double with
//!    the bound `(n + 64)·2^-98·Σ|dy|·(|x| + |mean_r|)/sqrt(q_r) + 2^-1000` for `n` terms (any
//!    summation order), and where that does not decide, the exact sum of roots
//!    (`SumOfRoots`) is built and rounded.
//!
//! Layout `last` (layer_norm, rms_norm) takes its own path (`fast::family_rows`): no
//! grouping is built (the rows are contiguous, a cell's parameter its position); chunks of 64
//! rows run in parallel, each row's sums, constants, outputs and `dgamma`/`dbeta` terms while
//! it is in cache; `dbeta` is summed per column in f64 with every addition checked exact
//! (two-sum), the column summed again exactly where one was not.
//!
//! Rows run in parallel; every value is correctly rounded, so the result does not depend on
//! the thread count. The fast path declines (returns `None`: use the exact path) for inputs
//! outside `[2^-400, 2^400]` in magnitude (exact products could underflow) and for `q ≤ 0`.

use super::acc::{F32Buckets, SuperAcc, F32_BUCKET_PIECE};
use super::dd::{dd_div_sqrt, dd_of_rational, Fused, Portable, Prod, DD};
use super::family_rows::{
    block_best, decide, DbetaPart, DgammaPart, RowBuckets, RowDd, RowWeights, Scratch,
};
use crate::par::*;
use bnconf_impl::family::{FamilyCase, FamilyLayout, Grouping, RmsConvention};
use bnconf_spec::exact::roots::SumOfRoots;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::exact::{QSqrt, Rational};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The float format of impl's dtype.
fn format_of(d: bnconf_impl::Dtype) -> FloatFormat {
    match d {
        bnconf_impl::Dtype::F64 => FloatFormat::F64,
        bnconf_impl::Dtype::F32 => FloatFormat::F32,
        bnconf_impl::Dtype::F16 => FloatFormat::F16,
        bnconf_impl::Dtype::BF16 => FloatFormat::BF16,
    }
}

pub(super) fn rat(v: f64) -> Rational {
    f64_to_rational(v).expect("finite")
}

/// Whether every value is 0 or within `[2^-400, 2^400]` in magnitude (products exact).
pub(crate) fn in_range(v: &[f64]) -> bool {
    v.iter()
        .all(|&x| x == 0.0 || (x.is_finite() && x.abs() > 3.8e-121 && x.abs() < 2.5e120))
}

/// The affine parameters: a cell's weight `w` exactly, as a double-double (`1 + gamma` is
/// one), and its bias.
#[derive(Clone, Copy)]
pub(super) struct Weights<'a> {
    pub(super) gamma: Option<&'a [f64]>,
    pub(super) offset: bool,
    pub(super) beta: Option<&'a [f64]>,
}

impl Weights<'_> {
    #[inline]
    pub(super) fn dd(&self, p: usize) -> DD {
        match self.gamma {
            None => DD::from_f64(1.0),
            Some(g) if self.offset => DD::from_f64(1.0).add_f64(g[p]),
            Some(g) => DD::from_f64(g[p]),
        }
    }
    fn exact(&self, p: usize) -> Rational {
        match self.gamma {
            None => Rational::from_integer(1.into()),
            Some(g) if self.offset => Rational::from_integer(1.into()) + rat(g[p]),
            Some(g) => rat(g[p]),
        }
    }
}

/// One row's (or group's) exact constants and their double-doubles.
pub(super) struct Row {
    pub(super) mean: Rational,
    pub(super) q: Rational,
    pub(super) mean_dd: DD,
    pub(super) rstd_dd: DD,
    /// Backward: `A/K` and `C = B/(K·q)`.
    a_k: Rational,
    c: Rational,
    a_k_dd: DD,
    c_dd: DD,
}

impl Row {
    pub(super) fn dd(&self) -> RowDd {
        RowDd {
            mean: self.mean_dd,
            rstd: self.rstd_dd,
            a_k: self.a_k_dd,
            c: self.c_dd,
        }
    }
}

/// A row's weights and biases by position (layout `last`, `k` parameters).
pub(super) fn row_weights(w: Weights, k: usize) -> RowWeights {
    let dd: Vec<DD> = (0..k).map(|p| w.dd(p)).collect();
    RowWeights {
        wh: dd.iter().map(|d| d.hi).collect(),
        wl: dd.iter().map(|d| d.lo).collect(),
        b: (0..k).map(|p| w.beta.map_or(0.0, |b| b[p])).collect(),
    }
}

fn round_q(v: &QSqrt, f: FloatFormat) -> f64 {
    round(v, f).to_f64()
}

/// Every output of `case` (optional ones included) correctly rounded to its dtype, by the
/// fast path (module docs); `None` where it declines (then the exact path applies).
pub fn family_fast(case: &FamilyCase) -> Option<BTreeMap<&'static str, Vec<f64>>> {
    family_fast_counted(case).map(|(out, _)| out)
}

/// [`family_fast`] and how many elements the exact path decided (those the double-double
/// interval left undecided: near a midpoint, an exact float, zero or the range's ends).
pub fn family_fast_counted(case: &FamilyCase) -> Option<(BTreeMap<&'static str, Vec<f64>>, u64)> {
    let eps = f64_to_rational(case.eps)?;
    let (act, param) = (format_of(case.dtype), format_of(case.param_dtype));
    family_fast_in(case, &eps, act, param)
}

/// [`family_fast_counted`] with `eps` exactly (a case file's `eps_exact`, which the f64
/// `case.eps` only approximates) and every output rounded to `act` (`y`, `dx`) or `param`
/// (the rest) instead of the case's dtypes: what `bnconf golden --out-dir` writes (f64 and
/// f32 of every output).
pub fn family_fast_in(
    case: &FamilyCase,
    eps: &Rational,
    act: FloatFormat,
    param: FloatFormat,
) -> Option<(BTreeMap<&'static str, Vec<f64>>, u64)> {
    let fallbacks = AtomicU64::new(0);
    let out = fast_outputs(case, eps, act, param, &fallbacks)?;
    Some((out, fallbacks.into_inner()))
}

fn fast_outputs(
    case: &FamilyCase,
    eps: &Rational,
    act: FloatFormat,
    param: FloatFormat,
    fallbacks: &AtomicU64,
) -> Option<BTreeMap<&'static str, Vec<f64>>> {
    if let Some(k) = last_row_len(case) {
        return last_outputs(case, k, eps, act, param, fallbacks);
    }
    let grouping = case.validate().ok()?;
    let x = case.inputs.get("x")?.as_slice();
    let dy = case.inputs.get("dy").map(|v| v.as_slice());
    let gamma = case.inputs.get("gamma").map(|v| v.as_slice());
    let beta = case.inputs.get("beta").map(|v| v.as_slice());
    for v in [Some(x), dy, gamma, beta].into_iter().flatten() {
        if !in_range(v) {
            return None;
        }
    }
    let centred = case.op.centered();
    let w = Weights {
        gamma,
        offset: case.convention == RmsConvention::Offset,
        beta,
    };
    let rows = row_constants(&grouping, x, dy, w, centred, eps)?;
    let mut out = BTreeMap::new();
    match dy {
        None => {
            out.insert("y", cells(&grouping, &rows, x, None, w, act, fallbacks));
            if centred {
                out.insert(
                    "mean",
                    rows.iter()
                        .map(|r| round_q(&QSqrt::rational(r.mean.clone()), param))
                        .collect(),
                );
            }
            out.insert(
                "rstd",
                rows.iter()
                    .map(|r| round_q(&rstd_exact(&r.q), param))
                    .collect(),
            );
        }
        Some(dy) => {
            out.insert(
                "dx",
                cells(&grouping, &rows, x, Some(dy), w, act, fallbacks),
            );
            if case.affine.has_weight() {
                out.insert("dgamma", dgamma(&grouping, &rows, x, dy, param, fallbacks));
            }
            if case.affine.has_bias() {
                out.insert("dbeta", dbeta(&grouping, dy, param));
            }
        }
    }
    Some(out)
}

/// `Some(K)` exactly when `case` is of layout `last` and `case.validate()` passes, decided
/// without building its grouping (2 × 8 bytes per cell: `FamilyCase::check`): row `r` is
/// then cells `r·K … r·K + K − 1` and cell `r·K + j` uses parameter `j` (`Grouping::last`).
pub fn last_row_len(case: &FamilyCase) -> Option<usize> {
    if case.layout != FamilyLayout::Last {
        return None;
    }
    case.check().ok()?;
    let nd = case.normalized_ndim?;
    Some(case.shape[case.shape.len() - nd..].iter().product())
}

/// What the rows of a layout-`last` case (`k` cells each) are read with: the affine
/// parameters, the weights as float32 for the buckets (1 without `gamma`) when they are,
/// centring, `eps`.
pub(super) struct LastRowCtx<'a> {
    pub(super) w: Weights<'a>,
    w_row: Vec<f64>,
    w_f32: bool,
    k: usize,
    centred: bool,
    eps: Rational,
}

impl<'a> LastRowCtx<'a> {
    pub(super) fn new(w: Weights<'a>, k: usize, centred: bool, eps: Rational) -> Self {
        LastRowCtx {
            w_f32: !w.offset && w.gamma.is_none_or(|g| range_and_f32(g).1),
            w_row: w.gamma.map_or_else(|| vec![1.0; k], <[f64]>::to_vec),
            w,
            k,
            centred,
            eps,
        }
    }

    /// One row's exact sums (float32 rows of 64+ cells through [`RowBuckets`]) and constants
    /// (steps 1–2); `None` where an input is out of range (`in_range`) or `q ≤ 0`.
    pub(super) fn row(&self, xr: &[f64], dr: Option<&[f64]>, bk: &mut RowBuckets) -> Option<Row> {
        let k = self.k;
        let (x_ok, x_f32) = range_and_f32(xr);
        let (d_ok, d_f32) = dr.map_or((true, true), range_and_f32);
        if !(x_ok && d_ok) {
            return None;
        }
        let (s1, s2, dy_sums) = if x_f32 && d_f32 && self.w_f32 && k >= 64 {
            let acc = bk.row_sums(xr, dr.map(|d| (d, &self.w_row[..])));
            let dy_sums = dr.map(|_| (acc.a.to_dyadic(), acc.g.to_dyadic()));
            (acc.s1.to_dyadic(), acc.s2.to_dyadic(), dy_sums)
        } else {
            let (mut s1, mut s2) = (SuperAcc::new(), SuperAcc::new());
            for &v in xr {
                s1.add(v);
                s2.add_product(v, v);
            }
            let dy_sums = dr.map(|d| row_dy_sums((0..k).map(|j| (j, j)), xr, d, self.w));
            (s1.to_dyadic(), s2.to_dyadic(), dy_sums)
        };
        row_of_sums(&s1, &s2, dy_sums, k, self.centred, &self.eps)
    }
}

/// Rows per parallel work item of the `last` path (and per partial sum of `dgamma`, as the
/// generic path's `dgamma_sums`).
pub(super) const ROWS_PER_ITEM: usize = 64;

/// What one work item of [`last_outputs`] gives: its rows' constants and its partial sums
/// of `dgamma` and `dbeta`.
struct RowsItem {
    rows: Vec<Row>,
    dgamma: Option<DgammaPart>,
    dbeta: Option<DbetaPart>,
}

/// Whether every value is 0 or within `[2^-400, 2^400]` in magnitude (as [`in_range`]), and
/// whether every value is a float32; no branch.
fn range_and_f32(v: &[f64]) -> (bool, bool) {
    let (mut ok, mut f32s) = (true, true);
    for &e in v {
        let a = e.abs();
        ok &= (e == 0.0) | ((a > 3.8e-121) & (a < 2.5e120));
        f32s &= (e as f32) as f64 == e;
    }
    (ok, f32s)
}

/// [`fast_outputs`] for layout `last` (rows of `k` cells, parameter = position; see
/// [`last_row_len`]): per chunk of [`ROWS_PER_ITEM`] rows, in parallel, each row's exact sums
/// (float32 rows of 64+ cells through [`RowBuckets`]), constants, cell outputs (the block
/// kernel) and its terms of `dgamma` and `dbeta`, while the row is in cache; the outputs are
/// those of the generic path, bit for bit (the same constants, arithmetic and bounds; every
/// value correctly rounded).
fn last_outputs(
    case: &FamilyCase,
    k: usize,
    eps: &Rational,
    act: FloatFormat,
    param: FloatFormat,
    fallbacks: &AtomicU64,
) -> Option<BTreeMap<&'static str, Vec<f64>>> {
    let x = case.inputs.get("x")?.as_slice();
    let dy = case.inputs.get("dy").map(|v| v.as_slice());
    let gamma = case.inputs.get("gamma").map(|v| v.as_slice());
    let beta = case.inputs.get("beta").map(|v| v.as_slice());
    if !gamma.is_none_or(in_range) || !beta.is_none_or(in_range) {
        return None;
    }
    let centred = case.op.centered();
    let w = Weights {
        gamma,
        offset: case.convention == RmsConvention::Offset,
        beta,
    };
    let wts = row_weights(w, k);
    let rc = LastRowCtx::new(w, k, centred, eps.clone());
    let (want_dg, want_db) = match dy {
        Some(_) => (case.affine.has_weight(), case.affine.has_bias()),
        None => (false, false),
    };
    // An f32 `dgamma` is summed in plain f64 first (see below).
    let dg_f64 = param == FloatFormat::F32;
    let mut out = vec![0.0; x.len()];
    let items: Vec<Option<RowsItem>> = out
        .par_chunks_mut(ROWS_PER_ITEM * k)
        .enumerate()
        .map(|(ci, obuf)| {
            let mut bk = RowBuckets::default();
            let (mut scratch, mut undecided) = (Scratch::default(), Vec::new());
            let mut item = RowsItem {
                rows: Vec::with_capacity(ROWS_PER_ITEM),
                dgamma: want_dg.then(|| DgammaPart::new(k)),
                dbeta: want_db.then(|| DbetaPart::new(k)),
            };
            for (ri, ob) in obuf.chunks_mut(k).enumerate() {
                let r0 = (ci * ROWS_PER_ITEM + ri) * k;
                let xr = &x[r0..r0 + k];
                let dr = dy.map(|d| &d[r0..r0 + k]);
                let row = rc.row(xr, dr, &mut bk)?;
                let rd = row.dd();
                undecided.clear();
                block_best(xr, dr, &wts, &rd, act, ob, &mut scratch, &mut undecided);
                for &j in &undecided {
                    fallbacks.fetch_add(1, Ordering::Relaxed);
                    ob[j] = exact_cell(&row, xr[j], dr.map(|d| d[j]), w, j, act);
                }
                if let (Some(dg), Some(d)) = (&mut item.dgamma, dr) {
                    if dg_f64 {
                        dg.add_row_f64(xr, d, rd.mean, rd.rstd);
                    } else {
                        dg.add_row(xr, d, rd.mean, rd.rstd);
                    }
                }
                if let (Some(db), Some(d)) = (&mut item.dbeta, dr) {
                    db.add_row(d);
                }
                item.rows.push(row);
            }
            Some(item)
        })
        .collect();
    let items: Vec<RowsItem> = items.into_iter().collect::<Option<_>>()?;
    let mut res = BTreeMap::new();
    let Some(dy) = dy else {
        let rows: Vec<&Row> = items.iter().flat_map(|it| &it.rows).collect();
        res.insert("y", out);
        if centred {
            let mean = rows
                .par_iter()
                .map(|r| round_q(&QSqrt::rational(r.mean.clone()), param));
            res.insert("mean", mean.collect());
        }
        let rstd = rows.par_iter().map(|r| round_q(&rstd_exact(&r.q), param));
        res.insert("rstd", rstd.collect());
        return Some(res);
    };
    res.insert("dx", out);
    if want_dg {
        let mut total = DgammaPart::new(k);
        for it in &items {
            let part = it.dgamma.as_ref().expect("a dgamma part per item");
            if dg_f64 {
                total.merge_f64(part);
            } else {
                total.merge(part);
            }
        }
        let rows: Vec<&Row> = items.iter().flat_map(|it| &it.rows).collect();
        let dg = (0..k)
            .into_par_iter()
            .map(|p| {
                if dg_f64 {
                    // The f64 sum of `n` terms, each within 5.01u of its magnitude, in any
                    // order: within `(n − 1)·u·(1 + nu)` of the terms' magnitudes more; the
                    // f64 sum of the magnitudes is within `(n + 4)·u` relative of theirs
                    // (`n < 2^40`: the factor 1.001 covers both). Underflow: a term below
                    // 2^-1022 (only its last product can be) is off by at most 2^-1075, and a
                    // subnormal sum is exact: `(n + 1)·2^-1000` covers them.
                    let n = total.n as f64;
                    let err = (n + 8.0) * 1.1102230246251565e-16 * total.mag[p] * 1.001
                        + (n + 1.0) * 9.332636185032189e-302;
                    let v = DD {
                        hi: total.hi[p],
                        lo: 0.0,
                    };
                    if let Some(y) = decide(v, err, param) {
                        return y;
                    }
                }
                let (sum, mag) = if dg_f64 {
                    // The generic path's double-double of this column (same order).
                    dgamma_column_dd(&rows, x, dy, k, p)
                } else {
                    let sum = DD {
                        hi: total.hi[p],
                        lo: total.lo[p],
                    };
                    (sum, total.mag[p])
                };
                // The bound of `dgamma_sums` (module docs, step 4).
                let err = (total.n as f64 + 64.0) * 3.155443620884047e-30 * mag * (1.0 + 1e-10)
                    + 9.332636185032189e-302;
                decide(sum, err, param).unwrap_or_else(|| {
                    fallbacks.fetch_add(1, Ordering::Relaxed);
                    dgamma_roots_last(&rows, x, dy, k, p).round(param).to_f64()
                })
            })
            .collect();
        res.insert("dgamma", dg);
    }
    if want_db {
        let mut total = DbetaPart::new(k);
        for it in &items {
            total.merge(it.dbeta.as_ref().expect("a dbeta part per item"));
        }
        let db = (0..k)
            .into_par_iter()
            .map(|p| {
                let exact = if total.inexact[p] == 0.0 {
                    // Every addition exact: the f64 sum is the exact one.
                    rat(total.sum[p])
                } else {
                    let mut a = SuperAcc::new();
                    for v in dy.iter().skip(p).step_by(k) {
                        a.add(*v);
                    }
                    a.to_rational()
                };
                round_q(&QSqrt::rational(exact), param)
            })
            .collect();
        res.insert("dbeta", db);
    }
    Some(res)
}

/// `dgamma_p`'s double-double and sum of magnitudes for layout `last` as
/// [`DgammaPart::add_row`] and [`DgammaPart::merge`] form them (rows in chunks of
/// [`ROWS_PER_ITEM`], the chunks' sums added in order; the same operations, so the same
/// values).
fn dgamma_column_dd(rows: &[&Row], x: &[f64], dy: &[f64], k: usize, p: usize) -> (DD, f64) {
    let (mut sum, mut mag) = (DD::default(), 0.0);
    for (ci, chunk) in rows.chunks(ROWS_PER_ITEM).enumerate() {
        let (mut s, mut m) = (DD::default(), 0.0);
        for (ri, r) in chunk.iter().enumerate() {
            let i = (ci * ROWS_PER_ITEM + ri) * k + p;
            let d = DD::from_f64(x[i]) + (-r.mean_dd);
            let t = (d * DD::from_f64(dy[i])) * r.rstd_dd;
            s = s + t;
            m += dy[i].abs() * (x[i].abs() + r.mean_dd.hi.abs()) * r.rstd_dd.hi.abs();
        }
        sum = sum + s;
        mag += m;
    }
    (sum, mag)
}

/// [`dgamma_roots`] for layout `last`: cell `r·K + p` of each row `r`.
pub(super) fn dgamma_roots_last(
    rows: &[&Row],
    x: &[f64],
    dy: &[f64],
    k: usize,
    p: usize,
) -> SumOfRoots {
    let mut terms = Vec::new();
    for (r, row) in rows.iter().enumerate() {
        let i = r * k + p;
        let e = rat(dy[i]) * (rat(x[i]) - &row.mean);
        if !e.is_zero() {
            terms.push((e / &row.q, row.q.clone()));
        }
    }
    SumOfRoots::from_terms(Rational::zero(), terms)
}

/// `1/sqrt(q) = (1/q)·sqrt(q)`.
pub(super) fn rstd_exact(q: &Rational) -> QSqrt {
    QSqrt::new(Rational::zero(), q.recip(), q.clone())
}

/// Steps 1–2 for every row, in parallel; `None` if some `q ≤ 0`.
fn row_constants(
    g: &Grouping,
    x: &[f64],
    dy: Option<&[f64]>,
    w: Weights,
    centred: bool,
    eps: &Rational,
) -> Option<Vec<Row>> {
    let param = g.param_of();
    // Every x, dy and gamma a float32 (f32, f16, bf16 data): integer mantissa sums per
    // exponent (`F32Buckets`), one integer add per sum and element, for rows long enough to
    // pay for their flush.
    let is_f32 = |v: &[f64]| v.iter().all(|&e| (e as f32) as f64 == e);
    let buckets = is_f32(x) && dy.is_none_or(is_f32) && w.gamma.is_none_or(is_f32) && !w.offset;
    let rows: Vec<Option<Row>> = g
        .groups()
        .par_iter()
        .map(|cells| {
            let bucketed = buckets && cells.len() >= 64;
            let (s1, s2) = if bucketed {
                let mut bk = F32Buckets::new();
                let mut acc: [SuperAcc; 4] = Default::default();
                for (n, &i) in cells.iter().enumerate() {
                    bk.add_x((x[i] as f32).to_bits());
                    if (n + 1) % F32_BUCKET_PIECE == 0 {
                        flush(&mut bk, &mut acc);
                    }
                }
                flush(&mut bk, &mut acc);
                (acc[0].to_dyadic(), acc[1].to_dyadic())
            } else {
                let (mut s1, mut s2) = (SuperAcc::new(), SuperAcc::new());
                for &i in cells {
                    s1.add(x[i]);
                    s2.add_product(x[i], x[i]);
                }
                (s1.to_dyadic(), s2.to_dyadic())
            };
            let dy_sums = dy.map(|dy| {
                if bucketed {
                    // A = Σ dy·w in the buckets' products; w·dy is exact in f64 (two
                    // float32 significands), times x one exact product.
                    let mut bk = F32Buckets::new();
                    let mut acc: [SuperAcc; 4] = Default::default();
                    let mut gx = SuperAcc::new();
                    for (n, &i) in cells.iter().enumerate() {
                        let wv = w.gamma.map_or(1.0, |g| g[param[i]]);
                        bk.add_dx((dy[i] as f32).to_bits(), (wv as f32).to_bits());
                        gx.add_product(wv * dy[i], x[i]);
                        if (n + 1) % F32_BUCKET_PIECE == 0 {
                            flush(&mut bk, &mut acc);
                        }
                    }
                    flush(&mut bk, &mut acc);
                    (acc[3].to_dyadic(), gx.to_dyadic())
                } else {
                    row_dy_sums(cells.iter().map(|&i| (i, param[i])), x, dy, w)
                }
            });
            row_of_sums(&s1, &s2, dy_sums, cells.len(), centred, eps)
        })
        .collect();
    rows.into_iter().collect()
}

/// An exact sum `n·2^e` ([`SuperAcc::to_dyadic`]).
type Dyadic = (BigInt, i64);

/// `n·2^e` as a fraction of integers `(n·2^e, 1)` or `(n, 2^-e)`.
fn fraction(n: &BigInt, e: i64) -> (BigInt, BigInt) {
    if e >= 0 {
        (n << e as usize, BigInt::one())
    } else {
        (n.clone(), BigInt::one() << (-e) as usize)
    }
}

/// `K·a·2^ea − b·2^eb` as `n·2^e`.
fn k_diff(k: &BigInt, a: &BigInt, ea: i64, b: &BigInt, eb: i64) -> Dyadic {
    let e = ea.min(eb);
    (((k * a) << (ea - e) as usize) - (b << (eb - e) as usize), e)
}

/// A row's constants (step 2) from its exact sums `Σx`, `Σx²` and (backward) `(Σ w·dy,
/// Σ w·dy·x)` over its `k` cells; `None` if `q ≤ 0`. Each rational is formed as one fraction
/// of integers and reduced once (the same rationals as step 2's formulas: a rational is
/// its reduced form).
fn row_of_sums(
    s1: &Dyadic,
    s2: &Dyadic,
    dy_sums: Option<(Dyadic, Dyadic)>,
    k: usize,
    centred: bool,
    eps: &Rational,
) -> Option<Row> {
    let kb = BigInt::from(k);
    let (ne, de) = (eps.numer(), eps.denom());
    let (n1, e1) = s1;
    let (n2, e2) = s2;
    // q = V/K^m + eps with V = K·S2 − S1², m = 2 (centred), or V = S2, m = 1.
    let (v, e_v, km) = if centred {
        let (d, e) = k_diff(&kb, n2, *e2, &(n1 * n1), 2 * e1);
        (d, e, &kb * &kb)
    } else {
        (n2.clone(), *e2, kb.clone())
    };
    let (vn, vd) = fraction(&v, e_v);
    let q = Rational::new(&vn * de + ne * &km * &vd, &km * &vd * de);
    if !q.is_positive() {
        return None;
    }
    let mean = if centred {
        let (mn, md) = fraction(n1, *e1);
        Rational::new(mn, md * &kb)
    } else {
        Rational::zero()
    };
    let (mut a_k, mut c) = (Rational::zero(), Rational::zero());
    if let Some(((na, ea), (ng, eg))) = dy_sums {
        // c = B/(K·q), B = G − mean·A: centred K·B = K·G − S1·A, so c = (K·B)/(K²·q);
        // rms_norm c = G/(K·q). rms_norm has no centring: no `A/K` term.
        let (b, e_b, kc) = if centred {
            let (an, ad) = fraction(&na, ea);
            a_k = Rational::new(an, ad * &kb);
            let (d, e) = k_diff(&kb, &ng, eg, &(n1 * &na), e1 + ea);
            (d, e, &kb * &kb)
        } else {
            (ng, eg, kb.clone())
        };
        let (bn, bd) = fraction(&b, e_b);
        c = Rational::new(bn * q.denom(), bd * kc * q.numer());
    }
    Some(Row {
        mean_dd: dd_of_rational(&mean),
        rstd_dd: dd_div_sqrt(&Rational::from_integer(1.into()), &q),
        a_k_dd: dd_of_rational(&a_k),
        c_dd: dd_of_rational(&c),
        mean,
        q,
        a_k,
        c,
    })
}

/// Move the buckets' sums into `acc` (`s1`, `s2`, `sd`, `sdx`), exactly.
fn flush(bk: &mut F32Buckets, acc: &mut [SuperAcc; 4]) {
    let [s1, s2, sd, sdx] = acc;
    bk.flush(s1, s2, sd, sdx);
}

/// `(Σ w·dy, Σ w·dy·x)` of a row exactly, for any f64 data: the row's cells as `(cell,
/// parameter)`.
fn row_dy_sums(
    cells: impl Iterator<Item = (usize, usize)>,
    x: &[f64],
    dy: &[f64],
    w: Weights,
) -> (Dyadic, Dyadic) {
    let (mut a, mut gx) = (SuperAcc::new(), SuperAcc::new());
    for (i, p) in cells {
        let wd = w.dd(p);
        // w·dy and w·dy·x exactly: each part of w times dy is an exact two-product.
        for part in [wd.hi, wd.lo] {
            if part == 0.0 {
                continue;
            }
            a.add_product(part, dy[i]);
            let (pr, e) = two_prod(part, dy[i]);
            gx.add_product(pr, x[i]);
            if e != 0.0 {
                gx.add_product(e, x[i]);
            }
        }
    }
    (a.to_dyadic(), gx.to_dyadic())
}

/// `a·b = p + e` exactly (inputs in range: no underflow or overflow).
#[inline]
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    <Portable as Prod>::two_prod(a, b)
}

/// Step 3: `y` (forward) or `dx` (backward) of every cell, rows in parallel, scattered into
/// the layout's flat order (rows that are contiguous runs written in place).
#[allow(clippy::too_many_arguments)]
fn cells(
    g: &Grouping,
    rows: &[Row],
    x: &[f64],
    dy: Option<&[f64]>,
    w: Weights,
    f: FloatFormat,
    fallbacks: &AtomicU64,
) -> Vec<f64> {
    let param = g.param_of();
    let groups = g.groups();
    let mut out = vec![0.0; x.len()];
    // Rows of one length, each a contiguous run in order (layout `last`): in place.
    let k = groups.first().map_or(0, |c| c.len());
    let contiguous = k > 0
        && groups.len() * k == x.len()
        && groups
            .iter()
            .enumerate()
            .all(|(r, c)| c[0] == r * k && c[k - 1] == r * k + k - 1);
    let run_row = |cells: &[usize], r: &Row, buf: &mut [f64]| {
        let undecided = row_best(cells, param, r, x, dy, w, f, buf);
        for j in undecided {
            fallbacks.fetch_add(1, Ordering::Relaxed);
            let i = cells[j];
            buf[j] = exact_cell(r, x[i], dy.map(|d| d[i]), w, param[i], f);
        }
    };
    // ... and every cell's parameter its position in the row (layout `last`): the block
    // kernel, over the row's contiguous slices with the weights as arrays.
    let positional =
        contiguous && g.n_params() == k && param.iter().enumerate().all(|(i, &p)| p == i % k);
    if positional {
        let wts = row_weights(w, k);
        out.par_chunks_mut(k)
            .zip(groups.par_iter().zip(rows.par_iter()))
            .enumerate()
            .for_each_init(
                || (Scratch::default(), Vec::new()),
                |(scratch, undecided), (ri, (buf, (cells, r)))| {
                    let span = ri * k..(ri + 1) * k;
                    undecided.clear();
                    block_best(
                        &x[span.clone()],
                        dy.map(|d| &d[span.clone()]),
                        &wts,
                        &r.dd(),
                        f,
                        buf,
                        scratch,
                        undecided,
                    );
                    for &j in undecided.iter() {
                        fallbacks.fetch_add(1, Ordering::Relaxed);
                        let i = cells[j];
                        buf[j] = exact_cell(r, x[i], dy.map(|d| d[i]), w, param[i], f);
                    }
                },
            );
    } else if contiguous {
        out.par_chunks_mut(k)
            .zip(groups.par_iter().zip(rows.par_iter()))
            .for_each(|(buf, (cells, r))| run_row(cells, r, buf));
    } else {
        let per_row: Vec<Vec<f64>> = groups
            .par_iter()
            .zip(rows.par_iter())
            .map(|(cells, r)| {
                let mut buf = vec![0.0; cells.len()];
                run_row(cells, r, &mut buf);
                buf
            })
            .collect();
        for (cells, vals) in groups.iter().zip(per_row) {
            for (&i, v) in cells.iter().zip(vals) {
                out[i] = v;
            }
        }
    }
    out
}

/// [`row_values`] with FMA where the CPU has it (bit-identical: the exact products are the
/// same either way).
#[allow(clippy::too_many_arguments)]
fn row_best(
    cells: &[usize],
    param: &[usize],
    r: &Row,
    x: &[f64],
    dy: Option<&[f64]>,
    w: Weights,
    f: FloatFormat,
    out: &mut [f64],
) -> Vec<usize> {
    #[cfg(target_arch = "x86_64")]
    if super::eval::use_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time by use_fma).
        return unsafe { row_fma(cells, param, r, x, dy, w, f, out) };
    }
    row_values::<Portable>(cells, param, r, x, dy, w, f, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn row_fma(
    cells: &[usize],
    param: &[usize],
    r: &Row,
    x: &[f64],
    dy: Option<&[f64]>,
    w: Weights,
    f: FloatFormat,
    out: &mut [f64],
) -> Vec<usize> {
    row_values::<Fused>(cells, param, r, x, dy, w, f, out)
}

/// One row's cell outputs into `out` (in the row's cell order), in double-double with the
/// bound of the module docs; returns the positions the interval did not decide.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn row_values<P: Prod>(
    cells: &[usize],
    param: &[usize],
    r: &Row,
    x: &[f64],
    dy: Option<&[f64]>,
    w: Weights,
    f: FloatFormat,
    out: &mut [f64],
) -> Vec<usize> {
    let mut undecided = Vec::new();
    for (j, &i) in cells.iter().enumerate() {
        let p = param[i];
        let b = w.beta.map_or(0.0, |b| b[p]);
        let (v, err) = cell_dd::<P>(r, x[i], dy.map(|d| d[i]), w.dd(p), b);
        match decide(v, err, f) {
            Some(y) => out[j] = y,
            None => undecided.push(j),
        }
    }
    undecided
}

/// One cell output in double-double and a bound on its absolute error (module docs, step 3):
/// `y = b + w·(x − mean)·rstd` (forward, `dy = None`) or `dx = (w·dy − A/K − (x − mean)·C)·rstd`.
#[inline(always)]
fn cell_dd<P: Prod>(r: &Row, x: f64, dy: Option<f64>, wd: DD, b: f64) -> (DD, f64) {
    // 2^-94 of the magnitudes, and an absolute floor.
    const REL: f64 = 5.048709793414476e-29;
    const FLOOR: f64 = 9.332636185032189e-302;
    let rstd_abs = r.rstd_dd.hi.abs();
    let mean_abs = r.mean_dd.hi.abs();
    let d = DD::from_f64(x) + -r.mean_dd;
    match dy {
        None => {
            let v = d.mul_by::<P>(wd).mul_by::<P>(r.rstd_dd).add_f64(b);
            let err = (wd.hi.abs() * (x.abs() + mean_abs) * rstd_abs + b.abs()) * REL + FLOOR;
            (v, err)
        }
        Some(dy) => {
            let t = wd.mul_f64_by::<P>(dy) + -r.a_k_dd + (-d.mul_by::<P>(r.c_dd));
            let v = t.mul_by::<P>(r.rstd_dd);
            let mag =
                wd.hi.abs() * dy.abs() + r.a_k_dd.hi.abs() + (x.abs() + mean_abs) * r.c_dd.hi.abs();
            (v, mag * rstd_abs * REL + FLOOR)
        }
    }
}

/// One cell output by the exact path: `y = b + (w·(x − mean)/q)·sqrt(q)`,
/// `dx = ((w·dy − A/K − (x − mean)·C)/q)·sqrt(q)`.
fn exact_cell(r: &Row, x: f64, dy: Option<f64>, w: Weights, p: usize, f: FloatFormat) -> f64 {
    round_q(&cell_exact(r, x, dy, w, p), f)
}

/// [`exact_cell`]'s exact value.
pub(super) fn cell_exact(r: &Row, x: f64, dy: Option<f64>, w: Weights, p: usize) -> QSqrt {
    let d = rat(x) - &r.mean;
    match dy {
        None => {
            let b = w.beta.map_or(Rational::zero(), |b| rat(b[p]));
            QSqrt::new(b, w.exact(p) * d / &r.q, r.q.clone())
        }
        Some(dy) => {
            let t = w.exact(p) * rat(dy) - &r.a_k - d * &r.c;
            QSqrt::new(Rational::zero(), t / &r.q, r.q.clone())
        }
    }
}

/// Step 4: `dbeta_p = Σ dy` over the cells of parameter `p`, exactly, rounded to `f`.
fn dbeta(g: &Grouping, dy: &[f64], f: FloatFormat) -> Vec<f64> {
    dbeta_exact(g, dy)
        .into_iter()
        .map(|v| round_q(&QSqrt::rational(v), f))
        .collect()
}

/// `dbeta_p = Σ dy` over the cells of parameter `p`, exactly.
fn dbeta_exact(g: &Grouping, dy: &[f64]) -> Vec<Rational> {
    g.cells_of_params()
        .par_iter()
        .map(|cells| {
            let mut a = SuperAcc::new();
            for &i in cells {
                a.add(dy[i]);
            }
            a.to_rational()
        })
        .collect()
}

/// One parameter's running `dgamma` sum: its double-double, the magnitudes bounding its
/// error and the number of terms.
#[derive(Clone, Copy, Default)]
struct Partial {
    sum: DD,
    mag: f64,
    n: usize,
}

/// Step 4: `dgamma_p = Σ_r Σ_{cells of p in row r} dy·(x − mean_r)/sqrt(q_r)`.
fn dgamma(
    g: &Grouping,
    rows: &[Row],
    x: &[f64],
    dy: &[f64],
    f: FloatFormat,
    fallbacks: &AtomicU64,
) -> Vec<f64> {
    dgamma_sums(g, rows, x, dy)
        .par_iter()
        .enumerate()
        .map(|(p, &(sum, err))| {
            decide(sum, err, f).unwrap_or_else(|| {
                fallbacks.fetch_add(1, Ordering::Relaxed);
                dgamma_roots(g, rows, x, dy, p).round(f).to_f64()
            })
        })
        .collect()
}

/// Every `dgamma_p` in double-double with the bound of the module docs (step 4).
fn dgamma_sums(g: &Grouping, rows: &[Row], x: &[f64], dy: &[f64]) -> Vec<(DD, f64)> {
    let param = g.param_of();
    let n_params = g.n_params();
    const ROWS_PER_ITEM: usize = 64;
    let groups = g.groups();
    let parts: Vec<Vec<Partial>> = groups
        .par_chunks(ROWS_PER_ITEM)
        .zip(rows.par_chunks(ROWS_PER_ITEM))
        .map(|(gs, rs)| {
            let mut acc = vec![Partial::default(); n_params];
            for (cells, r) in gs.iter().zip(rs) {
                let rstd_abs = r.rstd_dd.hi.abs();
                let mean_abs = r.mean_dd.hi.abs();
                for &i in cells {
                    let d = DD::from_f64(x[i]) + (-r.mean_dd);
                    let t = (d * DD::from_f64(dy[i])) * r.rstd_dd;
                    let a = &mut acc[param[i]];
                    a.sum = a.sum + t;
                    a.mag += dy[i].abs() * (x[i].abs() + mean_abs) * rstd_abs;
                    a.n += 1;
                }
            }
            acc
        })
        .collect();
    let mut total = vec![Partial::default(); n_params];
    for part in parts {
        for (t, p) in total.iter_mut().zip(part) {
            t.sum = t.sum + p.sum;
            t.mag += p.mag;
            t.n += p.n;
        }
    }
    total
        .iter()
        .map(|t| {
            // (n + 64)·2^-98 of the magnitudes (the f64 sum of magnitudes is itself within
            // n·2^-53 of the exact one: the margin covers it), and an absolute floor.
            let err = (t.n as f64 + 64.0) * 3.155443620884047e-30 * t.mag * (1.0 + 1e-10)
                + 9.332636185032189e-302;
            (t.sum, err)
        })
        .collect()
}

/// `dgamma_p` exactly: per row `E = Σ dy·(x − mean_r)` over the row's cells of `p`, the sum
/// of roots `Σ (E/q_r)·sqrt(q_r)`.
fn dgamma_roots(g: &Grouping, rows: &[Row], x: &[f64], dy: &[f64], p: usize) -> SumOfRoots {
    let param = g.param_of();
    let mut terms = Vec::new();
    for (cells, r) in g.groups().iter().zip(rows) {
        let mut e = Rational::zero();
        let mut any = false;
        for &i in cells.iter().filter(|&&i| param[i] == p) {
            e += rat(dy[i]) * (rat(x[i]) - &r.mean);
            any = true;
        }
        if any && !e.is_zero() {
            terms.push((e / &r.q, r.q.clone()));
        }
    }
    SumOfRoots::from_terms(Rational::zero(), terms)
}

/// A statistic (`mean`, `rstd`, `dbeta`) in double-double, within `2^-104` relative of its
/// exact value, with a bound on its absolute error: `2^-100` of its magnitude, and `2^-1000`.
pub fn stat_approx(v: DD) -> (DD, f64) {
    (
        v,
        v.hi.abs() * 7.888609052210118e-31 + 9.332636185032189e-302,
    )
}

/// A large family case prepared for judging (`judge::family`), as [`super::cells::FastCells`]
/// is for batch_norm: the exact per-row constants (steps 1–2), from which every cell output is
/// had in double-double with its error bound ([`FamilyCells::approx`]) or exactly
/// ([`FamilyCells::exact`]), and `dgamma` in double-double with its bound (step 4) or as the
/// exact sum of roots. Nothing per element is stored beyond the inputs and the row index.
pub struct FamilyCells {
    case: FamilyCase,
    grouping: Grouping,
    rows: Vec<Row>,
    row_of: Vec<u32>,
    dgamma: Vec<(DD, f64)>,
}

impl std::fmt::Debug for FamilyCells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FamilyCells")
            .field("op", &self.case.op)
            .field("shape", &self.case.shape)
            .field("rows", &self.rows.len())
            .finish()
    }
}

impl FamilyCells {
    /// The constants of `case` (its `eps` the f64's exact value); `None` where the fast path
    /// declines (module docs: inputs out of range, `q ≤ 0`, an invalid case, more than 2^32
    /// rows).
    pub fn new(case: &FamilyCase) -> Option<FamilyCells> {
        let grouping = case.validate().ok()?;
        let eps = f64_to_rational(case.eps)?;
        let x = case.inputs.get("x")?;
        let dy = case.inputs.get("dy").map(|v| v.as_slice());
        for name in ["x", "dy", "gamma", "beta"] {
            if !case.inputs.get(name).is_none_or(|v| in_range(v)) {
                return None;
            }
        }
        if grouping.groups().len() > u32::MAX as usize {
            return None;
        }
        let cells = FamilyCells {
            case: case.clone(),
            grouping,
            rows: vec![],
            row_of: vec![],
            dgamma: vec![],
        };
        let rows = row_constants(
            &cells.grouping,
            x,
            dy,
            cells.weights(),
            case.op.centered(),
            &eps,
        )?;
        let mut row_of = vec![0u32; x.len()];
        for (r, group) in cells.grouping.groups().iter().enumerate() {
            for &i in group {
                row_of[i] = r as u32;
            }
        }
        let dgamma = match dy {
            Some(dy) if case.affine.has_weight() => dgamma_sums(&cells.grouping, &rows, x, dy),
            _ => vec![],
        };
        Some(FamilyCells {
            rows,
            row_of,
            dgamma,
            ..cells
        })
    }

    fn weights(&self) -> Weights<'_> {
        let get = |n: &str| self.case.inputs.get(n).map(|v| v.as_slice());
        Weights {
            gamma: get("gamma"),
            offset: self.case.convention == RmsConvention::Offset,
            beta: get("beta"),
        }
    }

    /// The cell output: `y` (forward) or `dx` (backward).
    pub fn output(&self) -> &'static str {
        if self.case.op.is_backward() {
            "dx"
        } else {
            "y"
        }
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.row_of.len()
    }

    /// Whether there are no cells.
    pub fn is_empty(&self) -> bool {
        self.row_of.is_empty()
    }

    fn at(&self, i: usize) -> (&Row, f64, Option<f64>, usize) {
        let x = self.case.inputs["x"][i];
        let dy = self.case.inputs.get("dy").map(|d| d[i]);
        let p = self.grouping.param_of()[i];
        (&self.rows[self.row_of[i] as usize], x, dy, p)
    }

    /// The cell output at flat position `i` in double-double with a bound on its absolute
    /// error (module docs, step 3).
    pub fn approx(&self, i: usize) -> (DD, f64) {
        let (r, x, dy, p) = self.at(i);
        let w = self.weights();
        let b = if dy.is_none() {
            w.beta.map_or(0.0, |b| b[p])
        } else {
            0.0
        };
        cell_dd::<Portable>(r, x, dy, w.dd(p), b)
    }

    /// The cell output at flat position `i`, exactly.
    pub fn exact(&self, i: usize) -> QSqrt {
        let (r, x, dy, p) = self.at(i);
        cell_exact(r, x, dy, self.weights(), p)
    }

    /// `dgamma` (a backward with a weight; else empty): per parameter, its double-double and
    /// the bound on its absolute error.
    pub fn dgamma_approx(&self) -> &[(DD, f64)] {
        &self.dgamma
    }

    /// [`FamilyCells::small_outputs`] in double-double, each with a bound on its absolute
    /// error (`2^-100` of its magnitude: `mean`, `rstd`, `dbeta` are within `2^-104` relative).
    pub fn small_approx(&self) -> BTreeMap<&'static str, Vec<(DD, f64)>> {
        let with_err = stat_approx;
        let mut out = BTreeMap::new();
        match self.case.inputs.get("dy") {
            None => {
                if self.case.op.centered() {
                    out.insert(
                        "mean",
                        self.rows.iter().map(|r| with_err(r.mean_dd)).collect(),
                    );
                }
                let rstd = self.rows.iter().map(|r| with_err(r.rstd_dd)).collect();
                out.insert("rstd", rstd);
            }
            Some(dy) => {
                if self.case.affine.has_bias() {
                    let v = dbeta_exact(&self.grouping, dy);
                    out.insert(
                        "dbeta",
                        v.iter().map(|r| with_err(dd_of_rational(r))).collect(),
                    );
                }
            }
        }
        out
    }

    /// Number of rows (groups).
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// `dgamma_p` correctly rounded to f64 (the exact sum only where the double-double's
    /// bound does not decide it).
    pub fn dgamma_f64(&self, p: usize) -> f64 {
        let (sum, err) = self.dgamma[p];
        decide(sum, err, FloatFormat::F64)
            .unwrap_or_else(|| self.dgamma_exact(p).round(FloatFormat::F64).to_f64())
    }

    /// `dgamma_p` exactly, a sum of roots over the rows.
    pub fn dgamma_exact(&self, p: usize) -> SumOfRoots {
        let x = &self.case.inputs["x"];
        let dy = &self.case.inputs["dy"];
        dgamma_roots(&self.grouping, &self.rows, x, dy, p)
    }

    /// The per-row and per-parameter outputs that are elements of Q(sqrt(q)), exactly:
    /// `mean` (centred ops) and `rstd` of a forward, `dbeta` of a backward with a bias.
    pub fn small_outputs(&self) -> BTreeMap<&'static str, Vec<QSqrt>> {
        let mut out = BTreeMap::new();
        match self.case.inputs.get("dy") {
            None => {
                if self.case.op.centered() {
                    let m = self.rows.iter().map(|r| QSqrt::rational(r.mean.clone()));
                    out.insert("mean", m.collect());
                }
                out.insert("rstd", self.rows.iter().map(|r| rstd_exact(&r.q)).collect());
            }
            Some(dy) => {
                if self.case.affine.has_bias() {
                    let v = dbeta_exact(&self.grouping, dy);
                    out.insert("dbeta", v.into_iter().map(QSqrt::rational).collect());
                }
            }
        }
        out
    }
}
