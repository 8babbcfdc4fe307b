//! The `sessions` and `user_prompts` tables: the only module that writes them.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::error::Result;

/// Makes sure the session row exists; refreshes its cwd and `updated_at`. The project is
/// fixed by the first event of the session.
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
             cwd = CASE WHEN excluded.cwd = '' THEN sessions.cwd ELSE excluded.cwd END,
             updated_at = max(sessions.updated_at, excluded.updated_at)",
    )?
    .execute(params![session_id, project, cwd, now])?;
    Ok(())
}

/// The session's current prompt number (0 before the first prompt), if the session exists.
pub fn prompt_counter(tx: &Transaction, session_id: &str) -> Result<Option<i64>> {
    Ok(tx
        .prepare_cached("SELECT prompt_counter FROM sessions WHERE session_id = ?1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?)
}
