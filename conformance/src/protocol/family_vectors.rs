//! The normalization family's committed vector set (`vectors/family/`): every case of the
//! family `default` suites (layer_norm, rms_norm, group_norm; seed 20261129; the six
//! precisions) as the `bnconf-golden/1` document `bnconf golden` writes for its case file —
//! the inputs echoed as hex floats, every output (the optional statistics included) as
//! `exact` strings (`dgamma`: a sum of roots) and the correctly rounded hex strings of f64,
//! f32 and the case's half type — and a `bnconf-vectors/1` manifest with `"family": "all"`
//! and the sha256 of every file. [`generate`] is deterministic (suite order, no timestamps),
//! [`write`] writes atomically (manifest last), [`verify`] recomputes every file from its
//! echoed case with the exact reference.

use super::family::golden_doc_of;
use crate::error::{ConfError, Result};
use crate::formats::case::InputLimits;
use crate::formats::family_case::{parse_family_case, FamilyCaseFile, FamilyHeader};
use crate::par::*;
use crate::suite::family::{family_suite, FamilySuiteCase};
use crate::suite::vectors::{
    formats_of, pretty, sha256_hex, verify_set_with, write_set, VectorFile, VerifyReport,
    WriteSummary, GENERATOR_VERSION, MANIFEST, MANIFEST_FORMAT,
};
use crate::suite::Precision;
use bnconf_impl::family::{Family, Named};
use bnconf_spec::exact::round::f64_to_rational;
use bnconf_spec::exact::QSqrt;
use serde_json::{json, Map, Value};
use std::path::Path;

/// Most mismatches reported per file.
const MAX_PER_FILE: usize = 8;

/// The case file of a suite case: its fields, `eps` exactly the f64's, `level` and `class`
/// kept in the echo, the inputs exact.
fn case_file(sc: &FamilySuiteCase) -> Result<FamilyCaseFile> {
    let c = &sc.case;
    let mut extra = Map::new();
    extra.insert("level".into(), json!(sc.level.name()));
    extra.insert("class".into(), json!(sc.class));
    let eps = f64_to_rational(c.eps).ok_or_else(|| ConfError::field("eps", "not finite"))?;
    let inputs = c
        .inputs
        .iter()
        .map(|(n, v)| {
            let q: Option<Vec<QSqrt>> = v
                .iter()
                .map(|&e| f64_to_rational(e).map(QSqrt::rational))
                .collect();
            q.map(|q| (n.clone(), q))
                .ok_or_else(|| ConfError::field(format!("inputs.{n}"), "not finite"))
        })
        .collect::<Result<_>>()?;
    Ok(FamilyCaseFile {
        header: FamilyHeader {
            id: sc.id.clone(),
            case: c.clone(),
            eps,
            extra,
        },
        inputs,
    })
}

/// The precision of a suite case.
fn precision_of(sc: &FamilySuiteCase) -> Precision {
    Precision::from_name(sc.precision).expect("a suite's precision")
}

/// The family's vector set at `seed` in `precisions`: one golden file per case of each
/// family's `default` suite (`<family>/<case id>.json`, in suite order), then the manifest.
pub fn generate(seed: u64, precisions: &[Precision]) -> Result<Vec<VectorFile>> {
    let mut cases = Vec::new();
    let mut excluded = Vec::new();
    for &f in Family::ALL {
        let s = family_suite(f, precisions, seed);
        cases.extend(s.cases.into_iter().map(|c| (f, c)));
        excluded.extend(s.excluded);
    }
    let mut files: Vec<VectorFile> = cases
        .par_iter()
        .map(|(f, sc)| -> Result<VectorFile> {
            let doc = golden_doc_of(&case_file(sc)?, &formats_of(precision_of(sc)))?;
            Ok(VectorFile {
                path: format!("{}/{}.json", f.name(), sc.id),
                bytes: pretty(&doc),
            })
        })
        .collect::<Result<_>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let names: Vec<&str> = precisions.iter().map(|p| p.static_name()).collect();
    let mut formats: Vec<&str> = vec!["exact"];
    for p in precisions {
        for f in formats_of(*p) {
            if !formats.contains(&f.name()) {
                formats.push(f.name());
            }
        }
    }
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    let manifest = json!({
        "format": MANIFEST_FORMAT,
        "family": "all",
        "suite": "default",
        "seed": seed,
        "generator": {
            "tool": "bnconf",
            "version": env!("CARGO_PKG_VERSION"),
            "vectors_version": GENERATOR_VERSION,
            "command": format!("bnconf vectors --family all --out vectors/family --dtypes {}", names.join(",")),
        },
        "dtypes": names,
        "formats": formats,
        "subset": {"all": true, "note": "every case of the family default suites"},
        "excluded": excluded.iter().map(|(id, why)| json!({"id": id, "reason": why})).collect::<Vec<_>>(),
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

/// Write the family's vector set into `out` (each file atomically, the manifest last; stale
/// `<family>/*.json` files removed).
pub fn write(out: &Path, seed: u64, precisions: &[Precision]) -> Result<WriteSummary> {
    let subdirs: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
    write_set(out, &generate(seed, precisions)?, &subdirs)
}

/// Whether `dir` holds a family vector set (a manifest with `"family"`).
pub fn is_family_set(dir: &Path) -> bool {
    crate::formats::fsafe::read_regular(&dir.join(MANIFEST), 1 << 26, "")
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .is_some_and(|m| m.get("family").is_some())
}

/// Recompute one family golden document from its echoed case and list every difference
/// (empty: it verifies): the file name against `case.id`, the echo, and every output's
/// `exact` and hex strings.
pub fn check_family_golden(bytes: &[u8], path: &Path) -> Vec<String> {
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return vec![format!("invalid JSON: {e}")],
    };
    if doc.get("format").and_then(Value::as_str) != Some("bnconf-golden/1") {
        return vec!["format: expected \"bnconf-golden/1\"".into()];
    }
    let Some(case_v) = doc.get("case") else {
        return vec!["case: missing".into()];
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let f = match parse_family_case(case_v, base, &InputLimits::default()) {
        Ok(f) => f,
        Err(e) => return vec![format!("case: {e}")],
    };
    let mut out = Vec::new();
    if path.file_stem().and_then(|s| s.to_str()) != Some(f.header.id.as_str()) {
        out.push(format!(
            "case.id: {:?} does not match the file name",
            f.header.id
        ));
    }
    let formats: Vec<_> = crate::suite::vectors::FORMATS
        .into_iter()
        .chain(
            [f.header.case.dtype, f.header.case.param_dtype]
                .into_iter()
                .map(crate::suite::family::format_of),
        )
        .fold(Vec::new(), |mut v, x| {
            if !v.contains(&x) {
                v.push(x);
            }
            v
        });
    let fresh = match golden_doc_of(&f, &formats) {
        Ok(d) => d,
        Err(e) => return vec![format!("case: the reference refuses it: {e}")],
    };
    if fresh["case"] != doc["case"] {
        out.push("case: the echo differs from its canonical spelling".into());
    }
    let (want, got) = (&fresh["outputs"], &doc["outputs"]);
    let names = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    if names(want) != names(got) {
        out.push(format!(
            "outputs: expected {:?}, found {:?}",
            names(want),
            names(got)
        ));
        return out;
    }
    'outer: for (name, w) in want.as_object().into_iter().flatten() {
        for (fmt, wv) in w.as_object().into_iter().flatten() {
            let gv = &got[name][fmt];
            match (wv.as_array(), gv.as_array()) {
                (Some(a), Some(b)) if a.len() == b.len() => {
                    for (i, (x, y)) in a.iter().zip(b).enumerate() {
                        if x != y {
                            out.push(format!(
                                "outputs.{name}.{fmt}[{i}]: expected {x}, found {y}"
                            ));
                            if out.len() >= MAX_PER_FILE {
                                break 'outer;
                            }
                        }
                    }
                }
                _ if wv != gv => {
                    out.push(format!("outputs.{name}.{fmt}: expected {wv}, found {gv}"))
                }
                _ => {}
            }
        }
    }
    out
}

/// Verify the family vector set in `dir`: the manifest's checksums, missing or unlisted
/// files, and every golden file recomputed ([`check_family_golden`]). `Err`: no or a
/// malformed manifest.
pub fn verify(dir: &Path, prefix: &str) -> Result<VerifyReport> {
    verify_set_with(dir, prefix, &check_family_golden)
}
