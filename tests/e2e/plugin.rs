//! The Claude Code plugin: its launcher (`ops/claude-code/bin/cairn-run`) installing a
//! release served from 127.0.0.1 (good, corrupt, no network), and its manifests.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::TestEnv;

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
    let name = format!("cairn-{}", target());
    let stage = dir.join("stage").join(&name);
    std::fs::create_dir_all(&stage).expect("stage");
    for b in ["cairn", "cairn-hook", "cairn-worker"] {
        let p = stage.join(b);
        std::fs::write(&p, format!("#!/bin/sh\necho \"{b} from the release $*\"\n")).expect("bin");
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
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
            let file = dir.join(path.trim_start_matches('/'));
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
