//! Judging: the error budget `k·u·(cond+mag)` computed from the exact data (docs/DESIGN.md §3)
//! and the checker that compares computed outputs with the exact goldens under it.
//!
//! Rooms, lowest first: [`budget`] (the budget), [`verdict`] (what judging yields),
//! [`replicated`] (the exact per-rank parts of replicated cases), [`prepare`] (goldens, budgets
//! and approximations of each case), [`check`] (judging a kernel's outputs), [`ranks`] (judging
//! a replicated case from its ranks' outputs), [`diagnosis`] (the known-bad kernels run on the
//! failing cases), [`gate`] (CI gating on an expectations file).

pub mod check;
pub mod diagnosis;
pub mod family;
pub mod family_rows;
pub mod gate;
pub mod prepare;
pub mod ranks;
pub mod replicated;
pub mod verdict;

/// The budget lives in the precision table, below the generator (`crate::precision`).
pub use crate::precision::budget;
pub use check::run_kernel;
pub use prepare::{prepare, Prepared};
pub use verdict::{summarize, CaseResult, OutputResult, Summary, Verdict};
