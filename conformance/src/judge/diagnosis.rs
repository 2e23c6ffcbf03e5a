//! What is wrong: the known-bad kernels of `bnconf kernel --list` are fingerprints of the
//! classic BatchNorm defects. A failing case is *reproduced* by a known-bad kernel when that
//! kernel, run in process on the same case, gives the user's outputs back within the budget
//! (docs/REPORTS.md, "Diagnosis"):
//!
//! 1. the known-bad kernel fails the case itself (its own outputs are over budget), so a good
//!    kernel's rounding noise never matches, whatever it is compared with;
//! 2. every element of every output agrees: `|user − bad| ≤ 2k·u·(cond+mag)` with the case's
//!    element budget (two computations of the same defective formula each within `k` of it
//!    are within `2k` of each other), NaN matching NaN and an infinity the same infinity;
//! 3. the agreement explains the failure: the largest `|user − bad| / (u·(cond+mag))` is at
//!    most half the user's own worst ratio, so the user's outputs are much closer to the
//!    defect than to the exact values.
//!
//! Every known-bad kernel of `bnconf_impl::all_kernels()` is tried on every failing case
//! (verdict `fail`; a malformed output has no values to compare); a new known-bad kernel is a
//! new fingerprint with no other change. Kernels that reproduce at least one case are listed,
//! most cases first (ties in `all_kernels()` order). The `replicated` suite's cases are
//! fingerprinted by the replicated known-bad kernels (`bad-rep-*`), run on the same ranks.

use crate::judge::prepare::Prepared;
use crate::judge::verdict::{CaseResult, Verdict};
use crate::par::*;
use bnconf_impl::{Kernel, ReplicatedKernel};
use std::collections::BTreeMap;

/// A known-bad kernel that reproduces failing cases.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// The kernel's name (`bnconf kernel --list`).
    pub kernel: String,
    /// Failing cases it reproduces.
    pub matched: usize,
    /// Failing cases of the run (the denominator).
    pub failing: usize,
    /// The kernel's description (its defect).
    pub description: String,
    /// Ids of the cases it reproduces, in suite order.
    pub cases: Vec<String>,
}

impl Diagnosis {
    /// The defect in a few words: the description without `KNOWN BAD: ` and without the
    /// trailing `Otherwise …` sentence, at most about 110 characters.
    pub fn short_description(&self) -> String {
        let d = self
            .description
            .strip_prefix("KNOWN BAD: ")
            .unwrap_or(&self.description);
        let d = d.split(" Otherwise ").next().unwrap_or(d).trim();
        if d.chars().count() > 110 {
            format!("{}…", d.chars().take(110).collect::<String>().trim_end())
        } else {
            d.to_string()
        }
    }

    /// `behaves like bad-unbiased-var on 65 of 65 failing cases (…)`.
    pub fn sentence(&self) -> String {
        format!(
            "behaves like {} on {} of {} failing cases ({})",
            self.kernel,
            self.matched,
            self.failing,
            self.short_description()
        )
    }
}

/// Whether `bad`'s outputs `theirs` reproduce the user's outputs `ours` on case `p` (rules 2
/// and 3 of the module doc; rule 1 is the caller's). `user_worst` is the user's worst ratio.
pub fn reproduces(
    p: &Prepared,
    ours: &BTreeMap<String, Vec<f64>>,
    theirs: &BTreeMap<String, Vec<f64>>,
    user_worst: f64,
) -> bool {
    let tol = 2.0 * p.k;
    let mut far = 0f64;
    for &name in p.case.op.outputs() {
        let (Some(a), Some(b)) = (ours.get(name), theirs.get(name)) else {
            return false;
        };
        if a.len() != b.len() || a.len() != p.output_len(name) {
            return false;
        }
        let u = p.case.dtype_of(name).unit_roundoff();
        for i in 0..a.len() {
            let (x, y) = (a[i], b[i]);
            let d = if x.is_nan() && y.is_nan() || x == y {
                0.0
            } else if !x.is_finite() || !y.is_finite() {
                return false;
            } else {
                let total = p.budget_at(name, i).total(u);
                if total.is_infinite() {
                    0.0
                } else if total.is_nan() || total <= 0.0 {
                    return false;
                } else {
                    (x - y).abs() / (u * total)
                }
            };
            if d.is_nan() || d > tol {
                return false;
            }
            far = far.max(d);
        }
    }
    let worst = if user_worst.is_nan() {
        f64::INFINITY
    } else {
        user_worst
    };
    far <= worst / 2.0
}

/// The diagnosis of a run against every known-bad kernel of `bnconf_impl::all_kernels()`
/// (and, for the cases of the `replicated` suite, of `bnconf_impl::all_replicated_kernels()`).
pub fn diagnose(prepared: &[Prepared], results: &[CaseResult]) -> Vec<Diagnosis> {
    diagnose_in(
        &bnconf_impl::all_kernels(),
        &bnconf_impl::all_replicated_kernels(),
        prepared,
        results,
    )
}

/// The diagnosis against the known-bad kernels among `kernels` (good ones are skipped).
pub fn diagnose_with(
    kernels: &[Box<dyn Kernel>],
    prepared: &[Prepared],
    results: &[CaseResult],
) -> Vec<Diagnosis> {
    diagnose_in(kernels, &[], prepared, results)
}

/// A known-bad kernel as a fingerprint: a plain one (run on the whole case) or a replicated
/// one (run on the case's ranks; it fingerprints only replicated cases, and plain ones only
/// the others).
#[derive(Clone, Copy)]
enum Fingerprint<'a> {
    Plain(&'a dyn Kernel),
    Replicated(&'a dyn ReplicatedKernel),
}

impl Fingerprint<'_> {
    fn name(&self) -> &'static str {
        match self {
            Fingerprint::Plain(k) => k.name(),
            Fingerprint::Replicated(k) => k.name(),
        }
    }
    fn description(&self) -> &'static str {
        match self {
            Fingerprint::Plain(k) => k.description(),
            Fingerprint::Replicated(k) => k.description(),
        }
    }
    /// The kernel's whole-case outputs on `p` when it fails the case itself (rule 1).
    fn failing_outputs(&self, p: &Prepared) -> Option<BTreeMap<String, Vec<f64>>> {
        let replicated = !p.case.shard_sizes.is_empty();
        match *self {
            Fingerprint::Plain(k) if !replicated => {
                let theirs = k.run(&p.case.to_kernel_case()).ok()?;
                (p.judge(&theirs).verdict == Verdict::Fail).then_some(theirs)
            }
            Fingerprint::Replicated(k) if replicated => {
                let ranks: Vec<bnconf_impl::Case> = (0..p.case.shard_sizes.len())
                    .map(|r| crate::suite::replicated::shard(&p.case, r).to_kernel_case())
                    .collect();
                let res = p.judge_ranks(&k.run_ranks(&ranks).ok()?);
                // The concatenated shards and rank 0's per-channel values, as judged.
                (res.verdict == Verdict::Fail).then(|| res.computed.map(|c| (*c).clone()))?
            }
            _ => None,
        }
    }
}

fn diagnose_in(
    kernels: &[Box<dyn Kernel>],
    replicated: &[Box<dyn ReplicatedKernel>],
    prepared: &[Prepared],
    results: &[CaseResult],
) -> Vec<Diagnosis> {
    let by_id: BTreeMap<&str, &Prepared> =
        prepared.iter().map(|p| (p.case.id.as_str(), p)).collect();
    let failing: Vec<(&Prepared, &CaseResult)> = results
        .iter()
        .filter(|r| r.verdict == Verdict::Fail && r.computed.is_some())
        .filter_map(|r| by_id.get(r.id.as_str()).map(|p| (*p, r)))
        .collect();
    if failing.is_empty() {
        return vec![];
    }
    let bad: Vec<Fingerprint> = kernels
        .iter()
        .filter(|k| k.expected() == bnconf_impl::Expected::KnownBad)
        .map(|k| Fingerprint::Plain(k.as_ref()))
        .chain(
            replicated
                .iter()
                .filter(|k| k.expected() == bnconf_impl::Expected::KnownBad)
                .map(|k| Fingerprint::Replicated(k.as_ref())),
        )
        .collect();
    // matches[case][kernel]
    let matches: Vec<Vec<bool>> = failing
        .par_iter()
        .map(|(p, r)| {
            let ours = r.computed.as_ref().expect("kept for failing cases");
            bad.iter()
                .map(|k| {
                    k.failing_outputs(p)
                        .is_some_and(|theirs| reproduces(p, ours, &theirs, r.worst_ratio))
                })
                .collect()
        })
        .collect();
    let mut out: Vec<Diagnosis> = bad
        .iter()
        .enumerate()
        .map(|(j, k)| {
            let cases: Vec<String> = failing
                .iter()
                .zip(&matches)
                .filter(|(_, m)| m[j])
                .map(|((_, r), _)| r.id.clone())
                .collect();
            Diagnosis {
                kernel: k.name().to_string(),
                matched: cases.len(),
                failing: failing.len(),
                description: k.description().to_string(),
                cases,
            }
        })
        .filter(|d| d.matched > 0)
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.matched)); // stable: ties keep all_kernels() order
    out
}
