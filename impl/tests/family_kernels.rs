//! The family kernels against the exact reference (`bnconf_spec::family`, correctly rounded
//! to f64): every good kernel within a generous tolerance on well-scaled cases (hand-picked
//! and a property test over shapes, groups, normalized_ndim, affine, convention, dtype), every
//! known-bad kernel far off on a case built to show its defect and within tolerance on the ops
//! it does not claim, and bad input rejected with an error naming the field.
//!
//! Run in release (the exact arithmetic is bignum). Property cases: `PROPTEST_CASES`, or 256.

mod family_common;

use bnconf_impl::family::FamilyError;
use bnconf_impl::family::{channel_dims, Named};
use bnconf_impl::*;
use family_common::*;
use proptest::prelude::*;

/// Asserts `kernel` conforms on `case` within [`tolerance`] (centring measured as
/// `centring` says); returns the worst ratio.
fn assert_good_by(kernel: &dyn FamilyKernel, case: &FamilyCase, centring: Centring) -> f64 {
    let worst = worst_ratio_by(kernel, case, centring);
    let tol = tolerance(case);
    assert!(
        worst <= tol,
        "{} on {}: worst error {worst:e} > tolerance {tol:e}",
        kernel.name(),
        describe(case)
    );
    worst
}

#[test]
fn good_kernels_agree_with_the_exact_reference_on_hand_cases() {
    for kernel in all_family_kernels()
        .iter()
        .filter(|k| k.expected() == Expected::Good)
    {
        let mut n = 0;
        for case in hand_cases(kernel.family()) {
            assert_good_by(kernel.as_ref(), &case, Centring::Terms);
            n += 1;
        }
        assert!(n >= 20, "{}: only {n} cases", kernel.name());
    }
}

/// The sharpness controls (a doubled variance, an rstd 25 % off): defects that show on every
/// case of their family, forward and backward. Their defect cases are f32/f64: a 30 % error
/// is only ~10× a half type's tolerance here, and whether the half-precision suites reject them
/// is the judge's business (`conformance/tests/family_sharp.rs`).
const SHARPNESS_CONTROLS: [&str; 6] = [
    "bad-ln-var-doubled",
    "bad-ln-rstd-off25",
    "bad-rms-ms-doubled",
    "bad-rms-rstd-off25",
    "bad-gn-var-doubled",
    "bad-gn-rstd-off25",
];

/// One case per known-bad kernel, built to show its defect: `(kernel, case)`.
fn defect_cases() -> Vec<(&'static str, FamilyCase)> {
    use FamilyLayout::*;
    use FamilyOp::*;
    let ln = |op, shape: &[usize], nd, dtype, eps, centre| {
        let spec = Spec::last(op, shape, nd, dtype, Affine::WeightBias);
        spec.eps(eps).centre(centre).build(1)
    };
    let many_rows = Spec::last(RmsNormBackward, &[1024, 4], 1, Dtype::F32, Affine::Weight)
        .repeated_rows()
        .positive_dy()
        .build(2);
    let overflow = Spec::last(RmsNorm, &[3, 8], 1, Dtype::F16, Affine::Weight)
        .spread(600.0)
        .build(3);
    let offset = Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight)
        .convention(RmsConvention::Offset)
        .build(4);
    let offset_bwd = Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F64, Affine::Weight)
        .convention(RmsConvention::Offset)
        .build(5);
    let gn = |op, layout, shape: &[usize], groups| {
        Spec::channels(op, layout, shape, groups, Dtype::F64, Affine::WeightBias).build(6)
    };
    vec![
        (
            "bad-ln-onepass",
            ln(LayerNorm, &[4, 16], 1, Dtype::F32, 1e-5, 1024.0),
        ),
        (
            "bad-ln-onepass",
            ln(LayerNormBackward, &[4, 16], 1, Dtype::F32, 1e-5, 1024.0),
        ),
        (
            "bad-ln-backward-onepass",
            ln(LayerNormBackward, &[4, 16], 1, Dtype::F32, 1e-5, 1024.0),
        ),
        (
            "bad-ln-no-eps",
            ln(LayerNorm, &[4, 8], 1, Dtype::F64, 1.0, 0.0),
        ),
        (
            "bad-ln-no-eps",
            ln(LayerNormBackward, &[4, 8], 1, Dtype::F64, 1.0, 0.0),
        ),
        (
            "bad-ln-eps-outside-sqrt",
            ln(LayerNorm, &[4, 8], 1, Dtype::F64, 0.5, 0.0),
        ),
        (
            "bad-ln-backward-one-axis",
            ln(LayerNormBackward, &[3, 4, 8], 2, Dtype::F64, 1e-5, 0.0),
        ),
        (
            "bad-ln-half-xhat-dgamma",
            Spec::last(
                LayerNormBackward,
                &[16, 16],
                1,
                Dtype::F16,
                Affine::WeightBias,
            )
            .mixed()
            .repeated_rows()
            .positive_dy()
            .build(8),
        ),
        (
            "bad-ln-half-param-sums",
            Spec::last(
                LayerNormBackward,
                &[64, 4],
                1,
                Dtype::BF16,
                Affine::WeightBias,
            )
            .mixed()
            .repeated_rows()
            .positive_dy()
            .build(11),
        ),
        (
            "bad-ln-half-rstd-dgamma",
            Spec::last(
                LayerNormBackward,
                &[16, 16],
                1,
                Dtype::BF16,
                Affine::WeightBias,
            )
            .mixed()
            .repeated_rows()
            .positive_dy()
            .build(14),
        ),
        (
            "bad-gn-half-rstd-dgamma",
            Spec::channels(
                GroupNormBackward,
                Nchw,
                &[1, 4, 2, 2],
                2,
                Dtype::BF16,
                Affine::WeightBias,
            )
            .mixed()
            .positive_dy()
            .build(15),
        ),
        (
            "bad-gn-onepass",
            Spec::channels(
                GroupNorm,
                Nchw,
                &[2, 6, 2, 2],
                2,
                Dtype::F32,
                Affine::WeightBias,
            )
            .centre(512.0)
            .build(12),
        ),
        (
            "bad-gn-onepass",
            Spec::channels(
                GroupNormBackward,
                Ncl,
                &[2, 6, 8],
                3,
                Dtype::F32,
                Affine::WeightBias,
            )
            .centre(512.0)
            .build(13),
        ),
        (
            "bad-ln-var-doubled",
            ln(LayerNorm, &[4, 8], 1, Dtype::F32, 1e-5, 0.0),
        ),
        (
            "bad-ln-var-doubled",
            ln(LayerNormBackward, &[4, 8], 1, Dtype::F32, 1e-5, 0.0),
        ),
        (
            "bad-ln-rstd-off25",
            ln(LayerNorm, &[4, 8], 1, Dtype::F32, 1e-5, 0.0),
        ),
        (
            "bad-ln-rstd-off25",
            ln(LayerNormBackward, &[4, 8], 1, Dtype::F64, 1e-5, 0.0),
        ),
        (
            "bad-rms-ms-doubled",
            Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight).build(9),
        ),
        (
            "bad-rms-rstd-off25",
            Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F32, Affine::Weight).build(10),
        ),
        (
            "bad-gn-var-doubled",
            gn(GroupNormBackward, Nchw, &[2, 6, 2, 2], 3),
        ),
        ("bad-gn-rstd-off25", gn(GroupNorm, Ncl, &[2, 12, 3], 4)),
        // f64 data computed in f32 (MLX's CPU fallback): f32's rounding in every output
        (
            "bad-ln-f32-compute",
            ln(LayerNorm, &[4, 16], 1, Dtype::F64, 1e-5, 0.0),
        ),
        (
            "bad-ln-f32-compute",
            ln(LayerNormBackward, &[3, 4, 8], 2, Dtype::F64, 1e-5, 0.0),
        ),
        (
            "bad-rms-f32-compute",
            Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight).build(16),
        ),
        (
            "bad-rms-f32-compute",
            Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F64, Affine::Weight).build(17),
        ),
        ("bad-gn-f32-compute", gn(GroupNorm, Nchw, &[2, 6, 2, 2], 3)),
        (
            "bad-gn-f32-compute",
            gn(GroupNormBackward, Ndhwc, &[1, 2, 1, 2, 4], 2),
        ),
        // an f32 epsilon on f64 data: eps = 0.1 (f32's rounding of it is 1.5e-9 relative)
        // against a variance of order 1
        (
            "bad-ln-eps-f32",
            ln(LayerNorm, &[4, 16], 1, Dtype::F64, 0.1, 0.0),
        ),
        (
            "bad-ln-eps-f32",
            ln(LayerNormBackward, &[3, 4, 8], 2, Dtype::F64, 0.1, 0.0),
        ),
        (
            "bad-rms-eps-f32",
            Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .eps(0.1)
                .build(18),
        ),
        (
            "bad-rms-eps-f32",
            Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .eps(0.1)
                .build(19),
        ),
        (
            "bad-gn-eps-f32",
            Spec::channels(
                GroupNorm,
                Nchw,
                &[2, 6, 2, 2],
                3,
                Dtype::F64,
                Affine::WeightBias,
            )
            .eps(0.1)
            .build(20),
        ),
        (
            "bad-gn-eps-f32",
            Spec::channels(
                GroupNormBackward,
                Ncl,
                &[2, 12, 3],
                4,
                Dtype::F64,
                Affine::WeightBias,
            )
            .eps(0.1)
            .build(21),
        ),
        // rms_norm's statistic in f32 on f64 data (TVM, burn); 0.1 in each row: not an f32
        (
            "bad-rms-f32-inputs",
            Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .first_cell(0.1)
                .build(22),
        ),
        (
            "bad-rms-f32-inputs",
            Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .first_cell(0.1)
                .build(23),
        ),
        (
            "bad-rms-f32-rms",
            Spec::last(RmsNorm, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .first_cell(0.1)
                .build(24),
        ),
        (
            "bad-rms-f32-rms",
            Spec::last(RmsNormBackward, &[4, 8], 1, Dtype::F64, Affine::Weight)
                .first_cell(0.1)
                .build(25),
        ),
        ("bad-rms-bf16-dgamma", many_rows),
        ("bad-rms-f16-sumsq-overflow", overflow.clone()),
        (
            "bad-rms-f16-sumsq-overflow",
            Spec::last(RmsNormBackward, &[3, 8], 1, Dtype::F16, Affine::Weight)
                .spread(600.0)
                .build(7),
        ),
        ("bad-rms-offset-ignored", offset),
        ("bad-rms-offset-ignored", offset_bwd),
        ("bad-gn-pow2-groups", gn(GroupNorm, Nchw, &[2, 6, 2, 2], 2)),
        (
            "bad-gn-pow2-groups",
            gn(GroupNormBackward, Ncl, &[2, 12, 3], 4),
        ),
        (
            "bad-gn-channels-last",
            gn(GroupNorm, Nhwc, &[2, 2, 2, 4], 2),
        ),
        (
            "bad-gn-channels-last",
            gn(GroupNormBackward, Ndhwc, &[1, 2, 1, 2, 3], 3),
        ),
    ]
}

/// How far beyond the tolerance a defect must land.
const FAR: f64 = 100.0;

/// How far a mixed-only defect must land: it is the half type's rounding (2^-12 relative per
/// term for f16) in an f32 output, whose tolerance here is the crude 1e-6·K (≈ 270 f32 units
/// at K = 16), so it lands 10–20× beyond, not 100×; the harness's budget sees it at 10^2–10^4
/// (`bnconf run --family layer_norm --dtypes f16+f32`). Checked against the good kernel of the
/// same storage too: the defect must be [`FAR`] × its error on the same case.
const FAR_MIXED: f64 = 10.0;

#[test]
fn known_bad_kernels_are_far_off_where_their_defect_shows() {
    let cases = defect_cases();
    for kernel in all_family_kernels() {
        if kernel.expected() != Expected::KnownBad {
            continue;
        }
        let mine: Vec<&FamilyCase> = cases
            .iter()
            .filter(|(n, _)| *n == kernel.name())
            .map(|(_, c)| c)
            .collect();
        assert!(!mine.is_empty(), "{} has no defect case", kernel.name());
        let good = good_twopass(kernel.family());
        for case in mine {
            assert!(
                kernel.defective_ops().contains(&case.op),
                "{}",
                kernel.name()
            );
            // The defect cases' data sit on a coarse grid, so that a group's mean and `x − mean`
            // are exact or nearly so in the working precision: a correct kernel of the same
            // family meets the tolerance with the centring measured by its value (checked) ...
            assert_good_by(good.as_ref(), case, Centring::Exact);
            // ... and the known-bad one is far off by the same measure.
            let worst = worst_ratio_by(kernel.as_ref(), case, Centring::Exact);
            let tol = tolerance(case);
            eprintln!(
                "{} on {}: worst/tolerance = {:.3e}",
                kernel.name(),
                describe(case),
                worst / tol
            );
            let far = if kernel.defect_mixed_only() {
                // the good kernel of the same recipe: half storage for bad-ln-half-xhat-dgamma,
                // the two-pass one for the other mixed-only defects
                let prefix = match kernel.family() {
                    Family::LayerNorm => "ln",
                    Family::RmsNorm => "rms",
                    Family::GroupNorm => "gn",
                };
                let recipe = if kernel.name() == "bad-ln-half-xhat-dgamma" {
                    "half-f32acc"
                } else {
                    "twopass"
                };
                let same_storage = format!("{prefix}-{recipe}");
                let half = family_kernel_by_name(&same_storage).unwrap();
                let good_worst = worst_ratio_by(half.as_ref(), case, Centring::Exact);
                assert!(
                    worst > FAR * good_worst,
                    "{}: {worst:e} is not far beyond {same_storage}'s {good_worst:e}",
                    kernel.name()
                );
                FAR_MIXED
            } else {
                FAR
            };
            assert!(
                worst > far * tol,
                "{} on {}: worst error {worst:e} is not far beyond the tolerance {tol:e}",
                kernel.name(),
                describe(case)
            );
        }
    }
}

#[test]
fn known_bad_kernels_conform_where_their_defect_does_not_show() {
    for kernel in all_family_kernels() {
        if kernel.expected() != Expected::KnownBad {
            continue;
        }
        let mut checked = 0;
        for case in hand_cases(kernel.family()) {
            let claims = kernel.defective_ops().contains(&case.op)
                && kernel.defect_dtypes().contains(&case.dtype);
            let shows = match kernel.name() {
                // Each defect's reach, from its description: the cases it may spoil (a superset);
                // outside it the kernel must conform.
                // One-pass cancels by (mean/σ)²; the hand cases' mean is at most ~1σ.
                "bad-ln-onepass" | "bad-ln-backward-onepass" | "bad-gn-onepass" => false,
                "bad-ln-no-eps" | "bad-ln-eps-outside-sqrt" => claims,
                // f32 arithmetic on f64 data: every f64 case of its ops (`claims` holds the
                // dtype); in the other dtypes it is the good two-pass kernel
                "bad-ln-f32-compute" | "bad-rms-f32-compute" | "bad-gn-f32-compute" => claims,
                // an f32 eps on f64 data: every f64 case whose eps f32 does not represent
                "bad-rms-f32-inputs" | "bad-rms-f32-rms" => claims,
                "bad-ln-eps-f32" | "bad-rms-eps-f32" | "bad-gn-eps-f32" => {
                    claims && case.eps as f32 as f64 != case.eps
                }
                // The sharpness controls change rstd, and so every output, wherever var + eps
                // is not 0 (every case): nothing of their ops is outside their reach.
                name if SHARPNESS_CONTROLS.contains(&name) => claims,
                "bad-ln-half-xhat-dgamma" => {
                    claims && case.param_dtype != case.dtype && case.affine.has_weight()
                }
                "bad-ln-half-rstd-dgamma" | "bad-gn-half-rstd-dgamma" => {
                    claims && case.param_dtype != case.dtype && case.affine.has_weight()
                }
                "bad-ln-half-param-sums" => {
                    claims && case.param_dtype != case.dtype && case.affine != Affine::None
                }
                "bad-ln-backward-one-axis" => claims && case.normalized_ndim > Some(1),
                "bad-rms-bf16-dgamma" => claims && case.affine.has_weight(),
                "bad-rms-f16-sumsq-overflow" => claims,
                "bad-rms-offset-ignored" => {
                    claims && case.convention == RmsConvention::Offset && case.affine.has_weight()
                }
                "bad-gn-pow2-groups" => {
                    let c = channel_dims(case.layout, &case.shape).unwrap().1;
                    let g = case.groups.unwrap();
                    claims && g > 1 && !(c / g).is_power_of_two()
                }
                "bad-gn-channels-last" => {
                    let (_, c, s) = channel_dims(case.layout, &case.shape).unwrap();
                    let g = case.groups.unwrap();
                    claims
                        && case.layout.channels_last()
                        && c > 1
                        && s > 1
                        && (g > 1 || case.affine.has_weight())
                }
                other => panic!("{other}: add its reach here"),
            };
            if shows {
                continue;
            }
            checked += 1;
            let worst = worst_ratio(kernel.as_ref(), &case);
            let tol = tolerance(&case);
            assert!(
                worst <= tol,
                "{} on {}: worst {worst:e} > {tol:e} where its defect cannot show",
                kernel.name(),
                describe(&case)
            );
        }
        // eps handling spoils every op of its family: nothing is outside its reach.
        let everywhere = ["bad-ln-no-eps", "bad-ln-eps-outside-sqrt"].contains(&kernel.name())
            || SHARPNESS_CONTROLS.contains(&kernel.name());
        assert!(
            everywhere || checked >= 20,
            "{}: only {checked} cases outside its reach",
            kernel.name()
        );
    }
}

#[test]
fn outputs_are_the_ops_outputs_in_their_dtype_and_deterministic() {
    for kernel in all_family_kernels() {
        for case in hand_cases(kernel.family()) {
            let out = kernel.run(&case).unwrap();
            let all = case.op.outputs(case.affine);
            let optional = case.op.optional_outputs();
            for name in &all {
                assert!(
                    out.contains_key(*name) || optional.contains(name),
                    "{}: required output {name} missing",
                    kernel.name()
                );
            }
            let g = case.validate().unwrap();
            for (name, v) in &out {
                assert!(
                    all.contains(&name.as_str()),
                    "{}: extra {name}",
                    kernel.name()
                );
                let want = match name.as_str() {
                    "y" | "dx" => g.len(),
                    "dgamma" | "dbeta" => g.n_params(),
                    _ => g.groups().len(),
                };
                assert_eq!(v.len(), want, "{} {name}", kernel.name());
                let d = case.dtype_of(name);
                assert!(
                    v.iter().all(|&e| d.round(e) == e || e.is_nan()),
                    "{name} not in {d}"
                );
            }
            let bits = |o: &Outputs| -> Vec<Vec<u64>> {
                o.values()
                    .map(|v| v.iter().map(|e| e.to_bits()).collect())
                    .collect()
            };
            let again = kernel.run(&case).unwrap();
            assert_eq!(
                bits(&again),
                bits(&out),
                "{} not deterministic",
                kernel.name()
            );
        }
        // Another family's op is unsupported, not an invalid case.
        let other = Family::ALL.iter().find(|f| **f != kernel.family()).unwrap();
        let case = hand_cases(*other).remove(0);
        let err = kernel.run(&case).unwrap_err().0;
        assert!(!err.starts_with("invalid case"), "{err}");
    }
}

#[test]
fn half_storage_kernels_return_y_only_and_twopass_its_statistics() {
    let case = Spec::last(
        FamilyOp::LayerNorm,
        &[2, 8],
        1,
        Dtype::F16,
        Affine::WeightBias,
    )
    .build(9);
    let keys = |name: &str| -> Vec<String> {
        family_kernel_by_name(name)
            .unwrap()
            .run(&case)
            .unwrap()
            .into_keys()
            .collect()
    };
    assert_eq!(keys("ln-half-f32acc"), ["y"]);
    assert_eq!(keys("ln-twopass"), ["mean", "rstd", "y"]);
    assert!(family_kernel_by_name("no-such-kernel").is_none());
    let names: Vec<&str> = all_family_kernels().iter().map(|k| k.name()).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate kernel names");
    for k in all_family_kernels() {
        let prefix = match k.family() {
            Family::LayerNorm => "ln-",
            Family::RmsNorm => "rms-",
            Family::GroupNorm => "gn-",
        };
        let bare = k.name().strip_prefix("bad-").unwrap_or(k.name());
        assert!(bare.starts_with(prefix), "{}", k.name());
        assert_eq!(
            k.name().starts_with("bad-"),
            k.expected() == Expected::KnownBad
        );
        assert_eq!(k.defective_ops().is_empty(), k.expected() == Expected::Good);
        if k.expected() == Expected::Good {
            assert_eq!(k.defect_dtypes(), Dtype::ALL, "{}", k.name());
        }
        assert!(k.description().len() > 40);
        assert!(family_kernels(k.family())
            .iter()
            .any(|f| f.name() == k.name()));
    }
}

/// The field a malformed case's validation names (and the kernel's error says it too).
fn field_of(case: &FamilyCase) -> String {
    let e: FamilyError = case.validate().unwrap_err();
    let run = good_twopass(case.op.family()).run(case).unwrap_err().0;
    assert!(
        run.starts_with("invalid case: ") && run.contains(&format!("`{}`", e.field)),
        "{run}"
    );
    e.field
}

#[test]
fn bad_input_is_an_error_naming_the_field() {
    let ln = || {
        Spec::last(
            FamilyOp::LayerNorm,
            &[2, 3, 4],
            1,
            Dtype::F32,
            Affine::WeightBias,
        )
        .build(1)
    };
    let gn = || {
        Spec::channels(
            FamilyOp::GroupNorm,
            FamilyLayout::Nchw,
            &[2, 6, 2, 1],
            2,
            Dtype::F32,
            Affine::WeightBias,
        )
        .build(1)
    };
    let rms = || Spec::last(FamilyOp::RmsNorm, &[2, 4], 1, Dtype::F32, Affine::Weight).build(1);
    let with = |mut c: FamilyCase, f: &dyn Fn(&mut FamilyCase)| {
        f(&mut c);
        c
    };
    let cases: Vec<(&str, FamilyCase)> = vec![
        ("groups", with(gn(), &|c| c.groups = Some(4))),
        ("groups", with(gn(), &|c| c.groups = Some(0))),
        ("groups", with(gn(), &|c| c.groups = None)),
        ("groups", with(ln(), &|c| c.groups = Some(1))),
        (
            "normalized_ndim",
            with(ln(), &|c| c.normalized_ndim = Some(0)),
        ),
        (
            "normalized_ndim",
            with(ln(), &|c| c.normalized_ndim = Some(4)),
        ),
        (
            "normalized_ndim",
            with(ln(), &|c| c.normalized_ndim = Some(3)),
        ),
        ("normalized_ndim", with(ln(), &|c| c.normalized_ndim = None)),
        (
            "normalized_ndim",
            with(gn(), &|c| c.normalized_ndim = Some(1)),
        ),
        (
            "gamma",
            with(ln(), &|c| {
                c.inputs.get_mut("gamma").unwrap().pop();
            }),
        ),
        (
            "beta",
            with(gn(), &|c| {
                c.inputs.get_mut("beta").unwrap().push(0.0);
            }),
        ),
        (
            "beta",
            with(ln(), &|c| {
                c.inputs.remove("beta");
            }),
        ),
        ("beta", with(ln(), &|c| c.affine = Affine::Weight)),
        ("gamma", with(rms(), &|c| c.affine = Affine::None)),
        (
            "x",
            with(ln(), &|c| {
                c.inputs.get_mut("x").unwrap().pop();
            }),
        ),
        (
            "dy",
            with(ln(), &|c| {
                c.inputs.insert("dy".into(), vec![0.0; 24]);
            }),
        ),
        ("affine", with(rms(), &|c| c.affine = Affine::WeightBias)),
        (
            "convention",
            with(ln(), &|c| c.convention = RmsConvention::Offset),
        ),
        ("layout", with(ln(), &|c| c.layout = FamilyLayout::Nchw)),
        ("layout", with(gn(), &|c| c.layout = FamilyLayout::Last)),
        ("shape", with(gn(), &|c| c.shape = vec![2, 6, 2])),
        ("shape", with(gn(), &|c| c.shape = vec![2, 6, 0, 1])),
        ("shape", with(ln(), &|c| c.shape = vec![2, 0, 4])),
        ("eps", with(ln(), &|c| c.eps = -1e-5)),
        ("eps", with(ln(), &|c| c.eps = f64::NAN)),
        ("param_dtype", with(ln(), &|c| c.param_dtype = Dtype::F64)),
        // A huge shape is refused by its inputs' lengths before anything is allocated.
        (
            "beta",
            with(ln(), &|c| c.shape = vec![1 << 20, 1 << 20, 1 << 10]),
        ),
        (
            "x",
            with(gn(), &|c| c.shape = vec![1 << 20, 6, 1 << 20, 1 << 10]),
        ),
    ];
    for (field, case) in &cases {
        assert_eq!(field_of(case), *field, "{case:?}");
    }
    // Names that are not in the vocabulary: the parser names the field and the choices.
    let e = RmsConvention::parse("gemma").unwrap_err();
    assert_eq!(e.field, "convention");
    assert!(e.to_string().contains("standard, offset"), "{e}");
    assert_eq!(Affine::parse("bias").unwrap_err().field, "affine");
    assert_eq!(FamilyLayout::parse("hwc").unwrap_err().field, "layout");
    assert_eq!(FamilyOp::parse("instance_norm").unwrap_err().field, "op");
    assert_eq!(RmsConvention::parse("offset"), Ok(RmsConvention::Offset));
    // A half dtype may keep its parameters in f32 (mixed precision).
    let mixed = with(
        Spec::last(
            FamilyOp::LayerNorm,
            &[2, 4],
            1,
            Dtype::BF16,
            Affine::WeightBias,
        )
        .build(1),
        &|c| c.param_dtype = Dtype::F32,
    );
    assert!(mixed.validate().is_ok());
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Every good kernel agrees with the exact reference on random well-scaled cases of its
    /// family: shapes, normalized_ndim 1..=3, groups (1, C, and between), every layout,
    /// affine mode, convention, and dtype (half ones mixed or not).
    #[test]
    fn good_kernels_agree_with_the_exact_reference(spec in any_spec(), seed in any::<u64>()) {
        let case = spec.build(seed);
        for kernel in family_kernels(case.op.family()) {
            if kernel.expected() == Expected::Good {
                let worst = worst_ratio(kernel.as_ref(), &case);
                let tol = tolerance(&case);
                prop_assert!(worst <= tol, "{} on {}: {worst:e} > {tol:e}", kernel.name(), describe(&case));
            }
        }
    }
}
