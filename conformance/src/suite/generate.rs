//! Generating a suite: the named suites, their levels and seed, filters, and drawing every
//! case of the class table (handed-in statistics computed exactly), ill-posed cases left out.

use super::case::*;
use super::classes::*;
use super::discriminating::non_discriminating;
use super::ill_posed::*;
use super::level::*;
use super::rng::*;
use super::{replicated, scale};
use crate::fast::acc::exact_dot;
use crate::fast::exact_f64 as q;
use crate::par::*;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::exact::QSqrt;
use bnconf_spec::op::Convention;
use bnconf_spec::{Geometry, Layout, Op};
use std::collections::BTreeMap;

/// Names of the suites.
pub const SUITES: [&str; 4] = ["default", "extreme", "scale", "replicated"];

/// Levels of a named suite.
pub fn suite_levels(name: &str) -> Option<Vec<Level>> {
    match name {
        "default" => Some(vec![Level::Core, Level::Conditioning]),
        "extreme" => Some(vec![Level::Range]),
        "scale" | "replicated" => Some(vec![Level::Core, Level::Conditioning]),
        _ => None,
    }
}

/// Default seed of the suites.
pub const DEFAULT_SEED: u64 = 20261129;

/// A generated suite: cases plus those left out as ill-posed.
#[derive(Clone, Debug)]
pub struct Suite {
    /// Suite name.
    pub name: String,
    /// Seed.
    pub seed: u64,
    /// Gating cases.
    pub cases: Vec<SuiteCase>,
    /// `(id, reason)` of generated cases excluded: ill-posed in their dtype, or with a
    /// handed-in statistic that overflows it (range classes).
    pub excluded: Vec<(String, String)>,
}

/// Filters applied to a suite.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only these ops (all if empty).
    pub ops: Vec<Op>,
    /// Only these layouts (all if empty).
    pub layouts: Vec<Layout>,
}

/// Generate suite `name` for the dtypes given (each a uniform precision).
pub fn generate(name: &str, dtypes: &[FloatFormat], seed: u64, filter: &Filter) -> Option<Suite> {
    let precs: Vec<Precision> = dtypes.iter().map(|&f| Precision::uniform(f)).collect();
    generate_in(name, &precs, seed, filter)
}

/// A suite at the default seed, unfiltered (for the unit tests): the one shared fixture,
/// generated once per name and dtypes for the whole test binary (each key in its own
/// `OnceLock`, so that different suites are generated in parallel and a second caller of the
/// same one waits for the first).
#[cfg(test)]
pub(crate) fn test_suite(name: &str, dtypes: &[FloatFormat]) -> &'static Suite {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Cache = Mutex<HashMap<(String, Vec<FloatFormat>), &'static OnceLock<Suite>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cell: &'static OnceLock<Suite> = CACHE
        .get_or_init(Cache::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((name.to_string(), dtypes.to_vec()))
        .or_insert_with(|| Box::leak(Box::default()));
    cell.get_or_init(|| {
        generate(name, dtypes, DEFAULT_SEED, &Filter::default()).expect("known suite")
    })
}

/// Generate suite `name` in the precisions given. A mixed precision's cases are drawn as the
/// activations' dtype's (same classes, same random stream as that dtype's suite) with every
/// per-channel input rounded to the parameters' dtype instead.
pub fn generate_in(
    name: &str,
    precisions: &[Precision],
    seed: u64,
    filter: &Filter,
) -> Option<Suite> {
    generate_listed(name, precisions, seed, filter, None)
}

/// [`generate_in`] for judging a directory whose manifest lists the cases `listed`: the
/// sharpness test ([`non_discriminating`]: the control kernels run on the case, the generator's
/// dearest step) runs only on the cases `listed` leaves out; a listed case is kept unless
/// ill-posed or unwritable. For the list an export wrote (the cases this generator keeps) the
/// suite is the same, cases and exclusions alike. For any other list the suite still tells the
/// caller, who compares its cases with the list: a case the list leaves out but this generator
/// keeps is tested and kept, so the two differ; a listed case the test would leave out is
/// judged (its controls stay within the budget, so a kernel within rounding of the exact
/// values passes it too: a stricter check, never a laxer one).
pub fn generate_listed(
    name: &str,
    precisions: &[Precision],
    seed: u64,
    filter: &Filter,
    listed: Option<&std::collections::HashSet<&str>>,
) -> Option<Suite> {
    generate_listed_as(name, precisions, seed, filter, listed, false)
}

/// [`generate_listed`] for judging a directory case by case (`check DIR`): the scale
/// suite's kept cases come without their inputs, so the suite is never held whole. A case
/// `listed` leaves out is made and tested for exclusion as it is made (its inputs dropped if
/// kept); a listed case is not made here at all: [`fill_inputs_tested`] makes it when it is
/// judged and reports it if it is ill-posed (the one test a listed case takes), which the
/// judge refuses as [`generate_listed`]'s list would differ. The same cases, ids and order,
/// and every exclusion but those of ill-posed listed cases; every other suite as
/// [`generate_listed`].
pub fn generate_listed_lean(
    name: &str,
    precisions: &[Precision],
    seed: u64,
    filter: &Filter,
    listed: Option<&std::collections::HashSet<&str>>,
) -> Option<Suite> {
    generate_listed_as(name, precisions, seed, filter, listed, true)
}

/// [`fill_inputs`], and whether the case made is ill-posed (`Some(why)`; `None` for a case
/// that had its inputs): what a listed case of [`generate_listed_lean`] must be tested for
/// when it is judged.
pub fn fill_inputs_tested(name: &str, seed: u64, case: &mut SuiteCase) -> Option<String> {
    if !case.inputs.is_empty() {
        return None;
    }
    fill_inputs(name, seed, case);
    if name == "scale" && !case.inputs.is_empty() {
        scale::ill_posed(case)
    } else {
        None
    }
}

/// Whether [`fill_inputs`] makes the inputs of suite `name`'s cases again (their inputs may be
/// dropped and made again when they are needed).
pub fn remakes(name: &str) -> bool {
    name == "scale"
}

/// `case`'s inputs made again (a case of suite `name` generated with `seed`, left out by
/// [`generate_listed_lean`]) as the fast path's problem, cells in their own width and never
/// held as f64 ([`scale::make_fast`]); and whether the case is ill-posed (`Some(why)`, as
/// [`fill_inputs_tested`] reports). `None` for a case with inputs, or one not made this way
/// (then [`fill_inputs_tested`]).
pub fn remake_fast(
    name: &str,
    seed: u64,
    case: &SuiteCase,
) -> Option<(crate::fast::FastProblem, Option<String>)> {
    if !case.inputs.is_empty() || !remakes(name) || !case.shard_sizes.is_empty() {
        return None;
    }
    let fp = scale::remake_fast(&Rng::new(seed), case)?;
    let ill = scale::ill_posed_fast(case, &fp);
    Some((fp, ill))
}

/// Make the inputs of `case` again where [`generate_listed_lean`] left them out (a case of
/// suite `name` generated with `seed`); a case with inputs is left as it is.
pub fn fill_inputs(name: &str, seed: u64, case: &mut SuiteCase) {
    if !case.inputs.is_empty() {
        return;
    }
    if remakes(name) {
        if let Some(again) = scale::remake(&Rng::new(seed), case) {
            case.inputs = again.inputs;
        }
    }
}

fn generate_listed_as(
    name: &str,
    precisions: &[Precision],
    seed: u64,
    filter: &Filter,
    listed: Option<&std::collections::HashSet<&str>>,
    lean: bool,
) -> Option<Suite> {
    let sharpness = |case: &SuiteCase| match listed {
        Some(l) if l.contains(case.id.as_str()) => None,
        _ => non_discriminating(case),
    };
    let levels = suite_levels(name)?;
    let root = Rng::new(seed);
    let mut cases = Vec::new();
    let mut excluded = Vec::new();
    // The suites of their own shapes: a list of cases, each kept unless ill-posed.
    type WhyNot = fn(&SuiteCase) -> Option<String>;
    if name == "scale" && lean {
        // A listed case kept as its shell (made and tested when judged); any other tested
        // as it is made, its inputs dropped if kept.
        let tested = scale::generate_each(&root, precisions, filter, |shell, make| {
            if listed.is_some_and(|l| l.contains(shell.id.as_str())) {
                return Some((shell, None));
            }
            let case = make();
            let reason = scale::ill_posed(&case).or_else(|| sharpness(&case));
            Some((shell, reason))
        });
        for (case, reason) in tested {
            match reason {
                Some(why) => excluded.push((case.id, why)),
                None => cases.push(case),
            }
        }
        return Some(Suite {
            name: name.to_string(),
            seed,
            cases,
            excluded,
        });
    }
    let own: Option<(Vec<SuiteCase>, WhyNot)> = match name {
        "replicated" => Some((replicated::generate(&root, precisions, filter), ill_posed)),
        "scale" => Some((scale::generate(&root, precisions, filter), scale::ill_posed)),
        _ => None,
    };
    if let Some((generated, why_not)) = own {
        // Each case's exclusion (ill-posed, non-discriminating: the control kernels run on
        // it) is decided on its own, in parallel; the suite keeps the generated order.
        let reasons: Vec<Option<String>> = generated
            .par_iter()
            .map(|case| why_not(case).or_else(|| sharpness(case)))
            .collect();
        for (case, reason) in generated.into_iter().zip(reasons) {
            match reason {
                Some(why) => excluded.push((case.id, why)),
                None => cases.push(case),
            }
        }
        return Some(Suite {
            name: name.to_string(),
            seed,
            cases,
            excluded,
        });
    }
    for &prec in precisions {
        let dtype = prec.act;
        for class in classes(dtype, &levels) {
            for op in Op::ALL {
                let handed_in = !matches!(op, Op::Forward | Op::Backward);
                if (!filter.ops.is_empty() && !filter.ops.contains(&op))
                    || (class.far_stats && !handed_in)
                {
                    continue;
                }
                for layout in Layout::ALL {
                    if (!filter.layouts.is_empty() && !filter.layouts.contains(&layout))
                        || (op == Op::SyncStats && layout != Layout::Rows)
                        || !on_layout(&class, layout)
                    {
                        continue;
                    }
                    // The random stream is the activations' dtype's: a mixed precision's case
                    // draws the same data as the uniform one, rounded differently.
                    let stream = format!(
                        "{}.{}.{}.{}",
                        op.name(),
                        layout.name(),
                        dtype.name(),
                        class.name
                    );
                    let id = format!(
                        "{}.{}.{}.{}",
                        op.name(),
                        layout.name(),
                        prec.name(),
                        class.name
                    );
                    let mut rng = root.fork(&stream);
                    let case = make_case(&mut rng, id.clone(), &class, prec, op, layout);
                    // Range classes: a handed-in statistic (E[x²] of huge data, say) can
                    // overflow the dtype; such a case cannot be written, so it is left out.
                    if let Some(name) = case
                        .inputs
                        .iter()
                        .find_map(|(n, v)| v.iter().any(|x| !x.is_finite()).then_some(n))
                    {
                        excluded.push((
                            id,
                            format!("input {name} overflows {}", case.dtype_of(name).name()),
                        ));
                        continue;
                    }
                    match ill_posed(&case).or_else(|| sharpness(&case)) {
                        Some(why) => excluded.push((id, why)),
                        None => cases.push(case),
                    }
                }
            }
        }
    }
    Some(Suite {
        name: name.to_string(),
        seed,
        cases,
        excluded,
    })
}

/// One cell of a class's distribution around `(mu, sd)`; `sample` is the batch index `n`
/// (only [`Kind::PerSampleMeans`] uses it).
pub(super) fn draw_cell(
    rng: &mut Rng,
    class: &Class,
    dtype: FloatFormat,
    center: (f64, f64),
    sample: usize,
) -> f64 {
    let (mu, sd) = center;
    let z = rng.normal();
    let v = match class.kind {
        Kind::Plain => mu + sd * z,
        Kind::Sparse => {
            if rng.below(5) == 0 {
                mu + sd * z
            } else {
                0.0
            }
        }
        Kind::Integer => ((rng.below(17) as i64) - 8) as f64,
        Kind::Constant => mu,
        Kind::PerSampleMeans => mu + 5.0 * sample as f64 + sd * z,
    };
    to_dtype(v, dtype)
}

/// Number of shards R of a `sync_stats` case per shape kind.
pub(super) fn shard_count_for(k: ShapeKind) -> usize {
    match k {
        ShapeKind::Small => 4,
        ShapeKind::SingleCell | ShapeKind::Batch1 => 2,
        ShapeKind::C1 => 3,
        ShapeKind::C65 => 5,
    }
}

/// A `sync_stats` case: R shards per channel with unequal counts (pattern drawn per case:
/// all non-empty and unequal; unequal with one empty shard carrying stale statistics; all
/// equal — the seed's special case), each non-empty shard's mean and E[x²] computed exactly
/// from its cells drawn from the class and rounded to the dtype.
pub(super) fn make_sync_stats_case(
    rng: &mut Rng,
    id: String,
    class: &Class,
    prec: Precision,
) -> SuiteCase {
    // Cells are activations; the shards' statistics are in the parameters' dtype.
    let (dtype, pdt) = (prec.act, prec.param);
    let c = shape_for(Layout::Rows, class.shape)[0];
    let r = shard_count_for(class.shape);
    let pattern = rng.below(3);
    let mut counts: Vec<u64> = match pattern {
        2 => vec![1 + rng.below(40); r],
        _ => (0..r).map(|_| 1 + rng.below(40)).collect(),
    };
    if pattern == 1 {
        counts[rng.below(r as u64) as usize] = 0;
    }
    let centers: Vec<(f64, f64)> = (0..c)
        .map(|_| (class.center)(rng, dtype, class.param))
        .collect();
    let (mut means, mut m2s) = (vec![0.0; c * r], vec![0.0; c * r]);
    for (ch, &(mu, sd)) in centers.iter().enumerate() {
        for (s, &n) in counts.iter().enumerate() {
            if n == 0 {
                // An empty replica's stale statistics: finite, far from the others.
                let spread = 50.0 * (sd + 1.0);
                let stale = to_dtype(mu + spread * rng.range(-1.0, 1.0), pdt);
                means[ch * r + s] = stale;
                m2s[ch * r + s] = to_dtype(stale * stale + spread * rng.range(1.0, 4.0), pdt);
                continue;
            }
            let drawn: Vec<f64> = (0..n as usize)
                .map(|k| draw_cell(rng, class, dtype, (mu, sd), k % 3))
                .collect();
            if drawn.iter().any(|v| !v.is_finite()) {
                // Cells overflow the dtype (range classes): `generate` excludes the case.
                means[ch * r + s] = f64::NAN;
                continue;
            }
            let (mean, e2) = exact_mean_m2(&drawn);
            means[ch * r + s] = round_q(&mean, pdt);
            m2s[ch * r + s] = round_q(&e2, pdt);
        }
    }
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "shard_count".to_string(),
        counts.iter().map(|&n| n as f64).collect(),
    );
    inputs.insert("shard_mean".to_string(), means);
    inputs.insert("shard_m2".to_string(), m2s);
    SuiteCase {
        id,
        level: class.level,
        class: class.name.clone(),
        target: class.target.to_string(),
        dtype,
        param_dtype: pdt,
        op: Op::SyncStats,
        layout: Layout::Rows,
        shape: vec![c, r],
        eps: "0".to_string(),
        momentum: None,
        convention: None,
        inputs,
        shard_sizes: vec![],
    }
}

/// Convention and momentum of a `running_update` case: PyTorch on `rows`, `chw`, `nhwc`,
/// `nc`, `ndhwc`, ONNX on `flat`, `nchw`, `ncl`, `ncdhw`; the momentum drawn from the framework defaults and the ends of
/// [0, 1] (never 1/2, where swapping `a` and `1 − a` is invisible).
pub(super) fn running_params(rng: &mut Rng, layout: Layout) -> (Convention, &'static str) {
    let k = rng.below(4) as usize;
    if matches!(
        layout,
        Layout::Flat | Layout::Nchw | Layout::Ncl | Layout::Ncdhw
    ) {
        (Convention::Onnx, ["0.9", "0.99", "0.7", "0"][k])
    } else {
        (Convention::Pytorch, ["0.1", "0.01", "0.3", "1"][k])
    }
}

pub(super) fn make_case(
    rng: &mut Rng,
    id: String,
    class: &Class,
    prec: Precision,
    op: Op,
    layout: Layout,
) -> SuiteCase {
    if op == Op::SyncStats {
        return make_sync_stats_case(rng, id, class, prec);
    }
    make_case_shaped(
        rng,
        id,
        class,
        prec,
        op,
        layout,
        shape_for(layout, class.shape),
    )
}

/// [`make_case`] with the shape given (the `replicated` suite's batches).
pub(super) fn make_case_shaped(
    rng: &mut Rng,
    id: String,
    class: &Class,
    prec: Precision,
    op: Op,
    layout: Layout,
    shape: Vec<usize>,
) -> SuiteCase {
    // Activations in `dtype`, every per-channel input in `pdt`.
    let (dtype, pdt) = (prec.act, prec.param);
    let geom = Geometry::new(layout, &shape, usize::MAX).expect("valid");
    let (c, m) = (geom.c, geom.m);
    // The batch this case is a shard of: R shards (R = 2 for sync ops, shard 0 is this case).
    let shards = if matches!(op, Op::SyncForward | Op::SyncBackward) {
        2
    } else {
        1
    };
    let centers: Vec<(f64, f64)> = (0..c)
        .map(|_| (class.center)(rng, dtype, class.param))
        .collect();
    let cell =
        |rng: &mut Rng, ch: usize, k: usize| draw_cell(rng, class, dtype, centers[ch], k / geom.hw);
    // Matrix view: all shards' cells, channel-major.
    let mut xs: Vec<Vec<f64>> = vec![Vec::with_capacity(m * shards); c];
    let mut dys: Vec<Vec<f64>> = vec![Vec::with_capacity(m * shards); c];
    for _ in 0..shards {
        for ch in 0..c {
            for k in 0..m {
                xs[ch].push(cell(rng, ch, k));
                dys[ch].push(to_dtype(rng.normal(), dtype));
            }
        }
    }
    let mut inputs = BTreeMap::new();
    // Cells that overflow the dtype (range classes in f16/bf16): no statistics can be formed;
    // the non-finite `x` makes `generate` exclude the case.
    let overflow = xs.iter().chain(&dys).flatten().any(|v| !v.is_finite());
    let to_layout = |mat: &Vec<Vec<f64>>| -> Vec<f64> {
        let mut out = vec![0.0; c * m];
        for (ch, row) in mat.iter().enumerate() {
            for (i, &v) in geom.channel_offsets(ch).zip(&row[..m]) {
                out[i] = v;
            }
        }
        out
    };
    for &name in op.inputs() {
        let v: Vec<f64> = match name {
            "x" => to_layout(&xs),
            "dy" => to_layout(&dys),
            "gamma" => (0..c)
                .map(|ch| {
                    let g = to_dtype(
                        if rng.below(4) == 0 {
                            -rng.range(0.5, 2.0)
                        } else {
                            rng.range(0.5, 2.0)
                        },
                        pdt,
                    );
                    // Drawn either way, so the stream stays that of the other classes.
                    if class.name == GAMMA_ZERO && ch % 2 == 0 {
                        0.0
                    } else {
                        g
                    }
                })
                .collect(),
            "beta" => (0..c)
                .map(|_| to_dtype(rng.range(-1.0, 1.0), pdt))
                .collect(),
            _ => continue,
        };
        inputs.insert(name.to_string(), v);
    }
    // Handed-in statistics.
    let eps = bnconf_spec::exact::parse::parse_rational(class.eps).expect("valid eps");
    let stats_op = if overflow { Op::Forward } else { op };
    match stats_op {
        Op::Eval => {
            let (mut mean, mut var) = (Vec::new(), Vec::new());
            for ch in 0..c {
                let row: Vec<QSqrt> = xs[ch][..m].iter().map(|&x| q(x)).collect();
                let (mu, v) = bnconf_spec::channel::batch_stats(&row);
                let (mu, v) = (round_q(&mu, pdt), round_q(&v, pdt));
                if class.far_stats {
                    let sd = centers[ch].1.max(1e-3);
                    mean.push(to_dtype(mu + 3.0 * sd * rng.range(-1.0, 1.0), pdt));
                    var.push(to_dtype(v * rng.range(0.25, 4.0) + sd * sd * 0.5, pdt));
                } else {
                    mean.push(mu);
                    var.push(v);
                }
            }
            inputs.insert("mean".into(), mean);
            inputs.insert("var".into(), var);
        }
        Op::SyncForward | Op::SyncBackward => {
            // All-reduced statistics of the whole batch (all shards), exact, then in the dtype.
            let (mut mean, mut m2, mut mdy, mut mdyx) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ch in 0..c {
                let n = QSqrt::int(xs[ch].len() as i64);
                let (mu_q, e2_q) = exact_mean_m2(&xs[ch]);
                let (mut mu, mut e2) = (round_q(&mu_q, pdt), round_q(&e2_q, pdt));
                if class.far_stats {
                    let sd = centers[ch].1.max(1e-3);
                    mu = to_dtype(mu + 2.0 * sd, pdt);
                    e2 = to_dtype(
                        e2 + 4.0 * sd * sd * rng.range(1.0, 2.0) + 4.0 * sd * (mu - 2.0 * sd).abs(),
                        pdt,
                    );
                }
                mean.push(mu);
                m2.push(e2);
                if op == Op::SyncBackward && !(mu.is_finite() && e2.is_finite()) {
                    // Overflowed statistics: the case is excluded by `generate`.
                    mdy.push(f64::NAN);
                    mdyx.push(f64::NAN);
                } else if op == Op::SyncBackward {
                    let (muq, m2q, epsq) = (q(mu), q(e2), QSqrt::rational(eps.clone()));
                    let var = bnconf_spec::channel::sync_var(&muq, &m2q);
                    let qq = &var + &epsq;
                    let (a, k) = if qq.signum() > 0 {
                        let r = bnconf_spec::channel::inv_std(&var, &epsq);
                        // Σ dy·(x − mean)·r = (Σ dy·x − mean·Σ dy)·r, the sums exact.
                        let sdy = QSqrt::rational(exact_dot(&dys[ch], None));
                        let sdx = QSqrt::rational(exact_dot(&dys[ch], Some(&xs[ch])));
                        let sdyx = &(&sdx - &(&muq * &sdy)) * &r;
                        (round_q(&(&sdy / &n), pdt), round_q(&(&sdyx / &n), pdt))
                    } else {
                        (0.0, 0.0)
                    };
                    mdy.push(a);
                    mdyx.push(k);
                }
            }
            inputs.insert("mean".into(), mean);
            inputs.insert("m2".into(), m2);
            if op == Op::SyncBackward {
                inputs.insert("mean_dy".into(), mdy);
                inputs.insert("mean_dy_xhat".into(), mdyx);
            }
        }
        Op::RunningUpdate => {
            // Running statistics away from the batch's (far ones for far-statistics classes).
            let far = if class.far_stats { 10.0 } else { 1.0 };
            let (mut rm, mut rv) = (Vec::new(), Vec::new());
            for &(mu, sd) in &centers {
                let s = sd.max(1e-3);
                rm.push(to_dtype(mu + far * 2.0 * s * rng.range(-1.0, 1.0), pdt));
                rv.push(to_dtype(s * s * rng.range(0.25, 4.0) * far, pdt));
            }
            inputs.insert("running_mean".into(), rm);
            inputs.insert("running_var".into(), rv);
        }
        _ => {}
    }
    let (momentum, convention) = if op == Op::RunningUpdate {
        let (conv, a) = running_params(rng, layout);
        (Some(a.to_string()), Some(conv))
    } else {
        (None, None)
    };
    SuiteCase {
        id,
        level: class.level,
        class: class.name.clone(),
        target: class.target.to_string(),
        dtype,
        param_dtype: pdt,
        op,
        layout,
        shape,
        eps: if op.uses_eps() {
            class.eps.to_string()
        } else {
            "0".to_string()
        },
        momentum,
        convention,
        inputs,
        shard_sizes: vec![],
    }
}

/// Exact `(mean, E[x²])` of a non-empty set of cells.
pub(super) fn exact_mean_m2(cells: &[f64]) -> (QSqrt, QSqrt) {
    let n = QSqrt::int(cells.len() as i64);
    let s1 = QSqrt::rational(exact_dot(cells, None));
    let s2 = QSqrt::rational(exact_dot(cells, Some(cells)));
    (&s1 / &n, &s2 / &n)
}

pub(super) fn round_q(v: &QSqrt, f: FloatFormat) -> f64 {
    bnconf_spec::exact::round::round(v, f).to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every named suite generates for every dtype without panicking; every kept case is a
    /// valid exact problem with finite inputs, and every exclusion has a reason (the range
    /// classes overflow statistics in f64: those are excluded, not written).
    #[test]
    fn every_suite_generates_finite_valid_cases() {
        // The scale suite's cases are too large for one exact number per cell: their validity
        // is checked by judging them (tests/scale.rs); here only small suites.
        for name in SUITES.into_iter().filter(|&n| n != "scale") {
            for prec in Precision::ALL {
                let s = generate_in(name, &[prec], DEFAULT_SEED, &Filter::default()).unwrap();
                assert!(!s.cases.is_empty(), "{name} {}", prec.name());
                for c in &s.cases {
                    assert!(
                        c.inputs.values().flatten().all(|x| x.is_finite()),
                        "{}",
                        c.id
                    );
                    for (n, v) in &c.inputs {
                        let f = c.dtype_of(n);
                        assert!(v.iter().all(|&x| to_dtype(x, f) == x), "{} {n}", c.id);
                    }
                    c.problem();
                }
                assert!(s.excluded.iter().all(|(_, why)| !why.is_empty()));
            }
        }
    }
}

#[cfg(test)]
mod listed_tests {
    use super::*;
    use std::collections::HashSet;

    /// `generate_listed` (how `check DIR` regenerates) with the cases an export lists is the
    /// suite itself, cases (inputs included) and exclusions alike; a non-discriminating case
    /// the list names is kept (judged); an ill-posed one stays out; a kept case the list leaves
    /// out is still tested and kept, so the caller's comparison with the list catches it.
    #[test]
    fn a_listed_manifest_regenerates_the_suite_and_other_lists_show() {
        let (mut sharp, mut ill) = (0, 0);
        for f in [FloatFormat::F16, FloatFormat::BF16, FloatFormat::F32] {
            let s = test_suite("default", &[f]);
            let prec = [Precision::uniform(f)];
            let gen = |l: &HashSet<&str>| {
                generate_listed("default", &prec, DEFAULT_SEED, &Filter::default(), Some(l))
                    .unwrap()
            };
            let ids: HashSet<&str> = s.cases.iter().map(|c| c.id.as_str()).collect();
            let again = gen(&ids);
            assert_eq!(again.excluded, s.excluded, "{f:?}");
            assert_eq!(again.cases.len(), s.cases.len(), "{f:?}");
            for (a, b) in again.cases.iter().zip(&s.cases) {
                assert_eq!((&a.id, &a.inputs), (&b.id, &b.inputs));
            }
            for (id, why) in &s.excluded {
                let mut more = ids.clone();
                more.insert(id.as_str());
                let t = gen(&more);
                let kept = t.cases.iter().any(|c| &c.id == id);
                if why.starts_with("non-discriminating") {
                    assert!(kept, "{id}: {why}");
                    sharp += 1;
                } else if why.starts_with("channel") {
                    assert!(!kept, "{id}: {why}");
                    ill += 1;
                }
                if sharp > 0 && ill > 0 {
                    break;
                }
            }
            let first = s.cases[0].id.as_str();
            let mut fewer = ids.clone();
            fewer.remove(first);
            assert!(gen(&fewer).cases.iter().any(|c| c.id == first), "{first}");
        }
        assert!(
            sharp > 0 && ill > 0,
            "{sharp} non-discriminating, {ill} ill-posed"
        );
    }
}
