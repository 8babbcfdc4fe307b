//! What a hit shows: FTS5 snippets with the matched words marked, and the small text
//! helpers (first line as a title, shortened text, one line) that search, the timeline,
//! the context block and the MCP server share. Reads only.
//!
//! The marks are two control characters that stored text does not use ([`HIGHLIGHT_OPEN`],
//! [`HIGHLIGHT_CLOSE`]), never printed as they are: a reader turns them into what its
//! output wants ([`render_marks`]: bold on a terminal, `**` for a model, nothing in a
//! pipe) or into plain text and match offsets ([`plain_and_matches`], for JSON).

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use crate::error::Result;
use crate::memory::kind::Kind;
use crate::recall::sql::table;

/// Mark put before a matched word in snippets (STX, `char(2)` in SQL).
pub const HIGHLIGHT_OPEN: &str = "\u{2}";
/// Mark put after a matched word in snippets (ETX, `char(3)` in SQL).
pub const HIGHLIGHT_CLOSE: &str = "\u{3}";
/// Longest title shown for a summary or prompt (its first line, shortened).
const TITLE_CHARS: usize = 100;

/// A hit's best snippet and its body column's snippet.
pub(super) type SnippetPair = (Option<String>, Option<String>);

/// The best snippet and the body-column snippet of each id, in one full-text query of
/// the kind's index, or of `copy`, a scratch table holding the rows (`rank::Copies`: the
/// same columns, the project's key left empty, which no query's words match, so the same
/// snippets), made from the columns a person reads (not `pieces_text`): the rowid range
/// of the ids bounds the walk, and `+rowid IN (…)` (not usable
/// as an index) keeps snippets from being made for rows in between.
pub(super) fn snippets_of(
    conn: &Connection,
    kind: Kind,
    fts_match: &str,
    ids: &[i64],
    copy: Option<&str>,
) -> Result<Vec<(i64, SnippetPair)>> {
    let (Some(lo), Some(hi)) = (ids.iter().min(), ids.iter().max()) else {
        return Ok(Vec::new());
    };
    let t = table(kind);
    let (fts, from) = match copy {
        Some(c) => (c, format!("temp.{c}")),
        None => (t.fts, t.fts.to_string()),
    };
    let body = match t.body_column {
        Some(col) => {
            format!("snippet({fts}, {col}, char(2), char(3), '…', 12)")
        }
        None => "NULL".into(),
    };
    let marks: Vec<String> = (0..ids.len()).map(|i| format!("?{}", i + 4)).collect();
    let sql = format!(
        "SELECT rowid, snippet({fts}, -1, char(2), char(3), '…', 12), {body}
         FROM {from} WHERE {fts} MATCH ?1 AND rowid >= ?2 AND rowid <= ?3 AND +rowid IN ({})",
        marks.join(", ")
    );
    // A row matched only by the pieces of its code words gets no snippet here (its plain
    // text is shown instead).
    let mut args: Vec<Value> = vec![
        Value::Text(format!("{} : ({fts_match})", t.shown_columns())),
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

pub use crate::text::shorten;

/// Whitespace runs (newlines included) as single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A marked snippet with each match between `open` and `close` (`"**"` twice for a model,
/// terminal escapes for bold, `""` twice for plain text). A mark left open is closed at
/// the end.
pub fn render_marks(snippet: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    let mut inside = false;
    for c in snippet.chars() {
        match c {
            '\u{2}' if !inside => {
                out.push_str(open);
                inside = true;
            }
            '\u{3}' if inside => {
                out.push_str(close);
                inside = false;
            }
            '\u{2}' | '\u{3}' => {}
            c => out.push(c),
        }
    }
    if inside {
        out.push_str(close);
    }
    out
}

/// A marked snippet as plain text and the matches in it, as `[start, end)` offsets in
/// characters (Unicode scalar values) of the plain text.
pub fn plain_and_matches(snippet: &str) -> (String, Vec<(usize, usize)>) {
    let mut plain = String::with_capacity(snippet.len());
    let mut matches = Vec::new();
    let mut at = 0;
    let mut start = None;
    for c in snippet.chars() {
        match c {
            '\u{2}' => start = start.or(Some(at)),
            '\u{3}' => {
                if let Some(s) = start.take()
                    && at > s
                {
                    matches.push((s, at));
                }
            }
            c => {
                plain.push(c);
                at += 1;
            }
        }
    }
    if let Some(s) = start
        && at > s
    {
        matches.push((s, at));
    }
    (plain, matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_first_lines_and_text_is_shortened_at_words() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("one two three four", 10), "one two…");
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(short_title("first line\nsecond"), "first line");
    }

    #[test]
    fn marks_render_as_asked_and_as_offsets() {
        let s = "a \u{2}lease\u{3} is \u{2}rescued\u{3} (**not** markdown) \u{2}é";
        assert_eq!(
            render_marks(s, "**", "**"),
            "a **lease** is **rescued** (**not** markdown) **é**"
        );
        assert_eq!(
            render_marks(s, "", ""),
            "a lease is rescued (**not** markdown) é"
        );
        let (plain, matches) = plain_and_matches(s);
        assert_eq!(plain, "a lease is rescued (**not** markdown) é");
        assert_eq!(matches, vec![(2, 7), (11, 18), (38, 39)]);
        let chars: Vec<char> = plain.chars().collect();
        assert_eq!(chars[2..7].iter().collect::<String>(), "lease");
        assert_eq!(plain_and_matches("\u{3}x\u{2}\u{3}"), ("x".into(), vec![]));
    }
}
