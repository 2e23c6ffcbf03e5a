//! The one-pass judge of large layout-`last` family cases (`judge::family_rows::judge_last`,
//! what `check --case` takes for layer_norm and rms_norm) gives the prepared judge's result
//! (`FamilyPrepared::judge`) bit for bit: every output's worst ratio, index, expected value,
//! budget, count over the gate and sharpness. On generated cases (`PROPTEST_CASES` of them,
//! default 48): every op, affine mode, convention and four precisions, rows of 64 to 4096
//! cells in several chunks of rows (the last one partial), one or two normalized dims; the
//! outputs correctly rounded, perturbed (over and under the gate, at the gate where the exact
//! fallback decides, NaN, infinite), with and without the optional statistics. Where it does
//! not apply (a small case, a missing or extra output, a wrong length) it declines. Run in
//! release.

use bnconf::judge::family::{prepare_family, FamilyPrepared, FAMILY_FAST_MIN_LEN};
use bnconf::judge::family_rows::judge_last;
use bnconf::judge::verdict::Verdict;
use bnconf::suite::family::{format_of, FamilySuiteCase};
use bnconf::suite::{Level, Precision, Rng};
use bnconf_impl::family::{Affine, FamilyCase, FamilyLayout, FamilyOp, RmsConvention};
use bnconf_impl::Dtype;
use bnconf_spec::exact::round::FloatFormat;
use std::collections::BTreeMap;

fn cases() -> usize {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

fn round_to(v: f64, f: FloatFormat) -> f64 {
    bnconf::formats::family_case::round_f64_to(v, f)
}

/// A generated layout-`last` case of at least [`FAMILY_FAST_MIN_LEN`] cells.
fn draw(seed: u64) -> FamilySuiteCase {
    let mut rng = Rng::new(seed);
    let op = pick(
        &mut rng,
        &[
            FamilyOp::LayerNorm,
            FamilyOp::LayerNormBackward,
            FamilyOp::RmsNorm,
            FamilyOp::RmsNormBackward,
        ],
    );
    let rms = matches!(op, FamilyOp::RmsNorm | FamilyOp::RmsNormBackward);
    let affine = if rms {
        pick(&mut rng, &[Affine::Weight, Affine::None])
    } else {
        pick(
            &mut rng,
            &[Affine::WeightBias, Affine::Weight, Affine::None],
        )
    };
    let convention = if rms && affine != Affine::None && rng.below(2) == 0 {
        RmsConvention::Offset
    } else {
        RmsConvention::Standard
    };
    let (dtype, param) = pick(
        &mut rng,
        &[
            (Dtype::F32, Dtype::F32),
            (Dtype::F64, Dtype::F64),
            (Dtype::F16, Dtype::F32),
            (Dtype::BF16, Dtype::F32),
        ],
    );
    // (shape, normalized_ndim): chunks of 64 rows, the last partial; rows ≤ 16 (dgamma's
    // exact form reported); two batch dims; two normalized dims.
    let (shape, nd) = pick(
        &mut rng,
        &[
            (&[129usize, 128][..], 1usize),
            (&[16, 1024], 1),
            (&[2, 3, 4096], 1),
            (&[65, 16, 16], 2),
            (&[300, 64], 1),
        ],
    );
    let n: usize = shape.iter().product();
    let k: usize = shape[shape.len() - nd..].iter().product();
    assert!(n >= FAMILY_FAST_MIN_LEN);
    let (fa, fp) = (
        bnconf::suite::family::format_of(dtype),
        bnconf::suite::family::format_of(param),
    );
    let mut x = Vec::with_capacity(n);
    for _ in 0..n / k {
        // per row: centred, offset (a large mean), small, or with exact zeros
        let (off, scale, zeros) = pick(
            &mut rng,
            &[
                (0.0, 1.0, false),
                (100.0, 0.5, false),
                (0.0, 1e-3, false),
                (0.0, 3.0, true),
            ],
        );
        for _ in 0..k {
            let v = if zeros && rng.below(4) == 0 {
                0.0
            } else {
                off + scale * rng.range(-1.0, 1.0)
            };
            x.push(round_to(v, fa));
        }
    }
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), x);
    if op.is_backward() {
        let dy = (0..n).map(|_| round_to(rng.range(-1.0, 1.0), fa)).collect();
        inputs.insert("dy".to_string(), dy);
    }
    if affine.has_weight() {
        let g = (0..k).map(|_| round_to(rng.range(-2.0, 2.0), fp)).collect();
        inputs.insert("gamma".to_string(), g);
    }
    if affine.has_bias() && !op.is_backward() {
        let b = (0..k).map(|_| round_to(rng.range(-1.0, 1.0), fp)).collect();
        inputs.insert("beta".to_string(), b);
    }
    let case = FamilyCase {
        op,
        layout: FamilyLayout::Last,
        shape: shape.to_vec(),
        dtype,
        param_dtype: param,
        eps: pick(&mut rng, &[1e-5, 1e-6, 0.0]),
        normalized_ndim: Some(nd),
        groups: None,
        affine,
        convention,
        inputs,
    };
    case.validate().unwrap();
    FamilySuiteCase {
        id: format!("gen.{seed}.{op}.{dtype}.{affine}.{convention}"),
        level: Level::Core,
        class: "gen".into(),
        precision: Precision { act: fa, param: fp }.static_name(),
        case,
    }
}

/// Outputs perturbed from the correctly rounded ones: a few elements of each output moved
/// relatively (under and over the gate), one to the gate (the exact fallback's ground), and
/// on some draws a NaN and an infinity.
fn perturbed(p: &FamilyPrepared, rng: &mut Rng) -> BTreeMap<String, Vec<f64>> {
    let mut out = p.rounded_goldens();
    for (name, v) in out.iter_mut() {
        let u = format_of(p.case.case.dtype_of(name)).unit_roundoff();
        let len = v.len() as u64;
        for _ in 0..1 + rng.below(6) {
            let i = rng.below(len) as usize;
            let rel = pick(rng, &[1e-9, 1e-6, 1e-4, 1e-2, 0.3]);
            v[i] *= 1.0 + pick(rng, &[-1.0, 1.0]) * rel;
            if v[i] == 0.0 {
                v[i] = rel * u;
            }
        }
        // one element at the gate: the budget's allowed error from the rounded value
        let i = rng.below(len) as usize;
        let budget = &p.budgets.outputs[name.as_str()][i];
        let k = p.budgets.gate[name.as_str()];
        v[i] += k * u * budget.total(u) * pick(rng, &[1.0, -1.0, 1.0 + 1e-12, 1.0 - 1e-12]);
        // non-finite values: the first of equal worst ratios is the one reported
        for _ in 0..rng.below(3) {
            let j = rng.below(len) as usize;
            v[j] = pick(rng, &[f64::NAN, f64::INFINITY, -f64::INFINITY]);
        }
    }
    out
}

/// `judge_last` gives `p.judge`'s result on `computed`, bit for bit (the `Debug` form prints
/// every float so that it reads back to the same bits).
fn check(p: &FamilyPrepared, computed: &BTreeMap<String, Vec<f64>>, what: &str) -> Verdict {
    let want = p.judge(computed);
    let got = judge_last(&p.case, computed)
        .unwrap_or_else(|| panic!("{}: {what}: the one-pass judge declined", p.case.id));
    assert_eq!(
        format!("{got:#?}"),
        format!("{want:#?}"),
        "{}: {what}",
        p.case.id
    );
    want.verdict
}

#[test]
fn the_one_pass_judge_is_the_prepared_judge() {
    let (mut passed, mut failed) = (0, 0);
    for seed in 0..cases() as u64 {
        let sc = draw(20261207 + seed);
        let p = prepare_family(&sc).unwrap_or_else(|e| panic!("{}: {e}", sc.id));
        assert!(p.fast.is_some(), "{}: judged through the fast cells", sc.id);
        let mut rng = Rng::new(seed);
        let golden = p.rounded_goldens();
        assert_eq!(check(&p, &golden, "correctly rounded"), Verdict::Pass);
        for t in 0..3 {
            match check(&p, &perturbed(&p, &mut rng), &format!("perturbed {t}")) {
                Verdict::Pass => passed += 1,
                _ => failed += 1,
            }
        }
        // without the optional statistics (forward)
        let mut some = golden.clone();
        for name in sc.case.op.optional_outputs() {
            some.remove(*name);
        }
        check(&p, &some, "without the optional outputs");
    }
    // the perturbations give both verdicts
    assert!(passed > 0 && failed > 0, "{passed} passed, {failed} failed");
}

#[test]
fn the_one_pass_judge_declines_what_it_does_not_judge() {
    let sc = draw(7);
    let p = prepare_family(&sc).unwrap();
    let golden = p.rounded_goldens();
    assert!(judge_last(&sc, &golden).is_some());
    let cell = if sc.case.op.is_backward() { "dx" } else { "y" };
    // a required output missing, an extra one, a wrong length: malformed, for the prepared
    // judge to say so
    let mut missing = golden.clone();
    missing.remove(cell);
    assert!(judge_last(&sc, &missing).is_none());
    let mut extra = golden.clone();
    extra.insert("dz".into(), vec![0.0]);
    assert!(judge_last(&sc, &extra).is_none());
    let mut short = golden.clone();
    short.get_mut(cell).unwrap().pop();
    assert!(judge_last(&sc, &short).is_none());
    // a small case: judged per element exactly
    let mut small = sc.clone();
    let k = *small.case.shape.last().unwrap();
    let rows = 2;
    small.case.shape = vec![rows, k];
    small.case.normalized_ndim = Some(1);
    for name in ["x", "dy"] {
        if let Some(v) = small.case.inputs.get_mut(name) {
            v.truncate(rows * k);
        }
    }
    small.case.validate().unwrap();
    let ps = prepare_family(&small).unwrap();
    assert!(judge_last(&small, &ps.rounded_goldens()).is_none());
    // an input outside the fast path's range
    let mut far = sc.clone();
    far.case.inputs.get_mut("x").unwrap()[3] = 1e300;
    assert!(judge_last(&far, &golden).is_none());
}
