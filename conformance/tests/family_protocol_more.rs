//! The normalization family in the protocol, continued, end to end through the binary:
//! `check --case CASE.json --outputs DIR` of a family case file (a good kernel's outputs
//! conform, a perturbed output does not, a missing required output is malformed, optional
//! statistics may be left out, bad input is exit 2 naming the field), `--html` of a family
//! check (every case a row), and `--shard K/N` of a family export and check (the shards
//! partition the suite, each is judged, the manifest records it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{bnconf, text, BNCONF};

use bnconf::formats::npy::{read_npy_any, write_npy, NpyData};
use serde_json::{json, Value};

fn tmpdir(name: &str) -> PathBuf {
    common::scratch("family_protocol_more", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn export(dir: &Path, family: &str, dtype: &str, extra: &[&str]) {
    let mut args = vec![
        "export",
        "--family",
        family,
        "--dtype",
        dtype,
        "--out",
        s(dir),
    ];
    args.extend_from_slice(extra);
    let o = bnconf(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Run built-in kernel `name` over `dir`, every case's `out/` cleared first.
fn kernel(name: &str, dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let _ = std::fs::remove_dir_all(e.unwrap().path().join("out"));
    }
    let o = bnconf(&["kernel", name, s(dir)]);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
}

fn check_case(case: &Path, outputs: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["check", "--case", s(case), "--outputs", s(outputs)];
    args.extend_from_slice(extra);
    bnconf(&args)
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn case_ids(dir: &Path) -> Vec<String> {
    manifest(dir)["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn assert_exit2_naming(o: &Output, what: &str) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains(what), "expected {what:?} in: {t}");
    assert!(!t.contains("panicked"), "{t}");
}

/// Multiply element `i` of the npy file at `path` by `f` (f32 or f64 data).
fn perturb(path: &Path, i: usize, f: f64) {
    let (shape, data) = read_npy_any(path, 1 << 24).unwrap();
    let data = match data {
        NpyData::F32(mut v) => {
            v[i] *= f as f32;
            NpyData::F32(v)
        }
        NpyData::F64(mut v) => {
            v[i] *= f;
            NpyData::F64(v)
        }
        other => panic!("unexpected npy dtype {other:?}"),
    };
    write_npy(path, &shape, &data).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// `check --case` of a family case file: a good kernel's outputs conform (exit 0) for a
/// forward and a backward case of every family, the case given as an export's `case.json`
/// (inputs beside it) or with its inputs inline; a perturbed output fails (exit 1); a missing
/// required output is malformed (exit 1, the file named); the optional statistics may be left
/// out (reported as not given, in the JSON report too).
#[test]
fn check_case_judges_a_users_family_case() {
    let root = tmpdir("case");
    for (family, dtype, good, forward, backward) in [
        (
            "layer_norm",
            "f32",
            "ln-twopass",
            "layer_norm.last.f32.gaussian",
            "layer_norm_backward.last.f32.gaussian",
        ),
        (
            "rms_norm",
            "f32",
            "rms-twopass",
            "rms_norm.last.f32.gaussian",
            "rms_norm_backward.last.f32.gaussian",
        ),
        ("group_norm", "f32", "gn-twopass", "", ""),
    ] {
        let dir = root.join(family);
        export(&dir, family, dtype, &[]);
        kernel(good, &dir);
        let ids = case_ids(&dir);
        // group_norm's ids: the first forward and the first backward case
        let fwd = if forward.is_empty() {
            ids.iter()
                .find(|i| i.starts_with(&format!("{family}.")))
                .unwrap()
                .clone()
        } else {
            forward.to_string()
        };
        let bwd = if backward.is_empty() {
            ids.iter()
                .find(|i| i.starts_with(&format!("{family}_backward.")))
                .unwrap()
                .clone()
        } else {
            backward.to_string()
        };
        for id in [&fwd, &bwd] {
            assert!(ids.contains(id), "{id} not in {ids:?}");
            let cd = dir.join(id);
            let o = check_case(&cd.join("case.json"), &cd.join("out"), &[]);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(0), "{id}: {t}");
            assert!(t.contains("conforms"), "{t}");
            assert!(t.contains("summary: 1 conforming"), "{t}");

            // the same case with its inputs inline (as `bnconf golden` reads it)
            let mut v: Value =
                serde_json::from_str(&std::fs::read_to_string(cd.join("case.json")).unwrap())
                    .unwrap();
            let names: Vec<String> = v["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect();
            let mut inputs = serde_json::Map::new();
            for n in &names {
                let (_, data) = read_npy_any(&cd.join(format!("{n}.npy")), 1 << 24).unwrap();
                let vals: Vec<Value> = match data {
                    NpyData::F32(v) => v
                        .iter()
                        .map(|&x| json!(format!("{:?}", x as f64)))
                        .collect(),
                    NpyData::F64(v) => v.iter().map(|&x| json!(format!("{x:?}"))).collect(),
                    other => panic!("{other:?}"),
                };
                inputs.insert(n.clone(), Value::Array(vals));
            }
            v["inputs"] = Value::Object(inputs);
            let inline = root.join(format!("{id}.json"));
            std::fs::write(&inline, serde_json::to_string_pretty(&v).unwrap()).unwrap();
            let o = check_case(&inline, &cd.join("out"), &[]);
            assert_eq!(o.status.code(), Some(0), "{id} inline: {}", text(&o));

            // a perturbed output: not conforming
            let mine = root.join(format!("{id}.out"));
            copy_dir(&cd.join("out"), &mine);
            let main_out = if id.contains("_backward.") { "dx" } else { "y" };
            perturb(&mine.join(format!("{main_out}.npy")), 1, 1.01);
            let report = root.join(format!("{id}.report.json"));
            let o = check_case(&inline, &mine, &["--report", s(&report)]);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(1), "{id} perturbed: {t}");
            assert!(t.contains("FAIL"), "{t}");
            let r: Value =
                serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
            assert_eq!(r["family"], json!(family));
            assert_eq!(r["cases"][0]["id"], json!(id));
            assert_eq!(r["cases"][0]["verdict"], json!("fail"));

            // a missing required output: malformed, the file named
            std::fs::remove_file(mine.join(format!("{main_out}.npy"))).unwrap();
            let o = check_case(&inline, &mine, &[]);
            let t = text(&o);
            assert_eq!(o.status.code(), Some(1), "{id} missing: {t}");
            assert!(t.contains("MALFORMED"), "{t}");
            assert!(t.contains(&format!("{main_out}.npy: missing")), "{t}");
        }

        // the optional statistics left out: conforming, reported as not given
        let cd = dir.join(&fwd);
        let mine = root.join(format!("{fwd}.nostats"));
        copy_dir(&cd.join("out"), &mine);
        let mut left_out = vec![];
        for st in ["mean", "rstd"] {
            if std::fs::remove_file(mine.join(format!("{st}.npy"))).is_ok() {
                left_out.push(st);
            }
        }
        assert!(!left_out.is_empty(), "{fwd}");
        let report = root.join(format!("{fwd}.nostats.json"));
        let o = check_case(&cd.join("case.json"), &mine, &["--report", s(&report)]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{fwd} no stats: {t}");
        assert!(t.contains("optional outputs not given (1 cases"), "{t}");
        assert!(
            t.contains(&format!("{fwd}: {}", left_out.join(", "))),
            "{t}"
        );
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(r["cases"][0]["verdict"], json!("pass"));
        assert_eq!(r["cases"][0]["not_given"], json!(left_out));
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// `check --case` of a family case file: a bad case field, a bad input or a bad --outputs is
/// exit 2 naming it, never a panic.
#[test]
fn check_case_bad_input_is_exit_2_naming_the_field() {
    let root = tmpdir("case-bad");
    let dir = root.join("ex");
    export(&dir, "layer_norm", "f32", &["--layouts", "last"]);
    kernel("ln-twopass", &dir);
    let id = "layer_norm.last.f32.gaussian";
    let cd = dir.join(id);
    let out = cd.join("out");
    let base: Value =
        serde_json::from_str(&std::fs::read_to_string(cd.join("case.json")).unwrap()).unwrap();
    let write = |name: &str, v: &Value| {
        let p = cd.join(name);
        std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
        p
    };
    let mut v = base.clone();
    v["dtype"] = json!("f8");
    assert_exit2_naming(&check_case(&write("b1.json", &v), &out, &[]), "dtype");
    let mut v = base.clone();
    v.as_object_mut().unwrap().remove("inputs");
    assert_exit2_naming(&check_case(&write("b2.json", &v), &out, &[]), "inputs");
    let mut v = base.clone();
    v["inputs"] = json!({"x": ["1.0", "2.0"]});
    assert_exit2_naming(&check_case(&write("b3.json", &v), &out, &[]), "inputs.x");
    let mut v = base.clone();
    v["inputs"] = json!(["x", "dy"]);
    assert_exit2_naming(&check_case(&write("b4.json", &v), &out, &[]), "inputs.dy");
    let mut v = base.clone();
    v["shape"] = json!([4, -1]);
    assert_exit2_naming(&check_case(&write("b5.json", &v), &out, &[]), "shape");
    assert_exit2_naming(
        &check_case(&cd.join("case.json"), &root.join("nowhere"), &[]),
        "--outputs",
    );
    assert_exit2_naming(&check_case(&root.join("none.json"), &out, &[]), "none.json");
    let _ = std::fs::remove_dir_all(&root);
}

/// `--html` of a family check: a self-contained page with a row per case (its id, verdict,
/// the optional outputs not given), for `check DIR` (good and known-bad kernels) and for
/// `check --case`.
#[test]
fn html_report_of_a_family_check() {
    let root = tmpdir("html");
    let dir = root.join("ex");
    export(&dir, "layer_norm", "f32", &[]);
    let ids = case_ids(&dir);
    for (k, code) in [("ln-twopass", 0), ("bad-ln-onepass", 1)] {
        kernel(k, &dir);
        let gid = "layer_norm.last.f32.gaussian";
        if code == 0 {
            std::fs::remove_file(dir.join(gid).join("out/mean.npy")).unwrap();
        }
        let html = root.join(format!("{k}.html"));
        let o = bnconf(&["check", s(&dir), "--html", s(&html)]);
        assert_eq!(o.status.code(), Some(code), "{k}: {}", text(&o));
        let h = std::fs::read_to_string(&html).unwrap();
        assert!(h.starts_with("<!DOCTYPE html>"), "{k}");
        assert!(h.trim_end().ends_with("</body></html>"), "{k}");
        assert!(h.contains("family layer_norm"), "{k}");
        assert!(
            h.contains(&format!("<h2>Cases ({})</h2>", ids.len())),
            "{k}"
        );
        for id in &ids {
            assert!(
                h.contains(&format!("<tr><td class='l mono'>{id}</td>")),
                "{k}: no row for {id}"
            );
        }
        assert_eq!(h.matches("<table>").count(), h.matches("</table>").count());
        assert_eq!(h.matches("<tr>").count(), h.matches("</tr>").count());
        if code == 0 {
            assert!(h.contains("conforms"), "{k}");
            assert!(
                h.contains("<td class='l mono'>mean</td></tr>"),
                "{k}: not given"
            );
        } else {
            assert!(h.contains("FAIL"), "{k}");
            assert!(h.contains("Non-conforming cases"), "{k}");
            assert!(h.contains("behaves like"), "{k}");
        }
    }
    // check --case --html
    kernel("ln-twopass", &dir);
    let bid = "layer_norm_backward.last.f32.gaussian";
    let html = root.join("case.html");
    let o = check_case(
        &dir.join(bid).join("case.json"),
        &dir.join(bid).join("out"),
        &["--html", s(&html)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(
        h.contains(&format!("<tr><td class='l mono'>{bid}</td>")),
        "{h}"
    );
    assert!(h.contains("<h2>Cases (1)</h2>"));
    let _ = std::fs::remove_dir_all(&root);
}

/// `--shard K/N` of a family export and check: the shards partition the suite (each in the
/// suite's order), each manifest records its shard, each shard is judged
/// (a good kernel conforms on each); `check DIR --shard K/N` of a whole export judges that
/// shard's cases only; a shard other than the one recorded is exit 2; `check --exec` with
/// `--shard` judges the shard.
#[test]
fn shards_partition_the_family_suite() {
    let root = tmpdir("shard");
    let whole = root.join("whole");
    export(&whole, "all", "f32", &[]);
    let all: Vec<String> = case_ids(&whole);
    let mut union = BTreeSet::new();
    let mut total = 0;
    for k in 1..=3u64 {
        let dir = root.join(format!("s{k}"));
        let sh = format!("{k}/3");
        export(&dir, "all", "f32", &["--shard", &sh]);
        let m = manifest(&dir);
        assert_eq!(m["shard"], json!(sh));
        let ids = case_ids(&dir);
        assert!(!ids.is_empty(), "shard {sh} empty");
        // the shard's cases in the whole suite's order
        let in_order: Vec<&String> = all.iter().filter(|i| ids.contains(i)).collect();
        assert_eq!(in_order.len(), ids.len());
        assert!(in_order.iter().zip(&ids).all(|(a, b)| *a == b), "{sh}");
        total += ids.len();
        union.extend(ids.iter().cloned());
        // each shard judged, by a good kernel of one family (the other families' cases are
        // unsupported by it)
        let (good, fam) = [
            ("ln-twopass", "layer_norm"),
            ("rms-twopass", "rms_norm"),
            ("gn-twopass", "group_norm"),
        ][k as usize - 1];
        kernel(good, &dir);
        let report = dir.join("report.json");
        let o = bnconf(&["check", s(&dir), "--report", s(&report)]);
        let t = text(&o);
        assert!(t.contains(&format!("shard {sh}")), "{t}");
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        let judged: Vec<&str> = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(judged, ids.iter().map(String::as_str).collect::<Vec<_>>());
        let mut passed = 0;
        for c in r["cases"].as_array().unwrap() {
            let id = c["id"].as_str().unwrap();
            if id.starts_with(&format!("{fam}.")) || id.starts_with(&format!("{fam}_backward.")) {
                assert_eq!(c["verdict"], json!("pass"), "{sh} {good} {id}");
                passed += 1;
            } else {
                assert_eq!(c["verdict"], json!("unsupported"), "{sh} {good} {id}");
            }
        }
        assert!(passed > 0, "{sh}: no {fam} case");
        assert_eq!(o.status.code(), Some(0), "{t}");
        // a shard other than the recorded one
        let other = format!("{}/3", k % 3 + 1);
        let o = bnconf(&["check", s(&dir), "--shard", &other]);
        assert_exit2_naming(&o, "--shard");
    }
    assert_eq!(total, all.len(), "the shards overlap");
    assert_eq!(union, all.iter().cloned().collect::<BTreeSet<_>>());

    // check DIR --shard of the whole export judges that shard only
    kernel("ln-twopass", &whole);
    let report = root.join("whole-2.json");
    let o = bnconf(&["check", s(&whole), "--shard", "2/3", "--report", s(&report)]);
    assert!(text(&o).contains("shard 2/3"), "{}", text(&o));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let judged: Vec<String> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(judged, case_ids(&root.join("s2")));

    // check --exec --family --shard
    let o = bnconf(&[
        "check",
        "--family",
        "layer_norm",
        "--shard",
        "1/2",
        "--exec",
        &format!("{BNCONF} kernel ln-twopass"),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("shard 1/2"), "{t}");
    let _ = std::fs::remove_dir_all(&root);
}
