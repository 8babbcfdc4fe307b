//! cairn's library. Every decision lives here; the binaries parse arguments, load settings,
//! call into this crate and map errors to exit codes. See ARCHITECTURE.md for the map.

pub mod clock;
pub mod context;
pub mod db;
pub mod error;
pub mod lock;
pub mod memory;
pub mod paths;
pub mod payload;
pub mod project;
pub mod queue;
pub mod rand;
pub mod sessions;
pub mod settings;

pub use error::{Error, Result};

/// Set in the environment of processes cairn starts (the `claude` CLI provider), so that
/// cairn's own hooks inside them do nothing and memory never observes itself.
pub const SUPPRESS_HOOKS_ENV: &str = "CAIRN_SUPPRESS_HOOKS";
pub mod mcp;
pub mod query;
pub mod search;
