//! `expectations`: the body is `bnconf::fuzzing::expectations_file` (shared with the corpus replay of
//! conformance/tests/fuzz_corpus.rs); see docs/FUZZ.md. The prepared cases are built once,
//! before the first unit (seconds of exact evaluation that no unit should be charged with).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        bnconf::fuzzing::output_cases();
    },
    |data: &[u8]| bnconf::fuzzing::expectations_file(data)
);
