//! The one grouping helper every family kernel uses: which flat cells of `x` form each group
//! (a row of layer_norm/rms_norm, a (sample, group) of group_norm) in the order a kernel
//! reduces them, and which parameter (`gamma`/`beta` index) each cell uses. Known-bad kernels
//! build their wrong groupings through the same helper ([`Grouping::channels_with`],
//! [`Grouping::with_params_of`]). Index arithmetic only: no values.

use super::error::FamilyError;
use super::vocab::FamilyLayout;

/// Which cells form each group, and which parameter each cell uses. Every cell lies in
/// exactly one group; every group has at least one cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Each group's cells, in reduction order.
    members: Vec<Vec<usize>>,
    /// The parameter of each cell.
    param_of: Vec<usize>,
    /// How many parameters there are.
    params: usize,
}

/// The element count of `shape` after checking that no extent is 0 and that it fits `usize`.
fn cell_count(shape: &[usize]) -> Result<usize, FamilyError> {
    if let Some(i) = shape.iter().position(|&d| d == 0) {
        return Err(FamilyError::new(
            "shape",
            format!("{shape:?}: dimension {i} is 0 (every group needs a cell)"),
        ));
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| FamilyError::new("shape", format!("{shape:?}: element count overflows")))
}

/// `(N, C, S)` of a channel layout: batch, channels, spatial cells per (sample, channel).
pub fn channel_dims(
    layout: FamilyLayout,
    shape: &[usize],
) -> Result<(usize, usize, usize), FamilyError> {
    let Some(rank) = layout.rank() else {
        return Err(FamilyError::new(
            "layout",
            "`last` is not a channel layout (group_norm takes nchw, nhwc, nc, ncl, ncdhw, ndhwc)",
        ));
    };
    if shape.len() != rank {
        return Err(FamilyError::new(
            "shape",
            format!(
                "layout `{layout}` needs {rank} dimensions, got {} ({shape:?})",
                shape.len()
            ),
        ));
    }
    let n = cell_count(shape)?;
    let c = shape[if layout.channels_last() { rank - 1 } else { 1 }];
    Ok((shape[0], c, n / (shape[0] * c)))
}

/// Flat offset of spatial cell `s` of channel `c` of sample `n` on a channel layout.
pub fn channel_offset(
    channels_last: bool,
    (_, c_count, s_count): (usize, usize, usize),
    n: usize,
    c: usize,
    s: usize,
) -> usize {
    if channels_last {
        (n * s_count + s) * c_count + c
    } else {
        (n * c_count + c) * s_count + s
    }
}

/// `(cells, K)` of layout `last` after checking `normalized_ndim` (1..=3, at least one batch
/// axis) and the shape, without allocating anything.
pub fn last_counts(shape: &[usize], normalized_ndim: usize) -> Result<(usize, usize), FamilyError> {
    if !(1..=3).contains(&normalized_ndim) {
        return Err(FamilyError::new(
            "normalized_ndim",
            format!("{normalized_ndim} is not 1, 2 or 3"),
        ));
    }
    if shape.len() <= normalized_ndim {
        return Err(FamilyError::new(
            "normalized_ndim",
            format!(
                "{normalized_ndim} leaves no batch axis in shape {shape:?} (needs at least {} dimensions)",
                normalized_ndim + 1
            ),
        ));
    }
    let n = cell_count(shape)?;
    Ok((n, shape[shape.len() - normalized_ndim..].iter().product()))
}

/// [`channel_dims`] after also checking that `groups` divides C, without allocating anything.
pub fn group_dims(
    layout: FamilyLayout,
    shape: &[usize],
    groups: usize,
) -> Result<(usize, usize, usize), FamilyError> {
    let dims = channel_dims(layout, shape)?;
    let c = dims.1;
    if groups == 0 || c % groups != 0 {
        return Err(FamilyError::new(
            "groups",
            format!("{groups} does not divide the channel count C = {c}"),
        ));
    }
    Ok(dims)
}

impl Grouping {
    /// Layout `last`: `shape = [*batch, *normalized]` with the trailing `normalized_ndim` axes
    /// normalized (1..=3, at least one batch axis). Row `r` is cells `r·K … r·K + K − 1`;
    /// cell `i` uses parameter `i mod K`.
    pub fn last(shape: &[usize], normalized_ndim: usize) -> Result<Self, FamilyError> {
        let (n, k) = last_counts(shape, normalized_ndim)?;
        Ok(Grouping {
            members: (0..n / k).map(|r| (r * k..(r + 1) * k).collect()).collect(),
            param_of: (0..n).map(|i| i % k).collect(),
            params: k,
        })
    }

    /// group_norm on a channel layout with `groups = G` (G divides C): group `n·G + g` holds
    /// channels `g·C/G … (g+1)·C/G − 1` of sample n, channel by channel, each channel's cells
    /// in spatial order; a cell uses the parameter of its channel.
    pub fn channels(
        layout: FamilyLayout,
        shape: &[usize],
        groups: usize,
    ) -> Result<Self, FamilyError> {
        let dims = group_dims(layout, shape, groups)?;
        let per = dims.1 / groups;
        let last = layout.channels_last();
        Ok(Self::channels_with(
            dims,
            groups,
            |ch| ch / per,
            |n, ch, s| channel_offset(last, dims, n, ch, s),
        ))
    }

    /// A channel grouping from its two maps: `group_of(c)` (< `groups`) is the group of
    /// channel c within a sample, `offset(n, c, s)` the flat cell of (sample, channel,
    /// spatial cell); groups list their channels in order. Correct kernels use the maps of
    /// [`Grouping::channels`]; a known-bad kernel passes its defective ones.
    pub(crate) fn channels_with(
        dims: (usize, usize, usize),
        groups: usize,
        group_of: impl Fn(usize) -> usize,
        offset: impl Fn(usize, usize, usize) -> usize,
    ) -> Self {
        let (n, c, s) = dims;
        let mut out = vec![Vec::new(); n * groups];
        let mut param = vec![0; n * c * s];
        for b in 0..n {
            for ch in 0..c {
                let g = &mut out[b * groups + group_of(ch)];
                for sp in 0..s {
                    let i = offset(b, ch, sp);
                    g.push(i);
                    param[i] = ch;
                }
            }
        }
        Grouping {
            members: out,
            param_of: param,
            params: c,
        }
    }

    /// The same groups with `other`'s parameter indices (same cell count).
    pub(crate) fn with_params_of(self, other: &Grouping) -> Self {
        debug_assert_eq!(self.param_of.len(), other.param_of.len());
        Grouping {
            members: self.members,
            param_of: other.param_of.clone(),
            params: other.params,
        }
    }

    /// Every group as the flat offsets of its cells, in the order a kernel reduces them.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.members
    }
    /// `param_of()[i]`: the `gamma`/`beta` index cell `i` uses.
    pub fn param_of(&self) -> &[usize] {
        &self.param_of
    }
    /// How many parameters (`gamma`, `beta`, `dgamma`, `dbeta` each have one per).
    pub fn n_params(&self) -> usize {
        self.params
    }
    /// How many cells `x` has.
    pub fn len(&self) -> usize {
        self.param_of.len()
    }
    /// Whether there is no cell (never, for a valid case).
    pub fn is_empty(&self) -> bool {
        self.param_of.is_empty()
    }
    /// The cells using each parameter, group by group (the order `dgamma`, `dbeta` sum in).
    pub fn cells_of_params(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.params];
        for cells in &self.members {
            for &i in cells {
                out[self.param_of[i]].push(i);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_channel_groups_by_hand() {
        // [3, 2], one normalized axis: three rows of two; parameter = position in the row.
        let g = Grouping::last(&[3, 2], 1).unwrap();
        assert_eq!(g.cells_of_params(), [vec![0, 2, 4], vec![1, 3, 5]]);
        assert_eq!(g.param_of(), &[0, 1, 0, 1, 0, 1]);
        assert_eq!(g.groups(), &[vec![0, 1], vec![2, 3], vec![4, 5]]);
        let g = Grouping::last(&[2, 2, 2], 2).unwrap();
        assert_eq!(g.groups(), &[vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(g.n_params(), 4);
        // nhwc [1, 1, 2, 4], G = 2: channels {0,1} and {2,3}; cell (s, c) at s·4 + c.
        let g = Grouping::channels(FamilyLayout::Nhwc, &[1, 1, 2, 4], 2).unwrap();
        assert_eq!(g.groups(), &[vec![0, 4, 1, 5], vec![2, 6, 3, 7]]);
        assert_eq!(g.param_of(), &[0, 1, 2, 3, 0, 1, 2, 3]);
        // nchw [2, 2, 1, 1], G = 1: one group per sample.
        let g = Grouping::channels(FamilyLayout::Nchw, &[2, 2, 1, 1], 1).unwrap();
        assert_eq!(g.groups(), &[vec![0, 1], vec![2, 3]]);
        // ndhwc [1, 2, 1, 1, 3], G = 3 (InstanceNorm): channel c at s·3 + c.
        let g = Grouping::channels(FamilyLayout::Ndhwc, &[1, 2, 1, 1, 3], 3).unwrap();
        assert_eq!(g.groups(), &[vec![0, 3], vec![1, 4], vec![2, 5]]);
    }

    #[test]
    fn bad_shapes_name_the_field() {
        let field = |r: Result<Grouping, FamilyError>| r.unwrap_err().field;
        assert_eq!(field(Grouping::last(&[4], 1)), "normalized_ndim");
        assert_eq!(field(Grouping::last(&[2, 4], 0)), "normalized_ndim");
        assert_eq!(
            field(Grouping::last(&[2, 4, 4, 4, 4], 4)),
            "normalized_ndim"
        );
        assert_eq!(field(Grouping::last(&[2, 0, 4], 1)), "shape");
        assert_eq!(field(Grouping::last(&[usize::MAX, 2, 4], 1)), "shape");
        assert_eq!(
            field(Grouping::channels(FamilyLayout::Nc, &[2, 6], 4)),
            "groups"
        );
        assert_eq!(
            field(Grouping::channels(FamilyLayout::Nc, &[2, 6], 0)),
            "groups"
        );
        assert_eq!(
            field(Grouping::channels(FamilyLayout::Nchw, &[2, 6], 1)),
            "shape"
        );
        assert_eq!(
            field(Grouping::channels(FamilyLayout::Last, &[2, 6], 1)),
            "layout"
        );
    }
}
