//! `bnconf vectors` and `bnconf verify`: write the committed golden vector set, and check one
//! (manifest checksums, every golden value recomputed exactly).

use bnconf::error::ConfError;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write the vector set (seed `seed`, precisions `dtypes`, default when empty) into `out`:
/// batch_norm's, or with `family` = `all` the normalization family's into `out/family`.
pub(crate) fn write(
    out: PathBuf,
    seed: u64,
    dtypes: Vec<String>,
    family: &str,
) -> Result<ExitCode, ConfError> {
    let names = if dtypes.is_empty() {
        bnconf::suite::vectors::DEFAULT_PRECISIONS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        dtypes
    };
    let precs = bnconf::suite::vectors::parse_precisions(&names)?;
    let (out, w) = match family {
        "batch_norm" => {
            let w = bnconf::suite::vectors::write(&out, seed, &precs)?;
            (out, w)
        }
        "all" => {
            let dir = out.join(bnconf::suite::vectors::FAMILY);
            let w = bnconf::protocol::family_vectors::write(&dir, seed, &precs)?;
            (dir, w)
        }
        other => {
            return Err(ConfError::field(
                "--family",
                format!("{other:?}: `batch_norm` or `all` (the family's set covers all three)"),
            ))
        }
    };
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
/// A family set (its manifest has `"family"`) is verified as one; batch_norm's set also
/// verifies its `family/` subdirectory when that holds a manifest.
pub(crate) fn verify(dir: PathBuf) -> Result<ExitCode, ConfError> {
    use bnconf::protocol::family_vectors as fv;
    let rep = if fv::is_family_set(&dir) {
        fv::verify(&dir, "")?
    } else {
        let mut rep = bnconf::suite::vectors::verify(&dir)?;
        let fam = dir.join(bnconf::suite::vectors::FAMILY);
        if fam.join(bnconf::suite::vectors::MANIFEST).is_file() {
            let r = fv::verify(&fam, &format!("{}/", bnconf::suite::vectors::FAMILY))?;
            rep.files += r.files;
            rep.cases += r.cases;
            rep.mismatches.extend(r.mismatches);
            rep.notes.extend(r.notes);
        }
        rep
    };
    print!("{}", bnconf::suite::vectors::render(&rep, &dir));
    Ok(if rep.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
