//! cairn's library. Every decision lives here; the binaries parse arguments, load settings,
//! call into this crate and map errors to exit codes. See ARCHITECTURE.md for the map.

pub mod backup;
pub mod capture;
pub mod claude_mem;
pub mod clock;
pub mod context;
pub mod db;
pub mod doctor;
pub mod error;
pub mod exchange;
pub mod hook;
pub mod install;
pub mod lock;
pub mod mcp;
pub mod memory;
pub mod model;
pub mod offline;
pub mod parse;
pub mod paths;
pub mod payload;
pub mod privacy;
pub mod project;
pub mod prompt;
pub mod quarantine;
pub mod query;
pub mod queue;
pub mod rand;
pub mod search;
pub mod sessions;
pub mod settings;
pub mod spool;
pub mod status;
pub mod usage;
pub mod worker;
pub mod workers;

pub use error::{Error, Result};

/// Set in the environment of processes cairn starts (the `claude` CLI provider), so that
/// cairn's own hooks inside them do nothing and memory never observes itself.
pub const SUPPRESS_HOOKS_ENV: &str = "CAIRN_SUPPRESS_HOOKS";
