//! # bnconf — the conformance harness
//!
//! Formats (case, golden, npy, the kernel directory protocol), suites and generators
//! (deterministic by seed), the budget checker and reports, and the `bnconf` CLI.
//! The checker never trusts a float computation for an expected value: every expected value
//! comes from the exact reference in `spec`.

pub mod atomic;
pub mod budget;
pub mod case;
pub mod check;
pub mod error;
pub mod fast;
pub mod golden;
pub mod npy;
pub mod onnx;
pub mod protocol;
pub mod report;
pub mod suite;
pub mod vectors;
