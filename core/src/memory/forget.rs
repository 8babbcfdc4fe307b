//! Forgetting: a memory a person decides should not have been kept is deleted, and its
//! tombstone (`memory::forgotten`, the only writer of the `forgotten` table) keeps any later
//! import, reconciliation or salvage from bringing it back.
//!
//! Deleting the row is the whole removal: the full-text indexes follow their tables through
//! the schema's triggers, and so do the vectors (`embeddings` and `embedding_queue` rows of
//! the memory are deleted by the `*_embed_delete` triggers of migration 0003). That it was
//! ever given to a session goes too (`told::forget`): SQLite gives the highest id again,
//! and a new memory under it must not read as given already.
//!
//! Tombstones left: an observation's content in its session and the tool calls it came
//! from, a prompt by its `prompt_id` (or number), a summary by its turn
//! ([`forgotten::Key`]).

use rusqlite::{OptionalExtension, Transaction};
use serde::Serialize;

use crate::error::Result;
use crate::memory::forgotten::{self, Key};
use crate::memory::kind::Kind;

/// One memory, by its row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Memory {
    Observation(i64),
    Summary(i64),
    Prompt(i64),
}

impl Memory {
    /// The memory of this kind with this id.
    pub fn of(kind: Kind, id: i64) -> Memory {
        match kind {
            Kind::Observation => Memory::Observation(id),
            Kind::Summary => Memory::Summary(id),
            Kind::Prompt => Memory::Prompt(id),
        }
    }

    /// Its kind and id.
    pub fn kind_id(self) -> (Kind, i64) {
        match self {
            Memory::Observation(id) => (Kind::Observation, id),
            Memory::Summary(id) => (Kind::Summary, id),
            Memory::Prompt(id) => (Kind::Prompt, id),
        }
    }

    /// How a person names it (`12`, `S3`, `P7`: [`Kind::reference`]).
    pub fn reference(self) -> String {
        let (kind, id) = self.kind_id();
        kind.reference(id)
    }
}

/// What a forget deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Forgotten {
    pub observations: usize,
    pub summaries: usize,
    pub prompts: usize,
}

impl Forgotten {
    pub fn total(&self) -> usize {
        self.observations + self.summaries + self.prompts
    }
}

/// Those of `memories` that exist: an id never given, or forgotten already, is not.
pub fn existing(conn: &rusqlite::Connection, memories: &[Memory]) -> Result<Vec<Memory>> {
    let mut out = Vec::new();
    for m in memories {
        let (kind, id) = m.kind_id();
        let table = match kind {
            Kind::Observation => "observations",
            Kind::Summary => "session_summaries",
            Kind::Prompt => "user_prompts",
        };
        let found = conn
            .prepare_cached(&format!("SELECT 1 FROM {table} WHERE id = ?1"))?
            .query_row([id], |_| Ok(()))
            .optional()?;
        if found.is_some() {
            out.push(*m);
        }
    }
    Ok(out)
}

/// Deletes these memories and leaves their tombstones; ids that do not exist are skipped.
pub fn forget(tx: &Transaction, memories: &[Memory], now: i64) -> Result<Forgotten> {
    let mut out = Forgotten::default();
    for m in memories {
        let (kind, id) = m.kind_id();
        crate::memory::told::forget(tx, kind, id)?;
        match *m {
            Memory::Observation(id) => out.observations += forget_observation(tx, id, now)?,
            Memory::Summary(id) => out.summaries += forget_summary(tx, id, now)?,
            Memory::Prompt(id) => out.prompts += forget_prompt(tx, id, now)?,
        }
    }
    Ok(out)
}

/// The memories of one session: its observations, turn summaries and prompts (the session
/// row itself stays, as the parent of its queued jobs).
pub fn session_memories(tx: &Transaction, session_id: &str) -> Result<Vec<Memory>> {
    let ids = |sql: &str| -> Result<Vec<i64>> {
        Ok(tx
            .prepare_cached(sql)?
            .query_map([session_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    };
    let mut out = Vec::new();
    out.extend(
        ids("SELECT id FROM observations WHERE session_id = ?1 ORDER BY id")?
            .into_iter()
            .map(Memory::Observation),
    );
    out.extend(
        ids("SELECT id FROM session_summaries WHERE session_id = ?1 ORDER BY id")?
            .into_iter()
            .map(Memory::Summary),
    );
    out.extend(
        ids("SELECT id FROM user_prompts WHERE session_id = ?1 ORDER BY id")?
            .into_iter()
            .map(Memory::Prompt),
    );
    Ok(out)
}

/// Forgets every memory of one session.
pub fn forget_session(tx: &Transaction, session_id: &str, now: i64) -> Result<Forgotten> {
    let memories = session_memories(tx, session_id)?;
    forget(tx, &memories, now)
}

fn forget_observation(tx: &Transaction, id: i64, now: i64) -> Result<usize> {
    let row: Option<(Option<String>, String)> = tx
        .prepare_cached("SELECT session_id, content_hash FROM observations WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((session_id, content_hash)) = row else {
        return Ok(0);
    };
    let key = Key::Observation {
        session_id: session_id.as_deref(),
        content_hash: &content_hash,
    };
    forgotten::forget(tx, &key, now)?;
    // The tool calls it came from, as the jobs that carried them still name them.
    let tool_uses: Vec<String> = tx
        .prepare_cached(
            "SELECT substr(p.dedupe_key, 6)
             FROM observations o, json_each(o.source_job_ids) j
             JOIN pending_messages p ON p.id = j.value
             WHERE o.id = ?1 AND p.dedupe_key LIKE 'tool:%'",
        )?
        .query_map([id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for tool_use in &tool_uses {
        forgotten::forget(tx, &Key::ToolUse(tool_use), now)?;
    }
    Ok(tx
        .prepare_cached("DELETE FROM observations WHERE id = ?1")?
        .execute([id])?)
}

fn forget_summary(tx: &Transaction, id: i64, now: i64) -> Result<usize> {
    let row: Option<(String, i64)> = tx
        .prepare_cached("SELECT session_id, prompt_number FROM session_summaries WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((session_id, prompt_number)) = row else {
        return Ok(0);
    };
    let key = Key::Summary {
        session_id: &session_id,
        prompt_number,
    };
    forgotten::forget(tx, &key, now)?;
    Ok(tx
        .prepare_cached("DELETE FROM session_summaries WHERE id = ?1")?
        .execute([id])?)
}

fn forget_prompt(tx: &Transaction, id: i64, now: i64) -> Result<usize> {
    let row: Option<(String, Option<String>, i64)> = tx
        .prepare_cached(
            "SELECT session_id, prompt_id, prompt_number FROM user_prompts WHERE id = ?1",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((session_id, prompt_id, prompt_number)) = row else {
        return Ok(0);
    };
    forgotten::forget(
        tx,
        &Key::prompt(&session_id, prompt_id.as_deref(), prompt_number),
        now,
    )?;
    Ok(tx
        .prepare_cached("DELETE FROM user_prompts WHERE id = ?1")?
        .execute([id])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::observations::{NewObservation, insert_observation};
    use crate::store::db::{self, OpenOptions};

    fn setup() -> (tempfile::TempDir, rusqlite::Connection) {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = db::open(&dir.path().join("t.db"), OpenOptions::default()).expect("open");
        (dir, conn)
    }

    fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).expect("count")
    }

    #[test]
    fn forgetting_deletes_the_row_its_vector_and_leaves_a_tombstone() {
        let (_d, mut conn) = setup();
        let (obs, sum, prompt) = db::write(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO sessions (session_id, project, started_at, updated_at) VALUES ('s1', 'p', 1, 1)",
                [],
            )?;
            tx.execute(
                "INSERT INTO pending_messages (session_id, project, kind, prompt_number, payload, dedupe_key, available_at, created_at, updated_at)
                 VALUES ('s1', 'p', 'observation', 1, '{}', 'tool:toolu_1', 1, 1, 1)",
                [],
            )?;
            let job: i64 = tx.query_row("SELECT id FROM pending_messages", [], |r| r.get(0))?;
            let o = NewObservation {
                session_id: Some("s1".into()),
                project: "p".into(),
                prompt_number: Some(1),
                kind: "discovery".into(),
                source_job_ids: vec![job],
                created_at: 2,
                content: crate::memory::rows::ObservationContent {
                    title: "secret thing".into(),
                    ..Default::default()
                },
                ..Default::default()
            };
            let obs = insert_observation(tx, &o)?.id();
            tx.execute(
                "INSERT INTO session_summaries (session_id, project, prompt_number, request, content_hash, created_at)
                 VALUES ('s1', 'p', 1, 'ask', 'h', 3)",
                [],
            )?;
            tx.execute(
                "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_id, prompt_text, created_at)
                 VALUES ('s1', 'p', 1, 'pid-1', 'hello', 1)",
                [],
            )?;
            let sum = tx.query_row("SELECT id FROM session_summaries", [], |r| r.get(0))?;
            let prompt = tx.query_row("SELECT id FROM user_prompts", [], |r| r.get(0))?;
            // A vector for the observation, as the embedder would store it.
            tx.execute(
                "INSERT INTO embeddings (kind, ref_id, project, created_at, model, bits, vector)
                 VALUES (0, ?1, 'p', 2, 'm', x'00', x'00')",
                [obs],
            )?;
            // Given to a session once: forgotten with it, as its id may come back.
            crate::memory::told::record(
                tx,
                crate::memory::told::Listener::main("s1"),
                crate::memory::told::Moment::Prompt,
                None,
                &[crate::memory::told::Given {
                    kind: Kind::Observation,
                    id: obs,
                    tokens: 5,
                }],
                2,
            )?;
            Ok((obs, sum, prompt))
        })
        .expect("setup");
        let hash: String = conn
            .query_row("SELECT content_hash FROM observations", [], |r| r.get(0))
            .expect("hash");
        let done = db::write(&mut conn, |tx| {
            forget(
                tx,
                &[
                    Memory::Observation(obs),
                    Memory::Summary(sum),
                    Memory::Prompt(prompt),
                    Memory::Observation(9999),
                ],
                10,
            )
        })
        .expect("forget");
        assert_eq!(
            done,
            Forgotten {
                observations: 1,
                summaries: 1,
                prompts: 1
            }
        );
        assert_eq!(count(&conn, "SELECT count(*) FROM observations"), 0);
        assert_eq!(count(&conn, "SELECT count(*) FROM embeddings"), 0);
        assert_eq!(count(&conn, "SELECT count(*) FROM embedding_queue"), 0);
        assert_eq!(count(&conn, "SELECT count(*) FROM memory_given"), 0);
        let keys: Vec<(String, String)> = conn
            .prepare("SELECT kind, key FROM forgotten ORDER BY kind, key")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(
            keys,
            vec![
                ("observation_hash".into(), format!("s1:{hash}")),
                ("prompt".into(), "s1:pid-1".into()),
                ("summary".into(), "s1:1".into()),
                ("tool_use".into(), "toolu_1".into()),
            ]
        );
        let turn = |prompt_number| Key::Summary {
            session_id: "s1",
            prompt_number,
        };
        assert!(forgotten::is_forgotten(&conn, &turn(1)).expect("check"));
        assert!(!forgotten::is_forgotten(&conn, &turn(2)).expect("check"));
    }

    #[test]
    fn a_session_is_forgotten_whole() {
        let (_d, mut conn) = setup();
        db::write(&mut conn, |tx| {
            tx.execute_batch(
                "INSERT INTO sessions (session_id, project, started_at, updated_at) VALUES ('s1', 'p', 1, 1), ('s2', 'p', 1, 1);
                 INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                     VALUES ('s1', 'p', 1, 'a', 1), ('s1', 'p', 2, 'b', 2), ('s2', 'p', 1, 'c', 3);",
            )?;
            Ok(())
        })
        .expect("setup");
        let done = db::write(&mut conn, |tx| forget_session(tx, "s1", 5)).expect("forget");
        assert_eq!(done.prompts, 2);
        assert_eq!(done.total(), 2);
        assert_eq!(count(&conn, "SELECT count(*) FROM user_prompts"), 1);
        assert_eq!(
            count(&conn, "SELECT count(*) FROM forgotten WHERE key = 's1:#2'"),
            1
        );
    }
}
