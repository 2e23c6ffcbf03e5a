//! Goldens by the fast path: the `--out-dir` npy files and golden.json, and the JSON golden
//! of `bnconf golden`, byte for byte the exact path's.

use super::eval::*;
use super::npy_case::*;
use super::problem::*;
use super::round::*;
use crate::error::{ConfError, Result};
use crate::formats::atomic::AtomicFile;
use crate::formats::case::{CaseHeader, InputLimits};
use crate::formats::golden::{out_dir_files, output_shape, write_out_index, write_out_pair};
use crate::formats::npy::{header_bytes, Descr};
use crate::par::*;
use bnconf_spec::exact::round::{round, FloatFormat};
use serde_json::Value;
use std::path::Path;

/// Write `DIR/<output>.f64.npy`, `DIR/<output>.f32.npy` and `DIR/golden.json` from fast
/// outputs, through the exact path's writer ([`crate::formats::golden::write_out_dir_of`]).
pub fn write_out_dir(h: &CaseHeader, out: FastOutputs, dir: &Path) -> Result<FastStats> {
    crate::formats::golden::write_out_dir_of(h, out.outputs, dir)?;
    Ok(out.stats)
}

/// `bnconf golden CASE --out-dir DIR` by the fast path. `Ok(None)` when the fast path does
/// not apply (the caller then takes the exact path).
///
/// The cell output is written as it is computed ([`stream_cells`]): the same files, byte for
/// byte, as computing it whole and writing it through [`write_out_dir`], with the writing and
/// the disk's writeback overlapped with the computing.
pub fn golden_out_dir(
    case: &Path,
    lim: &InputLimits,
    dir: &Path,
    progress: bool,
) -> Result<Option<FastStats>> {
    let t = Timer::new();
    let Some((h, fp)) = read_fast_case(case, lim)? else {
        return Ok(None);
    };
    t.lap("read case and npy inputs");
    let stats = with_cells(
        &fp,
        Streamed {
            h: &h,
            dir,
            progress,
        },
    )?;
    Ok(Some(stats))
}

/// [`golden_out_dir`] on the cells in their float type.
struct Streamed<'a> {
    h: &'a CaseHeader,
    dir: &'a Path,
    progress: bool,
}

impl CellsFn for Streamed<'_> {
    type Out = FastStats;
    fn call<T: Cell>(self, p: &FastProblem, x: &[T], dy: Option<&[T]>) -> Result<FastStats> {
        let t = Timer::new();
        let pb = progress_bar(progress_len(p, dy.is_some()), self.progress);
        // Every refusal (a channel whose constants fail) before any file is written.
        let chans = channels(p, x, dy, &pb)?;
        t.lap("exact sums and per-channel constants");
        std::fs::create_dir_all(self.dir).map_err(|e| ConfError::io(self.dir, e))?;
        let inp = CellsIn {
            g: &p.geom,
            chans: &chans,
            x,
            dy,
        };
        // The per-channel outputs are written by the writer thread before the cell output's
        // first piece (their fsyncs overlap the computing).
        let (h, dir) = (self.h, self.dir);
        let chan_files = || -> Result<()> {
            for (name, f64s, f32s) in channel_outputs(p, &chans) {
                write_out_pair(h, dir, name, f64s, f32s)?;
            }
            Ok(())
        };
        let fallbacks = stream_cells(&inp, h, dir, p.op.outputs()[0], chan_files, &pb)?;
        pb.finish_and_clear();
        t.lap("per-channel outputs, and the elements written as computed");
        write_out_index(h, dir)?;
        t.lap("golden.json");
        Ok(FastStats {
            elements: p.geom.len() as u64,
            fallbacks,
        })
    }
}

/// Elements per piece of [`stream_cells`] (a multiple of [`CHUNK`]): 512 KiB of f64 and
/// 256 KiB of f32. Measured (2 cores, `[32, 64, 56, 56]` and a 2.1M-element case): 16 chunks a
/// piece left the pipeline's first and last pieces unoverlapped (+20 % on the small case), 2
/// chunks gave each thread too little a piece (+15 % on the large one).
const PIECE: usize = 4 * CHUNK;

/// Pieces in flight in [`stream_cells`]: one being computed, one being written, one queued.
const PIECES: usize = 3;

/// The cell output `name` computed a piece at a time and written as it is computed: a writer
/// thread runs `first` (other files to write), then appends each finished piece to
/// `DIR/<name>.f64.npy` and `.f32.npy` (temporary files, renamed when complete) and starts
/// the disk's writeback of it ([`AtomicFile::start_writeback`]) while the next piece is
/// computed. Memory: [`PIECES`]
/// pieces, whatever the case's size. Returns the number of exact fallbacks.
pub(super) fn stream_cells<T: Cell>(
    inp: &CellsIn<'_, T>,
    h: &CaseHeader,
    dir: &Path,
    name: &str,
    first: impl FnOnce() -> Result<()> + Send,
    pb: &Progress,
) -> Result<u64> {
    let (p64, p32) = out_dir_files(name);
    let shape: Vec<u64> = output_shape(h, name).iter().map(|&d| d as u64).collect();
    let mut f64f = AtomicFile::create(&dir.join(p64))?;
    let mut f32f = AtomicFile::create(&dir.join(p32))?;
    f64f.write_all(&header_bytes(Descr::F8, &shape))?;
    f32f.write_all(&header_bytes(Descr::F4, &shape))?;
    let len = inp.g.len();
    type Piece = (Vec<f64>, Vec<f32>);
    let (to_writer, written) = std::sync::mpsc::sync_channel::<Piece>(1);
    let (to_compute, free) = std::sync::mpsc::channel::<Piece>();
    for _ in 0..PIECES.min(len.div_ceil(PIECE)) {
        let _ = to_compute.send((Vec::with_capacity(PIECE), Vec::with_capacity(PIECE)));
    }
    std::thread::scope(|s| {
        let writer = s.spawn(move || -> Result<(AtomicFile, AtomicFile)> {
            first()?;
            for (b64, b32) in written {
                f64f.write_all(&le_bytes(&b64))?;
                f32f.write_all(&le_bytes(&b32))?;
                f64f.start_writeback();
                f32f.start_writeback();
                // The computing side may have stopped (it then needs no more pieces).
                let _ = to_compute.send((b64, b32));
            }
            Ok((f64f, f32f))
        });
        let mut fallbacks = 0;
        let mut base = 0;
        while base < len {
            let n = PIECE.min(len - base);
            // No free piece: the writer stopped (an error, reported below).
            let Ok((mut b64, mut b32)) = free.recv() else {
                break;
            };
            b64.resize(n, 0.0);
            b32.resize(n, 0.0);
            fallbacks += cells_range(inp, base, &mut b64, &mut b32, pb);
            if to_writer.send((b64, b32)).is_err() {
                break;
            }
            base += n;
        }
        drop(to_writer);
        let (f64f, f32f) = match writer.join() {
            Ok(r) => r?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        f64f.commit()?;
        f32f.commit()?;
        Ok(fallbacks)
    })
}

/// The little-endian bytes of a slice of floats, as npy stores them (a view on little-endian
/// machines).
fn le_bytes<F: bytemuck::Pod>(v: &[F]) -> std::borrow::Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        std::borrow::Cow::Borrowed(bytemuck::cast_slice(v))
    } else {
        let w = std::mem::size_of::<F>();
        std::borrow::Cow::Owned(
            bytemuck::cast_slice::<F, u8>(v)
                .chunks_exact(w)
                .flat_map(|b| b.iter().rev().copied())
                .collect(),
        )
    }
}

/// `bnconf golden CASE` (a JSON golden, to stdout or `-o`) by the fast path: the same
/// document, byte for byte, as [`crate::formats::golden::golden_json`] of the exact path —
/// the exact strings from the per-channel constants ([`cells::FastCells::exact`]: a few
/// rational operations per element instead of the op's), the f64/f32 hex strings from
/// [`compute`]'s correct roundings. `Ok(None)` where it does not apply (dtype f16/bf16,
/// values that are not binary64, an op it does not cover, disabled by `--exact-path`) or
/// where the case is refused (the exact path then reports, with its own message).
pub fn golden_json_fast(
    path: &Path,
    lim: &InputLimits,
    formats: &[FloatFormat],
    opts: &FastOptions,
) -> Result<Option<Value>> {
    if opts.exact_path {
        return Ok(None);
    }
    with_threads(opts.threads, || -> Result<Option<Value>> {
        let Some((_, fp)) = read_fast_case(path, lim)? else {
            return Ok(None);
        };
        // The echo, and every check of the case file, as the exact path reads it.
        let case = crate::formats::case::read_case_file(path, lim)?;
        Ok(golden_json_of(&case, &fp, formats))
    })?
}

/// The JSON golden of `case` (whose inputs `fp` holds as floats) by the fast path, as
/// [`golden_json_fast`]; `None` where the fast path refuses the case (the exact path then
/// reports).
pub fn golden_json_of(
    case: &crate::formats::case::Case,
    fp: &FastProblem,
    formats: &[FloatFormat],
) -> Option<Value> {
    let (out, fc) = compute_cells(fp).ok()?;
    let chan = fc.channel_outputs();
    let cell_name = fp.op.outputs()[0];
    let doc = crate::formats::golden::golden_json_with(case, formats, |name, f| {
        let k = fp
            .op
            .outputs()
            .iter()
            .position(|&n| n == name)
            .expect("an output");
        let (_, f64s, f32s) = out
            .outputs
            .iter()
            .find(|o| o.0 == name)
            .expect("compute gives every output");
        match f {
            None if name == cell_name => (0..fc.len())
                .into_par_iter()
                .map(|j| fc.exact(j).to_string())
                .collect(),
            None => chan[k - 1].iter().map(|v| v.to_string()).collect(),
            Some(FloatFormat::F64) => f64s
                .par_iter()
                .map(|&v| rounded_of(v, FloatFormat::F64).to_hex())
                .collect(),
            Some(FloatFormat::F32) => f32s
                .par_iter()
                .map(|&v| rounded_of(v as f64, FloatFormat::F32).to_hex())
                .collect(),
            // f16, bf16: from the correct f64 rounding (exact unless it is a midpoint).
            Some(f) if name == cell_name => f64s
                .par_iter()
                .enumerate()
                .map(|(j, &r)| match round_via_f64(r, f) {
                    Some(v) => v.to_hex(),
                    None => round(&fc.exact(j), f).to_hex(),
                })
                .collect(),
            Some(f) => chan[k - 1].iter().map(|v| round(v, f).to_hex()).collect(),
        }
    });
    Some(doc)
}

/// Options of the fast path (`bnconf golden`'s `--exact-path` and `--threads`).
#[derive(Clone, Debug, Default)]
pub struct FastOptions {
    /// Use the per-element exact path even where the fast path applies (slow; for checking).
    pub exact_path: bool,
    /// Worker threads (default: RAYON_NUM_THREADS or the number of cores). Results do not
    /// depend on it.
    pub threads: Option<usize>,
}

/// `bnconf golden CASE --out-dir DIR`: the fast path where it applies (binary-float inputs,
/// an op it covers, not disabled), the exact path otherwise; the same files either way.
pub fn golden_to_dir(case: &Path, lim: &InputLimits, dir: &Path, opts: &FastOptions) -> Result<()> {
    if !opts.exact_path
        && with_threads(opts.threads, || golden_out_dir(case, lim, dir, true))??.is_some()
    {
        return Ok(());
    }
    let g = crate::formats::golden::compute(crate::formats::case::read_case_file(case, lim)?)?;
    crate::formats::golden::write_out_dir(&g, dir)
}

/// The golden document of `bnconf golden CASE` (to stdout or `-o`): the fast path where it
/// applies ([`golden_json_fast`]), the exact path otherwise; the same bytes either way.
pub fn golden_doc(
    case: &Path,
    lim: &InputLimits,
    formats: &[FloatFormat],
    opts: &FastOptions,
) -> Result<Value> {
    Ok(match golden_json_fast(case, lim, formats, opts)? {
        Some(doc) => doc,
        None => {
            let c = crate::formats::case::read_case_file(case, lim)?;
            crate::formats::golden::golden_json(&crate::formats::golden::compute(c)?, formats)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::npy::{write_npy, NpyData};

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bnconf-stream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A case file with npy cell inputs (pseudo-random, f32 or f64) and JSON parameters.
    fn write_case(dir: &Path, op: &str, layout: &str, shape: &[usize], c: usize, f64npy: bool) {
        let len: usize = shape.iter().product();
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let mut inputs = serde_json::Map::new();
        for name in ["x", "dy"] {
            if name == "dy" && op == "forward" {
                continue;
            }
            let v: Vec<f64> = (0..len).map(|_| 3.0 * next() + 0.25).collect();
            let d = if f64npy {
                NpyData::F64(v)
            } else {
                NpyData::F32(v.iter().map(|&e| e as f32).collect())
            };
            write_npy(&dir.join(format!("{name}.npy")), shape, &d).unwrap();
            inputs.insert(
                name.into(),
                serde_json::json!({"npy": format!("{name}.npy")}),
            );
        }
        let params: Vec<f64> = (0..c).map(|k| 0.5 + k as f64 * 0.125).collect();
        inputs.insert("gamma".into(), serde_json::json!(params));
        if op == "forward" {
            inputs.insert("beta".into(), serde_json::json!(vec![-0.25; c]));
        }
        let doc = serde_json::json!({
            "format": "bnconf-case/1", "id": "stream", "op": op, "layout": layout,
            "shape": shape, "dtype": if f64npy { "f64" } else { "f32" }, "eps": "1e-5",
            "inputs": inputs,
        });
        std::fs::write(dir.join("case.json"), doc.to_string()).unwrap();
    }

    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    }

    /// The streamed `--out-dir` files are byte for byte those of the whole output computed
    /// first and then written ([`write_out_dir`] of [`compute`]): cases of several pieces
    /// with a partial last one, exactly one piece, and less than one, forward and backward,
    /// nchw and nhwc, f32 and f64, with 1 and 2 threads.
    #[test]
    fn streamed_out_dir_is_the_whole_output_written() {
        let cases: [(&str, &str, Vec<usize>, usize, bool); 5] = [
            ("forward", "nchw", vec![3, 5, 211, 211], 5, false),
            ("backward", "nhwc", vec![2, 300, 300, 3], 3, false),
            ("backward", "nchw", vec![2, 2, 256, 256], 2, true),
            ("forward", "rows", vec![4, PIECE / 4], 4, true),
            ("forward", "nchw", vec![1, 2, 2, 3], 2, false),
        ];
        let lim = InputLimits::default();
        for (i, (op, layout, shape, c, f64npy)) in cases.into_iter().enumerate() {
            let d = scratch(&format!("same{i}"));
            write_case(&d, op, layout, &shape, c, f64npy);
            let case = d.join("case.json");
            let (h, fp) = read_fast_case(&case, &lim).unwrap().expect("fast path");
            let whole = compute(&fp, false).unwrap();
            let want_fb = whole.stats.fallbacks;
            write_out_dir(&h, whole, &d.join("whole")).unwrap();
            let want = files(&d.join("whole"));
            for threads in [1, 2] {
                let out = d.join(format!("streamed{threads}"));
                let stats =
                    with_threads(Some(threads), || golden_out_dir(&case, &lim, &out, false))
                        .unwrap()
                        .unwrap()
                        .expect("fast path");
                assert_eq!(stats.fallbacks, want_fb, "{op} {layout} {shape:?}");
                assert_eq!(stats.elements, shape.iter().product::<usize>() as u64);
                let got = files(&out);
                assert_eq!(got.len(), want.len(), "{op} {layout} {shape:?}");
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        g == w,
                        "{op} {layout} {shape:?} {threads} threads: {} differs",
                        g.0
                    );
                }
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    /// A file that cannot be written stops the streaming with an error naming it and leaves
    /// no temporary or partial file behind (every file left is complete): a per-channel
    /// output (written by the writer thread first) and the cell output (renamed last).
    #[test]
    fn a_failed_write_stops_the_stream_and_leaves_no_partial_file() {
        let lim = InputLimits::default();
        for blocked in ["mean.f64.npy", "y.f32.npy"] {
            let d = scratch(&format!("fail-{}", blocked.replace('.', "-")));
            let shape = [2, 3, 300, 300];
            write_case(&d, "forward", "nchw", &shape, 3, false);
            let out = d.join("out");
            std::fs::create_dir_all(out.join(blocked).join("in-the-way")).unwrap();
            let err = golden_out_dir(&d.join("case.json"), &lim, &out, false).unwrap_err();
            assert!(err.to_string().contains(blocked), "{blocked}: {err}");
            for e in std::fs::read_dir(&out).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                assert!(!name.starts_with('.'), "{blocked}: left {name}");
                assert_ne!(name, "golden.json", "{blocked}: the index written");
                if name != blocked {
                    let want = if name.starts_with("y.") {
                        &shape[..]
                    } else {
                        &shape[1..2]
                    };
                    let (s, _) = crate::formats::npy::read_npy(&out.join(&name), 1 << 24)
                        .unwrap_or_else(|e| panic!("{blocked}: {name} incomplete: {e}"));
                    assert_eq!(s, want, "{blocked}: {name}");
                }
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
