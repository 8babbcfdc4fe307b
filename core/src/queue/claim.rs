//! The durable job queue, `pending_messages`, and its error history, `job_errors`: a job's
//! life from enqueue to ack. With `admin` (replay, discard, purge), the only code that
//! writes them; `stats` reads them.
//!
//! A job moves `pending → claimed → done`, or back to `pending` on a failed attempt, or to
//! `skipped` once it has failed `max_attempts` times; `replay` brings skipped jobs back.
//!
//! Invariants:
//! - a claim is one `BEGIN IMMEDIATE` transaction ending in one guarded
//!   `UPDATE … RETURNING`; a batch holds jobs of one session, one kind and one prompt;
//! - a session never has two batches in flight, so a turn's summary follows its
//!   observations;
//! - every later change to a claimed job is fenced by its batch's `claim_token`: a worker
//!   whose lease was rescued changes nothing, and is told so.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;

use crate::error::Result;
use crate::settings::Settings;
use crate::store::db;
use crate::text::{self, Unit};

/// Longest error text kept per failed attempt.
const MAX_ERROR_CHARS: usize = 2_000;

/// How far in the future a job's times may lie before the queue concludes the clock was
/// stepped back since they were written. Time only moves forward for the queue: a job last
/// scheduled (`updated_at`) further ahead than this is due now, and one created
/// (`created_at`) further ahead has waited out its batch window, instead of both waiting for
/// the length of the jump. Processes on one machine read one clock; this covers the
/// milliseconds between a hook's reading and the worker's.
pub const CLOCK_TOLERANCE_MS: i64 = 2_000;

/// What a job asks the worker to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Compress a tool event into observations.
    Observation,
    /// Summarize a finished turn.
    Summarize,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Observation => "observation",
            JobKind::Summarize => "summarize",
        }
    }

    pub(super) fn parse(s: &str) -> rusqlite::Result<Self> {
        match s {
            "observation" => Ok(JobKind::Observation),
            "summarize" => Ok(JobKind::Summarize),
            other => Err(rusqlite::Error::InvalidColumnType(
                0,
                format!("kind {other}"),
                rusqlite::types::Type::Text,
            )),
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Pending,
    Claimed,
    Done,
    Skipped,
}

impl JobStatus {
    pub const ALL: [JobStatus; 4] = [
        JobStatus::Pending,
        JobStatus::Claimed,
        JobStatus::Done,
        JobStatus::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Claimed => "claimed",
            JobStatus::Done => "done",
            JobStatus::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    pub session_id: &'a str,
    pub project: &'a str,
    pub kind: JobKind,
    pub prompt_number: i64,
    /// A JSON document; the worker reads it.
    pub payload: &'a str,
    /// Unique across the queue: a second job with the same key is not added.
    pub dedupe_key: &'a str,
}

/// What `enqueue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job with this id.
    Added(i64),
    /// A job with the same dedupe key was still pending; its payload was replaced by the
    /// newer one (a repeated `Stop` carries the final assistant message).
    Refreshed(i64),
    /// A job with the same dedupe key exists and is in flight or processed; nothing changed.
    Duplicate(i64),
}

/// The queue's timing and batching rules, from settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub batching: bool,
    pub max_size: u32,
    pub max_wait_ms: i64,
    pub lease_ms: i64,
    pub max_attempts: u32,
    pub retry_base_ms: i64,
    pub retry_max_ms: i64,
}

impl Policy {
    pub fn from_settings(s: &Settings) -> Self {
        let ms = |secs: u64| i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        Self {
            batching: s.batch.enabled,
            max_size: s.batch.max_size.max(1),
            max_wait_ms: ms(s.batch.max_wait_secs),
            lease_ms: ms(s.queue.lease_secs),
            max_attempts: s.queue.max_attempts.max(1),
            retry_base_ms: ms(s.queue.retry_base_secs),
            retry_max_ms: ms(s.queue.retry_max_secs),
        }
    }

    /// Delay before the next try after `attempts` failed attempts: the base doubled per
    /// attempt, capped, then scaled by a random factor in [0.5, 1.0) so that batches failed
    /// at the same moment do not all retry at the same moment ([`fail`] draws it once per
    /// batch: a batch's jobs retry together).
    pub fn retry_delay_ms(&self, attempts: u32) -> i64 {
        let exp = attempts.saturating_sub(1).min(30);
        let full = self
            .retry_base_ms
            .saturating_mul(1i64 << exp)
            .min(self.retry_max_ms)
            .max(0);
        let half = full / 2;
        half + crate::rand::below(u64::try_from(full - half).unwrap_or(0).max(1)) as i64
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::from_settings(&Settings::default())
    }
}

/// A claimed job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub id: i64,
    pub session_id: String,
    pub project: String,
    pub kind: JobKind,
    pub prompt_number: i64,
    pub payload: String,
    /// Failed attempts before this one.
    pub attempts: u32,
    pub created_at: i64,
}

/// Jobs claimed together by one worker under one lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub worker: String,
    /// Fences every later change to these jobs.
    pub token: i64,
    pub lease_until: i64,
    /// In id order; never empty.
    pub jobs: Vec<Job>,
}

impl Batch {
    pub fn session_id(&self) -> &str {
        &self.jobs[0].session_id
    }
    pub fn project(&self) -> &str {
        &self.jobs[0].project
    }
    pub fn kind(&self) -> JobKind {
        self.jobs[0].kind
    }
    pub fn prompt_number(&self) -> i64 {
        self.jobs[0].prompt_number
    }
    pub fn ids(&self) -> Vec<i64> {
        self.jobs.iter().map(|j| j.id).collect()
    }
    /// When the newest of the jobs `ids` happened: its event's time (`created_at` is the
    /// hook's or the transcript's time), never when it was claimed. `None` when no job of
    /// the batch is named.
    pub fn happened_at(&self, ids: &[i64]) -> Option<i64> {
        self.jobs
            .iter()
            .filter(|j| ids.contains(&j.id))
            .map(|j| j.created_at)
            .max()
    }
    /// The jobs of this batch whose ids are in `ids`, under the same claim (to settle part
    /// of a batch: the chunks that succeeded, or the ones that did not).
    pub fn part(&self, ids: &[i64]) -> Batch {
        Batch {
            jobs: self
                .jobs
                .iter()
                .filter(|j| ids.contains(&j.id))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }
}

/// Adds a job in the caller's transaction (which also wrote the session row it refers to).
pub fn enqueue(tx: &Transaction, job: &NewJob, max_attempts: u32, now: i64) -> Result<Enqueued> {
    let added = tx
        .prepare_cached(
            "INSERT INTO pending_messages
                 (session_id, project, kind, prompt_number, payload, dedupe_key,
                  max_attempts, available_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8)
             ON CONFLICT (dedupe_key) DO NOTHING",
        )?
        .execute(params![
            job.session_id,
            job.project,
            job.kind.as_str(),
            job.prompt_number,
            job.payload,
            job.dedupe_key,
            max_attempts.max(1),
            now
        ])?;
    if added == 1 {
        return Ok(Enqueued::Added(tx.last_insert_rowid()));
    }
    let (id, status): (i64, String) = tx
        .prepare_cached("SELECT id, status FROM pending_messages WHERE dedupe_key = ?1")?
        .query_row([job.dedupe_key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if job.kind == JobKind::Summarize && status == "pending" {
        tx.prepare_cached(
            "UPDATE pending_messages SET payload = ?2, updated_at = max(updated_at, ?3)
             WHERE id = ?1 AND status = 'pending'",
        )?
        .execute(params![id, job.payload, now])?;
        return Ok(Enqueued::Refreshed(id));
    }
    Ok(Enqueued::Duplicate(id))
}

/// Picks the oldest ready job of a session with nothing in flight: the batch starts there.
/// A job is due at its `available_at`, or at once when it was scheduled in what is now the
/// future (the clock went back, [`CLOCK_TOLERANCE_MS`]); a batch window counts from
/// `created_at`, and is over when that lies in the future.
///
/// The batch size is written into the text (`{max_size}`, an integer from the settings),
/// not bound: SQLite re-prepares a statement at every new binding of a parameter used as
/// the `LIMIT` of a subquery, which made every claim pay a full parse (42 us, not 1).
const READY_SQL: &str = "
SELECT p.session_id, p.kind, p.prompt_number
FROM pending_messages p
WHERE p.status = 'pending' AND (p.available_at <= ?1 OR p.updated_at > ?1 + ?4)
  AND NOT EXISTS (SELECT 1 FROM pending_messages c
                  WHERE c.session_id = p.session_id AND c.status = 'claimed')
  AND CASE p.kind
      WHEN 'summarize' THEN NOT EXISTS (
          SELECT 1 FROM pending_messages o
          WHERE o.session_id = p.session_id AND o.status = 'pending'
            AND o.kind = 'observation' AND o.prompt_number <= p.prompt_number)
      ELSE ?2
        OR p.created_at <= ?1 - ?3
        OR p.created_at > ?1 + ?4
        OR EXISTS (SELECT 1 FROM pending_messages s
                   WHERE s.session_id = p.session_id AND s.status = 'pending'
                     AND s.kind = 'summarize')
        OR EXISTS (SELECT 1 FROM sessions x
                   WHERE x.session_id = p.session_id
                     AND (x.prompt_counter > p.prompt_number OR x.status = 'ended'))
        OR (SELECT count(*) FROM (SELECT 1 FROM pending_messages o
                                  WHERE o.session_id = p.session_id AND o.status = 'pending'
                                    AND o.kind = 'observation'
                                  LIMIT {max_size})) >= {max_size}
      END
ORDER BY p.id
LIMIT 1";

/// [`READY_SQL`] or [`CLAIM_SQL`] with its `LIMIT` written in.
fn with_limit(sql: &str, max_size: u32) -> String {
    sql.replace("{max_size}", &max_size.to_string())
}

/// Claims the jobs of one session, kind and prompt, up to the batch size, under a lease.
const CLAIM_SQL: &str = "
UPDATE pending_messages
SET status = 'claimed', claimed_by = ?1, claim_token = ?2, lease_until = ?3, updated_at = ?4
WHERE id IN (SELECT id FROM pending_messages
             WHERE session_id = ?5 AND kind = ?6 AND prompt_number = ?7
               AND status = 'pending' AND (available_at <= ?4 OR updated_at > ?4 + ?8)
             ORDER BY id LIMIT {max_size})
  AND status = 'pending'
RETURNING id, session_id, project, kind, prompt_number, payload, attempts, created_at";

/// Claims the next ready batch for `worker`, or `None` when nothing is ready.
pub fn claim_batch(
    conn: &mut Connection,
    worker: &str,
    policy: &Policy,
    now: i64,
) -> Result<Option<Batch>> {
    db::write(conn, |tx| {
        let start = tx
            .prepare_cached(&with_limit(READY_SQL, policy.max_size))?
            .query_row(
                params![
                    now,
                    !policy.batching,
                    policy.max_wait_ms,
                    CLOCK_TOLERANCE_MS
                ],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                },
            )
            .optional()?;
        let Some((session_id, kind, prompt_number)) = start else {
            return Ok(None);
        };
        let limit = if kind == "summarize" || !policy.batching {
            1
        } else {
            policy.max_size
        };
        let token = (crate::rand::u64() >> 1) as i64;
        let lease_until = now.saturating_add(policy.lease_ms);
        let mut jobs = tx
            .prepare_cached(&with_limit(CLAIM_SQL, limit))?
            .query_map(
                params![
                    worker,
                    token,
                    lease_until,
                    now,
                    session_id,
                    kind,
                    prompt_number,
                    CLOCK_TOLERANCE_MS
                ],
                |r| {
                    Ok(Job {
                        id: r.get(0)?,
                        session_id: r.get(1)?,
                        project: r.get(2)?,
                        kind: JobKind::parse(&r.get::<_, String>(3)?)?,
                        prompt_number: r.get(4)?,
                        payload: r.get(5)?,
                        attempts: r.get(6)?,
                        created_at: r.get(7)?,
                    })
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if jobs.is_empty() {
            return Ok(None);
        }
        jobs.sort_by_key(|j| j.id);
        Ok(Some(Batch {
            worker: worker.to_string(),
            token,
            lease_until,
            jobs,
        }))
    })
}

/// What `ack`, `heartbeat` and `release` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The batch was still ours; the change is made.
    Done,
    /// The lease expired and the jobs were rescued (and maybe claimed again): nothing was
    /// changed, the results were not written.
    LeaseLost,
}

/// Marks the batch `done` and runs `write_results` in the same transaction. Fenced: when
/// the batch is no longer ours, nothing is written and `LeaseLost` is returned. When
/// `write_results` fails, nothing is written and its error is returned.
///
/// `batch` may be part of a claimed batch ([`Batch::part`]): only its jobs are marked done,
/// and `write_results` may settle the rest ([`fail_in`], [`release_in`]) in the same
/// transaction.
pub fn ack<F>(conn: &mut Connection, batch: &Batch, now: i64, write_results: F) -> Result<Fenced>
where
    F: FnOnce(&Transaction) -> Result<()>,
{
    db::write(conn, |tx| {
        if !still_ours(tx, batch)? {
            log::warn!(
                "ack of jobs {:?} by {} refused: lease lost",
                batch.ids(),
                batch.worker
            );
            return Ok(Fenced::LeaseLost);
        }
        tx.prepare_cached(
            "UPDATE pending_messages
             SET status = 'done', done_at = ?3, updated_at = ?3, lease_until = NULL
             WHERE claim_token = ?1 AND claimed_by = ?2 AND status = 'claimed'
               AND id IN (SELECT value FROM json_each(?4))",
        )?
        .execute(params![batch.token, batch.worker, now, ids_json(batch)])?;
        write_results(tx)?;
        Ok(Fenced::Done)
    })
}

/// The batch's job ids as a JSON array, for `json_each`.
fn ids_json(batch: &Batch) -> String {
    serde_json::to_string(&batch.ids()).unwrap_or_else(|_| "[]".into())
}

/// True when every job of the batch is still claimed under its token.
fn still_ours(tx: &Transaction, batch: &Batch) -> Result<bool> {
    let n: i64 = tx
        .prepare_cached(
            "SELECT count(*) FROM pending_messages
             WHERE claim_token = ?1 AND claimed_by = ?2 AND status = 'claimed'
               AND id IN (SELECT value FROM json_each(?3))",
        )?
        .query_row(params![batch.token, batch.worker, ids_json(batch)], |r| {
            r.get(0)
        })?;
    Ok(n == batch.jobs.len() as i64)
}

/// What `fail` did with the batch's jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailOutcome {
    /// Back to `pending`, to be tried again later.
    pub retrying: usize,
    /// Out of attempts: `skipped`, with the error kept.
    pub skipped: usize,
    /// The batch was no longer ours; nothing changed.
    pub lease_lost: bool,
}

/// Records a failed attempt of every job in the batch: below the policy's `max_attempts`
/// (the setting in force now, not the one the job was queued under) the job goes back to
/// `pending`, at the limit it is `skipped` with the error kept. Fenced like `ack`.
///
/// The jobs of a batch failed together and come back together: one retry time for all of
/// them (the backoff of the most-tried job, with one jitter draw), never before
/// `not_before` (a provider's `Retry-After`), however far that is.
pub fn fail(
    conn: &mut Connection,
    batch: &Batch,
    error: &str,
    policy: &Policy,
    now: i64,
    not_before: Option<i64>,
) -> Result<FailOutcome> {
    db::write(conn, |tx| {
        fail_in(tx, batch, error, policy, now, not_before)
    })
}

/// [`fail`] in the caller's transaction.
pub fn fail_in(
    tx: &Transaction,
    batch: &Batch,
    error: &str,
    policy: &Policy,
    now: i64,
    not_before: Option<i64>,
) -> Result<FailOutcome> {
    let error = clip(error);
    let tries = batch.jobs.iter().map(|j| j.attempts).max().unwrap_or(0) + 1;
    let next = now
        .saturating_add(policy.retry_delay_ms(tries))
        .max(not_before.unwrap_or(0));
    let mut out = FailOutcome::default();
    for job in &batch.jobs {
        let status: Option<String> = tx
            .prepare_cached(
                "UPDATE pending_messages
                 SET attempts = attempts + 1, last_error = ?4, updated_at = ?5,
                     claim_token = NULL, lease_until = NULL,
                     status = CASE WHEN attempts + 1 >= ?7 THEN 'skipped' ELSE 'pending' END,
                     available_at = CASE WHEN attempts + 1 >= ?7 THEN available_at ELSE ?6 END
                 WHERE id = ?1 AND claim_token = ?2 AND claimed_by = ?3 AND status = 'claimed'
                 RETURNING status",
            )?
            .query_row(
                params![
                    job.id,
                    batch.token,
                    batch.worker,
                    error,
                    now,
                    next,
                    policy.max_attempts.max(1)
                ],
                |r| r.get(0),
            )
            .optional()?;
        match status.as_deref() {
            Some("skipped") => out.skipped += 1,
            Some(_) => out.retrying += 1,
            None => {
                out.lease_lost = true;
                continue;
            }
        }
        record_error(tx, job.id, error, now)?;
    }
    Ok(out)
}

/// Gives the batch back without counting an attempt (shutdown, token budget spent, a rate
/// limit with `Retry-After`), to be claimed again at `available_at`. Fenced like `ack`.
pub fn release(
    conn: &mut Connection,
    batch: &Batch,
    available_at: i64,
    now: i64,
) -> Result<Fenced> {
    db::write(conn, |tx| release_in(tx, batch, available_at, now))
}

/// [`release`] in the caller's transaction.
pub fn release_in(tx: &Transaction, batch: &Batch, available_at: i64, now: i64) -> Result<Fenced> {
    if !still_ours(tx, batch)? {
        return Ok(Fenced::LeaseLost);
    }
    tx.prepare_cached(
        "UPDATE pending_messages
         SET status = 'pending', claim_token = NULL, lease_until = NULL,
             available_at = ?3, updated_at = ?4
         WHERE claim_token = ?1 AND claimed_by = ?2 AND status = 'claimed'
           AND id IN (SELECT value FROM json_each(?5))",
    )?
    .execute(params![
        batch.token,
        batch.worker,
        available_at,
        now,
        ids_json(batch)
    ])?;
    Ok(Fenced::Done)
}

/// A turn's summary covers the turn's observations: when observations of a turn are stored
/// after its summary job finished (they failed, were skipped and replayed), the summary
/// job is queued again, in the caller's transaction (the ack that stored them), and the
/// summary is rewritten in place (one per turn). Observations already stored are not
/// stored again (content hashes), so a replay that adds nothing redoes nothing. Returns
/// true when a summary job was queued again.
pub fn redo_summary(
    tx: &Transaction,
    session_id: &str,
    prompt_number: i64,
    now: i64,
) -> Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE pending_messages
             SET status = 'pending', attempts = 0, available_at = ?3, updated_at = ?3,
                 done_at = NULL, claimed_by = NULL, claim_token = NULL, lease_until = NULL
             WHERE session_id = ?1 AND prompt_number = ?2 AND kind = 'summarize'
               AND status = 'done'",
        )?
        .execute(params![session_id, prompt_number, now])?;
    Ok(n > 0)
}

/// Extends the lease of a batch still in flight. Fenced like `ack`.
pub fn heartbeat(
    conn: &mut Connection,
    batch: &mut Batch,
    policy: &Policy,
    now: i64,
) -> Result<Fenced> {
    let lease_until = now.saturating_add(policy.lease_ms);
    let fenced = db::write(conn, |tx| {
        if !still_ours(tx, batch)? {
            return Ok(Fenced::LeaseLost);
        }
        tx.prepare_cached(
            "UPDATE pending_messages SET lease_until = ?3, updated_at = ?4
             WHERE claim_token = ?1 AND claimed_by = ?2 AND status = 'claimed'",
        )?
        .execute(params![batch.token, batch.worker, lease_until, now])?;
        Ok(Fenced::Done)
    })?;
    if fenced == Fenced::Done {
        batch.lease_until = lease_until;
    }
    Ok(fenced)
}

/// Which claimed jobs `rescue` takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescueScope<'a> {
    /// Jobs whose lease has expired.
    Expired,
    /// Every claimed job not held by this worker. Only for the holder of the worker lock,
    /// which knows no other worker is alive.
    AllBut(&'a str),
}

/// What `rescue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rescued {
    pub retrying: usize,
    pub skipped: usize,
}

/// Takes claimed jobs back from workers that died or stalled. Each counts as a failed
/// attempt, so a job that kills its worker every time ends `skipped` (after
/// `max_attempts`, the setting in force now) instead of looping.
pub fn rescue(
    conn: &mut Connection,
    scope: RescueScope,
    max_attempts: u32,
    now: i64,
) -> Result<Rescued> {
    db::write(conn, |tx| {
        let (cond, other) = match scope {
            RescueScope::Expired => ("lease_until < ?1", None),
            RescueScope::AllBut(me) => ("claimed_by IS NOT ?3", Some(me)),
        };
        let sql = format!(
            "UPDATE pending_messages
             SET attempts = attempts + 1, updated_at = ?1, available_at = ?1,
                 last_error = 'lease of worker ' || coalesce(claimed_by, '?') || ' lost: the worker died or stalled',
                 claim_token = NULL, lease_until = NULL,
                 status = CASE WHEN attempts + 1 >= ?2 THEN 'skipped' ELSE 'pending' END
             WHERE status = 'claimed' AND {cond}
             RETURNING id, status, last_error"
        );
        let mut stmt = tx.prepare(&sql)?;
        let map = |r: &rusqlite::Row| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        };
        let rows: Vec<(i64, String, String)> = match other {
            None => stmt
                .query_map(params![now, max_attempts.max(1)], map)?
                .collect::<rusqlite::Result<_>>()?,
            Some(me) => stmt
                .query_map(params![now, max_attempts.max(1), me], map)?
                .collect::<rusqlite::Result<_>>()?,
        };
        drop(stmt);
        let mut out = Rescued::default();
        for (id, status, error) in rows {
            if status == "skipped" {
                out.skipped += 1;
            } else {
                out.retrying += 1;
            }
            record_error(tx, id, &error, now)?;
        }
        if out.retrying + out.skipped > 0 {
            log::warn!(
                "rescued {} jobs from lost leases ({} skipped)",
                out.retrying + out.skipped,
                out.skipped
            );
        }
        Ok(out)
    })
}

fn record_error(tx: &Transaction, job_id: i64, error: &str, now: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO job_errors (job_id, attempt, error, created_at)
         SELECT id, attempts, ?2, ?3 FROM pending_messages WHERE id = ?1",
    )?
    .execute(params![job_id, error, now])?;
    Ok(())
}

fn clip(s: &str) -> &str {
    text::head(s, MAX_ERROR_CHARS, Unit::Chars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::admin::{Selector, discard, purge, replay};
    use crate::queue::stats::{ListFilter, get, list, stats};
    use crate::store::paths::DataDir;

    const W: &str = "worker-a";

    struct Q {
        _tmp: tempfile::TempDir,
        conn: Connection,
        policy: Policy,
    }

    fn q() -> Q {
        let tmp = tempfile::tempdir().expect("tempdir");
        let conn =
            db::open_data_dir(&DataDir::new(tmp.path()), db::OpenOptions::default()).expect("open");
        let policy = Policy {
            batching: true,
            max_size: 3,
            max_wait_ms: 60_000,
            lease_ms: 1_000,
            max_attempts: 3,
            retry_base_ms: 100,
            retry_max_ms: 1_000,
        };
        Q {
            _tmp: tmp,
            conn,
            policy,
        }
    }

    impl Q {
        fn session(&mut self, s: &str, prompt_counter: i64) {
            db::write(&mut self.conn, |tx| {
                crate::memory::sessions::ensure(tx, s, "proj", "/p", 0)?;
                tx.execute(
                    "UPDATE sessions SET prompt_counter = ?2 WHERE session_id = ?1",
                    params![s, prompt_counter],
                )?;
                Ok(())
            })
            .expect("session");
        }
        fn add(&mut self, s: &str, kind: JobKind, prompt: i64, key: &str, now: i64) -> Enqueued {
            let job = NewJob {
                session_id: s,
                project: "proj",
                kind,
                prompt_number: prompt,
                payload: &format!("{{\"key\":\"{key}\"}}"),
                dedupe_key: key,
            };
            let max = self.policy.max_attempts;
            db::write(&mut self.conn, |tx| enqueue(tx, &job, max, now)).expect("enqueue")
        }
        fn obs(&mut self, s: &str, prompt: i64, key: &str, now: i64) -> i64 {
            match self.add(s, JobKind::Observation, prompt, key, now) {
                Enqueued::Added(id) => id,
                other => panic!("expected a new job, got {other:?}"),
            }
        }
        fn claim(&mut self, worker: &str, now: i64) -> Option<Batch> {
            let p = self.policy;
            claim_batch(&mut self.conn, worker, &p, now).expect("claim")
        }
        fn status(&self, id: i64) -> (String, u32, i64) {
            self.conn
                .query_row(
                    "SELECT status, attempts, available_at FROM pending_messages WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .expect("row")
        }
    }

    #[test]
    fn enqueue_dedupes_and_refreshes_pending_summaries() {
        let mut q = q();
        q.session("s", 1);
        let id = q.obs("s", 1, "tool:1", 10);
        assert_eq!(
            q.add("s", JobKind::Observation, 1, "tool:1", 11),
            Enqueued::Duplicate(id)
        );
        let sid = match q.add("s", JobKind::Summarize, 1, "turn:s:1", 12) {
            Enqueued::Added(id) => id,
            other => panic!("{other:?}"),
        };
        let job = NewJob {
            session_id: "s",
            project: "proj",
            kind: JobKind::Summarize,
            prompt_number: 1,
            payload: "{\"last\":\"final\"}",
            dedupe_key: "turn:s:1",
        };
        let r = db::write(&mut q.conn, |tx| enqueue(tx, &job, 3, 13)).expect("refresh");
        assert_eq!(r, Enqueued::Refreshed(sid));
        let payload: String = q
            .conn
            .query_row(
                "SELECT payload FROM pending_messages WHERE id = ?1",
                [sid],
                |r| r.get(0),
            )
            .expect("payload");
        assert_eq!(payload, "{\"last\":\"final\"}");
        let n: i64 = q
            .conn
            .query_row("SELECT count(*) FROM pending_messages", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 2);
    }

    #[test]
    fn enqueue_refuses_unknown_sessions_and_bad_json() {
        let mut q = q();
        let job = NewJob {
            session_id: "nobody",
            project: "proj",
            kind: JobKind::Observation,
            prompt_number: 0,
            payload: "{}",
            dedupe_key: "k",
        };
        assert!(db::write(&mut q.conn, |tx| enqueue(tx, &job, 3, 1)).is_err());
        q.session("s", 0);
        let bad = NewJob {
            session_id: "s",
            payload: "not json",
            ..job
        };
        assert!(db::write(&mut q.conn, |tx| enqueue(tx, &bad, 3, 1)).is_err());
    }

    #[test]
    fn observations_wait_until_a_batch_is_ready() {
        let mut q = q();
        q.session("s", 1);
        q.obs("s", 1, "a", 1_000);
        assert_eq!(
            q.claim(W, 1_000),
            None,
            "fresh job of the current prompt waits"
        );
        // The oldest waited max_wait.
        let b = q.claim(W, 1_000 + 60_000).expect("aged batch");
        assert_eq!(b.jobs.len(), 1);
    }

    #[test]
    fn each_readiness_rule_releases_a_batch() {
        // batching disabled
        let mut q1 = q();
        q1.policy.batching = false;
        q1.session("s", 1);
        q1.obs("s", 1, "a", 0);
        q1.obs("s", 1, "b", 0);
        let b = q1.claim(W, 0).expect("disabled → ready");
        assert_eq!(b.jobs.len(), 1, "no batching means one job per batch");

        // a summarize job exists (turn ended)
        let mut q2 = q();
        q2.session("s", 1);
        q2.obs("s", 1, "a", 0);
        assert_eq!(q2.claim(W, 0), None);
        q2.add("s", JobKind::Summarize, 1, "turn", 0);
        let b = q2.claim(W, 0).expect("turn end → ready");
        assert_eq!(b.kind(), JobKind::Observation);

        // max_size jobs waiting
        let mut q3 = q();
        q3.session("s", 1);
        q3.obs("s", 1, "a", 0);
        q3.obs("s", 1, "b", 0);
        assert_eq!(q3.claim(W, 0), None);
        q3.obs("s", 1, "c", 0);
        q3.obs("s", 1, "d", 0);
        let b = q3.claim(W, 0).expect("overflow → ready");
        assert_eq!(b.jobs.len(), 3, "at most max_size");

        // a later prompt started
        let mut q4 = q();
        q4.session("s", 1);
        q4.obs("s", 1, "a", 0);
        assert_eq!(q4.claim(W, 0), None);
        q4.session("s", 2);
        assert!(q4.claim(W, 0).is_some(), "next prompt → ready");

        // the session ended
        let mut q5 = q();
        q5.session("s", 1);
        q5.obs("s", 1, "a", 0);
        q5.conn
            .execute(
                "UPDATE sessions SET status = 'ended' WHERE session_id = 's'",
                [],
            )
            .expect("end");
        assert!(q5.claim(W, 0).is_some(), "ended → ready");
    }

    #[test]
    fn a_batch_is_one_session_one_prompt_in_id_order() {
        let mut q = q();
        q.policy.max_size = 10;
        q.session("s", 3);
        q.session("t", 2);
        let a = q.obs("s", 1, "a", 0);
        q.obs("t", 1, "x", 0);
        let b = q.obs("s", 1, "b", 0);
        q.obs("s", 2, "c", 0);
        let batch = q.claim(W, 0).expect("batch");
        assert_eq!(batch.session_id(), "s");
        assert_eq!(batch.prompt_number(), 1);
        assert_eq!(batch.ids(), vec![a, b]);
        assert_eq!(batch.project(), "proj");
        // Session s has a batch in flight: the next claim goes to t, never to s.
        let other = q.claim("worker-b", 0);
        let other = other.expect("t is free");
        assert_eq!(other.session_id(), "t");
        assert_eq!(q.claim("worker-b", 0), None, "s is busy, t is busy");
    }

    #[test]
    fn summaries_follow_their_observations() {
        let mut q = q();
        q.session("s", 1);
        let o = q.obs("s", 1, "a", 0);
        let sum = match q.add("s", JobKind::Summarize, 1, "turn", 0) {
            Enqueued::Added(id) => id,
            other => panic!("{other:?}"),
        };
        let b = q.claim(W, 0).expect("observation first");
        assert_eq!(b.ids(), vec![o]);
        assert_eq!(
            q.claim(W, 0),
            None,
            "summary waits while its observations are claimed"
        );
        assert_eq!(
            ack(&mut q.conn, &b, 1, |_| Ok(())).expect("ack"),
            Fenced::Done
        );
        let s = q.claim(W, 2).expect("summary now");
        assert_eq!(s.ids(), vec![sum]);
        assert_eq!(s.kind(), JobKind::Summarize);
    }

    #[test]
    fn a_clock_stepped_back_does_not_hold_the_queue() {
        use crate::queue::stats::{Wait, get, wait};
        let mut q = q();
        q.session("s", 1);
        let t = 100_000_000;
        let back = t - 3_600_000;
        let wait_at = |q: &Q, id: i64, now: i64| {
            let (row, _, _) = get(&q.conn, id).expect("get").expect("row");
            wait(&row, &q.policy, now)
        };
        // Queued at T, mid-turn: it waits for its batch window; then the turn ends.
        let a = q.obs("s", 1, "a", t);
        assert_eq!(q.claim(W, t), None, "inside its batch window");
        assert_eq!(wait_at(&q, a, t), Wait::BatchWindow(t + 60_000));
        let sum = match q.add("s", JobKind::Summarize, 1, "turn:1", t) {
            Enqueued::Added(id) => id,
            other => panic!("{other:?}"),
        };
        // The clock goes back an hour; the turn's Stop fires again and refreshes the summary.
        assert_eq!(
            q.add("s", JobKind::Summarize, 1, "turn:1", back),
            Enqueued::Refreshed(sum)
        );
        assert_eq!(wait_at(&q, a, back), Wait::Ready);
        let b = q
            .claim(W, back)
            .expect("queued before the jump, claimable after");
        assert_eq!(b.ids(), vec![a]);
        ack(&mut q.conn, &b, back, |_| Ok(())).expect("ack");
        assert_eq!(wait_at(&q, sum, back + 1), Wait::Ready);
        let s = q.claim(W, back + 1).expect("the summary is ready");
        assert_eq!(s.ids(), vec![sum]);
        // A failure after the jump keeps its backoff: time moves forward from there.
        let p = q.policy;
        let failed = fail(&mut q.conn, &s, "boom", &p, back + 2, None);
        assert!(failed.is_ok(), "{failed:?}");
        assert_eq!(q.claim(W, back + 2), None, "backing off");
        assert!(matches!(wait_at(&q, sum, back + 2), Wait::Retry(_)));
        let (_, _, due) = q.status(sum);
        assert_eq!(q.claim(W, due).expect("retried").ids(), vec![sum]);
        // Mid-turn, queued before the jump: its batch window is over after it.
        q.session("u", 1);
        let c = q.obs("u", 1, "c", due + 3_600_000);
        assert_eq!(wait_at(&q, c, due), Wait::Ready);
        assert_eq!(q.claim(W, due).expect("window over").ids(), vec![c]);
        // A few milliseconds ahead (another process's reading) is no jump: the window holds.
        q.session("v", 1);
        let d = q.obs("v", 1, "d", due + 500);
        assert_eq!(q.claim(W, due), None);
        assert_eq!(wait_at(&q, d, due), Wait::BatchWindow(due + 500 + 60_000));
    }

    #[test]
    fn a_summary_waits_for_observations_that_are_backing_off() {
        let mut q = q();
        q.session("s", 1);
        q.obs("s", 1, "a", 0);
        q.add("s", JobKind::Summarize, 1, "turn", 0);
        let b = q.claim(W, 0).expect("batch");
        let p = q.policy;
        let out = fail(&mut q.conn, &b, "model down", &p, 0, None).expect("fail");
        assert_eq!(out.retrying, 1);
        assert_eq!(
            q.claim(W, 1),
            None,
            "neither the retrying job (not due) nor the summary"
        );
        let again = q.claim(W, 10_000).expect("due again");
        assert_eq!(again.kind(), JobKind::Observation);
    }

    #[test]
    fn jobs_failed_together_come_back_together() {
        let mut q = q();
        q.policy.max_size = 5;
        q.policy.retry_base_ms = 10_000;
        q.policy.retry_max_ms = 100_000;
        q.session("s", 2);
        let ids: Vec<i64> = (0..5).map(|i| q.obs("s", 1, &format!("k{i}"), 0)).collect();
        let b = q.claim(W, 0).expect("batch");
        assert_eq!(b.jobs.len(), 5);
        let p = q.policy;
        fail(&mut q.conn, &b, "429", &p, 0, None).expect("fail");
        let times: Vec<i64> = ids.iter().map(|id| q.status(*id).2).collect();
        assert!(times.iter().all(|t| *t == times[0]), "{times:?}");
        assert!(times[0] >= 5_000, "{times:?}");
        let again = q.claim(W, times[0]).expect("due together");
        assert_eq!(again.ids(), ids, "one batch again, not five");
    }

    #[test]
    fn a_retry_never_comes_before_the_providers_not_before_time() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        let id = q.obs("s", 1, "a", 0);
        let b = q.claim(W, 0).expect("batch");
        let p = q.policy;
        // Retry-After of 30 s, far past retry_max_ms (1 s).
        fail(&mut q.conn, &b, "429", &p, 0, Some(30_000)).expect("fail");
        assert_eq!(q.status(id), ("pending".into(), 1, 30_000));
        assert_eq!(q.claim(W, 29_999), None);
        assert!(q.claim(W, 30_000).is_some());
    }

    #[test]
    fn part_of_a_batch_is_acked_and_the_rest_failed_in_one_transaction() {
        let mut q = q();
        q.session("s", 2);
        let ids: Vec<i64> = (0..3).map(|i| q.obs("s", 1, &format!("k{i}"), 0)).collect();
        let b = q.claim(W, 0).expect("batch");
        let p = q.policy;
        let (ok, rest) = (b.part(&ids[..2]), b.part(&ids[2..]));
        assert_eq!(rest.ids(), vec![ids[2]]);
        let fenced = ack(&mut q.conn, &ok, 5, |tx| {
            let out = fail_in(tx, &rest, "chunk 2 failed", &p, 5, None)?;
            assert_eq!(out.retrying, 1);
            Ok(())
        })
        .expect("ack");
        assert_eq!(fenced, Fenced::Done);
        assert_eq!(q.status(ids[0]).0, "done");
        assert_eq!(q.status(ids[1]).0, "done");
        assert_eq!(q.status(ids[2]).0, "pending");
        assert_eq!(q.status(ids[2]).1, 1);
        // A part released without an attempt.
        let again = q.claim(W, 10_000).expect("the rest");
        assert_eq!(again.ids(), vec![ids[2]]);
        let fenced =
            db::write(&mut q.conn, |tx| release_in(tx, &again, 20_000, 10_000)).expect("release");
        assert_eq!(fenced, Fenced::Done);
        assert_eq!(q.status(ids[2]), ("pending".into(), 1, 20_000));
    }

    #[test]
    fn late_observations_queue_their_turns_summary_again() {
        let mut q = q();
        q.session("s", 2);
        let sum = match q.add("s", JobKind::Summarize, 1, "turn1", 0) {
            Enqueued::Added(id) => id,
            other => panic!("{other:?}"),
        };
        // Nothing to redo while the summary has not run.
        assert!(!db::write(&mut q.conn, |tx| redo_summary(tx, "s", 1, 1)).expect("redo"));
        let b = q.claim(W, 1).expect("summary");
        ack(&mut q.conn, &b, 2, |_| Ok(())).expect("ack");
        assert_eq!(q.status(sum).0, "done");
        // Another turn's summary is left alone.
        assert!(!db::write(&mut q.conn, |tx| redo_summary(tx, "s", 2, 3)).expect("redo"));
        assert!(db::write(&mut q.conn, |tx| redo_summary(tx, "s", 1, 3)).expect("redo"));
        assert_eq!(q.status(sum), ("pending".into(), 0, 3));
        assert_eq!(q.claim(W, 3).expect("again").ids(), vec![sum]);
    }

    #[test]
    fn summaries_do_not_wait_for_later_prompts() {
        let mut q = q();
        q.session("s", 2);
        q.add("s", JobKind::Summarize, 1, "turn1", 0);
        q.obs("s", 2, "later", 0);
        let b = q.claim(W, 0).expect("summary of prompt 1");
        assert_eq!(b.kind(), JobKind::Summarize);
    }

    #[test]
    fn ack_writes_results_in_the_same_transaction_and_is_fenced() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        let id = q.obs("s", 1, "a", 0);
        let b = q.claim(W, 0).expect("batch");
        // A failing results writer leaves everything as it was.
        let err = ack(&mut q.conn, &b, 5, |tx| {
            tx.execute("INSERT INTO model_calls (provider, model, purpose, latency_ms, outcome, created_at) VALUES ('x','m','t',1,'ok',1)", [])?;
            Err(crate::Error::Invalid("disk full".into()))
        });
        assert!(err.is_err());
        assert_eq!(q.status(id).0, "claimed");
        let calls: i64 = q
            .conn
            .query_row("SELECT count(*) FROM model_calls", [], |r| r.get(0))
            .expect("count");
        assert_eq!(calls, 0);
        // A good ack.
        let r = ack(&mut q.conn, &b, 6, |tx| {
            tx.execute("INSERT INTO model_calls (provider, model, purpose, latency_ms, outcome, created_at) VALUES ('x','m','t',1,'ok',1)", [])?;
            Ok(())
        })
        .expect("ack");
        assert_eq!(r, Fenced::Done);
        assert_eq!(q.status(id).0, "done");
        // A second ack of the same batch is refused and writes nothing.
        let mut wrote = false;
        let r = ack(&mut q.conn, &b, 7, |_| {
            wrote = true;
            Ok(())
        })
        .expect("ack again");
        assert_eq!(r, Fenced::LeaseLost);
        assert!(!wrote);
    }

    #[test]
    fn a_rescued_batch_cannot_be_acked_by_its_old_worker() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        let id = q.obs("s", 1, "a", 0);
        let mut old = q.claim(W, 0).expect("batch");
        let r = rescue(
            &mut q.conn,
            RescueScope::Expired,
            q.policy.max_attempts,
            500,
        )
        .expect("rescue early");
        assert_eq!(r, Rescued::default(), "lease not expired yet");
        let r = rescue(
            &mut q.conn,
            RescueScope::Expired,
            q.policy.max_attempts,
            1_001,
        )
        .expect("rescue");
        assert_eq!(r.retrying, 1);
        assert_eq!(q.status(id), ("pending".into(), 1, 1_001));
        // Same worker name claims it again: a new token.
        let new = q.claim(W, 1_002).expect("again");
        assert_ne!(new.token, old.token);
        let p = q.policy;
        assert_eq!(
            ack(&mut q.conn, &old, 1_003, |_| Ok(())).expect("old ack"),
            Fenced::LeaseLost
        );
        assert!(
            fail(&mut q.conn, &old, "x", &p, 1_003, None)
                .expect("old fail")
                .lease_lost
        );
        assert_eq!(
            release(&mut q.conn, &old, 0, 1_003).expect("old release"),
            Fenced::LeaseLost
        );
        assert_eq!(
            heartbeat(&mut q.conn, &mut old, &p, 1_003).expect("old hb"),
            Fenced::LeaseLost
        );
        assert_eq!(q.status(id).0, "claimed");
        assert_eq!(
            ack(&mut q.conn, &new, 1_004, |_| Ok(())).expect("new ack"),
            Fenced::Done
        );
        let errors: i64 = q
            .conn
            .query_row(
                "SELECT count(*) FROM job_errors WHERE job_id = ?1",
                [id],
                |r| r.get(0),
            )
            .expect("n");
        assert_eq!(errors, 1);
    }

    #[test]
    fn heartbeat_extends_the_lease() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        q.obs("s", 1, "a", 0);
        let mut b = q.claim(W, 0).expect("batch");
        assert_eq!(b.lease_until, 1_000);
        let p = q.policy;
        assert_eq!(
            heartbeat(&mut q.conn, &mut b, &p, 900).expect("hb"),
            Fenced::Done
        );
        assert_eq!(b.lease_until, 1_900);
        assert_eq!(
            rescue(
                &mut q.conn,
                RescueScope::Expired,
                q.policy.max_attempts,
                1_500
            )
            .expect("rescue"),
            Rescued::default()
        );
        assert_eq!(
            ack(&mut q.conn, &b, 1_600, |_| Ok(())).expect("ack"),
            Fenced::Done
        );
    }

    #[test]
    fn failures_back_off_then_skip_and_replay_revives() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        let id = q.obs("s", 1, "a", 0);
        let p = q.policy;
        let mut now = 0;
        for attempt in 1..=3u32 {
            let b = q.claim(W, now).expect("due");
            let out =
                fail(&mut q.conn, &b, &format!("error {attempt}"), &p, now, None).expect("fail");
            let (status, attempts, available_at) = q.status(id);
            assert_eq!(attempts, attempt);
            if attempt < 3 {
                assert_eq!((out.retrying, out.skipped), (1, 0));
                assert_eq!(status, "pending");
                let delay = available_at - now;
                let full = (100i64 << (attempt - 1)).min(1_000);
                assert!(
                    delay >= full / 2 && delay < full.max(1),
                    "delay {delay} for attempt {attempt}"
                );
                assert_eq!(q.claim(W, now), None, "not due yet");
                now = available_at;
            } else {
                assert_eq!((out.retrying, out.skipped), (0, 1));
                assert_eq!(status, "skipped");
            }
        }
        assert_eq!(
            q.claim(W, now + 1_000_000),
            None,
            "skipped jobs are never claimed"
        );
        let (row, _, errors) = get(&q.conn, id).expect("get").expect("exists");
        assert_eq!(row.last_error.as_deref(), Some("error 3"));
        assert_eq!(
            errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        let st = stats(&q.conn, now).expect("stats");
        assert_eq!(st.count(JobStatus::Skipped), 1);
        assert_eq!(st.recent_skipped[0].id, id);

        assert_eq!(
            replay(&mut q.conn, &Selector::AllSkipped, now).expect("replay"),
            1
        );
        assert_eq!(q.status(id), ("pending".into(), 0, now));
        assert_eq!(
            replay(&mut q.conn, &Selector::AllSkipped, now).expect("again"),
            0,
            "only skipped jobs"
        );
        let b = q.claim(W, now).expect("claimable again");
        assert_eq!(
            ack(&mut q.conn, &b, now, |_| Ok(())).expect("ack"),
            Fenced::Done
        );
        assert_eq!(
            replay(&mut q.conn, &Selector::Ids(vec![id]), now).expect("done job"),
            0,
            "done jobs are not replayed"
        );
    }

    fn skip_all(q: &mut Q, now: i64) {
        let p = Policy {
            max_attempts: 1,
            ..q.policy
        };
        while let Some(b) = claim_batch(&mut q.conn, W, &p, now).expect("claim") {
            fail(&mut q.conn, &b, "boom", &p, now, None).expect("fail");
        }
    }

    /// Skipped jobs a and b of session s, c and d of t; d skipped at 200, the rest at 100.
    fn four_skipped() -> (Q, [i64; 4]) {
        let mut q = q();
        q.policy.batching = false;
        q.policy.max_attempts = 1;
        q.session("s", 1);
        q.session("t", 1);
        let a = q.obs("s", 1, "a", 0);
        let b = q.obs("s", 1, "b", 0);
        let c = q.obs("t", 1, "c", 0);
        skip_all(&mut q, 100);
        let d = q.obs("t", 1, "d", 0);
        skip_all(&mut q, 200);
        (q, [a, b, c, d])
    }

    #[test]
    fn replay_selectors() {
        let (mut q, [a, b, c, d]) = four_skipped();
        assert_eq!(
            replay(&mut q.conn, &Selector::Ids(vec![b, 999]), 300).expect("ids"),
            1
        );
        assert_eq!(q.status(b).0, "pending");
        assert_eq!(
            replay(&mut q.conn, &Selector::Since(150), 300).expect("since"),
            1
        );
        assert_eq!(q.status(d).0, "pending");
        assert_eq!(
            replay(&mut q.conn, &Selector::Session("t".into()), 300).expect("session"),
            1
        );
        assert_eq!(q.status(c).0, "pending");
        assert_eq!(q.status(a).0, "skipped");
    }

    #[test]
    fn discard_deletes_only_the_selected_skipped_jobs() {
        let (mut q, [a, b, c, d]) = four_skipped();
        let e = q.obs("t", 1, "e", 0);
        let gone = |q: &Q, id: i64| get(&q.conn, id).expect("get").is_none();
        let errors = |q: &Q| -> i64 {
            q.conn
                .query_row("SELECT count(*) FROM job_errors", [], |r| r.get(0))
                .expect("count")
        };
        assert_eq!(errors(&q), 4);

        assert_eq!(
            discard(&mut q.conn, &Selector::Ids(vec![b, e, 999]), 300).expect("ids"),
            1,
            "a pending job is not discarded"
        );
        assert!(gone(&q, b) && !gone(&q, e));
        assert_eq!(errors(&q), 3, "its failed attempts go with it");
        assert_eq!(
            discard(&mut q.conn, &Selector::Since(150), 300).expect("since"),
            1
        );
        assert!(gone(&q, d));
        assert_eq!(
            discard(&mut q.conn, &Selector::Session("t".into()), 300).expect("session"),
            1
        );
        assert!(gone(&q, c) && !gone(&q, a));
        assert_eq!(
            discard(&mut q.conn, &Selector::AllSkipped, 300).expect("all"),
            1
        );
        assert!(gone(&q, a));
        assert_eq!(errors(&q), 0);
        assert_eq!(
            discard(&mut q.conn, &Selector::AllSkipped, 300).expect("again"),
            0
        );
        assert_eq!(q.status(e).0, "pending");
        assert_eq!(
            stats(&q.conn, 300)
                .expect("stats")
                .count(JobStatus::Skipped),
            0
        );
    }

    #[test]
    fn release_returns_jobs_without_counting_an_attempt() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        let id = q.obs("s", 1, "a", 0);
        let b = q.claim(W, 0).expect("batch");
        assert_eq!(
            release(&mut q.conn, &b, 5_010, 10).expect("release"),
            Fenced::Done
        );
        assert_eq!(q.status(id), ("pending".into(), 0, 5_010));
        assert_eq!(q.claim(W, 4_000), None);
        assert!(q.claim(W, 5_010).is_some());
    }

    #[test]
    fn rescue_all_but_me_takes_back_every_other_claim_and_skips_at_the_limit() {
        let mut q = q();
        q.policy.batching = false;
        q.policy.max_attempts = 2;
        q.session("s", 1);
        q.session("t", 1);
        let a = q.obs("s", 1, "a", 0);
        let b = q.obs("t", 1, "b", 0);
        q.claim("dead-worker", 0).expect("a");
        q.claim("me", 0).expect("b");
        let r = rescue(
            &mut q.conn,
            RescueScope::AllBut("me"),
            q.policy.max_attempts,
            10,
        )
        .expect("rescue");
        assert_eq!(
            r,
            Rescued {
                retrying: 1,
                skipped: 0
            }
        );
        assert_eq!(q.status(a).0, "pending");
        assert_eq!(q.status(b).0, "claimed");
        q.claim("dead-again", 10).expect("a again");
        let r = rescue(
            &mut q.conn,
            RescueScope::AllBut("me"),
            q.policy.max_attempts,
            20,
        )
        .expect("rescue");
        assert_eq!(
            r,
            Rescued {
                retrying: 0,
                skipped: 1
            },
            "a job that keeps killing workers ends skipped"
        );
        let (row, _, errors) = get(&q.conn, a).expect("get").expect("row");
        assert_eq!(row.status, JobStatus::Skipped);
        assert!(row.last_error.unwrap_or_default().contains("dead-again"));
        assert_eq!(errors.len(), 2);
    }

    /// `queue.max_attempts` changed after jobs were queued reaches them: the setting in
    /// force when an attempt fails decides, in `fail` and in `rescue`, not the one the job
    /// was queued under.
    #[test]
    fn the_max_attempts_in_force_at_failure_time_decides() {
        let mut q = q();
        q.policy.batching = false;
        q.policy.max_attempts = 5;
        q.session("s", 1);
        q.session("t", 1);
        let a = q.obs("s", 1, "a", 0);
        let b = q.obs("t", 1, "b", 0);
        // Lowered to 1 after they were queued under 5: the first failure skips.
        q.policy.max_attempts = 1;
        let batch = q.claim(W, 0).expect("a");
        let p = q.policy;
        let out = fail(&mut q.conn, &batch, "boom", &p, 0, None).expect("fail");
        assert_eq!((out.retrying, out.skipped), (0, 1));
        assert_eq!(q.status(a).0, "skipped");
        q.claim("dead-worker", 0).expect("b");
        let r = rescue(&mut q.conn, RescueScope::AllBut("me"), 1, 10).expect("rescue");
        assert_eq!((r.retrying, r.skipped), (0, 1));
        assert_eq!(q.status(b).0, "skipped");
        // Raised after they were queued under 1: they keep being retried.
        replay(&mut q.conn, &Selector::AllSkipped, 20).expect("replay");
        q.policy.max_attempts = 3;
        let p = q.policy;
        let batch = q.claim(W, 20).expect("again");
        let out = fail(&mut q.conn, &batch, "boom", &p, 20, None).expect("fail");
        assert_eq!((out.retrying, out.skipped), (1, 0));
        q.claim("dead-worker", 1_000).expect("other");
        let r = rescue(&mut q.conn, RescueScope::AllBut("me"), 3, 1_010).expect("rescue");
        assert_eq!((r.retrying, r.skipped), (1, 0));
    }

    #[test]
    fn purge_deletes_only_old_done_jobs() {
        let mut q = q();
        q.policy.batching = false;
        q.policy.max_attempts = 1;
        q.session("s", 1);
        let done = q.obs("s", 1, "done", 0);
        let b = q.claim(W, 0).expect("claim");
        ack(&mut q.conn, &b, 100, |_| Ok(())).expect("ack");
        let skipped = q.obs("s", 1, "skipped", 0);
        skip_all(&mut q, 100);
        let pending = q.obs("s", 1, "pending", 0);
        assert_eq!(
            purge(&mut q.conn, 100).expect("purge"),
            0,
            "not older than the cutoff"
        );
        assert_eq!(purge(&mut q.conn, 101).expect("purge"), 1);
        assert!(get(&q.conn, done).expect("get").is_none());
        assert!(get(&q.conn, skipped).expect("get").is_some());
        assert!(get(&q.conn, pending).expect("get").is_some());
    }

    #[test]
    fn list_filters_and_stats_count() {
        let mut q = q();
        q.policy.batching = false;
        q.session("s", 1);
        q.session("t", 1);
        q.obs("s", 1, "a", 0);
        q.obs("t", 1, "b", 500);
        q.add("t", JobKind::Summarize, 1, "turn", 600);
        let b = q.claim(W, 1_000).expect("claim");
        assert_eq!(b.session_id(), "s");
        let all = list(&q.conn, &ListFilter::default()).expect("list");
        assert_eq!(all.len(), 3);
        assert!(all[0].id > all[2].id, "newest first");
        let claimed = list(
            &q.conn,
            &ListFilter {
                status: Some(JobStatus::Claimed),
                ..Default::default()
            },
        )
        .expect("list");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].claimed_by.as_deref(), Some(W));
        let t = list(
            &q.conn,
            &ListFilter {
                session_id: Some("t".into()),
                limit: 1,
                ..Default::default()
            },
        )
        .expect("list");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].kind, JobKind::Summarize);
        let st = stats(&q.conn, 2_000).expect("stats");
        assert_eq!(st.count(JobStatus::Pending), 2);
        assert_eq!(st.count(JobStatus::Claimed), 1);
        assert_eq!(st.by_kind.get("summarize/pending"), Some(&1));
        assert_eq!(st.oldest_pending_age_ms, Some(1_500));
        assert_eq!(JobStatus::parse("done"), Some(JobStatus::Done));
        assert_eq!(JobStatus::parse("gone"), None);
    }

    #[test]
    fn hot_queries_use_indexes() {
        let q = q();
        let plan = |sql: &str, n: usize| -> String {
            let params: Vec<rusqlite::types::Value> =
                (0..n).map(|_| rusqlite::types::Value::Integer(1)).collect();
            let mut stmt = q
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .expect("plan");
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params), |r| {
                    r.get::<_, String>(3)
                })
                .expect("rows")
                .collect::<rusqlite::Result<Vec<_>>>()
                .expect("collect");
            rows.join("\n")
        };
        for (name, sql, n) in [("ready", READY_SQL, 4), ("claim", CLAIM_SQL, 8)] {
            let p = plan(&with_limit(sql, 20), n);
            assert!(!p.contains("TEMP B-TREE"), "{name} sorts:\n{p}");
            for line in p.lines() {
                let full_scan = line.starts_with("SCAN")
                    && !line.contains("USING")
                    && !line.contains("subquery");
                assert!(!full_scan, "{name} scans a table:\n{p}");
            }
            assert!(!p.contains("pending_messages_done_time"), "{name}:\n{p}");
        }
    }

    #[test]
    fn retry_delays_grow_and_stay_capped() {
        let p = Policy {
            retry_base_ms: 1_000,
            retry_max_ms: 5_000,
            ..Policy::default()
        };
        for _ in 0..50 {
            let d1 = p.retry_delay_ms(1);
            let d3 = p.retry_delay_ms(3);
            let d9 = p.retry_delay_ms(9);
            assert!((500..1_000).contains(&d1), "{d1}");
            assert!((2_000..4_000).contains(&d3), "{d3}");
            assert!((2_500..5_000).contains(&d9), "{d9}");
        }
        assert_eq!(Policy::default().max_attempts, 3);
    }
}
