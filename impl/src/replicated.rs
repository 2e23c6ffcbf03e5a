//! Data-parallel (sync) BatchNorm across R ranks, simulated in one process: each rank sees
//! only its shard of the batch (rows `offset_r .. offset_r + n_r` of `N`, `n_r` may be 0) and
//! the results of the collectives (an all-gather of per-rank summaries, all-reduces of sums,
//! in rank order, so every rank holds the same bits). The op is the whole-batch op (docs/FORMAT.md,
//! "Replicated suites"): forward, backward and running_update on nchw and nhwc.
//!
//! The correct kernel merges per-rank `(count, mean, M2)` with Chan's count-weighted formula;
//! the known-bad ones each carry one defect that real sync BN implementations have had.

use crate::real::Real;
use crate::{Case, Convention, Dtype, Expected, Layout, Op, Outputs, Unsupported};
use std::collections::BTreeMap;

/// A sync BatchNorm kernel across ranks.
pub trait ReplicatedKernel: Send + Sync {
    /// Stable, unique name (`replicated-chan`, `bad-rep-onepass`, ...).
    fn name(&self) -> &'static str;
    fn expected(&self) -> Expected;
    /// The algorithm, and for a known-bad kernel its defect.
    fn description(&self) -> &'static str;
    /// The ops where a known-bad kernel's defect shows.
    fn defective_ops(&self) -> &'static [Op] {
        &[]
    }
    /// Run every rank: `ranks[r]` is rank r's case (its shard of `x`/`dy`, of shape
    /// `[n_r, C, H, W]` or `[n_r, H, W, C]`, and copies of the per-channel inputs). Returns
    /// each rank's outputs: per-element ones on its shard, per-channel ones as the global
    /// values it holds, and `dgamma_local`/`dbeta_local` (its part of the sums) for backward.
    fn run_ranks(&self, ranks: &[Case]) -> Result<Vec<Outputs>, Unsupported>;
}

/// One defect of a known-bad replicated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    /// The global mean and variance weight every non-empty rank equally, whatever its count.
    EqualWeight,
    /// The global variance is the count-weighted mean of the ranks' variances (the spread of
    /// the ranks' means is lost).
    AvgVar,
    /// Ranks all-reduce `Σx` and `Σx²` in the working precision; `var = E[x²] − mean²`.
    OnePass,
    /// No synchronisation: each rank normalises with its own statistics.
    NoSync,
    /// `dgamma`/`dbeta` are the rank's own sums, never all-reduced.
    NoGradAllReduce,
    /// An empty rank is counted as one cell of value 0 (a `max(count, 1)` guard).
    EmptyAsOne,
    /// The running variance's unbiased factor uses the rank's own count `m_r/(m_r − 1)`.
    RunningLocalCount,
    /// The backward's `mean(dy)`, `mean(dy·xhat)` come from the rank alone.
    BackwardLocalMeans,
}

/// A replicated kernel: Chan's merge, with at most one [`Flaw`].
struct SyncKernel {
    name: &'static str,
    description: &'static str,
    flaw: Option<Flaw>,
    ops: &'static [Op],
}

/// Every replicated kernel, the good one first, in a fixed order.
pub fn all_replicated_kernels() -> Vec<Box<dyn ReplicatedKernel>> {
    let k = |name, description, flaw, ops| {
        Box::new(SyncKernel {
            name,
            description,
            flaw,
            ops,
        }) as Box<dyn ReplicatedKernel>
    };
    const ALL: &[Op] = &[Op::Forward, Op::Backward, Op::RunningUpdate];
    vec![
        k(
            "replicated-chan",
            "Sync BN across ranks: each rank's (count, mean, M2) two-pass in the working \
             precision (f64 for f64 data, f32 otherwise), all-gathered and merged with Chan's \
             count-weighted formula in rank order (empty ranks skipped); backward all-reduces \
             Σdy and Σdy·(x − mean); dγ/dβ all-reduced; running variance unbiased with the \
             global count.",
            None,
            &[],
        ),
        k(
            "bad-rep-equal-weight",
            "KNOWN BAD: merges the ranks' statistics with equal weight per non-empty rank \
             (mean of means, mean of variances plus the spread of the means), not by count: \
             wrong whenever shards are unequal.",
            Some(Flaw::EqualWeight),
            ALL,
        ),
        k(
            "bad-rep-avg-var",
            "KNOWN BAD: the global variance is the count-weighted average of the ranks' \
             variances, dropping the between-rank term Σ n_r·(mean_r − mean)²/N.",
            Some(Flaw::AvgVar),
            ALL,
        ),
        k(
            "bad-rep-onepass",
            "KNOWN BAD: ranks all-reduce Σx and Σx² in the working precision and form \
             var = E[x²] − mean² (catastrophic cancellation on large means).",
            Some(Flaw::OnePass),
            ALL,
        ),
        k(
            "bad-rep-no-sync",
            "KNOWN BAD: no statistics all-reduce: each rank normalises with its own shard's \
             mean and variance (plain BN under data parallelism); dγ/dβ still all-reduced.",
            Some(Flaw::NoSync),
            ALL,
        ),
        k(
            "bad-rep-no-grad-allreduce",
            "KNOWN BAD: backward returns each rank's own dγ/dβ (its part of the sum) where the \
             all-reduced gradient is due.",
            Some(Flaw::NoGradAllReduce),
            &[Op::Backward],
        ),
        k(
            "bad-rep-empty-as-one",
            "KNOWN BAD: a rank with no cells is counted as one cell of value 0 (a max(count, 1) \
             guard against division by zero), pulling the mean towards 0.",
            Some(Flaw::EmptyAsOne),
            ALL,
        ),
        k(
            "bad-rep-running-local-count",
            "KNOWN BAD: the running variance's unbiased factor uses the rank's own cell count \
             m_r/(m_r − 1) instead of the global m/(m − 1) (pytorch convention).",
            Some(Flaw::RunningLocalCount),
            &[Op::RunningUpdate],
        ),
        k(
            "bad-rep-bwd-local-means",
            "KNOWN BAD: backward projects with mean(dy) and mean(dy·xhat) of the rank's own \
             shard instead of the all-reduced ones (statistics and dγ/dβ are right).",
            Some(Flaw::BackwardLocalMeans),
            &[Op::Backward],
        ),
    ]
}

/// The replicated kernel called `name`, if any.
pub fn replicated_kernel_by_name(name: &str) -> Option<Box<dyn ReplicatedKernel>> {
    all_replicated_kernels()
        .into_iter()
        .find(|k| k.name() == name)
}

impl ReplicatedKernel for SyncKernel {
    fn name(&self) -> &'static str {
        self.name
    }
    fn expected(&self) -> Expected {
        if self.flaw.is_some() {
            Expected::KnownBad
        } else {
            Expected::Good
        }
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn defective_ops(&self) -> &'static [Op] {
        self.ops
    }
    fn run_ranks(&self, ranks: &[Case]) -> Result<Vec<Outputs>, Unsupported> {
        let geo = validate_ranks(ranks).map_err(|e| Unsupported(format!("invalid case: {e}")))?;
        if ranks[0].dtype == Dtype::F64 {
            Ok(self.run_in::<f64>(ranks, &geo))
        } else {
            Ok(self.run_in::<f32>(ranks, &geo))
        }
    }
}

/// Per rank: the positions (row-major in its shard) of each channel's cells.
struct RankGeometry {
    c: usize,
    /// `cells[r][ch]`: rank r's cells of channel ch.
    cells: Vec<Vec<Vec<usize>>>,
}

/// Positions of each channel's cells in a shard of a batch layout (`[n, C, …]` channels-first:
/// nchw, nc, ncl, ncdhw; `[n, …, C]` channels-last: nhwc, ndhwc; `n` may be 0). Returns
/// `(C, cells per channel)`.
fn shard_cells(layout: Layout, shape: &[usize]) -> Result<(usize, Vec<Vec<usize>>), String> {
    let (rank, channels_last) = match layout {
        Layout::Nc => (2, false),
        Layout::Ncl => (3, false),
        Layout::Nchw => (4, false),
        Layout::Nhwc => (4, true),
        Layout::Ncdhw => (5, false),
        Layout::Ndhwc => (5, true),
        other => {
            return Err(format!(
                "layout {other}: replicated cases have a batch axis (nchw, nhwc, nc, ncl, ncdhw or ndhwc)"
            ))
        }
    };
    if shape.len() != rank {
        return Err(format!(
            "shape {shape:?}: a replicated {layout} case is {rank}-d"
        ));
    }
    let c = if channels_last {
        shape[rank - 1]
    } else {
        shape[1]
    };
    let hw = shape[1..].iter().try_fold(1usize, |p, &d| p.checked_mul(d));
    let hw = hw.ok_or_else(|| format!("shape {shape:?}: element count overflows"))?;
    if c == 0 || hw == 0 {
        return Err(format!("shape {shape:?} has an empty channel or image"));
    }
    let hw = hw / c;
    let n = shape[0];
    let cells = (0..c)
        .map(|ch| {
            (0..n)
                .flat_map(|b| {
                    (0..hw).map(move |s| {
                        if channels_last {
                            (b * hw + s) * c + ch
                        } else {
                            (b * c + ch) * hw + s
                        }
                    })
                })
                .collect()
        })
        .collect();
    Ok((c, cells))
}

/// The ranks agree on everything but their shard, and each input has its length.
fn validate_ranks(ranks: &[Case]) -> Result<RankGeometry, String> {
    let first = ranks.first().ok_or("no ranks")?;
    if !matches!(first.op, Op::Forward | Op::Backward | Op::RunningUpdate) {
        return Err(format!(
            "op {}: replicated cases are forward, backward or running_update",
            first.op
        ));
    }
    let mut cells = Vec::new();
    let mut c = 0;
    for (r, k) in ranks.iter().enumerate() {
        let same = k.op == first.op
            && k.layout == first.layout
            && k.dtype == first.dtype
            && k.param_dtype == first.param_dtype
            && k.eps.to_bits() == first.eps.to_bits()
            && k.params == first.params
            && k.shape.get(1..) == first.shape.get(1..);
        if !same {
            return Err(format!("rank {r} disagrees with rank 0 on the case"));
        }
        let (cr, cl) = shard_cells(k.layout, &k.shape)?;
        c = cr;
        let n_cells: usize = cl.iter().map(Vec::len).sum();
        for &name in k.op.inputs() {
            let want = if crate::is_cell_array(name) {
                n_cells
            } else {
                c
            };
            let got = k.inputs.get(name).map(Vec::len);
            if got != Some(want) {
                return Err(format!(
                    "rank {r}: input {name} has {got:?} values, expected {want}"
                ));
            }
        }
        cells.push(cl);
    }
    if cells.iter().all(|cl| cl[0].is_empty()) {
        return Err("every rank is empty".into());
    }
    if first.op == Op::RunningUpdate && first.params.convention.is_none() {
        return Err("running_update needs a convention".into());
    }
    Ok(RankGeometry { c, cells })
}

/// One rank's summary of a channel: cell count, mean, centred sum of squares `M2`, and the
/// raw sums `Σx`, `Σx²` (for the one-pass defect).
#[derive(Clone, Copy)]
struct Summary<T> {
    n: usize,
    mean: T,
    m2: T,
    s1: T,
    s2: T,
}

fn sum<T: Real>(v: impl Iterator<Item = T>) -> T {
    v.fold(T::ZERO, |a, b| a + b)
}

fn summarize<T: Real>(x: &[T]) -> Summary<T> {
    let n = x.len();
    if n == 0 {
        return Summary {
            n,
            mean: T::ZERO,
            m2: T::ZERO,
            s1: T::ZERO,
            s2: T::ZERO,
        };
    }
    let s1 = sum(x.iter().copied());
    let mean = s1 / T::count(n);
    Summary {
        n,
        mean,
        m2: sum(x.iter().map(|&v| (v - mean) * (v - mean))),
        s1,
        s2: sum(x.iter().map(|&v| v * v)),
    }
}

impl SyncKernel {
    /// The `(mean, biased var)` rank r normalises with, from every rank's summary (the
    /// all-gather); the same for every rank unless the kernel does not synchronise.
    fn stats<T: Real>(&self, all: &[Summary<T>], r: usize) -> (T, T) {
        match self.flaw {
            Some(Flaw::NoSync) => {
                // An empty rank has no statistics of its own (0/0).
                let s = all[r];
                let n = T::count(s.n);
                let mean = if s.n == 0 { T::of(f64::NAN) } else { s.mean };
                (mean, s.m2 / n)
            }
            Some(Flaw::OnePass) => {
                let n = T::count(all.iter().map(|s| s.n).sum());
                let mean = sum(all.iter().map(|s| s.s1)) / n;
                (mean, sum(all.iter().map(|s| s.s2)) / n - mean * mean)
            }
            Some(Flaw::EqualWeight) => {
                let live: Vec<&Summary<T>> = all.iter().filter(|s| s.n > 0).collect();
                let k = T::count(live.len());
                let mean = sum(live.iter().map(|s| s.mean)) / k;
                let within = sum(live.iter().map(|s| s.m2 / T::count(s.n))) / k;
                let between = sum(live.iter().map(|s| (s.mean - mean) * (s.mean - mean))) / k;
                (mean, within + between)
            }
            _ => {
                // Chan's merge in rank order; EmptyAsOne turns an empty rank into one zero cell.
                let (mut n, mut mean, mut m2) = (0usize, T::ZERO, T::ZERO);
                for s in all {
                    let s = match (s.n, self.flaw) {
                        (0, Some(Flaw::EmptyAsOne)) => Summary { n: 1, ..*s },
                        (0, _) => continue,
                        _ => *s,
                    };
                    if n == 0 {
                        (n, mean, m2) = (s.n, s.mean, s.m2);
                        continue;
                    }
                    let tot = n + s.n;
                    let delta = s.mean - mean;
                    mean = mean + delta * (T::count(s.n) / T::count(tot));
                    m2 = m2 + s.m2 + delta * delta * (T::count(n) * T::count(s.n) / T::count(tot));
                    n = tot;
                }
                if self.flaw == Some(Flaw::AvgVar) {
                    m2 = sum(all.iter().map(|s| s.m2));
                }
                (mean, m2 / T::count(n))
            }
        }
    }

    fn run_in<T: Real>(&self, ranks: &[Case], g: &RankGeometry) -> Vec<Outputs> {
        let (op, nr) = (ranks[0].op, ranks.len());
        let eps = T::of(ranks[0].eps);
        let mut outs: Vec<BTreeMap<&'static str, Vec<f64>>> = (0..nr)
            .map(|r| {
                let len = g.cells[r].iter().map(Vec::len).sum();
                let mut o = BTreeMap::new();
                for &name in op.outputs() {
                    o.insert(
                        name,
                        vec![0.0; if crate::is_cell_array(name) { len } else { g.c }],
                    );
                }
                if op == Op::Backward {
                    o.insert("dgamma_local", vec![0.0; g.c]);
                    o.insert("dbeta_local", vec![0.0; g.c]);
                }
                o
            })
            .collect();
        let m_total: usize = (0..nr).map(|r| g.cells[r][0].len()).sum();
        for ch in 0..g.c {
            let get = |r: usize, name: &str| -> Vec<T> {
                let v = &ranks[r].inputs[name];
                g.cells[r][ch].iter().map(|&i| T::of(v[i])).collect()
            };
            let param = |name: &str| T::of(ranks[0].inputs[name][ch]);
            let xs: Vec<Vec<T>> = (0..nr).map(|r| get(r, "x")).collect();
            let all: Vec<Summary<T>> = xs.iter().map(|x| summarize(x)).collect();
            match op {
                Op::Forward => {
                    let (gamma, beta) = (param("gamma"), param("beta"));
                    for r in 0..nr {
                        let (mean, var) = self.stats(&all, r);
                        let rs = T::ONE / (var + eps).sqrt();
                        let o = &mut outs[r];
                        for (k, &i) in g.cells[r][ch].iter().enumerate() {
                            o.get_mut("y").expect("y")[i] =
                                (gamma * ((xs[r][k] - mean) * rs) + beta).to_f64();
                        }
                        o.get_mut("mean").expect("mean")[ch] = mean.to_f64();
                        o.get_mut("var").expect("var")[ch] = var.to_f64();
                    }
                }
                Op::Backward => {
                    let gamma = param("gamma");
                    let dys: Vec<Vec<T>> = (0..nr).map(|r| get(r, "dy")).collect();
                    // Each rank's sums at its own statistics, then the all-reduce.
                    let st: Vec<(T, T)> = (0..nr).map(|r| self.stats(&all, r)).collect();
                    let sdy: Vec<T> = dys.iter().map(|d| sum(d.iter().copied())).collect();
                    let sdyx: Vec<T> = (0..nr)
                        .map(|r| sum((0..xs[r].len()).map(|k| dys[r][k] * (xs[r][k] - st[r].0))))
                        .collect();
                    let (all_dy, all_dyx) = (sum(sdy.iter().copied()), sum(sdyx.iter().copied()));
                    for r in 0..nr {
                        let (mean, var) = st[r];
                        let rs = T::ONE / (var + eps).sqrt();
                        let local = T::count(xs[r].len());
                        let mtot = T::count(m_total);
                        let (mean_dy, mean_dyxh) = match self.flaw {
                            Some(Flaw::BackwardLocalMeans) | Some(Flaw::NoSync) => {
                                (sdy[r] / local, sdyx[r] * rs / local)
                            }
                            _ => (all_dy / mtot, all_dyx * rs / mtot),
                        };
                        let o = &mut outs[r];
                        for (k, &i) in g.cells[r][ch].iter().enumerate() {
                            let xhat = (xs[r][k] - mean) * rs;
                            o.get_mut("dx").expect("dx")[i] =
                                (gamma * rs * (dys[r][k] - mean_dy - xhat * mean_dyxh)).to_f64();
                        }
                        let (dg, db) = if self.flaw == Some(Flaw::NoGradAllReduce) {
                            (sdyx[r] * rs, sdy[r])
                        } else if self.flaw == Some(Flaw::NoSync) {
                            // Each rank's dγ at its own statistics, then all-reduced.
                            let dg =
                                sum((0..nr).map(|q| sdyx[q] * (T::ONE / (st[q].1 + eps).sqrt())));
                            (dg, all_dy)
                        } else {
                            (all_dyx * rs, all_dy)
                        };
                        o.get_mut("dgamma").expect("dgamma")[ch] = dg.to_f64();
                        o.get_mut("dbeta").expect("dbeta")[ch] = db.to_f64();
                        o.get_mut("dgamma_local").expect("local")[ch] = (sdyx[r] * rs).to_f64();
                        o.get_mut("dbeta_local").expect("local")[ch] = sdy[r].to_f64();
                    }
                }
                Op::RunningUpdate => {
                    let (rm, rv) = (param("running_mean"), param("running_var"));
                    let p = &ranks[0].params;
                    let a = T::of(p.momentum);
                    let pytorch = p.convention == Some(Convention::Pytorch);
                    for r in 0..nr {
                        let (mean, var) = self.stats(&all, r);
                        let m = if self.flaw == Some(Flaw::RunningLocalCount) {
                            xs[r].len()
                        } else {
                            m_total
                        };
                        let batch_var = if pytorch && m > 1 {
                            var * (T::count(m) / T::count(m - 1))
                        } else {
                            var
                        };
                        let (w_old, w_batch) = if pytorch {
                            (T::ONE - a, a)
                        } else {
                            (a, T::ONE - a)
                        };
                        let o = &mut outs[r];
                        o.get_mut("new_mean").expect("new_mean")[ch] =
                            (w_old * rm + w_batch * mean).to_f64();
                        o.get_mut("new_var").expect("new_var")[ch] =
                            (w_old * rv + w_batch * batch_var).to_f64();
                    }
                }
                _ => unreachable!("validated"),
            }
        }
        outs.into_iter()
            .zip(ranks)
            .map(|(o, k)| {
                o.into_iter()
                    .map(|(name, v)| {
                        let d = k.dtype_of(name);
                        (
                            name.to_string(),
                            v.into_iter().map(|x| d.round(x)).collect(),
                        )
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank_case(op: Op, shard: &[f64], n: usize, c: usize) -> Case {
        let mut inputs = BTreeMap::new();
        inputs.insert("x".to_string(), shard.to_vec());
        inputs.insert(
            "dy".to_string(),
            shard.iter().map(|v| v * 0.5 - 1.0).collect(),
        );
        inputs.insert("gamma".to_string(), vec![1.5; c]);
        inputs.insert("beta".to_string(), vec![0.25; c]);
        inputs.insert("running_mean".to_string(), vec![0.0; c]);
        inputs.insert("running_var".to_string(), vec![1.0; c]);
        inputs.retain(|k, _| op.inputs().contains(&k.as_str()));
        Case {
            op,
            layout: Layout::Nchw,
            shape: vec![n, c, 1, 2],
            dtype: Dtype::F64,
            param_dtype: Dtype::F64,
            eps: 1e-5,
            inputs,
            params: crate::Params {
                momentum: 0.1,
                convention: Some(Convention::Pytorch),
            },
        }
    }

    /// The good kernel on shards [3 rows, 0 rows, 1 row] gives the statistics of the union.
    #[test]
    fn chan_merge_is_the_whole_batch() {
        let whole = [1.0, 2.0, 4.0, 8.0, 3.0, 5.0, 7.0, 9.0];
        let ranks = vec![
            rank_case(Op::Forward, &whole[..6], 3, 1),
            rank_case(Op::Forward, &[], 0, 1),
            rank_case(Op::Forward, &whole[6..], 1, 1),
        ];
        let k = replicated_kernel_by_name("replicated-chan").unwrap();
        let out = k.run_ranks(&ranks).unwrap();
        let mean = whole.iter().sum::<f64>() / 8.0;
        let var = whole.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 8.0;
        for o in &out {
            assert_eq!(o["mean"], vec![mean]);
            assert!(
                (o["var"][0] - var).abs() < 1e-14,
                "{} vs {var}",
                o["var"][0]
            );
        }
        assert_eq!(out[1]["y"].len(), 0);
        assert_eq!(out[2]["y"].len(), 2);
    }

    /// Each known-bad kernel differs from the good one on unequal shards with an empty rank.
    #[test]
    fn every_flaw_changes_some_output() {
        let whole: Vec<f64> = (0..10).map(|i| 100.0 + (i * i % 7) as f64).collect();
        let good = replicated_kernel_by_name("replicated-chan").unwrap();
        for k in all_replicated_kernels().iter().skip(1) {
            let op = k.defective_ops()[0];
            let ranks = vec![
                rank_case(op, &whole[..2], 1, 1),
                rank_case(op, &[], 0, 1),
                rank_case(op, &whole[2..], 4, 1),
            ];
            let (a, b) = (
                good.run_ranks(&ranks).unwrap(),
                k.run_ranks(&ranks).unwrap(),
            );
            assert_ne!(a, b, "{} computes like the good kernel", k.name());
        }
    }

    /// A shard's cells on every batch layout are `channel_cells`' (n ≥ 1), none when n = 0,
    /// and a layout without a batch axis, or a wrong rank, is refused.
    #[test]
    fn shard_cells_match_channel_cells_on_batch_layouts() {
        for (l, shape) in [
            (Layout::Nchw, vec![2, 3, 2, 2]),
            (Layout::Nhwc, vec![2, 2, 2, 3]),
            (Layout::Nc, vec![4, 3]),
            (Layout::Ncl, vec![2, 3, 5]),
            (Layout::Ncdhw, vec![2, 3, 2, 1, 3]),
            (Layout::Ndhwc, vec![2, 2, 1, 3, 3]),
        ] {
            let (c, cells) = shard_cells(l, &shape).unwrap();
            let (cc, _, want) = crate::channel_cells(l, &shape).unwrap();
            assert_eq!((c, &cells), (cc, &want), "{l:?}");
            let mut empty = shape.clone();
            empty[0] = 0;
            let (_, cells) = shard_cells(l, &empty).unwrap();
            assert!(cells.iter().all(Vec::is_empty), "{l:?}");
        }
        assert!(shard_cells(Layout::Chw, &[3, 2, 2]).is_err());
        assert!(shard_cells(Layout::Ncdhw, &[2, 3, 2, 2]).is_err());
    }
}
