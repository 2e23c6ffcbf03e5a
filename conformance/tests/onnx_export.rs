//! `bnconf export --format onnx` (docs/FORMAT.md, "Added in bnconf 0.3: judging a user's case
//! and ONNX test data"): `bnconf onnx` (the reader of ONNX's backend-test data) reads the
//! export back and judges every golden conforming and correctly rounded; the models hold one
//! BatchNormalization-15 node with the float32 attributes; inputs are the suite's bit for bit;
//! outputs are the exact results (with the float32 attributes) correctly rounded; budgets are
//! `k·u·total(u)`; every other case is listed unsupported with its reason; the bytes do not
//! depend on the thread count. Run in release (`cargo test --release -p bnconf --test onnx_export`).

mod common;

use bnconf::formats::npy::{read_npy_any, NpyData};
use bnconf::formats::onnx_proto as pb;
use bnconf::judge::{budget, check};
use bnconf::suite::{self, Filter, Precision, SuiteCase};
use bnconf_spec::exact::parse::parse_rational;
use bnconf_spec::exact::round::{round, round_rational, FloatFormat};
use bnconf_spec::{Layout, Op};
use common::onnx::{pb_file, values};
use common::{bnconf, bnconf_env, text};
use prost::Message as _;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn export(prec: &str, dir: &Path, env: &[(&str, &str)]) -> Value {
    let o = bnconf_env(
        &[
            "export",
            "--format",
            "onnx",
            "--dtype",
            prec,
            "--out",
            dir.to_str().unwrap(),
        ],
        env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["format"], "bnconf-onnx/1");
    assert_eq!(m["opset"], 15);
    m
}

fn exact_of(text: &str) -> bnconf_spec::Rational {
    parse_rational(text).unwrap()
}

/// Every model, input, golden and budget of one precision's export, against the suite.
fn check_precision(prec: &str) {
    let dir = common::scratch("onnx-export", prec);
    let m = export(prec, &dir, &[]);
    let p = Precision::from_name(prec).unwrap();
    let s = suite::generate_in("default", &[p], suite::DEFAULT_SEED, &Filter::default()).unwrap();
    let by_id: BTreeMap<&str, &SuiteCase> = s.cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let [listed, unsupported, excluded] =
        ["cases", "unsupported", "excluded"].map(|k| m[k].as_array().unwrap());
    // Every suite case is a model, unsupported, or excluded (the suite's or ill-posed with
    // the float32 attributes).
    assert_eq!(
        listed.len() + unsupported.len() + excluded.len(),
        s.cases.len() + s.excluded.len()
    );
    // Unsupported: exactly the ops and layouts ONNX has no operator for, each with its reason.
    for u in unsupported {
        let c = by_id[u["id"].as_str().unwrap()];
        let why = u["reason"].as_str().unwrap();
        match (c.op, c.layout) {
            (_, Layout::Nhwc | Layout::Ndhwc) => {
                assert!(
                    why.contains(&format!("layout {}", c.layout.name())),
                    "{why}"
                )
            }
            (Op::RunningUpdate, _) => {
                assert_eq!(c.convention.unwrap().name(), "pytorch");
                assert!(why.contains("unbiased"), "{why}");
            }
            (Op::Eval | Op::Forward, _) => panic!("{} unsupported: {why}", c.id),
            (op, _) => assert!(why.contains(op.name()), "{why}"),
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut compared = 0usize;
    for e in listed {
        let id = e["id"].as_str().unwrap();
        let c = by_id[id];
        seen.insert((c.op.name(), c.layout.name()));
        let model = pb::ModelProto::decode(
            &std::fs::read(dir.join(e["model"].as_str().unwrap())).unwrap()[..],
        )
        .unwrap();
        assert_eq!(model.ir_version, 8);
        assert_eq!(model.opset_import.len(), 1);
        assert_eq!(
            (
                model.opset_import[0].domain.as_str(),
                model.opset_import[0].version
            ),
            ("", 15)
        );
        let g = model.graph.unwrap();
        assert_eq!(g.node.len(), 1, "{id}");
        let node = &g.node[0];
        assert_eq!(node.op_type, "BatchNormalization");
        assert_eq!(node.input, ["X", "scale", "B", "input_mean", "input_var"]);
        let attr = |k: &str| node.attribute.iter().find(|a| a.name == k).unwrap();
        // float32 attributes, exactly the manifest's values.
        let eps32 = round_rational(&exact_of(&c.eps), FloatFormat::F32);
        assert_eq!(attr("epsilon").f.unwrap() as f64, eps32.to_f64(), "{id}");
        assert_eq!(attr("epsilon").r#type, pb::ATTR_FLOAT);
        assert_eq!(
            exact_of(e["epsilon_exact"].as_str().unwrap()),
            eps32.to_rational().unwrap()
        );
        let training = attr("training_mode").i.unwrap();
        assert_eq!(training, i64::from(c.op != Op::Eval), "{id}");
        let mut mc = c.clone();
        mc.eps = e["epsilon_exact"].as_str().unwrap().to_string();
        assert_eq!(exact_of(&mc.eps), eps32.to_rational().unwrap());
        match c.op {
            Op::Forward => assert_eq!(attr("momentum").f, Some(0.0)),
            Op::RunningUpdate => {
                let a32 = round_rational(&exact_of(c.momentum.as_ref().unwrap()), FloatFormat::F32);
                assert_eq!(attr("momentum").f.unwrap() as f64, a32.to_f64());
                mc.momentum = Some(bnconf_spec::exact::fmt_rational(
                    &a32.to_rational().unwrap(),
                ));
            }
            _ => assert!(node.attribute.iter().all(|a| a.name != "momentum")),
        }
        // Inputs: the suite's values bit for bit, in their dtypes, X with ONNX's dims.
        let data = dir.join(id).join("test_data_set_0");
        let x_dims: Vec<i64> = match c.layout {
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                c.shape.iter().map(|&d| d as i64).collect()
            }
            _ => std::iter::once(1)
                .chain(c.shape.iter().map(|&d| d as i64))
                .collect(),
        };
        let bn_names: [&str; 5] = match c.op {
            Op::Eval => ["x", "gamma", "beta", "mean", "var"],
            Op::Forward => ["x", "gamma", "beta", "", ""],
            _ => ["x", "", "", "running_mean", "running_var"],
        };
        for (i, name) in bn_names.iter().enumerate() {
            let t = pb_file(&data.join(format!("input_{i}.pb")));
            assert_eq!(t.name, node.input[i]);
            let (f, v) = values(&t);
            if i == 0 {
                assert_eq!(t.dims, x_dims, "{id}");
            }
            if name.is_empty() {
                assert_eq!(f, c.param_dtype);
                continue;
            }
            assert_eq!(f, c.dtype_of(name), "{id} {name}");
            let want = &c.inputs[*name];
            assert!(
                v.len() == want.len()
                    && v.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{id}: input_{i}.pb differs from {name}"
            );
        }
        // Outputs: exact with the float32 attributes, correctly rounded; budgets k·u·total(u).
        let (gold_case, names): (SuiteCase, Vec<&str>) = match c.op {
            Op::Eval => (mc.clone(), vec!["y"]),
            Op::Forward => (mc.clone(), vec!["y", "mean", "var"]),
            _ => (mc.clone(), vec!["", "new_mean", "new_var"]),
        };
        let pr = check::prepare(std::slice::from_ref(&gold_case))
            .unwrap()
            .remove(0);
        let mut fc = mc.clone();
        fc.op = Op::Forward;
        fc.momentum = None;
        fc.convention = None;
        let ch = c.inputs.values().map(Vec::len).min().unwrap();
        fc.inputs = BTreeMap::from([
            ("x".into(), c.inputs["x"].clone()),
            ("gamma".into(), vec![1.0; ch]),
            ("beta".into(), vec![0.0; ch]),
        ]);
        for (i, o) in e["outputs"].as_array().unwrap().iter().enumerate() {
            assert_eq!(o["name"].as_str().unwrap(), node.output[i]);
            let t = pb_file(&dir.join(o["file"].as_str().unwrap()));
            let (f, v) = values(&t);
            let (bshape, b) =
                read_npy_any(&dir.join(o["budget"].as_str().unwrap()), 1 << 24).unwrap();
            assert!(matches!(b, NpyData::F64(_)));
            assert_eq!(bshape.iter().map(|&d| d as i64).collect::<Vec<_>>(), t.dims);
            let (pp, name) = if names[i].is_empty() {
                (
                    check::prepare(std::slice::from_ref(&fc)).unwrap().remove(0),
                    "y",
                )
            } else {
                (pr.clone(), names[i])
            };
            assert_eq!(f, pp.case.dtype_of(name), "{id} {name}");
            assert_eq!(v.len(), pp.output_len(name));
            let u = budget::unit_roundoff(f);
            for (j, got) in v.iter().enumerate() {
                let want = round(&pp.exact_at(name, j), f).to_f64();
                assert_eq!(got.to_bits(), want.to_bits(), "{id}: {name}[{j}]");
                let bw = pp.k * u * pp.budget_at(name, j).total(u);
                assert_eq!(b.get(j).to_bits(), bw.to_bits(), "{id}: budget {name}[{j}]");
                compared += 1;
            }
        }
    }
    // eval and forward on rows, flat, chw, nchw, nc, ncl, ncdhw; running_update where the
    // suite has it.
    for op in ["eval", "forward"] {
        for l in ["rows", "flat", "chw", "nchw", "nc", "ncl", "ncdhw"] {
            assert!(seen.contains(&(op, l)), "{op} {l}: {seen:?}");
        }
    }
    assert!(
        seen.iter().any(|(op, _)| *op == "running_update"),
        "{seen:?}"
    );
    assert!(compared > 5_000, "{compared}");
}

#[test]
fn f32_export_is_the_suite_exactly() {
    check_precision("f32");
}

#[test]
fn f16_and_mixed_exports_are_the_suite_exactly() {
    check_precision("f16");
    check_precision("bf16+f32");
}

/// `bnconf onnx` reads the export back (f32, f64) and judges every golden conforming and
/// correctly rounded, one table row per output of every model.
#[test]
fn bnconf_onnx_reads_the_export_back() {
    for prec in ["f32", "f64"] {
        let dir = common::scratch("onnx-export-rt", prec);
        let m = export(prec, &dir, &[]);
        let o = bnconf(&["onnx", dir.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{t}");
        let n_outputs: usize = m["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["outputs"].as_array().unwrap().len())
            .sum();
        let rows: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| test"))
            .collect();
        assert_eq!(rows.len(), n_outputs, "{t}");
        for r in rows {
            let cols: Vec<&str> = r.split('|').map(str::trim).collect();
            assert_eq!(cols[9], "pass", "{r}");
            let (a, b) = cols[12].split_once('/').unwrap();
            assert_eq!(a, b, "not correctly rounded: {r}");
        }
    }
}

/// The same bytes whatever the thread count; a bad --format is exit 2 naming it.
#[test]
fn deterministic_and_bad_format() {
    let a = common::scratch("onnx-export-det", "a");
    let b = common::scratch("onnx-export-det", "b");
    export("f32", &a, &[("RAYON_NUM_THREADS", "1")]);
    export("f32", &b, &[("RAYON_NUM_THREADS", "2")]);
    let files = common::same_tree(&a, &b, &a);
    assert!(files > 1000, "{files}");
    let o = bnconf(&["export", "--format", "onnyx", "--out", a.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("--format") && text(&o).contains("onnx"),
        "{}",
        text(&o)
    );
}
