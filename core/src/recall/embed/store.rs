//! The `embeddings` table and the `embedding_queue` that feeds it.
//!
//! Triggers (migration 0003) put every new or changed observation, summary and prompt in
//! `embedding_queue`, and delete a memory's vector with the memory. [`backfill`] takes the
//! newest queued memories, embeds them and, in one transaction, stores their vectors and
//! takes them off the queue. A queued memory deleted before it was embedded simply drops
//! out. When the model changes, [`requeue_other_models`] puts every memory embedded by
//! another model back in the queue, so search never mixes two models' vectors.

use rusqlite::{Connection, OptionalExtension, params};

use super::bert::Bert;
use super::{bits_of, quantize, text_of};
use crate::error::Result;
use crate::recall::search::Kind;
use crate::store::db;

/// One memory waiting for its vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub kind: Kind,
    pub id: i64,
    pub project: String,
    pub created_at: i64,
    pub text: String,
}

/// How far embedding has come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Progress {
    /// Memories with a vector of the current model.
    pub embedded: u64,
    /// Memories waiting in the queue.
    pub queued: u64,
}

/// The memories waiting, newest first, at most `limit`, with the text to embed. Queue
/// entries whose memory is gone are removed.
pub fn queued(conn: &mut Connection, limit: usize) -> Result<Vec<Queued>> {
    let keys: Vec<(i64, i64)> = conn
        .prepare_cached(
            "SELECT kind, ref_id FROM embedding_queue ORDER BY ref_id DESC, kind LIMIT ?1",
        )?
        .query_map([limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(keys.len());
    for (code, id) in keys {
        let Some(kind) = Kind::from_code(code) else {
            continue;
        };
        if let Some(q) = read_memory(conn, kind, id)? {
            out.push(q);
        } else {
            db::write(conn, |tx| {
                tx.prepare_cached("DELETE FROM embedding_queue WHERE kind = ?1 AND ref_id = ?2")?
                    .execute(params![code, id])?;
                Ok(())
            })?;
        }
    }
    Ok(out)
}

fn read_memory(conn: &Connection, kind: Kind, id: i64) -> Result<Option<Queued>> {
    let sql = match kind {
        Kind::Observation => {
            "SELECT project, created_at, title, subtitle, narrative, facts_text, concepts_text
             FROM observations WHERE id = ?1"
        }
        Kind::Summary => {
            "SELECT project, created_at, request, investigated, learned, completed, next_steps || ' ' || notes
             FROM session_summaries WHERE id = ?1"
        }
        Kind::Prompt => {
            "SELECT project, created_at, prompt_text, '', '', '', '' FROM user_prompts WHERE id = ?1"
        }
    };
    let row = conn
        .prepare_cached(sql)?
        .query_row([id], |r| {
            let mut fields = Vec::with_capacity(5);
            for i in 2..7 {
                fields.push(r.get::<_, Option<String>>(i)?.unwrap_or_default());
            }
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, fields))
        })
        .optional()?;
    Ok(row.map(|(project, created_at, fields)| {
        let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
        Queued {
            kind,
            id,
            project,
            created_at,
            text: text_of(&refs),
        }
    }))
}

/// Stores the vectors of `items` made by `model` and takes them off the queue, in one
/// transaction.
pub fn store(conn: &mut Connection, model: &str, items: &[(Queued, Vec<f32>)]) -> Result<()> {
    db::write(conn, |tx| {
        let mut put = tx.prepare_cached(
            "INSERT OR REPLACE INTO embeddings (kind, ref_id, project, created_at, model, bits, vector)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut done =
            tx.prepare_cached("DELETE FROM embedding_queue WHERE kind = ?1 AND ref_id = ?2")?;
        for (q, v) in items {
            put.execute(params![
                q.kind.code(),
                q.id,
                q.project,
                q.created_at,
                model,
                bits_of(v),
                quantize(v)
            ])?;
            done.execute(params![q.kind.code(), q.id])?;
        }
        Ok(())
    })
}

/// Embeds and stores up to `batch` queued memories; returns how many were stored (0 when
/// the queue is empty).
pub fn backfill(conn: &mut Connection, bert: &Bert, model: &str, batch: usize) -> Result<usize> {
    let mut items = queued(conn, batch.max(1))?;
    if items.is_empty() {
        return Ok(0);
    }
    // Similar lengths together: a batch is padded to its longest text.
    items.sort_by_key(|q| q.text.len());
    let texts: Vec<&str> = items.iter().map(|q| q.text.as_str()).collect();
    let vectors = bert.embed(&texts)?;
    let pairs: Vec<(Queued, Vec<f32>)> = items.into_iter().zip(vectors).collect();
    store(conn, model, &pairs)?;
    Ok(pairs.len())
}

/// Queues every memory whose vector was made by another model than `model`; returns how
/// many. Their old vectors stay until replaced (search ignores them).
pub fn requeue_other_models(conn: &mut Connection, model: &str) -> Result<usize> {
    db::write(conn, |tx| {
        Ok(tx
            .prepare_cached(
                "INSERT OR IGNORE INTO embedding_queue (kind, ref_id)
                 SELECT kind, ref_id FROM embeddings WHERE model <> ?1",
            )?
            .execute([model])?)
    })
}

/// Embedded and waiting counts for `model`.
pub fn progress(conn: &Connection, model: &str) -> Result<Progress> {
    let embedded: i64 = conn
        .prepare_cached("SELECT count(*) FROM embeddings WHERE model = ?1")?
        .query_row([model], |r| r.get(0))?;
    let queued: i64 = conn
        .prepare_cached("SELECT count(*) FROM embedding_queue")?
        .query_row([], |r| r.get(0))?;
    Ok(Progress {
        embedded: embedded as u64,
        queued: queued as u64,
    })
}
