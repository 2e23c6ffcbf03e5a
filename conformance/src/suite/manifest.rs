//! The suite's manifest (`bnconf-suite/1`).

use super::generate::*;
use super::level::*;
use bnconf_spec::exact::round::FloatFormat;
use serde_json::{json, Value};

/// The suite's manifest (`bnconf-suite/1`).
pub fn manifest_json(s: &Suite, dtype: FloatFormat, filter: &Filter) -> Value {
    manifest_json_in(s, Precision::uniform(dtype), filter)
}

/// The suite's manifest (`bnconf-suite/1`) in a precision (`dtype` is its name, e.g.
/// `f16+f32`; `param_dtype` the parameters' dtype).
pub fn manifest_json_in(s: &Suite, prec: Precision, filter: &Filter) -> Value {
    json!({
        "format": "bnconf-suite/1",
        "suite": s.name,
        "seed": s.seed,
        "dtype": prec.name(),
        "param_dtype": prec.param.name(),
        "ops": filter.ops.iter().map(|o| o.name()).collect::<Vec<_>>(),
        "layouts": filter.layouts.iter().map(|l| l.name()).collect::<Vec<_>>(),
        "cases": s.cases.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        "excluded": s.excluded.iter().map(|(id, why)| json!({"id": id, "reason": why})).collect::<Vec<_>>(),
        "generator": {"tool": "bnconf", "version": env!("CARGO_PKG_VERSION")},
    })
}
