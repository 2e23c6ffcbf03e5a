//! candle-nn 0.11.1: `LayerNorm::new(weight, bias, eps).forward(x)` (CPU, f32) normalizes
//! x = [3314, 3313] to y = ±158.1 instead of ±0.99998.
//!
//! With a bias and a contiguous input the module runs the fused `candle_nn::ops::layer_norm`,
//! whose CPU kernel (src/ops.rs, `impl CustomOp3 for LayerNorm`, `cpu_fwd`) sums x and x·x in
//! f32 in one pass and forms `var = sum2/n − mean²`: sum2 = 21958565 rounds to 21958564 in f32,
//! so sum2/2 and mean² = 10979282.25 both land on 10979282; the variance (exactly 1/4) comes out
//! 0 and y = ±0.5/sqrt(eps) = ±158.1.
//! Expected (bnconf golden case.json): y = ±0.5/sqrt(1/4 + eps), printed below from f64.

use candle_core::{Device, Module, Tensor};
use candle_nn::LayerNorm;

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::from_slice(&[3314f32, 3313.0], (1, 2), &dev)?;
    let ln = LayerNorm::new(
        Tensor::ones(2, candle_core::DType::F32, &dev)?,
        Tensor::zeros(2, candle_core::DType::F32, &dev)?,
        1e-5,
    );
    let y = ln.forward(&x)?.flatten_all()?.to_vec1::<f32>()?;
    let expected = 0.5f64 / (0.25f64 + 1e-5).sqrt();
    println!("candle-core/candle-nn 0.11.1, CPU, f32; x = [3314, 3313], weight [1, 1], bias [0, 0], eps 1e-5");
    println!("expected y = [{expected}, {}]", -expected);
    println!("got      y = {y:?}");
    let (a, b) = (3314f32, 3313f32);
    let (sum, sum2) = (a + b, a * a + b * b);
    let mean = sum / 2.0;
    println!(
        "f32 one-pass: sum2 = {sum2}, sum2/2 = {}, mean^2 = {}, var = {} (exact 0.25)",
        sum2 / 2.0,
        mean * mean,
        sum2 / 2.0 - mean * mean
    );
    let reproduced = (y[0] as f64 - expected).abs() > 1e-5 * expected;
    println!(
        "{}",
        if reproduced {
            "REPRODUCED"
        } else {
            "not reproduced (fixed?)"
        }
    );
    std::process::exit(if reproduced { 1 } else { 0 });
}
