//! Judging: the error budget `k·u·(cond+mag)` computed from the exact data (docs/DESIGN.md §3)
//! and the checker that compares computed outputs with the exact goldens under it.

pub mod budget;
pub mod check;
pub mod replicated;
