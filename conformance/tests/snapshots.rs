//! Snapshots (insta) of what users read: the human `bnconf check` report of a failing kernel,
//! its JUnit XML and JSON report, and golden files of small committed cases. The `bnconf run`
//! table is snapshotted in `cli.rs` (the test that already runs it) and the robustness table's
//! error messages in `robustness.rs`.
//!
//! A changed text shows up in review as a `.snap` diff under `tests/snapshots/`. To accept a
//! deliberate change: `INSTA_UPDATE=always cargo test --release -p bnconf --test snapshots`
//! (or `cargo insta review`), then commit the `.snap` files.
//!
//! Volatile parts are redacted before snapshotting (by hand: insta's `filters` feature is not
//! enabled): the temporary suite directory of `check --exec` and the tool version in golden
//! provenance. Reports carry no timestamps or durations (report/ promises the same bytes for
//! the same results); `no_volatile_fields` guards that.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{bnconf, stderr, stdout, BNCONF};

fn scratch(name: &str) -> PathBuf {
    common::scratch("snapshots", name)
}

/// Every whitespace-delimited word naming `check --exec`'s temporary suite directory
/// (`<temp>/bnconf-check-<pid>`) becomes `[TMPDIR]`.
fn redact_tmpdir(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.contains("bnconf-check-") {
            out.push_str("[TMPDIR]");
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Fails when a report grows a field that would make its snapshot volatile.
fn no_volatile_fields(what: &str, text: &str) {
    for w in [
        "timestamp",
        "time=",
        "duration",
        "elapsed",
        "hostname",
        BNCONF,
    ] {
        assert!(
            !text.contains(w),
            "{what} contains {w:?}: redact it before snapshotting"
        );
    }
    assert!(
        !text.contains(&*std::env::temp_dir().to_string_lossy())
            && !text.contains(env!("CARGO_TARGET_TMPDIR")),
        "{what} names a temporary path: redact it before snapshotting"
    );
}

/// The failing run every report snapshot below is taken from: the known-bad kernel that
/// divides the variance by m-1, on the default suite's forward nchw f32 cases (16 cases).
struct FailingCheck {
    out: Output,
    junit: String,
    report: serde_json::Value,
}

fn failing_check(test: &str) -> FailingCheck {
    let d = scratch(test);
    let junit = d.join("junit.xml");
    let report = d.join("report.json");
    let exec = format!("{BNCONF} kernel bad-unbiased-var");
    let out = bnconf(&[
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "forward",
        "--layouts",
        "nchw",
        "--exec",
        &exec,
        "--junit",
        junit.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    // a known-bad kernel is rejected (exit 1), and both reports are written
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let junit = std::fs::read_to_string(&junit).expect("--junit FILE written");
    let report = std::fs::read_to_string(&report).expect("--report FILE written");
    let report = serde_json::from_str(&report).expect("the report is JSON");
    let _ = std::fs::remove_dir_all(&d);
    FailingCheck { out, junit, report }
}

const CHECK_CMD: &str = "bnconf check --suite default --dtype f32 --ops forward --layouts nchw \
                         --exec 'bnconf kernel bad-unbiased-var'";

#[test]
fn check_report_human() {
    let c = failing_check("check_report_human");
    let out = stdout(&c.out);
    no_volatile_fields("the human report", &out);
    insta::with_settings!({description => CHECK_CMD}, {
        insta::assert_snapshot!("check_report_stdout", out);
        insta::assert_snapshot!("check_report_stderr", redact_tmpdir(&stderr(&c.out)));
    });
}

#[test]
fn check_report_junit() {
    let c = failing_check("check_report_junit");
    no_volatile_fields("the JUnit XML", &c.junit);
    insta::with_settings!({description => format!("{CHECK_CMD} --junit FILE")}, {
        insta::assert_snapshot!("check_report_junit", c.junit);
    });
}

/// A JSON value insta can serialize as plain numbers. The workspace builds serde_json with
/// `arbitrary_precision`, under which a `serde_json::Value`'s numbers reach insta as a private
/// struct (`{"$serde_json::private::Number": "3"}`); this mirror hands them over as integers or
/// f64 (printed by insta in full, round-trip exact), keys in the report's order.
enum Plain {
    Null,
    Bool(bool),
    Uint(u64),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Plain>),
    Object(Vec<(String, Plain)>),
}

impl From<&serde_json::Value> for Plain {
    fn from(v: &serde_json::Value) -> Plain {
        use serde_json::Value as V;
        match v {
            V::Null => Plain::Null,
            V::Bool(b) => Plain::Bool(*b),
            V::Number(n) => {
                if let Some(u) = n.as_u64() {
                    Plain::Uint(u)
                } else if let Some(i) = n.as_i64() {
                    Plain::Int(i)
                } else {
                    Plain::Float(n.as_f64().expect("a finite JSON number"))
                }
            }
            V::String(s) => Plain::Str(s.clone()),
            V::Array(a) => Plain::Array(a.iter().map(Plain::from).collect()),
            V::Object(o) => Plain::Object(o.iter().map(|(k, v)| (k.clone(), v.into())).collect()),
        }
    }
}

impl serde::Serialize for Plain {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Plain::Null => s.serialize_unit(),
            Plain::Bool(b) => s.serialize_bool(*b),
            Plain::Uint(u) => s.serialize_u64(*u),
            Plain::Int(i) => s.serialize_i64(*i),
            Plain::Float(f) => s.serialize_f64(*f),
            Plain::Str(x) => s.serialize_str(x),
            Plain::Array(a) => {
                let mut q = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    q.serialize_element(v)?;
                }
                q.end()
            }
            Plain::Object(o) => {
                let mut m = s.serialize_map(Some(o.len()))?;
                for (k, v) in o {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

#[test]
fn check_report_json() {
    let c = failing_check("check_report_json");
    no_volatile_fields("the JSON report", &c.report.to_string());
    assert_eq!(c.report["format"], "bnconf-report/1");
    assert_eq!(c.report["summary"]["not_conforming"], 14);
    let report = Plain::from(&c.report);
    insta::with_settings!({description => format!("{CHECK_CMD} --report FILE")}, {
        insta::assert_json_snapshot!("check_report_json", report);
    });
}

/// `bnconf golden CASE` of a committed case file, stdout (the exact strings `a + b*sqrt(q)`
/// and the hex floats of every format), with the tool version redacted.
fn golden(case: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(case);
    let o = bnconf(&["golden", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    let text = stdout(&o);
    let version = format!("\"version\": \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&version), "provenance names the version");
    let text = text.replace(&version, "\"version\": \"[version]\"");
    no_volatile_fields("the golden file", &text);
    // the golden file is valid JSON and echoes the case it was made from
    let g: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(g["format"], "bnconf-golden/1");
    text
}

#[test]
fn golden_forward_nchw_f32() {
    let text = golden("golden-forward-nchw-f32.json");
    let description = "bnconf golden tests/data/golden-forward-nchw-f32.json";
    insta::with_settings!({description => description}, {
        insta::assert_snapshot!("golden_forward_nchw_f32", text);
    });
}

#[test]
fn golden_backward_nchw_f64() {
    let text = golden("golden-backward-nchw-f64.json");
    let description = "bnconf golden tests/data/golden-backward-nchw-f64.json";
    insta::with_settings!({description => description}, {
        insta::assert_snapshot!("golden_backward_nchw_f64", text);
    });
}

#[test]
fn redaction_of_the_temporary_directory() {
    assert_eq!(
        redact_tmpdir("ran 16 cases in /tmp/bnconf-check-4242\nnext /tmp/keep"),
        "ran 16 cases in [TMPDIR]\nnext /tmp/keep"
    );
}
