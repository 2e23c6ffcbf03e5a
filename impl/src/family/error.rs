//! Why a family case is malformed: the field at fault and the reason, as one error type for
//! every check of the case (its vocabulary, its shape, its inputs).

use std::fmt;

/// A malformed family case: `field` is the case-file field or input name at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyError {
    /// The field (`shape`, `groups`, `normalized_ndim`, `affine`, `convention`, `eps`,
    /// `param_dtype`, `layout`, or an input name such as `gamma`).
    pub field: String,
    /// What is wrong with it, with the offending value.
    pub reason: String,
}

impl FamilyError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FamilyError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FamilyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.reason)
    }
}

impl std::error::Error for FamilyError {}
