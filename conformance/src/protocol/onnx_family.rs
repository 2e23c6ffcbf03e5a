//! `bnconf export --family F --format onnx` (docs/FORMAT.md, "Added in bnconf 0.3: the family's
//! ONNX export"): the family's forward cases in ONNX's backend-test layout, as
//! [`super::onnx_export`] writes batch_norm's — per case an operator expresses
//! `<id>/model.onnx` (one node), `<id>/test_data_set_0/{input,output}_<i>.pb` (the outputs the
//! exact results correctly rounded) and `<id>/budget/<output>.npy`; `manifest.json`
//! (`bnconf-onnx/1`, with `"family"`) lists them, and the cases no operator expresses with the
//! reason.
//!
//! The mapping (ai.onnx; `epsilon` is a float32 attribute, so the goldens and budgets are
//! those of the case with exactly float32(eps), and a case that eps makes ill-posed is
//! excluded):
//! * `layer_norm` → LayerNormalization-17 (IR 8): `X`, `Scale` (ones when the case has no
//!   gamma: Scale is required), `B` (left out without beta); `axis = rank − normalized_ndim`,
//!   `stash_type` float32 (double for an f64 case); outputs `Y`, and `Mean`, `InvStdDev` (our `mean`, `rstd`, shaped
//!   `[*batch, 1, …]`) when the parameter dtype is float32 — their type `U` is float or
//!   bfloat16, so an f64 or f16 case judges `Y` only.
//! * `rms_norm` (convention `standard`) → RMSNormalization-23 (IR 11): `X`, `scale` (ones
//!   without gamma); `axis`, `stash_type` as layer_norm; output `Y`. The `offset` convention
//!   (`(1 + gamma)·xhat`) has no ONNX form.
//! * `group_norm` on `nc`, `ncl`, `nchw`, `ncdhw` → GroupNormalization-21 (IR 10): `X`, `scale`
//!   and `bias` per channel (both required: ones and zeros where the case has none);
//!   `num_groups`, `stash_type` as layer_norm. The channels-last layouts (`nhwc`, `ndhwc`) have no ONNX form (the operator
//!   takes the channel on axis 1).
//! * Mixed precision (`f16+f32`, `bf16+f32`): the operators type the parameters as `X`
//!   (LayerNormalization, GroupNormalization) or `Y` as the scale (RMSNormalization), so a
//!   half `X` with float32 parameters and a half `Y` has no ONNX form.
//! * The backward ops: no operator of ai.onnx computes them.

use super::onnx_export::{model_of, write_test, Node, Port, FORMAT};
use crate::error::{ConfError, Result};
use crate::formats::family_case::family_shape;
use crate::formats::onnx_proto::AttributeProto;
use crate::judge::family::prepare_family;
use crate::protocol::stablehlo::{dyadic_decimal, write_family_manifest, Written};
use crate::suite::family::{family_ill_posed, format_of, FamilySuite, FamilySuiteCase};
use crate::suite::family_select::FamilySelection;
use bnconf_impl::family::{FamilyOp, Named, RmsConvention};
use bnconf_spec::exact::round::{f64_to_rational, FloatFormat};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The operator, its opset and that opset's IR version, per forward op.
pub fn operator(op: FamilyOp) -> Option<(&'static str, i64, i64)> {
    match op {
        FamilyOp::LayerNorm => Some(("LayerNormalization", 17, 8)),
        FamilyOp::RmsNorm => Some(("RMSNormalization", 23, 11)),
        FamilyOp::GroupNorm => Some(("GroupNormalization", 21, 10)),
        _ => None,
    }
}

/// Why a family case has no ONNX model (`None`: it has one).
pub fn unsupported(c: &FamilySuiteCase) -> Option<String> {
    let case = &c.case;
    let Some((operator, opset, _)) = operator(case.op) else {
        return Some(format!(
            "no operator of the ai.onnx domain computes {} (the ONNX normalization operators are forward only)",
            case.op.name()
        ));
    };
    if case.layout.channels_last() {
        return Some(format!(
            "layout {}: {operator} takes the channel on axis 1 ([N, C, D1, ...]), this layout has it last",
            case.layout.name()
        ));
    }
    if case.dtype != case.param_dtype {
        return Some(format!(
            "{operator}-{opset} types the parameters as X (or Y as the scale): a {} X with {} parameters has no ONNX form",
            case.dtype.name(),
            case.param_dtype.name()
        ));
    }
    if case.op == FamilyOp::RmsNorm && case.convention == RmsConvention::Offset {
        return Some("convention offset: RMSNormalization computes scale·x·rstd; (1 + gamma)·x·rstd has no attribute".into());
    }
    None
}

/// What the export writes of a supported case.
struct Test {
    node: Node,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    eps32: f32,
    k: f64,
}

/// The ONNX test of a supported case, or why float32(eps) makes it ill-posed.
fn build(c: &FamilySuiteCase) -> Result<std::result::Result<Test, String>> {
    let eps32 = c.case.eps as f32;
    let mut mc = c.clone();
    mc.case.eps = f64::from(eps32);
    if let Some(why) = family_ill_posed(&mc.case) {
        return Ok(Err(format!("with float32 epsilon: {why}")));
    }
    let case = &mc.case;
    let p = prepare_family(&mc).map_err(|e| ConfError::field(c.id.clone(), e.to_string()))?;
    let gold = p.rounded_goldens();
    let allowed = |name: &str| -> Vec<f64> {
        let u = format_of(case.dtype_of(name)).unit_roundoff();
        let k = p.budgets.gate[name];
        p.budgets.outputs[name]
            .iter()
            .map(|b| k * u * b.total(u))
            .collect()
    };
    let xdims = case.shape.clone();
    let pdims = family_shape(case, "gamma");
    let (act, par) = (format_of(case.dtype), format_of(case.param_dtype));
    let input = |onnx, name: &str| Port {
        onnx,
        bnconf: name.to_string(),
        dims: family_shape(case, name),
        values: case.inputs[name].clone(),
        format: format_of(case.dtype_of(name)),
        budget: vec![],
    };
    let constant = |onnx, v: f64, what: &str| Port {
        onnx,
        bnconf: what.to_string(),
        dims: pdims.clone(),
        values: vec![v; pdims.iter().product()],
        format: par,
        budget: vec![],
    };
    let output = |onnx, name: &str, dims: Vec<usize>| Port {
        onnx,
        bnconf: name.to_string(),
        dims,
        values: gold[name].clone(),
        format: format_of(case.dtype_of(name)),
        budget: allowed(name),
    };
    let weight = |onnx| {
        if case.inputs.contains_key("gamma") {
            input(onnx, "gamma")
        } else {
            constant(onnx, 1.0, "1 (the case has no gamma)")
        }
    };
    let (op_type, opset, ir_version) = operator(case.op).expect("a supported op");
    let mut attribute = vec![AttributeProto::float("epsilon", eps32)];
    let mut inputs = vec![input("X", "x")];
    let mut outputs = vec![output("Y", "y", xdims.clone())];
    let rank = xdims.len() as i64;
    // the statistics' precision: float32 (ONNX's default) for float32 and the half types,
    // double for a double case (float32 would not be the case's precision)
    let stash = if act == FloatFormat::F64 {
        crate::formats::onnx_proto::DT_DOUBLE
    } else {
        crate::formats::onnx_proto::DT_FLOAT
    } as i64;
    match case.op {
        FamilyOp::LayerNorm => {
            let k = case
                .normalized_ndim
                .expect("layer_norm has normalized_ndim");
            attribute.push(AttributeProto::int("axis", rank - k as i64));
            attribute.push(AttributeProto::int("stash_type", stash));
            inputs.push(weight("Scale"));
            if case.inputs.contains_key("beta") {
                inputs.push(input("B", "beta"));
            }
            if par == FloatFormat::F32 {
                let mut sdims = family_shape(case, "mean");
                sdims.extend(std::iter::repeat_n(1, k));
                outputs.push(output("Mean", "mean", sdims.clone()));
                outputs.push(output("InvStdDev", "rstd", sdims));
            }
        }
        FamilyOp::RmsNorm => {
            let k = case.normalized_ndim.expect("rms_norm has normalized_ndim");
            attribute.push(AttributeProto::int("axis", rank - k as i64));
            attribute.push(AttributeProto::int("stash_type", stash));
            inputs.push(weight("scale"));
        }
        FamilyOp::GroupNorm => {
            let g = case.groups.expect("group_norm has groups");
            attribute.push(AttributeProto::int("num_groups", g as i64));
            attribute.push(AttributeProto::int("stash_type", stash));
            inputs.push(weight("scale"));
            inputs.push(if case.inputs.contains_key("beta") {
                input("bias", "beta")
            } else {
                constant("bias", 0.0, "0 (the case has no beta)")
            });
        }
        op => unreachable!("no ONNX test for {}", op.name()),
    }
    debug_assert_eq!(act, format_of(case.dtype_of("x")));
    let k = outputs
        .iter()
        .map(|o| p.budgets.gate[o.bnconf.as_str()])
        .fold(0.0, f64::max);
    Ok(Ok(Test {
        node: Node {
            name: "norm",
            op_type,
            attribute,
            opset,
            ir_version,
            doc: format!("family {}, op {}", case.op.family().name(), case.op.name()),
        },
        inputs,
        outputs,
        eps32,
        k,
    }))
}

/// Write the ONNX export of a family selection into `dir`: per supported case
/// `<id>/model.onnx`, `<id>/test_data_set_0/{input,output}_<i>.pb`, `<id>/budget/<output>.npy`,
/// then `manifest.json` (`bnconf-onnx/1` with `"family"`).
pub fn export(sel: &FamilySelection, s: &FamilySuite, dir: &Path) -> Result<Written> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut w = Written::default();
    let mut listed = Vec::new();
    for c in &s.cases {
        if let Some(why) = unsupported(c) {
            w.unsupported.push((c.id.clone(), why));
            continue;
        }
        let t = match build(c)? {
            Ok(t) => t,
            Err(why) => {
                w.excluded.push((c.id.clone(), why));
                continue;
            }
        };
        let opset = t.node.opset;
        let op_type = t.node.op_type;
        let model = model_of(&c.id, t.node, &t.inputs, &t.outputs);
        let (ins, outs) = write_test(dir, &c.id, &model, &t.inputs, &t.outputs)?;
        let case = &c.case;
        let eps_exact = f64_to_rational(f64::from(t.eps32)).expect("finite");
        let mut entry = json!({
            "id": c.id,
            "model": format!("{}/model.onnx", c.id),
            "family": case.op.family().name(),
            "op": case.op.name(),
            "operator": op_type,
            "opset": opset,
            "layout": case.layout.name(),
            "shape": case.shape,
            "dtype": case.dtype.name(),
            "param_dtype": case.param_dtype.name(),
            "affine": case.affine.name(),
            "eps": case.eps,
            "epsilon": f64::from(t.eps32),
            "epsilon_exact": dyadic_decimal(&eps_exact).expect("an f32 value is dyadic"),
            "level": c.level.name(),
            "class": c.class,
            "k": t.k,
            "inputs": ins,
            "outputs": outs,
        });
        if let Some(k) = case.normalized_ndim {
            entry["normalized_ndim"] = json!(k);
        }
        if let Some(g) = case.groups {
            entry["groups"] = json!(g);
        }
        if case.op == FamilyOp::RmsNorm {
            entry["convention"] = json!(case.convention.name());
        }
        listed.push(entry);
        w.modules += 1;
    }
    let operators: BTreeMap<&str, Value> =
        [FamilyOp::LayerNorm, FamilyOp::RmsNorm, FamilyOp::GroupNorm]
            .into_iter()
            .filter_map(|op| {
                operator(op).map(|(o, v, ir)| {
                    (
                        op.name(),
                        json!({"operator": o, "opset": v, "ir_version": ir}),
                    )
                })
            })
            .collect();
    write_family_manifest(
        dir,
        FORMAT,
        (sel, s),
        &[
            ("operators", json!(operators)),
            ("budget", json!("per element |output - golden| <= budget: k*u*(cond + mag + u*mag2 + underflow/u), f64")),
        ],
        listed,
        &w,
    )?;
    Ok(w)
}
