//! The family's float algorithm, written once over impl's [`Real`] working type and the
//! shared [`Grouping`]: per group the statistics (two-pass, Welford or, as a defect,
//! one-pass), then the forward `y = w·xhat + b` or the closed-form backward (three terms,
//! two for rms_norm; `dgamma`, `dbeta` summed over every cell using the parameter). A
//! [`FamilyRecipe`] picks the algorithm and, for a known-bad kernel, one [`Flaw`].

use super::case::FamilyCase;
use super::grouping::{channel_dims, channel_offset, Grouping};
use super::kernel::FamilyKernel;
use super::vocab::{Family, FamilyOp, RmsConvention};
use crate::real::Real;
use crate::stats::{Moments, Summation};
use crate::{Dtype, Expected, Outputs, Unsupported};

/// One planted defect of a known-bad family kernel (DESIGN §9's bug shapes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flaw {
    /// The variance one-pass, `max(E[x²] − mean², 0)`, in forward and backward.
    OnePass,
    /// `rstd = 1/sqrt(var)`: eps dropped.
    NoEps,
    /// `rstd = 1/(sqrt(var) + eps)`.
    EpsOutsideSqrt,
    /// `dgamma` accumulated in bf16 (the accumulator rounded to bf16 after every addition).
    DgammaBf16,
    /// `Σx²` accumulated in f16 on f16 data: overflows once a cell has |x| ≥ 256.
    SumSqF16,
    /// A channel's group is `c >> log2(P)` with `P` = C/G rounded down to a power of two
    /// (clamped to the last group).
    Pow2Groups,
    /// Channels-last data indexed as channels-first (`(n·C + c)·S + s`).
    ChannelsLastAsNchw,
    /// The backward reduces over the last axis only (rows of the last extent), whatever
    /// `normalized_ndim`.
    BackwardOneAxis,
    /// The `offset` convention is ignored: `w = gamma`.
    OffsetIgnored,
    /// The backward recomputes the variance one-pass (`E[x²] − mean²`); the forward is right.
    BackwardOnePass,
    /// `dgamma` (an f32 output in the mixed precisions) summed from `xhat` kept in the half
    /// activation type, as a memory-saving backward that recomputes `xhat` from the half `y`.
    HalfXhatDgamma,
    /// `dgamma` and `dbeta` (f32 outputs in the mixed precisions) summed over the rows left to
    /// right with the accumulator stored in the half activation type after every addition.
    HalfParamSums,
    /// `dgamma` (an f32 output in the mixed precisions) summed from `xhat = (x − mean)·rstd`
    /// with `mean` and `rstd` rounded to the half activation type, as a compiled backward that keeps the
    /// recomputed statistics in the input's dtype.
    HalfRstdDgamma,
    /// On f64 data, everything computed in f32: every input (`x`, `dy`, `gamma`, `beta`) and
    /// `eps` rounded to f32, the f32 recipe run, its outputs widened to f64 (the shape of
    /// MLX's CPU fallback for float64 `mx.fast.layer_norm`/`rms_norm`). Other dtypes already
    /// work in f32: there it is the good kernel.
    F32Compute,
    /// On f64 data, `eps` rounded to f32 (an f32 epsilon parameter or attribute), everything
    /// else in f64: the shape of candle-nn's `ops::layer_norm_slow(x, gamma, beta, eps: f32)`,
    /// ONNX's float `epsilon` attribute and Paddle's float epsilon. Other dtypes already take
    /// eps in f32: there it is the good kernel.
    EpsF32,
    /// rms_norm on f64 data with `x` and `gamma` rounded to f32 and `Σx²/K` summed in f32; eps
    /// added and the reciprocal square root taken in f64, `y = x·rstd·gamma` in f64 from the
    /// rounded `x` and `gamma` (Apache TVM 0.27's `topi.nn.rms_norm`, which casts data and
    /// weight to float32 whatever their dtype).
    F32InputsRms,
    /// rms_norm on f64 data with the rms `sqrt(Σx²/K + eps)` computed in f32 (x rounded to f32,
    /// eps to f32) and widened, the rest in f64 (burn-nn 0.22's `RmsNorm::forward`, which casts
    /// x to f32 for the rms).
    F32Rms,
    /// The variance (rms_norm: the mean square) doubled: a sharpness control.
    VarDoubled,
    /// `rstd` 25 % too large: a sharpness control.
    RstdOff25,
}

/// A family kernel: its family, statistic algorithm, storage of per-cell intermediates and at
/// most one [`Flaw`]. Working precision: f64 for f64 data, f32 otherwise; outputs rounded
/// once to their dtype.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FamilyRecipe {
    pub name: &'static str,
    pub description: &'static str,
    pub family: Family,
    pub expected: Expected,
    /// Mean and variance of a centered group (rms_norm ignores it: `Σx²/K`, pairwise).
    pub moments: Moments,
    /// Per-cell intermediates (`xhat`, `dy·w`) rounded to the storage dtype (f16/bf16
    /// activations kept in the half type; sums still in the working precision).
    pub half_storage: bool,
    /// Whether the forward returns `mean`/`rstd` (else `y` only).
    pub stats_out: bool,
    pub flaw: Option<Flaw>,
    pub defective_ops: &'static [FamilyOp],
    /// Range-robust statistics: each group's cells scaled by a power of two that brings its
    /// largest `|x|` into `[1, 2)` before the sums (exact, as LAPACK's `nrm2` scales), so that
    /// squares neither overflow nor underflow; `rstd` scaled back.
    pub scaled: bool,
}

impl FamilyKernel for FamilyRecipe {
    fn name(&self) -> &'static str {
        self.name
    }
    fn family(&self) -> Family {
        self.family
    }
    fn expected(&self) -> Expected {
        self.expected
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn defective_ops(&self) -> &'static [FamilyOp] {
        self.defective_ops
    }
    fn defect_dtypes(&self) -> &'static [Dtype] {
        match self.flaw {
            Some(Flaw::SumSqF16) => &[Dtype::F16],
            // The half types' cancellation sweep is mild (its inputs must stay well-posed at
            // the half type's u): a one-pass variance in f32 shows in f32 and f64 only.
            Some(Flaw::OnePass | Flaw::BackwardOnePass) => &[Dtype::F32, Dtype::F64],
            Some(Flaw::HalfXhatDgamma | Flaw::HalfParamSums | Flaw::HalfRstdDgamma) => {
                &[Dtype::F16, Dtype::BF16]
            }
            // f32 is the working precision of every other dtype already
            Some(Flaw::F32Compute | Flaw::EpsF32 | Flaw::F32InputsRms | Flaw::F32Rms) => {
                &[Dtype::F64]
            }
            _ => Dtype::ALL,
        }
    }
    fn defect_mixed_only(&self) -> bool {
        // HalfParamSums in pure f16/bf16: the parameters' own type is the half one, and a
        // sequential sum of dy of both signs stays within its budget (pure bf16 fails only on
        // many-rows-same-sign, pure f16 nowhere).
        self.has(Flaw::HalfXhatDgamma)
            || self.has(Flaw::HalfParamSums)
            || self.has(Flaw::HalfRstdDgamma)
    }
    fn range_robust(&self) -> bool {
        self.scaled
    }
    fn run(&self, case: &FamilyCase) -> Result<Outputs, Unsupported> {
        if case.op.family() != self.family {
            return Err(Unsupported(format!(
                "op `{}` is not a {} op",
                case.op, self.family
            )));
        }
        let g = case
            .validate()
            .map_err(|e| Unsupported(format!("invalid case: {e}")))?;
        let g = self.grouping(case, g);
        Ok(if case.dtype == Dtype::F64 && !self.has(Flaw::F32Compute) {
            self.compute::<f64>(case, &g)
        } else {
            self.compute::<f32>(case, &g)
        })
    }
}

impl FamilyRecipe {
    fn has(&self, f: Flaw) -> bool {
        self.flaw == Some(f)
    }

    /// The grouping the kernel reduces over: the case's, or the defect's wrong one.
    fn grouping(&self, case: &FamilyCase, g: Grouping) -> Grouping {
        let dims = || channel_dims(case.layout, &case.shape).expect("validated");
        let groups = case.groups.unwrap_or(1);
        match self.flaw {
            Some(Flaw::Pow2Groups) => {
                let dims = dims();
                let per = dims.1 / groups;
                let shift = per.ilog2();
                let last = case.layout.channels_last();
                Grouping::channels_with(
                    dims,
                    groups,
                    |c| (c >> shift).min(groups - 1),
                    |n, c, s| channel_offset(last, dims, n, c, s),
                )
            }
            Some(Flaw::ChannelsLastAsNchw) => {
                let dims = dims();
                let per = dims.1 / groups;
                Grouping::channels_with(
                    dims,
                    groups,
                    |c| c / per,
                    |n, c, s| channel_offset(false, dims, n, c, s),
                )
            }
            Some(Flaw::BackwardOneAxis) if case.op.is_backward() => Grouping::last(&case.shape, 1)
                .expect("a valid `last` shape has a last axis")
                .with_params_of(&g),
            _ => g,
        }
    }

    /// `(mean, rstd)` of every group, in the working type.
    fn stats<A: Real>(&self, case: &FamilyCase, g: &Grouping, x: &[A]) -> (Vec<A>, Vec<A>) {
        let eps = if self.has(Flaw::EpsF32) {
            A::of(case.eps as f32 as f64)
        } else {
            A::of(case.eps)
        };
        let one_pass =
            self.has(Flaw::OnePass) || (case.op.is_backward() && self.has(Flaw::BackwardOnePass));
        let moments = if one_pass {
            Moments::OnePass
        } else {
            self.moments
        };
        let sumsq = if self.has(Flaw::SumSqF16) && case.dtype == Dtype::F16 {
            Summation::Storage16
        } else {
            Summation::Pairwise
        };
        g.groups()
            .iter()
            .map(|cells| {
                let xs: Vec<A> = cells.iter().map(|&i| x[i]).collect();
                if self.scaled {
                    return scaled_stats(case, &xs, moments, eps);
                }
                if let (Some(f @ (Flaw::F32InputsRms | Flaw::F32Rms)), false, Dtype::F64) =
                    (self.flaw, case.op.centered(), case.dtype)
                {
                    // the mean square of the f32-rounded cells, summed in f32
                    let x32: Vec<f32> = xs.iter().map(|v| v.to_f64() as f32).collect();
                    let ss = Summation::Pairwise.sum(Dtype::F32, x32.len(), |i| x32[i] * x32[i]);
                    let ms = ss / x32.len() as f32;
                    let rstd = match f {
                        Flaw::F32Rms => 1.0 / f64::from((ms + case.eps as f32).sqrt()),
                        _ => 1.0 / (f64::from(ms) + case.eps).sqrt(),
                    };
                    return (A::ZERO, A::of(rstd));
                }
                let (mean, var) = if case.op.centered() {
                    moments.mean_var(Summation::Pairwise, case.dtype, &xs)
                } else {
                    let ss = sumsq.sum(case.dtype, xs.len(), |i| xs[i] * xs[i]);
                    (A::ZERO, ss / A::count(xs.len()))
                };
                let rstd = match self.flaw {
                    Some(Flaw::NoEps) => A::ONE / var.sqrt(),
                    Some(Flaw::EpsOutsideSqrt) => A::ONE / (var.sqrt() + eps),
                    Some(Flaw::VarDoubled) => A::ONE / (var + var + eps).sqrt(),
                    Some(Flaw::RstdOff25) => A::of(1.25) / (var + eps).sqrt(),
                    _ => A::ONE / (var + eps).sqrt(),
                };
                (mean, rstd)
            })
            .unzip()
    }

    fn compute<A: Real>(&self, case: &FamilyCase, g: &Grouping) -> Outputs {
        // F32InputsRms: x and gamma rounded to f32 first (f64 data)
        let narrow = |name: &str| {
            self.has(Flaw::F32InputsRms)
                && case.dtype == Dtype::F64
                && matches!(name, "x" | "gamma")
        };
        let read = |name: &str| -> Vec<A> {
            let to32 = narrow(name);
            case.input(name)
                .iter()
                .map(|&v| A::of(if to32 { v as f32 as f64 } else { v }))
                .collect()
        };
        // An intermediate kept for an output is stored in that output's dtype: `xhat` and
        // `dy·w` in the activations' (y, dx), `xhat` for dgamma in dgamma's (f32 in the mixed
        // precisions: the half type there is the defect HalfXhatDgamma).
        let keep_in = |d: Dtype, v: A| {
            if self.half_storage {
                A::of(d.round(v.to_f64()))
            } else {
                v
            }
        };
        let keep = |v: A| keep_in(case.dtype, v);
        let x = read("x");
        let gamma = case.affine.has_weight().then(|| read("gamma"));
        let offset = case.convention == RmsConvention::Offset && !self.has(Flaw::OffsetIgnored);
        let w = |p: usize| match &gamma {
            Some(gm) if offset => A::ONE + gm[p],
            Some(gm) => gm[p],
            None => A::ONE,
        };
        let (mean, rstd) = self.stats(case, g, &x);
        let mut xhat_raw = vec![A::ZERO; x.len()];
        for (gi, cells) in g.groups().iter().enumerate() {
            for &i in cells {
                xhat_raw[i] = (x[i] - mean[gi]) * rstd[gi];
            }
        }
        let xhat: Vec<A> = xhat_raw.iter().map(|&v| keep(v)).collect();
        let mut out = Outputs::new();
        let mut put = |name: &str, v: &[A]| {
            let d = case.dtype_of(name);
            out.insert(
                name.to_string(),
                v.iter().map(|a| d.round(a.to_f64())).collect(),
            );
        };
        let params = g.param_of();
        if !case.op.is_backward() {
            let beta = case.affine.has_bias().then(|| read("beta"));
            let b = |p: usize| beta.as_ref().map_or(A::ZERO, |bt| bt[p]);
            let y: Vec<A> = (0..x.len())
                .map(|i| w(params[i]) * xhat[i] + b(params[i]))
                .collect();
            put("y", &y);
            if self.stats_out {
                if case.op.centered() {
                    put("mean", &mean);
                }
                put("rstd", &rstd);
            }
            return out;
        }
        let dy = read("dy");
        let gw: Vec<A> = (0..x.len()).map(|i| keep(dy[i] * w(params[i]))).collect();
        let pairwise = |cells: &[usize], term: &dyn Fn(usize) -> A| {
            Summation::Pairwise.sum(case.dtype, cells.len(), |j| term(cells[j]))
        };
        let mut dx = vec![A::ZERO; x.len()];
        for (gi, cells) in g.groups().iter().enumerate() {
            let k = A::count(cells.len());
            let mean_g = pairwise(cells, &|i| gw[i]) / k;
            let mean_gx = pairwise(cells, &|i| gw[i] * xhat[i]) / k;
            for &i in cells {
                let mut t = gw[i] - xhat[i] * mean_gx;
                if case.op.centered() {
                    t = t - mean_g;
                }
                dx[i] = rstd[gi] * t;
            }
        }
        put("dx", &dx);
        let by_param = g.cells_of_params();
        if case.affine.has_weight() {
            let half_sums =
                self.has(Flaw::HalfParamSums) && matches!(case.dtype, Dtype::F16 | Dtype::BF16);
            let (sum, acc) = if self.has(Flaw::DgammaBf16) {
                (Summation::Storage16, Dtype::BF16)
            } else if half_sums {
                (Summation::Storage16, case.dtype)
            } else {
                (Summation::Pairwise, case.dtype)
            };
            let xd = if self.has(Flaw::HalfXhatDgamma) {
                case.dtype
            } else {
                case.dtype_of("dgamma")
            };
            let half_rstd =
                self.has(Flaw::HalfRstdDgamma) && matches!(case.dtype, Dtype::F16 | Dtype::BF16);
            let xhat_dg: Vec<A> = if half_rstd {
                let mut v = vec![A::ZERO; x.len()];
                for (gi, cells) in g.groups().iter().enumerate() {
                    let r = A::of(case.dtype.round(rstd[gi].to_f64()));
                    let m = A::of(case.dtype.round(mean[gi].to_f64()));
                    for &i in cells {
                        v[i] = (x[i] - m) * r;
                    }
                }
                v
            } else {
                xhat_raw.iter().map(|&v| keep_in(xd, v)).collect()
            };
            let dgamma: Vec<A> = by_param
                .iter()
                .map(|cells| sum.sum(acc, cells.len(), |j| dy[cells[j]] * xhat_dg[cells[j]]))
                .collect();
            put("dgamma", &dgamma);
        }
        if case.affine.has_bias() {
            let dbeta: Vec<A> = by_param
                .iter()
                .map(|cells| {
                    if self.has(Flaw::HalfParamSums)
                        && matches!(case.dtype, Dtype::F16 | Dtype::BF16)
                    {
                        Summation::Storage16.sum(case.dtype, cells.len(), |j| dy[cells[j]])
                    } else {
                        pairwise(cells, &|i| dy[i])
                    }
                })
                .collect();
            put("dbeta", &dbeta);
        }
        out
    }
}

/// `(mean, rstd)` of one group by [`FamilyRecipe::scaled`]: with `s = 2^-e` bringing the
/// largest `|x|` into `[1, 2)`, the moments of `s·x` (exact scalings), then
/// `mean = mean'/s` and `rstd = s/sqrt(var' + eps·s²)` (or, where `eps·s²` overflows because
/// the cells are tiny, `1/sqrt(var'/s² + eps)`: eps dominates).
fn scaled_stats<A: Real>(case: &FamilyCase, xs: &[A], moments: Moments, eps: A) -> (A, A) {
    let amax = xs.iter().map(|v| v.to_f64().abs()).fold(0.0f64, f64::max);
    if amax == 0.0 || !amax.is_finite() {
        let (mean, var) = if case.op.centered() {
            moments.mean_var(Summation::Pairwise, case.dtype, xs)
        } else {
            (A::ZERO, A::ZERO)
        };
        return (mean, A::ONE / (var + eps).sqrt());
    }
    // s = 2^-e with 2^e ≤ amax < 2^(e+1), as two factors so that neither overflows
    let e = amax.log2().floor() as i32;
    let (s1, s2) = (A::of(2f64.powi(-e / 2)), A::of(2f64.powi(-(e - e / 2))));
    let scaled: Vec<A> = xs.iter().map(|&v| v * s1 * s2).collect();
    let (mean, var) = if case.op.centered() {
        moments.mean_var(Summation::Pairwise, case.dtype, &scaled)
    } else {
        let ss = Summation::Pairwise.sum(case.dtype, scaled.len(), |i| scaled[i] * scaled[i]);
        (A::ZERO, ss / A::count(scaled.len()))
    };
    let (inv1, inv2) = (A::of(2f64.powi(e / 2)), A::of(2f64.powi(e - e / 2)));
    let eps_s = eps * s1 * s1 * s2 * s2;
    let rstd = if eps_s.to_f64().is_finite() {
        A::ONE / (var + eps_s).sqrt() * s1 * s2
    } else {
        A::ONE / (var / (inv1 * inv2) / (inv1 * inv2) + eps).sqrt()
    };
    (mean * inv1 * inv2, rstd)
}
