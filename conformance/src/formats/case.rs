//! Case files (`bnconf-case/1`, FORMAT.md): parsing, validation, rounding of inputs to the
//! case dtype, and conversion to an exact [`bnconf_spec::Problem`].

use crate::error::{ConfError, Result};
use crate::formats::fsafe;
use crate::formats::npy::{read_npy_case_input, NpyData};
use bnconf_spec::exact::fmt_rational;
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

/// Limits on the size of input, checked before allocating. Defaults are documented in
/// docs/HOSTILE.md (with the measurements they come from) and configurable by CLI flags.
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    /// Most elements of any one tensor (and of the shape's product): npy inputs on the fast
    /// exact path (`golden --out-dir`).
    pub max_elems: usize,
    /// Most elements of a case evaluated by the per-element exact path (a golden written as
    /// JSON, `-o`/stdout, and `--out-dir` cases the fast path does not cover), and most values
    /// of any one JSON array in a case file. 2-3.4 KB of memory per element on that path.
    pub max_json_elems: usize,
    /// Largest case file, in bytes.
    pub max_file_bytes: u64,
    /// Bounds on exact literals.
    pub number: Limits,
}

/// Default of [`InputLimits::max_json_elems`] (`--max-json-elems`): 2^20 elements, 2-3.6 GB
/// and a few minutes on the per-element exact path (docs/HOSTILE.md).
pub const DEFAULT_MAX_JSON_ELEMS: usize = 1 << 20;

/// A case file may hold at most this many JSON values per [`InputLimits::max_json_elems`]
/// (the inputs of the op with the most inputs, seven, plus room for extra fields): parsed JSON
/// takes about 100 bytes per value whatever the text (100 MB of `0,0,…` took 5.2 GB), so this
/// bounds the parse's memory.
pub const JSON_VALUES_PER_ELEM: usize = 8;

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_elems: 1 << 27,
            max_json_elems: DEFAULT_MAX_JSON_ELEMS,
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
    /// `dtype`: the activations' (`x`, `dy`), and every input's when `param_dtype` is absent.
    pub dtype: Dtype,
    /// `param_dtype`: the dtype of every input other than `x`, `dy` (`gamma`, `beta`, running
    /// statistics, `sync_stats`' shard statistics); `dtype` when absent (mixed precision:
    /// `"dtype": "f16", "param_dtype": "f32"`, as in the kernel protocol).
    pub param_dtype: Dtype,
    /// `eps` as written (exact).
    pub eps_text: String,
    /// `momentum` as written (`running_update` only).
    pub momentum_text: Option<String>,
    /// The exact problem (inputs already rounded to `dtype`).
    pub problem: Problem,
    /// Extra fields of the case object kept verbatim (e.g. `level`, `tags`).
    pub extra: serde_json::Map<String, Value>,
}

impl Case {
    /// The case's header: every field but the input values.
    pub fn header(&self) -> CaseHeader {
        let p = &self.problem;
        CaseHeader {
            id: self.id.clone(),
            op: p.op,
            geom: p.geom.clone(),
            dtype: self.dtype,
            param_dtype: self.param_dtype,
            eps_text: self.eps_text.clone(),
            eps: p.eps.clone(),
            params: p.params.clone(),
            momentum_text: self.momentum_text.clone(),
            extra: self.extra.clone(),
        }
    }
}

/// How a decimal text (`eps`, `momentum`) is written in a [`CaseObject`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Literal {
    /// As a JSON string, verbatim (a golden's case: exact text kept).
    Text,
    /// As a JSON number with the text's digits (the protocol's `case.json`); the text must be a
    /// JSON number literal.
    Number,
    /// As a JSON number when the text is a JSON number literal, else as a string (a shrunk
    /// case file).
    NumberOrText,
}

impl Literal {
    fn value(self, text: &str, what: &str) -> Value {
        let num = || serde_json::from_str::<serde_json::Number>(text);
        match self {
            Literal::Text => Value::String(text.to_string()),
            Literal::Number => Value::Number(
                num().unwrap_or_else(|e| panic!("{what} is a JSON number literal: {e:?}")),
            ),
            Literal::NumberOrText => num()
                .map(Value::Number)
                .unwrap_or_else(|_| Value::String(text.to_string())),
        }
    }
}

/// The one writer of the `bnconf-case/1` object (FORMAT.md): every key name and value encoding
/// of the document is written here. [`CaseObject::new`] writes `format`, `id`, `op`, `layout`,
/// `shape`, `dtype`; each further method writes its FORMAT.md field(s) at the end, so a caller's
/// chain states the fields in its document's order (serde_json keeps insertion order).
#[derive(Clone, Debug)]
#[must_use]
pub struct CaseObject(serde_json::Map<String, Value>);

impl CaseObject {
    /// `format`, `id`, `op`, `layout`, `shape`, `dtype`.
    pub fn new(id: &str, op: Op, layout: Layout, shape: &[usize], dtype: Dtype) -> CaseObject {
        CaseObject(serde_json::Map::new())
            .put("format", Value::from("bnconf-case/1"))
            .put("id", Value::from(id))
            .put("op", Value::from(op.name()))
            .put("layout", Value::from(layout.name()))
            .put("shape", Value::from(shape))
            .put("dtype", Value::from(dtype.name()))
    }
    fn put(mut self, key: &str, v: Value) -> CaseObject {
        self.0.insert(key.to_string(), v);
        self
    }
    /// `f(self)` when `cond`, else `self` (a field written only in some cases).
    pub fn when(self, cond: bool, f: impl FnOnce(CaseObject) -> CaseObject) -> CaseObject {
        if cond {
            f(self)
        } else {
            self
        }
    }
    /// `param_dtype`.
    pub fn param_dtype(self, d: Dtype) -> CaseObject {
        self.put("param_dtype", Value::from(d.name()))
    }
    /// `eps`, the decimal `text` written as `how` says.
    pub fn eps(self, text: &str, how: Literal) -> CaseObject {
        let v = how.value(text, "eps");
        self.put("eps", v)
    }
    /// `eps_exact`: the exact value as a reduced rational.
    pub fn eps_exact(self, q: &Rational) -> CaseObject {
        self.put("eps_exact", Value::from(fmt_rational(q)))
    }
    /// `momentum` (`running_update`), the decimal `text` written as `how` says.
    pub fn momentum(self, text: &str, how: Literal) -> CaseObject {
        let v = how.value(text, "momentum");
        self.put("momentum", v)
    }
    /// `momentum_exact`: the exact value as a reduced rational.
    pub fn momentum_exact(self, q: &Rational) -> CaseObject {
        self.put("momentum_exact", Value::from(fmt_rational(q)))
    }
    /// `convention` (`running_update`).
    pub fn convention(self, c: Convention) -> CaseObject {
        self.put("convention", Value::from(c.name()))
    }
    /// `inputs` as the op's input names (the protocol's `case.json`, an `--out-dir`
    /// golden.json).
    pub fn input_names(self, names: &[&str]) -> CaseObject {
        self.put("inputs", Value::from(names))
    }
    /// `outputs` as the op's output names (the protocol's `case.json`).
    pub fn output_names(self, names: &[&str]) -> CaseObject {
        self.put("outputs", Value::from(names))
    }
    /// `inputs` as `{"<name>": {"npy": "<name>.npy"}}`, in the order given (npy files beside
    /// the case file).
    pub fn npy_inputs<'a>(self, names: impl IntoIterator<Item = &'a str>) -> CaseObject {
        let m: serde_json::Map<String, Value> = names
            .into_iter()
            .map(|n| {
                let mut f = serde_json::Map::new();
                f.insert("npy".into(), Value::from(format!("{n}.npy")));
                (n.to_string(), Value::Object(f))
            })
            .collect();
        self.put("inputs", Value::Object(m))
    }
    /// `inputs` as given (the values, or any other form FORMAT.md allows).
    pub fn inputs(self, inputs: Value) -> CaseObject {
        self.put("inputs", inputs)
    }
    /// `level`, `class`, `target` of a generated case.
    pub fn level_class_target(self, level: &str, class: &str, target: &str) -> CaseObject {
        self.put("level", Value::from(level))
            .put("class", Value::from(class))
            .put("target", Value::from(target))
    }
    /// `bf16_storage`: bf16 tensors stored as `u16` bit patterns.
    pub fn bf16_storage(self) -> CaseObject {
        self.put("bf16_storage", Value::from("u16-bits"))
    }
    /// `ranks` and `shard_sizes` (`sync_stats`' shards, `replicated` suite).
    pub fn shards(self, shard_sizes: &[usize]) -> CaseObject {
        self.put("ranks", Value::from(shard_sizes.len()))
            .put("shard_sizes", Value::from(shard_sizes))
    }
    /// `shrunk_from`: the id of the case a shrunk case was shrunk from.
    pub fn shrunk_from(self, id: &str) -> CaseObject {
        self.put("shrunk_from", Value::from(id))
    }
    /// Extra fields, verbatim and in their order.
    pub fn extra(mut self, extra: &serde_json::Map<String, Value>) -> CaseObject {
        for (k, v) in extra {
            self.0.insert(k.clone(), v.clone());
        }
        self
    }
    /// The object.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

/// The `bnconf-case/1` object of a case (FORMAT.md), in its field order: the header's fields
/// (`param_dtype` where it differs from `dtype`; `momentum`, `momentum_exact` and `convention`
/// for `running_update`; the extra fields verbatim), then `inputs` as given (the values, or
/// their names in an `--out-dir` golden.json).
pub fn case_object_json(h: &CaseHeader, inputs: Value) -> Value {
    let mut o = CaseObject::new(&h.id, h.op, h.geom.layout, &h.geom.shape, h.dtype)
        .when(h.param_dtype != h.dtype, |o| o.param_dtype(h.param_dtype))
        .eps(&h.eps_text, Literal::Text)
        .eps_exact(&h.eps);
    if let (Some(a), Some(conv)) = (&h.params.momentum, h.params.convention) {
        let text = h.momentum_text.clone().unwrap_or_else(|| fmt_rational(a));
        o = o
            .momentum(&text, Literal::Text)
            .momentum_exact(a)
            .convention(conv);
    }
    o.extra(&h.extra).inputs(inputs).into_value()
}

/// Read a case file.
pub fn read_case_file(path: &Path, lim: &InputLimits) -> Result<Case> {
    let v = read_case_json(path, lim)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_case(&v, &base, lim)
}

/// Read a case file as JSON, without interpreting it. Only a regular file is read (a FIFO or
/// device is refused, naming the path), its size is checked before reading
/// (`max_file_bytes`), and its JSON arrays and values are counted by a linear scan before
/// they are parsed (`max_json_elems`), so that neither the read nor the parse can exhaust
/// memory.
pub fn read_case_json(path: &Path, lim: &InputLimits) -> Result<Value> {
    let text = fsafe::read_regular_string(path, lim.max_file_bytes, "--max-file-bytes")?;
    scan_json(
        text.as_bytes(),
        lim.max_json_elems,
        lim.max_json_elems.saturating_mul(JSON_VALUES_PER_ELEM),
    )
    .map_err(|msg| ConfError::io(path, msg))?;
    serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: path.display().to_string(),
        msg: e.to_string(),
    })
}

/// A linear, non-recursive scan of JSON text that refuses an array of more than `max_array`
/// values (naming it, e.g. `inputs.x`) or a document of more than `max_values` values, before
/// anything is parsed. It judges sizes only: text it does not understand is left to the JSON
/// parser, which reports the syntax error.
pub fn scan_json(b: &[u8], max_array: usize, max_values: usize) -> std::result::Result<(), String> {
    /// Deepest nesting followed; deeper, the JSON parser's recursion limit (128) reports it.
    const MAX_DEPTH: usize = 256;
    struct Frame {
        array: bool,
        /// Values so far (arrays) or the last key (objects, cut to 64 bytes).
        count: usize,
        key: String,
        expect_key: bool,
    }
    let path = |stack: &[Frame]| -> String {
        let mut p = String::new();
        for (i, f) in stack.iter().enumerate() {
            if f.array {
                if i + 1 < stack.len() {
                    p.push_str(&format!("[{}]", f.count.saturating_sub(1)));
                }
            } else if !f.key.is_empty() {
                if !p.is_empty() {
                    p.push('.');
                }
                p.push_str(&f.key);
            }
        }
        if p.is_empty() {
            "(case)".into()
        } else {
            p
        }
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut values = 0usize;
    let mut i = 0usize;
    // Count one value at the current position.
    let mut value = |stack: &mut Vec<Frame>| -> std::result::Result<(), String> {
        values += 1;
        if values > max_values {
            return Err(format!(
                "more than {max_values} JSON values in the file (--max-json-elems {max_array} allows {JSON_VALUES_PER_ELEM} per element): give large inputs as {{\"npy\": \"path.npy\"}}"
            ));
        }
        if let Some(f) = stack.last_mut() {
            if f.array {
                f.count += 1;
                if f.count > max_array {
                    return Err(format!(
                        "{}: more than {max_array} values in one JSON array (--max-json-elems): give large inputs as {{\"npy\": \"path.npy\"}} and use --out-dir",
                        path(stack)
                    ));
                }
            }
        }
        Ok(())
    };
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'{' | b'[' => {
                value(&mut stack)?;
                if stack.len() >= MAX_DEPTH {
                    return Ok(());
                }
                stack.push(Frame {
                    array: b[i] == b'[',
                    count: 0,
                    key: String::new(),
                    expect_key: b[i] == b'{',
                });
                i += 1;
            }
            b'}' | b']' => {
                if stack.pop().is_none() {
                    return Ok(());
                }
                i += 1;
            }
            b',' => {
                if let Some(f) = stack.last_mut() {
                    f.expect_key = !f.array;
                }
                i += 1;
            }
            b':' => {
                if let Some(f) = stack.last_mut() {
                    f.expect_key = false;
                }
                i += 1;
            }
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let end = i.min(b.len());
                i += 1;
                match stack.last_mut() {
                    Some(f) if !f.array && f.expect_key => {
                        let k = &b[start..end.min(start + 64)];
                        f.key = String::from_utf8_lossy(k).into_owned();
                    }
                    _ => value(&mut stack)?,
                }
            }
            _ => {
                // A number or literal: up to the next delimiter.
                while i < b.len()
                    && !matches!(
                        b[i],
                        b',' | b']' | b'}' | b':' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    i += 1;
                }
                value(&mut stack)?;
            }
        }
    }
    Ok(())
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
pub(crate) fn exact_scalar(
    field: &str,
    v: &Value,
    lim: &InputLimits,
) -> Result<(String, Rational)> {
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
    /// `param_dtype` (`dtype` when absent).
    pub param_dtype: Dtype,
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
    let param_dtype = if o.contains_key("param_dtype") {
        let p = named(o, "param_dtype", Dtype::from_name, "f64, f32, f16, bf16")?;
        if (p == Dtype::Exact) != (dtype == Dtype::Exact) {
            return Err(ConfError::field(
                "param_dtype",
                "exact goes with dtype exact only (a float dtype needs a float param_dtype)",
            ));
        }
        p
    } else {
        dtype
    };
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
                "format"
                    | "id"
                    | "op"
                    | "layout"
                    | "shape"
                    | "dtype"
                    | "param_dtype"
                    | "eps"
                    | "inputs"
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
        param_dtype,
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
        param_dtype,
        eps_text,
        eps,
        params,
        momentum_text,
        extra,
    } = parse_header(v, lim)?;
    let o = v.as_object().expect("checked by parse_header");
    if geom.len() > lim.max_json_elems {
        return Err(ConfError::field(
            "shape",
            format!(
                "{:?} has {} elements, more than the per-element exact path takes ({}, --max-json-elems: goldens written as JSON, and --out-dir cases the fast path does not cover); give the inputs as npy and use --out-dir",
                geom.shape,
                geom.len(),
                lim.max_json_elems
            ),
        ));
    }
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
        let in_dtype = if bnconf_spec::tensor::is_activation(name) {
            dtype
        } else {
            param_dtype
        };
        let values = read_input(
            &field,
            val,
            base,
            &want_shape,
            want_len,
            in_dtype,
            name == "mean_dy_xhat",
            lim,
        )?;
        inputs.insert(name.to_string(), values);
    }
    let problem = Problem::new_with_params(op, geom, eps, inputs, params)?;
    Ok(Case {
        id,
        dtype,
        param_dtype,
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
            if a.len() > lim.max_json_elems {
                return Err(ConfError::field(
                    field,
                    format!(
                        "{} values in a JSON array, more than {} (--max-json-elems): give large inputs as {{\"npy\": \"path.npy\"}} and use --out-dir",
                        a.len(),
                        lim.max_json_elems
                    ),
                ));
            }
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
            let format = match dtype {
                Dtype::Float(f) => Some(f),
                Dtype::Exact => None,
            };
            let data = read_npy_input(field, &path, want_shape, want_len, format, lim)?;
            npy_to_exact(field, &data, dtype)
        }
        _ => Err(ConfError::field(
            field,
            "must be an array of values or {\"npy\": \"path.npy\"}",
        )),
    }
}

/// The data of input `field` given as `{"npy": path}` (a tensor of storage format `format`,
/// `None`: exact; [`read_npy_case_input`] within `lim.max_elems`), of shape `want_shape` or
/// flat with its `want_len` elements; errors name `<field>.npy`.
pub(crate) fn read_npy_input(
    field: &str,
    path: &Path,
    want_shape: &[usize],
    want_len: usize,
    format: Option<FloatFormat>,
    lim: &InputLimits,
) -> Result<NpyData> {
    let (shape, data) = read_npy_case_input(path, lim.max_elems, format)
        .map_err(|e| ConfError::field(format!("{field}.npy"), e.to_string()))?;
    if shape.iter().product::<usize>() != want_len || (shape != want_shape && shape != [want_len]) {
        return Err(ConfError::field(
            format!("{field}.npy"),
            format!(
                "{}: shape {shape:?}, expected {want_shape:?}",
                path.display()
            ),
        ));
    }
    Ok(data)
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
