//! `bnconf onnx`: judge ONNX's own BatchNormalization test data against the exact reference
//! (docs/ONNX.md) and print the table.

use bnconf::error::ConfError;
use std::path::PathBuf;
use std::process::ExitCode;

/// Judge the ONNX node tests in `dirs` (none: the copy built into bnconf); exit 1 unless
/// every output passes.
pub(crate) fn onnx(dirs: Vec<PathBuf>) -> Result<ExitCode, ConfError> {
    let (rows, table) = if dirs.is_empty() {
        bnconf::peers::onnx::run_builtin()?
    } else {
        bnconf::peers::onnx::run_dirs(&dirs)?
    };
    print!("{table}");
    let all = rows
        .iter()
        .all(|r| r.verdict.outputs.iter().all(|o| o.pass()));
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
