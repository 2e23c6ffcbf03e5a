//! `bnconf check --exec CMD`: export a suite into a directory, run the kernel on it, hand the
//! directory back for judging (docs/REPORTS.md, "Running a kernel: --exec").
//!
//! - **Command line**: CMD is split into words as a POSIX shell would (quotes, backslashes;
//!   no expansion, no pipes: `shlex`), and run as `WORD0 WORD1 … DIR`. With `--exec-shell` it
//!   is a shell command line run by `sh -c CMD sh DIR` instead (pipes, `&&`, variables): DIR
//!   is `$1`, and when CMD names none of `$1`, `${1}`, `$@`, `$*`, `BNCONF_DIR`, ` "$@"` is
//!   appended (so `--exec-shell 'python k.py'` runs `python k.py DIR`). Either way the kernel
//!   also gets `BNCONF_DIR=DIR` in its environment.
//! - **Directory**: a fresh temporary directory `<tmp>/bnconf-check-<pid>-<n>`, removed when
//!   done; or `--keep-dir DIR` (or `check DIR --exec CMD`), which must be new or empty and is
//!   kept with what the kernel wrote. bnconf never deletes a directory it did not create.
//!   Files in the temporary directory are written atomically but not `fsync`ed (it is
//!   removed at the end; `formats::atomic`, scratch directories), and the kernel gets
//!   `BNCONF_SCRATCH=DIR` so that a `bnconf kernel` child skips the sync of its outputs too.
//! - **Timeout**: the kernel runs in its own process group; one still running after
//!   `--timeout SECONDS` (default 900) gets SIGTERM, then SIGKILL a second later, sent to the
//!   whole group (its children too), and the run fails (exit 1, "kernel timed out after N s").
//! - **Signals**: SIGINT, SIGTERM or SIGHUP to bnconf kill the kernel's process group, remove
//!   the temporary directory and exit with 128 + the signal number (during the export, once
//!   the export is written: removing a directory under its writer could leave part of it).

#![cfg(all(feature = "cli", unix))]

use crate::error::{ConfError, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The default `--timeout`, in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 900;

/// How to run the kernel.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// The command (`--exec`).
    pub cmd: String,
    /// Run it through `sh -c` (`--exec-shell`).
    pub shell: bool,
    /// Kill it after this long (`--timeout`).
    pub timeout: Duration,
}

/// How the kernel's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It exited (any status).
    Exited(ExitStatus),
    /// It was still running after the timeout; its process group was killed.
    TimedOut(Duration),
    /// bnconf got this signal while the kernel ran; its process group was killed.
    Interrupted(i32),
}

/// The suite directory of one `--exec` run: removed on drop when bnconf created it as a
/// temporary directory, kept otherwise.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    temporary: bool,
}

impl WorkDir {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Whether it is removed when done.
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }

    /// A fresh temporary directory (created here, so never one that existed before).
    pub fn temporary() -> Result<WorkDir> {
        install_signal_cleanup();
        let base = std::env::temp_dir();
        for n in 0..10_000u32 {
            let p = base.join(format!("bnconf-check-{}-{n}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => {
                    crate::formats::atomic::scratch_begin(&p);
                    *TEMP_DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.clone());
                    return Ok(WorkDir {
                        path: p,
                        temporary: true,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(ConfError::io(&p, e)),
            }
        }
        Err(ConfError::io(
            &base,
            "no free name for a temporary directory",
        ))
    }

    /// A directory the user named: new (created) or empty; kept when done. A non-empty
    /// existing directory is refused (nothing in it is touched).
    pub fn kept(dir: &Path) -> Result<WorkDir> {
        install_signal_cleanup();
        if dir.exists() {
            if !dir.is_dir() {
                return Err(ConfError::field(
                    "--keep-dir",
                    format!("{} exists and is not a directory", dir.display()),
                ));
            }
            let mut rd = std::fs::read_dir(dir).map_err(|e| ConfError::io(dir, e))?;
            if rd.next().is_some() {
                return Err(ConfError::field(
                    "--keep-dir",
                    format!(
                        "{} exists and is not empty: refusing to export into it (bnconf never deletes or overwrites a directory it did not create; give a new or empty directory, or judge it with `bnconf check {}`)",
                        dir.display(),
                        dir.display()
                    ),
                ));
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
        }
        Ok(WorkDir {
            path: dir.to_path_buf(),
            temporary: false,
        })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
            crate::formats::atomic::scratch_end(&self.path);
            let mut t = TEMP_DIR.lock().unwrap_or_else(|e| e.into_inner());
            if t.as_deref() == Some(self.path.as_path()) {
                *t = None;
            }
        }
    }
}

/// The program and its arguments (DIR not yet appended).
pub fn command_words(cmd: &str, shell: bool) -> Result<Vec<String>> {
    if cmd.trim().is_empty() {
        return Err(ConfError::field("--exec", "empty command"));
    }
    if shell {
        let names_dir = ["$1", "${1", "$@", "${@", "$*", "BNCONF_DIR"]
            .iter()
            .any(|w| cmd.contains(w));
        let line = if names_dir {
            cmd.to_string()
        } else {
            format!("{cmd} \"$@\"")
        };
        return Ok(vec!["sh".into(), "-c".into(), line, "sh".into()]);
    }
    let words = shlex::split(cmd).ok_or_else(|| {
        ConfError::field(
            "--exec",
            format!("{cmd:?}: unbalanced quotes or a trailing backslash (the command is split as a POSIX shell splits words; use --exec-shell for a shell command line)"),
        )
    })?;
    if words.is_empty() {
        return Err(ConfError::field("--exec", "empty command"));
    }
    Ok(words)
}

static TEMP_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);
static CHILD_PGID: AtomicI32 = AtomicI32::new(0);
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
static MAIN_DONE: AtomicBool = AtomicBool::new(false);
/// Set while the main thread writes the export: the signal thread then leaves the clean-up
/// to it (removing the directory under a writer could leave a part of it behind).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Export `s` into `work` (and record `shard` in its manifest). `Ok(Some(sig))` when a signal
/// arrived meanwhile: the caller drops `work` (removing a temporary directory) and exits.
pub fn export_into(
    work: &WorkDir,
    s: &crate::suite::Suite,
    dtype: crate::suite::Precision,
    filter: &crate::suite::Filter,
    shard: Option<crate::suite::shard::Shard>,
) -> Result<Option<i32>> {
    export_with(work, |dir| {
        super::export(s, dtype, filter, dir)?;
        if let Some(sh) = shard {
            crate::suite::shard::record_in_manifest(dir, sh)?;
        }
        Ok(())
    })
}

/// [`export_into`] with any export (`write` fills the work directory, e.g. a family suite's):
/// a signal during it cleans up as during [`export_into`]; `Some(signal)` if one came.
pub fn export_with(work: &WorkDir, write: impl FnOnce(&Path) -> Result<()>) -> Result<Option<i32>> {
    EXPORTING.store(true, Ordering::SeqCst);
    let r = write(work.path());
    EXPORTING.store(false, Ordering::SeqCst);
    r.map(|()| interrupted())
}

fn kill_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: killpg has no memory-safety preconditions; a vanished group is ESRCH.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }
}

/// Install (once) the thread that turns SIGINT, SIGTERM and SIGHUP into: kill the kernel's
/// process group, remove the temporary directory, exit 128 + signal. While the kernel runs,
/// the main thread notices first and cleans up itself ([`Outcome::Interrupted`]); at any
/// other moment (export, judging) this thread does it after a short grace period.
pub fn install_signal_cleanup() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                INTERRUPTED.store(sig, Ordering::SeqCst);
                let pgid = CHILD_PGID.load(Ordering::SeqCst);
                kill_group(pgid, libc::SIGTERM);
                // The main thread, exporting or waiting on the kernel, notices and exits
                // (an export is always finished first); judging, it only reads.
                let t = Instant::now();
                while (EXPORTING.load(Ordering::SeqCst) || t.elapsed() < Duration::from_secs(2))
                    && !MAIN_DONE.load(Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                kill_group(CHILD_PGID.load(Ordering::SeqCst), libc::SIGKILL);
                let dir = TEMP_DIR.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let what = match dir {
                    Some(d) => {
                        let _ = std::fs::remove_dir_all(&d);
                        "; removed the temporary directory"
                    }
                    None => "",
                };
                eprintln!("bnconf: interrupted by signal {sig}{what}");
                std::process::exit(128 + sig);
            }
        });
    });
}

/// The signal that interrupted bnconf, if any.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Run the kernel on `dir` (in its own process group) and wait for it, at most
/// `opts.timeout`.
pub fn run(opts: &ExecOptions, dir: &Path) -> Result<Outcome> {
    install_signal_cleanup();
    let words = command_words(&opts.cmd, opts.shell)?;
    let (prog, args) = words.split_first().expect("non-empty");
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .arg(dir)
        .env("BNCONF_DIR", dir)
        .process_group(0);
    if dir.is_absolute() && crate::formats::atomic::is_scratch(dir) {
        // A temporary directory removed after the run: the kernel's outputs need no fsync.
        cmd.env(crate::formats::atomic::SCRATCH_ENV, dir);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ConfError::field("--exec", format!("cannot run {prog:?}: {e}")))?;
    let pgid = child.id() as i32;
    CHILD_PGID.store(pgid, Ordering::SeqCst);
    let start = Instant::now();
    let wait = |child: &mut std::process::Child| -> Result<Option<ExitStatus>> {
        child
            .try_wait()
            .map_err(|e| ConfError::field("--exec", format!("waiting for {prog:?}: {e}")))
    };
    let outcome = loop {
        if let Some(st) = wait(&mut child)? {
            // killed by the signal thread (which flags the signal first)?
            break match interrupted() {
                Some(sig) => Outcome::Interrupted(sig),
                None => Outcome::Exited(st),
            };
        }
        if let Some(sig) = interrupted() {
            stop_group(&mut child, pgid);
            break Outcome::Interrupted(sig);
        }
        if start.elapsed() >= opts.timeout {
            stop_group(&mut child, pgid);
            break Outcome::TimedOut(opts.timeout);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The group's other members (the kernel's children) go too.
    kill_group(pgid, libc::SIGKILL);
    CHILD_PGID.store(0, Ordering::SeqCst);
    Ok(outcome)
}

/// SIGTERM to the group, up to 1 s for the leader to exit, then SIGKILL to the group (before
/// the leader is reaped, so the group id cannot have been reused), then reap it.
fn stop_group(child: &mut std::process::Child, pgid: i32) {
    kill_group(pgid, libc::SIGTERM);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        // waitid(WNOWAIT): has the leader exited? (without reaping it)
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let exited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pgid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            ) == 0
                && info.si_pid() != 0
        };
        if exited {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(pgid, libc::SIGKILL);
    let _ = child.wait();
}

/// Tell the signal thread that the main thread is finishing (it then leaves the clean-up of
/// the temporary directory to [`WorkDir`]'s drop).
pub fn main_done() {
    MAIN_DONE.store(true, Ordering::SeqCst);
}

/// `N s` for messages.
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(
            command_words("python -c 'import sys; print(sys.argv)'", false).unwrap(),
            vec!["python", "-c", "import sys; print(sys.argv)"]
        );
        assert_eq!(
            command_words(r#"a "b c" d\ e"#, false).unwrap(),
            vec!["a", "b c", "d e"]
        );
        assert!(command_words("a 'b", false).is_err());
        assert!(command_words("  ", false).is_err());
        assert_eq!(
            command_words("python k.py", true).unwrap(),
            vec!["sh", "-c", "python k.py \"$@\"", "sh"]
        );
        assert_eq!(
            command_words("k \"$1\" | tee log", true).unwrap(),
            vec!["sh", "-c", "k \"$1\" | tee log", "sh"]
        );
    }
}
