//! Judging a case of the `replicated` suite (docs/FORMAT.md, "Replicated suites") from what
//! each rank wrote: per-element outputs on its shard (the shards concatenated in rank order are
//! the whole output), per-channel outputs as the global values every rank must hold (each
//! rank's copy judged), and the optional `dgamma_local`/`dbeta_local` against the exact part of
//! the sums its shard contributes (prepared in `judge::replicated`).

use crate::judge::prepare::Prepared;
use crate::judge::replicated::LOCAL_OUTPUTS;
use crate::judge::verdict::{worst_of, CaseResult, OutputResult};
use crate::suite::replicated;
use bnconf_spec::op::Extent;
use bnconf_spec::Op;
use std::collections::BTreeMap;

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
                    let allowed = crate::judge::verdict::max_allowed(b, self.k, u);
                    let mut o = worst_of(
                        name,
                        &ratios,
                        self.k,
                        v,
                        |i| gold[i].clone(),
                        (|i| b[i], allowed),
                    );
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
