//! The element loop (step 3 of the fast path): per channel the sums and constants, then
//! every cell output in double-double with its bound, through branch-free block kernels
//! (AVX2 + FMA where the CPU has them), the exact path for undecided elements; [`compute`].

use super::consts::*;
use super::problem::*;
use super::sums::*;
use super::{cells, dd};
use crate::error::{ConfError, Result};
use crate::formats::npy::NpyData;
use crate::par::*;
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::exact::QSqrt;
use bnconf_spec::layout::Layout;
use bnconf_spec::{Geometry, Op};
use dd::DD;
use std::sync::atomic::{AtomicU64, Ordering};

/// The correctly rounded f64 of a value known to lie within `err` of `v`, if the
/// whole interval rounds to one float (and it is normal, not near overflow).
#[inline(always)]
pub fn decide_f64(v: DD, err: f64) -> Option<f64> {
    decides_f64(v, err).then_some(v.hi)
}

/// The correctly rounded f32 of a value known to lie within `err` of `v`, if the whole
/// interval rounds to one finite non-zero f32.
#[inline(always)]
pub fn decide_f32(v: DD, err: f64) -> Option<f32> {
    let (r, ok) = decides_f32(v, err);
    ok.then_some(r)
}

/// Elements per parallel work item of the element pass.
pub(super) const CHUNK: usize = 1 << 14;

/// A progress bar on a terminal for long golden runs (indicatif, with the `cli` feature).
pub(super) struct Progress(#[cfg(feature = "cli")] indicatif::ProgressBar);

impl Progress {
    pub(super) fn inc(&self, _n: u64) {
        #[cfg(feature = "cli")]
        self.0.inc(_n);
    }
    pub(super) fn finish_and_clear(&self) {
        #[cfg(feature = "cli")]
        self.0.finish_and_clear();
    }
}

#[cfg(not(feature = "cli"))]
pub(super) fn progress_bar(_len: u64, _show: bool) -> Progress {
    Progress()
}

#[cfg(feature = "cli")]
pub(super) fn progress_bar(len: u64, show: bool) -> Progress {
    use std::io::IsTerminal;
    Progress(
        if show && len >= 1 << 20 && std::io::stderr().is_terminal() {
            let pb = indicatif::ProgressBar::new(len);
            pb.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {pos}/{len} elements ({eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            pb.set_message("bnconf golden");
            pb
        } else {
            indicatif::ProgressBar::hidden()
        },
    )
}

pub(super) fn run<T: Cell>(
    p: &FastProblem,
    x: &[T],
    dy: Option<&[T]>,
    show: bool,
) -> Result<(FastOutputs, Vec<Chan>)> {
    let timer = Timer::new();
    let pb = progress_bar(progress_len(p, dy.is_some()), show);
    let chans = channels(p, x, dy, &pb)?;
    timer.lap("exact sums and per-channel constants");
    // 3. Cell outputs.
    let len = p.geom.len();
    let mut o64 = crate::mem::zeroed_vec::<f64>(len);
    let mut o32 = crate::mem::zeroed_vec::<f32>(len);
    let inp = CellsIn {
        g: &p.geom,
        chans: &chans,
        x,
        dy,
    };
    let fallbacks = cells_range(&inp, 0, &mut o64, &mut o32, &pb);
    pb.finish_and_clear();
    timer.lap("elements (double-double + Ziv test)");
    // 4. Per-channel outputs.
    let mut outputs = vec![(p.op.outputs()[0], o64, o32)];
    outputs.extend(channel_outputs(p, &chans));
    let out = FastOutputs {
        outputs,
        stats: FastStats {
            elements: len as u64,
            fallbacks,
        },
    };
    Ok((out, chans))
}

/// The progress bar's length: the sums' pass over the cells (where there is one) and the
/// element pass.
pub(super) fn progress_len(p: &FastProblem, has_dy: bool) -> u64 {
    let sums = matches!(p.op, Op::Forward | Op::Backward) || has_dy;
    (p.geom.len() as u64) * if sums { 2 } else { 1 }
}

/// Steps 1-2: per channel the exact sums and constants, in parallel; the first failing
/// channel (in channel order) reports, as the exact path does.
pub(super) fn channels<T: Cell>(
    p: &FastProblem,
    x: &[T],
    dy: Option<&[T]>,
    pb: &Progress,
) -> Result<Vec<Chan>> {
    let g = &p.geom;
    let want_x = matches!(p.op, Op::Forward | Op::Backward);
    let chans: Vec<Result<Chan>> = (0..g.c)
        .into_par_iter()
        .map(|c| {
            let s = if want_x || dy.is_some() {
                let s = channel_sums(g, c, x, dy, want_x);
                pb.inc(g.m as u64);
                s
            } else {
                Sums::default()
            };
            channel_consts(p, c, &s)
        })
        .collect();
    chans.into_iter().collect()
}

/// Step 3 for the cells `base .. base + o64.len()`: their correctly rounded f64 and f32, in
/// parallel pieces of [`CHUNK`] (`base` a multiple of it); returns how many needed the exact
/// fallback.
pub(super) fn cells_range<T: Cell>(
    inp: &CellsIn<'_, T>,
    base: usize,
    o64: &mut [f64],
    o32: &mut [f32],
    pb: &Progress,
) -> u64 {
    debug_assert!(base.is_multiple_of(CHUNK) && o64.len() == o32.len());
    let fallbacks = AtomicU64::new(0);
    o64.par_chunks_mut(CHUNK)
        .zip(o32.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(ci, (c64, c32))| {
            let fb = cells_chunk_best(inp, base + ci * CHUNK, c64, c32);
            fallbacks.fetch_add(fb, Ordering::Relaxed);
            pb.inc(c64.len() as u64);
        });
    fallbacks.into_inner()
}

/// Step 4: the per-channel outputs (`mean`, `var`, `dgamma`, `dbeta`, ...) in the op's
/// order, each correctly rounded to f64 and f32.
pub(super) fn channel_outputs(
    p: &FastProblem,
    chans: &[Chan],
) -> Vec<(&'static str, Vec<f64>, Vec<f32>)> {
    let names = p.op.outputs();
    let mut outputs = Vec::new();
    for (k, &name) in names.iter().enumerate().skip(1) {
        let vals: Vec<&QSqrt> = chans.iter().map(|ch| &ch.outs[k - 1]).collect();
        let f64s = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F64).to_f64())
            .collect();
        let f32s = vals
            .par_iter()
            .map(|v| round(v, FloatFormat::F32).to_f64() as f32)
            .collect();
        outputs.push((name, f64s, f32s));
    }
    outputs
}

/// Elements per block of [`block_approx`].
pub(super) const BLOCK: usize = 256;

/// The correctly rounded f64 and f32 of the cell at `(x, d)`: those `decide_*` found, the
/// others from the exact value.
#[cold]
pub(super) fn fallback(
    ch: &Chan,
    x: f64,
    d: f64,
    r64: Option<f64>,
    r32: Option<f32>,
) -> (f64, f32) {
    let ex = ch.exact(x, d);
    (
        r64.unwrap_or_else(|| round(&ex, FloatFormat::F64).to_f64()),
        r32.unwrap_or_else(|| round(&ex, FloatFormat::F32).to_f64() as f32),
    )
}

/// Whether the whole interval `[v - err, v + err]` rounds to the f64 `v.hi`, which must then
/// be normal and within `[2^-1000, 2^1000]` (no branches, so that loops of it vectorise).
#[inline(always)]
pub(super) fn decides_f64(v: DD, err: f64) -> bool {
    let a = v.hi.abs();
    let in_range = (a > 9.332636185032189e-302) & (a < 1.0715086071862673e301); // [2^-1000, 2^1000]
    let bits = a.to_bits();
    let frac = bits & ((1u64 << 52) - 1);
    let ulp = f64::from_bits(((bits >> 52).wrapping_sub(52)) << 52);
    let below = if frac == 0 { ulp * 0.5 } else { ulp };
    let half = below * (0.5 - 1.0 / 1099511627776.0); // (1/2)(1 - 2^-39)
    in_range & (v.lo.abs() + err < half)
}

/// `(r, ok)`: `r = f32(v.hi)` and whether the whole interval `[v - err, v + err]` rounds to
/// that finite non-zero f32 (no branches).
#[inline(always)]
pub(super) fn decides_f32(v: DD, err: f64) -> (f32, bool) {
    let r = v.hi as f32;
    let finite = r.is_finite() & (r != 0.0) & err.is_finite() & v.lo.is_finite();
    let neg = v.hi < 0.0;
    let hs = if neg { -v.hi } else { v.hi };
    let ls = if neg { -v.lo } else { v.lo };
    let rb = r.abs().to_bits();
    let ef = rb >> 23;
    let frac = rb & 0x7f_ffff;
    let up = if ef == 0 {
        1.401298464324817e-45 // 2^-149
    } else {
        f64::from_bits((ef as u64 + 1023 - 127 - 23) << 52)
    };
    let down = if (ef > 1) & (frac == 0) { up * 0.5 } else { up };
    let ra = r.abs() as f64;
    let dh = hs - (ra + up * 0.5);
    let dl = hs - (ra - down * 0.5);
    let slack = 1.0 / 562949953421312.0; // 2^-49
    let err = err * (1.0 + slack);
    let ok = (dh + ls + err + slack * (dh.abs() + ls.abs()) < 0.0)
        & (dl + ls - err - slack * (dl.abs() + ls.abs()) > 0.0);
    (r, finite & ok)
}

/// One block of a contiguous run of a channel whose constants are in range: the
/// double-double value of every cell and the branch-free decisions (the same arithmetic as
/// [`DdConst::approx_by`], [`decide_f64`] and [`decide_f32`], so the same results, written so
/// that the compiler vectorises it). Writes `o64`, `o32` and `flags` (1 where both roundings
/// were decided); returns whether every cell was. `d` is read only when `HAS_D`.
#[inline(always)]
pub(super) fn block_approx<T: Cell, P: dd::Prod, const HAS_D: bool>(
    k: &DdConst,
    x: &[T],
    d: &[T],
    o64: &mut [f64],
    o32: &mut [f32],
    flags: &mut [u8],
) -> bool {
    let n = o64.len();
    let (x, d, o32, flags) = (&x[..n], &d[..n], &mut o32[..n], &mut flags[..n]);
    let mut all = 1u8;
    for j in 0..n {
        let dv = if HAS_D { d[j].to_f64() } else { 0.0 };
        let (v, err) = k.approx_with::<P, HAS_D>(x[j].to_f64(), dv);
        let ok64 = decides_f64(v, err);
        let (r, ok32) = decides_f32(v, err);
        o64[j] = v.hi;
        o32[j] = r;
        let f = (ok64 & ok32) as u8;
        flags[j] = f;
        all &= f;
    }
    all == 1
}

/// What the element pass reads: geometry, per-channel constants, the cell inputs.
#[derive(Clone, Copy)]
pub(super) struct CellsIn<'a, T> {
    pub(super) g: &'a Geometry,
    pub(super) chans: &'a [Chan],
    pub(super) x: &'a [T],
    pub(super) dy: Option<&'a [T]>,
}

/// The cell outputs `base .. base + c64.len()` (correctly rounded f64 and f32); returns how
/// many needed the exact fallback. Generic over how exact products are formed (`P`).
#[inline(always)]
pub(super) fn cells_chunk<T: Cell, P: dd::Prod>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    let CellsIn { g, chans, x, dy } = *inp;
    let end = base + c64.len();
    let mut fb = 0u64;
    let mut i = base;
    while i < end {
        let (c, run_end) = match g.layout {
            Layout::Rows | Layout::Flat | Layout::Chw => {
                let c = i / g.m;
                (c, (c + 1) * g.m)
            }
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                let b = i / g.hw;
                (b % g.c, (b + 1) * g.hw)
            }
            Layout::Nhwc | Layout::Ndhwc => (i % g.c, i + 1),
        };
        let run_end = run_end.min(end);
        let ch = &chans[c];
        let k = &ch.dd;
        if k.ok && k.has_d == dy.is_some() && run_end - i >= 2 {
            // A contiguous run of one channel: the branch-free block kernel, then the
            // exact path for the elements it could not decide.
            let (xs, ds) = (&x[i..run_end], dy.map(|d| &d[i..run_end]));
            let (o64, o32) = (
                &mut c64[i - base..run_end - base],
                &mut c32[i - base..run_end - base],
            );
            let mut flags = [0u8; BLOCK];
            for (b, (o64, o32)) in o64.chunks_mut(BLOCK).zip(o32.chunks_mut(BLOCK)).enumerate() {
                let at = b * BLOCK;
                let n = o64.len();
                let xb = &xs[at..at + n];
                let f = &mut flags[..n];
                let all = match ds {
                    Some(d) => block_approx::<T, P, true>(k, xb, &d[at..at + n], o64, o32, f),
                    None => block_approx::<T, P, false>(k, xb, xb, o64, o32, f),
                };
                if all {
                    continue;
                }
                for (t, &f) in flags[..n].iter().enumerate() {
                    if f == 0 {
                        let xv = xb[t].to_f64();
                        let dv = ds.map_or(0.0, |d| d[at + t].to_f64());
                        let (v, err) = k.approx_by::<P>(xv, dv);
                        let (a, b) = fallback(ch, xv, dv, decide_f64(v, err), decide_f32(v, err));
                        fb += 1;
                        o64[t] = a;
                        o32[t] = b;
                    }
                }
            }
            i = run_end;
            continue;
        }
        for j in i..run_end {
            let xv = x[j].to_f64();
            let dv = dy.map_or(0.0, |d| d[j].to_f64());
            let (r64, r32) = if k.ok {
                let (v, err) = k.approx_by::<P>(xv, dv);
                (decide_f64(v, err), decide_f32(v, err))
            } else {
                (None, None)
            };
            let (r64, r32) = match (r64, r32) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    fb += 1;
                    fallback(ch, xv, dv, r64, r32)
                }
            };
            c64[j - base] = r64;
            c32[j - base] = r32;
        }
        i = run_end;
    }
    fb
}

/// [`cells_chunk`] compiled for CPUs with FMA: the exact products of the double-double
/// arithmetic take one `vfmadd` instead of Veltkamp splitting (bit-identical results).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) fn cells_chunk_fma<T: Cell>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    cells_chunk::<T, dd::Fused>(inp, base, c64, c32)
}

/// [`cells_chunk`] with FMA where the CPU has it (checked at run time), else portable.
/// `BNCONF_NO_FMA` set: always portable (for comparing the two).
pub(super) fn cells_chunk_best<T: Cell>(
    inp: &CellsIn<'_, T>,
    base: usize,
    c64: &mut [f64],
    c32: &mut [f32],
) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if use_fma() {
        // SAFETY: the CPU supports FMA (use_fma checked it at run time).
        return unsafe { cells_chunk_fma(inp, base, c64, c32) };
    }
    cells_chunk::<T, dd::Portable>(inp, base, c64, c32)
}

/// Whether [`cells_chunk_best`] takes the FMA path (decided once per process).
#[cfg(target_arch = "x86_64")]
pub fn use_fma() -> bool {
    static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FMA.get_or_init(|| {
        std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::env::var_os("BNCONF_NO_FMA").is_none()
    })
}

/// Evaluate a problem: correctly rounded f64 and f32 outputs, identical to the exact path.
/// `progress` shows a bar on stderr for large problems when stderr is a terminal.
pub fn compute(p: &FastProblem, progress: bool) -> Result<FastOutputs> {
    compute_chans(p, progress).map(|(out, _)| out)
}

/// [`compute`], also returning the problem as [`cells::FastCells`] (its per-channel constants
/// computed once, for the exact value of any element).
pub fn compute_cells(p: &FastProblem) -> Result<(FastOutputs, cells::FastCells)> {
    let (out, chans) = compute_chans(p, false)?;
    Ok((out, cells::FastCells::with_chans(p, chans)))
}

pub(super) fn compute_chans(p: &FastProblem, progress: bool) -> Result<(FastOutputs, Vec<Chan>)> {
    struct Run(bool);
    impl CellsFn for Run {
        type Out = (FastOutputs, Vec<Chan>);
        fn call<T: Cell>(self, p: &FastProblem, x: &[T], dy: Option<&[T]>) -> Result<Self::Out> {
            run::<T>(p, x, dy, self.0)
        }
    }
    with_cells(p, Run(progress))
}

/// A computation over a problem's cell inputs in one float type ([`with_cells`]).
pub(super) trait CellsFn {
    /// What it returns.
    type Out;
    /// Run it on the cells `x` (and `dy`), of type `T`.
    fn call<T: Cell>(self, p: &FastProblem, x: &[T], dy: Option<&[T]>) -> Result<Self::Out>;
}

/// `f` on the problem's cell inputs as they are stored (f32 or f64; an f32/f64 mix promoted
/// to f64).
pub(super) fn with_cells<F: CellsFn>(p: &FastProblem, f: F) -> Result<F::Out> {
    match (&p.x, &p.dy) {
        (NpyData::F32(x), None) => f.call::<f32>(p, x, None),
        (NpyData::F64(x), None) => f.call::<f64>(p, x, None),
        (NpyData::F32(x), Some(NpyData::F32(d))) => f.call::<f32>(p, x, Some(d)),
        (NpyData::F64(x), Some(NpyData::F64(d))) => f.call::<f64>(p, x, Some(d)),
        (x, Some(d)) => {
            let (x, d) = (promote(x.clone()), promote(d.clone()));
            match (&x, &d) {
                (NpyData::F64(x), NpyData::F64(d)) => f.call::<f64>(p, x, Some(d)),
                _ => Err(ConfError::field("inputs", "f16/u16 npy not supported here")),
            }
        }
        (NpyData::F16(_) | NpyData::U16(_), None) => Err(ConfError::field(
            "inputs.x",
            "f16/u16 npy not supported here",
        )),
    }
}

/// Phase timings on stderr when `BNCONF_TIMING` is set (for performance work).
pub(super) struct Timer(Option<std::cell::Cell<std::time::Instant>>);

impl Timer {
    pub(super) fn new() -> Timer {
        Timer(
            std::env::var_os("BNCONF_TIMING")
                .map(|_| std::cell::Cell::new(std::time::Instant::now())),
        )
    }
    pub(super) fn lap(&self, what: &str) {
        if let Some(t) = &self.0 {
            eprintln!(
                "bnconf: {what}: {:.1} ms",
                t.get().elapsed().as_secs_f64() * 1e3
            );
            t.set(std::time::Instant::now());
        }
    }
}
