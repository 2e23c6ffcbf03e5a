//! The family's vocabulary as a kernel sees it (FORMAT.md "Planned for bnconf 0.4: the
//! normalization family"): families, ops, layouts, `affine` and `convention`, each with its
//! case-file name. The kernels keep their own copy of these names, separate from the
//! reference's (`bnconf_spec::family`), as impl's `vocab.rs` does for BatchNorm.

use std::fmt;

use super::error::FamilyError;

/// A name of the vocabulary: its values, each value's case-file name, and the case-file field
/// it fills (named by a parse error).
pub trait Named: Copy + Sized + 'static {
    /// The case-file field (`op`, `layout`, `affine`, `convention`, `family`).
    const FIELD: &'static str;
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// The name used in case files.
    fn name(&self) -> &'static str;
    /// Inverse of [`Named::name`].
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }
    /// [`Named::from_name`], or an error naming the field and the choices.
    fn parse(name: &str) -> Result<Self, FamilyError> {
        Self::from_name(name).ok_or_else(|| {
            let choices: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
            FamilyError::new(
                Self::FIELD,
                format!(
                    "unknown value {name:?} (expected one of {})",
                    choices.join(", ")
                ),
            )
        })
    }
}

/// [`Named`] (values and names listed once) and `Display` by name for a field-less enum.
macro_rules! named {
    ($ty:ident, $field:literal, { $($v:ident => $s:literal),+ $(,)? }) => {
        impl Named for $ty {
            const FIELD: &'static str = $field;
            const ALL: &'static [$ty] = &[$($ty::$v),+];
            fn name(&self) -> &'static str {
                match self { $($ty::$v => $s),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
                out.write_str(Named::name(self))
            }
        }
    };
}

/// A family (`--family`): which ops a kernel of that family implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `layer_norm`, `layer_norm_backward`.
    LayerNorm,
    /// `rms_norm`, `rms_norm_backward`.
    RmsNorm,
    /// `group_norm`, `group_norm_backward` (InstanceNorm at `groups = C`).
    GroupNorm,
}
named!(Family, "family", {
    LayerNorm => "layer_norm",
    RmsNorm => "rms_norm",
    GroupNorm => "group_norm",
});

/// An op of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FamilyOp {
    /// `x, gamma, beta -> y, mean?, rstd?` on layout `last`.
    LayerNorm,
    /// `x, dy, gamma -> dx, dgamma, dbeta` on layout `last`.
    LayerNormBackward,
    /// `x, gamma -> y, rstd?` on layout `last`.
    RmsNorm,
    /// `x, dy, gamma -> dx, dgamma` on layout `last`.
    RmsNormBackward,
    /// `x, gamma, beta -> y, mean?, rstd?` on a channel layout.
    GroupNorm,
    /// `x, dy, gamma -> dx, dgamma, dbeta` on a channel layout.
    GroupNormBackward,
}
named!(FamilyOp, "op", {
    LayerNorm => "layer_norm",
    LayerNormBackward => "layer_norm_backward",
    RmsNorm => "rms_norm",
    RmsNormBackward => "rms_norm_backward",
    GroupNorm => "group_norm",
    GroupNormBackward => "group_norm_backward",
});

/// A layout of the family: `last` (layer_norm, rms_norm) or a channel layout (group_norm),
/// the channel layouts by rank, channels-first ones before channels-last ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FamilyLayout {
    /// `[*batch, *normalized]`, the trailing `normalized_ndim` axes normalized.
    Last,
    /// No spatial axis: `[N, C]`.
    Nc,
    /// Channels first, one spatial axis: `[N, C, L]`.
    Ncl,
    /// Channels first, two spatial axes: `[N, C, H, W]`.
    Nchw,
    /// Channels first, three spatial axes: `[N, C, D, H, W]`.
    Ncdhw,
    /// Channels last, two spatial axes: `[N, H, W, C]`.
    Nhwc,
    /// Channels last, three spatial axes: `[N, D, H, W, C]`.
    Ndhwc,
}
named!(FamilyLayout, "layout", {
    Last => "last",
    Nc => "nc",
    Ncl => "ncl",
    Nchw => "nchw",
    Ncdhw => "ncdhw",
    Nhwc => "nhwc",
    Ndhwc => "ndhwc",
});

/// Which affine parameters a case has (`affine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Affine {
    /// `gamma` and `beta`.
    WeightBias,
    /// `gamma` only: beta = 0, no `dbeta`.
    Weight,
    /// Neither: weight 1, bias 0, no `dgamma`, no `dbeta`.
    None,
}
named!(Affine, "affine", {
    WeightBias => "weight_bias",
    Weight => "weight",
    None => "none",
});

/// The weight convention (`convention`; only rms_norm has `offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RmsConvention {
    /// `y = gamma·xhat`.
    Standard,
    /// `y = (1 + gamma)·xhat` (Gemma); `dgamma` is with respect to that `gamma`.
    Offset,
}
named!(RmsConvention, "convention", {
    Standard => "standard",
    Offset => "offset",
});

impl FamilyOp {
    /// The family the op belongs to.
    pub fn family(self) -> Family {
        match self {
            FamilyOp::LayerNorm | FamilyOp::LayerNormBackward => Family::LayerNorm,
            FamilyOp::RmsNorm | FamilyOp::RmsNormBackward => Family::RmsNorm,
            FamilyOp::GroupNorm | FamilyOp::GroupNormBackward => Family::GroupNorm,
        }
    }
    /// Whether it is a backward (takes `dy`).
    pub fn is_backward(self) -> bool {
        matches!(
            self,
            FamilyOp::LayerNormBackward | FamilyOp::RmsNormBackward | FamilyOp::GroupNormBackward
        )
    }
    /// Whether its statistic is centered (subtracts the group mean): all but rms_norm.
    pub fn centered(self) -> bool {
        self.family() != Family::RmsNorm
    }
    /// The inputs a case of this op has under `affine`, in FORMAT.md's order.
    pub fn inputs(self, affine: Affine) -> Vec<&'static str> {
        let mut v = vec!["x"];
        if self.is_backward() {
            v.push("dy");
        }
        if affine.has_weight() {
            v.push("gamma");
        }
        if affine.has_bias() && !self.is_backward() {
            v.push("beta");
        }
        v
    }
    /// Every output of a case of this op under `affine` (the optional ones included).
    pub fn outputs(self, affine: Affine) -> Vec<&'static str> {
        match (self.is_backward(), self.centered()) {
            (false, true) => vec!["y", "mean", "rstd"],
            (false, false) => vec!["y", "rstd"],
            (true, _) => {
                let mut v = vec!["dx"];
                if affine.has_weight() {
                    v.push("dgamma");
                }
                if affine.has_bias() {
                    v.push("dbeta");
                }
                v
            }
        }
    }
    /// The outputs a kernel may leave out: the statistics.
    pub fn optional_outputs(self) -> &'static [&'static str] {
        match (self.is_backward(), self.centered()) {
            (false, true) => &["mean", "rstd"],
            (false, false) => &["rstd"],
            (true, _) => &[],
        }
    }
}

impl Family {
    /// The family's ops: forward, then backward.
    pub fn ops(self) -> &'static [FamilyOp] {
        match self {
            Family::LayerNorm => &[FamilyOp::LayerNorm, FamilyOp::LayerNormBackward],
            Family::RmsNorm => &[FamilyOp::RmsNorm, FamilyOp::RmsNormBackward],
            Family::GroupNorm => &[FamilyOp::GroupNorm, FamilyOp::GroupNormBackward],
        }
    }
}

impl FamilyLayout {
    /// The rank of a channel layout; `None` for `last` (any rank ≥ normalized_ndim + 1).
    pub fn rank(self) -> Option<usize> {
        match self {
            FamilyLayout::Last => None,
            FamilyLayout::Nc => Some(2),
            FamilyLayout::Ncl => Some(3),
            FamilyLayout::Nchw | FamilyLayout::Nhwc => Some(4),
            FamilyLayout::Ncdhw | FamilyLayout::Ndhwc => Some(5),
        }
    }
    /// Whether the channel axis is the last one (`nhwc`, `ndhwc`).
    pub fn channels_last(self) -> bool {
        matches!(self, FamilyLayout::Nhwc | FamilyLayout::Ndhwc)
    }
}

impl Affine {
    /// Whether there is a `gamma` (and a `dgamma`).
    pub fn has_weight(self) -> bool {
        self != Affine::None
    }
    /// Whether there is a `beta` (and a `dbeta`).
    pub fn has_bias(self) -> bool {
        self == Affine::WeightBias
    }
}

/// Whether an input/output name is an activation (one value per cell, stored in the case's
/// `dtype`); the others (`gamma`, `beta`, `dgamma`, `dbeta`, `mean`, `rstd`) are stored in
/// its `param_dtype`.
pub fn is_family_activation(name: &str) -> bool {
    matches!(name, "x" | "dy" | "y" | "dx")
}
