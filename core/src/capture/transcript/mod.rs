//! Claude Code's transcripts (`~/.claude/projects/<dir>/<session id>.jsonl`) read back
//! into the hook events they stand for, and written through the hook's own path: the same
//! privacy cleaning ([`record::prepare`]), the same writes ([`record::apply`]) and the
//! same keys (a tool call by its `tool_use_id`, a prompt and its turn by Claude Code's
//! `prompt_id`). So an event captured live is never stored twice, importing twice adds
//! nothing, and a turn is summarised once, under its own prompt. `cairn import
//! transcripts` drives it over past sessions; the worker's housekeeping reconciles
//! finished sessions with it ([`reconcile`]).
//!
//! - `read`: one transcript → events (streaming, bounded memory, tolerant).
//! - here: finding transcripts, a session's events with its subagents' ([`SessionEvents`]),
//!   planning (counts and cost, no writes) and applying them, and reconciliation.
//!
//! Writes `transcript_sync` and `transcript_recovered` (only writer), and through
//! `memory::sessions` and `queue::claim::enqueue` as a hook does. Reads `forgotten`:
//! nothing the user forgot is recreated. Sessions keep their real times: every row
//! carries the time its line was written.

pub mod read;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;

use crate::capture::hook::Event;
use crate::capture::record::{self, Action, Applied, Record};
use crate::error::Result;
use crate::memory::forgotten::{self, Key, PromptRef};
use crate::memory::sessions;
use crate::queue::claim::Enqueued;
use crate::settings::Settings;
use crate::store::db;

pub use read::{Agent, Reader, Stats, Timed};

/// A transcript on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    /// The file's stem: the session id Claude Code named it after.
    pub session_id: String,
    pub size: u64,
    pub mtime_ms: i64,
}

impl Source {
    pub fn of(path: &Path) -> std::io::Result<Source> {
        let meta = std::fs::metadata(path)?;
        let mtime_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64);
        Ok(Source {
            path: path.to_path_buf(),
            session_id: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            size: meta.len(),
            mtime_ms,
        })
    }
}

/// Claude Code's projects folder ([`ClaudeCode::projects`](crate::store::paths::ClaudeCode)).
pub fn projects_dir() -> Option<PathBuf> {
    crate::store::paths::ClaudeCode::from_env().map(|c| c.projects())
}

/// Every session transcript under `projects` (`<dir>/<session>.jsonl`), modified at or
/// after `since` when given, oldest first. Subagent files are found through their session.
pub fn list(projects: &Path, since: Option<i64>) -> Vec<Source> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(projects) else {
        return out;
    };
    for d in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "jsonl")
                && let Ok(s) = Source::of(&p)
                && since.is_none_or(|t| s.mtime_ms >= t)
            {
                out.push(s);
            }
        }
    }
    out.sort_by(|a, b| (a.mtime_ms, &a.path).cmp(&(b.mtime_ms, &b.path)));
    out
}

/// The transcript of `session_id` under `projects`, if there is one.
pub fn locate(projects: &Path, session_id: &str) -> Option<Source> {
    if session_id.is_empty() || session_id.contains(['/', '\\']) || session_id.starts_with('.') {
        return None;
    }
    let name = format!("{session_id}.jsonl");
    std::fs::read_dir(projects)
        .ok()?
        .flatten()
        .map(|d| d.path().join(&name))
        .find(|p| p.is_file())
        .and_then(|p| Source::of(&p).ok())
}

/// A session's events: its transcript's, with each subagent's own tool calls (from
/// `<session>/subagents/agent-<id>.jsonl`) placed before the `Agent` call that ran it, as
/// the hooks see them.
#[derive(Debug)]
pub struct SessionEvents {
    main: Reader<BufReader<File>>,
    base: PathBuf,
    sub: Option<Reader<BufReader<File>>>,
    agents: VecDeque<Agent>,
    held: Option<Timed>,
    sub_stats: Stats,
}

impl SessionEvents {
    pub fn open(src: &Source, finished: bool) -> std::io::Result<SessionEvents> {
        let f = File::open(&src.path)?;
        Ok(SessionEvents {
            main: Reader::new(
                BufReader::with_capacity(256 << 10, f),
                &src.session_id,
                finished,
            ),
            base: src.path.with_extension(""),
            sub: None,
            agents: VecDeque::new(),
            held: None,
            sub_stats: Stats::default(),
        })
    }

    /// What the reads met so far (the main transcript's bytes; the subagents' oddities).
    pub fn stats(&self) -> Stats {
        let mut s = self.main.stats().clone();
        merge(&mut s, &self.sub_stats);
        s.bytes = self.main.stats().bytes;
        s
    }

    /// True once every event was read and the session's last turn is left open (the
    /// session was not read as finished).
    pub fn left_open(&self) -> bool {
        self.main.left_open()
    }

    fn open_agent(&mut self, agent: Agent) {
        let Some(id) = agent.agent_id.as_deref() else {
            return;
        };
        if id.contains(['/', '\\']) {
            return;
        }
        let path = self
            .base
            .join("subagents")
            .join(format!("agent-{id}.jsonl"));
        if let Ok(f) = File::open(&path) {
            let sid = self.main_session();
            self.sub = Some(Reader::for_agent(BufReader::new(f), &sid, agent));
        }
    }

    fn main_session(&self) -> String {
        self.base
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Iterator for SessionEvents {
    type Item = Timed;

    fn next(&mut self) -> Option<Timed> {
        loop {
            if let Some(sub) = self.sub.as_mut() {
                if let Some(t) = sub.next() {
                    return Some(t);
                }
                let s = sub.stats().clone();
                merge(&mut self.sub_stats, &s);
                self.sub = None;
            }
            if let Some(a) = self.agents.pop_front() {
                self.open_agent(a);
                continue;
            }
            if let Some(t) = self.held.take() {
                return Some(t);
            }
            let t = self.main.next()?;
            let agents = self.main.take_agents();
            if agents.is_empty() {
                return Some(t);
            }
            self.agents.extend(agents);
            self.held = Some(t);
        }
    }
}

fn merge(into: &mut Stats, s: &Stats) {
    into.lines += s.lines;
    into.bytes += s.bytes;
    into.bad_lines += s.bad_lines;
    into.oversized_lines += s.oversized_lines;
    into.unknown_blocks += s.unknown_blocks;
    into.unknown_other += s.unknown_other;
    into.orphan_results += s.orphan_results;
    into.truncated_tail |= s.truncated_tail;
    for (k, v) in &s.unknown_types {
        *into.unknown_types.entry(k.clone()).or_default() += v;
    }
}

/// What was (or would be) done with one project's events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sessions: u64,
    pub prompts: u64,
    pub turns: u64,
    pub tool_events: u64,
    /// Events already in memory (captured live, or imported before).
    pub existing: u64,
    /// Events left out because the user forgot them.
    pub forgotten: u64,
    /// New model jobs: observation jobs and turn summaries.
    pub new_jobs: u64,
    /// Characters of the new jobs' cleaned events (for the cost estimate).
    pub new_chars: u64,
    /// Estimated model calls for the new jobs.
    pub model_calls: u64,
    /// Turns left open: their transcript changed within `Options::quiet_ms`, so the
    /// session may still be writing them; their end (and summary) is not counted.
    pub open_turns: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.sessions += o.sessions;
        self.prompts += o.prompts;
        self.turns += o.turns;
        self.tool_events += o.tool_events;
        self.existing += o.existing;
        self.forgotten += o.forgotten;
        self.new_jobs += o.new_jobs;
        self.new_chars += o.new_chars;
        self.model_calls += o.model_calls;
        self.open_turns += o.open_turns;
    }
}

/// What a plan or an import found, per project.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub files: u64,
    pub bytes: u64,
    pub projects: BTreeMap<String, Counts>,
    /// Events of excluded projects, skipped tools and cairn's own tools.
    pub not_captured: u64,
    /// Rows written: prompts added and jobs queued.
    pub added: u64,
    pub stats: Stats,
    /// When the last transcript holding an open turn will have been quiet for
    /// `Options::quiet_ms` (ms since the epoch): an import from then on reads its turn as
    /// finished.
    pub open_until: Option<i64>,
}

impl Report {
    pub fn total(&self) -> Counts {
        let mut c = Counts::default();
        for v in self.projects.values() {
            c.add(v);
        }
        c
    }

    /// Estimated input tokens of the new jobs' model calls with `settings`' provider (0
    /// for the offline extractor): the events' characters plus each call's fixed
    /// instructions and header, at four characters a token.
    pub fn estimated_input_tokens(&self, settings: &Settings) -> u64 {
        if uses_no_model(settings) {
            return 0;
        }
        let c = self.total();
        (c.new_chars + c.model_calls * CALL_OVERHEAD_CHARS).div_ceil(4)
    }

    /// Estimated model calls with `settings`' provider (0 for the offline extractor).
    pub fn estimated_model_calls(&self, settings: &Settings) -> u64 {
        if uses_no_model(settings) {
            0
        } else {
            self.total().model_calls
        }
    }
}

/// The instructions and session header every model call carries, in characters (about
/// what `worker::prompt` writes).
pub const CALL_OVERHEAD_CHARS: u64 = 2_500;

fn uses_no_model(settings: &Settings) -> bool {
    matches!(settings.model.provider.as_str(), "offline" | "")
}

/// What to read and how.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only events of projects matching this glob.
    pub project: Option<String>,
    /// Plan only: read and count, write nothing.
    pub dry_run: bool,
    /// Mark a finished session ended (an import of the past); reconciliation leaves the
    /// session's status to its hooks (a quiet session may go on).
    pub mark_ended: bool,
    /// A transcript modified within this many ms of `now` may still be written to: its
    /// last turn is left open and the session is not ended.
    pub quiet_ms: i64,
}

/// Where an event stands against what memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    New,
    Existing,
    Forgotten,
}

struct Session {
    /// Tool events per open turn (prompt id), for the call estimate.
    tools_in_turn: HashMap<String, u64>,
}

/// Reads `sources` and, unless `opts.dry_run`, writes every event memory lacks, in
/// transactions of a few hundred events. `progress` is told each source's bytes as they
/// are read.
pub fn import(
    conn: &mut Connection,
    sources: &[Source],
    settings: &Settings,
    opts: &Options,
    now: i64,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    let mut report = Report::default();
    for src in sources {
        let finished = src.mtime_ms + opts.quiet_ms <= now;
        import_one(conn, src, settings, opts, finished, &mut report, progress)?;
    }
    Ok(report)
}

const WRITE_BATCH: usize = 256;

fn import_one(
    conn: &mut Connection,
    src: &Source,
    settings: &Settings,
    opts: &Options,
    finished: bool,
    report: &mut Report,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut events = match SessionEvents::open(src, finished) {
        Ok(e) => e,
        Err(e) => {
            log::warn!("cannot read {}: {e}", src.path.display());
            return Ok(());
        }
    };
    report.files += 1;
    let mut projects: HashMap<String, String> = HashMap::new();
    let mut sessions_seen: HashMap<String, Session> = HashMap::new();
    let mut batch: Vec<Record> = Vec::with_capacity(WRITE_BATCH);
    let mut reported = 0u64;
    let mut n = 0u64;
    // The project of the last event counted, for a turn left open at the end.
    let mut last_project: Option<String> = None;
    while let Some(Timed { at, event }) = events.next() {
        n += 1;
        if n.is_multiple_of(1024) {
            let b = events.stats().bytes;
            progress(b - reported);
            reported = b;
        }
        match &event {
            Event::SessionEnd { .. } if !opts.mark_ended => continue,
            // Without Claude Code's prompt id a prompt cannot be matched with its live
            // capture or an earlier import: it would be stored again each time.
            Event::UserPrompt { common, .. } if common.prompt_id.is_none() => {
                report.not_captured += 1;
                continue;
            }
            _ => {}
        }
        let cwd = event.common().cwd.clone();
        let project = projects
            .entry(cwd.clone())
            .or_insert_with(|| crate::capture::project::detect(Path::new(&cwd)))
            .clone();
        if let Some(glob) = &opts.project
            && !crate::capture::project::glob_match(glob, &project)
        {
            continue;
        }
        if record::is_excluded(&project, &settings.capture) {
            report.not_captured += 1;
            continue;
        }
        let Some(rec) = record::prepare(&event, &project, &cwd, &settings.capture, at) else {
            report.not_captured += 1;
            continue;
        };
        last_project = Some(project.clone());
        let counts = report.projects.entry(project.clone()).or_default();
        let sid = rec.session_id.clone();
        let session = sessions_seen.entry(sid).or_insert_with(|| {
            counts.sessions += 1;
            Session {
                tools_in_turn: HashMap::new(),
            }
        });
        match &event {
            Event::UserPrompt {
                synthetic: false, ..
            } => counts.prompts += 1,
            Event::Tool { .. } => counts.tool_events += 1,
            Event::Stop { .. } => counts.turns += 1,
            _ => {}
        }
        if opts.dry_run {
            let standing = standing(conn, &rec)?;
            count_standing(counts, session, &rec, standing, settings);
        } else {
            batch.push(rec);
            if batch.len() >= WRITE_BATCH {
                write_batch(conn, &mut batch, settings, report, &mut sessions_seen)?;
            }
        }
    }
    if !batch.is_empty() {
        write_batch(conn, &mut batch, settings, report, &mut sessions_seen)?;
    }
    if events.left_open()
        && let Some(p) = last_project
    {
        report.projects.entry(p).or_default().open_turns += 1;
        let until = src.mtime_ms + opts.quiet_ms;
        report.open_until = Some(report.open_until.map_or(until, |u| u.max(until)));
    }
    let stats = events.stats();
    progress(stats.bytes.saturating_sub(reported));
    report.bytes += stats.bytes;
    merge(&mut report.stats, &stats);
    report.stats.bytes = report.bytes;
    Ok(())
}

fn count_standing(
    counts: &mut Counts,
    session: &mut Session,
    rec: &Record,
    standing: Standing,
    settings: &Settings,
) {
    // What an import counts as an event (a prompt, a tool call, a turn's end): a session's
    // start or end is neither added, already there nor forgotten.
    let event = matches!(
        rec.action,
        Action::Prompt { .. } | Action::Tool(_) | Action::TurnEnd(_)
    );
    match standing {
        Standing::Existing if event => counts.existing += 1,
        Standing::Forgotten if event => counts.forgotten += 1,
        Standing::Existing | Standing::Forgotten => {}
        Standing::New => match &rec.action {
            Action::Tool(ev) => {
                counts.new_jobs += 1;
                counts.new_chars += payload_chars(ev, settings);
                let pid = ev.prompt_id.clone().unwrap_or_default();
                let k = session.tools_in_turn.entry(pid).or_default();
                // A batch holds up to `batch.max_size` jobs of one turn.
                if (*k).is_multiple_of(u64::from(settings.batch.max_size.max(1))) {
                    counts.model_calls += 1;
                }
                *k += 1;
            }
            Action::TurnEnd(turn) => {
                counts.new_jobs += 1;
                counts.model_calls += 1;
                counts.new_chars += turn.last_assistant_message.len() as u64;
                if let Some(p) = &turn.prompt_id {
                    session.tools_in_turn.remove(p);
                }
            }
            _ => {}
        },
    }
}

fn payload_chars(ev: &crate::queue::payload::ToolEvent, settings: &Settings) -> u64 {
    let n = serde_json::to_string(ev).map_or(0, |s| s.len());
    n.min(settings.model.max_prompt_chars.max(1)) as u64
}

fn write_batch(
    conn: &mut Connection,
    batch: &mut Vec<Record>,
    settings: &Settings,
    report: &mut Report,
    sessions_seen: &mut HashMap<String, Session>,
) -> Result<()> {
    let results = db::write(conn, |tx| {
        let mut out = Vec::with_capacity(batch.len());
        for rec in batch.iter() {
            out.push(apply_new(tx, rec, settings.queue.max_attempts)?);
        }
        Ok(out)
    })?;
    for (rec, (standing, added)) in batch.drain(..).zip(results) {
        let project = rec.project.clone();
        let counts = report.projects.entry(project).or_default();
        let session = sessions_seen
            .entry(rec.session_id.clone())
            .or_insert_with(|| Session {
                tools_in_turn: HashMap::new(),
            });
        count_standing(counts, session, &rec, standing, settings);
        if added {
            report.added += 1;
        }
    }
    Ok(())
}

/// Where `rec` stands against memory, read in the caller's connection (no writes).
fn standing(conn: &Connection, rec: &Record) -> Result<Standing> {
    let sid = rec.session_id.as_str();
    if forgotten::is_forgotten(conn, &Key::Session(sid))? {
        return Ok(Standing::Forgotten);
    }
    if let Some(pid) = rec.prompt_id()
        && forgotten::is_forgotten(
            conn,
            &Key::Prompt {
                session_id: sid,
                prompt: PromptRef::Id(pid),
            },
        )?
    {
        return Ok(Standing::Forgotten);
    }
    match &rec.action {
        Action::Start | Action::Touch => Ok(Standing::Existing),
        Action::End { .. } => {
            let status: Option<String> = conn
                .prepare_cached("SELECT status FROM sessions WHERE session_id = ?1")?
                .query_row([sid], |r| r.get(0))
                .optional()?;
            Ok(if status.as_deref() == Some("ended") {
                Standing::Existing
            } else {
                Standing::New
            })
        }
        Action::Prompt { prompt_id, .. } => match prompt_id {
            Some(id) if sessions::prompt_number_of(conn, sid, id)?.is_some() => {
                Ok(Standing::Existing)
            }
            _ => Ok(Standing::New),
        },
        Action::Tool(ev) => {
            if forgotten::is_forgotten(conn, &Key::ToolUse(&ev.tool_use_id))? {
                return Ok(Standing::Forgotten);
            }
            if job_exists(conn, &record::tool_key(&ev.tool_use_id))? {
                return Ok(Standing::Existing);
            }
            match turn_number(conn, rec)? {
                Some(n) => turn_standing(conn, sid, n, false),
                None => Ok(Standing::New),
            }
        }
        Action::TurnEnd(_) => match turn_number(conn, rec)? {
            Some(n) => turn_standing(conn, sid, n, true),
            // The turn's prompt is not in memory yet (a plan reads before the prompt is
            // written); a turn end whose prompt never is writes nothing.
            None => Ok(Standing::New),
        },
    }
}

/// The recorded prompt number of a tool event's or turn end's `prompt_id`.
fn turn_number(conn: &Connection, rec: &Record) -> Result<Option<i64>> {
    match rec.prompt_id() {
        Some(id) => sessions::prompt_number_of(conn, &rec.session_id, id),
        None => Ok(None),
    }
}

/// A turn's standing: its summary job forgotten or queued, or the turn summarised and its
/// jobs since purged (`queue.retention_days`): everything it had was seen.
fn turn_standing(conn: &Connection, sid: &str, n: i64, is_turn_end: bool) -> Result<Standing> {
    let turn = Key::Summary {
        session_id: sid,
        prompt_number: n,
    };
    if forgotten::is_forgotten(conn, &turn)? {
        return Ok(Standing::Forgotten);
    }
    let job = job_exists(conn, &record::turn_key(sid, n))?;
    if is_turn_end && job {
        return Ok(Standing::Existing);
    }
    if !job {
        let summarised = conn
            .prepare_cached(
                "SELECT 1 FROM session_summaries WHERE session_id = ?1 AND prompt_number = ?2",
            )?
            .query_row(params![sid, n], |_| Ok(()))
            .optional()?
            .is_some();
        if summarised {
            return Ok(Standing::Existing);
        }
    }
    Ok(Standing::New)
}

fn job_exists(conn: &Connection, dedupe_key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM pending_messages WHERE dedupe_key = ?1")?
        .query_row([dedupe_key], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Writes `rec` when memory lacks it; `(standing, whether a row was added)`.
fn apply_new(tx: &Transaction, rec: &Record, max_attempts: u32) -> Result<(Standing, bool)> {
    let s = standing(tx, rec)?;
    if s != Standing::New {
        return Ok((s, false));
    }
    if let Action::TurnEnd(_) = rec.action
        && turn_number(tx, rec)?.is_none()
    {
        // Never under a guessed turn.
        return Ok((Standing::Existing, false));
    }
    let added = match record::apply(tx, rec, max_attempts)? {
        Applied::Session => false,
        Applied::Prompt(p) => p.added,
        Applied::Job(Enqueued::Added(_)) => true,
        Applied::Job(_) => false,
    };
    Ok((Standing::New, added))
}

/// What a reconciliation pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub sessions: u64,
    pub recovered: u64,
}

/// How long a session that did not end must have been quiet before it is reconciled.
pub const RECONCILE_QUIET_MS: i64 = 30 * 60_000;
/// How far back reconciliation looks.
pub const RECONCILE_WINDOW_MS: i64 = 7 * 86_400_000;

/// Compares the transcripts of recently finished sessions (ended, or quiet for
/// [`RECONCILE_QUIET_MS`]; active within [`RECONCILE_WINDOW_MS`]) with what was captured,
/// and writes what the hooks missed; at most `limit` sessions a pass. A session is
/// compared again only when it changed since (new events, or its transcript grew).
pub fn reconcile(
    conn: &mut Connection,
    settings: &Settings,
    projects: &Path,
    now: i64,
    limit: usize,
) -> Result<Reconciled> {
    type Due = (String, String, Option<i64>, Option<i64>, Option<i64>);
    let due: Vec<Due> = conn
        .prepare_cached(
            "SELECT s.session_id, s.status, t.size, t.mtime_ms, s.ended_at
             FROM sessions s LEFT JOIN transcript_sync t ON t.session_id = s.session_id
             WHERE s.updated_at >= ?1
               AND (t.session_id IS NULL OR t.synced_at < s.updated_at)
               AND (s.status = 'ended' OR s.updated_at < ?2)
             ORDER BY s.updated_at LIMIT ?3",
        )?
        .query_map(
            params![
                now - RECONCILE_WINDOW_MS,
                now - RECONCILE_QUIET_MS,
                limit as i64
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    let mut done = Reconciled::default();
    for (sid, status, size, mtime, ended_at) in due {
        done.sessions += 1;
        let Some(src) = locate(projects, &sid) else {
            record_sync(conn, &sid, None, now)?;
            continue;
        };
        if size == Some(src.size as i64) && mtime == Some(src.mtime_ms) {
            record_sync(conn, &sid, Some(&src), now)?;
            continue;
        }
        let opts = Options {
            project: None,
            dry_run: false,
            mark_ended: false,
            quiet_ms: 0,
        };
        let mut report = Report::default();
        // The session ended or went quiet: its last turn is over.
        import_one(conn, &src, settings, &opts, true, &mut report, &mut |_| {})?;
        let recovered = report.added;
        if recovered > 0 {
            log::warn!(
                "reconciliation recovered {recovered} events of session {sid} that its hooks missed"
            );
        }
        done.recovered += recovered;
        db::write(conn, |tx| {
            // A recovered prompt makes its session active again, as a live one would; an
            // ended session stays ended.
            if status == "ended"
                && let Some(at) = ended_at
            {
                sessions::end(tx, &sid, "", "", at)?;
            }
            if recovered > 0 {
                tx.prepare_cached(
                    "INSERT INTO transcript_recovered (session_id, events, created_at)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![sid, recovered as i64, now])?;
            }
            Ok(())
        })?;
        record_sync(conn, &sid, Some(&src), now)?;
    }
    Ok(done)
}

fn record_sync(conn: &mut Connection, sid: &str, src: Option<&Source>, now: i64) -> Result<()> {
    db::write(conn, |tx| {
        tx.prepare_cached(
            "INSERT INTO transcript_sync (session_id, path, size, mtime_ms, synced_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session_id) DO UPDATE SET path = excluded.path, size = excluded.size,
                 mtime_ms = excluded.mtime_ms, synced_at = excluded.synced_at",
        )?
        .execute(params![
            sid,
            src.map(|s| s.path.to_string_lossy().into_owned())
                .unwrap_or_default(),
            src.map_or(0, |s| s.size as i64),
            src.map_or(0, |s| s.mtime_ms),
            now
        ])?;
        Ok(())
    })
}

/// Events reconciliation recovered since `since` (for `cairn status`).
pub fn recovered_since(conn: &Connection, since: i64) -> Result<i64> {
    Ok(conn
        .prepare_cached(
            "SELECT coalesce(sum(events), 0) FROM transcript_recovered WHERE created_at >= ?1",
        )?
        .query_row([since], |r| r.get(0))?)
}

#[cfg(test)]
mod tests;
