//! candle-nn 0.11.1: `candle_nn::ops::layer_norm_slow(x, alpha, beta, eps: f32)` on float64
//! tensors adds `eps as f64` — the f32 rounding of eps — to the variance: for eps = 1e-5 that is
//! 9.99999974737875e-6, off by 2.5e-14. `candle_nn::LayerNorm` with a bias runs the fused
//! `ops::layer_norm` (no f64 CPU kernel, no gradient), so a float64 LayerNorm with a bias that
//! needs a backward goes through `layer_norm_slow` (src/ops.rs, `pub fn layer_norm_slow(...,
//! eps: f32)`, `(norm_x + eps as f64)?.sqrt()`).
//! Case (bnconf shrink): x = [-1, 1], gamma = [1, 1], beta = [0, 0], dy = [0, -1], eps 1e-5.
//! Exact: xhat = ±1/sqrt(1 + eps), dgamma = dy·xhat = [0, −1/sqrt(1 + 1e-5)].

use candle_core::{DType, Device, Tensor, Var};

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Var::from_tensor(&Tensor::from_slice(&[-1f64, 1.0], (1, 2), &dev)?)?;
    let g = Var::from_tensor(&Tensor::ones(2, DType::F64, &dev)?)?;
    let b = Tensor::zeros(2, DType::F64, &dev)?;
    let dy = Tensor::from_slice(&[0f64, -1.0], (1, 2), &dev)?;
    let eps = 1e-5f64;
    let y = candle_nn::ops::layer_norm_slow(x.as_tensor(), g.as_tensor(), &b, eps as f32)?;
    let grads = (y * &dy)?.sum_all()?.backward()?;
    let dgamma = grads.get(g.as_tensor()).unwrap().to_vec1::<f64>()?;
    let want = -1.0 / (1.0 + eps).sqrt();
    let with_f32_eps = -1.0 / (1.0 + eps as f32 as f64).sqrt();
    println!("candle-core/candle-nn 0.11.1, CPU, f64; x = [-1, 1], gamma [1, 1], beta [0, 0], dy = [0, -1], eps 1e-5");
    println!("expected dgamma[1] = {want:e} ({}; golden.json, correctly rounded: -0x1.ffff583aa62f5p-1)", hexf(want));
    println!("got      dgamma[1] = {:e} ({})", dgamma[1], hexf(dgamma[1]));
    println!("f64 with eps rounded to f32 = {with_f32_eps:e} ({})", hexf(with_f32_eps));
    let reproduced = (dgamma[1] - want).abs() > 1e-13 && (dgamma[1] - with_f32_eps).abs() <= 4e-16;
    println!("{}", if reproduced { "REPRODUCED" } else { "not reproduced (fixed?)" });
    std::process::exit(if reproduced { 1 } else { 0 });
}

/// `f64` in C99 hex notation (as bnconf's reports print it).
fn hexf(v: f64) -> String {
    let bits = v.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    format!("{sign}0x1.{:013x}p{exp:+}", bits & ((1u64 << 52) - 1))
}
