//! `SumOfRoots` (exact sums `A + Σ Bᵢ·sqrt(Dᵢ)`, a family's `dgamma`) checked against paths
//! independent of `bnconf_spec::exact::roots`:
//!
//! - an exact sign in the multiquadratic field written here: a value is a vector of `2^n`
//!   rational coefficients over the products of subsets of the `sqrt(Dᵢ)` *as given* (no
//!   normal form, radicands repeated or in one square class allowed), and
//!   `sign(α + β·sqrt(d)) = sign(α)` when `α² > β²·d` (recursively, by exact squaring);
//! - an oracle that decides with that sign whether a rounded result is the correctly rounded
//!   one: the value lies strictly between the midpoints to the neighbours decoded from the
//!   storage bits (ties to even when a rational sits on one);
//! - random sums, repeated radicands (repeated rows), radicands in one square class (2 and 8,
//!   3/4 and 27, d and d·s²), sums that cancel to below the smallest subnormal (signed zero),
//!   and constructed near-ties: a sum within 2^-60 (and 2^-300, 2^-3000) relative of a
//!   rounding midpoint of each format, the overflow threshold included;
//! - `parse_sum_of_roots(to_string())` round trips; the normal form's invariants.
//!
//! The number of cases per property is proptest's default (256), or `PROPTEST_CASES`.

use bnconf_spec::exact::roots::{parse_sum_of_roots, sum_of_qsqrts};
use bnconf_spec::exact::round::{FloatFormat, Rounded};
use bnconf_spec::exact::{rational_sqrt_exact, QSqrt, Rational, SumOfRoots};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use proptest::prelude::*;
use std::cmp::Ordering;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

fn int(n: i64) -> Rational {
    Rational::from_integer(BigInt::from(n))
}

fn p2(k: i64) -> Rational {
    if k >= 0 {
        Rational::from_integer(BigInt::one() << (k as usize))
    } else {
        Rational::new(BigInt::one(), BigInt::one() << ((-k) as usize))
    }
}

// ---------------------------------------------------------------------------------------
// The independent exact sign.

/// `u·v` in the field: coefficient vectors indexed by subsets (bit i = sqrt(d_i)), integers
/// (a value scaled by a positive integer has the same sign).
fn mul(u: &[BigInt], v: &[BigInt], ds: &[BigInt]) -> Vec<BigInt> {
    let mut w = vec![BigInt::zero(); u.len()];
    for (s, us) in u.iter().enumerate() {
        if us.is_zero() {
            continue;
        }
        for (t, vt) in v.iter().enumerate() {
            if vt.is_zero() {
                continue;
            }
            let mut c = us * vt;
            for (i, d) in ds.iter().enumerate() {
                if (s & t) >> i & 1 == 1 {
                    c *= d;
                }
            }
            w[s ^ t] += c;
        }
    }
    w
}

fn sign_vec(c: &[BigInt], ds: &[BigInt]) -> i32 {
    let n = ds.len();
    if n == 0 {
        return match c[0].cmp(&BigInt::zero()) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        };
    }
    let half = 1 << (n - 1);
    let lower = &ds[..n - 1];
    let (alpha, beta) = (&c[..half], &c[half..]);
    let (sa, sb) = (sign_vec(alpha, lower), sign_vec(beta, lower));
    if sb == 0 {
        return sa;
    }
    if sa == 0 || sa == sb {
        return sb;
    }
    let a2 = mul(alpha, alpha, lower);
    let b2 = mul(beta, beta, lower);
    let diff: Vec<BigInt> = a2
        .iter()
        .zip(&b2)
        .map(|(x, y)| x - y * &ds[n - 1])
        .collect();
    sa * sign_vec(&diff, lower)
}

/// A sum as given: `a + Σ b·sqrt(d)`, radicands not normalized.
#[derive(Clone, Debug)]
struct Raw {
    a: Rational,
    terms: Vec<(Rational, Rational)>,
}

impl Raw {
    fn sum(&self) -> SumOfRoots {
        SumOfRoots::from_terms(self.a.clone(), self.terms.iter().cloned())
    }
    /// The exact sign of `s·self − t`, independently of `roots`.
    fn sign_minus(&self, s: i32, t: &Rational) -> i32 {
        let n = self.terms.len();
        let sr = int(s as i64);
        // b·sqrt(p/q) = (b/q)·sqrt(p·q): integer radicands; then one common denominator.
        let mut coefs = vec![&self.a * &sr - t];
        let mut ds = Vec::with_capacity(n);
        for (b, d) in &self.terms {
            coefs.push(b * &sr / Rational::from_integer(d.denom().clone()));
            ds.push(d.numer() * d.denom());
        }
        let l = coefs.iter().fold(BigInt::one(), |l, c| {
            num_integer::Integer::lcm(&l, c.denom())
        });
        let mut c = vec![BigInt::zero(); 1 << n];
        c[0] = coefs[0].numer() * (&l / coefs[0].denom());
        for (i, v) in coefs[1..].iter().enumerate() {
            c[1 << i] = v.numer() * (&l / v.denom());
        }
        sign_vec(&c, &ds)
    }
}

// ---------------------------------------------------------------------------------------
// Formats from their storage layout, and the oracle.

fn layout(f: FloatFormat) -> (u32, i64) {
    match f {
        FloatFormat::F64 => (64, 53),
        FloatFormat::F32 => (32, 24),
        FloatFormat::F16 => (16, 11),
        FloatFormat::BF16 => (16, 8),
    }
}

fn inf_bits(f: FloatFormat) -> u64 {
    let (total, p) = layout(f);
    ((1u64 << (total as i64 - p)) - 1) << (p - 1)
}

/// The magnitude encoded by `mag` (`inf_bits` stands for 2^(emax+1), the next power of two).
fn value_of(f: FloatFormat, mag: u64) -> Rational {
    let (total, p) = layout(f);
    let bias = (1i64 << (total as i64 - p - 1)) - 1;
    if mag == inf_bits(f) {
        return p2(bias + 1);
    }
    let e = (mag >> (p - 1)) as i64;
    let frac = mag & ((1u64 << (p - 1)) - 1);
    if e == 0 {
        int(frac as i64) * p2(1 - bias - (p - 1))
    } else {
        int((frac | (1u64 << (p - 1))) as i64) * p2(e - bias - (p - 1))
    }
}

/// Whether `r` is the correctly rounded value of `v`, by the independent sign.
fn oracle(v: &Raw, f: FloatFormat, r: &Rounded) -> Result<(), String> {
    let (total, _) = layout(f);
    let bits = r.to_bits();
    let neg = bits >> (total - 1) == 1;
    let mag = bits & ((1u64 << (total - 1)) - 1);
    let vs = v.sign_minus(1, &Rational::zero());
    if vs == 0 {
        return if bits == 0 {
            Ok(())
        } else {
            Err(format!("exact zero rounded to {bits:#x}"))
        };
    }
    if neg != (vs < 0) {
        return Err(format!("sign: value sign {vs}, result {bits:#x}"));
    }
    let s = if neg { -1 } else { 1 };
    let even = mag & 1 == 0;
    let two = int(2);
    if mag > 0 {
        let lo = (value_of(f, mag - 1) + value_of(f, mag)) / &two;
        match v.sign_minus(s, &lo) {
            1 => {}
            0 if even => {}
            _ => return Err(format!("|v| below the lower midpoint {lo} of {bits:#x}")),
        }
    }
    if mag < inf_bits(f) {
        let hi = (value_of(f, mag) + value_of(f, mag + 1)) / &two;
        match v.sign_minus(s, &hi) {
            -1 => {}
            0 if even => {}
            _ => return Err(format!("|v| above the upper midpoint {hi} of {bits:#x}")),
        }
    }
    Ok(())
}

fn check(v: &Raw, f: FloatFormat) -> Result<Rounded, TestCaseError> {
    let sum = v.sum();
    let r = sum.round(f);
    oracle(v, f, &r).map_err(|e| {
        TestCaseError::fail(format!(
            "{} of {v:?} = {sum} -> {}: {e}",
            f.name(),
            r.to_hex()
        ))
    })?;
    Ok(r)
}

// ---------------------------------------------------------------------------------------
// Strategies.

fn fmt() -> impl Strategy<Value = FloatFormat> {
    prop::sample::select(FloatFormat::ALL.to_vec())
}

/// A signed dyadic or small fraction, magnitude spread over `k`.
fn coef(k: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Rational> {
    prop_oneof![
        3 => (-(1i64 << 40)..=(1i64 << 40), k).prop_map(|(m, e)| int(m) * p2(e)),
        1 => (-50i64..=50, 1i64..=30).prop_map(|(n, d)| Rational::new(n.into(), d.into())),
    ]
    .boxed()
}

/// Base radicands: small non-squares, fractions, a large prime.
fn base_radicand() -> BoxedStrategy<Rational> {
    prop_oneof![
        4 => prop::sample::select(vec![2i64, 3, 5, 6, 7, 10, 11, 13, 15, 30]).prop_map(int),
        2 => (1i64..=200, 1i64..=200).prop_map(|(n, d)| Rational::new(n.into(), d.into())),
        1 => Just(int((1i64 << 61) - 1)),
        1 => (1i64..=(1 << 40), -60i64..=60).prop_map(|(m, e)| int(m) * p2(e)),
    ]
    .boxed()
}

/// A square factor that keeps a radicand in its class (1 most often: repeated radicands).
fn square() -> BoxedStrategy<Rational> {
    prop_oneof![
        3 => Just(int(1)),
        1 => prop::sample::select(vec![(2i64, 1i64), (1, 2), (3, 1), (5, 3), (1, 7)])
            .prop_map(|(n, d)| Rational::new((n * n).into(), (d * d).into())),
    ]
    .boxed()
}

/// 1–5 raw terms over 1–3 base radicands: repeated radicands and one-class radicands arise.
fn raw(k: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Raw> {
    (
        coef(k.clone()),
        prop::collection::vec(base_radicand(), 1..=3),
        prop::collection::vec((coef(k), any::<prop::sample::Index>(), square()), 1..=5),
    )
        .prop_map(|(a, bases, ts)| Raw {
            a,
            terms: ts
                .into_iter()
                .map(|(b, i, s)| (b, i.get(&bases) * s))
                .collect(),
        })
        .boxed()
}

/// `floor(Σ b·sqrt(d) · 2^k)` from below (each term floored: total error < n units).
fn approx_terms(terms: &[(Rational, Rational)], k: i64) -> Rational {
    let mut s = Rational::zero();
    for (b, d) in terms {
        let sq = b * b * d * p2(2 * k);
        let f = Rational::from_integer(sq.floor().to_integer().sqrt());
        s += if b.is_negative() {
            -f - Rational::one()
        } else {
            f
        };
    }
    s * p2(-k)
}

/// A sum within about `2^-extra` relative of the midpoint above the float with magnitude bits
/// `mag` (below it when `below`), with 2–4 terms in distinct classes (distinct primes).
fn near_tie(f: FloatFormat, mag: u64, neg: bool, below: bool, extra: i64, bs: &[i64]) -> Raw {
    let primes = [2i64, 3, 5, 7];
    let terms: Vec<(Rational, Rational)> = bs
        .iter()
        .zip(primes)
        .map(|(&b, p)| (int(b), int(p)))
        .collect();
    let t = (value_of(f, mag) + value_of(f, mag + 1)) / int(2);
    let lb = t.numer().bits() as i64 - t.denom().bits() as i64;
    let k = extra - lb + 8;
    let w = approx_terms(&terms, k);
    // v = a + w_exact with a = t − w (± the error span): v − t = w_exact − w ∈ (−n, n)·2^-k,
    // shifted by n·2^-k to one side.
    let n = int(terms.len() as i64 + 1) * p2(-k);
    let a = if below { &t - &w - &n } else { &t - &w + &n };
    let mut v = Raw { a, terms };
    if neg {
        v.a = -v.a;
        for t in &mut v.terms {
            t.0 = -t.0.clone();
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random sums (repeated and one-class radicands included) round correctly in every
    /// format, and the sign and comparisons agree with the independent sign.
    #[test]
    fn random_sums_round_correctly(v in raw(-40..=40), f in fmt(), t in coef(-40..=40)) {
        check(&v, f)?;
        let s = v.sum();
        prop_assert_eq!(s.signum(), v.sign_minus(1, &Rational::zero()), "{:?}", v);
        prop_assert_eq!(s.cmp_rational(&t) as i32, v.sign_minus(1, &t), "{:?} vs {}", v, t);
    }

    /// Far from 1: the subnormal range and overflow (coefficients scaled by 2^±1100).
    #[test]
    fn random_sums_at_the_ends_of_the_range(v in raw(-1130..=1030), f in fmt()) {
        check(&v, f)?;
    }

    /// Sums that cancel to below half the smallest subnormal round to a zero of the value's
    /// sign; a cancellation to exactly 0 (one class) rounds to +0.
    #[test]
    fn cancelling_sums_give_signed_zeros(
            bs in prop::collection::vec(prop_oneof![-9i64..=-1, 1i64..=9], 2..=4),
            f in fmt(), up in any::<bool>()) {
        let terms: Vec<(Rational, Rational)> = bs.iter().zip([2i64, 3, 5, 7])
            .map(|(&b, p)| (int(b), int(p))).collect();
        let w = approx_terms(&terms, 1200);
        let a = if up { -w } else { -w - int(5) * p2(-1200) };
        let v = Raw { a, terms };
        let r = check(&v, f)?;
        prop_assert_eq!(r.mant, 0);
        // 2·sqrt(2) − sqrt(8) = 0 exactly
        let z = Raw { a: int(0), terms: vec![(int(2), int(2)), (int(-1), int(8))] };
        prop_assert_eq!(check(&z, f)?.to_bits(), 0);
    }

    /// Constructed near-ties: within ~2^-60 (and 2^-300) relative of a midpoint, on both sides,
    /// for random floats of every format (the overflow threshold included when `mag` is the
    /// largest finite), with 2–4 terms in distinct classes.
    #[test]
    fn near_ties_round_correctly(f in fmt(), m in any::<u64>(), neg in any::<bool>(),
            below in any::<bool>(), deep in any::<bool>(),
            bs in prop::collection::vec(prop_oneof![-9i64..=-1, 1i64..=9], 2..=4)) {
        let mag = 1 + m % (inf_bits(f) - 1); // 1 ..= largest finite
        let v = near_tie(f, mag, neg, below, if deep { 300 } else { 60 }, &bs);
        let r = check(&v, f)?;
        let (total, _) = layout(f);
        let want = if below { mag } else { mag + 1 };
        prop_assert_eq!(r.to_bits() & ((1u64 << (total - 1)) - 1), want, "{:?}", v);
    }

    /// The string form round trips, and the normal form holds: no zero coefficient, no square
    /// radicand, radicands increasing and pairwise in distinct classes; a one-term sum prints
    /// exactly as the `QSqrt` of the same value.
    #[test]
    fn string_round_trip_and_normal_form(v in raw(-40..=40)) {
        let s = v.sum();
        let text = s.to_string();
        let back = parse_sum_of_roots(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.to_string(), text.clone());
        prop_assert_eq!(back.a(), s.a());
        prop_assert_eq!(back.terms(), s.terms());
        for (i, t) in s.terms().iter().enumerate() {
            prop_assert!(!t.b.is_zero() && t.d.is_positive());
            prop_assert!(rational_sqrt_exact(&t.d).is_none(), "{}", text);
            for u in &s.terms()[i + 1..] {
                prop_assert!(t.d < u.d, "{}", text);
                prop_assert!(rational_sqrt_exact(&(&t.d * &u.d)).is_none(), "{}", text);
            }
        }
        if let Some(q) = s.to_qsqrt() {
            prop_assert_eq!(q.to_string(), text);
        }
        // Value equality is exact: the normal form equals the raw sum, and not the raw sum
        // plus a tiny rational.
        let (first, rest) = v.terms.split_first().unwrap();
        let parts: Vec<QSqrt> = std::iter::once(QSqrt::new(v.a.clone(), first.0.clone(), first.1.clone()))
            .chain(rest.iter().map(|(b, d)| QSqrt::new(Rational::zero(), b.clone(), d.clone())))
            .collect();
        let again = sum_of_qsqrts(&parts);
        prop_assert_eq!(&again, &s);
        prop_assert!(again != s.clone() + SumOfRoots::rational(p2(-2000)));
        prop_assert_eq!(s.clone() - s.clone(), SumOfRoots::int(0));
    }
}

/// The worst near-ties constructed here still finish, and correctly: 2^-3000 relative of a
/// midpoint (the refinement must reach ~3000 extra bits), four terms, every format, both
/// sides, and at the overflow threshold.
#[test]
fn deepest_near_ties_finish() {
    for f in FloatFormat::ALL {
        for (mag, neg, below) in [
            (1u64, false, true),
            (1 << 10, true, false),
            (inf_bits(f) - 1, false, false),
            (inf_bits(f) - 1, true, true),
        ] {
            let v = near_tie(f, mag, neg, below, 3000, &[1, -1, 3, 1]);
            let r = check(&v, f).unwrap();
            let (total, _) = layout(f);
            let got = r.to_bits() & ((1u64 << (total - 1)) - 1);
            assert_eq!(got, if below { mag } else { mag + 1 }, "{v:?}");
        }
    }
}

/// The one-class examples of the brief, by hand: sqrt 2 and sqrt 8, sqrt(3/4) and sqrt 27.
#[test]
fn one_square_class_by_hand() {
    let v = SumOfRoots::from_terms(int(0), [(int(1), int(2)), (int(1), int(8))]);
    assert_eq!(v.to_string(), "0 + 3*sqrt(2)");
    let w = SumOfRoots::from_terms(
        int(1),
        [
            (int(2), Rational::new(3.into(), 4.into())),
            (int(1), int(27)),
        ],
    );
    // 2·sqrt(3/4) + sqrt 27 = sqrt 3 + 3 sqrt 3 = 8·sqrt(3/4)
    assert_eq!(w.to_string(), "1 + 8*sqrt(3/4)");
    let raw = Raw {
        a: int(1),
        terms: vec![
            (int(2), Rational::new(3.into(), 4.into())),
            (int(1), int(27)),
        ],
    };
    assert_eq!(raw.sum(), w);
    for f in FloatFormat::ALL {
        assert_eq!(check(&raw, f).unwrap(), w.round(f));
    }
}

/// A LayerNorm `dgamma` over 300 rows (300 radicands, one per row) is a sum of up to 300
/// terms: it rounds in every format, and the result is consistent with exact comparisons
/// with the midpoints to its neighbours (too many terms for the independent sign: this
/// bounds the work and checks `round` against `cmp_rational`).
#[test]
fn many_rows_dgamma_rounds() {
    use bnconf_spec::family::{layer_norm_backward, Affine, Inputs};
    let rows = 300;
    let q = |n: i64| QSqrt::int(n);
    let x: Vec<QSqrt> = (0..rows)
        .flat_map(|r| [q(r), q(r + (r % 7) + 1), q(2 * r)])
        .collect();
    let dy: Vec<QSqrt> = (0..3 * rows).map(|i| q((i * 37 % 11) - 5)).collect();
    let gamma = [q(1), q(1), q(1)];
    let eps = QSqrt::rational(Rational::new(1.into(), 1024.into()));
    let inp = Inputs {
        x: &x,
        gamma: Some(&gamma),
        beta: None,
        eps: &eps,
    };
    let b = layer_norm_backward(&[rows as usize, 3], 1, Affine::Weight, inp, &dy).unwrap();
    for v in b.dgamma.unwrap() {
        assert!(v.terms().len() > 10, "{} terms", v.terms().len());
        for f in FloatFormat::ALL {
            let r = v.round(f);
            let (total, _) = layout(f);
            let bits = r.to_bits();
            let mag = bits & ((1u64 << (total - 1)) - 1);
            let s = if r.neg { -1 } else { 1 };
            let sv = v.clone() * &int(s);
            if mag > 0 {
                let lo = (value_of(f, mag - 1) + value_of(f, mag)) / int(2);
                assert_eq!(sv.cmp_rational(&lo), Ordering::Greater, "{}", f.name());
            }
            if mag < inf_bits(f) {
                let hi = (value_of(f, mag) + value_of(f, mag + 1)) / int(2);
                assert_eq!(sv.cmp_rational(&hi), Ordering::Less, "{}", f.name());
            }
        }
    }
}
