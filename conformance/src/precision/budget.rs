//! Error budgets: when does a float result conform? (docs/DESIGN.md §3)
//!
//! An output element `i` computed in a dtype with unit roundoff `u` conforms when
//!
//! ```text
//! |computed_i - exact_i|  <=  k(m) * u * (cond_i + mag_i + u * mag2_i)
//! ```
//!
//! i.e. when [`ratio`] (`|computed - exact| / (u * budget)`) is at most [`k_allowance`]`(m)`.
//!
//! * **`cond_i`** `= Σ_j |∂out_i/∂in_j| * |in_j|` over every input `j` of the element's channel
//!   (`x`, `dy`, `gamma`, `beta`, `mean`, `var`, `m2`, `mean_dy`, `mean_dy_xhat`; `eps` is exact):
//!   the componentwise condition number, i.e. what rounding the inputs alone can do. It is
//!   computed either exactly from the exact Jacobian ([`Method::Exact`], dual numbers over
//!   Q(sqrt(q)), O(m²) per channel) or as a closed-form upper bound ([`Method::Bound`], O(m)).
//! * **`mag_i`**: the magnitude of the summands of the canonical (two-pass, textbook) formula,
//!   including the propagated rounding of the statistics a kernel has to compute. A stable
//!   algorithm errs by O(u) times this even where the result cancels. It always bounds
//!   `|exact_i|`, so a correctly rounded result has ratio ≤ 1 (normal range).
//! * **`mag2_i`**: a second-order magnitude: the computed mean's error `δ` enters the
//!   two-pass variance as `δ²`, which no first-order term covers (a constant channel has
//!   `var = 0`, `cond = mag = 0`, yet `mean((x - fl(mean))²) = δ² > 0`), and through
//!   `q = var + eps` every output that depends on `r` (forward `y`, backward `dx` and
//!   `dgamma`, running_update's `new_var`). One allowance for `δ` everywhere:
//!   `δ̄ = 2·k(m)·u·X1`, the error the mean's own gate accepts (forward `mean` has
//!   `cond = mag = X1`), entering an output `o` as `|∂o/∂q|·δ̄²` — `mag2 = 4·k(m)·X1²·|∂o/∂q|`,
//!   since the gate multiplies it by `k·u²` ([`mean_sq`]). A smaller `δ̄` would fail, through
//!   its variance, a kernel whose mean passes: a sequential f32 sum of 96 equal values errs by
//!   `20.7·u·X1` (ratio 10.4 of `k(96) = 17.2` on the mean), and `(20.7)²/17.2 = 25 > 17.2`.
//! * **Outputs computed without a reduction** (`eval` and `sync_forward` `y`, `sync_backward`
//!   `dx`: their statistics are handed in) are gated at `k(1) = 4`, not `k(m)`: nothing is
//!   summed, so no allowance for summation order applies ([`is_elementwise`]; their budgets
//!   are scaled by `k(1)/k(m)` so that one gate `k(m)` per case judges them).
//!
//! ## The model, per output (one channel; `m` cells; `r = (var+eps)^(-1/2)`, `d = x - mean`,
//! `h = xhat = d*r`, `X1 = mean|x|`, `A = mean(dy)`, `B = mean(dy*h)`)
//!
//! `mag` (the rounding of the canonical formula):
//!
//! | output | `mag` |
//! |---|---|
//! | forward `y` | `|g|*r*X1`, plus `mag2 = 4k(m)*X1² * |g*h_i|*r²/2` |
//! | forward `mean` | `X1` |
//! | forward `var` | `mean(d²)`, plus `mag2 = 4k(m)*X1²` |
//! | backward `dx` | `|g|*r*(|dy_i| + mean|dy| + |h_i|*mean|dy*h| + X1*r*(mean|dy*h| + |h_i|*mean|dy|))`, plus `mag2 = 4k(m)*X1² * |g|*r³*((|dy_i| + |A| + 3|h_i*B|)/2 + |A|)` |
//! | backward `dgamma` | `Σ|dy*h| + X1*r*Σ|dy|`, plus `mag2 = 4k(m)*X1² * r²/2 * Σ|dy*h|` |
//! | `dbeta` | `Σ|dy|` |
//! | eval `y` | `|g*h_i| + |b|` |
//! | sync_forward `y` | `|g*h_i| + |b| + |g*h_i|*r²*(|m2| + mean²)/2` |
//! | sync_backward `dx` | `|g|*r*(|dy_i| + |A| + |h_i*K|) + |g|*r³*(|dy_i| + |A| + 2|h_i*K|)*(|m2| + mean²)/2` |
//! | sync_backward `dgamma` | `Σ|dy*h| * (1 + r²*(|m2| + mean²)/2)` |
//! | running_update `new_mean` | `w_old*|rm| + w_batch*X1` |
//! | running_update `new_var` | `w_old*|rv| + w_batch*c*mean(d²)`, plus `mag2 = w_batch*c*4k(m)*X1²` |
//! | sync_stats `mean`, `m2` | `Σ w_r*|mean_r|`, `Σ w_r*|m2_r|` (`w_r = n_r/N`) |
//! | sync_stats `var` | `Σ w_r*|m2_r| + Σ w_r*mean_r² + 2*|mean|*Σ w_r*|mean_r| + mean²` |
//!
//! (`running_update`: `a` = momentum, `(w_old, w_batch)` = `(1-a, a)` for PyTorch and
//! `(a, 1-a)` for ONNX, `c` = `m/(m-1)` for PyTorch (1 at m = 1) and 1 for ONNX; the
//! momentum is perturbed like an input, counts of `sync_stats` are not: they are exact
//! integers. Their `cond` bounds are in [`bound_running_update`] and [`bound_sync_stats`].)
//!
//! Reasons: a kernel computes the mean with an error `|δ| <= 2*k*u*X1` (a sum of `|x|`, not of `x`:
//! DESIGN's `|mean|` is replaced by `X1 >= |mean|`, which is the summation's error bound and
//! equals `|mean|` on the large-mean data where the term matters). To first order `δ` shifts
//! every `d` by `-δ`: `y` by `g*r*δ`, `dx` by `g*r²*δ*(B + h_i*A)`, `dgamma` by `r*δ*Σdy`; the
//! variance only by `δ²` (as `Σd = 0`): `mag2`. The `δ²` moves `q` up, so `r` down by at most
//! `r*δ²*r²/2` (`1 - (1+t)^(-1/2) <= t/2`): `y` by `|g*h_i|*r²/2*δ²`, `dgamma` by
//! `r²/2*|Σdy*h|*δ²`, and `dx` by `g*r³*δ²*((|dy_i - A| + 3|h_i*B|)/2 + |A|)` (the last `|A|`:
//! the product of the two shifted factors of `h_i*B`). Forward `y`'s `mag` is the `δ` term
//! alone: the rounding of `g*h + b` (and of `x - mean`, relative to `|x - mean|`) is a
//! perturbation of `g`, `b` by a few `u`, already in `cond` (`|g*h_i| + |b|`, exact and
//! bound alike), and counting it in `mag` too made the budget about 1.4× wider than any
//! stable algorithm needs (bf16: a normalisation 25 % off then passed). For the sync ops the kernel forms
//! `var = m2 - mean²` with an error `u*(|m2| + mean²)`, propagated by `∂out/∂var` (`cond` alone
//! does not cover it: the `mean` entry of the Jacobian can cancel). The handed-in statistics of
//! `eval`/`sync_*` are not recomputed, so they add no mean term. A kernel in the fused form
//! `y = x*scale + shift` errs by `u*|g|*r*(|x_i| + |mean|) + u*|b|`, which `cond` covers.
//!
//! `cond` upper bounds ([`Method::Bound`]) from the Jacobians (`z_j = dy_j - A - h_j*B`,
//! `w_i = dy_i - A - h_i*K`, `v_i = dy_i - A - 2*h_i*K`, `K = mean_dy_xhat`, `μ = mean`):
//!
//! * forward `y`: `∂y_i/∂x_j = g*r*(δ_ij - (1 + h_i*h_j)/m)`, so
//!   `cond <= |g|*r*(|x_i| + X1 + |h_i|*mean|h*x|) + |g*h_i| + |b|`;
//!   `mean`: `X1` (exact); `var`: `∂var/∂x_j = 2*d_j/m`, so `2*mean|d*x|` (exact).
//! * backward `dx`: `∂dx_i/∂dy_j = g*r*(δ_ij - (1 + h_i*h_j)/m)`,
//!   `∂dx_i/∂x_j = -(g*r²/m)*(h_j*z_i + h_i*z_j + B*(m*δ_ij - 1 - h_i*h_j))`, `∂dx_i/∂g = r*z_i`:
//!   `cond <= |g|*r*(|dy_i| + mean|dy| + |h_i|*mean|h*dy|) + |g|*r*|z_i|
//!   + |g|*r²*(|z_i|*mean|h*x| + |h_i|*mean|z*x| + |B|*(|x_i| + X1 + |h_i|*mean|h*x|))`;
//!   `dgamma`: `∂/∂dy_j = h_j`, `∂/∂x_j = r*z_j`: `Σ|h*dy| + r*Σ|z*x|` (exact); `dbeta`: `Σ|dy|`.
//! * eval `y` (exact): `|g|*r*(|x_i| + |μ|) + |g*h_i|*(1 + r²*|var|/2) + |b|`.
//! * sync_forward `y`: `∂y_i/∂μ = g*r*(h_i*r*μ - 1)`, `∂y_i/∂m2 = -g*h_i*r²/2`:
//!   `cond <= |g|*r*|x_i| + |g|*r*|μ|*(1 + |h_i|*r*|μ|) + |g*h_i| + |b| + |g*h_i|*r²*|m2|/2`.
//! * sync_backward `dx`: `∂/∂dy_i = g*r`, `∂/∂x_i = -g*r²*K`, `∂/∂g = r*w_i`, `∂/∂A = -g*r`,
//!   `∂/∂K = -g*r*h_i`, `∂/∂μ = g*r²*(r*μ*w_i + K*(1 - h_i*r*μ))`, `∂/∂m2 = -(g*r³/2)*v_i`:
//!   the sum of their magnitudes, the `μ` entry by the triangle inequality:
//!   `cond <= |g|*r*(|dy_i| + |w_i| + |A| + |h_i*K|) + |g|*r²*|K|*|x_i|
//!   + |g|*r²*(r*|μ|*|w_i| + |K|*(1 + |h_i|*r*|μ|))*|μ| + |g|*r³*|v_i|*|m2|/2`;
//!   `dgamma` (exact): `Σ|h*dy| + r*Σ|dy*x| + r*|μ|*|r*μ*Σdy*h - Σdy| + r²*|Σdy*h|*|m2|/2`.
//!
//! The bounds are evaluated in f64 midpoint-radius arithmetic (every signed quantity carries a
//! rigorous error radius, so cancellation in `d`, `z`, `w` cannot make a bound too small), from
//! f64 approximations of the exact inputs, and multiplied by `1 + 2^-30` for the rounding of
//! the sums of non-negative terms. `q = var + eps` is exact for `eval`/`sync_*`, and for
//! `forward`/`backward` taken exactly whenever its f64 enclosure is not tight. Inputs outside
//! f64's range give infinite budgets. `mag` is always evaluated this way (for both methods).

use crate::par::*;
use bnconf_spec::exact::round::{f64_to_rational, round, round_difference, FloatFormat};
use bnconf_spec::exact::{QSqrt, Rational};
use bnconf_spec::num::Dual;
use bnconf_spec::op::{channel_op, ChannelIn, Extent, Op, Problem};
use bnconf_spec::vjp::jacobian;
use bnconf_spec::SpecError;
use num_traits::ToPrimitive;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The budget of one output element: the check is
/// `|computed - exact| <= k * u * (cond + mag + u*mag2)` (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ElementBudget {
    /// Componentwise condition number `Σ_j |∂out/∂in_j| * |in_j|` (exact, rounded up, or an
    /// upper bound).
    pub cond: f64,
    /// Magnitude of the canonical formula's summands (first order in u).
    pub mag: f64,
    /// Second-order magnitude: contributes `u * mag2` to the magnitude (forward `var` only).
    pub mag2: f64,
}

impl ElementBudget {
    /// The magnitude to pass to [`ratio`] in a dtype with unit roundoff `u`:
    /// `mag + u*mag2 + underflow(u)/u` (the underflow term, [`underflow`], in units of `u`).
    pub fn mag_at(&self, u: f64) -> f64 {
        self.mag_given(u, underflow(u) / u)
    }
    /// [`ElementBudget::mag_at`] with `und = underflow(u)/u` given (formed once by a caller
    /// of many elements).
    #[inline(always)]
    fn mag_given(&self, u: f64, und: f64) -> f64 {
        self.mag + u * self.mag2 + und
    }
    /// `cond + mag + u*mag2 + underflow(u)/u`: the budget in units of `u`.
    pub fn total(&self, u: f64) -> f64 {
        self.total_given(u, underflow(u) / u)
    }
    /// [`ElementBudget::total`] with `und = underflow(u)/u` given.
    #[inline(always)]
    pub fn total_given(&self, u: f64, und: f64) -> f64 {
        self.cond + self.mag_given(u, und)
    }
    /// [`ratio`] of a computed value against this budget.
    pub fn ratio(&self, computed: f64, exact: &QSqrt, u: f64) -> f64 {
        ratio(computed, exact, u, self.cond, self.mag_at(u))
    }
}

/// How `cond` is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Exact Jacobian by dual numbers over Q(sqrt(q)): O(m²) exact operations per channel.
    Exact,
    /// Closed-form upper bounds in f64 midpoint-radius arithmetic: O(m) per channel.
    Bound,
}

/// Largest channel size for which [`auto_method`] chooses [`Method::Exact`].
///
/// Measured (2 cores, 3 channels, backward): m = 8: 0.3 s, 16: 0.9 s, 32: 4 s, 64: 14 s; the
/// bounds are within a few percent of the exact values on most elements, so larger channels
/// use them.
pub const EXACT_MAX_M: usize = 16;

/// Largest number of elements (C·m) for which [`auto_method`] chooses [`Method::Exact`].
pub const EXACT_MAX_LEN: usize = 96;

/// [`Method::Exact`] when the channels have at most [`EXACT_MAX_M`] cells and the case at
/// most [`EXACT_MAX_LEN`] elements, else [`Method::Bound`] (validated ≥ exact by tests).
pub fn auto_method(problem: &Problem) -> Method {
    if problem.geom.m <= EXACT_MAX_M && problem.geom.len() <= EXACT_MAX_LEN {
        Method::Exact
    } else {
        Method::Bound
    }
}

/// Subnormal steps of the output dtype allowed on top of `u·(cond + mag)`, before `k`.
///
/// Why 2: a correctly rounded result in the subnormal range errs by up to half a subnormal
/// step (`tiny/2`), which `u·|exact|` does not cover there; a stable kernel's subnormal
/// intermediates add at most a few more half-steps (a subtraction whose result is subnormal is
/// exact; a product or quotient that underflows errs by `tiny/2` absolute, and the outputs
/// carry O(1) of them after the averaging reductions). With the gate `ratio ≤ k(m) ≥ 4`, a
/// correctly rounded subnormal result has ratio ≤ 1/4 from this term alone, and the total
/// absolute allowance `2·k·tiny` is far below any value a dtype resolves in its normal range.
pub const UNDERFLOW_STEPS: f64 = 2.0;

/// The absolute underflow term of the budget in the dtype whose unit roundoff is `u`:
/// `UNDERFLOW_STEPS · tiny`, `tiny` the dtype's smallest subnormal (f64 `2^-1074`, f32
/// `2^-149`, f16 `2^-24`, bf16 `2^-133`). A `u` that is no dtype's gets the f64 term.
///
/// (Called for every element judged: a table of constants, no power computed at run time;
/// tested equal to `UNDERFLOW_STEPS · min_subnormal(f)` for every format.)
pub fn underflow(u: f64) -> f64 {
    // (u, tiny) of f64, f32, f16, bf16
    const UT: [(f64, f64); 4] = [
        (pow2(-53), pow2(-1074)),
        (pow2(-24), pow2(-149)),
        (pow2(-11), pow2(-24)),
        (pow2(-8), pow2(-133)),
    ];
    let tiny = UT.iter().find(|t| t.0 == u).map_or(UT[0].1, |t| t.1);
    UNDERFLOW_STEPS * tiny
}

/// `2^e` for `-1074 <= e <= 1023`, at compile time.
const fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}

/// Smallest positive subnormal of a format: `2^(emin - p + 1)`.
pub fn min_subnormal(f: FloatFormat) -> f64 {
    // In two halves: at run time `powi(-1074)` is `1 / 2^1074 = 1 / inf = 0` (compiler-rt's
    // __powidf2); only constant folding got it right.
    let e = (f.emin() - f.precision() as i64 + 1) as i32;
    2f64.powi(e / 2) * 2f64.powi(e - e / 2)
}

/// Unit roundoff `u = 2^-p` of a dtype: f64 `2^-53`, f32 `2^-24`, f16 `2^-11`, bf16 `2^-8`.
pub fn unit_roundoff(format: FloatFormat) -> f64 {
    format.unit_roundoff()
}

/// The allowance `k(m) = 4 + 2*log2(m)` for reduction order: the checker gates on
/// `ratio <= k(m)`.
///
/// Why this size: the error of a sum of m terms is at most `~log2(m) * u * Σ|terms|` for
/// pairwise (tree) summation, the order numpy, Eigen-style blocked reductions and parallel
/// reductions use, and a kernel goes through a few such reductions plus O(1) roundings per
/// element; correct two-pass kernels measured below 1 unit on small cases (docs/DESIGN.md §3), while
/// the known defects (one-pass variance, eps twice, a 12-bit rsqrt, half-precision
/// accumulation) exceed by orders of magnitude more than any `k` here (k(1) = 4,
/// k(1024) = 24, k(2^20) = 44). A strictly sequential f32 sum over very large channels
/// (`(m-1)*u` worst case) can exceed `k(m)`; accumulating in a wider type avoids that.
pub fn k_allowance(m: usize) -> f64 {
    4.0 + 2.0 * (m.max(1) as f64).log2()
}

/// `|computed - exact| / (u * (cond + mag))`, the error in units of the budget.
///
/// The difference is exact (the computed float is a dyadic rational, subtracted exactly from
/// the exact value in Q(sqrt(q))) and then rounded to f64, so it is right for huge values and
/// tiny differences alike. A NaN or infinite `computed` (the exact value is always finite) has
/// ratio `inf`. With a zero budget (`cond + mag == 0`) the ratio is 0 when `computed` equals
/// the exact value and `inf` otherwise. An infinite budget gives 0.
///
/// For a dtype's correctly rounded exact value in its normal range the ratio is at most
/// `(ulp/2) / (u*mag) <= 1`, since `ulp/2 <= u*|exact|` and `mag >= |exact|`. In the
/// subnormal range the underflow term of [`ElementBudget::mag_at`] covers the half step
/// (callers pass `mag` with it included).
pub fn ratio(computed: f64, exact: &QSqrt, u: f64, cond: f64, mag: f64) -> f64 {
    let Some(c) = f64_to_rational(computed) else {
        return f64::INFINITY;
    };
    // exact − computed rounded once (`None`: zero); |round(e)| = round(|e|)
    let Some(diff) = round_difference(exact, &c, FloatFormat::F64) else {
        return 0.0;
    };
    let budget = cond + mag;
    if budget.is_nan() || budget <= 0.0 {
        return f64::INFINITY;
    }
    let err = diff.to_f64().abs();
    err / budget / u
}

/// Budgets of every output element of `problem`, keyed by output name, each in that output's
/// layout order (like [`Problem::evaluate`]'s outputs). Channels are independent and
/// evaluated in parallel; the result does not depend on the thread count.
///
/// Errors are the reference's own: a channel violating (C1) gets the same error as
/// [`Problem::evaluate`] reports.
pub fn budgets(
    problem: &Problem,
    method: Method,
) -> Result<BTreeMap<&'static str, Vec<ElementBudget>>, SpecError> {
    let g = &problem.geom;
    let op = problem.op;
    let names = op.outputs();
    let per_channel: Vec<Vec<Vec<ElementBudget>>> = (0..g.c)
        .into_par_iter()
        .map(|c| {
            let inp = problem.channel_inputs(c)?;
            let mut b = bound_channel(op, c, &inp, &problem.eps)?;
            if method == Method::Exact {
                let conds = exact_channel_conds(op, c, &inp, &problem.eps)?;
                for (bo, co) in b.iter_mut().zip(conds) {
                    for (e, cv) in bo.iter_mut().zip(co) {
                        e.cond = cv;
                    }
                }
            }
            elementwise_gate(op, g.m, &mut b);
            // An f64 evaluation that meets 0·∞ (inputs beyond f64's normal range, e.g. f64
            // subnormal data with eps = 0) is unbounded: infinite, as for overflow, never NaN.
            no_nan(&mut b);
            Ok(b)
        })
        .collect::<Result<_, SpecError>>()?;
    Ok(assemble(names, g, &per_channel))
}

/// [`budgets`] by [`Method::Bound`] for an op of the fast path (`forward`, `backward`,
/// `eval`, `sync_forward`, `sync_backward`) whose inputs are binary floats given as f64,
/// without building the whole exact problem: [`case_bounds_f64`], the cell output's budgets
/// evaluated at every cell in layout order. The same bounds as [`budgets`] on the same problem.
pub fn budgets_bound_f64(
    op: Op,
    geom: &bnconf_spec::Geometry,
    eps: &Rational,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<BTreeMap<&'static str, Vec<ElementBudget>>, SpecError> {
    let cb = case_bounds_f64(op, geom, eps, inputs)?;
    let mut out = cb.channel;
    let x = &inputs["x"];
    let dy = inputs.get("dy");
    let mut cells = vec![ElementBudget::default(); geom.len()];
    crate::fast::channel_runs(geom, 0, geom.len(), |run, c| {
        let b = &cb.cells[c];
        for j in run {
            cells[j] = b.at(x[j], dy.map_or(0.0, |d| d[j]));
        }
    });
    out.insert(op.outputs()[0], cells);
    Ok(out)
}

/// A case's budgets without a number per cell: per channel, its cell output's [`CellBound`];
/// the per-channel outputs' budgets as values.
#[derive(Clone, Debug)]
pub struct CaseBounds {
    /// Per channel, the cell output's budget as a function of the cell.
    pub cells: Vec<CellBound>,
    /// The per-channel outputs' budgets (one per channel), by output name; the cell output
    /// is not among them.
    pub channel: BTreeMap<&'static str, Vec<ElementBudget>>,
}

/// The bounds of a case of the fast path whose inputs are binary floats given as f64, by
/// channel ([`CaseBounds`]): each channel's inputs become exact numbers only while that
/// channel is bounded (channels in parallel), so a case of millions of cells never holds a
/// big number, nor a budget, per cell. Errors as [`budgets`] (the first channel in channel
/// order reports).
pub fn case_bounds_f64(
    op: Op,
    geom: &bnconf_spec::Geometry,
    eps: &Rational,
    inputs: &BTreeMap<String, Vec<f64>>,
) -> Result<CaseBounds, SpecError> {
    case_bounds_of(op, geom, eps, &|name| CellData::F64(&inputs[name]))
}

/// An input's values as a case holds them: f64, or f32 where they are binary32 (the same
/// values: the same bounds).
#[derive(Clone, Copy, Debug)]
pub enum CellData<'a> {
    /// f64 values.
    F64(&'a [f64]),
    /// binary32 values.
    F32(&'a [f32]),
}

impl<'a> CellData<'a> {
    /// The values of an f32 or f64 array (`None` for another storage type).
    pub fn of(d: &'a crate::formats::npy::NpyData) -> Option<CellData<'a>> {
        use crate::formats::npy::NpyData;
        match d {
            NpyData::F32(v) => Some(CellData::F32(v)),
            NpyData::F64(v) => Some(CellData::F64(v)),
            _ => None,
        }
    }

    /// Value `i`, as f64.
    #[inline(always)]
    pub fn at(&self, i: usize) -> f64 {
        match self {
            CellData::F64(v) => v[i],
            CellData::F32(v) => v[i] as f64,
        }
    }

    fn len(&self) -> usize {
        match self {
            CellData::F64(v) => v.len(),
            CellData::F32(v) => v.len(),
        }
    }
}

/// A channel's cells of one input, read where the case holds them (no copy of the channel):
/// cell `i` at `start + (i / run)·step + i % run` ([`bnconf_spec::Geometry::channel_runs`]).
#[derive(Clone, Copy)]
pub(crate) struct InPlace<'a> {
    data: CellData<'a>,
    start: usize,
    run: usize,
    step: usize,
    m: usize,
}

impl<'a> InPlace<'a> {
    fn new(g: &bnconf_spec::Geometry, c: usize, data: CellData<'a>) -> InPlace<'a> {
        let (start, run, step) = g.channel_runs(c);
        InPlace {
            data,
            start,
            run,
            step,
            m: g.m,
        }
    }

    /// Cell `i`'s value, as f64.
    fn at(&self, i: usize) -> f64 {
        self.data
            .at(self.start + (i / self.run) * self.step + i % self.run)
    }
}

/// Cells `step` apart (a channels-last channel), in one storage type.
struct Strided<'a, T> {
    data: &'a [T],
    start: usize,
    step: usize,
    m: usize,
}

/// Runs of `run >= 2` cells, `step` apart (a channels-first channel of several examples), in
/// one storage type, for `m <= 2^32` cells: `i / run` as `(i·magic) >> 64` with
/// `magic = ceil(2^64 / run)`, exact for every `i < 2^32` and `run < 2^32` (Lemire, Kaser
/// and Kurz, "Faster remainder by direct computation", 2019, theorem 1).
struct Runs<'a, T> {
    data: &'a [T],
    start: usize,
    run: usize,
    step: usize,
    m: usize,
    magic: u64,
}

impl<'a, T> Runs<'a, T> {
    fn new(data: &'a [T], v: &InPlace) -> Runs<'a, T> {
        debug_assert!(v.run >= 2 && (v.m as u64) <= 1 << 32 && (v.run as u64) < 1 << 32);
        Runs {
            data,
            start: v.start,
            run: v.run,
            step: v.step,
            m: v.m,
            magic: u64::MAX / v.run as u64 + 1,
        }
    }

    #[inline(always)]
    fn offset(&self, i: usize) -> usize {
        let q = ((i as u128 * self.magic as u128) >> 64) as usize;
        self.start + q * self.step + (i - q * self.run)
    }
}

/// [`case_bounds_f64`] with the inputs given by name (`input(name)` for every input of `op`:
/// cells in layout order, per-channel inputs one per channel), f64 or f32: the same bounds
/// for the same values, and a channel's cells read where the input holds them.
pub fn case_bounds_of<'a>(
    op: Op,
    geom: &bnconf_spec::Geometry,
    eps: &Rational,
    input: &(dyn Fn(&str) -> CellData<'a> + Sync),
) -> Result<CaseBounds, SpecError> {
    let g = geom;
    let q = crate::fast::exact_f64;
    let per_channel: Vec<ChannelBound> = (0..g.c)
        .into_par_iter()
        .map(|c| {
            let mut values = BTreeMap::new();
            let mut floats = BTreeMap::new();
            for &name in op.inputs() {
                let data = input(name);
                match Op::extent(name) {
                    Extent::Cells => {
                        floats.insert(name, InPlace::new(g, c, data));
                    }
                    Extent::Channel => {
                        values.insert(name, vec![q(data.at(c))]);
                    }
                    Extent::Shards => {
                        values.insert(name, (0..data.len()).map(|i| q(data.at(i))).collect());
                    }
                }
            }
            let inp = ChannelIn {
                values,
                convention: None,
            };
            channel_bound(op, c, &inp, &CellSource::Floats(&floats), eps)
        })
        .collect::<Result<_, SpecError>>()?;
    let names = op.outputs();
    let mut channel = BTreeMap::new();
    for (o, &name) in names.iter().enumerate().skip(1) {
        let mut v: Vec<ElementBudget> = per_channel.iter().map(|ch| ch.outputs[o][0]).collect();
        no_nan(std::slice::from_mut(&mut v));
        channel.insert(name, v);
    }
    let cells = per_channel
        .into_iter()
        .map(|ch| ch.cell.expect("an op of the fast path has a cell output"))
        .collect();
    Ok(CaseBounds { cells, channel })
}

/// Whether output `o` (in [`Op::outputs`] order) of `op` is computed without a reduction:
/// from its own cell and handed-in statistics only (`eval` and `sync_forward` `y`,
/// `sync_backward` `dx`).
pub fn is_elementwise(op: Op, o: usize) -> bool {
    matches!(op, Op::Eval | Op::SyncForward) || (op == Op::SyncBackward && o == 0)
}

/// The gate of an output computed without a reduction is `k(1) = 4`, not `k(m)`: `k(m)`
/// allows for the order of an m-term sum, and such an output sums nothing (a handful of
/// roundings per element, which `k(1)` covers: the fused `x*scale + shift` form errs by at
/// most 3 units of `u·cond`). The checker gates every output of a case on `k(m)`, so these
/// outputs' `cond`, `mag` and `mag2` are scaled by `k(1)/k(m)`: a ratio of `k(m)` against the
/// scaled budget is one of `k(1)` against the unscaled one.
fn elementwise_gate(op: Op, m: usize, b: &mut [Vec<ElementBudget>]) {
    let s = k_allowance(1) / k_allowance(m);
    for (o, out) in b.iter_mut().enumerate() {
        if is_elementwise(op, o) {
            for e in out {
                e.cond *= s;
                e.mag *= s;
                e.mag2 *= s;
            }
        }
    }
}

/// NaN (0·∞ in the f64 evaluation) becomes an infinite budget.
fn no_nan(b: &mut [Vec<ElementBudget>]) {
    for e in b.iter_mut().flatten() {
        *e = nan_as_infinity(*e);
    }
}

/// Per-channel budgets (matrix view) placed in the layout's order.
fn assemble(
    names: &[&'static str],
    g: &bnconf_spec::Geometry,
    per_channel: &[Vec<Vec<ElementBudget>>],
) -> BTreeMap<&'static str, Vec<ElementBudget>> {
    let mut out = BTreeMap::new();
    for (o, &name) in names.iter().enumerate() {
        let v = match Op::extent(name) {
            Extent::Cells => {
                let mut v = vec![ElementBudget::default(); g.len()];
                for (c, ch) in per_channel.iter().enumerate() {
                    for (i, e) in g.channel_offsets(c).zip(&ch[o]) {
                        v[i] = *e;
                    }
                }
                v
            }
            Extent::Channel | Extent::Shards => per_channel.iter().map(|ch| ch[o][0]).collect(),
        };
        out.insert(name, v);
    }
    out
}

/// `budgets` with [`auto_method`].
pub fn budgets_auto(
    problem: &Problem,
) -> Result<BTreeMap<&'static str, Vec<ElementBudget>>, SpecError> {
    budgets(problem, auto_method(problem))
}

/// The smallest f64 `>= v` for a non-negative exact `v` (`inf` beyond f64's range).
pub fn round_up_f64(v: &QSqrt) -> f64 {
    let r = round(v, FloatFormat::F64);
    if r.inf {
        return f64::INFINITY;
    }
    let f = r.to_f64();
    match v.cmp_rational(&f64_to_rational(f).expect("finite")) {
        Ordering::Greater => next_up(f),
        _ => f,
    }
}

fn next_up(f: f64) -> f64 {
    if f.is_nan() || f == f64::INFINITY {
        f
    } else if f == 0.0 {
        f64::from_bits(1)
    } else if f > 0.0 {
        f64::from_bits(f.to_bits() + 1)
    } else {
        f64::from_bits(f.to_bits() - 1)
    }
}

/// Exact `cond` of every output element of channel `c` (matrix-view order, outputs in
/// [`Op::outputs`] order), each rounded up to f64.
pub fn exact_channel_conds(
    op: Op,
    c: usize,
    inp: &ChannelIn<QSqrt>,
    eps: &Rational,
) -> Result<Vec<Vec<f64>>, SpecError> {
    let mut flat: Vec<QSqrt> = Vec::new();
    let mut spans: Vec<(&'static str, usize, usize)> = Vec::new();
    // Every input of the channel, `momentum` included; `shard_count` is differentiated but
    // not perturbed (counts are exact integers, like `eps`).
    let mut abs_in: Vec<QSqrt> = Vec::new();
    for (&name, v) in &inp.values {
        spans.push((name, flat.len(), v.len()));
        flat.extend(v.iter().cloned());
        abs_in.extend(v.iter().map(|e| {
            if name == "shard_count" {
                QSqrt::int(0)
            } else {
                e.abs()
            }
        }));
    }
    let eps_d = Dual::constant(QSqrt::rational(eps.clone()));
    let f = |duals: &[Dual<QSqrt>]| -> Result<Vec<Dual<QSqrt>>, SpecError> {
        let values = spans
            .iter()
            .map(|&(n, s, l)| (n, duals[s..s + l].to_vec()))
            .collect();
        let chin = ChannelIn {
            values,
            convention: inp.convention,
        };
        let outs = channel_op(op, c, &chin, &eps_d)?;
        Ok(outs.into_iter().flatten().collect())
    };
    let jac = jacobian(f, &flat)?;
    let rows: Vec<f64> = jac
        .iter()
        .map(|row| {
            let mut s = QSqrt::int(0);
            for (jij, a) in row.iter().zip(&abs_in) {
                if !jij.is_zero() && !a.is_zero() {
                    s = s + jij.abs() * a;
                }
            }
            round_up_f64(&s)
        })
        .collect();
    let m = inp.values[op.cell_input()].len();
    let mut out = Vec::new();
    let mut at = 0;
    for &name in op.outputs() {
        let l = match Op::extent(name) {
            Extent::Cells => m,
            Extent::Channel | Extent::Shards => 1,
        };
        out.push(rows[at..at + l].to_vec());
        at += l;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// f64 midpoint-radius arithmetic

const U64: f64 = f64::EPSILON / 2.0;
/// Absolute slack for underflow in one operation.
const TINY: f64 = 4.0 * f64::MIN_POSITIVE * f64::EPSILON;
/// Final safety factor for the rounding of sums and products of non-negative terms.
pub(crate) const SAFE: f64 = 1.0 + 1.0 / (1u64 << 30) as f64;

/// A real number known to lie in `[v - e, v + e]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Iv {
    pub(crate) v: f64,
    pub(crate) e: f64,
}

impl Iv {
    pub(crate) const ZERO: Iv = Iv { v: 0.0, e: 0.0 };
    pub(crate) fn add(self, o: Iv) -> Iv {
        let v = self.v + o.v;
        Iv {
            v,
            e: self.e + o.e + U64 * v.abs() + TINY,
        }
    }
    pub(crate) fn sub(self, o: Iv) -> Iv {
        self.add(Iv { v: -o.v, e: o.e })
    }
    pub(crate) fn mul(self, o: Iv) -> Iv {
        let v = self.v * o.v;
        Iv {
            v,
            e: self.v.abs() * o.e + o.v.abs() * self.e + self.e * o.e + U64 * v.abs() + TINY,
        }
    }
    fn scale(self, s: f64) -> Iv {
        // s is exact (a small integer or a power of two times one)
        self.mul(Iv { v: s, e: 0.0 })
    }
    pub(crate) fn div(self, n: f64) -> Iv {
        let v = self.v / n;
        Iv {
            v,
            e: self.e / n + U64 * v.abs() + TINY,
        }
    }
    /// Upper bound of the absolute value.
    pub(crate) fn up(self) -> f64 {
        self.v.abs() + self.e
    }
}

fn iv_of(x: &QSqrt) -> Iv {
    let f = match x.as_rational() {
        Some(r) => r.to_f64().unwrap_or(f64::NAN),
        None => round(x, FloatFormat::F64).to_f64(),
    };
    if !f.is_finite() {
        return Iv {
            v: 0.0,
            e: f64::INFINITY,
        };
    }
    Iv {
        v: f,
        e: 2.0 * U64 * f.abs() + TINY,
    }
}

pub(crate) fn sum_iv(v: &[Iv]) -> Iv {
    sum_iv_by(0, v.len(), &|i| v[i])
}

/// [`sum_iv`] of the terms `f(lo..hi)`, formed as they are summed (pairwise: halves split at
/// `len/2`, runs of at most 8 summed in order; the same tree as a slice of them).
pub(crate) fn sum_iv_by(lo: usize, hi: usize, f: &impl Fn(usize) -> Iv) -> Iv {
    // (walked as `sum_ivs_by` walks it: one loop, no recursion)
    let [s] = sum_ivs_by(lo, hi, &|i| ([f(i)], ()), &mut |_, ()| {});
    s
}

/// `K` sums of [`sum_iv_by`]'s tree at once (the terms `f(i).0[k]`), each bit for bit
/// [`sum_iv_by`] of its terms, and `seq(&f(i).0, f(i).1)` called on every `i` in order, so that
/// a sequential sum ([`sum_f`]) can be formed in the same pass from the per-cell values `f`
/// formed on the way (`f(i).1`: never formed twice).
#[inline]
fn sum_ivs_by<const K: usize, E>(
    lo: usize,
    hi: usize,
    f: &impl Fn(usize) -> ([Iv; K], E),
    seq: &mut impl FnMut(&[Iv; K], E),
) -> [Iv; K] {
    // The tree walked depth first without recursion (a stack of the pending right halves and
    // their left sums), so that `f` and `seq` are inlined into one loop over the runs.
    let mut stack = [(0usize, 0usize, None::<[Iv; K]>); 64];
    let mut depth = 0;
    let (mut a, mut b) = (lo, hi);
    loop {
        while b - a > 8 {
            let mid = a + (b - a) / 2;
            stack[depth] = (mid, b, None);
            depth += 1;
            b = mid;
        }
        let mut acc = [Iv::ZERO; K];
        for i in a..b {
            let (t, e) = f(i);
            for k in 0..K {
                acc[k] = acc[k].add(t[k]);
            }
            seq(&t, e);
        }
        loop {
            if depth == 0 {
                return acc;
            }
            let (mid, end, left) = &mut stack[depth - 1];
            match left.take() {
                None => {
                    *left = Some(acc);
                    (a, b) = (*mid, *end);
                    break;
                }
                Some(l) => {
                    acc = std::array::from_fn(|k| l[k].add(acc[k]));
                    depth -= 1;
                }
            }
        }
    }
}

pub(crate) fn sum_f(v: impl Iterator<Item = f64>) -> f64 {
    // Non-negative terms: the relative rounding error (≤ m*u) is covered by SAFE for any
    // realistic m; pairwise would be tighter but is not needed.
    let mut s = 0.0;
    for t in v {
        s += t;
    }
    s
}

/// `r = q^(-1/2)` as an enclosure, from an enclosure of `q > 0` tight to 2^-20.
pub(crate) fn rsqrt_iv(q: Iv) -> Option<Iv> {
    let lo = q.v - q.e;
    if lo.is_nan() || lo <= 0.0 || q.e > q.v * (1.0 / (1u64 << 20) as f64) || !q.v.is_finite() {
        return None;
    }
    let rv = 1.0 / q.v.sqrt();
    let rhi = (1.0 / lo.sqrt()) * (1.0 + 8.0 * U64);
    Some(Iv {
        v: rv,
        e: (rhi - rv) + 8.0 * U64 * rv + TINY,
    })
}

fn exact_rational(x: &QSqrt) -> Rational {
    x.as_rational().expect("statistic is rational").clone()
}

/// `a.max(b)` for a running maximum `a` that is never NaN (started at a number): a NaN `b` is
/// left out as `f64::max` leaves it, without its test for NaN (which costs a hot loop more
/// than the comparison).
#[inline(always)]
pub(crate) fn max_not_nan(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// `v·2^k` for `|k| ≤ 2100` (two factors, each a normal power of two).
pub(crate) fn ldexp(v: f64, k: i32) -> f64 {
    let (a, b) = ldexp_factors(k);
    v * a * b
}

/// The two factors of [`ldexp`]`(·, k)`: `ldexp(v, k) == v * a * b` (for a loop to form
/// them once).
pub(crate) fn ldexp_factors(k: i32) -> (f64, f64) {
    let h = k / 2;
    (2f64.powi(h), 2f64.powi(k - h))
}

/// The exponent `e` (a group is bounded as `x/2^e`, `eps/2^2e`) for a group whose largest
/// `|x|` is beyond what the f64 bounds can square (`≥ 2^256`, or nonzero `≤ 2^-256`), where
/// `eps/2^2e` is finite; 0 otherwise.
pub(crate) fn scale_exponent(xs: &[f64], eps: f64) -> i32 {
    exponent_of_max(xs.iter().fold(0f64, |a, &v| a.max(v.abs())), eps)
}

/// [`scale_exponent`] of a group whose largest `|x|` is `amax`.
fn exponent_of_max(amax: f64, eps: f64) -> i32 {
    if !(amax >= 2f64.powi(256) || (amax > 0.0 && amax <= 2f64.powi(-256))) {
        return 0;
    }
    // amax = f·2^e with f in [1, 2) (subnormals included)
    let mut e = amax.log2().floor() as i32;
    while ldexp(amax, -e) >= 2.0 {
        e += 1;
    }
    while ldexp(amax, -e) < 1.0 {
        e -= 1;
    }
    if ldexp(eps, -2 * e).is_finite() {
        e
    } else {
        0
    }
}

/// An element budget of an output of degree `d` in the scale, times `s^d` (`f = s^d`, a power
/// of two): `cond`, `mag` and `mag2` (which enters as `u·mag2`) scale alike.
pub(crate) fn scaled(b: ElementBudget, f: f64) -> ElementBudget {
    if f == 1.0 {
        return b;
    }
    // a power of two times an upper bound, rounded up where it leaves the normal range
    let up = |v: f64| {
        let w = v * f;
        if w != 0.0 && w.abs() < f64::MIN_POSITIVE {
            w + TINY
        } else {
            w
        }
    };
    ElementBudget {
        cond: up(b.cond),
        mag: up(b.mag),
        mag2: up(b.mag2),
    }
}

/// `q/2^2e`, exactly.
pub(crate) fn scale_q(q: Rational, e: i32) -> Rational {
    let p2 = Rational::from_integer(num_bigint::BigInt::from(1u8) << (2 * e.unsigned_abs()));
    match e.cmp(&0) {
        std::cmp::Ordering::Greater => q / p2,
        std::cmp::Ordering::Less => q * p2,
        std::cmp::Ordering::Equal => q,
    }
}

/// An enclosure times `2^k`, still an enclosure where the product leaves the normal range.
#[inline(always)]
fn iv_ldexp(a: Iv, k: i32) -> Iv {
    if k == 0 {
        return a;
    }
    Iv {
        v: ldexp(a.v, k),
        e: ldexp(a.e, k) + 2.0 * TINY,
    }
}

pub(crate) fn c1_error(channel: usize, what: &'static str, q: &Rational) -> SpecError {
    SpecError::NonPositiveVariance {
        channel,
        what,
        value: bnconf_spec::exact::fmt_rational(q),
    }
}

pub(crate) fn eb(cond: f64, mag: f64) -> ElementBudget {
    ElementBudget {
        cond: cond * SAFE,
        mag: mag * SAFE,
        mag2: 0.0,
    }
}

/// Where a channel's cell inputs (`x`, `dy`) come from: exact numbers, or binary floats as
/// f64 (converted to exact numbers only if an exact fallback needs them).
enum CellSource<'a> {
    Exact,
    Floats(&'a BTreeMap<&'static str, InPlace<'a>>),
}

/// [`iv_of`] of an f64 (the same enclosure, without building the exact number).
#[inline(always)]
pub(crate) fn iv_of_f64(f: f64) -> Iv {
    // (selects, not a branch)
    let fin = f.is_finite();
    Iv {
        v: if fin { f } else { 0.0 },
        e: if fin {
            2.0 * U64 * f.abs() + TINY
        } else {
            f64::INFINITY
        },
    }
}

/// Closed-form `cond` bounds and `mag` of channel `c`, outputs in [`Op::outputs`] order,
/// cells in matrix-view order.
fn bound_channel(
    op: Op,
    c: usize,
    inp: &ChannelIn<QSqrt>,
    eps: &Rational,
) -> Result<Vec<Vec<ElementBudget>>, SpecError> {
    bound_channel_from(op, c, inp, &CellSource::Exact, eps)
}

/// [`bound_channel`] with the cell inputs from `src` (`inp` then holds the per-channel
/// inputs; with [`CellSource::Exact`] the cells too): [`channel_bound`], the cell output's
/// budgets evaluated at every cell ([`CellBound::raw`]).
fn bound_channel_from(
    op: Op,
    c: usize,
    inp: &ChannelIn<QSqrt>,
    src: &CellSource,
    eps: &Rational,
) -> Result<Vec<Vec<ElementBudget>>, SpecError> {
    let ChannelBound { cell, mut outputs } = channel_bound(op, c, inp, src, eps)?;
    if let Some(cb) = cell {
        let cells = |n: &str| -> Vec<Iv> {
            match src {
                CellSource::Exact => inp.values[n].iter().map(iv_of).collect(),
                CellSource::Floats(f) => {
                    let d = f[n];
                    (0..d.m).map(|i| iv_of_f64(d.at(i))).collect()
                }
            }
        };
        let x = cells("x");
        let dy = if cb.has_dy() { cells("dy") } else { vec![] };
        outputs[0] = (0..x.len())
            .map(|i| cb.raw(x[i], dy.get(i).copied().unwrap_or(Iv::ZERO)))
            .collect();
    }
    Ok(outputs)
}

/// The bounds of one channel: its cell output's ([`CellBound`]: a function of the cell's
/// inputs, evaluated where it is needed) and its per-channel outputs' (in [`Op::outputs`]
/// order; the cell output's entry is left empty).
pub(crate) struct ChannelBound {
    /// The cell output's budget as a function of the cell (none for `running_update`,
    /// `sync_stats`).
    pub(crate) cell: Option<CellBound>,
    /// Budgets per output (`[output][element]`), the cell output's empty.
    pub(crate) outputs: Vec<Vec<ElementBudget>>,
}

/// The budget of a channel's cell output (`y` or `dx`) from the cell's own inputs and the
/// channel's reductions: the closed forms of the module docs split into what depends on the
/// cell and what the channel holds, so that a large case's budgets are computed where each
/// element is judged and never stored (`judge::prepare`). [`CellBound::raw`] is the value
/// [`bound_channel`] gives the cell, [`CellBound::at`] the one [`budgets`] gives it (the
/// gate of elementwise outputs and NaN as infinity applied), bit for bit (tested).
#[derive(Clone, Copy, Debug)]
pub struct CellBound {
    op: Op,
    /// The scale exponent: cells bounded as `x/2^se` (forward, backward).
    se: i32,
    /// The factor the cell output's budget is scaled back by (`2^(degree·se)`).
    back: f64,
    /// The elementwise gate's factor `k(1)/k(m)` ([`elementwise_gate`]), or 1.
    gate: f64,
    mu: Iv,
    r: Iv,
    /// backward: mean(dy), mean(dy·h); sync_backward: the handed-in mean_dy, mean_dy_xhat.
    a: Iv,
    bb: Iv,
    ru: f64,
    gm: f64,
    bt: f64,
    x1: f64,
    hx: f64,
    dk: f64,
    dy1: f64,
    hdy: f64,
    zx: f64,
    bu: f64,
    au: f64,
    muu: f64,
    vu: f64,
    m2u: f64,
}

/// A budget with its NaN terms (0·∞ in the f64 evaluation) made infinite ([`no_nan`]).
#[inline(always)]
fn nan_as_infinity(mut e: ElementBudget) -> ElementBudget {
    for v in [&mut e.cond, &mut e.mag, &mut e.mag2] {
        if v.is_nan() {
            *v = f64::INFINITY;
        }
    }
    e
}

impl CellBound {
    /// Whether the cell output depends on a `dy` cell.
    pub fn has_dy(&self) -> bool {
        matches!(self.op, Op::Backward | Op::SyncBackward)
    }

    /// The budget of the cell whose inputs are `x` (and `dy`; ignored by ops without one),
    /// binary floats given as f64: what [`budgets`] and [`budgets_bound_f64`] give it.
    #[inline(always)]
    pub fn at(&self, x: f64, dy: f64) -> ElementBudget {
        self.finish(self.raw(iv_of_f64(x), iv_of_f64(dy)))
    }

    /// A cell's [`CellBound::raw`] budget as [`budgets`] gives it: the elementwise gate's
    /// factor applied and NaN as infinity.
    #[inline(always)]
    fn finish(&self, mut e: ElementBudget) -> ElementBudget {
        if self.gate != 1.0 {
            e.cond *= self.gate;
            e.mag *= self.gate;
            e.mag2 *= self.gate;
        }
        nan_as_infinity(e)
    }

    /// A (scaled) cell `x`'s `|x|`, `h = (x − mu)·r` and `|h|` (upper bounds).
    #[inline(always)]
    fn cell(&self, x: Iv) -> (f64, Iv, f64) {
        let h = x.sub(self.mu).mul(self.r);
        (x.v.abs() + x.e, h, h.up())
    }

    /// Forward's budget of a cell from `|x|` and `|h|` (upper bounds), before scaling back.
    #[inline(always)]
    fn forward(&self, ax: f64, ah: f64) -> ElementBudget {
        let (gm, ru, bt, x1, hx, dk) = (self.gm, self.ru, self.bt, self.x1, self.hx, self.dk);
        let mut e = eb(gm * ru * (ax + x1 + ah * hx) + gm * ah + bt, gm * ru * x1);
        e.mag2 = dk * gm * ah * ru * ru / 2.0;
        e
    }

    /// Backward's budget of a cell from `|x|`, `h`, `|h|` and `dy`, before scaling back.
    #[inline(always)]
    fn backward(&self, ax: f64, h: Iv, ah: f64, dy: Iv) -> ElementBudget {
        let (gm, ru, x1, hx, dk) = (self.gm, self.ru, self.x1, self.hx, self.dk);
        let (dy1, hdy, zx, bu, au) = (self.dy1, self.hdy, self.zx, self.bu, self.au);
        let ady = dy.up();
        let az = dy.sub(self.a).sub(h.mul(self.bb)).up();
        let cond = gm * ru * (ady + dy1 + ah * hdy)
            + gm * ru * az
            + gm * ru * ru * (az * hx + ah * zx + bu * (ax + x1 + ah * hx));
        let mag = gm * ru * (ady + dy1 + ah * hdy + x1 * ru * (hdy + ah * dy1));
        let mut e = eb(cond, mag);
        e.mag2 = dk * gm * ru * ru * ru * ((ady + au + 3.0 * ah * bu) / 2.0 + au);
        e
    }

    /// `at(x[l], dy[l]).total(u)` for each lane `l`, for a forward or backward channel with
    /// no scaling (`se = 0`: all but the f64 huge and tiny classes); `None` otherwise. The
    /// same bits as [`CellBound::at`], in a form without branches, which the compiler forms
    /// `L` lanes at a time.
    #[inline(always)]
    pub fn totals<const L: usize>(&self, x: &[f64; L], dy: &[f64; L], u: f64) -> Option<[f64; L]> {
        if self.se != 0 || self.back != 1.0 || self.gate != 1.0 {
            return None;
        }
        // (`finish` without the gate's factor, 1 here; `total(u)` with its underflow term
        // formed once.)
        let und = underflow(u) / u;
        let total = |e: ElementBudget| nan_as_infinity(e).total_given(u, und);
        let cell = |x: f64| self.cell(iv_of_f64(x));
        let mut out = [0.0; L];
        match self.op {
            Op::Forward => {
                for l in 0..L {
                    let (ax, _, ah) = cell(x[l]);
                    out[l] = total(self.forward(ax, ah));
                }
            }
            Op::Backward => {
                for l in 0..L {
                    let (ax, h, ah) = cell(x[l]);
                    out[l] = total(self.backward(ax, h, ah, iv_of_f64(dy[l])));
                }
            }
            _ => return None,
        }
        Some(out)
    }

    /// The budget of the cell with input enclosures `x`, `dy`, before the elementwise gate
    /// (what [`bound_channel`] gives it).
    #[inline(always)]
    fn raw(&self, x: Iv, dy: Iv) -> ElementBudget {
        let (ax, h, ah) = self.cell(iv_ldexp(x, -self.se));
        let (gm, ru, bt) = (self.gm, self.ru, self.bt);
        let e = match self.op {
            Op::Forward => self.forward(ax, ah),
            Op::Backward => self.backward(ax, h, ah, dy),
            Op::Eval => {
                let (muu, vu) = (self.muu, self.vu);
                eb(
                    gm * ru * (ax + muu) + gm * ah * (1.0 + ru * ru * vu / 2.0) + bt,
                    gm * ah + bt,
                )
            }
            Op::SyncForward => {
                let (muu, m2u) = (self.muu, self.m2u);
                let cond = gm * ru * ax
                    + gm * ru * muu * (1.0 + ah * ru * muu)
                    + gm * ah
                    + bt
                    + gm * ah * ru * ru * m2u / 2.0;
                let mag = gm * ah + bt + gm * ah * ru * ru * (m2u + muu * muu) / 2.0;
                eb(cond, mag)
            }
            Op::SyncBackward => {
                let (muu, m2u, au, ku) = (self.muu, self.m2u, self.au, self.bu);
                let vs = m2u + muu * muu;
                let ady = dy.up();
                let hk = h.mul(self.bb);
                let w = dy.sub(self.a).sub(hk).up();
                let v = dy.sub(self.a).sub(hk.scale(2.0)).up();
                let cond = gm * ru * ady
                    + gm * ru * ru * ku * ax
                    + gm * ru * w
                    + gm * ru * au
                    + gm * ru * ah * ku
                    + gm * ru * ru * (ru * muu * w + ku * (1.0 + ah * ru * muu)) * muu
                    + gm * ru * ru * ru / 2.0 * v * m2u;
                let mag = gm * ru * (ady + au + ah * ku)
                    + gm * ru * ru * ru * (ady + au + 2.0 * ah * ku) * vs / 2.0;
                eb(cond, mag)
            }
            Op::RunningUpdate | Op::SyncStats => unreachable!("no cell output"),
        };
        scaled(e, self.back)
    }
}

/// [`ChannelBound`] of channel `c` (cell inputs from `src`, as [`bound_channel_from`]).
fn channel_bound(
    op: Op,
    c: usize,
    inp: &ChannelIn<QSqrt>,
    src: &CellSource,
    eps: &Rational,
) -> Result<ChannelBound, SpecError> {
    match op {
        Op::RunningUpdate => {
            return Ok(ChannelBound {
                cell: None,
                outputs: bound_running_update(inp),
            })
        }
        Op::SyncStats => {
            return Ok(ChannelBound {
                cell: None,
                outputs: bound_sync_stats(inp),
            })
        }
        _ => {}
    }
    // A cell input's enclosures: stored (exact inputs), or formed from the f64 on each use
    // (no vector of enclosures per cell); the passes compiled for each storage type.
    let has_dy = matches!(op, Op::Backward | Op::SyncBackward);
    match src {
        CellSource::Exact => {
            let ivs = |n: &str| -> Vec<Iv> { inp.values[n].iter().map(iv_of).collect() };
            let dy = has_dy.then(|| ivs("dy"));
            channel_bound_of(op, c, inp, src, eps, &ivs("x")[..], dy.as_deref())
        }
        CellSource::Floats(f) => {
            let (x, dy) = (f["x"], has_dy.then(|| f["dy"]));
            let b = Bind {
                op,
                c,
                inp,
                src,
                eps,
            };
            match (x.data, dy.map(|d| d.data)) {
                (CellData::F32(xv), None) => b.by_kind::<f32>(&x, dy.as_ref(), xv, None),
                (CellData::F32(xv), Some(CellData::F32(dv))) => {
                    b.by_kind(&x, dy.as_ref(), xv, Some(dv))
                }
                (CellData::F64(xv), None) => b.by_kind::<f64>(&x, dy.as_ref(), xv, None),
                (CellData::F64(xv), Some(CellData::F64(dv))) => {
                    b.by_kind(&x, dy.as_ref(), xv, Some(dv))
                }
                _ => channel_bound_of(op, c, inp, src, eps, &x, dy.as_ref()),
            }
        }
    }
}

/// [`channel_bound_of`]'s arguments but the cells.
struct Bind<'b, 'a> {
    op: Op,
    c: usize,
    inp: &'b ChannelIn<QSqrt>,
    src: &'b CellSource<'a>,
    eps: &'b Rational,
}

impl Bind<'_, '_> {
    /// [`channel_bound_of`] with the cells of `x` (and `dy`, the same runs) held as `xv`
    /// (`dv`) in storage `T`, compiled for the kind of their runs: one run (a slice), single
    /// cells, or runs (beyond 2^32 cells: `InPlace` itself).
    fn by_kind<T: Copy + Into<f64> + Sync>(
        &self,
        x: &InPlace,
        dy_in_place: Option<&InPlace>,
        xv: &[T],
        dy: Option<&[T]>,
    ) -> Result<ChannelBound, SpecError>
    where
        [T]: CellGet,
    {
        let (op, c, inp, src, eps) = (self.op, self.c, self.inp, self.src, self.eps);
        let (start, m) = (x.start, x.m);
        if x.run >= m {
            let dy = dy.map(|v| &v[start..start + m]);
            channel_bound_of::<[T]>(op, c, inp, src, eps, &xv[start..start + m], dy)
        } else if x.run == 1 {
            let v = |data| Strided {
                data,
                start,
                step: x.step,
                m,
            };
            channel_bound_of(op, c, inp, src, eps, &v(xv), dy.map(v).as_ref())
        } else if (m as u64) <= 1 << 32 && (x.run as u64) < 1 << 32 {
            let v = |data| Runs::new(data, x);
            channel_bound_of(op, c, inp, src, eps, &v(xv), dy.map(v).as_ref())
        } else {
            channel_bound_of(op, c, inp, src, eps, x, dy_in_place)
        }
    }
}

/// [`channel_bound`] of a forward, backward, eval or sync op, its cells' enclosures by `xc`
/// (and `dy_cells` where the op has `dy`).
#[inline(never)]
fn channel_bound_of<X: CellGet + ?Sized>(
    op: Op,
    c: usize,
    inp: &ChannelIn<QSqrt>,
    src: &CellSource,
    eps: &Rational,
    xc: &X,
    dy_cells: Option<&X>,
) -> Result<ChannelBound, SpecError> {
    let exact_x = || -> Vec<QSqrt> {
        match src {
            CellSource::Exact => inp.values["x"].clone(),
            CellSource::Floats(f) => {
                let x = f["x"];
                (0..x.m)
                    .map(|i| QSqrt::rational(f64_to_rational(x.at(i)).expect("finite input")))
                    .collect()
            }
        }
    };
    // forward, backward: a channel whose |x| is beyond f64's squares (the f64 huge and tiny
    // classes) is bounded as x/2^se, eps/2^2se, and the outputs scaled back by their degree
    // (y, dgamma, dbeta 0; mean 1; var 2; dx −1), as the family's groups are.
    let m = xc.len();
    let dyc = dy_cells.filter(|_| matches!(op, Op::Backward));
    // (The sums below are those of the per-cell vectors of the module docs, in the same
    // order, formed without storing the vectors: bit for bit the same bounds.)
    // The cells' sums fused into as few passes as their dependences allow (forward: x1 and
    // Σx, then Σd² and the centred sums, then hx; backward: x1, Σx, Σdy and mean|dy|, then
    // Σd², then hx, Σdy·h and mean|h·dy|, then mean|z·x|), each sum in its own order.
    // The first pass, of the cells scaled by 2^-se: `(Σx, Σdy, x1·m, mean|dy|·m)`, and the
    // largest |x| into `amax`.
    let first = |se: i32, amax: &mut f64| -> (Iv, Iv, f64, f64) {
        let x = |i: usize| iv_ldexp(xc.get(i), -se);
        let (mut x1, mut dy1) = (0.0, 0.0);
        match &dyc {
            Some(dyc) => {
                let [sx, sd] = sum_ivs_by(0, m, &|i| ([x(i), dyc.get(i)], ()), &mut |t, ()| {
                    x1 += t[0].up();
                    dy1 += t[1].up();
                    *amax = max_not_nan(*amax, t[0].v.abs());
                });
                (sx, sd, x1, dy1)
            }
            None if matches!(op, Op::Forward) => {
                let [sx] = sum_ivs_by(0, m, &|i| ([x(i)], ()), &mut |t, ()| {
                    x1 += t[0].up();
                    *amax = max_not_nan(*amax, t[0].v.abs());
                });
                (sx, Iv::ZERO, x1, dy1)
            }
            None => (Iv::ZERO, Iv::ZERO, sum_f((0..m).map(|i| x(i).up())), dy1),
        }
    };
    // Formed at se = 0, which is the largest |x| (taken in the same pass) gives but for the
    // f64 huge and tiny classes; then formed again at their se.
    let mut amax = 0f64;
    let (mut mu_sum, mut sdy, mut x1, mut dy1) = first(0, &mut amax);
    let se = if matches!(op, Op::Forward | Op::Backward) {
        exponent_of_max(amax, eps.to_f64().unwrap_or(f64::INFINITY))
    } else {
        0
    };
    if se != 0 {
        (mu_sum, sdy, x1, dy1) = first(se, &mut 0.0);
    }
    let x = |i: usize| iv_ldexp(xc.get(i), -se);
    let mf = m as f64;
    let one = |n: &str| iv_of(&inp.values[n][0]);
    let eps_q = QSqrt::rational(eps.clone());
    let eps_iv = iv_ldexp(iv_of(&eps_q), -2 * se);
    let zero = Rational::from_integer(0.into());
    let mut centred = (0.0, 0.0);
    let x1 = x1 / mf;

    // mean and r: computed for forward/backward, handed in (exact q) otherwise.
    let (mu, r) = match op {
        Op::Forward | Op::Backward => {
            let mu = mu_sum.div(mf);
            let (mut dx, mut var_mag) = (0.0, 0.0);
            let fwd = op == Op::Forward;
            let [var] = sum_ivs_by(
                0,
                m,
                &|i| {
                    let e = x(i);
                    let d = e.sub(mu);
                    ([d.mul(d)], (e, d))
                },
                &mut |_, (e, d)| {
                    if fwd {
                        // centred_sums(m, &x, mu)
                        let ad = d.up();
                        dx += ad * e.up();
                        var_mag += ad * ad;
                    }
                },
            );
            centred = (dx / mf, var_mag / mf);
            let var = var.div(mf);
            match rsqrt_iv(var.add(eps_iv)) {
                Some(r) => (mu, r),
                None => {
                    let (mu_e, var_e) = bnconf_spec::channel::batch_stats(&exact_x());
                    let q = exact_rational(&var_e) + eps;
                    if q <= zero {
                        return Err(c1_error(c, "var + eps", &q));
                    }
                    let r = rsqrt_iv(iv_of(&QSqrt::rational(scale_q(q, se)))).unwrap_or(Iv {
                        v: 0.0,
                        e: f64::INFINITY,
                    });
                    let mu = iv_ldexp(iv_of(&mu_e), -se);
                    centred = centred_sums(m, &x, mu);
                    (mu, r)
                }
            }
        }
        Op::Eval | Op::SyncForward | Op::SyncBackward => {
            let mean = exact_rational(&inp.values["mean"][0]);
            let (q, what) = if op == Op::Eval {
                (exact_rational(&inp.values["var"][0]) + eps, "var + eps")
            } else {
                let m2 = exact_rational(&inp.values["m2"][0]);
                (m2 - &mean * &mean + eps, "m2 - mean^2 + eps")
            };
            if q <= zero {
                return Err(c1_error(c, what, &q));
            }
            let r = rsqrt_iv(iv_of(&QSqrt::rational(q))).unwrap_or(Iv {
                v: 0.0,
                e: f64::INFINITY,
            });
            (iv_of(&inp.values["mean"][0]), r)
        }
        Op::RunningUpdate | Op::SyncStats => unreachable!("returned above"),
    };
    let ru = r.up();
    // h_i = (x_i − mu)·r, |x_i|, |h_i| (upper bounds)
    let h = |i: usize| x(i).sub(mu).mul(r);
    // hx, and for backward Σdy·h and mean|h·dy| in the same pass
    let (mut hx, mut hdy) = (0.0, 0.0);
    let sdyh = match &dyc {
        Some(dyc) => {
            let [sdyh] = sum_ivs_by(
                0,
                m,
                &|i| {
                    let xi = x(i);
                    let (hi, d) = (xi.sub(mu).mul(r), dyc.get(i));
                    ([d.mul(hi)], (hi, xi, d))
                },
                &mut |_, (hi, xi, d)| {
                    hx += hi.up() * xi.up();
                    hdy += hi.up() * d.up();
                },
            );
            sdyh
        }
        None => {
            hx = sum_f((0..m).map(|i| h(i).up() * x(i).up()));
            Iv::ZERO
        }
    };
    let hx = hx / mf;
    let mut cb = CellBound {
        op,
        se,
        back: 1.0,
        gate: if is_elementwise(op, 0) {
            k_allowance(1) / k_allowance(m)
        } else {
            1.0
        },
        mu,
        r,
        a: Iv::ZERO,
        bb: Iv::ZERO,
        ru,
        gm: one("gamma").up(),
        bt: 0.0,
        x1,
        hx,
        dk: mean_sq(m, x1),
        dy1: 0.0,
        hdy: 0.0,
        zx: 0.0,
        bu: 0.0,
        au: 0.0,
        muu: 0.0,
        vu: 0.0,
        m2u: 0.0,
    };

    let mut out = match op {
        Op::Forward => {
            cb.bt = one("beta").up();
            let (dx, var_mag) = centred;
            let mut var = eb(2.0 * dx, var_mag);
            var.mag2 = mean_sq(m, x1);
            vec![vec![], vec![eb(x1, x1)], vec![var]]
        }
        Op::Backward => {
            let dyc = dyc.as_ref().expect("backward's dy");
            let dy = |i: usize| dyc.get(i);
            let a = sdy.div(mf);
            let bb = sdyh.div(mf);
            // mean|z·x| with z_j = dy_j − a − h_j·bb (mean|dy|, mean|h·dy| formed above)
            let mut zx = 0.0;
            for i in 0..m {
                let az = dy(i).sub(a).sub(h(i).mul(bb)).up();
                zx += az * x(i).up();
            }
            let (dy1, hdy, zx) = (dy1 / mf, hdy / mf, zx / mf);
            (cb.a, cb.bb, cb.dy1, cb.hdy, cb.zx) = (a, bb, dy1, hdy, zx);
            (cb.bu, cb.au) = (bb.up(), a.up());
            let dk = cb.dk;
            let mut dgamma = eb(mf * hdy + ru * mf * zx, mf * hdy + x1 * ru * mf * dy1);
            dgamma.mag2 = dk * ru * ru / 2.0 * mf * hdy;
            vec![vec![], vec![dgamma], vec![eb(mf * dy1, mf * dy1)]]
        }
        Op::Eval => {
            cb.bt = one("beta").up();
            (cb.muu, cb.vu) = (one("mean").up(), one("var").up());
            vec![vec![]]
        }
        Op::SyncForward => {
            cb.bt = one("beta").up();
            (cb.muu, cb.m2u) = (one("mean").up(), one("m2").up());
            vec![vec![]]
        }
        Op::SyncBackward => {
            let (muu, m2u) = (one("mean").up(), one("m2").up());
            let a = one("mean_dy");
            let k = one("mean_dy_xhat");
            // (`bb`, `bu` hold the handed-in mean_dy_xhat here)
            (cb.muu, cb.m2u, cb.a, cb.bb, cb.au, cb.bu) = (muu, m2u, a, k, a.up(), k.up());
            let dyc = dy_cells.expect("sync backward's dy");
            let dy = |i: usize| dyc.get(i);
            let vs = m2u + muu * muu;
            let sdy = sum_iv_by(0, m, &dy);
            let sdyh = sum_iv_by(0, m, &|i| dy(i).mul(h(i)));
            // Σ|h·dy|, Σ|dy·x|, Σ|dy| in one pass
            let (mut hdy, mut dyx, mut s1) = (0.0, 0.0, 0.0);
            for i in 0..m {
                let ady = dy(i).up();
                hdy += h(i).up() * ady;
                dyx += ady * x(i).up();
                s1 += ady;
            }
            let t = r.mul(mu).mul(sdyh).sub(sdy).up();
            let dgamma = eb(
                hdy + ru * dyx + ru * muu * t + ru * ru * sdyh.up() * m2u / 2.0,
                hdy * (1.0 + ru * ru * vs / 2.0),
            );
            vec![vec![], vec![dgamma], vec![eb(s1, s1)]]
        }
        Op::RunningUpdate | Op::SyncStats => unreachable!("returned above"),
    };
    if se != 0 {
        let degrees: &[i32] = match op {
            Op::Forward => &[0, 1, 2],
            _ => &[-1, 0, 0],
        };
        cb.back = ldexp(1.0, degrees[0] * se);
        for (o, &d) in out.iter_mut().zip(degrees).skip(1) {
            let f = ldexp(1.0, d * se);
            for b in o.iter_mut() {
                *b = scaled(*b, f);
            }
        }
    }
    Ok(ChannelBound {
        cell: Some(cb),
        outputs: out,
    })
}

/// The second-order allowance of a computed mean, in the units of `mag2`: a kernel's mean
/// may err by as much as the mean's own gate accepts, `|δ| <= δ̄ = k(m)·u·(cond + mag) =
/// 2·k(m)·u·X1` (forward `mean`: `cond = mag = X1`), and the `δ²` it leaves in a two-pass
/// variance enters an output `o` as `|∂o/∂q|·δ̄²`. The gate multiplies `mag2` by `k·u²`, so
/// `mag2 = 4·k(m)·X1²·|∂o/∂q|` gives exactly `δ̄²·|∂o/∂q|`. This returns `4·k(m)·X1²`
/// (rounded up); callers multiply by the output's sensitivity to `q`.
///
/// Why not `δ̄ = k(m)·u·X1`: then a kernel whose mean passes could fail through its variance.
/// A sequential f32 sum over a constant channel of 96 cells errs by `20.7·u·X1` (mean ratio
/// 10.4 of `k = 17.2`); its two-pass variance `δ²` then has ratio `20.7²/17.2 = 25`
/// (test `replicated::sequential_sum_on_a_constant_channel_conforms`).
pub(crate) fn mean_sq(m: usize, x1: f64) -> f64 {
    4.0 * k_allowance(m) * x1 * x1 * SAFE
}

/// `(mean|d·x|, mean(d²))` (upper bounds) of the centred cells `d = x − mu`: the
/// variance's `cond / 2` and `mag`.
fn centred_sums(m: usize, x: &impl Fn(usize) -> Iv, mu: Iv) -> (f64, f64) {
    let mf = m as f64;
    let (mut dx, mut var_mag) = (0.0, 0.0);
    for i in 0..m {
        let e = x(i);
        let ad = e.sub(mu).up();
        dx += ad * e.up();
        var_mag += ad * ad;
    }
    (dx / mf, var_mag / mf)
}

/// A channel's cell input as enclosures ([`channel_bound`]): stored, or formed from its f64
/// values on each use ([`iv_of_f64`]).
trait CellGet: Sync {
    fn len(&self) -> usize;
    /// The enclosure of cell `i`.
    fn get(&self, i: usize) -> Iv;
}

impl CellGet for [Iv] {
    fn len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        self[i]
    }
}

impl CellGet for [f32] {
    fn len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        iv_of_f64(self[i] as f64)
    }
}

impl CellGet for [f64] {
    fn len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        iv_of_f64(self[i])
    }
}

impl CellGet for InPlace<'_> {
    fn len(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        iv_of_f64(self.at(i))
    }
}

impl<T: Copy + Into<f64> + Sync> CellGet for Strided<'_, T> {
    fn len(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        iv_of_f64(self.data[self.start + i * self.step].into())
    }
}

impl<T: Copy + Into<f64> + Sync> CellGet for Runs<'_, T> {
    fn len(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn get(&self, i: usize) -> Iv {
        iv_of_f64(self.data[self.offset(i)].into())
    }
}

/// `running_update` (module docs' model; `a` = momentum, `w_old`, `w_batch` its weights,
/// `c` the Bessel factor of the convention, 1 for ONNX):
///
/// * `new_mean`: `cond = w_old*|rm| + w_batch*X1 + a*|mean - rm|` (the `a` entry: a kernel
///   may hold the momentum in its dtype), `mag = w_old*|rm| + w_batch*X1`.
/// * `new_var`: `cond = w_old*|rv| + w_batch*c*2*mean|d*x| + a*|c*var - rv|`,
///   `mag = w_old*|rv| + w_batch*c*mean(d²)`, `mag2 = w_batch*c*4*k(m)*X1²` (forward's var).
///
/// These are the exact componentwise condition numbers (each Jacobian entry has one sign),
/// evaluated as upper bounds.
fn bound_running_update(inp: &ChannelIn<QSqrt>) -> Vec<Vec<ElementBudget>> {
    let xs = &inp.values["x"];
    let m = xs.len();
    let mf = m as f64;
    let x: Vec<Iv> = xs.iter().map(iv_of).collect();
    let ax: Vec<f64> = x.iter().map(|e| e.up()).collect();
    let x1 = sum_f(ax.iter().copied()) / mf;
    let mu = sum_iv(&x).div(mf);
    let d: Vec<Iv> = x.iter().map(|e| e.sub(mu)).collect();
    let var = sum_iv(&d.iter().map(|e| e.mul(*e)).collect::<Vec<_>>()).div(mf);
    let (dx, var_mag) = centred_sums(m, &|i| x[i], mu);
    let one = |n: &str| iv_of(&inp.values[n][0]);
    let (rm, rv, a) = (one("running_mean"), one("running_var"), one("momentum"));
    let pytorch = inp.convention == Some(bnconf_spec::op::Convention::Pytorch);
    let one_minus = Iv { v: 1.0, e: 0.0 }.sub(a);
    let (w_old, w_batch) = if pytorch {
        (one_minus, a)
    } else {
        (a, one_minus)
    };
    let c = if pytorch && m > 1 {
        mf / (mf - 1.0) * (1.0 + 2.0 * U64)
    } else {
        1.0
    };
    let (wo, wb, au) = (w_old.up(), w_batch.up(), a.up());
    let new_mean = eb(
        wo * rm.up() + wb * x1 + au * mu.sub(rm).up(),
        wo * rm.up() + wb * x1,
    );
    let mut new_var = eb(
        wo * rv.up() + wb * c * 2.0 * dx + au * var.scale(c).sub(rv).up(),
        wo * rv.up() + wb * c * var_mag,
    );
    new_var.mag2 = wb * c * mean_sq(m, x1);
    vec![vec![new_mean], vec![new_var]]
}

/// `sync_stats` (`w_r = n_r/N`; counts are exact and not perturbed):
///
/// * `mean`: `cond = mag = Σ w_r*|mean_r|`; `m2`: `cond = mag = Σ w_r*|m2_r|`.
/// * `var = m2 - mean²`: `cond = Σ w_r*|m2_r| + 2*|mean|*Σ w_r*|mean_r|` (exact),
///   `mag = Σ w_r*|m2_r| + Σ w_r*mean_r² + 2*|mean|*Σ w_r*|mean_r| + mean²`: the summands of
///   the raw-moment form and of Chan's centred merge (`m2_r - mean_r²` per shard).
fn bound_sync_stats(inp: &ChannelIn<QSqrt>) -> Vec<Vec<ElementBudget>> {
    let n: Vec<f64> = inp.values["shard_count"]
        .iter()
        .map(|v| iv_of(v).v)
        .collect();
    let total = sum_f(n.iter().copied());
    let w: Vec<f64> = n
        .iter()
        .map(|&k| {
            if k == 0.0 {
                0.0
            } else {
                k / total * (1.0 + 2.0 * U64)
            }
        })
        .collect();
    let mu: Vec<Iv> = inp.values["shard_mean"].iter().map(iv_of).collect();
    let m2: Vec<Iv> = inp.values["shard_m2"].iter().map(iv_of).collect();
    let s_mu = sum_f(w.iter().zip(&mu).map(|(w, v)| w * v.up()));
    let s_m2 = sum_f(w.iter().zip(&m2).map(|(w, v)| w * v.up()));
    let s_mu2 = sum_f(w.iter().zip(&mu).map(|(w, v)| w * v.up() * v.up()));
    // |mean| <= Σ w_r |mean_r|
    let var_cond = s_m2 + 2.0 * s_mu * s_mu;
    vec![
        vec![eb(s_mu, s_mu)],
        vec![eb(s_m2, s_m2)],
        vec![eb(var_cond, s_m2 + s_mu2 + 2.0 * s_mu * s_mu + s_mu * s_mu)],
    ]
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
