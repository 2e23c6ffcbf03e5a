//! Which family cases run (`--family`, `--suite`, `--dtype`, `--seed`, `--ops`, `--layouts`),
//! parsed once for `export`, `check` and `check --exec`, and read back from an exported
//! directory's manifest (`"family"` marks a family export). The family's counterpart of
//! [`super::select::Selection`]; the cases are [`super::family::family_suite`]'s.

use super::family::{family_suite_named, FamilySuite, FAMILY_SUITES};
use super::level::{parse_precision, Precision};
use super::shard::Shard;
use crate::error::{ConfError, Result};
use bnconf_impl::family::{Family, FamilyLayout, FamilyOp, Named};
use serde_json::{json, Value};

/// The names `--family` takes besides `batch_norm`.
pub const FAMILY_CHOICES: &str = "batch_norm, layer_norm, rms_norm, group_norm, all";

/// A selection of family cases.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilySelection {
    /// `layer_norm`, `rms_norm`, `group_norm` or `all`.
    pub family: String,
    /// The families it covers, in order.
    pub families: Vec<Family>,
    /// `default`, `extreme` or `scale` ([`FAMILY_SUITES`]).
    pub suite: String,
    pub precision: Precision,
    pub seed: u64,
    /// Only these ops (all if empty).
    pub ops: Vec<FamilyOp>,
    /// Only these layouts (all if empty).
    pub layouts: Vec<FamilyLayout>,
    /// Only this shard of the cases (`--shard K/N`, as batch_norm's: [`Shard`]).
    pub shard: Option<Shard>,
}

/// The families `--family NAME` names (`all`: every one); `None` for `batch_norm`. An unknown
/// name is an error naming `--family`.
pub fn parse_family(name: &str) -> Result<Option<Vec<Family>>> {
    match name {
        "batch_norm" => Ok(None),
        "all" => Ok(Some(Family::ALL.to_vec())),
        other => Family::from_name(other)
            .map(|f| Some(vec![f]))
            .ok_or_else(|| {
                ConfError::field(
                    "--family",
                    format!("unknown family {other:?} (one of {FAMILY_CHOICES})"),
                )
            }),
    }
}

impl FamilySelection {
    /// The selection the flags make; errors name the flag (`--family`, `--suite`, `--dtype`,
    /// `--ops`, `--layouts`). `family` must not be `batch_norm`.
    pub fn from_names<S: AsRef<str>>(
        family: &str,
        suite: &str,
        dtype: &str,
        seed: u64,
        ops: &[S],
        layouts: &[S],
    ) -> Result<FamilySelection> {
        let families = parse_family(family)?
            .ok_or_else(|| ConfError::field("--family", "batch_norm is not a family selection"))?;
        if !FAMILY_SUITES.contains(&suite) {
            return Err(ConfError::field(
                "--suite",
                format!(
                    "{suite:?} is not a suite of the normalization family (--family {family}): one of {}",
                    FAMILY_SUITES.join(", ")
                ),
            ));
        }
        let precision = parse_precision(dtype).map_err(|_| {
            ConfError::field(
                "--dtype",
                format!("{dtype:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32"),
            )
        })?;
        let mut sel = FamilySelection {
            family: family.to_string(),
            families,
            suite: suite.to_string(),
            precision,
            seed,
            ops: vec![],
            layouts: vec![],
            shard: None,
        };
        for o in ops {
            let o = o.as_ref();
            let op = FamilyOp::from_name(o)
                .filter(|op| sel.families.contains(&op.family()))
                .ok_or_else(|| {
                    ConfError::field(
                        "--ops",
                        format!(
                            "{o:?} is not an op of --family {family} ({})",
                            sel.op_names()
                        ),
                    )
                })?;
            sel.ops.push(op);
        }
        for l in layouts {
            let l = l.as_ref();
            sel.layouts.push(FamilyLayout::from_name(l).ok_or_else(|| {
                let all: Vec<&str> = FamilyLayout::ALL.iter().map(|l| l.name()).collect();
                ConfError::field(
                    "--layouts",
                    format!("unknown family layout {l:?} ({})", all.join(", ")),
                )
            })?);
        }
        Ok(sel)
    }

    fn op_names(&self) -> String {
        let ops: Vec<&str> = self
            .families
            .iter()
            .flat_map(|f| f.ops().iter().map(|o| o.name()))
            .collect();
        ops.join(", ")
    }

    /// Whether a case id (`<op>.<layout>.…`) is selected by the op and layout filters.
    pub fn selects(&self, id: &str) -> bool {
        let mut parts = id.split('.');
        let (op, layout) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        (self.ops.is_empty() || self.ops.iter().any(|o| o.name() == op))
            && (self.layouts.is_empty() || self.layouts.iter().any(|l| l.name() == layout))
    }

    /// The selected cases (and exclusions) of every family selected, in family order.
    pub fn generate(&self) -> FamilySuite {
        let mut out = FamilySuite::default();
        for &f in &self.families {
            let s = family_suite_named(&self.suite, f, &[self.precision], self.seed)
                .expect("a checked suite name");
            out.cases
                .extend(s.cases.into_iter().filter(|c| self.selects(&c.id)));
            out.excluded
                .extend(s.excluded.into_iter().filter(|(id, _)| self.selects(id)));
        }
        if let Some(sh) = self.shard {
            sh.apply_family(&mut out);
        }
        out
    }

    /// The export's `manifest.json` (`bnconf-suite/1` with `"family"`).
    pub fn manifest_json(&self, s: &FamilySuite) -> Value {
        let mut m = json!({
            "format": "bnconf-suite/1",
            "suite": self.suite,
            "family": self.family,
            "seed": self.seed,
            "dtype": self.precision.name(),
            "param_dtype": self.precision.param.name(),
            "ops": self.ops.iter().map(|o| o.name()).collect::<Vec<_>>(),
            "layouts": self.layouts.iter().map(|l| l.name()).collect::<Vec<_>>(),
            "cases": s.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            "excluded": s.excluded.iter().map(|(id, why)| json!({"id": id, "reason": why})).collect::<Vec<_>>(),
            "generator": {"tool": "bnconf", "version": env!("CARGO_PKG_VERSION")},
        });
        if let Some(sh) = self.shard {
            m["shard"] = json!(sh.to_string());
        }
        m
    }

    /// What a family export's manifest selects; `None` for a manifest without `"family"`
    /// (batch_norm's). Errors name the manifest's field.
    pub fn from_manifest(m: &Value) -> Result<Option<FamilySelection>> {
        let Some(family) = m.get("family") else {
            return Ok(None);
        };
        let field = |k: &str| {
            ConfError::field(
                format!("manifest.json: {k}"),
                "missing or of the wrong type",
            )
        };
        if m.get("format").and_then(Value::as_str) != Some("bnconf-suite/1") {
            return Err(field("format"));
        }
        let family = family.as_str().ok_or_else(|| field("family"))?;
        let suite = m
            .get("suite")
            .and_then(Value::as_str)
            .ok_or_else(|| field("suite"))?;
        let seed = m
            .get("seed")
            .and_then(Value::as_u64)
            .ok_or_else(|| field("seed"))?;
        let dtype = m
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| field("dtype"))?;
        let names = |k: &str| -> Result<Vec<String>> {
            match m.get(k) {
                None => Ok(vec![]),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string).ok_or_else(|| field(k)))
                    .collect(),
                Some(_) => Err(field(k)),
            }
        };
        let (ops, layouts) = (names("ops")?, names("layouts")?);
        let rename = |e: ConfError| match e {
            ConfError::Field { field, msg } => ConfError::field(
                format!(
                    "manifest.json: {}",
                    match field.as_str() {
                        "--family" => "family",
                        "--suite" => "suite",
                        "--dtype" => "dtype",
                        "--ops" => "ops",
                        "--layouts" => "layouts",
                        other => other,
                    }
                ),
                msg,
            ),
            other => other,
        };
        if family == "batch_norm" {
            return Err(ConfError::field(
                "manifest.json: family",
                "batch_norm's exports have no \"family\" field",
            ));
        }
        let mut sel = FamilySelection::from_names(family, suite, dtype, seed, &ops, &layouts)
            .map_err(rename)?;
        sel.shard = super::shard::from_manifest(m)?;
        Ok(Some(sel))
    }
}
