//! Layouts and the layout bridges of the seed (S7–S10, S17, S21–S24), plus channels-last.
//!
//! Every layout op is "bridge ∘ flat op ∘ bridge⁻¹": the bridge is a gather from the layout
//! into the per-channel matrix view `[C, m]` (row c holds channel c's m cells), and its
//! inverse the scatter back. Bridges are index bijections: no arithmetic.

use crate::error::SpecError;

/// Where the cells of each channel live (FORMAT.md, "Ops and layouts").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// `[C, m]`, matrix view: row c is channel c (seed: Mat-split / per-row).
    Rows,
    /// `[C, m]` as a flat `C·m` vector, channel c at `c*m + s` (seed: flat Vec (oc·m)).
    Flat,
    /// `[C, H, W]`, one example (seed: Tensor3 `(oc*h)*w`).
    Chw,
    /// `[N, C, H, W]`, statistics over the whole batch (seed: `[N,C,H,W]` batch BN).
    Nchw,
    /// `[N, H, W, C]`, channels-last (not in the seed).
    Nhwc,
    /// `[N, C]`, BatchNorm1d on 2-D input: statistics over N (one cell per sample; as
    /// [`Layout::Nchw`] with `H·W = 1`).
    Nc,
    /// `[N, C, L]`, BatchNorm1d on 3-D input (as [`Layout::Nchw`] with `H·W = L`).
    Ncl,
    /// `[N, C, D, H, W]`, BatchNorm3d (as [`Layout::Nchw`] with `H·W = D·H·W`).
    Ncdhw,
    /// `[N, D, H, W, C]`, channels-last BatchNorm3d (as [`Layout::Nhwc`] with `H·W = D·H·W`).
    Ndhwc,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 9] = [
        Layout::Rows,
        Layout::Flat,
        Layout::Chw,
        Layout::Nchw,
        Layout::Nhwc,
        Layout::Nc,
        Layout::Ncl,
        Layout::Ncdhw,
        Layout::Ndhwc,
    ];

    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Rows => "rows",
            Layout::Flat => "flat",
            Layout::Chw => "chw",
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
            Layout::Nc => "nc",
            Layout::Ncl => "ncl",
            Layout::Ncdhw => "ncdhw",
            Layout::Ndhwc => "ndhwc",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == s)
    }
    /// Number of dimensions of the layout's shape.
    pub fn rank(self) -> usize {
        match self {
            Layout::Rows | Layout::Flat | Layout::Nc => 2,
            Layout::Chw | Layout::Ncl => 3,
            Layout::Nchw | Layout::Nhwc => 4,
            Layout::Ncdhw | Layout::Ndhwc => 5,
        }
    }
    /// Whether the layout has a batch axis first and the channel axis last (`nhwc`, `ndhwc`):
    /// the bridge of [`Geometry::offset`] is then the channels-last one.
    pub fn channels_last(self) -> bool {
        matches!(self, Layout::Nhwc | Layout::Ndhwc)
    }
    /// `(C, m, n)` for a shape in this layout: the channel count, the cells per channel and
    /// the element count, from the shape alone (nothing is allocated, so a hostile shape such
    /// as `[1e6, 1e6, 1, 1]` costs nothing). Unlike [`Geometry::new`] it sets no element
    /// limit; the error is the reason alone: a wrong rank, an element count that overflows,
    /// no channels, or an empty channel (`m == 0`).
    pub fn channel_dims(self, shape: &[usize]) -> Result<(usize, usize, usize), String> {
        let rank = self.rank();
        if shape.len() != rank {
            return Err(format!(
                "layout `{}` needs a shape of rank {rank}, got {shape:?}",
                self.name()
            ));
        }
        let n = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| format!("shape {shape:?}: element count overflows"))?;
        let c = match self {
            Layout::Rows | Layout::Flat | Layout::Chw => shape[0],
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => shape[1],
            Layout::Nhwc => shape[3],
            Layout::Ndhwc => shape[4],
        };
        if c == 0 {
            return Err(format!("shape {shape:?} has no channels"));
        }
        let m = n / c;
        if m == 0 {
            return Err(format!("shape {shape:?}: every channel is empty"));
        }
        Ok((c, m, n))
    }
}

/// A validated shape: `c` channels of `m` cells each, `len = c*m` elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The layout.
    pub layout: Layout,
    /// The shape as given.
    pub shape: Vec<usize>,
    /// Channels C.
    pub c: usize,
    /// Cells per channel m.
    pub m: usize,
    /// Batch N (1 for layouts without a batch axis).
    pub n: usize,
    /// Spatial cells per example and channel (H·W; L for ncl, D·H·W for ncdhw/ndhwc, 1 for
    /// nc, or m for rows/flat).
    pub hw: usize,
}

impl Geometry {
    /// Check a shape against a layout (C3): right rank, no zero extent, no overflow, at most
    /// `max_elems` elements. Nothing is allocated before this succeeds.
    ///
    /// ```
    /// # use bnconf_spec::{Geometry, Layout};
    /// let g = Geometry::new(Layout::Ncdhw, &[2, 3, 2, 2, 3], 1 << 10).unwrap();
    /// assert_eq!((g.n, g.c, g.hw, g.m), (2, 3, 12, 24));
    /// let g = Geometry::new(Layout::Nc, &[6, 3], 1 << 10).unwrap();
    /// assert_eq!((g.n, g.c, g.hw, g.m), (6, 3, 1, 6));
    /// assert!(Geometry::new(Layout::Ndhwc, &[2, 2, 2, 3], 1 << 10).is_err()); // rank 4, not 5
    /// ```
    pub fn new(layout: Layout, shape: &[usize], max_elems: usize) -> Result<Geometry, SpecError> {
        let bad = |reason: String| SpecError::Shape { reason };
        if shape.len() != layout.rank() {
            return Err(bad(format!(
                "layout `{}` needs {} dimensions, got {}",
                layout.name(),
                layout.rank(),
                shape.len()
            )));
        }
        if let Some(i) = shape.iter().position(|&d| d == 0) {
            return Err(bad(format!(
                "dimension {i} is 0: every channel needs at least one cell"
            )));
        }
        let mut len: usize = 1;
        for &d in shape {
            len = len
                .checked_mul(d)
                .filter(|&l| l <= max_elems)
                .ok_or_else(|| bad(format!("{shape:?} has more than {max_elems} elements")))?;
        }
        let (c, n, hw) = match layout {
            Layout::Rows | Layout::Flat => (shape[0], 1, shape[1]),
            Layout::Chw => (shape[0], 1, shape[1] * shape[2]),
            Layout::Nchw => (shape[1], shape[0], shape[2] * shape[3]),
            Layout::Nhwc => (shape[3], shape[0], shape[1] * shape[2]),
            Layout::Nc => (shape[1], shape[0], 1),
            Layout::Ncl => (shape[1], shape[0], shape[2]),
            Layout::Ncdhw => (shape[1], shape[0], shape[2] * shape[3] * shape[4]),
            Layout::Ndhwc => (shape[4], shape[0], shape[1] * shape[2] * shape[3]),
        };
        Ok(Geometry {
            layout,
            shape: shape.to_vec(),
            c,
            m: n * hw,
            n,
            hw,
        })
    }

    /// Number of elements `C·m`.
    pub fn len(&self) -> usize {
        self.c * self.m
    }
    /// Never true: shapes have no zero extent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset in the layout of cell `k` (0 ≤ k < m) of channel `c`: the gather index of the
    /// bridge into the matrix view at Mat position `(c, k)`, `k = n·hw + s`. The channels-first
    /// batch layouts (`nc`, `ncl`, `ncdhw`) use S21 as `nchw` does (their spatial axes
    /// flattened into `hw`), `ndhwc` the channels-last bridge of `nhwc`.
    ///
    /// ```
    /// # use bnconf_spec::{Geometry, Layout};
    /// // ncl [2, 3, 5]: cell k = n·5 + l of channel c sits at (n·3 + c)·5 + l.
    /// let g = Geometry::new(Layout::Ncl, &[2, 3, 5], 1 << 10).unwrap();
    /// assert_eq!(g.offset(1, 7), (1 * 3 + 1) * 5 + 2);
    /// // ndhwc [2, 2, 2, 3, 3]: cell k = n·12 + s of channel c sits at (n·12 + s)·3 + c.
    /// let g = Geometry::new(Layout::Ndhwc, &[2, 2, 2, 3, 3], 1 << 10).unwrap();
    /// assert_eq!(g.offset(2, 13), 13 * 3 + 2);
    /// ```
    pub fn offset(&self, c: usize, k: usize) -> usize {
        match self.layout {
            Layout::Rows | Layout::Flat => c * self.m + k,
            Layout::Chw => reassoc_fwd(self.hw, c * self.hw + k),
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                bnchw_transpose_fwd(self.c, self.n, self.hw, c * self.m + k)
            }
            Layout::Nhwc | Layout::Ndhwc => {
                let (n, s) = (k / self.hw, k % self.hw);
                (n * self.hw + s) * self.c + c
            }
        }
    }

    /// The layout offsets of channel `c`'s cells in matrix-view order: `offset(c, k)` for
    /// `k = 0..m`, stepped through the layout's runs (`m` cells for rows, flat and chw; `hw`
    /// per example for the channels-first batch layouts, `C·hw` apart; single cells `C` apart
    /// channels-last) without a division per cell.
    ///
    /// ```
    /// # use bnconf_spec::{Geometry, Layout};
    /// let g = Geometry::new(Layout::Nchw, &[2, 3, 2, 1], 1 << 10).unwrap();
    /// assert_eq!(g.channel_offsets(1).collect::<Vec<_>>(), [2, 3, 8, 9]);
    /// let g = Geometry::new(Layout::Nhwc, &[2, 1, 2, 3], 1 << 10).unwrap();
    /// assert_eq!(g.channel_offsets(2).collect::<Vec<_>>(), [2, 5, 8, 11]);
    /// ```
    pub fn channel_offsets(&self, c: usize) -> ChannelOffsets {
        let (start, run, step) = self.channel_runs(c);
        ChannelOffsets {
            next: start,
            left_in_run: run,
            run,
            jump: step - run + 1,
            remaining: self.m,
        }
    }

    /// Channel `c`'s cells as runs: `(start, run, step)` with cell `k` at
    /// `start + (k / run)·step + k % run` (what [`Geometry::channel_offsets`] steps through).
    ///
    /// ```
    /// # use bnconf_spec::{Geometry, Layout};
    /// let g = Geometry::new(Layout::Nchw, &[2, 3, 2, 1], 1 << 10).unwrap();
    /// let (start, run, step) = g.channel_runs(1);
    /// let at = |k: usize| start + (k / run) * step + k % run;
    /// assert_eq!((0..g.m).map(at).collect::<Vec<_>>(), g.channel_offsets(1).collect::<Vec<_>>());
    /// ```
    pub fn channel_runs(&self, c: usize) -> (usize, usize, usize) {
        match self.layout {
            Layout::Rows | Layout::Flat | Layout::Chw => (c * self.m, self.m, self.m),
            Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
                (c * self.hw, self.hw, self.c * self.hw)
            }
            Layout::Nhwc | Layout::Ndhwc => (c, 1, self.c),
        }
    }

    /// The bridge as a permutation: `perm[c*m + k]` = layout offset of Mat position `(c, k)`.
    pub fn to_mat_perm(&self) -> Vec<usize> {
        let mut p = Vec::with_capacity(self.len());
        for c in 0..self.c {
            for k in 0..self.m {
                p.push(self.offset(c, k));
            }
        }
        p
    }

    /// Gather: layout data → matrix view `[C, m]` (row-major). S9 / S23 and channels-last.
    pub fn to_mat<T: Clone>(&self, data: &[T]) -> Vec<T> {
        gather(&self.to_mat_perm(), data)
    }
    /// Scatter: matrix view → layout (the inverse relabelling). S10 / S24.
    pub fn from_mat<T: Clone>(&self, mat: &[T]) -> Vec<T> {
        relabel_back(&self.to_mat_perm(), mat)
    }
}

/// Gather `out[i] = data[perm[i]]` — a reindex (seed: `reindexCLM`).
pub fn gather<T: Clone>(perm: &[usize], data: &[T]) -> Vec<T> {
    perm.iter().map(|&j| data[j].clone()).collect()
}

/// Inverse relabelling of a bijective gather: `out[perm[i]] = mat[i]`.
pub fn relabel_back<T: Clone>(perm: &[usize], mat: &[T]) -> Vec<T> {
    let mut out: Vec<Option<T>> = vec![None; mat.len()];
    for (i, &j) in perm.iter().enumerate() {
        out[j] = Some(mat[i].clone());
    }
    out.into_iter()
        .map(|v| v.expect("bridge is a bijection"))
        .collect()
}

/// **S17** — VJP of the forward reindex (gather) is the scatter-add of the cotangent:
/// `out[perm[i]] += dy[i]`, over an output of length `n_in` (`pdiv_reindex`).
pub fn reindex_vjp<T: Clone + std::ops::Add<Output = T>>(
    perm: &[usize],
    dy: &[T],
    n_in: usize,
    zero: T,
) -> Vec<T> {
    let mut out = vec![zero; n_in];
    for (i, &j) in perm.iter().enumerate() {
        out[j] = out[j].clone() + dy[i].clone();
    }
    out
}

/// The offsets of one channel's cells ([`Geometry::channel_offsets`]).
#[derive(Clone, Debug)]
pub struct ChannelOffsets {
    next: usize,
    left_in_run: usize,
    run: usize,
    /// From the last cell of a run to the first of the next.
    jump: usize,
    remaining: usize,
}

impl Iterator for ChannelOffsets {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let at = self.next;
        self.left_in_run -= 1;
        if self.left_in_run == 0 {
            self.left_in_run = self.run;
            self.next += self.jump;
        } else {
            self.next += 1;
        }
        Some(at)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for ChannelOffsets {}

/// **S7** — reassoc index `Fin(oc·(h·w)) → Fin((oc·h)·w)`: the Mat-split flat index
/// `c·(h·w) + (hi·w + wi)` ↦ the Tensor3 flat index `(c·h + hi)·w + wi`. Both are the same
/// number: a pure product re-association, the identity on flat offsets.
pub fn reassoc_fwd(hw: usize, i: usize) -> usize {
    let (c, s) = (i / hw, i % hw);
    c * hw + s
}

/// **S8** — the inverse re-association `((c,hi),wi) ↦ (c,(hi,wi))` on flat offsets.
pub fn reassoc_back(hw: usize, i: usize) -> usize {
    reassoc_fwd(hw, i)
}

/// **S9** — Tensor3 → Mat-split reindex: the Mat position `(c,(hi,wi))` reads the
/// `((c,hi),wi)` cell.
pub fn tensor3_to_mat<T: Clone>(oc: usize, h: usize, w: usize, t: &[T]) -> Vec<T> {
    let perm: Vec<usize> = (0..oc * h * w).map(|i| reassoc_fwd(h * w, i)).collect();
    gather(&perm, t)
}

/// **S10** — Mat-split → Tensor3 reindex (the inverse relabelling).
pub fn mat_to_tensor3<T: Clone>(oc: usize, h: usize, w: usize, m: &[T]) -> Vec<T> {
    let perm: Vec<usize> = (0..oc * h * w).map(|i| reassoc_back(h * w, i)).collect();
    relabel_back(&perm, m)
}

/// **S21** — transpose index `Fin(oc·(N·hw)) → Fin(N·(oc·hw))`: the per-channel Mat index
/// `(c,(n,s))` ↦ the network `[N,C,H,W]` index `(n,(c,s))`. A permutation.
pub fn bnchw_transpose_fwd(oc: usize, n: usize, hw: usize, i: usize) -> usize {
    let (c, rest) = (i / (n * hw), i % (n * hw));
    let (b, s) = (rest / hw, rest % hw);
    (b * oc + c) * hw + s
}

/// **S22** — the inverse transpose index `(n,(c,s)) ↦ (c,(n,s))`.
pub fn bnchw_transpose_back(oc: usize, n: usize, hw: usize, i: usize) -> usize {
    let (b, rest) = (i / (oc * hw), i % (oc * hw));
    let (c, s) = (rest / hw, rest % hw);
    (c * n + b) * hw + s
}

/// **S23** — `[N,C,H,W] → [C, N·H·W]` reindex (gather the network cell at the Mat position).
pub fn bnchw_fwd<T: Clone>(n: usize, oc: usize, hw: usize, x: &[T]) -> Vec<T> {
    let perm: Vec<usize> = (0..oc * n * hw)
        .map(|i| bnchw_transpose_fwd(oc, n, hw, i))
        .collect();
    gather(&perm, x)
}

/// **S24** — `[C, N·H·W] → [N,C,H,W]` reindex (the inverse relabelling).
pub fn bnchw_back<T: Clone>(n: usize, oc: usize, hw: usize, m: &[T]) -> Vec<T> {
    let perm: Vec<usize> = (0..oc * n * hw)
        .map(|i| bnchw_transpose_back(oc, n, hw, i))
        .collect();
    gather(&perm, m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `channel_offsets(c)` is `offset(c, k)` for `k = 0..m`, in every layout, for shapes with
    /// extents of 1 and more.
    #[test]
    fn channel_offsets_are_the_offsets_of_the_channels_cells() {
        let shapes: [(Layout, &[usize]); 13] = [
            (Layout::Rows, &[3, 5]),
            (Layout::Flat, &[2, 7]),
            (Layout::Chw, &[3, 2, 4]),
            (Layout::Nchw, &[2, 3, 4, 5]),
            (Layout::Nchw, &[1, 4, 1, 1]),
            (Layout::Nchw, &[3, 1, 2, 1]),
            (Layout::Nhwc, &[2, 4, 5, 3]),
            (Layout::Nhwc, &[1, 1, 1, 4]),
            (Layout::Nc, &[6, 3]),
            (Layout::Ncl, &[2, 3, 5]),
            (Layout::Ncdhw, &[2, 3, 2, 2, 3]),
            (Layout::Ndhwc, &[2, 2, 2, 3, 3]),
            (Layout::Ndhwc, &[1, 1, 1, 1, 1]),
        ];
        for (layout, shape) in shapes {
            let g = Geometry::new(layout, shape, 1 << 20).unwrap();
            let mut all = vec![];
            for c in 0..g.c {
                let it = g.channel_offsets(c);
                assert_eq!(it.len(), g.m);
                let got: Vec<usize> = it.collect();
                let want: Vec<usize> = (0..g.m).map(|k| g.offset(c, k)).collect();
                assert_eq!(got, want, "{layout:?} {shape:?} channel {c}");
                all.extend(got);
            }
            all.sort_unstable();
            assert_eq!(
                all,
                (0..g.len()).collect::<Vec<_>>(),
                "{layout:?} {shape:?}"
            );
        }
    }

    #[test]
    fn channel_dims_agree_with_geometry_and_name_the_fault() {
        let shapes: [(Layout, &[usize]); 9] = [
            (Layout::Rows, &[3, 5]),
            (Layout::Flat, &[2, 7]),
            (Layout::Chw, &[3, 2, 4]),
            (Layout::Nchw, &[2, 3, 4, 5]),
            (Layout::Nhwc, &[2, 4, 5, 3]),
            (Layout::Nc, &[6, 3]),
            (Layout::Ncl, &[2, 3, 5]),
            (Layout::Ncdhw, &[2, 3, 2, 2, 3]),
            (Layout::Ndhwc, &[2, 2, 2, 3, 3]),
        ];
        for (layout, shape) in shapes {
            let g = Geometry::new(layout, shape, 1 << 20).unwrap();
            assert_eq!(
                layout.channel_dims(shape),
                Ok((g.c, g.m, g.len())),
                "{layout:?}"
            );
        }
        assert_eq!(Layout::Nhwc.channel_dims(&[2, 4, 5, 3]), Ok((3, 40, 120)));
        assert_eq!(Layout::Nc.channel_dims(&[6, 3]), Ok((3, 6, 18)));
        assert_eq!(
            Layout::Ndhwc.channel_dims(&[2, 2, 2, 3, 3]),
            Ok((3, 24, 72))
        );
        // No element limit: a huge shape is sized, not refused.
        let huge = [1_000_000, 1_000_000, 1, 1];
        assert_eq!(
            Layout::Nchw.channel_dims(&huge),
            Ok((1_000_000, 1_000_000, 1_000_000_000_000))
        );
        let err = |l: Layout, s: &[usize]| l.channel_dims(s).unwrap_err();
        assert_eq!(
            err(Layout::Ncdhw, &[2, 3, 4, 5]),
            "layout `ncdhw` needs a shape of rank 5, got [2, 3, 4, 5]"
        );
        assert_eq!(
            err(Layout::Chw, &[3, 4]),
            "layout `chw` needs a shape of rank 3, got [3, 4]"
        );
        assert_eq!(
            err(Layout::Rows, &[usize::MAX, 2]),
            format!("shape [{}, 2]: element count overflows", usize::MAX)
        );
        assert_eq!(
            err(Layout::Nhwc, &[2, 4, 5, 0]),
            "shape [2, 4, 5, 0] has no channels"
        );
        assert_eq!(
            err(Layout::Nchw, &[0, 3, 4, 5]),
            "shape [0, 3, 4, 5]: every channel is empty"
        );
        assert_eq!(
            err(Layout::Flat, &[3, 0]),
            "shape [3, 0]: every channel is empty"
        );
    }
}
