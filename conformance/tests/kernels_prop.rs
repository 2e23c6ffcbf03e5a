//! Property-based conformance of the float kernels of crate `kernels` (DESIGN §3).
//!
//! Strategies build the shape first (op, layout, dtype f32/f64, C in 1..=4, m in 1..=24 cells
//! per channel split into N, H, W as the layout allows) and then adversarial data for it
//! (`prop_flat_map`): the data classes of DESIGN §3, and handed-in statistics near or far
//! from the batch's (eval) or all-reduced over a larger batch of which the case is one shard
//! (sync ops), computed exactly and then rounded. Cases ill-posed in their dtype are left out
//! exactly (`suite::ill_posed`).
//!
//! Properties:
//! - `good_kernels_conform`: every good kernel passes every generated core/conditioning case;
//!   on range-level cases only the range-robust kernels (`twopass-f64`, `welford-f64` in f32)
//!   are held to it (where every exact output is zero or normal in the dtype). Every kernel,
//!   good or bad, must run every case without panicking and produce well-formed outputs.
//! - `known_bad_kernels_are_rejected`: for each known-bad kernel, a deterministic search
//!   (fixed seed, up to `BAD_SEARCH_CASES` cases of its defective ops) must find a case the
//!   checker rejects while every good kernel passes it; the case is shrunk and printed.
//! - `regression_vectors`: every `vectors/regressions/*.json` (bnconf-case/1 plus `level` and
//!   `expect_reject`) is passed by every good kernel and failed by the kernels it names.
//!
//! A failure prints the shrunk case (`CaseResult::detail` and the case JSON); with
//! `BNCONF_SAVE_REGRESSION=vectors/regressions` (relative to the workspace root, or absolute)
//! the shrunk case is written there. `PROPTEST_CASES` raises the number of cases (default
//! 256), `BNCONF_PROP_SEED` changes the seed. See docs/REGRESSIONS.md.

use conformance::case::{read_case_file, Dtype as CaseDtype, InputLimits};
use conformance::check::{self, CaseResult, Prepared, Verdict};
use conformance::golden;
use conformance::suite::{ill_posed, to_dtype, Level, SuiteCase};
use kernels::{all_kernels, Kernel, Verdict as KVerdict};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde_json::{json, Value};
use spec::exact::round::{f64_to_rational, round, FloatFormat};
use spec::op::Convention;
use spec::{Geometry, Layout, Op, QSqrt};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Kernels that stay accurate when squares or sums overflow or underflow f32 (they compute
/// in f64): the only ones held to the *range* level, and only in f32.
const RANGE_ROBUST_F32: [&str; 2] = ["twopass-f64", "welford-f64"];

/// Cases tried per known-bad kernel before the search gives up (and the test fails).
const BAD_SEARCH_CASES: u32 = 300;

/// Default seed of every search (`BNCONF_PROP_SEED` overrides it).
const DEFAULT_SEED: u64 = 20_261_129;

/// Shrinking steps of each known-bad search (`BNCONF_SHRINK_ITERS` overrides it; the committed
/// regression vectors were shrunk with more).
const BAD_SHRINK_ITERS: u32 = 60;

fn bad_shrink_iters() -> u32 {
    std::env::var("BNCONF_SHRINK_ITERS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(BAD_SHRINK_ITERS)
}

// ------------------------------------------------------------------------------ strategies

/// The shape part of a case: what is drawn first.
#[derive(Clone, Debug)]
struct Shape {
    op: Op,
    layout: Layout,
    dtype: FloatFormat,
    c: usize,
    n: usize,
    h: usize,
    w: usize,
    /// Shards of the all-reduced batch (sync ops; shard 0 is the case), 1 otherwise.
    shards: usize,
    class: Class,
    stats: Stats,
}

impl Shape {
    fn m(&self) -> usize {
        self.n * self.h * self.w
    }
    fn dims(&self) -> Vec<usize> {
        let (c, n, h, w) = (self.c, self.n, self.h, self.w);
        match self.layout {
            Layout::Rows | Layout::Flat => vec![c, n * h * w],
            Layout::Chw => vec![c, n * h, w],
            Layout::Nchw => vec![n, c, h, w],
            Layout::Nhwc => vec![n, h, w, c],
        }
    }
}

/// Data classes of DESIGN §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Gaussian,
    Offset,
    LargeMean,
    Constant,
    VarNearEps,
    Sparse,
    Integer,
    SampleMeans,
    Huge,
    Tiny,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Gaussian => "gaussian",
            Class::Offset => "offset",
            Class::LargeMean => "large-mean",
            Class::Constant => "constant",
            Class::VarNearEps => "var-near-eps",
            Class::Sparse => "sparse",
            Class::Integer => "integer",
            Class::SampleMeans => "sample-means",
            Class::Huge => "huge",
            Class::Tiny => "tiny",
        }
    }
    fn target(self) -> &'static str {
        match self {
            Class::Gaussian => "well-scaled data, mean 0, std 1",
            Class::Offset => "well-scaled data with per-channel mean and std",
            Class::LargeMean => "large mean, small variance (mu/sigma up to 1e4 f32, 1e8 f64)",
            Class::Constant => "constant channels (var = 0), eps > 0",
            Class::VarNearEps => "variance about eps (eps-placement bugs)",
            Class::Sparse => "sparse data (about 80% zeros)",
            Class::Integer => "small integer data",
            Class::SampleMeans => "different per-sample means",
            Class::Huge => "squares overflow the dtype",
            Class::Tiny => "squares underflow the dtype (eps = 0)",
        }
    }
    fn is_range(self) -> bool {
        matches!(self, Class::Huge | Class::Tiny)
    }
}

/// Handed-in statistics (eval, sync ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stats {
    /// The batch's own (eval) or the all-reduced ones (sync), exact then rounded.
    Exact,
    /// Slightly perturbed (relative 1e-3).
    Near,
    /// Far from the batch's.
    Far,
}

fn divisors(m: usize) -> Vec<usize> {
    (1..=m).filter(|d| m.is_multiple_of(*d)).collect()
}

fn class_strategy(allow_range: bool) -> BoxedStrategy<Class> {
    let base = prop_oneof![
        3 => Just(Class::Gaussian),
        3 => Just(Class::Offset),
        4 => Just(Class::LargeMean),
        2 => Just(Class::Constant),
        3 => Just(Class::VarNearEps),
        2 => Just(Class::Sparse),
        2 => Just(Class::Integer),
        2 => Just(Class::SampleMeans),
    ];
    if allow_range {
        prop_oneof![
            21 => base,
            2 => Just(Class::Huge),
            2 => Just(Class::Tiny),
        ]
        .boxed()
    } else {
        base.boxed()
    }
}

fn shape_strategy(ops: Vec<Op>, allow_range: bool) -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(ops),
        prop::sample::select(Layout::ALL.to_vec()),
        prop::sample::select(vec![FloatFormat::F32, FloatFormat::F64]),
        1..=4usize,
        1..=24usize,
        any::<Index>(),
        any::<Index>(),
        1..=3usize,
        class_strategy(allow_range),
        prop_oneof![2 => Just(Stats::Exact), 1 => Just(Stats::Near), 2 => Just(Stats::Far)],
    )
        .prop_map(|(op, layout, dtype, c, m, i1, i2, shards, class, stats)| {
            let handed_in = !matches!(op, Op::Forward | Op::Backward);
            let sync = matches!(op, Op::SyncForward | Op::SyncBackward);
            // sync_stats: rows [C, R], one value per shard.
            let layout = if op == Op::SyncStats {
                Layout::Rows
            } else {
                layout
            };
            // N only where the layout has a batch axis, H only where it has one.
            let d1 = divisors(m);
            let n = match layout {
                Layout::Nchw | Layout::Nhwc => d1[i1.index(d1.len())],
                _ => 1,
            };
            let d2 = divisors(m / n);
            let h = match layout {
                Layout::Rows | Layout::Flat => m / n,
                _ => d2[i2.index(d2.len())],
            };
            let w = m / n / h;
            Shape {
                op,
                layout,
                dtype,
                c,
                n,
                h,
                w,
                shards: if sync { shards } else { 1 },
                class,
                stats: if handed_in { stats } else { Stats::Exact },
            }
        })
}

/// The random draws of a case, sized by its shape (every value in a small unit range, turned
/// into data by [`build`]).
#[derive(Clone, Debug)]
struct Draw {
    eps: &'static str,
    /// Class magnitude in [0, 1] (mu/sigma exponent, huge/tiny exponent).
    mag: f64,
    /// Per channel: (t1 in [-1, 1], t2 in [0, 1]).
    chans: Vec<(f64, f64)>,
    /// Per shard and channel: shift of that shard's centre, in [-2, 2].
    shard_shift: Vec<f64>,
    /// Per shard, channel and cell: gaussian-ish z (sum of three U(-1, 1)).
    z: Vec<f64>,
    keep: Vec<bool>,
    ints: Vec<i32>,
    dy: Vec<f64>,
    dy_shift: f64,
    gamma: Vec<(f64, bool)>,
    beta: Vec<f64>,
    /// Per channel: perturbation of the handed-in statistics, each in [-1, 1].
    stat_t: Vec<(f64, f64)>,
}

fn gauss() -> impl Strategy<Value = f64> {
    (-1.0..1.0f64, -1.0..1.0f64, -1.0..1.0f64).prop_map(|(a, b, c)| a + b + c)
}

fn eps_strategy(class: Class) -> BoxedStrategy<&'static str> {
    match class {
        Class::Huge => Just("1e-5").boxed(),
        Class::Tiny => Just("0").boxed(),
        Class::Constant | Class::VarNearEps => {
            prop::sample::select(vec!["1e-5", "1e-3", "0.1"]).boxed()
        }
        _ => prop_oneof![
            6 => Just("1e-5"),
            2 => Just("1e-3"),
            1 => Just("0.1"),
            1 => Just("0"),
        ]
        .boxed(),
    }
}

fn draw_strategy(sh: &Shape) -> impl Strategy<Value = Draw> {
    let (c, m, r) = (sh.c, sh.m(), sh.shards);
    let cells = r * c * m;
    (
        (
            eps_strategy(sh.class),
            0.0..=1.0f64,
            prop::collection::vec((-1.0..=1.0f64, 0.0..=1.0f64), c),
            prop::collection::vec(-2.0..=2.0f64, r * c),
            prop::collection::vec(gauss(), cells),
            prop::collection::vec(prop::bool::weighted(0.2), cells),
        ),
        (
            prop::collection::vec(-16..=16i32, cells),
            prop::collection::vec(gauss(), cells),
            prop_oneof![3 => Just(0.0), 1 => -5.0..5.0f64],
            prop::collection::vec((0.5..2.0f64, prop::bool::weighted(0.25)), c),
            prop::collection::vec(-1.0..1.0f64, c),
            prop::collection::vec((-1.0..=1.0f64, -1.0..=1.0f64), c),
        ),
    )
        .prop_map(
            |(
                (eps, mag, chans, shard_shift, z, keep),
                (ints, dy, dy_shift, gamma, beta, stat_t),
            )| {
                Draw {
                    eps,
                    mag,
                    chans,
                    shard_shift,
                    z,
                    keep,
                    ints,
                    dy,
                    dy_shift,
                    gamma,
                    beta,
                    stat_t,
                }
            },
        )
}

/// Cases of `ops` (range-level classes only if `allow_range`), ill-posed ones included (the
/// properties reject those exactly).
fn case_strategy(ops: Vec<Op>, allow_range: bool) -> impl Strategy<Value = SuiteCase> {
    shape_strategy(ops, allow_range)
        .prop_flat_map(|sh| {
            let d = draw_strategy(&sh);
            (Just(sh), d)
        })
        .prop_filter_map("statistics overflow the dtype", |(sh, d)| build(&sh, &d))
}

fn q(x: f64) -> QSqrt {
    QSqrt::rational(f64_to_rational(x).expect("finite"))
}

fn round_q(v: &QSqrt, f: FloatFormat) -> f64 {
    round(v, f).to_f64()
}

/// Mean and centre of the cells of a channel (the class's (mu, sigma)).
fn centre(class: Class, f32ish: bool, mag: f64, (t1, t2): (f64, f64), eps: f64) -> (f64, f64) {
    match class {
        Class::Gaussian => (0.0, 1.0),
        Class::Offset | Class::Sparse => (3.0 * t1, 0.5 + 1.5 * t2),
        Class::LargeMean => {
            // mu/sigma = 10^(1..4) in f32, 10^(1..8) in f64; sigma in [1e-2, 1e2].
            let ratio = 10f64.powf(1.0 + mag * if f32ish { 3.0 } else { 7.0 });
            let sd = 10f64.powf(4.0 * t2 - 2.0);
            let mu = ratio * sd * (0.5 + 0.5 * t1.abs());
            (if t1 < 0.0 { -mu } else { mu }, sd)
        }
        Class::Constant => (200.0 * t1, 0.0),
        Class::VarNearEps => (t1, eps.sqrt() * (0.3 + 2.7 * t2)),
        Class::Integer => (0.0, 0.0),
        Class::SampleMeans => (t1, 0.5),
        Class::Huge => {
            let s = 10f64.powf(if f32ish {
                17.0 + 2.0 * mag
            } else {
                150.0 + 10.0 * mag
            });
            (s * t1, s)
        }
        Class::Tiny => {
            let s = 10f64.powf(if f32ish {
                -20.0 + 2.0 * mag
            } else {
                -165.0 + 10.0 * mag
            });
            (s * t1, s)
        }
    }
}

/// The case a shape and its draws stand for; `None` where a handed-in statistic overflows.
fn build(sh: &Shape, d: &Draw) -> Option<SuiteCase> {
    let dtype = sh.dtype;
    let shape = sh.dims();
    let geom = Geometry::new(sh.layout, &shape, usize::MAX).expect("valid shape");
    let (c, m, shards) = (geom.c, geom.m, sh.shards);
    let eps_f: f64 = d.eps.parse().expect("eps");
    let f32ish = dtype != FloatFormat::F64;
    let centres: Vec<(f64, f64)> = d
        .chans
        .iter()
        .map(|&t| centre(sh.class, f32ish, d.mag, t, eps_f))
        .collect();
    // Per-sample blocks: the batch axis where there is one, else thirds of the channel.
    let blocks = if geom.n > 1 { geom.n } else { m.min(3) };
    // Matrix view of all shards' cells, channel-major.
    let mut xs: Vec<Vec<f64>> = vec![Vec::with_capacity(m * shards); c];
    let mut dys: Vec<Vec<f64>> = vec![Vec::with_capacity(m * shards); c];
    for s in 0..shards {
        for (ch, &(mu, sd)) in centres.iter().enumerate() {
            let scale = if sd > 0.0 { sd } else { 1.0 };
            let mu = if s == 0 {
                mu
            } else {
                mu + d.shard_shift[s * c + ch] * scale
            };
            for k in 0..m {
                let i = (s * c + ch) * m + k;
                let z = d.z[i];
                let v = match sh.class {
                    Class::Sparse => {
                        if d.keep[i] {
                            mu + sd * z
                        } else {
                            0.0
                        }
                    }
                    Class::Integer => d.ints[i] as f64 + (8.0 * d.chans[ch].0).round(),
                    Class::Constant => mu,
                    Class::SampleMeans => mu + 5.0 * (k * blocks / m) as f64 + sd * z,
                    _ => mu + sd * z,
                };
                xs[ch].push(to_dtype(v, dtype));
                dys[ch].push(to_dtype(d.dy_shift + d.dy[i], dtype));
            }
        }
    }
    let to_layout = |mat: &Vec<Vec<f64>>| -> Vec<f64> {
        let mut out = vec![0.0; c * m];
        for (ch, row) in mat.iter().enumerate() {
            for (k, &v) in row[..m].iter().enumerate() {
                out[geom.offset(ch, k)] = v;
            }
        }
        out
    };
    let mut inputs = BTreeMap::new();
    for &name in sh.op.inputs() {
        let v: Vec<f64> = match name {
            "x" => to_layout(&xs),
            "dy" => to_layout(&dys),
            "gamma" => d
                .gamma
                .iter()
                .map(|&(g, neg)| to_dtype(if neg { -g } else { g }, dtype))
                .collect(),
            "beta" => d.beta.iter().map(|&b| to_dtype(b, dtype)).collect(),
            _ => continue,
        };
        inputs.insert(name.to_string(), v);
    }
    let eps = spec::exact::parse::parse_rational(d.eps).expect("valid eps");
    match sh.op {
        Op::Eval => {
            let (mut mean, mut var) = (Vec::new(), Vec::new());
            for (xrow, &(a, b)) in xs.iter().zip(&d.stat_t) {
                let row: Vec<QSqrt> = xrow[..m].iter().map(|&x| q(x)).collect();
                let (mu, v) = spec::channel::batch_stats(&row);
                let (mu, v) = (round_q(&mu, dtype), round_q(&v, dtype));
                let sd = if v > 0.0 { v.sqrt() } else { 1.0 };
                let (mu2, v2) = match sh.stats {
                    Stats::Exact => (mu, v),
                    Stats::Near => (mu + 1e-3 * a * sd, v * (1.0 + 1e-3 * b)),
                    Stats::Far => (
                        mu + 3.0 * sd * a,
                        v * 4f64.powf(b) + 0.5 * sd * sd * (1.0 + b),
                    ),
                };
                mean.push(to_dtype(mu2, dtype));
                var.push(to_dtype(v2, dtype));
            }
            inputs.insert("mean".into(), mean);
            inputs.insert("var".into(), var);
        }
        Op::SyncForward | Op::SyncBackward => {
            let (mut mean, mut m2, mut mdy, mut mdyx) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ch in 0..c {
                let all: Vec<QSqrt> = xs[ch].iter().map(|&x| q(x)).collect();
                let n = QSqrt::int(all.len() as i64);
                let (mut s1, mut s2) = (QSqrt::int(0), QSqrt::int(0));
                for v in &all {
                    s1 = s1 + v;
                    s2 = s2 + &(v * v);
                }
                let mu_q = &s1 / &n;
                let var_q = &(&s2 / &n) - &(&mu_q * &mu_q);
                let (mu, e2) = (round_q(&mu_q, dtype), round_q(&(&s2 / &n), dtype));
                let v = round_q(&var_q, FloatFormat::F64);
                let (a, b) = d.stat_t[ch];
                let sd = if v > 0.0 { v.sqrt() } else { 1.0 };
                let (mu, e2) = match sh.stats {
                    Stats::Exact => (mu, e2),
                    Stats::Near => {
                        let mu2 = to_dtype(mu + 1e-3 * a * sd, dtype);
                        (mu2, to_dtype(v * (1.0 + 1e-3 * b) + mu2 * mu2, dtype))
                    }
                    Stats::Far => {
                        let mu2 = to_dtype(mu + 2.0 * sd * a, dtype);
                        let v2 = v * 4f64.powf(b) + 0.5 * sd * sd * (1.0 + b);
                        (mu2, to_dtype(v2 + mu2 * mu2, dtype))
                    }
                };
                if !mu.is_finite() || !e2.is_finite() {
                    return None;
                }
                mean.push(mu);
                m2.push(e2);
                if sh.op == Op::SyncBackward {
                    let (muq, m2q, epsq) = (q(mu), q(e2), QSqrt::rational(eps.clone()));
                    let var = spec::channel::sync_var(&muq, &m2q);
                    let (a, k) = if (&var + &epsq).signum() > 0 {
                        let r = spec::channel::inv_std(&var, &epsq);
                        let (mut sdy, mut sdyx) = (QSqrt::int(0), QSqrt::int(0));
                        for (xv, &dv) in all.iter().zip(&dys[ch]) {
                            let dq = q(dv);
                            sdy = sdy + &dq;
                            sdyx = sdyx + &(&dq * &(&(xv - &muq) * &r));
                        }
                        (round_q(&(&sdy / &n), dtype), round_q(&(&sdyx / &n), dtype))
                    } else {
                        (0.0, 0.0)
                    };
                    if !a.is_finite() || !k.is_finite() {
                        return None;
                    }
                    mdy.push(a);
                    mdyx.push(k);
                }
            }
            inputs.insert("mean".into(), mean);
            inputs.insert("m2".into(), m2);
            if sh.op == Op::SyncBackward {
                inputs.insert("mean_dy".into(), mdy);
                inputs.insert("mean_dy_xhat".into(), mdyx);
            }
        }
        Op::RunningUpdate => {
            // Running statistics near or far from the batch's.
            let far = if sh.stats == Stats::Far { 10.0 } else { 1.0 };
            let (mut rm, mut rv) = (Vec::new(), Vec::new());
            for (xrow, &(a, b)) in xs.iter().zip(&d.stat_t) {
                let row: Vec<QSqrt> = xrow[..m].iter().map(|&x| q(x)).collect();
                let (mu, v) = spec::channel::batch_stats(&row);
                let (mu, v) = (
                    round_q(&mu, FloatFormat::F64),
                    round_q(&v, FloatFormat::F64),
                );
                let sd = if v > 0.0 { v.sqrt() } else { 1.0 };
                rm.push(to_dtype(mu + far * 2.0 * sd * a, dtype));
                rv.push(to_dtype(sd * sd * 4f64.powf(b) * far, dtype));
            }
            inputs.insert("running_mean".into(), rm);
            inputs.insert("running_var".into(), rv);
        }
        Op::SyncStats => {
            // Cell k of a channel's row stands for shard k: its mean, and E[x²] = mean² plus
            // a spread; counts 0..=6 from the integer draws (not all 0).
            let mut counts: Vec<f64> = (0..m)
                .map(|k| (d.ints[k].unsigned_abs() % 7) as f64)
                .collect();
            if counts.iter().all(|&n| n == 0.0) {
                counts[0] = 1.0;
            }
            let (mut means, mut m2s) = (vec![0.0; c * m], vec![0.0; c * m]);
            for (ch, row) in xs.iter().enumerate() {
                let sd = centres[ch].1;
                for k in 0..m {
                    let (v, z) = (row[k], d.dy[ch * m + k]);
                    means[ch * m + k] = v;
                    m2s[ch * m + k] = to_dtype(v * v + sd * sd * z * z, dtype);
                }
            }
            inputs.insert("shard_count".into(), counts);
            inputs.insert("shard_mean".into(), means);
            inputs.insert("shard_m2".into(), m2s);
        }
        _ => {}
    }
    if inputs.values().flatten().any(|v| !v.is_finite()) {
        return None;
    }
    let (momentum, convention) = if sh.op == Op::RunningUpdate {
        let k = (d.ints[0].unsigned_abs() % 4) as usize;
        if d.keep[0] {
            (
                Some(["0.9", "0.99", "0.7", "0"][k].to_string()),
                Some(Convention::Onnx),
            )
        } else {
            (
                Some(["0.1", "0.01", "0.3", "1"][k].to_string()),
                Some(Convention::Pytorch),
            )
        }
    } else {
        (None, None)
    };
    let level = if sh.class.is_range() {
        Level::Range
    } else if matches!(sh.class, Class::Gaussian | Class::Offset)
        && m >= 2
        && sh.stats != Stats::Far
        && matches!(d.eps, "1e-5" | "1e-3")
    {
        Level::Core
    } else {
        Level::Conditioning
    };
    let class = match sh.stats {
        Stats::Exact => sh.class.name().to_string(),
        Stats::Near => format!("{}+near-stats", sh.class.name()),
        Stats::Far => format!("{}+far-stats", sh.class.name()),
    };
    Some(SuiteCase {
        id: format!(
            "prop.{}.{}.{}.{}",
            sh.op.name(),
            sh.layout.name(),
            dtype.name(),
            class
        ),
        level,
        class,
        target: sh.class.target().to_string(),
        dtype,
        op: sh.op,
        layout: sh.layout,
        shape,
        eps: if sh.op.uses_eps() {
            d.eps.to_string()
        } else {
            "0".to_string()
        },
        momentum,
        convention,
        inputs,
    })
}

// ------------------------------------------------------------------------------ helpers

fn seed() -> u64 {
    std::env::var("BNCONF_PROP_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// A deterministic runner: ChaCha seeded from `seed()` and a label, no failure persistence
/// (the seed is fixed; shrunk failures become regression vectors instead).
fn runner(cases: u32, label: &str, max_shrink_iters: u32) -> TestRunner {
    let cfg = Config {
        cases,
        failure_persistence: None,
        max_global_rejects: 8 * cases + 1024,
        max_shrink_iters,
        ..Config::default() // PROPTEST_* environment variables
    };
    let mut h = seed() ^ 0xCBF2_9CE4_8422_2325;
    for b in label.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        // SplitMix64
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    TestRunner::new_with_rng(cfg, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn regressions_dir() -> PathBuf {
    workspace_root().join("vectors").join("regressions")
}

/// Where to save shrunk failures (`BNCONF_SAVE_REGRESSION`), if anywhere.
fn save_dir() -> Option<PathBuf> {
    let d = std::env::var("BNCONF_SAVE_REGRESSION").ok()?;
    if d.trim().is_empty() {
        return None;
    }
    let p = PathBuf::from(d.trim());
    Some(if p.is_absolute() {
        p
    } else {
        workspace_root().join(p)
    })
}

/// The bnconf-case/1 JSON of a case (exact hex inputs), with `level`, `class`, `target`,
/// `expect_reject` and a note.
fn regression_json(case: &SuiteCase, expect_reject: &[&str], note: &str) -> Value {
    let mut v = golden::case_json(&case.to_case());
    let o = v.as_object_mut().expect("object");
    let inputs = o.remove("inputs").expect("inputs");
    o.insert("expect_reject".into(), json!(expect_reject));
    o.insert("note".into(), json!(note));
    o.insert("inputs".into(), inputs);
    v
}

fn file_stem(s: &str) -> String {
    s.chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '.' || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// Write a regression vector into `dir` as `<stem>.json`; returns the path.
fn save_regression(dir: &Path, stem: &str, doc: &Value) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create regression dir");
    let path = dir.join(format!("{}.json", file_stem(stem)));
    let text = serde_json::to_string_pretty(doc).expect("json");
    std::fs::write(&path, format!("{text}\n")).expect("write regression vector");
    path
}

fn prepare_one(case: &SuiteCase) -> Result<Prepared, TestCaseError> {
    check::prepare(std::slice::from_ref(case))
        .map(|mut v| v.remove(0))
        .map_err(|e| TestCaseError::fail(format!("exact reference failed on {}: {e}", case.id)))
}

fn judge(k: &dyn Kernel, p: &Prepared) -> CaseResult {
    match k.run(&p.case.to_kernel_case()) {
        Ok(out) => p.judge(&out),
        Err(kernels::Unsupported(why)) => p.unsupported(&why),
    }
}

/// Whether the good kernel `k` is held to conform on `case`.
fn held(k: &dyn Kernel, case: &SuiteCase) -> bool {
    k.verdict() == KVerdict::Good
        && (case.level != Level::Range
            || (case.dtype == FloatFormat::F32 && RANGE_ROBUST_F32.contains(&k.name())))
}

/// Whether every exact output is zero or normal (and finite) in the case dtype; the budget
/// makes no allowance for underflow or overflow of the result itself.
fn outputs_in_range(p: &Prepared) -> bool {
    let min_normal = match p.case.dtype {
        FloatFormat::F64 => f64::MIN_POSITIVE,
        _ => f32::MIN_POSITIVE as f64,
    };
    p.golden.values().flatten().all(|v| {
        let r = round_q(v, p.case.dtype);
        let a = check::approx(v).abs();
        r.is_finite() && (v.is_zero() || a >= min_normal)
    })
}

fn failure_report(k: &dyn Kernel, r: &CaseResult, case: &SuiteCase) -> String {
    let doc = regression_json(
        case,
        &[],
        &format!("good kernel {} fails (found by kernels_prop)", k.name()),
    );
    format!(
        "good kernel `{}` does not conform:\n{}\n\ncase (bnconf-case/1):\n{}",
        k.name(),
        r.detail(case),
        serde_json::to_string_pretty(&doc).expect("json")
    )
}

#[derive(Default, Debug)]
struct Counts {
    cases: usize,
    ill_posed: usize,
    by_level: BTreeMap<&'static str, usize>,
    by_op: BTreeMap<&'static str, usize>,
    by_class: BTreeMap<String, usize>,
    range_checked: usize,
    range_skipped: usize,
    judged: usize,
    bad_rejected: BTreeMap<&'static str, usize>,
    worst_good: BTreeMap<&'static str, f64>,
}

// ------------------------------------------------------------------------------ properties

/// (a) Every good kernel passes every generated core/conditioning case; the range-robust
/// kernels pass range-level f32 cases; no kernel panics or returns malformed outputs.
#[test]
fn good_kernels_conform() {
    let start = std::time::Instant::now();
    let ks = all_kernels();
    for name in RANGE_ROBUST_F32 {
        assert!(
            ks.iter().any(|k| k.name() == name),
            "range-robust kernel {name} missing from all_kernels()"
        );
    }
    let cases = Config::default().cases;
    let counts = RefCell::new(Counts::default());
    let mut run = runner(cases, "good", 2000);
    let strategy = case_strategy(Op::ALL.to_vec(), true);
    let result = run.run(&strategy, |case| {
        if let Some(why) = ill_posed(&case) {
            counts.borrow_mut().ill_posed += 1;
            return Err(TestCaseError::reject(why));
        }
        let p = prepare_one(&case)?;
        let check_range = case.level != Level::Range || outputs_in_range(&p);
        let mut c = counts.borrow_mut();
        c.cases += 1;
        *c.by_level.entry(case.level.name()).or_default() += 1;
        *c.by_op.entry(case.op.name()).or_default() += 1;
        *c.by_class.entry(case.class.clone()).or_default() += 1;
        if case.level == Level::Range && case.dtype == FloatFormat::F32 {
            if check_range {
                c.range_checked += 1;
            } else {
                c.range_skipped += 1;
            }
        }
        for k in &ks {
            let r = judge(k.as_ref(), &p);
            c.judged += 1;
            if let Verdict::Malformed(_) | Verdict::Unsupported(_) = r.verdict {
                return Err(TestCaseError::fail(format!(
                    "kernel `{}` gave no usable output:\n{}",
                    k.name(),
                    r.detail(&case)
                )));
            }
            if k.verdict() == KVerdict::KnownBad {
                if r.verdict == Verdict::Fail {
                    *c.bad_rejected.entry(k.name()).or_default() += 1;
                }
                continue;
            }
            if !held(k.as_ref(), &case) || !check_range {
                continue;
            }
            let w = c.worst_good.entry(k.name()).or_default();
            *w = w.max(r.worst_ratio);
            if r.verdict != Verdict::Pass {
                return Err(TestCaseError::fail(failure_report(k.as_ref(), &r, &case)));
            }
        }
        Ok(())
    });
    let c = counts.into_inner();
    eprintln!(
        "good_kernels_conform: {} cases judged ({} ill-posed rejected), {} kernel runs, {:.1} s",
        c.cases,
        c.ill_posed,
        c.judged,
        start.elapsed().as_secs_f64()
    );
    eprintln!("  by level: {:?}", c.by_level);
    eprintln!("  by op: {:?}", c.by_op);
    eprintln!("  by class: {:?}", c.by_class);
    eprintln!(
        "  range-level f32 cases checked on {:?}: {} (skipped, outputs subnormal/overflow: {})",
        RANGE_ROBUST_F32, c.range_checked, c.range_skipped
    );
    eprintln!(
        "  worst ratio of good kernels where held: {:?}",
        c.worst_good
    );
    eprintln!(
        "  known-bad kernels rejected on (cases): {:?}",
        c.bad_rejected
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => {
            let mut msg = format!("shrunk failing case {}:\n{why}\n", case.id);
            if let Some(dir) = save_dir() {
                let doc = regression_json(&case, &[], "good-kernel failure found by kernels_prop");
                let path = save_regression(&dir, &format!("fail-{}", case.id), &doc);
                msg += &format!(
                    "\nsaved as {}\n  exact outputs: bnconf golden {}\n",
                    path.display(),
                    path.display()
                );
            } else {
                msg += "\nsave the case JSON above as vectors/regressions/<name>.json (or rerun \
                        with BNCONF_SAVE_REGRESSION=vectors/regressions) and get its exact \
                        outputs with: bnconf golden vectors/regressions/<name>.json\n";
            }
            panic!("{msg}");
        }
        Err(TestError::Abort(why)) => panic!("search aborted: {why}"),
    }
}

/// (b) Every known-bad kernel is rejected on some generated case of its defective ops that
/// every good kernel passes; the shrunk case is printed (and saved with
/// `BNCONF_SAVE_REGRESSION`).
#[test]
fn known_bad_kernels_are_rejected() {
    let start = std::time::Instant::now();
    let ks = all_kernels();
    let goods: Vec<&dyn Kernel> = ks
        .iter()
        .filter(|k| k.verdict() == KVerdict::Good)
        .map(|k| k.as_ref())
        .collect();
    let mut missed = Vec::new();
    let mut found = Vec::new();
    for bad in ks.iter().filter(|k| k.verdict() == KVerdict::KnownBad) {
        let ops: Vec<Op> = bad
            .defective_ops()
            .iter()
            .map(|o| Op::from_name(o.name()).expect("same op names"))
            .collect();
        assert!(!ops.is_empty(), "{} has no defective ops", bad.name());
        let tried = RefCell::new(0usize);
        let mut run = runner(BAD_SEARCH_CASES, bad.name(), bad_shrink_iters());
        let result = run.run(&case_strategy(ops, false), |case| {
            if let Some(why) = ill_posed(&case) {
                return Err(TestCaseError::reject(why));
            }
            *tried.borrow_mut() += 1;
            let p = prepare_one(&case)?;
            let r = judge(bad.as_ref(), &p);
            if r.verdict != Verdict::Fail {
                return Ok(());
            }
            // A witness only if every good kernel passes it (a good kernel's failure is
            // property (a)'s business).
            if goods.iter().any(|g| judge(*g, &p).verdict != Verdict::Pass) {
                return Ok(());
            }
            Err(TestCaseError::fail(format!(
                "worst ratio {:.3e} (k = {:.1})",
                r.worst_ratio, r.k
            )))
        });
        match result {
            Ok(()) => missed.push(format!(
                "{}: no rejecting case among {} cases of {:?}",
                bad.name(),
                tried.into_inner(),
                bad.defective_ops()
            )),
            Err(TestError::Abort(why)) => missed.push(format!("{}: aborted: {why}", bad.name())),
            Err(TestError::Fail(why, case)) => {
                let p = prepare_one(&case).expect("prepared before");
                let r = judge(bad.as_ref(), &p);
                let note = format!(
                    "minimal case rejecting known-bad kernel {} (kernels_prop search, seed {}): {}",
                    bad.name(),
                    seed(),
                    why
                );
                let doc = regression_json(&case, &[bad.name()], &note);
                eprintln!(
                    "{}: rejected after {} cases; shrunk to {} shape {:?} eps {}: {why}\n{}",
                    bad.name(),
                    tried.borrow(),
                    case.id,
                    case.shape,
                    case.eps,
                    r.detail(&case)
                );
                if let Some(dir) = save_dir() {
                    let path = save_regression(&dir, bad.name(), &doc);
                    eprintln!("  saved as {}", path.display());
                }
                found.push(format!(
                    "{}: {} {:?} ratio {:.3e}",
                    bad.name(),
                    case.id,
                    case.shape,
                    r.worst_ratio
                ));
            }
        }
    }
    eprintln!(
        "known_bad_kernels_are_rejected ({:.1} s):\n  {}",
        start.elapsed().as_secs_f64(),
        found.join("\n  ")
    );
    assert!(
        missed.is_empty(),
        "known-bad kernels no generated case rejects:\n  {}",
        missed.join("\n  ")
    );
}

/// (3) Every regression vector: good kernels pass, the kernels in `expect_reject` fail.
#[test]
fn regression_vectors() {
    let dir = regressions_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("no {}; nothing to check", dir.display());
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let ks = all_kernels();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut rejected_by: BTreeMap<String, usize> = BTreeMap::new();
    for path in &files {
        let case = match read_case_file(path, &InputLimits::default()) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let CaseDtype::Float(dtype) = case.dtype else {
            problems.push(format!("{}: dtype must be a float format", path.display()));
            continue;
        };
        let level = match case.extra.get("level").and_then(Value::as_str) {
            Some(l) => match Level::from_name(l) {
                Some(l) => l,
                None => {
                    problems.push(format!("{}: unknown level {l:?}", path.display()));
                    continue;
                }
            },
            None => {
                problems.push(format!("{}: missing \"level\"", path.display()));
                continue;
            }
        };
        let expect_reject: Vec<String> = match case.extra.get("expect_reject") {
            None => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect(),
            Some(_) => {
                problems.push(format!(
                    "{}: expect_reject must be an array of kernel names",
                    path.display()
                ));
                continue;
            }
        };
        for name in &expect_reject {
            if !ks.iter().any(|k| k.name() == name) {
                problems.push(format!("{}: unknown kernel {name:?}", path.display()));
            }
        }
        let p = &case.problem;
        let sc = SuiteCase {
            id: case.id.clone(),
            level,
            class: case
                .extra
                .get("class")
                .and_then(Value::as_str)
                .unwrap_or("regression")
                .to_string(),
            target: String::new(),
            dtype,
            op: p.op,
            layout: p.geom.layout,
            shape: p.geom.shape.clone(),
            eps: case.eps_text.clone(),
            momentum: case.momentum_text.clone(),
            convention: p.params.convention,
            inputs: p
                .inputs
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.iter().map(|x| round_q(x, FloatFormat::F64)).collect(),
                    )
                })
                .collect(),
        };
        if let Some(why) = ill_posed(&sc) {
            problems.push(format!("{}: ill-posed in its dtype: {why}", path.display()));
            continue;
        }
        let prep = match prepare_one(&sc) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        checked += 1;
        for k in &ks {
            let expect_fail = expect_reject.iter().any(|n| n == k.name());
            if !expect_fail && !held(k.as_ref(), &sc) {
                continue;
            }
            let r = judge(k.as_ref(), &prep);
            if expect_fail {
                if r.verdict == Verdict::Fail {
                    *rejected_by.entry(k.name().to_string()).or_default() += 1;
                } else {
                    problems.push(format!(
                        "{}: kernel {} should be rejected but is {} (worst ratio {:.3e}, k = {:.1})",
                        path.display(),
                        k.name(),
                        r.verdict.name(),
                        r.worst_ratio,
                        r.k
                    ));
                }
            } else if r.verdict != Verdict::Pass {
                problems.push(format!(
                    "{}: good kernel {} does not conform:\n{}",
                    path.display(),
                    k.name(),
                    r.detail(&sc)
                ));
            }
        }
    }
    let uncovered: Vec<&str> = ks
        .iter()
        .filter(|k| k.verdict() == KVerdict::KnownBad && !rejected_by.contains_key(k.name()))
        .map(|k| k.name())
        .collect();
    eprintln!(
        "regression_vectors: {checked} of {} files checked in {}; rejections expected and seen: {rejected_by:?}",
        files.len(),
        dir.display()
    );
    if !uncovered.is_empty() {
        eprintln!("  note: known-bad kernels without a regression vector: {uncovered:?}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
