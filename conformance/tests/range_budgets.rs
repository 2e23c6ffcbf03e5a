//! batch_norm's `extreme` suite (the range level: `huge` and `tiny` classes) is judged on every
//! output in f32 and f64: every budget is finite (an infinite budget accepts any finite value;
//! in f64 the bounds' squares of `|x| ~ 1e160` or `1e-160` overflow unless the channel is
//! bounded at a power-of-two scale, precision/budget.rs), except where the exact value itself
//! is beyond the dtype (a huge channel's `var`), and each forward and backward output's
//! correctly rounded values, moved by 1/8 of themselves, are rejected. Run in release.

use bnconf::judge::{prepare, Verdict};
use bnconf::suite::{generate_in, Filter, Precision, DEFAULT_SEED};
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::Op;
use std::collections::BTreeMap;

#[test]
fn extreme_budgets_are_finite_and_every_output_is_judged() {
    let mut judged = 0;
    for t in [FloatFormat::F32, FloatFormat::F64] {
        let s = generate_in(
            "extreme",
            &[Precision::uniform(t)],
            DEFAULT_SEED,
            &Filter::default(),
        )
        .unwrap();
        let prepared = prepare(&s.cases).unwrap();
        assert!(
            prepared.len() >= 20,
            "{} cases in {}",
            prepared.len(),
            t.name()
        );
        for p in &prepared {
            let id = &p.case.id;
            let gold: BTreeMap<String, Vec<f64>> = p
                .golden
                .iter()
                .map(|(&n, v)| {
                    (
                        n.to_string(),
                        v.iter().map(|e| round(e, t).to_f64()).collect(),
                    )
                })
                .collect();
            for (name, b) in &p.budgets {
                for (j, e) in b.iter().enumerate() {
                    let finite = e.cond.is_finite() && e.mag.is_finite() && e.mag2.is_finite();
                    assert!(
                        finite || !gold[*name][j].is_finite(),
                        "{id}: budget of {name}[{j}] is {e:?} (golden {})",
                        gold[*name][j]
                    );
                }
            }
            // forward and backward (the ops whose bounds square x): moved outputs fail. (Not
            // every op's: running_update's new_mean with momentum 1 on a tiny channel is
            // conditioned by the momentum's own perturbation, |mean − running_mean|, far above
            // its value.)
            if !matches!(p.case.op, Op::Forward | Op::Backward) {
                continue;
            }
            for (name, v) in &gold {
                if v.iter().all(|&g| g == 0.0) || v.iter().any(|g| !g.is_finite()) {
                    continue;
                }
                let mut moved = gold.clone();
                for g in moved.get_mut(name).unwrap() {
                    *g += *g / 8.0;
                }
                let r = p.judge(&moved);
                assert_ne!(
                    r.verdict,
                    Verdict::Pass,
                    "{id}: {name} moved by 1/8 passes: {:?}",
                    r.outputs
                );
                judged += 1;
            }
        }
    }
    assert!(judged > 50, "{judged}");
}
