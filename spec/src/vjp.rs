//! The VJP spec from the definition: the exact Jacobian by forward-mode dual numbers over
//! Q(sqrt(q)), and the abstract VJP `J^T dy` (seed: `pdiv`, `HasVJP.backward`).

use crate::exact::QSqrt;
use crate::num::Dual;

/// Exact Jacobian `J[i][j] = ∂f_i/∂x_j` of `f` at `x`: one forward-mode pass per input,
/// seeding input j with tangent 1.
pub fn jacobian<E>(
    f: impl Fn(&[Dual<QSqrt>]) -> Result<Vec<Dual<QSqrt>>, E>,
    x: &[QSqrt],
) -> Result<Vec<Vec<QSqrt>>, E> {
    let mut cols = Vec::with_capacity(x.len());
    for j in 0..x.len() {
        let seeded: Vec<Dual<QSqrt>> = x
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if i == j {
                    Dual::variable(v.clone())
                } else {
                    Dual::constant(v.clone())
                }
            })
            .collect();
        cols.push(f(&seeded)?.into_iter().map(|d| d.t).collect::<Vec<_>>());
    }
    let rows = cols.first().map_or(0, |c| c.len());
    Ok((0..rows)
        .map(|i| cols.iter().map(|col| col[i].clone()).collect())
        .collect())
}

/// `J^T dy`: the abstract VJP of `f` at `x` with cotangent `dy`.
pub fn vjp<E>(
    f: impl Fn(&[Dual<QSqrt>]) -> Result<Vec<Dual<QSqrt>>, E>,
    x: &[QSqrt],
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, E> {
    let j = jacobian(f, x)?;
    Ok(transpose_apply(&j, dy, x.len()))
}

/// `J^T dy` for a Jacobian given as rows.
pub fn transpose_apply(j: &[Vec<QSqrt>], dy: &[QSqrt], n_in: usize) -> Vec<QSqrt> {
    (0..n_in)
        .map(|col| {
            j.iter()
                .zip(dy)
                .fold(QSqrt::int(0), |acc, (row, d)| acc + &row[col] * d)
        })
        .collect()
}
