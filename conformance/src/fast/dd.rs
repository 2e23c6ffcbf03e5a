//! Double-double arithmetic (an unevaluated sum `hi + lo` of two f64) with error bounds
//! stated per operation, and conversions from exact rationals with a proven relative error.
//!
//! Bounds used by the caller (u = 2^-53, no underflow or overflow):
//! - `DD + DD`: `|result - (a + b)| <= 2^-104 (|a| + |b|)` (accurate sum, no relative
//!   guarantee under cancellation, but an absolute one in the operands' magnitudes);
//! - `DD * DD`: `|result - a b| <= 2^-102 |a b|`;
//! - [`dd_of_rational`], [`dd_sqrt_ratio`]: relative error at most 2^-104.
//!
//! Underflow adds at most a few units of 2^-1074 per operation, which the caller covers with
//! an absolute term; overflow yields a non-finite value, which the caller treats as "unknown".

use bnconf_spec::exact::Rational;
use num_bigint::{BigInt, Sign};
use num_traits::{Signed, ToPrimitive, Zero};

/// `hi + lo`, `|lo| <= ulp(hi)/2`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DD {
    /// Leading part.
    pub hi: f64,
    /// Trailing part.
    pub lo: f64,
}

#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// Exact product `a*b = p + e` (barring overflow/underflow).
#[inline(always)]
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    #[cfg(target_feature = "fma")]
    {
        (p, a.mul_add(b, -p))
    }
    #[cfg(not(target_feature = "fma"))]
    {
        // Dekker's product with Veltkamp splitting (exact for |a|, |b| < 2^995).
        const SPLIT: f64 = 134_217_729.0; // 2^27 + 1
        let ta = SPLIT * a;
        let ah = ta - (ta - a);
        let al = a - ah;
        let tb = SPLIT * b;
        let bh = tb - (tb - b);
        let bl = b - bh;
        let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
        (p, e)
    }
}

impl DD {
    /// An f64, exactly.
    #[inline(always)]
    pub fn from_f64(x: f64) -> DD {
        DD { hi: x, lo: 0.0 }
    }

    /// `a + b` for an f64 `b`.
    #[inline(always)]
    pub fn add_f64(self, b: f64) -> DD {
        let (s, e) = two_sum(self.hi, b);
        let e = e + self.lo;
        let (hi, lo) = two_sum(s, e);
        DD { hi, lo }
    }
}

impl std::ops::Add for DD {
    type Output = DD;
    /// `a + b`.
    #[inline(always)]
    fn add(self, b: DD) -> DD {
        let (s, e) = two_sum(self.hi, b.hi);
        let e = e + (self.lo + b.lo);
        let (hi, lo) = two_sum(s, e);
        DD { hi, lo }
    }
}

impl std::ops::Neg for DD {
    type Output = DD;
    /// `-a`.
    #[inline(always)]
    fn neg(self) -> DD {
        DD {
            hi: -self.hi,
            lo: -self.lo,
        }
    }
}

/// How the exact product `a*b = p + e` of two f64 is formed. Both ways give the same exact
/// `(p, e)`, so every result is the same bit for bit; only the speed differs.
pub trait Prod: Copy {
    /// `(p, e)` with `p = fl(a*b)` and `p + e = a*b` exactly.
    fn two_prod(a: f64, b: f64) -> (f64, f64);
}

/// Veltkamp/Dekker splitting (or the FMA where the whole crate is compiled for it): runs on
/// every CPU.
#[derive(Clone, Copy, Debug)]
pub struct Portable;

impl Prod for Portable {
    #[inline(always)]
    fn two_prod(a: f64, b: f64) -> (f64, f64) {
        two_prod(a, b)
    }
}

/// The fused multiply-add `e = fma(a, b, -p)`: one instruction inside code compiled with the
/// `fma` target feature (`fast::cells_chunk_fma`), a slow library call anywhere else.
#[derive(Clone, Copy, Debug)]
pub struct Fused;

impl Prod for Fused {
    #[inline(always)]
    fn two_prod(a: f64, b: f64) -> (f64, f64) {
        let p = a * b;
        (p, a.mul_add(b, -p))
    }
}

impl DD {
    /// `a * b` with the exact products formed by `P`.
    #[inline(always)]
    pub fn mul_by<P: Prod>(self, b: DD) -> DD {
        let (p, e) = P::two_prod(self.hi, b.hi);
        let e = e + (self.hi * b.lo + self.lo * b.hi);
        let (hi, lo) = two_sum(p, e);
        DD { hi, lo }
    }
    /// `a * b` for an f64 `b` (the bound of [`DD::mul_by`] holds).
    #[inline(always)]
    pub fn mul_f64_by<P: Prod>(self, b: f64) -> DD {
        let (p, e) = P::two_prod(self.hi, b);
        let e = e + self.lo * b;
        let (hi, lo) = two_sum(p, e);
        DD { hi, lo }
    }
}

impl std::ops::Mul for DD {
    type Output = DD;
    /// `a * b`.
    #[inline(always)]
    fn mul(self, b: DD) -> DD {
        self.mul_by::<Portable>(b)
    }
}

/// `x * 2^e` for any `e` (two exact scalings unless the result under- or overflows).
pub fn ldexp(x: f64, e: i64) -> f64 {
    let e = e.clamp(-2200, 2200) as i32;
    let h = e / 2;
    x * pow2f(h) * pow2f(e - h)
}

fn pow2f(e: i32) -> f64 {
    if e > 1023 {
        f64::INFINITY
    } else if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else if e >= -1074 {
        f64::from_bits(1u64 << (e + 1074))
    } else {
        0.0
    }
}

/// A 120..122-bit integer `q` as a double-double times `2^-k`.
fn dd_of_u128(neg: bool, q: u128, k: i64) -> DD {
    let hi = q as f64; // round to nearest
    let hi_int = hi as u128;
    let rem = q as i128 - hi_int as i128; // |rem| <= 2^69
    let lo = rem as f64;
    let s = if neg { -1.0 } else { 1.0 };
    DD {
        hi: s * ldexp(hi, -k),
        lo: s * ldexp(lo, -k),
    }
}

/// `n / d` (d > 0) as a double-double, relative error at most 2^-104.
pub fn dd_of_rational(r: &Rational) -> DD {
    if r.is_zero() {
        return DD::default();
    }
    let neg = r.is_negative();
    let n = r.numer().abs();
    let d = r.denom();
    // q = floor(n 2^k / d) with 2^120 <= q < 2^122.
    let k = 121 - (n.bits() as i64 - d.bits() as i64);
    let q = if k >= 0 {
        (n << (k as usize)) / d
    } else {
        n / (d << ((-k) as usize))
    };
    dd_of_u128(neg, q.to_u128().expect("121-bit quotient"), k)
}

/// `sign(c) * sqrt(c^2 / q)` for a rational `c` and a rational `q > 0` (that is, `c / sqrt(q)`),
/// as a double-double with relative error at most 2^-104.
pub fn dd_div_sqrt(c: &Rational, q: &Rational) -> DD {
    if c.is_zero() {
        return DD::default();
    }
    let neg = c.is_negative();
    // c^2/q = N/D with N = cn^2 qd, D = cd^2 qn.
    let nn: BigInt = c.numer() * c.numer() * q.denom();
    let dd: BigInt = c.denom() * c.denom() * q.numer();
    // s = floor(sqrt(floor(N 2^(2k) / D))), 2^120 <= s < 2^122.
    let mut two_k = 242 - (nn.bits() as i64 - dd.bits() as i64);
    if two_k.rem_euclid(2) != 0 {
        two_k += 1;
    }
    let t = if two_k >= 0 {
        (nn << (two_k as usize)) / dd
    } else {
        nn / (dd << ((-two_k) as usize))
    };
    let s = t.sqrt();
    debug_assert!(s.sign() != Sign::Minus);
    dd_of_u128(neg, s.to_u128().expect("122-bit root"), two_k / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::f64_to_rational;

    fn dd_to_rational(d: DD) -> Rational {
        f64_to_rational(d.hi).unwrap() + f64_to_rational(d.lo).unwrap()
    }

    fn rel_err(approx: DD, exact: &Rational) -> f64 {
        let e = (dd_to_rational(approx) - exact) / exact;
        e.abs().to_f64().unwrap_or(f64::INFINITY)
    }

    #[test]
    fn conversions_are_accurate() {
        let r = |n: i64, d: i64| Rational::new(n.into(), d.into());
        for x in [
            r(1, 3),
            r(-22, 7),
            r(1, 100000),
            r(123456789, 1),
            r(-1, 1 << 40),
        ] {
            assert!(rel_err(dd_of_rational(&x), &x) <= 2f64.powi(-104), "{x}");
        }
        // c / sqrt(q): compare (approx)^2 * q with c^2.
        for (c, q) in [
            (r(1, 1), r(2, 1)),
            (r(-3, 7), r(100001, 100000)),
            (r(5, 1), r(1, 3)),
        ] {
            let a = dd_to_rational(dd_div_sqrt(&c, &q));
            assert_eq!(a.is_negative(), c.is_negative());
            let e = (&a * &a * &q - &c * &c) / (&c * &c);
            assert!(e.abs().to_f64().unwrap() <= 2f64.powi(-103), "{c} {q}");
        }
    }

    #[test]
    fn arithmetic_bounds_hold() {
        let a = dd_of_rational(&Rational::new(1.into(), 3.into()));
        let b = dd_of_rational(&Rational::new((-2).into(), 7.into()));
        let ea = dd_to_rational(a);
        let eb = dd_to_rational(b);
        let s = dd_to_rational(a + b);
        let p = dd_to_rational(a * b);
        let es = (&s - (&ea + &eb)).abs() / (ea.abs() + eb.abs());
        let ep = (&p - &ea * &eb).abs() / (&ea * &eb).abs();
        assert!(es.to_f64().unwrap() <= 2f64.powi(-104));
        assert!(ep.to_f64().unwrap() <= 2f64.powi(-102));
        assert_eq!(ldexp(1.0, -1074), 5e-324);
        assert_eq!(ldexp(3.0, 1000), 3.0 * 2f64.powi(1000));
    }
}
