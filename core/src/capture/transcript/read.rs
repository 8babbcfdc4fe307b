//! Reading one Claude Code transcript (`<session id>.jsonl`) back into the hook events it
//! stands for: prompts (`UserPromptSubmit`), finished and failed tool calls
//! (`PostToolUse`, `PostToolUseFailure`), turn ends (`Stop`) and the session's end.
//!
//! Streams: one line at a time from a `BufRead`, never the whole file. What it keeps
//! between lines is the current turn (its prompt id and latest assistant text) and the
//! tool calls waiting for their result (at most [`MAX_PENDING_TOOLS`]); a line longer
//! than [`MAX_LINE_BYTES`] is skipped without being held. So memory is bounded by those
//! two limits, whatever the file's size.
//!
//! Tolerant: a line that is not JSON, a record type it does not know and a content block
//! it does not know are skipped and counted in [`Stats`], never fatal; a last line
//! without its newline that does not parse (a session still being written) is left for
//! a later read ([`Stats::truncated_tail`]).
//!
//! Handled as the live hooks handle them: the `<task-notification>` prompts Claude Code
//! sends itself are synthetic (they touch the session and continue the turn before
//! them); compaction records (the boundary, the summary, `/compact`'s own lines) and
//! Claude Code's meta and local-command lines are not prompts; sidechain lines (a
//! subagent's, inline in older transcripts or in `subagents/agent-<id>.jsonl`) give
//! tool events carrying the agent's id and type under the turn that ran the agent, never
//! a prompt or a turn's final message; a turn an API error ended (Claude Code's
//! `isApiErrorMessage` line: not logged in, a rate limit) has no turn end, as its hooks
//! got `StopFailure` instead of `Stop`, and the error is never its final message. Pure
//! apart from reading its source.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::BufRead;

use serde::Deserialize;
use serde_json::Value;

use crate::capture::hook::{Common, Event, ToolCall};

/// Lines longer than this are skipped (and counted), never held in memory.
pub const MAX_LINE_BYTES: usize = 32 << 20;
/// Tool calls waiting for their result that are remembered; beyond it the oldest is
/// dropped (a call whose result never came, such as one cut by an interrupted session).
pub const MAX_PENDING_TOOLS: usize = 4096;
/// Distinct unknown record types remembered by name (the rest are only counted).
const MAX_UNKNOWN_NAMES: usize = 32;

/// The record types this reader knows (read or deliberately skipped).
pub const KNOWN_TYPES: &[&str] = &[
    "user",
    "assistant",
    "system",
    "attachment",
    "summary",
    "queue-operation",
    "last-prompt",
    "file-history-snapshot",
    "custom-title",
    "ai-title",
    "agent-name",
    "tag",
    "progress",
    "pr-link",
    "mode",
    "worktree-state",
];

/// One event read back, with the time Claude Code wrote it (ms since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub at: i64,
    pub event: Event,
}

/// What a read met besides events.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub lines: u64,
    pub bytes: u64,
    /// Lines that were not a JSON object (not counting a truncated last line).
    pub bad_lines: u64,
    /// Lines longer than [`MAX_LINE_BYTES`], skipped.
    pub oversized_lines: u64,
    /// Records of a type this reader does not know, by type (at most 32 names).
    pub unknown_types: BTreeMap<String, u64>,
    /// Records of unknown types beyond the named ones.
    pub unknown_other: u64,
    /// Content blocks of a kind this reader does not know.
    pub unknown_blocks: u64,
    /// The last line had no newline and did not parse: left for a later read.
    pub truncated_tail: bool,
    /// Tool results whose call was never seen (or was dropped from the pending set).
    pub orphan_results: u64,
}

impl Stats {
    pub fn unknown_records(&self) -> u64 {
        self.unknown_types.values().sum::<u64>() + self.unknown_other
    }
}

/// Whose lines a reader is reading.
#[derive(Debug, Clone, Default)]
pub struct Agent {
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    /// The prompt id of the turn that ran the agent.
    pub prompt_id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    subtype: Option<String>,
    session_id: Option<String>,
    cwd: Option<String>,
    timestamp: Option<String>,
    prompt_id: Option<String>,
    is_sidechain: bool,
    is_meta: bool,
    is_compact_summary: bool,
    is_visible_in_transcript_only: bool,
    /// An assistant line Claude Code wrote for an API error (`Not logged in`, a rate
    /// limit), not the model's.
    is_api_error_message: bool,
    agent_id: Option<String>,
    message: Option<Message>,
    tool_use_result: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Message {
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    tool_use_id: Option<String>,
    content: Option<Value>,
    is_error: bool,
}

struct PendingTool {
    name: String,
    input: Value,
    at: i64,
    seq: u64,
}

struct Turn {
    session_id: String,
    cwd: String,
    prompt_id: String,
    last_text: String,
    last_at: i64,
    /// The turn's latest assistant line is an API error: the turn ended by it.
    ended_by_error: bool,
}

/// Reads a transcript's events one at a time (an `Iterator`).
pub struct Reader<R> {
    src: R,
    /// The file's session id, used when a line names none.
    default_session: String,
    agent: Option<Agent>,
    finished: bool,
    stats: Stats,
    out: VecDeque<Timed>,
    pending: HashMap<String, PendingTool>,
    seq: u64,
    turn: Option<Turn>,
    last_session: Option<(String, String, i64)>,
    seen_prompt_ids: VecDeque<String>,
    done: bool,
    buf: Vec<u8>,
    /// Agent tool results seen, for the caller to read their subagent files.
    agents: Vec<Agent>,
}

impl<R> std::fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("session", &self.default_session)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: BufRead> Reader<R> {
    /// A reader of a session's main transcript. `finished`: the session is over (ended, or
    /// quiet long enough), so its last turn's end and the session's end are emitted at the
    /// end of the file; otherwise the last turn is left open for a later read.
    pub fn new(src: R, default_session: &str, finished: bool) -> Self {
        Self {
            src,
            default_session: default_session.to_string(),
            agent: None,
            finished,
            stats: Stats::default(),
            out: VecDeque::new(),
            pending: HashMap::new(),
            seq: 0,
            turn: None,
            last_session: None,
            seen_prompt_ids: VecDeque::new(),
            done: false,
            buf: Vec::new(),
            agents: Vec::new(),
        }
    }

    /// A reader of a subagent's transcript: every line is the agent's.
    pub fn for_agent(src: R, default_session: &str, agent: Agent) -> Self {
        let mut r = Self::new(src, default_session, false);
        r.agent = Some(agent);
        r
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The subagents whose results were read since the last call (their own transcripts
    /// hold their tool calls).
    pub fn take_agents(&mut self) -> Vec<Agent> {
        std::mem::take(&mut self.agents)
    }

    /// Reads the next line into `buf`; `None` at the end. Over-long lines are consumed
    /// without being kept.
    fn next_line(&mut self) -> Option<(bool, bool)> {
        self.buf.clear();
        let mut oversized = false;
        loop {
            let chunk = match self.src.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("transcript read stopped: {e}");
                    &[]
                }
            };
            if chunk.is_empty() {
                if self.buf.is_empty() && !oversized {
                    return None;
                }
                return Some((false, oversized));
            }
            let (take, newline) = match memchr(chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            self.stats.bytes += take as u64;
            if !oversized {
                if self.buf.len() + take > MAX_LINE_BYTES {
                    oversized = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.src.consume(take);
            if newline {
                return Some((true, oversized));
            }
        }
    }

    fn read_more(&mut self) -> bool {
        let Some((complete, oversized)) = self.next_line() else {
            return false;
        };
        self.stats.lines += 1;
        if oversized {
            self.stats.oversized_lines += 1;
            return true;
        }
        let text = trim_ascii(&self.buf);
        if text.is_empty() {
            return true;
        }
        match serde_json::from_slice::<Line>(text) {
            Ok(line) => self.line(line),
            Err(_) if !complete => {
                self.stats.truncated_tail = true;
                self.stats.lines -= 1;
            }
            Err(_) => self.stats.bad_lines += 1,
        }
        true
    }

    fn line(&mut self, line: Line) {
        let kind = line.kind.as_deref().unwrap_or("");
        if !KNOWN_TYPES.contains(&kind) {
            if self.stats.unknown_types.contains_key(kind)
                || self.stats.unknown_types.len() < MAX_UNKNOWN_NAMES
            {
                *self
                    .stats
                    .unknown_types
                    .entry(kind.to_string())
                    .or_default() += 1;
            } else {
                self.stats.unknown_other += 1;
            }
            return;
        }
        let at = line
            .timestamp
            .as_deref()
            .and_then(parse_time)
            .or(self.last_session.as_ref().map(|s| s.2))
            .unwrap_or(0);
        let session_id = line
            .session_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.default_session.clone());
        let cwd = line.cwd.clone().filter(|c| !c.is_empty()).or_else(|| {
            self.last_session
                .as_ref()
                .filter(|s| s.0 == session_id)
                .map(|s| s.1.clone())
        });
        let Some(cwd) = cwd else {
            // Records before any cwd (queue operations, titles) carry nothing to capture.
            return;
        };
        self.last_session = Some((session_id.clone(), cwd.clone(), at));
        let sidechain = line.is_sidechain || self.agent.is_some();
        match kind {
            "assistant" => self.assistant(line, &session_id, &cwd, at, sidechain),
            "user" => self.user(line, &session_id, &cwd, at, sidechain),
            "system" => {
                // The Stop hook ran: the turn's end is known to be at least this late.
                if !sidechain
                    && line.subtype.as_deref() == Some("stop_hook_summary")
                    && let Some(t) = self.turn.as_mut()
                {
                    t.last_at = t.last_at.max(at);
                }
            }
            _ => {}
        }
    }

    fn assistant(&mut self, line: Line, sid: &str, cwd: &str, at: i64, sidechain: bool) {
        if let Some(t) = self.turn.as_mut()
            && !sidechain
            && t.session_id == sid
        {
            t.ended_by_error = line.is_api_error_message;
        }
        if line.is_api_error_message {
            // Not the model's words: never a turn's final message.
            return;
        }
        let Some(Content::Blocks(blocks)) = line.message.and_then(|m| m.content) else {
            return;
        };
        for b in blocks {
            match b.kind.as_str() {
                "text" if !sidechain => {
                    if let (Some(t), Some(text)) = (self.turn.as_mut(), b.text)
                        && t.session_id == sid
                        && !text.trim().is_empty()
                    {
                        t.last_text = text;
                        t.last_at = t.last_at.max(at);
                    }
                }
                "tool_use" => {
                    let (Some(id), Some(name)) = (b.id, b.name) else {
                        continue;
                    };
                    if self.pending.len() >= MAX_PENDING_TOOLS
                        && let Some(oldest) = self
                            .pending
                            .iter()
                            .min_by_key(|(_, p)| p.seq)
                            .map(|(k, _)| k.clone())
                    {
                        self.pending.remove(&oldest);
                    }
                    self.seq += 1;
                    self.pending.insert(
                        id,
                        PendingTool {
                            name,
                            input: b.input.unwrap_or(Value::Null),
                            at,
                            seq: self.seq,
                        },
                    );
                }
                "text"
                | "thinking"
                | "redacted_thinking"
                | "server_tool_use"
                | "web_search_tool_result"
                | "image" => {}
                _ => self.stats.unknown_blocks += 1,
            }
        }
        if let Some(t) = self.turn.as_mut()
            && !sidechain
            && t.session_id == sid
        {
            t.last_at = t.last_at.max(at);
            t.cwd = cwd.to_string();
        }
    }

    fn user(&mut self, line: Line, sid: &str, cwd: &str, at: i64, sidechain: bool) {
        let content = line.message.and_then(|m| m.content);
        let blocks = match content {
            Some(Content::Text(text)) => {
                if !sidechain && !line.is_meta && !line.is_compact_summary {
                    self.prompt(
                        sid,
                        cwd,
                        line.prompt_id,
                        text,
                        at,
                        line.is_visible_in_transcript_only,
                    );
                }
                return;
            }
            Some(Content::Blocks(b)) => b,
            _ => return,
        };
        let mut prompt_text = String::new();
        let mut has_result = false;
        let tool_use_result = line.tool_use_result;
        for b in blocks {
            match b.kind.as_str() {
                "tool_result" => {
                    has_result = true;
                    let Some(id) = b.tool_use_id else { continue };
                    let Some(call) = self.pending.remove(&id) else {
                        self.stats.orphan_results += 1;
                        continue;
                    };
                    let event = self.tool_event(
                        sid,
                        cwd,
                        line.prompt_id.as_deref(),
                        line.agent_id.as_deref(),
                        id,
                        call,
                        b.content,
                        b.is_error,
                        tool_use_result.clone(),
                        at,
                    );
                    self.out.push_back(Timed { at, event });
                }
                "text" => {
                    if let Some(t) = b.text {
                        if !prompt_text.is_empty() {
                            prompt_text.push('\n');
                        }
                        prompt_text.push_str(&t);
                    }
                }
                "image" | "document" => {}
                _ => self.stats.unknown_blocks += 1,
            }
        }
        if !has_result
            && !sidechain
            && !line.is_meta
            && !line.is_compact_summary
            && !prompt_text.is_empty()
        {
            self.prompt(
                sid,
                cwd,
                line.prompt_id,
                prompt_text,
                at,
                line.is_visible_in_transcript_only,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn tool_event(
        &mut self,
        sid: &str,
        cwd: &str,
        line_prompt: Option<&str>,
        line_agent: Option<&str>,
        id: String,
        call: PendingTool,
        content: Option<Value>,
        is_error: bool,
        tool_use_result: Option<Value>,
        at: i64,
    ) -> Event {
        let (agent_id, agent_type, prompt_id) = match &self.agent {
            Some(a) => (
                a.agent_id.clone(),
                a.agent_type.clone(),
                a.prompt_id.clone().or(line_prompt.map(str::to_string)),
            ),
            None => {
                // The turn that is open (a synthetic prompt's lines continue it), else the
                // line's own.
                let turn = self
                    .turn
                    .as_ref()
                    .filter(|t| t.session_id == sid)
                    .map(|t| t.prompt_id.clone());
                (
                    line_agent.map(str::to_string),
                    None,
                    turn.or(line_prompt.map(str::to_string)),
                )
            }
        };
        if self.agent.is_none()
            && call.name == "Agent"
            && let Some(r) = tool_use_result.as_ref()
            && let Some(aid) = r.get("agentId").and_then(Value::as_str)
        {
            self.agents.push(Agent {
                agent_id: Some(aid.to_string()),
                agent_type: r.get("agentType").and_then(Value::as_str).map(String::from),
                prompt_id: prompt_id.clone(),
            });
        }
        let error_text = || match &content {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        let (tool_response, error, is_interrupt) = if is_error {
            let e = error_text();
            let interrupted = e.contains("interrupted by user");
            (Value::Null, Some(e), interrupted)
        } else {
            let resp = match tool_use_result {
                Some(v) => v,
                None => content.unwrap_or(Value::Null),
            };
            (resp, None, false)
        };
        Event::Tool {
            common: Common {
                session_id: sid.to_string(),
                cwd: cwd.to_string(),
                prompt_id,
                ignored: Vec::new(),
            },
            call: ToolCall {
                tool_name: call.name,
                tool_use_id: id,
                tool_input: call.input,
                tool_response,
                error,
                failed: is_error,
                is_interrupt,
                duration_ms: u64::try_from(at - call.at).ok(),
                agent_id,
                agent_type,
            },
        }
    }

    fn prompt(
        &mut self,
        sid: &str,
        cwd: &str,
        prompt_id: Option<String>,
        text: String,
        at: i64,
        transcript_only: bool,
    ) {
        let trimmed = text.trim_start();
        // Claude Code's own lines under a user role: slash-command echoes, their output,
        // caveats; never sent to the UserPromptSubmit hook.
        if transcript_only
            || trimmed.is_empty()
            || [
                "<command-name>",
                "<command-message>",
                "<local-command-",
                "<bash-input>",
                "<bash-stdout>",
                "<bash-stderr>",
            ]
            .iter()
            .any(|p| trimmed.starts_with(p))
        {
            return;
        }
        let synthetic = trimmed.starts_with("<task-notification>");
        // A prompt id the hook saw once is one UserPromptSubmit, however many lines carry it.
        if let Some(id) = &prompt_id {
            if self.seen_prompt_ids.iter().any(|p| p == id) {
                return;
            }
            if self.seen_prompt_ids.len() >= 64 {
                self.seen_prompt_ids.pop_front();
            }
            self.seen_prompt_ids.push_back(id.clone());
        }
        if !synthetic {
            self.end_turn();
            if let Some(id) = &prompt_id {
                self.turn = Some(Turn {
                    session_id: sid.to_string(),
                    cwd: cwd.to_string(),
                    prompt_id: id.clone(),
                    last_text: String::new(),
                    last_at: at,
                    ended_by_error: false,
                });
            }
        }
        self.out.push_back(Timed {
            at,
            event: Event::UserPrompt {
                common: Common {
                    session_id: sid.to_string(),
                    cwd: cwd.to_string(),
                    prompt_id,
                    ignored: Vec::new(),
                },
                prompt: text,
                synthetic,
            },
        });
    }

    /// True when the whole source was read without finishing it, and its last turn is
    /// left open (no turn end emitted: a later read of the finished session emits it).
    pub fn left_open(&self) -> bool {
        self.done && !self.finished && self.agent.is_none() && self.turn.is_some()
    }

    /// The turn's end, as the Stop hook would have told it. A turn an API error ended has
    /// none: Claude Code sends `StopFailure` instead of `Stop` then, which cairn does not
    /// register, so its tool calls are kept and observed but it is not summarised (most
    /// often there is nothing to summarise: `Not logged in`, a spent quota).
    fn end_turn(&mut self) {
        if let Some(t) = self.turn.take().filter(|t| !t.ended_by_error) {
            self.out.push_back(Timed {
                at: t.last_at,
                event: Event::Stop {
                    common: Common {
                        session_id: t.session_id,
                        cwd: t.cwd,
                        prompt_id: Some(t.prompt_id),
                        ignored: Vec::new(),
                    },
                    last_assistant_message: t.last_text,
                },
            });
        }
    }

    fn finish(&mut self) {
        if !self.finished || self.agent.is_some() {
            return;
        }
        self.end_turn();
        if let Some((sid, cwd, at)) = self.last_session.take() {
            self.out.push_back(Timed {
                at,
                event: Event::SessionEnd {
                    common: Common {
                        session_id: sid,
                        cwd,
                        prompt_id: None,
                        ignored: Vec::new(),
                    },
                    reason: "transcript".to_string(),
                    transcript_path: None,
                },
            });
        }
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Timed;

    fn next(&mut self) -> Option<Timed> {
        loop {
            if let Some(t) = self.out.pop_front() {
                return Some(t);
            }
            if self.done {
                return None;
            }
            if !self.read_more() {
                self.done = true;
                self.finish();
            }
        }
    }
}

fn memchr(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// `2026-11-22T02:01:14.600Z` → milliseconds (the fraction kept to the millisecond).
pub fn parse_time(s: &str) -> Option<i64> {
    let base = crate::clock::parse_iso_utc(s)?;
    let frac = s
        .split_once('.')
        .map(|(_, f)| f.trim_end_matches('Z'))
        .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        .map(|f| {
            let mut ms = 0i64;
            for (i, b) in f.bytes().take(3).enumerate() {
                ms += i64::from(b - b'0') * [100, 10, 1][i];
            }
            ms
        })
        .unwrap_or(0);
    Some(base + frac)
}
