//! `bnconf shrink` (docs/FORMAT.md, "Added in bnconf 0.3: shrink"): built-in kernels run
//! through the kernel directory protocol (`bnconf kernel NAME DIR` as the --exec command).

mod common;

use bnconf::formats::case::InputLimits;
use bnconf::judge::check::{self, Verdict};
use common::{bnconf, read_json, scratch, stderr, text, tree_files, BNCONF};
use serde_json::Value;
use std::path::Path;

const CASE: &str = "forward.nchw.f32.large-mean-1e4";

fn exec_of(kernel: &str) -> String {
    format!("{BNCONF} kernel {kernel}")
}

fn shrink(case: &str, kernel: &str, out: &Path) -> std::process::Output {
    shrink_in("default", case, kernel, out)
}

/// `bnconf shrink` of case `case` of suite `suite` (f32) with the built-in `kernel`.
fn shrink_in(suite: &str, case: &str, kernel: &str, out: &Path) -> std::process::Output {
    bnconf(&[
        "shrink",
        "--suite",
        suite,
        "--dtype",
        "f32",
        "--case",
        case,
        "--exec",
        &exec_of(kernel),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ])
}

/// Shrinking the one-pass-variance kernel's failure on a large-mean case: a case of one
/// channel and a few cells, still failing `var`, still diagnosed as bad-onepass-var (checked
/// again here in process from the written case file), the large mean kept, the exact
/// expectations those of `bnconf golden`, and the same bytes on a second run.
#[test]
fn shrinks_onepass_variance_deterministically() {
    let root = scratch("shrink", "onepass");
    let (a, b) = (root.join("a"), root.join("b"));
    let o = shrink(CASE, "bad-onepass-var", &a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = read_json(&a.join("shrink.json"));
    assert_eq!(s["format"], "bnconf-shrink/1");
    assert_eq!(s["failure"]["behaves_like"], "bad-onepass-var", "{s}");
    assert_eq!(s["verdict"], "fail");
    let before = s["original"]["input_elements"].as_u64().unwrap();
    let after = s["case"]["input_elements"].as_u64().unwrap();
    assert!(after * 4 <= before, "{after} of {before} elements");
    let shape: Vec<u64> = s["case"]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    assert_eq!(shape[1], 1, "one channel: {shape:?}");
    assert!(shape.iter().product::<u64>() <= 16, "{shape:?}");

    // The case file stands alone: read back, judged in process, it fails the same way.
    let case = bnconf::shrink::case_from_file(&a.join("case.json"), &InputLimits::default())
        .expect("valid case file");
    assert_eq!(
        case.shape.iter().map(|&d| d as u64).collect::<Vec<_>>(),
        shape
    );
    let x = &case.inputs["x"];
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    assert!(mean.abs() > 1000.0, "the large mean is kept: {x:?}");
    assert!(
        x.iter()
            .all(|v| v.fract() == 0.0 || (v * 1024.0).fract() == 0.0),
        "values simplified to short binary fractions: {x:?}"
    );
    let p = check::prepare(std::slice::from_ref(&case))
        .unwrap()
        .remove(0);
    let k = bnconf_impl::kernel_by_name("bad-onepass-var").unwrap();
    let out = k.run(&case.to_kernel_case()).unwrap();
    let r = p.judge(&out);
    assert_eq!(r.verdict, Verdict::Fail);
    let d = bnconf::judge::diagnosis::diagnose(std::slice::from_ref(&p), &[r]);
    assert_eq!(
        d.first().map(|d| d.kernel.as_str()),
        Some("bad-onepass-var")
    );
    let good = bnconf_impl::kernel_by_name("twopass-native").unwrap();
    assert_eq!(
        p.judge(&good.run(&case.to_kernel_case()).unwrap()).verdict,
        Verdict::Pass
    );

    // What the kernel returned, as written, judges as shrink.json says.
    let var = s["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "var")
        .unwrap()
        .clone();
    assert!(var["elements_over"].as_u64().unwrap() >= 1);
    assert_eq!(
        var["kernel"][0],
        bnconf::shrink::hex_in(out["var"][0], bnconf_spec::exact::round::FloatFormat::F32)
    );
    // The exact expectations are those of `bnconf golden` on the written case file.
    let g = bnconf(&["golden", a.join("case.json").to_str().unwrap()]);
    assert_eq!(g.status.code(), Some(0), "{}", text(&g));
    let gj: Value = serde_json::from_slice(&g.stdout).unwrap();
    assert_eq!(gj["outputs"]["var"]["exact"], var["exact"]);
    assert_eq!(gj["outputs"]["var"]["f32"], var["expected"]);
    assert_eq!(
        read_json(&a.join("golden.json"))["outputs"]["y"]["exact"],
        gj["outputs"]["y"]["exact"]
    );
    for name in [
        "x.npy",
        "gamma.npy",
        "beta.npy",
        "kernel/y.npy",
        "kernel/var.npy",
    ] {
        assert!(a.join(name).is_file(), "{name}");
    }

    // Deterministic: a second run writes the same bytes.
    let o2 = shrink(CASE, "bad-onepass-var", &b);
    assert_eq!(o2.status.code(), Some(0), "{}", text(&o2));
    assert_eq!(tree_files(&a), tree_files(&b));
}

/// Another defect keeps its own diagnosis, and a case file is accepted as the original.
#[test]
fn shrinks_from_a_case_file_and_keeps_the_diagnosis() {
    let root = scratch("shrink", "unbiased");
    let first = root.join("first");
    let o = shrink("forward.rows.f32.gaussian", "bad-unbiased-var", &first);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = read_json(&first.join("shrink.json"));
    assert_eq!(s["failure"]["behaves_like"], "bad-unbiased-var", "{s}");
    // Shrinking the written case again (as a case file) finds nothing smaller to drop.
    let again = root.join("again");
    let o = bnconf(&[
        "shrink",
        "--case-file",
        first.join("case.json").to_str().unwrap(),
        "--exec",
        &exec_of("bad-unbiased-var"),
        "--quiet",
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = read_json(&again.join("shrink.json"));
    assert_eq!(t["failure"]["behaves_like"], "bad-unbiased-var");
    assert_eq!(t["case"]["shape"], s["case"]["shape"]);
    assert_eq!(t["outputs"], s["outputs"]);
}

/// A kernel that conforms on the case: refused, exit 1, nothing written.
#[test]
fn a_good_kernels_case_is_refused() {
    let root = scratch("shrink", "good");
    let out = root.join("out");
    let o = shrink(CASE, "twopass-native", &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("does not fail"), "{}", text(&o));
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
}

/// Bad arguments: exit 2, naming the field, nothing written.
#[test]
fn bad_arguments_exit_2_naming_the_field() {
    let root = scratch("shrink", "args");
    let out = root.join("out");
    let o = out.to_str().unwrap();
    let exec = exec_of("bad-onepass-var");
    let nonempty = root.join("full");
    std::fs::create_dir_all(&nonempty).unwrap();
    std::fs::write(nonempty.join("keep"), b"x").unwrap();
    let bad_case = root.join("bad.json");
    std::fs::write(
        &bad_case,
        br#"{"format": "bnconf-case/1", "op": "forward", "layout": "rows", "shape": [1, 2],
            "dtype": "f32", "eps": "1/100000",
            "inputs": {"x": [1, 2], "gamma": [1], "beta": [0]}}"#,
    )
    .unwrap();
    // Arguments as words; EXEC, OUT, FULL (a non-empty directory), BAD (a case file whose eps
    // is not a decimal) and EMPTY stand for the values below.
    let cases: [(&str, &str); 12] = [
        ("--exec EXEC --out OUT", "--case"),
        ("--case no.such.case --exec EXEC --out OUT", "--case"),
        ("--case CASE --dtype f128 --exec EXEC --out OUT", "--dtype"),
        (
            "--case CASE --dtype bf16+f32 --exec EXEC --out OUT",
            "--dtype",
        ),
        ("--case CASE --suite nope --exec EXEC --out OUT", "--suite"),
        ("--case CASE --exec EMPTY --out OUT", "--exec"),
        ("--case CASE --exec a'b --out OUT", "--exec"),
        ("--case CASE --exec EXEC --out FULL", "--out"),
        (
            "--case CASE --case-file BAD --exec EXEC --out OUT",
            "--case",
        ),
        ("--case-file BAD --exec EXEC --out OUT", "eps"),
        ("--case CASE --out OUT", "--exec"),
        ("--case CASE --exec EXEC --out OUT --timeout 0", "--timeout"),
    ];
    let (full, bad) = (nonempty.to_str().unwrap(), bad_case.to_str().unwrap());
    let cases = cases.map(|(words, field)| {
        let args: Vec<&str> = words
            .split(' ')
            .map(|w| match w {
                "EXEC" => exec.as_str(),
                "OUT" => o,
                "FULL" => full,
                "BAD" => bad,
                "CASE" => CASE,
                "EMPTY" => "",
                other => other,
            })
            .collect();
        (args, field)
    });
    for (args, field) in cases {
        let mut all = vec!["shrink"];
        all.extend(args.iter().copied());
        let r = bnconf(&all);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r));
        assert!(
            stderr(&r).contains(field),
            "{args:?} should name {field}: {}",
            text(&r)
        );
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    assert_eq!(std::fs::read(nonempty.join("keep")).unwrap(), b"x");
}

fn shrink_replicated(case: &str, kernel: &str, out: &Path) -> std::process::Output {
    shrink_in("replicated", case, kernel, out)
}

/// A replicated case (sync BN across ranks) shrinks with a replicated known-bad kernel: fewer
/// ranks, rows, channels and cells, the split still unequal (equal weights are right on an
/// equal split), the diagnosis kept, the split written as `ranks`/`shard_sizes` in case.json,
/// each rank's output under kernel/rank<r>/, the same bytes twice; the written case read back
/// still fails with bad-rep-equal-weight (run in process on its ranks) and passes with the
/// count-weighted kernel.
#[test]
fn shrinks_a_replicated_case_across_ranks() {
    let id = "forward.nchw.f32.gaussian.r3-unequal";
    let root = scratch("shrink", "replicated");
    let (a, b) = (root.join("a"), root.join("b"));
    let o = shrink_replicated(id, "bad-rep-equal-weight", &a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = read_json(&a.join("shrink.json"));
    assert_eq!(s["failure"]["behaves_like"], "bad-rep-equal-weight", "{s}");
    assert_eq!(s["original"]["shard_sizes"], serde_json::json!([2, 5, 9]));
    let before = s["original"]["input_elements"].as_u64().unwrap();
    let after = s["case"]["input_elements"].as_u64().unwrap();
    assert!(after * 20 <= before, "{after} of {before} elements");

    let case = bnconf::shrink::case_from_file(&a.join("case.json"), &InputLimits::default())
        .expect("the shrunk case reads back");
    let sizes = case.shard_sizes.clone();
    assert!(sizes.len() >= 2, "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), case.shape[0], "{sizes:?}");
    assert!(sizes.iter().any(|&n| n != sizes[0]), "{sizes:?} is equal");
    assert!(!sizes.contains(&0), "{sizes:?}: a rank was emptied");
    assert_eq!(s["case"]["shard_sizes"], serde_json::json!(sizes));
    let cj = read_json(&a.join("case.json"));
    assert_eq!(cj["ranks"], sizes.len());
    for (r, &n) in sizes.iter().enumerate() {
        let rd = a.join("kernel").join(format!("rank{r}"));
        for out in ["y", "mean", "var"] {
            assert!(rd.join(format!("{out}.npy")).is_file(), "rank{r}/{out}.npy");
        }
        let (shape, _) =
            bnconf::formats::npy::read_npy_any(&rd.join("y.npy"), 1 << 20).expect("y.npy");
        assert_eq!(shape[0], n, "rank {r}");
    }
    assert!(!a.join("kernel").join("y.npy").exists());

    let p = check::prepare(std::slice::from_ref(&case)).unwrap();
    let run = |k: &str| {
        let k = bnconf_impl::replicated_kernel_by_name(k).unwrap();
        bnconf::judge::ranks::run_kernel(k.as_ref(), &p).remove(0)
    };
    let bad = run("bad-rep-equal-weight");
    assert_eq!(bad.verdict, Verdict::Fail);
    let d = bnconf::judge::diagnosis::diagnose(&p, std::slice::from_ref(&bad));
    assert_eq!(
        d.first().map(|d| d.kernel.as_str()),
        Some("bad-rep-equal-weight")
    );
    assert_eq!(bad.worst_ratio, s["worst_ratio"].as_f64().unwrap());
    assert_eq!(run("replicated-chan").verdict, Verdict::Pass);

    let o2 = shrink_replicated(id, "bad-rep-equal-weight", &b);
    assert_eq!(o2.status.code(), Some(0), "{}", text(&o2));
    assert_eq!(tree_files(&a), tree_files(&b));
}

/// An empty rank is kept where the failure needs it (a kernel that counts an empty rank as
/// one zero cell fails only with one), and a rank is never emptied when the original had none
/// (an unequal split of bad-rep-onepass's large mean stays without an empty rank).
#[test]
fn replicated_shrink_keeps_the_empty_rank_only_where_the_original_had_one() {
    let root = scratch("shrink", "replicated-empty");
    let out = root.join("empty");
    let o = shrink_replicated(
        "forward.nchw.f32.offset.r3-empty",
        "bad-rep-empty-as-one",
        &out,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = read_json(&out.join("shrink.json"));
    assert_eq!(s["failure"]["behaves_like"], "bad-rep-empty-as-one", "{s}");
    let sizes: Vec<u64> = s["case"]["shard_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(sizes.iter().filter(|&&n| n == 0).count(), 1, "{sizes:?}");

    let out = root.join("onepass");
    let o = shrink_replicated(
        "forward.nhwc.f32.large-mean-1e2.r2-unequal",
        "bad-rep-onepass",
        &out,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = read_json(&out.join("shrink.json"));
    assert_eq!(s["failure"]["behaves_like"], "bad-rep-onepass", "{s}");
    let sizes = s["case"]["shard_sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    assert!(sizes.iter().all(|n| n.as_u64().unwrap() > 0), "{s}");
}

/// A replicated case file with a bad split is exit 2 naming the field.
#[test]
fn a_bad_split_in_a_case_file_names_the_field() {
    let root = scratch("shrink", "bad-split");
    let exec = exec_of("bad-rep-equal-weight");
    let bad: [(&str, &str); 5] = [
        (r#""ranks": 2"#, "shard_sizes"),
        (r#""shard_sizes": [1, 1]"#, "ranks"),
        (r#""ranks": 2, "shard_sizes": [1, 2]"#, "shard_sizes"),
        (r#""ranks": 3, "shard_sizes": [1, 1]"#, "shard_sizes"),
        (r#""ranks": 2, "shard_sizes": [1, -1]"#, "shard_sizes[1]"),
    ];
    for (i, (split, field)) in bad.iter().enumerate() {
        let f = root.join(format!("case{i}.json"));
        let text_of = format!(
            r#"{{"format": "bnconf-case/1", "id": "t", "op": "forward", "layout": "nchw",
                "shape": [2, 1, 1, 1], "dtype": "f32", "eps": 1e-5, {split},
                "inputs": {{"x": [1, 2], "gamma": [1], "beta": [0]}}}}"#
        );
        std::fs::write(&f, text_of).unwrap();
        let out = root.join(format!("out{i}"));
        let r = bnconf(&[
            "shrink",
            "--case-file",
            f.to_str().unwrap(),
            "--exec",
            &exec,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(r.status.code(), Some(2), "{split}: {}", text(&r));
        assert!(
            stderr(&r).contains(field),
            "{split} should name {field}: {}",
            text(&r)
        );
        assert!(!out.exists());
    }
}

/// An f16 or bf16 case shrinks to inputs in its own dtype (`<f2`, bf16 as `<u2` bit patterns,
/// as `bnconf export` writes them), which the case-file readers take: `bnconf golden` accepts
/// the written case.json and `check --case ... --outputs kernel` reproduces the failure and
/// its diagnosis. `<u2` data for an f16 tensor is refused, naming the input.
#[test]
fn half_precision_shrinks_are_read_back_as_case_files() {
    let root = scratch("shrink", "half");
    for (dtype, descr) in [("f16", "<f2"), ("bf16", "<u2")] {
        let out = root.join(dtype);
        let o = bnconf(&[
            "shrink",
            "--dtype",
            dtype,
            "--case",
            &format!("forward.rows.{dtype}.gaussian"),
            "--exec",
            &exec_of("bad-var-doubled"),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{dtype}: {}", text(&o));
        let x = std::fs::read(out.join("x.npy")).unwrap();
        assert!(
            String::from_utf8_lossy(&x[..128]).contains(descr),
            "{dtype}: x.npy is not {descr}"
        );
        let case = out.join("case.json");
        let o = bnconf(&["golden", case.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{dtype}: {}", text(&o));
        let o = bnconf(&[
            "check",
            "--case",
            case.to_str().unwrap(),
            "--outputs",
            out.join("kernel").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{dtype}: {}", text(&o));
        assert!(
            text(&o).contains("behaves like bad-var-doubled"),
            "{dtype}: {}",
            text(&o)
        );
    }
    // bf16 bit patterns where the case is f16: refused, naming the input
    std::fs::copy(root.join("bf16/x.npy"), root.join("f16/x.npy")).unwrap();
    let o = bnconf(&["golden", root.join("f16/case.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("x.npy")
            && stderr(&o).contains("'<u2' is not supported for a tensor of dtype f16"),
        "{}",
        text(&o)
    );
}

/// A mixed-precision case file (`param_dtype` other than `dtype`) is refused, naming
/// `param_dtype`, as `--dtype f16+f32` is (it was read as the pure half precision).
#[test]
fn a_mixed_case_file_is_refused_naming_param_dtype() {
    let root = scratch("shrink", "mixed-file");
    std::fs::create_dir_all(&root).unwrap();
    let case = root.join("case.json");
    let x: Vec<f64> = (0..8).map(|i| f64::from(i % 3)).collect();
    let c = serde_json::json!({
        "format": "bnconf-case/1", "id": "running_update.rows.f16.mixed", "op": "running_update",
        "layout": "rows", "shape": [1, 8], "dtype": "f16", "param_dtype": "f32", "eps": "1e-5",
        "momentum": "0.1", "convention": "pytorch",
        "inputs": {"x": x, "running_mean": [0], "running_var": [1]}
    });
    std::fs::write(&case, c.to_string()).unwrap();
    let o = bnconf(&[
        "shrink",
        "--case-file",
        case.to_str().unwrap(),
        "--exec",
        &exec_of("bad-f16-accum"),
        "--out",
        root.join("out").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("param_dtype"), "{}", text(&o));
}
