//! The worker pipeline: a claimer, `worker.concurrency` model threads and a single writer,
//! joined by crossbeam channels.
//!
//! ```text
//! claimer (this thread) ── Work ──► model threads ── Done ──► writer ── Finished ──► claimer
//!   claim_batch, read context        build prompts, call      ack + results + model_calls
//!   heartbeat, rescue, housekeeping  the provider, parse      in one transaction, or fail
//!                                    ── Started ──► writer: a call's row, before the call
//! ```
//!
//! Invariants:
//! - no transaction is held across a model call: the claimer reads, the model threads touch
//!   no database, the writer writes (a call's `started` row too, before the call is made);
//! - results are stored only through `queue::claim::ack`'s closure, so a batch whose lease was
//!   lost stores nothing, and a replayed batch stores no duplicate (content hashes);
//! - a split batch keeps what succeeded: the chunks before a failed one are acked with
//!   their results, the rest failed or released in the same transaction;
//! - a context-length error is not an attempt: the rest of the batch is split smaller and
//!   called again at once, and the size is remembered for the provider and model;
//! - a rate limit's `Retry-After` is waited out in the queue, without counting an attempt;
//! - one in-flight batch per session (the queue's rule), so a turn's summary is built after
//!   its observations are stored;
//! - on stop (SIGTERM/SIGINT) the claimer claims nothing more, waits up to
//!   `worker.shutdown_grace_secs` for batches in flight, then releases the rest without
//!   counting an attempt and kills any `claude` process group still running.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, OptionalExtension, params};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::memory;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::queue;
use crate::queue::claim::{Batch, Fenced, JobKind, Policy, RescueScope};
use crate::queue::payload::{ToolEvent, TurnEnd};
use crate::queue::workers;
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;
use crate::worker::model::{self, ModelError, Provider, RetryPolicy};
use crate::worker::offline;
use crate::worker::parse::{
    self, ObservationsOutcome, ParsedObservation, ParsedSummary, SummaryOutcome,
};
use crate::worker::prompt::{self, Limits, Prompt, SessionHeader, TurnObservation};
use crate::worker::usage::{self, Call, CallRecord, Outcome};

/// Titles of the session's latest observations shown in a prompt header.
const HEADER_TITLES: usize = 8;
/// How long a batch released for the spent token budget waits at most before it is
/// looked at again.
const BUDGET_RETRY_MS: i64 = 10 * 60 * 1000;
/// How often done jobs are purged and the periodic hook runs.
const SLOW_HOUSEKEEPING_MS: i64 = 60 * 60 * 1000;
/// How often finished sessions' transcripts are compared with what was captured.
const RECONCILE_EVERY_MS: i64 = 5 * 60 * 1000;
/// Sessions compared per pass (each reads one transcript).
const RECONCILE_PER_PASS: usize = 20;

/// How this worker runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Names this worker in claims and in the `workers` table.
    pub worker_id: String,
    /// Drain what is ready, then return.
    pub once: bool,
    /// Return after this long with nothing to do (workers started on demand by a hook).
    pub idle_exit: Option<Duration>,
}

/// Flags set from outside (the binary's signal handlers).
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// Stop claiming and shut down.
    pub stop: Arc<AtomicBool>,
    /// Reload settings.
    pub reload: Arc<AtomicBool>,
    /// A second stop request: release the batches in flight now and return, without
    /// waiting out the grace period (so no attempt is lost to a lease left behind).
    pub urgent: Arc<AtomicBool>,
}

/// Periodic work the binary adds to housekeeping (log pruning): called with the current
/// settings and `now`.
pub type Periodic = Box<dyn FnMut(&Settings, i64) + Send>;

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

/// A worker id: `<hostname or "local">:<pid>:<start ms>`.
pub fn worker_id(now: i64) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "local".into());
    format!("{host}:{}:{now}", std::process::id())
}

/// Everything a model thread needs for one batch.
#[derive(Debug)]
struct Work {
    batch: Batch,
    input: Input,
    provider: Arc<Provider>,
    /// `model.*` limits, with `max_prompt_chars` lowered to what this provider's model is
    /// known to take (`usage::prompt_limit`).
    limits: Limits,
    retry: RetryPolicy,
    policy: Policy,
}

#[derive(Debug)]
enum Input {
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
struct Done {
    batch: Batch,
    policy: Policy,
    result: Verdict,
    calls: Vec<Call>,
    /// A smaller `max_prompt_chars` this batch found the model needs (it rejected a
    /// larger prompt as too long for its context).
    learned_limit: Option<usize>,
}

#[derive(Debug)]
enum Verdict {
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
struct Kept {
    job_ids: Vec<i64>,
    observations: Vec<NewObservation>,
}

/// What model threads send the writer.
#[derive(Debug)]
enum ToWriter {
    /// A call is about to be made: write its `started` row and answer with its id.
    Started(Box<CallRecord>, Sender<Option<i64>>),
    /// A batch is finished.
    Done(Box<Done>),
}

/// What the writer tells the claimer.
#[derive(Debug)]
struct Finished {
    token: i64,
}

/// Runs the worker until stopped (or, with `once`, until nothing is ready; with
/// `idle_exit`, until idle that long). The caller holds the worker lock.
/// `reload` loads fresh settings on SIGHUP; `periodic` runs in housekeeping.
pub fn run(
    dir: &DataDir,
    settings: Settings,
    reload: &dyn Fn() -> Result<Settings>,
    opts: Options,
    control: Control,
    periodic: Option<Periodic>,
) -> Result<Report> {
    let provider = build_provider(&settings)?;
    let concurrency = provider.concurrency(settings.worker.concurrency).max(1) as usize;
    log::info!(
        "worker {} starting: provider {} ({}), concurrency {}{}",
        opts.worker_id,
        provider.name(),
        provider.model(),
        concurrency,
        if settings.worker.concurrency == 0 && provider.is_local() {
            " (a model server on this machine: one call at a time; set worker.concurrency to change it)"
        } else {
            ""
        }
    );
    let mut conn = db::open_data_dir(dir, db::OpenOptions::default())?;
    let db_identity = file_identity(&dir.db());
    // Room to count hook events lost to a full disk, allocated while there is room.
    if let Err(e) = crate::store::incidents::prepare_lost(dir) {
        log::warn!("{e}");
    }
    let writer_conn = db::open_data_dir(dir, db::OpenOptions::default())?;
    let now = now_ms();
    let uses = (provider.name(), provider.model());
    workers::register(&mut conn, &opts.worker_id, std::process::id(), uses, now)?;
    // We hold the single-instance lock: every claim not ours belongs to a dead worker.
    let max_attempts = Policy::from_settings(&settings).max_attempts;
    queue::claim::rescue(
        &mut conn,
        RescueScope::AllBut(&opts.worker_id),
        max_attempts,
        now,
    )?;

    let budget_spent = Arc::new(AtomicBool::new(false));
    let (work_tx, work_rx) = crossbeam_channel::bounded::<Work>(concurrency);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<ToWriter>();
    let (fin_tx, fin_rx) = crossbeam_channel::unbounded::<Finished>();

    let mut model_threads = Vec::new();
    for i in 0..concurrency {
        let rx = work_rx.clone();
        let tx = done_tx.clone();
        let spent = budget_spent.clone();
        model_threads.push(
            std::thread::Builder::new()
                .name(format!("model-{i}"))
                .spawn(move || model_thread(rx, tx, spent))
                .map_err(|e| Error::io("cannot start thread", "model", e))?,
        );
    }
    drop(work_rx);
    drop(done_tx);
    let writer = std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || writer_thread(writer_conn, done_rx, fin_tx))
        .map_err(|e| Error::io("cannot start thread", "writer", e))?;

    // Beside the model threads; with `--once`, after them (it drains what they stored).
    // It has a stop flag of its own: this run may end without the process ending (the
    // database was replaced and is opened again).
    let embed_stop = Arc::new(AtomicBool::new(false));
    let embedder = match opts.once {
        false => Some(super::embedder::spawn(
            dir,
            &settings,
            [embed_stop.clone(), control.stop.clone()],
            false,
        )?),
        true => None,
    };

    let mut claimer = Claimer {
        dir: dir.clone(),
        conn,
        settings,
        provider,
        policy: Policy::default(),
        opts,
        inflight: HashMap::new(),
        concurrency,
        periodic,
        next_housekeeping: 0,
        next_slow_housekeeping: 0,
        next_reconcile: 0,
        projects_dir: crate::capture::transcript::projects_dir(),
        budget_spent,
        budget_logged: false,
        claimed: 0,
        db_identity,
        replaced: false,
    };
    claimer.policy = Policy::from_settings(&claimer.settings);
    let outcome = claimer.run_loop(&work_tx, &fin_rx, &control, reload);
    let leftover = claimer.shutdown(&fin_rx, &control);
    drop(work_tx);
    claimer.provider_cleanup();
    if leftover == 0 {
        for t in model_threads {
            let _ = t.join();
        }
    }
    // The writer ends when every model thread has; a thread stuck in a call past the
    // grace period is left to die with the process (its batch was released).
    let report = if leftover == 0 {
        writer.join().unwrap_or_default()
    } else {
        Report::default()
    };
    match embedder {
        Some(thread) => {
            embed_stop.store(true, Ordering::SeqCst);
            let _ = thread.join();
        }
        None if outcome.is_ok() => {
            let stops = [embed_stop, control.stop.clone()];
            let _ = super::embedder::spawn(dir, &claimer.settings, stops, true)?.join();
        }
        None => {}
    }
    let now = now_ms();
    if let Err(e) = workers::stopped(&mut claimer.conn, &claimer.opts.worker_id, now) {
        log::warn!("cannot record the worker's stop: {e}");
    }
    outcome?;
    log::info!(
        "worker {} stopped: {} batches done, {} failed, {} released",
        claimer.opts.worker_id,
        report.batches_done,
        report.batches_failed,
        report.batches_released + leftover as u64
    );
    Ok(Report {
        batches_released: report.batches_released + leftover as u64,
        reopen: claimer.replaced,
        ..report
    })
}

/// The (device, inode) of a file: changes when the file is deleted and created again, or
/// replaced by a rename.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn build_provider(settings: &Settings) -> Result<Arc<Provider>> {
    let env = |k: &str| std::env::var(k).ok();
    Provider::from_settings(&settings.model, &env)
        .map(Arc::new)
        .map_err(|e| Error::Settings(e.to_string()))
}

/// The claimer's state.
struct Claimer {
    /// The data dir (for housekeeping tasks that need its files: spool, backups).
    dir: DataDir,
    conn: Connection,
    settings: Settings,
    provider: Arc<Provider>,
    policy: Policy,
    opts: Options,
    /// Batches handed to model threads and not yet finished, by claim token.
    inflight: HashMap<i64, Batch>,
    /// Model threads (fixed at start).
    concurrency: usize,
    periodic: Option<Periodic>,
    next_housekeeping: i64,
    next_slow_housekeeping: i64,
    next_reconcile: i64,
    /// Claude Code's projects folder, where reconciliation finds transcripts.
    projects_dir: Option<std::path::PathBuf>,
    budget_spent: Arc<AtomicBool>,
    budget_logged: bool,
    claimed: u64,
    /// The database file's identity when the worker opened it.
    db_identity: Option<(u64, u64)>,
    /// Set when the file at the database path is no longer the one open.
    replaced: bool,
}

impl Claimer {
    fn run_loop(
        &mut self,
        work_tx: &Sender<Work>,
        fin_rx: &Receiver<Finished>,
        control: &Control,
        reload: &dyn Fn() -> Result<Settings>,
    ) -> Result<()> {
        let concurrency = self.concurrency;
        let mut last_activity = Instant::now();
        loop {
            while let Ok(f) = fin_rx.try_recv() {
                self.inflight.remove(&f.token);
                last_activity = Instant::now();
            }
            if control.reload.swap(false, Ordering::SeqCst) {
                self.reload(reload);
            }
            let now = now_ms();
            if now >= self.next_housekeeping {
                self.housekeeping(now);
            }
            if control.stop.load(Ordering::SeqCst) {
                log::info!("stop requested: no more claims");
                return Ok(());
            }
            if self.replaced {
                log::warn!("stopping to reopen the database");
                return Ok(());
            }
            let mut claimed = false;
            if self.inflight.len() < concurrency && !self.budget_exhausted(now)? {
                match queue::claim::claim_batch(
                    &mut self.conn,
                    &self.opts.worker_id,
                    &self.policy,
                    now,
                ) {
                    Ok(Some(batch)) => {
                        claimed = true;
                        last_activity = Instant::now();
                        self.dispatch(batch, work_tx, now)?;
                    }
                    Ok(None) => {}
                    Err(e) if e.is_busy() => log::warn!("claim skipped: {e}"),
                    Err(e) => return Err(e),
                }
            }
            if claimed {
                continue;
            }
            if self.inflight.is_empty() {
                if self.opts.once {
                    log::info!("nothing more is ready (--once): exiting");
                    return Ok(());
                }
                if let Some(idle) = self.opts.idle_exit
                    && last_activity.elapsed() >= idle
                {
                    log::info!("idle for {}s: exiting", idle.as_secs());
                    return Ok(());
                }
            }
            let wait = Duration::from_millis(self.settings.worker.poll_ms.clamp(10, 60_000));
            match fin_rx.recv_timeout(wait) {
                Ok(f) => {
                    self.inflight.remove(&f.token);
                    last_activity = Instant::now();
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Invalid("the writer thread stopped".into()));
                }
            }
        }
    }

    /// True when the daily token budget is spent; logs the reason once per episode.
    fn budget_exhausted(&mut self, now: i64) -> Result<bool> {
        let limit = self.settings.model.daily_token_budget;
        if limit == 0 || self.provider.is_offline() {
            self.budget_spent.store(false, Ordering::SeqCst);
            return Ok(false);
        }
        let b = usage::budget(&self.conn, limit, now)?;
        let spent = b.exhausted();
        self.budget_spent.store(spent, Ordering::SeqCst);
        if spent && !self.budget_logged {
            log::warn!(
                "daily token budget spent ({} of {} tokens): jobs wait until {}",
                b.spent,
                b.limit,
                crate::clock::iso_utc(b.resets_at)
            );
        } else if !spent && self.budget_logged {
            log::info!("daily token budget available again: resuming");
        }
        self.budget_logged = spent;
        Ok(spent)
    }

    /// Reads what the batch's prompt needs and hands it to a model thread.
    fn dispatch(&mut self, batch: Batch, work_tx: &Sender<Work>, now: i64) -> Result<()> {
        self.claimed += 1;
        log::debug!(
            "claimed {} {} job(s) {:?} of session {}",
            batch.jobs.len(),
            batch.kind().as_str(),
            batch.ids(),
            batch.session_id()
        );
        let input = match self.prepare(&batch) {
            Ok(input) => input,
            Err(e) => {
                let msg = format!("cannot prepare the batch: {e}");
                log::warn!("{msg}");
                queue::claim::fail(&mut self.conn, &batch, &msg, &self.policy, now, None)?;
                return Ok(());
            }
        };
        self.inflight.insert(batch.token, batch.clone());
        let mut limits = Limits::from_settings(&self.settings.model);
        if let Some(known) =
            usage::prompt_limit(&self.conn, self.provider.name(), self.provider.model())?
        {
            limits.max_prompt_chars = limits.max_prompt_chars.min(known);
        }
        let work = Work {
            batch,
            input,
            provider: self.provider.clone(),
            limits,
            retry: RetryPolicy::from_settings(&self.settings.model),
            policy: self.policy,
        };
        work_tx
            .send(work)
            .map_err(|_| Error::Invalid("the model threads stopped".into()))
    }

    fn prepare(&self, batch: &Batch) -> Result<Input> {
        let request = prompt_text(&self.conn, batch.session_id(), batch.prompt_number())?;
        match batch.kind() {
            JobKind::Observation => {
                let events = batch
                    .jobs
                    .iter()
                    .map(|j| {
                        serde_json::from_str::<ToolEvent>(&j.payload).map_err(|e| {
                            Error::Invalid(format!("job {} has an unreadable payload: {e}", j.id))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let header = SessionHeader {
                    project: batch.project().to_string(),
                    request,
                    recent_titles: memory::observations::recent_titles(
                        &self.conn,
                        batch.session_id(),
                        HEADER_TITLES,
                    )?,
                };
                Ok(Input::Observations { header, events })
            }
            JobKind::Summarize => {
                let turn: TurnEnd = serde_json::from_str(&batch.jobs[0].payload).map_err(|e| {
                    Error::Invalid(format!(
                        "job {} has an unreadable payload: {e}",
                        batch.jobs[0].id
                    ))
                })?;
                let (observations, files_read, files_edited) =
                    turn_observations(&self.conn, batch.session_id(), batch.prompt_number())?;
                Ok(Input::Summary {
                    project: batch.project().to_string(),
                    request,
                    observations,
                    files_read,
                    files_edited,
                    turn,
                })
            }
        }
    }

    /// Periodic tasks, every `worker.heartbeat_secs` (and first thing at start): the
    /// worker's heartbeat, lease renewal of batches in flight, rescue of expired leases,
    /// ingestion of events hooks spooled; every 5 minutes (and at start): reconciliation of
    /// finished sessions with their transcripts; hourly: purge of old done jobs, the daily backup
    /// and the binary's periodic hook (log pruning).
    fn housekeeping(&mut self, now: i64) {
        log::trace!("housekeeping in {}", self.dir.root().display());
        let period = (self.settings.worker.heartbeat_secs.max(1) * 1000) as i64;
        self.next_housekeeping = now + period;
        if self.check_replaced(now) {
            return;
        }
        if let Err(e) = workers::heartbeat(&mut self.conn, &self.opts.worker_id, now) {
            log::warn!("heartbeat failed: {e}");
        }
        let mut lost = Vec::new();
        for (token, batch) in self.inflight.iter_mut() {
            match queue::claim::heartbeat(&mut self.conn, batch, &self.policy, now) {
                Ok(Fenced::Done) => {}
                Ok(Fenced::LeaseLost) => lost.push(*token),
                Err(e) => log::warn!("lease renewal of jobs {:?} failed: {e}", batch.ids()),
            }
        }
        for token in lost {
            // Usually the writer finished it a moment ago; otherwise its lease expired and
            // the ack will be refused (fenced), storing nothing.
            log::debug!("batch {token} is no longer held by this worker");
        }
        let max_attempts = self.policy.max_attempts;
        if let Err(e) =
            queue::claim::rescue(&mut self.conn, RescueScope::Expired, max_attempts, now)
        {
            log::warn!("rescue failed: {e}");
        }
        match super::ingest::ingest(&self.dir, &mut self.conn, &self.settings, now) {
            Ok(0) => {}
            Ok(n) => log::info!("ingested {n} spooled hook events"),
            Err(e) => log::warn!("spool ingestion failed (the files stay for the next try): {e}"),
        }
        if now >= self.next_reconcile {
            self.next_reconcile = now + RECONCILE_EVERY_MS;
            if let Some(projects) = self.projects_dir.as_deref() {
                match crate::capture::transcript::reconcile(
                    &mut self.conn,
                    &self.settings,
                    projects,
                    now,
                    RECONCILE_PER_PASS,
                ) {
                    Ok(r) if r.recovered > 0 => log::warn!(
                        "reconciliation recovered {} events the hooks missed in {} sessions",
                        r.recovered,
                        r.sessions
                    ),
                    Ok(_) => {}
                    Err(e) => log::warn!("transcript reconciliation failed: {e}"),
                }
            }
        }
        if now >= self.next_slow_housekeeping {
            self.next_slow_housekeeping = now + SLOW_HOUSEKEEPING_MS;
            let keep_ms = (self.settings.queue.retention_days as i64).saturating_mul(86_400_000);
            match queue::admin::purge(&mut self.conn, now.saturating_sub(keep_ms)) {
                Ok(0) => {}
                Ok(n) => log::info!(
                    "purged {n} done jobs older than {} days",
                    self.settings.queue.retention_days
                ),
                Err(e) => log::warn!("purge failed: {e}"),
            }
            if self.settings.backup.daily {
                match crate::store::backup::daily(
                    &self.dir,
                    &self.conn,
                    self.settings.backup.keep,
                    now,
                ) {
                    Ok(Some(path)) => log::info!("daily backup written to {}", path.display()),
                    Ok(None) => {}
                    Err(e) => log::warn!("daily backup failed: {e}"),
                }
            }
            if let Some(p) = self.periodic.as_mut() {
                p(&self.settings, now);
            }
        }
    }

    /// True when the database file was deleted or replaced under the worker (its identity
    /// changed): what the open file holds is copied to `backups/` (the deletion may have
    /// been a mistake), a notice says so in `cairn status`, and the worker stops to be run
    /// again on the file now at the path (`Report::reopen`).
    fn check_replaced(&mut self, now: i64) -> bool {
        let path = self.dir.db();
        let current = file_identity(&path);
        if current == self.db_identity || self.replaced {
            return self.replaced;
        }
        self.replaced = true;
        let what = if current.is_none() {
            "deleted"
        } else {
            "replaced"
        };
        let stamp: String = crate::clock::iso_utc(now)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let kept = self.dir.backups().join(format!("cairn-{what}-{stamp}.db"));
        let kept_note = match self
            .dir
            .ensure_sub(&self.dir.backups())
            .and_then(|()| crate::store::backup::online(&self.conn, &kept))
        {
            Ok(info) => format!(
                "what the old file held is kept at {} (`cairn restore` it if that was a mistake)",
                info.path.display()
            ),
            Err(e) => format!("the old file could not be kept ({e})"),
        };
        let message = format!(
            "the database {} was {what} while the worker ran; the worker reopened it; {kept_note}",
            path.display()
        );
        log::error!("{message}");
        if let Err(e) = crate::store::incidents::raise(&self.dir, what, &message, now) {
            log::error!("cannot record the notice for `cairn status`: {e}");
        }
        true
    }

    fn reload(&mut self, reload: &dyn Fn() -> Result<Settings>) {
        match reload().and_then(|s| build_provider(&s).map(|p| (s, p))) {
            Ok((s, p)) => {
                if s.worker.concurrency != self.settings.worker.concurrency {
                    log::warn!("worker.concurrency changes take effect at the next start");
                }
                log::info!("settings reloaded: provider {} ({})", p.name(), p.model());
                if let Err(e) =
                    workers::uses(&mut self.conn, &self.opts.worker_id, (p.name(), p.model()))
                {
                    log::warn!("cannot record the provider in use: {e}");
                }
                self.policy = Policy::from_settings(&s);
                self.provider = p;
                self.settings = s;
                self.next_housekeeping = 0;
            }
            Err(e) => log::error!("settings not reloaded, keeping the old ones: {e}"),
        }
    }

    /// Waits up to the grace period for batches in flight, then releases the rest.
    /// Returns how many were released.
    fn shutdown(&mut self, fin_rx: &Receiver<Finished>, control: &Control) -> usize {
        let grace = Duration::from_secs(self.settings.worker.shutdown_grace_secs);
        let deadline = Instant::now() + grace;
        while !self.inflight.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if control.urgent.load(Ordering::SeqCst) {
                log::warn!("second stop request: releasing the batches in flight now");
                break;
            }
            match fin_rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(f) => {
                    self.inflight.remove(&f.token);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = now_ms();
                    if now >= self.next_housekeeping {
                        self.next_housekeeping =
                            now + (self.settings.worker.heartbeat_secs.max(1) * 1000) as i64;
                        for batch in self.inflight.values_mut() {
                            let _ =
                                queue::claim::heartbeat(&mut self.conn, batch, &self.policy, now);
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let mut released = 0;
        let now = now_ms();
        for batch in std::mem::take(&mut self.inflight).into_values() {
            match queue::claim::release(&mut self.conn, &batch, now, now) {
                Ok(Fenced::Done) => {
                    released += 1;
                    log::warn!(
                        "released jobs {:?}: still in flight after the {}s grace period",
                        batch.ids(),
                        grace.as_secs()
                    );
                }
                Ok(Fenced::LeaseLost) => {}
                Err(e) => log::error!("cannot release jobs {:?}: {e}", batch.ids()),
            }
        }
        released
    }

    fn provider_cleanup(&self) {
        model::claude_cli::kill_all();
    }
}

/// The user's prompt text of a turn ('' when not recorded).
fn prompt_text(conn: &Connection, session_id: &str, prompt_number: i64) -> Result<String> {
    Ok(conn
        .prepare_cached(
            "SELECT prompt_text FROM user_prompts WHERE session_id = ?1 AND prompt_number = ?2",
        )?
        .query_row(params![session_id, prompt_number], |r| r.get(0))
        .optional()?
        .unwrap_or_default())
}

/// This turn's observations, and the files they read and modified.
fn turn_observations(
    conn: &Connection,
    session_id: &str,
    prompt_number: i64,
) -> Result<(Vec<TurnObservation>, Vec<String>, Vec<String>)> {
    let mut stmt = conn.prepare_cached(
        "SELECT type, title, subtitle, files_read, files_modified FROM observations
         WHERE session_id = ?1 AND prompt_number = ?2 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![session_id, prompt_number], |r| {
        Ok((
            TurnObservation {
                kind: r.get(0)?,
                title: r.get(1)?,
                subtitle: r.get(2)?,
            },
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut obs = Vec::new();
    let mut read = Vec::new();
    let mut edited = Vec::new();
    for row in rows {
        let (o, r, m) = row?;
        obs.push(o);
        for (json, into) in [(r, &mut read), (m, &mut edited)] {
            for f in serde_json::from_str::<Vec<String>>(&json).unwrap_or_default() {
                if !into.contains(&f) {
                    into.push(f);
                }
            }
        }
    }
    Ok((obs, read, edited))
}

fn model_thread(rx: Receiver<Work>, tx: Sender<ToWriter>, budget_spent: Arc<AtomicBool>) {
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
/// the observations that mention it (full path or file name); a chunk with one
/// observation gives it every path; a path no observation mentions goes to the first
/// change-like observation (else the first one). So every edit seen lands somewhere.
fn attribute_edits(parsed: &[ParsedObservation], edited: &[String]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); parsed.len()];
    if parsed.is_empty() {
        return out;
    }
    for path in edited {
        let name = path.rsplit('/').next().unwrap_or(path);
        let mut placed = false;
        for (i, o) in parsed.iter().enumerate() {
            let mentions = parsed.len() == 1
                || [&o.title, &o.subtitle, &o.narrative]
                    .into_iter()
                    .chain(o.facts.iter())
                    .chain(o.files_modified.iter())
                    .chain(o.files_read.iter())
                    .any(|t| t.contains(path.as_str()) || (!name.is_empty() && t.contains(name)));
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

fn to_observation(
    batch: &Batch,
    p: ParsedObservation,
    edited: Vec<String>,
    job_ids: &[i64],
    origin: &str,
    now: i64,
) -> NewObservation {
    let (kind, original_type) = memory::observations::normalize_type(&p.kind);
    let mut files_modified = p.files_modified;
    for f in edited {
        if !files_modified.contains(&f) {
            files_modified.push(f);
        }
    }
    NewObservation {
        session_id: Some(batch.session_id().to_string()),
        project: batch.project().to_string(),
        prompt_number: Some(batch.prompt_number()),
        kind,
        original_type,
        title: prompt::cap(&p.title, 200),
        subtitle: p.subtitle,
        narrative: p.narrative,
        facts: p.facts,
        concepts: p.concepts,
        files_read: p.files_read,
        files_modified,
        source_job_ids: job_ids.to_vec(),
        origin: origin.to_string(),
        created_at: now,
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
        created_at: now,
    }
}

fn writer_thread(mut conn: Connection, rx: Receiver<ToWriter>, fin: Sender<Finished>) -> Report {
    let mut report = Report::default();
    for msg in rx {
        match msg {
            ToWriter::Started(record, reply) => {
                let id = match db::write(&mut conn, |tx| usage::start(tx, &record)) {
                    Ok(id) => Some(id),
                    Err(e) => {
                        log::warn!("cannot record a model call before making it: {e}");
                        None
                    }
                };
                let _ = reply.send(id);
            }
            ToWriter::Done(done) => {
                let token = done.batch.token;
                if let Err(e) = write_done(&mut conn, *done, &mut report) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(kind: &str, title: &str) -> ParsedObservation {
        ParsedObservation {
            kind: kind.into(),
            title: title.into(),
            ..Default::default()
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

    #[test]
    fn worker_ids_name_host_pid_and_start() {
        let id = worker_id(42);
        let parts: Vec<&str> = id.rsplitn(3, ':').collect();
        assert_eq!(parts[0], "42");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(!parts[2].is_empty());
    }
}
