//! The `forgotten` table: tombstones of what the user deleted, so that nothing brings it
//! back (a transcript import, a reconciliation, a salvage). The only module that writes
//! it. Keys name what would otherwise be recreated (see [`key`]); a tombstone is never
//! removed by cairn itself.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::error::Result;

/// The keys a tombstone can have. Job keys are the queue's dedupe keys as they are.
pub mod key {
    /// Everything of a session.
    pub fn session(session_id: &str) -> String {
        format!("session:{session_id}")
    }
    /// A prompt and the turn it started.
    pub fn prompt(session_id: &str, prompt_id: &str) -> String {
        format!("prompt:{session_id}:{prompt_id}")
    }
    /// A tool call's observation job (its dedupe key).
    pub fn tool(tool_use_id: &str) -> String {
        format!("tool:{tool_use_id}")
    }
    /// A turn's summary job (its dedupe key).
    pub fn turn(session_id: &str, prompt_number: i64) -> String {
        format!("turn:{session_id}:{prompt_number}")
    }
    /// An observation's content within its session.
    pub fn content(session_id: &str, content_hash: &str) -> String {
        format!("hash:{session_id}:{content_hash}")
    }
}

/// Records that `key` was forgotten (again: the first time is kept).
pub fn forget(tx: &Transaction, key: &str, now: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO forgotten (key, forgotten_at) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
    )?
    .execute(params![key, now])?;
    Ok(())
}

/// True when `key` was forgotten.
pub fn is_forgotten(conn: &Connection, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM forgotten WHERE key = ?1")?
        .query_row([key], |_| Ok(()))
        .optional()?
        .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;

    #[test]
    fn a_key_forgotten_stays_forgotten() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut conn = db::open(&tmp.path().join("c.db"), db::OpenOptions::default()).expect("db");
        assert!(!is_forgotten(&conn, &key::tool("t1")).expect("read"));
        db::write(&mut conn, |tx| {
            forget(tx, &key::tool("t1"), 5)?;
            forget(tx, &key::tool("t1"), 9)
        })
        .expect("forget");
        assert!(is_forgotten(&conn, "tool:t1").expect("read"));
        let at: i64 = conn
            .query_row("SELECT forgotten_at FROM forgotten", [], |r| r.get(0))
            .expect("at");
        assert_eq!(at, 5);
        assert_eq!(key::session("s"), "session:s");
        assert_eq!(key::prompt("s", "p"), "prompt:s:p");
        assert_eq!(key::turn("s", 3), "turn:s:3");
        assert_eq!(key::content("s", "h"), "hash:s:h");
    }
}
