//! `cairn import transcripts` and the worker's reconciliation, on the real binaries: the
//! sample transcript Claude Code wrote, and a large one generated from it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::support::{TestEnv, fixtures, hook_fixture, run_on_tty, stderr, stdout};

const SID: &str = "4268b601-cbcd-45ac-b3f1-4f61c888c668";

fn sample() -> String {
    std::fs::read_to_string(fixtures().join("claude-code-hooks/transcript.sample.jsonl"))
        .expect("sample")
}

/// Writes a transcript where Claude Code keeps it (under the env's HOME), last written an
/// hour ago (a finished session).
fn put(env: &TestEnv, sid: &str, text: &str) -> PathBuf {
    let dir = env.tmp.path().join(".claude/projects/-home-dev-acme-api");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join(format!("{sid}.jsonl"));
    std::fs::write(&path, text).expect("write");
    let f = std::fs::File::options()
        .append(true)
        .open(&path)
        .expect("open");
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .expect("mtime");
    path
}

fn cairn(env: &TestEnv, args: &[&str]) -> std::process::Output {
    env.run("cairn", args, b"")
}

#[test]
fn an_import_starts_the_worker_that_turns_it_into_memories() {
    let env = TestEnv::new();
    put(&env, SID, &sample());
    // As a script imports: --json, whose output is the report alone.
    let mut c = env.cmd("cairn");
    c.args(["import", "transcripts", "--yes", "--json"])
        .env("CAIRN_WORKER__AUTOSTART", "true")
        .env("CAIRN_WORKER__IDLE_EXIT_SECS", "1");
    let o = crate::support::run_with_stdin(c, b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(report["added"], 6, "{report}");
    // The worker it started takes every job, with nothing else to start it.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while env.count("SELECT count(*) FROM pending_messages WHERE status IN ('pending', 'claimed')")
        > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "jobs still waiting a minute after the import"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 1);
    // It stops once idle, before the data dir goes.
    let lock = cairn_core::store::paths::DataDir::new(&env.data_dir).worker_lock();
    while cairn_core::store::lock::holder(&lock)
        .ok()
        .flatten()
        .is_some()
    {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn import_reports_the_cost_first_asks_and_adds_nothing_twice() {
    let env = TestEnv::new();
    put(&env, SID, &sample());

    let o = cairn(&env, &["import", "transcripts", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("found 1 transcript ("), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("acme-api"))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, ["acme-api", "1", "1", "4", "5"], "{text}");
    assert!(text.contains("cost: no model calls"), "{text}");
    assert!(text.contains("dry run: nothing was written"), "{text}");
    assert!(!env.db_path().exists(), "a dry run creates nothing");

    // With a provider and a budget, the cost is estimated and spread over the budget.
    let mut c = env.cmd("cairn");
    c.args(["import", "transcripts", "--dry-run", "--json"])
        .env("CAIRN_MODEL__PROVIDER", "anthropic")
        .env("CAIRN_MODEL__DAILY_TOKEN_BUDGET", "1000");
    let o = crate::support::run_with_stdin(c, b"");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["estimated_model_calls"], 2, "{v}");
    assert!(v["estimated_input_tokens"].as_u64().expect("tokens") > 1000);
    let mut c = env.cmd("cairn");
    c.args(["import", "transcripts", "--dry-run"])
        .env("CAIRN_MODEL__PROVIDER", "anthropic")
        .env("CAIRN_MODEL__DAILY_TOKEN_BUDGET", "1000");
    let text = stdout(&crate::support::run_with_stdin(c, b""));
    assert!(text.contains("about 2 model calls"), "{text}");
    assert!(text.contains("spreads them over about"), "{text}");

    // Not on a terminal and no --yes: refused, nothing written.
    let o = cairn(&env, &["import", "transcripts"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--yes"), "{}", stderr(&o));
    assert!(!env.db_path().exists());
    // On a terminal, asked; no answer is no.
    let mut c = env.cmd("cairn");
    c.args(["import", "transcripts"]);
    let (screen, code) = run_on_tty(&c, 100);
    assert!(screen.contains("import and queue these? [y/N]"), "{screen}");
    assert!(screen.contains("nothing imported"), "{screen}");
    assert_eq!(code, Some(1));
    assert!(!env.db_path().exists());

    let o = cairn(&env, &["import", "transcripts", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("imported 6 events"), "{}", stdout(&o));
    // No worker, and none started (worker.autostart is off here): said how.
    assert!(
        stdout(&o).contains("start the worker (`cairn-worker`; worker.autostart is off)"),
        "{}",
        stdout(&o)
    );
    let o = cairn(
        &env,
        &["import", "transcripts", "--yes", "--project", "acme-*"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    // The six events imported, and no more.
    assert!(text.contains("already in memory: 6 events"), "{text}");
    assert!(text.contains("nothing to import"), "{text}");
    let o = cairn(
        &env,
        &["import", "transcripts", "--yes", "--project", "other"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to import"), "{}", stdout(&o));
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 5);

    // The worker summarises the turn once, under its own prompt.
    let o = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        env.count("SELECT count(*) FROM session_summaries WHERE prompt_number = 1"),
        1
    );
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 1);
    assert!(env.count("SELECT count(*) FROM observations") >= 1);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE status <> 'done'"),
        0
    );
}

#[test]
fn import_says_why_turns_are_open_and_nothing_to_import_is_success() {
    let env = TestEnv::new();
    // A session written to a minute ago: it may still be going.
    let path = put(&env, SID, &sample());
    std::fs::File::options()
        .append(true)
        .open(&path)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(60))
        .expect("mtime");

    let o = cairn(&env, &["import", "transcripts", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let row = text
        .lines()
        .find(|l| l.starts_with("acme-api"))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, ["acme-api", "1", "0", "4", "4"], "{text}");
    // The 0 turns are explained: how many are open, why, and when they are imported.
    assert!(text.contains("1 turn is still open"), "{text}");
    assert!(text.contains("changed in the last 10 minutes"), "{text}");
    assert!(text.contains("An import from 20"), "{text}");
    assert!(text.contains(" UTC includes it"), "{text}");

    // Everything already in memory, no terminal and no --yes: a success saying so.
    let o = cairn(&env, &["import", "transcripts", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = cairn(&env, &["import", "transcripts"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("nothing to import"), "{text}");
    assert!(text.contains("1 turn is still open"), "{text}");
    assert!(!stderr(&o).contains("confirmation"), "{}", stderr(&o));
    // No transcripts matching at all: the same.
    let o = cairn(&env, &["import", "transcripts", "--project", "other"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to import"), "{}", stdout(&o));
}

#[test]
fn the_estimate_counts_the_subscription_of_a_logged_in_claude() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    put(&env, SID, &sample());
    // A `claude` on PATH, logged in, that must never be asked for a completion.
    let bin = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let claude = bin.join("claude");
    let asked = env.tmp.path().join("asked");
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\n[ \"$1\" = auth ] && {{ echo '{{\"loggedIn\": true}}'; exit 0; }}\ntouch {}\nexit 1\n",
            asked.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for provider in ["auto", "claude-cli"] {
        let mut c = env.cmd("cairn");
        c.args(["import", "transcripts", "--dry-run"])
            .env("PATH", &path)
            .env("CAIRN_MODEL__PROVIDER", provider);
        let o = crate::support::run_with_stdin(c, b"");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(!text.contains("no model calls"), "{provider}: {text}");
        assert!(
            text.contains("cost: about 2 model calls and "),
            "{provider}: {text}"
        );
        assert!(text.contains("with claude-cli"), "{provider}: {text}");
        assert!(
            text.contains("your Claude subscription's usage limits"),
            "{provider}: {text}"
        );
        let mut c = env.cmd("cairn");
        c.args(["import", "transcripts", "--dry-run", "--json"])
            .env("PATH", &path)
            .env("CAIRN_MODEL__PROVIDER", provider);
        let o = crate::support::run_with_stdin(c, b"");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["provider"], "claude-cli", "{v}");
        assert_eq!(v["estimated_model_calls"], 2, "{v}");
        assert!(v["estimated_input_tokens"].as_u64().expect("tokens") > 1000);
    }
    assert!(!asked.exists(), "an estimate spends nothing");
}

#[test]
fn the_worker_recovers_what_broken_hooks_missed_and_status_says_so() {
    let env = TestEnv::new();
    // Live: the session started, the prompt and the first tool call were captured; then
    // the hooks broke until SessionEnd.
    for f in [
        "SessionStart.json",
        "UserPromptSubmit.json",
        "PostToolUse.json",
        "SessionEnd.json",
    ] {
        let o = env.run("cairn-hook", &[], hook_fixture(f).as_bytes());
        assert_eq!(o.status.code(), Some(0));
    }
    put(&env, SID, &sample());
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 1);

    let o = env.run("cairn-worker", &["--once"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The three other tool calls and the turn's end.
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 5);
    assert_eq!(
        env.count("SELECT coalesce(sum(events), 0) FROM transcript_recovered"),
        4
    );
    assert_eq!(env.count("SELECT count(*) FROM session_summaries"), 1);
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 1);
    let o = cairn(&env, &["status"]);
    let text = stdout(&o);
    assert!(
        text.contains("4 events the hooks missed, recovered from transcripts"),
        "{text}"
    );
    assert!(text.contains("needs attention"), "{text}");
    assert_eq!(o.status.code(), Some(1));

    // Compared once: a second worker run recovers nothing more.
    env.run("cairn-worker", &["--once"], b"");
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 5);
    assert_eq!(env.count("SELECT count(*) FROM transcript_recovered"), 1);
}

#[path = "../common/large_transcript.rs"]
mod scaled;

/// The sample's session repeated with fresh ids until the file is `target` bytes.
pub fn large_transcript(path: &Path, target: u64) -> u64 {
    scaled::write_scaled(&sample(), path, target)
}

#[test]
fn a_large_transcript_is_imported_in_bounded_memory() {
    let env = TestEnv::new();
    let dir = env.tmp.path().join("big");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join(format!("{SID}.jsonl"));
    let size = large_transcript(&path, 200 << 20);
    let f = std::fs::File::options()
        .append(true)
        .open(&path)
        .expect("open");
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .expect("mtime");

    let mut c = env.cmd("cairn");
    c.args([
        "import",
        "transcripts",
        "--yes",
        path.to_str().expect("utf8"),
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let child = c.spawn().expect("spawn");
    let (ok, peak_kib) = wait_with_peak_rss(child);
    assert!(ok);
    let turns = env.count("SELECT count(*) FROM user_prompts");
    assert!(turns > 2000, "{turns}");
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'summarize'"),
        turns
    );
    // The whole file is 200 MiB; what is held is a line and a batch of rows at a time.
    assert!(peak_kib > 0, "no reading of the child's memory");
    assert!(
        peak_kib < 48 * 1024,
        "peak RSS {peak_kib} KiB importing {size} bytes"
    );
}

/// Waits for `child`; whether it exited 0, and its peak resident set in KiB (`VmHWM`
/// of its `/proc/<pid>/status`, read until it exits: the figure is the process's own,
/// whereas `wait4`'s would include the test process it was spawned from).
fn wait_with_peak_rss(mut child: std::process::Child) -> (bool, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_file)
            && let Some(kib) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(st) = child.try_wait().expect("wait") {
            return (st.success(), peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
