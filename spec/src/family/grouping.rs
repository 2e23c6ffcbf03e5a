//! The one grouping abstraction of the normalization family (docs/DESIGN.md, "one core, many
//! groupings"): which flat cells of `x` form each group (the reduction of a statistic) and
//! which parameter (`gamma`/`beta` position) each cell uses. BatchNorm, LayerNorm, RMSNorm,
//! GroupNorm and InstanceNorm are one computation over different [`Grouping`]s; the seed's
//! layouts are groupings too ([`Grouping::from_geometry`]).
//!
//! Index arithmetic only: no values.

use crate::error::SpecError;
use crate::layout::Geometry;

/// A channel-indexed layout of the family (FORMAT.md: `nchw`, `nhwc`, and the new batch_norm
/// layouts `nc`, `ncl`, `ncdhw`, `ndhwc`): a batch axis first, then the channel axis first
/// (channels-first) or last (channels-last), the other axes spatial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChannelLayout {
    /// `[N, C, H, W]`.
    Nchw,
    /// `[N, H, W, C]`.
    Nhwc,
    /// `[N, C]` (BatchNorm1d on 2-D input; no spatial axis).
    Nc,
    /// `[N, C, L]`.
    Ncl,
    /// `[N, C, D, H, W]`.
    Ncdhw,
    /// `[N, D, H, W, C]`.
    Ndhwc,
}

impl ChannelLayout {
    /// Every channel layout.
    pub const ALL: [ChannelLayout; 6] = [
        ChannelLayout::Nchw,
        ChannelLayout::Nhwc,
        ChannelLayout::Nc,
        ChannelLayout::Ncl,
        ChannelLayout::Ncdhw,
        ChannelLayout::Ndhwc,
    ];
    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            ChannelLayout::Nchw => "nchw",
            ChannelLayout::Nhwc => "nhwc",
            ChannelLayout::Nc => "nc",
            ChannelLayout::Ncl => "ncl",
            ChannelLayout::Ncdhw => "ncdhw",
            ChannelLayout::Ndhwc => "ndhwc",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<ChannelLayout> {
        ChannelLayout::ALL.into_iter().find(|l| l.name() == s)
    }
    /// Number of axes.
    pub fn rank(self) -> usize {
        match self {
            ChannelLayout::Nc => 2,
            ChannelLayout::Ncl => 3,
            ChannelLayout::Nchw | ChannelLayout::Nhwc => 4,
            ChannelLayout::Ncdhw | ChannelLayout::Ndhwc => 5,
        }
    }
    /// Whether the channel axis is the last one.
    pub fn channels_last(self) -> bool {
        matches!(self, ChannelLayout::Nhwc | ChannelLayout::Ndhwc)
    }
    /// The axis holding the channel.
    pub fn channel_axis(self) -> usize {
        if self.channels_last() {
            self.rank() - 1
        } else {
            1
        }
    }
    /// `(N, C, S)`: batch, channels, spatial cells per (sample, channel), after checking the
    /// rank, that no extent is 0 and that the element count fits in `usize`.
    pub fn dims(self, shape: &[usize]) -> Result<(usize, usize, usize), SpecError> {
        check_shape(shape, self.rank(), self.name())?;
        let c = shape[self.channel_axis()];
        let s = shape.iter().product::<usize>() / (shape[0] * c);
        Ok((shape[0], c, s))
    }
    /// Flat offset of cell `s` (spatial, row-major) of channel `c` of sample `n`.
    pub fn offset(
        self,
        (_, c_count, s_count): (usize, usize, usize),
        n: usize,
        c: usize,
        s: usize,
    ) -> usize {
        if self.channels_last() {
            (n * s_count + s) * c_count + c
        } else {
            (n * c_count + c) * s_count + s
        }
    }
}

fn check_shape(shape: &[usize], rank: usize, what: &str) -> Result<(), SpecError> {
    let bad = |reason: String| SpecError::Shape { reason };
    if shape.len() != rank {
        return Err(bad(format!(
            "layout `{what}` needs {rank} dimensions, got {}",
            shape.len()
        )));
    }
    if let Some(i) = shape.iter().position(|&d| d == 0) {
        return Err(bad(format!(
            "dimension {i} is 0: every group needs at least one cell"
        )));
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad(format!("{shape:?}: element count overflows")))?;
    Ok(())
}

/// Which cells of `x` form each group, and which parameter each cell uses.
///
/// (G1) every cell lies in exactly one group; (G2) every group has `K ≥ 1` cells, listed in a
/// fixed order (the order sums are taken in); (G3) `param[i] < n_params` for every cell `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    groups: Vec<Vec<usize>>,
    param: Vec<usize>,
    n_params: usize,
}

impl Grouping {
    /// Build from explicit groups and parameter indices, checking (G1)–(G3).
    pub fn new(
        groups: Vec<Vec<usize>>,
        param: Vec<usize>,
        n_params: usize,
    ) -> Result<Self, SpecError> {
        let bad = |reason: String| SpecError::Shape { reason };
        let mut seen = vec![false; param.len()];
        for (g, cells) in groups.iter().enumerate() {
            if cells.is_empty() {
                return Err(bad(format!("group {g} is empty")));
            }
            for &i in cells {
                if i >= seen.len() || seen[i] {
                    return Err(bad(format!(
                        "cell {i} of group {g} is out of range or in two groups"
                    )));
                }
                seen[i] = true;
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(bad(format!("cell {i} is in no group")));
        }
        if let Some(i) = param.iter().position(|&p| p >= n_params) {
            return Err(bad(format!(
                "cell {i} uses parameter {} of {n_params}",
                param[i]
            )));
        }
        Ok(Grouping {
            groups,
            param,
            n_params,
        })
    }

    /// **layer_norm / rms_norm, layout `last`**: `x` of shape `[*batch, *normalized]` with the
    /// trailing `normalized_ndim = k` axes normalized (1 ≤ k ≤ 3, at least one batch axis).
    /// Row `r` (the flat batch index) is the group of cells `r·K … r·K + K − 1`,
    /// `K` = product of the normalized extents; cell `i` uses parameter `i mod K` (its position
    /// in the normalized shape: elementwise affine).
    pub fn last(shape: &[usize], normalized_ndim: usize) -> Result<Self, SpecError> {
        if !(1..=3).contains(&normalized_ndim) {
            return Err(SpecError::BadParam {
                field: "normalized_ndim",
                reason: "must be 1, 2 or 3",
                value: normalized_ndim.to_string(),
            });
        }
        if shape.len() <= normalized_ndim {
            return Err(SpecError::Shape {
                reason: format!(
                    "layout `last` with normalized_ndim {normalized_ndim} needs at least {} dimensions (one batch axis), got {}",
                    normalized_ndim + 1,
                    shape.len()
                ),
            });
        }
        check_shape(shape, shape.len(), "last")?;
        let k: usize = shape[shape.len() - normalized_ndim..].iter().product();
        let rows: usize = shape[..shape.len() - normalized_ndim].iter().product();
        let groups = (0..rows).map(|r| (r * k..(r + 1) * k).collect()).collect();
        let param = (0..rows * k).map(|i| i % k).collect();
        Ok(Grouping {
            groups,
            param,
            n_params: k,
        })
    }

    /// **group_norm** on a channel layout with `groups = G` (G divides C): group `n·G + g` holds
    /// channels `g·C/G … (g+1)·C/G − 1` of sample `n`, every spatial cell of them (channel by
    /// channel, each channel's cells in spatial order); cell uses parameter = its channel.
    /// InstanceNorm is `G = C`.
    pub fn group_norm(
        layout: ChannelLayout,
        shape: &[usize],
        groups: usize,
    ) -> Result<Self, SpecError> {
        let dims = layout.dims(shape)?;
        let (n, c, s) = dims;
        if groups == 0 || c % groups != 0 {
            return Err(SpecError::BadParam {
                field: "groups",
                reason: "must be a positive divisor of the channel count C",
                value: format!("{groups} (C = {c})"),
            });
        }
        let per = c / groups;
        let mut out = Vec::with_capacity(n * groups);
        for b in 0..n {
            for g in 0..groups {
                let mut cells = Vec::with_capacity(per * s);
                for ch in g * per..(g + 1) * per {
                    for sp in 0..s {
                        cells.push(layout.offset(dims, b, ch, sp));
                    }
                }
                out.push(cells);
            }
        }
        Ok(Grouping {
            groups: out,
            param: channel_params(layout, dims),
            n_params: c,
        })
    }

    /// **batch_norm** per channel on a channel layout: group `c` holds every cell of channel
    /// `c` (sample by sample, each sample's cells in spatial order: position `k = n·S + s`, as
    /// the seed's matrix view `[C, N·S]` orders them); parameter = channel.
    pub fn batch_norm(layout: ChannelLayout, shape: &[usize]) -> Result<Self, SpecError> {
        let dims = layout.dims(shape)?;
        let (n, c, s) = dims;
        let groups = (0..c)
            .map(|ch| {
                (0..n)
                    .flat_map(|b| (0..s).map(move |sp| (b, sp)))
                    .map(|(b, sp)| layout.offset(dims, b, ch, sp))
                    .collect()
            })
            .collect();
        Ok(Grouping {
            groups,
            param: channel_params(layout, dims),
            n_params: c,
        })
    }

    /// A seed layout as a grouping: channel `c` is the group of the layout offsets of its
    /// matrix-view row ([`Geometry::offset`]), parameter = channel.
    pub fn from_geometry(g: &Geometry) -> Self {
        let groups: Vec<Vec<usize>> = (0..g.c)
            .map(|c| (0..g.m).map(|k| g.offset(c, k)).collect())
            .collect();
        let mut param = vec![0; g.len()];
        for (c, cells) in groups.iter().enumerate() {
            for &i in cells {
                param[i] = c;
            }
        }
        Grouping {
            groups,
            param,
            n_params: g.c,
        }
    }

    /// Number of cells of `x`.
    pub fn len(&self) -> usize {
        self.param.len()
    }
    /// Never true: every group has a cell.
    pub fn is_empty(&self) -> bool {
        self.param.is_empty()
    }
    /// The groups, each its cells' flat offsets in reduction order.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }
    /// Parameter index of every cell.
    pub fn params(&self) -> &[usize] {
        &self.param
    }
    /// Number of parameters (the length of `gamma`, `beta`, `dgamma`, `dbeta`).
    pub fn n_params(&self) -> usize {
        self.n_params
    }
    /// The group of every cell.
    pub fn group_of(&self) -> Vec<usize> {
        let mut out = vec![0; self.len()];
        for (g, cells) in self.groups.iter().enumerate() {
            for &i in cells {
                out[i] = g;
            }
        }
        out
    }
}

fn channel_params(layout: ChannelLayout, dims: (usize, usize, usize)) -> Vec<usize> {
    let (n, c, s) = dims;
    let mut param = vec![0; n * c * s];
    for b in 0..n {
        for ch in 0..c {
            for sp in 0..s {
                param[layout.offset(dims, b, ch, sp)] = ch;
            }
        }
    }
    param
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_groupings_by_hand() {
        // [2, 3], k = 1: rows {0,1,2}, {3,4,5}; params 0,1,2,0,1,2.
        let g = Grouping::last(&[2, 3], 1).unwrap();
        assert_eq!(g.groups(), &[vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(g.params(), &[0, 1, 2, 0, 1, 2]);
        // nhwc [1, 1, 2, 4], G = 2: channels {0,1} and {2,3}; cell (s, c) at s·4 + c.
        let g = Grouping::group_norm(ChannelLayout::Nhwc, &[1, 1, 2, 4], 2).unwrap();
        assert_eq!(g.groups(), &[vec![0, 4, 1, 5], vec![2, 6, 3, 7]]);
        assert_eq!(g.params(), &[0, 1, 2, 3, 0, 1, 2, 3]);
        // ncl [2, 2, 2] batch norm: channel 0 = {0, 1, 4, 5}.
        let g = Grouping::batch_norm(ChannelLayout::Ncl, &[2, 2, 2]).unwrap();
        assert_eq!(g.groups(), &[vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        assert_eq!(
            Grouping::group_norm(ChannelLayout::Nc, &[2, 6], 4).unwrap_err(),
            SpecError::BadParam {
                field: "groups",
                reason: "must be a positive divisor of the channel count C",
                value: "4 (C = 6)".into()
            }
        );
        assert!(Grouping::last(&[4], 1).is_err());
        assert!(Grouping::last(&[2, 4], 0).is_err());
        assert!(Grouping::last(&[2, 0, 4], 1).is_err());
        assert!(Grouping::new(vec![vec![0], vec![0]], vec![0], 1).is_err());
        assert!(Grouping::new(vec![vec![0]], vec![0, 0], 1).is_err());
        assert!(Grouping::new(vec![vec![1], vec![0]], vec![0, 1], 1).is_err());
        assert!(Grouping::new(vec![vec![1], vec![0]], vec![0, 0], 1).is_ok());
    }
}
