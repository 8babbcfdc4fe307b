//! Decoding one Claude Code hook payload (the JSON object on the hook's stdin) into a
//! domain [`Event`].
//!
//! The raw wire shape ([`Wire`]) is kept apart from the events cairn acts on: wire fields
//! are all optional and unknown fields are ignored, so a newer Claude Code that adds fields
//! changes nothing. An event name cairn does not know falls into [`EventName::Unknown`]
//! (a `#[serde(other)]` variant), never into a parse failure.
//!
//! Invariants: pure (no I/O, no clock); [`decode`] never panics and returns either an event
//! or a [`DecodeError`] saying why the input is unusable.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IntoDeserializer;
use serde_json::Value;

use crate::text;

/// Every hook event name Claude Code sends that cairn knows of. Names cairn does not know
/// become [`EventName::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum EventName {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    PostToolUseFailure,
    PostToolBatch,
    PermissionRequest,
    Notification,
    Stop,
    SubagentStart,
    SubagentStop,
    PreCompact,
    PostCompact,
    SessionEnd,
    #[serde(other)]
    Unknown,
}

impl EventName {
    /// Parses a `hook_event_name`; anything unknown is [`EventName::Unknown`].
    pub fn parse(name: &str) -> EventName {
        let de: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
            name.into_deserializer();
        EventName::deserialize(de).unwrap_or(EventName::Unknown)
    }

    /// The events cairn captures (or, for `PreToolUse`, answers); `cairn install`
    /// registers exactly these.
    pub const CAPTURED: [EventName; 7] = [
        EventName::SessionStart,
        EventName::UserPromptSubmit,
        EventName::PreToolUse,
        EventName::PostToolUse,
        EventName::PostToolUseFailure,
        EventName::Stop,
        EventName::SessionEnd,
    ];

    /// The name as Claude Code spells it (`"Unknown"` for unknown names).
    pub fn as_str(self) -> &'static str {
        match self {
            EventName::SessionStart => "SessionStart",
            EventName::UserPromptSubmit => "UserPromptSubmit",
            EventName::PreToolUse => "PreToolUse",
            EventName::PostToolUse => "PostToolUse",
            EventName::PostToolUseFailure => "PostToolUseFailure",
            EventName::PostToolBatch => "PostToolBatch",
            EventName::PermissionRequest => "PermissionRequest",
            EventName::Notification => "Notification",
            EventName::Stop => "Stop",
            EventName::SubagentStart => "SubagentStart",
            EventName::SubagentStop => "SubagentStop",
            EventName::PreCompact => "PreCompact",
            EventName::PostCompact => "PostCompact",
            EventName::SessionEnd => "SessionEnd",
            EventName::Unknown => "Unknown",
        }
    }
}

/// The payload as Claude Code sends it. Every field is optional and of any JSON type here;
/// [`decode`] decides which ones an event needs and what a field of the wrong type means.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Wire {
    pub hook_event_name: Option<Value>,
    pub session_id: Option<Value>,
    pub cwd: Option<Value>,
    pub prompt_id: Option<Value>,
    /// SessionStart: `startup`, `resume`, `compact`, `clear`.
    pub source: Option<Value>,
    /// UserPromptSubmit.
    pub prompt: Option<Value>,
    pub tool_name: Option<Value>,
    pub tool_use_id: Option<Value>,
    pub tool_input: Option<Value>,
    pub tool_response: Option<Value>,
    /// PostToolUseFailure.
    pub error: Option<Value>,
    pub is_interrupt: Option<Value>,
    pub duration_ms: Option<Value>,
    pub agent_id: Option<Value>,
    pub agent_type: Option<Value>,
    /// Stop, SubagentStop.
    pub last_assistant_message: Option<Value>,
    /// SessionEnd.
    pub reason: Option<Value>,
    /// Every event; cairn reads it for SessionEnd only.
    pub transcript_path: Option<Value>,
}

/// Longest identifier kept (`session_id`, `tool_use_id`, `prompt_id`, `agent_id`, and
/// names: event, tool, agent type, start source, end reason), in bytes. Claude Code's are
/// UUIDs or `toolu_…` ids of a few dozen bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest `cwd` kept, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// `s` when it fits in `max` bytes, else its head and a hash of the whole, `max` bytes
/// long: two long ids that differ only past the cut stay distinct, and a spooled id caps
/// the same when it is read later (see [`text::cap_hashed`]).
pub fn cap_id(s: String, max: usize) -> String {
    text::cap_hashed(s, max)
}

/// Reads the wire fields, coercing where the meaning is clear and noting every field of
/// the wrong type that is dropped instead.
struct Fields {
    ignored: Vec<&'static str>,
}

impl Fields {
    fn ignore<T>(&mut self, name: &'static str) -> Option<T> {
        self.ignored.push(name);
        None
    }

    /// A name or free text: strings only.
    fn text(&mut self, name: &'static str, v: Option<Value>) -> Option<String> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => self.ignore(name),
        }
    }

    /// An identifier: a string, or an integer written as a number.
    fn id(&mut self, name: &'static str, v: Option<Value>) -> Option<String> {
        match v {
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            other => self.text(name, other),
        }
    }

    /// A message: a string, a number or boolean as its text, or content blocks
    /// (`[{"type":"text","text":…}, "…"]`) joined.
    fn message(&mut self, name: &'static str, v: Option<Value>) -> Option<String> {
        match v {
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Some(v.to_string()),
            Some(Value::Array(items)) => {
                let parts: Vec<String> = items
                    .into_iter()
                    .filter_map(|i| match i {
                        Value::String(s) => Some(s),
                        Value::Object(mut o) => match o.remove("text") {
                            Some(Value::String(s)) => Some(s),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                if parts.is_empty() {
                    self.ignore(name)
                } else {
                    Some(parts.join("\n"))
                }
            }
            other => self.text(name, other),
        }
    }

    fn flag(&mut self, name: &'static str, v: Option<Value>) -> Option<bool> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(b),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Some(true),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Some(false),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Some(false),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Some(true),
            Some(_) => self.ignore(name),
        }
    }

    fn count(&mut self, name: &'static str, v: Option<Value>) -> Option<u64> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            }) {
                Some(n) => Some(n),
                None => self.ignore(name),
            },
            Some(Value::String(s)) => match s.trim().parse() {
                Ok(n) => Some(n),
                Err(_) => self.ignore(name),
            },
            Some(_) => self.ignore(name),
        }
    }
}

/// Fields every event carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    pub session_id: String,
    /// Empty when the payload had none (the caller may fall back to `CLAUDE_PROJECT_DIR`).
    pub cwd: String,
    pub prompt_id: Option<String>,
    /// Fields of the wrong type that were dropped (the event did without them).
    pub ignored: Vec<&'static str>,
}

/// Why a session started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartSource {
    Startup,
    Resume,
    Compact,
    Clear,
    /// A source this cairn does not know; treated like `startup`.
    Other,
}

/// A tool call that finished (`PostToolUse`) or failed (`PostToolUseFailure`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool_name: String,
    pub tool_use_id: String,
    pub tool_input: Value,
    /// `Null` for a failure.
    pub tool_response: Value,
    pub error: Option<String>,
    pub failed: bool,
    pub is_interrupt: bool,
    pub duration_ms: Option<u64>,
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
}

/// What cairn acts on.
// One event per hook process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    SessionStart {
        common: Common,
        source: StartSource,
    },
    /// A prompt. `synthetic` is true for the `<task-notification>` prompts Claude Code sends
    /// itself when a background task finishes: they are not the user's.
    UserPrompt {
        common: Common,
        prompt: String,
        synthetic: bool,
    },
    Tool {
        common: Common,
        call: ToolCall,
    },
    /// A tool is about to run (`PreToolUse`): nothing is stored; a tool that reads or edits
    /// a file names it in `file`, and the hook may tell what is known about that file.
    BeforeTool {
        common: Common,
        tool_name: String,
        file: Option<String>,
        /// The subagent making the call; `None` for the main conversation.
        agent_id: Option<String>,
    },
    /// The main agent's turn ended (`Stop`).
    Stop {
        common: Common,
        last_assistant_message: String,
    },
    SessionEnd {
        common: Common,
        reason: String,
        /// The session's transcript, when Claude Code named one.
        transcript_path: Option<String>,
    },
}

impl Event {
    pub fn common(&self) -> &Common {
        match self {
            Event::SessionStart { common, .. }
            | Event::UserPrompt { common, .. }
            | Event::Tool { common, .. }
            | Event::BeforeTool { common, .. }
            | Event::Stop { common, .. }
            | Event::SessionEnd { common, .. } => common,
        }
    }

    fn common_mut(&mut self) -> &mut Common {
        match self {
            Event::SessionStart { common, .. }
            | Event::UserPrompt { common, .. }
            | Event::Tool { common, .. }
            | Event::BeforeTool { common, .. }
            | Event::Stop { common, .. }
            | Event::SessionEnd { common, .. } => common,
        }
    }

    /// The `hook_event_name` this event came from.
    pub fn name(&self) -> &'static str {
        match self {
            Event::SessionStart { .. } => "SessionStart",
            Event::UserPrompt { .. } => "UserPromptSubmit",
            Event::Tool { call, .. } if call.failed => "PostToolUseFailure",
            Event::Tool { .. } => "PostToolUse",
            Event::BeforeTool { .. } => "PreToolUse",
            Event::Stop { .. } => "Stop",
            Event::SessionEnd { .. } => "SessionEnd",
        }
    }
}

/// Why an input is not an event cairn captures. The message is the quarantine reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty input")]
    Empty,
    #[error("input is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("input is not a JSON object")]
    NotAnObject,
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("field {0} has the wrong type")]
    WrongType(&'static str),
    #[error("event {0} is not captured by cairn")]
    NotCaptured(String),
}

/// The `hook_event_name` of an input, when it can be found cheaply (for the quarantine).
pub fn sniff_name(input: &[u8]) -> Option<String> {
    let wire: Wire = serde_json::from_slice(without_bom(input)).ok()?;
    match wire.hook_event_name? {
        Value::String(s) => Some(cap_id(s, MAX_ID_BYTES)),
        _ => None,
    }
}

/// The input without a leading UTF-8 byte-order mark.
pub fn without_bom(input: &[u8]) -> &[u8] {
    input.strip_prefix(b"\xef\xbb\xbf").unwrap_or(input)
}

/// Decodes one payload. `explicit` is an event name given on the command line, used when
/// the payload has none.
pub fn decode(input: &[u8], explicit: Option<&str>) -> Result<Event, DecodeError> {
    let input = without_bom(input);
    if input.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty);
    }
    // Bytes that are not UTF-8, and `\ud83d` escapes that JavaScript leaves when it cuts a
    // string inside an emoji, become U+FFFD: one bad character never costs the event.
    let text = String::from_utf8_lossy(input);
    let text = replace_lone_surrogates(&text);
    let input = text.as_bytes();
    if input.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return match serde_json::from_slice::<Value>(input) {
            Ok(_) => Err(DecodeError::NotAnObject),
            Err(e) => Err(DecodeError::InvalidJson(e.to_string())),
        };
    }
    let wire: Wire =
        serde_json::from_slice(input).map_err(|e| DecodeError::InvalidJson(e.to_string()))?;
    from_wire(wire, explicit)
}

/// JSON text with every `\uXXXX` escape of a surrogate that has no partner replaced by
/// `\ufffd` (serde_json refuses them). Escaped backslashes are skipped, so `\\ud83d` (a
/// backslash, then text) is left alone.
fn replace_lone_surrogates(s: &str) -> Cow<'_, str> {
    fn unit(b: &[u8], at: usize) -> Option<u16> {
        if b.get(at) != Some(&b'\\') || b.get(at + 1) != Some(&b'u') {
            return None;
        }
        let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
        u16::from_str_radix(hex, 16).ok()
    }
    let b = s.as_bytes();
    if !s.contains("\\u") {
        return Cow::Borrowed(s);
    }
    let mut out: Option<String> = None;
    let (mut cursor, mut i) = (0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(b, i) else {
            i += 2; // an escape such as `\\` or `\n`: skip both bytes
            continue;
        };
        let high = (0xD800..0xDC00).contains(&u);
        let low = (0xDC00..0xE000).contains(&u);
        if high && unit(b, i + 6).is_some_and(|n| (0xDC00..0xE000).contains(&n)) {
            i += 12; // a whole pair
            continue;
        }
        if high || low {
            let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
            o.push_str(&s[cursor..i]);
            o.push_str("\\ufffd");
            cursor = i + 6;
        }
        i += 6;
    }
    match out {
        None => Cow::Borrowed(s),
        Some(mut o) => {
            o.push_str(&s[cursor..]);
            Cow::Owned(o)
        }
    }
}

/// Maps a wire payload to an event. A field of the wrong type that the event can do
/// without is dropped and named in [`Common::ignored`]; one it needs is a
/// [`DecodeError::WrongType`]. Identifiers and names are capped at [`MAX_ID_BYTES`], the
/// `cwd` at [`MAX_PATH_BYTES`].
pub fn from_wire(wire: Wire, explicit: Option<&str>) -> Result<Event, DecodeError> {
    let mut f = Fields {
        ignored: Vec::new(),
    };
    let id = |s: String| cap_id(s, MAX_ID_BYTES);
    let raw_name = match wire.hook_event_name {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => explicit
            .map(str::to_string)
            .ok_or(DecodeError::Missing("hook_event_name"))?,
        // A name of no clear meaning: the one given on the command line, if any.
        Some(_) => explicit
            .map(str::to_string)
            .ok_or(DecodeError::WrongType("hook_event_name"))?,
    };
    let raw_name = id(raw_name);
    let name = EventName::parse(&raw_name);
    if !EventName::CAPTURED.contains(&name) {
        return Err(DecodeError::NotCaptured(raw_name));
    }
    let session_id = required(&mut f, "session_id", wire.session_id, Fields::id)?;
    let common = Common {
        session_id: id(session_id),
        cwd: f
            .text("cwd", wire.cwd)
            .map(|c| cap_id(c, MAX_PATH_BYTES))
            .unwrap_or_default(),
        prompt_id: nonempty(f.id("prompt_id", wire.prompt_id)).map(id),
        ignored: Vec::new(),
    };
    let mut event = match name {
        EventName::SessionStart => Event::SessionStart {
            source: match f.text("source", wire.source).as_deref() {
                Some("startup") | None => StartSource::Startup,
                Some("resume") => StartSource::Resume,
                Some("compact") => StartSource::Compact,
                Some("clear") => StartSource::Clear,
                Some(_) => StartSource::Other,
            },
            common,
        },
        EventName::UserPromptSubmit => {
            let prompt = match wire.prompt {
                None | Some(Value::Null) => return Err(DecodeError::Missing("prompt")),
                v => f
                    .message("prompt", v)
                    .ok_or(DecodeError::WrongType("prompt"))?,
            };
            let synthetic = prompt.trim_start().starts_with("<task-notification>");
            Event::UserPrompt {
                common,
                prompt,
                synthetic,
            }
        }
        EventName::PostToolUse | EventName::PostToolUseFailure => {
            let failed = name == EventName::PostToolUseFailure;
            let tool_name = id(required(&mut f, "tool_name", wire.tool_name, Fields::text)?);
            let tool_use_id = id(required(
                &mut f,
                "tool_use_id",
                wire.tool_use_id,
                Fields::id,
            )?);
            let error = match wire.error {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => Some(other.to_string()),
            };
            let call = ToolCall {
                tool_name,
                tool_use_id,
                tool_input: wire.tool_input.unwrap_or(Value::Null),
                tool_response: wire.tool_response.unwrap_or(Value::Null),
                error,
                failed,
                is_interrupt: f.flag("is_interrupt", wire.is_interrupt).unwrap_or(false),
                duration_ms: f.count("duration_ms", wire.duration_ms),
                agent_id: nonempty(f.id("agent_id", wire.agent_id)).map(id),
                agent_type: nonempty(f.text("agent_type", wire.agent_type)).map(id),
            };
            Event::Tool { common, call }
        }
        EventName::PreToolUse => {
            let tool_name = id(required(&mut f, "tool_name", wire.tool_name, Fields::text)?);
            let file = FILE_TOOLS
                .iter()
                .find(|(name, _)| *name == tool_name)
                .and_then(|(_, field)| wire.tool_input.as_ref()?.get(field)?.as_str())
                .filter(|p| !p.trim().is_empty())
                .map(|p| cap_id(p.to_string(), MAX_PATH_BYTES));
            Event::BeforeTool {
                common,
                tool_name,
                file,
                agent_id: nonempty(f.id("agent_id", wire.agent_id)).map(id),
            }
        }
        EventName::Stop => Event::Stop {
            last_assistant_message: f
                .message("last_assistant_message", wire.last_assistant_message)
                .unwrap_or_default(),
            common,
        },
        EventName::SessionEnd => Event::SessionEnd {
            reason: f.text("reason", wire.reason).map(id).unwrap_or_default(),
            transcript_path: f
                .text("transcript_path", wire.transcript_path)
                .map(|p| cap_id(p, MAX_PATH_BYTES)),
            common,
        },
        _ => return Err(DecodeError::NotCaptured(raw_name)),
    };
    event.common_mut().ignored = f.ignored;
    Ok(event)
}

/// A field the event cannot do without: absent, empty or of a type with no clear meaning
/// is an error.
fn required(
    f: &mut Fields,
    name: &'static str,
    v: Option<Value>,
    read: fn(&mut Fields, &'static str, Option<Value>) -> Option<String>,
) -> Result<String, DecodeError> {
    let present = !matches!(v, None | Some(Value::Null));
    match nonempty(read(f, name, v)) {
        Some(s) => Ok(s),
        None if present && f.ignored.last() == Some(&name) => Err(DecodeError::WrongType(name)),
        None => Err(DecodeError::Missing(name)),
    }
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

/// The tools that read or edit one file, with the `tool_input` field naming it.
pub const FILE_TOOLS: [(&str, &str); 5] = [
    ("Read", "file_path"),
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("Write", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// The `PreToolUse` matcher of the tools in [`FILE_TOOLS`].
pub const FILE_TOOLS_MATCHER: &str = "Read|Edit|MultiEdit|Write|NotebookEdit";

/// The answer printed when there is nothing to say.
pub const PLAIN_ANSWER: &str = r#"{"continue":true,"suppressOutput":true}"#;

/// The `SessionStart` answer that adds `context` to the conversation.
pub fn session_start_answer(context: &str) -> String {
    serde_json::json!({
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": context,
        }
    })
    .to_string()
}

/// The answer of `event` (`SessionStart`, `UserPromptSubmit`, `PreToolUse`) that adds
/// `context` to the conversation, and nothing else: a `PreToolUse` answer never decides
/// on, delays or changes the call. The plain answer when `context` is empty.
pub fn context_answer(event: EventName, context: &str) -> String {
    if context.is_empty() {
        return PLAIN_ANSWER.to_string();
    }
    serde_json::json!({
        "hookSpecificOutput": {
            "hookEventName": event.as_str(),
            "additionalContext": context,
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-code-hooks")
            .join(name);
        std::fs::read(&path).expect("fixture")
    }

    fn check(input: &str, expected: Result<&str, DecodeError>) {
        let got = decode(input.as_bytes(), None).map(|e| e.name());
        assert_eq!(got, expected, "{input}");
    }

    #[test]
    fn a_call_about_to_read_or_edit_a_file_names_it() {
        let read = decode(&fixture("PreToolUse.Read.json"), None).expect("decode");
        let Event::BeforeTool {
            tool_name, file, ..
        } = read
        else {
            panic!("{read:?}");
        };
        assert_eq!(tool_name, "Read");
        assert_eq!(file.as_deref(), Some("/home/dev/acme-api/out.txt"));
        let bash = decode(&fixture("PreToolUse.json"), None).expect("decode");
        assert!(
            matches!(
                bash,
                Event::BeforeTool {
                    file: None,
                    agent_id: None,
                    ..
                }
            ),
            "{bash:?}"
        );
        let sub = decode(&fixture("PreToolUse.Bash.subagent.json"), None).expect("decode");
        assert!(
            matches!(&sub, Event::BeforeTool { agent_id: Some(a), .. } if a == "a234c386c0b95e3d9"),
            "{sub:?}"
        );
        let notebook = r#"{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"NotebookEdit","tool_input":{"notebook_path":"/r/a.ipynb"}}"#;
        assert!(matches!(
            decode(notebook.as_bytes(), None),
            Ok(Event::BeforeTool { file: Some(f), .. }) if f == "/r/a.ipynb"
        ));
        assert_eq!(
            context_answer(EventName::PreToolUse, ""),
            PLAIN_ANSWER,
            "nothing to tell is the plain answer"
        );
        let v: Value =
            serde_json::from_str(&context_answer(EventName::PreToolUse, "x")).expect("json");
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PreToolUse");
        assert_eq!(v["hookSpecificOutput"]["additionalContext"], "x");
        assert!(v["hookSpecificOutput"].get("permissionDecision").is_none());
        assert_eq!(v.as_object().expect("object").len(), 1);
    }

    #[test]
    fn bad_inputs_say_why() {
        check("", Err(DecodeError::Empty));
        check("  \n", Err(DecodeError::Empty));
        check("[1,2]", Err(DecodeError::NotAnObject));
        check("\"x\"", Err(DecodeError::NotAnObject));
        check(
            r#"{"session_id":"s","cwd":"/x"}"#,
            Err(DecodeError::Missing("hook_event_name")),
        );
        check(
            r#"{"hook_event_name":"Stop","cwd":"/x"}"#,
            Err(DecodeError::Missing("session_id")),
        );
        check(
            r#"{"hook_event_name":"Stop","session_id":"  "}"#,
            Err(DecodeError::Missing("session_id")),
        );
        check(
            r#"{"hook_event_name":"UserPromptSubmit","session_id":"s"}"#,
            Err(DecodeError::Missing("prompt")),
        );
        check(
            r#"{"hook_event_name":"PostToolUse","session_id":"s","tool_name":"Bash"}"#,
            Err(DecodeError::Missing("tool_use_id")),
        );
        check(
            r#"{"hook_event_name":"BrandNewEvent","session_id":"s"}"#,
            Err(DecodeError::NotCaptured("BrandNewEvent".into())),
        );
        check(
            r#"{"hook_event_name":"PostToolBatch","session_id":"s"}"#,
            Err(DecodeError::NotCaptured("PostToolBatch".into())),
        );
        assert!(matches!(
            decode(b"{\"a\":", None),
            Err(DecodeError::InvalidJson(_))
        ));
        // Bad characters are replaced, not a reason to refuse the event.
        let e = decode(
            b"{\"hook_event_name\":\"UserPromptSubmit\",\"session_id\":\"s\",\"prompt\":\"a\xff\xfeb \\ud83d c \\udc00 \\ud83d\\ude00 \\\\ud83d\"}",
            None,
        );
        assert!(
            matches!(e, Ok(Event::UserPrompt { ref prompt, .. }) if prompt == "a\u{fffd}\u{fffd}b \u{fffd} c \u{fffd} \u{1f600} \\ud83d"),
            "{e:?}"
        );
        // A wrong-typed name with one on the command line: the command line's.
        let e = decode(br#"{"hook_event_name":7,"session_id":"s"}"#, Some("Stop"));
        assert_eq!(e.map(|e| e.name()), Ok("Stop"));
        check(
            r#"{"hook_event_name":7,"session_id":"s"}"#,
            Err(DecodeError::WrongType("hook_event_name")),
        );
        check(
            r#"{"hook_event_name":"PostToolUse","session_id":"s","tool_name":{"a":1},"tool_use_id":"t"}"#,
            Err(DecodeError::WrongType("tool_name")),
        );
        // A required field of a type with no clear meaning says so.
        check(
            r#"{"hook_event_name":"Stop","session_id":{"a":1}}"#,
            Err(DecodeError::WrongType("session_id")),
        );
        check(
            r#"{"hook_event_name":"PostToolUse","session_id":"s","tool_name":7,"tool_use_id":"t"}"#,
            Err(DecodeError::WrongType("tool_name")),
        );
    }

    #[test]
    fn fields_of_the_wrong_type_are_coerced_or_dropped_not_fatal() {
        let tool = |extra: &str| {
            let s = format!(
                r#"{{"hook_event_name":"PostToolUse","session_id":"s","cwd":"/x","tool_name":"Bash","tool_use_id":"t"{extra}}}"#
            );
            match decode(s.as_bytes(), None) {
                Ok(Event::Tool { common, call }) => (common, call),
                other => panic!("{extra}: {other:?}"),
            }
        };
        let (c, call) =
            tool(r#","prompt_id":7,"agent_id":1,"agent_type":true,"is_interrupt":"false""#);
        assert_eq!(c.prompt_id.as_deref(), Some("7"));
        assert_eq!(call.agent_id.as_deref(), Some("1"));
        assert_eq!(call.agent_type, None);
        assert!(!call.is_interrupt);
        assert_eq!(c.ignored, vec!["agent_type"]);
        let (c, call) = tool(r#","is_interrupt":"true","duration_ms":"12""#);
        assert!(call.is_interrupt);
        assert_eq!(call.duration_ms, Some(12));
        assert!(c.ignored.is_empty());
        let e = decode(br#"{"hook_event_name":"Stop","session_id":42}"#, None).expect("stop");
        assert_eq!(e.common().session_id, "42");
        let e = decode(
            br#"{"hook_event_name":"Stop","session_id":"s","cwd":["/a"]}"#,
            None,
        )
        .expect("stop");
        assert_eq!(e.common().ignored, vec!["cwd"]);
        let e = decode(
            br#"{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":42}"#,
            None,
        );
        assert!(matches!(e, Ok(Event::UserPrompt { ref prompt, .. }) if prompt == "42"));

        let e = decode(
            br#"{"hook_event_name":"Stop","session_id":"s","last_assistant_message":[{"type":"text","text":"done"},"more"]}"#,
            None,
        );
        assert!(
            matches!(e, Ok(Event::Stop { ref last_assistant_message, .. }) if last_assistant_message == "done\nmore")
        );
        let e = decode(
            br#"{"hook_event_name":"Stop","session_id":"s","last_assistant_message":[1,2]}"#,
            None,
        )
        .expect("stop");
        assert_eq!(e.common().ignored, vec!["last_assistant_message"]);
        let e = decode(
            br#"{"hook_event_name":"SessionEnd","session_id":"s","reason":{}}"#,
            None,
        )
        .expect("end");
        assert!(matches!(e, Event::SessionEnd { ref reason, .. } if reason.is_empty()));
        assert_eq!(e.common().ignored, vec!["reason"]);
        let e = decode(
            br#"{"hook_event_name":"SessionStart","session_id":"s","source":1}"#,
            None,
        )
        .expect("start");
        assert!(matches!(
            e,
            Event::SessionStart {
                source: StartSource::Startup,
                ..
            }
        ));
        // A byte-order mark before the object.
        let e = decode(
            b"\xef\xbb\xbf{\"hook_event_name\":\"Stop\",\"session_id\":\"s\"}",
            None,
        );
        assert_eq!(e.map(|e| e.name()), Ok("Stop"));
    }

    #[test]
    fn identifiers_and_paths_are_capped() {
        let long = "a".repeat(1 << 20);
        let s = format!(
            r#"{{"hook_event_name":"PostToolUse","session_id":"{long}","cwd":"/{long}","tool_name":"{long}","tool_use_id":"{long}b","prompt_id":"{long}","agent_id":"{long}","agent_type":"{long}"}}"#
        );
        let Ok(Event::Tool { common, call }) = decode(s.as_bytes(), None) else {
            panic!("tool")
        };
        for id in [
            &common.session_id,
            &call.tool_name,
            &call.tool_use_id,
            common.prompt_id.as_ref().expect("prompt id"),
            call.agent_id.as_ref().expect("agent id"),
            call.agent_type.as_ref().expect("agent type"),
        ] {
            assert_eq!(id.len(), MAX_ID_BYTES);
        }
        assert_eq!(common.cwd.len(), MAX_PATH_BYTES);
        // Distinct long ids stay distinct.
        assert_ne!(call.tool_use_id, common.session_id);
        assert_eq!(cap_id("short".into(), MAX_ID_BYTES), "short");
        assert_eq!(cap_id("é".repeat(300), 256).len(), 256 - 1);
    }

    #[test]
    fn unknown_fields_and_names_are_harmless() {
        check(
            r#"{"hook_event_name":"Stop","session_id":"s","new_field":{"x":[1]}}"#,
            Ok("Stop"),
        );
        assert_eq!(EventName::parse("Stop"), EventName::Stop);
        assert_eq!(EventName::parse("Tomorrow"), EventName::Unknown);
        // The name may come from the command line when the payload lacks it.
        let e = decode(br#"{"session_id":"s"}"#, Some("SessionEnd")).expect("explicit");
        assert_eq!(e.name(), "SessionEnd");
    }

    #[test]
    fn every_fixture_decodes_or_is_not_captured() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/claude-code-hooks");
        for entry in std::fs::read_dir(&dir).expect("dir") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("read");
            let name = sniff_name(&bytes).expect("name");
            match decode(&bytes, None) {
                Ok(e) => assert_eq!(e.name(), name, "{}", path.display()),
                Err(DecodeError::NotCaptured(n)) => {
                    assert_eq!(n, name);
                    assert!(!EventName::CAPTURED.contains(&EventName::parse(&n)));
                }
                Err(other) => panic!("{}: {other}", path.display()),
            }
        }
    }

    #[test]
    fn fixture_fields_map_to_events() {
        let e = decode(&fixture("PostToolUse.Bash.subagent.json"), None).expect("decode");
        let Event::Tool { common, call } = e else {
            panic!("not a tool event")
        };
        assert_eq!(common.cwd, "/home/dev/acme-api");
        assert_eq!(call.tool_name, "Bash");
        assert_eq!(call.agent_type.as_deref(), Some("general-purpose"));
        assert_eq!(call.duration_ms, Some(7));
        assert!(!call.failed);

        let e = decode(&fixture("PostToolUseFailure.json"), None).expect("decode");
        let Event::Tool { call, .. } = e else {
            panic!("not a tool event")
        };
        assert!(call.failed);
        assert_eq!(call.error.as_deref(), Some("Exit code 3\nfailing"));
        assert_eq!(call.tool_response, Value::Null);

        let e = decode(&fixture("SessionStart.resume.json"), None).expect("decode");
        assert!(matches!(
            e,
            Event::SessionStart {
                source: StartSource::Resume,
                ..
            }
        ));
        let e = decode(&fixture("Stop.json"), None).expect("decode");
        assert!(
            matches!(e, Event::Stop { ref last_assistant_message, .. } if last_assistant_message.starts_with("All done"))
        );
        let synthetic = br#"{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":"<task-notification>\n<task-id>x</task-id></task-notification>"}"#;
        assert!(matches!(
            decode(synthetic, None),
            Ok(Event::UserPrompt {
                synthetic: true,
                ..
            })
        ));
    }

    #[test]
    fn answers_are_protocol_json() {
        let v: Value = serde_json::from_str(PLAIN_ANSWER).expect("json");
        assert_eq!(v["continue"], true);
        let v: Value = serde_json::from_str(&session_start_answer("a \"b\"\n")).expect("json");
        assert_eq!(v["hookSpecificOutput"]["additionalContext"], "a \"b\"\n");
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = decode(&bytes, None);
            let _ = sniff_name(&bytes);
        }
    }
}
