//! Case files (`bnconf-case/1`, FORMAT.md): parsing, validation, rounding of inputs to the
//! case dtype, and conversion to an exact [`bnconf_spec::Problem`].

use crate::error::{ConfError, Result};
use crate::formats::npy::{read_npy, NpyData};
use bnconf_spec::exact::parse::{parse_exact_with, parse_rational_with, Limits};
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::op::{Convention, Extent, Params};
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt, Rational};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The dtype of a case: a float format, or exact rationals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// Inputs are rounded to this format.
    Float(FloatFormat),
    /// Inputs are exact rationals (or field values for `mean_dy_xhat`).
    Exact,
}

impl Dtype {
    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float(f) => f.name(),
            Dtype::Exact => "exact",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<Dtype> {
        if s == "exact" {
            Some(Dtype::Exact)
        } else {
            FloatFormat::from_name(s).map(Dtype::Float)
        }
    }
    /// The float format, if any.
    pub fn format(self) -> Option<FloatFormat> {
        match self {
            Dtype::Float(f) => Some(f),
            Dtype::Exact => None,
        }
    }
}

/// Limits on the size of input, checked before allocating. Defaults are documented in the
/// README and configurable by CLI flags.
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    /// Most elements of any one tensor (and of the shape's product).
    pub max_elems: usize,
    /// Largest case file, in bytes.
    pub max_file_bytes: u64,
    /// Bounds on exact literals.
    pub number: Limits,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_elems: 1 << 27,
            max_file_bytes: 1 << 30,
            number: Limits::default(),
        }
    }
}

/// A parsed, validated case.
#[derive(Clone, Debug)]
pub struct Case {
    /// `id`.
    pub id: String,
    /// `dtype`.
    pub dtype: Dtype,
    /// `eps` as written (exact).
    pub eps_text: String,
    /// `momentum` as written (`running_update` only).
    pub momentum_text: Option<String>,
    /// The exact problem (inputs already rounded to `dtype`).
    pub problem: Problem,
    /// Extra fields of the case object kept verbatim (e.g. `level`, `tags`).
    pub extra: serde_json::Map<String, Value>,
}

/// Read a case file.
pub fn read_case_file(path: &Path, lim: &InputLimits) -> Result<Case> {
    let v = read_case_json(path, lim)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_case(&v, &base, lim)
}

/// Read a case file as JSON (size-checked), without interpreting it.
pub fn read_case_json(path: &Path, lim: &InputLimits) -> Result<Value> {
    let meta = std::fs::metadata(path).map_err(|e| ConfError::io(path, e))?;
    if meta.len() > lim.max_file_bytes {
        return Err(ConfError::io(
            path,
            format!(
                "file of {} bytes exceeds the limit of {} bytes (--max-file-bytes)",
                meta.len(),
                lim.max_file_bytes
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConfError::io(path, e))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    Ok(v)
}

/// A string field naming one of a fixed set (`op`, `layout`, `dtype`).
fn named<T>(
    o: &serde_json::Map<String, Value>,
    key: &str,
    parse: fn(&str) -> Option<T>,
    choices: &str,
) -> Result<T> {
    let s = get_str(o, key)?;
    parse(s).ok_or_else(|| ConfError::field(key, format!("unknown {key} {s:?} (one of {choices})")))
}

fn get_str<'a>(o: &'a serde_json::Map<String, Value>, k: &str) -> Result<&'a str> {
    match o.get(k) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ConfError::field(k, "must be a string")),
        None => Err(ConfError::field(k, "missing")),
    }
}

/// Text of a JSON scalar value: the literal as written (JSON numbers are kept verbatim).
fn literal(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A scalar field (`eps`, `momentum`): its literal as written and its exact value.
fn exact_scalar(field: &str, v: &Value, lim: &InputLimits) -> Result<(String, Rational)> {
    let text = literal(v)
        .ok_or_else(|| ConfError::field(field, "must be a number or a numeric string"))?;
    let value = parse_rational_with(&text, &lim.number)
        .map_err(|e| ConfError::field(field, e.to_string()))?;
    Ok((text, value))
}

/// The header of a case file: everything but the input values (FORMAT.md fields `format`,
/// `id`, `op`, `layout`, `shape`, `dtype`, `eps`, plus extra fields kept verbatim).
#[derive(Clone, Debug)]
pub struct CaseHeader {
    /// `id`.
    pub id: String,
    /// `op`.
    pub op: Op,
    /// Layout and shape.
    pub geom: Geometry,
    /// `dtype`.
    pub dtype: Dtype,
    /// `eps` as written.
    pub eps_text: String,
    /// `eps`, exact.
    pub eps: Rational,
    /// `momentum` (exact) and `convention` of `running_update`.
    pub params: Params,
    /// `momentum` as written.
    pub momentum_text: Option<String>,
    /// Extra fields of the case object kept verbatim (e.g. `level`, `tags`).
    pub extra: serde_json::Map<String, Value>,
}

/// Parse and validate the header of a case (no input values are read or converted).
pub fn parse_header(v: &Value, lim: &InputLimits) -> Result<CaseHeader> {
    let o = v
        .as_object()
        .ok_or_else(|| ConfError::field("(case)", "must be a JSON object"))?;
    match o.get("format") {
        None => {}
        Some(Value::String(f)) if f == "bnconf-case/1" => {}
        Some(other) => {
            return Err(ConfError::field(
                "format",
                format!("expected \"bnconf-case/1\", got {other}"),
            ))
        }
    }
    let id = match o.get("id") {
        None => "case".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ConfError::field("id", "must be a string")),
    };
    let op = named(
        o,
        "op",
        Op::from_name,
        "forward, backward, eval, sync_forward, sync_backward, running_update, sync_stats",
    )?;
    let layout = named(
        o,
        "layout",
        Layout::from_name,
        "rows, flat, chw, nchw, nhwc",
    )?;
    let dtype = named(o, "dtype", Dtype::from_name, "f64, f32, f16, bf16, exact")?;
    let shape_v = o
        .get("shape")
        .ok_or_else(|| ConfError::field("shape", "missing"))?;
    let shape_a = shape_v
        .as_array()
        .ok_or_else(|| ConfError::field("shape", "must be an array of positive integers"))?;
    let mut shape = Vec::with_capacity(shape_a.len().min(8));
    for (i, d) in shape_a.iter().enumerate() {
        let d = d
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| {
                ConfError::field(
                    format!("shape[{i}]"),
                    format!("must be a non-negative integer, got {d}"),
                )
            })?;
        shape.push(d);
    }
    let geom = Geometry::new(layout, &shape, lim.max_elems).map_err(|e| {
        ConfError::field(
            "shape",
            e.to_string().trim_start_matches("shape: ").to_string(),
        )
    })?;
    if op == Op::SyncStats && layout != Layout::Rows {
        return Err(ConfError::field(
            "layout",
            format!(
                "op `sync_stats` takes layout \"rows\" (shape [C, R]), got {:?}",
                layout.name()
            ),
        ));
    }
    // `eps` is required by the ops that use it and optional (default 0) for the others.
    let zero_eps = Value::from(0);
    let eps_v = match o.get("eps") {
        Some(v) => v,
        None if !op.uses_eps() => &zero_eps,
        None => return Err(ConfError::field("eps", "missing")),
    };
    let (eps_text, eps) = exact_scalar("eps", eps_v, lim)?;
    if eps < Rational::from_integer(0.into()) {
        return Err(ConfError::field(
            "eps",
            format!("must be >= 0, got {eps_text}"),
        ));
    }
    let mut params = Params::default();
    let mut momentum_text = None;
    if op == Op::RunningUpdate {
        let mv = o.get("momentum").ok_or_else(|| {
            ConfError::field("momentum", "missing (op `running_update` needs it)")
        })?;
        let (text, a) = exact_scalar("momentum", mv, lim)?;
        if a < Rational::from_integer(0.into()) || a > Rational::from_integer(1.into()) {
            return Err(ConfError::field(
                "momentum",
                format!("must be in [0, 1], got {text}"),
            ));
        }
        params.momentum = Some(a);
        momentum_text = Some(text);
        params.convention = Some(named(
            o,
            "convention",
            Convention::from_name,
            "pytorch, onnx",
        )?);
    }
    // Other ops keep `momentum`/`convention`, like any unknown field, as extra fields.
    let mut extra = serde_json::Map::new();
    for (k, v) in o {
        let param = op == Op::RunningUpdate && matches!(k.as_str(), "momentum" | "convention");
        if !param
            && !matches!(
                k.as_str(),
                "format" | "id" | "op" | "layout" | "shape" | "dtype" | "eps" | "inputs"
            )
        {
            extra.insert(k.clone(), v.clone());
        }
    }
    Ok(CaseHeader {
        id,
        op,
        geom,
        dtype,
        eps_text,
        eps,
        params,
        momentum_text,
        extra,
    })
}

/// Parse a case from JSON; `base` resolves `{"npy": path}` inputs.
pub fn parse_case(v: &Value, base: &Path, lim: &InputLimits) -> Result<Case> {
    let CaseHeader {
        id,
        op,
        geom,
        dtype,
        eps_text,
        eps,
        params,
        momentum_text,
        extra,
    } = parse_header(v, lim)?;
    let o = v.as_object().expect("checked by parse_header");
    let shape = geom.shape.clone();
    let inputs_v = o
        .get("inputs")
        .ok_or_else(|| ConfError::field("inputs", "missing"))?;
    let inputs_o = inputs_v
        .as_object()
        .ok_or_else(|| ConfError::field("inputs", "must be an object of named arrays"))?;
    for k in inputs_o.keys() {
        if !op.inputs().contains(&k.as_str()) {
            return Err(ConfError::field(
                format!("inputs.{k}"),
                format!(
                    "not an input of op `{}` (it takes {})",
                    op.name(),
                    op.inputs().join(", ")
                ),
            ));
        }
    }
    let mut inputs = BTreeMap::new();
    for &name in op.inputs() {
        let field = format!("inputs.{name}");
        let val = inputs_o.get(name).ok_or_else(|| {
            ConfError::field(&field, format!("missing (op `{}` needs it)", op.name()))
        })?;
        let (want_shape, want_len) = match Op::extent(name) {
            Extent::Cells => (shape.clone(), geom.len()),
            Extent::Channel => (vec![geom.c], geom.c),
            Extent::Shards => (vec![geom.m], geom.m),
        };
        let values = read_input(
            &field,
            val,
            base,
            &want_shape,
            want_len,
            dtype,
            name == "mean_dy_xhat",
            lim,
        )?;
        inputs.insert(name.to_string(), values);
    }
    let problem = Problem::new_with_params(op, geom, eps, inputs, params)?;
    Ok(Case {
        id,
        dtype,
        eps_text,
        momentum_text,
        problem,
        extra,
    })
}

/// Round an exact rational input to the case dtype (correctly, ties to even), refusing
/// values that overflow it.
pub fn to_dtype(field: &str, i: usize, r: Rational, dtype: Dtype) -> Result<QSqrt> {
    match dtype {
        Dtype::Exact => Ok(QSqrt::rational(r)),
        Dtype::Float(f) => {
            let rd = round(&QSqrt::rational(r), f);
            let q = rd.to_rational().ok_or_else(|| {
                ConfError::field(
                    format!("{field}[{i}]"),
                    format!("overflows {} (rounds to infinity)", f.name()),
                )
            })?;
            Ok(QSqrt::rational(q))
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn read_input(
    field: &str,
    val: &Value,
    base: &Path,
    want_shape: &[usize],
    want_len: usize,
    dtype: Dtype,
    field_values: bool,
    lim: &InputLimits,
) -> Result<Vec<QSqrt>> {
    match val {
        Value::Array(a) => {
            if a.len() != want_len {
                return Err(ConfError::field(
                    field,
                    format!(
                        "expected {want_len} values (shape {want_shape:?}), got {}",
                        a.len()
                    ),
                ));
            }
            let mut out = Vec::with_capacity(a.len());
            for (i, e) in a.iter().enumerate() {
                let lit = literal(e).ok_or_else(|| {
                    ConfError::field(
                        format!("{field}[{i}]"),
                        format!("must be a number or a numeric string, got {e}"),
                    )
                })?;
                let v = if field_values && dtype == Dtype::Exact {
                    parse_exact_with(&lit, &lim.number)
                        .map_err(|err| ConfError::field(format!("{field}[{i}]"), err.to_string()))?
                } else {
                    if dtype != Dtype::Exact && lit.contains("sqrt") {
                        return Err(ConfError::field(
                            format!("{field}[{i}]"),
                            "sqrt values need dtype \"exact\"",
                        ));
                    }
                    let r = parse_rational_with(&lit, &lim.number).map_err(|err| {
                        ConfError::field(format!("{field}[{i}]"), err.to_string())
                    })?;
                    to_dtype(field, i, r, dtype)?
                };
                out.push(v);
            }
            Ok(out)
        }
        Value::Object(o) if o.contains_key("npy") => {
            let rel = o["npy"]
                .as_str()
                .ok_or_else(|| ConfError::field(format!("{field}.npy"), "must be a path string"))?;
            let path: PathBuf = base.join(rel);
            let (shape, data) = read_npy(&path, lim.max_elems)
                .map_err(|e| ConfError::field(format!("{field}.npy"), e.to_string()))?;
            if shape.iter().product::<usize>() != want_len
                || (shape != want_shape && shape != [want_len])
            {
                return Err(ConfError::field(
                    format!("{field}.npy"),
                    format!(
                        "{}: shape {shape:?}, expected {want_shape:?}",
                        path.display()
                    ),
                ));
            }
            npy_to_exact(field, &data, dtype)
        }
        _ => Err(ConfError::field(
            field,
            "must be an array of values or {\"npy\": \"path.npy\"}",
        )),
    }
}

/// Exact values of npy data, rounded to the dtype; non-finite values are refused.
pub fn npy_to_exact(field: &str, data: &NpyData, dtype: Dtype) -> Result<Vec<QSqrt>> {
    let mut out = Vec::with_capacity(data.len());
    for i in 0..data.len() {
        let x = data.get(i);
        let r = f64_to_rational(x).ok_or_else(|| {
            ConfError::field(format!("{field}[{i}]"), format!("non-finite value {x}"))
        })?;
        out.push(to_dtype(field, i, r, dtype)?);
    }
    Ok(out)
}
