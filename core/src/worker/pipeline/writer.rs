//! Writing results: the single writer. It records each model call as `started` before the
//! call is made (answering the model thread with the row's id), and stores a finished
//! batch in one transaction: the ack, the observations and summary, the calls' outcomes
//! (`usage::settle`), or, for what did not succeed, the failure or release of the rest.
//! It counts what the run did (`Report`).

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::messages::{Damage, Done, Finished, ToWriter, Verdict};
use crate::clock::now_ms;
use crate::error::Result;
use crate::memory;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::queue;
use crate::queue::claim::{Batch, Fenced, JobKind};
use crate::store::db;
use crate::worker::usage;

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub batches_done: u64,
    pub batches_failed: u64,
    pub batches_released: u64,
    pub observations: u64,
    pub summaries: u64,
    /// The database file was deleted or replaced under the worker: the caller runs the
    /// worker again on the file now at the path (`worker::pipeline` stopped on it).
    pub reopen: bool,
}

pub(super) fn writer_thread(
    mut conn: Connection,
    rx: Receiver<ToWriter>,
    fin: Sender<Finished>,
    damage: Damage,
) -> Report {
    let mut report = Report::default();
    for msg in rx {
        match msg {
            ToWriter::Started(record, reply) => {
                let id = match db::write(&mut conn, |tx| usage::start(tx, &record)) {
                    Ok(id) => Some(id),
                    Err(e) => {
                        damage.note(&e);
                        log::warn!("cannot record a model call before making it: {e}");
                        None
                    }
                };
                let _ = reply.send(id);
            }
            ToWriter::Done(done) => {
                let token = done.batch.token;
                if let Err(e) = write_done(&mut conn, *done, &mut report) {
                    damage.note(&e);
                    log::error!(
                        "cannot record a finished batch (its lease will expire and it will be retried): {e}"
                    );
                }
                let _ = fin.send(Finished { token });
            }
        }
    }
    report
}

/// Stores observations and a summary in the ack's transaction; when observations of a
/// turn land after its summary was written, the summary job is queued again. Returns how
/// many observations were new.
fn store(
    tx: &rusqlite::Transaction,
    batch: &Batch,
    observations: &[NewObservation],
    summary: Option<&NewSummary>,
    now: i64,
) -> Result<u64> {
    let mut added = 0u64;
    for o in observations {
        if let memory::observations::Stored::Added(_) =
            memory::observations::insert_observation(tx, o)?
        {
            added += 1;
        }
    }
    if let Some(s) = summary {
        memory::observations::upsert_summary(tx, s)?;
    }
    if added > 0
        && batch.kind() == JobKind::Observation
        && queue::claim::redo_summary(tx, batch.session_id(), batch.prompt_number(), now)?
    {
        log::info!(
            "turn {} of session {} gets its summary again: {added} observation(s) arrived after it",
            batch.prompt_number(),
            batch.session_id()
        );
    }
    Ok(added)
}

fn write_done(conn: &mut Connection, done: Done, report: &mut Report) -> Result<()> {
    let Done {
        batch,
        policy,
        result,
        calls,
        learned_limit,
    } = done;
    let now = now_ms();
    if let (Some(limit), Some(first)) = (learned_limit, calls.first()) {
        let (provider, model) = (first.record.provider.clone(), first.record.model.clone());
        db::write(conn, |tx| {
            usage::learn_prompt_limit(tx, &provider, &model, limit, now)
        })?;
    }
    let (kept, rest) = match result {
        Verdict::Store {
            observations,
            summary,
        } => {
            let mut added = 0;
            let stored = queue::claim::ack(conn, &batch, now, |tx| {
                added = store(tx, &batch, &observations, summary.as_deref(), now)?;
                usage::settle(tx, &calls)
            });
            match stored {
                Ok(Fenced::Done) => {
                    report.batches_done += 1;
                    report.observations += added;
                    report.summaries += u64::from(summary.is_some());
                    log::info!(
                        "{} job(s) {:?} done: {} observation(s){}",
                        batch.jobs.len(),
                        batch.ids(),
                        added,
                        if summary.is_some() { ", 1 summary" } else { "" }
                    );
                }
                Ok(Fenced::LeaseLost) => usage::settle_all(conn, &calls)?,
                // A damaged database: nothing more is written to it (the batch's lease
                // expires; recovery brings it back).
                Err(e) if e.is_corrupt() => return Err(e),
                Err(e) => {
                    usage::settle_all(conn, &calls)?;
                    let msg = format!("cannot store the results: {e}");
                    log::error!("{msg}");
                    queue::claim::fail(conn, &batch, &msg, &policy, now, None)?;
                    report.batches_failed += 1;
                }
            }
            return Ok(());
        }
        Verdict::Fail {
            error,
            not_before,
            kept,
        } => (kept, Rest::Fail(error, not_before)),
        Verdict::Release { until, kept } => (kept, Rest::Release(until)),
    };
    let done = batch.part(&kept.job_ids);
    let left = batch.part(
        &batch
            .ids()
            .into_iter()
            .filter(|id| !kept.job_ids.contains(id))
            .collect::<Vec<_>>(),
    );
    let mut added = 0;
    let mut failed = queue::claim::FailOutcome::default();
    let settle_rest = |tx: &rusqlite::Transaction| -> Result<queue::claim::FailOutcome> {
        match &rest {
            Rest::Fail(error, not_before) => {
                queue::claim::fail_in(tx, &left, error, &policy, now, *not_before)
            }
            Rest::Release(until) => {
                queue::claim::release_in(tx, &left, *until, now)?;
                Ok(queue::claim::FailOutcome::default())
            }
        }
    };
    let fenced = if done.jobs.is_empty() {
        db::write(conn, |tx| {
            usage::settle(tx, &calls)?;
            failed = settle_rest(tx)?;
            Ok(Fenced::Done)
        })?
    } else {
        queue::claim::ack(conn, &done, now, |tx| {
            added = store(tx, &batch, &kept.observations, None, now)?;
            usage::settle(tx, &calls)?;
            failed = settle_rest(tx)?;
            Ok(())
        })?
    };
    if fenced == Fenced::LeaseLost {
        usage::settle_all(conn, &calls)?;
        return Ok(());
    }
    if !done.jobs.is_empty() {
        report.observations += added;
        log::info!(
            "{} job(s) {:?} done before a later chunk failed: {added} observation(s) kept",
            done.jobs.len(),
            done.ids()
        );
    }
    match rest {
        Rest::Fail(msg, _) => {
            report.batches_failed += 1;
            if failed.skipped > 0 {
                log::error!(
                    "jobs {:?} skipped after {} attempts: {msg}",
                    left.ids(),
                    policy.max_attempts
                );
            } else if !failed.lease_lost {
                log::warn!("jobs {:?} failed, will retry: {msg}", left.ids());
            }
        }
        Rest::Release(until) => {
            report.batches_released += 1;
            log::info!(
                "jobs {:?} released without an attempt until {}",
                left.ids(),
                crate::clock::iso_utc(until)
            );
        }
    }
    Ok(())
}

/// What happens to the jobs of a batch that did not succeed.
enum Rest {
    Fail(String, Option<i64>),
    Release(i64),
}
