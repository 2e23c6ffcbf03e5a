//! Corpus replay (docs/FUZZ.md): every committed corpus file under `fuzz/corpus/<target>/`
//! and every crash, timeout or slow-unit file under `fuzz/artifacts/` goes through the same
//! entry point as its libFuzzer target (`bnconf::fuzzing`), so a regression on any input the
//! fuzzers found interesting fails `cargo test` on a clean clone, without nightly or
//! cargo-fuzz. Work per input is bounded by construction, not by the clock: every input is at
//! most the fuzzers' `-max_len` (checked here), and the targets cap what they evaluate
//! (element counts, exponents, suite sizes; see each target).

use bnconf::fuzzing::{self, TARGETS};
use std::path::{Path, PathBuf};

/// The fuzzers' `-max_len` (docs/FUZZ.md).
const MAX_LEN: usize = 8192;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn replay(target: &str, run: fn(&[u8]), files: &[PathBuf]) {
    for p in files {
        let data = std::fs::read(p).unwrap();
        assert!(
            data.len() <= MAX_LEN,
            "{}: {} bytes, more than -max_len={MAX_LEN}",
            p.display(),
            data.len()
        );
        let r = std::panic::catch_unwind(|| run(&data));
        assert!(r.is_ok(), "{target}: {} panicked", p.display());
    }
}

#[test]
fn every_target_has_a_committed_corpus() {
    for (name, _) in TARGETS {
        let n = files_in(&fuzz_dir().join("corpus").join(name)).len();
        assert!(n > 0, "fuzz/corpus/{name}/ is empty or missing");
        let bin = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let src = std::fs::read_to_string(&bin).unwrap_or_default();
        assert!(
            src.contains("bnconf::fuzzing::"),
            "{}: the target must call bnconf::fuzzing (the replayed code)",
            bin.display()
        );
    }
}

/// Crash, timeout, slow-unit and OOM files: `fuzz/artifacts/<target>/…` (cargo-fuzz) or
/// `fuzz/artifacts/<target>-…` (libFuzzer's `-artifact_prefix`).
fn artifacts(target: &str) -> Vec<PathBuf> {
    let root = fuzz_dir().join("artifacts");
    let mut out = files_in(&root.join(target));
    out.extend(files_in(&root).into_iter().filter(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{target}-")))
    }));
    out
}

macro_rules! replay_tests {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            let target = stringify!($name);
            let run = TARGETS.iter().find(|(n, _)| *n == target).expect("a target").1;
            replay(target, run, &files_in(&fuzz_dir().join("corpus").join(target)));
            replay(target, run, &artifacts(target));
        }
    )*};
}

replay_tests!(
    case_parser,
    npy_reader,
    exact_parser,
    kernel_outputs,
    suite_manifest,
    expectations
);

/// The targets are not vacuous: their seeds are accepted inputs (a correctly rounded
/// output conforms, a manifest regenerates, an expectations file parses), and a damaged one
/// is refused.
#[test]
fn seeds_are_accepted_and_damage_is_refused() {
    use bnconf::judge::check::Verdict;
    let seeds = fuzzing::seeds("kernel_outputs");
    assert!(seeds.len() >= 8, "{} seeds", seeds.len());
    for (name, data) in &seeds {
        let r = fuzzing::kernel_outputs_verdict(data).expect("a verdict");
        if name == "seed-unsupported" {
            assert!(
                matches!(r.verdict, Verdict::Unsupported(_)),
                "{name}: {:?}",
                r.verdict
            );
            continue;
        }
        assert_eq!(r.verdict, Verdict::Pass, "{name}");
        let cut = &data[..data.len() - 1];
        let r = fuzzing::kernel_outputs_verdict(cut).expect("a verdict");
        assert!(
            matches!(r.verdict, Verdict::Malformed(_)),
            "{name} truncated: {:?}",
            r.verdict
        );
    }
    for (name, data) in fuzzing::seeds("suite_manifest") {
        let dir = std::env::temp_dir().join(format!("bnconf-seed-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), &data).unwrap();
        let got = bnconf::protocol::regenerate(&dir);
        let mut edited: serde_json::Value = serde_json::from_slice(&data).unwrap();
        edited["cases"].as_array_mut().unwrap().pop();
        std::fs::write(dir.join("manifest.json"), edited.to_string()).unwrap();
        let bad = bnconf::protocol::regenerate(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let (s, _, _) = got.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!s.cases.is_empty(), "{name}");
        assert!(bad.is_err(), "{name}: a case list missing a case accepted");
        fuzzing::suite_manifest(&data);
    }
    for (name, data) in fuzzing::seeds("expectations") {
        let text = std::str::from_utf8(&data).unwrap();
        let e = bnconf::report::expectations::parse(text, &name).unwrap();
        assert!(!e.entries.is_empty(), "{name}");
        assert!(bnconf::report::expectations::parse(&text[1..], &name).is_err());
        fuzzing::expectations_file(&data);
    }
}

/// Writes the seeds into `fuzz/corpus/<target>/` (run by hand when a seed's format changes:
/// `BNCONF_WRITE_FUZZ_SEEDS=1 cargo test -p bnconf --test fuzz_corpus write_seeds -- --ignored`).
#[test]
#[ignore]
fn write_seeds() {
    if std::env::var_os("BNCONF_WRITE_FUZZ_SEEDS").is_none() {
        return;
    }
    for target in ["kernel_outputs", "suite_manifest", "expectations"] {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in fuzzing::seeds(target) {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}
