//! What the hook tells Claude beside an event, once the event is stored: the SessionStart
//! index (`recall::context`), the memories that may answer a prompt of the user's and
//! those about a file before it is read or edited (`recall::moment`). What it gives is
//! recorded (`memory::told`) so that a session is never given a memory twice.
//!
//! A prompt's memories are found by words in the hook's own process, or by meaning as
//! well when the running worker answers within `recall.worker_deadline_ms`
//! (`recall::moment::ask` before the event is stored, `find_asked` after, through
//! `recall::ask`); no model is loaded here. Every failure is logged and gives nothing:
//! the event was stored before, and the hook's answer is then its plain answer.

use std::time::Duration;

use rusqlite::Connection;

use crate::capture::hook::{self, EventName};
use crate::error::Result;
use crate::memory::told::{self, Given, Listener, Moment};
use crate::recall::context;
use crate::recall::moment;
use crate::recall::search::SearchRequest;
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;

/// How long recording what was given may wait for the database's write lock: past it the
/// memories are still given, and may be given once more later in the session.
const RECORD_WAIT: Duration = Duration::from_millis(100);

/// The SessionStart answer: the project's index, without what `session` was already given
/// (a start on a resume), recorded as given to it. After a compaction (`compacted`) the
/// conversation holds a summary of what it was told, not the lines themselves: what it was
/// given is retired first, so the index, prompts and files may give it again.
pub fn session_start(
    conn: &mut Connection,
    settings: &Settings,
    project: &str,
    session: &str,
    compacted: bool,
    now: i64,
) -> Result<String> {
    if compacted && let Err(e) = write_briefly(conn, settings, |tx| told::retire(tx, session, now))
    {
        log::warn!("cannot retire what the session was told before its compaction: {e}");
    }
    let (block, shown) =
        context::session_start_shown(conn, project, Some(session), &settings.context, now)?;
    record(
        conn,
        Listener::main(session),
        Moment::SessionStart,
        None,
        &shown,
        settings,
        now,
    );
    Ok(hook::session_start_answer(&block))
}

/// The search for the memories of `project` that may answer `prompt` (already cleaned by
/// the privacy filter), and the worker asked for its meaning at once (see
/// [`moment::ask`]): the hook asks before it stores the event, so that the worker embeds
/// the prompt meanwhile. `None` when the prompt gets no memories (recall at prompts turned
/// off, or not a prompt of the user's).
pub fn prompt_question(
    dir: &DataDir,
    settings: &Settings,
    project: &str,
    prompt: &str,
) -> Option<(SearchRequest, moment::Asking)> {
    if moment::turned_off_by(&settings.recall, Moment::Prompt).is_some()
        || !moment::is_users_prompt(prompt)
    {
        return None;
    }
    // Only what could be given is read: a search whose best estimate is under the threshold
    // returns no hit (a hit's relevance never exceeds its estimate), and most prompts then
    // read no memory's text at all. `cairn context --prompt` shows every candidate.
    let req = SearchRequest {
        min_relevance: Some(settings.recall.min_relevance),
        ..moment::prompt_request(project, prompt, &settings.recall)
    };
    let deadline = Duration::from_millis(settings.recall.worker_deadline_ms);
    let asking = moment::ask(&dir.recall_socket(), &req, deadline);
    Some((req, asking))
}

/// The UserPromptSubmit answer: the memories [`prompt_question`] asked for, above the
/// threshold, not given to `session` yet.
pub fn prompt(
    conn: &mut Connection,
    settings: &Settings,
    session: &str,
    question: Option<(SearchRequest, moment::Asking)>,
    now: i64,
) -> Result<String> {
    let Some((req, asking)) = question else {
        return Ok(hook::PLAIN_ANSWER.to_string());
    };
    let deadline = Duration::from_millis(settings.recall.worker_deadline_ms);
    let found = moment::find_asked(conn, &req, asking)?;
    if let Some(waited) = found.waited {
        // Read by the speed bench: the deadline is never exceeded.
        log::debug!(
            "waited {:.1} ms for the worker (deadline {} ms)",
            waited.as_secs_f64() * 1000.0,
            deadline.as_millis()
        );
    }
    if let Some(why) = &found.words_alone_because {
        log::debug!("a prompt's memories by words alone: {why}");
    }
    let to = Listener::main(session);
    let recalled = moment::at_prompt(conn, Some(to), &found, &settings.recall)?;
    record(
        conn,
        to,
        Moment::Prompt,
        None,
        &recalled.given(),
        settings,
        now,
    );
    Ok(hook::context_answer(
        EventName::UserPromptSubmit,
        &recalled.block,
    ))
}

/// The PreToolUse answer for a call that reads or edits `file`: what is known about the
/// file, once per file for each listener (the main conversation, or the subagent making
/// the call). Never a decision on the call.
pub fn file(
    conn: &mut Connection,
    settings: &Settings,
    project: &str,
    to: Listener,
    file: &str,
    tree: &std::path::Path,
    now: i64,
) -> Result<String> {
    if moment::turned_off_by(&settings.recall, Moment::File).is_some() {
        return Ok(hook::PLAIN_ANSWER.to_string());
    }
    let recalled = moment::at_file(conn, project, Some(to), file, Some(tree), &settings.recall)?;
    record(
        conn,
        to,
        Moment::File,
        Some(file),
        &recalled.given(),
        settings,
        now,
    );
    Ok(hook::context_answer(EventName::PreToolUse, &recalled.block))
}

/// Records what `to` was given; a failure is logged (the memories are given anyway).
fn record(
    conn: &mut Connection,
    to: Listener,
    moment: Moment,
    file: Option<&str>,
    given: &[Given],
    settings: &Settings,
    now: i64,
) {
    if given.is_empty() {
        return;
    }
    if let Err(e) = write_briefly(conn, settings, |tx| {
        told::record(tx, to, moment, file, given, now)
    }) {
        log::warn!(
            "cannot record the {} memories given at {}: {e}",
            given.len(),
            moment.as_str()
        );
    }
}

/// Writes what was told, waiting at most [`RECORD_WAIT`] for the write lock.
fn write_briefly(
    conn: &mut Connection,
    settings: &Settings,
    f: impl FnOnce(&rusqlite::Transaction) -> Result<()>,
) -> Result<()> {
    let _ = conn.busy_timeout(RECORD_WAIT);
    let done = db::write(conn, f);
    let _ = conn.busy_timeout(Duration::from_millis(settings.capture.lock_wait_ms));
    done
}
