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
    let n = int_sqrt_exact(r.numer())?;
    let d = int_sqrt_exact(r.denom())?;
    Some(Rational::new(n, d))
}

/// `sqrt(n)` when the integer `n ≥ 0` is a perfect square.
pub(crate) fn int_sqrt_exact(n: &BigInt) -> Option<BigInt> {
    if n.is_negative() || !may_be_square(n) {
        return None;
    }
    let s = n.sqrt();
    (&(&s * &s) == n).then_some(s)
}

/// `n/d` (`d > 0`) in lowest terms, `Rational::new`'s value and form: the common factors of two
/// by trailing zeros, the rest by a gcd in `u128` where `d`'s odd part fits one, `num`'s
/// (binary) gcd otherwise.
pub fn reduced(n: BigInt, d: BigInt) -> Rational {
    use num_traits::ToPrimitive;
    debug_assert!(d.is_positive());
    let (Some(tn), Some(td)) = (n.trailing_zeros(), d.trailing_zeros()) else {
        return Rational::zero();
    };
    let t = tn.min(td) as usize;
    let (n, d) = (n >> t, d >> t);
    let Some(odd) = (&d >> (td as usize - t)).to_u128() else {
        return Rational::new(n, d);
    };
    // gcd(n, d) = gcd(n, odd part of d): after the shift n is odd, or d is.
    let g = num_integer::gcd((n.magnitude() % odd).to_u128().expect("below odd"), odd);
    if g == 1 {
        Rational::new_raw(n, d)
    } else {
        Rational::new_raw(n / g, d / g)
    }
}

/// Whether `d`'s odd part has at most 63 bits (a product of two such fits [`reduced`]'s `u128`).
fn small_odd(d: &BigInt) -> bool {
    d.bits() - d.trailing_zeros().unwrap_or(0) <= 63
}

/// `a + b` (`sign` 1) or `a − b` (`sign` −1): through [`reduced`] when both denominators'
/// odd parts are small (one cheap reduction), else `num`'s operation (whose gcds on the
/// operands' own denominators cost less than one on their product).
pub(crate) fn add_signed(a: &Rational, b: &Rational, sign: i8) -> Rational {
    if small_odd(a.denom()) && small_odd(b.denom()) {
        let (x, y) = (a.numer() * b.denom(), b.numer() * a.denom());
        reduced(if sign > 0 { x + y } else { x - y }, a.denom() * b.denom())
    } else if sign > 0 {
        a + b
    } else {
        a - b
    }
}

/// `a · b`, as [`add_signed`] chooses.
pub(crate) fn mul(a: &Rational, b: &Rational) -> Rational {
    if small_odd(a.denom()) && small_odd(b.denom()) {
        reduced(a.numer() * b.numer(), a.denom() * b.denom())
    } else {
        a * b
    }
}

/// Quadratic residues modulo `M`: `QR[r]` is whether some square is `r mod M`.
const fn residues<const M: usize>() -> [bool; M] {
    let mut t = [false; M];
    let mut i = 0;
    while i < M {
        t[(i * i) % M] = true;
        i += 1;
    }
    t
}

const QR64: [bool; 64] = residues::<64>();
const QR63: [bool; 63] = residues::<63>();
const QR65: [bool; 65] = residues::<65>();
const QR11: [bool; 11] = residues::<11>();

/// A filter before an integer square root: `false` only when `n ≥ 0` is not a perfect
/// square, as its residue modulo 64, 63, 65 or 11 is no square's (which rules out all but
/// about 1 in 150 non-squares at the cost of one division by a small number); `true` says
/// nothing, the square root decides.
fn may_be_square(n: &BigInt) -> bool {
    use num_traits::ToPrimitive;
    let low = n.magnitude().iter_u64_digits().next().unwrap_or(0);
    if !QR64[(low % 64) as usize] {
        return false;
    }
    let r = (n.magnitude() % 45045u32).to_usize().unwrap_or(0); // 63·65·11
    QR63[r % 63] && QR65[r % 65] && QR11[r % 11]
}

/// Write a rational as FORMAT.md writes it: an integer `p` or a fraction `p/q` in lowest terms.
pub fn fmt_rational(r: &Rational) -> String {
    if r.denom().is_one() {
        r.numer().to_string()
    } else {
        format!("{}/{}", r.numer(), r.denom())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reduced`, `add_signed` and `mul` give `num`'s results in its form (numerator and
    /// denominator, lowest terms, positive denominator), for fractions whose denominators are
    /// powers of two, small odd parts times them, or large odd parts; negative, zero, equal.
    #[test]
    fn fast_reductions_are_nums() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let big = |bits: u32, next: &mut dyn FnMut() -> u64| {
            let mut v = BigInt::from(next() | 1);
            while v.bits() < u64::from(bits) {
                v = (v << 64u32) + BigInt::from(next());
            }
            let extra = v.bits() - u64::from(bits);
            v >> extra
        };
        let mut fracs = vec![Rational::zero(), Rational::one(), -Rational::one()];
        for i in 0..300u32 {
            let nb = [1, 20, 63, 64, 130, 400][i as usize % 6];
            let mut n = big(nb, &mut next);
            if next() % 3 == 0 {
                n = -n;
            }
            if next() % 5 == 0 {
                n <<= (next() % 90) as usize;
            }
            let odd = match i % 4 {
                0 => BigInt::one(),
                1 => BigInt::from((next() % 1000) | 1),
                2 => big(60, &mut next) | BigInt::one(),
                _ => big(200, &mut next) | BigInt::one(),
            };
            let d = odd << ((next() % 160) as usize);
            fracs.push(Rational::new(n, d));
        }
        let same = |x: &Rational, y: &Rational| x.numer() == y.numer() && x.denom() == y.denom();
        let mut n = 0;
        for (i, a) in fracs.iter().enumerate() {
            for b in fracs.iter().skip(i % 7).step_by(7) {
                let sum = add_signed(a, b, 1);
                assert!(same(&sum, &(a + b)), "{a} + {b}");
                let diff = add_signed(a, b, -1);
                assert!(same(&diff, &(a - b)), "{a} - {b}");
                assert!(same(&mul(a, b), &(a * b)), "{a} * {b}");
                let raw = reduced(a.numer() * b.denom(), a.denom() * b.denom() * 3u32);
                assert!(
                    same(&raw, &(a / (Rational::from_integer(3.into())))),
                    "{a}/3"
                );
                n += 1;
            }
        }
        assert!(n > 12000, "{n}");
    }

    /// The residue filter never rejects a square, and the exact square roots are those of
    /// the plain test (`isqrt(n)² == n`) on every integer near squares of many sizes.
    #[test]
    fn square_tests_are_the_plain_ones() {
        let plain = |n: &BigInt| {
            let s = n.sqrt();
            (&(&s * &s) == n).then_some(s)
        };
        let (mut squares, mut seen) = (0, 0);
        for bits in [1u32, 7, 31, 63, 64, 65, 127, 200, 640] {
            for i in 0..400u64 {
                // roots of every residue class, at this size
                let root = (BigInt::one() << bits) + BigInt::from(i * 2654435761 % 1_000_003);
                let sq = &root * &root;
                for n in [&sq - 1u32, sq.clone(), &sq + 1u32, &sq + &root, &sq * 2u32] {
                    assert_eq!(int_sqrt_exact(&n), plain(&n), "{n}");
                    squares += usize::from(plain(&n).is_some());
                    seen += 1;
                }
                assert!(may_be_square(&sq), "{sq} is a square");
            }
        }
        for n in 0..100_000u64 {
            let n = BigInt::from(n);
            assert_eq!(int_sqrt_exact(&n), plain(&n), "{n}");
        }
        assert!(
            squares >= 3600 && seen == 18000,
            "{squares} squares of {seen}"
        );
        // rationals: squares of quotients, and their neighbours
        for (p, q) in [(9, 4), (2, 1), (49, 50), (1, 1), (0, 1), (-4, 9)] {
            let r = Rational::new(BigInt::from(p), BigInt::from(q));
            let want = (!r.is_negative())
                .then(|| (plain(r.numer()), plain(r.denom())))
                .and_then(|(a, b)| Some(Rational::new(a?, b?)));
            assert_eq!(rational_sqrt_exact(&r), want, "{r}");
        }
    }
}
