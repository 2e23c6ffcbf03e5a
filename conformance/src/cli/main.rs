//! `bnconf` — the command-line interface. Exit codes (FORMAT.md): 0 conforming / success,
//! 1 a case does not conform, 2 the harness could not run (bad arguments or input).
//!
//! This file holds the arguments (clap) and the dispatch; each subcommand's work is in its
//! own file (`run.rs`, `check.rs`, `export.rs`, ...).

use bnconf::error::ConfError;
use bnconf::formats::case::InputLimits;
use bnconf::{protocol, suite};
use bnconf_spec::exact::round::FloatFormat;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod check;
mod check_family;
mod export;
mod golden;
mod kernel;
mod onnx;
mod run;
mod shrink;
mod stablehlo;
mod vectors;

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

// One value per run, parsed once: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
        shard: Option<suite::shard::Shard>,
        /// `protocol` (the kernel directory protocol), `stablehlo` (per case a StableHLO
        /// module with its inputs as constants, goldens and per-element budgets; f32, f64) or
        /// `onnx` (ONNX's backend-test layout: per case model.onnx, test_data_set_0/*.pb and
        /// per-element budgets).
        #[arg(long, default_value = "protocol")]
        format: String,
    },
    /// Judge the outputs a kernel wrote into DIR, or (with --exec) export, run and judge, or
    /// (with --case) judge one case of your own.
    Check {
        /// A directory written by `bnconf export` and filled by a kernel.
        dir: Option<PathBuf>,
        /// Judge this case file (`bnconf-case/1`, inputs inline or `{"npy": "path.npy"}`; a
        /// normalization-family case file too) instead of a suite: against the kernel's
        /// outputs in --outputs DIR.
        #[arg(long, value_name = "CASE.json", requires = "outputs", conflicts_with_all = ["dir", "exec", "shard", "suite", "dtype", "seed", "ops", "layouts", "family"])]
        case: Option<PathBuf>,
        /// With --case: the directory holding the kernel's outputs, `<output>.npy` each (case
        /// dtype, the output's shape; a family case's `mean`/`rstd` may be left out).
        #[arg(long, value_name = "DIR", requires = "case")]
        outputs: Option<PathBuf>,
        /// With --case: most elements of one tensor (the shape's product included) read from
        /// npy files, checked before anything is allocated. A large case is judged in about 20
        /// bytes per element of its tensors (f32), several GB at the default of 2^27.
        #[arg(long, value_name = "N", requires = "case", default_value_t = 1 << 27)]
        max_elems: usize,
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
        shard: Option<suite::shard::Shard>,
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
        /// With --list: the normalization family's kernels instead (`layer_norm`, `rms_norm`,
        /// `group_norm` or `all`). NAME may name a family kernel without it.
        #[arg(long, requires = "list")]
        family: Option<String>,
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
        shard: Option<suite::shard::Shard>,
        /// The family: `batch_norm` (the suites above), `layer_norm`, `rms_norm`,
        /// `group_norm` (their family suites, one table each), or `all` (every family).
        #[arg(long, default_value = "batch_norm")]
        family: String,
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
        /// `batch_norm` (the set above), or `all`: the normalization family's set, written
        /// into OUT/family (its own manifest).
        #[arg(long, default_value = "batch_norm")]
        family: String,
    },
    /// Check a vector set: manifest checksums, and every golden value recomputed exactly.
    Verify {
        /// The vector-set directory (holds `manifest.json`).
        #[arg(default_value = "vectors")]
        dir: PathBuf,
    },
    /// Shrink a failing case: a smaller case the kernel (--exec) still fails the same way.
    Shrink(shrink::ShrinkArgs),
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
    /// The family: `batch_norm` (the suites above), `layer_norm`, `rms_norm`, `group_norm`
    /// (their family suites: `--suite default`, `extreme` or `scale`), or `all` (the three
    /// family suites).
    #[arg(long, default_value = "batch_norm")]
    family: String,
}

impl SuiteArgs {
    /// The family selection these flags make (`--family` other than `batch_norm`).
    fn family_selection(&self) -> Result<suite::family_select::FamilySelection, ConfError> {
        suite::family_select::FamilySelection::from_names(
            &self.family,
            &self.suite,
            &self.dtype,
            self.seed,
            &self.ops,
            &self.layouts,
        )
    }

    /// The selection these flags make (only `shard` of it, if given); errors name the flag.
    fn selection(&self, shard: Option<suite::shard::Shard>) -> Result<suite::Selection, ConfError> {
        let mut sel = suite::Selection::from_names(
            &self.suite,
            &self.dtype,
            self.seed,
            &self.ops,
            &self.layouts,
        )
        .map_err(|bad| match bad {
            suite::BadName::Dtype(d) => ConfError::field(
                "--dtype",
                format!("{d:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32"),
            ),
            suite::BadName::Op(o) => ConfError::field("--ops", format!("unknown op {o:?}")),
            suite::BadName::Layout(l) => {
                ConfError::field("--layouts", format!("unknown layout {l:?}"))
            }
            suite::BadName::Suite(n) => ConfError::field(
                "--suite",
                format!("unknown suite {n:?} (default, extreme, scale, replicated)"),
            ),
        })?;
        sel.shard = shard;
        Ok(sel)
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
            let lim = limits.limits();
            // A normalization-family case file (its `op` is not batch_norm's): its own golden.
            let family = |e: ConfError| -> Result<(), ConfError> {
                match &e {
                    ConfError::Field { field, .. }
                        if field == "op"
                            && protocol::family::is_family_case_file(&case, &lim)
                                .unwrap_or(false) =>
                    {
                        Ok(())
                    }
                    _ => Err(e),
                }
            };
            if let Some(dir) = &out_dir {
                // All or nothing: a failure leaves no file in DIR (staged, then moved).
                let bn = bnconf::formats::atomic::write_dir_atomic(dir, |stage| {
                    bnconf::fast::golden_to_dir(&case, &lim, stage, &fast.options())
                });
                if let Err(e) = bn {
                    family(e)?;
                    bnconf::formats::atomic::write_dir_atomic(dir, |stage| {
                        protocol::family::golden_to_dir(&case, &lim, stage)
                    })?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            let doc = match bnconf::fast::golden_doc(&case, &lim, &fmts, &fast.options()) {
                Ok(doc) => doc,
                Err(e) => {
                    family(e)?;
                    protocol::family::golden_doc(&case, &lim, &fmts)?
                }
            };
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
        } => export::export(sel, out, shard, format),
        Cmd::Check {
            case: Some(case),
            outputs: Some(outputs),
            max_elems,
            out,
            ..
        } => check::cmd_check_case(case, outputs, max_elems, out),
        Cmd::Check {
            dir,
            case: _,
            outputs: _,
            max_elems: _,
            exec,
            exec_shell,
            timeout,
            keep_dir,
            shard,
            sel,
            out,
        } => {
            let exec = exec.map(|cmd| check::ExecArgs {
                opts: protocol::exec::ExecOptions {
                    cmd,
                    shell: exec_shell,
                    timeout: std::time::Duration::from_secs(timeout),
                },
                keep_dir,
            });
            check::cmd_check(dir, exec, shard, sel, out)
        }
        Cmd::Kernel {
            list,
            name,
            dir,
            family,
        } => kernel::kernel(list, name, dir, family),
        Cmd::Run {
            suite,
            dtypes,
            seed,
            kernels: only,
            verbose,
            shard,
            family,
        } => run::run_family_or_bn(&family, &suite, &dtypes, seed, &only, verbose, shard),
        Cmd::Shrink(a) => shrink::run(&a),
        Cmd::Onnx { dirs } => onnx::onnx(dirs),
        Cmd::Vectors {
            out,
            seed,
            dtypes,
            family,
        } => vectors::write(out, seed, dtypes, &family),
        Cmd::Verify { dir } => vectors::verify(dir),
    }
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

/// glibc gives freed blocks of 128 KiB and more back to the kernel at once (`mmap`/`munmap`)
/// and trims the heap's top, so every per-case vector of the judge (inputs, budgets, outputs
/// read back) is faulted in afresh: page faults were about a third of `check DIR`'s profile on
/// the scale suite. Blocks up to 32 MiB (glibc's most) come from the heap instead, and freed
/// memory stays there for the next case. Allocation policy only: outputs are unchanged.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: `mallopt` sets allocator parameters; called first thing in `main`, before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

fn main() -> ExitCode {
    keep_freed_memory();
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
