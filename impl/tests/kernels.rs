//! Behavioural tests of the kernels through the public API. The rigorous judging against
//! exact goldens lives in the conformance crate; these are small hand cases and invariants.

use bnconf_impl::*;
use std::collections::BTreeMap;

/// Deterministic values in `[lo, hi)`, on a grid of 1/256 so they are exact in every dtype
/// for moderate ranges, then rounded to `dtype`.
fn values(n: usize, seed: u64, lo: f64, hi: f64, dtype: Dtype) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let t = (s >> 11) as f64 / 2f64.powi(53);
            dtype.round(((lo + t * (hi - lo)) * 256.0).round() / 256.0)
        })
        .collect()
}

/// A case of `op` with every input filled: x around `centre`, dy in [-1, 1), gamma in
/// [0.5, 2), beta in [-1, 1); handed-in statistics are this shard's own (computed in f64
/// from the data), so sync ops must agree with their local counterparts.
fn case(op: Op, layout: Layout, shape: &[usize], dtype: Dtype, eps: f64, centre: f64) -> Case {
    if op == Op::SyncStats {
        return shards_case(dtype, centre);
    }
    let (c, m, cells) = channel_cells(layout, shape).unwrap();
    let n: usize = shape.iter().product();
    let x = values(n, 1, centre - 2.0, centre + 2.0, dtype);
    let dy = values(n, 2, -1.0, 1.0, dtype);
    let mut stats: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for idx in &cells {
        let mean = idx.iter().map(|&i| x[i]).sum::<f64>() / m as f64;
        let var = idx.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / m as f64;
        let r = 1.0 / (var + eps).sqrt();
        let mdy = idx.iter().map(|&i| dy[i]).sum::<f64>() / m as f64;
        let mdyx = idx.iter().map(|&i| dy[i] * (x[i] - mean) * r).sum::<f64>() / m as f64;
        for (k, v) in [
            ("mean", mean),
            ("var", var),
            ("m2", var + mean * mean),
            ("mean_dy", mdy),
            ("mean_dy_xhat", mdyx),
        ] {
            stats.entry(k).or_default().push(dtype.round(v));
        }
    }
    let mut inputs = BTreeMap::new();
    for &name in op.inputs() {
        let v = match name {
            "x" => x.clone(),
            "dy" => dy.clone(),
            "gamma" => values(c, 3, 0.5, 2.0, dtype),
            "beta" => values(c, 4, -1.0, 1.0, dtype),
            "running_mean" => values(c, 5, centre - 1.0, centre + 1.0, dtype),
            "running_var" => values(c, 6, 0.5, 2.0, dtype),
            s => stats[s].clone(),
        };
        inputs.insert(name.to_string(), v);
    }
    let params = if op == Op::RunningUpdate {
        Params {
            momentum: 0.1,
            convention: Some(Convention::Pytorch),
        }
    } else {
        Params::default()
    };
    Case {
        op,
        layout,
        shape: shape.to_vec(),
        dtype,
        param_dtype: dtype,
        eps,
        inputs,
        params,
    }
}

/// A `sync_stats` case (layout rows, 3 channels × 4 shards of 3, 0, 5 and 1 cells: unequal,
/// one empty with stale statistics), shard means around `centre`.
fn shards_case(dtype: Dtype, centre: f64) -> Case {
    let (c, r) = (3, 4);
    let means = values(c * r, 7, centre - 1.0, centre + 1.0, dtype);
    let spread = values(c * r, 8, 0.5, 2.0, dtype);
    let m2: Vec<f64> = means
        .iter()
        .zip(&spread)
        .map(|(a, s)| dtype.round(a * a + s))
        .collect();
    let mut inputs = BTreeMap::new();
    inputs.insert("shard_count".to_string(), vec![3.0, 0.0, 5.0, 1.0]);
    inputs.insert("shard_mean".to_string(), means);
    inputs.insert("shard_m2".to_string(), m2);
    Case {
        op: Op::SyncStats,
        layout: Layout::Rows,
        shape: vec![c, r],
        dtype,
        param_dtype: dtype,
        eps: 0.0,
        inputs,
        params: Params::default(),
    }
}

fn run(name: &str, case: &Case) -> Outputs {
    kernel_by_name(name).unwrap().run(case).unwrap()
}

fn max_abs_diff(a: &Outputs, b: &Outputs) -> f64 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .flat_map(|(k, v)| v.iter().zip(&b[k]).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f64::max)
}

/// At most 18 cells per channel: `good_kernels_agree_with_twopass_f64` allows a few units of
/// roundoff, a tolerance that does not grow with the reduction length.
fn shape_of(layout: Layout) -> Vec<usize> {
    match layout {
        Layout::Rows | Layout::Flat => vec![3, 10],
        Layout::Chw => vec![3, 2, 5],
        Layout::Nchw => vec![2, 3, 2, 3],
        Layout::Nhwc => vec![2, 2, 3, 3],
        Layout::Nc => vec![6, 3],
        Layout::Ncl => vec![2, 3, 5],
        Layout::Ncdhw => vec![2, 3, 1, 2, 3],
        Layout::Ndhwc => vec![2, 1, 2, 3, 3],
    }
}

fn good_kernels() -> Vec<Box<dyn Kernel>> {
    all_kernels()
        .into_iter()
        .filter(|k| k.expected() == Expected::Good)
        .collect()
}

#[test]
fn names_and_catalogue() {
    for op in Op::ALL {
        assert_eq!(Op::from_name(op.name()), Some(*op));
    }
    for l in Layout::ALL {
        assert_eq!(Layout::from_name(l.name()), Some(*l));
    }
    for d in Dtype::ALL {
        assert_eq!(Dtype::from_name(d.name()), Some(*d));
    }
    assert_eq!(Op::from_name("sync_backward"), Some(Op::SyncBackward));
    assert_eq!(Layout::from_name("nhwc"), Some(Layout::Nhwc));
    assert_eq!(Dtype::from_name("bf16"), Some(Dtype::BF16));
    assert_eq!(Dtype::from_name("exact"), None);

    let names: Vec<&str> = all_kernels().iter().map(|k| k.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "names are unique");
    for required in [
        "twopass-f64",
        "twopass-native",
        "welford-native",
        "compensated-f64",
        "sync-fma",
        "bad-onepass-var",
        "bad-eps-outside-sqrt",
        "bad-unbiased-var",
        "bad-backward-missing-term",
        "bad-sync-local-stats",
    ] {
        assert_eq!(kernel_by_name(required).unwrap().name(), required);
    }
    assert!(good_kernels().len() >= 6);
    assert!(kernel_by_name("nope").is_none());
    for k in all_kernels() {
        assert!(!k.description().is_empty());
        let bad = k.expected() == Expected::KnownBad;
        assert_eq!(bad, k.name().starts_with("bad-"), "{}", k.name());
        assert_eq!(bad, !k.defective_ops().is_empty(), "{}", k.name());
    }
}

#[test]
fn forward_hand_case() {
    // x = 1, 2, 3, 6: mean 3, var 14/4; gamma 2, beta 1, eps 0.
    let mut inputs = BTreeMap::new();
    inputs.insert("x".into(), vec![1.0, 2.0, 3.0, 6.0]);
    inputs.insert("gamma".into(), vec![2.0]);
    inputs.insert("beta".into(), vec![1.0]);
    let c = Case {
        op: Op::Forward,
        layout: Layout::Rows,
        shape: vec![1, 4],
        dtype: Dtype::F64,
        param_dtype: Dtype::F64,
        eps: 0.0,
        inputs,
        params: Params::default(),
    };
    let s = 3.5f64.sqrt();
    let want = [1.0 - 4.0 / s, 1.0 - 2.0 / s, 1.0, 1.0 + 6.0 / s];
    for k in good_kernels() {
        let out = k.run(&c).unwrap();
        assert_eq!(out["mean"], vec![3.0], "{}", k.name());
        assert_eq!(out["var"], vec![3.5], "{}", k.name());
        for (g, w) in out["y"].iter().zip(want) {
            assert!(
                (g - w).abs() <= 4.0 * f64::EPSILON * w.abs(),
                "{}: {g} vs {w}",
                k.name()
            );
        }
    }
}

#[test]
fn forward_invariants_all_kernels_layouts_dtypes() {
    // mean(y) = beta and var(y) = gamma² var/(var+eps) for each channel.
    for k in good_kernels() {
        for &l in Layout::ALL {
            for &d in Dtype::ALL {
                let shape = shape_of(l);
                let c = case(Op::Forward, l, &shape, d, 1e-3, 3.0);
                let out = k.run(&c).unwrap();
                let (_, m, cells) = channel_cells(l, &shape).unwrap();
                let tol = 8.0 * d.unit_roundoff() * 8.0;
                for (ch, idx) in cells.iter().enumerate() {
                    let (g, b) = (c.inputs["gamma"][ch], c.inputs["beta"][ch]);
                    let y: Vec<f64> = idx.iter().map(|&i| out["y"][i]).collect();
                    let my = y.iter().sum::<f64>() / m as f64;
                    let vy = y.iter().map(|v| (v - my).powi(2)).sum::<f64>() / m as f64;
                    let var = out["var"][ch];
                    let name = k.name();
                    assert!(
                        (my - b).abs() <= tol,
                        "{name} {l} {d}: mean(y)={my} beta={b}"
                    );
                    let want = g * g * var / (var + 1e-3);
                    assert!(
                        (vy - want).abs() <= tol * want,
                        "{name} {l} {d}: {vy} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn outputs_are_representable_in_the_dtype() {
    for k in all_kernels() {
        for &op in Op::ALL {
            for &d in Dtype::ALL {
                let out = k
                    .run(&case(op, Layout::Nchw, &[2, 3, 2, 3], d, 1e-5, 0.5))
                    .unwrap();
                for (name, v) in &out {
                    for &x in v {
                        assert!(x.is_finite(), "{} {op} {d} {name}", k.name());
                        assert_eq!(d.round(x), x, "{} {op} {d} {name}", k.name());
                    }
                }
            }
        }
    }
}

#[test]
fn good_kernels_agree_with_twopass_f64() {
    for &op in Op::ALL {
        for &d in Dtype::ALL {
            for &l in Layout::ALL {
                let c = case(op, l, &shape_of(l), d, 1e-5, 1.0);
                let reference = run("twopass-f64", &c);
                for k in good_kernels() {
                    let out = k.run(&c).unwrap();
                    // Well-scaled data: a few units of roundoff of max(1, |output|).
                    for (name, want) in &reference {
                        for (g, w) in out[name].iter().zip(want) {
                            let tol = 8.0 * d.unit_roundoff() * w.abs().max(1.0);
                            let n = k.name();
                            assert!((g - w).abs() <= tol, "{n} {op} {l} {d} {name}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn backward_matches_finite_differences_of_forward() {
    let shape = [2, 3, 2, 2];
    let eps = 1e-3;
    let fwd = case(Op::Forward, Layout::Nchw, &shape, Dtype::F64, eps, 0.25);
    let mut bwd = case(Op::Backward, Layout::Nchw, &shape, Dtype::F64, eps, 0.25);
    bwd.inputs.insert("x".into(), fwd.inputs["x"].clone());
    bwd.inputs
        .insert("gamma".into(), fwd.inputs["gamma"].clone());
    let dy = bwd.inputs["dy"].clone();
    // Loss L = Σ dy * y(x, gamma, beta).
    let loss = |c: &Case| -> f64 {
        let y = &run("twopass-f64", c)["y"];
        y.iter().zip(&dy).map(|(a, b)| a * b).sum()
    };
    let h = 1e-6;
    let numeric = |name: &str, i: usize| {
        let (mut p, mut q) = (fwd.clone(), fwd.clone());
        p.inputs.get_mut(name).unwrap()[i] += h;
        q.inputs.get_mut(name).unwrap()[i] -= h;
        (loss(&p) - loss(&q)) / (2.0 * h)
    };
    for k in good_kernels() {
        let out = k.run(&bwd).unwrap();
        for (i, &a) in out["dx"].iter().enumerate() {
            let n = numeric("x", i);
            assert!((a - n).abs() < 1e-6, "{} dx[{i}]: {a} vs {n}", k.name());
        }
        for (o, i) in [("dgamma", "gamma"), ("dbeta", "beta")] {
            for (ch, &a) in out[o].iter().enumerate() {
                let n = numeric(i, ch);
                assert!((a - n).abs() < 1e-6, "{} {o}[{ch}]: {a} vs {n}", k.name());
            }
        }
    }
}

#[test]
fn eval_and_sync_ops_agree_with_training_ops_on_local_statistics() {
    let shape = [2, 3, 2, 3];
    for k in good_kernels() {
        let name = k.name();
        let f = k
            .run(&case(
                Op::Forward,
                Layout::Nchw,
                &shape,
                Dtype::F64,
                1e-5,
                2.0,
            ))
            .unwrap();
        let b = k
            .run(&case(
                Op::Backward,
                Layout::Nchw,
                &shape,
                Dtype::F64,
                1e-5,
                2.0,
            ))
            .unwrap();
        for op in [Op::Eval, Op::SyncForward] {
            let y = k
                .run(&case(op, Layout::Nchw, &shape, Dtype::F64, 1e-5, 2.0))
                .unwrap();
            let d = max_abs_diff(&y, &BTreeMap::from([("y".to_string(), f["y"].clone())]));
            assert!(d < 1e-12, "{name} {op}: {d}");
        }
        let sb = k
            .run(&case(
                Op::SyncBackward,
                Layout::Nchw,
                &shape,
                Dtype::F64,
                1e-5,
                2.0,
            ))
            .unwrap();
        let d = max_abs_diff(&sb, &b);
        assert!(d < 1e-12, "{name} sync_backward: {d}");
    }
}

#[test]
fn layouts_hold_the_same_channels() {
    // The same per-channel data arranged as nchw and as nhwc, and as rows/flat/chw.
    let (n, c, h, w) = (2, 3, 2, 2);
    for &op in Op::ALL.iter().filter(|&&op| op != Op::SyncStats) {
        let a = case(op, Layout::Nchw, &[n, c, h, w], Dtype::F32, 1e-5, 1.0);
        let mut b = a.clone();
        b.layout = Layout::Nhwc;
        b.shape = vec![n, h, w, c];
        let to_nhwc = |v: &[f64]| {
            let mut out = vec![0.0; v.len()];
            for ni in 0..n {
                for ci in 0..c {
                    for p in 0..h * w {
                        out[(ni * h * w + p) * c + ci] = v[(ni * c + ci) * h * w + p];
                    }
                }
            }
            out
        };
        for name in ["x", "dy"] {
            if let Some(v) = a.inputs.get(name) {
                b.inputs.insert(name.into(), to_nhwc(v));
            }
        }
        for k in all_kernels() {
            let (oa, ob) = (k.run(&a).unwrap(), k.run(&b).unwrap());
            for (name, va) in &oa {
                let va = if is_cell_array(name) {
                    to_nhwc(va)
                } else {
                    va.clone()
                };
                assert_eq!(va, ob[name], "{} {op} {name}", k.name());
            }
        }
        let r = case(op, Layout::Rows, &[3, 8], Dtype::F32, 1e-5, 1.0);
        let mut f = r.clone();
        f.layout = Layout::Flat;
        let mut chw = r.clone();
        chw.layout = Layout::Chw;
        chw.shape = vec![3, 2, 4];
        for k in all_kernels() {
            let or = k.run(&r).unwrap();
            assert_eq!(or, k.run(&f).unwrap(), "{} {op} flat", k.name());
            assert_eq!(or, k.run(&chw).unwrap(), "{} {op} chw", k.name());
        }
    }
}

/// Data where every defect shows in f32: large mean with small spread, eps not negligible,
/// handed-in statistics that are not this shard's.
fn revealing_case(op: Op) -> Case {
    let mut c = case(op, Layout::Nchw, &[2, 3, 2, 3], Dtype::F32, 1e-3, 1000.0);
    for (name, v) in [
        ("mean", 999.5),
        ("var", 0.75),
        ("mean_dy", 0.125),
        ("mean_dy_xhat", -0.25),
    ] {
        if let Some(a) = c.inputs.get_mut(name) {
            a.fill(v);
        }
    }
    if let Some(a) = c.inputs.get_mut("m2") {
        a.fill(Dtype::F32.round(0.75 + 999.5 * 999.5));
    }
    c
}

#[test]
fn each_known_bad_kernel_differs_exactly_where_its_defect_is() {
    for k in all_kernels()
        .into_iter()
        .filter(|k| k.expected() == Expected::KnownBad)
    {
        for &op in Op::ALL {
            let mut c = revealing_case(op);
            if k.defect_suite() == "scale" {
                // Block-merge defects need channels of more than one block (1024 cells) whose
                // size is not a multiple of it: m = 3·29·31 = 2697.
                c = case(op, Layout::Nchw, &[3, 2, 29, 31], Dtype::F32, 1e-3, 1000.0);
            }
            if k.name() == "bad-gamma-zero" {
                if let Some(g) = c.inputs.get_mut("gamma") {
                    g[0] = 0.0;
                }
            }
            let (bad, good) = (k.run(&c).unwrap(), run("twopass-native", &c));
            let d = max_abs_diff(&bad, &good);
            if k.defective_ops().contains(&op) {
                assert!(d > 0.0, "{} should differ on {op}", k.name());
            } else {
                assert_eq!(d, 0.0, "{} should equal twopass-native on {op}", k.name());
            }
        }
    }
}

#[test]
fn known_bad_defects_by_hand() {
    // One channel x = -1, 1 (mean 0, var 1), gamma 1, beta 0, eps 0.25, f64.
    let mut inputs = BTreeMap::new();
    inputs.insert("x".into(), vec![-1.0, 1.0]);
    inputs.insert("gamma".into(), vec![1.0]);
    inputs.insert("beta".into(), vec![0.0]);
    let c = Case {
        op: Op::Forward,
        layout: Layout::Rows,
        shape: vec![1, 2],
        dtype: Dtype::F64,
        param_dtype: Dtype::F64,
        eps: 0.25,
        inputs,
        params: Params::default(),
    };
    let y = |name: &str| run(name, &c)["y"][1];
    assert_eq!(y("twopass-f64"), 1.0 / 1.25f64.sqrt());
    assert_eq!(y("bad-eps-outside-sqrt"), 1.0 / 1.25);
    assert_eq!(run("bad-unbiased-var", &c)["var"], vec![2.0]);
    assert_eq!(y("bad-unbiased-var"), 1.0 / 2.25f64.sqrt());
    assert_ne!(y("bad-rsqrt12"), y("twopass-f64"));

    // Backward with dy = xhat-proportional: the exact dx is 0 when eps = 0; dropping the
    // projection term leaves gamma*r*dy.
    let mut b = c.clone();
    b.op = Op::Backward;
    b.eps = 0.0;
    b.inputs.remove("beta");
    b.inputs.insert("dy".into(), vec![-1.0, 1.0]);
    assert_eq!(run("twopass-f64", &b)["dx"], vec![0.0, 0.0]);
    assert_eq!(run("twopass-f64", &b)["dgamma"], vec![2.0]);
    assert_eq!(run("bad-backward-missing-term", &b)["dx"], vec![-1.0, 1.0]);
}

#[test]
fn invalid_cases_are_refused_not_panicked() {
    let good = case(Op::Forward, Layout::Rows, &[2, 3], Dtype::F32, 1e-5, 0.0);
    let k = kernel_by_name("twopass-native").unwrap();
    let mut c = good.clone();
    c.inputs.remove("beta");
    assert!(k.run(&c).unwrap_err().0.starts_with("invalid case:"));
    let mut c = good.clone();
    c.inputs.get_mut("gamma").unwrap().push(1.0);
    assert!(k.run(&c).is_err());
    let mut c = good.clone();
    c.shape = vec![2, 3, 1];
    assert!(k.run(&c).is_err());
    let mut c = good;
    c.eps = f64::NAN;
    assert!(k.run(&c).is_err());
}

#[test]
fn statistics_ops_by_hand() {
    // running_update, PyTorch, a = 1/4: x = 1, 3 (mean 2, var 1, m = 2), running 0 and 1.
    let mut inputs = BTreeMap::new();
    inputs.insert("x".into(), vec![1.0, 3.0]);
    inputs.insert("running_mean".into(), vec![0.0]);
    inputs.insert("running_var".into(), vec![1.0]);
    let mut c = Case {
        op: Op::RunningUpdate,
        layout: Layout::Rows,
        shape: vec![1, 2],
        dtype: Dtype::F64,
        param_dtype: Dtype::F64,
        eps: 0.0,
        inputs,
        params: Params {
            momentum: 0.25,
            convention: Some(Convention::Pytorch),
        },
    };
    let got = |name: &str, c: &Case| {
        let o = run(name, c);
        (o["new_mean"][0], o["new_var"][0])
    };
    for k in good_kernels() {
        assert_eq!(got(k.name(), &c), (0.5, 1.25), "{}", k.name()); // 0.75·1 + 0.25·1·2
    }
    assert_eq!(got("bad-swapped-momentum", &c), (1.5, 1.75));
    assert_eq!(got("bad-running-var-bessel", &c), (0.5, 1.0));
    c.params.convention = Some(Convention::Onnx);
    assert_eq!(got("twopass-native", &c), (1.5, 1.0)); // 0.25·1 + 0.75·1
    assert_eq!(got("bad-swapped-momentum", &c), (0.5, 1.0)); // 0.75·1 + 0.25·1 (biased)
    assert_eq!(got("bad-running-var-bessel", &c), (1.5, 1.75));
    // m = 1 in the PyTorch convention: factor 1, batch variance 0.
    c.params.convention = Some(Convention::Pytorch);
    c.shape = vec![1, 1];
    c.inputs.insert("x".into(), vec![5.0]);
    assert_eq!(got("twopass-native", &c), (1.25, 0.75));

    // sync_stats: shards of 1, 3, 0 cells (means 0, 4, stale 100; E[x²] 0, 20, stale 7).
    let mut inputs = BTreeMap::new();
    inputs.insert("shard_count".into(), vec![1.0, 3.0, 0.0]);
    inputs.insert("shard_mean".into(), vec![0.0, 4.0, 100.0]);
    inputs.insert("shard_m2".into(), vec![0.0, 20.0, 7.0]);
    let s = Case {
        op: Op::SyncStats,
        layout: Layout::Rows,
        shape: vec![1, 3],
        dtype: Dtype::F64,
        param_dtype: Dtype::F64,
        eps: 0.0,
        inputs,
        params: Params::default(),
    };
    let stats = |name: &str| {
        let o = run(name, &s);
        (o["mean"][0], o["m2"][0], o["var"][0])
    };
    for k in good_kernels() {
        assert_eq!(stats(k.name()), (3.0, 15.0, 6.0), "{}", k.name());
    }
    assert_eq!(stats("bad-sync-averaged-var"), (3.0, 12.0, 3.0));
    assert_eq!(stats("bad-sync-empty-shard").0, 112.0 / 5.0);
    assert_eq!(stats("bad-sync-equal-weight").0, 104.0 / 3.0);
    // Layouts other than rows are refused.
    let mut bad = s.clone();
    bad.layout = Layout::Flat;
    let k = kernel_by_name("twopass-native").unwrap();
    assert!(k.run(&bad).unwrap_err().0.starts_with("invalid case:"));
}
