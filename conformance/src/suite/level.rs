//! Levels (what a case exercises) and precisions (the dtypes a suite is stored in), and
//! their names.

use crate::error::{ConfError, Result};
use bnconf_spec::exact::round::FloatFormat;

/// What a case exercises (docs/DESIGN.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Well-scaled data.
    Core,
    /// Large mean / small variance, constant channels, var ≈ eps, sparse, tiny m, far statistics.
    Conditioning,
    /// Squares or sums that overflow or underflow the dtype.
    Range,
}

impl Level {
    /// All levels.
    pub const ALL: [Level; 3] = [Level::Core, Level::Conditioning, Level::Range];
    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Core => "core",
            Level::Conditioning => "conditioning",
            Level::Range => "range",
        }
    }
    /// Parse.
    pub fn from_name(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// The storage precision of a suite: activations (`x`, `dy`, `y`, `dx`) in `act`, every
/// per-channel input and output (and `sync_stats`' statistics) in `param`. Uniform precisions
/// (`f64`, `f32`, `f16`, `bf16`) have `act == param`; the mixed ones (`f16+f32`, `bf16+f32`)
/// are autocast training's: half-precision activations, f32 parameters and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    /// Activations' dtype.
    pub act: FloatFormat,
    /// Parameters' and statistics' dtype.
    pub param: FloatFormat,
}

impl Precision {
    /// Every precision a suite can be generated in, in docs/FORMAT.md's order.
    pub const ALL: [Precision; 6] = [
        Precision::uniform(FloatFormat::F64),
        Precision::uniform(FloatFormat::F32),
        Precision::uniform(FloatFormat::F16),
        Precision::uniform(FloatFormat::BF16),
        Precision {
            act: FloatFormat::F16,
            param: FloatFormat::F32,
        },
        Precision {
            act: FloatFormat::BF16,
            param: FloatFormat::F32,
        },
    ];
    /// One dtype for everything.
    pub const fn uniform(f: FloatFormat) -> Precision {
        Precision { act: f, param: f }
    }
    /// Whether activations and parameters differ.
    pub fn is_mixed(self) -> bool {
        self.act != self.param
    }
    /// `f32`, `bf16+f32`, ...
    pub fn name(self) -> String {
        if self.is_mixed() {
            format!("{}+{}", self.act.name(), self.param.name())
        } else {
            self.act.name().to_string()
        }
    }
    /// [`Precision::name`] as a static string.
    pub fn static_name(self) -> &'static str {
        match (self.act, self.param) {
            (FloatFormat::F16, FloatFormat::F32) => "f16+f32",
            (FloatFormat::BF16, FloatFormat::F32) => "bf16+f32",
            (a, _) => a.name(),
        }
    }
    /// Inverse of [`Precision::name`] (only the precisions of [`Precision::ALL`]).
    pub fn from_name(s: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == s)
    }
    /// The dtype of input or output `name`.
    pub fn of(self, name: &str) -> FloatFormat {
        if bnconf_spec::tensor::is_activation(name) {
            self.act
        } else {
            self.param
        }
    }
}

/// A precision name: bnconf's (`f32`, `f64`, `f16`, `bf16`, `f16+f32`, `bf16+f32`) or
/// numpy's (`float32`, `float64`, `float16`, `bfloat16`, `float16+float32`, ...).
pub fn parse_precision(name: &str) -> Result<Precision> {
    let canonical: Vec<&str> = name
        .split('+')
        .map(|part| match part.trim() {
            "float64" | "double" => "f64",
            "float32" | "float" => "f32",
            "float16" | "half" => "f16",
            "bfloat16" => "bf16",
            other => other,
        })
        .collect();
    Precision::from_name(&canonical.join("+")).ok_or_else(|| {
        ConfError::field(
            "dtype",
            format!("unknown name {name:?} (see docs/FORMAT.md)"),
        )
    })
}
