//! `cairn status`: the health of one data dir gathered into one serializable report, and
//! the rule that decides whether it needs attention. Reads only.

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Result;
use crate::ops::liveness::{last_heartbeat, wedged_after_ms};
use crate::queue;
use crate::queue::claim::JobStatus;
use crate::settings::Settings;
use crate::store::lock::process_stopped;
use crate::store::paths::DataDir;
use crate::text::plural;

/// Quarantined hook inputs need attention for this long (7 days); older ones are only
/// counted, so that `cairn status` can become healthy again without deleting evidence.
pub const QUARANTINE_WINDOW_MS: i64 = 7 * 86_400_000;

/// A ready job while the running worker has taken no job this long needs attention (the
/// worker runs but does not work).
pub const OVERDUE_MS: i64 = 5 * 60_000;

/// Model calls looked at for failures: the latest this many of the last hour.
pub const RECENT_CALLS: i64 = 20;

/// A call still `started` this long after it began never completed (its worker died or
/// hung in it).
pub const UNFINISHED_AFTER_MS: i64 = 10 * 60_000;

/// The worker as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStatus {
    /// True when a process holds the worker lock.
    pub running: bool,
    pub pid: Option<u32>,
    pub started_at: Option<i64>,
    pub uptime_ms: Option<i64>,
    /// The latest heartbeat any worker recorded.
    pub last_heartbeat_at: Option<i64>,
    pub heartbeat_age_ms: Option<i64>,
    /// `worker.heartbeat_secs` in ms.
    pub heartbeat_period_ms: i64,
    /// The process holding the lock is stopped (SIGSTOP, a debugger): it cannot work.
    pub process_stopped: bool,
    /// The model provider and model the running (else the latest) worker uses, as it
    /// recorded them.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Why the latest worker stopped on an error, when no worker has started since.
    pub failure: Option<crate::store::incidents::WorkerFailure>,
    /// `worker.autostart`: a hook starts a worker when none runs.
    pub autostart: bool,
    /// When a worker last took, finished or retried a job (`None`: never); now while one
    /// holds a batch.
    pub last_worked_at: Option<i64>,
}

impl WorkerStatus {
    /// Holds the lock but has not heartbeaten for
    /// [`WEDGED_AFTER_PERIODS`](crate::ops::liveness::WEDGED_AFTER_PERIODS) periods (since
    /// its start when it recorded none), or its process is stopped.
    pub fn wedged(&self) -> bool {
        let limit = wedged_after_ms(self.heartbeat_period_ms);
        self.running
            && (self.process_stopped
                || self
                    .heartbeat_age_ms
                    .or(self.uptime_ms)
                    .is_some_and(|age| age > limit))
    }
}

/// The recent model calls, to tell a provider that fails from one that works.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecentCalls {
    /// Calls looked at: the latest [`RECENT_CALLS`] of the last hour, except those still
    /// in progress and those that found the provider not logged in (reported apart).
    pub calls: i64,
    /// Of those, failed (an error or an unusable reply) or never completed.
    pub failed: i64,
    /// The latest failure: provider, model, error and time.
    pub latest_failure: Option<CallFailure>,
}

/// One failed model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallFailure {
    pub provider: String,
    pub model: String,
    pub error: String,
    pub at: i64,
}

impl RecentCalls {
    /// Most of at least three recent calls failed.
    pub fn failing(&self) -> bool {
        self.calls >= 3 && self.failed * 2 > self.calls
    }
}

/// The pending job due first, and why it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextDue {
    pub job_id: i64,
    #[serde(flatten)]
    pub wait: queue::stats::Wait,
    /// When it is (or was) due. A job imported from an old transcript was due when its
    /// events happened, days before it was queued.
    pub due_at: i64,
}

/// One quarantined hook input (its raw bytes are not shown here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuarantineRow {
    pub id: i64,
    pub event: Option<String>,
    pub reason: String,
    pub raw_len: i64,
    pub created_at: i64,
}

/// Counts of stored memories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryCounts {
    pub sessions: i64,
    pub prompts: i64,
    pub observations: i64,
    pub summaries: i64,
}

/// Everything `cairn status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub data_dir: String,
    pub now: i64,
    pub worker: WorkerStatus,
    pub queue: queue::stats::Stats,
    /// Hook inputs quarantined, ever.
    pub quarantined: i64,
    /// Unreadable hook inputs quarantined in the last [`QUARANTINE_WINDOW_MS`]; these need
    /// attention (well-formed events cairn does not capture are kept too, but are harmless).
    pub quarantined_recently: i64,
    /// The latest quarantined inputs (up to 5), newest first.
    pub recent_quarantine: Vec<QuarantineRow>,
    /// Input plus output tokens of model calls since UTC midnight.
    pub tokens_today: i64,
    /// Model calls of the last 24 hours per provider and model: calls, tokens as the
    /// providers reported them (estimates counted as such), failures, calls never
    /// completed.
    pub model_calls_last_day: Vec<crate::worker::usage::ProviderTotals>,
    /// `model.daily_token_budget`; 0 is no limit.
    pub daily_token_budget: u64,
    /// When the budget is spent: the time (ms) it renews; jobs wait until then.
    pub budget_spent_until: Option<i64>,
    pub memories: MemoryCounts,
    /// The database file plus its WAL, in bytes.
    pub database_bytes: u64,
    /// Hook events waiting in the spool for the worker.
    pub spooled: usize,
    /// Hook events kept outside the data dir because it could not take them (a read-only
    /// or failing disk), waiting for the worker once it can (`store::fallback`).
    pub spooled_outside: usize,
    /// Where those are kept, when there are any.
    pub outside_dir: Option<String>,
    /// Why the database or the data dir cannot be written, when it cannot (`cairn status`
    /// then reads it read-only).
    pub read_only: Option<String>,
    /// Why `settings.json` cannot be read, when it cannot (events wait in the spool).
    pub settings_error: Option<String>,
    /// Hook events that neither the database nor the spool could keep.
    pub lost: Option<crate::store::incidents::Lost>,
    /// Repairs cairn made on its own, not yet acknowledged.
    pub notices: Vec<crate::store::incidents::Notice>,
    /// Search by meaning: the model, or why there is none, and how far embedding has come.
    pub search: SearchStatus,
    /// The model provider is not logged in (its latest call said so): jobs wait.
    pub not_logged_in: Option<crate::worker::usage::NotLoggedIn>,
    /// How the recent model calls went.
    pub recent_calls: RecentCalls,
    /// The pending job due first, and why it waits.
    pub next_due: Option<NextDue>,
    /// Events the hooks missed that reconciliation recovered from the sessions'
    /// transcripts in the last 7 days (a hook is failing, or was not installed).
    pub recovered_last_week: i64,
    /// Memories given to sessions in the last 7 days, per moment (SessionStart index,
    /// prompts, files), with their tokens (`memory::told`).
    pub given_last_week: Vec<crate::memory::told::Totals>,
    /// This device's sync space, as the worker (or `cairn sync`) last recorded it; `None`
    /// when it is in none. Read from the local store only: no connection to the server.
    pub sync: Option<crate::sync::Status>,
    /// Why this device's sync setup (`sync.url`, `sync.key`) cannot be read, with the fix.
    pub sync_unreadable: Option<String>,
    /// Reasons the setup needs attention; empty when healthy.
    pub attention: Vec<String>,
}

/// Whether search finds memories by meaning, and how many have their vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchStatus {
    /// The sentence model's id, when its files are there.
    pub model: Option<String>,
    /// Why search is by words only, when it is.
    pub unavailable: Option<String>,
    /// The model was asked for explicitly (`embed.provider` `local`) and is missing.
    pub required: bool,
    /// The model's files are there but do not load (`unavailable` says why).
    pub broken: bool,
    /// Memories with a vector of the model.
    pub embedded: u64,
    /// Memories waiting for one.
    pub queued: u64,
}

impl Status {
    /// True when something needs attention (`cairn status` exits 1).
    pub fn needs_attention(&self) -> bool {
        !self.attention.is_empty()
    }

    /// No event captured yet (a fresh install): a normal state, not a fault.
    pub fn waiting_for_first_event(&self) -> bool {
        self.memories.sessions == 0
            && self.spooled == 0
            && self.spooled_outside == 0
            && JobStatus::ALL.iter().all(|s| self.queue.count(*s) == 0)
    }
}

/// The recent model calls' outcomes (see [`RecentCalls`]).
pub fn recent_calls(conn: &Connection, now: i64) -> Result<RecentCalls> {
    let rows = conn
        .prepare_cached(
            "SELECT provider, model, outcome, coalesce(error, ''), created_at FROM model_calls
             WHERE created_at >= ?1 AND outcome <> 'not_logged_in'
               AND (outcome <> 'started' OR created_at < ?2)
             ORDER BY created_at DESC, id DESC LIMIT ?3",
        )?
        .query_map(
            rusqlite::params![now - 3_600_000, now - UNFINISHED_AFTER_MS, RECENT_CALLS],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = RecentCalls::default();
    for (provider, model, outcome, error, at) in rows {
        out.calls += 1;
        let error = match outcome.as_str() {
            "error" => error,
            "unusable" => format!("an unusable reply: {error}"),
            "started" => "never completed (the worker died or hung in the call)".into(),
            _ => continue,
        };
        out.failed += 1;
        if out.latest_failure.is_none() {
            out.latest_failure = Some(CallFailure {
                provider,
                model,
                error,
                at,
            });
        }
    }
    Ok(out)
}

fn count(conn: &Connection, sql: &str) -> Result<i64> {
    Ok(conn.query_row(sql, [], |r| r.get(0))?)
}

/// The worker status reports (the lock's `holder`'s, else the latest to start) and what
/// stops the work: why the latest worker stopped on an error, when none started since, and
/// its provider's "not logged in" while it holds (stale once the worker uses another
/// provider, or cannot start at all).
#[derive(Debug, Clone)]
pub struct WorkerStanding {
    pub latest: Option<queue::workers::WorkerRow>,
    pub failure: Option<crate::store::incidents::WorkerFailure>,
    pub not_logged_in: Option<crate::worker::usage::NotLoggedIn>,
}

/// [`WorkerStanding`], read for `cairn status` and `cairn doctor` alike.
pub fn worker_standing(
    dir: &DataDir,
    conn: &Connection,
    holder: Option<&crate::store::lock::Holder>,
) -> Result<WorkerStanding> {
    let newest = queue::workers::latest(conn)?;
    let failure = crate::store::incidents::worker_failure(dir)
        .filter(|f| holder.is_none() && newest.as_ref().is_none_or(|w| w.started_at <= f.at));
    let latest = newest.filter(|w| holder.is_none_or(|h| h.pid == w.pid && w.stopped_at.is_none()));
    let provider = latest.as_ref().and_then(|w| w.provider.as_deref());
    let not_logged_in = crate::worker::usage::not_logged_in(conn)?.filter(|n| {
        failure.as_ref().is_none_or(|f| f.at < n.at) && provider.is_none_or(|p| p == n.provider)
    });
    Ok(WorkerStanding {
        latest,
        failure,
        not_logged_in,
    })
}

/// Gathers the report. `conn` must be open on `dir`'s database.
pub fn gather(dir: &DataDir, conn: &Connection, settings: &Settings, now: i64) -> Result<Status> {
    let holder = crate::store::lock::holder(&dir.worker_lock())?;
    let last_heartbeat_at = last_heartbeat(conn, holder.as_ref().map(|h| h.pid))?;
    let WorkerStanding {
        latest,
        failure,
        not_logged_in,
    } = worker_standing(dir, conn, holder.as_ref())?;
    let queue = queue::stats::stats(conn, now)?;
    let worker = WorkerStatus {
        running: holder.is_some(),
        pid: holder.as_ref().map(|h| h.pid),
        started_at: holder.as_ref().map(|h| h.started_at),
        uptime_ms: holder.as_ref().map(|h| (now - h.started_at).max(0)),
        last_heartbeat_at,
        heartbeat_age_ms: last_heartbeat_at.map(|t| (now - t).max(0)),
        heartbeat_period_ms: i64::try_from(settings.worker.heartbeat_secs.saturating_mul(1000))
            .unwrap_or(i64::MAX),
        process_stopped: holder.as_ref().is_some_and(|h| process_stopped(h.pid)),
        provider: latest.as_ref().and_then(|w| w.provider.clone()),
        model: latest.as_ref().and_then(|w| w.model.clone()),
        failure,
        autostart: settings.worker.autostart,
        last_worked_at: match queue.count(queue::claim::JobStatus::Claimed) {
            0 => queue::stats::last_worked_at(conn)?,
            _ => Some(now),
        },
    };
    let policy = queue::claim::Policy::from_settings(settings);
    let next_due = queue::stats::next_due(conn, &policy, now)?.map(|(job, wait)| NextDue {
        job_id: job.id,
        wait,
        due_at: queue::stats::due_at(&job, &policy),
    });
    let quarantined = count(conn, "SELECT count(*) FROM quarantine")?;
    let quarantined_recently: i64 = conn.query_row(
        "SELECT count(*) FROM quarantine WHERE created_at >= ?1 AND kind = 'invalid'",
        [now - QUARANTINE_WINDOW_MS],
        |r| r.get(0),
    )?;
    let recent_quarantine = conn
        .prepare(
            "SELECT id, event, reason, raw_len, created_at FROM quarantine ORDER BY id DESC LIMIT 5",
        )?
        .query_map([], |r| {
            Ok(QuarantineRow {
                id: r.get(0)?,
                event: r.get(1)?,
                reason: r.get(2)?,
                raw_len: r.get(3)?,
                created_at: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let budget = crate::worker::usage::budget(conn, settings.model.daily_token_budget, now)?;
    let tokens_today = i64::try_from(budget.spent).unwrap_or(i64::MAX);
    let model_calls_last_day =
        crate::worker::usage::totals_by_provider(conn, now - 24 * 3_600_000 + 1)?;
    let memories = MemoryCounts {
        sessions: count(conn, "SELECT count(*) FROM sessions")?,
        prompts: count(conn, "SELECT count(*) FROM user_prompts")?,
        observations: count(conn, "SELECT count(*) FROM observations")?,
        summaries: count(conn, "SELECT count(*) FROM session_summaries")?,
    };
    let size = |p: std::path::PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = dir.db().into_os_string();
    wal.push("-wal");
    let database_bytes = size(dir.db()) + size(wal.into());
    let (spooled_outside, outside_dir) = kept_outside(dir).unzip();
    let read_only = crate::store::paths::read_only_reason(&dir.db())
        .or_else(|| crate::store::paths::read_only_reason(dir.root()));
    let (sync, sync_unreadable) = match crate::sync::status(dir, conn, &settings.sync) {
        Ok(s) => (s, None),
        Err(e) => (
            None,
            Some(match e.fix() {
                Some(fix) => format!("{e}: {fix}"),
                None => e.to_string(),
            }),
        ),
    };
    let mut status = Status {
        data_dir: dir.root().display().to_string(),
        now,
        worker,
        queue,
        quarantined,
        quarantined_recently,
        recent_quarantine,
        tokens_today,
        model_calls_last_day,
        daily_token_budget: settings.model.daily_token_budget,
        budget_spent_until: budget.exhausted().then_some(budget.resets_at),
        memories,
        database_bytes,
        spooled: crate::capture::spool::pending(dir).map_or(0, |f| f.len()),
        spooled_outside: spooled_outside.unwrap_or(0),
        outside_dir,
        read_only,
        settings_error: Settings::load(dir).err().map(|e| e.to_string()),
        lost: crate::store::incidents::lost(dir),
        notices: crate::store::incidents::notices(dir),
        search: search_status(dir, conn, settings)?,
        not_logged_in,
        recent_calls: recent_calls(conn, now)?,
        next_due,
        recovered_last_week: crate::capture::transcript::recovered_since(
            conn,
            now - 7 * 86_400_000,
        )?,
        given_last_week: crate::memory::told::totals_since(conn, now - 7 * 86_400_000)?,
        sync,
        sync_unreadable,
        attention: Vec::new(),
    };
    status.attention = attention(&status);
    Ok(status)
}

/// How many hook events wait outside the data dir (`store::fallback`) and where, when
/// any do. Also asked when there is no database at all (the data dir could never be
/// created), where it is the one thing to report.
pub fn kept_outside(dir: &DataDir) -> Option<(usize, String)> {
    let fb = crate::store::fallback::existing(dir)?;
    let n = crate::capture::spool::pending(&fb).ok()?.len();
    (n > 0).then(|| (n, fb.root().display().to_string()))
}

fn search_status(dir: &DataDir, conn: &Connection, settings: &Settings) -> Result<SearchStatus> {
    use crate::recall::embed::{model, store};
    // A model whose files do not load is none (a look at them, not a load).
    let (located, broken) = match model::locate(&settings.embed, dir) {
        Ok(m) => match m.check() {
            Ok(()) => (Ok(m), false),
            Err(e) => (
                Err(format!(
                    "the sentence model in {} does not load: {e}; run `cairn embed --fetch`",
                    m.dir.display()
                )),
                true,
            ),
        },
        Err(why) => (Err(why.to_string()), false),
    };
    let progress = store::progress(conn, located.as_ref().map_or("", |m| m.id.as_str()))?;
    Ok(SearchStatus {
        model: located.as_ref().ok().map(|m| m.id.clone()),
        unavailable: located.as_ref().err().cloned(),
        required: settings.embed.provider == "local" && located.is_err(),
        broken,
        embedded: progress.embedded,
        queued: progress.queued,
    })
}

/// The "needs attention" rule: the worker is down or wedged while work waits, most recent
/// model calls failed, a ready job was not taken long after it was due, jobs were
/// skipped, or hook inputs were quarantined in the last week. A spent token budget is
/// reported but is not a fault.
pub fn attention(s: &Status) -> Vec<String> {
    attention_by_topic(s)
        .into_iter()
        .map(|(_, text)| text)
        .collect()
}

/// What a reason for attention is about: a page that offers the remedy itself (the
/// viewer's Replay button) words it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    Worker,
    ModelCalls,
    Overdue,
    Search,
    Skipped,
    LoggedOut,
    Settings,
    ReadOnly,
    Lost,
    Notice,
    Recovered,
    Quarantine,
    Sync,
}

/// `the worker stopped on an error at <minute>: <error>`, as status and doctor say it.
pub fn stopped_on(f: &crate::store::incidents::WorkerFailure) -> String {
    format!(
        "the worker stopped on an error at {}: {}",
        crate::clock::minute_utc(f.at),
        f.error
    )
}

/// How a worker that stopped gets going again.
pub fn restart_worker(autostart: bool) -> &'static str {
    if autostart {
        "a hook starts the worker again (or run `cairn-worker`)"
    } else {
        "start the worker again (`cairn-worker`, or restart its service; worker.autostart is off)"
    }
}

fn push(out: &mut Vec<(Topic, String)>, topic: Topic, text: String) {
    out.push((topic, text));
}

/// [`attention`], each reason with its topic.
pub fn attention_by_topic(s: &Status) -> Vec<(Topic, String)> {
    let mut out = Vec::new();
    let waiting = s.queue.count(JobStatus::Pending) + s.queue.count(JobStatus::Claimed);
    let w = &s.worker;
    if let Some(f) = &w.failure {
        push(
            &mut out,
            Topic::Worker,
            format!(
                "{}{}; fix that, then {}; more in the data dir's logs/",
                stopped_on(f),
                if waiting > 0 {
                    format!(" ({} waiting)", plural(waiting, "job is", "jobs are"))
                } else {
                    String::new()
                },
                restart_worker(w.autostart)
            ),
        );
    } else if !w.running && waiting > 0 {
        push(
            &mut out,
            Topic::Worker,
            format!(
                "the worker is not running and {} waiting: start it with `cairn-worker` (or let a hook autostart it)",
                plural(waiting, "job is", "jobs are")
            ),
        );
    }
    if w.wedged() {
        let pid = w.pid.unwrap_or(0);
        let silent = crate::clock::span(w.heartbeat_age_ms.or(w.uptime_ms).unwrap_or(0), true);
        push(
            &mut out,
            Topic::Worker,
            if w.process_stopped {
                format!(
                    "the worker (pid {pid}) holds the lock but its process is stopped, with no heartbeat for {silent}: resume it with `kill -CONT {pid}`, or end it with `kill {pid}` (a hook starts a new one)"
                )
            } else {
                format!(
                    "the worker (pid {pid}) holds the lock but has not heartbeaten for {silent}: it is hung; see its log in the data dir's logs/, then restart it (`kill {pid}`; a hook starts a new one)"
                )
            },
        );
    }
    if s.recent_calls.failing() {
        let r = &s.recent_calls;
        let latest = r.latest_failure.as_ref().map_or(String::new(), |f| {
            format!(
                " (the latest, {} {} at {}: {})",
                f.provider,
                f.model,
                crate::clock::minute_utc(f.at),
                crate::recall::snippet::one_line(&f.error)
            )
        });
        push(
            &mut out,
            Topic::ModelCalls,
            format!(
                "{} of the last {} model calls failed{latest}: check the provider with `cairn doctor --online` (key, model, base URL, network); failed jobs are retried, `cairn queue list` shows them",
                r.failed, r.calls
            ),
        );
    }
    if let Some(d) = &s.next_due
        && w.running
        && !w.wedged()
        && s.not_logged_in.is_none()
        && s.budget_spent_until.is_none()
    {
        // Idle since the job was due, the worker started or it last worked on the queue,
        // whichever came last: a worker busy with a backlog (an import of old sessions)
        // is not idle however long ago its next job's events happened.
        let idle_since = [Some(d.due_at), w.started_at, w.last_worked_at]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(d.due_at);
        if s.now - idle_since > OVERDUE_MS {
            push(
                &mut out,
                Topic::Overdue,
                format!(
                    "job #{} is ready but the worker (pid {}) has taken no job for {}: see the worker's log in the data dir's logs/, and restart it if it stays so (`kill {}`; a hook starts a new one)",
                    d.job_id,
                    w.pid.unwrap_or(0),
                    crate::clock::span(s.now - idle_since, true),
                    w.pid.unwrap_or(0)
                ),
            );
        }
    }
    if let Some(why) = &s.search.unavailable {
        if s.search.broken {
            push(&mut out, Topic::Search, why.clone());
        } else if s.search.required {
            push(
                &mut out,
                Topic::Search,
                format!("embed.provider is local but {why}"),
            );
        }
    }
    let skipped = s.queue.count(JobStatus::Skipped);
    if skipped > 0 {
        push(
            &mut out,
            Topic::Skipped,
            format!(
                "{} skipped after failing: see `cairn queue list --status skipped`, fix the cause, then `cairn queue replay --all-skipped` (or `cairn queue discard {}` for those that can never succeed)",
                plural(skipped, "job was", "jobs were"),
                discard_selector(s)
            ),
        );
    }
    if let Some(n) = &s.not_logged_in {
        push(
            &mut out,
            Topic::LoggedOut,
            format!(
                "the {} provider is not logged in (\"{}\", at {}): model jobs wait; run `claude` and log in with /login (or `claude setup-token`), and they go on within 5 minutes",
                n.provider,
                n.error,
                crate::clock::minute_utc(n.at)
            ),
        );
    }
    if let Some(e) = &s.settings_error {
        push(
            &mut out,
            Topic::Settings,
            format!(
                "cairn's settings cannot be read ({e}): fix the file; until then hook events wait in the spool ({} now), cleaned with the default privacy rules, and the settings are applied to them once they can be read",
                s.spooled
            ),
        );
    }
    if let Some(why) = &s.read_only {
        push(
            &mut out,
            Topic::ReadOnly,
            format!(
                "the database cannot be written ({why}): shown read-only; hooks keep their events outside the data dir ({} so far) until it can be written again, then the worker stores them",
                s.spooled_outside
            ),
        );
    }
    if s.spooled_outside > 0 && s.read_only.is_none() {
        push(
            &mut out,
            Topic::ReadOnly,
            format!(
                "{} kept outside the data dir, in {}, while it could not be written: the worker stores them at its next start (a hook starts it)",
                plural(
                    i64::try_from(s.spooled_outside).unwrap_or(i64::MAX),
                    "hook event is",
                    "hook events are"
                ),
                s.outside_dir.as_deref().unwrap_or("?")
            ),
        );
    }
    if let Some(l) = &s.lost {
        push(
            &mut out,
            Topic::Lost,
            format!(
                "{} could not be kept (neither written nor spooled), the last at {}: {}; free space in the data dir (or make it writable), then `cairn status --acknowledge`",
                plural(
                    i64::try_from(l.count).unwrap_or(i64::MAX),
                    "hook event",
                    "hook events"
                ),
                crate::clock::minute_utc(l.last_at),
                l.cause
            ),
        );
    }
    for n in &s.notices {
        push(
            &mut out,
            Topic::Notice,
            format!(
                "{} (at {}); `cairn status --acknowledge` once read",
                n.message,
                crate::clock::minute_utc(n.at)
            ),
        );
    }
    if s.recovered_last_week > 0 {
        push(
            &mut out,
            Topic::Recovered,
            format!(
                "{} missed by the hooks recovered from Claude Code's transcripts in the last 7 days: the hooks are failing or were not running; `cairn doctor` checks them (see the hook logs in the data dir's logs/)",
                plural(s.recovered_last_week, "event was", "events were")
            ),
        );
    }
    if let Some(e) = &s.sync_unreadable {
        push(
            &mut out,
            Topic::Sync,
            format!("sync: this device's sync setup cannot be read: {e}"),
        );
    }
    if let Some(sync) = &s.sync
        && let Some(e) = &sync.last_error
    {
        let since = sync.last_error_at.map_or(String::new(), |t| {
            format!(" (since {})", crate::clock::minute_utc(t))
        });
        let fix = sync
            .fix
            .as_deref()
            .map_or(String::new(), |f| format!(": {f}"));
        push(&mut out, Topic::Sync, format!("sync: {e}{since}{fix}"));
    }
    if s.quarantined_recently > 0 {
        push(
            &mut out,
            Topic::Quarantine,
            format!(
                "{} quarantined as unreadable in the last 7 days: see `cairn quarantine list` (a Claude Code update may have changed its hook format), then `cairn quarantine clear --all`",
                plural(s.quarantined_recently, "hook input was", "hook inputs were")
            ),
        );
    }
    out
}

/// Which skipped jobs the advice's `cairn queue discard` names: their ids when the status
/// lists them all, else every skipped job.
fn discard_selector(s: &Status) -> String {
    let listed = &s.queue.recent_skipped;
    if !listed.is_empty() && listed.len() as i64 == s.queue.count(JobStatus::Skipped) {
        let ids: Vec<String> = listed.iter().map(|j| j.id.to_string()).collect();
        format!("--id {}", ids.join(" "))
    } else {
        "--all-skipped".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::claim::{JobKind, NewJob, Policy};
    use crate::store::db::{self, OpenOptions};

    #[test]
    fn healthy_then_each_reason_for_attention() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let settings = Settings::default();
        let now = 10 * 86_400_000 + 5_000;
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);
        assert!(!s.worker.running);
        assert!(s.database_bytes > 0);

        db::write(&mut conn, |tx| {
            crate::memory::sessions::ensure(tx, "s", "p", "", now)?;
            queue::claim::enqueue(
                tx,
                &NewJob {
                    session_id: "s",
                    project: "p",
                    kind: JobKind::Summarize,
                    prompt_number: 1,
                    payload: "{}",
                    dedupe_key: "k1",
                },
                1,
                now,
            )?;
            tx.execute(
                "INSERT INTO model_calls (provider, model, purpose, input_tokens, output_tokens, latency_ms, outcome, created_at)
                 VALUES ('offline', 'x', 'summarize', 100, 20, 5, 'ok', ?1), ('offline', 'x', 'summarize', 7, 7, 5, 'ok', ?2)",
                [now - 1_000, now - 86_400_000],
            )?;
            tx.execute(
                "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at) VALUES ('w', 1, ?1, ?1)",
                [now - 2_000],
            )?;
            Ok(())
        })
        .expect("seed");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!(s.tokens_today, 120);
        // The last day's calls per provider: the one of yesterday at this hour is out.
        assert_eq!(s.model_calls_last_day.len(), 1);
        assert_eq!(s.model_calls_last_day[0].provider, "offline");
        assert_eq!(s.model_calls_last_day[0].totals.calls, 1);
        assert_eq!(s.model_calls_last_day[0].totals.input_tokens, 100);
        assert_eq!(s.budget_spent_until, None, "no budget set");
        let mut tight = settings.clone();
        tight.model.daily_token_budget = 100;
        let t = gather(&dd, &conn, &tight, now).expect("gather");
        assert_eq!(
            t.budget_spent_until,
            Some(crate::worker::usage::day_start_utc(now) + 86_400_000)
        );
        tight.model.daily_token_budget = 121;
        let t = gather(&dd, &conn, &tight, now).expect("gather");
        assert_eq!(t.budget_spent_until, None, "120 of 121 is not spent");
        assert_eq!(s.worker.heartbeat_age_ms, Some(2_000));
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
        assert!(s.attention[0].contains("worker is not running"));

        let lock = crate::store::lock::WorkerLock::try_acquire(&dd.worker_lock(), now - 9_000)
            .expect("lock")
            .expect("free");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);
        assert_eq!(s.worker.uptime_ms, Some(9_000));
        assert_eq!(
            s.worker.last_heartbeat_at, None,
            "the old worker's is not this one's"
        );
        conn.execute(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at) VALUES ('me', ?1, ?2, ?2)",
            rusqlite::params![std::process::id(), now - 500],
        )
        .expect("worker row");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!(s.worker.heartbeat_age_ms, Some(500));

        let batch = queue::claim::claim_batch(&mut conn, "w", &Policy::default(), now)
            .expect("claim")
            .expect("batch");
        let once = Policy {
            max_attempts: 1,
            ..Policy::default()
        };
        queue::claim::fail(&mut conn, &batch, "boom", &once, now, None).expect("fail");
        // A well-formed event cairn does not capture is kept, and is no problem.
        let mut harmless = crate::capture::quarantine::Entry::new(
            Some("Notification".into()),
            "not captured",
            b"{}",
            2,
            true,
        );
        harmless.uncaptured = true;
        db::write(&mut conn, |tx| {
            crate::capture::quarantine::add(tx, &harmless, now)
        })
        .expect("uncaptured");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!((s.quarantined, s.quarantined_recently), (1, 0));
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
        conn.execute(
            "INSERT INTO quarantine (event, reason, raw, raw_len, created_at) VALUES (NULL, 'bad json', x'00', 1, ?1)",
            [now],
        )
        .expect("quarantine");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!(s.attention.len(), 2, "{:?}", s.attention);
        assert_eq!(s.recent_quarantine[0].reason, "bad json");
        // A week later (the worker gone) the quarantined input is history, still counted.
        drop(lock);
        let later = now + QUARANTINE_WINDOW_MS + 1;
        let s = gather(&dd, &conn, &settings, later).expect("gather");
        assert_eq!((s.quarantined, s.quarantined_recently), (2, 0));
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
    }

    /// A provider's "not logged in" is shown while the worker uses it, and gives way to
    /// another provider or to a worker that cannot start.
    #[test]
    fn a_provider_not_logged_in_is_forgotten_once_the_worker_uses_another() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let settings = Settings::default();
        let now = 10 * 86_400_000;
        conn.execute(
            "INSERT INTO model_calls (provider, model, purpose, latency_ms, outcome, error, created_at)
             VALUES ('claude-cli', 'm', 'summarize', 5, 'not_logged_in', 'Not logged in', ?1)",
            [now - 60_000],
        )
        .expect("call");
        let worker = |id: &str, started: i64, provider: &str| {
            conn.execute(
                "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at, stopped_at, provider, model)
                 VALUES (?1, 1, ?2, ?2, ?2, ?3, 'm')",
                rusqlite::params![id, started, provider],
            )
            .expect("worker");
        };
        worker("a", now - 120_000, "claude-cli");
        let logged_out = |s: &Status| s.attention.iter().any(|a| a.contains("not logged in"));
        assert!(logged_out(
            &gather(&dd, &conn, &settings, now).expect("gather")
        ));
        // The provider changed: what claude-cli said no longer holds anything up.
        worker("b", now - 30_000, "anthropic");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(
            s.not_logged_in.is_none() && !logged_out(&s),
            "{:?}",
            s.attention
        );
        // Nor does it once a worker cannot start at all, which is said instead.
        conn.execute("DELETE FROM workers WHERE worker_id = 'b'", [])
            .expect("forget b");
        crate::store::incidents::record_worker_failure(&dd, "no key", now - 10_000)
            .expect("record");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!logged_out(&s), "{:?}", s.attention);
        assert!(
            s.attention[0].starts_with("the worker stopped on an error at"),
            "{:?}",
            s.attention
        );
    }

    /// The worker holding the lock but silent for four heartbeat periods is wedged; most of
    /// the recent model calls failing needs attention; a ready job not taken five minutes
    /// after it was due, with a live worker, too.
    #[test]
    fn wedged_worker_failing_calls_and_overdue_jobs_need_attention() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let settings = Settings::default();
        let now = 10 * 86_400_000;
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(s.waiting_for_first_event());
        assert!(!s.needs_attention(), "{:?}", s.attention);

        // Two failures of three calls in the last hour, one never completed; an old
        // failure and a call in progress do not count.
        conn.execute(
            "INSERT INTO model_calls (provider, model, purpose, latency_ms, outcome, error, created_at)
             VALUES ('anthropic', 'm', 'summarize', 5, 'ok', NULL, ?1),
                    ('anthropic', 'm', 'summarize', 5, 'error', 'HTTP 500', ?2),
                    ('anthropic', 'm', 'summarize', 5, 'started', NULL, ?3),
                    ('anthropic', 'm', 'summarize', 5, 'started', NULL, ?4),
                    ('anthropic', 'm', 'summarize', 5, 'error', 'old', ?5)",
            [now - 60_000, now - 30_000, now - UNFINISHED_AFTER_MS - 1, now - 1_000, now - 7_200_000],
        )
        .expect("calls");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!((s.recent_calls.calls, s.recent_calls.failed), (3, 2));
        let f = s.recent_calls.latest_failure.as_ref().expect("failure");
        assert_eq!(f.error, "HTTP 500");
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
        assert!(
            s.attention[0].starts_with("2 of the last 3 model calls failed"),
            "{:?}",
            s.attention
        );
        conn.execute("DELETE FROM model_calls", []).expect("clear");

        // A live worker (this process holds the lock) whose heartbeat is old: wedged.
        let lock = crate::store::lock::WorkerLock::try_acquire(&dd.worker_lock(), now - 600_000)
            .expect("lock")
            .expect("free");
        conn.execute(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at, provider, model)
             VALUES ('me', ?1, ?2, ?3, 'anthropic', 'claude-x')",
            rusqlite::params![std::process::id(), now - 600_000, now - 61_000],
        )
        .expect("worker");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert_eq!(s.worker.provider.as_deref(), Some("anthropic"));
        assert_eq!(s.worker.model.as_deref(), Some("claude-x"));
        assert!(!s.worker.process_stopped);
        assert!(s.worker.wedged());
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
        assert!(
            s.attention[0].contains("has not heartbeaten for 1m 1s"),
            "{:?}",
            s.attention
        );
        conn.execute("UPDATE workers SET heartbeat_at = ?1", [now - 1_000])
            .expect("beat");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);

        // A summary job due six minutes ago, not taken by the live worker: overdue.
        db::write(&mut conn, |tx| {
            crate::memory::sessions::ensure(tx, "s", "p", "", now)?;
            queue::claim::enqueue(
                tx,
                &NewJob {
                    session_id: "s",
                    project: "p",
                    kind: JobKind::Summarize,
                    prompt_number: 1,
                    payload: "{}",
                    dedupe_key: "k",
                },
                3,
                now - 360_000,
            )
        })
        .expect("job");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!s.waiting_for_first_event());
        let d = s.next_due.as_ref().expect("due");
        assert_eq!(
            (d.wait, d.due_at),
            (queue::stats::Wait::Ready, now - 360_000)
        );
        assert_eq!(s.attention.len(), 1, "{:?}", s.attention);
        assert!(
            s.attention[0].contains("has taken no job for 6m 0s"),
            "{:?}",
            s.attention
        );
        // Within five minutes of being due it is no fault.
        let s = gather(&dd, &conn, &settings, now - 90_000).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);

        // A worker working through a backlog is not idle, however long ago its next job
        // was due (an import dates its jobs when their events happened): it finished a
        // job a minute ago, so it is idle from then on.
        db::write(&mut conn, |tx| {
            let job = NewJob {
                session_id: "s",
                project: "p",
                kind: JobKind::Summarize,
                prompt_number: 2,
                payload: "{}",
                dedupe_key: "done",
            };
            queue::claim::enqueue(tx, &job, 3, now - 4 * 86_400_000)?;
            tx.execute(
                "UPDATE pending_messages SET status = 'done', updated_at = ?1 WHERE dedupe_key = 'done'",
                [now - 60_000],
            )?;
            Ok(())
        })
        .expect("worked");
        let s = gather(&dd, &conn, &settings, now).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);
        let later = now + 360_000;
        conn.execute("UPDATE workers SET heartbeat_at = ?1", [later - 1_000])
            .expect("beat");
        let s = gather(&dd, &conn, &settings, later).expect("gather");
        assert!(
            s.attention[0].contains("has taken no job for 7m 0s"),
            "{:?}",
            s.attention
        );
        // With a batch in hand it is working (a hung one stops its heartbeat).
        conn.execute(
            "UPDATE pending_messages SET status = 'claimed', lease_until = ?1 WHERE dedupe_key = 'done'",
            [later + 60_000],
        )
        .expect("claim");
        let s = gather(&dd, &conn, &settings, later).expect("gather");
        assert!(!s.needs_attention(), "{:?}", s.attention);
        drop(lock);
    }
}
