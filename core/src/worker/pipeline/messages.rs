//! What the pipeline's threads send each other: the claimer hands a model thread a
//! `Work`, the model thread hands the writer a `Done` (or asks it to record a call as
//! `Started` first), the writer tells the claimer a batch is `Finished`. The lowest file of
//! the folder: the claimer, the model threads and the writer all use it, it uses none of
//! them.

use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

use crate::error::Error;

use crate::memory::observations::{NewObservation, NewSummary};
use crate::queue::claim::{Batch, Policy};
use crate::queue::payload::{ToolEvent, TurnEnd};
use crate::worker::model::{Provider, RetryPolicy};
use crate::worker::prompt::{Limits, SessionHeader, TurnObservation};
use crate::worker::usage::{Call, CallRecord};

/// The first sign of a damaged database that a thread of the pipeline met
/// (`Error::is_corrupt`): the claimer stops on it, and the run returns it for the binary
/// to recover the database (`store::recover`), instead of retrying on a damaged file.
#[derive(Debug, Clone, Default)]
pub(super) struct Damage(Arc<Mutex<Option<String>>>);

impl Damage {
    /// Notes `e` when it says the database is damaged; true if it does.
    pub(super) fn note(&self, e: &Error) -> bool {
        if !e.is_corrupt() {
            return false;
        }
        let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            log::error!("the database is damaged: {e}");
            *first = Some(e.to_string());
        }
        true
    }

    /// The damage noted, as the error the run returns.
    pub(super) fn error(&self, path: &std::path::Path) -> Option<Error> {
        let first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        first.as_ref().map(|reason| Error::Damaged {
            path: path.to_path_buf(),
            reason: reason.clone(),
        })
    }
}

/// Everything a model thread needs for one batch.
#[derive(Debug)]
pub(super) struct Work {
    pub(super) batch: Batch,
    pub(super) input: Input,
    pub(super) provider: Arc<Provider>,
    /// `model.*` limits, with `max_prompt_chars` lowered to what this provider's model is
    /// known to take (`usage::prompt_limit`).
    pub(super) limits: Limits,
    pub(super) retry: RetryPolicy,
    pub(super) policy: Policy,
}

#[derive(Debug)]
pub(super) enum Input {
    Observations {
        header: SessionHeader,
        events: Vec<ToolEvent>,
    },
    Summary {
        project: String,
        request: String,
        observations: Vec<TurnObservation>,
        files_read: Vec<String>,
        files_edited: Vec<String>,
        turn: TurnEnd,
    },
}

/// A model thread's answer for one batch.
#[derive(Debug)]
pub(super) struct Done {
    pub(super) batch: Batch,
    pub(super) policy: Policy,
    pub(super) result: Verdict,
    pub(super) calls: Vec<Call>,
    /// A smaller `max_prompt_chars` this batch found the model needs (it rejected a
    /// larger prompt as too long for its context).
    pub(super) learned_limit: Option<usize>,
}

#[derive(Debug)]
pub(super) enum Verdict {
    Store {
        observations: Vec<NewObservation>,
        summary: Option<Box<NewSummary>>,
    },
    /// A failed attempt of the jobs not in `kept`; never retried before `not_before` (ms).
    Fail {
        error: String,
        not_before: Option<i64>,
        kept: Kept,
    },
    /// Give the jobs not in `kept` back without counting an attempt, to be claimed again
    /// at `until` (ms): the provider asked to wait, or the token budget is spent.
    Release { until: i64, kept: Kept },
}

/// The chunks of a split batch that succeeded before one failed: their jobs are done and
/// their observations stored, so a retry does not pay for them again.
#[derive(Debug, Default)]
pub(super) struct Kept {
    pub(super) job_ids: Vec<i64>,
    pub(super) observations: Vec<NewObservation>,
}

/// What model threads send the writer.
#[derive(Debug)]
pub(super) enum ToWriter {
    /// A call is about to be made: write its `started` row and answer with its id.
    Started(Box<CallRecord>, Sender<Option<i64>>),
    /// A batch is finished.
    Done(Box<Done>),
}

/// What the writer tells the claimer.
#[derive(Debug)]
pub(super) struct Finished {
    pub(super) token: i64,
}
