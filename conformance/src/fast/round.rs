//! Float roundings from the fast path's correctly rounded f64: the [`Rounded`] of an f64 or
//! f32 value, and f16/bf16 through f64 away from their midpoints.
//!
//! [`Rounded`]: bnconf_spec::exact::round::Rounded

use super::acc;
use super::problem::*;
use acc::signed_parts;
use bnconf_spec::exact::round::{round_rational, FloatFormat};

/// The [`Rounded`](bnconf_spec::exact::round::Rounded) of a float that is exactly
/// representable in `f` (f64 or f32; its hex string is then the exact path's).
pub fn rounded_of(x: f64, f: FloatFormat) -> bnconf_spec::exact::round::Rounded {
    let neg = x.is_sign_negative();
    let (mant, exp) = match f {
        FloatFormat::F32 => {
            let (m, e) = acc::split_f32((x as f32).abs().to_bits());
            (m as u64, e as i64 - 150)
        }
        _ => {
            let (m, e) = acc::decompose(x);
            (m, e as i64)
        }
    };
    let inf = x.is_infinite();
    bnconf_spec::exact::round::Rounded {
        format: f,
        neg,
        mant: if inf || mant == 0 { 0 } else { mant },
        exp: if inf || mant == 0 { 0 } else { exp },
        inf,
    }
}

/// Whether a finite `r` is a midpoint of format `f` (p bits): an odd multiple of half the
/// quantum of `f` in `r`'s binade (the boundary of overflow, `max + ulp/2`, included).
/// Rounding to `f` through f64 is exact elsewhere: when `r = RN64(v)` is not such a
/// midpoint, no midpoint of `f` (each one an f64) lies between `v` and `r` — it would be an
/// f64 nearer to `v` than `r` — so `RN_f(v) = RN_f(r)`.
pub fn is_midpoint(r: f64, f: FloatFormat) -> bool {
    if r == 0.0 || !r.is_finite() {
        return false;
    }
    let (mant, exp) = signed_parts(r);
    let m = mant.unsigned_abs();
    let low = exp + m.trailing_zeros() as i64; // exponent of the lowest set bit
    let lead = exp + 63 - m.leading_zeros() as i64; // exponent of the leading bit
    let quantum = lead.max(f.emin()) - (f.precision() as i64 - 1);
    low == quantum - 1
}

/// The correct rounding to `f` (f16, bf16) of a value whose correct f64 rounding is `r`
/// (finite, not a midpoint of `f`: [`is_midpoint`]); `None` otherwise.
pub fn round_via_f64(r: f64, f: FloatFormat) -> Option<bnconf_spec::exact::round::Rounded> {
    if !r.is_finite() || is_midpoint(r, f) {
        return None;
    }
    Some(round_rational(&rat(r), f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Midpoints of f16/bf16 found at the binades' quanta, subnormals and the overflow
    /// boundary included; and rounding through f64 equals direct rounding for values within
    /// half an f64 ulp of a non-midpoint (and can differ at a midpoint: the test is needed).
    #[test]
    fn half_rounding_through_f64() {
        let p2 = |e: i32| 2f64.powi(e);
        for (r, f, want) in [
            (1.0 + p2(-11), FloatFormat::F16, true),
            (1.0 + p2(-10), FloatFormat::F16, false),
            (1.0 + 3.0 * p2(-11), FloatFormat::F16, true),
            (1.0 + p2(-12), FloatFormat::F16, false),
            (65520.0, FloatFormat::F16, true),
            (65504.0, FloatFormat::F16, false),
            (p2(-25), FloatFormat::F16, true),
            (3.0 * p2(-25), FloatFormat::F16, true),
            (p2(-26), FloatFormat::F16, false),
            (-(1.0 + p2(-8)), FloatFormat::BF16, true),
            (1.0 + p2(-7), FloatFormat::BF16, false),
            (p2(-134), FloatFormat::BF16, true),
            (0.0, FloatFormat::F16, false),
        ] {
            assert_eq!(is_midpoint(r, f), want, "{r:e} in {}", f.name());
        }
        // v = r ± δ, |δ| below half an f64 ulp of r.
        let mut rng = crate::suite::Rng::new(7);
        let (mut checked, mut differ_at_mid) = (0, 0);
        for i in 0..20_000 {
            let f = if i % 2 == 0 {
                FloatFormat::F16
            } else {
                FloatFormat::BF16
            };
            // values on f's midpoint grid half of the time
            let e = (rng.range(-30.0, 20.0)) as i32;
            let base = rng.range(1.0, 2.0) * p2(e);
            let r = if i % 4 < 2 {
                let q = p2((e.max(f.emin() as i32)) - (f.precision() as i32 - 1));
                ((base / q).floor() + 0.5) * q
            } else {
                base
            };
            // a quarter f64 ulp of r: RN64(r ± δ) = r
            let (m, ex) = signed_parts(r);
            let lead = ex + 63 - m.unsigned_abs().leading_zeros() as i64;
            let d = rat(p2(lead as i32 - 54));
            for delta in [d.clone(), -d] {
                let v = rat(r) + &delta;
                let direct = round_rational(&v, f);
                match round_via_f64(r, f) {
                    Some(via) => {
                        assert_eq!(via, direct, "{r:e} + δ in {}", f.name());
                        checked += 1;
                    }
                    None => differ_at_mid += (round_rational(&rat(r), f) != direct) as u32,
                }
            }
        }
        assert!(
            checked > 5_000 && differ_at_mid > 100,
            "{checked} {differ_at_mid}"
        );
    }
}
