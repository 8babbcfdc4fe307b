//! First contact, as a person meets it: the plugin installed from a checkout of cairn's
//! source with the real Claude Code CLI (`CAIRN_TEST_CLAUDE`, which `.ci/run` installs from
//! npm) in a fresh HOME, nothing of cairn installed, hooks run by `/bin/sh` (dash on
//! Debian) through the launcher; three sessions against a stand-in Messages API on
//! 127.0.0.1.
//!
//! The launcher builds cairn from the checkout with `cargo install --locked --path`, the
//! real path. A release build would take minutes, so the test asks for the `dev` profile
//! (`CAIRN_BUILD_PROFILE`) in the target directory this test's own binaries were built in
//! (`CARGO_TARGET_DIR`), where that build is up to date: cargo checks it and copies it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::plugin::{claude_cli, log, messages_api, repo, wait_for_import};
use crate::support::{TestEnv, bin};

/// What one `claude -p --output-format stream-json` session showed.
struct Session {
    id: String,
    result: String,
    /// The tools the session's `init` message offered.
    tools: Vec<String>,
    /// How long each hook ran, from its `hook_started` to its `hook_response` (as they
    /// reached this process; a `SessionStart` hook's are only written with the `init`
    /// message, so its time is not seen here).
    hooks: Vec<(String, Duration)>,
}

#[test]
fn the_first_session_after_a_plugin_install_is_remembered() {
    let Some(claude) = claude_cli() else {
        eprintln!("not run: set CAIRN_TEST_CLAUDE to a Claude Code CLI (.ci/run does)");
        return;
    };
    let env = TestEnv::new();
    let home = env.tmp.path().join("home");
    let project = env.tmp.path().join("project");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&project).expect("project");
    let notes = project.join("notes.txt");
    std::fs::write(&notes, "deploy key: rotate every 90 days\n").expect("notes");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let api = messages_api(notes.clone(), seen.clone());
    let data = env.tmp.path().join("cairn-data");

    // The toolchain that built this test: cargo and rustc from its directory, its
    // registry cache (no network), the target directory holding this build.
    let cargo = PathBuf::from(std::env::var_os("CARGO").expect("CARGO (set by cargo test)"));
    let toolchain = cargo.parent().expect("toolchain").to_path_buf();
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let cargo_home = std::env::var_os("CARGO_HOME").map_or(real_home.join(".cargo"), PathBuf::from);
    let rustup_home =
        std::env::var_os("RUSTUP_HOME").map_or(real_home.join(".rustup"), PathBuf::from);
    let target_dir = bin("cairn")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf();
    let vars: Vec<(&str, std::ffi::OsString)> = vec![
        (
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", toolchain.display()).into(),
        ),
        ("HOME", home.clone().into()),
        ("ANTHROPIC_BASE_URL", api.clone().into()),
        ("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        // `-p` starts without the MCP servers still starting and adds their tools when
        // they come (the model has a tool to wait for them); here it waits for them
        // first, as long as the launcher may take to answer (Claude Code's start-up
        // limit, MCP_TIMEOUT, 30 s), so the first request shows what the session offers.
        ("MCP_CONNECTION_NONBLOCKING", "false".into()),
        ("MCP_CONNECT_TIMEOUT_MS", "30000".into()),
        ("CAIRN_DATA_DIR", data.clone().into()),
        ("CAIRN_WORKER__AUTOSTART", "false".into()),
        ("CARGO_HOME", cargo_home.into()),
        ("RUSTUP_HOME", rustup_home.into()),
        ("CARGO_NET_OFFLINE", "true".into()),
        ("CARGO_TARGET_DIR", target_dir.into()),
        ("CAIRN_BUILD_PROFILE", "dev".into()),
    ];
    let command = |args: &[&str], extra: &[(&str, &str)]| {
        let mut c = Command::new(&claude);
        c.args(args).current_dir(&project).env_clear();
        for (k, v) in &vars {
            c.env(k, v);
        }
        for (k, v) in extra {
            c.env(k, v);
        }
        c
    };
    let cli = |args: &[&str]| {
        let out = command(args, &[])
            .stdin(Stdio::null())
            .output()
            .expect("claude");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "claude {args:?}: {text}");
        text
    };
    let session_with = |prompt: &str, extra: &[(&str, &str)]| -> Session {
        let mut child = command(
            &[
                "-p",
                prompt,
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-hook-events",
                "--allowedTools",
                "Read",
            ],
            extra,
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("claude");
        let mut started: HashMap<String, (String, Instant)> = HashMap::new();
        let mut s = Session {
            id: String::new(),
            result: String::new(),
            tools: Vec::new(),
            hooks: Vec::new(),
        };
        let mut all = String::new();
        for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
            let line = line.expect("line");
            let at = Instant::now();
            all.push_str(&line);
            all.push('\n');
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let id = v["hook_id"].as_str().unwrap_or_default().to_string();
            match (v["type"].as_str(), v["subtype"].as_str()) {
                (Some("system"), Some("hook_started")) => {
                    let name = v["hook_name"].as_str().unwrap_or_default().to_string();
                    started.insert(id, (name, at));
                }
                (Some("system"), Some("hook_response")) => {
                    if let Some((name, t)) = started.remove(&id) {
                        s.hooks.push((name, at - t));
                    }
                }
                (Some("system"), Some("init")) => {
                    s.tools = v["tools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t.as_str().map(str::to_string))
                        .collect();
                }
                (Some("result"), _) => {
                    s.id = v["session_id"].as_str().unwrap_or_default().to_string();
                    s.result = v["result"].as_str().unwrap_or_default().to_string();
                }
                _ => {}
            }
        }
        let out = child.wait_with_output().expect("claude");
        assert!(
            out.status.success(),
            "{all}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!s.id.is_empty(), "{all}");
        s
    };
    let session = |prompt: &str| session_with(prompt, &[]);
    let plugin_data = home.join(".claude/plugins/data/cairn-cairn");
    let check_hooks = |s: &Session| {
        assert!(!s.hooks.is_empty(), "no hook was seen");
        for (name, took) in &s.hooks {
            assert!(
                *took < Duration::from_secs(1),
                "the {name} hook held Claude Code for {took:?}: {}",
                log(&plugin_data)
            );
        }
    };
    let offers_cairn = |s: &Session| {
        s.tools
            .iter()
            .any(|t| t.starts_with("mcp__") && t.contains("cairn"))
    };

    // The build the launcher is about to run, run once beforehand with the same command,
    // toolchain and target directory: `cargo install` resolves features for the `cairn`
    // package alone, so on a fresh checkout its dependencies differ from the test build's
    // and take minutes, longer than Claude Code waits for an MCP server. With this, the
    // launcher's own `cargo install` finds everything up to date, as it would on a
    // developer's machine that built cairn before; the path it takes is the same.
    let warm = env.tmp.path().join("warm-build");
    let mut build = Command::new(&cargo);
    build
        .args([
            "install",
            "--locked",
            "--force",
            "--profile",
            "dev",
            "--path",
        ])
        .arg(repo().join("bins"))
        .arg("--root")
        .arg(&warm)
        .env_clear()
        .stdin(Stdio::null());
    for (k, v) in &vars {
        build.env(k, v);
    }
    let out = build.output().expect("cargo install");
    assert!(
        out.status.success(),
        "warming the build: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    cli(&[
        "plugin",
        "marketplace",
        "add",
        &repo().display().to_string(),
    ]);
    let installed = cli(&["plugin", "install", "cairn@cairn"]);
    assert!(!installed.contains("not yet set"), "{installed}");
    assert!(!plugin_data.join("bin").exists());

    // The first session: its first hook starts the build from the checkout, the MCP server
    // waits for it.
    let first = session("How often does the deploy key rotate? Check notes.txt.");
    assert_eq!(first.result, "The deploy key rotates every 90 days.");
    check_hooks(&first);
    assert!(
        offers_cairn(&first),
        "cairn's tools are not offered in the first session: {:?}\n{}",
        first.tools,
        log(&plugin_data)
    );
    let install_log = log(&plugin_data);
    assert!(
        install_log.contains("installed cairn built from"),
        "{install_log}"
    );
    // The installer imports what ran before cairn was there; then the worker.
    wait_for_import(&plugin_data);
    let worker = Command::new(bin("cairn-worker"))
        .arg("--once")
        .env("HOME", &home)
        .env("CAIRN_DATA_DIR", &data)
        .env("CAIRN_MODEL__PROVIDER", "offline")
        .env("CAIRN_WORKER__AUTOSTART", "false")
        .output()
        .expect("worker");
    assert!(
        worker.status.success(),
        "{}",
        String::from_utf8_lossy(&worker.stderr)
    );

    // Every event of the first session is in memory: its start and end, the prompt, the
    // Read and its result, the turn's end.
    let db = rusqlite::Connection::open(data.join("cairn.db")).expect("cairn.db");
    let one = |sql: &str| -> i64 {
        db.query_row(sql, [&first.id], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    assert_eq!(
        one("SELECT count(*) FROM sessions WHERE session_id = ?1 AND status = 'ended'"),
        1,
        "{}",
        log(&plugin_data)
    );
    assert_eq!(
        one("SELECT count(*) FROM user_prompts WHERE session_id = ?1
             AND prompt_text LIKE 'How often does the deploy key rotate?%'"),
        1
    );
    assert_eq!(
        one(
            "SELECT count(*) FROM pending_messages WHERE session_id = ?1 AND kind = 'observation'
             AND payload LIKE '%toolu_cairn_live_1%' AND payload LIKE '%rotate every 90 days%'"
        ),
        1,
        "the Read and its result were captured"
    );
    assert_eq!(
        one("SELECT count(*) FROM pending_messages WHERE session_id = ?1 AND kind = 'summarize'"),
        1,
        "the turn end was captured"
    );
    // A turn that only read a file leaves its summary (the request, Claude's answer); the
    // read alone is routine for the offline extractor.
    assert_eq!(
        one("SELECT count(*) FROM session_summaries WHERE session_id = ?1"),
        1
    );

    // The second session starts with the first one's memories.
    seen.lock().expect("lock").clear();
    let second = session("What did we look at last time?");
    check_hooks(&second);
    let bodies = seen.lock().expect("lock").join("\n");
    assert!(
        bodies.contains("cairn memory of project")
            && bodies.contains("How often does the deploy key rotate?"),
        "the second session's requests carry no cairn context"
    );

    // The third still has cairn's tools (a failed start would have kept them away for
    // 15 minutes) and its hooks are as quick.
    let third = session("And the deploy key?");
    check_hooks(&third);
    assert!(offers_cairn(&third), "{:?}", third.tools);
    assert!(offers_cairn(&second), "{:?}", second.tools);

    // A session whose start index shows nothing: the memory that answers the prompt
    // arrives with the prompt itself.
    seen.lock().expect("lock").clear();
    let fourth = session_with(
        "How often does the deploy key rotate? Check notes.txt.",
        &[("CAIRN_CONTEXT__BUDGET_TOKENS", "0")],
    );
    check_hooks(&fourth);
    let bodies = seen.lock().expect("lock").join("\n");
    assert!(
        bodies.contains("cairn memories that may answer this prompt"),
        "the prompt's memories did not reach the model: {}",
        log(&plugin_data)
    );
    assert!(
        !bodies.contains("cairn memory of project"),
        "the start index was to be empty"
    );
    let given = db
        .query_row(
            "SELECT count(*) FROM memory_given WHERE session_id = ?1 AND moment = 'prompt'",
            [&fourth.id],
            |r| r.get::<_, i64>(0),
        )
        .expect("given");
    assert!(given >= 1, "nothing recorded as given to {}", fourth.id);
}
