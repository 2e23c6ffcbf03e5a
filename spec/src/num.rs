//! The number types the ops are written over: the exact field [`QSqrt`] and forward-mode
//! dual numbers over it ([`Dual`]), which give the exact Jacobian from the definition.

use crate::exact::{QSqrt, Rational};
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A field with a square root of positive values whose primal part is rational — all an op
/// needs. Implemented by [`QSqrt`] (the exact reference) and [`Dual<QSqrt>`] (its derivative).
pub trait Scalar:
    Clone
    + Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// A constant.
    fn from_rational(r: &Rational) -> Self;
    /// The exact value (the primal part, for a dual number).
    fn value(&self) -> &QSqrt;
    /// `sqrt(self)`; the caller guarantees the value is a positive rational (constraint C1).
    fn sqrt(&self) -> Self;
    /// The integer `n`.
    fn int(n: i64) -> Self {
        Self::from_rational(&Rational::from_integer(n.into()))
    }
}

impl Scalar for QSqrt {
    fn from_rational(r: &Rational) -> Self {
        QSqrt::rational(r.clone())
    }
    fn value(&self) -> &QSqrt {
        self
    }
    fn sqrt(&self) -> Self {
        self.sqrt_of_rational()
    }
}

/// A dual number `v + t·ε` (ε² = 0): carries one directional derivative exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct Dual<T> {
    /// Value.
    pub v: T,
    /// Tangent (derivative along the seeded direction).
    pub t: T,
}

impl<T: Scalar> Dual<T> {
    /// A constant (zero tangent).
    pub fn constant(v: T) -> Self {
        Dual { v, t: T::int(0) }
    }
    /// A variable seeded with tangent 1.
    pub fn variable(v: T) -> Self {
        Dual { v, t: T::int(1) }
    }
}

impl<T: Scalar> Add for Dual<T> {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Dual {
            v: self.v + o.v,
            t: self.t + o.t,
        }
    }
}
impl<T: Scalar> Sub for Dual<T> {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Dual {
            v: self.v - o.v,
            t: self.t - o.t,
        }
    }
}
impl<T: Scalar> Mul for Dual<T> {
    type Output = Self;
    fn mul(self, o: Self) -> Self {
        let t = self.v.clone() * o.t + self.t * o.v.clone();
        Dual { v: self.v * o.v, t }
    }
}
impl<T: Scalar> Div for Dual<T> {
    type Output = Self;
    fn div(self, o: Self) -> Self {
        // (v/w)' = (t w - v s) / w^2
        let v = self.v.clone() / o.v.clone();
        let t = (self.t - v.clone() * o.t) / o.v;
        Dual { v, t }
    }
}
impl<T: Scalar> Neg for Dual<T> {
    type Output = Self;
    fn neg(self) -> Self {
        Dual {
            v: -self.v,
            t: -self.t,
        }
    }
}

impl<T: Scalar> Scalar for Dual<T> {
    fn from_rational(r: &Rational) -> Self {
        Dual::constant(T::from_rational(r))
    }
    fn value(&self) -> &QSqrt {
        self.v.value()
    }
    fn sqrt(&self) -> Self {
        // d sqrt(q) = dq / (2 sqrt(q)): stays in Q(sqrt(q)).
        let s = self.v.sqrt();
        let t = self.t.clone() / (T::int(2) * s.clone());
        Dual { v: s, t }
    }
}
