//! Why a tool call failed. The protocol decides what each cause becomes on the wire (see
//! `mcp::protocol`): an unknown tool is a protocol error, the others are `isError` results.

use crate::recall::snippet::shorten;

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No tool has this name.
    #[error(
        "unknown tool '{}'; the tools are search, timeline, get_observations and save_memory",
        shorten(.0, 100)
    )]
    UnknownTool(String),
    /// The call can be fixed; the message says how (a bad or missing argument, an id that
    /// names nothing).
    #[error("{0}")]
    BadArgument(String),
    /// cairn failed.
    #[error("cairn failed: {0}")]
    Internal(#[source] crate::Error),
}
