//! Shared by the family kernel tests: a case builder ([`Spec`]) with deterministic
//! well-scaled data, the hand-picked cases of each family, the property strategy, the exact
//! reference (`bnconf_spec::family`, correctly rounded to f64), each output's magnitude (the
//! size of the terms it is computed from) and the error measure `|got − exact| / (|exact| +
//! magnitude)` judged against a per-dtype tolerance.

#![allow(dead_code)]

use bnconf_impl::family::{channel_dims, Named};
use bnconf_impl::*;
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::exact::QSqrt;
use bnconf_spec::family as spec;
use proptest::prelude::*;

/// SplitMix64: a deterministic stream of uniform values in `[0, 1)`.
struct SplitMix(u64);

impl SplitMix {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as f64 * 2f64.powi(-64)
    }
}

/// Deterministic values in `[lo, hi)` on a grid of 1/256, rounded to `dtype`.
pub fn values(n: usize, seed: u64, lo: f64, hi: f64, dtype: Dtype) -> Vec<f64> {
    let mut rng = SplitMix(seed);
    let on_grid = |v: f64| (v * 256.0).round() / 256.0;
    (0..n)
        .map(|_| dtype.round(on_grid(lo + rng.unit() * (hi - lo))))
        .collect()
}

/// A family case to build: its fields, and how its data are drawn.
#[derive(Clone, Debug)]
pub struct Spec {
    pub op: FamilyOp,
    pub layout: FamilyLayout,
    pub shape: Vec<usize>,
    pub normalized_ndim: Option<usize>,
    pub groups: Option<usize>,
    pub dtype: Dtype,
    pub param_dtype: Dtype,
    pub affine: Affine,
    pub convention: RmsConvention,
    pub eps: f64,
    /// `x` is drawn from `[centre − spread/2, centre + spread/2)`.
    pub centre: f64,
    pub spread: f64,
    /// Every row (layout `last`) a copy of the first.
    pub repeated_rows: bool,
    /// `dy` in `[0.5, 1.5)` instead of `[-1, 1)`.
    pub positive_dy: bool,
    /// The first cell of every row (layout `last`) set to this value.
    pub first_cell: Option<f64>,
}

impl Spec {
    fn new(
        op: FamilyOp,
        layout: FamilyLayout,
        shape: &[usize],
        dtype: Dtype,
        affine: Affine,
    ) -> Spec {
        Spec {
            op,
            layout,
            shape: shape.to_vec(),
            normalized_ndim: None,
            groups: None,
            dtype,
            param_dtype: dtype,
            affine,
            convention: RmsConvention::Standard,
            eps: 1e-5,
            centre: 0.0,
            spread: 4.0,
            repeated_rows: false,
            positive_dy: false,
            first_cell: None,
        }
    }
    /// A layer_norm or rms_norm case on layout `last`.
    pub fn last(op: FamilyOp, shape: &[usize], nd: usize, dtype: Dtype, affine: Affine) -> Spec {
        Spec {
            normalized_ndim: Some(nd),
            ..Spec::new(op, FamilyLayout::Last, shape, dtype, affine)
        }
    }
    /// A group_norm case.
    pub fn channels(
        op: FamilyOp,
        layout: FamilyLayout,
        shape: &[usize],
        groups: usize,
        dtype: Dtype,
        affine: Affine,
    ) -> Spec {
        Spec {
            groups: Some(groups),
            ..Spec::new(op, layout, shape, dtype, affine)
        }
    }
    pub fn eps(self, eps: f64) -> Spec {
        Spec { eps, ..self }
    }
    pub fn centre(self, centre: f64) -> Spec {
        Spec { centre, ..self }
    }
    pub fn spread(self, spread: f64) -> Spec {
        Spec { spread, ..self }
    }
    pub fn convention(self, convention: RmsConvention) -> Spec {
        Spec { convention, ..self }
    }
    /// Parameters in f32 (mixed precision; `dtype` f16 or bf16).
    pub fn mixed(self) -> Spec {
        Spec {
            param_dtype: Dtype::F32,
            ..self
        }
    }
    pub fn repeated_rows(self) -> Spec {
        Spec {
            repeated_rows: true,
            ..self
        }
    }
    pub fn positive_dy(self) -> Spec {
        Spec {
            positive_dy: true,
            ..self
        }
    }
    pub fn first_cell(self, v: f64) -> Spec {
        Spec {
            first_cell: Some(v),
            ..self
        }
    }

    /// The number of parameters: the normalized size (`last`) or C.
    fn n_params(&self) -> usize {
        match self.normalized_ndim {
            Some(nd) => self.shape[self.shape.len() - nd..].iter().product(),
            None => channel_dims(self.layout, &self.shape).unwrap().1,
        }
    }

    /// The case, its data drawn from `seed`.
    pub fn build(&self, seed: u64) -> FamilyCase {
        let n: usize = self.shape.iter().product();
        let p = self.n_params();
        let s = seed.wrapping_mul(8);
        let half = self.spread / 2.0;
        let mut x = values(n, s + 1, self.centre - half, self.centre + half, self.dtype);
        if self.normalized_ndim.is_some() {
            for i in 0..n {
                if self.repeated_rows {
                    x[i] = x[i % p];
                }
                if let (Some(v), 0) = (self.first_cell, i % p) {
                    x[i] = self.dtype.round(v);
                }
            }
        }
        let (lo, hi) = if self.positive_dy {
            (0.5, 1.5)
        } else {
            (-1.0, 1.0)
        };
        let mut inputs = std::collections::BTreeMap::new();
        for name in self.op.inputs(self.affine) {
            let v = match name {
                "x" => x.clone(),
                "dy" => values(n, s + 2, lo, hi, self.dtype),
                "gamma" => values(p, s + 3, 0.5, 2.0, self.param_dtype),
                "beta" => values(p, s + 4, -1.0, 1.0, self.param_dtype),
                other => panic!("no input {other}"),
            };
            inputs.insert(name.to_string(), v);
        }
        FamilyCase {
            op: self.op,
            layout: self.layout,
            shape: self.shape.clone(),
            dtype: self.dtype,
            param_dtype: self.param_dtype,
            eps: self.eps,
            normalized_ndim: self.normalized_ndim,
            groups: self.groups,
            affine: self.affine,
            convention: self.convention,
            inputs,
        }
    }
}

/// The dtypes the tests cycle through: `(dtype, mixed)`.
pub const DTYPES: [(Dtype, bool); 6] = [
    (Dtype::F64, false),
    (Dtype::F32, false),
    (Dtype::F16, false),
    (Dtype::BF16, false),
    (Dtype::F16, true),
    (Dtype::BF16, true),
];

/// Hand-picked well-scaled cases of a family: several shapes (K = 1 included), both ops,
/// every dtype, affine mode and (rms_norm) convention, cycled.
pub fn hand_cases(family: Family) -> Vec<FamilyCase> {
    let mut specs = Vec::new();
    let ops = family.ops();
    match family {
        Family::LayerNorm | Family::RmsNorm => {
            let shapes: [(&[usize], usize); 8] = [
                (&[2, 8], 1),
                (&[3, 5], 1),
                (&[2, 3, 4], 2),
                (&[2, 2, 2, 3], 3),
                (&[4, 1], 1),
                (&[1, 16], 1),
                (&[2, 3, 1], 1),
                (&[3, 2, 2], 1),
            ];
            let affines: &[Affine] = if family == Family::RmsNorm {
                &[Affine::Weight, Affine::None]
            } else {
                &[Affine::WeightBias, Affine::Weight, Affine::None]
            };
            for (i, (shape, nd)) in shapes.iter().enumerate() {
                for (j, op) in ops.iter().enumerate() {
                    for (k, (dtype, mixed)) in DTYPES.iter().enumerate() {
                        let mut s = Spec::last(
                            *op,
                            shape,
                            *nd,
                            *dtype,
                            affines[(i + j + k) % affines.len()],
                        );
                        if family == Family::RmsNorm && (i + k) % 2 == 1 {
                            s = s.convention(RmsConvention::Offset);
                        }
                        if *mixed {
                            s = s.mixed();
                        }
                        specs.push(s.centre([0.0, 1.0, -0.5][(i + k) % 3]));
                    }
                }
            }
        }
        Family::GroupNorm => {
            use FamilyLayout::*;
            let shapes: [(FamilyLayout, &[usize], usize); 10] = [
                (Nchw, &[2, 6, 2, 2], 1),
                (Nchw, &[2, 6, 2, 2], 2),
                (Nchw, &[2, 6, 2, 2], 3),
                (Nchw, &[1, 6, 1, 3], 6),
                (Nhwc, &[2, 2, 2, 6], 3),
                (Nhwc, &[2, 1, 3, 4], 2),
                (Nc, &[3, 6], 2),
                (Ncl, &[2, 4, 3], 4),
                (Ncdhw, &[1, 6, 2, 1, 2], 3),
                (Ndhwc, &[2, 1, 2, 2, 6], 2),
            ];
            let affines = [Affine::WeightBias, Affine::Weight, Affine::None];
            for (i, (layout, shape, g)) in shapes.iter().enumerate() {
                for (j, op) in ops.iter().enumerate() {
                    for (k, (dtype, mixed)) in DTYPES.iter().enumerate() {
                        let mut s = Spec::channels(
                            *op,
                            *layout,
                            shape,
                            *g,
                            *dtype,
                            affines[(i + j + k) % 3],
                        );
                        if *mixed {
                            s = s.mixed();
                        }
                        specs.push(s.centre([0.0, 1.0, -0.5][(i + k) % 3]));
                    }
                }
            }
        }
    }
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| s.build(i as u64 + 11))
        .collect()
}

/// A random well-scaled spec of any family: shapes of at most 4 extents per axis, every
/// layout, groups among C's divisors, normalized_ndim 1..=3, dtype, affine, convention.
pub fn any_spec() -> impl Strategy<Value = Spec> {
    (
        (
            0usize..3,
            any::<bool>(),
            0usize..DTYPES.len(),
            0usize..3,
            any::<bool>(),
        ),
        (
            1usize..=3,
            prop::collection::vec(1usize..=4, 5),
            0usize..6,
            0usize..8,
        ),
        0usize..3,
    )
        .prop_map(
            |((fam, bwd, dt, aff, offset), (nd, dims, layout, gi), centre)| {
                let family = Family::ALL[fam];
                let op = family.ops()[bwd as usize];
                let (dtype, mixed) = DTYPES[dt];
                let mut s = if family == Family::GroupNorm {
                    let layout = [
                        FamilyLayout::Nchw,
                        FamilyLayout::Nhwc,
                        FamilyLayout::Nc,
                        FamilyLayout::Ncl,
                        FamilyLayout::Ncdhw,
                        FamilyLayout::Ndhwc,
                    ][layout];
                    let rank = layout.rank().unwrap();
                    // C from {1, 2, 3, 4, 6, 8, 9, 12}, at most 2 samples, spatial extents ≤ 3.
                    let c = [1, 2, 3, 4, 6, 8, 9, 12][(dims[0] * 3 + dims[1]) % 8];
                    let mut shape: Vec<usize> = dims[..rank].iter().map(|&d| d.min(3)).collect();
                    shape[0] = shape[0].min(2);
                    let ch = if layout.channels_last() { rank - 1 } else { 1 };
                    shape[ch] = c;
                    let divisors: Vec<usize> = (1..=c).filter(|g| c % g == 0).collect();
                    let g = divisors[gi % divisors.len()];
                    let affine = [Affine::WeightBias, Affine::Weight, Affine::None][aff];
                    Spec::channels(op, layout, &shape, g, dtype, affine)
                } else {
                    // One or two batch axes, then nd normalized axes.
                    let batch = 1 + (dims[4] % 2);
                    let shape: Vec<usize> = dims[..batch]
                        .iter()
                        .map(|&d| d.min(3))
                        .chain(dims[batch..].iter().cycle().take(nd).copied())
                        .collect();
                    let affine = if family == Family::RmsNorm {
                        [Affine::Weight, Affine::None][aff % 2]
                    } else {
                        [Affine::WeightBias, Affine::Weight, Affine::None][aff]
                    };
                    let s = Spec::last(op, &shape, nd, dtype, affine);
                    if family == Family::RmsNorm && offset {
                        s.convention(RmsConvention::Offset)
                    } else {
                        s
                    }
                };
                if mixed {
                    s = s.mixed();
                }
                s.centre([0.0, 1.0, -1.5][centre])
            },
        )
}

fn q(v: f64) -> QSqrt {
    QSqrt::rational(f64_to_rational(v).expect("finite input"))
}

fn f64_of(v: &QSqrt) -> f64 {
    round(v, FloatFormat::F64).to_f64()
}

/// The exact outputs of `case` (every output, optional ones included), correctly rounded
/// to f64.
pub fn exact(case: &FamilyCase) -> Outputs {
    let read = |name: &str| -> Option<Vec<QSqrt>> {
        case.inputs
            .get(name)
            .map(|v| v.iter().map(|&e| q(e)).collect())
    };
    let (x, gamma, beta) = (read("x").unwrap(), read("gamma"), read("beta"));
    let eps = q(case.eps);
    let inp = spec::Inputs {
        x: &x,
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps: &eps,
    };
    let affine = spec::Affine::from_name(case.affine.name()).unwrap();
    let conv = spec::RmsConvention::from_name(case.convention.name()).unwrap();
    let shape = &case.shape;
    let nd = case.normalized_ndim.unwrap_or(0);
    let layout = || spec::ChannelLayout::from_name(case.layout.name()).unwrap();
    let groups = case.groups.unwrap_or(0);
    let mut out = Outputs::new();
    let mut put = |name: &str, v: Vec<f64>| {
        out.insert(name.to_string(), v);
    };
    let all = |v: &[QSqrt]| v.iter().map(f64_of).collect::<Vec<f64>>();
    if case.op.is_backward() {
        let dy = read("dy").unwrap();
        let b = match case.op {
            FamilyOp::LayerNormBackward => spec::layer_norm_backward(shape, nd, affine, inp, &dy),
            FamilyOp::RmsNormBackward => spec::rms_norm_backward(shape, nd, affine, conv, inp, &dy),
            _ => spec::group_norm_backward(layout(), shape, groups, affine, inp, &dy),
        }
        .expect("a valid, well-posed case");
        put("dx", all(&b.dx));
        if let Some(dg) = b.dgamma {
            put(
                "dgamma",
                dg.iter()
                    .map(|v| v.round(FloatFormat::F64).to_f64())
                    .collect(),
            );
        }
        if let Some(db) = b.dbeta {
            put("dbeta", all(&db));
        }
    } else {
        let f = match case.op {
            FamilyOp::LayerNorm => spec::layer_norm(shape, nd, affine, inp),
            FamilyOp::RmsNorm => spec::rms_norm(shape, nd, affine, conv, inp),
            _ => spec::group_norm(layout(), shape, groups, affine, inp),
        }
        .expect("a valid, well-posed case");
        put("y", all(&f.y));
        if let Some(m) = f.mean {
            put("mean", all(&m));
        }
        put("rstd", all(&f.rstd));
    }
    out
}

/// The reference's grouping of `case` (not the kernels' helper).
fn spec_grouping(case: &FamilyCase) -> spec::Grouping {
    match case.normalized_ndim {
        Some(nd) => spec::Grouping::last(&case.shape, nd).unwrap(),
        None => spec::Grouping::group_norm(
            spec::ChannelLayout::from_name(case.layout.name()).unwrap(),
            &case.shape,
            case.groups.unwrap(),
        )
        .unwrap(),
    }
}

/// How the magnitude counts the centring `x − mean`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Centring {
    /// As a sum of terms `|x| + |mean|`: a rounding of the mean shows in `x − mean` at that
    /// size (the general measure).
    Terms,
    /// As its value `|x − mean|`: for cases whose data make the mean and `x − mean` exact or
    /// nearly so in the working precision (a correct kernel is checked to meet it on them).
    Exact,
}

/// Each output's magnitude per element: the size of the terms it is computed from (in f64),
/// so that an error relative to `|exact| + magnitude` is a rounding error's size even where
/// the result cancels (`dx`, a `y` near 0, `x` near its group's mean).
pub fn magnitudes(case: &FamilyCase, centring: Centring) -> Outputs {
    let g = spec_grouping(case);
    let x = &case.inputs["x"];
    let gamma = case.inputs.get("gamma");
    let beta = case.inputs.get("beta");
    let w = |p: usize| match gamma {
        Some(gm) if case.convention == RmsConvention::Offset => (1.0 + gm[p]).abs(),
        Some(gm) => gm[p].abs(),
        None => 1.0,
    };
    let b = |p: usize| beta.map_or(0.0, |bt| bt[p].abs());
    let n = x.len();
    let (mut xhat, mut y, mut dx) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let (mut mean_mag, mut rstd_mag) = (Vec::new(), Vec::new());
    let dy = case.inputs.get("dy");
    for cells in g.groups() {
        let k = cells.len() as f64;
        let mean = if case.op.centered() {
            cells.iter().map(|&i| x[i]).sum::<f64>() / k
        } else {
            0.0
        };
        let var = cells.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / k;
        let rstd = 1.0 / (var + case.eps).sqrt();
        mean_mag.push(cells.iter().map(|&i| x[i].abs()).sum::<f64>() / k);
        rstd_mag.push(rstd);
        for &i in cells {
            xhat[i] = match centring {
                Centring::Terms => (x[i].abs() + mean.abs()) * rstd,
                Centring::Exact => ((x[i] - mean) * rstd).abs(),
            };
            y[i] = w(g.params()[i]) * xhat[i] + b(g.params()[i]);
        }
        if let Some(dy) = dy {
            let gw = |i: usize| (dy[i] * w(g.params()[i])).abs();
            let mg = cells.iter().map(|&i| gw(i)).sum::<f64>() / k;
            let mgx = cells.iter().map(|&i| gw(i) * xhat[i]).sum::<f64>() / k;
            for &i in cells {
                dx[i] = rstd * (gw(i) + mg + xhat[i] * mgx);
            }
        }
    }
    let mut out = Outputs::new();
    out.insert("y".into(), y);
    out.insert("mean".into(), mean_mag);
    out.insert("rstd".into(), rstd_mag);
    out.insert("dx".into(), dx);
    if let Some(dy) = dy {
        let (mut dg, mut db) = (vec![0.0; g.n_params()], vec![0.0; g.n_params()]);
        for i in 0..n {
            dg[g.params()[i]] += (dy[i] * xhat[i]).abs();
            db[g.params()[i]] += dy[i].abs();
        }
        out.insert("dgamma".into(), dg);
        out.insert("dbeta".into(), db);
    }
    out
}

/// The largest number of values one output element is computed from: the group size, or
/// the cells summed into one `dgamma`/`dbeta`.
pub fn reduction_size(case: &FamilyCase) -> usize {
    let g = spec_grouping(case);
    let mut per = vec![0usize; g.n_params()];
    for &p in g.params() {
        per[p] += 1;
    }
    let largest_group = g.groups().iter().map(|c| c.len()).max().unwrap();
    largest_group.max(per.into_iter().max().unwrap())
}

/// The tolerance on `|got − exact| / (|exact| + magnitude)`: 1e-12 in f64; 1e-6·K (K ≥ 16)
/// in f32; for f16/bf16 four units in the last place of the dtype (output rounding and
/// half-precision intermediates) plus the f32 accumulation's 1e-6·K.
pub fn tolerance(case: &FamilyCase) -> f64 {
    tolerance_in(case, case.dtype)
}

/// [`tolerance`] for an output of dtype `d` (f32 parameters and statistics of a mixed case).
pub fn tolerance_in(case: &FamilyCase, d: Dtype) -> f64 {
    let k = reduction_size(case).max(16) as f64;
    match d {
        Dtype::F64 => 1e-12,
        Dtype::F32 => 1e-6 * k,
        d => 4.0 * d.unit_roundoff() + 1e-6 * k,
    }
}

/// The worst `|got − exact| / (|exact| + magnitude)` over every output the kernel returns
/// (a non-finite value where the exact one is finite counts as infinitely wrong), each
/// output's ratio scaled by `tolerance(case) / tolerance_in(case, its dtype)`: in units of
/// the case's [`tolerance`], so that a mixed case's f32 outputs meet f32's.
pub fn worst_ratio(kernel: &dyn FamilyKernel, case: &FamilyCase) -> f64 {
    worst_ratio_by(kernel, case, Centring::Terms)
}

/// [`worst_ratio`] with the centring counted as `centring` says.
pub fn worst_ratio_by(kernel: &dyn FamilyKernel, case: &FamilyCase, centring: Centring) -> f64 {
    let got = kernel
        .run(case)
        .unwrap_or_else(|e| panic!("{} on {}: {e}", kernel.name(), describe(case)));
    let ex = exact(case);
    let mag = magnitudes(case, centring);
    let mut worst = 0.0f64;
    for (name, v) in &got {
        let e = &ex[name];
        let m = &mag[name];
        let scale = tolerance(case) / tolerance_in(case, case.dtype_of(name));
        assert_eq!(v.len(), e.len(), "{} {name}", kernel.name());
        for i in 0..v.len() {
            let err = (v[i] - e[i]).abs();
            let r = if !v[i].is_finite() {
                f64::INFINITY
            } else if err == 0.0 {
                0.0
            } else {
                scale * err / (e[i].abs() + m[i])
            };
            worst = worst.max(if r.is_nan() { f64::INFINITY } else { r });
        }
    }
    worst
}

/// The family's two-pass good kernel.
pub fn good_twopass(family: Family) -> Box<dyn FamilyKernel> {
    let name = match family {
        Family::LayerNorm => "ln-twopass",
        Family::RmsNorm => "rms-twopass",
        Family::GroupNorm => "gn-twopass",
    };
    family_kernel_by_name(name).unwrap()
}

/// A one-line description of a case for failure messages.
pub fn describe(case: &FamilyCase) -> String {
    format!(
        "{} {} {:?} {}/{} nd={:?} G={:?} {} {} eps={:e}",
        case.op,
        case.layout,
        case.shape,
        case.dtype,
        case.param_dtype,
        case.normalized_ndim,
        case.groups,
        case.affine,
        case.convention,
        case.eps
    )
}
