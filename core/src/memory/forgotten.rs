//! The `forgotten` table (migration 0006): tombstones of what a person chose to forget, so
//! that no import, reconciliation or salvage brings it back. The only module that writes
//! the table; `memory::forget` deletes memories and leaves their tombstones through it, and
//! the importers and the transcript reader ask it before they write. A tombstone is never
//! removed by cairn.
//!
//! Every tombstone is a [`Key`], stored as the table's `(kind, key)` pair; [`Key::stored`]
//! renders it and [`Key::parse`] reads it back.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::error::Result;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::memory::sessions::PromptRecord;

/// What a tombstone names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// Everything of a session: kind `session`, key the session id.
    Session(&'a str),
    /// A prompt and the turn it started: kind `prompt`, key `session_id:prompt_id`
    /// (`session_id:#N` for a prompt without a `prompt_id`).
    Prompt {
        session_id: &'a str,
        prompt: PromptRef<'a>,
    },
    /// A tool call, whose observation job the queue knows by it: kind `tool_use`, key the
    /// `tool_use_id`.
    ToolUse(&'a str),
    /// A turn's summary: kind `summary`, key `session_id:prompt_number`.
    Summary {
        session_id: &'a str,
        prompt_number: i64,
    },
    /// An observation's content within its session: kind `observation_hash`, key
    /// `session_id:content_hash` (session empty for a memory saved by hand).
    Observation {
        session_id: Option<&'a str>,
        content_hash: &'a str,
    },
}

/// How a prompt is named in its tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptRef<'a> {
    /// Claude Code's `prompt_id`.
    Id(&'a str),
    /// The prompt number, for a prompt stored without a `prompt_id`.
    Number(i64),
}

/// The table's `kind` of each [`Key`].
const SESSION: &str = "session";
const PROMPT: &str = "prompt";
const TOOL_USE: &str = "tool_use";
const SUMMARY: &str = "summary";
const OBSERVATION: &str = "observation_hash";

impl<'a> Key<'a> {
    /// The key of a prompt: by its `prompt_id` when it has one, else by its number.
    pub fn prompt(session_id: &'a str, prompt_id: Option<&'a str>, prompt_number: i64) -> Self {
        Key::Prompt {
            session_id,
            prompt: prompt_id.map_or(PromptRef::Number(prompt_number), PromptRef::Id),
        }
    }

    /// The `(kind, key)` row this tombstone is stored as.
    pub fn stored(&self) -> (&'static str, String) {
        match *self {
            Key::Session(id) => (SESSION, id.to_string()),
            Key::Prompt {
                session_id,
                prompt: PromptRef::Id(id),
            } => (PROMPT, format!("{session_id}:{id}")),
            Key::Prompt {
                session_id,
                prompt: PromptRef::Number(n),
            } => (PROMPT, format!("{session_id}:#{n}")),
            Key::ToolUse(id) => (TOOL_USE, id.to_string()),
            Key::Summary {
                session_id,
                prompt_number,
            } => (SUMMARY, format!("{session_id}:{prompt_number}")),
            Key::Observation {
                session_id,
                content_hash,
            } => (
                OBSERVATION,
                format!("{}:{content_hash}", session_id.unwrap_or("")),
            ),
        }
    }

    /// Reads a stored `(kind, key)` row back; `None` for a kind cairn never writes or a key
    /// not of its kind's shape. The session id is what comes before the last `:`.
    pub fn parse(kind: &str, key: &'a str) -> Option<Self> {
        let split = || key.rsplit_once(':');
        Some(match kind {
            SESSION => Key::Session(key),
            TOOL_USE => Key::ToolUse(key),
            PROMPT => {
                let (session_id, rest) = split()?;
                let prompt = match rest.strip_prefix('#') {
                    Some(n) => PromptRef::Number(n.parse().ok()?),
                    None => PromptRef::Id(rest),
                };
                Key::Prompt { session_id, prompt }
            }
            SUMMARY => {
                let (session_id, n) = split()?;
                Key::Summary {
                    session_id,
                    prompt_number: n.parse().ok()?,
                }
            }
            OBSERVATION => {
                let (session_id, content_hash) = split()?;
                Key::Observation {
                    session_id: Some(session_id).filter(|s| !s.is_empty()),
                    content_hash,
                }
            }
            _ => return None,
        })
    }
}

/// Records that `key` was forgotten (again: the first time is kept).
pub fn forget(tx: &Transaction, key: &Key, now: i64) -> Result<()> {
    let (kind, key) = key.stored();
    tx.prepare_cached(
        "INSERT INTO forgotten (kind, key, forgotten_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (kind, key) DO NOTHING",
    )?
    .execute(params![kind, key, now])?;
    Ok(())
}

/// True when `key` was forgotten.
pub fn is_forgotten(conn: &Connection, key: &Key) -> Result<bool> {
    let (kind, key) = key.stored();
    Ok(conn
        .prepare_cached("SELECT 1 FROM forgotten WHERE kind = ?1 AND key = ?2")?
        .query_row(params![kind, key], |_| Ok(()))
        .optional()?
        .is_some())
}

/// True when this observation was forgotten (an importer then skips it).
pub fn observation_forgotten(conn: &Connection, o: &NewObservation) -> Result<bool> {
    let hash = o.content_hash();
    is_forgotten(
        conn,
        &Key::Observation {
            session_id: o.session_id.as_deref(),
            content_hash: &hash,
        },
    )
}

/// True when this turn's summary was forgotten.
pub fn summary_forgotten(conn: &Connection, s: &NewSummary) -> Result<bool> {
    is_forgotten(
        conn,
        &Key::Summary {
            session_id: &s.session_id,
            prompt_number: s.prompt_number,
        },
    )
}

/// True when this prompt was forgotten.
pub fn prompt_forgotten(conn: &Connection, p: &PromptRecord) -> Result<bool> {
    is_forgotten(
        conn,
        &Key::prompt(&p.session_id, p.prompt_id.as_deref(), p.prompt_number),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;

    #[test]
    fn a_key_forgotten_stays_forgotten() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut conn = db::open(&tmp.path().join("c.db"), db::OpenOptions::default()).expect("db");
        assert!(!is_forgotten(&conn, &Key::ToolUse("t1")).expect("read"));
        db::write(&mut conn, |tx| {
            forget(tx, &Key::ToolUse("t1"), 5)?;
            forget(tx, &Key::ToolUse("t1"), 9)
        })
        .expect("forget");
        assert!(is_forgotten(&conn, &Key::ToolUse("t1")).expect("read"));
        let at: i64 = conn
            .query_row("SELECT forgotten_at FROM forgotten", [], |r| r.get(0))
            .expect("at");
        assert_eq!(at, 5);
    }

    /// The stored form of every kind, as migration 0006 describes it, and back.
    #[test]
    fn keys_are_stored_as_the_migration_says_and_read_back() {
        let check = |key: Key, kind: &str, stored: &str| {
            assert_eq!(key.stored(), (kind, stored.to_string()), "{key:?}");
            assert_eq!(Key::parse(kind, stored), Some(key), "{kind} {stored}");
        };
        check(Key::Session("s"), "session", "s");
        check(Key::prompt("s", Some("p"), 4), "prompt", "s:p");
        check(Key::prompt("s", None, 2), "prompt", "s:#2");
        check(Key::ToolUse("toolu_1"), "tool_use", "toolu_1");
        let turn = Key::Summary {
            session_id: "s",
            prompt_number: 3,
        };
        check(turn, "summary", "s:3");
        let content = |session_id| Key::Observation {
            session_id,
            content_hash: "h",
        };
        check(content(Some("s")), "observation_hash", "s:h");
        check(content(None), "observation_hash", ":h");
        assert_eq!(Key::parse("key", "tool:x"), None);
        assert_eq!(Key::parse("summary", "s:x"), None);
        assert_eq!(Key::parse("prompt", "no-colon"), None);
    }
}
