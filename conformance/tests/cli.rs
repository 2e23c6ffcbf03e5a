//! The CLI end to end: `bnconf run`, `kernel --list`, and the kernel directory protocol
//! (`export`, `kernel NAME DIR`, `check DIR`, `check --exec`) with its exit codes. The `run`
//! table is also an insta snapshot (`tests/snapshots/cli__run_table.snap`).

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{bnconf, text};

fn tmpdir(name: &str) -> PathBuf {
    common::scratch("cli", name)
}

#[test]
fn run_accepts_good_and_rejects_known_bad_kernels() {
    let o = bnconf(&["run"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| {
            l.contains("  ok: ") || l.contains("UNEXPECTED") || l.contains("  not held here: ")
        })
        .collect();
    let good = rows.iter().filter(|l| l.contains(" good ")).count();
    let bad = rows.iter().filter(|l| l.contains(" known-bad ")).count();
    assert!(
        good >= 6 && bad >= 3,
        "need ≥6 good and ≥3 known-bad kernels in the table:\n{t}"
    );
    assert!(rows.iter().all(|l| !l.contains("UNEXPECTED")), "{t}");
    // Only the block-merge controls and the f16-count Welford (m > 2048) wait for the scale
    // suite.
    let not_held: Vec<&&str> = rows
        .iter()
        .filter(|l| l.contains("not held here"))
        .collect();
    assert!(
        not_held
            .iter()
            .all(|l| l.starts_with("bad-block-") || l.starts_with("bad-welford-f16-count"))
            && not_held.len() == 3,
        "{t}"
    );
    // the table has one row per kernel of `kernel --list`
    let list = bnconf(&["kernel", "--list"]);
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    for n in &names {
        assert!(
            rows.iter().any(|l| l.starts_with(n.as_str())),
            "kernel {n} missing from the run table:\n{t}"
        );
    }
    // the table itself, as users read it (deterministic for the seed, whatever the thread
    // count); a changed cell, row or wording shows in review as a diff of the snapshot
    insta::with_settings!({description => "bnconf run (stdout)"}, {
        insta::assert_snapshot!("run_table", String::from_utf8_lossy(&o.stdout));
    });
}

#[test]
fn kernel_list_format() {
    let o = bnconf(&["kernel", "--list"]);
    assert_eq!(o.status.code(), Some(0));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.lines().count() >= 9);
    for l in s.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 3, "NAME<TAB>good|known-bad<TAB>description: {l:?}");
        assert!(f[1] == "good" || f[1] == "known-bad", "{l:?}");
        assert!(!f[2].is_empty());
    }
}

fn export(dir: &Path, dtype: &str, ops: &str) {
    let o = bnconf(&[
        "export",
        "--suite",
        "default",
        "--dtype",
        dtype,
        "--ops",
        ops,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

fn check(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["check", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    bnconf(&args)
}

fn case_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("case.json").is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn protocol_good_kernel_conforms_and_reports_are_written() {
    let d = tmpdir("good");
    export(&d, "f32", "forward,eval");
    let man: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(man["format"], "bnconf-suite/1");
    let dirs = case_dirs(&d);
    assert_eq!(man["cases"].as_array().unwrap().len(), dirs.len());
    // case.json carries what FORMAT.md promises
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[0].join("case.json")).unwrap()).unwrap();
    for k in [
        "op",
        "layout",
        "shape",
        "dtype",
        "eps",
        "eps_exact",
        "inputs",
        "outputs",
    ] {
        assert!(c.get(k).is_some(), "case.json lacks {k}: {c}");
    }
    assert!(c["eps"].is_number());
    let o = bnconf(&["kernel", "twopass-f64", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rep = d.join("r.json");
    let junit = d.join("j.xml");
    let o = check(
        &d,
        &[
            "--report",
            rep.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["summary"]["not_conforming"], 0);
    assert_eq!(
        r["summary"]["conforming"].as_u64().unwrap() as usize,
        dirs.len()
    );
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.contains("<testsuites") && x.contains("testcase"), "{x}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn protocol_known_bad_missing_malformed_and_unsupported() {
    let d = tmpdir("bad");
    export(&d, "f64", "forward");
    let o = bnconf(&["kernel", "bad-eps-outside-sqrt", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let o = check(&d, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a known-bad kernel must be rejected:\n{}",
        text(&o)
    );
    assert!(text(&o).contains("ratio"), "{}", text(&o));

    // a good kernel, then break one case's output in different ways
    let o = bnconf(&["kernel", "twopass-native", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(check(&d, &[]).status.code(), Some(0));
    let dirs = case_dirs(&d);
    let victim = &dirs[0];
    let id = victim.file_name().unwrap().to_string_lossy().to_string();
    let y = victim.join("out/y.npy");
    let saved = std::fs::read(&y).unwrap();
    std::fs::remove_file(&y).unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!("{id}/out/y.npy: missing")),
        "{}",
        text(&o)
    );
    std::fs::write(&y, &saved[..saved.len() - 3]).unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!("{id}/out/y.npy")),
        "{}",
        text(&o)
    );
    // unsupported: listed, not failing, unless --require-all
    std::fs::remove_file(&y).unwrap();
    for f in ["mean.npy", "var.npy"] {
        std::fs::remove_file(victim.join("out").join(f)).unwrap();
    }
    std::fs::write(victim.join("out/unsupported"), "no forward here").unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("1 unsupported"), "{}", text(&o));
    assert_eq!(check(&d, &["--require-all"]).status.code(), Some(1));
    // all unsupported: no supported case → not conforming
    for c in &dirs {
        let out = c.join("out");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("unsupported"), "").unwrap();
    }
    assert_eq!(check(&d, &[]).status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kernel_errors_are_reported_with_their_message() {
    // FORMAT.md, "Added in bnconf 0.3: kernel errors": `out/error` holds the kernel's message;
    // the case does not conform and every report says "kernel error: <message>", never
    // "missing". It wins over `out/unsupported` and over outputs beside it.
    let d = tmpdir("kernel-error");
    export(&d, "f32", "forward");
    assert_eq!(
        bnconf(&["kernel", "twopass-native", d.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let dirs = case_dirs(&d);
    let (victim, other) = (&dirs[0], &dirs[1]);
    let id = victim.file_name().unwrap().to_string_lossy().to_string();
    for f in ["y.npy", "mean.npy"] {
        std::fs::remove_file(victim.join("out").join(f)).unwrap();
    }
    let msg = "ZeroDivisionError: float division by zero";
    std::fs::write(victim.join("out/error"), format!("{msg}\n")).unwrap();
    // outputs and an error: the error counts (the kernel said it failed)
    std::fs::write(other.join("out/error"), "RuntimeError: boom").unwrap();
    std::fs::write(other.join("out/unsupported"), "not this one").unwrap();
    let json = d.join("report.json");
    let o = check(&d, &["--report", json.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("{id} ")) && t.contains(&format!("kernel error: {msg}")),
        "{t}"
    );
    assert!(t.contains("kernel error: RuntimeError: boom"), "{t}");
    assert!(!t.contains("missing"), "{t}");
    assert!(t.contains("0 unsupported"), "{t}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rec = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id.as_str())
        .unwrap();
    assert_eq!(
        rec["reason"],
        format!("kernel error: {msg}").as_str(),
        "{rec}"
    );
    assert_ne!(rec["verdict"], "pass");
    // an empty error file still fails, and one that is not a regular file is named
    std::fs::write(victim.join("out/error"), "").unwrap();
    assert!(text(&check(&d, &[])).contains("kernel error: the kernel failed (out/error is empty)"));
    std::fs::remove_file(victim.join("out/error")).unwrap();
    std::fs::create_dir(victim.join("out/error")).unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!("{id}/out/error")),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&d);

    // a replicated case: a rank's `out/error`
    let d = tmpdir("kernel-error-rank");
    let o = bnconf(&[
        "export",
        "--suite",
        "replicated",
        "--dtype",
        "f64",
        "--ops",
        "forward",
        "--layouts",
        "nchw",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        bnconf(&["kernel", "replicated-chan", d.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(check(&d, &[]).status.code(), Some(0));
    let victim = &case_dirs(&d)[0];
    std::fs::write(victim.join("rank1/out/error"), "rank 1: out of memory").unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("kernel error: rank 1: out of memory"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn check_exec_and_harness_errors() {
    let me = common::BNCONF;
    let o = bnconf(&[
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "backward",
        "--layouts",
        "nchw,nhwc",
        "--exec",
        &format!("{me} kernel welford-native"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bnconf(&[
        "check",
        "--suite",
        "default",
        "--dtype",
        "f64",
        "--ops",
        "backward",
        "--exec",
        &format!("{me} kernel bad-backward-missing-term"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // harness errors: exit 2
    for args in [
        vec!["check", "--suite", "nope", "--exec", "true"],
        vec!["check", "/nonexistent-dir"],
        vec!["check", "--dtype", "f80", "--exec", "true"],
    ] {
        let o = bnconf(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("panicked"));
    }
    // an edited manifest is refused
    let d = tmpdir("manifest");
    export(&d, "f32", "eval");
    let m = d.join("manifest.json");
    let s = std::fs::read_to_string(&m)
        .unwrap()
        .replace("\"seed\": ", "\"seed\": 1");
    std::fs::write(&m, s).unwrap();
    let o = check(&d, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("differs from suite"), "{}", text(&o));
    // so is an edited input file (a kernel must not change what it is judged on)
    let d2 = tmpdir("inputs");
    export(&d2, "f32", "eval");
    let victim = case_dirs(&d2)[0].join("x.npy");
    let mut bytes = std::fs::read(&victim).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let o = check(&d2, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("/x.npy: differs from suite"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

/// A reader that closes stdout before bnconf writes (`bnconf kernel --list | head` with a
/// slow bnconf) ends it quietly with 128 + SIGPIPE, not a panic and its backtrace.
#[test]
fn closed_stdout_ends_quietly() {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) fills two fresh descriptors; the read end is closed at once and the
    // write end handed to the child (owned, closed here when `Stdio` drops).
    let w = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        std::os::fd::OwnedFd::from_raw_fd(fds[1])
    };
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../findings/jax-standardize-fast-variance/case.json");
    for args in [
        vec!["kernel", "--list"],
        vec!["golden", case.to_str().unwrap()],
    ] {
        let o = common::command()
            .args(&args)
            .stdout(std::process::Stdio::from(w.try_clone().unwrap()))
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(141), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "{args:?}: {err}"
        );
    }
}
