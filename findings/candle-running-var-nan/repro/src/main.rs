//! candle-nn 0.11.1: `BatchNorm::forward_t(x, true)` makes the running variance NaN when a
//! channel has one cell (m = 1).
//!
//! One channel, one value: x = X (shape [1, 1, 1]: N = 1, C = 1, one cell), running mean 0,
//! running variance 1, momentum a = 0.3 (candle's convention:
//! `running·(1 − a) + batch·a`, the batch variance unbiased, × m/(m − 1)).
//! Expected (docs/FORMAT.md `running_update`, `pytorch` convention, m = 1 takes the Bessel
//! factor as 1, as TensorFlow's fused batch norm does): new_mean = 0.3·X, new_var = 0.7·1 +
//! 0.3·0 = 0.7 exactly; correctly rounded to f32: 0x1.666666p-1.
//! candle computes the weight `momentum·m/(m − 1)` = 0.3·1/0 = +inf in f64 and multiplies
//! the batch variance 0 by it: inf·0 = NaN.

use candle_core::{DType, Device, Tensor};
use candle_nn::{BatchNorm, ModuleT};

/// The shrunk case's x (findings/candle-running-var-nan/x.npy).
const X: f32 = 0.0;
/// Exact expectations correctly rounded to f32 (bnconf golden case.json).
const EXPECTED_MEAN: &str = "0x0.0p+0";
const EXPECTED_VAR: &str = "0x1.666666p-1";

fn hex(v: f32) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0x0.0p+0".into()
        } else {
            "0x0.0p+0".into()
        };
    }
    let b = v.to_bits();
    let (sign, exp, man) = (b >> 31, ((b >> 23) & 0xff) as i32, b & 0x7f_ffff);
    let s = if sign == 1 { "-" } else { "" };
    if exp == 0 {
        format!("{s}0x0.{:06x}p-126", man << 1)
    } else {
        format!("{s}0x1.{:06x}p{:+}", man << 1, exp - 127)
    }
}

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::from_slice(&[X], (1, 1, 1), &dev)?;
    let bn = BatchNorm::new_with_momentum(
        1,
        Tensor::zeros(1, DType::F32, &dev)?,
        Tensor::ones(1, DType::F32, &dev)?,
        Tensor::ones(1, DType::F32, &dev)?,
        Tensor::zeros(1, DType::F32, &dev)?,
        1e-5,
        0.3,
    )?;
    let y = bn.forward_t(&x, true)?;
    let mean = bn.running_mean().to_vec1::<f32>()?[0];
    let var = bn.running_var().to_vec1::<f32>()?[0];
    println!("candle-core/candle-nn 0.11.1, CPU, f32; x = {X} (one cell), running_mean 0, running_var 1, momentum 0.3");
    println!(
        "y (forward output)  = {:?}",
        y.flatten_all()?.to_vec1::<f32>()?
    );
    println!(
        "expected new_mean = {EXPECTED_MEAN}   got {} ({mean})",
        hex(mean)
    );
    println!(
        "expected new_var  = {EXPECTED_VAR} (0.7)   got {} ({var})",
        hex(var)
    );
    let m = 1.0f64;
    println!(
        "candle's weight momentum*m/(m-1) at m = 1: {} ; times the batch variance 0: {}",
        0.3 * m / (m - 1.0),
        0.3 * m / (m - 1.0) * 0.0
    );
    let reproduced = var.is_nan();
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
