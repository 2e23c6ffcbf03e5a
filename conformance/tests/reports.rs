//! Reports that point at the cause (docs/REPORTS.md), through the `bnconf` binary as a user
//! runs it: the diagnosis names the known-bad kernel a failing kernel behaves like (our
//! known-bad kernels play held-out mutants through `--exec "<bnconf> kernel NAME"`), the
//! human report and JUnit messages, `--html`, expectations (`--expectations`,
//! `--write-expectations`), `--shard K/N`, and `--exec` (shell words, `--exec-shell`,
//! `--keep-dir`, `--timeout`, never deleting a directory it did not create, clean-up on
//! SIGINT/SIGTERM).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{bnconf, bnconf_env, stdout, text, BNCONF};

fn scratch(name: &str) -> PathBuf {
    common::scratch("reports", name)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("file written")).expect("JSON")
}

fn kernel_cmd(name: &str) -> String {
    format!("{BNCONF} kernel {name}")
}

/// `check --suite default --dtype f32 --exec "<bnconf> kernel NAME" --report R` → (exit, report).
fn check_default_f32(test: &str, kernel: &str, extra: &[&str]) -> (Option<i32>, Value, Output) {
    let d = scratch(test);
    let r = d.join("report.json");
    let exec = kernel_cmd(kernel);
    let mut args = vec![
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--exec",
        &exec,
        "--max-details",
        "2",
        "--report",
        r.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = bnconf(&args);
    let rep = read_json(&r);
    (o.status.code(), rep, o)
}

/// Each classic defect, run as a held-out mutant on the default suite in f32, is diagnosed as
/// itself: the top diagnosis is the kernel, reproducing (nearly) every failing case.
fn diagnosed_as_itself(kernel: &str) {
    let (code, rep, o) = check_default_f32(&format!("diag-{kernel}"), kernel, &[]);
    assert_eq!(code, Some(1), "{kernel} is rejected: {}", text(&o));
    let d = rep["diagnosis"].as_array().expect("diagnosis is a list");
    assert!(!d.is_empty(), "{kernel}: no diagnosis\n{}", stdout(&o));
    let top = &d[0];
    assert_eq!(top["kernel"], kernel, "{kernel}: top diagnosis {top}");
    let (matched, failing) = (
        top["matched"].as_u64().unwrap(),
        top["failing"].as_u64().unwrap(),
    );
    assert_eq!(
        failing,
        rep["summary"]["not_conforming"].as_u64().unwrap(),
        "{kernel}: every failing case is counted"
    );
    assert!(
        matched * 10 >= failing * 9,
        "{kernel}: reproduces only {matched} of {failing}"
    );
    assert!(top["description"].as_str().unwrap().contains("KNOWN BAD"));
    // the human report says it in one line
    let line = format!("diagnosis: behaves like {kernel} on {matched} of {failing} failing cases");
    assert!(stdout(&o).contains(&line), "{}", stdout(&o));
    // and each reproduced case says what it behaves like
    let cases = rep["cases"].as_array().unwrap();
    let first = top["cases"][0].as_str().unwrap();
    let c = cases.iter().find(|c| c["id"] == first).unwrap();
    assert!(c["behaves_like"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k == kernel));
}

#[test]
fn diagnosis_bad_unbiased_var() {
    diagnosed_as_itself("bad-unbiased-var");
}

#[test]
fn diagnosis_bad_eps_outside_sqrt() {
    diagnosed_as_itself("bad-eps-outside-sqrt");
}

#[test]
fn diagnosis_bad_backward_missing_term() {
    diagnosed_as_itself("bad-backward-missing-term");
}

#[test]
fn diagnosis_bad_onepass_var() {
    diagnosed_as_itself("bad-onepass-var");
}

#[test]
fn diagnosis_bad_rsqrt12() {
    diagnosed_as_itself("bad-rsqrt12");
}

/// A conforming kernel has no diagnosis (its rounding noise matches no defect).
#[test]
fn no_diagnosis_for_good_kernels() {
    for k in ["twopass-native", "welford-native"] {
        let (code, rep, o) = check_default_f32(&format!("good-{k}"), k, &[]);
        assert_eq!(code, Some(0), "{k}: {}", text(&o));
        assert_eq!(rep["diagnosis"], serde_json::json!([]), "{k}");
        assert!(!stdout(&o).contains("diagnosis:"), "{}", stdout(&o));
    }
}

fn small_check(d: &Path, kernel: &str, extra: &[&str]) -> Output {
    let exec = kernel_cmd(kernel);
    let mut args = vec![
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "forward",
        "--layouts",
        "nchw",
        "--exec",
        &exec,
    ];
    args.extend_from_slice(extra);
    let _ = d;
    bnconf(&args)
}

/// The human report: failures worst first, the per-op × class summary, the place of the
/// worst element in the layout, actual/expected with m, "k of n elements over", singular
/// "1 element"; the JUnit message names output, index, expected, actual, ratio and k.
#[test]
fn human_report_and_junit_point_at_the_element() {
    let d = scratch("human");
    let (r, j) = (d.join("r.json"), d.join("j.xml"));
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &[
            "--max-details",
            "50",
            "--report",
            r.to_str().unwrap(),
            "--junit",
            j.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = stdout(&o);
    assert!(out.contains("by class (cell: conforming/judged"), "{out}");
    assert!(out.contains("gaussian"), "{out}");
    // worst first: the severities of the detailed cases never increase
    let rep = read_json(&r);
    let sev: BTreeMapLike = rep["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["severity"].as_f64().unwrap(),
            )
        })
        .collect();
    let listed: Vec<f64> = out
        .lines()
        .filter(|l| l.starts_with("  forward.nchw.f32."))
        .map(|l| {
            let id = l.trim().split(' ').next().unwrap();
            sev.iter().find(|(i, _)| i == id).unwrap().1
        })
        .collect();
    assert!(listed.len() >= 10, "{out}");
    assert!(
        listed.windows(2).all(|w| w[0] >= w[1]),
        "not worst first: {listed:?}"
    );
    // the variance's ratio and the Bessel factor it is
    assert!(out.contains("actual/expected = "), "{out}");
    assert!(out.contains("≈ m/(m−1) = 24/23"), "{out}");
    assert!(out.contains(" of 72 elements over"), "{out}");
    assert!(out.contains("at (n="), "{out}");
    assert!(!out.contains("1 elements"), "{out}");
    // JUnit: output, index, expected, actual, ratio, k
    let xml = std::fs::read_to_string(&j).unwrap();
    let msg = xml
        .lines()
        .find(|l| l.contains("<failure message=\"var["))
        .or_else(|| xml.lines().find(|l| l.contains("<failure message=")))
        .expect("a failure");
    for w in [
        "expected",
        "actual",
        "ratio",
        "k = ",
        "actual/expected",
        "over",
    ] {
        assert!(msg.contains(w), "{w}: {msg}");
    }
    // per-output positions in the JSON report
    let c = &rep["cases"][0];
    assert!(c["outputs"][0]["position"].is_object(), "{c}");
    assert!(c["m"].as_u64().is_some());
}

type BTreeMapLike = Vec<(String, f64)>;

/// Unsupported rows show no ratio.
#[test]
fn unsupported_rows_show_no_ratio() {
    let o = bnconf(&[
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "eval",
        "--layouts",
        "rows",
        "--exec-shell",
        "--exec",
        r#"for d in "$1"/*/; do mkdir -p "$d/out" && echo "no eval here" > "$d/out/unsupported"; done"#,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = stdout(&o);
    let row = out
        .lines()
        .find(|l| l.starts_with("eval "))
        .expect("a table row");
    assert!(row.trim_end().ends_with("-  unsupported"), "{row}");
    assert!(out.contains("worst ratio -"), "{out}");
}

/// `--html`: one self-contained page: inline SVG plots, the diagnosis, no script and no
/// network resource.
#[test]
fn html_is_self_contained() {
    let d = scratch("html");
    let h = d.join("report.html");
    let o = small_check(&d, "bad-eps-outside-sqrt", &["--html", h.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let page = std::fs::read_to_string(&h).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg"), "inline SVG plots");
    assert!(page.contains("Ratios per op, class and dtype"));
    assert!(page.contains("Worst elements"));
    assert!(page.contains("behaves like <span class='mono'>bad-eps-outside-sqrt</span>"));
    for bad in ["<script", "http://", "https://", "src=", "@import", "url("] {
        assert!(!page.contains(bad), "the page contains {bad:?}");
    }
    assert!(page.trim_end().ends_with("</html>"));
}

/// Rendered in headless Chromium (where installed: `.ci/run` installs it): a screenshot, the
/// DOM holds the plots, no console error.
#[test]
fn html_renders_in_chromium() {
    let Some(chromium) = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }) else {
        eprintln!("html_renders_in_chromium: no chromium installed; skipped");
        return;
    };
    let d = scratch("chromium");
    let h = d.join("report.html");
    let o = small_check(&d, "bad-unbiased-var", &["--html", h.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ci/render_html.sh");
    let png = d.join("report.png");
    let r = Command::new("bash")
        .arg(&script)
        .arg(&h)
        .arg(&png)
        .env("CHROMIUM", chromium)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let meta = std::fs::metadata(&png).expect("screenshot written");
    assert!(meta.len() > 20_000, "screenshot of {} bytes", meta.len());
}

fn write(p: &Path, s: &str) {
    std::fs::write(p, s).unwrap();
}

/// Expectations: listed failures pass (exit 0), a new failure fails (exit 1, named), a stale
/// entry fails and is named; globs; a bad file is exit 2.
#[test]
fn expectations_gate_new_and_stale_failures() {
    let d = scratch("expect");
    let e = d.join("expected.json");
    // write the current failures
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &["--write-expectations", e.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let doc = read_json(&e);
    assert_eq!(doc["format"], "bnconf-expectations/1");
    let list = doc["expected_failures"].as_array().unwrap().clone();
    assert!(list.len() >= 10, "{doc}");
    assert!(list[0]["reason"]
        .as_str()
        .unwrap()
        .contains("bad-unbiased-var"));
    // listed failures pass
    let j = d.join("j.xml");
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &[
            "--expectations",
            e.to_str().unwrap(),
            "--junit",
            j.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("0 new failures, 0 stale entries"));
    let xml = std::fs::read_to_string(&j).unwrap();
    assert!(!xml.contains("<failure"), "expected failures are skipped");
    assert!(xml.contains("expected failure"));
    // a new failure: drop one entry
    let dropped = list[0]["case"].as_str().unwrap().to_string();
    let fewer =
        serde_json::json!({"format": "bnconf-expectations/1", "expected_failures": list[1..]});
    let e2 = d.join("fewer.json");
    write(&e2, &fewer.to_string());
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &["--expectations", e2.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("NEW FAILURE {dropped}")),
        "{}",
        stdout(&o)
    );
    // a stale entry: a case that conforms
    let r = d.join("r.json");
    let _ = small_check(&d, "bad-unbiased-var", &["--report", r.to_str().unwrap()]);
    let rep = read_json(&r);
    let passing = rep["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["verdict"] == "pass")
        .expect("a passing case")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut more = list.clone();
    more.push(serde_json::json!({"case": passing, "reason": "fixed long ago"}));
    let e3 = d.join("stale.json");
    write(
        &e3,
        &serde_json::json!({"format": "bnconf-expectations/1", "expected_failures": more})
            .to_string(),
    );
    let j3 = d.join("j3.xml");
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &[
            "--expectations",
            e3.to_str().unwrap(),
            "--junit",
            j3.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("STALE expectation \"{passing}\"")),
        "{}",
        stdout(&o)
    );
    assert!(std::fs::read_to_string(&j3)
        .unwrap()
        .contains("stale expectation"));
    // a glob over case ids: one entry for the whole op × layout
    let e4 = d.join("glob.json");
    write(
        &e4,
        r#"{"format": "bnconf-expectations/1", "expected_failures": [{"case": "forward.nchw.f32.*", "reason": "unbiased variance, issue 7"}]}"#,
    );
    let o = small_check(
        &d,
        "bad-unbiased-var",
        &["--expectations", e4.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // a good kernel against a listed failure: every entry is stale
    let o = small_check(
        &d,
        "twopass-native",
        &["--expectations", e.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stdout(&o).contains("STALE"));
    // a malformed expectations file: exit 2, naming the field
    let e5 = d.join("bad.json");
    write(
        &e5,
        r#"{"format": "bnconf-expectations/1", "expected_failures": [{"reason": 1}]}"#,
    );
    let o = small_check(
        &d,
        "twopass-native",
        &["--expectations", e5.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("expected_failures[0].case"),
        "{}",
        text(&o)
    );
}

fn manifest_cases(dir: &Path) -> Vec<String> {
    read_json(&dir.join("manifest.json"))["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Three shards partition the default suite (export), and `check DIR` on a shard judges
/// exactly that shard; `check --shard` with `--exec` too.
#[test]
fn shards_partition_the_suite() {
    let d = scratch("shards");
    let all = d.join("all");
    let o = bnconf(&[
        "export",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--out",
        all.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let every = manifest_cases(&all);
    let mut seen: Vec<String> = Vec::new();
    for k in 1..=3 {
        let sd = d.join(format!("s{k}"));
        let sh = format!("{k}/3");
        let o = bnconf(&[
            "export",
            "--suite",
            "default",
            "--dtype",
            "f32",
            "--shard",
            &sh,
            "--out",
            sd.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let m = read_json(&sd.join("manifest.json"));
        assert_eq!(m["shard"], sh);
        let cases = manifest_cases(&sd);
        assert!(
            cases.len() * 5 > every.len(),
            "shard {sh}: {} of {}",
            cases.len(),
            every.len()
        );
        for c in &cases {
            assert!(!seen.contains(c), "{c} in two shards");
            assert!(sd.join(c).join("case.json").is_file());
        }
        seen.extend(cases);
    }
    let mut a = seen.clone();
    a.sort();
    let mut b = every.clone();
    b.sort();
    assert_eq!(a, b, "the union of the shards is the suite");
    // check DIR on shard 2 regenerates that shard
    let s2 = d.join("s2");
    let o = bnconf(&["kernel", "twopass-native", s2.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = d.join("r.json");
    let o = bnconf(&[
        "check",
        s2.to_str().unwrap(),
        "--report",
        r.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rep = read_json(&r);
    assert_eq!(rep["shard"], "2/3");
    assert_eq!(
        rep["cases"].as_array().unwrap().len(),
        manifest_cases(&s2).len()
    );
    // a different --shard than the directory's is refused
    let o = bnconf(&["check", s2.to_str().unwrap(), "--shard", "1/3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // --shard with --exec, and a bad shard
    let exec = kernel_cmd("welford-native");
    let o = bnconf(&["check", "--ops", "eval", "--shard", "3/3", "--exec", &exec]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("shard 3/3 of suite default"));
    for bad in ["0/3", "4/3", "x"] {
        let o = bnconf(&[
            "export",
            "--shard",
            bad,
            "--out",
            d.join("x").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
    }
}

fn eval_rows(extra: &[&str]) -> Output {
    let mut args = vec![
        "check",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "eval",
        "--layouts",
        "rows",
    ];
    args.extend_from_slice(extra);
    bnconf(&args)
}

/// `--exec` splits like a shell (quotes survive), `--exec-shell` runs a shell command line.
#[test]
fn exec_with_quotes_and_shell() {
    let cmd = format!(r#"sh -c 'exec "$0" kernel twopass-native "$1"' {BNCONF}"#);
    let o = eval_rows(&["--exec", &cmd]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cmd = format!(r#"{BNCONF} kernel twopass-native "$BNCONF_DIR" && echo kernel-done"#);
    let o = eval_rows(&["--exec-shell", "--exec", &cmd]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("kernel-done"));
    let o = eval_rows(&["--exec", "sh -c 'unbalanced"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("unbalanced quotes"), "{}", text(&o));
}

/// The kernel run on a temporary directory gets `BNCONF_SCRATCH=DIR` (its outputs need no
/// fsync); one run on a kept directory does not.
#[test]
fn scratch_env_only_for_the_temporary_directory() {
    let d = scratch("scratch-env");
    // (the kernel's shell condition, --keep-dir, the exit status): the last row shows the
    // condition can fail (no kernel runs, its outputs are missing).
    for (cond, keep, code) in [
        (r#""$BNCONF_SCRATCH" = "$BNCONF_DIR""#, None, 0),
        (r#"-z "$BNCONF_SCRATCH""#, Some("kept"), 0),
        (r#"-n "$BNCONF_SCRATCH""#, Some("kept2"), 1),
    ] {
        let cmd = format!(r#"test {cond} && {BNCONF} kernel twopass-native "$BNCONF_DIR""#);
        let k = keep.map(|k| d.join(k).to_str().unwrap().to_string());
        let mut args = vec!["--exec-shell", "--exec", &cmd];
        if let Some(k) = &k {
            args.extend(["--keep-dir", k.as_str()]);
        }
        let o = eval_rows(&args);
        assert_eq!(o.status.code(), Some(code), "{cond}: {}", text(&o));
    }
}

/// `--keep-dir DIR` keeps the export and what the kernel wrote; a non-empty existing DIR is
/// refused (exit 2, named) and left as it was, with `--keep-dir` and as `check DIR --exec`.
#[test]
fn keep_dir_and_never_delete_an_existing_dir() {
    let d = scratch("keep");
    let k = d.join("kept");
    let o = eval_rows(&[
        "--exec",
        &kernel_cmd("twopass-native"),
        "--keep-dir",
        k.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cases = manifest_cases(&k);
    assert!(!cases.is_empty());
    for c in &cases {
        assert!(k.join(c).join("out").join("y.npy").is_file(), "{c}");
    }
    // judged again from the kept directory
    let o = bnconf(&["check", k.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // an existing non-empty directory is never deleted
    let precious = d.join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    write(&precious.join("notes.txt"), "mine");
    for args in [
        vec![precious.to_str().unwrap(), "--exec", "true"],
        vec!["--exec", "true", "--keep-dir", precious.to_str().unwrap()],
    ] {
        let mut a = vec!["check", "--ops", "eval", "--layouts", "rows"];
        a.extend(args);
        let o = bnconf(&a);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("not empty"), "{}", text(&o));
        assert!(text(&o).contains(precious.to_str().unwrap()));
        assert_eq!(
            std::fs::read_to_string(precious.join("notes.txt")).unwrap(),
            "mine"
        );
        assert_eq!(std::fs::read_dir(&precious).unwrap().count(), 1);
    }
    // an empty existing directory is used and kept
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = bnconf(&[
        "check",
        empty.to_str().unwrap(),
        "--ops",
        "eval",
        "--layouts",
        "rows",
        "--exec",
        &kernel_cmd("twopass-native"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(empty.join("manifest.json").is_file());
}

/// Processes whose command line contains `marker` (from /proc).
fn processes_with(marker: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(b) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&b).replace('\0', " ");
            if cmd.contains(marker) {
                v.push(format!("{name}: {cmd}"));
            }
        }
    }
    v
}

/// Running `sleep MARKER` processes (argv[0] `sleep`, argv[1] the marker).
fn sleepers(marker: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(b) = std::fs::read(e.path().join("cmdline")) {
            let args: Vec<String> = b
                .split(|&c| c == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if args.len() >= 2 && args[0].ends_with("sleep") && args[1] == marker {
                v.push(args.join(" "));
            }
        }
    }
    v
}

fn no_process_left(marker: &str) {
    let t = Instant::now();
    while !processes_with(marker).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(marker), Vec::<String>::new(), "left behind");
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bnconf-check-"))
        .collect()
}

/// `--timeout 2` kills a kernel that sleeps (and its children: the whole process group),
/// fails the run with exit 1 saying so, and removes the temporary directory.
#[test]
fn timeout_kills_the_process_group() {
    let tmp = scratch("timeout-tmp");
    let t = Instant::now();
    let o = bnconf_env(
        &[
            "check",
            "--ops",
            "eval",
            "--layouts",
            "rows",
            "--timeout",
            "2",
            "--exec-shell",
            "--exec",
            "sleep 987651 & sleep 987651; wait",
        ],
        &[("TMPDIR", &tmp)],
    );
    let took = t.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("kernel timed out after 2 s"),
        "{}",
        text(&o)
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    no_process_left("987651");
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
    // a plain command too (DIR becomes the shell's $0)
    let o = bnconf_env(
        &[
            "check",
            "--ops",
            "eval",
            "--layouts",
            "rows",
            "--timeout",
            "2",
            "--exec",
            "sh -c 'sleep 987650'",
        ],
        &[("TMPDIR", &tmp)],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("timed out"), "{}", text(&o));
    no_process_left("987650");
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

/// A normal run leaves no temporary directory.
#[test]
fn temporary_directory_is_removed() {
    let tmp = scratch("normal-tmp");
    let o = bnconf_env(
        &[
            "check",
            "--ops",
            "eval",
            "--layouts",
            "rows",
            "--exec",
            &kernel_cmd("twopass-native"),
        ],
        &[("TMPDIR", &tmp)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

/// SIGINT / SIGTERM while the kernel runs: the kernel's group is killed, the temporary
/// directory removed, exit 128 + signal.
#[test]
fn signals_clean_up() {
    for (sig, name, marker) in [(15, "TERM", "987649"), (2, "INT", "987648")] {
        let tmp = scratch(&format!("signal-{name}"));
        let mut child = Command::new(BNCONF)
            .args([
                "check",
                "--ops",
                "eval",
                "--layouts",
                "rows",
                "--exec",
                &format!("sh -c 'exec sleep {marker}'"),
            ])
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // wait for the kernel to run
        let t = Instant::now();
        while sleepers(marker).is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the kernel never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(leftovers(&tmp).len(), 1, "the temporary directory exists");
        let k = Command::new("kill")
            .args([format!("-{name}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(k.success());
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(128 + sig), "SIG{name}: {st:?}");
        no_process_left(marker);
        assert_eq!(leftovers(&tmp), Vec::<String>::new(), "SIG{name}");
    }
}

/// A signal during the export (or judging, whichever it hits): no partial directory is left.
#[test]
fn signal_during_export_leaves_nothing() {
    let tmp = scratch("signal-export");
    let mut child = Command::new(BNCONF)
        .args(["check", "--exec", "true"])
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while leftovers(&tmp).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no temporary directory"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let k = Command::new("kill")
        .args(["-TERM".to_string(), child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

/// The CI example uses flags `bnconf check` has, and its example expectations file parses
/// (run against a kernel that passes those cases, its entries are stale: named, exit 1).
#[test]
fn ci_example_is_consistent() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let wf = std::fs::read_to_string(root.join("examples/ci/github-actions.yml")).unwrap();
    let help = stdout(&bnconf(&["check", "--help"]));
    let mut flags = 0;
    for w in wf.split(|c: char| c.is_whitespace() || c == '(' || c == '"') {
        if let Some(f) = w.strip_prefix("--") {
            let f = f.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            if f.is_empty() || ["locked", "path", "root"].contains(&f) {
                continue; // cargo install's
            }
            assert!(
                help.contains(&format!("--{f}")),
                "--{f} is not a flag of bnconf check"
            );
            flags += 1;
        }
    }
    assert!(flags >= 9, "{flags} flags");
    let e = root.join("examples/ci/bnconf-expected-f32.example.json");
    let o = bnconf(&[
        "check",
        "--ops",
        "forward",
        "--layouts",
        "rows",
        "--exec",
        &kernel_cmd("twopass-native"),
        "--expectations",
        e.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stdout(&o).contains("STALE expectation \"forward.*.f32.eps-large\""),
        "{}",
        stdout(&o)
    );
}

/// Without the diagnosis and the HTML report a failing case keeps neither its outputs nor,
/// in a lean suite (scale), its inputs (`judge_dir` without `keep_failing`): the details and
/// the JUnit descriptions make its inputs again as they print it. They read the same, byte
/// for byte, as when the cases are kept (`--html` keeps them): the scale suite (its forward
/// cases) and the default suite, two known-bad kernels; the JUnit report describes every
/// failing case.
#[test]
fn details_without_kept_cases_read_the_same() {
    for (suite, ops, kernel) in [
        ("scale", "forward", "bad-onepass-var"),
        ("default", "forward,backward", "bad-backward-missing-term"),
    ] {
        let d = scratch(&format!("unkept-{suite}"));
        let run = |tag: &str, html: bool| {
            let junit = d.join(format!("{tag}.xml"));
            let page = d.join(format!("{tag}.html"));
            let exec = kernel_cmd(kernel);
            let mut args = vec![
                "check",
                "--suite",
                suite,
                "--dtype",
                "f32",
                "--ops",
                ops,
                "--exec",
                &exec,
                "--no-diagnosis",
                "--max-details",
                "1000",
                "--junit",
                junit.to_str().unwrap(),
            ];
            if html {
                args.extend(["--html", page.to_str().unwrap()]);
            }
            let o = bnconf(&args);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{suite} {tag}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            (o.stdout, std::fs::read(&junit).unwrap())
        };
        let (out_lean, junit_lean) = run("lean", false);
        let (out_kept, junit_kept) = run("kept", true);
        let text = String::from_utf8_lossy(&out_lean);
        assert!(text.contains("inputs there: x="), "{suite}: {text}");
        assert!(out_lean == out_kept, "{suite}: the human reports differ");
        assert!(
            junit_lean == junit_kept,
            "{suite}: the JUnit reports differ"
        );
    }
}
