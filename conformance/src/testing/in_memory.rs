//! In-memory judging: a suite's cases with their inputs as the bytes `bnconf export` writes,
//! and a kernel's outputs judged from bytes in memory — no directory, no process. The same
//! verdicts, ratios and report documents as `bnconf check DIR` (the Python package's
//! `bnconf.judge` / `bnconf.check` and its hypothesis strategy bind this).
//!
//! A kernel's outputs arrive as [`Array`]s: an npy type string (`<f8`, `<f4`, `<f2`, `<u2` for
//! bf16 bit patterns), a shape and little-endian bytes — what `out/<name>.npy` would hold.
//! They are checked and decoded as `check DIR` reads that file (same messages, naming
//! `<id>/out/<name>.npy`), then judged by [`Prepared::judge_written`].
//!
//! ```
//! use bnconf::testing::in_memory::{Array, Given, InMemorySuite};
//! use bnconf::suite::Selection;
//! use std::collections::BTreeMap;
//!
//! let sel = Selection::from_names("default", "f64", 7, &["eval"], &["rows"]).unwrap();
//! let mut suite = InMemorySuite::new(&sel).unwrap();
//! // An all-zero `y` for the first case: not conforming (its gamma is never 0).
//! let c = suite.case(0).clone();
//! let y = &c.inputs["x"];
//! let zeros = Array { descr: "<f8".into(), shape: c.shape.clone(), bytes: vec![0; 8 * y.len()] };
//! let r = suite.judge(0, &Given::Outputs(BTreeMap::from([("y".to_string(), zeros)])));
//! assert_eq!(r.verdict.name(), "FAIL");
//! // A missing output is malformed, named as `check DIR` names the file.
//! let r = suite.judge(1, &Given::Outputs(BTreeMap::new()));
//! assert!(matches!(&r.verdict, bnconf::judge::check::Verdict::Malformed(w) if w.ends_with("/out/y.npy: missing")));
//! ```

use crate::error::{ConfError, Result};
use crate::formats::npy::NpyData;
use crate::judge::check::{self, CaseResult, Prepared, Written};
use crate::judge::diagnosis;
use crate::protocol;
use crate::report::{self, Context};
use crate::suite::{self, Precision, Selection, Suite, SuiteCase};
use bnconf_spec::{Layout, Op};
use serde_json::Value;
use std::collections::BTreeMap;

/// One array in memory, as an npy file of the protocol holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Array {
    /// npy type string: `<f8`, `<f4`, `<f2`, or `<u2` (bf16 bit patterns).
    pub descr: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Little-endian element bytes, C order.
    pub bytes: Vec<u8>,
}

impl Array {
    /// The array of npy data (what `bnconf export` writes into `<name>.npy`).
    pub fn of(shape: Vec<usize>, data: &NpyData) -> Array {
        let bytes: Vec<u8> = match data {
            NpyData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            NpyData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            NpyData::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
            NpyData::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        Array {
            descr: data.descr().type_str().to_string(),
            shape,
            bytes,
        }
    }

    /// The npy data, or why these bytes are not an array of a type the protocol reads.
    pub fn data(&self) -> std::result::Result<NpyData, String> {
        let n: usize = self.shape.iter().product();
        let width = match self.descr.as_str() {
            "<f8" => 8,
            "<f4" => 4,
            "<f2" | "<u2" => 2,
            other => {
                return Err(format!(
                    "dtype {other:?} is not one of <f8, <f4, <f2, <u2 (bf16 bit patterns)"
                ))
            }
        };
        if self.bytes.len() != n * width {
            return Err(format!(
                "{} bytes for shape {:?} of {}",
                self.bytes.len(),
                self.shape,
                self.descr
            ));
        }
        let chunks = self.bytes.chunks_exact(width);
        Ok(match width {
            8 => NpyData::F64(
                chunks
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
            ),
            4 => NpyData::F32(
                chunks
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect(),
            ),
            _ => {
                let u: Vec<u16> = chunks.map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
                if self.descr == "<f2" {
                    NpyData::F16(u.into_iter().map(half::f16::from_bits).collect())
                } else {
                    NpyData::U16(u)
                }
            }
        })
    }
}

/// The inputs of a case as `bnconf export` writes them: name, shape and data of each
/// `<name>.npy` (activations in the case dtype, the rest in the parameters' dtype).
pub fn inputs_of(c: &SuiteCase) -> Vec<(String, Array)> {
    c.inputs
        .iter()
        .map(|(name, v)| {
            let data = protocol::npy_of(c.dtype_of(name), v);
            (name.clone(), Array::of(protocol::shape_of(c, name), &data))
        })
        .collect()
}

/// What a kernel gave for one case.
#[derive(Clone, Debug)]
pub enum Given {
    /// It does not support the case (`out/unsupported`): the reason.
    Unsupported(String),
    /// It failed on the case (`out/error`): its message.
    Error(String),
    /// Its outputs by name (`out/<name>.npy`); names the op does not have are ignored.
    Outputs(BTreeMap<String, Array>),
}

/// What `check DIR` would read had the kernel written `given` into the case's `out/`: the
/// same checks (shape, dtype) and the same messages.
pub fn written(c: &SuiteCase, given: &Given) -> Written {
    let trimmed = |s: &str, empty: &str| {
        let t = s.trim();
        if t.is_empty() {
            empty.to_string()
        } else {
            t.to_string()
        }
    };
    match given {
        Given::Error(msg) => Written::Malformed(format!(
            "kernel error: {}",
            trimmed(msg, "the kernel failed (out/error is empty)")
        )),
        Given::Unsupported(why) => {
            Written::Unsupported(trimmed(why, "kernel reported unsupported"))
        }
        Given::Outputs(outs) => {
            let mut computed = BTreeMap::new();
            for &name in c.op.outputs() {
                let rel = format!("{}/out/{name}.npy", c.id);
                match decode_output(c, name, outs.get(name)) {
                    Ok(v) => {
                        computed.insert(name.to_string(), v);
                    }
                    Err(why) => return Written::Malformed(format!("{rel}: {why}")),
                }
            }
            Written::Outputs(computed)
        }
    }
}

/// Output `name` as values of its dtype, checked as `protocol::read_written` checks the file.
fn decode_output(
    c: &SuiteCase,
    name: &str,
    a: Option<&Array>,
) -> std::result::Result<Vec<f64>, String> {
    let a = a.ok_or_else(|| "missing".to_string())?;
    let want = protocol::shape_of(c, name);
    let data = a.data()?;
    if a.shape != want {
        return Err(format!("shape {:?}, expected {want:?}", a.shape));
    }
    protocol::values_of(c.dtype_of(name), &data)
}

/// A selection's cases in memory, prepared for judging, and the results judged so far.
pub struct InMemorySuite {
    /// The generated suite.
    pub suite: Suite,
    /// Its precision.
    pub precision: Precision,
    prepared: Vec<Prepared>,
    results: Vec<Option<CaseResult>>,
}

impl InMemorySuite {
    /// Generate and prepare the cases `sel` selects (its shard too, if any). The replicated
    /// suite (cases split across ranks) is refused: it is judged per rank.
    pub fn new(sel: &Selection) -> Result<InMemorySuite> {
        if sel.suite == "replicated" {
            return Err(ConfError::field(
                "suite",
                "the replicated suite is judged per rank: use `bnconf check` on an exported directory",
            ));
        }
        let suite = sel.generate();
        let prepared = check::prepare(&suite.cases)?;
        let results = vec![None; prepared.len()];
        Ok(InMemorySuite {
            suite,
            precision: sel.precision,
            prepared,
            results,
        })
    }

    /// Number of cases.
    pub fn len(&self) -> usize {
        self.suite.cases.len()
    }

    /// Whether the selection has no case.
    pub fn is_empty(&self) -> bool {
        self.suite.cases.is_empty()
    }

    /// Case `i`, in suite order. Panics if out of range.
    pub fn case(&self, i: usize) -> &SuiteCase {
        &self.suite.cases[i]
    }

    /// Judge what the kernel gave for case `i` (replacing an earlier verdict on it).
    pub fn judge(&mut self, i: usize, given: &Given) -> &CaseResult {
        let p = &self.prepared[i];
        let r = p.judge_written(&written(&p.case, given));
        self.results[i].insert(r)
    }

    /// The report of `bnconf check DIR --report FILE.json` had the kernel written what was
    /// given, with its exit status (0 conforming, 1 not) and its printed report. A case not
    /// judged counts as unsupported ("not run").
    pub fn report(&self, require_all: bool, max_details: usize) -> InMemoryReport {
        let results: Vec<CaseResult> = self
            .prepared
            .iter()
            .zip(&self.results)
            .map(|(p, r)| r.clone().unwrap_or_else(|| p.unsupported("not run")))
            .collect();
        let diag = diagnosis::diagnose(&self.prepared, &results);
        let dtype = self.precision.static_name();
        let mut ctx = Context::new(&self.suite.name, dtype, &results, &self.suite.cases);
        ctx.diagnosis = Some(&diag);
        let sm = check::summarize(&results);
        let ok = sm.failed == 0 && !(require_all && sm.unsupported > 0) && sm.passed > 0;
        InMemoryReport {
            json: report::json_report(&ctx),
            text: report::human_report(&ctx, max_details),
            ok,
        }
    }
}

/// A report as `bnconf check` writes and prints it.
#[derive(Clone, Debug)]
pub struct InMemoryReport {
    /// The `--report` document (`bnconf-report/1`).
    pub json: Value,
    /// The printed report.
    pub text: String,
    /// Exit status 0 (conforming).
    pub ok: bool,
}

/// Judge what a kernel gave for one case (prepared here): the case's result and its record
/// as in a `--report` document.
pub fn judge_case(c: &SuiteCase, given: &Given) -> Result<(CaseResult, Value)> {
    let p = check::prepare(std::slice::from_ref(c))?
        .pop()
        .expect("one prepared case");
    let r = p.judge_written(&written(c, given));
    let cases = std::slice::from_ref(c);
    let ctx = Context::new("", "", std::slice::from_ref(&r), cases);
    let v = report::case_json(&ctx, &r);
    Ok((r, v))
}

/// The data classes of the `default` suite's cases for `op` and `layout` in `dtype` at its
/// seed, in suite order (simplest first: well-scaled data before the adversarial classes).
pub fn classes(op: &str, layout: &str, dtype: &str) -> Result<Vec<String>> {
    let sel = Selection::from_names("default", dtype, suite::DEFAULT_SEED, &[op], &[layout])
        .map_err(bad_name)?;
    Ok(sel
        .generate()
        .cases
        .iter()
        .map(|c| c.class.clone())
        .collect())
}

/// One case drawn as the `default` suite draws it: the case of `class` for `op` and `layout`
/// in `dtype` generated with `seed` (shape, data, eps, momentum as the suite draws them),
/// then cut to its first `channels` channels (at least 1; all if larger). `Ok(None)` when the
/// suite has no such case at this seed (the class does not apply to the op, or the case is
/// ill-posed in its dtype, before or after the cut). Errors name the field.
pub fn draw_case(
    op: &str,
    layout: &str,
    dtype: &str,
    class: &str,
    seed: u64,
    channels: usize,
) -> Result<Option<SuiteCase>> {
    let sel = Selection::from_names("default", dtype, seed, &[op], &[layout]).map_err(bad_name)?;
    let (o, l) = (sel.filter.ops[0], sel.filter.layouts[0]);
    let id = format!("{}.{}.{}.{class}", o.name(), l.name(), sel.precision.name());
    let s = sel.generate();
    let Some(c) = s.cases.into_iter().find(|c| c.id == id) else {
        return Ok(None);
    };
    Ok(first_channels(c, channels.max(1), o, l))
}

/// `c` with only its first `keep` channels (every per-channel input and the channel axis of
/// every cell array cut), `None` if that leaves it ill-posed.
fn first_channels(c: SuiteCase, keep: usize, op: Op, layout: Layout) -> Option<SuiteCase> {
    let kc = super::KernelCase::from_suite_case(&c);
    let have = kc.channels();
    if keep >= have || op == Op::SyncStats {
        return Some(c);
    }
    let mut k = kc;
    for drop in (keep..have).rev() {
        k = super::drop_channel(&k, drop)?;
    }
    let mut out = c;
    out.shape = k.shape;
    out.inputs = k.inputs;
    debug_assert_eq!(out.layout, layout);
    suite::ill_posed(&out).is_none().then_some(out)
}

fn bad_name(b: suite::BadName) -> ConfError {
    match b {
        suite::BadName::Dtype(d) => ConfError::field("dtype", format!("unknown dtype {d:?}")),
        suite::BadName::Op(o) => ConfError::field("ops", format!("unknown op {o:?}")),
        suite::BadName::Layout(l) => ConfError::field("layouts", format!("unknown layout {l:?}")),
        suite::BadName::Suite(s) => ConfError::field("suite", format!("unknown suite {s:?}")),
    }
}

/// Parse a selection's names (`dtype` in bnconf's or numpy's names); errors name the field.
pub fn selection(
    suite_name: &str,
    dtype: &str,
    seed: Option<u64>,
    ops: &[String],
    layouts: &[String],
) -> Result<Selection> {
    Selection::from_names(
        suite_name,
        dtype,
        seed.unwrap_or(suite::DEFAULT_SEED),
        ops,
        layouts,
    )
    .map_err(bad_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::npy::read_npy_any;

    fn sel(dtype: &str, ops: &[&str]) -> Selection {
        let ops: Vec<String> = ops.iter().map(|s| s.to_string()).collect();
        selection("default", dtype, None, &ops, &[]).unwrap()
    }

    /// Inputs in memory are the bytes `protocol::export` writes (past the npy header).
    #[test]
    fn inputs_are_the_exported_bytes() {
        for dtype in ["f32", "bf16", "f16+f32"] {
            let s = sel(dtype, &["eval", "running_update", "sync_stats"]);
            let suite = s.generate();
            let dir = std::env::temp_dir()
                .join(format!("bnconf-in-memory-{}-{dtype}", std::process::id()));
            protocol::export(&suite, s.precision, &s.filter, &dir).unwrap();
            for c in suite.cases.iter().step_by(5) {
                for (name, a) in inputs_of(c) {
                    let path = dir.join(&c.id).join(format!("{name}.npy"));
                    let file = std::fs::read(&path).unwrap();
                    assert!(file.ends_with(&a.bytes), "{}/{name}", c.id);
                    let (shape, data) = read_npy_any(&path, 1 << 20).unwrap();
                    assert_eq!(shape, a.shape, "{}/{name}", c.id);
                    assert_eq!(a.data().unwrap(), data, "{}/{name}", c.id);
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A built-in kernel's outputs judged in memory and through `read_written` on a directory
    /// agree, and a defective kernel fails the same cases.
    #[test]
    fn same_verdicts_as_the_directory() {
        let s = sel("f32", &["forward", "eval"]);
        let suite = s.generate();
        let dir = std::env::temp_dir().join(format!("bnconf-in-memory-dir-{}", std::process::id()));
        protocol::export(&suite, s.precision, &s.filter, &dir).unwrap();
        let prepared = check::prepare(&suite.cases).unwrap();
        for name in ["twopass-native", "bad-onepass-var"] {
            let k = bnconf_impl::kernel_by_name(name).unwrap();
            protocol::run_kernel_dir(k.as_ref(), &dir).unwrap();
            let mut mem = InMemorySuite::new(&s).unwrap();
            let mut failed = 0;
            for (i, p) in prepared.iter().enumerate() {
                let on_disk = p.judge_written(&protocol::read_written(&dir, p));
                let outs: BTreeMap<String, Array> = match k.run(&p.case.to_kernel_case()) {
                    Ok(o) => o
                        .iter()
                        .map(|(n, v)| {
                            let f = p.case.dtype_of(n);
                            let a = Array::of(
                                protocol::shape_of(&p.case, n),
                                &protocol::npy_of(
                                    f,
                                    &v.iter().map(|&x| suite::to_dtype(x, f)).collect::<Vec<_>>(),
                                ),
                            );
                            (n.clone(), a)
                        })
                        .collect(),
                    Err(_) => continue,
                };
                let r = mem.judge(i, &Given::Outputs(outs));
                assert_eq!(r.verdict, on_disk.verdict, "{name} {}", p.case.id);
                assert_eq!(
                    r.worst_ratio.to_bits(),
                    on_disk.worst_ratio.to_bits(),
                    "{name} {}",
                    p.case.id
                );
                failed += usize::from(!r.conforms());
            }
            assert_eq!(
                failed > 0,
                name == "bad-onepass-var",
                "{name}: {failed} failing"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_outputs_are_named() {
        let s = sel("f32", &["eval"]);
        let mem = InMemorySuite::new(&s).unwrap();
        let c = mem.case(0).clone();
        let n = c.inputs["x"].len();
        let good = Array {
            descr: "<f4".into(),
            shape: c.shape.clone(),
            bytes: vec![0; 4 * n],
        };
        let cases: [(Array, &str); 4] = [
            (
                Array {
                    descr: "<f8".into(),
                    bytes: vec![0; 8 * n],
                    ..good.clone()
                },
                "dtype float64, expected the case dtype f32",
            ),
            (
                Array {
                    shape: vec![n],
                    ..good.clone()
                },
                "shape",
            ),
            (
                Array {
                    bytes: vec![0; 3],
                    ..good.clone()
                },
                "3 bytes",
            ),
            (
                Array {
                    descr: "<i4".into(),
                    ..good.clone()
                },
                "\"<i4\"",
            ),
        ];
        for (a, want) in cases {
            let w = written(&c, &Given::Outputs(BTreeMap::from([("y".into(), a)])));
            match w {
                Written::Malformed(why) => {
                    assert!(why.starts_with(&format!("{}/out/y.npy: ", c.id)), "{why}");
                    assert!(why.contains(want), "{why} lacks {want}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            written(&c, &Given::Error("  ZeroDivisionError: x \n".into())),
            Written::Malformed(w) if w == "kernel error: ZeroDivisionError: x"
        ));
        assert!(matches!(
            written(&c, &Given::Unsupported(" ".into())),
            Written::Unsupported(w) if w == "kernel reported unsupported"
        ));
    }

    #[test]
    fn draw_case_is_the_suite_case_cut_to_its_channels() {
        let s = selection(
            "default",
            "f32",
            Some(11),
            &["forward".into()],
            &["nchw".into()],
        )
        .unwrap()
        .generate();
        let c = &s.cases[0];
        let class = c.id.rsplit('.').next().unwrap();
        let full = draw_case("forward", "nchw", "float32", class, 11, 99)
            .unwrap()
            .unwrap();
        assert_eq!(&full, c);
        let one = draw_case("forward", "nchw", "f32", class, 11, 1)
            .unwrap()
            .unwrap();
        assert_eq!(one.shape[1], 1);
        assert_eq!(one.inputs["gamma"], c.inputs["gamma"][..1]);
        assert_eq!(one.eps, c.eps);
        assert!(draw_case("forward", "nchw", "f32", "no-such-class", 11, 1)
            .unwrap()
            .is_none());
        let e = draw_case("forward", "diagonal", "f32", class, 11, 1).unwrap_err();
        assert!(e.to_string().starts_with("layouts: "), "{e}");
        let names = classes("forward", "nchw", "f32").unwrap();
        assert!(
            names.contains(&class.to_string()) && names.len() > 5,
            "{names:?}"
        );
    }
}
