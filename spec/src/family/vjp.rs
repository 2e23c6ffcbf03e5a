//! The family's backward from the definition: `Jᵀdy` of [`normalize`] by dual numbers, w.r.t.
//! `x`, `gamma` and `beta` — what the closed forms of [`super::norm`] must equal exactly.
//!
//! A column of the Jacobian w.r.t. `x` touches one group only (its other entries are exact
//! rational zeros), so `Jᵀdy` w.r.t. `x` stays in each group's field; a column w.r.t. a
//! parameter crosses groups, so `Jᵀdy` w.r.t. `gamma`/`beta` is summed as a [`SumOfRoots`].

use super::grouping::Grouping;
use super::norm::{normalize, Norm};
use crate::error::SpecError;
use crate::exact::roots::sum_of_qsqrts;
use crate::exact::{QSqrt, SumOfRoots};
use crate::num::Dual;
use crate::vjp::{jacobian, vjp};

type D = Dual<QSqrt>;

fn consts(v: Option<&[QSqrt]>) -> Option<Vec<D>> {
    v.map(|v| v.iter().cloned().map(Dual::constant).collect())
}

/// `Jᵀdy` w.r.t. `x` of [`normalize`]'s `y`.
pub fn normalize_vjp_x(
    g: &Grouping,
    norm: &Norm,
    x: &[QSqrt],
    gamma: Option<&[QSqrt]>,
    beta: Option<&[QSqrt]>,
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let (gd, bd, ed) = (consts(gamma), consts(beta), D::constant(eps.clone()));
    vjp(
        |xs: &[D]| normalize(g, norm, xs, gd.as_deref(), bd.as_deref(), &ed).map(|f| f.y),
        x,
        dy,
    )
}

/// `Σ_i dy_i·J[i][j]` for each column `j`, entries of different fields summed exactly.
fn transpose_apply_roots(j: &[Vec<QSqrt>], dy: &[QSqrt], n_in: usize) -> Vec<SumOfRoots> {
    (0..n_in)
        .map(|col| {
            let prods: Vec<QSqrt> = j.iter().zip(dy).map(|(row, d)| &row[col] * d).collect();
            sum_of_qsqrts(&prods)
        })
        .collect()
}

/// `J_gammaᵀdy` of [`normalize`]'s `y` (the definition of `dgamma`); `None` without a weight.
pub fn normalize_vjp_gamma(
    g: &Grouping,
    norm: &Norm,
    x: &[QSqrt],
    gamma: Option<&[QSqrt]>,
    beta: Option<&[QSqrt]>,
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Option<Vec<SumOfRoots>>, SpecError> {
    let Some(gamma) = gamma else {
        return Ok(None);
    };
    let (xd, bd, ed) = (
        consts(Some(x)).unwrap(),
        consts(beta),
        D::constant(eps.clone()),
    );
    let j = jacobian(
        |gs: &[D]| normalize(g, norm, &xd, Some(gs), bd.as_deref(), &ed).map(|f| f.y),
        gamma,
    )?;
    Ok(Some(transpose_apply_roots(&j, dy, gamma.len())))
}

/// `J_betaᵀdy` of [`normalize`]'s `y` (the definition of `dbeta`); `None` without a bias.
pub fn normalize_vjp_beta(
    g: &Grouping,
    norm: &Norm,
    x: &[QSqrt],
    gamma: Option<&[QSqrt]>,
    beta: Option<&[QSqrt]>,
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Option<Vec<SumOfRoots>>, SpecError> {
    let Some(beta) = beta else {
        return Ok(None);
    };
    let (xd, gd, ed) = (
        consts(Some(x)).unwrap(),
        consts(gamma),
        D::constant(eps.clone()),
    );
    let j = jacobian(
        |bs: &[D]| normalize(g, norm, &xd, gd.as_deref(), Some(bs), &ed).map(|f| f.y),
        beta,
    )?;
    Ok(Some(transpose_apply_roots(&j, dy, beta.len())))
}
