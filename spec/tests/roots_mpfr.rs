//! `SumOfRoots::round` (sums `A + Σ Bᵢ·sqrt(Dᵢ)`, a family's `dgamma`) against MPFR.
//!
//! Run with `cargo test -p bnconf-spec --features rug` (builds GMP and MPFR from source).
//!
//! The sum *as given* (radicands neither merged nor normalized) is enclosed in `[lo, hi]` by
//! MPFR with directed roundings at working precision P (each `sqrt` rounded down and up, each
//! product and sum rounded outward); when `lo` and `hi` round alike (by the two MPFR roads of
//! `mpfr/mod.rs`), that is the correctly rounded value, and ours must equal it. Otherwise P is
//! raised. Cases: random sums, repeated rows (one radicand several times), radicands in one
//! square class (2 and 8, 3/4 and 27, d and d·s²), and constructed near-ties within 2^-60 and
//! 2^-300 relative of a rounding midpoint of each format.
//!
//! The number of cases per property is proptest's default (256), or `PROPTEST_CASES`.

#![cfg(feature = "rug")]

mod mpfr;

use bnconf_spec::exact::round::{round_rational, FloatFormat};
use bnconf_spec::exact::{Rational, SumOfRoots};
use mpfr::*;
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use proptest::prelude::*;
use rug::float::Round;
use rug::Float;
use std::cmp::Ordering;

fn int(n: i64) -> Rational {
    Rational::from_integer(BigInt::from(n))
}

fn ours(v: &SumOfRoots, f: FloatFormat) -> Ref {
    let r = v.round(f);
    Ref {
        neg: r.neg,
        mag: r.to_rational().map(|x| to_rug(&x.abs())),
    }
}

/// Enclose `a + Σ b·sqrt(d)` in `[lo, hi]` at precision `prec`, every step rounded outward.
fn enclose(a: &Rational, terms: &[(Rational, Rational)], prec: u32) -> (Float, Float) {
    let ra = to_rug(a);
    let mut lo = Float::with_val_round(prec, &ra, Round::Down).0;
    let mut hi = Float::with_val_round(prec, &ra, Round::Up).0;
    for (b, d) in terms {
        let (rb, rd) = (to_rug(b), to_rug(d));
        let d_lo = Float::with_val_round(prec, &rd, Round::Down).0;
        let s_lo = Float::with_val_round(prec, d_lo.sqrt_ref(), Round::Down).0;
        let d_hi = Float::with_val_round(prec, &rd, Round::Up).0;
        let s_hi = Float::with_val_round(prec, d_hi.sqrt_ref(), Round::Up).0;
        let (s_for_lo, s_for_hi) = if rb.cmp0() == Ordering::Less {
            (&s_hi, &s_lo)
        } else {
            (&s_lo, &s_hi)
        };
        let t_lo = Float::with_val_round(prec, s_for_lo * &rb, Round::Down).0;
        let t_hi = Float::with_val_round(prec, s_for_hi * &rb, Round::Up).0;
        lo = Float::with_val_round(prec, &lo + &t_lo, Round::Down).0;
        hi = Float::with_val_round(prec, &hi + &t_hi, Round::Up).0;
    }
    assert!(lo <= hi);
    (lo, hi)
}

/// Check ours against MPFR; returns our result.
fn check(a: &Rational, terms: &[(Rational, Rational)], f: FloatFormat) -> Ref {
    let v = SumOfRoots::from_terms(a.clone(), terms.iter().cloned());
    let got = ours(&v, f);
    if let Some(r) = v.as_rational() {
        // Rational after the normal form (one-class terms cancelled): MPFR rounds it exactly.
        if !r.is_zero() {
            let q = to_rug(r);
            assert_eq!(got, mpfr_round(&Src::Q(&q), f), "{v} in {f:?}");
        } else {
            assert_eq!(
                got,
                Ref {
                    neg: false,
                    mag: Some(RugQ::new())
                },
                "{v} in {f:?}"
            );
        }
        return got;
    }
    let mut prec = 256;
    loop {
        let (lo, hi) = enclose(a, terms, prec);
        if !lo.is_zero() && !hi.is_zero() && lo.is_sign_negative() == hi.is_sign_negative() {
            let (rl, rh) = (mpfr_round(&Src::F(&lo), f), mpfr_round(&Src::F(&hi), f));
            if rl == rh {
                assert_eq!(got, rl, "{v} in {f:?} (MPFR at {prec} bits)");
                return got;
            }
        }
        prec *= 4;
        assert!(
            prec <= 1 << 16,
            "no MPFR decision for {v} in {f:?} at {prec} bits"
        );
    }
}

fn coef(k: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Rational> {
    (-(1i64 << 50)..=(1i64 << 50), 1i64..=1000, k)
        .prop_map(|(n, d, e)| Rational::new(n.into(), d.into()) * p2(e))
        .boxed()
}

fn radicand() -> BoxedStrategy<Rational> {
    (2u64..1_000_000, 1u64..1000)
        .prop_map(|(n, d)| Rational::new(BigInt::from(n), BigInt::from(d)))
        .boxed()
}

/// The midpoint above the float nearest `x > 0` in `f`, and which float is below it.
fn midpoint_above(x: &Rational, f: FloatFormat) -> Rational {
    let r = round_rational(x, f);
    assert!(!r.inf && r.mant > 0);
    r.to_rational().unwrap() + p2(r.exp - 1)
}

/// `a` with `a + Σ b·sqrt(d)` within `(n+1)·2^-k` of `t`, above (or below) it.
fn near(t: &Rational, terms: &[(Rational, Rational)], k: i64, below: bool) -> Rational {
    let mut w = Rational::zero();
    for (b, d) in terms {
        let f = Rational::from_integer((b * b * d * p2(2 * k)).floor().to_integer().sqrt());
        w += if b.is_negative() {
            -f - Rational::one()
        } else {
            f
        };
    }
    let w = w * p2(-k);
    let n = int(terms.len() as i64 + 1) * p2(-k);
    if below {
        t - w - n
    } else {
        t - w + n
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    /// Random sums of 1–5 terms, every magnitude (the subnormal and overflow ranges included).
    #[test]
    fn random_sums_vs_mpfr(a in coef(-40..=40), ts in prop::collection::vec((coef(-40..=40),
            radicand()), 1..=5), scale in -1150i64..=1080, zero_a in any::<bool>(), f in fmt()) {
        let a = if zero_a { Rational::zero() } else { a * p2(scale) };
        let ts: Vec<_> = ts.into_iter().map(|(b, d)| (b * p2(scale), d)).collect();
        check(&a, &ts, f);
    }

    /// Repeated rows: one radicand several times (merged into one term), and a second one.
    #[test]
    fn repeated_radicands_vs_mpfr(a in coef(-20..=20), bs in prop::collection::vec(coef(-20..=20),
            2..=6), d in radicand(), e in radicand(), b2 in coef(-20..=20), f in fmt()) {
        let mut ts: Vec<_> = bs.into_iter().map(|b| (b, d.clone())).collect();
        ts.push((b2, e));
        check(&a, &ts, f);
    }

    /// Radicands in one square class: d and d·s² (merged by the exact square-root test), and
    /// the examples 2 and 8, 3/4 and 27.
    #[test]
    fn one_square_class_vs_mpfr(a in coef(-20..=20), b1 in coef(-20..=20), b2 in coef(-20..=20),
            b3 in coef(-20..=20), d in radicand(), sn in 1i64..=50, sd in 1i64..=50,
            e in radicand(), f in fmt()) {
        let s2 = Rational::new((sn * sn).into(), (sd * sd).into());
        check(&a, &[(b1.clone(), d.clone()), (b2.clone(), &d * s2), (b3.clone(), e)], f);
        check(&a, &[(b1.clone(), int(2)), (b2.clone(), int(8)), (b3.clone(), int(3))], f);
        check(&a, &[(b1, Rational::new(3.into(), 4.into())), (b2, int(27)), (b3, int(5))], f);
    }

    /// Near-ties: within ~2^-60 (or 2^-300) relative of the midpoint above a random float of
    /// each format, on both sides, 2–4 terms in distinct classes.
    #[test]
    fn near_ties_vs_mpfr(u in 0i64..(1 << 20), scale in -1022i64..=1022, f in fmt(),
            below in any::<bool>(), deep in any::<bool>(),
            bs in prop::collection::vec(prop_oneof![-9i64..=-1, 1i64..=9], 2..=4)) {
        // x = (1 + u·2^-20)·2^s, a normal number of the format (s clamped to its range)
        let &(_, _, emin, emax) = FORMATS.iter().find(|t| t.0 == f).unwrap();
        let s = scale.clamp(emin as i64, emax as i64 - 1);
        let x = (Rational::one() + int(u) * p2(-20)) * p2(s);
        let t = midpoint_above(&x, f);
        let terms: Vec<_> = bs.iter().zip([2i64, 3, 5, 7]).map(|(&b, p)| (int(b), int(p))).collect();
        let lb = t.numer().bits() as i64 - t.denom().bits() as i64;
        let k = if deep { 300 } else { 60 } - lb + 8;
        let a = near(&t, &terms, k, below);
        let got = check(&a, &terms, f);
        // and on the expected side of the midpoint
        let lower = round_rational(&x, f).to_rational().unwrap();
        let mag = got.mag.clone().unwrap();
        prop_assert_eq!(mag == to_rug(&lower), below);
    }
}

/// Near-ties at the overflow threshold (max + half an ulp) and at the smallest subnormal's
/// half, both sides, every format.
#[test]
fn near_ties_at_the_ends_vs_mpfr() {
    for &(f, p, emin, emax) in &FORMATS {
        let (p, emin, emax) = (p as i64, emin as i64, emax as i64);
        let max = (p2(p) - Rational::one()) * p2(emax - p + 1);
        let threshold = &max + p2(emax - p);
        let half_sub = p2(emin - p);
        let terms = [(int(1), int(2)), (int(-1), int(3))];
        for t in [threshold, half_sub] {
            let lb = t.numer().bits() as i64 - t.denom().bits() as i64;
            for below in [false, true] {
                for extra in [60, 300] {
                    check(&near(&t, &terms, extra - lb + 8, below), &terms, f);
                }
            }
        }
    }
}
