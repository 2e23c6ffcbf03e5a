//! # bnconf-spec — the exact reference
//!
//! The source of truth is the seed spec (docs/SPEC.md: docstrings of
//! a Lean 4 development that proves these ops and their VJPs over the reals) and FORMAT.md.
//! This crate computes every op exactly: inputs are rationals (binary floats are dyadic
//! rationals), and every output is `a + b*sqrt(q)` in the quadratic field of its channel,
//! `q = var + eps` (docs/DESIGN.md §1).
//!
//! Invariants:
//! - no floating-point arithmetic in the math, no I/O; depends on no other crate of ours;
//! - each seed item S1–S31 is a function named after it ([`per_channel`], [`layout`]); the
//!   normalization family (F1–F8) is one computation over groupings ([`family`]);
//! - ops are written once over [`num::Scalar`]: with [`exact::QSqrt`] they are the reference,
//!   with [`num::Dual`] the exact Jacobian ([`vjp`]), so the closed forms can be checked
//!   against `J^T dy` exactly;
//! - bad input is an [`error::SpecError`] naming the field or constraint, never a panic.
#![forbid(unsafe_code)]

pub mod channel;
pub mod error;
pub mod exact;
pub mod family;
pub mod layout;
pub mod num;
pub mod op;
pub mod per_channel;
pub mod tensor;
pub mod vjp;

pub use error::SpecError;
pub use exact::{QSqrt, Rational, SumOfRoots};
pub use layout::{Geometry, Layout};
pub use op::{Op, Problem};
