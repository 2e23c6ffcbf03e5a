//! The fast exact reference: correctly rounded golden vectors at float speed (docs/DESIGN.md §5).
//!
//! Same results as the per-element exact path ([`bnconf_spec::Problem::evaluate`] followed by
//! [`bnconf_spec::exact::round::round`]), bit for bit, for inputs that are binary floats (npy data, or
//! case values of dtype f32/f64). Method:
//!
//! 1. **Exact sums** per channel of `x`, `x²`, `dy`, `dy·x` in a fixed-point superaccumulator
//!    ([`acc::SuperAcc`]): one pass, no allocation per element. f32 data first sums integer
//!    mantissas per exponent ([`acc::F32Buckets`]: one integer `add` per sum and element),
//!    flushed into the superaccumulators every 2^20 values.
//! 2. **Exact per-channel rationals** from those sums (`mean = S1/m`,
//!    `var = (m S2 − S1²)/m²`, `q = var + eps`, ...). Every cell output of every op is then
//!    `P + Gd·(dy − A) + Cx·(x − μ)` with per-channel constants, where `Gd` and `Cx` are a
//!    rational or a rational times `1/sqrt(q)`.
//! 3. **Per element**, that expression in double-double ([`dd`]) with a rigorous bound
//!    `err = 2^-95·(|P| + |Gd|(|dy| + |A|) + |Cx|(|x| + |μ|)) + 2^-1000` on the absolute error
//!    (the operations' own bounds sum to below 2^-100 times the same magnitudes). If the whole
//!    interval `[v − err, v + err]` rounds to one float, that float is the correctly rounded
//!    result; otherwise (near a midpoint, near zero, out of range) the element is computed by
//!    the exact path: its `a + b·sqrt(q)` is built and rounded by `spec` (Ziv's strategy).
//!    Contiguous runs of a channel go through a branch-free block kernel
//!    (`block_approx`, the same arithmetic), which the compiler vectorises (AVX2 + FMA where
//!    the CPU has them, chosen at run time); the exact path then takes the block's
//!    undecided elements.
//! 4. Per-channel outputs (`mean`, `var`, `dgamma`, `dbeta`) are built exactly and rounded by
//!    `spec`.
//!
//! Channels run in parallel (rayon); every value is exact or correctly rounded, so the result
//! cannot depend on the thread count.

pub mod acc;
pub mod bench;
pub mod cells;
pub mod dd;

use crate::error::{ConfError, Result};
use crate::formats::case::{
    parse_header, read_case_json, read_input, CaseHeader, Dtype, InputLimits,
};
use crate::formats::npy::{read_npy, write_npy, NpyData};
use crate::par::*;
use acc::{signed_parts, SuperAcc};
use bnconf_spec::exact::round::{f64_to_rational, round, round_rational, FloatFormat};
use bnconf_spec::exact::{fmt_rational, QSqrt, Rational};
use bnconf_spec::layout::Layout;
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Op, Problem, SpecError};
use dd::{dd_div_sqrt, dd_of_rational, DD};
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// An element type of cell data (exactly convertible to f64).
pub trait Cell: Copy + Send + Sync {
    /// Whether the type is f32 (whose exact sums take [`acc::F32Buckets`]).
    const IS_F32: bool;
    /// The value as f64 (exact).
    fn to_f64(self) -> f64;
    /// The bits of an f32 (`IS_F32` only).
    fn f32_bits(self) -> u32;
}
impl Cell for f32 {
    const IS_F32: bool = true;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        self.to_bits()
    }
}
impl Cell for f64 {
    const IS_F32: bool = false;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn f32_bits(self) -> u32 {
        unreachable!("f32_bits of an f64")
    }
}

/// A problem whose inputs are binary floats: cell inputs (`x`, `dy`) as f32 or f64 arrays in
/// the layout's order, per-channel inputs as f64 values (each exactly the input value).
#[derive(Clone, Debug)]
pub struct FastProblem {
    /// The op.
    pub op: Op,
    /// Layout and shape.
    pub geom: Geometry,
    /// `eps`, exact.
    pub eps: Rational,
    /// `x`.
    pub x: NpyData,
    /// `dy` (ops that take it).
    pub dy: Option<NpyData>,
    /// Per-channel inputs by name (`gamma`, `beta`, `mean`, ...), length C each.
    pub chan: BTreeMap<String, Vec<f64>>,
}

/// Outputs of the fast path: per output name (in [`Op::outputs`] order), the correctly
/// rounded f64 and f32 values.
#[derive(Clone, Debug)]
pub struct FastOutputs {
    /// `(name, f64 values, f32 values)`.
    pub outputs: Vec<(&'static str, Vec<f64>, Vec<f32>)>,
    /// How many elements needed the exact fallback.
    pub stats: FastStats,
}

/// Counters of a fast evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastStats {
    /// Cell outputs computed.
    pub elements: u64,
    /// Of those, computed by the exact path (near a rounding boundary, out of the
    /// double-double range, or an exact zero).
    pub fallbacks: u64,
}

fn promote(d: NpyData) -> NpyData {
    match d {
        NpyData::F32(v) => NpyData::F64(v.into_iter().map(|e| e as f64).collect()),
        d => d,
    }
}

impl FastProblem {
    /// Assemble a problem; checks names and lengths. Mixed f32/f64 cell inputs are stored as f64.
    pub fn new(
        op: Op,
        geom: Geometry,
        eps: Rational,
        mut cells: BTreeMap<String, NpyData>,
        chan: BTreeMap<String, Vec<f64>>,
    ) -> Result<FastProblem> {
        if !covers(op) {
            return Err(ConfError::field(
                "op",
                format!("the fast path does not cover `{}`", op.name()),
            ));
        }
        for &name in op.inputs() {
            let (got, want) = match Op::extent(name) {
                Extent::Cells => (cells.get(name).map(|d| d.len()), geom.len()),
                Extent::Channel | Extent::Shards => (chan.get(name).map(|d| d.len()), geom.c),
            };
            match got {
                None => {
                    return Err(ConfError::field(format!("inputs.{name}"), "missing"));
                }
                Some(n) if n != want => {
                    return Err(ConfError::field(
                        format!("inputs.{name}"),
                        format!("expected {want} values, got {n}"),
                    ))
                }
                _ => {}
            }
        }
        if eps.is_negative() {
            return Err(ConfError::field("eps", "must be >= 0"));
        }
        let mut x = cells.remove("x").expect("checked");
        let mut dy = cells.remove("dy");
        if let Some(d) = dy.take() {
            match (&x, &d) {
                (NpyData::F32(_), NpyData::F64(_)) | (NpyData::F64(_), NpyData::F32(_)) => {
                    x = promote(x);
                    dy = Some(promote(d));
                }
                _ => dy = Some(d),
            }
        }
        Ok(FastProblem {
            op,
            geom,
            eps,
            x,
            dy,
            chan,
        })
    }

    /// The same problem from an exact [`Problem`], if every input is a finite binary64 value
    /// (always the case for dtypes f64, f32, f16, bf16); cell data stored as f64.
    pub fn from_problem(p: &Problem) -> Option<FastProblem> {
        let mut cells = BTreeMap::new();
        let mut chan = BTreeMap::new();
        for &name in p.op.inputs() {
            let vals: Option<Vec<f64>> = p.inputs[name]
                .iter()
                .map(|v| v.as_rational().and_then(rational_to_f64_exact))
                .collect();
            let vals = vals?;
            match Op::extent(name) {
                Extent::Cells => {
                    cells.insert(name.to_string(), NpyData::F64(vals));
                }
                Extent::Channel | Extent::Shards => {
                    chan.insert(name.to_string(), vals);
                }
            }
        }
        FastProblem::new(p.op, p.geom.clone(), p.eps.clone(), cells, chan).ok()
    }
}

/// Whether the fast path computes `op`: the five normalising ops. The statistics ops
/// (`running_update`, `sync_stats`) have O(C·m) exact rational work on their own and go
/// through the exact path.
pub fn covers(op: Op) -> bool {
    !matches!(op, Op::RunningUpdate | Op::SyncStats)
}

/// `r` as an f64 if it is exactly one.
pub fn rational_to_f64_exact(r: &Rational) -> Option<f64> {
    let rd = round_rational(r, FloatFormat::F64);
    match rd.to_rational() {
        Some(v) if &v == r => Some(rd.to_f64()),
        _ => None,
    }
}

fn rat(x: f64) -> Rational {
    f64_to_rational(x).expect("finite input")
}

/// The exact value of a finite f64 (callers have refused NaN and infinities; those panic).
pub(crate) fn exact_f64(x: f64) -> QSqrt {
    QSqrt::rational(rat(x))
}

/// Exact per-channel constants: the cell output is
/// `P + cx_rat·(x − μ) + (gd_r·(dy − A) + cx_irr·(x − μ))/q · sqrt(q)`.
#[derive(Clone, Debug)]
struct ExactConst {
    q: Rational,
    p: Rational,
    gd_r: Rational,
    a: Rational,
    cx_rat: Rational,
    cx_irr: Rational,
    mu: Rational,
}

/// An affine form `(n0 + nx·x + nd·d)/den` of two binary floats with integer coefficients
/// over one denominator: evaluated exactly with one reduction (one gcd) per element.
#[derive(Clone, Debug)]
struct IntAffine {
    n0: BigInt,
    nx: BigInt,
    nd: BigInt,
    den: BigInt,
}

impl IntAffine {
    fn new(k0: &Rational, kx: &Rational, kd: &Rational) -> IntAffine {
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

    fn eval(&self, x: f64, d: f64) -> Rational {
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
struct ExactForms {
    a: IntAffine,
    b: IntAffine,
    unit: QSqrt,
}

impl ExactForms {
    fn new(c: &ExactConst) -> ExactForms {
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

    fn value(&self, x: f64, d: f64) -> QSqrt {
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
struct DdConst {
    p: DD,
    gd: DD,
    a: DD,
    cx: DD,
    mu: DD,
    p_abs: f64,
    gd_abs: f64,
    a_abs: f64,
    cx_abs: f64,
    mu_abs: f64,
    has_d: bool,
    /// Every constant within `[2^-900, 2^900]` (or zero): the double-double bounds apply.
    ok: bool,
}

#[derive(Clone, Debug)]
struct Chan {
    /// The constants (kept for the tests of `forms`).
    #[cfg_attr(not(test), allow(dead_code))]
    ex: ExactConst,
    /// `ex` as integer forms (what [`Chan::exact`] evaluates).
    forms: ExactForms,
    dd: DdConst,
    /// Per-channel outputs, exact.
    outs: Vec<QSqrt>,
}

/// 2^-95: the relative part of the per-element error bound.
const ERR_REL: f64 = 2.524354896707238e-29;
/// 2^-1000: the absolute part (covers underflow in the double-double operations).
const ERR_ABS: f64 = 9.332636185032189e-302; // 2^-1000

fn in_range(v: f64) -> bool {
    v == 0.0 || (v.abs() >= 1.2e-271 && v.abs() <= 8.4e270) // ~[2^-900, 2^900]
}

impl DdConst {
    fn new(e: &ExactConst, has_d: bool) -> DdConst {
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
    fn approx(&self, x: f64, d: f64) -> (DD, f64) {
        self.approx_by::<dd::Portable>(x, d)
    }

    /// [`DdConst::approx`] with the exact products formed by `P` (same result).
    #[inline(always)]
    fn approx_by<P: dd::Prod>(&self, x: f64, d: f64) -> (DD, f64) {
        if self.has_d {
            self.approx_with::<P, true>(x, d)
        } else {
            self.approx_with::<P, false>(x, d)
        }
    }

    /// [`DdConst::approx_by`] for an op with (`HAS_D`) or without a `dy` term.
    #[inline(always)]
    fn approx_with<P: dd::Prod, const HAS_D: bool>(&self, x: f64, d: f64) -> (DD, f64) {
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

impl Chan {
    /// The exact cell output at inputs `x`, `d` (the integer forms: one gcd per part).
    fn exact(&self, x: f64, d: f64) -> QSqrt {
        self.forms.value(x, d)
    }
}

impl ExactConst {
    /// The exact cell output by rational arithmetic (the reference [`ExactForms::value`] is
    /// tested against).
    #[cfg_attr(not(test), allow(dead_code))]
    fn value(&self, x: f64, d: f64) -> QSqrt {
        let t = rat(x) - &self.mu;
        let a = &self.p + &self.cx_rat * &t;
        let b = (&self.gd_r * (rat(d) - &self.a) + &self.cx_irr * &t) / &self.q;
        QSqrt::new(a, b, self.q.clone())
    }
}

/// The correctly rounded f64 of a value known to lie within `err` of `v`, if the
/// whole interval rounds to one float (and it is normal, not near overflow).
#[inline(always)]
pub fn decide_f64(v: DD, err: f64) -> Option<f64> {
    decides_f64(v, err).then_some(v.hi)
}

/// The correctly rounded f32 of a value known to lie within `err` of `v`, if the whole
/// interval rounds to one finite non-zero f32.
#[inline(always)]
pub fn decide_f32(v: DD, err: f64) -> Option<f32> {
    let (r, ok) = decides_f32(v, err);
    ok.then_some(r)
}

fn non_positive(c: usize, what: &'static str, q: &Rational) -> ConfError {
    ConfError::Spec(SpecError::NonPositiveVariance {
        channel: c,
        what,
        value: fmt_rational(q),
    })
}

/// The cells of channel `c`: `(start, len, stride)` runs.
fn for_each_run(g: &Geometry, c: usize, mut f: impl FnMut(usize, usize, usize)) {
    match g.layout {
        Layout::Rows | Layout::Flat | Layout::Chw => f(c * g.m, g.m, 1),
        Layout::Nchw => {
            for n in 0..g.n {
                f((n * g.c + c) * g.hw, g.hw, 1)
            }
        }
        Layout::Nhwc => f(c, g.m, g.c),
    }
}

#[derive(Default)]
struct Sums {
    s1: Rational,
    s2: Rational,
    sd: Rational,
    sdx: Rational,
}

fn channel_sums<T: Cell>(g: &Geometry, c: usize, x: &[T], dy: Option<&[T]>, want_x: bool) -> Sums {
    let (mut s1, mut s2, mut sd, mut sdx) = (
        SuperAcc::new(),
        SuperAcc::new(),
        SuperAcc::new(),
        SuperAcc::new(),
    );
    const PIECE: usize = 1 << 20;
    if T::IS_F32 {
        // Integer sums per exponent; runs are cut at PIECE values between flushes.
        let mut b = acc::F32Buckets::new();
        let mut held = 0usize;
        for_each_run(g, c, |start, len, stride| {
            for k0 in (0..len).step_by(PIECE) {
                let k1 = (k0 + PIECE).min(len);
                if held + (k1 - k0) > acc::F32_BUCKET_PIECE {
                    b.flush(&mut s1, &mut s2, &mut sd, &mut sdx);
                    held = 0;
                }
                held += k1 - k0;
                let idx = (k0..k1).map(|k| start + k * stride);
                match (want_x, dy) {
                    (true, None) => idx.for_each(|i| b.add_x(x[i].f32_bits())),
                    (true, Some(d)) => idx.for_each(|i| {
                        b.add_x(x[i].f32_bits());
                        b.add_dx(d[i].f32_bits(), x[i].f32_bits());
                    }),
                    (false, Some(d)) => {
                        idx.for_each(|i| b.add_dx(d[i].f32_bits(), x[i].f32_bits()))
                    }
                    (false, None) => {}
                }
            }
        });
        b.flush(&mut s1, &mut s2, &mut sd, &mut sdx);
    } else {
        for_each_run(g, c, |start, len, stride| {
            for k0 in (0..len).step_by(PIECE) {
                let k1 = (k0 + PIECE).min(len);
                let n = (k1 - k0) as u32;
                if want_x {
                    s1.reserve(n);
                    s2.reserve(n);
                }
                if dy.is_some() {
                    sd.reserve(n);
                    sdx.reserve(n);
                }
                for k in k0..k1 {
                    let i = start + k * stride;
                    let xv = x[i].to_f64();
                    if want_x {
                        s1.add_reserved(xv);
                        s2.add_product_reserved(xv, xv);
                    }
                    if let Some(d) = dy {
                        let dv = d[i].to_f64();
                        sd.add_reserved(dv);
                        sdx.add_product_reserved(dv, xv);
                    }
                }
            }
        });
    }
    Sums {
        s1: s1.to_rational(),
        s2: s2.to_rational(),
        sd: sd.to_rational(),
        sdx: sdx.to_rational(),
    }
}

fn channel_consts(p: &FastProblem, c: usize, s: &Sums) -> Result<Chan> {
    let m = Rational::from_integer(p.geom.m.into());
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
    let batch = || {
        let mu = &s.s1 / &m;
        let var = (&s.s2 * &m - &s.s1 * &s.s1) / (&m * &m);
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
                    let q = &var + eps;
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
            let q = &var + eps;
            positive(&q, "var + eps")?;
            let gamma = ch("gamma");
            let cov = &s.sdx - &mu * &s.sd; // Σ dy (x − μ)
            let b = &cov / (&m * &q);
            let dgamma = QSqrt::new(zero.clone(), &cov / &q, q.clone());
            let outs = vec![dgamma, QSqrt::rational(s.sd.clone())];
            let ex = ExactConst {
                p: zero.clone(),
                a: &s.sd / &m,
                cx_rat: zero,
                cx_irr: -(&gamma * &b),
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
        forms: ExactForms::new(&ex),
        ex,
        outs,
    })
}

/// Elements per parallel work item of the element pass.
const CHUNK: usize = 1 << 14;

/// A progress bar on a terminal for long golden runs (indicatif, with the `cli` feature).
struct Progress(#[cfg(feature = "cli")] indicatif::ProgressBar);

impl Progress {
    fn inc(&self, _n: u64) {
        #[cfg(feature = "cli")]
        self.0.inc(_n);
    }
    fn finish_and_clear(&self) {
        #[cfg(feature = "cli")]
        self.0.finish_and_clear();
    }
}

#[cfg(not(feature = "cli"))]
fn progress_bar(_len: u64, _show: bool) -> Progress {
    Progress()
}

#[cfg(feature = "cli")]
fn progress_bar(len: u64, show: bool) -> Progress {
    use std::io::IsTerminal;
    Progress(
        if show && len >= 1 << 20 && std::io::stderr().is_terminal() {
            let pb = indicatif::ProgressBar::new(len);
            pb.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {pos}/{len} elements ({eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            pb.set_message("bnconf golden");
            pb
        } else {
            indicatif::ProgressBar::hidden()
        },
    )
}

fn run<T: Cell>(
    p: &FastProblem,
    x: &[T],
    dy: Option<&[T]>,
    show: bool,
) -> Result<(FastOutputs, Vec<Chan>)> {
    let timer = Timer::new();
    let g = &p.geom;
    let want_x = matches!(p.op, Op::Forward | Op::Backward);
    let pb = progress_bar(
        (g.len() as u64) * if want_x || dy.is_some() { 2 } else { 1 },
        show,
    );
    // 1-2. Exact sums and constants, per channel in parallel; the first failing channel
    // (in channel order) reports, as the exact path does.
    let chans: Vec<Result<Chan>> = (0..g.c)
        .into_par_iter()
        .map(|c| {
            let s = if want_x || dy.is_some() {
                let s = channel_sums(g, c, x, dy, want_x);
                pb.inc(g.m as u64);
                s
            } else {
                Sums::default()
            };
            channel_consts(p, c, &s)
        })
        .collect();
    let chans: Vec<Chan> = chans.into_iter().collect::<Result<_>>()?;
    timer.lap("exact sums and per-channel constants");
    // 3. Cell outputs.
    let len = g.len();
    let mut o64 = vec![0f64; len];
    let mut o32 = vec![0f32; len];
    let fallbacks = AtomicU64::new(0);
    let inp = CellsIn {
        g,
        chans: &chans,
        x,
        dy,
    };
    o64.par_chunks_mut(CHUNK)
        .zip(o32.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(ci, (c64, c32))| {
            let fb = cells_chunk_best(&inp, ci * CHUNK, c64, c32);
            fallbacks.fetch_add(fb, Ordering::Relaxed);
            pb.inc(c64.len() as u64);
        });
    pb.finish_and_clear();
    timer.lap("elements (double-double + Ziv test)");
    // 4. Per-channel outputs.
    let names = p.op.outputs();
    let mut outputs = vec![(names[0], o64, o32)];
    for (k, &name) in names.iter().enumerate().skip(1) {
        let vals: Vec<&QSqrt> = chans.iter().map(|ch| &ch.outs[k - 1]).collect();
        let f64s = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F64).to_f64())
            .collect();
        let f32s = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F32).to_f64() as f32)
            .collect();
        outputs.push((name, f64s, f32s));
    }
    let out = FastOutputs {
        outputs,
        stats: FastStats {
            elements: len as u64,
            fallbacks: fallbacks.into_inner(),
        },
    };
    Ok((out, chans))
}

/// Elements per block of [`block_approx`].
const BLOCK: usize = 256;

/// The correctly rounded f64 and f32 of the cell at `(x, d)`: those `decide_*` found, the
/// others from the exact value.
#[cold]
fn fallback(ch: &Chan, x: f64, d: f64, r64: Option<f64>, r32: Option<f32>) -> (f64, f32) {
    let ex = ch.exact(x, d);
    (
        r64.unwrap_or_else(|| round(&ex, FloatFormat::F64).to_f64()),
        r32.unwrap_or_else(|| round(&ex, FloatFormat::F32).to_f64() as f32),
    )
}

/// Whether the whole interval `[v - err, v + err]` rounds to the f64 `v.hi`, which must then
/// be normal and within `[2^-1000, 2^1000]` (no branches, so that loops of it vectorise).
#[inline(always)]
fn decides_f64(v: DD, err: f64) -> bool {
    let a = v.hi.abs();
    let in_range = (a > 9.332636185032189e-302) & (a < 1.0715086071862673e301); // [2^-1000, 2^1000]
    let bits = a.to_bits();
    let frac = bits & ((1u64 << 52) - 1);
    let ulp = f64::from_bits(((bits >> 52).wrapping_sub(52)) << 52);
    let below = if frac == 0 { ulp * 0.5 } else { ulp };
    let half = below * (0.5 - 1.0 / 1099511627776.0); // (1/2)(1 - 2^-39)
    in_range & (v.lo.abs() + err < half)
}

/// `(r, ok)`: `r = f32(v.hi)` and whether the whole interval `[v - err, v + err]` rounds to
/// that finite non-zero f32 (no branches).
#[inline(always)]
fn decides_f32(v: DD, err: f64) -> (f32, bool) {
    let r = v.hi as f32;
    let finite = r.is_finite() & (r != 0.0) & err.is_finite() & v.lo.is_finite();
    let neg = v.hi < 0.0;
    let hs = if neg { -v.hi } else { v.hi };
    let ls = if neg { -v.lo } else { v.lo };
    let rb = r.abs().to_bits();
    let ef = rb >> 23;
    let frac = rb & 0x7f_ffff;
    let up = if ef == 0 {
        1.401298464324817e-45 // 2^-149
    } else {
        f64::from_bits((ef as u64 + 1023 - 127 - 23) << 52)
    };
    let down = if (ef > 1) & (frac == 0) { up * 0.5 } else { up };
    let ra = r.abs() as f64;
    let dh = hs - (ra + up * 0.5);
    let dl = hs - (ra - down * 0.5);
    let slack = 1.0 / 562949953421312.0; // 2^-49
    let err = err * (1.0 + slack);
    let ok = (dh + ls + err + slack * (dh.abs() + ls.abs()) < 0.0)
        & (dl + ls - err - slack * (dl.abs() + ls.abs()) > 0.0);
    (r, finite & ok)
}

/// One block of a contiguous run of a channel whose constants are in range: the
/// double-double value of every cell and the branch-free decisions (the same arithmetic as
/// [`DdConst::approx_by`], [`decide_f64`] and [`decide_f32`], so the same results, written so
/// that the compiler vectorises it). Writes `o64`, `o32` and `flags` (1 where both roundings
/// were decided); returns whether every cell was. `d` is read only when `HAS_D`.
#[inline(always)]
fn block_approx<T: Cell, P: dd::Prod, const HAS_D: bool>(
    k: &DdConst,
    x: &[T],
    d: &[T],
    o64: &mut [f64],
    o32: &mut [f32],
    flags: &mut [u8],
) -> bool {
    let n = o64.len();
    let (x, d, o32, flags) = (&x[..n], &d[..n], &mut o32[..n], &mut flags[..n]);
    let mut all = 1u8;
    for j in 0..n {
        let dv = if HAS_D { d[j].to_f64() } else { 0.0 };
        let (v, err) = k.approx_with::<P, HAS_D>(x[j].to_f64(), dv);
        let ok64 = decides_f64(v, err);
        let (r, ok32) = decides_f32(v, err);
        o64[j] = v.hi;
        o32[j] = r;
        let f = (ok64 & ok32) as u8;
        flags[j] = f;
        all &= f;
    }
    all == 1
}

/// What the element pass reads: geometry, per-channel constants, the cell inputs.
#[derive(Clone, Copy)]
struct CellsIn<'a, T> {
    g: &'a Geometry,
    chans: &'a [Chan],
    x: &'a [T],
    dy: Option<&'a [T]>,
}

/// The cell outputs `base .. base + c64.len()` (correctly rounded f64 and f32); returns how
/// many needed the exact fallback. Generic over how exact products are formed (`P`).
#[inline(always)]
fn cells_chunk<T: Cell, P: dd::Prod>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    let CellsIn { g, chans, x, dy } = *inp;
    let end = base + c64.len();
    let mut fb = 0u64;
    let mut i = base;
    while i < end {
        let (c, run_end) = match g.layout {
            Layout::Rows | Layout::Flat | Layout::Chw => {
                let c = i / g.m;
                (c, (c + 1) * g.m)
            }
            Layout::Nchw => {
                let b = i / g.hw;
                (b % g.c, (b + 1) * g.hw)
            }
            Layout::Nhwc => (i % g.c, i + 1),
        };
        let run_end = run_end.min(end);
        let ch = &chans[c];
        let k = &ch.dd;
        if k.ok && k.has_d == dy.is_some() && run_end - i >= 2 {
            // A contiguous run of one channel: the branch-free block kernel, then the
            // exact path for the elements it could not decide.
            let (xs, ds) = (&x[i..run_end], dy.map(|d| &d[i..run_end]));
            let (o64, o32) = (
                &mut c64[i - base..run_end - base],
                &mut c32[i - base..run_end - base],
            );
            let mut flags = [0u8; BLOCK];
            for (b, (o64, o32)) in o64.chunks_mut(BLOCK).zip(o32.chunks_mut(BLOCK)).enumerate() {
                let at = b * BLOCK;
                let n = o64.len();
                let xb = &xs[at..at + n];
                let f = &mut flags[..n];
                let all = match ds {
                    Some(d) => block_approx::<T, P, true>(k, xb, &d[at..at + n], o64, o32, f),
                    None => block_approx::<T, P, false>(k, xb, xb, o64, o32, f),
                };
                if all {
                    continue;
                }
                for (t, &f) in flags[..n].iter().enumerate() {
                    if f == 0 {
                        let xv = xb[t].to_f64();
                        let dv = ds.map_or(0.0, |d| d[at + t].to_f64());
                        let (v, err) = k.approx_by::<P>(xv, dv);
                        let (a, b) = fallback(ch, xv, dv, decide_f64(v, err), decide_f32(v, err));
                        fb += 1;
                        o64[t] = a;
                        o32[t] = b;
                    }
                }
            }
            i = run_end;
            continue;
        }
        for j in i..run_end {
            let xv = x[j].to_f64();
            let dv = dy.map_or(0.0, |d| d[j].to_f64());
            let (r64, r32) = if k.ok {
                let (v, err) = k.approx_by::<P>(xv, dv);
                (decide_f64(v, err), decide_f32(v, err))
            } else {
                (None, None)
            };
            let (r64, r32) = match (r64, r32) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    fb += 1;
                    fallback(ch, xv, dv, r64, r32)
                }
            };
            c64[j - base] = r64;
            c32[j - base] = r32;
        }
        i = run_end;
    }
    fb
}

/// [`cells_chunk`] compiled for CPUs with FMA: the exact products of the double-double
/// arithmetic take one `vfmadd` instead of Veltkamp splitting (bit-identical results).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn cells_chunk_fma<T: Cell>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    cells_chunk::<T, dd::Fused>(inp, base, c64, c32)
}

/// [`cells_chunk`] with FMA where the CPU has it (checked at run time), else portable.
/// `BNCONF_NO_FMA` set: always portable (for comparing the two).
fn cells_chunk_best<T: Cell>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if use_fma() {
        // SAFETY: the CPU supports FMA (use_fma checked it at run time).
        return unsafe { cells_chunk_fma(inp, base, c64, c32) };
    }
    cells_chunk::<T, dd::Portable>(inp, base, c64, c32)
}

/// Whether [`cells_chunk_best`] takes the FMA path (decided once per process).
#[cfg(target_arch = "x86_64")]
fn use_fma() -> bool {
    static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FMA.get_or_init(|| {
        std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::env::var_os("BNCONF_NO_FMA").is_none()
    })
}

/// Evaluate a problem: correctly rounded f64 and f32 outputs, identical to the exact path.
/// `progress` shows a bar on stderr for large problems when stderr is a terminal.
pub fn compute(p: &FastProblem, progress: bool) -> Result<FastOutputs> {
    compute_chans(p, progress).map(|(out, _)| out)
}

/// [`compute`], also returning the problem as [`cells::FastCells`] (its per-channel constants
/// computed once, for the exact value of any element).
pub fn compute_cells(p: &FastProblem) -> Result<(FastOutputs, cells::FastCells)> {
    let (out, chans) = compute_chans(p, false)?;
    Ok((out, cells::FastCells::with_chans(p, chans)))
}

fn compute_chans(p: &FastProblem, progress: bool) -> Result<(FastOutputs, Vec<Chan>)> {
    match (&p.x, &p.dy) {
        (NpyData::F32(x), None) => run::<f32>(p, x, None, progress),
        (NpyData::F64(x), None) => run::<f64>(p, x, None, progress),
        (NpyData::F32(x), Some(NpyData::F32(d))) => run::<f32>(p, x, Some(d), progress),
        (NpyData::F64(x), Some(NpyData::F64(d))) => run::<f64>(p, x, Some(d), progress),
        (x, Some(d)) => {
            let (x, d) = (promote(x.clone()), promote(d.clone()));
            match (&x, &d) {
                (NpyData::F64(x), NpyData::F64(d)) => run::<f64>(p, x, Some(d), progress),
                _ => Err(ConfError::field("inputs", "f16/u16 npy not supported here")),
            }
        }
        (NpyData::F16(_) | NpyData::U16(_), None) => Err(ConfError::field(
            "inputs.x",
            "f16/u16 npy not supported here",
        )),
    }
}

/// The index of the first infinite or NaN value (blocks without one are scanned without a
/// branch per value).
fn first_non_finite<T: Cell>(v: &[T]) -> Option<usize> {
    const B: usize = 1024;
    let b = v
        .chunks(B)
        .position(|c| !c.iter().fold(true, |ok, e| ok & e.to_f64().is_finite()))?;
    let i = v[b * B..].iter().position(|e| !e.to_f64().is_finite())?;
    Some(b * B + i)
}

/// npy data converted to the case dtype (correct rounding; overflow and non-finite values
/// are refused with the exact path's messages).
fn npy_to_dtype(field: &str, data: NpyData, dtype: Dtype) -> Result<NpyData> {
    let bad = |i: usize, x: f64| {
        ConfError::field(format!("{field}[{i}]"), format!("non-finite value {x}"))
    };
    let check = |v: &[f64]| -> Result<()> {
        match first_non_finite(v) {
            Some(i) => Err(bad(i, v[i])),
            None => Ok(()),
        }
    };
    match data {
        NpyData::F32(v) => {
            if let Some(i) = first_non_finite(&v) {
                return Err(bad(i, v[i] as f64));
            }
            Ok(NpyData::F32(v))
        }
        NpyData::F64(v) => {
            check(&v)?;
            if dtype == Dtype::Float(FloatFormat::F32) {
                let mut out = Vec::with_capacity(v.len());
                for (i, &e) in v.iter().enumerate() {
                    let r = e as f32;
                    if !r.is_finite() {
                        return Err(ConfError::field(
                            format!("{field}[{i}]"),
                            "overflows f32 (rounds to infinity)",
                        ));
                    }
                    out.push(r);
                }
                Ok(NpyData::F32(out))
            } else {
                Ok(NpyData::F64(v))
            }
        }
        NpyData::F16(_) | NpyData::U16(_) => {
            Err(ConfError::field(field, "f16/u16 npy not supported here"))
        }
    }
}

/// Read a case file for the fast path. `Ok(None)` when the fast path does not apply (dtype
/// f16/bf16, exact values that are not binary64, a malformed inputs object — the exact path
/// then reads the case and reports).
pub fn read_fast_case(path: &Path, lim: &InputLimits) -> Result<Option<(CaseHeader, FastProblem)>> {
    let v = read_case_json(path, lim)?;
    let h = parse_header(&v, lim)?;
    if !matches!(
        h.dtype,
        Dtype::Exact | Dtype::Float(FloatFormat::F64) | Dtype::Float(FloatFormat::F32)
    ) || h.param_dtype != h.dtype
        || !covers(h.op)
    {
        return Ok(None);
    }
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let inputs_o = match v.get("inputs") {
        Some(Value::Object(o)) => o,
        _ => return Ok(None),
    };
    if inputs_o
        .keys()
        .any(|k| !h.op.inputs().contains(&k.as_str()))
    {
        return Ok(None);
    }
    let g = &h.geom;
    let mut cells = BTreeMap::new();
    let mut chan = BTreeMap::new();
    for &name in h.op.inputs() {
        let field = format!("inputs.{name}");
        let Some(val) = inputs_o.get(name) else {
            return Ok(None);
        };
        let (want_shape, want_len) = match Op::extent(name) {
            Extent::Cells => (g.shape.clone(), g.len()),
            Extent::Channel | Extent::Shards => (vec![g.c], g.c),
        };
        let data = match val {
            Value::Object(o) if o.contains_key("npy") => {
                let Some(rel) = o["npy"].as_str() else {
                    return Ok(None);
                };
                let p = base.join(rel);
                let (shape, data) = read_npy(&p, lim.max_elems)
                    .map_err(|e| ConfError::field(format!("{field}.npy"), e.to_string()))?;
                if shape.iter().product::<usize>() != want_len
                    || (shape != want_shape && shape != [want_len])
                {
                    return Err(ConfError::field(
                        format!("{field}.npy"),
                        format!("{}: shape {shape:?}, expected {want_shape:?}", p.display()),
                    ));
                }
                npy_to_dtype(&field, data, h.dtype)?
            }
            Value::Array(_) => {
                let vals = read_input(
                    &field,
                    val,
                    &base,
                    &want_shape,
                    want_len,
                    h.dtype,
                    name == "mean_dy_xhat",
                    lim,
                )?;
                let f: Option<Vec<f64>> = vals
                    .iter()
                    .map(|v| v.as_rational().and_then(rational_to_f64_exact))
                    .collect();
                match f {
                    Some(f) => NpyData::F64(f),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        match Op::extent(name) {
            Extent::Cells => {
                cells.insert(name.to_string(), data);
            }
            Extent::Channel | Extent::Shards => {
                let v: Vec<f64> = (0..data.len()).map(|i| data.get(i)).collect();
                chan.insert(name.to_string(), v);
            }
        }
    }
    let fp = FastProblem::new(h.op, h.geom.clone(), h.eps.clone(), cells, chan)?;
    Ok(Some((h, fp)))
}

/// The case object of an `--out-dir` golden.json (as [`crate::formats::golden::write_out_dir`] writes
/// it: inputs replaced by their names).
pub fn case_header_json(h: &CaseHeader) -> Value {
    let mut o = Map::new();
    o.insert("format".into(), json!("bnconf-case/1"));
    o.insert("id".into(), json!(h.id));
    o.insert("op".into(), json!(h.op.name()));
    o.insert("layout".into(), json!(h.geom.layout.name()));
    o.insert("shape".into(), json!(h.geom.shape));
    o.insert("dtype".into(), json!(h.dtype.name()));
    o.insert("eps".into(), json!(h.eps_text));
    o.insert("eps_exact".into(), json!(fmt_rational(&h.eps)));
    for (k, v) in &h.extra {
        o.insert(k.clone(), v.clone());
    }
    o.insert("inputs".into(), json!(h.op.inputs()));
    Value::Object(o)
}

/// Write `DIR/<output>.f64.npy`, `DIR/<output>.f32.npy` and `DIR/golden.json`, exactly as
/// [`crate::formats::golden::write_out_dir`] does, from fast outputs.
pub fn write_out_dir(h: &CaseHeader, out: FastOutputs, dir: &Path) -> Result<FastStats> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut outs = Map::new();
    for (name, f64s, f32s) in out.outputs {
        let shape = match Op::extent(name) {
            Extent::Cells => h.geom.shape.clone(),
            Extent::Channel | Extent::Shards => vec![h.geom.c],
        };
        let (p64, p32) = (format!("{name}.f64.npy"), format!("{name}.f32.npy"));
        // The two files of an output are written concurrently (each atomically).
        let (r64, r32) = crate::par::join(
            || write_npy(&dir.join(&p64), &shape, &NpyData::F64(f64s)),
            || write_npy(&dir.join(&p32), &shape, &NpyData::F32(f32s)),
        );
        r64?;
        r32?;
        outs.insert(
            name.to_string(),
            json!({"shape": shape, "f64": p64, "f32": p32}),
        );
    }
    let doc = json!({"format": "bnconf-golden/1", "case": case_header_json(h), "outputs": Value::Object(outs), "provenance": crate::formats::golden::provenance()});
    let text = serde_json::to_string_pretty(&doc).expect("serializable");
    crate::formats::atomic::write_bytes(&dir.join("golden.json"), format!("{text}\n").as_bytes())?;
    Ok(out.stats)
}

/// `bnconf golden CASE --out-dir DIR` by the fast path. `Ok(None)` when the fast path does
/// not apply (the caller then takes the exact path).
pub fn golden_out_dir(
    case: &Path,
    lim: &InputLimits,
    dir: &Path,
    progress: bool,
) -> Result<Option<FastStats>> {
    let t = Timer::new();
    let Some((h, fp)) = read_fast_case(case, lim)? else {
        return Ok(None);
    };
    t.lap("read case and npy inputs");
    let out = compute(&fp, progress)?;
    drop(fp);
    t.lap("compute");
    let stats = write_out_dir(&h, out, dir)?;
    t.lap("write npy outputs and golden.json");
    Ok(Some(stats))
}

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

/// `bnconf golden CASE` (a JSON golden, to stdout or `-o`) by the fast path: the same
/// document, byte for byte, as [`crate::formats::golden::golden_json`] of the exact path —
/// the exact strings from the per-channel constants ([`cells::FastCells::exact`]: a few
/// rational operations per element instead of the op's), the f64/f32 hex strings from
/// [`compute`]'s correct roundings. `Ok(None)` where it does not apply (dtype f16/bf16,
/// values that are not binary64, an op it does not cover, disabled by `--exact-path`) or
/// where the case is refused (the exact path then reports, with its own message).
pub fn golden_json_fast(
    path: &Path,
    lim: &InputLimits,
    formats: &[FloatFormat],
    args: &FastArgs,
) -> Result<Option<Value>> {
    if args.exact_path {
        return Ok(None);
    }
    with_threads(args.threads, || -> Result<Option<Value>> {
        let Some((_, fp)) = read_fast_case(path, lim)? else {
            return Ok(None);
        };
        // The echo, and every check of the case file, as the exact path reads it.
        let case = crate::formats::case::read_case_file(path, lim)?;
        Ok(golden_json_of(&case, &fp, formats))
    })?
}

/// The JSON golden of `case` (whose inputs `fp` holds as floats) by the fast path, as
/// [`golden_json_fast`]; `None` where the fast path refuses the case (the exact path then
/// reports).
pub fn golden_json_of(
    case: &crate::formats::case::Case,
    fp: &FastProblem,
    formats: &[FloatFormat],
) -> Option<Value> {
    let (out, fc) = compute_cells(fp).ok()?;
    let chan = fc.channel_outputs();
    let cell_name = fp.op.outputs()[0];
    let doc = crate::formats::golden::golden_json_with(case, formats, |name, f| {
        let k = fp
            .op
            .outputs()
            .iter()
            .position(|&n| n == name)
            .expect("an output");
        let (_, f64s, f32s) = out
            .outputs
            .iter()
            .find(|o| o.0 == name)
            .expect("compute gives every output");
        match f {
            None if name == cell_name => (0..fc.len())
                .into_par_iter()
                .map(|j| fc.exact(j).to_string())
                .collect(),
            None => chan[k - 1].iter().map(|v| v.to_string()).collect(),
            Some(FloatFormat::F64) => f64s
                .par_iter()
                .map(|&v| rounded_of(v, FloatFormat::F64).to_hex())
                .collect(),
            Some(FloatFormat::F32) => f32s
                .par_iter()
                .map(|&v| rounded_of(v as f64, FloatFormat::F32).to_hex())
                .collect(),
            // f16, bf16: from the correct f64 rounding (exact unless it is a midpoint).
            Some(f) if name == cell_name => f64s
                .par_iter()
                .enumerate()
                .map(|(j, &r)| match round_via_f64(r, f) {
                    Some(v) => v.to_hex(),
                    None => round(&fc.exact(j), f).to_hex(),
                })
                .collect(),
            Some(f) => chan[k - 1].iter().map(|v| round(v, f).to_hex()).collect(),
        }
    });
    Some(doc)
}

/// Phase timings on stderr when `BNCONF_TIMING` is set (for performance work).
struct Timer(Option<std::cell::Cell<std::time::Instant>>);

impl Timer {
    fn new() -> Timer {
        Timer(
            std::env::var_os("BNCONF_TIMING")
                .map(|_| std::cell::Cell::new(std::time::Instant::now())),
        )
    }
    fn lap(&self, what: &str) {
        if let Some(t) = &self.0 {
            eprintln!(
                "bnconf: {what}: {:.1} ms",
                t.get().elapsed().as_secs_f64() * 1e3
            );
            t.set(std::time::Instant::now());
        }
    }
}

/// CLI options of the fast path (`bnconf golden ... --out-dir DIR`).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FastArgs {
    /// Use the per-element exact path even where the fast path applies (slow; for checking).
    #[cfg_attr(feature = "cli", arg(long))]
    pub exact_path: bool,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores). Results do not
    /// depend on it.
    #[cfg_attr(feature = "cli", arg(long))]
    pub threads: Option<usize>,
}

pub use crate::par::with_threads;

/// The `--out-dir` fast path of `bnconf golden`: `Ok(true)` when done, `Ok(false)` when the
/// caller must take the exact path (disabled, or the case is not one of binary floats).
pub fn golden_cli(case: &Path, lim: &InputLimits, dir: &Path, args: &FastArgs) -> Result<bool> {
    if args.exact_path {
        return Ok(false);
    }
    let done = with_threads(args.threads, || golden_out_dir(case, lim, dir, true))??;
    Ok(done.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `first_non_finite` finds the first NaN or infinity wherever it lies (block edges
    /// included), and none in finite data.
    #[test]
    fn first_non_finite_finds_the_first() {
        let n = 5000;
        assert_eq!(first_non_finite(&vec![1.0f32; n]), None);
        assert_eq!(first_non_finite::<f64>(&[]), None);
        for at in [0, 1, 1023, 1024, 1025, 4999] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut v = vec![f32::MAX; n];
                v[at] = bad;
                if at + 7 < n {
                    v[at + 7] = f32::NAN;
                }
                assert_eq!(first_non_finite(&v), Some(at), "{bad} at {at}");
                let w: Vec<f64> = v.iter().map(|&e| e as f64).collect();
                assert_eq!(first_non_finite(&w), Some(at), "{bad} at {at} (f64)");
            }
        }
    }

    /// The f32 exponent buckets give the superaccumulator's sums on channels of more than
    /// 2^20 values (so the buckets are flushed mid-channel, between runs and inside a run),
    /// with negative, subnormal, huge and zero values.
    #[test]
    fn f32_bucket_sums_equal_the_superaccumulator() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for shape in [vec![1, 1 << 20 | 3], vec![300, 2, 60, 60]] {
            let layout = if shape.len() == 2 {
                Layout::Rows
            } else {
                Layout::Nchw
            };
            let g = Geometry::new(layout, &shape, 1 << 24).unwrap();
            let mut val = || {
                let r = next();
                match r % 8 {
                    0 => f32::from_bits((r >> 8) as u32 & 0x807f_ffff), // subnormal or zero
                    1 => f32::from_bits(((r >> 8) as u32 & 0x80ff_ffff) | 0x7e00_0000), // huge
                    _ => f32::from_bits((r >> 8) as u32 & 0x8fff_ffff | 0x3000_0000),
                }
            };
            let x: Vec<f32> = (0..g.len()).map(|_| val()).collect();
            let d: Vec<f32> = (0..g.len()).map(|_| val()).collect();
            let (x64, d64): (Vec<f64>, Vec<f64>) = x
                .iter()
                .zip(&d)
                .map(|(&a, &b)| (a as f64, b as f64))
                .unzip();
            for c in 0..g.c {
                for (want_x, dy) in [(true, None), (true, Some(&d[..])), (false, Some(&d[..]))] {
                    let a = channel_sums::<f32>(&g, c, &x, dy, want_x);
                    let d64 = dy.map(|_| &d64[..]);
                    let b = channel_sums::<f64>(&g, c, &x64, d64, want_x);
                    assert_eq!((a.s1, a.s2), (b.s1, b.s2), "{shape:?} channel {c}");
                    assert_eq!((a.sd, a.sdx), (b.sd, b.sdx), "{shape:?} channel {c}");
                }
            }
        }
    }

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
            let Ok(fc) = cells::FastCells::new(&fp) else {
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
}
