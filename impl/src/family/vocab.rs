//! The family's vocabulary as a kernel sees it (FORMAT.md "Planned for bnconf 0.4: the
//! normalization family"): families, ops, layouts, `affine` and `convention`, each with its
//! case-file name. The kernels keep their own copy of these names, separate from the
//! reference's (`bnconf_spec::family`), as impl's `vocab.rs` does for BatchNorm.

use std::fmt;

use super::error::FamilyError;

/// Defines a field-less enum with `ALL`, `name()`, `from_name()`, `parse()` (errors name the
/// case-file field) and `Display`.
macro_rules! family_enum {
    ($(#[$m:meta])* $ty:ident ($field:literal) { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty { $($(#[$vm])* $v),+ }
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$v),+];
            /// The name used in case files.
            pub fn name(&self) -> &'static str {
                match self { $($ty::$v => $s),+ }
            }
            /// Inverse of [`Self::name`].
            pub fn from_name(name: &str) -> Option<$ty> {
                match name { $($s => Some($ty::$v),)+ _ => None }
            }
            /// [`Self::from_name`], or an error naming the case-file field and the choices.
            pub fn parse(name: &str) -> Result<$ty, FamilyError> {
                Self::from_name(name).ok_or_else(|| {
                    let choices: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
                    FamilyError::new(
                        $field,
                        format!("unknown value {name:?} (expected one of {})", choices.join(", ")),
                    )
                })
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

family_enum!(
    /// A family (`--family`): which ops a kernel of that family implements.
    Family ("family") {
        LayerNorm = "layer_norm",
        RmsNorm = "rms_norm",
        GroupNorm = "group_norm",
    }
);

family_enum!(
    /// An op of the family.
    FamilyOp ("op") {
        /// `x, gamma, beta -> y, mean?, rstd?` on layout `last`.
        LayerNorm = "layer_norm",
        /// `x, dy, gamma -> dx, dgamma, dbeta` on layout `last`.
        LayerNormBackward = "layer_norm_backward",
        /// `x, gamma -> y, rstd?` on layout `last`.
        RmsNorm = "rms_norm",
        /// `x, dy, gamma -> dx, dgamma` on layout `last`.
        RmsNormBackward = "rms_norm_backward",
        /// `x, gamma, beta -> y, mean?, rstd?` on a channel layout.
        GroupNorm = "group_norm",
        /// `x, dy, gamma -> dx, dgamma, dbeta` on a channel layout.
        GroupNormBackward = "group_norm_backward",
    }
);

family_enum!(
    /// A layout of the family: `last` (layer_norm, rms_norm) or a channel layout (group_norm).
    FamilyLayout ("layout") {
        /// `[*batch, *normalized]`, the trailing `normalized_ndim` axes normalized.
        Last = "last",
        /// `[N, C, H, W]`.
        Nchw = "nchw",
        /// `[N, H, W, C]`.
        Nhwc = "nhwc",
        /// `[N, C]`.
        Nc = "nc",
        /// `[N, C, L]`.
        Ncl = "ncl",
        /// `[N, C, D, H, W]`.
        Ncdhw = "ncdhw",
        /// `[N, D, H, W, C]`.
        Ndhwc = "ndhwc",
    }
);

family_enum!(
    /// Which affine parameters a case has (`affine`).
    Affine ("affine") {
        /// `gamma` and `beta`.
        WeightBias = "weight_bias",
        /// `gamma` only: beta = 0, no `dbeta`.
        Weight = "weight",
        /// Neither: weight 1, bias 0, no `dgamma`, no `dbeta`.
        None = "none",
    }
);

family_enum!(
    /// The weight convention (`convention`; only rms_norm has `offset`).
    RmsConvention ("convention") {
        /// `y = gamma·xhat`.
        Standard = "standard",
        /// `y = (1 + gamma)·xhat` (Gemma); `dgamma` is with respect to that `gamma`.
        Offset = "offset",
    }
);

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
