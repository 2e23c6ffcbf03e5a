//! `bnconf shrink` (docs/FORMAT.md, "Added in bnconf 0.3: shrink"): from a case a kernel
//! fails, search deterministically for a smaller case it still fails the same way — fewer
//! channels, fewer cells (N, H, W), simpler values — and write it as a `bnconf-case/1` file
//! with npy inputs, the exact expected outputs, what the kernel returned and the ratios.
//!
//! This module holds what needs no process handling: the moves on a case (select channels,
//! drop cells along an axis, round values to a coarse binary grid), their validity, the
//! signature a candidate must keep, and the output files. [`run`] (feature `cli`, unix) runs an
//! outside kernel on each candidate through the kernel directory protocol.
//!
//! Every candidate is a [`SuiteCase`] held in memory; it is exported as a one-case directory,
//! the kernel fills `out/`, and the outputs are judged against the candidate's exact goldens
//! computed from memory (inputs are never read back from the directory).

pub mod family;
#[cfg(all(feature = "cli", unix))]
pub mod family_run;
#[cfg(all(feature = "cli", unix))]
pub mod run;

use crate::error::{ConfError, Result};
use crate::formats::case::{read_case_file, CaseObject, Dtype, InputLimits, Literal};
use crate::formats::golden;
use crate::formats::npy::write_npy;
use crate::judge::prepare::Prepared;
use crate::judge::verdict::{CaseResult, Verdict};
use crate::protocol::npy_of;
use crate::report::json::{hexf, num};
use crate::suite::{self, Level, SuiteCase};
use bnconf_spec::exact::round::{f64_to_rational, FloatFormat};
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The default `--max-runs`: kernel runs after the original one.
pub const DEFAULT_MAX_RUNS: usize = 300;

/// Grid exponents tried when simplifying an array: every value rounded to a multiple of
/// `2^-k` (coarsest first; `k = 0` is integers).
pub const GRID_EXPONENTS: [i32; 13] = [0, 1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24];

/// The logical axes of a case: `n`, `c`, `d`, `h`, `w` (`rows`/`flat`: `n = d = h = 1`,
/// `w = m`; `chw`: `n = d = 1`; `nchw`/`nhwc`: `d = 1`; `nc`: `d = h = w = 1`; `ncl`:
/// `d = h = 1`, `w = L`; `sync_stats`' shards are `w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Batch.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Depth (`ncdhw`, `ndhwc`; 1 otherwise).
    pub d: usize,
    /// Height.
    pub h: usize,
    /// Width (cells of a row for `rows`/`flat`, L for `ncl`).
    pub w: usize,
}

impl Dims {
    /// The logical axes of a layout's shape (already validated).
    pub fn of(layout: Layout, shape: &[usize]) -> Dims {
        let dims = |n, c, d, h, w| Dims { n, c, d, h, w };
        match layout {
            Layout::Rows | Layout::Flat => dims(1, shape[0], 1, 1, shape[1]),
            Layout::Chw => dims(1, shape[0], 1, shape[1], shape[2]),
            Layout::Nchw => dims(shape[0], shape[1], 1, shape[2], shape[3]),
            Layout::Nhwc => dims(shape[0], shape[3], 1, shape[1], shape[2]),
            Layout::Nc => dims(shape[0], shape[1], 1, 1, 1),
            Layout::Ncl => dims(shape[0], shape[1], 1, 1, shape[2]),
            Layout::Ncdhw => dims(shape[0], shape[1], shape[2], shape[3], shape[4]),
            Layout::Ndhwc => dims(shape[0], shape[4], shape[1], shape[2], shape[3]),
        }
    }

    /// The layout's shape.
    pub fn shape(self, layout: Layout) -> Vec<usize> {
        match layout {
            Layout::Rows | Layout::Flat => vec![self.c, self.w],
            Layout::Chw => vec![self.c, self.h, self.w],
            Layout::Nchw => vec![self.n, self.c, self.h, self.w],
            Layout::Nhwc => vec![self.n, self.h, self.w, self.c],
            Layout::Nc => vec![self.n, self.c],
            Layout::Ncl => vec![self.n, self.c, self.w],
            Layout::Ncdhw => vec![self.n, self.c, self.d, self.h, self.w],
            Layout::Ndhwc => vec![self.n, self.d, self.h, self.w, self.c],
        }
    }

    /// Flat (row-major) index of element `(n, c, d, h, w)` in the layout.
    pub fn index(self, layout: Layout, n: usize, c: usize, d: usize, h: usize, w: usize) -> usize {
        // Channels-first: (n, c, d, h, w); channels-last: (n, d, h, w, c). The axes a layout
        // lacks have extent 1 and index 0.
        let spatial = (d * self.h + h) * self.w + w;
        let dhw = self.d * self.h * self.w;
        match layout {
            Layout::Rows | Layout::Flat | Layout::Chw => c * dhw + spatial,
            Layout::Nhwc | Layout::Ndhwc => (n * dhw + spatial) * self.c + c,
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                (n * self.c + c) * dhw + spatial
            }
        }
    }

    /// `(n, c, d, h, w)` of flat index `i` (inverse of [`Dims::index`]).
    pub fn position(self, layout: Layout, i: usize) -> (usize, usize, usize, usize, usize) {
        let dhw = self.d * self.h * self.w;
        let (n, c, s) = match layout {
            Layout::Rows | Layout::Flat | Layout::Chw => (0, i / dhw, i % dhw),
            Layout::Nhwc | Layout::Ndhwc => (i / (dhw * self.c), i % self.c, (i / self.c) % dhw),
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                (i / (self.c * dhw), (i / dhw) % self.c, i % dhw)
            }
        };
        (
            n,
            c,
            s / (self.h * self.w),
            (s / self.w) % self.h,
            s % self.w,
        )
    }
}

/// Which indices of each logical axis a candidate keeps (in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Kept batch indices.
    pub n: Vec<usize>,
    /// Kept channels.
    pub c: Vec<usize>,
    /// Kept depths (`ncdhw`, `ndhwc`).
    pub d: Vec<usize>,
    /// Kept rows.
    pub h: Vec<usize>,
    /// Kept columns (or shards).
    pub w: Vec<usize>,
}

impl Selection {
    /// Everything of `d`.
    pub fn all(d: Dims) -> Selection {
        Selection {
            n: (0..d.n).collect(),
            c: (0..d.c).collect(),
            d: (0..d.d).collect(),
            h: (0..d.h).collect(),
            w: (0..d.w).collect(),
        }
    }
}

/// `case` restricted to `sel` (inputs gathered; the id, eps and parameters kept). `None`
/// when an axis would be empty, or the layout has no such axis to cut.
pub fn select(case: &SuiteCase, sel: &Selection) -> Option<SuiteCase> {
    let d = Dims::of(case.layout, &case.shape);
    let nd = Dims {
        n: sel.n.len(),
        c: sel.c.len(),
        d: sel.d.len(),
        h: sel.h.len(),
        w: sel.w.len(),
    };
    if nd.n == 0 || nd.c == 0 || nd.d == 0 || nd.h == 0 || nd.w == 0 {
        return None;
    }
    let fixed = match case.layout {
        Layout::Rows | Layout::Flat => nd.n != 1 || nd.d != 1 || nd.h != 1,
        Layout::Chw => nd.n != 1 || nd.d != 1,
        Layout::Nchw | Layout::Nhwc => nd.d != 1,
        Layout::Nc => nd.d != 1 || nd.h != 1 || nd.w != 1,
        Layout::Ncl => nd.d != 1 || nd.h != 1,
        Layout::Ncdhw | Layout::Ndhwc => false,
    };
    if fixed {
        return None;
    }
    let mut out = case.clone();
    out.shape = nd.shape(case.layout);
    if !case.shard_sizes.is_empty() {
        // A replicated case: each kept row stays on the rank that held it.
        let offsets = suite::replicated::offsets(&case.shard_sizes);
        let mut sizes = vec![0; case.shard_sizes.len()];
        for &n in &sel.n {
            let r = (0..sizes.len())
                .rfind(|&r| offsets[r] <= n && case.shard_sizes[r] > 0)
                .expect("a row of the batch is on some rank");
            sizes[r] += 1;
        }
        out.shard_sizes = sizes;
    }
    for (name, v) in out.inputs.iter_mut() {
        let old = std::mem::take(v);
        *v = match Op::extent(name) {
            Extent::Channel => sel.c.iter().map(|&c| old[c]).collect(),
            Extent::Shards => sel.w.iter().map(|&w| old[w]).collect(),
            Extent::Cells => {
                let mut nv = vec![0.0; nd.n * nd.c * nd.d * nd.h * nd.w];
                for (n2, &n) in sel.n.iter().enumerate() {
                    for (c2, &c) in sel.c.iter().enumerate() {
                        for (d2, &dd) in sel.d.iter().enumerate() {
                            for (h2, &h) in sel.h.iter().enumerate() {
                                for (w2, &w) in sel.w.iter().enumerate() {
                                    nv[nd.index(case.layout, n2, c2, d2, h2, w2)] =
                                        old[d.index(case.layout, n, c, dd, h, w)];
                                }
                            }
                        }
                    }
                }
                nv
            }
        };
    }
    Some(out)
}

/// A replicated `case` without rank `r`: its rows dropped from the batch and its entry from
/// `shard_sizes`. `None` when the case is not replicated, has no rank `r`, or would be left
/// with fewer than two ranks or no rows.
pub fn drop_rank(case: &SuiteCase, r: usize) -> Option<SuiteCase> {
    let sizes = &case.shard_sizes;
    if sizes.len() <= 2 || r >= sizes.len() || sizes.iter().sum::<usize>() == sizes[r] {
        return None;
    }
    let off = suite::replicated::offsets(sizes)[r];
    let d = Dims::of(case.layout, &case.shape);
    let sel = Selection {
        n: (0..d.n)
            .filter(|&n| n < off || n >= off + sizes[r])
            .collect(),
        ..Selection::all(d)
    };
    let mut out = select(case, &sel)?;
    let mut kept = sizes.clone();
    kept.remove(r);
    out.shard_sizes = kept;
    Some(out)
}

/// Ranks of a replicated case that hold no rows.
pub fn empty_ranks(case: &SuiteCase) -> usize {
    case.shard_sizes.iter().filter(|&&n| n == 0).count()
}

/// The exact problem of a case, or why the op is undefined there (the `SuiteCase::problem`
/// of a hand-made or shrunk case, without its `expect`).
pub fn problem_of(case: &SuiteCase) -> Result<Problem> {
    let geom = Geometry::new(case.layout, &case.shape, usize::MAX)?;
    let eps = bnconf_spec::exact::parse::parse_rational(&case.eps)
        .map_err(|e| ConfError::field("eps", e.to_string()))?;
    let mut inputs = BTreeMap::new();
    for (k, v) in &case.inputs {
        let mut ex = Vec::with_capacity(v.len());
        for (i, &x) in v.iter().enumerate() {
            let r = f64_to_rational(x)
                .ok_or_else(|| ConfError::field(format!("inputs.{k}[{i}]"), "not finite"))?;
            ex.push(QSqrt::rational(r));
        }
        inputs.insert(k.clone(), ex);
    }
    Ok(Problem::new_with_params(
        case.op,
        geom,
        eps,
        inputs,
        case.params(),
    )?)
}

/// Whether a candidate may be judged: the op is defined at its inputs and it is not ill-posed
/// in its dtype (the suites' rule, `suite::ill_posed`).
pub fn valid(case: &SuiteCase) -> bool {
    problem_of(case).is_ok() && suite::ill_posed(case).is_none()
}

/// `v` rounded to the nearest multiple of `2^-k` (ties away from zero), then to `f`. Exact in
/// f64 for the magnitudes a float dtype holds (`|v|·2^k < 2^53`); other values are kept.
pub fn to_grid(v: f64, k: i32, f: FloatFormat) -> f64 {
    let s = 2f64.powi(k);
    let scaled = v * s;
    if !scaled.is_finite() || scaled.abs() >= 2f64.powi(52) {
        return v;
    }
    // `+ 0.0` turns a -0 (a small negative value rounded to zero) into +0.
    suite::to_dtype(scaled.round() / s, f) + 0.0
}

/// The simple replacements tried for a whole input before grid rounding: the values that
/// make the parameter vanish from the formula (`gamma` 1, `beta` 0, ...).
pub fn neutral_value(name: &str) -> Option<f64> {
    match name {
        "gamma" | "running_var" | "shard_count" => Some(1.0),
        "beta" | "running_mean" => Some(0.0),
        _ => None,
    }
}

/// The output of a failing result with the largest ratio among those over their gate (`None`
/// when the result does not fail).
pub fn worst_failing(r: &CaseResult) -> Option<&crate::judge::verdict::OutputResult> {
    if r.verdict != Verdict::Fail {
        return None;
    }
    r.outputs
        .iter()
        .filter(|o| o.n_over > 0)
        .fold(None, |a, o| match a {
            Some(b) if b.worst_ratio >= o.worst_ratio => Some(b),
            _ => Some(o),
        })
}

/// The failure a candidate must keep: the same output over budget and, where the original's
/// diagnosis named a known-bad kernel, that kernel reproducing it.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// The original's worst output.
    pub output: String,
    /// The known-bad kernel that reproduced the original (`bnconf kernel --list`), if any.
    pub kernel: Option<String>,
}

impl Signature {
    /// The signature of a failing result (`None` when it does not fail).
    pub fn of(p: &Prepared, r: &CaseResult) -> Option<Signature> {
        let worst = worst_failing(r)?;
        let kernel =
            crate::judge::diagnosis::diagnose(std::slice::from_ref(p), std::slice::from_ref(r))
                .first()
                .map(|d| d.kernel.clone());
        Some(Signature {
            output: worst.name.clone(),
            kernel,
        })
    }

    /// Whether result `r` of candidate `p` fails the same way.
    pub fn matches(&self, p: &Prepared, r: &CaseResult) -> bool {
        if r.verdict != Verdict::Fail
            || !r
                .outputs
                .iter()
                .any(|o| o.name == self.output && o.n_over > 0)
        {
            return false;
        }
        match &self.kernel {
            None => true,
            Some(k) => {
                crate::judge::diagnosis::diagnose(std::slice::from_ref(p), std::slice::from_ref(r))
                    .iter()
                    .any(|d| &d.kernel == k)
            }
        }
    }
}

/// A case read from a `bnconf-case/1` file, as a suite case (float dtypes only; `eps` and
/// `momentum` must be JSON number literals, as the protocol writes them).
pub fn case_from_file(path: &Path, lim: &InputLimits) -> Result<SuiteCase> {
    let c = read_case_file(path, lim)?;
    let Dtype::Float(f) = c.dtype else {
        return Err(ConfError::field(
            "dtype",
            "shrink needs a float dtype (f64, f32, f16, bf16), got \"exact\"",
        ));
    };
    let number = |field: &str, text: &str| -> Result<()> {
        serde_json::from_str::<serde_json::Number>(text)
            .map(|_| ())
            .map_err(|_| {
                ConfError::field(
                    field,
                    format!("{text:?}: shrink needs a decimal number here (e.g. \"1e-5\"), as the kernel directory protocol writes it"),
                )
            })
    };
    if c.param_dtype != c.dtype {
        return Err(ConfError::field(
            "param_dtype",
            format!(
                "{} with dtype {} is a mixed precision: shrink refuses those (as --dtype does)",
                c.param_dtype.name(),
                c.dtype.name()
            ),
        ));
    }
    number("eps", &c.eps_text)?;
    if let Some(m) = &c.momentum_text {
        number("momentum", m)?;
    }
    let p = &c.problem;
    let mut inputs = BTreeMap::new();
    for (name, vals) in &p.inputs {
        let mut v = Vec::with_capacity(vals.len());
        for (i, q) in vals.iter().enumerate() {
            let x = q
                .as_rational()
                .map(|r| bnconf_spec::exact::round::round_rational(r, FloatFormat::F64).to_f64())
                .ok_or_else(|| ConfError::field(format!("inputs.{name}[{i}]"), "not rational"))?;
            v.push(x);
        }
        inputs.insert(name.clone(), v);
    }
    let text = |k: &str| c.extra.get(k).and_then(Value::as_str).map(str::to_string);
    let shard_sizes = shard_sizes_of(&c.extra, p.op, p.geom.layout, &p.geom.shape)?;
    Ok(SuiteCase {
        id: c.id.clone(),
        level: text("level")
            .and_then(|l| Level::from_name(&l))
            .unwrap_or(Level::Conditioning),
        class: text("class").unwrap_or_else(|| "case-file".into()),
        target: text("target").unwrap_or_default(),
        dtype: f,
        param_dtype: f,
        op: p.op,
        layout: p.geom.layout,
        shape: p.geom.shape.clone(),
        eps: c.eps_text.clone(),
        momentum: c.momentum_text.clone(),
        convention: p.params.convention,
        inputs,
        shard_sizes,
    })
}

/// The split of a replicated case file (`"ranks": R`, `"shard_sizes": [n_0, ...]`, docs/FORMAT.md
/// "Added in bnconf 0.3: shrink"); empty when the file has neither field.
fn shard_sizes_of(
    extra: &serde_json::Map<String, Value>,
    op: Op,
    layout: Layout,
    shape: &[usize],
) -> Result<Vec<usize>> {
    let (ranks, sizes) = match (extra.get("ranks"), extra.get("shard_sizes")) {
        (None, None) => return Ok(vec![]),
        (Some(_), None) => {
            return Err(ConfError::field(
                "shard_sizes",
                "missing: a case with \"ranks\" needs \"shard_sizes\" (rows per rank)",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfError::field(
                "ranks",
                "missing: a case with \"shard_sizes\" needs \"ranks\"",
            ))
        }
        (Some(r), Some(s)) => (r, s),
    };
    let r = ranks
        .as_u64()
        .filter(|r| (1..=1024).contains(r))
        .ok_or_else(|| ConfError::field("ranks", format!("{ranks}: an integer from 1 to 1024")))?
        as usize;
    let list = sizes
        .as_array()
        .ok_or_else(|| ConfError::field("shard_sizes", "must be an array of row counts"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let n = v.as_u64().ok_or_else(|| {
            ConfError::field(
                format!("shard_sizes[{i}]"),
                format!("{v}: a row count (integer >= 0)"),
            )
        })?;
        out.push(n as usize);
    }
    if out.len() != r {
        return Err(ConfError::field(
            "shard_sizes",
            format!("{} entries, but \"ranks\" is {r}", out.len()),
        ));
    }
    if !matches!(op, Op::Forward | Op::Backward | Op::RunningUpdate)
        || !matches!(layout, Layout::Nchw | Layout::Nhwc)
    {
        return Err(ConfError::field(
            "ranks",
            format!(
                "a case split across ranks is forward, backward or running_update on nchw or nhwc, not {} on {}",
                op.name(),
                layout.name()
            ),
        ));
    }
    let total: u128 = out.iter().map(|&n| n as u128).sum();
    if total != shape[0] as u128 {
        return Err(ConfError::field(
            "shard_sizes",
            format!(
                "rows sum to {total}, but the batch (shape[0]) is {}",
                shape[0]
            ),
        ));
    }
    Ok(out)
}

/// Write `case` as a one-case suite directory of the kernel directory protocol in `dir`
/// (`bnconf export`'s files for a suite `shrink` of that one case): `manifest.json`,
/// `<id>/case.json`, `<id>/<input>.npy`.
pub fn write_protocol_dir(case: &SuiteCase, dir: &Path) -> Result<()> {
    let s = suite::Suite {
        name: "shrink".into(),
        seed: 0,
        cases: vec![case.clone()],
        excluded: vec![],
    };
    crate::protocol::export(&s, case.precision(), &suite::Filter::default(), dir)
}

fn tensor_shape(case: &SuiteCase, name: &str) -> Vec<usize> {
    let d = Dims::of(case.layout, &case.shape);
    match Op::extent(name) {
        Extent::Cells => case.shape.clone(),
        Extent::Channel => vec![d.c],
        Extent::Shards => vec![d.w],
    }
}

fn write_inputs(case: &SuiteCase, dir: &Path) -> Result<()> {
    for (name, v) in &case.inputs {
        write_npy(
            &dir.join(format!("{name}.npy")),
            &tensor_shape(case, name),
            &npy_of(case.dtype_of(name), v),
        )?;
    }
    Ok(())
}

/// The `bnconf-case/1` document of a shrunk case: inputs as `{"npy": "<name>.npy"}` beside
/// it, `eps`/`momentum` as the exact decimals, plus `level`, `class`, `target` and
/// `shrunk_from` (the original case's id).
pub fn case_file_json(case: &SuiteCase, from: &str) -> Value {
    let mut o = CaseObject::new(
        &case.id,
        case.op,
        case.layout,
        &case.shape,
        Dtype::Float(case.dtype),
    )
    .eps(&case.eps, Literal::NumberOrText);
    if let (Some(a), Some(conv)) = (&case.momentum, case.convention) {
        o = o.momentum(a, Literal::NumberOrText).convention(conv);
    }
    o.level_class_target(case.level.name(), &case.class, &case.target)
        .shrunk_from(from)
        .when(!case.shard_sizes.is_empty(), |o| {
            o.shards(&case.shard_sizes)
        })
        .npy_inputs(case.op.inputs().iter().copied())
        .into_value()
}

/// What the search found, for the output files and the printed summary.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The original case.
    pub original: SuiteCase,
    /// The original's result.
    pub original_result: CaseResult,
    /// The shrunk case (id `<original id>.shrunk`).
    pub case: SuiteCase,
    /// Its prepared goldens and budgets.
    pub prepared: Prepared,
    /// The kernel's result on it (verdict `fail`, outputs kept).
    pub result: CaseResult,
    /// The failure kept.
    pub signature: Signature,
    /// Kernel runs made (the original's included).
    pub runs: usize,
    /// The kernel command, as given.
    pub command: String,
    /// A replicated case: what each rank wrote on the shrunk case (`ranks[r]`: output name →
    /// values), as judged; `None` for other cases.
    pub rank_outputs: Option<Vec<BTreeMap<String, Vec<f64>>>>,
}

/// A value of dtype `f` as that dtype's hex string (`nan`, `inf`, `-inf` when not finite).
pub fn hex_in(x: f64, f: FloatFormat) -> String {
    match f64_to_rational(x) {
        Some(r) => bnconf_spec::exact::round::round_rational(&r, f).to_hex(),
        None => hexf(x),
    }
}

fn elements(case: &SuiteCase) -> usize {
    case.inputs.values().map(Vec::len).sum()
}

/// `shrink.json` (`bnconf-shrink/1`): the original and shrunk case, the failure kept, and per
/// output every element's exact value, its correct rounding to the case dtype (and f64), what
/// the kernel returned and the ratio.
pub fn report_json(s: &Shrunk) -> Result<Value> {
    let g = golden::compute(s.case.to_case())?;
    let computed = s.result.computed.as_ref().ok_or_else(|| {
        ConfError::field(
            "shrink",
            "the kernel's outputs were not kept for the shrunk case",
        )
    })?;
    let mut outs = Vec::new();
    for &name in s.case.op.outputs() {
        let f = s.case.dtype_of(name);
        let exact = &g.outputs[name];
        // A replicated case's per-channel output: the copy of the rank with the worst ratio
        // (rank 0's on ties); per-element outputs are the shards concatenated.
        let r = s.result.outputs.iter().filter(|o| o.name == name).fold(
            None::<&crate::judge::verdict::OutputResult>,
            |a, o| match a {
                Some(b) if b.worst_ratio >= o.worst_ratio || o.worst_ratio.is_nan() => Some(b),
                _ => Some(o),
            },
        );
        let rank = r.and_then(|o| o.rank);
        let got = match (&s.rank_outputs, rank, Op::extent(name)) {
            (Some(ranks), Some(k), Extent::Channel) => &ranks[k][name],
            _ => &computed[name],
        };
        let u = f.unit_roundoff();
        let ratios = s.prepared.ratios(name, got, u);
        let mut rec = json!({
            "name": name,
            "dtype": f.name(),
            "shape": tensor_shape(&s.case, name),
            "worst_ratio": r.map(|o| num(o.worst_ratio)),
            "index": r.map(|o| o.index),
            "elements_over": r.map(|o| o.n_over),
            "exact": exact.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            "expected": golden::rounded_hex(exact, f),
            "expected_f64": golden::rounded_hex(exact, FloatFormat::F64),
            "kernel": got.iter().map(|&x| hex_in(x, f)).collect::<Vec<_>>(),
            "ratio": ratios.iter().map(|&x| num(if x.is_nan() { f64::INFINITY } else { x })).collect::<Vec<_>>(),
        });
        if let Some(k) = rank {
            rec["rank"] = json!(k);
        }
        outs.push(rec);
    }
    let mut v = json!({
        "format": "bnconf-shrink/1",
        "tool": {"name": "bnconf", "version": env!("CARGO_PKG_VERSION")},
        "kernel": s.command,
        "original": {
            "id": s.original.id,
            "shape": s.original.shape,
            "input_elements": elements(&s.original),
            "worst_ratio": num(s.original_result.worst_ratio),
        },
        "failure": {"output": s.signature.output, "behaves_like": s.signature.kernel},
        "case": {
            "id": s.case.id,
            "op": s.case.op.name(),
            "layout": s.case.layout.name(),
            "shape": s.case.shape,
            "dtype": s.case.dtype.name(),
            "eps": s.case.eps,
            "input_elements": elements(&s.case),
            "file": "case.json",
        },
        "runs": s.runs,
        "verdict": s.result.verdict.name().to_lowercase(),
        "worst_ratio": num(s.result.worst_ratio),
        "k": s.result.k,
        "outputs": outs,
    });
    if !s.case.shard_sizes.is_empty() {
        v["original"]["shard_sizes"] = json!(s.original.shard_sizes);
        v["case"]["ranks"] = json!(s.case.shard_sizes.len());
        v["case"]["shard_sizes"] = json!(s.case.shard_sizes);
    }
    Ok(v)
}

/// Write the output directory's files into `dir` (a staging directory): `case.json`,
/// `<input>.npy`, `golden.json` (`bnconf-golden/1`: exact, f64, f32 and the case dtype),
/// `kernel/<output>.npy` (what the kernel returned) and `shrink.json`.
pub fn write_output(s: &Shrunk, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let write_json = |path: &Path, v: &Value| {
        let text = serde_json::to_string_pretty(v).expect("json") + "\n";
        crate::formats::atomic::write_bytes(path, text.as_bytes())
    };
    write_json(
        &dir.join("case.json"),
        &case_file_json(&s.case, &s.original.id),
    )?;
    write_inputs(&s.case, dir)?;
    let mut fmts = vec![FloatFormat::F64, FloatFormat::F32];
    if !fmts.contains(&s.case.dtype) {
        fmts.push(s.case.dtype);
    }
    let g = golden::compute(s.case.to_case())?;
    write_json(&dir.join("golden.json"), &golden::golden_json(&g, &fmts))?;
    let kd = dir.join("kernel");
    std::fs::create_dir_all(&kd).map_err(|e| ConfError::io(&kd, e))?;
    if let Some(ranks) = &s.rank_outputs {
        for (r, outs) in ranks.iter().enumerate() {
            let rd = kd.join(format!("rank{r}"));
            std::fs::create_dir_all(&rd).map_err(|e| ConfError::io(&rd, e))?;
            let sh = suite::replicated::shard(&s.case, r);
            for (name, v) in outs {
                let f = s.case.dtype_of(name);
                let shape = match Op::extent(name) {
                    Extent::Cells => sh.shape.clone(),
                    _ => vec![Dims::of(s.case.layout, &s.case.shape).c],
                };
                write_npy(&rd.join(format!("{name}.npy")), &shape, &npy_of(f, v))?;
            }
        }
    } else if let Some(computed) = &s.result.computed {
        for (name, v) in computed.iter() {
            let f = s.case.dtype_of(name);
            write_npy(
                &kd.join(format!("{name}.npy")),
                &tensor_shape(&s.case, name),
                &npy_of(f, v),
            )?;
        }
    }
    write_json(&dir.join("shrink.json"), &report_json(s)?)
}

/// The printed summary: sizes, the failure kept, and per failing output its worst element
/// (exact, correctly rounded, the kernel's value, the ratio against k).
pub fn summary(s: &Shrunk) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "bnconf shrink: {} {:?} ({} input elements, worst ratio {}) -> {:?} ({} input elements) in {} kernel runs",
        s.original.id,
        s.original.shape,
        elements(&s.original),
        crate::report::fmt_ratio(s.original_result.worst_ratio),
        s.case.shape,
        elements(&s.case),
        s.runs
    );
    let _ = writeln!(
        t,
        "kept: `{}` over budget{}",
        s.signature.output,
        match &s.signature.kernel {
            Some(k) => format!(", behaves like {k}"),
            None => String::new(),
        }
    );
    for o in s.result.outputs.iter().filter(|o| o.n_over > 0) {
        let f = s.case.dtype_of(&o.name);
        let exact = Prepared::exact_at(&s.prepared, &o.name, o.index);
        let _ = writeln!(
            t,
            "  {}[{}]{}: exact {} = {} ({}), kernel {} ({}), ratio {} > k = {:.2} ({} of {} elements over)",
            o.name,
            o.index,
            o.rank.map(|r| format!(" on rank {r}")).unwrap_or_default(),
            o.expected,
            bnconf_spec::exact::round::round(&exact, f).to_hex(),
            f.name(),
            hex_in(o.actual, f),
            o.actual,
            crate::report::fmt_ratio(o.worst_ratio),
            s.result.k,
            o.n_over,
            o.len
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(layout: Layout, shape: &[usize]) -> SuiteCase {
        let d = Dims::of(layout, shape);
        let len: usize = shape.iter().product();
        let mut inputs = BTreeMap::new();
        inputs.insert("x".to_string(), (0..len).map(|i| i as f64).collect());
        inputs.insert(
            "gamma".to_string(),
            (0..d.c).map(|c| c as f64 + 1.0).collect(),
        );
        inputs.insert("beta".to_string(), vec![0.0; d.c]);
        SuiteCase {
            id: "t".into(),
            level: Level::Core,
            class: "t".into(),
            target: String::new(),
            dtype: FloatFormat::F64,
            param_dtype: FloatFormat::F64,
            op: Op::Forward,
            layout,
            shape: shape.to_vec(),
            eps: "1e-5".into(),
            momentum: None,
            convention: None,
            inputs,
            shard_sizes: vec![],
        }
    }

    const LAYOUTS: [(Layout, &[usize]); 9] = [
        (Layout::Rows, &[3, 5]),
        (Layout::Flat, &[3, 5]),
        (Layout::Chw, &[3, 2, 4]),
        (Layout::Nchw, &[2, 3, 2, 4]),
        (Layout::Nhwc, &[2, 2, 4, 3]),
        (Layout::Nc, &[4, 3]),
        (Layout::Ncl, &[2, 3, 5]),
        (Layout::Ncdhw, &[2, 3, 2, 2, 3]),
        (Layout::Ndhwc, &[2, 2, 2, 3, 3]),
    ];

    /// `position` inverts `index`, and the channel of each element is the layout's.
    #[test]
    fn index_and_position_agree_with_the_layout() {
        for (layout, shape) in LAYOUTS {
            let d = Dims::of(layout, shape);
            assert_eq!(d.shape(layout), shape);
            let g = Geometry::new(layout, shape, usize::MAX).unwrap();
            for c in 0..g.c {
                for k in 0..g.m {
                    let i = g.offset(c, k);
                    let (n, c2, dd, h, w) = d.position(layout, i);
                    assert_eq!(c2, c, "{layout:?} {i}");
                    assert_eq!(d.index(layout, n, c2, dd, h, w), i);
                }
            }
        }
    }

    /// Keeping everything is the identity; keeping one channel keeps its cells and its
    /// per-channel values, in order.
    #[test]
    fn select_keeps_the_chosen_cells() {
        for (layout, shape) in LAYOUTS {
            let c0 = case(layout, shape);
            let d = Dims::of(layout, shape);
            assert_eq!(select(&c0, &Selection::all(d)).unwrap(), c0);
            let one = select(
                &c0,
                &Selection {
                    c: vec![1],
                    ..Selection::all(d)
                },
            )
            .unwrap();
            let g = Geometry::new(layout, shape, usize::MAX).unwrap();
            let want: Vec<f64> = (0..g.m).map(|k| c0.inputs["x"][g.offset(1, k)]).collect();
            let g1 = Geometry::new(layout, &one.shape, usize::MAX).unwrap();
            let got: Vec<f64> = (0..g1.m)
                .map(|k| one.inputs["x"][g1.offset(0, k)])
                .collect();
            assert_eq!(got, want, "{layout:?}");
            assert_eq!(one.inputs["gamma"], vec![2.0]);
            let empty = Selection {
                c: vec![],
                ..Selection::all(d)
            };
            assert!(select(&c0, &empty).is_none());
        }
    }

    /// A dropped row leaves the rank that held it; a dropped rank takes its rows; two ranks
    /// are kept; empty ranks are counted.
    #[test]
    fn replicated_rows_and_ranks() {
        let mut c = case(Layout::Nchw, &[5, 1, 1, 2]);
        c.shard_sizes = vec![2, 0, 3];
        let d = Dims::of(c.layout, &c.shape);
        // Rows 1 (rank 0) and 3 (rank 2) dropped.
        let sel = Selection {
            n: vec![0, 2, 4],
            ..Selection::all(d)
        };
        let s = select(&c, &sel).unwrap();
        assert_eq!(s.shard_sizes, vec![1, 0, 2]);
        assert_eq!(s.inputs["x"], vec![0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
        assert_eq!(empty_ranks(&s), 1);
        // Rank 0 dropped: its rows go, the empty rank stays.
        let r = drop_rank(&c, 0).unwrap();
        assert_eq!(r.shard_sizes, vec![0, 3]);
        assert_eq!(r.shape, vec![3, 1, 1, 2]);
        assert_eq!(r.inputs["x"], (4..10).map(f64::from).collect::<Vec<_>>());
        // Two ranks remain: no further rank is dropped; a plain case has none.
        assert!(drop_rank(&r, 0).is_none() && drop_rank(&r, 1).is_none());
        assert!(drop_rank(&case(Layout::Nchw, &[2, 1, 1, 2]), 0).is_none());
        // Dropping the only rank with rows would leave none.
        let mut one = c.clone();
        one.shard_sizes = vec![0, 0, 5];
        assert!(drop_rank(&one, 2).is_none());
        assert_eq!(drop_rank(&one, 0).unwrap().shard_sizes, vec![0, 5]);
    }

    #[test]
    fn grid_rounding() {
        assert_eq!(to_grid(25045.37, 0, FloatFormat::F32), 25045.0);
        assert_eq!(to_grid(0.3, 2, FloatFormat::F64), 0.25);
        let z = to_grid(-0.1, 0, FloatFormat::F64);
        assert!(z == 0.0 && z.is_sign_positive(), "{z}");
        // rounded to the dtype after the grid: 2^24 + 1 is not an f32
        assert_eq!(to_grid(16777217.0, 0, FloatFormat::F32), 16777216.0);
    }
}
