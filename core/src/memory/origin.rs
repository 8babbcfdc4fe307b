//! Which device a memory came from: sync (`sync::local`, the writer of `sync_rows` and
//! `sync_devices`) lists every memory that went into or came out of a log with the device
//! whose log carried it, and the name of each other device. Search, the context, MCP and
//! the viewer mark a memory from another machine with that name. Reads only.

use rusqlite::{Connection, OptionalExtension};

use crate::error::Result;
use crate::memory::kind::Kind;

/// True when some other device's log was read here: only then can a memory be marked
/// with another device (a store in no space skips [`device_of`] for one query).
pub fn any_devices(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM sync_devices)")?
        .query_row([], |r| r.get(0))?)
}

/// The name of the other device whose log brought this memory here (its id's first eight
/// digits when it has no name); `None` for a memory of this device's own. What search,
/// the context, MCP and the viewer mark a memory from another machine with.
pub fn device_of(conn: &Connection, kind: Kind, id: i64) -> Result<Option<String>> {
    let origin = match kind {
        Kind::Observation => {
            "SELECT 'observation' AS kind, coalesce(session_id, '') || ':' || content_hash AS origin
             FROM observations WHERE id = ?1"
        }
        Kind::Summary => {
            "SELECT 'summary' AS kind, session_id || ':' || prompt_number AS origin
             FROM session_summaries WHERE id = ?1"
        }
        Kind::Prompt => {
            "SELECT 'prompt' AS kind,
                    session_id || ':' || coalesce(prompt_id, '#' || prompt_number) AS origin
             FROM user_prompts WHERE id = ?1"
        }
    };
    Ok(conn
        .prepare_cached(&format!(
            "SELECT CASE WHEN d.name = '' THEN substr(d.device, 1, 8) ELSE d.name END
             FROM ({origin}) m
             JOIN sync_rows s ON s.kind = m.kind AND s.origin = m.origin
             JOIN sync_devices d ON d.device = s.device"
        ))?
        .query_row([id], |r| r.get(0))
        .optional()?)
}
