//! npy files (little-endian, C order): float32 `<f4`, float64 `<f8`, and for half-precision
//! data float16 `<f2` and uint16 `<u2` (the protocol's bf16 arrays: the upper 16 bits of the
//! f32). Read and written by our own code:
//!
//! - The header's Python dict literal is parsed by a strict, single-pass parser of the tiny
//!   grammar numpy writes (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`,
//!   any whitespace, optional trailing commas): no recursion, no backtracking, every byte is
//!   looked at a bounded number of times, so its time is linear in the header by construction
//!   (a header nesting 15 braces deep used to take 78 s in a backtracking parser). Anything
//!   else is refused naming the key at fault.
//! - The header length is bounded (64 KiB) before the header is read, the shape's product is
//!   checked (overflow-safe) against the element limit before anything is allocated, and the
//!   file's length must be exactly the header plus the data: a truncated file and one with
//!   trailing bytes are both refused, from the file's size, before the data is read.
//! - Only regular files are opened ([`crate::formats::fsafe`]): a FIFO or device is refused.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_atomic;
use crate::formats::fsafe;
use half::f16;
use std::io::{Read, Write};
use std::path::Path;

/// The data of an npy file.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    /// `<f4`
    F32(Vec<f32>),
    /// `<f8`
    F64(Vec<f64>),
    /// `<f2` (IEEE binary16)
    F16(Vec<f16>),
    /// `<u2`: raw 16-bit integers; the protocol stores bf16 arrays this way (the upper 16 bits
    /// of each f32), see [`NpyData::bf16_value`].
    U16(Vec<u16>),
}

impl NpyData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::F16(v) => v.len(),
            NpyData::U16(v) => v.len(),
        }
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i` as f64: exact for every variant (f16 ⊂ f32 ⊂ f64); for `U16` the raw
    /// integer (use [`NpyData::bf16_value`] for bf16 bit patterns).
    pub fn get(&self, i: usize) -> f64 {
        match self {
            NpyData::F32(v) => v[i] as f64,
            NpyData::F64(v) => v[i],
            NpyData::F16(v) => v[i].to_f64(),
            NpyData::U16(v) => v[i] as f64,
        }
    }
    /// Every element as f64 ([`NpyData::get`] of each), a variant at a time.
    pub fn to_f64s(&self) -> Vec<f64> {
        match self {
            NpyData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            NpyData::F64(v) => v.clone(),
            NpyData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            NpyData::U16(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
    /// Every element as f64 with `U16` data read as bf16 bit patterns
    /// ([`NpyData::bf16_value`] of each).
    pub fn bf16_values(&self) -> Vec<f64> {
        match self {
            NpyData::U16(v) => v
                .iter()
                .map(|&b| f32::from_bits((b as u32) << 16) as f64)
                .collect(),
            other => other.to_f64s(),
        }
    }
    /// Element `i` of `U16` data read as a bf16 bit pattern (the upper half of an f32),
    /// exactly; for the float variants the value itself ([`NpyData::get`]).
    pub fn bf16_value(&self, i: usize) -> f64 {
        match self {
            NpyData::U16(v) => f32::from_bits((v[i] as u32) << 16) as f64,
            other => other.get(i),
        }
    }
    /// The npy type string (`<f4`, `<f8`, `<f2`, `<u2`).
    pub fn descr(&self) -> Descr {
        match self {
            NpyData::F32(_) => Descr::F4,
            NpyData::F64(_) => Descr::F8,
            NpyData::F16(_) => Descr::F2,
            NpyData::U16(_) => Descr::U2,
        }
    }
    /// numpy's name of the dtype (`float32`, `float64`, `float16`, `uint16`).
    pub fn dtype_name(&self) -> &'static str {
        self.descr().numpy_name()
    }
}

/// The element types of npy files read and written here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Descr {
    /// `<f4`
    F4,
    /// `<f8`
    F8,
    /// `<f2`
    F2,
    /// `<u2`
    U2,
}

impl NpyHeader {
    /// The element type, if it is one read here.
    pub fn dtype(&self) -> Option<Descr> {
        Descr::from_type_str(&self.descr)
    }
}

impl Descr {
    /// The type string as in the header, without quotes.
    pub fn type_str(self) -> &'static str {
        match self {
            Descr::F4 => "<f4",
            Descr::F8 => "<f8",
            Descr::F2 => "<f2",
            Descr::U2 => "<u2",
        }
    }
    /// numpy's name.
    pub fn numpy_name(self) -> &'static str {
        match self {
            Descr::F4 => "float32",
            Descr::F8 => "float64",
            Descr::F2 => "float16",
            Descr::U2 => "uint16",
        }
    }
    /// Bytes per element.
    pub fn width(self) -> u64 {
        match self {
            Descr::F4 => 4,
            Descr::F8 => 8,
            Descr::F2 | Descr::U2 => 2,
        }
    }
    fn from_type_str(s: &str) -> Option<Descr> {
        [Descr::F4, Descr::F8, Descr::F2, Descr::U2]
            .into_iter()
            .find(|d| d.type_str() == s)
    }
}

/// Longest npy header accepted, in bytes (numpy itself refuses headers over 10000 bytes by
/// default); checked before the header is read.
pub const MAX_HEADER_BYTES: usize = 1 << 16;

/// Bytes before the header text: magic (6), version (2), header length (2 in v1, 4 in v2/v3).
const MAX_PREAMBLE: u64 = 12;

/// A parsed npy header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// `descr`, the type string as written (see [`NpyHeader::dtype`]).
    pub descr: String,
    /// `fortran_order`.
    pub fortran_order: bool,
    /// `shape`.
    pub shape: Vec<u64>,
}

/// Read an npy file of float32 or float64 (the protocol's and case files' inputs) with at
/// most `max_elems` elements. Float16 and uint16 files are refused; see [`read_npy_any`].
pub fn read_npy(path: &Path, max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    read_npy_path(path, max_elems, false)
}

/// [`read_npy`] accepting also float16 (`<f2`) and uint16 (`<u2`, bf16 bit patterns).
pub fn read_npy_any(path: &Path, max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    read_npy_path(path, max_elems, true)
}

/// [`read_npy`] for an input of a case file (`{"npy": "path.npy"}`) whose tensor has storage
/// format `dtype` (`None`: exact): float32 and float64, and for a half-precision tensor also
/// its own format, float16 (`<f2`) for f16 and bf16 bit patterns (`<u2`) for bf16, as the
/// kernel protocol and `bnconf shrink` write them; half data comes back as the float32 values
/// it holds (exact). Other tensors read as [`read_npy`] reads them (its errors unchanged).
pub fn read_npy_case_input(
    path: &Path,
    max_elems: usize,
    dtype: Option<bnconf_spec::exact::round::FloatFormat>,
) -> Result<(Vec<usize>, NpyData)> {
    use bnconf_spec::exact::round::FloatFormat;
    let own = match dtype {
        Some(FloatFormat::F16) => Descr::F2,
        Some(FloatFormat::BF16) => Descr::U2,
        _ => return read_npy(path, max_elems),
    };
    let (shape, data) = read_npy_any(path, max_elems)?;
    let data = match data {
        NpyData::U16(v) if own == Descr::U2 => NpyData::F32(
            v.iter()
                .map(|&b| f32::from_bits((b as u32) << 16))
                .collect(),
        ),
        NpyData::F16(v) if own == Descr::F2 => {
            NpyData::F32(v.iter().map(|x| x.to_f32()).collect())
        }
        d @ (NpyData::F32(_) | NpyData::F64(_)) => d,
        d => {
            return Err(ConfError::Npy {
                path: path.display().to_string(),
                msg: format!(
                    "dtype '{}' is not supported for a tensor of dtype {} (little-endian float32 '<f4', float64 '<f8' or {})",
                    d.descr().type_str(),
                    dtype.map_or("exact", |f| f.name()),
                    if own == Descr::F2 {
                        "float16 '<f2'"
                    } else {
                        "uint16 '<u2' (bf16 bit patterns)"
                    }
                ),
            })
        }
    };
    Ok((shape, data))
}

fn read_npy_path(path: &Path, max_elems: usize, half: bool) -> Result<(Vec<usize>, NpyData)> {
    let (shape, read) = read_npy_path_as(path, max_elems, half, None)?;
    Ok((shape, read.data()))
}

/// What [`read_npy_any_as`] read: the values as f64, or the data as it is stored.
#[derive(Debug)]
pub enum NpyRead {
    /// The file's elements, of the type asked for, each as f64 (exact).
    Values(Vec<f64>),
    /// The file's data, of another type.
    Data(NpyData),
}

impl NpyRead {
    fn data(self) -> NpyData {
        match self {
            NpyRead::Data(d) => d,
            NpyRead::Values(v) => NpyData::F64(v),
        }
    }
}

/// [`read_npy_any`] of a file whose elements are expected to be of type `want`: if they are,
/// read straight into f64 values (exact: as [`NpyData::to_f64s`], and `<u2` as bf16 bit
/// patterns, [`NpyData::bf16_values`]), with no copy in the stored width; else the data as
/// [`read_npy_any`] reads it. The same checks and errors.
pub fn read_npy_any_as(
    path: &Path,
    max_elems: usize,
    want: Descr,
) -> Result<(Vec<usize>, NpyRead)> {
    read_npy_path_as(path, max_elems, true, Some(want))
}

fn read_npy_path_as(
    path: &Path,
    max_elems: usize,
    half: bool,
    want: Option<Descr>,
) -> Result<(Vec<usize>, NpyRead)> {
    let (r, file_len) = open_npy(path, max_elems)?;
    read_npy_from_as(r, file_len, max_elems, half, want).map_err(npy_error(path))
}

/// An npy file opened for reading, and its length. The largest file that can hold
/// `max_elems` elements is refused before reading anything (a sparse 10 GiB file costs
/// nothing); the exact size is checked against the header.
fn open_npy(path: &Path, max_elems: usize) -> Result<(std::io::BufReader<std::fs::File>, u64)> {
    // (saturating: a --max-elems near 2^64 is no limit, not a wrapped-around small one)
    let cap = (max_elems as u64)
        .saturating_mul(8)
        .saturating_add(MAX_PREAMBLE + MAX_HEADER_BYTES as u64);
    let what = format!("an npy header and {max_elems} elements of at most 8 bytes");
    let (f, file_len) = fsafe::open_regular(path, cap, &what)?;
    Ok((std::io::BufReader::new(f), file_len))
}

/// What an error in reading the npy file `path` says (naming the file).
fn npy_error(path: &Path) -> impl Fn(String) -> ConfError + '_ {
    move |msg| ConfError::Npy {
        path: path.display().to_string(),
        msg,
    }
}

/// [`read_npy`] on bytes in memory (errors name the file `<bytes>`).
pub fn read_npy_bytes(bytes: &[u8], max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    read_npy_from(bytes, bytes.len() as u64, max_elems, false).map_err(|msg| ConfError::Npy {
        path: "<bytes>".into(),
        msg,
    })
}

/// [`read_npy_any`] on bytes in memory.
pub fn read_npy_bytes_any(bytes: &[u8], max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    read_npy_from(bytes, bytes.len() as u64, max_elems, true).map_err(|msg| ConfError::Npy {
        path: "<bytes>".into(),
        msg,
    })
}

/// Read npy data from `r`, which holds `file_len` bytes. Every size (header length, element
/// count, data length) is checked against `file_len` and `max_elems` before it is allocated.
fn read_npy_from(
    r: impl Read,
    file_len: u64,
    max_elems: usize,
    half: bool,
) -> std::result::Result<(Vec<usize>, NpyData), String> {
    let (shape, read) = read_npy_from_as(r, file_len, max_elems, half, None)?;
    Ok((shape, read.data()))
}

/// The preamble and header of npy data in `r`, which holds `file_len` bytes: the shape, the
/// element type and the element count, every size checked against `file_len` and `max_elems`
/// (the data that follows is exactly `n` elements of the type's width).
fn read_head(
    r: &mut impl Read,
    file_len: u64,
    max_elems: usize,
    half: bool,
) -> std::result::Result<(Vec<usize>, Descr, usize), String> {
    let mut pre = [0u8; 12];
    r.read_exact(&mut pre[..8])
        .map_err(|e| format!("not an npy file: {e}"))?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err("not an npy file: magic string \\x93NUMPY not found".into());
    }
    let (pre_len, header_len) = match (pre[6], pre[7]) {
        (1, 0) => {
            r.read_exact(&mut pre[8..10])
                .map_err(|e| format!("not an npy file: {e}"))?;
            (10, u16::from_le_bytes([pre[8], pre[9]]) as usize)
        }
        (2, 0) | (3, 0) => {
            r.read_exact(&mut pre[8..12])
                .map_err(|e| format!("not an npy file: {e}"))?;
            (
                12,
                u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as usize,
            )
        }
        (a, b) => return Err(format!("not an npy file: unsupported version {a}.{b}")),
    };
    if header_len > MAX_HEADER_BYTES || (pre_len + header_len) as u64 > file_len {
        return Err(format!(
            "truncated or malformed: header of {header_len} bytes (the file has {file_len} bytes, the limit is {MAX_HEADER_BYTES})"
        ));
    }
    let mut head = vec![0u8; header_len];
    r.read_exact(&mut head)
        .map_err(|e| format!("truncated header: {e}"))?;
    // v1 and v2 headers are latin-1, v3 UTF-8; a header numpy writes is ASCII.
    let h = parse_header(&head)?;
    let shape = &h.shape;
    let n = shape
        .iter()
        .try_fold(1u64, |n, &d| {
            n.checked_mul(d).filter(|&n| n <= max_elems as u64)
        })
        .ok_or_else(|| format!("shape {shape:?} exceeds the limit of {max_elems} elements"))?;
    let descr = match h.dtype() {
        Some(d @ (Descr::F4 | Descr::F8)) => d,
        Some(d) if half => d,
        _ if half => {
            return Err(format!(
                "dtype '{}' is not supported (little-endian float32 '<f4', float64 '<f8', float16 '<f2' or uint16 '<u2')",
                clip(&h.descr)
            ))
        }
        _ => {
            return Err(format!(
                "dtype '{}' is not supported (little-endian float32 '<f4' or float64 '<f8')",
                clip(&h.descr)
            ))
        }
    };
    if h.fortran_order {
        return Err("Fortran order is not supported (write it C-contiguous)".into());
    }
    let width = descr.width();
    let data_len = file_len - (pre_len + header_len) as u64;
    let want = n.saturating_mul(width);
    if want > data_len {
        return Err(format!("truncated: header promises {n} elements of {width} bytes, the file has {data_len} bytes of data"));
    }
    if want < data_len {
        return Err(format!(
            "{} trailing bytes after the data (the header promises {n} elements of {width} bytes = {want} bytes, the file has {data_len} bytes of data)",
            data_len - want
        ));
    }
    let shape = shape.iter().map(|&d| d as usize).collect();
    Ok((shape, descr, n as usize))
}

/// The end of npy data: a file that grew since its size was checked must still end here.
fn check_end(r: &mut impl Read) -> std::result::Result<(), String> {
    let mut extra = [0u8; 1];
    match r.read(&mut extra) {
        Ok(0) => Ok(()),
        Ok(_) => Err("trailing bytes after the data (the file grew while being read)".into()),
        Err(e) => Err(format!("unreadable data: {e}")),
    }
}

/// [`read_npy_from`], elements of type `want` read straight into f64 ([`read_npy_any_as`]).
fn read_npy_from_as(
    mut r: impl Read,
    file_len: u64,
    max_elems: usize,
    half: bool,
    direct: Option<Descr>,
) -> std::result::Result<(Vec<usize>, NpyRead), String> {
    let (shape, descr, n) = read_head(&mut r, file_len, max_elems, half)?;
    let data = match (descr, direct == Some(descr)) {
        (Descr::F4, true) => {
            NpyRead::Values(read_elems(&mut r, n, |b| f32::from_le_bytes(b) as f64)?)
        }
        (Descr::F8, true) => NpyRead::Values(read_elems(&mut r, n, f64::from_le_bytes)?),
        (Descr::F2, true) => {
            NpyRead::Values(read_elems(&mut r, n, |b| f16::from_le_bytes(b).to_f64())?)
        }
        (Descr::U2, true) => NpyRead::Values(read_elems(&mut r, n, |b| {
            f32::from_bits((u16::from_le_bytes(b) as u32) << 16) as f64
        })?),
        (Descr::F4, _) => NpyRead::Data(NpyData::F32(read_le(&mut r, n, f32::from_le_bytes)?)),
        (Descr::F8, _) => NpyRead::Data(NpyData::F64(read_le(&mut r, n, f64::from_le_bytes)?)),
        (Descr::F2, _) => NpyRead::Data(NpyData::F16(read_elems(&mut r, n, f16::from_le_bytes)?)),
        (Descr::U2, _) => NpyRead::Data(NpyData::U16(read_elems(&mut r, n, u16::from_le_bytes)?)),
    };
    check_end(&mut r)?;
    Ok((shape, data))
}

/// Pieces of [`visit_npy_any`].
const VISIT_PIECE: usize = 8192;

/// [`read_npy_any`]'s checks and errors, without holding the array: the elements are handed
/// to `visit(first, piece)` in order, pieces of at most 8192 in their stored type (`first`:
/// the index of the piece's first element). Returns the shape and the element count.
pub fn visit_npy_any(
    path: &Path,
    max_elems: usize,
    mut visit: impl FnMut(usize, &NpyData),
) -> Result<(Vec<usize>, usize)> {
    let (mut r, file_len) = open_npy(path, max_elems)?;
    let mut go = || -> std::result::Result<(Vec<usize>, usize), String> {
        let (shape, descr, n) = read_head(&mut r, file_len, max_elems, true)?;
        let mut at = 0;
        while at < n {
            let k = (n - at).min(VISIT_PIECE);
            let piece = match descr {
                Descr::F4 => NpyData::F32(read_elems(&mut r, k, f32::from_le_bytes)?),
                Descr::F8 => NpyData::F64(read_elems(&mut r, k, f64::from_le_bytes)?),
                Descr::F2 => NpyData::F16(read_elems(&mut r, k, f16::from_le_bytes)?),
                Descr::U2 => NpyData::U16(read_elems(&mut r, k, u16::from_le_bytes)?),
            };
            visit(at, &piece);
            at += k;
        }
        check_end(&mut r)?;
        Ok((shape, n))
    };
    go().map_err(npy_error(path))
}

/// `n` little-endian elements of `W` bytes each, read in chunks.
/// [`read_elems`] of a plain float type stored little-endian: on a little-endian machine read
/// straight into the vector's memory (no second copy), else converted piece by piece.
fn read_le<T: bytemuck::Pod, const W: usize>(
    r: &mut impl Read,
    n: usize,
    conv: impl Fn([u8; W]) -> T,
) -> std::result::Result<Vec<T>, String> {
    if cfg!(target_endian = "big") {
        return read_elems(r, n, conv);
    }
    let mut out = crate::mem::zeroed_vec::<T>(n);
    r.read_exact(bytemuck::cast_slice_mut(&mut out))
        .map_err(|e| format!("truncated or unreadable data: {e}"))?;
    Ok(out)
}

fn read_elems<T, const W: usize>(
    r: &mut impl Read,
    n: usize,
    conv: impl Fn([u8; W]) -> T,
) -> std::result::Result<Vec<T>, String> {
    let mut out = crate::mem::vec_with_capacity(n);
    let mut buf = vec![0u8; W * 8192];
    let mut left = n;
    while left > 0 {
        let k = left.min(8192);
        let b = &mut buf[..k * W];
        r.read_exact(b)
            .map_err(|e| format!("truncated or unreadable data: {e}"))?;
        out.extend(
            b.chunks_exact(W)
                .map(|c| conv(c.try_into().expect("chunk of W bytes"))),
        );
        left -= k;
    }
    Ok(out)
}

/// Parse the header text (the dict literal and its padding).
pub fn parse_header(text: &[u8]) -> std::result::Result<NpyHeader, String> {
    parse_header_counted(text).0
}

/// [`parse_header`], also returning the number of byte inspections the parser made: at most
/// a small constant times the header's length (the parser is single-pass). For tests that the
/// parse is linear by construction.
#[doc(hidden)]
pub fn parse_header_counted(text: &[u8]) -> (std::result::Result<NpyHeader, String>, u64) {
    let mut p = HeaderParser {
        b: text,
        i: 0,
        steps: 0,
    };
    let r = p.dict();
    (r, p.steps)
}

/// The header parser: a cursor over the bytes. Every method either consumes the bytes it
/// inspects or returns; nothing is re-read, nothing recurses.
struct HeaderParser<'a> {
    b: &'a [u8],
    i: usize,
    steps: u64,
}

/// Most dimensions of a shape (numpy's `NPY_MAXDIMS`).
const MAX_DIMS: usize = 64;

const KEYS: &str = "'descr', 'fortran_order' and 'shape'";

impl HeaderParser<'_> {
    fn peek(&mut self) -> Option<u8> {
        self.steps += 1;
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c') = self.peek() {
            self.i += 1;
        }
    }

    /// What is at the cursor, for messages.
    fn found(&mut self) -> String {
        match self.peek() {
            None => "the end of the header".into(),
            Some(c) if c.is_ascii_graphic() || c == b' ' => {
                format!("'{}' at byte {}", c as char, self.i)
            }
            Some(c) => format!("byte 0x{c:02x} at byte {}", self.i),
        }
    }

    fn err<T>(&mut self, what: &str) -> std::result::Result<T, String> {
        let found = self.found();
        Err(format!("malformed header: {what}, found {found}"))
    }

    /// A quoted string (`'...'` or `"..."`) of printable ASCII without escapes.
    fn string(&mut self, what: &str) -> std::result::Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return self.err(&format!("expected {what} (a quoted string)")),
        };
        self.i += 1;
        let start = self.i;
        loop {
            match self.peek() {
                Some(c) if c == q => break,
                Some(b'\\') => {
                    return self.err(&format!("{what}: escapes are not supported in a string"))
                }
                Some(c) if c == b' ' || c.is_ascii_graphic() => self.i += 1,
                _ => return self.err(&format!("{what}: unterminated string")),
            }
        }
        let s = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
        self.i += 1;
        Ok(s)
    }

    /// `True` or `False`.
    fn boolean(&mut self) -> std::result::Result<bool, String> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.peek() == Some(word[0]) {
                for &w in word {
                    if self.peek() != Some(w) {
                        return self.err("'fortran_order' must be True or False");
                    }
                    self.i += 1;
                }
                return Ok(v);
            }
        }
        self.err("'fortran_order' must be True or False")
    }

    /// A non-negative decimal integer without leading zeros (as Python writes it).
    fn dim(&mut self) -> std::result::Result<u64, String> {
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            if self.i > start && self.b[start] == b'0' {
                return self.err("'shape': a dimension has a leading zero");
            }
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add((c - b'0') as u64))
                .ok_or_else(|| {
                    format!(
                        "malformed header: 'shape': a dimension at byte {start} overflows 64 bits"
                    )
                })?;
            self.i += 1;
        }
        if self.i == start {
            return self.err("'shape' must be a tuple of non-negative integers");
        }
        Ok(v)
    }

    /// `(d, d, ...)` with optional trailing comma; `()`; `(d,)`. A one-element tuple needs
    /// its comma, as in Python (`(6)` is the integer 6).
    fn shape(&mut self) -> std::result::Result<Vec<u64>, String> {
        if self.peek() != Some(b'(') {
            return self.err("'shape' must be a tuple of non-negative integers");
        }
        self.i += 1;
        let mut dims = Vec::new();
        let mut comma = false;
        loop {
            self.ws();
            if self.peek() == Some(b')') {
                self.i += 1;
                break;
            }
            if dims.len() == MAX_DIMS {
                return Err(format!(
                    "malformed header: 'shape' has more than {MAX_DIMS} dimensions (numpy's limit)"
                ));
            }
            dims.push(self.dim()?);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    comma = true;
                }
                Some(b')') => {
                    self.i += 1;
                    if dims.len() == 1 && !comma {
                        return Err(format!(
                            "malformed header: 'shape' ({}) is not a tuple: write ({},)",
                            dims[0], dims[0]
                        ));
                    }
                    break;
                }
                _ => return self.err("'shape': expected ',' or ')' after a dimension"),
            }
        }
        Ok(dims)
    }

    fn dict(&mut self) -> std::result::Result<NpyHeader, String> {
        self.ws();
        if self.peek() != Some(b'{') {
            return self.err("expected the header dict '{'");
        }
        self.i += 1;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        loop {
            self.ws();
            if self.peek() == Some(b'}') {
                self.i += 1;
                break;
            }
            let key = self.string("a key")?;
            self.ws();
            if self.peek() != Some(b':') {
                return self.err(&format!("expected ':' after '{}'", clip(&key)));
            }
            self.i += 1;
            self.ws();
            match key.as_str() {
                "descr" if descr.is_none() => descr = Some(self.string("'descr'")?),
                "fortran_order" if fortran.is_none() => fortran = Some(self.boolean()?),
                "shape" if shape.is_none() => shape = Some(self.shape()?),
                "descr" | "fortran_order" | "shape" => {
                    return Err(format!("malformed header: key '{key}' given twice"))
                }
                other => {
                    return Err(format!(
                        "malformed header: unknown key '{}' (an npy header has {KEYS})",
                        clip(other)
                    ))
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                _ => return self.err(&format!("expected ',' or '}}' after '{key}'")),
            }
        }
        // Padding: spaces and the final newline (numpy writes `\n`; tolerate any whitespace).
        self.ws();
        if self.peek().is_some() {
            return self.err("only padding may follow the header dict");
        }
        let missing =
            |k: &str| format!("malformed header: key '{k}' missing (an npy header has {KEYS})");
        Ok(NpyHeader {
            descr: descr.ok_or_else(|| missing("descr"))?,
            fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?,
            shape: shape.ok_or_else(|| missing("shape"))?,
        })
    }
}

/// A string cut for a message (a 60 KiB key is not echoed whole).
fn clip(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_string()
    } else {
        format!(
            "{}... ({} bytes)",
            s.chars().take(40).collect::<String>(),
            s.len()
        )
    }
}

/// The header bytes numpy (and npyz) write for `descr` and `shape`: version 1.0 (2.0 for a
/// header over 64 KiB), `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, ), }`,
/// padded with spaces and a newline so that the data starts at a multiple of 64 bytes.
pub fn header_bytes(descr: Descr, shape: &[u64]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': (",
        descr.type_str()
    );
    for d in shape {
        dict.push_str(&format!("{d}, "));
    }
    dict.push_str("), }");
    let pad = |pre: usize, dict: &str| 64 - 1 - ((dict.len() + pre) % 64);
    let (version, pre) = if dict.len() + pad(10, &dict) < 0xffff {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let mut text = dict.clone().into_bytes();
    text.extend(std::iter::repeat_n(b' ', pad(pre, &dict)));
    text.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((text.len() as u16).to_le_bytes());
    } else {
        out.extend((text.len() as u32).to_le_bytes());
    }
    out.extend(text);
    out
}

/// Write an npy file atomically (temp file + rename).
pub fn write_npy(path: &Path, shape: &[usize], data: &NpyData) -> Result<()> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    write_atomic(path, |w| {
        w.write_all(&header_bytes(data.descr(), &shape))?;
        match data {
            NpyData::F32(v) => write_elems(w, v, |x| x.to_le_bytes()),
            NpyData::F64(v) => write_elems(w, v, |x| x.to_le_bytes()),
            NpyData::F16(v) => write_elems(w, v, |x| x.to_le_bytes()),
            NpyData::U16(v) => write_elems(w, v, |x| x.to_le_bytes()),
        }
    })
}

fn write_elems<T: Copy, const W: usize>(
    w: &mut dyn Write,
    v: &[T],
    conv: impl Fn(T) -> [u8; W],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(W * 8192);
    for chunk in v.chunks(8192) {
        buf.clear();
        for &x in chunk {
            buf.extend_from_slice(&conv(x));
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `visit_npy_any` hands over exactly what `read_npy_any` reads, in pieces of at most
    /// 8192 in order, and fails where it fails with the same error: a truncated file, trailing
    /// bytes, a bad magic string, a header over the limit of elements, an unsupported dtype.
    #[test]
    fn visiting_a_file_is_reading_it_a_piece_at_a_time() {
        let dir = std::env::temp_dir().join(format!("bnconf-visit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = 3 * VISIT_PIECE + 17;
        let datas = [
            NpyData::F32((0..n).map(|i| i as f32 * 0.25 - 7.0).collect()),
            NpyData::F64((0..n).map(|i| (i as f64).sqrt()).collect()),
            NpyData::F16((0..100).map(|i| half::f16::from_f64(i as f64)).collect()),
            NpyData::U16((0..VISIT_PIECE as u16).collect()),
        ];
        for (k, d) in datas.iter().enumerate() {
            let path = dir.join(format!("a{k}.npy"));
            write_npy(&path, &[d.len()], d).unwrap();
            let (shape, whole) = read_npy_any(&path, d.len()).unwrap();
            let mut seen = vec![];
            let mut firsts = vec![];
            let (vshape, count) = visit_npy_any(&path, d.len(), |at, piece| {
                assert!(piece.len() <= VISIT_PIECE && piece.dtype_name() == d.dtype_name());
                firsts.push(at);
                seen.extend((0..piece.len()).map(|i| piece.bf16_value(i).to_bits()));
            })
            .unwrap();
            assert_eq!((vshape, count), (shape, d.len()));
            let want: Vec<u64> = (0..whole.len())
                .map(|i| whole.bf16_value(i).to_bits())
                .collect();
            assert_eq!(seen, want, "{}", d.dtype_name());
            let expect_firsts: Vec<usize> = (0..d.len()).step_by(VISIT_PIECE).collect();
            assert_eq!(firsts, expect_firsts);
            // Over the limit: the same refusal.
            let (a, b) = (
                read_npy_any(&path, d.len() - 1).unwrap_err().to_string(),
                visit_npy_any(&path, d.len() - 1, |_, _| {})
                    .unwrap_err()
                    .to_string(),
            );
            assert_eq!(a, b);
        }
        let good = dir.join("a0.npy");
        let bytes = std::fs::read(&good).unwrap();
        let variants: Vec<Vec<u8>> = vec![
            bytes[..bytes.len() - 3].to_vec(),
            [bytes.clone(), vec![0u8; 4]].concat(),
            [b"\x93NUMPZ".to_vec(), bytes[6..].to_vec()].concat(),
            bytes[..5].to_vec(),
        ];
        for (k, v) in variants.iter().enumerate() {
            let path = dir.join(format!("bad{k}.npy"));
            std::fs::write(&path, v).unwrap();
            let a = read_npy_any(&path, n).unwrap_err().to_string();
            let b = visit_npy_any(&path, n, |_, _| {}).unwrap_err().to_string();
            assert_eq!(a, b, "variant {k}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The whole-array conversions are the element ones, bit for bit, in every variant (with
    /// zeros of both signs, subnormals, infinities and NaN).
    #[test]
    fn whole_array_conversions_are_the_element_ones() {
        let f = [
            0.0,
            -0.0,
            1.5,
            -3.25e-310,
            6.0e-8,
            1e300,
            f64::INFINITY,
            f64::NAN,
        ];
        let all = [
            NpyData::F64(f.to_vec()),
            NpyData::F32(f.iter().map(|&v| v as f32).collect()),
            NpyData::F16(f.iter().map(|&v| half::f16::from_f64(v)).collect()),
            NpyData::U16(vec![0, 0x8000, 0x3fc0, 0x0001, 0x7f80, 0xffc1, 65535, 17]),
        ];
        for d in &all {
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            let each: Vec<f64> = (0..d.len()).map(|i| d.get(i)).collect();
            let each16: Vec<f64> = (0..d.len()).map(|i| d.bf16_value(i)).collect();
            assert_eq!(bits(d.to_f64s()), bits(each), "{}", d.dtype_name());
            assert_eq!(bits(d.bf16_values()), bits(each16), "{}", d.dtype_name());
        }
    }

    fn npyz_bytes<T: npyz::AutoSerialize + Copy>(shape: &[u64], v: &[T]) -> Vec<u8> {
        use npyz::WriterBuilder;
        let mut out = Vec::new();
        {
            let mut wr = npyz::WriteOptions::new()
                .default_dtype()
                .shape(shape)
                .writer(&mut out)
                .begin_nd()
                .unwrap();
            wr.extend(v.iter().copied()).unwrap();
            wr.finish().unwrap();
        }
        out
    }

    fn ours(shape: &[u64], data: &NpyData) -> Vec<u8> {
        let mut out = header_bytes(data.descr(), shape);
        match data {
            NpyData::F32(v) => write_elems(&mut out, v, |x| x.to_le_bytes()).unwrap(),
            NpyData::F64(v) => write_elems(&mut out, v, |x| x.to_le_bytes()).unwrap(),
            NpyData::F16(v) => write_elems(&mut out, v, |x| x.to_le_bytes()).unwrap(),
            NpyData::U16(v) => write_elems(&mut out, v, |x| x.to_le_bytes()).unwrap(),
        }
        out
    }

    #[test]
    fn writes_the_bytes_npyz_writes() {
        for shape in [vec![], vec![6], vec![2, 3], vec![1, 2, 3, 1], vec![0, 4]] {
            let n: u64 = shape.iter().product();
            let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
            let d: Vec<f64> = f.iter().map(|&x| x as f64 / 3.0).collect();
            let u: Vec<u16> = (0..n).map(|i| i as u16 * 977).collect();
            assert_eq!(
                ours(&shape, &NpyData::F32(f.clone())),
                npyz_bytes(&shape, &f)
            );
            assert_eq!(
                ours(&shape, &NpyData::F64(d.clone())),
                npyz_bytes(&shape, &d)
            );
            assert_eq!(
                ours(&shape, &NpyData::U16(u.clone())),
                npyz_bytes(&shape, &u)
            );
        }
    }

    #[test]
    fn round_trips_every_dtype() {
        let shape = [2u64, 3];
        let datas = [
            NpyData::F32(vec![0.5, -1.0, 3.25, f32::MIN_POSITIVE, 1e30, -0.0]),
            NpyData::F64(vec![0.1, -1.0, 3.25, f64::MIN_POSITIVE, 1e300, -0.0]),
            NpyData::F16((0..6).map(|i| f16::from_f32(i as f32 - 2.5)).collect()),
            NpyData::U16(vec![0x3f80, 0xbf80, 0x4049, 0x0001, 0x7f7f, 0x8000]),
        ];
        for d in datas {
            let b = ours(&shape, &d);
            let (sh, back) = read_npy_bytes_any(&b, 6).unwrap();
            assert_eq!(sh, vec![2, 3]);
            assert_eq!(back, d);
            let strict = read_npy_bytes(&b, 6);
            assert_eq!(
                strict.is_ok(),
                matches!(d, NpyData::F32(_) | NpyData::F64(_)),
                "{strict:?}"
            );
        }
    }

    #[test]
    fn f16_and_bf16_values_are_exact() {
        let h = NpyData::F16(vec![f16::from_bits(0x3c01), f16::from_bits(0x0001)]);
        assert_eq!(h.get(0), 1.0 + 2f64.powi(-10));
        assert_eq!(h.get(1), 2f64.powi(-24));
        let b = NpyData::U16(vec![0x3f80, 0xc049, 0x0001]);
        assert_eq!(b.get(0), 16256.0);
        assert_eq!(b.bf16_value(0), 1.0);
        assert_eq!(b.bf16_value(1), -3.140625);
        assert_eq!(b.bf16_value(2), f32::from_bits(0x0001_0000) as f64);
    }

    #[test]
    fn headers_numpy_writes_are_accepted() {
        for (text, shape) in [
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                vec![2, 3],
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }",
                vec![6],
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                vec![],
            ),
            (
                "{'descr':'<f8','fortran_order':False,'shape':(2,3)}",
                vec![2, 3],
            ),
            (
                "{\"shape\": (2, 3, ), \"descr\": \"<f8\", \"fortran_order\": False}   \n",
                vec![2, 3],
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 10), }",
                vec![0, 10],
            ),
        ] {
            let h = parse_header(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(h.shape, shape, "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_naming_the_key() {
        for (text, needle) in [
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }",
                "write (6,)",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }",
                "'shape'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }",
                "'shape'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }",
                "'fortran_order'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3), }",
                "after 'fortran_order'",
            ),
            (
                "{'descr': {'descr': '<f4'}, 'fortran_order': False, 'shape': (2,), }",
                "'descr'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
                "unknown key 'x'",
            ),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                "twice",
            ),
            (
                "{'descr': '<f4', 'shape': (2, 3)}",
                "'fortran_order' missing",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)",
                "after 'shape'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x",
                "padding",
            ),
            (
                "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}",
                "escapes",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3)}",
                "leading zero",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                "overflows",
            ),
            ("", "the end of the header"),
        ] {
            let e = parse_header(text.as_bytes()).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn parsing_is_linear_by_construction() {
        let nested = |depth: usize| {
            format!(
                "{{'descr': {}'<f4'{}, 'fortran_order': False, 'shape': (2, 3), }}",
                "{'a': ".repeat(depth),
                "}".repeat(depth)
            )
        };
        let long_key = format!("{{'{}': 1}}", "k".repeat(60_000));
        let long_val = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': (2,)}}",
            "f".repeat(60_000)
        );
        let many_dims = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
            "1, ".repeat(20_000)
        );
        let spaces = format!("{{{}}}", " ".repeat(65_000));
        for text in [
            nested(15),
            nested(1000),
            long_key,
            long_val,
            many_dims,
            spaces,
        ] {
            let (_, steps) = parse_header_counted(text.as_bytes());
            assert!(
                steps <= 3 * text.len() as u64 + 16,
                "{} steps for {} bytes",
                steps,
                text.len()
            );
        }
    }

    #[test]
    fn sizes_are_checked_before_allocating() {
        let mut b = header_bytes(Descr::F4, &[1 << 40]);
        b.extend([0u8; 8]);
        assert!(read_npy_bytes(&b, 1 << 27)
            .unwrap_err()
            .to_string()
            .contains("exceeds the limit"));
        let mut b = header_bytes(Descr::F4, &[u64::MAX, 2]);
        b.extend([0u8; 8]);
        assert!(read_npy_bytes(&b, usize::MAX).is_err());
        let mut b = header_bytes(Descr::F8, &[1 << 62]);
        b.extend([0u8; 8]);
        let e = read_npy_bytes(&b, usize::MAX).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        let b = ours(&[65], &NpyData::F32(vec![0.0; 65]));
        assert!(read_npy_bytes(&b, 100).is_ok());
        let mut b = header_bytes(Descr::F4, &[1; 65]);
        b.extend([0u8; 4]);
        let e = read_npy_bytes(&b, 100).unwrap_err().to_string();
        assert!(e.contains("more than 64 dimensions"), "{e}");
        let mut b = ours(&[2], &NpyData::F32(vec![1.0, 2.0]));
        let at = b.windows(3).position(|w| w == b"<f4").unwrap();
        b[at + 1] = b'i';
        let e = read_npy_bytes(&b, 2).unwrap_err().to_string();
        assert!(
            e.contains(
                "dtype '<i4' is not supported (little-endian float32 '<f4' or float64 '<f8')"
            ),
            "{e}"
        );
        let e = read_npy_bytes_any(&b, 2).unwrap_err().to_string();
        assert!(e.contains("float16 '<f2' or uint16 '<u2'"), "{e}");
        let mut b = ours(&[2], &NpyData::F32(vec![1.0, 2.0]));
        b.extend([0u8; 3]);
        let e = read_npy_bytes(&b, 2).unwrap_err().to_string();
        assert!(e.contains("3 trailing bytes"), "{e}");
    }
}
