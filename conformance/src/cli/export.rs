//! `bnconf export`: write a suite into a directory for an outside kernel (the kernel
//! directory protocol), or in another format (`--format`).

use crate::SuiteArgs;
use bnconf::error::ConfError;
use bnconf::protocol;
use std::path::PathBuf;
use std::process::ExitCode;

/// Generate the suite `sel` selects (only `shard` of it) and write it into `out` in `format`.
pub(crate) fn export(
    sel: SuiteArgs,
    out: PathBuf,
    shard: Option<bnconf::suite::shard::Shard>,
    format: String,
) -> Result<ExitCode, ConfError> {
    let sel = sel.selection(shard)?;
    let (s, dtype, filter) = (sel.generate(), sel.precision, sel.filter);
    if format != "protocol" {
        return crate::stablehlo::export(&format, &s, dtype, &filter, &out, shard);
    }
    protocol::export(&s, dtype, &filter, &out)?;
    if let Some(sh) = shard {
        bnconf::suite::shard::record_in_manifest(&out, sh)?;
    }
    eprintln!(
        "bnconf: wrote {} cases of suite {} ({}) to {} ({} excluded as ill-posed or overflowing the dtype: manifest.json says which)",
        s.cases.len(),
        s.name,
        dtype.name(),
        out.display(),
        s.excluded.len()
    );
    Ok(ExitCode::SUCCESS)
}
