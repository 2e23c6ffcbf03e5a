//! The fast exact reference is bit-identical to the per-element exact path
//! (`Problem::evaluate` + `round`) on every op and layout, for 1 and 2 threads, on adversarial
//! data: large mean with small variance, constant channels, ties, tiny and huge magnitudes,
//! subnormals, sparse data.

use bnconf::fast::{compute, with_threads, FastProblem};
use bnconf::formats::npy::NpyData;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt, Rational};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn q(x: f64) -> QSqrt {
    QSqrt::rational(f64_to_rational(x).unwrap())
}

/// Build the exact problem; `None` if the spec refuses it at construction.
fn problem(
    op: Op,
    layout: Layout,
    shape: &[usize],
    eps: Rational,
    vals: &BTreeMap<&str, Vec<f64>>,
) -> Problem {
    let geom = Geometry::new(layout, shape, 1 << 20).unwrap();
    let inputs = vals
        .iter()
        .map(|(k, v)| (k.to_string(), v.iter().map(|&e| q(e)).collect()))
        .collect();
    Problem::new(op, geom, eps, inputs).unwrap()
}

fn to32(d: &NpyData) -> NpyData {
    match d {
        NpyData::F64(v) => NpyData::F32(v.iter().map(|&e| e as f32).collect()),
        d => d.clone(),
    }
}

/// Compare the fast path (1 and 2 threads, f64 storage and, for f32 data, f32 storage) with
/// the exact path. Returns the number of fallbacks.
fn check(p: &Problem, f32_data: bool) -> u64 {
    let exact = p.evaluate();
    let mut fps = vec![FastProblem::from_problem(p).expect("binary64 inputs")];
    if f32_data {
        let mut f = fps[0].clone();
        f.x = to32(&f.x);
        f.dy = f.dy.as_ref().map(to32);
        fps.push(f);
    }
    let mut fallbacks = 0;
    for fp in &fps {
        for threads in [1, 2] {
            let fast = with_threads(Some(threads), || compute(fp, false)).unwrap();
            match (&exact, fast) {
                (Err(e), Err(f)) => {
                    assert_eq!(
                        bnconf::error::ConfError::Spec(e.clone()).to_string(),
                        f.to_string()
                    )
                }
                (Ok(ex), Ok(f)) => {
                    fallbacks = f.stats.fallbacks;
                    assert_eq!(f.outputs.len(), p.op.outputs().len());
                    for (name, f64s, f32s) in &f.outputs {
                        let vals = &ex[name];
                        assert_eq!(vals.len(), f64s.len());
                        for (i, v) in vals.iter().enumerate() {
                            let r64 = round(v, FloatFormat::F64).to_f64();
                            let r32 = round(v, FloatFormat::F32).to_f64() as f32;
                            assert_eq!(
                                r64.to_bits(),
                                f64s[i].to_bits(),
                                "{} {name}[{i}] f64: exact {v} -> {r64:e}, fast {:e} ({threads} threads)",
                                p.op.name(),
                                f64s[i]
                            );
                            assert_eq!(
                                r32.to_bits(),
                                f32s[i].to_bits(),
                                "{} {name}[{i}] f32: exact {v} -> {r32:e}, fast {:e} ({threads} threads)",
                                p.op.name(),
                                f32s[i]
                            );
                        }
                    }
                }
                (e, f) => panic!(
                    "exact {:?} vs fast {:?}",
                    e.as_ref().err(),
                    f.err().map(|e| e.to_string())
                ),
            }
        }
    }
    fallbacks
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Uniform,
    LargeMean,
    Constant,
    Integers,
    Tiny,
    Huge,
    Subnormal,
    Sparse,
}

/// A value generator for a kind: `(bits, seed index) -> value`, rounded to f32 when asked.
fn value(kind: Kind, r: u64, i: usize, f32d: bool, f64_extreme: bool) -> f64 {
    let u = ((r
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add((i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)))
        >> 11) as f64
        / (1u64 << 53) as f64
        * 2.0
        - 1.0;
    let v = match kind {
        Kind::Uniform => u * 3.0,
        Kind::LargeMean => 4096.0 + u * 1e-3,
        Kind::Constant => 1.5,
        Kind::Integers => (u * 4.0).round(),
        Kind::Tiny => {
            if f32d {
                u * 1e-38
            } else if f64_extreme {
                u * 1e-300
            } else {
                u * 1e-30
            }
        }
        Kind::Huge => {
            if f32d {
                u * 1e30
            } else if f64_extreme {
                u * 1e150
            } else {
                u * 1e100
            }
        }
        Kind::Subnormal => {
            if f32d {
                u * 1e-40
            } else {
                u * 1e-310
            }
        }
        Kind::Sparse => {
            if (i.wrapping_mul(7).wrapping_add(r as usize)).is_multiple_of(5) {
                u
            } else {
                0.0
            }
        }
    };
    if f32d {
        v as f32 as f64
    } else {
        v
    }
}

fn kind_strategy() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Uniform),
        Just(Kind::LargeMean),
        Just(Kind::Constant),
        Just(Kind::Integers),
        Just(Kind::Tiny),
        Just(Kind::Huge),
        Just(Kind::Subnormal),
        Just(Kind::Sparse),
    ]
}

fn layout_strategy() -> impl Strategy<Value = (Layout, Vec<usize>)> {
    prop_oneof![
        (1usize..4, 1usize..10).prop_map(|(c, m)| (Layout::Rows, vec![c, m])),
        (1usize..4, 1usize..10).prop_map(|(c, m)| (Layout::Flat, vec![c, m])),
        (1usize..4, 1usize..4, 1usize..4).prop_map(|(c, h, w)| (Layout::Chw, vec![c, h, w])),
        (1usize..3, 1usize..4, 1usize..3, 1usize..4)
            .prop_map(|(n, c, h, w)| (Layout::Nchw, vec![n, c, h, w])),
        (1usize..3, 1usize..3, 1usize..4, 1usize..4)
            .prop_map(|(n, h, w, c)| (Layout::Nhwc, vec![n, h, w, c])),
    ]
}

fn eps_strategy() -> impl Strategy<Value = Rational> {
    prop_oneof![
        Just(Rational::new(1.into(), 100_000.into())),
        Just(Rational::from_integer(0.into())),
        Just(Rational::new(1.into(), 3.into())),
        Just(Rational::from_integer(1.into())),
        Just(f64_to_rational(1e-5f32 as f64).unwrap()),
    ]
}

#[allow(clippy::too_many_arguments)]
fn build(
    op: Op,
    layout: Layout,
    shape: &[usize],
    eps: Rational,
    kx: Kind,
    kd: Kind,
    seed: u64,
    f32d: bool,
    extreme: bool,
) -> Problem {
    let geom = Geometry::new(layout, shape, 1 << 20).unwrap();
    let (len, c) = (geom.len(), geom.c);
    let mut vals: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let cell = |k: Kind, s: u64| (0..len).map(|i| value(k, s, i, f32d, extreme)).collect();
    let chan = |k: Kind, s: u64| {
        (0..c)
            .map(|i| value(k, s, i, f32d, extreme))
            .collect::<Vec<_>>()
    };
    for &name in op.inputs() {
        let v: Vec<f64> = match name {
            "x" => cell(kx, seed),
            "dy" => cell(kd, seed ^ 0x55),
            "gamma" => chan(Kind::Uniform, seed ^ 1),
            "beta" => chan(kd, seed ^ 2),
            "mean" => chan(kx, seed ^ 3),
            "var" => chan(Kind::Uniform, seed ^ 4)
                .iter()
                .map(|v| v.abs())
                .collect(),
            "m2" => {
                // mean² + something non-negative, rounded to the dtype.
                let mean = chan(kx, seed ^ 3);
                let extra = chan(Kind::Uniform, seed ^ 5);
                mean.iter()
                    .zip(extra)
                    .map(|(m, e)| {
                        let v = m * m + e.abs() * m.abs().max(1e-3);
                        if f32d {
                            (v as f32).min(f32::MAX) as f64
                        } else {
                            v.min(f64::MAX)
                        }
                    })
                    .collect()
            }
            "mean_dy" => chan(kd, seed ^ 6),
            "mean_dy_xhat" => chan(Kind::Uniform, seed ^ 7),
            _ => unreachable!(),
        };
        vals.insert(name, v);
    }
    problem(op, layout, shape, eps, &vals)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Forward),
        Just(Op::Backward),
        Just(Op::Eval),
        Just(Op::SyncForward),
        Just(Op::SyncBackward),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn fast_equals_exact(
        op in op_strategy(),
        (layout, shape) in layout_strategy(),
        eps in eps_strategy(),
        kx in kind_strategy(),
        kd in kind_strategy(),
        seed in any::<u64>(),
        f32d in any::<bool>(),
        extreme in any::<bool>(),
    ) {
        let p = build(op, layout, &shape, eps, kx, kd, seed, f32d, extreme);
        check(&p, f32d);
    }
}

/// Outputs exactly at rounding midpoints (q a perfect square): ties to even, both formats.
#[test]
fn ties_round_to_even() {
    // x = [-1, 1]: mean 0, var 1; eps 0: q = 1, r = 1; y = gamma x + beta.
    for (beta, gamma) in [
        (16777216.0, 0.5),          // 2^24 ± 0.5: f32 ties
        (9007199254740992.0, 0.5),  // 2^53 ± 0.5: f64 ties
        (16777218.0, 1.0),          // 2^24 + 1, 2^24 + 3: f32 ties
        (-9007199254740994.0, 1.0), // -(2^53 + 1), -(2^53 + 3): f64 ties
    ] {
        let mut v = BTreeMap::new();
        v.insert("x", vec![-1.0, 1.0]);
        v.insert("gamma", vec![gamma]);
        v.insert("beta", vec![beta]);
        let p = problem(
            Op::Forward,
            Layout::Rows,
            &[1, 2],
            Rational::from_integer(0.into()),
            &v,
        );
        let fb = check(&p, false);
        assert!(fb > 0, "ties must take the exact fallback");
    }
}

/// A constant channel with eps = 0 is refused (C1) identically by both paths.
#[test]
fn constant_channel_without_eps_is_refused_identically() {
    let mut v = BTreeMap::new();
    v.insert("x", vec![1.0, 2.0, 3.0, 3.0, 3.0, 3.0]);
    v.insert("dy", vec![1.0; 6]);
    v.insert("gamma", vec![1.0, 1.0]);
    let p = problem(
        Op::Backward,
        Layout::Rows,
        &[2, 3],
        Rational::from_integer(0.into()),
        &v,
    );
    check(&p, true);
    assert!(p.evaluate().is_err());
}

/// Larger channels (m in the hundreds), one per layout, f32 data with a large mean.
#[test]
fn larger_channels_all_layouts() {
    for (layout, shape) in [
        (Layout::Nchw, vec![2, 3, 8, 8]),
        (Layout::Nhwc, vec![2, 8, 8, 3]),
        (Layout::Rows, vec![3, 256]),
    ] {
        for op in Op::ALL.into_iter().filter(|o| bnconf::fast::covers(*o)) {
            let p = build(
                op,
                layout,
                &shape,
                Rational::new(1.into(), 100_000.into()),
                Kind::LargeMean,
                Kind::Uniform,
                7,
                true,
                false,
            );
            check(&p, true);
        }
    }
}
