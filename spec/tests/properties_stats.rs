//! Beyond the seed (issue 8): statistics around BatchNorm, exactly.
//!
//! `sync_stats` — R shards of one channel with **unequal** (possibly zero) cell counts:
//! - the count-weighted all-reduce of `(n_r, mean_r, E[x²]_r)` is the union's mean, E[x²] and
//!   variance;
//! - Chan's merge of the centred summaries `(n, mean, M2)`, left fold in any shard order or a
//!   balanced tree, gives the same;
//! - an empty shard's (stale) statistics change nothing;
//! - with equal counts it is the seed's plain all-reduce mean (S26's special case);
//! - the same through `Problem` (`rows`, `[C, R]`);
//! - negatives, as checked expectations (a search must find a counterexample): the
//!   equal-weight mean, the averaged variances and counts clamped to ≥ 1 are wrong.
//!
//! `running_update` — both conventions: the ends of `[0, 1]`, the relation between them
//! (`onnx(a)` = `pytorch(1 − a)` up to the Bessel factor), linearity in the running values,
//! m = 1, and the layouts through `Problem`.
//!
//! Cases per property: `PROPTEST_CASES`, or 256.

mod common;

use bnconf_spec::channel as ch;
use bnconf_spec::op::{Convention, Params};
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt, Rational};
use common::*;
use proptest::collection::vec;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt;

/// One channel's cells split into shards of unequal sizes; empty shards report stale
/// statistics.
#[derive(Clone)]
struct Shards {
    shards: Vec<Vec<Rational>>,
    stale: Vec<(Rational, Rational)>,
}

impl fmt::Debug for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Shards [")?;
        for (s, (m, e2)) in self.shards.iter().zip(&self.stale) {
            if s.is_empty() {
                write!(f, "empty (stale mean {m}, m2 {e2}); ")?;
            } else {
                write!(f, "{:?}; ", Rs(s))?;
            }
        }
        write!(f, "]")
    }
}

impl Shards {
    /// Per-shard `(count, mean, E[x²])`, exact (stale values for empty shards).
    fn summaries(&self) -> (Vec<QSqrt>, Vec<QSqrt>, Vec<QSqrt>) {
        let mut out = (Vec::new(), Vec::new(), Vec::new());
        for (s, (sm, se2)) in self.shards.iter().zip(&self.stale) {
            out.0.push(QSqrt::int(s.len() as i64));
            if s.is_empty() {
                out.1.push(QSqrt::rational(sm.clone()));
                out.2.push(QSqrt::rational(se2.clone()));
            } else {
                let q = qv(s);
                let n = QSqrt::int(s.len() as i64);
                out.1.push(sum(&q) / n.clone());
                out.2.push(dot(&q, &q) / n);
            }
        }
        out
    }
    /// Centred summaries `(n, mean, M2 = Σ(x − mean)²)`, from the shard's own cells.
    fn centred(&self) -> Vec<(QSqrt, QSqrt, QSqrt)> {
        let (n, mean, m2) = self.summaries();
        (0..n.len())
            .map(|i| {
                let var = ch::sync_var(&mean[i], &m2[i]);
                (n[i].clone(), mean[i].clone(), n[i].clone() * var)
            })
            .collect()
    }
    fn union(&self) -> Vec<QSqrt> {
        qv(&self.shards.concat())
    }
    fn unequal(&self) -> bool {
        self.shards.iter().any(|s| s.len() != self.shards[0].len())
    }
    fn has_empty(&self) -> bool {
        self.shards.iter().any(Vec::is_empty)
    }
}

/// R ∈ 1..=5 shards of 0..=6 cells each (at least one cell in all), adversarial values.
fn shards_strategy() -> BoxedStrategy<Shards> {
    vec(0usize..=6, 1..=5)
        .prop_filter("at least one cell", |sizes| sizes.iter().sum::<usize>() > 0)
        .prop_flat_map(|sizes| {
            let total: usize = sizes.iter().sum();
            let r = sizes.len();
            (Just(sizes), cells(total), vec((scalar(), nonneg()), r))
        })
        .prop_map(|(sizes, all, stale)| {
            let mut at = 0;
            let shards = sizes
                .iter()
                .map(|&k| {
                    at += k;
                    all[at - k..at].to_vec()
                })
                .collect();
            Shards { shards, stale }
        })
        .boxed()
}

fn eq<T: PartialEq + fmt::Debug>(
    what: &str,
    sh: &Shards,
    a: &T,
    b: &T,
) -> Result<(), TestCaseError> {
    prop_assert!(a == b, "{what}:\n  left  {a:?}\n  right {b:?}\n  in {sh:?}");
    Ok(())
}

fn merged(sh: &Shards) -> (QSqrt, QSqrt, QSqrt) {
    let (n, mean, m2) = sh.summaries();
    ch::merge_shard_stats(&n, &mean, &m2)
}

/// Chan's merge as a left fold in the given order, returned as `(mean, E[x²], var)`.
fn chan_fold(parts: &[(QSqrt, QSqrt, QSqrt)]) -> (QSqrt, QSqrt, QSqrt) {
    let z = (QSqrt::int(0), QSqrt::int(0), QSqrt::int(0));
    let (n, mean, m2) = parts.iter().cloned().fold(z, ch::chan_merge);
    finish(n, mean, m2)
}

/// Chan's merge as a balanced tree.
fn chan_tree(parts: &[(QSqrt, QSqrt, QSqrt)]) -> (QSqrt, QSqrt, QSqrt) {
    fn go(p: &[(QSqrt, QSqrt, QSqrt)]) -> (QSqrt, QSqrt, QSqrt) {
        if p.len() == 1 {
            return p[0].clone();
        }
        let (l, r) = p.split_at(p.len() / 2);
        ch::chan_merge(go(l), go(r))
    }
    let (n, mean, m2) = go(parts);
    finish(n, mean, m2)
}

fn finish(n: QSqrt, mean: QSqrt, ss: QSqrt) -> (QSqrt, QSqrt, QSqrt) {
    let var = ss / n;
    (mean.clone(), var.clone() + mean.clone() * mean, var)
}

proptest! {
    #![proptest_config(config())]

    /// Count-weighted all-reduce = the union's statistics (mean, E[x²], biased variance).
    #[test]
    fn merged_stats_are_the_unions(sh in shards_strategy()) {
        let u = sh.union();
        let (mean, var) = ch::batch_stats(&u);
        let n = QSqrt::int(u.len() as i64);
        let e2 = dot(&u, &u) / n;
        eq("merge vs union", &sh, &merged(&sh), &(mean, e2, var))?;
    }

    /// Chan's centred merge, left fold in a shuffled order and as a balanced tree, equals the
    /// count-weighted all-reduce.
    #[test]
    fn chan_merge_in_any_order_equals_count_weighted(
        (sh, order) in shards_strategy().prop_flat_map(|sh| {
            let idx: Vec<usize> = (0..sh.shards.len()).collect();
            (Just(sh), Just(idx).prop_shuffle())
        })
    ) {
        let parts = sh.centred();
        let shuffled: Vec<_> = order.iter().map(|&i| parts[i].clone()).collect();
        let want = merged(&sh);
        eq("chan fold (shuffled) vs count-weighted", &sh, &chan_fold(&shuffled), &want)?;
        eq("chan tree vs count-weighted", &sh, &chan_tree(&parts), &want)?;
    }

    /// An empty shard's statistics change nothing: any stale values, or the shard removed.
    #[test]
    fn empty_shards_are_ignored(sh in shards_strategy(), other in (scalar(), nonneg())) {
        let want = merged(&sh);
        let mut changed = sh.clone();
        for (s, st) in changed.shards.iter().zip(changed.stale.iter_mut()) {
            if s.is_empty() {
                *st = other.clone();
            }
        }
        eq("other stale statistics", &sh, &merged(&changed), &want)?;
        let kept: Vec<usize> = (0..sh.shards.len()).filter(|&i| !sh.shards[i].is_empty()).collect();
        let removed = Shards {
            shards: kept.iter().map(|&i| sh.shards[i].clone()).collect(),
            stale: kept.iter().map(|&i| sh.stale[i].clone()).collect(),
        };
        eq("empty shards removed", &sh, &merged(&removed), &want)?;
    }

    /// Equal counts: the plain mean over shards (the seed's all-reduce of S26) is the
    /// count-weighted one.
    #[test]
    fn equal_shards_reduce_to_the_seeds_plain_mean(
        r in 1usize..=4, k in 1usize..=5, all in cells(20)
    ) {
        let shards: Vec<Vec<Rational>> = (0..r).map(|s| all[s * k..(s + 1) * k].to_vec()).collect();
        let sh = Shards { stale: vec![(int(0), int(0)); r], shards };
        let (_, means, m2s) = sh.summaries();
        let plain_mean = sum(&means) / QSqrt::int(r as i64);
        let plain_m2 = sum(&m2s) / QSqrt::int(r as i64);
        let (mean, m2, _) = merged(&sh);
        eq("plain mean of shard means", &sh, &mean, &plain_mean)?;
        eq("plain mean of shard E[x²]", &sh, &m2, &plain_m2)?;
    }

    /// Through `Problem`: `rows` `[C, R]`, each channel its own shards, same counts.
    #[test]
    fn problem_sync_stats_is_the_per_channel_merge(
        sizes in vec(0usize..=5, 1..=4).prop_filter("cells", |s| s.iter().sum::<usize>() > 0),
        c in 1usize..=3,
        seed in vec(cells(20), 3),
    ) {
        let r = sizes.len();
        let mut counts = Vec::new();
        let (mut means, mut m2s) = (vec![QSqrt::int(0); c * r], vec![QSqrt::int(0); c * r]);
        let mut want = Vec::new();
        for &n in &sizes {
            counts.push(QSqrt::int(n as i64));
        }
        for k in 0..c {
            let mut at = 0;
            let shards: Vec<Vec<Rational>> = sizes.iter().map(|&n| {
                at += n;
                seed[k][at - n..at].to_vec()
            }).collect();
            let sh = Shards { stale: vec![(int(k as i64), int(7)); r], shards };
            let (_, mu, e2) = sh.summaries();
            for s in 0..r {
                means[k * r + s] = mu[s].clone();
                m2s[k * r + s] = e2[s].clone();
            }
            want.push(merged(&sh));
        }
        let inputs: BTreeMap<String, Vec<QSqrt>> = [
            ("shard_count", counts), ("shard_mean", means), ("shard_m2", m2s),
        ].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let g = Geometry::new(Layout::Rows, &[c, r], 1 << 20).unwrap();
        let out = Problem::new(Op::SyncStats, g, int(0), inputs).unwrap().evaluate().unwrap();
        for (k, w) in want.iter().enumerate() {
            prop_assert_eq!(&(out["mean"][k].clone(), out["m2"][k].clone(), out["var"][k].clone()), w);
        }
    }
}

/// Negative: the equal-weight mean across unequal shards is not the union's mean.
#[test]
fn negative_equal_weight_mean_across_unequal_shards() {
    let plain = |sh: &Shards| {
        let (_, means, _) = sh.summaries();
        sum(&means) / QSqrt::int(means.len() as i64)
    };
    let sh = find_counterexample("equal-weight mean == union mean", shards_strategy(), |sh| {
        eq(
            "equal-weight vs count-weighted mean",
            &sh,
            &plain(&sh),
            &merged(&sh).0,
        )
    });
    assert!(sh.unequal(), "only unequal shards can differ: {sh:?}");
    assert_ne!(plain(&sh), ch::batch_stats(&sh.union()).0);
}

/// Negative: the (count-weighted) mean of the shards' variances is not the union's variance.
#[test]
fn negative_averaged_variances() {
    let averaged = |sh: &Shards| {
        let (n, mean, m2) = sh.summaries();
        let total = sum(&n);
        let mut s = QSqrt::int(0);
        for i in 0..n.len() {
            s = s + n[i].clone() * ch::sync_var(&mean[i], &m2[i]);
        }
        s / total
    };
    let sh = find_counterexample(
        "averaged variances == union variance",
        shards_strategy(),
        |sh| {
            eq(
                "averaged variances vs union variance",
                &sh,
                &averaged(&sh),
                &merged(&sh).2,
            )
        },
    );
    assert_ne!(averaged(&sh), ch::batch_stats(&sh.union()).1, "{sh:?}");
}

/// Negative: counts clamped to ≥ 1 let an empty replica's stale statistics in.
#[test]
fn negative_empty_shard_counted_once() {
    let clamped = |sh: &Shards| {
        let (n, mean, m2) = sh.summaries();
        let n: Vec<QSqrt> = n
            .into_iter()
            .map(|k| if k.is_zero() { QSqrt::int(1) } else { k })
            .collect();
        ch::merge_shard_stats(&n, &mean, &m2)
    };
    let sh = find_counterexample("clamped counts == merged", shards_strategy(), |sh| {
        eq("clamped counts vs merged", &sh, &clamped(&sh), &merged(&sh))
    });
    assert!(sh.has_empty(), "only an empty shard can differ: {sh:?}");
}

// -------------------------------------------------------------------------------------
// running_update

fn momentum() -> BoxedStrategy<Rational> {
    prop_oneof![
        Just(int(0)),
        Just(int(1)),
        Just(frac(1, 10)),
        Just(frac(9, 10)),
        Just(frac(99, 100)),
        (0i64..=64).prop_map(|k| frac(k, 64)),
    ]
    .boxed()
}

fn update(
    x: &[Rational],
    rm: &Rational,
    rv: &Rational,
    a: &Rational,
    pytorch: bool,
) -> (QSqrt, QSqrt) {
    ch::running_update(
        &qv(x),
        &QSqrt::rational(rm.clone()),
        &QSqrt::rational(rv.clone()),
        &QSqrt::rational(a.clone()),
        pytorch,
    )
}

proptest! {
    #![proptest_config(config())]

    /// The ends of [0, 1]: PyTorch a = 1 and ONNX a = 0 give the batch statistics (PyTorch's
    /// unbiased, factor 1 at m = 1; ONNX's biased); PyTorch a = 0 and ONNX a = 1 keep the
    /// running ones.
    #[test]
    fn momentum_ends(x in (1usize..=12).prop_flat_map(cells), rm in scalar(), rv in nonneg()) {
        let m = x.len();
        let (mu, var) = ch::batch_stats(&qv(&x));
        let unbiased = var.clone() * ch::bessel::<QSqrt>(m);
        let keep = (QSqrt::rational(rm.clone()), QSqrt::rational(rv.clone()));
        prop_assert_eq!(update(&x, &rm, &rv, &int(1), true), (mu.clone(), unbiased));
        prop_assert_eq!(update(&x, &rm, &rv, &int(0), false), (mu, var));
        prop_assert_eq!(update(&x, &rm, &rv, &int(0), true), keep.clone());
        prop_assert_eq!(update(&x, &rm, &rv, &int(1), false), keep);
    }

    /// ONNX with momentum a is PyTorch with 1 − a for the mean; for the variance the batch
    /// terms differ exactly by the Bessel factor m/(m − 1) (1 at m = 1).
    #[test]
    fn conventions_are_related(x in (1usize..=12).prop_flat_map(cells), rm in scalar(), rv in nonneg(), a in momentum()) {
        let m = x.len();
        let b = int(1) - &a;
        let (on_mean, on_var) = update(&x, &rm, &rv, &a, false);
        let (pt_mean, pt_var) = update(&x, &rm, &rv, &b, true);
        prop_assert_eq!(on_mean, pt_mean);
        let old = QSqrt::rational(&a * &rv);
        prop_assert_eq!(pt_var - old.clone(), (on_var - old) * ch::bessel::<QSqrt>(m));
    }

    /// Linear in the running values: shifting running_mean (running_var) by δ shifts
    /// new_mean (new_var) by w_old·δ.
    #[test]
    fn linear_in_running_values(x in (1usize..=8).prop_flat_map(cells), rm in scalar(), rv in nonneg(), d in scalar(), a in momentum(), pytorch in any::<bool>()) {
        let w_old = QSqrt::rational(if pytorch { int(1) - &a } else { a.clone() });
        let (m0, v0) = update(&x, &rm, &rv, &a, pytorch);
        let (m1, v1) = update(&x, &(&rm + &d), &(&rv + &d), &a, pytorch);
        let dq = QSqrt::rational(d);
        prop_assert_eq!(m1 - m0, w_old.clone() * dq.clone());
        prop_assert_eq!(v1 - v0, w_old * dq);
    }

    /// Through `Problem` on every layout: each channel's update of its own cells.
    #[test]
    fn problem_running_update_is_per_channel(
        (layout, shape) in any_layout().prop_flat_map(|l| (Just(l), shape(l))),
        a in momentum(), pytorch in any::<bool>(), vals in vec(scalar(), 512), stats in vec((scalar(), nonneg()), 8),
    ) {
        let g = Geometry::new(layout, &shape, 1 << 20).unwrap();
        prop_assume!(g.len() <= 512 && g.c <= 8);
        let x: Vec<Rational> = vals[..g.len()].to_vec();
        let conv = if pytorch { Convention::Pytorch } else { Convention::Onnx };
        let inputs: BTreeMap<String, Vec<QSqrt>> = [
            ("x", qv(&x)),
            ("running_mean", stats[..g.c].iter().map(|s| QSqrt::rational(s.0.clone())).collect()),
            ("running_var", stats[..g.c].iter().map(|s| QSqrt::rational(s.1.clone())).collect()),
        ].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let params = Params { momentum: Some(a.clone()), convention: Some(conv) };
        let out = Problem::new_with_params(Op::RunningUpdate, g.clone(), int(0), inputs, params)
            .unwrap().evaluate().unwrap();
        for c in 0..g.c {
            let cells: Vec<Rational> = (0..g.m).map(|k| x[g.offset(c, k)].clone()).collect();
            let want = update(&cells, &stats[c].0, &stats[c].1, &a, pytorch);
            prop_assert_eq!((out["new_mean"][c].clone(), out["new_var"][c].clone()), want);
        }
    }
}

/// m = 1 in the PyTorch convention is defined: the Bessel factor is 1, the batch variance 0,
/// so `new_var = (1 − a)·running_var` (PyTorch itself refuses one value per channel).
#[test]
fn pytorch_single_cell_is_defined() {
    let (mean, var) = update(&[int(5)], &int(1), &int(2), &frac(1, 10), true);
    assert_eq!(mean.to_string(), "7/5"); // 0.9·1 + 0.1·5
    assert_eq!(var.to_string(), "9/5"); // 0.9·2 + 0.1·0
}

/// Bad parameters are errors naming the field, not panics.
#[test]
fn bad_parameters_are_named() {
    let inputs: BTreeMap<String, Vec<QSqrt>> = [
        ("x", qv(&[int(1), int(2)])),
        ("running_mean", qv(&[int(0)])),
        ("running_var", qv(&[int(1)])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let g = Geometry::new(Layout::Rows, &[1, 2], 64).unwrap();
    let run = |p: Params| {
        Problem::new_with_params(Op::RunningUpdate, g.clone(), int(0), inputs.clone(), p)
            .unwrap_err()
            .to_string()
    };
    let e = run(Params {
        momentum: Some(frac(3, 2)),
        convention: Some(Convention::Onnx),
    });
    assert!(e.starts_with("momentum:"), "{e}");
    let e = run(Params {
        momentum: Some(frac(1, 2)),
        convention: None,
    });
    assert!(e.starts_with("convention:"), "{e}");
    let counts = |c: Vec<QSqrt>| -> String {
        let inputs: BTreeMap<String, Vec<QSqrt>> = [
            ("shard_count", c),
            ("shard_mean", qv(&[int(1), int(2)])),
            ("shard_m2", qv(&[int(1), int(4)])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Problem::new(Op::SyncStats, g.clone(), int(0), inputs)
            .unwrap_err()
            .to_string()
    };
    assert!(counts(qv(&[int(0), int(0)])).contains("sum to 0"));
    assert!(counts(qv(&[frac(1, 2), int(1)])).starts_with("inputs.shard_count[0]"));
    assert!(counts(qv(&[int(-1), int(1)])).starts_with("inputs.shard_count[0]"));
}
