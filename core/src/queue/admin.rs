//! Skipped jobs, by a person's decision, and the cleanup of finished ones: `replay` puts
//! skipped jobs back with their attempts reset, `discard` deletes them with their errors,
//! `purge` deletes old `done` jobs. Writes `pending_messages` and `job_errors`.
//!
//! Invariants: only `skipped` jobs are replayed or discarded (replaying a done job would
//! duplicate it); only `done` jobs are purged; no automatic step ever removes an
//! unprocessed event.

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::store::db;

/// Which skipped jobs `replay` brings back or `discard` deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Ids(Vec<i64>),
    Session(String),
    /// Skipped at or after this time (ms).
    Since(i64),
    AllSkipped,
}

/// Runs `sql`, a statement over `pending_messages` ending in `WHERE status = 'skipped'`
/// whose `?1` is `now`, on the jobs `selector` picks; returns how many rows it changed.
fn on_skipped(conn: &mut Connection, sql: &str, selector: &Selector, now: i64) -> Result<usize> {
    db::write(conn, |tx| {
        Ok(match selector {
            Selector::AllSkipped => tx.prepare_cached(sql)?.execute([now])?,
            Selector::Session(s) => tx
                .prepare_cached(&format!("{sql} AND session_id = ?2"))?
                .execute(params![now, s])?,
            Selector::Since(t) => tx
                .prepare_cached(&format!("{sql} AND updated_at >= ?2"))?
                .execute(params![now, t])?,
            Selector::Ids(ids) => {
                let mut stmt = tx.prepare_cached(&format!("{sql} AND id = ?2"))?;
                let mut n = 0;
                for id in ids {
                    n += stmt.execute(params![now, id])?;
                }
                n
            }
        })
    })
}

/// Puts skipped jobs back to `pending` with their attempts reset; returns how many.
/// Jobs in any other state are left alone (replaying a done job would duplicate it).
pub fn replay(conn: &mut Connection, selector: &Selector, now: i64) -> Result<usize> {
    on_skipped(
        conn,
        "UPDATE pending_messages
         SET status = 'pending', attempts = 0, available_at = ?1, updated_at = ?1,
             claimed_by = NULL, claim_token = NULL, lease_until = NULL
         WHERE status = 'skipped'",
        selector,
        now,
    )
}

/// Deletes skipped jobs, with their error history, once a person has decided they will
/// never succeed; returns how many. Jobs in any other state are left alone. The event is
/// gone with its job: a repeat of it later is queued as new.
pub fn discard(conn: &mut Connection, selector: &Selector, now: i64) -> Result<usize> {
    on_skipped(
        conn,
        "DELETE FROM pending_messages WHERE updated_at <= ?1 AND status = 'skipped'",
        selector,
        now,
    )
}

/// Deletes `done` jobs last changed before `cutoff` (ms), with their error history.
/// Pending, claimed and skipped jobs are never purged. Returns how many were deleted.
pub fn purge(conn: &mut Connection, cutoff: i64) -> Result<usize> {
    db::write(conn, |tx| {
        Ok(tx
            .prepare_cached(
                "DELETE FROM pending_messages WHERE status = 'done' AND updated_at < ?1",
            )?
            .execute([cutoff])?)
    })
}
