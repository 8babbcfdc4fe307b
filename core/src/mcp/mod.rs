//! The MCP server: recall (and `save_memory`) for a model, as JSON-RPC 2.0 on stdio.
//!
//! - `protocol` (the top): the framing, the version handshake, the method dispatch, the
//!   JSON-RPC error codes and what each [`tools::ToolError`] becomes on the wire. It owns
//!   the [`protocol::Server`], which holds the [`tools::Tools`].
//! - `tools`: the four tools and their state (database, default project, searcher, privacy
//!   filter, asking session); they return text or a typed error and know nothing of
//!   JSON-RPC. Inside: `schema` (names, bounds, JSON Schemas) at the bottom, `args` and
//!   `render` above it, the tools themselves in `tools/mod.rs`. `protocol` imports
//!   `tools`, never the reverse.
//!
//! Writes `observations` only through `memory::observations` (`save_memory`, after the
//! privacy filter); everything else reads through `recall`. The database is opened at the
//! first call of a tool that needs it: a server started, listed and stopped (as
//! `claude mcp list` does) writes nothing.
//!
//! Invariants: one reply line per request, flushed before the next is read;
//! notifications are never answered; tool failures are `isError` results, never crashes
//! or protocol errors (an unknown tool name is a protocol error, `-32602`); a tool result
//! stays within its token budget (`max_tokens`) and says what it left out.

pub mod protocol;
pub mod tools;
