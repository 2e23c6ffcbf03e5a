//! Suites: adversarial cases generated deterministically from a seed (docs/DESIGN.md §3).
//!
//! A suite is a list of [`SuiteCase`]s, each tagged with its level (*core*, *conditioning*,
//! *range*) and the data class it targets. `default` = core + conditioning; `extreme` =
//! range. Every case covers one op × layout × dtype. Cases that are ill-posed in their dtype
//! (a relative perturbation of `u` of one input can move `var + eps` by half of itself) are
//! detected exactly and left out of the suite (reported in the manifest).
//!
//! The random stream is SplitMix64 and only IEEE +, −, × (no libm), so a seed gives the same
//! bytes on every machine and with every crate version.
//!
//! Rooms: [`level`] (levels, precisions), [`case`] ([`SuiteCase`]), [`rng`], [`classes`] (the
//! class table), [`generate`], [`ill_posed`], [`manifest`]; [`select`] (which cases: a suite, a precision, a
//! seed, a filter and a shard, parsed once) and [`shard`]; [`scale`], [`replicated`] the
//! suites of their own shapes, [`vectors`] the committed golden vector set.

pub mod case;
pub mod classes;
pub mod discriminating;
pub mod family;
pub mod family_select;
pub mod family_sharp;
pub mod generate;
pub mod ill_posed;
pub mod level;
pub mod manifest;
pub mod replicated;
pub mod rng;
pub mod scale;
pub mod select;
pub mod shard;
pub mod vectors;

pub use case::SuiteCase;
#[cfg(test)]
pub(crate) use generate::test_suite;
pub use generate::{generate, generate_in, suite_levels, Filter, Suite, DEFAULT_SEED, SUITES};
pub use ill_posed::ill_posed;
pub use level::{parse_precision, Level, Precision};
pub use manifest::{manifest_json, manifest_json_in};
pub use rng::{to_dtype, Rng};
pub use select::{BadName, Selection};
