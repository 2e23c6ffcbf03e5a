//! `check --case` of a family case read as floats (`parse_family_case_floats`): the same
//! header and f64 inputs as the exact parse (`parse_family_case`) on the committed vectors,
//! on exports in every precision and on generated npy inputs that need rounding; the same
//! errors; the cell limits (fast per-row path: `max_elems`, per-element exact path:
//! `max_json_elems`, both before any input is read); and a case of more than 2^20 cells
//! judged through the library function `check --case` calls.

use bnconf::formats::case::InputLimits;
use bnconf::formats::family_case::{
    parse_family_case, parse_family_case_floats, round_f64_to, FamilyHeader,
};
use bnconf::formats::npy::{write_npy, NpyData};
use bnconf::judge::family::{family_fast_takes_inputs, prepare_family, FAMILY_FAST_MIN_LEN};
use bnconf::judge::verdict::Verdict;
use bnconf::protocol::family::{judge_user_case, user_suite_case};
use bnconf::suite::family_select::FamilySelection;
use bnconf_spec::exact::round::{f64_to_rational, round_rational, FloatFormat};
use half::f16;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("family_user_case_large-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lim() -> InputLimits {
    InputLimits::default()
}

/// Both parses of `v` agree: the same header, the same f64 inputs bit for bit; or the same
/// error. Returns whether it parsed.
fn same_parse(v: &Value, base: &Path, lim: &InputLimits, what: &str) -> bool {
    let exact = parse_family_case(v, base, lim);
    let floats = parse_family_case_floats(v, base, lim, FAMILY_FAST_MIN_LEN);
    match (exact, floats) {
        (Ok(e), Ok(f)) => {
            same_header(&e.header, &f, what);
            true
        }
        (Err(e), Err(f)) => {
            assert_eq!(e.to_string(), f.to_string(), "{what}");
            false
        }
        (e, f) => panic!("{what}: exact {:?}, floats {:?}", e.err(), f.err()),
    }
}

fn same_header(e: &FamilyHeader, f: &FamilyHeader, what: &str) {
    assert_eq!(e.id, f.id, "{what}");
    assert_eq!(e.eps, f.eps, "{what}");
    assert_eq!(e.extra, f.extra, "{what}");
    let bits = |h: &FamilyHeader| -> BTreeMap<String, Vec<u64>> {
        h.case
            .inputs
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|x| x.to_bits()).collect()))
            .collect()
    };
    assert_eq!(bits(e), bits(f), "{what}: inputs");
    assert_eq!(e.case, f.case, "{what}");
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

#[test]
fn the_float_parse_is_the_exact_one_on_the_committed_vectors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors/family");
    let mut files = vec![];
    json_files(&root, &mut files);
    let mut n = 0;
    for p in files {
        let v = read_json(&p);
        let Some(case) = v.get("case") else { continue };
        assert!(
            same_parse(case, p.parent().unwrap(), &lim(), &p.display().to_string()),
            "{}",
            p.display()
        );
        n += 1;
    }
    assert!(n >= 20, "only {n} family vectors");
}

#[test]
fn the_float_parse_is_the_exact_one_on_exports_in_every_precision() {
    let mut n = 0;
    for prec in ["f64", "f32", "f16", "bf16", "f16+f32", "bf16+f32"] {
        for family in ["layer_norm", "rms_norm", "group_norm"] {
            let sel = FamilySelection::from_names::<&str>(
                family,
                "default",
                prec,
                bnconf::suite::DEFAULT_SEED,
                &[],
                &[],
            )
            .unwrap();
            let s = sel.generate();
            let dir = scratch(&format!("export-{family}-{prec}"));
            bnconf::protocol::family::export(&sel, &s, &dir).unwrap();
            for c in &s.cases {
                let cd = dir.join(&c.id);
                let v = read_json(&cd.join("case.json"));
                let what = format!("{prec} {}", c.id);
                assert!(same_parse(&v, &cd, &lim(), &what), "{what}");
                // and the suite's own inputs
                let f = parse_family_case_floats(&v, &cd, &lim(), FAMILY_FAST_MIN_LEN).unwrap();
                assert_eq!(f.case.inputs, c.case.inputs, "{what}");
                n += 1;
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    assert!(n >= 100, "only {n} exported cases");
}

/// Values that need rounding in `f`: random ones, the format's midpoints (ties both ways),
/// just off them, its subnormals and their midpoints, values rounding to zero (both signs),
/// the largest finite value and just below the overflow boundary.
fn hard_values(f: FloatFormat, rng: &mut bnconf::suite::Rng, n: usize) -> Vec<f64> {
    let p2 = |e: i64| 2f64.powi(e as i32);
    let p = f.precision() as i64;
    let max = (2.0 - p2(1 - p)) * p2(f.emax());
    let mut v = vec![
        1.0 + p2(-p),
        1.0 + 3.0 * p2(-p),
        -(1.0 + p2(-p)),
        1.0 + p2(-p) + p2(-52),
        1.0 + p2(-p) - p2(-53),
        p2(f.emin() - p),
        3.0 * p2(f.emin() - p),
        p2(f.emin() - p) * 1.5,
        p2(f.emin() - p - 1),
        -p2(f.emin() - p - 1),
        1e-300,
        -1e-300,
        -0.0,
        0.0,
        max,
        -max,
        max + p2(f.emax() - p) * 0.999,
        p2(f.emin()),
        p2(f.emin()) * (1.0 - p2(-40)),
    ];
    while v.len() < n {
        let e = (rng.uniform() * 40.0 - 20.0) as i32;
        let x = rng.normal() * 2f64.powi(e);
        v.push(if rng.next_u64().is_multiple_of(3) {
            // on f's midpoint grid
            let q = p2((x.abs().log2().floor() as i64).max(f.emin()) - (p - 1));
            ((x / q).floor() + 0.5) * q
        } else {
            x
        });
    }
    v.truncate(n);
    v
}

#[test]
fn float_rounding_is_the_exact_rounding() {
    let mut rng = bnconf::suite::Rng::new(42);
    for f in [
        FloatFormat::F64,
        FloatFormat::F32,
        FloatFormat::F16,
        FloatFormat::BF16,
    ] {
        let mut vals = hard_values(f, &mut rng, 20_000);
        vals.extend(hard_values(FloatFormat::F16, &mut rng, 2000));
        vals.extend(hard_values(FloatFormat::BF16, &mut rng, 2000));
        vals.extend(hard_values(FloatFormat::F32, &mut rng, 2000));
        for &x in &vals {
            let want = round_rational(&f64_to_rational(x).unwrap(), f);
            let got = round_f64_to(x, f);
            match want.to_rational() {
                None => assert!(got.is_infinite(), "{x:e} in {}: {got:e}", f.name()),
                Some(q) => {
                    let w = if q == f64_to_rational(0.0).unwrap() {
                        0.0
                    } else {
                        want.to_f64()
                    };
                    assert_eq!(got.to_bits(), w.to_bits(), "{x:e} in {}", f.name());
                }
            }
        }
    }
}

/// A layer_norm case of `shape` (normalized_ndim 1) with its inputs in npy files under `dir`.
fn case_json(op: &str, shape: &[usize], dtype: &str, inputs: &[(&str, Value)]) -> Value {
    let family = if op.starts_with("rms") {
        "rms_norm"
    } else {
        "layer_norm"
    };
    let mut o = json!({
        "format": "bnconf-case/1",
        "id": format!("gen.{op}.{dtype}"),
        "family": family,
        "op": op,
        "layout": "last",
        "shape": shape,
        "dtype": dtype,
        "eps": "1e-5",
        "normalized_ndim": 1,
        "level": "core",
        "class": "generated",
    });
    let mut m = serde_json::Map::new();
    for (k, v) in inputs {
        m.insert(k.to_string(), v.clone());
    }
    o["inputs"] = Value::Object(m);
    o
}

fn npy(dir: &Path, name: &str, shape: &[usize], data: NpyData) -> Value {
    write_npy(&dir.join(name), shape, &data).unwrap();
    json!({ "npy": name })
}

#[test]
fn the_float_parse_rounds_npy_inputs_of_every_dtype_as_the_exact_one() {
    let dir = scratch("generated");
    let mut rng = bnconf::suite::Rng::new(7);
    let (rows, k) = (6usize, 64usize);
    for dtype in ["f64", "f32", "f16", "bf16"] {
        let f = FloatFormat::from_name(dtype).unwrap();
        for op in ["layer_norm_backward", "rms_norm"] {
            for (i, store) in ["f64", "f32", "own", "flat"].into_iter().enumerate() {
                // x, dy: the format's hard values, scaled into a sane range per row
                let mut x: Vec<f64> = hard_values(f, &mut rng, rows * k)
                    .into_iter()
                    .map(|v| {
                        if v.abs() > 1e4 || v.abs() < 1e-30 {
                            0.5 + v.abs().min(1.0)
                        } else {
                            v
                        }
                    })
                    .collect();
                x[0] = 1.0 + 2f64.powi(-(f.precision() as i32)); // a tie
                let dy: Vec<f64> = (0..rows * k).map(|_| rng.normal()).collect();
                let gamma: Vec<f64> = (0..k).map(|_| 1.0 + 0.1 * rng.normal()).collect();
                let data = |v: &[f64]| -> NpyData {
                    match (store, dtype) {
                        ("f32", _) => NpyData::F32(v.iter().map(|&e| e as f32).collect()),
                        ("own", "f16") => NpyData::F16(
                            v.iter()
                                .map(|&e| f16::from_f64(round_f64_to(e, f)))
                                .collect(),
                        ),
                        ("own", "bf16") => {
                            NpyData::F32(v.iter().map(|&e| round_f64_to(e, f) as f32).collect())
                        }
                        _ => NpyData::F64(v.to_vec()),
                    }
                };
                let xs: Vec<usize> = if store == "flat" {
                    vec![rows * k]
                } else {
                    vec![rows, k]
                };
                let tag = format!("{dtype}-{op}-{i}");
                let mut ins = vec![
                    ("x", npy(&dir, &format!("{tag}-x.npy"), &xs, data(&x))),
                    (
                        "gamma",
                        npy(&dir, &format!("{tag}-g.npy"), &[k], data(&gamma)),
                    ),
                ];
                if op.ends_with("backward") {
                    ins.push(("dy", npy(&dir, &format!("{tag}-dy.npy"), &xs, data(&dy))));
                }
                if op.starts_with("layer") && !op.ends_with("backward") {
                    ins.push((
                        "beta",
                        npy(&dir, &format!("{tag}-b.npy"), &[k], data(&gamma)),
                    ));
                }
                let v = case_json(op, &[rows, k], dtype, &ins);
                assert!(same_parse(&v, &dir, &lim(), &tag), "{tag}");
                // and the JSON-array route
                let mut va = v.clone();
                let arr: Vec<Value> = x.iter().map(|e| json!(format!("{e:?}"))).collect();
                va["inputs"]["x"] = Value::Array(arr);
                same_parse(&va, &dir, &lim(), &format!("{tag} json"));
            }
        }
    }
}

#[test]
fn the_float_parse_gives_the_exact_parse_errors() {
    let dir = scratch("errors");
    let (rows, k) = (4usize, 32usize);
    let good: Vec<f64> = (0..rows * k).map(|i| (i as f64 * 0.37).sin()).collect();
    let g: Vec<f64> = vec![1.0; k];
    let mut cases: Vec<(&str, Value)> = vec![];
    let x = npy(&dir, "x.npy", &[rows, k], NpyData::F64(good.clone()));
    let gm = npy(&dir, "g.npy", &[k], NpyData::F64(g.clone()));
    let dy = npy(&dir, "dy.npy", &[rows, k], NpyData::F64(good.clone()));
    let base = |dtype: &str| {
        case_json(
            "layer_norm_backward",
            &[rows, k],
            dtype,
            &[("x", x.clone()), ("dy", dy.clone()), ("gamma", gm.clone())],
        )
    };
    // wrong shape
    let mut v = base("f32");
    v["inputs"]["x"] = npy(&dir, "x-shape.npy", &[k, rows], NpyData::F64(good.clone()));
    cases.push(("wrong shape", v));
    let mut v = base("f32");
    v["inputs"]["gamma"] = npy(&dir, "g-len.npy", &[k + 1], NpyData::F64(vec![1.0; k + 1]));
    cases.push(("wrong length", v));
    // non-finite
    for (i, bad) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
        .into_iter()
        .enumerate()
    {
        let mut d = good.clone();
        d[5 + i] = bad;
        let mut v = base("f16");
        v["inputs"]["dy"] = npy(&dir, &format!("dy-nf{i}.npy"), &[rows, k], NpyData::F64(d));
        cases.push(("non-finite", v));
    }
    // overflow of the dtype, f16, bf16, f32
    for (dtype, big) in [("f16", 65520.0), ("bf16", 3.4e38), ("f32", 3.5e38)] {
        let mut d = good.clone();
        d[9] = -big;
        let mut v = base(dtype);
        v["inputs"]["x"] = npy(
            &dir,
            &format!("x-ovf-{dtype}.npy"),
            &[rows, k],
            NpyData::F64(d),
        );
        cases.push(("overflow", v));
    }
    // f16 data for an f32 tensor, and uint16 for one that is not bf16
    let mut v = base("f32");
    v["inputs"]["x"] = npy(
        &dir,
        "x-f16.npy",
        &[rows, k],
        NpyData::F16(good.iter().map(|&e| f16::from_f64(e)).collect()),
    );
    cases.push(("f16 data", v));
    // missing, unknown, malformed
    let mut v = base("f32");
    v["inputs"].as_object_mut().unwrap().remove("dy");
    cases.push(("missing", v));
    let mut v = base("f32");
    v["inputs"]["beta"] = gm.clone();
    cases.push(("unknown", v));
    let mut v = base("f32");
    v["inputs"]["x"] = json!({ "npy": 3 });
    cases.push(("npy not a string", v));
    let mut v = base("f32");
    v["inputs"]["x"] = json!({ "npy": "nowhere.npy" });
    cases.push(("no file", v));
    let mut v = base("f32");
    v["inputs"]["x"] = json!("x.npy");
    cases.push(("not an array", v));
    let mut v = base("f32");
    v["inputs"] = json!(5);
    cases.push(("inputs not an object", v));
    let mut v = base("f32");
    v["inputs"]["x"] = json!([1, 2]);
    cases.push(("short array", v));
    let mut v = base("f32");
    v.as_object_mut().unwrap().remove("inputs");
    cases.push(("no inputs", v));
    // gamma all of one row: fine; a validation error after the inputs (eps < 0)
    let mut v = base("f32");
    v["eps"] = json!("-1");
    cases.push(("eps", v));
    for (what, v) in &cases {
        assert!(!same_parse(v, &dir, &lim(), what), "{what} parsed");
    }
    // an export's listed inputs: uint16 for an f32 tensor, a wrong shape
    let mut v = base("f32");
    v["inputs"] = json!(["x", "dy", "gamma"]);
    let ld = dir.join("listed");
    std::fs::create_dir_all(&ld).unwrap();
    write_npy(
        &ld.join("x.npy"),
        &[rows, k],
        &NpyData::U16(vec![0x3f80; rows * k]),
    )
    .unwrap();
    write_npy(&ld.join("dy.npy"), &[rows * k], &NpyData::F64(good.clone())).unwrap();
    write_npy(&ld.join("gamma.npy"), &[k], &NpyData::F64(g.clone())).unwrap();
    assert!(!same_parse(&v, &ld, &lim(), "listed u16"));
    let mut vb = v.clone();
    vb["dtype"] = json!("bf16");
    assert!(!same_parse(&vb, &ld, &lim(), "listed flat shape"));
    write_npy(&ld.join("dy.npy"), &[rows, k], &NpyData::F64(good.clone())).unwrap();
    assert!(same_parse(&vb, &ld, &lim(), "listed bf16"));
}

#[test]
fn cell_limits_are_checked_before_any_input_is_read() {
    let dir = scratch("limits");
    let missing = json!({ "npy": "absent.npy" });
    let ins = [
        ("x", missing.clone()),
        ("gamma", missing.clone()),
        ("beta", missing),
    ];
    // more than 2^20 cells: refused by the exact parse, read by the float parse (whose
    // error is then the missing file's)
    let v = case_json("layer_norm", &[2048, 1024], "f32", &ins);
    let e = parse_family_case(&v, &dir, &lim()).unwrap_err().to_string();
    assert!(
        e.contains("more than the exact path takes (1048576, --max-json-elems)"),
        "{e}"
    );
    let f = parse_family_case_floats(&v, &dir, &lim(), FAMILY_FAST_MIN_LEN)
        .unwrap_err()
        .to_string();
    assert!(f.contains("absent.npy"), "{f}");
    // more than max_elems: the header's limit
    let small = InputLimits {
        max_elems: 1 << 20,
        ..lim()
    };
    let f = parse_family_case_floats(&v, &dir, &small, FAMILY_FAST_MIN_LEN)
        .unwrap_err()
        .to_string();
    assert!(f.contains("more than the limit of 1048576"), "{f}");
    // a case judged per element exactly (fewer cells than the fast path's minimum) keeps
    // max_json_elems, with the exact parse's message
    let tight = InputLimits {
        max_json_elems: 100,
        ..lim()
    };
    let v = case_json("layer_norm", &[8, 64], "f32", &ins);
    let e = parse_family_case(&v, &dir, &tight).unwrap_err().to_string();
    let f = parse_family_case_floats(&v, &dir, &tight, FAMILY_FAST_MIN_LEN)
        .unwrap_err()
        .to_string();
    assert_eq!(e, f);
    assert!(
        f.contains("more than the exact path takes (100, --max-json-elems)"),
        "{f}"
    );
}

/// Write a layer_norm(_backward) f64 case of `[rows, k]` with `x[0] = x0` to `dir`.
fn write_case(dir: &Path, op: &str, rows: usize, k: usize, x0: f64) -> PathBuf {
    let mut rng = bnconf::suite::Rng::new(11);
    let mut x: Vec<f64> = (0..rows * k).map(|_| rng.normal()).collect();
    x[0] = x0;
    let mut ins = vec![
        ("x", npy(dir, "x.npy", &[rows, k], NpyData::F64(x))),
        ("gamma", npy(dir, "g.npy", &[k], NpyData::F64(vec![1.5; k]))),
    ];
    if op.ends_with("backward") {
        let dy: Vec<f64> = (0..rows * k).map(|_| rng.normal()).collect();
        ins.push(("dy", npy(dir, "dy.npy", &[rows, k], NpyData::F64(dy))));
    } else {
        ins.push(("beta", npy(dir, "b.npy", &[k], NpyData::F64(vec![0.25; k]))));
    }
    let v = case_json(op, &[rows, k], "f64", &ins);
    let p = dir.join("case.json");
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    p
}

#[test]
fn the_fast_paths_range_is_the_judges() {
    let dir = scratch("range");
    let (rows, k) = (4usize, 4096usize);
    assert!(rows * k >= FAMILY_FAST_MIN_LEN);
    let lo = 3.8e-121f64;
    let hi = 2.5e120f64;
    for (x0, fast) in [
        (lo, false),
        (f64::from_bits(lo.to_bits() + 1), true),
        (-lo, false),
        (hi, false),
        (f64::from_bits(hi.to_bits() - 1), true),
        (0.0, true),
        (1.0, true),
    ] {
        let p = write_case(&dir, "layer_norm", rows, k, x0);
        let sc = user_suite_case(&p, &lim()).unwrap();
        assert_eq!(family_fast_takes_inputs(&sc.case), fast, "{x0:e}");
        let prepared = prepare_family(&sc).unwrap();
        assert_eq!(prepared.fast.is_some(), fast, "{x0:e}");
        // past max_json_elems, a case the fast path declines is refused, the others read
        let tight = InputLimits {
            max_json_elems: 1000,
            ..lim()
        };
        match user_suite_case(&p, &tight) {
            Ok(_) => assert!(fast, "{x0:e}"),
            Err(e) => {
                assert!(!fast, "{x0:e}: {e}");
                let e = e.to_string();
                assert!(e.contains("the fast path declines its inputs"), "{e}");
            }
        }
    }
}

#[test]
fn a_large_layer_norm_backward_case_is_judged_through_check_case() {
    let dir = scratch("large");
    let (rows, k) = (300usize, 4096usize);
    assert!(rows * k > 1 << 20);
    let mut rng = bnconf::suite::Rng::new(2024);
    let f32s = |v: Vec<f64>| NpyData::F32(v.into_iter().map(|e| e as f32).collect());
    let x: Vec<f64> = (0..rows * k).map(|_| 0.5 + rng.normal()).collect();
    let dy: Vec<f64> = (0..rows * k).map(|_| rng.normal()).collect();
    let gamma: Vec<f64> = (0..k).map(|_| 1.0 + 0.1 * rng.normal()).collect();
    let ins = [
        ("x", npy(&dir, "x.npy", &[rows, k], f32s(x))),
        ("dy", npy(&dir, "dy.npy", &[rows, k], f32s(dy))),
        ("gamma", npy(&dir, "gamma.npy", &[k], f32s(gamma))),
    ];
    let mut v = case_json("layer_norm_backward", &[rows, k], "f32", &ins);
    v["affine"] = json!("weight_bias");
    let case = dir.join("backward.json");
    std::fs::write(&case, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    // the exact parse refuses it; check --case reads it
    let e = parse_family_case(&v, &dir, &lim()).unwrap_err().to_string();
    assert!(e.contains("--max-json-elems"), "{e}");
    let sc = user_suite_case(&case, &lim()).unwrap();
    // a correct float32 kernel (impl's two-pass layer_norm)
    let kernel = bnconf_impl::family::all_family_kernels()
        .into_iter()
        .find(|kn| kn.name() == "ln-twopass")
        .expect("ln-twopass");
    let outs = kernel.run(&sc.case).unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let shape_of = |n: &str| if n == "dx" { vec![rows, k] } else { vec![k] };
    for (name, vals) in &outs {
        write_npy(
            &out.join(format!("{name}.npy")),
            &shape_of(name),
            &f32s(vals.clone()),
        )
        .unwrap();
    }
    let judged = judge_user_case(&case, &out, &lim(), true).unwrap();
    let r = &judged.results[0];
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert!(judged.failing.is_empty());
    // one dx element 1% off fails, on that element only
    let mut dx = outs["dx"].clone();
    let i = 123_457;
    dx[i] = if dx[i] == 0.0 { 0.5 } else { dx[i] * 1.01 };
    write_npy(&out.join("dx.npy"), &[rows, k], &f32s(dx)).unwrap();
    let judged = judge_user_case(&case, &out, &lim(), true).unwrap();
    let r = &judged.results[0];
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    let o = r.outputs.iter().find(|o| o.name == "dx").unwrap();
    assert_eq!((o.n_over, o.index), (1, i));
    assert_eq!(judged.failing.len(), 1);
}
