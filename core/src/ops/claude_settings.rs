//! Reading cairn's parts in a Claude Code settings document (`settings.json`,
//! `settings.local.json`): which hook entries are cairn's, and which cairn plugins are
//! enabled; and in a document of MCP servers (`~/.claude.json`, `.mcp.json`), which
//! server is cairn's. [`install`](super::install) changes the entries this reader finds
//! and [`doctor`](super::doctor) checks them, so both agree on what is cairn's.
//!
//! Claude Code's shape: `{"hooks": {"<Event>": [{"matcher": "*", "hooks": [{"type":
//! "command", "command": "..."}]}]}, "enabledPlugins": {"cairn@<marketplace>": true}}`.
//! A hook entry is cairn's when the program its command runs (the first word after any
//! `NAME=value` assignments, unquoted as the shell would) has the file name
//! [`HOOK_PROGRAM`] or [`PLUGIN_LAUNCHER`]: `"/x y/cairn-hook"` and
//! `CAIRN_LOG=debug ~/bin/cairn-hook` are, `echo cairn-hook` and `cairn-hooks` are not.
//!
//! Invariants: pure; never fails on a document of another shape (what is not where Claude
//! Code puts it is not there).

use std::path::Path;

use serde_json::Value;

/// The hook binary's file name.
pub const HOOK_PROGRAM: &str = "cairn-hook";
/// The plugin's launcher, which finds or installs cairn's binaries and runs one of them
/// (`"${CLAUDE_PLUGIN_ROOT}/bin/cairn-run" cairn-hook`).
pub const PLUGIN_LAUNCHER: &str = "cairn-run";

/// The name cairn's MCP server is registered under.
pub const MCP_NAME: &str = "cairn";

/// A hook command found in a Claude Code settings document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    pub event: String,
    pub command: String,
}

/// The program a command line runs: its first word that is not a `NAME=value` assignment,
/// with the shell's quotes and backslashes taken away. `None` when there is none.
pub fn command_program(command: &str) -> Option<String> {
    let mut rest = command;
    loop {
        let (word, after) = shell_word(rest)?;
        if !is_assignment(rest.trim_start()) {
            return Some(word);
        }
        rest = after;
    }
}

/// True when a command runs cairn's hook binary or the plugin's launcher.
pub fn is_cairn_command(command: &str) -> bool {
    command_program(command).is_some_and(|p| {
        Path::new(&p)
            .file_name()
            .is_some_and(|n| n == HOOK_PROGRAM || n == PLUGIN_LAUNCHER)
    })
}

/// cairn's hook commands in a settings document, event by event in the file's order.
pub fn cairn_hooks(settings: &Value) -> Vec<HookCommand> {
    let Some(events) = settings.get("hooks").and_then(Value::as_object) else {
        return Vec::new();
    };
    events
        .iter()
        .flat_map(|(event, groups)| {
            groups
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.get("hooks").and_then(Value::as_array))
                .flatten()
                .filter_map(|h| h.get("command").and_then(Value::as_str))
                .filter(|c| is_cairn_command(c))
                .map(move |c| HookCommand {
                    event: event.clone(),
                    command: c.to_string(),
                })
        })
        .collect()
}

/// The cairn plugins a settings document enables (`enabledPlugins`, keys
/// `cairn@<marketplace>` set to true).
pub fn enabled_cairn_plugins(settings: &Value) -> Vec<String> {
    settings
        .get("enabledPlugins")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, v)| k.split('@').next() == Some("cairn") && v.as_bool() == Some(true))
        .map(|(k, _)| k.clone())
        .collect()
}

/// An MCP server entry that is cairn's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    pub name: String,
    /// The program it runs (`command`, not a shell line).
    pub command: String,
}

/// cairn's MCP servers in the `mcpServers` of a document (`~/.claude.json`, one of its
/// `projects` entries, a project's `.mcp.json`): the one named [`MCP_NAME`], and any
/// other whose program is named `cairn` and whose first argument is `mcp`.
pub fn cairn_mcp_servers(doc: &Value) -> Vec<McpServer> {
    doc.get("mcpServers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, server)| {
            let command = server.get("command").and_then(Value::as_str)?;
            let runs_cairn = Path::new(command).file_name().is_some_and(|n| n == "cairn")
                && server
                    .get("args")
                    .and_then(|a| a.get(0))
                    .and_then(Value::as_str)
                    == Some("mcp");
            (name == MCP_NAME || runs_cairn).then(|| McpServer {
                name: name.clone(),
                command: command.to_string(),
            })
        })
        .collect()
}

/// Which of Claude Code's settings files enables a plugin: `~/.claude/settings.json`
/// (`User`), a project's `.claude/settings.json` (`Project`) or its
/// `.claude/settings.local.json` (`Local`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    Project,
    Local,
}

/// The command that removes an enabled plugin from where `scope` enabled it (`Project` and
/// `Local` run in the project's directory).
pub fn plugin_uninstall_command(plugin: &str, scope: Scope) -> String {
    match scope {
        Scope::User => format!("claude plugin uninstall {plugin}"),
        Scope::Project => format!("claude plugin uninstall {plugin} --scope project"),
        Scope::Local => format!("claude plugin uninstall {plugin} --scope local"),
    }
}

/// The first shell word of `s`, unquoted, and what follows it; `None` when `s` is blank.
fn shell_word(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let mut word = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => return Some((word, &s[i..])),
            '\'' => word.extend(chars.by_ref().map(|(_, c)| c).take_while(|&c| c != '\'')),
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next().map(|(_, c)| c)),
                        c => word.push(c),
                    }
                }
            }
            '\\' => word.extend(chars.next().map(|(_, c)| c)),
            c => word.push(c),
        }
    }
    Some((word, ""))
}

/// True when the shell word starting `s` is a variable assignment (`NAME=…`, the name
/// unquoted).
fn is_assignment(s: &str) -> bool {
    let name_len = s
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    name_len > 0 && !s.as_bytes()[0].is_ascii_digit() && s.as_bytes().get(name_len) == Some(&b'=')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_of_command_lines() {
        fn check(command: &str, want: Option<&str>) {
            assert_eq!(command_program(command).as_deref(), want, "{command:?}");
        }
        check("cairn-hook", Some("cairn-hook"));
        check("  /usr/bin/cairn-hook --flag", Some("/usr/bin/cairn-hook"));
        check("'/home/a b/cairn-hook'", Some("/home/a b/cairn-hook"));
        check(
            r"'/home/a b/it'\''s/cairn-hook'",
            Some("/home/a b/it's/cairn-hook"),
        );
        check("\"/x/cairn-hook\" SessionStart", Some("/x/cairn-hook"));
        check(r#""/x \"q\"/cairn-hook""#, Some(r#"/x "q"/cairn-hook"#));
        check(r"/x\ y/cairn-hook", Some("/x y/cairn-hook"));
        check("CAIRN_X=1 cairn-hook", Some("cairn-hook"));
        check(
            "A=1 B='x y' \"$HOME/bin/cairn-hook\"",
            Some("$HOME/bin/cairn-hook"),
        );
        check("'A=1' cairn-hook", Some("A=1"));
        check("1A=2 x", Some("1A=2"));
        check(
            "\"${CLAUDE_PLUGIN_ROOT}/bin/cairn-run\" cairn-hook",
            Some("${CLAUDE_PLUGIN_ROOT}/bin/cairn-run"),
        );
        check("", None);
        check("   ", None);
        check("X=1", None);
    }

    #[test]
    fn which_commands_are_cairns() {
        for (command, cairns) in [
            ("cairn-hook", true),
            ("'/home/a b/cairn-hook'", true),
            ("\"/x/cairn-hook\" SessionStart", true),
            ("CAIRN_LOG=debug ~/bin/cairn-hook", true),
            ("\"${CLAUDE_PLUGIN_ROOT}/bin/cairn-run\" cairn-hook", true),
            ("cairn-hooks", false),
            ("echo cairn-hook", false),
            ("/usr/bin/env cairn-hook", false),
            ("/opt/cairn-hook/run", false),
            ("prettier --write", false),
        ] {
            assert_eq!(is_cairn_command(command), cairns, "{command:?}");
        }
    }

    #[test]
    fn finds_cairns_hooks_and_plugins() {
        let doc = serde_json::json!({
            "hooks": {
                "Stop": [{"hooks": [
                    {"type": "command", "command": "\"/opt/x/cairn-hook\" stop"},
                    {"type": "command", "command": "say cairn-hook done"}
                ]}],
                "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "other-tool"}]}],
                "SessionStart": [{"hooks": [{"type": "command"}]}, {"hooks": {}}, 3],
                "Notification": {}
            },
            "enabledPlugins": {"cairn@cairn": true, "cairn@old": false, "other@x": true, "cairnish@y": true}
        });
        assert_eq!(
            cairn_hooks(&doc),
            vec![HookCommand {
                event: "Stop".into(),
                command: "\"/opt/x/cairn-hook\" stop".into()
            }]
        );
        assert_eq!(enabled_cairn_plugins(&doc), vec!["cairn@cairn".to_string()]);
        assert_eq!(
            plugin_uninstall_command("cairn@cairn", Scope::User),
            "claude plugin uninstall cairn@cairn"
        );
        assert_eq!(
            plugin_uninstall_command("cairn@x", Scope::Local),
            "claude plugin uninstall cairn@x --scope local"
        );
        let servers = serde_json::json!({"mcpServers": {
            "cairn": {"type": "stdio", "command": "/opt/bin/cairn", "args": ["mcp"]},
            "memory": {"command": "cairn", "args": ["mcp"]},
            "other": {"command": "/usr/bin/cairn", "args": ["search"]},
            "broken": {"args": ["mcp"]}
        }});
        let names: Vec<String> = cairn_mcp_servers(&servers)
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["cairn", "memory"]);
        for other in [
            serde_json::json!({"model": "x"}),
            serde_json::json!({"hooks": []}),
            serde_json::json!([1]),
            Value::Null,
        ] {
            assert!(cairn_hooks(&other).is_empty());
            assert!(enabled_cairn_plugins(&other).is_empty());
            assert!(cairn_mcp_servers(&other).is_empty());
        }
    }
}
