//! Exact scalars: rationals and the quadratic field Q(sqrt(d)).
//!
//! Every value the reference produces is `a + b*sqrt(d)` with rational `a`, `b` and a
//! rational radicand `d > 0` shared by one channel (docs/DESIGN.md §1). [`QSqrt`] is that number;
//! [`parse`] reads the literals of FORMAT.md; [`round`] rounds correctly to binary formats;
//! [`roots`] holds sums `A + Σ Bᵢ·sqrt(Dᵢ)` of values from different fields (a family's `dgamma`).

pub mod parse;
mod qsqrt;
pub mod roots;
pub mod round;

pub use num_bigint::{BigInt, BigUint};
pub use num_rational::BigRational;
pub use qsqrt::QSqrt;
pub use roots::SumOfRoots;

/// Exact rational number (a `num-rational` big rational, always in lowest terms).
pub type Rational = BigRational;

use num_traits::{One, Signed, Zero};

/// `2^k` as a rational (k may be negative).
pub fn pow2(k: i64) -> Rational {
    if k >= 0 {
        Rational::from_integer(BigInt::one() << (k as usize))
    } else {
        Rational::new_raw(BigInt::one(), BigInt::one() << ((-k) as usize))
    }
}

/// `r * 2^k`, exactly.
pub fn mul_pow2(r: &Rational, k: i64) -> Rational {
    if r.is_zero() || k == 0 {
        return r.clone();
    }
    if k > 0 {
        Rational::new(r.numer() << (k as usize), r.denom().clone())
    } else {
        Rational::new(r.numer().clone(), r.denom() << ((-k) as usize))
    }
}

/// Floor of a rational, as an integer.
pub fn floor_int(r: &Rational) -> BigInt {
    r.floor().to_integer()
}

/// Whether a rational is the square of a rational; returns its square root if so.
pub fn rational_sqrt_exact(r: &Rational) -> Option<Rational> {
    if r.is_negative() {
        return None;
    }
    let n = r.numer().sqrt();
    let d = r.denom().sqrt();
    if &(&n * &n) == r.numer() && &(&d * &d) == r.denom() {
        Some(Rational::new(n, d))
    } else {
        None
    }
}

/// Write a rational as FORMAT.md writes it: an integer `p` or a fraction `p/q` in lowest terms.
pub fn fmt_rational(r: &Rational) -> String {
    if r.denom().is_one() {
        r.numer().to_string()
    } else {
        format!("{}/{}", r.numer(), r.denom())
    }
}
