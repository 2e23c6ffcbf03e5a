//! npy files (little-endian float32 / float64, C order), through the `npyz` crate.
//! Sizes are checked from the header before any data is allocated.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_atomic;
use npyz::WriterBuilder;
use std::io::Read;
use std::path::Path;

/// The data of an npy file.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    /// `<f4`
    F32(Vec<f32>),
    /// `<f8`
    F64(Vec<f64>),
}

impl NpyData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
        }
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i` as f64 (exact: f32 ⊂ f64).
    pub fn get(&self, i: usize) -> f64 {
        match self {
            NpyData::F32(v) => v[i] as f64,
            NpyData::F64(v) => v[i],
        }
    }
}

/// Longest npy header accepted, in bytes (numpy itself refuses headers over 10000 bytes by
/// default); checked before the header is allocated.
pub const MAX_HEADER_BYTES: usize = 1 << 16;
/// Deepest nesting of brackets accepted in an npy header (a real header nests 2 deep); the
/// header's Python-literal parser is recursive.
const MAX_HEADER_DEPTH: usize = 16;

/// Read an npy file of float32 or float64 with at most `max_elems` elements.
pub fn read_npy(path: &Path, max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    let f = std::fs::File::open(path).map_err(|e| ConfError::io(path, e))?;
    let file_len = f.metadata().map(|m| m.len()).unwrap_or(0);
    read_npy_from(std::io::BufReader::new(f), file_len, max_elems).map_err(|msg| ConfError::Npy {
        path: path.display().to_string(),
        msg,
    })
}

/// [`read_npy`] on bytes in memory (errors name the file `<bytes>`).
pub fn read_npy_bytes(bytes: &[u8], max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    read_npy_from(bytes, bytes.len() as u64, max_elems).map_err(|msg| ConfError::Npy {
        path: "<bytes>".into(),
        msg,
    })
}

/// Read npy data from `r`, which holds `file_len` bytes. Every size (header length, element
/// count) is checked against `file_len` and `max_elems` before anything is allocated.
fn read_npy_from(
    mut r: impl Read,
    file_len: u64,
    max_elems: usize,
) -> std::result::Result<(Vec<usize>, NpyData), String> {
    // The pre-header (magic, version, header length), read here so that the header length
    // is bounded before npyz allocates it.
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
    let mut head = pre[..pre_len].to_vec();
    head.resize(pre_len + header_len, 0);
    r.read_exact(&mut head[pre_len..])
        .map_err(|e| format!("truncated header: {e}"))?;
    let mut depth = 0usize;
    for &b in &head[pre_len..] {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_HEADER_DEPTH {
            return Err(format!(
                "not an npy file: header nests deeper than {MAX_HEADER_DEPTH}"
            ));
        }
    }
    // npyz multiplies the header's dimensions unchecked (a panic with overflow checks):
    // bound them here first, and refuse structured / subarray dtypes (whose dimensions it
    // multiplies in) before it sees them.
    let text = String::from_utf8_lossy(&head[pre_len..]);
    header_value(&text, "descr")
        .filter(|d| d.starts_with(['\'', '"']))
        .ok_or("dtype: 'descr' must be a plain type string ('<f4' or '<f8')")?;
    let dims = header_value(&text, "shape")
        .and_then(parse_shape)
        .ok_or("malformed header: 'shape' must be a tuple of non-negative integers")?;
    dims.iter()
        .try_fold(1u64, |n, &d| {
            n.checked_mul(d).filter(|&n| n <= max_elems as u64)
        })
        .ok_or_else(|| format!("shape {dims:?} exceeds the limit of {max_elems} elements"))?;
    let npy = npyz::NpyFile::new(std::io::Cursor::new(head).chain(r))
        .map_err(|e| format!("not an npy file: {e}"))?;
    if npy.order() != npyz::Order::C {
        return Err("Fortran order is not supported (write it C-contiguous)".into());
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let mut n: u64 = 1;
    for &d in npy.shape() {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= max_elems as u64)
            .ok_or_else(|| format!("shape {shape:?} exceeds the limit of {max_elems} elements"))?;
    }
    let descr = npy.dtype().descr();
    let width = match descr.as_str() {
        "'<f4'" => 4,
        "'<f8'" => 8,
        other => {
            return Err(format!(
                "dtype {other} is not supported (little-endian float32 '<f4' or float64 '<f8')"
            ))
        }
    };
    let data_len = file_len.saturating_sub((pre_len + header_len) as u64);
    if n.saturating_mul(width) > data_len {
        return Err(format!("truncated: header promises {n} elements of {width} bytes, the file has {data_len} bytes of data"));
    }
    let data = if width == 4 {
        NpyData::F32(
            npy.into_vec::<f32>()
                .map_err(|e| format!("truncated or unreadable data: {e}"))?,
        )
    } else {
        NpyData::F64(
            npy.into_vec::<f64>()
                .map_err(|e| format!("truncated or unreadable data: {e}"))?,
        )
    };
    if data.len() as u64 != n {
        return Err(format!("expected {n} elements, read {}", data.len()));
    }
    Ok((shape, data))
}

/// The text of the value of `key` in an npy header dict (up to the next top-level `,` or `}`).
fn header_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = [format!("'{key}'"), format!("\"{key}\"")]
        .iter()
        .find_map(|k| text.find(k.as_str()).map(|i| i + k.len()))?;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth > 0 => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim_end()),
            _ => {}
        }
    }
    None
}

/// The dimensions of a shape tuple `(2, 3)`, `(6,)`, `()` (also `[2, 3]`).
fn parse_shape(v: &str) -> Option<Vec<u64>> {
    let inner = v
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .or_else(|| v.strip_prefix('[').and_then(|t| t.strip_suffix(']')))?;
    let inner = inner.trim();
    let inner = inner.strip_suffix(',').unwrap_or(inner);
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|d| {
            let d = d.trim();
            d.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| d.parse::<u64>().ok())
                .flatten()
        })
        .collect()
}

/// Write an npy file atomically.
pub fn write_npy(path: &Path, shape: &[usize], data: &NpyData) -> Result<()> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    write_atomic(path, |w| match data {
        NpyData::F32(v) => write_typed(w, &shape, v),
        NpyData::F64(v) => write_typed(w, &shape, v),
    })
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
