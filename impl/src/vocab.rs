//! The vocabulary of a case (`FORMAT.md`): ops, conventions, layouts and dtypes with their
//! case-file names, the input and output names of each op, and which names are cell,
//! activation or per-shard arrays. The subject keeps its own copy of these (the harness's is
//! `bnconf_spec`'s), so the kernels under test stay independent of the reference.

use std::fmt;

use crate::real;

/// Defines a field-less enum with `ALL`, `name()`, `from_name()` and `Display`.
macro_rules! named_enum {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
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
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum!(
    /// A BatchNorm operation (see `FORMAT.md` for the exact meaning).
    Op {
        /// `x, gamma, beta -> y, mean, var`
        Forward = "forward",
        /// `x, dy, gamma -> dx, dgamma, dbeta`
        Backward = "backward",
        /// `x, gamma, beta, mean, var -> y`
        Eval = "eval",
        /// `x, gamma, beta, mean, m2 -> y`, with `var = m2 - mean²`
        SyncForward = "sync_forward",
        /// `x, dy, gamma, mean, m2, mean_dy, mean_dy_xhat -> dx, dgamma, dbeta`
        SyncBackward = "sync_backward",
        /// `x, running_mean, running_var -> new_mean, new_var` (momentum, convention)
        RunningUpdate = "running_update",
        /// `shard_count, shard_mean, shard_m2 -> mean, m2, var` (layout rows, `[C, R]`)
        SyncStats = "sync_stats",
    }
);

named_enum!(
    /// Running-statistics convention of `running_update` (see `FORMAT.md`).
    Convention {
        /// `new = (1-a)*old + a*batch`, unbiased running variance (factor 1 at m = 1).
        Pytorch = "pytorch",
        /// `new = a*old + (1-a)*batch`, biased (ONNX, Keras, Flax).
        Onnx = "onnx",
    }
);

named_enum!(
    /// Which row-major positions form a channel (see [`channel_cells`](crate::channel_cells)).
    Layout {
        /// `[C, m]`, row c.
        Rows = "rows",
        /// `[C, m]`, flat positions `c*m + s`.
        Flat = "flat",
        /// `[C, H, W]`.
        Chw = "chw",
        /// `[N, C, H, W]`, statistics over n, h, w.
        Nchw = "nchw",
        /// `[N, H, W, C]`, channels last.
        Nhwc = "nhwc",
        /// `[N, C]` (BatchNorm1d on 2-D input), statistics over n.
        Nc = "nc",
        /// `[N, C, L]`, statistics over n, l.
        Ncl = "ncl",
        /// `[N, C, D, H, W]` (BatchNorm3d), statistics over n, d, h, w.
        Ncdhw = "ncdhw",
        /// `[N, D, H, W, C]`, channels last, statistics over n, d, h, w.
        Ndhwc = "ndhwc",
    }
);

named_enum!(
    /// Storage dtype of a case's data.
    Dtype {
        F64 = "f64",
        F32 = "f32",
        /// IEEE binary16.
        F16 = "f16",
        /// bfloat16.
        BF16 = "bf16",
    }
);

impl Op {
    /// Input names, in the order of `FORMAT.md`.
    pub fn inputs(&self) -> &'static [&'static str] {
        match self {
            Op::Forward => &["x", "gamma", "beta"],
            Op::Backward => &["x", "dy", "gamma"],
            Op::Eval => &["x", "gamma", "beta", "mean", "var"],
            Op::SyncForward => &["x", "gamma", "beta", "mean", "m2"],
            Op::SyncBackward => &["x", "dy", "gamma", "mean", "m2", "mean_dy", "mean_dy_xhat"],
            Op::RunningUpdate => &["x", "running_mean", "running_var"],
            Op::SyncStats => &["shard_count", "shard_mean", "shard_m2"],
        }
    }

    /// Output names, in the order of `FORMAT.md`.
    pub fn outputs(&self) -> &'static [&'static str] {
        match self {
            Op::Forward => &["y", "mean", "var"],
            Op::Backward | Op::SyncBackward => &["dx", "dgamma", "dbeta"],
            Op::Eval | Op::SyncForward => &["y"],
            Op::RunningUpdate => &["new_mean", "new_var"],
            Op::SyncStats => &["mean", "m2", "var"],
        }
    }
}

/// Whether an input/output name is a cell array (the layout's shape: `x`, `dy`, `y`, `dx`)
/// rather than a per-channel array of length C.
pub fn is_cell_array(name: &str) -> bool {
    matches!(name, "x" | "dy" | "y" | "dx" | "shard_mean" | "shard_m2")
}

/// Whether an input/output name is an activation (stored in the case's `dtype`; every other
/// array is stored in its `param_dtype`).
pub fn is_activation(name: &str) -> bool {
    matches!(name, "x" | "dy" | "y" | "dx")
}

/// Whether a name is a per-shard array of length R shared by every channel (`shard_count`
/// of `sync_stats`, whose layout is `rows` with shape `[C, R]`).
pub fn is_shard_array(name: &str) -> bool {
    name == "shard_count"
}

impl Dtype {
    /// `v` correctly rounded (to nearest, ties to even) to this dtype, as an f64.
    pub fn round(self, v: f64) -> f64 {
        real::round_to(self, v)
    }

    /// Unit roundoff `u = 2^-p` (half an ulp of 1) for a `p`-bit significand.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Dtype::F64 => 2f64.powi(-53),
            Dtype::F32 => 2f64.powi(-24),
            Dtype::F16 => 2f64.powi(-11),
            Dtype::BF16 => 2f64.powi(-8),
        }
    }
}
