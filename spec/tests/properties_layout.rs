//! Layout bridges (docs/DESIGN.md §2): index bijections whose round trips are identities (reassoc is
//! the identity on flat offsets); the VJP of a gather is the scatter (`<Px, y> = <x, P^T y>`
//! exactly, S17); every layout op is `bridge⁻¹ ∘ flat op ∘ bridge` and equals the seed item
//! of its layout; inference BN fed the batch statistics is the training forward.
//!
//! Cases per property: `PROPTEST_CASES`, or 256. All comparisons are exact.

mod common;

use bnconf_spec::channel as ch;
use bnconf_spec::layout::{
    bnchw_back, bnchw_fwd, bnchw_transpose_back, bnchw_transpose_fwd, gather, mat_to_tensor3,
    reassoc_back, reassoc_fwd, reindex_vjp, tensor3_to_mat,
};
use bnconf_spec::num::Dual;
use bnconf_spec::per_channel::{self as pc, SyncStats};
use bnconf_spec::vjp::{jacobian, transpose_apply};
use bnconf_spec::{Layout, Op, QSqrt, SpecError};
use common::*;
use proptest::collection::vec;
use proptest::prelude::*;

type D = Dual<QSqrt>;

/// Values of one field Q(sqrt(3)) (so inner products may mix them): `a + b·sqrt(3)`.
fn field_vec(n: usize) -> impl Strategy<Value = Vec<QSqrt>> {
    vec((scalar(), prop_oneof![Just(int(0)), scalar()]), n).prop_map(|v| {
        v.into_iter()
            .map(|(a, b)| QSqrt::new(a, b, int(3)))
            .collect()
    })
}

fn is_permutation(p: &[usize]) -> bool {
    let mut s = p.to_vec();
    s.sort_unstable();
    s.iter().enumerate().all(|(i, &v)| i == v)
}

fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &j) in p.iter().enumerate() {
        inv[j] = i;
    }
    inv
}

/// A gather map and vectors for the adjointness test: the bridge permutations of a random
/// geometry plus an arbitrary (not injective, not surjective) index map.
#[derive(Debug, Clone)]
struct AdjCase {
    shape3: (usize, usize, usize),
    shape4: (usize, usize, usize),
    arbitrary: (usize, Vec<usize>),
}

fn adj_case() -> impl Strategy<Value = AdjCase> {
    (
        (1usize..=3, 1usize..=3, 1usize..=3),
        (1usize..=3, 1usize..=3, 1usize..=4),
        (1usize..=8, 1usize..=8),
    )
        .prop_flat_map(|(s3, s4, (n_in, n_out))| {
            (Just(s3), Just(s4), Just(n_in), vec(0..n_in, n_out))
        })
        .prop_map(|(shape3, shape4, n_in, idx)| AdjCase {
            shape3,
            shape4,
            arbitrary: (n_in, idx),
        })
}

/// Check `<P x, y> = <x, P^T y>` with P the gather by `perm` and P^T = S17, and that S17 is
/// J^T y of the gather (the Jacobian from the definition by dual numbers).
fn check_adjoint(
    what: &str,
    perm: &[usize],
    n_in: usize,
    x: &[QSqrt],
    y: &[QSqrt],
) -> Result<(), TestCaseError> {
    let inputs = format!("perm {perm:?}, x {}, y {}", show(x), show(y));
    let px = gather(perm, x);
    let pty = reindex_vjp(perm, y, n_in, QSqrt::int(0));
    eq_one(
        &format!("{what}: <P x, y> vs <x, P^T y>"),
        &inputs,
        &dot(&px, y),
        &dot(x, &pty),
    )?;
    let j = jacobian(|xs: &[D]| Ok::<_, SpecError>(gather(perm, xs)), x).unwrap();
    eq_vec(
        &format!("{what}: S17 reindex_vjp vs J^T y of the gather"),
        &inputs,
        &transpose_apply(&j, y, n_in),
        &pty,
    )
}

proptest! {
    #![proptest_config(config())]

    /// S7/S8: reassoc maps the Mat-split offset c·(h·w) + (hi·w + wi) to the Tensor3 offset
    /// (c·h + hi)·w + wi — the same number: the identity on flat offsets.
    #[test]
    fn reassoc_is_identity_on_flat_offsets(oc in 1usize..=5, h in 1usize..=5, w in 1usize..=5) {
        for c in 0..oc {
            for hi in 0..h {
                for wi in 0..w {
                    let mat = c * (h * w) + (hi * w + wi);
                    let t3 = (c * h + hi) * w + wi;
                    prop_assert_eq!(reassoc_fwd(h * w, mat), t3, "S7 at (c,hi,wi)=({},{},{})", c, hi, wi);
                    prop_assert_eq!(reassoc_back(h * w, t3), mat, "S8 at (c,hi,wi)=({},{},{})", c, hi, wi);
                    prop_assert_eq!(mat, t3);
                }
            }
        }
    }

    /// S7∘S8 and S8∘S7, S21∘S22 and S22∘S21 are the identity on indices; S21 is a
    /// permutation sending (c,(n,s)) to (n,(c,s)).
    #[test]
    fn index_round_trips_are_identities(oc in 1usize..=4, n in 1usize..=4, hw in 1usize..=6) {
        let len = oc * n * hw;
        for i in 0..len {
            prop_assert_eq!(reassoc_back(hw, reassoc_fwd(hw, i)), i, "S8∘S7 at {}", i);
            prop_assert_eq!(reassoc_fwd(hw, reassoc_back(hw, i)), i, "S7∘S8 at {}", i);
            let j = bnchw_transpose_fwd(oc, n, hw, i);
            prop_assert_eq!(bnchw_transpose_back(oc, n, hw, j), i, "S22∘S21 at {}", i);
            prop_assert_eq!(bnchw_transpose_fwd(oc, n, hw, bnchw_transpose_back(oc, n, hw, i)), i,
                "S21∘S22 at {}", i);
            let (c, b, s) = (i / (n * hw), (i / hw) % n, i % hw);
            prop_assert_eq!(j, (b * oc + c) * hw + s, "S21 at (c,n,s)=({},{},{})", c, b, s);
        }
        let p: Vec<usize> = (0..len).map(|i| bnchw_transpose_fwd(oc, n, hw, i)).collect();
        prop_assert!(is_permutation(&p), "S21 is not a permutation: {:?}", p);
    }

    /// Data round trips: S10∘S9, S9∘S10 (Tensor3), S24∘S23, S23∘S24 ([N,C,H,W]) and
    /// Geometry::from_mat∘to_mat, to_mat∘from_mat (every layout) are identities; the seed
    /// bridges are the Geometry bridges of chw and nchw.
    #[test]
    fn data_round_trips_are_identities(
        t3 in case(Layout::Chw), t4 in case(Layout::Nchw), any in case_any_layout()
    ) {
        let (oc, h, w) = (t3.geom.shape[0], t3.geom.shape[1], t3.geom.shape[2]);
        let x = qv(&t3.x);
        let mat = tensor3_to_mat(oc, h, w, &x);
        eq_vec("S10∘S9", &t3, &x, &mat_to_tensor3(oc, h, w, &mat))?;
        eq_vec("S9∘S10", &t3, &x, &tensor3_to_mat(oc, h, w, &mat_to_tensor3(oc, h, w, &x)))?;
        eq_vec("S9 vs Geometry(chw)::to_mat", &t3, &t3.geom.to_mat(&x), &mat)?;

        let g = &t4.geom;
        let x = qv(&t4.x);
        let mat = bnchw_fwd(g.n, g.c, g.hw, &x);
        eq_vec("S24∘S23", &t4, &x, &bnchw_back(g.n, g.c, g.hw, &mat))?;
        eq_vec("S23∘S24", &t4, &x, &bnchw_fwd(g.n, g.c, g.hw, &bnchw_back(g.n, g.c, g.hw, &x)))?;
        eq_vec("S23 vs Geometry(nchw)::to_mat", &t4, &g.to_mat(&x), &mat)?;
        eq_vec("S24 vs Geometry(nchw)::from_mat", &t4, &g.from_mat(&x),
            &bnchw_back(g.n, g.c, g.hw, &x))?;

        let g = &any.geom;
        let x = qv(&any.x);
        prop_assert!(is_permutation(&g.to_mat_perm()), "{:?}: bridge not a permutation", g);
        eq_vec("from_mat∘to_mat", &any, &x, &g.from_mat(&g.to_mat(&x)))?;
        eq_vec("to_mat∘from_mat", &any, &x, &g.to_mat(&g.from_mat(&x)))?;
        // the gather reads cell k of channel c at offset(c, k)
        let mat = g.to_mat(&x);
        for c in 0..g.c {
            for k in 0..g.m {
                eq_one(&format!("to_mat at ({c},{k})"), &any, &x[g.offset(c, k)], &mat[c * g.m + k])?;
            }
        }
    }

    /// Gather/scatter adjointness `<P x, y> = <x, P^T y>`, exactly, for P the gather of every
    /// bridge (S9, S10, S23, S24, Geometry::to_mat / from_mat of every layout) and of an
    /// arbitrary index map, P^T = S17 `reindex_vjp`; S17 is also J^T y of the gather.
    #[test]
    fn gather_scatter_adjoint(
        a in adj_case(), any in case_any_layout(), xs in field_vec(48), ys in field_vec(48)
    ) {
        let (oc, h, w) = a.shape3;
        let len3 = oc * h * w;
        let s9: Vec<usize> = (0..len3).map(|i| reassoc_fwd(h * w, i)).collect();
        let s10 = inverse(&(0..len3).map(|i| reassoc_back(h * w, i)).collect::<Vec<_>>());
        check_adjoint("S9", &s9, len3, &xs[..len3], &ys[..len3])?;
        check_adjoint("S10", &s10, len3, &xs[..len3], &ys[..len3])?;
        let (c, n, hw) = a.shape4;
        let len4 = c * n * hw;
        let s23: Vec<usize> = (0..len4).map(|i| bnchw_transpose_fwd(c, n, hw, i)).collect();
        let s24: Vec<usize> = (0..len4).map(|i| bnchw_transpose_back(c, n, hw, i)).collect();
        check_adjoint("S23", &s23, len4, &xs[..len4], &ys[..len4])?;
        check_adjoint("S24", &s24, len4, &xs[..len4], &ys[..len4])?;
        // S23/S24 gather by exactly these maps
        eq_vec("S23 = gather", &a, &gather(&s23, &xs[..len4]), &bnchw_fwd(n, c, hw, &xs[..len4]))?;
        eq_vec("S24 = gather", &a, &gather(&s24, &xs[..len4]), &bnchw_back(n, c, hw, &xs[..len4]))?;
        let g = &any.geom;
        let p = g.to_mat_perm();
        check_adjoint(&format!("to_mat {}", g.layout.name()), &p, g.len(), &xs[..g.len()], &ys[..g.len()])?;
        check_adjoint(&format!("from_mat {}", g.layout.name()), &inverse(&p), g.len(),
            &xs[..g.len()], &ys[..g.len()])?;
        let (n_in, idx) = &a.arbitrary;
        check_adjoint("arbitrary index map", idx, *n_in, &xs[..*n_in], &ys[..idx.len()])?;
        // for a permutation, scatter after gather is the identity
        eq_vec("S17∘S9", &a, &xs[..len3], &reindex_vjp(&s9, &gather(&s9, &xs[..len3]), len3, QSqrt::int(0)))?;
    }

    /// Every layout op (forward, backward, eval, sync_forward, sync_backward) on any layout
    /// equals the flat op on the gathered data scattered back; and equals the seed item of
    /// its layout: S2/S4 (forward rows/flat), S18 (chw), S25 (nchw); S6, S15, S16
    /// (backward flat), S20 (chw), S28 (nchw); S12/S13 (eval rows/flat), S14 (chw); S26
    /// (sync_forward nchw); S29, S30 (sync_backward flat), S31 (nchw).
    #[test]
    fn layout_ops_are_conjugated_flat_ops(c in case_any_layout()) {
        let g = c.geom.clone();
        let flat = c.to_flat();
        let mut outs = std::collections::BTreeMap::new();
        // The seed's five ops (the statistics ops have their own properties_stats.rs).
        for op in Op::ALL.into_iter().filter(|o| o.uses_eps()) {
            let here = eval(op.name(), &c, &c.problem(op))?;
            let there = eval(op.name(), &flat, &flat.problem(op))?;
            for name in op.outputs() {
                let want = match Op::extent(name) {
                    bnconf_spec::op::Extent::Cells => g.from_mat(&there[name]),
                    bnconf_spec::op::Extent::Channel | bnconf_spec::op::Extent::Shards => there[name].clone(),
                };
                eq_vec(&format!("{} {} on {} vs flat op conjugated by the bridge", op.name(), name,
                    g.layout.name()), &c, &want, &here[name])?;
            }
            outs.insert(op, here);
        }
        let (oc, e) = (g.c, c.eps_q());
        let (xm, dym, gm, bm) = (c.x_mat(), c.dy_mat(), qv(&c.gamma), qv(&c.beta));
        let (mean, var, m2, mdy, mdx) = (qv(&c.mean), qv(&c.var), qv(&c.m2()), qv(&c.mean_dy),
            c.mean_dy_xhat());
        let stats = SyncStats { mean: &mean, m2: &m2, mean_dy: &mdy, mean_dy_xhat: &mdx };
        // forward: S2 == S4 on the matrix view; batch statistics per channel
        let y = ok("S4", &c, pc::bn_per_channel_flat(oc, &xm, &gm, &bm, &e))?;
        eq_vec("forward y vs S4", &c, &g.from_mat(&y), &outs[&Op::Forward]["y"])?;
        eq_vec("forward y vs S2", &c, &g.from_mat(&ok("S2", &c, pc::bn_per_channel(oc, &xm, &gm, &bm, &e))?),
            &outs[&Op::Forward]["y"])?;
        let (mus, vars): (Vec<QSqrt>, Vec<QSqrt>) =
            xm.chunks(g.m).map(ch::batch_stats).unzip();
        eq_vec("forward mean", &c, &mus, &outs[&Op::Forward]["mean"])?;
        eq_vec("forward var", &c, &vars, &outs[&Op::Forward]["var"])?;
        // backward: S6, S15, S16
        let dx = ok("S6", &c, pc::bn_per_channel_grad_input(oc, &xm, &dym, &gm, &e))?;
        eq_vec("backward dx vs S6", &c, &g.from_mat(&dx), &outs[&Op::Backward]["dx"])?;
        eq_vec("backward dgamma vs S15", &c, &ok("S15", &c, pc::bn_per_channel_grad_gamma(oc, &xm, &dym, &e))?,
            &outs[&Op::Backward]["dgamma"])?;
        eq_vec("backward dbeta vs S16", &c, &pc::bn_per_channel_grad_beta(oc, &dym),
            &outs[&Op::Backward]["dbeta"])?;
        // eval: S12, S13
        let ye = ok("S13", &c, pc::bn_per_channel_eval_flat(oc, &xm, &gm, &bm, &mean, &var, &e))?;
        eq_vec("eval y vs S13", &c, &g.from_mat(&ye), &outs[&Op::Eval]["y"])?;
        let ye12 = ok("S12", &c, pc::bn_per_channel_eval(oc, &xm, &gm, &bm, &mean, &var, &e))?;
        eq_vec("eval y vs S12", &c, &g.from_mat(&ye12), &outs[&Op::Eval]["y"])?;
        // sync backward: S29, S30, S16
        let sdx = ok("S29", &c, pc::sync_bn_per_channel_grad_input(oc, &xm, &dym, &gm, &stats, &e))?;
        eq_vec("sync_backward dx vs S29", &c, &g.from_mat(&sdx), &outs[&Op::SyncBackward]["dx"])?;
        eq_vec("sync_backward dgamma vs S30", &c,
            &ok("S30", &c, pc::sync_bn_per_channel_grad_gamma(oc, &xm, &dym, &mean, &m2, &e))?,
            &outs[&Op::SyncBackward]["dgamma"])?;
        eq_vec("sync_backward dbeta vs S16", &c, &pc::bn_per_channel_grad_beta(oc, &dym),
            &outs[&Op::SyncBackward]["dbeta"])?;
        // layout-native seed items
        let (x, dy) = (qv(&c.x), qv(&c.dy));
        match g.layout {
            Layout::Chw => {
                let (h, w) = (g.shape[1], g.shape[2]);
                eq_vec("forward chw vs S18", &c, &ok("S18", &c, pc::bn_per_channel_tensor3(oc, h, w, &x, &gm, &bm, &e))?,
                    &outs[&Op::Forward]["y"])?;
                eq_vec("backward chw vs S20", &c,
                    &ok("S20", &c, pc::bn_per_channel_tensor3_grad_input(oc, h, w, &x, &dy, &gm, &e))?,
                    &outs[&Op::Backward]["dx"])?;
                eq_vec("eval chw vs S14", &c,
                    &ok("S14", &c, pc::bn_per_channel_eval_tensor3(oc, h, w, &x, &gm, &bm, &mean, &var, &e))?,
                    &outs[&Op::Eval]["y"])?;
            }
            Layout::Nchw => {
                let (n, hw) = (g.n, g.hw);
                eq_vec("forward nchw vs S25", &c, &ok("S25", &c, pc::bn_batch_tensor4(n, oc, hw, &x, &gm, &bm, &e))?,
                    &outs[&Op::Forward]["y"])?;
                eq_vec("backward nchw vs S28", &c,
                    &ok("S28", &c, pc::bn_batch_tensor4_grad_input(n, oc, hw, &x, &dy, &gm, &e))?,
                    &outs[&Op::Backward]["dx"])?;
                eq_vec("sync_forward nchw vs S26", &c,
                    &ok("S26", &c, pc::sync_bn_batch_tensor4(n, oc, hw, &x, &gm, &bm, &mean, &m2, &e))?,
                    &outs[&Op::SyncForward]["y"])?;
                eq_vec("sync_backward nchw vs S31", &c,
                    &ok("S31", &c, pc::sync_bn_batch_tensor4_grad_input(n, oc, hw, &x, &dy, &gm, &stats, &e))?,
                    &outs[&Op::SyncBackward]["dx"])?;
            }
            _ => {}
        }
    }

    /// Inference BN fed the batch statistics (mean, var from the forward) is the training
    /// forward: Problem eval == Problem forward y on every layout; S11 per channel, S12/S13
    /// on the matrix view, S14 on chw; and sync forward with m2 = var + mean² (S26) too.
    #[test]
    fn eval_with_batch_stats_equals_forward(c in case_any_layout()) {
        let g = c.geom.clone();
        let fwd = eval("forward", &c, &c.problem(Op::Forward))?;
        let (mean, var) = (&fwd["mean"], &fwd["var"]);
        let m2: Vec<QSqrt> = mean.iter().zip(var).map(|(mu, v)| v + &(mu * mu)).collect();
        let mut fed = c.clone();
        fed.mean = mean.iter().map(|v| v.as_rational().unwrap().clone()).collect();
        fed.var = var.iter().map(|v| v.as_rational().unwrap().clone()).collect();
        let ev = eval("eval", &fed, &fed.problem(Op::Eval))?;
        eq_vec("eval(batch stats) vs forward y", &fed, &fwd["y"], &ev["y"])?;
        let sf = eval("sync_forward", &fed, &fed.problem(Op::SyncForward))?;
        eq_vec("sync_forward(batch mean, E[x²]) vs forward y", &fed, &fwd["y"], &sf["y"])?;
        let (oc, m, e) = (g.c, g.m, c.eps_q());
        let (xm, gm, bm) = (c.x_mat(), qv(&c.gamma), qv(&c.beta));
        let ym = g.to_mat(&fwd["y"]);
        for k in 0..oc {
            let s11 = ch::bn_eval(&xm[k * m..(k + 1) * m], &gm[k], &bm[k], &mean[k], &var[k], &e);
            eq_vec(&format!("S11 bn_eval on channel {k} vs forward"), &fed, &ym[k * m..(k + 1) * m], &s11)?;
        }
        let s12 = ok("S12", &fed, pc::bn_per_channel_eval(oc, &xm, &gm, &bm, mean, var, &e))?;
        eq_vec("S12 vs forward", &fed, &ym, &s12)?;
        let s13 = ok("S13", &fed, pc::bn_per_channel_eval_flat(oc, &xm, &gm, &bm, mean, var, &e))?;
        eq_vec("S13 vs forward", &fed, &ym, &s13)?;
        if g.layout == Layout::Chw {
            let (h, w) = (g.shape[1], g.shape[2]);
            let s14 = ok("S14", &fed,
                pc::bn_per_channel_eval_tensor3(oc, h, w, &qv(&c.x), &gm, &bm, mean, var, &e))?;
            eq_vec("S14 vs forward", &fed, &fwd["y"], &s14)?;
        }
        if g.layout == Layout::Nchw {
            let s26 = ok("S26", &fed,
                pc::sync_bn_batch_tensor4(g.n, oc, g.hw, &qv(&c.x), &gm, &bm, mean, &m2, &e))?;
            eq_vec("S26 with batch stats vs forward", &fed, &fwd["y"], &s26)?;
        }
    }
}
