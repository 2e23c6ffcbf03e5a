//! `bnconf export --family F --format onnx` (docs/FORMAT.md, "Added in bnconf 0.3: the
//! family's ONNX export"): every family case is a model, unsupported (with the reason the
//! mapping gives) or excluded; each model holds one LayerNormalization-17,
//! RMSNormalization-23 or GroupNormalization-21 node with the case's attributes (float32
//! epsilon, axis, num_groups, the stash type); inputs are the suite's bit for bit (ones and
//! zeros where the case has no gamma or beta); outputs are the exact results with float32
//! epsilon, correctly rounded (recomputed here from the exact reference, not the export's
//! path); budgets are `k·u·total(u)` of the judge; the bytes do not depend on the thread
//! count. Run in release (`cargo test --release -p bnconf --test onnx_family_export`).

mod common;

use bnconf::formats::npy::{read_npy_any, NpyData};
use bnconf::formats::onnx_proto as pb;
use bnconf::judge::family::prepare_family;
use bnconf::suite::family::{family_goldens, format_of, Golden};
use bnconf_impl::family::{FamilyOp, Named, RmsConvention};
use bnconf_spec::exact::round::{round, FloatFormat};
use common::onnx::{pb_file, values};
use common::text;
use prost::Message as _;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn export(prec: &str, dir: &Path, env: &[(&str, &str)]) -> Value {
    common::family_export::export(
        "onnx",
        prec,
        dir,
        env,
        "ONNX tests of family all",
        "bnconf-onnx/1",
    )
}

/// The operator, opset and IR version each forward op maps to (FORMAT.md).
fn operator(op: FamilyOp) -> (&'static str, i64, i64) {
    match op {
        FamilyOp::LayerNorm => ("LayerNormalization", 17, 8),
        FamilyOp::RmsNorm => ("RMSNormalization", 23, 11),
        FamilyOp::GroupNorm => ("GroupNormalization", 21, 10),
        op => panic!("{} has no operator", op.name()),
    }
}

/// Every model, input, golden and budget of one precision's export, against the suite;
/// returns how many (op, layout) pairs have models.
fn check_precision(prec: &str) -> BTreeSet<(&'static str, &'static str)> {
    let dir = common::scratch("onnx-family-export", prec);
    let m = export(prec, &dir, &[]);
    let s = common::family_export::default_suite(prec);
    let by_id = common::family_export::by_id(&s);
    let [listed, unsupported, _] = common::family_export::partition(&m, &s);
    for u in unsupported {
        let c = &by_id[u["id"].as_str().unwrap()].case;
        let why = u["reason"].as_str().unwrap();
        if c.op.is_backward() {
            assert!(why.contains(c.op.name()), "{why}");
        } else if c.layout.channels_last() {
            assert!(
                why.contains(&format!("layout {}", c.layout.name())),
                "{why}"
            );
        } else if c.dtype != c.param_dtype {
            assert!(why.contains("parameters"), "{why}");
        } else {
            assert_eq!(
                c.convention,
                RmsConvention::Offset,
                "{} unsupported: {why}",
                c.op
            );
            assert!(why.contains("offset"), "{why}");
        }
    }
    let mut seen = BTreeSet::new();
    let mut compared = 0usize;
    for e in listed {
        let id = e["id"].as_str().unwrap();
        let sc = by_id[id];
        let c = &sc.case;
        seen.insert((c.op.name(), c.layout.name()));
        let model = pb::ModelProto::decode(
            &std::fs::read(dir.join(e["model"].as_str().unwrap())).unwrap()[..],
        )
        .unwrap();
        let (op_type, opset, ir) = operator(c.op);
        assert_eq!(model.ir_version, ir, "{id}");
        assert_eq!(model.opset_import.len(), 1);
        assert_eq!(
            (
                model.opset_import[0].domain.as_str(),
                model.opset_import[0].version
            ),
            ("", opset)
        );
        let g = model.graph.unwrap();
        assert_eq!(g.node.len(), 1, "{id}");
        let node = &g.node[0];
        assert_eq!(node.op_type, op_type);
        let attr = |k: &str| node.attribute.iter().find(|a| a.name == k);
        let eps32 = c.eps as f32;
        assert_eq!(attr("epsilon").unwrap().f, Some(eps32), "{id}");
        assert_eq!(attr("epsilon").unwrap().r#type, pb::ATTR_FLOAT);
        let stash = if c.dtype.name() == "f64" {
            pb::DT_DOUBLE
        } else {
            pb::DT_FLOAT
        };
        assert_eq!(attr("stash_type").unwrap().i, Some(stash as i64), "{id}");
        let rank = c.shape.len() as i64;
        match c.op {
            FamilyOp::GroupNorm => {
                assert_eq!(
                    attr("num_groups").unwrap().i,
                    Some(c.groups.unwrap() as i64)
                );
                assert!(attr("axis").is_none());
            }
            _ => assert_eq!(
                attr("axis").unwrap().i,
                Some(rank - c.normalized_ndim.unwrap() as i64),
                "{id}"
            ),
        }
        // Inputs: X, the weight, the bias (layer_norm leaves B out without beta; group_norm
        // feeds zeros), the suite's values bit for bit.
        let data = dir.join(id).join("test_data_set_0");
        let weight = if c.op == FamilyOp::LayerNorm {
            "Scale"
        } else {
            "scale"
        };
        let mut want_inputs = vec![
            ("X", Some("x")),
            (weight, c.inputs.get("gamma").map(|_| "gamma")),
        ];
        match c.op {
            FamilyOp::LayerNorm if c.inputs.contains_key("beta") => {
                want_inputs.push(("B", Some("beta")))
            }
            FamilyOp::GroupNorm => want_inputs.push(("bias", c.inputs.get("beta").map(|_| "beta"))),
            _ => {}
        }
        assert_eq!(
            node.input,
            want_inputs.iter().map(|p| p.0).collect::<Vec<_>>(),
            "{id}"
        );
        for (i, (onnx, name)) in want_inputs.iter().enumerate() {
            let t = pb_file(&data.join(format!("input_{i}.pb")));
            assert_eq!(&t.name, onnx);
            let (f, v) = values(&t);
            match name {
                Some(name) => {
                    assert_eq!(f, format_of(c.dtype_of(name)), "{id} {name}");
                    let want = &c.inputs[*name];
                    assert!(
                        v.len() == want.len()
                            && v.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{id}: input_{i}.pb differs from {name}"
                    );
                    let dims: Vec<i64> = if *name == "x" {
                        c.shape.iter().map(|&d| d as i64).collect()
                    } else {
                        t.dims.clone()
                    };
                    assert_eq!(t.dims, dims, "{id}");
                }
                None => {
                    let fill = if *onnx == "bias" { 0.0 } else { 1.0 };
                    assert!(v.iter().all(|&x| x == fill), "{id}: {onnx}");
                    assert_eq!(f, format_of(c.param_dtype));
                }
            }
        }
        // Outputs: Y, and layer_norm's Mean/InvStdDev where the parameters are float32.
        let mut want_outputs = vec![("Y", "y")];
        if c.op == FamilyOp::LayerNorm && format_of(c.param_dtype) == FloatFormat::F32 {
            want_outputs.extend([("Mean", "mean"), ("InvStdDev", "rstd")]);
        }
        assert_eq!(
            node.output,
            want_outputs.iter().map(|p| p.0).collect::<Vec<_>>(),
            "{id}"
        );
        let mut mc = sc.clone();
        mc.case.eps = f64::from(eps32);
        let exact = family_goldens(&mc.case).unwrap();
        let pr = prepare_family(&mc).unwrap();
        for (i, (onnx, name)) in want_outputs.iter().enumerate() {
            let o = &e["outputs"][i];
            assert_eq!(o["name"], *onnx);
            let t = pb_file(&dir.join(o["file"].as_str().unwrap()));
            let (f, v) = values(&t);
            assert_eq!(f, format_of(c.dtype_of(name)), "{id} {name}");
            let (bshape, b) =
                read_npy_any(&dir.join(o["budget"].as_str().unwrap()), 1 << 24).unwrap();
            assert!(matches!(b, NpyData::F64(_)));
            assert_eq!(bshape.iter().map(|&d| d as i64).collect::<Vec<_>>(), t.dims);
            let Golden::Q(ex) = &exact[name] else {
                panic!("{name} is in Q(sqrt(q))")
            };
            assert_eq!(v.len(), ex.len());
            if *name != "y" {
                // [*batch, 1, ...]: the statistics' elements, one per row
                assert_eq!(t.dims.iter().product::<i64>() as usize, ex.len());
                assert_eq!(t.dims.len(), c.shape.len());
            }
            let u = f.unit_roundoff();
            let k = pr.budgets.gate[name];
            for (j, got) in v.iter().enumerate() {
                let want = round(&ex[j], f).to_f64();
                assert_eq!(got.to_bits(), want.to_bits(), "{id}: {name}[{j}]");
                let bw = k * u * pr.budgets.outputs[name][j].total(u);
                assert_eq!(b.get(j).to_bits(), bw.to_bits(), "{id}: budget {name}[{j}]");
                compared += 1;
            }
        }
    }
    assert!(compared > 1_000, "{compared}");
    seen
}

#[test]
fn f32_and_f64_exports_are_the_suite_exactly() {
    for prec in ["f32", "f64"] {
        let seen = check_precision(prec);
        for want in [
            ("layer_norm", "last"),
            ("rms_norm", "last"),
            ("group_norm", "nc"),
            ("group_norm", "ncl"),
            ("group_norm", "nchw"),
        ] {
            assert!(
                seen.contains(&want),
                "{prec}: {want:?} not exported: {seen:?}"
            );
        }
    }
}

#[test]
fn half_exports_are_the_suite_exactly_and_mixed_has_no_onnx_form() {
    assert!(check_precision("f16").len() >= 4);
    assert!(check_precision("bf16").len() >= 4);
    // f16+f32: every forward case unsupported (the parameters' type is X's).
    let dir = common::scratch("onnx-family-export", "f16+f32");
    let m = export("f16+f32", &dir, &[]);
    assert!(m["cases"].as_array().unwrap().is_empty());
    assert!(!m["unsupported"].as_array().unwrap().is_empty());
}

/// The same bytes whatever the thread count; another format is exit 2 naming `--format`.
#[test]
fn deterministic_and_bad_format() {
    let a = common::scratch("onnx-family-det", "a");
    let b = common::scratch("onnx-family-det", "b");
    export("f32", &a, &[("RAYON_NUM_THREADS", "1")]);
    export("f32", &b, &[("RAYON_NUM_THREADS", "2")]);
    let files = common::same_tree(&a, &b, &a);
    assert!(files > 100, "{files}");
    let o = common::bnconf(&[
        "export",
        "--family",
        "layer_norm",
        "--format",
        "onnyx",
        "--out",
        a.join("x").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--format"), "{}", text(&o));
    assert!(!a.join("x").exists(), "no partial output");
}
