//! Case files: arbitrary bytes → JSON → `parse_case` (header, inputs, rounding to the dtype,
//! problem validation); small valid cases are then evaluated exactly and written as a golden
//! document. Any panic, abort, hang or out-of-memory is a bug: malformed input must come back
//! as an error naming the field.
#![no_main]

use bnconf::formats::case::{parse_case, InputLimits};
use libfuzzer_sys::fuzz_target;
use bnconf_spec::exact::round::FloatFormat;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut lim = InputLimits {
        max_elems: 1 << 12,
        max_file_bytes: 1 << 20,
        ..InputLimits::default()
    };
    // Keep exact evaluation cheap per execution (the CLI default is 10000).
    lim.number.max_exponent = 1000;
    // `{"npy": path}` inputs resolve against a directory that does not exist.
    let base = Path::new("/nonexistent/bnconf-fuzz");
    let Ok(case) = parse_case(&v, base, &lim) else {
        return;
    };
    if case.problem.geom.len() > 64 {
        return;
    }
    if let Ok(g) = bnconf::formats::golden::compute(case) {
        let doc = bnconf::formats::golden::golden_json(
            &g,
            &[
                FloatFormat::F64,
                FloatFormat::F32,
                FloatFormat::F16,
                FloatFormat::BF16,
            ],
        );
        let _ = serde_json::to_vec(&doc).unwrap();
    }
});
