//! Determinism: the files `bnconf` writes are identical, byte for byte, across two runs and
//! across `RAYON_NUM_THREADS=1` and `2` — for `golden` (JSON and `--out-dir`, both the fast
//! npy path and the per-element exact path), `export` (every file of the suite directory),
//! and `check --exec ... --report --junit`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    common::scratch("determinism", name)
}

/// Every file under `dir`, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Run `bnconf ARGS` with `RAYON_NUM_THREADS=threads`; panics unless the exit status is one
/// of `ok`.
fn bnconf(threads: usize, args: &[&str], ok: &[i32]) {
    let out = common::bnconf_env(args, &[("RAYON_NUM_THREADS", threads.to_string())]);
    assert!(
        out.status.code().is_some_and(|c| ok.contains(&c)),
        "bnconf {args:?} exited with {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `produce(dir)` three times (1 thread, 1 thread again, 2 threads) into fresh
/// directories and require identical trees.
fn same_everywhere(name: &str, produce: impl Fn(usize, &Path)) {
    let runs: Vec<(usize, BTreeMap<String, Vec<u8>>)> = [1, 1, 2]
        .iter()
        .enumerate()
        .map(|(i, &threads)| {
            let d = scratch(&format!("{name}-{i}"));
            produce(threads, &d);
            let t = tree(&d);
            let _ = std::fs::remove_dir_all(&d);
            (threads, t)
        })
        .collect();
    assert!(!runs[0].1.is_empty(), "{name}: nothing written");
    for (threads, t) in &runs[1..] {
        assert_eq!(
            runs[0].1.keys().collect::<Vec<_>>(),
            t.keys().collect::<Vec<_>>(),
            "{name}: file names differ ({threads} threads)"
        );
        for (k, v) in &runs[0].1 {
            assert!(
                &t[k] == v,
                "{name}: {k} differs between runs (1 vs {threads} threads)"
            );
        }
    }
}

/// A forward case on nchw `[2, 3, 4, 5]` in `dtype`, values given inline.
fn write_case(dir: &Path, dtype: &str) -> PathBuf {
    let n = 2 * 3 * 4 * 5;
    let x: Vec<String> = (0..n)
        .map(|i| format!("{}", ((i * 37 + 11) % 23) as f64 / 7.0 - 1.5))
        .collect();
    let case = serde_json::json!({
        "format": "bnconf-case/1", "id": "det", "op": "forward", "layout": "nchw",
        "shape": [2, 3, 4, 5], "dtype": dtype, "eps": "1e-5",
        "inputs": {"x": x, "gamma": ["1", "0.5", "-2"], "beta": ["0", "1/3", "0x1p-3"]}
    });
    let p = dir.join(format!("case-{dtype}.json"));
    std::fs::write(&p, serde_json::to_vec(&case).unwrap()).unwrap();
    p
}

#[test]
fn golden_json_is_deterministic() {
    let src = scratch("golden-json-src");
    for dtype in ["f32", "f64", "exact"] {
        let case = write_case(&src, dtype);
        same_everywhere(&format!("golden-json-{dtype}"), |t, d| {
            let out = d.join("g.json");
            bnconf(
                t,
                &[
                    "golden",
                    case.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ],
                &[0],
            );
        });
    }
}

#[test]
fn golden_out_dir_is_deterministic() {
    let src = scratch("golden-dir-src");
    for dtype in ["f32", "f64", "exact"] {
        let case = write_case(&src, dtype);
        for extra in [&[][..], &["--exact-path"][..]] {
            same_everywhere(&format!("golden-dir-{dtype}-{}", extra.len()), |t, d| {
                let mut args = vec![
                    "golden",
                    case.to_str().unwrap(),
                    "--out-dir",
                    d.to_str().unwrap(),
                ];
                args.extend_from_slice(extra);
                bnconf(t, &args, &[0]);
            });
        }
    }
}

#[test]
fn export_is_deterministic() {
    for dtype in ["f32", "f64"] {
        same_everywhere(&format!("export-{dtype}"), |t, d| {
            let out = d.join("suite");
            bnconf(
                t,
                &[
                    "export",
                    "--suite",
                    "default",
                    "--dtype",
                    dtype,
                    "--ops",
                    "forward,sync_backward",
                    "--layouts",
                    "rows,nhwc",
                    "--out",
                    out.to_str().unwrap(),
                ],
                &[0],
            );
        });
    }
}

#[test]
fn check_reports_are_deterministic() {
    let exec = format!("{} kernel twopass-f64", common::BNCONF);
    same_everywhere("check", |t, d| {
        let (r, j) = (d.join("r.json"), d.join("j.xml"));
        bnconf(
            t,
            &[
                "check",
                "--exec",
                &exec,
                "--ops",
                "forward,eval",
                "--report",
                r.to_str().unwrap(),
                "--junit",
                j.to_str().unwrap(),
            ],
            &[0, 1],
        );
    });
}
