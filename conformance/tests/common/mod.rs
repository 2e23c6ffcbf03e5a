//! Helpers shared by the tests that run the `bnconf` binary (each test file uses some).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub const BNCONF: &str = env!("CARGO_BIN_EXE_bnconf");

/// Run `bnconf ARGS`.
pub fn bnconf(args: &[&str]) -> Output {
    Command::new(BNCONF)
        .args(args)
        .output()
        .expect("bnconf runs")
}

/// Run `bnconf ARGS` with extra environment variables.
pub fn bnconf_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BNCONF);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("bnconf runs")
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

/// A fresh, empty scratch directory `<target tmp>/<prefix>-<pid>/<name>`.
pub fn scratch(prefix: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
