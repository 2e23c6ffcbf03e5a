//! One generic channel-wise driver. A kernel is a [`Recipe`]: a choice of working precision,
//! reduction algorithms and (for the known-bad kernels) one deliberate defect. The driver maps
//! the layout to channels, computes each channel in the working type, and rounds every output
//! to the case dtype at the end.

use crate::layout::{channel_cells, channel_dims};
use crate::real::{Real, Stored};
use crate::stats::{Moments, Summation, WelfordState};
use crate::{Case, Dtype, Expected, Kernel, Op, Outputs, Unsupported};

/// The float type a recipe computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkingType {
    /// f64 whatever the dtype.
    F64,
    /// The dtype's own working type: f64 for f64, f32 for f32, f16 and bf16.
    Native,
    /// The storage dtype itself: f64 for f64, f32 for f32, and every operation rounded to f16
    /// (bf16) for f16 (bf16) data, with no wider accumulator. Mixed precision stores its
    /// statistics in f32 and so computes in f32.
    Storage,
}

/// How `var = m2 - mean²` is formed in the sync ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncVar {
    /// `m2 - mean*mean`, two roundings.
    Plain,
    /// `fma(-mean, mean, m2)`, one rounding.
    Fma,
}

/// The deliberate defect of a known-bad recipe (besides `Moments::OnePass` and
/// `Summation::Storage16`, which are defects of the reduction itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Defect {
    /// `r = 1/(sqrt(var) + eps)` instead of `1/sqrt(var + eps)`.
    EpsOutsideSqrt,
    /// Computed variance divided by `m - 1` (when `m > 1`) instead of `m`.
    UnbiasedVar,
    /// Backward drops the `xhat * mean(dy*xhat)` term of `dx`.
    NoProjection,
    /// Sync ops ignore the handed-in statistics and use this shard's own.
    LocalStatsInSync,
    /// `r` truncated to 12 significant bits, like a hardware rsqrt estimate.
    Rsqrt12,
    /// `running_update` weights old and batch statistics with the other convention's momentum
    /// (`a` and `1-a` swapped).
    SwappedMomentum,
    /// `running_update` uses the other convention's variance estimator (biased for PyTorch,
    /// unbiased for ONNX).
    WrongBessel,
    /// `sync_stats` averages the shards' statistics with equal weights (the seed's plain
    /// all-reduce mean, right only for equal shards).
    EqualWeightShards,
    /// `sync_stats` averages the shards' variances (count-weighted), dropping the spread of
    /// the shard means.
    AveragedVariances,
    /// `sync_stats` clamps every count to at least 1, so an empty replica's stale statistics
    /// enter with weight 1.
    EmptyShardCountsOne,
    /// `y = 0` on a channel whose `gamma` is 0 (a "pruned channel" shortcut that forgets
    /// `beta`).
    ZeroGammaDropsBeta,
    /// `eps` held in f16 (as a kernel that stores its scalar arguments in the storage type
    /// would): 1e-5 becomes 1.0014e-5, 0.1 becomes 0.09998.
    EpsHalf,
    /// The variance it computes is twice the batch variance (so `y`, `dx` are off by about
    /// `1/sqrt(2)` where `var >> eps`): the control that a budget must be sharp enough to reject.
    DoubledVar,
    /// `r = 1.25 / sqrt(var + eps)`: the normalisation 25 % off.
    RstdOff25,
}

pub(crate) struct Recipe {
    pub name: &'static str,
    pub description: &'static str,
    pub expected: Expected,
    pub working_type: WorkingType,
    pub moments: Moments,
    pub summation: Summation,
    pub sync_var: SyncVar,
    pub defect: Option<Defect>,
    /// The ops where a known-bad recipe differs from its good counterpart.
    pub defective_ops: &'static [Op],
}

impl Kernel for Recipe {
    fn name(&self) -> &'static str {
        self.name
    }
    fn expected(&self) -> Expected {
        self.expected
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn defective_ops(&self) -> &'static [Op] {
        self.defective_ops
    }
    fn defect_suite(&self) -> &'static str {
        match self.moments {
            Moments::Blocked { flaw, .. } if flaw != crate::stats::BlockFlaw::None => "scale",
            Moments::WelfordHalfCount => "scale",
            _ => "default",
        }
    }
    fn run(&self, case: &Case) -> Result<Outputs, Unsupported> {
        let cells = validate(case).map_err(|e| Unsupported(format!("invalid case: {e}")))?;
        let native_f64 = case.dtype == Dtype::F64;
        Ok(match self.working_type {
            WorkingType::F64 => Driver::<f64>::new(self, case).run(&cells),
            WorkingType::Native if native_f64 => Driver::<f64>::new(self, case).run(&cells),
            WorkingType::Native => Driver::<f32>::new(self, case).run(&cells),
            // Mixed precision stores its statistics in f32: no half-only accumulation there.
            WorkingType::Storage if case.param_dtype != case.dtype => {
                Driver::<f32>::new(self, case).run(&cells)
            }
            WorkingType::Storage => match case.dtype {
                Dtype::F32 => Driver::<f32>::new(self, case).run(&cells),
                Dtype::F16 => Driver::<Stored<false>>::new(self, case).run(&cells),
                Dtype::BF16 => Driver::<Stored<true>>::new(self, case).run(&cells),
                Dtype::F64 => Driver::<f64>::new(self, case).run(&cells),
            },
        })
    }
}

/// Checks the layout, the inputs the op needs and their lengths, and `eps`; returns the
/// channel cells. Everything is checked from the shape alone before the cell table (one index
/// per element) is built, so a shape that disagrees with its inputs costs nothing.
pub fn validate(case: &Case) -> Result<Vec<Vec<usize>>, String> {
    let (c, m, n) = channel_dims(case.layout, &case.shape)?;
    if case.op == Op::SyncStats && case.layout != crate::Layout::Rows {
        return Err("op `sync_stats` takes layout `rows` (shape [C, R])".into());
    }
    if case.op == Op::RunningUpdate {
        if case.params.convention.is_none() {
            return Err("op `running_update` needs a convention".into());
        }
        if !(0.0..=1.0).contains(&case.params.momentum) {
            return Err(format!(
                "momentum = {} is not in [0, 1]",
                case.params.momentum
            ));
        }
    }
    for &name in case.op.inputs() {
        let v = case
            .inputs
            .get(name)
            .ok_or_else(|| format!("op `{}` needs input `{name}`", case.op.name()))?;
        let want = if crate::is_cell_array(name) {
            n
        } else if crate::is_shard_array(name) {
            m
        } else {
            c
        };
        if v.len() != want {
            return Err(format!(
                "input `{name}` has {} values, expected {want}",
                v.len()
            ));
        }
    }
    if !case.eps.is_finite() {
        return Err(format!("eps = {} is not finite", case.eps));
    }
    let (_, _, cells) = channel_cells(case.layout, &case.shape)?;
    Ok(cells)
}

/// One case being computed in working type `A`.
struct Driver<'a, A> {
    r: &'a Recipe,
    case: &'a Case,
    eps: A,
}

/// Per-channel results: cell arrays (in the channel's cell order) and scalars.
type ChannelOut<A> = Vec<(&'static str, Vec<A>)>;

impl<'a, A: Real> Driver<'a, A> {
    fn new(r: &'a Recipe, case: &'a Case) -> Self {
        let eps = if r.defect == Some(Defect::EpsHalf) {
            crate::Dtype::F16.round(case.eps)
        } else {
            case.eps
        };
        Driver {
            r,
            case,
            eps: A::of(eps),
        }
    }

    /// Input `name` read in the case dtype (correctly rounded, a no-op for valid cases).
    fn input(&self, name: &str) -> Vec<A> {
        let dt = self.case.dtype_of(name);
        self.case.inputs[name]
            .iter()
            .map(|&v| A::of(dt.round(v)))
            .collect()
    }

    fn run(&self, cells: &[Vec<usize>]) -> Outputs {
        let op = self.case.op;
        // Cell arrays (`x`, then `dy`) and per-channel inputs, each in the op's input order.
        let (cell_names, chan_names): (Vec<&str>, Vec<&str>) = op
            .inputs()
            .iter()
            .filter(|n| !crate::is_shard_array(n))
            .partition(|n| crate::is_cell_array(n));
        let cell_in: Vec<Vec<A>> = cell_names.iter().map(|n| self.input(n)).collect();
        let chan_in: Vec<Vec<A>> = chan_names.iter().map(|n| self.input(n)).collect();
        let n = cell_in[0].len();
        let mut out: Outputs = op
            .outputs()
            .iter()
            .map(|&name| {
                let len = if crate::is_cell_array(name) {
                    n
                } else {
                    cells.len()
                };
                (name.to_string(), vec![0.0; len])
            })
            .collect();
        for (c, idx) in cells.iter().enumerate() {
            let gather: Vec<Vec<A>> = cell_in
                .iter()
                .map(|a| idx.iter().map(|&i| a[i]).collect())
                .collect();
            let p: Vec<A> = chan_in.iter().map(|a| a[c]).collect();
            for (name, vals) in self.channel(op, &gather, &p) {
                let dst = out.get_mut(name).expect("op output");
                let dt = self.case.dtype_of(name);
                if crate::is_cell_array(name) {
                    for (&i, v) in idx.iter().zip(vals) {
                        dst[i] = dt.round(v.to_f64());
                    }
                } else {
                    dst[c] = dt.round(vals[0].to_f64());
                }
            }
        }
        out
    }

    /// One channel: `cells` holds `x` (and `dy`), `p` the per-channel inputs in the op's
    /// input order.
    fn channel(&self, op: Op, cells: &[Vec<A>], p: &[A]) -> ChannelOut<A> {
        let x = &cells[0];
        let local = self.r.defect == Some(Defect::LocalStatsInSync);
        match op {
            Op::RunningUpdate => self.running_update(x, p[0], p[1]),
            Op::SyncStats => self.sync_stats(&self.input("shard_count"), x, &cells[1]),
            Op::Forward => {
                let (y, mean, var) = self.forward(x, p[0], p[1]);
                vec![("y", y), ("mean", vec![mean]), ("var", vec![var])]
            }
            Op::SyncForward if local => vec![("y", self.forward(x, p[0], p[1]).0)],
            Op::SyncForward => {
                let (gamma, beta, mean, m2) = (p[0], p[1], p[2], p[3]);
                let r = self.inv_std(self.sync_var(mean, m2));
                vec![("y", self.normalize(x, mean, r, gamma, beta))]
            }
            Op::Eval => {
                let (gamma, beta, mean, var) = (p[0], p[1], p[2], p[3]);
                vec![("y", self.normalize(x, mean, self.inv_std(var), gamma, beta))]
            }
            Op::Backward => self.local_backward(x, &cells[1], p[0]),
            Op::SyncBackward if local => self.local_backward(x, &cells[1], p[0]),
            Op::SyncBackward => {
                let (gamma, mean, m2, mean_dy, mean_dy_xhat) = (p[0], p[1], p[2], p[3], p[4]);
                let r = self.inv_std(self.sync_var(mean, m2));
                self.backward(x, &cells[1], gamma, mean, r, Some((mean_dy, mean_dy_xhat)))
            }
        }
    }

    /// Training-mode forward on this channel's own statistics: `(y, mean, var)`.
    fn forward(&self, x: &[A], gamma: A, beta: A) -> (Vec<A>, A, A) {
        let (mean, var) = self.mean_var(x);
        (
            self.normalize(x, mean, self.inv_std(var), gamma, beta),
            mean,
            var,
        )
    }

    /// Backward through [`Self::forward`]: this channel's own statistics.
    fn local_backward(&self, x: &[A], dy: &[A], gamma: A) -> ChannelOut<A> {
        let (mean, var) = self.mean_var(x);
        self.backward(x, dy, gamma, mean, self.inv_std(var), None)
    }

    fn sum(&self, n: usize, term: impl Fn(usize) -> A) -> A {
        self.r.summation.sum(self.case.dtype, n, term)
    }

    /// This channel's own mean and variance (biased unless the recipe's defect says not).
    fn mean_var(&self, x: &[A]) -> (A, A) {
        let (mean, var) = self
            .r
            .moments
            .mean_var(self.r.summation, self.case.dtype, x);
        let m = x.len();
        match self.r.defect {
            Some(Defect::UnbiasedVar) if m > 1 => (mean, var * A::count(m) / A::count(m - 1)),
            Some(Defect::DoubledVar) => (mean, var + var),
            _ => (mean, var),
        }
    }

    /// `running_update`: this channel's batch statistics blended into the running ones.
    fn running_update(&self, x: &[A], running_mean: A, running_var: A) -> ChannelOut<A> {
        let (mean, var) = self.mean_var(x);
        let m = x.len();
        let a = A::of(self.case.params.momentum);
        let mut pytorch = self.case.params.convention == Some(crate::Convention::Pytorch);
        let mut unbiased = pytorch;
        match self.r.defect {
            Some(Defect::SwappedMomentum) => pytorch = !pytorch,
            Some(Defect::WrongBessel) => unbiased = !unbiased,
            _ => {}
        }
        let batch_var = if unbiased && m > 1 {
            var * (A::count(m) / A::count(m - 1))
        } else {
            var
        };
        let (w_old, w_batch) = if pytorch {
            (A::ONE - a, a)
        } else {
            (a, A::ONE - a)
        };
        vec![
            ("new_mean", vec![w_old * running_mean + w_batch * mean]),
            ("new_var", vec![w_old * running_var + w_batch * batch_var]),
        ]
    }

    /// `sync_stats`: count-weighted all-reduce of the shards' `(count, mean, E[x²])`; the
    /// Welford recipes merge centred summaries with Chan's formula instead.
    fn sync_stats(&self, counts: &[A], means: &[A], m2s: &[A]) -> ChannelOut<A> {
        let r = means.len();
        let counts: Vec<A> = match self.r.defect {
            Some(Defect::EmptyShardCountsOne) => counts
                .iter()
                .map(|&n| if n < A::ONE { A::ONE } else { n })
                .collect(),
            Some(Defect::EqualWeightShards) => vec![A::ONE; r],
            _ => counts.to_vec(),
        };
        let n = self.sum(r, |i| counts[i]);
        let mean = self.sum(r, |i| counts[i] * means[i]) / n;
        let (m2, var) = match (self.r.defect, self.r.moments) {
            (Some(Defect::AveragedVariances), _) => {
                let var = self.sum(r, |i| counts[i] * self.sync_var(means[i], m2s[i])) / n;
                (var + mean * mean, var)
            }
            (_, Moments::Welford { .. }) => {
                // Chan's merge of (n_r, mean_r, n_r*var_r), as a balanced tree; empty shards
                // are skipped.
                let shards = (0..r)
                    .filter(|&i| counts[i] > A::ZERO)
                    .map(|i| WelfordState {
                        n: counts[i],
                        mean: means[i],
                        m2: counts[i] * self.sync_var(means[i], m2s[i]),
                    })
                    .collect();
                let Some(WelfordState { n, mean, m2: ss }) = WelfordState::tree_merge(shards)
                else {
                    let nan = A::of(f64::NAN);
                    return vec![("mean", vec![nan]), ("m2", vec![nan]), ("var", vec![nan])];
                };
                let var = ss / n;
                return vec![
                    ("mean", vec![mean]),
                    ("m2", vec![var + mean * mean]),
                    ("var", vec![var]),
                ];
            }
            (_, Moments::TwoPassScaled) if matches!(self.case.dtype, Dtype::F16 | Dtype::BF16) => {
                // Weights first (w_r = n_r/N), so no product n_r·m2_r leaves a half type's
                // range.
                let w: Vec<A> = counts.iter().map(|&c| c / n).collect();
                let mean = self.sum(r, |i| w[i] * means[i]);
                let m2 = self.sum(r, |i| w[i] * m2s[i]);
                return vec![
                    ("mean", vec![mean]),
                    ("m2", vec![m2]),
                    ("var", vec![self.sync_var(mean, m2)]),
                ];
            }
            _ => {
                let m2 = self.sum(r, |i| counts[i] * m2s[i]) / n;
                (m2, self.sync_var(mean, m2))
            }
        };
        vec![("mean", vec![mean]), ("m2", vec![m2]), ("var", vec![var])]
    }

    fn sync_var(&self, mean: A, m2: A) -> A {
        match self.r.sync_var {
            SyncVar::Plain => m2 - mean * mean,
            SyncVar::Fma => (-mean).mul_add(mean, m2),
        }
    }

    /// `r = (var + eps)^(-1/2)`.
    fn inv_std(&self, var: A) -> A {
        match self.r.defect {
            Some(Defect::EpsOutsideSqrt) => A::ONE / (var.sqrt() + self.eps),
            Some(Defect::RstdOff25) => A::of(1.25) / (var + self.eps).sqrt(),
            Some(Defect::Rsqrt12) => A::of(truncate_to_12_bits(
                (A::ONE / (var + self.eps).sqrt()).to_f64(),
            )),
            _ => A::ONE / (var + self.eps).sqrt(),
        }
    }

    /// `y = gamma * ((x - mean) * r) + beta`.
    fn normalize(&self, x: &[A], mean: A, r: A, gamma: A, beta: A) -> Vec<A> {
        if self.r.defect == Some(Defect::ZeroGammaDropsBeta) && gamma == A::ZERO {
            return vec![A::ZERO; x.len()];
        }
        x.iter().map(|&v| gamma * ((v - mean) * r) + beta).collect()
    }

    /// `dx = gamma*r*(dy - mean_dy - xhat*mean_dy_xhat)`, `dgamma = Σ dy*xhat`, `dbeta = Σ dy`
    /// with `xhat = (x - mean)*r`. `means` are the handed-in `(mean_dy, mean_dy_xhat)` of the
    /// sync op; without them this channel's own `dbeta/m`, `dgamma/m` are used.
    fn backward(
        &self,
        x: &[A],
        dy: &[A],
        gamma: A,
        mean: A,
        r: A,
        means: Option<(A, A)>,
    ) -> ChannelOut<A> {
        let m = x.len();
        let xhat: Vec<A> = x.iter().map(|&v| (v - mean) * r).collect();
        let dbeta = self.sum(m, |i| dy[i]);
        let dgamma = self.sum(m, |i| dy[i] * xhat[i]);
        let (mean_dy, mean_dy_xhat) = means.unwrap_or((dbeta / A::count(m), dgamma / A::count(m)));
        let scale = gamma * r;
        let dx = (0..m)
            .map(|i| {
                let centred = dy[i] - mean_dy;
                if self.r.defect == Some(Defect::NoProjection) {
                    scale * centred
                } else {
                    scale * (centred - xhat[i] * mean_dy_xhat)
                }
            })
            .collect();
        vec![("dx", dx), ("dgamma", vec![dgamma]), ("dbeta", vec![dbeta])]
    }
}

/// `v` with its significand truncated to 12 bits (11 fraction bits): relative error below
/// 2^-11, the accuracy class of a hardware reciprocal-square-root estimate.
fn truncate_to_12_bits(v: f64) -> f64 {
    f64::from_bits(v.to_bits() & !((1u64 << (52 - 11)) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_12_bits() {
        assert_eq!(truncate_to_12_bits(1.0), 1.0);
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-12) + 2f64.powi(-30);
        assert_eq!(truncate_to_12_bits(v), 1.0 + 2f64.powi(-11));
        let x = std::f64::consts::PI;
        let rel = (truncate_to_12_bits(x) - x).abs() / x;
        assert!(rel > 0.0 && rel < 2f64.powi(-11));
    }
}
