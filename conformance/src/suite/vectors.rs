//! Committed golden vector sets (`vectors/`, FORMAT.md "Vector sets"): the default suite's
//! cases as `bnconf-golden/1` documents, plus a manifest with the sha256 of every file.
//!
//! [`generate`] builds the set in memory (deterministic: no timestamps, suite order fixed by
//! the seed, parallel work collected in order), [`write`] writes it atomically, and [`verify`]
//! checks a directory: manifest checksums, missing or unlisted files, and — independently of
//! the checksums — every golden value recomputed from the echoed case with the exact reference.

use crate::error::{ConfError, Result};
use crate::formats::case::{parse_case, InputLimits};
use crate::formats::fsafe::read_regular;
use crate::formats::golden;
use crate::par::*;
use crate::suite;
use bnconf_spec::exact::round::{round, FloatFormat};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `format` of a vector-set manifest.
pub const MANIFEST_FORMAT: &str = "bnconf-vectors/1";
/// File name of the manifest in a vector-set directory.
pub const MANIFEST: &str = "manifest.json";
/// Version of the vector generator; bump when the committed bytes change on purpose.
pub const GENERATOR_VERSION: u32 = 1;
/// The suite committed under `vectors/`.
pub const SUITE: &str = "default";
/// Subdirectory owned by another generator (regression vectors); never listed in this
/// manifest; verified only when it holds its own `bnconf-vectors/1` manifest.
pub const REGRESSIONS: &str = "regressions";
/// Subdirectory holding the normalization family's vector set (its own manifest, written by
/// `bnconf vectors --family all`); never listed in this manifest, verified with its own
/// checker (`protocol::family_vectors`).
pub const FAMILY: &str = "family";
/// Rounded formats written next to `exact` in every committed golden file (a case in a half
/// precision also gets its activations' format: [`formats_of`]).
pub const FORMATS: [FloatFormat; 2] = [FloatFormat::F64, FloatFormat::F32];
/// The precisions of the committed set (`bnconf vectors` without `--dtypes`).
pub const DEFAULT_PRECISIONS: [&str; 6] = ["f32", "f64", "f16", "bf16", "f16+f32", "bf16+f32"];

/// The formats of a golden file in precision `p`: [`FORMATS`], then f16 or bf16 when the
/// activations or the parameters are in one.
pub fn formats_of(p: suite::Precision) -> Vec<FloatFormat> {
    let mut f = FORMATS.to_vec();
    for d in [p.act, p.param] {
        if !f.contains(&d) {
            f.push(d);
        }
    }
    f
}

/// The precisions named by `--dtypes` (`f32`, `f64`, `f16`, `bf16`, `f16+f32`, `bf16+f32`,
/// numpy's names too), in the order given, each once.
pub fn parse_precisions(names: &[String]) -> Result<Vec<suite::Precision>> {
    let mut out: Vec<suite::Precision> = Vec::new();
    for n in names {
        let p = suite::parse_precision(n).map_err(|_| {
            ConfError::field(
                "--dtypes",
                format!("unknown precision {n:?} (f32, f64, f16, bf16, f16+f32, bf16+f32)"),
            )
        })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(ConfError::field("--dtypes", "names no precision"));
    }
    Ok(out)
}
/// Largest case (elements of its largest tensor) committed; `None`: every case.
pub const MAX_ELEMS: Option<usize> = None;
/// Most mismatches printed per file.
const MAX_PER_FILE: usize = 8;
/// Largest vector file (or manifest) `verify` reads (the committed ones are under 1 MB).
pub const MAX_VECTOR_FILE_BYTES: u64 = 64 << 20;

/// One file of a vector set: its path relative to the set's directory, and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorFile {
    /// Relative path with `/` separators.
    pub path: String,
    /// Contents.
    pub bytes: Vec<u8>,
}

/// Lower-case hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Pretty-printed JSON with a final newline (the committed files' bytes).
pub fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).expect("serializable");
    s.push('\n');
    s.into_bytes()
}

/// The committed vector set of suite [`SUITE`] at `seed`: one golden file per case in the
/// [`DEFAULT_PRECISIONS`], then `manifest.json` last.
pub fn generate(seed: u64) -> Result<Vec<VectorFile>> {
    let names: Vec<String> = DEFAULT_PRECISIONS.iter().map(|s| s.to_string()).collect();
    generate_in(seed, &parse_precisions(&names)?)
}

/// The vector set of suite [`SUITE`] at `seed` in the precisions given: one golden file per
/// case, then `manifest.json` last.
pub fn generate_in(seed: u64, precisions: &[suite::Precision]) -> Result<Vec<VectorFile>> {
    let s = suite::generate_in(SUITE, precisions, seed, &suite::Filter::default())
        .expect("known suite");
    let mut skipped = Vec::new();
    let cases: Vec<&suite::SuiteCase> = s
        .cases
        .iter()
        .filter(|c| {
            let n = c.shape.iter().product::<usize>();
            let keep = MAX_ELEMS.is_none_or(|m| n <= m);
            if !keep {
                skipped.push(c.id.clone());
            }
            keep
        })
        .collect();
    let mut files: Vec<VectorFile> = cases
        .par_iter()
        .map(|c| -> Result<VectorFile> {
            let (case, formats) = (c.to_case(), formats_of(c.precision()));
            // The fast path where it applies (f32/f64 cases of the ops it covers: the same
            // bytes, tests/fast_cli.rs), the exact path for the rest.
            let fast = match (c.precision().is_mixed(), c.dtype) {
                (false, FloatFormat::F32 | FloatFormat::F64) if crate::fast::covers(c.op) => c
                    .fast_problem()
                    .ok()
                    .and_then(|fp| crate::fast::golden_json_of(&case, &fp, &formats)),
                _ => None,
            };
            let doc = match fast {
                Some(doc) => doc,
                None => golden::golden_json(&golden::compute(case)?, &formats),
            };
            Ok(VectorFile {
                path: format!("{SUITE}/{}.json", c.id),
                bytes: pretty(&doc),
            })
        })
        .collect::<Result<_>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    let subset = match MAX_ELEMS {
        None => json!({"all": true, "note": "every case of the suite"}),
        Some(m) => json!({
            "all": false,
            "max_elems": m,
            "note": "only cases whose shape has at most max_elems elements",
            "skipped": skipped,
        }),
    };
    let names: Vec<&str> = precisions.iter().map(|p| p.static_name()).collect();
    let command = if names == DEFAULT_PRECISIONS {
        "bnconf vectors --out vectors/".to_string()
    } else {
        format!("bnconf vectors --out vectors/ --dtypes {}", names.join(","))
    };
    let mut formats = FORMATS.to_vec();
    for p in precisions {
        for f in formats_of(*p) {
            if !formats.contains(&f) {
                formats.push(f);
            }
        }
    }
    let manifest = json!({
        "format": MANIFEST_FORMAT,
        "suite": SUITE,
        "seed": seed,
        "generator": {
            "tool": "bnconf",
            "version": env!("CARGO_PKG_VERSION"),
            "vectors_version": GENERATOR_VERSION,
            "command": command,
        },
        "dtypes": names,
        "formats": std::iter::once("exact").chain(formats.iter().map(|f| f.name())).collect::<Vec<_>>(),
        "subset": subset,
        "excluded_ill_posed": s.excluded.iter().map(|(id, why)| json!({"id": id, "reason": why})).collect::<Vec<_>>(),
        "count": files.len(),
        "total_bytes": total,
        "files": files.iter().map(|f| json!({"path": f.path, "sha256": sha256_hex(&f.bytes), "bytes": f.bytes.len()})).collect::<Vec<_>>(),
    });
    files.push(VectorFile {
        path: MANIFEST.to_string(),
        bytes: pretty(&manifest),
    });
    Ok(files)
}

/// What [`write`] did.
#[derive(Clone, Debug, Default)]
pub struct WriteSummary {
    /// Files written (manifest included).
    pub files: usize,
    /// Their total size in bytes.
    pub bytes: usize,
    /// Stale `*.json` files removed from the suite's subdirectory.
    pub removed: Vec<String>,
}

/// Write the vector set into `out` (atomically, file by file, manifest last). Stale golden
/// files of the suite's subdirectory are removed; `regressions/` is never touched.
pub fn write(out: &Path, seed: u64, precisions: &[suite::Precision]) -> Result<WriteSummary> {
    write_set(out, &generate_in(seed, precisions)?, &[SUITE])
}

/// Write a generated set (`files`, its manifest last) into `out`: stale `*.json` files of the
/// subdirectories `subdirs` removed, each file written atomically, the manifest last.
pub fn write_set(out: &Path, files: &[VectorFile], subdirs: &[&str]) -> Result<WriteSummary> {
    let keep: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut removed = Vec::new();
    for dir in subdirs {
        let sub = out.join(dir);
        std::fs::create_dir_all(&sub).map_err(|e| ConfError::io(&sub, e))?;
        let rd = std::fs::read_dir(&sub).map_err(|e| ConfError::io(&sub, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| ConfError::io(&sub, e))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let rel = format!("{dir}/{name}");
            if name.ends_with(".json") && !keep.contains(rel.as_str()) {
                std::fs::remove_file(ent.path()).map_err(|e| ConfError::io(&ent.path(), e))?;
                removed.push(rel);
            }
        }
    }
    files.par_iter().try_for_each(|f| {
        if f.path == MANIFEST {
            return Ok(());
        }
        crate::formats::atomic::write_bytes(&out.join(&f.path), &f.bytes)
    })?;
    let m = files.last().expect("manifest");
    crate::formats::atomic::write_bytes(&out.join(&m.path), &m.bytes)?;
    Ok(WriteSummary {
        files: files.len(),
        bytes: files.iter().map(|f| f.bytes.len()).sum(),
        removed,
    })
}

/// Every regular file under `dir` (relative paths, `/`-separated, sorted), skipping the
/// top-level `regressions/` subdirectory.
pub fn list_files(dir: &Path) -> Result<Vec<String>> {
    fn walk(root: &Path, rel: &str, out: &mut Vec<String>) -> Result<()> {
        let here = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        let rd = std::fs::read_dir(&here).map_err(|e| ConfError::io(&here, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| ConfError::io(&here, e))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if rel.is_empty() && (name == REGRESSIONS || name == FAMILY) {
                continue;
            }
            let ft = ent.file_type().map_err(|e| ConfError::io(&ent.path(), e))?;
            if ft.is_dir() {
                walk(root, &r, out)?;
            } else {
                out.push(r);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

/// One difference found by [`verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The file at fault (relative to the verified directory).
    pub file: String,
    /// What differs.
    pub what: String,
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default)]
pub struct VerifyReport {
    /// Files listed in the manifest(s).
    pub files: usize,
    /// Golden files whose values were recomputed.
    pub cases: usize,
    /// Every difference (empty: the set verifies).
    pub mismatches: Vec<Mismatch>,
    /// Notes (e.g. a skipped `regressions/` without a manifest).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// True when nothing differs.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty()
    }
}

fn safe_rel(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Verify the vector set in `dir`. `Err` means the set could not be read at all (no or a
/// malformed manifest: exit 2); differences are returned in the report (exit 1).
pub fn verify(dir: &Path) -> Result<VerifyReport> {
    let mut rep = verify_set(dir, "")?;
    let reg = dir.join(REGRESSIONS);
    if reg.is_dir() {
        if reg.join(MANIFEST).is_file() {
            let r = verify_set(&reg, &format!("{REGRESSIONS}/"))?;
            rep.files += r.files;
            rep.cases += r.cases;
            rep.mismatches.extend(r.mismatches);
            rep.notes.extend(r.notes);
        } else {
            rep.notes.push(format!(
                "{REGRESSIONS}/: no {MANIFEST}, not verified (owned by its own generator)"
            ));
        }
    }
    Ok(rep)
}

fn verify_set(dir: &Path, prefix: &str) -> Result<VerifyReport> {
    verify_set_with(dir, prefix, &check_golden)
}

/// A golden file's checker: every difference of its values from a recomputation.
pub type GoldenCheck = dyn Fn(&[u8], &Path) -> Vec<String> + Sync;

/// Verify the vector set in `dir` (manifest, checksums, unlisted files) with `check` for its
/// golden files; mismatches are named `prefix` + the file's path.
pub fn verify_set_with(dir: &Path, prefix: &str, check: &GoldenCheck) -> Result<VerifyReport> {
    let mpath = dir.join(MANIFEST);
    // Regular files only, size-limited (docs/HOSTILE.md): a FIFO here used to hang `verify`.
    let text = read_regular(&mpath, MAX_VECTOR_FILE_BYTES, "")?;
    let manifest: Value = serde_json::from_slice(&text).map_err(|e| ConfError::Json {
        path: mpath.display().to_string(),
        msg: e.to_string(),
    })?;
    let bad = |msg: String| ConfError::field(format!("{}: {msg}", mpath.display()), "malformed");
    match manifest.get("format").and_then(Value::as_str) {
        Some(MANIFEST_FORMAT) => {}
        other => {
            return Err(bad(format!(
                "format is {other:?}, expected {MANIFEST_FORMAT:?}"
            )))
        }
    }
    let entries = manifest
        .get("files")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("`files` must be an array".into()))?;
    let mut listed: BTreeMap<String, String> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let path = e.get("path").and_then(Value::as_str);
        let sha = e.get("sha256").and_then(Value::as_str);
        let (Some(path), Some(sha)) = (path, sha) else {
            return Err(bad(format!("files[{i}] needs string `path` and `sha256`")));
        };
        if !safe_rel(path) || path == MANIFEST {
            return Err(bad(format!(
                "files[{i}].path {path:?} is not a relative file path"
            )));
        }
        if listed.insert(path.to_string(), sha.to_string()).is_some() {
            return Err(bad(format!("files[{i}].path {path:?} listed twice")));
        }
    }
    let present = list_files(dir)?;
    let mut rep = VerifyReport {
        files: listed.len(),
        ..Default::default()
    };
    for p in &present {
        if p != MANIFEST && !listed.contains_key(p) {
            rep.mismatches.push(Mismatch {
                file: format!("{prefix}{p}"),
                what: format!("not in {MANIFEST}"),
            });
        }
    }
    let per_file: Vec<(bool, Vec<Mismatch>)> = listed
        .par_iter()
        .map(|(p, sha)| {
            let name = format!("{prefix}{p}");
            let mm = |what: String| Mismatch {
                file: name.clone(),
                what,
            };
            let bytes = match read_regular(&dir.join(p), MAX_VECTOR_FILE_BYTES, "") {
                Ok(b) => b,
                Err(e) => {
                    return (
                        false,
                        vec![mm(format!("listed in {MANIFEST} but missing: {e}"))],
                    )
                }
            };
            let mut out = Vec::new();
            let got = sha256_hex(&bytes);
            if got != *sha {
                out.push(mm(format!(
                    "sha256 differs: {MANIFEST} has {sha}, file has {got}"
                )));
            }
            let is_golden = p.ends_with(".json");
            if is_golden {
                out.extend(check(&bytes, &dir.join(p)).into_iter().map(mm));
            }
            (is_golden, out)
        })
        .collect();
    for (g, m) in per_file {
        rep.cases += usize::from(g);
        rep.mismatches.extend(m);
    }
    Ok(rep)
}

/// Recompute one golden document and list every difference (empty: it verifies).
pub fn check_golden(bytes: &[u8], path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return vec![format!("invalid JSON: {e}")],
    };
    if doc.get("format").and_then(Value::as_str) != Some("bnconf-golden/1") {
        out.push(format!(
            "format: expected \"bnconf-golden/1\", found {}",
            doc.get("format").unwrap_or(&Value::Null)
        ));
        return out;
    }
    let Some(case_v) = doc.get("case") else {
        return vec!["case: missing".into()];
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let case = match parse_case(case_v, base, &InputLimits::default()) {
        Ok(c) => c,
        Err(e) => return vec![format!("case: {e}")],
    };
    if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
        if stem != case.id {
            out.push(format!(
                "case.id: {:?} does not match the file name",
                case.id
            ));
        }
    }
    let eps_exact = bnconf_spec::exact::fmt_rational(&case.problem.eps);
    if let Some(e) = case_v.get("eps_exact") {
        if e.as_str() != Some(eps_exact.as_str()) {
            out.push(format!("case.eps_exact: expected {eps_exact:?}, found {e}"));
        }
    }
    // The echo must hold the exact dtype values, written canonically.
    let canon = golden::case_json(&case);
    for &name in case.problem.op.inputs() {
        let (want, got) = (&canon["inputs"][name], &case_v["inputs"][name]);
        if want != got {
            let i = match (want.as_array(), got.as_array()) {
                (Some(a), Some(b)) => (0..a.len().max(b.len()))
                    .find(|&i| a.get(i) != b.get(i))
                    .unwrap_or(0),
                _ => 0,
            };
            out.push(format!(
                "case.inputs.{name}[{i}]: not the canonical dtype value: expected {}, found {}",
                want.get(i).unwrap_or(&Value::Null),
                got.get(i).unwrap_or(got)
            ));
        }
    }
    let g = match golden::compute(case) {
        Ok(g) => g,
        Err(e) => return vec![format!("case: the reference refuses it: {e}")],
    };
    let Some(outs) = doc.get("outputs").and_then(Value::as_object) else {
        out.push("outputs: missing".into());
        return out;
    };
    for k in outs.keys() {
        if !g.case.problem.op.outputs().contains(&k.as_str()) {
            out.push(format!(
                "outputs.{k}: not an output of op `{}`",
                g.case.problem.op.name()
            ));
        }
    }
    for &name in g.case.problem.op.outputs() {
        let Some(o) = outs.get(name).and_then(Value::as_object) else {
            out.push(format!("outputs.{name}: missing"));
            continue;
        };
        let vals = &g.outputs[name];
        let shape = golden::tensor_shape(&g.case, name);
        if o.get("shape") != Some(&json!(shape)) {
            out.push(format!(
                "outputs.{name}.shape: expected {}, found {}",
                json!(shape),
                o.get("shape").unwrap_or(&Value::Null)
            ));
        }
        if !o.contains_key("exact") {
            out.push(format!("outputs.{name}.exact: missing"));
        }
        for (key, arr) in o {
            let fmt = match key.as_str() {
                "exact" => None,
                k => match FloatFormat::from_name(k) {
                    Some(f) => Some(f),
                    None => continue,
                },
            };
            let Some(arr) = arr.as_array() else {
                out.push(format!("outputs.{name}.{key}: must be an array"));
                continue;
            };
            if arr.len() != vals.len() {
                out.push(format!(
                    "outputs.{name}.{key}: expected {} values, found {}",
                    vals.len(),
                    arr.len()
                ));
            }
            let diffs: Vec<(usize, String, String)> = vals
                .par_iter()
                .zip(arr.par_iter())
                .enumerate()
                .filter_map(|(i, (v, found))| {
                    let want = match fmt {
                        None => v.to_string(),
                        Some(f) => round(v, f).to_hex(),
                    };
                    (found.as_str() != Some(want.as_str())).then(|| (i, want, found.to_string()))
                })
                .collect();
            for (i, want, found) in &diffs {
                out.push(format!(
                    "outputs.{name}.{key}[{i}]: expected {want:?}, found {found}"
                ));
            }
        }
    }
    out
}

/// Human-readable verdict of [`verify`]: at most a few lines per file.
pub fn render(rep: &VerifyReport, dir: &Path) -> String {
    let mut s = String::new();
    let mut by_file: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in &rep.mismatches {
        by_file.entry(&m.file).or_default().push(&m.what);
    }
    for (f, ws) in &by_file {
        for w in ws.iter().take(MAX_PER_FILE) {
            s += &format!("MISMATCH {}: {w}\n", dir.join(f).display());
        }
        if ws.len() > MAX_PER_FILE {
            s += &format!(
                "MISMATCH {}: ... and {} more\n",
                dir.join(f).display(),
                ws.len() - MAX_PER_FILE
            );
        }
    }
    for n in &rep.notes {
        s += &format!("note: {n}\n");
    }
    s += &if rep.ok() {
        format!(
            "bnconf verify: {}: ok ({} files, {} golden files recomputed)\n",
            dir.display(),
            rep.files,
            rep.cases
        )
    } else {
        format!(
            "bnconf verify: {}: FAILED ({} differences in {} files; {} files, {} golden files recomputed)\n",
            dir.display(),
            rep.mismatches.len(),
            by_file.len(),
            rep.files,
            rep.cases
        )
    };
    s
}

/// The default directory of `bnconf vectors` / `bnconf verify`.
pub fn default_dir() -> PathBuf {
    PathBuf::from("vectors")
}
