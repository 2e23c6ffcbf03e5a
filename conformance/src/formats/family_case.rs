//! The normalization family's case files (FORMAT.md "Added in bnconf 0.3: the normalization
//! family in the protocol"): the `case.json` an export writes per family case, and the family
//! case file `bnconf golden` reads (inline values or `{"npy": path}`). The kernels' own case
//! type is impl's [`FamilyCase`]; this file reads and writes its fields (`family`,
//! `normalized_ndim`, `groups`, `affine`, `convention`, `optional_outputs`) and the shapes of
//! its tensors. Every error names the field.

use crate::error::{ConfError, Result};
use crate::formats::case::{
    exact_scalar, read_input, read_npy_input, to_dtype, Dtype as CaseDtype, InputLimits,
};
use crate::formats::npy::{read_npy_any, NpyData};
use crate::par::*;
use bnconf_impl::family::grouping::{group_dims, last_counts};
use bnconf_impl::family::{
    is_family_activation, Affine, Family, FamilyCase, FamilyError, FamilyLayout, FamilyOp, Named,
    RmsConvention,
};
use bnconf_impl::Dtype;
use bnconf_spec::exact::fmt_rational;
use bnconf_spec::exact::round::{f64_to_rational, round_rational, FloatFormat};
use bnconf_spec::{QSqrt, Rational};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Whether a case object is a family case: it has a `family` field, or its `op` is a family
/// op (`layer_norm`, `rms_norm_backward`, ...).
pub fn is_family_case(v: &Value) -> bool {
    v.get("family").is_some()
        || v.get("op")
            .and_then(Value::as_str)
            .is_some_and(|o| FamilyOp::from_name(o).is_some())
}

/// The float format of impl's dtype.
pub fn format_of(d: Dtype) -> FloatFormat {
    match d {
        Dtype::F64 => FloatFormat::F64,
        Dtype::F32 => FloatFormat::F32,
        Dtype::F16 => FloatFormat::F16,
        Dtype::BF16 => FloatFormat::BF16,
    }
}

/// The shape of tensor `name` of a family case (FORMAT.md): `x`, `dy`, `y`, `dx` the case's
/// shape; `gamma`, `beta`, `dgamma`, `dbeta` the normalized shape (layout `last`: the
/// trailing `normalized_ndim` axes) or `[C]` (group_norm); `mean`, `rstd` the batch shape
/// (the leading axes) or `[N, G]` (group_norm). The case's fields must be valid.
pub fn family_shape(case: &FamilyCase, name: &str) -> Vec<usize> {
    let s = &case.shape;
    if is_family_activation(name) {
        return s.clone();
    }
    let stat = matches!(name, "mean" | "rstd");
    match (case.normalized_ndim, case.groups) {
        (Some(k), _) => {
            let cut = s.len().saturating_sub(k);
            if stat {
                s[..cut].to_vec()
            } else {
                s[cut..].to_vec()
            }
        }
        (None, g) => {
            let c = s[if case.layout.channels_last() {
                s.len() - 1
            } else {
                1
            }];
            if stat {
                vec![s[0], g.unwrap_or(1)]
            } else {
                vec![c]
            }
        }
    }
}

/// The `case.json` of a family case in an exported directory: batch_norm's fields (`format`,
/// `id`, `op`, `layout`, `shape`, `dtype`, `param_dtype`, `eps`, `eps_exact`, `inputs`,
/// `outputs`, `level`, `class`) and the family's (`family`, `normalized_ndim` or `groups`,
/// `affine`, `convention`, `optional_outputs`); `bf16_storage` where a tensor is bf16.
pub fn family_case_json(id: &str, case: &FamilyCase, level: &str, class: &str) -> Value {
    let eps = f64_to_rational(case.eps).expect("a valid case's eps is finite");
    let mut o = Map::new();
    let mut put = |k: &str, v: Value| {
        o.insert(k.to_string(), v);
    };
    put("format", json!("bnconf-case/1"));
    put("id", json!(id));
    put("family", json!(case.op.family().name()));
    put("op", json!(case.op.name()));
    put("layout", json!(case.layout.name()));
    put("shape", json!(case.shape));
    put("dtype", json!(case.dtype.name()));
    put("param_dtype", json!(case.param_dtype.name()));
    put("eps", json!(case.eps));
    put("eps_exact", json!(fmt_rational(&eps)));
    if let Some(k) = case.normalized_ndim {
        put("normalized_ndim", json!(k));
    }
    if let Some(g) = case.groups {
        put("groups", json!(g));
    }
    put("affine", json!(case.affine.name()));
    put("convention", json!(case.convention.name()));
    put("inputs", json!(case.op.inputs(case.affine)));
    put("outputs", json!(case.op.outputs(case.affine)));
    put("optional_outputs", json!(case.op.optional_outputs()));
    put("level", json!(level));
    put("class", json!(class));
    if case.dtype == Dtype::BF16 || case.param_dtype == Dtype::BF16 {
        put("bf16_storage", json!("u16-bits"));
    }
    Value::Object(o)
}

/// A family case's header: every field but the input values. `case` has no inputs yet.
#[derive(Clone, Debug)]
pub struct FamilyHeader {
    /// `id` (`"case"` when absent).
    pub id: String,
    /// The case's fields (no inputs); `eps` the nearest f64 of [`FamilyHeader::eps`].
    pub case: FamilyCase,
    /// `eps`, exact: `eps_exact` when the case has it (an export's case.json: the exact
    /// value of the f64 its kernel reads), else `eps` as written.
    pub eps: Rational,
    /// Fields kept verbatim in the golden echo (`level`, `class`, tags).
    pub extra: Map<String, Value>,
}

/// The error of a [`FamilyError`], its field prefixed by `prefix` (`case.json: `).
pub fn family_error(prefix: &str, e: FamilyError) -> ConfError {
    ConfError::field(format!("{prefix}{}", e.field), e.reason)
}

fn str_field<'a>(o: &'a Map<String, Value>, k: &str, p: &str) -> Result<Option<&'a str>> {
    match o.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ConfError::field(format!("{p}{k}"), "must be a string")),
    }
}

fn named_field<T: Named>(o: &Map<String, Value>, p: &str) -> Result<Option<T>> {
    match str_field(o, T::FIELD, p)? {
        None => Ok(None),
        Some(s) => T::parse(s).map(Some).map_err(|e| family_error(p, e)),
    }
}

fn count_field(o: &Map<String, Value>, k: &str, p: &str) -> Result<Option<usize>> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .map(Some)
            .ok_or_else(|| {
                ConfError::field(
                    format!("{p}{k}"),
                    format!("must be a non-negative integer, got {v}"),
                )
            }),
    }
}

fn float_dtype(o: &Map<String, Value>, k: &str, p: &str) -> Result<Option<Dtype>> {
    match str_field(o, k, p)? {
        None => Ok(None),
        Some("exact") => Err(ConfError::field(
            format!("{p}{k}"),
            "\"exact\" is not available for the normalization family (f64, f32, f16, bf16)",
        )),
        Some(s) => Dtype::from_name(s).map(Some).ok_or_else(|| {
            ConfError::field(
                format!("{p}{k}"),
                format!("unknown dtype {s:?} (one of f64, f32, f16, bf16)"),
            )
        }),
    }
}

/// Parse and validate a family case's header (`p` prefixes the field names of errors, e.g.
/// `DIR/id/case.json: `): `format`, `id`, `family` (optional; the op's), `op`, `layout`,
/// `shape`, `dtype`, `param_dtype`, `eps` (or `eps_exact`), `normalized_ndim` / `groups`,
/// `affine` (default: the family's full one), `convention` (default `standard`). The sizes
/// are checked (no extent 0, no overflow, `groups` dividing C, at most `max_elems` cells)
/// before anything is allocated from them.
pub fn parse_family_header(v: &Value, lim: &InputLimits, p: &str) -> Result<FamilyHeader> {
    let o = v
        .as_object()
        .ok_or_else(|| ConfError::field(format!("{p}(case)"), "must be a JSON object"))?;
    match o.get("format") {
        None => {}
        Some(Value::String(f)) if f == "bnconf-case/1" => {}
        Some(other) => {
            return Err(ConfError::field(
                format!("{p}format"),
                format!("expected \"bnconf-case/1\", got {other}"),
            ))
        }
    }
    let id = str_field(o, "id", p)?.unwrap_or("case").to_string();
    let op: FamilyOp =
        named_field(o, p)?.ok_or_else(|| ConfError::field(format!("{p}op"), "missing"))?;
    if let Some(f) = named_field::<Family>(o, p)? {
        if f != op.family() {
            return Err(ConfError::field(
                format!("{p}family"),
                format!("{f}, but op `{op}` is of {}", op.family()),
            ));
        }
    }
    let layout: FamilyLayout =
        named_field(o, p)?.ok_or_else(|| ConfError::field(format!("{p}layout"), "missing"))?;
    let shape_a = o
        .get("shape")
        .ok_or_else(|| ConfError::field(format!("{p}shape"), "missing"))?
        .as_array()
        .ok_or_else(|| {
            ConfError::field(format!("{p}shape"), "must be an array of positive integers")
        })?;
    let mut shape = Vec::with_capacity(shape_a.len().min(8));
    for (i, d) in shape_a.iter().enumerate() {
        shape.push(
            d.as_u64()
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| {
                    ConfError::field(
                        format!("{p}shape[{i}]"),
                        format!("must be a non-negative integer, got {d}"),
                    )
                })?,
        );
    }
    let dtype = float_dtype(o, "dtype", p)?
        .ok_or_else(|| ConfError::field(format!("{p}dtype"), "missing"))?;
    let param_dtype = float_dtype(o, "param_dtype", p)?.unwrap_or(dtype);
    let eps_v = match (o.get("eps_exact"), o.get("eps")) {
        (Some(e), _) => ("eps_exact", e),
        (None, Some(e)) => ("eps", e),
        (None, None) => return Err(ConfError::field(format!("{p}eps"), "missing")),
    };
    let (_, eps) = exact_scalar(&format!("{p}{}", eps_v.0), eps_v.1, lim)?;
    let eps_f64 = round_rational(&eps, FloatFormat::F64).to_f64();
    let normalized_ndim = count_field(o, "normalized_ndim", p)?;
    let groups = count_field(o, "groups", p)?;
    let affine = named_field(o, p)?.unwrap_or(match op.family() {
        Family::RmsNorm => Affine::Weight,
        _ => Affine::WeightBias,
    });
    let convention = named_field(o, p)?.unwrap_or(RmsConvention::Standard);
    let case = FamilyCase {
        op,
        layout,
        shape,
        dtype,
        param_dtype,
        eps: eps_f64,
        normalized_ndim,
        groups,
        affine,
        convention,
        inputs: BTreeMap::new(),
    };
    let cells = family_sizes(&case).map_err(|e| family_error(p, e))?.0;
    if cells > lim.max_elems {
        return Err(ConfError::field(
            format!("{p}shape"),
            format!(
                "{:?} has {cells} elements, more than the limit of {}",
                case.shape, lim.max_elems
            ),
        ));
    }
    // Everything but the inputs (validate() would name the first missing input).
    if let Err(e) = case.validate() {
        if !case.op.inputs(case.affine).contains(&e.field.as_str()) {
            return Err(family_error(p, e));
        }
    }
    let mut extra = Map::new();
    for (k, v) in o {
        if !matches!(
            k.as_str(),
            "format"
                | "id"
                | "family"
                | "op"
                | "layout"
                | "shape"
                | "dtype"
                | "param_dtype"
                | "eps"
                | "eps_exact"
                | "normalized_ndim"
                | "groups"
                | "affine"
                | "convention"
                | "inputs"
                | "outputs"
                | "optional_outputs"
                | "bf16_storage"
        ) {
            extra.insert(k.clone(), v.clone());
        }
    }
    Ok(FamilyHeader {
        id,
        case,
        eps,
        extra,
    })
}

/// `(cells, parameters)` of a family case from its fields, checked, nothing allocated.
pub fn family_sizes(case: &FamilyCase) -> std::result::Result<(usize, usize), FamilyError> {
    match (case.normalized_ndim, case.groups) {
        (Some(k), _) => last_counts(&case.shape, k),
        (None, Some(g)) => {
            let (n, c, s) = group_dims(case.layout, &case.shape, g)?;
            Ok((n * c * s, c))
        }
        (None, None) if case.layout == FamilyLayout::Last => Err(FamilyError::new(
            "normalized_ndim",
            "required for layout `last`",
        )),
        (None, None) => Err(FamilyError::new("groups", "required for group_norm")),
    }
}

/// A family case file read whole: its header, its inputs exact (each rounded to its dtype)
/// and the same inputs as f64 in `header.case.inputs` (validated).
#[derive(Clone, Debug)]
pub struct FamilyCaseFile {
    pub header: FamilyHeader,
    pub inputs: BTreeMap<String, Vec<QSqrt>>,
}

/// Parse a family case file (`base` resolves `{"npy": path}` inputs): the header, then
/// `inputs`, an object holding exactly the op's inputs under `affine`, each an array of values
/// or an npy file of its tensor's shape (or, as an export's `case.json` has it, the list of
/// the input names: `<name>.npy` beside the case file).
pub fn parse_family_case(v: &Value, base: &Path, lim: &InputLimits) -> Result<FamilyCaseFile> {
    let mut header = parse_family_header(v, lim, "")?;
    // The exact path evaluates every cell: sized before any input is read.
    exact_cells_limit(&header.case, lim)?;
    let mut inputs = BTreeMap::new();
    let mut floats = BTreeMap::new();
    for_each_input(v, &header.case, |name, field, val, shape, dt| {
        let values = if val.get("listed").is_some() {
            read_listed(field, &base.join(format!("{name}.npy")), shape, dt, lim)?
        } else {
            let len = shape.iter().product::<usize>();
            read_input(field, val, base, shape, len, dt, false, lim)?
        };
        // Float dtypes: every value is a rounded float, exactly an f64.
        floats.insert(name.to_string(), exact_to_f64s(&values));
        inputs.insert(name.to_string(), values);
        Ok(())
    })?;
    header.case.inputs = floats;
    validate_inputs(&header.case)?;
    Ok(FamilyCaseFile { header, inputs })
}

/// A family case file read for judging (`check --case`, `shrink --case-file`): the header
/// with its inputs as f64 in `header.case.inputs`, each rounded correctly to its dtype, and
/// validated as [`parse_family_case`] validates them (the same errors, naming the same
/// fields) -- but an npy input (`{"npy": path}`, an export's listed `<name>.npy`) is read
/// straight as floats, with no exact value per element. JSON arrays take the exact route
/// (they are bounded by `max_json_elems`).
///
/// The cell limit, checked before any input is read: a case of `fast_min_cells` cells or
/// more (one the judge takes through its per-row fast path) at most `lim.max_elems` (checked
/// by [`parse_family_header`]); a smaller one, judged per element exactly, at most
/// `lim.max_json_elems`, as [`parse_family_case`] has it.
pub fn parse_family_case_floats(
    v: &Value,
    base: &Path,
    lim: &InputLimits,
    fast_min_cells: usize,
) -> Result<FamilyHeader> {
    let mut header = parse_family_header(v, lim, "")?;
    let cells: usize = header.case.shape.iter().product();
    if cells < fast_min_cells {
        exact_cells_limit(&header.case, lim)?;
    }
    let mut floats = BTreeMap::new();
    for_each_input(v, &header.case, |name, field, val, shape, dt| {
        let npy = match val {
            Value::Object(o) if val.get("listed").is_none() => o.get("npy").and_then(Value::as_str),
            _ => None,
        };
        let f = dt.format().expect("a family dtype is a float format");
        let values = if val.get("listed").is_some() {
            read_listed_floats(field, &base.join(format!("{name}.npy")), shape, f, lim)?
        } else if let Some(rel) = npy {
            read_npy_floats(field, &base.join(rel), shape, f, lim)?
        } else {
            // JSON arrays (and every malformed form, which the case reader reports).
            let len = shape.iter().product::<usize>();
            exact_to_f64s(&read_input(field, val, base, shape, len, dt, false, lim)?)
        };
        floats.insert(name.to_string(), values);
        Ok(())
    })?;
    header.case.inputs = floats;
    validate_inputs(&header.case)?;
    Ok(header)
}

/// The exact path's limit on a case's cells (`max_json_elems`).
fn exact_cells_limit(case: &FamilyCase, lim: &InputLimits) -> Result<()> {
    let cells: usize = case.shape.iter().product();
    if cells > lim.max_json_elems {
        return Err(ConfError::field(
            "shape",
            format!(
                "{:?} has {cells} elements, more than the exact path takes ({}, --max-json-elems)",
                case.shape, lim.max_json_elems
            ),
        ));
    }
    Ok(())
}

/// Exact values of a float dtype as the f64s they are.
fn exact_to_f64s(values: &[QSqrt]) -> Vec<f64> {
    values
        .iter()
        .map(|q| bnconf_spec::exact::round::round(q, FloatFormat::F64).to_f64())
        .collect()
}

/// Walk `inputs` of a family case: refuse a name that is not an input of the op under
/// `affine`, then call `read(name, field, value, shape, dtype)` for each of its inputs in
/// order (a missing one refused). An export's list of names reads as
/// `{"npy": "<name>.npy", "listed": true}` each.
fn for_each_input(
    v: &Value,
    case: &FamilyCase,
    mut read: impl FnMut(&str, &str, &Value, &[usize], CaseDtype) -> Result<()>,
) -> Result<()> {
    let wanted = case.op.inputs(case.affine);
    let inputs_v = v
        .get("inputs")
        .ok_or_else(|| ConfError::field("inputs", "missing"))?;
    // An export's case.json lists its inputs' names: `<name>.npy` beside it (bf16 as `<u2`
    // bit patterns, as the export writes them).
    let listed: Option<Map<String, Value>> = inputs_v.as_array().map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(|n| {
                (
                    n.to_string(),
                    json!({"npy": format!("{n}.npy"), "listed": true}),
                )
            })
            .collect()
    });
    let inputs_o = match &listed {
        Some(m) => m,
        None => inputs_v.as_object().ok_or_else(|| {
            ConfError::field(
                "inputs",
                "must be an object of named arrays (or an export's list of input names)",
            )
        })?,
    };
    for k in inputs_o.keys() {
        if !wanted.contains(&k.as_str()) {
            return Err(ConfError::field(
                format!("inputs.{k}"),
                format!(
                    "not an input of op `{}` with affine `{}` (it takes {})",
                    case.op,
                    case.affine,
                    wanted.join(", ")
                ),
            ));
        }
    }
    for name in wanted {
        let field = format!("inputs.{name}");
        let val = inputs_o.get(name).ok_or_else(|| {
            ConfError::field(
                &field,
                format!(
                    "missing (op `{}` with affine `{}` needs it)",
                    case.op, case.affine
                ),
            )
        })?;
        let shape = family_shape(case, name);
        let dt = CaseDtype::Float(format_of(case.dtype_of(name)));
        read(name, &field, val, &shape, dt)?;
    }
    Ok(())
}

/// The case with its inputs validated (an input's error named `inputs.<name>`).
fn validate_inputs(case: &FamilyCase) -> Result<()> {
    case.check().map_err(|e| {
        let f = if case.inputs.contains_key(&e.field) {
            format!("inputs.{}", e.field)
        } else {
            e.field.clone()
        };
        ConfError::field(f, e.reason)
    })
}

/// The correct rounding (to nearest, ties to even) of a finite `x` to format `f`, in float
/// arithmetic; infinite where it overflows `f`. Zero comes back as `+0.0` (as the exact
/// route's rational zero does). Exact: `x / q` and `r·q` scale by a power of two `q` (the
/// quantum of `f` in `x`'s binade, at least its subnormals' one) with no underflow or
/// overflow, and rounding an f64 to an integer is exact.
pub fn round_f64_to(x: f64, f: FloatFormat) -> f64 {
    let r = match f {
        FloatFormat::F64 => x,
        FloatFormat::F32 => x as f32 as f64,
        FloatFormat::F16 | FloatFormat::BF16 => {
            let p = f.precision() as i64;
            // the binade of |x| (f64 subnormals lie far below every emin of f)
            let e = (((x.to_bits() >> 52) & 0x7ff) as i64 - 1023).max(f.emin());
            let pow2 = |k: i64| f64::from_bits(((k + 1023) as u64) << 52);
            let q = pow2(e - (p - 1));
            let r = (x / q).round_ties_even() * q;
            let max = (2.0 - pow2(1 - p)) * pow2(f.emax());
            if r.abs() > max {
                f64::INFINITY.copysign(x)
            } else {
                r
            }
        }
    };
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// Values read from an npy input as floats, each rounded correctly to `f`: a non-finite one
/// refused, one that overflows `f` refused (the errors of the exact route).
fn round_values(
    field: &str,
    n: usize,
    get: impl Fn(usize) -> f64 + Sync,
    f: FloatFormat,
) -> Result<Vec<f64>> {
    // In parallel, a piece at a time; the first refused value in order is the error.
    const PIECE: usize = 1 << 16;
    let mut out = crate::mem::zeroed_vec::<f64>(n);
    let first_bad = out
        .par_chunks_mut(PIECE)
        .enumerate()
        .map(|(pi, o)| {
            for (j, slot) in o.iter_mut().enumerate() {
                let r = round_f64_to(get(pi * PIECE + j), f);
                if !r.is_finite() {
                    return Some(pi * PIECE + j);
                }
                *slot = r;
            }
            None
        })
        .collect::<Vec<Option<usize>>>()
        .into_iter()
        .flatten()
        .next();
    if let Some(i) = first_bad {
        let x = get(i);
        let why = if !x.is_finite() {
            format!("non-finite value {x}")
        } else {
            format!("overflows {} (rounds to infinity)", f.name())
        };
        return Err(ConfError::field(format!("{field}[{i}]"), why));
    }
    Ok(out)
}

/// An `{"npy": path}` input read as floats: the npy file and shape checks of the exact route
/// (`read_input`), each value rounded correctly to `f`.
fn read_npy_floats(
    field: &str,
    path: &Path,
    want: &[usize],
    f: FloatFormat,
    lim: &InputLimits,
) -> Result<Vec<f64>> {
    let want_len: usize = want.iter().product();
    let data = read_npy_input(field, path, want, want_len, Some(f), lim)?;
    round_data(field, &data, f, NpyData::get)
}

/// [`round_values`] of npy data (`get`: how an element of a half storage type reads).
fn round_data(
    field: &str,
    data: &NpyData,
    f: FloatFormat,
    get: fn(&NpyData, usize) -> f64,
) -> Result<Vec<f64>> {
    match data {
        NpyData::F32(v) => round_values(field, v.len(), |i| v[i] as f64, f),
        NpyData::F64(v) => round_values(field, v.len(), |i| v[i], f),
        other => round_values(field, other.len(), |i| get(other, i), f),
    }
}

/// An export's listed input `<name>.npy` read as floats: the checks of [`read_listed`], each
/// value rounded correctly to `f`.
fn read_listed_floats(
    field: &str,
    path: &Path,
    want: &[usize],
    f: FloatFormat,
    lim: &InputLimits,
) -> Result<Vec<f64>> {
    let data = listed_npy(field, path, want, CaseDtype::Float(f), lim)?;
    round_data(field, &data, f, NpyData::bf16_value)
}

/// The case object echoed in a family golden file: the header's fields and `inputs` (the
/// exact dtype values as hex floats, or, for `--out-dir`, the input names).
pub fn family_case_echo(h: &FamilyHeader, inputs: Value) -> Value {
    let c = &h.case;
    let mut o = Map::new();
    o.insert("format".into(), json!("bnconf-case/1"));
    o.insert("id".into(), json!(h.id));
    o.insert("family".into(), json!(c.op.family().name()));
    o.insert("op".into(), json!(c.op.name()));
    o.insert("layout".into(), json!(c.layout.name()));
    o.insert("shape".into(), json!(c.shape));
    o.insert("dtype".into(), json!(c.dtype.name()));
    if c.param_dtype != c.dtype {
        o.insert("param_dtype".into(), json!(c.param_dtype.name()));
    }
    o.insert("eps".into(), json!(fmt_rational(&h.eps)));
    o.insert("eps_exact".into(), json!(fmt_rational(&h.eps)));
    if let Some(k) = c.normalized_ndim {
        o.insert("normalized_ndim".into(), json!(k));
    }
    if let Some(g) = c.groups {
        o.insert("groups".into(), json!(g));
    }
    o.insert("affine".into(), json!(c.affine.name()));
    o.insert("convention".into(), json!(c.convention.name()));
    o.insert("optional_outputs".into(), json!(c.op.optional_outputs()));
    o.insert("inputs".into(), inputs);
    for (k, v) in &h.extra {
        o.insert(k.clone(), v.clone());
    }
    Value::Object(o)
}

/// An input of an export's case.json, `<name>.npy` beside it: any float npy, or bf16 as `<u2`
/// bit patterns; of the tensor's shape; each value exact, in its dtype.
fn read_listed(
    field: &str,
    path: &Path,
    want: &[usize],
    dt: CaseDtype,
    lim: &InputLimits,
) -> Result<Vec<QSqrt>> {
    let data = listed_npy(field, path, want, dt, lim)?;
    (0..data.len())
        .map(|i| {
            let x = data.bf16_value(i);
            let r = f64_to_rational(x).ok_or_else(|| {
                ConfError::field(format!("{field}[{i}]"), format!("non-finite value {x}"))
            })?;
            to_dtype(field, i, r, dt)
        })
        .collect()
}

/// The npy file of an export's listed input, checked: of the tensor's shape, `<u2` (bf16 bit
/// patterns) only for a bf16 tensor.
fn listed_npy(
    field: &str,
    path: &Path,
    want: &[usize],
    dt: CaseDtype,
    lim: &InputLimits,
) -> Result<NpyData> {
    let f = format!("{field}.npy");
    let (shape, data) =
        read_npy_any(path, lim.max_elems).map_err(|e| ConfError::field(&f, e.to_string()))?;
    if shape != want {
        return Err(ConfError::field(
            &f,
            format!("{}: shape {shape:?}, expected {want:?}", path.display()),
        ));
    }
    if matches!(data, NpyData::U16(_)) && dt != CaseDtype::Float(FloatFormat::BF16) {
        return Err(ConfError::field(
            &f,
            format!(
                "{}: uint16 data for a tensor that is not bf16",
                path.display()
            ),
        ));
    }
    Ok(data)
}
