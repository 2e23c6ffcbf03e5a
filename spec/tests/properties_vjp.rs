//! The VJP spec from the definition (docs/DESIGN.md §2): every closed-form backward equals `J^T dy`,
//! with `J` the exact Jacobian of the forward by dual numbers over Q(sqrt(q)); `dgamma` and
//! `dbeta` equal `J_gamma^T dy` and `J_beta^T dy`; every cross-channel Jacobian block is
//! exactly zero; the per-row lift (S1) is a block-diagonal map.
//!
//! Cases per property: `PROPTEST_CASES`, or 256. All comparisons are exact.

mod common;

use bnconf_spec::channel as ch;
use bnconf_spec::layout::Layout;
use bnconf_spec::num::{Dual, Scalar};
use bnconf_spec::per_channel as pc;
use bnconf_spec::vjp::{jacobian, transpose_apply, vjp};
use bnconf_spec::{Op, QSqrt, SpecError};
use common::*;
use proptest::prelude::*;

type D = Dual<QSqrt>;

/// `J^T dy` of the multi-channel forward S2 on the matrix view, w.r.t. x.
fn jt_dy_x(c: &Case) -> Result<Vec<QSqrt>, TestCaseError> {
    let (g, b, e) = (
        dual_consts(&c.gamma),
        dual_consts(&c.beta),
        D::constant(c.eps_q()),
    );
    let oc = c.c();
    ok(
        "vjp of S2 w.r.t. x",
        c,
        vjp(
            |xs: &[D]| pc::bn_per_channel(oc, xs, &g, &b, &e),
            &c.x_mat(),
            &c.dy_mat(),
        ),
    )
}

/// A family of per-row maps, different for each row (nonlinear, coupling the row's cells).
fn row_map<T: Scalar>(r: usize, row: &[T]) -> Vec<T> {
    let s = row.iter().fold(T::int(0), |a, e| a + e.clone());
    let k = T::int(r as i64 + 1);
    row.iter()
        .map(|e| e.clone() * e.clone() * k.clone() + e.clone() * s.clone() - T::int(r as i64))
        .collect()
}

proptest! {
    #![proptest_config(config())]

    /// S6 (closed form) == S3 == S5 == J^T dy of S2 (own Jacobian); Problem backward on
    /// rows and flat gives the same dx. Also S4 == S2 (the flat op is the same data).
    #[test]
    fn s6_grad_input_equals_jt_dy(c in case(Layout::Rows)) {
        let oc = c.c();
        let (x, dy, g, b, e) = (c.x_mat(), c.dy_mat(), qv(&c.gamma), qv(&c.beta), c.eps_q());
        let want = jt_dy_x(&c)?;
        let s3 = ok("S3", &c, pc::bn_per_channel_vjp(oc, &x, &g, &b, &e, &dy))?;
        eq_vec("S3 bn_per_channel_vjp vs J^T dy", &c, &want, &s3)?;
        let s5 = ok("S5", &c, pc::bn_per_channel_flat_vjp(oc, &x, &g, &b, &e, &dy))?;
        eq_vec("S5 bn_per_channel_flat_vjp vs J^T dy", &c, &want, &s5)?;
        let s6 = ok("S6", &c, pc::bn_per_channel_grad_input(oc, &x, &dy, &g, &e))?;
        eq_vec("S6 bn_per_channel_grad_input vs J^T dy", &c, &want, &s6)?;
        for case in [c.clone(), c.to_flat()] {
            let out = eval("backward", &case, &case.problem(Op::Backward))?;
            eq_vec("Problem backward dx vs J^T dy", &case, &want, &out["dx"])?;
        }
        let s2 = ok("S2", &c, pc::bn_per_channel(oc, &x, &g, &b, &e))?;
        let s4 = ok("S4", &c, pc::bn_per_channel_flat(oc, &x, &g, &b, &e))?;
        eq_vec("S4 bn_per_channel_flat vs S2", &c, &s2, &s4)?;
    }

    /// S15 dgamma == J_gamma^T dy and S16 dbeta == J_beta^T dy, J the Jacobian of S2's y
    /// w.r.t. gamma / beta; Problem backward's dgamma, dbeta likewise.
    #[test]
    fn dgamma_dbeta_equal_jacobian_wrt_gamma_beta(c in case(Layout::Rows)) {
        let oc = c.c();
        let (x, dy) = (c.x_mat(), c.dy_mat());
        let (xd, gd, bd, ed) = (duals(&x), dual_consts(&c.gamma), dual_consts(&c.beta),
            D::constant(c.eps_q()));
        let jg = ok("J_gamma", &c, jacobian(|g: &[D]| pc::bn_per_channel(oc, &xd, g, &bd, &ed),
            &qv(&c.gamma)))?;
        let jb = ok("J_beta", &c, jacobian(|b: &[D]| pc::bn_per_channel(oc, &xd, &gd, b, &ed),
            &qv(&c.beta)))?;
        let want_g = transpose_apply(&jg, &dy, oc);
        let want_b = transpose_apply(&jb, &dy, oc);
        let s15 = ok("S15", &c, pc::bn_per_channel_grad_gamma(oc, &x, &dy, &c.eps_q()))?;
        eq_vec("S15 bn_per_channel_grad_gamma vs J_gamma^T dy", &c, &want_g, &s15)?;
        let s16 = pc::bn_per_channel_grad_beta(oc, &dy);
        eq_vec("S16 bn_per_channel_grad_beta vs J_beta^T dy", &c, &want_b, &s16)?;
        let out = eval("backward", &c, &c.problem(Op::Backward))?;
        eq_vec("Problem backward dgamma vs J_gamma^T dy", &c, &want_g, &out["dgamma"])?;
        eq_vec("Problem backward dbeta vs J_beta^T dy", &c, &want_b, &out["dbeta"])?;
    }

    /// Block-diagonality (seed `pdivMat_rowIndep_perRow_at`): every cross-channel block of the
    /// Jacobian of S2 (w.r.t. x, gamma and beta) is exactly zero, and so is every cross-channel
    /// block of S25's Jacobian on [N,C,H,W]. The diagonal blocks equal the one-channel
    /// Jacobians.
    #[test]
    fn forward_jacobian_is_block_diagonal(c in case(Layout::Rows), t in case(Layout::Nchw)) {
        let (oc, m) = (c.c(), c.m());
        let (gd, bd, ed) = (dual_consts(&c.gamma), dual_consts(&c.beta), D::constant(c.eps_q()));
        let x = c.x_mat();
        let xd = duals(&x);
        let j = ok("J", &c, jacobian(|xs: &[D]| pc::bn_per_channel(oc, xs, &gd, &bd, &ed), &x))?;
        let jg = ok("J_gamma", &c, jacobian(|g: &[D]| pc::bn_per_channel(oc, &xd, g, &bd, &ed),
            &qv(&c.gamma)))?;
        let jb = ok("J_beta", &c, jacobian(|b: &[D]| pc::bn_per_channel(oc, &xd, &gd, b, &ed),
            &qv(&c.beta)))?;
        for (i, row) in j.iter().enumerate() {
            for (k, v) in row.iter().enumerate() {
                if i / m != k / m {
                    prop_assert!(v.is_zero(),
                        "S2: dy_{}/dx_{} = {} (channels {} and {}), inputs {:?}",
                        i, k, v, i / m, k / m, c);
                }
            }
            for (cc, (vg, vb)) in jg[i].iter().zip(&jb[i]).enumerate() {
                if i / m != cc {
                    prop_assert!(vg.is_zero() && vb.is_zero(),
                        "S2: dy_{}/dgamma_{} = {}, dy_{}/dbeta_{} = {}, inputs {:?}",
                        i, cc, vg, i, cc, vb, c);
                }
            }
        }
        for r in 0..oc {
            let row = &x[r * m..(r + 1) * m];
            let (g, b) = (D::constant(qv(&c.gamma)[r].clone()), D::constant(qv(&c.beta)[r].clone()));
            let jr = jacobian(|xs: &[D]| Ok::<_, SpecError>(ch::bn_forward(xs, &g, &b, &ed).0), row)
                .unwrap();
            for i in 0..m {
                eq_vec(&format!("S2 diagonal block {r}, row {i} vs one-channel Jacobian"), &c,
                    &jr[i], &j[r * m + i][r * m..(r + 1) * m])?;
            }
        }
        // S25 on [N,C,H,W]
        let g = &t.geom;
        let (gd, bd, ed) = (dual_consts(&t.gamma), dual_consts(&t.beta), D::constant(t.eps_q()));
        let j4 = ok("J of S25", &t, jacobian(
            |xs: &[D]| pc::bn_batch_tensor4(g.n, g.c, g.hw, xs, &gd, &bd, &ed), &qv(&t.x)))?;
        let chan = channel_of(g);
        for (i, row) in j4.iter().enumerate() {
            for (k, v) in row.iter().enumerate() {
                if chan[i] != chan[k] {
                    prop_assert!(v.is_zero(),
                        "S25: dy_{}/dx_{} = {} (channels {} and {}), inputs {:?}",
                        i, k, v, chan[i], chan[k], t);
                }
            }
        }
    }

    /// On Tensor3 (C·h)·w: S20 (renderable) == S19 (chain rule through the bridge) ==
    /// J^T dy of S18; Problem backward on chw gives the same dx.
    #[test]
    fn tensor3_backward_equals_jt_dy(c in case(Layout::Chw)) {
        let (oc, h, w) = (c.geom.shape[0], c.geom.shape[1], c.geom.shape[2]);
        let (x, dy, g, b, e) = (qv(&c.x), qv(&c.dy), qv(&c.gamma), qv(&c.beta), c.eps_q());
        let (gd, bd, ed) = (duals(&g), duals(&b), D::constant(e.clone()));
        let want = ok("vjp of S18", &c, vjp(
            |xs: &[D]| pc::bn_per_channel_tensor3(oc, h, w, xs, &gd, &bd, &ed), &x, &dy))?;
        let s19 = ok("S19", &c, pc::bn_per_channel_tensor3_vjp(oc, h, w, &x, &g, &b, &e, &dy))?;
        eq_vec("S19 bn_per_channel_tensor3_vjp vs J^T dy", &c, &want, &s19)?;
        let s20 = ok("S20", &c, pc::bn_per_channel_tensor3_grad_input(oc, h, w, &x, &dy, &g, &e))?;
        eq_vec("S20 bn_per_channel_tensor3_grad_input vs J^T dy", &c, &want, &s20)?;
        let out = eval("backward", &c, &c.problem(Op::Backward))?;
        eq_vec("Problem backward chw dx vs J^T dy", &c, &want, &out["dx"])?;
    }

    /// On [N,C,H,W]: S28 (renderable) == S27 (through the transpose bridge) == J^T dy of
    /// S25; Problem backward on nchw gives the same dx.
    #[test]
    fn nchw_backward_equals_jt_dy(c in case(Layout::Nchw)) {
        let gm = &c.geom;
        let (n, oc, hw) = (gm.n, gm.c, gm.hw);
        let (x, dy, g, b, e) = (qv(&c.x), qv(&c.dy), qv(&c.gamma), qv(&c.beta), c.eps_q());
        let (gd, bd, ed) = (duals(&g), duals(&b), D::constant(e.clone()));
        let want = ok("vjp of S25", &c, vjp(
            |xs: &[D]| pc::bn_batch_tensor4(n, oc, hw, xs, &gd, &bd, &ed), &x, &dy))?;
        let s27 = ok("S27", &c, pc::bn_batch_tensor4_vjp(n, oc, hw, &x, &g, &b, &e, &dy))?;
        eq_vec("S27 bn_batch_tensor4_vjp vs J^T dy", &c, &want, &s27)?;
        let s28 = ok("S28", &c, pc::bn_batch_tensor4_grad_input(n, oc, hw, &x, &dy, &g, &e))?;
        eq_vec("S28 bn_batch_tensor4_grad_input vs J^T dy", &c, &want, &s28)?;
        let out = eval("backward", &c, &c.problem(Op::Backward))?;
        eq_vec("Problem backward nchw dx vs J^T dy", &c, &want, &out["dx"])?;
    }

    /// On every layout: Problem backward (dx, dgamma, dbeta) == J^T dy of the layout forward
    /// from the definition, `from_mat ∘ S2 ∘ to_mat`, w.r.t. x, gamma and beta.
    #[test]
    fn every_layout_backward_equals_jt_dy(c in case_any_layout()) {
        let gm = c.geom.clone();
        let oc = gm.c;
        let (x, dy, g, b) = (qv(&c.x), qv(&c.dy), qv(&c.gamma), qv(&c.beta));
        let (xd, gd, bd, ed) = (duals(&x), duals(&g), duals(&b), D::constant(c.eps_q()));
        let fwd = |xs: &[D], gs: &[D], bs: &[D]| -> Result<Vec<D>, SpecError> {
            Ok(gm.from_mat(&pc::bn_per_channel(oc, &gm.to_mat(xs), gs, bs, &ed)?))
        };
        let want_dx = ok("vjp x", &c, vjp(|xs: &[D]| fwd(xs, &gd, &bd), &x, &dy))?;
        let want_dg = ok("vjp gamma", &c, vjp(|gs: &[D]| fwd(&xd, gs, &bd), &g, &dy))?;
        let want_db = ok("vjp beta", &c, vjp(|bs: &[D]| fwd(&xd, &gd, bs), &b, &dy))?;
        let out = eval("backward", &c, &c.problem(Op::Backward))?;
        eq_vec("Problem backward dx vs J^T dy", &c, &want_dx, &out["dx"])?;
        eq_vec("Problem backward dgamma vs J_gamma^T dy", &c, &want_dg, &out["dgamma"])?;
        eq_vec("Problem backward dbeta vs J_beta^T dy", &c, &want_db, &out["dbeta"])?;
    }

    /// Sync dgamma (S30, xhat at the handed-in statistics) == J_gamma^T dy of the sync
    /// forward S26 at those statistics; dbeta == J_beta^T dy; Problem sync_backward on nchw
    /// agrees. (S15 is a different function once the statistics are not x's own.)
    #[test]
    fn sync_dgamma_equals_jacobian_of_sync_forward(c in case(Layout::Nchw)) {
        let gm = &c.geom;
        let (n, oc, hw) = (gm.n, gm.c, gm.hw);
        let (x, dy, g, b) = (qv(&c.x), qv(&c.dy), qv(&c.gamma), qv(&c.beta));
        let (mean, m2) = (qv(&c.mean), qv(&c.m2()));
        let (xd, gd, bd, ed, md, m2d) = (duals(&x), duals(&g), duals(&b), D::constant(c.eps_q()),
            duals(&mean), duals(&m2));
        let want_g = ok("vjp gamma of S26", &c, vjp(
            |gs: &[D]| pc::sync_bn_batch_tensor4(n, oc, hw, &xd, gs, &bd, &md, &m2d, &ed), &g, &dy))?;
        let want_b = ok("vjp beta of S26", &c, vjp(
            |bs: &[D]| pc::sync_bn_batch_tensor4(n, oc, hw, &xd, &gd, bs, &md, &m2d, &ed), &b, &dy))?;
        let (xm, dym) = (c.x_mat(), c.dy_mat());
        let s30 = ok("S30", &c, pc::sync_bn_per_channel_grad_gamma(oc, &xm, &dym, &mean, &m2,
            &c.eps_q()))?;
        eq_vec("S30 sync_bn_per_channel_grad_gamma vs J_gamma^T dy of S26", &c, &want_g, &s30)?;
        let out = eval("sync_backward", &c, &c.problem(Op::SyncBackward))?;
        eq_vec("Problem sync_backward dgamma vs J_gamma^T dy", &c, &want_g, &out["dgamma"])?;
        eq_vec("Problem sync_backward dbeta vs J_beta^T dy", &c, &want_b, &out["dbeta"])?;
    }

    /// S1: the per-row lift of a family of per-row maps applies each row's map to its row
    /// (= the rows' results concatenated); its Jacobian is block diagonal with the rows'
    /// Jacobians on the diagonal; the lift of the rows' VJPs is the VJP of the lift. And
    /// per-channel BN (S2) is the lift of the one-channel BN.
    #[test]
    fn per_row_lift_is_block_diagonal(c in case(Layout::Rows)) {
        let (oc, m) = (c.c(), c.m());
        let (x, dy) = (c.x_mat(), c.dy_mat());
        let lifted = pc::per_row_lift(oc, &x, |r, row| Ok::<_, SpecError>(row_map(r, row))).unwrap();
        let separate: Vec<QSqrt> = (0..oc).flat_map(|r| row_map(r, &x[r * m..(r + 1) * m])).collect();
        eq_vec("S1 lift vs rows mapped separately", &c, &separate, &lifted)?;
        let j = jacobian(|xs: &[D]| pc::per_row_lift(oc, xs, |r, row| Ok::<_, SpecError>(row_map(r, row))),
            &x).unwrap();
        for r in 0..oc {
            let jr = jacobian(|xs: &[D]| Ok::<_, SpecError>(row_map(r, xs)), &x[r * m..(r + 1) * m])
                .unwrap();
            for i in 0..m {
                let full = &j[r * m + i];
                eq_vec(&format!("S1 Jacobian, block ({r},{r}) row {i}"), &c, &jr[i],
                    &full[r * m..(r + 1) * m])?;
                for (k, v) in full.iter().enumerate() {
                    prop_assert!(k / m == r || v.is_zero(),
                        "S1: d out_{}/d in_{} = {} across rows, inputs {:?}", r * m + i, k, v, c);
                }
            }
        }
        let lifted_vjp = pc::per_row_lift(oc, &x, |r, row| {
            vjp(|xs: &[D]| Ok::<_, SpecError>(row_map(r, xs)), row, &dy[r * m..(r + 1) * m])
        }).unwrap();
        eq_vec("S1 lift of the row VJPs vs J^T dy of the lift", &c,
            &transpose_apply(&j, &dy, oc * m), &lifted_vjp)?;
        let (g, b, e) = (qv(&c.gamma), qv(&c.beta), c.eps_q());
        let s2 = ok("S2", &c, pc::bn_per_channel(oc, &x, &g, &b, &e))?;
        let lift_bn = pc::per_row_lift(oc, &x, |r, row| {
            Ok::<_, SpecError>(ch::bn_forward(row, &g[r], &b[r], &e).0)
        }).unwrap();
        eq_vec("S2 vs lift of one-channel BN", &c, &lift_bn, &s2)?;
    }
}
