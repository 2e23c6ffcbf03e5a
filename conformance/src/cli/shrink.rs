//! `bnconf shrink`'s arguments and entry point (the CLI dispatches here); the shrinking
//! itself is the library's `bnconf::shrink`.

use bnconf::error::{ConfError, Result};
use bnconf::formats::case::InputLimits;
use bnconf::protocol::exec::{self, ExecOptions};
use bnconf::shrink::run::{shrink, Ended};
use bnconf::suite::family::{family_suite_named, FamilySuiteCase};
use bnconf::suite::{self, SuiteCase};
use bnconf_impl::family::{FamilyOp, Named};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `bnconf shrink`: give the case as `--case ID` (a case of `--suite`/`--dtype`/`--seed`) or
/// `--case-file FILE` (`bnconf-case/1`), the kernel as `--exec CMD`, the output as `--out DIR`.
#[derive(clap::Args, Clone, Debug)]
pub struct ShrinkArgs {
    /// The failing case: an id of the suite (e.g. forward.nchw.f32.large-mean-1e4).
    #[arg(long, value_name = "ID")]
    pub case: Option<String>,
    /// The failing case as a case file (`bnconf-case/1`, float dtype) instead of --case.
    #[arg(long, value_name = "FILE")]
    pub case_file: Option<PathBuf>,
    /// Suite of --case: default, extreme, scale or replicated.
    #[arg(long, default_value = "default")]
    pub suite: String,
    /// dtype of --case's suite: f32, f64, f16, bf16 (numpy's names work too).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Seed of --case's suite.
    #[arg(long, default_value_t = suite::DEFAULT_SEED)]
    pub seed: u64,
    /// The kernel: run as `CMD ARGS DIR` on a one-case directory per candidate (split into
    /// words as a POSIX shell does, as `check --exec`).
    #[arg(long, value_name = "CMD")]
    pub exec: String,
    /// Run --exec's CMD through `sh -c` (DIR is `$1` and `$BNCONF_DIR`).
    #[arg(long)]
    pub exec_shell: bool,
    /// Kill the kernel's process group when one run takes longer than SECONDS (a candidate
    /// that times out counts as not failing; the original timing out is an error).
    #[arg(long, value_name = "SECONDS", default_value_t = exec::DEFAULT_TIMEOUT_S)]
    pub timeout: u64,
    /// Most kernel runs on candidates (after the original's).
    #[arg(long, value_name = "N", default_value_t = bnconf::shrink::DEFAULT_MAX_RUNS)]
    pub max_runs: usize,
    /// Write the shrunk case here (a new or empty directory): case.json, <input>.npy,
    /// golden.json, kernel/<output>.npy (kernel/rank<r>/<output>.npy for a replicated case),
    /// shrink.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Do not print each kept candidate on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// The case to shrink: batch_norm's, or a normalization-family case.
pub enum Original {
    BatchNorm(Box<SuiteCase>),
    Family(Box<FamilySuiteCase>),
}

/// The original case named by the arguments: a family case when `--case`'s op is a family op
/// (`layer_norm`, `rms_norm_backward`, ...) or `--case-file` is a family case file.
pub fn original(a: &ShrinkArgs) -> Result<Original> {
    if let (Some(f), None) = (&a.case_file, &a.case) {
        let lim = InputLimits::default();
        if bnconf::protocol::family::is_family_case_file(f, &lim)? {
            let sc = bnconf::protocol::family::user_suite_case(f, &lim)?;
            return Ok(Original::Family(Box::new(sc)));
        }
    }
    if let (Some(id), None) = (&a.case, &a.case_file) {
        let op = id.split('.').next().unwrap_or("");
        if let Some(op) = FamilyOp::from_name(op) {
            return family_suite_case(a, id, op).map(|c| Original::Family(Box::new(c)));
        }
    }
    original_case(a).map(|c| Original::BatchNorm(Box::new(c)))
}

/// Case `id` of the family suite of `op`'s family named by `--suite`, `--dtype` (the mixed
/// precisions too: a family case file has `param_dtype`) and `--seed`.
fn family_suite_case(a: &ShrinkArgs, id: &str, op: FamilyOp) -> Result<FamilySuiteCase> {
    let prec = bnconf::testing::parse_precision(&a.dtype).map_err(|_| {
        ConfError::field(
            "--dtype",
            format!(
                "{:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32",
                a.dtype
            ),
        )
    })?;
    let s = family_suite_named(&a.suite, op.family(), &[prec], a.seed).ok_or_else(|| {
        ConfError::field(
            "--suite",
            format!(
                "unknown suite {:?} for a family case (default, extreme, scale)",
                a.suite
            ),
        )
    })?;
    let found = s.cases.iter().find(|c| c.id == id).cloned();
    found.ok_or_else(|| {
        let near: Vec<&str> = s
            .cases
            .iter()
            .filter(|c| c.case.op == op)
            .take(3)
            .map(|c| c.id.as_str())
            .collect();
        ConfError::field(
            "--case",
            format!(
                "{id:?} is not a case of the {} suite {:?} in {} (seed {}){}",
                op.family(),
                a.suite,
                prec.name(),
                a.seed,
                if near.is_empty() {
                    String::new()
                } else {
                    format!("; e.g. {}", near.join(", "))
                }
            ),
        )
    })
}

/// The original batch_norm case named by the arguments.
pub fn original_case(a: &ShrinkArgs) -> Result<SuiteCase> {
    match (&a.case, &a.case_file) {
        (Some(_), Some(_)) => Err(ConfError::field(
            "--case",
            "give --case ID or --case-file FILE, not both",
        )),
        (None, None) => Err(ConfError::field(
            "--case",
            "missing: give --case ID (with --suite, --dtype) or --case-file FILE",
        )),
        (None, Some(f)) => bnconf::shrink::case_from_file(f, &InputLimits::default()),
        (Some(id), None) => {
            let prec = bnconf::testing::parse_precision(&a.dtype).map_err(|_| {
                ConfError::field(
                    "--dtype",
                    format!("{:?}: one of f32, f64, f16, bf16", a.dtype),
                )
            })?;
            if prec.is_mixed() {
                return Err(ConfError::field(
                    "--dtype",
                    format!(
                        "{}: shrink writes a bnconf-case/1 file, which has one dtype; mixed precisions are not supported",
                        prec.name()
                    ),
                ));
            }
            // Only the op and layout the id names are generated (ids are op.layout.dtype.class).
            let mut filter = suite::Filter::default();
            let mut parts = id.split('.');
            if let Some(op) = parts.next().and_then(bnconf_spec::Op::from_name) {
                filter.ops.push(op);
            }
            if let Some(l) = parts.next().and_then(bnconf_spec::Layout::from_name) {
                filter.layouts.push(l);
            }
            let s = suite::generate_in(&a.suite, &[prec], a.seed, &filter).ok_or_else(|| {
                ConfError::field(
                    "--suite",
                    format!(
                        "unknown suite {:?} (default, extreme, scale, replicated)",
                        a.suite
                    ),
                )
            })?;
            s.cases
                .iter()
                .find(|c| &c.id == id)
                .cloned()
                .ok_or_else(|| {
                    let near: Vec<&str> = s.cases.iter().take(3).map(|c| c.id.as_str()).collect();
                    ConfError::field(
                        "--case",
                        format!(
                            "{id:?} is not a case of suite {:?} in {} (seed {}){}",
                            a.suite,
                            prec.name(),
                            a.seed,
                            if near.is_empty() {
                                String::new()
                            } else {
                                format!("; e.g. {}", near.join(", "))
                            }
                        ),
                    )
                })
        }
    }
}

fn check_out(dir: &Path) -> Result<()> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(ConfError::field(
                "--out",
                format!("{} exists and is not a directory", dir.display()),
            ));
        }
        let mut rd = std::fs::read_dir(dir).map_err(|e| ConfError::io(dir, e))?;
        if rd.next().is_some() {
            return Err(ConfError::field(
                "--out",
                format!(
                    "{} exists and is not empty (give a new or empty directory)",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `bnconf shrink`: exit 0 with the shrunk case written, 1 when the kernel does not fail the
/// case (nothing written), 2 (an error) when the arguments or the harness are at fault.
pub fn run(a: &ShrinkArgs) -> Result<ExitCode> {
    let code = run_inner(a);
    exec::main_done();
    code
}

fn run_inner(a: &ShrinkArgs) -> Result<ExitCode> {
    check_out(&a.out)?;
    exec::command_words(&a.exec, a.exec_shell)?;
    if a.timeout == 0 {
        return Err(ConfError::field("--timeout", "must be at least 1 second"));
    }
    let opts = ExecOptions {
        cmd: a.exec.clone(),
        shell: a.exec_shell,
        timeout: std::time::Duration::from_secs(a.timeout),
    };
    let original = match original(a)? {
        Original::Family(sc) => return run_family(a, &sc, &opts),
        Original::BatchNorm(c) => *c,
    };
    if bnconf::shrink::problem_of(&original).is_err() || suite::ill_posed(&original).is_some() {
        return Err(ConfError::field(
            "--case",
            format!(
                "{} is ill-posed in its dtype or undefined: nothing to judge",
                original.id
            ),
        ));
    }
    let ended = shrink(&original, &opts, a.max_runs, a.quiet)?;
    finish(
        a,
        &original.id,
        ended,
        bnconf::shrink::write_output,
        bnconf::shrink::summary,
    )
}

/// The exit of a search: `128 + N` on signal N, 1 when the kernel does not fail the case
/// (nothing written), 0 with the shrunk case written (all or nothing) and its summary printed.
fn finish<T>(
    a: &ShrinkArgs,
    id: &str,
    ended: Ended<T>,
    write: impl Fn(&T, &Path) -> Result<()>,
    summary: impl Fn(&T) -> String,
) -> Result<ExitCode> {
    match ended {
        Ended::Interrupted(sig) => Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8)),
        Ended::DoesNotFail(why) => {
            eprintln!(
                "bnconf shrink: case {id} does not fail with `{}`: {why}; nothing to shrink, nothing written",
                a.exec
            );
            Ok(ExitCode::from(1))
        }
        Ended::Shrunk(s) => {
            bnconf::formats::atomic::write_dir_atomic(&a.out, |stage| write(&s, stage))?;
            print!("{}", summary(&s));
            println!("wrote {}", a.out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `bnconf shrink` of a family case (the exit codes of batch_norm's).
fn run_family(a: &ShrinkArgs, original: &FamilySuiteCase, opts: &ExecOptions) -> Result<ExitCode> {
    use bnconf::shrink::family;
    if !family::valid(&original.case) {
        return Err(ConfError::field(
            "--case",
            format!(
                "{} is ill-posed in its dtype or invalid: nothing to judge",
                original.id
            ),
        ));
    }
    let ended = bnconf::shrink::family_run::shrink_family(original, opts, a.max_runs, a.quiet)?;
    finish(
        a,
        &original.id,
        ended,
        family::write_output,
        family::summary,
    )
}
