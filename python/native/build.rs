//! With the `wheel-bin` feature (pyproject.toml sets it): build the `bnconf` command line from
//! the root workspace (`cargo build --release --bin bnconf`, its own Cargo.lock and target
//! directory) and copy it to `python/src/bnconf/_bin/` (git-ignored), which pyproject.toml's
//! `include` puts in the wheel beside the extension module: the package's `bnconf` command
//! (`bnconf.__main__`) and `python -m bnconf` run it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_WHEEL_BIN");
    if std::env::var_os("CARGO_FEATURE_WHEEL_BIN").is_none() {
        return;
    }
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = here.join("../..");
    for p in [
        "spec/src",
        "impl/src",
        "conformance/src",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = root.join("target");
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "bnconf",
            "--bin",
            "bnconf",
        ])
        .arg("--target-dir")
        .arg(&target)
        // What cargo set for this crate's build (flags, target) is not the binary's.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .expect("run cargo to build the bnconf binary");
    assert!(
        status.success(),
        "building the bnconf binary failed: {status}"
    );
    let exe = format!("bnconf{}", std::env::consts::EXE_SUFFIX);
    let dest = here.join("../src/bnconf/_bin");
    std::fs::create_dir_all(&dest).expect("create python/src/bnconf/_bin");
    std::fs::copy(target.join("release").join(&exe), dest.join(&exe))
        .expect("copy the bnconf binary into python/src/bnconf/_bin");
}
