//! Exact sums of binary floats and of their pairwise products: a fixed-point
//! "superaccumulator" (docs/DESIGN.md §5).
//!
//! A finite f64 is `M * 2^E` with an integer `M < 2^53` and `-1074 <= E <= 971`; a product of
//! two is `M * 2^E` with `M < 2^106` and `-2148 <= E <= 1942`. The accumulator holds
//! `Σ limbs[i] * 2^(32 i + EMIN)` in signed 64-bit limbs, each receiving 32-bit chunks: one
//! addition touches five limbs and never allocates, and 2^30 additions fit before the limbs
//! must be normalised (carry-propagated), which [`SuperAcc::add`] does by itself. The sum is
//! exact whatever the order of the additions, so splitting work across threads cannot change it.

use bnconf_spec::exact::Rational;
use num_bigint::{BigInt, BigUint, Sign};
use num_traits::{One, Zero};

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

/// `(±M, E)` of a finite f64: `x = ±M * 2^E` as a signed mantissa (`M = 0` for ±0).
#[inline(always)]
pub fn signed_parts(x: f64) -> (i64, i64) {
    let (m, e) = decompose(x);
    let m = m as i64;
    (if x.is_sign_negative() { -m } else { m }, e as i64)
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

    /// Add `v * 2^e` exactly (`|v| < 2^106`, `EMIN <= e <= 1942`; zero costs nothing).
    #[inline]
    pub fn add_scaled(&mut self, v: i128, e: i32) {
        if v != 0 {
            self.reserve(1);
            self.add_raw(v.unsigned_abs(), e, v < 0);
        }
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

    /// The exact sum as `(n, e)`, value `n·2^e`, with `n` odd (or `(0, 0)`).
    pub fn to_dyadic(&self) -> (BigInt, i64) {
        let v = self.to_integer();
        match v.trailing_zeros() {
            None => (v, 0),
            Some(t) => (v >> t, t as i64 + EMIN as i64),
        }
    }

    /// The exact sum over `2^EMIN`, an integer.
    fn to_integer(&self) -> BigInt {
        let mut digits = Vec::with_capacity(LIMBS);
        let mut carry: i128 = 0;
        for &l in self.limbs.iter() {
            let t = l as i128 + carry;
            digits.push((t & 0xffff_ffff) as u32);
            carry = t >> 32;
        }
        let mag = BigInt::from_biguint(Sign::Plus, BigUint::new(digits));
        mag + (BigInt::from(carry) << (32 * LIMBS))
    }

    /// The exact sum as a rational.
    pub fn to_rational(&self) -> Rational {
        let v = self.to_integer();
        // `v·2^EMIN` in lowest terms without a gcd: the denominator is a power of two, so the
        // reduced fraction is `(v >> t) / 2^(-EMIN - t)` with `t` the trailing zeros of `v`
        // (an integer when `t ≥ -EMIN`). The same rational as `mul_pow2`'s.
        let Some(t) = v.trailing_zeros() else {
            return Rational::zero();
        };
        let sh = (-EMIN) as u64;
        if t >= sh {
            Rational::from_integer(v >> sh)
        } else {
            Rational::new_raw(v >> t, BigInt::one() << (sh - t))
        }
    }
}

/// A finite f32 (its bits) as `(±m, e)` with `x = ±m * 2^(e - 150)`, `m < 2^24`,
/// `1 <= e <= 254`: the biased exponent, subnormals (and zero) taking that of the least
/// normal binade. No branches.
#[inline(always)]
pub fn split_f32(bits: u32) -> (i64, usize) {
    let ef = (bits >> 23) & 0xff;
    let m = ((bits & 0x7f_ffff) | (((ef != 0) as u32) << 23)) as i64;
    let neg = (bits >> 31) as i64; // 0 or 1
    ((m ^ -neg) + neg, (ef + (ef == 0) as u32) as usize)
}

/// Exact sums of up to 2^20 f32 values, their squares and their products with a second
/// value, kept as integer mantissa sums per exponent (one `add` per sum and element, no
/// shifting): `s1[e] = Σ ±m` over the values of exponent `e`, `s2[e] = Σ m²` (the square of
/// `±m 2^(e-150)` is `m² 2^(2e-300)`), `sdx[e + e'] = Σ ±m ±m'`. Bounds for 2^20 values:
/// `|s1| < 2^44`, `s2`, `|sdx| < 2^68`. [`F32Buckets::flush`] moves them into
/// superaccumulators (exactly) and clears them.
pub struct F32Buckets {
    s1: Box<[i64; 256]>,
    s2: Box<[i128; 256]>,
    sd: Box<[i64; 256]>,
    sdx: Box<[i128; 512]>,
}

/// Values an [`F32Buckets`] takes between two flushes.
pub const F32_BUCKET_PIECE: usize = 1 << 20;

impl Default for F32Buckets {
    fn default() -> Self {
        Self::new()
    }
}

impl F32Buckets {
    /// Empty.
    pub fn new() -> Self {
        F32Buckets {
            s1: Box::new([0; 256]),
            s2: Box::new([0; 256]),
            sd: Box::new([0; 256]),
            sdx: Box::new([0; 512]),
        }
    }

    /// Add `x` to `s1` and `x²` to `s2` (the bits of a finite f32).
    #[inline(always)]
    pub fn add_x(&mut self, x: u32) {
        let (m, e) = split_f32(x);
        self.s1[e] += m;
        self.s2[e] += (m * m) as i128;
    }

    /// Add `d` to `sd` and `d·x` to `sdx` (the bits of finite f32 values).
    #[inline(always)]
    pub fn add_dx(&mut self, d: u32, x: u32) {
        let (md, ed) = split_f32(d);
        let (mx, ex) = split_f32(x);
        self.sd[ed] += md;
        self.sdx[(ed + ex) & 511] += (md * mx) as i128;
    }

    /// Add the sums to `s1`, `s2`, `sd`, `sdx` exactly, and clear them.
    pub fn flush(
        &mut self,
        s1: &mut SuperAcc,
        s2: &mut SuperAcc,
        sd: &mut SuperAcc,
        sdx: &mut SuperAcc,
    ) {
        for e in 0..256 {
            let sc = e as i32 - 150;
            s1.add_scaled(std::mem::take(&mut self.s1[e]) as i128, sc);
            s2.add_scaled(std::mem::take(&mut self.s2[e]), 2 * sc);
            sd.add_scaled(std::mem::take(&mut self.sd[e]) as i128, sc);
        }
        for e in 0..512 {
            sdx.add_scaled(std::mem::take(&mut self.sdx[e]), e as i32 - 300);
        }
    }
}

/// `Σ a_i·b_i` exactly (`b = None`: `Σ a_i`) in a [`SuperAcc`]: one
/// rational at the end, no gcd per element.
pub fn exact_dot(a: &[f64], b: Option<&[f64]>) -> Rational {
    let mut acc = SuperAcc::new();
    match b {
        None => a.iter().for_each(|&x| acc.add(x)),
        Some(b) => a.iter().zip(b).for_each(|(&x, &y)| acc.add_product(x, y)),
    }
    acc.to_rational()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::mul_pow2;
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
        for acc in [&a, &p, &SuperAcc::new()] {
            let (n, e) = acc.to_dyadic();
            assert!(n.is_zero() && e == 0 || n.trailing_zeros() == Some(0));
            assert_eq!(mul_pow2(&Rational::from_integer(n), e), acc.to_rational());
        }
        let mut m = SuperAcc::new();
        m.merge(&a);
        m.merge(&p);
        assert_eq!(m.to_rational(), s + sp);
        // The f32 buckets against the same sums one value at a time.
        let f32s = [
            1.0f32,
            -0.5,
            f32::MAX,
            -f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            -1.1754942e-38, // the largest subnormal
            0.1,
            3.0e38,
            -2.5e-30,
            0.0,
            -0.0,
        ];
        let (mut b1, mut b2, mut bd, mut bdx) = (
            SuperAcc::new(),
            SuperAcc::new(),
            SuperAcc::new(),
            SuperAcc::new(),
        );
        let (mut r1, mut r2, mut rd, mut rdx) = (
            SuperAcc::new(),
            SuperAcc::new(),
            SuperAcc::new(),
            SuperAcc::new(),
        );
        let mut b = F32Buckets::new();
        for round in 0..2 {
            for (i, &x) in f32s.iter().enumerate() {
                let d = f32s[(i * 5 + round + 1) % f32s.len()];
                b.add_x(x.to_bits());
                b.add_dx(d.to_bits(), x.to_bits());
                let (x, d) = (x as f64, d as f64);
                r1.add(x);
                r2.add_product(x, x);
                rd.add(d);
                rdx.add_product(d, x);
            }
            b.flush(&mut b1, &mut b2, &mut bd, &mut bdx);
        }
        assert_eq!(b1.to_rational(), r1.to_rational());
        assert_eq!(b2.to_rational(), r2.to_rational());
        assert_eq!(bd.to_rational(), rd.to_rational());
        assert_eq!(bdx.to_rational(), rdx.to_rational());
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
