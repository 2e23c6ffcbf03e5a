//! Correct rounding of exact values to binary floating-point formats.
//!
//! Round to nearest, ties to even; overflow to ±inf; gradual underflow (subnormals); the sign
//! of a zero result follows the sign of the exact value (an exact zero rounds to +0).
//! The algorithm is exact: the binade and the quantum are found by exact comparisons with
//! powers of two, the truncated significand by an exact floor, and the rounding direction by
//! the exact sign of `|v| - midpoint`. An irrational value is never a midpoint.

use super::{pow2, BigInt, QSqrt, Rational};
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

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

/// `v = (P + Q*sqrt(D)) / R` with integers, `R > 0`, and `D` not a perfect square when `Q != 0`:
/// one common denominator, so rounding needs no gcd (the slow part of rational arithmetic).
struct IntForm {
    p: BigInt,
    q: BigInt,
    d: BigInt,
    r: BigInt,
    /// `(K, floor(|q|·2^K·sqrt(d)))`, the last integer square root taken ([`Self::root_floor`]).
    root: Option<(i64, BigInt)>,
}

impl IntForm {
    fn new(v: &QSqrt) -> IntForm {
        let (a, b) = (v.a(), v.b());
        match v.d() {
            None => IntForm {
                p: a.numer().clone(),
                q: BigInt::zero(),
                d: BigInt::one(),
                r: a.denom().clone(),
                root: None,
            },
            Some(d) => {
                // a + (bn/bd)*sqrt(dn/dd) = (an*bd*dd + bn*ad*sqrt(dn*dd)) / (ad*bd*dd)
                let (an, ad, bn, bd, dn, dd) = (
                    a.numer(),
                    a.denom(),
                    b.numer(),
                    b.denom(),
                    d.numer(),
                    d.denom(),
                );
                IntForm {
                    p: an * bd * dd,
                    q: bn * ad,
                    d: dn * dd,
                    r: ad * bd * dd,
                    root: None,
                }
            }
        }
    }

    fn signum(&self) -> i32 {
        let (sp, sq) = (sign_int(&self.p), sign_int(&self.q));
        if sq == 0 {
            return sp;
        }
        if sp == 0 || sp == sq {
            return sq;
        }
        if &self.p * &self.p > &self.q * &self.q * &self.d {
            sp
        } else {
            sq
        }
    }

    /// `floor(v * 2^k)` for `v >= 0`, and whether `v * 2^k` is exactly that integer.
    fn floor_scaled(&mut self, k: i64) -> (BigInt, bool) {
        let (x, r) = if k >= 0 {
            (&self.p << (k as usize), self.r.clone())
        } else {
            (self.p.clone(), &self.r << ((-k) as usize))
        };
        // floor((x + y·sqrt(d))/r) = floor((x + floor(y·sqrt(d)))/r) for integers x, r > 0;
        // y·sqrt(d), y = q·2^max(k, 0) ≠ 0, is irrational (d is no square), so never exact
        let s = if self.q.is_zero() {
            BigInt::zero()
        } else {
            let m = self.root_floor(k.max(0));
            if self.q.is_negative() {
                -m - 1
            } else {
                m
            }
        };
        let t = x + s;
        let (quo, rem) = t.div_mod_floor(&r);
        (quo, self.q.is_zero() && rem.is_zero())
    }

    /// `floor(|q|·2^k·sqrt(d))` for `k ≥ 0`, `q ≠ 0`: the integer square root of
    /// `(|q|·2^K)²·d` for some `K ≥ k`, shifted right by `K − k` (`floor(floor(z)/2^j) =
    /// floor(z/2^j)`). One root serves [`round`]'s search for the binade and its final floor
    /// (which ask for `k` a few apart): it is taken 4 bits beyond the first `k` asked, and
    /// again only for a larger one.
    fn root_floor(&mut self, k: i64) -> BigInt {
        if let Some((kk, m)) = &self.root {
            if *kk >= k {
                return m >> ((kk - k) as usize);
            }
        }
        let kk = k + 4;
        let y = self.q.abs() << (kk as usize);
        let m = (&y * &y * &self.d).sqrt();
        let out = &m >> 4usize;
        self.root = Some((kk, m));
        out
    }

    /// An estimate of `floor(log2 v)` for `v > 0`.
    fn approx_log2(&self) -> i64 {
        let lb = |x: &BigInt| x.bits() as i64 - 1;
        let lr = lb(&self.r);
        if self.q.is_zero() {
            return lb(&self.p) - lr;
        }
        let lq = lb(&self.q) + lb(&self.d) / 2;
        if self.p.is_zero() {
            return lq - lr;
        }
        let lp = lb(&self.p);
        if sign_int(&self.p) == sign_int(&self.q) {
            return lp.max(lq) - lr;
        }
        let num = &self.p * &self.p - &self.q * &self.q * &self.d;
        lb(&num) - lp.max(lq) - 1 - lr
    }
}

fn sign_int(x: &BigInt) -> i32 {
    if x.is_zero() {
        0
    } else if x.is_negative() {
        -1
    } else {
        1
    }
}

/// Correctly round `v` to `format` (nearest, ties to even).
///
/// With `v = (P + Q*sqrt(D))/R` in integers: the binade `e = floor(log2|v|)` comes from the
/// bit length of `floor(|v|*2^s)` (exact once that floor is ≥ 1), and the significand, the
/// round bit and the sticky bit from one more exact floor: an integer square root and a
/// division, no rational arithmetic.
pub fn round(v: &QSqrt, format: FloatFormat) -> Rounded {
    round_int_form(IntForm::new(v), format).unwrap_or(Rounded {
        format,
        neg: false,
        mant: 0,
        exp: 0,
        inf: false,
    })
}

/// [`round`] of `v - c`, or `None` where `v = c` exactly: the difference formed over one
/// common denominator (`(P·cd − cn·R + Q·cd·sqrt(D)) / (R·cd)`), with no gcd, which
/// subtracting the rationals would take (a judge's error `exact − computed`, rounded once per
/// element).
pub fn round_difference(v: &QSqrt, c: &Rational, format: FloatFormat) -> Option<Rounded> {
    let f = IntForm::new(v);
    let (cn, cd) = (c.numer(), c.denom());
    let f = IntForm {
        p: &f.p * cd - cn * &f.r,
        q: f.q * cd,
        d: f.d,
        r: f.r * cd,
        root: None,
    };
    round_int_form(f, format)
}

/// [`round`] of the value `f`, `None` where it is zero.
fn round_int_form(mut f: IntForm, format: FloatFormat) -> Option<Rounded> {
    let p = format.precision() as i64;
    let s = f.signum();
    if s == 0 {
        return None;
    }
    let neg = s < 0;
    if neg {
        f.p = -f.p;
        f.q = -f.q;
    }
    // e = floor(log2 |v|): an estimate, then exact from the bit length of a scaled floor.
    let mut e = f.approx_log2();
    loop {
        let sh = p - 1 - e;
        let (t, _) = f.floor_scaled(sh);
        if t.is_zero() {
            e -= p + 2;
            continue;
        }
        let exact_e = t.bits() as i64 - 1 - sh;
        if exact_e == e {
            break;
        }
        e = exact_e;
    }
    if e > format.emax() {
        return Some(Rounded {
            format,
            neg,
            mant: 0,
            exp: 0,
            inf: true,
        });
    }
    let sh = p - 1 - e.max(format.emin());
    let (w, exact) = f.floor_scaled(sh + 1);
    let t = &w >> 1usize;
    let half = w.bit(0);
    let odd = t.bit(0);
    let up = half && (!exact || odd);
    let mut mant = t.to_u64().expect("significand fits in 64 bits");
    let mut qe = -sh;
    if up {
        mant += 1;
    }
    if mant == 1u64 << p {
        mant >>= 1;
        qe += 1;
    }
    if qe + p - 1 > format.emax() {
        return Some(Rounded {
            format,
            neg,
            mant: 0,
            exp: 0,
            inf: true,
        });
    }
    if mant.is_zero() {
        qe = 0;
    }
    Some(Rounded {
        format,
        neg,
        mant,
        exp: qe,
        inf: false,
    })
}

/// `(hi, lo)`: `hi` is `v` rounded to the nearest f64 (ties to even), `lo` is `v - hi`
/// rounded the same way: [`round`] to [`FloatFormat::F64`] twice, from one scaled floor of
/// `|v|` to about 180 bits (one integer square root). `None` where that floor does not decide
/// them, and the caller rounds twice instead: `v` outside about `[2^-850, 2^1000]` (`hi` or
/// `lo` could leave the normal range), or `v - hi` not zero but under about `2^-125·|v|`.
pub fn round_f64_pair(v: &QSqrt) -> Option<(f64, f64)> {
    let mut f = IntForm::new(v);
    let s = f.signum();
    if s == 0 {
        return Some((0.0, 0.0));
    }
    if s < 0 {
        f.p = -f.p;
        f.q = -f.q;
    }
    // e is within 2 of floor(log2 |v|), so |v|·2^k = t + g (g in [0, 1), zero iff `exact`)
    // has 177 to 184 bits.
    let e = f.approx_log2();
    if !(-850..=1000).contains(&e) {
        return None;
    }
    let k = 180 - e;
    let (t, exact) = f.floor_scaled(k);
    // Rounds `n + g` to 53 bits (`g` in [0, 1), `sticky` iff g > 0; n has at least 55
    // bits): (significand, its exponent in units of 2^-k).
    let nearest = |n: BigInt, sticky: bool| -> (u64, i64, BigInt) {
        let sh = n.bits() - 53;
        let top = &n >> sh as usize;
        let rest = n - (&top << sh as usize);
        let half = BigInt::one() << (sh - 1) as usize;
        let top_u = top.to_u64().expect("53 bits");
        let up = match rest.cmp(&half) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => sticky || top_u & 1 == 1,
        };
        // (the remainder left by the rounded significand, in the units of n)
        let left = if up {
            rest - (BigInt::one() << sh as usize)
        } else {
            rest
        };
        (top_u + u64::from(up), sh as i64, left)
    };
    let (hm, hsh, r) = nearest(t, !exact);
    // v − hi = ±(r + g)·2^-k: its magnitude as an integer part and a sticky fraction.
    let (mag, sticky, flip) = if !r.is_negative() {
        (r, !exact, false)
    } else if exact {
        (-r, false, true)
    } else {
        (-r - 1, true, true)
    };
    let sign = if s < 0 { -1.0 } else { 1.0 };
    let hi = sign * scale2(hm, hsh - k);
    if mag.is_zero() && !sticky {
        return Some((hi, 0.0));
    }
    if mag.bits() < 55 {
        return None;
    }
    let (lm, lsh, _) = nearest(mag, sticky);
    let lo = scale2(lm, lsh - k);
    Some((hi, if flip { -sign * lo } else { sign * lo }))
}

/// `m·2^x` for `m <= 2^53` and a result in f64's normal range (two exact scalings).
fn scale2(m: u64, x: i64) -> f64 {
    let p = |x: i64| f64::from_bits(((x + 1023) as u64) << 52);
    let h = x / 2;
    m as f64 * p(h) * p(x - h)
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
    // In lowest terms directly (an odd numerator over a power of two, or an integer): the
    // rational `mant·2^exp` reduced, without a gcd.
    if mant == 0 {
        return Some(Rational::zero());
    }
    let tz = mant.trailing_zeros();
    let (mant, exp) = (mant >> tz, exp + tz as i64);
    let num = BigInt::from(mant);
    let num = if neg { -num } else { num };
    Some(if exp >= 0 {
        Rational::from_integer(num << exp as usize)
    } else {
        Rational::new_raw(num, BigInt::one() << (-exp) as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f64_to_rational` is the rational `mant·2^exp` reduced (as `Ratio::new` reduces it), for
    /// zeros, subnormals, the extremes, integers and fractions of both signs.
    #[test]
    fn f64_to_rational_is_the_reduced_rational() {
        let mut vals = vec![
            0.0,
            -0.0,
            5e-324,
            -5e-324,
            2.2250738585072014e-308,
            1.7976931348623157e308,
            -1.0,
            3.0,
            0.1,
            -1024.5,
            1e-300,
            6.02e23,
        ];
        let mut z = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            z = z
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = f64::from_bits(z);
            for w in [v, v as f32 as f64] {
                if w.is_finite() {
                    vals.push(w);
                }
            }
        }
        for v in vals {
            let got = f64_to_rational(v).unwrap();
            let bits = v.to_bits();
            let (ef, frac) = (((bits >> 52) & 0x7ff) as i64, bits & ((1u64 << 52) - 1));
            let (mant, exp) = if ef == 0 {
                (frac, -1074)
            } else {
                (frac | (1u64 << 52), ef - 1075)
            };
            let mag = if exp >= 0 {
                Rational::new(BigInt::from(mant) << exp as usize, BigInt::one())
            } else {
                Rational::new(BigInt::from(mant), BigInt::one() << (-exp) as usize)
            };
            let want = if v < 0.0 { -mag } else { mag };
            assert_eq!(got.numer(), want.numer(), "{v:e}");
            assert_eq!(got.denom(), want.denom(), "{v:e}");
            assert_eq!(got.to_f64(), Some(v.abs() * v.signum()), "{v:e}");
        }
        assert!(f64_to_rational(f64::NAN).is_none() && f64_to_rational(f64::INFINITY).is_none());
    }
    use crate::exact::parse::parse_rational;

    fn r(s: &str) -> Rational {
        parse_rational(s).unwrap()
    }

    /// Positive values of every kind `round` sees: integers, fractions, the subnormal and
    /// overflow ranges, `a + b sqrt(d)` with `b` of either sign (`3 - 2 sqrt 2` cancels to
    /// 0.17; `r = 1` there), scaled far up and down.
    fn positive_values() -> Vec<QSqrt> {
        let q = |n: i64, d: i64| Rational::new(BigInt::from(n), BigInt::from(d));
        let sq = |a: Rational, b: Rational, d: i64| QSqrt::new(a, b, q(d, 1));
        let mut base = vec![
            QSqrt::rational(q(1, 3)),
            QSqrt::int(5),
            QSqrt::int(1),
            QSqrt::rational(q(7, 1 << 60)),
            QSqrt::rational(f64_to_rational(f64::MAX).unwrap()),
            QSqrt::rational(pow2(-1074)),
            sq(q(3, 1), q(-2, 1), 2),
            sq(q(1, 1), q(1, 1), 2),
            sq(q(0, 1), q(1, 1), 3),
            sq(q(1, 1), q(-1, 2), 3),
            sq(q(-3, 2), q(1, 1), 3),
            sq(q(22, 7), q(-1, 5), 11),
            sq(q(0, 1), q(5, 7), 6),
            // a large radicand (2^61 - 1, prime): sqrt(d) is 2^30.5, far from d's own binade
            sq(q(1, 1), q(1, 3), (1 << 61) - 1),
        ];
        for k in [-1100i64, -700, -64, -3, 2, 60, 500, 1000] {
            base.extend(base.clone()[..14].iter().map(|v| v.mul_pow2(k)));
        }
        for v in &base {
            assert_eq!(v.signum(), 1, "{v}");
        }
        base
    }

    /// `round_difference(v, c)` is `round(v − c)` (`None` exactly where `v = c`), for values of
    /// every binade minus rationals near them (their f64s, neighbours, the value itself when
    /// rational) and far from them, in every format; and a round trip of floors through the
    /// cached square root asked for `k` increasing and decreasing.
    #[test]
    fn round_difference_is_the_rounded_difference() {
        let mut n = 0;
        for v in positive_values() {
            let vf = round(&v, FloatFormat::F64).to_f64();
            let near = f64_to_rational(vf).unwrap_or_else(Rational::zero);
            let ulp = f64_to_rational(vf * f64::EPSILON).unwrap_or_else(Rational::zero);
            let mut cs = vec![
                near.clone(),
                &near + &ulp,
                &near - &ulp,
                Rational::zero(),
                Rational::new(BigInt::from(-7), BigInt::from(3)),
                pow2(200),
            ];
            if v.d().is_none() || v.b().is_zero() {
                cs.push(v.a().clone());
            }
            for c in cs {
                let want = &v - &QSqrt::rational(c.clone());
                for f in FloatFormat::ALL {
                    let got = round_difference(&v, &c, f);
                    if want.is_zero() {
                        assert!(got.is_none(), "{v} - {c}");
                    } else {
                        let r = round(&want, f);
                        let g = got.unwrap_or_else(|| panic!("{v} - {c} is not 0"));
                        assert_eq!((g.neg, g.mant, g.exp, g.inf), (r.neg, r.mant, r.exp, r.inf));
                        n += 1;
                    }
                }
            }
        }
        assert!(n > 2000, "{n}");
        for v in positive_values() {
            let mut f = IntForm::new(&v);
            for k in [3i64, 60, 2, 61, 0, 900, -5, 64, 1] {
                let w = v.mul_pow2(k);
                let want = w.floor();
                let exact = w == QSqrt::rational(Rational::from_integer(want.clone()));
                assert_eq!(f.floor_scaled(k), (want, exact), "floor({v} * 2^{k})");
            }
        }
    }

    /// `floor(log2 v)` by comparison with powers of two, walking from `start`; the number of
    /// steps is how far `start` was.
    fn exact_log2(v: &QSqrt, start: i64) -> (i64, i64) {
        let (mut e, mut steps) = (start, 0);
        while v.cmp_rational(&pow2(e)) == std::cmp::Ordering::Less {
            e -= 1;
            steps += 1;
        }
        while v.cmp_rational(&pow2(e + 1)) != std::cmp::Ordering::Less {
            e += 1;
            steps += 1;
        }
        (e, steps)
    }

    /// `round_f64_pair` is `round` twice (`hi`, then `v - hi`) wherever it answers: on
    /// exact doubles, their ties and near-ties (by a rational and by an irrational amount),
    /// quadratic irrationals and rationals of every size, of both signs; and it answers for
    /// all but the values it is documented to leave.
    #[test]
    fn round_f64_pair_is_round_twice() {
        let q = |n: i64, d: i64| Rational::new(BigInt::from(n), BigInt::from(d));
        let mut values = positive_values();
        let mut rng = 0x2545f4914f6cdd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..400 {
            let e = (next() % 400) as i64 - 200;
            let x = f64::from_bits((((1023 + e) as u64) << 52) | (next() >> 12));
            let xr = f64_to_rational(x).unwrap();
            let ulp = f64_to_rational(x - f64::from_bits(x.to_bits() - 1)).unwrap();
            let half = &ulp / q(2, 1);
            values.push(QSqrt::rational(xr.clone()));
            values.push(QSqrt::rational(&xr + &half));
            values.push(QSqrt::rational(&xr - &half));
            values.push(QSqrt::rational(&xr + &half * q(1, 1 << 40)));
            values.push(QSqrt::rational(&xr + &ulp * q(1, 3)));
            values.push(QSqrt::rational(&xr * q((next() % 1000) as i64 + 1, 999)));
            values.push(QSqrt::new(xr.clone(), &half * q(1, 7), q(2, 1)));
            values.push(QSqrt::new(
                &xr + &half,
                &ulp * q(1, 1 << 62) * q(1, 1 << 62),
                q(3, 1),
            ));
            let d = (next() % 10_000) as i64 + 2;
            values.push(QSqrt::new(
                q((next() % 2001) as i64 - 1000, 37),
                &xr * q((next() % 99) as i64 + 1, 17),
                q(d, 1),
            ));
        }
        // Residuals at a tie of `lo` and a few units of the scaled floor (2^-k, for each k the
        // binade's estimate may give) to either side, with an irrational sliver below them.
        for _ in 0..20 {
            let e = (next() % 100) as i64 - 50;
            let x = f64::from_bits((((1023 + e) as u64) << 52) | (next() >> 12));
            let xr = f64_to_rational(x).unwrap();
            let l = ((1u64 << 52) | (next() >> 12)) as i64;
            let tie = Rational::from_integer((2 * l + 1).into()) * pow2(e - 107);
            for j in -3..=3 {
                let unit = pow2(e - 180 + j);
                for off in -2..=2 {
                    let y = &tie + &unit * q(off, 1);
                    values.push(QSqrt::new(&xr - &y, -(&unit * pow2(-30)), q(2, 1)));
                    values.push(QSqrt::rational(&xr - &y));
                }
            }
        }
        let n = values.len();
        values.extend(values.clone().iter().map(|v| QSqrt::int(0) - v));
        let (mut answered, mut left) = (0, 0);
        for v in &values {
            let Some((hi, lo)) = round_f64_pair(v) else {
                left += 1;
                continue;
            };
            answered += 1;
            let want_hi = round(v, FloatFormat::F64).to_f64();
            let res = v - &QSqrt::rational(f64_to_rational(want_hi).unwrap());
            let want_lo = round(&res, FloatFormat::F64).to_f64();
            assert_eq!(
                (hi.to_bits(), lo.to_bits()),
                (want_hi.to_bits(), want_lo.to_bits()),
                "{v}: ({hi:e}, {lo:e}) against ({want_hi:e}, {want_lo:e})"
            );
        }
        // Left: the values beyond [2^-850, 2^1000] (positive_values' scalings by 2^-1100,
        // 2^-1074 and f64::MAX, both signs) and the residuals under 2^-125 (the near-ties by
        // an irrational 2^-124 ulp): a few percent.
        assert!(
            answered > 2 * n - 2 * n / 10,
            "{answered} of {}, {left} left",
            2 * n
        );
    }

    /// `floor_scaled(k)` is `floor(v * 2^k)` (against `QSqrt::floor`, which corrects its own
    /// estimate by exact comparisons) and says whether that floor is exact.
    #[test]
    fn floor_scaled_is_the_exact_floor() {
        for v in positive_values() {
            let mut f = IntForm::new(&v);
            for k in [-1200i64, -80, -53, -1, 0, 1, 2, 24, 53, 54, 300, 1200] {
                let w = v.mul_pow2(k);
                let want = w.floor();
                let exact = w == QSqrt::rational(Rational::from_integer(want.clone()));
                assert_eq!(f.floor_scaled(k), (want, exact), "floor({v} * 2^{k})");
            }
        }
    }

    /// `approx_log2` is `round`'s first guess at the binade, then corrected by exact floors:
    /// within 2 of `floor(log2 v)`, so `round` needs at most two more of them.
    #[test]
    fn approx_log2_is_within_two_binades() {
        for v in positive_values() {
            let guess = IntForm::new(&v).approx_log2();
            let (e, steps) = exact_log2(&v, guess);
            assert!(steps <= 2, "{v}: guess {guess}, floor(log2) {e}");
        }
    }

    /// `IntForm::signum` is the sign of the value, also where `p` and `q sqrt(d)` cancel.
    #[test]
    fn int_form_signum_is_the_sign() {
        for v in positive_values() {
            assert_eq!(IntForm::new(&v).signum(), 1, "{v}");
            assert_eq!(IntForm::new(&-v.clone()).signum(), -1, "{v}");
        }
        assert_eq!(IntForm::new(&QSqrt::int(0)).signum(), 0);
    }

    /// A value just below a power of two (within half an ulp) rounds up to it: the
    /// significand carries out to `2^p` and is renormalised, in every format and binade,
    /// irrational values too (`2^k (1 - 2^-(p+2))` and `2^k (1 - sqrt(2) 2^-(p+3))`).
    #[test]
    fn rounding_up_into_the_next_binade() {
        for f in FloatFormat::ALL {
            let p = f.precision() as i64;
            for k in [f.emin(), -3, 0, 1, 7, f.emax() - 1] {
                let below = QSqrt::rational(pow2(k) * (Rational::one() - pow2(-(p + 2))));
                let irr = QSqrt::new(pow2(k), -pow2(k - p - 3), Rational::from_integer(2.into()));
                for v in [below, irr] {
                    let r = round(&v, f);
                    assert_eq!(r.to_rational(), Some(pow2(k)), "{v} in {}", f.name());
                    assert_eq!(r.mant, 1u64 << (p - 1), "{v} in {}", f.name());
                }
            }
        }
    }

    /// The names FORMAT.md uses, read back, nothing else read; `u = 2^-p` written out.
    #[test]
    fn format_names_and_unit_roundoffs() {
        let table = [
            (FloatFormat::F64, "f64", 2f64.powi(-53)),
            (FloatFormat::F32, "f32", 2f64.powi(-24)),
            (FloatFormat::F16, "f16", 2f64.powi(-11)),
            (FloatFormat::BF16, "bf16", 2f64.powi(-8)),
        ];
        assert_eq!(table.map(|t| t.0), FloatFormat::ALL);
        for (f, name, u) in table {
            assert_eq!(f.name(), name);
            assert_eq!(FloatFormat::from_name(name), Some(f));
            assert_eq!(f.unit_roundoff(), u, "{name}");
        }
        for bad in ["", "F32", "f8", "float32", "f64 ", "bf"] {
            assert_eq!(FloatFormat::from_name(bad), None, "{bad:?}");
        }
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
