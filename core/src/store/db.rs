//! Opening the database: pragmas, the switch to WAL, migrations, and the one way to write.
//!
//! Invariants:
//! - every connection sets `busy_timeout` first, then checks the journal mode and switches
//!   to WAL only when needed (the switch does not wait on the busy handler, so it is retried
//!   here with jitter), then `foreign_keys=ON` and `synchronous=NORMAL`;
//! - every write goes through [`write`], a `BEGIN IMMEDIATE` transaction;
//! - a database from a newer cairn, or a SQLite file that is not cairn's, is refused before
//!   anything is written to it.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::error::{Error, Result};
use crate::store::bm25;
use crate::store::paths::{DataDir, ensure_private_file};

/// The embedded migrations, applied in order. Never edit one once shipped.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_init",
        include_str!("../../../migrations/0001_init.sql"),
    ),
    (
        "0002_search_covering",
        include_str!("../../../migrations/0002_search_covering.sql"),
    ),
    (
        "0003_embeddings",
        include_str!("../../../migrations/0003_embeddings.sql"),
    ),
    (
        "0004_model_calls",
        include_str!("../../../migrations/0004_model_calls.sql"),
    ),
    (
        "0005_transcripts",
        include_str!("../../../migrations/0005_transcripts.sql"),
    ),
    (
        "0006_forgotten",
        include_str!("../../../migrations/0006_forgotten.sql"),
    ),
    (
        "0007_model_call_cost",
        include_str!("../../../migrations/0007_model_call_cost.sql"),
    ),
    (
        "0008_fts_project",
        include_str!("../../../migrations/0008_fts_project.sql"),
    ),
    (
        "0009_type_index",
        include_str!("../../../migrations/0009_type_index.sql"),
    ),
    (
        "0010_worker_provider",
        include_str!("../../../migrations/0010_worker_provider.sql"),
    ),
    (
        "0011_memory_given",
        include_str!("../../../migrations/0011_memory_given.sql"),
    ),
    (
        "0012_sync",
        include_str!("../../../migrations/0012_sync.sql"),
    ),
    (
        "0013_schema_version",
        include_str!("../../../migrations/0013_schema_version.sql"),
    ),
    (
        "0014_embedding_parts",
        include_str!("../../../migrations/0014_embedding_parts.sql"),
    ),
    (
        "0015_files_index",
        include_str!("../../../migrations/0015_files_index.sql"),
    ),
    (
        "0016_memory_given_agent",
        include_str!("../../../migrations/0016_memory_given_agent.sql"),
    ),
    (
        "0017_memory_given_compaction",
        include_str!("../../../migrations/0017_memory_given_compaction.sql"),
    ),
    (
        "0018_code_pieces",
        include_str!("../../../migrations/0018_code_pieces.sql"),
    ),
    (
        "0019_embeddings_scan",
        include_str!("../../../migrations/0019_embeddings_scan.sql"),
    ),
];

/// The first schema version that keeps its number in the `schema_version` table too.
const VERSION_ROW_SINCE: i64 = 13;

/// The schema version this cairn writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a connection waits on other writers before giving up.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    pub busy_timeout: Duration,
    /// Create the database file when missing (hooks and the worker do; most CLI commands
    /// do not, so that a typo in `CAIRN_DATA_DIR` is an error, not a new empty database).
    pub create: bool,
    /// Upgrade an older database (a new one is always set up). Hooks do not: a migration
    /// may rebuild indexes for seconds, which no hook may keep Claude Code waiting for; the
    /// hook's event is spooled instead ([`Error::UpgradePending`]) and the worker it starts
    /// upgrades the database and takes the event in.
    pub upgrade: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(10),
            create: true,
            upgrade: true,
        }
    }
}

/// Opens (and if allowed creates) the database of a data dir, migrated and ready.
pub fn open_data_dir(dir: &DataDir, opts: OpenOptions) -> Result<Connection> {
    let path = dir.db();
    if opts.create {
        let fresh = !path.exists();
        dir.ensure()?;
        ensure_private_file(&path)?;
        if fresh {
            // Room to count events lost to a full disk later (`incidents`).
            if let Err(e) = crate::store::incidents::prepare_lost(dir) {
                log::warn!("{e}");
            }
        }
    } else if !path.exists() {
        return Err(Error::Invalid(format!(
            "no cairn database at {} (is CAIRN_DATA_DIR or --data-dir right? the hooks create it at the first Claude Code event; `cairn demo` shows cairn on a data dir of its own)",
            path.display()
        )));
    }
    open(&path, opts)
}

/// Opens a database file, migrated and ready. `:memory:` is accepted for tests.
pub fn open(path: &Path, opts: OpenOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI
        | if opts.create {
            OpenFlags::SQLITE_OPEN_CREATE
        } else {
            OpenFlags::empty()
        };
    let mut conn = Connection::open_with_flags(path, flags)?;
    trace_if_asked(&mut conn);
    let not_db = |e: rusqlite::Error| classify_open_error(path, e);
    conn.busy_timeout(opts.busy_timeout).map_err(not_db)?;
    // One statement, so one snapshot: a racing process that is migrating this very file
    // must not be seen half-way (tables present, version still 0).
    let (version, foreign_tables) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master
                     WHERE type = 'table' AND name NOT LIKE 'sqlite_%')",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
        .map_err(not_db)?;
    if version > SCHEMA_VERSION {
        return Err(too_new(&conn, path, version));
    }
    if version == 0 && foreign_tables > 0 {
        return Err(Error::NotADatabase {
            path: path.to_path_buf(),
            reason: "it holds tables but no cairn schema".into(),
        });
    }
    if path != Path::new(":memory:") {
        ensure_wal(&conn, path, Instant::now() + opts.busy_timeout)?;
    }
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")
        .map_err(not_db)?;
    if version < SCHEMA_VERSION {
        if version > 0 && !opts.upgrade {
            return Err(Error::UpgradePending {
                path: path.to_path_buf(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        migrate(&mut conn)?;
    }
    bm25::register(&conn).map_err(not_db)?;
    Ok(conn)
}

/// How a read-only connection sees the database ([`open_read_only`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnly {
    /// `mode=ro`: the database with its WAL, as other connections see it.
    Shared,
    /// `immutable=1`: the database file alone, without locks, when not even the WAL's
    /// shared-memory file can be made (a read-only file system without one); changes still
    /// in the WAL are not seen.
    Immutable,
}

/// Opens a database that cannot be written (a read-only file system, or permissions that
/// deny writing) for reading: `mode=ro`, else `immutable=1` when even that fails. Nothing
/// is created, switched or migrated; a database of another schema version is refused
/// (an older one cannot be upgraded here).
pub fn open_read_only(path: &Path, busy_timeout: Duration) -> Result<(Connection, ReadOnly)> {
    match open_read_only_as(path, "mode=ro", busy_timeout) {
        Ok(c) => Ok((c, ReadOnly::Shared)),
        Err(Error::Sqlite(first)) => {
            log::debug!("{} cannot be read with its WAL: {first}", path.display());
            open_read_only_as(path, "immutable=1", busy_timeout).map(|c| (c, ReadOnly::Immutable))
        }
        Err(e) => Err(e),
    }
}

fn open_read_only_as(path: &Path, param: &str, busy_timeout: Duration) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let mut conn = Connection::open_with_flags(file_uri(path, param), flags)?;
    trace_if_asked(&mut conn);
    let not_db = |e: rusqlite::Error| classify_open_error(path, e);
    conn.busy_timeout(busy_timeout).map_err(not_db)?;
    let version = schema_version(&conn).map_err(not_db)?;
    if version > SCHEMA_VERSION {
        return Err(too_new(&conn, path, version));
    }
    if version < SCHEMA_VERSION {
        return Err(Error::UpgradePending {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    bm25::register(&conn).map_err(not_db)?;
    Ok(conn)
}

/// The `file:` URI of `path` with `params` (every byte but unreserved ones and `/`
/// percent-encoded).
pub(crate) fn file_uri(path: &Path, params: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push('?');
    uri.push_str(params);
    uri
}

/// Environment variable naming a directory: when it is set, every connection cairn opens
/// appends each distinct statement it runs to `<dir>/<pid>.sql`, one line each, whitespace
/// collapsed (the SQL text only, never a bound value; a trigger shows as
/// `-- TRIGGER name`). The test suite runs with it so that `tests/sql_coverage` can check
/// every statement in `core` was run by some test.
pub const SQL_TRACE_ENV: &str = "CAIRN_SQL_TRACE";

/// Installs the [`SQL_TRACE_ENV`] statement log on `conn` when the variable is set.
pub fn trace_if_asked(conn: &mut Connection) {
    use rusqlite::trace::{TraceEvent, TraceEventCodes};
    use std::io::Write;

    let Some(dir) = std::env::var_os(SQL_TRACE_ENV) else {
        return;
    };
    let path = Path::new(&dir).join(format!("{}.sql", std::process::id()));
    let mut seen = std::collections::HashSet::new();
    let log = move |event: TraceEvent<'_>| {
        let TraceEvent::Stmt(_, sql) = event else {
            return;
        };
        let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        if seen.insert(line.clone()) {
            // One write per line: processes and connections append to their files at once.
            let _ = crate::store::paths::append_private(&path)
                .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        }
    };
    if let Err(e) = conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(log)) {
        log::warn!("{SQL_TRACE_ENV} is set but the statement log cannot be installed: {e}");
    }
}

/// A SQLite file that SQLite refuses is damaged when it still looks like a SQLite
/// database (its magic, or a b-tree page after a broken header: `repair::looks_like_sqlite`),
/// and not a database at all otherwise (a file that was never cairn's is not "recovered").
fn classify_open_error(path: &Path, e: rusqlite::Error) -> Error {
    let not_db = e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase);
    match e {
        // A header field out of range ("unsupported file format") is damage too.
        _ if crate::store::repair::header_broken(path) => Error::Damaged {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ if not_db && !crate::store::repair::looks_like_sqlite(path) => Error::NotADatabase {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ if crate::error::is_damage(&e) => Error::Damaged {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ if crate::error::is_busy(&e) => Error::Locked {
            path: path.to_path_buf(),
        },
        _ => Error::Sqlite(e),
    }
}

/// `PRAGMA user_version`: 0 for a new file, else the last migration applied.
pub fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Why a database whose header claims schema `found`, above this cairn's, cannot be
/// opened: a newer cairn wrote it (its `schema_version` row says the same), or the header
/// is damaged (the row says otherwise, or is missing: every schema above this one has it).
pub fn too_new(conn: &Connection, path: &Path, found: i64) -> Error {
    let row: rusqlite::Result<i64> =
        conn.query_row("SELECT version FROM schema_version", [], |r| r.get(0));
    match row {
        Ok(kept) if kept == found => Error::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        },
        Ok(kept) => Error::Damaged {
            path: path.to_path_buf(),
            reason: format!(
                "the header's schema version {found} disagrees with the tables' {kept}"
            ),
        },
        Err(e) => Error::Damaged {
            path: path.to_path_buf(),
            reason: format!(
                "the header's schema version {found} has no record in the tables ({e})"
            ),
        },
    }
}

/// Switches to WAL unless already there. Changing the journal mode takes an exclusive lock
/// without calling the busy handler, so a fresh database opened by many hooks at once sees
/// SQLITE_BUSY immediately; retry with jitter until the deadline.
fn ensure_wal(conn: &Connection, path: &Path, deadline: Instant) -> Result<()> {
    let mut attempt: u32 = 0;
    loop {
        let result = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
            .and_then(|mode| {
                if mode.eq_ignore_ascii_case("wal") {
                    Ok(mode)
                } else {
                    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
                }
            });
        match result {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(Error::Invalid(format!(
                    "database {} cannot use WAL (journal mode stays {mode})",
                    path.display()
                )));
            }
            Err(e) if crate::error::is_busy(&e) && Instant::now() < deadline => {
                attempt += 1;
                std::thread::sleep(jitter(attempt));
            }
            Err(e) => return Err(classify_open_error(path, e)),
        }
    }
}

/// A short sleep that grows with the attempt and varies between processes.
pub(crate) fn jitter(attempt: u32) -> Duration {
    let base = 1u64 << attempt.min(5); // 2..32 ms
    let noise = crate::rand::below(base.max(2));
    Duration::from_millis(base / 2 + noise)
}

/// Applies the migrations this database lacks, all inside one `BEGIN IMMEDIATE`, reading
/// the version inside the transaction so racing processes apply each one exactly once.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    // One transaction for every pending migration: no other connection ever sees a
    // database half-way (a version between the old and the new), which a hook would take
    // for an older one to leave alone (`OpenOptions::upgrade`).
    register_functions(conn)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current = schema_version(&tx)?;
    if current > SCHEMA_VERSION {
        return Err(too_new(
            &tx,
            tx.path().map(Path::new).unwrap_or(Path::new("")),
            current,
        ));
    }
    let started = Instant::now();
    if current > 0 && current < SCHEMA_VERSION {
        // Said before the wait, not after it: a migration may rebuild the full-text
        // indexes, about a minute at a million memories, and a silent command looks hung.
        log::warn!(
            "upgrading the database from schema {current} to {SCHEMA_VERSION}: once, and with \
             many memories it may take a minute"
        );
    }
    for (index, (name, sql)) in MIGRATIONS.iter().enumerate() {
        let target = index as i64 + 1;
        if current >= target {
            continue;
        }
        log::info!("applying migration {name}");
        tx.execute_batch(sql).map_err(|e| {
            match ["already exists", "duplicate column"]
                .iter()
                .any(|m| e.to_string().contains(m))
            {
                // The version says the migration is pending, the tables say it ran: the
                // header's `user_version` is damaged, which recovery repairs.
                true => Error::Damaged {
                    path: tx.path().map(Into::into).unwrap_or_default(),
                    reason: format!("schema version {current} disagrees with the tables ({e})"),
                },
                false => Error::Sqlite(e),
            }
        })?;
        tx.execute_batch(&format!("PRAGMA user_version = {target}"))?;
        if target >= VERSION_ROW_SINCE {
            tx.execute("UPDATE schema_version SET version = ?1", [target])?;
        }
    }
    tx.commit()?;
    if current < SCHEMA_VERSION {
        log::info!(
            "schema {SCHEMA_VERSION} reached in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Tests only: brings the empty database of `conn` to schema `version` as that release
/// left it (its migrations, the header's version and, since 0013, the row), for tests of
/// what an upgrade or a recovery does with an older file.
#[cfg(test)]
pub(crate) fn at_version(conn: &Connection, version: usize) {
    for (_, sql) in &MIGRATIONS[..version] {
        conn.execute_batch(sql).expect("migration");
    }
    conn.execute_batch(&format!("PRAGMA user_version = {version}"))
        .expect("version");
    if version as i64 >= VERSION_ROW_SINCE {
        conn.execute("UPDATE schema_version SET version = ?1", [version as i64])
            .expect("version row");
    }
}

/// Each searchable table and the text columns its `pieces_text` is made of
/// (`text::code_pieces`), as migration 0018 filled it and as `memory` writes it.
pub const CODE_PIECES_OF: [(&str, &str); 3] = [
    ("observations", "title, subtitle, narrative, facts_text"),
    (
        "session_summaries",
        "request, investigated, learned, completed, next_steps, notes",
    ),
    ("user_prompts", "prompt_text"),
];

/// The SQL functions of cairn's own, registered by [`migrate`] and by recovery's salvage,
/// the two that call them (not on every connection: a hook's has no use for them):
/// `cairn_code_pieces(text, …)`, the pieces of the words written as code in its arguments
/// (`text::code_pieces`; NULL is no text), with which migration 0018 fills the
/// `pieces_text` of older rows and recovery makes it for rows salvaged from an older file.
pub(crate) fn register_functions(conn: &Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "cairn_code_pieces",
        -1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let texts = (0..ctx.len())
                .map(|i| ctx.get::<Option<String>>(i).map(Option::unwrap_or_default))
                .collect::<rusqlite::Result<Vec<String>>>()?;
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            Ok(crate::text::code_pieces(&texts))
        },
    )?;
    Ok(())
}

/// Runs `f` inside a `BEGIN IMMEDIATE` transaction and commits it; on error nothing is
/// written. The only way cairn writes.
pub fn write<T>(conn: &mut Connection, f: impl FnOnce(&Transaction) -> Result<T>) -> Result<T> {
    let path = conn.path().unwrap_or_default().to_owned();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| match crate::error::is_busy(&e) {
            true => Error::Locked { path: path.into() },
            false => Error::Sqlite(e),
        })?;
    let value = f(&tx)?;
    tx.commit()?;
    Ok(value)
}

/// The WAL size above which [`bound_wal`] empties it: SQLite's automatic checkpoint runs
/// at 1,000 pages (about 4 MB at 4 KiB pages), so with another connection open the WAL
/// stays under this and `bound_wal` seldom has anything to do.
pub const WAL_BOUND_BYTES: u64 = 4 << 20;

/// Keeps the WAL bounded for a connection that may be the only one, and that closes
/// without the checkpoint on close (hooks, `capture::handle::open_for_hook`). Alone, the
/// automatic checkpoint cannot shorten the WAL: each lone process rebuilds the WAL index
/// from the whole WAL, which forgets what was already copied back, so the WAL is never
/// restarted and grows with every event (and every process pays to read it). When the
/// WAL file is larger than [`WAL_BOUND_BYTES`] (one `stat`, the common case), a TRUNCATE
/// checkpoint copies it into the database and empties it, without waiting on anyone: a
/// reader or writer in the way makes it a passive one this time, and a later call tries
/// again. Returns true when the WAL was emptied.
pub fn bound_wal(conn: &Connection) -> Result<bool> {
    let Some(db) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    let wal = format!("{db}-wal");
    let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
    if size <= WAL_BOUND_BYTES {
        return Ok(false);
    }
    let wait: i64 = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))?;
    conn.busy_timeout(Duration::ZERO)?;
    let busy = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    });
    conn.busy_timeout(Duration::from_millis(wait.max(0).unsigned_abs()))?;
    let busy = busy?;
    log::debug!(
        "WAL of {size} bytes {}",
        if busy == 0 {
            "checkpointed and emptied"
        } else {
            "checkpointed in part (another connection is busy)"
        }
    );
    Ok(busy == 0)
}

/// Runs `PRAGMA integrity_check` and the FTS5 integrity checks; returns the problems found.
pub fn integrity_problems(conn: &Connection) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    for row in rows {
        let line = row?;
        if line != "ok" {
            problems.push(line);
        }
    }
    problems.extend(fts_problems(conn));
    Ok(problems)
}

/// Runs the FTS5 integrity checks (which `quick_check` does not do); returns the problems.
pub fn fts_problems(conn: &Connection) -> Vec<String> {
    let mut problems = Vec::new();
    for fts in [
        "observations_fts",
        "session_summaries_fts",
        "user_prompts_fts",
    ] {
        if let Err(e) = conn.execute(
            &format!("INSERT INTO {fts} ({fts}, rank) VALUES ('integrity-check', 1)"),
            [],
        ) {
            problems.push(format!("{fts}: {e}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of `table`'s full-text index that match `expr`.
    fn matching(conn: &Connection, table: &str, expr: &str) -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table}_fts WHERE {table}_fts MATCH ?1"),
            [expr],
            |r| r.get(0),
        )
        .expect("match")
    }

    fn temp_db() -> (tempfile::TempDir, DataDir) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("data"));
        (tmp, dd)
    }

    /// Each full-text index follows its table through insert, update and delete (the
    /// triggers of 0001_init), whichever code writes the table.
    #[test]
    fn full_text_indexes_follow_every_write_to_their_tables() {
        let (_tmp, dd) = temp_db();
        let mut conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        let tables = [
            (
                "observations",
                "title",
                "INSERT INTO observations (id, session_id, project, type, title, content_hash, created_at)
                 VALUES (1, 's', 'p', 'discovery', 'walrus', 'h', 1)",
            ),
            (
                "session_summaries",
                "learned",
                "INSERT INTO session_summaries (id, session_id, project, prompt_number, learned, content_hash, created_at)
                 VALUES (1, 's', 'p', 1, 'walrus', 'h', 1)",
            ),
            (
                "user_prompts",
                "prompt_text",
                "INSERT INTO user_prompts (id, session_id, project, prompt_number, prompt_text, created_at)
                 VALUES (1, 's', 'p', 1, 'walrus', 1)",
            ),
        ];
        write(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO sessions (session_id, project, cwd, started_at, updated_at)
                 VALUES ('s', 'p', '/p', 1, 1)",
                [],
            )?;
            Ok(())
        })
        .expect("session");
        for (table, column, insert) in tables {
            conn.execute(insert, []).expect("insert");
            assert_eq!(matching(&conn, table, "walrus"), 1, "{table}: inserted");
            conn.execute(
                &format!("UPDATE {table} SET {column} = 'narwhal' WHERE id = 1"),
                [],
            )
            .expect("update");
            assert_eq!(
                matching(&conn, table, "walrus"),
                0,
                "{table}: old words gone"
            );
            assert_eq!(
                matching(&conn, table, "narwhal"),
                1,
                "{table}: new words in"
            );
            assert!(
                integrity_problems(&conn).expect("check").is_empty(),
                "{table}"
            );
            conn.execute(&format!("DELETE FROM {table} WHERE id = 1"), [])
                .expect("delete");
            assert_eq!(matching(&conn, table, "narwhal"), 0, "{table}: deleted");
            assert!(
                integrity_problems(&conn).expect("check").is_empty(),
                "{table}"
            );
        }
    }

    #[test]
    fn migrates_an_empty_file_and_twice_is_a_no_op() {
        let (_tmp, dd) = temp_db();
        let conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(schema_version(&conn).expect("version"), SCHEMA_VERSION);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, "wal");
        let fk: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .expect("fk");
        assert_eq!(fk, 1);
        let tables_before: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .expect("count");
        drop(conn);
        let mut conn = open_data_dir(&dd, OpenOptions::default()).expect("reopen");
        migrate(&mut conn).expect("migrate again");
        let tables_after: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .expect("count");
        assert_eq!(tables_before, tables_after);
        assert!(integrity_problems(&conn).expect("check").is_empty());
        assert_eq!(crate::store::paths::mode_of(&dd.db()), Some(0o600));
    }

    /// Rows stored before migration 0018 get the pieces of their code words, and a
    /// question in prose finds them; the index agrees with its rows.
    #[test]
    fn rows_from_before_code_pieces_are_found_by_their_pieces() {
        let (_tmp, dd) = temp_db();
        std::fs::create_dir_all(dd.root()).expect("dir");
        let mut conn = Connection::open(dd.db()).expect("open");
        at_version(&conn, 17);
        conn.execute_batch(
            "INSERT INTO sessions (session_id, project, started_at, updated_at)
                 VALUES ('s', 'p', 1, 1);
             INSERT INTO observations
                 (session_id, project, type, title, narrative, content_hash, created_at)
                 VALUES ('s', 'p', 'change', 'Fix RedundantParentheses', 'kept', 'h', 1);
             INSERT INTO session_summaries
                 (session_id, project, prompt_number, request, content_hash, created_at)
                 VALUES ('s', 'p', 1, 'why does parseHttpHeader fail?', 'h', 1);
             INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                 VALUES ('s', 'p', 1, 'look at LineBuffered', 1);",
        )
        .expect("v17 data");
        migrate(&mut conn).expect("migrate");
        assert_eq!(schema_version(&conn).expect("version"), SCHEMA_VERSION);
        for (table, words, pieces) in [
            (
                "observations",
                "redundant parentheses",
                "redundant parentheses",
            ),
            ("session_summaries", "http header", "parse http header"),
            ("user_prompts", "buffered", "line buffered"),
        ] {
            let stored: String = conn
                .query_row(&format!("SELECT pieces_text FROM {table}"), [], |r| {
                    r.get(0)
                })
                .expect("pieces");
            assert_eq!(stored, pieces, "{table}");
            let expr = words
                .split(' ')
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" AND ");
            assert_eq!(matching(&conn, table, &expr), 1, "{table}");
        }
        assert!(integrity_problems(&conn).expect("check").is_empty());
        // A row written now gets its pieces as it is stored.
        write(&mut conn, |tx| {
            let o = crate::recall::testing::obs("p", "change", "Cache the tokenizerConfig", "", 2);
            crate::memory::sessions::ensure(tx, "s-p", "p", "/p", 2)?;
            crate::memory::observations::insert_observation(tx, &o)?;
            Ok(())
        })
        .expect("insert");
        assert_eq!(matching(&conn, "observations", "tokenizer"), 1);
        assert!(integrity_problems(&conn).expect("check").is_empty());
    }

    #[test]
    fn vectors_from_before_parts_are_kept_and_queued_again() {
        let (_tmp, dd) = temp_db();
        std::fs::create_dir_all(dd.root()).expect("dir");
        let mut conn = Connection::open(dd.db()).expect("open");
        at_version(&conn, 13);
        conn.execute_batch(
            "INSERT INTO embeddings (kind, ref_id, project, created_at, model, bits, vector)
             VALUES (0, 7, 'p', 1, 'm', x'01', x'02'), (1, 8, 'p', 1, 'm', x'01', x'02'),
                    (2, 9, 'p', 1, 'm', x'01', x'02')",
        )
        .expect("vectors");
        migrate(&mut conn).expect("migrate");
        assert_eq!(schema_version(&conn).expect("version"), SCHEMA_VERSION);
        let kept: Vec<(i64, Vec<u8>, Vec<u8>)> = conn
            .prepare("SELECT ref_id, vector, parts FROM embeddings ORDER BY ref_id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("read");
        assert_eq!(
            kept,
            [7, 8, 9].map(|id| (id, vec![2u8], Vec::new())).to_vec()
        );
        // An observation and a summary may have parts; a prompt is one part.
        let queued: Vec<(i64, i64)> = conn
            .prepare("SELECT kind, ref_id FROM embedding_queue ORDER BY ref_id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("read");
        assert_eq!(queued, [(0, 7), (1, 8)]);
    }

    #[test]
    fn a_schema_version_behind_its_tables_is_damage() {
        let (_tmp, dd) = temp_db();
        let mut conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        conn.execute_batch("PRAGMA user_version = 3")
            .expect("damage");
        let err = migrate(&mut conn).expect_err("tables already there");
        assert!(err.is_corrupt(), "{err}");
    }

    #[test]
    fn refuses_a_newer_schema_without_touching_it() {
        let (_tmp, dd) = temp_db();
        let conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        conn.execute_batch("PRAGMA user_version = 99; UPDATE schema_version SET version = 99")
            .expect("bump");
        drop(conn);
        let before = std::fs::read(dd.db()).expect("read");
        let err = open_data_dir(&dd, OpenOptions::default()).expect_err("newer");
        assert!(
            matches!(err, Error::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade cairn"));
        assert_eq!(before, std::fs::read(dd.db()).expect("read"));
    }

    #[test]
    fn a_header_claiming_a_newer_schema_than_its_tables_is_damage() {
        let (_tmp, dd) = temp_db();
        let conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(
            conn.query_row("SELECT version FROM schema_version", [], |r| r
                .get::<_, i64>(0))
                .expect("row"),
            SCHEMA_VERSION
        );
        conn.execute_batch("PRAGMA user_version = 12044")
            .expect("garble");
        drop(conn);
        let err = open_data_dir(&dd, OpenOptions::default()).expect_err("damaged");
        assert!(err.is_corrupt(), "{err}");
        assert!(err.to_string().contains("disagrees"), "{err}");
        let err = open_read_only(dd.db().as_path(), Duration::from_secs(1)).expect_err("damaged");
        assert!(err.is_corrupt(), "{err}");
    }

    #[test]
    fn refuses_garbage_and_foreign_databases() {
        let (_tmp, dd) = temp_db();
        dd.ensure().expect("dir");
        std::fs::write(dd.db(), vec![b'x'; 8192]).expect("write");
        let err = open_data_dir(&dd, OpenOptions::default()).expect_err("garbage");
        assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
        assert!(!err.is_corrupt(), "garbage is not a damaged database");

        std::fs::remove_file(dd.db()).expect("rm");
        let other = Connection::open(dd.db()).expect("other");
        other
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .expect("foreign");
        drop(other);
        let err = open_data_dir(&dd, OpenOptions::default()).expect_err("foreign");
        assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
        assert!(!err.is_corrupt(), "a foreign database is not recovered");
    }

    #[test]
    fn missing_database_is_an_error_when_creation_is_off() {
        let (_tmp, dd) = temp_db();
        let opts = OpenOptions {
            create: false,
            ..OpenOptions::default()
        };
        let err = open_data_dir(&dd, opts).expect_err("missing");
        assert!(err.to_string().contains("no cairn database"), "{err}");
        assert!(!dd.exists());
    }

    /// A connection that finds the WAL over the bound empties it; one under it, or one
    /// blocked by another connection's read, leaves it (and says so).
    #[test]
    fn bound_wal_empties_a_large_wal_unless_someone_reads() {
        let (_tmp, dd) = temp_db();
        let mut conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0")
            .expect("no automatic checkpoint");
        let wal = || std::fs::metadata(format!("{}-wal", dd.db().display())).map_or(0, |m| m.len());
        assert!(!bound_wal(&conn).expect("small"), "nothing to do");
        let reader = open_data_dir(&dd, OpenOptions::default()).expect("reader");
        let mut i = 0;
        while wal() <= WAL_BOUND_BYTES {
            write(&mut conn, |tx| {
                tx.execute(
                    "INSERT INTO quarantine (event, reason, raw, raw_len, created_at)
                     VALUES (NULL, 'x', zeroblob(8192), 8192, ?1)",
                    [i],
                )?;
                Ok(())
            })
            .expect("grow");
            i += 1;
        }
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM quarantine;")
            .expect("read");
        assert!(!bound_wal(&conn).expect("blocked"), "a reader holds it");
        assert!(wal() > WAL_BOUND_BYTES);
        reader.execute_batch("COMMIT").expect("end read");
        assert!(bound_wal(&conn).expect("bound"));
        assert_eq!(wal(), 0);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM quarantine", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, i, "every row kept");
    }

    #[test]
    fn write_rolls_back_on_error() {
        let (_tmp, dd) = temp_db();
        let mut conn = open_data_dir(&dd, OpenOptions::default()).expect("open");
        let r: Result<()> = write(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO sessions (session_id, project, started_at, updated_at) VALUES ('s', 'p', 1, 1)",
                [],
            )?;
            Err(Error::Invalid("boom".into()))
        });
        assert!(r.is_err());
        let n: i64 = conn
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 0);
    }

    /// An upgraded version-1 database gets the covering indexes and is searchable: its
    /// rows are found as search finds them (the words and the project's key matched in the
    /// full-text index, joined through the covering index).
    #[test]
    fn upgrades_a_version_1_database_with_its_data() {
        let (_tmp, dd) = temp_db();
        dd.ensure().expect("dir");
        {
            let v1 = Connection::open(dd.db()).expect("v1");
            v1.execute_batch(MIGRATIONS[0].1).expect("0001");
            v1.execute_batch(
                "PRAGMA user_version = 1;
                 INSERT INTO sessions (session_id, project, started_at, updated_at)
                     VALUES ('s', 'p', 1, 1);
                 INSERT INTO observations
                     (session_id, project, type, title, narrative, content_hash, created_at)
                     VALUES ('s', 'p', 'discovery', 'Lease rescue', 'kept', 'h', 1);",
            )
            .expect("v1 data");
        }
        let conn = open_data_dir(&dd, OpenOptions::default()).expect("upgrade");
        assert_eq!(schema_version(&conn).expect("version"), SCHEMA_VERSION);
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index'
                 AND name IN ('observations_search', 'session_summaries_search',
                              'user_prompts_search')",
                [],
                |r| r.get(0),
            )
            .expect("indexes");
        assert_eq!(indexes, 3);
        // Project `p` is indexed as `x70` ('x' and its bytes in hex).
        let hits: i64 = conn
            .query_row(
                "SELECT count(*) FROM observations_fts
                 JOIN observations t INDEXED BY observations_search
                   ON t.id = observations_fts.rowid
                 WHERE observations_fts MATCH ?1",
                ["(\"lease\") AND project_key : \"x70\""],
                |r| r.get(0),
            )
            .expect("search");
        assert_eq!(hits, 1);
        assert!(integrity_problems(&conn).expect("check").is_empty());
    }
}
