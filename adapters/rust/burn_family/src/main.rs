//! burn's own `LayerNorm`, `RmsNorm` and `GroupNorm` modules (`burn::nn`, burn 0.22.1) on the
//! flex CPU backend, through the kernel directory protocol for a normalization-family export
//! (docs/FORMAT.md, "the normalization family in the protocol"). Usage: `burn_family DIR` (or
//! `bnconf check --family all --exec burn_family`).
//!
//! Forward ops run on the plain flex device (`Device::flex()`: inference, where burn-flex's
//! fused `layer_norm` kernel serves `LayerNorm`); backward ops on `Device::flex().autodiff()`
//! (burn-autodiff has no layer_norm op of its own, so there `LayerNorm` runs the backend
//! trait's default composite `layer_norm`, and autodiff differentiates it), with
//! `x.require_grad()`, `grads = sum(y·dy).backward()`, `x.grad`, `gamma.grad`, `beta.grad`.
//! Modules are made by their configs' `init` and their parameters replaced by the case's (as a
//! user loading weights does). See adapters/rust/README.md.

use bnproto::{unsupported, Case, Data, Dtype, Failure, Inputs, Outputs};
use burn::module::Param;
use burn::nn::{GroupNormConfig, LayerNormConfig, RmsNormConfig};
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};

const NAME: &str = "burn_family";

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

/// A `[P]` parameter (layer/rms norm with normalized_ndim k > 1: the normalized shape
/// flattened, the same row-major values), or `fill` (1 or 0, exact) where the case has none.
fn param(inp: &Inputs, name: &str, len: usize, fill: f64, dt: Dtype, dev: &Device) -> Tensor<1> {
    match inp.get(name) {
        Some((_, d)) => tensor(d, &[d.len()], dev),
        None => match dt {
            Dtype::F32 => tensor(&Data::F32(vec![fill as f32; len]), &[len], dev),
            Dtype::F64 => tensor(&Data::F64(vec![fill; len]), &[len], dev),
        },
    }
}

fn permute<const D: usize>(t: Tensor<D>, p: &Option<Vec<usize>>) -> Tensor<D> {
    match p {
        Some(p) => t.permute(std::array::from_fn::<usize, D, _>(|i| p[i])),
        None => t,
    }
}

fn run_case(case: &Case, inp: &Inputs) -> Result<Outputs, Failure> {
    let op = case.op.as_str();
    let base = op.strip_suffix("_backward").unwrap_or(op);
    let conv = case
        .str_field("convention")
        .unwrap_or_else(|_| "standard".into());
    if base == "rms_norm" && conv == "offset" {
        return unsupported(format!(
            "{NAME}: convention offset ((1 + gamma)·xhat): burn's RmsNorm computes \
             xhat·gamma; gamma = 1 + gamma would be rounded by the adapter, not burn"
        ));
    }
    if !(case.eps.is_finite() && case.eps > 0.0) && base != "layer_norm" {
        return unsupported(format!(
            "{NAME}: burn's {base} config requires epsilon > 0 (the case has {})",
            case.eps
        ));
    }
    let shape = &case.shape;
    // The shape burn sees and the permutations to and from it.
    let (model, to, back): (Vec<usize>, Option<Vec<usize>>, Option<Vec<usize>>) = match base {
        "layer_norm" | "rms_norm" => {
            let p: usize = case.param_shape()?.iter().product();
            let mut s = shape[..shape.len() - case.usize_field("normalized_ndim")?].to_vec();
            s.push(p);
            (s, None, None)
        }
        "group_norm" => match case.layout.as_str() {
            "nc" | "ncl" | "nchw" | "ncdhw" => (shape.clone(), None, None),
            "nhwc" | "ndhwc" => {
                // burn's GroupNorm takes channels on axis 1: a permuted view, as burn_bn
                // does for nhwc; the result permuted back.
                let r = shape.len();
                let mut to = vec![0, r - 1];
                to.extend(1..r - 1);
                let mut back = vec![0];
                back.extend(2..r);
                back.push(1);
                (shape.clone(), Some(to), Some(back))
            }
            l => return unsupported(format!("{NAME}: layout {l} not mapped")),
        },
        other => return unsupported(format!("{NAME}: op {other} not known to this adapter")),
    };
    match model.len() {
        2 => run::<2>(case, inp, base, &model, &to, &back),
        3 => run::<3>(case, inp, base, &model, &to, &back),
        4 => run::<4>(case, inp, base, &model, &to, &back),
        5 => run::<5>(case, inp, base, &model, &to, &back),
        r => unsupported(format!("{NAME}: rank {r} not mapped")),
    }
}

fn run<const D: usize>(
    case: &Case,
    inp: &Inputs,
    base: &str,
    model: &[usize],
    to: &Option<Vec<usize>>,
    back: &Option<Vec<usize>>,
) -> Result<Outputs, Failure> {
    let backward = case.op.ends_with("_backward");
    let dev = if backward {
        Device::flex().autodiff()
    } else {
        Device::flex()
    };
    let dt = case.dtype;
    let eps = case.eps;
    let affine = case.str_field("affine")?;
    let (has_gamma, has_beta) = (affine != "none", affine == "weight_bias");
    let plen: usize = case.param_shape()?.iter().product();
    let gamma = param(inp, "gamma", plen, 1.0, dt, &dev);
    let beta = param(inp, "beta", plen, 0.0, dt, &dev);
    let mut x: Tensor<D> = tensor(input(inp, "x")?, model, &dev);
    if backward {
        x = x.require_grad();
    }
    let xin = permute(x.clone(), to);
    let none = |w: &str| Failure::Error(format!("burn computed no gradient for {w}"));

    // (y, gamma param, beta param) of the module.
    let (y, gp, bp): (
        Tensor<D>,
        Option<Param<Tensor<1>>>,
        Option<Param<Tensor<1>>>,
    ) = match base {
        "layer_norm" => {
            let mut m = LayerNormConfig::new(plen)
                .with_epsilon(eps)
                .with_bias(has_beta)
                .init(&dev);
            m.gamma = Param::from_tensor(gamma);
            if has_beta {
                m.beta = Some(Param::from_tensor(beta));
            }
            (m.forward(xin), Some(m.gamma.clone()), m.beta.clone())
        }
        "rms_norm" => {
            let mut m = RmsNormConfig::new(plen).with_epsilon(eps).init(&dev);
            m.gamma = Param::from_tensor(gamma);
            (m.forward(xin), Some(m.gamma.clone()), None)
        }
        _ => {
            let groups = case.usize_field("groups")?;
            let mut m = GroupNormConfig::new(groups, plen)
                .with_epsilon(eps)
                .with_affine(has_gamma)
                .init(&dev);
            if has_gamma {
                // burn's GroupNorm has both or neither: affine `weight` gets beta = 0.
                m.gamma = Some(Param::from_tensor(gamma));
                m.beta = Some(Param::from_tensor(beta));
            }
            (m.forward(xin), m.gamma.clone(), m.beta.clone())
        }
    };
    let y = permute(y, back);
    if !backward {
        return Ok(vec![("y".into(), values(y, dt)?)]);
    }
    let dy: Tensor<D> = tensor(input(inp, "dy")?, model, &dev);
    let grads = y.mul(dy).sum().backward();
    let mut outs = vec![(
        "dx".to_string(),
        values(x.grad(&grads).ok_or_else(|| none("x"))?, dt)?,
    )];
    if has_gamma {
        let g = gp.ok_or_else(|| none("gamma"))?;
        outs.push((
            "dgamma".into(),
            values(g.grad(&grads).ok_or_else(|| none("gamma"))?, dt)?,
        ));
    }
    if has_beta {
        let b = bp.ok_or_else(|| none("beta"))?;
        outs.push((
            "dbeta".into(),
            values(b.grad(&grads).ok_or_else(|| none("beta"))?, dt)?,
        ));
    }
    Ok(outs)
}
