//! The `claude` CLI in print mode (`claude -p --output-format json`, prompt on stdin), for
//! users on a Claude subscription with no API key.
//!
//! Invariants:
//! - the command runs with `CAIRN_SUPPRESS_HOOKS=1`, so cairn's own hooks inside it do
//!   nothing and memory never observes itself;
//! - it runs in a process group of its own; the whole group is killed when the call times
//!   out, when it ends (stragglers it left behind), and by [`kill_all`] at shutdown, so no
//!   process outlives the call;
//! - it asks for a small model ([`DEFAULT_MODEL`] unless `model.model` names one) and for
//!   the JSON result, whose `usage` and `total_cost_usd` are recorded as the call's real
//!   tokens and cost; a CLI that answers in plain text has its tokens estimated instead;
//! - a failure keeps the CLI's own words (the JSON `result`, else stdout, else stderr); a
//!   CLI that is not logged in is [`ModelError::NotLoggedIn`], a condition to wait out;
//! - whether the CLI is logged in is asked of the CLI itself (`claude auth status`, which
//!   spends no tokens), never by making a model call.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Completion, ModelError};
use crate::store::paths::{CLAUDE_CONFIG_DIR_ENV, ClaudeCode};
use crate::worker::prompt::{Prompt, cap};

/// The model `claude-cli` asks for when `model.model` is empty: the CLI's alias for the
/// current Haiku, small and cheap, which is all extraction needs.
pub const DEFAULT_MODEL: &str = "haiku";

/// How long `claude auth status` may take before the CLI counts as not logged in.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Process groups of calls in flight.
static LIVE_GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// A configured `claude` command.
#[derive(Debug)]
pub struct Client {
    command: String,
    model: String,
    timeout: Duration,
}

impl Client {
    /// `model` may be empty ([`DEFAULT_MODEL`]).
    pub fn new(command: &str, model: &str, timeout: Duration) -> Self {
        Self {
            command: command_or_default(command),
            model: if model.trim().is_empty() {
                DEFAULT_MODEL.into()
            } else {
                model.trim().to_string()
            },
            timeout,
        }
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    /// One attempt: runs the command with the prompt on stdin, time-boxed.
    pub fn complete(&self, prompt: &Prompt) -> Result<Completion, ModelError> {
        let out = run(
            &self.command,
            &["-p", "--output-format", "json", "--model", &self.model],
            Some(prompt.joined()),
            self.timeout,
        )?;
        let Some(out) = out else {
            return Err(ModelError::Timeout(self.timeout));
        };
        reply(&self.command, &out)
    }
}

/// What a finished command printed and how it exited.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Output {
    success: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// The completion, or the error, a finished `claude -p --output-format json` reports.
fn reply(command: &str, out: &Output) -> Result<Completion, ModelError> {
    let json = result_object(&out.stdout);
    let said = json
        .as_ref()
        .and_then(|v| v.get("result"))
        .and_then(|r| r.as_str())
        .map(str::to_string);
    let is_error = json
        .as_ref()
        .and_then(|v| v.get("is_error"))
        .and_then(|e| e.as_bool())
        .unwrap_or(false);
    if !out.success || is_error {
        let text = said
            .filter(|s| !s.trim().is_empty())
            .or_else(|| Some(out.stdout.trim().to_string()).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| out.stderr.trim().to_string());
        let text = cap(text.trim(), 500);
        if says_not_logged_in(&text) {
            return Err(ModelError::NotLoggedIn(text));
        }
        return Err(ModelError::Process(format!(
            "{command} failed ({}): {text}",
            out.status
        )));
    }
    let Some(json) = json else {
        // An older CLI, or one that ignored the format: plain text, tokens unknown (the
        // worker estimates them).
        return Ok(Completion {
            text: out.stdout.clone(),
            ..Completion::default()
        });
    };
    let usage = json.get("usage");
    let n = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    Ok(Completion {
        text: said.unwrap_or_default(),
        // The CLI's own system prompt is sent too, mostly as cache writes and reads: all
        // of it is input the account pays for.
        input_tokens: n("input_tokens")
            + n("cache_creation_input_tokens")
            + n("cache_read_input_tokens"),
        output_tokens: n("output_tokens"),
        cost_usd: json.get("total_cost_usd").and_then(|c| c.as_f64()),
    })
}

/// The `{"type":"result",…}` object in the CLI's stdout (the last JSON line that is one).
fn result_object(stdout: &str) -> Option<serde_json::Value> {
    let whole = serde_json::from_str::<serde_json::Value>(stdout.trim()).ok();
    whole
        .into_iter()
        .chain(
            stdout
                .lines()
                .rev()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok()),
        )
        .find(|v| v.get("result").is_some() || v.get("is_error").is_some())
}

/// The CLI's words for a missing or expired login ("Not logged in · Please run /login",
/// "Invalid API key · Please run /login", "OAuth token has expired").
fn says_not_logged_in(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "not logged in",
        "please run /login",
        "oauth token has expired",
        "invalid api key",
        "authentication_error",
    ]
    .iter()
    .any(|p| t.contains(p))
}

/// Whether a `claude` CLI is there and logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// Found and logged in (`claude auth status` says so).
    LoggedIn,
    /// Found, not logged in.
    LoggedOut,
    /// No such command.
    Missing,
}

/// Asks the CLI `command` (looked up on `env`'s `PATH` unless it is a path) whether it is
/// logged in: `claude auth status`, which prints `{"loggedIn": …}` and spends no tokens.
/// A CLI too old to answer counts as logged in when a login of its own is on disk
/// (`CLAUDE_CODE_OAUTH_TOKEN`, or `.credentials.json` in its config directory).
pub fn login(command: &str, env: &dyn Fn(&str) -> Option<String>) -> Login {
    let Some(program) = locate(&command_or_default(command), env) else {
        return Login::Missing;
    };
    let out = run(
        &program.display().to_string(),
        &["auth", "status", "--json"],
        None,
        STATUS_TIMEOUT,
    );
    let answer = out
        .ok()
        .flatten()
        .and_then(|o| serde_json::from_str::<serde_json::Value>(o.stdout.trim()).ok())
        .and_then(|v| v.get("loggedIn").and_then(|l| l.as_bool()));
    match answer {
        Some(true) => Login::LoggedIn,
        Some(false) => Login::LoggedOut,
        None if credentials_on_disk(env) => Login::LoggedIn,
        None => Login::LoggedOut,
    }
}

fn credentials_on_disk(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if set("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
        return true;
    }
    let home = set("HOME").map(PathBuf::from);
    ClaudeCode::new(set(CLAUDE_CONFIG_DIR_ENV).as_deref(), home.as_deref())
        .is_some_and(|c| c.config.join(".credentials.json").is_file())
}

/// `command` as given when it names a path, else the first executable of that name on
/// `env`'s `PATH`.
pub fn locate(command: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = PathBuf::from(command);
        return runnable(&p).then_some(p);
    }
    env("PATH")?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| runnable(p))
}

fn command_or_default(command: &str) -> String {
    if command.trim().is_empty() {
        "claude".into()
    } else {
        command.trim().to_string()
    }
}

/// Runs `command args` with `input` on stdin in a process group of its own, with cairn's
/// hooks suppressed. `Ok(None)` when it did not finish within `timeout` (it was killed).
fn run(
    command: &str,
    args: &[&str],
    input: Option<String>,
    timeout: Duration,
) -> Result<Option<Output>, ModelError> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env(crate::SUPPRESS_HOOKS_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ModelError::Config(format!(
                "cannot run {command} (model.claude_command): not found"
            ))
        } else {
            ModelError::Process(format!("cannot run {command}: {e}"))
        }
    })?;
    let group = Group::register(child.id() as i32);
    let mut stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let (Some(pipe), Some(input)) = (stdin.as_mut(), input) {
            let _ = pipe.write_all(input.as_bytes());
        }
    });
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= timeout => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                drop(group);
                let _ = child.wait();
                return Err(ModelError::Process(format!(
                    "cannot wait for {command}: {e}"
                )));
            }
        }
    };
    // Kill the group whatever happened: on timeout the command itself, after a normal
    // exit anything it left running.
    drop(group);
    if status.is_none() {
        let _ = child.wait();
    }
    let _ = writer.join();
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    Ok(status.map(|status| Output {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    }))
}

fn reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// A live process group; dropping it kills the group.
struct Group(i32);

impl Group {
    fn register(pgid: i32) -> Group {
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.push(pgid);
        }
        Group(pgid)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        kill_group(self.0);
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.retain(|g| *g != self.0);
        }
    }
}

/// Kills every process group of a call still in flight (at shutdown).
pub fn kill_all() {
    let groups: Vec<i32> = LIVE_GROUPS.lock().map(|l| l.clone()).unwrap_or_default();
    for g in groups {
        kill_group(g);
    }
}

/// Kills the process group `pgid`, which this module created (`process_group(0)` makes the
/// child its leader). ESRCH (the group is gone) is the expected outcome after a clean exit.
fn kill_group(pgid: i32) {
    use rustix::process::{Pid, Signal, kill_process_group};
    if pgid <= 1 {
        return;
    }
    if let Some(group) = Pid::from_raw(pgid) {
        let _ = kill_process_group(group, Signal::KILL);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &std::path::Path, body: &str) -> String {
        let path = dir.join("claude");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    }

    /// A `claude` that behaves like the real one (2.1.x): `auth status --json` answers
    /// `{"loggedIn": …}` (exit 1 when not), and `-p --output-format json` prints one result
    /// object, errors included, on stdout. `mode` beside it picks the behaviour: `ok`,
    /// `logged-out`, `api-500`; `args` and `stdin` record what it was given.
    pub(crate) const FAKE_CLAUDE: &str = r#"here=$(dirname "$0")
mode=$(cat "$here/mode" 2>/dev/null || echo ok)
if [ "$1" = auth ]; then
  if [ "$mode" = logged-out ]; then
    printf '{\n  "loggedIn": false,\n  "authMethod": "none",\n  "apiProvider": "firstParty"\n}\n'; exit 1
  fi
  printf '{\n  "loggedIn": true,\n  "authMethod": "claude.ai",\n  "apiProvider": "firstParty"\n}\n'; exit 0
fi
echo "$*" > "$here/args"
echo "suppress=$CAIRN_SUPPRESS_HOOKS" >> "$here/args"
cat > "$here/stdin"
case "$mode" in
  logged-out)
    printf '{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"duration_ms":486,"num_turns":1,"result":"Not logged in \302\267 Please run /login","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}\n'
    exit 1 ;;
  api-500)
    printf '{"type":"result","subtype":"success","is_error":true,"api_error_status":500,"num_turns":1,"result":"API Error: 500 {\\"type\\":\\"error\\",\\"error\\":{\\"type\\":\\"api_error\\",\\"message\\":\\"Internal server error\\"}}","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}\n'
    exit 1 ;;
  *)
    printf '{"type":"result","subtype":"success","is_error":false,"duration_ms":2345,"num_turns":1,"result":"<observation><title>t</title></observation>","session_id":"s","total_cost_usd":0.0123,"usage":{"input_tokens":12,"cache_creation_input_tokens":12800,"cache_read_input_tokens":300,"output_tokens":40,"service_tier":"standard"}}\n' ;;
esac
"#;

    pub(crate) fn fake_claude(dir: &std::path::Path, mode: &str) -> String {
        std::fs::write(dir.join("mode"), mode).expect("mode");
        script(dir, FAKE_CLAUDE)
    }

    fn prompt() -> Prompt {
        Prompt {
            system: "SYS".into(),
            user: "USER".into(),
        }
    }

    #[test]
    fn asks_for_a_small_model_and_json_and_records_real_usage_and_cost() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cmd = fake_claude(tmp.path(), "ok");
        let c = Client::new(&cmd, "", Duration::from_secs(20));
        assert_eq!(c.model(), DEFAULT_MODEL);
        let out = c.complete(&prompt()).expect("ok");
        assert_eq!(out.text, "<observation><title>t</title></observation>");
        assert_eq!(
            (out.input_tokens, out.output_tokens),
            (12 + 12_800 + 300, 40)
        );
        assert_eq!(out.cost_usd, Some(0.0123));
        let args = std::fs::read_to_string(tmp.path().join("args")).expect("args");
        assert_eq!(
            args, "-p --output-format json --model haiku\nsuppress=1\n",
            "{args}"
        );
        let stdin = std::fs::read_to_string(tmp.path().join("stdin")).expect("stdin");
        assert!(stdin.contains("SYS") && stdin.contains("USER"), "{stdin}");
        let named = Client::new(&cmd, "sonnet", Duration::from_secs(20));
        named.complete(&prompt()).expect("ok");
        let args = std::fs::read_to_string(tmp.path().join("args")).expect("args");
        assert!(
            args.starts_with("-p --output-format json --model sonnet\n"),
            "{args}"
        );
    }

    #[test]
    fn errors_keep_the_clis_own_words() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cmd = fake_claude(tmp.path(), "logged-out");
        let e = Client::new(&cmd, "", Duration::from_secs(20))
            .complete(&prompt())
            .expect_err("not logged in");
        assert!(matches!(e, ModelError::NotLoggedIn(_)), "{e:?}");
        assert!(
            e.to_string().contains("Not logged in · Please run /login"),
            "{e}"
        );
        assert!(!e.is_retryable());
        assert_eq!(e.wait_asked(), Some(super::super::LOGIN_WAIT));

        std::fs::write(tmp.path().join("mode"), "api-500").expect("mode");
        let e = Client::new(&cmd, "", Duration::from_secs(20))
            .complete(&prompt())
            .expect_err("500");
        assert!(matches!(e, ModelError::Process(_)), "{e:?}");
        assert!(e.to_string().contains("API Error: 500"), "{e}");
        assert!(e.is_retryable() && e.wait_asked().is_none());
    }

    #[test]
    fn plain_text_and_stderr_only_failures_still_work() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // A CLI that ignores the format: the text is the reply, tokens left to estimate.
        let cmd = script(tmp.path(), "cat >/dev/null; echo '<none/>'");
        let out = Client::new(&cmd, "", Duration::from_secs(20))
            .complete(&prompt())
            .expect("ok");
        assert_eq!((out.text.trim(), out.input_tokens), ("<none/>", 0));
        let cmd = script(tmp.path(), "echo nope >&2; exit 4");
        let e = Client::new(&cmd, "m", Duration::from_secs(20))
            .complete(&prompt())
            .expect_err("fails");
        assert!(
            matches!(e, ModelError::Process(_)) && e.to_string().contains("nope"),
            "{e}"
        );
        let e = Client::new("/nonexistent/claude", "", Duration::from_secs(1))
            .complete(&prompt())
            .expect_err("missing");
        assert!(matches!(e, ModelError::Config(_)), "{e}");
    }

    #[test]
    fn login_is_asked_of_the_cli_on_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let path = bin.display().to_string();
        let env = |k: &str| (k == "PATH").then(|| path.clone());
        assert_eq!(login("claude", &env), Login::Missing);
        fake_claude(&bin, "ok");
        assert_eq!(login("claude", &env), Login::LoggedIn);
        std::fs::write(bin.join("mode"), "logged-out").expect("mode");
        assert_eq!(login("claude", &env), Login::LoggedOut);
        // No model call was made: only `auth status` ran.
        assert!(!bin.join("args").exists());
        // A CLI too old for `auth status`: a login on disk decides.
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".claude")).expect("home");
        script(&bin, "echo 'unknown command'; exit 1");
        let home_s = home.display().to_string();
        let env2 = |k: &str| match k {
            "PATH" => Some(path.clone()),
            "HOME" => Some(home_s.clone()),
            _ => None,
        };
        assert_eq!(login("claude", &env2), Login::LoggedOut);
        std::fs::write(home.join(".claude/.credentials.json"), "{}").expect("creds");
        assert_eq!(login("claude", &env2), Login::LoggedIn);
    }

    #[test]
    fn a_hanging_command_is_killed_with_its_children() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pidfile = tmp.path().join("child.pid");
        let groupfile = tmp.path().join("group.pid");
        let cmd = script(
            tmp.path(),
            &format!(
                "echo $$ > {}; sleep 300 & echo $! > {}; sleep 300",
                groupfile.display(),
                pidfile.display()
            ),
        );
        let e = Client::new(&cmd, "", Duration::from_millis(500))
            .complete(&prompt())
            .expect_err("times out");
        assert!(matches!(e, ModelError::Timeout(_)), "{e}");
        let pid = std::fs::read_to_string(&pidfile).expect("pid");
        let proc = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
        // A killed child may linger briefly as a zombie of init; wait for it to go.
        let mut gone = false;
        for _ in 0..200 {
            let state = std::fs::read_to_string(proc.join("stat")).unwrap_or_default();
            if state.is_empty() || state.contains(") Z") {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone, "background child {} survived", pid.trim());
        // Other tests run commands at the same time: only this one's group must be gone.
        let group: i32 = std::fs::read_to_string(&groupfile)
            .expect("group")
            .trim()
            .parse()
            .expect("pid");
        assert!(!LIVE_GROUPS.lock().expect("lock").contains(&group));
    }
}
