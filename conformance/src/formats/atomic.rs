//! Atomic output: write to a temporary file beside the target, then rename. A failed or
//! interrupted write never leaves a partial output file.
//!
//! Every file is `fsync`ed before its rename, except in a *scratch* directory: one bnconf
//! created for itself and removes when done (`check --exec`'s and `shrink`'s
//! `bnconf-check-*` directories, registered with [`scratch_begin`]), or one named by the
//! environment variable [`SCRATCH_ENV`] (set by `--exec` for the kernel it runs, so that a
//! `bnconf kernel` child writing its outputs there does not sync them either). Files there
//! are still written atomically (a reader never sees a partial file); they are only not
//! made durable against a power loss, which a directory deleted at the end of the run never
//! needs.

use crate::error::{ConfError, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Environment variable naming a scratch directory (absolute path): files written under it
/// are not `fsync`ed. `check --exec` sets it for the kernel process when it runs the kernel
/// on a temporary directory.
pub const SCRATCH_ENV: &str = "BNCONF_SCRATCH";

static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Register `dir` (created by this process, removed by it when done) as scratch.
pub fn scratch_begin(dir: &Path) {
    SCRATCH
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(dir.to_path_buf());
}

/// Unregister `dir` (after removing it).
pub fn scratch_end(dir: &Path) {
    SCRATCH
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|d| d != dir);
}

/// Whether `path` lies in a scratch directory: one registered by [`scratch_begin`], or the
/// absolute directory named by [`SCRATCH_ENV`].
pub fn is_scratch(path: &Path) -> bool {
    if SCRATCH
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|d| path.starts_with(d))
    {
        return true;
    }
    static ENV: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        std::env::var_os(SCRATCH_ENV)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    })
    .as_deref()
    .is_some_and(|d| path.starts_with(d))
}

fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Refuse an output `path` whose directory `dir` (or the nearest existing ancestor of it) is
/// not a directory (`-o file/sub.json`), naming both, before anything is created.
fn check_dir_chain(path: &Path, dir: &Path) -> Result<()> {
    for anc in dir.ancestors() {
        if anc.as_os_str().is_empty() {
            break;
        }
        if let Ok(meta) = std::fs::metadata(anc) {
            if meta.is_dir() {
                return Ok(());
            }
            return Err(ConfError::io(
                path,
                format!(
                    "cannot write here: {} is {}, not a directory",
                    anc.display(),
                    crate::formats::fsafe::kind_of(&meta.file_type())
                ),
            ));
        }
    }
    Ok(())
}

/// A file written atomically a piece at a time: created as a temporary file beside `path`,
/// renamed onto it by [`AtomicFile::commit`] (after `fsync` unless in a scratch directory),
/// removed if dropped uncommitted (a failed or interrupted write leaves no partial file).
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<std::fs::File>,
}

impl AtomicFile {
    /// Create the temporary file of `path` (its directory must exist).
    pub fn create(path: &Path) -> Result<AtomicFile> {
        if let Some(parent) = path.parent() {
            check_dir_chain(path, parent)?;
        }
        let tmp = tmp_path(path);
        let file = std::fs::File::create(&tmp).map_err(|e| ConfError::io(path, e))?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
            file: Some(file),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut std::fs::File {
        self.file.as_mut().expect("open until committed")
    }

    /// Append `bytes`.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        let path = self.path.clone();
        self.file()
            .write_all(bytes)
            .map_err(|e| ConfError::io(&path, e))
    }

    /// Start writing the file's dirty pages to the disk without waiting for them (Linux
    /// `sync_file_range`; nothing elsewhere or in a scratch directory), so that the `fsync`
    /// of [`AtomicFile::commit`] finds most of the file already written: the disk works while
    /// the caller computes the next piece.
    pub fn start_writeback(&self) {
        #[cfg(target_os = "linux")]
        if let Some(f) = &self.file {
            if !is_scratch(&self.path) {
                use std::os::fd::AsRawFd;
                extern "C" {
                    fn sync_file_range(fd: i32, offset: i64, nbytes: i64, flags: u32) -> i32;
                }
                const SYNC_FILE_RANGE_WRITE: u32 = 2;
                // SAFETY: the descriptor is open (owned by `f`); the call only schedules
                // writeback of the whole file (nbytes 0: to its end) and takes no pointers.
                // A failure is harmless: `commit`'s fsync writes whatever is left.
                unsafe {
                    sync_file_range(f.as_raw_fd(), 0, 0, SYNC_FILE_RANGE_WRITE);
                }
            }
        }
    }

    /// `fsync` (unless in a scratch directory) and rename onto the final path.
    pub fn commit(mut self) -> Result<()> {
        let f = self.file.take().expect("open until committed");
        let res = (|| {
            if !is_scratch(&self.path) {
                f.sync_all()?;
            }
            drop(f);
            std::fs::rename(&self.tmp, &self.path)
        })();
        res.map_err(|e| {
            let _ = std::fs::remove_file(&self.tmp);
            ConfError::io(&self.path, e)
        })
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Write a file atomically with `fill`, which receives a buffered writer.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    let res = (|| -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(f.file());
        fill(&mut w)?;
        w.flush()
    })();
    res.map_err(|e| ConfError::io(path, e))?;
    f.commit()
}

/// Write bytes atomically.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// Fill a directory all or nothing: `fill` writes into a fresh staging directory, and only
/// when it succeeds do its files move into `dir` (a rename of the whole directory when `dir`
/// does not exist yet, else a rename of each file). On failure the staging directory is
/// removed, so a failed run leaves no file in (or beside) `dir`.
pub fn write_dir_atomic<T>(dir: &Path, fill: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let tag = format!("bnconf-{}.tmp", std::process::id());
    check_dir_chain(dir, dir)?;
    let fresh = !dir.exists();
    let stage = match (fresh, dir.file_name()) {
        (true, Some(name)) => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| ConfError::io(parent, e))?;
            }
            dir.with_file_name(format!(".{}.{tag}", name.to_string_lossy()))
        }
        _ => {
            std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
            dir.join(format!(".{tag}"))
        }
    };
    let _ = std::fs::remove_dir_all(&stage);
    let res = fill(&stage).and_then(|v| {
        if !stage.exists() {
            // `fill` wrote nothing.
            return Ok(v);
        }
        if fresh && !dir.exists() {
            std::fs::rename(&stage, dir).map_err(|e| ConfError::io(dir, e))?;
            return Ok(v);
        }
        let entries = std::fs::read_dir(&stage).map_err(|e| ConfError::io(&stage, e))?;
        for e in entries {
            let e = e.map_err(|e| ConfError::io(&stage, e))?;
            let to = dir.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(|err| ConfError::io(&to, err))?;
        }
        std::fs::remove_dir(&stage).map_err(|e| ConfError::io(&stage, e))?;
        Ok(v)
    });
    if res.is_err() {
        let _ = std::fs::remove_dir_all(&stage);
    }
    res
}

#[cfg(test)]
mod scratch_tests {
    use super::*;

    #[test]
    fn scratch_covers_the_registered_tree_only() {
        let d = std::env::temp_dir().join(format!("bnconf-scratch-test-{}", std::process::id()));
        let inside = d.join("case").join("out").join("y.npy");
        let sibling = PathBuf::from(format!("{}x", d.display())).join("y.npy");
        assert!(!is_scratch(&inside));
        scratch_begin(&d);
        assert!(is_scratch(&inside));
        assert!(is_scratch(&d));
        assert!(
            !is_scratch(&sibling),
            "a prefix of the name is not the directory"
        );
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        write_bytes(&inside, b"data").unwrap();
        assert_eq!(std::fs::read(&inside).unwrap(), b"data");
        scratch_end(&d);
        assert!(!is_scratch(&inside));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
