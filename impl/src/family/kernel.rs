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
    /// Outputs by name, each value representable in its dtype ([`FamilyCase::dtype_of`]).
    /// A malformed case is [`Unsupported`] with a reason starting `invalid case:` that names
    /// the field.
    fn run(&self, case: &FamilyCase) -> Result<Outputs, Unsupported>;
}
