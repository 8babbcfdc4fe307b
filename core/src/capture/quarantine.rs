//! The `quarantine` table: hook inputs that could not be turned into events (empty, not
//! JSON, not UTF-8, too large, missing fields, events cairn does not capture), kept so that
//! `cairn status` can show them and a person can see what went wrong. The only module that
//! writes the table.
//!
//! Invariants: the stored copy is bounded ([`MAX_RAW_BYTES`], head and tail) and has gone
//! through the same privacy filter as everything else (private spans stripped, secrets
//! redacted), so quarantine never keeps what capture would have refused to store; the table
//! keeps at most [`MAX_ROWS`] rows, the oldest are dropped first.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::privacy::Privacy;

/// Most bytes of an input kept.
pub const MAX_RAW_BYTES: usize = 64 * 1024;
/// Most rows kept.
pub const MAX_ROWS: i64 = 1_000;

/// An input to quarantine, already cleaned (see [`Entry::new`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `hook_event_name`, when it could be read.
    pub event: Option<String>,
    /// A well-formed event cairn does not capture (harmless), rather than unreadable input.
    #[serde(default)]
    pub uncaptured: bool,
    pub reason: String,
    /// The bounded, cleaned copy of the input.
    pub raw: String,
    /// Length of the whole input in bytes.
    pub raw_len: u64,
}

impl Entry {
    /// Builds an entry from the raw input: decoded lossily as UTF-8, privacy-filtered and
    /// capped to [`MAX_RAW_BYTES`]. `raw_len` is the full length (which may exceed the
    /// bytes at hand when the input was only partly read).
    pub fn new(
        event: Option<String>,
        reason: impl Into<String>,
        input: &[u8],
        raw_len: u64,
        redact_secrets: bool,
    ) -> Self {
        let p = Privacy {
            redact_secrets,
            max_field_bytes: MAX_RAW_BYTES,
        };
        Entry {
            event: event.map(|e| p.text(&e)),
            uncaptured: false,
            reason: p.text(&reason.into()),
            raw: clean_copy(&p, input),
            raw_len,
        }
    }
}

/// The copy of an input that is kept: cleaned as decoded text, so that a secret or a
/// `<private>` tag written with JSON escapes (`\u003cprivate\u003e`, `\"password\"`) is
/// seen for what it is. A JSON input is cleaned value by value and written back as JSON
/// (so that it can be replayed); anything else has its JSON string escapes decoded first.
/// Capped to [`MAX_RAW_BYTES`] with a marker saying how much was cut.
fn clean_copy(p: &Privacy, input: &[u8]) -> String {
    let text = String::from_utf8_lossy(crate::capture::hook::without_bom(input));
    let cleaned = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => p.tree(&v).to_string(),
        Err(_) => p.text(&unescape(&text)),
    };
    crate::privacy::cap(&cleaned, MAX_RAW_BYTES).into_owned()
}

/// `s` with JSON string escapes (`\uXXXX`, surrogate pairs, `\n`, `\"`, …) decoded
/// wherever they appear; anything malformed is left as it is.
fn unescape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains('\\') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    let hex4 = |at: usize| {
        s.get(at..at + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&(_, e)) = chars.peek() else {
            out.push(c);
            break;
        };
        let simple = match e {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            '"' | '\\' | '/' => Some(e),
            _ => None,
        };
        if let Some(d) = simple {
            out.push(d);
            chars.next();
            continue;
        }
        if e == 'u'
            && let Some(hi) = hex4(i + 2)
        {
            let (code, used) = if (0xd800..0xdc00).contains(&hi)
                && s.get(i + 6..i + 8) == Some("\\u")
                && let Some(lo) = hex4(i + 8).filter(|lo| (0xdc00..0xe000).contains(lo))
            {
                (0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00), 12)
            } else {
                (hi, 6)
            };
            if let Some(d) = char::from_u32(code) {
                out.push(d);
                // Skip the rest of the escape (its characters are all ASCII).
                for _ in 1..used {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    std::borrow::Cow::Owned(out)
}

/// True when a stored copy is not the whole input: it was cut to [`MAX_RAW_BYTES`] (or a
/// field of it was), or the input itself was only partly read.
pub fn is_cut(row: &Row) -> bool {
    row.raw_len > MAX_RAW_BYTES as i64 || row.raw.contains(" bytes cut by cairn ...]")
}

/// Deletes one entry in the caller's transaction (a replayed input); returns whether it
/// was there.
pub fn remove(tx: &Transaction, id: i64) -> Result<bool> {
    Ok(tx
        .prepare_cached("DELETE FROM quarantine WHERE id = ?1")?
        .execute([id])?
        > 0)
}

/// Stores an entry in the caller's transaction and trims the table to [`MAX_ROWS`].
pub fn add(tx: &Transaction, entry: &Entry, now: i64) -> Result<i64> {
    let id: i64 = tx
        .prepare_cached(
            "INSERT INTO quarantine (event, reason, raw, raw_len, created_at, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )?
        .query_row(
            params![
                entry.event,
                entry.reason,
                entry.raw.as_bytes(),
                i64::try_from(entry.raw_len).unwrap_or(i64::MAX),
                now,
                if entry.uncaptured {
                    "uncaptured"
                } else {
                    "invalid"
                }
            ],
            |r| r.get(0),
        )?;
    tx.prepare_cached("DELETE FROM quarantine WHERE id <= ?1")?
        .execute([id - MAX_ROWS])?;
    Ok(id)
}

/// A quarantined input, as listed by the CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub id: i64,
    pub event: Option<String>,
    /// `invalid` (unreadable input: needs attention) or `uncaptured` (a well-formed event
    /// cairn does not capture: harmless).
    pub kind: String,
    pub reason: String,
    /// The stored (bounded, cleaned) copy, as text.
    pub raw: String,
    pub raw_len: i64,
    pub created_at: i64,
}

const ROW_COLUMNS: &str = "id, event, kind, reason, raw, raw_len, created_at";

fn read_row(r: &rusqlite::Row) -> rusqlite::Result<Row> {
    let raw: Vec<u8> = r.get(4)?;
    Ok(Row {
        id: r.get(0)?,
        event: r.get(1)?,
        kind: r.get(2)?,
        reason: r.get(3)?,
        raw: String::from_utf8_lossy(&raw).into_owned(),
        raw_len: r.get(5)?,
        created_at: r.get(6)?,
    })
}

/// The latest `limit` entries (0: all), newest first.
pub fn list(conn: &Connection, limit: usize) -> Result<Vec<Row>> {
    let limit = if limit == 0 { i64::MAX } else { limit as i64 };
    let rows = conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM quarantine ORDER BY id DESC LIMIT ?1"
        ))?
        .query_map([limit], read_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One entry by id.
pub fn get(conn: &Connection, id: i64) -> Result<Option<Row>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM quarantine WHERE id = ?1"
        ))?
        .query_row([id], read_row)
        .optional()?)
}

/// Which entries [`clear`] deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clear {
    /// These ids (unknown ids are ignored).
    Ids(Vec<i64>),
    /// Entries created before this time (ms).
    Before(i64),
    /// Every entry.
    All,
}

/// Deletes the entries a person has looked at (or no longer cares about); returns how many.
pub fn clear(conn: &mut Connection, which: &Clear) -> Result<usize> {
    crate::store::db::write(conn, |tx| {
        Ok(match which {
            Clear::Ids(ids) => {
                let mut stmt = tx.prepare_cached("DELETE FROM quarantine WHERE id = ?1")?;
                let mut n = 0;
                for id in ids {
                    n += stmt.execute([id])?;
                }
                n
            }
            Clear::Before(cutoff) => tx
                .prepare_cached("DELETE FROM quarantine WHERE created_at < ?1")?
                .execute([cutoff])?,
            Clear::All => tx.prepare_cached("DELETE FROM quarantine")?.execute([])?,
        })
    })
}

/// How many entries there are, and how many arrived at or after `since` (ms).
pub fn count(conn: &Connection, since: i64) -> Result<(i64, i64)> {
    Ok(conn
        .prepare_cached("SELECT count(*), coalesce(sum(created_at >= ?1), 0) FROM quarantine")?
        .query_row([since], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// Deletes entries created before `cutoff` (ms); returns how many.
pub fn purge(conn: &mut Connection, cutoff: i64) -> Result<usize> {
    clear(conn, &Clear::Before(cutoff))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{self, OpenOptions};
    use crate::store::paths::DataDir;

    #[test]
    fn stores_bounded_clean_copies_lists_counts_and_purges() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let mut input = b"{\"a\": \"AKIAIOSFODNN7EXAMPLE <private>hush</private>".to_vec();
        input.extend(std::iter::repeat_n(b'x', 200_000));
        input.push(0xff);
        let e = Entry::new(
            Some("Stop".into()),
            "input is not valid JSON",
            &input,
            input.len() as u64,
            true,
        );
        assert!(e.raw.len() <= MAX_RAW_BYTES);
        assert!(!e.raw.contains("AKIA") && !e.raw.contains("hush"));
        db::write(&mut conn, |tx| add(tx, &e, 10)).expect("add");
        db::write(&mut conn, |tx| add(tx, &e, 20)).expect("add");
        let rows = list(&conn, 1).expect("list");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].created_at, 20);
        assert_eq!(rows[0].raw_len, input.len() as i64);
        assert_eq!(rows[0].event.as_deref(), Some("Stop"));
        assert_eq!(count(&conn, 15).expect("count"), (2, 1));
        assert_eq!(purge(&mut conn, 15).expect("purge"), 1);
        assert_eq!(list(&conn, 0).expect("list").len(), 1);
    }

    #[test]
    fn gets_by_id_and_clears_by_id_age_or_all() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let bad = Entry::new(None, "input is not valid JSON", b"{nope", 5, true);
        let mut harmless = Entry::new(Some("Notification".into()), "not captured", b"{}", 2, true);
        harmless.uncaptured = true;
        let ids: Vec<i64> = db::write(&mut conn, |tx| {
            Ok(vec![
                add(tx, &bad, 10)?,
                add(tx, &harmless, 20)?,
                add(tx, &bad, 30)?,
                add(tx, &bad, 40)?,
            ])
        })
        .expect("add");
        let one = get(&conn, ids[1]).expect("get").expect("present");
        assert_eq!(one.kind, "uncaptured");
        assert_eq!(one.raw, "{}");
        assert_eq!(one.event.as_deref(), Some("Notification"));
        assert_eq!(
            get(&conn, ids[0]).expect("get").expect("present").kind,
            "invalid"
        );
        assert_eq!(get(&conn, 999).expect("get"), None);

        assert_eq!(
            clear(&mut conn, &Clear::Ids(vec![ids[0], 999])).expect("ids"),
            1
        );
        assert_eq!(get(&conn, ids[0]).expect("get"), None);
        assert_eq!(clear(&mut conn, &Clear::Before(30)).expect("before"), 1);
        let left: Vec<i64> = list(&conn, 0).expect("list").iter().map(|r| r.id).collect();
        assert_eq!(left, vec![ids[3], ids[2]]);
        assert_eq!(clear(&mut conn, &Clear::All).expect("all"), 2);
        assert!(list(&conn, 0).expect("list").is_empty());
        assert_eq!(clear(&mut conn, &Clear::All).expect("none"), 0);
    }

    #[test]
    fn escaped_secrets_and_tags_are_cleaned_as_decoded_text() {
        // Invalid JSON: escapes decoded before cleaning.
        let input = br#"{"prompt": "a \u003cprivate\u003ehush\u003c/private\u003e b \"password\": \"hunter2\" AKIA\u0049OSFODNN7EXAMPLE"#;
        let e = Entry::new(None, "input is not valid JSON", input, 1, true);
        assert!(!e.raw.contains("hush"), "{}", e.raw);
        assert!(!e.raw.contains("hunter2"), "{}", e.raw);
        assert!(!e.raw.contains("OSFODNN7EXAMPLE"), "{}", e.raw);
        // Valid JSON: cleaned value by value, still JSON.
        let input = br#"{"hook_event_name":"Stop","x":"<private>hush</private>","password":"hunter2","s":"tok AKIAIOSFODNN7EXAMPLE"}"#;
        let e = Entry::new(None, "x", input, 1, true);
        let v: serde_json::Value = serde_json::from_str(&e.raw).expect("still JSON");
        assert_eq!(v["x"], "");
        assert_eq!(v["password"], "[REDACTED]");
        assert!(!e.raw.contains("OSFODNN7EXAMPLE"), "{}", e.raw);
        assert_eq!(unescape(r"a\u00e9\ud83d\ude00\n\q\u12"), "aé😀\n\\q\\u12");
    }

    #[test]
    fn keeps_at_most_max_rows() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let e = Entry::new(None, "empty input", b"", 0, true);
        db::write(&mut conn, |tx| {
            for i in 0..(MAX_ROWS + 5) {
                add(tx, &e, i)?;
            }
            Ok(())
        })
        .expect("add");
        assert_eq!(count(&conn, 0).expect("count").0, MAX_ROWS);
        let newest = list(&conn, 1).expect("list");
        assert_eq!(newest[0].created_at, MAX_ROWS + 4);
    }
}
