//! Recall: reading memories back. From the bottom up: the query language (`query`) and
//! the SQL vocabulary every statement shares (`sql`: filters, the searchable tables,
//! candidates, the WHERE terms led by the full-text index); sentence vectors and the
//! nearest-neighbour index (`embed`); the snippets and text helpers a hit shows
//! (`snippet`); the learned model that turns what is measured of a candidate into its
//! relevance (`ranker`); relevance ranking that fuses full text and meaning (`rank`); search with
//! filters, orders and paging (`search`); the timeline around a point and records by id
//! (`timeline`); and on top the `Searcher` facade that the CLI, the MCP server and the
//! viewer hold (`searcher`), with the one builder of a search request from text fields
//! (`request`). The SessionStart context block (`context`) stands beside them. The kinds
//! of memory are `memory::kind`'s. Every call in a search goes down this list, never up.
//!
//! Reads `observations`, `session_summaries`, `user_prompts` and `sessions`; writes only
//! `embeddings` and `embedding_queue` (`embed::store`).
//!
//! Invariants: user text reaches FTS5 `MATCH` only inside quoted strings built by `query`;
//! every query is scoped to one project unless the caller widens it; filters hold exactly
//! on the full-text and the meaning side alike; only vectors of the model that embedded
//! the query are compared; the context block never exceeds its token budget. Data flows
//! up from memory to the hook's answer, the CLI and the MCP server.

pub mod ask;
pub mod context;
pub mod embed;
pub mod moment;
pub mod query;
pub mod rank;
pub mod ranker;
pub mod request;
pub mod search;
pub mod searcher;
pub mod snippet;
pub mod sql;
#[cfg(test)]
pub(crate) mod testing;
pub mod timeline;
