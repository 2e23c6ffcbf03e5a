//! `bnconf bench`: the fast exact reference side by side with a float kernel and with the
//! naive exact path, in one run (docs/DESIGN.md §5).
//!
//! On deterministic pseudo-random f32 data of an `[N, C, H, W]` shape it times, for forward
//! and backward:
//! - **fast exact**: [`super::compute`] (correctly rounded f64 and f32 outputs);
//! - **f64 two-pass**: a plain two-pass float64 kernel written here (channels in parallel on
//!   the same threads), the speed of an ordinary float kernel;
//! - **bnconf-impl twopass-f64**: our kernel under test of that name (serial, generic driver);
//! - **naive exact**: [`bnconf_spec::Problem::evaluate`] plus rounding of every output element, on a
//!   smaller shape; its per-element time is extrapolated to the full shape (labelled so).

use super::{compute, FastProblem};
use crate::error::{ConfError, Result};
use crate::formats::npy::NpyData;
use crate::par::*;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt, Rational};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Instant;

/// Options of `bnconf bench`.
#[derive(Clone, Debug)]
pub struct BenchOpts {
    /// `[N, C, H, W]` of the main measurement.
    pub shape: Vec<usize>,
    /// `[N, C, H, W]` of the naive exact measurement (extrapolated).
    pub naive_shape: Vec<usize>,
    /// Data seed.
    pub seed: u64,
    /// Repetitions of the fast runs (the best is reported).
    pub reps: usize,
    /// Also time the bnconf-impl `twopass-f64` kernel.
    pub impl_kernel: bool,
}

impl Default for BenchOpts {
    fn default() -> Self {
        BenchOpts {
            shape: vec![32, 64, 56, 56],
            naive_shape: vec![2, 4, 16, 16],
            seed: 1,
            reps: 3,
            impl_kernel: true,
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32) * (1.0 / (1u64 << 23) as f32) - 1.0
    }
}

/// Data of the benchmark: `x`, `dy` in NCHW, `gamma`, `beta` per channel (all f32 values).
pub struct BenchData {
    /// Geometry (nchw).
    pub geom: Geometry,
    /// `x`.
    pub x: Vec<f32>,
    /// `dy`.
    pub dy: Vec<f32>,
    /// `gamma`.
    pub gamma: Vec<f32>,
    /// `beta`.
    pub beta: Vec<f32>,
}

/// Deterministic pseudo-random data: per channel an offset and a scale, cells uniform.
pub fn bench_data(shape: &[usize], seed: u64) -> Result<BenchData> {
    let geom = Geometry::new(Layout::Nchw, shape, usize::MAX)?;
    let mut r = Rng(seed);
    let offs: Vec<f32> = (0..geom.c).map(|_| 4.0 * r.unit()).collect();
    let scale: Vec<f32> = (0..geom.c).map(|_| 0.5 + r.unit().abs() * 2.0).collect();
    let gamma = (0..geom.c).map(|_| 1.0 + 0.5 * r.unit()).collect();
    let beta = (0..geom.c).map(|_| 0.5 * r.unit()).collect();
    let len = geom.len();
    let mut x = Vec::with_capacity(len);
    let mut dy = Vec::with_capacity(len);
    for i in 0..len {
        let c = (i / geom.hw) % geom.c;
        x.push(offs[c] + scale[c] * r.unit());
        dy.push(r.unit());
    }
    Ok(BenchData {
        geom,
        x,
        dy,
        gamma,
        beta,
    })
}

const EPS: f64 = 1e-5;

fn eps_rational() -> Rational {
    Rational::new(1.into(), 100_000.into())
}

/// Per-channel `(mean, 1/sqrt(var + eps))`, two passes in f64.
fn stats_f64(g: &Geometry, x: &[f32]) -> Vec<(f64, f64)> {
    (0..g.c)
        .into_par_iter()
        .map(|c| {
            let mut s = 0f64;
            for n in 0..g.n {
                let b = (n * g.c + c) * g.hw;
                s += x[b..b + g.hw].iter().map(|&v| v as f64).sum::<f64>();
            }
            let mean = s / g.m as f64;
            let mut ss = 0f64;
            for n in 0..g.n {
                let b = (n * g.c + c) * g.hw;
                ss += x[b..b + g.hw]
                    .iter()
                    .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                    .sum::<f64>();
            }
            (mean, 1.0 / (ss / g.m as f64 + EPS).sqrt())
        })
        .collect()
}

/// A plain two-pass f64 forward kernel on NCHW f32 data (output f64).
pub fn twopass_forward(d: &BenchData) -> Vec<f64> {
    let g = &d.geom;
    let st = stats_f64(g, &d.x);
    let mut y = vec![0f64; g.len()];
    y.par_chunks_mut(g.hw).enumerate().for_each(|(b, yb)| {
        let c = b % g.c;
        let (mean, r) = st[c];
        let (ga, be) = (d.gamma[c] as f64, d.beta[c] as f64);
        let xb = &d.x[b * g.hw..(b + 1) * g.hw];
        for (o, &v) in yb.iter_mut().zip(xb) {
            *o = ga * (v as f64 - mean) * r + be;
        }
    });
    y
}

/// A plain two-pass f64 backward kernel on NCHW f32 data (output dx in f64).
pub fn twopass_backward(d: &BenchData) -> Vec<f64> {
    let g = &d.geom;
    let st = stats_f64(g, &d.x);
    let red: Vec<(f64, f64)> = (0..g.c)
        .into_par_iter()
        .map(|c| {
            let (mean, r) = st[c];
            let (mut sdy, mut sdyx) = (0f64, 0f64);
            for n in 0..g.n {
                let b = (n * g.c + c) * g.hw;
                for (&xv, &dv) in d.x[b..b + g.hw].iter().zip(&d.dy[b..b + g.hw]) {
                    sdy += dv as f64;
                    sdyx += dv as f64 * (xv as f64 - mean) * r;
                }
            }
            (sdy / g.m as f64, sdyx / g.m as f64)
        })
        .collect();
    let mut dx = vec![0f64; g.len()];
    dx.par_chunks_mut(g.hw).enumerate().for_each(|(b, ob)| {
        let c = b % g.c;
        let (mean, r) = st[c];
        let (mdy, mdyx) = red[c];
        let gr = d.gamma[c] as f64 * r;
        let xb = &d.x[b * g.hw..(b + 1) * g.hw];
        let db = &d.dy[b * g.hw..(b + 1) * g.hw];
        for ((o, &xv), &dv) in ob.iter_mut().zip(xb).zip(db) {
            let xh = (xv as f64 - mean) * r;
            *o = gr * (dv as f64 - mdy - xh * mdyx);
        }
    });
    dx
}

/// The fast-path problem of the benchmark data.
pub fn fast_problem(d: &BenchData, op: Op) -> Result<FastProblem> {
    let mut cells = BTreeMap::new();
    let mut chan = BTreeMap::new();
    cells.insert("x".to_string(), NpyData::F32(d.x.clone()));
    chan.insert(
        "gamma".to_string(),
        d.gamma.iter().map(|&v| v as f64).collect(),
    );
    match op {
        Op::Forward => {
            chan.insert(
                "beta".to_string(),
                d.beta.iter().map(|&v| v as f64).collect(),
            );
        }
        Op::Backward => {
            cells.insert("dy".to_string(), NpyData::F32(d.dy.clone()));
        }
        _ => return Err(ConfError::field("op", "bench runs forward and backward")),
    }
    FastProblem::new(op, d.geom.clone(), eps_rational(), cells, chan)
}

/// The exact problem of the benchmark data (for the naive baseline).
pub fn exact_problem(d: &BenchData, op: Op) -> Result<Problem> {
    let q = |v: &[f32]| -> Vec<QSqrt> {
        v.iter()
            .map(|&e| QSqrt::rational(f64_to_rational(e as f64).expect("finite")))
            .collect()
    };
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), q(&d.x));
    inputs.insert("gamma".to_string(), q(&d.gamma));
    match op {
        Op::Forward => inputs.insert("beta".to_string(), q(&d.beta)),
        _ => inputs.insert("dy".to_string(), q(&d.dy)),
    };
    Ok(Problem::new(op, d.geom.clone(), eps_rational(), inputs)?)
}

fn impl_case(d: &BenchData, op: Op) -> bnconf_impl::Case {
    let f = |v: &[f32]| v.iter().map(|&e| e as f64).collect::<Vec<f64>>();
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), f(&d.x));
    inputs.insert("gamma".to_string(), f(&d.gamma));
    if op == Op::Forward {
        inputs.insert("beta".to_string(), f(&d.beta));
    } else {
        inputs.insert("dy".to_string(), f(&d.dy));
    }
    bnconf_impl::Case {
        op: if op == Op::Forward {
            bnconf_impl::Op::Forward
        } else {
            bnconf_impl::Op::Backward
        },
        layout: bnconf_impl::Layout::Nchw,
        shape: d.geom.shape.clone(),
        dtype: bnconf_impl::Dtype::F64,
        param_dtype: bnconf_impl::Dtype::F64,
        eps: EPS,
        inputs,
        params: Default::default(),
    }
}

fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(r);
    }
    (best, last.expect("at least one repetition"))
}

fn secs(s: f64) -> String {
    if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

/// Run the benchmark and return its report (Markdown).
pub fn run(opts: &BenchOpts) -> Result<String> {
    let d = bench_data(&opts.shape, opts.seed)?;
    let nd = bench_data(&opts.naive_shape, opts.seed)?;
    let len = d.geom.len();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bnconf bench: nchw {:?} f32 inputs ({} elements), eps 1e-5, {} threads, best of {}",
        opts.shape,
        len,
        crate::par::current_num_threads(),
        opts.reps
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| op | fast exact (f64+f32 CR) | f64 two-pass | ratio | impl twopass-f64 (serial) | naive exact (extrapolated) | naive / fast | fallbacks |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for op in [Op::Forward, Op::Backward] {
        let fp = fast_problem(&d, op)?;
        let (t_fast, res) = best(opts.reps, || compute(&fp, false));
        let res = res?;
        drop(fp);
        let (t_f64, y) = best(opts.reps, || match op {
            Op::Forward => twopass_forward(&d),
            _ => twopass_backward(&d),
        });
        // Sanity: the float kernel is close to the exact result.
        let exact = &res.outputs[0].1;
        let maxdiff = y
            .iter()
            .zip(exact)
            .map(|(a, b)| (a - b).abs())
            .fold(0f64, f64::max);
        drop(y);
        let t_impl = if opts.impl_kernel {
            let k = bnconf_impl::kernel_by_name("twopass-f64")
                .ok_or_else(|| ConfError::field("kernel", "twopass-f64 missing"))?;
            let case = impl_case(&d, op);
            let t = Instant::now();
            k.run(&case)
                .map_err(|e| ConfError::field("kernel", e.to_string()))?;
            Some(t.elapsed().as_secs_f64())
        } else {
            None
        };
        // Naive exact on the small shape, per element, extrapolated.
        let np = exact_problem(&nd, op)?;
        let t = Instant::now();
        let outs = np.evaluate()?;
        for vals in outs.values() {
            for v in vals {
                std::hint::black_box(round(v, FloatFormat::F64));
                std::hint::black_box(round(v, FloatFormat::F32));
            }
        }
        let t_naive_small = t.elapsed().as_secs_f64();
        let per_elt = t_naive_small / nd.geom.len() as f64;
        let t_naive = per_elt * len as f64;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2}x | {} | {} ({:.1} µs/element on {:?}) | {:.0}x | {} of {} |",
            op.name(),
            secs(t_fast),
            secs(t_f64),
            t_fast / t_f64,
            t_impl.map(secs).unwrap_or_else(|| "-".into()),
            secs(t_naive),
            per_elt * 1e6,
            opts.naive_shape,
            t_naive / t_fast,
            res.stats.fallbacks,
            res.stats.elements,
        );
        if maxdiff > 1e-9 {
            let _ = writeln!(
                out,
                "warning: {} f64 two-pass differs from the exact result by {maxdiff:e}",
                op.name()
            );
        }
    }
    Ok(out)
}

/// CLI options of `bnconf bench`.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct BenchArgs {
    /// `N,C,H,W` of the measurement.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_delimiter = ',', default_value = "32,64,56,56")
    )]
    pub shape: Vec<usize>,
    /// `N,C,H,W` of the naive exact baseline (its per-element time is extrapolated).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_delimiter = ',', default_value = "2,4,16,16")
    )]
    pub naive_shape: Vec<usize>,
    /// Data seed.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    pub seed: u64,
    /// Repetitions of the timed float and fast runs (best reported).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 3))]
    pub reps: usize,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores).
    #[cfg_attr(feature = "cli", arg(long))]
    pub threads: Option<usize>,
    /// Skip the (serial, slower) bnconf-impl twopass-f64 kernel.
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_impl: bool,
}

/// `bnconf bench`: print the report to stdout.
pub fn cli(a: &BenchArgs) -> Result<()> {
    let opts = BenchOpts {
        shape: a.shape.clone(),
        naive_shape: a.naive_shape.clone(),
        seed: a.seed,
        reps: a.reps,
        impl_kernel: !a.no_impl,
    };
    for s in [&opts.shape, &opts.naive_shape] {
        if s.len() != 4 {
            return Err(ConfError::field("--shape", "needs N,C,H,W"));
        }
    }
    let report = super::with_threads(a.threads, || run(&opts))??;
    print!("{report}");
    Ok(())
}
