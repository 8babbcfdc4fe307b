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

pub fn repo() -> PathBuf {
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

/// The plugin as Claude Code installs it from a marketplace that is not a checkout of
/// cairn's source: a copy of `ops/claude-code` on its own. Its launcher.
fn installed_launcher(dir: &Path) -> PathBuf {
    let root = dir.join("plugin-copy");
    if !root.exists() {
        let ok = Command::new("cp")
            .arg("-R")
            .arg(repo().join("ops/claude-code"))
            .arg(&root)
            .status()
            .expect("cp");
        assert!(ok.success());
    }
    root.join("bin/cairn-run")
}

fn run(data: &Path, url: &str, args: &[&str], stdin: &str) -> std::process::Output {
    // Claude Code's own start-up limit: an installation slowed by a loaded machine is
    // still waited for.
    run_within(data, url, args, stdin, "30000")
}

/// [`run`] with `MCP_TIMEOUT` (ms): the launcher waits for an installation under way 5 s
/// less than it, at least 1 s.
fn run_within(
    data: &Path,
    url: &str,
    args: &[&str],
    stdin: &str,
    mcp_timeout: &str,
) -> std::process::Output {
    let mut child = Command::new(installed_launcher(data.parent().expect("parent")))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", data.parent().expect("parent"))
        .env("CLAUDE_PLUGIN_DATA", data)
        .env("CAIRN_RELEASE_URL", url)
        .env("MCP_TIMEOUT", mcp_timeout)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launcher");
    // The program may exit without reading its input (the release's stand-in binaries
    // do): a closed pipe is not the test's concern, what the program printed is.
    match child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write: {e}"),
        _ => {}
    }
    child.wait_with_output().expect("wait")
}

pub fn log(data: &Path) -> String {
    std::fs::read_to_string(data.join("install.log")).unwrap_or_default()
}

/// Waits (at most a minute) for the installer of the plugin data dir `data` to finish
/// importing what ran before cairn was there: the import removes the request when done.
pub fn wait_for_import(data: &Path) {
    let started = Instant::now();
    while data.join("install-requested").exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "{}", log(data));
        std::thread::sleep(Duration::from_millis(20));
    }
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
    // Waited for 1 s, then given up on.
    let out = run_within(&data, &url, &["cairn", "mcp"], "", "6000");
    assert_eq!(out.status.code(), Some(1), "{}", log(&data));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still being installed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    // The launcher waits 1 s for the installation it started in the background; on a
    // loaded machine that may still be running when it gives up: its outcome is awaited.
    wait_until("install.log saying checksum mismatch", || {
        log(&data).contains("checksum mismatch")
    });
    assert!(!data.join("bin").exists());
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
    wait_until("install.log saying cannot download", || {
        log(&data).contains("cannot download")
    });
    assert!(!data.join("bin").exists());
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
    // the launcher's default release URL follows it.
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
    let script = std::fs::read_to_string(launcher()).expect("launcher");
    assert!(
        script.contains(&format!("${{CAIRN_RELEASE_URL:-{latest}}}")),
        "the launcher's default release URL is not {latest}"
    );
}

/// The Claude Code CLI to run a real session with, when `CAIRN_TEST_CLAUDE` names one.
pub fn claude_cli() -> Option<PathBuf> {
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
pub fn messages_api(file: PathBuf, seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>) -> String {
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

/// A stand-in Rust toolchain and download tool on the PATH (in `dir/bin`), and a checkout
/// of cairn's source for them (`dir/checkout`: the files the launcher looks for).
/// `cargo install` records its arguments in `dir/calls`, waits while `dir/hold` exists,
/// fails while `dir/fail` exists, and otherwise "builds" cairn's three binaries: scripts
/// that record how they were called in `dir/calls` and print `<name> built <args>`.
/// `curl` records its call and fails, after waiting the same way (a slow download).
struct Toolchain {
    dir: PathBuf,
}

impl Toolchain {
    fn new(dir: &Path) -> Toolchain {
        Toolchain::building(dir, None)
    }

    /// A toolchain whose `cargo install` "builds" launchers of the binaries under test.
    fn real(dir: &Path) -> Toolchain {
        Toolchain::building(dir, Some(crate::support::bin("cairn")))
    }

    fn building(dir: &Path, real: Option<PathBuf>) -> Toolchain {
        let bin = dir.join("bin");
        let checkout = dir.join("checkout");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::create_dir_all(checkout.join("bins")).expect("checkout");
        std::fs::write(checkout.join("Cargo.lock"), "").expect("lock");
        std::fs::write(
            checkout.join("bins/Cargo.toml"),
            "[package]\nname = \"cairn\"\n",
        )
        .expect("manifest");
        let d = dir.display();
        let real = real
            .as_deref()
            .and_then(Path::parent)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let scripts = [
            (
                "cargo",
                format!(
                    r#"#!/bin/sh
echo "cargo $*" >>'{d}/calls'
while [ -e '{d}/hold' ]; do sleep 0.05; done
if [ -e '{d}/fail' ]; then echo "error: could not compile cairn" >&2; exit 101; fi
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; shift; done
mkdir -p "$root/bin"
for b in cairn cairn-hook cairn-worker; do
  if [ -n '{real}' ]; then
    printf '#!/bin/sh\necho "%s $*" >>"%s"\nexec "%s" "$@"\n' "$b" '{d}/calls' '{real}'/"$b" >"$root/bin/$b"
  else
    printf '#!/bin/sh\necho "%s $*" >>"%s"\necho "%s built $*"\n' "$b" '{d}/calls' "$b" >"$root/bin/$b"
  fi
  chmod 755 "$root/bin/$b"
done
"#
                ),
            ),
            (
                "curl",
                format!(
                    "#!/bin/sh\necho \"curl $*\" >>'{d}/calls'\nwhile [ -e '{d}/hold' ]; do sleep 0.05; done\nexit 7\n"
                ),
            ),
        ];
        for (name, text) in scripts {
            let p = bin.join(name);
            std::fs::write(&p, text).expect("script");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Toolchain {
            dir: dir.to_path_buf(),
        }
    }

    fn checkout(&self) -> PathBuf {
        self.dir.join("checkout")
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default()
    }

    fn cargo_runs(&self) -> usize {
        self.calls()
            .lines()
            .filter(|l| l.starts_with("cargo "))
            .count()
    }

    fn hold(&self, on: bool) {
        let p = self.dir.join("hold");
        if on {
            std::fs::write(p, "").expect("hold");
        } else {
            std::fs::remove_file(p).expect("release");
        }
    }

    fn fail(&self, on: bool) {
        let p = self.dir.join("fail");
        if on {
            std::fs::write(p, "").expect("fail");
        } else {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The launcher `launcher`, run by `shell` with this toolchain first on the PATH,
    /// `data` as the plugin's data dir, and no release to download.
    fn command(&self, shell: &str, launcher: &Path, data: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(shell);
        if shell == "busybox" {
            c.arg("sh");
        }
        c.arg(launcher)
            .args(args)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.dir.join("bin").display()),
            )
            .env("HOME", &self.dir)
            .env("CLAUDE_PLUGIN_DATA", data)
            .env("CAIRN_RELEASE_URL", "http://127.0.0.1:9")
            .env("MCP_TIMEOUT", "8000");
        c
    }
}

/// Waits for `what` to hold, at most 30 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The shells a hook may be run with: dash, bash, and busybox's ash where installed.
fn shells() -> Vec<&'static str> {
    let mut out = vec!["dash", "bash"];
    if Command::new("busybox")
        .args(["sh", "-c", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        out.push("busybox");
    }
    out
}

#[test]
fn a_hook_lets_go_of_claude_code_while_cairn_is_installed() {
    for shell in shells() {
        let env = TestEnv::new();
        let tools = Toolchain::new(env.tmp.path());
        let data = env.tmp.path().join("plugin-data");
        let launcher = installed_launcher(env.tmp.path());
        tools.hold(true);
        let mut hook = tools.command(shell, &launcher, &data, &["cairn-hook"]);
        hook.env("CAIRN_SOURCE_DIR", tools.checkout())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = hook.spawn().expect("hook");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(br#"{"hook_event_name":"SessionStart"}"#)
            .expect("write");
        // Claude Code reads the hook's stdout and stderr to their end: both close while
        // the installation is still going on (held), however long it takes.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let out = child.wait_with_output();
            let _ = tx.send(out);
        });
        let out = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{shell}: the hook's pipes stay open while cairn installs"))
            .expect("hook");
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(out.stdout.is_empty(), "{shell}");
        wait_until("the installation starts", || tools.cargo_runs() == 1);
        assert!(
            !data.join("bin/cairn-hook").exists(),
            "{shell}: still building"
        );
        // More hooks meanwhile start nothing more: one installation at a time.
        for _ in 0..3 {
            let out = run_with(&mut tools.command(shell, &launcher, &data, &["cairn-hook"]));
            assert_eq!(out.status.code(), Some(0));
        }
        tools.hold(false);
        wait_until("installed", || data.join("bin/cairn-hook").is_file());
        wait_until("the lock is released", || {
            !data.join(".installing").exists()
        });
        assert_eq!(tools.cargo_runs(), 1, "{shell}: {}", tools.calls());
        let calls = tools.calls();
        let checkout = tools.checkout().canonicalize().expect("checkout");
        assert!(
            calls.contains(&format!(
                "install --locked --force --profile release --path {}/bins",
                checkout.display()
            )),
            "{calls}"
        );
        // Installed: the next hook runs cairn-hook itself.
        let out = run_with(&mut tools.command(shell, &launcher, &data, &["cairn-hook"]));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "cairn-hook built \n");
    }
}

fn run_with(c: &mut Command) -> std::process::Output {
    c.stdin(Stdio::null()).output().expect("launcher")
}

#[test]
fn failed_installations_back_off_and_say_why() {
    let env = TestEnv::new();
    let tools = Toolchain::new(env.tmp.path());
    let data = env.tmp.path().join("plugin-data");
    let launcher = installed_launcher(env.tmp.path());
    tools.fail(true);
    let cmd = |args: &[&str]| {
        let mut c = tools.command("dash", &launcher, &data, args);
        c.env("CAIRN_SOURCE_DIR", tools.checkout());
        run_with(&mut c)
    };
    let out = cmd(&["cairn-hook"]);
    assert_eq!(out.status.code(), Some(0));
    wait_until("the attempt fails", || {
        data.join("install-failures").is_file() && !data.join(".installing").exists()
    });
    assert_eq!(tools.cargo_runs(), 1);
    // Within the backoff, neither a hook nor the MCP server starts another attempt; the
    // MCP server says why there is no cairn.
    assert_eq!(cmd(&["cairn-hook"]).status.code(), Some(0));
    let out = cmd(&["cairn", "mcp"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cairn is not installed: building cairn from")
            && err.contains("failed")
            && err.contains("install.log"),
        "{err}"
    );
    assert_eq!(tools.cargo_runs(), 1, "{}", tools.calls());
    let log = log(&data);
    assert!(
        log.contains("error: could not compile cairn")
            && log.contains("next automatic attempt in 30 s"),
        "{log}"
    );
    // 31 s later (the failure dated back): one new attempt, then twice as long to wait.
    let back = |n: u32, ago: u64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        std::fs::write(
            data.join("install-failures"),
            format!("{n} {}\n", now - ago),
        )
        .expect("failures");
    };
    back(1, 31);
    assert_eq!(cmd(&["cairn", "mcp"]).status.code(), Some(1));
    assert_eq!(tools.cargo_runs(), 2, "{}", tools.calls());
    let failures = std::fs::read_to_string(data.join("install-failures")).expect("failures");
    assert!(failures.starts_with("2 "), "{failures}");
    back(2, 31);
    assert_eq!(cmd(&["cairn", "mcp"]).status.code(), Some(1));
    assert_eq!(tools.cargo_runs(), 2, "{}", tools.calls());
    // A person asks for it: installed now, whatever the backoff.
    tools.fail(false);
    let out = cmd(&["install"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tools.cargo_runs(), 3);
    assert!(!data.join("install-failures").exists());
}

#[test]
fn a_plugin_from_a_checkout_is_built_from_it_and_imports_what_ran_meanwhile() {
    let env = TestEnv::new();
    let tools = Toolchain::new(env.tmp.path());
    // Claude Code's layout: the plugin copied into its cache, the marketplace (the
    // checkout) recorded in known_marketplaces.json, the data dir beside.
    let plugins = env.tmp.path().join(".claude/plugins");
    let root = plugins.join("cache/cairn/cairn/0.1.0");
    std::fs::create_dir_all(root.parent().expect("parent")).expect("cache");
    let ok = Command::new("cp")
        .arg("-R")
        .arg(repo().join("ops/claude-code"))
        .arg(&root)
        .status()
        .expect("cp");
    assert!(ok.success());
    let known = serde_json::json!({
        "other": {"source": {"source": "directory", "path": "/nowhere"}, "installLocation": "/nowhere"},
        "cairn": {"source": {"source": "directory", "path": tools.checkout()},
                  "installLocation": tools.checkout(), "lastUpdated": "2026-11-24T05:05:32.428Z"}
    });
    std::fs::write(
        plugins.join("known_marketplaces.json"),
        serde_json::to_string_pretty(&known).expect("json"),
    )
    .expect("known");
    let data = plugins.join("data/cairn-cairn");
    // Claude Code wrote transcripts (here none of a session cairn would import).
    std::fs::create_dir_all(env.tmp.path().join(".claude/projects")).expect("projects");
    let launcher = root.join("bin/cairn-run");
    let mut hook = tools.command("dash", &launcher, &data, &["cairn-hook"]);
    hook.env("CLAUDE_PLUGIN_ROOT", &root);
    assert_eq!(run_with(&mut hook).status.code(), Some(0));
    let requested = std::fs::read_to_string(data.join("install-requested")).expect("requested");
    assert!(
        cairn_core::clock::parse_iso_utc(requested.trim()).is_some(),
        "{requested}"
    );
    // The MCP server waits for the installation, then is cairn's.
    let mut mcp = tools.command("dash", &launcher, &data, &["cairn", "mcp"]);
    mcp.env("CLAUDE_PLUGIN_ROOT", &root);
    let out = run_with(&mut mcp);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cairn built mcp\n",
        "{}",
        log(&data)
    );
    // The server starts as soon as the binaries are there; the installer goes on to the
    // import.
    wait_for_import(&data);
    let calls = tools.calls();
    let checkout = tools.checkout().canonicalize().expect("checkout");
    assert!(
        calls.contains(&format!("--path {}/bins", checkout.display())),
        "{calls}"
    );
    // What ran while cairn was being installed is read back from the transcripts.
    assert!(
        calls.contains(&format!(
            "cairn import transcripts --since {} --yes",
            requested.trim()
        )),
        "{calls}"
    );
    assert!(!data.join("install-requested").exists());

    // Not a checkout, no release: the log says what is missing and how to fix it.
    let data = env.tmp.path().join("data-2");
    let launcher = installed_launcher(env.tmp.path());
    let out = run_with(&mut tools.command("dash", &launcher, &data, &["cairn", "mcp"]));
    assert_eq!(out.status.code(), Some(1));
    let log = log(&data);
    assert!(
        log.contains("cairn is not installed: the plugin is not in a checkout of cairn's source; and cannot download")
            && log.contains("https://rustup.rs")
            && log.contains("CAIRN_RELEASE_URL")
            && log.contains("cairn-run install"),
        "{log}"
    );
}

#[test]
fn link_gives_plugin_users_a_cairn_command_and_never_overwrites_another() {
    let env = TestEnv::new();
    let url = serve(release(env.tmp.path()));
    let data = env.tmp.path().join("plugin-data");
    let home = env.tmp.path();
    let link = |data: &Path| {
        Command::new(installed_launcher(home))
            .arg("link")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("CLAUDE_PLUGIN_DATA", data)
            .output()
            .expect("link")
    };
    // Not installed yet: nothing to link.
    let out = link(&data);
    assert_eq!(out.status.code(), Some(1));
    assert!(!home.join(".local/bin/cairn").exists());
    assert!(
        run(&data, &url, &["cairn", "--version"], "")
            .status
            .success()
    );
    let out = link(&data);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let dest = home.join(".local/bin/cairn");
    assert!(
        said.contains(&format!("linked {}", dest.display())),
        "{said}"
    );
    assert!(said.contains("is not on your PATH"), "{said}");
    assert_eq!(
        std::fs::read_link(&dest).expect("link"),
        data.join("bin/cairn")
    );
    let out = Command::new(&dest).arg("status").output().expect("cairn");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cairn from the release status\n"
    );
    // Again: nothing to do.
    let out = link(&data);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("already"));
    // Someone else's cairn is left alone.
    std::fs::remove_file(&dest).expect("rm");
    std::fs::write(&dest, "#!/bin/sh\necho mine\n").expect("foreign");
    let out = link(&data);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("left as it is"));
    assert_eq!(
        std::fs::read_to_string(&dest).expect("read"),
        "#!/bin/sh\necho mine\n"
    );
}

#[test]
fn a_session_that_ran_while_cairn_was_installed_is_read_back_from_its_transcript() {
    let env = TestEnv::new();
    let tools = Toolchain::real(env.tmp.path());
    let data = env.tmp.path().join("plugin-data");
    let launcher = installed_launcher(env.tmp.path());
    let command = |args: &[&str]| {
        let mut c = tools.command("dash", &launcher, &data, args);
        c.env("CAIRN_SOURCE_DIR", tools.checkout())
            .env("CAIRN_DATA_DIR", &env.data_dir)
            .env("CAIRN_WORKER__AUTOSTART", "false");
        c
    };
    tools.hold(true);
    let prompt = crate::support::hook_fixture("UserPromptSubmit.json");
    let out = crate::support::run_with_stdin(command(&["cairn-hook"]), prompt.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    wait_until("the installation starts", || tools.cargo_runs() == 1);
    // The session goes on while cairn is being built: Claude Code writes its transcript.
    let sid = "4268b601-cbcd-45ac-b3f1-4f61c888c668";
    let dir = env.tmp.path().join(".claude/projects/-home-dev-acme-api");
    std::fs::create_dir_all(&dir).expect("projects");
    std::fs::copy(
        crate::support::fixtures().join("claude-code-hooks/transcript.sample.jsonl"),
        dir.join(format!("{sid}.jsonl")),
    )
    .expect("transcript");
    tools.hold(false);
    wait_until("installed and imported", || {
        data.join("bin/cairn").is_file() && !data.join("install-requested").exists()
    });
    wait_until("the installer is done", || {
        !data.join(".installing").exists()
    });
    assert!(
        log(&data).contains("importing the sessions written since"),
        "{}",
        log(&data)
    );
    assert!(
        env.count(&format!(
            "SELECT count(*) FROM user_prompts WHERE session_id = '{sid}'"
        )) >= 1,
        "{}",
        log(&data)
    );
    // The launcher kept no event: the dropped prompt is nowhere in its data dir.
    let grep = Command::new("grep")
        .args(["-r", "-l", "hook_event_name"])
        .arg(&data)
        .output()
        .expect("grep");
    assert!(
        grep.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&grep.stdout)
    );
}
