//! Goldens by the fast path: the `--out-dir` npy files and golden.json, and the JSON golden
//! of `bnconf golden`, byte for byte the exact path's.

use super::eval::*;
use super::npy_case::*;
use super::problem::*;
use super::round::*;
use crate::error::{ConfError, Result};
use crate::formats::case::{CaseHeader, InputLimits};
use crate::formats::npy::{write_npy, NpyData};
use crate::par::*;
use bnconf_spec::exact::fmt_rational;
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::op::Extent;
use bnconf_spec::Op;
use serde_json::{json, Map, Value};
use std::path::Path;

/// The case object of an `--out-dir` golden.json (as [`crate::formats::golden::write_out_dir`] writes
/// it: inputs replaced by their names).
pub fn case_header_json(h: &CaseHeader) -> Value {
    let mut o = Map::new();
    o.insert("format".into(), json!("bnconf-case/1"));
    o.insert("id".into(), json!(h.id));
    o.insert("op".into(), json!(h.op.name()));
    o.insert("layout".into(), json!(h.geom.layout.name()));
    o.insert("shape".into(), json!(h.geom.shape));
    o.insert("dtype".into(), json!(h.dtype.name()));
    o.insert("eps".into(), json!(h.eps_text));
    o.insert("eps_exact".into(), json!(fmt_rational(&h.eps)));
    for (k, v) in &h.extra {
        o.insert(k.clone(), v.clone());
    }
    o.insert("inputs".into(), json!(h.op.inputs()));
    Value::Object(o)
}

/// Write `DIR/<output>.f64.npy`, `DIR/<output>.f32.npy` and `DIR/golden.json`, exactly as
/// [`crate::formats::golden::write_out_dir`] does, from fast outputs.
pub fn write_out_dir(h: &CaseHeader, out: FastOutputs, dir: &Path) -> Result<FastStats> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut outs = Map::new();
    for (name, f64s, f32s) in out.outputs {
        let shape = match Op::extent(name) {
            Extent::Cells => h.geom.shape.clone(),
            Extent::Channel | Extent::Shards => vec![h.geom.c],
        };
        let (p64, p32) = (format!("{name}.f64.npy"), format!("{name}.f32.npy"));
        // The two files of an output are written concurrently (each atomically).
        let (r64, r32) = crate::par::join(
            || write_npy(&dir.join(&p64), &shape, &NpyData::F64(f64s)),
            || write_npy(&dir.join(&p32), &shape, &NpyData::F32(f32s)),
        );
        r64?;
        r32?;
        outs.insert(
            name.to_string(),
            json!({"shape": shape, "f64": p64, "f32": p32}),
        );
    }
    let doc = json!({"format": "bnconf-golden/1", "case": case_header_json(h), "outputs": Value::Object(outs), "provenance": crate::formats::golden::provenance()});
    let text = serde_json::to_string_pretty(&doc).expect("serializable");
    crate::formats::atomic::write_bytes(&dir.join("golden.json"), format!("{text}\n").as_bytes())?;
    Ok(out.stats)
}

/// `bnconf golden CASE --out-dir DIR` by the fast path. `Ok(None)` when the fast path does
/// not apply (the caller then takes the exact path).
pub fn golden_out_dir(
    case: &Path,
    lim: &InputLimits,
    dir: &Path,
    progress: bool,
) -> Result<Option<FastStats>> {
    let t = Timer::new();
    let Some((h, fp)) = read_fast_case(case, lim)? else {
        return Ok(None);
    };
    t.lap("read case and npy inputs");
    let out = compute(&fp, progress)?;
    drop(fp);
    t.lap("compute");
    let stats = write_out_dir(&h, out, dir)?;
    t.lap("write npy outputs and golden.json");
    Ok(Some(stats))
}

/// `bnconf golden CASE` (a JSON golden, to stdout or `-o`) by the fast path: the same
/// document, byte for byte, as [`crate::formats::golden::golden_json`] of the exact path —
/// the exact strings from the per-channel constants ([`cells::FastCells::exact`]: a few
/// rational operations per element instead of the op's), the f64/f32 hex strings from
/// [`compute`]'s correct roundings. `Ok(None)` where it does not apply (dtype f16/bf16,
/// values that are not binary64, an op it does not cover, disabled by `--exact-path`) or
/// where the case is refused (the exact path then reports, with its own message).
pub fn golden_json_fast(
    path: &Path,
    lim: &InputLimits,
    formats: &[FloatFormat],
    args: &FastArgs,
) -> Result<Option<Value>> {
    if args.exact_path {
        return Ok(None);
    }
    with_threads(args.threads, || -> Result<Option<Value>> {
        let Some((_, fp)) = read_fast_case(path, lim)? else {
            return Ok(None);
        };
        // The echo, and every check of the case file, as the exact path reads it.
        let case = crate::formats::case::read_case_file(path, lim)?;
        Ok(golden_json_of(&case, &fp, formats))
    })?
}

/// The JSON golden of `case` (whose inputs `fp` holds as floats) by the fast path, as
/// [`golden_json_fast`]; `None` where the fast path refuses the case (the exact path then
/// reports).
pub fn golden_json_of(
    case: &crate::formats::case::Case,
    fp: &FastProblem,
    formats: &[FloatFormat],
) -> Option<Value> {
    let (out, fc) = compute_cells(fp).ok()?;
    let chan = fc.channel_outputs();
    let cell_name = fp.op.outputs()[0];
    let doc = crate::formats::golden::golden_json_with(case, formats, |name, f| {
        let k = fp
            .op
            .outputs()
            .iter()
            .position(|&n| n == name)
            .expect("an output");
        let (_, f64s, f32s) = out
            .outputs
            .iter()
            .find(|o| o.0 == name)
            .expect("compute gives every output");
        match f {
            None if name == cell_name => (0..fc.len())
                .into_par_iter()
                .map(|j| fc.exact(j).to_string())
                .collect(),
            None => chan[k - 1].iter().map(|v| v.to_string()).collect(),
            Some(FloatFormat::F64) => f64s
                .par_iter()
                .map(|&v| rounded_of(v, FloatFormat::F64).to_hex())
                .collect(),
            Some(FloatFormat::F32) => f32s
                .par_iter()
                .map(|&v| rounded_of(v as f64, FloatFormat::F32).to_hex())
                .collect(),
            // f16, bf16: from the correct f64 rounding (exact unless it is a midpoint).
            Some(f) if name == cell_name => f64s
                .par_iter()
                .enumerate()
                .map(|(j, &r)| match round_via_f64(r, f) {
                    Some(v) => v.to_hex(),
                    None => round(&fc.exact(j), f).to_hex(),
                })
                .collect(),
            Some(f) => chan[k - 1].iter().map(|v| round(v, f).to_hex()).collect(),
        }
    });
    Some(doc)
}

/// CLI options of the fast path (`bnconf golden ... --out-dir DIR`).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FastArgs {
    /// Use the per-element exact path even where the fast path applies (slow; for checking).
    #[cfg_attr(feature = "cli", arg(long))]
    pub exact_path: bool,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores). Results do not
    /// depend on it.
    #[cfg_attr(feature = "cli", arg(long))]
    pub threads: Option<usize>,
}

pub use crate::par::with_threads;

/// The `--out-dir` fast path of `bnconf golden`: `Ok(true)` when done, `Ok(false)` when the
/// caller must take the exact path (disabled, or the case is not one of binary floats).
pub fn golden_cli(case: &Path, lim: &InputLimits, dir: &Path, args: &FastArgs) -> Result<bool> {
    if args.exact_path {
        return Ok(false);
    }
    let done = with_threads(args.threads, || golden_out_dir(case, lim, dir, true))??;
    Ok(done.is_some())
}
