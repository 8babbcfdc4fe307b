//! What each session was already told: the `memory_given` table (migrations
//! `0011_memory_given`, `0016_memory_given_agent`, `0017_memory_given_compaction`), one row
//! per memory cairn gave a session's main conversation or one of its subagents
//! ([`Listener`]), at the moment it gave it (the SessionStart index, a prompt, a file about
//! to be read or edited), with the line's estimated tokens. Its only writer. Read so that a
//! memory is never given twice to one listener and a file's memories once per listener, and
//! by `cairn status` and the viewer for how often memories were given and what that cost.
//! Holds ids and sizes, never text.
//!
//! A compaction ([`retire`]) replaces the main conversation's context with a summary: what
//! it was told before no longer counts as given (the rows stay, for the totals).

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::error::Result;
use crate::memory::kind::Kind;

/// When a memory was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// In the index injected when the session started.
    SessionStart,
    /// With a prompt of the user's.
    Prompt,
    /// Beside a call of a tool that reads or edits a file.
    File,
}

impl Moment {
    /// Every moment, in the order a session meets them.
    pub const ALL: [Moment; 3] = [Moment::SessionStart, Moment::Prompt, Moment::File];

    /// The word stored in `memory_given.moment`.
    pub fn as_str(self) -> &'static str {
        match self {
            Moment::SessionStart => "session_start",
            Moment::Prompt => "prompt",
            Moment::File => "file",
        }
    }

    fn parse(s: &str) -> Option<Moment> {
        Moment::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// Who is told: a session's main conversation, or one of its subagents. Each has a
/// context of its own, so each is told on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener<'a> {
    pub session: &'a str,
    /// Claude Code's `agent_id` of the subagent; `""` for the main conversation.
    pub agent: &'a str,
}

impl<'a> Listener<'a> {
    /// The main conversation of `session`.
    pub fn main(session: &'a str) -> Self {
        Listener { session, agent: "" }
    }

    /// The subagent `agent` of `session`, or its main conversation when `None`.
    pub fn of(session: &'a str, agent: Option<&'a str>) -> Self {
        Listener {
            session,
            agent: agent.unwrap_or(""),
        }
    }
}

/// One memory given to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    pub kind: Kind,
    pub id: i64,
    /// Estimated tokens of the line that gave it.
    pub tokens: usize,
}

/// Records that `to` was given `memories` at `moment` (about `file`, for
/// [`Moment::File`]), at `now`.
pub fn record(
    tx: &Transaction,
    to: Listener,
    moment: Moment,
    file: Option<&str>,
    memories: &[Given],
    now: i64,
) -> Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO memory_given (session_id, agent_id, kind, memory_id, moment, file,
                                   given_at, tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for g in memories {
        insert.execute(params![
            to.session,
            to.agent,
            g.kind.code(),
            g.id,
            moment.as_str(),
            file,
            now,
            g.tokens as i64
        ])?;
    }
    Ok(())
}

/// Forgets that the memory was ever given: it was deleted, and its id may come back for
/// another memory (SQLite reuses the highest), which must not read as given already.
pub fn forget(tx: &Transaction, kind: Kind, id: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM memory_given WHERE kind = ?1 AND memory_id = ?2")?
        .execute(params![kind.code(), id])?;
    Ok(())
}

/// Retires what the main conversation of `session` was told: its context was compacted
/// at `now`, so its memories may be given again. A subagent keeps its own context.
pub fn retire(tx: &Transaction, session: &str, now: i64) -> Result<()> {
    tx.prepare_cached(
        "UPDATE memory_given SET retired_at = ?2
         WHERE session_id = ?1 AND agent_id = '' AND retired_at IS NULL",
    )?
    .execute(params![session, now])?;
    Ok(())
}

/// Whether `to` was already given the memory, at any moment since its context last began.
pub fn was_given(conn: &Connection, to: Listener, kind: Kind, id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM memory_given
             WHERE session_id = ?1 AND agent_id = ?2 AND kind = ?3 AND memory_id = ?4
               AND retired_at IS NULL LIMIT 1",
        )?
        .query_row(params![to.session, to.agent, kind.code(), id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Whether `to` was already given memories about `file` since its context last began.
pub fn file_was_given(conn: &Connection, to: Listener, file: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM memory_given
             WHERE session_id = ?1 AND agent_id = ?2 AND moment = 'file' AND file = ?3
               AND retired_at IS NULL LIMIT 1",
        )?
        .query_row(params![to.session, to.agent, file], |_| Ok(()))
        .optional()?
        .is_some())
}

/// How many memories were given at one moment since a time, in how many sessions, and their
/// tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    pub moment: Option<Moment>,
    pub memories: u64,
    pub sessions: u64,
    pub tokens: u64,
}

/// What was given since `since`, per moment (moments with nothing given are left out).
pub fn totals_since(conn: &Connection, since: i64) -> Result<Vec<Totals>> {
    let rows = conn
        .prepare_cached(
            "SELECT moment, COUNT(*), COUNT(DISTINCT session_id), COALESCE(SUM(tokens), 0)
             FROM memory_given WHERE given_at >= ?1 GROUP BY moment",
        )?
        .query_map([since], |r| {
            Ok(Totals {
                moment: Moment::parse(&r.get::<_, String>(0)?),
                memories: r.get::<_, i64>(1)? as u64,
                sessions: r.get::<_, i64>(2)? as u64,
                tokens: r.get::<_, i64>(3)? as u64,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut rows: Vec<Totals> = rows.into_iter().filter(|t| t.moment.is_some()).collect();
    rows.sort_by_key(|t| t.moment);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;

    fn db() -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().expect("tmp");
        let conn = db::open(&tmp.path().join("c.db"), db::OpenOptions::default()).expect("db");
        (tmp, conn)
    }

    fn given(kind: Kind, id: i64, tokens: usize) -> Given {
        Given { kind, id, tokens }
    }

    #[test]
    fn a_given_memory_is_known_to_its_session_only() {
        let (_tmp, mut conn) = db();
        db::write(&mut conn, |tx| {
            record(
                tx,
                Listener::main("s1"),
                Moment::SessionStart,
                None,
                &[given(Kind::Observation, 7, 12)],
                1_000,
            )?;
            record(
                tx,
                Listener::main("s1"),
                Moment::File,
                Some("src/a.rs"),
                &[given(Kind::Summary, 3, 20)],
                2_000,
            )
        })
        .expect("record");
        assert!(was_given(&conn, Listener::main("s1"), Kind::Observation, 7).expect("read"));
        assert!(!was_given(&conn, Listener::main("s2"), Kind::Observation, 7).expect("read"));
        assert!(!was_given(&conn, Listener::main("s1"), Kind::Summary, 7).expect("read"));
        assert!(was_given(&conn, Listener::main("s1"), Kind::Summary, 3).expect("read"));
        assert!(file_was_given(&conn, Listener::main("s1"), "src/a.rs").expect("read"));
        assert!(!file_was_given(&conn, Listener::main("s1"), "src/b.rs").expect("read"));
        assert!(!file_was_given(&conn, Listener::main("s2"), "src/a.rs").expect("read"));
        // A subagent of s1 has a context of its own: told nothing yet.
        let sub = Listener::of("s1", Some("ag1"));
        assert!(!was_given(&conn, sub, Kind::Observation, 7).expect("read"));
        assert!(!file_was_given(&conn, sub, "src/a.rs").expect("read"));
        db::write(&mut conn, |tx| {
            record(
                tx,
                sub,
                Moment::File,
                Some("src/b.rs"),
                &[given(Kind::Observation, 8, 9)],
                3_000,
            )
        })
        .expect("record");
        assert!(file_was_given(&conn, sub, "src/b.rs").expect("read"));
        assert!(!file_was_given(&conn, Listener::main("s1"), "src/b.rs").expect("read"));
        assert!(!was_given(&conn, Listener::main("s1"), Kind::Observation, 8).expect("read"));
    }

    #[test]
    fn totals_count_memories_sessions_and_tokens_per_moment() {
        let (_tmp, mut conn) = db();
        db::write(&mut conn, |tx| {
            record(
                tx,
                Listener::main("s1"),
                Moment::Prompt,
                None,
                &[given(Kind::Observation, 1, 30), given(Kind::Prompt, 2, 10)],
                5_000,
            )?;
            record(
                tx,
                Listener::main("s2"),
                Moment::Prompt,
                None,
                &[given(Kind::Observation, 1, 30)],
                6_000,
            )?;
            record(
                tx,
                Listener::main("s1"),
                Moment::SessionStart,
                None,
                &[given(Kind::Observation, 9, 5)],
                1_000,
            )
        })
        .expect("record");
        let t = totals_since(&conn, 2_000).expect("totals");
        assert_eq!(
            t,
            vec![Totals {
                moment: Some(Moment::Prompt),
                memories: 3,
                sessions: 2,
                tokens: 70
            }]
        );
        assert_eq!(totals_since(&conn, 0).expect("totals").len(), 2);
    }
}
