//! Automatic recovery of a damaged database: the worker runs it when any of its paths
//! meets damage (`Error::is_corrupt`: its start, the claimer, the writer, housekeeping and
//! the spool ingestion), and so does the next `cairn` command when no worker runs; both
//! hold the worker lock. Like `backup::restore`, it works on whole files and copies rows
//! verbatim (no table's writing module is involved: the rows are the ones those modules
//! wrote).
//!
//! 1. The newest backup that passes `quick_check` (daily or manual) is copied beside the
//!    database and migrated; with none, an empty database is the base.
//! 2. The damaged file's write lock is taken (best effort), so hooks wait on it and then
//!    spool.
//! 3. The damaged file and its WAL are copied to a scratch file, made readable there
//!    (`store::repair`: a broken header rebuilt, unreadable schema pages borrowed from the
//!    backup or a fresh database) and the WAL's frames past a torn or garbled one counted.
//! 4. Every row the scratch copy can still give that the backup lacks is copied into the
//!    base (`salvage`): sessions, prompts, jobs, observations, summaries, probed rowid by
//!    rowid, so one unreadable page costs only its rows, and each rowid that fails is
//!    counted. A row whose session is unreadable brings a minimal session row along.
//! 5. The damaged file is moved aside to `backups/cairn-damaged-<time>.db` and the base
//!    takes its place; the spool files applied since the last sound backup
//!    (`spool/applied/`) go back into the spool, to be applied again (idempotent: dedupe
//!    keys, prompt ids); the lock is held until every hook that opened the damaged file has
//!    given up on it.
//! 6. What was done, and how much could not be read, is returned (`Recovery`), and
//!    [`recover_and_report`] logs it and raises the notice `cairn status` shows.
//!
//! Hooks that meet the damaged file meanwhile cannot write it and spool their events; the
//! worker ingests them once it runs again on the recovered file (why the order above
//! matters: [`recover`]). A job whose status changed after the backup is pending again
//! there: running it again stores nothing twice (content hashes, one summary per turn).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::DataDir;
use crate::store::repair;

/// The tables salvaged, parents first, with their integer key.
const TABLES: &[&str] = &[
    "user_prompts",
    "pending_messages",
    "observations",
    "session_summaries",
];

/// How much longer than a hook waits for the database the recovery holds the damaged
/// file's write lock after the files are swapped.
pub const HOOK_GRACE: Duration = Duration::from_secs(1);

/// Consecutive missing rowids after which probing a table whose largest rowid cannot be
/// read stops.
const PROBE_GAP: i64 = 256;

/// Rows newer than the backup beyond which a table's largest rowid is taken for garbage.
const MAX_SPAN: i64 = 1_000_000;

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Where the damaged file was moved.
    pub damaged_kept_at: PathBuf,
    /// The backup restored; `None` when there was none usable (the base was empty).
    pub restored_from: Option<PathBuf>,
    /// The damaged file's header was broken and was rebuilt to read it.
    pub header_rebuilt: bool,
    /// The damaged file's schema could not be read and was borrowed to read it.
    pub schema_borrowed: bool,
    /// Rows copied back from the damaged file, per table.
    pub salvaged: Vec<(String, u64)>,
    /// Rows (or, for sessions, read failures) the damaged file could not give, per table.
    pub unreadable: Vec<(String, u64)>,
    /// Rows of a table whose pages (or indexes) the damaged file's integrity check names,
    /// per table: salvaged without an error but possibly damaged, or missing between
    /// readable rows (a damaged page can lose rows without an error).
    pub suspect: Vec<(String, u64)>,
    /// Tables whose rows past this rowid could be neither read nor counted (the end of the
    /// table is unreadable).
    pub cut_off: Vec<(String, i64)>,
    /// Transactions of the WAL past a torn or garbled frame, which SQLite does not read (at
    /// most one more than were lost).
    pub wal_unreadable: u64,
    /// Spool files applied since the last sound backup, put back in the spool to be
    /// applied again.
    pub respooled: usize,
}

impl Recovery {
    /// Rows and transactions that could not be read: what the recovery reports lost.
    pub fn unreadable_total(&self) -> u64 {
        self.unreadable.iter().map(|(_, n)| n).sum::<u64>() + self.wal_unreadable
    }

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
        let mut lost = list(&self.unreadable);
        if self.wal_unreadable > 0 {
            lost.push_str(&format!(
                "; up to {} transactions of the write-ahead log were torn",
                self.wal_unreadable
            ));
        }
        let suspect = list(&self.suspect);
        if suspect != "none" {
            lost.push_str(&format!(
                "; rows of damaged tables, salvaged but possibly damaged or missing between readable ones: {suspect}"
            ));
        }
        for (t, id) in &self.cut_off {
            lost.push_str(&format!("; {t} past row {id} could not be read or counted"));
        }
        let mut repaired = String::new();
        if self.header_rebuilt {
            repaired.push_str(", rebuilt its broken header to read it");
        }
        if self.schema_borrowed {
            repaired.push_str(", borrowed its unreadable schema to read it");
        }
        let respooled = match self.respooled {
            0 => String::new(),
            n => format!("; {n} spooled events applied since the backup are applied again"),
        };
        format!(
            "the database was damaged: cairn moved it to {}{repaired}, {from}, and salvaged the rows newer than that from the damaged file ({}); rows that could not be read: {lost}{respooled}",
            self.damaged_kept_at.display(),
            list(&self.salvaged),
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

/// The `-shm` companion (the WAL index) of a database path.
fn shm_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push("-shm");
    p.into()
}

/// Removes a database file and its companions.
fn remove_db_files(base: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = base.as_os_str().to_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// Looks for damage the way the worker does at its start, before anything is written or
/// applied to the database: a WAL torn or garbled past a commit (which SQLite would read
/// silently up to the break, `repair::torn_wal`), a file SQLite cannot open, a damaged page
/// anywhere (`quick_check`, not only when a query happens to read it). Returns the damage
/// found, as the error to recover from; other failures (a locked or read-only database)
/// are errors.
pub fn check(dir: &DataDir, lock_wait: Duration) -> Result<Option<Error>> {
    let damaged = |reason: String| {
        Ok(Some(Error::Damaged {
            path: dir.db(),
            reason,
        }))
    };
    if !dir.db().exists() {
        return Ok(None);
    }
    let torn = repair::torn_wal(&dir.db(), lock_wait);
    if torn > 0 {
        return damaged(format!(
            "its write-ahead log is torn: up to {torn} committed transactions cannot be read"
        ));
    }
    let conn = match db::open_data_dir(dir, OpenOptions::default()) {
        Ok(c) => c,
        Err(e) if e.is_corrupt() => return Ok(Some(e)),
        Err(e) => return Err(e),
    };
    match crate::store::backup::quick_check(&conn) {
        Ok(p) if p.is_empty() => match db::fts_problems(&conn) {
            p if p.is_empty() => Ok(None),
            p => damaged(p.join("; ")),
        },
        Ok(p) => damaged(p.join("; ")),
        Err(e) if e.is_corrupt() => Ok(Some(e)),
        Err(e) => Err(e),
    }
}

/// Runs [`recover`] on the data dir's damaged database, logs what it did and raises the
/// notice `cairn status` shows. The caller holds the worker lock and has closed its
/// connections; `lock_wait` is how long a hook waits for the database
/// (`capture.lock_wait_ms`).
pub fn recover_and_report(
    dir: &DataDir,
    cause: &Error,
    lock_wait: Duration,
    now: i64,
) -> Result<Recovery> {
    log::error!("the database is damaged ({cause}); recovering it from the newest backup");
    let done = recover(dir, now, lock_wait + HOOK_GRACE)?;
    let message = done.describe();
    log::warn!("{message}");
    if let Err(e) = crate::store::incidents::raise(dir, "recovered", &message, now) {
        log::error!("cannot record the notice for `cairn status`: {e}");
    }
    Ok(done)
}

/// What a reader that met damage does (the CLI, the MCP server, the viewer): when no worker
/// runs on the data dir, it takes the worker lock and runs [`recover_and_report`]
/// (`Some`); when a worker runs, that worker recovers the database (every path of it
/// detects damage) and this returns `None`. The caller has closed its connections.
pub fn recover_unless_worker(
    dir: &DataDir,
    cause: &Error,
    lock_wait: Duration,
    now: i64,
) -> Result<Option<Recovery>> {
    let Some(held) = crate::store::lock::WorkerLock::try_acquire(&dir.worker_lock(), now)? else {
        return Ok(None);
    };
    let done = recover_and_report(dir, cause, lock_wait, now);
    drop(held);
    done.map(Some)
}

/// Recovers the data dir's damaged database (see the module comment). The caller holds the
/// worker lock and has closed its connections to the damaged file. `hold` is how long the
/// damaged file's write lock is kept after the swap: longer than a hook waits for the
/// database before it spools its event (`capture.lock_wait_ms` plus [`HOOK_GRACE`]).
///
/// Hooks keep running meanwhile, so the rows are salvaged into the restored copy before it
/// takes the damaged file's place (a hook writing the new file during the salvage took ids
/// the salvaged rows then could not have), and the damaged file's write lock is held from
/// before the salvage until every hook that opened it has given up and spooled its event
/// (a hook that wrote it after the salvage read would have lost its event).
pub fn recover(dir: &DataDir, now: i64, hold: Duration) -> Result<Recovery> {
    let live = dir.db();
    let stamp: String = crate::clock::iso_utc(now)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    dir.ensure_sub(&dir.backups())?;
    let restored_from = candidates(dir).into_iter().find(|p| sound(p));
    let base = dir.root().join("cairn.db.recovering");
    let scratch = dir.root().join("cairn.db.salvaging");
    remove_db_files(&base);
    remove_db_files(&scratch);
    if let Some(from) = &restored_from {
        crate::store::paths::copy_private(from, &base)
            .map_err(|e| Error::io("cannot copy backup", from, e))?;
    }
    crate::store::paths::ensure_private_file(&base)?;

    // The WAL index as it was before any connection of this recovery rebuilt it: what
    // the WAL held when it was whole (`repair::unreadable_commits`).
    let kept_index = repair::kept_index(&live);
    let shm = std::fs::read(&kept_index)
        .or_else(|_| std::fs::read(shm_of(&live)))
        .ok();
    let _ = std::fs::remove_file(&kept_index);

    // Hooks off the damaged file: they wait, then spool. Best effort: a file too damaged
    // to lock is salvaged all the same. Never checkpointed on close (the damaged file is
    // kept as it was).
    let guard = Connection::open_with_flags(&live, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .and_then(|c| {
            c.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )?;
            c.busy_timeout(hold)?;
            c.execute_batch("BEGIN IMMEDIATE")?;
            Ok(c)
        })
        .map_err(|e| log::warn!("cannot hold the damaged database's write lock: {e}"))
        .ok();

    let result = (|| {
        // Migrated to this cairn's schema, the damaged file's rows copied in, then closed:
        // the last close checkpoints the WAL away, so the file moves alone.
        let mut conn = db::open(
            &base,
            OpenOptions {
                create: true,
                ..OpenOptions::default()
            },
        )?;
        let readable = readable_copy(&live, shm.as_deref(), &scratch, restored_from.as_deref())?;
        let rows = match readable.usable {
            true => salvage(&mut conn, &scratch).unwrap_or_else(|e| {
                log::error!("cannot salvage the damaged database's rows: {e}");
                Salvaged::nothing()
            }),
            false => Salvaged::nothing(),
        };
        drop(conn);
        Ok::<_, Error>((readable, rows))
    })();
    remove_db_files(&scratch);
    let (readable, rows) = match result {
        Ok(r) => r,
        Err(e) => {
            remove_db_files(&base);
            return Err(e);
        }
    };

    let damaged = dir.backups().join(format!("cairn-damaged-{stamp}.db"));
    crate::store::backup::move_aside(&live, &damaged)?;
    std::fs::rename(&base, &live).map_err(|e| Error::io("cannot move into place", &base, e))?;
    let respooled = respool(dir);
    if let Some(guard) = guard {
        // A hook that opened the damaged file before it moved is waiting for this lock:
        // held until it has given up.
        std::thread::sleep(hold);
        drop(guard);
    }
    Ok(Recovery {
        damaged_kept_at: damaged,
        restored_from,
        header_rebuilt: readable.header_rebuilt,
        schema_borrowed: readable.schema_borrowed,
        salvaged: rows.salvaged,
        unreadable: rows.unreadable,
        suspect: rows.suspect,
        cut_off: rows.cut_off,
        wal_unreadable: readable.wal_unreadable,
        respooled,
    })
}

/// Puts the spool files applied since the last sound backup back in the spool (oldest
/// first by name, as they were). Returns how many.
fn respool(dir: &DataDir) -> usize {
    let Ok(entries) = std::fs::read_dir(dir.spool_applied()) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(
            |e| match std::fs::rename(e.path(), dir.spool().join(e.file_name())) {
                Ok(()) => true,
                Err(err) => {
                    log::error!(
                        "cannot put the applied spool file {} back in the spool: {err}",
                        e.path().display()
                    );
                    false
                }
            },
        )
        .count()
}

/// What making the scratch copy readable found.
struct Readable {
    /// SQLite can read the copy's schema.
    usable: bool,
    header_rebuilt: bool,
    schema_borrowed: bool,
    wal_unreadable: u64,
}

/// Copies the damaged database (and its WAL) to `scratch` and makes the copy readable
/// (`store::repair`): its header rebuilt when SQLite cannot open it, then its schema pages
/// borrowed from `reference` (the backup restored) or from a fresh database when its
/// schema still cannot be read.
fn readable_copy(
    live: &Path,
    shm: Option<&[u8]>,
    scratch: &Path,
    reference: Option<&Path>,
) -> Result<Readable> {
    crate::store::paths::copy_private(live, scratch)
        .map_err(|e| Error::io("cannot copy the damaged database", live, e))?;
    let wal = std::fs::read(repair::wal_of(live)).unwrap_or_default();
    let wal_unreadable = repair::unreadable_commits(&wal, shm);
    if !wal.is_empty() {
        crate::store::paths::create_private(&repair::wal_of(scratch))
            .and_then(|mut f| std::io::Write::write_all(&mut f, &wal))
            .map_err(|e| Error::io("cannot copy the damaged WAL", live, e))?;
    }
    let mut out = Readable {
        usable: repair::schema_readable(scratch),
        header_rebuilt: false,
        schema_borrowed: false,
        wal_unreadable,
    };
    // Each repair is best effort: a file nothing can make readable still lets the
    // recovery restore the backup and put the applied spool files back.
    if !out.usable {
        log::warn!("the damaged database cannot be opened: rebuilding its header");
        match repair::rebuild_header(scratch, db::SCHEMA_VERSION) {
            Ok(()) => {
                out.header_rebuilt = true;
                out.usable = repair::schema_readable(scratch);
            }
            Err(e) => log::error!("{e}"),
        }
    }
    if !out.usable {
        log::warn!("the damaged database's schema cannot be read: borrowing it");
        let fresh = scratch.with_extension("reference");
        remove_db_files(&fresh);
        let borrowed = match reference {
            Some(r) => Ok(r.to_path_buf()),
            None => db::open(&fresh, OpenOptions::default()).and_then(|c| {
                c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
                Ok(fresh.clone())
            }),
        }
        .and_then(|from| repair::borrow_schema(scratch, &from, db::SCHEMA_VERSION));
        remove_db_files(&fresh);
        match borrowed {
            Ok(()) => {
                out.schema_borrowed = true;
                out.usable = repair::schema_readable(scratch);
            }
            Err(e) => log::error!("cannot borrow a schema to read the damaged database: {e}"),
        }
    }
    if !out.usable {
        log::error!("the damaged database cannot be read at all: nothing salvaged from it");
    }
    Ok(out)
}

type Counts = Vec<(String, u64)>;

/// What the salvage copied and could not read.
struct Salvaged {
    salvaged: Counts,
    unreadable: Counts,
    suspect: Counts,
    cut_off: Vec<(String, i64)>,
}

impl Salvaged {
    /// Nothing could be read: every table cut off from its start.
    fn nothing() -> Salvaged {
        Salvaged {
            salvaged: Vec::new(),
            unreadable: Vec::new(),
            suspect: Vec::new(),
            cut_off: std::iter::once("sessions")
                .chain(TABLES.iter().copied())
                .map(|t| (t.to_string(), 0))
                .collect(),
        }
    }
}

/// Copies every readable row of `damaged` that `conn`'s database lacks: the sessions
/// (scanned until a read fails), then the rows of [`TABLES`] past each table's largest id
/// in `conn`, one by one.
fn salvage(conn: &mut Connection, damaged: &Path) -> Result<Salvaged> {
    // The scratch copy, which nothing else opens: read-write, so that SQLite can rebuild
    // its WAL index.
    conn.execute("ATTACH DATABASE ?1 AS damaged", [damaged.to_string_lossy()])?;
    // For the rows of a file older than migration 0018 (`copied_columns`).
    db::register_functions(conn)?;
    let result = (|| -> Result<Salvaged> {
        let mut out = Salvaged {
            salvaged: Vec::new(),
            unreadable: Vec::new(),
            suspect: Vec::new(),
            cut_off: Vec::new(),
        };
        let damaged_tables = damaged_tables(conn);
        let suspect = |table: &str| damaged_tables.as_ref().is_none_or(|d| d.contains(table));
        let (s, u) = salvage_sessions(conn);
        out.salvaged.push(("sessions".to_string(), s));
        out.unreadable.push(("sessions".to_string(), u));
        if suspect("sessions") {
            out.suspect.push(("sessions".to_string(), s));
        }
        for table in TABLES {
            let t = salvage_table(conn, table)?;
            out.salvaged.push(((*table).to_string(), t.copied));
            if suspect(table) {
                out.suspect
                    .push(((*table).to_string(), t.copied + t.missing));
            }
            out.unreadable.push(((*table).to_string(), t.unreadable));
            if let Some(id) = t.cut_off {
                out.cut_off.push(((*table).to_string(), id));
            }
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
        Ok(out)
    })();
    let detached = conn.execute("DETACH DATABASE damaged", []);
    let out = result?;
    detached?;
    Ok(out)
}

/// The tables of the attached damaged file whose b-trees, or whose indexes, its integrity
/// check names (`Tree <root> page …`, `… index <name>`); `None` when the check cannot run
/// (every table is then suspect).
fn damaged_tables(conn: &Connection) -> Option<std::collections::HashSet<String>> {
    let objects: Vec<(String, String, i64)> = conn
        .prepare("SELECT name, tbl_name, rootpage FROM damaged.sqlite_master")
        .ok()?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()?;
    let lines: Vec<String> = conn
        .prepare("PRAGMA damaged.integrity_check(1000)")
        .ok()?
        .query_map([], |r| r.get(0))
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()?;
    let mut out = std::collections::HashSet::new();
    for line in lines.iter().filter(|l| *l != "ok") {
        let root = line
            .strip_prefix("Tree ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<i64>().ok());
        for (name, table, rootpage) in &objects {
            let named = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == name);
            if root == Some(*rootpage) || (line.contains("index") && named) {
                out.insert(table.clone());
            }
        }
        // A page no tree can claim, a broken free list: no table is named, so any may be
        // wrong.
        if root.is_none() && !line.contains("index") {
            return None;
        }
    }
    Some(out)
}

/// Sessions have no integer key: scanned in key order, and past a read failure resumed
/// after the last key read, until a read fails twice at the same place; the columns both
/// schemas have are copied ([`copied_columns`]). Returns (copied, read failures). Each row
/// is its own transaction: SQLite may roll back a whole transaction on a corrupt read,
/// which must not cost the rows already copied.
fn salvage_sessions(conn: &mut Connection) -> (u64, u64) {
    let mut copied = 0;
    let mut failed = 0;
    let mut ids: Vec<String> = Vec::new();
    let scan = |conn: &Connection, after: Option<&str>, ids: &mut Vec<String>| -> bool {
        let Ok(mut stmt) = conn.prepare(
            "SELECT session_id FROM damaged.sessions WHERE ?1 IS NULL OR session_id > ?1 ORDER BY session_id",
        ) else {
            return false;
        };
        let Ok(mut rows) = stmt.query([after]) else {
            return false;
        };
        loop {
            match rows.next() {
                Ok(Some(r)) => match r.get::<_, String>(0) {
                    Ok(id) => ids.push(id),
                    Err(_) => return false,
                },
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    };
    if !scan(conn, None, &mut ids) {
        failed += 1;
        // Once more from the end: the rows past the broken page, read backwards.
        let before = ids.len();
        let mut tail = Vec::new();
        if let Ok(mut stmt) =
            conn.prepare("SELECT session_id FROM damaged.sessions ORDER BY session_id DESC")
            && let Ok(mut rows) = stmt.query([])
        {
            while let Ok(Some(r)) = rows.next() {
                match r.get::<_, String>(0) {
                    Ok(id) if ids.last().is_none_or(|l| *l < id) => tail.push(id),
                    _ => break,
                }
            }
        }
        ids.extend(tail);
        log::debug!(
            "sessions: {} read forwards, {} backwards",
            before,
            ids.len() - before
        );
    }
    let Ok((into, from)) = copied_columns(conn, "sessions") else {
        return (copied, failed + 1);
    };
    let copy = format!(
        "INSERT OR IGNORE INTO main.sessions ({into}) SELECT {from} FROM damaged.sessions WHERE session_id = ?1"
    );
    for id in ids {
        let n = db::write(conn, |tx| Ok(tx.execute(&copy, [&id])?));
        match n {
            Ok(n) => copied += n as u64,
            Err(_) => failed += 1,
        }
    }
    (copied, failed)
}

/// The columns of `table` a row is written with (all but the generated ones, the
/// `project_key` of migration 0008), and what each is read from in the damaged file: the
/// same column; for the `pieces_text` that a file older than migration 0018 lacks, the
/// pieces made from the row's text ([`db::CODE_PIECES_OF`]); a column it lacks otherwise
/// is left to its default. Both comma-separated.
fn copied_columns(conn: &Connection, table: &str) -> Result<(String, String)> {
    let names = |schema: &str| -> Result<Vec<String>> {
        Ok(conn
            .prepare("SELECT name FROM pragma_table_xinfo(?1, ?2) WHERE hidden = 0")?
            .query_map([table, schema], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    };
    let damaged = names("damaged")?;
    let pieces_of = db::CODE_PIECES_OF
        .iter()
        .find(|(t, _)| *t == table)
        .map(|(_, text)| format!("cairn_code_pieces({text})"));
    let (mut into, mut from) = (Vec::new(), Vec::new());
    for name in names("main")? {
        let source = if damaged.contains(&name) {
            name.clone()
        } else if let Some(pieces) = pieces_of.as_ref().filter(|_| name == "pieces_text") {
            pieces.clone()
        } else {
            continue;
        };
        into.push(name);
        from.push(source);
    }
    Ok((into.join(", "), from.join(", ")))
}

/// What salvaging one table did.
struct TableSalvage {
    copied: u64,
    unreadable: u64,
    /// Rowids below the table's largest that are not there (deleted, or lost without an
    /// error with a damaged page).
    missing: u64,
    /// The rowid past which nothing could be read or counted, when the table's end could
    /// not be read.
    cut_off: Option<i64>,
}

/// Copies the rows of `table` with ids past the largest in `main`, each in its own
/// transaction (an unreadable one is counted and skipped).
fn salvage_table(conn: &mut Connection, table: &str) -> Result<TableSalvage> {
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
    let (into, from) = copied_columns(conn, table)?;
    let copy = format!(
        "INSERT OR IGNORE INTO main.{table} ({into}) SELECT {from} FROM damaged.{table} WHERE id = ?1"
    );
    let exists = format!("SELECT count(*) FROM damaged.{table} WHERE id = ?1");
    let mut out = TableSalvage {
        copied: 0,
        unreadable: 0,
        missing: 0,
        cut_off: None,
    };
    // Failed probes since the last readable rowid: counted once a later rowid reads (they
    // lay between readable rows), else the table's end is unknown past that rowid.
    let mut pending_failures = 0;
    let mut last_read = start;
    let mut gap = 0;
    let mut id = start;
    // The largest rowid read may be wrong (a damaged rightmost page): probing goes on past
    // it until `PROBE_GAP` rowids in a row give nothing.
    // A garbled page can make the largest rowid absurd: past `MAX_SPAN` rows newer than
    // the backup it is not believed, and probing stops at the first long gap instead.
    let end = end.filter(|e| e - start <= MAX_SPAN).unwrap_or(start);
    loop {
        id += 1;
        if id > end && gap >= PROBE_GAP {
            break;
        }
        match conn.query_row(&exists, [id], |r| r.get::<_, i64>(0)) {
            Ok(0) => {
                gap += 1;
                out.missing += u64::from(id <= end);
                continue;
            }
            Ok(_) => {
                gap = 0;
                out.unreadable += pending_failures;
                pending_failures = 0;
                last_read = id;
            }
            Err(_) => {
                if id <= end {
                    out.unreadable += 1;
                } else {
                    pending_failures += 1;
                }
                gap += 1;
                continue;
            }
        }
        let n = db::write(conn, |tx| {
            tx.execute(&parent, params![id])?;
            Ok(tx.execute(&copy, params![id])?)
        });
        match n {
            Ok(n) => out.copied += n as u64,
            Err(_) => out.unreadable += 1,
        }
    }
    if pending_failures > 0 {
        out.cut_off = Some(last_read);
    }
    Ok(out)
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

    /// Closes `conn` and overwrites the root page of its index `name` with garbage.
    fn smash_index(conn: Connection, path: &Path, name: &str) {
        let root: i64 = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .expect("root");
        drop(conn);
        smash(path, root as u64);
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
        smash_index(conn, &dd.db(), "user_prompts_project_time");
        let check =
            db::open_data_dir(&dd, OpenOptions::default()).and_then(|c| db::integrity_problems(&c));
        assert!(check.is_err() || !check.expect("checked").is_empty());

        let r = recover(&dd, 5_000, Duration::ZERO).expect("recover");
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

    /// A damaged file of an older schema (before migration 0018): its rows are salvaged
    /// into the new one, given the pieces of their code words on the way.
    #[test]
    fn rows_of_an_older_damaged_file_are_salvaged_into_the_new_schema() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        dd.ensure().expect("dir");
        let conn = Connection::open(dd.db()).expect("open");
        db::at_version(&conn, 17);
        conn.execute(
            "INSERT INTO sessions (session_id, project, started_at, updated_at)
             VALUES ('s', 'p', 1, 1)",
            [],
        )
        .expect("session");
        for n in 1..=60 {
            conn.execute(
                "INSERT INTO observations
                     (session_id, project, type, title, narrative, content_hash, created_at)
                 VALUES ('s', 'p', 'change', ?1, ?2, ?3, ?4)",
                params![
                    format!("Fix RedundantParentheses case {n}"),
                    "x".repeat(400),
                    format!("h{n}"),
                    n
                ],
            )
            .expect("row");
        }
        smash_index(conn, &dd.db(), "observations_search");

        let r = recover(&dd, 5_000, Duration::ZERO).expect("recover");
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert!(db::integrity_problems(&conn).expect("integrity").is_empty());
        let (rows, found): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM observations),
                        (SELECT count(*) FROM observations_fts
                         WHERE observations_fts MATCH 'redundant AND parentheses')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("count");
        assert_eq!((rows, found), (60, 60), "{}", r.describe());
    }

    #[test]
    fn sessions_past_a_broken_page_are_read_from_the_end() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        // Long ids: the sessions' tree (keyed by id) spans many leaf pages.
        let id = |n: i64| format!("session-{n:04}-{}", "y".repeat(300));
        for n in 1..=120 {
            add(&mut conn, &id(n), n);
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        // A leaf in the middle of the key order: the scan forwards stops there.
        let leaves: Vec<i64> = conn
            .prepare("SELECT pageno FROM dbstat WHERE name = 'sessions' AND pagetype = 'leaf' ORDER BY path")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("leaves")
            .collect::<rusqlite::Result<_>>()
            .expect("leaves");
        assert!(leaves.len() >= 5, "{leaves:?}");
        drop(conn);
        smash(&dd.db(), leaves[leaves.len() / 2] as u64);

        let r = recover(&dd, 5_000, Duration::ZERO).expect("recover");
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let has = |n: i64| {
            conn.query_row(
                "SELECT count(*) FROM sessions WHERE session_id = ?1",
                [id(n)],
                |r| r.get::<_, i64>(0),
            )
            .expect("count")
                == 1
        };
        assert!(has(1) && has(120), "{}", r.describe());
        // Copied from the damaged file's sessions, not made again from their prompts: the
        // leaves before the broken one forwards, and the ones after it backwards.
        let copied = |table: &str| {
            r.salvaged
                .iter()
                .find(|(t, _)| t == table)
                .map_or(0, |(_, n)| *n)
        };
        let per_leaf = 120 / leaves.len() as u64 + 1;
        assert!(copied("sessions") >= 120 - 2 * per_leaf, "{}", r.describe());
        assert!(
            r.unreadable.contains(&("sessions".to_string(), 2)),
            "{}",
            r.describe()
        );
    }

    #[test]
    fn a_broken_header_is_damage_and_garbage_is_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        for n in 1..=5 {
            add(&mut conn, "s", n);
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        drop(conn);
        let mut bytes = std::fs::read(dd.db()).expect("read");
        bytes[..100].fill(0);
        std::fs::write(dd.db(), &bytes).expect("zero the header");
        let found = check(&dd, Duration::from_secs(1))
            .expect("check")
            .expect("damage found");
        assert!(found.is_corrupt(), "{found}");
        let r = recover(&dd, 5_000, Duration::ZERO).expect("recover");
        assert!(r.header_rebuilt, "{}", r.describe());
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let prompts: i64 = conn
            .query_row("SELECT count(*) FROM user_prompts", [], |r| r.get(0))
            .expect("count");
        assert_eq!(prompts, 5, "{}", r.describe());
        drop(conn);
        assert!(check(&dd, Duration::from_secs(1)).expect("check").is_none());

        std::fs::write(dd.db(), vec![b'#'; 8192]).expect("garbage");
        let err = check(&dd, Duration::from_secs(1)).expect_err("not a database");
        assert!(!err.is_corrupt(), "{err}");
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
        let r = recover(&dd, 5_000, Duration::ZERO).expect("recover");
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
