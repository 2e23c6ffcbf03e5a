//! The normalization family in the kernel directory protocol, end to end through the binary:
//! `export --family F` → `kernel NAME DIR` → `check DIR` (good kernels conform, known-bad
//! ones are rejected, in f32 and a mixed precision), optional outputs left out (conforming,
//! reported as not given), a missing required output (not conforming), bad input (exit 2
//! naming the field, no partial output), `check --exec`, batch_norm's export unchanged by
//! `--family batch_norm`, and `bnconf golden` on family case files (exact strings that parse
//! back to the suite's goldens).

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{bnconf, text, BNCONF};

use bnconf::formats::family_case::family_case_json;
use bnconf::suite::family::{family_goldens, family_suite, Golden};
use bnconf::suite::Precision;
use bnconf_impl::family::{family_kernel_by_name, Family};
use bnconf_spec::exact::roots::parse_sum_of_roots;
use bnconf_spec::exact::round::{round, FloatFormat};
use serde_json::{json, Value};

fn tmpdir(name: &str) -> PathBuf {
    common::scratch("family_protocol", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(args: &[&str]) -> Output {
    bnconf(args)
}

fn export(dir: &Path, family: &str, dtype: &str) {
    let o = run(&[
        "export",
        "--family",
        family,
        "--dtype",
        dtype,
        "--out",
        s(dir),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

fn kernel(name: &str, dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("out"));
    for e in std::fs::read_dir(dir).unwrap() {
        let _ = std::fs::remove_dir_all(e.unwrap().path().join("out"));
    }
    let o = run(&["kernel", name, s(dir)]);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
}

fn check(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["check", s(dir)];
    args.extend_from_slice(extra);
    run(&args)
}

/// Good kernels conform (exit 0) and known-bad ones whose defect shows in the precision are
/// rejected (exit 1), for every family in f32 and in a mixed precision, and layer_norm in f64
/// (f64 data computed in f32).
#[test]
fn round_trip_good_conform_known_bad_rejected() {
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "layer_norm",
            "f32",
            &["ln-twopass", "ln-half-f32acc"],
            &["bad-ln-onepass", "bad-ln-backward-one-axis"],
        ),
        (
            "layer_norm",
            "bf16+f32",
            &["ln-welford"],
            &["bad-ln-half-xhat-dgamma"],
        ),
        (
            "layer_norm",
            "f64",
            &["ln-twopass"],
            &["bad-ln-f32-compute"],
        ),
        (
            "rms_norm",
            "f32",
            &["rms-twopass"],
            &["bad-rms-offset-ignored"],
        ),
        (
            "rms_norm",
            "f16+f32",
            &["rms-half-f32acc"],
            &["bad-rms-ms-doubled"],
        ),
        (
            "group_norm",
            "f32",
            &["gn-twopass"],
            &["bad-gn-channels-last"],
        ),
        (
            "group_norm",
            "bf16+f32",
            &["gn-half-f32acc"],
            &["bad-gn-pow2-groups"],
        ),
    ];
    for (family, dtype, good, bad) in cases {
        let dir = tmpdir(&format!("rt-{family}-{dtype}"));
        export(&dir, family, dtype);
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(m["family"], json!(family));
        assert_eq!(m["dtype"], json!(dtype));
        for k in *good {
            kernel(k, &dir);
            let o = check(&dir, &[]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{family} {dtype} {k}: {}",
                text(&o)
            );
            assert!(text(&o).contains(&format!("bnconf check: family {family}")));
        }
        for k in *bad {
            let kk = family_kernel_by_name(k).unwrap();
            assert!(kk.defect_shows_in(dtype), "{k} in {dtype}");
            kernel(k, &dir);
            let o = check(&dir, &[]);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(1), "{family} {dtype} {k}: {t}");
            // the diagnosis names the kernel (a known-bad kernel reproduces itself)
            assert!(t.contains(&format!("behaves like {k} on")), "{k}: {t}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A mixed-precision export stores each tensor in its own dtype: activations in the half
/// type, parameters in f32 (and the kernel's statistics are read in f32).
#[test]
fn mixed_precision_inputs_have_their_dtypes() {
    let dir = tmpdir("mixed");
    export(&dir, "layer_norm", "f16+f32");
    let cd = dir.join("layer_norm.last.f16+f32.gaussian");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(cd.join("case.json")).unwrap()).unwrap();
    assert_eq!(v["dtype"], json!("f16"));
    assert_eq!(v["param_dtype"], json!("f32"));
    let descr = |n: &str| {
        let b = std::fs::read(cd.join(n)).unwrap();
        String::from_utf8_lossy(&b[..100]).into_owned()
    };
    assert!(descr("x.npy").contains("<f2"), "{}", descr("x.npy"));
    assert!(descr("gamma.npy").contains("<f4"));
    kernel("ln-twopass", &dir);
    let out = cd.join("out");
    assert!(
        String::from_utf8_lossy(&std::fs::read(out.join("y.npy")).unwrap()[..100]).contains("<f2")
    );
    assert!(
        String::from_utf8_lossy(&std::fs::read(out.join("rstd.npy")).unwrap()[..100])
            .contains("<f4")
    );
    let o = check(&dir, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Optional outputs left out: conforming, reported as not given (human report and JSON);
/// a required output left out: not conforming (malformed, naming the file); an output of the
/// wrong shape: not conforming.
#[test]
fn optional_outputs_may_be_left_out_required_ones_not() {
    let dir = tmpdir("optional");
    export(&dir, "layer_norm", "f32");
    kernel("ln-twopass", &dir);
    let id = "layer_norm.last.f32.gaussian";
    std::fs::remove_file(dir.join(id).join("out/mean.npy")).unwrap();
    std::fs::remove_file(dir.join(id).join("out/rstd.npy")).unwrap();
    let report = dir.join("report.json");
    let o = check(&dir, &["--report", s(&report)]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("optional outputs not given (1 cases"), "{t}");
    assert!(t.contains(&format!("{id}: mean, rstd")), "{t}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["family"], json!("layer_norm"));
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == json!(id))
        .unwrap();
    assert_eq!(case["verdict"], json!("pass"));
    assert_eq!(case["not_given"], json!(["mean", "rstd"]));
    let names: Vec<&Value> = case["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["name"])
        .collect();
    assert_eq!(names, [&json!("y")]);

    // a required output missing: not conforming, the file named
    std::fs::remove_file(dir.join(id).join("out/y.npy")).unwrap();
    let o = check(&dir, &["--report", s(&report)]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("{id}/out/y.npy: missing")), "{t}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == json!(id))
        .unwrap();
    assert_eq!(case["verdict"], json!("malformed"));

    // an output of the wrong shape: not conforming, the shape named
    kernel("ln-twopass", &dir);
    let bid = "layer_norm_backward.last.f32.gaussian";
    std::fs::copy(
        dir.join(bid).join("out/dx.npy"),
        dir.join(bid).join("out/dgamma.npy"),
    )
    .unwrap();
    let o = check(&dir, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "{bid} MALFORMED — {bid}/out/dgamma.npy: shape [4, 16]"
        )),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn assert_exit2_naming(o: &Output, what: &str) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains(what), "expected {what:?} in: {t}");
    assert!(!t.contains("panicked"), "{t}");
}

/// Bad input is exit 2 naming the field or flag, never a panic, never a partial output.
#[test]
fn bad_input_is_exit_2_naming_the_field() {
    let dir = tmpdir("bad");
    assert_exit2_naming(
        &run(&[
            "export",
            "--family",
            "batchnorm",
            "--out",
            s(&dir.join("x")),
        ]),
        "--family",
    );
    assert!(!dir.join("x").exists());
    assert_exit2_naming(
        &run(&["check", "--family", "instance_norm", "--exec", "true"]),
        "--family",
    );
    assert_exit2_naming(
        &run(&[
            "export",
            "--family",
            "layer_norm",
            "--suite",
            "replicated",
            "--out",
            s(&dir.join("y")),
        ]),
        "--suite",
    );
    assert_exit2_naming(
        &run(&[
            "export",
            "--family",
            "rms_norm",
            "--ops",
            "layer_norm",
            "--out",
            s(&dir.join("y")),
        ]),
        "--ops",
    );
    // a malformed case.json field: the kernel names it
    let e = dir.join("e");
    export(&e, "group_norm", "f32");
    let id = "group_norm.nchw.f32.gaussian-c3";
    let cpath = e.join(id).join("case.json");
    let good = std::fs::read_to_string(&cpath).unwrap();
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["groups"] = json!(5);
    std::fs::write(&cpath, serde_json::to_string(&v).unwrap()).unwrap();
    assert_exit2_naming(&run(&["kernel", "gn-twopass", s(&e)]), "groups");
    v["groups"] = json!(2);
    v["affine"] = json!("bias_only");
    std::fs::write(&cpath, serde_json::to_string(&v).unwrap()).unwrap();
    assert_exit2_naming(&run(&["kernel", "gn-twopass", s(&e)]), "affine");
    std::fs::write(&cpath, &good).unwrap();
    // an input npy of the wrong shape: the kernel names the file, check refuses the edit
    let x = e.join(id).join("x.npy");
    let orig = std::fs::read(&x).unwrap();
    std::fs::copy(e.join(id).join("gamma.npy"), &x).unwrap();
    assert_exit2_naming(&run(&["kernel", "gn-twopass", s(&e)]), "x.npy");
    assert_exit2_naming(&check(&e, &[]), "x.npy");
    std::fs::write(&x, orig).unwrap();
    // a family export is not batch_norm's, nor another family's
    assert_exit2_naming(&check(&e, &["--family", "layer_norm"]), "--family");
    let bn = dir.join("bn");
    let o = run(&[
        "export",
        "--ops",
        "forward",
        "--layouts",
        "rows",
        "--out",
        s(&bn),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_exit2_naming(&check(&bn, &["--family", "rms_norm"]), "--family");

    // golden: a malformed field, a wrong-shape npy input; no partial output file
    let case = dir.join("case.json");
    let mut c = family_case_json(
        "c",
        &family_suite(Family::RmsNorm, &[Precision::uniform(FloatFormat::F32)], 1).cases[0].case,
        "core",
        "gaussian",
    );
    c["inputs"] = json!({"x": {"npy": "x.npy"}, "gamma": {"npy": "g.npy"}});
    c["normalized_ndim"] = json!(4);
    std::fs::write(&case, serde_json::to_string(&c).unwrap()).unwrap();
    let out = dir.join("golden.json");
    assert_exit2_naming(
        &run(&["golden", s(&case), "-o", s(&out)]),
        "normalized_ndim",
    );
    c["normalized_ndim"] = json!(1);
    std::fs::write(&case, serde_json::to_string(&c).unwrap()).unwrap();
    // x.npy holding gamma's shape
    std::fs::copy(e.join(id).join("gamma.npy"), dir.join("x.npy")).unwrap();
    std::fs::copy(e.join(id).join("gamma.npy"), dir.join("g.npy")).unwrap();
    assert_exit2_naming(&run(&["golden", s(&case), "-o", s(&out)]), "inputs.x.npy");
    assert!(!out.exists(), "no partial output");
    assert_exit2_naming(
        &run(&["golden", s(&case), "--out-dir", s(&dir.join("gd"))]),
        "inputs.x.npy",
    );
    assert!(!dir.join("gd").exists(), "no partial output directory");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check --family F --exec CMD`: export, run, judge; a built-in family kernel plays the
/// outside kernel.
#[test]
fn check_exec_runs_a_family_kernel() {
    let o = run(&[
        "check",
        "--family",
        "rms_norm",
        "--dtype",
        "bf16+f32",
        "--exec",
        &format!("{BNCONF} kernel rms-twopass"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&[
        "check",
        "--family",
        "all",
        "--exec",
        &format!("{BNCONF} kernel bad-gn-var-doubled"),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    // the layer_norm and rms_norm cases are unsupported by a group_norm kernel
    assert!(t.contains("layer_norm") && t.contains("unsupported"), "{t}");
}

/// `--family batch_norm` is batch_norm's export, byte for byte.
#[test]
fn batch_norm_export_is_unchanged_by_family_batch_norm() {
    let a = tmpdir("bn-a");
    let b = tmpdir("bn-b");
    let args = |d: &Path| {
        vec![
            "export".to_string(),
            "--ops".into(),
            "forward,backward".into(),
            "--out".into(),
            s(d).to_string(),
        ]
    };
    let o = bnconf(&args(&a).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0));
    let mut with = args(&b);
    with.extend(["--family".to_string(), "batch_norm".to_string()]);
    let o = bnconf(&with.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0));
    let files = |d: &Path| {
        let mut v = vec![];
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                for f in std::fs::read_dir(&p).unwrap() {
                    v.push(f.unwrap().path());
                }
            } else {
                v.push(p);
            }
        }
        v.sort();
        v
    };
    let (fa, fb) = (files(&a), files(&b));
    assert_eq!(fa.len(), fb.len());
    assert!(fa.len() > 10);
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.strip_prefix(&a).unwrap(), y.strip_prefix(&b).unwrap());
        assert_eq!(
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            "{x:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// The shortest decimal of an f64 (exactly read back, it rounds to the same value in the
/// case dtype: the values are representable there).
fn lit(v: f64) -> Value {
    json!(format!("{v:?}"))
}

/// `bnconf golden` on a family case file: every output, exact strings that parse back to
/// the suite's goldens (dgamma a sum of roots, radicands increasing), correctly rounded
/// hex strings; the same on an export's case.json (inputs beside it).
#[test]
fn golden_on_family_case_files_is_the_suites_golden() {
    let dir = tmpdir("golden");
    let mut checked_roots = 0;
    for (family, prec) in [
        (Family::LayerNorm, Precision::uniform(FloatFormat::F32)),
        (
            Family::RmsNorm,
            Precision {
                act: FloatFormat::BF16,
                param: FloatFormat::F32,
            },
        ),
        (Family::GroupNorm, Precision::uniform(FloatFormat::F64)),
    ] {
        let suite = family_suite(family, &[prec], 11);
        let picks: Vec<_> = suite
            .cases
            .iter()
            .filter(|c| c.case.shape.iter().product::<usize>() <= 64)
            .filter(|c| {
                [
                    "gaussian",
                    "gaussian-c3",
                    "affine-none",
                    "convention-offset",
                    "nd2",
                    "nhwc-c3",
                ]
                .contains(&c.class.as_str())
            })
            .collect();
        assert!(picks.len() >= 3, "{family}");
        for c in picks {
            let mut v = family_case_json(&c.id, &c.case, c.level.name(), &c.class);
            let inputs: serde_json::Map<String, Value> = c
                .case
                .inputs
                .iter()
                .map(|(n, vals)| {
                    (
                        n.clone(),
                        Value::Array(vals.iter().map(|&x| lit(x)).collect()),
                    )
                })
                .collect();
            v["inputs"] = Value::Object(inputs);
            let path = dir.join(format!("{}.json", c.id));
            std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
            let o = run(&["golden", s(&path)]);
            assert_eq!(o.status.code(), Some(0), "{}: {}", c.id, text(&o));
            let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
            let want = family_goldens(&c.case).unwrap();
            let outs = doc["outputs"].as_object().unwrap();
            let names: Vec<&str> = outs.keys().map(String::as_str).collect();
            let mut want_names: Vec<&str> = c.case.op.outputs(c.case.affine);
            want_names.sort();
            let mut got_names = names.clone();
            got_names.sort();
            assert_eq!(got_names, want_names, "{}", c.id);
            for (name, g) in &want {
                let exact: Vec<&str> = outs[*name]["exact"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap())
                    .collect();
                let f32s = outs[*name]["f32"].as_array().unwrap();
                assert_eq!(exact.len(), g.len());
                match g {
                    Golden::Q(vals) => {
                        for (i, (e, w)) in exact.iter().zip(vals).enumerate() {
                            assert_eq!(*e, w.to_string(), "{} {name}[{i}]", c.id);
                            assert_eq!(
                                f32s[i],
                                json!(round(w, FloatFormat::F32).to_hex()),
                                "{} {name}[{i}]",
                                c.id
                            );
                        }
                    }
                    Golden::Roots(vals) => {
                        for (i, (e, w)) in exact.iter().zip(vals).enumerate() {
                            let back = parse_sum_of_roots(e).unwrap();
                            assert_eq!(&back, w, "{} {name}[{i}]", c.id);
                            assert_eq!(*e, w.to_string());
                            let ds: Vec<_> = back.terms().iter().map(|t| t.d.clone()).collect();
                            assert!(ds.windows(2).all(|p| p[0] < p[1]), "{e}");
                            assert_eq!(
                                f32s[i],
                                json!(w.round(FloatFormat::F32).to_hex()),
                                "{} {name}[{i}]",
                                c.id
                            );
                            checked_roots += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked_roots > 10, "{checked_roots}");
    // golden on an export's case.json: the same document's outputs
    let e = dir.join("export");
    export(&e, "layer_norm", "f32");
    let id = "layer_norm_backward.last.f32.gaussian";
    let o = run(&["golden", s(&e.join(id).join("case.json"))]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = family_suite(
        Family::LayerNorm,
        &[Precision::uniform(FloatFormat::F32)],
        bnconf::suite::DEFAULT_SEED,
    )
    .cases
    .into_iter()
    .find(|c| c.id == id)
    .unwrap();
    let want = family_goldens(&c.case).unwrap();
    match &want["dgamma"] {
        Golden::Roots(v) => {
            let got: Vec<String> = doc["outputs"]["dgamma"]["exact"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap().to_string())
                .collect();
            assert_eq!(got, v.iter().map(|e| e.to_string()).collect::<Vec<_>>());
        }
        Golden::Q(_) => panic!("dgamma is a sum of roots"),
    }
    // an export in bf16+f32 (bf16 inputs as `<u2` bit patterns beside the case.json)
    let eb = dir.join("export-bf16");
    export(&eb, "rms_norm", "bf16+f32");
    let bid = "rms_norm_backward.last.bf16+f32.gaussian";
    let o = run(&[
        "golden",
        s(&eb.join(bid).join("case.json")),
        "--formats",
        "bf16,f32",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let prec = Precision {
        act: FloatFormat::BF16,
        param: FloatFormat::F32,
    };
    let c = family_suite(Family::RmsNorm, &[prec], bnconf::suite::DEFAULT_SEED)
        .cases
        .into_iter()
        .find(|c| c.id == bid)
        .unwrap();
    let want = family_goldens(&c.case).unwrap();
    match &want["dx"] {
        Golden::Q(v) => {
            let got = doc["outputs"]["dx"]["bf16"].as_array().unwrap();
            for (g, w) in got.iter().zip(v) {
                assert_eq!(g, &json!(round(w, FloatFormat::BF16).to_hex()));
            }
        }
        Golden::Roots(_) => panic!("dx is in its rows' fields"),
    }
    // --out-dir: every output's f64 and f32 npy and golden.json
    let gd = dir.join("gd");
    let o = run(&[
        "golden",
        s(&e.join(id).join("case.json")),
        "--out-dir",
        s(&gd),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for n in ["dx", "dgamma", "dbeta"] {
        assert!(gd.join(format!("{n}.f64.npy")).exists(), "{n}");
        assert!(gd.join(format!("{n}.f32.npy")).exists(), "{n}");
    }
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(gd.join("golden.json")).unwrap()).unwrap();
    assert_eq!(g["outputs"]["dgamma"]["shape"], json!([16]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A batch_norm kernel leaves a family case unsupported and a family kernel a batch_norm case
/// (or one of another family): nothing supported is exit 1, never a crash.
#[test]
fn kernels_leave_the_other_familys_cases_unsupported() {
    let dir = tmpdir("cross");
    export(&dir, "rms_norm", "f32");
    kernel("twopass-native", &dir);
    let o = check(&dir, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("0 conforming, 0 not conforming") && t.contains("unsupported"),
        "{t}"
    );
    kernel("ln-twopass", &dir);
    assert_eq!(check(&dir, &[]).status.code(), Some(1));
    let bn = tmpdir("cross-bn");
    let o = run(&[
        "export",
        "--ops",
        "forward",
        "--layouts",
        "rows",
        "--out",
        s(&bn),
    ]);
    assert_eq!(o.status.code(), Some(0));
    kernel("rms-twopass", &bn);
    let o = check(&bn, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bn);
}

/// A family export is reproducible byte for byte (the same seed, the same files).
#[test]
fn family_export_is_deterministic() {
    let a = tmpdir("det-a");
    let b = tmpdir("det-b");
    export(&a, "all", "f16+f32");
    export(&b, "all", "f16+f32");
    let mut n = 0;
    for e in std::fs::read_dir(&a).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(&a).unwrap().to_path_buf();
        if p.is_dir() {
            for f in std::fs::read_dir(&p).unwrap() {
                let f = f.unwrap().path();
                let r = rel.join(f.file_name().unwrap());
                assert_eq!(
                    std::fs::read(&f).unwrap(),
                    std::fs::read(b.join(&r)).unwrap(),
                    "{r:?}"
                );
                n += 1;
            }
        } else {
            assert_eq!(
                std::fs::read(&p).unwrap(),
                std::fs::read(b.join(&rel)).unwrap()
            );
        }
    }
    assert!(n > 200, "{n} files");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["family"], json!("all"));
    let ids: Vec<&str> = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for op in ["layer_norm.", "rms_norm_backward.", "group_norm_backward."] {
        assert!(ids.iter().any(|i| i.starts_with(op)), "{op}");
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}
