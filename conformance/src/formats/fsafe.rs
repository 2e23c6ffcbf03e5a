//! Reading input files safely: only regular files are read (a FIFO, socket, device or
//! directory is refused, naming the path and its kind, without blocking on it), and a file's
//! size is checked against a limit before anything is read, then enforced while reading (a
//! file that grows after the check cannot exceed it). docs/HOSTILE.md lists the probes.
//!
//! The file type is checked with `metadata` (which follows symlinks: a symlink to a regular
//! file is read, one to `/dev/zero` is refused) *before* opening, because a plain `open` of a
//! FIFO blocks until a writer appears. The file is then opened with `O_NONBLOCK` (an open that
//! cannot block) and checked again on the handle (`fstat`), which closes the race of a path
//! replaced between the check and the open.

use crate::error::{ConfError, Result};
use std::fs::{File, FileType};
use std::io::Read;
use std::path::Path;

/// Largest `manifest.json`, `case.json`, `out/unsupported` or expectations file read (the
/// default suite's manifest is about 60 KB); only regular files are read (docs/HOSTILE.md).
pub const MAX_META_BYTES: u64 = 64 << 20;

/// `O_NONBLOCK` of the platform's `open(2)` (0 where unknown: the type check before opening
/// still applies, only the race with a path swapped for a FIFO is left open there).
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(any(
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))
))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
))]
const O_NONBLOCK: i32 = 0x0004;
#[cfg(not(any(
    all(
        any(target_os = "linux", target_os = "android"),
        not(any(
            target_arch = "mips",
            target_arch = "mips64",
            target_arch = "sparc",
            target_arch = "sparc64"
        ))
    ),
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
)))]
const O_NONBLOCK: i32 = 0;

/// What kind of file a non-regular file is, in words ("a FIFO (named pipe)", ...).
pub fn kind_of(ft: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// The error for a path that is not a regular file.
fn not_regular(path: &Path, ft: &FileType) -> ConfError {
    ConfError::io(
        path,
        format!("is {}, not a regular file: refused", kind_of(ft)),
    )
}

/// The error for a file over its size limit. `limit_name` (e.g. `--max-file-bytes`) is
/// named when not empty.
fn too_big(path: &Path, len: u64, max_bytes: u64, limit_name: &str) -> ConfError {
    let named = if limit_name.is_empty() {
        String::new()
    } else {
        format!(" ({limit_name})")
    };
    ConfError::io(
        path,
        format!("file of {len} bytes exceeds the limit of {max_bytes} bytes{named}"),
    )
}

/// Open `path` for reading if it is a regular file (symlinks followed) of at most
/// `max_bytes` bytes. Returns the open file and its length. Never blocks: a FIFO, socket,
/// device or directory is refused with an error naming the path and its kind.
pub fn open_regular(path: &Path, max_bytes: u64, limit_name: &str) -> Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| ConfError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta.file_type()));
    }
    if meta.len() > max_bytes {
        return Err(too_big(path, meta.len(), max_bytes, limit_name));
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(O_NONBLOCK);
    }
    let f = opts.open(path).map_err(|e| ConfError::io(path, e))?;
    // The path may have been replaced between the check and the open: check the handle.
    let meta = f.metadata().map_err(|e| ConfError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta.file_type()));
    }
    if meta.len() > max_bytes {
        return Err(too_big(path, meta.len(), max_bytes, limit_name));
    }
    Ok((f, meta.len()))
}

/// Read all of `r` (a file of `len` bytes when checked), at most `max_bytes`: a file that grew
/// past the limit since it was checked is an error, not a longer read.
pub fn read_bounded(
    path: &Path,
    r: impl Read,
    len: u64,
    max_bytes: u64,
    limit_name: &str,
) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len.min(max_bytes) as usize);
    r.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| ConfError::io(path, e))?;
    if buf.len() as u64 > max_bytes {
        return Err(ConfError::io(
            path,
            format!(
                "file grew past the limit of {max_bytes} bytes{} while being read",
                if limit_name.is_empty() {
                    String::new()
                } else {
                    format!(" ({limit_name})")
                }
            ),
        ));
    }
    Ok(buf)
}

/// The bytes of a regular file of at most `max_bytes` bytes (see [`open_regular`]).
pub fn read_regular(path: &Path, max_bytes: u64, limit_name: &str) -> Result<Vec<u8>> {
    let (f, len) = open_regular(path, max_bytes, limit_name)?;
    read_bounded(path, f, len, max_bytes, limit_name)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_string(path: &Path, max_bytes: u64, limit_name: &str) -> Result<String> {
    let bytes = read_regular(path, max_bytes, limit_name)?;
    String::from_utf8(bytes).map_err(|_| ConfError::io(path, "stream did not contain valid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bnconf-fsafe-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn regular_files_within_the_limit_are_read() {
        let d = scratch("regular");
        let p = d.join("a.txt");
        std::fs::write(&p, b"hello").unwrap();
        assert_eq!(read_regular(&p, 5, "").unwrap(), b"hello");
        let e = read_regular(&p, 4, "--max-file-bytes")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.txt") && e.contains("5 bytes") && e.contains("--max-file-bytes"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn directories_and_devices_are_refused_by_kind() {
        let d = scratch("kinds");
        let e = read_regular(&d, 1 << 20, "").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        #[cfg(unix)]
        {
            let e = read_regular(Path::new("/dev/zero"), 1 << 20, "")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("/dev/zero") && e.contains("character device"),
                "{e}"
            );
            let link = d.join("zero-link");
            std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
            let e = read_regular(&link, 1 << 20, "").unwrap_err().to_string();
            assert!(
                e.contains("zero-link") && e.contains("character device"),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_that_grew_is_cut_at_the_limit() {
        let bytes = [7u8; 100];
        let e = read_bounded(Path::new("grown"), &bytes[..], 10, 10, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("grew past the limit of 10 bytes"), "{e}");
        assert_eq!(
            read_bounded(Path::new("ok"), &bytes[..], 100, 100, "")
                .unwrap()
                .len(),
            100
        );
    }
}
