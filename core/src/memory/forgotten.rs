//! Tombstones of what the user deleted, under the keys a transcript import, a
//! reconciliation or a salvage would recreate (see [`key`]), so that nothing brings it
//! back. They live in the `forgotten` table of migration 0006 (kind, key), which
//! `memory::forget` also writes for `cairn forget`: a key here is stored as that table's
//! kind and key (`tool:X` is kind `tool_use`, key `X`; `turn:S:N` is `summary`, `S:N`;
//! `hash:S:H` is `observation_hash`, `S:H`; `prompt:S:P` is `prompt`, `S:P`), so a memory
//! forgotten either way is forgotten for both. A tombstone is never removed by cairn.

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

/// The `forgotten` table's kind and key for a key of [`key`].
fn stored(key: &str) -> (&'static str, &str) {
    const KINDS: [(&str, &str); 5] = [
        ("session:", "session"),
        ("prompt:", "prompt"),
        ("tool:", "tool_use"),
        ("turn:", "summary"),
        ("hash:", "observation_hash"),
    ];
    KINDS
        .iter()
        .find_map(|(prefix, kind)| key.strip_prefix(prefix).map(|rest| (*kind, rest)))
        .unwrap_or(("key", key))
}

/// Records that `key` was forgotten (again: the first time is kept).
pub fn forget(tx: &Transaction, key: &str, now: i64) -> Result<()> {
    let (kind, rest) = stored(key);
    tx.prepare_cached(
        "INSERT INTO forgotten (kind, key, forgotten_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (kind, key) DO NOTHING",
    )?
    .execute(params![kind, rest, now])?;
    Ok(())
}

/// True when `key` was forgotten.
pub fn is_forgotten(conn: &Connection, key: &str) -> Result<bool> {
    let (kind, rest) = stored(key);
    Ok(conn
        .prepare_cached("SELECT 1 FROM forgotten WHERE kind = ?1 AND key = ?2")?
        .query_row([kind, rest], |_| Ok(()))
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
