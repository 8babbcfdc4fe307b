//! The context block injected at `SessionStart`. (Rendering is built in the recall work;
//! until then the block is empty, which is a valid answer.)

use rusqlite::Connection;

use crate::error::Result;
use crate::settings::ContextSettings;

/// The block the next session of `project` is told, within the token budget.
pub fn session_start(
    _conn: &Connection,
    _project: &str,
    _settings: &ContextSettings,
    _now: i64,
) -> Result<String> {
    Ok(String::new())
}
