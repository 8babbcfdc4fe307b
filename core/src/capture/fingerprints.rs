//! Where a session's remembered secrets live between its hook runs (see
//! `privacy::recurring`): `secrets/` in the data dir, owner-only, holding `key` (32 random
//! bytes, made once by the first hook that needs it) and one file per session (named by a
//! hash of the session id) of 18-byte records, a secret's length (`u16`, little-endian) and
//! its 128-bit fingerprint. Never a secret. Only writer of the folder.
//!
//! A file, not a table: the hook reads it before it cleans the event, whether or not the
//! database can be opened, and an event that ends up in the spool is cleaned the same way.
//! Records are appended in one write each (`O_APPEND`), so parallel hooks of one session
//! add to it without a lock; a torn last record is ignored. A session's file untouched for
//! [`KEEP_DAYS`] is removed at the next session start.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::privacy::recurring::{FINGERPRINT_LEN, Fingerprint, Recurring};
use crate::store::paths::{self, DataDir};

/// Days a session's fingerprints are kept after its last new secret.
pub const KEEP_DAYS: u64 = 30;

const RECORD: usize = 2 + FINGERPRINT_LEN;
const KEY_LEN: usize = 32;
/// A session file larger than this is read only this far (about 58,000 secrets).
const MAX_FILE: u64 = 1 << 20;

fn folder(dir: &DataDir) -> PathBuf {
    dir.root().join("secrets")
}

fn session_file(dir: &DataDir, session_id: &str) -> PathBuf {
    let h = Sha256::digest(session_id.as_bytes());
    folder(dir).join(crate::hex::hex(&h[..16]))
}

fn read_key(path: &Path) -> Option<Vec<u8>> {
    let key = std::fs::read(path).ok()?;
    (key.len() == KEY_LEN).then_some(key)
}

/// The data dir's key, made when missing (`create`): random bytes written to a temporary
/// file and linked into place, so two hooks racing to make it agree on one.
fn key(dir: &DataDir, create: bool) -> Option<Vec<u8>> {
    let path = folder(dir).join("key");
    if let Some(k) = read_key(&path) {
        return Some(k);
    }
    if !create {
        return None;
    }
    let made = (|| -> std::io::Result<()> {
        paths::ensure_private_dir(&folder(dir)).map_err(std::io::Error::other)?;
        let mut bytes = [0u8; KEY_LEN];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let tmp = folder(dir).join(format!("key.{}.tmp", std::process::id()));
        let mut f = paths::create_private(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    if let Err(e) = made {
        log::warn!(
            "cannot make the secrets key in {}: {e}",
            folder(dir).display()
        );
    }
    read_key(&path)
}

fn parse(bytes: &[u8]) -> Vec<Fingerprint> {
    bytes
        .chunks_exact(RECORD)
        .map(|r| {
            let mut f = [0; FINGERPRINT_LEN];
            f.copy_from_slice(&r[2..]);
            (u16::from_le_bytes([r[0], r[1]]), f)
        })
        .collect()
}

/// The session's remembered secrets, ready for `record::prepare_in`. Without a key yet,
/// one is made: the event may show the session's first secret.
pub fn load(dir: &DataDir, session_id: &str) -> Option<Recurring> {
    let known = std::fs::File::open(session_file(dir, session_id))
        .and_then(|f| {
            let mut bytes = Vec::new();
            f.take(MAX_FILE).read_to_end(&mut bytes)?;
            Ok(parse(&bytes))
        })
        .unwrap_or_default();
    let key = key(dir, true)?;
    Some(Recurring::new(&key, known))
}

/// Adds the secrets an event showed to its session's file.
pub fn save(dir: &DataDir, session_id: &str, session: &Recurring) {
    let new = session.new_fingerprints();
    if new.is_empty() {
        return;
    }
    let mut bytes = Vec::with_capacity(new.len() * RECORD);
    for (len, f) in new {
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(f);
    }
    let path = session_file(dir, session_id);
    if let Err(e) = paths::append_private(&path).and_then(|mut f| f.write_all(&bytes)) {
        log::warn!("cannot remember the secrets of session {session_id}: {e}");
    }
}

/// Removes the files of sessions that showed no new secret for [`KEEP_DAYS`].
pub fn prune(dir: &DataDir) {
    let Ok(entries) = std::fs::read_dir(folder(dir)) else {
        return;
    };
    let limit = std::time::Duration::from_secs(KEEP_DAYS * 86_400);
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > limit));
        if old && e.file_name() != "key" {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_session_remembers_across_loads_and_stores_no_secret() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = DataDir::new(tmp.path());
        let mut s = load(&dir, "sess-1").expect("key made");
        s.remember("Zx8Qw2Lm4Kp6Vb8N");
        save(&dir, "sess-1", &s);
        let again = load(&dir, "sess-1").expect("loads");
        assert_eq!(again.spans("echo Zx8Qw2Lm4Kp6Vb8N").len(), 1);
        assert!(load(&dir, "sess-2").expect("loads").is_empty());
        for e in std::fs::read_dir(folder(&dir)).expect("dir").flatten() {
            let bytes = std::fs::read(e.path()).expect("read");
            assert!(!bytes.windows(16).any(|w| w == b"Zx8Qw2Lm4Kp6Vb8N"));
            let mode = e.metadata().expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", e.path().display());
        }
        let mode = std::fs::metadata(folder(&dir))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        prune(&dir);
        assert_eq!(
            load(&dir, "sess-1")
                .expect("kept")
                .spans("Zx8Qw2Lm4Kp6Vb8N")
                .len(),
            1
        );
    }
}
