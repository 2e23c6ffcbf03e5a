//! The `scale` suite (docs/FORMAT.md): channels large enough that kernels cut them into
//! blocks and merge partial statistics — m up to 1,054,947 cells (above 2^20, never a power
//! of two: 2^16 + 1, 3·2^18 − 5, ...), C up to 2051, N up to 64 — in nchw and nhwc, forward and
//! backward, at the levels core and conditioning. Cases are judged through the fast cells
//! (`judge::check::judged_fast`): exact per-channel constants, double-double per element.

use super::{to_dtype, Filter, Level, Precision, Rng, SuiteCase};
use crate::par::*;
use crate::precision::budget::max_not_nan;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::{Geometry, Layout, Op};
use std::collections::BTreeMap;

/// How a scale case's cells are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Data {
    /// N(0, 1).
    Gaussian,
    /// Per-channel mean in [-3, 3] and std in [0.5, 2].
    Offset,
    /// Mean/std of 10^6 (f64), 10^3 (f32), 10 (f16, bf16): catastrophic cancellation for a
    /// one-pass variance, and a between-block term that dominates a wrong merge.
    LargeMean,
    /// The mean drifts with the sample index n (or, for N = 1, along the channel): blocks have
    /// different means, which a merge without Chan's δ² term gets wrong.
    Drift,
}

/// One shape of the suite.
#[derive(Clone, Copy, Debug)]
pub struct ScaleShape {
    /// Name in the case id.
    pub name: &'static str,
    /// `(N, C, H, W)`.
    pub nchw: (usize, usize, usize, usize),
    /// Data.
    pub data: Data,
    /// Level.
    pub level: Level,
    /// What it targets.
    pub target: &'static str,
}

/// The shapes: cells per channel m and channel counts C at which kernels split and merge.
pub const SHAPES: [ScaleShape; 5] = [
    ScaleShape {
        name: "m65537",
        nchw: (1, 3, 1, 65537),
        data: Data::Gaussian,
        level: Level::Core,
        target: "m = 2^16 + 1 (one cell past 64 blocks of 1024), C = 3",
    },
    ScaleShape {
        name: "m786427",
        nchw: (1, 2, 1, 786_427),
        data: Data::LargeMean,
        level: Level::Conditioning,
        target: "m = 3·2^18 − 5 with a large mean, C = 2",
    },
    ScaleShape {
        name: "n64",
        nchw: (64, 5, 57, 57),
        data: Data::Drift,
        level: Level::Conditioning,
        target: "N = 64, m = 207936, per-sample means differ",
    },
    ScaleShape {
        name: "c2051",
        nchw: (4, 2051, 3, 3),
        data: Data::Offset,
        level: Level::Core,
        target: "C = 2051 channels (not a power of two) of m = 36",
    },
    ScaleShape {
        name: "m1054947",
        nchw: (3, 2, 593, 593),
        data: Data::Drift,
        level: Level::Conditioning,
        target: "m = 1054947 > 2^20, per-sample means differ",
    },
];

/// Every case of the suite in the precisions given (before the ill-posed are left out), in
/// the suite's order. Each case draws from its own stream (forked by its id), so the cases are
/// made in parallel and the suite is the same bytes whatever the thread count.
pub fn generate(root: &Rng, precisions: &[Precision], filter: &Filter) -> Vec<SuiteCase> {
    generate_each(root, precisions, filter, |_, make| Some(make()))
}

/// [`generate`], each case handed to `keep` (in parallel; the results in the suite's order)
/// as its shell (the case without inputs: [`shell`]) and a maker of the whole case
/// ([`make`]): what `keep` returns is kept. The exclusion test of
/// `generate::generate_listed_lean` makes the cases it must test and keeps their shells, so
/// that the suite is never held whole, and leaves the listed ones to be made when judged.
pub fn generate_each<T: Send>(
    root: &Rng,
    precisions: &[Precision],
    filter: &Filter,
    keep: impl Fn(SuiteCase, &dyn Fn() -> SuiteCase) -> Option<T> + Sync + Send,
) -> Vec<T> {
    let mut specs = Vec::new();
    for &prec in precisions {
        for sc in &SHAPES {
            for op in [Op::Forward, Op::Backward] {
                for layout in [Layout::Nchw, Layout::Nhwc] {
                    if (filter.ops.is_empty() || filter.ops.contains(&op))
                        && (filter.layouts.is_empty() || filter.layouts.contains(&layout))
                    {
                        specs.push((sc, prec, op, layout));
                    }
                }
            }
        }
    }
    specs
        .into_par_iter()
        .map(|(sc, prec, op, layout)| {
            keep(shell(sc, prec, op, layout), &|| {
                make(root, sc, prec, op, layout)
            })
        })
        .collect::<Vec<Option<T>>>()
        .into_iter()
        .flatten()
        .collect()
}

/// A case of this suite made again from its id's parts (its shape by its class, its
/// precision, op and layout) under the suite seed's root: the same case, inputs included.
/// `None` for a case not of this suite.
pub fn remake(root: &Rng, case: &SuiteCase) -> Option<SuiteCase> {
    let (sc, prec) = made_as(case)?;
    Some(make(root, sc, prec, case.op, case.layout))
}

/// The shape and precision `case` was made with, if it is a case of this suite.
fn made_as(case: &SuiteCase) -> Option<(&'static ScaleShape, Precision)> {
    let sc = SHAPES
        .iter()
        .find(|sc| case.class.strip_prefix("scale-") == Some(sc.name))?;
    let prec = Precision {
        act: case.dtype,
        param: case.param_dtype,
    };
    (shell(sc, prec, case.op, case.layout).id == case.id).then_some((sc, prec))
}

/// [`remake`] as [`make_fast`] makes it: the case's fast problem (`None` for a case not of
/// this suite, or one the fast path does not take).
pub fn remake_fast(root: &Rng, case: &SuiteCase) -> Option<crate::fast::FastProblem> {
    let (sc, prec) = made_as(case)?;
    make_fast(root, sc, prec, case.op, case.layout).ok()
}

/// The case of a shape, op, layout and precision (random stream forked from the suite seed
/// by the id, so a case is the same whatever the filters).
pub fn make(root: &Rng, sc: &ScaleShape, prec: Precision, op: Op, layout: Layout) -> SuiteCase {
    let mut case = shell(sc, prec, op, layout);
    case.inputs = inputs(root, sc, prec, op, layout);
    case
}

/// The case of [`make`] without its inputs (its id, shape, dtypes, eps and the rest).
pub fn shell(sc: &ScaleShape, prec: Precision, op: Op, layout: Layout) -> SuiteCase {
    let (n, c, h, w) = sc.nchw;
    let shape = match layout {
        Layout::Nhwc => vec![n, h, w, c],
        _ => vec![n, c, h, w],
    };
    SuiteCase {
        id: format!(
            "{}.{}.{}.scale-{}",
            op.name(),
            layout.name(),
            prec.name(),
            sc.name
        ),
        level: sc.level,
        class: format!("scale-{}", sc.name),
        target: sc.target.to_string(),
        dtype: prec.act,
        param_dtype: prec.param,
        op,
        layout,
        shape,
        eps: "1e-5".to_string(),
        momentum: None,
        convention: None,
        inputs: BTreeMap::new(),
        shard_sizes: vec![],
    }
}

/// The inputs of [`make`]'s case.
fn inputs(
    root: &Rng,
    sc: &ScaleShape,
    prec: Precision,
    op: Op,
    layout: Layout,
) -> BTreeMap<String, Vec<f64>> {
    let (cells, mut inputs) = drawn(root, sc, prec, op, layout, |v| v);
    inputs.extend(cells);
    inputs
}

/// [`make`]'s case as the fast path's problem, its cells made in their own width: binary32
/// values (f32, f16, bf16 cases) as f32, never held as f64 (half the bytes, and no copy), as
/// [`SuiteCase::fast_problem`] of the made case holds them (the same problem: tested). The
/// streaming judge's way to make a large case again (`suite::generate::remake_fast`).
pub fn make_fast(
    root: &Rng,
    sc: &ScaleShape,
    prec: Precision,
    op: Op,
    layout: Layout,
) -> crate::error::Result<crate::fast::FastProblem> {
    let case = shell(sc, prec, op, layout);
    let geom = Geometry::new(layout, &case.shape, usize::MAX)?;
    let eps = bnconf_spec::exact::parse::parse_rational(&case.eps)
        .map_err(|e| crate::error::ConfError::field("eps", e.to_string()))?;
    let (cells, chan) = if prec.act == FloatFormat::F64 {
        let (cells, chan) = drawn(root, sc, prec, op, layout, |v| v);
        let cells = cells
            .into_iter()
            .map(|(k, v)| (k, super::case::in_width(v)))
            .collect();
        (cells, chan)
    } else {
        // `to_dtype` rounded every value to a binary32 format: `as f32` is exact.
        let (cells, chan) = drawn(root, sc, prec, op, layout, |v| v as f32);
        let cells = cells
            .into_iter()
            .map(|(k, v)| (k, crate::formats::npy::NpyData::F32(v)))
            .collect();
        (cells, chan)
    };
    crate::fast::FastProblem::new(op, geom, eps, cells, chan)
}

/// The inputs of [`make`]'s case: the cells' inputs (`x`, and `dy` backward) as `cell` makes
/// them of their values, and the per-channel ones.
#[allow(clippy::type_complexity)]
fn drawn<T: Copy + Default + Send + Sync>(
    root: &Rng,
    sc: &ScaleShape,
    prec: Precision,
    op: Op,
    layout: Layout,
    cell: impl Fn(f64) -> T + Sync,
) -> (BTreeMap<String, Vec<T>>, BTreeMap<String, Vec<f64>>) {
    let (dtype, pdt) = (prec.act, prec.param);
    let stream = format!(
        "{}.{}.{}.scale-{}",
        op.name(),
        layout.name(),
        dtype.name(),
        sc.name
    );
    let mut rng = root.fork(&stream);
    let (n, c, h, w) = sc.nchw;
    let shape = match layout {
        Layout::Nhwc => vec![n, h, w, c],
        _ => vec![n, c, h, w],
    };
    let geom = Geometry::new(layout, &shape, usize::MAX).expect("valid scale shape");
    let ratio = match dtype {
        FloatFormat::F64 => 1e6,
        FloatFormat::F32 => 1e3,
        _ => 10.0,
    };
    let centers: Vec<(f64, f64)> = (0..c)
        .map(|_| match sc.data {
            Data::Gaussian => (0.0, 1.0),
            Data::Offset | Data::Drift => (rng.range(-3.0, 3.0), rng.range(0.5, 2.0)),
            Data::LargeMean => (ratio * rng.range(1.0, 4.0), 1.0),
        })
        .collect();
    let m = geom.m;
    let mut x = vec![T::default(); geom.len()];
    let mut dy = if op == Op::Backward {
        vec![T::default(); geom.len()]
    } else {
        Vec::new()
    };
    // Each cell draws a normal for x, then one for dy (backward), channel by channel: cell k
    // of channel ch takes normals `per·(ch·m + k) + t` of the stream. The draws are
    // independent of one another (`Rng::skip`), so the cells are drawn in parallel, each piece
    // from its own place in the stream (`fill_cells`: the same values).
    let per = if op == Op::Backward { 2 } else { 1 };
    let value = |ch: usize, k: usize, z: &[f64]| -> (T, T) {
        let (mu, sd) = centers[ch];
        let shift = match sc.data {
            // Sample index n of cell k (cells of a channel run n-major), or, with N = 1,
            // the position along the channel in tenths.
            Data::Drift if n > 1 => 2.0 * sd * (k / geom.hw) as f64 / n as f64,
            Data::Drift => 2.0 * sd * ((10 * k / m) as f64) / 10.0,
            _ => 0.0,
        };
        let xv = cell(to_dtype(mu + shift + sd * z[0], dtype));
        let dv = if per == 2 {
            cell(to_dtype(z[1], dtype))
        } else {
            T::default()
        };
        (xv, dv)
    };
    fill_cells(&geom, &rng, per, &mut x, &mut dy, &value);
    let mut rng = rng.skip_normals((per * c * m) as u64);
    let mut cells = BTreeMap::new();
    cells.insert("x".to_string(), x);
    if op == Op::Backward {
        cells.insert("dy".to_string(), dy);
    }
    let mut chan = BTreeMap::new();
    let gamma: Vec<f64> = (0..c)
        .map(|_| {
            let g = rng.range(0.5, 2.0);
            to_dtype(if rng.below(4) == 0 { -g } else { g }, pdt)
        })
        .collect();
    chan.insert("gamma".to_string(), gamma);
    if op == Op::Forward {
        let beta = (0..c)
            .map(|_| to_dtype(rng.range(-1.0, 1.0), pdt))
            .collect();
        chan.insert("beta".to_string(), beta);
    }
    (cells, chan)
}

/// Cells drawn at a time (their normals are one buffer) by [`fill_cells`].
const DRAW_BLOCK: usize = 4096;

/// Fill the cells `x` (and `dy` when `per` is 2) of a case of geometry `geom`: cell `k` of
/// channel `ch` is `value(ch, k, z)` of the `per` normals `per·(ch·m + k) ..` of the stream `s`
/// (as many calls of [`Rng::normal`] from `s`, channel after channel). In parallel, in pieces
/// that never share a cell: runs of a channel (channels-first layouts: run `r` is example
/// `r / C` of channel `r % C`), or blocks of positions with every channel (channels-last).
fn fill_cells<T: Copy + Send + Sync>(
    geom: &Geometry,
    s: &Rng,
    per: usize,
    x: &mut [T],
    dy: &mut [T],
    value: &(impl Fn(usize, usize, &[f64]) -> (T, T) + Sync),
) {
    let (c, m) = (geom.c, geom.m);
    let interleaved = matches!(geom.layout, Layout::Nhwc | Layout::Ndhwc);
    // The normals of cells k0.. of channel ch, `out.len() / per` of them.
    let draw = |ch: usize, k0: usize, out: &mut [f64]| {
        s.skip_normals((per * (ch * m + k0)) as u64).normals(out);
    };
    // Channels-first: pieces of whole runs (of at least DRAW_BLOCK cells where runs are short).
    let runs_per_piece = DRAW_BLOCK.div_ceil(geom.hw).max(1);
    let piece = |idx: usize, xs: &mut [T], mut ds: Option<&mut [T]>| {
        let mut z = vec![0.0; xs.len().min(DRAW_BLOCK) * per];
        if interleaved {
            // positions p0.. of every channel: cell (ch, p) at p·C + ch
            let (p0, cnt) = (idx * DRAW_BLOCK, xs.len() / c);
            for ch in 0..c {
                let z = &mut z[..cnt * per];
                draw(ch, p0, z);
                for (j, zz) in z.chunks_exact(per).enumerate() {
                    let (a, d) = value(ch, p0 + j, zz);
                    xs[j * c + ch] = a;
                    if let Some(ds) = ds.as_deref_mut() {
                        ds[j * c + ch] = d;
                    }
                }
            }
            return;
        }
        // runs r0..: run r holds cells k0 .. k0 + hw of channel r % C, k0 = (r / C)·hw
        let hw = geom.hw;
        for (q, xr) in xs.chunks_mut(hw).enumerate() {
            let r = idx * runs_per_piece + q;
            let (ch, k0) = (r % c, r / c * hw);
            for (b, xb) in xr.chunks_mut(DRAW_BLOCK).enumerate() {
                let z = &mut z[..xb.len() * per];
                let kb = k0 + b * DRAW_BLOCK;
                draw(ch, kb, z);
                for (j, zz) in z.chunks_exact(per).enumerate() {
                    let (a, d) = value(ch, kb + j, zz);
                    xb[j] = a;
                    if let Some(ds) = ds.as_deref_mut() {
                        ds[q * hw + b * DRAW_BLOCK + j] = d;
                    }
                }
            }
        }
    };
    let len = if interleaved {
        DRAW_BLOCK * c
    } else {
        runs_per_piece * geom.hw
    };
    if per == 2 {
        x.par_chunks_mut(len)
            .zip(dy.par_chunks_mut(len))
            .enumerate()
            .for_each(|(i, (xs, ds))| piece(i, xs, Some(ds)));
    } else {
        x.par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, xs)| piece(i, xs, None));
    }
}

/// Whether a scale case is ill-posed in its dtype (the rule of [`super::ill_posed`]:
/// `u·cond_q ≥ q/2` with `q = var + eps`, `cond_q = 2·mean|x − mean|·|x|`), decided per channel
/// in f64 with a margin of 4 on each side of the threshold, which f64's rounding cannot cross
/// (its relative error here is below 1e-9); a channel inside the margin is reported as
/// ill-posed too. Also refuses non-finite cells (overflow of the dtype).
pub fn ill_posed(case: &SuiteCase) -> Option<String> {
    ill_posed_cells(case, &case.inputs["x"])
}

/// [`ill_posed`] of the case `shell` with cells `x` (as [`make_fast`] holds them).
pub fn ill_posed_fast(shell: &SuiteCase, fp: &crate::fast::FastProblem) -> Option<String> {
    use crate::formats::npy::NpyData;
    match &fp.x {
        NpyData::F32(x) => ill_posed_cells(shell, x),
        NpyData::F64(x) => ill_posed_cells(shell, x),
        _ => unreachable!("make_fast holds f32 or f64 cells"),
    }
}

fn ill_posed_cells<T: Copy + Into<f64> + Sync>(case: &SuiteCase, x: &[T]) -> Option<String> {
    let g = Geometry::new(case.layout, &case.shape, usize::MAX).expect("valid");
    // The first non-finite cell, and then the first ill-posed channel, in order (each looked
    // for in parallel).
    const PIECE: usize = 1 << 16;
    let not_finite = x.par_chunks(PIECE).enumerate().find_map_first(|(p, xs)| {
        let j = xs.iter().position(|&v| !v.into().is_finite())?;
        Some(p * PIECE + j)
    });
    if let Some(i) = not_finite {
        return Some(format!("x[{i}] overflows {}", case.dtype.name()));
    }
    let u = case.dtype.unit_roundoff();
    let eps: f64 = case.eps.parse().expect("decimal eps");
    let channel =
        |c: usize| channel_ill_posed(c, g.m, u, eps, || g.channel_offsets(c).map(|i| x[i].into()));
    (0..g.c).into_par_iter().find_map_first(channel)
}

/// [`ill_posed_cells`]'s test of channel `c`, of `m` cells with values `cells()` (finite).
fn channel_ill_posed<I: Iterator<Item = f64>>(
    c: usize,
    m: usize,
    u: f64,
    eps: f64,
    cells: impl Fn() -> I,
) -> Option<String> {
    let m = m as f64;
    let mean = cells().sum::<f64>() / m;
    // var and cond summed, and one cell's relative move of u (the exact rule of
    // `super::ill_posed`, quadratic term included) at its largest: a bound on it first
    // (from the largest |v·(v − mean)| and v², in the same pass as the sums), and the
    // cells' own values only where the bound does not put it below (var+eps)/8.
    let (mut var, mut cond, mut vd, mut vv) = (0.0, 0.0, 0f64, 0f64);
    for v in cells() {
        var += (v - mean) * (v - mean);
        cond += (v - mean).abs() * v.abs();
        vd = max_not_nan(vd, (v * (v - mean)).abs());
        vv = max_not_nan(vv, v * v);
    }
    let q = var / m + eps;
    let lhs = u * 2.0 * cond / m;
    // Each cell's term (positive parts, at most six roundings of 2^-53 each) is below this
    // bound, which leaves a factor 1 + 2^-40 over the same roundings of its own (and 2^-1000
    // over the underflows of at most six operations).
    let bound = (2.0 * u * vd / m + u * u * vv * (m - 1.0) / (m * m)) * (1.0 + 2f64.powi(-40))
        + 2f64.powi(-1000);
    let one = if bound.is_finite() && bound < q / 8.0 {
        bound
    } else {
        cells().fold(0f64, |one, v| {
            one.max(2.0 * u * (v * (v - mean)).abs() / m + u * u * v * v * (m - 1.0) / (m * m))
        })
    };
    if one >= q / 8.0 {
        return Some(format!(
            "channel {c}: one cell moved by u (relatively) moves var+eps by {one:.3e}, \
             not below (var+eps)/8 = {:.3e}",
            q / 8.0
        ));
    }
    if lhs >= q / 8.0 {
        return Some(format!(
            "channel {c}: u*cond(var+eps) = {lhs:.3e} is not below (var+eps)/8 = {:.3e}",
            q / 8.0
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill_cells` draws every cell as one normal after another from the stream, channel
    /// after channel (the order `Rng::normal` calls make), whatever the layout and the length
    /// of a channel's runs (shorter and longer than a piece), with and without `dy`.
    #[test]
    fn cells_drawn_in_parallel_are_the_sequential_draws() {
        let shapes: [(Layout, &[usize]); 6] = [
            (Layout::Nchw, &[3, 5, 2, 3]),
            (Layout::Nchw, &[2, 3, 1, 5000]),
            (Layout::Nchw, &[1, 2, 1, 9000]),
            (Layout::Nhwc, &[2, 3, 700, 5]),
            (Layout::Nhwc, &[1, 1, 9000, 2]),
            (Layout::Nchw, &[700, 3, 1, 7]),
        ];
        for (layout, shape) in shapes {
            let g = Geometry::new(layout, shape, usize::MAX).unwrap();
            for per in [1, 2] {
                let s = Rng::new(77).fork("cells");
                let value = |ch: usize, k: usize, z: &[f64]| -> (f64, f64) {
                    (z[0] + (ch * 1_000_000 + k) as f64 * 1e-3, z[per - 1])
                };
                let (mut x, mut dy) = (vec![f64::NAN; g.len()], vec![f64::NAN; g.len()]);
                let dy_len = if per == 2 { g.len() } else { 0 };
                fill_cells(&g, &s, per, &mut x, &mut dy[..dy_len], &value);
                // one normal at a time
                let mut r = s.clone();
                let (mut wx, mut wdy) = (vec![f64::NAN; g.len()], vec![f64::NAN; g.len()]);
                for ch in 0..g.c {
                    for (k, i) in g.channel_offsets(ch).enumerate() {
                        let z: Vec<f64> = (0..per).map(|_| r.normal()).collect();
                        let (a, d) = value(ch, k, &z);
                        wx[i] = a;
                        if per == 2 {
                            wdy[i] = d;
                        }
                    }
                }
                let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&x), bits(&wx), "{layout:?} {shape:?} per {per}");
                assert_eq!(bits(&dy), bits(&wdy), "{layout:?} {shape:?} per {per}");
                assert_eq!(
                    s.skip_normals((per * g.len()) as u64).next_u64(),
                    r.next_u64(),
                    "the stream after the cells"
                );
            }
        }
    }

    /// `channel_ill_posed` decides (and words) every channel as the rule does with each
    /// cell's term formed (`one` as the largest of them), on channels well inside, near and
    /// beyond the threshold: constant ones with small eps, large means, outliers, f32 values.
    #[test]
    fn channel_test_is_the_rule_with_every_cell_term() {
        let rule = |c: usize, u: f64, eps: f64, xs: &[f64]| -> Option<String> {
            let m = xs.len() as f64;
            let mean = xs.iter().sum::<f64>() / m;
            let (mut var, mut cond, mut one) = (0.0, 0.0, 0f64);
            for &v in xs {
                var += (v - mean) * (v - mean);
                cond += (v - mean).abs() * v.abs();
                one = one.max(
                    2.0 * u * (v * (v - mean)).abs() / m + u * u * v * v * (m - 1.0) / (m * m),
                );
            }
            let q = var / m + eps;
            let lhs = u * 2.0 * cond / m;
            if one >= q / 8.0 {
                return Some(format!(
                    "channel {c}: one cell moved by u (relatively) moves var+eps by {one:.3e}, \
                     not below (var+eps)/8 = {:.3e}",
                    q / 8.0
                ));
            }
            (lhs >= q / 8.0).then(|| {
                format!(
                    "channel {c}: u*cond(var+eps) = {lhs:.3e} is not below (var+eps)/8 = {:.3e}",
                    q / 8.0
                )
            })
        };
        let mut r = Rng::new(5).fork("ill-posed");
        let (mut decided, mut ill) = (0, 0);
        for t in 0..3000 {
            let m = [1, 2, 3, 7, 36, 200][t % 6];
            let u = [
                2f64.powi(-24),
                2f64.powi(-53),
                2f64.powi(-11),
                2f64.powi(-8),
            ][t / 6 % 4];
            let eps = [1e-5, 0.0, 1e-30, 1e-3][t / 24 % 4];
            let (center, sd) = [
                (0.0, 1.0),
                (1e3, 1.0),
                (1e4, 1e-3),
                (5.0, 0.0),
                (1e-20, 1e-21),
            ][t / 96 % 5];
            let mut xs: Vec<f64> = (0..m)
                .map(|_| ((center + sd * r.normal()) as f32) as f64)
                .collect();
            if t % 7 == 0 {
                xs[0] = center + 1e6 * sd.max(1.0);
            }
            let (want, got) = (
                rule(t, u, eps, &xs),
                channel_ill_posed(t, m, u, eps, || xs.iter().copied()),
            );
            assert_eq!(
                got, want,
                "channel {t}: m {m}, u {u:e}, eps {eps:e}, {xs:?}"
            );
            decided += 1;
            ill += usize::from(want.is_some());
        }
        // Both answers, many times each.
        assert!(
            ill > 300 && decided - ill > 300,
            "{ill} ill-posed of {decided}"
        );
    }
}
