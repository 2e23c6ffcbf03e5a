//! Exact literals: arbitrary text → `parse_exact_with` / `parse_rational_with`. Accepted
//! values must print and parse back to the same value; nothing may panic or take long
//! (exponent bombs are refused by the limits before any big number is built).
#![no_main]

use libfuzzer_sys::fuzz_target;
use bnconf_spec::exact::parse::{parse_exact_with, parse_rational_with, Limits};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let lim = Limits {
        max_len: 4096,
        max_exponent: 2000,
    };
    let unlimited = Limits {
        max_len: usize::MAX,
        max_exponent: i64::MAX,
    };
    if let Ok(v) = parse_exact_with(s, &lim) {
        let t = v.to_string();
        let w = parse_exact_with(&t, &unlimited)
            .unwrap_or_else(|e| panic!("{s:?} printed as {t:?} does not parse back: {e}"));
        assert!(v == w, "{s:?} printed as {t:?} parses back to {w}");
    }
    if let Ok(r) = parse_rational_with(s, &lim) {
        let t = bnconf_spec::exact::fmt_rational(&r);
        let w = parse_rational_with(&t, &unlimited)
            .unwrap_or_else(|e| panic!("{s:?} printed as {t:?} does not parse back: {e}"));
        assert_eq!(r, w, "{s:?} printed as {t:?}");
    }
    // The default entry point must agree with the explicit default limits.
    let _ = bnconf_spec::exact::parse::parse_exact(s);
});
