//! The family's backward from the definition: `Jᵀdy` of [`normalize`] by dual numbers, w.r.t.
//! `x`, `gamma` and `beta` — what the closed forms of [`super::norm`] must equal exactly.
//!
//! A column of the Jacobian w.r.t. `x` touches one group only (its other entries are exact
//! rational zeros), so `Jᵀdy` w.r.t. `x` stays in each group's field; a column w.r.t. a
//! parameter crosses groups, so `Jᵀdy` w.r.t. `gamma`/`beta` is summed as a [`SumOfRoots`].

use super::grouping::Grouping;
use super::norm::{normalize, Inputs, Norm};
use crate::error::SpecError;
use crate::exact::roots::sum_of_qsqrts;
use crate::exact::{QSqrt, SumOfRoots};
use crate::num::Dual;
use crate::vjp::{jacobian, vjp};

type D = Dual<QSqrt>;

fn consts(v: &[QSqrt]) -> Vec<D> {
    v.iter().cloned().map(Dual::constant).collect()
}

/// `Jᵀdy` w.r.t. `x` of [`normalize`]'s `y`.
pub fn normalize_vjp_x(
    g: &Grouping,
    norm: &Norm,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let (gd, bd) = (inp.gamma.map(consts), inp.beta.map(consts));
    let ed = D::constant(inp.eps.clone());
    vjp(
        |xs: &[D]| {
            let d = Inputs {
                x: xs,
                gamma: gd.as_deref(),
                beta: bd.as_deref(),
                eps: &ed,
            };
            normalize(g, norm, d).map(|f| f.y)
        },
        inp.x,
        dy,
    )
}

/// A parameter vector of the forward: `gamma` or `beta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// The weight.
    Gamma,
    /// The bias.
    Beta,
}

/// `J_pᵀdy` of [`normalize`]'s `y` w.r.t. the parameter `p` (the definition of `dgamma`,
/// `dbeta`): `Σ_i dy_i·∂y_i/∂p_j`, summed across groups exactly as a [`SumOfRoots`]; `None`
/// when the affine mode has no such parameter.
pub fn normalize_vjp_param(
    g: &Grouping,
    norm: &Norm,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
    p: Param,
) -> Result<Option<Vec<SumOfRoots>>, SpecError> {
    let seeded = match p {
        Param::Gamma => inp.gamma,
        Param::Beta => inp.beta,
    };
    let Some(seeded) = seeded else {
        return Ok(None);
    };
    let (xd, gd, bd) = (consts(inp.x), inp.gamma.map(consts), inp.beta.map(consts));
    let ed = D::constant(inp.eps.clone());
    let j = jacobian(
        |ps: &[D]| {
            let d = Inputs {
                x: &xd,
                gamma: if p == Param::Gamma {
                    Some(ps)
                } else {
                    gd.as_deref()
                },
                beta: if p == Param::Beta {
                    Some(ps)
                } else {
                    bd.as_deref()
                },
                eps: &ed,
            };
            normalize(g, norm, d).map(|f| f.y)
        },
        seeded,
    )?;
    // Column j: Σ_i dy_i·J[i][j], entries of different fields summed exactly.
    Ok(Some(
        (0..seeded.len())
            .map(|col| {
                let prods: Vec<QSqrt> = j.iter().zip(dy).map(|(row, d)| &row[col] * d).collect();
                sum_of_qsqrts(&prods)
            })
            .collect(),
    ))
}
