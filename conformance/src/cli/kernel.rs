//! `bnconf kernel`: list the built-in kernels, or run one on a suite directory through the
//! kernel directory protocol, as an outside kernel would.

use bnconf::error::ConfError;
use bnconf::protocol;
use std::path::PathBuf;
use std::process::ExitCode;

/// `--list` prints every kernel (name, expectation, description; with `--family F` the
/// family's kernels); otherwise kernel `name` (a batch_norm, replicated or family kernel)
/// fills `dir`.
pub(crate) fn kernel(
    list: bool,
    name: Option<String>,
    dir: Option<PathBuf>,
    family: Option<String>,
) -> Result<ExitCode, ConfError> {
    if let (true, Some(f)) = (list, &family) {
        let families = bnconf::suite::family_select::parse_family(f)?.unwrap_or_default();
        for fam in families {
            for k in bnconf_impl::family::family_kernels(fam) {
                let v = match k.expected() {
                    bnconf_impl::Expected::Good => "good",
                    bnconf_impl::Expected::KnownBad => "known-bad",
                };
                println!("{}\t{v}\t[{fam}] {}", k.name(), k.description());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if list {
        for k in bnconf_impl::all_kernels() {
            let v = match k.expected() {
                bnconf_impl::Expected::Good => "good",
                bnconf_impl::Expected::KnownBad => "known-bad",
            };
            println!("{}\t{v}\t{}", k.name(), k.description());
        }
        // Replicated kernels: they run the `replicated` suite's cases, all ranks.
        for k in bnconf_impl::all_replicated_kernels() {
            let v = match k.expected() {
                bnconf_impl::Expected::Good => "good",
                bnconf_impl::Expected::KnownBad => "known-bad",
            };
            println!("{}\t{v}\t[replicated suite] {}", k.name(), k.description());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (Some(name), Some(dir)) = (name, dir) else {
        return Err(ConfError::field(
            "kernel",
            "usage: bnconf kernel --list | bnconf kernel NAME DIR",
        ));
    };
    let n = if let Some(k) = bnconf_impl::replicated_kernel_by_name(&name) {
        protocol::replicated::run_kernel_dir(k.as_ref(), &dir)?
    } else if let Some(k) = bnconf_impl::family::family_kernel_by_name(&name) {
        protocol::family::run_kernel_dir(k.as_ref(), &dir)?
    } else {
        let k = bnconf_impl::kernel_by_name(&name).ok_or_else(|| {
            ConfError::field(
                "NAME",
                format!(
                    "unknown kernel {name:?} (see bnconf kernel --list, and --list --family all)"
                ),
            )
        })?;
        protocol::run_kernel_dir(k.as_ref(), &dir)?
    };
    eprintln!("bnconf: kernel {name} ran {n} cases in {}", dir.display());
    Ok(ExitCode::SUCCESS)
}
