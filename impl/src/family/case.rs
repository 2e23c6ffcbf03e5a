//! A case of the family as a kernel sees it ([`FamilyCase`]), and its validation: every
//! field checked, the error naming the field, the shape's sizes checked against the inputs before
//! anything is allocated from it.

use std::collections::BTreeMap;

use super::error::FamilyError;
use super::grouping::{group_dims, last_counts, Grouping};
use super::vocab::{is_family_activation, Affine, Family, FamilyLayout, FamilyOp, RmsConvention};
use crate::Dtype;

/// One problem for a family kernel. Input values are exactly representable in their dtype
/// (`dtype` for `x`, `dy`; `param_dtype` for `gamma`, `beta`), as impl's `Case` has them.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyCase {
    pub op: FamilyOp,
    /// `last` for layer_norm and rms_norm, a channel layout for group_norm.
    pub layout: FamilyLayout,
    pub shape: Vec<usize>,
    /// Storage dtype of `x`, `dy`, `y`, `dx`.
    pub dtype: Dtype,
    /// Storage dtype of `gamma`, `beta`, `dgamma`, `dbeta`, `mean`, `rstd`: `dtype`, or f32
    /// when `dtype` is f16 or bf16 (mixed precision).
    pub param_dtype: Dtype,
    /// `eps ≥ 0`, as the nearest f64 (a kernel rounds it to its working type).
    pub eps: f64,
    /// Layout `last` only (required there): the number of trailing axes normalized, 1..=3.
    pub normalized_ndim: Option<usize>,
    /// group_norm only (required there): the number of groups G, a divisor of C.
    pub groups: Option<usize>,
    /// Which parameters the case has (rms_norm: `weight` or `none`).
    pub affine: Affine,
    /// `standard`, or `offset` (rms_norm only).
    pub convention: RmsConvention,
    /// Inputs by name: exactly [`FamilyOp::inputs`] of `op` under `affine`.
    pub inputs: BTreeMap<String, Vec<f64>>,
}

impl FamilyCase {
    /// Storage dtype of input or output `name`.
    pub fn dtype_of(&self, name: &str) -> Dtype {
        if is_family_activation(name) {
            self.dtype
        } else {
            self.param_dtype
        }
    }

    /// Input `name` (present once [`Self::validate`] has passed).
    pub fn input(&self, name: &str) -> &[f64] {
        self.inputs.get(name).map_or(&[], |v| v.as_slice())
    }

    /// Checks every field against the op and returns the case's grouping. The error names
    /// the field: `layout` (not the op's), `normalized_ndim` (missing for `last`, given
    /// elsewhere, out of 1..=3 or leaving no batch axis), `groups` (missing for group_norm,
    /// given elsewhere, not dividing C), `shape`, `affine` (weight_bias for rms_norm),
    /// `convention` (offset outside rms_norm), `param_dtype`, `eps`, or an input's name
    /// (missing, unexpected, wrong length).
    pub fn validate(&self) -> Result<Grouping, FamilyError> {
        self.check()?;
        // The grouping's own checks (its sizes) passed in `check`.
        Ok(match (self.normalized_ndim, self.groups) {
            (Some(k), _) => Grouping::last(&self.shape, k)?,
            (_, groups) => Grouping::channels(self.layout, &self.shape, groups.unwrap_or(1))?,
        })
    }

    /// [`Self::validate`]'s checks, the same errors, without building the grouping (two
    /// words per cell).
    pub fn check(&self) -> Result<(), FamilyError> {
        let family = self.op.family();
        let is_last = family != Family::GroupNorm;
        if is_last != (self.layout == FamilyLayout::Last) {
            let want = if is_last {
                "`last`"
            } else {
                "a channel layout"
            };
            return Err(FamilyError::new(
                "layout",
                format!("op `{}` takes {want}, got `{}`", self.op, self.layout),
            ));
        }
        let only = |field: &str, given: bool, wanted: bool, what: &str| match (given, wanted) {
            (false, true) => Err(FamilyError::new(field, format!("required {what}"))),
            (true, false) => Err(FamilyError::new(field, format!("only allowed {what}"))),
            _ => Ok(()),
        };
        only(
            "normalized_ndim",
            self.normalized_ndim.is_some(),
            is_last,
            "for layout `last`",
        )?;
        only("groups", self.groups.is_some(), !is_last, "for group_norm")?;
        if family == Family::RmsNorm && self.affine.has_bias() {
            return Err(FamilyError::new(
                "affine",
                "rms_norm takes `weight` or `none` (it has no beta)",
            ));
        }
        if family != Family::RmsNorm && self.convention != RmsConvention::Standard {
            return Err(FamilyError::new(
                "convention",
                format!("`{}` is only for rms_norm", self.convention),
            ));
        }
        let half = matches!(self.dtype, Dtype::F16 | Dtype::BF16);
        if self.param_dtype != self.dtype && !(half && self.param_dtype == Dtype::F32) {
            return Err(FamilyError::new(
                "param_dtype",
                format!(
                    "`{}` with dtype `{}` (it is the dtype, or f32 for f16/bf16)",
                    self.param_dtype, self.dtype
                ),
            ));
        }
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(FamilyError::new(
                "eps",
                format!("{} is not a finite number ≥ 0", self.eps),
            ));
        }
        // Sizes first: inputs are checked against them before the grouping is built.
        let (cells, params) = match (self.normalized_ndim, self.groups) {
            (Some(k), _) => last_counts(&self.shape, k)?,
            (_, Some(groups)) => {
                let (n, c, s) = group_dims(self.layout, &self.shape, groups)?;
                (n * c * s, c)
            }
            (None, None) => unreachable!("checked above"),
        };
        let wanted = self.op.inputs(self.affine);
        for (name, v) in &self.inputs {
            if !wanted.contains(&name.as_str()) {
                return Err(FamilyError::new(
                    name.as_str(),
                    format!(
                        "not an input of `{}` with affine `{}` (expected {})",
                        self.op,
                        self.affine,
                        wanted.join(", ")
                    ),
                ));
            }
            let n = if is_family_activation(name) {
                cells
            } else {
                params
            };
            if v.len() != n {
                return Err(FamilyError::new(
                    name.as_str(),
                    format!("has {} values, expected {n}", v.len()),
                ));
            }
        }
        if let Some(name) = wanted.iter().find(|n| !self.inputs.contains_key(**n)) {
            return Err(FamilyError::new(
                *name,
                format!(
                    "missing: `{}` with affine `{}` needs it",
                    self.op, self.affine
                ),
            ));
        }
        Ok(())
    }
}
