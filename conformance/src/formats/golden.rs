//! Golden files (`bnconf-golden/1`, FORMAT.md): exact outputs, written as exact strings and
//! correctly rounded hex floats — exact facts about the real-number result, never the output
//! of a float computation.

use crate::error::Result;
use crate::formats::case::{Case, CaseHeader, Dtype};
use crate::formats::npy::{write_npy, NpyData};
use crate::par::*;
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::op::{Extent, Outputs};
use bnconf_spec::{Op, QSqrt};
use serde_json::{json, Map, Value};
use std::path::Path;

/// A case and its exact outputs.
#[derive(Clone, Debug)]
pub struct Golden {
    /// The case (inputs already in its dtype).
    pub case: Case,
    /// Exact outputs by name, in the layout order (or `[C]`).
    pub outputs: Outputs,
}

/// Evaluate a case exactly.
pub fn compute(case: Case) -> Result<Golden> {
    let outputs = case.problem.evaluate()?;
    Ok(Golden { case, outputs })
}

/// Shape of a named tensor of a case.
pub fn tensor_shape(case: &Case, name: &str) -> Vec<usize> {
    match Op::extent(name) {
        Extent::Cells => case.problem.geom.shape.clone(),
        Extent::Channel => vec![case.problem.geom.c],
        Extent::Shards => vec![case.problem.geom.m],
    }
}

/// A value as written in a golden file for `dtype`: a hex float for float dtypes (the
/// value is exactly representable), the exact string for `exact`.
pub fn write_value(v: &QSqrt, dtype: Dtype) -> String {
    match dtype {
        Dtype::Float(f) => round(v, f).to_hex(),
        Dtype::Exact => v.to_string(),
    }
}

/// The case object as echoed in a golden file: inputs written back as the exact dtype values.
pub fn case_json(case: &Case) -> Value {
    let p = &case.problem;
    let mut inputs = Map::new();
    for &name in p.op.inputs() {
        let dt = if bnconf_spec::tensor::is_activation(name) {
            case.dtype
        } else {
            case.param_dtype
        };
        let vals: Vec<Value> = p.inputs[name]
            .iter()
            .map(|v| Value::String(write_value(v, dt)))
            .collect();
        inputs.insert(name.to_string(), Value::Array(vals));
    }
    crate::formats::case::case_object_json(&case.header(), Value::Object(inputs))
}

/// Correctly rounded hex strings of a vector, in parallel (deterministic order).
pub fn rounded_hex(vals: &[QSqrt], f: FloatFormat) -> Vec<String> {
    vals.par_iter().map(|v| round(v, f).to_hex()).collect()
}

/// The `provenance` object of golden files.
pub fn provenance() -> Value {
    json!({"tool": "bnconf", "version": env!("CARGO_PKG_VERSION"), "rounding": "nearest, ties to even; exact"})
}

/// The golden document with per-element arrays: `exact` plus the given float formats.
pub fn golden_json(g: &Golden, formats: &[FloatFormat]) -> Value {
    golden_json_with(&g.case, formats, |name, f| {
        let vals = &g.outputs[name];
        match f {
            None => vals.par_iter().map(|v| v.to_string()).collect(),
            Some(f) => rounded_hex(vals, f),
        }
    })
}

/// The golden document of `case` from its outputs' strings: `strings(name, None)` the exact
/// values, `strings(name, Some(f))` the hex strings of their correct roundings to `f` (so the
/// fast path, `fast::golden_json_fast`, writes the same bytes as [`golden_json`]).
pub fn golden_json_with(
    case: &Case,
    formats: &[FloatFormat],
    strings: impl Fn(&str, Option<FloatFormat>) -> Vec<String>,
) -> Value {
    let mut ordered = Map::new();
    for &name in case.problem.op.outputs() {
        let mut o = Map::new();
        o.insert("shape".into(), json!(tensor_shape(case, name)));
        o.insert("exact".into(), json!(strings(name, None)));
        for &f in formats {
            o.insert(f.name().into(), json!(strings(name, Some(f))));
        }
        ordered.insert(name.to_string(), Value::Object(o));
    }
    json!({"format": "bnconf-golden/1", "case": case_json(case), "outputs": Value::Object(ordered), "provenance": provenance()})
}

/// `--out-dir` mode: `DIR/<output>.f64.npy`, `DIR/<output>.f32.npy` and `DIR/golden.json`
/// (without per-element arrays; it names the npy files). Every file is written atomically.
pub fn write_out_dir(g: &Golden, dir: &Path) -> Result<()> {
    let outputs = g.case.problem.op.outputs().iter().map(|&name| {
        let vals = &g.outputs[name];
        let f64s: Vec<f64> = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F64).to_f64())
            .collect();
        let f32s: Vec<f32> = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F32).to_f64() as f32)
            .collect();
        (name, f64s, f32s)
    });
    write_out_dir_of(&g.case.header(), outputs, dir)
}

/// The `--out-dir` writer of both paths ([`write_out_dir`] exact, [`crate::fast::write_out_dir`]
/// fast): per output in the op's order its correctly rounded f64 and f32 values, written as
/// `DIR/<output>.f64.npy` and `DIR/<output>.f32.npy` (the two concurrently, each atomically),
/// then `DIR/golden.json` naming them (the case object with its inputs' names).
pub fn write_out_dir_of(
    h: &CaseHeader,
    outputs: impl IntoIterator<Item = (&'static str, Vec<f64>, Vec<f32>)>,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| crate::error::ConfError::io(dir, e))?;
    for (name, f64s, f32s) in outputs {
        write_out_pair(h, dir, name, f64s, f32s)?;
    }
    write_out_index(h, dir)
}

/// The `--out-dir` files of output `name`: `(<name>.f64.npy, <name>.f32.npy)`.
pub fn out_dir_files(name: &str) -> (String, String) {
    (format!("{name}.f64.npy"), format!("{name}.f32.npy"))
}

/// The shape of output `name` of a case.
pub fn output_shape(h: &CaseHeader, name: &str) -> Vec<usize> {
    match Op::extent(name) {
        Extent::Cells => h.geom.shape.clone(),
        Extent::Channel => vec![h.geom.c],
        Extent::Shards => vec![h.geom.m],
    }
}

/// Output `name`'s two `--out-dir` files ([`out_dir_files`]), written concurrently, each
/// atomically.
pub fn write_out_pair(
    h: &CaseHeader,
    dir: &Path,
    name: &str,
    f64s: Vec<f64>,
    f32s: Vec<f32>,
) -> Result<()> {
    let shape = output_shape(h, name);
    let (p64, p32) = out_dir_files(name);
    let (r64, r32) = crate::par::join(
        || write_npy(&dir.join(&p64), &shape, &NpyData::F64(f64s)),
        || write_npy(&dir.join(&p32), &shape, &NpyData::F32(f32s)),
    );
    r64?;
    r32
}

/// `DIR/golden.json` of `--out-dir`: the case object (with its inputs' names) and, per output
/// of the op, its shape and the names of its two files ([`out_dir_files`]).
pub fn write_out_index(h: &CaseHeader, dir: &Path) -> Result<()> {
    let mut outs = Map::new();
    for &name in h.op.outputs() {
        let (p64, p32) = out_dir_files(name);
        outs.insert(
            name.to_string(),
            json!({"shape": output_shape(h, name), "f64": p64, "f32": p32}),
        );
    }
    let case = crate::formats::case::case_object_json(h, json!(h.op.inputs()));
    let doc = json!({"format": "bnconf-golden/1", "case": case, "outputs": Value::Object(outs), "provenance": provenance()});
    let text = serde_json::to_string_pretty(&doc).expect("serializable");
    crate::formats::atomic::write_bytes(&dir.join("golden.json"), format!("{text}\n").as_bytes())
}
