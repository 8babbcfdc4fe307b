//! Making a damaged database file readable again, on a scratch copy (`store::recover` reads
//! its rows from there; the damaged file itself is never written): the SQLite header
//! rebuilt from known values when it is broken ("file is not a database"), the schema's
//! pages taken from a reference file when they cannot be read, and the WAL checked frame
//! by frame, so that the transactions SQLite silently drops past a torn or garbled frame
//! are counted instead of lost unseen.
//!
//! Pure file work: bytes in, bytes out, plus SQLite to test whether a copy reads.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::store::db;

/// The first 16 bytes of every SQLite database file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Page sizes tried when the header's own cannot be trusted, the likeliest first.
const PAGE_SIZES: &[u32] = &[4096, 1024, 2048, 8192, 16384, 32768, 65536, 512];

/// How many pages after the first [`looks_like_sqlite`] reads when page 1 is garbage.
const PAGES_LOOKED_AT: usize = 8;

/// True when the file at `path` looks like a SQLite database, damaged or not: its magic,
/// or, after a broken header, page 1's b-tree header where SQLite puts it, or, when all of
/// page 1 is garbage, the pages after it: in a file of whole pages of some size, at least
/// two of the next [`PAGES_LOOKED_AT`] (all of them in a smaller file) carry a b-tree page
/// header whose fields fit the page. Random bytes pass that by chance about once in
/// 10^8 per page size; a text or a binary of another kind, practically never.
pub(crate) fn looks_like_sqlite(path: &Path) -> bool {
    let largest = *PAGE_SIZES.iter().max().unwrap_or(&4096) as usize;
    let mut head = vec![0u8; largest * (PAGES_LOOKED_AT + 1)];
    let (n, len) = std::fs::File::open(path)
        .and_then(|mut f| Ok((read_up_to(&mut f, &mut head)?, f.metadata()?.len())))
        .unwrap_or((0, 0));
    let head = &head[..n];
    if (n >= 16 && &head[..16] == MAGIC) || (n > 100 && matches!(head[100], 5 | 13)) {
        return true;
    }
    PAGE_SIZES.iter().any(|&ps| {
        let ps = ps as usize;
        if len < 2 * ps as u64 || !len.is_multiple_of(ps as u64) {
            return false;
        }
        let pages: Vec<&[u8]> = head
            .chunks_exact(ps)
            .skip(1)
            .take(PAGES_LOOKED_AT)
            .collect();
        let btree = pages.iter().filter(|p| btree_page_header(p)).count();
        btree >= 2.min(pages.len())
    })
}

/// True when `page` (not page 1) starts with a b-tree page header whose fields fit it:
/// its type, the first free block and the cell content area inside the page, and its cell
/// pointers between the header and the content area.
fn btree_page_header(page: &[u8]) -> bool {
    let u16_at = |at: usize| usize::from(u16::from_be_bytes([page[at], page[at + 1]]));
    let header = match page.first() {
        Some(2 | 5) => 12,
        Some(10 | 13) => 8,
        _ => return false,
    };
    let (free, cells, content) = (u16_at(1), u16_at(3), u16_at(5));
    let content = if content == 0 { 65536 } else { content };
    let pointers_end = header + 2 * cells;
    (free == 0 || (pointers_end..page.len()).contains(&free))
        && pointers_end <= content
        && content <= page.len()
        && usize::from(page[7]) <= 60
}

/// True when the file at `path` has SQLite's magic but a header field SQLite rejects (page
/// size, payload fractions, schema format, text encoding).
pub(crate) fn header_broken(path: &Path) -> bool {
    let mut h = [0u8; 100];
    let n = std::fs::File::open(path)
        .and_then(|mut f| read_up_to(&mut f, &mut h))
        .unwrap_or(0);
    if n < 100 || &h[..16] != MAGIC {
        return false;
    }
    let be = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let raw = u32::from(u16::from_be_bytes([h[16], h[17]]));
    let ps = if raw == 1 { 65536 } else { raw };
    let sound = ps.is_power_of_two()
        && (512..=65536).contains(&ps)
        && matches!(h[18], 1 | 2)
        && matches!(h[19], 1 | 2)
        && h[21..24] == [64, 32, 32]
        && (1..=4).contains(&be(44))
        && (1..=3).contains(&be(56));
    !sound
}

/// True when SQLite can open `path` and read its schema.
pub(crate) fn schema_readable(path: &Path) -> bool {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .and_then(|mut c| {
            db::trace_if_asked(&mut c);
            c.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .is_ok()
}

/// The page size of a database file of `len` bytes starting with `file`: the header's when
/// it is a valid one, else the WAL's (`wal` is its header, if any), else the size under
/// which page 1 and page 2 look like b-tree pages.
fn page_size(file: &[u8], len: u64, wal: Option<&[u8]>) -> u32 {
    let valid = |ps: u32| ps.is_power_of_two() && (512..=65536).contains(&ps);
    if file.len() >= 18 && &file[..16] == MAGIC {
        let raw = u32::from(u16::from_be_bytes([file[16], file[17]]));
        let ps = if raw == 1 { 65536 } else { raw };
        if valid(ps) {
            return ps;
        }
    }
    if let Some(w) = wal.filter(|w| w.len() >= 12) {
        let ps = u32::from_be_bytes([w[8], w[9], w[10], w[11]]);
        if valid(ps) {
            return ps;
        }
    }
    let btree = |b: u8| matches!(b, 2 | 5 | 10 | 13);
    PAGE_SIZES
        .iter()
        .copied()
        .find(|&ps| {
            file.len() > 100
                && len.is_multiple_of(u64::from(ps))
                && btree(file[100])
                && file.get(ps as usize).is_none_or(|&b| btree(b) || b == 0)
        })
        .unwrap_or(4096)
}

/// A valid 100-byte SQLite header for a WAL database of `pages` pages of `page_size`,
/// with no free list (reading never needs it) and `user_version` kept.
fn header(page_size: u32, pages: u32, user_version: u32) -> [u8; 100] {
    let mut h = [0u8; 100];
    h[..16].copy_from_slice(MAGIC);
    let ps = if page_size == 65536 {
        1
    } else {
        page_size as u16
    };
    h[16..18].copy_from_slice(&ps.to_be_bytes());
    h[18] = 2; // WAL
    h[19] = 2;
    h[20] = 0; // no reserved bytes
    h[21] = 64;
    h[22] = 32;
    h[23] = 32;
    let put =
        |h: &mut [u8; 100], at: usize, v: u32| h[at..at + 4].copy_from_slice(&v.to_be_bytes());
    put(&mut h, 24, 1); // change counter
    put(&mut h, 28, pages);
    put(&mut h, 40, 1); // schema cookie
    put(&mut h, 44, 4); // schema format
    put(&mut h, 56, 1); // UTF-8
    put(&mut h, 60, user_version);
    put(&mut h, 92, 1); // valid for change counter 1
    put(&mut h, 96, 3_046_000);
    h
}

/// Rewrites the 100-byte header of the database file at `path` from known values (its
/// page size guessed when broken, `user_version` kept when plausible, else
/// `schema_version`).
pub(crate) fn rebuild_header(path: &Path, schema_version: i64) -> Result<()> {
    let io = |e| Error::io("cannot repair the header of", path, e);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let mut head = vec![0u8; 65536 + 1];
    let n = read_up_to(&mut f, &mut head).map_err(io)?;
    head.truncate(n);
    let len = f.metadata().map_err(io)?.len();
    let wal = std::fs::read(wal_of(path)).ok();
    let ps = page_size(&head, len, wal.as_deref().map(|w| &w[..w.len().min(32)]));
    let kept = head
        .get(60..64)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|&v| v > 0 && i64::from(v) <= schema_version);
    let version = kept.unwrap_or(schema_version.max(0) as u32);
    let pages = len.div_ceil(u64::from(ps)).max(1) as u32;
    f.seek(SeekFrom::Start(0)).map_err(io)?;
    f.write_all(&header(ps, pages, version)).map_err(io)?;
    // A partial last page (a truncation) is padded: SQLite reads whole pages.
    let whole = u64::from(pages) * u64::from(ps);
    if whole > len {
        f.set_len(whole).map_err(io)?;
    }
    f.sync_all().map_err(io)?;
    Ok(())
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The `-wal` companion of a database path.
pub(crate) fn wal_of(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push("-wal");
    p.into()
}

/// Copies the pages that hold the schema in `reference` (a sound cairn database of the
/// same layout: a backup of this very file, or one made by the same migrations) over the
/// same pages of `path`, then rebuilds `path`'s header. The schema of a cairn database is
/// written by its migrations before any row, so its pages sit at the same numbers in
/// every database made by the same migrations.
pub(crate) fn borrow_schema(path: &Path, reference: &Path, schema_version: i64) -> Result<()> {
    let pages: Vec<i64> = {
        let mut c = Connection::open_with_flags(reference, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        db::trace_if_asked(&mut c);
        c.prepare("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema' ORDER BY pageno")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    let bytes = std::fs::read(reference).map_err(|e| Error::io("cannot read", reference, e))?;
    let ps = page_size(&bytes, bytes.len() as u64, None) as usize;
    let io = |e| Error::io("cannot repair the schema of", path, e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io)?;
    for page in pages {
        let at = (page as usize - 1) * ps;
        let Some(content) = bytes.get(at..at + ps) else {
            continue;
        };
        f.seek(SeekFrom::Start(at as u64)).map_err(io)?;
        f.write_all(content).map_err(io)?;
    }
    f.sync_all().map_err(io)?;
    drop(f);
    rebuild_header(path, schema_version)
}

/// Committed transactions of the WAL of the database at `db` that SQLite will not read
/// ([`unreadable_commits`]), checked under the database's write lock (no writer appends to
/// or resets the WAL meanwhile), with the WAL index as it was before this check opened the
/// database. 0 when a writer holds the database.
pub fn torn_wal(db: &Path, lock_wait: std::time::Duration) -> u64 {
    let mut shm = db.as_os_str().to_os_string();
    shm.push("-shm");
    let shm = std::fs::read(std::path::PathBuf::from(shm)).ok();
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE) else {
        return 0;
    };
    // Closing the last connection would checkpoint what SQLite reads of the WAL into the
    // database and remove the WAL: the lost transactions with it, unseen.
    let locked = conn
        .set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .and_then(|_| conn.busy_timeout(lock_wait))
        .and_then(|()| conn.execute_batch("BEGIN IMMEDIATE"));
    // Busy: a writer is at work, and says the WAL is fine. Any other failure (a broken
    // header) leaves no writer able to change the WAL: it is read all the same (SQLite
    // opened it, and reset the index, before reading the header).
    match &locked {
        Err(e) if crate::error::is_busy(e) => return 0,
        _ => {}
    }
    let wal = std::fs::read(wal_of(db)).unwrap_or_default();
    if locked.is_ok() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let torn = unreadable_commits(&wal, shm.as_deref());
    if torn > 0
        && let Some(shm) = &shm
    {
        // The first connection to open the database empties the WAL index: the recovery
        // reads this copy of it instead (`kept_index`).
        let _ =
            crate::store::paths::create_private(&kept_index(db)).and_then(|mut f| f.write_all(shm));
    }
    torn
}

/// Where [`torn_wal`] keeps the WAL index it read, for the recovery that follows.
pub(crate) fn kept_index(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_os_string();
    p.push("-shm.torn");
    p.into()
}

/// The WAL's checksum over `data` (whole 8-byte words), continuing from `s`, in the byte
/// order the WAL's magic names.
fn checksum(big_endian: bool, data: &[u8], mut s: (u32, u32)) -> (u32, u32) {
    for w in data.chunks_exact(8) {
        let word = |b: &[u8]| {
            let a = [b[0], b[1], b[2], b[3]];
            if big_endian {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        s.0 = s.0.wrapping_add(word(&w[..4])).wrapping_add(s.1);
        s.1 = s.1.wrapping_add(word(&w[4..])).wrapping_add(s.0);
    }
    s
}

/// How many committed transactions the WAL file `wal` holds that SQLite will not read: the
/// commits at or past the first frame that is torn (cut short) or garbled (its checksum or
/// salt wrong), counted by their commit frames (frames of an earlier generation of the WAL,
/// with other salts, are not counted), plus the broken frame itself when commits follow
/// it: at most one more than were lost. A broken frame with no commit after it is what a
/// writer killed mid-append leaves (nothing committed was lost). A garbled header loses
/// every frame. 0 when the WAL is missing or whole.
///
/// `shm` is the WAL index (`-shm`) when there is one: when it is of the same generation and
/// names more frames than the WAL still has whole (a WAL cut at a frame boundary), those
/// frames count too, one transaction each at most.
pub fn unreadable_commits(wal: &[u8], shm: Option<&[u8]>) -> u64 {
    // The frames the WAL index says were committed, when it belongs to this WAL.
    let indexed = |salts: &[u8]| -> Option<u64> {
        let h = shm?.get(..48)?;
        let ne = |b: &[u8]| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        (h[12] == 1 && &h[32..40] == salts).then(|| u64::from(ne(&h[16..20])))
    };
    let found = wal_frames(wal);
    match (found, wal.get(16..24)) {
        (Some((valid, lost)), Some(salts)) => match indexed(salts) {
            Some(mx) if mx > valid => lost.max(mx - valid),
            _ => lost,
        },
        (Some((_, lost)), None) => lost,
        (None, _) => 0,
    }
}

/// The WAL's whole valid frames before the first broken one, and the transactions lost
/// from there (see [`unreadable_commits`]); `None` for an empty WAL.
fn wal_frames(wal: &[u8]) -> Option<(u64, u64)> {
    if wal.is_empty() {
        return None;
    }
    if wal.len() < 32 {
        return Some((0, 1));
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let magic = be32(&wal[0..4]);
    let ps = be32(&wal[8..12]) as usize;
    let frame = 24 + ps;
    let frames = |from: usize| {
        (from..)
            .step_by(frame)
            .take_while(move |&at| at + 24 <= wal.len())
    };
    let header_ok = (magic & !1) == 0x377f_0682
        && ps.is_power_of_two()
        && (512..=65536).contains(&ps)
        && checksum(magic & 1 == 1, &wal[..24], (0, 0)) == (be32(&wal[24..28]), be32(&wal[28..32]));
    if !header_ok {
        // Every frame is lost: count the commit frames of the first frame's generation.
        let ps = if ps.is_power_of_two() && (512..=65536).contains(&ps) {
            ps
        } else {
            return Some((0, 1));
        };
        let frame = 24 + ps;
        let salts = wal.get(32 + 8..32 + 16).map(|s| s.to_vec());
        let commits = (32..)
            .step_by(frame)
            .take_while(|&at| at + 24 <= wal.len())
            .filter(|&at| {
                be32(&wal[at + 4..at + 8]) != 0 && salts.as_deref() == Some(&wal[at + 8..at + 16])
            })
            .count() as u64;
        return Some((0, commits.max(1)));
    }
    let big = magic & 1 == 1;
    let salts = &wal[16..24];
    let mut s = (be32(&wal[24..28]), be32(&wal[28..32]));
    let mut valid = 0;
    for at in frames(32) {
        let head = &wal[at..at + 24];
        let whole = at + frame <= wal.len();
        let ok = whole && &head[8..16] == salts && {
            let next = checksum(big, &head[..8], s);
            let next = checksum(big, &wal[at + 24..at + frame], next);
            (be32(&head[16..20]), be32(&head[20..24])) == next && {
                s = next;
                true
            }
        };
        if ok {
            valid += 1;
            continue;
        }
        // The first broken frame: SQLite drops it and everything after. Lost are the later
        // commit frames of this generation, and the broken frame itself when later commits
        // show it was not the tail a writer killed mid-append left (an uncommitted
        // transaction: nothing lost). A broken last commit is seen only by the WAL index.
        let current = |a: usize| &wal[a + 8..a + 16] == salts;
        let later = frames(at + frame)
            .filter(|&a| a + frame <= wal.len() && be32(&wal[a + 4..a + 8]) != 0 && current(a))
            .count() as u64;
        let broken = u64::from(later > 0);
        return Some((valid, later + broken));
    }
    Some((valid, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_whose_first_page_is_garbage_still_looks_like_one_and_other_files_do_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let db_path = tmp.path().join("cairn.db");
        let conn = db::open(&db_path, db::OpenOptions::default()).expect("open");
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        drop(conn);
        let mut bytes = std::fs::read(&db_path).expect("read");
        let mut x: u32 = 0x9e37_79b9;
        for b in &mut bytes[..4096] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        std::fs::write(&db_path, &bytes).expect("write");
        assert!(looks_like_sqlite(&db_path));
        for (name, other) in [
            (
                "random",
                (0..65536u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect::<Vec<u8>>(),
            ),
            ("text", "fn main() {}\n".repeat(4096).into_bytes()),
            ("zeros", vec![0u8; 65536]),
        ] {
            let p = tmp.path().join(name);
            std::fs::write(&p, other).expect("write");
            assert!(!looks_like_sqlite(&p), "{name}");
        }
    }

    #[test]
    fn a_header_is_rebuilt_readable_and_a_wal_checked() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("a.db");
        {
            let c = Connection::open(&path).expect("open");
            c.execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA user_version = 3;
                 CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);",
            )
            .expect("fill");
        }
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[..100].fill(0xEE);
        std::fs::write(&path, &bytes).expect("smash");
        assert!(!schema_readable(&path));
        rebuild_header(&path, 9).expect("rebuild");
        let c = Connection::open(&path).expect("open");
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 2);
        assert_eq!(db::schema_version(&c).expect("version"), 9);
        assert_eq!(unreadable_commits(&[], None), 0);
        assert_eq!(unreadable_commits(&[1, 2, 3], None), 1);
    }

    /// Five one-page transactions in a WAL left behind (no checkpoint on close).
    fn wal_of_five() -> (tempfile::TempDir, Vec<u8>, Vec<u8>) {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("w.db");
        let c = Connection::open(&path).expect("open");
        c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x);")
            .expect("wal");
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("empty the WAL");
        c.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .expect("no checkpoint");
        for n in 0..5 {
            c.execute("INSERT INTO t VALUES (?1)", [n]).expect("insert");
        }
        let wal = std::fs::read(wal_of(&path)).expect("wal");
        let shm = std::fs::read(tmp.path().join("w.db-shm")).expect("shm");
        drop(c);
        (tmp, wal, shm)
    }

    #[test]
    fn a_torn_or_garbled_wal_counts_its_lost_commits_and_a_killed_writer_none() {
        let (_tmp, wal, shm) = wal_of_five();
        let frame = (wal.len() - 32) / 5;
        assert_eq!(unreadable_commits(&wal, Some(&shm)), 0, "a whole WAL");
        // The second frame garbled: it and the three commits after it are lost.
        let mut garbled = wal.clone();
        garbled[32 + frame + 100] ^= 0xFF;
        assert_eq!(unreadable_commits(&garbled, None), 4);
        // The last frame cut short: what a writer killed mid-append leaves, unless the WAL
        // index says it was committed.
        let torn = &wal[..wal.len() - 10];
        assert_eq!(unreadable_commits(torn, None), 0);
        assert_eq!(unreadable_commits(torn, Some(&shm)), 1);
        // Cut at a frame boundary: only the index can tell.
        let cut = &wal[..32 + 3 * frame];
        assert_eq!(unreadable_commits(cut, None), 0);
        assert_eq!(unreadable_commits(cut, Some(&shm)), 2);
        // A garbled header loses every commit.
        let mut header = wal.clone();
        header[20] ^= 0xFF;
        assert!(unreadable_commits(&header, None) >= 5);
    }
}
