//! proptest strategies of adversarial cases: the shape first (op, layout, dtype, C in 1..=4,
//! m in 1..=24 cells per channel split into N, H, W as the layout allows), then data for it
//! (`prop_flat_map`): the data classes of docs/DESIGN.md §3 (well-scaled, offset, large mean
//! with small variance, constant channels, variance about eps, sparse, integer, per-sample
//! means; *range*: squares that overflow or underflow the dtype) and handed-in statistics
//! near or far from the batch's (eval, running_update) or all-reduced over a larger batch of
//! which the case is one shard (sync ops), computed exactly and then rounded.
//!
//! Values shrink towards simpler ones (proptest shrinks every draw towards the low end of its
//! range); every generated case is valid for its op. Ill-posed cases are *not* removed here
//! ([`suite_cases`]); [`super::strategy`] removes them.

use crate::suite::{to_dtype, Level, SuiteCase};
use bnconf_spec::exact::round::{round, FloatFormat};
use bnconf_spec::op::Convention;
use bnconf_spec::{Geometry, Layout, Op, QSqrt};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::BTreeMap;

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
            Layout::Nc => vec![n, c],
            Layout::Ncl => vec![n, c, h * w],
            // D = h, H = 1, W = w.
            Layout::Ncdhw => vec![n, c, h, 1, w],
            Layout::Ndhwc => vec![n, h, 1, w, c],
        }
    }
}

/// Data classes (docs/DESIGN.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
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
    /// Name (the case's `class`).
    pub fn name(self) -> &'static str {
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
    /// What the class targets.
    pub fn target(self) -> &'static str {
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
    /// Whether the class is of the *range* level.
    pub fn is_range(self) -> bool {
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
            // N only where the layout has a batch axis (`nc`: all of m), H only where it has
            // one.
            let d1 = divisors(m);
            let n = match layout {
                Layout::Nc => m,
                Layout::Nchw | Layout::Nhwc | Layout::Ncl | Layout::Ncdhw | Layout::Ndhwc => {
                    d1[i1.index(d1.len())]
                }
                Layout::Rows | Layout::Flat | Layout::Chw => 1,
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
    /// Per channel: |gamma| (0 for about one channel in ten) and its sign.
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
            prop::collection::vec(
                prop_oneof![
                    9 => (0.5..2.0f64, prop::bool::weighted(0.25)),
                    // gamma = 0: a pruned or frozen channel (y = beta there).
                    1 => Just((0.0, false)),
                ],
                c,
            ),
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
pub fn suite_cases(ops: Vec<Op>, allow_range: bool) -> impl Strategy<Value = SuiteCase> {
    shape_strategy(ops, allow_range)
        .prop_flat_map(|sh| {
            let d = draw_strategy(&sh);
            (Just(sh), d)
        })
        .prop_filter_map("statistics overflow the dtype", |(sh, d)| build(&sh, &d))
}

use crate::fast::exact_f64 as q;

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
    let eps = bnconf_spec::exact::parse::parse_rational(d.eps).expect("valid eps");
    match sh.op {
        Op::Eval => {
            let (mut mean, mut var) = (Vec::new(), Vec::new());
            for (xrow, &(a, b)) in xs.iter().zip(&d.stat_t) {
                let row: Vec<QSqrt> = xrow[..m].iter().map(|&x| q(x)).collect();
                let (mu, v) = bnconf_spec::channel::batch_stats(&row);
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
                    let var = bnconf_spec::channel::sync_var(&muq, &m2q);
                    let (a, k) = if (&var + &epsq).signum() > 0 {
                        let r = bnconf_spec::channel::inv_std(&var, &epsq);
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
                let (mu, v) = bnconf_spec::channel::batch_stats(&row);
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
        param_dtype: dtype,
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
        shard_sizes: vec![],
    })
}
