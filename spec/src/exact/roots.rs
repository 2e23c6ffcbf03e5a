//! Sums of square roots `A + Σ Bᵢ·sqrt(Dᵢ)`: the exact value of a normalization family's
//! `dgamma`, which adds one `b_r·sqrt(q_r)` per row, each row with its own radicand
//! (docs/DESIGN.md, "The normalization family"; FORMAT.md's `A + B1*sqrt(D1) + … + Bj*sqrt(Dj)`).
//!
//! **Normal form.** Zero terms dropped; a perfect-square radicand folded into `A`; equal
//! radicands merged; and radicands in one *square class* (`Dᵢ·Dⱼ` the square of a rational,
//! decided by an exact integer square root, no factoring) merged into one term whose radicand
//! is the least of them (`sqrt(Dⱼ) = (sqrt(Dᵢ·Dⱼ)/Dᵢ)·sqrt(Dᵢ)`); radicands in increasing
//! order. A sum with one term is exactly a [`QSqrt`] and prints as one.
//!
//! **Exact ties.** Square roots of rationals in pairwise distinct square classes are linearly
//! independent over Q (Besicovitch). So after the normal form the value equals a rational `t`
//! iff there is no term and `A = t`: a sum with a term is irrational, never a rounding
//! midpoint, never zero. Equality, sign and rounding ties are therefore decided exactly; with
//! one term the exact field arithmetic of [`QSqrt`] (and its rounding) is used as is.
//!
//! **Termination.** With two or more terms the value `v` is irrational, and it is bounded by
//! integers: `s ≤ |B|·sqrt(D)·2^k < s + 1` with `s = isqrt(floor(B²·D·4^k))`. The interval
//! `[L, U]` of width `n·2^-k` holds `v`; rounding is monotone, so when `L` and `U` round to
//! the same float, so does `v`. Otherwise a rounding boundary `t` (a midpoint, the overflow
//! threshold or 0: a rational) lies within `n·2^-k` of `v`, and `k` grows. It cannot grow
//! forever: scaled by an integer `Q` to integer coefficients and integer radicands, the
//! product of `Q·(v − t)` over all `2^n` sign choices of the `sqrt(Dᵢ)` is an integer (it is
//! even in every `sqrt(Dᵢ)`) and nonzero (each factor is again a sum with distinct classes
//! and nonzero coefficients), so `|v − t| ≥ 1/(Q·H^(2^n − 1))` with `H` a bound on the
//! other factors. Past that
//! precision (the cap computed by `liouville_cap_bits`, when it fits in 64 bits) no boundary
//! is left in the interval; reaching the cap would be a bug of this file, and panics saying so.

use super::parse::{parse_exact_with, Limits, ParseError};
use super::round::{round as round_qsqrt, round_rational, FloatFormat, Rounded};
use super::{fmt_rational, mul_pow2, rational_sqrt_exact, BigInt, QSqrt, Rational};
use num_integer::Integer;
use num_traits::{One, Signed, Zero};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, Mul, Neg, Sub};

/// One term `b·sqrt(d)` of a [`SumOfRoots`]: `b ≠ 0`, `d > 0` not a rational square.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootTerm {
    /// The coefficient `b`.
    pub b: Rational,
    /// The radicand `d`.
    pub d: Rational,
}

/// `A + Σ Bᵢ·sqrt(Dᵢ)` in the normal form of the module docs (no zero term, no square
/// radicand, radicands in pairwise distinct square classes, increasing).
///
/// Equality (`==`) is equality of values (exact); two sums of equal value whose classes were
/// merged from different radicands (`sqrt(8)` and `2·sqrt(2)`) are equal.
#[derive(Clone, Debug)]
pub struct SumOfRoots {
    a: Rational,
    terms: Vec<RootTerm>,
}

/// Small primes for the bucket key of the square-class merge: radicands whose valuations at
/// these primes differ in parity are never in one class, so only radicands with equal keys
/// are compared by the exact square-root test (a filter: the decision is the exact test).
const KEY_PRIMES: [u32; 16] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53];

/// `sqrt(d·r)` when it is rational, for positive `d`, `r`: `d·r = P/Q` with `P = dn·rn`,
/// `Q = dd·rd` is a rational square exactly when the integer `P·Q` is one, and then
/// `sqrt(d·r) = sqrt(P·Q)/Q`. Integer products only (the product of the rationals would be
/// reduced by gcds, for a test that fails for nearly every pair it is asked).
fn sqrt_of_product(d: &Rational, r: &Rational) -> Option<Rational> {
    let q = d.denom() * r.denom();
    let pq = d.numer() * r.numer() * &q;
    super::int_sqrt_exact(&pq).map(|s| Rational::new(s, q))
}

fn class_key(d: &Rational) -> u32 {
    // d = n/m is in the square class of the integer n·m.
    let mut v: BigInt = d.numer() * d.denom();
    let mut key = 0u32;
    for (bit, &p) in KEY_PRIMES.iter().enumerate() {
        let p = BigInt::from(p);
        let mut odd = false;
        loop {
            let (q, r) = v.div_rem(&p);
            if !r.is_zero() {
                break;
            }
            v = q;
            odd = !odd;
        }
        if odd {
            key |= 1 << bit;
        }
    }
    key
}

impl SumOfRoots {
    /// The rational `a`.
    pub fn rational(a: Rational) -> Self {
        SumOfRoots {
            a,
            terms: Vec::new(),
        }
    }

    /// The integer `n`.
    pub fn int(n: i64) -> Self {
        Self::rational(Rational::from_integer(BigInt::from(n)))
    }

    /// `a + Σ b·sqrt(d)` over `(b, d)` pairs, brought to the normal form. Every `d` must be
    /// positive (panics otherwise, as [`QSqrt::new`] does: the callers' radicands are
    /// `var + eps > 0`, checked before).
    pub fn from_terms(a: Rational, terms: impl IntoIterator<Item = (Rational, Rational)>) -> Self {
        let mut a = a;
        // Equal radicands merged, perfect squares folded into `a`, zero terms dropped.
        let mut by_d: BTreeMap<Rational, Rational> = BTreeMap::new();
        for (b, d) in terms {
            assert!(d.is_positive(), "SumOfRoots: radicand must be positive");
            if b.is_zero() {
                continue;
            }
            if let Some(s) = rational_sqrt_exact(&d) {
                a += b * s;
                continue;
            }
            *by_d.entry(d).or_insert_with(Rational::zero) += b;
        }
        // Square classes, least radicand first (BTreeMap order): each radicand joins the
        // class of the first representative it shares a class with.
        let mut reps: Vec<(u32, RootTerm)> = Vec::new();
        for (d, b) in by_d {
            if b.is_zero() {
                continue;
            }
            let key = class_key(&d);
            let found = reps.iter_mut().find_map(|(k, t)| {
                if *k != key {
                    return None;
                }
                sqrt_of_product(&d, &t.d).map(|s| (t, s))
            });
            match found {
                // sqrt(d) = (sqrt(d·r)/r)·sqrt(r)
                Some((t, s)) => t.b += b * s / &t.d,
                None => reps.push((key, RootTerm { b, d })),
            }
        }
        let terms = reps
            .into_iter()
            .map(|(_, t)| t)
            .filter(|t| !t.b.is_zero())
            .collect();
        SumOfRoots { a, terms }
    }

    /// The same number as a sum (`a + b·sqrt(d)` has at most one term).
    pub fn from_qsqrt(v: &QSqrt) -> Self {
        match v.d() {
            Some(d) if !v.b().is_zero() => {
                Self::from_terms(v.a().clone(), std::iter::once((v.b().clone(), d.clone())))
            }
            _ => Self::rational(v.a().clone()),
        }
    }

    /// Rational part `A`.
    pub fn a(&self) -> &Rational {
        &self.a
    }
    /// The terms `Bᵢ·sqrt(Dᵢ)`, radicands increasing.
    pub fn terms(&self) -> &[RootTerm] {
        &self.terms
    }
    /// Whether the value is rational (no term: by linear independence a sum with a term is
    /// irrational).
    pub fn is_rational(&self) -> bool {
        self.terms.is_empty()
    }
    /// The value as a rational, if it is one.
    pub fn as_rational(&self) -> Option<&Rational> {
        if self.terms.is_empty() {
            Some(&self.a)
        } else {
            None
        }
    }
    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty() && self.a.is_zero()
    }
    /// The value as a [`QSqrt`] when it has at most one term.
    pub fn to_qsqrt(&self) -> Option<QSqrt> {
        match self.terms.as_slice() {
            [] => Some(QSqrt::rational(self.a.clone())),
            [t] => Some(QSqrt::new(self.a.clone(), t.b.clone(), t.d.clone())),
            _ => None,
        }
    }

    /// `self · 2^k`, exactly.
    pub fn mul_pow2(&self, k: i64) -> Self {
        SumOfRoots {
            a: mul_pow2(&self.a, k),
            terms: self
                .terms
                .iter()
                .map(|t| RootTerm {
                    b: mul_pow2(&t.b, k),
                    d: t.d.clone(),
                })
                .collect(),
        }
    }

    /// Integer bounds of `self·2^k`: `(lo, hi)` with `lo ≤ self·2^k ≤ hi`, `hi − lo` at most
    /// the number of terms; exact in `A`, one unit per term. `squares` holds each term's sign
    /// and `B²·D`.
    fn scaled_bounds(&self, squares: &[(bool, BigInt, BigInt)], k: i64) -> (Rational, Rational) {
        let base = mul_pow2(&self.a, k);
        let (mut lo, mut hi) = (base.clone(), base);
        for (neg, n, d) in squares {
            // |b|·sqrt(d)·2^k = sqrt(b²·d·4^k); s = isqrt(floor(that square)), the square
            // n/d·4^k floored in integers.
            let fl = if k >= 0 {
                (n << (2 * k) as usize).div_floor(d)
            } else {
                n.div_floor(&(d << (-2 * k) as usize))
            };
            let s = Rational::from_integer(fl.sqrt());
            if *neg {
                lo -= &s + Rational::one();
                hi -= s;
            } else {
                lo += &s;
                hi += s + Rational::one();
            }
        }
        (lo, hi)
    }

    /// A first precision (bits after the binary point) for the interval refinement: `extra`
    /// bits below the largest term's binade.
    fn start_bits(&self, extra: i64) -> i64 {
        let lb = |r: &Rational| -> i64 {
            if r.is_zero() {
                i64::MIN / 4
            } else {
                r.numer().bits() as i64 - r.denom().bits() as i64
            }
        };
        let mut top = lb(&self.a);
        for t in &self.terms {
            top = top.max(lb(&t.b) + lb(&t.d) / 2 + 1);
        }
        extra - top
    }

    /// Refine `[lo, hi] ∋ self` until `done(lo, hi)` holds; `Some(answer)` ends it. Doubles
    /// the extra precision each round, and panics past the Liouville cap (a bug, see the
    /// module docs).
    fn refine<R>(
        &self,
        start_extra: i64,
        mut done: impl FnMut(&Rational, &Rational) -> Option<R>,
    ) -> R {
        let k0 = self.start_bits(start_extra);
        let cap = self.liouville_cap_bits();
        // each term's sign and B²·D as integers over integers (unreduced: only floored)
        let squares: Vec<(bool, BigInt, BigInt)> = self
            .terms
            .iter()
            .map(|t| {
                let (bn, bd) = (t.b.numer(), t.b.denom());
                (
                    t.b.is_negative(),
                    bn * bn * t.d.numer(),
                    bd * bd * t.d.denom(),
                )
            })
            .collect();
        let mut extra: i64 = 0;
        let mut step: i64 = 32;
        loop {
            let k = k0 + extra;
            let (lo, hi) = self.scaled_bounds(&squares, k);
            let (lo, hi) = (mul_pow2(&lo, -k), mul_pow2(&hi, -k));
            if let Some(r) = done(&lo, &hi) {
                return r;
            }
            if let Some(cap) = cap {
                assert!(
                    (extra as u64) <= cap.saturating_add(64),
                    "bnconf-spec bug: SumOfRoots refinement passed its proven precision cap \
                     ({cap} bits) for {self}"
                );
            }
            extra += step;
            step = step.saturating_mul(2);
        }
    }

    /// The precision (bits beyond the start) past which no rational with a denominator of at
    /// most 2^1200 (every rounding boundary of the formats here) can lie in the refinement's
    /// interval: `log2 n + Qbits + (2^n − 1)·(Qbits + Hbits)`, or `None` when that does not
    /// fit in 64 bits (the loop still ends: the bound exists, it is only too large to write).
    fn liouville_cap_bits(&self) -> Option<u64> {
        let n = self.terms.len() as u32;
        if n < 2 {
            return Some(0);
        }
        if n >= 60 {
            return None; // 2^n alone leaves no room in 64 bits
        }
        let bits = |x: &BigInt| x.bits();
        // Q: a common multiple of every denominator once radicands are made integers.
        let mut qbits = bits(self.a.denom()) + 1200;
        let mut h = self.a.abs() * Rational::from_integer(2.into()) + Rational::one();
        for t in &self.terms {
            qbits += bits(t.b.denom()) + bits(t.d.denom());
            h += t.b.abs() * (&t.d + Rational::one()) * Rational::from_integer(2.into());
        }
        let hbits = bits(&h.ceil().to_integer()) + qbits;
        let conj = 1u64.checked_shl(n)?.checked_sub(1)?;
        conj.checked_mul(qbits + hbits)?.checked_add(qbits + 64)
    }

    /// Exact sign: -1, 0 or 1.
    pub fn signum(&self) -> i32 {
        if let Some(v) = self.to_qsqrt() {
            return v.signum();
        }
        // Two or more terms: irrational, never zero; refine until 0 is outside.
        self.refine(64, |lo, hi| {
            if lo.is_positive() {
                Some(1)
            } else if hi.is_negative() {
                Some(-1)
            } else {
                None
            }
        })
    }

    /// Exact comparison with a rational.
    pub fn cmp_rational(&self, t: &Rational) -> Ordering {
        // Shifting A keeps the normal form: no merging to redo.
        let diff = SumOfRoots {
            a: &self.a - t,
            terms: self.terms.clone(),
        };
        diff.signum().cmp(&0)
    }

    /// Correctly round to `format` (nearest, ties to even; overflow to ±inf; subnormals; a
    /// zero result takes the sign of the value, an exact zero is +0), as
    /// [`round`](super::round::round) does for a [`QSqrt`] — which it is, with at most one
    /// term. With more, the interval `[L, U]` is refined until `L` and `U` round alike.
    pub fn round(&self, format: FloatFormat) -> Rounded {
        if let Some(v) = self.to_qsqrt() {
            return round_qsqrt(&v, format);
        }
        self.refine(format.precision() as i64 + 32, |lo, hi| {
            let (rl, rh) = (round_rational(lo, format), round_rational(hi, format));
            (rl == rh).then_some(rl)
        })
    }
}

impl PartialEq for SumOfRoots {
    fn eq(&self, o: &Self) -> bool {
        (self.clone() - o.clone()).is_zero()
    }
}
impl Eq for SumOfRoots {}

impl From<Rational> for SumOfRoots {
    fn from(r: Rational) -> Self {
        SumOfRoots::rational(r)
    }
}
impl From<&QSqrt> for SumOfRoots {
    fn from(v: &QSqrt) -> Self {
        SumOfRoots::from_qsqrt(v)
    }
}

impl fmt::Display for SumOfRoots {
    /// FORMAT.md's exact syntax: `A`, or `A + B1*sqrt(D1) + … + Bj*sqrt(Dj)` (each term as
    /// [`QSqrt`] writes its one term: a negative `B` is written `+ -B*sqrt(D)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", fmt_rational(&self.a))?;
        for t in &self.terms {
            write!(f, " + {}*sqrt({})", fmt_rational(&t.b), fmt_rational(&t.d))?;
        }
        Ok(())
    }
}

impl Neg for SumOfRoots {
    type Output = SumOfRoots;
    fn neg(self) -> SumOfRoots {
        SumOfRoots {
            a: -self.a,
            terms: self
                .terms
                .into_iter()
                .map(|t| RootTerm { b: -t.b, d: t.d })
                .collect(),
        }
    }
}

impl Add for SumOfRoots {
    type Output = SumOfRoots;
    fn add(self, o: SumOfRoots) -> SumOfRoots {
        let terms = self.terms.into_iter().chain(o.terms).map(|t| (t.b, t.d));
        SumOfRoots::from_terms(self.a + o.a, terms)
    }
}
impl Sub for SumOfRoots {
    type Output = SumOfRoots;
    fn sub(self, o: SumOfRoots) -> SumOfRoots {
        self + (-o)
    }
}
impl Add<&QSqrt> for SumOfRoots {
    type Output = SumOfRoots;
    fn add(self, o: &QSqrt) -> SumOfRoots {
        self + SumOfRoots::from_qsqrt(o)
    }
}
impl Mul<&Rational> for SumOfRoots {
    type Output = SumOfRoots;
    fn mul(self, r: &Rational) -> SumOfRoots {
        if r.is_zero() {
            return SumOfRoots::int(0);
        }
        SumOfRoots {
            a: self.a * r,
            terms: self
                .terms
                .into_iter()
                .map(|t| RootTerm { b: t.b * r, d: t.d })
                .collect(),
        }
    }
}

/// Σ of exact field values, each possibly in its own field: the sum as a [`SumOfRoots`].
pub fn sum_of_qsqrts<'a>(values: impl IntoIterator<Item = &'a QSqrt>) -> SumOfRoots {
    let mut a = Rational::zero();
    let mut terms = Vec::new();
    for v in values {
        a += v.a();
        if let Some(d) = v.d() {
            if !v.b().is_zero() {
                terms.push((v.b().clone(), d.clone()));
            }
        }
    }
    SumOfRoots::from_terms(a, terms)
}

/// Parse FORMAT.md's sum syntax with the default [`Limits`]: `A`, or `A + B*sqrt(D)` (what
/// [`parse_exact`](super::parse::parse_exact) reads), followed by any number of further
/// `+ B*sqrt(D)` / `- B*sqrt(D)` / `+ sqrt(D)` terms.
pub fn parse_sum_of_roots(s: &str) -> Result<SumOfRoots, ParseError> {
    parse_sum_of_roots_with(s, &Limits::default())
}

/// [`parse_sum_of_roots`] with explicit limits (the length limit applies to the whole string).
pub fn parse_sum_of_roots_with(s: &str, lim: &Limits) -> Result<SumOfRoots, ParseError> {
    let fail = |reason: &str| ParseError {
        literal: s.chars().take(80).collect(),
        reason: reason.into(),
    };
    if s.len() > lim.max_len {
        return Err(fail(&format!("longer than {} bytes", lim.max_len)));
    }
    // Split after each `sqrt(...)`: radicands are rationals, so the first `)` closes it.
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("sqrt(") {
        let close = rest[open..]
            .find(')')
            .ok_or_else(|| fail("`sqrt(` without `)`"))?
            + open;
        pieces.push(&rest[..=close]);
        rest = &rest[close + 1..];
    }
    if pieces.is_empty() {
        return parse_exact_with(s, lim).map(|v| SumOfRoots::from_qsqrt(&v));
    }
    if !rest.trim().is_empty() {
        return Err(fail("unexpected text after the last `sqrt(D)` term"));
    }
    let mut a = Rational::zero();
    let mut terms = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let v = if i == 0 {
            parse_exact_with(piece, lim)?
        } else {
            let p = piece.trim_start();
            if !(p.starts_with('+') || p.starts_with('-')) {
                return Err(fail("expected `+` or `-` before each further sqrt term"));
            }
            parse_exact_with(&format!("0 {p}"), lim)?
        };
        a += v.a();
        if let Some(d) = v.d() {
            terms.push((v.b().clone(), d.clone()));
        }
    }
    Ok(SumOfRoots::from_terms(a, terms))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn q(n: i64, d: i64) -> Rational {
        Rational::new(BigInt::from(n), BigInt::from(d))
    }

    #[test]
    fn normal_form_merges_classes_and_folds_squares() {
        // sqrt 8 + sqrt 2 = 3 sqrt 2; sqrt(9/4) = 3/2 folds into A; 0·sqrt 5 dropped.
        let v = SumOfRoots::from_terms(
            q(1, 1),
            [
                (q(1, 1), q(8, 1)),
                (q(1, 1), q(2, 1)),
                (q(2, 1), q(9, 4)),
                (q(0, 1), q(5, 1)),
                (q(1, 2), q(3, 1)),
            ],
        );
        assert_eq!(v.a(), &q(4, 1));
        assert_eq!(
            v.terms(),
            &[
                RootTerm {
                    b: q(3, 1),
                    d: q(2, 1)
                },
                RootTerm {
                    b: q(1, 2),
                    d: q(3, 1)
                }
            ]
        );
        assert_eq!(v.to_string(), "4 + 3*sqrt(2) + 1/2*sqrt(3)");
        // 3/4 and 27 are one class: sqrt 27 = 6 sqrt(3/4).
        let w = SumOfRoots::from_terms(q(0, 1), [(q(1, 1), q(27, 1)), (q(-6, 1), q(3, 4))]);
        assert!(w.is_zero());
        assert_eq!(w.to_string(), "0");
        // sqrt 8 alone equals 2 sqrt 2 (value equality).
        assert_eq!(
            SumOfRoots::from_terms(q(0, 1), [(q(1, 1), q(8, 1))]),
            SumOfRoots::from_terms(q(0, 1), [(q(2, 1), q(2, 1))])
        );
    }

    #[test]
    fn one_term_prints_and_rounds_as_qsqrt() {
        let v = QSqrt::new(q(3, 1), q(-2, 1), q(2, 1));
        let s = SumOfRoots::from_qsqrt(&v);
        assert_eq!(s.to_string(), v.to_string());
        for f in FloatFormat::ALL {
            assert_eq!(s.round(f), round_qsqrt(&v, f));
        }
    }

    #[test]
    fn sign_and_rounding_of_two_terms() {
        // sqrt 3 - sqrt 2 ≈ 0.3178; sqrt 2 + sqrt 3 - 22/7 ≈ 0.0034072, between 1/294 and 1/293
        let v = SumOfRoots::from_terms(q(0, 1), [(q(1, 1), q(3, 1)), (q(-1, 1), q(2, 1))]);
        assert_eq!(v.signum(), 1);
        assert_eq!((-v.clone()).signum(), -1);
        let w = SumOfRoots::from_terms(q(-22, 7), [(q(1, 1), q(3, 1)), (q(1, 1), q(2, 1))]);
        assert_eq!(w.signum(), 1);
        assert_eq!(w.cmp_rational(&q(1, 293)), Ordering::Less);
        assert_eq!(w.cmp_rational(&q(1, 294)), Ordering::Greater);
        let r = v.round(FloatFormat::F64);
        assert_eq!(r.to_f64(), 0.317_837_245_195_782_27); // sqrt(3) - sqrt(2) correctly rounded
        assert_eq!(v.round(FloatFormat::F16).to_bits(), 0x3516);
    }

    /// The Liouville cap: none needed below two terms, a finite number of bits for a few,
    /// too large to write (None) for many; and a near-tie far below 2^-64 relative resolves
    /// well within it.
    #[test]
    fn liouville_cap() {
        assert_eq!(SumOfRoots::int(3).liouville_cap_bits(), Some(0));
        let two = SumOfRoots::from_terms(q(1, 1), [(q(1, 1), q(2, 1)), (q(1, 1), q(3, 1))]);
        let cap = two.liouville_cap_bits().unwrap();
        assert!(cap > 3 * 1200 && cap < 10_000, "{cap}");
        let many =
            SumOfRoots::from_terms(q(0, 1), (0..70).map(|i| (q(1, 1), q(2 * i + 3, 2 * i + 5))));
        assert_eq!(many.terms().len(), 70);
        assert_eq!(many.liouville_cap_bits(), None);
        // sqrt 2 + sqrt 3 = 3.14626436994197234232…, correctly rounded 3.1462643699419726
        let w = two - SumOfRoots::int(1);
        assert_eq!(w.round(FloatFormat::F64).to_f64(), 3.146_264_369_941_972_6);
    }

    #[test]
    fn parse_reads_what_display_writes() {
        for s in [
            "0",
            "-7/3",
            "1 + 2*sqrt(3)",
            "1 + -2*sqrt(3) + 5/7*sqrt(11/2)",
            "0 + 1*sqrt(2) + -1*sqrt(3) + 3*sqrt(5)",
        ] {
            assert_eq!(parse_sum_of_roots(s).unwrap().to_string(), s, "{s}");
        }
        assert_eq!(
            parse_sum_of_roots("sqrt(2) - sqrt(3) + 2*sqrt(8)")
                .unwrap()
                .to_string(),
            "0 + 5*sqrt(2) + -1*sqrt(3)"
        );
        for bad in [
            "1 + sqrt(2) sqrt(3)",
            "1 + sqrt(2) + sqrt(0)",
            "1 + sqrt(2) + sqrt(-3)",
            "1 + sqrt(2",
            "1 + sqrt(2) x",
            "1 + sqrt(2) + 3*sqrt(5) + 4",
            "",
        ] {
            assert!(parse_sum_of_roots(bad).is_err(), "{bad:?}");
        }
    }
}
