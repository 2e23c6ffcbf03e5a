//! `bnconf check`: judge the outputs a kernel wrote into a suite directory, or (with
//! `--exec`) export the suite, run the kernel and judge; print the report, write the
//! machine-readable ones, and gate on expectations.

use crate::{ReportArgs, SuiteArgs};
use bnconf::error::ConfError;
use bnconf::judge::check::{self, summarize};
use bnconf::{protocol, report};
use std::path::PathBuf;
use std::process::ExitCode;

/// `check --exec`: the command and where to run it.
pub(crate) struct ExecArgs {
    pub opts: protocol::exec::ExecOptions,
    pub keep_dir: Option<PathBuf>,
}

pub(crate) fn cmd_check(
    dir: Option<PathBuf>,
    exec: Option<ExecArgs>,
    shard: Option<bnconf::suite::shard::Shard>,
    sel: SuiteArgs,
    out: ReportArgs,
) -> Result<ExitCode, ConfError> {
    let code = check_inner(dir, exec, shard, sel, out);
    protocol::exec::main_done();
    code
}

/// What `check --exec` ran: the directory judged, a harness failure (timeout), the work
/// directory (removed on drop unless kept); or the exit code of an interrupted run.
type Ran = Result<(PathBuf, Option<String>, protocol::exec::WorkDir), ExitCode>;

/// `check --exec`: `export` the suite into the work directory (DIR, --keep-dir or a temporary
/// one), run the kernel on it, say how it ended.
fn exec_kernel(
    d: Option<PathBuf>,
    ex: ExecArgs,
    export: impl FnOnce(&protocol::exec::WorkDir) -> Result<Option<i32>, ConfError>,
) -> Result<Ran, ConfError> {
    let keep = match (d, ex.keep_dir) {
        (Some(a), Some(b)) if a != b => {
            return Err(ConfError::field(
                "--keep-dir",
                format!(
                    "give DIR or --keep-dir, not both ({} and {})",
                    a.display(),
                    b.display()
                ),
            ))
        }
        (a, b) => a.or(b),
    };
    let work = match &keep {
        Some(k) => protocol::exec::WorkDir::kept(k)?,
        None => protocol::exec::WorkDir::temporary()?,
    };
    let tmp = work.path().to_path_buf();
    if let Some(sig) = export(&work)? {
        drop(work);
        return Ok(Err(ExitCode::from((128 + sig).clamp(0, 255) as u8)));
    }
    let mut harness_failure = None;
    let shown = format!("`{}` on {}", ex.opts.cmd, tmp.display());
    match protocol::exec::run(&ex.opts, &tmp)? {
        protocol::exec::Outcome::Exited(status) if !status.success() => {
            eprintln!("bnconf: warning: {shown} exited with {status}; judging what it wrote");
        }
        protocol::exec::Outcome::Exited(_) => {}
        protocol::exec::Outcome::TimedOut(t) => {
            let msg = format!(
                "kernel timed out after {} (--timeout): killed its process group; {shown}",
                protocol::exec::seconds(t)
            );
            eprintln!("bnconf: {msg}; judging what it wrote");
            harness_failure = Some(msg);
        }
        protocol::exec::Outcome::Interrupted(sig) => {
            drop(work);
            eprintln!("bnconf: interrupted by signal {sig}: killed the kernel's process group, removed the temporary directory");
            return Ok(Err(ExitCode::from((128 + sig).clamp(0, 255) as u8)));
        }
    }
    if keep.is_some() {
        eprintln!(
            "bnconf: kept the suite directory and the kernel's outputs in {}",
            tmp.display()
        );
    }
    Ok(Ok((tmp, harness_failure, work)))
}

fn check_inner(
    dir: Option<PathBuf>,
    exec: Option<ExecArgs>,
    shard: Option<bnconf::suite::shard::Shard>,
    sel: SuiteArgs,
    out: ReportArgs,
) -> Result<ExitCode, ConfError> {
    // The expectations file is read first: a bad one is exit 2 before any work.
    let expectations = match &out.expectations {
        Some(p) => Some(bnconf::judge::gate::read(p)?),
        None => None,
    };
    // The normalization family: `--family F`, or a directory whose manifest says `family`.
    let explicit = sel.family != "batch_norm";
    match (&dir, &exec) {
        (Some(d), None) => {
            if explicit {
                // a bad --family is exit 2 before the directory is read
                sel.family_selection()?;
            }
            match protocol::family::regenerate(d)? {
                Some((mut fs, mut s)) => {
                    if explicit && fs.family != sel.family {
                        return Err(ConfError::field(
                            "--family",
                            format!(
                                "{}, but {} holds family {} (manifest.json)",
                                sel.family,
                                d.display(),
                                fs.family
                            ),
                        ));
                    }
                    match (fs.shard, shard) {
                        (Some(r), Some(g)) if r != g => {
                            return Err(ConfError::field(
                                "--shard",
                                format!("{g}, but {} holds shard {r} (manifest.json)", d.display()),
                            ))
                        }
                        (None, Some(g)) => {
                            g.apply_family(&mut s);
                            fs.shard = Some(g);
                        }
                        _ => {}
                    }
                    return crate::check_family::judge(
                        d,
                        &fs,
                        &s,
                        None,
                        expectations.as_ref(),
                        &out,
                    );
                }
                None if explicit => {
                    return Err(ConfError::field(
                        "--family",
                        format!(
                        "{}, but {} holds batch_norm's export (manifest.json has no \"family\")",
                        sel.family,
                        d.display()
                    ),
                    ))
                }
                None => {}
            }
        }
        (_, Some(_)) if explicit => {
            let mut fs = sel.family_selection()?;
            fs.shard = shard;
            let s = fs.generate();
            let ex = exec.expect("matched");
            let ran = exec_kernel(dir, ex, |work| {
                protocol::exec::export_with(work, |d| protocol::family::export(&fs, &s, d))
            })?;
            let (tmp, failure, _work) = match ran {
                Ok(r) => r,
                Err(code) => return Ok(code),
            };
            return crate::check_family::judge(&tmp, &fs, &s, failure, expectations.as_ref(), &out);
        }
        _ => {}
    }
    let mut harness_failure = None;
    let (s, dtype, dir, shard, _work) = match (dir, exec) {
        (Some(d), None) => {
            let (s, dtype, _) = protocol::regenerate(&d)?;
            let recorded = bnconf::suite::shard::from_manifest_dir(&d)?;
            let s = match (recorded, shard) {
                (Some(r), Some(g)) if r != g => {
                    return Err(ConfError::field(
                        "--shard",
                        format!("{g}, but {} holds shard {r} (manifest.json)", d.display()),
                    ))
                }
                (None, Some(g)) => {
                    let mut s = s;
                    g.apply(&mut s);
                    s
                }
                _ => s,
            };
            (s, dtype, d, recorded.or(shard), None)
        }
        (d, Some(ex)) => {
            let sel = sel.selection(shard)?;
            let (s, dtype, filter) = (sel.generate(), sel.precision, sel.filter);
            let ran = exec_kernel(d, ex, |work| {
                protocol::exec::export_into(work, &s, dtype, &filter, shard)
            })?;
            let (tmp, failure, work) = match ran {
                Ok(r) => r,
                Err(code) => return Ok(code),
            };
            harness_failure = failure;
            (s, dtype, tmp, shard, Some(work))
        }
        (None, None) => return Err(ConfError::field("check", "give a suite DIR or --exec CMD")),
    };
    // One chunk of cases at a time, its input files verified first; only the failing cases'
    // preparations are kept, for the diagnosis and the HTML report.
    let mut s = s;
    let keep = !out.no_diagnosis || out.html.is_some();
    let protocol::Judged {
        results,
        failing: prepared,
    } = protocol::judge_dir(&dir, &mut s, keep)?;
    let run = Judged {
        // (without `keep`, a failing case's inputs are made again as its details print)
        refill: Some((&s.name, s.seed)),
        suite: &s.name,
        dtype: dtype.static_name(),
        cases: &s.cases,
        prepared: &prepared,
        results: &results,
        shard,
        harness_failure,
    };
    finish(&run, expectations.as_ref(), &out)
}

/// `check --case CASE.json --outputs DIR`: judge one user case against the outputs in DIR
/// (`bnconf::protocol::user_case`), with the same reports, gate and exit codes.
pub(crate) fn cmd_check_case(
    case: PathBuf,
    outputs: PathBuf,
    max_elems: usize,
    out: ReportArgs,
) -> Result<ExitCode, ConfError> {
    let expectations = match &out.expectations {
        Some(p) => Some(bnconf::judge::gate::read(p)?),
        None => None,
    };
    let lim = bnconf::formats::case::InputLimits {
        max_elems,
        ..Default::default()
    };
    if protocol::family::is_family_case_file(&case, &lim)? {
        return crate::check_family::judge_case(&case, &outputs, &lim, expectations.as_ref(), &out);
    }
    let (sc, prepared, result) = protocol::user_case::judge_user_case(&case, &outputs, &lim)?;
    let name = format!("case {}", case.display());
    let run = Judged {
        suite: &name,
        dtype: sc.precision().static_name(),
        cases: std::slice::from_ref(&sc),
        prepared: std::slice::from_ref(&prepared),
        results: std::slice::from_ref(&result),
        shard: None,
        harness_failure: None,
        refill: None,
    };
    finish(&run, expectations.as_ref(), &out)
}

/// What was judged, for [`finish`].
struct Judged<'a> {
    suite: &'a str,
    dtype: &'static str,
    cases: &'a [bnconf::suite::SuiteCase],
    prepared: &'a [check::Prepared],
    results: &'a [check::CaseResult],
    shard: Option<bnconf::suite::shard::Shard>,
    harness_failure: Option<String>,
    refill: Option<(&'a str, u64)>,
}

/// Diagnose, gate, print and write the reports of judged cases; the exit code.
fn finish(
    run: &Judged,
    expectations: Option<&bnconf::judge::gate::Expectations>,
    out: &ReportArgs,
) -> Result<ExitCode, ConfError> {
    let (prepared, results) = (run.prepared, run.results);
    let diagnosis = if out.no_diagnosis {
        None
    } else {
        Some(bnconf::judge::diagnosis::diagnose(prepared, results))
    };
    let gate = expectations.map(|e| bnconf::judge::gate::gate(e, results, out.require_all));
    let ctx = report::Context {
        suite: run.suite,
        dtype: run.dtype,
        results,
        cases: run.cases,
        diagnosis: diagnosis.as_deref(),
        gate: gate.as_ref(),
        shard: run.shard,
        harness_failure: run.harness_failure.clone(),
        refill: run.refill,
    };
    print!("{}", report::human_report(&ctx, out.max_details));
    if let Some(p) = &out.report {
        report::write_json_report(p, &ctx)?;
    }
    if let Some(p) = &out.junit {
        report::write_junit_report(p, &ctx)?;
    }
    if let Some(p) = &out.html {
        report::html::write(p, &ctx, prepared)?;
    }
    if let Some(p) = &out.write_expectations {
        let n = report::expectations::write(p, results, out.require_all, ctx.diag())?;
        eprintln!("bnconf: wrote {n} expected failures to {}", p.display());
    }
    let sm = summarize(results);
    let verdicts_ok = match &gate {
        Some(g) => g.ok(),
        None => sm.failed == 0 && !(out.require_all && sm.unsupported > 0),
    };
    // At least one case supported (with a gate, an expected failure counts), and no timeout.
    let supported = if gate.is_some() {
        sm.passed + sm.failed > 0
    } else {
        sm.passed > 0
    };
    let ok = verdicts_ok && supported && ctx.harness_failure.is_none();
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
