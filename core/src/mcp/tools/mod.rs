//! The MCP server's tools: `search`, `timeline`, `get_observations` and `save_memory`.
//! [`Tools`] holds what they need (the database, the default project, the searcher, the
//! privacy filter, the asking session) and runs a call by name ([`Tools::call`]), returning
//! the result's text or a [`ToolError`]; what that becomes on the wire is the protocol's
//! business. Writes only through `memory` (`save_memory`, after the privacy filter; saving
//! the same memory again stores nothing new).
//!
//! - `schema`: the names, argument bounds and JSON Schemas (`tools/list`); the lowest file.
//! - `args`: reading arguments, near-misses included, and [`args::search_request`], the one
//!   builder of a search from a call's arguments.
//! - `render`: the results as text, within their token budget (`max_tokens`, default
//!   [`DEFAULT_MAX_TOKENS`]).
//! - `error`: [`ToolError`]: an unknown tool, a bad argument (the message says how to fix
//!   the call), or cairn failing.
//!
//! The database is opened at the first call of a tool that needs it ([`Database::At`]): a
//! server that is started, asked for its tools and stopped again (`claude mcp list` does
//! this) writes nothing.

pub mod args;
pub mod error;
pub mod render;
pub mod schema;

use rusqlite::Connection;
use serde_json::{Map, Value};

use crate::mcp::tools::args::Args;
pub use crate::mcp::tools::error::ToolError;
pub use crate::mcp::tools::render::{render_observation, render_record};
pub use crate::mcp::tools::schema::{
    DEFAULT_MAX_TOKENS, MAX_IDS, MAX_MAX_TOKENS, MAX_SEARCH_LIMIT, MAX_TIMELINE_SIDE,
    MIN_MAX_TOKENS, definitions,
};
use crate::memory;
use crate::memory::kind::Kind;
use crate::memory::observations::{NewObservation, OBSERVATION_TYPES};
use crate::privacy::Privacy;
use crate::recall::search;
use crate::recall::searcher::Searcher;
use crate::recall::snippet::{one_line, shorten};
use crate::recall::timeline::{self, Anchor, TimelineRequest};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::DataDir;

type Result<T> = std::result::Result<T, ToolError>;

/// Where the tools find the memory.
#[derive(Debug)]
pub enum Database {
    /// This connection.
    Open(Connection),
    /// This data dir's database, opened (and made, if missing) at the first call of a tool
    /// that needs it, and tuned for reading.
    At(DataDir),
    /// This data dir's database, open.
    OpenAt(DataDir, Connection),
}

impl Database {
    /// The connection, opening it first if this is the first call that needs it.
    fn connection(&mut self) -> crate::Result<&mut Connection> {
        if let Database::At(dir) = self {
            let conn = db::open_data_dir(dir, OpenOptions::default())?;
            search::tune_for_reading(&conn)?;
            *self = Database::OpenAt(dir.clone(), conn);
        }
        match self {
            Database::Open(conn) | Database::OpenAt(_, conn) => Ok(conn),
            Database::At(_) => unreachable!("opened just above"),
        }
    }

    /// Met damage (`cause`): closes the connection and recovers the data dir's database
    /// unless a worker runs on it (which then recovers it), so that the next call opens
    /// the recovered one. A bare connection is left as it is.
    fn recover(&mut self, cause: &crate::Error, now: i64) -> crate::Result<Mended> {
        let dir = match self {
            Database::Open(_) => return Ok(Mended::NotHere),
            Database::At(dir) | Database::OpenAt(dir, _) => dir.clone(),
        };
        *self = Database::At(dir.clone());
        let lock_wait = crate::settings::Settings::lock_wait(&dir);
        let done = crate::store::recover::recover_unless_worker(&dir, cause, lock_wait, now)?;
        Ok(if done.is_some() {
            Mended::Recovered
        } else {
            Mended::ByTheWorker
        })
    }
}

/// What became of a damaged database a tool met.
enum Mended {
    Recovered,
    /// The worker running on the data dir recovers it.
    ByTheWorker,
    /// A bare connection: nothing to recover from here.
    NotHere,
}

/// The four tools and what they need.
#[derive(Debug)]
pub struct Tools {
    db: Database,
    /// The project searched and saved to when a call names none.
    project: String,
    clock: fn() -> i64,
    /// Cleans memories saved through `save_memory`, like everything captured.
    privacy: Privacy,
    /// Searches by meaning when a sentence model is available, else by words.
    searcher: Searcher,
    /// The Claude Code session that started this server, when it said so (see
    /// [`Tools::with_asking_session`]).
    asking_session: Option<String>,
}

impl Tools {
    /// Tools on `db` whose default project is `project`; `clock` gives `now` in ms (pass
    /// `clock::now_ms`; tests pass a fixed clock).
    pub fn new(db: Database, project: impl Into<String>, clock: fn() -> i64) -> Self {
        Self {
            db,
            project: project.into(),
            clock,
            privacy: Privacy::from_settings(&Default::default()),
            searcher: Searcher::full_text_only("no sentence model given"),
            asking_session: None,
        }
    }

    /// Searches with this model (and its index) where a query has words to rank by.
    pub fn with_searcher(mut self, searcher: Searcher) -> Self {
        self.searcher = searcher;
        self
    }

    /// The Claude Code session asking: Claude Code (2.1.154 and later) starts a stdio MCP
    /// server with `CLAUDE_CODE_SESSION_ID` in its environment, the `session_id` its hooks
    /// see. Searches pass it on as [`SearchRequest::asking_session`]. An empty id is none.
    ///
    /// [`SearchRequest::asking_session`]: crate::recall::search::SearchRequest::asking_session
    pub fn with_asking_session(mut self, session: Option<String>) -> Self {
        self.asking_session = session.filter(|s| !s.trim().is_empty());
        self
    }

    /// Uses these capture settings (redaction, field cap) for `save_memory`.
    pub fn with_privacy(mut self, privacy: Privacy) -> Self {
        self.privacy = privacy;
        self
    }

    /// Runs the tool `name` with `arguments` (absent or null: none; else an object) and
    /// returns its result's text.
    pub fn call(&mut self, name: &str, arguments: Option<&Value>) -> Result<String> {
        if !schema::TOOL_NAMES.contains(&name) {
            return Err(ToolError::UnknownTool(name.to_string()));
        }
        let empty = Map::new();
        let args = match arguments {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(a)) => a,
            Some(_) => {
                return Err(ToolError::BadArgument(
                    "arguments must be a JSON object".into(),
                ));
            }
        };
        match self.run(name, args) {
            // Damage met on the way: recovered (or being recovered by the worker), then
            // the call is made once more on the recovered database.
            Err(ToolError::Internal(cause)) if cause.is_corrupt() => {
                match self.db.recover(&cause, (self.clock)()) {
                    Ok(Mended::Recovered) => self.run(name, args),
                    Ok(Mended::ByTheWorker) => Err(ToolError::Internal(crate::Error::Invalid(
                        format!("{cause}; the worker is recovering it: try again in a moment"),
                    ))),
                    Ok(Mended::NotHere) => Err(ToolError::Internal(cause)),
                    Err(e) => Err(ToolError::Internal(crate::Error::Invalid(format!(
                        "{cause}; recovering it failed ({e}): restore a backup with `cairn restore PATH`"
                    )))),
                }
            }
            other => other,
        }
    }

    fn run(&mut self, name: &str, args: &Map<String, Value>) -> Result<String> {
        match name {
            "search" => self.search(args),
            "timeline" => self.timeline(args),
            "get_observations" => self.get_observations(args),
            _ => self.save_memory(args),
        }
    }

    fn search(&mut self, raw: &Map<String, Value>) -> Result<String> {
        let args = Args::new(raw, args::SEARCH_ARGS)?;
        let req = args::search_request(
            &args,
            &self.project,
            self.asking_session.as_deref(),
            (self.clock)(),
        )?;
        let budget = args.budget()?;
        let conn = self.db.connection().map_err(ToolError::Internal)?;
        let hits = self
            .searcher
            .search(conn, &req)
            .map_err(ToolError::Internal)?;
        Ok(render::search_hits(
            &hits,
            req.filters.project.as_deref(),
            budget,
            req.offset,
        ))
    }

    fn timeline(&mut self, raw: &Map<String, Value>) -> Result<String> {
        let args = Args::new(
            raw,
            &[
                "anchor",
                "query",
                "before",
                "after",
                "project",
                "all_projects",
                "max_tokens",
            ],
        )?;
        let anchor = match (args.reference("anchor")?, args.string("query")?) {
            (Some((kind, id)), None) => Anchor::Record(kind, id),
            (None, Some(q)) if !q.trim().is_empty() => Anchor::Query(q),
            (Some(_), Some(_)) => {
                return Err(ToolError::BadArgument(
                    "give either 'anchor' (an id from search) or 'query', not both".into(),
                ));
            }
            _ => {
                return Err(ToolError::BadArgument(
                    "give 'anchor' (an id from search) or 'query' (its best hit becomes the anchor)"
                        .into(),
                ));
            }
        };
        let budget = args.budget()?;
        let project = match (&anchor, args.bool("all_projects")?, args.string("project")?) {
            // An id names one record anywhere: its timeline is its project's, as `get_observations`
            // fetches it from anywhere.
            (Anchor::Record(kind, id), None | Some(false), None) => {
                let conn = self.db.connection().map_err(ToolError::Internal)?;
                match timeline::get_records(conn, &[(*kind, *id)])
                    .map_err(ToolError::Internal)?
                    .found
                    .first()
                {
                    Some(r) => Some(record_project(r).to_string()),
                    None => Some(self.project.clone()),
                }
            }
            _ => args.scope(&self.project)?,
        };
        let req = TimelineRequest {
            anchor: anchor.clone(),
            before: args.count("before", 0, MAX_TIMELINE_SIDE)?.unwrap_or(5),
            after: args.count("after", 0, MAX_TIMELINE_SIDE)?.unwrap_or(5),
            project: project.clone(),
        };
        let conn = self.db.connection().map_err(ToolError::Internal)?;
        let t = match self.searcher.timeline(conn, &req) {
            Ok(t) => t,
            Err(crate::Error::Invalid(msg)) => {
                return Err(ToolError::BadArgument(msg.replace(
                    "ask for all projects or that project",
                    "pass all_projects: true, or that project as project",
                )));
            }
            Err(e) => return Err(ToolError::Internal(e)),
        };
        if t.anchor.is_none() {
            return Err(ToolError::BadArgument(match anchor {
                Anchor::Observation(id) | Anchor::Record(Kind::Observation, id) => {
                    format!("no observation with id {id}; take ids from search results")
                }
                Anchor::Record(kind, id) => format!(
                    "no record {}; take ids from search results",
                    kind.reference(id)
                ),
                Anchor::Query(_) => {
                    "no record matches that query; try search with broader words".into()
                }
            }));
        }
        Ok(render::timeline(&t, project.as_deref(), budget))
    }

    fn get_observations(&mut self, raw: &Map<String, Value>) -> Result<String> {
        let args = Args::new(raw, &["ids", "max_tokens"])?;
        let budget = args.budget()?;
        let fix = || {
            ToolError::BadArgument(format!(
                "'ids' must be a list of 1 to {MAX_IDS} ids as search and timeline list them: observations as integers, turn summaries and prompts as strings, e.g. {{\"ids\": [12, 15, \"S3\"]}}"
            ))
        };
        let refs: Vec<(Kind, i64)> = match args.get("ids") {
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_IDS => items
                .iter()
                .map(args::as_reference)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(fix)?,
            // A lone id is what was meant.
            Some(v @ (Value::Number(_) | Value::String(_))) => {
                vec![args::as_reference(v).ok_or_else(fix)?]
            }
            _ => return Err(fix()),
        };
        let conn = self.db.connection().map_err(ToolError::Internal)?;
        let fetched = timeline::get_records(conn, &refs).map_err(ToolError::Internal)?;
        if fetched.found.is_empty() {
            return Err(ToolError::BadArgument(format!(
                "nothing stored as {}; take ids from search or timeline results",
                fetched.missing.join(", ")
            )));
        }
        Ok(render::records(&fetched, budget))
    }

    fn save_memory(&mut self, raw: &Map<String, Value>) -> Result<String> {
        let args = Args::new(
            raw,
            &["title", "text", "type", "files", "concepts", "project"],
        )?;
        let title = args
            .string("title")?
            .map(|t| one_line(&t))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ToolError::BadArgument(
                    "'title' is required: one short line naming the memory".into(),
                )
            })?;
        let text = args
            .string("text")?
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                ToolError::BadArgument(
                    "'text' is required: what to remember, in full sentences".into(),
                )
            })?;
        let kind = args.string("type")?.unwrap_or_else(|| "discovery".into());
        if !OBSERVATION_TYPES.contains(&kind.as_str()) {
            return Err(ToolError::BadArgument(format!(
                "unknown type '{}'; use one of {}",
                shorten(&kind, 50),
                OBSERVATION_TYPES.join(", ")
            )));
        }
        let project = args
            .string("project")?
            .unwrap_or_else(|| self.project.clone());
        let mut obs = NewObservation {
            session_id: None,
            project: project.clone(),
            prompt_number: None,
            kind,
            origin: "manual".into(),
            created_at: (self.clock)(),
            content: crate::memory::rows::ObservationContent {
                title: shorten(&title, 200),
                narrative: text,
                files_modified: args.strings("files")?,
                concepts: args.strings("concepts")?,
                ..Default::default()
            },
            ..NewObservation::default()
        };
        self.privacy.observation(&mut obs);
        let conn = self.db.connection().map_err(ToolError::Internal)?;
        let stored = db::write(conn, |tx| memory::observations::save_manual(tx, &obs))
            .map_err(ToolError::Internal)?;
        Ok(match stored {
            memory::observations::Stored::Added(id) => {
                format!("Saved as observation {id} in project '{project}'.")
            }
            memory::observations::Stored::Duplicate(id) => format!(
                "Already saved as observation {id} in project '{project}'; nothing new stored."
            ),
        })
    }
}

/// The project a record belongs to.
fn record_project(r: &timeline::Record) -> &str {
    match r {
        timeline::Record::Observation(o) => &o.project,
        timeline::Record::Summary(s) => &s.project,
        timeline::Record::Prompt(p) => &p.project,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> (tempfile::TempDir, Tools) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path());
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        (
            tmp,
            Tools::new(Database::Open(conn), "acme", || 1_790_000_000_000),
        )
    }

    /// A call as the protocol answers it: `(isError, text)`; a tool unknown or cairn
    /// failing is not expected here.
    fn call(t: &mut Tools, name: &str, args: Value) -> (bool, String) {
        match t.call(name, Some(&args)) {
            Ok(text) => (false, text),
            Err(ToolError::BadArgument(text)) => (true, text),
            Err(e) => panic!("{name} {args}: {e}"),
        }
    }

    #[test]
    fn tools_round_trip() {
        let (_t, mut t) = tools();
        let (err, text) = call(&mut t, "search", json!({"query": "lease"}));
        assert!(!err);
        assert!(text.starts_with("No results in project 'acme'"), "{text}");
        let (err, text) = call(
            &mut t,
            "save_memory",
            json!({"title": "Lease rescue counts as an attempt", "text": "A rescued lease is a failed attempt.", "type": "decision", "files": ["core/src/queue.rs"]}),
        );
        assert!(!err, "{text}");
        assert!(
            text.contains("Saved as observation 1 in project 'acme'"),
            "{text}"
        );
        let (err, text) = call(
            &mut t,
            "search",
            json!({"query": "lease", "type": ["decision"]}),
        );
        assert!(!err);
        assert!(
            text.contains("1 2026-09-21 decision 0.") && text.contains(" Lease rescue counts"),
            "{text}"
        );
        assert!(text.contains("A rescued **lease**"), "{text}");
        let (err, text) = call(&mut t, "timeline", json!({"anchor": 1}));
        assert!(!err, "{text}");
        assert!(text.contains("→ 1 "), "{text}");
        let (err, text) = call(&mut t, "get_observations", json!({"ids": [1, 99]}));
        assert!(!err, "{text}");
        assert!(
            text.contains("A rescued lease is a failed attempt."),
            "{text}"
        );
        assert!(text.contains("- core/src/queue.rs"), "{text}");
        assert!(text.contains("Not found: 99"), "{text}");
        // Summaries and prompts, as search and timeline list them (S1, P5).
        crate::store::db::write(t.db.connection().expect("db"), |tx| {
            crate::memory::sessions::ensure(tx, "s1", "acme", "/w/acme", 1)?;
            crate::memory::observations::upsert_summary(
                tx,
                &crate::memory::observations::NewSummary {
                    session_id: "s1".into(),
                    project: "acme".into(),
                    prompt_number: 1,
                    request: "make rescues count".into(),
                    completed: "rescue is an attempt".into(),
                    origin: "model".into(),
                    created_at: 2,
                    ..Default::default()
                },
            )
        })
        .expect("summary");
        let (err, text) = call(&mut t, "get_observations", json!({"ids": ["S1", 1, "P5"]}));
        assert!(!err, "{text}");
        assert!(text.starts_with("S1 summary [acme]"), "{text}");
        assert!(text.contains("Request: make rescues count"), "{text}");
        assert!(text.contains("Completed: rescue is an attempt"), "{text}");
        assert!(text.contains("#1 decision"), "{text}");
        assert!(text.contains("Not found: P5"), "{text}");
        // The timeline centres on any id search lists, as the CLI's does.
        let (err, text) = call(&mut t, "timeline", json!({"anchor": "S1"}));
        assert!(!err, "{text}");
        assert!(text.contains("→ S1 "), "{text}");
        let (err, text) = call(&mut t, "timeline", json!({"anchor": "1"}));
        assert!(!err, "{text}");
        assert!(text.contains("→ 1 "), "{text}");
        let (err, text) = call(
            &mut t,
            "search",
            json!({"query": "lease", "project": "other"}),
        );
        assert!(!err);
        assert!(text.contains("No results in project 'other'"), "{text}");
        let (_, text) = call(
            &mut t,
            "search",
            json!({"query": "lease", "all_projects": true}),
        );
        assert!(text.contains("[acme]"), "{text}");
    }

    #[test]
    fn bad_arguments_are_tool_errors_a_model_can_fix() {
        let (_t, mut t) = tools();
        for (tool, args, hint) in [
            ("get_observations", json!({}), "'ids' must be a list"),
            (
                "get_observations",
                json!({"ids": []}),
                "'ids' must be a list",
            ),
            (
                "get_observations",
                json!({"ids": ["x"]}),
                "'ids' must be a list",
            ),
            (
                "get_observations",
                json!({"ids": [404]}),
                "nothing stored as 404",
            ),
            (
                "search",
                json!({"limit": 0}),
                "'limit' must be an integer from 1 to 100",
            ),
            ("search", json!({"type": "bug"}), "unknown type 'bug'"),
            (
                "search",
                json!({"since": "last tuesday"}),
                "'since' must be a date",
            ),
            ("search", json!({"order": "best-ever"}), "'order' must be"),
            ("search", json!({"kind": "emails"}), "'kind' must be"),
            ("search", json!({"query": 5}), "'query' must be a string"),
            ("search", json!({"qeury": "x"}), "unknown argument 'qeury'"),
            ("timeline", json!({}), "give 'anchor'"),
            ("timeline", json!({"anchor": 1, "query": "x"}), "not both"),
            (
                "timeline",
                json!({"anchor": "X3"}),
                "'anchor' must be an id",
            ),
            ("timeline", json!({"anchor": "P9"}), "no record P9"),
            // A null anchor is one not given, as for every other argument.
            ("timeline", json!({"anchor": null}), "give 'anchor'"),
            (
                "timeline",
                json!({"anchor": 77}),
                "no observation with id 77",
            ),
            ("save_memory", json!({"text": "x"}), "'title' is required"),
            ("save_memory", json!({"title": "x"}), "'text' is required"),
            (
                "save_memory",
                json!({"title": "x", "text": "y", "type": "idea"}),
                "unknown type 'idea'",
            ),
        ] {
            let (err, text) = call(&mut t, tool, args.clone());
            assert!(err, "{tool} {args}: {text}");
            assert!(text.contains(hint), "{tool} {args}: {text}");
        }
    }

    #[test]
    fn a_record_over_budget_is_cut_saying_so() {
        let (_t, mut t) = tools();
        let huge = "word ".repeat(5_000);
        let (err, text) = call(
            &mut t,
            "save_memory",
            json!({"title": "Huge", "text": huge}),
        );
        assert!(!err, "{text}");
        let (err, text) = call(
            &mut t,
            "get_observations",
            json!({"ids": [1], "max_tokens": 500}),
        );
        assert!(!err, "{text}");
        assert!(text.chars().count() <= 2_000, "{}", text.chars().count());
        assert!(
            text.contains("1 is cut here to stay within 500 tokens"),
            "{text}"
        );
        assert_eq!(
            Tools::new(t.db, "acme", || 0)
                .with_asking_session(Some("abc".into()))
                .asking_session
                .as_deref(),
            Some("abc")
        );
    }

    #[test]
    fn the_database_is_opened_at_the_first_call_that_needs_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("data"));
        let mut t = Tools::new(Database::At(dd.clone()), "acme", || 1);
        assert!(t.call("no_such_tool", None).is_err());
        let (err, _) = call(&mut t, "search", json!({"limit": 0}));
        assert!(err);
        assert!(
            !dd.db().exists(),
            "nothing opened for a call that was refused"
        );
        let (err, text) = call(&mut t, "search", json!({"query": "lease"}));
        assert!(!err, "{text}");
        assert!(dd.db().exists());
        assert!(matches!(t.db, Database::OpenAt(..)));
    }
}
