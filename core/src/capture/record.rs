//! The plain record of one captured event: what `handle::apply` writes and what a spool
//! file holds. Data only (no I/O), so the spool can store it without depending on the
//! code that writes it.

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
    pub action: Action,
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
    /// `SessionEnd`.
    End { reason: String },
}
