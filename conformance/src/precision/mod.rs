//! The precision table: when a float result conforms (docs/DESIGN.md §3). One budget,
//! `k·u·(cond + mag + u·mag2)`, with the reason of every term ([`budget`]), read by both the
//! generator (which cases a fair budget can judge sharply: `suite::discriminating`) and the
//! checker (`judge`).

pub mod budget;
pub mod family_budget;
