//! `bnconf shrink` of a normalization-family case (FORMAT.md, "Added in bnconf 0.3: shrink of
//! family cases"): the moves on a [`FamilyCase`] (keep or drop whole groups, drop channels
//! from every group alike, drop chunks of indices along any other axis, the parameters sliced
//! with the axes they follow), their validity, the failure a candidate must keep, and the
//! output files. [`super::family_run`] (feature `cli`, unix) runs an outside kernel on each
//! candidate through the kernel directory protocol.

use super::{hex_in, Signature};
use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::case::InputLimits;
use crate::formats::family_case::{family_case_json, family_shape, format_of};
use crate::formats::npy::write_npy;
use crate::judge::family::{diagnose_family, FamilyPrepared};
use crate::judge::verdict::{CaseResult, Verdict};
use crate::protocol::npy_of;
use crate::report::json::num;
use crate::suite::family::{FamilySuite, FamilySuiteCase, Golden};
use crate::suite::family_select::FamilySelection;
use crate::suite::Precision;
use bnconf_impl::family::{is_family_activation, FamilyCase, FamilyLayout, Named};
use bnconf_spec::exact::round::{round, FloatFormat};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// What an axis of a family case's activations (`x`, `dy`, `y`, `dx`) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisRole {
    /// A leading axis of layout `last` (rows), or group_norm's `N`.
    Batch,
    /// A trailing, normalized axis of layout `last` (`gamma`, `beta` have it too).
    Normalized,
    /// group_norm's channel axis (`C = G·(C/G)`; `gamma`, `beta` are `[C]`).
    Channel,
    /// group_norm's spatial axes.
    Spatial,
}

/// The roles of a valid case's activation axes, in shape order.
pub fn roles(case: &FamilyCase) -> Vec<AxisRole> {
    let n = case.shape.len();
    match case.layout {
        FamilyLayout::Last => {
            let k = case.normalized_ndim.unwrap_or(1).min(n);
            (0..n)
                .map(|i| {
                    if i < n - k {
                        AxisRole::Batch
                    } else {
                        AxisRole::Normalized
                    }
                })
                .collect()
        }
        l => {
            let c = if l.channels_last() { n - 1 } else { 1 };
            (0..n)
                .map(|i| match i {
                    0 => AxisRole::Batch,
                    i if i == c => AxisRole::Channel,
                    _ => AxisRole::Spatial,
                })
                .collect()
        }
    }
}

/// The channel axis of a group_norm case (`None` for layout `last`).
pub fn channel_axis(case: &FamilyCase) -> Option<usize> {
    roles(case).iter().position(|&r| r == AxisRole::Channel)
}

/// The offsets, in row-major order, of the elements of a tensor of shape `shape` that keep
/// the indices `keep[a]` along each axis `a` (the sub-tensor's elements, in its own order).
fn offsets(shape: &[usize], keep: &[&[usize]]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let mut out = vec![0usize];
    for (k, &st) in keep.iter().zip(&strides) {
        out = out
            .iter()
            .flat_map(|&o| k.iter().map(move |&i| o + i * st))
            .collect();
    }
    out
}

/// The case that keeps indices `keep[a]` along each activation axis `a` (every list
/// non-empty, in range, increasing), with `groups` groups (group_norm: the channel list must
/// take the same offsets from each group kept). `x`/`dy` are gathered along every axis;
/// `gamma`/`beta` along the normalized axes (`last`) or the channel axis. `None` when the
/// result is not a valid case.
pub fn select(case: &FamilyCase, keep: &[Vec<usize>], groups: Option<usize>) -> Option<FamilyCase> {
    if keep.len() != case.shape.len() || keep.iter().any(Vec::is_empty) {
        return None;
    }
    let roles = roles(case);
    let all: Vec<&[usize]> = keep.iter().map(Vec::as_slice).collect();
    let act = offsets(&case.shape, &all);
    let (pshape, pkeep): (Vec<usize>, Vec<&[usize]>) = roles
        .iter()
        .zip(case.shape.iter().zip(&all))
        .filter(|(r, _)| matches!(r, AxisRole::Normalized | AxisRole::Channel))
        .map(|(_, (&s, &k))| (s, k))
        .unzip();
    let par = offsets(&pshape, &pkeep);
    let mut out = case.clone();
    out.shape = keep.iter().map(Vec::len).collect();
    out.groups = groups;
    for (name, v) in out.inputs.iter_mut() {
        let idx = if is_family_activation(name) {
            &act
        } else {
            &par
        };
        if idx.iter().any(|&i| i >= v.len()) {
            return None;
        }
        *v = idx.iter().map(|&i| v[i]).collect();
    }
    valid(&out).then_some(out)
}

/// Every index of every axis: the selection that changes nothing.
pub fn keep_all(case: &FamilyCase) -> Vec<Vec<usize>> {
    case.shape.iter().map(|&n| (0..n).collect()).collect()
}

/// group_norm: the channels of the groups `gs` (of `groups`) taking offsets `js` within each
/// group (`C/G` channels per group); the new group count is `gs.len()`.
pub fn group_channels(c: usize, groups: usize, gs: &[usize], js: &[usize]) -> Vec<usize> {
    let per = c / groups.max(1);
    gs.iter()
        .flat_map(|&g| js.iter().map(move |&j| g * per + j))
        .collect()
}

/// A candidate is judged only when its fields are valid and it is not ill-posed in its dtype
/// (the rule of the suites).
pub fn valid(case: &FamilyCase) -> bool {
    case.check().is_ok() && crate::suite::family::family_ill_posed(case).is_none()
}

/// The group (group_norm) of element `index` of output `name` in `case` (0 for layout `last`).
pub fn group_of(case: &FamilyCase, name: &str, index: usize) -> usize {
    let (Some(ca), Some(g)) = (channel_axis(case), case.groups) else {
        return 0;
    };
    let c = case.shape[ca];
    let per = c / g.max(1);
    let channel = if is_family_activation(name) {
        let inner: usize = case.shape[ca + 1..].iter().product();
        (index / inner.max(1)) % c
    } else if matches!(name, "mean" | "rstd") {
        return index % g.max(1);
    } else {
        index
    };
    channel / per.max(1)
}

/// The family's neutral value of a whole input (`gamma` 1, `beta` 0).
pub fn neutral_value(name: &str) -> Option<f64> {
    match name {
        "gamma" => Some(1.0),
        "beta" => Some(0.0),
        _ => None,
    }
}

/// A family case as a suite case of id `id` (level and class kept from `like`).
pub fn suite_case(like: &FamilySuiteCase, id: &str, case: FamilyCase) -> FamilySuiteCase {
    FamilySuiteCase {
        id: id.to_string(),
        level: like.level,
        class: like.class.clone(),
        precision: like.precision,
        case,
    }
}

/// The precision (storage dtypes) of a family case.
pub fn precision_of(case: &FamilyCase) -> Precision {
    Precision {
        act: format_of(case.dtype),
        param: format_of(case.param_dtype),
    }
}

/// Write `sc` as a one-case family export in `dir` (`manifest.json` with `"suite": "shrink"`,
/// `<id>/case.json`, `<id>/<input>.npy`), as `bnconf export --family` writes a case.
pub fn write_protocol_dir(sc: &FamilySuiteCase, dir: &Path) -> Result<()> {
    let family = sc.case.op.family();
    let sel = FamilySelection {
        family: family.name().to_string(),
        families: vec![family],
        suite: "shrink".into(),
        precision: precision_of(&sc.case),
        seed: 0,
        ops: vec![],
        layouts: vec![],
        shard: None,
    };
    let s = FamilySuite {
        cases: vec![sc.clone()],
        excluded: vec![],
    };
    crate::protocol::family::export(&sel, &s, dir)
}

/// The failure of a family result (its outputs `got`): the worst output over its gate and,
/// where the family diagnosis names a known-bad kernel, the first one (`None` when it does not
/// fail).
pub fn signature_of(
    p: &FamilyPrepared,
    r: &CaseResult,
    got: &BTreeMap<String, Vec<f64>>,
) -> Option<Signature> {
    let worst = super::worst_failing(r)?;
    Some(Signature {
        output: worst.name.clone(),
        kernel: behaves_like(p, r, got).first().cloned(),
    })
}

/// The known-bad family kernels the diagnosis names for one failing result.
fn behaves_like(
    p: &FamilyPrepared,
    r: &CaseResult,
    got: &BTreeMap<String, Vec<f64>>,
) -> Vec<String> {
    diagnose_family(&[(p.clone(), got.clone(), r.worst_ratio)])
        .into_iter()
        .map(|d| d.kernel)
        .collect()
}

/// Whether a candidate's result fails the way `sig` says: its output over the gate and, where
/// `sig` names a kernel, that kernel reproducing it.
pub fn matches(
    sig: &Signature,
    p: &FamilyPrepared,
    r: &CaseResult,
    got: &BTreeMap<String, Vec<f64>>,
) -> bool {
    r.verdict == Verdict::Fail
        && r.outputs
            .iter()
            .any(|o| o.name == sig.output && o.n_over > 0)
        && sig
            .kernel
            .as_ref()
            .is_none_or(|k| behaves_like(p, r, got).contains(k))
}

/// What the search found, for the output files and the printed summary.
#[derive(Clone, Debug)]
pub struct FamilyShrunk {
    /// The original case.
    pub original: FamilySuiteCase,
    /// The original's result.
    pub original_result: CaseResult,
    /// The shrunk case (id `<original id>.shrunk`) and its preparation.
    pub prepared: FamilyPrepared,
    /// The kernel's result on it (verdict `fail`).
    pub result: CaseResult,
    /// What the kernel returned on it.
    pub outputs: BTreeMap<String, Vec<f64>>,
    /// The failure kept.
    pub signature: Signature,
    /// Kernel runs made (the original's included).
    pub runs: usize,
    /// The kernel command, as given.
    pub command: String,
}

fn elements(case: &FamilyCase) -> usize {
    case.inputs.values().map(Vec::len).sum()
}

/// The exact strings of a golden output.
fn exact_strings(g: &Golden) -> Vec<String> {
    match g {
        Golden::Q(v) => v.iter().map(ToString::to_string).collect(),
        Golden::Roots(v) => v.iter().map(ToString::to_string).collect(),
    }
}

/// A golden output correctly rounded to `f`, as hex strings.
fn rounded_hex(g: &Golden, f: FloatFormat) -> Vec<String> {
    match g {
        Golden::Q(v) => v.iter().map(|e| round(e, f).to_hex()).collect(),
        Golden::Roots(v) => v.iter().map(|e| e.round(f).to_hex()).collect(),
    }
}

/// `shrink.json` (`bnconf-shrink/1`) of a family case: batch_norm's fields, with the family's
/// case fields (`family`, `param_dtype`, `normalized_ndim` or `groups`, `affine`,
/// `convention`) in `case`, and per output every element's exact value (a sum of square roots
/// for `dgamma`), its correct rounding, what the kernel returned and the ratio.
pub fn report_json(s: &FamilyShrunk) -> Result<Value> {
    let c = &s.prepared.case.case;
    let mut outs = Vec::new();
    for name in c.op.outputs(c.affine) {
        let (Some(got), Some(g)) = (s.outputs.get(name), s.prepared.goldens.get(name)) else {
            continue; // an optional output the kernel did not give
        };
        let f = format_of(c.dtype_of(name));
        let ratios = s.prepared.element_ratios(name, got).ok_or_else(|| {
            ConfError::field("shrink", format!("no exact golden of `{name}` was kept"))
        })?;
        let r = s.result.outputs.iter().find(|o| o.name == name);
        outs.push(json!({
            "name": name,
            "dtype": f.name(),
            "shape": family_shape(c, name),
            "worst_ratio": r.map(|o| num(o.worst_ratio)),
            "index": r.map(|o| o.index),
            "elements_over": r.map(|o| o.n_over),
            "gate": num(s.prepared.budgets.gate[name]),
            "exact": exact_strings(g),
            "expected": rounded_hex(g, f),
            "expected_f64": rounded_hex(g, FloatFormat::F64),
            "kernel": got.iter().map(|&x| hex_in(x, f)).collect::<Vec<_>>(),
            "ratio": ratios.iter().map(|&x| num(if x.is_nan() { f64::INFINITY } else { x })).collect::<Vec<_>>(),
        }));
    }
    let o = &s.original.case;
    let mut case = json!({
        "id": s.prepared.case.id,
        "family": c.op.family().name(),
        "op": c.op.name(),
        "layout": c.layout.name(),
        "shape": c.shape,
        "dtype": c.dtype.name(),
        "param_dtype": c.param_dtype.name(),
        "eps": c.eps,
        "affine": c.affine.name(),
        "convention": c.convention.name(),
        "input_elements": elements(c),
        "file": "case.json",
    });
    if let Some(k) = c.normalized_ndim {
        case["normalized_ndim"] = json!(k);
    }
    if let Some(g) = c.groups {
        case["groups"] = json!(g);
    }
    let mut original = json!({
        "id": s.original.id,
        "shape": o.shape,
        "input_elements": elements(o),
        "worst_ratio": num(s.original_result.worst_ratio),
    });
    if let Some(g) = o.groups {
        original["groups"] = json!(g);
    }
    Ok(json!({
        "format": "bnconf-shrink/1",
        "tool": {"name": "bnconf", "version": env!("CARGO_PKG_VERSION")},
        "kernel": s.command,
        "original": original,
        "failure": {"output": s.signature.output, "behaves_like": s.signature.kernel},
        "case": case,
        "runs": s.runs,
        "verdict": s.result.verdict.name().to_lowercase(),
        "worst_ratio": num(s.result.worst_ratio),
        "k": s.result.k,
        "outputs": outs,
    }))
}

/// Write the output directory's files into `dir` (a staging directory): `case.json` (the
/// family case file, inputs as `<input>.npy` beside it, plus `shrunk_from`), the inputs,
/// `golden.json` (`bnconf golden case.json`'s document, byte for byte: f64, f32, f16, bf16),
/// `kernel/<output>.npy` and `shrink.json`.
pub fn write_output(s: &FamilyShrunk, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let write_json = |path: &Path, v: &Value| {
        let text = serde_json::to_string_pretty(v).expect("json") + "\n";
        write_bytes(path, text.as_bytes())
    };
    let sc = &s.prepared.case;
    let c = &sc.case;
    let mut cj = family_case_json(&sc.id, c, sc.level.name(), &sc.class);
    cj["shrunk_from"] = json!(s.original.id);
    write_json(&dir.join("case.json"), &cj)?;
    let write_arrays = |d: &Path, arrays: &BTreeMap<String, Vec<f64>>| -> Result<()> {
        for (name, v) in arrays {
            write_npy(
                &d.join(format!("{name}.npy")),
                &family_shape(c, name),
                &npy_of(format_of(c.dtype_of(name)), v),
            )?;
        }
        Ok(())
    };
    write_arrays(dir, &c.inputs)?;
    let fmts = [
        FloatFormat::F64,
        FloatFormat::F32,
        FloatFormat::F16,
        FloatFormat::BF16,
    ];
    let golden = crate::protocol::family::golden_doc(
        &dir.join("case.json"),
        &InputLimits::default(),
        &fmts,
    )?;
    write_json(&dir.join("golden.json"), &golden)?;
    let kd = dir.join("kernel");
    std::fs::create_dir_all(&kd).map_err(|e| ConfError::io(&kd, e))?;
    write_arrays(&kd, &s.outputs)?;
    write_json(&dir.join("shrink.json"), &report_json(s)?)
}

/// The printed summary: sizes, the failure kept, and per failing output its worst element.
pub fn summary(s: &FamilyShrunk) -> String {
    use std::fmt::Write;
    let c = &s.prepared.case.case;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "bnconf shrink: {} {:?} ({} input elements, worst ratio {}) -> {:?}{} ({} input elements) in {} kernel runs",
        s.original.id,
        s.original.case.shape,
        elements(&s.original.case),
        crate::report::fmt_ratio(s.original_result.worst_ratio),
        c.shape,
        c.groups.map(|g| format!(", {g} groups")).unwrap_or_default(),
        elements(c),
        s.runs,
    );
    if let Some(k) = &s.signature.kernel {
        let _ = writeln!(t, "  behaves like {k}");
    }
    for o in s.result.outputs.iter().filter(|o| o.n_over > 0) {
        let f = format_of(c.dtype_of(&o.name));
        let _ = writeln!(
            t,
            "  {}[{}]: exact {}, correctly rounded {}, kernel {}: ratio {} > k = {:.2} ({} of {} elements over)",
            o.name,
            o.index,
            o.expected,
            hex_in(o.expected_f64, f),
            hex_in(o.actual, f),
            crate::report::fmt_ratio(o.worst_ratio),
            s.prepared.budgets.gate[o.name.as_str()],
            o.n_over,
            o.len,
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::family::family_suite;
    use bnconf_impl::family::Family;

    fn cases(f: Family) -> Vec<FamilySuiteCase> {
        family_suite(f, &[Precision::uniform(FloatFormat::F32)], 3).cases
    }

    #[test]
    fn keeping_everything_is_the_same_case() {
        for f in [Family::LayerNorm, Family::RmsNorm, Family::GroupNorm] {
            for sc in cases(f).iter().take(30) {
                let c = &sc.case;
                assert_eq!(
                    select(c, &keep_all(c), c.groups).as_ref(),
                    Some(c),
                    "{}",
                    sc.id
                );
            }
        }
    }

    /// A selection's elements are the original's at the kept indices: checked against a
    /// direct multi-index computation on every family case, dropping the last index of every
    /// axis that has two or more (and, for group_norm, the last group).
    #[test]
    fn selection_gathers_the_kept_elements() {
        for f in [Family::LayerNorm, Family::GroupNorm] {
            for sc in cases(f) {
                let c = &sc.case;
                let mut keep = keep_all(c);
                let ca = channel_axis(c);
                let mut groups = c.groups;
                for (a, k) in keep.iter_mut().enumerate() {
                    if Some(a) == ca {
                        let g = c.groups.unwrap();
                        if g >= 2 {
                            let gs: Vec<usize> = (0..g - 1).collect();
                            let per = c.shape[a] / g;
                            *k = group_channels(c.shape[a], g, &gs, &(0..per).collect::<Vec<_>>());
                            groups = Some(g - 1);
                        }
                    } else if k.len() >= 2 {
                        k.pop();
                    }
                }
                let Some(s) = select(c, &keep, groups) else {
                    continue; // ill-posed once cut
                };
                let strides = |shape: &[usize]| {
                    let mut st = vec![1usize; shape.len()];
                    for a in (0..shape.len().saturating_sub(1)).rev() {
                        st[a] = st[a + 1] * shape[a + 1];
                    }
                    st
                };
                let (so, sn) = (strides(&c.shape), strides(&s.shape));
                let x = &c.inputs["x"];
                for (i, &v) in s.inputs["x"].iter().enumerate() {
                    let old: usize = (0..s.shape.len())
                        .map(|a| keep[a][(i / sn[a]) % s.shape[a]] * so[a])
                        .sum();
                    assert_eq!(v.to_bits(), x[old].to_bits(), "{} x[{i}]", sc.id);
                }
                if let (Some(g), Some(ca)) = (c.inputs.get("gamma"), ca) {
                    let want: Vec<f64> = keep[ca].iter().map(|&j| g[j]).collect();
                    assert_eq!(s.inputs["gamma"], want, "{}", sc.id);
                }
            }
        }
    }

    #[test]
    fn group_channels_takes_the_same_offsets_from_each_group() {
        assert_eq!(group_channels(6, 2, &[0, 1], &[0, 2]), vec![0, 2, 3, 5]);
        assert_eq!(group_channels(6, 3, &[1], &[0, 1]), vec![2, 3]);
    }

    #[test]
    fn group_of_names_the_group_of_each_output_element() {
        let sc = cases(Family::GroupNorm)
            .into_iter()
            .find(|c| c.case.groups.is_some_and(|g| g >= 2) && c.case.layout == FamilyLayout::Nchw)
            .expect("a group_norm nchw case with 2+ groups");
        let c = &sc.case;
        let (cc, g) = (c.shape[1], c.groups.unwrap());
        let inner: usize = c.shape[2..].iter().product();
        let last = c.shape.iter().product::<usize>() - 1;
        assert_eq!(group_of(c, "y", last), g - 1);
        assert_eq!(group_of(c, "y", inner * (cc / g)), 1 % g);
        assert_eq!(group_of(c, "dgamma", cc - 1), g - 1);
        assert_eq!(group_of(c, "rstd", g - 1), g - 1);
    }
}
