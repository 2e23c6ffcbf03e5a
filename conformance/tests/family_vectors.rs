//! The normalization family's committed vector set (`vectors/family/`, written by
//! `bnconf vectors --family all`): byte-identical to a fresh generation, verified by
//! recomputation (an edited value is caught even with its checksum refreshed), verified with
//! `bnconf verify vectors`, and refused cleanly for other `--family` names. Run in release.

use bnconf::protocol::family_vectors::{check_family_golden, generate, verify};
use bnconf::suite::vectors::{parse_precisions, sha256_hex, DEFAULT_PRECISIONS, FAMILY};
use std::path::{Path, PathBuf};
use std::process::Command;

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vectors")
        .join(FAMILY)
}

fn bnconf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bnconf"))
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn the_committed_family_set_is_a_fresh_generation() {
    let names: Vec<String> = DEFAULT_PRECISIONS.iter().map(|s| s.to_string()).collect();
    let files = generate(20261129, &parse_precisions(&names).unwrap()).unwrap();
    assert!(files.len() > 400, "{} files", files.len());
    for f in &files {
        let path = committed().join(&f.path);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            bytes == f.bytes,
            "{} differs from a fresh `bnconf vectors --family all --out vectors`",
            f.path
        );
    }
    // every op, every precision, dgamma as sums of roots
    let manifest = String::from_utf8(files.last().unwrap().bytes.clone()).unwrap();
    for op in ["layer_norm_backward", "rms_norm.", "group_norm_backward"] {
        assert!(manifest.contains(op), "{op}");
    }
    for p in DEFAULT_PRECISIONS {
        assert!(manifest.contains(&format!(".{p}.")), "{p}");
    }
    let many = std::fs::read_to_string(
        committed().join("layer_norm/layer_norm_backward.last.f64.many-rows.json"),
    )
    .unwrap();
    assert!(
        many.matches("sqrt(").count() > 1000,
        "dgamma sums many roots"
    );
}

#[test]
fn the_committed_family_set_verifies_and_an_edit_is_caught() {
    let rep = verify(&committed(), "").unwrap();
    assert!(
        rep.ok(),
        "{:?}",
        &rep.mismatches[..rep.mismatches.len().min(5)]
    );
    assert!(rep.cases > 400);
    // an output value edited, its checksum irrelevant: recomputation catches it
    let path = committed().join("rms_norm/rms_norm.last.f32.gaussian.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let v = &mut doc["outputs"]["y"]["f32"][0];
    let was = v.as_str().unwrap().to_string();
    *v = serde_json::json!(if was == "0x1p+0" { "0x1p+1" } else { "0x1p+0" });
    let edited = serde_json::to_vec_pretty(&doc).unwrap();
    let found = check_family_golden(&edited, &path);
    assert!(
        found.iter().any(|m| m.starts_with("outputs.y.f32[0]")),
        "{found:?}"
    );
    assert!(check_family_golden(text.as_bytes(), &path).is_empty());
    // an unlisted file and a changed file through the CLI: exit 1, both named
    let dir = std::env::temp_dir().join(format!("bnconf-family-vectors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("rms_norm")).unwrap();
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(committed().join("manifest.json")).unwrap()).unwrap();
    // a small copy: the manifest cut to one file
    let keep = "rms_norm/rms_norm.last.f32.gaussian.json";
    let entry = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == keep)
        .unwrap()
        .clone();
    let mut small = m.clone();
    small["files"] = serde_json::json!([entry]);
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&small).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join(keep), &edited).unwrap();
    std::fs::write(dir.join("rms_norm/extra.json"), b"{}").unwrap();
    let o = bnconf(&["verify", dir.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("extra.json") && out.contains("outputs.y.f32[0]"),
        "{out}"
    );
    assert!(out.contains(&sha256_hex(&edited)), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verify_vectors_takes_the_family_set_and_bad_family_names_exit_2() {
    let root = committed().parent().unwrap().to_path_buf();
    let o = bnconf(&["verify", root.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let o = bnconf(&[
        "vectors",
        "--family",
        "layer_norm",
        "--out",
        "/nonexistent/x",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--family"));
    assert!(!Path::new("/nonexistent/x").exists());
}
