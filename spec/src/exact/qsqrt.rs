use super::{add_signed, fmt_rational, mul, rational_sqrt_exact, BigInt, Rational};
use num_integer::Integer;
use num_traits::{One, Signed, Zero};
use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::Arc;

/// An element `a + b*sqrt(d)` of the quadratic field Q(sqrt(d)), `d > 0` rational and not the
/// square of a rational.
///
/// A rational is the element with `b = 0` (its radicand is then `None`). Two irrational
/// elements may only be combined when they share the radicand (all values of one channel do);
/// combining elements of different fields is a bug of the caller and panics (inputs are moved
/// into their channel's field by [`QSqrt::in_field`], which reports instead of panicking).
#[derive(Clone, Debug)]
pub struct QSqrt {
    a: Rational,
    b: Rational,
    d: Option<Arc<Rational>>,
}

impl QSqrt {
    /// The rational `a`.
    pub fn rational(a: Rational) -> Self {
        QSqrt {
            a,
            b: Rational::zero(),
            d: None,
        }
    }

    /// The integer `n`.
    pub fn int(n: i64) -> Self {
        Self::rational(Rational::from_integer(BigInt::from(n)))
    }

    /// `a + b*sqrt(d)`; `d` must be positive. If `d` is a rational square the result is rational.
    pub fn new(a: Rational, b: Rational, d: Rational) -> Self {
        assert!(d.is_positive(), "QSqrt::new: radicand must be positive");
        if b.is_zero() {
            return Self::rational(a);
        }
        match rational_sqrt_exact(&d) {
            Some(s) => Self::rational(a + b * s),
            None => QSqrt {
                a,
                b,
                d: Some(Arc::new(d)),
            },
        }
    }

    /// `a + b·sqrt(d)` with the radicand `d` of `like`, an irrational value (`like.d()` is
    /// `Some`), without testing `d` for a rational square again: what [`QSqrt::new`] gives
    /// for the same `d`, for callers that build many values of one field (panics when `b`
    /// is not zero and `like` is rational).
    pub fn with_radicand_of(a: Rational, b: Rational, like: &QSqrt) -> Self {
        if b.is_zero() {
            return Self::rational(a);
        }
        let d = like
            .d
            .as_ref()
            .expect("with_radicand_of: an irrational `like`");
        QSqrt {
            a,
            b,
            d: Some(d.clone()),
        }
    }

    /// `sqrt(self)` for a positive rational `self` (panics otherwise: the callers check (C1)).
    pub fn sqrt_of_rational(&self) -> Self {
        assert!(
            self.b.is_zero() && self.a.is_positive(),
            "sqrt of a non-positive or irrational value"
        );
        Self::new(Rational::zero(), Rational::one(), self.a.clone())
    }

    /// Rational part `a`.
    pub fn a(&self) -> &Rational {
        &self.a
    }
    /// Coefficient `b` of `sqrt(d)`.
    pub fn b(&self) -> &Rational {
        &self.b
    }
    /// The radicand `d`, if the value is irrational.
    pub fn d(&self) -> Option<&Rational> {
        self.d.as_deref()
    }
    /// Whether the value is rational.
    pub fn is_rational(&self) -> bool {
        self.b.is_zero()
    }
    /// The value as a rational, if it is one.
    pub fn as_rational(&self) -> Option<&Rational> {
        if self.b.is_zero() {
            Some(&self.a)
        } else {
            None
        }
    }
    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.a.is_zero() && self.b.is_zero()
    }

    /// Express the same number with radicand `d` (the channel's `q`): `a + b*sqrt(D)` equals
    /// `a + b*sqrt(D/d)*sqrt(d)`, which lies in Q(sqrt(d)) iff `D/d` is a rational square.
    /// Returns `None` when the number is not in Q(sqrt(d)).
    pub fn in_field(&self, d: &Rational) -> Option<QSqrt> {
        match &self.d {
            None => Some(self.clone()),
            Some(own) if own.as_ref() == d => Some(self.clone()),
            Some(own) => {
                let s = rational_sqrt_exact(&(own.as_ref() / d))?;
                Some(Self::new(self.a.clone(), &self.b * s, d.clone()))
            }
        }
    }

    fn field(x: &QSqrt, y: &QSqrt) -> Option<Arc<Rational>> {
        match (&x.d, &y.d) {
            (None, None) => None,
            (Some(d), None) | (None, Some(d)) => Some(d.clone()),
            (Some(d1), Some(d2)) => {
                assert!(
                    Arc::ptr_eq(d1, d2) || d1 == d2,
                    "QSqrt: mixing fields sqrt({}) and sqrt({})",
                    d1,
                    d2
                );
                Some(d1.clone())
            }
        }
    }

    fn make(a: Rational, b: Rational, d: Option<Arc<Rational>>) -> Self {
        if b.is_zero() {
            QSqrt { a, b, d: None }
        } else {
            QSqrt { a, b, d }
        }
    }

    /// Exact sign: -1, 0 or 1.
    pub fn signum(&self) -> i32 {
        let sa = sign_of(&self.a);
        let sb = sign_of(&self.b);
        if sb == 0 {
            return sa;
        }
        if sa == 0 || sa == sb {
            return sb;
        }
        // Opposite signs: compare a^2 with b^2 d (never equal: d is not a square).
        let d = self.d.as_deref().expect("irrational value has a radicand");
        if square_exceeds(&self.a, &self.b, d) {
            sa
        } else {
            sb
        }
    }

    /// Exact comparison with a rational.
    pub fn cmp_rational(&self, t: &Rational) -> Ordering {
        let diff = QSqrt {
            a: &self.a - t,
            b: self.b.clone(),
            d: self.d.clone(),
        };
        diff.signum().cmp(&0)
    }

    /// Absolute value.
    pub fn abs(&self) -> Self {
        if self.signum() < 0 {
            -self.clone()
        } else {
            self.clone()
        }
    }

    /// `self * 2^k`, exactly.
    pub fn mul_pow2(&self, k: i64) -> Self {
        QSqrt {
            a: super::mul_pow2(&self.a, k),
            b: super::mul_pow2(&self.b, k),
            d: self.d.clone(),
        }
    }

    /// `floor(self)` exactly.
    pub fn floor(&self) -> BigInt {
        let mut t = super::floor_int(&self.a);
        if !self.b.is_zero() {
            let d = self.d.as_deref().unwrap();
            // floor(b²·d) from the numerators and denominators: no gcd
            let (bn, bd) = (self.b.numer(), self.b.denom());
            let s = ((bn * bn) * d.numer())
                .div_floor(&((bd * bd) * d.denom()))
                .sqrt();
            if self.b.is_negative() {
                t -= s;
            } else {
                t += s;
            }
        }
        // t is within a few units of the floor; correct it exactly.
        loop {
            if self.cmp_rational(&Rational::from_integer(t.clone())) == Ordering::Less {
                t -= 1;
            } else if self.cmp_rational(&Rational::from_integer(&t + 1)) != Ordering::Less {
                t += 1;
            } else {
                return t;
            }
        }
    }
}

/// Whether `a² > b²·d`, in integers: with `a = p/q`, `b = r/s`, `d = t/w` (denominators
/// positive), whether `(p·s)²·w > (r·q)²·t`. Six products and no gcd: multiplying the
/// rationals would reduce each product by two gcds, which for the long dyadic numerators of
/// the reference (binary gcd) cost far more than the products.
fn square_exceeds(a: &Rational, b: &Rational, d: &Rational) -> bool {
    let ps = a.numer() * b.denom();
    let rq = b.numer() * a.denom();
    (&ps * &ps) * d.denom() > (&rq * &rq) * d.numer()
}

fn sign_of(r: &Rational) -> i32 {
    if r.is_zero() {
        0
    } else if r.is_negative() {
        -1
    } else {
        1
    }
}

impl PartialEq for QSqrt {
    fn eq(&self, o: &Self) -> bool {
        self.a == o.a && self.b == o.b && (self.b.is_zero() || self.d == o.d)
    }
}
impl Eq for QSqrt {}

impl From<Rational> for QSqrt {
    fn from(r: Rational) -> Self {
        QSqrt::rational(r)
    }
}

impl fmt::Display for QSqrt {
    /// FORMAT.md's exact syntax: `A` or `A + B*sqrt(D)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.d {
            _ if self.b.is_zero() => write!(f, "{}", fmt_rational(&self.a)),
            Some(d) => write!(
                f,
                "{} + {}*sqrt({})",
                fmt_rational(&self.a),
                fmt_rational(&self.b),
                fmt_rational(d)
            ),
            None => unreachable!(),
        }
    }
}

impl Neg for QSqrt {
    type Output = QSqrt;
    fn neg(self) -> QSqrt {
        QSqrt {
            a: -self.a,
            b: -self.b,
            d: self.d,
        }
    }
}

impl<'a> Add<&'a QSqrt> for &'a QSqrt {
    type Output = QSqrt;
    fn add(self, o: &QSqrt) -> QSqrt {
        let d = QSqrt::field(self, o);
        QSqrt::make(
            add_signed(&self.a, &o.a, 1),
            add_signed(&self.b, &o.b, 1),
            d,
        )
    }
}
impl<'a> Sub<&'a QSqrt> for &'a QSqrt {
    type Output = QSqrt;
    fn sub(self, o: &QSqrt) -> QSqrt {
        let d = QSqrt::field(self, o);
        QSqrt::make(
            add_signed(&self.a, &o.a, -1),
            add_signed(&self.b, &o.b, -1),
            d,
        )
    }
}
impl<'a> Mul<&'a QSqrt> for &'a QSqrt {
    type Output = QSqrt;
    fn mul(self, o: &QSqrt) -> QSqrt {
        if self.b.is_zero() {
            return QSqrt::make(mul(&self.a, &o.a), mul(&self.a, &o.b), o.d.clone());
        }
        if o.b.is_zero() {
            return QSqrt::make(mul(&self.a, &o.a), mul(&self.b, &o.a), self.d.clone());
        }
        let d = QSqrt::field(self, o);
        let dv = d.as_deref().unwrap();
        let a = add_signed(&mul(&self.a, &o.a), &mul(&mul(&self.b, &o.b), dv), 1);
        let b = add_signed(&mul(&self.a, &o.b), &mul(&self.b, &o.a), 1);
        QSqrt::make(a, b, d)
    }
}
impl<'a> Div<&'a QSqrt> for &'a QSqrt {
    type Output = QSqrt;
    fn div(self, o: &QSqrt) -> QSqrt {
        assert!(!o.is_zero(), "QSqrt: division by zero");
        if o.b.is_zero() {
            return QSqrt::make(&self.a / &o.a, &self.b / &o.a, self.d.clone());
        }
        let d = QSqrt::field(self, o);
        let dv = d.as_deref().unwrap();
        // (a + b s)/(c + e s) = (a + b s)(c - e s) / (c^2 - e^2 d)
        let den = &o.a * &o.a - &o.b * &o.b * dv;
        let a = (&self.a * &o.a - &self.b * &o.b * dv) / &den;
        let b = (&self.b * &o.a - &self.a * &o.b) / &den;
        QSqrt::make(a, b, d)
    }
}

macro_rules! owned_ops {
    ($($tr:ident $m:ident),*) => {$(
        impl $tr<QSqrt> for QSqrt {
            type Output = QSqrt;
            fn $m(self, o: QSqrt) -> QSqrt { (&self).$m(&o) }
        }
        impl<'a> $tr<&'a QSqrt> for QSqrt {
            type Output = QSqrt;
            fn $m(self, o: &QSqrt) -> QSqrt { (&self).$m(o) }
        }
    )*};
}
owned_ops!(Add add, Sub sub, Mul mul, Div div);

#[cfg(test)]
mod tests {
    use super::*;
    fn q(n: i64, d: i64) -> Rational {
        Rational::new(BigInt::from(n), BigInt::from(d))
    }
    #[test]
    fn field_arithmetic_and_sign() {
        let s2 = QSqrt::new(q(0, 1), q(1, 1), q(2, 1));
        assert_eq!(&s2 * &s2, QSqrt::int(2));
        let x = QSqrt::new(q(3, 1), q(-2, 1), q(2, 1)); // 3 - 2 sqrt2 > 0 (0.17)
        assert_eq!(x.signum(), 1);
        let y = QSqrt::new(q(-3, 2), q(1, 1), q(2, 1)); // -1.5 + 1.414 < 0
        assert_eq!(y.signum(), -1);
        let inv = &QSqrt::int(1) / &x; // 1/(3-2r2) = 3 + 2 r2
        assert_eq!(inv, QSqrt::new(q(3, 1), q(2, 1), q(2, 1)));
        assert_eq!(
            QSqrt::new(q(1, 1), q(1, 1), q(9, 4)),
            QSqrt::rational(q(5, 2))
        );
        assert_eq!(x.to_string(), "3 + -2*sqrt(2)");
        assert_eq!(x.floor(), BigInt::from(0));
        assert_eq!(y.floor(), BigInt::from(-1));
        assert_eq!(
            QSqrt::new(q(0, 1), q(8, 1), q(2, 1)).floor(),
            BigInt::from(11)
        );
    }
    /// Division in the field, with an irrational numerator and a denominator whose norm
    /// `c^2 - e^2 d` is not 1: `(1 + 2 sqrt 3) / (5 - sqrt 3) = (1 + sqrt 3) / 2`; by a
    /// rational; and the quotient times the divisor is the dividend.
    #[test]
    fn division_in_the_field() {
        let s3 = |a: Rational, b: Rational| QSqrt::new(a, b, q(3, 1));
        let x = s3(q(1, 1), q(2, 1));
        let y = s3(q(5, 1), q(-1, 1));
        assert_eq!(&x / &y, s3(q(1, 2), q(1, 2)));
        assert_eq!(&y / &x, s3(q(-1, 1), q(1, 1)));
        assert_eq!(&x / &QSqrt::int(4), s3(q(1, 4), q(1, 2)));
        assert_eq!(&QSqrt::int(3) / &y, s3(q(15, 22), q(3, 22)));
        for (n, m) in [(&x, &y), (&y, &x), (&x, &x)] {
            assert_eq!(&(n / m) * m, n.clone(), "({n}) / ({m})");
        }
    }
    /// `floor` far from zero: its first estimate must be within a few units (the exact
    /// correction after it steps one unit at a time).
    #[test]
    fn floor_of_large_values() {
        let big = BigInt::from(1) << 200usize;
        let b = |n: &BigInt| Rational::from_integer(n.clone());
        // 2^200 + sqrt 2, -2^200 + sqrt 2, 2^200 - sqrt 2
        for (a, s, want) in [
            (big.clone(), 1, &big + 1),
            (-&big, 1, -&big + 1),
            (big.clone(), -1, &big - 2),
        ] {
            assert_eq!(QSqrt::new(b(&a), q(s, 1), q(2, 1)).floor(), want);
        }
        // 2^100 sqrt 2 = sqrt(2^201): floor is the integer square root
        let v = QSqrt::new(q(0, 1), b(&(BigInt::from(1) << 100usize)), q(2, 1));
        assert_eq!(v.floor(), (BigInt::from(1) << 201usize).sqrt());
        assert_eq!((-v).floor(), -(BigInt::from(1) << 201usize).sqrt() - 1);
    }
    #[test]
    fn in_field_rewrites_compatible_radicands() {
        let v = QSqrt::new(q(1, 1), q(1, 1), q(8, 1)); // 1 + sqrt 8 = 1 + 2 sqrt 2
        assert_eq!(
            v.in_field(&q(2, 1)),
            Some(QSqrt::new(q(1, 1), q(2, 1), q(2, 1)))
        );
        assert_eq!(v.in_field(&q(3, 1)), None);
    }
}
