//! In-memory judging of the normalization family (layer_norm, rms_norm, group_norm): a
//! family suite's cases with their inputs as the bytes `bnconf export --family F` writes, and
//! a kernel's outputs judged from bytes in memory — no directory, no process. The same
//! verdicts, ratios, report document and printed report as `bnconf check DIR` on a family
//! export (the Python package's `bnconf.judge` / `bnconf.check(..., family=...)` and its
//! hypothesis strategy bind this), the optional statistics (`mean`, `rstd`) judged when given.
//!
//! ```
//! use bnconf::testing::in_memory::{Array, Given};
//! use bnconf::testing::in_memory_family::{family_selection, InMemoryFamilySuite};
//! use std::collections::BTreeMap;
//!
//! let sel = family_selection("layer_norm", "default", "f64", None, &["layer_norm".into()], &[]).unwrap();
//! let mut suite = InMemoryFamilySuite::new(sel).unwrap();
//! // An all-zero `y` (the statistics left out): not conforming.
//! let c = suite.case(0).clone();
//! let n = c.case.input("x").len();
//! let zeros = Array { descr: "<f8".into(), shape: c.case.shape.clone(), bytes: vec![0; 8 * n] };
//! let r = suite.judge(0, &Given::Outputs(BTreeMap::from([("y".to_string(), zeros)]))).unwrap();
//! assert_eq!(r.verdict.name(), "FAIL");
//! // A missing required output is malformed, named as `check DIR` names the file.
//! let r = suite.judge(1, &Given::Outputs(BTreeMap::new())).unwrap();
//! assert!(matches!(&r.verdict, bnconf::judge::check::Verdict::Malformed(w) if w.ends_with("/out/y.npy: missing")));
//! ```

use super::in_memory::{Array, Given, InMemoryReport};
use crate::error::{ConfError, Result};
use crate::formats::family_case::{family_case_json, family_shape, format_of};
use crate::judge::check::summarize;
use crate::judge::family::{
    diagnose_family, prepare_family, prepare_family_all, FailingCase, FamilyPrepared,
};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::protocol;
use crate::protocol::family::{judge_one, FamilyWritten};
use crate::report::{self, Context};
use crate::suite::family::{family_draw, FamilySuite, FamilySuiteCase};
use crate::suite::family_select::FamilySelection;
use crate::suite::{self, parse_precision};
use bnconf_impl::family::{Family, FamilyOp, Named};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The family selection of these names (`family`: `layer_norm`, `rms_norm`, `group_norm` or
/// `all`; `seed`: the suites' default when `None`); errors name the flag as `bnconf export
/// --family` does (`--family`, `--suite`, `--dtype`, `--ops`, `--layouts`).
pub fn family_selection(
    family: &str,
    suite_name: &str,
    dtype: &str,
    seed: Option<u64>,
    ops: &[String],
    layouts: &[String],
) -> Result<FamilySelection> {
    FamilySelection::from_names(
        family,
        suite_name,
        dtype,
        seed.unwrap_or(suite::DEFAULT_SEED),
        ops,
        layouts,
    )
}

/// `case.json` of a family suite case, as `bnconf export --family` writes it.
pub fn case_json(c: &FamilySuiteCase) -> Value {
    family_case_json(&c.id, &c.case, c.level.name(), &c.class)
}

/// The inputs of a family case as `bnconf export --family` writes them: name, shape and data
/// of each `<name>.npy` (`x`, `dy` in the case dtype, `gamma`, `beta` in the parameters').
pub fn inputs_of(c: &FamilySuiteCase) -> Vec<(String, Array)> {
    c.case
        .inputs
        .iter()
        .map(|(name, v)| {
            let data = protocol::npy_of(format_of(c.case.dtype_of(name)), v);
            (name.clone(), Array::of(family_shape(&c.case, name), &data))
        })
        .collect()
}

/// What `check DIR` would read had the kernel written `given` into the family case's `out/`:
/// the same checks (shape, dtype), the same messages, the optional statistics absent when not
/// given.
pub fn written(c: &FamilySuiteCase, given: &Given) -> FamilyWritten {
    let trimmed = |s: &str, empty: &str| {
        let t = s.trim();
        if t.is_empty() {
            empty.to_string()
        } else {
            t.to_string()
        }
    };
    let outs = match given {
        Given::Error(msg) => {
            return FamilyWritten::Malformed(format!(
                "kernel error: {}",
                trimmed(msg, "the kernel failed (out/error is empty)")
            ))
        }
        Given::Unsupported(why) => {
            return FamilyWritten::Unsupported(trimmed(why, "kernel reported unsupported"))
        }
        Given::Outputs(outs) => outs,
    };
    let case = &c.case;
    let optional = case.op.optional_outputs();
    let (mut got, mut not_given) = (BTreeMap::new(), vec![]);
    for name in case.op.outputs(case.affine) {
        let a = outs.get(name);
        if a.is_none() && optional.contains(&name) {
            not_given.push(name);
            continue;
        }
        let rel = format!("{}/out/{name}.npy", c.id);
        match decode(case, name, a) {
            Ok(v) => {
                got.insert(name.to_string(), v);
            }
            Err(why) => return FamilyWritten::Malformed(format!("{rel}: {why}")),
        }
    }
    FamilyWritten::Outputs(got, not_given)
}

/// Output `name` of a family case as values of its dtype, checked as `check DIR` checks the
/// file (`protocol::read_output`).
fn decode(
    case: &bnconf_impl::family::FamilyCase,
    name: &str,
    a: Option<&Array>,
) -> std::result::Result<Vec<f64>, String> {
    let a = a.ok_or_else(|| "missing".to_string())?;
    let data = a.data()?;
    let want = family_shape(case, name);
    if a.shape != want {
        return Err(format!("shape {:?}, expected {want:?}", a.shape));
    }
    protocol::values_of(format_of(case.dtype_of(name)), &data)
}

/// One judged case: its result, the optional outputs not given, and (failing cases) what the
/// diagnosis needs.
struct Judged {
    result: CaseResult,
    not_given: Vec<&'static str>,
    failing: Option<FailingCase>,
}

/// Cases prepared together (in parallel) when the first of them is judged, as `check DIR`
/// prepares a chunk at a time (`protocol::family`'s `JUDGE_CHUNK_CASES`).
const PREPARE_CHUNK_CASES: usize = 64;

/// A family selection's cases in memory and the results judged so far. The cases are
/// prepared (their goldens and budgets computed, in parallel) a chunk at a time, when the
/// first of the chunk is judged, and each preparation dropped once its case is judged, unless
/// the case fails (the diagnosis replays the known-bad kernels on it).
pub struct InMemoryFamilySuite {
    /// The selection.
    pub selection: FamilySelection,
    /// Its cases (and the ones excluded).
    pub suite: FamilySuite,
    prepared: Vec<Option<FamilyPrepared>>,
    results: Vec<Option<Judged>>,
}

fn prepare(c: &FamilySuiteCase) -> Result<FamilyPrepared> {
    prepare_family(c).map_err(|e| ConfError::field("inputs", format!("{}: {e}", c.id)))
}

fn judged(p: FamilyPrepared, w: FamilyWritten) -> Judged {
    let (result, not_given, got) = judge_one(&p, w);
    let failing = match (&result.verdict, got) {
        (Verdict::Fail, Some(got)) => Some((p, got, result.worst_ratio)),
        _ => None,
    };
    Judged {
        result,
        not_given,
        failing,
    }
}

impl InMemoryFamilySuite {
    /// Generate the cases `sel` selects (its shard too, if any).
    pub fn new(sel: FamilySelection) -> Result<InMemoryFamilySuite> {
        let suite = sel.generate();
        let n = suite.cases.len();
        Ok(InMemoryFamilySuite {
            selection: sel,
            suite,
            prepared: (0..n).map(|_| None).collect(),
            results: (0..n).map(|_| None).collect(),
        })
    }

    /// Number of cases.
    pub fn len(&self) -> usize {
        self.suite.cases.len()
    }

    /// Whether the selection has no case.
    pub fn is_empty(&self) -> bool {
        self.suite.cases.is_empty()
    }

    /// Case `i`, in suite order. Panics if out of range.
    pub fn case(&self, i: usize) -> &FamilySuiteCase {
        &self.suite.cases[i]
    }

    /// Judge what the kernel gave for case `i` (replacing an earlier verdict on it). Errors
    /// only when the exact reference fails on the case (as `check DIR` fails).
    pub fn judge(&mut self, i: usize, given: &Given) -> Result<&CaseResult> {
        let p = match self.prepared[i].take() {
            Some(p) => p,
            None if self.results[i].is_none() => {
                // this case and the next ones not judged yet, in parallel
                let end = (i..self.len())
                    .take(PREPARE_CHUNK_CASES)
                    .take_while(|&k| self.results[k].is_none() && self.prepared[k].is_none())
                    .last()
                    .map_or(i + 1, |k| k + 1);
                let cases = &self.suite.cases[i..end];
                let ps = prepare_family_all(cases)
                    .map_err(|e| ConfError::field("inputs", format!("{}..: {e}", cases[0].id)))?;
                for (k, p) in (i..end).zip(ps) {
                    self.prepared[k] = Some(p);
                }
                self.prepared[i].take().expect("prepared above")
            }
            None => prepare(&self.suite.cases[i])?, // judged again
        };
        let j = judged(p, written(&self.suite.cases[i], given));
        Ok(&self.results[i].insert(j).result)
    }

    /// The report of `bnconf check DIR --report FILE.json` on a family export had the kernel
    /// written what was given: the `--report` document (with `"family"` and each case's
    /// `"not_given"`), the printed report (the family table, the check report, the optional
    /// outputs not given, the summary) and its exit status (0 conforming). A case not judged
    /// counts as unsupported ("not run").
    pub fn report(&self, require_all: bool, max_details: usize) -> Result<InMemoryReport> {
        let mut results = Vec::with_capacity(self.len());
        let mut not_given: Vec<(String, Vec<&'static str>)> = Vec::new();
        let mut failing: Vec<FailingCase> = Vec::new();
        for (c, j) in self.suite.cases.iter().zip(&self.results) {
            match j {
                Some(j) => {
                    if !j.not_given.is_empty() {
                        not_given.push((j.result.id.clone(), j.not_given.clone()));
                    }
                    if let Some(f) = &j.failing {
                        failing.push(f.clone());
                    }
                    results.push(j.result.clone());
                }
                None => results.push(prepare(c)?.unsupported("not run")),
            }
        }
        let diag = diagnose_family(&failing);
        let sel = &self.selection;
        let ctx = Context {
            suite: &format!("family {}", sel.family),
            dtype: sel.precision.static_name(),
            results: &results,
            cases: &[],
            diagnosis: Some(&diag),
            gate: None,
            shard: sel.shard,
            harness_failure: None,
            refill: None,
        };
        Ok(finish(
            &ctx,
            &sel.family,
            &report::family::family_table(sel, &self.suite, &results),
            &not_given,
            require_all,
            max_details,
        ))
    }
}

/// The reports `bnconf check` (cli/check_family.rs) writes and prints for judged family cases,
/// without an expectations gate: `head` printed first.
fn finish(
    ctx: &Context,
    family: &str,
    head: &str,
    not_given: &[(String, Vec<&'static str>)],
    require_all: bool,
    max_details: usize,
) -> InMemoryReport {
    let text = report::family::family_text(ctx, head, not_given, max_details);
    let doc = report::family::family_json(ctx, family, not_given);
    let sm = summarize(ctx.results);
    let ok = sm.failed == 0 && !(require_all && sm.unsupported > 0) && sm.passed > 0;
    InMemoryReport {
        json: doc,
        text,
        ok,
    }
}

/// Judge what a kernel gave for one family case (prepared here): the case's result and its
/// record as in a `--report` document (with `"not_given"`).
pub fn judge_case(c: &FamilySuiteCase, given: &Given) -> Result<(CaseResult, Value)> {
    let j = judged(prepare(c)?, written(c, given));
    let failing: Vec<FailingCase> = j.failing.into_iter().collect();
    let diag = diagnose_family(&failing);
    let results = std::slice::from_ref(&j.result);
    let mut ctx = Context::new("", "", results, &[]);
    ctx.diagnosis = Some(&diag);
    let mut v = report::case_json(&ctx, &j.result);
    v["not_given"] = json!(j.not_given);
    Ok((j.result, v))
}

fn op_of(op: &str) -> Result<FamilyOp> {
    FamilyOp::from_name(op).ok_or_else(|| {
        let all: Vec<&str> = Family::ALL
            .iter()
            .flat_map(|f| f.ops().iter().map(|o| o.name()))
            .collect();
        ConfError::field(
            "ops",
            format!("unknown family op {op:?} ({})", all.join(", ")),
        )
    })
}

fn precision_of(dtype: &str) -> Result<suite::Precision> {
    parse_precision(dtype).map_err(|_| {
        ConfError::field(
            "dtype",
            format!("{dtype:?}: one of f32, f64, f16, bf16, f16+f32, bf16+f32"),
        )
    })
}

/// Most classes a family has (the class index of [`draw_family_case`] is taken modulo the
/// number of classes; [`family_classes`] stops at the first repeat).
const MAX_CLASSES: usize = 256;

/// The data classes of the `default` family suite that [`draw_family_case`] draws for `op`
/// in `dtype`: `(class index, class name, layout)`, in the suite's order (simplest first:
/// well-scaled data before the cancellation sweep and the other adversarial classes). A class
/// the op never draws (backward-only data for a forward op) is left out; so is one ill-posed
/// at every one of the first 8 seeds.
pub fn family_classes(op: &str, dtype: &str) -> Result<Vec<(usize, String, String)>> {
    let (op, p) = (op_of(op)?, precision_of(dtype)?);
    let mut out: Vec<(usize, String, String)> = Vec::new();
    for i in 0..MAX_CLASSES {
        let Some(c) = (0..8).find_map(|seed| family_draw(op, p, i, seed)) else {
            continue;
        };
        if out.iter().any(|(_, n, _)| *n == c.class) {
            break; // the index wrapped round
        }
        out.push((i, c.class, c.case.layout.name().to_string()));
    }
    Ok(out)
}

/// One family case drawn as the `default` family suite's class `class` (an index of
/// [`family_classes`]) of `op` in `dtype` draws it, its data from `seed` (shape, groups,
/// normalized_ndim, affine, convention and data as the class draws them); `Ok(None)` when the
/// class is not drawn for the op or the case is ill-posed in its dtype at this seed. Errors
/// name the field (`ops`, `dtype`).
pub fn draw_family_case(
    op: &str,
    dtype: &str,
    class: usize,
    seed: u64,
) -> Result<Option<FamilySuiteCase>> {
    Ok(family_draw(op_of(op)?, precision_of(dtype)?, class, seed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::npy::read_npy_any;
    use bnconf_impl::family::family_kernel_by_name;

    fn sel(family: &str, dtype: &str) -> FamilySelection {
        family_selection(family, "default", dtype, None, &[], &[]).unwrap()
    }

    /// Inputs in memory are the bytes `protocol::family::export` writes; case.json the same.
    #[test]
    fn inputs_are_the_exported_bytes() {
        for dtype in ["f32", "bf16+f32"] {
            let s = sel("all", dtype);
            let suite = s.generate();
            let dir = std::env::temp_dir().join(format!(
                "bnconf-in-memory-family-{}-{dtype}",
                std::process::id()
            ));
            protocol::family::export(&s, &suite, &dir).unwrap();
            for c in suite.cases.iter().step_by(7) {
                let on_disk: Value = serde_json::from_slice(
                    &std::fs::read(dir.join(&c.id).join("case.json")).unwrap(),
                )
                .unwrap();
                assert_eq!(case_json(c), on_disk, "{}", c.id);
                for (name, a) in inputs_of(c) {
                    let path = dir.join(&c.id).join(format!("{name}.npy"));
                    let file = std::fs::read(&path).unwrap();
                    assert!(file.ends_with(&a.bytes), "{}/{name}", c.id);
                    let (shape, data) = read_npy_any(&path, 1 << 20).unwrap();
                    assert_eq!(shape, a.shape, "{}/{name}", c.id);
                    assert_eq!(a.data().unwrap(), data, "{}/{name}", c.id);
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A built-in family kernel's outputs judged in memory and through the directory agree,
    /// verdict for verdict and ratio for ratio; a known-bad one fails.
    #[test]
    fn same_verdicts_as_the_directory() {
        let s = family_selection("all", "default", "f32", None, &[], &[]).unwrap();
        let suite = s.generate();
        let dir = std::env::temp_dir().join(format!(
            "bnconf-in-memory-family-dir-{}",
            std::process::id()
        ));
        protocol::family::export(&s, &suite, &dir).unwrap();
        for name in ["ln-twopass", "bad-ln-onepass"] {
            let k = family_kernel_by_name(name).unwrap();
            protocol::family::run_kernel_dir(k.as_ref(), &dir).unwrap();
            let on_disk = protocol::family::judge_dir(&dir, &suite, false).unwrap();
            let mut mem = InMemoryFamilySuite::new(s.clone()).unwrap();
            let mut failed = 0;
            for i in 0..mem.len() {
                let c = mem.case(i).clone();
                let given = match k.run(&c.case) {
                    Ok(o) => Given::Outputs(
                        o.iter()
                            .map(|(n, v)| {
                                let f = format_of(c.case.dtype_of(n));
                                let a =
                                    Array::of(family_shape(&c.case, n), &protocol::npy_of(f, v));
                                (n.clone(), a)
                            })
                            .collect(),
                    ),
                    Err(bnconf_impl::Unsupported(why)) => Given::Unsupported(why),
                };
                let r = mem.judge(i, &given).unwrap();
                let want = &on_disk.results[i];
                assert_eq!(r.verdict, want.verdict, "{name} {}", c.id);
                assert_eq!(
                    r.worst_ratio.to_bits(),
                    want.worst_ratio.to_bits(),
                    "{name} {}",
                    c.id
                );
                failed += usize::from(r.verdict == Verdict::Fail);
            }
            assert_eq!(failed > 0, name.starts_with("bad-"), "{name}: {failed}");
            let rep = mem.report(false, 20).unwrap();
            assert_eq!(rep.ok, !name.starts_with("bad-"), "{name}");
            assert_eq!(rep.json["family"], "all");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn optional_outputs_may_be_left_out_and_bad_ones_are_named() {
        let s = family_selection(
            "layer_norm",
            "default",
            "f32",
            None,
            &["layer_norm".into()],
            &[],
        )
        .unwrap();
        let mem = InMemoryFamilySuite::new(s).unwrap();
        let c = mem.case(0).clone();
        let n = c.case.input("x").len();
        let y = Array {
            descr: "<f4".into(),
            shape: c.case.shape.clone(),
            bytes: vec![0; 4 * n],
        };
        match written(
            &c,
            &Given::Outputs(BTreeMap::from([("y".into(), y.clone())])),
        ) {
            FamilyWritten::Outputs(got, ng) => {
                assert_eq!(got.len(), 1);
                assert_eq!(ng, vec!["mean", "rstd"]);
            }
            other => panic!("{other:?}"),
        }
        let bad_rstd = Array {
            descr: "<f4".into(),
            shape: vec![1],
            bytes: vec![0; 4],
        };
        let w = written(
            &c,
            &Given::Outputs(BTreeMap::from([("y".into(), y), ("rstd".into(), bad_rstd)])),
        );
        assert!(
            matches!(&w, FamilyWritten::Malformed(why) if why.starts_with(&format!("{}/out/rstd.npy: shape [1], expected", c.id))),
            "{w:?}"
        );
        assert!(matches!(
            written(&c, &Given::Error(" boom \n".into())),
            FamilyWritten::Malformed(w) if w == "kernel error: boom"
        ));
    }

    /// Cases judged out of order, or again, get the verdict of a first judgment in order.
    #[test]
    fn judging_out_of_order_and_again() {
        let s = family_selection("rms_norm", "default", "f64", None, &[], &[]).unwrap();
        let k = family_kernel_by_name("rms-twopass").unwrap();
        let mut mem = InMemoryFamilySuite::new(s).unwrap();
        let given = |c: &FamilySuiteCase| match k.run(&c.case) {
            Ok(o) => Given::Outputs(
                o.iter()
                    .map(|(n, v)| {
                        let f = format_of(c.case.dtype_of(n));
                        let a = Array::of(family_shape(&c.case, n), &protocol::npy_of(f, v));
                        (n.clone(), a)
                    })
                    .collect(),
            ),
            Err(bnconf_impl::Unsupported(why)) => Given::Unsupported(why),
        };
        let n = mem.len();
        let order: Vec<usize> = (0..n).rev().chain([n / 2, 0]).collect();
        let mut first = BTreeMap::new();
        for i in order {
            let c = mem.case(i).clone();
            let r = mem.judge(i, &given(&c)).unwrap().clone();
            let before = first.entry(i).or_insert_with(|| r.clone());
            assert_eq!(before.verdict, r.verdict, "{}", c.id);
            assert_eq!(
                before.worst_ratio.to_bits(),
                r.worst_ratio.to_bits(),
                "{}",
                c.id
            );
        }
        let rep = mem.report(true, 20).unwrap();
        assert!(rep.text.contains("family rms_norm"), "{}", rep.text);
    }

    #[test]
    fn drawn_cases_are_the_classes_of_the_op() {
        let classes = family_classes("group_norm", "f32").unwrap();
        assert!(classes.len() > 5, "{classes:?}");
        let layouts: std::collections::BTreeSet<&str> =
            classes.iter().map(|(_, _, l)| l.as_str()).collect();
        assert!(layouts.len() > 2, "{layouts:?}");
        let (i, name, layout) = &classes[0];
        let c = (0..8)
            .find_map(|seed| draw_family_case("group_norm", "float32", *i, seed).unwrap())
            .unwrap();
        assert_eq!((&c.class, c.case.layout.name()), (name, layout.as_str()));
        assert!(draw_family_case("frobnicate", "f32", 0, 0)
            .unwrap_err()
            .to_string()
            .starts_with("ops: "));
        assert!(family_classes("layer_norm", "int8")
            .unwrap_err()
            .to_string()
            .starts_with("dtype: "));
    }
}
