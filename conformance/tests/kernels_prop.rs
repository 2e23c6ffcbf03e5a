//! Property-based conformance of the float kernels of crate `kernels` (docs/DESIGN.md §3).
//!
//! Strategies build the shape first (op, layout, dtype f32/f64, C in 1..=4, m in 1..=24 cells
//! per channel split into N, H, W as the layout allows) and then adversarial data for it
//! (`prop_flat_map`): the data classes of docs/DESIGN.md §3, and handed-in statistics near or far
//! from the batch's (eval) or all-reduced over a larger batch of which the case is one shard
//! (sync ops), computed exactly and then rounded. Cases ill-posed in their dtype are left out
//! exactly (`suite::ill_posed`).
//!
//! Properties:
//! - `good_kernels_conform`: every good kernel passes every generated core/conditioning case;
//!   on range-level cases only the range-robust kernels (`twopass-f64`, `welford-f64` in f32)
//!   are held to it (where every exact output is zero or normal in the dtype). Every kernel,
//!   good or bad, must run every case without panicking and produce well-formed outputs.
//! - `known_bad_kernels_are_rejected`: for each known-bad kernel, a deterministic search
//!   (fixed seed, up to `BAD_SEARCH_CASES` cases of its defective ops) must find a case the
//!   checker rejects while every good kernel passes it; the case is shrunk and printed.
//! - `regression_vectors`: every `vectors/regressions/*.json` (bnconf-case/1 plus `level` and
//!   `expect_reject`) is passed by every good kernel and failed by the kernels it names.
//!
//! A failure prints the shrunk case (`CaseResult::detail` and the case JSON); with
//! `BNCONF_SAVE_REGRESSION=vectors/regressions` (relative to the workspace root, or absolute)
//! the shrunk case is written there. `PROPTEST_CASES` raises the number of cases (default
//! 256), `BNCONF_PROP_SEED` changes the seed. See docs/REGRESSIONS.md.

use bnconf::formats::case::{read_case_file, Dtype as CaseDtype, InputLimits};
use bnconf::formats::golden;
use bnconf::judge::check::{self, CaseResult, Prepared, Verdict};
use bnconf::suite::{ill_posed, Level, SuiteCase};
use bnconf::testing::strategy::suite_cases;
use bnconf_impl::{all_kernels, Expected, Kernel};
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::{Op, QSqrt};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Kernels that stay accurate when squares or sums overflow or underflow f32 (they compute
/// in f64): the only ones held to the *range* level, and only in f32.
const RANGE_ROBUST_F32: [&str; 2] = ["twopass-f64", "welford-f64"];

/// Cases tried per known-bad kernel before the search gives up (and the test fails).
const BAD_SEARCH_CASES: u32 = 300;

/// Default seed of every search (`BNCONF_PROP_SEED` overrides it).
const DEFAULT_SEED: u64 = 20_261_129;

/// Shrinking steps of each known-bad search (`BNCONF_SHRINK_ITERS` overrides it; the committed
/// regression vectors were shrunk with more).
const BAD_SHRINK_ITERS: u32 = 60;

fn bad_shrink_iters() -> u32 {
    std::env::var("BNCONF_SHRINK_ITERS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(BAD_SHRINK_ITERS)
}

// Strategies: `bnconf::testing::strategy::suite_cases` (the library's, shared with users).

fn round_q(v: &QSqrt, f: FloatFormat) -> f64 {
    round(v, f).to_f64()
}

// ------------------------------------------------------------------------------ helpers

fn seed() -> u64 {
    std::env::var("BNCONF_PROP_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// A deterministic runner: ChaCha seeded from `seed()` and a label, no failure persistence
/// (the seed is fixed; shrunk failures become regression vectors instead).
fn runner(cases: u32, label: &str, max_shrink_iters: u32) -> TestRunner {
    let cfg = Config {
        cases,
        failure_persistence: None,
        max_global_rejects: 8 * cases + 1024,
        max_shrink_iters,
        ..Config::default() // PROPTEST_* environment variables
    };
    let mut h = seed() ^ 0xCBF2_9CE4_8422_2325;
    for b in label.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        // SplitMix64
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    TestRunner::new_with_rng(cfg, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn regressions_dir() -> PathBuf {
    workspace_root().join("vectors").join("regressions")
}

/// Where to save shrunk failures (`BNCONF_SAVE_REGRESSION`), if anywhere.
fn save_dir() -> Option<PathBuf> {
    let d = std::env::var("BNCONF_SAVE_REGRESSION").ok()?;
    if d.trim().is_empty() {
        return None;
    }
    let p = PathBuf::from(d.trim());
    Some(if p.is_absolute() {
        p
    } else {
        workspace_root().join(p)
    })
}

/// The bnconf-case/1 JSON of a case (exact hex inputs), with `level`, `class`, `target`,
/// `expect_reject` and a note.
fn regression_json(case: &SuiteCase, expect_reject: &[&str], note: &str) -> Value {
    let mut v = golden::case_json(&case.to_case());
    let o = v.as_object_mut().expect("object");
    let inputs = o.remove("inputs").expect("inputs");
    o.insert("expect_reject".into(), json!(expect_reject));
    o.insert("note".into(), json!(note));
    o.insert("inputs".into(), inputs);
    v
}

fn file_stem(s: &str) -> String {
    s.chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '.' || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// Write a regression vector into `dir` as `<stem>.json`; returns the path.
fn save_regression(dir: &Path, stem: &str, doc: &Value) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create regression dir");
    let path = dir.join(format!("{}.json", file_stem(stem)));
    let text = serde_json::to_string_pretty(doc).expect("json");
    std::fs::write(&path, format!("{text}\n")).expect("write regression vector");
    path
}

fn prepare_one(case: &SuiteCase) -> Result<Prepared, TestCaseError> {
    check::prepare(std::slice::from_ref(case))
        .map(|mut v| v.remove(0))
        .map_err(|e| TestCaseError::fail(format!("exact reference failed on {}: {e}", case.id)))
}

fn judge(k: &dyn Kernel, p: &Prepared) -> CaseResult {
    match k.run(&p.case.to_kernel_case()) {
        Ok(out) => p.judge(&out),
        Err(bnconf_impl::Unsupported(why)) => p.unsupported(&why),
    }
}

/// Whether the good kernel `k` is held to conform on `case`.
fn held(k: &dyn Kernel, case: &SuiteCase) -> bool {
    k.expected() == Expected::Good
        && (case.level != Level::Range
            || (case.dtype == FloatFormat::F32 && RANGE_ROBUST_F32.contains(&k.name())))
}

/// Whether every exact output is zero or normal (and finite) in the case dtype; the budget
/// makes no allowance for underflow or overflow of the result itself.
fn outputs_in_range(p: &Prepared) -> bool {
    let min_normal = match p.case.dtype {
        FloatFormat::F64 => f64::MIN_POSITIVE,
        _ => f32::MIN_POSITIVE as f64,
    };
    p.golden.values().flatten().all(|v| {
        let r = round_q(v, p.case.dtype);
        let a = check::approx(v).abs();
        r.is_finite() && (v.is_zero() || a >= min_normal)
    })
}

fn failure_report(k: &dyn Kernel, r: &CaseResult, case: &SuiteCase) -> String {
    let doc = regression_json(
        case,
        &[],
        &format!("good kernel {} fails (found by kernels_prop)", k.name()),
    );
    format!(
        "good kernel `{}` does not conform:\n{}\n\ncase (bnconf-case/1):\n{}",
        k.name(),
        r.detail(case),
        serde_json::to_string_pretty(&doc).expect("json")
    )
}

#[derive(Default, Debug)]
struct Counts {
    cases: usize,
    ill_posed: usize,
    by_level: BTreeMap<&'static str, usize>,
    by_op: BTreeMap<&'static str, usize>,
    by_class: BTreeMap<String, usize>,
    range_checked: usize,
    range_skipped: usize,
    judged: usize,
    bad_rejected: BTreeMap<&'static str, usize>,
    worst_good: BTreeMap<&'static str, f64>,
}

// ------------------------------------------------------------------------------ properties

/// (a) Every good kernel passes every generated core/conditioning case; the range-robust
/// kernels pass range-level f32 cases; no kernel panics or returns malformed outputs.
#[test]
fn good_kernels_conform() {
    let start = std::time::Instant::now();
    let ks = all_kernels();
    for name in RANGE_ROBUST_F32 {
        assert!(
            ks.iter().any(|k| k.name() == name),
            "range-robust kernel {name} missing from all_kernels()"
        );
    }
    let cases = Config::default().cases;
    let counts = RefCell::new(Counts::default());
    let mut run = runner(cases, "good", 2000);
    let strategy = suite_cases(Op::ALL.to_vec(), true);
    let result = run.run(&strategy, |case| {
        if let Some(why) = ill_posed(&case) {
            counts.borrow_mut().ill_posed += 1;
            return Err(TestCaseError::reject(why));
        }
        let p = prepare_one(&case)?;
        let check_range = case.level != Level::Range || outputs_in_range(&p);
        let mut c = counts.borrow_mut();
        c.cases += 1;
        *c.by_level.entry(case.level.name()).or_default() += 1;
        *c.by_op.entry(case.op.name()).or_default() += 1;
        *c.by_class.entry(case.class.clone()).or_default() += 1;
        if case.level == Level::Range && case.dtype == FloatFormat::F32 {
            if check_range {
                c.range_checked += 1;
            } else {
                c.range_skipped += 1;
            }
        }
        for k in &ks {
            let r = judge(k.as_ref(), &p);
            c.judged += 1;
            if let Verdict::Malformed(_) | Verdict::Unsupported(_) = r.verdict {
                return Err(TestCaseError::fail(format!(
                    "kernel `{}` gave no usable output:\n{}",
                    k.name(),
                    r.detail(&case)
                )));
            }
            if k.expected() == Expected::KnownBad {
                if r.verdict == Verdict::Fail {
                    *c.bad_rejected.entry(k.name()).or_default() += 1;
                }
                continue;
            }
            if !held(k.as_ref(), &case) || !check_range {
                continue;
            }
            let w = c.worst_good.entry(k.name()).or_default();
            *w = w.max(r.worst_ratio);
            if r.verdict != Verdict::Pass {
                return Err(TestCaseError::fail(failure_report(k.as_ref(), &r, &case)));
            }
        }
        Ok(())
    });
    let c = counts.into_inner();
    eprintln!(
        "good_kernels_conform: {} cases judged ({} ill-posed rejected), {} kernel runs, {:.1} s",
        c.cases,
        c.ill_posed,
        c.judged,
        start.elapsed().as_secs_f64()
    );
    eprintln!("  by level: {:?}", c.by_level);
    eprintln!("  by op: {:?}", c.by_op);
    eprintln!("  by class: {:?}", c.by_class);
    eprintln!(
        "  range-level f32 cases checked on {:?}: {} (skipped, outputs subnormal/overflow: {})",
        RANGE_ROBUST_F32, c.range_checked, c.range_skipped
    );
    eprintln!(
        "  worst ratio of good kernels where held: {:?}",
        c.worst_good
    );
    eprintln!(
        "  known-bad kernels rejected on (cases): {:?}",
        c.bad_rejected
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => {
            let mut msg = format!("shrunk failing case {}:\n{why}\n", case.id);
            if let Some(dir) = save_dir() {
                let doc = regression_json(&case, &[], "good-kernel failure found by kernels_prop");
                let path = save_regression(&dir, &format!("fail-{}", case.id), &doc);
                msg += &format!(
                    "\nsaved as {}\n  exact outputs: bnconf golden {}\n",
                    path.display(),
                    path.display()
                );
            } else {
                msg += "\nsave the case JSON above as vectors/regressions/<name>.json (or rerun \
                        with BNCONF_SAVE_REGRESSION=vectors/regressions) and get its exact \
                        outputs with: bnconf golden vectors/regressions/<name>.json\n";
            }
            panic!("{msg}");
        }
        Err(TestError::Abort(why)) => panic!("search aborted: {why}"),
    }
}

/// (b) Every known-bad kernel is rejected on some generated case of its defective ops that
/// every good kernel passes; the shrunk case is printed (and saved with
/// `BNCONF_SAVE_REGRESSION`).
#[test]
fn known_bad_kernels_are_rejected() {
    let start = std::time::Instant::now();
    let ks = all_kernels();
    let goods: Vec<&dyn Kernel> = ks
        .iter()
        .filter(|k| k.expected() == Expected::Good)
        .map(|k| k.as_ref())
        .collect();
    let mut missed = Vec::new();
    let mut found = Vec::new();
    // Block-merge defects need channels of more than one block (1024 cells): generated
    // cases are far smaller, so those kernels are held to the scale suite (tests/scale.rs).
    for bad in ks
        .iter()
        .filter(|k| k.expected() == Expected::KnownBad && k.defect_suite() == "default")
    {
        let ops: Vec<Op> = bad
            .defective_ops()
            .iter()
            .map(|o| Op::from_name(o.name()).expect("same op names"))
            .collect();
        assert!(!ops.is_empty(), "{} has no defective ops", bad.name());
        let tried = RefCell::new(0usize);
        let mut run = runner(BAD_SEARCH_CASES, bad.name(), bad_shrink_iters());
        let result = run.run(&suite_cases(ops, false), |case| {
            if let Some(why) = ill_posed(&case) {
                return Err(TestCaseError::reject(why));
            }
            *tried.borrow_mut() += 1;
            let p = prepare_one(&case)?;
            let r = judge(bad.as_ref(), &p);
            if r.verdict != Verdict::Fail {
                return Ok(());
            }
            // A witness only if every good kernel passes it (a good kernel's failure is
            // property (a)'s business).
            if goods.iter().any(|g| judge(*g, &p).verdict != Verdict::Pass) {
                return Ok(());
            }
            Err(TestCaseError::fail(format!(
                "worst ratio {:.3e} (k = {:.1})",
                r.worst_ratio, r.k
            )))
        });
        match result {
            Ok(()) => missed.push(format!(
                "{}: no rejecting case among {} cases of {:?}",
                bad.name(),
                tried.into_inner(),
                bad.defective_ops()
            )),
            Err(TestError::Abort(why)) => missed.push(format!("{}: aborted: {why}", bad.name())),
            Err(TestError::Fail(why, case)) => {
                let p = prepare_one(&case).expect("prepared before");
                let r = judge(bad.as_ref(), &p);
                let note = format!(
                    "minimal case rejecting known-bad kernel {} (kernels_prop search, seed {}): {}",
                    bad.name(),
                    seed(),
                    why
                );
                let doc = regression_json(&case, &[bad.name()], &note);
                eprintln!(
                    "{}: rejected after {} cases; shrunk to {} shape {:?} eps {}: {why}\n{}",
                    bad.name(),
                    tried.borrow(),
                    case.id,
                    case.shape,
                    case.eps,
                    r.detail(&case)
                );
                if let Some(dir) = save_dir() {
                    let path = save_regression(&dir, bad.name(), &doc);
                    eprintln!("  saved as {}", path.display());
                }
                found.push(format!(
                    "{}: {} {:?} ratio {:.3e}",
                    bad.name(),
                    case.id,
                    case.shape,
                    r.worst_ratio
                ));
            }
        }
    }
    eprintln!(
        "known_bad_kernels_are_rejected ({:.1} s):\n  {}",
        start.elapsed().as_secs_f64(),
        found.join("\n  ")
    );
    assert!(
        missed.is_empty(),
        "known-bad kernels no generated case rejects:\n  {}",
        missed.join("\n  ")
    );
}

/// (3) Every regression vector: good kernels pass, the kernels in `expect_reject` fail.
#[test]
fn regression_vectors() {
    let dir = regressions_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("no {}; nothing to check", dir.display());
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let ks = all_kernels();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut rejected_by: BTreeMap<String, usize> = BTreeMap::new();
    for path in &files {
        let case = match read_case_file(path, &InputLimits::default()) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let CaseDtype::Float(dtype) = case.dtype else {
            problems.push(format!("{}: dtype must be a float format", path.display()));
            continue;
        };
        let level = match case.extra.get("level").and_then(Value::as_str) {
            Some(l) => match Level::from_name(l) {
                Some(l) => l,
                None => {
                    problems.push(format!("{}: unknown level {l:?}", path.display()));
                    continue;
                }
            },
            None => {
                problems.push(format!("{}: missing \"level\"", path.display()));
                continue;
            }
        };
        let expect_reject: Vec<String> = match case.extra.get("expect_reject") {
            None => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect(),
            Some(_) => {
                problems.push(format!(
                    "{}: expect_reject must be an array of kernel names",
                    path.display()
                ));
                continue;
            }
        };
        for name in &expect_reject {
            if !ks.iter().any(|k| k.name() == name) {
                problems.push(format!("{}: unknown kernel {name:?}", path.display()));
            }
        }
        let p = &case.problem;
        let sc = SuiteCase {
            id: case.id.clone(),
            level,
            class: case
                .extra
                .get("class")
                .and_then(Value::as_str)
                .unwrap_or("regression")
                .to_string(),
            target: String::new(),
            dtype,
            param_dtype: dtype,
            op: p.op,
            layout: p.geom.layout,
            shape: p.geom.shape.clone(),
            eps: case.eps_text.clone(),
            momentum: case.momentum_text.clone(),
            convention: p.params.convention,
            inputs: p
                .inputs
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.iter().map(|x| round_q(x, FloatFormat::F64)).collect(),
                    )
                })
                .collect(),
            shard_sizes: vec![],
        };
        if let Some(why) = ill_posed(&sc) {
            problems.push(format!("{}: ill-posed in its dtype: {why}", path.display()));
            continue;
        }
        let prep = match prepare_one(&sc) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        checked += 1;
        for k in &ks {
            let expect_fail = expect_reject.iter().any(|n| n == k.name());
            if !expect_fail && !held(k.as_ref(), &sc) {
                continue;
            }
            let r = judge(k.as_ref(), &prep);
            if expect_fail {
                if r.verdict == Verdict::Fail {
                    *rejected_by.entry(k.name().to_string()).or_default() += 1;
                } else {
                    problems.push(format!(
                        "{}: kernel {} should be rejected but is {} (worst ratio {:.3e}, k = {:.1})",
                        path.display(),
                        k.name(),
                        r.verdict.name(),
                        r.worst_ratio,
                        r.k
                    ));
                }
            } else if r.verdict != Verdict::Pass {
                problems.push(format!(
                    "{}: good kernel {} does not conform:\n{}",
                    path.display(),
                    k.name(),
                    r.detail(&sc)
                ));
            }
        }
    }
    let uncovered: Vec<&str> = ks
        .iter()
        .filter(|k| {
            k.expected() == Expected::KnownBad
                && k.defect_suite() == "default"
                && !rejected_by.contains_key(k.name())
        })
        .map(|k| k.name())
        .collect();
    eprintln!(
        "regression_vectors: {checked} of {} files checked in {}; rejections expected and seen: {rejected_by:?}",
        files.len(),
        dir.display()
    );
    if !uncovered.is_empty() {
        eprintln!("  note: known-bad kernels without a regression vector: {uncovered:?}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
