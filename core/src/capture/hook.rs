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

use serde::Deserialize;
use serde::de::IntoDeserializer;
use serde_json::Value;

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

    /// The events cairn captures; `cairn install` registers exactly these.
    pub const CAPTURED: [EventName; 6] = [
        EventName::SessionStart,
        EventName::UserPromptSubmit,
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

/// The payload as Claude Code sends it. Every field is optional here; [`decode`] decides
/// which ones an event needs.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Wire {
    pub hook_event_name: Option<String>,
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub prompt_id: Option<String>,
    /// SessionStart: `startup`, `resume`, `compact`, `clear`.
    pub source: Option<String>,
    /// UserPromptSubmit.
    pub prompt: Option<String>,
    pub tool_name: Option<String>,
    pub tool_use_id: Option<String>,
    pub tool_input: Option<Value>,
    pub tool_response: Option<Value>,
    /// PostToolUseFailure.
    pub error: Option<Value>,
    pub is_interrupt: Option<bool>,
    pub duration_ms: Option<Value>,
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    /// Stop, SubagentStop.
    pub last_assistant_message: Option<String>,
    /// SessionEnd.
    pub reason: Option<String>,
}

/// Fields every event carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    pub session_id: String,
    /// Empty when the payload had none (the caller may fall back to `CLAUDE_PROJECT_DIR`).
    pub cwd: String,
    pub prompt_id: Option<String>,
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
    /// The main agent's turn ended (`Stop`).
    Stop {
        common: Common,
        last_assistant_message: String,
    },
    SessionEnd {
        common: Common,
        reason: String,
    },
}

impl Event {
    pub fn common(&self) -> &Common {
        match self {
            Event::SessionStart { common, .. }
            | Event::UserPrompt { common, .. }
            | Event::Tool { common, .. }
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
    #[error("input is not valid UTF-8")]
    InvalidUtf8,
    #[error("input is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("input is not a JSON object")]
    NotAnObject,
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("event {0} is not captured by cairn")]
    NotCaptured(String),
}

/// The `hook_event_name` of an input, when it can be found cheaply (for the quarantine).
pub fn sniff_name(input: &[u8]) -> Option<String> {
    let wire: Wire = serde_json::from_slice(input).ok()?;
    wire.hook_event_name
}

/// Decodes one payload. `explicit` is an event name given on the command line, used when
/// the payload has none.
pub fn decode(input: &[u8], explicit: Option<&str>) -> Result<Event, DecodeError> {
    if input.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty);
    }
    if std::str::from_utf8(input).is_err() {
        return Err(DecodeError::InvalidUtf8);
    }
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

/// Maps a wire payload to an event.
pub fn from_wire(wire: Wire, explicit: Option<&str>) -> Result<Event, DecodeError> {
    let raw_name = wire
        .hook_event_name
        .clone()
        .or_else(|| explicit.map(str::to_string))
        .ok_or(DecodeError::Missing("hook_event_name"))?;
    let name = EventName::parse(&raw_name);
    if !EventName::CAPTURED.contains(&name) {
        return Err(DecodeError::NotCaptured(raw_name));
    }
    let session_id = nonempty(wire.session_id).ok_or(DecodeError::Missing("session_id"))?;
    let common = Common {
        session_id,
        cwd: wire.cwd.unwrap_or_default(),
        prompt_id: nonempty(wire.prompt_id),
    };
    Ok(match name {
        EventName::SessionStart => Event::SessionStart {
            common,
            source: match wire.source.as_deref() {
                Some("startup") | None => StartSource::Startup,
                Some("resume") => StartSource::Resume,
                Some("compact") => StartSource::Compact,
                Some("clear") => StartSource::Clear,
                Some(_) => StartSource::Other,
            },
        },
        EventName::UserPromptSubmit => {
            let prompt = wire.prompt.ok_or(DecodeError::Missing("prompt"))?;
            let synthetic = prompt.trim_start().starts_with("<task-notification>");
            Event::UserPrompt {
                common,
                prompt,
                synthetic,
            }
        }
        EventName::PostToolUse | EventName::PostToolUseFailure => {
            let failed = name == EventName::PostToolUseFailure;
            let tool_name = nonempty(wire.tool_name).ok_or(DecodeError::Missing("tool_name"))?;
            let tool_use_id =
                nonempty(wire.tool_use_id).ok_or(DecodeError::Missing("tool_use_id"))?;
            let error = match wire.error {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => Some(other.to_string()),
            };
            Event::Tool {
                common,
                call: ToolCall {
                    tool_name,
                    tool_use_id,
                    tool_input: wire.tool_input.unwrap_or(Value::Null),
                    tool_response: wire.tool_response.unwrap_or(Value::Null),
                    error,
                    failed,
                    is_interrupt: wire.is_interrupt.unwrap_or(false),
                    duration_ms: wire.duration_ms.as_ref().and_then(Value::as_u64),
                    agent_id: nonempty(wire.agent_id),
                    agent_type: nonempty(wire.agent_type),
                },
            }
        }
        EventName::Stop => Event::Stop {
            common,
            last_assistant_message: wire.last_assistant_message.unwrap_or_default(),
        },
        EventName::SessionEnd => Event::SessionEnd {
            common,
            reason: wire.reason.unwrap_or_default(),
        },
        _ => return Err(DecodeError::NotCaptured(raw_name)),
    })
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

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
            r#"{"hook_event_name":"PreToolUse","session_id":"s"}"#,
            Err(DecodeError::NotCaptured("PreToolUse".into())),
        );
        assert!(matches!(
            decode(b"{\"a\":", None),
            Err(DecodeError::InvalidJson(_))
        ));
        assert_eq!(
            decode(b"{\"a\":\"\xff\"}", None),
            Err(DecodeError::InvalidUtf8)
        );
        // A wrong type for a known field is bad JSON for us, not a panic.
        assert!(matches!(
            decode(br#"{"hook_event_name":"Stop","session_id":5}"#, None),
            Err(DecodeError::InvalidJson(_))
        ));
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
