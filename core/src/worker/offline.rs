//! The offline provider: a deterministic extractor that turns tool events into
//! observations and a turn into a summary, with no model at all. It is what a fresh
//! install uses when no API key is configured, so cairn works out of the box.
//!
//! Rules: edits (`Edit`, `MultiEdit`, `Write`, `NotebookEdit`) become one `change` per
//! file, titled by what changed where the edit shows it (the function or type it touched);
//! a failed tool call becomes a `discovery` titled by its purpose (a Bash call's
//! `description`) and, for a test run, the test that failed and its message; a `git
//! commit` becomes a `change` titled by its message; files read are attached to the
//! batch's changes, or become one `discovery` listing them when nothing was changed; other
//! successful calls (listings, searches, commands) are routine and skipped. Concepts come
//! from the event (`what-changed`, `problem-solution`, `gotcha`), never invented.
//!
//! Invariants: pure and deterministic (the same events give the same observations, so a
//! replay stores nothing new); a title never repeats its subtitle.

use serde_json::Value;

use crate::memory::rows::ObservationContent;
use crate::queue::payload::ToolEvent;
use crate::text;
use crate::worker::parse::{ParsedObservation, ParsedSummary};
use crate::worker::prompt::cap;

/// Tools that modify files, and the input field naming the file.
const EDIT_TOOLS: &[(&str, &str)] = &[
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("Write", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// The file a tool call modified, if it is an edit that succeeded.
pub fn edited_path(ev: &ToolEvent) -> Option<String> {
    if ev.failed || ev.is_interrupt {
        return None;
    }
    let field = EDIT_TOOLS
        .iter()
        .find(|(tool, _)| *tool == ev.tool_name)
        .map(|(_, f)| *f)?;
    path_field(&ev.tool_input, field)
}

/// The file a `Read` call read.
pub fn read_path(ev: &ToolEvent) -> Option<String> {
    if ev.tool_name != "Read" || ev.failed {
        return None;
    }
    path_field(&ev.tool_input, "file_path")
}

fn path_field(input: &Value, field: &str) -> Option<String> {
    input
        .get(field)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
}

/// Observations for a batch of tool events.
pub fn observations(events: &[ToolEvent]) -> Vec<ParsedObservation> {
    let mut edits: Vec<(String, Vec<&ToolEvent>)> = Vec::new();
    let mut reads: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for ev in events {
        if let Some(path) = edited_path(ev) {
            match edits.iter_mut().find(|(p, _)| *p == path) {
                Some((_, evs)) => evs.push(ev),
                None => edits.push((path, vec![ev])),
            }
        } else if let Some(path) = read_path(ev) {
            if !reads.contains(&path) {
                reads.push(path);
            }
        } else if ev.failed && !ev.is_interrupt {
            out.push(failure(ev));
        } else if let Some(c) = commit(ev) {
            out.push(c);
        }
    }
    // Files read go with the changes; reads alone say nothing worth a memory.
    let mut changes: Vec<ParsedObservation> = edits
        .into_iter()
        .map(|(path, evs)| change(&path, &evs, &reads))
        .collect();
    changes.append(&mut out);
    for o in &mut changes {
        // A subtitle the title already says is noise.
        let c = &mut o.content;
        if !c.subtitle.trim().is_empty() && c.title.contains(c.subtitle.trim()) {
            c.subtitle.clear();
        }
    }
    changes
}

fn change(path: &str, evs: &[&ToolEvent], reads: &[String]) -> ParsedObservation {
    let name = file_name(path);
    let facts: Vec<String> = evs
        .iter()
        .filter_map(|e| describe_edit(e))
        .take(5)
        .collect();
    let writes_only = evs.iter().all(|e| e.tool_name == "Write");
    let symbols: Vec<(String, Touch)> =
        evs.iter()
            .flat_map(|e| touched(e))
            .fold(Vec::new(), |mut acc, (sym, how)| {
                if !acc.iter().any(|(s, _)| *s == sym) {
                    acc.push((sym, how));
                }
                acc
            });
    let title = if writes_only {
        let lines = evs
            .last()
            .and_then(|e| e.tool_input.get("content"))
            .and_then(Value::as_str)
            .map(|c| c.lines().count());
        match lines {
            Some(n) => format!("Wrote {name} ({n} lines)"),
            None => format!("Wrote {name}"),
        }
    } else {
        match symbols.as_slice() {
            [] => evs
                .iter()
                .find_map(|e| edit_title(e, name))
                .unwrap_or_else(|| format!("Edited {name}")),
            [(sym, how)] => format!("{} {sym} in {name}", how.verb()),
            [(a, _), (b, _)] => format!("Changed {a} and {b} in {name}"),
            [(a, _), rest @ ..] => format!("Changed {a} and {} more in {name}", rest.len()),
        }
    };
    let concepts = vec!["what-changed".to_string()];
    ParsedObservation {
        kind: if symbols.iter().any(|(_, t)| *t == Touch::Added) && !writes_only {
            "feature".into()
        } else {
            "change".into()
        },
        content: ObservationContent {
            title: text::shorten(&title, 80),
            subtitle: path.to_string(),
            facts,
            concepts,
            files_read: reads.to_vec(),
            files_modified: vec![path.to_string()],
            ..Default::default()
        },
    }
}

/// A title for an `Edit` that touched no definition: the line it added, removed or
/// changed, each side shortened to fit.
fn edit_title(ev: &ToolEvent, name: &str) -> Option<String> {
    if ev.tool_name == "MultiEdit" {
        let n = ev.tool_input.get("edits").and_then(Value::as_array)?.len();
        return Some(format!("Made {n} edits to {name}"));
    }
    if ev.tool_name != "Edit" {
        return None;
    }
    let old = ev.tool_input.get("old_string").and_then(Value::as_str)?;
    let new = ev.tool_input.get("new_string").and_then(Value::as_str)?;
    let lines = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let (old, new) = (lines(old), lines(new));
    let added: Vec<&String> = new.iter().filter(|l| !old.contains(l)).collect();
    let removed: Vec<&String> = old.iter().filter(|l| !new.contains(l)).collect();
    Some(match (added.first(), removed.first()) {
        (Some(a), None) => format!("Added \"{}\" to {name}", short(a, 50)),
        (None, Some(r)) => format!("Removed \"{}\" from {name}", short(r, 45)),
        (Some(a), Some(r)) => {
            // Both sides in 80 characters, the shorter one whole when it can be.
            let room = 80usize.saturating_sub(20 + name.chars().count()).max(20);
            let (rl, al) = (r.chars().count(), a.chars().count());
            let (rn, an) = if rl + al <= room {
                (rl, al)
            } else if rl.min(al) <= room / 2 {
                if rl <= al {
                    (rl, room - rl)
                } else {
                    (room - al, al)
                }
            } else {
                (room / 2, room / 2)
            };
            format!(
                "Changed \"{}\" to \"{}\" in {name}",
                short(r, rn),
                short(a, an)
            )
        }
        (None, None) => return None,
    })
}

/// `s` cut to `n` characters, ending in "…" when cut.
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    format!("{}…", text::head(s, n.saturating_sub(1), text::Unit::Chars))
}

/// How an edit touched a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Added,
    Removed,
    Changed,
}

impl Touch {
    fn verb(self) -> &'static str {
        match self {
            Touch::Added => "Added",
            Touch::Removed => "Removed",
            Touch::Changed => "Changed",
        }
    }
}

/// The definitions (functions, methods, types) an `Edit` touched: those named on a line of
/// its old or new text, in order, marked added (only in the new text), removed (only in the
/// old) or changed.
fn touched(ev: &ToolEvent) -> Vec<(String, Touch)> {
    let text = |k: &str| {
        ev.tool_input
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (old, new) = match ev.tool_name.as_str() {
        "Edit" => (text("old_string"), text("new_string")),
        "MultiEdit" => {
            let all = |k: &str| {
                ev.tool_input
                    .get("edits")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.get(k).and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            (all("old_string"), all("new_string"))
        }
        _ => return Vec::new(),
    };
    let olds: Vec<String> = old.lines().filter_map(definition).collect();
    let news: Vec<String> = new.lines().filter_map(definition).collect();
    let mut out: Vec<(String, Touch)> = Vec::new();
    for n in &news {
        let how = if olds.contains(n) {
            Touch::Changed
        } else {
            Touch::Added
        };
        out.push((n.clone(), how));
    }
    for o in &olds {
        if !news.contains(o) {
            out.push((o.clone(), Touch::Removed));
        }
    }
    out
}

/// The name a line defines, shown as `name()` for functions and `Name` for types: Rust,
/// Python, JavaScript/TypeScript, Go, Ruby, Java-like languages and shell functions.
fn definition(line: &str) -> Option<String> {
    let t = line.trim_start();
    let mut words = t.split(|c: char| {
        c.is_whitespace() || c == '(' || c == '<' || c == ':' || c == '{' || c == '['
    });
    let mut prev = "";
    for w in words.by_ref().take(8) {
        let kind = match prev {
            "fn" | "def" | "func" | "function" => Some(true),
            "struct" | "enum" | "trait" | "class" | "interface" | "type" | "impl" => Some(false),
            _ => None,
        };
        if let Some(is_fn) = kind {
            let name: String = w
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            if name.is_empty() || name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                return None;
            }
            return Some(if is_fn { format!("{name}()") } else { name });
        }
        if !matches!(
            w,
            "pub"
                | "crate)"
                | "super)"
                | "async"
                | "export"
                | "default"
                | "static"
                | "unsafe"
                | "const"
                | "private"
                | "public"
                | "protected"
                | "abstract"
                | "final"
                | "fn"
                | "def"
                | "func"
                | "function"
                | "struct"
                | "enum"
                | "trait"
                | "class"
                | "interface"
                | "type"
                | "impl"
                | ""
        ) {
            return None;
        }
        if !w.is_empty() {
            prev = w;
        }
    }
    None
}

/// A short fact about one edit: the replaced text's first line, or the written size.
fn describe_edit(ev: &ToolEvent) -> Option<String> {
    let input = &ev.tool_input;
    let first_line = |s: &str| cap(s.lines().next().unwrap_or("").trim(), 120);
    match ev.tool_name.as_str() {
        "Write" => input
            .get("content")
            .and_then(Value::as_str)
            .map(|c| format!("Wrote {} lines", c.lines().count())),
        "Edit" => {
            let old = input.get("old_string").and_then(Value::as_str)?;
            let new = input.get("new_string").and_then(Value::as_str)?;
            // Show the first line that differs, so an edit that keeps its first line (code
            // added below it) does not read "Replaced X with X".
            let skip = old
                .lines()
                .zip(new.lines())
                .take_while(|(a, b)| a.trim() == b.trim())
                .count();
            let nth = |s: &str| cap(s.lines().nth(skip).unwrap_or("").trim(), 120);
            Some(if skip == 0 {
                format!(
                    "Replaced \"{}\" with \"{}\"",
                    first_line(old),
                    first_line(new)
                )
            } else if old.lines().count() == skip {
                format!("Added \"{}\" after \"{}\"", nth(new), first_line(old))
            } else {
                format!("Replaced \"{}\" with \"{}\"", nth(old), nth(new))
            })
        }
        "MultiEdit" => input
            .get("edits")
            .and_then(Value::as_array)
            .map(|e| format!("{} edits", e.len())),
        _ => None,
    }
}

fn failure(ev: &ToolEvent) -> ParsedObservation {
    let input = |k: &str| {
        ev.tool_input
            .get(k)
            .and_then(Value::as_str)
            .map(|v| v.lines().next().unwrap_or("").trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let command = input("command");
    // The call's purpose, as the agent stated it, reads better than the command.
    let purpose = input("description");
    let error = ev.error.clone().unwrap_or_default();
    let test = failed_test(&error);
    let message = error_message(&error);
    let what = purpose
        .clone()
        .or_else(|| command.as_deref().map(|c| text::shorten(c, 60)))
        .or_else(|| input("file_path").map(|p| format!("{} {}", ev.tool_name, file_name(&p))))
        .unwrap_or_else(|| ev.tool_name.clone());
    let title = match (&test, &message) {
        (Some(t), Some(m)) => format!("{t} failed: {m}"),
        (Some(t), None) => format!("{t} failed ({what})"),
        (None, Some(m)) => format!("{what} failed: {m}"),
        (None, None) => format!("{what} failed"),
    };
    let mut facts = Vec::new();
    if let Some(c) = &command {
        facts.push(format!("Command: {}", cap(c, 200)));
    }
    if let Some(t) = &test {
        facts.push(format!("Failing test: {t}"));
    }
    if !error.trim().is_empty() {
        facts.push(cap(error.trim(), 500));
    }
    let mut concepts = vec!["problem-solution".to_string()];
    if test.is_none() {
        concepts.push("gotcha".into());
    }
    ParsedObservation {
        kind: if test.is_some() {
            "bugfix"
        } else {
            "discovery"
        }
        .into(),
        content: ObservationContent {
            title: text::shorten(&title, 80),
            subtitle: cap(
                error
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .unwrap_or(""),
                200,
            ),
            facts,
            concepts,
            ..Default::default()
        },
    }
}

/// The name of the first test a test run's output says failed: pytest (`FAILED
/// path::test - …`), cargo (`test name ... FAILED`), Go (`--- FAIL: Name`), Jest (`● Suite ›
/// name`).
fn failed_test(output: &str) -> Option<String> {
    for line in output.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("FAILED ") {
            let id = rest.split(" - ").next().unwrap_or(rest).trim();
            return Some(id.rsplit("::").next().unwrap_or(id).to_string());
        }
        if let Some(rest) = line.strip_prefix("test ")
            && let Some(name) = rest.strip_suffix(" ... FAILED")
        {
            return Some(name.rsplit("::").next().unwrap_or(name).trim().to_string());
        }
        if let Some(rest) = line.strip_prefix("--- FAIL: ") {
            return rest.split_whitespace().next().map(String::from);
        }
        if let Some(rest) = line.strip_prefix("● ")
            && !rest.starts_with("Test suite failed")
        {
            return Some(rest.rsplit(" › ").next().unwrap_or(rest).trim().to_string());
        }
    }
    None
}

/// The line of an error output that says what went wrong: an assertion, an exception, a
/// panic or an `error:` line; else the first line that is not an exit code.
fn error_message(output: &str) -> Option<String> {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let telling = |l: &str| {
        let low = l.to_ascii_lowercase();
        low.starts_with("error")
            || low.contains("error:")
            || low.contains("assert")
            || low.contains("panicked at")
            || low.contains("exception")
            || low.contains("expected")
            || low.contains("no such file")
            || low.contains("not found")
            || low.contains("permission denied")
    };
    // pytest names the message on its summary line, and marks it with `E` above.
    let summary = lines.iter().find_map(|l| {
        l.strip_prefix("FAILED ")
            .and_then(|r| r.split_once(" - "))
            .map(|(_, m)| m)
    });
    // Rust prints a panic's message on the line after "panicked at <place>:".
    let panic = lines
        .iter()
        .position(|l| l.contains("panicked at") && l.ends_with(':'))
        .and_then(|i| lines.get(i + 1).copied());
    let pick = summary
        .or_else(|| lines.iter().find(|l| l.starts_with("E ")).copied())
        .or(panic)
        .or_else(|| {
            lines
                .iter()
                .find(|l| {
                    telling(l)
                        && !l.starts_with("FAILED ")
                        && !l.starts_with("test ")
                        && !l.starts_with('>')
                })
                .copied()
        })
        .or_else(|| lines.iter().find(|l| !l.starts_with("Exit code")).copied())?;
    let m = pick.trim_start_matches("E ").trim();
    Some(text::shorten(m, 60))
}

/// A successful `git commit -m "…"`: a change titled by its message.
fn commit(ev: &ToolEvent) -> Option<ParsedObservation> {
    if ev.tool_name != "Bash" || ev.failed {
        return None;
    }
    let cmd = ev.tool_input.get("command").and_then(Value::as_str)?;
    let at = cmd.find("git commit")?;
    let rest = &cmd[at..];
    let m = rest.find(" -m ").or_else(|| rest.find(" -am "))?;
    let arg = rest[m..]
        .trim_start_matches([' ', '-', 'a', 'm'])
        .trim_start();
    let message = match arg.chars().next()? {
        q @ ('"' | '\'') => arg[1..].split(q).next().unwrap_or(""),
        _ => arg.split_whitespace().next().unwrap_or(""),
    };
    let first = message.lines().next().unwrap_or("").trim();
    if first.is_empty() || first.starts_with("$(") {
        return None;
    }
    Some(ParsedObservation {
        kind: "change".into(),
        content: ObservationContent {
            title: text::shorten(&format!("Committed: {first}"), 80),
            facts: vec![cap(message.trim(), 500)],
            concepts: vec!["what-changed".into()],
            ..Default::default()
        },
    })
}

fn file_name(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(path)
}

/// A turn summary from the request, the turn's observation titles and files, and the
/// assistant's last message.
pub fn summary(
    request: &str,
    titles: &[String],
    files_read: &[String],
    files_edited: &[String],
    last_assistant_message: &str,
) -> ParsedSummary {
    let mut investigated = Vec::new();
    if !files_read.is_empty() {
        investigated.push(format!("Read {}", files_read.join(", ")));
    }
    let mut changes = Vec::new();
    if !files_edited.is_empty() {
        changes.push(format!("Changed {}", files_edited.join(", ")));
    }
    if !titles.is_empty() {
        changes.push(titles.join("; "));
    }
    let changes = changes.join(". ");
    // The assistant's closing message is its own account of what the turn achieved, the
    // best "completed" there is without a model; the mechanical list of changes then goes
    // to the notes. Without a message, the list is all we know.
    let message = last_assistant_message.trim();
    let (completed, notes) = if message.is_empty() {
        (changes.as_str(), "")
    } else {
        (message, changes.as_str())
    };
    ParsedSummary {
        request: cap(request.trim(), 600),
        investigated: cap(&investigated.join(". "), 1_000),
        learned: String::new(),
        completed: cap(completed, 1_500),
        next_steps: String::new(),
        notes: cap(notes, 1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(tool: &str, input: Value) -> ToolEvent {
        ToolEvent {
            tool_name: tool.into(),
            tool_input: input,
            ..Default::default()
        }
    }

    /// Compares (type, title, files_modified) of the extracted observations.
    fn check(events: &[ToolEvent], expected: &[(&str, &str, &[&str])]) {
        let got: Vec<(String, String, Vec<String>)> = observations(events)
            .into_iter()
            .map(|o| (o.kind, o.content.title, o.content.files_modified))
            .collect();
        let want: Vec<(String, String, Vec<String>)> = expected
            .iter()
            .map(|(k, t, f)| {
                (
                    k.to_string(),
                    t.to_string(),
                    f.iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn edits_become_changes_per_file() {
        check(
            &[
                ev(
                    "Edit",
                    json!({"file_path": "/p/src/a.rs", "old_string": "x", "new_string": "y"}),
                ),
                ev("Write", json!({"file_path": "/p/b.txt", "content": "1\n2"})),
                ev(
                    "Edit",
                    json!({"file_path": "/p/src/a.rs", "old_string": "y", "new_string": "z"}),
                ),
                ev("NotebookEdit", json!({"notebook_path": "/p/n.ipynb"})),
            ],
            &[
                ("change", "Changed \"x\" to \"y\" in a.rs", &["/p/src/a.rs"]),
                ("change", "Wrote b.txt (2 lines)", &["/p/b.txt"]),
                ("change", "Edited n.ipynb", &["/p/n.ipynb"]),
            ],
        );
        let o = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.rs", "old_string": "fn a()\nmore", "new_string": "fn b()"}),
        )]);
        assert_eq!(
            o[0].content.facts,
            vec!["Replaced \"fn a()\" with \"fn b()\""]
        );
        let added = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.py", "old_string": "@app.post('/login')", "new_string": "@app.post('/login')\n@rate_limited(5)"}),
        )]);
        assert_eq!(
            added[0].content.facts,
            vec!["Added \"@rate_limited(5)\" after \"@app.post('/login')\""]
        );
        let later = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.py", "old_string": "def f():\n    return 1", "new_string": "def f():\n    return 2"}),
        )]);
        assert_eq!(
            later[0].content.facts,
            vec!["Replaced \"return 1\" with \"return 2\""]
        );
    }

    #[test]
    fn failures_become_discoveries_and_routine_calls_are_skipped() {
        let failed = ToolEvent {
            failed: true,
            error: Some("Exit code 3\nfailing".into()),
            ..ev("Bash", json!({"command": "echo failing >&2; exit 3"}))
        };
        check(
            &[
                ev("Bash", json!({"command": "ls"})),
                ev("Grep", json!({"pattern": "x"})),
                failed.clone(),
            ],
            &[("discovery", "echo failing >&2; exit 3 failed: failing", &[])],
        );
        assert_eq!(observations(&[failed])[0].content.subtitle, "Exit code 3");
        // A long message is cut once, at a word, never inside an earlier cut.
        let long = ToolEvent {
            failed: true,
            error: Some("test login_unicode_password ... FAILED\nthread panicked at src/auth.rs:42: byte index 3 is not a char boundary; it is inside 'é' (bytes 2..4) of `pässword`".into()),
            ..ev("Bash", json!({"command": "cargo test"}))
        };
        let title = &observations(&[long])[0].content.title;
        assert!(
            title.starts_with("login_unicode_password failed: "),
            "{title}"
        );
        assert!(
            title.ends_with('…') && title.chars().count() <= 80,
            "{title}"
        );
        assert!(!title.contains("cut]"), "{title}");
        let interrupted = ToolEvent {
            failed: true,
            is_interrupt: true,
            ..ev("Bash", json!({"command": "sleep 9"}))
        };
        check(&[interrupted], &[]);
    }

    /// (title, subtitle, type, concepts) of the one observation `event` gives.
    fn titled(event: ToolEvent, title: &str, subtitle: &str, kind: &str, concepts: &[&str]) {
        let o = observations(std::slice::from_ref(&event));
        assert_eq!(o.len(), 1, "{event:?}: {o:?}");
        let (o, got_kind) = (&o[0].content, &o[0].kind);
        assert_eq!(
            (o.title.as_str(), o.subtitle.as_str(), got_kind.as_str()),
            (title, subtitle, kind),
            "{event:?}"
        );
        assert_eq!(o.concepts, concepts, "{event:?}");
        assert!(o.subtitle.is_empty() || !o.title.contains(&o.subtitle));
    }

    fn failed(tool: &str, input: Value, error: &str) -> ToolEvent {
        ToolEvent {
            failed: true,
            error: Some(error.into()),
            ..ev(tool, input)
        }
    }

    #[test]
    fn titles_say_what_changed_and_why() {
        let edit = |path: &str, old: &str, new: &str| {
            ev(
                "Edit",
                json!({"file_path": path, "old_string": old, "new_string": new}),
            )
        };
        titled(
            edit(
                "/app/login.py",
                "@app.post('/login')",
                "@app.post('/login')\n@rate_limited(limit=5, window=60, key=client_ip)",
            ),
            "Added \"@rate_limited(limit=5, window=60, key=client_ip)\" to login.py",
            "/app/login.py",
            "change",
            &["what-changed"],
        );
        titled(
            edit(
                "/app/session.py",
                "    expires_at = now + ttl - 1",
                "    expires_at = now + ttl",
            ),
            "Changed \"expires_at = now + ttl - 1\" to \"expires_at = now + ttl\" in session.py",
            "/app/session.py",
            "change",
            &["what-changed"],
        );
        titled(
            edit(
                "/app/login.py",
                "def login(user):\n    return check(user)",
                "def login(user):\n    limit(user)\n    return check(user)",
            ),
            "Changed login() in login.py",
            "/app/login.py",
            "change",
            &["what-changed"],
        );
        titled(
            edit(
                "/app/src/lib.rs",
                "}\n",
                "}\n\npub(crate) fn rate_limit(n: u32) -> bool {\n    n < 5\n}\n",
            ),
            "Added rate_limit() in lib.rs",
            "/app/src/lib.rs",
            "feature",
            &["what-changed"],
        );
        titled(
            edit("/app/a.ts", "export class Old {}\n", ""),
            "Removed Old in a.ts",
            "/app/a.ts",
            "change",
            &["what-changed"],
        );
        titled(
            edit(
                "/app/m.go",
                "func A() {}\nfunc B() {}",
                "func A() { x() }\nfunc B() { y() }",
            ),
            "Changed A() and B() in m.go",
            "/app/m.go",
            "change",
            &["what-changed"],
        );
        // The Bash call's stated purpose, the failing test and its message.
        titled(
            failed(
                "Bash",
                json!({"command": "pytest -q tests/test_login.py", "description": "Run the login tests"}),
                "Exit code 1\n.F.\n    def test_rate_limit():\n>       assert resp.status == 429\nE       assert 200 == 429\nFAILED tests/test_login.py::test_rate_limit - assert 200 == 429\n1 failed, 2 passed",
            ),
            "test_rate_limit failed: assert 200 == 429",
            "Exit code 1",
            "bugfix",
            &["problem-solution"],
        );
        titled(
            failed(
                "Bash",
                json!({"command": "cargo test", "description": "Run the tests"}),
                "Exit code 101\ntest store::db::tests::migrates ... FAILED\nthread 'store::db::tests::migrates' panicked at core/src/store/db.rs:9:5:\nassertion failed: ok",
            ),
            "migrates failed: assertion failed: ok",
            "Exit code 101",
            "bugfix",
            &["problem-solution"],
        );
        titled(
            failed(
                "Bash",
                json!({"command": "npm run build", "description": "Build the web app"}),
                "Exit code 2\nsrc/app.ts(3,1): error TS2304: Cannot find name 'foo'.",
            ),
            "Build the web app failed: src/app.ts(3,1): error TS2304: Cannot find name 'foo'.",
            "Exit code 2",
            "discovery",
            &["problem-solution", "gotcha"],
        );
        titled(
            failed(
                "Read",
                json!({"file_path": "/app/missing.txt"}),
                "File does not exist.",
            ),
            "Read missing.txt failed: File does not exist.",
            "",
            "discovery",
            &["problem-solution", "gotcha"],
        );
        titled(
            ev(
                "Bash",
                json!({"command": "git add -A && git commit -m \"Rate-limit logins to 5 a minute\"", "description": "Commit"}),
            ),
            "Committed: Rate-limit logins to 5 a minute",
            "",
            "change",
            &["what-changed"],
        );
    }

    #[test]
    fn reads_attach_to_changes_and_alone_are_routine() {
        let read = ev("Read", json!({"file_path": "/p/README.md"}));
        let o = observations(&[read.clone(), ev("Write", json!({"file_path": "/p/x"}))]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].content.files_read, vec!["/p/README.md"]);
        assert!(observations(&[read.clone(), read]).is_empty());
        assert!(observations(&[]).is_empty());
    }

    #[test]
    fn deterministic() {
        let evs = [
            ev(
                "Edit",
                json!({"file_path": "/a", "old_string": "1", "new_string": "2"}),
            ),
            ev("Read", json!({"file_path": "/b"})),
        ];
        assert_eq!(observations(&evs), observations(&evs));
    }

    #[test]
    fn summarizes_a_turn() {
        let s = summary(
            "please do the full tour",
            &["Wrote out.txt".into()],
            &["/p/a".into()],
            &["/p/out.txt".into()],
            "All done.",
        );
        assert_eq!(s.request, "please do the full tour");
        assert_eq!(s.investigated, "Read /p/a");
        assert_eq!(s.completed, "All done.");
        assert_eq!(s.notes, "Changed /p/out.txt. Wrote out.txt");
        let silent = summary(
            "q",
            &["Wrote out.txt".into()],
            &[],
            &["/p/out.txt".into()],
            "  ",
        );
        assert_eq!(silent.completed, "Changed /p/out.txt. Wrote out.txt");
        assert_eq!(silent.notes, "");
    }
}
