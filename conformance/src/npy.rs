//! npy files (little-endian float32 / float64, C order), through the `npyz` crate.
//! Sizes are checked from the header before any data is allocated.

use crate::atomic::write_atomic;
use crate::error::{ConfError, Result};
use npyz::WriterBuilder;
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

/// Read an npy file of float32 or float64 with at most `max_elems` elements.
pub fn read_npy(path: &Path, max_elems: usize) -> Result<(Vec<usize>, NpyData)> {
    let bad = |msg: String| ConfError::Npy {
        path: path.display().to_string(),
        msg,
    };
    let f = std::fs::File::open(path).map_err(|e| ConfError::io(path, e))?;
    let file_len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let npy = npyz::NpyFile::new(std::io::BufReader::new(f))
        .map_err(|e| bad(format!("not an npy file: {e}")))?;
    if npy.order() != npyz::Order::C {
        return Err(bad(
            "Fortran order is not supported (write it C-contiguous)".into(),
        ));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let mut n: u64 = 1;
    for &d in npy.shape() {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= max_elems as u64)
            .ok_or_else(|| {
                bad(format!(
                    "shape {shape:?} exceeds the limit of {max_elems} elements"
                ))
            })?;
    }
    let descr = npy.dtype().descr();
    let width = match descr.as_str() {
        "'<f4'" => 4,
        "'<f8'" => 8,
        other => {
            return Err(bad(format!(
                "dtype {other} is not supported (little-endian float32 '<f4' or float64 '<f8')"
            )))
        }
    };
    if n * width > file_len {
        return Err(bad(format!("truncated: header promises {n} elements of {width} bytes, the file has {file_len} bytes")));
    }
    let data = if width == 4 {
        NpyData::F32(
            npy.into_vec::<f32>()
                .map_err(|e| bad(format!("truncated or unreadable data: {e}")))?,
        )
    } else {
        NpyData::F64(
            npy.into_vec::<f64>()
                .map_err(|e| bad(format!("truncated or unreadable data: {e}")))?,
        )
    };
    if data.len() as u64 != n {
        return Err(bad(format!("expected {n} elements, read {}", data.len())));
    }
    Ok((shape, data))
}

/// Write an npy file atomically.
pub fn write_npy(path: &Path, shape: &[usize], data: &NpyData) -> Result<()> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    write_atomic(path, |w| match data {
        NpyData::F32(v) => {
            let mut wr = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            wr.extend(v.iter().copied())?;
            wr.finish()
        }
        NpyData::F64(v) => {
            let mut wr = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            wr.extend(v.iter().copied())?;
            wr.finish()
        }
    })
}
