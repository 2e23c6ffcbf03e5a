//! `bnconf check --family F DIR` (or a family export's DIR, or `--exec`): judge what a kernel
//! wrote for the normalization family's cases; print `run --family`'s table (one row per
//! family: verdict and worst ratio per level and dtype), then the check report, the optional
//! outputs the kernel did not give, the diagnosis against the known-bad family kernels
//! (`--no-diagnosis` skips it), and the summary; write `--report` / `--junit`; gate on
//! `--expectations`; `--html` (every case's row). `check --case CASE.json --outputs DIR` of a
//! family case file reports the same way (without the table). Exit codes as for batch_norm.

use crate::ReportArgs;
use bnconf::error::ConfError;
use bnconf::judge::check::summarize;
use bnconf::suite::family::FamilySuite;
use bnconf::suite::family_select::FamilySelection;
use bnconf::{protocol, report};
use bnconf_impl::family::{FamilyOp, Named};
use std::path::Path;
use std::process::ExitCode;

/// Judge `dir` (the export of `fs`, its suite `s` regenerated; `fs.shard` the shard judged)
/// and report.
pub(crate) fn judge(
    dir: &Path,
    fs: &FamilySelection,
    s: &FamilySuite,
    harness_failure: Option<String>,
    expectations: Option<&bnconf::judge::gate::Expectations>,
    out: &ReportArgs,
) -> Result<ExitCode, ConfError> {
    protocol::family::verify_inputs(dir, s)?;
    let keep = !out.no_diagnosis || out.html.is_some();
    let judged = protocol::family::judge_dir(dir, s, keep)?;
    let run = Run {
        name: format!("family {}", fs.family),
        dtype: fs.precision.static_name(),
        family: fs.family.clone(),
        head: report::family::family_table(fs, s, &judged.results),
        judged,
        shard: fs.shard,
        harness_failure,
    };
    finish(&run, expectations, out)
}

/// `check --case CASE.json --outputs DIR` of a family case file: judge the kernel's outputs
/// in DIR (`protocol::family::judge_user_case`), with the reports, gate and exit codes of
/// `check DIR`.
pub(crate) fn judge_case(
    case: &Path,
    outputs: &Path,
    lim: &bnconf::formats::case::InputLimits,
    expectations: Option<&bnconf::judge::gate::Expectations>,
    out: &ReportArgs,
) -> Result<ExitCode, ConfError> {
    let keep = !out.no_diagnosis || out.html.is_some();
    let judged = protocol::family::judge_user_case(case, outputs, lim, keep)?;
    let r = &judged.results[0];
    let family = <FamilyOp as Named>::from_name(r.op)
        .map(|o| Named::name(&o.family()).to_string())
        .unwrap_or_default();
    let run = Run {
        name: format!("case {}", case.display()),
        dtype: r.dtype,
        family,
        head: String::new(),
        judged,
        shard: None,
        harness_failure: None,
    };
    finish(&run, expectations, out)
}

/// What was judged, for [`finish`].
struct Run {
    /// The suite's name in the reports (`family F`, `case PATH`).
    name: String,
    dtype: &'static str,
    /// The family (`--report`'s `"family"`).
    family: String,
    /// Printed before the check report.
    head: String,
    judged: protocol::family::FamilyJudged,
    shard: Option<bnconf::suite::shard::Shard>,
    harness_failure: Option<String>,
}

/// Diagnose, gate, print and write the reports of judged family cases; the exit code.
fn finish(
    run: &Run,
    expectations: Option<&bnconf::judge::gate::Expectations>,
    out: &ReportArgs,
) -> Result<ExitCode, ConfError> {
    let judged = &run.judged;
    let results = &judged.results;
    let diagnosis =
        (!out.no_diagnosis).then(|| bnconf::judge::family::diagnose_family(&judged.failing));
    let gate = expectations.map(|e| bnconf::judge::gate::gate(e, results, out.require_all));
    let ctx = report::Context {
        suite: &run.name,
        dtype: run.dtype,
        results,
        cases: &[],
        diagnosis: diagnosis.as_deref(),
        gate: gate.as_ref(),
        shard: run.shard,
        harness_failure: run.harness_failure.clone(),
        refill: None,
    };
    print!(
        "{}",
        report::family::family_text(&ctx, &run.head, &judged.not_given, out.max_details)
    );
    if let Some(p) = &out.report {
        let doc = report::family::family_json(&ctx, &run.family, &judged.not_given);
        let text = serde_json::to_string_pretty(&doc).expect("json") + "\n";
        bnconf::formats::atomic::write_bytes(p, text.as_bytes())?;
    }
    if let Some(p) = &out.junit {
        report::write_junit_report(p, &ctx)?;
    }
    if let Some(p) = &out.html {
        report::html::write_family(p, &ctx, &judged.not_given)?;
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
    let supported = if gate.is_some() {
        sm.passed + sm.failed > 0
    } else {
        sm.passed > 0
    };
    let ok = verdicts_ok && supported && run.harness_failure.is_none();
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
