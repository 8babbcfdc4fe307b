//! Prompt building: fixed instructions, a small capped session header, then the batch.
//!
//! Invariants:
//! - every prompt is self-contained: a replayed job is the same call again, and no prompt
//!   grows with the session (the header is capped; each tool field is capped);
//! - [`split_batch`] packs a batch into chunks whose prompts stay within
//!   `model.max_prompt_chars`; an event too large for a chunk of its own is shrunk field by
//!   field (head and tail kept, with a marker), never dropped;
//! - pure: values in, values out.

use std::ops::Range;

use serde_json::Value;

use crate::queue::payload::ToolEvent;
use crate::settings::ModelSettings;
use crate::text::{self, Unit};

/// Most characters of the user's request quoted in a header.
const HEADER_REQUEST_CHARS: usize = 600;
/// Most recent observation titles listed in a header.
const HEADER_TITLES: usize = 8;
/// Most characters of one listed title.
const HEADER_TITLE_CHARS: usize = 120;
/// Smallest field cap used when shrinking an event that does not fit.
const MIN_FIELD_CHARS: usize = 80;
/// Most observations listed in a summary prompt.
const SUMMARY_OBSERVATIONS: usize = 40;

/// The instructions of every observation prompt.
pub const OBSERVATION_INSTRUCTIONS: &str = "\
You are the memory of a coding assistant. You watch the tool calls it makes while it works \
in a software project, and you write down what will be worth knowing in a later session.

Record only what a developer would want to find again:
- decision: a choice of approach, library, design or trade-off, and why;
- bugfix: a bug found and fixed, with its cause;
- feature: new behaviour added;
- refactor: code restructured without changing behaviour;
- discovery: something learned about the code, the tools or the environment (including \
why a command failed);
- change: any other meaningful modification.

Skip routine work: plain file reads and listings, searches with nothing learned, status \
checks, commands that changed nothing. Prefer few, dense observations to many thin ones; \
one observation may cover several tool calls. Never invent facts that the events do not \
show. Write paths as they appear in the events.

Answer with XML only, one element per observation:
<observation>
  <type>decision|bugfix|feature|refactor|discovery|change</type>
  <title>short headline, under 80 characters</title>
  <subtitle>one sentence of context</subtitle>
  <facts><fact>a concise, self-contained fact</fact></facts>
  <narrative>a few sentences: what happened and why it matters</narrative>
  <concepts><concept>how-it-works|why-it-exists|what-changed|problem-solution|gotcha|pattern|trade-off</concept></concepts>
  <files_read><file>path</file></files_read>
  <files_modified><file>path</file></files_modified>
</observation>

If nothing is worth recording, answer exactly: <none/>";

/// The instructions of every summary prompt.
pub const SUMMARY_INSTRUCTIONS: &str = "\
You are the memory of a coding assistant. A turn of its work has ended: the user asked \
for something, the assistant worked, and the observations below were recorded. Summarize \
the turn for a developer who will read it in a later session. Be concrete and brief; \
never invent anything the material does not show; leave a field empty when there is \
nothing to say.

Answer with XML only:
<summary>
  <request>what the user asked for, in one sentence</request>
  <investigated>what was looked at</investigated>
  <learned>what was learned about the code or the problem</learned>
  <completed>what was done</completed>
  <next_steps>what remains or comes next</next_steps>
  <notes>anything else worth keeping</notes>
</summary>

If the turn holds nothing worth summarizing, answer exactly: <none/>";

/// Size limits of prompts, from `model.*` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole prompt (instructions, header and batch) stays under this.
    pub max_prompt_chars: usize,
    /// Each tool field (input, output, error) is capped to this.
    pub max_tool_field_chars: usize,
}

impl Limits {
    pub fn from_settings(m: &ModelSettings) -> Self {
        Self {
            max_prompt_chars: m.max_prompt_chars.max(1_000),
            max_tool_field_chars: m.max_tool_field_chars.max(MIN_FIELD_CHARS),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::from_settings(&ModelSettings::default())
    }
}

/// A prompt: fixed instructions (the system prompt where the API has one) and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
}

impl Prompt {
    /// Characters in the whole prompt.
    pub fn chars(&self) -> usize {
        self.system.chars().count() + self.user.chars().count()
    }

    /// System and user parts as one text, for providers without a system prompt.
    pub fn joined(&self) -> String {
        format!("{}\n\n{}", self.system, self.user)
    }
}

/// What the model is told about the session, whatever its length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionHeader {
    pub project: String,
    /// The user's prompt of this turn.
    pub request: String,
    /// Titles of the session's latest observations, newest first.
    pub recent_titles: Vec<String>,
}

impl SessionHeader {
    fn render(&self) -> String {
        let mut out = String::from("<session>\n");
        out.push_str(&format!("<project>{}</project>\n", cap(&self.project, 200)));
        if !self.request.trim().is_empty() {
            out.push_str(&format!(
                "<user_request>{}</user_request>\n",
                cap(self.request.trim(), HEADER_REQUEST_CHARS)
            ));
        }
        let titles: Vec<String> = self
            .recent_titles
            .iter()
            .take(HEADER_TITLES)
            .map(|t| format!("- {}", cap(t.trim(), HEADER_TITLE_CHARS)))
            .collect();
        if !titles.is_empty() {
            out.push_str("<already_recorded>\n");
            out.push_str(&titles.join("\n"));
            out.push_str("\n</already_recorded>\n");
        }
        out.push_str("</session>\n");
        out
    }
}

/// The prompt for one chunk of observation events.
pub fn observation_prompt(header: &SessionHeader, events: &[ToolEvent], limits: Limits) -> Prompt {
    let budget = limits.max_prompt_chars.saturating_sub(fixed_chars(header));
    let mut rendered: Vec<String> = events
        .iter()
        .enumerate()
        .map(|(i, ev)| render_event(i + 1, ev, limits.max_tool_field_chars))
        .collect();
    let total: usize = rendered.iter().map(|r| r.chars().count()).sum();
    if total > budget && !events.is_empty() {
        let room = budget / events.len();
        rendered = events
            .iter()
            .enumerate()
            .map(|(i, ev)| fit_event(i + 1, ev, room, limits))
            .collect();
    }
    let mut user = header.render();
    user.push_str("<events>\n");
    for r in rendered {
        user.push_str(&r);
    }
    user.push_str("</events>\n");
    Prompt {
        system: OBSERVATION_INSTRUCTIONS.to_string(),
        user,
    }
}

/// Characters of everything in an observation prompt but the events.
fn fixed_chars(header: &SessionHeader) -> usize {
    OBSERVATION_INSTRUCTIONS.chars().count()
        + header.render().chars().count()
        + "<events>\n</events>\n".len()
}

/// Splits a batch into consecutive chunks whose prompts fit `limits.max_prompt_chars`.
/// Every event is in exactly one chunk; a batch that fits is one chunk.
pub fn split_batch(
    header: &SessionHeader,
    events: &[ToolEvent],
    limits: Limits,
) -> Vec<Range<usize>> {
    let budget = limits.max_prompt_chars.saturating_sub(fixed_chars(header));
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (i, ev) in events.iter().enumerate() {
        let len = render_event(i + 1, ev, limits.max_tool_field_chars)
            .chars()
            .count();
        if i > start && used + len > budget {
            chunks.push(start..i);
            start = i;
            used = 0;
        }
        used += len;
    }
    if start < events.len() {
        chunks.push(start..events.len());
    }
    chunks
}

/// An event shrunk to about `room` characters: fields capped harder, then the whole.
fn fit_event(n: usize, ev: &ToolEvent, room: usize, limits: Limits) -> String {
    let field = (room / 4).clamp(MIN_FIELD_CHARS, limits.max_tool_field_chars);
    let shrunk = render_event(n, ev, field);
    if shrunk.chars().count() <= room.max(MIN_FIELD_CHARS * 4) {
        return shrunk;
    }
    let body = cap(&shrunk, room.max(MIN_FIELD_CHARS * 4));
    if body.ends_with("</event>\n") {
        body
    } else {
        format!("{body}\n</event>\n")
    }
}

/// One tool event as the model sees it.
fn render_event(n: usize, ev: &ToolEvent, field_chars: usize) -> String {
    let status = if ev.is_interrupt {
        "interrupted"
    } else if ev.failed {
        "failed"
    } else {
        "ok"
    };
    let mut out = format!(
        "<event n=\"{n}\" tool=\"{}\" status=\"{status}\"",
        cap(&ev.tool_name, 100)
    );
    if let Some(agent) = ev.agent_type.as_deref().filter(|a| !a.is_empty()) {
        out.push_str(&format!(" agent=\"{}\"", cap(agent, 60)));
    }
    out.push_str(">\n");
    let input = render_value(&ev.tool_input, field_chars);
    if !input.is_empty() {
        out.push_str(&format!("<input>{}</input>\n", cap(&input, field_chars)));
    }
    let output = render_value(&ev.tool_response, field_chars);
    if !output.is_empty() {
        out.push_str(&format!("<output>{}</output>\n", cap(&output, field_chars)));
    }
    if let Some(err) = ev.error.as_deref().filter(|e| !e.is_empty()) {
        out.push_str(&format!("<error>{}</error>\n", cap(err, field_chars)));
    }
    out.push_str("</event>\n");
    out
}

/// A JSON value as compact text, every string inside capped first so that one long field
/// does not push the others out. A bare string is shown without quotes.
fn render_value(v: &Value, field_chars: usize) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => cap(s, field_chars),
        Value::Object(m) if m.is_empty() => String::new(),
        other => {
            let capped = cap_strings(other, field_chars);
            serde_json::to_string(&capped).unwrap_or_default()
        }
    }
}

fn cap_strings(v: &Value, max: usize) -> Value {
    match v {
        Value::String(s) => Value::String(cap(s, max)),
        Value::Array(items) => Value::Array(items.iter().map(|i| cap_strings(i, max)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), cap_strings(v, max)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `s` cut to at most `max` characters, keeping its head and tail with a marker between.
/// The marker states how far over `max` the text was (not the count cut, which also makes
/// room for the marker).
pub fn cap(s: &str, max: usize) -> String {
    let over = s.chars().count().saturating_sub(max);
    text::keep_ends(s, max, Unit::Chars, |_| format!(" …[{over} chars cut]… ")).into_owned()
}

/// One observation of the turn, as listed in a summary prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnObservation {
    pub kind: String,
    pub title: String,
    pub subtitle: String,
}

/// The prompt for a turn summary: the request, this turn's observations and the
/// assistant's last message.
pub fn summary_prompt(
    project: &str,
    request: &str,
    observations: &[TurnObservation],
    last_assistant_message: &str,
    limits: Limits,
) -> Prompt {
    let mut user = format!("<project>{}</project>\n", cap(project, 200));
    user.push_str(&format!(
        "<request>{}</request>\n",
        cap(request.trim(), HEADER_REQUEST_CHARS * 2)
    ));
    user.push_str("<observations>\n");
    for o in observations.iter().take(SUMMARY_OBSERVATIONS) {
        let mut line = format!("- [{}] {}", o.kind, cap(&o.title, HEADER_TITLE_CHARS));
        if !o.subtitle.is_empty() {
            line.push_str(&format!(": {}", cap(&o.subtitle, 200)));
        }
        user.push_str(&line);
        user.push('\n');
    }
    if observations.len() > SUMMARY_OBSERVATIONS {
        user.push_str(&format!(
            "- … and {} more\n",
            observations.len() - SUMMARY_OBSERVATIONS
        ));
    }
    user.push_str("</observations>\n");
    let room = limits
        .max_prompt_chars
        .saturating_sub(SUMMARY_INSTRUCTIONS.chars().count() + user.chars().count() + 60)
        .max(MIN_FIELD_CHARS);
    let last = cap(
        last_assistant_message.trim(),
        room.min(limits.max_tool_field_chars * 2),
    );
    user.push_str(&format!(
        "<last_assistant_message>{last}</last_assistant_message>\n"
    ));
    Prompt {
        system: SUMMARY_INSTRUCTIONS.to_string(),
        user,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(tool: &str, input: Value, output: Value) -> ToolEvent {
        ToolEvent {
            tool_name: tool.into(),
            tool_input: input,
            tool_response: output,
            ..Default::default()
        }
    }

    fn header() -> SessionHeader {
        SessionHeader {
            project: "acme-api".into(),
            request: "please do the full tour".into(),
            recent_titles: vec!["Wrote out.txt".into()],
        }
    }

    #[test]
    fn caps_keep_head_and_tail() {
        assert_eq!(cap("short", 10), "short");
        let long = "a".repeat(50) + &"z".repeat(50);
        let c = cap(&long, 60);
        assert!(c.chars().count() <= 60, "{c}");
        assert!(c.starts_with('a') && c.ends_with('z') && c.contains("chars cut"));
        assert_eq!(cap("ééééé", 5), "ééééé");
    }

    #[test]
    fn header_is_capped_whatever_the_session() {
        let h = SessionHeader {
            project: "p".into(),
            request: "x".repeat(100_000),
            recent_titles: (0..1000)
                .map(|i| format!("title {i} {}", "y".repeat(500)))
                .collect(),
        };
        let n = h.render().chars().count();
        assert!(n < 2_500, "header of {n} chars");
        assert!(h.render().contains("title 0") && !h.render().contains("title 8 "));
    }

    #[test]
    fn observation_prompt_shows_the_events_and_instructions() {
        let evs = vec![
            event(
                "Bash",
                json!({"command": "cargo test"}),
                json!({"stdout": "ok", "stderr": ""}),
            ),
            ToolEvent {
                failed: true,
                error: Some("Exit code 3".into()),
                ..event("Bash", json!({"command": "false"}), Value::Null)
            },
        ];
        let p = observation_prompt(&header(), &evs, Limits::default());
        assert_eq!(p.system, OBSERVATION_INSTRUCTIONS);
        assert!(
            p.user
                .contains("<user_request>please do the full tour</user_request>")
        );
        assert!(p.user.contains("- Wrote out.txt"));
        assert!(
            p.user
                .contains("<event n=\"1\" tool=\"Bash\" status=\"ok\">")
        );
        assert!(p.user.contains("cargo test"));
        assert!(p.user.contains("status=\"failed\""));
        assert!(p.user.contains("<error>Exit code 3</error>"));
        assert!(p.chars() < Limits::default().max_prompt_chars);
    }

    #[test]
    fn tool_fields_are_capped() {
        let big = "q".repeat(50_000);
        let ev = event(
            "Read",
            json!({"file_path": "a.rs"}),
            json!({"file": {"content": big}}),
        );
        let limits = Limits {
            max_prompt_chars: 24_000,
            max_tool_field_chars: 500,
        };
        let p = observation_prompt(&header(), &[ev], limits);
        assert!(
            p.chars() < OBSERVATION_INSTRUCTIONS.len() + 1_500,
            "{}",
            p.chars()
        );
        assert!(p.user.contains("a.rs"));
    }

    #[test]
    fn an_over_size_batch_is_split_and_every_chunk_fits() {
        let limits = Limits {
            max_prompt_chars: 6_000,
            max_tool_field_chars: 1_000,
        };
        let evs: Vec<ToolEvent> = (0..30)
            .map(|i| {
                event(
                    "Edit",
                    json!({"file_path": format!("src/f{i}.rs"), "new_string": "n".repeat(900)}),
                    json!({"ok": true}),
                )
            })
            .collect();
        let chunks = split_batch(&header(), &evs, limits);
        assert!(chunks.len() > 1, "{chunks:?}");
        let mut covered = 0;
        for c in &chunks {
            assert_eq!(c.start, covered, "chunks are consecutive");
            covered = c.end;
            let p = observation_prompt(&header(), &evs[c.clone()], limits);
            assert!(p.chars() <= limits.max_prompt_chars, "{} chars", p.chars());
        }
        assert_eq!(covered, evs.len());
        // A batch that fits is one chunk.
        assert_eq!(split_batch(&header(), &evs[..2], limits), vec![0..2]);
        assert!(split_batch(&header(), &[], limits).is_empty());
    }

    #[test]
    fn one_huge_event_is_shrunk_not_dropped() {
        let limits = Limits {
            max_prompt_chars: 3_000,
            max_tool_field_chars: 100_000,
        };
        let ev = event(
            "Write",
            json!({"file_path": "big.rs", "content": "c".repeat(200_000)}),
            Value::Null,
        );
        let chunks = split_batch(&header(), std::slice::from_ref(&ev), limits);
        assert_eq!(chunks, vec![0..1]);
        let p = observation_prompt(&header(), &[ev], limits);
        assert!(p.chars() <= limits.max_prompt_chars + 200, "{}", p.chars());
        assert!(p.user.contains("big.rs") && p.user.contains("</event>"));
    }

    #[test]
    fn summary_prompt_holds_request_observations_and_last_message() {
        let obs = vec![TurnObservation {
            kind: "change".into(),
            title: "Wrote out.txt".into(),
            subtitle: "hello".into(),
        }];
        let p = summary_prompt(
            "acme-api",
            "please do the full tour",
            &obs,
            &"All done. ".repeat(10_000),
            Limits::default(),
        );
        assert_eq!(p.system, SUMMARY_INSTRUCTIONS);
        assert!(
            p.user
                .contains("<request>please do the full tour</request>")
        );
        assert!(p.user.contains("- [change] Wrote out.txt: hello"));
        assert!(p.user.contains("<last_assistant_message>All done."));
        assert!(p.chars() <= Limits::default().max_prompt_chars);
    }
}
