//! The normalization family (docs/DESIGN.md "one core, many groupings"; FORMAT.md "Ops of the
//! family"): LayerNorm, RMSNorm (both conventions), GroupNorm (InstanceNorm = `groups = C`)
//! and BatchNorm on every channel layout, written once over a [`Grouping`] (which cells form a
//! group, which parameter each cell uses) and a [`Norm`] (centered or not, which affine map).
//!
//! - [`grouping`]: the groupings of every layout (`last`, the six channel layouts, and the
//!   seed's layouts through their [`Geometry`](crate::layout::Geometry));
//! - [`norm`]: the one forward ([`normalize`]), its statistics, the closed-form backward
//!   (input gradient, `dgamma` as a [`SumOfRoots`](crate::exact::SumOfRoots), `dbeta`);
//! - [`vjp`]: the same backward as `Jᵀdy` of the definition by dual numbers;
//! - [`ops`]: the named items F1–F8 (docs/SPEC.md).
//!
//! The vocabulary here (layouts, `affine`, `convention`) is new and separate from
//! [`crate::layout::Layout`] and [`crate::op::Op`], which are unchanged.

pub mod grouping;
pub mod norm;
pub mod ops;
pub mod vjp;

pub use grouping::{ChannelLayout, Grouping};
pub use norm::{
    dbeta, dgamma, group_stats, normalize, normalize_backward, normalize_grad_input, Affine,
    Backward, Centering, Forward, Inputs, Norm, RmsConvention,
};
pub use ops::{
    batch_norm, batch_norm_backward, group_norm, group_norm_backward, layer_norm,
    layer_norm_backward, rms_norm, rms_norm_backward,
};
