//! The plain record of one captured event: what `apply` writes and what a spool file
//! holds. Data only (no I/O): the lowest file of `record`, which `prepare` and `apply` use
//! and which uses neither.

use serde::{Deserialize, Serialize};

use crate::queue::payload::{ToolEvent, TurnEnd};

/// One event, cleaned and ready to write. Serializable: a spool file holds one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub session_id: String,
    pub project: String,
    pub cwd: String,
    /// When the hook received the event (ms); every row written for it carries this time.
    pub at: i64,
    /// The prompt number the event belongs to as the hook saw it (the session's prompt
    /// counter at hook time), when the hook could read it. A tool event or a turn end
    /// applied later (from the spool) is numbered by its `prompt_id` first (the turn is
    /// keyed by Claude Code's id, resolved through `user_prompts`), then by this, and only
    /// when both are missing by the counter at the time it is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_number: Option<i64>,
    /// The settings could not be read when the event arrived: it was cleaned with the
    /// default privacy rules and waits in the spool until they can be read, then they are
    /// applied (an excluded project's event, a skipped tool's, is dropped then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settings_unread: bool,
    pub action: Action,
}

impl Record {
    /// Claude Code's id of the prompt (turn) this event belongs to, when it sent one.
    pub fn prompt_id(&self) -> Option<&str> {
        match &self.action {
            Action::Prompt { prompt_id, .. } => prompt_id.as_deref(),
            Action::Tool(ev) => ev.prompt_id.as_deref(),
            Action::TurnEnd(turn) => turn.prompt_id.as_deref(),
            _ => None,
        }
    }

    /// True for the events numbered by the turn they belong to (tool events, turn ends).
    pub fn belongs_to_a_turn(&self) -> bool {
        matches!(self.action, Action::Tool(_) | Action::TurnEnd(_))
    }
}

/// What a record writes.
// One record per hook process (or per spooled file): the size of the largest variant
// costs nothing, and boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// `SessionStart`: the session is (again) active.
    Start,
    /// A user prompt, cleaned.
    Prompt {
        prompt_id: Option<String>,
        text: String,
    },
    /// An event that only keeps the session row fresh (a synthetic prompt).
    Touch,
    /// An `observation` job.
    Tool(ToolEvent),
    /// A `summarize` job.
    TurnEnd(TurnEnd),
    /// `SessionEnd`. With `if_known`, it only ends a session cairn has a row of: an end
    /// with no transcript behind it (what `claude mcp list` sends for a session that never
    /// ran) creates nothing.
    End {
        reason: String,
        #[serde(default)]
        if_known: bool,
    },
}
