//! A layout-`last` family case (layer_norm, rms_norm: row `r` is cells `r·K … r·K + K − 1`,
//! cell `r·K + j` uses parameter `j`) one row at a time, for a judge that walks a kernel's
//! outputs once (`judge::family_rows`) instead of holding every cell's golden and budget:
//! each row's exact constants ([`LastRow`]: steps 1–2 of [`super::family`], as its `last`
//! path forms them), its cells in double-double with their bounds (the values
//! [`FamilyCells::approx`](super::family::FamilyCells::approx) gives, bit for bit) or
//! exactly, and `dgamma`, `dbeta` summed over chunks of [`LAST_CHUNK_ROWS`] rows
//! ([`LastSums`]: the double-doubles of the generic path, the exact `dbeta`).

use super::acc::SuperAcc;
use super::dd::{dd_of_rational, DD};
use super::family::{
    cell_exact, dgamma_roots_last, in_range, last_row_len, rat, row_weights, rstd_exact,
    stat_approx, LastRowCtx, Row, Weights, ROWS_PER_ITEM,
};
use super::family_rows::{
    decide, row_dd_best, DbetaPart, DgammaPart, RowBuckets, RowWeights, Scratch,
};
use crate::par::*;
use bnconf_impl::family::{FamilyCase, RmsConvention};
use bnconf_spec::exact::roots::SumOfRoots;
use bnconf_spec::exact::round::f64_to_rational;
use bnconf_spec::exact::{QSqrt, Rational};

/// Rows per chunk of [`LastSums`] (the generic path's partial sums of `dgamma`: the same
/// double-doubles only over the same chunks, rows `c·64 … c·64 + 63`).
pub const LAST_CHUNK_ROWS: usize = ROWS_PER_ITEM;

/// A layout-`last` case's inputs as its rows are read.
pub struct LastRows<'a> {
    x: &'a [f64],
    dy: Option<&'a [f64]>,
    rc: LastRowCtx<'a>,
    wts: RowWeights,
    k: usize,
    dgamma: bool,
    dbeta: bool,
}

/// One row's exact constants.
pub struct LastRow(Row);

/// Per-thread scratch of [`LastRows`].
#[derive(Default)]
pub struct LastScratch {
    bk: RowBuckets,
    s: Scratch,
}

/// `dgamma` and `dbeta` summed over some rows (a chunk of [`LAST_CHUNK_ROWS`], then chunks
/// merged in order).
pub struct LastSums {
    dgamma: Option<DgammaPart>,
    dbeta: Option<DbetaPart>,
}

impl<'a> LastRows<'a> {
    /// The rows of `case` where the fast path takes it: layout `last`, a valid case, `eps`
    /// finite, `gamma` and `beta` within `[2^-400, 2^400]` in magnitude (or 0); `None`
    /// otherwise. A row's own inputs are checked when it is read ([`LastRows::row`]).
    pub fn new(case: &'a FamilyCase) -> Option<Self> {
        let k = last_row_len(case)?;
        let eps = f64_to_rational(case.eps)?;
        let get = |n: &str| case.inputs.get(n).map(|v| v.as_slice());
        let (gamma, beta) = (get("gamma"), get("beta"));
        if !gamma.is_none_or(in_range) || !beta.is_none_or(in_range) {
            return None;
        }
        let w = Weights {
            gamma,
            offset: case.convention == RmsConvention::Offset,
            beta,
        };
        let dy = get("dy");
        Some(LastRows {
            x: get("x")?,
            dy,
            rc: LastRowCtx::new(w, k, case.op.centered(), eps),
            wts: row_weights(w, k),
            k,
            dgamma: dy.is_some() && case.affine.has_weight(),
            dbeta: dy.is_some() && case.affine.has_bias(),
        })
    }

    /// Cells per row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.x.len() / self.k
    }

    /// Row `r`'s exact constants; `None` where the fast path declines the row (an input
    /// outside `[2^-400, 2^400]` in magnitude and not 0, or `q ≤ 0`).
    pub fn row(&self, r: usize, s: &mut LastScratch) -> Option<LastRow> {
        let k = self.k;
        let xr = &self.x[r * k..(r + 1) * k];
        let dr = self.dy.map(|d| &d[r * k..(r + 1) * k]);
        self.rc.row(xr, dr, &mut s.bk).map(LastRow)
    }

    /// Every row's constants, rows in parallel (`None` as [`LastRows::row`]).
    pub fn all_rows(&self) -> Option<Vec<LastRow>> {
        (0..self.rows())
            .into_par_iter()
            .map(|r| self.row(r, &mut LastScratch::default()))
            .collect()
    }

    /// Row `r`'s cells (`y` or `dx`) in double-double, each with a bound on its absolute
    /// error: `(leading parts, trailing parts, bounds)`, in `s` until its next use.
    pub fn cells_dd<'s>(
        &self,
        r: usize,
        row: &LastRow,
        s: &'s mut LastScratch,
    ) -> (&'s [f64], &'s [f64], &'s [f64]) {
        let k = self.k;
        let xr = &self.x[r * k..(r + 1) * k];
        let dr = self.dy.map(|d| &d[r * k..(r + 1) * k]);
        row_dd_best(xr, dr, &self.wts, &row.0.dd(), &mut s.s);
        s.s.dd()
    }

    /// Cell `j` of row `r` exactly.
    pub fn cell_exact(&self, r: usize, row: &LastRow, j: usize) -> QSqrt {
        let i = r * self.k + j;
        cell_exact(&row.0, self.x[i], self.dy.map(|d| d[i]), self.rc.w, j)
    }

    /// Zero sums of `dgamma` (a backward with a weight) and `dbeta` (with a bias).
    pub fn new_sums(&self) -> LastSums {
        LastSums {
            dgamma: self.dgamma.then(|| DgammaPart::new(self.k)),
            dbeta: self.dbeta.then(|| DbetaPart::new(self.k)),
        }
    }

    /// Add row `r` (the next row of the chunk) to `sums`.
    pub fn add_row(&self, sums: &mut LastSums, r: usize, row: &LastRow) {
        let Some(dy) = self.dy else { return };
        let k = self.k;
        let (xr, dr) = (&self.x[r * k..(r + 1) * k], &dy[r * k..(r + 1) * k]);
        if let Some(dg) = &mut sums.dgamma {
            let rd = row.0.dd();
            dg.add_row(xr, dr, rd.mean, rd.rstd);
        }
        if let Some(db) = &mut sums.dbeta {
            db.add_row(dr);
        }
    }

    /// `dgamma_p` exactly, a sum of roots over the rows (`rows`: every row's constants).
    pub fn dgamma_exact(&self, rows: &[LastRow], p: usize) -> SumOfRoots {
        let rows: Vec<&Row> = rows.iter().map(|r| &r.0).collect();
        dgamma_roots_last(&rows, self.x, self.dy.unwrap_or(&[]), self.k, p)
    }

    /// Every `dbeta_p` exactly from the sums of every row (a column whose f64 sum was not
    /// exact summed again exactly).
    pub fn dbeta_exact(&self, sums: &LastSums) -> Vec<Rational> {
        let (Some(db), Some(dy)) = (&sums.dbeta, self.dy) else {
            return vec![];
        };
        (0..self.k)
            .into_par_iter()
            .map(|p| {
                if db.inexact[p] == 0.0 {
                    rat(db.sum[p])
                } else {
                    let mut a = SuperAcc::new();
                    for v in dy.iter().skip(p).step_by(self.k) {
                        a.add(*v);
                    }
                    a.to_rational()
                }
            })
            .collect()
    }
}

impl LastRow {
    /// `mean` (0 for rms_norm) and `rstd` in double-double (within 2^-104 relative).
    pub fn stats_dd(&self) -> (DD, DD) {
        (self.0.mean_dd, self.0.rstd_dd)
    }

    /// `mean` exactly.
    pub fn mean_exact(&self) -> QSqrt {
        QSqrt::rational(self.0.mean.clone())
    }

    /// `rstd = 1/sqrt(q)` exactly.
    pub fn rstd_exact(&self) -> QSqrt {
        rstd_exact(&self.0.q)
    }
}

impl LastSums {
    /// Add the sums of the rows after these (the next chunk).
    pub fn merge(&mut self, o: &LastSums) {
        if let (Some(a), Some(b)) = (&mut self.dgamma, &o.dgamma) {
            a.merge(b);
        }
        if let (Some(a), Some(b)) = (&mut self.dbeta, &o.dbeta) {
            a.merge(b);
        }
    }

    /// Every `dgamma_p` in double-double with the bound on its absolute error of the generic
    /// path (`(n + 64)·2^-98` of the terms' magnitudes, and `2^-1000`); empty without one.
    pub fn dgamma_approx(&self) -> Vec<(DD, f64)> {
        let Some(t) = &self.dgamma else {
            return vec![];
        };
        (0..t.hi.len())
            .map(|p| {
                let err = (t.n as f64 + 64.0) * 3.155443620884047e-30 * t.mag[p] * (1.0 + 1e-10)
                    + 9.332636185032189e-302;
                (
                    DD {
                        hi: t.hi[p],
                        lo: t.lo[p],
                    },
                    err,
                )
            })
            .collect()
    }
}

/// `dbeta_p` as a double-double with its bound, as `FamilyCells::small_approx` gives it.
pub fn dbeta_approx(exact: &Rational) -> (DD, f64) {
    stat_approx(dd_of_rational(exact))
}

/// The correctly rounded value (as f64) in `f` of every number within `err` of `v`, where they
/// all round to one.
pub fn decided(v: DD, err: f64, f: bnconf_spec::exact::round::FloatFormat) -> Option<f64> {
    decide(v, err, f)
}

thread_local! {
    /// Each thread's buckets for [`square_sums`] (made once: they are 40 KB).
    static BUCKETS: std::cell::RefCell<RowBuckets> = std::cell::RefCell::new(RowBuckets::default());
}

/// `(Σx, Σx²)` of a group's cells exactly: float32 data of 64 cells or more as integer
/// mantissa sums per exponent (as a row's sums are formed), other data in superaccumulators.
pub fn square_sums(x: &[f64]) -> (Rational, Rational) {
    if x.len() >= 64 && x.iter().all(|&v| (v as f32) as f64 == v) {
        let acc = BUCKETS.with(|b| b.borrow_mut().row_sums(x, None));
        return (acc.s1.to_rational(), acc.s2.to_rational());
    }
    let (mut s1, mut s2) = (SuperAcc::new(), SuperAcc::new());
    for &v in x {
        s1.add(v);
        s2.add_product(v, v);
    }
    (s1.to_rational(), s2.to_rational())
}
