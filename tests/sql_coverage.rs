//! Checks that every SQL statement written in `core` was run by some test.
//!
//! ```sh
//! trace=$(mktemp -d)
//! CAIRN_SQL_TRACE="$trace" cargo test --workspace
//! cargo run -p cairn-core --example sql_coverage -- "$trace"
//! ```
//!
//! With `CAIRN_SQL_TRACE` set, every connection cairn opens (in the tests and in the real
//! binaries they spawn) logs the text of each statement it runs (`core::db::trace_if_asked`).
//! This program reads those logs, then every string literal in `core/src` (outside the
//! `tests` modules) that starts like a statement (`SELECT`, `INSERT`, `UPDATE`, ...): each
//! piece of it between format placeholders and `;` must appear in some logged statement.
//! Every trigger the migrations create must have fired too. It lists what never ran, with
//! file and line, and exits 1 if anything did not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How a statement written in `core` starts (SQL here is written in capitals).
const SQL_STARTS: &[&str] = &[
    "SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH ", "CREATE ", "DROP ", "PRAGMA ", "REPLACE ",
    "ALTER ", "ANALYZE", "VACUUM", "ATTACH ", "DETACH ",
];

/// Pieces shorter than this (a `)`, `AND id = ?2`) say nothing about which statement ran.
const MIN_PIECE: usize = 12;

fn main() -> ExitCode {
    let Some(trace_dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: sql_coverage TRACE_DIR (the directory CAIRN_SQL_TRACE named)");
        return ExitCode::from(2);
    };
    let ran = match read_trace(&trace_dir) {
        Ok(lines) if !lines.is_empty() => lines,
        Ok(_) => {
            eprintln!(
                "no statements logged in {}: run the tests with CAIRN_SQL_TRACE set to it",
                trace_dir.display()
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cannot read {}: {e}", trace_dir.display());
            return ExitCode::from(2);
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    rust_files(&root.join("src"), &mut sources);
    sources.sort();

    let mut checked = 0;
    let mut missing = Vec::new();
    for path in &sources {
        // PostgreSQL's statements (sync's server side) are not SQLite's: the trace cannot
        // see them; `tests/e2e/sync.rs` runs each against a real server.
        if path.ends_with("sync/server.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read source");
        let shown = path
            .strip_prefix(root.parent().unwrap_or(root))
            .unwrap_or(path);
        for (line, literal) in string_literals(without_tests(&text)) {
            let sql = collapse(&literal);
            if !SQL_STARTS.iter().any(|s| sql.starts_with(s)) {
                continue;
            }
            checked += 1;
            let pieces = pieces(&sql);
            if let Some(piece) = pieces.iter().find(|p| !ran.iter().any(|r| r.contains(*p))) {
                let shown_piece: String = piece.chars().take(160).collect();
                missing.push(format!(
                    "{}:{line}: never ran: {shown_piece}{}",
                    shown.display(),
                    if shown_piece.len() < piece.len() {
                        " …"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    let mut triggers = 0;
    for trigger in migration_triggers(&root.join("../migrations")) {
        triggers += 1;
        if !ran.contains(&format!("-- TRIGGER {trigger}")) {
            missing.push(format!("migrations: trigger {trigger} never fired"));
        }
    }
    println!(
        "{} of {checked} statements in core ran, {triggers} triggers checked ({} statement texts logged)",
        checked
            - missing
                .iter()
                .filter(|m| !m.starts_with("migrations"))
                .count(),
        ran.len()
    );
    if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        for m in &missing {
            println!("{m}");
        }
        ExitCode::FAILURE
    }
}

/// Every distinct line of every `*.sql` log in `dir`.
fn read_trace(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut lines = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "sql") {
            lines.extend(std::fs::read_to_string(&path)?.lines().map(str::to_string));
        }
    }
    Ok(lines)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read core/src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file up to its unit-test module (statements written only for tests are not
/// cairn's).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |end| &text[..end])
}

/// Whitespace runs as one space, trimmed: the form the trace logs statements in.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The parts of a statement's text that are fixed: split at format placeholders (`{}`,
/// `{max_size}`, `{SET}`) and at `;` (a batch runs, and is logged, one statement at a time).
fn pieces(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = sql.chars().peekable();
    let mut flush = |cur: &mut String| {
        let piece = cur.trim().to_string();
        if piece.len() >= MIN_PIECE {
            out.push(piece);
        }
        cur.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                cur.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                cur.push('}');
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                flush(&mut cur);
            }
            ';' => {
                cur.push(';');
                flush(&mut cur);
            }
            c => cur.push(c),
        }
    }
    flush(&mut cur);
    // A statement logged from a batch keeps its `;`; one prepared alone may not have it.
    for p in &mut out {
        if p.ends_with(';') {
            p.pop();
        }
    }
    out
}

/// The string literals of Rust source (plain and raw, byte strings included), decoded, with
/// the line each starts on. Comments and char literals are skipped.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    line += usize::from(b[i] == b'\n');
                    i += 1;
                }
                i += 2;
            }
            b'\'' => {
                // A char literal ('x', '\'', '\u{1F600}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 3;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if b.get(i + 1 + ch_len) == Some(&b'\'') {
                        i += 2 + ch_len;
                    } else {
                        i += 1;
                    }
                }
            }
            b'"' => {
                let (text, end, lines) = plain_string(src, i + 1);
                out.push((line, text));
                line += lines;
                i = end;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' => {
                // At the start of a word: `r"…"`, `r#"…"#`, `br"…"`, `b"…"`, or a word
                // skipped whole (so that the `r` ending `for` never starts a raw string).
                if let Some((hashes, body)) = raw_string_start(b, i) {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let end = src[body..].find(&close).map_or(b.len(), |e| body + e);
                    out.push((line, src[body..end].to_string()));
                    line += src[body..end].matches('\n').count();
                    i = end + close.len();
                } else if c == b'b' && b.get(i + 1) == Some(&b'"') {
                    let (text, end, lines) = plain_string(src, i + 2);
                    out.push((line, text));
                    line += lines;
                    i = end;
                } else {
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                        i += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// `r"`, `r#"`, `br##"` at `i`: the number of `#` and where the body starts.
fn raw_string_start(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|c| **c == b'#').count();
    j += hashes;
    (b.get(j) == Some(&b'"')).then_some((hashes, j + 1))
}

/// Decodes a plain string literal whose body starts at `start`: its text, the index after
/// the closing quote, and how many newlines it spans.
fn plain_string(src: &str, start: usize) -> (String, usize, usize) {
    let mut text = String::new();
    let mut lines = 0;
    let mut chars = src[start..].char_indices().peekable();
    while let Some((k, c)) = chars.next() {
        match c {
            '"' => return (text, start + k + 1, lines),
            '\\' => match chars.next() {
                Some((_, 'n')) => text.push('\n'),
                Some((_, 't')) => text.push('\t'),
                Some((_, '\n')) => {
                    // A line continuation: the newline and the next line's indent vanish.
                    lines += 1;
                    while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                        if chars.next().is_some_and(|(_, c)| c == '\n') {
                            lines += 1;
                        }
                    }
                }
                Some((_, other)) => text.push(other),
                None => break,
            },
            '\n' => {
                lines += 1;
                text.push('\n');
            }
            c => text.push(c),
        }
    }
    (text, src.len(), lines)
}

/// The name of every trigger the migrations create.
fn migration_triggers(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read migrations")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read migration");
        let words: Vec<&str> = text.split_whitespace().collect();
        for w in words.windows(6) {
            if w[0] == "CREATE" && w[1] == "TRIGGER" {
                let name = if w[2] == "IF" { w[5] } else { w[2] };
                out.push(name.to_string());
            }
        }
    }
    out
}
