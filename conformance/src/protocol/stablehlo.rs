//! `bnconf export --format stablehlo` (docs/FORMAT.md, "Added in bnconf 0.3: StableHLO
//! export"): per case a self-contained StableHLO module whose inputs are constants, the
//! case's exact outputs correctly rounded to the dtype (`golden/<output>.npy`) and the allowed
//! absolute error per element (`budget/<output>.npy`), so that a compiler's own test harness
//! can judge its output as `|out − golden| ≤ budget` without bnconf.
//!
//! The module computes the op with StableHLO's own ops: `forward` =
//! `stablehlo.batch_norm_training`, `backward` = `batch_norm_training` (for the batch mean and
//! variance) feeding `batch_norm_grad`, `eval` = `batch_norm_inference`. StableHLO's
//! `epsilon` is an f32 attribute, so the module holds `float32(eps)`; the goldens and budgets
//! are those of the case with exactly that eps (the suite case otherwise unchanged), so a
//! module is judged on the compiler's arithmetic, not on the attribute's type.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::npy::{write_npy, NpyData};
use crate::judge::budget;
use crate::judge::prepare::{self, Prepared};
use crate::suite::{self, Filter, Precision, Suite, SuiteCase};
use bnconf_spec::exact::round::{round_rational, FloatFormat};
use bnconf_spec::exact::{fmt_rational, parse::parse_rational, Rational};
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Layout, Op};
use num_bigint::BigInt;
use num_traits::{Signed, Zero};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The `format` of the export's `manifest.json`.
pub const FORMAT: &str = "bnconf-stablehlo/1";

/// StableHLO's `feature_index` of a layout (the channel axis; the others are reduced).
pub fn feature_index(layout: Layout) -> usize {
    match layout {
        Layout::Rows | Layout::Flat | Layout::Chw => 0,
        Layout::Nchw | Layout::Nc | Layout::Ncl | Layout::Ncdhw => 1,
        Layout::Nhwc => 3,
        Layout::Ndhwc => 4,
    }
}

/// Why a case has no module (`None`: it has one).
pub fn unsupported(c: &SuiteCase) -> Option<String> {
    if !c.shard_sizes.is_empty() {
        return Some("a replicated case is split across ranks; a StableHLO module of this export runs on one device".into());
    }
    match c.op {
        Op::Forward | Op::Backward | Op::Eval => None,
        op => Some(format!(
            "StableHLO has no op for {} (only batch_norm_training, batch_norm_grad, batch_norm_inference)",
            op.name()
        )),
    }
}

/// The exact decimal expansion of a dyadic rational (`n / 2^k`): `n·5^k / 10^k`.
/// `None` if the denominator is not a power of two.
pub fn dyadic_decimal(r: &Rational) -> Option<String> {
    let den = r.denom();
    let k = den.bits() - 1;
    if den != &(BigInt::from(1u8) << k) {
        return None;
    }
    let digits = (r.numer().abs() * BigInt::from(5u8).pow(k as u32)).to_string();
    let sign = if r.is_negative() { "-" } else { "" };
    let k = k as usize;
    if k == 0 {
        return Some(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = k + 1);
    let (int, frac) = padded.split_at(padded.len() - k);
    let frac = frac.trim_end_matches('0');
    Some(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

/// The eps a module holds: the case's eps correctly rounded to f32 (StableHLO's `epsilon`
/// attribute type), as an f32 and exactly.
pub fn module_eps(c: &SuiteCase) -> (f32, Rational) {
    let eps = parse_rational(&c.eps).expect("generated eps is valid");
    let r = round_rational(&eps, FloatFormat::F32);
    let exact = r.to_rational().unwrap_or_else(Rational::zero);
    (r.to_f64() as f32, exact)
}

/// The case a module computes: `c` with eps replaced by [`module_eps`] (an exact decimal).
pub fn module_case(c: &SuiteCase) -> SuiteCase {
    let mut m = c.clone();
    m.eps = dyadic_decimal(&module_eps(c).1).expect("an f32 value is dyadic");
    m
}

/// The shape of input or output `name` of a case.
fn array_shape(c: &SuiteCase, name: &str) -> Vec<usize> {
    match Op::extent(name) {
        Extent::Cells => c.shape.clone(),
        _ => vec![
            Geometry::new(c.layout, &c.shape, usize::MAX)
                .expect("generated shape is valid")
                .c,
        ],
    }
}

/// `tensor<2x3x4x4xf32>`.
pub fn tensor_type(shape: &[usize], t: FloatFormat) -> String {
    let mut s = String::from("tensor<");
    for d in shape {
        let _ = write!(s, "{d}x");
    }
    s + t.name() + ">"
}

/// `"0x…"`: the values' little-endian bytes in dtype `t` (f32 or f64), as MLIR's hex form of
/// a dense attribute; every value round-trips bit for bit.
pub fn hex_blob(v: &[f64], t: FloatFormat) -> String {
    let mut s = String::with_capacity(4 + v.len() * 16);
    s.push_str("\"0x");
    for &x in v {
        let bytes: Vec<u8> = match t {
            FloatFormat::F32 => (x as f32).to_le_bytes().to_vec(),
            _ => x.to_le_bytes().to_vec(),
        };
        for b in bytes {
            let _ = write!(s, "{b:02X}");
        }
    }
    s.push('"');
    s
}

/// A float literal MLIR reads back as exactly `v`: 17 significant digits with a `.` (the
/// value is an f32, so the f64 it parses to converts to f32 exactly).
pub fn mlir_float(v: f64) -> String {
    format!("{v:.16e}")
}

/// The module text of a supported case (`c` as exported; the module holds `float32(eps)`).
pub fn module_text(c: &SuiteCase) -> String {
    let t = c.dtype;
    let (eps32, eps_exact) = module_eps(c);
    let fi = feature_index(c.layout);
    let ins = c.op.inputs();
    let outs = c.op.outputs();
    let ty = |name: &str| tensor_type(&array_shape(c, name), t);
    let xt = ty("x");
    let ct = ty("gamma");
    let attr = format!(
        "{{epsilon = {} : f32, feature_index = {fi} : i64}}",
        mlir_float(eps32 as f64)
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// bnconf {} StableHLO export ({FORMAT}): case {}",
        env!("CARGO_PKG_VERSION"),
        c.id
    );
    let _ = writeln!(
        s,
        "// op {}, layout {}, shape {:?}, dtype {}; inputs are the constants below (little-endian hex).",
        c.op.name(),
        c.layout.name(),
        c.shape,
        t.name()
    );
    let _ = writeln!(
        s,
        "// epsilon = float32({}) = {} exactly; golden/ and budget/ are for this eps.",
        c.eps,
        dyadic_decimal(&eps_exact).expect("dyadic")
    );
    let _ = writeln!(
        s,
        "// Results in this order: {}. Conforming: |result - golden| <= budget, element by element.",
        outs.join(", ")
    );
    let _ = writeln!(s, "module {{");
    let rets: Vec<String> = outs.iter().map(|o| ty(o)).collect();
    let _ = writeln!(s, "  func.func @main() -> ({}) {{", rets.join(", "));
    for &name in ins {
        let _ = writeln!(
            s,
            "    %{name}_c = stablehlo.constant dense<{}> : {}",
            hex_blob(&c.inputs[name], t),
            ty(name)
        );
    }
    // The barrier keeps the compiler from folding the op into a constant at compile time:
    // the op is computed by the compiled code at run time.
    let names = |v: &[&str], suffix: &str| -> String {
        let v: Vec<String> = v.iter().map(|n| format!("%{n}{suffix}")).collect();
        v.join(", ")
    };
    let types: Vec<String> = ins.iter().map(|n| ty(n)).collect();
    let _ = writeln!(
        s,
        "    {} = stablehlo.optimization_barrier {} : {}",
        names(ins, ""),
        names(ins, "_c"),
        types.join(", ")
    );
    match c.op {
        Op::Forward => {
            let _ = writeln!(s, "    %y, %mean, %var = \"stablehlo.batch_norm_training\"(%x, %gamma, %beta) {attr} : ({xt}, {ct}, {ct}) -> ({xt}, {ct}, {ct})");
        }
        Op::Backward => {
            let _ = writeln!(s, "    %zero = stablehlo.constant dense<0.0> : {ct}");
            let _ = writeln!(s, "    %y, %mean, %var = \"stablehlo.batch_norm_training\"(%x, %gamma, %zero) {attr} : ({xt}, {ct}, {ct}) -> ({xt}, {ct}, {ct})");
            let _ = writeln!(s, "    %dx, %dgamma, %dbeta = \"stablehlo.batch_norm_grad\"(%x, %gamma, %mean, %var, %dy) {attr} : ({xt}, {ct}, {ct}, {ct}, {xt}) -> ({xt}, {ct}, {ct})");
        }
        Op::Eval => {
            let _ = writeln!(s, "    %y = \"stablehlo.batch_norm_inference\"(%x, %gamma, %beta, %mean, %var) {attr} : ({xt}, {ct}, {ct}, {ct}, {ct}) -> {xt}");
        }
        op => unreachable!("no module for {}", op.name()),
    }
    let _ = writeln!(s, "    return {} : {}", names(outs, ""), rets.join(", "));
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "}}");
    s
}

/// The correctly rounded outputs of a case in its dtype (the fast exact path, bit-identical to
/// the exact one), by output name.
pub fn golden(c: &SuiteCase) -> Result<BTreeMap<&'static str, Vec<f64>>> {
    let fp = c.fast_problem()?;
    let out = crate::fast::compute(&fp, false)?;
    Ok(out
        .outputs
        .into_iter()
        .map(|(name, f64s, f32s)| match c.dtype {
            FloatFormat::F32 => (name, f32s.into_iter().map(f64::from).collect()),
            _ => (name, f64s),
        })
        .collect())
}

/// The allowed absolute error of every element of every output: `k(m)·u·total(u)` with the
/// judge's budget ([`budget::ElementBudget::total`]: `cond + mag + u·mag2` and the underflow
/// term) and `u` the output dtype's unit roundoff, in f64.
pub fn allowed_error(p: &Prepared) -> BTreeMap<&'static str, Vec<f64>> {
    p.case
        .op
        .outputs()
        .iter()
        .map(|&name| {
            let u = budget::unit_roundoff(p.case.dtype_of(name));
            let bs = p.budgets_of(name);
            (name, bs.iter().map(|b| p.k * u * b.total(u)).collect())
        })
        .collect()
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct Written {
    /// Cases with a module.
    pub modules: usize,
    /// Cases without one (op not in StableHLO), with the reason.
    pub unsupported: Vec<(String, String)>,
    /// Cases left out because the module's eps makes them ill-posed.
    pub excluded: Vec<(String, String)>,
}

pub fn to_npy(t: FloatFormat, v: &[f64]) -> NpyData {
    match t {
        FloatFormat::F32 => NpyData::F32(v.iter().map(|&x| x as f32).collect()),
        _ => NpyData::F64(v.to_vec()),
    }
}

/// Write the StableHLO export of a suite into `dir` (f32 or f64 only; other precisions are an
/// error naming `--dtype`): per case `<id>/module.mlir`, `<id>/golden/<output>.npy`,
/// `<id>/budget/<output>.npy`, then `manifest.json` (`bnconf-stablehlo/1`).
pub fn export(s: &Suite, dtype: Precision, filter: &Filter, dir: &Path) -> Result<Written> {
    if dtype.is_mixed() || !matches!(dtype.act, FloatFormat::F32 | FloatFormat::F64) {
        return Err(ConfError::field(
            "--dtype",
            format!("{}: the StableHLO export takes f32 or f64", dtype.name()),
        ));
    }
    let t = dtype.act;
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut w = Written::default();
    let mut listed = Vec::new();
    for c in &s.cases {
        if let Some(why) = unsupported(c) {
            w.unsupported.push((c.id.clone(), why));
            continue;
        }
        let mc = module_case(c);
        if let Some(why) = suite::ill_posed(&mc) {
            w.excluded
                .push((c.id.clone(), format!("with eps = float32(eps): {why}")));
            continue;
        }
        let p = prepare::prepare(std::slice::from_ref(&mc))
            .map_err(|e| ConfError::field(c.id.clone(), e.to_string()))?
            .remove(0);
        let gold = golden(&mc)?;
        let allowed = allowed_error(&p);
        let cd = dir.join(&c.id);
        for sub in ["golden", "budget"] {
            let d = cd.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| ConfError::io(&d, e))?;
        }
        write_bytes(&cd.join("module.mlir"), module_text(c).as_bytes())?;
        let mut outputs = Vec::new();
        for &name in c.op.outputs() {
            let shape = array_shape(c, name);
            write_npy(
                &cd.join("golden").join(format!("{name}.npy")),
                &shape,
                &to_npy(t, &gold[name]),
            )?;
            write_npy(
                &cd.join("budget").join(format!("{name}.npy")),
                &shape,
                &NpyData::F64(allowed[name].clone()),
            )?;
            outputs.push(json!({
                "name": name,
                "shape": shape,
                "golden": format!("{}/golden/{name}.npy", c.id),
                "budget": format!("{}/budget/{name}.npy", c.id),
            }));
        }
        let (eps32, eps_exact) = module_eps(c);
        let m = Geometry::new(c.layout, &c.shape, usize::MAX)
            .expect("valid")
            .m;
        listed.push(json!({
            "id": c.id,
            "module": format!("{}/module.mlir", c.id),
            "op": c.op.name(),
            "layout": c.layout.name(),
            "shape": c.shape,
            "dtype": t.name(),
            "feature_index": feature_index(c.layout),
            "eps": serde_json::from_str::<Value>(&c.eps).expect("eps is a JSON number"),
            "eps_module": eps32 as f64,
            "eps_module_exact": fmt_rational(&eps_exact),
            "level": c.level.name(),
            "class": c.class,
            "target": c.target,
            "m": m,
            "k": p.k,
            "inputs": c.op.inputs(),
            "outputs": outputs,
        }));
        w.modules += 1;
    }
    write_manifest(
        dir,
        FORMAT,
        (s, t.name(), filter),
        &[],
        &[
            ("entry", json!("main")),
            ("budget", json!("per element |result - golden| <= budget: k(m)*u*(cond + mag + u*mag2 + underflow/u), f64")),
        ],
        listed,
        &w,
    )?;
    Ok(w)
}

/// The export manifest of both formats (StableHLO, ONNX), written to `dir/manifest.json`:
/// `format`, `suite`, `seed`, `dtype`, then `head`, then `ops`, `layouts`, `generator`, then
/// `tail`, then `cases` (`listed`), `unsupported` and `excluded` (the suite's exclusions, then
/// the export's own).
pub fn write_manifest(
    dir: &Path,
    format: &str,
    (s, dtype, filter): (&Suite, &str, &Filter),
    head: &[(&str, Value)],
    tail: &[(&str, Value)],
    listed: Vec<Value>,
    w: &Written,
) -> Result<()> {
    let reasons = |list: &mut dyn Iterator<Item = &(String, String)>| -> Value {
        list.map(|(id, why)| json!({"id": id, "reason": why}))
            .collect()
    };
    let mut m = serde_json::Map::new();
    m.insert("format".into(), json!(format));
    m.insert("suite".into(), json!(s.name));
    m.insert("seed".into(), json!(s.seed));
    m.insert("dtype".into(), json!(dtype));
    for (k, v) in head {
        m.insert((*k).into(), v.clone());
    }
    m.insert(
        "ops".into(),
        json!(filter.ops.iter().map(|o| o.name()).collect::<Vec<_>>()),
    );
    m.insert(
        "layouts".into(),
        json!(filter.layouts.iter().map(|l| l.name()).collect::<Vec<_>>()),
    );
    m.insert(
        "generator".into(),
        json!({"tool": "bnconf", "version": env!("CARGO_PKG_VERSION")}),
    );
    for (k, v) in tail {
        m.insert((*k).into(), v.clone());
    }
    m.insert("cases".into(), Value::Array(listed));
    m.insert("unsupported".into(), reasons(&mut w.unsupported.iter()));
    m.insert(
        "excluded".into(),
        reasons(&mut s.excluded.iter().chain(&w.excluded)),
    );
    let text = serde_json::to_string_pretty(&Value::Object(m)).expect("json") + "\n";
    write_bytes(&dir.join("manifest.json"), text.as_bytes())
}

/// The export manifest of a family selection (both formats): the family export's manifest
/// (`FamilySelection::manifest_json`) with `format`, then `extra`, then `cases` (`listed`),
/// `unsupported` and `excluded` (the suite's exclusions, then the export's).
pub fn write_family_manifest(
    dir: &Path,
    format: &str,
    (sel, s): (
        &crate::suite::family_select::FamilySelection,
        &crate::suite::family::FamilySuite,
    ),
    extra: &[(&str, Value)],
    listed: Vec<Value>,
    w: &Written,
) -> Result<()> {
    let reasons = |list: &mut dyn Iterator<Item = &(String, String)>| -> Value {
        list.map(|(id, why)| json!({"id": id, "reason": why}))
            .collect()
    };
    let mut m = sel.manifest_json(s);
    m["format"] = json!(format);
    for (k, v) in extra {
        m[*k] = v.clone();
    }
    m["cases"] = Value::Array(listed);
    m["unsupported"] = reasons(&mut w.unsupported.iter());
    m["excluded"] = reasons(&mut s.excluded.iter().chain(&w.excluded));
    let text = serde_json::to_string_pretty(&m).expect("json") + "\n";
    write_bytes(&dir.join("manifest.json"), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_of_dyadics() {
        let d = |s: &str| dyadic_decimal(&parse_rational(s).unwrap()).unwrap();
        assert_eq!(d("0"), "0");
        assert_eq!(d("3"), "3");
        assert_eq!(d("-3/8"), "-0.375");
        assert_eq!(d("5/2"), "2.5");
        assert!(dyadic_decimal(&parse_rational("1/3").unwrap()).is_none());
        // float32(1e-5), exactly
        let r = round_rational(&parse_rational("1e-5").unwrap(), FloatFormat::F32)
            .to_rational()
            .unwrap();
        assert_eq!(parse_rational(&dyadic_decimal(&r).unwrap()).unwrap(), r);
    }

    #[test]
    fn hex_blobs_are_little_endian() {
        assert_eq!(
            hex_blob(&[1.0, -2.0], FloatFormat::F32),
            "\"0x0000803F000000C0\""
        );
        assert_eq!(hex_blob(&[1.0], FloatFormat::F64), "\"0x000000000000F03F\"");
    }
}
