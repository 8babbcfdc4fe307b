//! `cairn import claude-mem`: moving in from claude-mem's SQLite database.
//!
//! claude-mem keeps `sdk_sessions` (keyed by Claude Code's `content_session_id`, with its own
//! `memory_session_id`), `observations` and `session_summaries` (by `memory_session_id`) and
//! `user_prompts` (by `content_session_id`). They map onto cairn's `sessions` (by Claude
//! Code's session id), `observations`, `session_summaries` and `user_prompts`.
//!
//! Invariants:
//! - the source is opened read-only and never changed;
//! - only the columns the source has are read (versions differ); every source column not
//!   used, and every row that could not be mapped, is reported;
//! - importing twice adds nothing the second time: sessions by id, observations by session
//!   and content hash, summaries by session and turn, prompts by session and number.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::memory;
use crate::memory::forgotten;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::memory::sessions::{self, PromptRecord, SessionRecord};
use crate::ops::exchange::Counts;
use crate::store::db;

/// Rows written per transaction.
const CHUNK: usize = 500;

/// The columns of each source table cairn reads. Others are reported as skipped.
const USED: &[(&str, &[&str])] = &[
    (
        "sdk_sessions",
        &[
            "id",
            "content_session_id",
            "claude_session_id",
            "memory_session_id",
            "sdk_session_id",
            "project",
            "user_prompt",
            "started_at",
            "started_at_epoch",
            "completed_at",
            "completed_at_epoch",
            "status",
            "prompt_counter",
        ],
    ),
    (
        "observations",
        &[
            "id",
            "memory_session_id",
            "sdk_session_id",
            "project",
            "text",
            "type",
            "title",
            "subtitle",
            "facts",
            "narrative",
            "concepts",
            "files_read",
            "files_modified",
            "prompt_number",
            "created_at",
            "created_at_epoch",
        ],
    ),
    (
        "session_summaries",
        &[
            "id",
            "memory_session_id",
            "sdk_session_id",
            "project",
            "request",
            "investigated",
            "learned",
            "completed",
            "next_steps",
            "notes",
            "files_read",
            "files_edited",
            "prompt_number",
            "created_at",
            "created_at_epoch",
        ],
    ),
    (
        "user_prompts",
        &[
            "id",
            "session_db_id",
            "content_session_id",
            "claude_session_id",
            "prompt_number",
            "prompt_text",
            "created_at",
            "created_at_epoch",
        ],
    ),
];

/// What an import did and what it left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub source: PathBuf,
    /// Rows added to cairn.
    pub added: Counts,
    /// Rows cairn already had (from an earlier import).
    pub existing: Counts,
    /// Rows someone chose to forget (`cairn forget`): not brought back.
    pub forgotten: Counts,
    /// Source rows not imported, by reason.
    pub skipped_rows: BTreeMap<String, usize>,
    /// Source columns cairn has no place for, by table.
    pub skipped_columns: BTreeMap<String, Vec<String>>,
    /// Tables this source version lacks.
    pub missing_tables: Vec<String>,
}

/// `~/.claude-mem/claude-mem.db`.
pub fn default_path(home: &Path) -> PathBuf {
    home.join(".claude-mem").join("claude-mem.db")
}

type Row = HashMap<String, Value>;

fn text(row: &Row, col: &str) -> Option<String> {
    match row.get(col)? {
        Value::Text(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Null => None,
    }
}

/// The first non-empty value among columns that name the same thing across versions.
fn text_of(row: &Row, cols: &[&str]) -> Option<String> {
    cols.iter()
        .find_map(|c| text(row, c).filter(|s| !s.is_empty()))
}

fn text_or_empty(row: &Row, col: &str) -> String {
    text(row, col).unwrap_or_default()
}

fn int(row: &Row, col: &str) -> Option<i64> {
    match row.get(col)? {
        Value::Integer(i) => Some(*i),
        Value::Text(s) => s.trim().parse().ok(),
        Value::Real(f) => Some(*f as i64),
        _ => None,
    }
}

/// A time from `<col>_epoch` (ms, or seconds when it looks like seconds) or `<col>` (ISO).
fn time(row: &Row, col: &str) -> Option<i64> {
    if let Some(t) = int(row, &format!("{col}_epoch")) {
        let seconds = (0..100_000_000_000).contains(&t);
        return Some(if seconds { t * 1000 } else { t });
    }
    // Only plausible dates: a year of at most four digits keeps the arithmetic in range.
    text(row, col)
        .filter(|s| s.trim().split('-').next().is_some_and(|y| y.len() <= 4))
        .and_then(|s| crate::clock::parse_iso_utc(&s))
}

/// A JSON array of strings; a plain non-empty string is a list of one.
fn list(row: &Row, col: &str) -> Vec<String> {
    let Some(raw) = text(row, col) else {
        return Vec::new();
    };
    let raw = raw.trim();
    if raw.is_empty() {
        return Vec::new();
    }
    match serde_json::from_str::<Vec<serde_json::Value>>(raw) {
        Ok(items) => items
            .into_iter()
            .filter_map(|v| match v {
                serde_json::Value::String(s) => Some(s),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            })
            .collect(),
        Err(_) => vec![raw.to_string()],
    }
}

fn columns(src: &Connection, table: &str) -> Result<Vec<String>> {
    let cols = src
        .prepare("SELECT name FROM pragma_table_info(?1)")?
        .query_map([table], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(cols)
}

/// Reads every row of `table`, only the used columns the source has. `None` when the
/// table does not exist.
fn read_table(src: &Connection, table: &str, report: &mut Report) -> Result<Option<Vec<Row>>> {
    let have = columns(src, table)?;
    if have.is_empty() {
        report.missing_tables.push(table.to_string());
        return Ok(None);
    }
    let used: &[&str] = USED
        .iter()
        .find(|(t, _)| *t == table)
        .map(|(_, c)| *c)
        .unwrap_or(&[]);
    let read: Vec<&String> = have.iter().filter(|c| used.contains(&c.as_str())).collect();
    let skipped: Vec<String> = have
        .iter()
        .filter(|c| !used.contains(&c.as_str()))
        .cloned()
        .collect();
    if !skipped.is_empty() {
        report.skipped_columns.insert(table.to_string(), skipped);
    }
    if read.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let list = read
        .iter()
        .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(", ");
    let order = if have.iter().any(|c| c == "id") {
        " ORDER BY id"
    } else {
        ""
    };
    let sql = format!("SELECT {list} FROM \"{table}\"{order}");
    let mut stmt = src.prepare(&sql)?;
    let rows = stmt
        .query_map([], |r| {
            let mut row = Row::new();
            for (i, c) in read.iter().enumerate() {
                row.insert((*c).clone(), r.get::<_, Value>(i)?);
            }
            Ok(row)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some(rows))
}

fn skip(report: &mut Report, reason: &str) {
    *report.skipped_rows.entry(reason.to_string()).or_default() += 1;
}

/// Opens a claude-mem database read-only and checks that it looks like one.
pub fn open_source(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(Error::Invalid(format!(
            "no claude-mem database at {} (pass its path: cairn import claude-mem PATH)",
            path.display()
        )));
    }
    let mut src = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    db::trace_if_asked(&mut src);
    src.busy_timeout(std::time::Duration::from_secs(5))?;
    let found: Option<i64> = src
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN ('sdk_sessions', 'observations') LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| Error::NotADatabase {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if found.is_none() {
        return Err(Error::NotADatabase {
            path: path.to_path_buf(),
            reason: "it has no claude-mem tables (sdk_sessions, observations)".into(),
        });
    }
    Ok(src)
}

/// Imports sessions, observations, summaries and prompts from the claude-mem database at
/// `source` into `conn`.
pub fn import(conn: &mut Connection, source: &Path, now: i64) -> Result<Report> {
    let src = open_source(source)?;
    let mut report = Report {
        source: source.to_path_buf(),
        ..Report::default()
    };
    let sdk = read_table(&src, "sdk_sessions", &mut report)?.unwrap_or_default();
    let obs = read_table(&src, "observations", &mut report)?.unwrap_or_default();
    let sums = read_table(&src, "session_summaries", &mut report)?.unwrap_or_default();
    let prompts_table = read_table(&src, "user_prompts", &mut report)?;
    drop(src);

    // Sessions, keyed by Claude Code's id; memory ids and row ids map onto them.
    let mut sessions_out: BTreeMap<String, SessionRecord> = BTreeMap::new();
    let mut by_memory: HashMap<String, String> = HashMap::new();
    let mut by_row: HashMap<i64, String> = HashMap::new();
    let mut first_prompts: Vec<PromptRecord> = Vec::new();
    for row in &sdk {
        let content = text_of(row, &["content_session_id", "claude_session_id"]);
        let memory_id = text_of(row, &["memory_session_id", "sdk_session_id"]);
        let Some(id) = content.clone().or_else(|| memory_id.clone()) else {
            skip(&mut report, "session without an id");
            continue;
        };
        let project = text(row, "project").unwrap_or_else(|| "unknown".into());
        let started = time(row, "started_at").unwrap_or(now);
        let ended = time(row, "completed_at");
        let done = matches!(
            text(row, "status").as_deref(),
            Some("completed") | Some("failed")
        );
        if let Some(m) = memory_id {
            by_memory.insert(m, id.clone());
        }
        if let Some(r) = int(row, "id") {
            by_row.insert(r, id.clone());
        }
        if prompts_table.is_none()
            && let Some(p) = text(row, "user_prompt").filter(|s| !s.trim().is_empty())
        {
            first_prompts.push(PromptRecord {
                session_id: id.clone(),
                project: project.clone(),
                prompt_number: 1,
                prompt_id: None,
                prompt_text: p,
                created_at: started,
            });
        }
        let record = SessionRecord {
            session_id: id.clone(),
            project,
            cwd: String::new(),
            prompt_counter: int(row, "prompt_counter").unwrap_or(0),
            status: if done { "ended" } else { "active" }.into(),
            started_at: started,
            updated_at: ended.unwrap_or(started).max(started),
            ended_at: if done { ended.or(Some(started)) } else { None },
        };
        sessions_out.entry(id).or_insert(record);
    }

    // A memory session with no sdk_sessions row still gets a session (named by its id).
    let mut session_for = |memory_id: &str,
                           project: &str,
                           at: i64,
                           out: &mut BTreeMap<String, SessionRecord>|
     -> String {
        if let Some(id) = by_memory.get(memory_id) {
            return id.clone();
        }
        let id = memory_id.to_string();
        let s = out.entry(id.clone()).or_insert_with(|| SessionRecord {
            session_id: id.clone(),
            project: project.to_string(),
            cwd: String::new(),
            prompt_counter: 0,
            status: "ended".into(),
            started_at: at,
            updated_at: at,
            ended_at: Some(at),
        });
        s.started_at = s.started_at.min(at);
        s.updated_at = s.updated_at.max(at);
        s.ended_at = s.ended_at.map(|e| e.max(at));
        by_memory.insert(id.clone(), id.clone());
        id
    };

    let mut observations: Vec<NewObservation> = Vec::new();
    for row in &obs {
        let Some(memory_id) = text_of(row, &["memory_session_id", "sdk_session_id"]) else {
            skip(&mut report, "observation without a session");
            continue;
        };
        let body = text(row, "text").filter(|s| !s.trim().is_empty());
        let title = text(row, "title")
            .filter(|s| !s.trim().is_empty())
            .or_else(|| {
                body.as_ref().and_then(|b| {
                    b.lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .map(|l| crate::text::head(l, 120, crate::text::Unit::Chars).to_string())
                })
            });
        let Some(title) = title else {
            skip(&mut report, "observation without a title or text");
            continue;
        };
        let created = time(row, "created_at").unwrap_or(now);
        let project = text(row, "project").unwrap_or_else(|| "unknown".into());
        let session_id = session_for(&memory_id, &project, created, &mut sessions_out);
        let (kind, original_type) =
            memory::observations::normalize_type(&text_or_empty(row, "type"));
        observations.push(NewObservation {
            session_id: Some(session_id),
            project,
            prompt_number: int(row, "prompt_number"),
            kind,
            original_type,
            source_job_ids: Vec::new(),
            origin: "import".into(),
            created_at: created,
            content: crate::memory::rows::ObservationContent {
                title,
                subtitle: text_or_empty(row, "subtitle"),
                narrative: text(row, "narrative")
                    .filter(|s| !s.trim().is_empty())
                    .or(body)
                    .unwrap_or_default(),
                facts: list(row, "facts"),
                concepts: list(row, "concepts"),
                files_read: list(row, "files_read"),
                files_modified: list(row, "files_modified"),
            },
        });
    }

    // One summary per turn: when the source has several, the newest wins.
    let mut summaries: BTreeMap<(String, i64), NewSummary> = BTreeMap::new();
    for row in &sums {
        let Some(memory_id) = text_of(row, &["memory_session_id", "sdk_session_id"]) else {
            skip(&mut report, "summary without a session");
            continue;
        };
        let created = time(row, "created_at").unwrap_or(now);
        let project = text(row, "project").unwrap_or_else(|| "unknown".into());
        let session_id = session_for(&memory_id, &project, created, &mut sessions_out);
        let prompt_number = int(row, "prompt_number").unwrap_or(0);
        let s = NewSummary {
            session_id: session_id.clone(),
            project,
            prompt_number,
            request: text_or_empty(row, "request"),
            investigated: text_or_empty(row, "investigated"),
            learned: text_or_empty(row, "learned"),
            completed: text_or_empty(row, "completed"),
            next_steps: text_or_empty(row, "next_steps"),
            notes: text_or_empty(row, "notes"),
            files_read: list(row, "files_read"),
            files_edited: list(row, "files_edited"),
            source_job_ids: Vec::new(),
            origin: "import".into(),
            created_at: created,
        };
        match summaries.get(&(session_id.clone(), prompt_number)) {
            Some(old) if old.created_at > s.created_at => {
                skip(&mut report, "older summary of the same turn");
            }
            Some(_) => {
                skip(&mut report, "older summary of the same turn");
                summaries.insert((session_id, prompt_number), s);
            }
            None => {
                summaries.insert((session_id, prompt_number), s);
            }
        }
    }

    let mut prompts: Vec<PromptRecord> = first_prompts;
    let mut seen_prompts: HashSet<(String, i64)> = HashSet::new();
    for row in prompts_table.as_deref().unwrap_or(&[]) {
        let session_id = text_of(row, &["content_session_id", "claude_session_id"])
            .or_else(|| int(row, "session_db_id").and_then(|r| by_row.get(&r).cloned()));
        let Some(session_id) = session_id else {
            skip(&mut report, "prompt without a session");
            continue;
        };
        let Some(prompt_number) = int(row, "prompt_number") else {
            skip(&mut report, "prompt without a number");
            continue;
        };
        let Some(prompt_text) = text(row, "prompt_text") else {
            skip(&mut report, "prompt without text");
            continue;
        };
        let project = match sessions_out.get(&session_id) {
            Some(s) => s.project.clone(),
            None => match existing_project(conn, &session_id)? {
                Some(p) => p,
                None => {
                    skip(&mut report, "prompt of a session not in the source");
                    continue;
                }
            },
        };
        if !seen_prompts.insert((session_id.clone(), prompt_number)) {
            skip(&mut report, "second prompt with the same number");
            continue;
        }
        prompts.push(PromptRecord {
            session_id,
            project,
            prompt_number,
            prompt_id: None,
            prompt_text,
            created_at: time(row, "created_at").unwrap_or(now),
        });
    }
    for p in &prompts {
        if let Some(s) = sessions_out.get_mut(&p.session_id) {
            s.prompt_counter = s.prompt_counter.max(p.prompt_number);
        }
    }

    let sessions_vec: Vec<SessionRecord> = sessions_out.into_values().collect();
    for chunk in sessions_vec.chunks(CHUNK) {
        db::write(conn, |tx| {
            for s in chunk {
                match sessions::import_session(tx, s)? {
                    true => report.added.sessions += 1,
                    false => report.existing.sessions += 1,
                }
            }
            Ok(())
        })?;
    }
    for chunk in observations.chunks(CHUNK) {
        db::write(conn, |tx| {
            for o in chunk {
                if forgotten::observation_forgotten(tx, o)? {
                    report.forgotten.observations += 1;
                    continue;
                }
                match memory::observations::insert_observation(tx, o)? {
                    memory::observations::Stored::Added(_) => report.added.observations += 1,
                    memory::observations::Stored::Duplicate(_) => report.existing.observations += 1,
                }
            }
            Ok(())
        })?;
    }
    let summaries_vec: Vec<NewSummary> = summaries.into_values().collect();
    for chunk in summaries_vec.chunks(CHUNK) {
        db::write(conn, |tx| {
            for s in chunk {
                if forgotten::summary_forgotten(tx, s)? {
                    report.forgotten.summaries += 1;
                    continue;
                }
                match memory::observations::upsert_summary(tx, s)? {
                    memory::observations::Stored::Added(_) => report.added.summaries += 1,
                    memory::observations::Stored::Duplicate(_) => report.existing.summaries += 1,
                }
            }
            Ok(())
        })?;
    }
    for chunk in prompts.chunks(CHUNK) {
        db::write(conn, |tx| {
            for p in chunk {
                if forgotten::prompt_forgotten(tx, p)? {
                    report.forgotten.prompts += 1;
                    continue;
                }
                match sessions::import_prompt(tx, p)? {
                    true => report.added.prompts += 1,
                    false => report.existing.prompts += 1,
                }
            }
            Ok(())
        })?;
    }
    Ok(report)
}

fn existing_project(conn: &Connection, session_id: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT project FROM sessions WHERE session_id = ?1",
            [session_id],
            |r| r.get(0),
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::OpenOptions;
    use crate::store::paths::DataDir;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-mem/claude-mem-13.25.3.sample.db")
    }

    fn fresh() -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let conn = db::open_data_dir(&DataDir::new(tmp.path().join("d")), OpenOptions::default())
            .expect("open");
        (tmp, conn)
    }

    #[test]
    fn forgotten_memories_are_not_imported_again() {
        let (_t, mut conn) = fresh();
        import(&mut conn, &fixture(), 1).expect("import");
        let session: String = conn
            .query_row(
                "SELECT session_id FROM session_summaries ORDER BY id LIMIT 1",
                [],
                |r| r.get(0),
            )
            .expect("session");
        let gone = db::write(&mut conn, |tx| {
            memory::forget::forget_session(tx, &session, 2)
        })
        .expect("forget");
        assert!(
            gone.observations > 0 && gone.summaries > 0 && gone.prompts > 0,
            "{gone:?}"
        );
        let again = import(&mut conn, &fixture(), 3).expect("again");
        assert_eq!(again.added.total(), 0, "{again:?}");
        assert_eq!(again.forgotten.observations, gone.observations);
        assert_eq!(again.forgotten.summaries, gone.summaries);
        assert_eq!(again.forgotten.prompts, gone.prompts);
    }

    #[test]
    fn imports_the_fixture_once() {
        let (_t, mut conn) = fresh();
        let before = std::fs::read(fixture()).expect("read fixture");
        let r = import(&mut conn, &fixture(), 1).expect("import");
        assert_eq!(r.added.sessions, 4, "{r:?}");
        assert_eq!(r.added.observations, 150, "{r:?}");
        assert_eq!(r.added.summaries, 3, "{r:?}");
        assert_eq!(r.added.prompts, 10, "{r:?}");
        assert!(r.skipped_rows.is_empty(), "{r:?}");
        assert!(
            r.skipped_columns["observations"].contains(&"discovery_tokens".to_string()),
            "{r:?}"
        );
        let again = import(&mut conn, &fixture(), 2).expect("again");
        assert_eq!(again.added.total(), 0, "{again:?}");
        assert_eq!(again.existing.observations, 150);
        assert_eq!(before, std::fs::read(fixture()).expect("read fixture"));
        // Observations hang off Claude Code's session ids, not claude-mem's memory ids.
        let orphans: i64 = conn
            .query_row(
                "SELECT count(*) FROM observations o WHERE NOT EXISTS
                   (SELECT 1 FROM user_prompts p WHERE p.session_id = o.session_id)",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(orphans, 0);
    }

    #[test]
    fn reads_an_older_schema_and_says_what_it_skipped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let old = tmp.path().join("old.db");
        let src = Connection::open(&old).expect("create");
        src.execute_batch(
            "CREATE TABLE sdk_sessions (id INTEGER PRIMARY KEY, claude_session_id TEXT, sdk_session_id TEXT,
                 project TEXT, user_prompt TEXT, started_at TEXT, status TEXT, worker_port INTEGER);
             INSERT INTO sdk_sessions (claude_session_id, sdk_session_id, project, user_prompt, started_at, status)
                 VALUES ('c1', 'm1', 'old', 'find the leak', '2024-01-01T00:00:00Z', 'completed');
             CREATE TABLE observations (id INTEGER PRIMARY KEY, sdk_session_id TEXT, memory_session_id TEXT,
                 project TEXT, text TEXT, type TEXT, created_at TEXT, created_at_epoch INTEGER);
             INSERT INTO observations (memory_session_id, project, text, type, created_at, created_at_epoch)
                 VALUES ('m1', 'old', 'Found the leak
in the pool', 'discovery', '2024-01-01T00:00:00Z', 1704067200),
                        ('m1', 'old', '', 'weird', '2024-01-01T00:00:00Z', 1704067200),
                        (NULL, 'old', 'x', 'change', '2024-01-01T00:00:00Z', 1704067200);",
        )
        .expect("old schema");
        drop(src);
        let (_t, mut conn) = fresh();
        let r = import(&mut conn, &old, 1).expect("import");
        assert_eq!(r.added.observations, 1, "{r:?}");
        assert_eq!(r.added.sessions, 1, "{r:?}");
        assert_eq!(r.skipped_rows["observation without a title or text"], 1);
        assert_eq!(r.skipped_rows["observation without a session"], 1);
        assert_eq!(
            r.missing_tables,
            vec!["session_summaries".to_string(), "user_prompts".to_string()]
        );
        assert_eq!(
            r.skipped_columns["sdk_sessions"],
            vec!["worker_port".to_string()]
        );
        assert_eq!(r.added.prompts, 1, "the session's first prompt: {r:?}");
        let session: String = conn
            .query_row("SELECT session_id FROM observations", [], |r| r.get(0))
            .expect("session");
        assert_eq!(session, "c1");
        let (title, narrative, created): (String, String, i64) = conn
            .query_row(
                "SELECT title, narrative, created_at FROM observations",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("row");
        assert_eq!(title, "Found the leak");
        assert!(narrative.contains("in the pool"));
        assert_eq!(created, 1_704_067_200_000);
    }

    #[test]
    fn a_prompt_of_a_session_cairn_already_has_is_imported_into_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src_path = tmp.path().join("prompts.db");
        Connection::open(&src_path)
            .expect("create")
            .execute_batch(
                "CREATE TABLE sdk_sessions (id INTEGER PRIMARY KEY, content_session_id TEXT,
                     memory_session_id TEXT, project TEXT, started_at_epoch INTEGER);
                 CREATE TABLE user_prompts (id INTEGER PRIMARY KEY, content_session_id TEXT,
                     prompt_number INTEGER, prompt_text TEXT, created_at_epoch INTEGER);
                 INSERT INTO user_prompts (content_session_id, prompt_number, prompt_text, created_at_epoch)
                     VALUES ('known', 2, 'and the flaky test?', 1704067200),
                            ('ghost', 1, 'nobody knows this session', 1704067200);",
            )
            .expect("source");
        let (_t, mut conn) = fresh();
        db::write(&mut conn, |tx| {
            sessions::ensure(tx, "known", "cairn", "/src/cairn", 1)
        })
        .expect("session");

        let r = import(&mut conn, &src_path, 1).expect("import");
        assert_eq!(r.added.prompts, 1, "{r:?}");
        assert_eq!(r.skipped_rows["prompt of a session not in the source"], 1);
        let (project, text): (String, String) = conn
            .query_row(
                "SELECT project, prompt_text FROM user_prompts WHERE session_id = 'known'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("prompt");
        assert_eq!(
            (project.as_str(), text.as_str()),
            ("cairn", "and the flaky test?")
        );
    }

    fn row(col: &str, v: Value) -> Row {
        Row::from([(col.to_string(), v)])
    }

    #[test]
    fn lists_and_times_from_any_version() {
        fn check_list(v: Value, want: &[&str]) {
            assert_eq!(list(&row("c", v.clone()), "c"), want, "{v:?}");
        }
        check_list(Value::Text(r#"["a", "b"]"#.into()), &["a", "b"]);
        check_list(Value::Text(r#"["a", null, 3]"#.into()), &["a", "3"]);
        check_list(Value::Text("src/main.rs".into()), &["src/main.rs"]);
        check_list(Value::Text("  ".into()), &[]);
        check_list(Value::Null, &[]);
        check_list(Value::Text("[]".into()), &[]);

        fn check_time(col: &str, v: Value, want: Option<i64>) {
            assert_eq!(
                time(&row(col, v.clone()), "created_at"),
                want,
                "{col} {v:?}"
            );
        }
        check_time(
            "created_at_epoch",
            Value::Integer(1_704_067_200_123),
            Some(1_704_067_200_123),
        );
        check_time(
            "created_at_epoch",
            Value::Integer(1_704_067_200),
            Some(1_704_067_200_000),
        );
        check_time(
            "created_at",
            Value::Text("2024-01-01T00:00:00.5Z".into()),
            Some(1_704_067_200_000),
        );
        check_time("created_at", Value::Text("last tuesday".into()), None);
        check_time("other", Value::Integer(5), None);
    }

    proptest::proptest! {
        #[test]
        fn reading_any_cell_never_panics(s in "\\PC*", i in proptest::num::i64::ANY) {
            for v in [Value::Text(s.clone()), Value::Integer(i), Value::Blob(s.clone().into_bytes())] {
                let r = Row::from([
                    ("created_at".to_string(), v.clone()),
                    ("created_at_epoch".to_string(), v.clone()),
                    ("facts".to_string(), v),
                ]);
                let _ = (time(&r, "created_at"), list(&r, "facts"), text_of(&r, &["facts"]));
            }
        }
    }

    #[test]
    fn refuses_what_is_not_claude_mem() {
        let (t, mut conn) = fresh();
        let err = import(&mut conn, &t.path().join("none.db"), 1).expect_err("missing");
        assert!(err.to_string().contains("no claude-mem database"), "{err}");
        let other = t.path().join("other.db");
        Connection::open(&other)
            .expect("open")
            .execute_batch("CREATE TABLE t (x)")
            .expect("t");
        let err = import(&mut conn, &other, 1).expect_err("foreign");
        assert!(err.to_string().contains("no claude-mem tables"), "{err}");
    }
}
