//! `bnconf_spec::exact::round` against a second exact implementation: MPFR (through `rug`).
//!
//! Run with `cargo test -p bnconf-spec --features rug` (builds GMP and MPFR from source).
//!
//! Every reference result is computed twice, by two MPFR roads, which must agree:
//!
//! - A: `mpfr_set_q` / `mpfr_set` correctly rounded to the target precision with an unbounded
//!   exponent, then `subnormalize_round` (given the ternary value of the first rounding, so no
//!   double rounding) at the format's minimum normal exponent, then overflow to infinity when
//!   the magnitude reached 2^(emax+1);
//! - B: a single correct rounding at the precision the value's binade actually has (`p` for
//!   normals, fewer bits for subnormals; below the smallest subnormal, an exact comparison with
//!   half of it), then the same overflow rule.
//!
//! A rational is handed to MPFR exactly (`mpfr_set_q` rounds once, correctly). An irrational
//! `a + b*sqrt(d)` is enclosed in `[lo, hi]` computed with directed roundings at working
//! precision P; when `lo` and `hi` round to the same float, that float is the correctly
//! rounded value (rounding is monotone). Otherwise P is raised (up to 2^16 bits); an
//! irrational value is never a midpoint, so this ends.

#![cfg(feature = "rug")]

mod mpfr;

use bnconf_spec::exact::round::{round, FloatFormat, Rounded};
use bnconf_spec::exact::{QSqrt, Rational};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use proptest::prelude::*;
use rug::float::Round;
use rug::Float;
use std::cmp::Ordering;

use mpfr::*;

fn ours(v: &QSqrt, f: FloatFormat) -> Ref {
    let r: Rounded = round(v, f);
    Ref {
        neg: r.neg,
        mag: r.to_rational().map(|x| to_rug(&x.abs())),
    }
}

fn check_rational(v: &Rational, f: FloatFormat) {
    if v.is_zero() {
        return;
    }
    let q = to_rug(v);
    let want = mpfr_round(&Src::Q(&q), f);
    let got = ours(&QSqrt::rational(v.clone()), f);
    assert_eq!(got, want, "v = {v} in {f:?}");
}

/// Enclose a + b*sqrt(d) in [lo, hi] at precision `prec`, by directed roundings.
fn enclose(a: &RugQ, b: &RugQ, d: &RugQ, prec: u32) -> (Float, Float) {
    // (`Float::sqrt` would round to nearest: every step here names its direction.)
    let d_lo = Float::with_val_round(prec, d, Round::Down).0;
    let s_lo = Float::with_val_round(prec, d_lo.sqrt_ref(), Round::Down).0;
    let d_hi = Float::with_val_round(prec, d, Round::Up).0;
    let s_hi = Float::with_val_round(prec, d_hi.sqrt_ref(), Round::Up).0;
    let (s_for_lo, s_for_hi) = if b.cmp0() == Ordering::Less {
        (&s_hi, &s_lo)
    } else {
        (&s_lo, &s_hi)
    };
    let t_lo = Float::with_val_round(prec, s_for_lo * b, Round::Down).0;
    let t_hi = Float::with_val_round(prec, s_for_hi * b, Round::Up).0;
    let lo = Float::with_val_round(prec, &t_lo + a, Round::Down).0;
    let hi = Float::with_val_round(prec, &t_hi + a, Round::Up).0;
    assert!(lo <= hi);
    (lo, hi)
}

/// Returns the number of working-precision doublings needed beyond the first.
fn check_irrational(a: &Rational, b: &Rational, d: &Rational, f: FloatFormat) -> u32 {
    let v = QSqrt::new(a.clone(), b.clone(), d.clone());
    if v.is_rational() {
        check_rational(v.as_rational().unwrap(), f);
        return 0;
    }
    let (ra, rb, rd) = (to_rug(a), to_rug(b), to_rug(d));
    let mut prec = 256;
    let mut tries = 0;
    loop {
        let (lo, hi) = enclose(&ra, &rb, &rd, prec);
        if !lo.is_zero() && !hi.is_zero() && lo.is_sign_negative() == hi.is_sign_negative() {
            let (rl, rh) = (mpfr_round(&Src::F(&lo), f), mpfr_round(&Src::F(&hi), f));
            if rl == rh {
                let got = ours(&v, f);
                assert_eq!(got, rl, "v = {v} in {f:?} (MPFR at {prec} bits)");
                return tries;
            }
        }
        tries += 1;
        prec *= 4;
        assert!(
            prec <= 1 << 16,
            "no decision for {v} in {f:?} at {prec} bits"
        );
    }
}

// ---------------------------------------------------------------------------------------

fn rational(words: usize, k: std::ops::RangeInclusive<i64>) -> impl Strategy<Value = Rational> {
    (
        proptest::collection::vec(any::<u64>(), 1..=words),
        proptest::collection::vec(any::<u64>(), 1..=words),
        0u32..64,
        0u32..64,
        k,
        any::<bool>(),
    )
        .prop_map(|(n, d, sn, sd, k, neg)| {
            let big = |w: &[u64], s: u32| {
                let mut x = BigInt::zero();
                for &x64 in w {
                    x = (x << 64) + BigInt::from(x64);
                }
                (x >> s as usize) + 1
            };
            let r = Rational::new(big(&n, sn), big(&d, sd)) * p2(k);
            if neg {
                -r
            } else {
                r
            }
        })
}

fn radicand() -> impl Strategy<Value = Rational> {
    (2u64..1_000_000, 1u64..1000).prop_map(|(n, d)| Rational::new(BigInt::from(n), BigInt::from(d)))
}

proptest! {
    /// Random rationals over every format's whole range and beyond.
    #[test]
    fn rationals_vs_mpfr(x in rational(3, -1200..=1100), f in fmt()) {
        check_rational(&x, f);
    }

    /// Random rationals near the subnormal range and the overflow point of each format.
    #[test]
    fn rationals_near_range_vs_mpfr(x in rational(2, -30..=30), f in fmt(), top in any::<bool>()) {
        let &(_, p, emin, emax) = FORMATS.iter().find(|t| t.0 == f).unwrap();
        let k = if top { emax as i64 } else { (emin - p as i32) as i64 };
        check_rational(&(x * p2(k)), f);
    }

    /// Exact midpoints and their neighbourhoods, built from random bit patterns of f64.
    #[test]
    fn midpoints_vs_mpfr(bits in any::<u64>(), f in fmt(), nudge in -2i64..=2) {
        let x = f64::from_bits(bits);
        prop_assume!(x.is_finite() && x != 0.0);
        // x has 53 bits: the midpoints of the narrower formats sit among such values; nudge
        // by a quarter of f64's ulp to land on, above or below f64 values.
        let v = bnconf_spec::exact::round::f64_to_rational(x).unwrap();
        let ulp = p2(x.abs().log2().floor() as i64 - 52 - 2).max(p2(-1076));
        check_rational(&(v + ulp * Rational::from_integer(BigInt::from(nudge))), f);
    }

    /// Random a + b*sqrt(d), all magnitudes.
    #[test]
    fn irrationals_vs_mpfr(a in rational(2, -40..=40), b in rational(2, -40..=40),
                           d in radicand(), scale in -1150i64..=1080, zero_a in any::<bool>(),
                           f in fmt()) {
        let a = if zero_a { Rational::zero() } else { a };
        check_irrational(&(a * p2(scale)), &(b * p2(scale)), &d, f);
    }

    /// a ≈ -b*sqrt(d) to j bits: heavy cancellation, tiny values.
    #[test]
    fn cancelling_irrationals_vs_mpfr(b in rational(1, -20..=20), d in radicand(), j in 0i64..400,
                                      f in fmt()) {
        let t = (&b * &b * &d * p2(2 * j)).floor().to_integer().sqrt();
        let a = Rational::from_integer(t) * p2(-j);
        let a = if b.is_positive() { -a } else { a };
        check_irrational(&a, &b, &d, f);
    }
}

#[test]
fn boundaries_vs_mpfr() {
    for &(f, p, emin, emax) in &FORMATS {
        let (p, emin, emax) = (p as i64, emin as i64, emax as i64);
        let min_sub = p2(emin - p + 1);
        let max = (p2(p) - Rational::one()) * p2(emax - p + 1);
        let half = Rational::new(BigInt::from(1), BigInt::from(2));
        for v in [
            min_sub.clone(),
            &min_sub * &half,
            &min_sub * &half * Rational::new(BigInt::from(1001), BigInt::from(1000)),
            &min_sub * Rational::new(BigInt::from(3), BigInt::from(2)),
            &min_sub * p2(-300),
            p2(emin) - &min_sub * &half,
            max.clone(),
            &max + p2(emax - p),
            &max + p2(emax - p) - p2(emax - p - 60),
            p2(emax + 1),
        ] {
            check_rational(&v, f);
            check_rational(&-v, f);
        }
        check_irrational(
            &Rational::zero(),
            &min_sub,
            &Rational::from_integer(2.into()),
            f,
        );
        check_irrational(
            &Rational::zero(),
            &-(&max * Rational::new(7.into(), 10.into())),
            &Rational::from_integer(2.into()),
            f,
        );
    }
}
