//! The family exports' manifests read against the suite they were made from.

use bnconf::suite::family::{FamilySuite, FamilySuiteCase};
use bnconf::suite::family_select::FamilySelection;
use serde_json::Value;
use std::collections::BTreeMap;

/// The family default suite of every family in precision `prec` (the default seed): what
/// `bnconf export --family all --dtype prec` writes.
pub fn default_suite(prec: &str) -> FamilySuite {
    FamilySelection::from_names::<&str>(
        "all",
        "default",
        prec,
        bnconf::suite::DEFAULT_SEED,
        &[],
        &[],
    )
    .unwrap()
    .generate()
}

/// The suite's cases by id.
pub fn by_id(s: &FamilySuite) -> BTreeMap<&str, &FamilySuiteCase> {
    s.cases.iter().map(|c| (c.id.as_str(), c)).collect()
}

/// The manifest's `cases`, `unsupported` and `excluded`, checked to account for every case of
/// the suite exactly once between them.
pub fn partition<'a>(m: &'a Value, s: &FamilySuite) -> [&'a Vec<Value>; 3] {
    let lists = ["cases", "unsupported", "excluded"].map(|k| m[k].as_array().unwrap());
    assert_eq!(
        lists.iter().map(|l| l.len()).sum::<usize>(),
        s.cases.len() + s.excluded.len(),
        "every case is exported, unsupported or excluded"
    );
    lists
}

/// Run `bnconf export --family all --format FORMAT --dtype PREC --out DIR` (with `env`),
/// check that it succeeds saying `banner`, and return its manifest, checked to be of
/// `manifest_format` and family `all`.
pub fn export(
    format: &str,
    prec: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
    banner: &str,
    manifest_format: &str,
) -> Value {
    let args = [
        "export",
        "--family",
        "all",
        "--format",
        format,
        "--dtype",
        prec,
        "--out",
        dir.to_str().unwrap(),
    ];
    let o = super::bnconf_env(&args, env);
    let text = super::text(&o);
    assert!(o.status.success() && text.contains(banner), "{text}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["format"], manifest_format);
    assert_eq!(m["family"], "all");
    m
}
