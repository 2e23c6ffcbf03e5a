//! The double-double ratio of the fast judging path (`Approx::ratio`, judge/prepare.rs) against
//! the exact ratio (`ElementBudget::ratio`: the exact difference in Q(sqrt(q)), rounded once):
//! equal to 2^-45 relative wherever the double-double applies, identical where it falls back,
//! and the same verdict at the gate. Cases per property: `PROPTEST_CASES`, or 512.

use bnconf::judge::budget::ElementBudget;
use bnconf::judge::check::Approx;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::exact::{pow2, QSqrt, Rational};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

/// An exact value: a rational, or `a + b*sqrt(d)`, at scale `2^e`.
fn exact_value(n: i64, den: u64, b: i64, d: u64, e: i64) -> QSqrt {
    let a = Rational::new(n.into(), (den.max(1)).into());
    let v = if b == 0 {
        QSqrt::rational(a)
    } else {
        QSqrt::new(
            a,
            Rational::new(b.into(), 7.into()),
            Rational::from_integer(d.into()),
        )
    };
    v * QSqrt::rational(pow2(e))
}

/// A float near `v`: `v` rounded to `fmt`, moved by `k` of that format's ulps (as f64).
fn near(v: &QSqrt, fmt: FloatFormat, k: i64) -> f64 {
    let r = round(v, fmt).to_f64();
    let ulp = {
        let e = if r == 0.0 {
            -1074
        } else {
            r.abs().log2().floor() as i32
        };
        2f64.powi((e - fmt.precision() as i32 + 1).max(-1074))
    };
    r + k as f64 * ulp
}

fn agree(fast: f64, exact: f64) -> bool {
    if exact == 0.0 || exact.is_infinite() || fast == 0.0 || fast.is_infinite() {
        return fast == exact;
    }
    ((fast - exact) / exact).abs() <= 2f64.powi(-45)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn double_double_ratio_is_the_exact_ratio(
        n in -(1i64 << 50)..(1i64 << 50), den in 1u64..1_000_000, b in -3i64..4, d in 2u64..50,
        e in prop_oneof![-40i64..40, -1100i64..-880, 980i64..1030],
        fmt in 0usize..4, k in -6i64..7,
        cond in prop_oneof![Just(0.0), 0.0f64..100.0, Just(f64::INFINITY)],
        mag in prop_oneof![Just(0.0), 0.0f64..100.0],
        mag2 in prop_oneof![Just(0.0), 0.0f64..10.0],
    ) {
        let v = exact_value(n, den, b, d, e);
        let fmt = FloatFormat::ALL[fmt];
        let u = fmt.unit_roundoff();
        let computed = near(&v, fmt, k);
        let bud = ElementBudget { cond, mag, mag2 };
        let fast = Approx::new(&v).ratio(computed, &v, &bud, u);
        let exact = bud.ratio(computed, &v, u);
        prop_assert!(agree(fast, exact), "{computed:e}: fast {fast:e} vs exact {exact:e}");
        // The gate (ratio <= k(m)) gives the same verdict unless the ratio is within 2^-40
        // of the gate itself.
        for gate in [1.0, 4.0, 24.0] {
            if (exact - gate).abs() > 2f64.powi(-40) * gate {
                prop_assert_eq!(fast <= gate, exact <= gate);
            }
        }
    }
}

#[test]
fn double_double_ratio_edge_cases() {
    let u = FloatFormat::F32.unit_roundoff();
    let third = QSqrt::rational(Rational::new(1.into(), 3.into()));
    let b = ElementBudget {
        cond: 1.0,
        mag: 1.0,
        mag2: 0.0,
    };
    let a = Approx::new(&third);
    // Not finite: infinite ratio.
    assert_eq!(a.ratio(f64::NAN, &third, &b, u), f64::INFINITY);
    assert_eq!(a.ratio(f64::INFINITY, &third, &b, u), f64::INFINITY);
    // A computed value equal to an exact float: 0 (both paths).
    let one = QSqrt::int(1);
    assert_eq!(Approx::new(&one).ratio(1.0, &one, &b, u), 0.0);
    // 1/3 is not a float: the correctly rounded f32 has a ratio just under 1/2 ulp / (2u).
    let c = round(&third, FloatFormat::F32).to_f64();
    let fast = a.ratio(c, &third, &b, u);
    assert!(agree(fast, b.ratio(c, &third, u)), "{fast}");
    assert!(fast > 0.0 && fast < 0.5, "{fast}");
    // Zero budget: 0 when exact, inf otherwise.
    let zero = ElementBudget::default();
    let z = QSqrt::int(0);
    let f64u = FloatFormat::F64.unit_roundoff();
    assert_eq!(Approx::new(&z).ratio(0.0, &z, &zero, f64u), 0.0);
    assert!(Approx::new(&z).ratio(1e-300, &z, &zero, f64u) > 0.0);
    // Outside the double-double range (tiny, huge): the exact path, bit for bit.
    for v in [
        QSqrt::rational(pow2(-1000) / Rational::from_integer(3.into())),
        QSqrt::rational(pow2(1010) / Rational::from_integer(3.into())),
    ] {
        let c = round(&v, FloatFormat::F64).to_f64() * (1.0 + 1e-10);
        let bb = ElementBudget {
            cond: 1e-300,
            mag: 1e300,
            mag2: 0.0,
        };
        assert_eq!(
            Approx::new(&v).ratio(c, &v, &bb, f64u).to_bits(),
            bb.ratio(c, &v, f64u).to_bits()
        );
    }
    // A computed value differing from the exact one only below f64's resolution of it:
    // the residual `lo` keeps the ratio non-zero.
    let v = QSqrt::rational(f64_to_rational(1.0).unwrap() + pow2(-80));
    let r = Approx::new(&v).ratio(1.0, &v, &b, f64u);
    let want = b.ratio(1.0, &v, f64u);
    assert!(r > 0.0 && agree(r, want), "{r:e} vs {want:e}");
}
