//! `bnconf run`: the default suite (or another) against every built-in kernel, as a table
//! kernel × level × dtype, holding good kernels to conform and known-bad ones to be rejected;
//! with `--family layer_norm|rms_norm|group_norm|all`, the family suites against the built-in
//! family kernels, one table per family (`batch_norm`, the default, is the above).

use bnconf::error::ConfError;
use bnconf::judge::check::{self, summarize};
use bnconf::judge::family::{prepare_family_all, run_family_kernel};
use bnconf::{report, suite};
use bnconf_impl::family::{Family, FamilyKernel, Named};
use std::process::ExitCode;

/// Parse `--family` and `--dtypes`, then judge and print the tables: `batch_norm` runs the
/// suites of `--suite` ([`cmd_run`], unchanged); a family (or `all`) runs [`run_families`].
pub(crate) fn run_family_or_bn(
    family: &str,
    suite_name: &str,
    dtypes: &[String],
    seed: u64,
    only: &[String],
    verbose: bool,
    shard: Option<bnconf::suite::shard::Shard>,
) -> Result<ExitCode, ConfError> {
    if family == "batch_norm" {
        let precs = parse_dtypes(dtypes)?;
        return cmd_run(suite_name, &precs, seed, only, verbose, shard);
    }
    let families: Vec<Family> = if family == "all" {
        Family::ALL.to_vec()
    } else {
        vec![Family::from_name(family).ok_or_else(|| {
            ConfError::field(
                "--family",
                format!("{family:?}: one of batch_norm, layer_norm, rms_norm, group_norm, all"),
            )
        })?]
    };
    if !suite::family::FAMILY_SUITES.contains(&suite_name) {
        return Err(ConfError::field(
            "--suite",
            format!(
                "{suite_name:?}: the family suites are {} (`replicated` is batch_norm's)",
                suite::family::FAMILY_SUITES.join(", ")
            ),
        ));
    }
    let precs = parse_dtypes(dtypes)?;
    for n in only {
        if bnconf_impl::family::family_kernel_by_name(n).is_none() {
            return Err(ConfError::field(
                "--kernels",
                format!("unknown family kernel {n:?}"),
            ));
        }
    }
    run_families(suite_name, &families, &precs, seed, only, verbose, shard)
}

fn parse_dtypes(dtypes: &[String]) -> Result<Vec<suite::Precision>, ConfError> {
    dtypes
        .iter()
        .map(|d| {
            bnconf::testing::parse_precision(d).map_err(|_| {
                ConfError::field(
                    "--dtypes",
                    format!("{d:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32"),
                )
            })
        })
        .collect()
}

/// One row of `bnconf run`'s table: a kernel and its results.
struct RunRow {
    name: &'static str,
    good: bool,
    /// The suite whose cases show a known-bad kernel's defect.
    shows: &'static str,
    results: Vec<check::CaseResult>,
}

fn cmd_run(
    suite_name: &str,
    dtypes: &[suite::Precision],
    seed: u64,
    only: &[String],
    verbose: bool,
    shard: Option<bnconf::suite::shard::Shard>,
) -> Result<ExitCode, ConfError> {
    for n in only {
        if bnconf_impl::kernel_by_name(n).is_none()
            && bnconf_impl::replicated_kernel_by_name(n).is_none()
        {
            return Err(ConfError::field(
                "--kernels",
                format!("unknown kernel {n:?}"),
            ));
        }
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|n| n == name);
    // The replicated suite is judged with the replicated kernels; `bnconf run` on the default
    // suite judges them too, in a second table, so their known-bad controls are held.
    let mut suites = vec![suite_name];
    if suite_name == "default"
        && bnconf_impl::all_replicated_kernels()
            .iter()
            .any(|k| wanted(k.name()))
    {
        suites.push("replicated");
    }
    let mut all_ok = true;
    for (i, &name) in suites.iter().enumerate() {
        let mut s = suite::generate_in(name, dtypes, seed, &suite::Filter::default())
            .ok_or_else(|| ConfError::field("--suite", format!("unknown suite {name:?}")))?;
        if let Some(sh) = shard {
            sh.apply(&mut s);
        }
        // One chunk of cases at a time (prepared, every kernel run and judged on it, dropped):
        // the preparations of the whole suite are never held together, nor the failing
        // outputs (`computed`, which the table does not show).
        let mut rows: Vec<RunRow> = Vec::new();
        let replicated = name == "replicated";
        if replicated {
            for k in bnconf_impl::all_replicated_kernels() {
                if wanted(k.name()) {
                    rows.push(RunRow {
                        name: k.name(),
                        good: k.expected() == bnconf_impl::Expected::Good,
                        shows: "replicated",
                        results: vec![],
                    });
                }
            }
        } else {
            for k in bnconf_impl::all_kernels() {
                if wanted(k.name()) {
                    rows.push(RunRow {
                        name: k.name(),
                        good: k.expected() == bnconf_impl::Expected::Good,
                        shows: k.defect_suite(),
                        results: vec![],
                    });
                }
            }
        }
        let (plain, reps) = (
            bnconf_impl::all_kernels(),
            bnconf_impl::all_replicated_kernels(),
        );
        for range in check::chunks(&s.cases, check::JUDGE_CHUNK_CELLS) {
            let prepared = check::prepare(&s.cases[range])?;
            for row in &mut rows {
                let mut results = if replicated {
                    let k = reps.iter().find(|k| k.name() == row.name).expect("listed");
                    bnconf::judge::ranks::run_kernel(k.as_ref(), &prepared)
                } else {
                    let k = plain.iter().find(|k| k.name() == row.name).expect("listed");
                    check::run_kernel(k.as_ref(), &prepared)
                };
                for r in &mut results {
                    r.computed = None;
                }
                row.results.extend(results);
            }
        }
        if i > 0 {
            println!();
        }
        all_ok &= print_run_table(name, &s, dtypes, seed, &rows, verbose);
    }
    Ok(finish(all_ok))
}

/// Print one suite's table (kernel × level × dtype); whether every outcome is as expected.
fn print_run_table(
    suite_name: &str,
    s: &suite::Suite,
    dtypes: &[suite::Precision],
    seed: u64,
    rows: &[RunRow],
    verbose: bool,
) -> bool {
    let levels = suite::suite_levels(suite_name).expect("known suite");
    let names: Vec<String> = dtypes.iter().map(|d| d.name()).collect();
    let names = match names.as_slice() {
        [a, b] => format!("{a} and {b}"),
        _ => names.join(", "),
    };
    let what = if suite_name == "replicated" {
        "forward, backward, running_update × nchw, nhwc (and nc, ncl, ncdhw, ndhwc: three classes) split across 2, 3, 4, 8 ranks (equal, unequal, one empty), the ranks simulated in process, in"
    } else {
        "every op × layout in"
    };
    println!("bnconf run: suite {suite_name} (seed {seed}), {} cases ({} excluded as ill-posed or non-discriminating), {what} {names}", s.cases.len(), s.excluded.len());
    println!("cell = verdict and worst ratio |error| / (u·(cond+mag)); conforming when ≤ k(m) = 4 + 2·log2(m)\n");
    let mut header = format!("{:<28} {:<10}", "kernel", "expected");
    for l in &levels {
        for d in dtypes {
            header += &format!(" {:>17}", format!("{} {}", l.name(), d.name()));
        }
    }
    println!("{header}  outcome");
    let mut all_ok = true;
    let mut details = String::new();
    for row in rows {
        let (good, results) = (row.good, &row.results);
        let mut line = format!(
            "{:<28} {:<10}",
            row.name,
            if good { "good" } else { "known-bad" }
        );
        for l in &levels {
            for d in dtypes {
                let sel: Vec<&check::CaseResult> = results
                    .iter()
                    .filter(|r| r.level == *l && r.dtype == d.static_name())
                    .collect();
                let sm = summarize(sel.iter().copied());
                let v = if sm.failed > 0 {
                    format!("FAIL({})", sm.failed)
                } else {
                    "pass".into()
                };
                line += &format!(" {:>17}", format!("{v} {}", report::fmt_ratio(sm.worst)));
            }
        }
        let sm = summarize(results);
        let conforms = sm.failed == 0 && sm.passed > 0;
        // A known-bad kernel is held to rejection in the suite that shows its defect
        // (block-merge defects: `scale`; the others: `default`, and `extreme` with them).
        let shows = row.shows;
        let held = good || shows == suite_name || (suite_name == "extreme" && shows == "default");
        let ok = conforms == good || !held;
        all_ok &= ok;
        let outcome = match (good, conforms, held) {
            (true, true, _) => "ok: conforms".to_string(),
            (false, false, _) => format!("ok: rejected ({} cases)", sm.failed),
            (true, false, _) => "UNEXPECTED: good kernel rejected".to_string(),
            (false, true, true) => "UNEXPECTED: known-bad kernel passed".to_string(),
            (false, true, false) => format!("not held here: its defect shows in the {shows} suite"),
        };
        println!("{line}  {outcome}");
        if good && (!conforms || verbose) {
            details += &report::human(results, &s.cases, 5);
        }
    }
    if !details.is_empty() {
        println!("\n{details}");
    }
    all_ok
}

/// The family suites of `families` against their built-in kernels: one table per family
/// (kernel × level × dtype). Every good kernel must conform on every case; every known-bad
/// kernel must fail a case in one of its `defect_dtypes` when the run has one of them (else
/// it is "not held here"); the known-bad kernels are held in the `default` suite, where their
/// defects show by construction, and reported in `extreme` and `scale` (rejected or not). In
/// `extreme` (the range level) only the range-robust good kernels must conform. With a shard
/// (`--shard K/N`: the shard's cases of each family suite), every good kernel must conform on
/// the shard and the known-bad kernels are reported, as in `extreme` and `scale`.
/// Exit 1 on an unexpected outcome.
fn run_families(
    suite_name: &str,
    families: &[Family],
    dtypes: &[suite::Precision],
    seed: u64,
    only: &[String],
    verbose: bool,
    shard: Option<bnconf::suite::shard::Shard>,
) -> Result<ExitCode, ConfError> {
    let wanted = |name: &str| only.is_empty() || only.iter().any(|n| n == name);
    let mut all_ok = true;
    for (i, &family) in families.iter().enumerate() {
        let mut s = suite::family::family_suite_named(suite_name, family, dtypes, seed)
            .expect("a family suite's name");
        if let Some(sh) = shard {
            sh.apply_family(&mut s);
        }
        // known-bad kernels are held where their defects show by construction: the whole
        // default suite
        let holds_bad = suite_name == "default" && shard.is_none();
        let prepared = prepare_family_all(&s.cases)?;
        let kernels: Vec<Box<dyn FamilyKernel>> = bnconf_impl::family::family_kernels(family)
            .into_iter()
            .filter(|k| wanted(k.name()))
            .collect();
        if i > 0 {
            println!();
        }
        let names: Vec<String> = dtypes.iter().map(|d| d.name()).collect();
        let ops: Vec<&str> = family.ops().iter().map(|o| o.name()).collect();
        println!(
            "bnconf run: family {family} (suite {suite_name}{}, seed {seed}), {} cases ({} excluded as ill-posed or non-discriminating), {} in {}",
            shard.map_or(String::new(), |sh| format!(", shard {sh}")),
            s.cases.len(),
            s.excluded.len(),
            ops.join(", "),
            names.join(", ")
        );
        println!("cell = verdict and worst ratio |error| / (u·(cond+mag)); conforming when ≤ k = 4 + 2·log2(n) (n: K, or the cells summed into dgamma/dbeta)\n");
        let mut header = format!("{:<28} {:<10}", "kernel", "expected");
        for l in suite::family::FAMILY_LEVELS {
            for d in dtypes {
                header += &format!(" {:>17}", format!("{} {}", l.name(), d.name()));
            }
        }
        println!("{header}  outcome");
        let mut details = String::new();
        for k in &kernels {
            let results = run_family_kernel(k.as_ref(), &prepared);
            let good = k.expected() == bnconf_impl::Expected::Good;
            let mut line = format!(
                "{:<28} {:<10}",
                k.name(),
                if good { "good" } else { "known-bad" }
            );
            for l in suite::family::FAMILY_LEVELS {
                for d in dtypes {
                    let sel: Vec<&check::CaseResult> = results
                        .iter()
                        .filter(|r| r.level == l && r.dtype == d.static_name())
                        .collect();
                    let sm = summarize(sel.iter().copied());
                    let v = if sm.passed + sm.failed == 0 {
                        "-".to_string()
                    } else if sm.failed > 0 {
                        format!("FAIL({})", sm.failed)
                    } else {
                        "pass".into()
                    };
                    line += &format!(" {:>17}", format!("{v} {}", report::fmt_ratio(sm.worst)));
                }
            }
            let sm = summarize(&results);
            let conforms = sm.failed == 0 && sm.passed > 0;
            // a known-bad kernel is held where the run has one of its defect's dtypes
            let defect: Vec<&str> = k.defect_dtypes().iter().map(|d| d.name()).collect();
            let in_defect = |r: &check::CaseResult| k.defect_shows_in(r.dtype);
            let held =
                good || (holds_bad && dtypes.iter().any(|d| k.defect_shows_in(d.static_name())));
            let rejected = results
                .iter()
                .filter(|r| in_defect(r))
                .any(|r| !r.conforms() && !matches!(r.verdict, check::Verdict::Unsupported(_)));
            let (ok, outcome) = match (good, held) {
                (true, _) if conforms => (true, "ok: conforms".to_string()),
                // the range level: only the range-robust kernels are held to it (DESIGN §3)
                (true, _) if suite_name == "extreme" && !k.range_robust() => (
                    true,
                    format!("not range-robust: rejected ({} cases)", sm.failed),
                ),
                (true, _) => (false, "UNEXPECTED: good kernel rejected".to_string()),
                (false, false) if rejected => (true, format!("ok: rejected ({} cases)", sm.failed)),
                (false, false) if shard.is_some() => (
                    true,
                    format!(
                        "not held in shard {}: it is held on the whole default suite",
                        shard.expect("a shard")
                    ),
                ),
                (false, false) if suite_name != "default" => (
                    true,
                    "not held here: its defect shows in the default suite".to_string(),
                ),
                (false, false) => (
                    true,
                    format!(
                        "not held here: its defect shows in {}",
                        if k.defect_mixed_only() {
                            defect
                                .iter()
                                .map(|d| format!("{d}+f32"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        } else {
                            defect.join(", ")
                        }
                    ),
                ),
                (false, true) if rejected => (true, format!("ok: rejected ({} cases)", sm.failed)),
                (false, true) => (false, "UNEXPECTED: known-bad kernel passed".to_string()),
            };
            all_ok &= ok;
            println!("{line}  {outcome}");
            if good && (!ok || verbose) {
                for r in results.iter().filter(|r| !r.conforms()).take(5) {
                    details += &format!("{} {}: {}", k.name(), r.id, r.verdict.name());
                    if let check::Verdict::Malformed(m) | check::Verdict::Unsupported(m) =
                        &r.verdict
                    {
                        details += &format!(" ({m})");
                    }
                    for o in r.outputs.iter().filter(|o| o.n_over > 0) {
                        details += &format!(
                            "; {}[{}] = {:e}, exact {:e}, ratio {} ({} of {} over)",
                            o.name,
                            o.index,
                            o.actual,
                            o.expected_f64,
                            report::fmt_ratio(o.worst_ratio),
                            o.n_over,
                            o.len
                        );
                    }
                    details += "\n";
                }
            }
        }
        if !details.is_empty() {
            println!("\n{details}");
        }
    }
    Ok(finish(all_ok))
}

/// The run's last line, and its exit code: 0 when every outcome was as expected, else 1.
fn finish(all_ok: bool) -> ExitCode {
    println!(
        "\n{}",
        if all_ok {
            "bnconf run: every good kernel conforms and every known-bad kernel held here is rejected"
        } else {
            "bnconf run: UNEXPECTED results (see above)"
        }
    );
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
