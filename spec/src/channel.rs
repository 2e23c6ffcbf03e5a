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

/// The Bessel factor of the PyTorch running variance: `m/(m−1)`, and `1` when `m = 1`
/// (one cell has no unbiased variance; like TensorFlow's fused batch norm, which divides by
/// `max(m−1, 1)`, the factor is taken as 1, so the batch term is `0·1 = 0`).
pub fn bessel<T: Scalar>(m: usize) -> T {
    if m <= 1 {
        T::int(1)
    } else {
        T::int(m as i64) / T::int(m as i64 - 1)
    }
}

/// One running-statistics update of one channel (`running_update`): the batch statistics of
/// `x` ([`batch_stats`]) blended into the running ones with momentum `a`.
///
/// * `pytorch = true`: `new_mean = (1−a)·running_mean + a·mean`,
///   `new_var = (1−a)·running_var + a·var·m/(m−1)` ([`bessel`]: factor 1 at m = 1).
/// * `pytorch = false` (ONNX, Keras, Flax): `new_mean = a·running_mean + (1−a)·mean`,
///   `new_var = a·running_var + (1−a)·var` (biased).
///
/// Returns `(new_mean, new_var)`.
pub fn running_update<T: Scalar>(
    x: &[T],
    running_mean: &T,
    running_var: &T,
    a: &T,
    pytorch: bool,
) -> (T, T) {
    let (mu, var) = batch_stats(x);
    let one_minus = T::int(1) - a.clone();
    let (w_old, w_batch, batch_var) = if pytorch {
        (one_minus, a.clone(), var * bessel::<T>(x.len()))
    } else {
        (a.clone(), one_minus, var)
    };
    (
        w_old.clone() * running_mean.clone() + w_batch.clone() * mu,
        w_old * running_var.clone() + w_batch * batch_var,
    )
}

/// Count-weighted all-reduce of per-shard statistics of one channel (`sync_stats`):
/// `N = Σ n_r`, `mean = Σ n_r·mean_r / N`, `m2 = Σ n_r·m2_r / N` (`m2_r` = E[x²] of shard
/// r), `var = m2 − mean²`. Shards with `n_r = 0` contribute nothing, whatever their
/// statistics. The caller guarantees `N > 0`. Returns `(mean, m2, var)`.
pub fn merge_shard_stats<T: Scalar>(counts: &[T], means: &[T], m2s: &[T]) -> (T, T, T) {
    let mut n = T::int(0);
    let mut s1 = T::int(0);
    let mut s2 = T::int(0);
    for ((c, mu), e2) in counts.iter().zip(means).zip(m2s) {
        if c.value().is_zero() {
            continue;
        }
        n = n + c.clone();
        s1 = s1 + c.clone() * mu.clone();
        s2 = s2 + c.clone() * e2.clone();
    }
    let mean = s1 / n.clone();
    let m2 = s2 / n;
    let var = sync_var(&mean, &m2);
    (mean, m2, var)
}

/// Chan et al.'s pairwise merge of two centred summaries `(n, mean, M2)` with
/// `M2 = Σ(x − mean)²` (the shifted form of [`merge_shard_stats`]):
/// `n = n_a + n_b`, `δ = mean_b − mean_a`, `mean = mean_a + δ·n_b/n`,
/// `M2 = M2_a + M2_b + δ²·n_a·n_b/n`. An empty side (`n = 0`) returns the other unchanged.
pub fn chan_merge<T: Scalar>(a: (T, T, T), b: (T, T, T)) -> (T, T, T) {
    if a.0.value().is_zero() {
        return b;
    }
    if b.0.value().is_zero() {
        return a;
    }
    let n = a.0.clone() + b.0.clone();
    let delta = b.1.clone() - a.1.clone();
    let mean = a.1.clone() + delta.clone() * b.0.clone() / n.clone();
    let m2 = a.2 + b.2 + delta.clone() * delta * a.0 * b.0 / n.clone();
    (n, mean, m2)
}
