//! From a decoded hook event to its record: which events are stored at all (an excluded
//! project's are not, nor a skipped tool's, nor cairn's own MCP tools'), and every text
//! cleaned by the privacy filter. Pure: no database, no clock (`now` is passed in).
//!
//! - `SessionStart`: the session is (again) active.
//! - `UserPromptSubmit`: a prompt, cleaned. Synthetic `<task-notification>` prompts
//!   (Claude Code's own, when a background task ends) only touch the session: they are
//!   not the user's and start no turn.
//! - `PostToolUse` / `PostToolUseFailure`: a [`payload::ToolEvent`], unless the tool is in
//!   `capture.skip_tools` or is one of cairn's own MCP tools ([`is_own_tool`]): a memory
//!   lookup is not something to remember.
//! - `PreToolUse`: nothing is stored (the call is stored when it ends).
//! - `Stop`: a [`payload::TurnEnd`] with the final assistant message.
//! - `SessionEnd`: the session ends.
//!
//! [`payload::ToolEvent`]: crate::queue::payload::ToolEvent
//! [`payload::TurnEnd`]: crate::queue::payload::TurnEnd

use super::types::{Action, Record};
use crate::capture::hook::Event;
use crate::privacy::{Privacy, Recurring};
use crate::queue::payload::{ToolEvent, TurnEnd};
use crate::settings::CaptureSettings;

/// True when `project` matches one of `capture.excluded_projects`.
pub fn is_excluded(project: &str, settings: &CaptureSettings) -> bool {
    settings
        .excluded_projects
        .iter()
        .any(|p| crate::capture::project::glob_match(p, project))
}

/// True for cairn's own MCP tools as Claude Code names them: `mcp__cairn__<tool>` when the
/// server is registered as `cairn` (`claude mcp add cairn -- cairn mcp`), and
/// `mcp__plugin_cairn_cairn__<tool>` when it comes with cairn's plugin. Their calls are
/// never queued, whatever `capture.skip_tools` says.
pub fn is_own_tool(tool_name: &str) -> bool {
    ["mcp__cairn__", "mcp__plugin_cairn_cairn__"]
        .iter()
        .any(|prefix| tool_name.starts_with(prefix))
}

/// Builds the record for an event: cleans every text (private spans, injected context,
/// secrets, caps). `None` when the event is not stored (a skipped tool). Pure.
pub fn prepare(
    event: &Event,
    project: &str,
    cwd: &str,
    settings: &CaptureSettings,
    now: i64,
) -> Option<Record> {
    prepare_in(event, project, cwd, settings, now, None)
}

/// [`prepare`] with the secrets the event's session showed before (`session`): their
/// copies are removed too, and the secrets this event shows are added to it. Pure.
pub fn prepare_in(
    event: &Event,
    project: &str,
    cwd: &str,
    settings: &CaptureSettings,
    now: i64,
    session: Option<&mut Recurring>,
) -> Option<Record> {
    let p = Privacy::from_settings(settings);
    let common = event.common();
    let action = match event {
        Event::SessionStart { .. } => Action::Start,
        Event::UserPrompt {
            synthetic: true, ..
        } => Action::Touch,
        Event::UserPrompt { prompt, .. } => Action::Prompt {
            prompt_id: common.prompt_id.clone(),
            text: p.text_in(prompt, session),
        },
        Event::Tool { call, .. } => {
            if is_own_tool(&call.tool_name)
                || settings.skip_tools.iter().any(|t| t == &call.tool_name)
            {
                return None;
            }
            // Cleaned together: a secret found in one field is removed from all three.
            let error = call.error.clone().map(serde_json::Value::String);
            let [tool_input, tool_response, error] = p.values_in(
                [
                    &call.tool_input,
                    &call.tool_response,
                    error.as_ref().unwrap_or(&serde_json::Value::Null),
                ],
                session,
            );
            Action::Tool(ToolEvent {
                tool_name: call.tool_name.clone(),
                tool_use_id: call.tool_use_id.clone(),
                tool_input,
                tool_response,
                error: match error {
                    serde_json::Value::String(e) => Some(e),
                    _ => None,
                },
                failed: call.failed,
                is_interrupt: call.is_interrupt,
                cwd: cwd.to_string(),
                prompt_id: common.prompt_id.clone(),
                agent_id: call.agent_id.clone(),
                agent_type: call.agent_type.clone(),
                duration_ms: call.duration_ms,
                occurred_at: now,
            })
        }
        Event::BeforeTool { .. } => return None,
        Event::Stop {
            last_assistant_message,
            ..
        } => Action::TurnEnd(TurnEnd {
            last_assistant_message: p.text_in(last_assistant_message, session),
            cwd: cwd.to_string(),
            prompt_id: common.prompt_id.clone(),
            agent_id: None,
            agent_type: None,
            occurred_at: now,
        }),
        Event::SessionEnd { reason, .. } => Action::End {
            reason: reason.clone(),
            if_known: false,
        },
    };
    Some(Record {
        session_id: common.session_id.clone(),
        project: project.to_string(),
        cwd: cwd.to_string(),
        at: now,
        prompt_number: None,
        settings_unread: false,
        action,
    })
}
