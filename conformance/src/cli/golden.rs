//! `bnconf golden`'s fast-path options: `--exact-path` and `--threads` (clap), for the
//! library's [`bnconf::fast::FastOptions`].

/// CLI options of the fast path (`bnconf golden ... --out-dir DIR`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FastArgs {
    /// Use the per-element exact path even where the fast path applies (slow; for checking).
    #[arg(long)]
    pub exact_path: bool,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores). Results do not
    /// depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

impl FastArgs {
    /// The library's options.
    pub fn options(&self) -> bnconf::fast::FastOptions {
        bnconf::fast::FastOptions {
            exact_path: self.exact_path,
            threads: self.threads,
        }
    }
}
