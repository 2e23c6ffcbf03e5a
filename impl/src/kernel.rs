//! What a kernel is: the [`Case`] it is given, the [`Outputs`] it returns or why it is
//! [`Unsupported`], whether it is [`Expected`] to conform, and the [`Kernel`] trait itself.

use std::collections::BTreeMap;
use std::fmt;

use crate::vocab::{is_activation, Convention, Dtype, Layout, Op};

/// One problem for a kernel. Input values are exactly representable in `dtype` (a kernel
/// rounds them to `dtype` on reading anyway); cell arrays have the layout's shape, flattened
/// row-major, per-channel arrays have length C.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub op: Op,
    pub layout: Layout,
    pub shape: Vec<usize>,
    /// Storage dtype of the activations (`x`, `dy`, `y`, `dx`).
    pub dtype: Dtype,
    /// Storage dtype of every per-channel input and output (and of `sync_stats`' statistics):
    /// `dtype` itself, or f32 for the mixed precisions `f16+f32` / `bf16+f32` (autocast).
    pub param_dtype: Dtype,
    pub eps: f64,
    pub inputs: BTreeMap<String, Vec<f64>>,
    /// Scalar parameters of `running_update` (default for the other ops).
    pub params: Params,
}

/// Scalar parameters besides `eps`: `momentum` and `convention` of `running_update`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    /// The momentum as the nearest f64 of its exact value (a kernel rounds it to its
    /// working type, as it does `eps`).
    pub momentum: f64,
    /// The convention; required by `running_update`.
    pub convention: Option<Convention>,
}

/// Outputs by name; every value is representable in the case dtype.
pub type Outputs = BTreeMap<String, Vec<f64>>;

impl Case {
    /// Storage dtype of input or output `name`.
    pub fn dtype_of(&self, name: &str) -> Dtype {
        if is_activation(name) {
            self.dtype
        } else {
            self.param_dtype
        }
    }
}

/// Whether a kernel is meant to conform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expected {
    /// A correct algorithm: expected to conform.
    Good,
    /// A deliberate defect, kept as a negative control: expected to fail somewhere.
    KnownBad,
}

/// The kernel does not handle this case (op, layout, dtype) or the case is malformed
/// (then the reason starts with `invalid case:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

/// A BatchNorm kernel under test.
pub trait Kernel: Send + Sync {
    /// Stable, unique name (`twopass-f64`, `bad-onepass-var`, ...).
    fn name(&self) -> &'static str;
    /// Whether it is meant to conform.
    fn expected(&self) -> Expected;
    /// The algorithm, and for a known-bad kernel its defect.
    fn description(&self) -> &'static str;
    /// The ops where a known-bad kernel's defect shows; on the others it computes exactly
    /// like a good kernel. Empty for good kernels.
    fn defective_ops(&self) -> &'static [Op] {
        &[]
    }
    /// The suite whose cases show a known-bad kernel's defect: `default` for most, `scale`
    /// for block-merge defects (visible only on channels of more than one block).
    fn defect_suite(&self) -> &'static str {
        "default"
    }
    fn run(&self, case: &Case) -> Result<Outputs, Unsupported>;
}
