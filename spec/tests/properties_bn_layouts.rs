//! The batch_norm layouts added in bnconf 0.3 — `nc` (`[N, C]`), `ncl` (`[N, C, L]`), `ncdhw`
//! (`[N, C, D, H, W]`) and `ndhwc` (`[N, D, H, W, C]`): the cells of channel c are every
//! position whose channel index is c. For each, exactly:
//!
//! * the bridge (`Geometry::offset`) is the family's batch_norm grouping on the same
//!   `ChannelLayout` (group c = channel c's cells in the matrix view's order);
//! * `forward`'s `y`, `mean` and `(var + eps)^(-1/2)` are F7's, `backward`'s `dx`, `dgamma`,
//!   `dbeta` F8's;
//! * every batch_norm op (the seed's five and `running_update`) equals the same op on the
//!   `[C, m]` view (`rows`) conjugated by the bridge;
//! * on the channels-first ones the seed's `[N, C, H, W]` items S25, S26, S28, S31 with
//!   `hw` = the product of the spatial extents (1 for `nc`) give the same values.
//!
//! Cases per property: `PROPTEST_CASES`, or 256.

mod common;

use bnconf_spec::exact::{QSqrt, SumOfRoots};
use bnconf_spec::family::{self as fam, ChannelLayout, Grouping, Inputs};
use bnconf_spec::op::{Convention, Extent, Params};
use bnconf_spec::per_channel::{self as pc, SyncStats};
use bnconf_spec::{Geometry, Layout, Op, Problem};
use common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The four new layouts, as `Layout` and as the family's `ChannelLayout`.
const NEW: [(Layout, ChannelLayout); 4] = [
    (Layout::Nc, ChannelLayout::Nc),
    (Layout::Ncl, ChannelLayout::Ncl),
    (Layout::Ncdhw, ChannelLayout::Ncdhw),
    (Layout::Ndhwc, ChannelLayout::Ndhwc),
];

fn channel_layout(l: Layout) -> ChannelLayout {
    NEW.iter().find(|(a, _)| *a == l).expect("a new layout").1
}

fn new_layout_case() -> BoxedStrategy<Case> {
    prop::sample::select(NEW.map(|(l, _)| l).to_vec())
        .prop_flat_map(case)
        .boxed()
}

/// Every input of every batch_norm op, by name, in the case's layout order (`running_mean`
/// and `running_var` are the case's handed-in `mean` and `var`).
fn input(c: &Case, name: &str) -> Vec<QSqrt> {
    match name {
        "running_mean" => qv(&c.mean),
        "running_var" => qv(&c.var),
        n => c.input(n),
    }
}

/// The problem of `op` on `c` (`running_update`: momentum 1/10, `convention`).
fn problem(c: &Case, op: Op, convention: Convention) -> Problem {
    let inputs: BTreeMap<String, Vec<QSqrt>> = op
        .inputs()
        .iter()
        .map(|n| (n.to_string(), input(c, n)))
        .collect();
    let params = if op == Op::RunningUpdate {
        Params {
            momentum: Some(frac(1, 10)),
            convention: Some(convention),
        }
    } else {
        Params::default()
    };
    Problem::new_with_params(op, c.geom.clone(), c.eps.clone(), inputs, params)
        .expect("valid problem")
}

/// The same case on `rows` `[C, m]`: the cells gathered by the bridge.
fn to_rows(c: &Case) -> Case {
    let flat = c.to_flat();
    Case {
        geom: Geometry::new(Layout::Rows, &[c.c(), c.m()], 1 << 20).unwrap(),
        ..flat
    }
}

/// The batch_norm ops of every layout (`sync_stats` is `rows` only).
fn bn_ops() -> impl Iterator<Item = Op> {
    Op::ALL.into_iter().filter(|&o| o != Op::SyncStats)
}

proptest! {
    #![proptest_config(config())]

    /// The bridge is the family's batch_norm grouping, and the seed layout op is F7/F8.
    #[test]
    fn new_layouts_are_f7_and_f8(c in new_layout_case()) {
        let g = &c.geom;
        let cl = channel_layout(g.layout);
        let grouping = Grouping::batch_norm(cl, &g.shape).unwrap();
        prop_assert_eq!(&grouping, &Grouping::from_geometry(g));
        prop_assert_eq!(grouping.groups().concat(), g.to_mat_perm());

        let (x, dy, eps) = (qv(&c.x), qv(&c.dy), c.eps_q());
        let (gamma, beta) = (qv(&c.gamma), qv(&c.beta));
        let inp = Inputs { x: &x, gamma: Some(&gamma), beta: Some(&beta), eps: &eps };
        let f = ok("F7", &c, fam::batch_norm(cl, &g.shape, inp))?;
        let b = ok("F8", &c, fam::batch_norm_backward(cl, &g.shape, inp, &dy))?;
        let fwd = eval("forward", &c, &problem(&c, Op::Forward, Convention::Onnx))?;
        let bwd = eval("backward", &c, &problem(&c, Op::Backward, Convention::Onnx))?;
        eq_vec("forward y vs F7", &c, &f.y, &fwd["y"])?;
        eq_vec("forward mean vs F7", &c, &f.mean.unwrap(), &fwd["mean"])?;
        for (ch, (r, v)) in f.rstd.iter().zip(&fwd["var"]).enumerate() {
            // F7's rstd is (var + eps)^(-1/2) of the forward's var: rstd² · (var + eps) = 1.
            let q = v + &eps;
            eq_one(&format!("F7 rstd² (var + eps) of channel {ch}"), &c, &QSqrt::int(1),
                &(&(r * r) * &q))?;
        }
        eq_vec("backward dx vs F8", &c, &b.dx, &bwd["dx"])?;
        let dgamma: Vec<SumOfRoots> = bwd["dgamma"].iter().map(SumOfRoots::from_qsqrt).collect();
        prop_assert_eq!(b.dgamma.unwrap(), dgamma);
        eq_vec("backward dbeta vs F8", &c, &b.dbeta.unwrap(), &bwd["dbeta"])?;
    }

    /// Every batch_norm op on a new layout is the `[C, m]` op conjugated by the bridge: cell
    /// outputs scattered back, per-channel outputs equal; both running_update conventions.
    /// On `nc`, `ncl`, `ncdhw` the seed's `[N, C, H, W]` items give the same values.
    #[test]
    fn new_layouts_are_the_rows_op_through_the_bridge(c in new_layout_case(), onnx in any::<bool>()) {
        let g = c.geom.clone();
        let rows = to_rows(&c);
        let conv = if onnx { Convention::Onnx } else { Convention::Pytorch };
        let mut outs = BTreeMap::new();
        for op in bn_ops() {
            let here = eval(op.name(), &c, &problem(&c, op, conv))?;
            let there = eval(op.name(), &rows, &problem(&rows, op, conv))?;
            prop_assert_eq!(here.keys().collect::<Vec<_>>(), there.keys().collect::<Vec<_>>());
            for name in op.outputs() {
                let want = match Op::extent(name) {
                    Extent::Cells => g.from_mat(&there[name]),
                    Extent::Channel | Extent::Shards => there[name].clone(),
                };
                eq_vec(&format!("{} {} on {} vs rows through the bridge", op.name(), name,
                    g.layout.name()), &c, &want, &here[name])?;
            }
            outs.insert(op, here);
        }
        if !g.layout.channels_last() {
            let (n, oc, hw, e) = (g.n, g.c, g.hw, c.eps_q());
            let (x, dy, gm, bm) = (qv(&c.x), qv(&c.dy), qv(&c.gamma), qv(&c.beta));
            let (mean, m2, mdy, mdx) = (qv(&c.mean), qv(&c.m2()), qv(&c.mean_dy), c.mean_dy_xhat());
            let stats = SyncStats { mean: &mean, m2: &m2, mean_dy: &mdy, mean_dy_xhat: &mdx };
            let l = g.layout.name();
            eq_vec(&format!("forward {l} vs S25"), &c,
                &ok("S25", &c, pc::bn_batch_tensor4(n, oc, hw, &x, &gm, &bm, &e))?,
                &outs[&Op::Forward]["y"])?;
            eq_vec(&format!("backward {l} vs S28"), &c,
                &ok("S28", &c, pc::bn_batch_tensor4_grad_input(n, oc, hw, &x, &dy, &gm, &e))?,
                &outs[&Op::Backward]["dx"])?;
            eq_vec(&format!("sync_forward {l} vs S26"), &c,
                &ok("S26", &c, pc::sync_bn_batch_tensor4(n, oc, hw, &x, &gm, &bm, &mean, &m2, &e))?,
                &outs[&Op::SyncForward]["y"])?;
            eq_vec(&format!("sync_backward {l} vs S31"), &c,
                &ok("S31", &c, pc::sync_bn_batch_tensor4_grad_input(n, oc, hw, &x, &dy, &gm, &stats, &e))?,
                &outs[&Op::SyncBackward]["dx"])?;
        }
    }
}

/// Names, ranks, the channel axis and `Geometry` of the new layouts, and bad shapes (a wrong
/// rank, a zero extent) refused with a reason that says which.
#[test]
fn new_layout_geometry_and_bad_shapes() {
    for ((l, cl), (shape, (n, c, hw))) in NEW.into_iter().zip([
        (vec![6, 3], (6, 3, 1)),
        (vec![2, 3, 5], (2, 3, 5)),
        (vec![2, 3, 2, 2, 3], (2, 3, 12)),
        (vec![2, 2, 2, 3, 3], (2, 3, 12)),
    ]) {
        assert_eq!(Layout::from_name(l.name()), Some(l));
        assert_eq!(l.name(), cl.name());
        assert_eq!(l.rank(), cl.rank());
        let g = Geometry::new(l, &shape, 1 << 10).unwrap();
        assert_eq!((g.n, g.c, g.hw, g.m), (n, c, hw, n * hw), "{l:?}");
        assert_eq!(cl.dims(&shape).unwrap(), (n, c, hw));
        assert_eq!(l.channel_dims(&shape), Ok((c, n * hw, n * c * hw)));
        let mut zero = shape.clone();
        zero[shape.len() - 1] = 0;
        let e = Geometry::new(l, &zero, 1 << 10).unwrap_err().to_string();
        assert!(
            e.contains(&format!("dimension {} is 0", shape.len() - 1)),
            "{e}"
        );
    }
    let e = Geometry::new(Layout::Ncdhw, &[2, 3, 4, 5], 1 << 10)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("layout `ncdhw` needs 5 dimensions, got 4"),
        "{e}"
    );
    // The seed's layouts keep their places; the new ones follow.
    assert_eq!(
        Layout::ALL.map(|l| l.name()),
        ["rows", "flat", "chw", "nchw", "nhwc", "nc", "ncl", "ncdhw", "ndhwc"]
    );
}
