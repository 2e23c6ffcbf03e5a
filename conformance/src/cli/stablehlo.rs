//! `bnconf export --format stablehlo`: the export (`bnconf::protocol::stablehlo`) from the
//! command line, with `--shard` recorded and a line on stderr saying what was written.

use bnconf::error::{ConfError, Result};
use bnconf::protocol::stablehlo;
use bnconf::suite::{Filter, Precision, Suite};
use std::path::Path;

/// `bnconf export --format FORMAT` for a format other than `protocol`: `stablehlo` writes the
/// export (and records `--shard`); anything else is an error naming `--format`.
pub fn export(
    format: &str,
    s: &Suite,
    dtype: Precision,
    filter: &Filter,
    dir: &Path,
    shard: Option<bnconf::suite::shard::Shard>,
) -> Result<std::process::ExitCode> {
    if format != "stablehlo" {
        return Err(ConfError::field(
            "--format",
            format!("unknown format {format:?} (protocol, stablehlo)"),
        ));
    }
    let w = stablehlo::export(s, dtype, filter, dir)?;
    if let Some(sh) = shard {
        bnconf::suite::shard::record_in_manifest(dir, sh)?;
    }
    eprintln!(
        "bnconf: wrote {} StableHLO modules of suite {} ({}) to {} ({} cases unsupported, {} excluded: manifest.json says which)",
        w.modules,
        s.name,
        dtype.name(),
        dir.display(),
        w.unsupported.len(),
        s.excluded.len() + w.excluded.len()
    );
    Ok(std::process::ExitCode::SUCCESS)
}
