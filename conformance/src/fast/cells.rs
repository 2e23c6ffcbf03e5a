//! Exact values element by element at float speed, for judging large cases.
//!
//! The same per-channel constants as the golden fast path ([`super::compute`]): exact sums,
//! exact per-channel rationals, then per element a double-double value with a rigorous error
//! bound ([`FastCells::approx`]) or, on request, the exact `a + b·sqrt(q)`
//! ([`FastCells::exact`]). Nothing is stored per element but the inputs, so a case of
//! millions of cells costs a few bytes per cell instead of a big number each.

use super::consts::{channel_consts, Chan};
use super::sums::{channel_sums, Sums};
use super::FastProblem;
use crate::error::Result;
use crate::formats::npy::NpyData;
use crate::par::*;
use bnconf_spec::exact::QSqrt;
use bnconf_spec::{Geometry, Layout, Op};

use super::dd::DD;

/// A prepared large case: its inputs and per-channel constants.
#[derive(Clone, Debug)]
pub struct FastCells {
    op: Op,
    geom: Geometry,
    x: Vec<f64>,
    dy: Option<Vec<f64>>,
    pub(super) chans: Vec<Chan>,
}

fn to_f64s(d: &NpyData) -> Vec<f64> {
    (0..d.len()).map(|i| d.get(i)).collect()
}

impl FastCells {
    /// Exact sums and constants of every channel (in parallel; the first failing channel in
    /// channel order reports, as the exact path does).
    pub fn new(p: &FastProblem) -> Result<FastCells> {
        let g = &p.geom;
        let x = to_f64s(&p.x);
        let dy = p.dy.as_ref().map(to_f64s);
        let want_x = matches!(p.op, Op::Forward | Op::Backward);
        let chans: Vec<Result<Chan>> = (0..g.c)
            .into_par_iter()
            .map(|c| {
                let s = if want_x || dy.is_some() {
                    channel_sums::<f64>(g, c, &x, dy.as_deref(), want_x)
                } else {
                    Sums::default()
                };
                channel_consts(p, c, &s)
            })
            .collect();
        Ok(FastCells {
            op: p.op,
            geom: g.clone(),
            chans: chans.into_iter().collect::<Result<_>>()?,
            x,
            dy,
        })
    }

    /// `p` with its constants already computed (`chans`, one per channel).
    pub(super) fn with_chans(p: &FastProblem, chans: Vec<Chan>) -> FastCells {
        FastCells {
            op: p.op,
            geom: p.geom.clone(),
            x: to_f64s(&p.x),
            dy: p.dy.as_ref().map(to_f64s),
            chans,
        }
    }

    /// The op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.x.len()
    }

    /// Whether there are no cells.
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// The channel of flat position `j`.
    pub fn channel_of(&self, j: usize) -> usize {
        let g = &self.geom;
        match g.layout {
            Layout::Rows | Layout::Flat | Layout::Chw => j / g.m,
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => (j / g.hw) % g.c,
            Layout::Nhwc | Layout::Ndhwc => j % g.c,
        }
    }

    pub(super) fn inputs_at(&self, j: usize) -> (f64, f64) {
        (self.x[j], self.dy.as_ref().map_or(0.0, |d| d[j]))
    }

    /// The cell output at flat position `j` in double-double with a bound on its absolute
    /// error, or `None` where the bound does not apply (constants out of range).
    #[inline]
    pub fn approx(&self, j: usize) -> Option<(DD, f64)> {
        let k = &self.chans[self.channel_of(j)].dd;
        if !k.ok {
            return None;
        }
        let (x, d) = self.inputs_at(j);
        Some(k.approx(x, d))
    }

    /// The cell output at flat position `j`, exactly.
    pub fn exact(&self, j: usize) -> QSqrt {
        let (x, d) = self.inputs_at(j);
        self.chans[self.channel_of(j)].exact(x, d)
    }

    /// The per-channel outputs (`mean`, `var`; `dgamma`, `dbeta`; none for eval and
    /// sync_forward), exactly: `[output][channel]`, outputs in [`Op::outputs`] order after the
    /// cell output.
    pub fn channel_outputs(&self) -> Vec<Vec<QSqrt>> {
        let n = self.op.outputs().len() - 1;
        (0..n)
            .map(|k| self.chans.iter().map(|ch| ch.outs[k].clone()).collect())
            .collect()
    }
}
