//! The kernel directory protocol (FORMAT.md): export a suite, run a kernel over a directory,
//! read a kernel's outputs back.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::npy::{read_npy_any, write_npy, NpyData};
use crate::judge::check::{CaseResult, Prepared};
use crate::suite::{self, Filter, Precision, Suite, SuiteCase};
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::{Layout, Op};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

pub mod exec;
pub mod stablehlo;

use crate::formats::fsafe::read_regular_string;

/// Largest `manifest.json`, `case.json` or `out/unsupported` read (the default suite's
/// manifest is about 60 KB); only regular files are read (docs/HOSTILE.md).
pub const MAX_META_BYTES: u64 = 64 << 20;

fn shape_of(c: &SuiteCase, name: &str) -> Vec<usize> {
    let g = || bnconf_spec::Geometry::new(c.layout, &c.shape, usize::MAX).expect("valid");
    match Op::extent(name) {
        bnconf_spec::op::Extent::Cells => c.shape.clone(),
        bnconf_spec::op::Extent::Channel => vec![g().c],
        bnconf_spec::op::Extent::Shards => vec![g().m],
    }
}

/// Values of a dtype (each exactly representable) as that dtype's npy data: `<f8`, `<f4`,
/// `<f2`, and bf16 as `<u2` bit patterns (the upper 16 bits of the f32).
pub fn npy_of(dtype: FloatFormat, v: &[f64]) -> NpyData {
    match dtype {
        FloatFormat::F64 => NpyData::F64(v.to_vec()),
        FloatFormat::F32 => NpyData::F32(v.iter().map(|&x| x as f32).collect()),
        FloatFormat::F16 => NpyData::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        FloatFormat::BF16 => NpyData::U16(
            v.iter()
                .map(|&x| half::bf16::from_f64(x).to_bits())
                .collect(),
        ),
    }
}

/// The values of npy data as f64, `<u2` read as bf16 bit patterns (the protocol's bf16).
pub fn decode(data: &NpyData) -> Vec<f64> {
    match data {
        NpyData::U16(_) => (0..data.len()).map(|i| data.bf16_value(i)).collect(),
        _ => (0..data.len()).map(|i| data.get(i)).collect(),
    }
}

/// npy data read back as values of `dtype`, or why it is not that dtype's data.
pub fn values_of(dtype: FloatFormat, data: &NpyData) -> std::result::Result<Vec<f64>, String> {
    let n = data.len();
    match (dtype, data) {
        (FloatFormat::F64, NpyData::F64(_))
        | (FloatFormat::F32, NpyData::F32(_))
        | (FloatFormat::F16, NpyData::F16(_)) => Ok((0..n).map(|i| data.get(i)).collect()),
        (FloatFormat::BF16, NpyData::U16(_)) => Ok((0..n).map(|i| data.bf16_value(i)).collect()),
        (FloatFormat::BF16, other) => Err(format!(
            "dtype {}, expected bf16 stored as uint16 bit patterns (<u2, \"bf16_storage\": \"u16-bits\")",
            other.dtype_name()
        )),
        (f, other) => Err(format!(
            "dtype {}, expected the case dtype {}",
            other.dtype_name(),
            f.name()
        )),
    }
}

/// Write a suite into `dir`: `manifest.json` and, per case, `case.json` and one npy per input.
/// (Each input in its dtype: activations in the precision's first dtype, the rest in its
/// second.)
pub fn export(s: &Suite, dtype: Precision, filter: &Filter, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    for c in &s.cases {
        let cd = dir.join(&c.id);
        std::fs::create_dir_all(&cd).map_err(|e| ConfError::io(&cd, e))?;
        let text = serde_json::to_string_pretty(&c.protocol_json()).expect("json") + "\n";
        write_bytes(&cd.join("case.json"), text.as_bytes())?;
        for (name, v) in &c.inputs {
            write_npy(
                &cd.join(format!("{name}.npy")),
                &shape_of(c, name),
                &npy_of(c.dtype_of(name), v),
            )?;
        }
    }
    let text = serde_json::to_string_pretty(&suite::manifest_json_in(s, dtype, filter))
        .expect("json")
        + "\n";
    write_bytes(&dir.join("manifest.json"), text.as_bytes())
}

/// What a suite directory's manifest says, regenerated: the suite's cases (never read back
/// from the directory, so a kernel cannot change what it is judged against).
pub fn regenerate(dir: &Path) -> Result<(Suite, Precision, Filter)> {
    let mpath = dir.join("manifest.json");
    let text = read_regular_string(&mpath, MAX_META_BYTES, "")?;
    let m: Value = serde_json::from_str(&text).map_err(|e| ConfError::Json {
        path: mpath.display().to_string(),
        msg: e.to_string(),
    })?;
    let field = |k: &str| {
        ConfError::field(
            format!("manifest.json: {k}"),
            "missing or of the wrong type",
        )
    };
    if m.get("format").and_then(Value::as_str) != Some("bnconf-suite/1") {
        return Err(ConfError::field(
            "manifest.json: format",
            "expected \"bnconf-suite/1\"",
        ));
    }
    let name = m
        .get("suite")
        .and_then(Value::as_str)
        .ok_or_else(|| field("suite"))?;
    let seed = m
        .get("seed")
        .and_then(Value::as_u64)
        .ok_or_else(|| field("seed"))?;
    let dtype = m
        .get("dtype")
        .and_then(Value::as_str)
        .and_then(Precision::from_name)
        .ok_or_else(|| field("dtype"))?;
    let mut filter = Filter::default();
    for o in m.get("ops").and_then(Value::as_array).into_iter().flatten() {
        filter.ops.push(
            o.as_str()
                .and_then(Op::from_name)
                .ok_or_else(|| field("ops"))?,
        );
    }
    for l in m
        .get("layouts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        filter.layouts.push(
            l.as_str()
                .and_then(Layout::from_name)
                .ok_or_else(|| field("layouts"))?,
        );
    }
    let mut s = suite::generate_in(name, &[dtype], seed, &filter).ok_or_else(|| {
        ConfError::field("manifest.json: suite", format!("unknown suite {name:?}"))
    })?;
    if let Some(shard) = crate::report::shard::from_manifest(&m)? {
        shard.apply(&mut s); // `export --shard K/N` wrote only that shard's cases
    }
    let listed: Vec<&str> = m
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| field("cases"))?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let ours: Vec<&str> = s.cases.iter().map(|c| c.id.as_str()).collect();
    if listed != ours {
        return Err(ConfError::field("manifest.json: cases", format!("do not match suite {name:?} (seed {seed}, {}) as this bnconf generates it: the directory was edited or written by another version", dtype.name())));
    }
    Ok((s, dtype, filter))
}

/// Check that the input files in `dir` are exactly the regenerated suite's inputs (a kernel
/// that rewrote them, or an edited manifest, is caught here rather than judged).
pub fn verify_inputs(dir: &Path, s: &Suite) -> Result<()> {
    for c in &s.cases {
        for (name, want) in &c.inputs {
            let path = dir.join(&c.id).join(format!("{name}.npy"));
            let (_, data) = read_npy_any(&path, want.len().max(1))?;
            let got = decode(&data);
            let same = got.len() == want.len()
                && (0..want.len()).all(|i| got[i].to_bits() == want[i].to_bits());
            if !same {
                return Err(ConfError::field(
                    format!("{}/{name}.npy", c.id),
                    format!("differs from suite {:?} as generated with seed {}: the inputs or the manifest were edited", s.name, s.seed),
                ));
            }
        }
    }
    Ok(())
}

/// What an error says of a file, without the file's path (the caller names it relative to DIR).
fn error_msg(e: &ConfError) -> String {
    match e {
        ConfError::Io { msg, .. } | ConfError::Npy { msg, .. } | ConfError::Json { msg, .. } => {
            msg.clone()
        }
        other => other.to_string(),
    }
}

/// Read a kernel's outputs for one case from `DIR/<id>/out/`.
pub fn read_outputs(dir: &Path, p: &Prepared) -> CaseResult {
    let c = &p.case;
    let out = dir.join(&c.id).join("out");
    let unsup = out.join("unsupported");
    if unsup.symlink_metadata().is_ok() {
        // Only a regular file is read: a FIFO here would block, /dev/zero never end.
        let why = match read_regular_string(&unsup, MAX_META_BYTES, "") {
            Ok(why) => why,
            Err(e) => return p.malformed(&format!("{}/out/unsupported: {}", c.id, error_msg(&e))),
        };
        let why = if why.trim().is_empty() {
            "kernel reported unsupported".to_string()
        } else {
            why.trim().to_string()
        };
        return p.unsupported(&why);
    }
    let mut computed = BTreeMap::new();
    for &name in c.op.outputs() {
        let path = out.join(format!("{name}.npy"));
        let rel = format!("{}/out/{name}.npy", c.id);
        if path.symlink_metadata().is_err() {
            return p.malformed(&format!("{rel}: missing"));
        }
        let want = shape_of(c, name);
        // Regular files only, size checked against the expected shape before reading: a FIFO,
        // a device or an oversized (even sparse) file is a malformed output, never a hang.
        let (shape, data) = match read_npy_any(&path, want.iter().product::<usize>().max(1)) {
            Ok(v) => v,
            Err(e) => return p.malformed(&format!("{rel}: {}", error_msg(&e))),
        };
        if shape != want {
            return p.malformed(&format!("{rel}: shape {shape:?}, expected {want:?}"));
        }
        match values_of(c.dtype_of(name), &data) {
            Ok(v) => {
                computed.insert(name.to_string(), v);
            }
            Err(why) => return p.malformed(&format!("{rel}: {why}")),
        }
    }
    p.judge(&computed)
}

/// `bnconf kernel NAME DIR`: run a built-in kernel over every case of a suite directory,
/// reading `case.json` and the input npy files, writing `out/<output>.npy` (or
/// `out/unsupported`). Returns the number of cases run.
pub fn run_kernel_dir(kernel: &dyn bnconf_impl::Kernel, dir: &Path) -> Result<usize> {
    let mut ids: Vec<String> = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| ConfError::io(dir, e))?;
    for e in rd.flatten() {
        // Listed if present at all: a case.json that is not a regular file is refused below.
        if e.path().join("case.json").symlink_metadata().is_ok() {
            ids.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    ids.sort();
    for id in &ids {
        let cd = dir.join(id);
        let cpath = cd.join("case.json");
        let text = read_regular_string(&cpath, MAX_META_BYTES, "")?;
        let v: Value = serde_json::from_str(&text).map_err(|e| ConfError::Json {
            path: cpath.display().to_string(),
            msg: e.to_string(),
        })?;
        let get = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| ConfError::field(format!("{}: {k}", cpath.display()), "missing"))
        };
        let op = bnconf_impl::Op::from_name(get("op")?)
            .ok_or_else(|| ConfError::field(format!("{}: op", cpath.display()), "unknown"))?;
        let layout = bnconf_impl::Layout::from_name(get("layout")?)
            .ok_or_else(|| ConfError::field(format!("{}: layout", cpath.display()), "unknown"))?;
        let dtype = bnconf_impl::Dtype::from_name(get("dtype")?)
            .ok_or_else(|| ConfError::field(format!("{}: dtype", cpath.display()), "unknown"))?;
        // The shape, sized before anything is read or tabulated: its element count must be
        // within the harness's limit and each input must have its length (a
        // [1e6, 1e6, 1, 1] case used to build a 7.6 GB cell table before failing).
        let shape_err = |msg: String| ConfError::field(format!("{}: shape", cpath.display()), msg);
        let shape: Vec<usize> = v
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| shape_err("missing or not an array".into()))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| shape_err("must be an array of non-negative integers".into()))?;
        let (c_len, m_len, n_len) = bnconf_impl::channel_dims(layout, &shape).map_err(shape_err)?;
        let max_elems = crate::formats::case::InputLimits::default().max_elems;
        if n_len > max_elems {
            return Err(shape_err(format!(
                "{shape:?} has {n_len} elements, more than the limit of {max_elems}"
            )));
        }
        let eps = v
            .get("eps")
            .and_then(Value::as_f64)
            .ok_or_else(|| ConfError::field(format!("{}: eps", cpath.display()), "missing"))?;
        let mut inputs = BTreeMap::new();
        for name in op.inputs() {
            let want = if bnconf_impl::is_cell_array(name) {
                n_len
            } else if bnconf_impl::is_shard_array(name) {
                m_len
            } else {
                c_len
            };
            let ipath = cd.join(format!("{name}.npy"));
            let (_, data) = read_npy_any(&ipath, want)?;
            if data.len() != want {
                return Err(ConfError::Npy {
                    path: ipath.display().to_string(),
                    msg: format!(
                        "{} values, expected {want} (shape {shape:?} of {})",
                        data.len(),
                        cpath.display()
                    ),
                });
            }
            inputs.insert(name.to_string(), decode(&data));
        }
        let mut params = bnconf_impl::Params::default();
        if op == bnconf_impl::Op::RunningUpdate {
            params.momentum = v.get("momentum").and_then(Value::as_f64).ok_or_else(|| {
                ConfError::field(format!("{}: momentum", cpath.display()), "missing")
            })?;
            params.convention = Some(
                v.get("convention")
                    .and_then(Value::as_str)
                    .and_then(bnconf_impl::Convention::from_name)
                    .ok_or_else(|| {
                        ConfError::field(
                            format!("{}: convention", cpath.display()),
                            "missing or not one of pytorch, onnx",
                        )
                    })?,
            );
        }
        // Mixed precisions: per-channel arrays in `param_dtype` (default: `dtype`).
        let param_dtype = match v.get("param_dtype").and_then(Value::as_str) {
            None => dtype,
            Some(n) => bnconf_impl::Dtype::from_name(n).ok_or_else(|| {
                ConfError::field(format!("{}: param_dtype", cpath.display()), "unknown")
            })?,
        };
        let case = bnconf_impl::Case {
            op,
            layout,
            shape: shape.clone(),
            dtype,
            param_dtype,
            eps,
            inputs,
            params,
        };
        let out = cd.join("out");
        std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
        match kernel.run(&case) {
            Ok(res) => {
                let (c, m) = (c_len, m_len);
                for (name, vals) in res {
                    let sh = if bnconf_impl::is_cell_array(&name) {
                        shape.clone()
                    } else if bnconf_impl::is_shard_array(&name) {
                        vec![m]
                    } else {
                        vec![c]
                    };
                    let f = FloatFormat::from_name(case.dtype_of(&name).name())
                        .expect("same dtype names");
                    let data = npy_of(f, &vals);
                    write_npy(&out.join(format!("{name}.npy")), &sh, &data)?;
                }
            }
            Err(bnconf_impl::Unsupported(why)) => {
                write_bytes(&out.join("unsupported"), why.as_bytes())?
            }
        }
    }
    Ok(ids.len())
}
