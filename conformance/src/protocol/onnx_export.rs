//! `bnconf export --format onnx` (docs/FORMAT.md, "Added in bnconf 0.3: judging a user's case
//! and ONNX test data"): a suite written in ONNX's backend-test layout, which ONNX Runtime's
//! test runner, onnx-mlir, OpenVINO and `bnconf onnx` read: per case an ONNX operator
//! expresses, `<id>/model.onnx` (one `BatchNormalization` node, opset 15),
//! `<id>/test_data_set_0/input_<i>.pb` and `output_<i>.pb` (`TensorProto`, `raw_data`
//! little-endian; the outputs are the exact results correctly rounded to their dtype) and
//! `<id>/budget/<output>.npy` (the allowed absolute error per element, as the StableHLO export
//! writes it); `manifest.json` (`bnconf-onnx/1`) lists the cases, and those no ONNX operator
//! expresses with the reason.
//!
//! The mapping (ONNX's BatchNormalization-15: `X`, `scale`, `B`, `input_mean`, `input_var`;
//! `Y`, and in training mode `running_mean`, `running_var`; the statistics over every axis but
//! 1; `ReduceVar` is the population variance):
//! * `eval` is `training_mode = 0`: `Y = (X − input_mean)/sqrt(input_var + epsilon)·scale + B`.
//! * `forward` is `training_mode = 1` with `momentum = 0`: `running_mean = input_mean·0 +
//!   mean·1` is the batch mean and `running_var` the batch variance (biased), exactly, whatever
//!   `input_mean`/`input_var` hold (0 and 1 here).
//! * `running_update` in the ONNX convention (`a·running + (1 − a)·batch`, biased variance) is
//!   `training_mode = 1` with `momentum = a`, `scale = 1`, `B = 0`; the node's `Y` (a required
//!   output) is judged too, its golden that of `forward` on `x` with `gamma = 1`, `beta = 0`.
//!   The PyTorch convention blends the unbiased variance: no ONNX operator.
//! * `epsilon` and `momentum` are float32 attributes: the goldens and budgets are those of the
//!   case with exactly the float32 values (as the StableHLO export does for eps).
//! * Layouts: `nchw`, `nc`, `ncl`, `ncdhw` as they are (`[N, C, D1, ...]`); `rows`/`flat`
//!   (`[C, m]`) as `[1, C, m]` and `chw` as `[1, C, H, W]` (the same elements in the same
//!   order, the channel on axis 1). `nhwc` and `ndhwc` have their channel last, which
//!   BatchNormalization does not take.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::npy::{write_npy, NpyData};
use crate::formats::onnx_proto::{self as pb, AttributeProto, ValueInfoProto};
use crate::judge::prepare::{self, Prepared};
use crate::protocol::stablehlo::{allowed_error, dyadic_decimal, module_case};
use crate::suite::{self, Filter, Precision, Suite, SuiteCase};
use bnconf_spec::exact::round::{round, round_rational, FloatFormat};
use bnconf_spec::exact::{fmt_rational, parse::parse_rational, Rational};
use bnconf_spec::op::{Convention, Extent};
use bnconf_spec::{Geometry, Layout, Op};
use prost::Message as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The `format` of the export's `manifest.json`.
pub const FORMAT: &str = "bnconf-onnx/1";
/// The opset of the models (BatchNormalization-15).
pub const OPSET: i64 = 15;
/// The IR version of the models (the one opset 15 came with, ONNX 1.10).
pub const IR_VERSION: i64 = 8;

/// Why a case has no ONNX model (`None`: it has one).
pub fn unsupported(c: &SuiteCase) -> Option<String> {
    if !c.shard_sizes.is_empty() {
        return Some("a replicated case is split across ranks; an ONNX model of this export runs on one device".into());
    }
    if matches!(c.layout, Layout::Nhwc | Layout::Ndhwc) {
        return Some(format!("layout {}: BatchNormalization takes the channel on axis 1 ([N, C, D1, ...]), this layout has it last", c.layout.name()));
    }
    match (c.op, c.convention) {
        (Op::Eval | Op::Forward, _) | (Op::RunningUpdate, Some(Convention::Onnx)) => None,
        (Op::RunningUpdate, _) => Some("running_update in the PyTorch convention blends the unbiased batch variance (m/(m-1)); BatchNormalization's training mode blends the population variance (ReduceVar)".into()),
        (op, _) => Some(format!(
            "no operator of the ai.onnx domain computes {} (BatchNormalization is the forward and inference op)",
            op.name()
        )),
    }
}

/// The ONNX element type of a float format.
pub fn elem_type(f: FloatFormat) -> i32 {
    match f {
        FloatFormat::F32 => pb::DT_FLOAT,
        FloatFormat::F64 => pb::DT_DOUBLE,
        FloatFormat::F16 => pb::DT_FLOAT16,
        FloatFormat::BF16 => pb::DT_BFLOAT16,
    }
}

/// Values of format `f` (each exactly representable) as little-endian `raw_data`.
pub fn raw_bytes(v: &[f64], f: FloatFormat) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 8);
    for &x in v {
        match f {
            FloatFormat::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            FloatFormat::F64 => out.extend_from_slice(&x.to_le_bytes()),
            FloatFormat::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            FloatFormat::BF16 => out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
        }
    }
    out
}

/// A `TensorProto` named `name` of dims `dims` holding `v` in format `f`.
pub fn tensor_proto(name: &str, dims: &[usize], v: &[f64], f: FloatFormat) -> pb::TensorProto {
    pb::TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: elem_type(f),
        name: name.into(),
        raw_data: Some(raw_bytes(v, f)),
        ..Default::default()
    }
}

/// The dims of `X` (and `Y`) for a case's layout: see the module docs.
pub fn onnx_dims(c: &SuiteCase) -> Vec<usize> {
    match c.layout {
        Layout::Rows | Layout::Flat | Layout::Chw => [&[1][..], &c.shape].concat(),
        _ => c.shape.clone(),
    }
}

/// An f32 attribute's value exactly, as the decimal a suite case holds.
pub fn f32_value(text: &str) -> (f32, String) {
    let r = round_rational(
        &parse_rational(text).expect("a suite case's decimal"),
        FloatFormat::F32,
    );
    let exact = r
        .to_rational()
        .unwrap_or_else(|| Rational::from_integer(0.into()));
    (
        r.to_f64() as f32,
        dyadic_decimal(&exact).expect("an f32 value is dyadic"),
    )
}

/// One tensor of a test: ONNX name, bnconf name (what it is), dims, values, format; for an
/// output also its budget (the allowed absolute error per element).
pub struct Port {
    pub onnx: &'static str,
    pub bnconf: String,
    pub dims: Vec<usize>,
    pub values: Vec<f64>,
    pub format: FloatFormat,
    pub budget: Vec<f64>,
}

/// The one node of a test's model: its operator, attributes and the opset (with its IR
/// version) that defines it.
pub struct Node {
    /// The node's name in the graph.
    pub name: &'static str,
    pub op_type: &'static str,
    pub attribute: Vec<AttributeProto>,
    pub opset: i64,
    pub ir_version: i64,
    /// What the test is of (the graph's doc string).
    pub doc: String,
}

/// The correctly rounded outputs of a prepared case, each in its dtype.
fn goldens(p: &Prepared) -> Result<BTreeMap<&'static str, Vec<f64>>> {
    let c = &p.case;
    if !c.precision().is_mixed()
        && matches!(c.dtype, FloatFormat::F32 | FloatFormat::F64)
        && crate::fast::covers(c.op)
    {
        return crate::protocol::stablehlo::golden(c);
    }
    Ok(c.op
        .outputs()
        .iter()
        .map(|&n| {
            let f = c.dtype_of(n);
            let v = (0..p.output_len(n))
                .map(|i| round(&p.exact_at(n, i), f).to_f64())
                .collect();
            (n, v)
        })
        .collect())
}

fn prepared(c: &SuiteCase) -> Result<Prepared> {
    Ok(prepare::prepare(std::slice::from_ref(c))
        .map_err(|e| ConfError::field(c.id.clone(), e.to_string()))?
        .remove(0))
}

/// What the export writes of a supported case.
struct Test {
    /// The case the goldens are of (eps, momentum as float32).
    mc: SuiteCase,
    training: bool,
    momentum: Option<f32>,
    eps: f32,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    k: f64,
}

/// The ONNX test of a supported case, or why the float32 attributes make it ill-posed.
fn build(c: &SuiteCase) -> Result<std::result::Result<Test, String>> {
    let mut mc = module_case(c);
    let (eps32, _) = f32_value(&c.eps);
    let mut momentum = None;
    if c.op == Op::RunningUpdate {
        let (a32, a) = f32_value(c.momentum.as_deref().expect("running_update has momentum"));
        mc.momentum = Some(a);
        momentum = Some(a32);
    }
    if let Some(why) = suite::ill_posed(&mc) {
        return Ok(Err(format!("with float32 attributes: {why}")));
    }
    let g = Geometry::new(c.layout, &c.shape, usize::MAX).expect("valid");
    let xd = onnx_dims(c);
    let cd = vec![g.c];
    let (act, par) = (c.dtype, c.param_dtype);
    let p = prepared(&mc)?;
    let gold = goldens(&p)?;
    let budget = allowed_error(&p);
    let port = |onnx, bnconf: &str, dims: &[usize], values: Vec<f64>, format, budget| Port {
        onnx,
        bnconf: bnconf.to_string(),
        dims: dims.to_vec(),
        values,
        format,
        budget,
    };
    // A tensor of the case: an input (no budget) or an output (its golden and budget).
    let tensor = |onnx, name: &str, output: bool| {
        let dims = if Op::extent(name) == Extent::Cells {
            &xd
        } else {
            &cd
        };
        let (values, b) = if output {
            (gold[name].clone(), budget[name].clone())
        } else {
            (mc.inputs[name].clone(), vec![])
        };
        port(onnx, name, dims, values, c.dtype_of(name), b)
    };
    let input = |onnx, name: &str| tensor(onnx, name, false);
    let output = |onnx, name: &str| tensor(onnx, name, true);
    let constant = |onnx, v: f64, what: &str| port(onnx, what, &cd, vec![v; g.c], par, vec![]);
    let t = match c.op {
        Op::Eval => Test {
            training: false,
            momentum: None,
            inputs: vec![
                input("X", "x"),
                input("scale", "gamma"),
                input("B", "beta"),
                input("input_mean", "mean"),
                input("input_var", "var"),
            ],
            outputs: vec![output("Y", "y")],
            k: p.k,
            eps: eps32,
            mc,
        },
        Op::Forward => Test {
            training: true,
            momentum: Some(0.0),
            inputs: vec![
                input("X", "x"),
                input("scale", "gamma"),
                input("B", "beta"),
                constant("input_mean", 0.0, "0 (momentum 0: not used)"),
                constant("input_var", 1.0, "1 (momentum 0: not used)"),
            ],
            outputs: vec![
                output("Y", "y"),
                output("running_mean", "mean"),
                output("running_var", "var"),
            ],
            k: p.k,
            eps: eps32,
            mc,
        },
        Op::RunningUpdate => {
            // Y: forward of x with gamma = 1, beta = 0 and the node's epsilon.
            let mut fc = mc.clone();
            fc.op = Op::Forward;
            fc.momentum = None;
            fc.convention = None;
            fc.inputs = BTreeMap::from([
                ("x".to_string(), mc.inputs["x"].clone()),
                ("gamma".to_string(), vec![1.0; g.c]),
                ("beta".to_string(), vec![0.0; g.c]),
            ]);
            if let Some(why) = suite::ill_posed(&fc) {
                return Ok(Err(format!(
                    "Y (forward with scale 1, B 0, float32 eps) is ill-posed: {why}"
                )));
            }
            let fp = prepared(&fc)?;
            let fgold = goldens(&fp)?;
            let fbudget = allowed_error(&fp);
            Test {
                training: true,
                momentum,
                inputs: vec![
                    input("X", "x"),
                    constant("scale", 1.0, "1"),
                    constant("B", 0.0, "0"),
                    input("input_mean", "running_mean"),
                    input("input_var", "running_var"),
                ],
                outputs: vec![
                    port(
                        "Y",
                        "y of forward(x, gamma = 1, beta = 0)",
                        &xd,
                        fgold["y"].clone(),
                        act,
                        fbudget["y"].clone(),
                    ),
                    output("running_mean", "new_mean"),
                    output("running_var", "new_var"),
                ],
                k: p.k.max(fp.k),
                eps: eps32,
                mc,
            }
        }
        op => unreachable!("no ONNX test for {}", op.name()),
    };
    Ok(Ok(t))
}

/// The model of a test: one node of `node`'s operator, its inputs and outputs typed.
pub fn model_of(id: &str, node: Node, inputs: &[Port], outputs: &[Port]) -> pb::ModelProto {
    let vi = |p: &Port| ValueInfoProto::tensor(p.onnx, elem_type(p.format), &p.dims);
    pb::ModelProto {
        ir_version: node.ir_version,
        producer_name: "bnconf".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(pb::GraphProto {
            node: vec![pb::NodeProto {
                input: inputs.iter().map(|p| p.onnx.to_string()).collect(),
                output: outputs.iter().map(|p| p.onnx.to_string()).collect(),
                name: node.name.into(),
                op_type: node.op_type.into(),
                attribute: node.attribute,
            }],
            name: format!("bnconf_{id}"),
            initializer: vec![],
            doc_string: format!(
                "bnconf {} ONNX export ({FORMAT}): case {id}, {}; outputs are the exact results correctly rounded; conforming: |output - golden| <= budget/<output>.npy element by element",
                env!("CARGO_PKG_VERSION"),
                node.doc
            ),
            input: inputs.iter().map(vi).collect(),
            output: outputs.iter().map(vi).collect(),
        }),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: node.opset,
        }],
    }
}

/// The model of a BatchNormalization test.
fn model(id: &str, t: &Test) -> pb::ModelProto {
    let mut attribute = vec![AttributeProto::float("epsilon", t.eps)];
    if let Some(a) = t.momentum {
        attribute.push(AttributeProto::float("momentum", a));
    }
    attribute.push(AttributeProto::int("training_mode", i64::from(t.training)));
    let node = Node {
        name: "bn",
        op_type: "BatchNormalization",
        attribute,
        opset: OPSET,
        ir_version: IR_VERSION,
        doc: format!("op {}", t.mc.op.name()),
    };
    model_of(id, node, &t.inputs, &t.outputs)
}

/// Write one test's files under `dir/<id>/`: `model.onnx`, `test_data_set_0/input_<i>.pb`,
/// `output_<i>.pb` and `budget/<output>.npy`; returns the manifest's `inputs` and `outputs`
/// entries.
pub fn write_test(
    dir: &Path,
    id: &str,
    model: &pb::ModelProto,
    inputs: &[Port],
    outputs: &[Port],
) -> Result<(Vec<Value>, Vec<Value>)> {
    let cd = dir.join(id);
    let data = cd.join("test_data_set_0");
    for d in [&data, &cd.join("budget")] {
        std::fs::create_dir_all(d).map_err(|e| ConfError::io(d, e))?;
    }
    write_bytes(&cd.join("model.onnx"), &model.encode_to_vec())?;
    let entry = |i: usize, p: &Port, file: &str| {
        json!({"index": i, "name": p.onnx, "bnconf": p.bnconf, "dtype": p.format.name(),
               "shape": p.dims, "file": format!("{id}/test_data_set_0/{file}")})
    };
    let mut ins = Vec::new();
    for (i, p) in inputs.iter().enumerate() {
        let file = format!("input_{i}.pb");
        let tp = tensor_proto(p.onnx, &p.dims, &p.values, p.format);
        write_bytes(&data.join(&file), &tp.encode_to_vec())?;
        ins.push(entry(i, p, &file));
    }
    let mut outs = Vec::new();
    for (i, p) in outputs.iter().enumerate() {
        let file = format!("output_{i}.pb");
        let tp = tensor_proto(p.onnx, &p.dims, &p.values, p.format);
        write_bytes(&data.join(&file), &tp.encode_to_vec())?;
        let bfile = format!("budget/{}.npy", p.onnx);
        write_npy(&cd.join(&bfile), &p.dims, &NpyData::F64(p.budget.clone()))?;
        let mut e = entry(i, p, &file);
        e["budget"] = json!(format!("{id}/{bfile}"));
        outs.push(e);
    }
    Ok((ins, outs))
}

/// What was written: the StableHLO export's record (`modules`: the models written;
/// `unsupported`: the cases no ONNX operator expresses; `excluded`: those the float32
/// attributes make ill-posed).
pub use crate::protocol::stablehlo::Written;

/// Write the ONNX export of a suite into `dir` (every precision: BatchNormalization-15 takes
/// f32, f64, f16 and bf16, and parameters in another type than `X`): per supported case
/// `<id>/model.onnx`, `<id>/test_data_set_0/{input,output}_<i>.pb`, `<id>/budget/<output>.npy`,
/// then `manifest.json` (`bnconf-onnx/1`).
pub fn export(s: &Suite, dtype: Precision, filter: &Filter, dir: &Path) -> Result<Written> {
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
        let (ins, outs) = write_test(dir, &c.id, &model(&c.id, &t), &t.inputs, &t.outputs)?;
        let m = Geometry::new(c.layout, &c.shape, usize::MAX)
            .expect("valid")
            .m;
        let eps_exact = parse_rational(&t.mc.eps).expect("dyadic decimal");
        listed.push(json!({
            "id": c.id,
            "model": format!("{}/model.onnx", c.id),
            "op": c.op.name(),
            "layout": c.layout.name(),
            "shape": c.shape,
            "dtype": c.dtype.name(),
            "param_dtype": c.param_dtype.name(),
            "training_mode": i64::from(t.training),
            "eps": serde_json::from_str::<Value>(&c.eps).expect("eps is a JSON number"),
            "epsilon": t.eps as f64,
            "epsilon_exact": fmt_rational(&eps_exact),
            "momentum": t.momentum.map(f64::from),
            "level": c.level.name(),
            "class": c.class,
            "target": c.target,
            "m": m,
            "k": t.k,
            "inputs": ins,
            "outputs": outs,
        }));
        w.modules += 1;
    }
    crate::protocol::stablehlo::write_manifest(
        dir,
        FORMAT,
        (s, &dtype.name(), filter),
        &[("opset", json!(OPSET)), ("ir_version", json!(IR_VERSION))],
        &[(
            "budget",
            json!("per element |output - golden| <= budget: k(m)*u*(cond + mag + u*mag2 + underflow/u), f64"),
        )],
        listed,
        &w,
    )?;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_bytes_are_little_endian_in_each_format() {
        assert_eq!(
            raw_bytes(&[1.0, -2.0], FloatFormat::F32),
            [0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]
        );
        assert_eq!(raw_bytes(&[1.0], FloatFormat::F64), 1f64.to_le_bytes());
        assert_eq!(
            raw_bytes(&[1.0, -2.0], FloatFormat::F16),
            [0, 0x3c, 0, 0xc0]
        );
        assert_eq!(
            raw_bytes(&[1.0, -2.0], FloatFormat::BF16),
            [0x80, 0x3f, 0, 0xc0]
        );
    }

    #[test]
    fn float32_attributes_exactly() {
        let (f, d) = f32_value("0.1");
        assert_eq!(f, 0.1f32);
        assert_eq!(d.parse::<f64>().unwrap(), f64::from(0.1f32));
        assert_eq!(f32_value("0"), (0.0, "0".to_string()));
    }
}
