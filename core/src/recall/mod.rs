//! Recall: reading memories back. The query language (`query`), full-text search with
//! filters, the rank window and BM25 ranking (`search`), the snippets and text helpers a
//! hit shows (`snippet`), the timeline around a point and records by id (`timeline`), and
//! the SessionStart context block (`context`). Room for an `embed` subfolder later.
//!
//! Writes nothing: every module here only reads `observations`, `session_summaries`,
//! `user_prompts` and `sessions`.
//!
//! Invariants: user text reaches FTS5 `MATCH` only inside quoted strings built by `query`;
//! every query is scoped to one project unless the caller widens it; cost is bounded by a
//! window of the newest matches, not by the number of matches; the context block never
//! exceeds its token budget. Data flows up from memory to the hook's answer, the CLI and
//! the MCP server.

pub mod context;
pub mod embed;
pub mod query;
pub mod rank;
pub mod search;
pub mod snippet;
pub mod timeline;
