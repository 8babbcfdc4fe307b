//! `cairn-hook` end to end: the real binary fed real Claude Code payloads on temp data dirs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{TestEnv, hook_fixture, run_with_stdin, session_end_that_ran, stderr, stdout};

const PLAIN: &str = r#"{"continue":true,"suppressOutput":true}"#;
const SESSION: &str = "4268b601-cbcd-45ac-b3f1-4f61c888c668";

fn hook(env: &TestEnv, input: &[u8]) -> String {
    let out = env.run("cairn-hook", &[], input);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    stdout(&out)
}

fn quarantine_reasons(env: &TestEnv) -> Vec<String> {
    let db = env.db();
    let mut stmt = db
        .prepare("SELECT reason FROM quarantine ORDER BY id")
        .expect("prepare");
    stmt.query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn every_fixture_is_answered_and_stored() {
    let env = TestEnv::new();
    // A session in the order Claude Code sends it, then every other recorded payload.
    let order = [
        "SessionStart.json",
        "UserPromptSubmit.json",
        "PreToolUse.json",
        "PostToolUse.json",
        "PostToolBatch.json",
        "PreToolUse.Read.json",
        "PostToolUse.Read.json",
        "PreToolUse.Agent.json",
        "SubagentStart.json",
        "PreToolUse.Bash.subagent.json",
        "PostToolUse.Bash.subagent.json",
        "SubagentStop.json",
        "PostToolUse.Agent.json",
        "PostToolUseFailure.json",
        "Stop.json",
        "PreCompact.json",
        "SubagentStop.compaction.json",
        "SessionStart.compact.json",
        "PostCompact.json",
        "SessionEnd.json",
        "SessionStart.resume.json",
        "SessionStart.startup.interactive.json",
        "UserPromptSubmit.interactive.json",
        "PermissionRequest.json",
        "Notification.json",
        "Notification.idle_prompt.json",
        "SessionEnd.prompt_input_exit.json",
    ];
    let dir = crate::support::fixtures().join("claude-code-hooks");
    let on_disk = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .count();
    assert_eq!(on_disk, order.len(), "a fixture is missing from the list");

    let mut not_captured = 0;
    for name in order {
        let answer = hook(&env, hook_fixture(name).as_bytes());
        let v: Value = serde_json::from_str(&answer).expect("stdout is JSON");
        match name {
            "SessionStart.json"
            | "SessionStart.compact.json"
            | "SessionStart.startup.interactive.json" => {
                assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
                assert!(v["hookSpecificOutput"]["additionalContext"].is_string());
            }
            _ => assert_eq!(answer, PLAIN, "{name}"),
        }
        let event = name.split('.').next().expect("event");
        // PreToolUse is answered (here with nothing known about the file), not kept.
        if ![
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "PostToolUseFailure",
            "Stop",
            "SessionEnd",
        ]
        .contains(&event)
        {
            not_captured += 1;
        }
    }

    // Two sessions; the first ended, then resumed (active again), the second ended.
    assert_eq!(env.count("SELECT count(*) FROM sessions"), 2);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sessions WHERE session_id = '{SESSION}' AND status = 'active' AND project = 'acme-api' AND cwd = '/home/dev/acme-api'"
        )),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sessions WHERE status = 'ended' AND ended_at IS NOT NULL"),
        1
    );
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 2);
    assert_eq!(
        env.count("SELECT sum(prompt_counter) FROM sessions"),
        2,
        "one prompt per session"
    );
    // Bash, Read, the subagent's Bash, Agent, the failure: five observation jobs of turn 1.
    assert_eq!(
        env.count(
            "SELECT count(*) FROM pending_messages WHERE kind = 'observation' AND prompt_number = 1 AND status = 'pending'"
        ),
        5
    );
    let db = env.db();
    let payload: String = db
        .query_row(
            "SELECT payload FROM pending_messages WHERE dedupe_key = 'tool:toolu_fake_a9c408df82a84e74945a'",
            [],
            |r| r.get(0),
        )
        .expect("subagent tool");
    let p: Value = serde_json::from_str(&payload).expect("payload");
    assert_eq!(p["agent_type"], "general-purpose");
    assert_eq!(p["agent_id"], "a234c386c0b95e3d9");
    assert_eq!(
        p["tool_input"]["command"],
        "echo sub > /home/dev/acme-api/sub.txt"
    );
    let payload: String = db
        .query_row(
            "SELECT payload FROM pending_messages WHERE dedupe_key = 'tool:toolu_fake_e9a6fc2548dd4676a27b'",
            [],
            |r| r.get(0),
        )
        .expect("failure");
    let p: Value = serde_json::from_str(&payload).expect("payload");
    assert_eq!(p["failed"], true);
    assert_eq!(p["error"], "Exit code 3\nfailing");
    let payload: String = db
        .query_row(
            &format!("SELECT payload FROM pending_messages WHERE dedupe_key = 'turn:{SESSION}:1'"),
            [],
            |r| r.get(0),
        )
        .expect("summarize");
    let p: Value = serde_json::from_str(&payload).expect("payload");
    assert_eq!(
        p["last_assistant_message"],
        "All done: out.txt and sub.txt written."
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'summarize'"),
        1
    );
    // The events cairn does not capture are kept, with their name, in the quarantine.
    assert_eq!(
        env.count("SELECT count(*) FROM quarantine WHERE reason LIKE '%not captured%' AND event IS NOT NULL"),
        not_captured
    );
}

#[test]
fn resume_answers_plainly_unless_configured() {
    let env = TestEnv::new();
    let resume = hook_fixture("SessionStart.resume.json");
    assert_eq!(hook(&env, resume.as_bytes()), PLAIN);
    let mut cmd = env.cmd("cairn-hook");
    cmd.env("CAIRN_CAPTURE__CONTEXT_ON_RESUME", "true");
    let out = run_with_stdin(cmd, resume.as_bytes());
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    assert_eq!(env.count("SELECT count(*) FROM sessions"), 1);
}

fn tool_event(i: usize) -> String {
    let v: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("fixture");
    let mut v = v;
    v["tool_use_id"] = Value::String(format!("toolu_parallel_{i}"));
    v["session_id"] = Value::String(format!("session-{}", i % 4));
    v.to_string()
}

fn run_parallel(env: &TestEnv, n: usize) {
    let mut children = Vec::new();
    for i in 0..n {
        let mut c = env.cmd("cairn-hook");
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(tool_event(i).as_bytes())
            .expect("write stdin");
        drop(stdin);
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout), PLAIN);
    }
}

#[test]
fn sixty_four_parallel_hooks_on_a_fresh_data_dir_all_land() {
    let env = TestEnv::new();
    assert!(!env.data_dir.exists());
    run_parallel(&env, 64);
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE kind = 'observation'"),
        64
    );
    assert_eq!(env.count("SELECT count(*) FROM sessions"), 4);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 0);
    assert!(!env.data_dir.join("spool").exists() || dir_is_empty(&env.data_dir.join("spool")));
    // And again on the now existing database.
    let env2 = TestEnv::new();
    hook(&env2, hook_fixture("SessionStart.json").as_bytes());
    run_parallel(&env2, 64);
    assert_eq!(
        env2.count("SELECT count(*) FROM pending_messages WHERE kind = 'observation'"),
        64
    );
}

fn dir_is_empty(p: &Path) -> bool {
    std::fs::read_dir(p).map_or(true, |mut d| d.next().is_none())
}

#[test]
fn bad_inputs_exit_zero_and_are_quarantined() {
    let env = TestEnv::new();
    let mut huge = br#"{"hook_event_name":"PostToolUse","session_id":"s","cwd":"/x","tool_name":"Bash","tool_use_id":"t","tool_response":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100 * 1024 * 1024));
    huge.extend(br#""}"#);
    let cases: Vec<(&str, Vec<u8>, &str)> =
        vec![
        ("empty", Vec::new(), "empty input"),
        ("invalid json", b"{\"hook_event_name\": ".to_vec(), "not valid JSON"),
        // Bad bytes are replaced; what is missing is the name.
        ("invalid utf-8", b"{\"prompt\": \"\xff\xfe\"}".to_vec(), "missing field hook_event_name"),
        ("huge", huge, "larger than"),
        (
            "missing session",
            br#"{"hook_event_name":"Stop","cwd":"/x"}"#.to_vec(),
            "missing field session_id",
        ),
        (
            "missing tool id",
            br#"{"hook_event_name":"PostToolUse","session_id":"s","cwd":"/x","tool_name":"Bash"}"#
                .to_vec(),
            "missing field tool_use_id",
        ),
        (
            "unknown event",
            br#"{"hook_event_name":"SomethingNew","session_id":"s","cwd":"/x"}"#.to_vec(),
            "SomethingNew is not captured",
        ),
        ("not an object", b"[1, 2, 3]".to_vec(), "not a JSON object"),
    ];
    for (i, (what, input, reason)) in cases.iter().enumerate() {
        assert_eq!(hook(&env, input), PLAIN, "{what}");
        let reasons = quarantine_reasons(&env);
        assert_eq!(reasons.len(), i + 1, "{what}");
        assert!(reasons[i].contains(reason), "{what}: {}", reasons[i]);
    }
    let (raw_len, kept): (i64, i64) = env
        .db()
        .query_row(
            "SELECT raw_len, length(raw) FROM quarantine WHERE reason LIKE '%larger than%'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("huge row");
    assert!(raw_len > 100 * 1024 * 1024);
    assert!(kept <= 64 * 1024);
    assert_eq!(env.count("SELECT count(*) FROM sessions"), 0);
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 0);
    // One log line per bad input.
    let logs = read_logs(&env);
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), cases.len(), "{logs}");
    assert!(
        warnings.iter().all(|l| l.contains("input quarantined")),
        "{logs}"
    );
}

#[test]
fn a_stdin_that_never_closes_does_not_hang_the_hook() {
    let env = TestEnv::new();
    let mut c = env.cmd("cairn-hook");
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(br#"{"hook_event_name":"Stop","session_"#)
        .expect("write");
    // stdin stays open: the hook must give up on its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "cairn-hook hangs on an open stdin"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    assert_eq!(status.code(), Some(0));
    let out = child.wait_with_output().expect("output");
    assert_eq!(String::from_utf8_lossy(&out.stdout), PLAIN);
    let reasons = quarantine_reasons(&env);
    assert!(reasons[0].contains("stdin not closed"), "{reasons:?}");

    // A whole payload on a stdin left open is still captured.
    let mut c = env.cmd("cairn-hook");
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(session_end_that_ran(env.tmp.path()).as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("output");
    drop(stdin);
    assert_eq!(String::from_utf8_lossy(&out.stdout), PLAIN);
    assert_eq!(
        env.count("SELECT count(*) FROM sessions WHERE status = 'ended'"),
        1
    );
}

#[test]
fn an_unusable_data_dir_is_logged_and_answered() {
    let env = TestEnv::new();
    let file = env.tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").expect("write");
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_DATA_DIR", file.join("data"));
    let out = run_with_stdin(c, hook_fixture("PostToolUse.json").as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), PLAIN);
    // Kept outside the data dir (`store::fallback`), which the test's runtime dir holds.
    let err = stderr(&out);
    assert!(
        err.contains("event kept in") && err.contains("a-file"),
        "{err}"
    );
    assert!(
        err.contains(&env.runtime_dir().display().to_string()),
        "{err}"
    );

    // A cairn data dir whose database is not a database: the event waits in the spool.
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.data_dir).expect("dir");
    std::fs::write(env.db_path(), vec![b'x'; 8192]).expect("garbage");
    assert_eq!(hook(&env, hook_fixture("Stop.json").as_bytes()), PLAIN);
    assert_eq!(spool_files(&env).len(), 1);
    assert!(read_logs(&env).contains("spooled"));
}

/// The files waiting in the spool (not `applied/`, which keeps applied ones).
fn spool_files(env: &TestEnv) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(env.data_dir.join("spool"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_locked_database_spools_the_event() {
    let env = TestEnv::new();
    hook(&env, hook_fixture("SessionStart.json").as_bytes());
    let mut holder = env.db();
    let tx = holder
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("lock");
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_CAPTURE__LOCK_WAIT_MS", "100");
    let out = run_with_stdin(c, hook_fixture("PostToolUse.json").as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), PLAIN);
    tx.rollback().expect("unlock");
    let files = spool_files(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).expect("spool");
    assert!(text.contains("toolu_fake_6b86e2cedc91474d9c85"));
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 0);
}

#[test]
fn suppressed_hooks_write_nothing() {
    let env = TestEnv::new();
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_SUPPRESS_HOOKS", "1");
    let out = run_with_stdin(c, hook_fixture("SessionStart.json").as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), PLAIN);
    assert!(!env.data_dir.exists());
}

#[test]
fn excluded_projects_and_skipped_tools_write_nothing() {
    let env = TestEnv::new();
    let mut c = env.cmd("cairn-hook");
    c.env("CAIRN_CAPTURE__EXCLUDED_PROJECTS", "acme-*");
    let out = run_with_stdin(c, hook_fixture("UserPromptSubmit.json").as_bytes());
    assert_eq!(stdout(&out), PLAIN);
    hook(&env, hook_fixture("SessionStart.json").as_bytes());
    let mut todo: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    todo["tool_name"] = "TodoWrite".into();
    hook(&env, todo.to_string().as_bytes());
    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 0);
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 0);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 0);
}

#[test]
fn cairns_own_mcp_tool_calls_are_not_queued() {
    let env = TestEnv::new();
    hook(&env, hook_fixture("SessionStart.json").as_bytes());
    let call = |name: &str, id: &str| {
        let mut ev: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
        ev["tool_name"] = name.into();
        ev["tool_use_id"] = id.into();
        ev["tool_input"] = serde_json::json!({"query": "rate limit"});
        ev["tool_response"] =
            serde_json::json!([{"type": "text", "text": "1 result in project 'acme'"}]);
        ev.to_string()
    };
    // Even with `capture.skip_tools` emptied, cairn's own lookups are not memories.
    for (name, id) in [
        ("mcp__cairn__search", "toolu_own_1"),
        ("mcp__cairn__get_observations", "toolu_own_2"),
        ("mcp__plugin_cairn_cairn__timeline", "toolu_own_3"),
        ("mcp__github__search_issues", "toolu_other"),
    ] {
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_CAPTURE__SKIP_TOOLS", "[]");
        let out = run_with_stdin(c, call(name, id).as_bytes());
        assert_eq!(stdout(&out), PLAIN, "{}", stderr(&out));
    }
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE dedupe_key LIKE 'tool:toolu_own_%'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages WHERE dedupe_key = 'tool:toolu_other'"),
        1
    );
}

fn read_logs(env: &TestEnv) -> String {
    let mut all = String::new();
    if let Ok(dir) = std::fs::read_dir(env.data_dir.join("logs")) {
        for e in dir.flatten() {
            all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    all
}

fn all_bytes_under(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(all_bytes_under(&p));
            } else {
                out.extend(std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn private_spans_and_secrets_reach_neither_database_nor_logs() {
    const PRIVATE: &str = "CANARY-PRIVATE-7f3a";
    const AWS: &str = "AKIAQWERTYUIOPASDFGH";
    let env = TestEnv::new();
    let run = |input: &str| {
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_LOG__LEVEL", "trace");
        let out = run_with_stdin(c, input.as_bytes());
        assert_eq!(out.status.code(), Some(0));
        assert!(!stderr(&out).contains(PRIVATE) && !stderr(&out).contains(AWS));
    };
    let secret_text = format!("use <private>{PRIVATE}</private> and key {AWS} please");
    let mut prompt: Value =
        serde_json::from_str(&hook_fixture("UserPromptSubmit.json")).expect("json");
    prompt["prompt"] = secret_text.clone().into();
    run(&prompt.to_string());
    let mut tool: Value = serde_json::from_str(&hook_fixture("PostToolUse.json")).expect("json");
    tool["tool_input"]["command"] = secret_text.clone().into();
    tool["tool_response"]["stdout"] = secret_text.clone().into();
    run(&tool.to_string());
    let mut fail: Value =
        serde_json::from_str(&hook_fixture("PostToolUseFailure.json")).expect("json");
    fail["error"] = secret_text.clone().into();
    run(&fail.to_string());
    let mut stop: Value = serde_json::from_str(&hook_fixture("Stop.json")).expect("json");
    stop["last_assistant_message"] = secret_text.clone().into();
    run(&stop.to_string());
    // Bad input carrying both: quarantined, cleaned.
    run(&format!("{{\"broken\": \"{secret_text}\""));
    let mut unknown: Value =
        serde_json::from_str(&hook_fixture("Notification.json")).expect("json");
    unknown["message"] = secret_text.clone().into();
    run(&unknown.to_string());

    assert_eq!(env.count("SELECT count(*) FROM user_prompts"), 1);
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 3);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 2);
    let text: String = env
        .db()
        .query_row("SELECT prompt_text FROM user_prompts", [], |r| r.get(0))
        .expect("prompt");
    assert_eq!(text, "use  and key [REDACTED:aws-access-key] please");
    let everything = all_bytes_under(&env.data_dir);
    assert!(!contains(&everything, PRIVATE), "private canary stored");
    assert!(!contains(&everything, AWS), "aws canary stored");
    assert!(contains(&everything, "REDACTED:aws-access-key"));
}

#[test]
fn the_worker_is_autostarted_once_detached() {
    let env = TestEnv::new();
    // A copy of cairn-hook beside a fake cairn-worker that records how it was started.
    let bin_dir = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    let hook_copy = bin_dir.join("cairn-hook");
    std::fs::copy(crate::support::bin("cairn-hook"), &hook_copy).expect("copy");
    let record = env.tmp.path().join("worker-started");
    let script = format!(
        "#!/bin/sh\necho \"$* sid=$(ps -o sid= -p $$ | tr -d ' ') pid=$$ data=$CAIRN_DATA_DIR\" >> '{}'\n",
        record.display()
    );
    let fake = bin_dir.join("cairn-worker");
    std::fs::write(&fake, script).expect("script");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");

    let mut children = Vec::new();
    for i in 0..16 {
        let mut c = Command::new(&hook_copy);
        c.env("CAIRN_DATA_DIR", &env.data_dir)
            .env("HOME", env.tmp.path())
            .env("CAIRN_WORKER__AUTOSTART", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        // A binary just written can be briefly "busy" (ETXTBSY) while another test
        // thread's fork still holds the write descriptor the copy used: try again.
        let mut tries = 0;
        let mut child = loop {
            match c.spawn() {
                Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.expect("spawn"),
            }
        };
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(tool_event(i).as_bytes()).expect("write");
        drop(stdin);
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(String::from_utf8_lossy(&out.stdout), PLAIN);
    }
    // Every hook has exited, so their log says how many workers they started (each line is
    // written before its hook exits); wait until each of those has recorded itself.
    let logs = cairn_core::store::paths::DataDir::new(&env.data_dir).logs();
    let started: usize = std::fs::read_dir(&logs)
        .expect("hook logs")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hook-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .map(|log| {
            log.lines()
                .filter(|l| l.contains("started ") && l.contains("cairn-worker (pid "))
                .count()
        })
        .sum();
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&record).unwrap_or_default();
        if text.lines().count() >= started.max(1) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "{started} workers started, these recorded themselves: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(started, 1, "started {started} times: {text}");
    assert_eq!(lines.len(), 1, "started more than once: {text}");
    assert!(lines[0].starts_with("--autostarted "), "{text}");
    let field = |k: &str| {
        lines[0]
            .split(' ')
            .find_map(|f| f.strip_prefix(k))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        field("sid="),
        field("pid="),
        "not in its own session: {text}"
    );
    assert_eq!(field("data="), env.data_dir.display().to_string());
    assert_eq!(
        env.count("SELECT count(*) FROM pending_messages"),
        16,
        "logs: {} spool: {:?}",
        read_logs(&env),
        spool_files(&env)
    );
}

#[test]
fn an_event_name_on_the_command_line_serves_payloads_without_one() {
    let env = TestEnv::new();
    let mut v: Value = serde_json::from_str(&session_end_that_ran(env.tmp.path())).expect("json");
    v.as_object_mut().expect("object").remove("hook_event_name");
    let out = env.run("cairn-hook", &["SessionEnd"], v.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), PLAIN);
    assert_eq!(
        env.count("SELECT count(*) FROM sessions WHERE status = 'ended'"),
        1
    );
    // The payload's own name wins over the argument.
    let out = env.run(
        "cairn-hook",
        &["SessionEnd"],
        hook_fixture("SessionStart.json").as_bytes(),
    );
    assert!(stdout(&out).contains("hookSpecificOutput"));
    assert_eq!(
        env.count("SELECT count(*) FROM sessions WHERE status = 'active'"),
        1
    );
}

#[test]
fn unreadable_settings_keep_the_event_until_they_can_be_read() {
    // A typo in settings.json: the event is kept (spooled, cleaned with the default rules),
    // nothing reaches the database, `cairn status` names the file; once the file is fixed,
    // its rules apply (here: the project is excluded, so the event is dropped then).
    for excluded in [true, false] {
        let env = TestEnv::new();
        std::fs::create_dir_all(&env.data_dir).expect("data dir");
        let settings = env.data_dir.join("settings.json");
        let rules = if excluded { "[\"acme-*\"]" } else { "[]" };
        std::fs::write(
            &settings,
            format!("{{\"capture\": {{\"excluded_projects\": {rules}}},}}"),
        )
        .expect("settings");
        let mut c = env.cmd("cairn-hook");
        c.env("CAIRN_WORKER__AUTOSTART", "true");
        let out = run_with_stdin(c, hook_fixture("UserPromptSubmit.json").as_bytes());
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(stdout(&out), PLAIN);
        assert_eq!(
            env.count("SELECT count(*) FROM sessions"),
            0,
            "nothing written before the settings are read"
        );
        assert_eq!(spool_files(&env).len(), 1, "the event is kept");
        assert!(
            !env.data_dir.join("worker.autostart").exists(),
            "no worker started"
        );
        assert!(read_logs(&env).contains("settings.json"));

        let status = env.run("cairn", &["status"], b"");
        assert_eq!(status.status.code(), Some(1), "{}", stdout(&status));
        let text = stdout(&status);
        assert!(
            text.contains("settings cannot be read") && text.contains("settings.json"),
            "{text}"
        );

        std::fs::write(
            &settings,
            format!("{{\"capture\": {{\"excluded_projects\": {rules}}}}}"),
        )
        .expect("fixed");
        let out = env.run("cairn-worker", &["--once"], b"");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(spool_files(&env).is_empty());
        let prompts = env.count("SELECT count(*) FROM user_prompts");
        assert_eq!(prompts, if excluded { 0 } else { 1 });
        let status = env.run("cairn", &["status"], b"");
        assert!(!stdout(&status).contains("settings cannot be read"));
    }
}

#[test]
fn help_is_for_people_and_touches_nothing() {
    let env = TestEnv::new();
    for flag in ["--help", "-h"] {
        let out = env.run("cairn-hook", &[flag], b"");
        assert_eq!(out.status.code(), Some(0));
        assert!(
            stdout(&out).contains("Usage: cairn-hook"),
            "{}",
            stdout(&out)
        );
    }
    let out = env.run("cairn-hook", &["--version"], b"");
    assert!(stdout(&out).starts_with("cairn-hook "));
    assert!(!env.data_dir.exists(), "help never creates the data dir");
}

#[test]
fn fields_of_the_wrong_type_no_longer_send_the_event_to_quarantine() {
    let env = TestEnv::new();
    let tool = |i: usize, extra: &str| {
        format!(
            r#"{{"hook_event_name":"PostToolUse","session_id":"{SESSION}","cwd":"/x","tool_name":"Bash","tool_use_id":"toolu_{i}","tool_input":{{"command":"ls"}}{extra}}}"#
        )
    };
    let inputs: Vec<Vec<u8>> = vec![
        tool(1, r#","prompt_id":7"#).into_bytes(),
        tool(2, r#","agent_id":1"#).into_bytes(),
        tool(3, r#","agent_type":true"#).into_bytes(),
        tool(4, r#","is_interrupt":"false""#).into_bytes(),
        [b"\xef\xbb\xbf".as_slice(), tool(5, "").as_bytes()].concat(),
        format!(r#"{{"hook_event_name":"Stop","session_id":"{SESSION}","cwd":"/x","last_assistant_message":[{{"type":"text","text":"done"}}]}}"#).into_bytes(),
        format!(r#"{{"hook_event_name":"SessionEnd","session_id":"{SESSION}","cwd":"/x","reason":{{}}}}"#).into_bytes(),
        format!(r#"{{"hook_event_name":"SessionStart","session_id":"{SESSION}","cwd":"/x","source":1}}"#).into_bytes(),
        format!(r#"{{"hook_event_name":"Stop","session_id":"{SESSION}","cwd":["/x"],"last_assistant_message":"ok"}}"#).into_bytes(),
        format!(r#"{{"hook_event_name":"UserPromptSubmit","session_id":"{SESSION}","cwd":"/x","prompt":42}}"#).into_bytes(),
        // A string JavaScript cut inside an emoji, and bytes that are not UTF-8.
        [
            format!(r#"{{"hook_event_name":"UserPromptSubmit","session_id":"{SESSION}","cwd":"/x","prompt":"cut \ud83d here "#).as_bytes(),
            b"\xff\xfe".as_slice(),
            b"\"}".as_slice(),
        ]
        .concat(),
    ];
    for input in &inputs {
        hook(&env, input);
    }
    // A `cwd` that is no path, with no project dir to fall back on: quarantined, saying so.
    assert_eq!(
        quarantine_reasons(&env),
        vec!["field cwd has the wrong type".to_string()]
    );
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 6);
    assert_eq!(
        env.count("SELECT count(*) FROM user_prompts WHERE prompt_text IN ('42', 'cut \u{fffd} here \u{fffd}\u{fffd}')"),
        2
    );
    let logs = read_logs(&env);
    assert!(
        logs.contains("field(s) of the wrong type ignored: agent_type"),
        "{logs}"
    );
}

#[test]
fn hostile_dot_git_and_huge_identifiers_neither_block_nor_bloat() {
    let env = TestEnv::new();
    let root = env.tmp.path().join("work");
    std::fs::create_dir_all(root.join("fifo/deep")).expect("mkdir");
    assert!(
        Command::new("mkfifo")
            .arg(root.join("fifo/.git"))
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::create_dir_all(root.join("zero/deep")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", root.join("zero/.git")).expect("symlink");
    let long = "x".repeat(1 << 20);
    for (i, sub) in ["fifo/deep", "zero/deep"].iter().enumerate() {
        let cwd = root.join(sub);
        let input = serde_json::json!({
            "hook_event_name": "PostToolUse",
            "session_id": format!("{long}{i}"),
            "cwd": cwd,
            "tool_name": "Bash",
            "tool_use_id": format!("{long}{i}"),
            "prompt_id": long,
            "agent_id": long,
            "tool_input": {"command": "ls"},
        });
        let started = Instant::now();
        hook(&env, input.to_string().as_bytes());
        assert!(started.elapsed() < Duration::from_secs(10), "{sub} blocked");
    }
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 2);
    assert_eq!(
        env.count("SELECT max(length(session_id)) FROM sessions"),
        256
    );
    assert!(env.count("SELECT max(length(payload)) FROM pending_messages") < 4096);
}

#[test]
fn quarantine_replay_brings_back_inputs_cairn_now_understands() {
    let env = TestEnv::new();
    // Something this cairn still refuses, through the hook.
    hook(
        &env,
        br#"{"hook_event_name":"Stop","session_id":{"a":1},"cwd":"/x"}"#,
    );
    // What an older cairn refused (a numeric prompt_id), as it stored it.
    let old = format!(
        r#"{{"hook_event_name":"PostToolUse","session_id":"{SESSION}","cwd":"/x","tool_name":"Bash","tool_use_id":"toolu_old","prompt_id":7,"tool_input":{{"command":"ls"}}}}"#
    );
    let db = env.db();
    for (raw_len, at) in [(old.len() as i64, 1_000i64), (1i64 << 24, 2_000)] {
        db.execute(
            "INSERT INTO quarantine (event, reason, raw, raw_len, created_at, kind)
             VALUES ('PostToolUse', 'invalid type: integer `7`', ?1, ?2, ?3, 'invalid')",
            rusqlite::params![old.as_bytes(), raw_len, at],
        )
        .expect("insert");
    }
    drop(db);
    let out = env.run("cairn", &["quarantine", "replay", "--all", "--json"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results: Value = serde_json::from_str(&stdout(&out)).expect("json");
    let outcomes: Vec<&str> = results
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, vec!["rejected", "captured", "cut"]);
    assert_eq!(env.count("SELECT count(*) FROM pending_messages"), 1);
    assert_eq!(env.count("SELECT count(*) FROM quarantine"), 2);
    // Nothing left that can be replayed: exit 1.
    let out = env.run("cairn", &["quarantine", "replay", "--all"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("cannot be replayed"),
        "{}",
        stdout(&out)
    );
}
