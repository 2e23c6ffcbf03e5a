//! The kernel directory protocol for the normalization family (FORMAT.md "Added in bnconf 0.3:
//! the normalization family in the protocol"): export a family suite, regenerate it from an
//! export's manifest, read what a kernel wrote (the optional statistics may be left out) and
//! judge it with `judge::family`, run a built-in family kernel over a directory, and the
//! golden file of a family case file.

use super::{case_ids, case_value, decode, npy_of, read_output, refusal};
use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::case::{read_case_json, InputLimits};
use crate::formats::family_case::{
    family_case_echo, family_case_json, family_error, family_shape, family_sizes, format_of,
    is_family_case, parse_family_case, parse_family_case_floats, parse_family_header,
};
use crate::formats::fsafe::read_regular_string;
use crate::formats::npy::{read_npy_any, write_npy, NpyData};
use crate::judge::family::{prepare_family, FailingCase, FamilyPrepared};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::par::*;
use crate::suite::family::{family_goldens_exact, FamilySuite, FamilySuiteCase, Golden};
use crate::suite::family_select::FamilySelection;
use bnconf_impl::family::{FamilyCase, FamilyKernel};
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::{QSqrt, SpecError};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Cases prepared and judged together by [`judge_dir`] (then dropped).
const JUDGE_CHUNK_CASES: usize = 64;

/// Write a family suite into `dir`: per case `case.json` and one npy per input (activations
/// in the precision's first dtype, the rest in its second), then `manifest.json`.
pub fn export(sel: &FamilySelection, s: &FamilySuite, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    for c in &s.cases {
        let cd = dir.join(&c.id);
        std::fs::create_dir_all(&cd).map_err(|e| ConfError::io(&cd, e))?;
        let v = family_case_json(&c.id, &c.case, c.level.name(), &c.class);
        let text = serde_json::to_string_pretty(&v).expect("json") + "\n";
        write_bytes(&cd.join("case.json"), text.as_bytes())?;
        for (name, vals) in &c.case.inputs {
            let f = format_of(c.case.dtype_of(name));
            write_npy(
                &cd.join(format!("{name}.npy")),
                &family_shape(&c.case, name),
                &npy_of(f, vals),
            )?;
        }
    }
    let text = serde_json::to_string_pretty(&sel.manifest_json(s)).expect("json") + "\n";
    write_bytes(&dir.join("manifest.json"), text.as_bytes())
}

/// `dir/manifest.json`, parsed.
fn manifest(dir: &Path) -> Result<Value> {
    let mpath = dir.join("manifest.json");
    let text = read_regular_string(&mpath, super::MAX_META_BYTES, "")?;
    serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: mpath.display().to_string(),
        msg: e.to_string(),
    })
}

/// Whether `dir` holds a family export (its manifest has `"family"`).
pub fn is_family_dir(dir: &Path) -> Result<bool> {
    Ok(manifest(dir)?.get("family").is_some())
}

/// The family suite an export's manifest selects, regenerated (never read back from the
/// directory); `None` for batch_norm's export (no `"family"`).
pub fn regenerate(dir: &Path) -> Result<Option<(FamilySelection, FamilySuite)>> {
    let m = manifest(dir)?;
    let Some(sel) = FamilySelection::from_manifest(&m)? else {
        return Ok(None);
    };
    let s = sel.generate();
    let listed: Vec<&str> = m
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| ConfError::field("manifest.json: cases", "missing or of the wrong type"))?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let ours: Vec<&str> = s.cases.iter().map(|c| c.id.as_str()).collect();
    if listed != ours {
        return Err(ConfError::field(
            "manifest.json: cases",
            format!(
                "do not match family {} (seed {}, {}) as this bnconf generates it: the directory was edited or written by another version",
                sel.family,
                sel.seed,
                sel.precision.name()
            ),
        ));
    }
    Ok(Some((sel, s)))
}

/// The input files in `dir` are exactly the regenerated suite's inputs.
pub fn verify_inputs(dir: &Path, s: &FamilySuite) -> Result<()> {
    s.cases.par_iter().try_for_each(|c| {
        for (name, want) in &c.case.inputs {
            let path = dir.join(&c.id).join(format!("{name}.npy"));
            let (_, data) = read_npy_any(&path, want.len().max(1))?;
            let got = decode(&data);
            let same = got.len() == want.len()
                && got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                return Err(ConfError::field(
                    format!("{}/{name}.npy", c.id),
                    "differs from the family suite as generated from manifest.json: the inputs or the manifest were edited",
                ));
            }
        }
        Ok(())
    })
}

/// What a kernel wrote for one family case.
#[derive(Clone, Debug)]
pub enum FamilyWritten {
    /// `out/unsupported`: the kernel's reason.
    Unsupported(String),
    /// A missing required output, a malformed one, or `out/error`: why (naming the file).
    Malformed(String),
    /// The outputs given, and the optional outputs not given.
    Outputs(BTreeMap<String, Vec<f64>>, Vec<&'static str>),
}

/// Read `DIR/<id>/out/` of a family case: every output of the case, each of its shape and
/// dtype; an optional one (`mean`, `rstd`) may be absent.
pub fn read_written(dir: &Path, c: &FamilySuiteCase) -> FamilyWritten {
    read_out_dir(
        &dir.join(&c.id).join("out"),
        &format!("{}/out", c.id),
        &c.case,
    )
}

/// Read the outputs of `case` from `out` (`shown`: how messages name it): `error` or
/// `unsupported`, else every output of the case, each of its shape and dtype; an optional
/// one (`mean`, `rstd`) may be absent.
fn read_out_dir(out: &Path, shown: &str, case: &FamilyCase) -> FamilyWritten {
    if let Some(w) = refusal(out, shown) {
        return match w {
            crate::judge::check::Written::Unsupported(why) => FamilyWritten::Unsupported(why),
            crate::judge::check::Written::Malformed(why) => FamilyWritten::Malformed(why),
            _ => unreachable!("refusal is unsupported or malformed"),
        };
    }
    let optional = case.op.optional_outputs();
    let (mut got, mut not_given) = (BTreeMap::new(), vec![]);
    for name in case.op.outputs(case.affine) {
        let path = out.join(format!("{name}.npy"));
        if optional.contains(&name) && path.symlink_metadata().is_err() {
            not_given.push(name);
            continue;
        }
        let f = format_of(case.dtype_of(name));
        match read_output(&path, &family_shape(case, name), f) {
            Ok(v) => {
                got.insert(name.to_string(), v);
            }
            Err(why) => return FamilyWritten::Malformed(format!("{shown}/{name}.npy: {why}")),
        }
    }
    FamilyWritten::Outputs(got, not_given)
}

/// What [`judge_dir`] found: a result per case, in order, and per case the optional outputs
/// the kernel did not give (judged without them).
#[derive(Debug, Default)]
pub struct FamilyJudged {
    pub results: Vec<CaseResult>,
    /// `(case id, outputs not given)`, for the cases that left an optional output out.
    pub not_given: Vec<(String, Vec<&'static str>)>,
    /// The failing cases (verdict `Fail`): the preparation, the outputs judged, the worst
    /// ratio, when kept (for the diagnosis).
    pub failing: Vec<FailingCase>,
}

/// Judge what a kernel wrote into `dir` for every case of `s` (a chunk of cases at a time:
/// prepared, read, judged, dropped; the failing cases kept when `keep_failing`). A large case
/// of layout `last` is judged in one pass over its rows without a preparation
/// ([`judge_last`](crate::judge::family_rows::judge_last): the same result), and prepared
/// only if it fails and `keep_failing`. The inputs are not verified here ([`verify_inputs`]).
pub fn judge_dir(dir: &Path, s: &FamilySuite, keep_failing: bool) -> Result<FamilyJudged> {
    let mut out = FamilyJudged::default();
    for chunk in s.cases.chunks(JUDGE_CHUNK_CASES) {
        let judged: Vec<std::result::Result<(Judged1, Option<FamilyPrepared>), SpecError>> = chunk
            .par_iter()
            .map(|c| {
                let w = read_written(dir, c);
                if let FamilyWritten::Outputs(got, ng) = w {
                    if let Some(r) = crate::judge::family_rows::judge_last(c, &got) {
                        let failing = keep_failing && r.verdict == Verdict::Fail;
                        let p = failing.then(|| prepare_family(c)).transpose()?;
                        return Ok(((r, ng, failing.then_some(got)), p));
                    }
                    let p = prepare_family(c)?;
                    return Ok((judge_one(&p, FamilyWritten::Outputs(got, ng)), Some(p)));
                }
                let p = prepare_family(c)?;
                Ok((judge_one(&p, w), Some(p)))
            })
            .collect();
        for j in judged {
            let ((r, ng, got), p) = j?;
            if !ng.is_empty() {
                out.not_given.push((r.id.clone(), ng));
            }
            if let (true, Verdict::Fail, Some(got), Some(p)) = (keep_failing, &r.verdict, got, p) {
                out.failing.push((p, got, r.worst_ratio));
            }
            out.results.push(r);
        }
    }
    Ok(out)
}

/// One case judged: its result, the optional outputs not given, the outputs judged.
pub type Judged1 = (
    CaseResult,
    Vec<&'static str>,
    Option<BTreeMap<String, Vec<f64>>>,
);

/// Judge one case's written outputs: its result, the optional outputs not given, the outputs
/// judged (`None` when unsupported or malformed).
pub fn judge_one(p: &FamilyPrepared, w: FamilyWritten) -> Judged1 {
    match w {
        FamilyWritten::Unsupported(why) => (p.unsupported(&why), vec![], None),
        FamilyWritten::Malformed(why) => {
            let mut r = p.unsupported("");
            r.verdict = Verdict::Malformed(why);
            (r, vec![], None)
        }
        FamilyWritten::Outputs(got, ng) => (p.judge(&got), ng, Some(got)),
    }
}

/// Read a family case directory as a kernel sees it: `case.json` (its fields checked, sizes
/// first) and the input npy files (each of its tensor's length).
pub fn kernel_case(cd: &Path, v: &Value) -> Result<FamilyCase> {
    let cpath = cd.join("case.json");
    let prefix = format!("{}: ", cpath.display());
    let lim = InputLimits::default();
    let mut case = parse_family_header(v, &lim, &prefix)?.case;
    // The kernel reads eps as the JSON number (FORMAT.md), as batch_norm's kernels do.
    if let Some(e) = v.get("eps").and_then(Value::as_f64) {
        case.eps = e;
    }
    family_sizes(&case).map_err(|e| family_error(&prefix, e))?;
    for name in case.op.inputs(case.affine) {
        let want: usize = family_shape(&case, name).iter().product();
        let ipath = cd.join(format!("{name}.npy"));
        let (_, data) = read_npy_any(&ipath, want.max(1))?;
        if data.len() != want {
            return Err(ConfError::Npy {
                path: ipath.display().to_string(),
                msg: format!(
                    "{} values, expected {want} (shape {:?} of {})",
                    data.len(),
                    family_shape(&case, name),
                    cpath.display()
                ),
            });
        }
        case.inputs.insert(name.to_string(), decode(&data));
    }
    case.validate().map_err(|e| family_error(&prefix, e))?;
    Ok(case)
}

/// `bnconf kernel NAME DIR` for a family kernel: run it over every case of DIR, writing
/// `out/<output>.npy` (each output it returns, in its dtype and shape) or `out/unsupported`
/// (a batch_norm case, or a case of another family). Returns the number of cases.
pub fn run_kernel_dir(kernel: &dyn FamilyKernel, dir: &Path) -> Result<usize> {
    let ids = case_ids(dir)?;
    for id in &ids {
        let cd = dir.join(id);
        let v = case_value(&cd)?;
        let out = cd.join("out");
        std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
        if !is_family_case(&v) {
            let why = format!("{} is a normalization-family kernel", kernel.name());
            write_bytes(&out.join("unsupported"), why.as_bytes())?;
            continue;
        }
        let case = kernel_case(&cd, &v)?;
        match kernel.run(&case) {
            Ok(res) => {
                for (name, vals) in res {
                    let f = format_of(case.dtype_of(&name));
                    write_npy(
                        &out.join(format!("{name}.npy")),
                        &family_shape(&case, &name),
                        &npy_of(f, &vals),
                    )?;
                }
            }
            Err(bnconf_impl::Unsupported(why)) => {
                write_bytes(&out.join("unsupported"), why.as_bytes())?
            }
        }
    }
    Ok(ids.len())
}

/// Whether the case file at `path` is a family case (read as JSON within `lim`).
pub fn is_family_case_file(path: &Path, lim: &InputLimits) -> Result<bool> {
    Ok(is_family_case(&read_case_json(path, lim)?))
}

/// A family case file, parsed.
fn case_file(
    path: &Path,
    lim: &InputLimits,
) -> Result<crate::formats::family_case::FamilyCaseFile> {
    let v = read_case_json(path, lim)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_family_case(&v, &base, lim)
}

/// The exact outputs of a parsed family case file (every output, optional ones included).
fn exact_of(
    f: &crate::formats::family_case::FamilyCaseFile,
) -> Result<BTreeMap<&'static str, Golden>> {
    Ok(family_goldens_exact(
        &f.header.case,
        &f.inputs,
        &QSqrt::rational(f.header.eps.clone()),
    )?)
}

/// A golden output's exact strings (`None`) or the hex strings of its correct rounding.
fn strings(g: &Golden, f: Option<FloatFormat>) -> Vec<String> {
    match (g, f) {
        (Golden::Q(v), None) => v.par_iter().map(|e| e.to_string()).collect(),
        (Golden::Q(v), Some(f)) => v.par_iter().map(|e| round(e, f).to_hex()).collect(),
        (Golden::Roots(v), None) => v.par_iter().map(|e| e.to_string()).collect(),
        (Golden::Roots(v), Some(f)) => v.par_iter().map(|e| e.round(f).to_hex()).collect(),
    }
}

/// `bnconf golden CASE.json` of a family case: `bnconf-golden/1` with every output of the
/// case (the optional statistics included) as `exact` strings (`dgamma`: a sum of roots) and
/// the correctly rounded hex strings of each format in `formats`.
pub fn golden_doc(path: &Path, lim: &InputLimits, formats: &[FloatFormat]) -> Result<Value> {
    golden_doc_of(&case_file(path, lim)?, formats)
}

/// [`golden_doc`] of a parsed family case file.
pub fn golden_doc_of(
    f: &crate::formats::family_case::FamilyCaseFile,
    formats: &[FloatFormat],
) -> Result<Value> {
    let g = exact_of(f)?;
    let case = &f.header.case;
    let mut inputs = Map::new();
    for (name, vals) in &f.inputs {
        let ff = format_of(case.dtype_of(name));
        inputs.insert(
            name.clone(),
            json!(vals
                .iter()
                .map(|v| round(v, ff).to_hex())
                .collect::<Vec<_>>()),
        );
    }
    let mut outs = Map::new();
    for name in case.op.outputs(case.affine) {
        let gold = &g[name];
        let mut o = Map::new();
        o.insert("shape".into(), json!(family_shape(case, name)));
        o.insert("exact".into(), json!(strings(gold, None)));
        for &ff in formats {
            o.insert(ff.name().into(), json!(strings(gold, Some(ff))));
        }
        outs.insert(name.to_string(), Value::Object(o));
    }
    Ok(json!({
        "format": "bnconf-golden/1",
        "case": family_case_echo(&f.header, Value::Object(inputs)),
        "outputs": Value::Object(outs),
        "provenance": crate::formats::golden::provenance(),
    }))
}

/// `bnconf golden CASE.json --out-dir DIR` of a family case: `DIR/<output>.f64.npy`,
/// `DIR/<output>.f32.npy` (every output) and `DIR/golden.json` naming them.
pub fn golden_to_dir(path: &Path, lim: &InputLimits, dir: &Path) -> Result<()> {
    let f = case_file(path, lim)?;
    let case = &f.header.case;
    // The fast exact path (fast::family: bit for bit the exact one) where it applies; the
    // exact path otherwise.
    let eps = &f.header.eps;
    let fast =
        |ff: FloatFormat| crate::fast::family::family_fast_in(case, eps, ff, ff).map(|(o, _)| o);
    let (fast64, fast32) = (fast(FloatFormat::F64), fast(FloatFormat::F32));
    let covered = |o: &Option<BTreeMap<&'static str, Vec<f64>>>| {
        o.as_ref().is_some_and(|o| {
            case.op
                .outputs(case.affine)
                .iter()
                .all(|n| o.contains_key(n))
        })
    };
    let g = if covered(&fast64) && covered(&fast32) {
        BTreeMap::new()
    } else {
        exact_of(&f)?
    };
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut outs = Map::new();
    let no_golden = Golden::Q(Vec::new());
    for name in case.op.outputs(case.affine) {
        let shape = family_shape(case, name);
        let gold = g.get(name).unwrap_or(&no_golden);
        let f64s: Vec<f64> = match (fast64.as_ref().and_then(|o| o.get(name)), gold) {
            (Some(v), _) => v.clone(),
            (None, Golden::Q(v)) => v
                .par_iter()
                .map(|e| round(e, FloatFormat::F64).to_f64())
                .collect(),
            (None, Golden::Roots(v)) => v
                .par_iter()
                .map(|e| e.round(FloatFormat::F64).to_f64())
                .collect(),
        };
        let f32s: Vec<f32> = match (fast32.as_ref().and_then(|o| o.get(name)), gold) {
            (Some(v), _) => v.iter().map(|&e| e as f32).collect(),
            (None, Golden::Q(v)) => v
                .par_iter()
                .map(|e| round(e, FloatFormat::F32).to_f64() as f32)
                .collect(),
            (None, Golden::Roots(v)) => v
                .par_iter()
                .map(|e| e.round(FloatFormat::F32).to_f64() as f32)
                .collect(),
        };
        let (p64, p32) = (format!("{name}.f64.npy"), format!("{name}.f32.npy"));
        write_npy(&dir.join(&p64), &shape, &NpyData::F64(f64s))?;
        write_npy(&dir.join(&p32), &shape, &NpyData::F32(f32s))?;
        outs.insert(
            name.to_string(),
            json!({"shape": shape, "f64": p64, "f32": p32}),
        );
    }
    let names: Vec<&str> = case.op.inputs(case.affine);
    let doc = json!({
        "format": "bnconf-golden/1",
        "case": family_case_echo(&f.header, json!(names)),
        "outputs": Value::Object(outs),
        "provenance": crate::formats::golden::provenance(),
    });
    let text = serde_json::to_string_pretty(&doc).expect("json") + "\n";
    write_bytes(&dir.join("golden.json"), text.as_bytes())
}

/// `bnconf check --case CASE.json --outputs DIR` of a family case file (the format `bnconf
/// golden` reads): the case read as a [`FamilySuiteCase`] (id, `level` and `class` from the
/// file, else `core` and `user`; `eps` the f64 a kernel reads), refused when ill-posed in its
/// dtype; the kernel's outputs `DIR/<output>.npy` read as a suite case's `out/` (the optional
/// statistics may be absent; `DIR/error`, `DIR/unsupported`), judged as a suite case is. A
/// bad case file is an error naming the field; a bad or missing output is a verdict. A large
/// case of layout `last` is judged in one pass over its rows
/// ([`judge_last`](crate::judge::family_rows::judge_last)), the same result; a failing case
/// is prepared in full when `keep_failing` (its preparation kept, for the diagnosis).
pub fn judge_user_case(
    case: &Path,
    dir: &Path,
    lim: &InputLimits,
    keep_failing: bool,
) -> Result<FamilyJudged> {
    let sc = user_suite_case(case, lim)?;
    if !dir.is_dir() {
        return Err(ConfError::field(
            "--outputs",
            format!("{}: not a directory", dir.display()),
        ));
    }
    let written = read_out_dir(dir, &dir.display().to_string(), &sc.case);
    let prepare = |sc: FamilySuiteCase| {
        crate::judge::family::prepare_family_owned(sc)
            .map_err(|e| ConfError::field("inputs", e.to_string()))
    };
    let mut out = FamilyJudged::default();
    let judged = match written {
        FamilyWritten::Outputs(got, ng) => match crate::judge::family_rows::judge_last(&sc, &got) {
            Some(r) => {
                let failing = keep_failing && r.verdict == Verdict::Fail;
                let p = if failing { Some(prepare(sc)?) } else { None };
                ((r, ng, failing.then_some(got)), p)
            }
            None => {
                let p = prepare(sc)?;
                (judge_one(&p, FamilyWritten::Outputs(got, ng)), Some(p))
            }
        },
        w => {
            let p = prepare(sc)?;
            (judge_one(&p, w), Some(p))
        }
    };
    let ((r, ng, got), p) = judged;
    if !ng.is_empty() {
        out.not_given.push((r.id.clone(), ng));
    }
    if let (Verdict::Fail, Some(got), Some(p)) = (&r.verdict, got, p) {
        out.failing.push((p, got, r.worst_ratio));
    }
    out.results.push(r);
    Ok(out)
}

/// A family case file read as a [`FamilySuiteCase`] (id, `level` and `class` from the file,
/// else `core` and `user`; `eps` the f64 a kernel reads), refused when ill-posed in its dtype
/// (`check --case`, `shrink --case-file`). The inputs are read as floats
/// ([`parse_family_case_floats`]): a case the judge takes through its per-row fast path may
/// have up to `lim.max_elems` cells, one judged per element exactly at most
/// `lim.max_json_elems` (checked before any input is read; and, for a case past that whose
/// inputs the fast path declines, refused once they are read).
pub fn user_suite_case(case: &Path, lim: &InputLimits) -> Result<FamilySuiteCase> {
    use crate::judge::family::{family_fast_takes_inputs, FAMILY_FAST_MIN_LEN};
    let v = read_case_json(case, lim)?;
    let base = case.parent().map(Path::to_path_buf).unwrap_or_default();
    let h = parse_family_case_floats(&v, &base, lim, FAMILY_FAST_MIN_LEN)?;
    drop(v);
    let cells: usize = h.case.shape.iter().product();
    if cells > lim.max_json_elems && !family_fast_takes_inputs(&h.case) {
        return Err(ConfError::field(
            "shape",
            format!(
                "{:?} has {cells} elements, more than the exact path takes ({}, --max-json-elems), and the fast path declines its inputs (an input nonzero and outside [2^-400, 2^400] in magnitude)",
                h.case.shape, lim.max_json_elems
            ),
        ));
    }
    let precision = crate::suite::Precision {
        act: format_of(h.case.dtype),
        param: format_of(h.case.param_dtype),
    }
    .static_name();
    if let Some(why) = crate::suite::family::family_ill_posed(&h.case) {
        return Err(ConfError::field(
            "inputs",
            format!("the case is ill-posed in {precision} ({why}): no output of it can be judged"),
        ));
    }
    let extra_str = |k: &str| h.extra.get(k).and_then(Value::as_str);
    let level = extra_str("level")
        .and_then(crate::suite::Level::from_name)
        .unwrap_or(crate::suite::Level::Core);
    let class = extra_str("class").unwrap_or("user").to_string();
    Ok(FamilySuiteCase {
        id: h.id,
        level,
        class,
        precision,
        case: h.case,
    })
}
