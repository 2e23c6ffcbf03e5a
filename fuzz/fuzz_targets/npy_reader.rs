//! npy files: arbitrary bytes → `read_npy_bytes` (the same reader as `read_npy`, without the
//! file) → exact values in f32. Header lengths, shapes and element counts come from the
//! input and must be checked before anything is allocated.
#![no_main]

use bnconf::formats::case::{npy_to_exact, Dtype};
use bnconf::formats::npy::read_npy_bytes;
use libfuzzer_sys::fuzz_target;
use bnconf_spec::exact::round::FloatFormat;

fuzz_target!(|data: &[u8]| {
    let Ok((shape, d)) = read_npy_bytes(data, 1 << 16) else {
        return;
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .expect("element count checked by the reader");
    assert_eq!(n, d.len(), "shape {shape:?} vs {} elements", d.len());
    let _ = npy_to_exact("x", &d, Dtype::Float(FloatFormat::F32));
});
