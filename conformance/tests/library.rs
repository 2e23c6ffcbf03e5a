//! The library API of docs/FORMAT.md ("Library use"): `bnconf::testing::{check_kernel,
//! KernelCase, Report}`, proptest strategies and `quickcheck::Arbitrary` for `KernelCase`,
//! used as a downstream crate would. Our own kernels stand in for a user's: a correct kernel
//! conforms, each known-bad one is rejected, on whole suites and on generated cases.
//!
//! `PROPTEST_CASES` / `QUICKCHECK_TESTS` raise the number of generated cases (defaults 256 and
//! 200).

mod common;

use bnconf::testing::{
    cases, check_case, check_kernel, check_kernel_with, check_outputs, conforms, reference_kernel,
    strategy_for, KernelCase, Options, Outputs,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use quickcheck::{QuickCheck, TestResult};

fn quickcheck_tests() -> u64 {
    std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// A deterministic proptest runner (fixed ChaCha seed; no failure persistence: failures print
/// the case).
fn runner(cases: u32, seed: u8) -> TestRunner {
    let cfg = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(cfg, TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]))
}

#[test]
fn a_correct_kernel_conforms_on_the_default_suite_and_a_defective_one_is_rejected() {
    for dtype in ["f32", "float64"] {
        let good = check_kernel("default", dtype, reference_kernel("twopass-native"));
        assert!(good.ok(), "{good}");
        assert_eq!(good.not_conforming(), 0);
        assert_eq!(good.unsupported(), 0);
        assert!(good.conforming() > 400, "{good}");
        assert!(good.worst_ratio() < 13.2, "{good}");
        assert!(good.failures().is_empty());

        let bad = check_kernel("default", dtype, reference_kernel("bad-unbiased-var"));
        assert!(!bad.ok(), "bad-unbiased-var conforms in {dtype}");
        let failures = bad.failures();
        assert!(failures.len() > 100, "{bad}");
        // Worst first, by ratio relative to its k.
        for w in failures.windows(2) {
            assert!(w[0].worst_ratio / w[0].k >= w[1].worst_ratio / w[1].k);
        }
        // The report names the worst case with its detail.
        let text = bad.to_string();
        assert!(text.contains(&failures[0].id), "{text}");
        assert!(text.contains("do not"), "{text}");
    }
}

#[test]
fn every_known_bad_kernel_is_rejected_somewhere_through_the_library() {
    for k in bnconf_impl::all_kernels() {
        if k.expected() != bnconf_impl::Expected::KnownBad {
            continue;
        }
        let ops: Vec<&str> = k.defective_ops().iter().map(|o| o.name()).collect();
        let r = check_kernel_with(
            &Options::new(k.defect_suite(), "f64").ops(&ops),
            reference_kernel(k.name()),
        );
        assert!(!r.ok(), "{} conforms on {ops:?}:\n{r}", k.name());
    }
}

#[test]
fn unsupported_and_bad_names_are_not_ok_and_say_why() {
    let none = check_kernel_with(&Options::new("default", "f32").ops(&["eval"]), |_| None);
    assert!(!none.ok());
    assert_eq!(none.unsupported(), none.results().len());
    assert!(none.to_string().contains("no case was supported"), "{none}");

    let r = check_kernel("no-such-suite", "f32", reference_kernel("twopass-f64"));
    assert!(!r.ok());
    assert!(r.error_message().unwrap().contains("suite"), "{r}");
    let r = check_kernel("default", "f80", reference_kernel("twopass-f64"));
    assert!(!r.ok());
    assert!(r.error_message().unwrap().contains("dtype"), "{r}");
    let r = check_kernel_with(
        &Options::new("default", "f32").ops(&["forwrd"]),
        reference_kernel("twopass-f64"),
    );
    assert!(r.error_message().unwrap().contains("ops"), "{r}");
}

#[test]
fn a_missing_or_short_output_is_not_conforming() {
    let case = cases(
        &Options::new("default", "f32")
            .ops(&["forward"])
            .layouts(&["nchw"]),
    )
    .unwrap()
    .remove(0);
    let mut out = reference_kernel("twopass-f64")(&case).unwrap();
    assert!(check_outputs(&case, &out).ok());
    out.get_mut("y").unwrap().pop();
    let r = check_outputs(&case, &out);
    assert!(!r.ok());
    assert!(r.to_string().contains("values, expected"), "{r}");
    out.remove("y");
    let r = check_outputs(&case, &out);
    assert!(!r.ok());
    assert!(r.to_string().contains("`y` missing"), "{r}");
}

#[test]
fn outputs_are_rounded_to_the_case_dtype_before_judging() {
    // An f32 case judged on outputs computed (and returned) in f64: rounded as an f32 npy
    // file would be, they conform.
    let opts = Options::new("default", "f32").ops(&["forward", "backward"]);
    let f64_kernel = reference_kernel("twopass-f64");
    let widened = |c: &KernelCase| {
        let mut c64 = c.clone();
        c64.dtype = "f64".into();
        f64_kernel(&c64)
    };
    let r = check_kernel_with(&opts, widened);
    assert!(r.ok(), "{r}");
}

#[test]
fn kernel_cases_are_the_exported_suite_and_validate_their_fields() {
    let all = cases(&Options::new("default", "f32")).unwrap();
    assert!(all.len() > 400);
    let ops: std::collections::BTreeSet<&str> = all.iter().map(|c| c.op.as_str()).collect();
    assert_eq!(ops.len(), 7, "{ops:?}");
    let c = all.iter().find(|c| c.op == "running_update").unwrap();
    assert!(c.momentum.is_some() && c.convention.is_some());
    assert_eq!(c.momentum(), c.momentum);
    let c = all
        .iter()
        .find(|c| c.op == "forward" && c.layout == "nhwc")
        .unwrap();
    assert_eq!(c.momentum, None);
    assert_eq!(c.outputs(), ["y", "mean", "var"]);
    assert_eq!(c.channels(), *c.shape.last().unwrap());
    let cells = c.channel_cells(1);
    assert_eq!(cells.len(), c.cells_per_channel());
    assert!(cells.iter().all(|&i| i % c.channels() == 1));

    // Validation names the field.
    let mut bad = c.clone();
    bad.inputs.get_mut("x").unwrap()[0] = 0.1; // not an f32 value
    let e = bad.to_suite_case().unwrap_err().to_string();
    assert!(e.contains("inputs.x[0]"), "{e}");
    let r = check_case(&bad, reference_kernel("twopass-f64"));
    assert!(!r.ok() && r.to_string().contains("inputs.x[0]"), "{r}");
    let mut bad = c.clone();
    bad.op = "fwd".into();
    assert!(bad.to_suite_case().unwrap_err().to_string().contains("op"));
    let mut bad = c.clone();
    bad.inputs.get_mut("gamma").unwrap().pop();
    assert!(bad.to_suite_case().is_err());
    let mut bad = c.clone();
    bad.eps_exact = "1e-x".into();
    assert!(bad.to_suite_case().unwrap_err().to_string().contains("eps"));
    // An empty eps_exact takes the f64 eps exactly.
    let mut ok = c.clone();
    ok.eps_exact.clear();
    let sc = ok.to_suite_case().unwrap();
    assert_eq!(sc.eps.parse::<f64>().unwrap(), c.eps);
}

#[test]
fn proptest_a_correct_kernel_conforms_on_generated_cases() {
    let mut run = runner(proptest_cases(), 7);
    let good = reference_kernel("twopass-f64");
    let ops = std::cell::RefCell::new(std::collections::BTreeMap::new());
    let result = run.run(&any::<KernelCase>(), |case| {
        *ops.borrow_mut().entry(case.op.clone()).or_insert(0) += 1;
        let r = check_case(&case, &good);
        prop_assert!(r.ok(), "{}", r);
        Ok(())
    });
    result.unwrap();
    // Every op was generated.
    let ops = ops.into_inner();
    assert_eq!(ops.len(), 7, "{ops:?}");
}

#[test]
fn proptest_finds_and_shrinks_a_defect() {
    // bad-onepass-var (E[x²] − E[x]²) fails on some generated forward case; proptest shrinks
    // it, and the shrunk case still fails.
    let mut run = runner(300, 11);
    let bad = reference_kernel("bad-onepass-var");
    let result = run.run(&strategy_for(&["forward"], false), |case| {
        conforms(&case, &bad).map_err(TestCaseError::fail)
    });
    match result {
        Err(proptest::test_runner::TestError::Fail(why, case)) => {
            assert!(why.message().contains("do not"), "{why}");
            assert!(!check_case(&case, &bad).ok());
            assert!(check_case(&case, reference_kernel("twopass-f64")).ok());
        }
        other => panic!("bad-onepass-var was not rejected on 300 generated cases: {other:?}"),
    }
}

fn good_prop(case: KernelCase) -> TestResult {
    let r = check_case(&case, reference_kernel("welford-native"));
    if r.ok() {
        TestResult::passed()
    } else {
        TestResult::error(r.to_string())
    }
}

fn bad_prop(case: KernelCase) -> bool {
    case.op != "backward" || check_case(&case, reference_kernel("bad-backward-missing-term")).ok()
}

#[test]
fn quickcheck_a_correct_kernel_conforms_and_a_defective_one_is_found() {
    QuickCheck::new()
        .tests(quickcheck_tests())
        .max_tests(20 * quickcheck_tests())
        .quickcheck(good_prop as fn(KernelCase) -> TestResult);

    // The defect is found, and quickcheck's shrinking (dropping channels) keeps a failing case.
    let found = QuickCheck::new()
        .tests(2000)
        .max_tests(4000)
        .quicktest(bad_prop as fn(KernelCase) -> bool);
    let failing = match found {
        Err(r) => r,
        Ok(n) => panic!("bad-backward-missing-term passed {n} generated cases"),
    };
    assert!(failing.is_failure(), "{failing:?}");
}

#[test]
fn quickcheck_shrinks_by_dropping_channels_and_keeps_cases_valid() {
    use quickcheck::Arbitrary;
    let mut g = quickcheck::Gen::new(10);
    let mut shrunk_any = false;
    for _ in 0..60 {
        let case = <KernelCase as Arbitrary>::arbitrary(&mut g);
        assert!(case.to_suite_case().is_ok(), "{case:?}");
        for s in case.shrink() {
            shrunk_any = true;
            assert_eq!(s.channels() + 1, case.channels());
            assert_eq!(s.cells_per_channel(), case.cells_per_channel());
            s.to_suite_case()
                .unwrap_or_else(|e| panic!("shrunk case invalid: {e}\n{s:?}"));
            // The exact reference agrees channel by channel: the good kernel still conforms.
            assert!(check_case(&s, reference_kernel("twopass-f64")).ok());
        }
    }
    assert!(shrunk_any);
}

#[test]
fn a_kernel_need_not_be_sync() {
    // Kernels run on the caller's thread, in order: a RefCell counter is fine.
    let calls = std::cell::RefCell::new(0usize);
    let k = |c: &KernelCase| -> Option<Outputs> {
        *calls.borrow_mut() += 1;
        reference_kernel("twopass-f64")(c)
    };
    let r = check_kernel_with(&Options::new("default", "f64").ops(&["eval"]), k);
    assert!(r.ok(), "{r}");
    assert_eq!(*calls.borrow(), r.results().len());
}

#[test]
fn one_version_everywhere() {
    // The workspace version is what the CLI, golden provenance, suite manifests and the public
    // contract (docs/FORMAT.md) say; the Python package takes it from Cargo (maturin).
    let v = env!("CARGO_PKG_VERSION");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains(&format!("version = \"{v}\"")),
        "workspace Cargo.toml"
    );
    let out = common::bnconf(&["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("bnconf {v}")
    );
    let format = std::fs::read_to_string(root.join("docs/FORMAT.md")).unwrap();
    assert!(
        format.contains(&format!("**bnconf {v}**")),
        "docs/FORMAT.md names {v}"
    );
    let minor: Vec<&str> = v.split('.').take(2).collect();
    let minor = minor.join(".");
    assert!(
        format.contains(&format!("bnconf {minor}:")),
        "docs/FORMAT.md has a section for bnconf {minor}"
    );
    // No section claims a version newer than this one.
    for line in format.lines().filter(|l| l.starts_with("## ")) {
        if let Some(rest) = line.split("bnconf 0.").nth(1) {
            let n: u32 = rest
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
                .parse()
                .unwrap();
            let ours: u32 = v.split('.').nth(1).unwrap().parse().unwrap();
            assert!(n <= ours, "docs/FORMAT.md: {line:?} is newer than {v}");
        }
    }
    let py = std::fs::read_to_string(root.join("python/pyproject.toml")).unwrap();
    assert!(
        py.contains("dynamic = [\"version\"]"),
        "the Python package takes Cargo's version"
    );
    let golden = bnconf::formats::golden::provenance();
    assert_eq!(golden["version"], v);
    let vectors = std::fs::read_to_string(root.join("vectors/manifest.json")).unwrap();
    assert!(
        vectors.contains(&format!("\"version\": \"{v}\"")),
        "vectors/manifest.json"
    );
}
