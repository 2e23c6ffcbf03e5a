//! The kernel directory protocol (FORMAT.md): export a suite, run a kernel over a directory,
//! read a kernel's outputs back.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::npy::{read_npy_any, read_npy_any_as, write_npy, Descr, NpyData, NpyRead};
use crate::judge::check::Written;
use crate::judge::prepare::Prepared;
use crate::judge::verdict::{CaseResult, Verdict};
use crate::par::*;
use crate::suite::select::Selection;
use crate::suite::{self, Filter, Precision, Suite, SuiteCase};
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::{Layout, Op};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

pub mod exec;
pub mod family;
pub mod family_vectors;
pub mod onnx_export;
pub mod onnx_family;
pub mod replicated;
pub mod stablehlo;
pub mod stablehlo_family;
pub mod user_case;

use crate::formats::fsafe::read_regular_string;
pub use crate::formats::fsafe::MAX_META_BYTES;

pub(crate) fn shape_of(c: &SuiteCase, name: &str) -> Vec<usize> {
    let g = || bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX).expect("valid");
    match Op::extent(name) {
        bnconf_spec::op::Extent::Cells => c.shape.clone(),
        // A replicated rank's shard may have no rows: its channels are the case's.
        bnconf_spec::op::Extent::Channel if !c.shard_sizes.is_empty() => {
            vec![
                c.shape[if c.layout.channels_last() {
                    c.shape.len() - 1
                } else {
                    1
                }],
            ]
        }
        bnconf_spec::op::Extent::Channel => vec![g().c],
        bnconf_spec::op::Extent::Shards => vec![g().m],
    }
}

/// Values of a dtype (each exactly representable) as that dtype's npy data: `<f8`, `<f4`,
/// `<f2`, and bf16 as `<u2` bit patterns (the upper 16 bits of the f32).
pub fn npy_of(dtype: FloatFormat, v: &[f64]) -> NpyData {
    match dtype {
        FloatFormat::F64 => NpyData::F64(v.to_vec()),
        FloatFormat::F32 => NpyData::F32(v.iter().map(|&x| x as f32).collect()),
        FloatFormat::F16 => NpyData::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        FloatFormat::BF16 => NpyData::U16(
            v.iter()
                .map(|&x| half::bf16::from_f64(x).to_bits())
                .collect(),
        ),
    }
}

/// The values of npy data as f64, `<u2` read as bf16 bit patterns (the protocol's bf16).
pub fn decode(data: &NpyData) -> Vec<f64> {
    data.bf16_values()
}

/// npy data read back as values of `dtype`, or why it is not that dtype's data.
pub fn values_of(dtype: FloatFormat, data: &NpyData) -> std::result::Result<Vec<f64>, String> {
    match (dtype, data) {
        (FloatFormat::F64, NpyData::F64(_))
        | (FloatFormat::F32, NpyData::F32(_))
        | (FloatFormat::F16, NpyData::F16(_)) => Ok(data.to_f64s()),
        (FloatFormat::BF16, NpyData::U16(_)) => Ok(data.bf16_values()),
        (FloatFormat::BF16, other) => Err(format!(
            "dtype {}, expected bf16 stored as uint16 bit patterns (<u2, \"bf16_storage\": \"u16-bits\")",
            other.dtype_name()
        )),
        (f, other) => Err(format!(
            "dtype {}, expected the case dtype {}",
            other.dtype_name(),
            f.name()
        )),
    }
}

/// Write a suite into `dir`: `manifest.json` and, per case, `case.json` and one npy per input.
/// (Each input in its dtype: activations in the precision's first dtype, the rest in its
/// second.)
pub fn export(s: &Suite, dtype: Precision, filter: &Filter, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    for c in &s.cases {
        let cd = dir.join(&c.id);
        std::fs::create_dir_all(&cd).map_err(|e| ConfError::io(&cd, e))?;
        if !c.shard_sizes.is_empty() {
            replicated::export_case(c, &cd)?;
            continue;
        }
        let text = serde_json::to_string_pretty(&c.protocol_json()).expect("json") + "\n";
        write_bytes(&cd.join("case.json"), text.as_bytes())?;
        for (name, v) in &c.inputs {
            write_npy(
                &cd.join(format!("{name}.npy")),
                &shape_of(c, name),
                &npy_of(c.dtype_of(name), v),
            )?;
        }
    }
    let text = serde_json::to_string_pretty(&suite::manifest_json_in(s, dtype, filter))
        .expect("json")
        + "\n";
    write_bytes(&dir.join("manifest.json"), text.as_bytes())
}

/// What a suite directory's manifest says, regenerated: the suite's cases (never read back
/// from the directory, so a kernel cannot change what it is judged against).
pub fn regenerate(dir: &Path) -> Result<(Suite, Precision, Filter)> {
    let mpath = dir.join("manifest.json");
    let text = read_regular_string(&mpath, MAX_META_BYTES, "")?;
    let m: Value = serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: mpath.display().to_string(),
        msg: e.to_string(),
    })?;
    let field = |k: &str| {
        ConfError::field(
            format!("manifest.json: {k}"),
            "missing or of the wrong type",
        )
    };
    // `export --shard K/N` wrote only that shard's cases: the selection applies it.
    let sel = Selection::from_manifest(&m)?;
    let listed: Vec<&str> = m
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| field("cases"))?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The sharpness test (control kernels on every case) runs only on the cases the manifest
    // leaves out: for the listed ones the comparison below decides (`generate_listed`).
    // Lean: the scale suite's cases without their inputs, made again as each is judged
    // (`judge_dir`), so that the suite is never held whole.
    let s = sel.generate_lean(Some(&listed.iter().copied().collect()));
    let (name, seed, dtype, filter) = (&sel.suite, sel.seed, sel.precision, sel.filter);
    let ours: Vec<&str> = s.cases.iter().map(|c| c.id.as_str()).collect();
    if listed != ours {
        return Err(cases_differ(name, seed, dtype));
    }
    Ok((s, dtype, filter))
}

/// The manifest's case list is not the suite's as this bnconf generates it (also found when
/// a listed case that [`regenerate`] left to be made when judged proves ill-posed).
fn cases_differ(name: &str, seed: u64, dtype: Precision) -> ConfError {
    ConfError::field("manifest.json: cases", format!("do not match suite {name:?} (seed {seed}, {}) as this bnconf generates it: the directory was edited or written by another version", dtype.name()))
}

/// Check that the input files in `dir` are exactly the regenerated suite's inputs (a kernel
/// that rewrote them, or an edited manifest, is caught here rather than judged).
pub fn verify_inputs(dir: &Path, s: &Suite) -> Result<()> {
    for c in &s.cases {
        if c.inputs.is_empty() {
            // A lean case (`regenerate`): its inputs made again for the comparison.
            let mut full = c.clone();
            crate::suite::generate::fill_inputs(&s.name, s.seed, &mut full);
            verify_case(dir, s, &full)?;
        } else {
            verify_case(dir, s, c)?;
        }
    }
    Ok(())
}

/// [`verify_inputs`] of one case (with its inputs).
fn verify_case(dir: &Path, s: &Suite, c: &SuiteCase) -> Result<()> {
    if !c.shard_sizes.is_empty() {
        return replicated::verify_inputs(dir, s, c);
    }
    verify_case_inputs(&dir.join(&c.id), &c.id, &c.inputs, s)
}

/// The input files `cd/<name>.npy` hold exactly `inputs` (`rel`: how errors name `cd`).
pub(crate) fn verify_case_inputs(
    cd: &Path,
    rel: &str,
    inputs: &BTreeMap<String, Vec<f64>>,
    s: &Suite,
) -> Result<()> {
    for (name, want) in inputs {
        verify_input(cd, rel, name, want, s)?;
    }
    Ok(())
}

/// [`verify_case`] of a case made again as its fast problem `fp`
/// ([`crate::suite::generate::remake_fast`]: the inputs in `fp`, in their own width), the
/// files in the same order (by name).
fn verify_made(dir: &Path, s: &Suite, c: &SuiteCase, fp: &crate::fast::FastProblem) -> Result<()> {
    use crate::precision::budget::CellData;
    let cd = dir.join(&c.id);
    let mut inputs: BTreeMap<&str, CellData> = fp
        .chan
        .iter()
        .map(|(k, v)| (k.as_str(), CellData::F64(v)))
        .collect();
    for (name, d) in [("x", Some(&fp.x)), ("dy", fp.dy.as_ref())] {
        if let Some(d) = d {
            let d = CellData::of(d).expect("a made case's cells are f32 or f64");
            inputs.insert(name, d);
        }
    }
    // Each file in parallel; the first error in the names' order.
    let checked: Vec<Result<()>> = inputs
        .into_iter()
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(name, want)| match want {
            CellData::F32(v) => verify_input(&cd, &c.id, name, v, s),
            CellData::F64(v) => verify_input(&cd, &c.id, name, v, s),
        })
        .collect();
    checked.into_iter().collect()
}

/// The input file `cd/<name>.npy` holds exactly `want` (values of the suite's dtypes, here in
/// their own width).
fn verify_input<T: Copy + Into<f64>>(
    cd: &Path,
    rel: &str,
    name: &str,
    want: &[T],
    s: &Suite,
) -> Result<()> {
    let path = cd.join(format!("{name}.npy"));
    // (Element by element, as `decode` reads them, a piece of the file at a time: the file is
    // never held whole; read to its end, so that its own errors come first.)
    let bits = |g: f64, w: T| g.to_bits() == w.into().to_bits();
    let mut same = true;
    let (_, n) = crate::formats::npy::visit_npy_any(&path, want.len().max(1), |at, piece| {
        let want = &want[at.min(want.len())..];
        same &= match piece {
            NpyData::F32(v) => v.iter().zip(want).all(|(&g, &w)| bits(g as f64, w)),
            NpyData::F64(v) => v.iter().zip(want).all(|(&g, &w)| bits(g, w)),
            _ => (0..piece.len().min(want.len())).all(|i| bits(piece.bf16_value(i), want[i])),
        };
    })?;
    if !same || n != want.len() {
        return Err(ConfError::field(
            format!("{rel}/{name}.npy"),
            format!("differs from suite {:?} as generated with seed {}: the inputs or the manifest were edited", s.name, s.seed),
        ));
    }
    Ok(())
}

/// What [`judge_dir`] found: a result per case, in the suite's order, and the preparations of
/// the failing cases (when asked for: the diagnosis and the HTML report use them).
#[derive(Debug, Default)]
pub struct Judged {
    /// One result per case of the suite, in order.
    pub results: Vec<CaseResult>,
    /// The failing cases' preparations (`Verdict::Fail`), if kept.
    pub failing: Vec<Prepared>,
}

/// Judge what a kernel wrote into `dir` for every case of `s`, streaming: consecutive cases
/// of at most [`crate::judge::prepare::JUDGE_CHUNK_CELLS`] input values together (one case if larger) are prepared,
/// their outputs read and judged, and dropped before the next; each case's inputs are moved
/// into its preparation, not copied, and dropped from `s` once it passes (with
/// `keep_failing`, a case that does not pass keeps its inputs in `s` for the reports). The
/// results and verdicts are those of preparing every case at once and judging each ([`Prepared::judge_written`] of
/// [`read_written`]): the same code, case by case. Each chunk's input files are verified
/// first, in the suite's order ([`verify_inputs`] of its cases: an edited input is an error,
/// not judged), lean cases' inputs made again ([`crate::suite::generate::fill_inputs`]).
/// Without `keep_failing` (no diagnosis, no HTML report: nothing reads a failing case's
/// outputs after its verdict), no result keeps its outputs (`CaseResult::computed` is `None`)
/// and no case of a lean suite its inputs (the human report's details make them again, a case
/// at a time: `report::Context::refill`), so a failing suite's memory does not grow with it.
pub fn judge_dir(dir: &Path, s: &mut Suite, keep_failing: bool) -> Result<Judged> {
    judge_dir_in_chunks(
        dir,
        s,
        keep_failing,
        crate::judge::prepare::JUDGE_CHUNK_CELLS,
    )
}

/// [`judge_dir`] with chunks of at most `chunk_cells` input values (tests vary it).
fn judge_dir_in_chunks(
    dir: &Path,
    s: &mut Suite,
    keep_failing: bool,
    chunk_cells: usize,
) -> Result<Judged> {
    let mut out = Judged {
        results: Vec::with_capacity(s.cases.len()),
        failing: vec![],
    };
    let mut largest = 0;
    for range in crate::judge::prepare::chunks(&s.cases, chunk_cells) {
        let (start, end) = (range.start, range.end);
        // Before a chunk larger than every one before it (the only kind that can raise the
        // process's peak), the free pages the allocator keeps of the earlier chunks go back
        // to the system: the peak is then about the largest chunk's working set, not that
        // plus what the threads' arenas kept (scale suite f32: 77 -> 59 MB).
        let values: usize = s.cases[range.clone()]
            .iter()
            .map(crate::judge::prepare::input_values)
            .sum();
        if values > largest {
            largest = values;
            crate::mem::release_free_pages();
        }
        // Each case moved out of the suite (its inputs), the rest of it left in place.
        let mut chunk: Vec<SuiteCase> = s.cases[start..end]
            .iter_mut()
            .map(|c| {
                let inputs = std::mem::take(&mut c.inputs);
                let mut owned = c.clone();
                owned.inputs = inputs;
                owned
            })
            .collect();
        let (name, seed) = (s.name.as_str(), s.seed);
        // A lean case made again, and a listed one that proves ill-posed refused as
        // `regenerate` refuses a list that differs from the suite's.
        // A lean suite's case is made as the fast path holds it, in its own width
        // (`remake_fast`), never as f64.
        let made: Vec<(bool, Option<crate::fast::FastProblem>)> = chunk
            .par_iter_mut()
            .map(
                |c| match crate::suite::generate::remake_fast(name, seed, c) {
                    Some((fp, ill)) => (ill.is_some(), Some(fp)),
                    None => (
                        crate::suite::generate::fill_inputs_tested(name, seed, c).is_some(),
                        None,
                    ),
                },
            )
            .collect();
        // The input files checked (each case's files in parallel); the errors in the cases'
        // order, as one by one.
        let checked: Vec<Result<()>> = chunk
            .par_iter()
            .zip(&made)
            .map(|(c, (ill, fp))| match (ill, fp) {
                (true, _) => Ok(()),
                (false, Some(fp)) => verify_made(dir, s, c, fp),
                (false, None) => verify_case(dir, s, c),
            })
            .collect();
        let mut fps = Vec::with_capacity(made.len());
        for ((c, (ill, fp)), ok) in chunk.iter().zip(made).zip(checked) {
            if ill {
                let prec = Precision {
                    act: c.dtype,
                    param: c.param_dtype,
                };
                return Err(cases_differ(name, seed, prec));
            }
            ok?;
            fps.push(fp);
        }
        // A lean suite's large case holds its inputs once, in the fast problem's width, while
        // it is judged; a case that does not pass has them made again for the reports.
        let refill = |c: &mut SuiteCase| crate::suite::generate::fill_inputs(name, seed, c);
        let lean = crate::suite::generate::remakes(name);
        let prepared = if lean {
            crate::judge::check::prepare_owned_lean(chunk.into_iter().zip(fps).collect(), &refill)?
        } else {
            crate::judge::check::prepare_owned(chunk)?
        };
        let results: Vec<CaseResult> = prepared
            .par_iter()
            .map(|p| {
                judge_in_width(dir, p).unwrap_or_else(|| p.judge_written(&read_written(dir, p)))
            })
            .collect();
        for ((mut p, r), slot) in prepared
            .into_iter()
            .zip(results)
            .zip(&mut s.cases[start..end])
        {
            // (a lean suite's case is made again when its details print, unless kept)
            if r.verdict != Verdict::Pass && (keep_failing || !lean) {
                refill(&mut p.case);
                slot.inputs = p.case.inputs.clone();
            }
            let mut r = r;
            if keep_failing && r.verdict == Verdict::Fail {
                out.failing.push(p);
            } else if !keep_failing {
                r.computed = None;
            }
            out.results.push(r);
        }
    }
    Ok(out)
}

/// What an error says of a file, without the file's path (the caller names it relative to DIR).
fn error_msg(e: &ConfError) -> String {
    match e {
        ConfError::Io { msg, .. } | ConfError::Npy { msg, .. } | ConfError::Json { msg, .. } => {
            msg.clone()
        }
        other => other.to_string(),
    }
}

/// A large f32 case judged with its cell output as the file holds it, binary32 (4 bytes a
/// value where [`read_written`] holds 8): `Some` only where every output reads and the case
/// passes, with [`Prepared::judge_written`]'s result for the same files. Anything else (a
/// refusal, a malformed or missing file, a failing case, a case without the one-pass summary)
/// is `None`, and the caller reads and judges the outputs as before.
fn judge_in_width(dir: &Path, p: &Prepared) -> Option<CaseResult> {
    let c = &p.case;
    let cell = c.op.outputs()[0];
    if !c.shard_sizes.is_empty() || c.dtype_of(cell) != FloatFormat::F32 || p.fast.is_none() {
        return None;
    }
    let out = dir.join(&c.id).join("out");
    if refusal(&out, "").is_some() {
        return None;
    }
    let mut outs = Vec::with_capacity(c.op.outputs().len());
    for &name in c.op.outputs() {
        let path = out.join(format!("{name}.npy"));
        let want = shape_of(c, name);
        outs.push(if name == cell {
            let n = want.iter().product::<usize>().max(1);
            match read_npy_any(&path, n).ok()? {
                (shape, NpyData::F32(v)) if shape == want => p.judge_output_f32(name, &v)?,
                _ => return None,
            }
        } else {
            let v = read_output(&path, &want, c.dtype_of(name)).ok()?;
            p.judge_output(name, &v).ok()?
        });
    }
    p.passing(outs)
}

/// Read what a kernel wrote for one case into `DIR/<id>/out/` (every rank's `rank<r>/out/`
/// for a replicated case), for [`Prepared::judge_written`]: its outputs, or `out/unsupported`'s
/// reason, or why an output is missing or malformed.
pub fn read_written(dir: &Path, p: &Prepared) -> Written {
    let c = &p.case;
    let out = dir.join(&c.id).join("out");
    if !c.shard_sizes.is_empty() {
        return replicated::read_written(dir, p);
    }
    if let Some(w) = refusal(&out, &format!("{}/out", c.id)) {
        return w;
    }
    let mut computed = BTreeMap::new();
    for &name in c.op.outputs() {
        let rel = format!("{}/out/{name}.npy", c.id);
        match read_output(
            &out.join(format!("{name}.npy")),
            &shape_of(c, name),
            c.dtype_of(name),
        ) {
            Ok(v) => {
                computed.insert(name.to_string(), v);
            }
            Err(why) => return Written::Malformed(format!("{rel}: {why}")),
        }
    }
    Written::Outputs(computed)
}

/// One output file of a kernel, as values of `dtype`: a regular file of shape `want` (size
/// checked against the shape before reading: a FIFO, a device or an oversized — even sparse —
/// file is a malformed output, never a hang). `Err` says why, without the path.
pub(crate) fn read_output(
    path: &Path,
    want: &[usize],
    dtype: FloatFormat,
) -> std::result::Result<Vec<f64>, String> {
    if path.symlink_metadata().is_err() {
        return Err("missing".into());
    }
    // Read straight into f64 where the file has the case's dtype (no copy in its width).
    let stored = match dtype {
        FloatFormat::F64 => Descr::F8,
        FloatFormat::F32 => Descr::F4,
        FloatFormat::F16 => Descr::F2,
        FloatFormat::BF16 => Descr::U2,
    };
    let (shape, read) = read_npy_any_as(path, want.iter().product::<usize>().max(1), stored)
        .map_err(|e| error_msg(&e))?;
    if shape != want {
        return Err(format!("shape {shape:?}, expected {want:?}"));
    }
    match read {
        NpyRead::Values(v) => Ok(v),
        NpyRead::Data(data) => values_of(dtype, &data),
    }
}

/// Why a case (or rank) directory's `out/` holds no outputs to judge, if it says so:
/// `out/error` (the kernel failed on the case: not conforming, "kernel error: <message>"),
/// else `out/unsupported` (its reason); either unreadable is a malformed output naming the file.
pub(crate) fn refusal(out: &Path, rel: &str) -> Option<Written> {
    if let Some(msg) = kernel_error(out, rel) {
        return Some(Written::Malformed(match msg {
            Ok(msg) => format!("kernel error: {msg}"),
            Err(why) => why,
        }));
    }
    unsupported_reason(out, rel).map(|r| match r {
        Ok(why) => Written::Unsupported(why),
        Err(why) => Written::Malformed(why),
    })
}

/// `out/error` of a case (or rank) directory, if present: the kernel's message (FORMAT.md,
/// "Added in bnconf 0.3: kernel errors"), or why it could not be read.
fn kernel_error(out: &Path, rel: &str) -> Option<std::result::Result<String, String>> {
    let file = out.join("error");
    file.symlink_metadata().ok()?;
    // Only a regular file is read, within the meta-file limit (as `unsupported`).
    Some(match read_regular_string(&file, MAX_META_BYTES, "") {
        Ok(msg) if msg.trim().is_empty() => Ok("the kernel failed (out/error is empty)".into()),
        Ok(msg) => Ok(msg.trim().to_string()),
        Err(e) => Err(format!("{rel}/error: {}", error_msg(&e))),
    })
}

/// `out/unsupported` of a case (or rank) directory, if present: the reason, or why it could
/// not be read.
pub(crate) fn unsupported_reason(
    out: &Path,
    rel: &str,
) -> Option<std::result::Result<String, String>> {
    let unsup = out.join("unsupported");
    unsup.symlink_metadata().ok()?;
    // Only a regular file is read: a FIFO here would block, /dev/zero never end.
    Some(match read_regular_string(&unsup, MAX_META_BYTES, "") {
        Ok(why) if why.trim().is_empty() => Ok("kernel reported unsupported".to_string()),
        Ok(why) => Ok(why.trim().to_string()),
        Err(e) => Err(format!("{rel}/unsupported: {}", error_msg(&e))),
    })
}

/// `bnconf kernel NAME DIR`: run a built-in kernel over every case of a suite directory,
/// reading `case.json` and the input npy files, writing `out/<output>.npy` (or
/// `out/unsupported`). Returns the number of cases run.
pub fn run_kernel_dir(kernel: &dyn bnconf_impl::Kernel, dir: &Path) -> Result<usize> {
    let ids = case_ids(dir)?;
    for id in &ids {
        let cd = dir.join(id);
        let v = case_value(&cd)?;
        if crate::formats::family_case::is_family_case(&v) {
            // A normalization-family case: only a family kernel runs it.
            let out = cd.join("out");
            std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
            let why = format!(
                "{} is a batch_norm kernel (the case is of the normalization family)",
                kernel.name()
            );
            write_bytes(&out.join("unsupported"), why.as_bytes())?;
            continue;
        }
        if v.get("ranks").is_some() {
            // A replicated case: its inputs are in rank<r>/, and only a replicated kernel
            // (`bnconf kernel --list`) runs it.
            let out = cd.join("out");
            std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
            let why = format!(
                "{} is not a replicated kernel (the case is split across ranks)",
                kernel.name()
            );
            write_bytes(&out.join("unsupported"), why.as_bytes())?;
            continue;
        }
        let case = kernel_case(&cd, &v, false)?;
        let shape = case.shape.clone();
        let layout = Layout::from_name(case.layout.name()).expect("same layout names");
        let (c_len, m_len, _) = layout.channel_dims(&shape).expect("checked");
        let out = cd.join("out");
        std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
        match kernel.run(&case) {
            Ok(res) => {
                let (c, m) = (c_len, m_len);
                for (name, vals) in res {
                    let sh = if bnconf_spec::tensor::is_cell_array(&name) {
                        shape.clone()
                    } else if bnconf_spec::tensor::is_shard_array(&name) {
                        vec![m]
                    } else {
                        vec![c]
                    };
                    let f = FloatFormat::from_name(case.dtype_of(&name).name())
                        .expect("same dtype names");
                    let data = npy_of(f, &vals);
                    write_npy(&out.join(format!("{name}.npy")), &sh, &data)?;
                }
            }
            Err(bnconf_impl::Unsupported(why)) => {
                write_bytes(&out.join("unsupported"), why.as_bytes())?
            }
        }
    }
    Ok(ids.len())
}

/// Read `case.json` and the input npy files of a case directory `cd` as a kernel sees them
/// (`shard`: a replicated case's `rank<r>/`, whose `shard_shape` gives the input shapes).
/// Sizes are checked against the limits before anything is read.
pub(crate) fn kernel_case(cd: &Path, v: &Value, shard: bool) -> Result<bnconf_impl::Case> {
    let cpath = cd.join("case.json");
    let get = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| ConfError::field(format!("{}: {k}", cpath.display()), "missing"))
    };
    let op = bnconf_impl::Op::from_name(get("op")?)
        .ok_or_else(|| ConfError::field(format!("{}: op", cpath.display()), "unknown"))?;
    let layout = bnconf_impl::Layout::from_name(get("layout")?)
        .ok_or_else(|| ConfError::field(format!("{}: layout", cpath.display()), "unknown"))?;
    let dtype = bnconf_impl::Dtype::from_name(get("dtype")?)
        .ok_or_else(|| ConfError::field(format!("{}: dtype", cpath.display()), "unknown"))?;
    // The shape, sized before anything is read or tabulated: its element count must be
    // within the harness's limit and each input must have its length (a
    // [1e6, 1e6, 1, 1] case used to build a 7.6 GB cell table before failing).
    let shape_key = if shard { "shard_shape" } else { "shape" };
    let shape_err =
        |msg: String| ConfError::field(format!("{}: {shape_key}", cpath.display()), msg);
    let shape: Vec<usize> = v
        .get(shape_key)
        .and_then(Value::as_array)
        .ok_or_else(|| shape_err("missing or not an array".into()))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| shape_err("must be an array of non-negative integers".into()))?;
    let (c_len, m_len, n_len) = if shard {
        // A rank's shard: the whole case's channels, any number of rows (0 included).
        let whole: Vec<usize> = v
            .get("shape")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect();
        let (c, _, _) = Layout::from_name(layout.name())
            .expect("same layout names")
            .channel_dims(&whole)
            .map_err(shape_err)?;
        if shape.len() != whole.len() || shape.get(1..) != whole.get(1..) {
            return Err(shape_err(format!(
                "{shape:?} is not a shard of the case's shape {whole:?}"
            )));
        }
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| shape_err("element count overflows".into()))?;
        (c, n / c, n)
    } else {
        Layout::from_name(layout.name())
            .expect("same layout names")
            .channel_dims(&shape)
            .map_err(shape_err)?
    };
    let max_elems = crate::formats::case::InputLimits::default().max_elems;
    if n_len > max_elems {
        return Err(shape_err(format!(
            "{shape:?} has {n_len} elements, more than the limit of {max_elems}"
        )));
    }
    let eps = v
        .get("eps")
        .and_then(Value::as_f64)
        .ok_or_else(|| ConfError::field(format!("{}: eps", cpath.display()), "missing"))?;
    let mut inputs = BTreeMap::new();
    for name in op.inputs() {
        let want = if bnconf_spec::tensor::is_cell_array(name) {
            n_len
        } else if bnconf_spec::tensor::is_shard_array(name) {
            m_len
        } else {
            c_len
        };
        let ipath = cd.join(format!("{name}.npy"));
        let (_, data) = read_npy_any(&ipath, want.max(1))?;
        if data.len() != want {
            return Err(ConfError::Npy {
                path: ipath.display().to_string(),
                msg: format!(
                    "{} values, expected {want} (shape {shape:?} of {})",
                    data.len(),
                    cpath.display()
                ),
            });
        }
        inputs.insert(name.to_string(), decode(&data));
    }
    let mut params = bnconf_impl::Params::default();
    if op == bnconf_impl::Op::RunningUpdate {
        params.momentum = v
            .get("momentum")
            .and_then(Value::as_f64)
            .ok_or_else(|| ConfError::field(format!("{}: momentum", cpath.display()), "missing"))?;
        params.convention = Some(
            v.get("convention")
                .and_then(Value::as_str)
                .and_then(bnconf_impl::Convention::from_name)
                .ok_or_else(|| {
                    ConfError::field(
                        format!("{}: convention", cpath.display()),
                        "missing or not one of pytorch, onnx",
                    )
                })?,
        );
    }
    // Mixed precisions: per-channel arrays in `param_dtype` (default: `dtype`).
    let param_dtype = match v.get("param_dtype").and_then(Value::as_str) {
        None => dtype,
        Some(n) => bnconf_impl::Dtype::from_name(n).ok_or_else(|| {
            ConfError::field(format!("{}: param_dtype", cpath.display()), "unknown")
        })?,
    };
    let case = bnconf_impl::Case {
        op,
        layout,
        shape: shape.clone(),
        dtype,
        param_dtype,
        eps,
        inputs,
        params,
    };
    Ok(case)
}

/// The case directories of DIR (those holding a `case.json`), sorted.
pub(crate) fn case_ids(dir: &Path) -> Result<Vec<String>> {
    let mut ids: Vec<String> = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| ConfError::io(dir, e))?;
    for e in rd.flatten() {
        // Listed if present at all: a case.json that is not a regular file is refused later.
        if e.path().join("case.json").symlink_metadata().is_ok() {
            ids.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

/// `cd/case.json`, parsed (a regular file of at most [`MAX_META_BYTES`]).
pub(crate) fn case_value(cd: &Path) -> Result<Value> {
    let cpath = cd.join("case.json");
    let text = read_regular_string(&cpath, MAX_META_BYTES, "")?;
    serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: cpath.display().to_string(),
        msg: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::check::prepare;

    /// `regenerate` takes the manifest's list for the cases whose sharpness test it skips
    /// (`generate_listed`), so the list itself is checked: an export's manifest regenerates its
    /// suite; one with a kept case taken out of `cases` is refused, naming the field.
    #[test]
    fn regenerate_refuses_a_manifest_whose_cases_were_edited() {
        let sel = crate::suite::Selection::from_names(
            "default",
            "f16",
            crate::suite::DEFAULT_SEED,
            &["forward"],
            &["nchw"],
        )
        .unwrap();
        let s = sel.generate();
        assert!(s.cases.len() > 2 && !s.excluded.is_empty());
        let dir = std::env::temp_dir().join(format!("bnconf-regen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        export(&s, sel.precision, &sel.filter, &dir).unwrap();
        let (again, _, _) = regenerate(&dir).unwrap();
        let ids = |s: &Suite| s.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&again), ids(&s));
        assert_eq!(again.excluded, s.excluded);
        let mpath = dir.join("manifest.json");
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap();
        m["cases"].as_array_mut().unwrap().remove(1);
        std::fs::write(&mpath, serde_json::to_string(&m).unwrap()).unwrap();
        let err = regenerate(&dir)
            .expect_err("an edited list is refused")
            .to_string();
        assert!(err.contains("manifest.json: cases"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `judge_dir` streams what preparing every case at once and judging each gives, result
    /// for result (verdicts, ratios, worst elements, the failing outputs kept), whatever the
    /// chunk size (one case per chunk, a few, all); it keeps the preparations of exactly the
    /// failing cases when asked (none otherwise), and leaves in the suite the inputs of the
    /// cases that did not pass, those of the passing ones dropped.
    #[test]
    fn judge_dir_streams_the_results_of_judging_all_at_once() {
        let full = crate::suite::test_suite("default", &[FloatFormat::F32]);
        // Every op, a few cases of each, and the large-mean ones, which the one-pass variance
        // fails (forward and backward). The seed's five layouts only (the first five of
        // `Layout::ALL`): with the 0.3 layouts, the 8 would all be gaussian.
        let mut cases: Vec<SuiteCase> = vec![];
        for op in Op::ALL {
            cases.extend(
                full.cases
                    .iter()
                    .filter(|c| c.op == op && bnconf_spec::Layout::ALL[..5].contains(&c.layout))
                    .filter(|c| c.class.starts_with("large-mean") || c.class == "gaussian")
                    .take(8)
                    .cloned(),
            );
        }
        let suite = Suite {
            cases,
            ..full.clone()
        };
        let dir = std::env::temp_dir().join(format!("bnconf-judge-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let filter = Filter::default();
        export(&suite, Precision::uniform(FloatFormat::F32), &filter, &dir).unwrap();
        let bad = bnconf_impl::kernel_by_name("bad-onepass-var").expect("a known-bad kernel");
        run_kernel_dir(bad.as_ref(), &dir).unwrap();
        // An unsupported and a malformed case too.
        let ids: Vec<String> = suite.cases.iter().map(|c| c.id.clone()).collect();
        write_bytes(&dir.join(&ids[0]).join("out/unsupported"), b"not today").unwrap();
        let first_out = suite.cases[1].op.outputs()[0];
        std::fs::remove_file(dir.join(&ids[1]).join(format!("out/{first_out}.npy"))).unwrap();

        let want: Vec<CaseResult> = prepare(&suite.cases)
            .unwrap()
            .iter()
            .map(|p| p.judge_written(&read_written(&dir, p)))
            .collect();
        let verdicts: Vec<&Verdict> = want.iter().map(|r| &r.verdict).collect();
        assert!(
            verdicts.contains(&&Verdict::Pass) && verdicts.contains(&&Verdict::Fail),
            "{verdicts:?}"
        );
        assert!(matches!(want[0].verdict, Verdict::Unsupported(_)));
        assert!(matches!(want[1].verdict, Verdict::Malformed(_)));
        let total: usize = suite
            .cases
            .iter()
            .map(|c| c.inputs.values().map(Vec::len).sum::<usize>())
            .sum();
        for (chunk, keep) in [(1, true), (500, false), (total, true), (usize::MAX, true)] {
            let mut s = suite.clone();
            let got = judge_dir_in_chunks(&dir, &mut s, keep, chunk).unwrap();
            assert_eq!(got.results.len(), want.len());
            for (g, w) in got.results.iter().zip(&want) {
                // (without `keep`, no result keeps its outputs)
                let mut w = w.clone();
                if !keep {
                    w.computed = None;
                }
                assert_eq!(format!("{g:?}"), format!("{w:?}"), "chunk {chunk}");
            }
            let failing: Vec<&str> = want
                .iter()
                .filter(|r| r.verdict == Verdict::Fail)
                .map(|r| r.id.as_str())
                .collect();
            let kept: Vec<&str> = got.failing.iter().map(|p| p.case.id.as_str()).collect();
            assert_eq!(kept, if keep { failing } else { vec![] }, "chunk {chunk}");
            for ((c, orig), r) in s.cases.iter().zip(&suite.cases).zip(&want) {
                let mut stripped = orig.clone();
                if r.verdict == Verdict::Pass {
                    stripped.inputs.clear();
                }
                assert_eq!(c, &stripped, "{} (chunk {chunk})", c.id);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A large f32 case judged with its cell output in the file's width (`judge_in_width`)
    /// gives `judge_written`'s result where it passes (forward and backward, both layouts), and
    /// leaves to it a failing case, a refused one and a cell output written as f64.
    #[test]
    fn judging_in_the_files_width_is_judging_in_f64() {
        let sel = crate::suite::Selection::from_names(
            "scale",
            "f32",
            crate::suite::DEFAULT_SEED,
            &["forward", "backward"],
            &["nchw", "nhwc"],
        )
        .unwrap();
        let mut suite = sel.generate();
        suite
            .cases
            .retain(|c| c.class.ends_with("m65537") || c.class.ends_with("c2051"));
        assert_eq!(suite.cases.len(), 8);
        let dir = std::env::temp_dir().join(format!("bnconf-in-width-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        export(&suite, sel.precision, &sel.filter, &dir).unwrap();
        let good = bnconf_impl::kernel_by_name("twopass-native").unwrap();
        run_kernel_dir(good.as_ref(), &dir).unwrap();
        let prepared = prepare(&suite.cases).unwrap();
        let judged = |p: &Prepared| p.judge_written(&read_written(&dir, p));
        for p in &prepared {
            let want = judged(p);
            assert_eq!(want.verdict, Verdict::Pass, "{}", p.case.id);
            let got = judge_in_width(&dir, p).expect("a passing large f32 case");
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{}", p.case.id);
        }
        // One element of a cell output moved by 1e-3 relatively: the case fails, judged as f64.
        let (p, q, r) = (&prepared[0], &prepared[1], &prepared[2]);
        let cell = |p: &Prepared| {
            let name = p.case.op.outputs()[0];
            (
                dir.join(&p.case.id).join(format!("out/{name}.npy")),
                shape_of(&p.case, name),
            )
        };
        let (path, shape) = cell(p);
        let (_, NpyData::F32(mut v)) = read_npy_any(&path, usize::MAX).unwrap() else {
            panic!("f32 output")
        };
        v[7] *= 1.001;
        write_npy(&path, &shape, &NpyData::F32(v)).unwrap();
        assert_eq!(judged(p).verdict, Verdict::Fail);
        assert!(judge_in_width(&dir, p).is_none());
        // A cell output written as f64 (the same values): judged as before, read as f64.
        let (path, shape) = cell(q);
        let (_, NpyData::F32(v)) = read_npy_any(&path, usize::MAX).unwrap() else {
            panic!("f32 output")
        };
        write_npy(
            &path,
            &shape,
            &NpyData::F64(v.iter().map(|&x| x as f64).collect()),
        )
        .unwrap();
        assert!(judge_in_width(&dir, q).is_none());
        // A refusal.
        write_bytes(&dir.join(&r.case.id).join("out/unsupported"), b"not today").unwrap();
        assert!(judge_in_width(&dir, r).is_none());
        assert!(matches!(judged(r).verdict, Verdict::Unsupported(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
