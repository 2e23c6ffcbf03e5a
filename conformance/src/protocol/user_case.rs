//! `bnconf check --case CASE.json --outputs DIR` (docs/FORMAT.md, "Added in bnconf 0.3:
//! judging a user's case and ONNX test data"): one case of the user's own (a `bnconf-case/1`
//! file, inputs inline or `{"npy": "path.npy"}`) read as a [`SuiteCase`], and the kernel's
//! outputs `DIR/<output>.npy` read as the protocol reads `out/` — so the case is judged by the
//! suite's own code: the same exact goldens (fast path where it applies), budgets, verdicts,
//! reports and diagnosis.
//!
//! Reading the case: the header as `bnconf golden` parses it ([`parse_header`]); each input
//! rounded correctly to its dtype (activations `dtype`, the rest `param_dtype`), a JSON array
//! through the case file's own reader, an npy file read with the npy reader's limits (a
//! regular file, its size checked against the shape before anything is allocated). Nothing
//! here is op-specific: the op's inputs and outputs come from [`Op::inputs`]/[`Op::outputs`],
//! so an op with a reference and a budget is judged here without new code.

use crate::error::{ConfError, Result};
use crate::formats::case::{
    parse_header, read_case_json, read_input, read_npy_input, Dtype, InputLimits,
};
use crate::formats::npy::NpyData;
use crate::judge::check::{self, CaseResult, Prepared, Written};
use crate::protocol::stablehlo::dyadic_decimal;
use crate::protocol::{read_output, refusal, shape_of};
use crate::suite::{self, Level, SuiteCase};
use bnconf_spec::exact::parse::parse_rational;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::exact::Rational;
use bnconf_spec::op::Extent;
use bnconf_spec::{Op, Problem};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The float format of a case dtype; `exact` is refused (a kernel's outputs are floats).
fn float_dtype(field: &str, d: Dtype) -> Result<FloatFormat> {
    d.format().ok_or_else(|| {
        ConfError::field(
            field,
            "\"exact\": check --case judges a kernel's float outputs; give the dtype the kernel ran in (f64, f32, f16, bf16)",
        )
    })
}

/// A scalar (`eps`, `momentum`) as the decimal text a [`SuiteCase`] holds: the literal as
/// written when it is a decimal (a float parser reads it as the kernels do), else the exact
/// decimal of a dyadic value (`0x1p-10`, `1/1024`); a value with no finite decimal is refused.
fn decimal_text(field: &str, text: &str, exact: &Rational) -> Result<String> {
    let same = |t: &str| t.parse::<f64>().is_ok() && parse_rational(t).ok().as_ref() == Some(exact);
    if same(text) {
        return Ok(text.to_string());
    }
    dyadic_decimal(exact).ok_or_else(|| {
        ConfError::field(
            field,
            format!("{text}: check --case takes a value with a finite decimal expansion"),
        )
    })
}

/// The values of one input, each rounded correctly to `dtype`, as f64 (every value of a
/// float dtype is one). `val` is the case's JSON for it (an array, or `{"npy": path}`
/// relative to `base`).
fn input_values(
    field: &str,
    val: &Value,
    base: &Path,
    want_shape: &[usize],
    want_len: usize,
    dtype: FloatFormat,
    lim: &InputLimits,
) -> Result<Vec<f64>> {
    let Some(data) = npy_data(field, val, base, want_shape, want_len, dtype, lim)? else {
        // JSON arrays (and every malformed form, which the case reader reports).
        let q = read_input(
            field,
            val,
            base,
            want_shape,
            want_len,
            Dtype::Float(dtype),
            false,
            lim,
        )?;
        return Ok(q
            .iter()
            .map(|v| {
                crate::fast::problem::rational_to_f64_exact(
                    v.as_rational().expect("a rounded input is rational"),
                )
                .expect("a value of a float dtype is an f64")
            })
            .collect());
    };
    let mut out = Vec::with_capacity(data.len());
    for i in 0..data.len() {
        out.push(rounded(field, i, data.get(i), dtype)?);
    }
    Ok(out)
}

/// The data of an input given as `{"npy": path}` (relative to `base`), read and of the
/// tensor's shape; `None` for an input given otherwise.
fn npy_data(
    field: &str,
    val: &Value,
    base: &Path,
    want_shape: &[usize],
    want_len: usize,
    dtype: FloatFormat,
    lim: &InputLimits,
) -> Result<Option<NpyData>> {
    let Some(rel) = val.get("npy").and_then(Value::as_str) else {
        return Ok(None);
    };
    let path = base.join(rel);
    read_npy_input(field, &path, want_shape, want_len, Some(dtype), lim).map(Some)
}

/// Element `i` of input `field`, `x`, rounded correctly to `dtype`: refused if not finite or
/// if it overflows the dtype.
fn rounded(field: &str, i: usize, x: f64, dtype: FloatFormat) -> Result<f64> {
    if !x.is_finite() {
        return Err(ConfError::field(
            format!("{field}[{i}]"),
            format!("non-finite value {x}"),
        ));
    }
    let r = suite::to_dtype(x, dtype);
    if !r.is_finite() {
        return Err(ConfError::field(
            format!("{field}[{i}]"),
            format!("overflows {} (rounds to infinity)", dtype.name()),
        ));
    }
    Ok(r)
}

/// [`input_values`] of a cell input (`x`, `dy`) in the width the fast path holds it
/// ([`crate::suite::case::in_width`]: binary32 values as f32): the same values, never held as
/// f64 where the file's are f32 of an f32 case (read, checked, and kept as they are).
fn cell_values(
    field: &str,
    val: &Value,
    base: &Path,
    want_shape: &[usize],
    want_len: usize,
    dtype: FloatFormat,
    lim: &InputLimits,
) -> Result<NpyData> {
    let Some(data) = npy_data(field, val, base, want_shape, want_len, dtype, lim)? else {
        let v = input_values(field, val, base, want_shape, want_len, dtype, lim)?;
        return Ok(crate::suite::case::in_width(v));
    };
    match (data, dtype) {
        // f32 values of an f32 or f64 case: each is its own rounding (to_dtype is the
        // identity), and all binary32.
        (NpyData::F32(v), FloatFormat::F32 | FloatFormat::F64) => {
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                rounded(field, i, v[i] as f64, dtype)?;
            }
            Ok(NpyData::F32(v))
        }
        (NpyData::F32(mut v), _) => {
            // Half dtypes: rounded in place (binary32 values).
            for (i, x) in v.iter_mut().enumerate() {
                *x = rounded(field, i, *x as f64, dtype)? as f32;
            }
            Ok(NpyData::F32(v))
        }
        (NpyData::F64(mut v), _) => {
            for (i, x) in v.iter_mut().enumerate() {
                *x = rounded(field, i, *x, dtype)?;
            }
            Ok(crate::suite::case::in_width(v))
        }
        (data, _) => {
            let mut v = Vec::with_capacity(data.len());
            for i in 0..data.len() {
                v.push(rounded(field, i, data.get(i), dtype)?);
            }
            Ok(crate::suite::case::in_width(v))
        }
    }
}

/// Read a user's case file as a suite case: validated as `bnconf golden` validates it (errors
/// name the field), inputs rounded to their dtypes, the op defined at them and the case not
/// ill-posed in its dtype (docs/DESIGN.md §3: no output could be judged).
pub fn read_user_case(path: &Path, lim: &InputLimits) -> Result<SuiteCase> {
    Ok(read_user_case_as(path, lim, false)?.0)
}

/// [`read_user_case`]; where `lean` and the case is large (judged through the fast cells),
/// the case without inputs and its inputs as the fast path's problem, cells in their own
/// width ([`cell_values`]: never held as f64 where they are binary32), tested for
/// ill-posedness there: the same checks, errors and values.
pub fn read_user_case_as(
    path: &Path,
    lim: &InputLimits,
    lean: bool,
) -> Result<(SuiteCase, Option<crate::fast::FastProblem>)> {
    let v = read_case_json(path, lim)?;
    let h = parse_header(&v, lim)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let dtype = float_dtype("dtype", h.dtype)?;
    let param_dtype = float_dtype("param_dtype", h.param_dtype)?;
    let g = &h.geom;
    if !crate::fast::covers(h.op) && g.len() > lim.max_json_elems {
        return Err(ConfError::field(
            "shape",
            format!(
                "{:?} has {} elements, more than the per-element exact path takes for op `{}` ({}, as `bnconf golden`)",
                g.shape,
                g.len(),
                h.op.name(),
                lim.max_json_elems
            ),
        ));
    }
    let o = v.as_object().expect("checked by parse_header");
    let inputs_o = o
        .get("inputs")
        .ok_or_else(|| ConfError::field("inputs", "missing"))?
        .as_object()
        .ok_or_else(|| ConfError::field("inputs", "must be an object of named arrays"))?;
    if let Some(k) = inputs_o
        .keys()
        .find(|k| !h.op.inputs().contains(&k.as_str()))
    {
        return Err(ConfError::field(
            format!("inputs.{k}"),
            format!(
                "not an input of op `{}` (it takes {})",
                h.op.name(),
                h.op.inputs().join(", ")
            ),
        ));
    }
    let lean = lean && crate::fast::covers(h.op) && g.len() >= check::FAST_JUDGE_MIN_LEN;
    let mut inputs = BTreeMap::new();
    let mut cells = BTreeMap::new();
    for &name in h.op.inputs() {
        let field = format!("inputs.{name}");
        let val = inputs_o.get(name).ok_or_else(|| {
            ConfError::field(&field, format!("missing (op `{}` needs it)", h.op.name()))
        })?;
        let (want_shape, want_len) = match Op::extent(name) {
            Extent::Cells => (g.shape.clone(), g.len()),
            Extent::Channel => (vec![g.c], g.c),
            Extent::Shards => (vec![g.m], g.m),
        };
        let in_dtype = if bnconf_spec::tensor::is_activation(name) {
            dtype
        } else {
            param_dtype
        };
        if lean && Op::extent(name) == Extent::Cells {
            let vals = cell_values(&field, val, &base, &want_shape, want_len, in_dtype, lim)?;
            cells.insert(name.to_string(), vals);
            continue;
        }
        let vals = input_values(&field, val, &base, &want_shape, want_len, in_dtype, lim)?;
        inputs.insert(name.to_string(), vals);
    }
    let extra_str = |k: &str| h.extra.get(k).and_then(Value::as_str);
    let momentum = match (&h.momentum_text, &h.params.momentum) {
        (Some(t), Some(a)) => Some(decimal_text("momentum", t, a)?),
        _ => None,
    };
    let mut sc = SuiteCase {
        id: h.id.clone(),
        level: extra_str("level")
            .and_then(Level::from_name)
            .unwrap_or(Level::Core),
        class: extra_str("class").unwrap_or("user").to_string(),
        target: format!("the case in {}", path.display()),
        dtype,
        param_dtype,
        op: h.op,
        layout: g.layout,
        shape: g.shape.clone(),
        eps: decimal_text("eps", &h.eps_text, &h.eps)?,
        momentum,
        convention: h.params.convention,
        inputs,
        shard_sizes: Vec::new(),
    };
    // The op must be defined at the inputs (checked exactly on the small cases; a large one's
    // preparation reports it). Only then is the exact problem built without a panic.
    if g.len() < check::FAST_JUDGE_MIN_LEN {
        let exact = sc
            .inputs
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter().map(|&x| crate::fast::exact_f64(x)).collect(),
                )
            })
            .collect();
        Problem::new_with_params(h.op, g.clone(), h.eps.clone(), exact, h.params.clone())
            .map_err(|e| ConfError::field("inputs", e.to_string()))?;
    }
    let fp = if lean {
        let chan = std::mem::take(&mut sc.inputs);
        let fp = crate::fast::FastProblem::new(h.op, g.clone(), h.eps.clone(), cells, chan)?;
        Some(fp)
    } else {
        None
    };
    if g.len() < check::FAST_JUDGE_MIN_LEN || matches!(h.op, Op::Forward | Op::Backward) {
        let ill = match &fp {
            Some(fp) => suite::ill_posed::ill_posed_cells(&sc, fp),
            None => suite::ill_posed(&sc),
        };
        if let Some(why) = ill {
            return Err(ConfError::field(
                "inputs",
                format!(
                    "the case is ill-posed in {} ({why}): no output of it can be judged",
                    dtype.name()
                ),
            ));
        }
    }
    Ok((sc, fp))
}

/// What a kernel wrote for a user's case into `dir`: `dir/<output>.npy` for every output of
/// the op (a missing or malformed one makes the case malformed, naming the file), or — as in
/// a suite case's `out/` — `dir/error` or `dir/unsupported`.
pub fn read_outputs(dir: &Path, c: &SuiteCase) -> Written {
    if let Some(w) = refusal(dir, &dir.display().to_string()) {
        return w;
    }
    let mut computed = BTreeMap::new();
    for &name in c.op.outputs() {
        let path = dir.join(format!("{name}.npy"));
        match read_output(&path, &shape_of(c, name), c.dtype_of(name)) {
            Ok(v) => {
                computed.insert(name.to_string(), v);
            }
            Err(why) => return Written::Malformed(format!("{}: {why}", path.display())),
        }
    }
    Written::Outputs(computed)
}

/// Judge a user's case file against the outputs in `dir`: the case, its preparation (goldens
/// and budgets, for the reports and the diagnosis) and its result. A bad case file is an
/// error (naming the field); a bad or missing output is a verdict.
pub fn judge_user_case(
    case: &Path,
    dir: &Path,
    lim: &InputLimits,
) -> Result<(SuiteCase, Prepared, CaseResult)> {
    // A large case is held once, in its own width (its f64 inputs are read again only if it
    // does not pass, for the reports and the diagnosis).
    let (sc, made) = read_user_case_as(case, lim, true)?;
    if !dir.is_dir() {
        return Err(ConfError::field(
            "--outputs",
            format!("{}: not a directory", dir.display()),
        ));
    }
    let refill = |c: &mut SuiteCase| {
        if c.inputs.is_empty() {
            if let Ok(full) = read_user_case(case, lim) {
                c.inputs = full.inputs;
            }
        }
    };
    let mut p = match made {
        Some(fp) => check::prepare_owned_lean(vec![(sc, Some(fp))], &refill),
        None => check::prepare_owned(vec![sc]),
    }
    .map_err(|e| ConfError::field("inputs", e.to_string()))?
    .remove(0);
    let r = p.judge_written(&read_outputs(dir, &p.case));
    if r.verdict != check::Verdict::Pass {
        refill(&mut p.case);
    }
    Ok((p.case.clone(), p, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scalar keeps its decimal literal, a dyadic one written otherwise becomes its exact
    /// decimal, and one without a finite decimal is refused naming the field.
    #[test]
    fn scalars_as_decimals() {
        let d = |t: &str| decimal_text("eps", t, &parse_rational(t).unwrap());
        assert_eq!(d("1e-5").unwrap(), "1e-5");
        assert_eq!(d("0.001").unwrap(), "0.001");
        assert_eq!(d("1/1024").unwrap(), "0.0009765625");
        let e = d("1/3").unwrap_err().to_string();
        assert!(e.contains("eps") && e.contains("finite decimal"), "{e}");
    }
}
