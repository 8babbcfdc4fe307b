//! From a record to its rows, in the caller's transaction: the session upsert, the prompt
//! record, the queue job. The one writer of captured events: the hook, the worker's spool
//! ingestion (`worker::ingest`), transcript imports and the quarantine's replay all write
//! through [`apply`].
//!
//! - A start, a touch (a synthetic prompt) and an end write the session row only.
//! - A prompt raises the session's prompt counter and stores the cleaned text; a prompt
//!   with an id already recorded is not stored twice.
//! - A tool event: an `observation` job, dedupe key `tool:<tool_use_id>`, numbered by
//!   [`turn_of`].
//! - A turn end: a `summarize` job, dedupe key `turn:<session_id>:<prompt_number>`; a
//!   repeated Stop of the same turn refreshes the pending job, so the final assistant
//!   message wins.
//!
//! Idempotent: dedupe keys and prompt ids make a second write of the same record a no-op,
//! so a spooled or imported event may be applied again.

use rusqlite::Transaction;

use super::types::{Action, Record};
use crate::error::Result;
use crate::memory::sessions::{self, NewPrompt, PromptRecorded};
use crate::queue;
use crate::queue::claim::{Enqueued, JobKind, NewJob};

/// What [`apply`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The session row only.
    Session,
    Prompt(PromptRecorded),
    Job(Enqueued),
}

/// The queue's dedupe key of a tool call's `observation` job: a call queued twice (a hook
/// and a transcript import) is one job.
pub fn tool_key(tool_use_id: &str) -> String {
    format!("tool:{tool_use_id}")
}

/// The queue's dedupe key of a turn's `summarize` job.
pub fn turn_key(session_id: &str, prompt_number: i64) -> String {
    format!("turn:{session_id}:{prompt_number}")
}

/// Writes a record in the caller's transaction: the session upsert plus the prompt or job.
/// Idempotent for jobs (dedupe keys) and prompts with an id.
pub fn apply(tx: &Transaction, rec: &Record, max_attempts: u32) -> Result<Applied> {
    let (sid, project, cwd, at) = (
        rec.session_id.as_str(),
        rec.project.as_str(),
        rec.cwd.as_str(),
        rec.at,
    );
    match &rec.action {
        Action::Start => {
            sessions::start(tx, sid, project, cwd, at)?;
            Ok(Applied::Session)
        }
        Action::Touch => {
            sessions::ensure(tx, sid, project, cwd, at)?;
            Ok(Applied::Session)
        }
        Action::End { if_known: true, .. } => {
            sessions::end_if_known(tx, sid, at)?;
            Ok(Applied::Session)
        }
        Action::End { .. } => {
            sessions::end(tx, sid, project, cwd, at)?;
            Ok(Applied::Session)
        }
        Action::Prompt { prompt_id, text } => Ok(Applied::Prompt(sessions::record_prompt(
            tx,
            &NewPrompt {
                session_id: sid,
                project,
                cwd,
                prompt_id: prompt_id.as_deref(),
                text,
            },
            at,
        )?)),
        Action::Tool(ev) => {
            sessions::ensure(tx, sid, project, cwd, at)?;
            let prompt_number = turn_of(tx, rec)?;
            let payload = serde_json::to_string(ev)
                .map_err(|e| crate::Error::Invalid(format!("cannot encode tool event: {e}")))?;
            let key = tool_key(&ev.tool_use_id);
            Ok(Applied::Job(queue::claim::enqueue(
                tx,
                &NewJob {
                    session_id: sid,
                    project,
                    kind: JobKind::Observation,
                    prompt_number,
                    payload: &payload,
                    dedupe_key: &key,
                },
                max_attempts,
                at,
            )?))
        }
        Action::TurnEnd(turn) => {
            sessions::ensure(tx, sid, project, cwd, at)?;
            let prompt_number = turn_of(tx, rec)?;
            let payload = serde_json::to_string(turn)
                .map_err(|e| crate::Error::Invalid(format!("cannot encode turn end: {e}")))?;
            let key = turn_key(sid, prompt_number);
            Ok(Applied::Job(queue::claim::enqueue(
                tx,
                &NewJob {
                    session_id: sid,
                    project,
                    kind: JobKind::Summarize,
                    prompt_number,
                    payload: &payload,
                    dedupe_key: &key,
                },
                max_attempts,
                at,
            )?))
        }
    }
}

/// The prompt number a tool event or turn end belongs to: its `prompt_id`'s prompt when
/// that is recorded (the turn is keyed by Claude Code's id, so a late write lands in its
/// own turn), else the number the hook saw ([`Record::prompt_number`]), else the session's
/// counter now (0 before any prompt).
pub fn turn_of(tx: &Transaction, rec: &Record) -> Result<i64> {
    if let Some(id) = rec.prompt_id()
        && let Some(n) = sessions::prompt_number_of(tx, &rec.session_id, id)?
    {
        return Ok(n);
    }
    if let Some(n) = rec.prompt_number {
        return Ok(n);
    }
    Ok(sessions::prompt_counter(tx, &rec.session_id)?.unwrap_or(0))
}
