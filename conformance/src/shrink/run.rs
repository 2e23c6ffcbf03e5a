//! The search of `bnconf shrink` with an outside kernel (`--exec CMD`, run as `check --exec`
//! runs it: protocol/exec.rs). Greedy and deterministic: the moves are tried in a fixed order,
//! the first candidate that still fails the same way is kept, and passes repeat until none
//! helps or `--max-runs` is spent. The same kernel gives the same shrunk case, byte for byte.
//!
//! Moves, in order, each pass:
//! 1. channels: keep one channel (the worst element's first, then 0, 1, …); else drop one;
//! 2. ranks (a replicated case): drop one whole rank, its rows with it, while two remain;
//! 3. cells: along `n`, `h`, `w`, drop chunks of indices (halves, quarters, … single ones); in
//!    a replicated case a dropped row leaves the rank that held it (its shard shrinks), and a
//!    candidate never has more empty ranks than the original;
//! 4. values, per input: the neutral value for the whole array (`gamma` 1, `beta` 0,
//!    `running_mean` 0, `running_var` 1), then every value rounded to a multiple of `2^-k`,
//!    coarsest `k` first ([`super::GRID_EXPONENTS`]).
//!
//! A candidate is only judged when the op is defined there and it is not ill-posed
//! ([`super::valid`]).

use super::{select, valid, Dims, Selection, Shrunk, Signature};
use crate::error::{ConfError, Result};
use crate::judge::check::Written;
use crate::judge::prepare::{self, Prepared};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::protocol::exec::{self, ExecOptions, Outcome, WorkDir};
use crate::suite::SuiteCase;
use bnconf_spec::op::Extent;
use bnconf_spec::Op;
use std::collections::BTreeMap;

/// How a search ended (`T`: what it found, [`Shrunk`] or a family case's
/// [`super::family::FamilyShrunk`]).
#[derive(Debug)]
pub enum Ended<T = Shrunk> {
    /// A smaller (or equal) case that fails the same way.
    Shrunk(Box<T>),
    /// The kernel does not fail the original case: its verdict and worst ratio.
    DoesNotFail(String),
    /// bnconf got this signal while the kernel ran.
    Interrupted(i32),
}

/// What each rank of a replicated case wrote (`None` for other cases).
type RankOutputs = Option<Vec<BTreeMap<String, Vec<f64>>>>;

/// A candidate that fails the same way: its prepared goldens, its result, and its ranks'
/// outputs.
type Kept = (Prepared, CaseResult, RankOutputs);

/// One kernel run on a candidate: its prepared goldens and the verdict, or why it was not
/// judged (timed out: treated as not reproducing).
enum Run {
    Judged(Box<Kept>),
    TimedOut,
    Interrupted(i32),
}

/// Why a search stopped early.
pub(crate) enum Stop {
    Error(ConfError),
    Signal(i32),
}

impl From<ConfError> for Stop {
    fn from(e: ConfError) -> Stop {
        Stop::Error(e)
    }
}

struct Search<'a> {
    opts: &'a ExecOptions,
    max_runs: usize,
    runs: usize,
    signature: Option<Signature>,
    quiet: bool,
    /// A replicated original's empty ranks: no candidate has more (rows are dropped from
    /// the ranks that hold them; a rank is only emptied where the original had one).
    max_empty: usize,
    /// A replicated original's fewest ranks a candidate keeps (2, or the original's if fewer).
    min_ranks: usize,
}

impl Search<'_> {
    fn run(&mut self, case: &SuiteCase) -> Result<Run> {
        self.runs += 1;
        let prepared = prepare::prepare(std::slice::from_ref(case))?
            .pop()
            .expect("one case");
        let work = WorkDir::temporary()?;
        super::write_protocol_dir(case, work.path())?;
        let outcome = exec::run(self.opts, work.path())?;
        match outcome {
            Outcome::Interrupted(sig) => return Ok(Run::Interrupted(sig)),
            Outcome::TimedOut(_) => return Ok(Run::TimedOut),
            Outcome::Exited(_) => {}
        }
        let written = crate::protocol::read_written(work.path(), &prepared);
        let r = prepared.judge_written(&written);
        let ranks = match written {
            Written::Ranks(ranks) => Some(ranks),
            _ => None,
        };
        Ok(Run::Judged(Box::new((prepared, r, ranks))))
    }

    /// Try a candidate: `Some((prepared, result, rank outputs))` when it fails the same way.
    fn attempt(&mut self, case: &SuiteCase) -> std::result::Result<Option<Kept>, Stop> {
        if self.runs > self.max_runs || !valid(case) {
            return Ok(None);
        }
        if !case.shard_sizes.is_empty()
            && (super::empty_ranks(case) > self.max_empty
                || case.shard_sizes.len() < self.min_ranks)
        {
            return Ok(None);
        }
        match self.run(case)? {
            Run::Interrupted(sig) => Err(Stop::Signal(sig)),
            Run::TimedOut => Ok(None),
            Run::Judged(kept) => {
                let (p, r, _) = &*kept;
                let sig = self.signature.as_ref().expect("set from the original");
                if sig.matches(p, r) {
                    if !self.quiet {
                        eprintln!(
                            "bnconf shrink: run {}: {:?}, {} input elements: still fails ({})",
                            self.runs,
                            case.shape,
                            case.inputs.values().map(Vec::len).sum::<usize>(),
                            crate::report::fmt_ratio(r.worst_ratio)
                        );
                    }
                    Ok(Some(*kept))
                } else {
                    Ok(None)
                }
            }
        }
    }
}

/// The channel of output element `index` of `name` in `case`.
fn channel_of(case: &SuiteCase, name: &str, index: usize) -> usize {
    let d = Dims::of(case.layout, &case.shape);
    match Op::extent(name) {
        Extent::Cells => d.position(case.layout, index).1,
        Extent::Channel => index,
        Extent::Shards => 0,
    }
}

/// Shrink `original` against the kernel `opts` (at most `max_runs` runs after the original).
pub fn shrink(
    original: &SuiteCase,
    opts: &ExecOptions,
    max_runs: usize,
    quiet: bool,
) -> Result<Ended> {
    let mut s = Search {
        opts,
        max_runs,
        runs: 0,
        signature: None,
        quiet,
        max_empty: super::empty_ranks(original),
        min_ranks: original.shard_sizes.len().min(2),
    };
    let (p0, r0, ranks0) = match s.run(original)? {
        Run::Interrupted(sig) => return Ok(Ended::Interrupted(sig)),
        Run::TimedOut => {
            return Err(ConfError::field(
                "--timeout",
                format!(
                    "the kernel timed out after {} on the original case {}",
                    exec::seconds(opts.timeout),
                    original.id
                ),
            ))
        }
        Run::Judged(kept) => *kept,
    };
    let Some(sig) = Signature::of(&p0, &r0) else {
        let why = match &r0.verdict {
            Verdict::Pass => format!(
                "it conforms (worst ratio {} <= k = {:.2})",
                crate::report::fmt_ratio(r0.worst_ratio),
                r0.k
            ),
            Verdict::Unsupported(w) => format!("the kernel reports it unsupported: {w}"),
            Verdict::Malformed(w) => {
                format!("the kernel's outputs are missing or malformed: {w}")
            }
            Verdict::Fail => unreachable!("a failing result has a signature"),
        };
        return Ok(Ended::DoesNotFail(why));
    };
    s.signature = Some(sig.clone());
    let worst_channel = r0
        .outputs
        .iter()
        .find(|o| o.name == sig.output)
        .map(|o| channel_of(original, &o.name, o.index))
        .unwrap_or(0);
    let mut cur = original.clone();
    let mut best: Kept = (p0, r0.clone(), ranks0);
    let mut first_channel = Some(worst_channel);
    let result = (|| -> std::result::Result<(), Stop> {
        for _pass in 0..4 {
            let before = cur.clone();
            // 1. channels
            loop {
                let d = Dims::of(cur.layout, &cur.shape);
                if d.c <= 1 {
                    break;
                }
                let all = Selection::all(d);
                let first: Option<usize> = first_channel.take().filter(|&c| c < d.c);
                let order: Vec<usize> = first
                    .into_iter()
                    .chain((0..d.c).filter(|&c| Some(c) != first))
                    .collect();
                let mut done = false;
                for &c in &order {
                    let sel = Selection {
                        c: vec![c],
                        ..all.clone()
                    };
                    if let Some(cand) = select(&cur, &sel) {
                        if let Some(pr) = s.attempt(&cand)? {
                            (cur, best, done) = (cand, pr, true);
                            break;
                        }
                    }
                }
                if done {
                    break;
                }
                let mut dropped = false;
                for c in 0..d.c {
                    let sel = Selection {
                        c: (0..d.c).filter(|&k| k != c).collect(),
                        ..all.clone()
                    };
                    if let Some(cand) = select(&cur, &sel) {
                        if let Some(pr) = s.attempt(&cand)? {
                            (cur, best, dropped) = (cand, pr, true);
                            break;
                        }
                    }
                }
                if !dropped {
                    break;
                }
            }
            // 2. ranks (a replicated case): drop a whole rank, rows and all.
            'ranks: loop {
                for r in 0..cur.shard_sizes.len() {
                    if let Some(cand) = super::drop_rank(&cur, r) {
                        if let Some(pr) = s.attempt(&cand)? {
                            (cur, best) = (cand, pr);
                            continue 'ranks;
                        }
                    }
                }
                break;
            }
            // 3. cells, axis by axis: drop chunks, largest first.
            for axis in 0..4 {
                let len = |c: &SuiteCase| {
                    let d = Dims::of(c.layout, &c.shape);
                    [d.n, d.d, d.h, d.w][axis]
                };
                let mut chunk = len(&cur) / 2;
                while chunk >= 1 {
                    let mut start = 0;
                    while start < len(&cur) && len(&cur) > 1 {
                        let d = Dims::of(cur.layout, &cur.shape);
                        let mut sel = Selection::all(d);
                        let v = match axis {
                            0 => &mut sel.n,
                            1 => &mut sel.d,
                            2 => &mut sel.h,
                            _ => &mut sel.w,
                        };
                        let end = (start + chunk).min(v.len());
                        v.drain(start..end);
                        let reproduced = match select(&cur, &sel) {
                            Some(cand) => s.attempt(&cand)?.map(|pr| (cand, pr)),
                            None => None,
                        };
                        match reproduced {
                            Some((cand, pr)) => (cur, best) = (cand, pr),
                            None => start += chunk,
                        }
                    }
                    chunk = (chunk.min(len(&cur))) / 2;
                }
            }
            // 4. values
            let names: Vec<&'static str> = cur.op.inputs().to_vec();
            for name in names {
                let f = cur.dtype_of(name);
                if let Some(v) = super::neutral_value(name) {
                    let mut cand = cur.clone();
                    let arr = cand.inputs.get_mut(name).expect("input present");
                    if arr.iter().any(|&x| x != v) {
                        arr.iter_mut().for_each(|x| *x = v);
                        if let Some(pr) = s.attempt(&cand)? {
                            (cur, best) = (cand, pr);
                            continue;
                        }
                    }
                }
                for &k in &super::GRID_EXPONENTS {
                    let mut cand = cur.clone();
                    let arr = cand.inputs.get_mut(name).expect("input present");
                    let rounded: Vec<f64> = arr.iter().map(|&x| super::to_grid(x, k, f)).collect();
                    if rounded == *arr {
                        break; // already this simple: finer grids change nothing either
                    }
                    *arr = rounded;
                    if let Some(pr) = s.attempt(&cand)? {
                        (cur, best) = (cand, pr);
                        break;
                    }
                }
            }
            if cur == before || s.runs > s.max_runs {
                break;
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) => {}
        Err(Stop::Signal(sig)) => return Ok(Ended::Interrupted(sig)),
        Err(Stop::Error(e)) => return Err(e),
    }
    // The kept case under its new id: judged once more so that the result names it.
    let mut case = cur;
    case.id = format!("{}.shrunk", original.id);
    let (p_old, r_old, rank_outputs) = best;
    let prepared = Prepared {
        case: case.clone(),
        ..p_old
    };
    let result = CaseResult {
        id: case.id.clone(),
        ..r_old
    };
    Ok(Ended::Shrunk(Box::new(Shrunk {
        original: original.clone(),
        original_result: r0,
        case,
        prepared,
        result,
        signature: sig,
        runs: s.runs,
        command: opts.cmd.clone(),
        rank_outputs,
    })))
}
