//! # Use from `cargo test`: judge your own kernel against the exact reference
//!
//! A kernel is any closure from a [`KernelCase`] to its outputs. [`check_kernel`] runs it on
//! every case of a suite (`default`: every op and layout at the levels *core* and
//! *conditioning*; `extreme`: the *range* level) and judges every output element against the
//! exact golden value with the budget `k·u·(cond+mag)` of docs/DESIGN.md §3. The [`Report`]
//! says whether the kernel conforms and, when it does not, which cases fail, worst first, with
//! the element, expected, actual and budget.
//!
//! ```
//! use bnconf::testing::{check_kernel, KernelCase};
//! use std::collections::BTreeMap;
//!
//! /// A two-pass kernel in f64 that only knows `forward` (other ops: unsupported).
//! fn my_forward(case: &KernelCase) -> Option<BTreeMap<String, Vec<f64>>> {
//!     if case.op != "forward" {
//!         return None;
//!     }
//!     let (x, gamma, beta) = (case.input("x"), case.input("gamma"), case.input("beta"));
//!     let mut y = vec![0.0; x.len()];
//!     let (mut mean, mut var) = (vec![], vec![]);
//!     for c in 0..case.channels() {
//!         let cells = case.channel_cells(c);
//!         let m = cells.len() as f64;
//!         let mu = cells.iter().map(|&i| x[i]).sum::<f64>() / m;
//!         let v = cells.iter().map(|&i| (x[i] - mu).powi(2)).sum::<f64>() / m;
//!         let r = 1.0 / (v + case.eps).sqrt();
//!         for &i in &cells {
//!             y[i] = gamma[c] * (x[i] - mu) * r + beta[c];
//!         }
//!         mean.push(mu);
//!         var.push(v);
//!     }
//!     Some(BTreeMap::from([("y".into(), y), ("mean".into(), mean), ("var".into(), var)]))
//! }
//!
//! let report = check_kernel("default", "f64", my_forward);
//! assert!(report.ok(), "{report}");
//!
//! // The same kernel with the unbiased variance (a classic defect) is rejected.
//! let unbiased = |case: &KernelCase| {
//!     let mut out = my_forward(case)?;
//!     let m = case.cells_per_channel() as f64;
//!     let (y, var) = (out["y"].clone(), out["var"].clone());
//!     // Recompute y with var·m/(m−1) (m = 1 left alone).
//!     let x = case.input("x");
//!     let mut y2 = y;
//!     for c in 0..case.channels() {
//!         if m < 2.0 { continue; }
//!         let v = var[c] * m / (m - 1.0);
//!         let r = 1.0 / (v + case.eps).sqrt();
//!         for i in case.channel_cells(c) {
//!             y2[i] = case.input("gamma")[c] * (x[i] - out["mean"][c]) * r + case.input("beta")[c];
//!         }
//!     }
//!     out.insert("y".into(), y2);
//!     Some(out)
//! };
//! let report = check_kernel("default", "f64", unbiased);
//! assert!(!report.ok());
//! ```
//!
//! Outputs are values in the layout's flat (row-major) order, one `Vec<f64>` per output name
//! ([`KernelCase::outputs`]); per-channel outputs have length C. They are rounded to the case
//! dtype before judging, as writing them to an npy file of that dtype would (so an f32 kernel
//! may return its f32 results widened to f64, and an f64 computation is judged as the f32 a
//! kernel would store).
//!
//! ## Property tests on generated cases
//!
//! [`strategy()`] (proptest, also `any::<KernelCase>()`) and `KernelCase: quickcheck::Arbitrary`
//! generate adversarial cases of every op (shape first, then data of the classes above,
//! ill-posed cases left out); judge each with [`check_case`]:
//!
//! ```
//! use bnconf::testing::{check_case, KernelCase};
//! use proptest::prelude::*;
//!
//! fn my_kernel(case: &KernelCase) -> Option<std::collections::BTreeMap<String, Vec<f64>>> {
//!     // ... your kernel; here: the built-in two-pass f64 kernel of bnconf-impl.
//!     bnconf::testing::reference_kernel("twopass-f64")(case)
//! }
//!
//! proptest!(ProptestConfig::with_cases(32), |(case in any::<KernelCase>())| {
//!     let report = check_case(&case, my_kernel);
//!     prop_assert!(report.ok(), "{}", report);
//! });
//! ```

pub mod family;
pub mod in_memory;
pub mod in_memory_family;
pub mod strategy;

use crate::error::ConfError;
use crate::judge::check::{self, CaseResult, Prepared, Verdict};
use crate::par::*;
use crate::report::fmt_ratio;
use crate::suite::{self, SuiteCase};
use bnconf_spec::exact::parse::parse_rational;
use bnconf_spec::exact::round::f64_to_rational;
use bnconf_spec::op::{Convention, Params};
use bnconf_spec::{Geometry, Layout, Op, Problem};
use std::collections::BTreeMap;
use std::fmt;

/// Outputs of a kernel: values by output name, in the layout's flat order.
pub type Outputs = BTreeMap<String, Vec<f64>>;

/// A kernel as a boxed closure ([`reference_kernel`]).
pub type BoxedKernel = Box<dyn Fn(&KernelCase) -> Option<Outputs> + Send + Sync>;

/// One case for a kernel under test: the op, its layout and shape, the dtype, `eps` and the
/// inputs (every value exactly representable in the dtype, as f64, in the layout's flat
/// row-major order; per-channel inputs have length C).
///
/// Names are those of docs/FORMAT.md: ops `forward`, `backward`, `eval`, `sync_forward`,
/// `sync_backward`, `running_update`, `sync_stats`; layouts `rows`, `flat`, `chw`, `nchw`,
/// `nhwc`; dtypes `f64`, `f32`. Every field is also readable through a method of the same
/// name.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCase {
    /// Case id (`op.layout.dtype.class` in the suites).
    pub id: String,
    /// Op name.
    pub op: String,
    /// Layout name.
    pub layout: String,
    /// Shape of the cell arrays (`x`, `dy`, `y`, `dx`), in the layout's order.
    pub shape: Vec<usize>,
    /// dtype name of the activations `x`, `dy`, `y`, `dx` (`f32`, `f64`, `f16`, `bf16`).
    pub dtype: String,
    /// dtype name of every other input and output: `dtype`, or `f32` for the mixed
    /// precisions `f16+f32` and `bf16+f32`.
    pub param_dtype: String,
    /// eps, the nearest f64 of [`KernelCase::eps_exact`] (a kernel rounds it to its working
    /// type; the reference uses the exact value).
    pub eps: f64,
    /// eps exactly, as a decimal (`"1e-5"` is 1/100000).
    pub eps_exact: String,
    /// Inputs by name (docs/FORMAT.md), flat.
    pub inputs: BTreeMap<String, Vec<f64>>,
    /// `running_update`: the momentum (nearest f64 of the exact one), else `None`.
    pub momentum: Option<f64>,
    /// `running_update`: the momentum exactly, as a decimal.
    pub momentum_exact: Option<String>,
    /// `running_update`: the convention (`pytorch` or `onnx`), else `None`.
    pub convention: Option<String>,
    /// Level of the case (`core`, `conditioning`, `range`).
    pub level: String,
    /// Data class (what the case targets), e.g. `large-mean-1e4`.
    pub class: String,
    /// The op family: `batch_norm` (every op above), `layer_norm`, `rms_norm`, `group_norm`
    /// (docs/FORMAT.md, the normalization family; see [`family`]).
    pub family: String,
    /// Layout `last` (layer_norm, rms_norm): how many trailing axes are normalized, else `None`.
    pub normalized_ndim: Option<usize>,
    /// group_norm: the number of groups G (a divisor of C), else `None`.
    pub groups: Option<usize>,
    /// The family: `weight_bias`, `weight` or `none` (which of gamma, beta the case has); `None`
    /// for batch_norm.
    pub affine: Option<String>,
    /// Outputs the kernel may leave out (the family's `mean`, `rstd`; judged when returned).
    pub optional_outputs: Vec<String>,
}

impl KernelCase {
    /// Op name.
    pub fn op(&self) -> &str {
        &self.op
    }
    /// Layout name.
    pub fn layout(&self) -> &str {
        &self.layout
    }
    /// Shape of the cell arrays.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// dtype name.
    pub fn dtype(&self) -> &str {
        &self.dtype
    }
    /// eps as the nearest f64.
    pub fn eps(&self) -> f64 {
        self.eps
    }
    /// Inputs by name.
    pub fn inputs(&self) -> &BTreeMap<String, Vec<f64>> {
        &self.inputs
    }
    /// Momentum (`running_update`).
    pub fn momentum(&self) -> Option<f64> {
        self.momentum
    }
    /// Convention (`running_update`: `pytorch`/`onnx`; rms_norm: `standard`/`offset`).
    pub fn convention(&self) -> Option<&str> {
        self.convention.as_deref()
    }
    /// The op family (`batch_norm`, `layer_norm`, `rms_norm`, `group_norm`).
    pub fn family(&self) -> &str {
        &self.family
    }
    /// Layout `last`: the number of trailing axes normalized.
    pub fn normalized_ndim(&self) -> Option<usize> {
        self.normalized_ndim
    }
    /// group_norm: the number of groups.
    pub fn groups(&self) -> Option<usize> {
        self.groups
    }
    /// The family's `affine` (`weight_bias`, `weight`, `none`).
    pub fn affine(&self) -> Option<&str> {
        self.affine.as_deref()
    }
    /// Outputs the kernel may leave out.
    pub fn optional_outputs(&self) -> &[String] {
        &self.optional_outputs
    }

    /// The family: each row's (layer_norm, rms_norm) or each (sample, group)'s (group_norm)
    /// cells as flat positions of `x`, in the order of the `mean`/`rstd` outputs; batch_norm:
    /// each channel's cells. Empty for an invalid case.
    pub fn norm_groups(&self) -> Vec<Vec<usize>> {
        if self.family == family::BATCH_NORM {
            return (0..self.channels())
                .map(|c| self.channel_cells(c))
                .collect();
        }
        family::grouping(self).map_or(Vec::new(), |g| g.groups().to_vec())
    }

    /// The index into `gamma`/`beta` (and `dgamma`/`dbeta`) of every cell of `x`: the
    /// position in the normalized shape (layer_norm, rms_norm) or the channel (group_norm,
    /// batch_norm). Empty for an invalid case.
    pub fn param_index(&self) -> Vec<usize> {
        if self.family == family::BATCH_NORM {
            let mut out = vec![0; self.geometry().map_or(0, |g| g.len())];
            for c in 0..self.channels() {
                for i in self.channel_cells(c) {
                    out[i] = c;
                }
            }
            return out;
        }
        family::grouping(self).map_or(Vec::new(), |g| g.param_of().to_vec())
    }

    /// `gamma`, or ones where the case has no weight (the family's `affine` `none`).
    pub fn weight(&self) -> Vec<f64> {
        match self.inputs.get("gamma") {
            Some(g) => g.clone(),
            None => vec![1.0; self.n_params()],
        }
    }

    /// `beta`, or zeros where the case has no bias (`affine` `weight` or `none`).
    pub fn bias(&self) -> Vec<f64> {
        match self.inputs.get("beta") {
            Some(b) => b.clone(),
            None => vec![0.0; self.n_params()],
        }
    }

    fn n_params(&self) -> usize {
        if self.family == family::BATCH_NORM {
            self.channels()
        } else {
            family::grouping(self).map_or(0, |g| g.n_params())
        }
    }

    /// The input `name`. Panics, naming the case and its inputs, if the op has no such input.
    pub fn input(&self, name: &str) -> &[f64] {
        match self.inputs.get(name) {
            Some(v) => v,
            None => panic!(
                "case {} ({}) has no input `{name}`; its inputs: {:?}",
                self.id,
                self.op,
                self.inputs.keys().collect::<Vec<_>>()
            ),
        }
    }

    /// Output names of the case (docs/FORMAT.md; the family's under its `affine`, optional
    /// ones included), or empty for an unknown op.
    pub fn outputs(&self) -> &'static [&'static str] {
        if self.family != family::BATCH_NORM {
            return family::family_outputs(self);
        }
        Op::from_name(&self.op).map_or(&[], |op| op.outputs())
    }

    fn geometry(&self) -> Option<Geometry> {
        let layout = Layout::from_name(&self.layout)?;
        Geometry::new(layout, &self.shape, usize::MAX).ok()
    }

    /// Number of channels C (0 if the layout or shape is invalid).
    pub fn channels(&self) -> usize {
        self.geometry().map_or(0, |g| g.c)
    }

    /// Cells per channel m (0 if the layout or shape is invalid). For `sync_stats` (layout
    /// `rows`, shape `[C, R]`) this is the number of shards R.
    pub fn cells_per_channel(&self) -> usize {
        self.geometry().map_or(0, |g| g.m)
    }

    /// Flat positions of the cells of channel `c`, in the layout's order of its cells.
    pub fn channel_cells(&self, c: usize) -> Vec<usize> {
        match self.geometry() {
            Some(g) if c < g.c => (0..g.m).map(|k| g.offset(c, k)).collect(),
            _ => Vec::new(),
        }
    }

    /// From a generated suite case.
    pub fn from_suite_case(c: &SuiteCase) -> KernelCase {
        KernelCase {
            id: c.id.clone(),
            op: c.op.name().to_string(),
            layout: c.layout.name().to_string(),
            shape: c.shape.clone(),
            dtype: c.dtype.name().to_string(),
            param_dtype: c.param_dtype.name().to_string(),
            eps: c.eps.parse::<f64>().expect("generated eps is a decimal"),
            eps_exact: c.eps.clone(),
            inputs: c.inputs.clone(),
            momentum: c
                .momentum
                .as_ref()
                .map(|a| a.parse::<f64>().expect("generated momentum is a decimal")),
            momentum_exact: c.momentum.clone(),
            convention: c.convention.map(|v| v.name().to_string()),
            level: c.level.name().to_string(),
            class: c.class.clone(),
            family: family::BATCH_NORM.to_string(),
            normalized_ndim: None,
            groups: None,
            affine: None,
            optional_outputs: Vec::new(),
        }
    }

    /// The suite case this stands for, validated: known names, a valid shape, every input
    /// present with the right length, finite and exactly representable in the dtype, eps (and
    /// momentum) exact decimals, and an op defined at these inputs. The error names the field.
    pub fn to_suite_case(&self) -> Result<SuiteCase, ConfError> {
        let op =
            Op::from_name(&self.op).ok_or_else(|| ConfError::field("op", unknown(&self.op)))?;
        let layout = Layout::from_name(&self.layout)
            .ok_or_else(|| ConfError::field("layout", unknown(&self.layout)))?;
        let mut prec = parse_precision(&self.dtype)?;
        if !self.param_dtype.is_empty() && !prec.is_mixed() {
            prec.param = parse_precision(&self.param_dtype)
                .map_err(|_| ConfError::field("param_dtype", unknown(&self.param_dtype)))?
                .act;
        }
        let geom = Geometry::new(layout, &self.shape, 1 << 27)
            .map_err(|e| ConfError::field("shape", e.to_string()))?;
        let eps_text = if self.eps_exact.is_empty() {
            exact_decimal_of(self.eps, "eps")?
        } else {
            self.eps_exact.clone()
        };
        let eps = parse_rational(&eps_text).map_err(|e| ConfError::field("eps", e.to_string()))?;
        let momentum_text = match (&self.momentum_exact, self.momentum) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(a)) => Some(exact_decimal_of(a, "momentum")?),
            (None, None) => None,
        };
        let convention = match &self.convention {
            None => None,
            Some(c) => Some(
                Convention::from_name(c)
                    .ok_or_else(|| ConfError::field("convention", unknown(c)))?,
            ),
        };
        // Large cases are validated without an exact number per element (their names and
        // lengths here; whether the op is defined when they are judged).
        let small = geom.len() < crate::judge::check::FAST_JUDGE_MIN_LEN;
        let mut exact_inputs = BTreeMap::new();
        for (name, vals) in &self.inputs {
            let mut ex = Vec::with_capacity(if small { vals.len() } else { 0 });
            for (i, &v) in vals.iter().enumerate() {
                let field = || format!("inputs.{name}[{i}]");
                if !v.is_finite() {
                    return Err(ConfError::field(field(), format!("{v} is not finite")));
                }
                let dtype = prec.of(name);
                if suite::to_dtype(v, dtype) != v {
                    return Err(ConfError::field(
                        field(),
                        format!("{v:e} is not a {} value", dtype.name()),
                    ));
                }
                if small {
                    ex.push(crate::fast::exact_f64(v));
                }
            }
            exact_inputs.insert(name.clone(), ex);
        }
        if !small {
            for &name in op.inputs() {
                let want = match Op::extent(name) {
                    bnconf_spec::op::Extent::Cells => geom.len(),
                    _ => geom.c,
                };
                let got = self.inputs.get(name).map(Vec::len);
                if got != Some(want) {
                    return Err(ConfError::field(
                        format!("inputs.{name}"),
                        format!("expected {want} values, got {got:?}"),
                    ));
                }
            }
        }
        let params = Params {
            momentum: match &momentum_text {
                None => None,
                Some(t) => Some(
                    parse_rational(t).map_err(|e| ConfError::field("momentum", e.to_string()))?,
                ),
            },
            convention,
        };
        if small {
            Problem::new_with_params(op, geom, eps, exact_inputs, params)
                .map_err(|e| ConfError::field("case", e.to_string()))?;
        }
        Ok(SuiteCase {
            id: self.id.clone(),
            level: suite::Level::from_name(&self.level).unwrap_or(suite::Level::Conditioning),
            class: self.class.clone(),
            target: String::new(),
            dtype: prec.act,
            param_dtype: prec.param,
            op,
            layout,
            shape: self.shape.clone(),
            eps: eps_text,
            momentum: momentum_text,
            convention,
            inputs: self.inputs.clone(),
            shard_sizes: vec![],
        })
    }
}

fn unknown(name: &str) -> String {
    format!("unknown name {name:?} (see docs/FORMAT.md)")
}

/// The exact decimal expansion of a finite f64 (every binary float has one).
fn exact_decimal_of(v: f64, field: &str) -> Result<String, ConfError> {
    let r = f64_to_rational(v).ok_or_else(|| ConfError::field(field, "not finite"))?;
    // A dyadic p/2^k is p·5^k / 10^k.
    let (num, den) = (r.numer().clone(), r.denom().clone());
    let k = den.bits() - 1;
    let digits = (num * num_bigint::BigInt::from(5u32).pow(k as u32)).to_string();
    Ok(if k == 0 {
        digits
    } else {
        format!("{digits}e-{k}")
    })
}

pub use crate::suite::parse_precision;

/// What to run: a suite, a dtype, optional op and layout filters and the seed.
#[derive(Clone, Debug)]
pub struct Options {
    /// Suite name: `default` or `extreme`.
    pub suite: String,
    /// dtype name (`f32`, `f64`, `float32`, `float64`).
    pub dtype: String,
    /// Only these ops (all if empty).
    pub ops: Vec<String>,
    /// Only these layouts (all if empty).
    pub layouts: Vec<String>,
    /// Suite seed ([`suite::DEFAULT_SEED`], the seed of `bnconf export`, by default).
    pub seed: u64,
    /// The op family: `batch_norm` (the default), `layer_norm`, `rms_norm`, `group_norm`.
    pub family: String,
}

impl Options {
    /// `suite` in `dtype`, every op and layout, the default seed.
    pub fn new(suite: &str, dtype: &str) -> Options {
        Options {
            suite: suite.to_string(),
            dtype: dtype.to_string(),
            ops: Vec::new(),
            layouts: Vec::new(),
            seed: suite::DEFAULT_SEED,
            family: family::BATCH_NORM.to_string(),
        }
    }
    /// The op family (`batch_norm`, `layer_norm`, `rms_norm`, `group_norm`).
    pub fn family(mut self, family: &str) -> Options {
        self.family = family.to_string();
        self
    }
    /// Only these ops.
    pub fn ops(mut self, ops: &[&str]) -> Options {
        self.ops = ops.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Only these layouts.
    pub fn layouts(mut self, layouts: &[&str]) -> Options {
        self.layouts = layouts.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// The cases of a suite, as a kernel sees them (the same cases, in the same order, as
/// `bnconf export` writes).
pub fn cases(options: &Options) -> Result<Vec<KernelCase>, ConfError> {
    if let Some(f) = family::family_of(&options.family)? {
        return Ok(family::family_suite_cases(f, options)?
            .iter()
            .map(family::kernel_case)
            .collect());
    }
    Ok(generate(options)?
        .cases
        .iter()
        .map(KernelCase::from_suite_case)
        .collect())
}

fn generate(o: &Options) -> Result<suite::Suite, ConfError> {
    let sel = suite::Selection::from_names(&o.suite, &o.dtype, o.seed, &o.ops, &o.layouts)
        .map_err(|bad| match bad {
            suite::BadName::Dtype(n) => ConfError::field("dtype", unknown(&n)),
            suite::BadName::Op(n) => ConfError::field("ops", unknown(&n)),
            suite::BadName::Layout(n) => ConfError::field("layouts", unknown(&n)),
            suite::BadName::Suite(n) => ConfError::field("suite", unknown(&n)),
        })?;
    let s = sel.generate();
    if s.cases.is_empty() {
        return Err(ConfError::field(
            "ops",
            "the filters leave no case of the suite",
        ));
    }
    Ok(s)
}

/// Judge `kernel` on every case of `suite` in `dtype` (see the module docs). `None` from the
/// kernel means the case is unsupported. A bad suite or dtype name gives a report that is not
/// ok and says why.
pub fn check_kernel<K>(suite: &str, dtype: &str, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    check_kernel_with(&Options::new(suite, dtype), kernel)
}

/// [`check_kernel`] with filters and a seed.
pub fn check_kernel_with<K>(options: &Options, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let title = format!("suite {} {}", options.suite, options.dtype);
    match family::family_of(&options.family) {
        Err(e) => return Report::error(title, e.to_string()),
        Ok(Some(f)) => {
            let title = format!("{} {title}", options.family);
            return family::check_family(f, options, title, kernel);
        }
        Ok(None) => {}
    }
    if options.suite == "replicated" {
        let why = "suite: the replicated suite is judged per rank: use check_replicated_kernel";
        return Report::error(title, why.into());
    }
    let (prepared, title) = match prepared_suite(options, title) {
        Ok(p) => p,
        Err(r) => return r,
    };
    judge_all(title, prepared, kernel)
}

fn prepared_suite(options: &Options, title: String) -> Result<(Vec<Prepared>, String), Report> {
    let s = generate(options).map_err(|e| Report::error(title.clone(), e.to_string()))?;
    match check::prepare(&s.cases) {
        Ok(p) => Ok((p, title)),
        Err(e) => Err(Report::error(title, format!("exact reference: {e}"))),
    }
}

/// Judge a sync BN `kernel` on the `replicated` suite in `dtype` (docs/FORMAT.md,
/// "replicated suites"): it gets each case as its ranks' cases (`ranks[r]`: rank r's rows of
/// `x`/`dy`, shape `[n_r, ...]`, `n_r` may be 0; copies of the per-channel inputs) and returns
/// each rank's outputs (its rows of `y`/`dx`, the global per-channel values it holds,
/// optionally `dgamma_local`/`dbeta_local`), or `None` (unsupported). Judged per rank.
pub fn check_replicated_kernel<K>(dtype: &str, kernel: K) -> Report
where
    K: Fn(&[KernelCase]) -> Option<Vec<Outputs>>,
{
    let options = Options::new("replicated", dtype);
    let title = format!("suite replicated {dtype}");
    let (prepared, title) = match prepared_suite(&options, title) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let run = |p: &Prepared| {
        let ranks: Vec<KernelCase> = (0..p.case.shard_sizes.len())
            .map(|r| KernelCase::from_suite_case(&suite::replicated::shard(&p.case, r)))
            .collect();
        kernel(&ranks)
    };
    judge_with(title, prepared, run, |p, ranks: &Vec<Outputs>| {
        let rounded: Vec<Outputs> = ranks.iter().map(|o| rounded(p, o)).collect();
        p.judge_ranks(&rounded)
    })
}

/// Outputs rounded to their dtypes (a kernel may return wider values).
fn rounded(p: &Prepared, out: &Outputs) -> Outputs {
    out.iter()
        .map(|(k, v)| {
            let f = p.case.dtype_of(k);
            (
                k.clone(),
                v.iter().map(|&x| suite::to_dtype(x, f)).collect(),
            )
        })
        .collect()
}

/// Judge `kernel` on one case (e.g. one generated by [`strategy()`] or quickcheck).
pub fn check_case<K>(case: &KernelCase, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    if case.family != family::BATCH_NORM {
        return family::check_family_case(case, kernel);
    }
    let title = format!("case {}", case.id);
    let sc = match case.to_suite_case() {
        Ok(sc) => sc,
        Err(e) => return Report::error(title, format!("invalid case: {e}")),
    };
    let prepared = match check::prepare(std::slice::from_ref(&sc)) {
        Ok(p) => p,
        Err(e) => return Report::error(title, format!("exact reference: {e}")),
    };
    judge_all(title, prepared, kernel)
}

/// Judge given outputs on one case.
pub fn check_outputs(case: &KernelCase, outputs: &Outputs) -> Report {
    check_case(case, |_| Some(outputs.clone()))
}

fn judge_all<K>(title: String, prepared: Vec<Prepared>, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let run = |p: &Prepared| kernel(&KernelCase::from_suite_case(&p.case));
    judge_with(title, prepared, run, |p, out| p.judge(&rounded(p, out)))
}

/// Run the kernel (`run`: `None` = unsupported) on every prepared case on this thread, in
/// suite order (it need not be Sync), then judge its outputs (`judge`) in parallel where the
/// `parallel` feature is on.
fn judge_with<O: Send + Sync>(
    title: String,
    prepared: Vec<Prepared>,
    run: impl Fn(&Prepared) -> Option<O>,
    judge: impl Fn(&Prepared, &O) -> CaseResult + Sync + Send,
) -> Report {
    let outputs: Vec<Option<O>> = prepared.iter().map(run).collect();
    let results: Vec<CaseResult> = prepared
        .par_iter()
        .zip(outputs.par_iter())
        .map(|(p, out)| match out {
            None => p.unsupported("the kernel returned None"),
            Some(out) => judge(p, out),
        })
        .collect();
    Report {
        title,
        cases: prepared.into_iter().map(|p| p.case).collect(),
        results,
        error: None,
        family_details: BTreeMap::new(),
    }
}

/// A closure running one of bnconf's built-in kernels (`bnconf kernel --list`; the family's
/// too, e.g. `ln-twopass`), e.g. as a reference beside yours or as a known-bad control.
/// Panics on an unknown name.
pub fn reference_kernel(name: &str) -> BoxedKernel {
    if let Some(k) = family::reference_family_kernel(name) {
        return Box::new(k);
    }
    let k = bnconf_impl::kernel_by_name(name)
        .unwrap_or_else(|| panic!("no built-in kernel named {name:?}"));
    Box::new(move |case: &KernelCase| {
        let dt = |n: &str| bnconf_impl::Dtype::from_name(n);
        let kc = bnconf_impl::Case {
            op: bnconf_impl::Op::from_name(&case.op)?,
            layout: bnconf_impl::Layout::from_name(&case.layout)?,
            shape: case.shape.clone(),
            dtype: dt(&case.dtype)?,
            param_dtype: dt(&case.param_dtype).or_else(|| dt(&case.dtype))?,
            eps: case.eps,
            inputs: case.inputs.clone(),
            params: bnconf_impl::Params {
                momentum: case.momentum.unwrap_or(0.0),
                convention: case
                    .convention
                    .as_deref()
                    .and_then(bnconf_impl::Convention::from_name),
            },
        };
        k.run(&kc).ok()
    })
}

/// The verdicts on a kernel: every case judged, with the worst element of each output.
#[derive(Clone, Debug)]
pub struct Report {
    title: String,
    cases: Vec<SuiteCase>,
    results: Vec<CaseResult>,
    error: Option<String>,
    /// Family cases: the failure detail of each failing case, by id.
    family_details: BTreeMap<String, String>,
}

impl Report {
    fn error(title: String, why: String) -> Report {
        Report {
            title,
            cases: Vec::new(),
            results: Vec::new(),
            error: Some(why),
            family_details: BTreeMap::new(),
        }
    }

    /// Whether the kernel conforms: no harness error, every supported case conforms, and at
    /// least one case was supported (as `bnconf check`'s exit status 0).
    pub fn ok(&self) -> bool {
        let s = self.summary();
        self.error.is_none() && s.failed == 0 && s.passed > 0
    }

    /// The harness error that stopped the run (bad suite, dtype or case), if any.
    pub fn error_message(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Every case's result, in suite order.
    pub fn results(&self) -> &[CaseResult] {
        &self.results
    }

    /// The cases not conforming (failing or malformed), worst first.
    pub fn failures(&self) -> Vec<&CaseResult> {
        let mut f: Vec<&CaseResult> = self
            .results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Fail | Verdict::Malformed(_)))
            .collect();
        f.sort_by(|a, b| severity(b).total_cmp(&severity(a)).then(a.id.cmp(&b.id)));
        f
    }

    /// Counts and the worst ratio over judged cases.
    pub fn summary(&self) -> check::Summary {
        check::summarize(&self.results)
    }

    /// Cases that conform.
    pub fn conforming(&self) -> usize {
        self.summary().passed
    }
    /// Cases that do not conform.
    pub fn not_conforming(&self) -> usize {
        self.summary().failed
    }
    /// Cases the kernel did not support.
    pub fn unsupported(&self) -> usize {
        self.summary().unsupported
    }
    /// Worst ratio `|error| / (u·(cond+mag))` over judged cases.
    pub fn worst_ratio(&self) -> f64 {
        self.summary().worst
    }
}

fn severity(r: &CaseResult) -> f64 {
    match r.verdict {
        Verdict::Malformed(_) => f64::INFINITY,
        _ if r.worst_ratio.is_nan() => f64::INFINITY,
        _ => r.worst_ratio / r.k,
    }
}

/// Failing cases printed in full (the rest are listed by id).
const DETAILS: usize = 5;
/// Failing cases listed at all.
const LISTED: usize = 30;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.error {
            return writeln!(f, "bnconf: {}: harness error: {e}", self.title);
        }
        let s = self.summary();
        writeln!(
            f,
            "bnconf: {}: {} cases: {} conform, {} do not, {} unsupported; worst ratio {}",
            self.title,
            self.results.len(),
            s.passed,
            s.failed,
            s.unsupported,
            fmt_ratio(s.worst)
        )?;
        if s.passed + s.failed == 0 {
            writeln!(f, "no case was supported by the kernel")?;
        }
        let failures = self.failures();
        let by_id: BTreeMap<&str, &SuiteCase> =
            self.cases.iter().map(|c| (c.id.as_str(), c)).collect();
        for (i, r) in failures.iter().enumerate().take(LISTED) {
            if i < DETAILS {
                writeln!(f)?;
                match (by_id.get(r.id.as_str()), self.family_details.get(&r.id)) {
                    (Some(c), _) => writeln!(f, "{}", r.detail(c))?,
                    (None, Some(d)) => writeln!(f, "{d}")?,
                    (None, None) => writeln!(f, "{} {}", r.id, r.verdict.name())?,
                }
            } else {
                writeln!(
                    f,
                    "{} {} worst ratio {} (k = {:.1})",
                    r.id,
                    r.verdict.name(),
                    fmt_ratio(r.worst_ratio),
                    r.k
                )?;
            }
        }
        if failures.len() > LISTED {
            writeln!(f, "… and {} more failing cases", failures.len() - LISTED)?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------ generated cases

/// Generated cases of every op and layout in f32 and f64 at the levels *core* and
/// *conditioning* (see [`strategy`]), as [`KernelCase`]s; ill-posed cases are left out.
pub fn strategy() -> proptest::strategy::BoxedStrategy<KernelCase> {
    strategy_for(&[], false)
}

/// Generated cases of the given ops (all if empty); `allow_range` adds the *range* level
/// (squares that overflow or underflow the dtype: only range-robust kernels conform there).
/// Cases ill-posed in their dtype are left out (exactly, as the suites do).
pub fn strategy_for(
    ops: &[&str],
    allow_range: bool,
) -> proptest::strategy::BoxedStrategy<KernelCase> {
    use proptest::strategy::Strategy;
    let ops: Vec<Op> = if ops.is_empty() {
        Op::ALL.to_vec()
    } else {
        ops.iter()
            .map(|n| Op::from_name(n).unwrap_or_else(|| panic!("unknown op {n:?}")))
            .collect()
    };
    strategy::suite_cases(ops, allow_range)
        .prop_filter("ill-posed in its dtype", |c| suite::ill_posed(c).is_none())
        .prop_map(|c| KernelCase::from_suite_case(&c))
        .boxed()
}

impl proptest::arbitrary::Arbitrary for KernelCase {
    type Parameters = ();
    type Strategy = proptest::strategy::BoxedStrategy<KernelCase>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        strategy()
    }
}

impl quickcheck::Arbitrary for KernelCase {
    /// A case from [`strategy()`], driven by quickcheck's generator.
    fn arbitrary(g: &mut quickcheck::Gen) -> KernelCase {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let mut seed = [0u8; 32];
        for b in seed.iter_mut() {
            *b = <u8 as quickcheck::Arbitrary>::arbitrary(g);
        }
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let s = strategy();
        loop {
            // The filter of ill-posed cases may reject a draw: draw again.
            if let Ok(tree) = s.new_tree(&mut runner) {
                return tree.current();
            }
        }
    }

    /// Smaller cases: the same case without one of its channels (channels are independent,
    /// so every channel's data and handed-in statistics stay valid), down to one channel.
    fn shrink(&self) -> Box<dyn Iterator<Item = KernelCase>> {
        let case = self.clone();
        let c = case.channels();
        if c <= 1 || case.op == "sync_stats" || case.family != family::BATCH_NORM {
            return Box::new(std::iter::empty());
        }
        Box::new(
            (0..c)
                .rev()
                .filter_map(move |drop| drop_channel(&case, drop)),
        )
    }
}

/// `case` without channel `drop` (`None` where the layout cannot lose a channel).
fn drop_channel(case: &KernelCase, drop: usize) -> Option<KernelCase> {
    let layout = Layout::from_name(&case.layout)?;
    let g = case.geometry()?;
    let c_axis = match layout {
        Layout::Rows | Layout::Flat | Layout::Chw => 0,
        Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => 1,
        Layout::Nhwc => 3,
        Layout::Ndhwc => 4,
    };
    let mut shape = case.shape.clone();
    shape[c_axis] -= 1;
    let g2 = Geometry::new(layout, &shape, usize::MAX).ok()?;
    let mut out = case.clone();
    out.shape = shape;
    for (name, v) in out.inputs.iter_mut() {
        if v.len() == g.c * g.m && bnconf_spec::tensor::is_cell_array(name) {
            let mut nv = vec![0.0; g2.c * g2.m];
            for (c2, c) in (0..g.c).filter(|&c| c != drop).enumerate() {
                for k in 0..g.m {
                    nv[g2.offset(c2, k)] = v[g.offset(c, k)];
                }
            }
            *v = nv;
        } else if v.len() == g.c {
            v.remove(drop);
        }
    }
    Some(out)
}

/// A convenience for users' tests: `Ok(())` when `kernel` conforms on `case`, else the
/// report as the error (for `?` in proptest and quickcheck properties).
pub fn conforms<K>(case: &KernelCase, kernel: K) -> Result<(), String>
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let r = check_case(case, kernel);
    if r.ok() {
        Ok(())
    } else {
        Err(r.to_string())
    }
}
