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
    cells: CellInputs,
    pub(super) chans: Vec<Chan>,
}

/// The cell inputs `x` and `dy` as the case holds them: binary32 values as f32 (4 bytes a
/// value: a large case's inputs are not copied to f64), any other as f64.
#[derive(Clone, Debug)]
enum CellInputs {
    F32(Vec<f32>, Option<Vec<f32>>),
    F64(Vec<f64>, Option<Vec<f64>>),
}

impl CellInputs {
    /// `x` and `dy` of `p`, moved where they are f32 (or copied, `p` borrowed), else converted.
    fn of(x: std::borrow::Cow<NpyData>, dy: Option<std::borrow::Cow<NpyData>>) -> CellInputs {
        use std::borrow::Cow;
        let f32s = |d: Cow<NpyData>| match d {
            Cow::Owned(NpyData::F32(v)) => Ok(v),
            Cow::Borrowed(NpyData::F32(v)) => Ok(v.clone()),
            other => Err(other.to_f64s()),
        };
        match (f32s(x), dy.map(f32s)) {
            (Ok(x), None) => CellInputs::F32(x, None),
            (Ok(x), Some(Ok(d))) => CellInputs::F32(x, Some(d)),
            (x, d) => {
                let wide = |r: std::result::Result<Vec<f32>, Vec<f64>>| match r {
                    Ok(v) => v.into_iter().map(f64::from).collect(),
                    Err(w) => w,
                };
                CellInputs::F64(wide(x), d.map(wide))
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            CellInputs::F32(x, _) => x.len(),
            CellInputs::F64(x, _) => x.len(),
        }
    }

    #[inline(always)]
    fn at(&self, j: usize) -> (f64, f64) {
        match self {
            CellInputs::F32(x, d) => (x[j] as f64, d.as_ref().map_or(0.0, |d| d[j] as f64)),
            CellInputs::F64(x, d) => (x[j], d.as_ref().map_or(0.0, |d| d[j])),
        }
    }
}

/// Calls `f(run, c)` for the positions `lo..hi` of a tensor of geometry `g` (flat, layout
/// order) in maximal consecutive runs of one channel `c`, in order: runs of `m` cells
/// (rows, flat, chw), of `hw` (the channels-first layouts) or single cells (channels-last),
/// with no division per run.
#[inline(always)]
pub fn channel_runs(
    g: &Geometry,
    lo: usize,
    hi: usize,
    mut f: impl FnMut(std::ops::Range<usize>, usize),
) {
    if lo >= hi {
        return;
    }
    let (run, mut c) = match g.layout {
        Layout::Rows | Layout::Flat | Layout::Chw => (g.m, lo / g.m),
        Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => (g.hw, (lo / g.hw) % g.c),
        Layout::Nhwc | Layout::Ndhwc => (1, lo % g.c),
    };
    let (mut j, mut end) = (lo, (lo / run + 1) * run);
    loop {
        let e = end.min(hi);
        f(j..e, c);
        if e >= hi {
            return;
        }
        (j, end) = (e, end + run);
        c += 1;
        if c == g.c {
            c = 0;
        }
    }
}

impl FastCells {
    /// Exact sums and constants of every channel (in parallel; the first failing channel in
    /// channel order reports, as the exact path does).
    pub fn new(p: &FastProblem) -> Result<FastCells> {
        let chans = Self::chans(p)?;
        Ok(Self::with_chans(p, chans))
    }

    /// [`FastCells::new`] keeping `p`'s inputs (not copied where they are f32).
    pub fn of_problem(p: FastProblem) -> Result<FastCells> {
        let chans = Self::chans(&p)?;
        Ok(FastCells {
            op: p.op,
            geom: p.geom,
            cells: CellInputs::of(
                std::borrow::Cow::Owned(p.x),
                p.dy.map(std::borrow::Cow::Owned),
            ),
            chans,
        })
    }

    fn chans(p: &FastProblem) -> Result<Vec<Chan>> {
        let g = &p.geom;
        fn wide(d: &NpyData) -> std::borrow::Cow<'_, [f64]> {
            match d {
                NpyData::F64(v) => std::borrow::Cow::Borrowed(v),
                other => std::borrow::Cow::Owned(other.to_f64s()),
            }
        }
        let f32_sums = matches!(
            (&p.x, &p.dy),
            (NpyData::F32(_), None | Some(NpyData::F32(_)))
        );
        let (x, dy) = if f32_sums {
            (std::borrow::Cow::Borrowed(&[][..]), None)
        } else {
            (wide(&p.x), p.dy.as_ref().map(wide))
        };
        let want_x = matches!(p.op, Op::Forward | Op::Backward);
        let chans: Vec<Result<Chan>> = (0..g.c)
            .into_par_iter()
            .map(|c| {
                let s = if want_x || p.dy.is_some() {
                    // f32 inputs summed as f32 (exponent buckets), others as f64: exact
                    // either way.
                    match (&p.x, &p.dy) {
                        (NpyData::F32(x), None) => channel_sums::<f32>(g, c, x, None, want_x),
                        (NpyData::F32(x), Some(NpyData::F32(d))) => {
                            channel_sums::<f32>(g, c, x, Some(d), want_x)
                        }
                        _ => channel_sums::<f64>(g, c, &x, dy.as_deref(), want_x),
                    }
                } else {
                    Sums::default()
                };
                channel_consts(p, c, &s)
            })
            .collect();
        chans.into_iter().collect()
    }

    /// `p` with its constants already computed (`chans`, one per channel).
    pub(super) fn with_chans(p: &FastProblem, chans: Vec<Chan>) -> FastCells {
        FastCells {
            op: p.op,
            geom: p.geom.clone(),
            cells: CellInputs::of(
                std::borrow::Cow::Borrowed(&p.x),
                p.dy.as_ref().map(std::borrow::Cow::Borrowed),
            ),
            chans,
        }
    }

    /// The op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether there are no cells.
    pub fn is_empty(&self) -> bool {
        self.cells.len() == 0
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

    #[inline(always)]
    pub(super) fn inputs_at(&self, j: usize) -> (f64, f64) {
        self.cells.at(j)
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

    /// [`FastCells::approx`] of position `j` whose channel `c` the caller knows (from
    /// [`channel_runs`]).
    #[inline]
    pub fn approx_in(&self, c: usize, j: usize) -> Option<(DD, f64)> {
        self.approx_in_by::<super::dd::Portable>(c, j)
    }

    /// [`FastCells::approx_in`] with the exact products formed by `P` (the same result; inlined
    /// into its caller, so that `dd::Fused` takes one instruction in FMA-compiled code).
    #[inline(always)]
    pub fn approx_in_by<P: super::dd::Prod>(&self, c: usize, j: usize) -> Option<(DD, f64)> {
        let k = &self.chans[c].dd;
        if !k.ok {
            return None;
        }
        let (x, d) = self.inputs_at(j);
        Some(k.approx_by::<P>(x, d))
    }

    /// The cell output at position `j` of channel `c` in plain f64 with a bound on its absolute
    /// error (about `2^-45` of its terms' magnitude), or `None` where the bound does not apply
    /// (constants out of range): a quick bracket of the exact value, tight enough to decide
    /// a low-precision output's ratio far from the gate.
    #[inline(always)]
    pub fn value_f64_in(&self, c: usize, j: usize) -> Option<(f64, f64)> {
        let k = &self.chans[c].dd;
        if !k.ok {
            return None;
        }
        let (x, d) = self.inputs_at(j);
        Some(if k.has_d {
            k.value_f64::<true>(x, d)
        } else {
            k.value_f64::<false>(x, d)
        })
    }

    /// The inputs of the cell at flat position `j`: `x` and `dy` (0 for ops without one).
    #[inline(always)]
    pub fn cell_inputs(&self, j: usize) -> (f64, f64) {
        self.inputs_at(j)
    }

    /// The geometry.
    pub fn geom(&self) -> &Geometry {
        &self.geom
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

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::Layout;

    /// `channel_runs` covers `lo..hi` in order, in runs of one channel each, and names the
    /// channel `FastCells::channel_of` computes for every position, in every layout and from
    /// any start (runs cut at both ends).
    #[test]
    fn channel_runs_name_each_positions_channel() {
        let shapes: [(Layout, &[usize]); 10] = [
            (Layout::Rows, &[3, 5]),
            (Layout::Flat, &[4, 6]),
            (Layout::Chw, &[3, 2, 4]),
            (Layout::Nchw, &[2, 3, 2, 3]),
            (Layout::Nc, &[4, 3]),
            (Layout::Ncl, &[2, 3, 5]),
            (Layout::Ncdhw, &[2, 3, 2, 1, 2]),
            (Layout::Nhwc, &[2, 2, 3, 3]),
            (Layout::Ndhwc, &[2, 1, 2, 2, 3]),
            (Layout::Nchw, &[1, 1, 1, 7]),
        ];
        let mut n = 0;
        for (layout, shape) in shapes {
            let g = Geometry::new(layout, shape, usize::MAX).unwrap();
            let fc = FastCells {
                op: Op::Forward,
                geom: g.clone(),
                cells: CellInputs::F64(vec![0.0; g.len()], None),
                chans: vec![],
            };
            for lo in 0..=g.len() {
                for hi in lo..=g.len() {
                    let mut seen = vec![];
                    channel_runs(&g, lo, hi, |run, c| {
                        assert!(!run.is_empty(), "{layout:?} {lo}..{hi}");
                        for j in run {
                            seen.push((j, c));
                        }
                    });
                    let want: Vec<(usize, usize)> =
                        (lo..hi).map(|j| (j, fc.channel_of(j))).collect();
                    assert_eq!(seen, want, "{layout:?} {shape:?} {lo}..{hi}");
                    n += 1;
                }
            }
        }
        assert!(n > 1000, "{n}");
    }
}
