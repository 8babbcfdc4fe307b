//! The worker's single-instance lock: an exclusive `flock` on `worker.lock` in the data dir,
//! held for the worker's life and released by the kernel when it dies, however it dies.
//! The file also records the holder's pid and start time for `cairn status`, and whether
//! that process is stopped ([`process_stopped`]) is read here for liveness and the hook.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A held worker lock; dropping it releases the lock.
#[derive(Debug)]
pub struct WorkerLock {
    file: File,
    path: PathBuf,
}

/// Who holds the lock, as the holder wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub started_at: i64,
}

fn open(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("cannot open lock file", path, e))
}

impl WorkerLock {
    /// Takes the lock, or returns `None` when another process holds it.
    pub fn try_acquire(path: &Path, now: i64) -> Result<Option<WorkerLock>> {
        let mut file = open(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("cannot lock", path, e)),
        }
        let record = format!("{} {}\n", std::process::id(), now);
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(record.as_bytes()))
            .map_err(|e| Error::io("cannot write lock file", path, e))?;
        Ok(Some(WorkerLock {
            file,
            path: path.to_path_buf(),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkerLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The current holder of the lock, or `None` when no live process holds it.
pub fn holder(path: &Path) -> Result<Option<Holder>> {
    if !path.exists() {
        return Ok(None);
    }
    // Read only: a shared lock needs no write access, and a data dir on a read-only file
    // system still answers who holds it.
    let mut file = File::open(path).map_err(|e| Error::io("cannot open lock file", path, e))?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            return Ok(None);
        }
        Err(std::fs::TryLockError::WouldBlock) => {}
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Error::io("cannot check lock", path, e));
        }
    }
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let mut parts = text.split_whitespace();
    let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let started_at = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Ok(Some(Holder { pid, started_at }))
}

/// The state letter of process `pid` (`R`, `S`, `T`…), from `/proc/<pid>/stat`; `None`
/// where unknown (no such process, no `/proc`).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// True when the process `pid` is stopped (SIGSTOP, a debugger; Linux `/proc`, false where
/// unknown). Cheap: one small read, what a hook can afford on every event.
pub fn process_stopped(pid: u32) -> bool {
    process_state(pid).is_some_and(|state| state == 'T' || state == 't')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs() {
        let me = std::process::id();
        assert!(matches!(process_state(me), Some('R' | 'S')));
        assert!(!process_stopped(me));
        assert_eq!(process_state(u32::MAX), None);
    }

    #[test]
    fn one_holder_at_a_time() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("worker.lock");
        assert_eq!(holder(&path).expect("holder"), None);
        let lock = WorkerLock::try_acquire(&path, 42)
            .expect("acquire")
            .expect("free");
        assert!(
            WorkerLock::try_acquire(&path, 43)
                .expect("second")
                .is_none()
        );
        let h = holder(&path).expect("holder").expect("held");
        assert_eq!(
            h,
            Holder {
                pid: std::process::id(),
                started_at: 42
            }
        );
        drop(lock);
        assert_eq!(holder(&path).expect("holder"), None);
        assert!(WorkerLock::try_acquire(&path, 44).expect("again").is_some());
    }
}
