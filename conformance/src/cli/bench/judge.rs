//! `bnconf bench --judge`: the judge side by side with numpy, in one run. On the scale suite
//! (f32, every case; the outputs of a built-in kernel, `twopass-native` by default) it runs,
//! interleaved and `reps` times each, `bnconf check DIR --no-diagnosis` (this binary) and a
//! numpy float64 reference with `np.allclose` per output on the same files, each as a child
//! process measured by `wait4` (wall clock, CPU time user + system, peak resident memory),
//! and states the ratios, the peak against the largest case's files (inputs + outputs) and
//! the time to read every file of the directory once (the read floor).

use bnconf::error::{ConfError, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The numpy baseline: per case of the manifest, a float64 reference of forward or backward
/// from the case's inputs and `np.allclose(out, ref, rtol=1e-4, atol=1e-5)` on each output;
/// prints `conforming cases elements`.
const NUMPY_JUDGE: &str = r#"
import json, os, sys
import numpy as np
d = sys.argv[1]
ids = json.load(open(os.path.join(d, "manifest.json")))["cases"]
ok = elems = 0
for cid in ids:
    cd = os.path.join(d, cid)
    c = json.load(open(os.path.join(cd, "case.json")))
    axes = {"nchw": (0, 2, 3), "nhwc": (0, 1, 2)}[c["layout"]]
    ld = lambda n: np.load(os.path.join(cd, n + ".npy")).astype(np.float64)
    x = ld("x")
    shape = [1] * x.ndim
    shape[{"nchw": 1, "nhwc": 3}[c["layout"]]] = -1
    g = ld("gamma").reshape(shape)
    mean = x.mean(axis=axes, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=axes, keepdims=True)
    r = 1.0 / np.sqrt(var + c["eps"])
    xh = xc * r
    if c["op"] == "forward":
        ref = {"y": g * xh + ld("beta").reshape(shape), "mean": mean, "var": var}
    else:
        dy = ld("dy")
        db = dy.sum(axis=axes, keepdims=True)
        dg = (dy * xh).sum(axis=axes, keepdims=True)
        m = x.size // g.size
        ref = {"dx": g * r * (dy - db / m - xh * (dg / m)), "dgamma": dg, "dbeta": db}
    good = True
    for n, want in ref.items():
        got = np.load(os.path.join(cd, "out", n + ".npy")).astype(np.float64)
        good = good and bool(np.allclose(got, want.reshape(got.shape), rtol=1e-4, atol=1e-5))
    ok += good
    elems += x.size
print(ok, len(ids), elems)
"#;

/// Options of the judge table.
pub struct JudgeBenchOpts {
    /// Python interpreter with numpy.
    pub python: String,
    /// Interleaved repetitions (the least wall, CPU and peak of each are reported).
    pub reps: usize,
    /// Worker threads of the judge (`RAYON_NUM_THREADS` of the child); `None`: inherited.
    pub threads: Option<usize>,
    /// Built-in kernel whose outputs are judged.
    pub kernel: String,
}

/// Wall clock, CPU time (user + system) and peak resident memory of a child process.
#[derive(Clone, Copy, Debug)]
struct Usage {
    wall: f64,
    cpu: f64,
    peak_bytes: u64,
}

impl Usage {
    fn least(a: Option<Usage>, b: Usage) -> Usage {
        match a {
            None => b,
            Some(a) => Usage {
                wall: a.wall.min(b.wall),
                cpu: a.cpu.min(b.cpu),
                peak_bytes: a.peak_bytes.min(b.peak_bytes),
            },
        }
    }
}

/// Run `cmd` to its end, its stdout captured: the usage, whether it succeeded, its stdout.
fn measured(cmd: &mut Command) -> std::result::Result<(Usage, bool, String), String> {
    use std::io::Read as _;
    let shown = cmd.get_program().to_string_lossy().into_owned();
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut text);
    }
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value of the plain C struct, filled in by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child (not yet reaped: `Child::wait` is never called on it),
    // writing into the two locals above.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall = t.elapsed().as_secs_f64();
    if r < 0 {
        return Err(format!("{shown}: wait4 failed"));
    }
    let tv = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    let usage = Usage {
        wall,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        // Linux reports ru_maxrss in KiB.
        peak_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
    };
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok((usage, ok, text))
}

/// Bytes of the regular files directly in `dir` and in `dir/out`.
fn case_bytes(dir: &Path) -> u64 {
    [dir.to_path_buf(), dir.join("out")]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The judge table (Markdown), on a scale suite exported into a temporary directory
/// (`TMPDIR`), removed afterwards.
pub fn judge_table(o: &JudgeBenchOpts) -> Result<String> {
    let tmp = std::env::temp_dir().join(format!("bnconf-bench-judge-{}", std::process::id()));
    let res = judge_table_in(o, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    res
}

fn judge_table_in(o: &JudgeBenchOpts, tmp: &Path) -> Result<String> {
    let exe = std::env::current_exe().map_err(|e| ConfError::field("bench", e.to_string()))?;
    let dir = tmp.join("scale-f32");
    let run = |args: &[&str]| -> Result<()> {
        let st = Command::new(&exe)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| ConfError::field("bench", e.to_string()))?;
        if st.success() {
            Ok(())
        } else {
            Err(ConfError::field(
                "bench --judge",
                format!("`bnconf {}` failed ({st})", args.join(" ")),
            ))
        }
    };
    let d = dir.to_string_lossy().into_owned();
    run(&["export", "--suite", "scale", "--dtype", "f32", "--out", &d])?;
    run(&["kernel", &o.kernel, &d])?;
    let mut ids: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| ConfError::io(&dir, e))?
        .flatten()
        .filter(|e| e.path().join("case.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    let sizes: Vec<u64> = ids.iter().map(|id| case_bytes(&dir.join(id))).collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let total: u64 = sizes.iter().sum();

    // The read floor: every file of the directory read once.
    let mut floor = f64::INFINITY;
    for _ in 0..o.reps.max(1) {
        let t = Instant::now();
        let mut n = 0usize;
        for id in &ids {
            let cd = dir.join(id);
            for sub in [cd.clone(), cd.join("out")] {
                for e in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
                    if e.metadata().is_ok_and(|m| m.is_file()) {
                        n += std::fs::read(e.path()).map(|b| b.len()).unwrap_or(0);
                    }
                }
            }
        }
        std::hint::black_box(n);
        floor = floor.min(t.elapsed().as_secs_f64());
    }

    let mut check = Command::new(&exe);
    check.args(["check", &d, "--no-diagnosis"]);
    if let Some(t) = o.threads {
        check.env("RAYON_NUM_THREADS", t.to_string());
    }
    let mut numpy = Command::new(&o.python);
    numpy.args(["-c", NUMPY_JUDGE, &d]);
    let (mut ours, mut theirs): (Option<Usage>, Option<Usage>) = (None, None);
    let mut numpy_said = Err(String::new());
    for _ in 0..o.reps.max(1) {
        let (u, ok, _) = measured(&mut check).map_err(|e| ConfError::field("bench", e))?;
        if !ok {
            return Err(ConfError::field(
                "bench --judge",
                format!(
                    "`bnconf check` judged {}'s outputs non-conforming",
                    o.kernel
                ),
            ));
        }
        ours = Some(Usage::least(ours, u));
        numpy_said = match measured(&mut numpy) {
            Ok((u, true, text)) => {
                theirs = Some(Usage::least(theirs, u));
                Ok(text.trim().to_string())
            }
            Ok((_, false, _)) => Err(format!(
                "{} with numpy failed (is numpy importable? `bash adapters/setup.sh` makes adapters/.venv)",
                o.python
            )),
            Err(e) => Err(e),
        };
        if numpy_said.is_err() {
            break;
        }
    }
    let ours = ours.expect("at least one repetition");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Judging the scale suite (f32, {} cases, {} of files; outputs of `bnconf kernel {}`), least of {} interleaved runs each (wall, CPU user + system, peak resident memory of the process):",
        ids.len(),
        mib(total),
        o.kernel,
        o.reps.max(1)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| judge | wall | CPU | peak memory | peak / largest case's files |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    let row = |name: &str, u: &Usage| {
        format!(
            "| {name} | {:.2} s | {:.2} s | {} | {:.1}x |",
            u.wall,
            u.cpu,
            mib(u.peak_bytes),
            u.peak_bytes as f64 / largest.max(1) as f64
        )
    };
    let _ = writeln!(out, "{}", row("`bnconf check DIR --no-diagnosis`", &ours));
    match (&theirs, &numpy_said) {
        (Some(t), Ok(said)) => {
            let _ = writeln!(
                out,
                "{}",
                row("numpy float64 + `np.allclose` (rtol 1e-4, atol 1e-5)", t)
            );
            let _ = writeln!(
                out,
                "| bnconf / numpy | {:.2}x | {:.2}x | {:.2}x | |",
                ours.wall / t.wall,
                ours.cpu / t.cpu,
                ours.peak_bytes as f64 / t.peak_bytes.max(1) as f64
            );
            let said: Vec<&str> = said.split_whitespace().collect();
            if let [ok, n, _] = said[..] {
                let _ = writeln!(out, "\nnumpy's allclose accepted {ok} of {n} cases.");
            }
        }
        (_, Err(why)) | (None, Ok(why)) => {
            let _ = writeln!(out, "| numpy float64 + `np.allclose` | not run | | | |");
            let _ = writeln!(out, "\nnumpy: {why}");
        }
    }
    let _ = writeln!(
        out,
        "\nLargest case's files (inputs + outputs): {}; reading every file of the directory once (the read floor): {:.2} s.",
        mib(largest),
        floor
    );
    Ok(out)
}
