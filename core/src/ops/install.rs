//! cairn's hooks in Claude Code's `settings.json`: merging them in, taking them out, and
//! telling whether they are there. Pure: values in, values out; the CLI reads and writes the
//! file.
//!
//! Claude Code's shape: `{"hooks": {"<Event>": [{"matcher": "*", "hooks": [{"type":
//! "command", "command": "..."}]}]}}`. cairn adds one group per captured event whose single
//! hook runs `cairn-hook`; which hooks are cairn's is [`claude_settings`]' rule, the one
//! `cairn doctor` uses too.
//!
//! Invariants: [`install`] is idempotent and touches nothing but cairn's own entries (a
//! stale cairn entry, say from a binary that moved, is replaced); [`uninstall`] removes
//! exactly cairn's entries, and the groups, event lists and `hooks` object that are left
//! empty by that; every other key and hook is kept as it was.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::capture::hook::EventName;
use crate::error::{Error, Result};
use crate::ops::claude_settings::{self, is_cairn_command};

pub use crate::ops::claude_settings::{HOOK_PROGRAM, MCP_NAME};

/// The command line Claude Code runs: the program's absolute path, shell-quoted when
/// needed (Claude Code runs hook commands through a shell).
pub fn hook_command(program: &Path) -> String {
    let s = program.to_string_lossy();
    let safe = s
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&c));
    if safe && !s.is_empty() {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The matcher cairn uses for an event (`*` for tool events, the tools that read or edit
/// a file before a call, none otherwise).
fn matcher(event: EventName) -> Option<&'static str> {
    match event {
        EventName::PostToolUse | EventName::PostToolUseFailure => Some("*"),
        EventName::PreToolUse => Some(crate::capture::hook::FILE_TOOLS_MATCHER),
        _ => None,
    }
}

/// What happened to one event's hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventChange {
    Added,
    /// A cairn hook with another command (an old path) was replaced.
    Updated,
    Unchanged,
    Removed,
}

/// Per captured event, what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub events: Vec<(String, EventChange)>,
}

impl Changes {
    /// True when the settings changed.
    pub fn changed(&self) -> bool {
        self.events
            .iter()
            .any(|(_, c)| *c != EventChange::Unchanged)
    }

    /// The events with a given change.
    pub fn with(&self, change: EventChange) -> Vec<&str> {
        self.events
            .iter()
            .filter(|(_, c)| *c == change)
            .map(|(e, _)| e.as_str())
            .collect()
    }
}

fn hooks_object(settings: &mut Value, create: bool) -> Result<Option<&mut Map<String, Value>>> {
    if settings.is_null() {
        *settings = Value::Object(Map::new());
    }
    let Value::Object(root) = settings else {
        return Err(Error::Invalid("settings file is not a JSON object".into()));
    };
    if !root.contains_key("hooks") {
        if !create {
            return Ok(None);
        }
        root.insert("hooks".into(), Value::Object(Map::new()));
    }
    match root.get_mut("hooks") {
        Some(Value::Object(h)) => Ok(Some(h)),
        _ => Err(Error::Invalid(
            "\"hooks\" in the settings file is not an object".into(),
        )),
    }
}

/// Removes cairn's hooks from one event's list of groups; returns how many commands were
/// removed and whether one of them was `keep` (then that one is the only one kept).
fn remove_cairn(groups: &mut Vec<Value>, keep: Option<&str>) -> (usize, bool) {
    let mut removed = 0;
    let mut kept = false;
    groups.retain_mut(|group| {
        let Some(hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
            return true;
        };
        let before = hooks.len();
        hooks.retain(|h| {
            let Some(cmd) = h.get("command").and_then(Value::as_str) else {
                return true;
            };
            if !is_cairn_command(cmd) {
                return true;
            }
            if !kept && Some(cmd) == keep {
                kept = true;
                return true;
            }
            removed += 1;
            false
        });
        !(before > 0 && hooks.is_empty())
    });
    (removed, kept)
}

/// Adds cairn's hook for every captured event, running `command`.
pub fn install(settings: &Value, command: &str) -> Result<(Value, Changes)> {
    let mut out = settings.clone();
    let hooks = hooks_object(&mut out, true)?.ok_or_else(|| Error::Invalid("no hooks".into()))?;
    let mut events = Vec::new();
    for event in EventName::CAPTURED {
        let name = event.as_str();
        let list = hooks
            .entry(name.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(groups) = list else {
            return Err(Error::Invalid(format!(
                "\"hooks.{name}\" in the settings file is not a list"
            )));
        };
        let (removed, kept) = remove_cairn(groups, Some(command));
        let change = match (kept, removed) {
            (true, 0) => EventChange::Unchanged,
            (true, _) => EventChange::Updated,
            (false, n) => {
                let mut group = Map::new();
                if let Some(m) = matcher(event) {
                    group.insert("matcher".into(), json!(m));
                }
                group.insert(
                    "hooks".into(),
                    json!([{"type": "command", "command": command}]),
                );
                groups.push(Value::Object(group));
                if n == 0 {
                    EventChange::Added
                } else {
                    EventChange::Updated
                }
            }
        };
        events.push((name.to_string(), change));
    }
    Ok((out, Changes { events }))
}

/// Removes every cairn hook of the captured events, and what is left empty by that.
pub fn uninstall(settings: &Value) -> Result<(Value, Changes)> {
    let mut out = settings.clone();
    let mut events = Vec::new();
    let Some(hooks) = hooks_object(&mut out, false)? else {
        let events = EventName::CAPTURED
            .iter()
            .map(|e| (e.as_str().to_string(), EventChange::Unchanged))
            .collect();
        return Ok((out, Changes { events }));
    };
    for event in EventName::CAPTURED {
        let name = event.as_str();
        let mut change = EventChange::Unchanged;
        if let Some(Value::Array(groups)) = hooks.get_mut(name) {
            let had = !groups.is_empty();
            let (removed, _) = remove_cairn(groups, None);
            if removed > 0 {
                change = EventChange::Removed;
                if had && groups.is_empty() {
                    hooks.shift_remove(name);
                }
            }
        }
        events.push((name.to_string(), change));
    }
    let changes = Changes { events };
    if changes.changed()
        && hooks.is_empty()
        && let Value::Object(root) = &mut out
    {
        root.shift_remove("hooks");
    }
    Ok((out, changes))
}

/// Registers cairn's MCP server (`command mcp`, stdio) in a document holding
/// `mcpServers` (`~/.claude.json` for the user scope, a project's `.mcp.json`). Returns the
/// new document and whether it changed; every other server and key is kept.
pub fn add_mcp(doc: &Value, command: &str) -> Result<(Value, bool)> {
    let mut out = doc.clone();
    if out.is_null() {
        out = Value::Object(Map::new());
    }
    let Value::Object(root) = &mut out else {
        return Err(Error::Invalid("the file is not a JSON object".into()));
    };
    let servers = root
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(servers) = servers else {
        return Err(Error::Invalid("\"mcpServers\" is not an object".into()));
    };
    let want = json!({"type": "stdio", "command": command, "args": ["mcp"]});
    if servers.get(MCP_NAME) == Some(&want) {
        return Ok((doc.clone(), false));
    }
    servers.insert(MCP_NAME.into(), want);
    Ok((out, true))
}

/// Removes cairn's MCP server, and `mcpServers` when that leaves it empty. Returns the new
/// document and whether it changed.
pub fn remove_mcp(doc: &Value) -> Result<(Value, bool)> {
    let mut out = doc.clone();
    let Some(Value::Object(servers)) = out.get_mut("mcpServers") else {
        return Ok((out, false));
    };
    if servers.shift_remove(MCP_NAME).is_none() {
        return Ok((doc.clone(), false));
    }
    if servers.is_empty()
        && let Value::Object(root) = &mut out
    {
        root.shift_remove("mcpServers");
    }
    Ok((out, true))
}

/// True when a document holding `mcpServers` registers cairn's MCP server.
pub fn has_mcp(doc: &Value) -> bool {
    doc.get("mcpServers")
        .and_then(|s| s.get(MCP_NAME))
        .is_some()
}

/// Among [`McpUsers`], the user-wide install (`cairn install`); a project's install is its
/// absolute directory.
pub const USER_INSTALL: &str = "user";

/// The installs that use cairn's MCP server registered in `~/.claude.json` (user scope):
/// `cairn install` ([`USER_INSTALL`]) and each `cairn install --project DIR` (the
/// directory), whether it registered the server or found it there. Both kinds register
/// it in the same place, so an uninstall removes it only when it was the last install
/// using it: a project's uninstall never takes the server from under the user-wide
/// install, nor from another project's. Kept by the CLI as a note in the data dir
/// ([`McpUsers::note`], a JSON list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpUsers {
    installs: Vec<String>,
}

impl McpUsers {
    /// The users from the note's text (`None`: no note). Without a note (an older cairn's
    /// install, or a registration made by hand) a registration that is there counts as
    /// the user-wide install's, so only `cairn uninstall` removes it. A note that cannot
    /// be read counts as none; a note while no registration is there (removed by hand)
    /// names nobody.
    pub fn read(note: Option<&str>, registered: bool) -> Self {
        let noted = note.and_then(|t| serde_json::from_str::<Vec<String>>(t).ok());
        let installs = match noted {
            Some(list) if registered => list,
            None if registered => vec![USER_INSTALL.to_string()],
            Some(_) | None => Vec::new(),
        };
        Self { installs }
    }

    /// Keeps the user-wide install and the projects `exists` says are still there: a
    /// project directory deleted since cannot be uninstalled, and must not pin the server.
    pub fn keep_existing(&mut self, exists: impl Fn(&str) -> bool) {
        self.installs.retain(|i| i == USER_INSTALL || exists(i));
    }

    /// The note's text.
    pub fn note(&self) -> String {
        serde_json::to_string(&self.installs).unwrap_or_else(|_| "[]".into())
    }

    /// `install` uses the server (once however often it is added).
    pub fn add(&mut self, install: &str) {
        if !self.installs.iter().any(|i| i == install) {
            self.installs.push(install.to_string());
        }
    }

    /// `install` no longer uses it.
    pub fn remove(&mut self, install: &str) {
        self.installs.retain(|i| i != install);
    }

    /// The installs that use it, in the order they came.
    pub fn installs(&self) -> &[String] {
        &self.installs
    }
}

/// Whether cairn's hook is set for one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HookState {
    Missing,
    /// Present with the expected command.
    Installed,
    /// Present, but running another `cairn-hook` (an old path).
    OtherCommand {
        command: String,
    },
}

/// What [`detect`] found, per captured event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detection {
    pub events: Vec<(String, HookState)>,
}

impl Detection {
    /// Every captured event has cairn's hook with the expected command.
    pub fn complete(&self) -> bool {
        self.events.iter().all(|(_, s)| *s == HookState::Installed)
    }

    /// No captured event has a cairn hook.
    pub fn absent(&self) -> bool {
        self.events.iter().all(|(_, s)| *s == HookState::Missing)
    }
}

/// Which captured events have cairn's hook in these settings (for `cairn doctor`).
pub fn detect(settings: &Value, command: &str) -> Detection {
    let found = claude_settings::cairn_hooks(settings);
    let events = EventName::CAPTURED
        .iter()
        .map(|event| {
            let name = event.as_str();
            let commands: Vec<&str> = found
                .iter()
                .filter(|h| h.event == name)
                .map(|h| h.command.as_str())
                .collect();
            let state = if commands.contains(&command) {
                HookState::Installed
            } else if let Some(other) = commands.first() {
                HookState::OtherCommand {
                    command: (*other).to_string(),
                }
            } else {
                HookState::Missing
            };
            (name.to_string(), state)
        })
        .collect();
    Detection { events }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_server_is_added_and_removed_keeping_the_rest() {
        let doc = json!({"numStartups": 3, "mcpServers": {"other": {"command": "x"}}});
        let (added, changed) = add_mcp(&doc, "cairn").expect("add");
        assert!(changed);
        assert_eq!(added["numStartups"], 3);
        assert_eq!(added["mcpServers"]["other"], doc["mcpServers"]["other"]);
        assert_eq!(
            added["mcpServers"]["cairn"],
            json!({"type": "stdio", "command": "cairn", "args": ["mcp"]})
        );
        assert_eq!(
            add_mcp(&added, "cairn").expect("again"),
            (added.clone(), false)
        );
        let (removed, changed) = remove_mcp(&added).expect("remove");
        assert!(changed);
        assert_eq!(removed, doc);
        assert!(!remove_mcp(&removed).expect("again").1);
        let (alone, _) = add_mcp(&Value::Null, "/opt/cairn").expect("new");
        assert_eq!(remove_mcp(&alone).expect("remove").0, json!({}));
        assert!(add_mcp(&json!({"mcpServers": []}), "c").is_err());
    }

    #[test]
    fn the_mcp_server_stays_while_an_install_uses_it() {
        // `cairn install`, then a project's install, which finds it there.
        let mut users = McpUsers::read(None, false);
        users.add(USER_INSTALL);
        let mut users = McpUsers::read(Some(&users.note()), true);
        users.add("/src/acme");
        users.add("/src/acme");
        assert_eq!(users.installs(), [USER_INSTALL, "/src/acme"]);
        // The project's uninstall leaves it to the user-wide install, and the other way.
        let mut after_project = users.clone();
        after_project.remove("/src/acme");
        assert_eq!(after_project.installs(), [USER_INSTALL]);
        users.remove(USER_INSTALL);
        assert_eq!(users.installs(), ["/src/acme"]);
        users.remove("/src/acme");
        assert!(users.installs().is_empty());
        // No note: a registration there is the user-wide install's.
        assert_eq!(McpUsers::read(None, true).installs(), [USER_INSTALL]);
        assert_eq!(
            McpUsers::read(Some("{bad"), true).installs(),
            [USER_INSTALL]
        );
        assert!(McpUsers::read(Some("[]"), true).installs().is_empty());
        // A note outliving its registration (removed by hand) names nobody.
        let both = r#"["user","/src/acme"]"#;
        assert!(McpUsers::read(Some(both), false).installs().is_empty());
        // A project deleted since no longer pins it.
        let mut users = McpUsers::read(Some(both), true);
        users.keep_existing(|dir| dir != "/src/acme");
        assert_eq!(users.installs(), [USER_INSTALL]);
        assert!(has_mcp(&add_mcp(&Value::Null, "cairn").expect("add").0));
        assert!(!has_mcp(&json!({"mcpServers": {"other": {}}})));
    }

    const CMD: &str = "/opt/cairn/bin/cairn-hook";

    fn user_settings() -> Value {
        json!({
            "model": "opus",
            "permissions": {"allow": ["Bash(ls:*)"]},
            "hooks": {
                "PostToolUse": [
                    {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "prettier --write"}]}
                ],
                "Notification": [
                    {"hooks": [{"type": "command", "command": "notify-send hi"}]}
                ]
            }
        })
    }

    #[test]
    fn install_merges_idempotently_and_uninstall_restores() {
        let before = user_settings();
        let (once, changes) = install(&before, CMD).expect("install");
        assert_eq!(changes.with(EventChange::Added).len(), 7);
        assert!(detect(&once, CMD).complete());
        assert_eq!(once["model"], "opus");
        assert_eq!(
            once["hooks"]["Notification"],
            before["hooks"]["Notification"]
        );
        let post = once["hooks"]["PostToolUse"].as_array().expect("list");
        assert_eq!(post.len(), 2);
        assert_eq!(post[0], before["hooks"]["PostToolUse"][0]);
        assert_eq!(post[1]["matcher"], "*");
        assert_eq!(post[1]["hooks"][0]["command"], CMD);
        assert!(once["hooks"]["Stop"][0].get("matcher").is_none());

        let (twice, changes) = install(&once, CMD).expect("again");
        assert!(!changes.changed());
        assert_eq!(twice, once);

        // The person's keys keep their order (Value equality ignores it; the text does not).
        let keys: Vec<&String> = once.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["model", "permissions", "hooks"]);
        let event_keys: Vec<&String> = once["hooks"].as_object().expect("hooks").keys().collect();
        assert_eq!(&event_keys[..2], ["PostToolUse", "Notification"]);

        let (after, changes) = uninstall(&twice).expect("uninstall");
        assert_eq!(changes.with(EventChange::Removed).len(), 7);
        assert_eq!(after, before);
        assert_eq!(
            serde_json::to_string(&after).expect("text"),
            serde_json::to_string(&before).expect("text")
        );
        assert!(detect(&after, CMD).absent());
        let (again, changes) = uninstall(&after).expect("uninstall again");
        assert!(!changes.changed());
        assert_eq!(again, before);
    }

    #[test]
    fn a_moved_binary_is_updated_not_duplicated() {
        let (old, _) = install(&json!({}), "/old/place/cairn-hook").expect("install");
        assert!(matches!(
            detect(&old, CMD).events[0].1,
            HookState::OtherCommand { .. }
        ));
        let (new, changes) = install(&old, CMD).expect("update");
        assert_eq!(changes.with(EventChange::Updated).len(), 7);
        assert!(detect(&new, CMD).complete());
        assert_eq!(new["hooks"]["Stop"].as_array().expect("list").len(), 1);
        let (gone, _) = uninstall(&new).expect("uninstall");
        assert_eq!(gone, json!({}));
    }

    #[test]
    fn shared_groups_keep_the_other_hooks() {
        let s = json!({"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": "'/x y/cairn-hook' --flag"},
            {"type": "command", "command": "say done"}
        ]}]}});
        let (out, _) = uninstall(&s).expect("uninstall");
        assert_eq!(
            out,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}})
        );
    }

    #[test]
    fn commands_and_bad_shapes() {
        assert_eq!(
            hook_command(Path::new("/usr/bin/cairn-hook")),
            "/usr/bin/cairn-hook"
        );
        assert_eq!(
            hook_command(Path::new("/home/a b/it's/cairn-hook")),
            r"'/home/a b/it'\''s/cairn-hook'"
        );
        assert!(is_cairn_command("'/home/a b/cairn-hook'"));
        assert!(is_cairn_command("\"/x/cairn-hook\" SessionStart"));
        assert!(is_cairn_command("cairn-hook"));
        assert!(!is_cairn_command("cairn-hooks"));
        assert!(!is_cairn_command("echo cairn-hook"));
        assert!(install(&json!([1]), CMD).is_err());
        assert!(install(&json!({"hooks": []}), CMD).is_err());
        assert!(install(&json!({"hooks": {"Stop": {}}}), CMD).is_err());
        let (v, _) = install(&Value::Null, CMD).expect("empty file");
        assert!(detect(&v, CMD).complete());
    }
}
