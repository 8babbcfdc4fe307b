//! Sync: this device's space as the worker (or `cairn sync`) last recorded it. Reads the
//! local store only; the server is asked by `cairn sync status`.

use rusqlite::Connection;

use super::{Finding, Level, finding, ok};
use crate::settings::Settings;
use crate::store::paths::DataDir;

pub(super) fn check_sync(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    out: &mut Vec<Finding>,
) {
    let Some(conn) = conn else { return };
    let s = match crate::sync::status(dir, conn) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            out.push(finding(
                "sync",
                Level::Fail,
                format!("this device's sync setup cannot be read: {e}"),
                e.fix().map(str::to_string),
            ));
            return;
        }
    };
    let place = format!("space {} on {}", s.space, s.server);
    if let Some(e) = &s.last_error {
        let since = s.last_error_at.map_or(String::new(), |t| {
            format!(" since {}", crate::clock::minute_utc(t))
        });
        out.push(finding(
            "sync",
            Level::Fail,
            format!("{place}: {e}{since}; {} records wait to be sent", s.unsent),
            s.fix.clone(),
        ));
        return;
    }
    if settings.sync.projects.is_empty() {
        out.push(finding(
            "sync",
            Level::Warn,
            format!("{place}: no project syncs (sync.projects is empty)"),
            Some("name the projects to sync in sync.projects (\"*\" for all)".into()),
        ));
        return;
    }
    let when = |t: Option<i64>| t.map_or("never".into(), crate::clock::minute_utc);
    out.push(ok(
        "sync",
        format!(
            "{place}: {} other devices seen, last push {}, last pull {}, {} records behind, {} unsent{}",
            s.devices.len(),
            when(s.last_push_at),
            when(s.last_pull_at),
            s.behind,
            s.unsent,
            match s.listening {
                Some(true) => ", listening",
                Some(false) => ", polling",
                None => "",
            }
        ),
    ));
}
