//! Judging the `replicated` suite (docs/FORMAT.md, "Replicated suites"): the goldens are the
//! whole-batch op's; each rank's outputs are judged — per-element outputs on its shard (the
//! shards concatenated in rank order are the whole output), per-channel outputs as the global
//! values every rank must hold (each rank's copy judged), and the optional
//! `dgamma_local`/`dbeta_local` against the exact part of the sums its shard contributes (the
//! seed's S30: `dgamma` of `sync_backward` on the shard at the all-reduced statistics).

use crate::judge::budget::{self, ElementBudget};
use crate::judge::check::{worst_of, CaseResult, OutputResult, Prepared};
use crate::suite::{replicated, SuiteCase};
use bnconf_spec::op::{Extent, Outputs};
use bnconf_spec::{Geometry, Op, Problem, QSqrt};
use std::collections::BTreeMap;

/// What one rank of a backward case contributes to `dgamma`/`dbeta`, exactly, with budgets.
#[derive(Clone, Debug)]
pub struct RankLocal {
    /// `dgamma_local`, `dbeta_local` (`[C]`).
    pub golden: BTreeMap<&'static str, Vec<QSqrt>>,
    /// Their budgets.
    pub budgets: BTreeMap<&'static str, Vec<ElementBudget>>,
}

/// The optional per-rank outputs (S30: the rank's part of the gradient sums).
pub const LOCAL_OUTPUTS: [&str; 2] = ["dgamma_local", "dbeta_local"];

/// The exact per-rank parts of a replicated backward case (`None` for other cases).
pub fn locals(
    c: &SuiteCase,
    golden: &Outputs,
) -> Result<Option<Vec<RankLocal>>, bnconf_spec::SpecError> {
    if c.shard_sizes.is_empty() || c.op != Op::Backward {
        return Ok(None);
    }
    let whole = c.problem();
    let m = QSqrt::int(whole.geom.m as i64);
    let (mut mean, mut m2, mut mean_dy) = (Vec::new(), Vec::new(), Vec::new());
    for ch in 0..whole.geom.c {
        let cells: Vec<usize> = (0..whole.geom.m)
            .map(|k| whole.geom.offset(ch, k))
            .collect();
        let x: Vec<&QSqrt> = cells.iter().map(|&i| &whole.inputs["x"][i]).collect();
        let dy: Vec<&QSqrt> = cells.iter().map(|&i| &whole.inputs["dy"][i]).collect();
        let s = |v: &[&QSqrt]| v.iter().fold(QSqrt::int(0), |a, &b| &a + b);
        let sq: Vec<QSqrt> = x.iter().map(|&v| v * v).collect();
        mean.push(&s(&x) / &m);
        m2.push(&s(&sq.iter().collect::<Vec<_>>()) / &m);
        mean_dy.push(&s(&dy) / &m);
    }
    // mean(dy·xhat) = dgamma / m, exact in the channel's Q(sqrt(q)).
    let mean_dy_xhat: Vec<QSqrt> = golden["dgamma"].iter().map(|g| g / &m).collect();
    let mut out = Vec::new();
    for r in 0..c.shard_sizes.len() {
        let sh = replicated::shard(c, r);
        if sh.shape[0] == 0 {
            // An empty rank contributes nothing: exactly 0, with no error allowed beyond the
            // underflow term.
            let zero = || vec![QSqrt::int(0); whole.geom.c];
            let b = || vec![ElementBudget::default(); whole.geom.c];
            out.push(RankLocal {
                golden: [("dgamma_local", zero()), ("dbeta_local", zero())].into(),
                budgets: [("dgamma_local", b()), ("dbeta_local", b())].into(),
            });
            continue;
        }
        let geom = Geometry::new(c.layout, &sh.shape, usize::MAX)?;
        let local = sh.problem().inputs;
        let mut inputs: BTreeMap<String, Vec<QSqrt>> = BTreeMap::new();
        for name in ["x", "dy", "gamma"] {
            inputs.insert(name.into(), local[name].clone());
        }
        inputs.insert("mean".into(), mean.clone());
        inputs.insert("m2".into(), m2.clone());
        inputs.insert("mean_dy".into(), mean_dy.clone());
        inputs.insert("mean_dy_xhat".into(), mean_dy_xhat.clone());
        let p = Problem::new(Op::SyncBackward, geom, whole.eps.clone(), inputs)?;
        let g = p.evaluate()?;
        // The closed-form bound (tested ≥ the exact condition): the exact Jacobian of
        // sync_backward over Q(sqrt(q)) costs seconds per shard and tightens little.
        let mut b = budget::budgets(&p, budget::Method::Bound)?;
        out.push(RankLocal {
            golden: [
                ("dgamma_local", g["dgamma"].clone()),
                ("dbeta_local", g["dbeta"].clone()),
            ]
            .into(),
            budgets: [
                ("dgamma_local", b.remove("dgamma").expect("dgamma")),
                ("dbeta_local", b.remove("dbeta").expect("dbeta")),
            ]
            .into(),
        });
    }
    Ok(Some(out))
}

impl Prepared {
    /// Judge a replicated case from what each rank wrote (`ranks[r]`: its outputs, values
    /// of their dtypes as f64). Per-element outputs must have the rank's shard length;
    /// `dgamma_local`/`dbeta_local` are judged where present.
    pub fn judge_ranks(&self, ranks: &[BTreeMap<String, Vec<f64>>]) -> CaseResult {
        let c = &self.case;
        let sizes = &c.shard_sizes;
        if ranks.len() != sizes.len() {
            return self.malformed(&format!(
                "{} ranks' outputs, expected {}",
                ranks.len(),
                sizes.len()
            ));
        }
        let row = replicated::row_len(&c.shape);
        let offsets = replicated::offsets(sizes);
        let rank_of = |i: usize| {
            let n = i / row;
            (0..sizes.len())
                .rfind(|&r| offsets[r] <= n && sizes[r] > 0)
                .unwrap_or(0)
        };
        let mut outs: Vec<OutputResult> = Vec::new();
        let mut whole: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for &name in c.op.outputs() {
            let per_cell = matches!(Op::extent(name), Extent::Cells);
            let mut cat = Vec::new();
            for (r, out) in ranks.iter().enumerate() {
                let Some(v) = out.get(name) else {
                    return self.malformed(&format!("rank {r}: output `{name}` missing"));
                };
                if per_cell {
                    if v.len() != sizes[r] * row {
                        return self.malformed(&format!(
                            "rank {r}: output `{name}` has {} values, expected {} (its {} rows)",
                            v.len(),
                            sizes[r] * row,
                            sizes[r]
                        ));
                    }
                    cat.extend_from_slice(v);
                    continue;
                }
                match self.judge_output(name, v) {
                    Ok(mut o) => {
                        o.rank = Some(r);
                        outs.push(o);
                    }
                    Err(why) => return self.malformed(&format!("rank {r}: {why}")),
                }
                if r == 0 {
                    whole.insert(name.to_string(), v.clone());
                }
            }
            if per_cell {
                match self.judge_output(name, &cat) {
                    Ok(mut o) => {
                        o.rank = Some(rank_of(o.index));
                        outs.push(o);
                    }
                    Err(why) => return self.malformed(&why),
                }
                whole.insert(name.to_string(), cat);
            }
        }
        if let Some(locals) = &self.locals {
            for name in LOCAL_OUTPUTS {
                for (r, out) in ranks.iter().enumerate() {
                    let Some(v) = out.get(name) else { continue };
                    let (gold, b) = (&locals[r].golden[name], &locals[r].budgets[name]);
                    if v.len() != gold.len() {
                        return self.malformed(&format!(
                            "rank {r}: output `{name}` has {} values, expected {}",
                            v.len(),
                            gold.len()
                        ));
                    }
                    let u = c.dtype_of(name).unit_roundoff();
                    let ratios: Vec<f64> = (0..v.len())
                        .map(|i| b[i].ratio(v[i], &gold[i], u))
                        .collect();
                    let mut o = worst_of(name, &ratios, self.k, v, |i| gold[i].clone(), b);
                    o.rank = Some(r);
                    outs.push(o);
                }
            }
        }
        // Worst rank's copy first within each output is not needed: the report sorts by ratio.
        self.verdict_of(outs, &whole)
    }
}

/// Run a built-in replicated kernel on prepared replicated cases, in process (every rank
/// simulated; its collectives in rank order).
pub fn run_kernel(
    kernel: &dyn bnconf_impl::ReplicatedKernel,
    prepared: &[Prepared],
) -> Vec<CaseResult> {
    use crate::par::*;
    prepared
        .par_iter()
        .map(|p| {
            let ranks: Vec<bnconf_impl::Case> = (0..p.case.shard_sizes.len())
                .map(|r| replicated::shard(&p.case, r).to_kernel_case())
                .collect();
            match kernel.run_ranks(&ranks) {
                Ok(out) => p.judge_ranks(&out),
                Err(bnconf_impl::Unsupported(why)) => p.unsupported(&why),
            }
        })
        .collect()
}
