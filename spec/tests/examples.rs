//! Exact examples, computed by hand, for each op (the ones the docs quote).
use bnconf_spec::exact::parse::parse_exact;
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt};
use std::collections::BTreeMap;

fn v(xs: &[&str]) -> Vec<QSqrt> {
    xs.iter().map(|s| parse_exact(s).unwrap()).collect()
}

fn check(
    op: Op,
    layout: Layout,
    shape: &[usize],
    eps: &str,
    inputs: &[(&str, &[&str])],
    expected: &[(&str, &[&str])],
) {
    let geom = Geometry::new(layout, shape, 1 << 20).unwrap();
    let inputs: BTreeMap<String, Vec<QSqrt>> = inputs
        .iter()
        .map(|(k, xs)| (k.to_string(), v(xs)))
        .collect();
    let p = Problem::new(
        op,
        geom,
        parse_exact(eps).unwrap().a().clone(),
        inputs.clone(),
    )
    .unwrap();
    let out = p.evaluate().unwrap();
    for (name, want) in expected {
        let got: Vec<String> = out[name].iter().map(|e| e.to_string()).collect();
        assert_eq!(
            got,
            want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{op:?} {layout:?} output {name}, inputs {inputs:?}"
        );
    }
}

#[test]
fn forward_rows_by_hand() {
    // mean 5/2, var 5/4, q = 5/4: y = (x - 5/2) * (4/5) * sqrt(5/4)
    check(
        Op::Forward,
        Layout::Rows,
        &[1, 4],
        "0",
        &[
            ("x", &["1", "2", "3", "4"]),
            ("gamma", &["1"]),
            ("beta", &["0"]),
        ],
        &[
            (
                "y",
                &[
                    "0 + -6/5*sqrt(5/4)",
                    "0 + -2/5*sqrt(5/4)",
                    "0 + 2/5*sqrt(5/4)",
                    "0 + 6/5*sqrt(5/4)",
                ],
            ),
            ("mean", &["5/2"]),
            ("var", &["5/4"]),
        ],
    );
}

#[test]
fn perfect_square_q_is_rational() {
    // x = [0, 2]: mean 1, var 1, eps 3 -> q = 4, r = 1/2
    check(
        Op::Forward,
        Layout::Flat,
        &[1, 2],
        "3",
        &[("x", &["0", "2"]), ("gamma", &["2"]), ("beta", &["1/2"])],
        &[("y", &["-1/2", "3/2"])],
    );
}

#[test]
fn backward_nchw_by_hand() {
    // one channel, N=2, H=W=1: x = [0, 2], dy = [1, 0], eps = 0: mean 1, var 1, r = 1, xhat = [-1, 1]
    // mean(dy) = 1/2, mean(dy*xhat) = -1/2: dx = dy - 1/2 + xhat/2 = [0, 0]; dgamma = -1; dbeta = 1
    check(
        Op::Backward,
        Layout::Nchw,
        &[2, 1, 1, 1],
        "0",
        &[("x", &["0", "2"]), ("dy", &["1", "0"]), ("gamma", &["3"])],
        &[("dx", &["0", "0"]), ("dgamma", &["-1"]), ("dbeta", &["1"])],
    );
}

#[test]
fn sync_backward_accepts_field_values() {
    // q = m2 - mean^2 + eps = 2 - 1 + 1 = 2; mean_dy_xhat = sqrt(8) = 2*sqrt(2) moves into Q(sqrt 2)
    let geom = Geometry::new(Layout::Flat, &[1, 1], 100).unwrap();
    let mut inputs = BTreeMap::new();
    for (k, s) in [
        ("x", "1"),
        ("dy", "1"),
        ("gamma", "1"),
        ("mean", "1"),
        ("m2", "2"),
        ("mean_dy", "0"),
        ("mean_dy_xhat", "0 + 1*sqrt(8)"),
    ] {
        inputs.insert(k.to_string(), v(&[s]));
    }
    let p = Problem::new(
        Op::SyncBackward,
        geom.clone(),
        bnconf_spec::Rational::from_integer(1.into()),
        inputs.clone(),
    )
    .unwrap();
    let out = p.evaluate().unwrap();
    // xhat = 0, dx = r * dy = 1/sqrt(2) = 1/2 sqrt(2)
    assert_eq!(out["dx"][0].to_string(), "0 + 1/2*sqrt(2)");
    inputs.insert("mean_dy_xhat".into(), v(&["0 + 1*sqrt(3)"]));
    let err = Problem::new(
        Op::SyncBackward,
        geom,
        bnconf_spec::Rational::from_integer(1.into()),
        inputs,
    )
    .unwrap()
    .evaluate()
    .unwrap_err();
    assert!(err.to_string().contains("mean_dy_xhat[0]"), "{err}");
}

#[test]
fn constraint_errors_name_the_field() {
    let geom = Geometry::new(Layout::Rows, &[1, 2], 100).unwrap();
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), v(&["1", "1"]));
    inputs.insert("gamma".to_string(), v(&["1"]));
    inputs.insert("beta".to_string(), v(&["0"]));
    let e = Problem::new(
        Op::Forward,
        geom.clone(),
        bnconf_spec::Rational::from_integer(0.into()),
        inputs.clone(),
    )
    .unwrap()
    .evaluate()
    .unwrap_err();
    assert!(e.to_string().contains("var + eps of channel 0"), "{e}");
    inputs.insert("beta".to_string(), v(&["0", "1"]));
    let e = Problem::new(
        Op::Forward,
        geom,
        bnconf_spec::Rational::from_integer(0.into()),
        inputs,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("inputs.beta"), "{e}");
    assert!(Geometry::new(Layout::Nchw, &[usize::MAX, 2, 1, 1], usize::MAX).is_err());
}
