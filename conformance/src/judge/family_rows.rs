//! Judging a large layout-`last` family case (layer_norm, rms_norm) in one pass over its rows,
//! as the BatchNorm judge does its channels: per row, its exact constants, its budgets
//! (`precision::family_budget`'s per-group terms) and every cell's ratio, formed together
//! while the row is in cache and folded into each output's worst element, count over the
//! gate and largest allowed error; nothing per cell is kept. The result is
//! [`FamilyPrepared::judge`](super::family::FamilyPrepared::judge)'s, bit for bit: the same
//! budgets, the same double-doubles and bounds, the same exact fallbacks (tested equal).

use super::family::{fast_ratio, fast_ratio_of_total, output_result, FAMILY_FAST_MIN_LEN};
use super::verdict::{allowed_rel_of, CaseResult, OutputResult, Verdict};
use crate::fast::dd::DD;
use crate::fast::family::stat_approx;
use crate::fast::family_last::{
    dbeta_approx, decided, LastRow, LastRows, LastScratch, LastSums, LAST_CHUNK_ROWS,
};
use crate::par::*;
use crate::precision::budget::{underflow, ElementBudget};
use crate::precision::family_budget::{
    add_parts, backward_group, element_ratio_roots, forward_group, gates, nan_to_inf, GroupCtx,
};
use crate::suite::family::{format_of, spec_norm, FamilySuiteCase};
use bnconf_impl::family::Named;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::exact::QSqrt;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Chunks of [`LAST_CHUNK_ROWS`] rows judged in parallel before their sums are added in
/// order, per worker thread.
const CHUNKS_PER_THREAD: usize = 2;

/// Parameters whose sums of the rows' budget terms one work item adds.
const PARAMS_PER_ITEM: usize = 512;

/// An output's elements folded in order: the first worst element (NaN counted infinite), the
/// count over the gate, the largest error the gate allows.
#[derive(Clone, Copy)]
struct Fold {
    worst: usize,
    key: f64,
    budget: ElementBudget,
    n_over: usize,
    allowed: f64,
}

impl Fold {
    const EMPTY: Fold = Fold {
        worst: 0,
        key: f64::NEG_INFINITY,
        budget: ElementBudget {
            cond: 0.0,
            mag: 0.0,
            mag2: 0.0,
        },
        n_over: 0,
        allowed: 0.0,
    };

    /// Element `i`: its ratio, budget and the budget's total (`b.total(u)`).
    #[inline(always)]
    fn push(&mut self, i: usize, ratio: f64, b: &ElementBudget, total: f64, k: f64, u: f64) {
        let key = if ratio.is_nan() { f64::INFINITY } else { ratio };
        if key > self.key {
            (self.worst, self.key, self.budget) = (i, key, *b);
        }
        self.n_over += (key > k) as usize;
        self.allowed = crate::precision::budget::max_not_nan(self.allowed, k * u * total);
    }

    /// Fold the elements after these.
    fn merge(&mut self, o: &Fold) {
        if o.key > self.key {
            (self.worst, self.key, self.budget) = (o.worst, o.key, o.budget);
        }
        self.n_over += o.n_over;
        self.allowed = self.allowed.max(o.allowed);
    }
}

/// What one chunk of rows gives.
struct ChunkOut {
    cells: Fold,
    /// Forward: per row, the ratio and budget of `mean` and of `rstd` (when returned).
    mean: Vec<(f64, ElementBudget)>,
    rstd: Vec<(f64, ElementBudget)>,
    /// Backward: the chunk's sums of `dgamma` and `dbeta`, and per row its budgets' terms.
    sums: LastSums,
    parts: Vec<Vec<(usize, [f64; 4])>>,
}

/// Judge a kernel's outputs of `sc` in one pass over its rows, where the case is one
/// [`FamilyPrepared`](super::family::FamilyPrepared) judges through its fast cells and of
/// layout `last`, and `computed` has every required output of the case, each of its length,
/// and no other; `None` otherwise (and where a row's inputs leave the fast path or a budget
/// cannot be formed): the caller prepares the case.
pub fn judge_last(
    sc: &FamilySuiteCase,
    computed: &BTreeMap<String, Vec<f64>>,
) -> Option<CaseResult> {
    let c = &sc.case;
    let n = c.inputs.get("x")?.len();
    if n < FAMILY_FAST_MIN_LEN {
        return None;
    }
    let lr = LastRows::new(c)?;
    let (k, rows) = (lr.k(), lr.rows());
    let backward = c.op.is_backward();
    let cell = if backward { "dx" } else { "y" };
    // The case's outputs and their lengths; the optional ones may be absent.
    let mut expected: Vec<(&'static str, usize)> = vec![(cell, n)];
    if backward {
        if c.affine.has_weight() {
            expected.push(("dgamma", k));
        }
        if c.affine.has_bias() {
            expected.push(("dbeta", k));
        }
    } else {
        if c.op.centered() {
            expected.push(("mean", rows));
        }
        expected.push(("rstd", rows));
    }
    let optional = c.op.optional_outputs();
    let fits = computed
        .iter()
        .all(|(name, v)| expected.iter().any(|&(e, len)| e == name && len == v.len()))
        && expected
            .iter()
            .all(|(e, _)| optional.contains(e) || computed.contains_key(*e));
    if !fits {
        return None;
    }
    let norm = spec_norm(c).ok()?;
    let eps_q = f64_to_rational(c.eps)?;
    let get = |name: &str| c.inputs.get(name).map(|v| v.as_slice());
    let ctx = GroupCtx::new(&norm, get("gamma"), get("beta"), c.eps, &eps_q);
    let (k_cells, k_params) = gates(k, rows);
    let u_of = |name: &str| format_of(c.dtype_of(name)).unit_roundoff();
    let u = u_of(cell);
    let und = underflow(u) / u;
    let vals = computed[cell].as_slice();
    let want_mean = computed.get("mean").map(Vec::as_slice);
    let want_rstd = computed.get("rstd").map(Vec::as_slice);
    let (u_mean, u_rstd) = (u_of("mean"), u_of("rstd"));
    let x = c.inputs["x"].as_slice();
    let dy = get("dy");

    let chunk = |ci: usize| -> Option<ChunkOut> {
        let mut s = LastScratch::default();
        let mut out = ChunkOut {
            cells: Fold::EMPTY,
            mean: vec![],
            rstd: vec![],
            sums: lr.new_sums(),
            parts: vec![],
        };
        for r in ci * LAST_CHUNK_ROWS..((ci + 1) * LAST_CHUNK_ROWS).min(rows) {
            let row = lr.row(r, &mut s)?;
            let xr = &x[r * k..(r + 1) * k];
            let budgets = match dy {
                None => {
                    let fg = forward_group(&ctx, r, xr, |j| j).ok()?;
                    let (mean, rstd) = row.stats_dd();
                    if let Some(v) = want_mean {
                        let ratio = fast_ratio(stat_approx(mean), v[r], &fg.mean, u_mean, k_cells)
                            .unwrap_or_else(|| fg.mean.ratio(v[r], &row.mean_exact(), u_mean));
                        out.mean.push((ratio, fg.mean));
                    }
                    if let Some(v) = want_rstd {
                        let ratio = fast_ratio(stat_approx(rstd), v[r], &fg.rstd, u_rstd, k_cells)
                            .unwrap_or_else(|| fg.rstd.ratio(v[r], &row.rstd_exact(), u_rstd));
                        out.rstd.push((ratio, fg.rstd));
                    }
                    fg.y
                }
                Some(dy) => {
                    let dr = &dy[r * k..(r + 1) * k];
                    let bg = backward_group(&ctx, r, xr, dr, |j| j, true).ok()?;
                    lr.add_row(&mut out.sums, r, &row);
                    out.parts.push(bg.parts);
                    bg.dx
                }
            };
            let (vh, vl, err) = lr.cells_dd(r, &row, &mut s);
            let vr = &vals[r * k..(r + 1) * k];
            for j in 0..k {
                let b = &budgets[j];
                let total = b.total_given(u, und);
                let approx = (
                    DD {
                        hi: vh[j],
                        lo: vl[j],
                    },
                    err[j],
                );
                let ratio = fast_ratio_of_total(approx, vr[j], total, u, k_cells)
                    .unwrap_or_else(|| b.ratio(vr[j], &lr.cell_exact(r, &row, j), u));
                out.cells.push(r * k + j, ratio, b, total, k_cells, u);
            }
        }
        Some(out)
    };

    // Chunks in parallel a batch at a time, their results taken in order.
    let n_chunks = rows.div_ceil(LAST_CHUNK_ROWS);
    let batch = (current_num_threads() * CHUNKS_PER_THREAD).max(1);
    let mut cells = Fold::EMPTY;
    let (mut mean, mut rstd) = (vec![], vec![]);
    let mut sums = lr.new_sums();
    let mut dgamma = vec![ElementBudget::default(); k];
    let mut dbeta = vec![ElementBudget::default(); k];
    for start in (0..n_chunks).step_by(batch) {
        let done: Vec<Option<ChunkOut>> = (start..(start + batch).min(n_chunks))
            .into_par_iter()
            .map(chunk)
            .collect();
        let done: Vec<ChunkOut> = done.into_iter().collect::<Option<_>>()?;
        for o in &done {
            cells.merge(&o.cells);
            mean.extend_from_slice(&o.mean);
            rstd.extend_from_slice(&o.rstd);
            sums.merge(&o.sums);
        }
        // The rows' terms of `dgamma` and `dbeta` (row `r`'s term of parameter `p` is
        // `parts[p]`: every cell of a row has its own parameter, its position), added in the
        // rows' order, in parallel over ranges of parameters: each sum in the same order.
        let parts: Vec<&[(usize, [f64; 4])]> = done
            .iter()
            .flat_map(|o| o.parts.iter().map(Vec::as_slice))
            .collect();
        dgamma
            .par_chunks_mut(PARAMS_PER_ITEM)
            .zip(dbeta.par_chunks_mut(PARAMS_PER_ITEM))
            .enumerate()
            .for_each(|(i, (dg, db))| {
                let first = i * PARAMS_PER_ITEM;
                for p in &parts {
                    add_parts(&p[first..first + dg.len()], first, dg, db);
                }
            });
    }
    for b in dgamma.iter_mut().chain(dbeta.iter_mut()) {
        nan_to_inf(b);
    }

    // Every row's constants, only where an exact `dgamma` is needed (each row was read once
    // above: it reads again).
    let all_rows: OnceLock<Vec<LastRow>> = OnceLock::new();
    let rows_exact = || {
        all_rows
            .get_or_init(|| lr.all_rows().expect("every row was read once"))
            .as_slice()
    };
    let row_of = |r: usize| {
        lr.row(r, &mut LastScratch::default())
            .expect("every row was read once")
    };

    let mut outs: Vec<OutputResult> = Vec::new();
    for &(name, len) in &expected {
        let Some(v) = computed.get(name) else {
            continue;
        };
        let v = v.as_slice();
        let out = match name {
            "y" | "dx" => {
                let (r, j) = (cells.worst / k, cells.worst % k);
                let e = lr.cell_exact(r, &row_of(r), j);
                OutputResult {
                    name: name.to_string(),
                    worst_ratio: cells.key,
                    index: cells.worst,
                    expected: e.to_string(),
                    expected_f64: round(&e, FloatFormat::F64).to_f64(),
                    actual: v[cells.worst],
                    budget: cells.budget,
                    n_over: cells.n_over,
                    len,
                    rank: None,
                    allowed_rel: allowed_rel_of(v, cells.allowed),
                }
            }
            "mean" | "rstd" => {
                let per_row = if name == "mean" { &mean } else { &rstd };
                let ratios: Vec<f64> = per_row.iter().map(|p| p.0).collect();
                let budgets: Vec<ElementBudget> = per_row.iter().map(|p| p.1).collect();
                output_result(name, &ratios, v, &budgets, k_cells, u_of(name), |w| {
                    let row = row_of(w);
                    let e = if name == "mean" {
                        row.mean_exact()
                    } else {
                        row.rstd_exact()
                    };
                    (e.to_string(), round(&e, FloatFormat::F64).to_f64())
                })
            }
            "dgamma" => {
                let uu = u_of(name);
                let approx = sums.dgamma_approx();
                let ratios: Vec<f64> = (0..k)
                    .map(|p| {
                        let b = &dgamma[p];
                        fast_ratio(approx[p], v[p], b, uu, k_params).unwrap_or_else(|| {
                            element_ratio_roots(b, v[p], &lr.dgamma_exact(rows_exact(), p), uu)
                        })
                    })
                    .collect();
                output_result(name, &ratios, v, &dgamma, k_params, uu, |w| {
                    if rows <= 16 {
                        let e = lr.dgamma_exact(rows_exact(), w);
                        (e.to_string(), e.round(FloatFormat::F64).to_f64())
                    } else {
                        // as FamilyPrepared reports it: a sum over thousands of rows is long
                        // and slow to build; its correctly rounded f64
                        let (sum, err) = approx[w];
                        let e64 = decided(sum, err, FloatFormat::F64).unwrap_or_else(|| {
                            let e = lr.dgamma_exact(rows_exact(), w);
                            e.round(FloatFormat::F64).to_f64()
                        });
                        let s = format!(
                            "{e64:e} (correctly rounded; exactly a sum of up to {rows} square roots)"
                        );
                        (s, e64)
                    }
                })
            }
            "dbeta" => {
                let uu = u_of(name);
                let exact = lr.dbeta_exact(&sums);
                let ratios: Vec<f64> = (0..k)
                    .into_par_iter()
                    .map(|p| {
                        let b = &dbeta[p];
                        fast_ratio(dbeta_approx(&exact[p]), v[p], b, uu, k_params).unwrap_or_else(
                            || b.ratio(v[p], &QSqrt::rational(exact[p].clone()), uu),
                        )
                    })
                    .collect();
                output_result(name, &ratios, v, &dbeta, k_params, uu, |w| {
                    let e = QSqrt::rational(exact[w].clone());
                    (e.to_string(), round(&e, FloatFormat::F64).to_f64())
                })
            }
            _ => return None,
        };
        outs.push(out);
    }
    outs.sort_by(|a, b| a.name.cmp(&b.name));
    let verdict = if outs.iter().all(|o| o.n_over == 0) {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    Some(CaseResult {
        id: sc.id.clone(),
        op: c.op.name(),
        layout: c.layout.name(),
        dtype: sc.precision,
        level: sc.level,
        class: sc.class.clone(),
        verdict,
        worst_ratio: outs.iter().map(|o| o.worst_ratio).fold(0.0, f64::max),
        k: k_cells,
        outputs: outs,
        computed: None,
    })
}
