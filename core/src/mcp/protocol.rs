//! The MCP server: JSON-RPC 2.0 over stdio, one message per line, written by hand on
//! `serde_json` (no async runtime, no SDK).
//!
//! Protocol:
//! - `initialize` negotiates the version: the client's when it is one of
//!   [`HANDSHAKE_VERSIONS`], else the newest of them. Revision `2026-07-28` has no
//!   handshake (every request carries its version in `_meta`), so it is answered by
//!   `server/discover` and per-request `_meta` instead; see [`SUPPORTED_VERSIONS`].
//! - `ping` answers `{}`; `tools/list`; `tools/call`; notifications (no `id`) are never
//!   answered, whatever their method.
//! - Errors: `-32700` for a line that is not JSON, `-32600` for JSON that is not a request,
//!   `-32601` for an unknown method (before `initialize` too), `-32602` for bad `params`,
//!   `-32022` for a `_meta` protocol version this server does not speak.
//! - Tool failures (bad arguments, unknown ids, unknown tool) are results with
//!   `isError: true` and a message saying how to fix the call, never protocol errors.
//! - Every reply is one line, written and flushed before the next message is read; the
//!   server returns when stdin closes.
use std::io::{BufRead, Write};

use rusqlite::Connection;
use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::mcp::tools::tools;
use crate::recall::snippet::shorten;

/// Protocol revisions that open with an `initialize` handshake, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless revision: no handshake, the version travels in each request's `_meta`.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// Every revision this server speaks, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    STATELESS_VERSION,
];
/// The `_meta` key carrying a stateless request's protocol version.
pub(super) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key carrying the server's identity in a stateless result.
pub(super) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// JSON-RPC error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP `2026-07-28`: the request's protocol version is not supported.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

const INSTRUCTIONS: &str = "cairn is this project's memory of past Claude Code sessions. \
Use it in three steps to keep tokens low: 1) `search` returns a compact index (id, date, type, \
title, snippet); 2) `timeline` shows what happened around an interesting id; 3) \
`get_observations` fetches full details only for the ids that matter. `save_memory` stores \
something worth remembering. Results are scoped to the current project unless you pass \
`all_projects: true`.";

/// The server's state: one database connection and the project it serves.
#[derive(Debug)]
pub struct Server {
    pub(super) conn: Connection,
    pub(super) project: String,
    pub(super) clock: fn() -> i64,
    /// The version agreed by `initialize`, if it happened.
    negotiated: Option<String>,
    /// Cleans memories saved through `save_memory`, like everything captured.
    pub(super) privacy: crate::privacy::Privacy,
    /// Searches by meaning when a sentence model is available, else by words.
    pub(super) searcher: crate::recall::searcher::Searcher,
    /// The Claude Code session that started this server, when it said so (see
    /// [`Server::with_asking_session`]).
    pub(super) asking_session: Option<String>,
}

/// What handling one line produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A reply to write.
    Reply(Value),
    /// Nothing to write (a notification, a client's response, a blank line).
    Silent,
}

impl Server {
    /// A server on `conn` whose default project is `project`; `clock` gives `now` in ms
    /// (pass `clock::now_ms`; tests pass a fixed clock).
    pub fn new(conn: Connection, project: impl Into<String>, clock: fn() -> i64) -> Self {
        Self {
            conn,
            project: project.into(),
            clock,
            negotiated: None,
            privacy: crate::privacy::Privacy::from_settings(&Default::default()),
            asking_session: None,
            searcher: crate::recall::searcher::Searcher::full_text_only("no sentence model given"),
        }
    }

    /// Searches with this model (and its index) where a query has words to rank by.
    pub fn with_searcher(mut self, searcher: crate::recall::searcher::Searcher) -> Self {
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
    pub fn with_privacy(mut self, privacy: crate::privacy::Privacy) -> Self {
        self.privacy = privacy;
        self
    }

    /// The protocol version `initialize` agreed on, if any.
    pub fn negotiated(&self) -> Option<&str> {
        self.negotiated.as_deref()
    }

    /// Handles one line of input.
    pub fn handle_line(&mut self, line: &[u8]) -> Outcome {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Outcome::Silent;
        }
        let msg: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                return Outcome::Reply(error(
                    Value::Null,
                    code::PARSE_ERROR,
                    &format!("parse error: {e}"),
                    None,
                ));
            }
        };
        self.handle_message(msg)
    }

    /// Handles one decoded message.
    pub fn handle_message(&mut self, msg: Value) -> Outcome {
        let Value::Object(obj) = msg else {
            let what = if msg.is_array() {
                "batches are not supported; send one message per line"
            } else {
                "a message must be a JSON object"
            };
            return Outcome::Reply(error(Value::Null, code::INVALID_REQUEST, what, None));
        };
        let id = obj.get("id").cloned();
        let valid_id = match &id {
            None => true,
            Some(Value::String(_)) => true,
            Some(Value::Number(_)) => true,
            Some(_) => false,
        };
        let method = obj.get("method").and_then(Value::as_str);
        // A response from the client (we never send requests): ignore.
        if method.is_none() && (obj.contains_key("result") || obj.contains_key("error")) {
            return Outcome::Silent;
        }
        let reply_id = if valid_id {
            id.clone().unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !valid_id {
            return Outcome::Reply(error(
                reply_id,
                code::INVALID_REQUEST,
                "invalid request: expected {\"jsonrpc\": \"2.0\", \"id\": number or string, \"method\": string}",
                None,
            ));
        }
        let Some(method) = method else {
            return Outcome::Reply(error(
                reply_id,
                code::INVALID_REQUEST,
                "invalid request: missing \"method\"",
                None,
            ));
        };
        let Some(id) = id else {
            // A notification: never answered.
            log::debug!("notification {method}");
            return Outcome::Silent;
        };
        let params = match obj.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                return Outcome::Reply(error(
                    id,
                    code::INVALID_PARAMS,
                    "params must be an object",
                    None,
                ));
            }
        };
        let stateless = match params
            .get("_meta")
            .and_then(|m| m.get(META_VERSION))
            .map(|v| v.as_str())
        {
            None => false,
            Some(Some(v)) if SUPPORTED_VERSIONS.contains(&v) => v == STATELESS_VERSION,
            Some(requested) => {
                return Outcome::Reply(error(
                    id,
                    code::UNSUPPORTED_VERSION,
                    "unsupported protocol version",
                    Some(json!({
                        "supported": SUPPORTED_VERSIONS,
                        "requested": requested,
                    })),
                ));
            }
        };
        let result = match method {
            "initialize" => Ok(self.initialize(&params)),
            "server/discover" => Ok(discover()),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": tools() })),
            "tools/call" => self.call(&params),
            other => Err((
                code::METHOD_NOT_FOUND,
                format!("method not found: {}", shorten(other, 100)),
            )),
        };
        match result {
            Ok(mut value) => {
                if stateless && let Value::Object(m) = &mut value {
                    m.insert("resultType".into(), json!("complete"));
                    let meta = m.entry("_meta").or_insert_with(|| json!({}));
                    if let Value::Object(meta) = meta {
                        meta.insert(META_SERVER_INFO.into(), server_info());
                    }
                    if method == "tools/list" {
                        m.insert("ttlMs".into(), json!(3_600_000));
                        m.insert("cacheScope".into(), json!("public"));
                    }
                }
                Outcome::Reply(json!({ "jsonrpc": "2.0", "id": id, "result": value }))
            }
            Err((c, message)) => Outcome::Reply(error(id, c, &message, None)),
        }
    }

    fn initialize(&mut self, params: &Map<String, Value>) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = match asked {
            Some(v) if HANDSHAKE_VERSIONS.contains(&v) => v,
            _ => HANDSHAKE_VERSIONS[HANDSHAKE_VERSIONS.len() - 1],
        };
        self.negotiated = Some(version.to_string());
        json!({
            "protocolVersion": version,
            "capabilities": { "tools": {} },
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        })
    }
}

fn error(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut err = json!({ "code": code, "message": message });
    if let Some(d) = data {
        err["data"] = d;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": err })
}

fn server_info() -> Value {
    json!({ "name": "cairn", "title": "cairn memory", "version": env!("CARGO_PKG_VERSION") })
}

/// `server/discover`: the identity goes in `_meta` (where the current specification and
/// the SDKs read it), and stays at the top level for clients written against drafts.
fn discover() -> Value {
    json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": { "tools": {} },
        "serverInfo": server_info(),
        "_meta": { META_SERVER_INFO: server_info() },
        "instructions": INSTRUCTIONS,
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    })
}

/// Runs the server: reads lines from `input` until it closes, writes one flushed line per
/// reply to `output`.
pub fn serve(server: &mut Server, mut input: impl BufRead, mut output: impl Write) -> Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| crate::Error::io("read", "stdin", e))?;
        if n == 0 {
            return Ok(());
        }
        if let Outcome::Reply(reply) = server.handle_line(&line) {
            let mut text = serde_json::to_string(&reply).unwrap_or_else(|e| {
                error(Value::Null, code::INTERNAL_ERROR, &e.to_string(), None).to_string()
            });
            text.push('\n');
            output
                .write_all(text.as_bytes())
                .and_then(|()| output.flush())
                .map_err(|e| crate::Error::io("write", "stdout", e))?;
        }
    }
}
