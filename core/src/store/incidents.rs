//! What went wrong outside the database, kept where `cairn status` finds it even when the
//! database could not take it:
//!
//! - `lost-events`: the count of hook events that neither the database nor the spool
//!   could keep (a full disk), with the first and last time and the last cause. The file
//!   is allocated ahead (a fixed [`LOST_FILE_LEN`] bytes, written by the worker at start
//!   and by a hook that creates the database) and rewritten in place under `flock`, so
//!   recording a loss needs no new disk block: it works on a full disk, where a new file,
//!   a log line or a spool file may not.
//! - `notices/<time>-<kind>.txt`: one file per repair cairn made on its own (a database
//!   replaced under the worker, a damaged database restored), each a needs-attention item
//!   until acknowledged (`cairn status --acknowledge`).
//!
//! - `worker-failed`: when and why the latest worker stopped on an error (a model provider
//!   without its key, a database it cannot use), replaced by each failure: a worker
//!   started on demand exits at once on such an error, and only its log said why.
//!
//! When the data dir cannot take even these (a read-only file system), the hook records the
//! loss in the data dir's fallback (`store::fallback`), which [`lost`] adds in.
//!
//! Invariants: recording never panics and never fails its caller (the hook logs what it
//! could not record); the lost-events file never grows.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::paths::DataDir;

/// The fixed size of the lost-events file.
pub const LOST_FILE_LEN: usize = 512;

/// Events hooks could not keep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub count: u64,
    pub first_at: i64,
    pub last_at: i64,
    /// The cause of the latest loss, one line.
    pub cause: String,
}

fn encode(lost: Option<&Lost>) -> Vec<u8> {
    let mut text = match lost {
        Some(l) => format!(
            "{} {} {} {}",
            l.count,
            l.first_at,
            l.last_at,
            l.cause.replace(['\n', '\r'], " ")
        ),
        None => "0 0 0".to_string(),
    };
    crate::text::truncate(&mut text, LOST_FILE_LEN - 1);
    let mut bytes = text.into_bytes();
    bytes.resize(LOST_FILE_LEN - 1, b' ');
    bytes.push(b'\n');
    bytes
}

fn decode(bytes: &[u8]) -> Option<Lost> {
    let text = String::from_utf8_lossy(bytes);
    let mut parts = text.trim().splitn(4, ' ');
    let count: u64 = parts.next()?.parse().ok()?;
    let first_at = parts.next()?.parse().ok()?;
    let last_at = parts.next()?.parse().ok()?;
    let cause = parts.next().unwrap_or("").trim().to_string();
    (count > 0).then_some(Lost {
        count,
        first_at,
        last_at,
        cause,
    })
}

fn open_lost(dir: &DataDir, create: bool) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .open(dir.lost_events())
}

/// Allocates the lost-events file if it is missing (or short), so that a later loss can be
/// recorded on a full disk. Cheap when it exists.
pub fn prepare_lost(dir: &DataDir) -> Result<()> {
    let path = dir.lost_events();
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= LOST_FILE_LEN as u64) {
        return Ok(());
    }
    let mut f = open_lost(dir, true).map_err(|e| Error::io("cannot create", &path, e))?;
    lock_exclusive(&f);
    let mut old = Vec::new();
    let _ = f.read_to_end(&mut old);
    let body = encode(decode(&old).as_ref());
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.write_all(&body))
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("cannot write", &path, e))
}

/// Counts one event a hook could not keep, with its cause. Rewrites the allocated file in
/// place; creates it when missing (which a full disk may refuse: then the caller's log line
/// is all that is left).
pub fn record_lost(dir: &DataDir, cause: &str, now: i64) -> Result<Lost> {
    let path = dir.lost_events();
    let mut f = open_lost(dir, true).map_err(|e| Error::io("cannot open", &path, e))?;
    lock_exclusive(&f);
    let mut old = Vec::new();
    f.read_to_end(&mut old)
        .map_err(|e| Error::io("cannot read", &path, e))?;
    let lost = match decode(&old) {
        Some(l) => Lost {
            count: l.count + 1,
            first_at: l.first_at,
            last_at: now,
            cause: cause.to_string(),
        },
        None => Lost {
            count: 1,
            first_at: now,
            last_at: now,
            cause: cause.to_string(),
        },
    };
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.write_all(&encode(Some(&lost))))
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("cannot write", &path, e))?;
    Ok(lost)
}

/// The events hooks could not keep since the last acknowledgement, if any: counted in the
/// data dir, and in its fallback outside it (`store::fallback`) when the data dir could
/// not take even that.
pub fn lost(dir: &DataDir) -> Option<Lost> {
    let here = lost_here(dir);
    let outside = crate::store::fallback::existing(dir).and_then(|fb| lost_here(&fb));
    match (here, outside) {
        (Some(a), Some(b)) => Some(Lost {
            count: a.count + b.count,
            first_at: a.first_at.min(b.first_at),
            last_at: a.last_at.max(b.last_at),
            cause: if b.last_at > a.last_at {
                b.cause
            } else {
                a.cause
            },
        }),
        (a, b) => a.or(b),
    }
}

fn lost_here(dir: &DataDir) -> Option<Lost> {
    std::fs::read(dir.lost_events())
        .ok()
        .and_then(|b| decode(&b))
}

/// A repair cairn made on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub at: i64,
    pub kind: String,
    pub message: String,
    #[serde(skip)]
    pub path: PathBuf,
}

/// Writes a notice (`kind` is a short word: `replaced`, `recovered`). Also logged by the
/// caller.
pub fn raise(dir: &DataDir, kind: &str, message: &str, now: i64) -> Result<PathBuf> {
    let notices = dir.notices();
    dir.ensure_sub(&notices)?;
    let path = notices.join(format!("{:013}-{kind}.txt", now.max(0)));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("cannot create notice", &path, e))?;
    f.write_all(format!("{message}\n").as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("cannot write notice", &path, e))?;
    Ok(path)
}

/// The notices not yet acknowledged, oldest first.
pub fn notices(dir: &DataDir) -> Vec<Notice> {
    let Ok(entries) = std::fs::read_dir(dir.notices()) else {
        return Vec::new();
    };
    let mut out: Vec<Notice> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".txt")?
                .to_string();
            let (at, kind) = name.split_once('-')?;
            let message = std::fs::read_to_string(&path).ok()?.trim().to_string();
            Some(Notice {
                at: at.parse().ok()?,
                kind: kind.to_string(),
                message,
                path,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.at, &a.kind).cmp(&(b.at, &b.kind)));
    out
}

/// Acknowledges everything shown: the lost-events count goes back to zero (the file stays
/// allocated) and the notices are removed. Returns how many items were cleared.
pub fn acknowledge(dir: &DataDir) -> Result<usize> {
    let mut cleared = 0;
    let outside = crate::store::fallback::existing(dir);
    for place in std::iter::once(dir).chain(outside.as_ref()) {
        if lost_here(place).is_some() {
            let path = place.lost_events();
            let mut f = open_lost(place, false).map_err(|e| Error::io("cannot open", &path, e))?;
            lock_exclusive(&f);
            f.write_all(&encode(None))
                .map_err(|e| Error::io("cannot write", &path, e))?;
            cleared += 1;
        }
    }
    for n in notices(dir) {
        std::fs::remove_file(&n.path).map_err(|e| Error::io("cannot remove", &n.path, e))?;
        cleared += 1;
    }
    Ok(cleared)
}

/// Why a worker stopped on an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerFailure {
    pub at: i64,
    /// The error, one line.
    pub error: String,
}

/// Records why a worker stopped on an error, replacing the previous record (written aside
/// and renamed, so a reader sees one record whole). Also logged by the caller.
pub fn record_worker_failure(dir: &DataDir, error: &str, now: i64) -> Result<()> {
    let path = dir.worker_failed();
    let text = format!("{now}\n{}\n", error.replace(['\n', '\r'], " "));
    crate::store::paths::replace_file(&path, text.as_bytes(), 0o600)
        .map_err(|e| Error::io("cannot record the worker's failure", &path, e))
}

/// The latest worker failure recorded, if any (whether a worker ran since is the caller's
/// to tell).
pub fn worker_failure(dir: &DataDir) -> Option<WorkerFailure> {
    let text = std::fs::read_to_string(dir.worker_failed()).ok()?;
    let (at, error) = text.split_once('\n')?;
    Some(WorkerFailure {
        at: at.trim().parse().ok()?,
        error: error.trim().to_string(),
    })
}

/// Takes an exclusive lock on the open lost-events file (std's file lock, a `flock`), held
/// until the file is closed. Best effort: without it two hooks may count one loss, never
/// corrupt the file, which is rewritten whole.
fn lock_exclusive(f: &std::fs::File) {
    let _ = f.lock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_are_counted_in_place_and_acknowledged() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path());
        assert_eq!(lost(&dd), None);
        prepare_lost(&dd).expect("prepare");
        assert_eq!(
            std::fs::metadata(dd.lost_events()).expect("meta").len(),
            LOST_FILE_LEN as u64
        );
        record_lost(&dd, "no space left\non device", 5).expect("record");
        let l = record_lost(&dd, &"x".repeat(2000), 9).expect("record");
        assert_eq!((l.count, l.first_at, l.last_at), (2, 5, 9));
        assert_eq!(lost(&dd).expect("lost").count, 2);
        assert_eq!(
            std::fs::metadata(dd.lost_events()).expect("meta").len(),
            LOST_FILE_LEN as u64
        );
        raise(&dd, "replaced", "the database was replaced", 7).expect("raise");
        let n = notices(&dd);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].kind, "replaced");
        assert_eq!(acknowledge(&dd).expect("ack"), 2);
        assert_eq!(lost(&dd), None);
        assert!(notices(&dd).is_empty());
        prepare_lost(&dd).expect("prepare again");
        assert_eq!(lost(&dd), None);
    }
}
