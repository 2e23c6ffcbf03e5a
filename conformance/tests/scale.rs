//! Large cases: judging through the fast cells (exact per-channel constants, double-double per
//! element, exact fallback) gives the exact path's budgets, verdicts and ratios; and the
//! `scale` suite sees block-merge bugs that no small case can.

use bnconf::judge::check::{self, judged_fast, prepare_with, CaseResult, Prepared, Verdict};
use bnconf::suite::{self, to_dtype, Filter, Level, Rng, SuiteCase};
use bnconf_impl::kernel_by_name;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::{Geometry, Layout, Op};
use std::collections::BTreeMap;

/// A case of `op` with `len ≥ 2^14` cells: large mean (so the rounding of the statistics
/// matters), handed-in statistics near the batch's for the ops that take them.
fn big_case(op: Op, layout: Layout, dtype: FloatFormat, seed: u64) -> SuiteCase {
    let (n, c, h, w) = (3, 4, 37, 41);
    let shape = match layout {
        Layout::Nchw => vec![n, c, h, w],
        Layout::Nhwc => vec![n, h, w, c],
        _ => vec![c, n * h * w],
    };
    let g = Geometry::new(layout, &shape, usize::MAX).unwrap();
    let mut rng = Rng::new(seed);
    let mut x = vec![0.0; g.len()];
    let mut dy = vec![0.0; g.len()];
    let mut stats = Vec::new();
    for ch in 0..c {
        let mu = 100.0 * (ch as f64 + 1.0);
        let sd = 0.5 + ch as f64;
        let (mut s1, mut s2) = (0.0, 0.0);
        for k in 0..g.m {
            let v = to_dtype(mu + sd * rng.normal(), dtype);
            x[g.offset(ch, k)] = v;
            dy[g.offset(ch, k)] = to_dtype(rng.normal(), dtype);
            s1 += v;
            s2 += v * v;
        }
        let mean = s1 / g.m as f64;
        stats.push((mean, s2 / g.m as f64 - mean * mean));
    }
    let per = |f: &dyn Fn(usize) -> f64| (0..c).map(|ch| to_dtype(f(ch), dtype)).collect();
    let mut inputs = BTreeMap::new();
    for &name in op.inputs() {
        let v: Vec<f64> = match name {
            "x" => x.clone(),
            "dy" => dy.clone(),
            "gamma" => per(&|ch| if ch == 2 { -1.25 } else { 0.75 + ch as f64 }),
            "beta" => per(&|ch| 0.5 - ch as f64),
            "mean" => per(&|ch| stats[ch].0 * (1.0 + 1e-6)),
            "var" => per(&|ch| stats[ch].1 * 1.01),
            "m2" => per(&|ch| stats[ch].1 * 1.01 + stats[ch].0 * stats[ch].0),
            "mean_dy" => per(&|ch| 0.01 * ch as f64),
            "mean_dy_xhat" => per(&|ch| -0.02 * ch as f64),
            _ => unreachable!("{name}"),
        };
        inputs.insert(name.to_string(), v);
    }
    SuiteCase {
        id: format!("big.{}.{}.{}", op.name(), layout.name(), dtype.name()),
        level: Level::Conditioning,
        class: "big".into(),
        target: String::new(),
        dtype,
        param_dtype: dtype,
        op,
        layout,
        shape,
        eps: "1e-5".into(),
        momentum: None,
        convention: None,
        inputs,
        shard_sizes: vec![],
    }
}

fn same(a: &CaseResult, b: &CaseResult) -> Result<(), String> {
    if a.verdict != b.verdict {
        return Err(format!("verdict {:?} vs {:?}", a.verdict, b.verdict));
    }
    for (oa, ob) in a.outputs.iter().zip(&b.outputs) {
        let close = oa.worst_ratio == ob.worst_ratio
            || (oa.worst_ratio - ob.worst_ratio).abs() <= 1e-9 * ob.worst_ratio.abs();
        if !close || oa.n_over != ob.n_over || oa.expected != ob.expected {
            return Err(format!(
                "{}: ratio {} vs {}, over {} vs {}, expected {} vs {}",
                oa.name,
                oa.worst_ratio,
                ob.worst_ratio,
                oa.n_over,
                ob.n_over,
                oa.expected,
                ob.expected
            ));
        }
    }
    Ok(())
}

#[test]
fn fast_cells_judge_exactly_like_the_exact_path() {
    let ops = [
        Op::Forward,
        Op::Backward,
        Op::Eval,
        Op::SyncForward,
        Op::SyncBackward,
    ];
    let kernels = [
        "twopass-native",
        "bad-unbiased-var",
        "bad-onepass-var",
        "bad-eps-f16",
    ];
    let mut cases = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc, Layout::Rows] {
            for dtype in [FloatFormat::F32, FloatFormat::F64] {
                cases.push(big_case(op, layout, dtype, 17 + i as u64));
            }
        }
    }
    assert!(cases.iter().all(judged_fast));
    let fast = prepare_with(&cases, true).unwrap();
    let exact = prepare_with(&cases, false).unwrap();
    let (mut failing, mut passing) = (0, 0);
    for (pf, pe) in fast.iter().zip(&exact) {
        assert!(pf.fast.is_some() && pe.fast.is_none());
        for &name in pf.case.op.outputs() {
            assert_eq!(
                pf.budgets_of(name),
                pe.budgets[name],
                "{}: budgets of {name} differ",
                pf.case.id
            );
        }
        for name in kernels {
            let k = kernel_by_name(name).unwrap();
            let out = k.run(&pf.case.to_kernel_case()).unwrap();
            let (rf, re) = (pf.judge(&out), pe.judge(&out));
            same(&rf, &re).unwrap_or_else(|e| panic!("{} / {name}: {e}", pf.case.id));
            // Outputs off by one ulp in a few places and by a lot in one.
            let mut bent = out.clone();
            let v = bent.get_mut(pf.case.op.outputs()[0]).unwrap();
            for j in (0..v.len()).step_by(997) {
                v[j] = f64::from_bits(v[j].to_bits() + 1);
            }
            v[5] = -v[5] * 3.0 + 1.0;
            same(&pf.judge(&bent), &pe.judge(&bent))
                .unwrap_or_else(|e| panic!("{} / {name} (bent): {e}", pf.case.id));
            match re.verdict {
                Verdict::Pass => passing += 1,
                _ => failing += 1,
            }
        }
    }
    assert!(
        failing > 10 && passing > 10,
        "{failing} failing, {passing} passing"
    );
}

/// A suite of `dtype`, each case prepared (its exact golden computed) once.
fn prepared(name: &str, dtype: FloatFormat) -> Vec<Prepared> {
    let s = suite::generate(name, &[dtype], suite::DEFAULT_SEED, &Filter::default()).unwrap();
    check::prepare(&s.cases).unwrap()
}

fn run(prepared: &[Prepared], kernel: &str) -> Vec<CaseResult> {
    check::run_kernel(kernel_by_name(kernel).unwrap().as_ref(), prepared)
}

#[test]
fn the_scale_suite_has_the_sizes_of_the_contract() {
    let s = suite::generate(
        "scale",
        &[FloatFormat::F32],
        suite::DEFAULT_SEED,
        &Filter::default(),
    )
    .unwrap();
    let geoms: Vec<Geometry> = s
        .cases
        .iter()
        .map(|c| Geometry::new(c.layout, &c.shape, usize::MAX).unwrap())
        .collect();
    let max_m = geoms.iter().map(|g| g.m).max().unwrap();
    let max_c = geoms.iter().map(|g| g.c).max().unwrap();
    let max_n = geoms.iter().map(|g| g.n).max().unwrap();
    assert!(max_m >= 1 << 20, "{max_m}");
    assert!(max_c >= 2048 && !max_c.is_power_of_two(), "{max_c}");
    assert_eq!(max_n, 64);
    assert!(geoms.iter().all(|g| !g.m.is_power_of_two()));
    for layout in [Layout::Nchw, Layout::Nhwc] {
        for level in [Level::Core, Level::Conditioning] {
            assert!(s
                .cases
                .iter()
                .any(|c| c.layout == layout && c.level == level));
        }
    }
    assert!(s.cases.iter().all(judged_fast));
    assert!(s.excluded.is_empty(), "{:?}", s.excluded);
}

#[test]
fn block_merge_kernels_conform_and_block_merge_mutants_are_rejected_on_scale() {
    for dtype in [FloatFormat::F32, FloatFormat::F64] {
        // Each suite prepared once per dtype, then judged against every kernel.
        let scale = prepared("scale", dtype);
        let default = prepared("default", dtype);
        for good in ["blocked-1024", "welford-native", "twopass-native"] {
            let r = run(&scale, good);
            let bad: Vec<_> = r.iter().filter(|c| !c.conforms()).collect();
            assert!(bad.is_empty(), "{good} {}: {:?}", dtype.name(), bad);
        }
        for mutant in ["bad-block-drop-tail", "bad-block-merge-no-delta"] {
            let r = run(&scale, mutant);
            let failing = r.iter().filter(|c| !c.conforms()).count();
            assert!(failing >= 4, "{mutant} {}: {failing} failing", dtype.name());
            // Invisible on the default suite (every channel fits in one block).
            let d = run(&default, mutant);
            assert!(d.iter().all(CaseResult::conforms), "{mutant} on default");
        }
    }
}

/// `check DIR` on the scale suite holds it lean (`generate_listed_lean`: each kept case's
/// inputs dropped as it is made, made again when judged): the same cases and exclusions as the
/// full suite, every lean case made again equal to the full one, its input count known from
/// its shape, and `judge_dir` gives the full suite's results; an edited input file of a lean
/// case is still refused, naming the file.
#[test]
fn the_scale_suite_is_judged_lean_with_the_same_results() {
    let sel =
        suite::Selection::from_names("scale", "f32", suite::DEFAULT_SEED, &["forward"], &["nchw"])
            .unwrap();
    let full = sel.generate();
    let lean = sel.generate_lean(None);
    let ids = |s: &suite::generate::Suite| s.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&lean), ids(&full));
    assert_eq!(lean.excluded, full.excluded);
    assert!(full.cases.len() >= 4);
    for (l, f) in lean.cases.iter().zip(&full.cases) {
        assert!(l.inputs.is_empty() && !f.inputs.is_empty(), "{}", f.id);
        let mut again = l.clone();
        suite::generate::fill_inputs(&lean.name, lean.seed, &mut again);
        assert_eq!(&again, f, "{}", f.id);
    }
    // The streaming judge's chunks: the same from the lean cases' shapes.
    for max in [1 << 18, 1 << 20, 1 << 22] {
        assert_eq!(
            check::chunks(&lean.cases, max),
            check::chunks(&full.cases, max)
        );
    }
    assert!(check::chunks(&full.cases, 1 << 20).len() > 1);
    let dir = std::env::temp_dir().join(format!("bnconf-lean-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    bnconf::protocol::export(&full, sel.precision, &sel.filter, &dir).unwrap();
    let k = kernel_by_name("bad-onepass-var").unwrap();
    bnconf::protocol::run_kernel_dir(k.as_ref(), &dir).unwrap();
    let (mut again, _, _) = bnconf::protocol::regenerate(&dir).unwrap();
    assert!(again.cases.iter().all(|c| c.inputs.is_empty()));
    bnconf::protocol::verify_inputs(&dir, &again).unwrap();
    let judged = bnconf::protocol::judge_dir(&dir, &mut again, true).unwrap();
    let prepared = check::prepare(&full.cases).unwrap();
    let want: Vec<CaseResult> = prepared
        .iter()
        .map(|p| p.judge_written(&bnconf::protocol::read_written(&dir, p)))
        .collect();
    assert_eq!(judged.results.len(), want.len());
    for (a, b) in judged.results.iter().zip(&want) {
        same(a, b).unwrap_or_else(|e| panic!("{}: {e}", b.id));
    }
    assert!(want.iter().any(|r| r.verdict == Verdict::Fail));
    // A failing case keeps its outputs and inputs only when asked to (for the diagnosis and
    // the HTML report): otherwise the same results without them.
    for r in &judged.results {
        assert_eq!(r.computed.is_some(), r.verdict == Verdict::Fail, "{}", r.id);
    }
    let (mut unkept, _, _) = bnconf::protocol::regenerate(&dir).unwrap();
    let without = bnconf::protocol::judge_dir(&dir, &mut unkept, false).unwrap();
    assert!(without.failing.is_empty());
    for (a, b) in without.results.iter().zip(&want) {
        same(a, b).unwrap_or_else(|e| panic!("{}: {e}", b.id));
        assert!(a.computed.is_none(), "{}", a.id);
    }
    // ... nor, the suite being lean, its inputs (the reports make them again).
    assert!(unkept.cases.iter().all(|c| c.inputs.is_empty()));
    // A failing case keeps its inputs (made again) for the reports.
    for (c, r) in again.cases.iter().zip(&judged.results) {
        assert_eq!(c.inputs.is_empty(), r.verdict == Verdict::Pass, "{}", c.id);
    }
    // An edited input of a lean case: refused by verify_inputs and by judge_dir.
    let victim = &full.cases[full.cases.len() - 1];
    let path = dir.join(&victim.id).join("x.npy");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let (mut edited, _, _) = bnconf::protocol::regenerate(&dir).unwrap();
    let e1 = bnconf::protocol::verify_inputs(&dir, &edited)
        .unwrap_err()
        .to_string();
    let e2 = bnconf::protocol::judge_dir(&dir, &mut edited, false)
        .unwrap_err()
        .to_string();
    for e in [e1, e2] {
        assert!(
            e.contains(&format!("{}/x.npy", victim.id)) && e.contains("differs"),
            "{e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listed scale case is made and tested for ill-posedness only when judged
/// (`generate_listed_lean` keeps its shell, `fill_inputs_tested` makes and tests it): the lean
/// suite of an export's list is the full suite's (cases, order, exclusions), and a manifest
/// that lists an ill-posed case (bf16: `forward.nchw.bf16.scale-m786427`, ill-posed in its
/// channel 0) is refused by `judge_dir` with the error `regenerate` gives a list that differs
/// from the suite's, before any file of it is read.
#[test]
fn a_listed_case_is_tested_for_ill_posedness_when_judged() {
    let sel = suite::Selection::from_names(
        "scale",
        "bf16",
        suite::DEFAULT_SEED,
        &["forward"],
        &["nchw"],
    )
    .unwrap();
    let full = sel.generate();
    let ill = "forward.nchw.bf16.scale-m786427";
    let why = full
        .excluded
        .iter()
        .find(|(id, _)| id == ill)
        .map(|(_, why)| why.clone())
        .expect("an ill-posed bf16 case");
    assert!(why.contains("u*cond(var+eps)"), "{why}");
    // Every case of the selection in the suite's order, as shells.
    let order: Vec<String> = suite::scale::generate_each(
        &Rng::new(sel.seed),
        &[sel.precision],
        &sel.filter,
        |shell, _| Some(shell.id),
    );
    let dir = std::env::temp_dir().join(format!("bnconf-listed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    bnconf::protocol::export(&full, sel.precision, &sel.filter, &dir).unwrap();
    // The export's own list: the full suite, lean.
    let (mut again, _, _) = bnconf::protocol::regenerate(&dir).unwrap();
    let ids = |s: &suite::generate::Suite| s.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&again), ids(&full));
    assert_eq!(again.excluded, full.excluded);
    for (l, f) in again.cases.iter().zip(&full.cases) {
        let mut made = l.clone();
        let ill_posed = suite::generate::fill_inputs_tested(&again.name, again.seed, &mut made);
        assert_eq!((ill_posed, &made), (None, f), "{}", f.id);
    }
    let k = kernel_by_name("twopass-native").unwrap();
    bnconf::protocol::run_kernel_dir(k.as_ref(), &dir).unwrap();
    let judged = bnconf::protocol::judge_dir(&dir, &mut again, false).unwrap();
    assert!(judged.results.iter().all(CaseResult::conforms));
    // The manifest edited to list the ill-posed case too, in the suite's order.
    let mpath = dir.join("manifest.json");
    let text = std::fs::read_to_string(&mpath).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut listed = ids(&full);
    listed.push(ill.to_string());
    listed.sort_by_key(|id| order.iter().position(|o| o == id).unwrap());
    m["cases"] = serde_json::json!(listed);
    std::fs::write(&mpath, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let (mut edited, _, _) = bnconf::protocol::regenerate(&dir).unwrap();
    assert_eq!(ids(&edited), listed);
    let err = bnconf::protocol::judge_dir(&dir, &mut edited, false)
        .unwrap_err()
        .to_string();
    // The same error as a list out of the suite's order.
    listed.reverse();
    m["cases"] = serde_json::json!(listed);
    std::fs::write(&mpath, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let want = bnconf::protocol::regenerate(&dir).unwrap_err().to_string();
    assert_eq!(err, want);
    assert!(err.contains("manifest.json: cases"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scale case made as its fast problem (`scale::make_fast`, the streaming judge's way:
/// cells in their own width, never held as f64) is the made case's `fast_problem()`: the
/// same arrays in the same width (f32 for binary32 dtypes), per-channel inputs, geometry and
/// eps, and the same ill-posedness verdict; `generate::remake_fast` of the case's shell makes
/// it too. Every case of the suite (filters off) in the six precisions.
#[test]
fn a_case_made_fast_is_the_made_cases_fast_problem() {
    let root = Rng::new(suite::DEFAULT_SEED);
    let mut n = 0;
    for prec in suite::Precision::ALL {
        let made =
            suite::scale::generate_each(&root, &[prec], &Filter::default(), |shell, make| {
                let c = make();
                let want = c.fast_problem().unwrap();
                let got = suite::generate::remake_fast("scale", suite::DEFAULT_SEED, &shell);
                let (got, ill) = got.expect("a scale case is made fast");
                assert_eq!(got.x, want.x, "{}", c.id);
                assert_eq!(got.dy, want.dy, "{}", c.id);
                assert_eq!(got.chan, want.chan, "{}", c.id);
                assert_eq!(got.geom, want.geom, "{}", c.id);
                assert_eq!(got.eps, want.eps, "{}", c.id);
                assert_eq!(ill, suite::scale::ill_posed(&c), "{}", c.id);
                let binary32 = c.dtype != FloatFormat::F64;
                assert_eq!(
                    matches!(got.x, bnconf::formats::npy::NpyData::F32(_)),
                    binary32,
                    "{}",
                    c.id
                );
                Some(ill.is_some())
            });
        n += made.len();
    }
    assert!(n >= 6 * 20, "{n} cases");
}
