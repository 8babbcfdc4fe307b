//! Claiming: the claimer thread. It claims ready batches (`queue::claim::claim_batch`)
//! while a model thread is free and the token budget allows, reads what each batch's
//! prompt needs (the turn's request, recent titles, the turn's observations) and hands it
//! to the model threads as `Work`; it runs housekeeping between claims, reloads settings
//! on request, and on stop waits out the grace period, then releases what is in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, OptionalExtension, params};

use super::housekeeping::Housekeeping;
use super::messages::{Damage, Finished, Input, Work};
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::memory;
use crate::queue;
use crate::queue::claim::{Batch, Fenced, JobKind, Policy};
use crate::queue::payload::{ToolEvent, TurnEnd};
use crate::settings::Settings;
use crate::worker::model::{self, Provider, RetryPolicy};
use crate::worker::prompt::{Limits, SessionHeader, TurnObservation};
use crate::worker::usage;

/// Titles of the session's latest observations shown in a prompt header.
const HEADER_TITLES: usize = 8;
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

pub(super) fn build_provider(settings: &Settings) -> Result<Arc<Provider>> {
    let env = |k: &str| std::env::var(k).ok();
    Provider::from_settings(&settings.model, &env)
        .map(Arc::new)
        .map_err(|e| Error::Settings(e.to_string()))
}

/// The claimer's state.
pub(super) struct Claimer {
    pub(super) conn: Connection,
    pub(super) settings: Settings,
    provider: Arc<Provider>,
    policy: Policy,
    pub(super) opts: Options,
    /// Batches handed to model threads and not yet finished, by claim token.
    inflight: HashMap<i64, Batch>,
    /// Model threads (fixed at start).
    concurrency: usize,
    pub(super) housekeeping: Housekeeping,
    budget_spent: Arc<AtomicBool>,
    budget_logged: bool,
    claimed: u64,
    /// Damage any thread met: the loop stops on it.
    damage: Damage,
}

impl Claimer {
    pub(super) fn new(
        conn: Connection,
        settings: Settings,
        provider: Arc<Provider>,
        opts: Options,
        concurrency: usize,
        housekeeping: Housekeeping,
        budget_spent: Arc<AtomicBool>,
    ) -> Claimer {
        Claimer {
            conn,
            policy: Policy::from_settings(&settings),
            settings,
            provider,
            opts,
            inflight: HashMap::new(),
            concurrency,
            budget_spent,
            budget_logged: false,
            claimed: 0,
            damage: housekeeping.damage(),
            housekeeping,
        }
    }

    pub(super) fn run_loop(
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
            self.housekeeping.run(
                &mut self.conn,
                &self.settings,
                &self.opts.worker_id,
                &self.policy,
                &mut self.inflight,
                now,
            );
            if control.stop.load(Ordering::SeqCst) {
                log::info!("stop requested: no more claims");
                return Ok(());
            }
            if self.housekeeping.replaced() {
                log::warn!("stopping to reopen the database");
                return Ok(());
            }
            let path = std::path::PathBuf::from(self.conn.path().unwrap_or_default());
            if let Some(e) = self.damage.error(&path) {
                log::error!("stopping to recover the damaged database");
                return Err(e);
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
            Err(e) if self.damage.note(&e) => return Err(e),
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

    fn reload(&mut self, reload: &dyn Fn() -> Result<Settings>) {
        match reload().and_then(|s| build_provider(&s).map(|p| (s, p))) {
            Ok((s, p)) => {
                if s.worker.concurrency != self.settings.worker.concurrency {
                    log::warn!("worker.concurrency changes take effect at the next start");
                }
                log::info!("settings reloaded: provider {} ({})", p.name(), p.model());
                if let Err(e) = crate::queue::workers::uses(
                    &mut self.conn,
                    &self.opts.worker_id,
                    (p.name(), p.model()),
                ) {
                    log::warn!("cannot record the provider in use: {e}");
                }
                self.policy = Policy::from_settings(&s);
                self.provider = p;
                self.settings = s;
                self.housekeeping.run_next_turn();
            }
            Err(e) => log::error!("settings not reloaded, keeping the old ones: {e}"),
        }
    }

    /// Waits up to the grace period for batches in flight, then releases the rest.
    /// Returns how many were released.
    pub(super) fn shutdown(&mut self, fin_rx: &Receiver<Finished>, control: &Control) -> usize {
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
                    if self.housekeeping.due(&self.settings, now) {
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

    pub(super) fn provider_cleanup(&self) {
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
