//! [`SuiteCase`], a generated case, and its conversions: the exact problem, the case file
//! object, the float kernels' case, the fast path's problem and the protocol's `case.json`.

use super::level::*;
use crate::error::{ConfError, Result};
use crate::fast::exact_f64 as q;
use crate::fast::FastProblem;
use crate::formats::case::{Case, CaseObject, Dtype, Literal};
use crate::formats::npy::NpyData;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::op::{Convention, Extent, Params};
use bnconf_spec::{Geometry, Layout, Op, Problem};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A cell input's values in the fast problem's width: all binary32 (f32, f16, bf16 cases) as
/// f32 (half the bytes, and the exact sums take the f32 buckets: the same sums), else as they
/// are. (Tested first, then converted at the exact length: a collect into an `Option` would
/// grow by doubling, up to twice the bytes.)
pub fn in_width(v: Vec<f64>) -> NpyData {
    if v.iter().all(|&e| (e as f32) as f64 == e) {
        NpyData::F32(v.iter().map(|&e| e as f32).collect())
    } else {
        NpyData::F64(v)
    }
}

/// A generated case: inputs are f64 values exactly representable in their dtype (`dtype` for
/// activations, `param_dtype` for the rest).
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteCase {
    /// Unique id: `op.layout.dtype.class`.
    pub id: String,
    /// Level.
    pub level: Level,
    /// Data class (what the case targets), e.g. `large-mean-1e4`.
    pub class: String,
    /// One line saying what the class targets.
    pub target: String,
    /// dtype of the activations (`x`, `dy`, `y`, `dx`).
    pub dtype: FloatFormat,
    /// dtype of every other input and output (`dtype`, or f32 in a mixed precision).
    pub param_dtype: FloatFormat,
    /// Op.
    pub op: Op,
    /// Layout.
    pub layout: Layout,
    /// Shape.
    pub shape: Vec<usize>,
    /// eps as an exact decimal string.
    pub eps: String,
    /// `running_update`: momentum as an exact decimal string.
    pub momentum: Option<String>,
    /// `running_update`: the convention.
    pub convention: Option<Convention>,
    /// Inputs by name, in the layout's order (cells) or `[C]` (`[R]` for `shard_count`).
    pub inputs: BTreeMap<String, Vec<f64>>,
    /// The `replicated` suite: rank r holds batch rows `offset_r .. offset_r + n_r` of the
    /// whole batch (`Σ n_r = N`, `n_r` may be 0). Empty for every other case.
    pub shard_sizes: Vec<usize>,
}

impl SuiteCase {
    /// The case's precision.
    pub fn precision(&self) -> Precision {
        Precision {
            act: self.dtype,
            param: self.param_dtype,
        }
    }

    /// The dtype of input or output `name`.
    pub fn dtype_of(&self, name: &str) -> FloatFormat {
        self.precision().of(name)
    }
    /// The exact problem (inputs are exact dyadic values of the dtype).
    pub fn problem(&self) -> Problem {
        let geom =
            Geometry::new(self.layout, &self.shape, usize::MAX).expect("generated shape is valid");
        let eps =
            bnconf_spec::exact::parse::parse_rational(&self.eps).expect("generated eps is valid");
        let inputs = self
            .inputs
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|&x| q(x)).collect()))
            .collect();
        Problem::new_with_params(self.op, geom, eps, inputs, self.params())
            .expect("generated case is valid")
    }

    /// The exact scalar parameters (`momentum`, `convention`).
    pub fn params(&self) -> Params {
        Params {
            momentum: self.momentum.as_ref().map(|a| {
                bnconf_spec::exact::parse::parse_rational(a).expect("generated momentum is valid")
            }),
            convention: self.convention,
        }
    }

    /// As a [`Case`] of the harness.
    pub fn to_case(&self) -> Case {
        let mut extra = serde_json::Map::new();
        extra.insert("level".into(), json!(self.level.name()));
        extra.insert("class".into(), json!(self.class));
        extra.insert("target".into(), json!(self.target));
        Case {
            id: self.id.clone(),
            dtype: Dtype::Float(self.dtype),
            param_dtype: Dtype::Float(self.param_dtype),
            eps_text: self.eps.clone(),
            momentum_text: self.momentum.clone(),
            problem: self.problem(),
            extra,
        }
    }

    /// The case for a float kernel of crate `kernels`.
    pub fn to_kernel_case(&self) -> bnconf_impl::Case {
        bnconf_impl::Case {
            op: bnconf_impl::Op::from_name(self.op.name()).expect("same op names"),
            layout: bnconf_impl::Layout::from_name(self.layout.name()).expect("same layout names"),
            shape: self.shape.clone(),
            dtype: bnconf_impl::Dtype::from_name(self.dtype.name()).expect("same dtype names"),
            param_dtype: bnconf_impl::Dtype::from_name(self.param_dtype.name())
                .expect("same dtype names"),
            eps: self.eps.parse::<f64>().expect("decimal eps"),
            inputs: self.inputs.clone(),
            params: bnconf_impl::Params {
                momentum: self
                    .momentum
                    .as_ref()
                    .map_or(0.0, |a| a.parse::<f64>().expect("decimal momentum")),
                convention: self
                    .convention
                    .map(|c| bnconf_impl::Convention::from_name(c.name()).expect("same names")),
            },
        }
    }

    /// The problem of this case for the fast path ([`crate::fast`]): its inputs are f64
    /// values of the case's dtypes.
    pub fn fast_problem(&self) -> Result<FastProblem> {
        let c = self;
        let geom = Geometry::new(c.layout, &c.shape, usize::MAX)?;
        let eps = bnconf_spec::exact::parse::parse_rational(&c.eps)
            .map_err(|e| ConfError::field("eps", e.to_string()))?;
        let mut cells = BTreeMap::new();
        let mut chan = BTreeMap::new();
        for (name, v) in &c.inputs {
            match Op::extent(name) {
                Extent::Cells => {
                    cells.insert(name.clone(), in_width(v.clone()));
                }
                _ => {
                    chan.insert(name.clone(), v.clone());
                }
            }
        }
        FastProblem::new(c.op, geom, eps, cells, chan)
    }

    /// `case.json` of the kernel directory protocol (FORMAT.md).
    pub fn protocol_json(&self) -> Value {
        let exact = |t: &str, what: &str| {
            bnconf_spec::exact::parse::parse_rational(t)
                .unwrap_or_else(|e| panic!("valid {what}: {e:?}"))
        };
        let bf16 = self.dtype == FloatFormat::BF16 || self.param_dtype == FloatFormat::BF16;
        let mut o = CaseObject::new(
            &self.id,
            self.op,
            self.layout,
            &self.shape,
            Dtype::Float(self.dtype),
        )
        .param_dtype(Dtype::Float(self.param_dtype))
        .eps(&self.eps, Literal::Number)
        .eps_exact(&exact(&self.eps, "eps"))
        .input_names(self.op.inputs())
        .output_names(self.op.outputs())
        .level_class_target(self.level.name(), &self.class, &self.target)
        .when(bf16, CaseObject::bf16_storage);
        if let (Some(a), Some(conv)) = (&self.momentum, self.convention) {
            o = o
                .momentum(a, Literal::Number)
                .momentum_exact(&exact(a, "momentum"))
                .convention(conv);
        }
        o.when(!self.shard_sizes.is_empty(), |o| {
            o.shards(&self.shard_sizes)
        })
        .into_value()
    }
}
