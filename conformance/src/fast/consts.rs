//! Exact per-channel constants (step 2 of the fast path): from a channel's exact sums, the
//! rationals `P`, `Gd`, `A`, `Cx`, `μ` and `q` of its cell outputs, their integer forms (one gcd
//! per element) and their double-double approximations with error bounds.

use super::problem::*;
use super::sums::*;
use super::{acc, dd};
use crate::error::{ConfError, Result};
use acc::signed_parts;
use bnconf_spec::exact::{fmt_rational, reduced, QSqrt, Rational};
use bnconf_spec::{Op, SpecError};
use dd::{dd_div_sqrt, dd_of_rational, DD};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};

/// Exact per-channel constants: the cell output is
/// `P + cx_rat·(x − μ) + (gd_r·(dy − A) + cx_irr·(x − μ))/q · sqrt(q)`.
#[derive(Clone, Debug)]
pub(super) struct ExactConst {
    pub(super) q: Rational,
    pub(super) p: Rational,
    pub(super) gd_r: Rational,
    pub(super) a: Rational,
    pub(super) cx_rat: Rational,
    pub(super) cx_irr: Rational,
    pub(super) mu: Rational,
}

/// An affine form `(n0 + nx·x + nd·d)/den` of two binary floats with integer coefficients
/// over one denominator: evaluated exactly with one reduction (one gcd) per element.
#[derive(Clone, Debug)]
pub(super) struct IntAffine {
    pub(super) n0: BigInt,
    pub(super) nx: BigInt,
    pub(super) nd: BigInt,
    pub(super) den: BigInt,
}

impl IntAffine {
    pub(super) fn new(k0: &Rational, kx: &Rational, kd: &Rational) -> IntAffine {
        use num_integer::Integer;
        let den = k0.denom().lcm(kx.denom()).lcm(kd.denom());
        let scaled = |k: &Rational| k.numer() * (&den / k.denom());
        IntAffine {
            n0: scaled(k0),
            nx: scaled(kx),
            nd: scaled(kd),
            den,
        }
    }

    pub(super) fn eval(&self, x: f64, d: f64) -> Rational {
        let ((mx, ex), (md, ed)) = (signed_parts(x), signed_parts(d));
        let e = 0
            .min(if self.nx.is_zero() { 0 } else { ex })
            .min(if self.nd.is_zero() { 0 } else { ed });
        let mut num = &self.n0 << (-e) as usize;
        if !self.nx.is_zero() && mx != 0 {
            num += (&self.nx * mx) << (ex - e) as usize;
        }
        if !self.nd.is_zero() && md != 0 {
            num += (&self.nd * md) << (ed - e) as usize;
        }
        Rational::new(num, &self.den << (-e) as usize)
    }
}

/// [`ExactConst`] as integer affine forms: `a = P + cx_rat·(x − μ)` and
/// `b = (gd_r·(d − A) + cx_irr·(x − μ))/q`, so that the cell output is `a + b·sqrt(q)`;
/// `unit = sqrt(q)` as a [`QSqrt`] (rational when q is a square).
#[derive(Clone, Debug)]
pub(super) struct ExactForms {
    pub(super) a: IntAffine,
    pub(super) b: IntAffine,
    pub(super) unit: QSqrt,
}

impl ExactForms {
    pub(super) fn new(c: &ExactConst) -> ExactForms {
        let zero = Rational::zero();
        let a = IntAffine::new(&(&c.p - &c.cx_rat * &c.mu), &c.cx_rat, &zero);
        let b0 = -(&c.gd_r * &c.a + &c.cx_irr * &c.mu) / &c.q;
        let b = IntAffine::new(&b0, &(&c.cx_irr / &c.q), &(&c.gd_r / &c.q));
        ExactForms {
            a,
            b,
            unit: QSqrt::new(Rational::zero(), Rational::one(), c.q.clone()),
        }
    }

    pub(super) fn value(&self, x: f64, d: f64) -> QSqrt {
        let (a, b) = (self.a.eval(x, d), self.b.eval(x, d));
        if self.unit.is_rational() {
            // q is a square: sqrt(q) is rational.
            QSqrt::rational(a + b * self.unit.a())
        } else {
            QSqrt::with_radicand_of(a, b, &self.unit)
        }
    }
}

/// Double-double images of the constants (`Gd = gd_r/sqrt(q)`, `Cx = cx_rat + cx_irr/sqrt(q)`).
#[derive(Clone, Copy, Debug)]
pub(super) struct DdConst {
    pub(super) p: DD,
    pub(super) gd: DD,
    pub(super) a: DD,
    pub(super) cx: DD,
    pub(super) mu: DD,
    pub(super) p_abs: f64,
    pub(super) gd_abs: f64,
    pub(super) a_abs: f64,
    pub(super) cx_abs: f64,
    pub(super) mu_abs: f64,
    pub(super) has_d: bool,
    /// Every constant within `[2^-900, 2^900]` (or zero): the double-double bounds apply.
    pub(super) ok: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Chan {
    /// The constants (what `forms` are built from).
    pub(super) ex: ExactConst,
    /// `ex` as integer forms (what [`Chan::exact`] evaluates), built on the first exact value
    /// asked for: most channels of a large case never need one (their elements are decided in
    /// double-double), and the forms cost more rational arithmetic than the constants.
    forms: std::sync::OnceLock<ExactForms>,
    pub(super) dd: DdConst,
    /// Per-channel outputs, exact.
    pub(super) outs: Vec<QSqrt>,
}

/// 2^-95: the relative part of the per-element error bound.
pub(super) const ERR_REL: f64 = 2.524354896707238e-29;
/// 2^-1000: the absolute part (covers underflow in the double-double operations).
pub(super) const ERR_ABS: f64 = 9.332636185032189e-302; // 2^-1000
/// 2^-45: the relative part of the plain-f64 value's error bound ([`DdConst::value_f64`]).
pub(super) const ERR64_REL: f64 = 2.842170943040401e-14;

pub(super) fn in_range(v: f64) -> bool {
    v == 0.0 || (v.abs() >= 1.2e-271 && v.abs() <= 8.4e270) // ~[2^-900, 2^900]
}

impl DdConst {
    pub(super) fn new(e: &ExactConst, has_d: bool) -> DdConst {
        let p = dd_of_rational(&e.p);
        let gd = dd_div_sqrt(&e.gd_r, &e.q);
        let a = dd_of_rational(&e.a);
        let cx = if e.cx_irr.is_zero() {
            dd_of_rational(&e.cx_rat)
        } else {
            debug_assert!(e.cx_rat.is_zero());
            dd_div_sqrt(&e.cx_irr, &e.q)
        };
        let mu = dd_of_rational(&e.mu);
        let ok = [p, gd, a, cx, mu].iter().all(|d| in_range(d.hi));
        DdConst {
            p,
            gd,
            a,
            cx,
            mu,
            p_abs: p.hi.abs(),
            gd_abs: gd.hi.abs(),
            a_abs: a.hi.abs(),
            cx_abs: cx.hi.abs(),
            mu_abs: mu.hi.abs(),
            has_d,
            ok,
        }
    }

    /// The value in double-double and a bound on its absolute error.
    #[inline(always)]
    pub(super) fn approx(&self, x: f64, d: f64) -> (DD, f64) {
        self.approx_by::<dd::Portable>(x, d)
    }

    /// [`DdConst::approx`] with the exact products formed by `P` (same result).
    #[inline(always)]
    pub(super) fn approx_by<P: dd::Prod>(&self, x: f64, d: f64) -> (DD, f64) {
        if self.has_d {
            self.approx_with::<P, true>(x, d)
        } else {
            self.approx_with::<P, false>(x, d)
        }
    }

    /// [`DdConst::approx_by`] for an op with (`HAS_D`) or without a `dy` term.
    #[inline(always)]
    pub(super) fn approx_with<P: dd::Prod, const HAS_D: bool>(&self, x: f64, d: f64) -> (DD, f64) {
        let t = DD::from_f64(x) + -self.mu;
        let mut v = self.cx.mul_by::<P>(t) + self.p;
        let mut mag = self.cx_abs * (x.abs() + self.mu_abs) + self.p_abs;
        if HAS_D {
            let s = DD::from_f64(d) + -self.a;
            v = v + self.gd.mul_by::<P>(s);
            mag += self.gd_abs * (d.abs() + self.a_abs);
        }
        (v, mag * ERR_REL + ERR_ABS)
    }
}

impl DdConst {
    /// The value in plain f64 (the constants' leading parts, four or six operations) and a
    /// bound on its absolute error: `2^-45·mag + 2^-1000`, where `mag` bounds every term.
    /// Each of the at most six roundings and each leading part's distance to its constant
    /// (`|c − c.hi| ≤ 2^-52·|c.hi|`: a normalised double-double, `in_range`) is within
    /// `2^-52·mag`, so the error is within `16·2^-53·mag` (plus `2^-1075` per operation that
    /// underflows): the bound leaves a factor 16 (`mag` itself rounded within 8 ulps).
    #[inline(always)]
    pub(super) fn value_f64<const HAS_D: bool>(&self, x: f64, d: f64) -> (f64, f64) {
        let mut v = self.cx.hi * (x - self.mu.hi) + self.p.hi;
        let mut mag = self.cx_abs * (x.abs() + self.mu_abs) + self.p_abs;
        if HAS_D {
            v += self.gd.hi * (d - self.a.hi);
            mag += self.gd_abs * (d.abs() + self.a_abs);
        }
        (v, mag * ERR64_REL + ERR_ABS)
    }
}

impl Chan {
    /// The exact cell output at inputs `x`, `d` (the integer forms: one gcd per part).
    pub(super) fn exact(&self, x: f64, d: f64) -> QSqrt {
        self.forms
            .get_or_init(|| ExactForms::new(&self.ex))
            .value(x, d)
    }
}

impl ExactConst {
    /// The exact cell output by rational arithmetic (the reference [`ExactForms::value`] is
    /// tested against).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn value(&self, x: f64, d: f64) -> QSqrt {
        let t = rat(x) - &self.mu;
        let a = &self.p + &self.cx_rat * &t;
        let b = (&self.gd_r * (rat(d) - &self.a) + &self.cx_irr * &t) / &self.q;
        QSqrt::new(a, b, self.q.clone())
    }
}

pub(super) fn non_positive(c: usize, what: &'static str, q: &Rational) -> ConfError {
    ConfError::Spec(SpecError::NonPositiveVariance {
        channel: c,
        what,
        value: fmt_rational(q),
    })
}

/// `a + b` in lowest terms ([`reduced`]).
fn sum_reduced(a: &Rational, b: &Rational) -> Rational {
    reduced(
        a.numer() * b.denom() + b.numer() * a.denom(),
        a.denom() * b.denom(),
    )
}

pub(super) fn channel_consts(p: &FastProblem, c: usize, s: &Sums) -> Result<Chan> {
    let ch = |k: &str| rat(p.chan[k][c]);
    let zero = Rational::zero();
    let eps = &p.eps;
    let positive = |q: &Rational, what| {
        if q.is_positive() {
            Ok(())
        } else {
            Err(non_positive(c, what, q))
        }
    };
    // mu = s1/m, var = (s2·m − s1²)/m², each as one fraction of integers reduced once (the
    // same reduced rationals as the operations one by one, at one gcd each).
    let batch = || {
        let mi = BigInt::from(p.geom.m);
        let (n1, d1, n2, d2) = (s.s1.numer(), s.s1.denom(), s.s2.numer(), s.s2.denom());
        let mu = reduced(n1.clone(), d1 * &mi);
        let d1d1 = d1 * d1;
        let var = reduced(n2 * &d1d1 * &mi - n1 * n1 * d2, d2 * d1d1 * (&mi * &mi));
        (mu, var)
    };
    let sync_q = || {
        let mean = ch("mean");
        let q = ch("m2") - &mean * &mean + eps;
        (mean, q)
    };
    let (ex, outs) = match p.op {
        Op::RunningUpdate | Op::SyncStats => unreachable!("FastProblem::new refuses them"),
        Op::Forward | Op::Eval | Op::SyncForward => {
            let (mu, q, outs) = match p.op {
                Op::Forward => {
                    let (mu, var) = batch();
                    let q = sum_reduced(&var, eps);
                    positive(&q, "var + eps")?;
                    let outs = vec![QSqrt::rational(mu.clone()), QSqrt::rational(var)];
                    (mu, q, outs)
                }
                Op::Eval => {
                    let q = ch("var") + eps;
                    positive(&q, "var + eps")?;
                    (ch("mean"), q, vec![])
                }
                _ => {
                    let (mean, q) = sync_q();
                    positive(&q, "m2 - mean^2 + eps")?;
                    (mean, q, vec![])
                }
            };
            let ex = ExactConst {
                q,
                p: ch("beta"),
                gd_r: zero.clone(),
                a: zero.clone(),
                cx_rat: zero,
                cx_irr: ch("gamma"),
                mu,
            };
            (ex, outs)
        }
        Op::Backward => {
            let (mu, var) = batch();
            let q = sum_reduced(&var, eps);
            positive(&q, "var + eps")?;
            let gamma = ch("gamma");
            // cov = Σ dy (x − μ) = sdx − μ·sd, in lowest terms (an output's part below).
            let (sdx, sd) = (&s.sdx, &s.sd);
            let cov = reduced(
                sdx.numer() * mu.denom() * sd.denom() - mu.numer() * sd.numer() * sdx.denom(),
                sdx.denom() * mu.denom() * sd.denom(),
            );
            // (q > 0: the denominators below are positive.) dgamma = (cov/q)·sqrt(q) in
            // lowest terms; b = cov/(m·q) and γ·b are constants only: their values, unreduced.
            let (cq_n, cq_d) = (cov.numer() * q.denom(), cov.denom() * q.numer());
            let dgamma = QSqrt::new(zero.clone(), reduced(cq_n.clone(), cq_d.clone()), q.clone());
            let cx_irr = Rational::new_raw(
                -(gamma.numer() * cq_n),
                gamma.denom() * cq_d * BigInt::from(p.geom.m),
            );
            let outs = vec![dgamma, QSqrt::rational(s.sd.clone())];
            let ex = ExactConst {
                p: zero.clone(),
                a: reduced(sd.numer().clone(), sd.denom() * BigInt::from(p.geom.m)),
                cx_rat: zero,
                cx_irr,
                gd_r: gamma,
                mu,
                q,
            };
            (ex, outs)
        }
        Op::SyncBackward => {
            let (mean, q) = sync_q();
            positive(&q, "m2 - mean^2 + eps")?;
            let gamma = ch("gamma");
            let k = ch("mean_dy_xhat");
            let cov = &s.sdx - &mean * &s.sd;
            let dgamma = QSqrt::new(zero.clone(), &cov / &q, q.clone());
            let outs = vec![dgamma, QSqrt::rational(s.sd.clone())];
            let ex = ExactConst {
                p: zero.clone(),
                a: ch("mean_dy"),
                cx_rat: -(&gamma * &k) / &q,
                cx_irr: zero,
                gd_r: gamma,
                mu: mean,
                q,
            };
            (ex, outs)
        }
    };
    let has_d = matches!(p.op, Op::Backward | Op::SyncBackward);
    Ok(Chan {
        dd: DdConst::new(&ex, has_d),
        forms: std::sync::OnceLock::new(),
        ex,
        outs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::FloatFormat;

    /// The integer forms give exactly the rational arithmetic's value (same `QSqrt`, same
    /// string) for every cell of the default suite's cases the fast path covers, f32 and f64,
    /// and at extreme inputs (zeros, subnormals, huge values).
    #[test]
    fn integer_forms_equal_the_rational_form() {
        let s = crate::suite::test_suite("default", &[FloatFormat::F32, FloatFormat::F64]);
        let extremes = [0.0, -0.0, 5e-324, -2.5e-310, 1e300, -3.0e-7, 1.5, 7.0e15];
        let (mut cases, mut cells) = (0, 0);
        for c in s.cases.iter().filter(|c| covers(c.op)) {
            let Ok(fp) = c.fast_problem() else {
                continue;
            };
            let Ok(fc) = crate::fast::cells::FastCells::new(&fp) else {
                continue;
            };
            cases += 1;
            for j in 0..fc.len() {
                let chan = &fc.chans[fc.channel_of(j)];
                let (x, d) = fc.inputs_at(j);
                let (want, got) = (chan.ex.value(x, d), chan.exact(x, d));
                assert_eq!(want, got, "{} cell {j}", c.id);
                assert_eq!(want.to_string(), got.to_string(), "{} cell {j}", c.id);
                cells += 1;
            }
            let chan = &fc.chans[0];
            for &x in &extremes {
                for &d in &extremes {
                    assert_eq!(
                        chan.ex.value(x, d),
                        chan.exact(x, d),
                        "{} at ({x}, {d})",
                        c.id
                    );
                }
            }
        }
        assert!(
            cases > 500 && cells > 20_000,
            "{cases} cases, {cells} cells"
        );
    }

    /// `reduced` is `Rational::new` (the same numerator and denominator) on fractions whose
    /// denominators have small odd parts (the fast path's) and large ones, with common powers
    /// of two on either side, negative and zero numerators.
    #[test]
    fn reduced_is_rational_new() {
        let mut state = 0x853c49e6748fea9bu64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let odd_parts = [
            1u64,
            3,
            9,
            81,
            1296 / 16,
            3125,
            253_125,
            999_999_999_989,
            (1 << 63) + 1,
        ];
        for t in 0..4000 {
            let n = (BigInt::from(next() >> (next() % 64)) * BigInt::from(next()))
                << (next() % 70) as usize;
            let n = if t % 3 == 0 { -n } else { n };
            let n = if t % 97 == 0 { BigInt::zero() } else { n };
            let odd = BigInt::from(odd_parts[t % odd_parts.len()]);
            let d = if t % 11 == 0 {
                odd * BigInt::from(next() | 1) * BigInt::from(next() | 1)
            } else {
                odd << (next() % 90) as usize
            };
            let common = BigInt::from(next() % 7 + 1) << (next() % 5) as usize;
            let (n, d) = (n * &common, d * &common);
            let (want, got) = (
                Rational::new(n.clone(), d.clone()),
                reduced(n.clone(), d.clone()),
            );
            assert_eq!(
                (got.numer(), got.denom()),
                (want.numer(), want.denom()),
                "{n}/{d}"
            );
        }
    }
}
