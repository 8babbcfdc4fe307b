//! Claude Code hands its events to cairn: cairn's hooks in the settings files (as
//! [`claude_settings`] reads them) run a program that is there, or the cairn plugin is
//! enabled; and cairn is installed one way only. With neither, nothing is captured, and
//! the check fails.

use std::path::{Path, PathBuf};

use super::{Env, Finding, Level, finding, ok, read_json};
use crate::ops::claude_settings;

pub(super) fn find_program(program: &str, env: &Env) -> Option<PathBuf> {
    let expanded = match (program.strip_prefix("~/"), &env.home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(
            program.replace(
                "$HOME",
                &env.home
                    .as_ref()
                    .map(|h| h.display().to_string())
                    .unwrap_or_default(),
            ),
        ),
    };
    if expanded.components().count() > 1 {
        return is_executable(&expanded).then_some(expanded);
    }
    env.var("PATH")?
        .split(':')
        .map(|d| Path::new(d).join(&expanded))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks the hooks; returns the cairn plugins enabled (which bring the MCP server too).
pub(super) fn check_hooks(env: &Env, out: &mut Vec<Finding>) -> Vec<String> {
    let mut files = Vec::new();
    if let Some(claude) = env.claude() {
        files.push(claude.settings());
    }
    // A project's own settings, where doctor runs or in a directory above it (as the MCP
    // check looks for a project's `.mcp.json`).
    for dir in env.cwd.ancestors() {
        for name in [".claude/settings.json", ".claude/settings.local.json"] {
            let file = dir.join(name);
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    let mut hooked: Vec<String> = Vec::new();
    // Each way cairn is installed: a settings file with its hooks, or the plugin.
    let mut ways: Vec<String> = Vec::new();
    let mut plugins: Vec<String> = Vec::new();
    let mut unreadable: Vec<String> = Vec::new();
    for file in &files {
        let doc = match read_json(file, "hooks", "Claude Code ignores it as it is", out) {
            Ok(Some(doc)) => doc,
            Ok(None) => continue,
            Err(()) => {
                unreadable.push(file.display().to_string());
                continue;
            }
        };
        for plugin in claude_settings::enabled_cairn_plugins(&doc) {
            out.push(ok(
                "hooks",
                format!("the cairn plugin {plugin} is enabled in {}", file.display()),
            ));
            ways.push(format!("the plugin {plugin}"));
            if let Some(f) = plugin_installation(env, &plugin) {
                out.push(f);
            }
            plugins.push(plugin);
        }
        let hooks = claude_settings::cairn_hooks(&doc);
        if !hooks.is_empty() {
            ways.push(format!("hooks in {}", file.display()));
        }
        for hook in hooks {
            hooked.push(hook.event.clone());
            let Some(program) = claude_settings::command_program(&hook.command) else {
                continue;
            };
            match find_program(&program, env) {
                Some(found) => out.push(ok(
                    "hooks",
                    format!(
                        "{} in {} runs {}",
                        hook.event,
                        file.display(),
                        found.display()
                    ),
                )),
                None => out.push(finding(
                    "hooks",
                    Level::Fail,
                    format!(
                        "{} in {} runs {program}, which does not exist or is not executable",
                        hook.event,
                        file.display()
                    ),
                    Some(
                        "run `cairn install` again to point the hooks at the installed cairn-hook"
                            .into(),
                    ),
                )),
            }
        }
    }
    ways.dedup();
    if ways.len() > 1 {
        out.push(finding(
            "hooks",
            Level::Warn,
            format!(
                "cairn is installed {} ways at once ({}): every event is handed to cairn more than once",
                ways.len(),
                ways.join("; ")
            ),
            Some(
                "keep one: `cairn uninstall` (or `--project`) removes settings hooks; `claude plugin uninstall cairn@cairn` the plugin"
                    .into(),
            ),
        ));
    }
    if hooked.is_empty() && !plugins.is_empty() {
        // The plugin brings its own hooks.
        return plugins;
    }
    if hooked.is_empty() {
        let mut fix = String::new();
        if !unreadable.is_empty() {
            fix = format!(
                "fix {} (not valid JSON) if cairn's hooks are there; else ",
                unreadable.join(", ")
            );
        }
        fix.push_str(
            "run `cairn install` (every project; `--project` for this one), or install the plugin: `claude plugin install cairn@cairn`",
        );
        out.push(finding(
            "hooks",
            Level::Fail,
            format!(
                "nothing hands Claude Code's events to cairn here, so nothing is captured: no cairn hooks in {} or a project's settings above {}, and no cairn plugin",
                files[0].display(),
                env.cwd.display()
            ),
            Some(fix),
        ));
        return plugins;
    }
    // Exactly the events `cairn install` registers.
    let missing: Vec<&str> = crate::capture::hook::EventName::CAPTURED
        .iter()
        .map(|e| e.as_str())
        .filter(|e| !hooked.iter().any(|h| h == e))
        .collect();
    if !missing.is_empty() {
        out.push(finding(
            "hooks",
            Level::Warn,
            format!("no cairn hook for {}", missing.join(", ")),
            Some("run `cairn install` to add the missing hooks".into()),
        ));
    }
    plugins
}

/// How the plugin `cairn@<marketplace>`'s launcher fared installing cairn, from its data
/// dir (`<claude config>/plugins/data/cairn-<marketplace>`): a warning while an
/// installation failed (its reason, from `install.log`) or runs; nothing once installed.
fn plugin_installation(env: &Env, plugin: &str) -> Option<Finding> {
    let market = plugin.split_once('@')?.1;
    let config = env.claude()?.config;
    let data = config.join("plugins/data").join(format!("cairn-{market}"));
    let log = data.join("install.log");
    let fix = Some(format!(
        "see {}; `cairn-run install` in the plugin's bin directory tries again now",
        log.display()
    ));
    if data.join("bin/cairn").is_file() {
        return None;
    }
    if data.join(".installing").is_dir() {
        return Some(finding(
            "hooks",
            Level::Warn,
            format!(
                "the plugin {plugin} is installing cairn; its hooks capture nothing until it is done"
            ),
            Some(format!("progress: {}", log.display())),
        ));
    }
    if !data.join("install-failures").is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let why = text
        .lines()
        .rev()
        .find_map(|l| l.split_once("cairn is not installed: ").map(|(_, w)| w))
        .unwrap_or("the installation failed");
    Some(finding(
        "hooks",
        Level::Warn,
        format!("the plugin {plugin} could not install cairn: {why}"),
        fix,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{env, levels};
    use super::*;

    #[test]
    fn a_plugin_that_could_not_install_cairn_says_why() {
        let tmp = tempfile::tempdir().expect("tmp");
        let env = Env {
            home: Some(tmp.path().to_path_buf()),
            ..Env::default()
        };
        let data = tmp.path().join(".claude/plugins/data/cairn-cairn");
        assert_eq!(plugin_installation(&env, "cairn@cairn"), None);
        std::fs::create_dir_all(data.join(".installing")).expect("lock");
        let f = plugin_installation(&env, "cairn@cairn").expect("installing");
        assert!(f.message.contains("is installing cairn"), "{}", f.message);
        std::fs::remove_dir(data.join(".installing")).expect("unlock");
        std::fs::write(data.join("install-failures"), "1 0\n").expect("failures");
        std::fs::write(
            data.join("install.log"),
            "2026-11-24T05:00:00Z cairn is not installed: no cargo; and cannot download.\n\
             2026-11-24T05:00:00Z next automatic attempt in 30 s\n",
        )
        .expect("log");
        let f = plugin_installation(&env, "cairn@cairn").expect("failed");
        assert_eq!(f.level, Level::Warn);
        assert!(
            f.message
                .ends_with("could not install cairn: no cargo; and cannot download."),
            "{}",
            f.message
        );
        std::fs::create_dir_all(data.join("bin")).expect("bin");
        std::fs::write(data.join("bin/cairn"), "").expect("cairn");
        assert_eq!(plugin_installation(&env, "cairn@cairn"), None);
    }

    #[test]
    fn nothing_that_captures_fails_and_says_how_to_fix_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = env(tmp.path());
        let home = tmp.path().join("home/.claude");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(home.join("settings.json"), r#"{ "hooks": { "Stop": [ }"#).expect("write");
        let mut f = Vec::new();
        let plugins = check_hooks(&e, &mut f);
        assert!(plugins.is_empty());
        assert_eq!(
            levels(&f, "hooks"),
            vec![Level::Warn, Level::Fail],
            "{f:#?}"
        );
        assert!(
            f[1].message.contains("nothing is captured"),
            "{}",
            f[1].message
        );
        let fix = f[1].fix.as_deref().expect("fix");
        assert!(
            fix.contains("settings.json (not valid JSON)") && fix.contains("`cairn install`"),
            "{fix}"
        );
        // The plugin alone captures.
        std::fs::write(
            home.join("settings.json"),
            r#"{"enabledPlugins": {"cairn@cairn": true}}"#,
        )
        .expect("write");
        let mut f = Vec::new();
        assert_eq!(check_hooks(&e, &mut f), ["cairn@cairn"]);
        assert_eq!(levels(&f, "hooks"), vec![Level::Ok], "{f:#?}");
    }

    #[test]
    fn every_way_of_installing_is_recognised_and_two_at_once_warned() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = env(tmp.path());
        let home = tmp.path().join("home/.claude");
        let work = tmp.path().join("work/.claude");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(&work).expect("work");
        let hook = tmp.path().join("cairn-hook");
        std::fs::write(&hook, "#!/bin/sh\n").expect("hook");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let hooks = |cmd: &str| {
            let (doc, _) =
                crate::ops::install::install(&serde_json::Value::Null, cmd).expect("install");
            doc
        };
        let run_hooks = |e: &Env| {
            let mut out = Vec::new();
            check_hooks(e, &mut out);
            out
        };
        // The plugin alone: installed, no "no cairn hooks".
        std::fs::write(
            home.join("settings.json"),
            r#"{"enabledPlugins": {"cairn@cairn": true, "other@x": true}}"#,
        )
        .expect("write");
        let f = run_hooks(&e);
        assert_eq!(levels(&f, "hooks"), vec![Level::Ok], "{f:#?}");
        // Plus project hooks in settings.local.json: two ways, warned.
        std::fs::write(
            work.join("settings.local.json"),
            hooks(&hook.display().to_string()).to_string(),
        )
        .expect("write");
        let f = run_hooks(&e);
        let warn: Vec<&Finding> = f.iter().filter(|x| x.level == Level::Warn).collect();
        assert_eq!(warn.len(), 1, "{f:#?}");
        assert!(warn[0].message.contains("2 ways"), "{}", warn[0].message);
        // A disabled plugin is not a way.
        std::fs::write(
            home.join("settings.json"),
            r#"{"enabledPlugins": {"cairn@cairn": false}}"#,
        )
        .expect("write");
        let f = run_hooks(&e);
        assert!(f.iter().all(|x| x.level == Level::Ok), "{f:#?}");
    }
}
