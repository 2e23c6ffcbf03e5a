//! Which flat (row-major) positions belong to which channel, per layout.

use crate::Layout;

/// Number of elements of `shape`, or an error on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize, String> {
    shape.iter().try_fold(1usize, |n, &d| {
        n.checked_mul(d)
            .ok_or_else(|| format!("shape {shape:?}: element count overflows"))
    })
}

/// Number of axes of a layout's shape.
fn rank(layout: Layout) -> usize {
    match layout {
        Layout::Rows | Layout::Flat | Layout::Nc => 2,
        Layout::Chw | Layout::Ncl => 3,
        Layout::Nchw | Layout::Nhwc => 4,
        Layout::Ncdhw | Layout::Ndhwc => 5,
    }
}

/// `(C, m, n)` for a layout and shape: the channel count, the cells per channel and the
/// element count, computed from the shape alone (nothing is allocated, so a hostile shape
/// such as `[1e6, 1e6, 1, 1]` costs nothing). Same errors as [`channel_cells`].
pub fn channel_dims(layout: Layout, shape: &[usize]) -> Result<(usize, usize, usize), String> {
    let rank = rank(layout);
    if shape.len() != rank {
        return Err(format!(
            "layout `{}` needs a shape of rank {rank}, got {shape:?}",
            layout.name()
        ));
    }
    let n = element_count(shape)?;
    let c = match layout {
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

/// `(C, m, cells)` for a layout and shape: the channel count, the cells per channel, and for
/// each channel the flat row-major indices of its cells, in row-major order.
///
/// | layout | shape | cells of channel `c` |
/// |---|---|---|
/// | `rows`, `flat` | `[C, m]` | `c*m + s` |
/// | `chw` | `[C, H, W]` | `(c*H + h)*W + w` |
/// | `nchw` | `[N, C, H, W]` | `((n*C + c)*H + h)*W + w` for all n, h, w |
/// | `nhwc` | `[N, H, W, C]` | `((n*H + h)*W + w)*C + c` for all n, h, w |
/// | `nc` | `[N, C]` | `n*C + c` for all n |
/// | `ncl` | `[N, C, L]` | `(n*C + c)*L + l` for all n, l |
/// | `ncdhw` | `[N, C, D, H, W]` | `(((n*C + c)*D + d)*H + h)*W + w` for all n, d, h, w |
/// | `ndhwc` | `[N, D, H, W, C]` | `(((n*D + d)*H + h)*W + w)*C + c` for all n, d, h, w |
///
/// Errors: wrong rank, a shape whose element count overflows, no channels, or an empty
/// channel (`m == 0`).
pub fn channel_cells(
    layout: Layout,
    shape: &[usize],
) -> Result<(usize, usize, Vec<Vec<usize>>), String> {
    let rank = rank(layout);
    if shape.len() != rank {
        return Err(format!(
            "layout `{}` needs a shape of rank {rank}, got {shape:?}",
            layout.name()
        ));
    }
    channel_dims(layout, shape)?;
    // (C, outer, inner): channel c's cells are o*C*inner + c*inner + i for o < outer, i < inner.
    let (c, outer, inner) = match layout {
        Layout::Rows | Layout::Flat => (shape[0], 1, shape[1]),
        Layout::Chw => (shape[0], 1, shape[1] * shape[2]),
        Layout::Nchw => (shape[1], shape[0], shape[2] * shape[3]),
        Layout::Nhwc => (shape[3], shape[0] * shape[1] * shape[2], 1),
        Layout::Nc => (shape[1], shape[0], 1),
        Layout::Ncl => (shape[1], shape[0], shape[2]),
        Layout::Ncdhw => (shape[1], shape[0], shape[2] * shape[3] * shape[4]),
        Layout::Ndhwc => (shape[4], shape[0] * shape[1] * shape[2] * shape[3], 1),
    };
    if c == 0 {
        return Err(format!("shape {shape:?} has no channels"));
    }
    let m = outer * inner;
    if m == 0 {
        return Err(format!("shape {shape:?}: every channel is empty"));
    }
    let cells = (0..c)
        .map(|ch| {
            (0..outer)
                .flat_map(|o| {
                    let base = (o * c + ch) * inner;
                    base..base + inner
                })
                .collect()
        })
        .collect();
    Ok((c, m, cells))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_flat_chw() {
        for l in [Layout::Rows, Layout::Flat] {
            let (c, m, cells) = channel_cells(l, &[2, 3]).unwrap();
            assert_eq!((c, m), (2, 3));
            assert_eq!(cells, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        }
        let (c, m, cells) = channel_cells(Layout::Chw, &[2, 2, 2]).unwrap();
        assert_eq!((c, m), (2, 4));
        assert_eq!(cells, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    }

    #[test]
    fn nchw_and_nhwc_against_explicit_formulas() {
        let (n, c, h, w) = (2, 3, 2, 4);
        let (cc, m, cells) = channel_cells(Layout::Nchw, &[n, c, h, w]).unwrap();
        assert_eq!((cc, m), (c, n * h * w));
        for (ch, got) in cells.iter().enumerate() {
            let mut want = vec![];
            for ni in 0..n {
                for hi in 0..h {
                    for wi in 0..w {
                        want.push(((ni * c + ch) * h + hi) * w + wi);
                    }
                }
            }
            assert_eq!(got, &want);
        }
        let (cc, m, cells) = channel_cells(Layout::Nhwc, &[n, h, w, c]).unwrap();
        assert_eq!((cc, m), (c, n * h * w));
        for (ch, got) in cells.iter().enumerate() {
            let mut want = vec![];
            for ni in 0..n {
                for hi in 0..h {
                    for wi in 0..w {
                        want.push(((ni * h + hi) * w + wi) * c + ch);
                    }
                }
            }
            assert_eq!(got, &want);
        }
    }

    #[test]
    fn new_batch_layouts_against_explicit_formulas() {
        let (n, c, d, h, w) = (2, 3, 2, 2, 3);
        let (cc, m, cells) = channel_cells(Layout::Nc, &[n, c]).unwrap();
        assert_eq!((cc, m), (c, n));
        assert_eq!(cells[1], vec![1, c + 1]);
        let (cc, m, cells) = channel_cells(Layout::Ncl, &[n, c, w]).unwrap();
        assert_eq!((cc, m), (c, n * w));
        for (ch, got) in cells.iter().enumerate() {
            let want: Vec<usize> = (0..n)
                .flat_map(|ni| (0..w).map(move |l| (ni * c + ch) * w + l))
                .collect();
            assert_eq!(got, &want);
        }
        let spatial = |ni: usize| {
            (0..d).flat_map(move |di| {
                (0..h).flat_map(move |hi| (0..w).map(move |wi| (ni, di, hi, wi)))
            })
        };
        let (cc, m, cells) = channel_cells(Layout::Ncdhw, &[n, c, d, h, w]).unwrap();
        assert_eq!((cc, m), (c, n * d * h * w));
        for (ch, got) in cells.iter().enumerate() {
            let want: Vec<usize> = (0..n)
                .flat_map(spatial)
                .map(|(ni, di, hi, wi)| (((ni * c + ch) * d + di) * h + hi) * w + wi)
                .collect();
            assert_eq!(got, &want);
        }
        let (cc, m, cells) = channel_cells(Layout::Ndhwc, &[n, d, h, w, c]).unwrap();
        assert_eq!((cc, m), (c, n * d * h * w));
        for (ch, got) in cells.iter().enumerate() {
            let want: Vec<usize> = (0..n)
                .flat_map(spatial)
                .map(|(ni, di, hi, wi)| (((ni * d + di) * h + hi) * w + wi) * c + ch)
                .collect();
            assert_eq!(got, &want);
        }
    }

    #[test]
    fn every_index_exactly_once() {
        for (l, shape) in [
            (Layout::Rows, vec![3, 5]),
            (Layout::Chw, vec![3, 1, 5]),
            (Layout::Nchw, vec![3, 2, 1, 3]),
            (Layout::Nhwc, vec![1, 3, 2, 4]),
            (Layout::Nc, vec![4, 3]),
            (Layout::Ncl, vec![2, 3, 5]),
            (Layout::Ncdhw, vec![2, 3, 2, 1, 3]),
            (Layout::Ndhwc, vec![2, 2, 1, 3, 3]),
        ] {
            let (_, _, cells) = channel_cells(l, &shape).unwrap();
            let mut all: Vec<usize> = cells.concat();
            all.sort_unstable();
            let total: usize = shape.iter().product();
            assert_eq!(all, (0..total).collect::<Vec<_>>(), "{l:?} {shape:?}");
        }
    }

    #[test]
    fn dims_agree_with_cells() {
        for (l, shape) in [
            (Layout::Rows, vec![3, 5]),
            (Layout::Flat, vec![1, 7]),
            (Layout::Chw, vec![3, 1, 5]),
            (Layout::Nchw, vec![3, 2, 1, 3]),
            (Layout::Nhwc, vec![1, 3, 2, 4]),
            (Layout::Nc, vec![4, 3]),
            (Layout::Ncdhw, vec![2, 3, 2, 1, 3]),
            (Layout::Ndhwc, vec![2, 2, 1, 3, 3]),
        ] {
            let (c, m, cells) = channel_cells(l, &shape).unwrap();
            let n: usize = shape.iter().product();
            assert_eq!(
                channel_dims(l, &shape).unwrap(),
                (c, m, n),
                "{l:?} {shape:?}"
            );
            assert_eq!(cells.len(), c);
        }
        // A shape far too large to tabulate is sized without allocating.
        assert_eq!(
            channel_dims(Layout::Nchw, &[1_000_000, 1_000_000, 1, 1]).unwrap(),
            (1_000_000, 1_000_000, 1_000_000_000_000)
        );
    }

    #[test]
    fn bad_shapes() {
        assert!(channel_dims(Layout::Nhwc, &[usize::MAX, 2, 2, 1]).is_err());
        assert!(channel_dims(Layout::Nchw, &[2, 0, 1, 1]).is_err());
        assert!(channel_dims(Layout::Nchw, &[0, 2, 1, 1]).is_err());
        assert!(channel_cells(Layout::Nchw, &[2, 3]).is_err());
        assert!(channel_cells(Layout::Rows, &[0, 3]).is_err());
        assert!(channel_cells(Layout::Rows, &[3, 0]).is_err());
        assert!(channel_cells(Layout::Nchw, &[0, 3, 2, 2]).is_err());
        assert!(channel_cells(Layout::Nhwc, &[usize::MAX, 2, 2, 1]).is_err());
        assert!(channel_cells(Layout::Ncdhw, &[2, 3, 2, 2]).is_err());
        assert!(channel_cells(Layout::Ndhwc, &[2, 2, 0, 3, 3]).is_err());
        assert!(channel_dims(Layout::Nc, &[0, 3]).is_err());
    }
}
