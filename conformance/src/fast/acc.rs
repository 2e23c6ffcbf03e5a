//! Exact sums of binary floats and of their pairwise products: a fixed-point
//! "superaccumulator" (docs/DESIGN.md §5).
//!
//! A finite f64 is `M * 2^E` with an integer `M < 2^53` and `-1074 <= E <= 971`; a product of
//! two is `M * 2^E` with `M < 2^106` and `-2148 <= E <= 1942`. The accumulator holds
//! `Σ limbs[i] * 2^(32 i + EMIN)` in signed 64-bit limbs, each receiving 32-bit chunks: one
//! addition touches five limbs and never allocates, and 2^30 additions fit before the limbs
//! must be normalised (carry-propagated), which [`SuperAcc::add`] does by itself. The sum is
//! exact whatever the order of the additions, so splitting work across threads cannot change it.

use bnconf_spec::exact::{mul_pow2, Rational};
use num_bigint::{BigInt, BigUint, Sign};

/// Exponent of the least significant bit the accumulator can hold (products of two subnormals).
const EMIN: i32 = -2148;
/// Number of 32-bit limbs: bits up to 2^2048 * 2^64 (growth) above EMIN, plus five of slack.
const LIMBS: usize = 138;
/// Additions before a normalisation (each limb then holds less than 2^62 in magnitude).
const NORMALISE_EVERY: u32 = 1 << 30;

/// `(M, E)` of a finite f64: `x = ±M * 2^E`; `None` for zero.
#[inline(always)]
pub fn decompose(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let ef = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if ef == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), ef - 1075)
    }
}

/// An exact accumulator of sums of f64 values and of products of two f64 values.
#[derive(Clone)]
pub struct SuperAcc {
    limbs: Box<[i64; LIMBS]>,
    count: u32,
}

impl Default for SuperAcc {
    fn default() -> Self {
        Self::new()
    }
}

impl SuperAcc {
    /// Zero.
    pub fn new() -> Self {
        SuperAcc {
            limbs: Box::new([0; LIMBS]),
            count: 0,
        }
    }

    /// Make room for `n <= 2^30` further additions before the next [`SuperAcc::reserve`].
    #[inline]
    pub fn reserve(&mut self, n: u32) {
        debug_assert!(n <= NORMALISE_EVERY);
        if self.count + n > NORMALISE_EVERY {
            self.normalise();
        }
        self.count += n;
    }

    /// Add `±m * 2^e` (`m < 2^106`, `EMIN <= e <= 1942`); room reserved.
    #[inline(always)]
    fn add_raw(&mut self, m: u128, e: i32, neg: bool) {
        let pos = (e - EMIN) as u32;
        let idx = (pos >> 5) as usize;
        let sh = pos & 31;
        let s = m << sh;
        let top = if sh == 0 { 0 } else { (m >> (128 - sh)) as u64 };
        let chunks = [
            s as u32 as i64,
            (s >> 32) as u32 as i64,
            (s >> 64) as u32 as i64,
            (s >> 96) as u32 as i64,
            top as u32 as i64,
        ];
        let l = &mut self.limbs[idx..idx + 5];
        if neg {
            for k in 0..5 {
                l[k] -= chunks[k];
            }
        } else {
            for k in 0..5 {
                l[k] += chunks[k];
            }
        }
    }

    /// Add a finite f64 exactly (room reserved by [`SuperAcc::reserve`]).
    #[inline(always)]
    pub fn add_reserved(&mut self, x: f64) {
        let (m, e) = decompose(x);
        self.add_raw(m as u128, e, x.is_sign_negative());
    }

    /// Add the exact product of two finite f64 (room reserved by [`SuperAcc::reserve`]).
    #[inline(always)]
    pub fn add_product_reserved(&mut self, x: f64, y: f64) {
        let (mx, ex) = decompose(x);
        let (my, ey) = decompose(y);
        self.add_raw(
            mx as u128 * my as u128,
            ex + ey,
            x.is_sign_negative() != y.is_sign_negative(),
        );
    }

    /// Add a finite f64 exactly.
    #[inline(always)]
    pub fn add(&mut self, x: f64) {
        self.reserve(1);
        let (m, e) = decompose(x);
        self.add_raw(m as u128, e, x.is_sign_negative());
    }

    /// Add the exact product `x * y` of two finite f64 values.
    #[inline(always)]
    pub fn add_product(&mut self, x: f64, y: f64) {
        self.reserve(1);
        let (mx, ex) = decompose(x);
        let (my, ey) = decompose(y);
        self.add_raw(
            mx as u128 * my as u128,
            ex + ey,
            x.is_sign_negative() != y.is_sign_negative(),
        );
    }

    /// Carry-propagate: every limb but the last in `[0, 2^32)`.
    fn normalise(&mut self) {
        let mut carry: i64 = 0;
        for l in self.limbs[..LIMBS - 1].iter_mut() {
            let t = *l + carry;
            *l = t & 0xffff_ffff;
            carry = t >> 32;
        }
        self.limbs[LIMBS - 1] += carry;
        self.count = 0;
    }

    /// Add another accumulator (exact).
    pub fn merge(&mut self, other: &SuperAcc) {
        let mut o = other.clone();
        o.normalise();
        self.normalise();
        for (a, b) in self.limbs.iter_mut().zip(o.limbs.iter()) {
            *a += *b;
        }
        self.count = 2;
    }

    /// The exact sum as a rational.
    pub fn to_rational(&self) -> Rational {
        let mut digits = Vec::with_capacity(LIMBS);
        let mut carry: i128 = 0;
        for &l in self.limbs.iter() {
            let t = l as i128 + carry;
            digits.push((t & 0xffff_ffff) as u32);
            carry = t >> 32;
        }
        let mag = BigInt::from_biguint(Sign::Plus, BigUint::new(digits));
        let v = mag + (BigInt::from(carry) << (32 * LIMBS));
        mul_pow2(&Rational::from_integer(v), EMIN as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::f64_to_rational;

    #[test]
    fn sums_and_products_are_exact() {
        let vals = [
            1.0,
            -0.5,
            f64::MAX,
            -f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            0.1,
            1e300,
            -3.75e-200,
            0.0,
            -0.0,
        ];
        let mut a = SuperAcc::new();
        let mut p = SuperAcc::new();
        let mut s = Rational::from_integer(0.into());
        let mut sp = Rational::from_integer(0.into());
        for (i, &x) in vals.iter().enumerate() {
            let y = vals[(i * 7 + 3) % vals.len()];
            a.add(x);
            p.add_product(x, y);
            s += f64_to_rational(x).unwrap();
            sp += f64_to_rational(x).unwrap() * f64_to_rational(y).unwrap();
        }
        assert_eq!(a.to_rational(), s);
        assert_eq!(p.to_rational(), sp);
        let mut m = SuperAcc::new();
        m.merge(&a);
        m.merge(&p);
        assert_eq!(m.to_rational(), s + sp);
        let mut big = SuperAcc::new();
        big.add_product(f64::MAX, f64::MAX);
        big.add_product(f64::MAX, f64::MAX);
        let mx = f64_to_rational(f64::MAX).unwrap();
        assert_eq!(
            big.to_rational(),
            &mx * &mx * Rational::from_integer(2.into())
        );
    }
}
