//! The search of `bnconf shrink` on a normalization-family case with an outside kernel
//! (`--exec CMD`, run as `check --exec` runs it). Greedy and deterministic, as batch_norm's
//! ([`super::run`]): the moves in a fixed order, the first candidate that still fails the same
//! way is kept, and passes repeat until none helps or `--max-runs` is spent.
//!
//! Moves, in order, each pass:
//! 1. groups (group_norm): keep one group (the worst element's first, then 0, 1, …); else
//!    drop one group; then, from every group alike, keep one channel offset, else drop one;
//! 2. cells: along every other axis (rows and normalized axes of `last`, with `gamma`/`beta`
//!    sliced along the normalized ones; group_norm's `N` and spatial axes), drop chunks of
//!    indices, halves first, down to single ones;
//! 3. values, per input: the neutral value for the whole array (`gamma` 1, `beta` 0), then
//!    every value rounded to a multiple of `2^-k`, coarsest first ([`super::GRID_EXPONENTS`]).
//!
//! A candidate is only run when its fields are valid and it is not ill-posed
//! ([`super::family::valid`]).

use super::family::{
    channel_axis, group_channels, group_of, keep_all, matches, neutral_value, select, signature_of,
    suite_case, write_protocol_dir, AxisRole, FamilyShrunk,
};
use super::run::{Ended, Stop};
use super::Signature;
use crate::error::{ConfError, Result};
use crate::judge::family::{prepare_family, FamilyPrepared};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::protocol::exec::{self, ExecOptions, Outcome, WorkDir};
use crate::protocol::family::{judge_one, read_written};
use crate::suite::family::{format_of, FamilySuiteCase};
use bnconf_impl::family::FamilyCase;
use std::collections::BTreeMap;

/// A candidate that fails the same way: its preparation, its result, the kernel's outputs.
type Kept = (FamilyPrepared, CaseResult, BTreeMap<String, Vec<f64>>);

/// A candidate run and judged: its preparation, its result, the outputs judged (`None` when
/// unsupported or malformed).
type Judged = (
    FamilyPrepared,
    CaseResult,
    Option<BTreeMap<String, Vec<f64>>>,
);

enum Run {
    /// Judged: the preparation, the result and the outputs judged (`None` when unsupported or
    /// malformed).
    Judged(Box<Judged>),
    TimedOut,
    Interrupted(i32),
}

struct Search<'a> {
    opts: &'a ExecOptions,
    max_runs: usize,
    runs: usize,
    like: FamilySuiteCase,
    signature: Option<Signature>,
    quiet: bool,
}

impl Search<'_> {
    fn run(&mut self, case: &FamilyCase) -> Result<Run> {
        self.runs += 1;
        let sc = suite_case(&self.like, &self.like.id, case.clone());
        let p = prepare_family(&sc).map_err(|e| ConfError::field("case", e.to_string()))?;
        let work = WorkDir::temporary()?;
        write_protocol_dir(&sc, work.path())?;
        match exec::run(self.opts, work.path())? {
            Outcome::Interrupted(sig) => return Ok(Run::Interrupted(sig)),
            Outcome::TimedOut(_) => return Ok(Run::TimedOut),
            Outcome::Exited(_) => {}
        }
        let (r, _, got) = judge_one(&p, read_written(work.path(), &sc));
        Ok(Run::Judged(Box::new((p, r, got))))
    }

    /// Try a candidate (`None`: not valid, so not run): `Some` when it fails the same way.
    fn attempt(
        &mut self,
        cand: Option<FamilyCase>,
    ) -> std::result::Result<Option<(FamilyCase, Kept)>, Stop> {
        let Some(case) = cand else {
            return Ok(None);
        };
        if self.runs > self.max_runs {
            return Ok(None);
        }
        match self.run(&case)? {
            Run::Interrupted(sig) => Err(Stop::Signal(sig)),
            Run::TimedOut => Ok(None),
            Run::Judged(j) => {
                let (p, r, got) = *j;
                let Some(got) = got else { return Ok(None) };
                let sig = self.signature.as_ref().expect("set from the original");
                if !matches(sig, &p, &r, &got) {
                    return Ok(None);
                }
                if !self.quiet {
                    eprintln!(
                        "bnconf shrink: run {}: {:?}{}, {} input elements: still fails ({})",
                        self.runs,
                        case.shape,
                        case.groups
                            .map(|g| format!(" ({g} groups)"))
                            .unwrap_or_default(),
                        case.inputs.values().map(Vec::len).sum::<usize>(),
                        crate::report::fmt_ratio(r.worst_ratio)
                    );
                }
                Ok(Some((case, (p, r, got))))
            }
        }
    }
}

/// Shrink family case `original` against the kernel `opts` (at most `max_runs` runs after the
/// original).
pub fn shrink_family(
    original: &FamilySuiteCase,
    opts: &ExecOptions,
    max_runs: usize,
    quiet: bool,
) -> Result<Ended<FamilyShrunk>> {
    let mut s = Search {
        opts,
        max_runs,
        runs: 0,
        like: original.clone(),
        signature: None,
        quiet,
    };
    let (p0, r0, got0) = match s.run(&original.case)? {
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
        Run::Judged(j) => *j,
    };
    let sig = got0.as_ref().and_then(|g| signature_of(&p0, &r0, g));
    let (Some(sig), Some(got0)) = (sig, got0) else {
        let why = match &r0.verdict {
            Verdict::Pass => format!(
                "it conforms (worst ratio {} <= k)",
                crate::report::fmt_ratio(r0.worst_ratio),
            ),
            Verdict::Unsupported(w) => format!("the kernel reports it unsupported: {w}"),
            Verdict::Malformed(w) => format!("the kernel's outputs are missing or malformed: {w}"),
            Verdict::Fail => "it fails, but no output is over its gate".to_string(),
        };
        return Ok(Ended::DoesNotFail(why));
    };
    s.signature = Some(sig.clone());
    let worst_group = r0
        .outputs
        .iter()
        .find(|o| o.name == sig.output)
        .map(|o| group_of(&original.case, &o.name, o.index))
        .unwrap_or(0);
    let mut cur = original.case.clone();
    let mut best: Kept = (p0, r0.clone(), got0);
    let mut first_group = Some(worst_group);
    let result = (|| -> std::result::Result<(), Stop> {
        for _pass in 0..4 {
            let before = cur.clone();
            // 1. groups, then channel offsets within every group (group_norm)
            if let Some(ca) = channel_axis(&cur) {
                loop {
                    let (c, g) = (cur.shape[ca], cur.groups.unwrap_or(1));
                    if g <= 1 {
                        break;
                    }
                    let per: Vec<usize> = (0..c / g).collect();
                    let first = first_group.take().filter(|&x| x < g);
                    let order: Vec<usize> = first
                        .into_iter()
                        .chain((0..g).filter(|&x| Some(x) != first))
                        .collect();
                    let mut kept = false;
                    let subsets = order
                        .iter()
                        .map(|&x| vec![x])
                        .chain((0..g).map(|x| (0..g).filter(|&y| y != x).collect()));
                    for gs in subsets {
                        let mut keep = keep_all(&cur);
                        keep[ca] = group_channels(c, g, &gs, &per);
                        if let Some((cand, pr)) = s.attempt(select(&cur, &keep, Some(gs.len())))? {
                            (cur, best, kept) = (cand, pr, true);
                            break;
                        }
                    }
                    if !kept {
                        break;
                    }
                }
                loop {
                    let (c, g) = (cur.shape[ca], cur.groups.unwrap_or(1));
                    let per = c / g;
                    if per <= 1 {
                        break;
                    }
                    let gs: Vec<usize> = (0..g).collect();
                    let subsets = (0..per)
                        .map(|j| vec![j])
                        .chain((0..per).map(|j| (0..per).filter(|&k| k != j).collect()));
                    let mut kept = false;
                    for js in subsets {
                        let mut keep = keep_all(&cur);
                        keep[ca] = group_channels(c, g, &gs, &js);
                        if let Some((cand, pr)) = s.attempt(select(&cur, &keep, Some(g)))? {
                            (cur, best, kept) = (cand, pr, true);
                            break;
                        }
                    }
                    if !kept {
                        break;
                    }
                }
            }
            // 2. cells: every other axis, chunks dropped, largest first
            let roles = super::family::roles(&cur);
            for (axis, role) in roles.iter().enumerate() {
                if *role == AxisRole::Channel {
                    continue;
                }
                let mut chunk = cur.shape[axis] / 2;
                while chunk >= 1 {
                    let mut start = 0;
                    while start < cur.shape[axis] && cur.shape[axis] > 1 {
                        let mut keep = keep_all(&cur);
                        let end = (start + chunk).min(keep[axis].len());
                        keep[axis].drain(start..end);
                        let groups = cur.groups;
                        match s.attempt(select(&cur, &keep, groups))? {
                            Some((cand, pr)) => (cur, best) = (cand, pr),
                            None => start += chunk,
                        }
                    }
                    chunk = chunk.min(cur.shape[axis]) / 2;
                }
            }
            // 3. values
            let names: Vec<&'static str> = cur.op.inputs(cur.affine).to_vec();
            for name in names {
                let f = format_of(cur.dtype_of(name));
                if let Some(v) = neutral_value(name) {
                    let mut cand = cur.clone();
                    let arr = cand.inputs.get_mut(name).expect("input present");
                    if arr.iter().any(|&x| x != v) {
                        arr.iter_mut().for_each(|x| *x = v);
                        let ok = super::family::valid(&cand).then_some(cand);
                        if let Some((cand, pr)) = s.attempt(ok)? {
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
                    let ok = super::family::valid(&cand).then_some(cand);
                    if let Some((cand, pr)) = s.attempt(ok)? {
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
    let id = format!("{}.shrunk", original.id);
    let (p_old, r_old, outputs) = best;
    let prepared = FamilyPrepared {
        case: suite_case(original, &id, cur),
        ..p_old
    };
    let result = CaseResult { id, ..r_old };
    Ok(Ended::Shrunk(Box::new(FamilyShrunk {
        original: original.clone(),
        original_result: r0,
        prepared,
        result,
        outputs,
        signature: sig,
        runs: s.runs,
        command: opts.cmd.clone(),
    })))
}
