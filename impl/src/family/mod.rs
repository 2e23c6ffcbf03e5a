//! Kernels of the normalization family (FORMAT.md "the normalization family"): LayerNorm,
//! RMSNorm (both conventions) and GroupNorm (InstanceNorm at `groups = C`) on every layout,
//! good ones and known-bad negative controls, behind the [`FamilyKernel`] trait.
//!
//! - [`vocab`]: the family's names (ops, layouts, `affine`, `convention`);
//! - [`error`]: [`FamilyError`], naming the field of a malformed case;
//! - [`grouping`]: the one [`Grouping`] helper (which cells form a group, which parameter a
//!   cell uses) every kernel reduces over;
//! - [`case`]: [`FamilyCase`] and its validation;
//! - [`kernel`]: the [`FamilyKernel`] trait;
//! - `driver`: the float algorithm, once over impl's working types, with the planted defects;
//! - `catalog`: every built-in family kernel ([`all_family_kernels`]).

pub mod case;
mod catalog;
mod driver;
pub mod error;
pub mod grouping;
pub mod kernel;
pub mod vocab;

pub use case::FamilyCase;
pub use catalog::{all_family_kernels, family_kernel_by_name, family_kernels};
pub use error::FamilyError;
pub use grouping::{channel_dims, Grouping};
pub use kernel::FamilyKernel;
pub use vocab::{
    is_family_activation, Affine, Family, FamilyLayout, FamilyOp, Named, RmsConvention,
};
