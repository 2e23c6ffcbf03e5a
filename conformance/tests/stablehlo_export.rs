//! `bnconf export --format stablehlo` (docs/FORMAT.md, "Added in bnconf 0.3: StableHLO
//! export"): the files exist, the module's constants are the suite's inputs bit for bit, the
//! goldens are the judge's exact values correctly rounded, the budgets are `k·u·total(u)` of
//! the judge's element budgets, and bad arguments are exit 2 naming the field.
//! Run in release (`cargo test --release -p bnconf --test stablehlo_export`).

mod common;

use bnconf::formats::npy::{read_npy_any, NpyData};
use bnconf::judge::{budget, check};
use bnconf::suite::{self, Filter, Precision, SuiteCase};
use bnconf_spec::exact::parse::parse_rational;
use bnconf_spec::exact::round::{round, round_rational, FloatFormat};
use common::{bnconf, stderr, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Every `%<name>_c = stablehlo.constant dense<"0x…"> : tensor<…>` of a module: name → bytes.
fn constants(module: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for line in module.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix('%') else {
            continue;
        };
        let Some((name, rhs)) = rest.split_once(" = stablehlo.constant dense<\"0x") else {
            continue;
        };
        let hex = rhs.split('"').next().unwrap();
        assert!(hex.len() % 2 == 0, "{line}");
        let bytes = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        out.insert(name.trim_end_matches("_c").to_string(), bytes);
    }
    out
}

fn decode(bytes: &[u8], t: FloatFormat) -> Vec<f64> {
    match t {
        FloatFormat::F32 => bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        _ => bytes
            .chunks(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
    }
}

fn npy_values(path: &Path) -> (Vec<usize>, NpyData) {
    read_npy_any(path, 1 << 24).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn export(t: FloatFormat, dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "export",
        "--format",
        "stablehlo",
        "--suite",
        "default",
        "--dtype",
        t.name(),
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = bnconf(&args);
    assert!(o.status.success(), "{}", text(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["format"], "bnconf-stablehlo/1");
    assert_eq!(m["dtype"], t.name());
    m
}

fn check_dtype(t: FloatFormat) {
    let dir = common::scratch("stablehlo", t.name());
    let m = export(t, &dir, &[]);
    let s = suite::generate_in(
        "default",
        &[Precision::uniform(t)],
        suite::DEFAULT_SEED,
        &Filter::default(),
    )
    .unwrap();
    let by_id: BTreeMap<&str, &SuiteCase> = s.cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let listed = m["cases"].as_array().unwrap();
    let unsupported = m["unsupported"].as_array().unwrap();
    // Every suite case is either a module or listed unsupported (or excluded, with a reason).
    let extra_excluded = m["excluded"].as_array().unwrap().len() - s.excluded.len();
    assert_eq!(
        listed.len() + unsupported.len() + extra_excluded,
        s.cases.len()
    );
    for u in unsupported {
        let c = by_id[u["id"].as_str().unwrap()];
        assert!(
            !matches!(
                c.op,
                bnconf_spec::Op::Forward | bnconf_spec::Op::Backward | bnconf_spec::Op::Eval
            ),
            "{}",
            c.id
        );
        assert!(u["reason"].as_str().unwrap().contains(c.op.name()));
    }
    let mut ops_seen = std::collections::BTreeSet::new();
    let mut module_cases = Vec::new();
    for e in listed {
        let id = e["id"].as_str().unwrap();
        let c = by_id[id];
        ops_seen.insert((c.op.name(), c.layout.name()));
        let text = std::fs::read_to_string(dir.join(e["module"].as_str().unwrap())).unwrap();
        // The constants are the suite's inputs, bit for bit, one per input of the op.
        let consts = constants(&text);
        assert_eq!(consts.len(), c.op.inputs().len(), "{id}");
        for (name, want) in &c.inputs {
            let got = decode(&consts[name.as_str()], t);
            assert_eq!(got.len(), want.len(), "{id} {name}");
            assert!(
                got.iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{id}: constant %{name}_c differs from the suite's input"
            );
        }
        let stablehlo_op = match c.op {
            bnconf_spec::Op::Forward => "\"stablehlo.batch_norm_training\"",
            bnconf_spec::Op::Backward => "\"stablehlo.batch_norm_grad\"",
            _ => "\"stablehlo.batch_norm_inference\"",
        };
        assert!(text.contains(stablehlo_op), "{id}");
        // eps: the module holds float32(eps), and the manifest says so exactly.
        let eps = parse_rational(&c.eps).unwrap();
        let eps32 = round_rational(&eps, FloatFormat::F32);
        let exact = e["eps_module_exact"].as_str().unwrap();
        assert_eq!(
            parse_rational(exact).unwrap(),
            eps32.to_rational().unwrap(),
            "{id}"
        );
        let attr = text
            .split("{epsilon = ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert_eq!(attr.parse::<f64>().unwrap(), eps32.to_f64(), "{id}: {attr}");
        // The case the module computes: the suite case with that eps (as "p/q").
        let mut mc = c.clone();
        mc.eps = exact.to_string();
        module_cases.push((e, mc));
    }
    // forward/backward/eval on every layout
    assert_eq!(
        ops_seen.len(),
        3 * bnconf_spec::Layout::ALL.len(),
        "{ops_seen:?}"
    );
    let cases: Vec<SuiteCase> = module_cases.iter().map(|(_, c)| c.clone()).collect();
    let prepared = check::prepare(&cases).unwrap();
    let mut compared = 0usize;
    for ((e, mc), p) in module_cases.iter().zip(&prepared) {
        for o in e["outputs"].as_array().unwrap() {
            let name = o["name"].as_str().unwrap();
            let (shape, g) = npy_values(&dir.join(o["golden"].as_str().unwrap()));
            let (bshape, b) = npy_values(&dir.join(o["budget"].as_str().unwrap()));
            assert_eq!(shape, bshape);
            assert_eq!(g.len(), p.output_len(name), "{} {name}", mc.id);
            assert!(matches!(b, NpyData::F64(_)), "budget is f64");
            match (&g, t) {
                (NpyData::F32(_), FloatFormat::F32) | (NpyData::F64(_), FloatFormat::F64) => {}
                _ => panic!("{}: golden {name} is {}", mc.id, g.dtype_name()),
            }
            let u = budget::unit_roundoff(t);
            for i in 0..g.len() {
                let want = round(&p.exact_at(name, i), t).to_f64();
                assert_eq!(
                    g.get(i).to_bits(),
                    want.to_bits(),
                    "{}: golden {name}[{i}]",
                    mc.id
                );
                let bw = p.k * u * p.budget_at(name, i).total(u);
                assert_eq!(
                    b.get(i).to_bits(),
                    bw.to_bits(),
                    "{}: budget {name}[{i}]",
                    mc.id
                );
                // A correctly rounded value is within its own budget (ratio <= 1 <= k).
                assert!(bw > 0.0, "{}: budget {name}[{i}] = {bw}", mc.id);
                compared += 1;
            }
        }
    }
    assert!(compared > 10_000, "{compared}");
}

/// The underflow term of the budget is two subnormal steps also when the format is only known
/// at run time (`powi(-1074)` evaluated at run time is 0: the f64 budgets of the export
/// differed from the library's on all-zero outputs until budget::min_subnormal split it).
#[test]
fn min_subnormal_at_run_time() {
    let f = std::hint::black_box(FloatFormat::F64);
    assert_eq!(budget::min_subnormal(f), f64::from_bits(1));
    let f = std::hint::black_box(FloatFormat::F32);
    assert_eq!(budget::min_subnormal(f), f32::from_bits(1) as f64);
    assert_eq!(
        budget::underflow(budget::unit_roundoff(FloatFormat::F64)),
        2.0 * f64::from_bits(1)
    );
}

#[test]
fn stablehlo_export_f32() {
    check_dtype(FloatFormat::F32);
}

#[test]
fn stablehlo_export_f64() {
    check_dtype(FloatFormat::F64);
}

/// The f64 modules' eps differs from the suite's (StableHLO's epsilon is f32), so their
/// goldens differ from the suite's exact ones at least somewhere: the export really uses the
/// module's eps.
#[test]
fn goldens_are_for_the_module_eps() {
    let dir = common::scratch("stablehlo", "eps");
    let m = export(
        FloatFormat::F64,
        &dir,
        &["--ops", "eval", "--layouts", "nchw"],
    );
    let s = suite::generate_in(
        "default",
        &[Precision::uniform(FloatFormat::F64)],
        suite::DEFAULT_SEED,
        &Filter {
            ops: vec![bnconf_spec::Op::Eval],
            layouts: vec![bnconf_spec::Layout::Nchw],
        },
    )
    .unwrap();
    let suite_golden = check::prepare(&s.cases).unwrap();
    let mut differ = 0;
    for (e, p) in m["cases"].as_array().unwrap().iter().zip(&suite_golden) {
        assert_eq!(e["id"].as_str().unwrap(), p.case.id);
        let (_, g) = npy_values(&dir.join(e["outputs"][0]["golden"].as_str().unwrap()));
        differ += (0..g.len())
            .filter(|&i| {
                g.get(i).to_bits()
                    != round(&p.exact_at("y", i), FloatFormat::F64)
                        .to_f64()
                        .to_bits()
            })
            .count();
    }
    assert!(differ > 0);
}

#[test]
fn bad_arguments_exit_2_naming_the_field() {
    let dir = common::scratch("stablehlo", "bad");
    let out = dir.join("x");
    let o = out.to_str().unwrap();
    for (args, field) in [
        (
            vec![
                "export",
                "--format",
                "stablehlo",
                "--dtype",
                "f16",
                "--out",
                o,
            ],
            "--dtype",
        ),
        (
            vec![
                "export",
                "--format",
                "stablehlo",
                "--dtype",
                "bf16+f32",
                "--out",
                o,
            ],
            "--dtype",
        ),
        (
            vec!["export", "--format", "onnnx", "--dtype", "f32", "--out", o],
            "--format",
        ),
        (
            vec![
                "export",
                "--format",
                "stablehlo",
                "--suite",
                "nope",
                "--out",
                o,
            ],
            "--suite",
        ),
    ] {
        let r = bnconf(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r));
        assert!(stderr(&r).contains(field), "{args:?}: {}", stderr(&r));
        assert!(!out.join("manifest.json").exists(), "{args:?}");
    }
}

/// Without `--format` the export is still the kernel directory protocol.
#[test]
fn default_format_is_the_protocol() {
    let dir = common::scratch("stablehlo", "default");
    let r = bnconf(&[
        "export",
        "--dtype",
        "f32",
        "--ops",
        "eval",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", text(&r));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["format"], "bnconf-suite/1");
    let id = m["cases"][0].as_str().unwrap();
    assert!(dir.join(id).join("case.json").exists());
    assert!(!dir.join(id).join("module.mlir").exists());
}
