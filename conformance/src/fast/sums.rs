//! Exact per-channel sums (step 1 of the fast path): `Σx`, `Σx²`, `Σdy`, `Σdy·x` of a
//! channel's cells in superaccumulators (f32 data through exponent buckets).

use super::acc;
use super::problem::*;
use acc::SuperAcc;
use bnconf_spec::exact::Rational;
use bnconf_spec::layout::Layout;
use bnconf_spec::Geometry;

/// The cells of channel `c`: `(start, len, stride)` runs.
pub(super) fn for_each_run(g: &Geometry, c: usize, mut f: impl FnMut(usize, usize, usize)) {
    match g.layout {
        Layout::Rows | Layout::Flat | Layout::Chw => f(c * g.m, g.m, 1),
        Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => {
            for n in 0..g.n {
                f((n * g.c + c) * g.hw, g.hw, 1)
            }
        }
        Layout::Nhwc | Layout::Ndhwc => f(c, g.m, g.c),
    }
}

#[derive(Default)]
pub(super) struct Sums {
    pub(super) s1: Rational,
    pub(super) s2: Rational,
    pub(super) sd: Rational,
    pub(super) sdx: Rational,
}

pub(super) fn channel_sums<T: Cell>(
    g: &Geometry,
    c: usize,
    x: &[T],
    dy: Option<&[T]>,
    want_x: bool,
) -> Sums {
    let (mut s1, mut s2, mut sd, mut sdx) = (
        SuperAcc::new(),
        SuperAcc::new(),
        SuperAcc::new(),
        SuperAcc::new(),
    );
    const PIECE: usize = 1 << 20;
    if T::IS_F32 {
        // Integer sums per exponent; runs are cut at PIECE values between flushes.
        let mut b = acc::F32Buckets::new();
        let mut held = 0usize;
        for_each_run(g, c, |start, len, stride| {
            for k0 in (0..len).step_by(PIECE) {
                let k1 = (k0 + PIECE).min(len);
                if held + (k1 - k0) > acc::F32_BUCKET_PIECE {
                    b.flush(&mut s1, &mut s2, &mut sd, &mut sdx);
                    held = 0;
                }
                held += k1 - k0;
                let idx = (k0..k1).map(|k| start + k * stride);
                match (want_x, dy) {
                    (true, None) => idx.for_each(|i| b.add_x(x[i].f32_bits())),
                    (true, Some(d)) => idx.for_each(|i| {
                        b.add_x(x[i].f32_bits());
                        b.add_dx(d[i].f32_bits(), x[i].f32_bits());
                    }),
                    (false, Some(d)) => {
                        idx.for_each(|i| b.add_dx(d[i].f32_bits(), x[i].f32_bits()))
                    }
                    (false, None) => {}
                }
            }
        });
        b.flush(&mut s1, &mut s2, &mut sd, &mut sdx);
    } else {
        for_each_run(g, c, |start, len, stride| {
            for k0 in (0..len).step_by(PIECE) {
                let k1 = (k0 + PIECE).min(len);
                let n = (k1 - k0) as u32;
                if want_x {
                    s1.reserve(n);
                    s2.reserve(n);
                }
                if dy.is_some() {
                    sd.reserve(n);
                    sdx.reserve(n);
                }
                for k in k0..k1 {
                    let i = start + k * stride;
                    let xv = x[i].to_f64();
                    if want_x {
                        s1.add_reserved(xv);
                        s2.add_product_reserved(xv, xv);
                    }
                    if let Some(d) = dy {
                        let dv = d[i].to_f64();
                        sd.add_reserved(dv);
                        sdx.add_product_reserved(dv, xv);
                    }
                }
            }
        });
    }
    Sums {
        s1: s1.to_rational(),
        s2: s2.to_rational(),
        sd: sd.to_rational(),
        sdx: sdx.to_rational(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f32 exponent buckets give the superaccumulator's sums on channels of more than
    /// 2^20 values (so the buckets are flushed mid-channel, between runs and inside a run),
    /// with negative, subnormal, huge and zero values.
    #[test]
    fn f32_bucket_sums_equal_the_superaccumulator() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for shape in [vec![1, 1 << 20 | 3], vec![300, 2, 60, 60]] {
            let layout = if shape.len() == 2 {
                Layout::Rows
            } else {
                Layout::Nchw
            };
            let g = Geometry::new(layout, &shape, 1 << 24).unwrap();
            let mut val = || {
                let r = next();
                match r % 8 {
                    0 => f32::from_bits((r >> 8) as u32 & 0x807f_ffff), // subnormal or zero
                    1 => f32::from_bits(((r >> 8) as u32 & 0x80ff_ffff) | 0x7e00_0000), // huge
                    _ => f32::from_bits((r >> 8) as u32 & 0x8fff_ffff | 0x3000_0000),
                }
            };
            let x: Vec<f32> = (0..g.len()).map(|_| val()).collect();
            let d: Vec<f32> = (0..g.len()).map(|_| val()).collect();
            let (x64, d64): (Vec<f64>, Vec<f64>) = x
                .iter()
                .zip(&d)
                .map(|(&a, &b)| (a as f64, b as f64))
                .unzip();
            for c in 0..g.c {
                for (want_x, dy) in [(true, None), (true, Some(&d[..])), (false, Some(&d[..]))] {
                    let a = channel_sums::<f32>(&g, c, &x, dy, want_x);
                    let d64 = dy.map(|_| &d64[..]);
                    let b = channel_sums::<f64>(&g, c, &x64, d64, want_x);
                    assert_eq!((a.s1, a.s2), (b.s1, b.s2), "{shape:?} channel {c}");
                    assert_eq!((a.sd, a.sdx), (b.sd, b.sdx), "{shape:?} channel {c}");
                }
            }
        }
    }
}
