//! Reading a tool's arguments: as its schema says, plus the near-misses models send (`"5"`
//! for 5, `"#12"` for an id, `"true"`, one string for a list of one), which are taken, not
//! refused. Every refusal is a [`ToolError::BadArgument`] saying how to fix the call.
//!
//! [`search_request`] is the one place a `search` call's arguments become a
//! [`SearchRequest`].

use serde_json::{Map, Value};

use crate::mcp::tools::error::ToolError;
use crate::mcp::tools::schema::{
    DEFAULT_MAX_TOKENS, MAX_MAX_TOKENS, MAX_SEARCH_LIMIT, MIN_MAX_TOKENS,
};
use crate::memory::kind::Kind;
use crate::memory::observations::OBSERVATION_TYPES;
use crate::recall::request::{RequestError, SearchFields};
use crate::recall::search::{self, SearchRequest};
use crate::recall::snippet::shorten;

type Result<T> = std::result::Result<T, ToolError>;

fn bad(message: impl Into<String>) -> ToolError {
    ToolError::BadArgument(message.into())
}

/// Typed access to tool arguments, with errors a model can act on.
#[derive(Debug)]
pub struct Args<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    /// Rejects keys the tool does not know, listing the ones it does.
    pub fn new(map: &'a Map<String, Value>, known: &[&str]) -> Result<Self> {
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown argument '{}'; this tool takes {}",
                shorten(k, 50),
                known.join(", ")
            )));
        }
        Ok(Self { map })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    pub fn string(&self, key: &str) -> Result<Option<String>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(format!("'{key}' must be a string"))),
        }
    }

    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        let fix = || bad(format!("'{key}' must be a list of strings"));
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(fix),
            Some(_) => Err(fix()),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
            Some(_) => Err(bad(format!("'{key}' must be true or false"))),
        }
    }

    pub fn integer(&self, key: &str) -> Result<Option<i64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_id(v)
                .map(Some)
                .ok_or_else(|| bad(format!("'{key}' must be an integer"))),
        }
    }

    /// An id as search lists it ([`as_reference`]).
    pub fn reference(&self, key: &str) -> Result<Option<(Kind, i64)>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_reference(v).map(Some).ok_or_else(|| {
                bad(format!(
                    "'{key}' must be an id as search lists it: an observation as an integer, a turn summary or prompt as a string (\"S3\", \"P7\")"
                ))
            }),
        }
    }

    /// `max_tokens`: the token budget of this result.
    pub fn budget(&self) -> Result<usize> {
        Ok(self
            .count("max_tokens", MIN_MAX_TOKENS, MAX_MAX_TOKENS)?
            .unwrap_or(DEFAULT_MAX_TOKENS))
    }

    pub fn count(&self, key: &str, min: usize, max: usize) -> Result<Option<usize>> {
        match self.integer(key) {
            Ok(None) => Ok(None),
            Ok(Some(n)) if n >= min as i64 && n <= max as i64 => Ok(Some(n as usize)),
            _ => Err(bad(format!(
                "'{key}' must be an integer from {min} to {max}"
            ))),
        }
    }

    /// The project to look in: `None` for `all_projects: true`, else `project`, else
    /// `default_project` (the one the server was started in).
    pub fn scope(&self, default_project: &str) -> Result<Option<String>> {
        if self.bool("all_projects")?.unwrap_or(false) {
            return Ok(None);
        }
        Ok(Some(
            self.string("project")?
                .unwrap_or_else(|| default_project.to_string()),
        ))
    }
}

/// The arguments `search` takes.
pub const SEARCH_ARGS: &[&str] = &[
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
];

/// Builds the search a `search` call asks for, checking its filters (type, kind, order,
/// dates, limit and offset); `max_tokens` is the renderer's, read apart. Dates are read
/// against `now` (ages like `7d` count back from it).
pub fn search_request(
    args: &Args,
    default_project: &str,
    asking_session: Option<&str>,
    now: i64,
) -> Result<SearchRequest> {
    let project = args.scope(default_project)?;
    let types = match args.get("type") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("'type' must be a string or a list of strings"))?,
        Some(_) => return Err(bad("'type' must be a string or a list of strings")),
    };
    let fields = SearchFields {
        query: args.string("query")?.unwrap_or_default(),
        project,
        types,
        concept: args.string("concept")?,
        file: args.string("file")?,
        since: args.string("since")?,
        until: args.string("until")?,
        kind: args.string("kind")?,
        order: args.string("order")?,
        limit: args.count("limit", 1, MAX_SEARCH_LIMIT)?.unwrap_or(20),
        offset: args.count("offset", 0, search::MAX_OFFSET)?.unwrap_or(0),
        asking_session: asking_session.map(str::to_string),
    };
    fields.to_request(now).map_err(|e| {
        bad(match e {
            RequestError::UnknownType(t) => format!(
                "unknown type '{}'; use one of {}",
                shorten(&t, 50),
                OBSERVATION_TYPES.join(", ")
            ),
            RequestError::BadTime { field, value } => format!(
                "'{field}' must be a date like 2026-01-31 (UTC) or an age like 7d, 12h, 2w; got '{}'",
                shorten(&value, 50)
            ),
            RequestError::UnknownKind(_) => {
                "'kind' must be observations, summaries, prompts or all".into()
            }
            RequestError::UnknownOrder(_) => "'order' must be relevance, newest or oldest".into(),
        })
    })
}

/// An id as search and timeline list it: a number (an observation) or a string (`12`,
/// `S3`, `P7`).
pub fn as_reference(v: &Value) -> Option<(Kind, i64)> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .filter(|id| *id > 0)
            .map(|id| (Kind::Observation, id)),
        Value::String(s) => Kind::parse_reference(s),
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
