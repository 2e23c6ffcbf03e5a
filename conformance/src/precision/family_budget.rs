//! Error budgets of the normalization family (layer_norm, rms_norm, group_norm and their
//! backwards; docs/DESIGN.md §9): the model of [`budget`](super::budget) — per output element
//! `|computed − exact| ≤ k·u·(cond + mag + u·mag2)` — with a row (layer_norm, rms_norm) or a
//! group (group_norm) in the place of BatchNorm's channel: `m = K` cells, statistics per
//! group, but one weight `w_i` and bias `b_i` per *cell* (its parameter's), so `gamma` and
//! `beta` are perturbed per cell.
//!
//! Per group (`r = q^(−1/2)`; centred ops: `d = x − mean`, `q = mean(d²) + eps`; rms_norm:
//! `d = x`, `q = mean(x²) + eps`; `h = d·r`, `X1 = mean|x|`, `hx = mean|h·x|`, `w` = `gamma`,
//! `1 + gamma` (offset) or 1, `e = dy·w`, `A = mean(e)` (0 for rms_norm), `B = mean(e·h)`,
//! `z = e − A − h·B`, `dk` = [`mean_sq`]`(m, X1)`, `[c]` = only for centred ops):
//!
//! | output | `cond` (upper bound) | `mag`, `mag2` |
//! |---|---|---|
//! | `y` | `|w_i|·r·(|x_i| + [c]X1 + |h_i|·hx) + |gamma_i·h_i| + |b_i|` | `[c]|w_i|·r·X1` + offset: `|w_i·h_i|` + rms: `|w_i·h_i|·r²·mean(x²)/2`; `mag2 = [c]dk·|w_i·h_i|·r²/2` |
//! | `mean` | `X1` (exact) | `X1` |
//! | `rstd` | `r³·mean|d·x|` (exact) | `r + r³·mean(d²)/2`; `mag2 = [c]dk·r³/2` |
//! | `dx` centred | `r·(|e_i| + mean|e| + |h_i|·mean|h·e|) + r·(|γdy_i| + mean|γdy| + |h_i|·mean|h·γdy|) + r²·(|z_i|·hx + |h_i|·mean|z·x| + |B|·(|x_i| + X1 + |h_i|·hx))` | `r·(|e_i| + mean|e| + |h_i|·mean|h·e| + X1·r·(mean|h·e| + |h_i|·mean|e|))`; `mag2 = dk·r³·((|e_i| + |A| + 3|h_i·B|)/2 + |A|)` |
//! | `dx` rms | `r·(|e_i| + |h_i|·mean|h·e|) + r·(|γdy_i| + |h_i|·mean|h·γdy|) + r²·(|e_i|·hx + |h_i|·mean|e·x| + |B|·(|x_i| + 3|h_i|·hx))` | `r·(|e_i| + |h_i|·mean|h·e|) + r³·mean(x²)/2·(|e_i| + 3|h_i|·mean|h·e|)` |
//! | `dgamma_p` | `Σ_groups [Σ_{j∈p}|h_j·dy_j| + r·(Σ_{j∈p}|dy_j·x_j| + [c]X1·|S_p| + hx·|T_p|)]` | `Σ_groups [Σ_{j∈p}|dy·h| + [c]X1·r·Σ_{j∈p}|dy| + rms: r²·mean(x²)/2·Σ_{j∈p}|dy·h|]`; `mag2 = Σ_groups [c]dk·r²/2·Σ_{j∈p}|dy·h|` |
//! | `dbeta_p` | `Σ_{j∈p}|dy_j|` (exact) | the same |
//!
//! (`S_p = Σ_{j∈p} dy_j`, `T_p = Σ_{j∈p} dy_j·h_j` over the group's cells using parameter `p`.)
//!
//! Reasons. The Jacobians are BatchNorm's with `g·dy` replaced by the per-cell `e` (`y`,
//! `dx`: the x-part of `dx` is S6's with `g = 1`), and one more input per cell for `gamma`
//! whose entry `∂dx_i/∂gamma_p = r·Σ_{j∈p} dy_j·(δ_ij − (1 + h_i·h_j)/m)` is bounded by the
//! triangle inequality cell by cell (`|γdy_j| = |gamma_j·dy_j|`). rms_norm has no centring:
//! `∂h_i/∂x_j = r·(δ_ij − h_i·h_j/m)`, so the mean terms drop and
//! `∂dx_i/∂x_k = −(r²/m)·(h_k·e_i + h_i·e_k + B·(m·δ_ik − 3·h_i·h_k))`. `rstd`:
//! `∂r/∂x_j = −r³·d_j/m`, one sign per entry, so its bound is exact. The `dgamma` partial of
//! one group for parameter `p` has `∂/∂x_k = r·(dy_k·[p(k) = p] − (S_p + h_k·T_p)/m)`
//! (rms_norm: no `S_p`), bounded term by term; the groups are independent, so `cond` and
//! `mag` of `dgamma` are sums of per-group terms.
//!
//! `mag` is BatchNorm's (the computed mean's `δ ≤ δ̄ = 2k·u·X1` moves `d` by `δ` to first
//! order, the variance by `δ²`: `mag2`, propagated through `q` by `|∂o/∂q|`), plus what is
//! new: `rstd`'s own roundings (`r`, and the variance's summation `r³·mean(d²)/2`); rms_norm's
//! `q = mean(x²) + eps`, whose summation error `≈ u·mean(x²)` enters through `|∂o/∂q|`
//! (there is no mean and no `δ`); the offset convention's `1 + gamma`, rounded, a relative
//! error of `w` not covered by `gamma`'s entry.
//!
//! Scaling. Every bound above is homogeneous in `(x, √eps)`: with `x/s`, `eps/s²` (`s` a
//! power of two) `y`, `dgamma`, `dbeta` are unchanged, `mean` is divided by `s`, `rstd` and
//! `dx` multiplied by it. A group whose largest `|x|` is `≥ 2^256` or nonzero `≤ 2^-256` (f64
//! data of the `extreme` suite) is bounded at that scale and the result scaled back, since in
//! f64 its squares (`var`, `r²`, `r³`) overflow or underflow and the bounds would be infinite —
//! an infinite budget accepts any finite value.
//!
//! The gate ([`FamilyBudgets::gate`]): `k(m)` for the per-cell and per-group outputs (`y`,
//! `mean`, `rstd`, `dx`), and for `dgamma`, `dbeta`, which sum over every row/sample,
//! `k(max(m, n))` with `n` the number of cells summed into one element. Every `cond + mag`
//! bounds `|exact|`, so a correctly rounded output has ratio ≤ 1 ([`ratio_roots`] for the
//! sums of roots of `dgamma`).

use super::budget::{
    c1_error, eb, iv_of_f64, k_allowance, ldexp, ldexp_factors, mean_sq, rsqrt_iv, scale_exponent,
    scale_q, scaled, sum_iv_by, ElementBudget, Iv, SAFE,
};
use crate::par::*;
use bnconf_spec::exact::roots::SumOfRoots;
use bnconf_spec::exact::round::{f64_to_rational, FloatFormat};
use bnconf_spec::exact::{QSqrt, Rational};
use bnconf_spec::family::{Centering, Grouping, Norm, RmsConvention};
use bnconf_spec::SpecError;
use num_traits::ToPrimitive;
use std::collections::BTreeMap;

/// One family problem as the budget reads it: binary floats as f64 (`dy` for a backward).
#[derive(Clone, Copy, Debug)]
pub struct FamilyProblem<'a> {
    /// The op's grouping (spec's: which cells form a group, which parameter a cell uses).
    pub grouping: &'a Grouping,
    /// The op's kind (centring, affine mode, convention).
    pub norm: &'a Norm,
    pub x: &'a [f64],
    /// Backward ops: the cotangent; `None` for a forward.
    pub dy: Option<&'a [f64]>,
    pub gamma: Option<&'a [f64]>,
    pub beta: Option<&'a [f64]>,
    /// `eps ≥ 0` (exact: the f64's value).
    pub eps: f64,
}

/// Budgets of every output element of a family problem, and the gate of each output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FamilyBudgets {
    /// Per output (`y`, `mean`, `rstd` / `dx`, `dgamma`, `dbeta`), one budget per element in
    /// the output's order (cells; groups; parameters).
    pub outputs: BTreeMap<&'static str, Vec<ElementBudget>>,
    /// The allowance `k` the ratio of each output's elements is gated at.
    pub gate: BTreeMap<&'static str, f64>,
}

/// The number of cells summed into each parameter's `dgamma`/`dbeta`.
fn cells_per_param(g: &Grouping) -> Vec<usize> {
    let mut n = vec![0usize; g.n_params()];
    for &p in g.params() {
        n[p] += 1;
    }
    n
}

/// The exact `q` of one group (for an enclosure too loose for [`rsqrt_iv`]).
fn exact_q(xs: &[f64], centred: bool, eps: &Rational) -> Rational {
    let x: Vec<Rational> = xs
        .iter()
        .map(|&v| f64_to_rational(v).expect("finite input"))
        .collect();
    let m = Rational::from_integer((x.len() as i64).into());
    let zero = Rational::from_integer(0.into());
    let mean = if centred {
        x.iter().fold(zero.clone(), |s, v| s + v) / &m
    } else {
        zero.clone()
    };
    let ss = x.iter().fold(zero, |s, v| {
        let d = v - &mean;
        s + &d * &d
    });
    ss / m + eps
}

/// Per group: the statistics every output's terms are made of.
struct GroupTerms {
    m: f64,
    ax: Vec<f64>,
    x1: f64,
    /// `[c]`: 1 for centred ops, 0 for rms_norm.
    c: f64,
    ru: f64,
    /// `h = d·r` as enclosures, values and error bounds apart.
    hv: Vec<f64>,
    he: Vec<f64>,
    ah: Vec<f64>,
    hx: f64,
    /// `mean(d²)` (upper bound).
    dd: f64,
    /// `mean|d·x|` (upper bound).
    dx: f64,
    dk: f64,
    /// The power of two `s` the terms were computed at (module docs, "Scaling"): the terms are
    /// those of `x/s`, `eps/s²`; 1 for every group in f32's range.
    s: f64,
}

fn group_terms(
    gi: usize,
    xs: &[f64],
    norm: &Norm,
    eps: f64,
    eps_q: &Rational,
) -> Result<GroupTerms, SpecError> {
    let centred = norm.centering == Centering::Mean;
    let se = scale_exponent(xs, eps);
    // x/2^e and eps/2^2e, rounded where they leave the normal range: iv_of_f64's absolute
    // term (2^-1072) encloses that rounding. Every per-cell term is formed as the module's
    // formulas do, a pass of them at a time into arrays (values and error bounds apart, so
    // that the passes vectorise), and the sums add them in their order (sequential sums in
    // cell order, `sum_iv`'s tree): the values of forming each term where it is summed.
    let n = xs.len();
    let m = n as f64;
    let (p1, p2) = ldexp_factors(-se);
    let (mut xv, mut xe, mut ax) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    cells::scaled_inputs(xs, p1, p2, &mut xv, &mut xe, &mut ax);
    let x1 = ax.iter().fold(0.0, |s, &a| s + a);
    let mu = if centred {
        sum_iv_by(0, n, &|i| Iv { v: xv[i], e: xe[i] }).div(m)
    } else {
        Iv::ZERO
    };
    let eps = ldexp(eps, -2 * se);
    let x1 = x1 / m;
    // d = x − mu (kept: h is formed from it), and its square's enclosure.
    let (mut dv, mut de, mut qv, mut qe) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    cells::centred(&xv, &xe, mu, &mut dv, &mut de, &mut qv, &mut qe);
    let var = sum_iv_by(0, n, &|i| Iv { v: qv[i], e: qe[i] }).div(m);
    let r = match rsqrt_iv(var.add(iv_of_f64(eps))) {
        Some(r) => r,
        None => {
            let q = scale_q(exact_q(xs, centred, eps_q), se);
            if q <= Rational::from_integer(0.into()) {
                let what = if centred {
                    "var + eps"
                } else {
                    "mean(x²) + eps"
                };
                return Err(c1_error(gi, what, &q));
            }
            let qf = q.to_f64().unwrap_or(f64::INFINITY);
            let qiv = Iv {
                v: qf,
                e: 2.0 * f64::EPSILON * qf.abs(),
            };
            rsqrt_iv(qiv).unwrap_or(Iv {
                v: 0.0,
                e: f64::INFINITY,
            })
        }
    };
    // (the arrays of x and of the squares, no longer read, hold h, |h| and |d|)
    let (mut hv, mut he, mut ah) = (xv, xe, qv);
    let ad = &mut qe;
    cells::normalised(&dv, &de, r, &mut hv, &mut he, &mut ah, ad);
    let (mut hx, mut dd, mut dx) = (0.0, 0.0, 0.0);
    for i in 0..n {
        hx += ah[i] * ax[i];
        dd += ad[i] * ad[i];
        dx += ad[i] * ax[i];
    }
    Ok(GroupTerms {
        m,
        hx: hx / m,
        dd: dd / m,
        dx: dx / m,
        dk: if centred { mean_sq(xs.len(), x1) } else { 0.0 },
        c: if centred { 1.0 } else { 0.0 },
        ru: r.up(),
        s: ldexp(1.0, se),
        ax,
        x1,
        hv,
        he,
        ah,
    })
}

/// The weight `w` of parameter `p` as an enclosure, and `|gamma_p|` (0 without a weight).
fn weight(norm: &Norm, gamma: Option<&[f64]>, p: usize) -> (Iv, f64) {
    match (gamma, norm.convention) {
        (Some(gm), RmsConvention::Standard) => (iv_of_f64(gm[p]), gm[p].abs()),
        (Some(gm), RmsConvention::Offset) => {
            (Iv { v: 1.0, e: 0.0 }.add(iv_of_f64(gm[p])), gm[p].abs())
        }
        (None, _) => (Iv { v: 1.0, e: 0.0 }, 0.0),
    }
}

/// `per(gi, cells)` of every group of `g`, computed in parallel a batch of groups at a time
/// and handed to `take` in the groups' order (the first error in that order returned): the
/// values of a loop over the groups, whatever the thread count.
fn each_group<T: Send>(
    g: &Grouping,
    per: impl Fn(usize, &[usize]) -> Result<T, SpecError> + Sync,
    mut take: impl FnMut(&[usize], T),
) -> Result<(), SpecError> {
    const BATCH: usize = 256;
    let groups = g.groups();
    for start in (0..groups.len()).step_by(BATCH) {
        let end = (start + BATCH).min(groups.len());
        let done: Vec<Result<T, SpecError>> = (start..end)
            .into_par_iter()
            .map(|gi| per(gi, &groups[gi]))
            .collect();
        for (gi, r) in (start..end).zip(done) {
            take(&groups[gi], r?);
        }
    }
    Ok(())
}

/// What every group's budgets are computed from: the problem's op, affine parameters and
/// `eps` (exactly too).
#[derive(Clone, Copy)]
pub struct GroupCtx<'a> {
    norm: &'a Norm,
    gamma: Option<&'a [f64]>,
    beta: Option<&'a [f64]>,
    eps: f64,
    eps_q: &'a Rational,
}

impl<'a> GroupCtx<'a> {
    /// The context of a problem's groups (`eps_q`: `eps` exactly).
    pub fn new(
        norm: &'a Norm,
        gamma: Option<&'a [f64]>,
        beta: Option<&'a [f64]>,
        eps: f64,
        eps_q: &'a Rational,
    ) -> Self {
        GroupCtx {
            norm,
            gamma,
            beta,
            eps,
            eps_q,
        }
    }
}

/// One group's budgets of a forward: its cells' `y` (in the group's cell order), its `mean`
/// and its `rstd`.
pub struct ForwardGroup {
    pub y: Vec<ElementBudget>,
    pub mean: ElementBudget,
    pub rstd: ElementBudget,
}

/// One group's budgets of a backward: its cells' `dx` (in the group's cell order), and its
/// terms of `dgamma` and `dbeta` per parameter it uses (ascending), `[cond, mag, mag2, Σ|dy|]`,
/// added to the sums over the groups in the groups' order by [`add_parts`].
pub struct BackwardGroup {
    pub dx: Vec<ElementBudget>,
    pub parts: Vec<(usize, [f64; 4])>,
}

/// The gates of a problem whose groups have `m` cells and whose parameters sum over at most
/// `n` cells each: `(k` of the per-cell and per-group outputs, `k` of `dgamma` and `dbeta)`.
pub fn gates(m: usize, n: usize) -> (f64, f64) {
    (k_allowance(m), k_allowance(m.max(n)))
}

/// A budget's `NaN` terms (an undefined bound) made infinite.
pub fn nan_to_inf(b: &mut ElementBudget) {
    // (a select, not a branch: this runs once per cell)
    for f in [&mut b.cond, &mut b.mag, &mut b.mag2] {
        *f = if f.is_nan() { f64::INFINITY } else { *f };
    }
}

/// The forward budgets of group `gi`, cells `xs` (`param(j)`: the parameter of its `j`-th
/// cell); (C1) `q ≤ 0` an error.
pub fn forward_group(
    ctx: &GroupCtx<'_>,
    gi: usize,
    xs: &[f64],
    param: impl Fn(usize) -> usize,
) -> Result<ForwardGroup, SpecError> {
    let norm = ctx.norm;
    let offset = norm.affine.has_weight() && norm.convention == RmsConvention::Offset;
    let t = group_terms(gi, xs, norm, ctx.eps, ctx.eps_q)?;
    let (ru, r2) = (t.ru, t.ru * t.ru);
    // rms_norm: the summation of mean(x²) through ∂r/∂q.
    let qsum = (1.0 - t.c) * r2 * t.dd / 2.0;
    // Each cell's `|w|`, `|gamma|` and `|beta|` (its parameter's), then its budget.
    let n = xs.len();
    let [mut wu, mut ga, mut ba] = [(); 3].map(|()| vec![0.0; n]);
    for a in 0..n {
        let p = param(a);
        let (w, g) = weight(norm, ctx.gamma, p);
        (wu[a], ga[a]) = (w.up(), g);
        ba[a] = ctx.beta.map_or(0.0, |bt| bt[p].abs());
    }
    let k = cells::YScalars {
        ru,
        r2,
        c: t.c,
        x1: t.x1,
        hx: t.hx,
        dk: t.dk,
        qsum,
        offset,
    };
    let mut y = vec![ElementBudget::default(); n];
    cells::y_budgets(&k, [&wu, &ga, &ba, &t.ah, &t.ax], &mut y);
    // y is of degree 0 in the scale, mean of degree 1, rstd of degree −1.
    let mut mean = scaled(eb(t.x1, t.x1), t.s);
    let mut rs = eb(ru * r2 * t.dx, ru + ru * r2 * t.dd / 2.0);
    rs.mag2 = t.dk * ru * r2 / 2.0;
    let mut rstd = scaled(rs, 1.0 / t.s);
    nan_to_inf(&mut mean);
    nan_to_inf(&mut rstd);
    Ok(ForwardGroup { y, mean, rstd })
}

/// The backward budgets of group `gi`, cells `xs` and cotangents `dys` (`param(j)`: the
/// parameter of its `j`-th cell; `distinct`: every cell of the group has its own parameter,
/// ascending, as in layout `last`: its terms are then formed without a map, the same
/// values); (C1) `q ≤ 0` an error.
pub fn backward_group(
    ctx: &GroupCtx<'_>,
    gi: usize,
    xs: &[f64],
    dys: &[f64],
    param: impl Fn(usize) -> usize,
    distinct: bool,
) -> Result<BackwardGroup, SpecError> {
    let norm = ctx.norm;
    let centred = norm.centering == Centering::Mean;
    let t = group_terms(gi, xs, norm, ctx.eps, ctx.eps_q)?;
    let (ru, r2) = (t.ru, t.ru * t.ru);
    let m = t.m;
    let n = xs.len();
    // Pass 1 (per cell, into arrays): `dy`'s enclosure, `e = dy·w`, `|e|`, `|γdy|`, `e·h`.
    let [mut ev, mut ee, mut ae, mut ge, mut ehv, mut ehe] = [(); 6].map(|()| vec![0.0; n]);
    // (each cell's weight `w` and `|gamma|` first, in the arrays `e·h` is formed in after)
    for j in 0..n {
        let (w, ga) = weight(norm, ctx.gamma, param(j));
        (ehv[j], ehe[j], ge[j]) = (w.v, w.e, ga);
    }
    cells::cotangent(
        dys,
        &t.hv,
        &t.he,
        [&mut ev, &mut ee, &mut ae, &mut ge, &mut ehv, &mut ehe],
    );
    // The sums of |e|, |h·e|, |γdy|, |h·γdy|, |e·x| (cell order), and the trees of `e`, `e·h`.
    let (mut e1, mut he, mut g1, mut hg, mut ex) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for j in 0..n {
        e1 += ae[j];
        he += t.ah[j] * ae[j];
        g1 += ge[j];
        hg += t.ah[j] * ge[j];
        ex += ae[j] * t.ax[j];
    }
    let (e1, he, g1, hg, ex) = (e1 / m, he / m, g1 / m, hg / m, ex / m);
    let a = if centred {
        sum_iv_by(0, n, &|j| Iv { v: ev[j], e: ee[j] }).div(m)
    } else {
        Iv::ZERO
    };
    let bb = sum_iv_by(0, n, &|j| Iv {
        v: ehv[j],
        e: ehe[j],
    })
    .div(m);
    // Pass 2: `|z|` and the sum of |z·x|.
    let mut az = ehv;
    cells::z_abs(&ev, &ee, &t.hv, &t.he, a, bb, &mut az);
    let zx = az.iter().zip(&t.ax).fold(0.0, |s, (a_z, xj)| s + a_z * xj) / m;
    let (au, bu) = (a.up(), bb.up());
    let c = t.c;
    // Pass 3: each cell's budget.
    let k = cells::DxScalars {
        ru,
        r2,
        c,
        e1,
        he,
        g1,
        hg,
        ex,
        zx,
        au,
        bu,
        hx: t.hx,
        x1: t.x1,
        dk: t.dk,
        dd: t.dd,
    };
    let mut dx = vec![ElementBudget::default(); n];
    if centred {
        cells::dx_budgets::<true>(&k, &ae, &ge, &az, &t.ah, &t.ax, &mut dx);
    } else {
        cells::dx_budgets::<false>(&k, &ae, &ge, &az, &t.ah, &t.ax, &mut dx);
    }
    // dx is of degree −1 in the scale; dgamma and dbeta of degree 0. (Scaling after
    // nan_to_inf: an infinite term stays infinite, as a NaN one scaled would become.)
    if t.s != 1.0 {
        for b in &mut dx {
            *b = scaled(*b, 1.0 / t.s);
        }
    }
    // dgamma, dbeta: this group's partial sums per parameter (each from zero, its cells
    // added in order), and their budgets' terms.
    type Part = (Iv, Iv, f64, f64, f64);
    let add = |s: &mut Part, j: usize| {
        let dyv = iv_of_f64(dys[j]);
        let ady = dyv.up();
        s.0 = s.0.add(dyv);
        s.1 = s.1.add(dyv.mul(Iv {
            v: t.hv[j],
            e: t.he[j],
        }));
        s.2 += ady * t.ah[j];
        s.3 += ady * t.ax[j];
        s.4 += ady;
    };
    let zero: Part = (Iv::ZERO, Iv::ZERO, 0.0, 0.0, 0.0);
    let terms = |p: usize, (sp, tp, hdy, dyx, sdy): Part| {
        let cond = hdy + ru * (dyx + c * t.x1 * sp.up() + t.hx * tp.up());
        let mag = hdy + c * t.x1 * ru * sdy + (1.0 - c) * r2 * t.dd / 2.0 * hdy;
        (p, [cond, mag, t.dk * r2 / 2.0 * hdy, sdy])
    };
    let parts = if distinct {
        // (`add` to `zero` and `terms` of each cell, in a loop that vectorises)
        let mut parts: Vec<(usize, [f64; 4])> = (0..n).map(|j| (param(j), [0.0; 4])).collect();
        let k = cells::PartScalars {
            ru,
            c,
            r2,
            hx: t.hx,
            x1: t.x1,
            dk: t.dk,
            dd: t.dd,
        };
        cells::distinct_parts(&k, dys, &t.hv, &t.he, &t.ah, &t.ax, &mut parts);
        parts
    } else {
        let mut part: BTreeMap<usize, Part> = BTreeMap::new();
        for j in 0..n {
            add(part.entry(param(j)).or_insert(zero), j);
        }
        part.into_iter().map(|(p, s)| terms(p, s)).collect()
    };
    Ok(BackwardGroup { dx, parts })
}

/// Add one group's terms of `dgamma` and `dbeta` ([`BackwardGroup::parts`]) to their sums over
/// the groups (called in the groups' order: the sums' order); `first`: the parameter that
/// `dgamma[0]` and `dbeta[0]` are of (0 for every parameter; a range of them to add the
/// groups' terms of disjoint ranges in parallel, each sum in the same order).
pub fn add_parts(
    parts: &[(usize, [f64; 4])],
    first: usize,
    dgamma: &mut [ElementBudget],
    dbeta: &mut [ElementBudget],
) {
    for &(p, [cond, mag, mag2, sdy]) in parts {
        let dg = &mut dgamma[p - first];
        dg.cond += cond * SAFE;
        dg.mag += mag * SAFE;
        dg.mag2 += mag2 * SAFE;
        let db = &mut dbeta[p - first];
        db.cond += sdy * SAFE;
        db.mag += sdy * SAFE;
    }
}

/// Budgets of every output element of `prob` (module docs' table) and each output's gate.
/// Errors: (C1) `q ≤ 0` in a group, as the reference reports it.
pub fn family_budgets(prob: &FamilyProblem<'_>) -> Result<FamilyBudgets, SpecError> {
    let g = prob.grouping;
    let norm = prob.norm;
    let n = g.len();
    let eps_q = f64_to_rational(prob.eps).expect("finite eps");
    let ctx = GroupCtx::new(norm, prob.gamma, prob.beta, prob.eps, &eps_q);
    let centred = norm.centering == Centering::Mean;
    let per_param = cells_per_param(g);
    let m_group = g.groups().first().map_or(1, |c| c.len());
    let (k_cells, k_params) = gates(m_group, per_param.iter().copied().max().unwrap_or(1));
    let gather = |cells: &[usize], v: &[f64]| -> Vec<f64> { cells.iter().map(|&i| v[i]).collect() };
    let mut out = FamilyBudgets::default();
    match prob.dy {
        None => {
            let mut y = vec![ElementBudget::default(); n];
            let (mut mean, mut rstd) = (Vec::new(), Vec::new());
            let per = |gi: usize, cells: &[usize]| {
                forward_group(&ctx, gi, &gather(cells, prob.x), |j| g.params()[cells[j]])
            };
            each_group(g, per, |cells, fg| {
                for (&i, e) in cells.iter().zip(fg.y) {
                    y[i] = e;
                }
                mean.push(fg.mean);
                rstd.push(fg.rstd);
            })?;
            out.outputs.insert("y", y);
            out.gate.insert("y", k_cells);
            if centred {
                out.outputs.insert("mean", mean);
                out.gate.insert("mean", k_cells);
            }
            out.outputs.insert("rstd", rstd);
            out.gate.insert("rstd", k_cells);
        }
        Some(dy) => {
            let np = g.n_params();
            let mut dx = vec![ElementBudget::default(); n];
            let mut dgamma = vec![ElementBudget::default(); np];
            let mut dbeta = vec![ElementBudget::default(); np];
            let per = |gi: usize, cells: &[usize]| {
                let (xs, dys) = (gather(cells, prob.x), gather(cells, dy));
                backward_group(&ctx, gi, &xs, &dys, |j| g.params()[cells[j]], false)
            };
            each_group(g, per, |cells, bg| {
                for (&i, b) in cells.iter().zip(bg.dx) {
                    dx[i] = b;
                }
                // In the groups' order (the sums' order of a loop over them).
                add_parts(&bg.parts, 0, &mut dgamma, &mut dbeta);
            })?;
            for b in dgamma.iter_mut().chain(dbeta.iter_mut()) {
                nan_to_inf(b);
            }
            out.outputs.insert("dx", dx);
            out.gate.insert("dx", k_cells);
            if norm.affine.has_weight() {
                out.outputs.insert("dgamma", dgamma);
                out.gate.insert("dgamma", k_params);
            }
            if norm.affine.has_bias() {
                out.outputs.insert("dbeta", dbeta);
                out.gate.insert("dbeta", k_params);
            }
        }
    }
    Ok(out)
}

/// [`budget::ratio`](super::budget::ratio) against an exact [`SumOfRoots`] (`dgamma`): the
/// difference `exact − computed` is exact (a sum of roots shifted by a dyadic rational), its
/// absolute value rounded to f64 by the exact sign and rounding of
/// [`roots`](bnconf_spec::exact::roots); the same conventions for NaN/inf and zero budgets.
pub fn ratio_roots(computed: f64, exact: &SumOfRoots, u: f64, cond: f64, mag: f64) -> f64 {
    let Some(c) = f64_to_rational(computed) else {
        return f64::INFINITY;
    };
    let diff = exact.clone() + &QSqrt::rational(-c);
    if diff.is_zero() {
        return 0.0;
    }
    let budget = cond + mag;
    if budget.is_nan() || budget <= 0.0 {
        return f64::INFINITY;
    }
    let abs = if diff.signum() < 0 { -diff } else { diff };
    let err = abs.round(FloatFormat::F64).to_f64();
    err / budget / u
}

/// [`ratio_roots`] of a computed value against an element's budget (as
/// [`ElementBudget::ratio`]).
pub fn element_ratio_roots(b: &ElementBudget, computed: f64, exact: &SumOfRoots, u: f64) -> f64 {
    ratio_roots(computed, exact, u, b.cond, b.mag_at(u))
}

/// The per-cell passes of [`group_terms`], [`forward_group`] and [`backward_group`], each a
/// loop over slices of one length with the group's scalars in locals, so that nothing it
/// reads is written through a reference and it vectorises (a loop reading them through the
/// group's struct did not), forming every term with [`Iv`]'s arithmetic as the module's
/// formulas do: the same values as forming each term where it is used.
mod cells {
    use super::{eb, iv_of_f64, nan_to_inf, ElementBudget, Iv};

    /// A forward group's scalars that its cells' `y` budgets are formed from.
    #[derive(Clone, Copy)]
    pub(super) struct YScalars {
        pub(super) ru: f64,
        pub(super) r2: f64,
        pub(super) c: f64,
        pub(super) x1: f64,
        pub(super) hx: f64,
        pub(super) dk: f64,
        /// rms_norm: the summation of `mean(x²)` through `∂r/∂q` (0 for centred ops).
        pub(super) qsum: f64,
        /// The offset convention's `1 + gamma` (its rounding in `mag`).
        pub(super) offset: bool,
    }

    /// A backward group's scalars that its cells' `dx` budgets are formed from.
    #[derive(Clone, Copy)]
    pub(super) struct DxScalars {
        pub(super) ru: f64,
        pub(super) r2: f64,
        pub(super) c: f64,
        pub(super) e1: f64,
        pub(super) he: f64,
        pub(super) g1: f64,
        pub(super) hg: f64,
        pub(super) ex: f64,
        pub(super) zx: f64,
        pub(super) au: f64,
        pub(super) bu: f64,
        pub(super) hx: f64,
        pub(super) x1: f64,
        pub(super) dk: f64,
        pub(super) dd: f64,
    }

    /// Every cell's `dx` budget (module docs' table; `CENTRED`: the centred row of it) from its
    /// `|e|`, `|γdy|`, `|z|`, `|h|`, `|x|`, before scaling back: a loop with no branch and
    /// nothing it reads written, so that it vectorises.
    pub(super) fn dx_budgets<const CENTRED: bool>(
        k: &DxScalars,
        ae: &[f64],
        ge: &[f64],
        az: &[f64],
        ah: &[f64],
        ax: &[f64],
        dx: &mut [ElementBudget],
    ) {
        let n = dx.len();
        let (ae, ge, az, ah, ax) = (&ae[..n], &ge[..n], &az[..n], &ah[..n], &ax[..n]);
        let DxScalars {
            ru,
            r2,
            c,
            e1,
            he,
            g1,
            hg,
            ex,
            zx,
            au,
            bu,
            hx,
            x1,
            dk,
            dd,
        } = *k;
        for j in 0..n {
            let (ae, ge, az, h) = (ae[j], ge[j], az[j], ah[j]);
            let cond_dy = ru * (ae + c * e1 + h * he);
            let cond_g = ru * (ge + c * g1 + h * hg);
            let cond_x = if CENTRED {
                r2 * (az * hx + h * zx + bu * (ax[j] + x1 + h * hx))
            } else {
                r2 * (ae * hx + h * ex + bu * (ax[j] + 3.0 * h * hx))
            };
            let (mag, mag2) = if CENTRED {
                (
                    ru * (ae + e1 + h * he + x1 * ru * (he + h * e1)),
                    dk * r2 * ru * ((ae + au + 3.0 * h * bu) / 2.0 + au),
                )
            } else {
                (
                    ru * (ae + h * he) + ru * r2 * dd / 2.0 * (ae + 3.0 * h * he),
                    0.0,
                )
            };
            let mut b = eb(cond_dy + cond_g + cond_x, mag);
            b.mag2 = mag2;
            nan_to_inf(&mut b);
            dx[j] = b;
        }
    }

    /// A backward group's scalars that its terms of `dgamma` and `dbeta` are formed from.
    #[derive(Clone, Copy)]
    pub(super) struct PartScalars {
        pub(super) ru: f64,
        pub(super) c: f64,
        pub(super) r2: f64,
        pub(super) hx: f64,
        pub(super) x1: f64,
        pub(super) dk: f64,
        pub(super) dd: f64,
    }

    /// [`backward_group`]'s terms of `dgamma` and `dbeta` of a group whose every cell has its own
    /// parameter: per cell, `Σ dy`, `Σ dy·h` (each one term added to zero), `|dy·h|`, `|dy·x|`,
    /// `|dy|`, and from them `[cond, mag, mag2, Σ|dy|]` into `parts[j].1`.
    pub(super) fn distinct_parts(
        k: &PartScalars,
        dys: &[f64],
        hv: &[f64],
        he: &[f64],
        ah: &[f64],
        ax: &[f64],
        parts: &mut [(usize, [f64; 4])],
    ) {
        let n = parts.len();
        let (dys, hv, he, ah, ax) = (&dys[..n], &hv[..n], &he[..n], &ah[..n], &ax[..n]);
        let PartScalars {
            ru,
            c,
            r2,
            hx,
            x1,
            dk,
            dd,
        } = *k;
        for j in 0..n {
            let dyv = iv_of_f64(dys[j]);
            let ady = dyv.up();
            let sp = Iv::ZERO.add(dyv);
            let tp = Iv::ZERO.add(dyv.mul(Iv { v: hv[j], e: he[j] }));
            let (hdy, dyx, sdy) = (0.0 + ady * ah[j], 0.0 + ady * ax[j], 0.0 + ady);
            let cond = hdy + ru * (dyx + c * x1 * sp.up() + hx * tp.up());
            let mag = hdy + c * x1 * ru * sdy + (1.0 - c) * r2 * dd / 2.0 * hdy;
            parts[j].1 = [cond, mag, dk * r2 / 2.0 * hdy, sdy];
        }
    }

    /// `x·p1·p2` (`ldexp(x, −se)`, its factors hoisted) as enclosures, and their `|x|` bounds.
    pub(super) fn scaled_inputs(
        xs: &[f64],
        p1: f64,
        p2: f64,
        xv: &mut [f64],
        xe: &mut [f64],
        ax: &mut [f64],
    ) {
        let n = xs.len();
        let (xv, xe, ax) = (&mut xv[..n], &mut xe[..n], &mut ax[..n]);
        for i in 0..n {
            let e = iv_of_f64(xs[i] * p1 * p2);
            (xv[i], xe[i], ax[i]) = (e.v, e.e, e.up());
        }
    }

    /// `d = x − mu` and `d²`.
    pub(super) fn centred(
        xv: &[f64],
        xe: &[f64],
        mu: Iv,
        dv: &mut [f64],
        de: &mut [f64],
        qv: &mut [f64],
        qe: &mut [f64],
    ) {
        let n = xv.len();
        let (xe, dv, de, qv, qe) = (
            &xe[..n],
            &mut dv[..n],
            &mut de[..n],
            &mut qv[..n],
            &mut qe[..n],
        );
        for i in 0..n {
            let d = Iv { v: xv[i], e: xe[i] }.sub(mu);
            let q = d.mul(d);
            (dv[i], de[i], qv[i], qe[i]) = (d.v, d.e, q.v, q.e);
        }
    }

    /// `h = d·r`, `|h|` and `|d|`.
    pub(super) fn normalised(
        dv: &[f64],
        de: &[f64],
        r: Iv,
        hv: &mut [f64],
        he: &mut [f64],
        ah: &mut [f64],
        ad: &mut [f64],
    ) {
        let n = dv.len();
        let (de, hv, he, ah, ad) = (
            &de[..n],
            &mut hv[..n],
            &mut he[..n],
            &mut ah[..n],
            &mut ad[..n],
        );
        for i in 0..n {
            let d = Iv { v: dv[i], e: de[i] };
            let h = d.mul(r);
            (hv[i], he[i], ah[i], ad[i]) = (h.v, h.e, h.up(), d.up());
        }
    }

    /// From `dy` and each cell's weight (`w` in `[ehv, ehe]`, `|gamma|` in `ge` on entry):
    /// `e = dy·w`, `|e|`, `|gamma·dy|` (`|dy|`'s bound times `|gamma|`) and `e·h`, into
    /// `[ev, ee, ae, ge, ehv, ehe]`.
    pub(super) fn cotangent(dys: &[f64], hv: &[f64], he: &[f64], out: [&mut [f64]; 6]) {
        let n = dys.len();
        let [ev, ee, ae, ge, ehv, ehe] = out;
        let (hv, he, ev, ee, ae) = (&hv[..n], &he[..n], &mut ev[..n], &mut ee[..n], &mut ae[..n]);
        let (ge, ehv, ehe) = (&mut ge[..n], &mut ehv[..n], &mut ehe[..n]);
        for j in 0..n {
            let dyv = iv_of_f64(dys[j]);
            let w = Iv {
                v: ehv[j],
                e: ehe[j],
            };
            let e = dyv.mul(w);
            let eh = e.mul(Iv { v: hv[j], e: he[j] });
            (ev[j], ee[j], ae[j], ge[j]) = (e.v, e.e, e.up(), dyv.up() * ge[j]);
            (ehv[j], ehe[j]) = (eh.v, eh.e);
        }
    }

    /// Every cell's `y` budget from its `[|w|, |gamma|, |beta|, |h|, |x|]`.
    pub(super) fn y_budgets(k: &YScalars, by_cell: [&[f64]; 5], y: &mut [ElementBudget]) {
        let n = y.len();
        let [wu, ga, ba, ah, ax] = by_cell.map(|v| &v[..n]);
        let YScalars {
            ru,
            r2,
            c,
            x1,
            hx,
            dk,
            qsum,
            offset,
        } = *k;
        for a in 0..n {
            let wh = wu[a] * ah[a];
            let cond = wu[a] * ru * (ax[a] + c * x1 + ah[a] * hx) + ga[a] * ah[a] + ba[a];
            let off = if offset { wh } else { 0.0 };
            let mut e = eb(cond, c * wu[a] * ru * x1 + off + wh * qsum);
            e.mag2 = dk * wh * r2 / 2.0;
            nan_to_inf(&mut e);
            y[a] = e;
        }
    }

    /// `|z| = |e − A − h·B|`'s bound.
    pub(super) fn z_abs(
        ev: &[f64],
        ee: &[f64],
        hv: &[f64],
        he: &[f64],
        a: Iv,
        b: Iv,
        az: &mut [f64],
    ) {
        let n = ev.len();
        let (ee, hv, he, az) = (&ee[..n], &hv[..n], &he[..n], &mut az[..n]);
        for j in 0..n {
            let h = Iv { v: hv[j], e: he[j] };
            az[j] = Iv { v: ev[j], e: ee[j] }.sub(a).sub(h.mul(b)).up();
        }
    }
}

#[cfg(test)]
#[path = "family_budget_tests.rs"]
mod tests;
