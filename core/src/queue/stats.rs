//! The queue as `cairn queue` and `cairn status` see it: jobs listed and shown with their
//! error history, and counts by status and kind. Reads only.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::Result;
use crate::queue::claim::{CLOCK_TOLERANCE_MS, JobKind, JobStatus, Policy};

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

/// Why a pending job is not taken yet, or that it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "wait", content = "until")]
pub enum Wait {
    /// Ready: the worker takes it at its next claim.
    Ready,
    /// A failed attempt's backoff (or a provider's `Retry-After`): tried again then.
    Retry(i64),
    /// Given back without an attempt counted (token budget spent, rate limit, shutdown):
    /// taken again then.
    Released(i64),
    /// An observation waiting for more of its turn's events (`batch.max_wait_secs`): taken
    /// at this time at the latest, sooner when its turn ends or the batch fills.
    BatchWindow(i64),
}

/// Why `job` (pending) waits at `now` under `policy`. Pure; a job in another state is
/// `Ready` (it is not waiting to be claimed).
pub fn wait(job: &JobRow, policy: &Policy, now: i64) -> Wait {
    if job.status != JobStatus::Pending {
        return Wait::Ready;
    }
    // Times in what is now the future: the clock went back since they were written, and
    // the job does not wait for the length of the jump (as `claim_batch` decides).
    let rescheduled = job.updated_at > now + CLOCK_TOLERANCE_MS;
    let window_end = match job.created_at > now + CLOCK_TOLERANCE_MS {
        true => i64::MIN,
        false => window_end(job, policy),
    };
    // It waits for the later of the two.
    if job.available_at > now && job.available_at >= window_end && !rescheduled {
        return match job.attempts {
            0 => Wait::Released(job.available_at),
            _ => Wait::Retry(job.available_at),
        };
    }
    if window_end > now {
        return Wait::BatchWindow(window_end);
    }
    Wait::Ready
}

/// When a pending observation's batch window ends (`i64::MIN` for jobs without one).
fn window_end(job: &JobRow, policy: &Policy) -> i64 {
    match job.kind == JobKind::Observation && policy.batching {
        true => job.created_at.saturating_add(policy.max_wait_ms),
        false => i64::MIN,
    }
}

/// When a pending job is (or was) due at the latest: its retry time, or the end of its
/// batch window, whichever is later.
pub fn due_at(job: &JobRow, policy: &Policy) -> i64 {
    job.available_at.max(window_end(job, policy))
}

/// The pending job due first (its retry time, or the end of its batch window), with why it
/// waits; `None` when nothing is pending. The batch window is its longest: a turn that
/// ended makes its observations ready sooner.
pub fn next_due(conn: &Connection, policy: &Policy, now: i64) -> Result<Option<(JobRow, Wait)>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM pending_messages WHERE status = 'pending'
             ORDER BY CASE WHEN kind = 'observation' AND ?1
                           THEN max(available_at, created_at + ?2) ELSE available_at END, id
             LIMIT 1"
        ))?
        .query_row(params![policy.batching, policy.max_wait_ms], job_row)
        .optional()?;
    Ok(row.map(|r| {
        let w = wait(&r, policy, now);
        (r, w)
    }))
}

/// When a worker last took, finished or retried a job: the latest change of a
/// job no longer as it was queued (a queued job's times are its events', which an import
/// dates in the past). `None` before any.
pub fn last_worked_at(conn: &Connection) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            // Each by its own partial index (pending rows are few).
            "SELECT max(t) FROM (
                 SELECT max(updated_at) AS t FROM pending_messages WHERE status = 'done'
                 UNION ALL
                 SELECT max(updated_at) FROM pending_messages WHERE status = 'skipped'
                 UNION ALL
                 SELECT max(updated_at) FROM pending_messages
                 WHERE status = 'pending' AND attempts > 0)",
        )?
        .query_row([], |r| r.get(0))?)
}

/// Jobs that ended `skipped` at or after `since` (what a worker run gave up on).
pub fn skipped_since(conn: &Connection, since: i64) -> Result<i64> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) FROM pending_messages WHERE status = 'skipped' AND updated_at >= ?1",
        )?
        .query_row([since], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::claim::{NewJob, claim_batch, enqueue, fail};
    use crate::store::db;

    /// Each reason a job waits, and the job due first: a retry before a batch window
    /// ending later, a ready summary before both.
    #[test]
    fn says_why_each_job_waits_and_which_is_due_first() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        let policy = Policy {
            batching: true,
            max_size: 10,
            max_wait_ms: 100_000,
            lease_ms: 1_000,
            max_attempts: 3,
            retry_base_ms: 1_000,
            retry_max_ms: 1_000,
        };
        let add = |conn: &mut Connection, kind, key: &str, now| {
            db::write(conn, |tx| {
                crate::memory::sessions::ensure(tx, key, "p", "", now)?;
                let job = NewJob {
                    session_id: key,
                    project: "p",
                    kind,
                    prompt_number: 1,
                    payload: "{}",
                    dedupe_key: key,
                };
                enqueue(tx, &job, 3, now)
            })
            .expect("enqueue");
        };
        assert_eq!(next_due(&conn, &policy, 0).expect("none"), None);
        add(&mut conn, JobKind::Observation, "window", 10_000);
        let (row, w) = next_due(&conn, &policy, 20_000)
            .expect("due")
            .expect("some");
        assert_eq!(
            (row.dedupe_key.as_str(), w),
            ("window", Wait::BatchWindow(110_000))
        );
        assert_eq!(due_at(&row, &policy), 110_000);
        // A failed observation of another session, retried after that window ends.
        add(&mut conn, JobKind::Observation, "failed", 0);
        let unbatched = Policy {
            batching: false,
            ..policy
        };
        let batch = claim_batch(&mut conn, "w", &unbatched, 9_000)
            .expect("claim")
            .expect("batch");
        assert_eq!(batch.jobs[0].session_id, "failed");
        fail(&mut conn, &batch, "boom", &policy, 9_000, Some(150_000)).expect("fail");
        let (row, w) = next_due(&conn, &policy, 20_000)
            .expect("due")
            .expect("some");
        assert_eq!(
            (row.dedupe_key.as_str(), w),
            ("window", Wait::BatchWindow(110_000))
        );
        let (failed, _, _) = get(&conn, batch.jobs[0].id).expect("get").expect("row");
        assert_eq!(wait(&failed, &policy, 20_000), Wait::Retry(150_000));
        assert_eq!(wait(&failed, &policy, 150_000), Wait::Ready);
        add(&mut conn, JobKind::Summarize, "summary", 20_000);
        let (row, w) = next_due(&conn, &policy, 20_000)
            .expect("due")
            .expect("some");
        assert_eq!((row.dedupe_key.as_str(), w), ("summary", Wait::Ready));
        let mut released = row.clone();
        released.available_at = 90_000;
        assert_eq!(wait(&released, &policy, 20_000), Wait::Released(90_000));
        assert_eq!(skipped_since(&conn, 0).expect("skipped"), 0);
    }
}
