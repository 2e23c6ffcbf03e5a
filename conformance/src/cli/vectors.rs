//! `bnconf vectors` and `bnconf verify`: write the committed golden vector set, and check one
//! (manifest checksums, every golden value recomputed exactly).

use bnconf::error::ConfError;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write the vector set (seed `seed`, precisions `dtypes`, default when empty) into `out`.
pub(crate) fn write(out: PathBuf, seed: u64, dtypes: Vec<String>) -> Result<ExitCode, ConfError> {
    let names = if dtypes.is_empty() {
        bnconf::suite::vectors::DEFAULT_PRECISIONS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        dtypes
    };
    let precs = bnconf::suite::vectors::parse_precisions(&names)?;
    let w = bnconf::suite::vectors::write(&out, seed, &precs)?;
    for r in &w.removed {
        eprintln!("bnconf: removed stale {}", out.join(r).display());
    }
    eprintln!(
        "bnconf: wrote {} files ({} bytes) to {}",
        w.files,
        w.bytes,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Check the vector set in `dir` and print the report; exit 1 when it does not verify.
pub(crate) fn verify(dir: PathBuf) -> Result<ExitCode, ConfError> {
    let rep = bnconf::suite::vectors::verify(&dir)?;
    print!("{}", bnconf::suite::vectors::render(&rep, &dir));
    Ok(if rep.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
