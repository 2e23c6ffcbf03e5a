//! The checker: computed outputs against the exact goldens of a [`Prepared`] case, element
//! by element, with the budget of docs/DESIGN.md §3 (`budget`): the worst element of each
//! output and the case's verdict.

use crate::judge::verdict::output_result;
use crate::par::*;
use std::collections::BTreeMap;

// The items of this module before it was split by role (judge/prepare.rs, judge/verdict.rs),
// kept at their paths.
pub use crate::judge::prepare::{
    chunks, judged_fast, prepare, prepare_owned, prepare_owned_lean, prepare_with, Approx,
    Prepared, FAST_JUDGE_MIN_LEN, JUDGE_BYTES_PER_CELL, JUDGE_CHUNK_CELLS,
};
pub use crate::judge::verdict::{approx, summarize, CaseResult, OutputResult, Summary, Verdict};

/// What a kernel wrote for one case, as read from its directory (`protocol::read_written`):
/// the reason it gave for not running the case, why what it wrote cannot be judged, or its
/// outputs (values of their dtypes as f64) — every rank's for a replicated case.
#[derive(Clone, Debug)]
pub enum Written {
    /// `out/unsupported` (of the case or of a rank): the kernel's reason.
    Unsupported(String),
    /// A missing or malformed output, or an unreadable `out/unsupported`: why (naming the file).
    Malformed(String),
    /// The outputs of a case.
    Outputs(BTreeMap<String, Vec<f64>>),
    /// The outputs of every rank of a replicated case (`ranks[r]`; the optional
    /// `dgamma_local`/`dbeta_local` where present).
    Ranks(Vec<BTreeMap<String, Vec<f64>>>),
}

impl Prepared {
    fn result(&self, verdict: Verdict, outputs: Vec<OutputResult>) -> CaseResult {
        let worst = outputs.iter().map(|o| o.worst_ratio).fold(0.0, f64::max);
        let c = &self.case;
        CaseResult {
            id: c.id.clone(),
            op: c.op.name(),
            layout: c.layout.name(),
            dtype: c.precision().static_name(),
            level: c.level,
            class: c.class.clone(),
            verdict,
            worst_ratio: worst,
            k: self.k,
            outputs,
            computed: None,
        }
    }

    /// A case the kernel did not run.
    pub fn unsupported(&self, why: &str) -> CaseResult {
        self.result(Verdict::Unsupported(why.to_string()), vec![])
    }
    /// A case with a missing or malformed output.
    pub fn malformed(&self, why: &str) -> CaseResult {
        self.result(Verdict::Malformed(why.to_string()), vec![])
    }

    /// Judge what a kernel wrote for the case: its outputs ([`Prepared::judge`]), every rank's
    /// ([`Prepared::judge_ranks`]), or the case unsupported or malformed as it says.
    pub fn judge_written(&self, written: &Written) -> CaseResult {
        match written {
            Written::Unsupported(why) => self.unsupported(why),
            Written::Malformed(why) => self.malformed(why),
            Written::Outputs(computed) => self.judge(computed),
            Written::Ranks(ranks) => self.judge_ranks(ranks),
        }
    }

    /// Judge computed outputs (values of the case dtype, as f64) against the goldens.
    pub fn judge(&self, computed: &BTreeMap<String, Vec<f64>>) -> CaseResult {
        let mut outs = Vec::new();
        for &name in self.case.op.outputs() {
            let Some(vals) = computed.get(name) else {
                return self.malformed(&format!("output `{name}` missing"));
            };
            match self.judge_output(name, vals) {
                Ok(o) => outs.push(o),
                Err(why) => return self.malformed(&why),
            }
        }
        self.verdict_of(outs, computed)
    }

    /// The result from judged outputs: pass when no element of any is over the allowance.
    pub(crate) fn verdict_of(
        &self,
        outs: Vec<OutputResult>,
        computed: &BTreeMap<String, Vec<f64>>,
    ) -> CaseResult {
        let verdict = if outs.iter().all(|o| o.n_over == 0) {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        let mut r = self.result(verdict, outs);
        if r.verdict == Verdict::Fail {
            r.computed = Some(std::sync::Arc::new(computed.clone()));
        }
        r
    }

    /// Judge one output (values of its dtype, as f64): its worst element and how many are
    /// over the allowance; `Err` names a length mismatch.
    pub fn judge_output(&self, name: &str, vals: &[f64]) -> Result<OutputResult, String> {
        // Each output is judged in its own dtype (activations' or parameters').
        let u = self.case.dtype_of(name).unit_roundoff();
        let n_exact = self.output_len(name);
        if vals.len() != n_exact {
            return Err(format!(
                "output `{name}` has {} values, expected {}",
                vals.len(),
                n_exact
            ));
        }
        Ok(output_result(
            name,
            self.ratio_summary(name, vals, u),
            vals,
            |i| self.exact_at(name, i),
            |i| self.budget_at(name, i),
        ))
    }
}

impl Prepared {
    /// [`Prepared::judge_output`] of a large case's cell output held as binary32 (as its file
    /// holds it: 4 bytes a value instead of 8): the same result for the same values, or `None`
    /// where its one-pass summary ([`Prepared::cell_summary`]) does not apply or the length
    /// is not the output's (the caller then reads it as f64).
    pub fn judge_output_f32(&self, name: &str, vals: &[f32]) -> Option<OutputResult> {
        let u = self.case.dtype_of(name).unit_roundoff();
        if vals.len() != self.output_len(name) {
            return None;
        }
        let s = self.cell_summary(name, vals, u)?;
        Some(output_result(
            name,
            s,
            vals,
            |i| self.exact_at(name, i),
            |i| self.budget_at(name, i),
        ))
    }

    /// The result of outputs judged one by one ([`Prepared::judge_output`],
    /// [`Prepared::judge_output_f32`]) when none has an element over the allowance: what
    /// [`Prepared::judge`] gives then (a passing result keeps no outputs); `None` otherwise.
    pub fn passing(&self, outs: Vec<OutputResult>) -> Option<CaseResult> {
        outs.iter()
            .all(|o| o.n_over == 0)
            .then(|| self.result(Verdict::Pass, outs))
    }
}

/// Run a kernel of crate `kernels` on prepared cases, in process.
pub fn run_kernel(kernel: &dyn bnconf_impl::Kernel, prepared: &[Prepared]) -> Vec<CaseResult> {
    prepared
        .par_iter()
        .map(|p| match kernel.run(&p.case.to_kernel_case()) {
            Ok(out) => p.judge(&out),
            Err(bnconf_impl::Unsupported(why)) => p.unsupported(&why),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::budget::ElementBudget;
    use crate::judge::prepare::prepare;
    use crate::judge::verdict::{approx, summarize, worst_of};
    use crate::suite::SuiteCase;
    use bnconf_spec::exact::round::FloatFormat;
    use bnconf_spec::Op;
    use bnconf_spec::QSqrt;
    use serde_json::Value;

    /// `allowed_rel`: the largest allowed error over the largest finite `|value|`, 0 when
    /// nothing is allowed, infinite when something is but every value is 0 or not finite.
    #[test]
    fn allowed_rel_is_the_largest_allowance_over_the_largest_value() {
        use crate::judge::verdict::{allowed_rel, allowed_rel_of, max_allowed};
        let b = |cond: f64| ElementBudget {
            cond,
            mag: 0.0,
            mag2: 0.0,
        };
        let u = 2f64.powi(-24);
        let budgets = [b(1.0), b(8.0), b(2.0)];
        let allowed = max_allowed(&budgets, 4.0, u);
        assert_eq!(allowed, 4.0 * u * budgets[1].total(u));
        let vals = [0.5, -3.0, f64::NAN, f64::INFINITY, 2.0];
        assert_eq!(allowed_rel_of(&vals, allowed), allowed / 3.0);
        assert_eq!(allowed_rel(&vals, &budgets, 4.0, u), allowed / 3.0);
        assert_eq!(allowed_rel_of(&vals, 0.0), 0.0);
        assert_eq!(allowed_rel_of(&[0.0, f64::NAN], 1.0), f64::INFINITY);
        assert_eq!(max_allowed(&[], 4.0, u), 0.0);
    }

    /// `worst_of` names the first element of the greatest ratio (NaN as +inf) and counts the
    /// ratios over `k` (not those at it); `verdict_of` passes exactly when none is over, and
    /// `conforms` is that verdict.
    #[test]
    fn the_worst_element_and_the_verdict() {
        let b = ElementBudget {
            cond: 1.0,
            mag: 0.0,
            mag2: 0.0,
        };
        let worst = |ratios: &[f64], k: f64| {
            let n = ratios.len();
            let vals: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
            let exact = |i: usize| QSqrt::int(i as i64);
            let allowed = crate::judge::verdict::max_allowed(&vec![b; n], k, 1.0);
            let o = worst_of("y", ratios, k, &vals, exact, (|_| b, allowed));
            assert_eq!(o.len, n);
            assert_eq!(o.actual, vals[o.index]);
            assert_eq!(o.expected, o.index.to_string());
            (o.index, o.worst_ratio, o.n_over)
        };
        assert_eq!(worst(&[0.0], 4.0), (0, 0.0, 0));
        assert_eq!(worst(&[1.0, 3.0, 2.0], 4.0), (1, 3.0, 0));
        assert_eq!(worst(&[2.0, 5.0, 5.0, 1.0], 4.0), (1, 5.0, 2));
        assert_eq!(worst(&[4.0, 4.0, 3.9], 4.0), (0, 4.0, 0));
        assert_eq!(worst(&[1.0, f64::NAN, 7.0], 4.0), (1, f64::INFINITY, 2));
        assert_eq!(worst(&[f64::NAN, 1.0, 2.0], 4.0), (0, f64::INFINITY, 1));
        assert_eq!(
            worst(&[3.0, f64::INFINITY, f64::NAN], 4.0),
            (1, f64::INFINITY, 2)
        );

        let s = crate::suite::test_suite("default", &[FloatFormat::F64]);
        let c = s
            .cases
            .iter()
            .find(|c| c.op == Op::Eval)
            .expect("an eval case");
        let p = &prepare(std::slice::from_ref(c)).unwrap()[0];
        let name = c.op.outputs()[0];
        let golden: Vec<f64> = (0..p.output_len(name))
            .map(|i| approx(&p.exact_at(name, i)))
            .collect();
        let mut computed = BTreeMap::from([(name.to_string(), golden.clone())]);
        let pass = p.judge(&computed);
        assert_eq!(pass.verdict, Verdict::Pass);
        assert!(pass.conforms() && pass.computed.is_none());
        computed.get_mut(name).unwrap()[0] = golden[0] * 1.5 + 1.0;
        let fail = p.judge(&computed);
        assert_eq!(fail.verdict, Verdict::Fail);
        assert!(!fail.conforms() && fail.computed.is_some());
        assert_eq!(fail.outputs[0].index, 0);
        assert_eq!(fail.outputs[0].n_over, 1);
        assert!(!p.malformed("x").conforms() && !p.unsupported("x").conforms());
        computed.get_mut(name).unwrap().pop();
        assert!(matches!(p.judge(&computed).verdict, Verdict::Malformed(_)));
    }

    /// `run_kernel` judges every prepared case in order; `summarize` counts the verdicts
    /// (malformed as failed) and keeps the worst ratio of the judged ones; `to_json` carries
    /// the reason of an unsupported or malformed case, and `null` otherwise.
    #[test]
    fn runs_summaries_and_records() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F64]);
        let cases: Vec<SuiteCase> = s
            .cases
            .iter()
            .filter(|c| c.op == Op::Eval)
            .take(3)
            .cloned()
            .collect();
        let prepared = prepare(&cases).unwrap();
        let good = bnconf_impl::kernel_by_name("twopass-native").expect("twopass-native");
        let rs = run_kernel(good.as_ref(), &prepared);
        let ids: Vec<&str> = rs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, cases.iter().map(|c| c.id.as_str()).collect::<Vec<_>>());
        assert!(rs.iter().all(|r| r.verdict == Verdict::Pass), "{rs:?}");

        let p = &prepared[0];
        let name = cases[0].op.outputs()[0];
        let mut bad = BTreeMap::from([(name.to_string(), vec![1e300; p.output_len(name)])]);
        let fail = p.judge(&bad);
        bad.get_mut(name).unwrap().clear();
        let all = [
            rs[0].clone(),
            rs[1].clone(),
            fail.clone(),
            p.judge(&bad),
            p.unsupported("not here"),
            p.unsupported("nor here"),
        ];
        let sum = summarize(&all);
        assert_eq!((sum.passed, sum.failed, sum.unsupported), (2, 2, 2));
        assert_eq!(sum.worst, fail.worst_ratio);
        assert!(sum.worst > rs[0].worst_ratio.max(rs[1].worst_ratio));
        let only_passes = summarize(&rs[..2]);
        assert_eq!(only_passes.worst, rs[0].worst_ratio.max(rs[1].worst_ratio));
        assert_eq!(summarize(&[]).worst, 0.0);

        assert_eq!(all[4].to_json()["reason"], "not here");
        assert_eq!(all[4].to_json()["verdict"], "unsupported");
        let malformed = all[3].to_json();
        assert_eq!(malformed["verdict"], "malformed");
        assert!(
            malformed["reason"]
                .as_str()
                .unwrap()
                .contains("has 0 values"),
            "{malformed}"
        );
        assert_eq!(all[0].to_json()["reason"], Value::Null);
        assert_eq!(all[0].to_json()["verdict"], "pass");
    }
}
