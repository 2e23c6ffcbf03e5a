//! `bnconf` — the command-line interface. Exit codes (FORMAT.md): 0 conforming / success,
//! 1 a case does not conform, 2 the harness could not run (bad arguments or input).

use clap::{Args, Parser, Subcommand};
use conformance::case::{read_case_file, InputLimits};
use conformance::error::ConfError;
use conformance::golden;
use spec::exact::round::FloatFormat;
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
    /// Most elements of any one tensor (the shape's product included).
    #[arg(long, default_value_t = 1 << 27)]
    max_elems: usize,
    /// Largest case file accepted, in bytes.
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
    },
}

fn run(cli: Cli) -> Result<ExitCode, ConfError> {
    match cli.cmd {
        Cmd::Golden {
            case,
            output,
            out_dir,
            formats,
            limits,
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
            let c = read_case_file(&case, &limits.limits())?;
            let g = golden::compute(c)?;
            if let Some(dir) = out_dir {
                golden::write_out_dir(&g, &dir)?;
                return Ok(ExitCode::SUCCESS);
            }
            let text = serde_json::to_string_pretty(&golden::golden_json(&g, &fmts))
                .expect("serializable")
                + "\n";
            match output {
                Some(p) => conformance::atomic::write_bytes(&p, text.as_bytes())?,
                None => {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    out.write_all(text.as_bytes())
                        .map_err(|e| ConfError::io(std::path::Path::new("<stdout>"), e))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bnconf: error: {e}");
            ExitCode::from(2)
        }
    }
}
