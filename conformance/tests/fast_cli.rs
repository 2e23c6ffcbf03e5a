//! `bnconf golden CASE --out-dir DIR` with npy inputs: the fast path writes the same files,
//! byte for byte, as the per-element exact path (`--exact-path`), for 1 and 2 threads; its
//! errors are the exact path's.

mod common;

use bnconf::formats::npy::{read_npy, write_npy, NpyData};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    common::scratch("fast-cli", name)
}

fn golden(case: &Path, dir: &Path, extra: &[&str]) -> (bool, String) {
    let out = common::command()
        .arg("golden")
        .arg(case)
        .arg("--out-dir")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn data(n: usize, seed: u64, scale: f64, offset: f64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            offset + scale * (((s >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
        })
        .collect()
}

/// Write a case with npy cell inputs and JSON per-channel inputs; return its path.
fn case(
    dir: &Path,
    op: &str,
    layout: &str,
    shape: &[usize],
    c: usize,
    dtype: &str,
    npy_f64: bool,
) -> PathBuf {
    let len: usize = shape.iter().product();
    let cells = |name: &str, v: Vec<f64>| {
        let d = if npy_f64 {
            NpyData::F64(v)
        } else {
            NpyData::F32(v.iter().map(|&e| e as f32).collect())
        };
        write_npy(&dir.join(format!("{name}.npy")), shape, &d).unwrap();
        serde_json::json!({"npy": format!("{name}.npy")})
    };
    let mut inputs = serde_json::Map::new();
    for name in match op {
        "forward" => vec!["x", "gamma", "beta"],
        "backward" => vec!["x", "dy", "gamma"],
        _ => vec!["x", "dy", "gamma", "mean", "m2", "mean_dy", "mean_dy_xhat"],
    } {
        let v = match name {
            "x" => cells("x", data(len, 1, 0.01, 1000.0)),
            "dy" => cells("dy", data(len, 2, 2.0, 0.0)),
            "gamma" => serde_json::json!(data(c, 3, 1.0, 1.0)),
            "beta" => serde_json::json!(["0x1.8p+1", "-2.25", "1e-3"][..c.min(3)]
                .iter()
                .cycle()
                .take(c)
                .collect::<Vec<_>>()),
            "mean" => serde_json::json!(vec![1000.0; c]),
            "m2" => serde_json::json!(vec![1000000.5; c]),
            "mean_dy" => serde_json::json!(vec![0.125; c]),
            _ => serde_json::json!(vec!["1/3"; c]),
        };
        inputs.insert(name.to_string(), v);
    }
    let doc = serde_json::json!({
        "format": "bnconf-case/1", "id": format!("{op}-{layout}"), "op": op, "layout": layout,
        "shape": shape, "dtype": dtype, "eps": "1e-5", "level": "core", "inputs": inputs,
    });
    let p = dir.join("case.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    p
}

#[test]
fn npy_round_trip_matches_exact_path() {
    for (i, (op, layout, shape, c, dtype, f64npy)) in [
        ("forward", "nchw", vec![2, 3, 4, 5], 3, "f32", false),
        ("backward", "nchw", vec![2, 3, 4, 5], 3, "f32", false),
        ("backward", "nhwc", vec![2, 4, 5, 3], 3, "f64", true),
        ("forward", "rows", vec![2, 30], 2, "f32", true), // f64 npy rounded to f32
        ("sync_backward", "chw", vec![2, 5, 4], 2, "f64", false),
    ]
    .into_iter()
    .enumerate()
    {
        let d = tmp(&format!("rt{i}"));
        let p = case(&d, op, layout, &shape, c, dtype, f64npy);
        let (ok, err) = golden(&p, &d.join("exact"), &["--exact-path"]);
        assert!(ok, "{err}");
        let want = files(&d.join("exact"));
        for threads in ["1", "2"] {
            let out = d.join(format!("fast{threads}"));
            let (ok, err) = golden(&p, &out, &["--threads", threads]);
            assert!(ok, "{err}");
            assert_eq!(files(&out), want, "{op} {layout} threads {threads}");
        }
        // The outputs read back with the right shape.
        let (s, _) = read_npy(
            &d.join("exact").join(format!(
                "{}.f32.npy",
                if op == "forward" { "y" } else { "dx" }
            )),
            1 << 20,
        )
        .unwrap();
        assert_eq!(s, shape);
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn npy_errors_match_exact_path() {
    let d = tmp("err");
    let p = case(&d, "forward", "nchw", &[1, 2, 2, 2], 2, "f32", false);
    // A NaN in x.
    let mut x = vec![1.0f32; 8];
    x[5] = f32::NAN;
    write_npy(&d.join("x.npy"), &[1, 2, 2, 2], &NpyData::F32(x)).unwrap();
    let (ok1, e1) = golden(&p, &d.join("a"), &[]);
    let (ok2, e2) = golden(&p, &d.join("b"), &["--exact-path"]);
    assert!(!ok1 && !ok2);
    assert_eq!(e1, e2);
    assert!(e1.contains("inputs.x[5]"), "{e1}");
    // A constant channel with eps = 0 (C1).
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"1e-5\"", "\"0\"");
    std::fs::write(&p, text).unwrap();
    write_npy(&d.join("x.npy"), &[1, 2, 2, 2], &NpyData::F32(vec![2.0; 8])).unwrap();
    let (ok1, e1) = golden(&p, &d.join("c"), &[]);
    let (ok2, e2) = golden(&p, &d.join("d"), &["--exact-path"]);
    assert!(!ok1 && !ok2);
    assert_eq!(e1, e2);
    // Wrong shape.
    write_npy(&d.join("x.npy"), &[2, 2, 2], &NpyData::F32(vec![2.0; 8])).unwrap();
    let (ok1, e1) = golden(&p, &d.join("e"), &[]);
    let (ok2, e2) = golden(&p, &d.join("f"), &["--exact-path"]);
    assert!(!ok1 && !ok2);
    assert_eq!(e1, e2);
    assert!(!d.join("a").join("golden.json").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// `bnconf golden CASE -o FILE` (JSON: exact strings and f64/f32/f16/bf16 hex of every
/// element) takes the fast path and writes the exact path's bytes, with 1 and 2 threads.
#[test]
fn json_golden_matches_exact_path() {
    for (i, (op, layout, shape, c, dtype, f64npy)) in [
        ("forward", "nchw", vec![4, 3, 8, 8], 3, "f32", false),
        ("backward", "nhwc", vec![2, 8, 8, 3], 3, "f64", true),
        ("sync_backward", "chw", vec![2, 5, 4], 2, "f64", false),
    ]
    .into_iter()
    .enumerate()
    {
        let d = tmp(&format!("json{i}"));
        let p = case(&d, op, layout, &shape, c, dtype, f64npy);
        let run = |out: &str, extra: &[&str]| {
            let o = common::command()
                .arg("golden")
                .arg(&p)
                .arg("-o")
                .arg(d.join(out))
                .args(extra)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            std::fs::read(d.join(out)).unwrap()
        };
        let want = run("exact.json", &["--exact-path"]);
        for t in ["1", "2"] {
            assert!(
                run(&format!("fast{t}.json"), &["--threads", t]) == want,
                "{op} {layout}: fast JSON differs from the exact path's ({t} threads)"
            );
        }
        let doc: serde_json::Value = serde_json::from_slice(&want).unwrap();
        let cell = if op == "forward" { "y" } else { "dx" };
        for f in ["exact", "f64", "f32", "f16", "bf16"] {
            assert_eq!(
                doc["outputs"][cell][f].as_array().unwrap().len(),
                shape.iter().product::<usize>(),
                "{op}: {f}"
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// The JSON fast path equals the exact path on every committed f32/f64 vector case of the
/// ops it covers (as documents, with the f16 and bf16 arrays).
#[test]
fn json_fast_path_on_the_committed_vectors() {
    use bnconf::formats::case::{read_case_file, InputLimits};
    use bnconf::formats::golden;
    use bnconf_spec::exact::round::FloatFormat;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors/default");
    let d = tmp("json-vectors");
    let fmts = [
        FloatFormat::F64,
        FloatFormat::F32,
        FloatFormat::F16,
        FloatFormat::BF16,
    ];
    let lim = InputLimits::default();
    let mut n = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let parts: Vec<&str> = name.split('.').collect();
        let covered = [
            "forward",
            "backward",
            "eval",
            "sync_forward",
            "sync_backward",
        ];
        if !covered.contains(&parts[0]) || !["f32", "f64"].contains(&parts[2]) {
            continue;
        }
        let g: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(&name)).unwrap()).unwrap();
        let p = d.join("case.json");
        std::fs::write(&p, g["case"].to_string()).unwrap();
        let fast = bnconf::fast::golden_json_fast(&p, &lim, &fmts, &Default::default())
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: the fast path does not apply"));
        let exact = golden::golden_json(
            &golden::compute(read_case_file(&p, &lim).unwrap()).unwrap(),
            &fmts,
        );
        assert!(fast == exact, "{name}: fast JSON differs");
        n += 1;
    }
    assert!(n > 700, "{n} cases");
    let _ = std::fs::remove_dir_all(&d);
}
