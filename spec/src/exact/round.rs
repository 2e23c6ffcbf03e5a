//! Correct rounding of exact values to binary floating-point formats.
//!
//! Round to nearest, ties to even; overflow to ±inf; gradual underflow (subnormals); the sign
//! of a zero result follows the sign of the exact value (an exact zero rounds to +0).
//! The algorithm is exact: the binade and the quantum are found by exact comparisons with
//! powers of two, the truncated significand by an exact floor, and the rounding direction by
//! the exact sign of `|v| - midpoint`. An irrational value is never a midpoint.

use super::{pow2, BigInt, QSqrt, Rational};
use num_traits::{One, ToPrimitive, Zero};
use std::cmp::Ordering;

/// A binary interchange format (or bfloat16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FloatFormat {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (binary32's exponent range, 8-bit significand).
    BF16,
}

impl FloatFormat {
    /// All formats, widest first.
    pub const ALL: [FloatFormat; 4] = [
        FloatFormat::F64,
        FloatFormat::F32,
        FloatFormat::F16,
        FloatFormat::BF16,
    ];

    /// Significand precision p (including the implicit bit).
    pub fn precision(self) -> u32 {
        match self {
            FloatFormat::F64 => 53,
            FloatFormat::F32 => 24,
            FloatFormat::F16 => 11,
            FloatFormat::BF16 => 8,
        }
    }
    /// Exponent of the smallest normal number.
    pub fn emin(self) -> i64 {
        match self {
            FloatFormat::F64 => -1022,
            FloatFormat::F32 | FloatFormat::BF16 => -126,
            FloatFormat::F16 => -14,
        }
    }
    /// Exponent of the largest finite number.
    pub fn emax(self) -> i64 {
        match self {
            FloatFormat::F64 => 1023,
            FloatFormat::F32 | FloatFormat::BF16 => 127,
            FloatFormat::F16 => 15,
        }
    }
    /// Unit roundoff u = 2^-p.
    pub fn unit_roundoff(self) -> f64 {
        2f64.powi(-(self.precision() as i32))
    }
    /// Width in bits of the storage format.
    pub fn bits(self) -> u32 {
        match self {
            FloatFormat::F64 => 64,
            FloatFormat::F32 => 32,
            FloatFormat::F16 | FloatFormat::BF16 => 16,
        }
    }
    /// The name used in FORMAT.md (`f64`, `f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            FloatFormat::F64 => "f64",
            FloatFormat::F32 => "f32",
            FloatFormat::F16 => "f16",
            FloatFormat::BF16 => "bf16",
        }
    }
    /// Parse a FORMAT.md name.
    pub fn from_name(s: &str) -> Option<FloatFormat> {
        FloatFormat::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// A correctly rounded result: `(-1)^neg * mant * 2^exp`, or an infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rounded {
    /// The format rounded to.
    pub format: FloatFormat,
    /// Sign bit.
    pub neg: bool,
    /// Integer significand (`< 2^p`); 0 for a zero.
    pub mant: u64,
    /// Exponent of the significand's last bit (the quantum).
    pub exp: i64,
    /// Overflowed to infinity.
    pub inf: bool,
}

impl Rounded {
    /// Whether the result is finite.
    pub fn is_finite(&self) -> bool {
        !self.inf
    }

    /// The exact value as a rational (`None` for an infinity).
    pub fn to_rational(&self) -> Option<Rational> {
        if self.inf {
            return None;
        }
        let r = Rational::from_integer(BigInt::from(self.mant)) * pow2(self.exp);
        Some(if self.neg { -r } else { r })
    }

    /// The storage bits of the value in its format (f64: 64 bits; f32: 32; f16, bf16: 16).
    pub fn to_bits(&self) -> u64 {
        let f = self.format;
        let p = f.precision() as i64;
        let ebits = f.bits() as i64 - p; // exponent field width
        let bias = f.emax();
        let sign = (self.neg as u64) << (f.bits() - 1);
        if self.inf {
            return sign | (((1u64 << ebits) - 1) << (p - 1));
        }
        if self.mant == 0 {
            return sign;
        }
        let top = 63 - self.mant.leading_zeros() as i64; // position of the leading bit
        let e = self.exp + top; // exponent of the leading bit
        if top < p - 1 {
            // subnormal: exp == emin - (p-1)
            sign | self.mant
        } else {
            let field = (e + bias) as u64;
            sign | (field << (p - 1)) | (self.mant & ((1u64 << (p - 1)) - 1))
        }
    }

    /// The value as an f64 (exact: every format here is a subset of binary64).
    pub fn to_f64(&self) -> f64 {
        let s = if self.neg { -1.0 } else { 1.0 };
        if self.inf {
            return s * f64::INFINITY;
        }
        // mant < 2^53 and the exponent lies in binary64's range: two exact scalings.
        let half = self.exp / 2;
        s * (self.mant as f64) * 2f64.powi(half as i32) * 2f64.powi((self.exp - half) as i32)
    }

    /// Hex-float string in the style of Python's `float.hex`: `0x1.8000000000000p+1` for f64,
    /// `0x1.800000p+1` for f32 (`ceil((p-1)/4)` digits), `0x0.0000000000001p-1022` for a
    /// subnormal, `0x0.0p+0` for zero, `inf` / `-inf`.
    pub fn to_hex(&self) -> String {
        let sign = if self.neg { "-" } else { "" };
        if self.inf {
            return format!("{sign}inf");
        }
        if self.mant == 0 {
            return format!("{sign}0x0.0p+0");
        }
        let f = self.format;
        let p = f.precision() as i64;
        let digits = ((p - 1) + 3) / 4;
        let shift = digits * 4 - (p - 1);
        let top = 63 - self.mant.leading_zeros() as i64;
        let (lead, frac, e) = if top == p - 1 {
            (1, self.mant - (1u64 << (p - 1)), self.exp + p - 1)
        } else {
            (0, self.mant, f.emin())
        };
        let frac = frac << shift;
        let es = if e >= 0 {
            format!("+{e}")
        } else {
            format!("{e}")
        };
        format!(
            "{sign}0x{lead}.{frac:0width$x}p{es}",
            width = digits as usize
        )
    }
}

/// Correctly round `v` to `format` (nearest, ties to even).
pub fn round(v: &QSqrt, format: FloatFormat) -> Rounded {
    let p = format.precision() as i64;
    let s = v.signum();
    if s == 0 {
        return Rounded {
            format,
            neg: false,
            mant: 0,
            exp: 0,
            inf: false,
        };
    }
    let neg = s < 0;
    let av = if neg { -v.clone() } else { v.clone() };
    // e = floor(log2 |v|), by an estimate corrected with exact comparisons.
    let mut e = av.approx_log2();
    while av.cmp_rational(&pow2(e)) == Ordering::Less {
        e -= 1;
    }
    while av.cmp_rational(&pow2(e + 1)) != Ordering::Less {
        e += 1;
    }
    if e > format.emax() {
        return Rounded {
            format,
            neg,
            mant: 0,
            exp: 0,
            inf: true,
        };
    }
    let mut qe = e.max(format.emin()) - (p - 1);
    let w = av.mul_pow2(-qe);
    let t = w.floor();
    let half = Rational::from_integer(&t * 2 + 1) / Rational::from_integer(BigInt::from(2));
    let up = match w.cmp_rational(&half) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => (&t % 2u32) == BigInt::one(),
    };
    let mut mant = t.to_u64().expect("significand fits in 64 bits");
    if up {
        mant += 1;
    }
    if mant == 1u64 << p {
        mant >>= 1;
        qe += 1;
    }
    if qe + p - 1 > format.emax() {
        return Rounded {
            format,
            neg,
            mant: 0,
            exp: 0,
            inf: true,
        };
    }
    if mant.is_zero() {
        qe = 0;
    }
    Rounded {
        format,
        neg,
        mant,
        exp: qe,
        inf: false,
    }
}

/// Round a rational (shorthand for [`round`] on a rational value).
pub fn round_rational(r: &Rational, format: FloatFormat) -> Rounded {
    round(&QSqrt::rational(r.clone()), format)
}

/// The exact rational value of a finite f64.
pub fn f64_to_rational(x: f64) -> Option<Rational> {
    if !x.is_finite() {
        return None;
    }
    let bits = x.to_bits();
    let neg = bits >> 63 == 1;
    let ef = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mant, exp) = if ef == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), ef - 1075)
    };
    let r = Rational::from_integer(BigInt::from(mant)) * pow2(exp);
    Some(if neg { -r } else { r })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::parse::parse_rational;

    fn r(s: &str) -> Rational {
        parse_rational(s).unwrap()
    }

    #[test]
    fn known_values() {
        let third = r("1/3");
        assert_eq!(round_rational(&third, FloatFormat::F64).to_f64(), 1.0 / 3.0);
        assert_eq!(
            round_rational(&third, FloatFormat::F32).to_bits(),
            (1.0f32 / 3.0).to_bits() as u64
        );
        assert_eq!(
            round_rational(&r("3"), FloatFormat::F64).to_hex(),
            "0x1.8000000000000p+1"
        );
        assert_eq!(
            round_rational(&r("3"), FloatFormat::F32).to_hex(),
            "0x1.800000p+1"
        );
        assert_eq!(
            round_rational(&r("-0.1"), FloatFormat::F64).to_hex(),
            "-0x1.999999999999ap-4"
        );
        // smallest subnormal, and half of it (a tie, rounds to even = 0), and a bit more.
        let tiny = pow2(-1074);
        assert_eq!(
            round_rational(&tiny, FloatFormat::F64).to_hex(),
            "0x0.0000000000001p-1022"
        );
        assert_eq!(
            round_rational(
                &(tiny.clone() / Rational::from_integer(2.into())),
                FloatFormat::F64
            )
            .mant,
            0
        );
        assert_eq!(round_rational(&(tiny * r("3/4")), FloatFormat::F64).mant, 1);
        // overflow: max + half ulp ties to even -> inf
        let max = f64_to_rational(f64::MAX).unwrap();
        let halfulp = pow2(1023 - 53);
        assert!(round_rational(&(&max + &halfulp), FloatFormat::F64).inf);
        assert!(!round_rational(&(&max + &halfulp - pow2(900)), FloatFormat::F64).inf);
        assert_eq!(
            round_rational(&r("65520"), FloatFormat::F16).to_hex(),
            "inf"
        );
        assert_eq!(
            round_rational(&r("65519"), FloatFormat::F16).to_bits(),
            0x7bff
        );
        assert_eq!(
            round(&QSqrt::new(r("0"), r("1"), r("2")), FloatFormat::F64).to_f64(),
            2f64.sqrt()
        );
    }
}
