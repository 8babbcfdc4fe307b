//! The spool: events a hook could not write to the database (it stayed locked past
//! `capture.lock_wait_ms`, or could not be opened), one JSON file each under
//! `<data dir>/spool/`, written already cleaned. The worker feeds them back through
//! [`ingest`].
//!
//! Invariants: a spool file appears whole or not at all (written to a dot-file, then
//! renamed); names sort in arrival order; a file is removed only after its event is
//! committed, and writing an event twice is harmless (dedupe keys, prompt ids), so a crash
//! between commit and removal loses and duplicates nothing.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::capture;
use crate::capture::handle::Record;
use crate::capture::quarantine;
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::store::db;
use crate::store::paths::DataDir;

/// What a spool file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "spooled", rename_all = "snake_case")]
pub enum Item {
    /// A captured event.
    Capture(Box<Record>),
    /// A bad input on its way to the quarantine.
    Quarantine(quarantine::Entry),
}

/// Writes one item to a new spool file; returns its path.
pub fn write(dir: &DataDir, item: &Item, now: i64) -> Result<PathBuf> {
    let spool = dir.spool();
    dir.ensure_sub(&spool)?;
    let name = format!(
        "{:013}-{:010}-{:016x}.json",
        now.max(0),
        std::process::id(),
        crate::rand::u64()
    );
    let tmp = spool.join(format!(".{name}.tmp"));
    let path = spool.join(&name);
    let body = serde_json::to_vec(&(item, now))
        .map_err(|e| Error::Invalid(format!("cannot encode spooled event: {e}")))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("cannot create spool file", &tmp, e))?;
    f.write_all(&body)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("cannot write spool file", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("cannot rename spool file", &path, e))?;
    Ok(path)
}

/// The spool files waiting, oldest first.
pub fn pending(dir: &DataDir) -> Result<Vec<PathBuf>> {
    let spool = dir.spool();
    let entries = match std::fs::read_dir(&spool) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("cannot list spool", &spool, e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_spool_file(p))
        .collect();
    files.sort();
    Ok(files)
}

fn is_spool_file(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && name.ends_with(".json")
}

/// Writes every spooled event to the database through the same path as the hook
/// ([`capture::handle::apply`], [`quarantine::add`]), each in its own transaction, removing each
/// file once its event is committed. A file that cannot be read as an event goes to the
/// quarantine. Stops at the first database error (the database is still locked: try
/// again later). Returns how many files were ingested.
pub fn ingest(
    dir: &DataDir,
    conn: &mut Connection,
    settings: &Settings,
    now: i64,
) -> Result<usize> {
    let mut done = 0;
    for path in pending(dir)? {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("cannot read spool file", &path, e)),
        };
        match serde_json::from_slice::<(Item, i64)>(&bytes) {
            Ok((Item::Capture(rec), _)) => {
                db::write(conn, |tx| {
                    capture::handle::apply(tx, &rec, settings.queue.max_attempts).map(drop)
                })?;
            }
            Ok((Item::Quarantine(entry), at)) => {
                db::write(conn, |tx| quarantine::add(tx, &entry, at).map(drop))?;
            }
            Err(e) => {
                log::warn!("spool file {} is unreadable: {e}", path.display());
                let entry = quarantine::Entry::new(
                    None,
                    format!("unreadable spool file: {e}"),
                    &bytes,
                    bytes.len() as u64,
                    settings.capture.redact_secrets,
                );
                db::write(conn, |tx| quarantine::add(tx, &entry, now).map(drop))?;
            }
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("cannot remove spool file", &path, e)),
        }
        done += 1;
    }
    if done > 0 {
        log::info!("ingested {done} spooled events");
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::handle::Action;
    use crate::store::db::OpenOptions;

    #[test]
    fn files_sort_in_order_and_bad_ones_are_quarantined() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let rec = |at: i64| {
            Item::Capture(Box::new(Record {
                session_id: "s".into(),
                project: "p".into(),
                cwd: "/p".into(),
                at,
                action: Action::Start,
            }))
        };
        let a = write(&dd, &rec(2), 2).expect("write");
        let b = write(&dd, &rec(10), 10).expect("write");
        assert_eq!(pending(&dd).expect("pending"), vec![a, b]);
        assert_eq!(crate::store::paths::mode_of(&dd.spool()), Some(0o700));
        std::fs::write(dd.spool().join("0000000000011-1-x.json"), b"{oops").expect("bad");
        std::fs::write(dd.spool().join(".partial.json.tmp"), b"{").expect("tmp");

        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let s = Settings::default();
        assert_eq!(ingest(&dd, &mut conn, &s, 50).expect("ingest"), 3);
        assert!(pending(&dd).expect("pending").is_empty());
        let started: i64 = conn
            .query_row("SELECT started_at FROM sessions", [], |r| r.get(0))
            .expect("session");
        assert_eq!(started, 2);
        let rows = quarantine::list(&conn, 0).expect("list");
        assert_eq!(rows.len(), 1);
        assert!(rows[0].reason.contains("unreadable spool file"));
    }

    #[test]
    fn a_locked_database_leaves_the_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let item = Item::Quarantine(quarantine::Entry::new(None, "x", b"y", 1, true));
        write(&dd, &item, 1).expect("write");
        let mut holder = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let tx = holder
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("lock");
        let mut conn = db::open_data_dir(
            &dd,
            OpenOptions {
                busy_timeout: std::time::Duration::from_millis(20),
                create: true,
            },
        )
        .expect("open");
        let err = ingest(&dd, &mut conn, &Settings::default(), 5).expect_err("locked");
        assert!(err.is_busy(), "{err}");
        assert_eq!(pending(&dd).expect("pending").len(), 1);
        tx.rollback().expect("unlock");
        assert_eq!(
            ingest(&dd, &mut conn, &Settings::default(), 5).expect("ok"),
            1
        );
    }
}
