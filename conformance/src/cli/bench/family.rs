//! `bnconf bench --family`: the family's exact goldens (`fast::family`) against numpy float64
//! computing the same outputs, side by side in one run, on an LLM-sized layer (`[8192, 4096]`
//! f32 by default, normalized over the last axis): layer_norm and rms_norm, forward (`y`,
//! `mean`, `rstd`) and backward (`dx`, `dgamma`, `dbeta`), compute only (data in memory on
//! both sides; numpy loads its npy files untimed). Best of `reps`, wall and CPU time, on the
//! worker threads in use, and on one thread.

use super::{best_cpu, secs};
use bnconf::error::{ConfError, Result};
use bnconf::fast::family::family_fast_counted;
use bnconf::formats::npy::{write_npy, NpyData};
use bnconf_impl::family::{Affine, FamilyCase, FamilyLayout, FamilyOp, RmsConvention};
use bnconf_impl::Dtype;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// Options of the family bench.
#[derive(Clone, Debug)]
pub struct FamilyBenchOpts {
    /// `[rows, K]`.
    pub shape: Vec<usize>,
    pub seed: u64,
    pub reps: usize,
    pub python: Option<String>,
    pub threads: Option<usize>,
}

/// Deterministic f32 data: rows with their own mean (up to 8× their spread) and spread.
fn data(rows: usize, k: usize, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        // xorshift64*: uniform in [-1, 1).
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let v = s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (v as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let mut x = Vec::with_capacity(rows * k);
    let mut dy = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let spread = 0.5 + next().abs() * 2.0;
        let mean = next() * 8.0 * spread;
        for _ in 0..k {
            x.push((mean + spread * next()) as f32 as f64);
            dy.push(next() as f32 as f64);
        }
    }
    let gamma = (0..k).map(|_| (1.0 + 0.5 * next()) as f32 as f64).collect();
    let beta = (0..k).map(|_| (0.1 * next()) as f32 as f64).collect();
    (x, dy, gamma, beta)
}

fn case(op: FamilyOp, shape: &[usize], inputs: &[(&str, &Vec<f64>)]) -> FamilyCase {
    let affine = if op.family() == bnconf_impl::family::Family::RmsNorm {
        Affine::Weight
    } else {
        Affine::WeightBias
    };
    FamilyCase {
        op,
        layout: FamilyLayout::Last,
        shape: shape.to_vec(),
        dtype: Dtype::F32,
        param_dtype: Dtype::F32,
        eps: 1e-5,
        normalized_ndim: Some(1),
        groups: None,
        affine,
        convention: RmsConvention::Standard,
        inputs: inputs
            .iter()
            .filter(|(n, _)| op.inputs(affine).contains(n))
            .map(|(n, v)| (n.to_string(), (*v).clone()))
            .collect(),
    }
}

/// numpy float64 layer_norm / rms_norm, forward and backward over the last axis (two-pass),
/// on the f32 npy files of `DIR`; prints the best compute wall and CPU seconds of each
/// family, forward + backward together.
const NUMPY_FAMILY: &str = r#"
import sys, time
import numpy as np
d, reps = sys.argv[1], int(sys.argv[2])
eps = 1e-5
x = np.load(d + "/x.npy"); dy = np.load(d + "/dy.npy")
g = np.load(d + "/gamma.npy").astype(np.float64); b = np.load(d + "/beta.npy").astype(np.float64)
def layer_norm():
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    xc = x64 - mean
    var = (xc * xc).mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xh = xc * r
    y = g * xh + b
    d64 = dy.astype(np.float64)
    gdy = g * d64
    dx = r * (gdy - gdy.mean(axis=-1, keepdims=True) - xh * (gdy * xh).mean(axis=-1, keepdims=True))
    return y, mean, r, dx, (d64 * xh).sum(axis=0), d64.sum(axis=0)
def rms_norm():
    x64 = x.astype(np.float64)
    r = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    xh = x64 * r
    y = g * xh
    d64 = dy.astype(np.float64)
    gdy = g * d64
    dx = r * (gdy - xh * (gdy * xh).mean(axis=-1, keepdims=True))
    return y, r, dx, (d64 * xh).sum(axis=0)
for f in (layer_norm, rms_norm):
    best, cpu = float("inf"), float("inf")
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        f()
        best, cpu = min(best, time.perf_counter() - t), min(cpu, time.process_time() - c)
    print(best, cpu)
"#;

fn numpy_times(
    python: &str,
    dir: &Path,
    reps: usize,
) -> std::result::Result<Vec<(f64, f64)>, String> {
    let args = [dir.display().to_string(), reps.max(1).to_string()];
    match super::python_numbers(python, NUMPY_FAMILY, &args)?[..] {
        [a, b, c, d] => Ok(vec![(a, b), (c, d)]),
        ref v => Err(format!("{python}: unexpected output {v:?}")),
    }
}

/// The family table (Markdown).
pub fn family_table(o: &FamilyBenchOpts) -> Result<String> {
    let [rows, k] = o.shape[..] else {
        return Err(ConfError::field("--family-shape", "needs ROWS,K"));
    };
    if rows == 0 || k == 0 || rows.checked_mul(k).is_none_or(|n| n > 1 << 28) {
        return Err(ConfError::field(
            "--family-shape",
            format!("{rows},{k}: each extent ≥ 1 and at most 2^28 elements"),
        ));
    }
    let shape = [rows, k];
    let (x, dy, gamma, beta) = data(rows, k, o.seed);
    let inputs = [("x", &x), ("dy", &dy), ("gamma", &gamma), ("beta", &beta)];
    let mut s = String::new();
    let threads = o.threads.unwrap_or_else(bnconf::par::current_num_threads);
    writeln!(
        s,
        "## The family's exact goldens against numpy float64: [{rows}, {k}] f32, forward + backward\n"
    )
    .unwrap();
    let np = match &o.python {
        None => Err("skipped (--no-side-by-side)".to_string()),
        Some(py) => {
            let tmp =
                std::env::temp_dir().join(format!("bnconf-bench-family-{}", std::process::id()));
            std::fs::create_dir_all(&tmp).map_err(|e| ConfError::io(&tmp, e))?;
            let mut written = Ok(());
            for (n, v) in &inputs {
                let sh: Vec<usize> = if v.len() == k {
                    vec![k]
                } else {
                    shape.to_vec()
                };
                let v32 = v.iter().map(|&e| e as f32).collect();
                written = written.and(write_npy(
                    &tmp.join(format!("{n}.npy")),
                    &sh,
                    &NpyData::F32(v32),
                ));
            }
            let r = written
                .map_err(|e| e.to_string())
                .and_then(|_| numpy_times(py, &tmp, o.reps));
            let _ = std::fs::remove_dir_all(&tmp);
            r
        }
    };
    writeln!(
        s,
        "| family | bnconf exact, {threads} threads (wall / CPU) | bnconf, 1 thread (wall) | numpy float64, 1 thread (wall / CPU) | wall ratio | CPU ratio | elements left to the exact path |"
    )
    .unwrap();
    writeln!(s, "|---|---|---|---|---|---|---|").unwrap();
    for (fi, (name, fwd, bwd)) in [
        (
            "layer_norm",
            FamilyOp::LayerNorm,
            FamilyOp::LayerNormBackward,
        ),
        ("rms_norm", FamilyOp::RmsNorm, FamilyOp::RmsNormBackward),
    ]
    .into_iter()
    .enumerate()
    {
        let cf = case(fwd, &shape, &inputs);
        let cb = case(bwd, &shape, &inputs);
        let run = || -> Option<(BTreeMap<&'static str, Vec<f64>>, u64)> {
            let (mut a, fa) = family_fast_counted(&cf)?;
            let (b, fb) = family_fast_counted(&cb)?;
            a.extend(b);
            Some((a, fa + fb))
        };
        let (wall, cpu, out) = best_cpu(o.reps, run);
        let (_, fallbacks) = out.ok_or_else(|| {
            ConfError::field("--family-shape", "the fast path declined these data")
        })?;
        let (wall1, _, _) = bnconf::fast::with_threads(Some(1), || best_cpu(o.reps, run))?;
        let (np_cell, wr, cr) = match &np {
            Ok(t) => {
                let (nw, nc) = t[fi];
                (
                    format!("{} / {}", secs(nw), secs(nc)),
                    format!("{:.2}×", wall / nw),
                    // CPU time is read in ticks of 10 ms: no ratio below a few ticks.
                    if cpu >= 0.05 && nc >= 0.05 {
                        format!("{:.2}×", cpu / nc)
                    } else {
                        "– (under 50 ms of CPU)".into()
                    },
                )
            }
            Err(e) => (e.clone(), "–".into(), "–".into()),
        };
        writeln!(
            s,
            "| {name} | {} / {} | {} | {np_cell} | {wr} | {cr} | {fallbacks} of {} |",
            secs(wall),
            secs(cpu),
            secs(wall1),
            rows * k * 2 + rows * 2 + k * 2
        )
        .unwrap();
    }
    writeln!(
        s,
        "\nbnconf: every output correctly rounded to f32 (bit for bit the exact path); numpy: \
         float64 two-pass, not rounded, not exact. Ratios: bnconf on {threads} threads over \
         numpy on one (CPU: bnconf's CPU time over numpy's)."
    )
    .unwrap();
    Ok(s)
}
