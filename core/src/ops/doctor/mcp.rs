//! Claude Code offers cairn's tools: cairn's MCP server (as [`claude_settings`] tells it)
//! is registered in `~/.claude.json` (user scope, or the local scope of the working
//! directory or one above it), in a `.mcp.json` of the working directory or one above it,
//! or brought by an enabled cairn plugin; and the program it runs is there. Without it
//! capture still works, but Claude cannot search its memory by itself: a warning.

use std::path::Path;

use serde_json::Value;

use super::hooks::find_program;
use super::{Env, Finding, Level, finding, ok};
use crate::ops::claude_settings;

/// Checks the MCP server; `plugins` are the enabled cairn plugins (`hooks` found them).
pub(super) fn check_mcp(env: &Env, plugins: &[String], out: &mut Vec<Finding>) {
    for plugin in plugins {
        out.push(ok(
            "mcp",
            format!("the plugin {plugin} brings cairn's MCP server"),
        ));
    }
    let dirs: Vec<&Path> = env.cwd.ancestors().collect();
    // (where, the document holding `mcpServers`)
    let mut places: Vec<(String, Value)> = Vec::new();
    let user = env.claude().map(|c| c.user_file);
    if let Some(user) = &user
        && let Some(mut doc) = read_json(user, out)
    {
        let projects = doc.get_mut("projects").map(Value::take);
        for dir in &dirs {
            if let Some(local) = projects.as_ref().and_then(|p| p.get(dir.to_str()?)) {
                places.push((
                    format!("{} (local scope of {})", user.display(), dir.display()),
                    local.clone(),
                ));
            }
        }
        places.push((format!("{} (user scope)", user.display()), doc));
    }
    for dir in &dirs {
        let file = dir.join(".mcp.json");
        if let Some(doc) = read_json(&file, out) {
            places.push((file.display().to_string(), doc));
        }
    }
    let mut found = !plugins.is_empty();
    for (place, doc) in &places {
        for server in claude_settings::cairn_mcp_servers(doc) {
            found = true;
            let name = &server.name;
            out.push(match find_program(&server.command, env) {
                Some(program) => ok(
                    "mcp",
                    format!(
                        "cairn's MCP server \"{name}\" in {place} runs {}",
                        program.display()
                    ),
                ),
                None => finding(
                    "mcp",
                    Level::Warn,
                    format!(
                        "cairn's MCP server \"{name}\" in {place} runs {}, which does not exist or is not executable",
                        server.command
                    ),
                    Some("run `cairn install` again to point it at the installed cairn".into()),
                ),
            });
        }
    }
    if !found {
        let user = user.map_or("~/.claude.json".into(), |u| u.display().to_string());
        out.push(finding(
            "mcp",
            Level::Warn,
            format!(
                "cairn's MCP server is not registered (not in {user}, nor in a .mcp.json here or above, and no cairn plugin): Claude cannot search its memory by itself"
            ),
            Some(
                "run `cairn install` (or `cairn install --project --shared` for this project's .mcp.json)"
                    .into(),
            ),
        ));
    }
}

/// A file's document; `None` when it is missing or, with a warning, not JSON.
fn read_json(file: &Path, out: &mut Vec<Finding>) -> Option<Value> {
    super::read_json(
        file,
        "mcp",
        "Claude Code cannot read its MCP servers as it is",
        out,
    )
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{env, levels};
    use super::*;

    #[test]
    fn the_server_is_found_wherever_claude_code_reads_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = env(tmp.path());
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(e.cwd.join("sub")).expect("work");
        let cairn = tmp.path().join("cairn");
        std::fs::write(&cairn, "#!/bin/sh\n").expect("cairn");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cairn, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let check = |e: &Env, plugins: &[String]| {
            let mut out = Vec::new();
            check_mcp(e, plugins, &mut out);
            out
        };
        let server = |command: &str| serde_json::json!({"mcpServers": {"cairn": {"type": "stdio", "command": command, "args": ["mcp"]}}});
        // Nowhere: a warning that says how to register it.
        let f = check(&e, &[]);
        assert_eq!(levels(&f, "mcp"), vec![Level::Warn], "{f:#?}");
        assert!(
            f[0].fix
                .as_deref()
                .is_some_and(|x| x.contains("cairn install"))
        );
        // Brought by the plugin.
        let f = check(&e, &["cairn@cairn".to_string()]);
        assert_eq!(levels(&f, "mcp"), vec![Level::Ok], "{f:#?}");
        // User scope, running a program that is there.
        let user = home.join(".claude.json");
        std::fs::write(&user, server(&cairn.display().to_string()).to_string()).expect("write");
        let f = check(&e, &[]);
        assert_eq!(levels(&f, "mcp"), vec![Level::Ok], "{f:#?}");
        // Local scope of the working directory's parent; user scope gone.
        let mut doc = serde_json::json!({"projects": {}});
        doc["projects"][e.cwd.display().to_string()] = server(&cairn.display().to_string());
        std::fs::write(&user, doc.to_string()).expect("write");
        let sub = Env {
            cwd: e.cwd.join("sub"),
            ..e.clone()
        };
        let f = check(&sub, &[]);
        assert_eq!(levels(&f, "mcp"), vec![Level::Ok], "{f:#?}");
        assert!(f[0].message.contains("local scope"), "{}", f[0].message);
        // A project's .mcp.json naming a program that is nowhere: a warning to fix it.
        std::fs::write(&user, "{}").expect("write");
        std::fs::write(e.cwd.join(".mcp.json"), server("/gone/cairn").to_string()).expect("write");
        let f = check(&sub, &[]);
        assert_eq!(levels(&f, "mcp"), vec![Level::Warn], "{f:#?}");
        assert!(f[0].message.contains("/gone/cairn"), "{}", f[0].message);
    }
}
