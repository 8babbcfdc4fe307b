//! cairn's library. Every decision lives here; the binaries parse arguments, load settings,
//! call into this crate and map errors to exit codes. See ARCHITECTURE.md for the map.
//!
//! The folders are the pipeline's stages, and dependencies point down (each line may use
//! every line below it, never one above):
//!
//! ```text
//! the binaries
//!   → mcp, ops, viewer        (the viewer uses ops for status)
//!   → worker                  (ingests the hooks' spool through capture's records)
//!   → sync                    (this device's memory to and from a PostgreSQL space)
//!   → capture                 (renders the SessionStart context through recall)
//!   → recall                  (reads memory; cleans what it shows through privacy)
//!   → queue                   (job payloads; sessions are memory's)
//!   → privacy                 (cleans memory's new observations by the capture settings)
//!   → memory
//!   → settings                (finds settings.json through store::paths)
//!   → store (paths, db, bm25, lock, backup)
//!   → leaves (clock, error, hex, rand, text)
//! ```
//!
//! Data flows capture → queue → worker → memory → recall. No two folders import each
//! other.

pub mod clock;
pub mod error;
pub mod hex;
pub mod privacy;
pub mod rand;
pub mod settings;
pub mod text;

pub mod store;

pub mod memory;
pub mod queue;

pub mod capture;
pub mod recall;
pub mod worker;

pub mod sync;

pub mod mcp;
pub mod ops;
pub mod viewer;

pub use error::{Error, Result};

/// Set in the environment of processes cairn starts (the `claude` CLI provider), so that
/// cairn's own hooks inside them do nothing and memory never observes itself.
pub const SUPPRESS_HOOKS_ENV: &str = "CAIRN_SUPPRESS_HOOKS";
