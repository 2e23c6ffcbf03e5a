//! Helpers shared by the tests that run the `bnconf` binary (each test file uses some): the
//! one way to run it (plain, with environment variables, under a watchdog, or as a
//! [`command`] to configure further), its output as text, and scratch directories.
#![allow(dead_code)]

pub mod family_export;
pub mod onnx;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BNCONF: &str = env!("CARGO_BIN_EXE_bnconf");

/// A `bnconf` command, for a test that sets more than string arguments (path arguments,
/// stdio) before running it.
pub fn command() -> Command {
    Command::new(BNCONF)
}

/// Run `bnconf ARGS`.
pub fn bnconf(args: &[&str]) -> Output {
    Command::new(BNCONF)
        .args(args)
        .output()
        .expect("bnconf runs")
}

/// Run `bnconf ARGS` with extra environment variables.
pub fn bnconf_env<V: AsRef<OsStr>>(args: &[&str], env: &[(&str, V)]) -> Output {
    let mut c = Command::new(BNCONF);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("bnconf runs")
}

/// Run `bnconf ARGS` (stdin closed) under a watchdog: a child still running after `limit`
/// is killed and the calling test fails (a hang is a failure, not a stuck test run). stdout
/// and stderr go through files, so a child that writes much cannot block on a full pipe
/// while the watchdog polls; output that is not UTF-8 reads back empty.
pub fn bnconf_watched(args: &[&str], limit: Duration) -> Output {
    let dir = std::env::temp_dir();
    let tag = format!("{}-{:?}", std::process::id(), std::thread::current().id());
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let (out_p, err_p) = (
        dir.join(format!("bnconf-watched-{tag}.out")),
        dir.join(format!("bnconf-watched-{tag}.err")),
    );
    let mut child = Command::new(BNCONF)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_p).unwrap())
        .stderr(std::fs::File::create(&err_p).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "bnconf {args:?} still running after {} s (killed): a hang",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = Output {
        status,
        stdout: std::fs::read_to_string(&out_p)
            .unwrap_or_default()
            .into_bytes(),
        stderr: std::fs::read_to_string(&err_p)
            .unwrap_or_default()
            .into_bytes(),
    };
    let _ = std::fs::remove_file(&out_p);
    let _ = std::fs::remove_file(&err_p);
    out
}

/// stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// stdout.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file under `dir` (recursively): its path relative to `dir` and its bytes, sorted.
pub fn tree_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A JSON file, parsed.
pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A fresh, empty scratch directory `<target tmp>/<prefix>-<pid>/<name>`.
pub fn scratch(prefix: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// How many files under `d` (a directory under `a`) have the same bytes at the same path
/// under `b`; panics naming the first that differs or is missing.
pub fn same_tree(a: &Path, b: &Path, d: &Path) -> usize {
    let mut entries: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
        .iter()
        .map(|p| match p.is_dir() {
            true => same_tree(a, b, p),
            false => {
                let twin = b.join(p.strip_prefix(a).unwrap());
                let same = std::fs::read(p).unwrap() == std::fs::read(&twin).unwrap();
                assert!(same, "{} differs", p.display());
                1
            }
        })
        .sum()
}
