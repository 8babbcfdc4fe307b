//! The offline provider: a deterministic extractor that turns tool events into
//! observations and a turn into a summary, with no model at all. It is what a fresh
//! install uses when no API key is configured, so cairn works out of the box.
//!
//! Rules: edits (`Edit`, `MultiEdit`, `Write`, `NotebookEdit`) become one `change` per
//! file; a failed tool call becomes a `discovery` holding the error; files read are
//! attached to the batch's changes, or become one `discovery` listing them when nothing
//! was changed; other successful calls (listings, searches, commands) are routine and
//! skipped.
//!
//! Invariant: pure and deterministic (the same events give the same observations, so a
//! replay stores nothing new).

use serde_json::Value;

use crate::queue::payload::ToolEvent;
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
        }
    }
    let mut changes: Vec<ParsedObservation> = edits
        .into_iter()
        .map(|(path, evs)| change(&path, &evs, &reads))
        .collect();
    if changes.is_empty() && !reads.is_empty() {
        let names: Vec<&str> = reads.iter().map(|p| file_name(p)).collect();
        out.push(ParsedObservation {
            kind: "discovery".into(),
            title: cap(&format!("Read {}", names.join(", ")), 80),
            facts: reads.iter().map(|p| format!("Read {p}")).collect(),
            files_read: reads.clone(),
            ..Default::default()
        });
    }
    changes.append(&mut out);
    changes
}

fn change(path: &str, evs: &[&ToolEvent], reads: &[String]) -> ParsedObservation {
    let verb = if evs.iter().all(|e| e.tool_name == "Write") {
        "Wrote"
    } else {
        "Edited"
    };
    let facts = evs
        .iter()
        .filter_map(|e| describe_edit(e))
        .take(5)
        .collect();
    ParsedObservation {
        kind: "change".into(),
        title: cap(&format!("{verb} {}", file_name(path)), 80),
        subtitle: path.to_string(),
        facts,
        files_read: reads.to_vec(),
        files_modified: vec![path.to_string()],
        ..Default::default()
    }
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
    let what = match ev.tool_input.get("command").and_then(Value::as_str) {
        Some(cmd) => cap(cmd.lines().next().unwrap_or("").trim(), 60),
        None => ev.tool_name.clone(),
    };
    let error = ev.error.clone().unwrap_or_default();
    ParsedObservation {
        kind: "discovery".into(),
        title: cap(&format!("{} failed: {what}", ev.tool_name), 80),
        subtitle: cap(error.lines().next().unwrap_or("").trim(), 200),
        facts: vec![cap(error.trim(), 500)]
            .into_iter()
            .filter(|f| !f.is_empty())
            .collect(),
        ..Default::default()
    }
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
            .map(|o| (o.kind, o.title, o.files_modified))
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
                ("change", "Edited a.rs", &["/p/src/a.rs"]),
                ("change", "Wrote b.txt", &["/p/b.txt"]),
                ("change", "Edited n.ipynb", &["/p/n.ipynb"]),
            ],
        );
        let o = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.rs", "old_string": "fn a()\nmore", "new_string": "fn b()"}),
        )]);
        assert_eq!(o[0].facts, vec!["Replaced \"fn a()\" with \"fn b()\""]);
        let added = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.py", "old_string": "@app.post('/login')", "new_string": "@app.post('/login')\n@rate_limited(5)"}),
        )]);
        assert_eq!(
            added[0].facts,
            vec!["Added \"@rate_limited(5)\" after \"@app.post('/login')\""]
        );
        let later = observations(&[ev(
            "Edit",
            json!({"file_path": "/p/a.py", "old_string": "def f():\n    return 1", "new_string": "def f():\n    return 2"}),
        )]);
        assert_eq!(
            later[0].facts,
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
            &[("discovery", "Bash failed: echo failing >&2; exit 3", &[])],
        );
        assert_eq!(observations(&[failed])[0].subtitle, "Exit code 3");
        let interrupted = ToolEvent {
            failed: true,
            is_interrupt: true,
            ..ev("Bash", json!({"command": "sleep 9"}))
        };
        check(&[interrupted], &[]);
    }

    #[test]
    fn reads_attach_to_changes_or_stand_alone() {
        let read = ev("Read", json!({"file_path": "/p/README.md"}));
        let o = observations(&[read.clone(), ev("Write", json!({"file_path": "/p/x"}))]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].files_read, vec!["/p/README.md"]);
        check(
            &[read.clone(), read],
            &[("discovery", "Read README.md", &[])],
        );
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
