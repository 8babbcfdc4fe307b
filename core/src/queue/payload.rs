//! What a queued job carries: the JSON in `pending_messages.payload`. Written by the hook
//! (through `capture`), read by the worker. These types cross a process boundary, so they
//! are serializable and tolerant: unknown fields are ignored, missing ones default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An `observation` job: one tool call, already stripped of private spans, redacted and
/// capped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolEvent {
    pub tool_name: String,
    pub tool_use_id: String,
    /// The tool's input object.
    pub tool_input: Value,
    /// The tool's response (`PostToolUse`), `null` for a failure.
    pub tool_response: Value,
    /// The error text (`PostToolUseFailure`).
    pub error: Option<String>,
    /// True for `PostToolUseFailure`.
    pub failed: bool,
    pub is_interrupt: bool,
    pub cwd: String,
    pub prompt_id: Option<String>,
    /// Set when a subagent ran the tool.
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    pub duration_ms: Option<u64>,
    /// When the hook received the event (ms).
    pub occurred_at: i64,
}

/// A `summarize` job: the end of a turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnEnd {
    /// The assistant's final message of the turn (privacy-stripped, redacted, capped).
    pub last_assistant_message: String,
    pub cwd: String,
    pub prompt_id: Option<String>,
    /// Set for a `SubagentStop`: the subagent's own work.
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    pub occurred_at: i64,
}
