//! Hostile files (docs/HOSTILE.md): npy headers built to make a parser backtrack, FIFOs and
//! devices where a file is expected, sizes that lie, shapes too large to tabulate. Every probe
//! runs the release binary and checks its exit code, that the message names the file or field,
//! and that nothing half-written is left behind.
//!
//! Quick refusal is asserted by construction, not by the clock: the npy header parser counts
//! the bytes it inspects (`parse_header_counted`), and that count must stay within a small
//! multiple of the header's length. Every child process also runs under a generous watchdog
//! (60 s), so a regression to a hang or an exponential parse fails the test instead of
//! hanging it.

mod common;

use bnconf::formats::npy::{header_bytes, parse_header_counted, Descr, MAX_HEADER_BYTES};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What a run of `bnconf` showed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `bnconf ARGS` with a watchdog: a child still running after 60 s is killed and the
/// test fails (a hang or an exponential parse is a failure, not a stuck test run).
fn bnconf(args: &[&str]) -> Run {
    let o = common::bnconf_watched(args, Duration::from_secs(60));
    let run = Run {
        code: o.status.code(),
        stdout: common::stdout(&o),
        stderr: common::stderr(&o),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "{args:?} panicked: {}",
        run.stderr
    );
    run
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("hostile", name)
}

/// Every file under `dir`, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(base, &p, out);
            }
            out.push(rel);
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", p.display());
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An npy file: version 1.0, the header dict as given (padded), then `data`.
fn npy_raw(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut h = dict.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const GOOD6: [f32; 6] = [0.5, 1.0, -2.0, 3.0, 4.0, 5.0];

/// A forward case on rows [2, 3], f32, with `x` from `x.npy`.
fn npy_case(dir: &Path, x_npy: &[u8]) -> PathBuf {
    std::fs::write(dir.join("x.npy"), x_npy).unwrap();
    let case = json!({
        "op": "forward", "layout": "rows", "shape": [2, 3], "dtype": "f32", "eps": "1e-5",
        "inputs": {"x": {"npy": "x.npy"}, "gamma": [1, 2], "beta": [0, 0.5]}
    });
    let p = dir.join("case.json");
    std::fs::write(&p, serde_json::to_vec(&case).unwrap()).unwrap();
    p
}

/// `bnconf golden CASE -o DIR/out/out.json` and `--out-dir DIR/od`: both exit 2, stderr
/// contains every `needles`, and neither leaves a file.
fn golden_refuses(dir: &Path, case: &Path, extra: &[&str], needles: &[&str]) -> String {
    let o = dir.join("out");
    std::fs::create_dir_all(&o).unwrap();
    let od = dir.join("od");
    let mut last = String::new();
    for args in [
        vec!["golden", s(case), "-o", s(&o.join("out.json"))],
        vec!["golden", s(case), "--out-dir", s(&od)],
    ] {
        let args: Vec<&str> = args.into_iter().chain(extra.iter().copied()).collect();
        let r = bnconf(&args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        for n in needles {
            assert!(
                r.stderr.contains(n),
                "{args:?}: stderr does not name {n:?}: {}",
                r.stderr
            );
        }
        assert!(r.stdout.is_empty(), "{args:?} wrote to stdout");
        assert!(listing(&o).is_empty(), "{args:?} left {:?}", listing(&o));
        assert!(!od.exists(), "{args:?} left {}", od.display());
        let beside: Vec<String> = listing(dir)
            .into_iter()
            .filter(|f| f.contains(".tmp"))
            .collect();
        assert!(beside.is_empty(), "{args:?} left {beside:?}");
        last = r.stderr;
    }
    last
}

// --- npy headers ---------------------------------------------------------------------------

/// The headers of the issue and their relatives: nesting 15 deep (one under the old limit of
/// 16, 78 s in the old backtracking parser), 60 KiB strings, many keys, many dimensions.
fn worst_headers() -> Vec<(&'static str, String)> {
    let nest = |d: usize| format!("{}{}", "{".repeat(d), "}".repeat(d));
    let keys: String = (0..3000).map(|i| format!("'k{i}': 1, ")).collect();
    vec![
        (
            "nested 15 deep in an extra key",
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': {}}}",
                nest(14)
            ),
        ),
        (
            "nested 15 deep in descr",
            format!(
                "{{'descr': {}, 'fortran_order': False, 'shape': (2, 3), }}",
                nest(14)
            ),
        ),
        (
            "nested 15 deep in shape",
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': {}2, 3{}, }}",
                "(".repeat(15),
                ")".repeat(15)
            ),
        ),
        (
            "60 KiB descr",
            format!(
                "{{'descr': '{}', 'fortran_order': False, 'shape': (2, 3), }}",
                "f".repeat(60 << 10)
            ),
        ),
        (
            "60 KiB key",
            format!(
                "{{'{}': '<f4', 'fortran_order': False, 'shape': (2, 3), }}",
                "k".repeat(60 << 10)
            ),
        ),
        (
            "60 KiB unterminated string",
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': '{}",
                "s".repeat(60 << 10)
            ),
        ),
        (
            "3000 keys",
            format!("{{{keys}'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}}"),
        ),
        (
            "10000 dimensions",
            format!(
                "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}2, 3), }}",
                "1, ".repeat(10_000)
            ),
        ),
    ]
}

#[test]
fn worst_npy_headers_parse_in_linear_steps() {
    for (name, dict) in worst_headers() {
        assert!(dict.len() <= MAX_HEADER_BYTES, "{name}");
        let (res, steps) = parse_header_counted(dict.as_bytes());
        // Single pass: each byte is inspected at most three times (a backtracking parser takes
        // ×3 per nesting level: 3^15 = 14 million steps for 15 levels).
        assert!(
            steps <= 3 * dict.len() as u64 + 16,
            "{name}: {steps} steps for {} bytes",
            dict.len()
        );
        if name == "60 KiB descr" {
            // A well-formed header whose type string is no dtype we read.
            assert_eq!(res.unwrap().dtype(), None);
        } else {
            assert!(res.is_err(), "{name}: accepted");
        }
    }
}

#[test]
fn worst_npy_headers_are_refused_naming_the_file() {
    for (name, dict) in worst_headers() {
        let slug: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let d = scratch(&format!("header-{slug}"));
        let case = npy_case(&d, &npy_raw(&dict, &f32s(&GOOD6)));
        let needle = if name == "60 KiB descr" {
            "is not supported"
        } else {
            "malformed header"
        };
        let msg = golden_refuses(&d, &case, &[], &["inputs.x.npy", "x.npy", needle]);
        assert!(msg.len() < 2000, "{name}: message of {} bytes", msg.len());
    }
}

#[test]
fn header_length_is_bounded_before_reading() {
    let d = scratch("header-length");
    // v2 header claiming 1 MiB (over the 64 KiB cap) in a file that has it.
    let mut b = b"\x93NUMPY\x02\x00".to_vec();
    b.extend_from_slice(&(1u32 << 20).to_le_bytes());
    b.extend(std::iter::repeat_n(b' ', 1 << 20));
    let case = npy_case(&d, &b);
    golden_refuses(
        &d,
        &case,
        &[],
        &["x.npy", "header of 1048576 bytes", "65536"],
    );
}

// --- trailing bytes, sizes that lie ---------------------------------------------------------

#[test]
fn trailing_bytes_after_npy_data_are_refused() {
    let d = scratch("trailing-input");
    let mut b = npy_raw(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        &f32s(&GOOD6),
    );
    b.extend_from_slice(b"junk");
    let case = npy_case(&d, &b);
    golden_refuses(&d, &case, &[], &["x.npy", "4 trailing bytes"]);
}

// --- FIFOs and devices as case files --------------------------------------------------------

#[test]
fn fifo_as_case_file_is_refused_not_waited_on() {
    let d = scratch("fifo-case");
    let fifo = d.join("case.json");
    mkfifo(&fifo);
    // No writer ever opens it: an open() without O_NONBLOCK would block forever.
    let msg = golden_refuses(&d, &fifo, &[], &["case.json", "FIFO"]);
    assert!(msg.contains("not a regular file"), "{msg}");
}

#[test]
fn fifo_as_npy_input_is_refused() {
    let d = scratch("fifo-npy");
    let case = npy_case(&d, b"");
    std::fs::remove_file(d.join("x.npy")).unwrap();
    mkfifo(&d.join("x.npy"));
    golden_refuses(&d, &case, &[], &["inputs.x.npy", "x.npy", "FIFO"]);
}

#[test]
fn dev_zero_as_case_file_is_refused() {
    let d = scratch("dev-zero-case");
    golden_refuses(
        &d,
        Path::new("/dev/zero"),
        &[],
        &["/dev/zero", "character device"],
    );
    // Through a symlink too (metadata follows it).
    let link = d.join("case.json");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    golden_refuses(&d, &link, &[], &["case.json", "character device"]);
}

#[test]
fn a_directory_as_case_file_is_refused() {
    let d = scratch("dir-case");
    let sub = d.join("case.json");
    std::fs::create_dir(&sub).unwrap();
    golden_refuses(&d, &sub, &[], &["case.json", "is a directory"]);
}

// --- the protocol: manifest, outputs --------------------------------------------------------

/// An exported suite (forward on nchw, f32: 17 cases) filled by a built-in kernel.
fn filled_suite(name: &str) -> (PathBuf, String) {
    let d = scratch(name);
    let dir = d.join("suite");
    let r = bnconf(&[
        "export",
        "--suite",
        "default",
        "--dtype",
        "f32",
        "--ops",
        "forward",
        "--layouts",
        "nchw",
        "--out",
        s(&dir),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let r = bnconf(&["kernel", "twopass-native", s(&dir)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let m: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let id = m["cases"][0].as_str().unwrap().to_string();
    let r = bnconf(&["check", s(&dir)]);
    assert_eq!(r.code, Some(0), "the filled suite conforms: {}", r.stderr);
    (dir, id)
}

/// `bnconf check DIR`: exit 1, the case failing as malformed, naming `needles`; DIR gains no file.
fn check_fails_case(dir: &Path, id: &str, needles: &[&str]) {
    let before = listing(dir);
    let r = bnconf(&["check", s(dir)]);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(1), "{all}");
    assert!(all.contains("MALFORMED"), "{all}");
    assert!(all.contains(id), "{all}");
    for n in needles {
        assert!(all.contains(n), "does not name {n:?}: {all}");
    }
    assert!(all.contains(" conforming, 1 not conforming"), "{all}");
    assert_eq!(listing(dir), before, "check wrote into DIR");
}

#[test]
fn fifo_as_kernel_output_fails_that_case() {
    let (dir, id) = filled_suite("fifo-output");
    let y = dir.join(&id).join("out/y.npy");
    std::fs::remove_file(&y).unwrap();
    mkfifo(&y);
    check_fails_case(&dir, &id, &[&format!("{id}/out/y.npy"), "FIFO"]);
}

#[test]
fn fifo_as_unsupported_marker_fails_that_case() {
    let (dir, id) = filled_suite("fifo-unsupported");
    mkfifo(&dir.join(&id).join("out/unsupported"));
    check_fails_case(&dir, &id, &[&format!("{id}/out/unsupported"), "FIFO"]);
}

#[test]
fn fifo_written_by_exec_kernel_fails_that_case() {
    // The whole round trip: `--exec` exports, runs the kernel (which fills every output and
    // then leaves a FIFO as one case's y.npy), judges.
    let d = scratch("fifo-exec");
    let script = d.join("kernel.sh");
    std::fs::write(
        &script,
        format!(
            "set -e\n'{}' kernel twopass-native \"$1\"\nc=$(ls \"$1\" | grep -v manifest | head -n 1)\nrm \"$1/$c/out/y.npy\"\nmkfifo \"$1/$c/out/y.npy\"\n",
            common::BNCONF
        ),
    )
    .unwrap();
    let exec = format!("sh {}", s(&script));
    let r = bnconf(&[
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
    ]);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(1), "{all}");
    assert!(all.contains("out/y.npy") && all.contains("FIFO"), "{all}");
}

#[test]
fn sparse_10_gib_output_is_refused_by_size_without_reading() {
    let (dir, id) = filled_suite("sparse-output");
    let y = dir.join(&id).join("out/y.npy");
    let good = std::fs::read(&y).unwrap();
    // The valid file, then 10 GiB of (sparse) zeros: refused from its size alone.
    let f = std::fs::OpenOptions::new().write(true).open(&y).unwrap();
    f.set_len(good.len() as u64 + (10 << 30)).unwrap();
    drop(f);
    check_fails_case(
        &dir,
        &id,
        &[&format!("{id}/out/y.npy"), "exceeds the limit"],
    );
    std::fs::remove_file(&y).unwrap();
}

#[test]
fn trailing_bytes_in_an_output_fail_that_case() {
    let (dir, id) = filled_suite("trailing-output");
    let y = dir.join(&id).join("out/y.npy");
    let mut b = std::fs::read(&y).unwrap();
    b.extend_from_slice(&[0u8; 8]);
    std::fs::write(&y, b).unwrap();
    check_fails_case(&dir, &id, &[&format!("{id}/out/y.npy"), "8 trailing bytes"]);
}

#[test]
fn dev_zero_or_fifo_as_manifest_is_refused() {
    let (dir, _) = filled_suite("manifest");
    let m = dir.join("manifest.json");
    std::fs::remove_file(&m).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &m).unwrap();
    let r = bnconf(&["check", s(&dir)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("manifest.json") && r.stderr.contains("character device"),
        "{}",
        r.stderr
    );
    std::fs::remove_file(&m).unwrap();
    mkfifo(&m);
    let r = bnconf(&["check", s(&dir)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("manifest.json") && r.stderr.contains("FIFO"),
        "{}",
        r.stderr
    );
}

// --- shapes before tables -------------------------------------------------------------------

#[test]
fn huge_shape_in_a_kernel_case_is_refused_before_any_table() {
    let (dir, id) = filled_suite("kernel-shape");
    let cd = dir.join(&id);
    std::fs::remove_dir_all(cd.join("out")).unwrap();
    let cpath = cd.join("case.json");
    let mut c: Value = serde_json::from_slice(&std::fs::read(&cpath).unwrap()).unwrap();
    // 10^12 elements: the cell table alone would be 8 TB (it used to abort at 7.6 GB).
    c["shape"] = json!([1_000_000, 1_000_000, 1, 1]);
    std::fs::write(&cpath, serde_json::to_vec(&c).unwrap()).unwrap();
    let only = scratch("kernel-shape-one");
    std::fs::rename(&cd, only.join(&id)).unwrap();
    let r = bnconf(&["kernel", "twopass-native", s(&only)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("case.json: shape"), "{}", r.stderr);
    assert!(r.stderr.contains("1000000000000 elements"), "{}", r.stderr);
    assert!(!only.join(&id).join("out").exists(), "wrote out/");
    // Within the limit but not what the inputs hold: refused naming the input, no table.
    c["shape"] = json!([1000, 1000, 1, 1]);
    std::fs::write(
        only.join(&id).join("case.json"),
        serde_json::to_vec(&c).unwrap(),
    )
    .unwrap();
    let r = bnconf(&["kernel", "twopass-native", s(&only)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("x.npy") && r.stderr.contains("expected 1000000"),
        "{}",
        r.stderr
    );
    assert!(!only.join(&id).join("out").exists(), "wrote out/");
}

#[test]
fn kernel_validate_checks_lengths_before_building_cells() {
    // The library path: a case whose shape disagrees with its inputs is refused by
    // `validate` from the shape alone (it used to build the cell table first).
    let case = bnconf_impl::Case {
        op: bnconf_impl::Op::Forward,
        layout: bnconf_impl::Layout::Nchw,
        shape: vec![1_000_000, 1_000_000, 1, 1],
        dtype: bnconf_impl::Dtype::F32,
        param_dtype: bnconf_impl::Dtype::F32,
        eps: 1e-5,
        inputs: [("x", 6), ("gamma", 2), ("beta", 2)]
            .into_iter()
            .map(|(n, k)| (n.to_string(), vec![0.0; k]))
            .collect(),
        params: Default::default(),
    };
    let e = bnconf_impl::validate(&case).unwrap_err();
    assert!(
        e.contains("input `x` has 6 values, expected 1000000000000"),
        "{e}"
    );
}

// --- limits the machine can honour ----------------------------------------------------------

#[test]
fn json_path_limits_name_the_field() {
    let d = scratch("json-limits");
    let case = json!({
        "op": "forward", "layout": "rows", "shape": [2, 3], "dtype": "f32", "eps": "1e-5",
        "inputs": {"x": [0.5, 1, -2, 3, 4, 5], "gamma": [1, 2], "beta": [0, 0.5]}
    });
    let p = d.join("case.json");
    std::fs::write(&p, serde_json::to_vec(&case).unwrap()).unwrap();
    // An inline array over the limit is refused by the scan before it is parsed.
    golden_refuses(
        &d,
        &p,
        &["--max-json-elems", "5"],
        &["inputs.x", "--max-json-elems"],
    );
    // A case over the per-element exact path's limit (the -o golden), npy inputs or not ...
    let np = npy_case(
        &d,
        &npy_raw(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
            &f32s(&GOOD6),
        ),
    );
    let o = d.join("out.json");
    let r = bnconf(&["golden", s(&np), "-o", s(&o), "--max-json-elems", "5"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("shape") && r.stderr.contains("--max-json-elems"),
        "{}",
        r.stderr
    );
    assert!(!o.exists());
    // ... while the fast path (--out-dir on npy inputs) takes it.
    let od = d.join("od");
    let r = bnconf(&[
        "golden",
        s(&np),
        "--out-dir",
        s(&od),
        "--max-json-elems",
        "5",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(od.join("golden.json").is_file());
}

#[test]
fn a_json_document_of_too_many_values_is_refused_before_parsing() {
    let d = scratch("json-values");
    // Many small arrays in an extra field: each within the per-array limit, together over
    // the document's (8 values per element of --max-json-elems).
    let junk: serde_json::Map<String, Value> = (0..20)
        .map(|i| (format!("a{i}"), json!([1, 2, 3, 4])))
        .collect();
    let case = json!({
        "op": "forward", "layout": "rows", "shape": [2, 3], "dtype": "f32", "eps": "1e-5",
        "junk": junk,
        "inputs": {"x": [0.5, 1, -2, 3, 4, 5], "gamma": [1, 2], "beta": [0, 0.5]}
    });
    let p = d.join("case.json");
    std::fs::write(&p, serde_json::to_vec(&case).unwrap()).unwrap();
    golden_refuses(
        &d,
        &p,
        &["--max-json-elems", "6"],
        &["case.json", "JSON values"],
    );
}

// --- outputs that cannot be written ---------------------------------------------------------

#[test]
fn output_under_a_regular_file_is_refused_leaving_nothing() {
    let d = scratch("output-under-file");
    let case = npy_case(
        &d,
        &npy_raw(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
            &f32s(&GOOD6),
        ),
    );
    let file = d.join("file");
    std::fs::write(&file, b"keep").unwrap();
    let before = listing(&d);
    for args in [
        vec!["golden", s(&case), "-o", &format!("{}/sub.json", s(&file))],
        vec![
            "golden",
            s(&case),
            "--out-dir",
            &format!("{}/sub", s(&file)),
        ],
    ] {
        let r = bnconf(&args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("file/sub") && r.stderr.contains("not a directory"),
            "{args:?}: {}",
            r.stderr
        );
        assert_eq!(listing(&d), before, "{args:?} left files");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }
}

#[test]
fn our_writer_and_a_numpy_header_agree() {
    // What we write is what numpy writes (and what we read back).
    let h = header_bytes(Descr::F4, &[2, 3]);
    let numpy = npy_raw(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, ), }",
        &[],
    );
    assert_eq!(h, numpy);
}

// --- verify and onnx read regular files only ------------------------------------------------

#[test]
fn fifo_as_vector_manifest_or_vector_file_is_refused() {
    let d = scratch("verify-fifo");
    mkfifo(&d.join("manifest.json"));
    exits_naming(&bnconf(&["verify", s(&d)]), 2, &["manifest.json", "FIFO"]);
    // A listed file that is a FIFO: that file is a mismatch, never a blocked read.
    std::fs::remove_file(d.join("manifest.json")).unwrap();
    let manifest = json!({"format": "bnconf-vectors/1", "files": [
        {"path": "a.json", "sha256": "00"}]});
    std::fs::write(d.join("manifest.json"), manifest.to_string()).unwrap();
    mkfifo(&d.join("a.json"));
    exits_naming(&bnconf(&["verify", s(&d)]), 1, &["a.json", "FIFO"]);
}

#[test]
fn fifo_in_an_onnx_test_directory_is_refused() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/onnx/node/test_batchnorm_example");
    for victim in ["test_data_set_0/input_0.pb", "model.onnx"] {
        let d = scratch("onnx-fifo").join("test_batchnorm_example");
        std::fs::create_dir_all(d.join("test_data_set_0")).unwrap();
        for f in listing(&src).into_iter().filter(|f| src.join(f).is_file()) {
            std::fs::copy(src.join(&f), d.join(&f)).unwrap();
        }
        std::fs::remove_file(d.join(victim)).unwrap();
        mkfifo(&d.join(victim));
        let file = Path::new(victim).file_name().unwrap().to_str().unwrap();
        exits_naming(&bnconf(&["onnx", s(&d)]), 2, &[file, "FIFO"]);
    }
}

/// `r` exited with `code`, its output (stdout and stderr) naming every needle.
fn exits_naming(r: &Run, code: i32, needles: &[&str]) {
    let all = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(code), "{all}");
    for n in needles {
        assert!(all.contains(n), "{n:?} not in: {all}");
    }
}
