//! ONNX's own `BatchNormalization` test data, judged by the exact reference.
//!
//! ONNX ships node tests as directories: `model.onnx` (an `onnx.ModelProto` holding one
//! `BatchNormalization` node, its attributes and, for models exported from PyTorch, the
//! parameters as initializers) and `test_data_set_0/{input,output}_K.pb` (each an
//! `onnx.TensorProto`). This module reads such a directory, maps the node onto our ops and
//! measures ONNX's *expected* outputs against the exact result in the units of our budget
//! (DESIGN §3): `ratio = |expected - exact| / (u * (cond + mag))`, gate `ratio <= k(m)`.
//!
//! ## The data
//!
//! ONNX's nine BatchNormalization tests are committed, unchanged, in `conformance/data/onnx`
//! (Apache-2.0, see its README and NOTICE) and compiled into the library as [`BUILTIN`], so
//! [`run_builtin`] (`bnconf onnx` without arguments) works from any directory; [`run_dirs`]
//! reads another copy from disk.
//!
//! ## Decoding
//!
//! [`proto`] (`formats/onnx_proto.rs`, shared with the ONNX export) declares, by hand, the
//! subset of `onnx.proto` that is read (official field numbers and types) and derives
//! `prost::Message` on it: no `protoc`, no generated code.
//! prost checks every length against the buffer (a truncated or hostile file is an error
//! naming the file, never a panic) and skips the fields not declared.
//!
//! ## The mapping (ONNX → bnconf)
//!
//! * `X` of shape `[N, C, D1, ..., Dk]` is the `nchw` layout with `H = D1*...*D(k-1)`,
//!   `W = Dk` (`[N,C]` → `[N,C,1,1]`, `[N,C,L]` → `[N,C,L,1]`, `[N,C,D,H,W]` → `[N,C,D*H,W]`):
//!   the flat memory order is unchanged, and the statistics run over every axis but 1.
//! * Inference (`training_mode` absent or 0): op `eval` with `gamma = scale`, `beta = B`,
//!   `mean = input_mean`, `var = input_var`.
//! * `training_mode = 1`: op `forward` with `gamma = scale`, `beta = B`; output `Y` is
//!   compared with forward's `y`, and `running_mean`/`running_var` with the exact
//!   `input_mean*momentum + batch_stat*(1 - momentum)` (batch variance biased, as ONNX
//!   defines it) — see [`running_budget`] for their budget.
//! * `epsilon` and `momentum` are float32 attributes: the exact reference uses the value of
//!   the float32 exactly (`1e-5` is `9.99999974737875163555145263671875e-6`), since that is
//!   the eps every ONNX kernel receives. [`judge`] can also be told to use another eps (the
//!   decimal the test's author wrote) to show what that difference amounts to.

use crate::error::{ConfError, Result};
use crate::judge::budget::{budgets_auto, k_allowance, unit_roundoff, ElementBudget};
use bnconf_spec::exact::round::{f64_to_rational, round, FloatFormat};
use bnconf_spec::exact::Rational;
use bnconf_spec::{Geometry, Layout, Op, Problem, QSqrt};
use prost::Message as _;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// The data compiled in

/// Every file of `conformance/data/onnx/{dir}/`: `model.onnx`, then the inputs and outputs.
macro_rules! embed {
    ($($dir:literal: [$($i:literal)*] -> [$($o:literal)*];)*) => {
        &[$(
            (concat!($dir, "/model.onnx"),
             include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/onnx/", $dir, "/model.onnx"))
                as &[u8]),
            $((concat!($dir, "/test_data_set_0/input_", $i, ".pb"),
               include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/onnx/", $dir,
                                      "/test_data_set_0/input_", $i, ".pb"))),)*
            $((concat!($dir, "/test_data_set_0/output_", $o, ".pb"),
               include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/onnx/", $dir,
                                      "/test_data_set_0/output_", $o, ".pb"))),)*
        )*]
    };
}

/// ONNX's test data as committed in `conformance/data/onnx` (paths relative to it, `/`
/// separated), compiled in; `conformance/tests/onnx.rs` checks it against the files.
pub static BUILTIN: &[(&str, &[u8])] = embed! {
    "node/test_batchnorm_epsilon": [0 1 2 3 4] -> [0];
    "node/test_batchnorm_epsilon_training_mode": [0 1 2 3 4] -> [0 1 2];
    "node/test_batchnorm_example": [0 1 2 3 4] -> [0];
    "node/test_batchnorm_example_training_mode": [0 1 2 3 4] -> [0 1 2];
    "pytorch-converted/test_BatchNorm1d_3d_input_eval": [0] -> [0];
    "pytorch-converted/test_BatchNorm2d_eval": [0] -> [0];
    "pytorch-converted/test_BatchNorm2d_momentum_eval": [0] -> [0];
    "pytorch-converted/test_BatchNorm3d_eval": [0] -> [0];
    "pytorch-converted/test_BatchNorm3d_momentum_eval": [0] -> [0];
};

/// The directory the paths of [`BUILTIN`] hang from in [`OnnxTest::dir`] and error messages.
pub const BUILTIN_ROOT: &str = "<built-in conformance/data/onnx>";

/// Largest `model.onnx` or `.pb` file read from disk (the ONNX test data's are a few KB).
pub const MAX_ONNX_FILE_BYTES: u64 = 256 << 20;

/// Where a test's files are read from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Disk,
    Builtin,
}

impl Source {
    fn builtin(path: &Path) -> Option<&'static [u8]> {
        let rel = path.strip_prefix(BUILTIN_ROOT).ok()?;
        let rel: Vec<_> = rel.iter().map(|c| c.to_string_lossy()).collect();
        let rel = rel.join("/");
        BUILTIN.iter().find(|(p, _)| *p == rel).map(|(_, b)| *b)
    }

    fn exists(self, path: &Path) -> bool {
        match self {
            Source::Disk => path.exists(),
            Source::Builtin => Source::builtin(path).is_some(),
        }
    }

    fn read(self, path: &Path) -> Result<Vec<u8>> {
        match self {
            // Regular files only, size-limited (docs/HOSTILE.md): a FIFO used to hang here.
            Source::Disk => {
                crate::formats::fsafe::read_regular(path, MAX_ONNX_FILE_BYTES, "ONNX file")
            }
            Source::Builtin => Source::builtin(path)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| ConfError::io(path, "not in the built-in ONNX data")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ONNX messages (only the fields we need)

/// The hand-declared `onnx.proto` messages (shared with the ONNX export's writer).
pub use crate::formats::onnx_proto as proto;
pub use crate::formats::onnx_proto::{DT_DOUBLE, DT_FLOAT};

fn wire_err(what: impl std::fmt::Display) -> ConfError {
    ConfError::field("protobuf", what.to_string())
}

/// A decoded `onnx.TensorProto` of type FLOAT or DOUBLE.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// `name` (field 8); may be empty.
    pub name: String,
    /// `dims` (field 1).
    pub dims: Vec<usize>,
    /// `data_type` (field 2): [`DT_FLOAT`] or [`DT_DOUBLE`].
    pub data_type: i32,
    /// The values, each exactly (a float32 widens to f64 exactly).
    pub values: Vec<f64>,
}

impl Tensor {
    /// The float format of the tensor's type.
    pub fn format(&self) -> FloatFormat {
        if self.data_type == DT_DOUBLE {
            FloatFormat::F64
        } else {
            FloatFormat::F32
        }
    }
}

impl TryFrom<proto::TensorProto> for Tensor {
    type Error = ConfError;

    /// The values of a FLOAT or DOUBLE tensor: `raw_data` (little-endian) when present, else
    /// `float_data` or `double_data` as the type says; their count must match `dims`.
    fn try_from(p: proto::TensorProto) -> Result<Tensor> {
        let dims = p
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| wire_err("negative dimension")))
            .collect::<Result<Vec<usize>>>()?;
        let raw = |size: usize| match &p.raw_data {
            Some(b) if b.len() % size != 0 => Err(wire_err(
                "raw_data: length not a multiple of the element size",
            )),
            b => Ok(b.as_ref().map(|b| b.chunks_exact(size))),
        };
        let values: Vec<f64> = match p.data_type {
            DT_FLOAT => match raw(4)? {
                Some(c) => c
                    .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))))
                    .collect(),
                None => p.float_data.iter().map(|&v| f64::from(v)).collect(),
            },
            DT_DOUBLE => match raw(8)? {
                Some(c) => c
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
                None => p.double_data.clone(),
            },
            t => {
                return Err(wire_err(format!(
                    "tensor {:?}: data_type {t} (only FLOAT=1 and DOUBLE=11 are supported)",
                    p.name
                )))
            }
        };
        let want = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| wire_err("dims overflow"))?;
        if want != values.len() {
            return Err(wire_err(format!(
                "tensor {:?}: dims {dims:?} need {want} values, found {}",
                p.name,
                values.len()
            )));
        }
        Ok(Tensor {
            name: p.name,
            dims,
            data_type: p.data_type,
            values,
        })
    }
}

/// Decode an `onnx.TensorProto` (FLOAT or DOUBLE; `float_data`, `double_data` packed or not,
/// or `raw_data` little-endian).
pub fn parse_tensor(buf: &[u8]) -> Result<Tensor> {
    proto::TensorProto::decode(buf)
        .map_err(wire_err)?
        .try_into()
}

/// Decode an `onnx.ModelProto` (only the fields [`proto`] declares).
pub fn parse_model(buf: &[u8]) -> Result<proto::ModelProto> {
    proto::ModelProto::decode(buf).map_err(wire_err)
}

// ---------------------------------------------------------------------------------------------
// A BatchNormalization test directory

/// One ONNX `BatchNormalization` test: its five inputs, attributes and expected outputs.
#[derive(Clone, Debug)]
pub struct OnnxTest {
    /// The directory's name (e.g. `test_batchnorm_epsilon`).
    pub name: String,
    /// The directory (under [`BUILTIN_ROOT`] for the built-in data).
    pub dir: PathBuf,
    /// `X`, `scale`, `B`, `input_mean`, `input_var`, in that order.
    pub inputs: [Tensor; 5],
    /// The `epsilon` attribute (float32; ONNX's default 1e-5 when absent).
    pub epsilon: f32,
    /// The `momentum` attribute (float32; default 0.9).
    pub momentum: f32,
    /// `training_mode = 1`.
    pub training: bool,
    /// Expected outputs (`output_K.pb`), named after the node's outputs: `Y`, then in training
    /// mode `running_mean`, `running_var`.
    pub expected: Vec<Tensor>,
}

fn in_file<T>(path: &Path, r: Result<T>) -> Result<T> {
    r.map_err(|e| ConfError::io(path, e))
}

/// Read an ONNX node test directory (`model.onnx`, `test_data_set_0/*.pb`).
///
/// Inputs are matched to the node's inputs by the tensor's `name` when it names one, else in
/// order to the graph inputs that are not initializers (old PyTorch exports list initializers
/// among the graph inputs).
pub fn load_test(dir: &Path) -> Result<OnnxTest> {
    load(Source::Disk, dir)
}

fn load(src: Source, dir: &Path) -> Result<OnnxTest> {
    let name = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mpath = dir.join("model.onnx");
    let graph = in_file(&mpath, parse_model(&src.read(&mpath)?))?
        .graph
        .unwrap_or_default();
    let node = match graph.node.as_slice() {
        [n] if n.op_type == "BatchNormalization" => n,
        _ => {
            return Err(ConfError::io(
                &mpath,
                format!(
                    "expected a graph of one BatchNormalization node, found ops {:?}",
                    graph.node.iter().map(|n| &n.op_type).collect::<Vec<_>>()
                ),
            ))
        }
    };
    if node.input.len() != 5 {
        return Err(ConfError::io(
            &mpath,
            format!(
                "BatchNormalization with {} inputs (need 5)",
                node.input.len()
            ),
        ));
    }
    let attr = |k: &str| node.attribute.iter().find(|a| a.name == k);
    let attr_i = |k: &str| attr(k).and_then(|a| a.i);
    if attr_i("spatial") == Some(0) {
        return Err(ConfError::io(&mpath, "spatial = 0 is not supported"));
    }
    if attr_i("is_test") == Some(0) && attr_i("training_mode").is_none() {
        return Err(ConfError::io(
            &mpath,
            "is_test = 0 (legacy training) is not supported",
        ));
    }
    let epsilon = attr("epsilon").and_then(|a| a.f).unwrap_or(1e-5);
    let momentum = attr("momentum").and_then(|a| a.f).unwrap_or(0.9);
    let training = attr_i("training_mode").unwrap_or(0) == 1;

    let mut by_name = BTreeMap::new();
    for t in &graph.initializer {
        let t = in_file(&mpath, Tensor::try_from(t.clone()))?;
        by_name.insert(t.name.clone(), t);
    }
    let data = dir.join("test_data_set_0");
    let mut free = graph
        .input
        .iter()
        .map(|v| v.name.clone())
        .filter(|n| !by_name.contains_key(n))
        .collect::<Vec<_>>()
        .into_iter();
    let mut expected = Vec::new();
    for (prefix, is_input) in [("input", true), ("output", false)] {
        for k in 0.. {
            let p = data.join(format!("{prefix}_{k}.pb"));
            if !src.exists(&p) {
                break;
            }
            let t = in_file(&p, parse_tensor(&src.read(&p)?))?;
            if is_input {
                let key = if node.input.contains(&t.name) {
                    t.name.clone()
                } else {
                    free.next()
                        .ok_or_else(|| ConfError::io(&p, "more input files than graph inputs"))?
                };
                by_name.insert(key, t);
            } else {
                expected.push(t);
            }
        }
    }
    let want_out = if training { 3 } else { 1 };
    if expected.len() < want_out {
        return Err(ConfError::io(
            &data,
            format!(
                "{} output files, need {want_out}{}",
                expected.len(),
                if training { " (training mode)" } else { "" }
            ),
        ));
    }
    expected.truncate(want_out);
    for (t, n) in expected.iter_mut().zip(&node.output) {
        t.name = n.clone();
    }
    let get = |i: usize| {
        by_name.get(&node.input[i]).cloned().ok_or_else(|| {
            ConfError::io(dir, format!("no data for node input {:?}", node.input[i]))
        })
    };
    let inputs = [get(0)?, get(1)?, get(2)?, get(3)?, get(4)?];
    Ok(OnnxTest {
        name,
        dir: dir.to_path_buf(),
        inputs,
        epsilon,
        momentum,
        training,
        expected,
    })
}

/// Every test directory under `root` (a directory holding `model.onnx` and
/// `test_data_set_0`, at any depth), sorted by path; `root` itself if it is one.
pub fn find_tests(root: &Path) -> Result<Vec<PathBuf>> {
    // `model.onnx` present at all (a FIFO or device there is then refused by the read, not
    // skipped as "no test here").
    let is_test = |d: &Path| {
        d.join("model.onnx").symlink_metadata().is_ok() && d.join("test_data_set_0").is_dir()
    };
    if is_test(root) {
        return Ok(vec![root.to_path_buf()]);
    }
    let mut out = Vec::new();
    let rd = std::fs::read_dir(root).map_err(|e| ConfError::io(root, e))?;
    let mut subs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subs.sort();
    for s in subs {
        out.extend(find_tests(&s)?);
    }
    Ok(out)
}

/// The test directories of [`BUILTIN`] (under [`BUILTIN_ROOT`]), sorted by path.
pub fn builtin_tests() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = BUILTIN
        .iter()
        .filter_map(|(p, _)| p.strip_suffix("/model.onnx"))
        .map(|d| Path::new(BUILTIN_ROOT).join(d))
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// The mapping and the judgement

/// The `nchw` shape of an ONNX `X` shape `[N, C, D1..Dk]` (see the module docs).
pub fn nchw_shape(dims: &[usize]) -> Result<[usize; 4]> {
    match dims {
        [n, c] => Ok([*n, *c, 1, 1]),
        [n, c, rest @ ..] => {
            let (last, mid) = rest.split_last().expect("non-empty");
            Ok([*n, *c, mid.iter().product(), *last])
        }
        _ => Err(ConfError::field(
            "X",
            format!("shape {dims:?}: BatchNormalization needs rank >= 2"),
        )),
    }
}

/// The exact value of a float (finite by construction of the tensors we read).
fn exact(field: &str, i: usize, v: f64) -> Result<Rational> {
    f64_to_rational(v)
        .ok_or_else(|| ConfError::field(format!("{field}[{i}]"), format!("non-finite value {v}")))
}

fn exact_vec(field: &str, t: &Tensor) -> Result<Vec<QSqrt>> {
    t.values
        .iter()
        .enumerate()
        .map(|(i, &v)| exact(field, i, v).map(QSqrt::rational))
        .collect()
}

/// The exact problem of an ONNX test: `eval` (inference) or `forward` (training), layout
/// `nchw`, with `eps` (pass [`eps_of`]`(test)` for the eps ONNX uses).
pub fn problem(test: &OnnxTest, eps: Rational) -> Result<Problem> {
    let [x, scale, b, mean, var] = &test.inputs;
    let shape = nchw_shape(&x.dims)?;
    let geom = Geometry::new(Layout::Nchw, &shape, usize::MAX)?;
    for (t, n) in [
        (scale, "scale"),
        (b, "B"),
        (mean, "input_mean"),
        (var, "input_var"),
    ] {
        if t.values.len() != geom.c {
            return Err(ConfError::field(
                n,
                format!("{} values, expected C = {}", t.values.len(), geom.c),
            ));
        }
    }
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), exact_vec("X", x)?);
    inputs.insert("gamma".to_string(), exact_vec("scale", scale)?);
    inputs.insert("beta".to_string(), exact_vec("B", b)?);
    let op = if test.training {
        Op::Forward
    } else {
        inputs.insert("mean".to_string(), exact_vec("input_mean", mean)?);
        inputs.insert("var".to_string(), exact_vec("input_var", var)?);
        Op::Eval
    };
    Ok(Problem::new(op, geom, eps, inputs)?)
}

/// The eps ONNX uses: the float32 attribute's value, exactly.
pub fn eps_of(test: &OnnxTest) -> Rational {
    f64_to_rational(f64::from(test.epsilon)).expect("finite attribute")
}

/// The budget of `running = momentum*input + (1 - momentum)*stat`, from the budget `b` of the
/// batch statistic `stat` (forward's `mean` or `var`) and the exact values.
///
/// `momentum` is exact (an attribute, like eps), and so is `1 - momentum` for a float32
/// momentum in `[0.5, 1]` (Sterbenz). Inputs are `input` and the cells of `x`, so
/// `cond = |momentum*input| + (1-momentum)*cond(stat)`. A kernel rounds the two products and
/// the sum and carries the error of its computed statistic:
/// `mag = (1-momentum)*mag(stat) + |momentum*input| + (1-momentum)*|stat| + |running|`.
pub fn running_budget(
    b: &ElementBudget,
    u: f64,
    momentum: f64,
    input: f64,
    stat: f64,
    running: f64,
) -> ElementBudget {
    let w = (1.0 - momentum).abs();
    ElementBudget {
        cond: (momentum * input).abs() + w * b.cond,
        mag: w * b.mag_at(u) + (momentum * input).abs() + w * stat.abs() + running.abs(),
        mag2: 0.0,
    }
}

/// ONNX's expected values of one output, measured against the exact result.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputVerdict {
    /// ONNX's output name (`Y`, `running_mean`, `running_var`, or the model's own names).
    pub name: String,
    /// Number of elements.
    pub len: usize,
    /// Worst `|expected - exact| / (u*(cond+mag))`.
    pub worst_ratio: f64,
    /// Largest `|expected - exact|`.
    pub max_abs: f64,
    /// Largest `|expected - exact| / |exact|` (0 where both are 0, inf where only exact is).
    pub max_rel: f64,
    /// Elements whose expected value equals the correctly rounded exact value.
    pub correctly_rounded: usize,
    /// The gate `k(m)`.
    pub k: f64,
}

impl OutputVerdict {
    /// Whether ONNX's expected values pass our gate: `worst_ratio <= k`.
    pub fn pass(&self) -> bool {
        self.worst_ratio <= self.k
    }
}

/// One test judged.
#[derive(Clone, Debug, PartialEq)]
pub struct TestVerdict {
    /// The test directory's name.
    pub name: String,
    /// `eval` or `forward`.
    pub op: Op,
    /// ONNX's `X` shape.
    pub x_dims: Vec<usize>,
    /// The eps used for the exact reference.
    pub eps: Rational,
    /// Per output, in ONNX's order.
    pub outputs: Vec<OutputVerdict>,
}

fn measure(
    name: &str,
    expected: &Tensor,
    exact_vals: &[QSqrt],
    budgets: &[ElementBudget],
    u: f64,
    k: f64,
) -> Result<OutputVerdict> {
    if expected.values.len() != exact_vals.len() {
        return Err(ConfError::field(
            name,
            format!(
                "ONNX expects {} values, the op has {}",
                expected.values.len(),
                exact_vals.len()
            ),
        ));
    }
    let fmt = expected.format();
    let mut v = OutputVerdict {
        name: name.to_string(),
        len: exact_vals.len(),
        worst_ratio: 0.0,
        max_abs: 0.0,
        max_rel: 0.0,
        correctly_rounded: 0,
        k,
    };
    for ((&e, x), b) in expected.values.iter().zip(exact_vals).zip(budgets) {
        v.worst_ratio = v.worst_ratio.max(b.ratio(e, x, u));
        let diff = x - &QSqrt::rational(exact(name, 0, e)?);
        let abs = round(&diff.abs(), FloatFormat::F64).to_f64();
        let mag = round(&x.abs(), FloatFormat::F64).to_f64();
        let rel = if abs == 0.0 {
            0.0
        } else if mag == 0.0 {
            f64::INFINITY
        } else {
            abs / mag
        };
        v.max_abs = v.max_abs.max(abs);
        v.max_rel = v.max_rel.max(rel);
        if round(x, fmt).to_f64() == e {
            v.correctly_rounded += 1;
        }
    }
    Ok(v)
}

/// Judge ONNX's expected outputs of `test` against the exact reference run with `eps`
/// ([`eps_of`] for what ONNX really used), in units of the budget of `X`'s dtype.
pub fn judge(test: &OnnxTest, eps: Rational) -> Result<TestVerdict> {
    let p = problem(test, eps.clone())?;
    let outs = p.evaluate()?;
    let buds = budgets_auto(&p)?;
    let u = unit_roundoff(test.inputs[0].format());
    let k = k_allowance(p.geom.m);
    let mut verdicts = vec![measure(
        &test.expected[0].name,
        &test.expected[0],
        &outs["y"],
        &buds["y"],
        u,
        k,
    )?];
    if test.training {
        let mom = f64_to_rational(f64::from(test.momentum)).expect("finite attribute");
        let one_minus = Rational::from_integer(1.into()) - &mom;
        for (i, stat, input) in [(1, "mean", 3), (2, "var", 4)] {
            let mut ex = Vec::new();
            let mut bs = Vec::new();
            for c in 0..p.geom.c {
                let s = outs[stat][c]
                    .as_rational()
                    .expect("batch statistics are rational")
                    .clone();
                let inp = exact("running input", c, test.inputs[input].values[c])?;
                let run = &mom * &inp + &one_minus * &s;
                let to_f =
                    |r: &Rational| round(&QSqrt::rational(r.clone()), FloatFormat::F64).to_f64();
                bs.push(running_budget(
                    &buds[stat][c],
                    u,
                    f64::from(test.momentum),
                    test.inputs[input].values[c],
                    to_f(&s),
                    to_f(&run),
                ));
                ex.push(QSqrt::rational(run));
            }
            let e = &test.expected[i];
            verdicts.push(measure(&e.name, e, &ex, &bs, u, k)?);
        }
    }
    Ok(TestVerdict {
        name: test.name.clone(),
        op: p.op,
        x_dims: test.inputs[0].dims.clone(),
        eps,
        outputs: verdicts,
    })
}

/// The decimal the float32 eps was written as (its shortest round-trip decimal, e.g. `1e-5`),
/// exactly.
pub fn decimal_eps(test: &OnnxTest) -> Rational {
    let s = format!("{:e}", test.epsilon);
    bnconf_spec::exact::parse::parse_rational(&s).expect("Rust prints a parseable decimal")
}

/// One row of the `bnconf onnx` table: the verdict with ONNX's eps, plus the worst ratio of
/// the first output (`Y`) against the exact result with the decimal eps instead.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The verdict with the float32 eps.
    pub verdict: TestVerdict,
    /// The float32 eps as written in decimal (e.g. `1e-5`).
    pub eps_decimal: String,
    /// Worst ratio of `Y` if the exact reference used the decimal eps.
    pub y_ratio_decimal_eps: f64,
}

/// Judge a test with the float32 eps and, for `Y`, with the decimal eps.
pub fn row(test: &OnnxTest) -> Result<Row> {
    let verdict = judge(test, eps_of(test))?;
    let dec = judge(test, decimal_eps(test))?;
    Ok(Row {
        verdict,
        eps_decimal: format!("{:e}", test.epsilon),
        y_ratio_decimal_eps: dec.outputs[0].worst_ratio,
    })
}

/// The table printed by `bnconf onnx` (Markdown).
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(
        "| test | op | X shape | eps (f32) | output | n | worst ratio | k | gate | max abs err | max rel err | correctly rounded | Y ratio, decimal eps |\n\
         |---|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let v = &r.verdict;
        for (i, o) in v.outputs.iter().enumerate() {
            let (test, op, shape, eps, dec) = if i == 0 {
                (
                    v.name.clone(),
                    v.op.name().to_string(),
                    format!("{:?}", v.x_dims),
                    format!(
                        "{} = {}",
                        r.eps_decimal,
                        bnconf_spec::exact::fmt_rational(&v.eps)
                    ),
                    format!("{:.3}", r.y_ratio_decimal_eps),
                )
            } else {
                Default::default()
            };
            let _ = writeln!(
                s,
                "| {test} | {op} | {shape} | {eps} | {} | {} | {:.3} | {:.1} | {} | {:.2e} | {:.2e} | {}/{} | {dec} |",
                o.name,
                o.len,
                o.worst_ratio,
                o.k,
                if o.pass() { "pass" } else { "FAIL" },
                o.max_abs,
                o.max_rel,
                o.correctly_rounded,
                o.len,
            );
        }
    }
    s
}

fn run(src: Source, tests: &[PathBuf], rows: &mut Vec<Row>) -> Result<()> {
    for t in tests {
        let test = load(src, t)?;
        rows.push(row(&test).map_err(|e| ConfError::io(t, e))?);
    }
    Ok(())
}

/// `bnconf onnx DIR...`: judge every test directory found under the given paths and return
/// the table (errors name the directory).
pub fn run_dirs(dirs: &[PathBuf]) -> Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            return Err(ConfError::io(
                d,
                "not a directory (ONNX test data expected here)",
            ));
        }
        run(Source::Disk, &find_tests(d)?, &mut rows)?;
    }
    let tab = table(&rows);
    Ok((rows, tab))
}

/// `bnconf onnx`: judge the built-in copy of `conformance/data/onnx` ([`BUILTIN`]).
pub fn run_builtin() -> Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    run(Source::Builtin, &builtin_tests(), &mut rows)?;
    let tab = table(&rows);
    Ok((rows, tab))
}
