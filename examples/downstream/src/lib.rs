//! A user's BatchNorm kernel (training forward, its backward, inference), written in f32
//! with f64 accumulation, over any layout given as "the flat positions of channel c".

/// Per-channel training forward: `(y, mean, var)`, biased variance, two passes.
pub fn forward(
    x: &[f32],
    cells: &[Vec<usize>],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut y = vec![0.0f32; x.len()];
    let (mut mean, mut var) = (Vec::new(), Vec::new());
    for (c, idx) in cells.iter().enumerate() {
        let m = idx.len() as f64;
        let mu = idx.iter().map(|&i| x[i] as f64).sum::<f64>() / m;
        let v = idx.iter().map(|&i| (x[i] as f64 - mu).powi(2)).sum::<f64>() / m;
        let r = 1.0 / (v + eps as f64).sqrt();
        for &i in idx {
            y[i] = (gamma[c] as f64 * (x[i] as f64 - mu) * r + beta[c] as f64) as f32;
        }
        mean.push(mu as f32);
        var.push(v as f32);
    }
    (y, mean, var)
}

/// The VJP of `forward`'s `y`: `(dx, dgamma, dbeta)`.
pub fn backward(
    x: &[f32],
    dy: &[f32],
    cells: &[Vec<usize>],
    gamma: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut dx = vec![0.0f32; x.len()];
    let (mut dgamma, mut dbeta) = (Vec::new(), Vec::new());
    for (c, idx) in cells.iter().enumerate() {
        let m = idx.len() as f64;
        let mu = idx.iter().map(|&i| x[i] as f64).sum::<f64>() / m;
        let v = idx.iter().map(|&i| (x[i] as f64 - mu).powi(2)).sum::<f64>() / m;
        let r = 1.0 / (v + eps as f64).sqrt();
        let xhat = |i: usize| (x[i] as f64 - mu) * r;
        let sdy: f64 = idx.iter().map(|&i| dy[i] as f64).sum();
        let sdyx: f64 = idx.iter().map(|&i| dy[i] as f64 * xhat(i)).sum();
        for &i in idx {
            dx[i] = (gamma[c] as f64 * r * (dy[i] as f64 - sdy / m - xhat(i) * sdyx / m)) as f32;
        }
        dgamma.push(sdyx as f32);
        dbeta.push(sdy as f32);
    }
    (dx, dgamma, dbeta)
}

/// Inference with frozen statistics.
pub fn eval(
    x: &[f32],
    cells: &[Vec<usize>],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    eps: f32,
) -> Vec<f32> {
    let mut y = vec![0.0f32; x.len()];
    for (c, idx) in cells.iter().enumerate() {
        let r = 1.0 / (var[c] as f64 + eps as f64).sqrt();
        for &i in idx {
            y[i] = (gamma[c] as f64 * (x[i] as f64 - mean[c] as f64) * r + beta[c] as f64) as f32;
        }
    }
    y
}
