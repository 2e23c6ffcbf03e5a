//! Reductions: summation orders and per-channel mean/variance algorithms.

use crate::real::Real;
use crate::Dtype;

/// How a sum of `n` terms is accumulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Summation {
    /// Left to right, one working-precision accumulator. No good kernel uses it any more (its
    /// error grows with m; see conformance/tests/large_channels.rs); the unit tests compare it.
    #[cfg_attr(not(test), allow(dead_code))]
    Sequential,
    /// Pairwise (cascaded): halves summed recursively, blocks of `PAIRWISE_BLOCK` left to right.
    Pairwise,
    /// Kahan–Babuška–Neumaier compensated summation.
    Compensated,
    /// DEFECT: left to right, but the accumulator is stored in a 16-bit float after every
    /// addition (f16 for f16 data, bf16 for every other dtype).
    Storage16,
}

pub(crate) const PAIRWISE_BLOCK: usize = 8;

impl Summation {
    /// `Σ_{i<n} term(i)` in `A`; `dtype` is the case's storage dtype.
    pub(crate) fn sum<A: Real>(self, dtype: Dtype, n: usize, term: impl Fn(usize) -> A) -> A {
        match self {
            Summation::Sequential => (0..n).fold(A::ZERO, |s, i| s + term(i)),
            Summation::Pairwise => pairwise(0, n, &term),
            Summation::Compensated => {
                let (mut s, mut c) = (A::ZERO, A::ZERO);
                for i in 0..n {
                    let v = term(i);
                    let t = s + v;
                    c = if abs(s) >= abs(v) {
                        c + ((s - t) + v)
                    } else {
                        c + ((v - t) + s)
                    };
                    s = t;
                }
                s + c
            }
            Summation::Storage16 => {
                let low = if dtype == Dtype::F16 {
                    Dtype::F16
                } else {
                    Dtype::BF16
                };
                (0..n).fold(A::ZERO, |s, i| A::of(low.round((s + term(i)).to_f64())))
            }
        }
    }
}

fn pairwise<A: Real>(lo: usize, hi: usize, term: &impl Fn(usize) -> A) -> A {
    if hi - lo <= PAIRWISE_BLOCK {
        (lo..hi).fold(A::ZERO, |s, i| s + term(i))
    } else {
        let mid = lo + (hi - lo) / 2;
        pairwise(lo, mid, term) + pairwise(mid, hi, term)
    }
}

fn abs<A: Real>(v: A) -> A {
    if v < A::ZERO {
        -v
    } else {
        v
    }
}

/// How a channel's mean and (biased) variance are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moments {
    /// `mean = Σx/m`, then `var = Σ(x-mean)²/m`.
    TwoPass,
    /// `mean = Σ(x·(1/m))`, then `var = Σ((x-mean)²·(1/m))`: the two-pass with every term
    /// scaled before it is summed, so that no partial sum leaves a half type's range (24 f16
    /// cells of 3000 sum past 65504).
    TwoPassScaled,
    /// Welford's update over chunks of `chunk` cells, chunks combined with Chan et al.'s
    /// pairwise merge, left to right.
    Welford { chunk: usize },
    /// DEFECT: `var = max(Σx²/m − mean², 0)`, one pass over the data.
    OnePass,
    /// GPU-style: the channel cut into blocks of `block` cells (the last one partial), each
    /// block's `(count, mean, M2)` by two passes, the blocks merged with Chan's formula as a
    /// balanced tree. `flaw` plants a block-merge defect.
    Blocked { block: usize, flaw: BlockFlaw },
    /// DEFECT: Welford's update over the whole channel, left to right, with its cell counter
    /// held in f16 (`n = f16(n + 1)`): the counter sticks at 2048, so on channels of more than
    /// 2048 cells the mean becomes a moving average and `var = M2/n` is many times too large.
    WelfordHalfCount,
}

/// Block-merge defects of [`Moments::Blocked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockFlaw {
    /// None: a correct block merge.
    None,
    /// DEFECT: the last, partial block is dropped (its cells never counted) when the channel
    /// has more than one block.
    DropTail,
    /// DEFECT: blocks merged without the between-block term `δ²·n_a·n_b/n` of Chan's formula
    /// (the merged M2 is the sum of the blocks' M2).
    NoDelta,
}

/// Count, mean and sum of squared deviations of a chunk (Welford / Chan state).
#[derive(Clone, Copy)]
pub(crate) struct WelfordState<A> {
    pub(crate) n: A,
    pub(crate) mean: A,
    /// Sum of squared deviations from `mean`.
    pub(crate) m2: A,
}

impl<A: Real> WelfordState<A> {
    fn of_chunk(x: &[A]) -> Self {
        let mut s = WelfordState {
            n: A::ZERO,
            mean: A::ZERO,
            m2: A::ZERO,
        };
        for &v in x {
            s.n = s.n + A::ONE;
            let d = v - s.mean;
            s.mean = s.mean + d / s.n;
            s.m2 = s.m2 + d * (v - s.mean);
        }
        s
    }

    /// Merge disjoint parts as a balanced tree (error grows with log(#parts), not #parts);
    /// `None` for no parts.
    pub(crate) fn tree_merge(level: Vec<Self>) -> Option<Self> {
        Self::tree_merge_with(level, Self::merge)
    }

    /// [`Self::tree_merge`] with another combination of two parts.
    pub(crate) fn tree_merge_with(
        mut level: Vec<Self>,
        merge: impl Fn(Self, Self) -> Self,
    ) -> Option<Self> {
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some(a) = it.next() {
                next.push(match it.next() {
                    Some(b) => merge(a, b),
                    None => a,
                });
            }
            level = next;
        }
        level.pop()
    }

    /// Chan, Golub & LeVeque's combination of two disjoint parts.
    pub(crate) fn merge(self, o: Self) -> Self {
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        WelfordState {
            n,
            mean: self.mean + d * (o.n / n),
            m2: self.m2 + o.m2 + d * d * (self.n * o.n / n),
        }
    }
}

impl Moments {
    /// `(mean, var)` of `x` (non-empty), `var` divided by `m = x.len()`.
    pub(crate) fn mean_var<A: Real>(self, sum: Summation, dtype: Dtype, x: &[A]) -> (A, A) {
        let m = A::count(x.len());
        match self {
            Moments::TwoPass => {
                let mean = sum.sum(dtype, x.len(), |i| x[i]) / m;
                let ss = sum.sum(dtype, x.len(), |i| {
                    let d = x[i] - mean;
                    d * d
                });
                (mean, ss / m)
            }
            Moments::TwoPassScaled => {
                let w = A::ONE / m;
                let mean = sum.sum(dtype, x.len(), |i| x[i] * w);
                let var = sum.sum(dtype, x.len(), |i| {
                    let d = x[i] - mean;
                    d * d * w
                });
                (mean, var)
            }
            Moments::Welford { chunk } => {
                let chunks = x.chunks(chunk.max(1)).map(WelfordState::of_chunk).collect();
                let s = WelfordState::tree_merge(chunks).expect("a channel is never empty");
                (s.mean, s.m2 / m)
            }
            Moments::Blocked { block, flaw } => {
                let block = block.max(1);
                let blocks: Vec<&[A]> = if flaw == BlockFlaw::DropTail && x.len() > block {
                    x.chunks_exact(block).collect()
                } else {
                    x.chunks(block).collect()
                };
                let states: Vec<WelfordState<A>> = blocks
                    .iter()
                    .map(|b| {
                        let n = A::count(b.len());
                        let mean = sum.sum(dtype, b.len(), |i| b[i]) / n;
                        let m2 = sum.sum(dtype, b.len(), |i| {
                            let d = b[i] - mean;
                            d * d
                        });
                        WelfordState { n, mean, m2 }
                    })
                    .collect();
                let s = if flaw == BlockFlaw::NoDelta {
                    WelfordState::tree_merge_with(states, |a, b| {
                        let n = a.n + b.n;
                        WelfordState {
                            n,
                            mean: a.mean + (b.mean - a.mean) * (b.n / n),
                            m2: a.m2 + b.m2,
                        }
                    })
                } else {
                    WelfordState::tree_merge(states)
                }
                .expect("a channel is never empty");
                // The count is the merged one (fewer cells than m when the tail is dropped).
                (s.mean, s.m2 / s.n)
            }
            Moments::WelfordHalfCount => {
                let (mut n, mut mean, mut m2) = (A::ZERO, A::ZERO, A::ZERO);
                for &v in x {
                    n = A::of(Dtype::F16.round((n + A::ONE).to_f64()));
                    let d = v - mean;
                    mean = mean + d / n;
                    m2 = m2 + d * (v - mean);
                }
                (mean, m2 / n)
            }
            Moments::OnePass => {
                let mean = sum.sum(dtype, x.len(), |i| x[i]) / m;
                let sq = sum.sum(dtype, x.len(), |i| x[i] * x[i]) / m;
                let var = sq - mean * mean;
                (mean, if var > A::ZERO { var } else { A::ZERO })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMS: [Summation; 3] = [
        Summation::Sequential,
        Summation::Pairwise,
        Summation::Compensated,
    ];

    #[test]
    fn sums_of_small_integers_are_exact() {
        for s in SUMS {
            let v: f32 = s.sum(Dtype::F32, 100, |i| i as f32);
            assert_eq!(v, 4950.0, "{s:?}");
        }
    }

    #[test]
    fn compensated_sum_recovers_lost_low_part() {
        // 1 + 1e-16 * 10 in f64: the plain sum loses every small term.
        let t = |i: usize| if i == 0 { 1.0f64 } else { 1e-16 };
        let plain = Summation::Sequential.sum(Dtype::F64, 11, t);
        let comp = Summation::Compensated.sum(Dtype::F64, 11, t);
        assert_eq!(plain, 1.0);
        assert!((comp - (1.0 + 1e-15)).abs() <= 2.3e-16);
    }

    #[test]
    fn storage16_loses_precision() {
        // 2049 ones: bf16 can not hold 257, f16 can not hold 2049.
        let s: f32 = Summation::Storage16.sum(Dtype::F32, 2049, |_| 1.0);
        assert_eq!(s, 256.0);
        let s: f32 = Summation::Storage16.sum(Dtype::F16, 2049, |_| 1.0);
        assert_eq!(s, 2048.0);
    }

    #[test]
    fn moments_of_a_hand_case() {
        // x = 1, 2, 3, 6: mean 3, deviations -2,-1,0,3, var = 14/4.
        let x = [1.0f64, 2.0, 3.0, 6.0];
        for mo in [
            Moments::TwoPass,
            Moments::Welford { chunk: 3 },
            Moments::OnePass,
        ] {
            let (mean, var) = mo.mean_var(Summation::Sequential, Dtype::F64, &x);
            assert_eq!((mean, var), (3.0, 3.5), "{mo:?}");
        }
    }

    #[test]
    fn welford_merge_matches_single_chunk() {
        let x: Vec<f64> = (0..37)
            .map(|i| ((i * 7919) % 23) as f64 * 0.25 - 1.0)
            .collect();
        let (m1, v1) =
            Moments::Welford { chunk: 64 }.mean_var(Summation::Sequential, Dtype::F64, &x);
        let (m2, v2) =
            Moments::Welford { chunk: 5 }.mean_var(Summation::Sequential, Dtype::F64, &x);
        let (m3, v3) = Moments::TwoPass.mean_var(Summation::Sequential, Dtype::F64, &x);
        for (a, b) in [(m1, m3), (m2, m3), (v1, v3), (v2, v3)] {
            assert!((a - b).abs() <= 1e-14 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn onepass_cancels_catastrophically_where_twopass_does_not() {
        // Large mean, small spread, f32: the one-pass variance is garbage.
        let x: Vec<f32> = [0.0f32, 1.0, 2.0, 3.0]
            .iter()
            .map(|d| 4096.0 + d * 0.125)
            .collect();
        let (_, good) = Moments::TwoPass.mean_var(Summation::Sequential, Dtype::F32, &x);
        let (_, bad) = Moments::OnePass.mean_var(Summation::Sequential, Dtype::F32, &x);
        assert_eq!(good, 0.019_531_25); // deviations ±0.1875, ±0.0625
        assert!((bad - good).abs() > 0.01 * good, "{bad}");
    }
}
