//! `bnconf check --family F DIR` (or a family export's DIR, or `--exec`): judge what a kernel
//! wrote for the normalization family's cases; print `run --family`'s table (one row per
//! family: verdict and worst ratio per level and dtype), then the check report, the optional
//! outputs the kernel did not give, the diagnosis against the known-bad family kernels
//! (`--no-diagnosis` skips it), and the summary; write `--report` / `--junit`; gate on
//! `--expectations`; `--html` (every case's row). `check --case CASE.json --outputs DIR` of a
//! family case file reports the same way (without the table). Exit codes as for batch_norm.

use crate::ReportArgs;
use bnconf::error::ConfError;
use bnconf::judge::check::{summarize, CaseResult};
use bnconf::suite::family::FamilySuite;
use bnconf::suite::family_select::FamilySelection;
use bnconf::{protocol, report, suite};
use bnconf_impl::family::{FamilyOp, Named};
use serde_json::{json, Value};
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
        head: table(fs, s, &judged.results),
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
    let judged = protocol::family::judge_user_case(case, outputs, lim)?;
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
    };
    print!("{}", run.head);
    let text = report::human_report(&ctx, out.max_details);
    let (body, summary) = match text.rfind("\nsummary:") {
        Some(i) => text.split_at(i),
        None => (text.as_str(), ""),
    };
    print!("{body}");
    if !judged.not_given.is_empty() {
        println!(
            "\noptional outputs not given ({} cases; judged on the outputs given):",
            judged.not_given.len()
        );
        for (id, names) in &judged.not_given {
            println!("  {id}: {}", names.join(", "));
        }
    }
    print!("{summary}");
    if let Some(p) = &out.report {
        let mut doc = report::json_report(&ctx);
        doc["family"] = json!(run.family);
        if let Some(cases) = doc.get_mut("cases").and_then(Value::as_array_mut) {
            for c in cases {
                let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                let ng = judged
                    .not_given
                    .iter()
                    .find(|(i, _)| i == id)
                    .map(|(_, n)| n.clone())
                    .unwrap_or_default();
                c["not_given"] = json!(ng);
            }
        }
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

/// `run --family`'s table for the kernel in DIR: one row per family, a cell per level and
/// dtype (verdict and worst ratio; `-` where nothing was judged).
fn table(fs: &FamilySelection, s: &FamilySuite, results: &[CaseResult]) -> String {
    let mut t = format!(
        "bnconf check: family {} (seed {}{}), {} cases ({} excluded as ill-posed or non-discriminating) in {}\n",
        fs.family,
        fs.seed,
        fs.shard.map(|sh| format!(", shard {sh}")).unwrap_or_default(),
        s.cases.len(),
        s.excluded.len(),
        fs.precision.name()
    );
    t += "cell = verdict and worst ratio |error| / (u·(cond+mag)); conforming when ≤ k = 4 + 2·log2(n) (n: K, or the cells summed into dgamma/dbeta)\n\n";
    let d = fs.precision.static_name();
    t += &format!("{:<28}", "family");
    for l in suite::family::FAMILY_LEVELS {
        t += &format!(" {:>17}", format!("{} {d}", l.name()));
    }
    t += "  verdict\n";
    for f in &fs.families {
        let ops: Vec<&str> = f
            .ops()
            .iter()
            .map(|o| bnconf_impl::family::Named::name(o))
            .collect();
        let mine: Vec<&CaseResult> = results.iter().filter(|r| ops.contains(&r.op)).collect();
        t += &format!("{:<28}", bnconf_impl::family::Named::name(f));
        for l in suite::family::FAMILY_LEVELS {
            let sel: Vec<&CaseResult> = mine.iter().copied().filter(|r| r.level == l).collect();
            let sm = summarize(sel.iter().copied());
            let v = if sm.passed + sm.failed == 0 {
                "-".to_string()
            } else if sm.failed > 0 {
                format!("FAIL({})", sm.failed)
            } else {
                "pass".into()
            };
            t += &format!(
                " {:>17}",
                format!("{v} {}", report::worst_cell(sel.iter().copied()))
            );
        }
        let sm = summarize(mine.iter().copied());
        let verdict = if sm.failed > 0 {
            format!("FAIL ({} cases)", sm.failed)
        } else if sm.passed == 0 {
            "unsupported".into()
        } else {
            "conforms".into()
        };
        t += &format!("  {verdict}\n");
    }
    t + "\n"
}
