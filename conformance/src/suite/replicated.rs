//! The `replicated` suite (docs/FORMAT.md, "Replicated suites"): sync BN across R ranks.
//! Each case is a whole-batch op (`forward`, `backward`, `running_update` on nchw, nhwc, and
//! nc, ncl, ncdhw, ndhwc for three classes) whose
//! batch axis N is split across R ∈ {2, 3, 4, 8} ranks — equal splits, unequal ones, and
//! splits with one empty rank — at the levels core and conditioning. The goldens are the
//! whole-batch op's; what a rank holds is judged per rank (`judge::replicated`).

use super::case::*;
use super::classes::*;
use super::generate::*;
use super::level::*;
use super::rng::*;
use bnconf_spec::{Layout, Op};

/// The batch every replicated case splits: N = 16 rows (divisible by 2, 4 and 8), 3 channels,
/// 2×3 images: 96 cells per channel.
const N: usize = 16;
const C: usize = 3;
const H: usize = 2;
const W: usize = 3;

/// The splits of the batch: (name, rows per rank). Every R ∈ {2, 3, 4, 8}; equal, unequal
/// and one-empty-rank splits; the empty rank is never the first (rank 0 is where a careless
/// kernel reads replicated values from).
pub const SPLITS: [(&str, &[usize]); 8] = [
    ("r2-equal", &[8, 8]),
    ("r2-unequal", &[3, 13]),
    ("r3-unequal", &[2, 5, 9]),
    ("r3-empty", &[7, 0, 9]),
    ("r4-equal", &[4, 4, 4, 4]),
    ("r4-empty", &[5, 6, 0, 5]),
    ("r8-equal", &[2, 2, 2, 2, 2, 2, 2, 2]),
    ("r8-unequal", &[1, 3, 2, 1, 4, 1, 2, 2]),
];

/// The data classes of the suite: those of the default suite whose data are a batch of
/// images (core: gaussian, offset; conditioning: the large means, constant channels, var
/// near eps, per-sample means, integers) — the classes where merging statistics goes wrong.
const CLASSES: [&str; 6] = [
    "gaussian",
    "offset",
    "constant",
    "var-near-eps",
    "sample-means",
    "integer",
];

fn wanted(class: &Class) -> bool {
    CLASSES.contains(&class.name.as_str()) || class.name.starts_with("large-mean-")
}

/// The ops of the suite.
pub const OPS: [Op; 3] = [Op::Forward, Op::Backward, Op::RunningUpdate];

/// Generate the suite's cases in the precisions given (ids
/// `op.layout.dtype.class.split`, e.g. `forward.nchw.f32.large-mean-1e4.r3-empty`).
pub fn generate(root: &Rng, precisions: &[Precision], filter: &Filter) -> Vec<SuiteCase> {
    let mut cases = Vec::new();
    for &prec in precisions {
        let dtype = prec.act;
        for class in classes(dtype, &[Level::Core, Level::Conditioning]) {
            if !wanted(&class) {
                continue;
            }
            for op in OPS {
                if !filter.ops.is_empty() && !filter.ops.contains(&op) {
                    continue;
                }
                for &layout in LAYOUTS {
                    if (!filter.layouts.is_empty() && !filter.layouts.contains(&layout))
                        || !on_layout(&class, layout)
                    {
                        continue;
                    }
                    for (split, sizes) in SPLITS {
                        let stream = format!(
                            "replicated.{}.{}.{}.{}.{split}",
                            op.name(),
                            layout.name(),
                            dtype.name(),
                            class.name
                        );
                        let id = format!(
                            "{}.{}.{}.{}.{split}",
                            op.name(),
                            layout.name(),
                            prec.name(),
                            class.name
                        );
                        let shape = shape(layout);
                        let mut rng = root.fork(&stream);
                        let mut case =
                            make_case_shaped(&mut rng, id, &class, prec, op, layout, shape);
                        case.shard_sizes = sizes.to_vec();
                        cases.push(case);
                    }
                }
            }
        }
    }
    cases
}

/// The layouts of the suite: every batch layout (the batch axis N first, so a rank's shard
/// is a contiguous block of rows). The layouts added in 0.3 run the classes
/// [`on_layout`] gives them (gaussian, a large mean, var near eps).
pub const LAYOUTS: &[Layout] = Layout::ALL.split_at(3).1; // every layout from nchw on

/// The batch `[N, C, H, W]` on `layout`: the same N rows (the split axis) and C channels;
/// H·W cells per row and channel on the spatial axes (`nc`: one cell per row and channel).
fn shape(layout: Layout) -> Vec<usize> {
    match layout {
        Layout::Nhwc => vec![N, H, W, C],
        Layout::Nc => vec![N, C],
        Layout::Ncl => vec![N, C, H * W],
        Layout::Ncdhw => vec![N, C, 1, H, W],
        Layout::Ndhwc => vec![N, 1, H, W, C],
        _ => vec![N, C, H, W],
    }
}

/// Row offsets of the ranks: `offset_r = n_0 + ... + n_{r-1}`.
pub fn offsets(sizes: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .scan(0, |acc, &n| {
            let o = *acc;
            *acc += n;
            Some(o)
        })
        .collect()
}

/// Cells of one batch row (every axis after N: `C·H·W` of nchw) of a batch shape.
pub fn row_len(shape: &[usize]) -> usize {
    shape[1..].iter().product()
}

/// Rank r's shard of a case: its rows of each cell array (every batch layout puts N first, so
/// a shard is a contiguous block), copies of the per-channel inputs, `shape[0] = n_r`.
pub fn shard(case: &SuiteCase, r: usize) -> SuiteCase {
    let (off, n) = (offsets(&case.shard_sizes)[r], case.shard_sizes[r]);
    let row = row_len(&case.shape);
    let mut s = case.clone();
    s.shape[0] = n;
    for (name, v) in s.inputs.iter_mut() {
        if matches!(Op::extent(name), bnconf_spec::op::Extent::Cells) {
            *v = v[off * row..(off + n) * row].to_vec();
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::FloatFormat;

    #[test]
    fn splits_cover_the_batch() {
        let rs: Vec<usize> = SPLITS.iter().map(|(_, s)| s.len()).collect();
        for r in [2, 3, 4, 8] {
            assert!(rs.contains(&r), "R = {r} missing");
        }
        for (name, sizes) in SPLITS {
            assert_eq!(sizes.iter().sum::<usize>(), N, "{name}");
            let equal = sizes.iter().all(|&n| n == sizes[0]);
            assert_eq!(
                name.ends_with("equal") && !name.ends_with("unequal"),
                equal,
                "{name}"
            );
            assert_eq!(name.ends_with("empty"), sizes.contains(&0), "{name}");
        }
    }

    #[test]
    fn shards_concatenate_to_the_case() {
        let s = super::super::generate_in(
            "replicated",
            &[Precision::uniform(FloatFormat::F32)],
            DEFAULT_SEED,
            &Filter::default(),
        )
        .unwrap();
        for c in s.cases.iter().step_by(17) {
            let mut x = Vec::new();
            for r in 0..c.shard_sizes.len() {
                x.extend(shard(c, r).inputs["x"].clone());
            }
            assert_eq!(x, c.inputs["x"], "{}", c.id);
        }
    }
}
