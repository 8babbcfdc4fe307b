//! The spool: events a hook could not write to the database (it stayed locked past
//! `capture.lock_wait_ms`, or could not be opened), one JSON file each under
//! `<data dir>/spool/`, written already cleaned. The worker feeds them back
//! (`worker::ingest`, through the same `capture::record::apply` the hook uses); this module
//! only writes and lists the files, so it knows nothing of how they are applied. When the
//! data dir cannot take a file at all, the hook writes it to the data dir's fallback
//! (`store::fallback`), a private directory laid out the same way; [`everywhere`] lists
//! both.
//!
//! Invariants: a spool file appears whole or not at all (written to a dot-file, then
//! renamed); names sort in arrival order; a file is removed only after its event is
//! committed, and writing an event twice is harmless (dedupe keys, prompt ids), so a crash
//! between commit and removal loses and duplicates nothing.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::capture::quarantine;
use crate::capture::record::Record;
use crate::error::{Error, Result};
use crate::store::fallback;
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
    let session = match item {
        Item::Capture(rec) => session_tag(&rec.session_id),
        Item::Quarantine(_) => session_tag(""),
    };
    let name = format!(
        "{:013}-{:010}-{:016x}-{session}.json",
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
    let written = f
        .write_all(&body)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("cannot write spool file", &tmp, e));
    drop(f);
    let renamed = written.and_then(|()| {
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("cannot rename spool file", &path, e))
    });
    if renamed.is_err() {
        // A full disk: no half-written file is left behind.
        let _ = std::fs::remove_file(&tmp);
    }
    renamed.map(|()| path)
}

/// The tag of a session in spool file names (FNV-1a of its id, 8 hex digits), so that
/// [`holds_session`] need not open the files.
fn session_tag(session_id: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in session_id.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// True when the spool holds an event of this session (or may: two sessions can share a
/// tag, which only costs the later event a trip through the spool). A new prompt, or an
/// event of a turn not recorded yet, goes behind it, so a session's events are applied in
/// the order they happened.
pub fn holds_session(dir: &DataDir, session_id: &str) -> bool {
    let suffix = format!("-{}.json", session_tag(session_id));
    everywhere(dir).is_ok_and(|files| {
        files.iter().any(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix))
        })
    })
}

/// Removes temporary files older than `older_than_ms` that a hook killed mid-write left
/// (a hook that fails to write removes its own). Returns how many.
pub fn sweep_temporary(dir: &DataDir, older_than_ms: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir.spool()) else {
        return 0;
    };
    let max_age = std::time::Duration::from_millis(older_than_ms);
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with('.') && name.ends_with(".tmp")
        })
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= max_age)
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
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

/// The spool files waiting for `dir`, in its spool and in its fallback outside it
/// (`store::fallback`, where hooks keep events while the data dir cannot take them), in
/// arrival order across both (file names start with the time).
pub fn everywhere(dir: &DataDir) -> Result<Vec<PathBuf>> {
    let mut files = pending(dir)?;
    if let Some(fb) = fallback::existing(dir) {
        files.extend(pending(&fb)?);
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    }
    Ok(files)
}

fn is_spool_file(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && name.ends_with(".json")
}
