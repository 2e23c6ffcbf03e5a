//! The one error type of the reference. Each variant names the field (or constraint) at fault.

use thiserror::Error;

/// Why an op could not be evaluated. Variants cite the constraint they enforce.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// A required input is absent.
    #[error("inputs.{field}: missing (op `{op}` needs it)")]
    MissingInput { op: &'static str, field: String },
    /// An input the op does not take.
    #[error("inputs.{field}: not an input of op `{op}` (it takes {expected})")]
    UnknownInput {
        op: &'static str,
        field: String,
        expected: String,
    },
    /// (C2) An input has the wrong number of elements.
    #[error("inputs.{field}: expected {expected} values for shape {shape:?}, got {got}")]
    Length {
        field: String,
        expected: usize,
        got: usize,
        shape: Vec<usize>,
    },
    /// (C3) The shape does not fit the layout, is empty, or its product overflows.
    #[error("shape: {reason}")]
    Shape { reason: String },
    /// (C1) `var + eps` (or `m2 - mean^2 + eps`) is not positive.
    #[error("{what} of channel {channel} is {value}, but must be > 0 (C1)")]
    NonPositiveVariance {
        channel: usize,
        what: &'static str,
        value: String,
    },
    /// `eps` must be non-negative.
    #[error("eps: must be >= 0, got {value}")]
    NegativeEps { value: String },
    /// An irrational value where the op needs a rational one.
    #[error("inputs.{field}[{index}]: irrational values are only accepted for mean_dy_xhat")]
    Irrational { field: String, index: usize },
    /// A handed-in `mean_dy_xhat` outside its channel's field Q(sqrt(q)).
    #[error("inputs.mean_dy_xhat[{channel}]: radicand {radicand} is not in Q(sqrt({q})) of its channel (D/q must be a rational square)")]
    NotInField {
        channel: usize,
        radicand: String,
        q: String,
    },
    /// A scalar parameter the op needs is absent (`momentum`, `convention`).
    #[error("{field}: missing (op `{op}` needs it)")]
    MissingParam {
        op: &'static str,
        field: &'static str,
    },
    /// A scalar parameter out of its range.
    #[error("{field}: {reason}, got {value}")]
    BadParam {
        field: &'static str,
        reason: &'static str,
        value: String,
    },
    /// The op does not take this layout.
    #[error("layout: op `{op}` takes layout {expected}, got `{got}`")]
    LayoutNotSupported {
        op: &'static str,
        expected: &'static str,
        got: &'static str,
    },
    /// (C5) A shard count that is not a non-negative integer.
    #[error("inputs.shard_count[{index}]: must be a non-negative integer, got {value} (C5)")]
    ShardCount { index: usize, value: String },
    /// (C6) Every shard is empty.
    #[error("inputs.shard_count: the counts sum to 0; at least one shard must hold a cell (C6)")]
    NoCells,
}
