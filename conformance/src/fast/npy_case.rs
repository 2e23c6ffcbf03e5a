//! Reading a case file (`bnconf-case/1`, npy or JSON inputs) for the fast path: a
//! [`FastProblem`] of binary floats, or `None` where the exact path must read it.

use super::problem::*;
use crate::error::{ConfError, Result};
use crate::formats::case::{
    parse_header, read_case_json, read_input, CaseHeader, Dtype, InputLimits,
};
use crate::formats::npy::{read_npy, NpyData};
use crate::par::*;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::op::Extent;
use bnconf_spec::Op;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The index of the first infinite or NaN value (blocks without one are scanned without a
/// branch per value).
pub(super) fn first_non_finite<T: Cell>(v: &[T]) -> Option<usize> {
    const B: usize = 1024;
    let b = v
        .chunks(B)
        .position(|c| !c.iter().fold(true, |ok, e| ok & e.to_f64().is_finite()))?;
    let i = v[b * B..].iter().position(|e| !e.to_f64().is_finite())?;
    Some(b * B + i)
}

/// npy data converted to the case dtype (correct rounding; overflow and non-finite values
/// are refused with the exact path's messages).
pub(super) fn npy_to_dtype(field: &str, data: NpyData, dtype: Dtype) -> Result<NpyData> {
    let bad = |i: usize, x: f64| {
        ConfError::field(format!("{field}[{i}]"), format!("non-finite value {x}"))
    };
    let check = |v: &[f64]| -> Result<()> {
        match first_non_finite(v) {
            Some(i) => Err(bad(i, v[i])),
            None => Ok(()),
        }
    };
    match data {
        NpyData::F32(v) => {
            if let Some(i) = first_non_finite(&v) {
                return Err(bad(i, v[i] as f64));
            }
            Ok(NpyData::F32(v))
        }
        NpyData::F64(v) => {
            check(&v)?;
            if dtype == Dtype::Float(FloatFormat::F32) {
                let mut out = Vec::with_capacity(v.len());
                for (i, &e) in v.iter().enumerate() {
                    let r = e as f32;
                    if !r.is_finite() {
                        return Err(ConfError::field(
                            format!("{field}[{i}]"),
                            "overflows f32 (rounds to infinity)",
                        ));
                    }
                    out.push(r);
                }
                Ok(NpyData::F32(out))
            } else {
                Ok(NpyData::F64(v))
            }
        }
        NpyData::F16(_) | NpyData::U16(_) => {
            Err(ConfError::field(field, "f16/u16 npy not supported here"))
        }
    }
}

/// The npy file `p` of input `name` of a case: its shape checked against the input's, its
/// values converted to the case dtype ([`npy_to_dtype`]); errors name `inputs.<name>`.
fn read_npy_input(name: &str, p: &Path, h: &CaseHeader, lim: &InputLimits) -> Result<NpyData> {
    let field = format!("inputs.{name}");
    let g = &h.geom;
    let (want_shape, want_len) = match Op::extent(name) {
        Extent::Cells => (g.shape.clone(), g.len()),
        Extent::Channel | Extent::Shards => (vec![g.c], g.c),
    };
    let (shape, data) = read_npy(p, lim.max_elems)
        .map_err(|e| ConfError::field(format!("{field}.npy"), e.to_string()))?;
    if shape.iter().product::<usize>() != want_len || (shape != want_shape && shape != [want_len]) {
        return Err(ConfError::field(
            format!("{field}.npy"),
            format!("{}: shape {shape:?}, expected {want_shape:?}", p.display()),
        ));
    }
    npy_to_dtype(&field, data, h.dtype)
}

/// Read a case file for the fast path. `Ok(None)` when the fast path does not apply (dtype
/// f16/bf16, exact values that are not binary64, a malformed inputs object — the exact path
/// then reads the case and reports).
pub fn read_fast_case(path: &Path, lim: &InputLimits) -> Result<Option<(CaseHeader, FastProblem)>> {
    let v = read_case_json(path, lim)?;
    let h = parse_header(&v, lim)?;
    if !matches!(
        h.dtype,
        Dtype::Exact | Dtype::Float(FloatFormat::F64) | Dtype::Float(FloatFormat::F32)
    ) || h.param_dtype != h.dtype
        || !covers(h.op)
    {
        return Ok(None);
    }
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let inputs_o = match v.get("inputs") {
        Some(Value::Object(o)) => o,
        _ => return Ok(None),
    };
    if inputs_o
        .keys()
        .any(|k| !h.op.inputs().contains(&k.as_str()))
    {
        return Ok(None);
    }
    let g = &h.geom;
    // The inputs' npy files, read concurrently (reading is the kernel copying pages: one
    // core each); their results are taken in the inputs' order below, so the first error
    // reported is the same.
    let npy_files: Vec<(&str, std::path::PathBuf)> =
        h.op.inputs()
            .iter()
            .filter_map(|&name| {
                let rel = inputs_o.get(name)?.as_object()?.get("npy")?.as_str()?;
                Some((name, base.join(rel)))
            })
            .collect();
    let mut pre_read: BTreeMap<&str, Result<NpyData>> = npy_files
        .par_iter()
        .map(|(name, p)| (*name, read_npy_input(name, p, &h, lim)))
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let mut cells = BTreeMap::new();
    let mut chan = BTreeMap::new();
    for &name in h.op.inputs() {
        let field = format!("inputs.{name}");
        let Some(val) = inputs_o.get(name) else {
            return Ok(None);
        };
        let (want_shape, want_len) = match Op::extent(name) {
            Extent::Cells => (g.shape.clone(), g.len()),
            Extent::Channel | Extent::Shards => (vec![g.c], g.c),
        };
        let data = match val {
            Value::Object(o) if o.contains_key("npy") => {
                if !o["npy"].is_string() {
                    return Ok(None);
                }
                pre_read
                    .remove(name)
                    .expect("every npy input is read above")?
            }
            Value::Array(_) => {
                let vals = read_input(
                    &field,
                    val,
                    &base,
                    &want_shape,
                    want_len,
                    h.dtype,
                    name == "mean_dy_xhat",
                    lim,
                )?;
                let f: Option<Vec<f64>> = vals
                    .iter()
                    .map(|v| v.as_rational().and_then(rational_to_f64_exact))
                    .collect();
                match f {
                    Some(f) => NpyData::F64(f),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        match Op::extent(name) {
            Extent::Cells => {
                cells.insert(name.to_string(), data);
            }
            Extent::Channel | Extent::Shards => {
                let v: Vec<f64> = data.to_f64s();
                chan.insert(name.to_string(), v);
            }
        }
    }
    let fp = FastProblem::new(h.op, h.geom.clone(), h.eps.clone(), cells, chan)?;
    Ok(Some((h, fp)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `first_non_finite` finds the first NaN or infinity wherever it lies (block edges
    /// included), and none in finite data.
    #[test]
    fn first_non_finite_finds_the_first() {
        let n = 5000;
        assert_eq!(first_non_finite(&vec![1.0f32; n]), None);
        assert_eq!(first_non_finite::<f64>(&[]), None);
        for at in [0, 1, 1023, 1024, 1025, 4999] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut v = vec![f32::MAX; n];
                v[at] = bad;
                if at + 7 < n {
                    v[at + 7] = f32::NAN;
                }
                assert_eq!(first_non_finite(&v), Some(at), "{bad} at {at}");
                let w: Vec<f64> = v.iter().map(|&e| e as f64).collect();
                assert_eq!(first_non_finite(&w), Some(at), "{bad} at {at} (f64)");
            }
        }
    }
}
