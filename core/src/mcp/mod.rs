//! The MCP server: recall (and `save_memory`) for a model, as JSON-RPC 2.0 on stdio.
//! `protocol` is the framing, the version handshake and the method dispatch; `tools` the
//! four tools, their schemas and how their results are rendered.
//!
//! Writes `observations` only through `memory::observations` (`save_memory`, after the
//! privacy filter); everything else reads through `recall`.
//!
//! Invariants: one reply line per request, flushed before the next is read;
//! notifications are never answered; tool failures are `isError` results, never crashes
//! or protocol errors (an unknown tool name is a protocol error, `-32602`); a tool result
//! stays within its token budget (`max_tokens`) and says what it left out.

pub mod protocol;
pub mod tools;
