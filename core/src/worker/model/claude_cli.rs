//! The `claude` CLI in print mode (`claude -p`, prompt on stdin), for users on a Claude
//! subscription with no API key.
//!
//! Invariants:
//! - the command runs with `CAIRN_SUPPRESS_HOOKS=1`, so cairn's own hooks inside it do
//!   nothing and memory never observes itself;
//! - it runs in a process group of its own; the whole group is killed when the call times
//!   out, when it ends (stragglers it left behind), and by [`kill_all`] at shutdown, so no
//!   process outlives the call.
//!
//! The CLI reports no token counts in text mode; they are estimated as characters / 4.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Completion, ModelError};
use crate::worker::prompt::{Prompt, cap};

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
    /// `model` may be empty (the CLI's own default).
    pub fn new(command: &str, model: &str, timeout: Duration) -> Self {
        Self {
            command: if command.trim().is_empty() {
                "claude".into()
            } else {
                command.trim().to_string()
            },
            model: model.to_string(),
            timeout,
        }
    }

    pub fn model(&self) -> &str {
        if self.model.is_empty() {
            "claude-cli-default"
        } else {
            &self.model
        }
    }

    /// One attempt: runs the command with the prompt on stdin, time-boxed.
    pub fn complete(&self, prompt: &Prompt) -> Result<Completion, ModelError> {
        let input = prompt.joined();
        let mut cmd = Command::new(&self.command);
        cmd.arg("-p");
        if !self.model.is_empty() {
            cmd.args(["--model", &self.model]);
        }
        cmd.env(crate::SUPPRESS_HOOKS_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ModelError::Config(format!(
                    "cannot run {} (model.claude_command): not found",
                    self.command
                ))
            } else {
                ModelError::Process(format!("cannot run {}: {e}", self.command))
            }
        })?;
        let group = Group::register(child.id() as i32);
        let mut stdin = child.stdin.take();
        let writer = std::thread::spawn(move || {
            if let Some(pipe) = stdin.as_mut() {
                let _ = pipe.write_all(input.as_bytes());
            }
        });
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= self.timeout => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    drop(group);
                    let _ = child.wait();
                    return Err(ModelError::Process(format!("cannot wait for claude: {e}")));
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
        let Some(status) = status else {
            return Err(ModelError::Timeout(self.timeout));
        };
        if !status.success() {
            return Err(ModelError::Process(format!(
                "{} exited with {status}: {}",
                self.command,
                cap(stderr.trim(), 500)
            )));
        }
        Ok(Completion {
            input_tokens: (prompt.chars() / 4) as u64,
            output_tokens: (stdout.chars().count() / 4) as u64,
            text: stdout,
        })
    }
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

#[allow(unsafe_code)]
fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals the process group `pgid`, which this
    // module created (process_group(0) makes the child its leader); it touches no memory.
    // ESRCH (the group is gone) is the expected outcome after a clean exit.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &std::path::Path, body: &str) -> String {
        let path = dir.join("claude");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.display().to_string()
    }

    fn prompt() -> Prompt {
        Prompt {
            system: "SYS".into(),
            user: "USER".into(),
        }
    }

    #[test]
    fn passes_the_prompt_on_stdin_with_hooks_suppressed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cmd = script(
            tmp.path(),
            "input=$(cat); echo \"args=$* suppress=$CAIRN_SUPPRESS_HOOKS\"; echo \"$input\"",
        );
        let c = Client::new(&cmd, "", Duration::from_secs(20));
        let out = c.complete(&prompt()).expect("ok");
        assert!(out.text.contains("args=-p suppress=1"), "{}", out.text);
        assert!(out.text.contains("SYS") && out.text.contains("USER"));
        assert!(out.input_tokens > 0);
    }

    #[test]
    fn a_failing_command_is_a_retryable_process_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
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
    fn a_hanging_command_is_killed_with_its_children() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pidfile = tmp.path().join("child.pid");
        let cmd = script(
            tmp.path(),
            &format!("sleep 300 & echo $! > {}; sleep 300", pidfile.display()),
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
        assert!(LIVE_GROUPS.lock().expect("lock").is_empty());
    }
}
