//! candle-nn's `BatchNorm` (candle 0.11.1, CPU device) through the kernel directory protocol
//! (docs/FORMAT.md). Usage: `candle_bn DIR` (or `bnconf check --exec candle_bn`).
//!
//! Every op goes through `candle_nn::BatchNorm` as a candle user calls it:
//! `BatchNorm::new_with_momentum(C, running_mean, running_var, weight, bias, eps, momentum)`
//! and `ModuleT::forward_t(x, train)`, on tensors of the case dtype (f32 or f64), channels on
//! axis 1 (`[N, C, ...]`); see adapters/rust/README.md for the mapping of each op.

use bnproto::{nc_map, unsupported, Case, Data, Dtype, Failure, Inputs, Outputs, FROM_NC};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{BatchNorm, ModuleT};

const NAME: &str = "candle_bn";

fn main() {
    bnproto::main(NAME, run_case);
}

fn dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
    }
}

/// A tensor of the given shape from the npy values (in their dtype; no conversion).
fn tensor(data: &Data, shape: &[usize]) -> Result<Tensor, Failure> {
    Ok(match data {
        Data::F32(v) => Tensor::from_slice(v, shape, &Device::Cpu)?,
        Data::F64(v) => Tensor::from_slice(v, shape, &Device::Cpu)?,
    })
}

/// The values of a tensor in row-major order, checked to be in the case dtype.
fn values(t: &Tensor, want: Dtype) -> Result<Data, Failure> {
    let t = t.contiguous()?.flatten_all()?;
    match (t.dtype(), want) {
        (DType::F32, Dtype::F32) => Ok(Data::F32(t.to_vec1::<f32>()?)),
        (DType::F64, Dtype::F64) => Ok(Data::F64(t.to_vec1::<f64>()?)),
        (d, w) => Err(Failure::Error(format!(
            "candle returned {d:?} for a {} case",
            w.name()
        ))),
    }
}

fn input<'a>(inp: &'a Inputs, name: &str) -> Result<&'a Data, Failure> {
    inp.get(name)
        .map(|(_, d)| d)
        .ok_or_else(|| Failure::Error(format!("missing input {name}")))
}

/// The per-cell arrays of a case in candle's `[N, C, ...]` convention.
struct Layout {
    stored: Vec<usize>,
    to_nc: Option<[usize; 4]>,
}

impl Layout {
    fn new(case: &Case) -> Result<Self, Failure> {
        let m = nc_map(&case.layout, &case.shape)?;
        Ok(Layout {
            stored: m.stored,
            to_nc: m.to_nc,
        })
    }
    /// The stored tensor viewed as `[N, C, ...]` (nhwc: permuted, a strided view).
    fn nc(&self, t: &Tensor) -> Result<Tensor, Failure> {
        Ok(match self.to_nc {
            Some(p) => t.permute(p)?,
            None => t.clone(),
        })
    }
    /// A per-cell input as candle gets it.
    fn input(&self, data: &Data) -> Result<Tensor, Failure> {
        self.nc(&tensor(data, &self.stored)?)
    }
    /// A per-cell result of candle back in the layout's order.
    fn output(&self, t: &Tensor) -> Result<Tensor, Failure> {
        Ok(match self.to_nc {
            Some(_) => t.permute(FROM_NC)?,
            None => t.clone(),
        })
    }
}

fn per_channel(inp: &Inputs, name: &str) -> Result<Tensor, Failure> {
    let d = input(inp, name)?;
    tensor(d, &[d.len()])
}

fn run_case(case: &Case, inp: &Inputs) -> Result<Outputs, Failure> {
    let dt = dtype(case.dtype);
    let c = case.channels()?;
    let dev = Device::Cpu;
    let eps = case.eps;
    match case.op.as_str() {
        "forward" => {
            let lay = Layout::new(case)?;
            let x = lay.input(input(inp, "x")?)?;
            // Momentum 1: candle's running mean becomes `0·(1−1) + mean·1`, the batch mean
            // exactly. Its running variance would be the *unbiased* one (times m/(m−1)), so the
            // biased `var` output is computed with the same candle ops forward_train uses
            // internally (see below), not read back from the module.
            let bn = BatchNorm::new_with_momentum(
                c,
                Tensor::zeros(c, dt, &dev)?,
                Tensor::ones(c, dt, &dev)?,
                per_channel(inp, "gamma")?,
                per_channel(inp, "beta")?,
                eps,
                1.0,
            )?;
            let y = bn.forward_t(&x, true)?;
            let mean = bn.running_mean().clone();
            // candle-nn 0.11.1 forward_train: x.transpose(0,1).flatten_from(1), mean_keepdim(1),
            // broadcast_sub, sqr, mean_keepdim(1). The same calls here:
            let xt = x.transpose(0, 1)?.flatten_from(1)?.contiguous()?;
            let mean_x = xt.mean_keepdim(1)?;
            let var = xt.broadcast_sub(&mean_x)?.sqr()?.mean_keepdim(1)?;
            Ok(vec![
                ("y".into(), values(&lay.output(&y)?, case.dtype)?),
                ("mean".into(), values(&mean, case.dtype)?),
                ("var".into(), values(&var, case.dtype)?),
            ])
        }
        "backward" => {
            let lay = Layout::new(case)?;
            // Variables: x (in its stored layout), gamma, beta; dy is the cotangent.
            let x = Var::from_tensor(&tensor(input(inp, "x")?, &lay.stored)?)?;
            let gamma = Var::from_tensor(&per_channel(inp, "gamma")?)?;
            let beta = Var::from_tensor(&Tensor::zeros(c, dt, &dev)?)?;
            let dy = lay.input(input(inp, "dy")?)?;
            let bn = BatchNorm::new(
                c,
                Tensor::zeros(c, dt, &dev)?,
                Tensor::ones(c, dt, &dev)?,
                gamma.as_tensor().clone(),
                beta.as_tensor().clone(),
                eps,
            )?;
            let y = bn.forward_t(&lay.nc(x.as_tensor())?, true)?;
            // d(sum(y·dy))/dy = dy exactly, so the VJP candle computes has cotangent dy.
            let loss = (y * dy)?.sum_all()?;
            let grads = loss.backward()?;
            let grad = |v: &Var, what: &str| {
                grads.get(v.as_tensor()).cloned().ok_or_else(|| {
                    Failure::Error(format!("candle computed no gradient for {what}"))
                })
            };
            Ok(vec![
                ("dx".into(), values(&grad(&x, "x")?, case.dtype)?),
                (
                    "dgamma".into(),
                    values(&grad(&gamma, "gamma")?, case.dtype)?,
                ),
                ("dbeta".into(), values(&grad(&beta, "beta")?, case.dtype)?),
            ])
        }
        "eval" | "sync_forward" => {
            let lay = Layout::new(case)?;
            let x = lay.input(input(inp, "x")?)?;
            let mean = per_channel(inp, "mean")?;
            let var = if case.op == "eval" {
                per_channel(inp, "var")?
            } else {
                // No sync BatchNorm in candle: the all-reduced statistics are turned into a
                // variance `m2 − mean·mean` with candle ops in the case dtype (no fma), then
                // the module's inference path runs on them, as the ORT adapter does.
                let m2 = per_channel(inp, "m2")?;
                (m2 - mean.sqr()?)?
            };
            let bn = BatchNorm::new(
                c,
                mean,
                var,
                per_channel(inp, "gamma")?,
                per_channel(inp, "beta")?,
                eps,
            )?;
            let y = bn.forward_t(&x, false)?;
            Ok(vec![("y".into(), values(&lay.output(&y)?, case.dtype)?)])
        }
        "running_update" => {
            let a = case.f64_field("momentum")?;
            let conv = case.str_field("convention")?;
            if conv != "pytorch" {
                return unsupported(format!(
                    "candle_bn: candle-nn's running update is `running·(1−a) + batch·a` with the \
                     unbiased variance (times m/(m−1)), the PyTorch convention; the {conv} \
                     convention (biased variance) is not what candle computes"
                ));
            }
            let lay = Layout::new(case)?;
            let x = lay.input(input(inp, "x")?)?;
            let bn = BatchNorm::new_with_momentum(
                c,
                per_channel(inp, "running_mean")?,
                per_channel(inp, "running_var")?,
                Tensor::ones(c, dt, &dev)?,
                Tensor::zeros(c, dt, &dev)?,
                if eps.is_finite() && eps >= 0.0 {
                    eps
                } else {
                    1e-5
                },
                a,
            )?;
            bn.forward_t(&x, true)?;
            Ok(vec![
                ("new_mean".into(), values(bn.running_mean(), case.dtype)?),
                ("new_var".into(), values(bn.running_var(), case.dtype)?),
            ])
        }
        "sync_backward" => unsupported(
            "candle_bn: candle-nn has no synchronized BatchNorm and no backward with handed-in \
             statistics (its autograd differentiates through the local batch statistics)",
        ),
        "sync_stats" => unsupported(
            "candle_bn: candle-nn has no synchronized BatchNorm (no shard statistics all-reduce)",
        ),
        other => unsupported(format!(
            "candle_bn: op {other} is not known to this adapter"
        )),
    }
}
