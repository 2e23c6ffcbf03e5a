//! Shared strategies and checks of the `properties_*` tests.
//!
//! Shape first, then data (`prop_flat_map`): small shapes (C ≤ 3, m ≤ 6, N·H·W small) and
//! adversarial data per channel — dyadic rationals (small mantissa × 2^k, like binary floats),
//! 24-bit mantissas, integers, constant channels (then eps > 0), a large mean with a small
//! spread, sparse channels. `eps = 0` is drawn only when every channel is non-constant.
//!
//! Every check compares exact values (`QSqrt` equality) and, on failure, prints the inputs,
//! the expected and the actual values.
#![allow(dead_code)]

use bnconf_spec::exact::{fmt_rational, mul_pow2, BigInt, QSqrt, Rational};
use bnconf_spec::num::Dual;
use bnconf_spec::{Geometry, Layout, Op, Problem, SpecError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::collections::BTreeMap;
use std::fmt;

/// Cases per property: `PROPTEST_CASES`, or 256.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        ..ProptestConfig::default()
    }
}

/// `PROPTEST_CASES`, or 256.
pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

// ----------------------------------------------------------------------------------------
// Exact scalars.

/// The integer `n` as a rational.
pub fn int(n: i64) -> Rational {
    Rational::from_integer(BigInt::from(n))
}

/// `n / d`.
pub fn frac(n: i64, d: i64) -> Rational {
    Rational::new(BigInt::from(n), BigInt::from(d))
}

/// `mant · 2^k`, a dyadic rational (what a binary float is).
pub fn dyadic(mant: i64, k: i64) -> Rational {
    mul_pow2(&int(mant), k)
}

/// Rationals as exact field elements.
pub fn qv(v: &[Rational]) -> Vec<QSqrt> {
    v.iter().cloned().map(QSqrt::rational).collect()
}

/// Constants of the dual numbers (zero tangent).
pub fn duals(v: &[QSqrt]) -> Vec<Dual<QSqrt>> {
    v.iter().cloned().map(Dual::constant).collect()
}

/// Rationals as dual constants.
pub fn dual_consts(v: &[Rational]) -> Vec<Dual<QSqrt>> {
    duals(&qv(v))
}

/// Exact inner product.
pub fn dot(a: &[QSqrt], b: &[QSqrt]) -> QSqrt {
    a.iter()
        .zip(b)
        .fold(QSqrt::int(0), |acc, (x, y)| acc + x * y)
}

/// Sum of exact values.
pub fn sum(v: &[QSqrt]) -> QSqrt {
    v.iter().fold(QSqrt::int(0), |acc, x| acc + x)
}

/// Whether all values are equal (a constant channel: its variance is 0).
pub fn is_constant(v: &[Rational]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

// ----------------------------------------------------------------------------------------
// Strategies.

/// A dyadic rational: small mantissa × 2^k (k in -8..=4), or a 24-bit mantissa × 2^k
/// (k in -40..=0), like an f32.
pub fn scalar() -> BoxedStrategy<Rational> {
    prop_oneof![
        4 => (-64i64..=64, -8i64..=4).prop_map(|(m, k)| dyadic(m, k)),
        1 => (-(1i64 << 24)..=(1i64 << 24), -40i64..=0).prop_map(|(m, k)| dyadic(m, k)),
        1 => (-9i64..=9).prop_map(int),
    ]
    .boxed()
}

/// A non-negative dyadic.
pub fn nonneg() -> BoxedStrategy<Rational> {
    prop_oneof![
        1 => Just(int(0)),
        4 => (0i64..=64, -8i64..=4).prop_map(|(m, k)| dyadic(m, k)),
    ]
    .boxed()
}

/// One channel's `m` cells, adversarial.
pub fn cells(m: usize) -> BoxedStrategy<Vec<Rational>> {
    prop_oneof![
        // binary-float-like values
        3 => vec(scalar(), m),
        // integers
        1 => vec((-20i64..=20).prop_map(int), m),
        // a constant channel (variance 0)
        1 => scalar().prop_map(move |v| vec![v; m]),
        // a large mean with a small spread (cancellation in var = E[x²] − mean²)
        1 => (1i64..=7, 16i64..=30, vec((-16i64..=16, -12i64..=-2), m)).prop_map(
            |(mant, k, deltas)| {
                let base = dyadic(2 * mant + 1, k);
                deltas.into_iter().map(|(d, e)| &base + dyadic(d, e)).collect()
            }
        ),
        // sparse
        1 => vec(prop_oneof![3 => Just(int(0)), 1 => scalar()], m),
    ]
    .boxed()
}

/// `eps`: positive (a power of two, 1e-5, f32's 1e-5, a small dyadic) or, unless
/// `need_positive`, zero.
pub fn eps(need_positive: bool) -> BoxedStrategy<Rational> {
    let pos = prop_oneof![
        (0i64..=20).prop_map(|k| dyadic(1, -k)),
        Just(frac(1, 100_000)),
        // 1e-5 as an f32 attribute really is (ONNX): 0x3727C5AC = 0xA7C5AC · 2^-40
        Just(dyadic(0xA7C5AC, -40)),
        (1i64..=15, -12i64..=0).prop_map(|(m, k)| dyadic(m, k)),
    ];
    if need_positive {
        pos.boxed()
    } else {
        prop_oneof![1 => Just(int(0)), 3 => pos].boxed()
    }
}

/// Shape for a layout: rows/flat `[C, m]` (m ≤ 6), chw `[C, H, W]` (H, W ≤ 3), nchw
/// `[N, C, H, W]` and nhwc `[N, H, W, C]` (N ≤ 3, H, W ≤ 2), nc `[N, C]` (N ≤ 6), ncl
/// `[N, C, L]` (N, L ≤ 3), ncdhw `[N, C, D, H, W]` and ndhwc `[N, D, H, W, C]` (N, D, H, W
/// ≤ 2). C ≤ 3, and at most 24 elements (W or L is cut to fit), so that whole-tensor
/// Jacobians stay cheap.
pub fn shape(layout: Layout) -> BoxedStrategy<Vec<usize>> {
    match layout {
        Layout::Rows | Layout::Flat => (1usize..=3, 1usize..=6)
            .prop_map(|(c, m)| vec![c, m])
            .boxed(),
        Layout::Chw => (1usize..=3, 1usize..=3, 1usize..=3)
            .prop_map(|(c, h, w)| vec![c, h, fit(w, c * h)])
            .boxed(),
        Layout::Nchw => (1usize..=3, 1usize..=3, 1usize..=2, 1usize..=2)
            .prop_map(|(n, c, h, w)| vec![n, c, h, fit(w, n * c * h)])
            .boxed(),
        Layout::Nhwc => (1usize..=3, 1usize..=2, 1usize..=2, 1usize..=3)
            .prop_map(|(n, h, w, c)| vec![n, h, fit(w, n * h * c), c])
            .boxed(),
        Layout::Nc => (1usize..=6, 1usize..=3)
            .prop_map(|(n, c)| vec![n, c])
            .boxed(),
        Layout::Ncl => (1usize..=3, 1usize..=3, 1usize..=3)
            .prop_map(|(n, c, l)| vec![n, c, fit(l, n * c)])
            .boxed(),
        Layout::Ncdhw => (1usize..=2, 1usize..=3, 1usize..=2, 1usize..=2, 1usize..=2)
            .prop_map(|(n, c, d, h, w)| vec![n, c, d, h, fit(w, n * c * d * h)])
            .boxed(),
        Layout::Ndhwc => (1usize..=2, 1usize..=2, 1usize..=2, 1usize..=2, 1usize..=3)
            .prop_map(|(n, d, h, w, c)| vec![n, d, h, fit(w, n * d * h * c), c])
            .boxed(),
    }
}

/// The largest `w' ≤ w` with `rest · w' ≤ 24` (at least 1).
fn fit(w: usize, rest: usize) -> usize {
    w.min(24 / rest).max(1)
}

/// Any layout.
pub fn any_layout() -> BoxedStrategy<Layout> {
    prop::sample::select(Layout::ALL.to_vec()).boxed()
}

/// A case: geometry, eps and every input any op takes (cells in layout order). The handed-in
/// statistics are independent of x: `mean`, `var ≥ 0` (`var + eps > 0`), `m2 = var + mean²`,
/// `mean_dy`, and `mean_dy_xhat = a + b·sqrt(var + eps)`.
#[derive(Clone)]
pub struct Case {
    pub geom: Geometry,
    pub eps: Rational,
    pub x: Vec<Rational>,
    pub dy: Vec<Rational>,
    pub gamma: Vec<Rational>,
    pub beta: Vec<Rational>,
    pub mean: Vec<Rational>,
    pub var: Vec<Rational>,
    pub mean_dy: Vec<Rational>,
    pub mdx: Vec<(Rational, Rational)>,
}

/// Write rationals as FORMAT.md does.
pub struct Rs<'a>(pub &'a [Rational]);
impl fmt::Debug for Rs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<String> = self.0.iter().map(fmt_rational).collect();
        write!(f, "[{}]", v.join(", "))
    }
}

/// Write exact values as FORMAT.md does.
pub fn show(v: &[QSqrt]) -> String {
    let v: Vec<String> = v.iter().map(|e| e.to_string()).collect();
    format!("[{}]", v.join(", "))
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Case {{ layout: {}, shape: {:?}, eps: {}, x: {:?}, dy: {:?}, gamma: {:?}, beta: {:?}, \
             mean: {:?}, var: {:?}, m2: {:?}, mean_dy: {:?}, mean_dy_xhat: {} }}",
            self.geom.layout.name(),
            self.geom.shape,
            fmt_rational(&self.eps),
            Rs(&self.x),
            Rs(&self.dy),
            Rs(&self.gamma),
            Rs(&self.beta),
            Rs(&self.mean),
            Rs(&self.var),
            Rs(&self.m2()),
            Rs(&self.mean_dy),
            show(&self.mean_dy_xhat())
        )
    }
}

impl Case {
    /// Channels.
    pub fn c(&self) -> usize {
        self.geom.c
    }
    /// Cells per channel.
    pub fn m(&self) -> usize {
        self.geom.m
    }
    /// `eps` as an exact value.
    pub fn eps_q(&self) -> QSqrt {
        QSqrt::rational(self.eps.clone())
    }
    /// `m2 = var + mean²`.
    pub fn m2(&self) -> Vec<Rational> {
        self.mean
            .iter()
            .zip(&self.var)
            .map(|(mu, v)| v + mu * mu)
            .collect()
    }
    /// `mean_dy_xhat = a + b·sqrt(var + eps)`, in its channel's field.
    pub fn mean_dy_xhat(&self) -> Vec<QSqrt> {
        self.mdx
            .iter()
            .zip(&self.var)
            .map(|((a, b), v)| QSqrt::new(a.clone(), b.clone(), v + &self.eps))
            .collect()
    }
    /// An input by FORMAT.md's name, in layout order.
    pub fn input(&self, name: &str) -> Vec<QSqrt> {
        match name {
            "x" => qv(&self.x),
            "dy" => qv(&self.dy),
            "gamma" => qv(&self.gamma),
            "beta" => qv(&self.beta),
            "mean" => qv(&self.mean),
            "var" => qv(&self.var),
            "m2" => qv(&self.m2()),
            "mean_dy" => qv(&self.mean_dy),
            "mean_dy_xhat" => self.mean_dy_xhat(),
            _ => panic!("no input {name}"),
        }
    }
    /// The problem of `op` on this case's layout.
    pub fn problem(&self, op: Op) -> Problem {
        let inputs = op
            .inputs()
            .iter()
            .map(|n| (n.to_string(), self.input(n)))
            .collect();
        Problem::new(op, self.geom.clone(), self.eps.clone(), inputs).expect("valid problem")
    }
    /// The same case gathered into the flat `[C, m]` layout (the bridge applied to the cells).
    pub fn to_flat(&self) -> Case {
        let geom = Geometry::new(Layout::Flat, &[self.c(), self.m()], 1 << 20).unwrap();
        Case {
            geom,
            x: self.geom.to_mat(&self.x),
            dy: self.geom.to_mat(&self.dy),
            ..self.clone()
        }
    }
    /// x in the matrix view `[C, m]`.
    pub fn x_mat(&self) -> Vec<QSqrt> {
        qv(&self.geom.to_mat(&self.x))
    }
    /// dy in the matrix view `[C, m]`.
    pub fn dy_mat(&self) -> Vec<QSqrt> {
        qv(&self.geom.to_mat(&self.dy))
    }
}

/// A case of `layout`, shape first, then data.
pub fn case(layout: Layout) -> BoxedStrategy<Case> {
    shape(layout)
        .prop_flat_map(move |shape| {
            let g = Geometry::new(layout, &shape, 1 << 20).unwrap();
            let (c, m) = (g.c, g.m);
            (
                Just(g),
                vec(cells(m), c),
                vec(cells(m), c),
                vec(scalar(), c),
                vec(scalar(), c),
                vec(scalar(), c),
                vec(nonneg(), c),
                vec(scalar(), c),
                vec((scalar(), scalar()), c),
            )
        })
        .prop_flat_map(|(g, xs, dys, gamma, beta, mean, var, mean_dy, mdx)| {
            let need_pos = xs.iter().any(|ch| is_constant(ch));
            (
                Just((g, xs, dys, gamma, beta, mean, var, mean_dy, mdx)),
                eps(need_pos),
            )
        })
        .prop_map(
            |((geom, xs, dys, gamma, beta, mean, var, mean_dy, mdx), eps)| {
                let var = var
                    .into_iter()
                    .map(|v| if &v + &eps == int(0) { int(1) } else { v })
                    .collect();
                let x = geom.from_mat(&xs.concat());
                let dy = geom.from_mat(&dys.concat());
                Case {
                    geom,
                    eps,
                    x,
                    dy,
                    gamma,
                    beta,
                    mean,
                    var,
                    mean_dy,
                    mdx,
                }
            },
        )
        .boxed()
}

/// A case of any layout.
pub fn case_any_layout() -> BoxedStrategy<Case> {
    any_layout().prop_flat_map(case).boxed()
}

// ----------------------------------------------------------------------------------------
// Checks: exact equality, failures print inputs, expected and actual.

/// `expected == actual` exactly, or a failure naming the first differing index.
pub fn eq_vec(
    what: &str,
    inputs: &dyn fmt::Debug,
    expected: &[QSqrt],
    actual: &[QSqrt],
) -> Result<(), TestCaseError> {
    if expected == actual {
        return Ok(());
    }
    let at = expected
        .iter()
        .zip(actual)
        .position(|(e, a)| e != a)
        .map_or_else(
            || format!("lengths {} vs {}", expected.len(), actual.len()),
            |i| format!("index {i}"),
        );
    Err(TestCaseError::fail(format!(
        "{what}: differs at {at}\n  inputs:   {inputs:?}\n  expected: {}\n  actual:   {}",
        show(expected),
        show(actual)
    )))
}

/// One exact value equal to another.
pub fn eq_one(
    what: &str,
    inputs: &dyn fmt::Debug,
    expected: &QSqrt,
    actual: &QSqrt,
) -> Result<(), TestCaseError> {
    eq_vec(
        what,
        inputs,
        std::slice::from_ref(expected),
        std::slice::from_ref(actual),
    )
}

/// Unwrap a spec result, or fail with the inputs and the error.
pub fn ok<T>(
    what: &str,
    inputs: &dyn fmt::Debug,
    r: Result<T, SpecError>,
) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("{what}: error {e}\n  inputs: {inputs:?}")))
}

/// Evaluate a problem, or fail.
pub fn eval(
    what: &str,
    inputs: &dyn fmt::Debug,
    p: &Problem,
) -> Result<BTreeMap<&'static str, Vec<QSqrt>>, TestCaseError> {
    ok(what, inputs, p.evaluate())
}

/// Channel of each cell offset of a geometry (inverse of the bridge's gather).
pub fn channel_of(geom: &Geometry) -> Vec<usize> {
    let mut ch = vec![0; geom.len()];
    for c in 0..geom.c {
        for k in 0..geom.m {
            ch[geom.offset(c, k)] = c;
        }
    }
    ch
}

/// Run `property` (expected to fail) and return the minimal counterexample proptest finds;
/// panic if none is found in the configured number of cases (at least 64; deterministic RNG).
pub fn find_counterexample<S: Strategy>(
    what: &str,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> S::Value
where
    S::Value: fmt::Debug,
{
    let n_cases = cases().max(64);
    let config = Config {
        cases: n_cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    match runner.run(&strategy, property) {
        Err(TestError::Fail(why, minimal)) => {
            eprintln!("{what}: counterexample found (as expected): {why}\n  {minimal:?}");
            minimal
        }
        Ok(()) => panic!("{what}: expected a counterexample, none found in {n_cases} cases"),
        Err(e) => panic!("{what}: {e}"),
    }
}
