//! `bnconf` — the command-line interface. Exit codes (FORMAT.md): 0 conforming / success,
//! 1 a case does not conform, 2 the harness could not run (bad arguments or input).

mod bench;
mod golden;

use bnconf::error::ConfError;
use bnconf::formats::case::InputLimits;
use bnconf::judge::check::{self, summarize};
use bnconf::{protocol, report, suite};
use bnconf_spec::exact::round::FloatFormat;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bnconf",
    version,
    about = "Exact reference and conformance harness for BatchNorm kernels"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct LimitArgs {
    /// Most elements of any one tensor (the shape's product included) read from npy files by
    /// the fast exact path (`--out-dir`): 18-28 bytes per element, under 4 GB at the default.
    #[arg(long, default_value_t = 1 << 27)]
    max_elems: usize,
    /// Most elements of a case evaluated per element by the exact path (a golden written as
    /// JSON with -o or to stdout, and --out-dir cases the fast path does not cover:
    /// running_update, sync_stats, f16, bf16, --exact-path), and most values of one JSON array
    /// in a case file. 2-3.4 KB per element: 2^20 (the default) is 2-3.6 GB; larger cases
    /// take npy inputs and --out-dir (docs/HOSTILE.md).
    #[arg(long, default_value_t = bnconf::formats::case::DEFAULT_MAX_JSON_ELEMS)]
    max_json_elems: usize,
    /// Largest case file accepted, in bytes (only a regular file is read; a FIFO or device is
    /// refused).
    #[arg(long, default_value_t = 1 << 30)]
    max_file_bytes: u64,
    /// Largest |exponent| of a literal (decimal exponent, or binary for hex floats).
    #[arg(long, default_value_t = 10_000)]
    max_exponent: i64,
}

impl LimitArgs {
    fn limits(&self) -> InputLimits {
        let mut l = InputLimits {
            max_elems: self.max_elems,
            max_json_elems: self.max_json_elems,
            max_file_bytes: self.max_file_bytes,
            ..InputLimits::default()
        };
        l.number.max_exponent = self.max_exponent;
        l
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Exact golden outputs of a case file (FORMAT.md), to stdout, `-o FILE`, or `--out-dir DIR` (npy).
    Golden {
        /// The case file (`bnconf-case/1`).
        case: PathBuf,
        /// Write the golden JSON here (atomically) instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Write `<output>.f64.npy`, `<output>.f32.npy` and `golden.json` into DIR.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Float formats of the per-element arrays (default: f64,f32,f16,bf16).
        #[arg(long, value_delimiter = ',', default_value = "f64,f32,f16,bf16")]
        formats: Vec<String>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        fast: golden::FastArgs,
    },
    /// Time the fast exact reference against an f64 kernel and the naive exact path.
    Bench(bench::BenchArgs),
    /// Write a suite into DIR for an outside kernel (the kernel directory protocol).
    Export {
        #[command(flatten)]
        sel: SuiteArgs,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Only shard K of N (1 ≤ K ≤ N) of the suite's cases, by a hash of the case id: the N
        /// shards partition the suite (recorded in manifest.json; `check DIR` judges that shard).
        #[arg(long, value_name = "K/N")]
        shard: Option<report::shard::Shard>,
        /// `protocol` (the kernel directory protocol) or `stablehlo` (per case a StableHLO
        /// module with its inputs as constants, goldens and per-element budgets; f32, f64).
        #[arg(long, default_value = "protocol")]
        format: String,
    },
    /// Judge the outputs a kernel wrote into DIR, or (with --exec) export, run and judge.
    Check {
        /// A directory written by `bnconf export` and filled by a kernel.
        dir: Option<PathBuf>,
        /// Export the suite to a temporary directory, run `CMD ARGS DIR`, then judge. CMD is
        /// split into words as a POSIX shell does (quotes, backslashes; no expansion).
        #[arg(long, value_name = "CMD")]
        exec: Option<String>,
        /// Run --exec's CMD through `sh -c` (pipes, variables): DIR is `$1` and `$BNCONF_DIR`,
        /// appended as `"$@"` when CMD names neither.
        #[arg(long, requires = "exec")]
        exec_shell: bool,
        /// Kill the kernel's whole process group when it still runs after SECONDS; the run
        /// then fails (exit 1).
        #[arg(long, value_name = "SECONDS", default_value_t = protocol::exec::DEFAULT_TIMEOUT_S)]
        timeout: u64,
        /// Export into DIR (new or empty) instead of a temporary directory and keep it, with
        /// what the kernel wrote.
        #[arg(long, value_name = "DIR", requires = "exec")]
        keep_dir: Option<PathBuf>,
        /// Only shard K of N of the suite's cases (see `export --shard`).
        #[arg(long, value_name = "K/N")]
        shard: Option<report::shard::Shard>,
        #[command(flatten)]
        sel: SuiteArgs,
        #[command(flatten)]
        out: ReportArgs,
    },
    /// Built-in kernels: `--list`, or `NAME DIR` to fill DIR through the protocol.
    Kernel {
        /// List the kernels (NAME<TAB>good|known-bad<TAB>description).
        #[arg(long)]
        list: bool,
        /// Kernel name.
        name: Option<String>,
        /// Suite directory to fill.
        dir: Option<PathBuf>,
    },
    /// The default suite against every built-in kernel: a table kernel × level.
    Run {
        /// Suite (`default`, `extreme`, `scale` or `replicated`; `default` also runs the
        /// replicated kernels on `replicated`).
        #[arg(long, default_value = "default")]
        suite: String,
        /// Precisions, one column each (f32, f64, f16, bf16, f16+f32, bf16+f32).
        #[arg(long, value_delimiter = ',', default_value = "f32,f64")]
        dtypes: Vec<String>,
        /// Seed.
        #[arg(long, default_value_t = suite::DEFAULT_SEED)]
        seed: u64,
        /// Only these kernels (comma-separated).
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
        /// Print the failing cases of good kernels in detail.
        #[arg(long)]
        verbose: bool,
        /// Only shard K of N of the suite's cases (see `export --shard`).
        #[arg(long, value_name = "K/N")]
        shard: Option<report::shard::Shard>,
    },
    /// Write the committed golden vector set (default suite, exact + f64 + f32) into DIR.
    Vectors {
        /// Output directory (the repository's `vectors/`).
        #[arg(long, default_value = "vectors")]
        out: PathBuf,
        /// Seed of the suite.
        #[arg(long, default_value_t = suite::DEFAULT_SEED)]
        seed: u64,
        /// Precisions, comma-separated (f32, f64, f16, bf16, f16+f32, bf16+f32) [default:
        /// the committed set's, all six].
        #[arg(long, value_delimiter = ',')]
        dtypes: Vec<String>,
    },
    /// Check a vector set: manifest checksums, and every golden value recomputed exactly.
    Verify {
        /// The vector-set directory (holds `manifest.json`).
        #[arg(default_value = "vectors")]
        dir: PathBuf,
    },
    /// Shrink a failing case: a smaller case the kernel (--exec) still fails the same way.
    Shrink(bnconf::shrink::cli::ShrinkArgs),
    /// Judge ONNX's own BatchNormalization test data against the exact reference (docs/ONNX.md).
    Onnx {
        /// ONNX node test directories, or folders holding them [default: the copy of
        /// conformance/data/onnx built into bnconf, so it works from any directory].
        dirs: Vec<PathBuf>,
    },
}

#[derive(Args, Clone)]
struct SuiteArgs {
    /// Suite: `default` (core + conditioning), `extreme` (range), `scale` (large channels) or
    /// `replicated` (sync BN split across ranks).
    #[arg(long, default_value = "default")]
    suite: String,
    /// dtype of the cases: f32, f64, f16, bf16, or the mixed f16+f32 / bf16+f32 (activations in
    /// the first, parameters and statistics in f32). numpy's names (float32, ...) work too.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Seed of the generator.
    #[arg(long, default_value_t = suite::DEFAULT_SEED)]
    seed: u64,
    /// Only these ops (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Only these layouts (comma-separated).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<String>,
}

impl SuiteArgs {
    fn generate(&self) -> Result<(suite::Suite, suite::Precision, suite::Filter), ConfError> {
        let dtype = bnconf::testing::parse_precision(&self.dtype).map_err(|_| {
            ConfError::field(
                "--dtype",
                format!(
                    "{:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32",
                    self.dtype
                ),
            )
        })?;
        let mut filter = suite::Filter::default();
        for o in &self.ops {
            filter.ops.push(
                bnconf_spec::Op::from_name(o)
                    .ok_or_else(|| ConfError::field("--ops", format!("unknown op {o:?}")))?,
            );
        }
        for l in &self.layouts {
            filter.layouts.push(
                bnconf_spec::Layout::from_name(l).ok_or_else(|| {
                    ConfError::field("--layouts", format!("unknown layout {l:?}"))
                })?,
            );
        }
        let s = suite::generate_in(&self.suite, &[dtype], self.seed, &filter).ok_or_else(|| {
            ConfError::field(
                "--suite",
                format!(
                    "unknown suite {:?} (default, extreme, scale, replicated)",
                    self.suite
                ),
            )
        })?;
        Ok((s, dtype, filter))
    }
}

#[derive(Args, Clone)]
struct ReportArgs {
    /// Write a machine-readable report (JSON).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write a JUnit XML report.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Unsupported cases count as not conforming.
    #[arg(long)]
    require_all: bool,
    /// Most failing cases printed in detail (worst first).
    #[arg(long, default_value_t = 20)]
    max_details: usize,
    /// Write a self-contained HTML page (plots of the ratios, worst elements, diagnosis).
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Accepted failures (`bnconf-expectations/1`): listed failures do not fail the run; a
    /// new failure does, and so does a listed case that now passes (stale).
    #[arg(long, value_name = "FILE")]
    expectations: Option<PathBuf>,
    /// Write the current failures as an expectations file.
    #[arg(long, value_name = "FILE")]
    write_expectations: Option<PathBuf>,
    /// Skip the diagnosis (running every known-bad kernel on the failing cases).
    #[arg(long)]
    no_diagnosis: bool,
}

fn run(cli: Cli) -> Result<ExitCode, ConfError> {
    match cli.cmd {
        Cmd::Golden {
            case,
            output,
            out_dir,
            formats,
            limits,
            fast,
        } => {
            let mut fmts = Vec::new();
            for f in &formats {
                fmts.push(FloatFormat::from_name(f).ok_or_else(|| {
                    ConfError::field(
                        "--formats",
                        format!("unknown format {f:?} (f64, f32, f16, bf16)"),
                    )
                })?);
            }
            if let Some(dir) = &out_dir {
                // All or nothing: a failure leaves no file in DIR (staged, then moved).
                bnconf::formats::atomic::write_dir_atomic(dir, |stage| {
                    bnconf::fast::golden_to_dir(&case, &limits.limits(), stage, &fast.options())
                })?;
                return Ok(ExitCode::SUCCESS);
            }
            let doc = bnconf::fast::golden_doc(&case, &limits.limits(), &fmts, &fast.options())?;
            let text = serde_json::to_string_pretty(&doc).expect("serializable") + "\n";
            match output {
                Some(p) => bnconf::formats::atomic::write_bytes(&p, text.as_bytes())?,
                None => {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    match out.write_all(text.as_bytes()) {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                            return Ok(ExitCode::from(141));
                        }
                        r => r.map_err(|e| ConfError::io(std::path::Path::new("<stdout>"), e))?,
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(a) => {
            bench::cli(&a)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Export {
            sel,
            out,
            shard,
            format,
        } => {
            let (mut s, dtype, filter) = sel.generate()?;
            if let Some(sh) = shard {
                sh.apply(&mut s);
            }
            if format != "protocol" {
                return protocol::stablehlo::cli(&format, &s, dtype, &filter, &out, shard);
            }
            protocol::export(&s, dtype, &filter, &out)?;
            if let Some(sh) = shard {
                report::shard::record_in_manifest(&out, sh)?;
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
        Cmd::Check {
            dir,
            exec,
            exec_shell,
            timeout,
            keep_dir,
            shard,
            sel,
            out,
        } => {
            let exec = exec.map(|cmd| ExecArgs {
                opts: protocol::exec::ExecOptions {
                    cmd,
                    shell: exec_shell,
                    timeout: std::time::Duration::from_secs(timeout),
                },
                keep_dir,
            });
            cmd_check(dir, exec, shard, sel, out)
        }
        Cmd::Kernel { list, name, dir } => {
            if list {
                for k in bnconf_impl::all_kernels() {
                    let v = match k.verdict() {
                        bnconf_impl::Verdict::Good => "good",
                        bnconf_impl::Verdict::KnownBad => "known-bad",
                    };
                    println!("{}\t{v}\t{}", k.name(), k.description());
                }
                // Replicated kernels: they run the `replicated` suite's cases, all ranks.
                for k in bnconf_impl::all_replicated_kernels() {
                    let v = match k.verdict() {
                        bnconf_impl::Verdict::Good => "good",
                        bnconf_impl::Verdict::KnownBad => "known-bad",
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
            } else {
                let k = bnconf_impl::kernel_by_name(&name).ok_or_else(|| {
                    ConfError::field(
                        "NAME",
                        format!("unknown kernel {name:?} (see bnconf kernel --list)"),
                    )
                })?;
                protocol::run_kernel_dir(k.as_ref(), &dir)?
            };
            eprintln!("bnconf: kernel {name} ran {n} cases in {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            suite,
            dtypes,
            seed,
            kernels: only,
            verbose,
            shard,
        } => {
            let precs = dtypes
                .iter()
                .map(|d| {
                    bnconf::testing::parse_precision(d).map_err(|_| {
                        ConfError::field(
                            "--dtypes",
                            format!("{d:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            cmd_run(&suite, &precs, seed, &only, verbose, shard)
        }
        Cmd::Shrink(a) => bnconf::shrink::cli::run(&a),
        Cmd::Onnx { dirs } => {
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
        Cmd::Vectors { out, seed, dtypes } => {
            let names = if dtypes.is_empty() {
                bnconf::suite::vectors::DEFAULT_PRECISIONS
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            } else {
                dtypes
            };
            let precs = bnconf::suite::vectors::parse_precisions(&names)?;
            let w = bnconf::suite::vectors::write(&out, seed, &precs)?;
            for r in &w.removed {
                eprintln!("bnconf: removed stale {}", out.join(r).display());
            }
            eprintln!(
                "bnconf: wrote {} files ({} bytes) to {}",
                w.files,
                w.bytes,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify { dir } => {
            let rep = bnconf::suite::vectors::verify(&dir)?;
            print!("{}", bnconf::suite::vectors::render(&rep, &dir));
            Ok(if rep.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// `check --exec`: the command and where to run it.
struct ExecArgs {
    opts: protocol::exec::ExecOptions,
    keep_dir: Option<PathBuf>,
}

fn cmd_check(
    dir: Option<PathBuf>,
    exec: Option<ExecArgs>,
    shard: Option<report::shard::Shard>,
    sel: SuiteArgs,
    out: ReportArgs,
) -> Result<ExitCode, ConfError> {
    let code = check_inner(dir, exec, shard, sel, out);
    protocol::exec::main_done();
    code
}

fn check_inner(
    dir: Option<PathBuf>,
    exec: Option<ExecArgs>,
    shard: Option<report::shard::Shard>,
    sel: SuiteArgs,
    out: ReportArgs,
) -> Result<ExitCode, ConfError> {
    // The expectations file is read first: a bad one is exit 2 before any work.
    let expectations = match &out.expectations {
        Some(p) => Some(report::expectations::read(p)?),
        None => None,
    };
    let mut harness_failure = None;
    let (s, dtype, dir, shard, _work) = match (dir, exec) {
        (Some(d), None) => {
            let (s, dtype, _) = protocol::regenerate(&d)?;
            let recorded = report::shard::from_manifest_dir(&d)?;
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
            let (mut s, dtype, filter) = sel.generate()?;
            if let Some(sh) = shard {
                sh.apply(&mut s);
            }
            let work = match &keep {
                Some(k) => protocol::exec::WorkDir::kept(k)?,
                None => protocol::exec::WorkDir::temporary()?,
            };
            let tmp = work.path().to_path_buf();
            if let Some(sig) = protocol::exec::export_into(&work, &s, dtype, &filter, shard)? {
                drop(work);
                return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8));
            }
            let shown = format!("`{}` on {}", ex.opts.cmd, tmp.display());
            match protocol::exec::run(&ex.opts, &tmp)? {
                protocol::exec::Outcome::Exited(status) if !status.success() => {
                    eprintln!(
                        "bnconf: warning: {shown} exited with {status}; judging what it wrote"
                    );
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
                    return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8));
                }
            }
            if keep.is_some() {
                eprintln!(
                    "bnconf: kept the suite directory and the kernel's outputs in {}",
                    tmp.display()
                );
            }
            (s, dtype, tmp, shard, Some(work))
        }
        (None, None) => return Err(ConfError::field("check", "give a suite DIR or --exec CMD")),
    };
    protocol::verify_inputs(&dir, &s)?;
    let prepared = check::prepare(&s.cases)?;
    let results: Vec<check::CaseResult> = prepared
        .iter()
        .map(|p| protocol::read_outputs(&dir, p))
        .collect();
    let diagnosis = if out.no_diagnosis {
        None
    } else {
        Some(report::diagnosis::diagnose(&prepared, &results))
    };
    let gate = expectations
        .as_ref()
        .map(|e| report::expectations::gate(e, &results, out.require_all));
    let ctx = report::Context {
        suite: &s.name,
        dtype: dtype.static_name(),
        results: &results,
        cases: &s.cases,
        diagnosis: diagnosis.as_deref(),
        gate: gate.as_ref(),
        shard,
        harness_failure,
    };
    print!("{}", report::human_report(&ctx, out.max_details));
    if let Some(p) = &out.report {
        report::write_json_report(p, &ctx)?;
    }
    if let Some(p) = &out.junit {
        report::write_junit_report(p, &ctx)?;
    }
    if let Some(p) = &out.html {
        report::html::write(p, &ctx, &prepared)?;
    }
    if let Some(p) = &out.write_expectations {
        let n = report::expectations::write(p, &results, out.require_all, ctx.diag())?;
        eprintln!("bnconf: wrote {n} expected failures to {}", p.display());
    }
    let sm = summarize(&results);
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
    shard: Option<report::shard::Shard>,
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
        let prepared = check::prepare(&s.cases)?;
        let mut rows = Vec::new();
        if name == "replicated" {
            for k in bnconf_impl::all_replicated_kernels() {
                if wanted(k.name()) {
                    rows.push(RunRow {
                        name: k.name(),
                        good: k.verdict() == bnconf_impl::Verdict::Good,
                        shows: "replicated",
                        results: bnconf::judge::replicated::run_kernel(k.as_ref(), &prepared),
                    });
                }
            }
        } else {
            for k in bnconf_impl::all_kernels() {
                if wanted(k.name()) {
                    rows.push(RunRow {
                        name: k.name(),
                        good: k.verdict() == bnconf_impl::Verdict::Good,
                        shows: k.defect_suite(),
                        results: check::run_kernel(k.as_ref(), &prepared),
                    });
                }
            }
        }
        if i > 0 {
            println!();
        }
        all_ok &= print_run_table(name, &s, dtypes, seed, &rows, verbose);
    }
    println!(
        "\n{}",
        if all_ok {
            "bnconf run: every good kernel conforms and every known-bad kernel held here is rejected"
        } else {
            "bnconf run: UNEXPECTED results (see above)"
        }
    );
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
        "forward, backward, running_update × nchw, nhwc split across 2, 3, 4, 8 ranks (equal, unequal, one empty), the ranks simulated in process, in"
    } else {
        "every op × layout in"
    };
    println!("bnconf run: suite {suite_name} (seed {seed}), {} cases ({} excluded as ill-posed), {what} {names}", s.cases.len(), s.excluded.len());
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

/// Whether a panic is `print!`'s on a closed stdout (`bnconf shrink … | head`).
fn is_broken_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    msg.starts_with("failed printing to stdout") && msg.contains("os error 32")
}

fn main() -> ExitCode {
    // A reader that closes stdout early (`| head`) ends bnconf quietly, as it does other
    // Unix tools, with 128 + SIGPIPE: print!'s panic unwinds (so temporary directories are
    // removed on the way) and is not reported as a crash.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe(info.payload()) {
            default_hook(info)
        }
    }));
    let cli = Cli::parse();
    match std::panic::catch_unwind(move || run(cli)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("bnconf: error: {e}");
            ExitCode::from(2)
        }
        Err(p) if is_broken_pipe(p.as_ref()) => ExitCode::from(141),
        Err(p) => std::panic::resume_unwind(p),
    }
}
