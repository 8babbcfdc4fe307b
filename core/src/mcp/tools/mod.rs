//! The MCP server's tools: `search`, `timeline`, `get_observations` and `save_memory`,
//! their schemas (`tools/list`), their dispatch (`tools/call`) and how their results are
//! rendered. Arguments are read as their schema says, plus the near-misses models send
//! (`"5"` for 5, `"#12"` for an id, `"true"`, one string for a list of one), which are
//! taken, not refused. A tool failure is an `isError` result whose message says how to fix
//! the call; only an unknown tool name is a protocol error (`-32602`). Writes only through
//! `memory` (`save_memory`, after the privacy filter; saving the same memory again stores
//! nothing new).
//!
//! Every result of `search`, `timeline` and `get_observations` fits a token budget
//! (`max_tokens`, default [`DEFAULT_MAX_TOKENS`]; tokens are characters / 4, as for the
//! context block): whole lines or records are left out, and the result ends saying which
//! and how to get them.

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::mcp::protocol::Server;
use crate::mcp::protocol::code;
use crate::memory;
use crate::memory::observations::{NewObservation, OBSERVATION_TYPES};
use crate::recall::search::{self, Filters, Kind, Order, SearchRequest};
use crate::recall::snippet::{one_line, render_marks, shorten};
use crate::recall::timeline::{self, Anchor, TimelineRequest};

/// The tools `tools/list` lists and `tools/call` runs.
const TOOL_NAMES: &[&str] = &["search", "timeline", "get_observations", "save_memory"];

/// Most ids one `get_observations` call may ask for.
pub const MAX_IDS: usize = 50;
/// Most hits one `search` call may ask for.
pub const MAX_SEARCH_LIMIT: usize = 100;
/// Most records on either side of a `timeline` anchor.
pub const MAX_TIMELINE_SIDE: usize = 50;
/// Token budget of one tool result unless the call passes `max_tokens`: well under Claude
/// Code's limits on MCP tool output (a warning above 10,000 tokens, cut at 25,000 unless
/// `MAX_MCP_OUTPUT_TOKENS` says otherwise).
pub const DEFAULT_MAX_TOKENS: usize = 4_000;
/// Smallest `max_tokens` a call may pass.
pub const MIN_MAX_TOKENS: usize = 500;
/// Largest `max_tokens` a call may pass.
pub const MAX_MAX_TOKENS: usize = 20_000;

impl Server {
    /// `tools/call`: a protocol error (`-32602`) when `params` names no tool or a tool this
    /// server does not have; everything else is a tool result.
    pub(super) fn call(&mut self, params: &Map<String, Value>) -> Result<Value, (i64, String)> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err((
                code::INVALID_PARAMS,
                "tools/call needs params.name (a tool name) and params.arguments (an object)"
                    .into(),
            ));
        };
        if !TOOL_NAMES.contains(&name) {
            return Err((
                code::INVALID_PARAMS,
                format!(
                    "unknown tool '{}'; the tools are search, timeline, get_observations and save_memory",
                    shorten(name, 100)
                ),
            ));
        }
        let args = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Ok(tool_error("arguments must be a JSON object")),
        };
        let outcome = match name {
            "search" => self.tool_search(&args),
            "timeline" => self.tool_timeline(&args),
            "get_observations" => self.tool_get_observations(&args),
            _ => self.tool_save_memory(&args),
        };
        Ok(match outcome {
            Ok(text) => json!({ "content": [{ "type": "text", "text": text }], "isError": false }),
            Err(ToolError::Fix(msg)) => tool_error(&msg),
            Err(ToolError::Internal(e)) => {
                log::error!("tool {name} failed: {e}");
                tool_error(&format!("cairn failed: {e}"))
            }
        })
    }

    fn scope(&self, args: &Args) -> std::result::Result<Option<String>, ToolError> {
        if args.bool("all_projects")?.unwrap_or(false) {
            return Ok(None);
        }
        Ok(Some(
            args.string("project")?
                .unwrap_or_else(|| self.project.clone()),
        ))
    }

    fn tool_search(&mut self, raw: &Map<String, Value>) -> std::result::Result<String, ToolError> {
        let args = Args::new(
            raw,
            &[
                "query",
                "type",
                "concept",
                "file",
                "since",
                "until",
                "kind",
                "order",
                "limit",
                "offset",
                "project",
                "all_projects",
                "max_tokens",
            ],
        )?;
        let now = (self.clock)();
        let project = self.scope(&args)?;
        let types = match args.get("type") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ToolError::Fix("'type' must be a string or a list of strings".into())
                })?,
            Some(_) => {
                return Err(ToolError::Fix(
                    "'type' must be a string or a list of strings".into(),
                ));
            }
        };
        for t in &types {
            if !OBSERVATION_TYPES.contains(&t.as_str()) {
                return Err(ToolError::Fix(format!(
                    "unknown type '{}'; use one of {}",
                    shorten(t, 50),
                    OBSERVATION_TYPES.join(", ")
                )));
            }
        }
        let time = |key: &str| -> std::result::Result<Option<i64>, ToolError> {
            match args.string(key)? {
                None => Ok(None),
                Some(s) => search::parse_time(&s, now).map(Some).ok_or_else(|| {
                    ToolError::Fix(format!(
                        "'{key}' must be a date like 2026-01-31 (UTC) or an age like 7d, 12h, 2w; got '{}'",
                        shorten(&s, 50)
                    ))
                }),
            }
        };
        let kinds = match args.string("kind")? {
            None => Vec::new(),
            Some(k) => Kind::parse_list(&k).ok_or_else(|| {
                ToolError::Fix("'kind' must be observations, summaries, prompts or all".into())
            })?,
        };
        let order = match args.string("order")? {
            None => Order::Relevance,
            Some(o) => Order::parse(&o).ok_or_else(|| {
                ToolError::Fix("'order' must be relevance, newest or oldest".into())
            })?,
        };
        let budget = args.budget()?;
        let offset = args.count("offset", 0, search::MAX_OFFSET)?.unwrap_or(0);
        let req = SearchRequest {
            query: args.string("query")?.unwrap_or_default(),
            filters: Filters {
                project: project.clone(),
                types,
                concept: args.string("concept")?,
                file: args.string("file")?,
                since: time("since")?,
                until: time("until")?,
            },
            kinds,
            order,
            limit: args.count("limit", 1, MAX_SEARCH_LIMIT)?.unwrap_or(20),
            offset,
            asking_session: self.asking_session.clone(),
        };
        let hits = self
            .searcher
            .search(&self.conn, &req)
            .map_err(ToolError::Internal)?;
        let scope = match &project {
            Some(p) => format!("project '{p}'"),
            None => "all projects".to_string(),
        };
        if hits.is_empty() {
            return Ok(format!(
                "No results in {scope}. Try fewer or broader words, a prefix like `migrat*`, \
                 `OR` between alternatives{}.",
                if project.is_some() {
                    ", or all_projects: true"
                } else {
                    ""
                }
            ));
        }
        let head = |n: usize| {
            format!(
                "{n} result{} in {scope} (id date type title — snippet). Ids go to timeline or \
                 get_observations (S = turn summary, P = user prompt: pass them as strings).\n",
                if n == 1 { "" } else { "s" }
            )
        };
        let lines: Vec<String> = hits
            .iter()
            .map(|h| {
                let mut line = format!(
                    "{} {} {}{} {}",
                    h.reference(),
                    crate::clock::date_utc(h.created_at),
                    h.label,
                    if project.is_none() {
                        format!(" [{}]", h.project)
                    } else {
                        String::new()
                    },
                    shorten(&one_line(&h.title), 120)
                );
                if !h.snippet.is_empty() {
                    line.push_str(" — ");
                    line.push_str(&bold_marks(&shorten(&h.snippet, 160)));
                }
                line.push('\n');
                line
            })
            .collect();
        // The footer is never longer than this one (the most hits left out, the largest offset).
        let footer = |left: usize, next: usize| {
            format!(
                "{left} more result{} left out to stay within {budget} tokens: call search again \
                 with offset: {next}, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
                if left == 1 { "" } else { "s" }
            )
        };
        let reserve = footer(hits.len(), offset + hits.len()).chars().count();
        let room = budget_chars(budget)
            .saturating_sub(reserve)
            .saturating_sub(head(hits.len()).len());
        let kept = fit_lines(&lines, room);
        let mut out = head(kept);
        for line in &lines[..kept] {
            out.push_str(line);
        }
        if kept < lines.len() {
            out.push_str(&footer(lines.len() - kept, offset + kept));
        }
        Ok(out)
    }

    fn tool_timeline(
        &mut self,
        raw: &Map<String, Value>,
    ) -> std::result::Result<String, ToolError> {
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
        let anchor = match (args.integer("anchor")?, args.string("query")?) {
            (Some(id), None) => Anchor::Observation(id),
            (None, Some(q)) if !q.trim().is_empty() => Anchor::Query(q),
            (Some(_), Some(_)) => {
                return Err(ToolError::Fix(
                    "give either 'anchor' (an observation id) or 'query', not both".into(),
                ));
            }
            _ => {
                return Err(ToolError::Fix(
                    "give 'anchor' (an observation id from search) or 'query' (its best hit becomes the anchor)"
                        .into(),
                ));
            }
        };
        let budget = args.budget()?;
        let project = match (&anchor, args.bool("all_projects")?, args.string("project")?) {
            // An id names one record anywhere: its timeline is its project's, as `get_observations`
            // fetches it from anywhere.
            (Anchor::Observation(id), None | Some(false), None) => {
                match timeline::get_records(&self.conn, &[(search::Kind::Observation, *id)])
                    .map_err(ToolError::Internal)?
                    .found
                    .first()
                {
                    Some(r) => Some(record_project(r).to_string()),
                    None => Some(self.project.clone()),
                }
            }
            _ => self.scope(&args)?,
        };
        let req = TimelineRequest {
            anchor: anchor.clone(),
            before: args.count("before", 0, MAX_TIMELINE_SIDE)?.unwrap_or(5),
            after: args.count("after", 0, MAX_TIMELINE_SIDE)?.unwrap_or(5),
            project: project.clone(),
        };
        let t = match self.searcher.timeline(&self.conn, &req) {
            Ok(t) => t,
            Err(crate::Error::Invalid(msg)) => {
                return Err(ToolError::Fix(msg.replace(
                    "ask for all projects or that project",
                    "pass all_projects: true, or that project as project",
                )));
            }
            Err(e) => return Err(ToolError::Internal(e)),
        };
        if t.anchor.is_none() {
            return Err(ToolError::Fix(match anchor {
                Anchor::Observation(id) => {
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
        let lines: Vec<String> = t
            .entries
            .iter()
            .map(|e| {
                let mut line = format!(
                    "{} {} {} {}{} {}",
                    if e.anchor { "→" } else { " " },
                    e.reference(),
                    crate::clock::iso_utc(e.created_at),
                    e.label,
                    if project.is_none() {
                        format!(" [{}]", e.project)
                    } else {
                        String::new()
                    },
                    shorten(&one_line(&e.title), 120)
                );
                if !e.detail.is_empty() {
                    line.push_str(" — ");
                    line.push_str(&e.detail);
                }
                line.push('\n');
                line
            })
            .collect();
        // Over budget, the records farthest from the anchor go first.
        let centre = t.entries.iter().position(|e| e.anchor).unwrap_or(0);
        let mut order: Vec<usize> = (0..lines.len()).collect();
        order.sort_by_key(|&i| (i.abs_diff(centre), i));
        let head = "Timeline, oldest first (→ marks the anchor):\n";
        let footer = |left: &[String]| {
            format!(
                "Left out to stay within {budget} tokens: {}. Fetch them with get_observations, \
                 ask for fewer with before/after, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
                left.join(", ")
            )
        };
        let all_refs: Vec<String> = t.entries.iter().map(|e| e.reference()).collect();
        let room = budget_chars(budget)
            .saturating_sub(head.len())
            .saturating_sub(footer(&all_refs).chars().count());
        let ordered: Vec<String> = order.iter().map(|&i| lines[i].clone()).collect();
        let kept = fit_lines(&ordered, room);
        let mut keep = vec![false; lines.len()];
        for &i in &order[..kept] {
            keep[i] = true;
        }
        let mut out = String::from(head);
        let mut left = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if keep[i] {
                out.push_str(line);
            } else {
                left.push(all_refs[i].clone());
            }
        }
        if !left.is_empty() {
            out.push_str(&footer(&left));
        }
        Ok(out)
    }

    fn tool_get_observations(
        &mut self,
        raw: &Map<String, Value>,
    ) -> std::result::Result<String, ToolError> {
        let args = Args::new(raw, &["ids", "max_tokens"])?;
        let budget = args.budget()?;
        let fix = || {
            ToolError::Fix(format!(
                "'ids' must be a list of 1 to {MAX_IDS} ids as search and timeline list them: observations as integers, turn summaries and prompts as strings, e.g. {{\"ids\": [12, 15, \"S3\"]}}"
            ))
        };
        let refs: Vec<(search::Kind, i64)> = match args.get("ids") {
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_IDS => items
                .iter()
                .map(as_reference)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(fix)?,
            // A lone id is what was meant.
            Some(v @ (Value::Number(_) | Value::String(_))) => {
                vec![as_reference(v).ok_or_else(fix)?]
            }
            _ => return Err(fix()),
        };
        let fetched = timeline::get_records(&self.conn, &refs).map_err(ToolError::Internal)?;
        if fetched.found.is_empty() {
            return Err(ToolError::Fix(format!(
                "nothing stored as {}; take ids from search or timeline results",
                fetched.missing.join(", ")
            )));
        }
        let texts: Vec<String> = fetched
            .found
            .iter()
            .map(|r| format!("{}\n", render_record(r)))
            .collect();
        let refs: Vec<String> = fetched.found.iter().map(record_reference).collect();
        let missing = if fetched.missing.is_empty() {
            String::new()
        } else {
            format!("Not found: {}\n", fetched.missing.join(", "))
        };
        let footer = |left: &[String]| {
            format!(
                "Left out to stay within {budget} tokens: {}. Ask for them in another \
                 get_observations call, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
                left.join(", ")
            )
        };
        let room = budget_chars(budget)
            .saturating_sub(missing.chars().count())
            .saturating_sub(footer(&refs[1..]).chars().count());
        let kept = fit_lines(&texts, room);
        let mut out = String::new();
        for (i, text) in texts[..kept].iter().enumerate() {
            if i == 0 && text.chars().count() > room {
                // One record bigger than the whole budget: its head, and how to read it all.
                out.push_str(&shorten(text, room.saturating_sub(200)));
                out.push_str(&format!(
                    "\n[{} is cut here to stay within {budget} tokens; pass max_tokens (up to \
                     {MAX_MAX_TOKENS}) to read it whole.]\n\n",
                    refs[0]
                ));
            } else {
                out.push_str(text);
            }
        }
        out.push_str(&missing);
        if kept < texts.len() {
            out.push_str(&footer(&refs[kept..]));
        }
        Ok(out)
    }

    fn tool_save_memory(
        &mut self,
        raw: &Map<String, Value>,
    ) -> std::result::Result<String, ToolError> {
        let args = Args::new(
            raw,
            &["title", "text", "type", "files", "concepts", "project"],
        )?;
        let title = args
            .string("title")?
            .map(|t| one_line(&t))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ToolError::Fix("'title' is required: one short line naming the memory".into())
            })?;
        let text = args
            .string("text")?
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                ToolError::Fix("'text' is required: what to remember, in full sentences".into())
            })?;
        let kind = args.string("type")?.unwrap_or_else(|| "discovery".into());
        if !OBSERVATION_TYPES.contains(&kind.as_str()) {
            return Err(ToolError::Fix(format!(
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
            title: shorten(&title, 200),
            narrative: text,
            files_modified: args.strings("files")?,
            concepts: args.strings("concepts")?,
            origin: "manual".into(),
            created_at: (self.clock)(),
            ..NewObservation::default()
        };
        self.privacy.observation(&mut obs);
        let stored = crate::store::db::write(&mut self.conn, |tx| {
            memory::observations::save_manual(tx, &obs)
        })
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

/// Full text of an observation, for a model or a person.
pub fn render_observation(o: &timeline::Observation) -> String {
    let mut out = format!(
        "#{} {} [{}] {} — {}\n",
        o.id,
        o.kind,
        o.project,
        crate::clock::iso_utc(o.created_at),
        o.title
    );
    if !o.subtitle.is_empty() {
        out.push_str(&format!("{}\n", o.subtitle));
    }
    if !o.narrative.is_empty() {
        out.push_str(&format!("\n{}\n", o.narrative.trim_end()));
    }
    for (label, list) in [
        ("Facts", &o.facts),
        ("Concepts", &o.concepts),
        ("Files read", &o.files_read),
        ("Files modified", &o.files_modified),
    ] {
        if list.is_empty() {
            continue;
        }
        out.push_str(&format!("{label}:\n"));
        for item in list {
            out.push_str(&format!("- {item}\n"));
        }
    }
    match (&o.session_id, o.prompt_number) {
        (Some(s), Some(n)) => out.push_str(&format!("Session {s}, prompt {n}\n")),
        (Some(s), None) => out.push_str(&format!("Session {s}\n")),
        _ => out.push_str(&format!("Saved by hand ({})\n", o.origin)),
    }
    if let Some(p) = &o.prompt {
        out.push_str(&format!("Prompt: {}\n", shorten(&one_line(p), 300)));
    }
    out
}

/// Any record as text: an observation as [`render_observation`] does, a summary with its
/// sections, a prompt with its text.
pub fn render_record(r: &timeline::Record) -> String {
    match r {
        timeline::Record::Observation(o) => render_observation(o),
        timeline::Record::Summary(s) => {
            let mut out = format!(
                "S{} summary [{}] {} — session {}, prompt {}\n",
                s.id,
                s.project,
                crate::clock::iso_utc(s.created_at),
                s.session_id,
                s.prompt_number
            );
            for (label, text) in [
                ("Request", &s.request),
                ("Investigated", &s.investigated),
                ("Learned", &s.learned),
                ("Completed", &s.completed),
                ("Next steps", &s.next_steps),
                ("Notes", &s.notes),
            ] {
                if !text.trim().is_empty() {
                    out.push_str(&format!("{label}: {}\n", text.trim_end()));
                }
            }
            for (label, list) in [
                ("Files read", &s.files_read),
                ("Files edited", &s.files_edited),
            ] {
                if list.is_empty() {
                    continue;
                }
                out.push_str(&format!("{label}:\n"));
                for item in list {
                    out.push_str(&format!("- {item}\n"));
                }
            }
            out
        }
        timeline::Record::Prompt(p) => format!(
            "P{} prompt [{}] {} — session {}, prompt {}\n\n{}\n",
            p.id,
            p.project,
            crate::clock::iso_utc(p.created_at),
            p.session_id,
            p.prompt_number,
            p.text.trim_end()
        ),
    }
}

/// An id as search and timeline list it: a number (an observation) or a string (`12`,
/// `S3`, `P7`).
fn as_reference(v: &Value) -> Option<(search::Kind, i64)> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .filter(|id| *id > 0)
            .map(|id| (search::Kind::Observation, id)),
        Value::String(s) => search::Kind::parse_reference(s),
        _ => None,
    }
}

/// An id as a number, or a string of digits (with an optional leading `#`).
fn as_id(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().trim_start_matches('#').parse().ok(),
        _ => None,
    }
}

/// A record's id as search lists it (`12`, `S3`, `P7`).
fn record_reference(r: &timeline::Record) -> String {
    match r {
        timeline::Record::Observation(o) => search::Kind::Observation.reference(o.id),
        timeline::Record::Summary(s) => search::Kind::Summary.reference(s.id),
        timeline::Record::Prompt(p) => search::Kind::Prompt.reference(p.id),
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

/// Characters a token budget allows (tokens are characters / 4).
fn budget_chars(tokens: usize) -> usize {
    tokens * 4
}

/// How many of the leading `items` fit in `room` characters: at least one, so a result is
/// never empty (a single item too big is cut by its caller).
fn fit_lines(items: &[String], room: usize) -> usize {
    let mut used = 0;
    let mut n = 0;
    for item in items {
        used += item.chars().count();
        if used > room && n > 0 {
            break;
        }
        n += 1;
    }
    n
}

/// A snippet with its matches marked `**like this**`, for a model to read.
fn bold_marks(snippet: &str) -> String {
    render_marks(snippet, "**", "**")
}

/// Why a tool call failed.
#[derive(Debug)]
enum ToolError {
    /// The call can be fixed; the message says how.
    Fix(String),
    /// cairn failed.
    Internal(crate::Error),
}

/// Typed access to tool arguments, with errors a model can act on.
struct Args<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    /// Rejects keys the tool does not know, listing the ones it does.
    fn new(map: &'a Map<String, Value>, known: &[&str]) -> std::result::Result<Self, ToolError> {
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ToolError::Fix(format!(
                "unknown argument '{}'; this tool takes {}",
                shorten(k, 50),
                known.join(", ")
            )));
        }
        Ok(Self { map })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    fn string(&self, key: &str) -> std::result::Result<Option<String>, ToolError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ToolError::Fix(format!("'{key}' must be a string"))),
        }
    }

    fn strings(&self, key: &str) -> std::result::Result<Vec<String>, ToolError> {
        let bad = || ToolError::Fix(format!("'{key}' must be a list of strings"));
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad),
            Some(_) => Err(bad()),
        }
    }

    fn bool(&self, key: &str) -> std::result::Result<Option<bool>, ToolError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
            Some(_) => Err(ToolError::Fix(format!("'{key}' must be true or false"))),
        }
    }

    fn integer(&self, key: &str) -> std::result::Result<Option<i64>, ToolError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_id(v)
                .map(Some)
                .ok_or_else(|| ToolError::Fix(format!("'{key}' must be an integer"))),
        }
    }

    /// `max_tokens`: the token budget of this result.
    fn budget(&self) -> std::result::Result<usize, ToolError> {
        Ok(self
            .count("max_tokens", MIN_MAX_TOKENS, MAX_MAX_TOKENS)?
            .unwrap_or(DEFAULT_MAX_TOKENS))
    }

    fn count(
        &self,
        key: &str,
        min: usize,
        max: usize,
    ) -> std::result::Result<Option<usize>, ToolError> {
        match self.integer(key) {
            Ok(None) => Ok(None),
            Ok(Some(n)) if n >= min as i64 && n <= max as i64 => Ok(Some(n as usize)),
            _ => Err(ToolError::Fix(format!(
                "'{key}' must be an integer from {min} to {max}"
            ))),
        }
    }
}

fn tool_error(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

/// The tool definitions, with their JSON Schemas.
pub fn tools() -> Value {
    let project = json!({
        "type": "string",
        "description": "Project name. Default: the project this server was started in."
    });
    let all_projects = json!({
        "type": "boolean",
        "default": false,
        "description": "Search every project instead of one; each line then shows its project."
    });
    let max_tokens = json!({
        "type": "integer",
        "minimum": MIN_MAX_TOKENS,
        "maximum": MAX_MAX_TOKENS,
        "default": DEFAULT_MAX_TOKENS,
        "description": "Token budget of this result (characters / 4). What does not fit is left out, and the result ends saying which records and how to get them."
    });
    json!([
        {
            "name": "search",
            "title": "Search memory",
            "description": "Step 1 of 3. Search this project's memory of past sessions: observations (what was \
    learned, decided, fixed), turn summaries and user prompts. Returns a compact index, one line per hit: \
    id, date, type, title and a snippet with matches in **bold**. Cheap: run it first, then call \
    `timeline` around an interesting id (step 2) and `get_observations` for the few ids you need in \
    full (step 3). Query language: words (all must match), \"exact phrase\", -excluded, a OR b, prefix*. \
    An empty query lists the newest records matching the filters.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": { "type": "string", "description": "Words to find, e.g. `lease rescue`, `\"busy timeout\" -test`, `sqlite OR postgres`, `migrat*`." },
                    "type": {
                        "description": "Only observations of this type (or any of these types).",
                        "anyOf": [
                            { "type": "string", "enum": OBSERVATION_TYPES },
                            { "type": "array", "items": { "type": "string", "enum": OBSERVATION_TYPES } }
                        ]
                    },
                    "concept": { "type": "string", "description": "Only observations tagged with this concept, e.g. `gotcha`, `how-it-works`, `trade-off`." },
                    "file": { "type": "string", "description": "Only records that read or modified a file whose path contains this text, e.g. `src/db.rs`." },
                    "since": { "type": "string", "description": "Only records from this time on: a UTC date `2026-01-31`, or an age like `7d`, `12h`, `2w`." },
                    "until": { "type": "string", "description": "Only records before this time (same forms as `since`)." },
                    "kind": { "type": "string", "enum": ["all", "observations", "summaries", "prompts"], "default": "all", "description": "Which records to search." },
                    "order": { "type": "string", "enum": ["relevance", "newest", "oldest"], "default": "relevance" },
                    "limit": { "type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": 20 },
                    "offset": { "type": "integer", "minimum": 0, "default": 0, "description": "Skip this many hits (paging)." },
                    "project": project,
                    "all_projects": all_projects,
                    "max_tokens": max_tokens
                },
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "timeline",
            "title": "Timeline around a memory",
            "description": "Step 2 of 3. Show what happened around one record, in time order: the observations, \
    turn summaries and prompts before and after it, the anchor marked with →. Give `anchor` (an \
    observation id from `search`) or `query` (its best hit becomes the anchor). Use it to understand \
    the context of a hit before fetching full details with `get_observations`.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "anchor": { "type": "integer", "description": "Observation id to centre on (from search results)." },
                    "query": { "type": "string", "description": "Instead of an id: centre on the best hit of this search." },
                    "before": { "type": "integer", "minimum": 0, "maximum": MAX_TIMELINE_SIDE, "default": 5, "description": "Records before the anchor." },
                    "after": { "type": "integer", "minimum": 0, "maximum": MAX_TIMELINE_SIDE, "default": 5, "description": "Records after the anchor." },
                    "project": project,
                    "all_projects": all_projects,
                    "max_tokens": max_tokens
                },
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "get_observations",
            "title": "Fetch observations in full",
            "description": "Step 3 of 3. Fetch full records by id: an observation's narrative, facts, concepts, \
    files read and modified, session and the user's prompt; a turn summary's sections (S ids); a prompt's \
    text (P ids). Costs more tokens than the index, so ask only for the ids that matter (from `search` or \
    `timeline`). Returned in the order asked, within `max_tokens`; unknown ids and ids left out for the budget \
    are listed.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": { "type": ["integer", "string"] },
                        "minItems": 1,
                        "maxItems": MAX_IDS,
                        "description": "Ids as search and timeline list them: observations as integers, turn summaries and prompts as strings, e.g. [12, 15, \"S3\", \"P7\"]."
                    },
                    "max_tokens": max_tokens
                },
                "required": ["ids"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "save_memory",
            "title": "Save a memory",
            "description": "Store something worth remembering in later sessions (a decision and its reason, a \
    gotcha, how something works). It becomes an observation of the current project, found by \
    `search` from then on. Write a specific title and self-contained text. Saving the same memory again \
    stores nothing new and answers with the id it already has.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "title": { "type": "string", "description": "One short line naming the memory." },
                    "text": { "type": "string", "description": "What to remember, in full sentences." },
                    "type": { "type": "string", "enum": OBSERVATION_TYPES, "default": "discovery" },
                    "files": { "type": "array", "items": { "type": "string" }, "description": "Files it is about." },
                    "concepts": { "type": "array", "items": { "type": "string" }, "description": "Tags, e.g. gotcha, trade-off." },
                    "project": project
                },
                "required": ["title", "text"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false }
        }
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::protocol::{
        META_VERSION, Outcome, STATELESS_VERSION, SUPPORTED_VERSIONS, serve,
    };

    fn server() -> (tempfile::TempDir, Server) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let conn = crate::store::db::open_data_dir(&dd, crate::store::db::OpenOptions::default())
            .expect("open");
        (tmp, Server::new(conn, "acme", || 1_790_000_000_000))
    }

    fn reply(s: &mut Server, line: &str) -> Value {
        match s.handle_line(line.as_bytes()) {
            Outcome::Reply(v) => v,
            Outcome::Silent => panic!("no reply to {line}"),
        }
    }

    fn call(s: &mut Server, name: &str, args: Value) -> (bool, String) {
        let r = reply(
            s,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}})
                .to_string(),
        );
        let result = &r["result"];
        (
            result["isError"].as_bool().expect("isError"),
            result["content"][0]["text"]
                .as_str()
                .expect("text")
                .to_string(),
        )
    }

    #[test]
    fn negotiates_versions() {
        let (_t, mut s) = server();
        for (asked, want) in [
            ("2024-11-05", "2024-11-05"),
            ("2025-03-26", "2025-03-26"),
            ("2025-06-18", "2025-06-18"),
            ("2025-11-25", "2025-11-25"),
            ("2026-07-28", "2025-11-25"),
            ("1999-01-01", "2025-11-25"),
        ] {
            let r = reply(
                &mut s,
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":asked}})
                    .to_string(),
            );
            assert_eq!(r["id"], json!(0));
            assert_eq!(r["result"]["protocolVersion"], json!(want), "{asked}");
            assert_eq!(s.negotiated(), Some(want));
        }
    }

    #[test]
    fn stateless_requests_carry_their_version() {
        let (_t, mut s) = server();
        let meta = |v: &str| json!({"_meta": {META_VERSION: v, "io.modelcontextprotocol/clientCapabilities": {}}});
        let r = reply(
            &mut s,
            &json!({"jsonrpc":"2.0","id":"d","method":"server/discover","params":meta(STATELESS_VERSION)}).to_string(),
        );
        assert_eq!(r["result"]["resultType"], json!("complete"));
        assert_eq!(r["result"]["supportedVersions"], json!(SUPPORTED_VERSIONS));
        let r = reply(
            &mut s,
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":meta(STATELESS_VERSION)})
                .to_string(),
        );
        assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4));
        assert_eq!(r["result"]["ttlMs"], json!(3_600_000));
        let r = reply(
            &mut s,
            &json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":meta("2099-01-01")})
                .to_string(),
        );
        assert_eq!(r["error"]["code"], json!(code::UNSUPPORTED_VERSION));
        assert_eq!(r["error"]["data"]["requested"], json!("2099-01-01"));
    }

    #[test]
    fn protocol_errors() {
        let (_t, mut s) = server();
        assert_eq!(
            reply(&mut s, "{not json")["error"]["code"],
            json!(code::PARSE_ERROR)
        );
        assert_eq!(reply(&mut s, "{not json")["id"], Value::Null);
        assert_eq!(
            reply(&mut s, "[]")["error"]["code"],
            json!(code::INVALID_REQUEST)
        );
        assert_eq!(
            reply(&mut s, "42")["error"]["code"],
            json!(code::INVALID_REQUEST)
        );
        assert_eq!(
            reply(&mut s, r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#)["error"]["code"],
            json!(code::INVALID_REQUEST)
        );
        assert_eq!(
            reply(&mut s, r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#)["error"]["code"],
            json!(code::INVALID_REQUEST)
        );
        let r = reply(&mut s, r#"{"jsonrpc":"2.0","id":"x","method":"nope"}"#);
        assert_eq!(r["error"]["code"], json!(code::METHOD_NOT_FOUND));
        assert_eq!(r["id"], json!("x"));
        assert_eq!(
            reply(
                &mut s,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#
            )["error"]["code"],
            json!(code::INVALID_PARAMS)
        );
        assert_eq!(
            reply(
                &mut s,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#
            )["error"]["code"],
            json!(code::INVALID_PARAMS)
        );
        assert_eq!(
            reply(&mut s, r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)["result"],
            json!({})
        );
        for silent in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"unknown/notification"}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
            "",
            "   ",
        ] {
            assert_eq!(
                s.handle_line(silent.as_bytes()),
                Outcome::Silent,
                "{silent}"
            );
        }
    }

    #[test]
    fn tools_round_trip() {
        let (_t, mut s) = server();
        let (err, text) = call(&mut s, "search", json!({"query": "lease"}));
        assert!(!err);
        assert!(text.starts_with("No results in project 'acme'"), "{text}");
        let (err, text) = call(
            &mut s,
            "save_memory",
            json!({"title": "Lease rescue counts as an attempt", "text": "A rescued lease is a failed attempt.", "type": "decision", "files": ["core/src/queue.rs"]}),
        );
        assert!(!err, "{text}");
        assert!(
            text.contains("Saved as observation 1 in project 'acme'"),
            "{text}"
        );
        let (err, text) = call(
            &mut s,
            "search",
            json!({"query": "lease", "type": ["decision"]}),
        );
        assert!(!err);
        assert!(
            text.contains("1 2026-09-21 decision Lease rescue counts"),
            "{text}"
        );
        assert!(text.contains("A rescued **lease**"), "{text}");
        let (err, text) = call(&mut s, "timeline", json!({"anchor": 1}));
        assert!(!err, "{text}");
        assert!(text.contains("→ 1 "), "{text}");
        let (err, text) = call(&mut s, "get_observations", json!({"ids": [1, 99]}));
        assert!(!err, "{text}");
        assert!(
            text.contains("A rescued lease is a failed attempt."),
            "{text}"
        );
        assert!(text.contains("- core/src/queue.rs"), "{text}");
        assert!(text.contains("Not found: 99"), "{text}");
        // Summaries and prompts, as search and timeline list them (S1, P5).
        crate::store::db::write(&mut s.conn, |tx| {
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
        let (err, text) = call(&mut s, "get_observations", json!({"ids": ["S1", 1, "P5"]}));
        assert!(!err, "{text}");
        assert!(text.starts_with("S1 summary [acme]"), "{text}");
        assert!(text.contains("Request: make rescues count"), "{text}");
        assert!(text.contains("Completed: rescue is an attempt"), "{text}");
        assert!(text.contains("#1 decision"), "{text}");
        assert!(text.contains("Not found: P5"), "{text}");
        let (err, text) = call(
            &mut s,
            "search",
            json!({"query": "lease", "project": "other"}),
        );
        assert!(!err);
        assert!(text.contains("No results in project 'other'"), "{text}");
        let (_, text) = call(
            &mut s,
            "search",
            json!({"query": "lease", "all_projects": true}),
        );
        assert!(text.contains("[acme]"), "{text}");
    }

    #[test]
    fn bad_arguments_are_tool_errors_a_model_can_fix() {
        let (_t, mut s) = server();
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
            let (err, text) = call(&mut s, tool, args.clone());
            assert!(err, "{tool} {args}: {text}");
            assert!(text.contains(hint), "{tool} {args}: {text}");
        }
    }

    #[test]
    fn an_unknown_tool_is_a_protocol_error() {
        let (_t, mut s) = server();
        let r = reply(
            &mut s,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
        );
        assert_eq!(r["error"]["code"], json!(code::INVALID_PARAMS), "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("unknown tool 'no_such_tool'")),
            "{r}"
        );
    }

    #[test]
    fn budgets_keep_whole_lines_and_say_what_was_left_out() {
        assert_eq!(fit_lines(&["ab".into(), "cd".into(), "ef".into()], 4), 2);
        assert_eq!(fit_lines(&["abcdef".into(), "g".into()], 2), 1);
        assert_eq!(fit_lines(&[], 10), 0);
        let (_t, mut s) = server();
        let huge = "word ".repeat(5_000);
        let (err, text) = call(
            &mut s,
            "save_memory",
            json!({"title": "Huge", "text": huge}),
        );
        assert!(!err, "{text}");
        let (err, text) = call(
            &mut s,
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
            Server::new(s.conn, "acme", || 0)
                .with_asking_session(Some("abc".into()))
                .asking_session
                .as_deref(),
            Some("abc")
        );
    }

    #[test]
    fn serve_flushes_each_reply_and_ends_at_eof() {
        let (_t, mut s) = server();
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n\xff\xfe\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";
        let mut out = Vec::new();
        serve(&mut s, &input[..], &mut out).expect("serve");
        let lines: Vec<Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["id"], json!(1));
        assert_eq!(lines[1]["error"]["code"], json!(code::PARSE_ERROR));
        assert_eq!(lines[2]["id"], json!(2));
    }

    #[test]
    fn tool_schemas_are_objects_with_descriptions() {
        let tools = tools();
        for t in tools.as_array().expect("array") {
            assert_eq!(t["inputSchema"]["type"], json!("object"), "{t}");
            assert!(
                t["description"].as_str().is_some_and(|d| d.len() > 100),
                "{t}"
            );
        }
    }
}
