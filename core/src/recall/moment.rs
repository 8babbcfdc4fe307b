//! Memories given when they matter: with a prompt of the user's ([`at_prompt`]) and beside
//! a call that reads or edits a file ([`at_file`]). The hook (`capture::handle`) calls
//! these after storing its event and answers with the block as `additionalContext`;
//! `cairn context --prompt` shows the same choice with its scores.
//!
//! A prompt's memories are the hits of a search (by words in the hook; by meaning too when
//! the running worker answered in time, or in the CLI) whose [`relevance`] reaches
//! `recall.min_relevance`; a file's are the observations that modified it, or found a bug
//! while reading it, newest first. Either way a memory the session was already given
//! (`memory::told`: the SessionStart index, an earlier prompt or file) is left out, at most
//! `recall.max_memories` (`max_file_memories`) are given, and the block fits
//! `recall.budget_tokens`, whole lines dropped from the least relevant up.
//!
//! Invariants: reads only (the caller records what was given, through `memory::told`);
//! scoped to the one project asked; [`render`] is pure; nothing to give is an empty block,
//! which the hook answers with its plain answer.

use std::path::Path;

use rusqlite::{Connection, params};

use crate::clock;
use crate::error::Result;
use crate::memory::kind::Kind;
use crate::memory::told::{self, Given};
use crate::recall::context::tokens;
use crate::recall::rank::{Promise, Purpose, Semantic};
use crate::recall::search::{Hit, Order, SearchRequest};
use crate::recall::snippet::{one_line, render_marks, shorten};
use crate::recall::sql::Filters;
use crate::settings::RecallSettings;

/// Hits asked of a search for each memory that may be given: room for the ones already
/// given and the ones under the threshold.
const FETCH_FACTOR: usize = 4;
/// Longest title in a line, in characters.
const TITLE_CHARS: usize = 90;
/// Longest detail in a line, in characters.
const DETAIL_CHARS: usize = 110;
/// The newest observations of a project looked through for a file's memories: bounds the
/// cost of a read's hook whatever the size of memory.
pub const FILE_SCAN: i64 = 2_000;
/// Observation types that say something failed or was wrong, worth knowing before reading.
const FAILURE_TYPES: &[&str] = &["bugfix", "failure", "gotcha", "problem"];

/// What became of a memory offered for a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Given,
    /// Its relevance is under `recall.min_relevance`.
    BelowThreshold,
    /// The session was already given it.
    AlreadyGiven,
    /// `recall.max_memories` were given before it.
    OverCount,
    /// Its line did not fit `recall.budget_tokens`.
    OverBudget,
}

/// One memory offered for a moment, with its score and what became of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Offered {
    pub kind: Kind,
    pub id: i64,
    pub created_at: i64,
    /// The observation type, or `summary`.
    pub label: String,
    pub title: String,
    pub detail: String,
    /// In [0, 1], comparable across prompts ([`relevance`]); 1 for a file's memories.
    pub relevance: f64,
    pub verdict: Verdict,
}

impl Offered {
    /// `12` or `S3`.
    pub fn reference(&self) -> String {
        self.kind.reference(self.id)
    }

    /// The block's line for it.
    fn line(&self) -> String {
        let mut line = format!(
            "- {} {} {} {}",
            self.reference(),
            one_line(&self.label),
            clock::date_utc(self.created_at),
            shorten(&one_line(&self.title), TITLE_CHARS)
        );
        let detail = one_line(&self.detail);
        if !detail.is_empty() && detail != one_line(&self.title) {
            line.push_str(" — ");
            line.push_str(&shorten(&detail, DETAIL_CHARS));
        }
        line
    }
}

/// The memories offered for one moment and the block that gives the chosen ones.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Recalled {
    pub offered: Vec<Offered>,
    /// The `additionalContext`; empty when nothing is given.
    pub block: String,
}

impl Recalled {
    /// What the block gives, for `memory::told::record`.
    pub fn given(&self) -> Vec<Given> {
        self.offered
            .iter()
            .filter(|o| o.verdict == Verdict::Given)
            .map(|o| Given {
                kind: o.kind,
                id: o.id,
                tokens: tokens(&o.line()) + 1,
            })
            .collect()
    }
}

/// Whether a prompt is the user's own: not empty, not a slash command, and none of the
/// texts Claude Code or cairn put in the user's place (a task's notification, a command's
/// output, cairn's own context, a compacted conversation's summary). Pure.
pub fn is_users_prompt(prompt: &str) -> bool {
    let p = prompt.trim_start();
    const NOT_THE_USERS: &[&str] = &[
        "/",
        "<task-notification>",
        "<command-name>",
        "<command-message>",
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<bash-input>",
        "<bash-stdout>",
        "<system-reminder>",
        "Caveat: The messages below were generated by the user while running local commands",
        "This session is being continued from a previous conversation",
    ];
    !p.is_empty()
        && !NOT_THE_USERS.iter().any(|s| p.starts_with(s))
        && !p.starts_with(&format!("<{}>", crate::privacy::CONTEXT_TAG))
}

/// Cues of a prompt that asks about the project's past or its settled ways, each between
/// spaces as [`joined_words`] joins a prompt's words. Chosen so that none is in the
/// everyday requests or the changelog lines of the benchmarks (`tests/fixtures/recall-eval`:
/// "is used to", "previously deprecated" are not cues).
const PAST_CUES: &[&str] = &[
    " did we ",
    " did i ",
    " didn't we ",
    " didnt we ",
    " have we ",
    " haven't we ",
    " havent we ",
    " had we ",
    " we decided ",
    " we chose ",
    " we agreed ",
    " we settled ",
    " we ended up ",
    " we used to ",
    " we previously ",
    " previously we ",
    " used to be ",
    " why was ",
    " why were ",
    " why is it that ",
    " why do we ",
    " is there a reason ",
    " what was the ",
    " what happened ",
    " how do we ",
    " how did we ",
    " how does our ",
    " how is our ",
    " how are our ",
    " what's our ",
    " whats our ",
    " what is our ",
    " what are our ",
    " where do we ",
    " remind me ",
    " do you remember ",
    " remember when ",
    " remember why ",
    " remember how ",
    " remember what ",
    " last time ",
    " in the past ",
    " back when ",
    " this before ",
];

/// Words that only place a question about the past in time, left out of its topic.
const PAST_FRAMING: &[&str] = &[
    " earlier ",
    " again ",
    " ago ",
    " recently ",
    " the other day ",
];

/// A prompt's words, lowercased, between spaces: ` what did we decide `.
fn joined_words(prompt: &str) -> String {
    let words: Vec<String> = prompt
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    format!(" {} ", words.join(" "))
}

/// Whether a prompt asks in so many words about the project's past or its settled ways
/// ("what did we decide about…", "how do we…", "last time", "remind me"): such a prompt
/// is a search asked on purpose, whatever the query model (trained on changelog lines
/// against everyday requests, never on conversational questions) makes of its other
/// words. English only. Pure.
pub fn asks_about_the_past(prompt: &str) -> bool {
    let text = joined_words(prompt);
    PAST_CUES.iter().any(|c| text.contains(c))
}

/// What a prompt that [`asks_about_the_past`] asks about: its words without the cues and
/// the framing ("what did we do earlier about CORS?" → "what do about cors"), so that a
/// memory is not found for sharing the question's framing (an earlier turn that asked
/// "what did we do earlier about…" of something else). `None` for another prompt, or when
/// nothing is left. Pure.
pub fn past_topic(prompt: &str) -> Option<String> {
    let mut text = joined_words(prompt);
    if !PAST_CUES.iter().any(|c| text.contains(c)) {
        return None;
    }
    for cue in PAST_CUES.iter().chain(PAST_FRAMING) {
        while let Some(i) = text.find(cue) {
            text.replace_range(i..i + cue.len(), " ");
        }
    }
    let topic = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!topic.is_empty()).then_some(topic)
}

/// The search that finds a prompt's memories: observations and turn summaries of the
/// project (the user's earlier prompts would mostly echo the question), by relevance; a
/// prompt that [`asks_about_the_past`] searches for its topic ([`past_topic`]), weighing
/// its memories as a search would.
pub fn prompt_request(project: &str, prompt: &str, settings: &RecallSettings) -> SearchRequest {
    let (purpose, text) = match past_topic(prompt) {
        Some(topic) => (Purpose::Search, topic),
        None => (Purpose::Prompt, prompt.to_string()),
    };
    SearchRequest {
        // Prose, not the query language: `-dirty` or `NOT` in a prompt are words.
        query: crate::recall::query::literal(&text),
        filters: Filters {
            project: Some(project.to_string()),
            ..Filters::default()
        },
        kinds: vec![Kind::Observation, Kind::Summary],
        order: Order::Relevance,
        limit: settings.max_memories.max(1) * FETCH_FACTOR,
        offset: 0,
        asking_session: None,
        // Every candidate: the threshold is applied (and shown) by `at_prompt`.
        min_relevance: Some(0.0),
        purpose,
    }
}

/// What a search found for a prompt, and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// True when the hits were ranked by meaning as well as words.
    pub by_meaning: bool,
    /// Why the search went by words alone, when it did and was meant not to.
    pub words_alone_because: Option<String>,
    /// How long the worker was waited for, when it was asked (at most about the deadline).
    pub waited: Option<std::time::Duration>,
}

/// A prompt's question to the running worker, sent before the rest of the hook's work
/// ([`ask`]) and answered in [`find_asked`].
#[derive(Debug)]
pub enum Asking {
    /// Not asked: no deadline, or nothing to rank (no word of the query to match).
    Not,
    /// No worker took the question (none running, or it accepts nothing): why, and how
    /// long trying took.
    Refused(String, std::time::Duration),
    /// Sent at the instant given; the answer is awaited by [`find_asked`].
    Sent(crate::recall::ask::Asked, std::time::Instant),
}

/// Asks the worker listening on `socket` for the meaning of `req`'s query, to be answered
/// within `deadline` of now: the hook asks as soon as it has the prompt, so that the
/// worker embeds it while the hook stores its event.
pub fn ask(socket: &std::path::Path, req: &SearchRequest, deadline: std::time::Duration) -> Asking {
    let ranked = req.order == Order::Relevance
        && crate::recall::query::parse(&req.query).fts_any().is_some();
    if deadline.is_zero() || !ranked {
        return Asking::Not;
    }
    let began = std::time::Instant::now();
    match crate::recall::ask::ask(socket, req, deadline) {
        Ok(asked) => Asking::Sent(asked, began),
        Err(e) => Asking::Refused(e.to_string(), began.elapsed()),
    }
}

/// Runs a prompt's search as the hook does: by words and meaning when the running worker
/// listening on `socket` sends the query's meaning (its vector and nearest neighbours)
/// within `deadline`, else by words alone on `conn` (at once when `deadline` is zero, or
/// when no worker takes the question). [`ask`] then [`find_asked`].
pub fn find(
    conn: &Connection,
    socket: &std::path::Path,
    req: &SearchRequest,
    deadline: std::time::Duration,
) -> Result<Found> {
    find_asked(conn, req, ask(socket, req, deadline))
}

/// The search of `req` once the worker was asked (`asking`, from [`ask`] with the same
/// request): its answer is awaited on a thread of its own while the full-text pools are
/// gathered here, so a prompt pays the longer of the two, not their sum; the ranking is
/// this process's. The answer is awaited on a thread started after the question was sent:
/// with the worker and the pools on both cores of a 2-core machine, a thread began
/// 1.4-1.9 ms after it was spawned (median), and the worker then began that much later.
pub fn find_asked(conn: &Connection, req: &SearchRequest, asking: Asking) -> Result<Found> {
    let (asked, began) = match asking {
        Asking::Not => {
            return Ok(Found {
                hits: crate::recall::search::search(conn, req)?,
                ..Found::default()
            });
        }
        Asking::Refused(why, waited) => {
            return Ok(Found {
                hits: crate::recall::search::search(conn, req)?,
                by_meaning: false,
                words_alone_because: Some(why),
                waited: Some(waited),
            });
        }
        Asking::Sent(asked, began) => (asked, began),
    };
    let meaning = std::sync::OnceLock::new();
    std::thread::scope(|scope| {
        let asking = scope.spawn(|| {
            let promise = Promise(&meaning);
            let why = match asked.reply() {
                Ok(m) => {
                    promise.keep(m);
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            (why, began.elapsed())
        });
        let semantic = Semantic {
            index: None,
            meaning: &meaning,
        };
        let hits = crate::recall::search::search_with(conn, req, Some(&semantic));
        let (why, waited) = asking
            .join()
            .unwrap_or_else(|_| (Some("asking the worker panicked".into()), began.elapsed()));
        Ok(Found {
            hits: hits?,
            by_meaning: why.is_none(),
            words_alone_because: why,
            waited: Some(waited),
        })
    })
}

/// The hit's relevance in [0, 1], comparable across prompts (the ranker's calibrated
/// estimate that the memory answers the query): what `recall.min_relevance` is compared
/// with. The one place the score is read.
pub fn relevance(hit: &Hit) -> f64 {
    hit.relevance
}

/// The setting that turns recall off at `at` (`recall.at_prompt false`,
/// `recall.max_file_memories 0`, …), `None` while it is on. The hook then gives nothing, and
/// `cairn context` says which setting. The index at SessionStart has settings of its own
/// (`context.*`).
pub fn turned_off_by(settings: &RecallSettings, at: told::Moment) -> Option<&'static str> {
    use told::Moment;
    match at {
        Moment::Prompt if !settings.at_prompt => Some("recall.at_prompt false"),
        Moment::Prompt if settings.max_memories == 0 => Some("recall.max_memories 0"),
        Moment::File if !settings.at_file => Some("recall.at_file false"),
        Moment::File if settings.max_file_memories == 0 => Some("recall.max_file_memories 0"),
        _ => None,
    }
}

/// The memories a prompt of `session` receives out of what its search `found`: the most
/// relevant ones above the threshold the session was not given yet.
pub fn at_prompt(
    conn: &Connection,
    session: Option<told::Listener>,
    found: &Found,
    settings: &RecallSettings,
) -> Result<Recalled> {
    let mut offered = Vec::with_capacity(found.hits.len());
    for hit in &found.hits {
        let relevance = relevance(hit);
        let verdict = if relevance < settings.min_relevance {
            Verdict::BelowThreshold
        } else if let Some(s) = session
            && told::was_given(conn, s, hit.kind, hit.id)?
        {
            Verdict::AlreadyGiven
        } else {
            Verdict::Given
        };
        offered.push(Offered {
            kind: hit.kind,
            id: hit.id,
            created_at: hit.created_at,
            label: hit.label.clone(),
            title: hit.title.clone(),
            detail: render_marks(&hit.snippet, "", ""),
            relevance,
            verdict,
        });
    }
    offered.sort_by(|a, b| b.relevance.total_cmp(&a.relevance));
    let block = render(
        "cairn memories that may answer this prompt",
        &mut offered,
        settings.max_memories,
        settings.budget_tokens,
    );
    Ok(Recalled { offered, block })
}

/// The memories about `file` (an absolute path, or one relative to the project) worth
/// knowing before working on it: observations of the project that modified it, and the
/// failures found while reading it, newest first; none when the listener (the session's
/// main conversation or a subagent) was already given memories about it. `tree` is the
/// working tree the session works in, when known: an absolute path outside it (a
/// dependency's source, a system file) is named only by a memory holding that same path,
/// never by one holding a path it ends with (`src/main.rs` is not every `main.rs`).
pub fn at_file(
    conn: &Connection,
    project: &str,
    session: Option<told::Listener>,
    file: &str,
    tree: Option<&Path>,
    settings: &RecallSettings,
) -> Result<Recalled> {
    if file.trim().is_empty()
        || settings.max_file_memories == 0
        || session.is_some_and(|s| told::file_was_given(conn, s, file).unwrap_or(false))
    {
        return Ok(Recalled::default());
    }
    let name = file.rsplit('/').next().unwrap_or(file);
    let rows = conn
        .prepare_cached(
            "SELECT id, created_at, type, title, subtitle, narrative, files_modified, files_read
             FROM (SELECT * FROM observations WHERE project = ?1
                   ORDER BY created_at DESC, id DESC LIMIT ?2)
             WHERE instr(files_modified, ?3) > 0 OR instr(files_read, ?3) > 0",
        )?
        .query_map(params![project, FILE_SCAN, name], |r| {
            Ok((
                Offered {
                    kind: Kind::Observation,
                    id: r.get(0)?,
                    created_at: r.get(1)?,
                    label: r.get(2)?,
                    title: r.get(3)?,
                    detail: r.get(4)?,
                    relevance: 1.0,
                    verdict: Verdict::Given,
                },
                r.get::<_, String>(5)?,
                r.get::<_, String>(6)?,
                r.get::<_, String>(7)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut offered = Vec::new();
    let outside = tree.is_some_and(|t| file.starts_with('/') && !Path::new(file).starts_with(t));
    let names = |paths: &[String]| match outside {
        true => paths.iter().any(|p| p == file),
        false => names_file(paths, file),
    };
    for (mut o, narrative, modified, read) in rows {
        let modified = paths_of(&modified);
        // The detail is the subtitle, unless it is only the path the block is about.
        if o.detail.trim().is_empty() || modified.contains(&o.detail) {
            o.detail = narrative;
        }
        let changed = names(&modified);
        let failed_there = FAILURE_TYPES.contains(&o.label.as_str()) && names(&paths_of(&read));
        if !(changed || failed_there) {
            continue;
        }
        if let Some(s) = session
            && told::was_given(conn, s, o.kind, o.id)?
        {
            o.verdict = Verdict::AlreadyGiven;
        }
        offered.push(o);
    }
    let block = render(
        &format!("cairn memories about {}", one_line(name)),
        &mut offered,
        settings.max_file_memories,
        settings.budget_tokens,
    );
    Ok(Recalled { offered, block })
}

/// Whether the paths of a list (`files_modified`, `files_read`: [`paths_of`]) name `file`:
/// the same path, or one of the two the other's tail after a `/`. Pure.
fn names_file(paths: &[String], file: &str) -> bool {
    let tail_of = |long: &str, short: &str| {
        long.len() > short.len()
            && long.ends_with(short)
            && long.as_bytes()[long.len() - short.len() - 1] == b'/'
    };
    paths.iter().any(|p| {
        let p = p.trim_start_matches("./");
        !p.is_empty() && (p == file || tail_of(file, p) || tail_of(p, file))
    })
}

/// The paths of a JSON list (`files_modified`, `files_read`); none when it is not one.
fn paths_of(list: &str) -> Vec<String> {
    serde_json::from_str(list).unwrap_or_default()
}

/// The block giving the offered memories still marked [`Verdict::Given`], best first: at
/// most `max` of them, within `budget_tokens` (whole lines dropped from the last), each
/// one line; marks those left out. Empty when none is given. Pure.
pub fn render(heading: &str, offered: &mut [Offered], max: usize, budget_tokens: usize) -> String {
    let mut count = 0;
    for o in offered.iter_mut().filter(|o| o.verdict == Verdict::Given) {
        count += 1;
        if count > max {
            o.verdict = Verdict::OverCount;
        }
    }
    let open = format!("<{}>", crate::privacy::CONTEXT_TAG);
    let close = format!("</{}>", crate::privacy::CONTEXT_TAG);
    loop {
        let chosen: Vec<&Offered> = offered
            .iter()
            .filter(|o| o.verdict == Verdict::Given)
            .collect();
        if chosen.is_empty() {
            return String::new();
        }
        let refs: Vec<String> = chosen.iter().map(|o| o.reference()).collect();
        let mut lines = vec![
            open.clone(),
            format!(
                "{heading} (id type date title — detail; more: get_observations ids [{}]):",
                refs.join(", ")
            ),
        ];
        lines.extend(chosen.iter().map(|o| o.line()));
        lines.push(close.clone());
        let block = lines.join("\n");
        if tokens(&block) <= budget_tokens {
            return block;
        }
        if let Some(last) = offered
            .iter_mut()
            .rev()
            .find(|o| o.verdict == Verdict::Given)
        {
            last.verdict = Verdict::OverBudget;
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_prompt_asks_about_the_past_in_so_many_words_or_not() {
        for yes in [
            "what did we decide about password hashing?",
            "Why did we drop the Redis cache",
            "remind me how the deploy works",
            "didn't we fix this last time?",
            "We ended up using argon2, right?",
            "how do we handle CORS?",
            "what's our pagination approach?",
            "database is locked again under load, didn't we fix this before?",
        ] {
            assert!(asks_about_the_past(yes), "{yes}");
            let r = prompt_request("p", yes, &RecallSettings::default());
            assert_eq!(r.purpose, Purpose::Search, "{yes}");
        }
        for no in [
            "hash the passwords with argon2",
            "bump the upload limit to 50 MB",
            "remember to run the tests",
            "fix the failing test in did_we_win.rs",
            "why did CI fail?",
            "Router::with_state is used to convert the router",
            "Remove extractor_middleware which was previously deprecated",
        ] {
            assert!(!asks_about_the_past(no), "{no}");
            let r = prompt_request("p", no, &RecallSettings::default());
            assert_eq!(r.purpose, Purpose::Prompt, "{no}");
            assert_eq!(r.query, crate::recall::query::literal(no));
        }
        // The topic is searched, not the framing.
        for (asked, topic) in [
            (
                "What did we do earlier about CORS?",
                Some("what do about cors"),
            ),
            (
                "remind me: which bundler do we use?",
                Some("which bundler do we use"),
            ),
            ("didn't we fix this before?", Some("fix")),
            ("remind me", None),
            ("run the tests", None),
        ] {
            assert_eq!(past_topic(asked).as_deref(), topic, "{asked}");
        }
        let r = prompt_request(
            "p",
            "what did we do earlier about CORS?",
            &Default::default(),
        );
        assert_eq!(r.query, crate::recall::query::literal("what do about cors"));
    }
    use super::*;
    use crate::recall::search::search;
    use crate::recall::testing::{T0, fixture, obs};
    use crate::store::db;

    fn settings() -> RecallSettings {
        RecallSettings::default()
    }

    #[test]
    fn prompts_that_are_not_the_users_are_told_apart() {
        for p in [
            "why do the login tests fail on CI again?",
            "  fix the parser",
            "what does </private> mean",
        ] {
            assert!(is_users_prompt(p), "{p}");
        }
        for p in [
            "",
            "   ",
            "/compact",
            "/review the diff",
            "<task-notification>done</task-notification>",
            "<command-name>/model</command-name>",
            "<local-command-stdout>ok</local-command-stdout>",
            "<cairn-context>x</cairn-context>",
            "This session is being continued from a previous conversation that ran out",
            "Caveat: The messages below were generated by the user while running local commands.",
        ] {
            assert!(!is_users_prompt(p), "{p}");
        }
    }

    #[test]
    fn a_prompt_ranks_the_workers_neighbours_with_its_words_else_goes_by_words_alone() {
        use std::os::unix::net::UnixListener;
        use std::time::Duration;
        let mut f = fixture();
        let id = f.add(obs(
            "web",
            "bugfix",
            "Login tests fail on CI",
            "the session cookie expired",
            T0,
        ));
        // No word of the prompt: only meaning finds it.
        let near = f.add(obs(
            "web",
            "gotcha",
            "Sign-in suite breaks in the pipeline",
            "clock skew on the runners",
            T0 + 1,
        ));
        let req = SearchRequest {
            min_relevance: Some(0.0),
            ..prompt_request("web", "why do the login tests fail?", &settings())
        };
        let tmp = tempfile::tempdir().expect("tmp");
        let socket = tmp.path().join("recall.sock");
        let ids = |found: &Found| found.hits.iter().map(|h| h.id).collect::<Vec<_>>();

        // No worker: by words alone, and why.
        let found = find(&f.conn, &socket, &req, Duration::from_millis(20)).expect("find");
        assert!(!found.by_meaning);
        assert!(found.words_alone_because.is_some());
        assert_eq!(ids(&found), vec![id]);

        // A worker answering: its neighbours ranked with the words found here.
        let listener = UnixListener::bind(&socket).expect("bind");
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            crate::recall::ask::answer(stream, Duration::from_secs(5), |asked| {
                assert_eq!(asked.query, "why do the login tests fail?");
                Ok(crate::recall::rank::Meaning {
                    vector: vec![1.0, 0.0],
                    model: "m".into(),
                    min_similarity: 0.2,
                    neighbours: Some(vec![crate::recall::embed::index::Neighbour {
                        kind: Kind::Observation,
                        id: near,
                        created_at: T0 + 1,
                        similarity: 0.9,
                    }]),
                })
            })
        });
        let found = find(&f.conn, &socket, &req, Duration::from_secs(5)).expect("find");
        server.join().expect("join").expect("answer");
        assert!(found.by_meaning, "{:?}", found.words_alone_because);
        let mut got = ids(&found);
        got.sort_unstable();
        assert_eq!(got, vec![id, near]);
    }

    #[test]
    fn a_file_is_named_by_its_path_or_its_tail() {
        let list = &paths_of(r#"["src/login.rs", "/abs/repo/tests/ci.rs"]"#);
        assert!(names_file(list, "/home/u/repo/src/login.rs"));
        assert!(names_file(list, "src/login.rs"));
        assert!(names_file(list, "tests/ci.rs"));
        assert!(!names_file(list, "/home/u/repo/src/xlogin.rs"));
        assert!(!names_file(list, "login.rs.bak"));
        assert!(!names_file(&paths_of("not json"), "src/login.rs"));
    }

    fn offered(id: i64, relevance: f64, title: &str) -> Offered {
        Offered {
            kind: Kind::Observation,
            id,
            created_at: T0,
            label: "bugfix".into(),
            title: title.into(),
            detail: "the detail".into(),
            relevance,
            verdict: Verdict::Given,
        }
    }

    #[test]
    fn the_block_keeps_to_its_count_and_budget() {
        let mut all: Vec<Offered> = (1..=5)
            .map(|i| offered(i, 1.0 - i as f64 / 10.0, &format!("memory {i}")))
            .collect();
        let block = render("h", &mut all, 3, 1_000);
        assert!(block.starts_with("<cairn-context>\nh (id type date title"));
        assert!(block.contains("[1, 2, 3]"), "{block}");
        assert!(block.contains("- 1 bugfix 2026-09-21 memory 1 — the detail"));
        assert!(!block.contains("memory 4"));
        assert_eq!(all[3].verdict, Verdict::OverCount);

        let mut all: Vec<Offered> = (1..=3)
            .map(|i| offered(i, 0.9, &"long title words ".repeat(5)))
            .collect();
        let block = render("h", &mut all, 3, 60);
        assert!(tokens(&block) <= 60, "{}", tokens(&block));
        assert_eq!(all[0].verdict, Verdict::Given);
        assert_eq!(all[2].verdict, Verdict::OverBudget);
        assert_eq!(render("h", &mut all, 3, 5), "");
        assert_eq!(render("h", &mut [], 3, 1_000), "");
    }

    #[test]
    fn a_prompt_is_searched_by_its_words_not_as_the_query_language() {
        let mut f = fixture();
        let id = f.add(obs(
            "web",
            "change",
            "Release builds no longer carry the dirty suffix",
            "The version string dropped -dirty.",
            T0,
        ));
        // As typed in `cairn search`, `-dirty` and `NOT suffix` would leave the memory out.
        let prompt = "why do release builds say -dirty NOT just the version";
        let req = prompt_request("web", prompt, &settings());
        let hits = search(&f.conn, &req).expect("search");
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![id]);
        let typed = SearchRequest {
            query: prompt.into(),
            ..req
        };
        assert!(search(&f.conn, &typed).expect("search").is_empty());
    }

    #[test]
    fn a_prompt_gets_what_answers_it_once_and_nothing_below_the_threshold() {
        let mut f = fixture();
        let fix = f.add(obs(
            "web",
            "bugfix",
            "Login tests failed on CI because of the clock",
            "The login tests failed on CI: the session expiry used the wall clock.",
            T0,
        ));
        f.add(obs(
            "web",
            "feature",
            "Dark mode for the settings page",
            "Added a theme switch.",
            T0,
        ));
        let s = settings();
        let ask = |conn: &Connection, prompt: &str, session: Option<&str>| {
            let hits = search(conn, &prompt_request("web", prompt, &s)).expect("search");
            at_prompt(
                conn,
                session.map(told::Listener::main),
                &Found {
                    hits,
                    ..Found::default()
                },
                &s,
            )
            .expect("recall")
        };
        let got = ask(
            &f.conn,
            "why do the login tests fail on CI again?",
            Some("s1"),
        );
        assert!(got.block.contains(&format!("- {fix} bugfix")), "{got:?}");
        assert_eq!(got.given().len(), 1, "{got:?}");
        db::write(&mut f.conn, |tx| {
            told::record(
                tx,
                told::Listener::main("s1"),
                told::Moment::Prompt,
                None,
                &got.given(),
                T0,
            )
        })
        .expect("told");
        let again = ask(
            &f.conn,
            "why do the login tests fail on CI again?",
            Some("s1"),
        );
        assert_eq!(again.block, "");
        assert_eq!(again.offered[0].verdict, Verdict::AlreadyGiven);
        let other = ask(&f.conn, "login tests failing on CI", Some("s2"));
        assert!(!other.block.is_empty());

        let unrelated = ask(&f.conn, "run the tests", Some("s3"));
        assert_eq!(unrelated.block, "", "{unrelated:?}");
        let elsewhere = {
            let hits = search(
                &f.conn,
                &prompt_request("api", "why do the login tests fail on CI again?", &s),
            )
            .expect("search");
            at_prompt(
                &f.conn,
                None,
                &Found {
                    hits,
                    ..Found::default()
                },
                &s,
            )
            .expect("recall")
        };
        assert_eq!(elsewhere.block, "");
    }

    #[test]
    fn a_file_gets_what_changed_it_and_failed_there_once() {
        let mut f = fixture();
        let mut changed = obs(
            "web",
            "change",
            "Session expiry reads the injected clock",
            "",
            T0,
        );
        changed.content.subtitle = "so that tests can freeze time".into();
        changed.content.files_modified = vec!["src/session.rs".into()];
        let changed = f.add(changed);
        let mut failed = obs(
            "web",
            "bugfix",
            "Expiry test fails under TZ=UTC-14",
            "",
            T0 - 1,
        );
        failed.content.files_read = vec!["/repo/src/session.rs".into()];
        let failed = f.add(failed);
        let mut only_read = obs("web", "discovery", "Session module read", "", T0 - 2);
        only_read.content.files_read = vec!["src/session.rs".into()];
        f.add(only_read);
        let s = settings();
        let s1 = Some(told::Listener::main("s1"));
        let got = at_file(&f.conn, "web", s1, "/repo/src/session.rs", None, &s).expect("file");
        let ids: Vec<i64> = got.given().iter().map(|g| g.id).collect();
        assert_eq!(ids, vec![changed, failed], "{got:?}");
        assert!(got.block.contains("so that tests can freeze time"));
        db::write(&mut f.conn, |tx| {
            told::record(
                tx,
                told::Listener::main("s1"),
                told::Moment::File,
                Some("/repo/src/session.rs"),
                &got.given(),
                T0,
            )
        })
        .expect("told");
        let again = at_file(&f.conn, "web", s1, "/repo/src/session.rs", None, &s).expect("file");
        assert_eq!(again, Recalled::default());
        let other_project = at_file(
            &f.conn,
            "api",
            Some(told::Listener::main("s2")),
            "/repo/src/session.rs",
            None,
            &s,
        )
        .expect("file");
        assert_eq!(other_project.block, "");

        // In the working tree /repo, its files are named by their paths' tails; a file of
        // the same name outside it (a dependency's, a system one) only by its own path.
        let tree = Some(Path::new("/repo"));
        let s3 = Some(told::Listener::main("s3"));
        let inside = at_file(&f.conn, "web", s3, "/repo/src/session.rs", tree, &s).expect("in");
        let ids: Vec<i64> = inside.given().iter().map(|g| g.id).collect();
        assert_eq!(ids, vec![changed, failed], "{inside:?}");
        for elsewhere in [
            "/home/me/.cargo/registry/src/dep-1.0/src/session.rs",
            "/repository/src/session.rs",
        ] {
            let s4 = Some(told::Listener::main("s4"));
            let got = at_file(&f.conn, "web", s4, elsewhere, tree, &s).expect("outside");
            assert_eq!(got.block, "", "{elsewhere}");
        }
        // A memory holding that very path still names it.
        let why = "The vendored copy read the wall clock";
        let mut vendored = obs("web", "bugfix", "Patched the vendored session", why, T0);
        vendored.content.files_modified = vec!["/opt/vendor/src/session.rs".into()];
        // A subtitle that only repeats the path is no detail: the narrative is.
        vendored.content.subtitle = "/opt/vendor/src/session.rs".into();
        let vendored = f.add(vendored);
        let s5 = Some(told::Listener::main("s5"));
        let got = at_file(&f.conn, "web", s5, "/opt/vendor/src/session.rs", tree, &s).expect("x");
        let ids: Vec<i64> = got.given().iter().map(|g| g.id).collect();
        assert_eq!(ids, vec![vendored], "{got:?}");
        assert!(got.block.contains(why), "{}", got.block);
        assert!(!got.block.contains("— /opt"), "{}", got.block);
    }
}
