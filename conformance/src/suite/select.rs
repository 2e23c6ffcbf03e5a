//! Which cases to run: a suite's name, its precision, the seed and the op/layout filter, parsed
//! once — from names (the CLI's `--suite/--dtype/--ops/--layouts`, the library's
//! `testing::Options`) or from a suite directory's `manifest.json` (`check DIR`) — and turned
//! into the suite's cases. Each caller words its own errors ([`BadName`] says which name did not
//! parse); the order of the checks (dtype, ops, layouts, suite) is the same for all.

use crate::error::{ConfError, Result};
use crate::suite::generate::{suite_levels, Filter, Suite};
use crate::suite::level::{parse_precision, Precision};
use crate::suite::manifest::manifest_json_in;
use crate::suite::shard::{self, Shard};
use bnconf_spec::{Layout, Op};
use serde_json::Value;

/// A selection of a suite's cases: everything `generate` needs, already parsed.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Suite name, one of [`crate::suite::SUITES`] (checked).
    pub suite: String,
    /// The cases' precision.
    pub precision: Precision,
    /// Seed of the generator.
    pub seed: u64,
    /// Only these ops and layouts (all where empty).
    pub filter: Filter,
    /// Only this shard of the cases (`--shard K/N`, or the one a manifest records).
    pub shard: Option<Shard>,
}

/// The name that did not parse, by field (the caller says it in its own words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadName {
    /// Not a precision name (bnconf's or numpy's).
    Dtype(String),
    /// Not an op name.
    Op(String),
    /// Not a layout name.
    Layout(String),
    /// Not a suite name.
    Suite(String),
}

impl Selection {
    /// Parse names: `dtype` as [`parse_precision`] reads it (numpy's names too), then each op,
    /// each layout, then the suite's name. No shard.
    pub fn from_names<S: AsRef<str>>(
        suite: &str,
        dtype: &str,
        seed: u64,
        ops: &[S],
        layouts: &[S],
    ) -> std::result::Result<Selection, BadName> {
        let precision = parse_precision(dtype).map_err(|_| BadName::Dtype(dtype.to_string()))?;
        let mut filter = Filter::default();
        for o in ops {
            let o = o.as_ref();
            filter
                .ops
                .push(Op::from_name(o).ok_or_else(|| BadName::Op(o.to_string()))?);
        }
        for l in layouts {
            let l = l.as_ref();
            filter
                .layouts
                .push(Layout::from_name(l).ok_or_else(|| BadName::Layout(l.to_string()))?);
        }
        if suite_levels(suite).is_none() {
            return Err(BadName::Suite(suite.to_string()));
        }
        Ok(Selection {
            suite: suite.to_string(),
            precision,
            seed,
            filter,
            shard: None,
        })
    }

    /// What a suite directory's `manifest.json` (already parsed) selects: `format`, then the
    /// fields `suite`, `seed`, `dtype` (bnconf's names only), `ops`, `layouts`, the suite's name
    /// checked, and `shard`. Errors name the manifest's field.
    pub fn from_manifest(m: &Value) -> Result<Selection> {
        let field = |k: &str| {
            ConfError::field(
                format!("manifest.json: {k}"),
                "missing or of the wrong type",
            )
        };
        if m.get("format").and_then(Value::as_str) != Some("bnconf-suite/1") {
            return Err(ConfError::field(
                "manifest.json: format",
                "expected \"bnconf-suite/1\"",
            ));
        }
        let name = m
            .get("suite")
            .and_then(Value::as_str)
            .ok_or_else(|| field("suite"))?;
        let seed = m
            .get("seed")
            .and_then(Value::as_u64)
            .ok_or_else(|| field("seed"))?;
        let precision = m
            .get("dtype")
            .and_then(Value::as_str)
            .and_then(Precision::from_name)
            .ok_or_else(|| field("dtype"))?;
        let mut filter = Filter::default();
        for o in m.get("ops").and_then(Value::as_array).into_iter().flatten() {
            filter.ops.push(
                o.as_str()
                    .and_then(Op::from_name)
                    .ok_or_else(|| field("ops"))?,
            );
        }
        for l in m
            .get("layouts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            filter.layouts.push(
                l.as_str()
                    .and_then(Layout::from_name)
                    .ok_or_else(|| field("layouts"))?,
            );
        }
        if suite_levels(name).is_none() {
            return Err(ConfError::field(
                "manifest.json: suite",
                format!("unknown suite {name:?}"),
            ));
        }
        let shard = shard::from_manifest(m)?;
        Ok(Selection {
            suite: name.to_string(),
            precision,
            seed,
            filter,
            shard,
        })
    }

    /// The selected cases: the suite generated in its precision, filtered, then only the
    /// shard's cases (if any).
    pub fn generate(&self) -> Suite {
        self.generate_for(None)
    }

    /// [`Selection::generate`] for judging a directory whose manifest lists the cases
    /// `listed`: the sharpness test runs only on the cases it leaves out
    /// ([`generate_listed`](super::generate::generate_listed)); the same suite for the list
    /// an export of this selection wrote.
    pub fn generate_for(&self, listed: Option<&std::collections::HashSet<&str>>) -> Suite {
        self.generate_as(listed, false)
    }

    /// [`Selection::generate_for`] with the scale suite's cases lean (without their inputs,
    /// made again when judged: [`generate_listed_lean`](super::generate::generate_listed_lean)).
    pub fn generate_lean(&self, listed: Option<&std::collections::HashSet<&str>>) -> Suite {
        self.generate_as(listed, true)
    }

    fn generate_as(&self, listed: Option<&std::collections::HashSet<&str>>, lean: bool) -> Suite {
        let gen = if lean {
            super::generate::generate_listed_lean
        } else {
            super::generate::generate_listed
        };
        let mut s = gen(
            &self.suite,
            &[self.precision],
            self.seed,
            &self.filter,
            listed,
        )
        .expect("suite name checked when the selection was made");
        if let Some(sh) = self.shard {
            sh.apply(&mut s);
        }
        s
    }

    /// The `bnconf-suite/1` manifest of `s`, the suite this selection generated (the shard is
    /// recorded separately, by [`shard::record_in_manifest`]).
    pub fn manifest_json(&self, s: &Suite) -> Value {
        manifest_json_in(s, self.precision, &self.filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_order_and_say_which_failed() {
        let sel = Selection::from_names("default", "float32", 7, &["forward"], &["nchw"]).unwrap();
        assert_eq!(sel.precision.name(), "f32");
        assert_eq!(sel.seed, 7);
        assert_eq!(sel.filter.ops, vec![Op::Forward]);
        assert_eq!(sel.filter.layouts, vec![Layout::Nchw]);
        // The first bad name wins: dtype, then ops, then layouts, then the suite.
        let none: [&str; 0] = [];
        assert_eq!(
            Selection::from_names("nope", "f8", 1, &["nope"], &none).unwrap_err(),
            BadName::Dtype("f8".into())
        );
        assert_eq!(
            Selection::from_names("nope", "f32", 1, &["fwd"], &["nope"]).unwrap_err(),
            BadName::Op("fwd".into())
        );
        assert_eq!(
            Selection::from_names("nope", "f32", 1, &none, &["nhcw"]).unwrap_err(),
            BadName::Layout("nhcw".into())
        );
        assert_eq!(
            Selection::from_names("nope", "f32", 1, &none, &none).unwrap_err(),
            BadName::Suite("nope".into())
        );
    }

    #[test]
    fn a_manifest_selects_what_its_selection_wrote() {
        let mut sel =
            Selection::from_names("default", "bf16+f32", 11, &["eval"], &["rows"]).unwrap();
        sel.shard = Some("2/3".parse().unwrap());
        let s = sel.generate();
        assert!(!s.cases.is_empty());
        let mut m = sel.manifest_json(&s);
        m.as_object_mut()
            .unwrap()
            .insert("shard".into(), Value::String("2/3".into()));
        let back = Selection::from_manifest(&m).unwrap();
        assert_eq!(back.generate().cases.len(), s.cases.len());
        assert_eq!(back.precision, sel.precision);
        assert_eq!(back.shard, sel.shard);
        assert_eq!((back.suite.as_str(), back.seed), ("default", 11));
        // Bad fields are named.
        m.as_object_mut()
            .unwrap()
            .insert("suite".into(), Value::String("nope".into()));
        let e = Selection::from_manifest(&m).unwrap_err().to_string();
        assert!(e.contains("manifest.json: suite"), "{e}");
    }
}
