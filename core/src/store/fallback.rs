//! Where hook events go when the data dir cannot take them at all (a read-only file
//! system, a failing disk, a data dir whose permissions or path deny writing): a private
//! directory of the user's, outside the data dir, laid out like one (`spool/`,
//! `lost-events`), so the spool and the incident record work on it unchanged.
//!
//! ```text
//! $XDG_RUNTIME_DIR/cairn/        0700 (else <temp dir>/cairn-<uid>/)
//!   <hash of the data dir>/      0700, one per data dir
//!     data-dir                   the data dir's path, for a person looking
//!     spool/                     events kept for that data dir
//!     lost-events                events not even this place could keep
//! ```
//!
//! Invariants: a directory is used only when it is a real directory (not a symlink),
//! owned by this user and closed to everybody else; one that is not is refused, never
//! repaired or followed, so another user who created `/tmp/cairn-<uid>` first gets no
//! event. The worker ingests what is kept here once the data dir is writable again
//! (`worker::ingest`), and `cairn status` counts it until then.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::store::paths::DataDir;

/// The environment variable naming the user's private runtime directory.
pub const RUNTIME_DIR_ENV: &str = "XDG_RUNTIME_DIR";

/// The per-user directory every data dir's fallback sits in: `$XDG_RUNTIME_DIR/cairn` when
/// that variable names a private directory of this user's, else `cairn-<uid>` in the
/// system's temp dir.
fn base() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    if let Some(run) = std::env::var_os(RUNTIME_DIR_ENV).map(PathBuf::from)
        && run.is_absolute()
        && check_private(&run, uid).is_ok()
    {
        return run.join("cairn");
    }
    std::env::temp_dir().join(format!("cairn-{uid}"))
}

/// The fallback of `dir` (where it would be; nothing is created or checked).
pub fn location(dir: &DataDir) -> PathBuf {
    base().join(key(dir.root()))
}

/// The fallback of `dir`, created (mode 0700) when missing and checked: a directory, not a
/// symlink, owned by this user, closed to group and others, at each of its two levels.
pub fn ensure(dir: &DataDir) -> Result<DataDir> {
    let uid = rustix::process::geteuid().as_raw();
    let base = base();
    let own = base.join(key(dir.root()));
    for level in [&base, &own] {
        match std::fs::DirBuilder::new().mode(0o700).create(level) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("cannot create directory", level, e)),
        }
        check_private(level, uid)?;
    }
    let note = own.join("data-dir");
    if !note.exists()
        && let Ok(mut f) = crate::store::paths::create_private(&note)
    {
        use std::io::Write;
        let _ = writeln!(f, "{}", dir.root().display());
    }
    Ok(DataDir::new(own))
}

/// The fallback of `dir` when it exists and passes the checks of [`ensure`]; `None`
/// otherwise (nothing was ever kept there, or it is not safe to read).
pub fn existing(dir: &DataDir) -> Option<DataDir> {
    let uid = rustix::process::geteuid().as_raw();
    let base = base();
    let own = base.join(key(dir.root()));
    if !own.exists() {
        return None;
    }
    match check_private(&base, uid).and_then(|()| check_private(&own, uid)) {
        Ok(()) => Some(DataDir::new(own)),
        Err(e) => {
            log::warn!("{e}");
            None
        }
    }
}

/// Refuses `path` unless it is a directory itself (not a symlink to one), owned by `uid`,
/// with no permission for group or others.
fn check_private(path: &Path, uid: u32) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io("cannot inspect", path, e))?;
    let problem = if !meta.file_type().is_dir() {
        Some("not a directory (a symlink or a file)")
    } else if meta.uid() != uid {
        Some("owned by another user")
    } else if meta.mode() & 0o077 != 0 {
        Some("open to other users")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(Error::Invalid(format!(
            "refusing {} as a place for hook events: {p}",
            path.display()
        ))),
    }
}

/// The name of a data dir's fallback: FNV-1a (64 bits) of its absolute path.
fn key(root: &Path) -> String {
    let abs = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in abs.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_directory_is_made_once_per_data_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uid = rustix::process::geteuid().as_raw();
        let a = DataDir::new(tmp.path().join("a"));
        let b = DataDir::new(tmp.path().join("b"));
        assert_ne!(key(a.root()), key(b.root()));
        assert_eq!(key(a.root()), key(a.root()));
        let base = tmp.path().join("base");
        let own = base.join(key(a.root()));
        for level in [&base, &own] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(level)
                .expect("mkdir");
            assert!(check_private(level, uid).is_ok());
        }
    }

    #[test]
    fn symlinks_foreign_and_open_directories_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uid = rustix::process::geteuid().as_raw();
        let real = tmp.path().join("real");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&real)
            .expect("mkdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = check_private(&link, uid).expect_err("symlink").to_string();
        assert!(err.contains("symlink"), "{err}");
        let err = check_private(&real, uid.wrapping_add(1))
            .expect_err("foreign")
            .to_string();
        assert!(err.contains("another user"), "{err}");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = check_private(&real, uid).expect_err("open").to_string();
        assert!(err.contains("open to other users"), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").expect("file");
        assert!(check_private(&file, uid).is_err());
    }
}
