//! burn's own `BatchNorm` module (`burn::nn::BatchNorm`, burn 0.22.1) on the flex CPU backend
//! (`Device::flex()`), with the autodiff backend (`Device::flex().autodiff()`) for training mode
//! and the backward, through the kernel directory protocol (docs/FORMAT.md).
//! Usage: `burn_bn DIR` (or `bnconf check --exec burn_bn`).
//!
//! Tensors are created in the case dtype explicitly (`TensorData` of f32 or f64 with
//! `(&device, DType)`), channels on axis 1 (`[N, C, ...]`); see adapters/rust/README.md for
//! the mapping of each op.

use bnproto::{nc_map, unsupported, Case, Data, Dtype, Failure, Inputs, Outputs, FROM_NC};
use burn::module::{Param, RunningState};
use burn::nn::{BatchNorm, BatchNormConfig};
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};

const NAME: &str = "burn_bn";

fn main() {
    bnproto::main(NAME, run_case);
}

fn tensor<const D: usize>(data: &Data, shape: &[usize], dev: &Device) -> Tensor<D> {
    let shape = Shape::from(shape.to_vec());
    let (td, dt) = match data {
        Data::F32(v) => (TensorData::new(v.clone(), shape), DType::F32),
        Data::F64(v) => (TensorData::new(v.clone(), shape), DType::F64),
    };
    Tensor::from_data(td, (dev, dt))
}

/// The values of a tensor in row-major (logical) order, checked to be in the case dtype.
fn values<const D: usize>(t: Tensor<D>, want: Dtype) -> Result<Data, Failure> {
    let data = t.into_data();
    let err = |e: &dyn std::fmt::Debug| Failure::Error(format!("burn returned {e:?}"));
    Ok(match want {
        Dtype::F32 => Data::F32(data.try_into_vec::<f32>().map_err(|e| err(&e))?),
        Dtype::F64 => Data::F64(data.try_into_vec::<f64>().map_err(|e| err(&e))?),
    })
}

fn input<'a>(inp: &'a Inputs, name: &str) -> Result<&'a Data, Failure> {
    inp.get(name)
        .map(|(_, d)| d)
        .ok_or_else(|| Failure::Error(format!("missing input {name}")))
}

fn per_channel(inp: &Inputs, name: &str, dev: &Device) -> Result<Tensor<1>, Failure> {
    let d = input(inp, name)?;
    Ok(tensor(d, &[d.len()], dev))
}

fn full(c: usize, v: f64, dtype: Dtype, dev: &Device) -> Tensor<1> {
    match dtype {
        Dtype::F32 => tensor(&Data::F32(vec![v as f32; c]), &[c], dev),
        Dtype::F64 => tensor(&Data::F64(vec![v; c]), &[c], dev),
    }
}

/// A `BatchNorm` module with the given parameters and running statistics (all `[C]`, in the
/// case dtype, on one device). `BatchNormConfig::init` makes the module (it checks epsilon and
/// momentum); its default-dtype tensors are then replaced, as a user loading weights would.
fn module(
    eps: f64,
    momentum: f64,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    running_mean: Tensor<1>,
    running_var: Tensor<1>,
) -> BatchNorm {
    let [c] = gamma.dims();
    let mut bn = BatchNormConfig::new(c)
        .with_epsilon(eps)
        .with_momentum(momentum)
        .init(&gamma.device());
    bn.gamma = Param::from_tensor(gamma);
    bn.beta = Param::from_tensor(beta);
    bn.running_mean = RunningState::new(running_mean);
    bn.running_var = RunningState::new(running_var);
    bn
}

/// The per-cell arrays of a case in burn's `[N, C, ...]` convention, of rank D (3 for
/// rows/flat `[1, C, m]`, 4 for chw `[1, C, H, W]`, nchw, nhwc).
struct Layout {
    stored: Vec<usize>,
    to_nc: Option<[usize; 4]>,
}

fn perm<const D: usize>(t: Tensor<D>, p: [usize; 4]) -> Tensor<D> {
    assert_eq!(D, 4, "the nhwc permutation needs rank 4");
    t.permute(std::array::from_fn::<usize, D, _>(|i| p[i]))
}

impl Layout {
    fn nc<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        match self.to_nc {
            Some(p) => perm(t, p),
            None => t,
        }
    }
    fn input<const D: usize>(&self, data: &Data, dev: &Device) -> Tensor<D> {
        self.nc(tensor(data, &self.stored, dev))
    }
    fn output<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        match self.to_nc {
            Some(_) => perm(t, FROM_NC),
            None => t,
        }
    }
}

fn check_eps(eps: f64) -> Result<(), Failure> {
    if eps.is_finite() && eps > 0.0 {
        Ok(())
    } else {
        unsupported(format!(
            "burn_bn: BatchNormConfig requires a finite epsilon > 0 (the case has {eps})"
        ))
    }
}

fn run_case(case: &Case, inp: &Inputs) -> Result<Outputs, Failure> {
    let m = nc_map(&case.layout, &case.shape)?;
    let lay = Layout {
        stored: m.stored,
        to_nc: m.to_nc,
    };
    match lay.stored.len() {
        3 => run::<3>(case, inp, &lay),
        4 => run::<4>(case, inp, &lay),
        r => unsupported(format!("burn_bn: rank {r} is not mapped")),
    }
}

fn run<const D: usize>(case: &Case, inp: &Inputs, lay: &Layout) -> Result<Outputs, Failure> {
    let c = case.channels()?;
    let dt = case.dtype;
    let eps = case.eps;
    // Inference runs on the flex device; training mode needs the autodiff device (BatchNorm's
    // forward takes the training path only there).
    let flex = Device::flex();
    let ad = Device::flex().autodiff();
    match case.op.as_str() {
        "forward" => {
            check_eps(eps)?;
            // Momentum 1: running = running·(1−1) + batch·1, i.e. exactly the batch mean and
            // burn's (biased) batch variance, read back from the module's running state.
            let bn = module(
                eps,
                1.0,
                per_channel(inp, "gamma", &ad)?,
                per_channel(inp, "beta", &ad)?,
                full(c, 0.0, dt, &ad),
                full(c, 1.0, dt, &ad),
            );
            let x: Tensor<D> = lay.input(input(inp, "x")?, &ad);
            let y = bn.forward(x);
            Ok(vec![
                ("y".into(), values(lay.output(y), dt)?),
                ("mean".into(), values(bn.running_mean.value_sync(), dt)?),
                ("var".into(), values(bn.running_var.value_sync(), dt)?),
            ])
        }
        "backward" => {
            check_eps(eps)?;
            let bn = module(
                eps,
                0.1,
                per_channel(inp, "gamma", &ad)?,
                full(c, 0.0, dt, &ad),
                full(c, 0.0, dt, &ad),
                full(c, 1.0, dt, &ad),
            );
            let x: Tensor<D> = tensor(input(inp, "x")?, &lay.stored, &ad).require_grad();
            let dy: Tensor<D> = lay.input(input(inp, "dy")?, &ad);
            let y = bn.forward(lay.nc(x.clone()));
            // d(sum(y·dy))/dy = dy exactly, so the VJP burn computes has cotangent dy.
            let grads = y.mul(dy).sum().backward();
            let none = |w: &str| Failure::Error(format!("burn computed no gradient for {w}"));
            let dx = x.grad(&grads).ok_or_else(|| none("x"))?;
            let dgamma = bn.gamma.grad(&grads).ok_or_else(|| none("gamma"))?;
            let dbeta = bn.beta.grad(&grads).ok_or_else(|| none("beta"))?;
            Ok(vec![
                ("dx".into(), values(dx, dt)?),
                ("dgamma".into(), values(dgamma, dt)?),
                ("dbeta".into(), values(dbeta, dt)?),
            ])
        }
        "eval" | "sync_forward" => {
            check_eps(eps)?;
            let mean = per_channel(inp, "mean", &flex)?;
            let var = if case.op == "eval" {
                per_channel(inp, "var", &flex)?
            } else {
                // No sync BatchNorm in burn: the all-reduced statistics are turned into a
                // variance `m2 − mean·mean` with burn ops in the case dtype (no fma), then the
                // module's inference path runs on them, as the ORT adapter does.
                per_channel(inp, "m2", &flex)?.sub(mean.clone().mul(mean.clone()))
            };
            // Handed-in statistics as the module's running state, on the plain (inference)
            // device: forward takes the inference path there.
            let bn = module(
                eps,
                0.1,
                per_channel(inp, "gamma", &flex)?,
                per_channel(inp, "beta", &flex)?,
                mean,
                var,
            );
            let x: Tensor<D> = lay.input(input(inp, "x")?, &flex);
            let y = bn.forward(x);
            Ok(vec![("y".into(), values(lay.output(y), dt)?)])
        }
        "running_update" => {
            let a = case.f64_field("momentum")?;
            let conv = case.str_field("convention")?;
            if conv != "onnx" {
                return unsupported(format!(
                    "burn_bn: burn's running update is `running·(1−μ) + batch·μ` with the biased \
                     batch variance (no m/(m−1) factor); the {conv} convention needs the unbiased \
                     one"
                ));
            }
            // ONNX: new = a·running + (1−a)·batch with the biased variance. burn blends with
            // weight (1−μ) on the running statistic, so μ = 1 − a (in f64).
            let mu = 1.0 - a;
            if !(0.0..=1.0).contains(&mu) {
                return unsupported(format!(
                    "burn_bn: BatchNormConfig requires a momentum in [0, 1] (1 − {a} = {mu})"
                ));
            }
            // eps does not enter the running statistics; burn requires one > 0.
            let e = if eps.is_finite() && eps > 0.0 {
                eps
            } else {
                1e-5
            };
            let bn = module(
                e,
                mu,
                full(c, 1.0, dt, &ad),
                full(c, 0.0, dt, &ad),
                per_channel(inp, "running_mean", &ad)?,
                per_channel(inp, "running_var", &ad)?,
            );
            let x: Tensor<D> = lay.input(input(inp, "x")?, &ad);
            let _ = bn.forward(x);
            Ok(vec![
                ("new_mean".into(), values(bn.running_mean.value_sync(), dt)?),
                ("new_var".into(), values(bn.running_var.value_sync(), dt)?),
            ])
        }
        "sync_backward" => unsupported(
            "burn_bn: burn has no synchronized BatchNorm and no backward with handed-in \
             statistics (its autodiff differentiates batch_norm_train, local batch statistics)",
        ),
        "sync_stats" => unsupported(
            "burn_bn: burn has no synchronized BatchNorm (no shard statistics all-reduce)",
        ),
        other => unsupported(format!("burn_bn: op {other} is not known to this adapter")),
    }
}
