//! The family's fast golden path (`fast::family::family_fast`) is bit for bit the exact path
//! (spec's F1–F6, then correct rounding): on every case of the family suites in all six
//! precisions, on generated cases (`PROPTEST_CASES`, default 256), and on cases built so that
//! outputs are exact floats, exact midpoints and exact zeros (the fallback's ground). Run in
//! release.

use bnconf::fast::family::{family_fast, family_fast_counted};
use bnconf::judge::family::prepare_family;
use bnconf::suite::family::{family_draw, family_suite, FamilySuiteCase};
use bnconf::suite::{Level, Precision};
use bnconf_impl::family::{
    Affine, Family, FamilyCase, FamilyLayout, FamilyOp, Named, RmsConvention,
};
use bnconf_impl::Dtype;
use std::collections::BTreeMap;

/// `None` when they agree bit for bit (every output of the case), else what differs.
fn differs(sc: &FamilySuiteCase) -> Option<String> {
    let exact = prepare_family(sc)
        .unwrap_or_else(|e| panic!("{}: {e}", sc.id))
        .rounded_goldens();
    let fast = family_fast(&sc.case).unwrap_or_else(|| panic!("{}: fast path declined", sc.id));
    let fast: BTreeMap<String, Vec<f64>> =
        fast.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    if fast.keys().ne(exact.keys()) {
        return Some(format!(
            "{}: outputs {:?} vs {:?}",
            sc.id,
            fast.keys().collect::<Vec<_>>(),
            exact.keys().collect::<Vec<_>>()
        ));
    }
    for (name, e) in &exact {
        let f = &fast[name];
        assert_eq!(f.len(), e.len(), "{} {name}", sc.id);
        for (i, (a, b)) in f.iter().zip(e).enumerate() {
            if a.to_bits() != b.to_bits() {
                return Some(format!("{} {name}[{i}]: fast {a:e}, exact {b:e}", sc.id));
            }
        }
    }
    None
}

#[test]
fn fast_goldens_are_the_exact_ones_on_every_family_suite_case() {
    let mut bad = Vec::new();
    let mut n = 0;
    for family in [Family::LayerNorm, Family::RmsNorm, Family::GroupNorm] {
        for sc in family_suite(family, &Precision::ALL, 20261129).cases {
            n += 1;
            bad.extend(differs(&sc));
        }
    }
    assert!(n > 400, "only {n} cases");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn prop_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(prop_cases()))]

    #[test]
    fn fast_goldens_are_the_exact_ones_on_generated_cases(
        op in proptest::sample::select(FamilyOp::ALL.to_vec()),
        p in proptest::sample::select(Precision::ALL.to_vec()),
        class in 0usize..64,
        seed in proptest::prelude::any::<u64>(),
    ) {
        if let Some(sc) = family_draw(op, p, class, seed) {
            let d = differs(&sc);
            proptest::prop_assert!(d.is_none(), "{}", d.unwrap());
        }
    }
}

/// A case from its parts (inputs by name), at the core level; every field a parameter, as
/// the hand cases below read best spelled out.
#[allow(clippy::too_many_arguments)]
fn case(
    op: FamilyOp,
    layout: FamilyLayout,
    shape: &[usize],
    dtype: Dtype,
    nd_or_groups: usize,
    affine: Affine,
    convention: RmsConvention,
    eps: f64,
    inputs: &[(&str, Vec<f64>)],
) -> FamilySuiteCase {
    let last = layout == FamilyLayout::Last;
    let c = FamilyCase {
        op,
        layout,
        shape: shape.to_vec(),
        dtype,
        param_dtype: dtype,
        eps,
        normalized_ndim: last.then_some(nd_or_groups),
        groups: (!last).then_some(nd_or_groups),
        affine,
        convention,
        inputs: inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    };
    c.validate().unwrap();
    FamilySuiteCase {
        id: format!("{op}.{layout}.{dtype}.hand"),
        level: Level::Core,
        class: "hand".into(),
        precision: Precision::uniform(bnconf::suite::family::format_of(dtype)).static_name(),
        case: c,
    }
}

#[test]
fn exact_floats_midpoints_and_zeros_take_the_exact_paths_answer() {
    use Affine::*;
    use FamilyLayout::*;
    use FamilyOp::*;
    use RmsConvention::*;
    let mut bad = Vec::new();
    for dtype in [Dtype::F64, Dtype::F32, Dtype::F16, Dtype::BF16] {
        // Rows [a, -a, ...] with eps = 0: q a perfect square, every y rational; beta puts
        // some of them on midpoints of the half types (1 + 2^-11 is one of f16's).
        let x = vec![3.0, -3.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0];
        let gamma = vec![1.0, 0.5];
        let beta = vec![2f64.powi(-11), -0.0];
        let dy = vec![1.0, 1.0, -1.0, 1.0, 0.25, 0.25, 3.0, -3.0];
        let cases = [
            case(
                LayerNorm,
                Last,
                &[4, 2],
                dtype,
                1,
                WeightBias,
                Standard,
                0.0,
                &[
                    ("x", x.clone()),
                    ("gamma", gamma.clone()),
                    ("beta", beta.clone()),
                ],
            ),
            case(
                LayerNormBackward,
                Last,
                &[4, 2],
                dtype,
                1,
                WeightBias,
                Standard,
                0.0,
                &[
                    ("x", x.clone()),
                    ("dy", dy.clone()),
                    ("gamma", gamma.clone()),
                ],
            ),
            case(
                RmsNorm,
                Last,
                &[4, 2],
                dtype,
                1,
                Weight,
                Offset,
                0.0,
                &[("x", x.clone()), ("gamma", gamma.clone())],
            ),
            case(
                RmsNormBackward,
                Last,
                &[4, 2],
                dtype,
                1,
                Weight,
                Offset,
                0.0,
                &[
                    ("x", x.clone()),
                    ("dy", dy.clone()),
                    ("gamma", gamma.clone()),
                ],
            ),
            // Repeated rows: dgamma sums equal radicands (a rational or one root).
            case(
                LayerNormBackward,
                Last,
                &[4, 2],
                dtype,
                1,
                Weight,
                Standard,
                0.0,
                &[
                    ("x", vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]),
                    ("dy", vec![1.0, 0.0, 1.0, 0.0, -1.0, 0.0, -1.0, 0.0]),
                    ("gamma", gamma.clone()),
                ],
            ),
            // Group norm, 2 groups of 2 channels, dy = 0 somewhere (exact zeros).
            case(
                GroupNormBackward,
                Nchw,
                &[1, 4, 1, 2],
                dtype,
                2,
                WeightBias,
                Standard,
                0.0,
                &[
                    ("x", x.clone()),
                    ("dy", vec![0.0, 0.0, 0.0, 0.0, 1.0, -1.0, 1.0, -1.0]),
                    ("gamma", vec![1.0, 2.0, 0.5, 0.25]),
                ],
            ),
            case(
                GroupNorm,
                Nhwc,
                &[1, 1, 2, 4],
                dtype,
                4,
                None,
                Standard,
                0.0,
                &[("x", x.clone())],
            ),
        ];
        for sc in &cases {
            bad.extend(differs(sc));
        }
        // Midpoints and exact zeros are left to the exact path (the interval straddles a
        // rounding boundary, or the value is too close to zero), never guessed: f16's four
        // `y = 1 + 2^-11`, and the four `dx = 0` of the group whose `dy` is 0.
        let took = |sc: &FamilySuiteCase| family_fast_counted(&sc.case).unwrap().1;
        if dtype == Dtype::F16 {
            assert!(took(&cases[0]) >= 4, "f16 midpoints: {}", took(&cases[0]));
        }
        assert!(took(&cases[5]) >= 4, "{dtype} zeros: {}", took(&cases[5]));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `bnconf golden CASE.json --out-dir` takes the fast path: its f64 and f32 npy files are the
/// exact goldens correctly rounded, bit for bit, on every case of exported family suites.
#[test]
fn golden_out_dir_of_exported_family_cases_is_the_exact_rounding() {
    use bnconf::formats::npy::{read_npy, NpyData};
    use bnconf::suite::family::{family_goldens, Golden};
    use bnconf_spec::exact::round::{round, FloatFormat};
    let bin = env!("CARGO_BIN_EXE_bnconf");
    let tmp = std::env::temp_dir().join(format!("bnconf-fam-golden-{}", std::process::id()));
    let mut checked = 0;
    for (family, dtype) in [
        (Family::LayerNorm, "f32"),
        (Family::RmsNorm, "bf16+f32"),
        (Family::GroupNorm, "f16"),
    ] {
        let dir = tmp.join(format!("{family}-{dtype}"));
        let o = std::process::Command::new(bin)
            .args([
                "export",
                "--family",
                family.name(),
                "--dtype",
                dtype,
                "--out",
            ])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let prec = bnconf::suite::parse_precision(dtype).unwrap();
        for sc in family_suite(family, &[prec], bnconf::suite::DEFAULT_SEED).cases {
            let gd = dir.join(&sc.id).join("gd");
            let o = std::process::Command::new(bin)
                .arg("golden")
                .arg(dir.join(&sc.id).join("case.json"))
                .arg("--out-dir")
                .arg(&gd)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{}: {}",
                sc.id,
                String::from_utf8_lossy(&o.stderr)
            );
            for (name, g) in family_goldens(&sc.case).unwrap() {
                for f in [FloatFormat::F64, FloatFormat::F32] {
                    let want: Vec<f64> = match &g {
                        Golden::Q(v) => v.iter().map(|e| round(e, f).to_f64()).collect(),
                        Golden::Roots(v) => v.iter().map(|e| e.round(f).to_f64()).collect(),
                    };
                    let (_, data) =
                        read_npy(&gd.join(format!("{name}.{}.npy", f.name())), 1 << 24).unwrap();
                    let got: Vec<f64> = match data {
                        NpyData::F64(v) => v,
                        NpyData::F32(v) => v.into_iter().map(f64::from).collect(),
                        other => panic!("{}: {name}: {other:?}", sc.id),
                    };
                    assert_eq!(got.len(), want.len(), "{} {name}", sc.id);
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{} {name}[{i}] {}",
                            sc.id,
                            f.name()
                        );
                    }
                }
            }
            checked += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(checked > 50, "only {checked} cases");
}

/// Long rows (K ≥ 64, where float32 data take the bucket sums) in f32, f16 and bf16, with an
/// offset mean: forward and backward of layer_norm, rms_norm and group_norm, bit for bit.
#[test]
fn long_rows_of_float32_data_take_the_exact_paths_answer() {
    use Affine::*;
    use FamilyLayout::*;
    use FamilyOp::*;
    let mut s: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut bad = Vec::new();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let f = bnconf::suite::family::format_of(dtype);
        let r = |v: f64| {
            bnconf_spec::exact::round::round(
                &bnconf_spec::exact::QSqrt::rational(
                    bnconf_spec::exact::round::f64_to_rational(v).unwrap(),
                ),
                f,
            )
            .to_f64()
        };
        let (rows, k) = (3, 300);
        let x: Vec<f64> = (0..rows * k)
            .map(|i| r(7.0 * (i / k) as f64 + next()))
            .collect();
        let dy: Vec<f64> = (0..rows * k).map(|_| r(next())).collect();
        let gamma: Vec<f64> = (0..k).map(|_| r(1.0 + 0.5 * next())).collect();
        let beta: Vec<f64> = (0..k).map(|_| r(0.25 * next())).collect();
        let g6: Vec<f64> = gamma[..6].to_vec();
        for (op, layout, shape, ndg, affine, inputs) in [
            (
                LayerNorm,
                Last,
                vec![rows, k],
                1,
                WeightBias,
                vec![
                    ("x", x.clone()),
                    ("gamma", gamma.clone()),
                    ("beta", beta.clone()),
                ],
            ),
            (
                LayerNormBackward,
                Last,
                vec![rows, k],
                1,
                WeightBias,
                vec![
                    ("x", x.clone()),
                    ("dy", dy.clone()),
                    ("gamma", gamma.clone()),
                ],
            ),
            (
                RmsNorm,
                Last,
                vec![rows, k],
                1,
                Weight,
                vec![("x", x.clone()), ("gamma", gamma.clone())],
            ),
            (
                RmsNormBackward,
                Last,
                vec![rows, k],
                1,
                Weight,
                vec![
                    ("x", x.clone()),
                    ("dy", dy.clone()),
                    ("gamma", gamma.clone()),
                ],
            ),
            (
                GroupNormBackward,
                Ncl,
                vec![3, 6, 50],
                2,
                Weight,
                vec![("x", x.clone()), ("dy", dy.clone()), ("gamma", g6.clone())],
            ),
            (
                LayerNormBackward,
                Last,
                vec![rows, k],
                1,
                None,
                vec![("x", x.clone()), ("dy", dy.clone())],
            ),
        ] {
            let sc = case(
                op,
                layout,
                &shape,
                dtype,
                ndg,
                affine,
                RmsConvention::Standard,
                1e-5,
                &inputs,
            );
            bad.extend(differs(&sc));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Layout `last` takes its own path (rows in chunks of 64, row sums through float32 buckets
/// with the triple product `w·dy·x`, `dgamma` and `dbeta` summed per column): more rows than
/// one chunk (and not a multiple of it), rows of 64+ cells and shorter ones, two normalized
/// axes, f32 and f64 data, the offset convention, and `dy` columns whose f64 sum is not exact
/// (values 2^60 apart: `dbeta` summed again exactly), bit for bit the exact path.
#[test]
fn rows_of_layout_last_in_chunks_take_the_exact_paths_answer() {
    use Affine::*;
    use FamilyOp::*;
    let mut s: u64 = 0x0bad_cafe_1234_5677;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut bad = Vec::new();
    for dtype in [Dtype::F32, Dtype::F64] {
        let r = |v: f64| match dtype {
            Dtype::F32 => v as f32 as f64,
            _ => v,
        };
        for (rows, shape_k, nd) in [(131, vec![70], 1), (70, vec![5, 7], 2), (3, vec![2], 1)] {
            let k: usize = shape_k.iter().product();
            let mut shape = vec![rows];
            shape.extend(&shape_k);
            let x: Vec<f64> = (0..rows * k)
                .map(|i| r(3.0 * (i / k % 5) as f64 + next()))
                .collect();
            // Column 1 mixes 2^30 and 2^-30: its f64 sum rounds.
            let dy: Vec<f64> = (0..rows * k)
                .map(|i| match (i % k, i / k % 3) {
                    (1, 0) => r(1073741824.0),
                    (1, 1) => r(-9.313225746154785e-10),
                    _ => r(next()),
                })
                .collect();
            let gamma: Vec<f64> = (0..k).map(|_| r(1.0 + 0.5 * next())).collect();
            let beta: Vec<f64> = (0..k).map(|_| r(0.25 * next())).collect();
            let fwd_lb = vec![
                ("x", x.clone()),
                ("gamma", gamma.clone()),
                ("beta", beta.clone()),
            ];
            let bwd_w = vec![
                ("x", x.clone()),
                ("dy", dy.clone()),
                ("gamma", gamma.clone()),
            ];
            let fwd_w = vec![("x", x.clone()), ("gamma", gamma.clone())];
            for (op, affine, conv, inputs) in [
                (LayerNorm, WeightBias, RmsConvention::Standard, &fwd_lb),
                (
                    LayerNormBackward,
                    WeightBias,
                    RmsConvention::Standard,
                    &bwd_w,
                ),
                (RmsNorm, Weight, RmsConvention::Standard, &fwd_w),
                (RmsNormBackward, Weight, RmsConvention::Standard, &bwd_w),
                (RmsNorm, Weight, RmsConvention::Offset, &fwd_w),
                (RmsNormBackward, Weight, RmsConvention::Offset, &bwd_w),
            ] {
                let sc = case(
                    op,
                    FamilyLayout::Last,
                    &shape,
                    dtype,
                    nd,
                    affine,
                    conv,
                    1e-5,
                    inputs,
                );
                bad.extend(differs(&sc));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// f32 outputs of layout `last` are first tried in plain f64 (with a wider bound), rows of
/// `rstd` above 2^64 (here about 2^84: values 2^-60 apart by 2^-83, `eps = 0`) straight in
/// double-double: both bit for bit the exact path, forward and backward.
#[test]
fn rows_of_tiny_spread_take_the_exact_paths_answer() {
    use Affine::*;
    use FamilyOp::*;
    let (rows, k) = (3, 80);
    let x: Vec<f64> = (0..rows * k)
        .map(|i| {
            let base = if i / k == 1 {
                1.0
            } else {
                8.673617379884035e-19
            }; // 2^-60
            (base * (1.0 + ((i * 7 % 13) as f64) * 1.1920928955078125e-7)) as f32 as f64
        })
        .collect();
    let dy: Vec<f64> = (0..rows * k)
        .map(|i| ((i * 5 % 11) as f64 - 5.0) * 0.125)
        .collect();
    let gamma: Vec<f64> = (0..k).map(|j| 0.5 + (j % 3) as f64 * 0.25).collect();
    let beta: Vec<f64> = (0..k).map(|j| (j % 4) as f64 * 0.125 - 0.25).collect();
    let mut bad = Vec::new();
    for (op, affine, inputs) in [
        (
            LayerNorm,
            WeightBias,
            vec![("x", x.clone()), ("gamma", gamma.clone()), ("beta", beta)],
        ),
        (
            LayerNormBackward,
            WeightBias,
            vec![
                ("x", x.clone()),
                ("dy", dy.clone()),
                ("gamma", gamma.clone()),
            ],
        ),
        (
            RmsNormBackward,
            Weight,
            vec![
                ("x", x.clone()),
                ("dy", dy.clone()),
                ("gamma", gamma.clone()),
            ],
        ),
    ] {
        let sc = case(
            op,
            FamilyLayout::Last,
            &[rows, k],
            Dtype::F32,
            1,
            affine,
            RmsConvention::Standard,
            0.0,
            &inputs,
        );
        bad.extend(differs(&sc));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Layout `last` decides whether the case is valid without building its grouping: the fast
/// path answers exactly when `validate` passes, for cases broken one field at a time.
#[test]
fn layout_last_fast_path_answers_exactly_for_valid_cases() {
    let (rows, k) = (4, 3);
    let x: Vec<f64> = (0..rows * k).map(|i| (i * i % 7) as f64 - 2.5).collect();
    let dy: Vec<f64> = (0..rows * k).map(|i| (i % 5) as f64 - 1.0).collect();
    let base = case(
        FamilyOp::LayerNormBackward,
        FamilyLayout::Last,
        &[rows, k],
        Dtype::F64,
        1,
        Affine::WeightBias,
        RmsConvention::Standard,
        1e-5,
        &[
            ("x", x.clone()),
            ("dy", dy.clone()),
            ("gamma", vec![1.0, 2.0, 0.5]),
        ],
    )
    .case;
    type Edit = fn(&mut FamilyCase);
    let edits: [(&str, Edit); 16] = [
        ("none", |_| {}),
        ("x short", |c| {
            c.inputs.get_mut("x").unwrap().pop();
        }),
        ("dy long", |c| c.inputs.get_mut("dy").unwrap().push(1.0)),
        ("gamma short", |c| {
            c.inputs.get_mut("gamma").unwrap().pop();
        }),
        ("no dy", |c| {
            c.inputs.remove("dy");
        }),
        ("extra beta", |c| {
            c.inputs.insert("beta".into(), vec![0.0; 3]);
        }),
        ("extra y", |c| {
            c.inputs.insert("y".into(), vec![0.0; 12]);
        }),
        ("batch 0", |c| c.shape = vec![0, 3]),
        ("rows 2 of 6", |c| c.shape = vec![2, 6]),
        ("three axes", |c| c.shape = vec![2, 2, 3]),
        ("two normalized", |c| {
            c.shape = vec![4, 1, 3];
            c.normalized_ndim = Some(2);
        }),
        ("ndim 0", |c| c.normalized_ndim = Some(0)),
        ("ndim 2 of rank 2", |c| c.normalized_ndim = Some(2)),
        ("groups", |c| c.groups = Some(1)),
        ("eps < 0", |c| c.eps = -1.0),
        ("nchw", |c| c.layout = FamilyLayout::Nchw),
    ];
    for (what, edit) in edits {
        let mut c = base.clone();
        edit(&mut c);
        let valid = c.validate().is_ok();
        assert_eq!(family_fast(&c).is_some(), valid, "{what}: valid {valid}");
    }
}

/// `bnconf bench --family` runs the family table on a small shape (numpy skipped) and names
/// `--family-shape` when it is not `ROWS,K`.
#[test]
fn bench_family_prints_its_table_and_refuses_a_bad_shape() {
    let bin = env!("CARGO_BIN_EXE_bnconf");
    let o = std::process::Command::new(bin)
        .args([
            "bench",
            "--family",
            "--family-shape",
            "16,64",
            "--reps",
            "1",
            "--no-side-by-side",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for want in [
        "| layer_norm |",
        "| rms_norm |",
        "[16, 64] f32",
        "skipped (--no-side-by-side)",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let o = std::process::Command::new(bin)
        .args([
            "bench",
            "--family",
            "--family-shape",
            "16",
            "--no-side-by-side",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--family-shape"));
}
