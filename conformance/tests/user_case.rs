//! `bnconf check --case CASE.json --outputs DIR` (docs/FORMAT.md, "Added in bnconf 0.3:
//! judging a user's case and ONNX test data"): a correct kernel's outputs conform (exit 0), a
//! perturbed element does not (exit 1, naming it), npy inputs are read relative to the case
//! file, the known-bad kernels diagnose a failure, and every bad input is exit 2 naming the
//! field with no report written. Run in release (`cargo test --release -p bnconf --test user_case`).

mod common;

use bnconf::formats::case::InputLimits;
use bnconf::formats::npy::{write_npy, NpyData};
use bnconf::judge::check;
use bnconf::protocol::{npy_of, user_case};
use bnconf::suite::SuiteCase;
use bnconf_spec::exact::round::round;
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Op};
use common::{bnconf, scratch, stdout, text};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

fn write(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// A forward case, NCHW [2, 3, 2, 2], f32, inline inputs.
fn forward_case() -> Value {
    let x: Vec<f64> = (0..24).map(|i| 1.0 + i as f64 * 0.75).collect();
    json!({"format": "bnconf-case/1", "id": "mine", "op": "forward", "layout": "nchw",
           "shape": [2, 3, 2, 2], "dtype": "f32", "eps": "1e-5",
           "inputs": {"x": x, "gamma": [1, 0.5, 2], "beta": [0, 1, -1]}})
}

fn shape(c: &SuiteCase, name: &str) -> Vec<usize> {
    let g = Geometry::new(c.layout, &c.shape, usize::MAX).unwrap();
    match Op::extent(name) {
        Extent::Cells => c.shape.clone(),
        Extent::Channel => vec![g.c],
        Extent::Shards => vec![g.m],
    }
}

/// The correctly rounded outputs of a case file, each in its dtype.
fn golden(case: &Path) -> (SuiteCase, BTreeMap<String, Vec<f64>>) {
    let sc = user_case::read_user_case(case, &InputLimits::default()).unwrap();
    let p = check::prepare(std::slice::from_ref(&sc)).unwrap().remove(0);
    let out = sc
        .op
        .outputs()
        .iter()
        .map(|&n| {
            let f = sc.dtype_of(n);
            let v = (0..p.output_len(n))
                .map(|i| round(&p.exact_at(n, i), f).to_f64())
                .collect();
            (n.to_string(), v)
        })
        .collect();
    (sc, out)
}

fn write_outputs(dir: &Path, sc: &SuiteCase, outs: &BTreeMap<String, Vec<f64>>) {
    std::fs::create_dir_all(dir).unwrap();
    for (n, v) in outs {
        write_npy(
            &dir.join(format!("{n}.npy")),
            &shape(sc, n),
            &npy_of(sc.dtype_of(n), v),
        )
        .unwrap();
    }
}

fn check_case(case: &Path, outs: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![
        "check",
        "--case",
        case.to_str().unwrap(),
        "--outputs",
        outs.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = bnconf(&args);
    (o.status.code(), text(&o))
}

#[test]
fn correct_outputs_conform_and_a_perturbed_element_does_not() {
    let d = scratch("user-case", "forward");
    let case = d.join("case.json");
    write(&case, &forward_case());
    let (sc, mut outs) = golden(&case);
    let od = d.join("out");
    write_outputs(&od, &sc, &outs);
    let rep = d.join("r.json");
    let html = d.join("r.html");
    let junit = d.join("r.xml");
    let (code, t) = check_case(
        &case,
        &od,
        &[
            "--report",
            rep.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{t}");
    assert!(t.contains("1 conforming, 0 not conforming"), "{t}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["cases"][0]["id"], "mine");
    assert_eq!(r["cases"][0]["verdict"], "pass");
    assert!(r["cases"][0]["worst_ratio"].as_f64().unwrap() <= 1.0);
    assert!(std::fs::read_to_string(&html).unwrap().contains("mine"));
    assert!(std::fs::read_to_string(&junit).unwrap().contains("mine"));

    // One element of y moved by 1/4: not conforming, the report names y[5].
    outs.get_mut("y").unwrap()[5] += 0.25;
    write_outputs(&od, &sc, &outs);
    let (code, t) = check_case(&case, &od, &["--report", rep.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("y[5]"), "{t}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["cases"][0]["verdict"], "fail");
    assert_eq!(r["cases"][0]["outputs"][0]["name"], "y");
    assert_eq!(r["cases"][0]["outputs"][0]["index"], 5);
    assert_eq!(r["cases"][0]["outputs"][0]["elements_over"], 1);

    // A missing output: not conforming, naming the file.
    std::fs::remove_file(od.join("var.npy")).unwrap();
    let (code, t) = check_case(&case, &od, &[]);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("var.npy: missing"), "{t}");

    // A FIFO where an output should be: malformed (exit 1) at once, never a hang.
    std::fs::remove_file(od.join("y.npy")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(od.join("y.npy"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let o = common::bnconf_watched(
        &[
            "check",
            "--case",
            case.to_str().unwrap(),
            "--outputs",
            od.to_str().unwrap(),
        ],
        std::time::Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("y.npy"), "{}", text(&o));
    std::fs::remove_file(od.join("y.npy")).unwrap();
    write_outputs(
        &od,
        &sc,
        &BTreeMap::from([("y".to_string(), outs["y"].clone())]),
    );

    // DIR/error: the kernel failed, its message is the reason (read before the outputs).
    std::fs::write(od.join("error"), "RuntimeError: out of memory\n").unwrap();
    let (code, t) = check_case(&case, &od, &[]);
    assert_eq!(code, Some(1), "{t}");
    assert!(
        t.contains("kernel error: RuntimeError: out of memory"),
        "{t}"
    );
    std::fs::remove_file(od.join("error")).unwrap();

    // An output of the wrong dtype or shape: a malformed output, exit 1.
    write_npy(&od.join("var.npy"), &[3], &NpyData::F64(vec![1.0; 3])).unwrap();
    let (code, t) = check_case(&case, &od, &[]);
    assert_eq!(code, Some(1), "{t}");
    assert!(
        t.contains("var.npy: dtype float64, expected the case dtype f32"),
        "{t}"
    );
    write_npy(&od.join("var.npy"), &[2], &NpyData::F32(vec![1.0; 2])).unwrap();
    let (code, t) = check_case(&case, &od, &[]);
    assert_eq!(code, Some(1), "{t}");
    assert!(t.contains("shape [2], expected [3]"), "{t}");
}

/// npy inputs, relative to the case file's directory (not the working directory), in a
/// mixed precision (f16 activations, f32 parameters) and in bf16 (outputs as `<u2` bits).
#[test]
fn npy_inputs_and_half_precisions() {
    let d = scratch("user-case", "npy");
    std::fs::create_dir_all(d.join("data")).unwrap();
    let x: Vec<f64> = (0..24)
        .map(|i| ((i * 7) % 11) as f64 * 0.125 - 0.5)
        .collect();
    write_npy(
        &d.join("data/x.npy"),
        &[2, 3, 2, 2],
        &NpyData::F32(x.iter().map(|&v| v as f32).collect()),
    )
    .unwrap();
    // gamma in f64, rounded to the param dtype when read.
    write_npy(
        &d.join("data/g.npy"),
        &[3],
        &NpyData::F64(vec![1.0, 0.1, 3.0]),
    )
    .unwrap();
    for (dtype, param) in [("f16", "f32"), ("bf16", "bf16"), ("f64", "f64")] {
        let case = d.join(format!("case-{dtype}.json"));
        write(
            &case,
            &json!({"format": "bnconf-case/1", "id": format!("npy-{dtype}"), "op": "forward",
                    "layout": "nchw", "shape": [2, 3, 2, 2], "dtype": dtype, "param_dtype": param,
                    "eps": 0.001,
                    "inputs": {"x": {"npy": "data/x.npy"}, "gamma": {"npy": "data/g.npy"},
                               "beta": [0.5, 0, -2]}}),
        );
        let (sc, outs) = golden(&case);
        assert_eq!(sc.inputs["gamma"][1], {
            let p = bnconf_spec::exact::round::FloatFormat::from_name(param).unwrap();
            bnconf::suite::to_dtype(0.1, p)
        });
        let od = d.join(format!("out-{dtype}"));
        write_outputs(&od, &sc, &outs);
        // From another working directory: the npy paths are the case file's.
        let o = common::command()
            .current_dir(std::env::temp_dir())
            .args(["check", "--case"])
            .arg(&case)
            .arg("--outputs")
            .arg(&od)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{dtype}: {}", text(&o));
        assert!(stdout(&o).contains("forward        nchw"), "{}", text(&o));
    }
}

/// A known-bad kernel's outputs on the user's case are diagnosed as that kernel, as a suite
/// case's are.
#[test]
fn a_known_bad_kernel_is_diagnosed() {
    let d = scratch("user-case", "diag");
    let case = d.join("case.json");
    let mut c = forward_case();
    c["shape"] = json!([4, 3, 2, 2]);
    let x: Vec<f64> = (0..48).map(|i| 1000.0 + ((i * 5) % 7) as f64).collect();
    c["inputs"]["x"] = json!(x);
    write(&case, &c);
    let sc = user_case::read_user_case(&case, &InputLimits::default()).unwrap();
    let k = bnconf_impl::kernel_by_name("bad-unbiased-var").unwrap();
    let outs: BTreeMap<String, Vec<f64>> = k.run(&sc.to_kernel_case()).unwrap();
    let od = d.join("out");
    write_outputs(&od, &sc, &outs);
    let rep = d.join("r.json");
    let (code, t) = check_case(&case, &od, &["--report", rep.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{t}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["diagnosis"][0]["kernel"], "bad-unbiased-var", "{t}");
    assert!(
        t.contains("diagnosis: behaves like bad-unbiased-var"),
        "{t}"
    );
    // --no-diagnosis skips it.
    let (code, t) = check_case(&case, &od, &["--no-diagnosis"]);
    assert_eq!(code, Some(1), "{t}");
    assert!(!t.contains("behaves like"), "{t}");
}

/// A change to a case file.
type Edit = Box<dyn Fn(&mut Value)>;

/// Every bad input is exit 2 with an error naming the field, and no report file is written.
#[test]
fn bad_inputs_are_exit_2_naming_the_field() {
    let d = scratch("user-case", "bad");
    let good = forward_case();
    let od = d.join("out");
    std::fs::create_dir_all(&od).unwrap();
    write_npy(
        &d.join("nan.npy"),
        &[3],
        &NpyData::F64(vec![1.0, f64::NAN, 1.0]),
    )
    .unwrap();
    write_npy(&d.join("short.npy"), &[2], &NpyData::F64(vec![1.0, 1.0])).unwrap();
    let edits: Vec<(&str, Edit)> = vec![
        ("dtype", Box::new(|c| c["dtype"] = json!("exact"))),
        ("dtype", Box::new(|c| c["dtype"] = json!("f8"))),
        ("op", Box::new(|c| c["op"] = json!("layer_norm_typo"))),
        ("shape", Box::new(|c| c["shape"] = json!([2, 3, 2]))),
        ("eps", Box::new(|c| c["eps"] = json!("1/3"))),
        ("eps", Box::new(|c| c["eps"] = json!(-1))),
        (
            "inputs.gamma",
            Box::new(|c| {
                c["inputs"].as_object_mut().unwrap().remove("gamma");
            }),
        ),
        (
            "inputs.mean",
            Box::new(|c| c["inputs"]["mean"] = json!([0, 0, 0])),
        ),
        (
            "inputs.x",
            Box::new(|c| c["inputs"]["x"] = json!([1, 2, 3])),
        ),
        (
            "inputs.beta[1]",
            Box::new(|c| c["inputs"]["beta"] = json!([0, "zero", 0])),
        ),
        (
            "inputs.gamma.npy",
            Box::new(|c| c["inputs"]["gamma"] = json!({"npy": "absent.npy"})),
        ),
        (
            "inputs.gamma.npy",
            Box::new(|c| c["inputs"]["gamma"] = json!({"npy": "short.npy"})),
        ),
        (
            "inputs.gamma[1]",
            Box::new(|c| c["inputs"]["gamma"] = json!({"npy": "nan.npy"})),
        ),
        (
            "inputs.gamma[0]",
            Box::new(|c| c["inputs"]["gamma"] = json!([1e39, 1, 1])),
        ),
        // A constant channel with eps 0: ill-posed, nothing can be judged.
        (
            "inputs",
            Box::new(|c| {
                c["eps"] = json!(0);
                c["inputs"]["x"] = json!(vec![2.0; 24]);
            }),
        ),
    ];
    for (i, (field, edit)) in edits.iter().enumerate() {
        let mut c = good.clone();
        edit(&mut c);
        let case = d.join(format!("bad{i}.json"));
        write(&case, &c);
        let rep = d.join(format!("r{i}.json"));
        let (code, t) = check_case(&case, &od, &["--report", rep.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{field}: {t}");
        assert!(t.contains(&format!("{field}:")), "{field}: {t}");
        assert!(!t.contains("panicked"), "{t}");
        assert!(!rep.exists(), "{field}: a report was written");
    }
    // Not a case file at all, an outputs path that is not a directory, and --case with a
    // suite DIR or --exec (clap: exit 2).
    let case = d.join("good.json");
    write(&case, &good);
    let rep = d.join("r.json");
    std::fs::write(d.join("junk.json"), "{not json").unwrap();
    let (code, t) = check_case(
        &d.join("junk.json"),
        &od,
        &["--report", rep.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{t}");
    let (code, t) = check_case(
        &case,
        &d.join("nowhere"),
        &["--report", rep.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains("--outputs"), "{t}");
    assert!(!rep.exists());
    let c = case.to_str().unwrap();
    for extra in [
        vec!["check", "somedir", "--case", c, "--outputs", "o"],
        vec!["check", "--exec", "true", "--case", c, "--outputs", "o"],
        vec!["check", "--case", c],
        vec!["check", "--outputs", "o"],
        vec!["check", "--case", c, "--outputs", "o", "--suite", "extreme"],
    ] {
        let o = bnconf(&extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
    }
}

/// A large case (judged through the fast cells) is read as the fast path holds it
/// (`read_user_case_as(.., true)`: cells in their own width, never as f64 where binary32):
/// the same case, the same fast problem as the f64 reading's, the same errors (a non-finite
/// value, a value that overflows f16, named by index); it is judged as before (a
/// correct kernel conforms, a perturbed element fails), and a failing case comes back with its
/// inputs for the reports. Backward [2, 3, 64, 64] (24,576 cells) in f32, f64, f16 and bf16,
/// from npy files of every storage type (f32, f64, f16, bf16 bit patterns).
#[test]
fn a_large_case_is_read_in_its_own_width() {
    let d = scratch("user-case", "large");
    let shape = [2usize, 3, 64, 64];
    let n: usize = shape.iter().product();
    assert!(n >= check::FAST_JUDGE_MIN_LEN);
    let vals = |k: usize| -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7919 + k * 104729) % 2003) as f64 / 1001.0 - 1.0 + (i % 3) as f64 * 2.5)
            .collect()
    };
    let lim = InputLimits::default();
    let store = |name: &str, v: &[f64], how: &str| {
        let data = match how {
            "f32" => NpyData::F32(v.iter().map(|&x| x as f32).collect()),
            "f64" => NpyData::F64(v.to_vec()),
            "f16" => NpyData::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
            _ => NpyData::U16(
                v.iter()
                    .map(|&x| half::bf16::from_f64(x).to_bits())
                    .collect(),
            ),
        };
        write_npy(&d.join(name), &shape, &data).unwrap();
    };
    for (dtype, xs, dys) in [
        ("f32", "f32", "f64"),
        ("f64", "f64", "f32"),
        ("f16", "f64", "f16"),
        ("bf16", "f32", "bf16"),
    ] {
        let (x, dy) = (vals(1), vals(2));
        store(&format!("x-{dtype}.npy"), &x, xs);
        store(&format!("dy-{dtype}.npy"), &dy, dys);
        let case = d.join(format!("case-{dtype}.json"));
        let body = |xname: &str| {
            json!({"format": "bnconf-case/1", "id": format!("large-{dtype}"), "op": "backward",
                   "layout": "nchw", "shape": shape, "dtype": dtype, "eps": "1e-5",
                   "inputs": {"x": {"npy": xname}, "dy": {"npy": format!("dy-{dtype}.npy")},
                              "gamma": [1, -0.5, 2]}})
        };
        write(&case, &body(&format!("x-{dtype}.npy")));
        let full = user_case::read_user_case(&case, &lim).unwrap();
        let (shell, fp) = user_case::read_user_case_as(&case, &lim, true).unwrap();
        let fp = fp.expect("a large case read in its width");
        let want = full.fast_problem().unwrap();
        assert_eq!(fp.x, want.x, "{dtype}");
        assert_eq!(fp.dy, want.dy, "{dtype}");
        assert_eq!(fp.chan, want.chan, "{dtype}");
        let binary32 = dtype != "f64";
        assert_eq!(matches!(fp.x, NpyData::F32(_)), binary32, "{dtype}");
        let mut again = shell.clone();
        again.inputs = full.inputs.clone();
        assert_eq!(again, full, "{dtype}");
        assert!(shell.inputs.is_empty(), "{dtype}");
        // Correct outputs conform; a perturbed element fails, the case given back whole.
        let (_, mut outs) = golden(&case);
        let od = d.join(format!("out-{dtype}"));
        write_outputs(&od, &full, &outs);
        let (_, _, r) = user_case::judge_user_case(&case, &od, &lim).unwrap();
        assert_eq!(r.verdict, check::Verdict::Pass, "{dtype}");
        let dx = outs.get_mut("dx").unwrap();
        dx[4321] = dx[4321] * 1.5 + 1.0;
        write_outputs(&od, &full, &outs);
        let (sc, _, r) = user_case::judge_user_case(&case, &od, &lim).unwrap();
        assert_eq!(r.verdict, check::Verdict::Fail, "{dtype}");
        assert_eq!(sc, full, "{dtype}");
        // The same errors, by index: a non-finite value, and (half dtypes) an overflow.
        let mut bad = x.clone();
        bad[777] = f64::NAN;
        if dtype == "f16" {
            bad[555] = 1e30;
        }
        store(
            &format!("xbad-{dtype}.npy"),
            &bad,
            if xs == "f32" { "f32" } else { "f64" },
        );
        write(&case, &body(&format!("xbad-{dtype}.npy")));
        let e1 = user_case::read_user_case(&case, &lim)
            .unwrap_err()
            .to_string();
        let e2 = user_case::read_user_case_as(&case, &lim, true)
            .unwrap_err()
            .to_string();
        assert_eq!(e1, e2, "{dtype}");
        let at = if dtype == "f16" { "555" } else { "777" };
        assert!(e1.contains(&format!("inputs.x[{at}]")), "{dtype}: {e1}");
    }
}
