//! Online backups and restores with SQLite's backup API.
//!
//! Invariants:
//! - a backup copies the database in one backup step under one read transaction, so it is a
//!   consistent snapshot while hooks and the worker keep writing (WAL readers do not block
//!   writers); it is written to a temporary file, checked, made `0600`, and only then
//!   renamed into place, so a backup file that exists is complete; the temporary files of a
//!   backup or restore whose process was killed are deleted by the next backup into that
//!   folder and by the worker's housekeeping, which runs at its start ([`remove_partials`]);
//! - a restore is refused while a worker holds the worker lock; the source is copied and its
//!   integrity checked before the live database is touched; the live database is first
//!   backed up next to the others (`cairn-replaced-…`), then overwritten through the backup
//!   API, which takes the write lock, so hooks writing at that moment wait instead of
//!   corrupting anything; a live database too damaged to open is moved aside as it is;
//! - daily backups are named `cairn-YYYY-MM-DD.db`; only files with that exact shape are
//!   counted and pruned by retention.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::backup::{Backup, StepResult};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::DataDir;

/// How long a backup step waits on locks before giving up.
const STEP_WAIT: Duration = Duration::from_secs(30);

/// A finished backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupInfo {
    pub path: PathBuf,
    pub bytes: u64,
}

/// Copies `from` into `to` with the backup API, retrying while the source or destination is
/// busy, until done or the deadline passes.
fn copy(from: &Connection, to: &mut Connection, what: &Path, wait: Duration) -> Result<()> {
    let backup = Backup::new(from, to)?;
    let deadline = Instant::now() + wait;
    let mut attempt = 0;
    loop {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            StepResult::More => {}
            StepResult::Busy | StepResult::Locked => {
                if Instant::now() >= deadline {
                    return Err(Error::Locked {
                        path: what.to_path_buf(),
                    });
                }
                attempt += 1;
                std::thread::sleep(db::jitter(attempt));
            }
            // `StepResult` is non-exhaustive; treat anything new as "try again".
            _ => std::thread::sleep(db::jitter(1)),
        }
    }
}

fn temp_beside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    path.with_file_name(name)
}

/// The pid in the name of a temporary file [`temp_beside`] made (with or without its
/// `-wal` / `-shm` / `-journal` companion suffix).
fn partial_pid(name: &str) -> Option<i32> {
    let (_, rest) = name.rsplit_once(".partial-")?;
    let digits = ["-wal", "-shm", "-journal"]
        .iter()
        .find_map(|s| rest.strip_suffix(s))
        .unwrap_or(rest);
    digits.parse().ok().filter(|pid| *pid > 0)
}

/// True while process `pid` exists (it may belong to another user).
pub(crate) fn process_exists(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

/// Deletes, in `folder`, the temporary files of backups and restores whose process is gone
/// (killed mid-copy: its file never became a backup). A backup still running in another
/// process keeps its file. Returns how many files were deleted; errors are logged.
pub fn remove_partials(folder: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(partial_pid) else {
            continue;
        };
        if process_exists(pid) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                log::info!(
                    "removed {}, left by an interrupted backup",
                    entry.path().display()
                );
                removed += 1;
            }
            Err(e) => log::warn!("cannot remove {}: {e}", entry.path().display()),
        }
    }
    removed
}

fn remove_quietly(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// Renames a database file and its `-wal` / `-shm` companions to `to` (whose parent is
/// created), refusing to overwrite.
pub(crate) fn move_aside(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        return Err(Error::Invalid(format!(
            "{} already exists; try again in a second",
            to.display()
        )));
    }
    if let Some(parent) = to.parent() {
        crate::store::paths::ensure_private_dir(parent)?;
    }
    for suffix in ["-wal", "-shm", ""] {
        let mut a = from.as_os_str().to_os_string();
        a.push(suffix);
        let a = PathBuf::from(a);
        if a.exists() {
            let mut b = to.as_os_str().to_os_string();
            b.push(suffix);
            std::fs::rename(&a, PathBuf::from(b))
                .map_err(|e| Error::io("cannot move aside", &a, e))?;
        }
    }
    Ok(())
}

/// Writes a consistent copy of the database behind `conn` to `dest`, which must not exist.
/// The parent directory is created (0700) when missing.
pub fn online(conn: &Connection, dest: &Path) -> Result<BackupInfo> {
    if dest.exists() {
        return Err(Error::Invalid(format!(
            "{} already exists; choose another path",
            dest.display()
        )));
    }
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::store::paths::ensure_private_dir(parent)?;
    }
    let tmp = temp_beside(dest);
    remove_quietly(&tmp);
    remove_partials(tmp.parent().unwrap_or(Path::new(".")));
    let result = (|| {
        // Created 0600 before SQLite opens it (SQLite would create it 0644 less the umask,
        // readable while the copy is written); its journal takes the same mode.
        crate::store::paths::create_private(&tmp)
            .map_err(|e| Error::io("cannot create backup", &tmp, e))?;
        let mut out = Connection::open(&tmp)?;
        db::trace_if_asked(&mut out);
        copy(
            conn,
            &mut out,
            conn.path().map(Path::new).unwrap_or(dest),
            STEP_WAIT,
        )?;
        // A backup is a single file: leave WAL so no -wal/-shm files travel with it.
        out.query_row("PRAGMA journal_mode = DELETE", [], |r| {
            r.get::<_, String>(0)
        })?;
        let problems = quick_check(&out)?;
        if !problems.is_empty() {
            return Err(Error::Invalid(format!(
                "the backup failed its integrity check: {}",
                problems.join("; ")
            )));
        }
        drop(out);
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("cannot set permissions of", &tmp, e))?;
        std::fs::rename(&tmp, dest).map_err(|e| Error::io("cannot move backup to", dest, e))?;
        Ok(())
    })();
    if result.is_err() {
        remove_quietly(&tmp);
    }
    result?;
    let bytes = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
    Ok(BackupInfo {
        path: dest.to_path_buf(),
        bytes,
    })
}

pub(crate) fn quick_check(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

/// The file name of the daily backup taken on the UTC day of `now`.
pub fn daily_name(now: i64) -> String {
    format!("cairn-{}.db", crate::clock::date_utc(now))
}

/// The default path of a backup asked for by hand at `now`: named by the time, with `-2`,
/// `-3`… when a backup of that second exists, so two backups in one second both work.
pub fn manual_path(dir: &DataDir, now: i64) -> PathBuf {
    let stamp: String = crate::clock::iso_utc(now)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let first = dir.backups().join(format!("cairn-manual-{stamp}.db"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|n| dir.backups().join(format!("cairn-manual-{stamp}-{n}.db")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

/// Deletes the oldest manual backups in `backups/` beyond `keep` (at least one is always
/// kept). Returns how many were deleted.
pub fn prune_manual(dir: &DataDir, keep: usize) -> Result<usize> {
    let entries = match std::fs::read_dir(dir.backups()) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io("cannot read", dir.backups(), e)),
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("cairn-manual-") && name.ends_with(".db")
        })
        .map(|e| {
            let t = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (t, e.path())
        })
        .collect();
    files.sort();
    let excess = files.len().saturating_sub(keep.max(1));
    let mut removed = 0;
    for (_, old) in &files[..excess] {
        match std::fs::remove_file(old) {
            Ok(()) => removed += 1,
            Err(e) => log::warn!("cannot remove old backup {}: {e}", old.display()),
        }
    }
    Ok(removed)
}

fn is_daily_name(name: &str) -> bool {
    name.strip_prefix("cairn-")
        .and_then(|rest| rest.strip_suffix(".db"))
        .is_some_and(|date| date.len() == 10 && crate::clock::parse_iso_utc(date).is_some())
}

/// The daily backups in `backups/`, oldest first.
pub fn daily_backups(dir: &DataDir) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir.backups()) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("cannot read", dir.backups(), e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_daily_name)
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Free space a backup must leave behind, beyond its own size: room for the hooks and the
/// database to keep growing (a tenth of the database, at least this).
pub const BACKUP_MARGIN_BYTES: u64 = 16 << 20;

/// Refuses a backup the disk has no room for: the daily backup must never be what fills
/// the disk the hooks write to. Needs the database's size (plus its WAL) and a margin.
fn check_room(dir: &DataDir) -> Result<()> {
    let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = dir.db().into_os_string();
    wal.push("-wal");
    let db_bytes = size(dir.db()) + size(wal.into());
    let need = db_bytes + (db_bytes / 10).max(BACKUP_MARGIN_BYTES);
    match crate::store::paths::free_bytes(&dir.backups()) {
        Some(free) if free < need => Err(Error::Invalid(format!(
            "not enough free space for a backup in {}: {} MiB free, {} MiB needed (the database's size plus a margin); backup skipped",
            dir.backups().display(),
            free >> 20,
            need.div_ceil(1 << 20)
        ))),
        _ => Ok(()),
    }
}

/// Takes today's daily backup unless it exists, then deletes the oldest daily backups
/// beyond `keep` (at least one is always kept). Returns the new backup's path, or `None`
/// when today's was already there. Called by the worker; cheap when there is nothing to do.
pub fn daily(dir: &DataDir, conn: &Connection, keep: usize, now: i64) -> Result<Option<PathBuf>> {
    let path = dir.backups().join(daily_name(now));
    let made = if path.exists() {
        None
    } else {
        dir.ensure_sub(&dir.backups())?;
        check_room(dir)?;
        let info = online(conn, &path)?;
        log::info!("daily backup written to {}", info.path.display());
        Some(info.path)
    };
    let files = daily_backups(dir)?;
    let excess = files.len().saturating_sub(keep.max(1));
    for old in &files[..excess] {
        match std::fs::remove_file(old) {
            Ok(()) => log::info!("removed old backup {}", old.display()),
            Err(e) => log::warn!("cannot remove old backup {}: {e}", old.display()),
        }
    }
    Ok(made)
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreInfo {
    /// The backup restored.
    pub from: PathBuf,
    /// Where the database it replaced was kept, when there was one.
    pub replaced_kept_at: Option<PathBuf>,
}

/// Replaces the data dir's database with the backup at `source`. Refused while a worker
/// runs; refused, with nothing changed, when the source is not a sound cairn database.
pub fn restore(dir: &DataDir, source: &Path, opts: OpenOptions, now: i64) -> Result<RestoreInfo> {
    // A wrong path first: stopping the worker would not help with it.
    if !source.is_file() {
        return Err(Error::Invalid(format!(
            "no backup file at {}",
            source.display()
        )));
    }
    if let Some(h) = crate::store::lock::holder(&dir.worker_lock())? {
        return Err(Error::Invalid(format!(
            "a worker (pid {}) is running; stop it first (systemctl --user stop cairn-worker, or kill {}), then restore",
            h.pid, h.pid
        )));
    }
    dir.ensure()?;
    // Check a private copy: the source itself is never opened for writing.
    let staged = temp_beside(&dir.root().join("restore.db"));
    remove_quietly(&staged);
    let result = (|| {
        crate::store::paths::copy_private(source, &staged)
            .map_err(|e| Error::io("cannot copy backup from", source, e))?;
        // A backup copied while its database was open may carry committed pages in -wal.
        let mut side = source.as_os_str().to_os_string();
        side.push("-wal");
        let side = PathBuf::from(side);
        if side.is_file() {
            let mut to = staged.as_os_str().to_os_string();
            to.push("-wal");
            crate::store::paths::copy_private(&side, &PathBuf::from(to))
                .map_err(|e| Error::io("cannot copy backup from", &side, e))?;
        }
        let staged_conn = match db::open(
            &staged,
            OpenOptions {
                create: false,
                ..opts
            },
        ) {
            Ok(c) => c,
            Err(Error::NotADatabase { reason, .. } | Error::Damaged { reason, .. }) => {
                return Err(Error::NotADatabase {
                    path: source.to_path_buf(),
                    reason,
                });
            }
            Err(Error::SchemaTooNew {
                found, supported, ..
            }) => {
                return Err(Error::SchemaTooNew {
                    path: source.to_path_buf(),
                    found,
                    supported,
                });
            }
            Err(e) => return Err(e),
        };
        if db::schema_version(&staged_conn)? == 0 {
            return Err(Error::NotADatabase {
                path: source.to_path_buf(),
                reason: "it holds no cairn schema".into(),
            });
        }
        let problems = db::integrity_problems(&staged_conn)?;
        if !problems.is_empty() {
            return Err(Error::NotADatabase {
                path: source.to_path_buf(),
                reason: format!("integrity check failed: {}", problems.join("; ")),
            });
        }
        let stamp: String = crate::clock::iso_utc(now)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let keep = dir.backups().join(format!("cairn-replaced-{stamp}.db"));
        let live_opts = OpenOptions {
            create: true,
            ..opts
        };
        let (mut live, replaced_kept_at) = if !dir.db().exists() {
            (db::open_data_dir(dir, live_opts)?, None)
        } else {
            // A damaged database (its header, or a page the copy or its check reads)
            // cannot be kept as a checked copy: its files are moved aside as they are, and
            // the backup is restored into a fresh file.
            match db::open_data_dir(dir, live_opts).and_then(|live| {
                online(&live, &keep)?;
                Ok(live)
            }) {
                Ok(live) => (live, Some(keep)),
                Err(e) if !e.is_busy() => {
                    log::warn!("{e}: moving the damaged file aside as it is");
                    move_aside(&dir.db(), &keep)?;
                    (db::open_data_dir(dir, live_opts)?, Some(keep))
                }
                Err(e) => return Err(e),
            }
        };
        copy(&staged_conn, &mut live, &dir.db(), opts.busy_timeout)?;
        Ok(RestoreInfo {
            from: source.to_path_buf(),
            replaced_kept_at,
        })
    })();
    remove_quietly(&staged);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_dir() -> (tempfile::TempDir, DataDir, Connection) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        (tmp, dd, conn)
    }

    fn add_session(conn: &mut Connection, id: &str) {
        // A plain row: the store sits below memory, which owns the sessions table.
        db::write(conn, |tx| {
            tx.execute(
                "INSERT INTO sessions (session_id, project, cwd, started_at, updated_at)
                 VALUES (?1, 'p', '', 1, 1)",
                [id],
            )?;
            Ok(())
        })
        .expect("write");
    }

    fn session_ids(conn: &Connection) -> Vec<String> {
        conn.prepare("SELECT session_id FROM sessions ORDER BY session_id")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    #[test]
    fn backup_then_restore_brings_back_the_old_state_and_keeps_the_replaced_one() {
        let (_tmp, dd, mut conn) = data_dir();
        add_session(&mut conn, "a");
        let dest = dd.root().join("b/one.db");
        let info = online(&conn, &dest).expect("backup");
        assert!(info.bytes > 0);
        assert_eq!(crate::store::paths::mode_of(&dest), Some(0o600));
        assert!(online(&conn, &dest).is_err(), "never overwrites");
        add_session(&mut conn, "b");
        drop(conn);

        let restored = restore(&dd, &dest, OpenOptions::default(), 86_400_000).expect("restore");
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(session_ids(&conn), vec!["a".to_string()]);
        let kept = restored.replaced_kept_at.expect("kept");
        let old = Connection::open(&kept).expect("open kept");
        assert_eq!(session_ids(&old), vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn restore_refuses_garbage_and_a_running_worker() {
        let (tmp, dd, mut conn) = data_dir();
        add_session(&mut conn, "a");
        let garbage = tmp.path().join("garbage.db");
        std::fs::write(&garbage, vec![7u8; 8192]).expect("write");
        let before = std::fs::read(dd.db()).expect("read");
        let err = restore(&dd, &garbage, OpenOptions::default(), 1).expect_err("garbage");
        assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
        assert_eq!(before, std::fs::read(dd.db()).expect("read"));

        let good = tmp.path().join("good.db");
        online(&conn, &good).expect("backup");
        let _lock = crate::store::lock::WorkerLock::try_acquire(&dd.worker_lock(), 1)
            .expect("lock")
            .expect("free");
        let err = restore(&dd, &good, OpenOptions::default(), 1).expect_err("worker");
        assert!(err.to_string().contains("stop it first"), "{err}");
        // A path that is no file is said first: stopping the worker would not mend it.
        let none = tmp.path().join("none.db");
        let err = restore(&dd, &none, OpenOptions::default(), 1).expect_err("none");
        assert!(err.to_string().starts_with("no backup file at"), "{err}");
    }

    #[test]
    fn restore_replaces_a_damaged_database_and_keeps_it() {
        let (tmp, dd, mut conn) = data_dir();
        add_session(&mut conn, "a");
        let good = tmp.path().join("good.db");
        online(&conn, &good).expect("backup");
        drop(conn);
        let garbage = vec![b'#'; 8192];
        std::fs::write(dd.db(), &garbage).expect("damage");
        let info = restore(&dd, &good, OpenOptions::default(), 5).expect("restore");
        let kept = info.replaced_kept_at.expect("kept");
        assert_eq!(std::fs::read(&kept).expect("kept"), garbage);
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(session_ids(&conn), vec!["a".to_string()]);
        assert_eq!(crate::store::paths::mode_of(&dd.db()), Some(0o600));
    }

    #[test]
    fn restore_replaces_a_database_with_a_damaged_page() {
        let (tmp, dd, mut conn) = data_dir();
        add_session(&mut conn, "a");
        let good = tmp.path().join("good.db");
        online(&conn, &good).expect("backup");
        for n in 0..200 {
            add_session(&mut conn, &format!("later-{n:03}-{}", "x".repeat(80)));
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        let leaf: i64 = conn
            .query_row(
                "SELECT max(pageno) FROM dbstat WHERE name = 'sessions' AND pagetype = 'leaf'",
                [],
                |r| r.get(0),
            )
            .expect("leaf");
        drop(conn);
        let mut bytes = std::fs::read(dd.db()).expect("read");
        let at = (leaf as usize - 1) * 4096;
        bytes[at..at + 4096].fill(0xA5);
        std::fs::write(dd.db(), &bytes).expect("damage");
        let info = restore(&dd, &good, OpenOptions::default(), 5).expect("restore");
        assert!(info.replaced_kept_at.expect("kept").exists());
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(session_ids(&conn), vec!["a".to_string()]);
    }

    #[test]
    fn partials_of_a_killed_backup_are_removed_and_a_running_ones_kept() {
        let (_tmp, dd, conn) = data_dir();
        std::fs::create_dir_all(dd.backups()).expect("backups");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let gone = child.id();
        child.wait().expect("wait");
        let killed: Vec<_> = ["", "-wal", "-journal"]
            .iter()
            .map(|s| {
                dd.backups()
                    .join(format!("cairn-2026-01-01.db.partial-{gone}{s}"))
            })
            .collect();
        let running = dd
            .backups()
            .join(format!("cairn-manual-x.db.partial-{}", std::process::id()));
        let other = dd.backups().join("notes.partial-x");
        for p in killed.iter().chain([&running, &other]) {
            std::fs::write(p, b"half").expect("write");
        }
        let staged = dd.root().join(format!("restore.db.partial-{gone}"));
        std::fs::write(&staged, b"half").expect("write");
        online(&conn, &dd.backups().join("b.db")).expect("backup");
        for p in &killed {
            assert!(!p.exists(), "{} left behind", p.display());
        }
        assert!(running.exists() && other.exists(), "not ours to remove");
        assert!(staged.exists(), "another folder");
        assert_eq!(remove_partials(dd.root()), 1);
        assert!(!staged.exists());
        assert_eq!(partial_pid("a.db.partial-12-shm"), Some(12));
        assert_eq!(partial_pid("a.db.partial-0"), None);
    }

    #[test]
    fn daily_takes_one_a_day_and_keeps_the_newest() {
        let (_tmp, dd, conn) = data_dir();
        let day = 86_400_000;
        std::fs::create_dir_all(dd.backups()).expect("dir");
        std::fs::write(dd.backups().join("cairn-manual-x.db"), b"x").expect("other");
        for d in 0..5 {
            assert!(daily(&dd, &conn, 3, d * day).expect("daily").is_some());
            assert!(daily(&dd, &conn, 3, d * day + 5).expect("again").is_none());
        }
        let names: Vec<String> = daily_backups(&dd)
            .expect("list")
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec![
                "cairn-1970-01-03.db",
                "cairn-1970-01-04.db",
                "cairn-1970-01-05.db"
            ]
        );
        assert!(dd.backups().join("cairn-manual-x.db").exists());
    }
}
