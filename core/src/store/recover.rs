//! Automatic recovery of a damaged database: the worker runs it when SQLite reports the
//! file corrupt. Like `backup::restore`, it works on whole files and copies rows verbatim
//! (no table's writing module is involved: the rows are the ones those modules wrote).
//!
//! 1. The newest backup that passes `quick_check` (daily or manual) is copied beside the
//!    database and migrated; with none, an empty database is the base.
//! 2. The damaged file's write lock is taken, so hooks wait on it and then spool.
//! 3. Every row the damaged file (with its WAL, which holds the latest commits) can still
//!    give that the backup lacks is copied into the copy (`salvage`): sessions, prompts,
//!    jobs, observations, summaries, row by row, so one unreadable page costs only its
//!    rows. A row whose session is unreadable brings a minimal session row along.
//! 4. The damaged file is moved aside to `backups/cairn-damaged-<time>.db` and the copy
//!    takes its place; the lock is held until every hook that opened the damaged file has
//!    given up on it (`capture.lock_wait_ms`).
//! 5. What was done, and how many rows could not be read, is returned for the caller to
//!    log and raise as a notice (`store::incidents`).
//!
//! Hooks that meet the damaged file meanwhile cannot write it and spool their events; the
//! worker ingests them once it runs again on the recovered file (why the order above
//! matters: [`recover`]). A job whose status changed after the backup is pending again
//! there: running it again stores nothing twice (content hashes, one summary per turn).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::DataDir;

/// The tables salvaged, parents first, with their integer key.
const TABLES: &[&str] = &[
    "user_prompts",
    "pending_messages",
    "observations",
    "session_summaries",
];

/// How much longer than a hook waits for the database the recovery holds the damaged
/// file's write lock after the files are swapped.
const HOOK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Consecutive missing ids after which probing a table whose largest id cannot be read
/// stops.
const PROBE_GAP: i64 = 256;

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Where the damaged file was moved.
    pub damaged_kept_at: PathBuf,
    /// The backup restored; `None` when there was none usable (the base was empty).
    pub restored_from: Option<PathBuf>,
    /// Rows copied back from the damaged file, per table.
    pub salvaged: Vec<(String, u64)>,
    /// Rows (or, for sessions, read failures) the damaged file could not give, per table.
    pub unreadable: Vec<(String, u64)>,
}

impl Recovery {
    /// One line for the log and the notice.
    pub fn describe(&self) -> String {
        let from = match &self.restored_from {
            Some(p) => format!("restored the backup {}", p.display()),
            None => "found no usable backup and started from an empty database".to_string(),
        };
        let list = |v: &[(String, u64)]| {
            let parts: Vec<String> = v
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(t, n)| format!("{n} {t}"))
                .collect();
            if parts.is_empty() {
                "none".to_string()
            } else {
                parts.join(", ")
            }
        };
        format!(
            "the database was damaged: cairn moved it to {}, {from}, and salvaged the rows newer than that from the damaged file ({}); rows that could not be read: {}",
            self.damaged_kept_at.display(),
            list(&self.salvaged),
            list(&self.unreadable)
        )
    }
}

/// The backups in `backups/` that could be restored, newest first (by modification time):
/// daily and manual ones, and the copies kept by earlier recoveries are not among them.
fn candidates(dir: &DataDir) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir.backups()) else {
        return Vec::new();
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("cairn-")
                && name.ends_with(".db")
                && !name.starts_with("cairn-damaged-")
                && !name.contains(".partial")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    files.sort();
    files.into_iter().rev().map(|(_, p)| p).collect()
}

/// True when `path` is a sound cairn database (opens read-only, passes `quick_check`).
fn sound(path: &Path) -> bool {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(Error::from)
        .and_then(|mut c| {
            db::trace_if_asked(&mut c);
            crate::store::backup::quick_check(&c)
        })
        .is_ok_and(|problems| problems.is_empty())
}

/// Recovers the data dir's damaged database (see the module comment). The caller holds the
/// worker lock and has closed its connections to the damaged file. `hook_wait` is how long
/// a hook waits for the database before it spools its event (`capture.lock_wait_ms`).
///
/// Hooks keep running meanwhile, so the rows are salvaged into the restored copy before it
/// takes the damaged file's place (a hook writing the new file during the salvage took ids
/// the salvaged rows then could not have), and the damaged file's write lock is held from
/// before the salvage until every hook that opened it has given up and spooled its event
/// (a hook that wrote it after the salvage read would have lost its event).
pub fn recover(dir: &DataDir, now: i64, hook_wait: std::time::Duration) -> Result<Recovery> {
    let live = dir.db();
    let stamp: String = crate::clock::iso_utc(now)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    dir.ensure_sub(&dir.backups())?;
    let restored_from = candidates(dir).into_iter().find(|p| sound(p));
    let base = dir.root().join("cairn.db.recovering");
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = base.as_os_str().to_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    if let Some(from) = &restored_from {
        std::fs::copy(from, &base).map_err(|e| Error::io("cannot copy backup", from, e))?;
    }
    crate::store::paths::ensure_private_file(&base)?;

    // Hooks off the damaged file: they wait, then spool. Best effort: a file too damaged
    // to lock is salvaged all the same.
    let guard = Connection::open_with_flags(&live, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .and_then(|c| {
            c.busy_timeout(hook_wait + HOOK_GRACE)?;
            c.execute_batch("BEGIN IMMEDIATE")?;
            Ok(c)
        })
        .map_err(|e| log::warn!("cannot hold the damaged database's write lock: {e}"))
        .ok();

    // Migrated to this cairn's schema, the damaged file's rows copied in, then closed: the
    // last close checkpoints the WAL away, so the file moves alone.
    let (salvaged, unreadable) = {
        let mut conn = db::open(
            &base,
            OpenOptions {
                create: true,
                ..OpenOptions::default()
            },
        )?;
        salvage(&mut conn, &live)?
    };

    let damaged = dir.backups().join(format!("cairn-damaged-{stamp}.db"));
    crate::store::backup::move_aside(&live, &damaged)?;
    std::fs::rename(&base, &live).map_err(|e| Error::io("cannot move into place", &base, e))?;
    if let Some(guard) = guard {
        // A hook that opened the damaged file before it moved is waiting for this lock:
        // held until it has given up.
        std::thread::sleep(hook_wait + HOOK_GRACE);
        drop(guard);
    }
    Ok(Recovery {
        damaged_kept_at: damaged,
        restored_from,
        salvaged,
        unreadable,
    })
}

type Counts = Vec<(String, u64)>;

/// `file:` URI opening `path` read-only (every byte but unreserved ones and `/`
/// percent-encoded).
fn read_only_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro");
    uri
}

/// Copies every readable row of `damaged` that `conn`'s database lacks: the sessions
/// (scanned until a read fails), then the rows of [`TABLES`] past each table's largest id
/// in `conn`, one by one.
fn salvage(conn: &mut Connection, damaged: &Path) -> Result<(Counts, Counts)> {
    // Read only: the damaged file is never written, and a write transaction of `conn`
    // must not wait for the write lock the recovery holds on it.
    conn.execute("ATTACH DATABASE ?1 AS damaged", [read_only_uri(damaged)])?;
    let result = (|| -> Result<(Counts, Counts)> {
        let mut salvaged = Vec::new();
        let mut unreadable = Vec::new();
        let (s, u) = salvage_sessions(conn)?;
        salvaged.push(("sessions".to_string(), s));
        unreadable.push(("sessions".to_string(), u));
        for table in TABLES {
            let (s, u) = salvage_table(conn, table)?;
            salvaged.push(((*table).to_string(), s));
            unreadable.push(((*table).to_string(), u));
        }
        db::write(conn, |tx| {
            tx.execute(
                "UPDATE sessions SET prompt_counter = (
                     SELECT max(p.prompt_number) FROM user_prompts p
                     WHERE p.session_id = sessions.session_id)
                 WHERE prompt_counter < (
                     SELECT coalesce(max(p.prompt_number), 0) FROM user_prompts p
                     WHERE p.session_id = sessions.session_id)",
                [],
            )?;
            Ok(())
        })?;
        Ok((salvaged, unreadable))
    })();
    let detached = conn.execute("DETACH DATABASE damaged", []);
    let out = result?;
    detached?;
    Ok(out)
}

/// Sessions have no integer key: scanned in order until a read fails. Returns (copied,
/// read failures). Each row is its own transaction: SQLite may roll back a whole
/// transaction on a corrupt read, which must not cost the rows already copied.
fn salvage_sessions(conn: &mut Connection) -> Result<(u64, u64)> {
    let mut copied = 0;
    let mut failed = 0;
    let ids: Vec<String> = {
        let mut stmt = conn.prepare("SELECT session_id FROM damaged.sessions")?;
        let mut rows = stmt.query([])?;
        let mut ids = Vec::new();
        loop {
            match rows.next() {
                Ok(Some(r)) => ids.push(r.get(0)?),
                Ok(None) => break,
                Err(_) => {
                    failed += 1;
                    break;
                }
            }
        }
        ids
    };
    for id in ids {
        let n = db::write(conn, |tx| {
            Ok(tx.execute(
                "INSERT OR IGNORE INTO main.sessions SELECT * FROM damaged.sessions WHERE session_id = ?1",
                [&id],
            )?)
        });
        match n {
            Ok(n) => copied += n as u64,
            Err(_) => failed += 1,
        }
    }
    Ok((copied, failed))
}

/// The columns of `table` a row is written with: all but the generated ones (the
/// `project_key` of migration 0008), comma-separated.
fn stored_columns(conn: &Connection, table: &str) -> Result<String> {
    let names = conn
        .prepare("SELECT name FROM pragma_table_xinfo(?1, 'main') WHERE hidden = 0")?
        .query_map([table], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names.join(", "))
}

/// Copies the rows of `table` with ids past the largest in `main`, each in its own
/// transaction (an unreadable one is counted and skipped). Returns (copied, unreadable).
fn salvage_table(conn: &mut Connection, table: &str) -> Result<(u64, u64)> {
    let start: i64 = conn.query_row(
        &format!("SELECT coalesce(max(id), 0) FROM main.{table}"),
        [],
        |r| r.get(0),
    )?;
    let end: Option<i64> = conn
        .query_row(
            &format!("SELECT coalesce(max(id), 0) FROM damaged.{table}"),
            [],
            |r| r.get(0),
        )
        .ok();
    let parent = format!(
        "INSERT OR IGNORE INTO main.sessions (session_id, project, started_at, updated_at)
         SELECT session_id, project, created_at, created_at FROM damaged.{table}
         WHERE id = ?1 AND session_id IS NOT NULL"
    );
    let columns = stored_columns(conn, table)?;
    let copy = format!(
        "INSERT OR IGNORE INTO main.{table} ({columns}) SELECT {columns} FROM damaged.{table} WHERE id = ?1"
    );
    let exists = format!("SELECT count(*) FROM damaged.{table} WHERE id = ?1");
    let mut copied = 0;
    let mut unreadable = 0;
    let mut gap = 0;
    let mut id = start;
    loop {
        id += 1;
        match end {
            Some(end) if id > end => break,
            None if gap >= PROBE_GAP => break,
            _ => {}
        }
        match conn.query_row(&exists, [id], |r| r.get::<_, i64>(0)) {
            Ok(0) => {
                gap += 1;
                continue;
            }
            Ok(_) => gap = 0,
            Err(_) => {
                unreadable += 1;
                gap += 1;
                continue;
            }
        }
        let n = db::write(conn, |tx| {
            tx.execute(&parent, params![id])?;
            Ok(tx.execute(&copy, params![id])?)
        });
        match n {
            Ok(n) => copied += n as u64,
            Err(_) => unreadable += 1,
        }
    }
    Ok((copied, unreadable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    fn add(conn: &mut Connection, session: &str, n: i64) {
        db::write(conn, |tx| {
            crate::memory::sessions::ensure(tx, session, "p", "/p", n)?;
            crate::memory::sessions::record_prompt(
                tx,
                &crate::memory::sessions::NewPrompt {
                    session_id: session,
                    project: "p",
                    cwd: "/p",
                    prompt_id: None,
                    text: &format!("prompt {n} {}", "x".repeat(600)),
                },
                n,
            )?;
            Ok(())
        })
        .expect("add");
    }

    /// Overwrites page `page` (1-based) of the file with garbage.
    fn smash(path: &Path, page: u64) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        f.seek(SeekFrom::Start((page - 1) * 4096)).expect("seek");
        f.write_all(&[0xA5; 4096]).expect("smash");
        f.sync_all().expect("sync");
    }

    #[test]
    fn a_damaged_database_is_restored_and_its_newer_rows_salvaged() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        for n in 1..=3 {
            add(&mut conn, "old", n);
        }
        crate::store::backup::daily(&dd, &conn, 7, 1_000).expect("backup");
        for n in 1..=40 {
            add(&mut conn, "new", n);
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        // An index of user_prompts, damaged in the live file.
        let root: i64 = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'user_prompts_project_time'",
                [],
                |r| r.get(0),
            )
            .expect("root");
        drop(conn);
        smash(&dd.db(), root as u64);
        let check =
            db::open_data_dir(&dd, OpenOptions::default()).and_then(|c| db::integrity_problems(&c));
        assert!(check.is_err() || !check.expect("checked").is_empty());

        let r = recover(&dd, 5_000, std::time::Duration::ZERO).expect("recover");
        assert!(r.restored_from.is_some());
        assert!(r.damaged_kept_at.exists());
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert!(db::integrity_problems(&conn).expect("integrity").is_empty());
        let prompts: i64 = conn
            .query_row("SELECT count(*) FROM user_prompts", [], |r| r.get(0))
            .expect("count");
        assert_eq!(prompts, 43, "{}", r.describe());
        let counter: i64 = conn
            .query_row(
                "SELECT prompt_counter FROM sessions WHERE session_id = 'new'",
                [],
                |r| r.get(0),
            )
            .expect("counter");
        assert_eq!(counter, 40);
        assert!(r.describe().contains("40 user_prompts"), "{}", r.describe());
    }

    #[test]
    fn unreadable_rows_are_counted_not_fatal() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        add(&mut conn, "s", 1);
        for n in 2..=60 {
            add(&mut conn, "s", n);
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        // A leaf page of user_prompts itself: its rows are lost, the others salvaged.
        let leaf: i64 = conn
            .query_row(
                "SELECT max(pageno) FROM dbstat WHERE name = 'user_prompts' AND pagetype = 'leaf'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        drop(conn);
        if leaf > 0 {
            smash(&dd.db(), leaf as u64);
        }
        let r = recover(&dd, 5_000, std::time::Duration::ZERO).expect("recover");
        assert_eq!(r.restored_from, None);
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let prompts: i64 = conn
            .query_row("SELECT count(*) FROM user_prompts", [], |r| r.get(0))
            .expect("count");
        assert!(prompts > 0 && prompts <= 60, "{prompts}: {}", r.describe());
        if leaf > 0 {
            assert!(prompts < 60, "{}", r.describe());
            assert!(r.describe().contains("could not be read"));
        }
    }
}
