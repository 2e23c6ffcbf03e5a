//! The normalization family from the definition (docs/DESIGN.md "one core, many groupings"):
//! for every grouping (layer_norm `last` with normalized_ndim 1..3, group_norm and batch_norm
//! on the six channel layouts, G = 1, G = C, C/G not a power of two, K = 1, constant groups),
//! every affine mode and both rms_norm conventions, the closed-form backward (`dx`, `dgamma`,
//! `dbeta`) equals `Jᵀdy` of the forward by dual numbers, exactly. The batch_norm grouping on
//! the seed's layouts is the seed's layout bridge, and its ops give the seed items' values.
//!
//! Cases per property: `PROPTEST_CASES`, or 256. All comparisons are exact.

mod common;

use bnconf_spec::exact::{QSqrt, Rational, SumOfRoots};
use bnconf_spec::family::vjp::{normalize_vjp_param, normalize_vjp_x, Param};
use bnconf_spec::family::{
    self as fam, Affine, ChannelLayout, Grouping, Inputs, Norm, RmsConvention,
};
use bnconf_spec::per_channel as pc;
use bnconf_spec::{Geometry, Layout, SpecError};
use common::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Which grouping a case uses.
#[derive(Clone, Debug)]
enum Shape {
    Last {
        shape: Vec<usize>,
        k: usize,
    },
    Group {
        layout: ChannelLayout,
        shape: Vec<usize>,
        groups: usize,
    },
    Batch {
        layout: ChannelLayout,
        shape: Vec<usize>,
    },
}

impl Shape {
    fn grouping(&self) -> Grouping {
        match self {
            Shape::Last { shape, k } => Grouping::last(shape, *k),
            Shape::Group {
                layout,
                shape,
                groups,
            } => Grouping::group_norm(*layout, shape, *groups),
            Shape::Batch { layout, shape } => Grouping::batch_norm(*layout, shape),
        }
        .expect("strategies draw valid shapes")
    }
}

#[derive(Clone, Debug)]
struct FamCase {
    shape: Shape,
    norm: Norm,
    x: Vec<Rational>,
    dy: Vec<Rational>,
    gamma: Option<Vec<Rational>>,
    beta: Option<Vec<Rational>>,
    eps: Rational,
}

impl FamCase {
    fn g(&self) -> Grouping {
        self.shape.grouping()
    }
    fn x(&self) -> Vec<QSqrt> {
        qv(&self.x)
    }
    fn dy(&self) -> Vec<QSqrt> {
        qv(&self.dy)
    }
    fn gamma(&self) -> Option<Vec<QSqrt>> {
        self.gamma.as_deref().map(qv)
    }
    fn beta(&self) -> Option<Vec<QSqrt>> {
        self.beta.as_deref().map(qv)
    }
    fn eps(&self) -> QSqrt {
        QSqrt::rational(self.eps.clone())
    }
}

/// Product of extents at most 24 (whole Jacobians stay cheap).
fn fits(shape: &[usize]) -> bool {
    shape.iter().product::<usize>() <= 24
}

/// layer_norm / rms_norm `last`: one or two batch axes, normalized_ndim 1..3, extents 1..3
/// (K = 1 when every normalized extent is 1).
fn last_shape() -> BoxedStrategy<Shape> {
    (1usize..=3, vec(1usize..=3, 1..=2), vec(1usize..=3, 3))
        .prop_map(|(k, batch, norm)| {
            let mut shape = batch;
            shape.extend_from_slice(&norm[..k]);
            Shape::Last { shape, k }
        })
        .prop_filter("small", |s| match s {
            Shape::Last { shape, .. } => fits(shape),
            _ => true,
        })
        .boxed()
}

/// A channel layout's shape with `c` channels: N 1..=2, spatial extents 1..=2.
fn channel_shape(layout: ChannelLayout, c: usize) -> BoxedStrategy<Vec<usize>> {
    let spatial = layout.rank() - 2;
    (1usize..=2, vec(1usize..=2, spatial))
        .prop_map(move |(n, sp)| {
            let mut s = vec![n];
            if layout.channels_last() {
                s.extend(sp);
                s.push(c);
            } else {
                s.push(c);
                s.extend(sp);
            }
            s
        })
        .prop_filter("small", |s| fits(s))
        .boxed()
}

/// group_norm: C and G with G | C, including G = 1, G = C, and C/G = 3 (not a power of 2).
fn group_shape() -> BoxedStrategy<Shape> {
    let cg = prop::sample::select(vec![
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 1),
        (3, 3),
        (4, 2),
        (6, 2),
        (6, 3),
        (6, 1),
        (6, 6),
    ]);
    (prop::sample::select(ChannelLayout::ALL.to_vec()), cg)
        .prop_flat_map(|(layout, (c, groups))| {
            channel_shape(layout, c).prop_map(move |shape| Shape::Group {
                layout,
                shape,
                groups,
            })
        })
        .boxed()
}

fn batch_shape() -> BoxedStrategy<Shape> {
    (
        prop::sample::select(ChannelLayout::ALL.to_vec()),
        1usize..=3,
    )
        .prop_flat_map(|(layout, c)| {
            channel_shape(layout, c).prop_map(move |shape| Shape::Batch { layout, shape })
        })
        .boxed()
}

/// `x`: binary-float-like values, small integers, every cell equal (every group constant:
/// var = 0, so eps > 0 is then drawn), or a large mean with a small spread.
fn data(n: usize) -> BoxedStrategy<Vec<Rational>> {
    prop_oneof![
        3 => vec(scalar(), n),
        1 => vec((-20i64..=20).prop_map(int), n),
        1 => scalar().prop_map(move |v| vec![v; n]),
        1 => cells(n),
    ]
    .boxed()
}

/// A whole case: shape, op kind (centering from the shape's family, affine, convention), data.
fn fam_case(shape: BoxedStrategy<Shape>, rms: bool) -> BoxedStrategy<FamCase> {
    let affine = prop::sample::select(Affine::ALL.to_vec());
    let conv = prop::sample::select(RmsConvention::ALL.to_vec());
    (shape, affine, conv)
        .prop_flat_map(move |(shape, affine, conv)| {
            let norm = match (&shape, rms) {
                (Shape::Last { .. }, true) => {
                    let affine = if affine == Affine::WeightBias {
                        Affine::Weight
                    } else {
                        affine
                    };
                    fam::ops::rms_norm_kind(affine, conv).unwrap()
                }
                (Shape::Last { .. }, false) => fam::ops::layer_norm_kind(affine),
                (Shape::Group { .. }, _) => fam::ops::group_norm_kind(affine),
                (Shape::Batch { .. }, _) => fam::ops::batch_norm_kind(),
            };
            let g = shape.grouping();
            let (n, np) = (g.len(), g.n_params());
            (
                Just(shape),
                Just(norm),
                data(n),
                vec(scalar(), n),
                vec(scalar(), np),
                vec(scalar(), np),
                eps(false),
            )
        })
        .prop_map(|(shape, norm, x, dy, gamma, beta, eps)| FamCase {
            gamma: norm.affine.has_weight().then_some(gamma),
            beta: norm.affine.has_bias().then_some(beta),
            shape,
            norm,
            x,
            dy,
            eps,
        })
        .boxed()
}

fn any_case() -> BoxedStrategy<FamCase> {
    prop_oneof![
        fam_case(last_shape(), false),
        fam_case(last_shape(), true),
        fam_case(group_shape(), false),
        fam_case(batch_shape(), false),
    ]
    .boxed()
}

/// Whether (C1) fails for some group of the case: a group whose `q` is 0 (eps = 0 and a
/// constant group, or an all-zero group without centering).
fn c1_fails(c: &FamCase) -> bool {
    c.eps == int(0)
        && c.g().groups().iter().any(|cells| {
            let v: Vec<&Rational> = cells.iter().map(|&i| &c.x[i]).collect();
            match c.norm.centering {
                fam::Centering::Mean => v.windows(2).all(|w| w[0] == w[1]),
                fam::Centering::Zero => v.iter().all(|e| **e == int(0)),
            }
        })
}

fn roots(v: &[QSqrt]) -> Vec<SumOfRoots> {
    v.iter().map(SumOfRoots::from_qsqrt).collect()
}

proptest! {
    #![proptest_config(config())]

    /// Closed-form dx == Jᵀdy of the forward w.r.t. x; dgamma == J_gammaᵀdy; dbeta ==
    /// J_betaᵀdy — exactly, for every op, grouping, affine mode and convention. A case whose
    /// (C1) fails is refused by the forward, the closed forms and the Jacobian alike, naming
    /// the group.
    #[test]
    fn closed_forms_equal_jt_dy(c in any_case()) {
        let (g, x, dy, eps) = (c.g(), c.x(), c.dy(), c.eps());
        let (gamma, beta) = (c.gamma(), c.beta());
        let inp = Inputs { x: &x, gamma: gamma.as_deref(), beta: beta.as_deref(), eps: &eps };
        let fwd = fam::normalize(&g, &c.norm, inp);
        let closed = fam::normalize_backward(&g, &c.norm, inp, &dy);
        let jx = normalize_vjp_x(&g, &c.norm, inp, &dy);
        if c1_fails(&c) {
            for e in [fwd.map(|_| ()), closed.map(|_| ()), jx.map(|_| ())] {
                prop_assert!(matches!(e, Err(SpecError::NonPositiveVariance { .. })),
                    "{:?}: {:?}", c, e);
            }
            return Ok(());
        }
        let closed = closed.map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        let jx = jx.map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        prop_assert_eq!(&closed.dx, &jx, "dx vs Jᵀdy: {:?}", c);
        let jg = normalize_vjp_param(&g, &c.norm, inp, &dy, Param::Gamma)
            .map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        let jb = normalize_vjp_param(&g, &c.norm, inp, &dy, Param::Beta)
            .map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        prop_assert_eq!(closed.dgamma.is_some(), c.norm.affine.has_weight());
        prop_assert_eq!(closed.dbeta.is_some(), c.norm.affine.has_bias());
        prop_assert_eq!(&closed.dgamma, &jg, "dgamma vs J_gammaᵀdy: {:?}", c);
        prop_assert_eq!(closed.dbeta.as_deref().map(roots), jb, "dbeta vs J_betaᵀdy: {:?}", c);
        // The forward's statistics: one per group; mean only when centering.
        let f = fwd.map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        prop_assert_eq!(f.rstd.len(), g.groups().len());
        prop_assert_eq!(f.mean.is_some(), c.norm.centering == fam::Centering::Mean);
        for (r, cells) in f.rstd.iter().zip(g.groups()) {
            // rstd² · q = 1 with q recomputed here from the definition.
            let k = QSqrt::int(cells.len() as i64);
            let mu = if c.norm.centering == fam::Centering::Mean {
                cells.iter().fold(QSqrt::int(0), |s, &i| s + &x[i]) / k.clone()
            } else {
                QSqrt::int(0)
            };
            let q = cells.iter().fold(QSqrt::int(0), |s, &i| {
                let d = &x[i] - &mu;
                s + &d * &d
            }) / k + eps.clone();
            prop_assert_eq!(&(r * r) * &q, QSqrt::int(1), "{:?}", c);
            prop_assert!(r.signum() > 0);
        }
    }

    /// The named items are the core over their grouping (one computation, not copies):
    /// equal results, errors included.
    #[test]
    fn named_items_are_the_core(c in any_case()) {
        let (g, x, dy, eps) = (c.g(), c.x(), c.dy(), c.eps());
        let (gamma, beta) = (c.gamma(), c.beta());
        let (ga, be) = (gamma.as_deref(), beta.as_deref());
        let inp = Inputs { x: &x, gamma: ga, beta: be, eps: &eps };
        let core_f = fam::normalize(&g, &c.norm, inp);
        let core_b = fam::normalize_backward(&g, &c.norm, inp, &dy);
        prop_assert_eq!(core_f.is_err(), c1_fails(&c));
        let (named_f, named_b) = match (&c.shape, c.norm.op) {
            (Shape::Last { shape, k }, "layer_norm") => (
                fam::layer_norm(shape, *k, c.norm.affine, inp),
                fam::layer_norm_backward(shape, *k, c.norm.affine, inp, &dy),
            ),
            (Shape::Last { shape, k }, "rms_norm") => (
                fam::rms_norm(shape, *k, c.norm.affine, c.norm.convention, inp),
                fam::rms_norm_backward(shape, *k, c.norm.affine, c.norm.convention, inp, &dy),
            ),
            (Shape::Group { layout, shape, groups }, _) => (
                fam::group_norm(*layout, shape, *groups, c.norm.affine, inp),
                fam::group_norm_backward(*layout, shape, *groups, c.norm.affine, inp, &dy),
            ),
            (Shape::Batch { layout, shape }, _) => (
                fam::batch_norm(*layout, shape, inp),
                fam::batch_norm_backward(*layout, shape, inp, &dy),
            ),
            other => panic!("unexpected {other:?}"),
        };
        prop_assert_eq!(named_f, core_f);
        prop_assert_eq!(named_b, core_b);
    }

    /// Every grouping satisfies (G1)–(G3) (`Grouping::new` accepts its parts), groups have
    /// their documented sizes, and group_norm with G = 1 on `nc`/`ncl`/... is layer_norm of
    /// each sample over `[C, *spatial]` for channels-first layouts (same cells, same order).
    #[test]
    fn groupings_are_partitions(s in prop_oneof![last_shape(), group_shape(), batch_shape()]) {
        let g = s.grouping();
        let again = Grouping::new(g.groups().to_vec(), g.params().to_vec(), g.n_params());
        prop_assert_eq!(again.as_ref(), Ok(&g));
        let n: usize = match &s {
            Shape::Last { shape, .. } | Shape::Group { shape, .. } | Shape::Batch { shape, .. } => {
                shape.iter().product()
            }
        };
        prop_assert_eq!(g.len(), n);
        match &s {
            Shape::Last { shape, k } => {
                let kk: usize = shape[shape.len() - k..].iter().product();
                prop_assert!(g.groups().iter().all(|c| c.len() == kk));
                prop_assert_eq!(g.n_params(), kk);
            }
            Shape::Group { layout, shape, groups } => {
                let (nn, cc, ss) = layout.dims(shape).unwrap();
                prop_assert_eq!(g.groups().len(), nn * groups);
                prop_assert!(g.groups().iter().all(|c| c.len() == cc / groups * ss));
                if *groups == 1 && !layout.channels_last() {
                    let ln = Grouping::last(&[nn, cc * ss], 1).unwrap();
                    prop_assert_eq!(g.groups(), ln.groups());
                }
                // every cell of a group is in the group's channels
                for (gi, cells) in g.groups().iter().enumerate() {
                    let gg = gi % groups;
                    for &i in cells {
                        prop_assert_eq!(g.params()[i] / (cc / groups), gg);
                    }
                }
            }
            Shape::Batch { layout, shape } => {
                let (nn, cc, ss) = layout.dims(shape).unwrap();
                prop_assert_eq!(g.groups().len(), cc);
                prop_assert!(g.groups().iter().all(|c| c.len() == nn * ss));
                for (ch, cells) in g.groups().iter().enumerate() {
                    prop_assert!(cells.iter().all(|&i| g.params()[i] == ch));
                }
            }
        }
    }

    /// The batch_norm grouping on nchw / nhwc is exactly the seed's layout bridge
    /// (`Geometry::offset`, S21–S24), and the family's batch_norm gives S25's `y` and S28's
    /// `dx`, and S15/S16's `dgamma`/`dbeta` through the bridge, on both.
    #[test]
    fn batch_norm_grouping_is_the_seed_layout(
        c in fam_case(prop::sample::select(vec![ChannelLayout::Nchw, ChannelLayout::Nhwc])
            .prop_flat_map(|l| (1usize..=3).prop_flat_map(move |cc| channel_shape(l, cc)
                .prop_map(move |shape| Shape::Batch { layout: l, shape })))
            .boxed(), false)
    ) {
        let Shape::Batch { layout, shape } = &c.shape else { unreachable!() };
        let seed_layout = if *layout == ChannelLayout::Nchw { Layout::Nchw } else { Layout::Nhwc };
        let geom = Geometry::new(seed_layout, shape, 1 << 20).unwrap();
        let g = c.g();
        prop_assert_eq!(&g, &Grouping::from_geometry(&geom));
        let flat: Vec<usize> = g.groups().concat();
        prop_assert_eq!(flat, geom.to_mat_perm());
        let (x, dy, eps) = (c.x(), c.dy(), c.eps());
        let (gamma, beta) = (c.gamma().unwrap(), c.beta().unwrap());
        let inp = Inputs { x: &x, gamma: Some(&gamma), beta: Some(&beta), eps: &eps };
        let f = fam::batch_norm(*layout, shape, inp);
        let b = fam::batch_norm_backward(*layout, shape, inp, &dy);
        let (xm, dym) = (geom.to_mat(&x), geom.to_mat(&dy));
        // Errors included: (C1) names the same channel with the same value in both.
        let y_seed = pc::bn_per_channel(geom.c, &xm, &gamma, &beta, &eps).map(|m| geom.from_mat(&m));
        let dx_seed = pc::bn_per_channel_grad_input(geom.c, &xm, &dym, &gamma, &eps)
            .map(|m| geom.from_mat(&m));
        prop_assert_eq!(&f.clone().map(|f| f.y), &y_seed);
        prop_assert_eq!(&b.clone().map(|b| b.dx), &dx_seed);
        prop_assert_eq!(f.is_err(), c1_fails(&c));
        if *layout == ChannelLayout::Nchw {
            let s25 = pc::bn_batch_tensor4(geom.n, geom.c, geom.hw, &x, &gamma, &beta, &eps);
            prop_assert_eq!(&f.clone().map(|f| f.y), &s25);
            let s28 = pc::bn_batch_tensor4_grad_input(geom.n, geom.c, geom.hw, &x, &dy, &gamma, &eps);
            prop_assert_eq!(&b.clone().map(|b| b.dx), &s28);
        }
        if let Ok(b) = b {
            let s15 = pc::bn_per_channel_grad_gamma(geom.c, &xm, &dym, &eps).unwrap();
            let s16 = pc::bn_per_channel_grad_beta(geom.c, &dym);
            prop_assert_eq!(b.dgamma.unwrap(), roots(&s15));
            prop_assert_eq!(b.dbeta.unwrap(), s16);
        }
    }
}

/// The seed's five layouts are groupings: every `Geometry` gives a partition with one group
/// per channel of `m` cells, parameter = channel.
#[test]
fn seed_layouts_are_groupings() {
    for (layout, shape) in [
        (Layout::Rows, vec![3, 5]),
        (Layout::Flat, vec![2, 7]),
        (Layout::Chw, vec![3, 2, 4]),
        (Layout::Nchw, vec![2, 3, 4, 5]),
        (Layout::Nhwc, vec![2, 4, 5, 3]),
    ] {
        let geom = Geometry::new(layout, &shape, 1 << 20).unwrap();
        let g = Grouping::from_geometry(&geom);
        assert_eq!(
            Grouping::new(g.groups().to_vec(), g.params().to_vec(), geom.c).as_ref(),
            Ok(&g)
        );
        assert!(g.groups().iter().all(|c| c.len() == geom.m), "{layout:?}");
    }
}

/// Inputs of a family op, for the bad-input test.
fn i<'a>(
    x: &'a [QSqrt],
    gamma: Option<&'a [QSqrt]>,
    beta: Option<&'a [QSqrt]>,
    eps: &'a QSqrt,
) -> Inputs<'a, QSqrt> {
    Inputs {
        x,
        gamma,
        beta,
        eps,
    }
}

/// Bad input names the field: wrong lengths, missing or extra parameters, rms_norm with a
/// bias, a non-divisor group count, a negative eps, and (C1).
#[test]
fn bad_input_names_the_field() {
    let q = |n: i64| QSqrt::int(n);
    let (zero, one) = (q(0), q(1));
    let x = [q(1), q(2), q(3), q(4)];
    let two = [q(1), q(1)];
    let xs = &x[..];
    let ln = |inp: Inputs<'_, QSqrt>, affine| {
        fam::layer_norm(&[2, 2], 1, affine, inp)
            .unwrap_err()
            .to_string()
    };
    let wb = Affine::WeightBias;
    assert_eq!(
        ln(i(&xs[..3], Some(&two), Some(&two), &zero), wb),
        "inputs.x: expected 4 values for shape [4], got 3"
    );
    assert_eq!(
        ln(i(xs, Some(&two[..1]), Some(&two), &zero), wb),
        "inputs.gamma: expected 2 values for shape [2], got 1"
    );
    assert_eq!(
        ln(i(xs, None, Some(&two), &zero), wb),
        "inputs.gamma: missing (op `layer_norm` needs it)"
    );
    assert_eq!(
        ln(i(xs, Some(&two), Some(&two), &q(-1)), wb),
        "eps: must be >= 0, got -1"
    );
    let constant_row = &[q(1), q(1), q(2), q(3)];
    assert_eq!(
        ln(i(constant_row, None, None, &zero), Affine::None),
        "var + eps of channel 0 is 0, but must be > 0 (C1)"
    );
    let extra = fam::layer_norm(
        &[2, 2],
        1,
        Affine::Weight,
        i(xs, Some(&two), Some(&two), &zero),
    )
    .unwrap_err();
    assert!(
        matches!(extra, SpecError::UnknownInput { ref field, .. } if field == "beta"),
        "{extra}"
    );
    let rms = |affine, inp| {
        fam::rms_norm(&[2, 2], 1, affine, RmsConvention::Standard, inp)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        rms(Affine::WeightBias, i(xs, Some(&two), None, &zero)),
        "affine: rms_norm takes `weight` or `none` (it has no beta), got weight_bias"
    );
    let zero_row = &[q(0), q(0), q(1), q(0)];
    assert_eq!(
        rms(Affine::None, i(zero_row, None, None, &zero)),
        "mean(x²) + eps of channel 0 is 0, but must be > 0 (C1)"
    );
    let gn = fam::group_norm(
        ChannelLayout::Nchw,
        &[1, 4, 1, 1],
        3,
        Affine::None,
        i(xs, None, None, &one),
    )
    .unwrap_err();
    assert_eq!(
        gn.to_string(),
        "groups: must be a positive divisor of the channel count C, got 3 (C = 4)"
    );
    let k = fam::layer_norm(&[4], 1, Affine::None, i(xs, None, None, &one)).unwrap_err();
    assert!(matches!(k, SpecError::Shape { .. }), "{k}");
    let k4 =
        fam::layer_norm(&[1, 1, 1, 2, 2], 4, Affine::None, i(xs, None, None, &one)).unwrap_err();
    assert_eq!(k4.to_string(), "normalized_ndim: must be 1, 2 or 3, got 4");
}

/// The strategies reach every corner the properties are about (2000 draws, deterministic):
/// normalized_ndim 1, 2, 3; K = 1; constant groups with eps > 0; (C1) failing; G = 1,
/// 1 < G < C with C/G = 3, G = C > 1; every channel layout for group_norm and batch_norm;
/// every affine mode of layer_norm and group_norm, rms_norm's `weight`/`none` in both
/// conventions.
#[test]
fn strategies_reach_every_corner() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;
    let mut runner = TestRunner::deterministic();
    let strat = any_case();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for _ in 0..2000 {
        let c = strat.new_tree(&mut runner).unwrap().current();
        let g = c.g();
        let mut tag = |s: String| {
            seen.insert(s);
        };
        tag(format!("{} {}", c.norm.op, c.norm.affine.name()));
        if c.norm.op == "rms_norm" {
            tag(format!(
                "rms {} {}",
                c.norm.convention.name(),
                c.norm.affine.name()
            ));
        }
        if g.groups().iter().any(|cells| cells.len() == 1) {
            tag(format!("{} K=1", c.norm.op));
        }
        if c1_fails(&c) {
            tag(format!("{} C1 fails", c.norm.op));
        } else if g
            .groups()
            .iter()
            .any(|cells| cells.len() > 1 && cells.iter().all(|&i| c.x[i] == c.x[cells[0]]))
        {
            tag(format!("{} constant group", c.norm.op));
        }
        match &c.shape {
            Shape::Last { k, .. } => tag(format!("{} k={k}", c.norm.op)),
            Shape::Group {
                layout,
                shape,
                groups,
            } => {
                let (_, cc, _) = layout.dims(shape).unwrap();
                tag(format!("gn {}", layout.name()));
                if *groups == 1 {
                    tag("gn G=1".into());
                }
                if *groups == cc && cc > 1 {
                    tag("gn G=C>1".into());
                }
                if cc / groups == 3 && *groups > 1 {
                    tag("gn 1<G<C, C/G=3".into());
                }
            }
            Shape::Batch { layout, .. } => tag(format!("bn {}", layout.name())),
        }
    }
    let mut want: Vec<String> = Vec::new();
    for op in ["layer_norm", "group_norm"] {
        for a in Affine::ALL {
            want.push(format!("{op} {}", a.name()));
        }
    }
    for conv in RmsConvention::ALL {
        for a in [Affine::Weight, Affine::None] {
            want.push(format!("rms {} {}", conv.name(), a.name()));
        }
    }
    for op in ["layer_norm", "rms_norm", "group_norm", "batch_norm"] {
        want.push(format!("{op} C1 fails"));
        want.push(format!("{op} constant group"));
    }
    for op in ["layer_norm", "rms_norm", "group_norm"] {
        want.push(format!("{op} K=1"));
    }
    for op in ["layer_norm", "rms_norm"] {
        for k in 1..=3 {
            want.push(format!("{op} k={k}"));
        }
    }
    for l in ChannelLayout::ALL {
        want.push(format!("gn {}", l.name()));
        want.push(format!("bn {}", l.name()));
    }
    want.extend(["gn G=1", "gn G=C>1", "gn 1<G<C, C/G=3"].map(String::from));
    let missing: Vec<&String> = want.iter().filter(|w| !seen.contains(*w)).collect();
    assert!(missing.is_empty(), "never drawn: {missing:?}");
}
