//! The Claude Code plugin: its launcher (`ops/claude-code/bin/cairn-run`) installing a
//! release served from 127.0.0.1 (good, corrupt, no network), its manifests, and a real
//! Claude Code session through the installed plugin (the CLI named by
//! `CAIRN_TEST_CLAUDE`, which `.ci/run` installs from npm; the model is a stand-in
//! Messages API on 127.0.0.1).

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{HttpRequest, TestEnv, read_request};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn launcher() -> PathBuf {
    repo().join("ops/claude-code/bin/cairn-run")
}

fn target() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-gnu",
        _ => "x86_64-unknown-linux-gnu",
    }
}

/// A release directory like the release pipeline's: `cairn-<target>.tar.gz` (a folder
/// holding the three binaries, here scripts that say who they are) and its `.sha256`.
fn release(dir: &Path) -> PathBuf {
    release_of(dir, |b| {
        format!("#!/bin/sh\necho \"{b} from the release $*\"\n")
    })
}

/// A release whose binaries are `script(name)`.
fn release_of(dir: &Path, script: impl Fn(&str) -> String) -> PathBuf {
    let name = format!("cairn-{}", target());
    let stage = dir.join("stage").join(&name);
    std::fs::create_dir_all(&stage).expect("stage");
    for b in ["cairn", "cairn-hook", "cairn-worker"] {
        let p = stage.join(b);
        std::fs::write(&p, script(b)).expect("bin");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let out = dir.join("release");
    std::fs::create_dir_all(&out).expect("release");
    let archive = out.join(format!("{name}.tar.gz"));
    let ok = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.join("stage"))
        .arg(&name)
        .status()
        .expect("tar");
    assert!(ok.success());
    let sum = Command::new("sha256sum")
        .arg(&archive)
        .output()
        .expect("sha256sum");
    let hash = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .expect("hash")
        .to_string();
    std::fs::write(
        out.join(format!("{name}.tar.gz.sha256")),
        format!("{hash} *{name}.tar.gz\n"),
    )
    .expect("sum");
    out
}

/// Serves the files of `dir` over HTTP on 127.0.0.1 until the test ends.
fn serve(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let Some(request) = read_request(&mut reader) else {
                continue;
            };
            let file = dir.join(request.path.trim_start_matches('/'));
            let (status, body) = match std::fs::read(&file) {
                Ok(b) if file.is_file() => ("200 OK", b),
                _ => ("404 Not Found", b"not found".to_vec()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{addr}")
}

fn run(data: &Path, url: &str, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(launcher())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", data.parent().expect("parent"))
        .env("CLAUDE_PLUGIN_DATA", data)
        .env("CLAUDE_PLUGIN_OPTION_RELEASE_URL", url)
        // Never the network: a build from source, where cargo is found, fails at once.
        .env("CAIRN_SOURCE_GIT", data.join("no-such-repository"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launcher");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

fn log(data: &Path) -> String {
    std::fs::read_to_string(data.join("install.log")).unwrap_or_default()
}

#[test]
fn the_launcher_installs_a_verified_release_on_first_use() {
    let env = TestEnv::new();
    let url = serve(release(env.tmp.path()));
    let data = env.tmp.path().join("plugin-data");
    let out = run(&data, &url, &["cairn", "mcp"], "");
    assert_eq!(out.status.code(), Some(0), "{}", log(&data));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cairn from the release mcp\n"
    );
    for b in ["cairn", "cairn-hook", "cairn-worker"] {
        assert!(data.join("bin").join(b).is_file(), "{b}");
    }
    assert!(
        log(&data).contains("installed the prebuilt release"),
        "{}",
        log(&data)
    );
    // Installed: later runs use it, with no network.
    let out = run(&data, "http://127.0.0.1:9", &["cairn-hook"], "{}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cairn-hook from the release \n"
    );
}

#[test]
fn an_installation_left_by_a_dead_process_is_taken_over() {
    let env = TestEnv::new();
    let url = serve(release(env.tmp.path()));
    let data = env.tmp.path().join("plugin-data");
    let lock = data.join(".installing");
    std::fs::create_dir_all(&lock).expect("lock");
    // A live installer (this test's own process) is waited for, not raced.
    std::fs::write(lock.join("pid"), std::process::id().to_string()).expect("pid");
    let out = run(&data, &url, &["cairn", "mcp"], "");
    assert_eq!(out.status.code(), Some(1), "{}", log(&data));
    assert!(log(&data).contains("already under way"), "{}", log(&data));
    assert!(!data.join("bin/cairn").exists());
    // One that died (a process that has exited) left its lock behind: taken over.
    let mut gone = Command::new("true").spawn().expect("spawn");
    let pid = gone.id();
    gone.wait().expect("wait");
    std::fs::write(lock.join("pid"), pid.to_string()).expect("pid");
    let out = run(&data, &url, &["cairn", "mcp"], "");
    assert_eq!(out.status.code(), Some(0), "{}", log(&data));
    assert!(log(&data).contains("taking over"), "{}", log(&data));
    assert!(data.join("bin/cairn").is_file());
    assert!(!lock.exists(), "the lock is released");
}

#[test]
fn a_hook_before_the_install_returns_at_once_and_stores_nothing_raw() {
    let env = TestEnv::new();
    let url = serve(release(env.tmp.path()));
    let data = env.tmp.path().join("plugin-data");
    let event =
        r#"{"hook_event_name":"UserPromptSubmit","prompt":"my password is MARKER-hunter2"}"#;
    let out = run(&data, &url, &["cairn-hook"], event);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The installation finishes in the background.
    let started = Instant::now();
    while !data.join("bin/cairn-hook").is_file() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            log(&data)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let grep = Command::new("grep")
        .args(["-r", "MARKER-hunter2"])
        .arg(&data)
        .output()
        .expect("grep");
    assert!(
        grep.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&grep.stdout)
    );
}

#[test]
fn a_corrupt_download_or_no_network_installs_nothing() {
    let env = TestEnv::new();
    let dir = release(env.tmp.path());
    let archive = dir.join(format!("cairn-{}.tar.gz", target()));
    let mut bytes = std::fs::read(&archive).expect("archive");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&archive, bytes).expect("corrupt");
    let url = serve(dir);
    let data = env.tmp.path().join("plugin-data");
    let out = run(&data, &url, &["cairn", "mcp"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(!data.join("bin").exists());
    assert!(log(&data).contains("checksum mismatch"), "{}", log(&data));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("install.log"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Nothing listening.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let data = env.tmp.path().join("plugin-data-2");
    let out = run(&data, &url, &["cairn", "mcp"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(!data.join("bin").exists());
    assert!(log(&data).contains("cannot download"), "{}", log(&data));
    // A hook still answers at once and exits 0: Claude Code goes on.
    let out = run(&data, &url, &["cairn-hook"], "{}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_plugin_runs_everything_through_the_quoted_launcher() {
    let hooks: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("ops/claude-code/hooks/hooks.json")).expect("read"),
    )
    .expect("json");
    for (event, groups) in hooks["hooks"].as_object().expect("hooks") {
        let cmd = groups[0]["hooks"][0]["command"].as_str().expect("command");
        assert_eq!(
            cmd, "\"${CLAUDE_PLUGIN_ROOT}/bin/cairn-run\" cairn-hook",
            "{event}"
        );
    }
    let plugin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("ops/claude-code/.claude-plugin/plugin.json"))
            .expect("read"),
    )
    .expect("json");
    assert_eq!(
        plugin["mcpServers"]["cairn"],
        serde_json::json!({"command": "${CLAUDE_PLUGIN_ROOT}/bin/cairn-run", "args": ["cairn", "mcp"]})
    );
    let market: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join(".claude-plugin/marketplace.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(market["plugins"][0]["source"], "./ops/claude-code");
    assert!(
        launcher()
            .metadata()
            .expect("launcher")
            .permissions()
            .mode()
            & 0o111
            != 0
    );
}

#[test]
fn the_default_release_url_is_the_published_repository_s() {
    // One place says where cairn is published (`repository` in the workspace's Cargo.toml);
    // the plugin option's default, the launcher's and its source to build from follow it.
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("read");
    let repository = manifest
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .expect("repository in Cargo.toml")
        .trim_matches('"')
        .to_string();
    assert!(
        repository.starts_with("https://github.com/"),
        "{repository}"
    );
    let latest = format!("{repository}/releases/latest/download");
    let plugin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("ops/claude-code/.claude-plugin/plugin.json"))
            .expect("read"),
    )
    .expect("json");
    assert_eq!(
        plugin["userConfig"]["release_url"]["default"],
        latest.as_str()
    );
    let script = std::fs::read_to_string(launcher()).expect("launcher");
    assert!(
        script.contains(&format!("${{CAIRN_RELEASE_URL:-{latest}}}")),
        "the launcher's default release URL is not {latest}"
    );
    assert!(
        script.contains(&format!("${{CAIRN_SOURCE_GIT:-{repository}}}")),
        "the launcher does not build from {repository}"
    );
}

/// The Claude Code CLI to run a real session with, when `CAIRN_TEST_CLAUDE` names one.
fn claude_cli() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("CAIRN_TEST_CLAUDE")?);
    assert!(
        p.is_file(),
        "CAIRN_TEST_CLAUDE={} is not a file",
        p.display()
    );
    Some(p)
}

/// A stand-in for the Anthropic Messages API: a turn that offers tools is answered with a
/// `Read` of `file`; once the request carries the tool's result, or offers no tools, with
/// text. Streams when asked to, as Claude Code does. Every request body is kept in `seen`.
fn messages_api(file: PathBuf, seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let file = file.clone();
            let seen = seen.clone();
            std::thread::spawn(move || answer(stream, &file, &seen));
        }
    });
    format!("http://{addr}")
}

fn answer(mut stream: std::net::TcpStream, file: &Path, seen: &std::sync::Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    while let Some(HttpRequest { body, .. }) = read_request(&mut reader) {
        seen.lock()
            .expect("lock")
            .push(String::from_utf8_lossy(&body).into_owned());
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let has_result = req["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["content"].to_string().contains("tool_result"));
        let offers_read = req["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "Read"));
        let block = if offers_read && !has_result {
            serde_json::json!({"type": "tool_use", "id": "toolu_cairn_live_1", "name": "Read",
                               "input": {"file_path": file.display().to_string()}})
        } else {
            serde_json::json!({"type": "text", "text": "The deploy key rotates every 90 days."})
        };
        let stop = if block["type"] == "tool_use" {
            "tool_use"
        } else {
            "end_turn"
        };
        let model = req["model"].as_str().unwrap_or("claude").to_string();
        let (kind, out) = if req["stream"] == true {
            let input = match &block["type"] {
                t if t == "tool_use" => {
                    let mut b = block.clone();
                    b["input"] = serde_json::json!({});
                    b
                }
                _ => serde_json::json!({"type": "text", "text": ""}),
            };
            let delta = if block["type"] == "tool_use" {
                serde_json::json!({"type": "input_json_delta",
                                   "partial_json": block["input"].to_string()})
            } else {
                serde_json::json!({"type": "text_delta", "text": block["text"]})
            };
            let events = [
                (
                    "message_start",
                    serde_json::json!({"type": "message_start", "message": {
                    "id": "msg_live", "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 12, "output_tokens": 1}}}),
                ),
                (
                    "content_block_start",
                    serde_json::json!({"type": "content_block_start",
                    "index": 0, "content_block": input}),
                ),
                (
                    "content_block_delta",
                    serde_json::json!({"type": "content_block_delta",
                    "index": 0, "delta": delta}),
                ),
                (
                    "content_block_stop",
                    serde_json::json!({"type": "content_block_stop", "index": 0}),
                ),
                (
                    "message_delta",
                    serde_json::json!({"type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": {"output_tokens": 9}}),
                ),
                ("message_stop", serde_json::json!({"type": "message_stop"})),
            ];
            let text: String = events
                .iter()
                .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
                .collect();
            ("text/event-stream", text)
        } else {
            let m = serde_json::json!({"id": "msg_live", "type": "message", "role": "assistant",
                "model": model, "content": [block], "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 9}});
            ("application/json", m.to_string())
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n",
            out.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn a_real_claude_code_session_is_remembered_through_the_installed_plugin() {
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
    // The release holds launchers of the binaries under test (a tarball of debug builds
    // would be most of a gigabyte); what the plugin's launcher does with it is the same.
    let url = serve(release_of(env.tmp.path(), |b| {
        format!(
            "#!/bin/sh\nexec '{}' \"$@\"\n",
            crate::support::bin(b).display()
        )
    }));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let api = messages_api(notes.clone(), seen.clone());
    let data = env.tmp.path().join("cairn-data");
    let cli = |args: &[&str]| {
        let out = Command::new(&claude)
            .args(args)
            .current_dir(&project)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env("ANTHROPIC_BASE_URL", &api)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CAIRN_DATA_DIR", &data)
            .env("CAIRN_WORKER__AUTOSTART", "false")
            .stdin(Stdio::null())
            .output()
            .expect("claude");
        assert!(
            out.status.success(),
            "claude {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let repo = repo().display().to_string();
    cli(&["plugin", "marketplace", "add", &repo]);
    let config = format!("release_url={url}");
    cli(&["plugin", "install", "cairn@cairn", "--config", &config]);
    // cairn's binaries are installed from the release by the plugin's launcher before the
    // session, as its first use would (the launcher is the plugin's, in the plugin's data
    // directory). Left to the session's first hook, the installation races the session: a
    // hook that finds it under way drops its event
    // (`a_hook_before_the_install_returns_at_once_and_stores_nothing_raw`), and how long it
    // takes depends on the machine's load.
    let plugin_data = home.join(".claude/plugins/data/cairn-cairn");
    let installed = Command::new(launcher())
        .args(["cairn", "--version"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("CLAUDE_PLUGIN_DATA", &plugin_data)
        .env("CLAUDE_PLUGIN_OPTION_RELEASE_URL", &url)
        .output()
        .expect("launcher");
    assert!(installed.status.success(), "{}", log(&plugin_data));

    let out = cli(&[
        "-p",
        "How often does the deploy key rotate? Check notes.txt.",
        "--output-format",
        "json",
        "--allowedTools",
        "Read",
    ]);
    let result: serde_json::Value = serde_json::from_str(&out).expect("json result");
    assert_eq!(
        result["result"], "The deploy key rotates every 90 days.",
        "{out}"
    );
    let session = result["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    assert!(
        seen.lock().expect("lock").len() >= 2,
        "the tool turn and the answer went to the stand-in API"
    );

    // Every event of the session is in cairn's database, under Claude Code's session id.
    let db = rusqlite::Connection::open(data.join("cairn.db")).expect("cairn.db");
    let one = |sql: &str| -> i64 {
        db.query_row(sql, [&session], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    assert_eq!(
        one("SELECT count(*) FROM sessions WHERE session_id = ?1"),
        1
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
    // The worker turns the session into memories; the next session starts with them.
    let worker = Command::new(crate::support::bin("cairn-worker"))
        .arg("--once")
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
    assert!(one("SELECT count(*) FROM observations WHERE session_id = ?1") >= 1);
    seen.lock().expect("lock").clear();
    cli(&["-p", "What did we look at last time?"]);
    let bodies = seen.lock().expect("lock").join("\n");
    assert!(
        bodies.contains("cairn memory of project") && bodies.contains("notes.txt"),
        "the second session's requests carry no cairn context"
    );

    // The plugin's MCP server comes up with nothing on the PATH.
    let list = cli(&["mcp", "list"]);
    assert!(
        list.lines()
            .any(|l| l.contains("cairn") && l.contains("Connected")),
        "{list}"
    );
}
