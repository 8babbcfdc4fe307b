//! Where the CLI's output goes and how it is shaped for it: the terminal's width and
//! colour, full text for pipes, and writes that treat a closed stdout or stderr as the
//! normal end of the reader's interest (`cairn doctor 2>&1 | head -1`), never a panic.

use std::io::{IsTerminal, Write};

use cairn_core::recall::snippet::render_marks;

/// Like `eprintln!`, but a closed stderr is not a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use note;

/// Like `println!`, but a closed stdout is not a panic (the line is simply not read).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say;

/// Writes to stdout; a closed pipe (`| head`) ends quietly.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// The width to fit on a terminal; `None` when stdout is not one (a pipe or a file gets
/// every line whole). `COLUMNS` wins when set, then the terminal's own size, else 80.
pub fn width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    Some(columns.or_else(window_columns).unwrap_or(80))
}

/// The terminal's width as the kernel knows it.
fn window_columns() -> Option<usize> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// Colour (bold matches) only on a terminal, and not when `NO_COLOR` is set to anything.
pub fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A snippet's match marks as bold on a colour terminal, and as nothing elsewhere.
pub fn highlight(marked: &str, color: bool) -> String {
    if color {
        render_marks(marked, "\x1b[1m", "\x1b[22m")
    } else {
        render_marks(marked, "", "")
    }
}

/// Visible characters of a marked text (marks take no room).
pub fn visible_len(marked: &str) -> usize {
    marked
        .chars()
        .filter(|c| !matches!(c, '\u{2}' | '\u{3}'))
        .count()
}

/// A marked text cut to at most `max` visible characters, ending in `…` when cut.
pub fn fit(marked: &str, max: usize) -> String {
    if visible_len(marked) <= max {
        return marked.to_string();
    }
    let mut out = String::new();
    let mut seen = 0;
    for c in marked.chars() {
        let mark = matches!(c, '\u{2}' | '\u{3}');
        if !mark {
            if seen + 1 >= max {
                break;
            }
            seen += 1;
        }
        out.push(c);
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_count_visible_characters_only() {
        assert_eq!(fit("abc", 5), "abc");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("a \u{2}bcd\u{3}ef", 4), "a \u{2}b…");
        assert_eq!(highlight(&fit("a \u{2}bcd\u{3}ef", 4), false), "a b…");
        assert_eq!(highlight("a \u{2}b\u{3} c", true), "a \x1b[1mb\x1b[22m c");
        assert_eq!(visible_len("\u{2}é\u{3}"), 1);
    }
}
