//! File formats of the public contract (docs/FORMAT.md): case files, golden files, npy arrays,
//! and the atomic (temp file + rename) writes every output goes through.

pub mod atomic;
pub mod case;
pub mod golden;
pub mod npy;
