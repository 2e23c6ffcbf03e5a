//! The kernel directory protocol (docs/FORMAT.md, "Kernel directory protocol") for the Rust
//! framework adapters: visit the cases of `DIR`, load their `.npy` inputs, hand them to the
//! adapter, and write `DIR/<case>/out/<output>.npy` or `DIR/<case>/out/unsupported`.
//!
//! The Rust counterpart of `adapters/_protocol.py`. An adapter returns either its outputs,
//! [`Failure::Unsupported`] (written as `out/unsupported` with the reason), or
//! [`Failure::Error`]; an error (or a panic inside the framework) is printed on stderr and the
//! case is left without outputs, so the harness counts it as not conforming instead of hiding
//! it.

use std::collections::HashMap;
use std::fs;
use std::io::BufWriter;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;
use serde_json::Value;

/// The float formats the adapters wire (the protocol also has f16 / bf16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }
}

/// The values of one array, in the case dtype.
#[derive(Clone, Debug)]
pub enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Data {
    pub fn dtype(&self) -> Dtype {
        match self {
            Data::F32(_) => Dtype::F32,
            Data::F64(_) => Dtype::F64,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a case produced no outputs.
#[derive(Debug)]
pub enum Failure {
    /// The framework does not implement the op (or dtype, layout): `out/unsupported`.
    Unsupported(String),
    /// Something went wrong: reported on stderr, nothing written.
    Error(String),
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Error(e.to_string())
    }
}

/// Shorthand for an unsupported case.
pub fn unsupported<T>(reason: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Unsupported(reason.into()))
}

/// One case of the directory: `case.json` and its inputs.
#[derive(Debug)]
pub struct Case {
    pub id: String,
    pub dir: PathBuf,
    /// The whole `case.json`, for op-specific fields (`momentum`, `convention`, ...).
    pub json: Value,
    pub op: String,
    pub layout: String,
    pub shape: Vec<usize>,
    pub dtype: Dtype,
    /// `eps` as the JSON number of `case.json`, read as the nearest f64.
    pub eps: f64,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl Case {
    /// The number of channels C of the layout (`rows`/`flat`/`chw`: axis 0, `nchw`: 1,
    /// `nhwc`: 3).
    pub fn channels(&self) -> Result<usize, Failure> {
        let axis = match (self.layout.as_str(), self.shape.len()) {
            ("rows" | "flat", 2) | ("chw", 3) => 0,
            ("nchw", 4) => 1,
            ("nhwc", 4) => 3,
            (l, r) => {
                return Err(Failure::Error(format!(
                    "layout {l} with a shape of rank {r} ({:?})",
                    self.shape
                )))
            }
        };
        Ok(self.shape[axis])
    }

    /// The shape an output is written with: the layout's shape for per-cell outputs
    /// (`y`, `dx`), `[C]` for per-channel ones. A normalization-family case (docs/FORMAT.md,
    /// "the normalization family in the protocol"): `dgamma`/`dbeta` in the parameters' shape
    /// ([`Case::param_shape`]), `mean`/`rstd` in the batch shape (layout `last`) or `[N, G]`.
    pub fn output_shape(&self, name: &str) -> Result<Vec<usize>, Failure> {
        if self.family().is_some() {
            return match name {
                "y" | "dx" => Ok(self.shape.clone()),
                "dgamma" | "dbeta" => self.param_shape(),
                _ => {
                    if self.layout == "last" {
                        let k = self.usize_field("normalized_ndim")?;
                        Ok(self.shape[..self.shape.len().saturating_sub(k)].to_vec())
                    } else {
                        Ok(vec![self.shape[0], self.usize_field("groups")?])
                    }
                }
            };
        }
        match name {
            "y" | "dx" => Ok(self.shape.clone()),
            _ => Ok(vec![self.channels()?]),
        }
    }

    /// The `family` of a normalization-family case (`layer_norm`, `rms_norm`, `group_norm`);
    /// `None` for a batch_norm case (no field, or `batch_norm`).
    pub fn family(&self) -> Option<&str> {
        match self.json.get("family").and_then(Value::as_str) {
            None | Some("batch_norm") => None,
            Some(f) => Some(f),
        }
    }

    /// The shape of `gamma`/`beta` (and `dgamma`/`dbeta`) of a family case: the trailing
    /// `normalized_ndim` axes (layout `last`), else `[C]` (channels last for `nhwc`/`ndhwc`,
    /// else axis 1).
    pub fn param_shape(&self) -> Result<Vec<usize>, Failure> {
        if self.layout == "last" {
            let k = self.usize_field("normalized_ndim")?;
            if k == 0 || k >= self.shape.len() {
                return Err(Failure::Error(format!(
                    "normalized_ndim {k} for shape {:?}",
                    self.shape
                )));
            }
            return Ok(self.shape[self.shape.len() - k..].to_vec());
        }
        let axis = match self.layout.as_str() {
            "nhwc" | "ndhwc" => self.shape.len() - 1,
            _ => 1,
        };
        self.shape.get(axis).map(|&c| vec![c]).ok_or_else(|| {
            Failure::Error(format!(
                "layout {} with shape {:?}",
                self.layout, self.shape
            ))
        })
    }

    /// A non-negative integer field of `case.json` (`groups`, `normalized_ndim`).
    pub fn usize_field(&self, key: &str) -> Result<usize, Failure> {
        self.json
            .get(key)
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| Failure::Error(format!("case.json has no integer field {key}")))
    }

    /// The outputs a kernel may leave out (`optional_outputs`; empty when absent).
    pub fn optional_outputs(&self) -> Vec<String> {
        self.json
            .get("optional_outputs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A float field of `case.json` (a JSON number), e.g. `momentum`.
    pub fn f64_field(&self, key: &str) -> Result<f64, Failure> {
        let v = self
            .json
            .get(key)
            .ok_or_else(|| Failure::Error(format!("case.json has no field {key}")))?;
        json_f64(v).ok_or_else(|| Failure::Error(format!("case.json: {key} is not a number: {v}")))
    }

    /// A string field of `case.json`, e.g. `convention`.
    pub fn str_field(&self, key: &str) -> Result<String, Failure> {
        self.json
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| Failure::Error(format!("case.json has no string field {key}")))
    }
}

fn json_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        // Tolerate a decimal string (FORMAT.md allows strings in case files).
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

fn parse_case(name: &str, dir: &Path, id: &str) -> Result<Case, Failure> {
    let text = fs::read_to_string(dir.join("case.json")).map_err(|e| format!("case.json: {e}"))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("case.json: {e}"))?;
    let s = |k: &str| -> Result<String, String> {
        json.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("case.json: missing string field {k}"))
    };
    let names = |k: &str| -> Result<Vec<String>, String> {
        json.get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("case.json: missing list {k}"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("case.json: {k} holds a non-string"))
            })
            .collect()
    };
    let shape = json
        .get("shape")
        .and_then(Value::as_array)
        .ok_or("case.json: missing shape")?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize).ok_or("case.json: bad shape"))
        .collect::<Result<Vec<_>, _>>()?;
    let dtype = match s("dtype")?.as_str() {
        "f32" => Dtype::F32,
        "f64" => Dtype::F64,
        other => {
            return unsupported(format!(
                "{name}: dtype {other} not wired in this adapter (f32, f64 only)"
            ))
        }
    };
    let eps = json.get("eps").and_then(json_f64).unwrap_or(f64::NAN);
    let case = Case {
        id: id.to_owned(),
        dir: dir.to_owned(),
        op: s("op")?,
        layout: s("layout")?,
        shape,
        dtype,
        eps,
        inputs: names("inputs")?,
        outputs: names("outputs")?,
        json,
    };
    Ok(case)
}

/// Read one little-endian float npy file in the case dtype.
pub fn read_npy(path: &Path, dtype: Dtype) -> Result<(Vec<usize>, Data), String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    if npy.order() != npyz::Order::C {
        return Err(format!("{}: Fortran order", path.display()));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = npy.dtype().descr();
    let data = match (descr.as_str(), dtype) {
        ("'<f4'", Dtype::F32) => Data::F32(npy.into_vec::<f32>().map_err(|e| e.to_string())?),
        ("'<f8'", Dtype::F64) => Data::F64(npy.into_vec::<f64>().map_err(|e| e.to_string())?),
        (d, want) => {
            return Err(format!(
                "{}: dtype {d}, the case says {}",
                path.display(),
                want.name()
            ))
        }
    };
    Ok((shape, data))
}

/// Write one npy file (little-endian, C order).
pub fn write_npy(path: &Path, shape: &[usize], data: &Data) -> Result<(), String> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let file = fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = BufWriter::new(file);
    let res = match data {
        Data::F32(v) => write_typed(&mut w, &shape, v),
        Data::F64(v) => write_typed(&mut w, &shape, v),
    };
    res.map_err(|e| format!("{}: {e}", path.display()))
}

fn write_typed<T: npyz::AutoSerialize + Copy>(
    w: &mut dyn std::io::Write,
    shape: &[u64],
    v: &[T],
) -> std::io::Result<()> {
    let mut wr = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(w)
        .begin_nd()?;
    wr.extend(v.iter().copied())?;
    wr.finish()
}

/// The case ids of `root`: `manifest.json`'s `cases`, else every `root/*/case.json` (sorted).
pub fn case_ids(root: &Path) -> Result<Vec<String>, String> {
    let man = root.join("manifest.json");
    if man.exists() {
        let text = fs::read_to_string(&man).map_err(|e| format!("{}: {e}", man.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", man.display()))?;
        return v
            .get("cases")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{}: no \"cases\" list", man.display()))?
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{}: a case id is not a string", man.display()))
            })
            .collect();
    }
    let mut ids = Vec::new();
    for e in fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        if e.path().join("case.json").exists() {
            ids.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

/// The inputs of a case by name: (shape as stored, values).
pub type Inputs = HashMap<String, (Vec<usize>, Data)>;

/// What an adapter computes for a case: each output of `case.outputs` by name.
pub type Outputs = Vec<(String, Data)>;

/// Run an adapter over `DIR` (the only command-line argument). Exit status 0 unless the
/// directory cannot be read (2); per-case errors only go to stderr.
pub fn main<F>(name: &str, run_case: F)
where
    F: Fn(&Case, &Inputs) -> Result<Outputs, Failure>,
{
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        eprintln!("usage: {name} DIR");
        std::process::exit(2);
    }
    let root = PathBuf::from(&args[1]);
    let ids = match case_ids(&root) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2);
        }
    };
    // Framework panics are caught per case; keep their message short on stderr.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("  panic: {info}");
    }));
    let (mut n_ok, mut n_unsup, mut n_err) = (0usize, 0usize, 0usize);
    for id in ids {
        let dir = root.join(&id);
        let out = dir.join("out");
        match visit(name, &dir, &id, &run_case) {
            Ok(()) => n_ok += 1,
            Err(Failure::Unsupported(reason)) => {
                let res = fs::create_dir_all(&out)
                    .and_then(|_| fs::write(out.join("unsupported"), format!("{reason}\n")));
                if let Err(e) = res {
                    eprintln!("{name}: case {id}: cannot write out/unsupported: {e}");
                    n_err += 1;
                } else {
                    n_unsup += 1;
                }
            }
            Err(Failure::Error(e)) => {
                eprintln!("{name}: case {id} failed; no outputs written: {e}");
                n_err += 1;
            }
        }
    }
    eprintln!("{name}: {n_ok} cases computed, {n_unsup} unsupported, {n_err} failed");
}

fn visit<F>(name: &str, dir: &Path, id: &str, run_case: &F) -> Result<(), Failure>
where
    F: Fn(&Case, &Inputs) -> Result<Outputs, Failure>,
{
    let case = parse_case(name, dir, id)?;
    let mut inputs = Inputs::new();
    for n in &case.inputs {
        let v = read_npy(&dir.join(format!("{n}.npy")), case.dtype).map_err(Failure::Error)?;
        inputs.insert(n.clone(), v);
    }
    let outs = match catch_unwind(AssertUnwindSafe(|| run_case(&case, &inputs))) {
        Ok(r) => r?,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            return Err(Failure::Error(format!("{name} panicked: {msg}")));
        }
    };
    // Check everything before writing anything: a case is written whole or not at all.
    let mut files = Vec::new();
    let optional = case.optional_outputs();
    for n in &case.outputs {
        let Some((_, data)) = outs.iter().find(|(k, _)| k == n) else {
            // An optional output (a family case's `mean`/`rstd`) the framework does not
            // return is left out; a required one is an error.
            if optional.contains(n) {
                continue;
            }
            return Err(Failure::Error(format!("{name} computed no output {n}")));
        };
        if data.dtype() != case.dtype {
            return Err(Failure::Error(format!(
                "{name} returned {n} as {}, the case is {}",
                data.dtype().name(),
                case.dtype.name()
            )));
        }
        let shape = case.output_shape(n)?;
        if shape.iter().product::<usize>() != data.len() {
            return Err(Failure::Error(format!(
                "{name} returned {} values for {n}, shape {shape:?}",
                data.len()
            )));
        }
        files.push((n, shape, data));
    }
    let out = dir.join("out");
    fs::create_dir_all(&out)?;
    for (n, shape, data) in files {
        write_npy(&out.join(format!("{n}.npy")), &shape, data).map_err(Failure::Error)?;
    }
    Ok(())
}

/// How a layout maps onto the frameworks' channel-second convention `[N, C, ...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcMap {
    /// The shape the data is handed to the framework in (the stored layout, or an `[N, C, ...]`
    /// reshape of it).
    pub stored: Vec<usize>,
    /// `Some(perm)` when the stored tensor must be permuted to `[N, C, ...]` (nhwc:
    /// `[0, 3, 1, 2]`); its inverse is applied to per-cell outputs.
    pub to_nc: Option<[usize; 4]>,
}

/// `rows`/`flat` `[C, m]` → `[1, C, m]`; `chw` `[C, H, W]` → `[1, C, H, W]`; `nchw` as is;
/// `nhwc` `[N, H, W, C]` stored as is and permuted with `[0, 3, 1, 2]`.
pub fn nc_map(layout: &str, shape: &[usize]) -> Result<NcMap, Failure> {
    match (layout, shape.len()) {
        ("rows" | "flat", 2) | ("chw", 3) => {
            let mut s = vec![1];
            s.extend_from_slice(shape);
            Ok(NcMap {
                stored: s,
                to_nc: None,
            })
        }
        ("nchw", 4) => Ok(NcMap {
            stored: shape.to_vec(),
            to_nc: None,
        }),
        ("nhwc", 4) => Ok(NcMap {
            stored: shape.to_vec(),
            to_nc: Some([0, 3, 1, 2]),
        }),
        (l, r) => unsupported(format!("layout {l} of rank {r} is not mapped")),
    }
}

/// The inverse of the nhwc permutation (`[N, C, H, W]` → `[N, H, W, C]`).
pub const FROM_NC: [usize; 4] = [0, 2, 3, 1];
