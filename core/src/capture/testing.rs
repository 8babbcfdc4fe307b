//! Helpers for the tests of capture and of the worker's ingestion, which drives it.

use rusqlite::Connection;

use super::handle::{HookInput, Outcome, handle};
use crate::settings::Settings;
use crate::store::paths::DataDir;

/// Default settings.
pub fn settings() -> Settings {
    Settings::default()
}

/// A data dir in a fresh temporary directory (kept while the first value lives).
pub fn env() -> (tempfile::TempDir, DataDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dd = DataDir::new(tmp.path().join("data"));
    (tmp, dd)
}

/// What the hook does with `json` read whole from stdin at `now`.
pub fn run(dd: &DataDir, s: &Settings, json: &str, now: i64) -> Outcome {
    handle(
        dd,
        s,
        &HookInput {
            bytes: json.as_bytes(),
            total_len: json.len() as u64,
            incomplete: None,
            explicit_event: None,
            project_dir: None,
            settings_error: None,
        },
        now,
    )
}

/// The single integer `sql` selects.
pub fn q(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}
