//! Preparing the `replicated` suite's cases (docs/FORMAT.md, "Replicated suites"): the
//! goldens are the whole-batch op's; what one rank's shard contributes to `dgamma`/`dbeta`
//! (the optional `dgamma_local`/`dbeta_local`) is computed here exactly, with budgets (the
//! seed's S30: `dgamma` of `sync_backward` on the shard at the all-reduced statistics).
//! Judging what each rank wrote is `judge::ranks`.

use crate::judge::budget::{self, ElementBudget};
use crate::suite::{replicated, SuiteCase};
use bnconf_spec::op::Outputs;
use bnconf_spec::{Geometry, Op, Problem, QSqrt};
use std::collections::BTreeMap;

/// What one rank of a backward case contributes to `dgamma`/`dbeta`, exactly, with budgets.
#[derive(Clone, Debug)]
pub struct RankLocal {
    /// `dgamma_local`, `dbeta_local` (`[C]`).
    pub golden: BTreeMap<&'static str, Vec<QSqrt>>,
    /// Their budgets.
    pub budgets: BTreeMap<&'static str, Vec<ElementBudget>>,
}

/// The optional per-rank outputs (S30: the rank's part of the gradient sums).
pub const LOCAL_OUTPUTS: [&str; 2] = ["dgamma_local", "dbeta_local"];

/// The exact per-rank parts of a replicated backward case (`None` for other cases).
pub fn locals(
    c: &SuiteCase,
    golden: &Outputs,
) -> Result<Option<Vec<RankLocal>>, bnconf_spec::SpecError> {
    if c.shard_sizes.is_empty() || c.op != Op::Backward {
        return Ok(None);
    }
    let geom_w = &Geometry::new(c.layout, &c.shape, usize::MAX)?;
    let eps_w = bnconf_spec::exact::parse::parse_rational(&c.eps).expect("generated eps");
    let m = QSqrt::int(geom_w.m as i64);
    // A channel's values of a cell input of a case (layout order of its geometry).
    let chan = |case: &SuiteCase, g: &Geometry, name: &str, ch: usize| -> Vec<f64> {
        (0..g.m)
            .map(|k| case.inputs[name][g.offset(ch, k)])
            .collect()
    };
    let (mut mean, mut m2, mut mean_dy) = (Vec::new(), Vec::new(), Vec::new());
    for ch in 0..geom_w.c {
        let (x, dy) = (chan(c, geom_w, "x", ch), chan(c, geom_w, "dy", ch));
        let rat = |r| QSqrt::rational(r);
        mean.push(&rat(crate::fast::acc::exact_dot(&x, None)) / &m);
        m2.push(&rat(crate::fast::acc::exact_dot(&x, Some(&x))) / &m);
        mean_dy.push(&rat(crate::fast::acc::exact_dot(&dy, None)) / &m);
    }
    // mean(dy·xhat) = dgamma / m, exact in the channel's Q(sqrt(q)).
    let mean_dy_xhat: Vec<QSqrt> = golden["dgamma"].iter().map(|g| g / &m).collect();
    let mut out = Vec::new();
    for r in 0..c.shard_sizes.len() {
        let sh = replicated::shard(c, r);
        if sh.shape[0] == 0 {
            // An empty rank contributes nothing: exactly 0, with no error allowed beyond the
            // underflow term.
            let zero = || vec![QSqrt::int(0); geom_w.c];
            let b = || vec![ElementBudget::default(); geom_w.c];
            out.push(RankLocal {
                golden: [("dgamma_local", zero()), ("dbeta_local", zero())].into(),
                budgets: [("dgamma_local", b()), ("dbeta_local", b())].into(),
            });
            continue;
        }
        let geom = Geometry::new(c.layout, &sh.shape, usize::MAX)?;
        let local = sh.problem().inputs;
        let mut inputs: BTreeMap<String, Vec<QSqrt>> = BTreeMap::new();
        for name in ["x", "dy", "gamma"] {
            inputs.insert(name.into(), local[name].clone());
        }
        inputs.insert("mean".into(), mean.clone());
        inputs.insert("m2".into(), m2.clone());
        inputs.insert("mean_dy".into(), mean_dy.clone());
        inputs.insert("mean_dy_xhat".into(), mean_dy_xhat.clone());
        let p = Problem::new(Op::SyncBackward, geom, eps_w.clone(), inputs)?;
        // sync_backward's dgamma and dbeta on the shard (S30), per channel: exactly what
        // `p.evaluate()` gives for them, without its per-element dx (most of the work).
        // S30's dgamma = Σ dy·(x − mean)·r = (Σ dy·x − mean·Σ dy)·r with r = (m2 − mean² +
        // eps)^(−1/2), the sums exact from the shard's floats (tested equal to evaluate's).
        let eps = QSqrt::rational(eps_w.clone());
        let (mut dg, mut db) = (Vec::new(), Vec::new());
        for ch in 0..p.geom.c {
            let (x, dy) = (chan(&sh, &p.geom, "x", ch), chan(&sh, &p.geom, "dy", ch));
            let sdy = QSqrt::rational(crate::fast::acc::exact_dot(&dy, None));
            let sdx = QSqrt::rational(crate::fast::acc::exact_dot(&dy, Some(&x)));
            let r = bnconf_spec::channel::inv_std(
                &bnconf_spec::channel::sync_var(&mean[ch], &m2[ch]),
                &eps,
            );
            dg.push(&(&sdx - &(&mean[ch] * &sdy)) * &r);
            db.push(sdy);
        }
        // The closed-form bound (tested ≥ the exact condition): the exact Jacobian of
        // sync_backward over Q(sqrt(q)) costs seconds per shard and tightens little.
        let mut b = budget::budgets(&p, budget::Method::Bound)?;
        out.push(RankLocal {
            golden: [("dgamma_local", dg), ("dbeta_local", db)].into(),
            budgets: [
                ("dgamma_local", b.remove("dgamma").expect("dgamma")),
                ("dbeta_local", b.remove("dbeta").expect("dbeta")),
            ]
            .into(),
        });
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::FloatFormat;

    /// The per-rank parts equal sync_backward evaluated in full on the shard (the reference
    /// `locals` shortcuts), on backward cases of every split, an empty rank included.
    #[test]
    fn locals_are_sync_backward_on_the_shard() {
        let s = crate::suite::test_suite("replicated", &[FloatFormat::F32]);
        let cases: Vec<&SuiteCase> = s
            .cases
            .iter()
            .filter(|c| c.op == Op::Backward && c.layout == bnconf_spec::Layout::Nchw)
            .filter(|c| c.class == "gaussian" || c.class == "large-mean-1e3")
            .collect();
        assert!(cases.len() >= 8, "{}", cases.len());
        let mut empty = 0;
        for c in cases {
            let golden = c.problem().evaluate().unwrap();
            let locals = locals(c, &golden).unwrap().unwrap();
            let whole = c.problem();
            for (r, l) in locals.iter().enumerate() {
                let sh = replicated::shard(c, r);
                if sh.shape[0] == 0 {
                    empty += 1;
                    assert!(l.golden["dgamma_local"].iter().all(|v| v.is_zero()));
                    continue;
                }
                // sync_backward on the shard, every output, through Problem::evaluate.
                let m = QSqrt::int(whole.geom.m as i64);
                let mut inputs: BTreeMap<String, Vec<QSqrt>> = BTreeMap::new();
                let local = sh.problem().inputs;
                for name in ["x", "dy", "gamma"] {
                    inputs.insert(name.into(), local[name].clone());
                }
                let (mut mean, mut m2, mut mdy) = (vec![], vec![], vec![]);
                for ch in 0..whole.geom.c {
                    let at = |n: &str, k: usize| whole.inputs[n][whole.geom.offset(ch, k)].clone();
                    let sum = |f: &dyn Fn(usize) -> QSqrt| {
                        (0..whole.geom.m).fold(QSqrt::int(0), |a, k| &a + &f(k))
                    };
                    mean.push(&sum(&|k| at("x", k)) / &m);
                    m2.push(&sum(&|k| &at("x", k) * &at("x", k)) / &m);
                    mdy.push(&sum(&|k| at("dy", k)) / &m);
                }
                inputs.insert("mean".into(), mean);
                inputs.insert("m2".into(), m2);
                inputs.insert("mean_dy".into(), mdy);
                inputs.insert(
                    "mean_dy_xhat".into(),
                    golden["dgamma"].iter().map(|g| g / &m).collect(),
                );
                let geom = Geometry::new(c.layout, &sh.shape, usize::MAX).unwrap();
                let p = Problem::new(Op::SyncBackward, geom, whole.eps.clone(), inputs).unwrap();
                let full = p.evaluate().unwrap();
                assert_eq!(
                    l.golden["dgamma_local"], full["dgamma"],
                    "{} rank {r}",
                    c.id
                );
                assert_eq!(l.golden["dbeta_local"], full["dbeta"], "{} rank {r}", c.id);
            }
        }
        assert!(empty > 0, "no empty rank among the cases");
    }
}
