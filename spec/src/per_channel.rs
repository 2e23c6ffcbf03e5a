//! The seed items, one function each, named after them (S1–S6, S11–S16, S18–S20, S25–S31;
//! the bridges S7–S10, S17, S21–S24 are in [`crate::layout`]).
//!
//! A matrix view `[C, m]` is a row-major slice with `oc` rows; a flat vector is the same data.
//! Each function documents its seed item; the generic ones work over any [`Scalar`], the
//! abstract VJPs (S3, S5, S19, S27) are `J^T dy` over [`QSqrt`].

use crate::channel as ch;
use crate::error::SpecError;
use crate::exact::QSqrt;
use crate::layout::{
    bnchw_back, bnchw_fwd, bnchw_transpose_back, bnchw_transpose_fwd, mat_to_tensor3, reassoc_back,
    reassoc_fwd, reindex_vjp, tensor3_to_mat,
};
use crate::num::{Dual, Scalar};
use crate::vjp::vjp;

fn c1<T: Scalar>(c: usize, what: &'static str, var: &T, eps: &T) -> Result<(), SpecError> {
    let q = var.value().clone() + eps.value().clone();
    if q.signum() <= 0 {
        return Err(SpecError::NonPositiveVariance {
            channel: c,
            what,
            value: q.to_string(),
        });
    }
    Ok(())
}

/// **S1** — per-row lift of a family of per-row maps: row `r` of the `[oc, m]` matrix goes
/// through its own map `g(r, row)`; the result rows are concatenated. Applied to a family of
/// VJPs (`g(r, (row, dy_row))`) it is the matrix backward: block-diagonal by construction.
pub fn per_row_lift<T, U, E>(
    oc: usize,
    mat: &[T],
    mut g: impl FnMut(usize, &[T]) -> Result<Vec<U>, E>,
) -> Result<Vec<U>, E> {
    let m = mat.len() / oc.max(1);
    let mut out = Vec::with_capacity(mat.len());
    for r in 0..oc {
        out.extend(g(r, &mat[r * m..(r + 1) * m])?);
    }
    Ok(out)
}

/// **S2** `bnPerChannel` — per-channel BN, matrix view: row c (m = h·w cells) normalised by
/// its own statistics with its own `(gamma_c, beta_c)`: `y = gamma_c·(x − mean_c)/sqrt(var_c + eps) + beta_c`.
/// (C1) `var_c + eps > 0`.
pub fn bn_per_channel<T: Scalar>(
    oc: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    per_row_lift(oc, x, |c, row| {
        let (_, var) = ch::batch_stats(row);
        c1(c, "var + eps", &var, eps)?;
        Ok(ch::bn_forward(row, &gamma[c], &beta[c], eps).0)
    })
}

/// **S3** `bnPerChannel_has_vjp` — the abstract VJP of S2 w.r.t. x: each row's `J_c^T dy_c`
/// (exact Jacobian of the one-channel BN by dual numbers); lifted per row, so the
/// cross-channel blocks are zero by construction (`pdivMat_rowIndep_perRow_at`).
pub fn bn_per_channel_vjp(
    oc: usize,
    x: &[QSqrt],
    gamma: &[QSqrt],
    beta: &[QSqrt],
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let m = x.len() / oc.max(1);
    per_row_lift(oc, x, |c, row| {
        let (_, var) = ch::batch_stats(row);
        c1(c, "var + eps", &var, eps)?;
        let (g, b, e) = (
            Dual::constant(gamma[c].clone()),
            Dual::constant(beta[c].clone()),
            Dual::constant(eps.clone()),
        );
        vjp(
            |xs: &[Dual<QSqrt>]| Ok::<_, SpecError>(ch::bn_forward(xs, &g, &b, &e).0),
            row,
            &dy[c * m..(c + 1) * m],
        )
    })
}

/// **S4** `bnPerChannelFlat` — S2 as a flat op `Vec(oc·m) → Vec(oc·m)`: channel c is the
/// m-wide slab at flat positions `c·m + s` (row-major), so the data is the same vector.
pub fn bn_per_channel_flat<T: Scalar>(
    oc: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    bn_per_channel(oc, x, gamma, beta, eps)
}

/// **S5** `bnPerChannelFlat_has_vjp` — the flat VJP: S3 bridged to `Vec(oc·m)`.
pub fn bn_per_channel_flat_vjp(
    oc: usize,
    x: &[QSqrt],
    gamma: &[QSqrt],
    beta: &[QSqrt],
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    bn_per_channel_vjp(oc, x, gamma, beta, eps, dy)
}

/// **S6** `bnPerChannel_grad_input` — the consolidated three-term input gradient per channel:
/// `dx = gamma_c·r_c·(dy − mean(dy) − xhat·mean(dy·xhat))`, `r_c = (var_c + eps)^(-1/2)`.
/// Must equal S5's abstract VJP (tested exactly).
pub fn bn_per_channel_grad_input<T: Scalar>(
    oc: usize,
    x: &[T],
    dy: &[T],
    gamma: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let m = x.len() / oc.max(1);
    per_row_lift(oc, x, |c, row| {
        let (_, var) = ch::batch_stats(row);
        c1(c, "var + eps", &var, eps)?;
        Ok(ch::bn_grad_input(
            row,
            &dy[c * m..(c + 1) * m],
            &gamma[c],
            eps,
        ))
    })
}

/// **S12** `bnPerChannelEval` — per-channel inference BN, matrix layout: row c with channel
/// c's frozen statistics. (C1) `var_c + eps > 0`.
pub fn bn_per_channel_eval<T: Scalar>(
    oc: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    mean: &[T],
    var: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    per_row_lift(oc, x, |c, row| {
        c1(c, "var + eps", &var[c], eps)?;
        Ok(ch::bn_eval(
            row, &gamma[c], &beta[c], &mean[c], &var[c], eps,
        ))
    })
}

/// **S13** `bnPerChannelEvalFlat` — S12 on the flat `Vec(oc·m)` (the S4 peer).
pub fn bn_per_channel_eval_flat<T: Scalar>(
    oc: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    mean: &[T],
    var: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    bn_per_channel_eval(oc, x, gamma, beta, mean, var, eps)
}

/// **S14** `bnPerChannelEvalTensor3` — S13 on the Tensor3 `(oc·h)·w` layout, through the
/// reassoc bridge: `mat_to_tensor3 ∘ S13 ∘ tensor3_to_mat`.
#[allow(clippy::too_many_arguments)]
pub fn bn_per_channel_eval_tensor3<T: Scalar>(
    oc: usize,
    h: usize,
    w: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    mean: &[T],
    var: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let mat = tensor3_to_mat(oc, h, w, x);
    Ok(mat_to_tensor3(
        oc,
        h,
        w,
        &bn_per_channel_eval_flat(oc, &mat, gamma, beta, mean, var, eps)?,
    ))
}

/// **S15** `bnPerChannel_grad_gamma` — `dgamma_c = Σ_s dy_(c,s)·xhat_(c,s)`, xhat recomputed
/// from the saved input with the channel's own statistics.
pub fn bn_per_channel_grad_gamma<T: Scalar>(
    oc: usize,
    x: &[T],
    dy: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let m = x.len() / oc.max(1);
    per_row_lift(oc, x, |c, row| {
        let (_, var) = ch::batch_stats(row);
        c1(c, "var + eps", &var, eps)?;
        Ok(vec![ch::bn_grad_gamma(row, &dy[c * m..(c + 1) * m], eps)])
    })
}

/// **S16** `bnPerChannel_grad_beta` — `dbeta_c = Σ_s dy_(c,s)`.
pub fn bn_per_channel_grad_beta<T: Scalar>(oc: usize, dy: &[T]) -> Vec<T> {
    per_row_lift(oc, dy, |_, row| {
        Ok::<_, SpecError>(vec![ch::bn_grad_beta(row)])
    })
    .expect("infallible")
}

fn t3_perm(oc: usize, h: usize, w: usize) -> Vec<usize> {
    (0..oc * h * w).map(|i| reassoc_fwd(h * w, i)).collect()
}
fn t3_back_perm(oc: usize, h: usize, w: usize) -> Vec<usize> {
    (0..oc * h * w).map(|i| reassoc_back(h * w, i)).collect()
}

/// **S18** `bnPerChannelTensor3` — per-channel BN on the Tensor3 `(oc·h)·w` layout:
/// `reassocBack ∘ bnPerChannelFlat ∘ reassocFwd` (relabel to Mat-split, normalise each
/// channel over its h·w cells, relabel back).
pub fn bn_per_channel_tensor3<T: Scalar>(
    oc: usize,
    h: usize,
    w: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let mat = tensor3_to_mat(oc, h, w, x);
    Ok(mat_to_tensor3(
        oc,
        h,
        w,
        &bn_per_channel_flat(oc, &mat, gamma, beta, eps)?,
    ))
}

/// **S19** `bnPerChannelTensor3_has_vjp` — the VJP of S18 by the chain rule through the
/// bridge (`vjp_comp`, twice): `dx = fwd^T( S5( back^T dy ) )`, each reindex VJP a scatter (S17).
#[allow(clippy::too_many_arguments)]
pub fn bn_per_channel_tensor3_vjp(
    oc: usize,
    h: usize,
    w: usize,
    x: &[QSqrt],
    gamma: &[QSqrt],
    beta: &[QSqrt],
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let fwd = t3_perm(oc, h, w); // Mat position i reads Tensor3 cell fwd[i]
    let back = inverse(&t3_back_perm(oc, h, w)); // Tensor3 position j reads Mat cell back[j]
    vjp_through_bridge(oc, &fwd, &back, x, gamma, beta, eps, dy)
}

/// The VJP of `back ∘ S4 ∘ fwd` by the chain rule (`vjp_comp`, twice):
/// `dx = fwd^T( S5( back^T dy ) )`, each reindex VJP a scatter (S17). `fwd[i]` is the layout
/// cell Mat position i reads; `back[j]` the Mat cell layout position j reads.
#[allow(clippy::too_many_arguments)]
fn vjp_through_bridge(
    oc: usize,
    fwd: &[usize],
    back: &[usize],
    x: &[QSqrt],
    gamma: &[QSqrt],
    beta: &[QSqrt],
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let n = x.len();
    let mat = crate::layout::gather(fwd, x);
    let dmat = reindex_vjp(back, dy, n, QSqrt::int(0));
    let dmat_in = bn_per_channel_flat_vjp(oc, &mat, gamma, beta, eps, &dmat)?;
    Ok(reindex_vjp(fwd, &dmat_in, n, QSqrt::int(0)))
}

/// **S20** `bnPerChannelTensor3_grad_input` — the renderable backward on `(oc·h)·w`:
/// relabel to Mat-split, S6 per channel, relabel back.
pub fn bn_per_channel_tensor3_grad_input<T: Scalar>(
    oc: usize,
    h: usize,
    w: usize,
    x: &[T],
    dy: &[T],
    gamma: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let (mx, mdy) = (tensor3_to_mat(oc, h, w, x), tensor3_to_mat(oc, h, w, dy));
    Ok(mat_to_tensor3(
        oc,
        h,
        w,
        &bn_per_channel_grad_input(oc, &mx, &mdy, gamma, eps)?,
    ))
}

/// **S25** `bnBatchTensor4` — batch BN on `[N,C,H,W]`: `bnchwBack ∘ bnPerChannelFlat ∘
/// bnchwFwd` with m = N·H·W, each channel normalised over all its batch and spatial cells.
#[allow(clippy::too_many_arguments)]
pub fn bn_batch_tensor4<T: Scalar>(
    n: usize,
    oc: usize,
    hw: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let mat = bnchw_fwd(n, oc, hw, x);
    Ok(bnchw_back(
        n,
        oc,
        hw,
        &bn_per_channel_flat(oc, &mat, gamma, beta, eps)?,
    ))
}

/// **S26** `syncBnBatchTensor4` — sync BN on `[N,C,H,W]` with `mean` and the second moment
/// `m2` handed in (the all-reduced global statistics): `var = m2 − mean²`, then S25's
/// bridge around inference BN. E[x²] of a union of equal shards is the mean of the shards'
/// E[x²], so `m2` survives a mean all-reduce; variances do not. (C1) `m2 − mean² + eps > 0`.
#[allow(clippy::too_many_arguments)]
pub fn sync_bn_batch_tensor4<T: Scalar>(
    n: usize,
    oc: usize,
    hw: usize,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    mean: &[T],
    m2: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let mat = bnchw_fwd(n, oc, hw, x);
    let y = per_row_lift(oc, &mat, |c, row| {
        c1(c, "m2 - mean^2 + eps", &ch::sync_var(&mean[c], &m2[c]), eps)?;
        Ok(ch::sync_bn(row, &gamma[c], &beta[c], &mean[c], &m2[c], eps))
    })?;
    Ok(bnchw_back(n, oc, hw, &y))
}

/// **S27** `bnBatchTensor4_has_vjp` — VJP of S25, block-diagonal across channels (coupling
/// the whole batch within a channel), lifted through the transpose bridge.
#[allow(clippy::too_many_arguments)]
pub fn bn_batch_tensor4_vjp(
    n: usize,
    oc: usize,
    hw: usize,
    x: &[QSqrt],
    gamma: &[QSqrt],
    beta: &[QSqrt],
    eps: &QSqrt,
    dy: &[QSqrt],
) -> Result<Vec<QSqrt>, SpecError> {
    let len = x.len();
    let fwd: Vec<usize> = (0..len)
        .map(|i| bnchw_transpose_fwd(oc, n, hw, i))
        .collect();
    let back: Vec<usize> = (0..len)
        .map(|i| bnchw_transpose_back(oc, n, hw, i))
        .collect();
    vjp_through_bridge(oc, &fwd, &back, x, gamma, beta, eps, dy)
}

/// **S28** `bnBatchTensor4_grad_input` — the renderable batch BN backward on `[N,C,H,W]`:
/// relabel to the per-channel Mat, S6 over m = N·H·W, relabel back (reduce over `[0,2,3]`).
pub fn bn_batch_tensor4_grad_input<T: Scalar>(
    n: usize,
    oc: usize,
    hw: usize,
    x: &[T],
    dy: &[T],
    gamma: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let (mx, mdy) = (bnchw_fwd(n, oc, hw, x), bnchw_fwd(n, oc, hw, dy));
    Ok(bnchw_back(
        n,
        oc,
        hw,
        &bn_per_channel_grad_input(oc, &mx, &mdy, gamma, eps)?,
    ))
}

/// Handed-in statistics of sync BN backward, one value per channel.
#[derive(Clone, Debug)]
pub struct SyncStats<'a, T> {
    /// All-reduced mean.
    pub mean: &'a [T],
    /// All-reduced second moment E[x²].
    pub m2: &'a [T],
    /// All-reduced mean(dy).
    pub mean_dy: &'a [T],
    /// All-reduced mean(dy·xhat) (in Q(sqrt(q)) of its channel).
    pub mean_dy_xhat: &'a [T],
}

/// **S29** `syncBnPerChannel_grad_input` — sync backward, flat layout: the three-term input
/// gradient with each channel's `mean`, `E[x²]`, `mean(dy)`, `mean(dy·xhat)` handed in:
/// `dx = gamma·r·(dy − mean_dy − xhat·mean_dy_xhat)`, `r = (m2 − mean² + eps)^(-1/2)`.
pub fn sync_bn_per_channel_grad_input<T: Scalar>(
    oc: usize,
    x: &[T],
    dy: &[T],
    gamma: &[T],
    s: &SyncStats<T>,
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let m = x.len() / oc.max(1);
    per_row_lift(oc, x, |c, row| {
        c1(
            c,
            "m2 - mean^2 + eps",
            &ch::sync_var(&s.mean[c], &s.m2[c]),
            eps,
        )?;
        Ok(ch::sync_grad_input(
            row,
            &dy[c * m..(c + 1) * m],
            &gamma[c],
            &s.mean[c],
            &s.m2[c],
            &s.mean_dy[c],
            &s.mean_dy_xhat[c],
            eps,
        ))
    })
}

/// **S30** `syncBnPerChannel_grad_gamma` — `dgamma_c = Σ dy·xhat` with xhat at the HANDED-IN
/// statistics (the ones the forward normalised with). S15 rebuilds xhat from the shard's own
/// statistics, a different function once R > 1.
pub fn sync_bn_per_channel_grad_gamma<T: Scalar>(
    oc: usize,
    x: &[T],
    dy: &[T],
    mean: &[T],
    m2: &[T],
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let m = x.len() / oc.max(1);
    per_row_lift(oc, x, |c, row| {
        c1(c, "m2 - mean^2 + eps", &ch::sync_var(&mean[c], &m2[c]), eps)?;
        Ok(vec![ch::sync_grad_gamma(
            row,
            &dy[c * m..(c + 1) * m],
            &mean[c],
            &m2[c],
            eps,
        )])
    })
}

/// **S31** `syncBnBatchTensor4_grad_input` — the sync input-VJP on `[N,C,H,W]`: S29 through
/// the bnchwFwd / bnchwBack bridge, given the four all-reduced statistic vectors.
#[allow(clippy::too_many_arguments)]
pub fn sync_bn_batch_tensor4_grad_input<T: Scalar>(
    n: usize,
    oc: usize,
    hw: usize,
    x: &[T],
    dy: &[T],
    gamma: &[T],
    s: &SyncStats<T>,
    eps: &T,
) -> Result<Vec<T>, SpecError> {
    let (mx, mdy) = (bnchw_fwd(n, oc, hw, x), bnchw_fwd(n, oc, hw, dy));
    Ok(bnchw_back(
        n,
        oc,
        hw,
        &sync_bn_per_channel_grad_input(oc, &mx, &mdy, gamma, s, eps)?,
    ))
}

fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &j) in p.iter().enumerate() {
        inv[j] = i;
    }
    inv
}
