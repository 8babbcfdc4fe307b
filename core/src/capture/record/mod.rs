//! The plain record of one captured event, and turning it into rows. A hook event becomes
//! a record ([`prepare()`]: cleaned, pure), a record becomes rows ([`apply()`]: one writer for
//! the hook, the worker's spool ingestion, transcript imports and the quarantine's
//! replay). The record itself (`types`, the lowest file) is data only, serializable: a
//! spool file holds one.

mod apply;
mod prepare;
mod types;

pub use apply::{Applied, apply, tool_key, turn_key, turn_of};
pub use prepare::{is_excluded, is_own_tool, prepare, prepare_in};
pub use types::{Action, Record};
