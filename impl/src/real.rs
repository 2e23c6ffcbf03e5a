//! The working float types (`f32`, `f64`) behind one small trait, and correct rounding of
//! an `f64` to each storage dtype.

use crate::Dtype;
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A float type the kernels compute in. Implemented for `f32` and `f64`; the algorithms are
/// written once against this trait.
pub(crate) trait Real:
    Copy
    + Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    /// Nearest value of this type (ties to even).
    fn of(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    /// `self * a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// A cell count as a float of this type.
    fn count(n: usize) -> Self {
        Self::of(n as f64)
    }
}

macro_rules! impl_real {
    ($t:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn of(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
        }
    };
}
impl_real!(f32);
impl_real!(f64);

/// A value held in a 16-bit storage type (f16 when `BF16` is false, bf16 when true): every
/// operation is done in f64 and its result correctly rounded back to the storage type, so a
/// kernel written against [`Real`] computes entirely in the storage precision (the textbook
/// kernel that a half-precision library with no wider accumulator is).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub(crate) struct Stored<const BF16: bool>(f64);

impl<const BF16: bool> Stored<BF16> {
    fn r(v: f64) -> Self {
        Stored(round_to(if BF16 { Dtype::BF16 } else { Dtype::F16 }, v))
    }
}

macro_rules! stored_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl<const BF16: bool> $tr for Stored<BF16> {
            type Output = Self;
            fn $f(self, o: Self) -> Self {
                Self::r(self.0 $op o.0)
            }
        }
    };
}
stored_op!(Add, add, +);
stored_op!(Sub, sub, -);
stored_op!(Mul, mul, *);
stored_op!(Div, div, /);

impl<const BF16: bool> Neg for Stored<BF16> {
    type Output = Self;
    fn neg(self) -> Self {
        Stored(-self.0)
    }
}

impl<const BF16: bool> Real for Stored<BF16> {
    const ZERO: Self = Stored(0.0);
    const ONE: Self = Stored(1.0);
    fn of(v: f64) -> Self {
        Self::r(v)
    }
    fn to_f64(self) -> f64 {
        self.0
    }
    fn sqrt(self) -> Self {
        Self::r(self.0.sqrt())
    }
    fn mul_add(self, a: Self, b: Self) -> Self {
        Self::r(self.0.mul_add(a.0, b.0))
    }
}

/// `v` rounded to `f32` with round-to-odd: exact results stay, inexact ones land on the
/// neighbour whose last significand bit is 1. Rounding this to any format with at least two
/// fewer significand bits (f16, bf16) gives the correctly rounded result of `v` itself, with
/// no double-rounding error.
fn f64_to_f32_round_odd(v: f64) -> f32 {
    let r = v as f32;
    if !r.is_finite() || r as f64 == v || r.to_bits() & 1 == 1 {
        return r;
    }
    // Inexact and even: the other neighbour of `v` (bit patterns of consecutive floats of
    // one sign are consecutive integers) is the odd one.
    let b = r.to_bits();
    if (r as f64).abs() > v.abs() {
        f32::from_bits(b - 1)
    } else {
        f32::from_bits(b + 1)
    }
}

/// `v` correctly rounded (to nearest, ties to even) to `dtype`, returned as an `f64`.
/// Overflow gives an infinity; NaN stays NaN.
///
/// `half`'s own `from_f64` converts through `f32` by plain rounding (or truncates), which can
/// double-round; this goes through a round-to-odd `f32` and then `half`'s correct `from_f32`.
pub fn round_to(dtype: Dtype, v: f64) -> f64 {
    match dtype {
        Dtype::F64 => v,
        Dtype::F32 => v as f32 as f64,
        Dtype::F16 => half::f16::from_f32(f64_to_f32_round_odd(v)).to_f64(),
        Dtype::BF16 => half::bf16::from_f32(f64_to_f32_round_odd(v)).to_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference rounding by brute force: the two `dtype` neighbours of `v` are found by
    /// walking the bit patterns; the midpoint of two neighbours is exact in f64.
    fn reference(dtype: Dtype, v: f64) -> f64 {
        let (to, from): (fn(u16) -> f64, u16) = match dtype {
            Dtype::F16 => (|b| half::f16::from_bits(b).to_f64(), 0x7c00),
            Dtype::BF16 => (|b| half::bf16::from_bits(b).to_f64(), 0x7f80),
            _ => unreachable!(),
        };
        let sign = if v < 0.0 { 0x8000u16 } else { 0 };
        let a = v.abs();
        // Largest magnitude pattern <= a.
        let mut lo = 0u16;
        while lo < from && to(lo + 1) <= a {
            lo += 1;
        }
        if lo == from {
            return to(sign | lo);
        }
        let (l, h) = (to(lo), to(lo + 1));
        let mid = l + (h - l) / 2.0;
        let pick = if a < mid || (a == mid && lo.is_multiple_of(2)) {
            lo
        } else {
            lo + 1
        };
        to(sign | pick)
    }

    #[test]
    fn half_rounding_is_correct_where_double_rounding_is_not() {
        // 1 + 2^-11 + 2^-40 is just above an f16 tie; rounding through f32 first would
        // land on the tie and then round to even (1.0).
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(round_to(Dtype::F16, v), 1.0 + 2f64.powi(-10));
        assert_eq!(half::f16::from_f32(v as f32).to_f64(), 1.0);
        let w = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(round_to(Dtype::BF16, w), 1.0 + 2f64.powi(-7));
        // Exact ties still go to even.
        assert_eq!(round_to(Dtype::F16, 1.0 + 2f64.powi(-11)), 1.0);
        assert_eq!(
            round_to(Dtype::F16, -(1.0 + 3.0 * 2f64.powi(-11))),
            -(1.0 + 2f64.powi(-9))
        );
        assert_eq!(round_to(Dtype::F16, 1e6), f64::INFINITY);
        assert_eq!(round_to(Dtype::F16, 65504.0), 65504.0);
        assert!(round_to(Dtype::BF16, f64::NAN).is_nan());
        assert_eq!(round_to(Dtype::F32, 0.1), 0.1f32 as f64);
    }

    #[test]
    fn half_rounding_matches_brute_force() {
        // Deterministic xorshift; values spread over the finite f16 range (no overflow),
        // many within a few f64 ulps of an f16 or bf16 midpoint.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for i in 0..4000 {
            let bits = next();
            let e = (bits % 40) as i32 - 26;
            let frac = (bits >> 8) as f64 / 2f64.powi(56);
            let mut v = (1.0 + frac) * 2f64.powi(e);
            if i % 3 != 2 {
                // Snap near a midpoint of the f16 (10 fraction bits) or bf16 (7) grid.
                let q = 2f64.powi(e - if i % 3 == 0 { 10 } else { 7 });
                v = ((v / q).floor() + 0.5) * q + (((bits >> 60) as f64) - 8.0) * 2f64.powi(e - 52);
            }
            if bits & 1 == 1 {
                v = -v;
            }
            assert_eq!(
                round_to(Dtype::F16, v),
                reference(Dtype::F16, v),
                "f16 {v:e}"
            );
            // bf16: same exponents are well inside its range; check the rounding itself.
            assert_eq!(
                round_to(Dtype::BF16, v),
                reference(Dtype::BF16, v),
                "bf16 {v:e}"
            );
        }
    }
}
