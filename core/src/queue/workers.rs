//! The `workers` table: one row per worker process that ever ran. The only module that
//! writes it; the running worker registers, heartbeats and marks itself stopped, and
//! `cairn status` reads it.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::Result;
use crate::store::db;

/// A worker as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerRow {
    pub worker_id: String,
    pub pid: u32,
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// `None` while running, or when the process died without saying so.
    pub stopped_at: Option<i64>,
    /// The model provider and model the worker uses (`None` for workers of versions
    /// before 0010_worker_provider).
    pub provider: Option<String>,
    pub model: Option<String>,
}

/// Records a starting worker and the provider and model it uses.
pub fn register(
    conn: &mut Connection,
    worker_id: &str,
    pid: u32,
    (provider, model): (&str, &str),
    now: i64,
) -> Result<()> {
    db::write(conn, |tx| {
        tx.prepare_cached(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at, provider, model)
             VALUES (?1, ?2, ?3, ?3, ?4, ?5)
             ON CONFLICT (worker_id) DO UPDATE
             SET heartbeat_at = ?3, stopped_at = NULL, provider = ?4, model = ?5",
        )?
        .execute(params![worker_id, pid, now, provider, model])?;
        Ok(())
    })
}

/// Records the provider and model a running worker switched to (a settings reload).
pub fn uses(conn: &mut Connection, worker_id: &str, (provider, model): (&str, &str)) -> Result<()> {
    db::write(conn, |tx| {
        tx.prepare_cached("UPDATE workers SET provider = ?2, model = ?3 WHERE worker_id = ?1")?
            .execute(params![worker_id, provider, model])?;
        Ok(())
    })
}

/// Records that the worker is alive.
pub fn heartbeat(conn: &mut Connection, worker_id: &str, now: i64) -> Result<()> {
    db::write(conn, |tx| {
        tx.prepare_cached("UPDATE workers SET heartbeat_at = ?2 WHERE worker_id = ?1")?
            .execute(params![worker_id, now])?;
        Ok(())
    })
}

/// Records a clean stop.
pub fn stopped(conn: &mut Connection, worker_id: &str, now: i64) -> Result<()> {
    db::write(conn, |tx| {
        tx.prepare_cached(
            "UPDATE workers SET heartbeat_at = ?2, stopped_at = ?2 WHERE worker_id = ?1",
        )?
        .execute(params![worker_id, now])?;
        Ok(())
    })
}

/// The most recently started worker.
pub fn latest(conn: &Connection) -> Result<Option<WorkerRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT worker_id, pid, started_at, heartbeat_at, stopped_at, provider, model
             FROM workers ORDER BY started_at DESC LIMIT 1",
        )?
        .query_row([], row)
        .optional()?)
}

/// Workers, most recently started first.
pub fn list(conn: &Connection, limit: usize) -> Result<Vec<WorkerRow>> {
    let rows = conn
        .prepare_cached(
            "SELECT worker_id, pid, started_at, heartbeat_at, stopped_at, provider, model
             FROM workers ORDER BY started_at DESC LIMIT ?1",
        )?
        .query_map([limit as i64], row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

fn row(r: &rusqlite::Row) -> rusqlite::Result<WorkerRow> {
    Ok(WorkerRow {
        worker_id: r.get(0)?,
        pid: r.get(1)?,
        started_at: r.get(2)?,
        heartbeat_at: r.get(3)?,
        stopped_at: r.get(4)?,
        provider: r.get(5)?,
        model: r.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_heartbeat_stop() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut c = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        assert_eq!(latest(&c).expect("none"), None);
        register(&mut c, "h:1:10", 1, ("offline", "offline"), 10).expect("register");
        register(&mut c, "h:2:20", 2, ("anthropic", "claude-x"), 20).expect("register");
        heartbeat(&mut c, "h:2:20", 25).expect("beat");
        let w = latest(&c).expect("latest").expect("some");
        assert_eq!(
            (w.worker_id.as_str(), w.heartbeat_at, w.stopped_at),
            ("h:2:20", 25, None)
        );
        assert_eq!(
            (w.provider.as_deref(), w.model.as_deref()),
            (Some("anthropic"), Some("claude-x"))
        );
        uses(&mut c, "h:2:20", ("openai", "gpt-x")).expect("reload");
        let w = latest(&c).expect("latest").expect("some");
        assert_eq!(
            (w.provider.as_deref(), w.model.as_deref()),
            (Some("openai"), Some("gpt-x"))
        );
        stopped(&mut c, "h:2:20", 30).expect("stop");
        let all = list(&c, 10).expect("list");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].stopped_at, Some(30));
        assert_eq!(all[1].worker_id, "h:1:10");
    }

    /// 0010_worker_provider: the rows of workers that ran before it stay, with no provider.
    #[test]
    fn migration_0010_keeps_older_workers_without_a_provider() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("old.db");
        let old = Connection::open(&path).expect("open");
        db::at_version(&old, 9);
        old.execute(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at) VALUES ('old', 7, 1, 2)",
            [],
        )
        .expect("old worker");
        drop(old);
        let c = db::open(&path, db::OpenOptions::default()).expect("upgrade");
        assert_eq!(db::schema_version(&c).expect("version"), db::SCHEMA_VERSION);
        let w = latest(&c).expect("latest").expect("some");
        assert_eq!((w.worker_id.as_str(), w.pid), ("old", 7));
        assert_eq!((w.provider, w.model), (None, None));
    }
}
