//! The `embeddings` table and the `embedding_queue` that feeds it.
//!
//! Triggers (migration 0003) put every new or changed observation, summary and prompt in
//! `embedding_queue`, and delete a memory's vector with the memory. [`backfill`] takes the
//! newest queued memories, embeds them and, in one transaction, stores their vectors and
//! takes them off the queue. A queued memory deleted before it was embedded simply drops
//! out. When the model changes, [`requeue_other_models`] puts every memory embedded by
//! another model back in the queue, so search never mixes two models' vectors. Sync carries
//! a memory's vector to other devices ([`carried`]); one whose vectors come from the same
//! model keeps it ([`keep_carried`]) instead of embedding the memory again.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::model::Embedder;
use super::{bits_of, parts_of, quantize, text_of};
use crate::error::Result;
use crate::memory::kind::Kind;
use crate::store::db;

/// One memory waiting for its vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub kind: Kind,
    pub id: i64,
    pub project: String,
    pub created_at: i64,
    pub text: String,
    /// The texts of its parts ([`parts_of`]), embedded beside the whole.
    pub parts: Vec<String>,
}

/// The vectors made of one queued memory: of its whole text, and of each of its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors {
    pub whole: Vec<f32>,
    pub parts: Vec<Vec<f32>>,
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
            parts: parts_of(&refs),
        }
    }))
}

/// A memory's stored int8 vector, those of its parts one after another (empty when it is
/// one part), and the model that made them (one row per memory).
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub model: String,
    pub vector: Vec<u8>,
    pub parts: Vec<u8>,
}

/// The vector stored for a memory, whichever model made it.
pub fn stored(conn: &Connection, kind: Kind, id: i64) -> Result<Option<Stored>> {
    Ok(carried(conn, kind, id)?.map(|c| Stored {
        model: c.model,
        vector: c.vector,
        parts: c.parts,
    }))
}

/// Which of the rows `seqs` are there, with the memory each holds (kind code, ref_id): a
/// row deleted is missing, a seq reused holds another memory.
pub fn present(
    conn: &Connection,
    seqs: &[i64],
) -> Result<std::collections::HashSet<(i64, i64, i64)>> {
    if seqs.is_empty() {
        return Ok(Default::default());
    }
    let found = conn
        .prepare_cached(&format!(
            "SELECT seq, kind, ref_id FROM embeddings WHERE seq IN ({})",
            crate::recall::sql::marks(seqs.len())
        ))?
        .query_map(rusqlite::params_from_iter(seqs), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(found)
}

/// The int8 vector of row `seq` while it holds memory `kind` `id` (`None` once the row is
/// deleted, or its seq reused by another).
pub fn vector_at(conn: &Connection, seq: i64, kind: Kind, id: i64) -> Result<Option<Vec<u8>>> {
    Ok(conn
        .prepare_cached(
            "SELECT vector FROM embeddings WHERE seq = ?1 AND kind = ?2 AND ref_id = ?3",
        )?
        .query_row(params![seq, kind.code(), id], |r| r.get(0))
        .optional()?)
}

/// Stores the vectors of `items` made by `model` and takes them off the queue, in one
/// transaction.
pub fn store(conn: &mut Connection, model: &str, items: &[(Queued, Vectors)]) -> Result<()> {
    db::write(conn, |tx| {
        let mut put = tx.prepare_cached(
            "INSERT OR REPLACE INTO embeddings (kind, ref_id, project, created_at, model, bits, vector, parts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
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
                bits_of(&v.whole),
                quantize(&v.whole),
                v.parts
                    .iter()
                    .flat_map(|p| quantize(p))
                    .collect::<Vec<u8>>()
            ])?;
            done.execute(params![q.kind.code(), q.id])?;
        }
        Ok(())
    })
}

/// Embeds and stores up to `batch` queued memories; returns how many were stored (0 when
/// the queue is empty).
pub fn backfill(
    conn: &mut Connection,
    bert: &Embedder,
    model: &str,
    batch: usize,
) -> Result<usize> {
    let mut items = queued(conn, batch.max(1))?;
    if items.is_empty() {
        return Ok(0);
    }
    // Similar lengths together: a batch is padded to its longest text.
    items.sort_by_key(|q| q.text.len());
    let vectors = embed_with_parts(bert, &items)?;
    let pairs: Vec<(Queued, Vectors)> = items.into_iter().zip(vectors).collect();
    store(conn, model, &pairs)?;
    Ok(pairs.len())
}

/// The vectors of each memory and of its parts. The local model pools the parts from the
/// pass over the whole text (its head is the text's first line: `parts_of`); an endpoint
/// gets every text, each memory's whole then its parts, in one request.
fn embed_with_parts(bert: &Embedder, items: &[Queued]) -> Result<Vec<Vectors>> {
    match bert {
        Embedder::Local(b) => {
            let texts: Vec<(&str, Option<usize>)> = items
                .iter()
                .map(|q| {
                    let head = q.parts.first().filter(|h| q.text.starts_with(h.as_str()));
                    (q.text.as_str(), head.map(|h| h.len() + 1))
                })
                .collect();
            Ok(b.embed_split(&texts)?
                .into_iter()
                .map(|(whole, parts)| Vectors {
                    whole,
                    parts: parts.map_or(Vec::new(), |(h, b)| vec![h, b]),
                })
                .collect())
        }
        Embedder::Remote(_) => {
            let texts: Vec<&str> = items
                .iter()
                .flat_map(|q| std::iter::once(&q.text).chain(&q.parts))
                .map(String::as_str)
                .collect();
            let mut vectors = bert.embed(&texts)?.into_iter();
            Ok(items
                .iter()
                .map(|q| Vectors {
                    whole: vectors.next().unwrap_or_default(),
                    parts: vectors.by_ref().take(q.parts.len()).collect(),
                })
                .collect())
        }
    }
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

/// A memory's stored vectors as they travel with the memory to another device (sync).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    pub model: String,
    pub bits: Vec<u8>,
    pub vector: Vec<u8>,
    pub parts: Vec<u8>,
}

/// The vectors stored for a memory, whichever model made them, with their sign bits.
pub fn carried(conn: &Connection, kind: Kind, id: i64) -> Result<Option<Carried>> {
    Ok(conn
        .prepare_cached(
            "SELECT model, bits, vector, parts FROM embeddings WHERE kind = ?1 AND ref_id = ?2",
        )?
        .query_row(params![kind.code(), id], |r| {
            Ok(Carried {
                model: r.get(0)?,
                bits: r.get(1)?,
                vector: r.get(2)?,
                parts: r.get(3)?,
            })
        })
        .optional()?)
}

/// Keeps a vector that came with a memory from another device, and takes the memory off
/// the queue, when the model that made it is the one this store's vectors come from (the
/// newest vector's); returns whether it was kept. Otherwise the memory stays queued for
/// the local model, as any new memory does.
pub fn keep_carried(
    tx: &Transaction,
    kind: Kind,
    id: i64,
    project: &str,
    created_at: i64,
    c: &Carried,
) -> Result<bool> {
    let local: Option<String> = tx
        .prepare_cached("SELECT model FROM embeddings ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if local.as_deref() != Some(c.model.as_str()) {
        return Ok(false);
    }
    tx.prepare_cached(
        "INSERT OR REPLACE INTO embeddings (kind, ref_id, project, created_at, model, bits, vector, parts)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        kind.code(),
        id,
        project,
        created_at,
        c.model,
        c.bits,
        c.vector,
        c.parts
    ])?;
    tx.prepare_cached("DELETE FROM embedding_queue WHERE kind = ?1 AND ref_id = ?2")?
        .execute(params![kind.code(), id])?;
    Ok(true)
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

/// Tests only: stores a vector of `model` for each memory waiting for one that `vector`
/// gives one, by the memory's id.
#[cfg(test)]
pub(crate) fn store_each(
    conn: &mut Connection,
    model: &str,
    vector: impl Fn(i64) -> Option<Vec<f32>>,
) {
    let queued = queued(conn, 10_000).expect("queued");
    let items: Vec<_> = queued
        .into_iter()
        .filter_map(|q| {
            let whole = vector(q.id)?;
            Some((
                q,
                Vectors {
                    whole,
                    parts: Vec::new(),
                },
            ))
        })
        .collect();
    store(conn, model, &items).expect("store");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::observations::{
        NewObservation, NewSummary, insert_observation, upsert_summary,
    };
    use crate::store::paths::DataDir;

    fn fixture() -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let conn =
            db::open_data_dir(&DataDir::new(tmp.path()), db::OpenOptions::default()).expect("open");
        (tmp, conn)
    }

    fn unit(seed: f32) -> Vec<f32> {
        let v: Vec<f32> = (0..384).map(|i| ((i as f32 + seed) * 0.37).sin()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).expect(sql)
    }

    #[test]
    fn every_kind_of_memory_is_queued_stored_and_forgotten_with_its_memory() {
        let (_tmp, mut conn) = fixture();
        db::write(&mut conn, |tx| {
            crate::memory::sessions::ensure(tx, "s", "p", "/p", 1)?;
            tx.execute(
                "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                 VALUES ('s', 'p', 1, 'why is the cache slow?', 2)",
                [],
            )?;
            insert_observation(
                tx,
                &NewObservation {
                    session_id: Some("s".into()),
                    project: "p".into(),
                    prompt_number: Some(1),
                    kind: "discovery".into(),
                    origin: "model".into(),
                    created_at: 3,
                    content: crate::memory::rows::ObservationContent {
                        title: "Cache misses".into(),
                        subtitle: "at 8f5a80ea07e0dc98792c259b03d1d7f7678f87fa".into(),
                        narrative: "The key includes the time.".into(),
                        ..Default::default()
                    },
                    ..NewObservation::default()
                },
            )?;
            upsert_summary(
                tx,
                &NewSummary {
                    session_id: "s".into(),
                    project: "p".into(),
                    prompt_number: 1,
                    request: "Speed up the cache".into(),
                    learned: "Keys held the time".into(),
                    notes: "check hit rate".into(),
                    origin: "model".into(),
                    created_at: 4,
                    ..NewSummary::default()
                },
            )?;
            Ok(())
        })
        .expect("seed");
        let waiting = queued(&mut conn, 10).expect("queued");
        let texts: Vec<(Kind, &str)> = waiting.iter().map(|q| (q.kind, q.text.as_str())).collect();
        assert!(
            texts.contains(&(Kind::Prompt, "why is the cache slow?")),
            "{texts:?}"
        );
        assert!(
            texts.contains(&(
                Kind::Observation,
                "Cache misses\nat\nThe key includes the time."
            )),
            "{texts:?}"
        );
        assert!(
            texts.contains(&(
                Kind::Summary,
                "Speed up the cache\nKeys held the time\ncheck hit rate"
            )),
            "{texts:?}"
        );
        // An observation and a summary have a head and a body; a prompt is one part.
        let parts: Vec<(Kind, Vec<&str>)> = waiting
            .iter()
            .map(|q| (q.kind, q.parts.iter().map(String::as_str).collect()))
            .collect();
        assert!(
            parts.contains(&(
                Kind::Observation,
                vec!["Cache misses", "at\nThe key includes the time."]
            )),
            "{parts:?}"
        );
        assert!(
            parts.contains(&(
                Kind::Summary,
                vec!["Speed up the cache", "Keys held the time\ncheck hit rate"]
            )),
            "{parts:?}"
        );
        assert!(parts.contains(&(Kind::Prompt, vec![])), "{parts:?}");
        let items: Vec<(Queued, Vectors)> = waiting
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let parts = (0..q.parts.len())
                    .map(|p| unit((10 * (i + 1) + p) as f32))
                    .collect();
                let whole = unit(i as f32);
                (q, Vectors { whole, parts })
            })
            .collect();
        store(&mut conn, "m:1", &items).expect("store");
        assert_eq!(
            progress(&conn, "m:1").expect("progress"),
            Progress {
                embedded: 3,
                queued: 0
            }
        );
        // A stored vector is read back by memory, with its model and parts, and by row.
        let (id, seq): (i64, i64) = conn
            .query_row(
                "SELECT ref_id, seq FROM embeddings WHERE kind = 0",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("row");
        let (_, vectors) = items
            .iter()
            .find(|(q, _)| q.kind == Kind::Observation)
            .expect("observation");
        let want = quantize(&vectors.whole);
        let want_parts: Vec<u8> = vectors.parts.iter().flat_map(|p| quantize(p)).collect();
        assert_eq!(want_parts.len(), 2 * 384);
        assert_eq!(
            stored(&conn, Kind::Observation, id).expect("read"),
            Some(Stored {
                model: "m:1".into(),
                vector: want.clone(),
                parts: want_parts
            })
        );
        assert_eq!(
            vector_at(&conn, seq, Kind::Observation, id)
                .expect("read")
                .as_ref(),
            Some(&want)
        );

        // A change queues the memory again and drops its old vector; so does a summary
        // rewritten for its turn; a deletion takes both away.
        db::write(&mut conn, |tx| {
            tx.execute(
                "UPDATE user_prompts SET prompt_text = 'why is it slow?'",
                [],
            )?;
            tx.execute(
                "UPDATE observations SET narrative = 'Keys hold the time.'",
                [],
            )?;
            upsert_summary(
                tx,
                &NewSummary {
                    session_id: "s".into(),
                    project: "p".into(),
                    prompt_number: 1,
                    request: "Speed up the cache".into(),
                    learned: "Keys held the time; fixed".into(),
                    origin: "model".into(),
                    created_at: 5,
                    ..NewSummary::default()
                },
            )?;
            Ok(())
        })
        .expect("change");
        assert_eq!(count(&conn, "SELECT count(*) FROM embeddings"), 0);
        assert_eq!(count(&conn, "SELECT count(*) FROM embedding_queue"), 3);
        db::write(&mut conn, |tx| {
            tx.execute("DELETE FROM observations", [])?;
            tx.execute("DELETE FROM session_summaries", [])?;
            tx.execute("DELETE FROM user_prompts", [])?;
            Ok(())
        })
        .expect("delete");
        assert_eq!(count(&conn, "SELECT count(*) FROM embedding_queue"), 0);

        // Vectors of another model are queued again; queue entries whose memory is gone
        // are dropped when read.
        db::write(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO embeddings (kind, ref_id, project, created_at, model, bits, vector)
                 VALUES (0, 99, 'p', 1, 'old:1', x'00', x'00')",
                [],
            )?;
            Ok(())
        })
        .expect("old vector");
        assert_eq!(requeue_other_models(&mut conn, "m:1").expect("requeue"), 1);
        assert!(queued(&mut conn, 10).expect("queued").is_empty());
        assert_eq!(count(&conn, "SELECT count(*) FROM embedding_queue"), 0);
    }
}
