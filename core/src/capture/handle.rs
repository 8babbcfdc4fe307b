//! The hook's run: everything `cairn-hook` does between reading stdin and printing its
//! answer ([`handle`]). The input is decoded (`hook`), made a record and written
//! ([`prepare`], [`apply`], beside the record type in `capture::record`) in one
//! transaction, spooled when the database cannot take it, or kept in the quarantine when
//! it is not a capturable event (one path: a `Rejected` input); the answer carries the
//! SessionStart context block (not on `resume` unless `capture.context_on_resume`). Also
//! the quarantine's [`replay`], which gives kept inputs the same path again.
//!
//! - `SubagentStop` is not captured: the subagent's own tool events already carry
//!   `agent_id`/`agent_type`, and the `PostToolUse(Agent)` that follows carries its final
//!   message; a summary per subagent would be a second, smaller summary of the same turn.
//! - `SessionEnd`: nothing slow (Claude Code kills this hook after about 1.5 s).
//!
//! Invariants: every event's rows are written in one `db::write` transaction; nothing is
//! written before the privacy filter ran; an event that cannot be written (the database
//! stayed locked, or cannot be opened) is spooled to a file, already cleaned, and the
//! same [`apply`] writes it later, idempotently (dedupe keys, prompt ids); when the data
//! dir cannot take the file, it goes to the data dir's `store::fallback`, and when that
//! fails too, the loss is counted (`store::incidents`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction};

use crate::capture::fingerprints;
use crate::capture::hook::{self, DecodeError, Event, StartSource};
use crate::capture::quarantine;
use crate::capture::record::{Action, Record, apply, is_excluded, prepare, prepare_in};
use crate::capture::spool;
use crate::capture::tell;
use crate::error::Result;
use crate::memory::sessions;
use crate::settings::{CaptureSettings, Settings};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::DataDir;

/// The hook-time facts of a record that is about to be spooled: the prompt number it
/// belongs to, read (not written: in WAL a reader is not held up by the writer the hook
/// could not wait out) from the connection when there is one. It stays unknown without a
/// connection, or when an earlier event of the session is in the spool (the counter read
/// now would miss a spooled prompt): then its `prompt_id`, or the counter when it is
/// applied in order behind the spooled events, decides at ingest.
fn with_hook_time_facts(dir: &DataDir, conn: Option<&Connection>, mut rec: Record) -> Record {
    if !rec.belongs_to_a_turn() || rec.prompt_number.is_some() {
        return rec;
    }
    let Some(c) = conn else { return rec };
    let known = match rec.prompt_id() {
        Some(id) => sessions::prompt_number_of(c, &rec.session_id, id)
            .ok()
            .flatten(),
        None => None,
    };
    rec.prompt_number = match known {
        Some(n) => Some(n),
        None if spool::holds_session(dir, &rec.session_id) => None,
        None => sessions::current_prompt_number(c, &rec.session_id).ok(),
    };
    rec
}

/// Opens the data dir's database the way a hook does: created when missing, waiting up to
/// `capture.lock_wait_ms` on other writers, and without the checkpoint on close. A hook is
/// often the last connection to close; the checkpoint then syncs the WAL and the database
/// (measured: a 3 ms hook became an 18 ms one). Without it the next lone connection
/// rebuilds the WAL index from the WAL. SQLite's automatic checkpoint keeps the WAL near
/// 4 MB only while another connection (the worker's) stays open; for lone hooks the hook
/// bounds it itself after writing (`db::bound_wal`), so that cost stays small.
///
/// A fresh database being migrated by another process can look, for an instant, like a
/// foreign one (`db::open` reads the schema version and the table list in two separate
/// snapshots), so a `NotADatabase` refusal is retried once after a short pause; a file
/// that really is not cairn's is refused twice.
///
/// Every lock wait of the connection, together, stays within the hook's budget
/// (`capture.lock_wait_ms`, from the moment it starts opening): not per statement, so a
/// hook that waits to open, then to write, never waits twice its budget. A wait ends at
/// once when the worker lock's holder is stopped (SIGSTOP, a debugger): a frozen worker
/// may hold the write lock for good, and the event is spooled instead of waited out.
pub fn open_for_hook(dir: &DataDir, settings: &Settings) -> Result<Connection> {
    let budget = Duration::from_millis(settings.capture.lock_wait_ms);
    let started = Instant::now();
    let opts = OpenOptions {
        busy_timeout: budget,
        create: true,
        upgrade: false,
    };
    let mut conn = match db::open_data_dir(dir, opts) {
        Err(crate::Error::NotADatabase { .. }) => {
            std::thread::sleep(Duration::from_millis(5 + crate::rand::below(10)));
            db::open_data_dir(dir, opts)?
        }
        other => other?,
    };
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    let lock_path = dir.worker_lock();
    let left = budget.saturating_sub(started.elapsed());
    let mut waited = Duration::ZERO;
    conn.busy_handler(Some(move |attempt: i32| {
        let stopped = attempt % STOPPED_CHECK_EVERY == 0 && holder_stopped(&lock_path);
        match next_pause(attempt, waited, left, stopped) {
            Some(pause) => {
                std::thread::sleep(pause);
                waited += pause;
                true
            }
            None => {
                if stopped {
                    log::warn!(
                        "the database is locked and the worker holding {} is stopped: not waiting for it",
                        lock_path.display()
                    );
                }
                false
            }
        }
    }))?;
    Ok(conn)
}

/// SQLite's own pauses between tries of a busy lock, in ms (its default busy handler's).
const BUSY_PAUSES_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];

/// A waiting hook looks whether the worker lock's holder is stopped at its first try and
/// every this many tries after (about every quarter second once the pauses are long).
const STOPPED_CHECK_EVERY: i32 = 4;

/// The pause before try `attempt + 1` of a busy lock, having waited `waited` of `budget`
/// already; `None` gives up (the event is spooled): the budget is spent, or the lock's
/// likely holder is stopped. Pure.
fn next_pause(
    attempt: i32,
    waited: Duration,
    budget: Duration,
    holder_stopped: bool,
) -> Option<Duration> {
    if holder_stopped || waited >= budget {
        return None;
    }
    let i = usize::try_from(attempt)
        .unwrap_or(0)
        .min(BUSY_PAUSES_MS.len() - 1);
    Some(Duration::from_millis(BUSY_PAUSES_MS[i]).min(budget - waited))
}

/// True when a process holds the worker lock and is stopped.
fn holder_stopped(lock_path: &std::path::Path) -> bool {
    crate::store::lock::holder(lock_path)
        .ok()
        .flatten()
        .is_some_and(|h| crate::store::lock::process_stopped(h.pid))
}

/// The hook's input as read from stdin.
#[derive(Debug, Clone)]
pub struct HookInput<'a> {
    /// The bytes read (all of them, unless `incomplete` says otherwise).
    pub bytes: &'a [u8],
    /// The full length of the input in bytes, read or not.
    pub total_len: u64,
    /// Why the input was not read whole (too large, stdin not closed in time).
    pub incomplete: Option<String>,
    /// An event name given on the command line.
    pub explicit_event: Option<&'a str>,
    /// `CLAUDE_PROJECT_DIR`, the fallback when the payload has no `cwd`.
    pub project_dir: Option<&'a str>,
    /// Why cairn's settings could not be read, when they could not: the settings passed
    /// are then the defaults, and the event is cleaned with the default privacy rules and
    /// spooled, marked, until they can be read (`worker::ingest` applies them then).
    pub settings_error: Option<&'a str>,
}

/// Where an event ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Written to the database.
    Database,
    /// The database could not take it; it waits in this spool file.
    Spooled(PathBuf),
    /// Bad input, kept in the quarantine (or spooled for it).
    Quarantined,
    /// Nothing to store: a skipped tool or an excluded project.
    Nothing,
    /// Neither the database nor the spool could take it (logged).
    Lost,
}

/// What the hook does with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The protocol JSON to print on stdout.
    pub answer: String,
    pub stored: Stored,
}

/// Everything the hook does with one input, except reading it and printing the answer:
/// decode, clean, write (or spool, or quarantine), and render the SessionStart context.
/// Never fails: every problem is logged and answered with the plain protocol answer.
pub fn handle(dir: &DataDir, settings: &Settings, input: &HookInput, now: i64) -> Outcome {
    handle_with(dir, settings, input, None, now).0
}

/// [`handle`] with the database connection already opened (or its opening already failed)
/// by the caller. `None` opens it here when it is first needed: after a prompt's question
/// has left for the worker, which then starts on it while the database opens. Also
/// returns the connection the event was written with, for the caller to close, or to
/// leave to the process exit (see `cairn-hook`).
pub fn handle_with(
    dir: &DataDir,
    settings: &Settings,
    input: &HookInput,
    opened: Option<Result<Connection>>,
    now: i64,
) -> (Outcome, Option<Connection>) {
    let mut opened = opened;
    let mut connect = move || {
        opened
            .take()
            .unwrap_or_else(|| open_for_hook(dir, settings))
    };
    let plain = |stored| {
        let outcome = Outcome {
            answer: hook::PLAIN_ANSWER.to_string(),
            stored,
        };
        (outcome, None)
    };
    let (event, cwd) = match accept(input) {
        Ok(accepted) => accepted,
        Err(rejected) => return plain(rejected.quarantine(dir, settings, input, connect(), now)),
    };
    let place = crate::capture::project::place(std::path::Path::new(&cwd));
    let project = place.name;
    if let Some(why) = input.settings_error {
        // Whether this project is excluded, or this tool skipped, is in the file that
        // cannot be read: keep the event, cleaned by the default rules, out of the
        // database until it can be.
        let Some(mut record) = prepare(&event, &project, &cwd, &CaptureSettings::default(), now)
        else {
            return plain(Stored::Nothing);
        };
        record.settings_unread = true;
        let cause = crate::Error::Settings(why.to_string());
        return plain(spool_record(
            dir,
            &spool::Item::Capture(Box::new(record)),
            &cause,
            now,
        ));
    }
    if is_excluded(&project, &settings.capture) {
        log::debug!(
            "{} of excluded project {project}: not captured",
            event.name()
        );
        return plain(Stored::Nothing);
    }
    if let Event::BeforeTool {
        file,
        common,
        agent_id,
        ..
    } = &event
    {
        // Nothing to store: what is known about the file the call reads or edits, if any.
        let answer = match (file, connect()) {
            (Some(file), Ok(mut c)) => {
                let to = crate::memory::told::Listener::of(&common.session_id, agent_id.as_deref());
                let answer = tell::file(&mut c, settings, &project, to, file, &place.tree, now)
                    .unwrap_or_else(|e| {
                        log::error!("cannot tell what is known about {file}: {e}");
                        hook::PLAIN_ANSWER.to_string()
                    });
                return (
                    Outcome {
                        answer,
                        stored: Stored::Nothing,
                    },
                    Some(c),
                );
            }
            (_, Err(e)) => {
                log::warn!("cannot open the database for a file's memories: {e}");
                hook::PLAIN_ANSWER.to_string()
            }
            (None, _) => hook::PLAIN_ANSWER.to_string(),
        };
        return (
            Outcome {
                answer,
                stored: Stored::Nothing,
            },
            None,
        );
    }
    // The secrets this session showed before are removed from this event too; the ones
    // it shows are remembered for its next events.
    let session_id = &event.common().session_id;
    let mut session = settings
        .capture
        .redact_secrets
        .then(|| fingerprints::load(dir, session_id))
        .flatten();
    if matches!(event, Event::SessionStart { .. }) {
        fingerprints::prune(dir);
    }
    let prepared = prepare_in(
        &event,
        &project,
        &cwd,
        &settings.capture,
        now,
        session.as_mut(),
    );
    if let Some(s) = &session {
        fingerprints::save(dir, session_id, s);
    }
    let Some(mut record) = prepared else {
        log::debug!(
            "{} skipped (capture.skip_tools or cairn's own tool)",
            event.name()
        );
        return plain(Stored::Nothing);
    };
    if let (
        Event::SessionEnd {
            transcript_path, ..
        },
        Action::End { if_known, .. },
    ) = (&event, &mut record.action)
    {
        // No transcript, nothing ever ran (`claude mcp list` ends a session it never
        // started): end a session cairn knows, create none. With a transcript, an unknown
        // session is kept for reconciliation to fill in.
        *if_known = transcript_path
            .as_deref()
            .is_some_and(|p| !std::path::Path::new(p).exists());
    }

    // What the answer needs of the record, which may be moved into the spool.
    let session = record.session_id.clone();
    // A prompt's memories: the worker asked for its meaning now, before the event's write,
    // with the prompt as stored (cleaned of private spans and secrets).
    let question = match &record.action {
        Action::Prompt { text, .. } => tell::prompt_question(dir, settings, &project, text),
        _ => None,
    };
    let mut conn = None;
    let stored = match connect().and_then(|mut c| {
        let r = db::write(&mut c, |tx| {
            if waits_behind_the_spool(dir, tx, &record)? {
                return Ok(None);
            }
            apply(tx, &record, settings.queue.max_attempts).map(Some)
        });
        conn = Some(c);
        r
    }) {
        Ok(Some(applied)) => {
            log::debug!(
                "{} of session {} ({project}): {applied:?}",
                event.name(),
                record.session_id
            );
            Stored::Database
        }
        Ok(None) => {
            let record = with_hook_time_facts(dir, conn.as_ref(), record);
            let why = crate::Error::Invalid(
                "earlier events of its session are still in the spool; kept behind them"
                    .to_string(),
            );
            spool_record(dir, &spool::Item::Capture(Box::new(record)), &why, now)
        }
        Err(e) => {
            let record = with_hook_time_facts(dir, conn.as_ref(), record);
            spool_record(dir, &spool::Item::Capture(Box::new(record)), &e, now)
        }
    };

    // A database the hook could not open to write (a read-only file system): the event
    // is kept outside it, and what is known is still told, read as it is.
    let mut reader = match (&event, &conn) {
        (Event::SessionStart { .. } | Event::UserPrompt { .. }, None) => {
            let wait = std::time::Duration::from_millis(settings.capture.lock_wait_ms);
            db::open_read_only(&dir.db(), wait)
                .inspect_err(|e| log::warn!("cannot read the database either: {e}"))
                .ok()
                .map(|(c, _)| c)
        }
        _ => None,
    };
    let told = match (&event, conn.as_mut().or(reader.as_mut())) {
        (Event::SessionStart { source, .. }, Some(c))
            if *source != StartSource::Resume || settings.capture.context_on_resume =>
        {
            let compacted = *source == StartSource::Compact;
            Some(tell::session_start(
                c, settings, &project, &session, compacted, now,
            ))
        }
        (Event::UserPrompt { .. }, Some(c)) => {
            Some(tell::prompt(c, settings, &session, question, now))
        }
        _ => None,
    };
    let answer = match told {
        Some(Ok(answer)) => answer,
        Some(Err(e)) => {
            log::error!("cannot tell {project}'s memories at {}: {e}", event.name());
            hook::PLAIN_ANSWER.to_string()
        }
        None => hook::PLAIN_ANSWER.to_string(),
    };
    (Outcome { answer, stored }, conn)
}

/// True when the event must go behind events of its session still in the spool, so that
/// the session's events are applied in the order they happened: a new prompt (its number
/// is the count of the prompts before it), or a tool event or turn end whose prompt is not
/// recorded yet (most likely that prompt is in the spool). The spool is only listed in
/// these cases: once per prompt, and rarely otherwise.
fn waits_behind_the_spool(dir: &DataDir, tx: &Transaction, rec: &Record) -> Result<bool> {
    let check = match &rec.action {
        Action::Prompt { .. } => true,
        Action::Tool(_) | Action::TurnEnd(_) => match rec.prompt_id() {
            Some(id) => sessions::prompt_number_of(tx, &rec.session_id, id)?.is_none(),
            None => true,
        },
        _ => false,
    };
    Ok(check && spool::holds_session(dir, &rec.session_id))
}

/// What became of one quarantined input given another try ([`replay`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Replayed {
    /// Written as the event it is (and removed from the quarantine).
    Captured { id: i64, event: String },
    /// Understood, but nothing to store (a skipped tool, an excluded project); removed.
    Nothing { id: i64, event: String },
    /// Still not an event cairn captures; left in the quarantine.
    Rejected { id: i64, reason: String },
    /// The stored copy is not the whole input (cut to its bound, or only partly read), so
    /// it cannot be replayed; left in the quarantine.
    Cut { id: i64 },
    /// No such entry.
    Unknown { id: i64 },
}

/// Gives quarantined inputs another try through the capture path, now that cairn may
/// understand them: each is decoded, cleaned and written exactly as the hook would have
/// written it when it arrived (its time is the entry's), and removed from the quarantine
/// in the same transaction. `ids` empty means every entry, oldest first. The stored copy
/// is already privacy-cleaned; cleaning it again changes nothing.
pub fn replay(conn: &mut Connection, settings: &Settings, ids: &[i64]) -> Result<Vec<Replayed>> {
    let rows = if ids.is_empty() {
        let mut all = quarantine::list(conn, 0)?;
        all.reverse();
        all.into_iter().map(|r| (r.id, Some(r))).collect::<Vec<_>>()
    } else {
        ids.iter()
            .map(|&id| Ok((id, quarantine::get(conn, id)?)))
            .collect::<Result<Vec<_>>>()?
    };
    let mut out = Vec::with_capacity(rows.len());
    for (id, row) in rows {
        let Some(row) = row else {
            out.push(Replayed::Unknown { id });
            continue;
        };
        if quarantine::is_cut(&row) {
            out.push(Replayed::Cut { id });
            continue;
        }
        let event = match hook::decode(row.raw.as_bytes(), None) {
            Ok(e) => e,
            Err(e) => {
                out.push(Replayed::Rejected {
                    id,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let name = event.name().to_string();
        let cwd = event.common().cwd.clone();
        if cwd.is_empty() {
            out.push(Replayed::Rejected {
                id,
                reason: DecodeError::Missing("cwd").to_string(),
            });
            continue;
        }
        let project = crate::capture::project::detect(std::path::Path::new(&cwd));
        let record = if is_excluded(&project, &settings.capture) {
            None
        } else {
            prepare(&event, &project, &cwd, &settings.capture, row.created_at)
        };
        db::write(conn, |tx| {
            if let Some(rec) = &record {
                apply(tx, rec, settings.queue.max_attempts)?;
            }
            quarantine::remove(tx, id)
        })?;
        out.push(match record {
            Some(_) => Replayed::Captured { id, event: name },
            None => Replayed::Nothing { id, event: name },
        });
    }
    Ok(out)
}

fn spool_record(dir: &DataDir, item: &spool::Item, cause: &crate::Error, now: i64) -> Stored {
    let in_data_dir = match spool::write(dir, item, now) {
        Ok(path) => {
            log::warn!(
                "database not writable ({cause}); event spooled to {}",
                path.display()
            );
            return Stored::Spooled(path);
        }
        Err(e) => e,
    };
    // The data dir cannot take even a spool file (a read-only or failing disk): the
    // user's private fallback keeps the event until the data dir is writable again.
    let outside = match crate::store::fallback::ensure(dir)
        .and_then(|fb| spool::write(&fb, item, now))
    {
        Ok(path) => {
            log::warn!(
                "database not writable ({cause}) and cannot spool in the data dir ({in_data_dir}); event kept in {}",
                path.display()
            );
            return Stored::Spooled(path);
        }
        Err(e) => e,
    };
    log::error!(
        "event lost: database not writable ({cause}), cannot spool ({in_data_dir}), nor outside the data dir ({outside})"
    );
    let why = format!("database not writable ({cause}); cannot spool ({in_data_dir})");
    let recorded = crate::store::incidents::record_lost(dir, &why, now).or_else(|e| {
        crate::store::fallback::ensure(dir)
            .and_then(|fb| crate::store::incidents::record_lost(&fb, &why, now))
            .map_err(|_| e)
    });
    if let Err(e) = recorded {
        log::error!("cannot record the lost event for `cairn status`: {e}");
    }
    Stored::Lost
}

/// The event of an input and its working directory (`CLAUDE_PROJECT_DIR` when the payload
/// has none), or why the input goes to the quarantine: it was read only in part, it is not
/// an event cairn captures, or it has no working directory.
fn accept(input: &HookInput) -> std::result::Result<(Event, String), Rejected> {
    if let Some(why) = &input.incomplete {
        return Err(Rejected {
            event: hook::sniff_name(input.bytes),
            reason: why.clone(),
            uncaptured: false,
        });
    }
    let event = hook::decode(input.bytes, input.explicit_event).map_err(|e| {
        let (event, uncaptured) = match &e {
            DecodeError::NotCaptured(n) => (Some(n.clone()), true),
            _ => (hook::sniff_name(input.bytes), false),
        };
        Rejected {
            event,
            reason: e.to_string(),
            uncaptured,
        }
    })?;
    if !event.common().ignored.is_empty() {
        log::warn!(
            "{}: {} field(s) of the wrong type ignored: {}",
            event.name(),
            event.common().ignored.len(),
            event.common().ignored.join(", ")
        );
    }
    let cwd = match (event.common().cwd.as_str(), input.project_dir) {
        ("", Some(dir)) if !dir.is_empty() => hook::cap_id(dir.to_string(), hook::MAX_PATH_BYTES),
        ("", _) => {
            // Dropped for its type, or absent: the reason says which.
            let reason = if event.common().ignored.contains(&"cwd") {
                DecodeError::WrongType("cwd")
            } else {
                DecodeError::Missing("cwd")
            };
            return Err(Rejected {
                event: Some(event.name().to_string()),
                reason: reason.to_string(),
                uncaptured: false,
            });
        }
        (cwd, _) => cwd.to_string(),
    };
    Ok((event, cwd))
}

/// An input the hook does not write as an event, and what it could tell of it: the one
/// way into the quarantine.
#[derive(Debug)]
struct Rejected {
    /// The event's name, when it could be read.
    event: Option<String>,
    reason: String,
    /// A well-formed event of a kind cairn does not capture.
    uncaptured: bool,
}

impl Rejected {
    /// Keeps the input in the quarantine, or spools it for the quarantine when the
    /// database cannot take it.
    fn quarantine(
        self,
        dir: &DataDir,
        settings: &Settings,
        input: &HookInput,
        conn: Result<Connection>,
        now: i64,
    ) -> Stored {
        let mut entry = quarantine::Entry::new(
            self.event,
            self.reason,
            input.bytes,
            input.total_len,
            settings.capture.redact_secrets,
        );
        entry.uncaptured = self.uncaptured;
        log::warn!(
            "input quarantined ({} bytes, event {}): {}",
            entry.raw_len,
            entry.event.as_deref().unwrap_or("unknown"),
            entry.reason
        );
        let written =
            conn.and_then(|mut c| db::write(&mut c, |tx| quarantine::add(tx, &entry, now)));
        match written {
            Ok(_) => Stored::Quarantined,
            Err(e) => match spool_record(dir, &spool::Item::Quarantine(entry), &e, now) {
                Stored::Spooled(_) => Stored::Quarantined,
                other => other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::testing::{env, q, run, settings};
    use crate::queue::payload::{ToolEvent, TurnEnd};

    #[test]
    fn lock_waits_stay_within_the_budget_and_end_when_the_holder_is_stopped() {
        let ms = Duration::from_millis;
        let budget = ms(100);
        assert_eq!(next_pause(0, ms(0), budget, false), Some(ms(1)));
        assert_eq!(next_pause(500, ms(0), budget, false), Some(ms(100)));
        assert_eq!(next_pause(500, ms(70), budget, false), Some(ms(30)));
        assert_eq!(next_pause(3, ms(100), budget, false), None);
        assert_eq!(next_pause(0, ms(0), budget, true), None);
        // Every pause together never passes the budget.
        let mut waited = ms(0);
        let mut attempt = 0;
        while let Some(p) = next_pause(attempt, waited, budget, false) {
            waited += p;
            attempt += 1;
        }
        assert_eq!(waited, budget);
    }

    #[test]
    fn a_hook_gives_up_on_a_lock_after_its_budget_whatever_it_waited_for() {
        let (_t, dd) = env();
        let mut s = settings();
        s.capture.lock_wait_ms = 150;
        let mut holder = open_for_hook(&dd, &s).expect("open");
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("hold the write lock");
        let input = r#"{"hook_event_name":"SessionStart","session_id":"s-budget","cwd":"/tmp/acme","source":"startup"}"#;
        let out = handle(
            &dd,
            &s,
            &HookInput {
                bytes: input.as_bytes(),
                total_len: input.len() as u64,
                incomplete: None,
                explicit_event: None,
                project_dir: None,
                settings_error: None,
            },
            1_000,
        );
        assert!(matches!(out.stored, Stored::Spooled(_)), "{out:?}");
        drop(tx);
    }

    #[test]
    fn quarantined_inputs_are_replayed_once_understood() {
        let (_t, dd) = env();
        let s = settings();
        let mut conn = open_for_hook(&dd, &s).expect("open");
        let add = |conn: &mut Connection, raw: &str, raw_len: u64, at: i64| {
            let e = quarantine::Entry::new(None, "old reason", raw.as_bytes(), raw_len, true);
            db::write(conn, |tx| quarantine::add(tx, &e, at)).expect("add")
        };
        // What an older cairn refused: a numeric prompt_id.
        let tool = r#"{"hook_event_name":"PostToolUse","session_id":"s1","cwd":"/tmp/acme","tool_name":"Bash","tool_use_id":"t1","prompt_id":7,"tool_input":{"command":"ls","password":"hunter2"}}"#;
        let ok = add(&mut conn, tool, tool.len() as u64, 1_000);
        let still_bad = add(&mut conn, "{nope", 5, 2_000);
        let cut = add(&mut conn, tool, 10 << 20, 3_000);
        let no_cwd = add(
            &mut conn,
            r#"{"hook_event_name":"Stop","session_id":"s1"}"#,
            10,
            4_000,
        );
        let got = replay(&mut conn, &s, &[]).expect("replay");
        assert_eq!(
            got,
            vec![
                Replayed::Captured {
                    id: ok,
                    event: "PostToolUse".into()
                },
                Replayed::Rejected {
                    id: still_bad,
                    reason: "input is not valid JSON: key must be a string at line 1 column 2"
                        .into()
                },
                Replayed::Cut { id: cut },
                Replayed::Rejected {
                    id: no_cwd,
                    reason: "missing field cwd".into()
                },
            ]
        );
        let (payload, at): (String, i64) = conn
            .query_row(
                "SELECT payload, created_at FROM pending_messages",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("job");
        assert_eq!(at, 1_000);
        assert!(payload.contains("[REDACTED]") && !payload.contains("hunter2"));
        assert_eq!(q(&conn, "SELECT count(*) FROM quarantine"), 3);
        // By id; a second replay of the same input finds it gone.
        assert_eq!(
            replay(&mut conn, &s, &[ok, cut]).expect("replay"),
            vec![Replayed::Unknown { id: ok }, Replayed::Cut { id: cut }]
        );
    }

    #[test]
    fn an_end_with_no_transcript_behind_it_creates_no_session() {
        let (t, dd) = env();
        let s = settings();
        let end = |sid: &str, transcript: &std::path::Path| {
            format!(
                r#"{{"hook_event_name":"SessionEnd","session_id":"{sid}","cwd":"/nowhere/acme-api","reason":"other","transcript_path":"{}"}}"#,
                transcript.display()
            )
        };
        // `claude mcp list`: an end for a session that never ran; its transcript was never
        // written.
        let never = t.path().join("never.jsonl");
        assert_eq!(
            run(&dd, &s, &end("listing", &never), 1).stored,
            Stored::Database
        );
        let conn = open_for_hook(&dd, &s).expect("open");
        assert_eq!(q(&conn, "SELECT count(*) FROM sessions"), 0);
        // A session that ran, unseen by cairn: kept, for reconciliation to fill in.
        let ran = t.path().join("ran.jsonl");
        std::fs::write(&ran, "{}\n").expect("transcript");
        run(&dd, &s, &end("unseen", &ran), 2);
        assert_eq!(
            q(
                &conn,
                "SELECT count(*) FROM sessions WHERE session_id = 'unseen' AND status = 'ended'"
            ),
            1
        );
        // A session cairn knows is ended, whatever became of its transcript.
        run(&dd, &s, &ev("SessionStart", r#","source":"startup""#), 3);
        run(&dd, &s, &end(SID, &never), 4);
        assert_eq!(
            q(
                &conn,
                "SELECT count(*) FROM sessions WHERE session_id = 's1' AND status = 'ended'"
            ),
            1
        );
        assert_eq!(q(&conn, "SELECT count(*) FROM sessions"), 2);
    }

    const SID: &str = "s1";

    fn ev(name: &str, extra: &str) -> String {
        format!(
            r#"{{"hook_event_name":"{name}","session_id":"{SID}","cwd":"/nowhere/acme-api","prompt_id":"p"{extra}}}"#
        )
    }

    #[test]
    fn a_turn_becomes_a_session_a_prompt_and_jobs() {
        let (_t, dd) = env();
        let s = settings();
        let o = run(&dd, &s, &ev("SessionStart", r#","source":"startup""#), 1);
        assert_eq!(o.stored, Stored::Database);
        assert!(o.answer.contains("hookSpecificOutput"));
        // Tool before any prompt: prompt number 0.
        run(
            &dd,
            &s,
            &ev(
                "PostToolUse",
                r#","tool_name":"Bash","tool_use_id":"t0","tool_input":{"command":"ls"},"tool_response":{"stdout":"x"}"#,
            ),
            2,
        );
        let up = ev(
            "UserPromptSubmit",
            r#","prompt":"fix <private>pw</private> it""#,
        )
        .replace("\"prompt_id\":\"p\"", "\"prompt_id\":\"p1\"");
        run(&dd, &s, &up, 3);
        run(&dd, &s, &up, 4); // the same prompt again (a spool replay): one row
        run(
            &dd,
            &s,
            &ev(
                "UserPromptSubmit",
                r#","prompt":"<task-notification>done</task-notification>""#,
            )
            .replace("\"prompt_id\":\"p\"", "\"prompt_id\":\"p2\""),
            5,
        );
        let tool = ev(
            "PostToolUse",
            r#","tool_name":"Read","tool_use_id":"t1","tool_input":{"file_path":"a"},"tool_response":"ok""#,
        );
        run(&dd, &s, &tool, 6);
        run(&dd, &s, &tool, 7);
        run(
            &dd,
            &s,
            &ev(
                "PostToolUse",
                r#","tool_name":"TodoWrite","tool_use_id":"t2""#,
            ),
            8,
        );
        run(
            &dd,
            &s,
            &ev("Stop", r#","last_assistant_message":"first""#),
            9,
        );
        run(
            &dd,
            &s,
            &ev("Stop", r#","last_assistant_message":"final""#),
            10,
        );
        let o = run(&dd, &s, &ev("SessionEnd", r#","reason":"other""#), 11);
        assert_eq!(o.answer, hook::PLAIN_ANSWER);

        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(q(&conn, "SELECT prompt_counter FROM sessions"), 1);
        assert_eq!(
            q(
                &conn,
                "SELECT count(*) FROM sessions WHERE status = 'ended' AND project = 'acme-api'"
            ),
            1
        );
        assert_eq!(q(&conn, "SELECT count(*) FROM user_prompts"), 1);
        let text: String = conn
            .query_row("SELECT prompt_text FROM user_prompts", [], |r| r.get(0))
            .expect("text");
        assert_eq!(text, "fix  it");
        assert_eq!(
            q(
                &conn,
                "SELECT count(*) FROM pending_messages WHERE kind = 'observation'"
            ),
            2
        );
        assert_eq!(
            q(
                &conn,
                "SELECT prompt_number FROM pending_messages WHERE dedupe_key = 'tool:t0'"
            ),
            0
        );
        assert_eq!(
            q(
                &conn,
                "SELECT prompt_number FROM pending_messages WHERE dedupe_key = 'tool:t1'"
            ),
            1
        );
        let payload: String = conn
            .query_row(
                "SELECT payload FROM pending_messages WHERE dedupe_key = 'turn:s1:1'",
                [],
                |r| r.get(0),
            )
            .expect("turn");
        let turn: TurnEnd = serde_json::from_str(&payload).expect("payload");
        assert_eq!(turn.last_assistant_message, "final");
        let payload: String = conn
            .query_row(
                "SELECT payload FROM pending_messages WHERE dedupe_key = 'tool:t1'",
                [],
                |r| r.get(0),
            )
            .expect("tool");
        let tool: ToolEvent = serde_json::from_str(&payload).expect("payload");
        assert_eq!(tool.tool_name, "Read");
        assert_eq!(tool.occurred_at, 6);
        assert_eq!(tool.cwd, "/nowhere/acme-api");
        assert_eq!(q(&conn, "SELECT count(*) FROM quarantine"), 0);
    }

    #[test]
    fn resume_is_quiet_unless_asked_and_excluded_projects_write_nothing() {
        let (_t, dd) = env();
        let mut s = settings();
        let resume = ev("SessionStart", r#","source":"resume""#);
        assert_eq!(run(&dd, &s, &resume, 1).answer, hook::PLAIN_ANSWER);
        s.capture.context_on_resume = true;
        assert!(
            run(&dd, &s, &resume, 2)
                .answer
                .contains("additionalContext")
        );

        let (_t2, dd2) = env();
        s.capture.excluded_projects = vec!["acme-*".into()];
        let o = run(&dd2, &s, &ev("SessionStart", ""), 1);
        assert_eq!(o.stored, Stored::Nothing);
        assert!(!dd2.db().exists());
        // With the connection opened ahead (as the hook does), still nothing is written.
        let conn = open_for_hook(&dd2, &s);
        let input = ev("UserPromptSubmit", r#","prompt":"hi""#);
        let (o, _) = handle_with(
            &dd2,
            &s,
            &HookInput {
                bytes: input.as_bytes(),
                total_len: input.len() as u64,
                incomplete: None,
                explicit_event: None,
                project_dir: None,
                settings_error: None,
            },
            Some(conn),
            2,
        );
        assert_eq!(o.stored, Stored::Nothing);
        let conn = db::open_data_dir(&dd2, OpenOptions::default()).expect("open");
        assert_eq!(q(&conn, "SELECT count(*) FROM sessions"), 0);
        assert_eq!(q(&conn, "SELECT count(*) FROM user_prompts"), 0);
    }

    #[test]
    fn bad_inputs_are_quarantined() {
        let (_t, dd) = env();
        let s = settings();
        for (input, reason) in [
            ("", "empty input"),
            ("{not json", "not valid JSON"),
            (
                r#"{"hook_event_name":"PostToolBatch","session_id":"s"}"#,
                "not captured",
            ),
            (
                r#"{"hook_event_name":"Stop","session_id":"s"}"#,
                "missing field cwd",
            ),
        ] {
            let o = run(&dd, &s, input, 1);
            assert_eq!(o.stored, Stored::Quarantined, "{input}");
            assert_eq!(o.answer, hook::PLAIN_ANSWER);
            let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
            let rows = quarantine::list(&conn, 1).expect("list");
            let kind: String = conn
                .query_row(
                    "SELECT kind FROM quarantine ORDER BY id DESC LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .expect("kind");
            let expected = if reason == "not captured" {
                "uncaptured"
            } else {
                "invalid"
            };
            assert_eq!(kind, expected, "{input}");
            assert!(rows[0].reason.contains(reason), "{}", rows[0].reason);
        }
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let rows = quarantine::list(&conn, 0).expect("list");
        assert_eq!(rows[1].event.as_deref(), Some("PostToolBatch"));
        assert_eq!(q(&conn, "SELECT count(*) FROM sessions"), 0);
    }
}

#[cfg(test)]
mod told_tests {
    use super::*;
    use crate::capture::testing::{env, q, run};
    use crate::memory::observations::{NewObservation, insert_observation};
    use crate::memory::rows::ObservationContent;
    use crate::store::db::OpenOptions;

    const T0: i64 = 1_790_000_000_000;

    fn remember(dd: &DataDir, kind: &str, title: &str, files: &[&str], at: i64) -> i64 {
        let mut conn = db::open_data_dir(dd, OpenOptions::default()).expect("open");
        db::write(&mut conn, |tx| {
            sessions::ensure(tx, "old", "web", "/nowhere/web", at)?;
            let o = NewObservation {
                session_id: Some("old".into()),
                project: "web".into(),
                prompt_number: Some(1),
                kind: kind.into(),
                origin: "model".into(),
                created_at: at,
                content: ObservationContent {
                    title: title.into(),
                    narrative: format!("{title}. The narrative."),
                    files_modified: files.iter().map(|f| f.to_string()).collect(),
                    ..Default::default()
                },
                ..Default::default()
            };
            Ok(insert_observation(tx, &o)?.id())
        })
        .expect("remember")
    }

    /// The summary of turn `number` of an old session of project web.
    fn summarize(dd: &DataDir, number: i64, request: &str, completed: &str, at: i64) -> i64 {
        let mut conn = db::open_data_dir(dd, OpenOptions::default()).expect("open");
        db::write(&mut conn, |tx| {
            let turn = crate::memory::observations::NewSummary {
                session_id: "old".into(),
                project: "web".into(),
                prompt_number: number,
                request: request.into(),
                completed: completed.into(),
                origin: "model".into(),
                created_at: at,
                ..Default::default()
            };
            Ok(crate::memory::observations::upsert_summary(tx, &turn)?.id())
        })
        .expect("summary")
    }

    /// A PreToolUse of Read on `path` in project web, by `agent` (a subagent) or the main
    /// conversation.
    fn read_event(session: &str, path: &str, agent: Option<&str>) -> String {
        let mut v = serde_json::json!({
            "hook_event_name": "PreToolUse", "session_id": session, "cwd": "/nowhere/web",
            "tool_name": "Read", "tool_use_id": "t1",
            "tool_input": {"file_path": path},
        });
        if let Some(a) = agent {
            v["agent_id"] = a.into();
            v["agent_type"] = "Explore".into();
        }
        v.to_string()
    }

    fn prompt(session: &str, id: &str, text: &str) -> String {
        serde_json::json!({
            "hook_event_name": "UserPromptSubmit", "session_id": session,
            "cwd": "/nowhere/web", "prompt_id": id, "prompt": text,
        })
        .to_string()
    }

    /// A SessionStart of `session` in project web, from `source` (startup, compact…).
    fn start(session: &str, source: &str) -> String {
        format!(
            r#"{{"hook_event_name":"SessionStart","session_id":"{session}","cwd":"/nowhere/web","source":"{source}"}}"#
        )
    }

    /// An old fix of the login tests (about src/session.rs) and a newer feature: the
    /// memory a prompt about the tests finds, and the one the index shows first.
    fn login_fix_and_dark_mode(dd: &DataDir) -> (i64, i64) {
        let fix = remember(
            dd,
            "bugfix",
            "Login tests failed on CI because the session expiry read the wall clock",
            &["src/session.rs"],
            T0 - 20 * 86_400_000,
        );
        (
            fix,
            remember(dd, "feature", "Dark mode for the settings page", &[], T0),
        )
    }

    fn context_of(answer: &str, event: &str) -> Option<String> {
        let v: serde_json::Value = serde_json::from_str(answer).expect("json");
        let out = v.get("hookSpecificOutput")?;
        assert_eq!(out["hookEventName"], event);
        assert!(out.get("permissionDecision").is_none());
        out["additionalContext"].as_str().map(str::to_string)
    }

    #[test]
    fn a_prompt_gets_the_memory_that_answers_it_once_per_session() {
        let (_t, dd) = env();
        let mut s = Settings::default();
        s.context.max_observations = 1;
        // What is given once, not where the threshold lies: that is tested end to end with
        // the real model (`tests/e2e/prompt_recall.rs`); by words alone in a store of two
        // memories the answer's relevance lies between 0.35 and 0.5.
        s.recall.min_relevance = 0.3;
        let (fix, recent) = login_fix_and_dark_mode(&dd);
        let start = r#"{"hook_event_name":"SessionStart","session_id":"s1","cwd":"/nowhere/web","source":"startup"}"#;
        let o = run(&dd, &s, start, T0);
        let index = context_of(&o.answer, "SessionStart").expect("index");
        assert!(index.contains(&format!("#{recent} ")), "{index}");
        assert!(!index.contains(&format!("#{fix} ")), "{index}");

        let ask = prompt("s1", "p1", "why do the login tests fail on CI again?");
        let o = run(&dd, &s, &ask, T0 + 1);
        assert_eq!(o.stored, Stored::Database);
        let given = context_of(&o.answer, "UserPromptSubmit").expect("memories");
        assert!(given.contains(&format!("- {fix} bugfix ")), "{given}");
        assert!(given.contains("get_observations"), "{given}");
        assert!(given.starts_with("<cairn-context>"), "{given}");

        // Asked again, and about what the index showed: nothing new to give; both stored.
        let o = run(
            &dd,
            &s,
            &prompt("s1", "p2", "login tests failing on CI"),
            T0 + 2,
        );
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
        let o = run(
            &dd,
            &s,
            &prompt("s1", "p3", "dark mode for the settings page"),
            T0 + 3,
        );
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
        // Not the user's prompt, and an unrelated one: nothing.
        for (i, text) in ["/compact", "run the tests", "commit this"]
            .iter()
            .enumerate()
        {
            let o = run(&dd, &s, &prompt("s2", &format!("q{i}"), text), T0 + 4);
            assert_eq!(o.answer, hook::PLAIN_ANSWER, "{text}");
        }
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(q(&conn, "SELECT COUNT(*) FROM user_prompts"), 6);
        assert_eq!(
            q(
                &conn,
                "SELECT COUNT(*) FROM memory_given WHERE moment = 'prompt'"
            ),
            1
        );

        // A private span is never searched for; an excluded project is told nothing.
        let private = "<private>why do the login tests fail on CI</private> hello";
        let o = run(&dd, &s, &prompt("s3", "x1", private), T0 + 5);
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
        s.capture.excluded_projects = vec!["web".into()];
        let o = run(&dd, &s, &ask.replace("s1", "s4"), T0 + 6);
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
        s.capture.excluded_projects.clear();
        s.recall.at_prompt = false;
        let o = run(&dd, &s, &ask.replace("s1", "s5"), T0 + 7);
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
    }

    #[test]
    fn an_index_later_in_a_session_leaves_out_what_the_session_was_given() {
        let (_t, dd) = env();
        let mut s = Settings::default();
        s.context.max_observations = 1;
        s.recall.min_relevance = 0.3;
        let older = remember(
            &dd,
            "discovery",
            "Font rendering in the PDF export drops ligatures",
            &[],
            T0 - 20 * 86_400_000,
        );
        let fix = remember(
            &dd,
            "bugfix",
            "Login tests failed on CI because the session expiry read the wall clock",
            &["src/session.rs"],
            T0 - 10 * 86_400_000,
        );
        let recent = remember(&dd, "feature", "Dark mode for the settings page", &[], T0);
        let index = |o: &Outcome| context_of(&o.answer, "SessionStart").expect("index");
        let first = index(&run(&dd, &s, &start("s1", "startup"), T0));
        assert!(first.contains(&format!("#{recent} ")), "{first}");
        let o = run(
            &dd,
            &s,
            &prompt("s1", "p1", "why do the login tests fail on CI again?"),
            T0 + 1,
        );
        let given = context_of(&o.answer, "UserPromptSubmit").expect("memories");
        assert!(given.contains(&format!("- {fix} bugfix ")), "{given}");

        // A resumed session, shown the index again, keeps its conversation: what its first
        // index showed and what its prompt was given are left out, the next memory takes
        // their place.
        s.capture.context_on_resume = true;
        let again = index(&run(&dd, &s, &start("s1", "resume"), T0 + 2));
        assert!(again.contains(&format!("#{older} ")), "{again}");
        assert!(!again.contains(&format!("#{recent} ")), "{again}");
        assert!(!again.contains(&format!("#{fix} ")), "{again}");
        // Another session is shown the newest again.
        let other = index(&run(&dd, &s, &start("s2", "startup"), T0 + 3));
        assert!(other.contains(&format!("#{recent} ")), "{other}");
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        assert_eq!(
            q(
                &conn,
                "SELECT COUNT(*) FROM (SELECT 1 FROM memory_given
                 GROUP BY session_id, kind, memory_id HAVING COUNT(*) > 1)"
            ),
            0
        );
    }

    /// A compaction replaces the conversation with a summary of it: the index after it is
    /// the one a new session gets, and a prompt or a file gives again what it was given
    /// before; a subagent keeps its own context, and what was given still counts.
    #[test]
    fn after_a_compaction_the_session_may_be_given_again() {
        let (_t, dd) = env();
        let mut s = Settings::default();
        s.context.max_observations = 1;
        s.recall.min_relevance = 0.3;
        let (fix, recent) = login_fix_and_dark_mode(&dd);
        let start = |source: &str| start("s1", source);
        let index = |o: &Outcome| context_of(&o.answer, "SessionStart").unwrap_or_default();
        let ask = |id: &str| prompt("s1", id, "why do the login tests fail on CI again?");
        let file = "/nowhere/web/src/session.rs";
        let told = |o: &Outcome, event: &str| context_of(&o.answer, event).unwrap_or_default();

        assert!(index(&run(&dd, &s, &start("startup"), T0)).contains(&format!("#{recent} ")));
        let given = told(&run(&dd, &s, &ask("p1"), T0 + 1), "UserPromptSubmit");
        assert!(given.contains(&format!("- {fix} bugfix ")), "{given}");
        let read = told(
            &run(&dd, &s, &read_event("s1", file, None), T0 + 2),
            "PreToolUse",
        );
        assert!(read.is_empty(), "the prompt gave it: {read}");
        let sub = told(
            &run(&dd, &s, &read_event("s1", file, Some("a1")), T0 + 3),
            "PreToolUse",
        );
        assert!(sub.contains(&format!("- {fix} bugfix ")), "{sub}");
        // Before the compaction nothing is given twice.
        let twice = told(&run(&dd, &s, &ask("p2"), T0 + 4), "UserPromptSubmit");
        assert!(!twice.contains(&format!("{fix} ")), "{twice}");

        let again = index(&run(&dd, &s, &start("compact"), T0 + 5));
        assert!(again.contains(&format!("#{recent} ")), "{again}");
        let given = told(&run(&dd, &s, &ask("p3"), T0 + 6), "UserPromptSubmit");
        assert!(given.contains(&format!("- {fix} bugfix ")), "{given}");
        // Given again at the prompt, so not once more at the file; the subagent was told.
        let read = told(
            &run(&dd, &s, &read_event("s1", file, None), T0 + 7),
            "PreToolUse",
        );
        assert!(read.is_empty(), "{read}");
        let sub = told(
            &run(&dd, &s, &read_event("s1", file, Some("a1")), T0 + 8),
            "PreToolUse",
        );
        assert!(sub.is_empty(), "{sub}");

        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let given = |sql: &str| q(&conn, &format!("SELECT COUNT(*) FROM memory_given {sql}"));
        assert_eq!(
            given("WHERE retired_at IS NOT NULL"),
            2,
            "the index's and the prompt's"
        );
        let counted: u64 = crate::memory::told::totals_since(&conn, 0)
            .expect("totals")
            .iter()
            .map(|t| t.memories)
            .sum();
        assert_eq!(
            counted, 5,
            "two indexes, two prompts and the subagent's file"
        );
    }

    /// The index's "Last turn" is given like its observations: a prompt of the session that
    /// it answers does not give it again, nor does the index on a resume; another session
    /// is shown it.
    #[test]
    fn the_last_turn_in_the_index_is_given_once_per_session() {
        let (_t, dd) = env();
        let mut s = Settings::default();
        s.recall.min_relevance = 0.0;
        remember(&dd, "feature", "Dark mode for the settings page", &[], T0);
        let summary = summarize(
            &dd,
            1,
            "Rate-limit the login endpoint",
            "Login attempts are limited to 5 a minute per address",
            T0,
        );
        let first = run(&dd, &s, &start("s1", "startup"), T0 + 1);
        let index = context_of(&first.answer, "SessionStart").expect("index");
        assert!(index.contains("## Last turn"), "{index}");
        let o = run(
            &dd,
            &s,
            &prompt("s1", "p1", "how is the login endpoint rate-limited?"),
            T0 + 2,
        );
        let given = context_of(&o.answer, "UserPromptSubmit").unwrap_or_default();
        assert!(!given.contains(&format!("S{summary} ")), "{given}");
        s.capture.context_on_resume = true;
        let again = run(&dd, &s, &start("s1", "resume"), T0 + 3);
        let again = context_of(&again.answer, "SessionStart").unwrap_or_default();
        assert!(!again.contains("## Last turn"), "{again}");
        let other = run(&dd, &s, &start("s2", "startup"), T0 + 4);
        let other = context_of(&other.answer, "SessionStart").expect("index");
        assert!(other.contains("## Last turn"), "{other}");
        // Without the index having shown it, the prompt gives it.
        let o = run(
            &dd,
            &s,
            &prompt("s3", "p1", "how is the login endpoint rate-limited?"),
            T0 + 5,
        );
        let given = context_of(&o.answer, "UserPromptSubmit").expect("memories");
        assert!(given.contains(&format!("S{summary} ")), "{given}");
    }

    #[test]
    fn a_read_is_told_about_its_file_once_and_never_stored_or_changed() {
        let (_t, dd) = env();
        let s = Settings::default();
        let fix = remember(
            &dd,
            "bugfix",
            "Session expiry reads the injected clock",
            &["src/session.rs"],
            T0,
        );
        let read = |session: &str, path: &str| read_event(session, path, None);
        let jobs = |dd: &DataDir| {
            let conn = db::open_data_dir(dd, OpenOptions::default()).expect("open");
            q(&conn, "SELECT COUNT(*) FROM pending_messages")
        };
        let before = jobs(&dd);
        let o = run(&dd, &s, &read("s1", "/nowhere/web/src/session.rs"), T0);
        assert_eq!(o.stored, Stored::Nothing);
        let told = context_of(&o.answer, "PreToolUse").expect("told");
        assert!(told.contains(&format!("- {fix} bugfix")), "{told}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&o.answer).expect("json")["hookSpecificOutput"]
                .as_object()
                .expect("object")
                .len(),
            2,
            "only the event's name and the context: the call itself is left as it is"
        );
        let again = run(&dd, &s, &read("s1", "/nowhere/web/src/session.rs"), T0 + 1);
        assert_eq!(again.answer, hook::PLAIN_ANSWER);
        let other = run(&dd, &s, &read("s1", "/nowhere/web/src/other.rs"), T0 + 2);
        assert_eq!(other.answer, hook::PLAIN_ANSWER);
        assert_eq!(jobs(&dd), before, "nothing stored for a call about to run");
        let mut off = Settings::default();
        off.recall.at_file = false;
        let o = run(
            &dd,
            &off,
            &read("s2", "/nowhere/web/src/session.rs"),
            T0 + 3,
        );
        assert_eq!(o.answer, hook::PLAIN_ANSWER);
    }

    /// A question about the past in so many words is answered from a small, young store:
    /// the query model, trained on changelog lines against everyday requests, would rate
    /// it as unlikely to be about the past as an instruction.
    #[test]
    fn a_question_about_what_was_decided_is_answered_from_a_young_store() {
        let (_t, dd) = env();
        let s = Settings::default();
        let hashing = remember(
            &dd,
            "decision",
            "Passwords are hashed with argon2id, not bcrypt",
            &["src/auth/passwords.py"],
            T0,
        );
        remember(&dd, "feature", "Upload limit raised to 20 MB", &[], T0 + 1);
        remember(
            &dd,
            "bugfix",
            "Session cookie marked SameSite=Lax",
            &[],
            T0 + 2,
        );
        let asked = |id: &str, text: &str| {
            let o = run(&dd, &s, &prompt("s1", id, text), T0 + 10);
            context_of(&o.answer, "UserPromptSubmit").unwrap_or_default()
        };
        let given = asked("p1", "what did we decide about password hashing?");
        assert!(given.contains(&format!("- {hashing} decision")), "{given}");

        // An earlier turn that asked about something else in the same words is not what a
        // question is about: its topic is searched, not its framing.
        let cors = remember(
            &dd,
            "decision",
            "CORS allows only app.acme.dev, with credentials",
            &[],
            T0 + 3,
        );
        let framing = summarize(
            &dd,
            2,
            "what did we do earlier about brute force protection on login?",
            "done",
            T0 + 4,
        );
        let given = asked("p2", "what did we do earlier about CORS?");
        assert!(given.contains(&format!("- {cors} decision")), "{given}");
        assert!(!given.contains(&format!("S{framing} ")), "{given}");
        // Asked of the project's ways in another session, without a word of the past.
        let o = run(
            &dd,
            &s,
            &prompt("s2", "p1", "how do we handle CORS?"),
            T0 + 11,
        );
        let given = context_of(&o.answer, "UserPromptSubmit").unwrap_or_default();
        assert!(given.contains(&format!("- {cors} decision")), "{given}");
    }

    #[test]
    fn a_subagent_is_told_about_a_file_apart_from_its_main_conversation() {
        let (_t, dd) = env();
        let s = Settings::default();
        let fix = remember(
            &dd,
            "bugfix",
            "Session expiry reads the injected clock",
            &["src/session.rs"],
            T0,
        );
        let read = |agent| read_event("s1", "/nowhere/web/src/session.rs", agent);
        let told = |o: &Outcome| context_of(&o.answer, "PreToolUse");
        let main = run(&dd, &s, &read(None), T0);
        assert!(told(&main).is_some_and(|t| t.contains(&format!("- {fix} bugfix"))));
        // A subagent starts with a context of its own: what the main conversation was told
        // is not in it, so it is told too, once; and a second subagent as well.
        let sub = run(&dd, &s, &read(Some("ag1")), T0 + 1);
        assert!(told(&sub).is_some_and(|t| t.contains(&format!("- {fix} bugfix"))));
        assert_eq!(
            run(&dd, &s, &read(Some("ag1")), T0 + 2).answer,
            hook::PLAIN_ANSWER
        );
        assert!(told(&run(&dd, &s, &read(Some("ag2")), T0 + 3)).is_some());
        assert_eq!(run(&dd, &s, &read(None), T0 + 4).answer, hook::PLAIN_ANSWER);
    }
}
