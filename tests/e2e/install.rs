//! `cairn install` / `cairn uninstall` on real settings files.

use serde_json::{Value, json};

use crate::support::{TestEnv, bin, stderr, stdout};

fn existing_settings() -> Value {
    json!({
        "model": "opus",
        "env": {"FOO": "bar"},
        "permissions": {"allow": ["Bash(git status:*)"], "deny": []},
        "hooks": {
            "PostToolUse": [
                {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "npx prettier --write", "timeout": 30}]}
            ],
            "Stop": [
                {"hooks": [{"type": "command", "command": "say done"}]}
            ],
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/local/bin/guard"}]}
            ]
        }
    })
}

fn read(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read settings")).expect("json")
}

fn backups(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".cairn-backup-"))
        .collect();
    v.sort();
    v
}

/// Backups of `settings.json` files, kept in the data dir.
fn settings_backups(env: &TestEnv) -> Vec<std::path::PathBuf> {
    backups(&env.data_dir.join("install-backups"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("settings.json.cairn-backup-"))
        .collect()
}

#[test]
fn install_and_uninstall_keep_everything_else() {
    let env = TestEnv::new();
    let claude = env.tmp.path().join(".claude");
    std::fs::create_dir_all(&claude).expect("mkdir");
    let path = claude.join("settings.json");
    let original = existing_settings();
    // Compact, as a person or another tool may have written it: uninstall gives back these
    // very bytes, not a reformatted equivalent.
    let original_bytes = serde_json::to_string(&original).expect("encode");
    std::fs::write(&path, &original_bytes).expect("write");

    let out = env.run("cairn", &["install"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains("added cairn hooks") && said.contains("backup"),
        "{said}"
    );

    let hook = bin("cairn-hook")
        .canonicalize()
        .expect("hook path")
        .display()
        .to_string();
    let installed = read(&path);
    for key in ["model", "env", "permissions"] {
        assert_eq!(installed[key], original[key], "{key}");
    }
    // The person's PreToolUse group is kept as it was, first; cairn's is added after it.
    assert_eq!(
        installed["hooks"]["PreToolUse"][0],
        original["hooks"]["PreToolUse"][0]
    );
    assert_eq!(
        installed["hooks"]["PreToolUse"][1]["matcher"],
        "Read|Edit|MultiEdit|Write|NotebookEdit"
    );
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "SessionEnd",
    ] {
        let groups = installed["hooks"][event].as_array().expect(event);
        let cmds: Vec<&str> = groups
            .iter()
            .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
            .filter_map(|h| h["command"].as_str())
            .collect();
        assert_eq!(
            cmds.iter().filter(|c| **c == hook).count(),
            1,
            "{event}: {cmds:?}"
        );
    }
    assert_eq!(installed["hooks"]["Stop"][0], original["hooks"]["Stop"][0]);
    assert_eq!(
        installed["hooks"]["PostToolUse"][0],
        original["hooks"]["PostToolUse"][0]
    );
    let b = settings_backups(&env);
    assert_eq!(b.len(), 1);
    assert_eq!(read(&b[0]), original);
    assert!(backups(&claude).is_empty(), "no backup beside the file");
    // The MCP server, user scope, by the absolute path of this cairn.
    let cairn = bin("cairn").canonicalize().expect("cairn path");
    let user = env.tmp.path().join(".claude.json");
    assert_eq!(
        read(&user)["mcpServers"]["cairn"],
        json!({"type": "stdio", "command": cairn.display().to_string(), "args": ["mcp"]})
    );
    assert!(said.contains("registered the MCP server"), "{said}");
    assert!(said.contains("model provider: "), "{said}");

    // Idempotent: nothing changes, no new backup.
    let out = env.run("cairn", &["install"], b"");
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("nothing changed"), "{}", stdout(&out));
    assert_eq!(read(&path), installed);
    assert_eq!(settings_backups(&env).len(), 1);

    let out = env.run("cairn", &["uninstall"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("removed cairn hooks"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("settings"),
        original_bytes
    );
    assert_eq!(settings_backups(&env).len(), 2);
    assert!(
        stdout(&out).contains("removed the MCP server"),
        "{}",
        stdout(&out)
    );
    // ~/.claude.json did not exist before install: it is gone again.
    assert!(!user.exists(), "{}", stdout(&out));

    let out = env.run("cairn", &["uninstall"], b"");
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("nothing changed"));
    assert_eq!(read(&path), original);
}

#[test]
fn project_install_creates_the_file_and_uninstall_empties_it() {
    let env = TestEnv::new();
    let project = env.tmp.path().join("acme-api");
    std::fs::create_dir_all(&project).expect("mkdir");
    let out = env.run(
        "cairn",
        &["install", "--project", project.to_str().expect("utf-8")],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let path = project.join(".claude/settings.local.json");
    let v = read(&path);
    assert_eq!(v["hooks"]["PostToolUse"][0]["matcher"], "*");
    assert!(
        v["hooks"]["SessionStart"][0]["hooks"][0]["command"]
            .as_str()
            .expect("command")
            .ends_with("/cairn-hook")
    );
    assert!(!env.tmp.path().join(".claude/settings.json").exists());
    assert!(!project.join(".claude/settings.json").exists());
    assert!(!project.join(".mcp.json").exists());
    assert!(backups(&project.join(".claude")).is_empty());

    let out = env.run(
        "cairn",
        &["uninstall", "--project", project.to_str().expect("utf-8")],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Install created the file; uninstall removes it rather than leave `{}` behind.
    assert!(!path.exists(), "{}", stdout(&out));
    assert!(backups(&project.join(".claude")).is_empty());

    // A directory that does not exist is refused, and not created.
    let missing = env.tmp.path().join("no-such-project");
    let out = env.run(
        "cairn",
        &["install", "--project", missing.to_str().expect("utf-8")],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(!missing.exists());
}

/// `cairn install` and `cairn install --project` register the MCP server in the same
/// place (`~/.claude.json`, user scope): each uninstall leaves it while the other install
/// uses it, and the last one removes it.
#[test]
fn a_project_uninstall_keeps_the_mcp_server_the_user_install_registered() {
    let env = TestEnv::new();
    let project = env.tmp.path().join("proj");
    std::fs::create_dir_all(&project).expect("mkdir");
    let dir = project.to_str().expect("utf-8");
    let user = env.tmp.path().join(".claude.json");
    let user_settings = env.tmp.path().join(".claude/settings.json");
    let registered = || user.exists() && read(&user)["mcpServers"]["cairn"].is_object();
    let run = |args: &[&str]| {
        let out = env.run("cairn", args, b"");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };

    let out = env.run("cairn", &["install"], b"");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    // Installed for the user and then for a project, cairn would capture twice: said.
    let out = env.run("cairn", &["install", "--project", dir], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "warning: cairn is also installed by hooks in {}",
            user_settings.display()
        )),
        "{}",
        stderr(&out)
    );
    let said = run(&["install", "--project", dir]);
    assert!(said.contains("already in"), "{said}");
    let said = run(&["uninstall", "--project", dir]);
    assert!(registered(), "{said}");
    assert!(!said.contains("removed the MCP server"), "{said}");
    assert!(
        said.contains("kept the MCP server \"cairn\"") && said.contains("`cairn install`"),
        "{said}"
    );
    assert!(read(&user_settings)["hooks"]["Stop"].is_array());
    let said = run(&["uninstall"]);
    assert!(said.contains("removed the MCP server"), "{said}");
    assert!(!user.exists(), "install had created it: {said}");

    // The other way round: the project's install registered it, the user-wide one found it.
    run(&["install", "--project", dir]);
    run(&["install"]);
    let said = run(&["uninstall"]);
    assert!(registered(), "{said}");
    assert!(
        said.contains(&format!("`cairn install --project {dir}`")),
        "{said}"
    );
    let said = run(&["uninstall", "--project", dir]);
    assert!(said.contains("removed the MCP server"), "{said}");
    assert!(!user.exists(), "{said}");
}

/// A user whose Claude Code keeps its files in `CLAUDE_CONFIG_DIR`: install, doctor and
/// uninstall use `$CLAUDE_CONFIG_DIR/settings.json` and `$CLAUDE_CONFIG_DIR/.claude.json`
/// and leave the home directory alone. With `CAIRN_TEST_CLAUDE` set, the real CLI lists
/// the server installed there.
#[test]
fn install_follows_claude_config_dir() {
    let env = TestEnv::new();
    let config = env.tmp.path().join("claude-config");
    std::fs::create_dir_all(&config).expect("mkdir");
    let run = |args: &[&str]| {
        let out = env
            .cmd_with(args)
            .env("CLAUDE_CONFIG_DIR", &config)
            .output()
            .expect("run");
        (out.status.code(), stdout(&out), stderr(&out))
    };
    let (code, said, err) = run(&["install"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        said.contains(&config.join("settings.json").display().to_string()),
        "{said}"
    );
    assert!(read(&config.join("settings.json"))["hooks"]["Stop"].is_array());
    assert!(read(&config.join(".claude.json"))["mcpServers"]["cairn"].is_object());
    assert!(!env.tmp.path().join(".claude").exists(), "{said}");
    assert!(!env.tmp.path().join(".claude.json").exists(), "{said}");

    let (_, said, err) = run(&["doctor"]);
    for check in ["hooks", "mcp"] {
        let line = said
            .lines()
            .find(|l| l.contains(&format!(" {check}")))
            .unwrap_or_else(|| panic!("no {check} line: {said}{err}"));
        assert!(line.starts_with("ok"), "{line}\n{said}");
    }

    if let Some(claude) = crate::plugin::claude_cli() {
        let out = std::process::Command::new(claude)
            .args(["mcp", "get", "cairn"])
            .env("HOME", env.tmp.path())
            .env("CLAUDE_CONFIG_DIR", &config)
            .output()
            .expect("claude mcp get");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(stdout(&out).contains("cairn"), "{}", stdout(&out));
    }

    let (code, said, err) = run(&["uninstall"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(said.contains("removed the MCP server"), "{said}");
    // Gone, or (when the real CLI ran and kept its own state there) without the server.
    let user = config.join(".claude.json");
    assert!(
        !user.exists() || read(&user)["mcpServers"]["cairn"].is_null(),
        "{said}"
    );
    assert!(!config.join("settings.json").exists(), "{said}");
    assert!(!env.tmp.path().join(".claude.json").exists(), "{said}");
}

/// A user who installed cairn as Claude Code's plugin runs `cairn uninstall`: there are no
/// hooks of `cairn install` to remove, and uninstall says the plugin still captures and
/// which command removes it (for the user's settings, and a project's with `--project`).
#[test]
fn uninstall_names_the_plugin_that_still_captures() {
    let env = TestEnv::new();
    let claude = env.tmp.path().join(".claude");
    std::fs::create_dir_all(&claude).expect("mkdir");
    let settings = claude.join("settings.json");
    let enabled = r#"{"enabledPlugins": {"cairn@cairn": true, "other@x": true}}"#;
    std::fs::write(&settings, enabled).expect("write");
    let out = env.run("cairn", &["uninstall"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "the cairn plugin cairn@cairn is enabled in {} and captures by itself: `claude plugin uninstall cairn@cairn` removes it",
            settings.display()
        )),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&settings).expect("read"), enabled);

    // Enabled for a project only (its shared settings): the command for that scope.
    std::fs::write(&settings, "{}").expect("write");
    let project = env.tmp.path().join("proj");
    std::fs::create_dir_all(project.join(".claude")).expect("mkdir");
    std::fs::write(
        project.join(".claude/settings.json"),
        r#"{"enabledPlugins": {"cairn@cairn": true}}"#,
    )
    .expect("write");
    let dir = project.to_str().expect("utf-8");
    let out = env.run("cairn", &["uninstall"], b"");
    assert!(!stdout(&out).contains("plugin"), "{}", stdout(&out));
    let out = env.run("cairn", &["uninstall", "--project", dir], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "`claude plugin uninstall cairn@cairn --scope project` (in {dir}) removes it"
        )),
        "{}",
        stdout(&out)
    );
}

#[test]
fn shared_project_install_names_no_path_of_this_machine() {
    let env = TestEnv::new();
    let project = env.tmp.path().join("acme-api");
    std::fs::create_dir_all(&project).expect("mkdir");
    let dir = project.to_str().expect("utf-8");
    let out = env.run("cairn", &["install", "--project", dir, "--shared"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let settings = std::fs::read_to_string(project.join(".claude/settings.json")).expect("read");
    let mcp = std::fs::read_to_string(project.join(".mcp.json")).expect("read");
    let home = env.tmp.path().display().to_string();
    for text in [&settings, &mcp] {
        assert!(!text.contains(&home), "{text}");
        assert!(!text.contains("/target/"), "{text}");
    }
    let v: Value = serde_json::from_str(&settings).expect("json");
    assert_eq!(
        v["hooks"]["Stop"][0]["hooks"][0]["command"],
        json!("cairn-hook")
    );
    let m: Value = serde_json::from_str(&mcp).expect("json");
    assert_eq!(
        m["mcpServers"]["cairn"],
        json!({"type": "stdio", "command": "cairn", "args": ["mcp"]})
    );
    assert!(!env.tmp.path().join(".claude.json").exists());
    let out = env.run("cairn", &["uninstall", "--project", dir, "--shared"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Both files were created by install: uninstall leaves none behind.
    assert!(!project.join(".mcp.json").exists());
    assert!(!project.join(".claude/settings.json").exists());
}

#[test]
fn a_symlinked_settings_file_is_written_through_and_stays_a_link() {
    let env = TestEnv::new();
    let dotfiles = env.tmp.path().join("dotfiles");
    std::fs::create_dir_all(&dotfiles).expect("mkdir");
    let real = dotfiles.join("claude-settings.json");
    std::fs::write(&real, r#"{"model": "opus"}"#).expect("write");
    let claude = env.tmp.path().join(".claude");
    std::fs::create_dir_all(&claude).expect("mkdir");
    let link = claude.join("settings.json");
    std::os::unix::fs::symlink("../dotfiles/claude-settings.json", &link).expect("symlink");

    let out = env.run("cairn", &["install", "--no-mcp"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    let v = read(&real);
    assert_eq!(v["model"], "opus");
    assert!(v["hooks"]["Stop"].is_array(), "{v}");
    assert!(
        stdout(&out).contains(&real.display().to_string()),
        "{}",
        stdout(&out)
    );
    assert!(!env.tmp.path().join(".claude.json").exists(), "--no-mcp");
    assert!(backups(&dotfiles).is_empty() && backups(&claude).is_empty());

    let out = env.run("cairn", &["uninstall", "--no-mcp"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(&real), json!({"model": "opus"}));
}

#[test]
fn a_broken_settings_file_is_left_alone() {
    let env = TestEnv::new();
    let claude = env.tmp.path().join(".claude");
    std::fs::create_dir_all(&claude).expect("mkdir");
    let path = claude.join("settings.json");
    std::fs::write(&path, "{ \"model\": ").expect("write");
    let out = env.run("cairn", &["install"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    assert!(stderr(&out).contains("not valid JSON"));
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "{ \"model\": "
    );
    assert!(backups(&claude).is_empty());
}

#[test]
fn the_shipped_snippet_and_plugin_match_what_install_writes() {
    let ops = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/claude-code");
    let snippet = read(&ops.join("settings.hooks.json"));
    assert!(cairn_core::ops::install::detect(&snippet, "cairn-hook").complete());
    let (installed, _) =
        cairn_core::ops::install::install(&json!({}), "cairn-hook").expect("install");
    assert_eq!(snippet, installed);

    let plugin_hooks = read(&ops.join("hooks/hooks.json"));
    // The same events and matchers, each running the plugin's launcher (quoted: the plugin
    // root may hold a space).
    let command = "\"${CLAUDE_PLUGIN_ROOT}/bin/cairn-run\" cairn-hook";
    let (installed, _) = cairn_core::ops::install::install(&json!({}), command).expect("install");
    assert_eq!(plugin_hooks["hooks"], installed["hooks"]);

    let manifest = read(&ops.join(".claude-plugin/plugin.json"));
    assert_eq!(manifest["name"], "cairn");
    assert_eq!(
        manifest["mcpServers"]["cairn"]["command"],
        "${CLAUDE_PLUGIN_ROOT}/bin/cairn-run"
    );
    assert_eq!(
        manifest["mcpServers"]["cairn"]["args"],
        json!(["cairn", "mcp"])
    );
}

#[test]
fn doctor_can_tell_whether_the_hooks_are_installed() {
    use cairn_cli::cli::capture::installed_hooks;
    use cairn_core::ops::install::HookState;
    let env = TestEnv::new();
    let path = env.tmp.path().join(".claude/settings.json");
    assert!(installed_hooks(&path).expect("missing file").is_none());
    let out = env.run("cairn", &["install"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // This test binary is not beside the installed cairn-hook, so from here the hooks
    // run "another" cairn-hook: the one `cairn install` found beside `cairn`.
    let found = installed_hooks(&path).expect("read").expect("file");
    assert_eq!(found.events.len(), 7);
    let hook = bin("cairn-hook").canonicalize().expect("path");
    for (event, state) in &found.events {
        assert_eq!(
            *state,
            HookState::OtherCommand {
                command: hook.display().to_string()
            },
            "{event}"
        );
    }
    env.run("cairn", &["uninstall"], b"");
    // Install created the file, so uninstall removed it: no hooks either way.
    assert!(installed_hooks(&path).expect("read").is_none());
}

/// A `claude` on `PATH` as far as install is concerned: like the real CLI (2.1.x), any run
/// of it migrates `~/.claude/settings.json` (drops `"model": "opus"`); it also notes that
/// it ran.
const CLAUDE_THAT_MIGRATES: &str = r#"#!/bin/sh
echo "$*" >> "$(dirname "$0")/ran"
settings="$HOME/.claude/settings.json"
if [ -f "$settings" ]; then
  sed 's/"model": *"opus", *//' "$settings" > "$settings.new" && mv "$settings.new" "$settings"
fi
"#;

/// `cairn install` runs no `claude` command: the CLI migrates the user's settings as it
/// starts, and install promises to keep them. Its line about the model provider says what
/// it can tell without asking. With `CAIRN_TEST_CLAUDE` set, the real CLI is on `PATH`
/// too.
#[test]
fn install_runs_no_claude_command_that_could_rewrite_settings() {
    use std::os::unix::fs::PermissionsExt;
    let mut clis = vec![None];
    if let Some(real) = crate::plugin::claude_cli() {
        clis.push(Some(real));
    }
    for real in clis {
        let env = TestEnv::new();
        let bin_dir = env.tmp.path().join("bin");
        std::fs::create_dir_all(&bin_dir).expect("mkdir");
        let claude = bin_dir.join("claude");
        match &real {
            Some(real) => std::os::unix::fs::symlink(real, &claude).expect("link"),
            None => {
                std::fs::write(&claude, CLAUDE_THAT_MIGRATES).expect("write");
                std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod");
            }
        }
        let settings = env.tmp.path().join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().expect("dir")).expect("mkdir");
        let original = r#"{"model": "opus", "env": {"FOO": "bar"}}"#;
        std::fs::write(&settings, original).expect("write");
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );

        let out = env
            .cmd_with(&["install", "--no-mcp"])
            .env("PATH", &path)
            .output()
            .expect("install");
        assert_eq!(out.status.code(), Some(0), "{real:?}: {}", stderr(&out));
        assert!(!bin_dir.join("ran").exists(), "install ran claude");
        assert_eq!(read(&settings)["model"], "opus", "{real:?}");
        assert!(
            stdout(&out).contains("model provider: claude-cli if claude is logged in"),
            "{}",
            stdout(&out)
        );
        assert!(
            !env.tmp.path().join(".claude.json").exists(),
            "{real:?}: something wrote ~/.claude.json"
        );
        let out = env
            .cmd_with(&["uninstall", "--no-mcp"])
            .env("PATH", &path)
            .output()
            .expect("uninstall");
        assert_eq!(out.status.code(), Some(0), "{real:?}: {}", stderr(&out));
        assert_eq!(
            std::fs::read_to_string(&settings).expect("read"),
            original,
            "{real:?}"
        );
    }
}
