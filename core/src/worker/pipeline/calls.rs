//! Calling the model: what a model thread does with one batch. The batch is split into
//! prompts that fit (`prompt::split_batch`), each prompt is called with retries
//! (`model::complete_with_retry`), every call recorded as `started` through the writer
//! before it is made (`Ledger`), the reply parsed (`parse`) into observations or a summary
//! (or made by the offline extractor); the answer is a `Verdict` for the writer. Touches
//! no database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::messages::{Done, Input, Kept, ToWriter, Verdict, Work};
use crate::clock::now_ms;
use crate::memory;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::queue::claim::Batch;
use crate::queue::payload::{ToolEvent, TurnEnd};
use crate::worker::model::{self, ModelError, Provider, RetryPolicy};
use crate::worker::offline;
use crate::worker::parse::{
    self, ObservationsOutcome, ParsedObservation, ParsedSummary, SummaryOutcome,
};
use crate::worker::prompt::{self, Limits, Prompt, SessionHeader, TurnObservation};
use crate::worker::usage::{self, Call, CallRecord, Outcome};

/// How long a batch released for the spent token budget waits at most before it is
/// looked at again.
const BUDGET_RETRY_MS: i64 = 10 * 60 * 1000;

pub(super) fn model_thread(
    rx: Receiver<Work>,
    tx: Sender<ToWriter>,
    budget_spent: Arc<AtomicBool>,
) {
    for work in rx {
        let done = if budget_spent.load(Ordering::SeqCst) && !work.provider.is_offline() {
            log::warn!(
                "daily token budget spent: releasing jobs {:?} for later",
                work.batch.ids()
            );
            Done {
                policy: work.policy,
                batch: work.batch,
                result: Verdict::Release {
                    until: now_ms() + BUDGET_RETRY_MS,
                    kept: Kept::default(),
                },
                calls: Vec::new(),
                learned_limit: None,
            }
        } else {
            process(work, &tx)
        };
        if tx.send(ToWriter::Done(Box::new(done))).is_err() {
            return;
        }
    }
}

/// Turns one batch into a verdict: the results to store, or why it failed.
fn process(work: Work, writer: &Sender<ToWriter>) -> Done {
    let Work {
        batch,
        input,
        provider,
        limits,
        retry,
        policy,
    } = work;
    let mut ledger = Ledger {
        writer,
        calls: Vec::new(),
    };
    let now = now_ms();
    let mut caller = Caller {
        batch: &batch,
        provider: &provider,
        retry,
        limits,
        learned: None,
        ledger: &mut ledger,
    };
    let result = match input {
        Input::Observations { header, events } => observe(&mut caller, &header, &events, now),
        Input::Summary {
            project,
            request,
            observations,
            files_read,
            files_edited,
            turn,
        } => {
            let ctx = TurnContext {
                project: &project,
                request: &request,
                observations: &observations,
                files_read: &files_read,
                files_edited: &files_edited,
                turn: &turn,
            };
            summarize(&mut caller, &ctx, now)
        }
    };
    let learned_limit = caller.learned;
    Done {
        batch,
        policy,
        result,
        calls: ledger.calls,
        learned_limit,
    }
}

/// How long a model thread waits for the writer to record that a call starts.
const START_WAIT: Duration = Duration::from_secs(10);

/// The model calls of one batch: each written as `started` (through the writer) before it
/// is made, completed in the batch's ack.
struct Ledger<'a> {
    writer: &'a Sender<ToWriter>,
    calls: Vec<Call>,
}

impl Ledger<'_> {
    /// Records that a call is about to be made. Should the writer not answer, the call is
    /// still made and recorded whole afterwards.
    fn start(&mut self, record: CallRecord) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let id = if self
            .writer
            .send(ToWriter::Started(Box::new(record.clone()), tx))
            .is_ok()
        {
            rx.recv_timeout(START_WAIT).ok().flatten()
        } else {
            None
        };
        self.calls.push(Call { id, record });
    }

    /// The call being made (the last started).
    fn last(&mut self) -> Option<&mut CallRecord> {
        self.calls.last_mut().map(|c| &mut c.record)
    }

    fn set_last_outcome(&mut self, outcome: Outcome, error: Option<String>) {
        if let Some(last) = self.last() {
            last.outcome = outcome;
            last.error = error;
        }
    }
}

/// Calls the model for one batch: the provider, retry policy, the prompt size in force
/// (lowered when the model rejects a prompt as too long) and the ledger of calls.
struct Caller<'a, 'l> {
    batch: &'a Batch,
    provider: &'a Provider,
    retry: RetryPolicy,
    limits: Limits,
    /// Set when `limits.max_prompt_chars` was lowered for this model.
    learned: Option<usize>,
    ledger: &'a mut Ledger<'l>,
}

/// Most times one batch lowers its prompt size after context-length errors.
const MAX_SHRINKS: usize = 12;
/// The smallest prompt size tried after context-length errors.
const MIN_PROMPT_CHARS: usize = 1_000;

impl Caller<'_, '_> {
    /// Calls the model with retries; records every attempt (the successful one's outcome
    /// is fixed by the caller after parsing). Returns the reply text.
    fn call(
        &mut self,
        job_ids: &[i64],
        prompt: &Prompt,
    ) -> std::result::Result<String, ModelError> {
        log::debug!(
            "prompt for jobs {job_ids:?} ({} chars):\n{}\n{}",
            prompt.chars(),
            prompt.system,
            prompt.user
        );
        let (provider, batch) = (self.provider, self.batch);
        let ledger = &mut *self.ledger;
        let mut started = Instant::now();
        let mut record = |a: model::Attempt| match a {
            model::Attempt::Starting => {
                started = Instant::now();
                ledger.start(CallRecord {
                    provider: provider.name().to_string(),
                    model: provider.model().to_string(),
                    purpose: batch.kind().as_str().to_string(),
                    session_id: Some(batch.session_id().to_string()),
                    job_ids: job_ids.to_vec(),
                    prompt_chars: prompt.chars(),
                    input_tokens: usage::estimate_tokens(prompt.chars()),
                    output_tokens: 0,
                    tokens_estimated: true,
                    cost_usd: None,
                    latency_ms: 0,
                    outcome: Outcome::Started,
                    error: None,
                    created_at: now_ms(),
                });
            }
            model::Attempt::Finished(a) => {
                if let Some(last) = ledger.last() {
                    last.latency_ms = a.latency_ms.max(started.elapsed().as_millis() as i64);
                    last.input_tokens = a.input_tokens;
                    last.output_tokens = a.output_tokens;
                    last.tokens_estimated = false;
                    last.cost_usd = a.cost_usd;
                    last.outcome = if a.not_logged_in {
                        Outcome::NotLoggedIn
                    } else if a.error.is_some() {
                        Outcome::Error
                    } else {
                        Outcome::Ok
                    };
                    last.error = a.error;
                }
            }
        };
        let result = model::complete_with_retry(provider, prompt, self.retry, &mut record);
        if let Ok(c) = &result
            && let Some(last) = self.ledger.last()
            && c.input_tokens == 0
        {
            // No counts from the provider: estimate, and say so.
            last.input_tokens = usage::estimate_tokens(prompt.chars());
            last.output_tokens = usage::estimate_tokens(c.text.chars().count());
            last.tokens_estimated = true;
        }
        if let Ok(c) = &result {
            log::debug!("reply for jobs {job_ids:?}:\n{}", c.text);
        }
        result.map(|c| c.text)
    }

    /// After `e`, a context-length error for a prompt of `prompt_chars`: lowers the prompt
    /// size so the next prompt fits, and returns true; false when it cannot go lower.
    fn shrink(&mut self, e: &ModelError, prompt_chars: usize, shrinks: &mut usize) -> bool {
        let ModelError::ContextLength {
            prompt_tokens,
            limit_tokens,
            ..
        } = e
        else {
            return false;
        };
        let current = self.limits.max_prompt_chars.min(prompt_chars.max(1));
        let target = match (prompt_tokens, limit_tokens) {
            // Scale by what the server counted, keeping 15% for the difference between
            // its tokenizer and our count of characters.
            (Some(p), Some(l)) if p > l => {
                (current as u128 * *l as u128 * 85 / 100 / *p as u128) as usize
            }
            _ => current / 2,
        };
        let next = target.min(current * 9 / 10).max(MIN_PROMPT_CHARS);
        *shrinks += 1;
        if next >= self.limits.max_prompt_chars || *shrinks > MAX_SHRINKS {
            return false;
        }
        log::warn!(
            "{} ({}) rejected a {prompt_chars}-char prompt as too long for its context; \
             prompts now kept under {next} chars (model.max_prompt_chars): {e}",
            self.provider.name(),
            self.provider.model()
        );
        self.limits.max_prompt_chars = next;
        self.learned = Some(next);
        true
    }

    /// The verdict for a call that failed with `e`, keeping `kept`.
    fn failure(&self, e: ModelError, kept: Kept, now: i64) -> Verdict {
        if let Some(wait) = e.wait_asked() {
            let until = now_ms().max(now) + wait.as_millis() as i64;
            let why = match e {
                ModelError::NotLoggedIn(_) => "until the model provider is logged in",
                _ => "as the model API asked",
            };
            log::warn!(
                "jobs of session {} wait {}s {why}: {e}",
                self.batch.session_id(),
                wait.as_secs()
            );
            return Verdict::Release { until, kept };
        }
        let not_before = e
            .retry_after()
            .map(|w| now_ms().max(now) + w.as_millis() as i64);
        let error = match &e {
            ModelError::ContextLength { .. } => format!(
                "model call failed: {e}; even a prompt of {} chars does not fit: lower \
                 model.max_prompt_chars and model.max_tool_field_chars, or give the model a \
                 larger context",
                self.limits.max_prompt_chars
            ),
            _ => format!("model call failed: {e}"),
        };
        Verdict::Fail {
            error,
            not_before,
            kept,
        }
    }
}

fn observe(c: &mut Caller, header: &SessionHeader, events: &[ToolEvent], now: i64) -> Verdict {
    let ids = c.batch.ids();
    if c.provider.is_offline() {
        let parsed = offline::observations(events);
        return Verdict::Store {
            observations: chunk_observations(
                c.batch,
                events,
                &ids,
                0..events.len(),
                parsed,
                "offline",
                now,
            ),
            summary: None,
        };
    }
    let mut out = Vec::new();
    // Events before `from` are settled: observed, or answered empty.
    let mut from = 0;
    let mut shrinks = 0;
    'split: while from < events.len() {
        let base = from;
        for chunk in prompt::split_batch(header, &events[base..], c.limits) {
            let range = base + chunk.start..base + chunk.end;
            let p = prompt::observation_prompt(header, &events[range.clone()], c.limits);
            let kept = |out: Vec<NewObservation>| Kept {
                job_ids: ids[..range.start].to_vec(),
                observations: out,
            };
            let text = match c.call(&ids[range.clone()], &p) {
                Ok(t) => t,
                Err(e) if c.shrink(&e, p.chars(), &mut shrinks) => {
                    // Split what is left with the smaller size, at once.
                    from = range.start;
                    continue 'split;
                }
                Err(e) => return c.failure(e, kept(out), now),
            };
            match parse::parse(&text).observations_outcome(&text) {
                ObservationsOutcome::Found(obs) => out.extend(chunk_observations(
                    c.batch,
                    events,
                    &ids,
                    range.clone(),
                    obs,
                    "model",
                    now,
                )),
                ObservationsOutcome::Empty => c.ledger.set_last_outcome(Outcome::Empty, None),
                ObservationsOutcome::Unusable(reason) => {
                    c.ledger
                        .set_last_outcome(Outcome::Unusable, Some(reason.clone()));
                    return Verdict::Fail {
                        error: reason,
                        not_before: None,
                        kept: kept(out),
                    };
                }
            }
            from = range.end;
        }
    }
    Verdict::Store {
        observations: out,
        summary: None,
    }
}

/// The observations of one chunk (`range` of the batch's events), with the chunk's edits
/// attributed to them.
fn chunk_observations(
    batch: &Batch,
    events: &[ToolEvent],
    ids: &[i64],
    range: std::ops::Range<usize>,
    parsed: Vec<ParsedObservation>,
    origin: &str,
    now: i64,
) -> Vec<NewObservation> {
    let edited: Vec<String> = events[range.clone()]
        .iter()
        .filter_map(offline::edited_path)
        .collect();
    let files = attribute_edits(&parsed, &edited);
    parsed
        .into_iter()
        .zip(files)
        .map(|(p, extra)| to_observation(batch, p, extra, &ids[range.clone()], origin, now))
        .collect()
}

/// Which edited paths of a chunk each observation gets in `files_modified`: a path goes to
/// the observations that mention it (full path or file name, as a whole: `a.rs` is not
/// in `test_a.rs`; files it only read do not count); a chunk with one observation gives
/// it every path; a path no observation mentions goes to the first change-like
/// observation (else the first one). So every edit seen lands somewhere.
fn attribute_edits(parsed: &[ParsedObservation], edited: &[String]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); parsed.len()];
    if parsed.is_empty() {
        return out;
    }
    for path in edited {
        let name = path.rsplit('/').next().unwrap_or(path);
        let mut placed = false;
        for (i, o) in parsed.iter().enumerate() {
            let c = &o.content;
            let mentions = parsed.len() == 1
                || [&c.title, &c.subtitle, &c.narrative]
                    .into_iter()
                    .chain(c.facts.iter())
                    .chain(c.files_modified.iter())
                    .any(|t| mentions_file(t, path) || mentions_file(t, name));
            if mentions {
                out[i].push(path.clone());
                placed = true;
            }
        }
        if !placed {
            let target = parsed
                .iter()
                .position(|o| {
                    let (k, _) = memory::observations::normalize_type(&o.kind);
                    matches!(k.as_str(), "change" | "feature" | "bugfix" | "refactor")
                })
                .unwrap_or(0);
            out[target].push(path.clone());
        }
    }
    out
}

/// True when `text` holds `file` (a path or a file name) as a whole: not inside a longer
/// name (`a.rs` in `test_a.rs` or `a.rs.bak`; a path that ends in it, `src/a.rs`, holds
/// it).
fn mentions_file(text: &str, file: &str) -> bool {
    let part = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.');
    !file.is_empty()
        && text.match_indices(file).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + file.len()..].chars().next();
            // A sentence's full stop after the name is not part of it.
            let after_ends = match after {
                Some('.') => text[at + file.len() + 1..]
                    .chars()
                    .next()
                    .is_none_or(|c| !part(c)),
                Some(c) => !part(c),
                None => true,
            };
            !before.is_some_and(part) && after_ends
        })
}

fn to_observation(
    batch: &Batch,
    p: ParsedObservation,
    edited: Vec<String>,
    job_ids: &[i64],
    origin: &str,
    now: i64,
) -> NewObservation {
    let (kind, original_type) = memory::observations::normalize_type(&p.kind);
    let mut content = p.content;
    content.title = prompt::cap(&content.title, 200);
    for f in edited {
        if !content.files_modified.contains(&f) {
            content.files_modified.push(f);
        }
    }
    NewObservation {
        session_id: Some(batch.session_id().to_string()),
        project: batch.project().to_string(),
        prompt_number: Some(batch.prompt_number()),
        kind,
        original_type,
        content,
        source_job_ids: job_ids.to_vec(),
        origin: origin.to_string(),
        // A memory carries the time of what it describes, however late the worker ran.
        created_at: batch.happened_at(job_ids).unwrap_or(now),
    }
}

/// What a summary is built from.
struct TurnContext<'a> {
    project: &'a str,
    request: &'a str,
    observations: &'a [TurnObservation],
    files_read: &'a [String],
    files_edited: &'a [String],
    turn: &'a TurnEnd,
}

fn summarize(c: &mut Caller, ctx: &TurnContext, now: i64) -> Verdict {
    let batch = c.batch;
    if ctx.turn.agent_id.is_some() {
        // A subagent's turn end: its tool calls are already observations, and the turn's
        // summary belongs to the main agent's Stop.
        return Verdict::Store {
            observations: Vec::new(),
            summary: None,
        };
    }
    let (origin, parsed) = if c.provider.is_offline() {
        let titles: Vec<String> = ctx.observations.iter().map(|o| o.title.clone()).collect();
        (
            "offline",
            offline::summary(
                ctx.request,
                &titles,
                ctx.files_read,
                ctx.files_edited,
                &ctx.turn.last_assistant_message,
            ),
        )
    } else {
        let mut shrinks = 0;
        let text = loop {
            let p = prompt::summary_prompt(
                ctx.project,
                ctx.request,
                ctx.observations,
                &ctx.turn.last_assistant_message,
                c.limits,
            );
            match c.call(&batch.ids(), &p) {
                Ok(t) => break t,
                Err(e) if c.shrink(&e, p.chars(), &mut shrinks) => continue,
                Err(e) => return c.failure(e, Kept::default(), now),
            }
        };
        match parse::parse(&text).summary_outcome(&text) {
            SummaryOutcome::Found(s) => ("model", s),
            SummaryOutcome::Empty => {
                c.ledger.set_last_outcome(Outcome::Empty, None);
                return Verdict::Store {
                    observations: Vec::new(),
                    summary: None,
                };
            }
            SummaryOutcome::Unusable(reason) => {
                c.ledger
                    .set_last_outcome(Outcome::Unusable, Some(reason.clone()));
                return Verdict::Fail {
                    error: reason,
                    not_before: None,
                    kept: Kept::default(),
                };
            }
        }
    };
    Verdict::Store {
        observations: Vec::new(),
        summary: Some(Box::new(to_summary(batch, ctx, parsed, origin, now))),
    }
}

fn to_summary(
    batch: &Batch,
    ctx: &TurnContext,
    s: ParsedSummary,
    origin: &str,
    now: i64,
) -> NewSummary {
    NewSummary {
        session_id: batch.session_id().to_string(),
        project: batch.project().to_string(),
        prompt_number: batch.prompt_number(),
        request: if s.request.is_empty() {
            prompt::cap(ctx.request.trim(), 600)
        } else {
            s.request
        },
        investigated: s.investigated,
        learned: s.learned,
        completed: s.completed,
        next_steps: s.next_steps,
        notes: s.notes,
        files_read: ctx.files_read.to_vec(),
        files_edited: ctx.files_edited.to_vec(),
        source_job_ids: batch.ids(),
        origin: origin.to_string(),
        // The turn's end, as the summarize job recorded it.
        created_at: batch.happened_at(&batch.ids()).unwrap_or(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue;
    use crate::queue::claim::{JobKind, Policy};

    fn parsed(kind: &str, title: &str) -> ParsedObservation {
        ParsedObservation {
            kind: kind.into(),
            content: crate::memory::rows::ObservationContent {
                title: title.into(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn edits_are_attributed_to_observations() {
        let edited = vec!["/p/src/a.rs".to_string(), "/p/b.txt".to_string()];
        // One observation gets them all.
        assert_eq!(
            attribute_edits(&[parsed("change", "x")], &edited),
            vec![edited.clone()]
        );
        // Mentioned by name, or else the first change-like observation.
        let obs = [
            parsed("discovery", "Found how a.rs works"),
            parsed("feature", "Something"),
        ];
        assert_eq!(
            attribute_edits(&obs, &edited),
            vec![
                vec!["/p/src/a.rs".to_string()],
                vec!["/p/b.txt".to_string()]
            ]
        );
        assert!(attribute_edits(&[], &edited).is_empty());
        // A name inside a longer one, or a file only read, is not a mention.
        let edited = vec!["/p/src/ratelimit.py".to_string()];
        let mut read_it = parsed("change", "Wrote test_ratelimit.py");
        read_it.content.files_read = edited.clone();
        let obs = [read_it, parsed("change", "Rate limit in ratelimit.py.")];
        assert_eq!(attribute_edits(&obs, &edited), vec![vec![], edited.clone()]);
    }

    #[test]
    fn a_file_is_mentioned_as_a_whole() {
        assert!(mentions_file("Fixed a.rs", "a.rs"));
        assert!(mentions_file("in a.rs.", "a.rs"));
        assert!(mentions_file("(a.rs)", "a.rs"));
        assert!(mentions_file("/p/src/a.rs", "/p/src/a.rs"));
        assert!(!mentions_file("test_a.rs", "a.rs"));
        assert!(!mentions_file("a.rs.bak", "a.rs"));
        assert!(mentions_file("Updated src/a.rs", "a.rs"));
        assert!(!mentions_file("/p/src/a.rs", "src/b.rs"));
        assert!(!mentions_file("data.rsx", "a.rs"));
    }

    fn job(id: i64, kind: JobKind, created_at: i64) -> queue::claim::Job {
        queue::claim::Job {
            id,
            session_id: "s".into(),
            project: "p".into(),
            kind,
            prompt_number: 1,
            payload: "{}".into(),
            attempts: 0,
            created_at,
        }
    }

    #[test]
    fn memories_carry_the_time_of_their_events_not_of_the_worker() {
        const DAY: i64 = 86_400_000;
        let (t1, t2, now) = (
            1_790_000_000_000,
            1_790_000_060_000,
            1_790_000_000_000 + 2 * DAY,
        );
        let batch = Batch {
            worker: "w".into(),
            token: 7,
            lease_until: 0,
            jobs: vec![
                job(1, JobKind::Observation, t1),
                job(2, JobKind::Observation, t2),
            ],
        };
        let first = to_observation(&batch, parsed("change", "a"), vec![], &[1], "model", now);
        assert_eq!(first.created_at, t1);
        let both = to_observation(&batch, parsed("change", "b"), vec![], &[1, 2], "model", now);
        assert_eq!(both.created_at, t2);
        let turn = Batch {
            jobs: vec![job(3, JobKind::Summarize, t2)],
            ..batch
        };
        let ctx = TurnContext {
            project: "p",
            request: "fix it",
            observations: &[],
            files_read: &[],
            files_edited: &[],
            turn: &TurnEnd::default(),
        };
        let s = to_summary(&turn, &ctx, ParsedSummary::default(), "model", now);
        assert_eq!(s.created_at, t2);
    }

    #[test]
    fn a_spent_budget_releases_work_instead_of_calling_the_model() {
        let batch = Batch {
            worker: "w".into(),
            token: 7,
            lease_until: 0,
            jobs: vec![queue::claim::Job {
                id: 1,
                session_id: "s".into(),
                project: "p".into(),
                kind: JobKind::Observation,
                prompt_number: 1,
                payload: "{}".into(),
                attempts: 0,
                created_at: 0,
            }],
        };
        // An unroutable URL: any call would fail, not release.
        let provider = Arc::new(Provider::Anthropic(model::anthropic::Client::new(
            "http://127.0.0.1:9",
            "k",
            "m",
            10,
            Duration::from_secs(1),
        )));
        let (work_tx, work_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        work_tx
            .send(Work {
                batch,
                input: Input::Observations {
                    header: SessionHeader::default(),
                    events: vec![ToolEvent::default()],
                },
                provider,
                limits: Limits::default(),
                retry: RetryPolicy::from_settings(&Default::default()),
                policy: Policy::default(),
            })
            .expect("send");
        drop(work_tx);
        model_thread(work_rx, done_tx, Arc::new(AtomicBool::new(true)));
        let before = now_ms();
        let ToWriter::Done(done) = done_rx.recv().expect("done") else {
            panic!("a call was started");
        };
        assert!(
            matches!(done.result, Verdict::Release { until, .. } if until >= before + BUDGET_RETRY_MS - 60_000),
            "{done:?}"
        );
        assert!(done.calls.is_empty());
    }
}
