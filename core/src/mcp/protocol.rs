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
//! - A tool call's [`ToolError`] becomes: an unknown tool, `-32602` (as a missing
//!   `params.name` does); a bad argument (or an id naming nothing), a result with
//!   `isError: true` whose message says how to fix the call; cairn failing, an `isError`
//!   result saying so (and an error in the log). Never a crash.
//! - Every reply is one line, written and flushed before the next message is read; the
//!   server returns when stdin closes.
use std::io::{BufRead, Write};

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::mcp::tools::{self, ToolError, Tools};
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

/// The server's state: the tools it offers and the version `initialize` agreed on.
#[derive(Debug)]
pub struct Server {
    tools: Tools,
    /// The version agreed by `initialize`, if it happened.
    negotiated: Option<String>,
}

/// A request that failed as a request (not as a tool call): its JSON-RPC error.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
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
    /// A server offering these tools.
    pub fn new(tools: Tools) -> Self {
        Self {
            tools,
            negotiated: None,
        }
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
            "tools/list" => Ok(json!({ "tools": tools::definitions() })),
            "tools/call" => self.call_tool(&params),
            other => Err(RpcError::new(
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
            Err(e) => Outcome::Reply(error(id, e.code, &e.message, None)),
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

    /// `tools/call`: a protocol error (`-32602`) when `params` names no tool or a tool this
    /// server does not have; everything else is a tool result, `isError` when the call
    /// failed (its message says how to fix it, or that cairn failed).
    fn call_tool(&mut self, params: &Map<String, Value>) -> std::result::Result<Value, RpcError> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "tools/call needs params.name (a tool name) and params.arguments (an object)",
            ));
        };
        match self.tools.call(name, params.get("arguments")) {
            Ok(text) => Ok(tool_result(&text, false)),
            Err(e @ ToolError::UnknownTool(_)) => {
                Err(RpcError::new(code::INVALID_PARAMS, e.to_string()))
            }
            Err(e) => {
                if let ToolError::Internal(cause) = &e {
                    log::error!("tool {name} failed: {cause}");
                }
                Ok(tool_result(&e.to_string(), true))
            }
        }
    }
}

/// A tool's result: its text, and whether the call failed.
fn tool_result(text: &str, is_error: bool) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": is_error })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::tools::Database;

    fn server() -> (tempfile::TempDir, Server) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let conn = crate::store::db::open_data_dir(&dd, crate::store::db::OpenOptions::default())
            .expect("open");
        let tools = Tools::new(Database::Open(conn), "acme", || 1_790_000_000_000);
        (tmp, Server::new(tools))
    }

    fn reply(s: &mut Server, line: &str) -> Value {
        match s.handle_line(line.as_bytes()) {
            Outcome::Reply(v) => v,
            Outcome::Silent => panic!("no reply to {line}"),
        }
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
}
