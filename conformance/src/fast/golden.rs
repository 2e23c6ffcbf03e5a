//! Goldens by the fast path: the `--out-dir` npy files and golden.json, and the JSON golden
//! of `bnconf golden`, byte for byte the exact path's.

use super::eval::*;
use super::npy_case::*;
use super::problem::*;
use super::round::*;
use crate::error::Result;
use crate::formats::case::{CaseHeader, InputLimits};
use crate::par::*;
use bnconf_spec::exact::round::{round, FloatFormat};
use serde_json::Value;
use std::path::Path;

/// Write `DIR/<output>.f64.npy`, `DIR/<output>.f32.npy` and `DIR/golden.json` from fast
/// outputs, through the exact path's writer ([`crate::formats::golden::write_out_dir_of`]).
pub fn write_out_dir(h: &CaseHeader, out: FastOutputs, dir: &Path) -> Result<FastStats> {
    crate::formats::golden::write_out_dir_of(h, out.outputs, dir)?;
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
    opts: &FastOptions,
) -> Result<Option<Value>> {
    if opts.exact_path {
        return Ok(None);
    }
    with_threads(opts.threads, || -> Result<Option<Value>> {
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

/// Options of the fast path (`bnconf golden`'s `--exact-path` and `--threads`).
#[derive(Clone, Debug, Default)]
pub struct FastOptions {
    /// Use the per-element exact path even where the fast path applies (slow; for checking).
    pub exact_path: bool,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores). Results do not
    /// depend on it.
    pub threads: Option<usize>,
}

/// `bnconf golden CASE --out-dir DIR`: the fast path where it applies (binary-float inputs,
/// an op it covers, not disabled), the exact path otherwise; the same files either way.
pub fn golden_to_dir(case: &Path, lim: &InputLimits, dir: &Path, opts: &FastOptions) -> Result<()> {
    if !opts.exact_path
        && with_threads(opts.threads, || golden_out_dir(case, lim, dir, true))??.is_some()
    {
        return Ok(());
    }
    let g = crate::formats::golden::compute(crate::formats::case::read_case_file(case, lim)?)?;
    crate::formats::golden::write_out_dir(&g, dir)
}

/// The golden document of `bnconf golden CASE` (to stdout or `-o`): the fast path where it
/// applies ([`golden_json_fast`]), the exact path otherwise; the same bytes either way.
pub fn golden_doc(
    case: &Path,
    lim: &InputLimits,
    formats: &[FloatFormat],
    opts: &FastOptions,
) -> Result<Value> {
    Ok(match golden_json_fast(case, lim, formats, opts)? {
        Some(doc) => doc,
        None => {
            let c = crate::formats::case::read_case_file(case, lim)?;
            crate::formats::golden::golden_json(&crate::formats::golden::compute(c)?, formats)
        }
    })
}
