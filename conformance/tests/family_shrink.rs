//! `bnconf shrink` of normalization-family cases (docs/FORMAT.md, "Added in bnconf 0.4:
//! shrink of family cases"): the family's known-bad kernels run through the kernel directory
//! protocol (`bnconf kernel NAME DIR` as the --exec command), each shrunk case re-judged
//! through the binary as a user reproduces it.

mod common;

use common::{bnconf, read_json, scratch, stderr, text, tree_files, BNCONF};
use serde_json::Value;
use std::path::Path;

fn shrink(case: &str, dtype: &str, kernel: &str, out: &Path) -> std::process::Output {
    bnconf(&[
        "shrink",
        "--case",
        case,
        "--dtype",
        dtype,
        "--exec",
        &format!("{BNCONF} kernel {kernel}"),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ])
}

/// What the shrunk case must be: `(case id, dtype, known-bad kernel, output that must still
/// fail, what the shrunk case must keep)`.
struct Expect {
    id: &'static str,
    dtype: &'static str,
    kernel: &'static str,
    output: &'static str,
    /// Checked on the shrunk `case.json`: why a smaller case would not show the defect.
    keeps: fn(&Value) -> Result<(), String>,
}

fn dim(v: &Value, i: usize) -> usize {
    v["shape"][i].as_u64().unwrap() as usize
}

const CASES: &[Expect] = &[
    // The one-pass variance needs the large mean: two cells of one row suffice.
    Expect {
        id: "layer_norm.last.f32.cancel-1e4",
        dtype: "f32",
        kernel: "bad-ln-onepass",
        output: "rstd",
        keeps: |_| Ok(()),
    },
    // A group of C/G = 3 channels: the defect needs a group size that is not a power of two.
    Expect {
        id: "group_norm_backward.ncl.f32.c9-g3",
        dtype: "f32",
        kernel: "bad-gn-pow2-groups",
        output: "dx",
        keeps: |c| {
            let (ch, g) = (dim(c, 1), c["groups"].as_u64().unwrap() as usize);
            let per = ch / g;
            if per.is_power_of_two() {
                Err(format!("C/G = {per} is a power of two"))
            } else {
                Ok(())
            }
        },
    },
    // Channels-last indexing read as channels-first: at least two channels must remain.
    Expect {
        id: "group_norm.nhwc.f32.nhwc-c3",
        dtype: "f32",
        kernel: "bad-gn-channels-last",
        output: "y",
        keeps: |c| {
            if dim(c, 3) >= 2 {
                Ok(())
            } else {
                Err("one channel left".into())
            }
        },
    },
    // The mixed-precision dgamma (rstd rounded to f16): the mixed dtypes are kept.
    Expect {
        id: "layer_norm_backward.last.f16+f32.gaussian",
        dtype: "f16+f32",
        kernel: "bad-ln-half-rstd-dgamma",
        output: "dgamma",
        keeps: |c| {
            if c["dtype"] == "f16" && c["param_dtype"] == "f32" {
                Ok(())
            } else {
                Err("the precision changed".into())
            }
        },
    },
];

fn input_elements(v: &Value) -> u64 {
    v["input_elements"].as_u64().unwrap()
}

/// Each known-bad kernel's failure shrinks to a smaller case that the binary, reading the
/// written files back as a user would, still judges failing on the same output with the same
/// diagnosis; `golden.json` is `bnconf golden case.json` byte for byte; a second run gives the
/// same bytes; and the shrunk case, given back as `--case-file`, is a fixed point.
#[test]
fn known_bad_family_kernels_shrink_to_reproducers() {
    let root = scratch("family-shrink", "known-bad");
    for (i, e) in CASES.iter().enumerate() {
        let (a, b) = (root.join(format!("{i}a")), root.join(format!("{i}b")));
        let o = shrink(e.id, e.dtype, e.kernel, &a);
        assert_eq!(o.status.code(), Some(0), "{}: {}", e.id, stderr(&o));
        let s = read_json(&a.join("shrink.json"));
        assert_eq!(s["format"], "bnconf-shrink/1", "{}", e.id);
        assert_eq!(s["failure"]["behaves_like"], e.kernel, "{}", e.id);
        assert_eq!(s["failure"]["output"], e.output, "{}", e.id);
        assert_eq!(s["verdict"], "fail", "{}", e.id);
        assert!(
            input_elements(&s["case"]) < input_elements(&s["original"]),
            "{}: {} -> {} input elements",
            e.id,
            s["original"]["input_elements"],
            s["case"]["input_elements"]
        );
        let case = read_json(&a.join("case.json"));
        assert_eq!(case["shrunk_from"], e.id);
        assert_eq!(case["id"], format!("{}.shrunk", e.id));
        if let Err(why) = (e.keeps)(&case) {
            panic!("{}: the shrunk case lost its trigger: {why}", e.id);
        }
        // Every element of the failing output: its ratio over the output's gate somewhere.
        let out = s["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == e.output)
            .unwrap();
        let gate = out["gate"].as_f64().unwrap();
        assert!(
            out["ratio"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_f64().is_none_or(|r| r > gate)),
            "{}: no element of {} over its gate {gate}",
            e.id,
            e.output
        );
        // The files, read back by the binary.
        let g = bnconf(&["golden", a.join("case.json").to_str().unwrap()]);
        assert!(g.status.success(), "{}: {}", e.id, stderr(&g));
        assert_eq!(
            text(&g),
            std::fs::read_to_string(a.join("golden.json")).unwrap(),
            "{}: golden.json is not `bnconf golden case.json`",
            e.id
        );
        let report = a.with_extension("report.json");
        let c = bnconf(&[
            "check",
            "--case",
            a.join("case.json").to_str().unwrap(),
            "--outputs",
            a.join("kernel").to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ]);
        assert_eq!(c.status.code(), Some(1), "{}: {}", e.id, text(&c));
        let r = read_json(&report);
        // (on a case this small, another kernel may fit the outputs as well: the diagnosis
        // names the kernel among them)
        let named: Vec<&Value> = r["diagnosis"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["kernel"])
            .collect();
        assert!(named.iter().any(|k| *k == e.kernel), "{}: {named:?}", e.id);
        let failing: Vec<&str> = r["cases"][0]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["elements_over"].as_u64() > Some(0))
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert!(failing.contains(&e.output), "{}: {failing:?}", e.id);
        // Deterministic.
        let o = shrink(e.id, e.dtype, e.kernel, &b);
        assert_eq!(o.status.code(), Some(0), "{}: {}", e.id, stderr(&o));
        assert_eq!(
            tree_files(&a),
            tree_files(&b),
            "{}: a second run differs",
            e.id
        );
        // A fixed point: shrinking the shrunk case file again keeps its shape.
        let again = root.join(format!("{i}c"));
        let o = bnconf(&[
            "shrink",
            "--case-file",
            a.join("case.json").to_str().unwrap(),
            "--exec",
            &format!("{BNCONF} kernel {}", e.kernel),
            "--quiet",
            "--out",
            again.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", e.id, stderr(&o));
        assert_eq!(
            read_json(&again.join("shrink.json"))["case"]["shape"],
            s["case"]["shape"],
            "{}",
            e.id
        );
    }
}

/// A good kernel's case: exit 1, "does not fail", nothing written.
#[test]
fn a_conforming_family_case_is_not_shrunk() {
    let root = scratch("family-shrink", "good");
    let out = root.join("out");
    let o = shrink("layer_norm.last.f32.cancel-1e4", "f32", "ln-twopass", &out);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not fail"), "{}", stderr(&o));
    assert!(!out.exists(), "a file was written");
}

/// Bad arguments of a family shrink: exit 2 naming the field, nothing written.
#[test]
fn bad_family_arguments_exit_2_naming_the_field() {
    let root = scratch("family-shrink", "bad");
    let out = root.join("out");
    let exec = format!("{BNCONF} kernel bad-ln-onepass");
    for (args, field) in [
        (
            vec!["--case", "layer_norm.last.f32.no-such-class"],
            "--case",
        ),
        (
            vec![
                "--case",
                "layer_norm.last.f32.cancel-1e4",
                "--dtype",
                "f128",
            ],
            "--dtype",
        ),
        (
            vec![
                "--case",
                "layer_norm.last.f32.cancel-1e4",
                "--suite",
                "replicated",
            ],
            "--suite",
        ),
    ] {
        let mut a = vec!["shrink"];
        a.extend(args.iter().copied());
        a.extend(["--exec", &exec, "--out", out.to_str().unwrap()]);
        let o = bnconf(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(field), "{args:?}: {}", stderr(&o));
        assert!(!out.exists(), "{args:?}: a file was written");
    }
}
