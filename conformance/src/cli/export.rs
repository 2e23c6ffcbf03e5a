//! `bnconf export`: write a suite into a directory for an outside kernel (the kernel
//! directory protocol), or in another format (`--format stablehlo`, `--format onnx`).

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
    if sel.family != "batch_norm" {
        return export_family(&sel, out, shard, &format);
    }
    let sel = sel.selection(shard)?;
    let (s, dtype, filter) = (sel.generate(), sel.precision, sel.filter);
    match format.as_str() {
        "protocol" => {}
        "stablehlo" => return crate::stablehlo::export(&format, &s, dtype, &filter, &out, shard),
        "onnx" => return export_onnx(&s, dtype, &filter, &out, shard),
        other => {
            return Err(ConfError::field(
                "--format",
                format!("unknown format {other:?} (protocol, stablehlo, onnx)"),
            ))
        }
    }
    protocol::export(&s, dtype, &filter, &out)?;
    if let Some(sh) = shard {
        bnconf::suite::shard::record_in_manifest(&out, sh)?;
    }
    eprintln!(
        "bnconf: wrote {} cases of suite {} ({}) to {} ({} excluded as ill-posed, non-discriminating or overflowing the dtype: manifest.json says which)",
        s.cases.len(),
        s.name,
        dtype.name(),
        out.display(),
        s.excluded.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `export --format onnx`: the suite in ONNX's backend-test layout
/// (`bnconf::protocol::onnx_export`), `--shard` recorded, a line on stderr saying what was
/// written.
fn export_onnx(
    s: &bnconf::suite::Suite,
    dtype: bnconf::suite::Precision,
    filter: &bnconf::suite::Filter,
    out: &std::path::Path,
    shard: Option<bnconf::suite::shard::Shard>,
) -> Result<ExitCode, ConfError> {
    let w = protocol::onnx_export::export(s, dtype, filter, out)?;
    if let Some(sh) = shard {
        bnconf::suite::shard::record_in_manifest(out, sh)?;
    }
    eprintln!(
        "bnconf: wrote {} ONNX tests of suite {} ({}) to {} ({} cases unsupported, {} excluded: manifest.json says which)",
        w.modules,
        s.name,
        dtype.name(),
        out.display(),
        w.unsupported.len(),
        s.excluded.len() + w.excluded.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `export --family F`: the family suite in the kernel directory protocol (FORMAT.md "Added in
/// bnconf 0.3: the normalization family in the protocol").
fn export_family(
    sel: &SuiteArgs,
    out: PathBuf,
    shard: Option<bnconf::suite::shard::Shard>,
    format: &str,
) -> Result<ExitCode, ConfError> {
    let mut fs = sel.family_selection()?;
    fs.shard = shard;
    let s = fs.generate();
    match format {
        "protocol" => {}
        "onnx" => {
            let w = protocol::onnx_family::export(&fs, &s, &out)?;
            eprintln!(
                "bnconf: wrote {} ONNX tests of family {}{} ({}) to {} ({} cases unsupported, {} excluded: manifest.json says which)",
                w.modules,
                fs.family,
                shard.map(|sh| format!(", shard {sh}")).unwrap_or_default(),
                fs.precision.name(),
                out.display(),
                w.unsupported.len(),
                s.excluded.len() + w.excluded.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        "stablehlo" => {
            let w = protocol::stablehlo_family::export(&fs, &s, &out)?;
            eprintln!(
                "bnconf: wrote {} StableHLO modules of family {}{} ({}) to {} ({} cases unsupported, {} excluded: manifest.json says which)",
                w.modules,
                fs.family,
                shard.map(|sh| format!(", shard {sh}")).unwrap_or_default(),
                fs.precision.name(),
                out.display(),
                w.unsupported.len(),
                s.excluded.len() + w.excluded.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
        other => {
            return Err(ConfError::field(
                "--format",
                format!("unknown format {other:?} (protocol, stablehlo, onnx)"),
            ))
        }
    }
    protocol::family::export(&fs, &s, &out)?;
    eprintln!(
        "bnconf: wrote {} cases of family {}{} ({}) to {} ({} excluded as ill-posed or non-discriminating: manifest.json says which)",
        s.cases.len(),
        fs.family,
        shard.map(|sh| format!(", shard {sh}")).unwrap_or_default(),
        fs.precision.name(),
        out.display(),
        s.excluded.len()
    );
    Ok(ExitCode::SUCCESS)
}
