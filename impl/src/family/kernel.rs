//! What a family kernel is: the [`FamilyKernel`] trait. A kernel belongs to one [`Family`]
//! (its two ops), returns only the outputs it computes (the statistics `mean`, `rstd` are
//! optional) and says whether it is [`Expected`] to conform.

use super::case::FamilyCase;
use super::vocab::{Family, FamilyOp};
use crate::{Dtype, Expected, Outputs, Unsupported};

/// A kernel of the normalization family under test.
pub trait FamilyKernel: Send + Sync {
    /// Stable, unique name, prefixed by its family (`ln-`, `rms-`, `gn-`; `bad-ln-`, ...).
    fn name(&self) -> &'static str;
    /// The family whose ops it runs (others are [`Unsupported`]).
    fn family(&self) -> Family;
    /// Whether it is meant to conform.
    fn expected(&self) -> Expected;
    /// The algorithm, and for a known-bad kernel its defect.
    fn description(&self) -> &'static str;
    /// The ops where a known-bad kernel's defect shows; on the others it computes exactly
    /// like a good kernel. Empty for good kernels.
    fn defective_ops(&self) -> &'static [FamilyOp] {
        &[]
    }
    /// The storage dtypes on which a known-bad kernel's defect can show (all of them but for
    /// a half-precision-only defect); on the others it computes like a good kernel.
    fn defect_dtypes(&self) -> &'static [Dtype] {
        Dtype::ALL
    }
    /// Whether a known-bad kernel's defect shows only in the mixed precisions (`f16+f32`,
    /// `bf16+f32`: half activations, f32 parameters and statistics), e.g. an f32 output
    /// computed from an intermediate kept in the half type.
    fn defect_mixed_only(&self) -> bool {
        false
    }
    /// Whether a known-bad kernel's defect can show in a storage precision named as the
    /// suites name them (`f32`, `f16`, `f16+f32`, ...): its activation dtype is one of
    /// [`FamilyKernel::defect_dtypes`], and the precision is mixed if the defect needs it.
    fn defect_shows_in(&self, precision: &str) -> bool {
        let act = precision.split('+').next().unwrap_or(precision);
        self.defect_dtypes().iter().any(|d| d.name() == act)
            && (!self.defect_mixed_only() || precision.contains('+'))
    }
    /// Whether a good kernel is built to conform at the range level (the `extreme` suite:
    /// squares that overflow or underflow the dtype); the others are not held there.
    fn range_robust(&self) -> bool {
        false
    }
    /// Outputs by name, each value representable in its dtype ([`FamilyCase::dtype_of`]).
    /// A malformed case is [`Unsupported`] with a reason starting `invalid case:` that names
    /// the field.
    fn run(&self, case: &FamilyCase) -> Result<Outputs, Unsupported>;
}
