//! burn-nn 0.22.1: `RmsNorm::forward` on a float64 tensor computes the rms in float32:
//! `(x.clone().cast(DType::F32).square().mean_dim(D - 1) + self.epsilon).sqrt()`, cast back
//! (burn-nn src/modules/norm/rms.rs, `forward`), then `x / rms · gamma` in float64.
//! Case (bnconf shrink): x = [[1]], gamma = [1], eps 1e-5, float64, burn-flex CPU backend.
//! Exact y = 1/sqrt(1 + 1e-5), correctly rounded 0x1.ffff583aa62f5p-1 (golden.json).

use burn::module::Param;
use burn::nn::RmsNormConfig;
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};

fn main() {
    let dev = Device::flex();
    let x: Tensor<2> = Tensor::from_data(
        TensorData::new(vec![1f64], Shape::from(vec![1, 1])),
        (&dev, DType::F64),
    );
    let g: Tensor<1> = Tensor::from_data(
        TensorData::new(vec![1f64], Shape::from(vec![1])),
        (&dev, DType::F64),
    );
    let mut m = RmsNormConfig::new(1).with_epsilon(1e-5).init(&dev);
    m.gamma = Param::from_tensor(g);
    let y = m.forward(x).into_data().try_into_vec::<f64>().unwrap()[0];
    let want = 1.0 / (1.0f64 + 1e-5).sqrt();
    let f32_rms = 1.0 / f64::from((1.0f32 + 1e-5f32).sqrt());
    println!("burn/burn-nn 0.22.1, flex CPU backend, f64; x = [[1]], gamma = [1], eps 1e-5");
    println!("expected y = {want:e} ({}; golden.json, correctly rounded: 0x1.ffff583aa62f5p-1)", hexf(want));
    println!("got      y = {y:e} ({})", hexf(y));
    println!("1 / f64(f32 sqrt(1 + eps)) = {f32_rms:e} ({})", hexf(f32_rms));
    let reproduced = (y - want).abs() > 1e-12 && (y - f32_rms).abs() <= 2e-16;
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
