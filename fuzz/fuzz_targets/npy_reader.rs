//! `npy_reader`: the body is `bnconf::fuzzing::npy_reader` (shared with the corpus replay of
//! conformance/tests/fuzz_corpus.rs); see docs/FUZZ.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bnconf::fuzzing::npy_reader(data));
