//! Sync BN identities for R ∈ {1,2,3,4} equal shards of an [N,C,H,W] batch (the N axis split
//! into R slices), exactly (docs/DESIGN.md §2, seed S26, S29–S31):
//!
//! - the all-reduced `mean` (mean of shard means) and `m2` (mean of shard E[x²]) are the
//!   union's mean and E[x²]; sync forward on each shard == that shard's slice of the global
//!   forward;
//! - sync backward with the four all-reduced statistics (`mean_dy_xhat` irrational, in
//!   Q(sqrt(q))) == the slice of the global backward dx; Σ_shards sync dgamma == global
//!   dgamma; Σ dbeta == global dbeta; the same through `Problem` on nchw and nhwc;
//! - negatives, as checked expectations: a search must FIND a case where the mean of the
//!   shards' variances is not the union's variance, and one where the shard-local dgamma
//!   (S15) differs from the sync dgamma (S30); the test fails if none is found.
//!
//! Cases per property: `PROPTEST_CASES`, or 256.

mod common;

use bnconf_spec::channel as ch;
use bnconf_spec::exact::fmt_rational;
use bnconf_spec::layout::bnchw_fwd;
use bnconf_spec::per_channel::{self as pc, SyncStats};
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt, Rational};
use common::*;
use proptest::collection::vec;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt;

/// A global [N,C,H,W] batch of R shards of `ns` examples each.
#[derive(Clone)]
struct SCase {
    r: usize,
    ns: usize,
    c: usize,
    h: usize,
    w: usize,
    eps: Rational,
    /// Global x, dy in [N,C,H,W] order, N = r·ns.
    x: Vec<Rational>,
    dy: Vec<Rational>,
    gamma: Vec<Rational>,
    beta: Vec<Rational>,
}

impl fmt::Debug for SCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCase {{ R: {}, shard [N,C,H,W]: [{}, {}, {}, {}], eps: {}, x (nchw): {:?}, dy: {:?}, \
             gamma: {:?}, beta: {:?} }}",
            self.r,
            self.ns,
            self.c,
            self.h,
            self.w,
            fmt_rational(&self.eps),
            Rs(&self.x),
            Rs(&self.dy),
            Rs(&self.gamma),
            Rs(&self.beta)
        )
    }
}

/// The four all-reduced per-channel statistics.
struct AllReduced {
    mean: Vec<QSqrt>,
    m2: Vec<QSqrt>,
    mean_dy: Vec<QSqrt>,
    mean_dy_xhat: Vec<QSqrt>,
}

impl AllReduced {
    fn stats(&self) -> SyncStats<'_, QSqrt> {
        SyncStats {
            mean: &self.mean,
            m2: &self.m2,
            mean_dy: &self.mean_dy,
            mean_dy_xhat: &self.mean_dy_xhat,
        }
    }
}

fn mean_of(v: &[QSqrt]) -> QSqrt {
    sum(v) / QSqrt::int(v.len() as i64)
}

impl SCase {
    fn hw(&self) -> usize {
        self.h * self.w
    }
    fn n(&self) -> usize {
        self.r * self.ns
    }
    fn shard_len(&self) -> usize {
        self.ns * self.c * self.hw()
    }
    fn eps_q(&self) -> QSqrt {
        QSqrt::rational(self.eps.clone())
    }
    /// Shard s of a global [N,C,H,W] tensor: a contiguous slice.
    fn slice<T: Clone>(&self, v: &[T], s: usize) -> Vec<T> {
        v[s * self.shard_len()..(s + 1) * self.shard_len()].to_vec()
    }
    /// Shard s of x, dy, in the shard's matrix view [C, ns·H·W].
    fn shard_mat(&self, s: usize) -> (Vec<QSqrt>, Vec<QSqrt>) {
        let (ns, c, hw) = (self.ns, self.c, self.hw());
        (
            bnchw_fwd(ns, c, hw, &qv(&self.slice(&self.x, s))),
            bnchw_fwd(ns, c, hw, &qv(&self.slice(&self.dy, s))),
        )
    }
    /// The global matrix view [C, N·H·W] of x, dy.
    fn global_mat(&self) -> (Vec<QSqrt>, Vec<QSqrt>) {
        let (n, c, hw) = (self.n(), self.c, self.hw());
        (
            bnchw_fwd(n, c, hw, &qv(&self.x)),
            bnchw_fwd(n, c, hw, &qv(&self.dy)),
        )
    }
    /// What an all-reduce (mean over replicas) of the shards' local statistics gives;
    /// mean(dy·xhat) uses xhat at the all-reduced mean and m2 (irrational, in Q(sqrt(q))).
    fn all_reduce(&self) -> AllReduced {
        let mc = self.ns * self.hw();
        let rr = QSqrt::int(self.r as i64);
        let shards: Vec<_> = (0..self.r).map(|s| self.shard_mat(s)).collect();
        let per = |f: &dyn Fn(&[QSqrt], &[QSqrt]) -> QSqrt| -> Vec<QSqrt> {
            (0..self.c)
                .map(|k| {
                    let t: Vec<QSqrt> = shards
                        .iter()
                        .map(|(x, dy)| f(&x[k * mc..(k + 1) * mc], &dy[k * mc..(k + 1) * mc]))
                        .collect();
                    sum(&t) / rr.clone()
                })
                .collect()
        };
        let mean = per(&|x, _| mean_of(x));
        let m2 = per(&|x, _| mean_of(&x.iter().map(|e| e * e).collect::<Vec<_>>()));
        let mean_dy = per(&|_, dy| mean_of(dy));
        let eps = self.eps_q();
        let r: Vec<QSqrt> = (0..self.c)
            .map(|k| ch::inv_std(&ch::sync_var(&mean[k], &m2[k]), &eps))
            .collect();
        let mean_dy_xhat = (0..self.c)
            .map(|k| {
                let t: Vec<QSqrt> = shards
                    .iter()
                    .map(|(x, dy)| {
                        let xh = ch::xhat(&x[k * mc..(k + 1) * mc], &mean[k], &r[k]);
                        let p: Vec<QSqrt> = xh
                            .iter()
                            .zip(&dy[k * mc..(k + 1) * mc])
                            .map(|(a, b)| a * b)
                            .collect();
                        mean_of(&p)
                    })
                    .collect();
                sum(&t) / rr.clone()
            })
            .collect();
        AllReduced {
            mean,
            m2,
            mean_dy,
            mean_dy_xhat,
        }
    }
}

/// R shards (R in `rs`), each of `ns ≤ 2` examples, C ≤ 3, H, W ≤ 2; each shard's channel
/// drawn separately (so shards may differ in kind: one constant, one with a large mean...).
fn scase(rs: std::ops::RangeInclusive<usize>, force_pos_eps: bool) -> BoxedStrategy<SCase> {
    (rs, 1usize..=2, 1usize..=3, 1usize..=2, 1usize..=2)
        .prop_flat_map(|(r, ns, c, h, w)| {
            let mc = ns * h * w;
            (
                Just((r, ns, c, h, w)),
                vec(vec(cells(mc), c), r),
                vec(vec(cells(mc), c), r),
                vec(scalar(), c),
                vec(scalar(), c),
            )
        })
        .prop_flat_map(move |(dims, xs, dys, gamma, beta)| {
            let (r, _, c, _, _) = dims;
            let constant = (0..c)
                .any(|k| is_constant(&(0..r).flat_map(|s| xs[s][k].clone()).collect::<Vec<_>>()));
            (
                Just((dims, xs, dys, gamma, beta)),
                eps(force_pos_eps || constant),
            )
        })
        .prop_map(|(((r, ns, c, h, w), xs, dys, gamma, beta), eps)| {
            // global matrix view: row k = shard 0's cells, then shard 1's, ...
            let to_nchw = |parts: Vec<Vec<Vec<Rational>>>| {
                let mat: Vec<Rational> = (0..c)
                    .flat_map(|k| {
                        parts
                            .iter()
                            .flat_map(move |p| p[k].clone())
                            .collect::<Vec<_>>()
                    })
                    .collect();
                Geometry::new(Layout::Nchw, &[r * ns, c, h, w], 1 << 20)
                    .unwrap()
                    .from_mat(&mat)
            };
            SCase {
                r,
                ns,
                c,
                h,
                w,
                eps,
                x: to_nchw(xs),
                dy: to_nchw(dys),
                gamma,
                beta,
            }
        })
        .boxed()
}

/// Global and shard geometries of a layout with a batch axis (nchw, nhwc), and a tensor's
/// data in that layout (from the global nchw data).
fn geoms(sc: &SCase, layout: Layout) -> (Geometry, Geometry) {
    let shape = |n: usize| match layout {
        Layout::Nchw => vec![n, sc.c, sc.h, sc.w],
        Layout::Nhwc => vec![n, sc.h, sc.w, sc.c],
        _ => unreachable!(),
    };
    (
        Geometry::new(layout, &shape(sc.n()), 1 << 20).unwrap(),
        Geometry::new(layout, &shape(sc.ns), 1 << 20).unwrap(),
    )
}

fn problem(op: Op, geom: Geometry, eps: &Rational, inputs: Vec<(&str, Vec<QSqrt>)>) -> Problem {
    let inputs: BTreeMap<String, Vec<QSqrt>> = inputs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    Problem::new(op, geom, eps.clone(), inputs).expect("valid problem")
}

/// Sync forward and backward through `Problem` on each shard (nchw and nhwc) == slices of the
/// global forward / backward; Σ dgamma, Σ dbeta == global. Returns whether some handed-in
/// `mean_dy_xhat` was irrational.
fn check_problem_sync(sc: &SCase) -> Result<bool, TestCaseError> {
    let ar = sc.all_reduce();
    let nchw = Geometry::new(Layout::Nchw, &[sc.n(), sc.c, sc.h, sc.w], 1 << 20).unwrap();
    let (g, b) = (qv(&sc.gamma), qv(&sc.beta));
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let (gg, gs) = geoms(sc, layout);
        // global data in this layout, via the matrix view
        let x = gg.from_mat(&nchw.to_mat(&qv(&sc.x)));
        let dy = gg.from_mat(&nchw.to_mat(&qv(&sc.dy)));
        let fwd = eval(
            "global forward",
            sc,
            &problem(
                Op::Forward,
                gg.clone(),
                &sc.eps,
                vec![("x", x.clone()), ("gamma", g.clone()), ("beta", b.clone())],
            ),
        )?;
        let bwd = eval(
            "global backward",
            sc,
            &problem(
                Op::Backward,
                gg.clone(),
                &sc.eps,
                vec![("x", x.clone()), ("dy", dy.clone()), ("gamma", g.clone())],
            ),
        )?;
        let (mut dg, mut db) = (vec![QSqrt::int(0); sc.c], vec![QSqrt::int(0); sc.c]);
        for s in 0..sc.r {
            let (xs, dys) = (sc.slice(&x, s), sc.slice(&dy, s));
            let what = format!("{} shard {s}", layout.name());
            let sf = eval(
                &what,
                sc,
                &problem(
                    Op::SyncForward,
                    gs.clone(),
                    &sc.eps,
                    vec![
                        ("x", xs.clone()),
                        ("gamma", g.clone()),
                        ("beta", b.clone()),
                        ("mean", ar.mean.clone()),
                        ("m2", ar.m2.clone()),
                    ],
                ),
            )?;
            eq_vec(
                &format!("Problem sync_forward {what} vs slice of global forward"),
                sc,
                &sc.slice(&fwd["y"], s),
                &sf["y"],
            )?;
            let sb = eval(
                &what,
                sc,
                &problem(
                    Op::SyncBackward,
                    gs.clone(),
                    &sc.eps,
                    vec![
                        ("x", xs),
                        ("dy", dys),
                        ("gamma", g.clone()),
                        ("mean", ar.mean.clone()),
                        ("m2", ar.m2.clone()),
                        ("mean_dy", ar.mean_dy.clone()),
                        ("mean_dy_xhat", ar.mean_dy_xhat.clone()),
                    ],
                ),
            )?;
            eq_vec(
                &format!("Problem sync_backward {what} dx vs slice of global dx"),
                sc,
                &sc.slice(&bwd["dx"], s),
                &sb["dx"],
            )?;
            for k in 0..sc.c {
                dg[k] = &dg[k] + &sb["dgamma"][k];
                db[k] = &db[k] + &sb["dbeta"][k];
            }
        }
        eq_vec(
            &format!("{}: Σ shards sync dgamma vs global dgamma", layout.name()),
            sc,
            &bwd["dgamma"],
            &dg,
        )?;
        eq_vec(
            &format!("{}: Σ shards dbeta vs global dbeta", layout.name()),
            sc,
            &bwd["dbeta"],
            &db,
        )?;
    }
    Ok(ar.mean_dy_xhat.iter().any(|v| !v.is_rational()))
}

proptest! {
    #![proptest_config(config())]

    /// All-reduced mean and m2 are the union's mean and E[x²] (so m2 − mean² is the union's
    /// variance); sync forward S26 on each shard == the shard's slice of the global S25.
    /// With R = 1 the mean of the shard variances is the union's variance.
    #[test]
    fn sync_forward_on_shards_equals_global_slice(sc in scase(1..=4, false)) {
        let ar = sc.all_reduce();
        let (gx, _) = sc.global_mat();
        let m = sc.n() * sc.hw();
        for k in 0..sc.c {
            let (mu, var) = ch::batch_stats(&gx[k * m..(k + 1) * m]);
            eq_one(&format!("all-reduced mean, channel {k}"), &sc, &mu, &ar.mean[k])?;
            eq_one(&format!("all-reduced m2 - mean², channel {k}"), &sc, &var,
                &ch::sync_var(&ar.mean[k], &ar.m2[k]))?;
        }
        if sc.r == 1 {
            let (x0, _) = sc.shard_mat(0);
            eq_vec("R = 1: shard variance vs union variance", &sc,
                &gx.chunks(m).map(|r| ch::batch_stats(r).1).collect::<Vec<_>>(),
                &x0.chunks(m).map(|r| ch::batch_stats(r).1).collect::<Vec<_>>())?;
        }
        let (g, b, e) = (qv(&sc.gamma), qv(&sc.beta), sc.eps_q());
        let y = ok("S25", &sc, pc::bn_batch_tensor4(sc.n(), sc.c, sc.hw(), &qv(&sc.x), &g, &b, &e))?;
        for s in 0..sc.r {
            let ys = ok("S26", &sc, pc::sync_bn_batch_tensor4(sc.ns, sc.c, sc.hw(),
                &qv(&sc.slice(&sc.x, s)), &g, &b, &ar.mean, &ar.m2, &e))?;
            eq_vec(&format!("S26 on shard {s} vs slice of global S25"), &sc, &sc.slice(&y, s), &ys)?;
        }
    }

    /// Sync backward with the four all-reduced statistics: S31 on each shard == the slice of
    /// the global S28 dx, S29 on the shard's matrix view likewise; Σ_shards S30 == global S15,
    /// Σ_shards S16 == global S16. With R = 1, S15 == S30 on the shard.
    #[test]
    fn sync_backward_on_shards_equals_global_slice(sc in scase(1..=4, false)) {
        let ar = sc.all_reduce();
        let (g, e) = (qv(&sc.gamma), sc.eps_q());
        let (n, c, hw) = (sc.n(), sc.c, sc.hw());
        let (gx, gdy) = sc.global_mat();
        // the all-reduced mean(dy·xhat) is the union's
        let m = n * hw;
        for k in 0..c {
            let r = ch::inv_std(&ch::sync_var(&ar.mean[k], &ar.m2[k]), &e);
            let xh = ch::xhat(&gx[k * m..(k + 1) * m], &ar.mean[k], &r);
            let p: Vec<QSqrt> = xh.iter().zip(&gdy[k * m..(k + 1) * m]).map(|(a, b)| a * b).collect();
            eq_one(&format!("all-reduced mean(dy·xhat), channel {k}"), &sc, &mean_of(&p),
                &ar.mean_dy_xhat[k])?;
        }
        let dx = ok("S28", &sc, pc::bn_batch_tensor4_grad_input(n, c, hw, &qv(&sc.x), &qv(&sc.dy), &g, &e))?;
        let dg = ok("S15", &sc, pc::bn_per_channel_grad_gamma(c, &gx, &gdy, &e))?;
        let db = pc::bn_per_channel_grad_beta(c, &gdy);
        let (mut sdg, mut sdb) = (vec![QSqrt::int(0); c], vec![QSqrt::int(0); c]);
        for s in 0..sc.r {
            let (xs, dys) = (qv(&sc.slice(&sc.x, s)), qv(&sc.slice(&sc.dy, s)));
            let s31 = ok("S31", &sc, pc::sync_bn_batch_tensor4_grad_input(sc.ns, c, hw, &xs, &dys, &g,
                &ar.stats(), &e))?;
            eq_vec(&format!("S31 on shard {s} vs slice of global S28"), &sc, &sc.slice(&dx, s), &s31)?;
            let (xm, dym) = sc.shard_mat(s);
            let s29 = ok("S29", &sc, pc::sync_bn_per_channel_grad_input(c, &xm, &dym, &g, &ar.stats(), &e))?;
            eq_vec(&format!("S29 on shard {s} vs global dx slice (matrix view)"), &sc,
                &bnchw_fwd(sc.ns, c, hw, &sc.slice(&dx, s)), &s29)?;
            let s30 = ok("S30", &sc, pc::sync_bn_per_channel_grad_gamma(c, &xm, &dym, &ar.mean, &ar.m2, &e))?;
            if sc.r == 1 {
                let s15 = ok("S15 on the shard", &sc, pc::bn_per_channel_grad_gamma(c, &xm, &dym, &e))?;
                eq_vec("R = 1: shard-local dgamma S15 vs sync dgamma S30", &sc, &s15, &s30)?;
            }
            let s16 = pc::bn_per_channel_grad_beta(c, &dym);
            for k in 0..c {
                sdg[k] = &sdg[k] + &s30[k];
                sdb[k] = &sdb[k] + &s16[k];
            }
        }
        eq_vec("Σ shards S30 vs global S15", &sc, &dg, &sdg)?;
        eq_vec("Σ shards S16 vs global S16", &sc, &db, &sdb)?;
    }

    /// The same identities through `Problem` (Op::SyncForward / SyncBackward) on nchw and nhwc,
    /// the statistics handed in as exact values, `mean_dy_xhat` irrational.
    #[test]
    fn sync_through_problem(sc in scase(1..=4, false)) {
        check_problem_sync(&sc)?;
    }
}

/// A fixed case whose handed-in `mean_dy_xhat` is irrational (q = 35/16 is no square), so
/// `Problem` is known to take the irrational path at least once.
#[test]
fn sync_through_problem_irrational_mean_dy_xhat() {
    let sc = SCase {
        r: 2,
        ns: 1,
        c: 1,
        h: 1,
        w: 2,
        eps: int(0),
        x: vec![int(1), int(2), int(3), int(5)],
        dy: vec![int(1), int(0), int(0), int(2)],
        gamma: vec![frac(3, 2)],
        beta: vec![int(-1)],
    };
    let irrational = check_problem_sync(&sc).unwrap_or_else(|e| panic!("{e}"));
    assert!(irrational, "expected an irrational mean_dy_xhat for {sc:?}");
}

/// Negative (seed S26 ⚠): the mean of the shards' variances is NOT the union's variance.
/// The search must find a counterexample (R ≥ 2); in it, the mean of the shards' E[x²] still
/// gives the union's variance exactly.
#[test]
fn negative_mean_of_shard_variances_is_not_union_variance() {
    let shard_vars = |sc: &SCase| -> (Vec<QSqrt>, Vec<QSqrt>) {
        let mc = sc.ns * sc.hw();
        let m = sc.n() * sc.hw();
        let (gx, _) = sc.global_mat();
        let union: Vec<QSqrt> = gx.chunks(m).map(|r| ch::batch_stats(r).1).collect();
        let mean_of_vars = (0..sc.c)
            .map(|k| {
                let v: Vec<QSqrt> = (0..sc.r)
                    .map(|s| ch::batch_stats(&sc.shard_mat(s).0[k * mc..(k + 1) * mc]).1)
                    .collect();
                mean_of(&v)
            })
            .collect();
        (union, mean_of_vars)
    };
    let sc = find_counterexample(
        "mean of shard variances == union variance",
        scase(2..=4, false),
        |sc| {
            let (union, mean_of_vars) = shard_vars(&sc);
            eq_vec(
                "mean of shard variances vs union variance",
                &sc,
                &union,
                &mean_of_vars,
            )
        },
    );
    let (union, mean_of_vars) = shard_vars(&sc);
    assert_ne!(union, mean_of_vars, "{sc:?}");
    let ar = sc.all_reduce();
    let via_m2: Vec<QSqrt> = (0..sc.c)
        .map(|k| ch::sync_var(&ar.mean[k], &ar.m2[k]))
        .collect();
    assert_eq!(
        union,
        via_m2,
        "m2 - mean² should be the union variance for {sc:?}: union {}, via m2 {}",
        show(&union),
        show(&via_m2)
    );
}

/// Negative (seed S30 ⭐⭐): dgamma from the shard's own statistics (S15 on the shard)
/// differs from the sync dgamma (S30, all-reduced statistics) once R > 1. The search must
/// find a shard where they differ; the sync dgammas still sum to the global dgamma.
#[test]
fn negative_shard_local_dgamma_differs_from_sync() {
    let local_and_sync = |sc: &SCase| -> Vec<(Vec<QSqrt>, Vec<QSqrt>)> {
        let ar = sc.all_reduce();
        let e = sc.eps_q();
        (0..sc.r)
            .map(|s| {
                let (xm, dym) = sc.shard_mat(s);
                (
                    pc::bn_per_channel_grad_gamma(sc.c, &xm, &dym, &e).unwrap(),
                    pc::sync_bn_per_channel_grad_gamma(sc.c, &xm, &dym, &ar.mean, &ar.m2, &e)
                        .unwrap(),
                )
            })
            .collect()
    };
    let sc = find_counterexample(
        "shard-local dgamma == sync dgamma",
        scase(2..=4, true),
        |sc| {
            for (s, (local, sync)) in local_and_sync(&sc).iter().enumerate() {
                eq_vec(&format!("shard {s}: S15 vs S30"), &sc, sync, local)?;
            }
            Ok(())
        },
    );
    let pairs = local_and_sync(&sc);
    assert!(pairs.iter().any(|(l, s)| l != s), "{sc:?}");
    let (gx, gdy) = sc.global_mat();
    let global = pc::bn_per_channel_grad_gamma(sc.c, &gx, &gdy, &sc.eps_q()).unwrap();
    let summed: Vec<QSqrt> = (0..sc.c)
        .map(|k| sum(&pairs.iter().map(|(_, s)| s[k].clone()).collect::<Vec<_>>()))
        .collect();
    assert_eq!(global, summed, "Σ sync dgamma vs global for {sc:?}");
}
