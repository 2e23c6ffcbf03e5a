//! The one error type of the harness library. Every variant names the file or field at fault.

use thiserror::Error;

/// Why the harness could not do what it was asked.
#[derive(Debug, Error)]
pub enum ConfError {
    /// A file could not be read or written.
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },
    /// A file is not valid JSON (or not the expected JSON document).
    #[error("{path}: invalid JSON: {msg}")]
    Json { path: String, msg: String },
    /// A field of a case, golden or report file is missing or wrong.
    #[error("{field}: {msg}")]
    Field { field: String, msg: String },
    /// An npy file is malformed, truncated, of the wrong dtype or shape.
    #[error("{path}: {msg}")]
    Npy { path: String, msg: String },
    /// The exact reference refused the problem (names the field or constraint).
    #[error("{0}")]
    Spec(#[from] bnconf_spec::SpecError),
}

impl ConfError {
    /// A field error.
    pub fn field(field: impl Into<String>, msg: impl Into<String>) -> Self {
        ConfError::Field {
            field: field.into(),
            msg: msg.into(),
        }
    }
    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        ConfError::Io {
            path: path.display().to_string(),
            msg: e.to_string(),
        }
    }
}

/// Result with [`ConfError`].
pub type Result<T> = std::result::Result<T, ConfError>;
