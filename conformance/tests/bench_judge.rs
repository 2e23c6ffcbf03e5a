//! `bnconf bench --judge`: the judge side by side with numpy in one run — `bnconf check` on the
//! scale suite measured (wall, CPU, peak memory) in a child process, and numpy's row, or why it
//! did not run; a kernel it cannot fill the suite with is an error naming the option.

mod common;
use common::*;

/// The figures of a table row `| name | a s | b s | c MiB | d x |`, as numbers.
fn figures(row: &str) -> Vec<f64> {
    row.split('|')
        .skip(2)
        .filter_map(|cell| {
            cell.split_whitespace()
                .next()?
                .trim_end_matches('x')
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn bench_judge_measures_check_and_says_why_numpy_did_not_run() {
    let out = bnconf(&[
        "bench",
        "--judge",
        "--python",
        "/nonexistent/python-for-bnconf-tests",
        "--no-side-by-side",
        "--reps",
        "1",
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("scale suite (f32, 20 cases"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("| `bnconf check DIR --no-diagnosis` |"))
        .unwrap_or_else(|| panic!("no check row: {text}"));
    // wall, CPU, peak (MiB), peak / largest case's files: all measured, none zero.
    let f = figures(row);
    assert_eq!(f.len(), 4, "{row}");
    assert!(f.iter().all(|&v| v > 0.0), "{row}");
    // The peak is at least the largest case's files (24 MiB): the judge reads them all.
    assert!(f[2] >= 24.0 && f[3] >= 1.0, "{row}");
    assert!(
        text.contains("| numpy float64 + `np.allclose` | not run |")
            && text.contains("numpy: /nonexistent/python-for-bnconf-tests"),
        "{text}"
    );
    assert!(
        text.contains("Largest case's files (inputs + outputs): 24 MiB"),
        "{text}"
    );

    let bad = bnconf(&[
        "bench",
        "--judge",
        "--judge-kernel",
        "no-such-kernel",
        "--no-side-by-side",
        "--reps",
        "1",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    let err = stderr(&bad);
    assert!(
        err.contains("bench --judge") && err.contains("kernel no-such-kernel"),
        "{err}"
    );
    assert!(stdout(&bad).is_empty(), "{}", stdout(&bad));
}
