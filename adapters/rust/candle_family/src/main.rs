//! candle-nn's `LayerNorm`, `RmsNorm` and `GroupNorm` (candle 0.11.1, `Device::Cpu`) through
//! the kernel directory protocol for a normalization-family export (docs/FORMAT.md, "the
//! normalization family in the protocol"). Usage: `candle_family DIR` (or
//! `bnconf check --family all --exec candle_family`).
//!
//! Forward: the modules as a candle user builds them from loaded weights —
//! `candle_nn::LayerNorm::new(gamma, beta, eps)` / `new_no_bias(gamma, eps)`,
//! `candle_nn::RmsNorm::new(gamma, eps)`, `candle_nn::GroupNorm::new(gamma, beta, C, G, eps)` —
//! and `Module::forward`. Backward: candle's autograd (`Var` + `Tensor::backward`) of
//! `sum(y·dy)`. candle-nn's fused `ops::layer_norm` / `ops::rms_norm` (what `LayerNorm::forward`
//! with a bias and `RmsNorm::forward` run on a contiguous input) are `apply_op*_no_bwd`: no
//! gradient. The backward therefore runs candle-nn's differentiable forms:
//! `ops::layer_norm_slow(x, gamma, beta, eps as f32)` (weight_bias), `LayerNorm::new_no_bias`
//! (weight, none: its forward is the composite), `RmsNorm::forward_diff`, and `GroupNorm`
//! (always a composite). See adapters/rust/README.md.

use bnproto::{unsupported, Case, Data, Dtype, Failure, Inputs, Outputs};
use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::{GroupNorm, LayerNorm, RmsNorm};

const NAME: &str = "candle_family";

fn main() {
    bnproto::main(NAME, run_case);
}

fn dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
    }
}

fn tensor(data: &Data, shape: &[usize]) -> Result<Tensor, Failure> {
    Ok(match data {
        Data::F32(v) => Tensor::from_slice(v, shape, &Device::Cpu)?,
        Data::F64(v) => Tensor::from_slice(v, shape, &Device::Cpu)?,
    })
}

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

/// A parameter as a flat `[P]` tensor (layer/rms norm with normalized_ndim k > 1: the
/// row-major normalized shape flattened, the same values), or ones/zeros of that length where
/// the case has none (multiplying by 1 and adding 0 are exact).
fn param(inp: &Inputs, name: &str, len: usize, fill: f64, dt: DType) -> Result<Tensor, Failure> {
    match inp.get(name) {
        Some((_, d)) => tensor(d, &[d.len()]),
        None => Ok((Tensor::ones(len, dt, &Device::Cpu)? * fill)?),
    }
}

/// The candle error of the fused CPU kernels for a dtype they have no kernel for, as an
/// unsupported case (candle refuses it; nothing to judge).
fn fused_dtype(e: candle_core::Error, what: &str) -> Failure {
    // The message only (candle appends a backtrace on the following lines).
    let msg = e.to_string().lines().next().unwrap_or_default().to_owned();
    if msg.contains("unsupported dtype") {
        Failure::Unsupported(format!(
            "{NAME}: candle-nn 0.11.1 {what} refuses this dtype on the CPU: {msg}"
        ))
    } else {
        Failure::Error(msg)
    }
}

fn run_case(case: &Case, inp: &Inputs) -> Result<Outputs, Failure> {
    let op = case.op.as_str();
    let base = op.strip_suffix("_backward").unwrap_or(op);
    let backward = base != op;
    let dt = dtype(case.dtype);
    let eps = case.eps;
    let affine = case.str_field("affine")?;
    let conv = case
        .str_field("convention")
        .unwrap_or_else(|_| "standard".into());
    if base == "rms_norm" && conv == "offset" {
        return unsupported(format!(
            "{NAME}: convention offset ((1 + gamma)·xhat): candle-nn's RmsNorm computes \
             weight·xhat; weight = 1 + gamma would be rounded by the adapter, not candle"
        ));
    }
    let shape = case.shape.clone();
    let x_data = input(inp, "x")?;
    let has_gamma = affine != "none";
    let has_beta = affine == "weight_bias";

    // The shape candle sees and how a per-cell result goes back to the layout.
    let (model_shape, perm_in, perm_out): (Vec<usize>, Option<Vec<usize>>, Option<Vec<usize>>) =
        match base {
            "layer_norm" | "rms_norm" => {
                let p: usize = case.param_shape()?.iter().product();
                let mut s = shape[..shape.len() - case.usize_field("normalized_ndim")?].to_vec();
                s.push(p);
                (s, None, None)
            }
            "group_norm" => match case.layout.as_str() {
                "nc" => {
                    return unsupported(format!(
                        "{NAME}: candle-nn 0.11.1 GroupNorm::forward bails on an input of rank ≤ 2 \
                         (\"input rank for GroupNorm should be at least 3\"); layout nc is [N, C]"
                    ))
                }
                "nchw" | "ncl" | "ncdhw" => (shape.clone(), None, None),
                "nhwc" | "ndhwc" => {
                    // candle's GroupNorm takes channels on axis 1: a permuted (strided) view,
                    // as candle_bn does for nhwc; the result permuted back.
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
    let plen: usize = case.param_shape()?.iter().product();

    let x = Var::from_tensor(&tensor(x_data, &model_shape)?)?;
    let gamma = Var::from_tensor(&param(inp, "gamma", plen, 1.0, dt)?)?;
    let beta = Var::from_tensor(&param(inp, "beta", plen, 0.0, dt)?)?;
    let xin = match &perm_in {
        Some(p) => x.as_tensor().permute(p.clone())?,
        None => x.as_tensor().clone(),
    };
    let (g, b) = (gamma.as_tensor().clone(), beta.as_tensor().clone());

    let y = match (base, backward) {
        ("layer_norm", false) => {
            let m = if has_beta {
                LayerNorm::new(g, b, eps)
            } else {
                LayerNorm::new_no_bias(g, eps)
            };
            m.forward(&xin)
                .map_err(|e| fused_dtype(e, "LayerNorm (fused ops::layer_norm)"))?
        }
        ("layer_norm", true) => {
            if has_beta {
                candle_nn::ops::layer_norm_slow(&xin, &g, &b, eps as f32)?
            } else {
                LayerNorm::new_no_bias(g, eps).forward(&xin)?
            }
        }
        ("rms_norm", false) => RmsNorm::new(g, eps)
            .forward(&xin)
            .map_err(|e| fused_dtype(e, "RmsNorm (fused ops::rms_norm)"))?,
        ("rms_norm", true) => RmsNorm::new(g, eps).forward_diff(&xin)?,
        ("group_norm", _) => {
            let c = plen;
            GroupNorm::new(g, b, c, case.usize_field("groups")?, eps)?.forward(&xin)?
        }
        _ => unreachable!(),
    };
    let y = match &perm_out {
        Some(p) => y.permute(p.clone())?,
        None => y,
    };
    if !backward {
        return Ok(vec![("y".into(), values(&y.reshape(shape)?, case.dtype)?)]);
    }
    let dy = tensor(input(inp, "dy")?, &model_shape)?;
    let grads = (y * dy)?.sum_all()?.backward()?;
    let grad = |v: &Var, what: &str| {
        grads
            .get(v.as_tensor())
            .cloned()
            .ok_or_else(|| Failure::Error(format!("candle computed no gradient for {what}")))
    };
    let mut outs = vec![("dx".to_string(), values(&grad(&x, "x")?, case.dtype)?)];
    if has_gamma {
        outs.push((
            "dgamma".into(),
            values(&grad(&gamma, "gamma")?, case.dtype)?,
        ));
    }
    if has_beta {
        outs.push(("dbeta".into(), values(&grad(&beta, "beta")?, case.dtype)?));
    }
    Ok(outs)
}
