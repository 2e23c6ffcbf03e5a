//! One-channel BatchNorm: the per-row maps that the per-row lift (S1) applies to each channel.
//!
//! Written once over any [`Scalar`]: with [`QSqrt`](crate::exact::QSqrt) they are the exact
//! reference, with [`Dual`](crate::num::Dual) they yield the exact Jacobian.
//! `m` is the channel's number of cells; every function requires `m >= 1` (C2).

use crate::num::Scalar;

fn mean<T: Scalar>(v: &[T]) -> T {
    let mut s = T::int(0);
    for e in v {
        s = s + e.clone();
    }
    s / T::int(v.len() as i64)
}

/// Batch statistics of one channel: `mean = Σx/m`, `var = Σ(x-mean)²/m` (biased).
pub fn batch_stats<T: Scalar>(x: &[T]) -> (T, T) {
    let mu = mean(x);
    let sq: Vec<T> = x
        .iter()
        .map(|e| (e.clone() - mu.clone()) * (e.clone() - mu.clone()))
        .collect();
    let var = mean(&sq);
    (mu, var)
}

/// `r = (var + eps)^(-1/2)`; the caller has checked (C1) `var + eps > 0`.
pub fn inv_std<T: Scalar>(var: &T, eps: &T) -> T {
    let q = var.clone() + eps.clone();
    T::int(1) / q.sqrt()
}

/// **S11** `bnEval` — inference BN of one channel with `mean`, `var` handed in:
/// `y_i = gamma·(x_i − mean)·(var + eps)^(−1/2) + beta`.
pub fn bn_eval<T: Scalar>(x: &[T], gamma: &T, beta: &T, mean: &T, var: &T, eps: &T) -> Vec<T> {
    let r = inv_std(var, eps);
    let g = gamma.clone() * r;
    x.iter()
        .map(|e| g.clone() * (e.clone() - mean.clone()) + beta.clone())
        .collect()
}

/// One-channel training BN (`bnForward`): the statistics of `x` itself, then [`bn_eval`].
/// Returns `(y, mean, var)`.
pub fn bn_forward<T: Scalar>(x: &[T], gamma: &T, beta: &T, eps: &T) -> (Vec<T>, T, T) {
    let (mu, var) = batch_stats(x);
    (bn_eval(x, gamma, beta, &mu, &var, eps), mu, var)
}

/// `xhat_i = (x_i − mean)·r`.
pub fn xhat<T: Scalar>(x: &[T], mean: &T, r: &T) -> Vec<T> {
    x.iter()
        .map(|e| (e.clone() - mean.clone()) * r.clone())
        .collect()
}

/// The consolidated three-term input gradient of one channel (`bn_grad_input`), given the
/// statistics it normalised with and the two reduction means:
/// `dx_i = gamma·r·(dy_i − mean_dy − xhat_i·mean_dy_xhat)`.
pub fn grad_input_at<T: Scalar>(
    x: &[T],
    dy: &[T],
    gamma: &T,
    mean: &T,
    r: &T,
    mean_dy: &T,
    mean_dy_xhat: &T,
) -> Vec<T> {
    let g = gamma.clone() * r.clone();
    x.iter()
        .zip(dy)
        .map(|(e, d)| {
            let xh = (e.clone() - mean.clone()) * r.clone();
            g.clone() * (d.clone() - mean_dy.clone() - xh * mean_dy_xhat.clone())
        })
        .collect()
}

/// Three-term input gradient with the channel's own statistics (S6's per-channel body).
pub fn bn_grad_input<T: Scalar>(x: &[T], dy: &[T], gamma: &T, eps: &T) -> Vec<T> {
    let (mu, var) = batch_stats(x);
    let r = inv_std(&var, eps);
    let xh = xhat(x, &mu, &r);
    let mdy = mean(dy);
    let prods: Vec<T> = dy
        .iter()
        .zip(&xh)
        .map(|(d, h)| d.clone() * h.clone())
        .collect();
    let mdyx = mean(&prods);
    grad_input_at(x, dy, gamma, &mu, &r, &mdy, &mdyx)
}

/// `dgamma = Σ dy·xhat` at the given statistics.
pub fn grad_gamma_at<T: Scalar>(x: &[T], dy: &[T], mean: &T, r: &T) -> T {
    let mut s = T::int(0);
    for (e, d) in x.iter().zip(dy) {
        s = s + d.clone() * ((e.clone() - mean.clone()) * r.clone());
    }
    s
}

/// **S15**'s per-channel body: `dgamma = Σ dy·xhat`, xhat recomputed from the saved input.
pub fn bn_grad_gamma<T: Scalar>(x: &[T], dy: &[T], eps: &T) -> T {
    let (mu, var) = batch_stats(x);
    grad_gamma_at(x, dy, &mu, &inv_std(&var, eps))
}

/// **S16**'s per-channel body: `dbeta = Σ dy`.
pub fn bn_grad_beta<T: Scalar>(dy: &[T]) -> T {
    let mut s = T::int(0);
    for d in dy {
        s = s + d.clone();
    }
    s
}

/// Variance formed from a handed-in second moment: `var = m2 − mean²` (S26).
pub fn sync_var<T: Scalar>(mean: &T, m2: &T) -> T {
    m2.clone() - mean.clone() * mean.clone()
}

/// Sync BN forward of one channel (S26's per-channel body): [`bn_eval`] with `var = m2 − mean²`.
pub fn sync_bn<T: Scalar>(x: &[T], gamma: &T, beta: &T, mean: &T, m2: &T, eps: &T) -> Vec<T> {
    bn_eval(x, gamma, beta, mean, &sync_var(mean, m2), eps)
}

/// Sync input gradient of one channel (S29's per-channel body): all four statistics handed in.
#[allow(clippy::too_many_arguments)]
pub fn sync_grad_input<T: Scalar>(
    x: &[T],
    dy: &[T],
    gamma: &T,
    mean: &T,
    m2: &T,
    mean_dy: &T,
    mean_dy_xhat: &T,
    eps: &T,
) -> Vec<T> {
    let r = inv_std(&sync_var(mean, m2), eps);
    grad_input_at(x, dy, gamma, mean, &r, mean_dy, mean_dy_xhat)
}

/// Sync `dgamma` of one channel (S30's per-channel body): xhat at the handed-in statistics.
pub fn sync_grad_gamma<T: Scalar>(x: &[T], dy: &[T], mean: &T, m2: &T, eps: &T) -> T {
    grad_gamma_at(x, dy, mean, &inv_std(&sync_var(mean, m2), eps))
}
