//! `family=` in the Rust library API (`bnconf::testing`): a LayerNorm, RMSNorm or GroupNorm
//! kernel judged from `cargo test` through the same `KernelCase`, closure and `Report` as a
//! BatchNorm one. Built-in family kernels play the user's (good ones conform, known-bad ones
//! are rejected), a kernel written here conforms returning only its required outputs, and bad
//! options or cases name their field. Run in release.

use bnconf::testing::{
    cases, check_case, check_kernel_with, reference_kernel, KernelCase, Options, Outputs,
};

/// Options of the family suite `family` in `dtype`, restricted to `ops`.
fn opts(family: &str, dtype: &str, ops: &[&str]) -> Options {
    Options::new("default", dtype).family(family).ops(ops)
}

/// A two-pass LayerNorm/RMSNorm/GroupNorm forward in f64, written from the case's own
/// grouping: `y` only (`mean`, `rstd` are optional).
fn my_forward(case: &KernelCase) -> Option<Outputs> {
    forward_with(case, 1.0)
}

/// [`my_forward`] with the variance multiplied by `var_factor` (2: a defect).
fn forward_with(case: &KernelCase, var_factor: f64) -> Option<Outputs> {
    if !matches!(case.op(), "layer_norm" | "rms_norm" | "group_norm") {
        return None;
    }
    let x = case.input("x");
    let (w, b) = (case.weight(), case.bias());
    let offset = case.convention() == Some("offset");
    let param = case.param_index();
    let mut y = vec![0.0; x.len()];
    for cells in case.norm_groups() {
        let k = cells.len() as f64;
        let centred = case.op() != "rms_norm";
        let mean = if centred {
            cells.iter().map(|&i| x[i]).sum::<f64>() / k
        } else {
            0.0
        };
        let var = var_factor * cells.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / k;
        let rstd = 1.0 / (var + case.eps()).sqrt();
        for &i in &cells {
            let g = if offset {
                1.0 + w[param[i]]
            } else {
                w[param[i]]
            };
            y[i] = g * (x[i] - mean) * rstd + b[param[i]];
        }
    }
    Some(Outputs::from([("y".to_string(), y)]))
}

#[test]
fn built_in_good_kernels_conform_through_the_library() {
    for (family, kernel, dtype) in [
        ("layer_norm", "ln-twopass", "f32"),
        ("layer_norm", "ln-half-f32acc", "bf16+f32"),
        ("rms_norm", "rms-twopass", "f64"),
        ("rms_norm", "rms-half-f32acc", "f16+f32"),
        ("group_norm", "gn-twopass", "f32"),
        ("group_norm", "gn-half-f32acc", "f16"),
    ] {
        let r = check_kernel_with(&opts(family, dtype, &[]), reference_kernel(kernel));
        assert!(r.ok(), "{kernel} {dtype}: {r}");
        assert!(
            r.conforming() >= 15,
            "{kernel} {dtype}: only {} cases",
            r.conforming()
        );
        assert_eq!(r.unsupported(), 0, "{kernel} {dtype}: {r}");
    }
}

#[test]
fn known_bad_family_kernels_are_rejected_and_the_report_says_where() {
    for (family, kernel, dtype) in [
        ("layer_norm", "bad-ln-var-doubled", "f32"),
        ("layer_norm", "bad-ln-half-xhat-dgamma", "bf16+f32"),
        ("rms_norm", "bad-rms-offset-ignored", "f64"),
        ("group_norm", "bad-gn-pow2-groups", "f32"),
    ] {
        let r = check_kernel_with(&opts(family, dtype, &[]), reference_kernel(kernel));
        assert!(!r.ok(), "{kernel} {dtype} passed: {r}");
        assert!(r.not_conforming() > 0);
        let text = r.to_string();
        let worst = r.failures()[0];
        assert!(
            text.contains(&worst.id) && text.contains("expected") && text.contains("ratio"),
            "{kernel}: the report does not detail its worst case:\n{text}"
        );
    }
}

#[test]
fn a_users_kernel_returning_only_required_outputs_conforms() {
    for (family, op, dtype) in [
        ("layer_norm", "layer_norm", "f64"),
        ("layer_norm", "layer_norm", "f32"),
        ("rms_norm", "rms_norm", "f32"),
        ("group_norm", "group_norm", "f64"),
    ] {
        let r = check_kernel_with(&opts(family, dtype, &[op]), my_forward);
        assert!(r.ok(), "{op} {dtype}: {r}");
        // The same kernel with the variance doubled is rejected.
        let doubled = |case: &KernelCase| forward_with(case, 2.0);
        let r = check_kernel_with(&opts(family, dtype, &[op]), doubled);
        assert!(!r.ok(), "{op} {dtype}: a doubled variance passed: {r}");
    }
}

#[test]
fn a_missing_required_output_is_malformed_and_an_optional_one_may_be_left_out() {
    let o = opts("layer_norm", "f64", &["layer_norm_backward"]);
    let all = cases(&o).unwrap();
    let case = &all[0];
    assert_eq!(case.family(), "layer_norm");
    assert!(case.outputs().contains(&"dgamma") || case.affine() == Some("none"));
    let good = reference_kernel("ln-twopass");
    let out = good(case).unwrap();
    assert!(check_case(case, |_| Some(out.clone())).ok());
    let mut missing = out.clone();
    missing.remove("dx");
    let r = check_case(case, |_| Some(missing.clone()));
    assert!(!r.ok());
    assert_eq!(r.results()[0].verdict.name(), "MALFORMED", "{r}");

    let fwd = &cases(&opts("layer_norm", "f64", &["layer_norm"])).unwrap()[0];
    assert_eq!(fwd.optional_outputs(), ["mean", "rstd"]);
    let mut y_only = good(fwd).unwrap();
    y_only.retain(|k, _| k == "y");
    assert!(check_case(fwd, |_| Some(y_only.clone())).ok());
}

#[test]
fn every_case_of_the_library_is_the_run_suites_case_and_its_grouping_covers_x() {
    for family in ["layer_norm", "rms_norm", "group_norm"] {
        let all = cases(&opts(family, "f32", &[])).unwrap();
        assert!(all.len() >= 15, "{family}: {} cases", all.len());
        for c in &all {
            assert_eq!(c.family(), family);
            let n = c.input("x").len();
            let groups = c.norm_groups();
            let mut seen = vec![0; n];
            for g in &groups {
                for &i in g {
                    seen[i] += 1;
                }
            }
            assert!(
                seen.iter().all(|&s| s == 1),
                "{}: cells not a partition",
                c.id
            );
            let p = c.param_index();
            assert_eq!(p.len(), n);
            assert!(p.iter().all(|&i| i < c.weight().len()), "{}", c.id);
            match family {
                "group_norm" => assert!(c.groups().is_some() && c.normalized_ndim().is_none()),
                _ => assert!(c.normalized_ndim().is_some() && c.groups().is_none()),
            }
        }
    }
}

#[test]
fn bad_options_and_cases_name_their_field() {
    let k = reference_kernel("ln-twopass");
    let err = |o: &Options| {
        check_kernel_with(o, &k)
            .error_message()
            .unwrap_or_else(|| panic!("{o:?} gave no error"))
            .to_string()
    };
    assert!(err(&Options::new("default", "f32").family("batchnorm")).contains("family"));
    assert!(err(&opts("layer_norm", "f32", &["rms_norm"])).contains("ops"));
    assert!(err(&Options::new("replicated", "f32").family("layer_norm")).contains("suite"));
    assert!(err(&opts("layer_norm", "f8", &[])).contains("dtype"));

    let case = cases(&opts("group_norm", "f64", &["group_norm"])).unwrap()[0].clone();
    let mut bad = case.clone();
    bad.groups = Some(7);
    let r = check_case(&bad, &k);
    assert!(r.error_message().unwrap().contains("groups"), "{r}");
    let mut bad = case.clone();
    bad.affine = Some("both".into());
    assert!(check_case(&bad, &k)
        .error_message()
        .unwrap()
        .contains("affine"));
    let f32_case = cases(&opts("group_norm", "f32", &["group_norm"])).unwrap()[0].clone();
    let mut bad = f32_case.clone();
    bad.inputs.get_mut("x").unwrap()[0] = 0.1; // not an f32 value
    assert!(check_case(&bad, &k)
        .error_message()
        .unwrap()
        .contains("inputs.x[0]"));
}

/// Cases per property: `PROPTEST_CASES`, or 256.
fn prop_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(prop_cases()))]

    /// Every generated family case (any op, class and precision, fresh data) is judged
    /// conforming for every built-in good kernel of its family.
    #[test]
    fn generated_family_cases_judge_good_kernels_conforming(
        case in bnconf::testing::family::family_strategy(&[], &[])
    ) {
        let good: &[&str] = match case.family() {
            "layer_norm" => &["ln-twopass", "ln-welford", "ln-half-f32acc"],
            "rms_norm" => &["rms-twopass", "rms-half-f32acc"],
            _ => &["gn-twopass", "gn-half-f32acc"],
        };
        for name in good {
            let r = check_case(&case, reference_kernel(name));
            proptest::prop_assert!(r.ok(), "{name}: {}", r);
            proptest::prop_assert_eq!(r.results().len(), 1);
        }
    }
}
