//! Float BatchNorm kernels under test: correct ("good") kernels and deliberately defective
//! ("known-bad") negative controls, behind one small API the conformance harness drives.
//!
//! Ops, layouts and input/output names follow `FORMAT.md`. Every kernel is a [`Kernel`];
//! [`all_kernels`] lists them in a fixed order. All kernels support every op, layout and dtype.
//!
//! Inside, each kernel is a recipe (working precision, moment algorithm, summation order and,
//! for a known-bad one, one defect) run by a single generic channel-wise driver over a float
//! type (`f32` or `f64`); f16 and bf16 data are computed in f32 and rounded at the end.

mod catalog;
pub mod family;
mod kernel;
mod layout;
mod real;
mod recipe;
mod replicated;
mod stats;
mod vocab;

pub use catalog::{all_kernels, kernel_by_name, kernel_in_f64};
pub use family::{
    all_family_kernels, family_kernel_by_name, family_kernels, Affine, Family, FamilyCase,
    FamilyError, FamilyKernel, FamilyLayout, FamilyOp, RmsConvention,
};
pub use kernel::{Case, Expected, Kernel, Outputs, Params, Unsupported};
pub use layout::{channel_cells, channel_dims};
pub use recipe::validate;
pub use replicated::{all_replicated_kernels, replicated_kernel_by_name, ReplicatedKernel};
pub use vocab::{is_activation, is_cell_array, is_shard_array, Convention, Dtype, Layout, Op};
