//! Every `Rounded` predicate and conversion (`is_finite`, `to_rational`, `to_bits`, `to_f64`,
//! `to_hex`) at the boundaries of each format: zero, the smallest subnormal and ties around
//! it, the largest subnormal and its tie into the normal range, the smallest normal, the
//! largest finite value, and the overflow tie. The expected bits come from an independent
//! implementation of each format (std's f64/f32, the `half` crate's f16/bf16), not from
//! `spec`.

use bnconf_spec::exact::round::{f64_to_rational, round, round_rational, FloatFormat, Rounded};
use bnconf_spec::exact::{pow2, QSqrt, Rational};

/// The independent decoder of a format's bit patterns.
fn decode(f: FloatFormat, bits: u64) -> f64 {
    match f {
        FloatFormat::F64 => f64::from_bits(bits),
        FloatFormat::F32 => f32::from_bits(bits as u32) as f64,
        FloatFormat::F16 => half::f16::from_bits(bits as u16).to_f64(),
        FloatFormat::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
    }
}

/// (largest finite, smallest normal, +inf, sign bit) bit patterns, from the oracle types.
fn oracle_bits(f: FloatFormat) -> (u64, u64, u64, u64) {
    match f {
        FloatFormat::F64 => (
            f64::MAX.to_bits(),
            f64::MIN_POSITIVE.to_bits(),
            f64::INFINITY.to_bits(),
            1 << 63,
        ),
        FloatFormat::F32 => (
            f32::MAX.to_bits() as u64,
            f32::MIN_POSITIVE.to_bits() as u64,
            f32::INFINITY.to_bits() as u64,
            1 << 31,
        ),
        FloatFormat::F16 => (
            half::f16::MAX.to_bits() as u64,
            half::f16::MIN_POSITIVE.to_bits() as u64,
            half::f16::INFINITY.to_bits() as u64,
            1 << 15,
        ),
        FloatFormat::BF16 => (
            half::bf16::MAX.to_bits() as u64,
            half::bf16::MIN_POSITIVE.to_bits() as u64,
            half::bf16::INFINITY.to_bits() as u64,
            1 << 15,
        ),
    }
}

fn rat(v: f64) -> Rational {
    f64_to_rational(v).unwrap()
}

/// Check one rounding against the expected bit pattern (all conversions agree with it).
fn check(f: FloatFormat, v: &Rational, want_bits: u64, what: &str) {
    let r: Rounded = round_rational(v, f);
    let (_, _, inf, sign) = oracle_bits(f);
    let ctx = format!("{} {what}: {r:?}", f.name());
    assert_eq!(r.to_bits(), want_bits, "{ctx}: bits");
    // The same through the Q(sqrt) entry point.
    assert_eq!(
        round(&QSqrt::rational(v.clone()), f).to_bits(),
        want_bits,
        "{ctx}: round(QSqrt)"
    );
    let want = decode(f, want_bits);
    let is_inf = want_bits & !sign == inf;
    assert_eq!(r.is_finite(), !is_inf, "{ctx}: is_finite");
    let got = r.to_f64();
    assert_eq!(
        got.to_bits(),
        want.to_bits(),
        "{ctx}: to_f64 {got:e} vs {want:e}"
    );
    match r.to_rational() {
        None => assert!(is_inf, "{ctx}: to_rational None for a finite value"),
        Some(q) => {
            assert!(!is_inf, "{ctx}: to_rational of an infinity");
            assert_eq!(q, rat(want), "{ctx}: to_rational");
        }
    }
    let hex = r.to_hex();
    let neg = want_bits & sign != 0;
    if is_inf {
        assert_eq!(hex, if neg { "-inf" } else { "inf" }, "{ctx}");
    } else if want == 0.0 {
        assert_eq!(hex, if neg { "-0x0.0p+0" } else { "0x0.0p+0" }, "{ctx}");
    } else {
        // Hex digits read back to the value: lead.frac × 2^e.
        let body = hex.trim_start_matches('-');
        let (mant, e) = body[2..].split_once('p').expect("p");
        let (lead, frac) = mant.split_once('.').expect(".");
        let digits = (f.precision() as usize - 1).div_ceil(4);
        assert_eq!(frac.len(), digits, "{ctx}: {hex}");
        let m = u64::from_str_radix(&format!("{lead}{frac}"), 16).unwrap();
        let e: i64 = e.parse().unwrap();
        let back = Rational::from_integer(m.into()) * pow2(e - 4 * digits as i64);
        let back = if neg { -back } else { back };
        assert_eq!(back, rat(want), "{ctx}: {hex}");
        assert_eq!(hex.starts_with('-'), neg, "{ctx}: {hex}");
    }
}

#[test]
fn rounded_predicates_at_format_boundaries() {
    for f in FloatFormat::ALL {
        let (max_b, min_normal_b, inf_b, sign) = oracle_bits(f);
        let tiny = rat(decode(f, 1));
        let max = rat(decode(f, max_b));
        let half_ulp_max = (&max - &rat(decode(f, max_b - 1))) / Rational::from_integer(2.into());
        let largest_sub = rat(decode(f, min_normal_b - 1));
        let min_normal = rat(decode(f, min_normal_b));
        let two = Rational::from_integer(2.into());
        let q = |n: i64, d: i64| Rational::new(n.into(), d.into());
        // zero and underflow
        check(f, &q(0, 1), 0, "zero");
        check(f, &(&tiny / &two), 0, "tiny/2 (tie to even: +0)");
        check(f, &-(&tiny / &two), sign, "-tiny/2 (tie to even: -0)");
        check(f, &(&tiny * q(1, 4)), 0, "tiny/4");
        check(f, &(&tiny * q(3, 4)), 1, "3/4 tiny");
        check(f, &(&tiny * q(3, 2)), 2, "3/2 tiny (tie to even: 2 tiny)");
        check(f, &tiny, 1, "smallest subnormal");
        check(f, &-tiny.clone(), sign | 1, "-smallest subnormal");
        // the subnormal / normal boundary
        check(f, &largest_sub, min_normal_b - 1, "largest subnormal");
        check(
            f,
            &(&largest_sub + &tiny / &two),
            min_normal_b,
            "largest subnormal + tiny/2 (tie to even: smallest normal)",
        );
        check(
            f,
            &(&largest_sub + &tiny * q(1, 4)),
            min_normal_b - 1,
            "largest subnormal + tiny/4",
        );
        check(f, &min_normal, min_normal_b, "smallest normal");
        check(
            f,
            &-min_normal.clone(),
            sign | min_normal_b,
            "-smallest normal",
        );
        // the overflow boundary
        check(f, &max, max_b, "largest finite");
        check(f, &-max.clone(), sign | max_b, "-largest finite");
        check(
            f,
            &(&max + &half_ulp_max - pow2(-1100)),
            max_b,
            "max + half ulp - 2^-1100",
        );
        check(
            f,
            &(&max + &half_ulp_max),
            inf_b,
            "max + half ulp (tie: overflow)",
        );
        check(
            f,
            &-(&max + &half_ulp_max),
            sign | inf_b,
            "-(max + half ulp)",
        );
        check(f, &(&max * &two), inf_b, "2 max");
        // exponents just inside and outside the range by powers of two
        let emax = f.emax();
        check(f, &pow2(emax), rat_bits(f, &pow2(emax)), "2^emax");
        check(f, &pow2(emax + 1), inf_b, "2^(emax+1)");
        check(f, &pow2(f.emin()), min_normal_b, "2^emin");
    }
}

/// The bits of an exactly representable value, from the oracle (search over the patterns'
/// order: the representable values are monotone in the bits of positive numbers).
fn rat_bits(f: FloatFormat, v: &Rational) -> u64 {
    let (max_b, ..) = oracle_bits(f);
    let (mut lo, mut hi) = (0u64, max_b);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if &rat(decode(f, mid)) < v {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    assert_eq!(&rat(decode(f, lo)), v, "not representable");
    lo
}

#[test]
fn rounding_a_square_root_at_the_overflow_boundary() {
    // sqrt(2) * 2^k on either side of a format's largest value `max ≈ 2^(emax+1)`:
    // sqrt(2) * 2^(emax+1) overflows, sqrt(2) * 2^emax (between max/2 and max) does not.
    for f in FloatFormat::ALL {
        let (max_b, _, inf_b, _) = oracle_bits(f);
        let s2 = |k: i64| {
            QSqrt::new(
                Rational::from_integer(0.into()),
                pow2(k),
                Rational::from_integer(2.into()),
            )
        };
        let big = round(&s2(f.emax() + 1), f);
        assert!(
            !big.is_finite() && big.to_rational().is_none(),
            "{}",
            f.name()
        );
        assert_eq!(big.to_bits(), inf_b);
        let ok = round(&s2(f.emax()), f);
        assert!(ok.is_finite() && ok.to_bits() < max_b, "{}", f.name());
        assert!(ok.to_f64() > decode(f, max_b) / 2.0);
    }
}
