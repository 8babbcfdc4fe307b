//! What a hit shows: FTS5 snippets with the matched words marked, and the small text
//! helpers (first line as a title, shortened text, one line) that search, the timeline,
//! the context block and the MCP server share. Reads only.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use crate::error::Result;
use crate::recall::search::{Kind, table};

/// Marks put around matched words in snippets.
pub const HIGHLIGHT_OPEN: &str = "**";
/// See [`HIGHLIGHT_OPEN`].
pub const HIGHLIGHT_CLOSE: &str = "**";
/// Longest title shown for a summary or prompt (its first line, shortened).
const TITLE_CHARS: usize = 100;

/// A hit's best snippet and its body column's snippet.
pub(super) type SnippetPair = (Option<String>, Option<String>);

/// The best snippet and the body-column snippet of each id, in one full-text query: the
/// rowid range of the ids bounds the walk, and `+rowid IN (…)` (not usable as an index)
/// keeps snippets from being made for rows in between.
pub(super) fn snippets_of(
    conn: &Connection,
    kind: Kind,
    fts_match: &str,
    ids: &[i64],
) -> Result<Vec<(i64, SnippetPair)>> {
    let (Some(lo), Some(hi)) = (ids.iter().min(), ids.iter().max()) else {
        return Ok(Vec::new());
    };
    let t = table(kind);
    let fts = t.fts;
    let body = match t.body_column {
        Some(col) => {
            format!("snippet({fts}, {col}, '{HIGHLIGHT_OPEN}', '{HIGHLIGHT_CLOSE}', '…', 12)")
        }
        None => "NULL".into(),
    };
    let marks: Vec<String> = (0..ids.len()).map(|i| format!("?{}", i + 4)).collect();
    let sql = format!(
        "SELECT rowid, snippet({fts}, -1, '{HIGHLIGHT_OPEN}', '{HIGHLIGHT_CLOSE}', '…', 12), {body}
         FROM {fts} WHERE {fts} MATCH ?1 AND rowid >= ?2 AND rowid <= ?3 AND +rowid IN ({})",
        marks.join(", ")
    );
    let mut args: Vec<Value> = vec![
        Value::Text(fts_match.to_string()),
        Value::Integer(*lo),
        Value::Integer(*hi),
    ];
    args.extend(ids.iter().map(|id| Value::Integer(*id)));
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?)))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The first line, shortened to [`TITLE_CHARS`] characters at a word boundary.
pub fn short_title(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    shorten(line, TITLE_CHARS)
}

/// `text` cut to at most `max` characters, at a word boundary when one is near, with `…`.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > cut.len() / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end())
}

/// Whitespace runs (newlines included) as single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
