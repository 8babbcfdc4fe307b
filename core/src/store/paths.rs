//! Where cairn keeps its files. Everything lives under one data dir:
//!
//! ```text
//! <data dir>/            0700; `CAIRN_DATA_DIR`, else ~/.cairn
//!   cairn.db             0600; the database (plus -wal, -shm)
//!   settings.json        optional settings
//!   worker.lock          held (flock) by the running worker
//!   spool/               events hooks could not write to the database
//!   logs/                daily log files
//!   backups/             online backups
//! ```

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable that picks the data dir.
pub const DATA_DIR_ENV: &str = "CAIRN_DATA_DIR";

/// The data dir and the well-known files inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// `CAIRN_DATA_DIR` if set and non-empty, else `~/.cairn`.
    pub fn from_env() -> Result<Self> {
        if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|v| !v.is_empty()) {
            return Ok(Self::new(dir));
        }
        match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => Ok(Self::new(Path::new(&home).join(".cairn"))),
            None => Err(Error::Invalid(format!(
                "cannot find the data dir: neither {DATA_DIR_ENV} nor HOME is set"
            ))),
        }
    }

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn db(&self) -> PathBuf {
        self.root.join("cairn.db")
    }
    pub fn settings(&self) -> PathBuf {
        self.root.join("settings.json")
    }
    pub fn worker_lock(&self) -> PathBuf {
        self.root.join("worker.lock")
    }
    pub fn spool(&self) -> PathBuf {
        self.root.join("spool")
    }
    /// Spool files already applied to the database, kept until a sound backup holds them
    /// (`worker::ingest`), and put back in the spool by a recovery (`store::recover`).
    pub fn spool_applied(&self) -> PathBuf {
        self.spool().join("applied")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    pub fn lost_events(&self) -> PathBuf {
        self.root.join("lost-events")
    }
    pub fn notices(&self) -> PathBuf {
        self.root.join("notices")
    }
    /// Why the latest worker stopped on an error (`store::incidents::worker_failure`).
    pub fn worker_failed(&self) -> PathBuf {
        self.root.join("worker-failed")
    }
    pub fn backups(&self) -> PathBuf {
        self.root.join("backups")
    }
    /// `cairn ui`'s address and access token, kept across runs (owner-only).
    pub fn viewer(&self) -> PathBuf {
        self.root.join("viewer.json")
    }
    /// The owner-only directory of the running worker's sockets.
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    /// Where the running worker answers searches by meaning (`recall::ask`).
    pub fn recall_socket(&self) -> PathBuf {
        self.run().join("recall.sock")
    }

    /// True when the directory exists.
    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }

    /// Creates the data dir (mode 0700) if missing. Safe to race: many hooks may call it at
    /// once on a fresh machine.
    pub fn ensure(&self) -> Result<()> {
        ensure_private_dir(&self.root)
    }

    /// Creates a subdirectory of the data dir (mode 0700) if missing.
    pub fn ensure_sub(&self, sub: &Path) -> Result<()> {
        self.ensure()?;
        ensure_private_dir(sub)
    }
}

/// Where Claude Code keeps its own files, the one place cairn reads it from:
///
/// ```text
/// $CLAUDE_CONFIG_DIR, else ~/.claude      settings.json, projects/ (transcripts),
///                                        plugins/, .credentials.json
/// $CLAUDE_CONFIG_DIR/.claude.json,       MCP servers of the user and local scopes
///   else ~/.claude.json
/// ```
///
/// (As Claude Code 2.1 does: with `CLAUDE_CONFIG_DIR` set, `claude mcp add -s user`
/// writes `$CLAUDE_CONFIG_DIR/.claude.json` and nothing in the home directory.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeCode {
    /// Its configuration folder.
    pub config: PathBuf,
    /// Its user document (`.claude.json`).
    pub user_file: PathBuf,
}

/// The environment variable that moves Claude Code's configuration folder.
pub const CLAUDE_CONFIG_DIR_ENV: &str = "CLAUDE_CONFIG_DIR";

impl ClaudeCode {
    /// From `CLAUDE_CONFIG_DIR` (`config_dir`) and `HOME` (`home`), empty values as unset;
    /// `None` when neither is set.
    pub fn new(config_dir: Option<&str>, home: Option<&Path>) -> Option<Self> {
        match (config_dir.filter(|d| !d.is_empty()), home) {
            (Some(dir), _) => Some(Self {
                config: PathBuf::from(dir),
                user_file: Path::new(dir).join(".claude.json"),
            }),
            (None, Some(home)) if !home.as_os_str().is_empty() => Some(Self {
                config: home.join(".claude"),
                user_file: home.join(".claude.json"),
            }),
            (None, _) => None,
        }
    }

    /// From this process's environment.
    pub fn from_env() -> Option<Self> {
        let config = std::env::var(CLAUDE_CONFIG_DIR_ENV).ok();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self::new(config.as_deref(), home.as_deref())
    }

    /// The user's settings (`settings.json`).
    pub fn settings(&self) -> PathBuf {
        self.config.join("settings.json")
    }

    /// The folder of session transcripts, one folder per project.
    pub fn projects(&self) -> PathBuf {
        self.config.join("projects")
    }
}

/// Bytes free for an unprivileged writer on the file system holding `path` (`statvfs`);
/// `None` when it cannot be asked (no such path).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Why cairn cannot write `path` (a file or directory that exists), when it cannot: its
/// file system is mounted read-only, or its permissions deny this process. `None` when
/// writable (or when it does not exist).
pub fn read_only_reason(path: &Path) -> Option<String> {
    use rustix::fs::{Access, StatVfsMountFlags};
    if rustix::fs::statvfs(path).is_ok_and(|st| st.f_flag.contains(StatVfsMountFlags::RDONLY)) {
        return Some(format!("{} is on a read-only file system", path.display()));
    }
    (rustix::fs::access(path, Access::WRITE_OK) == Err(rustix::io::Errno::ACCESS)).then(|| {
        format!(
            "{} is read-only (its permissions deny writing)",
            path.display()
        )
    })
}

/// Creates `dir` and its parents with mode 0700 when missing; an existing dir is left as is.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if dir.is_dir() => {
            log::debug!("create {} raced: {e}", dir.display());
            Ok(())
        }
        Err(e) => Err(Error::io("cannot create directory", dir, e)),
    }
}

/// Creates `file` with mode 0600 if missing, without truncating an existing one.
pub fn ensure_private_file(file: &Path) -> Result<()> {
    if file.exists() {
        return Ok(());
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(file)
        .map(drop)
        .map_err(|e| Error::io("cannot create", file, e))
}

/// Creates (or truncates) `file` for writing, mode 0600 from the start whatever the umask:
/// every file cairn writes holds captured text or may, so none is ever readable by others,
/// not even for the moment between creating it and narrowing its mode.
pub fn create_private(file: &Path) -> std::io::Result<std::fs::File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?;
    // An existing file keeps its mode through open(2): narrow it too.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// Appends to `file`, created mode 0600 when missing (log files).
pub fn append_private(file: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(file)
}

/// Copies `from` to `to` (created or truncated, mode 0600 from the start).
pub fn copy_private(from: &Path, to: &Path) -> std::io::Result<u64> {
    let mut src = std::fs::File::open(from)?;
    let mut dst = create_private(to)?;
    std::io::copy(&mut src, &mut dst)
}

/// Replaces `file` with `bytes`, so a reader sees the old file or the new one whole: a temp
/// file beside it (`.<name>.<pid>.<random>.tmp`, private from the start, then given
/// `mode`), synced, renamed over it, and the directory synced so the rename survives a
/// crash. The temp file is removed when anything fails.
pub fn replace_file(file: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        crate::rand::u64()
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()?;
            if mode != 0o600 {
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            Ok(())
        })
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        log::debug!("syncing {}: {e}", dir.display());
    }
    Ok(())
}

/// The permission bits of a path (for `cairn doctor`).
pub fn mode_of(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_private_dirs_and_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("a/b/cairn"));
        dd.ensure().expect("ensure");
        dd.ensure().expect("ensure twice");
        assert_eq!(mode_of(dd.root()), Some(0o700));
        ensure_private_file(&dd.db()).expect("file");
        assert_eq!(mode_of(&dd.db()), Some(0o600));
        dd.ensure_sub(&dd.spool()).expect("sub");
        assert_eq!(mode_of(&dd.spool()), Some(0o700));
    }

    #[test]
    fn claude_code_moves_with_its_config_dir() {
        let home = Path::new("/h");
        let c = ClaudeCode::new(None, Some(home)).expect("home");
        assert_eq!(c.settings(), Path::new("/h/.claude/settings.json"));
        assert_eq!(c.user_file, Path::new("/h/.claude.json"));
        assert_eq!(c.projects(), Path::new("/h/.claude/projects"));
        let c = ClaudeCode::new(Some("/cfg"), Some(home)).expect("config dir");
        assert_eq!(c.settings(), Path::new("/cfg/settings.json"));
        assert_eq!(c.user_file, Path::new("/cfg/.claude.json"));
        assert_eq!(
            ClaudeCode::new(Some(""), Some(home)).expect("home").config,
            home.join(".claude")
        );
        assert_eq!(ClaudeCode::new(Some(""), None), None);
    }

    #[test]
    fn free_space_is_known() {
        assert!(free_bytes(Path::new("/")).is_some());
        assert!(free_bytes(Path::new("/no/such/dir")).is_none());
    }

    #[test]
    fn a_writable_dir_has_no_read_only_reason() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_only_reason(tmp.path()), None);
        assert_eq!(read_only_reason(&tmp.path().join("missing")), None);
    }
}
