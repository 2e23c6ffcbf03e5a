//! The normalization family from `cargo test` (`family=` of the library API): a LayerNorm,
//! RMSNorm or GroupNorm kernel judged as a BatchNorm one is, with the same [`KernelCase`],
//! closure type and [`Report`].
//!
//! ```
//! use bnconf::testing::{check_kernel_with, KernelCase, Options, Outputs};
//!
//! /// Two-pass LayerNorm forward in f64, returning only `y` (`mean`, `rstd` are optional).
//! fn my_layer_norm(case: &KernelCase) -> Option<Outputs> {
//!     if case.op != "layer_norm" {
//!         return None;
//!     }
//!     let x = case.input("x");
//!     let (gamma, beta) = (case.weight(), case.bias());
//!     let mut y = vec![0.0; x.len()];
//!     let param = case.param_index();
//!     for row in case.norm_groups() {
//!         let k = row.len() as f64;
//!         let mean = row.iter().map(|&i| x[i]).sum::<f64>() / k;
//!         let var = row.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / k;
//!         let rstd = 1.0 / (var + case.eps).sqrt();
//!         for &i in &row {
//!             y[i] = gamma[param[i]] * (x[i] - mean) * rstd + beta[param[i]];
//!         }
//!     }
//!     Some(Outputs::from([("y".to_string(), y)]))
//! }
//!
//! let options = Options::new("default", "f32").family("layer_norm").ops(&["layer_norm"]);
//! let report = check_kernel_with(&options, my_layer_norm);
//! assert!(report.ok(), "{report}");
//! ```
//!
//! A family case's [`KernelCase`] has `family` set (`layer_norm`, `rms_norm`, `group_norm`),
//! `normalized_ndim` (layout `last`) or `groups` (group_norm), `affine` (`weight_bias`,
//! `weight`, `none`), `convention` (`standard` or `offset`, rms_norm) and `optional_outputs`
//! (`mean`, `rstd`: judged only when returned). [`KernelCase::norm_groups`] gives each row's
//! (or each (sample, group)'s) cells in the order of the `mean`/`rstd` outputs, and
//! [`KernelCase::param_index`] the `gamma`/`beta` index of every cell. The suites are the
//! family suites of `bnconf run --family` (`default`, `extreme`, `scale`).

use super::{unknown, KernelCase, Options, Outputs, Report};
use crate::error::ConfError;
use crate::judge::family::{prepare_family_all, FamilyPrepared};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::par::*;
use crate::report::fmt_ratio;
use crate::suite::family::{
    family_draw, family_ill_posed, family_suite_named, FamilySuiteCase, FAMILY_SUITES,
};
use crate::suite::{self, parse_precision, Level};
use bnconf_impl::family::{
    family_kernel_by_name, Affine, Family, FamilyCase, FamilyLayout, FamilyOp, Grouping, Named,
    RmsConvention,
};
use bnconf_impl::Dtype;

/// The batch_norm family's name (the default of `family`).
pub const BATCH_NORM: &str = "batch_norm";

/// Generated family cases for property tests: every op of `families` (all three if empty) in
/// `precisions` (names as `dtype`; all six if empty), each a class of the family suites drawn
/// with fresh data (shape, affine, convention and data of the class; groups, normalized_ndim
/// and the cancellation sweep included), cases ill-posed in their dtype left out. Judge each
/// with [`super::check_case`]. Panics on an unknown family or precision name.
///
/// ```
/// use bnconf::testing::{check_case, family::family_strategy, reference_kernel};
/// use proptest::prelude::*;
///
/// let kernel = reference_kernel("ln-welford");
/// proptest!(ProptestConfig::with_cases(16), |(case in family_strategy(&["layer_norm"], &["f32", "bf16+f32"]))| {
///     let report = check_case(&case, &kernel);
///     prop_assert!(report.ok(), "{}", report);
/// });
/// ```
pub fn family_strategy(
    families: &[&str],
    precisions: &[&str],
) -> proptest::strategy::BoxedStrategy<KernelCase> {
    use proptest::prelude::*;
    let families: Vec<Family> = if families.is_empty() {
        Family::ALL.to_vec()
    } else {
        families
            .iter()
            .map(|n| Family::from_name(n).unwrap_or_else(|| panic!("unknown family {n:?}")))
            .collect()
    };
    let ops: Vec<FamilyOp> = families.iter().flat_map(|f| f.ops().to_vec()).collect();
    let precs: Vec<suite::Precision> = if precisions.is_empty() {
        suite::Precision::ALL.to_vec()
    } else {
        precisions
            .iter()
            .map(|n| parse_precision(n).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    };
    (
        proptest::sample::select(ops),
        proptest::sample::select(precs),
        0usize..64,
        any::<u64>(),
    )
        .prop_filter_map(
            "class not of the op, or ill-posed",
            |(op, p, class, seed)| family_draw(op, p, class, seed).map(|c| kernel_case(&c)),
        )
        .boxed()
}

/// The family named `name`, `None` for `batch_norm`; an error naming `family` otherwise.
pub(super) fn family_of(name: &str) -> Result<Option<Family>, ConfError> {
    if name == BATCH_NORM || name.is_empty() {
        return Ok(None);
    }
    Family::from_name(name).map(Some).ok_or_else(|| {
        ConfError::field(
            "family",
            format!(
                "unknown family {name:?} (expected batch_norm, layer_norm, rms_norm or group_norm)"
            ),
        )
    })
}

/// The kernel's view of a family suite case.
pub(super) fn kernel_case(c: &FamilySuiteCase) -> KernelCase {
    let f = &c.case;
    let eps_exact = super::exact_decimal_of(f.eps, "eps").expect("a suite eps is finite");
    KernelCase {
        id: c.id.clone(),
        op: f.op.name().to_string(),
        layout: f.layout.name().to_string(),
        shape: f.shape.clone(),
        dtype: f.dtype.name().to_string(),
        param_dtype: f.param_dtype.name().to_string(),
        eps: f.eps,
        eps_exact,
        inputs: f.inputs.clone(),
        momentum: None,
        momentum_exact: None,
        convention: Some(f.convention.name().to_string()),
        level: c.level.name().to_string(),
        class: c.class.clone(),
        family: f.op.family().name().to_string(),
        normalized_ndim: f.normalized_ndim,
        groups: f.groups,
        affine: Some(f.affine.name().to_string()),
        optional_outputs: f
            .op
            .optional_outputs()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

/// impl's family case of a [`KernelCase`], every field checked (the error names it): known
/// names, the op of the case's family, a valid grouping, inputs exactly those of the op and
/// exactly representable in their dtypes.
pub(super) fn family_case(kc: &KernelCase) -> Result<FamilyCase, ConfError> {
    let field = |f: &str, why: String| ConfError::field(f, why);
    let family = family_of(&kc.family)?.ok_or_else(|| {
        field(
            "family",
            "batch_norm is not a family of layer/rms/group norm".into(),
        )
    })?;
    let op = FamilyOp::from_name(&kc.op).ok_or_else(|| field("op", unknown(&kc.op)))?;
    if op.family() != family {
        return Err(field(
            "op",
            format!("`{}` is not an op of family `{}`", kc.op, kc.family),
        ));
    }
    let layout =
        FamilyLayout::from_name(&kc.layout).ok_or_else(|| field("layout", unknown(&kc.layout)))?;
    let prec = parse_precision(&kc.dtype)?;
    let dt = crate::suite::family::dtype_of;
    let mut param = prec.param;
    if !kc.param_dtype.is_empty() && !prec.is_mixed() {
        param = parse_precision(&kc.param_dtype)
            .map_err(|_| field("param_dtype", unknown(&kc.param_dtype)))?
            .act;
    }
    let affine = match &kc.affine {
        None if family == Family::RmsNorm => Affine::Weight,
        None => Affine::WeightBias,
        Some(a) => Affine::from_name(a).ok_or_else(|| field("affine", unknown(a)))?,
    };
    let convention = match &kc.convention {
        None => RmsConvention::Standard,
        Some(c) => RmsConvention::from_name(c).ok_or_else(|| field("convention", unknown(c)))?,
    };
    let case = FamilyCase {
        op,
        layout,
        shape: kc.shape.clone(),
        dtype: dt(prec.act),
        param_dtype: dt(param),
        eps: kc.eps,
        normalized_ndim: kc.normalized_ndim,
        groups: kc.groups,
        affine,
        convention,
        inputs: kc.inputs.clone(),
    };
    case.validate()
        .map_err(|e| field(&e.field, e.reason.clone()))?;
    for (name, vals) in &case.inputs {
        let f = crate::suite::family::format_of(case.dtype_of(name));
        for (i, &v) in vals.iter().enumerate() {
            if !v.is_finite() || suite::to_dtype(v, f) != v {
                return Err(field(
                    &format!("inputs.{name}[{i}]"),
                    format!("{v:e} is not a finite {} value", case.dtype_of(name)),
                ));
            }
        }
    }
    Ok(case)
}

/// The family suite of `options` (its ops and layouts filters applied).
pub(super) fn family_suite_cases(
    family: Family,
    options: &Options,
) -> Result<Vec<FamilySuiteCase>, ConfError> {
    if !FAMILY_SUITES.contains(&options.suite.as_str()) {
        return Err(ConfError::field(
            "suite",
            format!(
                "{:?}: the family's suites are {}",
                options.suite,
                FAMILY_SUITES.join(", ")
            ),
        ));
    }
    let prec = parse_precision(&options.dtype)?;
    for op in &options.ops {
        match FamilyOp::from_name(op) {
            Some(o) if o.family() == family => {}
            _ => {
                return Err(ConfError::field(
                    "ops",
                    format!("`{op}` is not an op of family `{family}`"),
                ))
            }
        }
    }
    for layout in &options.layouts {
        if FamilyLayout::from_name(layout).is_none() {
            return Err(ConfError::field("layouts", unknown(layout)));
        }
    }
    let keep = |c: &FamilySuiteCase| {
        let op = c.case.op.name().to_string();
        let layout = c.case.layout.name().to_string();
        (options.ops.is_empty() || options.ops.contains(&op))
            && (options.layouts.is_empty() || options.layouts.contains(&layout))
    };
    let cases: Vec<FamilySuiteCase> =
        family_suite_named(&options.suite, family, &[prec], options.seed)
            .expect("a checked suite name")
            .cases
            .into_iter()
            .filter(keep)
            .collect();
    if cases.is_empty() {
        return Err(ConfError::field(
            "ops",
            "the filters leave no case of the suite",
        ));
    }
    Ok(cases)
}

/// Judge `kernel` on a family suite: run on this thread in suite order, judged in parallel.
pub(super) fn check_family<K>(family: Family, options: &Options, title: String, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let cases = match family_suite_cases(family, options) {
        Ok(c) => c,
        Err(e) => return Report::error(title, e.to_string()),
    };
    judge_family(title, &cases, kernel)
}

/// Judge `kernel` on one family case.
pub(super) fn check_family_case<K>(case: &KernelCase, kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let title = format!("case {}", case.id);
    let fc = match family_case(case) {
        Ok(c) => c,
        Err(e) => return Report::error(title, format!("invalid case: {e}")),
    };
    if let Some(why) = family_ill_posed(&fc) {
        return Report::error(
            title,
            format!("invalid case: ill-posed in its dtype: {why}"),
        );
    }
    let precision = suite::Precision {
        act: crate::suite::family::format_of(fc.dtype),
        param: crate::suite::family::format_of(fc.param_dtype),
    }
    .static_name();
    let sc = FamilySuiteCase {
        id: case.id.clone(),
        level: Level::from_name(&case.level).unwrap_or(Level::Conditioning),
        class: case.class.clone(),
        precision,
        case: fc,
    };
    judge_family(title, std::slice::from_ref(&sc), kernel)
}

fn judge_family<K>(title: String, cases: &[FamilySuiteCase], kernel: K) -> Report
where
    K: Fn(&KernelCase) -> Option<Outputs>,
{
    let prepared = match prepare_family_all(cases) {
        Ok(p) => p,
        Err(e) => return Report::error(title, format!("exact reference: {e}")),
    };
    let outputs: Vec<Option<Outputs>> = prepared
        .iter()
        .map(|p| kernel(&kernel_case(&p.case)))
        .collect();
    let results: Vec<CaseResult> = prepared
        .par_iter()
        .zip(outputs.par_iter())
        .map(|(p, out)| match out {
            None => p.unsupported("the kernel returned None"),
            Some(out) => p.judge(&rounded(p, out)),
        })
        .collect();
    let details = prepared
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r.verdict, Verdict::Fail | Verdict::Malformed(_)))
        .map(|(p, r)| (r.id.clone(), detail(p, r)))
        .collect();
    Report {
        title,
        cases: Vec::new(),
        results,
        error: None,
        family_details: details,
    }
}

/// Outputs rounded to their dtypes (a kernel may return wider values).
fn rounded(p: &FamilyPrepared, out: &Outputs) -> Outputs {
    out.iter()
        .map(|(name, v)| {
            let f = crate::suite::family::format_of(p.case.case.dtype_of(name));
            (
                name.clone(),
                v.iter().map(|&x| suite::to_dtype(x, f)).collect(),
            )
        })
        .collect()
}

/// A failing family case in words: each output over its gate, worst first, with the element,
/// its row or group, expected, actual, ratio and the budget.
fn detail(p: &FamilyPrepared, r: &CaseResult) -> String {
    let c = &p.case;
    let f = &c.case;
    let mut s = format!(
        "{} [{} {} {} {} {}; affine {}{}{}]: {}",
        r.id,
        r.op,
        r.layout,
        r.dtype,
        r.level.name(),
        r.class,
        f.affine,
        f.normalized_ndim
            .map_or(String::new(), |k| format!(", normalized_ndim {k}")),
        f.groups.map_or(String::new(), |g| format!(", groups {g}")),
        r.verdict.name()
    );
    if let Verdict::Malformed(w) = &r.verdict {
        s += &format!(" — {w}");
        return s;
    }
    s += &format!(
        " — worst ratio {} (k = {:.1})",
        fmt_ratio(r.worst_ratio),
        r.k
    );
    let grouping: Option<Grouping> = f.validate().ok();
    let mut outs: Vec<_> = r.outputs.iter().filter(|o| o.n_over > 0).collect();
    outs.sort_by(|a, b| b.worst_ratio.total_cmp(&a.worst_ratio));
    for o in outs {
        let u = crate::suite::family::format_of(f.dtype_of(&o.name)).unit_roundoff();
        let at = match (&grouping, o.len == f.input("x").len()) {
            (Some(g), true) => g
                .groups()
                .iter()
                .position(|cells| cells.contains(&o.index))
                .map_or(String::new(), |gi| format!(" (row/group {gi})")),
            _ => String::new(),
        };
        s += &format!(
            "\n  {}[{}]{at}: expected {} (≈ {:e}), actual {:e}, ratio {} ({} of {} elements over); budget u·(cond + mag + u·mag2) with u = {u:e}, cond = {:e}, mag = {:e}, mag2 = {:e}",
            o.name,
            o.index,
            o.expected,
            o.expected_f64,
            o.actual,
            fmt_ratio(o.worst_ratio),
            o.n_over,
            o.len,
            o.budget.cond,
            o.budget.mag,
            o.budget.mag2,
        );
    }
    s
}

/// A closure running one of bnconf's built-in family kernels (`ln-twopass`,
/// `bad-ln-onepass`, …; `bnconf run --family all` lists them), `None` when `name` is not one.
pub(super) fn reference_family_kernel(
    name: &str,
) -> Option<impl Fn(&KernelCase) -> Option<Outputs>> {
    let k = family_kernel_by_name(name)?;
    Some(move |case: &KernelCase| {
        let fc = family_case(case).ok()?;
        k.run(&fc).ok()
    })
}

/// The cells of each row (layer_norm, rms_norm) or (sample, group) (group_norm) of a family
/// case, and the `gamma` index of every cell (`None` for an invalid case).
pub(super) fn grouping(kc: &KernelCase) -> Option<Grouping> {
    family_case_unchecked(kc)?.validate().ok()
}

/// [`family_case`] without the value checks (for the geometry helpers).
fn family_case_unchecked(kc: &KernelCase) -> Option<FamilyCase> {
    let op = FamilyOp::from_name(&kc.op)?;
    let affine = match &kc.affine {
        Some(a) => Affine::from_name(a)?,
        None if op.family() == Family::RmsNorm => Affine::Weight,
        None => Affine::WeightBias,
    };
    let dtype = Dtype::from_name(&kc.dtype).unwrap_or(Dtype::F64);
    let param_dtype = Dtype::from_name(&kc.param_dtype).unwrap_or(dtype);
    Some(FamilyCase {
        op,
        layout: FamilyLayout::from_name(&kc.layout)?,
        shape: kc.shape.clone(),
        dtype,
        param_dtype,
        eps: kc.eps.max(0.0),
        normalized_ndim: kc.normalized_ndim,
        groups: kc.groups,
        affine,
        convention: kc
            .convention
            .as_deref()
            .and_then(RmsConvention::from_name)
            .unwrap_or(RmsConvention::Standard),
        inputs: kc.inputs.clone(),
    })
}

/// The outputs of a family op under an affine, as a static list.
pub(super) fn family_outputs(kc: &KernelCase) -> &'static [&'static str] {
    let Some(fc) = family_case_unchecked(kc) else {
        return &[];
    };
    let outs = fc.op.outputs(fc.affine);
    const ALL: [&[&str]; 6] = [
        &["y", "mean", "rstd"],
        &["y", "rstd"],
        &["dx", "dgamma", "dbeta"],
        &["dx", "dgamma"],
        &["dx"],
        &["y"],
    ];
    ALL.iter()
        .copied()
        .find(|s| *s == outs.as_slice())
        .unwrap_or(&[])
}
