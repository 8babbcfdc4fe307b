//! The `sessions` and `user_prompts` tables: the only module that writes them.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::error::Result;
use crate::text::code_pieces;

/// How stale `updated_at` may get before an event refreshes it. Every hook event calls
/// [`ensure`]; rewriting the row (and its `sessions_project_recent` entry) each time would
/// add two pages to every hook's commit for a time nobody reads finer than the minute.
pub const ACTIVITY_RESOLUTION_MS: i64 = 60_000;

/// Project names, the most recently active first (at most 200): those of sessions, and
/// those of observations saved by hand (which have no session; `observations_session`
/// finds them).
pub fn projects(conn: &rusqlite::Connection) -> Result<Vec<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT project FROM (
                 SELECT project, max(updated_at) AS at FROM sessions GROUP BY project
                 UNION ALL
                 SELECT project, max(created_at) FROM observations
                 WHERE session_id IS NULL GROUP BY project)
             GROUP BY project ORDER BY max(at) DESC LIMIT 200",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// True when some memory is of `project`: a session's, or an observation saved by hand
/// (which has no session).
pub fn is_project(conn: &rusqlite::Connection, project: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE project = ?1)
                 OR EXISTS (SELECT 1 FROM observations WHERE project = ?1)",
        )?
        .query_row([project], |r| r.get(0))?)
}

/// Makes sure the session row exists; refreshes its cwd at once and its `updated_at` once
/// it is [`ACTIVITY_RESOLUTION_MS`] old (an event that changes nothing writes nothing). The
/// project is fixed by the first event of the session. An event older than the row's
/// `updated_at` (one the worker ingests late from the spool) changes neither: a newer
/// event's cwd is already there.
pub fn ensure(
    tx: &Transaction,
    session_id: &str,
    project: &str,
    cwd: &str,
    now: i64,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO sessions (session_id, project, cwd, started_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (session_id) DO UPDATE SET
             cwd = CASE WHEN excluded.cwd = '' OR excluded.updated_at < sessions.updated_at
                        THEN sessions.cwd ELSE excluded.cwd END,
             updated_at = max(sessions.updated_at, excluded.updated_at)
         WHERE (excluded.cwd <> '' AND excluded.cwd <> sessions.cwd
                AND excluded.updated_at >= sessions.updated_at)
            OR excluded.updated_at >= sessions.updated_at + ?5",
    )?
    .execute(params![
        session_id,
        project,
        cwd,
        now,
        ACTIVITY_RESOLUTION_MS
    ])?;
    Ok(())
}

/// The session's current prompt number (0 before the first prompt), if the session exists.
pub fn prompt_counter(tx: &Transaction, session_id: &str) -> Result<Option<i64>> {
    Ok(tx
        .prepare_cached("SELECT prompt_counter FROM sessions WHERE session_id = ?1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?)
}

/// The number of the session's prompt whose Claude Code `prompt_id` is `prompt_id`, if
/// that prompt is recorded: how a tool event or a turn end finds its turn, whenever it is
/// written.
pub fn prompt_number_of(
    conn: &rusqlite::Connection,
    session_id: &str,
    prompt_id: &str,
) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT prompt_number FROM user_prompts WHERE session_id = ?1 AND prompt_id = ?2",
        )?
        .query_row(params![session_id, prompt_id], |r| r.get(0))
        .optional()?)
}

/// The session's prompt counter read outside a write transaction (0 when the session is
/// unknown): the hook-time number of an event that has to be spooled.
pub fn current_prompt_number(conn: &rusqlite::Connection, session_id: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT prompt_counter FROM sessions WHERE session_id = ?1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Starts (or resumes) a session: the row exists and is `active` again.
pub fn start(tx: &Transaction, session_id: &str, project: &str, cwd: &str, now: i64) -> Result<()> {
    ensure(tx, session_id, project, cwd, now)?;
    tx.prepare_cached(
        "UPDATE sessions SET status = 'active', ended_at = NULL
         WHERE session_id = ?1 AND status <> 'active'",
    )?
    .execute([session_id])?;
    Ok(())
}

/// Marks a session ended (creating its row if this is the first event seen of it).
pub fn end(tx: &Transaction, session_id: &str, project: &str, cwd: &str, now: i64) -> Result<()> {
    ensure(tx, session_id, project, cwd, now)?;
    end_if_known(tx, session_id, now)?;
    Ok(())
}

/// Ends the session when it has a row; a session cairn never saw stays unknown. Whether
/// there was one to end.
pub fn end_if_known(tx: &Transaction, session_id: &str, now: i64) -> Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE sessions SET status = 'ended', ended_at = ?2, updated_at = max(updated_at, ?2)
             WHERE session_id = ?1",
        )?
        .execute(params![session_id, now])?;
    Ok(n > 0)
}

/// A user prompt to record.
#[derive(Debug, Clone)]
pub struct NewPrompt<'a> {
    pub session_id: &'a str,
    pub project: &'a str,
    pub cwd: &'a str,
    /// Claude Code's prompt id: a prompt seen twice (a spooled event ingested again) is
    /// recorded once.
    pub prompt_id: Option<&'a str>,
    /// Already privacy-stripped, redacted and capped.
    pub text: &'a str,
}

/// What `record_prompt` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptRecorded {
    /// The prompt's number in its session (1 for the first).
    pub number: i64,
    /// False when the same `prompt_id` was already recorded (nothing changed).
    pub added: bool,
}

/// Bumps the session's prompt counter and stores the prompt under the new number, unless
/// a prompt with the same `prompt_id` is already stored.
pub fn record_prompt(tx: &Transaction, p: &NewPrompt, now: i64) -> Result<PromptRecorded> {
    ensure(tx, p.session_id, p.project, p.cwd, now)?;
    if let Some(id) = p.prompt_id {
        let seen: Option<i64> = tx
            .prepare_cached(
                "SELECT prompt_number FROM user_prompts WHERE session_id = ?1 AND prompt_id = ?2",
            )?
            .query_row(params![p.session_id, id], |r| r.get(0))
            .optional()?;
        if let Some(number) = seen {
            return Ok(PromptRecorded {
                number,
                added: false,
            });
        }
    }
    let number: i64 = tx
        .prepare_cached(
            "UPDATE sessions SET prompt_counter = prompt_counter + 1, status = 'active',
                 ended_at = NULL
             WHERE session_id = ?1 RETURNING prompt_counter",
        )?
        .query_row([p.session_id], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO user_prompts
             (session_id, project, prompt_number, prompt_id, prompt_text, created_at, pieces_text)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        p.session_id,
        p.project,
        number,
        p.prompt_id,
        p.text,
        now,
        code_pieces(&[p.text])
    ])?;
    Ok(PromptRecorded {
        number,
        added: true,
    })
}

/// A session as exported and imported (`cairn export`, `cairn import`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionRecord {
    pub session_id: String,
    pub project: String,
    #[serde(default)]
    pub cwd: String,
    #[serde(default)]
    pub prompt_counter: i64,
    /// `active` or `ended`.
    pub status: String,
    pub started_at: i64,
    pub updated_at: i64,
    #[serde(default)]
    pub ended_at: Option<i64>,
}

/// A user prompt as exported and imported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PromptRecord {
    pub session_id: String,
    pub project: String,
    pub prompt_number: i64,
    #[serde(default)]
    pub prompt_id: Option<String>,
    pub prompt_text: String,
    pub created_at: i64,
}

/// Adds an imported session unless one with its id exists. An existing session keeps its
/// values, except that its prompt counter is raised to the imported one (so that imported
/// prompts are not numbered past the counter). Returns true when a row was added.
pub fn import_session(tx: &Transaction, s: &SessionRecord) -> Result<bool> {
    let status = if s.status == "ended" {
        "ended"
    } else {
        "active"
    };
    let added = tx
        .prepare_cached(
            "INSERT INTO sessions
                 (session_id, project, cwd, prompt_counter, status, started_at, updated_at, ended_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (session_id) DO NOTHING",
        )?
        .execute(params![
            s.session_id,
            s.project,
            s.cwd,
            s.prompt_counter,
            status,
            s.started_at,
            s.updated_at,
            s.ended_at
        ])?;
    if added == 0 {
        tx.prepare_cached(
            "UPDATE sessions SET prompt_counter = ?2
             WHERE session_id = ?1 AND prompt_counter < ?2",
        )?
        .execute(params![s.session_id, s.prompt_counter])?;
    }
    Ok(added > 0)
}

/// Merges a session another device holds (sync): added when missing; else its start is
/// the earlier of the two, its end the later, and it is ended when either side ended it,
/// so two devices holding parts of one session agree on it whatever order they apply in.
/// The prompt counter is raised as for an import. Returns true when a row was added.
pub fn merge(tx: &Transaction, s: &SessionRecord) -> Result<bool> {
    let added = import_session(tx, s)?;
    if !added {
        tx.prepare_cached(
            "UPDATE sessions SET
                 started_at = min(started_at, ?2),
                 ended_at = CASE WHEN ?3 IS NULL THEN ended_at
                                 ELSE max(coalesce(ended_at, ?3), ?3) END,
                 status = CASE WHEN ?4 = 'ended' THEN 'ended' ELSE status END
             WHERE session_id = ?1
               AND (started_at > ?2 OR (?3 IS NOT NULL AND coalesce(ended_at, 0) < ?3)
                    OR (?4 = 'ended' AND status <> 'ended'))",
        )?
        .execute(params![s.session_id, s.started_at, s.ended_at, s.status])?;
    }
    Ok(added)
}

/// Adds an imported prompt unless its session already has a prompt with that number (or
/// that `prompt_id`). The session must exist. Returns true when a row was added.
pub fn import_prompt(tx: &Transaction, p: &PromptRecord) -> Result<bool> {
    let added = tx
        .prepare_cached(
            "INSERT INTO user_prompts
                 (session_id, project, prompt_number, prompt_id, prompt_text, created_at, pieces_text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            p.session_id,
            p.project,
            p.prompt_number,
            p.prompt_id,
            p.prompt_text,
            p.created_at,
            code_pieces(&[&p.prompt_text])
        ])?;
    Ok(added > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;
    use rusqlite::Connection;

    fn row(conn: &Connection) -> (String, String, i64, i64) {
        conn.query_row(
            "SELECT project, cwd, started_at, updated_at FROM sessions WHERE session_id = 's'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("session row")
    }

    /// Runs `ensure` in its own transaction; returns how many rows it wrote.
    fn ensure_at(conn: &mut Connection, project: &str, cwd: &str, now: i64) -> u64 {
        db::write(conn, |tx| {
            ensure(tx, "s", project, cwd, now)?;
            Ok(tx.changes())
        })
        .expect("ensure")
    }

    #[test]
    fn projects_are_those_of_sessions_and_of_memories_saved_by_hand() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = crate::store::paths::DataDir::new(tmp.path());
        let mut conn = db::open_data_dir(&dir, db::OpenOptions::default()).expect("db");
        db::write(&mut conn, |tx| {
            ensure(tx, "s1", "web", "/w", 1_000)?;
            let saved = crate::memory::observations::NewObservation {
                project: "notes".into(),
                kind: "decision".into(),
                origin: "manual".into(),
                created_at: 2_000,
                content: crate::memory::rows::ObservationContent {
                    title: "saved by hand".into(),
                    ..Default::default()
                },
                ..Default::default()
            };
            crate::memory::observations::insert_observation(tx, &saved).map(drop)
        })
        .expect("write");
        assert_eq!(projects(&conn).expect("projects"), ["notes", "web"]);
        assert!(is_project(&conn, "notes").expect("is"));
    }

    #[test]
    fn ensure_writes_only_what_changed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = crate::store::paths::DataDir::new(tmp.path());
        let mut conn = db::open_data_dir(&dir, db::OpenOptions::default()).expect("db");
        assert_eq!(ensure_at(&mut conn, "p", "/a", 1_000), 1);
        assert_eq!(row(&conn), ("p".into(), "/a".into(), 1_000, 1_000));

        // Same cwd, within the resolution: nothing is written.
        assert_eq!(
            ensure_at(&mut conn, "p", "/a", 1_000 + ACTIVITY_RESOLUTION_MS - 1),
            0
        );
        assert_eq!(ensure_at(&mut conn, "p", "", 2_000), 0);
        assert_eq!(row(&conn).3, 1_000);

        // A new cwd is written at once; the project never changes.
        assert_eq!(ensure_at(&mut conn, "other", "/b", 3_000), 1);
        assert_eq!(row(&conn), ("p".into(), "/b".into(), 1_000, 3_000));

        // Once stale, activity is refreshed; an empty cwd keeps the known one.
        let later = 3_000 + ACTIVITY_RESOLUTION_MS;
        assert_eq!(ensure_at(&mut conn, "p", "", later), 1);
        assert_eq!(row(&conn), ("p".into(), "/b".into(), 1_000, later));

        // An event older than the row (a spooled one) moves neither time nor cwd back.
        assert_eq!(ensure_at(&mut conn, "p", "/c", 10), 0);
        assert_eq!(ensure_at(&mut conn, "p", "/c", later - 1), 0);
        assert_eq!(row(&conn), ("p".into(), "/b".into(), 1_000, later));
        assert_eq!(
            ensure_at(&mut conn, "p", "/c", later),
            1,
            "not older: taken"
        );
        assert_eq!(row(&conn), ("p".into(), "/c".into(), 1_000, later));
    }
}
