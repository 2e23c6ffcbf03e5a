//! The normalization core, written once over a [`Grouping`] and a [`Norm`] (which statistic,
//! which affine map): LayerNorm and GroupNorm are [`normalize`] over two groupings, RMSNorm is
//! the same with mean 0, BatchNorm is the per-channel grouping. The closed-form backward
//! ([`normalize_grad_input`], [`dgamma`], [`dbeta`]) is separate code, checked against `Jᵀdy`
//! of [`normalize`] exactly ([`super::vjp`], the property tests).
//!
//! Per group, over its `K` cells, with `var` biased (divided by `K`):
//! `mean = Σx/K` (0 when not centering), `var = Σ(x − mean)²/K`, `rstd = (var + eps)^(−1/2)`,
//! `xhat = (x − mean)·rstd`, `y = w·xhat + b` with `w`, `b` the cell's parameter.

use super::grouping::Grouping;
use crate::error::SpecError;
use crate::exact::roots::sum_of_qsqrts;
use crate::exact::{QSqrt, SumOfRoots};
use crate::num::Scalar;

/// Whether the statistic centers the group (LayerNorm, GroupNorm, BatchNorm) or not (RMSNorm:
/// `rstd = (Σx²/K + eps)^(−1/2)`, `xhat = x·rstd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Centering {
    /// Subtract the group mean.
    Mean,
    /// Mean taken as 0 (root mean square).
    Zero,
}

/// Which affine parameters the case has (FORMAT.md `affine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Affine {
    /// `gamma` and `beta`.
    WeightBias,
    /// `gamma` only (beta = 0, no `dbeta`).
    Weight,
    /// Neither (weight 1, bias 0, no `dgamma`, no `dbeta`).
    None,
}

impl Affine {
    /// Every mode.
    pub const ALL: [Affine; 3] = [Affine::WeightBias, Affine::Weight, Affine::None];
    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            Affine::WeightBias => "weight_bias",
            Affine::Weight => "weight",
            Affine::None => "none",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<Affine> {
        Affine::ALL.into_iter().find(|a| a.name() == s)
    }
    /// Whether there is a `gamma` (and a `dgamma`).
    pub fn has_weight(self) -> bool {
        self != Affine::None
    }
    /// Whether there is a `beta` (and a `dbeta`).
    pub fn has_bias(self) -> bool {
        self == Affine::WeightBias
    }
}

/// rms_norm's weight convention (FORMAT.md `convention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RmsConvention {
    /// `y = gamma·xhat`.
    Standard,
    /// `y = (1 + gamma)·xhat` (Gemma); `dgamma` is w.r.t. that `gamma`.
    Offset,
}

impl RmsConvention {
    /// Both conventions.
    pub const ALL: [RmsConvention; 2] = [RmsConvention::Standard, RmsConvention::Offset];
    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            RmsConvention::Standard => "standard",
            RmsConvention::Offset => "offset",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<RmsConvention> {
        RmsConvention::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One member of the family, up to its grouping: the statistic and the affine map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Norm {
    /// The op's FORMAT.md name (for error messages).
    pub op: &'static str,
    /// Centered (mean, var) or root mean square.
    pub centering: Centering,
    /// Which parameters.
    pub affine: Affine,
    /// The weight convention (`Standard` except for rms_norm `offset`).
    pub convention: RmsConvention,
}

/// The forward's outputs: `y` per cell, and per group `mean` (`None` when not centering) and
/// `rstd`.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward<T> {
    /// Normalized output, one per cell of `x` (same order).
    pub y: Vec<T>,
    /// Group means (centering only).
    pub mean: Option<Vec<T>>,
    /// Group reciprocal standard deviations `(var + eps)^(−1/2)`.
    pub rstd: Vec<T>,
}

/// The backward's outputs: `dx` per cell; `dgamma` (a sum over groups with different
/// radicands: [`SumOfRoots`]) and `dbeta` per parameter, when the affine mode has them.
#[derive(Clone, Debug, PartialEq)]
pub struct Backward {
    /// Input gradient.
    pub dx: Vec<QSqrt>,
    /// `Σ dy·xhat` over every cell using that gamma.
    pub dgamma: Option<Vec<SumOfRoots>>,
    /// `Σ dy` over every cell using that beta.
    pub dbeta: Option<Vec<QSqrt>>,
}

/// The inputs of a family op (FORMAT.md `inputs`): `x`, the parameters the affine mode has,
/// and `eps`. A backward also takes `dy`, and does not use `beta`.
#[derive(Debug)]
pub struct Inputs<'a, T> {
    /// One value per cell.
    pub x: &'a [T],
    /// One per parameter, iff the affine mode has a weight.
    pub gamma: Option<&'a [T]>,
    /// One per parameter, iff the affine mode has a bias (forward only).
    pub beta: Option<&'a [T]>,
    /// `eps ≥ 0`.
    pub eps: &'a T,
}

impl<T> Clone for Inputs<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Inputs<'_, T> {}

fn check_len<T>(field: &str, v: &[T], n: usize) -> Result<(), SpecError> {
    if v.len() != n {
        return Err(SpecError::Length {
            field: field.into(),
            expected: n,
            got: v.len(),
            shape: vec![n],
        });
    }
    Ok(())
}

/// A parameter input checked against the affine mode: given iff `wanted`, of length
/// `n_params`.
fn check_param<T>(
    g: &Grouping,
    norm: &Norm,
    field: &str,
    v: Option<&[T]>,
    wanted: bool,
) -> Result<(), SpecError> {
    match (v, wanted) {
        (Some(v), true) => check_len(field, v, g.n_params()),
        (None, true) => Err(SpecError::MissingInput {
            op: norm.op,
            field: field.into(),
        }),
        (Some(_), false) => Err(SpecError::UnknownInput {
            op: norm.op,
            field: field.into(),
            expected: format!("no {field} with affine `{}`", norm.affine.name()),
        }),
        (None, false) => Ok(()),
    }
}

/// Per-group statistics `(mean, rstd)`: `mean = Σx/K` (0 when not centering),
/// `q = Σ(x − mean)²/K + eps`, `rstd = q^(−1/2)`. (C1) `q > 0` for every group, else
/// [`SpecError::NonPositiveVariance`] naming the group (its index in `channel`); `eps ≥ 0`,
/// else [`SpecError::NegativeEps`].
pub fn group_stats<T: Scalar>(
    g: &Grouping,
    centering: Centering,
    x: &[T],
    eps: &T,
) -> Result<(Vec<T>, Vec<T>), SpecError> {
    check_len("x", x, g.len())?;
    if eps.value().signum() < 0 {
        return Err(SpecError::NegativeEps {
            value: eps.value().to_string(),
        });
    }
    let mut means = Vec::with_capacity(g.groups().len());
    let mut rstds = Vec::with_capacity(g.groups().len());
    for (gi, cells) in g.groups().iter().enumerate() {
        let k = T::int(cells.len() as i64);
        let mean = match centering {
            Centering::Mean => cells.iter().fold(T::int(0), |s, &i| s + x[i].clone()) / k.clone(),
            Centering::Zero => T::int(0),
        };
        let ss = cells.iter().fold(T::int(0), |s, &i| {
            let d = x[i].clone() - mean.clone();
            s + d.clone() * d
        });
        let q = ss / k + eps.clone();
        if q.value().signum() <= 0 {
            return Err(SpecError::NonPositiveVariance {
                channel: gi,
                what: match centering {
                    Centering::Mean => "var + eps",
                    Centering::Zero => "mean(x²) + eps",
                },
                value: q.value().to_string(),
            });
        }
        rstds.push(T::int(1) / q.sqrt());
        means.push(mean);
    }
    Ok((means, rstds))
}

/// The cell's weight: `gamma_p`, `1 + gamma_p` (offset) or 1 (no weight).
fn weight<T: Scalar>(norm: &Norm, gamma: Option<&[T]>, p: usize) -> T {
    match (gamma, norm.convention) {
        (Some(g), RmsConvention::Standard) => g[p].clone(),
        (Some(g), RmsConvention::Offset) => T::int(1) + g[p].clone(),
        (None, _) => T::int(1),
    }
}

/// **The family's forward**: per group the statistics of [`group_stats`], then per cell
/// `y = w·xhat + b` (`w` = [`weight`]: `gamma`, `1 + gamma` or 1; `b` = `beta` or 0).
pub fn normalize<T: Scalar>(
    g: &Grouping,
    norm: &Norm,
    inp: Inputs<'_, T>,
) -> Result<Forward<T>, SpecError> {
    let Inputs {
        x,
        gamma,
        beta,
        eps,
    } = inp;
    check_param(g, norm, "gamma", gamma, norm.affine.has_weight())?;
    check_param(g, norm, "beta", beta, norm.affine.has_bias())?;
    let (means, rstds) = group_stats(g, norm.centering, x, eps)?;
    let mut y: Vec<Option<T>> = vec![None; x.len()];
    for (gi, cells) in g.groups().iter().enumerate() {
        for &i in cells {
            let p = g.params()[i];
            let xh = (x[i].clone() - means[gi].clone()) * rstds[gi].clone();
            let mut v = weight(norm, gamma, p) * xh;
            if let Some(b) = beta {
                v = v + b[p].clone();
            }
            y[i] = Some(v);
        }
    }
    Ok(Forward {
        y: y.into_iter()
            .map(|v| v.expect("(G1) every cell in a group"))
            .collect(),
        mean: (norm.centering == Centering::Mean).then_some(means),
        rstd: rstds,
    })
}

/// **The family's closed-form input gradient.** Per group, with `g_i = dy_i·w_i` and the means
/// over the group's `K` cells:
/// centered `dx_i = rstd·(g_i − mean(g) − xhat_i·mean(g·xhat))` (three terms; BatchNorm's S6
/// when `w` is constant on the group), not centered `dx_i = rstd·(g_i − xhat_i·mean(g·xhat))`
/// (two terms).
pub fn normalize_grad_input<T: Scalar>(
    g: &Grouping,
    norm: &Norm,
    inp: Inputs<'_, T>,
    dy: &[T],
) -> Result<Vec<T>, SpecError> {
    let Inputs { x, gamma, eps, .. } = inp;
    check_len("dy", dy, g.len())?;
    check_param(g, norm, "gamma", gamma, norm.affine.has_weight())?;
    let (means, rstds) = group_stats(g, norm.centering, x, eps)?;
    let mut dx: Vec<Option<T>> = vec![None; x.len()];
    for (gi, cells) in g.groups().iter().enumerate() {
        let (mu, r) = (&means[gi], &rstds[gi]);
        let k = T::int(cells.len() as i64);
        let xh: Vec<T> = cells
            .iter()
            .map(|&i| (x[i].clone() - mu.clone()) * r.clone())
            .collect();
        let gs: Vec<T> = cells
            .iter()
            .map(|&i| dy[i].clone() * weight(norm, gamma, g.params()[i]))
            .collect();
        let mean_g = gs.iter().fold(T::int(0), |s, v| s + v.clone()) / k.clone();
        let mean_gx = gs
            .iter()
            .zip(&xh)
            .fold(T::int(0), |s, (a, b)| s + a.clone() * b.clone())
            / k;
        for ((&i, gv), h) in cells.iter().zip(gs).zip(xh) {
            let mut t = gv - h * mean_gx.clone();
            if norm.centering == Centering::Mean {
                t = t - mean_g.clone();
            }
            dx[i] = Some(r.clone() * t);
        }
    }
    Ok(dx
        .into_iter()
        .map(|v| v.expect("(G1) every cell in a group"))
        .collect())
}

/// **The family's `dgamma`**: `dgamma_p = Σ dy_i·xhat_i` over every cell `i` using parameter
/// `p` (every row, sample and spatial cell), xhat recomputed from `x` with its group's
/// statistics. Summed per group in the group's field first, then across groups as a
/// [`SumOfRoots`] (groups have different radicands). The same in both conventions
/// (`∂y/∂gamma = xhat`).
pub fn dgamma(
    g: &Grouping,
    centering: Centering,
    x: &[QSqrt],
    dy: &[QSqrt],
    eps: &QSqrt,
) -> Result<Vec<SumOfRoots>, SpecError> {
    check_len("dy", dy, g.len())?;
    let (means, rstds) = group_stats(g, centering, x, eps)?;
    // per[p] = the per-group partial sums for parameter p, each in one field.
    let mut per: Vec<Vec<QSqrt>> = vec![Vec::new(); g.n_params()];
    for (gi, cells) in g.groups().iter().enumerate() {
        let mut part: std::collections::BTreeMap<usize, QSqrt> = Default::default();
        for &i in cells {
            let xh = (&x[i] - &means[gi]) * &rstds[gi];
            let e = part.entry(g.params()[i]).or_insert_with(|| QSqrt::int(0));
            *e = &*e + &(&dy[i] * &xh);
        }
        for (p, v) in part {
            per[p].push(v);
        }
    }
    Ok(per.iter().map(sum_of_qsqrts).collect())
}

/// **The family's `dbeta`**: `dbeta_p = Σ dy_i` over every cell using parameter `p`.
pub fn dbeta<T: Scalar>(g: &Grouping, dy: &[T]) -> Result<Vec<T>, SpecError> {
    check_len("dy", dy, g.len())?;
    let mut out = vec![T::int(0); g.n_params()];
    for cells in g.groups() {
        for &i in cells {
            let p = g.params()[i];
            out[p] = out[p].clone() + dy[i].clone();
        }
    }
    Ok(out)
}

/// The whole closed-form backward: [`normalize_grad_input`], and [`dgamma`], [`dbeta`] when
/// the affine mode has them (`inp.beta` is not used).
pub fn normalize_backward(
    g: &Grouping,
    norm: &Norm,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Backward, SpecError> {
    let dx = normalize_grad_input(g, norm, inp, dy)?;
    let dgamma = if norm.affine.has_weight() {
        Some(dgamma(g, norm.centering, inp.x, dy, inp.eps)?)
    } else {
        None
    };
    let dbeta = if norm.affine.has_bias() {
        Some(dbeta(g, dy)?)
    } else {
        None
    };
    Ok(Backward { dx, dgamma, dbeta })
}
