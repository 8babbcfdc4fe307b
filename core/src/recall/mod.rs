//! Recall: reading memories back. The query language (`query`), search with filters and
//! orders (`search`), relevance ranking that fuses full text and meaning (`rank`), sentence
//! vectors and the nearest-neighbour index (`embed`), the snippets and text helpers a hit
//! shows (`snippet`), the timeline around a point and records by id (`timeline`), and the
//! SessionStart context block (`context`).
//!
//! Reads `observations`, `session_summaries`, `user_prompts` and `sessions`; writes only
//! `embeddings` and `embedding_queue` (`embed::store`).
//!
//! Invariants: user text reaches FTS5 `MATCH` only inside quoted strings built by `query`;
//! every query is scoped to one project unless the caller widens it; filters hold exactly
//! on the full-text and the meaning side alike; only vectors of the model that embedded
//! the query are compared; the context block never exceeds its token budget. Data flows
//! up from memory to the hook's answer, the CLI and the MCP server.

pub mod context;
pub mod embed;
pub mod query;
pub mod rank;
pub mod request;
pub mod search;
pub mod searcher;
pub mod snippet;
pub mod sql;
#[cfg(test)]
pub(crate) mod testing;
pub mod timeline;
