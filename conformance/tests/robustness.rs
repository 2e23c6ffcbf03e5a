//! Malformed case files fed to `bnconf golden` (FORMAT.md: "Bad input ... gets a clear error
//! naming the field and a non-zero exit, never a panic and never a partial output file").
//!
//! A data-driven table: every row is a case file (plus any npy files beside it), extra CLI
//! flags, and the substring the error must contain (the field at fault). Each row is run three
//! times, with `-o out.json`, `--out-dir DIR` and `--out-dir DIR --exact-path`, and must: exit with status 2, name the field
//! on stderr, not panic, finish within 5 s, and leave no file behind (no `out.json`, no
//! temporary file, nothing in the output directory).
//!
//! The messages themselves are an insta snapshot
//! (`tests/snapshots/robustness__malformed_case_messages.snap`): one entry per row, the exit
//! status and stderr (the scratch directory redacted), so that a changed message shows in
//! review. To accept a deliberate change:
//! `INSTA_UPDATE=always cargo test --release -p bnconf --test robustness`.
//!
//! Crashes found by the fuzz targets in `fuzz/` (docs/FUZZ.md) become rows here (named
//! `fuzz-*`); the npy rows on shape overflow and deep headers cover what the npy target probes.

mod common;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a row feeds to `bnconf golden`.
enum Body {
    /// Raw bytes of the case file.
    Raw(Vec<u8>),
    /// A JSON case.
    Json(Value),
}

struct Row {
    name: &'static str,
    body: Body,
    /// Files beside the case file.
    files: Vec<(&'static str, Vec<u8>)>,
    /// Extra CLI flags.
    flags: Vec<&'static str>,
    /// The error must contain this (the field at fault).
    field: &'static str,
}

fn row(name: &'static str, body: Body, field: &'static str) -> Row {
    Row {
        name,
        body,
        files: Vec::new(),
        flags: Vec::new(),
        field,
    }
}

/// A valid forward case on `rows` `[2, 3]`, f32.
fn base() -> Value {
    json!({
        "format": "bnconf-case/1",
        "id": "robust",
        "op": "forward",
        "layout": "rows",
        "shape": [2, 3],
        "dtype": "f32",
        "eps": "1e-5",
        "inputs": {
            "x": [0.5, "0x1.8p+1", "-2.25", "1/3", 7, "2"],
            "gamma": ["1", "2"],
            "beta": ["0", "0.5"]
        }
    })
}

/// The base case with `f` applied.
fn with(f: impl FnOnce(&mut Value)) -> Body {
    let mut v = base();
    f(&mut v);
    Body::Json(v)
}

/// The base case with `x[3]` replaced by raw JSON text (for number literals serde cannot
/// hold as f64, e.g. `1e999`).
fn x3_raw(lit: &str) -> Body {
    let text = serde_json::to_string(&base()).unwrap();
    let text = text.replacen("\"1/3\"", lit, 1);
    assert!(text.contains(lit));
    Body::Raw(text.into_bytes())
}

/// Another op's case on `rows` `[2, 3]`, with the given inputs and eps.
fn op_case(op: &str, dtype: &str, eps: &str, inputs: Value) -> Body {
    let mut v = base();
    v["op"] = json!(op);
    v["dtype"] = json!(dtype);
    v["eps"] = json!(eps);
    v["inputs"] = inputs;
    Body::Json(v)
}

const X6: [&str; 6] = ["0.5", "1", "-2", "3", "4", "5"];

/// The base case with `inputs.x` read from `x.npy`.
fn npy_case() -> Body {
    with(|v| v["inputs"]["x"] = json!({"npy": "x.npy"}))
}

/// An npy file: version 1.0, the given header dict (padded), then `data`.
fn npy_bytes(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    npy_raw_header(&dict, data)
}

fn npy_raw_header(dict: &str, data: &[u8]) -> Vec<u8> {
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

fn npy_row(name: &'static str, npy: Vec<u8>, field: &'static str) -> Row {
    Row {
        files: vec![("x.npy", npy)],
        ..row(name, npy_case(), field)
    }
}

fn rows() -> Vec<Row> {
    let good6 = f32s(&[0.5, 1.0, -2.0, 3.0, 4.0, 5.0]);
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let long_digits = "1".repeat(100_000);
    vec![
        // --- not JSON, not a case object ---
        row("empty file", Body::Raw(Vec::new()), "case.json"),
        row(
            "truncated JSON",
            Body::Raw(br#"{"format": "bnconf-case/1", "op": "forw"#.to_vec()),
            "case.json: invalid JSON",
        ),
        row(
            "trailing garbage",
            Body::Raw(format!("{} xyz", serde_json::to_string(&base()).unwrap()).into_bytes()),
            "case.json: invalid JSON",
        ),
        row(
            "two objects",
            Body::Raw(format!("{0}{0}", serde_json::to_string(&base()).unwrap()).into_bytes()),
            "case.json: invalid JSON",
        ),
        row("not an object", Body::Json(json!([1, 2, 3])), "(case)"),
        row("a bare number", Body::Raw(b"42".to_vec()), "(case)"),
        row(
            "not UTF-8",
            Body::Raw(b"{\"op\": \"\xff\xfe\"}".to_vec()),
            "case.json",
        ),
        row(
            "deep nesting (depth 10000)",
            Body::Raw(deep(10_000).into_bytes()),
            "case.json: invalid JSON",
        ),
        row(
            "deep nesting inside inputs.x",
            x3_raw(&deep(10_000)),
            "case.json: invalid JSON",
        ),
        row(
            "deep objects (depth 10000)",
            Body::Raw(format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)).into_bytes()),
            "case.json: invalid JSON",
        ),
        Row {
            flags: vec!["--max-file-bytes", "100"],
            ..row(
                "file above --max-file-bytes",
                with(|_| {}),
                "--max-file-bytes",
            )
        },
        // --- missing fields, unknown fields ---
        row(
            "missing op",
            with(|v| {
                v.as_object_mut().unwrap().remove("op");
            }),
            "op: missing",
        ),
        row(
            "missing layout",
            with(|v| {
                v.as_object_mut().unwrap().remove("layout");
            }),
            "layout: missing",
        ),
        row(
            "missing shape",
            with(|v| {
                v.as_object_mut().unwrap().remove("shape");
            }),
            "shape: missing",
        ),
        row(
            "missing dtype",
            with(|v| {
                v.as_object_mut().unwrap().remove("dtype");
            }),
            "dtype: missing",
        ),
        row(
            "missing eps",
            with(|v| {
                v.as_object_mut().unwrap().remove("eps");
            }),
            "eps: missing",
        ),
        row(
            "missing inputs",
            with(|v| {
                v.as_object_mut().unwrap().remove("inputs");
            }),
            "inputs: missing",
        ),
        row(
            "missing inputs.gamma",
            with(|v| {
                v["inputs"].as_object_mut().unwrap().remove("gamma");
            }),
            "inputs.gamma: missing",
        ),
        row(
            "unknown input inputs.dy for forward",
            with(|v| v["inputs"]["dy"] = json!([1, 2, 3, 4, 5, 6])),
            "inputs.dy",
        ),
        row(
            "unknown format",
            with(|v| v["format"] = json!("bnconf-case/2")),
            "format",
        ),
        // --- wrong types ---
        row(
            "op not a string",
            with(|v| v["op"] = json!(5)),
            "op: must be",
        ),
        row(
            "id not a string",
            with(|v| v["id"] = json!([1])),
            "id: must be",
        ),
        row(
            "shape not an array",
            with(|v| v["shape"] = json!("2x3")),
            "shape: must be",
        ),
        row(
            "shape element a string",
            with(|v| v["shape"] = json!([2, "3"])),
            "shape[1]",
        ),
        row(
            "shape negative",
            with(|v| v["shape"] = json!([-2, 3])),
            "shape[0]",
        ),
        row(
            "shape fractional",
            with(|v| v["shape"] = json!([2.5, 3])),
            "shape[0]",
        ),
        row(
            "shape beyond u64",
            with(|v| v["shape"] = json!(["18446744073709551616", 3])),
            "shape[0]",
        ),
        row(
            "shape beyond u64 (number)",
            Body::Raw(
                serde_json::to_string(&base())
                    .unwrap()
                    .replacen("[2,3]", "[18446744073709551616,3]", 1)
                    .into_bytes(),
            ),
            "shape[0]",
        ),
        row(
            "eps a bool",
            with(|v| v["eps"] = json!(true)),
            "eps: must be",
        ),
        row("eps null", with(|v| v["eps"] = json!(null)), "eps: must be"),
        row(
            "inputs an array",
            with(|v| v["inputs"] = json!([])),
            "inputs: must be",
        ),
        row(
            "inputs.x a string",
            with(|v| v["inputs"]["x"] = json!("1,2,3")),
            "inputs.x: must be",
        ),
        row(
            "inputs.x[3] a bool",
            with(|v| v["inputs"]["x"][3] = json!(true)),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] null",
            with(|v| v["inputs"]["x"][3] = json!(null)),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] an array",
            with(|v| v["inputs"]["x"][3] = json!([1])),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] not a number",
            with(|v| v["inputs"]["x"][3] = json!("one")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] empty string",
            with(|v| v["inputs"]["x"][3] = json!("")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] zero denominator",
            with(|v| v["inputs"]["x"][3] = json!("1/0")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] lone sign",
            with(|v| v["inputs"]["x"][3] = json!("-")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] bare 0x",
            with(|v| v["inputs"]["x"][3] = json!("0x")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x[3] multibyte",
            with(|v| v["inputs"]["x"][3] = json!("−1")),
            "inputs.x[3]",
        ),
        row(
            "inputs.x.npy not a string",
            with(|v| v["inputs"]["x"] = json!({"npy": 5})),
            "inputs.x.npy",
        ),
        // --- unknown op / layout / dtype ---
        row(
            "unknown op",
            with(|v| v["op"] = json!("forwards")),
            "op: unknown",
        ),
        row(
            "unknown layout",
            with(|v| v["layout"] = json!("nwhc")),
            "layout: unknown",
        ),
        row(
            "unknown dtype",
            with(|v| v["dtype"] = json!("f128")),
            "dtype: unknown",
        ),
        // --- lengths and shapes ---
        row(
            "inputs.x too short",
            with(|v| {
                v["inputs"]["x"].as_array_mut().unwrap().pop();
            }),
            "inputs.x: expected 6",
        ),
        row(
            "inputs.gamma too long",
            with(|v| v["inputs"]["gamma"] = json!([1, 2, 3])),
            "inputs.gamma: expected 2",
        ),
        row(
            "shape with a 0",
            with(|v| v["shape"] = json!([0, 3])),
            "shape",
        ),
        row(
            "shape of the wrong rank",
            with(|v| v["shape"] = json!([2, 3, 1])),
            "shape",
        ),
        row(
            "shape product overflows usize",
            with(|v| {
                v["layout"] = json!("nchw");
                v["shape"] = json!([4294967296u64, 4294967296u64, 2, 2]);
            }),
            "shape",
        ),
        row(
            "shape above --max-elems (default)",
            with(|v| v["shape"] = json!([1u64 << 20, 1u64 << 20])),
            "shape",
        ),
        Row {
            flags: vec!["--max-elems", "4"],
            ..row("shape above --max-elems 4", with(|_| {}), "shape")
        },
        // --- non-finite values ---
        row(
            "nan string",
            with(|v| v["inputs"]["x"][3] = json!("nan")),
            "inputs.x[3]",
        ),
        row(
            "inf string",
            with(|v| v["inputs"]["x"][3] = json!("-Infinity")),
            "inputs.x[3]",
        ),
        row(
            "NaN bare JSON token",
            x3_raw("NaN"),
            "case.json: invalid JSON",
        ),
        row("1e999 overflows f32", x3_raw("1e999"), "inputs.x[3]"),
        row(
            "3.5e38 overflows f32",
            with(|v| v["inputs"]["x"][3] = json!("3.5e38")),
            "inputs.x[3]",
        ),
        row(
            "1e999 overflows f64",
            {
                let Body::Raw(b) = x3_raw("1e999") else {
                    unreachable!()
                };
                Body::Raw(
                    String::from_utf8(b)
                        .unwrap()
                        .replace("\"f32\"", "\"f64\"")
                        .into_bytes(),
                )
            },
            "inputs.x[3]",
        ),
        row(
            "gamma overflows f16",
            with(|v| {
                v["dtype"] = json!("f16");
                v["inputs"]["gamma"][1] = json!("65520");
            }),
            "inputs.gamma[1]",
        ),
        // --- exponent bombs and long literals ---
        row(
            "exponent bomb 1e999999999",
            with(|v| v["inputs"]["x"][3] = json!("1e999999999")),
            "inputs.x[3]",
        ),
        row(
            "exponent bomb 0x1p99999999",
            with(|v| v["inputs"]["x"][3] = json!("0x1p99999999")),
            "inputs.x[3]",
        ),
        row(
            "exponent bomb 1e-99999999 (JSON number)",
            x3_raw("1e-99999999"),
            "inputs.x[3]",
        ),
        row(
            "exponent bomb with 40 digits",
            with(|v| v["inputs"]["x"][3] = json!("1e-9999999999999999999999999999999999999999")),
            "inputs.x[3]",
        ),
        row(
            "exponent bomb in eps",
            with(|v| v["eps"] = json!("1e-999999999")),
            "eps",
        ),
        row(
            "exponent bomb in a rational",
            with(|v| v["inputs"]["x"][3] = json!("1/1e999999999")),
            "inputs.x[3]",
        ),
        row(
            "exponent bomb in exact sqrt",
            op_case(
                "sync_backward",
                "exact",
                "0",
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [0, 0], "m2": [1, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": ["sqrt(1e999999999)", 0]}),
            ),
            "inputs.mean_dy_xhat[0]",
        ),
        row(
            "long digit string (100000 digits)",
            with(|v| v["inputs"]["x"][3] = json!(long_digits.clone())),
            "inputs.x[3]",
        ),
        row(
            "long digit JSON number (100000 digits)",
            x3_raw(&long_digits),
            "inputs.x[3]",
        ),
        // --- ill-posed problems ---
        row(
            "negative variance (eval var < -eps)",
            op_case(
                "eval",
                "f32",
                "1e-5",
                json!({"x": X6, "gamma": [1, 1], "beta": [0, 0], "mean": [0, 0], "var": [1, "-1"]}),
            ),
            "var",
        ),
        row(
            "var + eps = 0 (eval)",
            op_case(
                "eval",
                "exact",
                "1/4",
                json!({"x": X6, "gamma": [1, 1], "beta": [0, 0], "mean": [0, 0], "var": ["-0.25", 1]}),
            ),
            "var",
        ),
        row(
            "m2 - mean^2 + eps <= 0 (sync_forward)",
            op_case(
                "sync_forward",
                "f64",
                "1e-5",
                json!({"x": X6, "gamma": [1, 1], "beta": [0, 0], "mean": [0, 2], "m2": [1, 1]}),
            ),
            "m2",
        ),
        row(
            "m2 - mean^2 + eps <= 0 (sync_backward)",
            op_case(
                "sync_backward",
                "f32",
                "0",
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [1, 0], "m2": [1, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": [0, 0]}),
            ),
            "m2",
        ),
        // running_update: momentum and convention are required, checked, named.
        row(
            "running_update without momentum",
            with(|v| {
                v["op"] = json!("running_update");
                v["convention"] = json!("pytorch");
                v["inputs"] = json!({"x": X6, "running_mean": [0, 0], "running_var": [1, 1]});
            }),
            "momentum",
        ),
        row(
            "running_update with momentum 1.5",
            with(|v| {
                v["op"] = json!("running_update");
                v["momentum"] = json!(1.5);
                v["convention"] = json!("onnx");
                v["inputs"] = json!({"x": X6, "running_mean": [0, 0], "running_var": [1, 1]});
            }),
            "momentum",
        ),
        row(
            "running_update with momentum -0.1",
            with(|v| {
                v["op"] = json!("running_update");
                v["momentum"] = json!("-0.1");
                v["convention"] = json!("onnx");
                v["inputs"] = json!({"x": X6, "running_mean": [0, 0], "running_var": [1, 1]});
            }),
            "momentum",
        ),
        row(
            "running_update with an unknown convention",
            with(|v| {
                v["op"] = json!("running_update");
                v["momentum"] = json!("0.1");
                v["convention"] = json!("keras");
                v["inputs"] = json!({"x": X6, "running_mean": [0, 0], "running_var": [1, 1]});
            }),
            "convention",
        ),
        row(
            "running_update without convention",
            with(|v| {
                v["op"] = json!("running_update");
                v["momentum"] = json!("0.1");
                v["inputs"] = json!({"x": X6, "running_mean": [0, 0], "running_var": [1, 1]});
            }),
            "convention",
        ),
        // sync_stats: rows [C, R], integer counts, not all zero.
        row(
            "sync_stats on nchw",
            with(|v| {
                v["op"] = json!("sync_stats");
                v["layout"] = json!("nchw");
                v["shape"] = json!([1, 2, 1, 3]);
                v["inputs"] = json!({"shard_count": [1, 2, 3], "shard_mean": X6, "shard_m2": X6});
            }),
            "layout",
        ),
        row(
            "sync_stats with a fractional count",
            with(|v| {
                v["op"] = json!("sync_stats");
                v["inputs"] =
                    json!({"shard_count": [1, "1/2", 3], "shard_mean": X6, "shard_m2": X6});
            }),
            "shard_count[1]",
        ),
        row(
            "sync_stats with a negative count",
            with(|v| {
                v["op"] = json!("sync_stats");
                v["inputs"] = json!({"shard_count": [1, 2, -3], "shard_mean": X6, "shard_m2": X6});
            }),
            "shard_count[2]",
        ),
        row(
            "sync_stats with every shard empty",
            with(|v| {
                v["op"] = json!("sync_stats");
                v["inputs"] = json!({"shard_count": [0, 0, 0], "shard_mean": X6, "shard_m2": X6});
            }),
            "shard_count",
        ),
        row(
            "sync_stats with counts of the wrong length",
            with(|v| {
                v["op"] = json!("sync_stats");
                v["inputs"] = json!({"shard_count": [1, 2], "shard_mean": X6, "shard_m2": X6});
            }),
            "shard_count",
        ),
        row(
            "constant channel with eps 0 (forward)",
            with(|v| {
                v["eps"] = json!("0");
                v["inputs"]["x"] = json!([2, 2, 2, 1, 2, 3]);
            }),
            "var",
        ),
        row(
            "constant channel with eps 0 (backward)",
            op_case(
                "backward",
                "f64",
                "0",
                json!({"x": [1, 2, 3, 5, 5, 5], "dy": X6, "gamma": [1, 1]}),
            ),
            "var",
        ),
        row("negative eps", with(|v| v["eps"] = json!("-1e-5")), "eps"),
        row("eps nan", with(|v| v["eps"] = json!("nan")), "eps"),
        row(
            "mean_dy_xhat radicand not in the channel's field",
            op_case(
                "sync_backward",
                "exact",
                "0",
                // q = m2 - mean^2 + eps = 2 on channel 0: sqrt(3) is not in Q(sqrt(2)).
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [0, 0], "m2": [2, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": ["1 + 2*sqrt(3)", 0]}),
            ),
            "mean_dy_xhat",
        ),
        row(
            "mean_dy_xhat radicand not positive",
            op_case(
                "sync_backward",
                "exact",
                "0",
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [0, 0], "m2": [2, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": ["1 + 2*sqrt(-2)", 0]}),
            ),
            "inputs.mean_dy_xhat[0]",
        ),
        row(
            "mean_dy_xhat malformed sqrt",
            op_case(
                "sync_backward",
                "exact",
                "0",
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [0, 0], "m2": [2, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": ["1 + 2*sqrt(2", 0]}),
            ),
            "inputs.mean_dy_xhat[0]",
        ),
        row(
            "sqrt value with dtype f32",
            with(|v| v["inputs"]["x"][3] = json!("1 + sqrt(2)")),
            "inputs.x[3]",
        ),
        row(
            "sqrt mean_dy_xhat with dtype f32",
            op_case(
                "sync_backward",
                "f32",
                "0",
                json!({"x": X6, "dy": X6, "gamma": [1, 1], "mean": [0, 0], "m2": [2, 1],
                       "mean_dy": [0, 0], "mean_dy_xhat": ["sqrt(2)", 0]}),
            ),
            "inputs.mean_dy_xhat[0]",
        ),
        row(
            "sqrt value in x with dtype exact",
            with(|v| {
                v["dtype"] = json!("exact");
                v["inputs"]["x"][3] = json!("sqrt(2)");
            }),
            "inputs.x[3]",
        ),
        // --- npy inputs ---
        row("npy: missing file", npy_case(), "inputs.x.npy"),
        npy_row("npy: empty file", Vec::new(), "inputs.x.npy"),
        npy_row("npy: magic only", b"\x93NUMPY".to_vec(), "inputs.x.npy"),
        npy_row(
            "npy: truncated header",
            npy_bytes("<f4", false, "(2, 3)", &good6)[..30].to_vec(),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: truncated data",
            npy_bytes("<f4", false, "(2, 3)", &good6[..20]),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: int32",
            npy_bytes("<i4", false, "(2, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: big-endian >f4",
            npy_bytes(">f4", false, "(2, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: float16",
            npy_bytes("<f2", false, "(2, 3)", &good6[..12]),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: object dtype (pickle)",
            npy_bytes("|O", false, "(2, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: wrong shape (3, 2)",
            npy_bytes("<f4", false, "(3, 2)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: wrong length (7,)",
            npy_bytes("<f4", false, "(7,)", &f32s(&[1.0; 7])),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: Fortran order",
            npy_bytes("<f4", true, "(2, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: header lies about size (1e9 elements)",
            npy_bytes("<f4", false, "(1000000000,)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: header lies about size (100000 elements)",
            npy_bytes("<f8", false, "(100000,)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: shape product overflows",
            npy_bytes("<f4", false, "(4294967296, 4294967296, 4)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: negative dimension",
            npy_bytes("<f4", false, "(-1, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: garbage header",
            npy_raw_header("{'descr': '<f4', 'shape': (2, 3)", &good6),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: header length beyond the file (v2, 4 GiB)",
            {
                let mut b = b"\x93NUMPY\x02\x00".to_vec();
                b.extend_from_slice(&u32::MAX.to_le_bytes());
                b.extend_from_slice(b"{'descr': '<f4'");
                b
            },
            "inputs.x.npy",
        ),
        npy_row(
            "npy: deeply nested header",
            npy_raw_header(
                &format!(
                    "{{'descr': '<f4', 'fortran_order': False, 'shape': {}2, 3{}, }}",
                    "(".repeat(20_000),
                    ")".repeat(20_000)
                ),
                &good6,
            ),
            "inputs.x.npy",
        ),
        npy_row(
            "npy: unknown version",
            {
                let mut b = npy_bytes("<f4", false, "(2, 3)", &good6);
                b[6] = 9;
                b
            },
            "inputs.x.npy",
        ),
        npy_row(
            "npy: nan value",
            npy_bytes(
                "<f4",
                false,
                "(2, 3)",
                &f32s(&[0.5, 1.0, -2.0, f32::NAN, 4.0, 5.0]),
            ),
            "inputs.x[3]",
        ),
        npy_row(
            "npy: inf value (f8)",
            npy_bytes(
                "<f8",
                false,
                "(6,)",
                &[0.5f64, 1.0, -2.0, f64::INFINITY, 4.0, 5.0]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
            "inputs.x[3]",
        ),
        npy_row(
            "npy: f8 value overflows f32",
            npy_bytes(
                "<f8",
                false,
                "(2, 3)",
                &[0.5f64, 1.0, -2.0, 1e300, 4.0, 5.0]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
            "inputs.x[3]",
        ),
        Row {
            files: vec![("x.npy", npy_bytes("<f4", false, "(2, 3)", &good6))],
            flags: vec!["--max-elems", "5"],
            ..row(
                "npy: above --max-elems",
                with(|v| {
                    v["shape"] = json!([1, 3]);
                    v["inputs"]["x"] = json!({"npy": "x.npy"});
                    v["inputs"]["gamma"] = json!([1]);
                    v["inputs"]["beta"] = json!([1]);
                }),
                "inputs.x.npy",
            )
        },
        Row {
            files: vec![("x.npy", npy_bytes("<f4", false, "(2, 3)", &good6))],
            ..row(
                "npy: a directory",
                with(|v| v["inputs"]["x"] = json!({"npy": "."})),
                "inputs.x.npy",
            )
        },
    ]
}

/// The directory every row's scratch directory lies in (redacted as `[SCRATCH]` in the
/// snapshot of the messages).
fn scratch_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("robustness-{}", std::process::id()))
}

fn scratch(name: &str) -> PathBuf {
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    common::scratch("robustness", &slug)
}

fn listing(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// What a run showed the user: its exit status and stderr, the scratch directory redacted.
fn observed(code: Option<i32>, stderr: &str) -> String {
    let root = scratch_root().display().to_string();
    let code = code.map_or("none (killed)".to_string(), |c| c.to_string());
    let stderr = stderr.trim_end().replace(&root, "[SCRATCH]");
    format!("exit {code}: {stderr}")
}

/// Run `bnconf golden CASE ARGS`; `Err(reason)` when a requirement fails. Also returns what
/// the run showed (see [`observed`]).
fn check_run(r: &Row, case: &Path, args: &[&Path], out_dir: &Path) -> (Result<(), String>, String) {
    let t = Instant::now();
    let out = common::command()
        .arg("golden")
        .arg(case)
        .args(args)
        .args(&r.flags)
        .output()
        .unwrap();
    let elapsed = t.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut why = Vec::new();
    if out.status.code() != Some(2) {
        why.push(format!("exit status {:?}, expected 2", out.status.code()));
    }
    if !stderr.contains(r.field) {
        why.push(format!("stderr does not name {:?}", r.field));
    }
    if stderr.contains("panicked") {
        why.push("panicked".into());
    }
    if elapsed > Duration::from_secs(5) {
        why.push(format!("took {elapsed:?}"));
    }
    let left = listing(out_dir);
    if !left.is_empty() {
        why.push(format!("left files {left:?}"));
    }
    if !out.stdout.is_empty() {
        why.push(format!("wrote {} bytes to stdout", out.stdout.len()));
    }
    let seen = observed(out.status.code(), &stderr);
    if why.is_empty() {
        (Ok(()), seen)
    } else {
        (
            Err(format!("{}; stderr: {}", why.join(", "), stderr.trim_end())),
            seen,
        )
    }
}

#[test]
fn malformed_cases_fail_cleanly() {
    let mut failures = Vec::new();
    // (row name, what each of the three modes showed) for the snapshot
    let mut messages: Vec<(&str, [String; 3])> = Vec::new();
    let rows = rows();
    for r in &rows {
        let d = scratch(r.name);
        let case = d.join("case.json");
        match &r.body {
            Body::Raw(b) => std::fs::write(&case, b).unwrap(),
            Body::Json(v) => std::fs::write(&case, serde_json::to_vec(v).unwrap()).unwrap(),
        }
        for (name, bytes) in &r.files {
            std::fs::write(d.join(name), bytes).unwrap();
        }
        // `-o out.json` into an empty directory.
        let o = d.join("o");
        std::fs::create_dir_all(&o).unwrap();
        let (res, seen_o) = check_run(r, &case, &[Path::new("-o"), &o.join("out.json")], &o);
        if let Err(e) = res {
            failures.push(format!("{} (-o): {e}", r.name));
        }
        // `--out-dir DIR` (not existing beforehand) inside an empty directory.
        let od = d.join("od");
        std::fs::create_dir_all(&od).unwrap();
        let (res, seen_od) = check_run(
            r,
            &case,
            &[Path::new("--out-dir"), &od.join("golden")],
            &od.join("golden"),
        );
        let left = listing(&od);
        let res = res.and_then(|()| {
            if left.is_empty() || left == ["golden"] {
                Ok(())
            } else {
                Err(format!("left files {left:?} beside the output directory"))
            }
        });
        if let Err(e) = res {
            failures.push(format!("{} (--out-dir): {e}", r.name));
        }
        // `--out-dir DIR` into an existing empty directory, by the per-element exact path.
        let oe = d.join("oe");
        std::fs::create_dir_all(&oe).unwrap();
        let (res, seen_oe) = check_run(
            r,
            &case,
            &[Path::new("--out-dir"), &oe, Path::new("--exact-path")],
            &oe,
        );
        if let Err(e) = res {
            failures.push(format!("{} (--out-dir --exact-path): {e}", r.name));
        }
        messages.push((r.name, [seen_o, seen_od, seen_oe]));
        let _ = std::fs::remove_dir_all(&d);
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    // The messages, one entry per row; the three modes share one line when they agree.
    let mut snap = String::new();
    for (name, seen) in &messages {
        snap.push_str(&format!("{name}\n"));
        if seen.iter().all(|s| *s == seen[0]) {
            snap.push_str(&format!("  {}\n", indent(&seen[0])));
        } else {
            for (mode, s) in ["-o", "--out-dir", "--out-dir --exact-path"]
                .iter()
                .zip(seen)
            {
                snap.push_str(&format!("  [{mode}] {}\n", indent(s)));
            }
        }
    }
    let description = "bnconf golden CASE (-o FILE | --out-dir DIR [--exact-path]) on each \
                       malformed case: row, then exit status and stderr";
    insta::with_settings!({description => description}, {
        insta::assert_snapshot!("malformed_case_messages", snap);
    });
}

/// Continuation lines of a multi-line message, indented under their row.
fn indent(s: &str) -> String {
    s.replace('\n', "\n    ")
}

/// The base case itself is valid (so every row fails for its own reason), in every mode.
#[test]
fn base_case_is_valid() {
    let d = scratch("base-case-valid");
    let case = d.join("case.json");
    std::fs::write(&case, serde_json::to_vec(&base()).unwrap()).unwrap();
    std::fs::write(
        d.join("x.npy"),
        npy_bytes(
            "<f4",
            false,
            "(2, 3)",
            &f32s(&[0.5, 1.0, -2.0, 3.0, 4.0, 5.0]),
        ),
    )
    .unwrap();
    let npy = d.join("npy.json");
    let Body::Json(v) = npy_case() else {
        unreachable!()
    };
    std::fs::write(&npy, serde_json::to_vec(&v).unwrap()).unwrap();
    for (c, args) in [
        (
            &case,
            vec!["-o".to_string(), d.join("out.json").display().to_string()],
        ),
        (
            &case,
            vec!["--out-dir".into(), d.join("od1").display().to_string()],
        ),
        (
            &npy,
            vec!["--out-dir".into(), d.join("od2").display().to_string()],
        ),
    ] {
        let out = common::command()
            .arg("golden")
            .arg(c)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(d.join("out.json").is_file());
    assert!(d.join("od1/golden.json").is_file());
    assert!(d.join("od2/y.f32.npy").is_file());
    let _ = std::fs::remove_dir_all(&d);
}

/// Unknown top-level fields are kept verbatim (FORMAT.md: extra fields are welcome; suites
/// use `level` and `tags`), not refused.
#[test]
fn unknown_top_level_fields_are_kept() {
    let d = scratch("unknown-top-level");
    let case = d.join("case.json");
    let mut v = base();
    v["level"] = json!("core");
    std::fs::write(&case, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = common::command().arg("golden").arg(&case).output().unwrap();
    assert!(out.status.success());
    let g: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(g["case"]["level"], json!("core"));
    let _ = std::fs::remove_dir_all(&d);
}
