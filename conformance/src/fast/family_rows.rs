//! The kernels of the family's fast path ([`super::family`]) for contiguous rows (layout
//! `last`: row `r` is cells `r·K … r·K + K − 1`, cell `r·K + j` uses parameter `j`), each run
//! on one row (or one chunk of rows) held in cache:
//!
//! - [`RowBuckets`]: a row's exact sums `Σx`, `Σx²`, `Σ w·dy`, `Σ w·dy·x` of float32 data as
//!   integer mantissa sums per exponent (one integer add per sum and element, as
//!   [`super::acc::F32Buckets`], with the triple product `w·dy·x` too, in two lanes), moved into
//!   superaccumulators at the end of the row;
//! - [`block_best`]: a row's `y` or `dx` in double-double with its bound, without a branch,
//!   then the decisions (AVX2 + FMA where the CPU has them);
//! - [`DgammaPart`]: the `dgamma` sums of a chunk of rows, per parameter, in the order and
//!   with the arithmetic of the generic path (so the same double-doubles);
//! - [`DbetaPart`]: `dbeta`'s column sums in f64 with every addition checked exact (a column
//!   where one was not is summed again exactly).

use super::acc::{split_f32, SuperAcc};
use super::dd::{Fused, Portable, Prod, DD};
use super::eval::{decide_f32, decide_f64, decides_f32, decides_f64};
use super::round::round_via_f64;
use bnconf_spec::exact::round::FloatFormat;

/// The correctly rounded value (as f64) of `v ± err` in `f`, if the interval decides it.
#[inline]
pub(super) fn decide(v: DD, err: f64, f: FloatFormat) -> Option<f64> {
    match f {
        FloatFormat::F64 => decide_f64(v, err),
        FloatFormat::F32 => decide_f32(v, err).map(|x| x as f64),
        _ => {
            let r = decide_f64(v, err)?;
            round_via_f64(r, f).map(|r| r.to_f64())
        }
    }
}

/// Cells of a row between two flushes of [`RowBuckets`].
const ROW_PIECE: usize = 1 << 15;

/// Integer mantissa sums per exponent of one row of float32 data (up to [`ROW_PIECE`] =
/// 2^15 cells between flushes), in two lanes (even and odd cells, so that runs of one
/// exponent do not wait on each other's adds). With `x = ±mx·2^(ex−150)` (and so for `w`,
/// `dy`; [`split_f32`]): `s1[ex] = Σ ±mx`, `s2[ex] = Σ mx²`, `a[ew + ed] = Σ ±mw·md`,
/// `g[ew + ed + ex] = Σ ±mw·md·mx`. Bounds for 2^15 cells: `|s1| < 2^39`, `s2`, `|a| < 2^63`
/// (i64), `|g| < 2^87` (i128); the two lanes' sum is within the same bounds; all within the
/// superaccumulator's `add_scaled` (`< 2^106`).
pub(super) struct RowBuckets {
    s1: Box<[[i64; 256]; 2]>,
    s2: Box<[[i64; 256]; 2]>,
    a: Box<[[i64; 512]; 2]>,
    g: Box<[[i128; 768]; 2]>,
}

/// A row's exact sums: `Σx`, `Σx²`, and (backward) `Σ w·dy`, `Σ w·dy·x`.
#[derive(Default)]
pub(super) struct RowAccs {
    pub s1: SuperAcc,
    pub s2: SuperAcc,
    pub a: SuperAcc,
    pub g: SuperAcc,
}

impl Default for RowBuckets {
    fn default() -> Self {
        RowBuckets {
            s1: Box::new([[0; 256]; 2]),
            s2: Box::new([[0; 256]; 2]),
            a: Box::new([[0; 512]; 2]),
            g: Box::new([[0; 768]; 2]),
        }
    }
}

impl RowBuckets {
    /// The exact sums of a row of float32 values (`x`; backward `dy` and the weights `w`, all
    /// float32: the caller checks), into fresh accumulators. The buckets are left empty.
    pub(super) fn row_sums(&mut self, x: &[f64], dw: Option<(&[f64], &[f64])>) -> RowAccs {
        let mut acc = RowAccs::default();
        for start in (0..x.len()).step_by(ROW_PIECE) {
            let end = (start + ROW_PIECE).min(x.len());
            let xs = &x[start..end];
            match dw {
                None => {
                    for (j, &v) in xs.iter().enumerate() {
                        let l = j & 1;
                        let (m, e) = split_f32((v as f32).to_bits());
                        self.s1[l][e] += m;
                        self.s2[l][e] += m * m;
                    }
                }
                Some((dy, w)) => {
                    let (dy, w) = (&dy[start..end], &w[start..end]);
                    for (j, ((&v, &d), &wv)) in xs.iter().zip(dy).zip(w).enumerate() {
                        let l = j & 1;
                        let (m, e) = split_f32((v as f32).to_bits());
                        let (md, ed) = split_f32((d as f32).to_bits());
                        let (mw, ew) = split_f32((wv as f32).to_bits());
                        self.s1[l][e] += m;
                        self.s2[l][e] += m * m;
                        let wd = mw * md; // |wd| < 2^48
                        self.a[l][ew + ed] += wd;
                        self.g[l][ew + ed + e] += wd as i128 * m as i128;
                    }
                }
            }
            self.flush(&mut acc, dw.is_some());
        }
        acc
    }

    /// Move the sums into `acc` exactly (the scales of the struct docs) and clear them.
    fn flush(&mut self, acc: &mut RowAccs, dw: bool) {
        let [s1a, s1b] = &mut *self.s1;
        let [s2a, s2b] = &mut *self.s2;
        for e in 0..256 {
            let sc = e as i32 - 150;
            let v1 = std::mem::take(&mut s1a[e]) + std::mem::take(&mut s1b[e]);
            let v2 = std::mem::take(&mut s2a[e]) + std::mem::take(&mut s2b[e]);
            acc.s1.add_scaled(v1 as i128, sc);
            acc.s2.add_scaled(v2 as i128, 2 * sc);
        }
        if dw {
            let [aa, ab] = &mut *self.a;
            for e in 0..512 {
                let v = std::mem::take(&mut aa[e]) + std::mem::take(&mut ab[e]);
                acc.a.add_scaled(v as i128, e as i32 - 300);
            }
            let [ga, gb] = &mut *self.g;
            for e in 0..768 {
                let v = std::mem::take(&mut ga[e]) + std::mem::take(&mut gb[e]);
                acc.g.add_scaled(v, e as i32 - 450);
            }
        }
    }
}

/// A row's weights and biases by position: `w = wh + wl` exactly (`wl` is 0 unless the
/// offset convention's `1 + gamma` needs it), `b` (0 without beta).
pub(super) struct RowWeights {
    pub wh: Vec<f64>,
    pub wl: Vec<f64>,
    pub b: Vec<f64>,
}

/// A row's constants as double-doubles (each within 2^-104 relative of the exact one):
/// `mean` (0 for rms_norm), `rstd = 1/sqrt(q)`, backward `A/K` and `C`.
#[derive(Clone, Copy)]
pub(super) struct RowDd {
    pub mean: DD,
    pub rstd: DD,
    pub a_k: DD,
    pub c: DD,
}

/// Scratch of [`block_best`]: one row's values and bounds.
#[derive(Default)]
pub(super) struct Scratch {
    vh: Vec<f64>,
    vl: Vec<f64>,
    err: Vec<f64>,
}

/// [`block`] with FMA where the CPU has it (bit-identical: the exact products are the same
/// either way). Undecided positions are appended to `undecided`.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_best(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    f: FloatFormat,
    out: &mut [f64],
    s: &mut Scratch,
    undecided: &mut Vec<usize>,
) {
    #[cfg(target_arch = "x86_64")]
    if super::eval::use_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time by use_fma).
        return unsafe { block_fma(x, dy, w, r, f, out, s, undecided) };
    }
    block::<Portable>(x, dy, w, r, f, out, s, undecided)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn block_fma(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    f: FloatFormat,
    out: &mut [f64],
    s: &mut Scratch,
    undecided: &mut Vec<usize>,
) {
    block::<Fused>(x, dy, w, r, f, out, s, undecided)
}

/// One contiguous row (parameter = position) in two passes: the double-double values and
/// bounds of every cell without a branch (`fast::family`'s `cell_dd`: the same arithmetic
/// and bound), then the decisions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block<P: Prod>(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    f: FloatFormat,
    out: &mut [f64],
    s: &mut Scratch,
    undecided: &mut Vec<usize>,
) {
    let n = x.len();
    let (wh, wl, b) = (&w.wh[..n], &w.wl[..n], &w.b[..n]);
    let out = &mut out[..n];
    for v in [&mut s.vh, &mut s.vl, &mut s.err] {
        v.resize(n, 0.0);
    }
    let (vh, vl, err) = (&mut s.vh[..n], &mut s.vl[..n], &mut s.err[..n]);
    let rstd_abs = r.rstd.hi.abs();
    // f32 outputs: first in plain f64 (Ziv's strategy, one level more; see `f64_stage`).
    if f == FloatFormat::F32 && rstd_abs <= F64_STAGE_MAX_RSTD {
        f64_stage(x, dy, w, r, out, err);
        if err.contains(&0.0) {
            for j in 0..n {
                if err[j] == 0.0 {
                    let (v, e) = cell_dd::<P>(x[j], dy.map(|d| d[j]), wh[j], wl[j], b[j], r);
                    let (y, ok) = decides_f32(v, e);
                    out[j] = y as f64;
                    if !ok {
                        undecided.push(j);
                    }
                }
            }
        }
        return;
    }
    fill_dd::<P>(x, dy, w, r, vh, vl, err);
    match f {
        FloatFormat::F32 => {
            let mut all = true;
            for j in 0..n {
                let (v, ok) = decides_f32(
                    DD {
                        hi: vh[j],
                        lo: vl[j],
                    },
                    err[j],
                );
                out[j] = v as f64;
                // The decisions kept as 0.0/1.0 in `err` (no branch in this loop).
                err[j] = if ok { 1.0 } else { 0.0 };
                all &= ok;
            }
            if !all {
                undecided.extend((0..n).filter(|&j| err[j] == 0.0));
            }
        }
        FloatFormat::F64 => {
            let mut all = true;
            for j in 0..n {
                let ok = decides_f64(
                    DD {
                        hi: vh[j],
                        lo: vl[j],
                    },
                    err[j],
                );
                out[j] = vh[j];
                err[j] = if ok { 1.0 } else { 0.0 };
                all &= ok;
            }
            if !all {
                undecided.extend((0..n).filter(|&j| err[j] == 0.0));
            }
        }
        _ => {
            for j in 0..n {
                let v = DD {
                    hi: vh[j],
                    lo: vl[j],
                };
                match decide(v, err[j], f) {
                    Some(y) => out[j] = y,
                    None => undecided.push(j),
                }
            }
        }
    }
}

/// [`block`]'s first pass: every cell's double-double `(vh, vl)` and bound `err`.
#[inline(always)]
fn fill_dd<P: Prod>(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    vh: &mut [f64],
    vl: &mut [f64],
    err: &mut [f64],
) {
    const REL: f64 = 5.048709793414476e-29; // 2^-94
    const FLOOR: f64 = 9.332636185032189e-302; // 2^-1000
    let n = x.len();
    let (wh, wl, b) = (&w.wh[..n], &w.wl[..n], &w.b[..n]);
    let (vh, vl, err) = (&mut vh[..n], &mut vl[..n], &mut err[..n]);
    let rstd = r.rstd;
    let rstd_abs = rstd.hi.abs();
    let mean_abs = r.mean.hi.abs();
    let neg_mean = -r.mean;
    match dy {
        None => {
            for j in 0..n {
                let wd = DD {
                    hi: wh[j],
                    lo: wl[j],
                };
                let d = DD::from_f64(x[j]) + neg_mean;
                let v = d.mul_by::<P>(wd).mul_by::<P>(rstd).add_f64(b[j]);
                vh[j] = v.hi;
                vl[j] = v.lo;
                err[j] =
                    (wh[j].abs() * (x[j].abs() + mean_abs) * rstd_abs + b[j].abs()) * REL + FLOOR;
            }
        }
        Some(dy) => {
            let dy = &dy[..n];
            let neg_a_k = -r.a_k;
            let a_k_abs = r.a_k.hi.abs();
            let c = r.c;
            let c_abs = c.hi.abs();
            for j in 0..n {
                let wd = DD {
                    hi: wh[j],
                    lo: wl[j],
                };
                let d = DD::from_f64(x[j]) + neg_mean;
                let t = wd.mul_f64_by::<P>(dy[j]) + neg_a_k + (-d.mul_by::<P>(c));
                let v = t.mul_by::<P>(rstd);
                vh[j] = v.hi;
                vl[j] = v.lo;
                let mag = wh[j].abs() * dy[j].abs() + a_k_abs + (x[j].abs() + mean_abs) * c_abs;
                err[j] = mag * rstd_abs * REL + FLOOR;
            }
        }
    }
}

/// Every cell of a contiguous row (parameter = position) in double-double with its bound,
/// as [`block`] forms them (FMA where the CPU has it: the same values), into `s`: read
/// them with [`Scratch::dd`].
pub(super) fn row_dd_best(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    s: &mut Scratch,
) {
    let n = x.len();
    for v in [&mut s.vh, &mut s.vl, &mut s.err] {
        v.resize(n, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if super::eval::use_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time by use_fma).
        return unsafe { fill_dd_fma(x, dy, w, r, s) };
    }
    fill_dd::<Portable>(x, dy, w, r, &mut s.vh, &mut s.vl, &mut s.err)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fill_dd_fma(x: &[f64], dy: Option<&[f64]>, w: &RowWeights, r: &RowDd, s: &mut Scratch) {
    fill_dd::<Fused>(x, dy, w, r, &mut s.vh, &mut s.vl, &mut s.err)
}

impl Scratch {
    /// The values' leading and trailing parts and bounds [`row_dd_best`] formed.
    pub(super) fn dd(&self) -> (&[f64], &[f64], &[f64]) {
        (&self.vh, &self.vl, &self.err)
    }
}

/// Rows whose `rstd` is at most this (2^64) take [`f64_stage`] for f32 outputs.
const F64_STAGE_MAX_RSTD: f64 = 18446744073709551616.0;

/// The f32 outputs of a row from plain f64 arithmetic, each accepted only where the interval
/// `v ± err` decides it (`decides_f32`); writes `out[j]` and `ok[j]` (1.0 where decided, 0.0
/// where [`block`] must take the double-double). With `u = 2^-53`, `m`, `r`, `a`, `c`, `wh`
/// the leading parts of `mean`, `rstd`, `A/K`, `C`, `w` (each within `(u + 2^-104)` relative
/// of the exact constant; `w − wh = wl` within `u·|w|`):
///
/// - `y = fl(fl(fl(fl(x − m)·wh)·r) + b)`: six relative perturbations of at most `1.0001u`
///   on the product term (`m`'s only on the `|mean|` part) and one rounding of the sum, so
///   `|y − Y| ≤ 7.1u·(|w|·(|x| + |mean|)·rstd + |b|)`;
/// - `dx = fl(fl(fl(fl(wh·dy) − a) − fl(fl(x − m)·c))·r)`: the inner sum is within
///   `5.1u·(|w·dy| + |A/K| + (|x| + |mean|)·|C|)` (2.01u, 1.0001u and 4.02u on its terms and
///   one rounding per subtraction), times `r` and its rounding `7.2u` of that times `rstd`.
///
/// The bound taken is `2^-49 = 16u` times the magnitudes computed from the leading parts
/// (within a few `u` of the exact ones), plus `2^-1000`. Underflow: an f64 product below
/// 2^-1022 is off by at most 2^-1075, and at most `rstd ≤ 2^64` times that after the
/// multiplication by `r` (only rows with `rstd ≤ 2^64` come here), four of them below
/// `2^-1000`. Overflow gives a non-finite value or bound, which `decides_f32` never accepts.
#[inline(always)]
fn f64_stage(
    x: &[f64],
    dy: Option<&[f64]>,
    w: &RowWeights,
    r: &RowDd,
    out: &mut [f64],
    ok: &mut [f64],
) {
    const REL: f64 = 1.7763568394002505e-15; // 2^-49
    const FLOOR: f64 = 9.332636185032189e-302; // 2^-1000
    let n = x.len();
    let (wh, b, out, ok) = (&w.wh[..n], &w.b[..n], &mut out[..n], &mut ok[..n]);
    let (m, rs) = (r.mean.hi, r.rstd.hi);
    let (mean_abs, rstd_abs) = (m.abs(), rs.abs());
    match dy {
        None => {
            for j in 0..n {
                let v = ((x[j] - m) * wh[j]) * rs + b[j];
                let e =
                    (wh[j].abs() * (x[j].abs() + mean_abs) * rstd_abs + b[j].abs()) * REL + FLOOR;
                let (y, good) = decides_f32(DD { hi: v, lo: 0.0 }, e);
                out[j] = y as f64;
                ok[j] = if good { 1.0 } else { 0.0 };
            }
        }
        Some(dy) => {
            let dy = &dy[..n];
            let (a, c) = (r.a_k.hi, r.c.hi);
            let (a_abs, c_abs) = (a.abs(), c.abs());
            for j in 0..n {
                let t = (wh[j] * dy[j] - a) - (x[j] - m) * c;
                let v = t * rs;
                let mag = wh[j].abs() * dy[j].abs() + a_abs + (x[j].abs() + mean_abs) * c_abs;
                let e = mag * rstd_abs * REL + FLOOR;
                let (y, good) = decides_f32(DD { hi: v, lo: 0.0 }, e);
                out[j] = y as f64;
                ok[j] = if good { 1.0 } else { 0.0 };
            }
        }
    }
}

/// One cell in double-double and its bound: the arithmetic of [`block`]'s first pass.
#[inline(always)]
fn cell_dd<P: Prod>(x: f64, dy: Option<f64>, wh: f64, wl: f64, b: f64, r: &RowDd) -> (DD, f64) {
    const REL: f64 = 5.048709793414476e-29; // 2^-94
    const FLOOR: f64 = 9.332636185032189e-302; // 2^-1000
    let wd = DD { hi: wh, lo: wl };
    let rstd_abs = r.rstd.hi.abs();
    let mean_abs = r.mean.hi.abs();
    let d = DD::from_f64(x) + -r.mean;
    match dy {
        None => {
            let v = d.mul_by::<P>(wd).mul_by::<P>(r.rstd).add_f64(b);
            let err = (wh.abs() * (x.abs() + mean_abs) * rstd_abs + b.abs()) * REL + FLOOR;
            (v, err)
        }
        Some(dy) => {
            let t = wd.mul_f64_by::<P>(dy) + -r.a_k + (-d.mul_by::<P>(r.c));
            let v = t.mul_by::<P>(r.rstd);
            let mag = wh.abs() * dy.abs() + r.a_k.hi.abs() + (x.abs() + mean_abs) * r.c.hi.abs();
            (v, mag * rstd_abs * REL + FLOOR)
        }
    }
}

/// The `dgamma` sums of a chunk of rows, per parameter: the double-double sum of
/// `dy·(x − mean_r)·rstd_r` (each term as the generic path forms it, added in the same order:
/// row by row), and the sum of the magnitudes `|dy|·(|x| + |mean_r|)·|rstd_r|`.
pub(super) struct DgammaPart {
    pub hi: Vec<f64>,
    pub lo: Vec<f64>,
    pub mag: Vec<f64>,
    /// Terms per parameter (rows added).
    pub n: usize,
}

impl DgammaPart {
    /// Zero sums of `k` parameters.
    pub(super) fn new(k: usize) -> Self {
        DgammaPart {
            hi: vec![0.0; k],
            lo: vec![0.0; k],
            mag: vec![0.0; k],
            n: 0,
        }
    }

    /// Add one row's terms (FMA where the CPU has it: the same exact products).
    pub(super) fn add_row(&mut self, x: &[f64], dy: &[f64], mean: DD, rstd: DD) {
        #[cfg(target_arch = "x86_64")]
        if super::eval::use_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time by use_fma).
            return unsafe { self.add_row_fma(x, dy, mean, rstd) };
        }
        self.add_row_by::<Portable>(x, dy, mean, rstd)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn add_row_fma(&mut self, x: &[f64], dy: &[f64], mean: DD, rstd: DD) {
        self.add_row_by::<Fused>(x, dy, mean, rstd)
    }

    #[inline(always)]
    fn add_row_by<P: Prod>(&mut self, x: &[f64], dy: &[f64], mean: DD, rstd: DD) {
        let n = self.hi.len();
        let (x, dy) = (&x[..n], &dy[..n]);
        let (hi, lo, mag) = (&mut self.hi[..n], &mut self.lo[..n], &mut self.mag[..n]);
        let rstd_abs = rstd.hi.abs();
        let mean_abs = mean.hi.abs();
        let neg_mean = -mean;
        for j in 0..n {
            let d = DD::from_f64(x[j]) + neg_mean;
            let t = d.mul_by::<P>(DD::from_f64(dy[j])).mul_by::<P>(rstd);
            let s = DD {
                hi: hi[j],
                lo: lo[j],
            } + t;
            hi[j] = s.hi;
            lo[j] = s.lo;
            mag[j] += dy[j].abs() * (x[j].abs() + mean_abs) * rstd_abs;
        }
        self.n += 1;
    }

    /// Add one row's terms in plain f64 (the sums of an f32 `dgamma`; [`DgammaPart::merge_f64`]
    /// merges them and `lo` stays 0): each term `fl(fl(fl(x − m)·dy)·r)` with `m`, `r` the
    /// leading parts of `mean`, `rstd`, within `5.01u` (`u = 2^-53`) of its magnitude
    /// `|dy|·(|x| + |mean|)·rstd` (five perturbations of at most `1.0001u`), `mag` as in
    /// [`DgammaPart::add_row`].
    pub(super) fn add_row_f64(&mut self, x: &[f64], dy: &[f64], mean: DD, rstd: DD) {
        let n = self.hi.len();
        let (x, dy) = (&x[..n], &dy[..n]);
        let (hi, mag) = (&mut self.hi[..n], &mut self.mag[..n]);
        let (m, r) = (mean.hi, rstd.hi);
        let (mean_abs, rstd_abs) = (m.abs(), r.abs());
        for j in 0..n {
            hi[j] += ((x[j] - m) * dy[j]) * r;
            mag[j] += dy[j].abs() * (x[j].abs() + mean_abs) * rstd_abs;
        }
        self.n += 1;
    }

    /// Add another chunk's f64 sums ([`DgammaPart::add_row_f64`]).
    pub(super) fn merge_f64(&mut self, o: &DgammaPart) {
        for j in 0..self.hi.len() {
            self.hi[j] += o.hi[j];
            self.mag[j] += o.mag[j];
        }
        self.n += o.n;
    }

    /// Add another chunk's sums (the later rows), as the generic path merges its chunks.
    pub(super) fn merge(&mut self, o: &DgammaPart) {
        for j in 0..self.hi.len() {
            let s = DD {
                hi: self.hi[j],
                lo: self.lo[j],
            } + DD {
                hi: o.hi[j],
                lo: o.lo[j],
            };
            self.hi[j] = s.hi;
            self.lo[j] = s.lo;
            self.mag[j] += o.mag[j];
        }
        self.n += o.n;
    }
}

/// `dbeta`'s column sums `Σ_r dy[r·K + j]` in f64, each addition's rounding error (Knuth's
/// two-sum, exact in round-to-nearest without overflow: the inputs are below 2^400 in
/// magnitude and there are fewer than 2^64 of them) added in magnitude to `inexact[j]`. Where
/// `inexact[j]` stays 0 every addition was exact, so `sum[j]` is the exact column sum; else
/// the caller sums the column again exactly.
pub(super) struct DbetaPart {
    pub sum: Vec<f64>,
    pub inexact: Vec<f64>,
}

#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

impl DbetaPart {
    /// Zero sums of `k` columns.
    pub(super) fn new(k: usize) -> Self {
        DbetaPart {
            sum: vec![0.0; k],
            inexact: vec![0.0; k],
        }
    }

    /// Add one row.
    pub(super) fn add_row(&mut self, dy: &[f64]) {
        let n = self.sum.len();
        let (sum, inexact, dy) = (&mut self.sum[..n], &mut self.inexact[..n], &dy[..n]);
        for j in 0..n {
            let (s, e) = two_sum(sum[j], dy[j]);
            sum[j] = s;
            inexact[j] += e.abs();
        }
    }

    /// Add another chunk's sums.
    pub(super) fn merge(&mut self, o: &DbetaPart) {
        for j in 0..self.sum.len() {
            let (s, e) = two_sum(self.sum[j], o.sum[j]);
            self.sum[j] = s;
            self.inexact[j] += e.abs() + o.inexact[j];
        }
    }
}
