#![forbid(unsafe_code)]
pub mod exact;
