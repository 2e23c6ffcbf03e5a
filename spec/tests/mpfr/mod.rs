//! MPFR's side of the rounding cross-checks (`rounding_mpfr.rs`, `roots_mpfr.rs`): the
//! formats written from IEEE 754, conversion to `rug`, and a correct rounding of an exact
//! source (a rational or an MPFR float) to a format by two MPFR roads that must agree.
#![allow(dead_code)]

use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::exact::Rational;
use num_bigint::BigInt;
use num_traits::One;
use proptest::prelude::*;
use rug::float::Round;
use rug::{Float, Integer};
use std::cmp::Ordering;

/// MPFR's rational.
pub type RugQ = rug::Rational;

/// (format, precision p, emin, emax), written here from IEEE 754 / bfloat16.
pub const FORMATS: [(FloatFormat, u32, i32, i32); 4] = [
    (FloatFormat::F64, 53, -1022, 1023),
    (FloatFormat::F32, 24, -126, 127),
    (FloatFormat::F16, 11, -14, 15),
    (FloatFormat::BF16, 8, -126, 127),
];

pub fn to_rug(r: &Rational) -> RugQ {
    let n = Integer::from_str_radix(&format!("{:x}", r.numer()), 16).unwrap();
    let d = Integer::from_str_radix(&format!("{:x}", r.denom()), 16).unwrap();
    RugQ::from((n, d))
}

/// A correctly rounded result as MPFR sees it: sign, and magnitude (`None` = infinity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    pub neg: bool,
    pub mag: Option<RugQ>,
}

/// The exact source MPFR rounds from.
pub enum Src<'a> {
    Q(&'a RugQ),
    F(&'a Float),
}

impl Src<'_> {
    pub fn round(&self, prec: u32, rnd: Round) -> (Float, Ordering) {
        match self {
            Src::Q(q) => Float::with_val_round(prec, *q, rnd),
            Src::F(x) => Float::with_val_round(prec, *x, rnd),
        }
    }
    pub fn is_neg(&self) -> bool {
        match self {
            Src::Q(q) => q.cmp0() == Ordering::Less,
            Src::F(x) => x.is_sign_negative(),
        }
    }
    /// Compare |self| with 2^k exactly.
    pub fn cmp_abs_pow2(&self, k: i32) -> Ordering {
        let t = Float::with_val(64, Float::i_exp(1, k));
        match self {
            Src::Q(q) => RugQ::from(q.abs_ref()).partial_cmp(&t).unwrap(),
            Src::F(x) => Float::with_val(x.prec(), x.abs_ref())
                .partial_cmp(&t)
                .unwrap(),
        }
    }
}

pub fn finish(x: Float, neg: bool, emax: i32) -> Ref {
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
pub fn road_a(src: &Src, p: u32, emin: i32, emax: i32) -> Ref {
    let (mut x, ord) = src.round(p, Round::Nearest);
    x.subnormalize_round(emin + 1, ord, Round::Nearest);
    let neg = src.is_neg();
    assert_eq!(x.is_sign_negative(), neg, "MPFR keeps the sign of a zero");
    finish(x, neg, emax)
}

/// Road B: one rounding at the precision of the value's own binade.
pub fn road_b(src: &Src, p: u32, emin: i32, emax: i32) -> Ref {
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

pub fn mpfr_round(src: &Src, f: FloatFormat) -> Ref {
    let &(_, p, emin, emax) = FORMATS.iter().find(|t| t.0 == f).unwrap();
    let a = road_a(src, p, emin, emax);
    let b = road_b(src, p, emin, emax);
    assert_eq!(a, b, "MPFR roads A and B disagree in {f:?}");
    a
}

pub fn p2(k: i64) -> Rational {
    if k >= 0 {
        Rational::from_integer(BigInt::one() << (k as usize))
    } else {
        Rational::new(BigInt::one(), BigInt::one() << ((-k) as usize))
    }
}

pub fn fmt() -> impl Strategy<Value = FloatFormat> {
    prop_oneof![
        Just(FloatFormat::F64),
        Just(FloatFormat::F32),
        Just(FloatFormat::F16),
        Just(FloatFormat::BF16)
    ]
}
