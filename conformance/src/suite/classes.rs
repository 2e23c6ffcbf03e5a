//! The class table: per dtype and level, the data classes a suite's cases target, with
//! their shapes.

use super::level::*;
use super::rng::*;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::Layout;

/// A data class: how a channel's cells and parameters are drawn.
#[derive(Clone, Debug)]
pub(super) struct Class {
    pub(super) name: String,
    pub(super) level: Level,
    pub(super) target: &'static str,
    /// Per channel: (mean, std) of the cells.
    pub(super) center: fn(&mut Rng, FloatFormat, f64) -> (f64, f64),
    /// Extra scale parameter for the class (ratio mu/sigma, magnitude, ...).
    pub(super) param: f64,
    pub(super) eps: &'static str,
    /// Cell transform: `Plain`, sparse, integer, constant.
    pub(super) kind: Kind,
    /// Shape per layout.
    pub(super) shape: ShapeKind,
    /// Handed-in statistics far from the batch's (eval, sync).
    pub(super) far_stats: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    Plain,
    Sparse,
    Integer,
    Constant,
    PerSampleMeans,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ShapeKind {
    Small,
    SingleCell,
    C1,
    C65,
    Batch1,
}

pub(super) fn shape_for(layout: Layout, k: ShapeKind) -> Vec<usize> {
    // (N, C, H, W) per kind, mapped onto the layout
    let (n, c, h, w) = match k {
        ShapeKind::Small => (2, 3, 3, 4),
        ShapeKind::SingleCell => (1, 3, 1, 1),
        ShapeKind::C1 => (3, 1, 4, 4),
        ShapeKind::C65 => (2, 65, 1, 3),
        ShapeKind::Batch1 => (1, 2, 4, 5),
    };
    match (layout, k) {
        (Layout::Rows | Layout::Flat, _) => vec![c, n * h * w],
        (Layout::Chw, _) => vec![c, n * h, w],
        (Layout::Nchw, _) => vec![n, c, h, w],
        (Layout::Nhwc, _) => vec![n, h, w, c],
        // The layouts added in 0.3: small shapes of their own for the classes they run
        // ([`on_layout`]); other kinds keep (N, C) and spread H·W over their spatial axes.
        // `nc` (m = 6) is judged with exact condition numbers (at most 16 cells per channel,
        // precision/budget.rs), the others (m = 20, 24) by the bound, as `nchw` is.
        (Layout::Nc, ShapeKind::Small) => vec![6, 3],
        (Layout::Ncl, ShapeKind::Small) => vec![4, 3, 5],
        (Layout::Ncdhw, ShapeKind::Small) => vec![2, 3, 2, 2, 3],
        (Layout::Ndhwc, ShapeKind::Small) => vec![2, 2, 2, 3, 3],
        (Layout::Nc, _) => vec![n * h * w, c],
        (Layout::Ncl, _) => vec![n, c, h * w],
        (Layout::Ncdhw, _) => vec![n, c, 1, h, w],
        (Layout::Ndhwc, _) => vec![n, 1, h, w, c],
    }
}

/// The classes that also run on the batch_norm layouts added in bnconf 0.3 (`nc`, `ncl`,
/// `ncdhw`, `ndhwc`): one well-scaled core class and two conditioning ones (a large mean,
/// a variance near eps), every op on each, so that the default suite grows by a tenth or so
/// rather than by four fifths; and the range level's two classes (`huge`, `tiny`: the
/// `extreme` suite), so that every suite that has the seed's layouts has these too. The
/// seed's layouts run every class.
pub(super) const NEW_LAYOUT_CLASSES: [&str; 5] =
    ["gaussian", "large-mean-1e3", "var-near-eps", "huge", "tiny"];

/// Whether `class` runs on `layout` (see [`NEW_LAYOUT_CLASSES`]).
pub(super) fn on_layout(class: &Class, layout: Layout) -> bool {
    match layout {
        Layout::Rows | Layout::Flat | Layout::Chw | Layout::Nchw | Layout::Nhwc => true,
        Layout::Nc | Layout::Ncl | Layout::Ncdhw | Layout::Ndhwc => {
            NEW_LAYOUT_CLASSES.contains(&class.name.as_str())
        }
    }
}

pub(super) fn classes(dtype: FloatFormat, level_filter: &[Level]) -> Vec<Class> {
    let f32ish = dtype != FloatFormat::F64;
    let mut v = vec![
        Class {
            name: "gaussian".into(),
            level: Level::Core,
            target: "well-scaled data, mean 0, std 1",
            center: |_, _, _| (0.0, 1.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "offset".into(),
            level: Level::Core,
            target: "well-scaled data with per-channel mean and std",
            center: |r, _, _| (r.range(-3.0, 3.0), r.range(0.5, 2.0)),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "batch1".into(),
            level: Level::Core,
            target: "N = 1",
            center: |r, _, _| (r.range(-1.0, 1.0), 1.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Batch1,
            far_stats: false,
        },
        Class {
            name: "c1".into(),
            level: Level::Core,
            target: "a single channel (C = 1)",
            center: |_, _, _| (0.5, 2.0),
            param: 0.0,
            eps: "1e-3",
            kind: Kind::Plain,
            shape: ShapeKind::C1,
            far_stats: false,
        },
    ];
    // Mean offsets scaled to the dtype: each half type also gets the largest ratio at which
    // a fair budget still rejects a doubled variance and a 25 % rstd error (the controls of
    // suite/discriminating.rs), so the class keeps cases there when its f32 ratios are
    // non-discriminating (k·u·cond of the variance grows like u·mean/std: bf16 1e2 and
    // f16 1e3 allow more than the variance itself).
    let ratios: &[f64] = match dtype {
        FloatFormat::F64 => &[1e3, 1e6, 1e8],
        FloatFormat::F16 => &[1e1, 1e2, 1e3, 1e4],
        FloatFormat::BF16 => &[2e0, 1e2, 1e3, 1e4],
        _ => &[1e2, 1e3, 1e4],
    };
    for &r in ratios {
        v.push(Class {
            name: format!("large-mean-{r:e}"),
            level: Level::Conditioning,
            target: "large mean, small variance (mean/std as named)",
            center: |rng, _, p| (p * rng.range(1.0, 4.0), 1.0),
            param: r,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        });
    }
    v.extend([
        Class {
            name: "constant".into(),
            level: Level::Conditioning,
            target: "constant channels (var = 0), eps = 1e-5",
            center: |r, _, _| (r.range(-4.0, 4.0), 0.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Constant,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "constant-eps1e-3".into(),
            level: Level::Conditioning,
            target: "constant channels with a larger eps",
            center: |r, _, _| (r.range(100.0, 200.0), 0.0),
            param: 0.0,
            eps: "1e-3",
            kind: Kind::Constant,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "var-near-eps".into(),
            level: Level::Conditioning,
            target: "variance about eps (eps-placement bugs)",
            center: |r, _, _| (r.range(-1.0, 1.0), 0.003),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "eps-large".into(),
            level: Level::Conditioning,
            target: "eps = 0.1, comparable to the variance",
            center: |_, _, _| (0.0, 0.3),
            param: 0.0,
            eps: "0.1",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "single-cell".into(),
            level: Level::Conditioning,
            target: "one cell per channel (m = 1), eps > 0",
            center: |r, _, _| (r.range(-2.0, 2.0), 1.0),
            param: 0.0,
            eps: "1e-3",
            kind: Kind::Plain,
            shape: ShapeKind::SingleCell,
            far_stats: false,
        },
        Class {
            name: "sample-means".into(),
            level: Level::Conditioning,
            target: "N > 1 with different per-sample means",
            center: |_, _, _| (0.0, 0.5),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::PerSampleMeans,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "c65".into(),
            level: Level::Conditioning,
            target: "odd channel count C = 65, m = 6",
            center: |r, _, _| (r.range(-2.0, 2.0), r.range(0.1, 3.0)),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::C65,
            far_stats: false,
        },
        Class {
            name: "sparse".into(),
            level: Level::Conditioning,
            target: "sparse data (about 80% zeros)",
            center: |_, _, _| (0.0, 1.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Sparse,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "integer".into(),
            level: Level::Conditioning,
            target: "small integer data",
            center: |_, _, _| (0.0, 5.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Integer,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "far-stats".into(),
            level: Level::Conditioning,
            target: "handed-in statistics far from the batch's (eval, sync)",
            center: |r, _, _| (r.range(-2.0, 2.0), 1.0),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: true,
        },
        Class {
            name: GAMMA_ZERO.into(),
            level: Level::Conditioning,
            target:
                "gamma = 0 on channels 0 and 2 (pruned or frozen channels): y = beta there, dx = 0",
            center: |r, _, _| (r.range(-2.0, 2.0), r.range(0.5, 2.0)),
            param: 0.0,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
    ]);
    if matches!(dtype, FloatFormat::F16 | FloatFormat::BF16) {
        v.push(Class {
            name: "constant-eps1e-1".into(),
            level: Level::Conditioning,
            target: "constant channels with eps = 0.1 (half types: a mean one ulp off leaves \
                     var = δ², which moves q by more than 1e-5 or 1e-3)",
            center: |r, _, _| (r.range(-0.5, 0.5), 0.0),
            param: 0.0,
            eps: "0.1",
            kind: Kind::Constant,
            shape: ShapeKind::Small,
            far_stats: false,
        });
    }
    let (big, small) = if f32ish {
        (1e19, 1e-21)
    } else {
        (1e160, 1e-165)
    };
    v.extend([
        Class {
            name: "huge".into(),
            level: Level::Range,
            target: "squares overflow the dtype",
            center: |r, _, p| (p * r.range(-1.0, 1.0), p),
            param: big,
            eps: "1e-5",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
        Class {
            name: "tiny".into(),
            level: Level::Range,
            target: "squares underflow the dtype (eps = 0)",
            center: |r, _, p| (p * r.range(-1.0, 1.0), p),
            param: small,
            eps: "0",
            kind: Kind::Plain,
            shape: ShapeKind::Small,
            far_stats: false,
        },
    ]);
    v.retain(|c| level_filter.contains(&c.level));
    v
}

/// The class whose even channels have `gamma = 0`.
pub(super) const GAMMA_ZERO: &str = "gamma-zero";
