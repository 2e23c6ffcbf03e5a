//! The fuzz targets' bodies (docs/FUZZ.md), here so that the libFuzzer targets in `fuzz/` and
//! the corpus replay of `cargo test` (conformance/tests/fuzz_corpus.rs) run the same code on
//! the same bytes. Each function takes one input, runs it through a parser entry point of
//! the harness, and panics only on a broken invariant (an `Err` is the expected answer to
//! malformed input). Not part of the library's API.

use crate::formats::case::{npy_to_exact, parse_case, Dtype, InputLimits};
use crate::formats::npy::read_npy_bytes;
use crate::judge::check::{CaseResult, Prepared};
use crate::report::expectations;
use crate::suite::{self, Filter, Precision};
use bnconf_spec::exact::parse::{parse_exact_with, parse_rational_with, Limits};
use bnconf_spec::exact::round::FloatFormat;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// A target's body: one input, a panic on a broken invariant.
pub type Target = fn(&[u8]);

/// The targets, by name (the `fuzz/fuzz_targets/<name>.rs` binaries and the
/// `fuzz/corpus/<name>/` folders).
pub const TARGETS: [(&str, Target); 6] = [
    ("case_parser", case_parser),
    ("npy_reader", npy_reader),
    ("exact_parser", exact_parser),
    ("kernel_outputs", kernel_outputs),
    ("suite_manifest", suite_manifest),
    ("expectations", expectations_file),
];

/// Case files: bytes → JSON → `parse_case` (header, inputs, rounding to the dtype, problem
/// validation); small valid cases are then evaluated exactly and written as a golden document.
pub fn case_parser(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut lim = InputLimits {
        max_elems: 1 << 12,
        max_file_bytes: 1 << 20,
        ..InputLimits::default()
    };
    // Keep exact evaluation cheap per execution (the CLI default is 10000).
    lim.number.max_exponent = 1000;
    // `{"npy": path}` inputs resolve against a directory that does not exist.
    let base = Path::new("/nonexistent/bnconf-fuzz");
    if crate::formats::family_case::is_family_case(&v) {
        family_case_file(&v, base, &lim);
        return;
    }
    let Ok(case) = parse_case(&v, base, &lim) else {
        return;
    };
    if case.problem.geom.len() > 64 {
        return;
    }
    if let Ok(g) = crate::formats::golden::compute(case) {
        let doc = crate::formats::golden::golden_json(
            &g,
            &[
                FloatFormat::F64,
                FloatFormat::F32,
                FloatFormat::F16,
                FloatFormat::BF16,
            ],
        );
        serde_json::to_vec(&doc).expect("a golden document serialises");
    }
}

/// A family case file (its `family`, `normalized_ndim`, `groups`, `affine`, `convention`,
/// `optional_outputs` fields): parsed (every field checked, inputs rounded to their dtypes and
/// validated against the op), and for small valid cases the exact goldens (a sum of roots for
/// `dgamma`) rounded to every format and checked against the fast path bit for bit.
fn family_case_file(v: &serde_json::Value, base: &Path, lim: &InputLimits) {
    use crate::formats::family_case::parse_family_case;
    use crate::suite::family::{family_goldens_exact, Golden};
    let Ok(f) = parse_family_case(v, base, lim) else {
        return;
    };
    let case = &f.header.case;
    if case.shape.iter().product::<usize>() > 64 {
        return;
    }
    let eps = bnconf_spec::exact::QSqrt::rational(f.header.eps.clone());
    let Ok(g) = family_goldens_exact(case, &f.inputs, &eps) else {
        return;
    };
    for ff in [
        FloatFormat::F64,
        FloatFormat::F32,
        FloatFormat::F16,
        FloatFormat::BF16,
    ] {
        let fast = crate::fast::family::family_fast_in(case, &f.header.eps, ff, ff);
        for (name, gold) in &g {
            let exact: Vec<f64> = match gold {
                Golden::Q(v) => v
                    .iter()
                    .map(|e| bnconf_spec::exact::round::round(e, ff).to_f64())
                    .collect(),
                Golden::Roots(v) => v.iter().map(|e| e.round(ff).to_f64()).collect(),
            };
            if let Some((out, _)) = &fast {
                let got = &out[name];
                assert!(
                    got.iter()
                        .zip(&exact)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "family fast path differs from the exact one on {name} in {ff:?}"
                );
            }
        }
    }
}

/// npy files: bytes → `read_npy_bytes` (the reader behind `read_npy`) → exact values in f32.
pub fn npy_reader(data: &[u8]) {
    let Ok((shape, d)) = read_npy_bytes(data, 1 << 16) else {
        return;
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .expect("element count checked by the reader");
    assert_eq!(n, d.len(), "shape {shape:?} vs {} elements", d.len());
    let _ = npy_to_exact("x", &d, Dtype::Float(FloatFormat::F32));
}

/// Exact literals: text → `parse_exact_with` / `parse_rational_with`; an accepted value
/// prints and parses back to the same value.
pub fn exact_parser(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let lim = Limits {
        max_len: 4096,
        max_exponent: 2000,
    };
    let unlimited = Limits {
        max_len: usize::MAX,
        max_exponent: i64::MAX,
    };
    if let Ok(v) = parse_exact_with(s, &lim) {
        let t = v.to_string();
        let w = parse_exact_with(&t, &unlimited)
            .unwrap_or_else(|e| panic!("{s:?} printed as {t:?} does not parse back: {e}"));
        assert!(v == w, "{s:?} printed as {t:?} parses back to {w}");
    }
    if let Ok(r) = parse_rational_with(s, &lim) {
        let t = bnconf_spec::exact::fmt_rational(&r);
        let w = parse_rational_with(&t, &unlimited)
            .unwrap_or_else(|e| panic!("{s:?} printed as {t:?} does not parse back: {e}"));
        assert_eq!(r, w, "{s:?} printed as {t:?}");
    }
    // The default entry point must agree with the explicit default limits.
    let _ = bnconf_spec::exact::parse::parse_exact(s);
}

/// The cases a kernel's outputs are read for: one of each op of the default suite, over
/// every dtype (f64, f32, f16, bf16 and a mixed precision), prepared once per process.
pub fn output_cases() -> &'static [Prepared] {
    static CASES: OnceLock<Vec<Prepared>> = OnceLock::new();
    CASES.get_or_init(|| {
        let mut picked = Vec::new();
        let precs = ["f64", "f32", "f16", "bf16", "bf16+f32"];
        for (i, name) in precs.iter().enumerate() {
            let prec = Precision::from_name(name).expect("a precision");
            let s = suite::generate_in("default", &[prec], suite::DEFAULT_SEED, &Filter::default())
                .expect("the default suite");
            let mut seen = Vec::new();
            // The smallest case of each op (some ops for some dtypes only, to stay cheap).
            let mut cases: Vec<_> = s.cases.iter().collect();
            cases.sort_by_key(|c| (c.inputs.values().map(Vec::len).sum::<usize>(), c.id.clone()));
            for c in cases {
                if !seen.contains(&c.op) && (i < 2 || seen.is_empty()) {
                    seen.push(c.op);
                    picked.push(c.clone());
                }
            }
        }
        crate::judge::check::prepare(&picked).expect("suite cases prepare")
    })
}

/// The marker between the files of one [`kernel_outputs`] input.
pub const FILE_SEP: &[u8] = b"\n--bnconf-fuzz-next-file--\n";

/// A scratch directory of this process (one per process: libFuzzer runs one input at a time;
/// removed by nobody, under the system's temporary directory).
fn scratch(name: &str) -> &'static Mutex<PathBuf> {
    static DIRS: OnceLock<Vec<(&'static str, Mutex<PathBuf>)>> = OnceLock::new();
    let dirs = DIRS.get_or_init(|| {
        ["outputs", "manifest"]
            .iter()
            .map(|n| {
                let d =
                    std::env::temp_dir().join(format!("bnconf-fuzz-{n}-{}", std::process::id()));
                (*n, Mutex::new(d))
            })
            .collect()
    });
    &dirs.iter().find(|(n, _)| *n == name).expect("known").1
}

fn split_files(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(FILE_SEP.len()).position(|w| w == FILE_SEP) {
        parts.push(&rest[..i]);
        rest = &rest[i + FILE_SEP.len()..];
    }
    parts.push(rest);
    parts
}

/// A kernel's outputs: `protocol::read_written` and `Prepared::judge_written` on `DIR/<id>/out/`, written from the input.
/// The first byte picks the case ([`output_cases`]); the second says what is written (bit 0:
/// `out/unsupported` with the rest as its text; else the rest, split at [`FILE_SEP`], is the
/// op's outputs in order, one npy file each, a missing part a missing file). The result must
/// be a verdict for that case: malformed outputs are `Malformed`, never a panic, and a judged
/// one has every output.
pub fn kernel_outputs(data: &[u8]) {
    let _ = kernel_outputs_verdict(data);
}

/// [`kernel_outputs`], returning the verdict (`None` for an input of under 2 bytes).
pub fn kernel_outputs_verdict(data: &[u8]) -> Option<CaseResult> {
    let cases = output_cases();
    let (&pick, &mode) = (data.first()?, data.get(1)?);
    let p = &cases[pick as usize % cases.len()];
    let dir = scratch("outputs").lock().unwrap_or_else(|e| e.into_inner());
    let out = dir.join(&p.case.id).join("out");
    let _ = std::fs::remove_dir_all(&*dir);
    std::fs::create_dir_all(&out).expect("scratch directory");
    let rest = &data[2..];
    let unsupported = mode & 1 == 1;
    if unsupported {
        std::fs::write(out.join("unsupported"), rest).expect("scratch file");
    } else {
        for (name, bytes) in p.case.op.outputs().iter().zip(split_files(rest)) {
            std::fs::write(out.join(format!("{name}.npy")), bytes).expect("scratch file");
        }
    }
    let r = p.judge_written(&crate::protocol::read_written(&dir, p));
    let _ = std::fs::remove_dir_all(&*dir);
    check_result(p, &r, unsupported);
    Some(r)
}

/// The exact outputs of a case rounded correctly to their dtypes (a conforming kernel's).
pub fn rounded_goldens(p: &Prepared) -> std::collections::BTreeMap<String, Vec<f64>> {
    use bnconf_spec::exact::round::round;
    p.case
        .op
        .outputs()
        .iter()
        .map(|&name| {
            let f = p.case.dtype_of(name);
            let v = (0..p.output_len(name))
                .map(|i| round(&p.exact_at(name, i), f).to_f64())
                .collect();
            (name.to_string(), v)
        })
        .collect()
}

fn check_result(p: &Prepared, r: &CaseResult, unsupported: bool) {
    use crate::judge::check::Verdict;
    assert_eq!(r.id, p.case.id);
    match &r.verdict {
        Verdict::Unsupported(why) => assert!(unsupported && !why.is_empty()),
        // `out/unsupported` must be UTF-8 text: other bytes make the case malformed.
        Verdict::Malformed(why) => {
            assert!(!why.is_empty());
            assert!(!unsupported || why.contains("out/unsupported"), "{why}");
        }
        Verdict::Pass | Verdict::Fail => {
            assert!(!unsupported);
            assert_eq!(r.outputs.len(), p.case.op.outputs().len());
            assert!(r.worst_ratio.is_nan() || r.worst_ratio >= 0.0);
        }
    }
}

/// A suite directory's `manifest.json`: `protocol::regenerate` on a directory holding only
/// the input as its manifest, then `verify_inputs` (the case files are absent: an error).
/// An accepted manifest names its suite, dtype and filters, and lists exactly the cases
/// regenerated. The `scale` suite (cases of up to 10^6 elements, generated for seconds by
/// design) is not regenerated here.
pub fn suite_manifest(data: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if v.get("suite").and_then(|s| s.as_str()) == Some("scale") {
            return;
        }
    }
    let dir = scratch("manifest")
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let _ = std::fs::remove_dir_all(&*dir);
    std::fs::create_dir_all(&*dir).expect("scratch directory");
    std::fs::write(dir.join("manifest.json"), data).expect("scratch file");
    if let Ok((s, _prec, _filter)) = crate::protocol::regenerate(&dir) {
        let m: serde_json::Value = serde_json::from_slice(data).expect("accepted, so JSON");
        let listed = m["cases"].as_array().expect("accepted, so listed").len();
        assert_eq!(listed, s.cases.len());
        if !s.cases.is_empty() {
            assert!(crate::protocol::verify_inputs(&dir, &s).is_err());
        }
    }
    let _ = std::fs::remove_dir_all(&*dir);
}

/// An expectations file: `expectations::parse`, then the gate over results of every verdict
/// for the [`output_cases`] (each case id failing, malformed, unsupported and passing in turn);
/// the gate's counts add up, and the expectations written for a run parse back to its
/// failures.
pub fn expectations_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(exp) = expectations::parse(text, "fuzz.json") else {
        return;
    };
    assert!(exp.entries.iter().all(|e| !e.case.trim().is_empty()));
    let cases = output_cases();
    let results: Vec<CaseResult> = cases
        .iter()
        .enumerate()
        .map(|(i, p)| match i % 3 {
            0 => p.malformed("fuzz"),
            1 => p.unsupported("fuzz"),
            _ => p.judge(&rounded_goldens(p)),
        })
        .collect();
    for require_all in [false, true] {
        let g = expectations::gate(&exp, &results, require_all);
        let failing = results
            .iter()
            .filter(|r| expectations::is_failure(r, require_all))
            .count();
        assert_eq!(g.expected.len() + g.new_failures.len(), failing);
        assert!(g.stale.len() + g.unmatched.len() <= exp.entries.len());
        let _ = (g.human(), g.to_json());
        let doc = expectations::document(&results, require_all, &[]);
        let back = expectations::parse(&doc.to_string(), "written").expect("written parses");
        assert_eq!(back.entries.len(), failing);
        assert!(expectations::gate(&back, &results, require_all).ok());
    }
}

/// The seed inputs of a target (how `fuzz/corpus/<target>/seed-*` were written; see
/// docs/FUZZ.md): valid inputs of each kind, from which the fuzzers mutate.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    match target {
        "kernel_outputs" => {
            for (i, p) in output_cases().iter().enumerate() {
                let good = rounded_goldens(p);
                let mut files = Vec::new();
                for &name in p.case.op.outputs() {
                    files.push(npy_bytes(p, name, &good[name]));
                }
                let mut data = vec![i as u8, 0];
                data.extend(files.join(FILE_SEP));
                out.push((format!("seed-{}", p.case.id), data));
            }
            out.push(("seed-unsupported".into(), b"\x00\x01not here".to_vec()));
        }
        "suite_manifest" => {
            let mk = |name: &str,
                      prec: &str,
                      ops: &[bnconf_spec::Op],
                      layouts: &[bnconf_spec::Layout],
                      shard: Option<&str>| {
                let prec = Precision::from_name(prec).expect("precision");
                let filter = Filter {
                    ops: ops.to_vec(),
                    layouts: layouts.to_vec(),
                };
                let mut s =
                    suite::generate_in(name, &[prec], suite::DEFAULT_SEED, &filter).expect("suite");
                if let Some(k) = shard {
                    let sh: crate::suite::shard::Shard = k.parse().expect("shard");
                    sh.apply(&mut s);
                }
                let mut m = suite::manifest_json_in(&s, prec, &filter);
                if let Some(k) = shard {
                    m["shard"] = serde_json::json!(k);
                }
                serde_json::to_vec_pretty(&m).expect("json")
            };
            use bnconf_spec::{Layout, Op};
            out.push((
                "seed-default-f32-forward-rows".into(),
                mk("default", "f32", &[Op::Forward], &[Layout::Rows], None),
            ));
            out.push((
                "seed-extreme-f64-rows".into(),
                mk("extreme", "f64", &[], &[Layout::Rows], None),
            ));
            out.push((
                "seed-default-bf16+f32-shard".into(),
                mk("default", "bf16+f32", &[Op::SyncStats], &[], Some("2/3")),
            ));
            out.push((
                "seed-default-f16-running".into(),
                mk(
                    "default",
                    "f16",
                    &[Op::RunningUpdate],
                    &[Layout::Nchw],
                    None,
                ),
            ));
        }
        "expectations" => {
            let cases = output_cases();
            let results: Vec<CaseResult> = cases.iter().map(|p| p.malformed("seed")).collect();
            let doc = expectations::document(&results, false, &[]);
            out.push((
                "seed-document".into(),
                serde_json::to_vec_pretty(&doc).expect("json"),
            ));
            let globs = serde_json::json!({"format": expectations::FORMAT, "expected_failures": [
                {"case": "forward.*.f32.*", "reason": "globs"}, {"case": "*?*", "reason": null},
                {"case": "sync_stats.rows.f64.c?", "reason": ""}]});
            out.push((
                "seed-globs".into(),
                serde_json::to_vec(&globs).expect("json"),
            ));
        }
        _ => {}
    }
    out
}

/// An output of case `p` as the bytes of an npy file in its dtype's protocol encoding.
fn npy_bytes(p: &Prepared, name: &str, v: &[f64]) -> Vec<u8> {
    let dir = scratch("outputs").lock().unwrap_or_else(|e| e.into_inner());
    std::fs::create_dir_all(&*dir).expect("scratch directory");
    let path = dir.join("seed.npy");
    let data = crate::protocol::npy_of(p.case.dtype_of(name), v);
    let shape: Vec<usize> = if bnconf_spec::Op::extent(name) == bnconf_spec::op::Extent::Cells {
        p.case.shape.clone()
    } else {
        vec![v.len()]
    };
    crate::formats::npy::write_npy(&path, &shape, &data).expect("scratch npy");
    let b = std::fs::read(&path).expect("scratch npy");
    let _ = std::fs::remove_dir_all(&*dir);
    b
}
