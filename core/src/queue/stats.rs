//! The queue as `cairn queue` and `cairn status` see it: jobs listed and shown with their
//! error history, and counts by status and kind. Reads only.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::Result;
use crate::queue::claim::{JobKind, JobStatus};

/// A job as listed by `cairn queue`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    pub id: i64,
    pub session_id: String,
    pub project: String,
    pub kind: JobKind,
    pub prompt_number: i64,
    pub status: JobStatus,
    pub attempts: u32,
    pub max_attempts: u32,
    pub available_at: i64,
    pub claimed_by: Option<String>,
    pub lease_until: Option<i64>,
    pub last_error: Option<String>,
    pub dedupe_key: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub done_at: Option<i64>,
}

/// One failed attempt of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobError {
    pub attempt: u32,
    pub error: String,
    pub created_at: i64,
}

const ROW_COLUMNS: &str =
    "id, session_id, project, kind, prompt_number, status, attempts, max_attempts,
    available_at, claimed_by, lease_until, last_error, dedupe_key, created_at, updated_at, done_at";

fn job_row(r: &rusqlite::Row) -> rusqlite::Result<JobRow> {
    let status: String = r.get(5)?;
    Ok(JobRow {
        id: r.get(0)?,
        session_id: r.get(1)?,
        project: r.get(2)?,
        kind: JobKind::parse(&r.get::<_, String>(3)?)?,
        prompt_number: r.get(4)?,
        status: JobStatus::parse(&status).unwrap_or(JobStatus::Pending),
        attempts: r.get(6)?,
        max_attempts: r.get(7)?,
        available_at: r.get(8)?,
        claimed_by: r.get(9)?,
        lease_until: r.get(10)?,
        last_error: r.get(11)?,
        dedupe_key: r.get(12)?,
        created_at: r.get(13)?,
        updated_at: r.get(14)?,
        done_at: r.get(15)?,
    })
}

/// Filter for `list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<JobStatus>,
    pub session_id: Option<String>,
    pub limit: usize,
}

/// Jobs, newest first.
pub fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<JobRow>> {
    let sql = format!(
        "SELECT {ROW_COLUMNS} FROM pending_messages
         WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR session_id = ?2)
         ORDER BY id DESC LIMIT ?3"
    );
    let limit = if filter.limit == 0 {
        i64::MAX
    } else {
        filter.limit as i64
    };
    let rows = conn
        .prepare(&sql)?
        .query_map(
            params![
                filter.status.map(JobStatus::as_str),
                filter.session_id,
                limit
            ],
            job_row,
        )?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One job with its payload and every failed attempt.
pub fn get(conn: &Connection, id: i64) -> Result<Option<(JobRow, String, Vec<JobError>)>> {
    let found = conn
        .prepare(&format!(
            "SELECT {ROW_COLUMNS}, payload FROM pending_messages WHERE id = ?1"
        ))?
        .query_row([id], |r| Ok((job_row(r)?, r.get::<_, String>(16)?)))
        .optional()?;
    let Some((row, payload)) = found else {
        return Ok(None);
    };
    let errors = conn
        .prepare("SELECT attempt, error, created_at FROM job_errors WHERE job_id = ?1 ORDER BY id")?
        .query_map([id], |r| {
            Ok(JobError {
                attempt: r.get(0)?,
                error: r.get(1)?,
                created_at: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some((row, payload, errors)))
}

/// The queue at a glance.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// `status` → count.
    pub by_status: BTreeMap<String, i64>,
    /// `kind/status` → count.
    pub by_kind: BTreeMap<String, i64>,
    /// Age in ms of the oldest pending job.
    pub oldest_pending_age_ms: Option<i64>,
    /// The latest skipped jobs (up to 10), newest first.
    pub recent_skipped: Vec<JobRow>,
}

impl Stats {
    pub fn count(&self, status: JobStatus) -> i64 {
        self.by_status.get(status.as_str()).copied().unwrap_or(0)
    }
}

/// Counts by status and kind, oldest pending age, and the latest skipped jobs.
pub fn stats(conn: &Connection, now: i64) -> Result<Stats> {
    let mut out = Stats::default();
    for status in JobStatus::ALL {
        out.by_status.insert(status.as_str().to_string(), 0);
    }
    let mut stmt =
        conn.prepare("SELECT kind, status, count(*) FROM pending_messages GROUP BY kind, status")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (kind, status, n) = row?;
        *out.by_status.entry(status.clone()).or_default() += n;
        out.by_kind.insert(format!("{kind}/{status}"), n);
    }
    out.oldest_pending_age_ms = conn
        .query_row(
            "SELECT min(created_at) FROM pending_messages WHERE status = 'pending'",
            [],
            |r| r.get::<_, Option<i64>>(0),
        )?
        .map(|t| (now - t).max(0));
    out.recent_skipped = list(
        conn,
        &ListFilter {
            status: Some(JobStatus::Skipped),
            session_id: None,
            limit: 10,
        },
    )?;
    Ok(out)
}
