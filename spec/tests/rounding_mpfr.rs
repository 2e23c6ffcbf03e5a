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

use bnconf_spec::exact::round::{round, FloatFormat, Rounded};
use bnconf_spec::exact::{QSqrt, Rational};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use proptest::prelude::*;
use rug::float::Round;
use rug::{Float, Integer};
use std::cmp::Ordering;

type RugQ = rug::Rational;

/// (format, precision p, emin, emax), written here from IEEE 754 / bfloat16.
const FORMATS: [(FloatFormat, u32, i32, i32); 4] = [
    (FloatFormat::F64, 53, -1022, 1023),
    (FloatFormat::F32, 24, -126, 127),
    (FloatFormat::F16, 11, -14, 15),
    (FloatFormat::BF16, 8, -126, 127),
];

fn to_rug(r: &Rational) -> RugQ {
    let n = Integer::from_str_radix(&format!("{:x}", r.numer()), 16).unwrap();
    let d = Integer::from_str_radix(&format!("{:x}", r.denom()), 16).unwrap();
    RugQ::from((n, d))
}

/// A correctly rounded result as MPFR sees it: sign, and magnitude (`None` = infinity).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ref {
    neg: bool,
    mag: Option<RugQ>,
}

fn ours(v: &QSqrt, f: FloatFormat) -> Ref {
    let r: Rounded = round(v, f);
    Ref {
        neg: r.neg,
        mag: r.to_rational().map(|x| to_rug(&x.abs())),
    }
}

/// The exact source MPFR rounds from.
enum Src<'a> {
    Q(&'a RugQ),
    F(&'a Float),
}

impl Src<'_> {
    fn round(&self, prec: u32, rnd: Round) -> (Float, Ordering) {
        match self {
            Src::Q(q) => Float::with_val_round(prec, *q, rnd),
            Src::F(x) => Float::with_val_round(prec, *x, rnd),
        }
    }
    fn is_neg(&self) -> bool {
        match self {
            Src::Q(q) => q.cmp0() == Ordering::Less,
            Src::F(x) => x.is_sign_negative(),
        }
    }
    /// Compare |self| with 2^k exactly.
    fn cmp_abs_pow2(&self, k: i32) -> Ordering {
        let t = Float::with_val(64, Float::i_exp(1, k));
        match self {
            Src::Q(q) => RugQ::from(q.abs_ref()).partial_cmp(&t).unwrap(),
            Src::F(x) => Float::with_val(x.prec(), x.abs_ref())
                .partial_cmp(&t)
                .unwrap(),
        }
    }
}

fn finish(x: Float, neg: bool, emax: i32) -> Ref {
    // |x| >= 2^(emax+1) <=> MPFR exponent (x = 0.1... * 2^exp) >= emax + 2.
    if !x.is_zero() && x.get_exp().unwrap() >= emax + 2 {
        return Ref { neg, mag: None };
    }
    Ref {
        neg,
        mag: Some(x.to_rational().unwrap().abs()),
    }
}

/// Road A: round to p bits, then subnormalize with the ternary value, then overflow.
fn road_a(src: &Src, p: u32, emin: i32, emax: i32) -> Ref {
    let (mut x, ord) = src.round(p, Round::Nearest);
    x.subnormalize_round(emin + 1, ord, Round::Nearest);
    let neg = src.is_neg();
    assert_eq!(x.is_sign_negative(), neg, "MPFR keeps the sign of a zero");
    finish(x, neg, emax)
}

/// Road B: one rounding at the precision of the value's own binade.
fn road_b(src: &Src, p: u32, emin: i32, emax: i32) -> Ref {
    let neg = src.is_neg();
    // Rounding toward zero never raises the exponent: e = floor(log2 |v|).
    let (z, _) = src.round(64, Round::Zero);
    let e = z.get_exp().unwrap() - 1;
    let lost = (emin - e).max(0);
    let eff = p as i32 - lost;
    if eff >= 1 {
        let (x, _) = src.round(eff as u32, Round::Nearest);
        return finish(x, neg, emax);
    }
    // |v| < smallest subnormal 2^(emin - p + 1): 0 or the smallest subnormal; a tie goes to 0.
    let min_sub = emin - p as i32 + 1;
    let mag = if src.cmp_abs_pow2(min_sub - 1) == Ordering::Greater {
        RugQ::from(
            Float::with_val(8, Float::i_exp(1, min_sub))
                .to_rational()
                .unwrap(),
        )
    } else {
        RugQ::new()
    };
    Ref {
        neg,
        mag: Some(mag),
    }
}

fn mpfr_round(src: &Src, f: FloatFormat) -> Ref {
    let &(_, p, emin, emax) = FORMATS.iter().find(|t| t.0 == f).unwrap();
    let a = road_a(src, p, emin, emax);
    let b = road_b(src, p, emin, emax);
    assert_eq!(a, b, "MPFR roads A and B disagree in {f:?}");
    a
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

fn p2(k: i64) -> Rational {
    if k >= 0 {
        Rational::from_integer(BigInt::one() << (k as usize))
    } else {
        Rational::new(BigInt::one(), BigInt::one() << ((-k) as usize))
    }
}

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

fn fmt() -> impl Strategy<Value = FloatFormat> {
    prop_oneof![
        Just(FloatFormat::F64),
        Just(FloatFormat::F32),
        Just(FloatFormat::F16),
        Just(FloatFormat::BF16)
    ]
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
