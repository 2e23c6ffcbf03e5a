//! The fast path's problem: cell data types, [`FastProblem`] (inputs as binary floats), its
//! outputs and counters, and the exact value of a binary float.

use crate::error::{ConfError, Result};
use crate::formats::npy::NpyData;
use bnconf_spec::exact::round::{f64_to_rational, round_rational, FloatFormat};
use bnconf_spec::exact::{QSqrt, Rational};
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Op, Problem};
use num_traits::Signed;
use std::collections::BTreeMap;

/// An element type of cell data (exactly convertible to f64).
pub trait Cell: Copy + Send + Sync {
    /// Whether the type is f32 (whose exact sums take [`acc::F32Buckets`]).
    const IS_F32: bool;
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// The bits of an f32 (`IS_F32` only).
    fn f32_bits(self) -> u32;
}
impl Cell for f32 {
    const IS_F32: bool = true;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        self.to_bits()
    }
}
impl Cell for f64 {
    const IS_F32: bool = false;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        unreachable!("f32_bits of an f64")
    }
}

/// A problem whose inputs are binary floats: cell inputs (`x`, `dy`) as f32 or f64 arrays in
/// the layout's order, per-channel inputs as f64 values (each exactly the input value).
#[derive(Clone, Debug)]
pub struct FastProblem {
    /// The op.
    pub op: Op,
    /// Layout and shape.
    pub geom: Geometry,
    /// `eps`, exact.
    pub eps: Rational,
    /// `x`.
    pub x: NpyData,
    /// `dy` (ops that take it).
    pub dy: Option<NpyData>,
    /// Per-channel inputs by name (`gamma`, `beta`, `mean`, ...), length C each.
    pub chan: BTreeMap<String, Vec<f64>>,
}

/// Outputs of the fast path: per output name (in [`Op::outputs`] order), the correctly
/// rounded f64 and f32 values.
#[derive(Clone, Debug)]
pub struct FastOutputs {
    /// `(name, f64 values, f32 values)`.
    pub outputs: Vec<(&'static str, Vec<f64>, Vec<f32>)>,
    /// How many elements needed the exact fallback.
    pub stats: FastStats,
}

/// Counters of a fast evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastStats {
    /// Cell outputs computed.
    pub elements: u64,
    /// Of those, computed by the exact path (near a rounding boundary, out of the
    /// double-double range, or an exact zero).
    pub fallbacks: u64,
}

pub(super) fn promote(d: NpyData) -> NpyData {
    match d {
        NpyData::F32(v) => NpyData::F64(v.into_iter().map(|e| e as f64).collect()),
        d => d,
    }
}

impl FastProblem {
    /// Assemble a problem; checks names and lengths. Mixed f32/f64 cell inputs are stored as f64.
    pub fn new(
        op: Op,
        geom: Geometry,
        eps: Rational,
        mut cells: BTreeMap<String, NpyData>,
        chan: BTreeMap<String, Vec<f64>>,
    ) -> Result<FastProblem> {
        if !covers(op) {
            return Err(ConfError::field(
                "op",
                format!("the fast path does not cover `{}`", op.name()),
            ));
        }
        for &name in op.inputs() {
            let (got, want) = match Op::extent(name) {
                Extent::Cells => (cells.get(name).map(|d| d.len()), geom.len()),
                Extent::Channel | Extent::Shards => (chan.get(name).map(|d| d.len()), geom.c),
            };
            match got {
                None => {
                    return Err(ConfError::field(format!("inputs.{name}"), "missing"));
                }
                Some(n) if n != want => {
                    return Err(ConfError::field(
                        format!("inputs.{name}"),
                        format!("expected {want} values, got {n}"),
                    ))
                }
                _ => {}
            }
        }
        if eps.is_negative() {
            return Err(ConfError::field("eps", "must be >= 0"));
        }
        let mut x = cells.remove("x").expect("checked");
        let mut dy = cells.remove("dy");
        if let Some(d) = dy.take() {
            match (&x, &d) {
                (NpyData::F32(_), NpyData::F64(_)) | (NpyData::F64(_), NpyData::F32(_)) => {
                    x = promote(x);
                    dy = Some(promote(d));
                }
                _ => dy = Some(d),
            }
        }
        Ok(FastProblem {
            op,
            geom,
            eps,
            x,
            dy,
            chan,
        })
    }

    /// The same problem from an exact [`Problem`], if every input is a finite binary64 value
    /// (always the case for dtypes f64, f32, f16, bf16); cell data stored as f64.
    pub fn from_problem(p: &Problem) -> Option<FastProblem> {
        let mut cells = BTreeMap::new();
        let mut chan = BTreeMap::new();
        for &name in p.op.inputs() {
            let vals: Option<Vec<f64>> = p.inputs[name]
                .iter()
                .map(|v| v.as_rational().and_then(rational_to_f64_exact))
                .collect();
            let vals = vals?;
            match Op::extent(name) {
                Extent::Cells => {
                    cells.insert(name.to_string(), NpyData::F64(vals));
                }
                Extent::Channel | Extent::Shards => {
                    chan.insert(name.to_string(), vals);
                }
            }
        }
        FastProblem::new(p.op, p.geom.clone(), p.eps.clone(), cells, chan).ok()
    }
}

/// Whether the fast path computes `op`: the five normalising ops. The statistics ops
/// (`running_update`, `sync_stats`) have O(C·m) exact rational work on their own and go
/// through the exact path.
pub fn covers(op: Op) -> bool {
    !matches!(op, Op::RunningUpdate | Op::SyncStats)
}

/// `r` as an f64 if it is exactly one.
pub fn rational_to_f64_exact(r: &Rational) -> Option<f64> {
    let rd = round_rational(r, FloatFormat::F64);
    match rd.to_rational() {
        Some(v) if &v == r => Some(rd.to_f64()),
        _ => None,
    }
}

pub(super) fn rat(x: f64) -> Rational {
    f64_to_rational(x).expect("finite input")
}

/// The exact value of a finite f64 (callers have refused NaN and infinities; those panic).
pub fn exact_f64(x: f64) -> QSqrt {
    QSqrt::rational(rat(x))
}
